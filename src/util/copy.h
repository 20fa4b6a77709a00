/*
 * Copies whose destination is not read again soon.
 *
 * memcpy writes through the cache: each destination line is first read
 * from memory (the store needs the line), then written back when evicted.
 * When the destination is cold and nobody on this core reads it next (a
 * value written into rdmx-kvd's store, read later by clients on other
 * cores or not at all), that read is wasted: half the memory traffic of
 * the copy, and the lines it brings in push out what this core does use.
 * rdmx__copy_stream writes the destination with non-temporal stores
 * instead (straight to memory, no read), then fences them, so the bytes
 * are visible to other cores in the order of the caller's later stores
 * (a commit, a release) as plain stores would be. docs/KV.md, "Values
 * written around the cache", has the figures.
 *
 * x86-64 only (SSE2, which every x86-64 CPU has); elsewhere memcpy.
 */
#ifndef RDMX_UTIL_COPY_H
#define RDMX_UTIL_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>

static inline void rdmx__copy_stream(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;

    if (n < 64 + head) {
        memcpy(d, s, n);
        return;
    }
    /* the destination's first bytes up to 16-byte alignment, as usual */
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; d += 64, s += 64, n -= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));

        _mm_stream_si128((__m128i *)(void *)d, a);
        _mm_stream_si128((__m128i *)(void *)(d + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + 48), e);
    }
    /* the streamed stores before any later store (non-temporal stores are
     * weakly ordered) */
    _mm_sfence();
    memcpy(d, s, n);
}
#else
static inline void rdmx__copy_stream(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}
#endif

#endif
