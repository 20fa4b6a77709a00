/*
 * The cache of large payload buffers (src/util/bufcache.h): a freed large
 * buffer serves the next request of a similar size (same address, no new
 * mapping), a much smaller request does not get it, the slot and byte
 * bounds hold (oldest evicted first, a buffer above the byte bound never
 * cached), small buffers are plain allocations, and two threads sharing
 * the cache see only their own bytes.
 */
#include "harness.h"
#include "util/bufcache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static rdmx_buf_stats_t stats(void)
{
    rdmx_buf_stats_t s;
    rdmx__buf_stats(&s);
    return s;
}

static void *worker(void *arg)
{
    unsigned char tag = (unsigned char)(uintptr_t)arg;

    for (int i = 0; i < 200; i++) {
        size_t len = (i % 3 == 0) ? 100 : (size_t)(i % 5 + 1) * 300 * 1024;
        unsigned char *p = rdmx__buf_alloc(len);
        CHECK(p != NULL);
        memset(p, tag, len);
        for (size_t j = 0; j < len; j += 4093)
            CHECK(p[j] == tag);
        rdmx__buf_free(p);
    }
    return NULL;
}

int main(void)
{
    rdmx_buf_stats_t s0, s;
    unsigned char *p, *q, *r;
    void *many[RDMX_BUF_CACHE_SLOTS + 1];

    /* (read once, at the first large buffer) */
    setenv("RDMX_BUF_CACHE_MB", "8", 1);

    /* Small: plain allocations, never cached. */
    p = rdmx__buf_alloc(0);
    CHECK(p != NULL);
    rdmx__buf_free(p);
    p = rdmx__buf_alloc(100);
    CHECK(p != NULL);
    memset(p, 1, 100);
    rdmx__buf_free(p);
    rdmx__buf_free(NULL);
    s = stats();
    CHECK(s.cached == 0 && s.hits == 0 && s.misses == 0);

    /* Large: page-aligned; freed, then the same buffer again. */
    p = rdmx__buf_alloc(MiB);
    CHECK(p != NULL && (uintptr_t)p % 4096 == 0);
    memset(p, 0xab, MiB);
    rdmx__buf_free(p);
    s = stats();
    CHECK(s.cached == 1 && s.cached_bytes >= MiB && s.misses == 1);
    q = rdmx__buf_alloc(MiB - 5000);
    CHECK(q == p);
    CHECK(q[0] == 0xab && q[MiB - 5001] == 0xab); /* old bytes, warm */
    s = stats();
    CHECK(s.cached == 0 && s.hits == 1);

    /* Less than half of a cached buffer: a fresh one. */
    rdmx__buf_free(q);
    r = rdmx__buf_alloc(RDMX_BUF_LARGE);
    CHECK(r != NULL && r != p);
    s = stats();
    CHECK(s.cached == 1 && s.misses == 2);
    rdmx__buf_free(r); /* now two cached */
    CHECK(stats().cached == 2);
    /* ... and more than the buffer holds: fresh too. */
    r = rdmx__buf_alloc(2 * MiB);
    CHECK(r != NULL && r != p);
    rdmx__buf_free(r);

    /* Above the byte bound (8 MiB here): never cached. */
    s0 = stats();
    r = rdmx__buf_alloc(16 * MiB);
    CHECK(r != NULL);
    memset(r, 7, 16 * MiB);
    rdmx__buf_free(r);
    s = stats();
    CHECK(s.cached == s0.cached && s.cached_bytes == s0.cached_bytes);

    /* The byte bound: nine 1 MiB buffers freed, at most 8 MiB kept. */
    for (unsigned i = 0; i < RDMX_BUF_CACHE_SLOTS + 1; i++) {
        many[i] = rdmx__buf_alloc(MiB);
        CHECK(many[i] != NULL);
    }
    for (unsigned i = 0; i < RDMX_BUF_CACHE_SLOTS + 1; i++)
        rdmx__buf_free(many[i]);
    s = stats();
    CHECKF(s.cached_bytes <= 8 * MiB && s.cached >= 6 &&
               s.cached <= RDMX_BUF_CACHE_SLOTS,
           "cached %zu buffers, %zu bytes", s.cached, s.cached_bytes);
    /* The newest is kept, the oldest went first. */
    q = rdmx__buf_alloc(MiB);
    CHECK(q != NULL);
    {
        int found_new = 0;
        for (unsigned i = 0; i < RDMX_BUF_CACHE_SLOTS + 1; i++)
            found_new |= q == many[i];
        CHECK(found_new);
    }
    rdmx__buf_free(q);

    /* Two threads share the cache. */
    {
        pthread_t t1, t2;
        CHECK(pthread_create(&t1, NULL, worker, (void *)(uintptr_t)0x11) == 0);
        CHECK(pthread_create(&t2, NULL, worker, (void *)(uintptr_t)0x22) == 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
    }
    s = stats();
    CHECK(s.cached_bytes <= 8 * MiB && s.cached <= RDMX_BUF_CACHE_SLOTS);
    th_log("ok: %zu hits, %zu misses", s.hits, s.misses);
    return 0;
}
