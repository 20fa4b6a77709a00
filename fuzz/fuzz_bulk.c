/*
 * Fuzz target: rdmx_rpc_bulk_decode.
 *
 * Input: u8 ctl, u8 max, then the bulk table (a REQUEST's aux bytes).
 *   ctl bits 0-1: how @why is passed (fuzz.h); bit 2: pass aux = NULL.
 * The output array has exactly @max entries on the heap, so ASan sees a
 * write past it.
 *
 * Properties:
 *  - the verdict equals an independent reading of docs/PROTOCOL.md
 *    (bulk_valid below); errors are RDMX_ERR_PROTO with *count_p == 0 and
 *    say why;
 *  - a table that decodes: an empty one has count 0; otherwise count is
 *    byte 0, 1..max; every descriptor pointer and length lies inside the
 *    input, each length is 1..1024 and equals the u32 in
 *    front of its bytes, the entries tile the table with no gap or
 *    trailing byte, and re-encoding the entries gives back the input;
 *  - entries past count are not written.
 */
#include "fuzz.h"

/* docs/PROTOCOL.md, "Bulk table", independent of wire.c. */
static int bulk_valid(const unsigned char *p, size_t len, unsigned max)
{
    size_t pos;
    unsigned count;

    if (len == 0)
        return 1;
    if (p == NULL || len < 4 || p[1] || p[2] || p[3])
        return 0;
    count = p[0];
    if (count < 1 || count > max)
        return 0;
    pos = 4;
    while (count-- > 0) {
        uint64_t dlen;
        if (pos + 4 > len)
            return 0;
        dlen = rdmx_get_le32(p + pos);
        pos += 4;
        if (dlen < 1 || dlen > FZ_BULK_DESC_MAX || pos + dlen > len)
            return 0;
        pos += (size_t)dlen;
    }
    return pos == len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned char sentinel_byte = 0xee;
    const unsigned char *aux;
    size_t len;
    unsigned ctl, max, count = 12345, i;
    rdmx_rpc_bulk_ref_t *out, sentinel;
    fuzz_why_t why;
    rdmx_status_t st;
    int valid;

    if (size < 2)
        return 0;
    ctl = data[0];
    max = data[1];
    aux = (ctl & 4) ? NULL : data + 2;
    len = size - 2;

    sentinel.desc = &sentinel_byte;
    sentinel.length = 0xdeadbeef;
    out = malloc(max ? max * sizeof(*out) : 1);
    for (i = 0; i < max; i++)
        out[i] = sentinel;
    fuzz_why_init(&why, ctl);

    st = rdmx_rpc_bulk_decode(aux, len, out, max, &count, why.buf, why.size);
    valid = bulk_valid(aux, len, max);

    if (st != RDMX_OK) {
        FUZZ_CHECK(st == RDMX_ERR_PROTO, "status %d", st);
        FUZZ_CHECK(!valid, "a valid table was refused: %s",
                   why.buf && why.size > 1 ? why.buf : "?");
        FUZZ_CHECK(count == 0, "count %u after an error", count);
        fuzz_why_check_error(&why);
        goto done;
    }

    FUZZ_CHECK(valid, "an invalid table was accepted (%u entries)", count);
    if (len == 0) {
        FUZZ_CHECK(count == 0, "empty table, count %u", count);
    } else {
        const unsigned char *end = aux + len, *next = aux + 4;
        unsigned char *again = malloc(len);
        size_t pos = 4;

        FUZZ_CHECK(count == aux[0], "count %u, byte 0 says %u", count, aux[0]);
        FUZZ_CHECK(count >= 1 && count <= max, "count %u, max %u", count, max);
        memset(again, 0, len);
        again[0] = (unsigned char)count;
        for (i = 0; i < count; i++) {
            const unsigned char *d = out[i].desc;
            uint32_t n = out[i].length;
            FUZZ_CHECK(n >= 1 && n <= FZ_BULK_DESC_MAX, "entry %u: length %u",
                       i, n);
            FUZZ_CHECK(d >= aux + 8 && d <= end && n <= (size_t)(end - d),
                       "entry %u: [%td, +%u) outside the %zu-byte input", i,
                       d - aux, n, len);
            FUZZ_CHECK(d == next + 4, "entry %u at %td, expected %td", i,
                       d - aux, next + 4 - aux);
            FUZZ_CHECK(rdmx_get_le32(d - 4) == n,
                       "entry %u: length %u, prefix says %u", i, n,
                       rdmx_get_le32(d - 4));
            next = d + n;
            FUZZ_CHECK(pos + 4 + n <= len, "re-encoding overflows");
            rdmx_put_le32(again + pos, n);
            memcpy(again + pos + 4, d, n);
            pos += 4 + n;
        }
        FUZZ_CHECK(next == end, "%td trailing bytes accepted", end - next);
        FUZZ_CHECK(pos == len && memcmp(again, aux, len) == 0,
                   "re-encoding differs from the decoded bytes");
        free(again);
    }
    for (i = count; i < max; i++)
        FUZZ_CHECK(out[i].desc == sentinel.desc &&
                       out[i].length == sentinel.length,
                   "entry %u past count %u was written", i, count);
done:
    fuzz_why_free(&why);
    free(out);
    return 0;
}
