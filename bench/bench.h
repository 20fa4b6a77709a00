/*
 * bench.h — what the bench programs share: the clock they time with and the
 * comparator they sort their samples with. Header only: a program includes
 * it after its feature macros (_GNU_SOURCE), and its build line stays one
 * source file.
 */
#ifndef RDMX_BENCH_H
#define RDMX_BENCH_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ns: one clock read. */
static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* qsort comparator: uint64_t values, smallest first. */
static inline int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

#endif /* RDMX_BENCH_H */
