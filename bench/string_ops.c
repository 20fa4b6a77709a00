/*
 * string_ops — what GCC's inline `rep stosq` / `rep movsq` cost next to the
 * C library's memset / memcpy for the block sizes of the small-call path:
 * a call record's 264-byte clear, a ring record's ~100-byte copy of a
 * length known only at run time. Each operation runs 10 M times; the
 * cleared record is read back at once, as the code that fills it does.
 * One line per round (3 rounds), cycles of the time-stamp counter per
 * operation:
 *
 *     clear264 rep_stosq=30.3 memset=16.1 copy100 rep_movsq=33.4 memcpy=8.1
 *
 * The library is built with -mmemcpy-strategy=libcall and
 * -mmemset-strategy=libcall where GCC takes them (CMakeLists.txt; the
 * figures in docs/PERFORMANCE.md, "String instructions").
 *
 * Build (x86-64):
 *   cc -O2 -o string_ops bench/string_ops.c
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <x86intrin.h>

#define N 10000000

/* What GCC emits inline for memset(p, 0, 264) at -O2 (generic tuning). */
static __attribute__((noinline)) void clear_rep(void *p)
{
    uint64_t *q = p;
    size_t n = 33;

    __asm__ volatile("rep stosq" : "+D"(q), "+c"(n) : "a"(0ull) : "memory");
}

/* ... and for memcpy(d, s, n) with n bounded but not constant. */
static __attribute__((noinline)) void copy_rep(void *d, const void *s, size_t n)
{
    size_t words = n / 8;

    __asm__ volatile("rep movsq" : "+D"(d), "+S"(s), "+c"(words) : : "memory");
}

/* The C library's, called as the library now calls it. */
static void *(*volatile lib_memset)(void *, int, size_t) = memset;
static void *(*volatile lib_memcpy)(void *, const void *, size_t) = memcpy;

int main(void)
{
    static uint64_t rec[64], src[64], dst[64];
    volatile uint64_t sink = 0;

    for (int r = 0; r < 3; r++) {
        uint64_t t0, t1, t2, t3, t4;

        t0 = __rdtsc();
        for (int i = 0; i < N; i++) {
            clear_rep(rec);
            rec[29] = (uint64_t)i; /* then fill and read it, as call_new */
            sink += rec[28];
        }
        t1 = __rdtsc();
        for (int i = 0; i < N; i++) {
            lib_memset(rec, 0, 264);
            rec[29] = (uint64_t)i;
            sink += rec[28];
        }
        t2 = __rdtsc();
        for (int i = 0; i < N; i++) {
            copy_rep(dst, src, 96 + 8 * (size_t)(i & 3));
            sink += dst[6];
        }
        t3 = __rdtsc();
        for (int i = 0; i < N; i++) {
            lib_memcpy(dst, src, 96 + 8 * (size_t)(i & 3));
            sink += dst[6];
        }
        t4 = __rdtsc();
        printf("clear264 rep_stosq=%.1f memset=%.1f copy100 rep_movsq=%.1f "
               "memcpy=%.1f\n",
               (double)(t1 - t0) / N, (double)(t2 - t1) / N,
               (double)(t3 - t2) / N, (double)(t4 - t3) / N);
    }
    return (int)(sink & 1);
}
