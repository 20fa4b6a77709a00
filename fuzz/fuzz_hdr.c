/*
 * Fuzz target: rdmx_rpc_hdr_decode.
 *
 * Input: u8 ctl, u64 data_len (LE), then the header bytes (any length).
 *   ctl bits 0-1: how @why is passed (fuzz.h); bit 2: pass buf = NULL.
 *
 * Properties:
 *  - the verdict equals an independent reading of docs/PROTOCOL.md
 *    (hdr_valid below); errors are RDMX_ERR_PROTO and say why;
 *  - a header that decodes has exactly 40 bytes, and rdmx_rpc_hdr_encode of
 *    the decoded fields gives back the same 40 bytes;
 *  - after an error, kind and id hold what the bytes say when 40 or more
 *    were given (the server answers with them), all zero otherwise.
 */
#include "fuzz.h"

/* docs/PROTOCOL.md, "Header" and "Validation", independent of wire.c. */
static int hdr_valid(const unsigned char *p, size_t len, uint64_t data_len)
{
    uint8_t kind;
    uint16_t flags;
    int32_t status;
    uint64_t payload, aux;

    if (p == NULL || len != FZ_HDR_SIZE)
        return 0;
    if (memcmp(p, "RXRP", 4) != 0 || p[4] != FZ_VERSION)
        return 0;
    kind = p[5];
    flags = (uint16_t)(p[6] | p[7] << 8);
    if (kind < FZ_REQUEST || kind > FZ_KIND_MAX || (flags & ~FZ_F_KNOWN) != 0)
        return 0;
    status = (int32_t)rdmx_get_le32(p + 12);
    payload = rdmx_get_le32(p + 24);
    aux = rdmx_get_le32(p + 28);
    if (payload + aux != data_len)
        return 0;
    if (kind == FZ_ERROR ? status >= 0 : status != 0)
        return 0;
    return rdmx_get_le32(p + 36) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const unsigned char *buf;
    size_t len;
    uint64_t data_len;
    unsigned ctl;
    rdmx_rpc_hdr_t h;
    unsigned char again[FZ_HDR_SIZE];
    fuzz_why_t why;
    rdmx_status_t st;
    int valid;

    if (size < 9)
        return 0;
    ctl = data[0];
    data_len = rdmx_get_le64(data + 1);
    buf = (ctl & 4) ? NULL : data + 9;
    len = size - 9;
    if ((size_t)data_len != data_len)
        return 0;

    fuzz_why_init(&why, ctl);
    memset(&h, 0xa5, sizeof(h));
    st = rdmx_rpc_hdr_decode(buf, len, (size_t)data_len, &h, why.buf, why.size);
    valid = hdr_valid(buf, len, data_len);

    if (st != RDMX_OK) {
        FUZZ_CHECK(st == RDMX_ERR_PROTO, "status %d", st);
        FUZZ_CHECK(!valid, "a valid header was refused: %s",
                   why.buf && why.size > 1 ? why.buf : "?");
        fuzz_why_check_error(&why);
        if (buf != NULL && len >= FZ_HDR_SIZE) {
            FUZZ_CHECK(h.kind == buf[5], "kind %u, bytes say %u", h.kind,
                       buf[5]);
            FUZZ_CHECK(h.id == rdmx_get_le64(buf + 16), "id not kept");
        } else {
            FUZZ_CHECK(h.kind == 0 && h.id == 0 && h.version == 0 &&
                           h.flags == 0 && h.handler == 0 && h.status == 0 &&
                           h.payload == 0 && h.aux == 0 && h.deadline_us == 0 &&
                           h.credits == 0,
                       "short header left fields set");
        }
        fuzz_why_free(&why);
        return 0;
    }

    FUZZ_CHECK(valid, "an invalid header was accepted");
    FUZZ_CHECK(len == FZ_HDR_SIZE, "accepted %zu bytes", len);
    FUZZ_CHECK(h.version == FZ_VERSION, "version %u", h.version);
    FUZZ_CHECK(h.kind >= FZ_REQUEST && h.kind <= FZ_KIND_MAX, "kind %u",
               h.kind);
    FUZZ_CHECK((h.flags & ~FZ_F_KNOWN) == 0, "flags 0x%x", h.flags);
    FUZZ_CHECK((uint64_t)h.payload + h.aux == data_len, "lengths");
    FUZZ_CHECK(h.kind == FZ_ERROR ? h.status < 0 : h.status == 0,
               "status %d for kind %u", h.status, h.kind);
    FUZZ_CHECK(h.credits == 0, "reserved %u", h.credits);

    memset(again, 0, sizeof(again));
    rdmx_rpc_hdr_encode(&h, again);
    FUZZ_CHECK(memcmp(again, buf, FZ_HDR_SIZE) == 0,
               "re-encoding differs from the decoded bytes");
    fuzz_why_free(&why);
    return 0;
}
