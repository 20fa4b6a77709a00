/*
 * rdmx lambda — a fixed-address arena for one Lua state, and images of it.
 * See arena.h and docs/LAMBDA.md, "Fresh states from an image".
 */
#include "lambda/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* 32 classes of 16-byte steps up to 512 B, then four per power of two. */
#define SMALL_MAX 512u
#define NCLASSES  256u
/* Bytes the arena may keep touched beyond an image before a restore gives
 * them back (a call that used more pays its page faults again). */
#define TRIM_SLACK ((size_t)2 << 20)

/* At the base of the arena, inside every image. */
typedef struct {
    size_t top;           /* bump offset from the base */
    void *free[NCLASSES]; /* one list per class, linked through blocks */
} arena_hdr_t;

struct rdmx__arena {
    unsigned char *base;
    size_t size;
    size_t page;
    size_t touched; /* highest bump offset since the last trim */
    arena_hdr_t *h;
};

#define HDR_SIZE ((sizeof(arena_hdr_t) + 15) & ~(size_t)15)

/* The class of a block of @p n bytes (1 <= n), and its size. */
static unsigned size_class(size_t n, size_t *csize_p)
{
    size_t m, step, k;
    unsigned b;

    if (n <= SMALL_MAX) {
        size_t c = (n + 15) >> 4;
        *csize_p = c << 4;
        return (unsigned)c - 1;
    }
    m = n - 1;
    b = 63u - (unsigned)__builtin_clzll((unsigned long long)m); /* >= 9 */
    step = (size_t)1 << (b - 2);
    k = (m - ((size_t)1 << b)) / step + 1; /* 1..4 */
    *csize_p = ((size_t)1 << b) + k * step;
    return 32u + (b - 9u) * 4u + (unsigned)(k - 1);
}

rdmx__arena_t *rdmx__arena_create(size_t size)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    rdmx__arena_t *a;
    void *base;

    if (size < HDR_SIZE || size > SIZE_MAX - page)
        return NULL;
    size = (size + page - 1) & ~(page - 1);
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        free(a);
        return NULL;
    }
    a->base = base;
    a->size = size;
    a->page = page;
    a->h = base;
    a->h->top = HDR_SIZE;
    a->touched = HDR_SIZE;
    return a;
}

void rdmx__arena_destroy(rdmx__arena_t *a)
{
    if (a == NULL)
        return;
    munmap(a->base, a->size);
    free(a);
}

static void *arena_alloc(rdmx__arena_t *a, size_t n)
{
    arena_hdr_t *h = a->h;
    size_t csize;
    unsigned c;
    void *p;

    if (n > a->size)
        return NULL;
    c = size_class(n, &csize);
    if ((p = h->free[c]) != NULL) {
        memcpy(&h->free[c], p, sizeof(void *));
        return p;
    }
    if (csize > a->size - h->top)
        return NULL;
    p = a->base + h->top;
    h->top += csize;
    if (h->top > a->touched)
        a->touched = h->top;
    return p;
}

static void arena_free(rdmx__arena_t *a, void *p, size_t n)
{
    size_t csize;
    unsigned c = size_class(n, &csize);

    memcpy(p, &a->h->free[c], sizeof(void *));
    a->h->free[c] = p;
}

void *rdmx__arena_realloc(rdmx__arena_t *a, void *p, size_t osize, size_t nsize)
{
    size_t ocs, ncs;
    void *q;

    if (nsize == 0) {
        if (p != NULL)
            arena_free(a, p, osize);
        return NULL;
    }
    if (p == NULL) /* osize tells Lua's object type here, not a size */
        return arena_alloc(a, nsize);
    if (nsize <= a->size && size_class(osize, &ocs) == size_class(nsize, &ncs))
        return p;
    q = arena_alloc(a, nsize);
    if (q == NULL)
        return nsize < osize ? p : NULL; /* a shrink keeps its block */
    memcpy(q, p, osize < nsize ? osize : nsize);
    arena_free(a, p, osize);
    return q;
}

size_t rdmx__arena_used(const rdmx__arena_t *a)
{
    return a->h->top;
}

int rdmx__arena_save(const rdmx__arena_t *a, rdmx__arena_image_t *img)
{
    img->len = a->h->top;
    img->bytes = malloc(img->len);
    if (img->bytes == NULL) {
        img->len = 0;
        return -1;
    }
    memcpy(img->bytes, a->base, img->len);
    return 0;
}

void rdmx__arena_restore(rdmx__arena_t *a, const rdmx__arena_image_t *img)
{
    size_t page = a->page;

    memcpy(a->base, img->bytes, img->len);
    if (a->touched > img->len + TRIM_SLACK) {
        size_t from = (img->len + TRIM_SLACK + page - 1) & ~(page - 1);
        size_t to = (a->touched + page - 1) & ~(page - 1);
        if (to > from)
            (void)madvise(a->base + from, to - from, MADV_DONTNEED);
        a->touched = from;
    }
}

void rdmx__arena_image_free(rdmx__arena_image_t *img)
{
    free(img->bytes);
    img->bytes = NULL;
    img->len = 0;
}
