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
    if (r->status > 0 || r->where > RDMX_KV_WHERE_STORE)
        return RDMX_ERR_PROTO;
    if (r->where == RDMX_KV_WHERE_INLINE &&
        r->length > len - RDMX_KV_RESULT_SIZE)
        return RDMX_ERR_PROTO;
    if (r->where == RDMX_KV_WHERE_STORE &&
        len - RDMX_KV_RESULT_SIZE < RDMX_KV_LOCATION_SIZE)
        return RDMX_ERR_PROTO;
    return RDMX_OK;
}

void rdmx__kv_location_encode(const rdmx_kv_location_t *l, unsigned char *out)
{
    rdmx_put_le64(out + 0, l->store_id);
    rdmx_put_le64(out + 8, l->stamp_offset);
    rdmx_put_le64(out + 16, l->value_offset);
    rdmx_put_le64(out + 24, l->stamp);
}

rdmx_status_t rdmx__kv_location_decode(const void *buf, size_t len,
                                       rdmx_kv_location_t *l)
{
    const unsigned char *p = buf;

    if (p == NULL || len < RDMX_KV_LOCATION_SIZE)
        return RDMX_ERR_PROTO;
    l->store_id = rdmx_get_le64(p + 0);
    l->stamp_offset = rdmx_get_le64(p + 8);
    l->value_offset = rdmx_get_le64(p + 16);
    l->stamp = rdmx_get_le64(p + 24);
    return RDMX_OK;
}

void rdmx__kv_req_encode_header(const rdmx_kv_req_t *r, unsigned char *out)
{
    out[0] = r->mode;
    out[1] = 0;
    rdmx_put_le16(out + 2, r->klen);
    rdmx_put_le32(out + 4, r->flags);
    rdmx_put_le32(out + 8, r->ttl_ms);
    rdmx_put_le32(out + 12, 0);
    rdmx_put_le64(out + 16, r->cas);
    rdmx_put_le64(out + 24, r->vlen);
}

void rdmx__kv_req_encode(const rdmx_kv_req_t *r, size_t inline_len,
                         unsigned char *out)
{
    rdmx__kv_req_encode_header(r, out);
    if (r->klen != 0)
        memcpy(out + RDMX_KV_REQ_SIZE, r->key, r->klen);
    if (inline_len != 0)
        memcpy(out + RDMX_KV_REQ_SIZE + r->klen, r->value, inline_len);
}

rdmx_status_t rdmx__kv_req_decode(const void *buf, size_t len,
                                  rdmx_kv_value_t value, rdmx_kv_req_t *r,
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
    if (value == RDMX_KV_VALUE_INLINE ||
        (value == RDMX_KV_VALUE_PUT && !(r->mode & RDMX_KV_PUT_BULK))) {
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

size_t rdmx__kv_batch_size(const rdmx_kv_req_t *reqs, const size_t *inl,
                           size_t n)
{
    size_t len = RDMX_KV_BATCH_HDR;

    for (size_t i = 0; i < n; i++)
        len += rdmx__kv_req_size(reqs[i].klen, inl ? inl[i] : 0);
    return len;
}

void rdmx__kv_batch_encode(const rdmx_kv_req_t *reqs, const size_t *inl,
                           size_t n, unsigned char *out)
{
    size_t off = RDMX_KV_BATCH_HDR;

    rdmx__kv_batch_hdr_encode((uint32_t)n, out);
    for (size_t i = 0; i < n; i++) {
        rdmx__kv_req_encode(&reqs[i], inl ? inl[i] : 0, out + off);
        off += rdmx__kv_req_size(reqs[i].klen, inl ? inl[i] : 0);
    }
}

void rdmx__kv_batch_hdr_encode(uint32_t n, unsigned char *out)
{
    rdmx_put_le32(out, n);
    rdmx_put_le32(out + 4, 0);
}

rdmx_status_t rdmx__kv_batch_decode(const void *buf, size_t len,
                                    uint32_t *count_p)
{
    const unsigned char *p = buf;
    uint32_t n;

    if (p == NULL || len < RDMX_KV_BATCH_HDR)
        return RDMX_ERR_PROTO;
    n = rdmx_get_le32(p);
    if (n == 0 || n > RDMX_KV_BATCH_MAX || rdmx_get_le32(p + 4) != 0)
        return RDMX_ERR_PROTO;
    *count_p = n;
    return RDMX_OK;
}

void rdmx__kv_zitem_encode(const rdmx_kv_zitem_t *z, unsigned char *out)
{
    unsigned char *loc = out + RDMX_KV_REQ_SIZE + z->r.klen;

    rdmx__kv_req_encode(&z->r, 0, out);
    rdmx_put_le64(loc, z->offset);
    memset(loc + 8, 0, RDMX_KV_LOC_SIZE - 8);
    loc[8] = z->bulk;
}

rdmx_status_t rdmx__kv_zitem_decode(const void *buf, size_t len,
                                    rdmx_kv_zitem_t *z, size_t *used_p,
                                    char *why, size_t why_size)
{
    const unsigned char *loc;
    size_t used;
    rdmx_status_t st;

    memset(z, 0, sizeof(*z));
    *used_p = 0;
    st = rdmx__kv_req_decode(buf, len, RDMX_KV_VALUE_NONE, &z->r, &used, why,
                             why_size);
    if (st != RDMX_OK)
        return st;
    if (z->r.mode != 0 || z->r.cas != 0) {
        snprintf(why, why_size, "mode %u, cas %llu (both must be 0)",
                 z->r.mode, (unsigned long long)z->r.cas);
        return RDMX_ERR_PROTO;
    }
    if (len - used < RDMX_KV_LOC_SIZE) {
        snprintf(why, why_size, "slot locator of %d bytes, %zu present",
                 RDMX_KV_LOC_SIZE, len - used);
        return RDMX_ERR_PROTO;
    }
    loc = (const unsigned char *)buf + used;
    for (int i = 9; i < RDMX_KV_LOC_SIZE; i++) {
        if (loc[i] != 0) {
            snprintf(why, why_size, "reserved locator bytes set");
            return RDMX_ERR_PROTO;
        }
    }
    z->offset = rdmx_get_le64(loc);
    z->bulk = loc[8];
    *used_p = used + RDMX_KV_LOC_SIZE;
    return RDMX_OK;
}

void rdmx__kv_prefix_encode(uint32_t hits, unsigned char *out)
{
    rdmx_put_le32(out, hits);
}

rdmx_status_t rdmx__kv_prefix_decode(const void *buf, size_t len,
                                     uint32_t *hits_p)
{
    if (buf == NULL || len < RDMX_KV_PREFIX_SIZE)
        return RDMX_ERR_PROTO;
    *hits_p = rdmx_get_le32(buf);
    return RDMX_OK;
}
