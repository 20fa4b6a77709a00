/*
 * Small non-cryptographic hashes.
 */
#ifndef RDMX_UTIL_HASH_H
#define RDMX_UTIL_HASH_H

#include "util/endian.h"

#include <stddef.h>
#include <stdint.h>

/* FNV-1a, 64-bit: names handlers and places keys on servers. */
static inline uint64_t rdmx_fnv1a64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Final mix of a 64-bit value (splitmix64), for pointer-keyed tables. */
static inline uint64_t rdmx_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/*
 * A checksum of @len bytes, 8 at a time (little-endian words; a short
 * last word zero-filled, the length folded in): detects corruption in
 * memory descriptors. FNV-1a, a byte at a time, took ~4 instructions a
 * byte there: ~540 for a descriptor over shared memory, against ~120.
 */
static inline uint64_t rdmx_sum64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)len;

    for (; len >= 8; p += 8, len -= 8) {
        h = (h ^ rdmx_get_le64(p)) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
    }
    if (len > 0) {
        uint64_t w = 0;
        for (size_t i = 0; i < len; i++)
            w |= (uint64_t)p[i] << (8 * i);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
    }
    return rdmx_mix64(h);
}

#endif /* RDMX_UTIL_HASH_H */
