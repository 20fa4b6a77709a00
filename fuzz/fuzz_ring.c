/*
 * Fuzz target: rdmx_rpc_ring_record_decode, the record a client writes into
 * a server's request ring (docs/RPC_RINGS.md; the server copies the slot
 * out of shared memory, then decodes that copy).
 *
 * Input: u8 ctl, then the record bytes (the decoder gets all of them).
 *   ctl bits 0-1: how @why is passed (fuzz.h); bit 2: the kind the ring
 *   carries is RESPONSE (a client's ring) instead of REQUEST.
 *
 * Properties:
 *  - a record is accepted only when its fixed part says a header of 16-24
 *    bytes and data that fit the input, and its header decodes
 * (rdmx_rpc_hdr_decode, fuzzed on its own by fuzz_hdr) as a REQUEST with
 * exactly that much data; errors are RDMX_ERR_PROTO and say why;
 *  - the data the decoder points at lies inside the input, right after the
 *    header;
 *  - `after` is the fixed part's word at offset 4;
 *  - rdmx_rpc_ring_record_encode of the decoded header, length and `after`
 *    gives back a record that decodes to the same at the same place.
 */
#include "fuzz.h"

/* docs/RPC_RINGS.md's fixed part, independent of wire.c; the header's own
 * rules are fuzz_hdr's. */
static int fixed_valid(const unsigned char *p, size_t len)
{
    size_t hl, dl;

    if (len < 8)
        return 0;
    hl = rdmx_get_le16(p);
    dl = rdmx_get_le16(p + 2);
    return hl >= FZ_HDR_MIN && hl <= FZ_HDR_MAX && 8 + hl + dl <= len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const unsigned char *rec;
    size_t len, off = 0, dl = 0, off2 = 0, dl2 = 0;
    unsigned char again[8 + FZ_HDR_MAX];
    rdmx_rpc_hdr_t h, h2;
    uint32_t after = 0, after2 = 0;
    unsigned kind;
    fuzz_why_t why;
    rdmx_status_t st;

    if (size < 1)
        return 0;
    rec = data + 1;
    len = size - 1;
    fuzz_why_init(&why, data[0]);
    kind = (data[0] & 4) ? FZ_RESPONSE : FZ_REQUEST;
    st = rdmx_rpc_ring_record_decode(rec, len, kind, &h, &after, &off, &dl,
                                     why.buf, why.size);
    if (st != RDMX_OK) {
        FUZZ_CHECK(st == RDMX_ERR_PROTO, "status %d", st);
        fuzz_why_check_error(&why);
        goto done;
    }
    FUZZ_CHECK(fixed_valid(rec, len), "a record with a bad fixed part was "
                                      "accepted");
    FUZZ_CHECK(h.kind == kind, "kind %u accepted for %u", h.kind, kind);
    FUZZ_CHECK(after == rdmx_get_le32(rec + 4), "after %u, bytes say %u", after,
               rdmx_get_le32(rec + 4));
    FUZZ_CHECK(off == 8 + (size_t)rdmx_get_le16(rec),
               "data at %zu, header of %u bytes", off, rdmx_get_le16(rec));
    FUZZ_CHECK(dl == rdmx_get_le16(rec + 2) && off + dl <= len,
               "data [%zu, +%zu) in a record of %zu", off, dl, len);
    FUZZ_CHECK((size_t)h.aux + h.payload == dl,
               "aux %u + payload %u for %zu data bytes", h.aux, h.payload, dl);
    off2 = rdmx_rpc_ring_record_encode(&h, dl, after, again);
    FUZZ_CHECK(off2 >= 8 + FZ_HDR_MIN && off2 <= sizeof(again),
               "re-encoded header ends at %zu", off2);
    {
        unsigned char *whole = malloc(off2 + dl + 1);

        memcpy(whole, again, off2);
        memset(whole + off2, 0x3c, dl);
        st = rdmx_rpc_ring_record_decode(whole, off2 + dl, kind, &h2, &after2,
                                         &off, &dl2, NULL, 0);
        FUZZ_CHECK(st == RDMX_OK && dl2 == dl && off == off2 && after2 == after,
                   "re-encoded record: status %d, data [%zu, +%zu)", st, off,
                   dl2);
        FUZZ_CHECK(h2.kind == h.kind && h2.id == h.id &&
                       h2.handler == h.handler && h2.flags == h.flags &&
                       h2.deadline_us == h.deadline_us && h2.aux == h.aux &&
                       h2.payload == h.payload,
                   "re-encoded header decodes differently");
        free(whole);
    }
done:
    fuzz_why_free(&why);
    return 0;
}
