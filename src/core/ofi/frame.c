/*
 * Frame headers of the ofi backend (frame.h): encode and a decoder that
 * trusts nothing it reads.
 */
#include "core/ofi/frame.h"

#include "util/endian.h"

#include <string.h>

void rdmx__ofi_frame_pack(unsigned char *out, unsigned kind, unsigned id,
                          size_t hlen, uint32_t src, uint32_t dst)
{
    out[0] = (unsigned char)kind;
    out[1] = (unsigned char)id;
    rdmx_put_le16(out + 2, (uint16_t)hlen);
    rdmx_put_le32(out + 4, src);
    rdmx_put_le32(out + 8, dst);
    rdmx_put_le32(out + 12, 0);
}

void rdmx__ofi_rts_pack(unsigned char *out, uint64_t length, uint64_t id,
                        uint64_t raddr, uint64_t key)
{
    rdmx_put_le64(out, length);
    rdmx_put_le64(out + 8, id);
    rdmx_put_le64(out + 16, raddr);
    rdmx_put_le64(out + 24, key);
    rdmx_put_le32(out + 32, 0);
    rdmx_put_le32(out + 36, 0);
}

void rdmx__ofi_fin_pack(unsigned char *out, uint64_t id, int32_t status)
{
    rdmx_put_le64(out, id);
    rdmx_put_le32(out + 8, (uint32_t)status);
    rdmx_put_le32(out + 12, 0);
}

int rdmx__ofi_frame_parse(const void *buf, size_t len, rdmx_ofi_frame_t *f)
{
    const unsigned char *p = buf;

    memset(f, 0, sizeof(*f));
    if (buf == NULL || len < RDMX_OFI_FRAME_SIZE)
        return -1;
    f->kind = p[0];
    f->id = p[1];
    f->hlen = rdmx_get_le16(p + 2);
    f->src = rdmx_get_le32(p + 4);
    f->dst = rdmx_get_le32(p + 8);
    if (f->kind < RDMX_OFI_FRAME_EAGER || f->kind > RDMX_OFI_FRAME_FIN ||
        f->id >= RDMX_OFI_FRAME_ID_MAX || f->hlen > RDMX_OFI_FRAME_HDR_MAX ||
        f->src == 0 || rdmx_get_le32(p + 12) != 0 ||
        f->hlen > len - RDMX_OFI_FRAME_SIZE)
        return -1;
    f->hdr = p + RDMX_OFI_FRAME_SIZE;
    f->data = f->hdr + f->hlen;
    f->len = len - RDMX_OFI_FRAME_SIZE - f->hlen;
    if (f->kind == RDMX_OFI_FRAME_RTS) {
        if (f->len != RDMX_OFI_RTS_SIZE || rdmx_get_le32(f->data + 32) != 0 ||
            rdmx_get_le32(f->data + 36) != 0)
            return -1;
        f->length = rdmx_get_le64(f->data);
        f->rndv_id = rdmx_get_le64(f->data + 8);
        f->raddr = rdmx_get_le64(f->data + 16);
        f->key = rdmx_get_le64(f->data + 24);
    } else if (f->kind == RDMX_OFI_FRAME_FIN) {
        if (f->len != RDMX_OFI_FIN_SIZE || f->hlen != 0 || f->id != 0 ||
            rdmx_get_le32(f->data + 12) != 0)
            return -1;
        f->rndv_id = rdmx_get_le64(f->data);
        f->status = (int32_t)rdmx_get_le32(f->data + 8);
        if (f->status > 0)
            return -1;
    }
    if (f->kind != RDMX_OFI_FRAME_EAGER && f->rndv_id == 0)
        return -1;
    return 0;
}
