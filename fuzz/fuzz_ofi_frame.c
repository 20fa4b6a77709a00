/*
 * Fuzz target: rdmx__ofi_frame_parse (src/core/ofi/frame.c), the libfabric
 * backend's frame header decoder.
 *
 * Input: the frame bytes (any length).
 *
 * Properties:
 *  - the verdict equals an independent reading of docs/FABRIC.md
 *    ("Frames", below in frame_valid);
 *  - a frame that parses has the fields its bytes say, its header and
 *    data lie inside the input and cover it exactly, and packing those
 *    fields gives back the first 16 bytes (and, for RTS and FIN, the
 *    body).
 */
#include "core/ofi/frame.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned le16(const unsigned char *p)
{
    return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static int frame_valid(const unsigned char *p, size_t len)
{
    size_t hlen, rest;
    const unsigned char *b;

    if (len < 16)
        return 0;
    hlen = le16(p + 2);
    if (p[0] < 1 || p[0] > 3 || p[1] >= 32 || hlen > 96 ||
        le32(p + 4) == 0 || le32(p + 12) != 0 || 16 + hlen > len)
        return 0;
    rest = len - 16 - hlen;
    b = p + 16 + hlen;
    if (p[0] == 2) /* RTS: 40 bytes, id != 0, reserved 0 */
        return rest == 40 && le64(b + 8) != 0 && le32(b + 32) == 0 &&
               le32(b + 36) == 0;
    if (p[0] == 3) /* FIN: no header, id 0; 16 bytes; status <= 0 */
        return hlen == 0 && p[1] == 0 && rest == 16 && le64(b) != 0 &&
               (int32_t)le32(b + 8) <= 0 && le32(b + 12) == 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *copy = malloc(size ? size : 1);
    unsigned char again[RDMX_OFI_FRAME_SIZE];
    rdmx_ofi_frame_t f;
    int ok;

    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    ok = rdmx__ofi_frame_parse(copy, size, &f) == 0;
    if (ok != frame_valid(copy, size))
        abort();
    if (ok) {
        if (f.kind != copy[0] || f.id != copy[1] || f.hlen != le16(copy + 2) ||
            f.src != le32(copy + 4) || f.dst != le32(copy + 8) ||
            f.hdr != copy + RDMX_OFI_FRAME_SIZE ||
            f.data != f.hdr + f.hlen ||
            RDMX_OFI_FRAME_SIZE + f.hlen + f.len != size)
            abort();
        rdmx__ofi_frame_pack(again, f.kind, f.id, f.hlen, f.src, f.dst);
        if (memcmp(again, copy, RDMX_OFI_FRAME_SIZE) != 0)
            abort();
        if (f.kind == RDMX_OFI_FRAME_RTS) {
            unsigned char body[RDMX_OFI_RTS_SIZE];
            rdmx__ofi_rts_pack(body, f.length, f.rndv_id, f.raddr, f.key);
            if (memcmp(body, f.data, sizeof(body)) != 0)
                abort();
        } else if (f.kind == RDMX_OFI_FRAME_FIN) {
            unsigned char body[RDMX_OFI_FIN_SIZE];
            rdmx__ofi_fin_pack(body, f.rndv_id, f.status);
            if (memcmp(body, f.data, sizeof(body)) != 0)
                abort();
        }
    }
    free(copy);
    return 0;
}
