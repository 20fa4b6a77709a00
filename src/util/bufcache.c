/*
 * Buffers for large payloads, kept warm between uses (bufcache.h).
 *
 * Every buffer carries a 16-byte header just before the address handed
 * out: its kind (small: malloc'd; large: mapped) and, for a large one, the
 * usable bytes after the header's page. A large buffer is a private
 * anonymous mapping of whole granules (64 KiB; 2 MiB from 2 MiB on, so
 * sizes that differ a little reuse each other); the first page holds the
 * header at its end, so the buffer itself is page-aligned.
 */
#include "util/bufcache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define BUF_MAGIC  0x52425546u /* "RBUF" */
#define KIND_SMALL 1u
#define KIND_LARGE 2u
#define HDR        16u
#define PAGE       4096u
#define GRAN_SMALL ((size_t)64 * 1024)
#define GRAN_HUGE  ((size_t)2 * 1024 * 1024)

typedef struct {
    uint64_t cap; /* large: usable bytes; small: requested bytes */
    uint32_t magic;
    uint32_t kind;
} buf_hdr_t;

typedef struct {
    void *p;      /* as handed out; NULL: a free slot */
    size_t cap;   /* usable bytes */
    uint64_t age; /* when it was cached: evict the oldest first */
} slot_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static size_t limit_bytes;
static slot_t slots[RDMX_BUF_CACHE_SLOTS];
static rdmx_buf_stats_t stats;
static uint64_t clock_;

static void read_limit(void)
{
    const char *env = getenv("RDMX_BUF_CACHE_MB");
    unsigned long mb = 256;

    if (env != NULL && *env != '\0') {
        char *end;
        unsigned long v = strtoul(env, &end, 10);
        if (*end == '\0' && v <= (1ul << 20))
            mb = v;
    }
    limit_bytes = (size_t)mb << 20;
}

static buf_hdr_t *hdr_of(void *p)
{
    return (buf_hdr_t *)((char *)p - HDR);
}

static void *map_large(size_t len)
{
    size_t gran = len >= GRAN_HUGE ? GRAN_HUGE : GRAN_SMALL;
    size_t map = (len + PAGE + gran - 1) / gran * gran;
    char *base;
    buf_hdr_t *h;

    if (len > SIZE_MAX - PAGE - gran)
        return NULL;
    base = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                -1, 0);
    if (base == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (map >= GRAN_HUGE)
        (void)madvise(base, map, MADV_HUGEPAGE); /* advice only */
#endif
    h = (buf_hdr_t *)(base + PAGE - HDR);
    h->cap = map - PAGE;
    h->magic = BUF_MAGIC;
    h->kind = KIND_LARGE;
    return base + PAGE;
}

static void unmap_large(void *p, size_t cap)
{
    munmap((char *)p - PAGE, cap + PAGE);
}

void *rdmx__buf_alloc(size_t len)
{
    slot_t *best = NULL;
    void *p;

    if (len < RDMX_BUF_LARGE) {
        buf_hdr_t *h = malloc(HDR + (len ? len : 1));
        if (h == NULL)
            return NULL;
        h->cap = len;
        h->magic = BUF_MAGIC;
        h->kind = KIND_SMALL;
        return (char *)h + HDR;
    }
    pthread_once(&once, read_limit);
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < RDMX_BUF_CACHE_SLOTS; i++) {
        slot_t *s = &slots[i];
        /* big enough, and not more than twice too big */
        if (s->p != NULL && s->cap >= len && s->cap / 2 <= len &&
            (best == NULL || s->cap < best->cap))
            best = s;
    }
    if (best != NULL) {
        p = best->p;
        best->p = NULL;
        stats.cached--;
        stats.cached_bytes -= best->cap;
        stats.hits++;
        pthread_mutex_unlock(&lock);
        return p;
    }
    stats.misses++;
    pthread_mutex_unlock(&lock);
    return map_large(len);
}

void rdmx__buf_free(void *p)
{
    buf_hdr_t *h;
    size_t cap;
    slot_t *free_slot;

    if (p == NULL)
        return;
    h = hdr_of(p);
    if (h->magic != BUF_MAGIC)
        abort(); /* not ours, or its header was overwritten */
    if (h->kind == KIND_SMALL) {
        h->magic = 0;
        free(h);
        return;
    }
    cap = (size_t)h->cap;
    pthread_once(&once, read_limit);
    pthread_mutex_lock(&lock);
    if (cap > limit_bytes) {
        pthread_mutex_unlock(&lock);
        unmap_large(p, cap);
        return;
    }
    /* Make room: the oldest go first. */
    for (;;) {
        slot_t *oldest = NULL;
        free_slot = NULL;
        for (unsigned i = 0; i < RDMX_BUF_CACHE_SLOTS; i++) {
            if (slots[i].p == NULL)
                free_slot = free_slot ? free_slot : &slots[i];
            else if (oldest == NULL || slots[i].age < oldest->age)
                oldest = &slots[i];
        }
        if (free_slot != NULL && stats.cached_bytes + cap <= limit_bytes)
            break;
        /* (oldest is set: the cache holds something, or cap would have
         * fitted an empty one) */
        unmap_large(oldest->p, oldest->cap);
        stats.cached--;
        stats.cached_bytes -= oldest->cap;
        oldest->p = NULL;
    }
    free_slot->p = p;
    free_slot->cap = cap;
    free_slot->age = ++clock_;
    stats.cached++;
    stats.cached_bytes += cap;
    pthread_mutex_unlock(&lock);
}

void rdmx__buf_stats(rdmx_buf_stats_t *stats_p)
{
    pthread_mutex_lock(&lock);
    *stats_p = stats;
    pthread_mutex_unlock(&lock);
}
