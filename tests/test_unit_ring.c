/*
 * A request ring's records written and read back in one process
 * (src/rpc/ring.c, docs/RPC_RINGS.md): every data length that fits a
 * slot, as data alone and split into data and body, requests with and
 * without a deadline and aux bytes, and answers, three times round the 64
 * slots. Each record reads back with the header and the bytes written;
 * the slot's bytes past the record stay as they were (the writer stores
 * its lines out of order, from a staged copy: none may spill); a record
 * is not seen before its sequence word is written; the reader's sleeping
 * word is what the writer reports, and a written record is pending for a
 * sleeper. The other side of a ring is another process in every other
 * test; here both ends are this one, so what is checked is the bytes.
 */
#include "harness.h"
#include "rpc/ring.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define UNTOUCHED 0xee

static unsigned char *slot_at(unsigned char *base, uint64_t seq)
{
    return base + RDMX_RING_HEAD + (seq % RDMX_RING_SLOTS) * RDMX_RING_STRIDE;
}

/* Write one record of @dlen data bytes (@split of them as data, the rest
 * as body) and read it back. */
static void round_trip(rdmx_ring_t *wr, rdmx_ring_t *rd, unsigned kind,
                       size_t dlen, size_t split, uint32_t deadline_us,
                       uint32_t aux)
{
    unsigned char data[RDMX_RING_STRIDE], rec[RDMX_RING_STRIDE];
    unsigned char *s = slot_at(wr->base, wr->next);
    rdmx_rpc_hdr_t h;
    rdmx_rpc_msg_t m;
    uint32_t after = 0;
    char why[160];
    size_t end;
    int r;

    CHECK(dlen >= aux && split <= dlen);
    rdmx__rpc_hdr(&h, (rdmx_rpc_kind_t)kind,
                  kind == RDMX_RPC_MSG_REQUEST ? 0x1234u : 0x99u,
                  0x5000000000ull + wr->next);
    h.payload = (uint32_t)(dlen - aux);
    h.aux = aux;
    h.deadline_us = deadline_us;
    for (size_t i = 0; i < dlen; i++)
        data[i] = (unsigned char)(wr->next * 31 + i * 7 + 1);
    /* the slot as a reader finds it before the write: old bytes, and a
     * sequence word that is not the next one */
    memset(s, UNTOUCHED, RDMX_RING_STRIDE);
    CHECK(rdmx__ring_read(rd, kind, &m, rec, &after, why, sizeof(why)) == 0);

    CHECK(rdmx__ring_write(wr, &h, 7, data, split, data + split,
                           dlen - split) == 0);
    /* the record's end: sequence, fixed part, header, data */
    end =
        8 + RDMX_RPC_RING_REC_FIXED + (size_t)s[8] + (size_t)s[9] * 256 + dlen;
    CHECKF(end <= RDMX_RING_STRIDE, "record of %zu bytes", end);
    for (size_t i = end; i < RDMX_RING_STRIDE; i++)
        CHECKF(s[i] == UNTOUCHED,
               "%zu data bytes (%zu as data): slot byte %zu written past "
               "the record's end %zu",
               dlen, split, i, end);

    r = rdmx__ring_read(rd, kind, &m, rec, &after, why, sizeof(why));
    CHECKF(r == 1, "%zu data bytes: read gave %d (%s)", dlen, r,
           r < 0 ? why : "not written");
    CHECK(m.h.kind == kind && m.h.id == h.id);
    CHECK(m.h.handler == (kind == RDMX_RPC_MSG_REQUEST ? h.handler : 0));
    CHECK(m.h.payload == h.payload && m.h.aux == aux);
    CHECK(m.h.deadline_us == (kind == RDMX_RPC_MSG_REQUEST ? deadline_us : 0));
    CHECK(after == 7 && m.ring == 1);
    CHECKF(m.length == dlen, "%zu data bytes read as %zu", dlen, m.length);
    CHECKF(memcmp(m.data, data, dlen) == 0,
           "%zu data bytes (%zu as data): not the bytes written", dlen, split);
    rdmx__ring_consume(rd);
    /* (the next slot: nothing written there yet) */
    CHECK(rdmx__ring_read(rd, kind, &m, rec, &after, why, sizeof(why)) == 0);
}

int main(void)
{
    unsigned char *base = aligned_alloc(64, RDMX_RING_BYTES);
    rdmx_ring_t wr, rd;
    unsigned records = 0;

    CHECK(base != NULL);
    memset(base, 0, RDMX_RING_BYTES);
    wr = (rdmx_ring_t){.base = base, .next = 1};
    rd = wr;

    /* Requests: every length that fits (deadline and aux make the header
     * 20 and 24 bytes, the longest), then answers, until three times
     * round the ring. */
    while (records < 3 * RDMX_RING_SLOTS) {
        for (size_t dlen = 0; rdmx__ring_fits(dlen); dlen++) {
            uint32_t aux = dlen >= 40 && dlen % 3 == 0 ? 40 : 0;
            round_trip(&wr, &rd, RDMX_RPC_MSG_REQUEST, dlen, dlen, 0, 0);
            round_trip(&wr, &rd, RDMX_RPC_MSG_REQUEST, dlen, dlen / 3,
                       1000 + (uint32_t)dlen, aux);
            round_trip(&wr, &rd, RDMX_RPC_MSG_RESPONSE, dlen, dlen - dlen / 4,
                       0, 0);
            records += 3;
        }
    }

    /* A sleeping reader: the writer says so, and the record waits for it. */
    rdmx__ring_sleeping(&rd, 1);
    CHECK(rdmx__ring_pending(&rd, 0) == 0);
    {
        rdmx_rpc_hdr_t h;
        unsigned char b[64] = {1, 2, 3};

        rdmx__rpc_hdr(&h, RDMX_RPC_MSG_RESPONSE, 0, 1);
        h.payload = sizeof(b);
        CHECK(rdmx__ring_write(&wr, &h, 0, b, sizeof(b), NULL, 0) == 1);
    }
    CHECK(rdmx__ring_pending(&rd, 0) == 1);
    rdmx__ring_sleeping(&rd, 0);
    free(base);
    th_log("ok: %u records, data of 0-%zu bytes", records,
           (size_t)(RDMX_RING_RECORD_MAX - RDMX_RPC_HDR_MAX));
    return 0;
}
