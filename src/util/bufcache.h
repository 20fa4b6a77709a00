/*
 * Buffers for large payloads, kept warm between uses.
 *
 * A fresh multi-megabyte malloc is a fresh mmap: every page of it faults
 * on first touch (on a virtual machine ~10 us per 4 KiB page, 60-90 ms for
 * 32 MiB), and glibc unmaps it again on free. The RPC layer needs such a
 * buffer for every large message it cannot place in the caller's memory,
 * the core for a message joined from fragments and for the bounce buffer
 * of a fenced write, so a process-wide cache keeps recently freed large
 * buffers, already faulted in, for the next message of a similar size.
 * Buffers of 2 MiB and more are mapped with MADV_HUGEPAGE (where
 * transparent huge pages are "madvise"), so even a first touch faults once
 * per 2 MiB.
 *
 * Small requests (< RDMX_BUF_LARGE) are plain malloc with a header, so
 * every buffer from rdmx__buf_alloc goes back through rdmx__buf_free.
 *
 * Bounds: at most RDMX_BUF_CACHE_SLOTS buffers and RDMX_BUF_CACHE_MB MiB
 * (environment, default 256; 0: no cache) stay cached; a buffer larger
 * than the bound is unmapped at once. A cached buffer is handed out only
 * for a request of at least half its size, so a small message never pins
 * a huge buffer. Thread-safe (one mutex, taken only for large buffers).
 */
#ifndef RDMX_UTIL_BUFCACHE_H
#define RDMX_UTIL_BUFCACHE_H

#include <stddef.h>

/* Requests from this size on are mapped and cached. */
#define RDMX_BUF_LARGE ((size_t)256 * 1024)
/* Most buffers kept. */
#define RDMX_BUF_CACHE_SLOTS 8

/* @len bytes (at least 1), page-aligned when large; NULL when out of
 * memory. Its content is undefined (a cached buffer keeps old bytes). */
void *rdmx__buf_alloc(size_t len);

/* Give back a buffer from rdmx__buf_alloc (NULL: nothing). */
void rdmx__buf_free(void *p);

/* What the cache holds and did, for tests. */
typedef struct {
    size_t cached; /* buffers held now */
    size_t cached_bytes;
    size_t hits;   /* large allocations served from the cache */
    size_t misses; /* ... that mapped fresh memory */
} rdmx_buf_stats_t;

void rdmx__buf_stats(rdmx_buf_stats_t *stats_p);

#endif /* RDMX_UTIL_BUFCACHE_H */
