/*
 * kv_torture: concurrent overwrites and reads of ONE key never show a torn,
 * mixed or stale-metadata value.
 *
 * One rdmx-kvd (--workers 2 --inline-threshold 1k --memory 64m). Three
 * writer threads and three reader threads, each with its own rdmx worker
 * and rdmx_kv client (inline_max 1 KiB), hammer the key "torture" for
 * ~10 s (4 s under sanitizers):
 *
 * - Writers store self-describing values of 1 B .. 256 KiB (log-uniform;
 *   one in eight below 32 B): values of 32 B and more carry a header (length,
 *   seed, checksum of the body) and a body that is the pattern of the seed;
 *   shorter values are the pattern of their length. The client flags hold
 *   the seed (or the length). Writers alternate between a registered buffer
 *   (values over 1 KiB pulled by the server with RDMA read) and plain memory
 *   (inline); writer 0 also deletes the key (every 64th operation) and
 *   flushes the server (every 128th), writer 2 gives every 16th value a
 *   TTL of 1-5 ms (it expires while readers fetch it). Every successful
 *   PUT's version (CAS) is logged with its seed and length.
 * - Readers GET into a registered buffer (values over 1 KiB RDMA-written by
 *   the server), into plain memory (inline), and every fourth read of
 *   reader 2 into a 16 KiB registered buffer (larger values must give
 *   RDMX_ERR_TOO_BIG with the right length and leave the buffer untouched).
 *   Every value is verified whole: header, length == meta.length, checksum,
 *   body pattern, flags; the bytes after it untouched, but for zeros where
 *   a mapped GET (over shm) copied a value that changed under the copy and
 *   was asked again (counted "zeroed tails"); a miss or a TOO_BIG answer
 *   leaves nothing but such zeros.
 *
 * Afterwards: each version a reader saw was written by a writer with exactly
 * that seed and length (metadata and value belong together); the versions
 * each reader saw never go backwards; the server's counters match the
 * operations done (cmd_get == reads + get_again, the GETs asked again
 * after a mapped copy met a write; get_misses == misses, cmd_set ==
 * writes, deletes and flushes, no bad requests); and
 * once the key is deleted, no reservation and no unlinked item waits for
 * a release, and the server's free memory is back to what it was before
 * (no value block leaked by a reference or reservation; waited for up to
 * 2 s: a release may come late on a loaded machine).
 */
#define _GNU_SOURCE
#include "harness.h"
#include "kvd_launcher.h"

#include <rdmx/kv.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEY       "torture"
#define KLEN      (sizeof(KEY) - 1)
#define MAX_VALUE (256 * TH_KIB)
#define HDR       24
#define MAGIC     ((uint64_t)0x746f72747572ull)
#define SMALL_CAP (16 * TH_KIB)
#define SLACK     256
#define N_WRITERS 3
#define N_READERS 3

/* The bits of a PUT's mode, flags, TTL and version: each is given. */
#define PUT_OPTS                                                               \
    (RDMX_KV_OP_PARAM_FIELD_MODE | RDMX_KV_OP_PARAM_FIELD_FLAGS |              \
     RDMX_KV_OP_PARAM_FIELD_TTL | RDMX_KV_OP_PARAM_FIELD_CAS)

typedef struct {
    uint64_t cas, seed;
    uint64_t len;
} obs_t;

typedef struct {
    obs_t *v;
    size_t n, cap;
} obs_log_t;

static void obs_add(obs_log_t *l, uint64_t cas, uint64_t seed, uint64_t len)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 65536;
        l->v = realloc(l->v, l->cap * sizeof(*l->v));
        CHECK(l->v != NULL);
    }
    l->v[l->n++] = (obs_t){cas, seed, len};
}

typedef struct {
    int index, writer;
    rdmx_worker_t *w;
    rdmx_kv_t *kv;
    rdmx_mr_t *mr;
    uint8_t *plain;
    obs_log_t log;
    uint64_t ops, gets_rdma, gets_inline, too_big, misses, puts_rdma,
        puts_inline, deletes, flushes, bytes;
    uint64_t scrubbed; /* reads with a zeroed tail (a raced mapped copy) */
} thr_t;

