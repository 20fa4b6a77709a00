/*
 * Small non-cryptographic hashes.
 */
#ifndef RDMX_UTIL_HASH_H
#define RDMX_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a, 64-bit: detects corruption in descriptors and names handlers. */
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

#endif /* RDMX_UTIL_HASH_H */
