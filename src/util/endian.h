/*
 * Little-endian wire encoding, independent of the host's byte order and of
 * alignment: every field rdmx puts on the wire goes through these. On a
 * little-endian host each is one unaligned load or store.
 */
#ifndef RDMX_UTIL_ENDIAN_H
#define RDMX_UTIL_ENDIAN_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define RDMX_LE16(v) __builtin_bswap16(v)
#define RDMX_LE32(v) __builtin_bswap32(v)
#define RDMX_LE64(v) __builtin_bswap64(v)
#else
#define RDMX_LE16(v) (v)
#define RDMX_LE32(v) (v)
#define RDMX_LE64(v) (v)
#endif

static inline void rdmx_put_le16(unsigned char *p, uint16_t v)
{
    v = RDMX_LE16(v);
    memcpy(p, &v, sizeof(v));
}

static inline void rdmx_put_le32(unsigned char *p, uint32_t v)
{
    v = RDMX_LE32(v);
    memcpy(p, &v, sizeof(v));
}

static inline void rdmx_put_le64(unsigned char *p, uint64_t v)
{
    v = RDMX_LE64(v);
    memcpy(p, &v, sizeof(v));
}

static inline uint16_t rdmx_get_le16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return RDMX_LE16(v);
}

static inline uint32_t rdmx_get_le32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return RDMX_LE32(v);
}

static inline uint64_t rdmx_get_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return RDMX_LE64(v);
}

#endif /* RDMX_UTIL_ENDIAN_H */
