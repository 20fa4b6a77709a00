/*
 * The library's clock (util/time.h): the CPU's time-stamp counter, scaled
 * to nanoseconds, where that is safe; CLOCK_MONOTONIC elsewhere.
 *
 * The counter is used only when all of these hold:
 * - x86-64, and the CPU says its counter is invariant (CPUID
 *   0x80000007, EDX bit 8: one rate in every power state, on every core);
 * - the kernel keeps its own time with it (its current clocksource is
 *   "tsc": it checked that the cores' counters agree, and stops using it
 *   when they do not);
 * - RDMX_CLOCK is not "monotonic";
 * - the rate measured below is between 100 MHz and 20 GHz.
 *
 * Calibration, once, when the library loads: the counter against
 * CLOCK_MONOTONIC_RAW (the hardware's rate, not NTP's slewed one) over
 * 1 ms, each end read as the narrowest of a few counter-clock-counter
 * triples. Its error, ~20 ns in 1 ms, is 2e-5 of any interval: 20 us in a
 * second's deadline. The offset is CLOCK_MONOTONIC's at the end, so the
 * two clocks start together; they part by that error over time, and
 * values of rdmx_now_ns are never compared with anything but each other.
 */
#include "util/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

rdmx_clock_t rdmx__clock; /* zeroed: CLOCK_MONOTONIC until calibrated */

const char *rdmx__clock_source(void)
{
    return rdmx__clock.use_tsc ? "tsc" : "monotonic";
}

#if defined(__x86_64__)

#define CALIBRATE_NS 1000000ull /* 1 ms */

static uint64_t raw_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The counter in program order (for calibration only). */
static uint64_t tsc_ordered(void)
{
    _mm_lfence();
    return __rdtsc();
}

static int tsc_invariant(void)
{
    unsigned a, b, c, d;

    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000007u)
        return 0;
    __cpuid(0x80000007u, a, b, c, d);
    (void)a, (void)b, (void)c;
    return (d & (1u << 8)) != 0;
}

static int kernel_uses_tsc(void)
{
    char buf[32] = "";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/"
                    "current_clocksource",
                    "re");

    if (f == NULL)
        return 0;
    if (fgets(buf, sizeof(buf), f) == NULL)
        buf[0] = '\0';
    fclose(f);
    return strcmp(buf, "tsc\n") == 0;
}

/* The counter at the moment @fn's clock read *@ns: the middle of the
 * narrowest of five counter-clock-counter triples. */
static uint64_t tsc_at(uint64_t (*fn)(void), uint64_t *ns)
{
    uint64_t best = UINT64_MAX, at = 0;

    for (int i = 0; i < 5; i++) {
        uint64_t a = tsc_ordered(), n = fn(), b = tsc_ordered();
        if (b > a && b - a < best) {
            best = b - a;
            at = a + (b - a) / 2;
            *ns = n;
        }
    }
    return at;
}

__attribute__((constructor)) static void clock_init(void)
{
    const char *env = getenv("RDMX_CLOCK");
    uint64_t t0, t1, r0 = 0, r1 = 0, n1 = 0, mult;

    if ((env != NULL && strcmp(env, "monotonic") == 0) || !tsc_invariant() ||
        !kernel_uses_tsc())
        return;
    t0 = tsc_at(raw_ns, &r0);
    do
        t1 = tsc_at(raw_ns, &r1);
    while (r1 - r0 < CALIBRATE_NS);
    if (t1 <= t0 || r1 - r0 > 1000000000ull)
        return; /* (the counter stood still, or this thread slept 1 s) */
    /* nanoseconds per tick, 32.32: 100 MHz .. 20 GHz is 10 .. 0.05 */
    mult = ((r1 - r0) << 32) / (t1 - t0);
    if (mult > (10ull << 32) || mult < (1ull << 32) / 20)
        return;
    rdmx__clock.tsc0 = tsc_at(rdmx_mono_ns, &n1);
    rdmx__clock.ns0 = n1;
    rdmx__clock.mult = mult;
    rdmx__clock.use_tsc = 1;
}

#endif