static atomic_int stop, failed;
static char fail_msg[1024];
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((format(printf, 2, 3))) static void tfail(thr_t *t,
                                                        const char *fmt, ...)
{
    va_list ap;
    char msg[768];

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&fail_lock);
    if (!atomic_load(&failed))
        snprintf(fail_msg, sizeof(fail_msg), "%s %d: %s",
                 t->writer ? "writer" : "reader", t->index, msg);
    th_log("FAIL: %s %d: %s", t->writer ? "writer" : "reader", t->index, msg);
    atomic_store(&failed, 1);
    atomic_store(&stop, 1);
    pthread_mutex_unlock(&fail_lock);
}

static uint64_t xs(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Checksum of the body: a mix of every 8-byte word and the tail. */
static uint64_t body_sum(const uint8_t *p, size_t len)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
    }
    for (; i < len; i++)
        h = (h ^ p[i]) * 0x94d049bb133111ebull;
    return h;
}

static uint64_t small_seed(size_t len)
{
    return th_seed(999, len, 0);
}

/* Build the value of @len bytes for @seed in @p; returns its flags. */
static uint32_t make_value(uint8_t *p, size_t len, uint64_t seed)
{
    if (len < 32) {
        th_fill(p, len, small_seed(len));
        return (uint32_t)len;
    }
    th_fill_at(p + HDR, len - HDR, seed, HDR);
    put64(p, (uint64_t)len ^ MAGIC);
    put64(p + 8, seed);
    put64(p + 16, body_sum(p + HDR, len - HDR));
    return (uint32_t)seed;
}

/* Verify a value read back; its seed into *seed_p. NULL, or what is wrong. */
static const char *check_value(const uint8_t *p, size_t len, uint32_t flags,
                               uint64_t *seed_p, char *why, size_t why_size)
{
    uint64_t seed;
    int64_t bad;

    if (len < 32) {
        *seed_p = 0;
        if (flags != (uint32_t)len) {
            snprintf(why, why_size, "%zu-byte value with flags %u", len, flags);
            return why;
        }
        if ((bad = th_check(p, len, small_seed(len))) >= 0) {
            snprintf(why, why_size, "%zu-byte value wrong at byte %lld", len,
                     (long long)bad);
            return why;
        }
        return NULL;
    }
    seed = get64(p + 8);
    *seed_p = seed;
    if ((get64(p) ^ MAGIC) != len) {
        snprintf(why, why_size,
                 "header says %" PRIu64 " bytes, the value has %zu (torn or "
                 "mixed)",
                 get64(p) ^ MAGIC, len);
        return why;
    }
    if (flags != (uint32_t)seed) {
        snprintf(why, why_size,
                 "flags %08x do not belong to the value (seed %016" PRIx64
                 ", %zu bytes)",
                 flags, seed, len);
        return why;
    }
    if (get64(p + 16) != body_sum(p + HDR, len - HDR)) {
        bad = th_check_at(p + HDR, len - HDR, seed, HDR);
        snprintf(why, why_size,
                 "checksum mismatch in a %zu-byte value (seed %016" PRIx64
                 "): first wrong byte %lld",
                 len, seed, bad >= 0 ? (long long)(bad + HDR) : -1LL);
        return why;
    }
    if ((bad = th_check_at(p + HDR, len - HDR, seed, HDR)) >= 0) {
        snprintf(why, why_size,
                 "%zu-byte value (seed %016" PRIx64 ") wrong at byte %lld", len,
                 seed, (long long)(bad + HDR));
        return why;
    }
    return NULL;
}

static size_t pick_size(uint64_t *rng)
{
    uint64_t r = xs(rng);

    if (r % 8 == 0)
        return 1 + (size_t)(xs(rng) % 31);
    /* log-uniform 32 B .. 256 KiB */
    {
        unsigned bits = 5 + (unsigned)(xs(rng) % 14); /* 2^5 .. 2^18 */
        size_t lo = (size_t)1 << bits;
        size_t len = lo + (size_t)(xs(rng) % lo);
        return len > MAX_VALUE ? MAX_VALUE : len;
    }
}

