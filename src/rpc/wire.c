/*
 * RPC wire format: encoders and validating decoders (see wire.h and
 * docs/PROTOCOL.md). Nothing here trusts a length it read.
 */
#include "rpc/wire.h"

#include "util/endian.h"

#include <stdio.h>
#include <string.h>

#define WHY(...)                                                               \
    do {                                                                       \
        if (why != NULL && why_size > 0)                                       \
            snprintf(why, why_size, __VA_ARGS__);                              \
    } while (0)

void rdmx_rpc_hdr_encode(const rdmx_rpc_hdr_t *h,
                         unsigned char out[RDMX_RPC_HDR_SIZE])
{
    rdmx_put_le32(out + 0, RDMX_RPC_MAGIC);
    out[4] = h->version;
    out[5] = h->kind;
    rdmx_put_le16(out + 6, h->flags);
    rdmx_put_le32(out + 8, h->handler);
    rdmx_put_le32(out + 12, (uint32_t)h->status);
    rdmx_put_le64(out + 16, h->id);
    rdmx_put_le32(out + 24, h->payload);
    rdmx_put_le32(out + 28, h->aux);
    rdmx_put_le32(out + 32, h->deadline_us);
    rdmx_put_le32(out + 36, h->credits);
}

rdmx_status_t rdmx_rpc_hdr_decode(const void *buf, size_t len,
                                  size_t data_len, rdmx_rpc_hdr_t *h,
                                  char *why, size_t why_size)
{
    const unsigned char *p = buf;
    uint32_t magic;

    memset(h, 0, sizeof(*h));
    if (buf == NULL || len < RDMX_RPC_HDR_SIZE) {
        WHY("header of %zu bytes, expected %d", len, RDMX_RPC_HDR_SIZE);
        return RDMX_ERR_PROTO;
    }
    magic = rdmx_get_le32(p);
    h->version = p[4];
    h->kind = p[5];
    h->flags = rdmx_get_le16(p + 6);
    h->handler = rdmx_get_le32(p + 8);
    h->status = (int32_t)rdmx_get_le32(p + 12);
    h->id = rdmx_get_le64(p + 16);
    h->payload = rdmx_get_le32(p + 24);
    h->aux = rdmx_get_le32(p + 28);
    h->deadline_us = rdmx_get_le32(p + 32);
    h->credits = rdmx_get_le32(p + 36);
    if (magic != RDMX_RPC_MAGIC) {
        WHY("bad magic 0x%08x", magic);
        return RDMX_ERR_PROTO;
    }
    if (len != RDMX_RPC_HDR_SIZE) {
        WHY("header of %zu bytes, expected %d", len, RDMX_RPC_HDR_SIZE);
        return RDMX_ERR_PROTO;
    }
    if (h->version != RDMX_RPC_VERSION) {
        WHY("protocol version %u, this side speaks %u", h->version,
            RDMX_RPC_VERSION);
        return RDMX_ERR_PROTO;
    }
    if (h->kind < RDMX_RPC_MSG_REQUEST || h->kind > RDMX_RPC_MSG_KIND_MAX) {
        WHY("unknown message kind %u", h->kind);
        return RDMX_ERR_PROTO;
    }
    if (h->flags & ~RDMX_RPC_F_KNOWN) {
        WHY("unknown flags 0x%x", h->flags);
        return RDMX_ERR_PROTO;
    }
    if ((uint64_t)h->payload + h->aux != data_len) {
        WHY("lengths say %u + %u bytes, message has %zu", h->aux, h->payload,
            data_len);
        return RDMX_ERR_PROTO;
    }
    if (h->kind == RDMX_RPC_MSG_ERROR ? h->status >= 0 : h->status != 0) {
        WHY("status %d in a message of kind %u", h->status, h->kind);
        return RDMX_ERR_PROTO;
    }
    if (h->credits != 0) {
        WHY("reserved field is %u", h->credits);
        return RDMX_ERR_PROTO;
    }
    return RDMX_OK;
}

