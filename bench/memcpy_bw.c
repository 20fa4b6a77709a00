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
 * 64 MiB measures DRAM. Usage: memcpy_bw [SIZE...] (default 1m 64m).
 *
 * Build (bench/vs-ucx.sh does this, after make):
 *   cc -O2 -std=c11 -I tools/common -o memcpy_bw bench/memcpy_bw.c \
 *      build/lib/librdmx_tools_common.a
 */
#define _GNU_SOURCE
#include "bench.h"
#include "options.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TRIALS   5
#define TRIAL_NS 200000000ull

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Keep the compiler from dropping the copies. */
static volatile unsigned char g_sink;

static int measure(size_t size)
{
    double mbs[TRIALS];
    size_t alloc = (size + 4095) & ~(size_t)4095;
    unsigned char *src = aligned_alloc(4096, alloc);
    unsigned char *dst = aligned_alloc(4096, alloc);

    if (src == NULL || dst == NULL) {
        fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu bytes\n", size);
        free(src);
        free(dst);
        return -1;
    }
    memset(src, 0x5a, alloc);
    memset(dst, 0xa5, alloc);
    for (int i = 0; i < 3; i++) { /* warm caches and TLBs */
        memcpy(dst, src, size);
    }
    for (int t = 0; t < TRIALS; t++) {
        uint64_t start = now_ns(), elapsed, copies = 0;

        do {
            for (int i = 0; i < 8; i++) {
                memcpy(dst, src, size);
                g_sink = dst[copies % size];
                copies++;
            }
            elapsed = now_ns() - start;
        } while (elapsed < TRIAL_NS);
        mbs[t] = (double)copies * (double)size / ((double)elapsed / 1e9) / 1e6;
    }
    qsort(mbs, TRIALS, sizeof(mbs[0]), cmp_double);
    printf("bytes=%zu median_mb_s=%.1f best_mb_s=%.1f\n", size, mbs[TRIALS / 2],
           mbs[TRIALS - 1]);
    free(src);
    free(dst);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *defaults[] = {"1m", "64m"};
    const char **sizes = (const char **)argv + 1;
    int n = argc - 1, rc = 0;

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
        if (measure(size) < 0) {
            rc = 1;
        }
    }
    return rc;
}