static void *writer_main(void *arg)
{
    thr_t *t = arg;
    uint64_t rng = th_seed(7, (uint64_t)t->index, 1);
    uint8_t *reg = rdmx_mr_addr(t->mr);

    while (!atomic_load(&stop)) {
        size_t len = pick_size(&rng);
        uint64_t seed = th_seed(100 + (uint64_t)t->index, t->ops, 3);
        int use_reg = (t->ops & 1) != 0;
        uint8_t *p = use_reg ? reg + (t->ops % 64) : t->plain;
        rdmx_kv_op_params_t o = {.field_mask =
                                     PUT_OPTS | RDMX_KV_OP_PARAM_FIELD_MR,
                                 .mr = use_reg ? t->mr : NULL,
                                 .mode = RDMX_KV_PUT_SET};
        uint64_t cas = 0;
        rdmx_status_t st;

        t->ops++;
        if (t->index == 0 && t->ops % 128 == 0) {
            st = rdmx_kv_flush(t->kv);
            if (st != RDMX_OK) {
                tfail(t, "flush: %s: %s", rdmx_status_name(st),
                      rdmx_error_detail());
                break;
            }
            t->flushes++;
            continue;
        }
        if (t->index == 0 && t->ops % 64 == 0) {
            st = rdmx_kv_delete(t->kv, KEY, KLEN, 0);
            if (st != RDMX_OK && st != RDMX_ERR_NOT_FOUND) {
                tfail(t, "delete: %s: %s", rdmx_status_name(st),
                      rdmx_error_detail());
                break;
            }
            t->deletes++;
            continue;
        }
        if (t->index == 2 && t->ops % 16 == 0)
            o.ttl_ms = 1 + (uint32_t)(t->ops % 5); /* expires while read */
        o.flags = make_value(p, len, seed);
        st = rdmx_kv_put(t->kv, KEY, KLEN, p, len, &o, &cas);
        if (st != RDMX_OK) {
            tfail(t, "put of %zu bytes (%s): %s: %s", len,
                  use_reg ? "registered" : "plain", rdmx_status_name(st),
                  rdmx_error_detail());
            break;
        }
        if (cas == 0) {
            tfail(t, "put returned version 0");
            break;
        }
        obs_add(&t->log, cas, len < 32 ? 0 : seed, len);
        if (use_reg && len > 1024)
            t->puts_rdma++;
        else
            t->puts_inline++;
        t->bytes += len;
    }
    return NULL;
}

/*
 * Where the canary starts again after @from in @p (@cap bytes of buffer
 * and a canary byte after them), or cap + 1 if a byte in between is
 * neither the canary nor 0: a mapped GET whose copy met a rewrite zeroes
 * what it wrote past the value it returns (docs/KV.md, "Mapped GETs over
 * shared memory"); nothing else may be written there.
 */
static size_t tail_end(const uint8_t *p, size_t from, size_t cap)
{
    size_t i = from;

    while (i < cap && p[i] == 0)
        i++;
    for (size_t k = i; k <= cap; k++)
        if (p[k] != 0xEE)
            return cap + 1;
    return i;
}

