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

static int is_call(unsigned kind)
{
    return kind == RDMX_RPC_MSG_REQUEST || kind == RDMX_RPC_MSG_ONEWAY;
}

size_t rdmx_rpc_hdr_encode(const rdmx_rpc_hdr_t *h,
                           unsigned char out[RDMX_RPC_HDR_MAX])
{
    const int call = is_call(h->kind);
    uint32_t word = 0;
    unsigned flags = h->flags & RDMX_RPC_F_CALL;
    size_t n = RDMX_RPC_HDR_MIN;

    if (call)
        word = h->handler;
    else if (h->kind == RDMX_RPC_MSG_ERROR)
        word = (uint32_t)h->status;
    if (call && h->deadline_us != 0)
        flags |= RDMX_RPC_F_DEADLINE;
    if (h->aux != 0)
        flags |= RDMX_RPC_F_AUX;
    /* version|kind, flags, reserved u16 (zero), word: one store */
    rdmx_put_le64(out, (uint64_t)word << 32 | (uint64_t)flags << 8 |
                           RDMX_RPC_VERSION << 4 | (h->kind & 0x0fu));
    rdmx_put_le64(out + 8, h->id);
    if (flags & RDMX_RPC_F_DEADLINE) {
        rdmx_put_le32(out + n, h->deadline_us);
        n += 4;
    }
    if (flags & RDMX_RPC_F_AUX) {
        rdmx_put_le32(out + n, h->aux);
        n += 4;
    }
    return n;
}

/* The checks of rdmx_rpc_hdr_decode on a header that is not version 1's:
 * on error the kind and id are in @h when 16 or more bytes arrived. */
static rdmx_status_t hdr_decode_v2(const unsigned char *p, size_t len,
                                   size_t data_len, rdmx_rpc_hdr_t *h,
                                   char *why, size_t why_size)
{
    unsigned flags;
    uint32_t word;
    size_t want = RDMX_RPC_HDR_MIN;

    if (p == NULL || len < RDMX_RPC_HDR_MIN) {
        memset(h, 0, sizeof(*h));
        WHY("header of %zu bytes, at least %d expected", len,
            RDMX_RPC_HDR_MIN);
        return RDMX_ERR_PROTO;
    }
    h->version = p[0] >> 4;
    h->kind = p[0] & 0x0f;
    flags = p[1];
    h->flags = (uint8_t)(flags & RDMX_RPC_F_CALL);
    word = rdmx_get_le32(p + 4);
    h->id = rdmx_get_le64(p + 8);
    h->handler = 0;
    h->status = 0;
    h->aux = 0;
    h->deadline_us = 0;
    h->payload = 0;
    if (h->version != RDMX_RPC_VERSION) {
        WHY("protocol version %u, this side speaks %u", h->version,
            RDMX_RPC_VERSION);
        return RDMX_ERR_PROTO;
    }
    if (h->kind < RDMX_RPC_MSG_REQUEST || h->kind > RDMX_RPC_MSG_KIND_MAX) {
        WHY("unknown message kind %u", h->kind);
        return RDMX_ERR_PROTO;
    }
    if (flags & ~RDMX_RPC_F_KNOWN) {
        WHY("unknown flags 0x%x", flags);
        return RDMX_ERR_PROTO;
    }
    want += (flags & RDMX_RPC_F_DEADLINE ? 4 : 0) +
            (flags & RDMX_RPC_F_AUX ? 4 : 0);
    if (len != want) {
        WHY("header of %zu bytes, its flags (0x%x) say %zu", len, flags,
            want);
        return RDMX_ERR_PROTO;
    }
    if (rdmx_get_le16(p + 2) != 0) {
        WHY("reserved field is %u", rdmx_get_le16(p + 2));
        return RDMX_ERR_PROTO;
    }
    want = RDMX_RPC_HDR_MIN;
    if (flags & RDMX_RPC_F_DEADLINE) {
        h->deadline_us = rdmx_get_le32(p + want);
        want += 4;
        if (!is_call(h->kind) || h->deadline_us == 0) {
            WHY("deadline of %u us in a message of kind %u", h->deadline_us,
                h->kind);
            return RDMX_ERR_PROTO;
        }
    }
    if (flags & RDMX_RPC_F_AUX) {
        h->aux = rdmx_get_le32(p + want);
        if (h->aux == 0 || h->aux > data_len) {
            WHY("aux of %u bytes, message has %zu", h->aux, data_len);
            return RDMX_ERR_PROTO;
        }
    }
    if (data_len - h->aux > UINT32_MAX) {
        WHY("payload of %zu bytes", data_len - h->aux);
        return RDMX_ERR_PROTO;
    }
    h->payload = (uint32_t)(data_len - h->aux);
    if (is_call(h->kind)) {
        h->handler = word;
    } else if (h->kind == RDMX_RPC_MSG_ERROR) {
        h->status = (int32_t)word;
        if (h->status >= 0) {
            WHY("status %d in an ERROR", h->status);
            return RDMX_ERR_PROTO;
        }
    } else if (word != 0) {
        WHY("word 0x%x at offset 4 in a message of kind %u (must be 0)", word,
            h->kind);
        return RDMX_ERR_PROTO;
    }
    return RDMX_OK;
}

/* The headers of nearly every message, read with one load and one test:
 * a REQUEST or ONEWAY (with or without a deadline) or a RESPONSE, no aux,
 * version 2, reserved bytes zero. 1 if @p is one and @h holds it; 0 for
 * anything else, which hdr_decode_v2 then reads (and refuses or accepts)
 * in full. */
