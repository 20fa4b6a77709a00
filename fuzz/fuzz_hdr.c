/*
 * Fuzz target: rdmx_rpc_hdr_decode (and rdmx_rpc_hdr_encode of what it
 * accepts).
 *
 * Input: u8 ctl, u64 data_len (LE), then the header bytes (any length).
 *   ctl bits 0-1: how @why is passed (fuzz.h); bit 2: pass buf = NULL.
 *
 * Properties:
 *  - the verdict equals an independent reading of docs/PROTOCOL.md
 *    (hdr_valid below); errors are RDMX_ERR_PROTO and say why; a
 *    version-1 header is refused as one;
 *  - a header that decodes is 16 bytes plus 4 per optional word its flags
 *    announce, its fields are the ones the bytes say, and
 *    rdmx_rpc_hdr_encode of them returns that length and gives back the
 *    same bytes;
 *  - after an error, kind and id hold what the bytes say when 16 or more
 *    were given and they are not a version-1 header (the server answers
 *    with them); otherwise every field is zero.
 */
#include "fuzz.h"

static int is_v1(const unsigned char *p, size_t len)
{
    return p != NULL && len >= 4 && memcmp(p, FZ_V1_MAGIC, 4) == 0;
}

static int is_call(unsigned kind)
{
    return kind == FZ_REQUEST || kind == FZ_ONEWAY;
}

/* The length a version-2 header's flags (byte 1) announce. */
static size_t announced_len(unsigned flags)
{
    return FZ_HDR_MIN + (flags & FZ_F_DEADLINE ? 4 : 0) +
           (flags & FZ_F_AUX ? 4 : 0);
}

/* docs/PROTOCOL.md, "Header" and "Validation", independent of wire.c. */
static int hdr_valid(const unsigned char *p, size_t len, uint64_t data_len)
{
    unsigned kind, flags;
    size_t off = FZ_HDR_MIN;
    uint64_t aux = 0;
    uint32_t word;

    if (p == NULL || is_v1(p, len) || len < FZ_HDR_MIN)
        return 0;
    kind = p[0] & 0x0f;
    flags = p[1];
    if (p[0] >> 4 != FZ_VERSION || kind < FZ_REQUEST || kind > FZ_KIND_MAX)
        return 0;
    if ((flags & ~FZ_F_KNOWN) != 0 || len != announced_len(flags))
        return 0;
    if (p[2] != 0 || p[3] != 0)
        return 0;
    if (flags & FZ_F_DEADLINE) {
        if (!is_call(kind) || rdmx_get_le32(p + off) == 0)
            return 0;
        off += 4;
    }
    if (flags & FZ_F_AUX) {
        aux = rdmx_get_le32(p + off);
        if (aux == 0 || aux > data_len)
            return 0;
    }
    if (data_len - aux > UINT32_MAX)
        return 0;
    word = rdmx_get_le32(p + 4);
    if (kind == FZ_ERROR)
        return (int32_t)word < 0;
    return is_call(kind) || word == 0;
}

/* The fields of an accepted header are the ones its bytes say. */
static void check_fields(const rdmx_rpc_hdr_t *h, const unsigned char *p,
                         size_t len, uint64_t data_len)
{
    unsigned kind = p[0] & 0x0f, flags = p[1];
    uint32_t word = rdmx_get_le32(p + 4);
    uint32_t deadline = 0, aux = 0;
    size_t off = FZ_HDR_MIN;

    if (flags & FZ_F_DEADLINE) {
        deadline = rdmx_get_le32(p + off);
        off += 4;
    }
    if (flags & FZ_F_AUX)
        aux = rdmx_get_le32(p + off);
    FUZZ_CHECK(len == announced_len(flags), "accepted %zu bytes, flags 0x%x",
               len, flags);
    FUZZ_CHECK(h->version == FZ_VERSION, "version %u", h->version);
    FUZZ_CHECK(h->kind == kind, "kind %u, bytes say %u", h->kind, kind);
    FUZZ_CHECK(h->flags == (flags & FZ_F_CALL), "flags 0x%x, bytes say 0x%x",
               h->flags, flags);
    FUZZ_CHECK(h->handler == (is_call(kind) ? word : 0), "handler 0x%x",
               h->handler);
    FUZZ_CHECK(h->status == (kind == FZ_ERROR ? (int32_t)word : 0),
               "status %d for kind %u", h->status, kind);
    FUZZ_CHECK(h->id == rdmx_get_le64(p + 8), "id");
    FUZZ_CHECK(h->deadline_us == deadline, "deadline %u, bytes say %u",
               h->deadline_us, deadline);
    FUZZ_CHECK(h->aux == aux, "aux %u, bytes say %u", h->aux, aux);
    FUZZ_CHECK((uint64_t)h->payload + h->aux == data_len,
               "aux %u + payload %u, data %llu", h->aux, h->payload,
               (unsigned long long)data_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const unsigned char *buf;
    size_t len, n;
    uint64_t data_len;
    unsigned ctl;
    rdmx_rpc_hdr_t h;
    unsigned char again[FZ_HDR_MAX];
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
        if (is_v1(buf, len) && why.size == FUZZ_WHY_SIZE)
            FUZZ_CHECK(strstr(why.buf, "version-1 header") != NULL,
                       "a version-1 header refused as \"%s\"", why.buf);
        if (buf != NULL && len >= FZ_HDR_MIN && !is_v1(buf, len)) {
            FUZZ_CHECK(h.kind == (buf[0] & 0x0f), "kind %u, bytes say %u",
                       h.kind, buf[0] & 0x0f);
            FUZZ_CHECK(h.id == rdmx_get_le64(buf + 8), "id not kept");
        } else {
            FUZZ_CHECK(h.kind == 0 && h.id == 0 && h.version == 0 &&
                           h.flags == 0 && h.handler == 0 && h.status == 0 &&
                           h.payload == 0 && h.aux == 0 && h.deadline_us == 0,
                       "a short or version-1 header left fields set");
        }
        fuzz_why_free(&why);
        return 0;
    }

    FUZZ_CHECK(valid, "an invalid header was accepted");
    check_fields(&h, buf, len, data_len);

    memset(again, 0x5a, sizeof(again));
    n = rdmx_rpc_hdr_encode(&h, again);
    FUZZ_CHECK(n == len, "re-encoded to %zu bytes, decoded %zu", n, len);
    FUZZ_CHECK(memcmp(again, buf, len) == 0,
               "re-encoding differs from the decoded bytes");
    fuzz_why_free(&why);
    return 0;
}