static void *reader_main(void *arg)
{
    thr_t *t = arg;
    uint8_t *bufs[2] = {rdmx_mr_addr(t->mr), t->plain};
    size_t dirty[2] = {0, 0}; /* bytes from the start not 0xEE */
    uint64_t last_cas = 0, rng = th_seed(8, (uint64_t)t->index, 1);
    const rdmx_kv_op_params_t in_reg = {.field_mask = RDMX_KV_OP_PARAM_FIELD_MR,
                                        .mr = t->mr};
    char why[512];

    memset(bufs[0], 0xEE, MAX_VALUE + SLACK);
    memset(bufs[1], 0xEE, MAX_VALUE + SLACK);
    while (!atomic_load(&stop)) {
        int small = t->index == 2 && t->ops % 4 == 0;
        int mode = small ? 0 : (int)(t->ops % 2); /* 0: registered */
        size_t off = (size_t)(xs(&rng) % 64);
        uint8_t *p = bufs[mode] + off;
        size_t cap = small ? SMALL_CAP : MAX_VALUE + SLACK - 64;
        rdmx_kv_meta_t m;
        uint64_t seed = 0;
        rdmx_status_t st;
        const char *bad;
        size_t i;

        memset(bufs[mode], 0xEE, dirty[mode]);
        dirty[mode] = 0;
        memset(&m, 0, sizeof(m));
        t->ops++;
        st = rdmx_kv_get(t->kv, KEY, KLEN, p, cap, mode == 0 ? &in_reg : NULL,
                         &m);
        if (st == RDMX_ERR_NOT_FOUND) {
            /* a mapped copy of a value deleted under it is zeroed whole */
            if ((i = tail_end(p, 0, cap)) > cap) {
                tfail(t, "miss wrote a byte other than a zero of a raced "
                         "mapped copy");
                break;
            }
            t->scrubbed += i > 0;
            dirty[mode] = off + i + 1;
            t->misses++;
            continue;
        }
        if (st == RDMX_ERR_TOO_BIG) {
            if (!small || m.length <= cap) {
                tfail(t, "TOO_BIG with length %zu into %zu bytes", m.length,
                      cap);
                break;
            }
            if ((i = tail_end(p, 0, cap)) > cap) {
                tfail(t,
                      "TOO_BIG answer (value %zu > %zu) wrote a byte other "
                      "than a zero of a raced mapped copy",
                      m.length, cap);
                break;
            }
            t->scrubbed += i > 0;
            dirty[mode] = off + i + 1;
            if (m.cas < last_cas) {
                tfail(t, "version went back from %" PRIu64 " to %" PRIu64,
                      last_cas, m.cas);
                break;
            }
            last_cas = m.cas;
            t->too_big++;
            continue;
        }
        dirty[mode] = off + cap + 1; /* whatever it wrote */
        if (st != RDMX_OK) {
            tfail(t, "get (%s, capacity %zu): %s: %s",
                  mode == 0 ? "registered" : "plain", cap, rdmx_status_name(st),
                  rdmx_error_detail());
            break;
        }
        if (m.length > cap || m.length == 0) {
            tfail(t, "get returned meta.length %zu (capacity %zu)", m.length,
                  cap);
            break;
        }
        dirty[mode] = off + m.length + 1;
        if ((bad = check_value(p, m.length, m.flags, &seed, why,
                               sizeof(why))) != NULL) {
            tfail(t, "%s get, version %" PRIu64 ": %s",
                  mode == 0 ? "registered" : "plain", m.cas, bad);
            break;
        }
        if ((i = tail_end(p, m.length, cap)) > cap) {
            tfail(t,
                  "get of %zu bytes wrote after the value a byte other than "
                  "a zero of a raced mapped copy",
                  m.length);
            break;
        }
        t->scrubbed += i > m.length;
        dirty[mode] = off + i + 1;
        if (m.cas < last_cas) {
            tfail(t, "version went back from %" PRIu64 " to %" PRIu64, last_cas,
                  m.cas);
            break;
        }
        last_cas = m.cas;
        obs_add(&t->log, m.cas, seed, m.length);
        if (mode == 0 && m.length > 1024)
            t->gets_rdma++;
        else
            t->gets_inline++;
        t->bytes += m.length;
    }
    return NULL;
}

static int cmp_cas(const void *a, const void *b)
{
    const obs_t *x = a, *y = b;
    return x->cas < y->cas ? -1 : x->cas > y->cas;
}

