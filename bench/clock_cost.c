/*
 * clock_cost — what one clock read adds to a stretch of work: the
 * library's clock (rdmx_now_ns, src/util/time.h: the time-stamp counter
 * where the CPU and the kernel trust it, else CLOCK_MONOTONIC) against
 * clock_gettime(CLOCK_MONOTONIC), each read after ~80 ns of hashing, 5 M
 * times, 3 rounds. One line per round:
 *
 *     clock=tsc work_ns=82.6 clock_gettime_ns=24.1 rdmx_now_ns=10.6
 *
 * (ns added per read, the result feeding the next step of the work.)
 *
 * Build, after make:
 *   cc -O2 -I src -o clock_cost bench/clock_cost.c build/lib/librdmx.a
 */
#include "util/time.h"

#include <stdint.h>
#include <stdio.h>

#define N 5000000

static uint64_t work(uint64_t x)
{
    for (int i = 0; i < 40; i++) {
        x ^= x >> 13;
        x *= 0x9E3779B97F4A7C15ull;
        x += (uint64_t)i;
    }
    return x;
}

int main(void)
{
    uint64_t x = 1;

    for (int r = 0; r < 3; r++) {
        uint64_t a = rdmx_mono_ns();
        for (int i = 0; i < N; i++)
            x = work(x);
        uint64_t b = rdmx_mono_ns();
        double base = (double)(b - a) / N;

        a = rdmx_mono_ns();
        for (int i = 0; i < N; i++)
            x = work(x) + rdmx_mono_ns();
        b = rdmx_mono_ns();
        double mono = (double)(b - a) / N - base;

        a = rdmx_mono_ns();
        for (int i = 0; i < N; i++)
            x = work(x) + rdmx_now_ns();
        b = rdmx_mono_ns();
        double now = (double)(b - a) / N - base;

        printf("clock=%s work_ns=%.1f clock_gettime_ns=%.1f rdmx_now_ns=%.1f\n",
               rdmx__clock_source(), base, mono, now);
    }
    return x == 42; /* (keeps the work) */
}
