/*
 * Monotonic clock helpers.
 */
#ifndef RDMX_UTIL_TIME_H
#define RDMX_UTIL_TIME_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on the monotonic clock (vDSO, no syscall). */
static inline uint64_t rdmx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* RDMX_UTIL_TIME_H */