int main(void)
{
    kvd_t kvd;
    rdmx_context_t *ctx;
    rdmx_worker_t *mw;
    rdmx_kv_t *mkv;
    thr_t t[N_WRITERS + N_READERS];
    pthread_t th[N_WRITERS + N_READERS];
    rdmx_kv_params_t kp;
    char s0[4096], s1[4096];
    double t0, secs, duration = TH_SANITIZED ? 4.0 : 10.0;
    uint64_t writes = 0, reads = 0, deletes = 0, flushes = 0, misses = 0,
             toobig = 0;
    obs_log_t all = {0};
    size_t unknown = 0, mismatched = 0;

    th_init("kv_torture", 150);
    kl_start();
    kvd_start(&kvd, NULL, "--workers", "2", "--inline-threshold", "1k",
              "--memory", "64m", "--max-value", "1m", NULL);
    th_log("rdmx-kvd on %s (transport %s)", kvd.addr, th_transport_env());
    ctx = th_context();

    memset(&kp, 0, sizeof(kp));
    kp.field_mask =
        RDMX_KV_PARAM_FIELD_INLINE_MAX | RDMX_KV_PARAM_FIELD_TIMEOUT;
    kp.inline_max = 1024;
    kp.timeout_ms = 30000 * TH_SLOW;
    mw = th_worker(ctx, 0);
    CHECK_OK(rdmx_kv_create(mw, kvd.addr, &kp, &mkv));
    CHECK_OK(rdmx_kv_wait_ready(mkv, 20000 * TH_SLOW));
    CHECK_OK(rdmx_kv_stats(mkv, 0, s0, sizeof(s0)));
    {
        /* a first value, so readers find one */
        uint8_t *v = th_alloc(100);
        rdmx_kv_op_params_t o = {.field_mask = PUT_OPTS,
                                 .mode = RDMX_KV_PUT_SET};
        uint64_t cas = 0;
        o.flags = make_value(v, 100, 12345);
        CHECK_OK(rdmx_kv_put(mkv, KEY, KLEN, v, 100, &o, &cas));
        obs_add(&all, cas, 12345, 100);
        free(v);
    }

    memset(t, 0, sizeof(t));
    for (int i = 0; i < N_WRITERS + N_READERS; i++) {
        t[i].writer = i < N_WRITERS;
        t[i].index = t[i].writer ? i : i - N_WRITERS;
        t[i].w = th_worker(ctx, 0);
        CHECK_OK(rdmx_kv_create(t[i].w, kvd.addr, &kp, &t[i].kv));
        CHECK_OK(rdmx_kv_wait_ready(t[i].kv, 20000 * TH_SLOW));
        CHECK_OK(rdmx_mem_alloc(ctx, MAX_VALUE + SLACK,
                                RDMX_ACCESS_READ | RDMX_ACCESS_WRITE,
                                &t[i].mr));
        t[i].plain = th_alloc(MAX_VALUE + SLACK);
    }
    t0 = th_now_ms();
    for (int i = 0; i < N_WRITERS + N_READERS; i++)
        CHECK(pthread_create(&th[i], NULL,
                             t[i].writer ? writer_main : reader_main,
                             &t[i]) == 0);
    while (!atomic_load(&stop) && th_now_ms() - t0 < duration * 1000) {
        th_sleep_ms(50);
        if (!kvd_alive(&kvd)) {
            th_log("FAIL: rdmx-kvd died");
            snprintf(fail_msg, sizeof(fail_msg), "rdmx-kvd died");
            atomic_store(&failed, 1);
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < N_WRITERS + N_READERS; i++)
        pthread_join(th[i], NULL);
    secs = (th_now_ms() - t0) / 1000;

    for (int i = 0; i < N_WRITERS + N_READERS; i++) {
        thr_t *x = &t[i];
        if (x->writer) {
            th_log("writer %d: %" PRIu64 " puts (%" PRIu64
                   " RDMA read, %" PRIu64 " inline), %" PRIu64
                   " deletes, %" PRIu64 " flushes, %.1f MB",
                   x->index, x->puts_rdma + x->puts_inline, x->puts_rdma,
                   x->puts_inline, x->deletes, x->flushes, x->bytes / 1e6);
            writes += x->puts_rdma + x->puts_inline;
            deletes += x->deletes;
            flushes += x->flushes;
            for (size_t k = 0; k < x->log.n; k++)
                obs_add(&all, x->log.v[k].cas, x->log.v[k].seed,
                        x->log.v[k].len);
        } else {
            th_log("reader %d: %" PRIu64 " gets (%" PRIu64
                   " registered over 1 KiB, %" PRIu64 " others, %" PRIu64
                   " too big, %" PRIu64 " misses, %" PRIu64
                   " zeroed tails), %.1f MB",
                   x->index, x->ops, x->gets_rdma, x->gets_inline, x->too_big,
                   x->misses, x->scrubbed, x->bytes / 1e6);
            reads += x->ops;
            misses += x->misses;
            toobig += x->too_big;
        }
    }
    th_log("%.1f s: %" PRIu64 " writes, %" PRIu64 " deletes, %" PRIu64
           " reads (%" PRIu64 " misses, %" PRIu64 " too big)",
           secs, writes, deletes, reads, misses, toobig);

    /* every version seen belongs to exactly the value written with it */
    qsort(all.v, all.n, sizeof(*all.v), cmp_cas);
    for (size_t k = 1; k < all.n; k++)
        CHECKF(all.v[k].cas != all.v[k - 1].cas,
               "two writes got the same version %" PRIu64, all.v[k].cas);
    for (int i = N_WRITERS; i < N_WRITERS + N_READERS && !atomic_load(&failed);
         i++) {
        for (size_t k = 0; k < t[i].log.n; k++) {
            obs_t *o = &t[i].log.v[k], *w;
            w = bsearch(o, all.v, all.n, sizeof(*all.v), cmp_cas);
            if (w == NULL) {
                if (unknown++ == 0)
                    th_log("reader %d saw version %" PRIu64
                           " that no writer got",
                           t[i].index, o->cas);
            } else if (w->seed != o->seed || w->len != o->len) {
                if (mismatched++ == 0)
                    th_log("reader %d: version %" PRIu64 " holds %" PRIu64
                           " bytes of seed %016" PRIx64 ", written: %" PRIu64
                           " bytes of seed %016" PRIx64,
                           t[i].index, o->cas, o->len, o->seed, w->len,
                           w->seed);
            }
        }
    }
    CHECKF(!atomic_load(&failed), "%s", fail_msg);
    CHECKF(unknown == 0, "%zu reads saw a version no writer got", unknown);
    CHECKF(mismatched == 0,
           "%zu reads saw a version with another writer's value", mismatched);
    CHECKF(writes >= 100 * (TH_SANITIZED ? 1 : 5) && reads >= 100,
           "too little traffic: %" PRIu64 " writes, %" PRIu64 " reads", writes,
           reads);
    CHECKF(toobig > 0, "no TOO_BIG answer seen");

    /* counters, and no value memory left behind */
    {
        rdmx_status_t st = rdmx_kv_delete(mkv, KEY, KLEN, 0);
        CHECKF(st == RDMX_OK || st == RDMX_ERR_NOT_FOUND, "delete: %s",
               rdmx_status_name(st));
    }
    /* A value is freed at its last release: an answer still in flight
     * (the server's send of it, a FIN on its way back) holds it a moment
     * longer on a loaded machine. Nobody progresses the readers and
     * writers now, so what stays held past 2 s is leaked. */
    for (int waited = 0;; waited += 20) {
        th_sleep_ms(20);
        CHECK_OK(rdmx_kv_stats(mkv, 0, s1, sizeof(s1)));
        if (stat_of(s1, "free_bytes") == stat_of(s0, "free_bytes") ||
            waited >= 2000) {
            if (waited > 0)
                th_log("stats after %d ms of waiting for free memory",
                       waited + 20);
            break;
        }
    }
#define D(name) (stat_of(s1, name) - stat_of(s0, name))
    th_log("server: cmd_get +%" PRIu64 " (hits %" PRIu64 ", misses %" PRIu64
           "), cmd_set +%" PRIu64 ", free_bytes %" PRIu64 " -> %" PRIu64,
           D("cmd_get"), D("get_hits"), D("get_misses"), D("cmd_set"),
           stat_of(s0, "free_bytes"), stat_of(s1, "free_bytes"));
    th_log("server: reserved_items %" PRIu64 ", pending_items %" PRIu64
           " (%" PRIu64 " bytes)",
           stat_of(s1, "reserved_items"), stat_of(s1, "pending_items"),
           stat_of(s1, "pending_bytes"));
    th_log("server: %" PRIu64 " GETs mapped, %" PRIu64
           " asked again after their copy met a write",
           D("get_mapped"), D("get_again"));
    CHECK_EQ_U64(D("cmd_get"), reads + D("get_again"));
    CHECK_EQ_U64(D("get_misses"), misses);
    CHECK_EQ_U64(D("cmd_set"), writes + 1);
    CHECK_EQ_U64(D("delete_hits") + D("delete_misses"), deletes + 1);
    CHECK_EQ_U64(D("cmd_flush"), flushes);
    CHECK_EQ_U64(D("bad_requests"), 0);
    CHECK_EQ_U64(stat_of(s1, "curr_items"), 0);
    CHECK_EQ_U64(stat_of(s1, "bytes"), 0);
    /* what could still hold value memory: a PUT's reservation, a GET's
     * reference to an item already unlinked */
    CHECK_EQ_U64(stat_of(s1, "reserved_items"), 0);
    CHECK_EQ_U64(stat_of(s1, "pending_items"), 0);
    CHECK_EQ_U64(stat_of(s1, "free_bytes"), stat_of(s0, "free_bytes"));
    CHECK_EQ_U64(stat_of(s1, "largest_free_block"),
                 stat_of(s0, "largest_free_block"));
#undef D

    for (int i = 0; i < N_WRITERS + N_READERS; i++) {
        rdmx_kv_destroy(t[i].kv);
        rdmx_mem_deregister(t[i].mr);
        rdmx_worker_destroy(t[i].w);
        free(t[i].plain);
        free(t[i].log.v);
    }
    rdmx_kv_destroy(mkv);
    rdmx_worker_destroy(mw);
    free(all.v);
    rdmx_context_destroy(ctx);
    kvd_stop(&kvd);
    th_log("ok");
    return 0;
}
