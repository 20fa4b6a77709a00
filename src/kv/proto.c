/*
 * KV wire format: encoders and validating decoders (proto.h, docs/KV.md).
 */
#include "kv/proto.h"

#include "util/endian.h"

#include <stdio.h>
#include <string.h>

void rdmx__kv_result_encode(const rdmx_kv_result_t *r, unsigned char *out)
{
    rdmx_put_le32(out + 0, (uint32_t)r->status);
    rdmx_put_le32(out + 4, r->where);
    rdmx_put_le32(out + 8, r->flags);
    rdmx_put_le32(out + 12, r->offset);
    rdmx_put_le64(out + 16, r->cas);
    rdmx_put_le64(out + 24, r->length);
}

rdmx_status_t rdmx__kv_result_decode(const void *buf, size_t len,
                                    rdmx_kv_result_t *r)
{
    const unsigned char *p = buf;

    memset(r, 0, sizeof(*r));
    if (p == NULL || len < RDMX_KV_RESULT_SIZE)
        return RDMX_ERR_PROTO;
    r->status = (int32_t)rdmx_get_le32(p);
    r->where = rdmx_get_le32(p + 4);
    r->flags = rdmx_get_le32(p + 8);
    r->offset = rdmx_get_le32(p + 12);
    r->cas = rdmx_get_le64(p + 16);
    r->length = rdmx_get_le64(p + 24);
    if (r->status > 0 || r->where > RDMX_KV_WHERE_BUFFER)
        return RDMX_ERR_PROTO;
    if (r->where == RDMX_KV_WHERE_INLINE &&
        r->length > len - RDMX_KV_RESULT_SIZE)
        return RDMX_ERR_PROTO;
    return RDMX_OK;
}

void rdmx__kv_req_encode(const rdmx_kv_req_t *r, size_t inline_len,
                        unsigned char *out)
{
    out[0] = r->mode;
    out[1] = 0;
    rdmx_put_le16(out + 2, r->klen);
    rdmx_put_le32(out + 4, r->flags);
    rdmx_put_le32(out + 8, r->ttl_ms);
    rdmx_put_le32(out + 12, 0);
    rdmx_put_le64(out + 16, r->cas);
    rdmx_put_le64(out + 24, r->vlen);
    if (r->klen != 0)
        memcpy(out + RDMX_KV_REQ_SIZE, r->key, r->klen);
    if (inline_len != 0)
        memcpy(out + RDMX_KV_REQ_SIZE + r->klen, r->value, inline_len);
}

rdmx_status_t rdmx__kv_req_decode(const void *buf, size_t len,
                                 int inline_value, rdmx_kv_req_t *r,
                                 size_t *used_p, char *why, size_t why_size)
{
    const unsigned char *p = buf;
    size_t need;

    memset(r, 0, sizeof(*r));
    *used_p = 0;
    if (p == NULL || len < RDMX_KV_REQ_SIZE) {
        snprintf(why, why_size, "request of %zu bytes, header is %d", len,
                 RDMX_KV_REQ_SIZE);
        return RDMX_ERR_PROTO;
    }
    r->mode = p[0];
    r->klen = rdmx_get_le16(p + 2);
    r->flags = rdmx_get_le32(p + 4);
    r->ttl_ms = rdmx_get_le32(p + 8);
    r->cas = rdmx_get_le64(p + 16);
    r->vlen = rdmx_get_le64(p + 24);
    if (p[1] != 0 || rdmx_get_le32(p + 12) != 0) {
        snprintf(why, why_size, "reserved bytes set");
        return RDMX_ERR_PROTO;
    }
    need = RDMX_KV_REQ_SIZE + (size_t)r->klen;
    if (need > len) {
        snprintf(why, why_size, "key of %u bytes, %zu present", r->klen,
                 len - RDMX_KV_REQ_SIZE);
        return RDMX_ERR_PROTO;
    }
    r->key = p + RDMX_KV_REQ_SIZE;
    if (inline_value) {
        if (r->vlen > len - need) {
            snprintf(why, why_size, "value of %llu bytes, %zu present",
                     (unsigned long long)r->vlen, len - need);
            return RDMX_ERR_PROTO;
        }
        r->value = p + need;
        need += (size_t)r->vlen;
    }
    *used_p = need;
    return RDMX_OK;
}
