/*
 * Monotonic clock helpers.
 *
 * rdmx_now_ns() is the library's clock: nanoseconds, comparable only with
 * itself within one process (deadlines, timers, latency histograms, TTLs).
 * Where the CPU's time-stamp counter is invariant and the kernel itself
 * keeps time with it, it reads the counter and scales it; elsewhere it
 * reads CLOCK_MONOTONIC. src/util/time.c calibrates once, when the library
 * loads (docs/CORE.md, "The clock").
 *
 * The counter is read without a fence: the CPU may read it a little ahead
 * of the instructions before it. On one thread it never goes back; across
 * threads a read that comes after another's (through a lock or a flag) may
 * come out up to ~100 ns below it. So an elapsed time is always
 * rdmx_since(now, then), which is 0 rather than a wrapped difference.
 */
#ifndef RDMX_UTIL_TIME_H
#define RDMX_UTIL_TIME_H

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall: ~23 ns here). */
static inline uint64_t rdmx_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The counter's scale, set once by time.c before main. */
typedef struct {
    uint64_t tsc0; /* counter at calibration */
    uint64_t ns0;  /* CLOCK_MONOTONIC then */
    uint64_t mult; /* nanoseconds per tick, 32.32 fixed point */
    int use_tsc;   /* 0: rdmx_now_ns reads CLOCK_MONOTONIC */
} rdmx_clock_t;

extern rdmx_clock_t rdmx__clock;

/* Nanoseconds on the library's clock. */
static inline uint64_t rdmx_now_ns(void)
{
#if defined(__x86_64__)
    if (__builtin_expect(rdmx__clock.use_tsc, 1)) {
        uint64_t d = __rdtsc() - rdmx__clock.tsc0;
        return rdmx__clock.ns0 +
               (uint64_t)(((unsigned __int128)d * rdmx__clock.mult) >> 32);
    }
#endif
    return rdmx_mono_ns();
}

/* Nanoseconds from @then to @now; 0 if @now is below it. */
static inline uint64_t rdmx_since(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}

/* "tsc" or "monotonic": what rdmx_now_ns reads. */
const char *rdmx__clock_source(void);

#endif /* RDMX_UTIL_TIME_H */
