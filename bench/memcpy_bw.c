/*
 * memcpy_bw — the machine's memcpy bandwidth, the physical limit of a
 * shared-memory transfer.
 *
 * A put or get over shared memory ends in one memcpy between two processes'
 * mappings, so memcpy of the same size bounds what rdmx or ucx_perftest can
 * reach. For each size given (bytes; k/m/g suffixes are binary) this copies
 * between two page-aligned, pre-touched buffers repeatedly for about
 * 0.2 s per trial, runs 5 trials and prints the median and the best, in MB/s
 * (10^6 bytes of payload copied per second, the way a transfer is counted):
 *
 *     bytes=1048576 median_mb_s=48012.3 best_mb_s=50110.9
 *
 * Small sizes stay in cache (1 MiB source and destination fit in L2/L3);
 * 64 MiB measures DRAM. Usage:
 *
 *     memcpy_bw [--threads N] [--span BYTES] [--turns] [SIZE...]
 *
 * (default 1m 64m). The options model a KV workload's copies instead of one
 * hot buffer: N threads at once (each its own destination), each copy from
 * a random SIZE-aligned block of a pre-touched source of BYTES (a store of
 * that many bytes of values: cold in the caches when BYTES is large), and
 * with --turns each thread yields its CPU after every copy, as blocking
 * clients do when there are more of them than CPUs (each copy then starts
 * after a context switch, with another thread's lines in the cache). The
 * line then also says threads=, span= and turns=. bench/vs-memcached.sh
 * takes its bound for each shm cell from it.
 *
 * Build (bench/vs-ucx.sh does this, after make):
 *   cc -O2 -std=c11 -I tools/common -o memcpy_bw bench/memcpy_bw.c \
 *      build/lib/librdmx_tools_common.a
 */
#define _GNU_SOURCE
#include "bench.h"
#include "options.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TRIALS   5
#define TRIAL_NS 200000000ull
#define THREADS_MAX 64

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Keep the compiler from dropping the copies. */
static volatile unsigned char g_sink;

typedef struct {
    const unsigned char *src; /* span bytes */
    size_t size, blocks;      /* blocks of size in the span */
    int turns;
    uint64_t seed;
    unsigned char *dst;
    uint64_t copies, elapsed;
} worker_t;

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One thread's trial: copy for TRIAL_NS. */
static void *trial(void *arg)
{
    worker_t *w = arg;
    uint64_t start = now_ns(), copies = 0, elapsed;

    do {
        for (int i = 0; i < 8; i++) {
            size_t b = w->blocks > 1 ? xorshift(&w->seed) % w->blocks : 0;

            memcpy(w->dst, w->src + b * w->size, w->size);
            g_sink = w->dst[copies % w->size];
            copies++;
            if (w->turns)
                sched_yield();
        }
        elapsed = now_ns() - start;
    } while (elapsed < TRIAL_NS);
    w->copies = copies;
    w->elapsed = elapsed;
    return NULL;
}

static int measure(size_t size, unsigned threads, size_t span, int turns,
                   int plain)
{
    double mbs[TRIALS];
    size_t alloc = (size + 4095) & ~(size_t)4095;
    size_t salloc = span > alloc ? (span + 4095) & ~(size_t)4095 : alloc;
    unsigned char *src = aligned_alloc(4096, salloc);
    worker_t w[THREADS_MAX];
    pthread_t th[THREADS_MAX];
    unsigned made = 0;
    int rc = 0;

    if (src == NULL)
        goto nomem;
    memset(src, 0x5a, salloc);
    for (; made < threads; made++) {
        w[made] = (worker_t){.src = src,
                             .size = size,
                             .blocks = salloc / size,
                             .turns = turns,
                             .seed = 0x9e3779b97f4a7c15ull * (made + 1)};
        if ((w[made].dst = aligned_alloc(4096, alloc)) == NULL)
            goto nomem;
        memset(w[made].dst, 0xa5, alloc);
        memcpy(w[made].dst, src, size); /* warm caches and TLBs */
    }
    for (int t = 0; t < TRIALS; t++) {
        double bytes = 0, secs = 0;

        for (unsigned i = 0; i < threads; i++)
            if (pthread_create(&th[i], NULL, trial, &w[i]) != 0) {
                fprintf(stderr, "memcpy_bw: cannot start a thread\n");
                exit(1);
            }
        for (unsigned i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            bytes += (double)w[i].copies * (double)size;
            if ((double)w[i].elapsed / 1e9 > secs)
                secs = (double)w[i].elapsed / 1e9;
        }
        mbs[t] = bytes / secs / 1e6;
    }
    qsort(mbs, TRIALS, sizeof(mbs[0]), cmp_double);
    if (plain)
        printf("bytes=%zu median_mb_s=%.1f best_mb_s=%.1f\n", size,
               mbs[TRIALS / 2], mbs[TRIALS - 1]);
    else
        printf("bytes=%zu threads=%u span=%zu turns=%d median_mb_s=%.1f "
               "best_mb_s=%.1f\n",
               size, threads, salloc, turns, mbs[TRIALS / 2], mbs[TRIALS - 1]);
    goto out;
nomem:
    fprintf(stderr, "memcpy_bw: cannot allocate %zu + %u x %zu bytes\n",
            salloc, threads, size);
    rc = -1;
out:
    for (unsigned i = 0; i < made; i++)
        free(w[i].dst);
    free(src);
    return rc;
}

int main(int argc, char **argv)
{
    static const char *defaults[] = {"1m", "64m"};
    const char **sizes;
    unsigned threads = 1;
    size_t span = 0;
    int n, rc = 0, turns = 0, plain = 1, a = 1;

    for (; a < argc && strncmp(argv[a], "--", 2) == 0; a++) {
        uint64_t v;

        plain = 0;
        if (strcmp(argv[a], "--turns") == 0) {
            turns = 1;
        } else if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) {
            if (opt_uint(argv[++a], 1, THREADS_MAX, &v) < 0) {
                fprintf(stderr, "memcpy_bw: --threads '%s': %s\n", argv[a],
                        opt_error());
                return 2;
            }
            threads = (unsigned)v;
        } else if (strcmp(argv[a], "--span") == 0 && a + 1 < argc) {
            if (opt_size(argv[++a], &span) < 0) {
                fprintf(stderr, "memcpy_bw: --span '%s': %s\n", argv[a],
                        opt_error());
                return 2;
            }
        } else {
            fprintf(stderr, "usage: memcpy_bw [--threads N] [--span BYTES] "
                            "[--turns] [SIZE...]\n");
            return 2;
        }
    }
    sizes = (const char **)argv + a;
    n = argc - a;
    if (n == 0) {
        sizes = defaults;
        n = 2;
    }
    for (int i = 0; i < n; i++) {
        size_t size;

        if (opt_size(sizes[i], &size) < 0) {
            fprintf(stderr, "memcpy_bw: bad size '%s': %s\n", sizes[i],
                    opt_error());
            return 2;
        }
        if (size == 0) {
            fprintf(stderr, "memcpy_bw: bad size '%s': must be at least 1\n",
                    sizes[i]);
            return 2;
        }
        if (measure(size, threads, span, turns, plain) < 0)
            rc = 1;
    }
    return rc;
}