rdmx_status_t rdmx_rpc_bulk_decode(const void *aux, size_t len,
                                   rdmx_rpc_bulk_ref_t *out, unsigned max,
                                   unsigned *count_p, char *why,
                                   size_t why_size)
{
    const unsigned char *p = aux;
    size_t off = 4;
    unsigned count, i;

    *count_p = 0;
    if (len == 0)
        return RDMX_OK;
    if (p == NULL || len < 4) {
        WHY("bulk table of %zu bytes", len);
        return RDMX_ERR_PROTO;
    }
    count = p[0];
    if (p[1] != 0 || p[2] != 0 || p[3] != 0) {
        WHY("bulk table: reserved bytes set");
        return RDMX_ERR_PROTO;
    }
    if (count == 0 || count > max) {
        WHY("bulk table: %u descriptors, 1..%u allowed", count, max);
        return RDMX_ERR_PROTO;
    }
    for (i = 0; i < count; i++) {
        uint32_t dlen;
        if (len - off < 4) {
            WHY("bulk table: descriptor %u truncated", i);
            return RDMX_ERR_PROTO;
        }
        dlen = rdmx_get_le32(p + off);
        off += 4;
        if (dlen == 0 || dlen > RDMX_RPC_BULK_DESC_MAX || dlen > len - off) {
            WHY("bulk table: descriptor %u of %u bytes, %zu left", i, dlen,
                len - off);
            return RDMX_ERR_PROTO;
        }
        out[i].desc = p + off;
        out[i].length = dlen;
        off += dlen;
    }
    if (off != len) {
        WHY("bulk table: %zu trailing bytes", len - off);
        return RDMX_ERR_PROTO;
    }
    *count_p = count;
    return RDMX_OK;
}

#define WELCOME_FIXED 24

size_t rdmx_rpc_welcome_size(uint32_t nhandlers)
{
    return WELCOME_FIXED + (size_t)nhandlers * 8;
}

void rdmx_rpc_welcome_encode(const rdmx_rpc_welcome_t *wl,
                             const uint32_t *ids, const uint32_t *flags,
                             unsigned char *out)
{
    unsigned char *p = out + WELCOME_FIXED;

    rdmx_put_le32(out + 0, wl->credits);
    rdmx_put_le32(out + 4, wl->worker);
    rdmx_put_le64(out + 8, wl->max_message);
    rdmx_put_le32(out + 16, wl->nhandlers);
    rdmx_put_le32(out + 20, 0);
    for (uint32_t i = 0; i < wl->nhandlers; i++, p += 8) {
        rdmx_put_le32(p, ids[i]);
        rdmx_put_le32(p + 4, flags[i]);
    }
}

rdmx_status_t rdmx_rpc_welcome_decode(const void *aux, size_t len,
                                      rdmx_rpc_welcome_t *wl, char *why,
                                      size_t why_size)
{
    const unsigned char *p = aux;
    uint32_t reserved;

    memset(wl, 0, sizeof(*wl));
    if (p == NULL || len < WELCOME_FIXED) {
        WHY("welcome of %zu bytes, at least %d expected", len, WELCOME_FIXED);
        return RDMX_ERR_PROTO;
    }
    wl->credits = rdmx_get_le32(p);
    wl->worker = rdmx_get_le32(p + 4);
    wl->max_message = rdmx_get_le64(p + 8);
    wl->nhandlers = rdmx_get_le32(p + 16);
    reserved = rdmx_get_le32(p + 20);
    if (wl->credits == 0) {
        WHY("welcome: zero credits");
        return RDMX_ERR_PROTO;
    }
    if (reserved != 0 || wl->nhandlers > RDMX_RPC_HANDLERS_MAX) {
        WHY("welcome: %u handlers, reserved word %u", wl->nhandlers,
            reserved);
        return RDMX_ERR_PROTO;
    }
    if (len != rdmx_rpc_welcome_size(wl->nhandlers)) {
        WHY("welcome of %zu bytes for %u handlers", len, wl->nhandlers);
        return RDMX_ERR_PROTO;
    }
    wl->handlers = p + WELCOME_FIXED;
    return RDMX_OK;
}

int rdmx_rpc_welcome_flags(const rdmx_rpc_welcome_t *wl, uint32_t id)
{
    for (uint32_t i = 0; i < wl->nhandlers; i++)
        if (rdmx_get_le32(wl->handlers + (size_t)i * 8) == id)
            return (int)rdmx_get_le32(wl->handlers + (size_t)i * 8 + 4);
    return -1;
}