static int hdr_decode_common(const unsigned char *p, size_t len,
                             size_t data_len, rdmx_rpc_hdr_t *h)
{
    uint64_t w0, deadline = 0;
    unsigned kind, flags;

    if (p == NULL || len < RDMX_RPC_HDR_MIN || data_len > UINT32_MAX)
        return 0;
    w0 = rdmx_get_le64(p); /* version|kind, flags, reserved u16, word u32 */
    kind = (unsigned)w0 & 0x0f;
    flags = (unsigned)(w0 >> 8) & 0xff;
    /* version 2, reserved zero, no flag but the call's and DEADLINE */
    if ((w0 & 0xffff00f0u) != RDMX_RPC_VERSION << 4 ||
        (flags & ~(RDMX_RPC_F_CALL | RDMX_RPC_F_DEADLINE)) != 0)
        return 0;
    if (kind == RDMX_RPC_MSG_RESPONSE) {
        if (flags != 0 || len != RDMX_RPC_HDR_MIN || (w0 >> 32) != 0)
            return 0;
    } else if (kind == RDMX_RPC_MSG_REQUEST || kind == RDMX_RPC_MSG_ONEWAY) {
        if (len !=
            (size_t)RDMX_RPC_HDR_MIN + (flags & RDMX_RPC_F_DEADLINE ? 4 : 0))
            return 0;
        if (flags & RDMX_RPC_F_DEADLINE) {
            deadline = rdmx_get_le32(p + RDMX_RPC_HDR_MIN);
            if (deadline == 0)
                return 0;
        }
    } else {
        return 0;
    }
    h->version = RDMX_RPC_VERSION;
    h->kind = (uint8_t)kind;
    h->flags = (uint8_t)(flags & RDMX_RPC_F_CALL);
    h->handler = (uint32_t)(w0 >> 32);
    h->status = 0;
    h->id = rdmx_get_le64(p + 8);
    h->payload = (uint32_t)data_len;
    h->aux = 0;
    h->deadline_us = (uint32_t)deadline;
    return 1;
}

/* Any other header, or one to refuse: read in full, and the reason. */
static rdmx_status_t __attribute__((noinline, cold))
hdr_decode_full(const unsigned char *p, size_t len, size_t data_len,
                rdmx_rpc_hdr_t *h, char *why, size_t why_size)
{
    if (hdr_decode_v2(p, len, data_len, h, why, why_size) == RDMX_OK)
        return RDMX_OK;
    /* (a version-1 header fails the checks above: its first byte, 'R',
     * reads as version 5) */
    if (p != NULL && len >= 4 && rdmx_get_le32(p) == RDMX_RPC_V1_MAGIC) {
        memset(h, 0, sizeof(*h));
        WHY("a version-1 header (%zu bytes; magic RXRP): this side speaks "
            "version %u",
            len, RDMX_RPC_VERSION);
    }
    return RDMX_ERR_PROTO;
}

rdmx_status_t rdmx_rpc_hdr_decode(const void *buf, size_t len, size_t data_len,
                                  rdmx_rpc_hdr_t *h, char *why, size_t why_size)
{
    if (hdr_decode_common(buf, len, data_len, h))
        return RDMX_OK;
    return hdr_decode_full(buf, len, data_len, h, why, why_size);
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

size_t rdmx_rpc_ring_record_encode(const rdmx_rpc_hdr_t *h, size_t dlen,
                                   uint32_t after, unsigned char *out)
{
    size_t hl = rdmx_rpc_hdr_encode(h, out + RDMX_RPC_RING_REC_FIXED);

    rdmx_put_le16(out, (uint16_t)hl);
    rdmx_put_le16(out + 2, (uint16_t)dlen);
    rdmx_put_le32(out + 4, after);
    return RDMX_RPC_RING_REC_FIXED + hl;
}

rdmx_status_t rdmx_rpc_ring_record_decode(const unsigned char *rec, size_t size,
                                          unsigned kind, rdmx_rpc_hdr_t *h,
                                          uint32_t *after, size_t *data_off,
                                          size_t *data_len, char *why,
                                          size_t why_size)
{
    size_t hl, dl;

    if (size < RDMX_RPC_RING_REC_FIXED) {
        memset(h, 0, sizeof(*h));
        WHY("ring record of %zu bytes", size);
        return RDMX_ERR_PROTO;
    }
    hl = rdmx_get_le16(rec);
    dl = rdmx_get_le16(rec + 2);
    if (hl < RDMX_RPC_HDR_MIN || hl > RDMX_RPC_HDR_MAX ||
        hl > size - RDMX_RPC_RING_REC_FIXED ||
        dl > size - RDMX_RPC_RING_REC_FIXED - hl) {
        memset(h, 0, sizeof(*h));
        WHY("ring record of %zu header and %zu data bytes in %zu", hl, dl,
            size);
        return RDMX_ERR_PROTO;
    }
    *after = rdmx_get_le32(rec + 4);
    /* (it sets all of @h, as the early returns above do by clearing it) */
    if (rdmx_rpc_hdr_decode(rec + RDMX_RPC_RING_REC_FIXED, hl, dl, h, why,
                            why_size) != RDMX_OK)
        return RDMX_ERR_PROTO;
    if (h->kind != kind) {
        WHY("a ring record of kind %u where kind %u goes", h->kind, kind);
        return RDMX_ERR_PROTO;
    }
    *data_off = RDMX_RPC_RING_REC_FIXED + hl;
    *data_len = dl;
    return RDMX_OK;
}
