/*
 * Small RPC calls written straight into shared memory: a connection's
 * region, its rings' records, and the sleeping words (ring.h,
 * docs/RPC_RINGS.md).
 */
#include "rpc/ring.h"

#include "util/endian.h"
#include "util/peer_fence.h"

#include <stdio.h>
#include <string.h>

/* @base's two rings as one side sees them. */
static void rings_set(unsigned char *base, rdmx_ring_t *req, rdmx_ring_t *ans)
{
    req->base = base;
    req->next = 1;
    ans->base = base + RDMX_RING_BYTES;
    ans->next = 1;
    req->lean = ans->lean = rdmx__peer_fence_ready();
    req->defer = ans->defer = req->owed = ans->owed = 0;
}

rdmx_status_t rdmx__rings_create(rdmx_context_t *ctx, rdmx_mr_t **mr_p,
                                 rdmx_ring_t *req, rdmx_ring_t *ans, void *desc,
                                 size_t cap, size_t *len_p)
{
    rdmx_status_t st;

    *mr_p = NULL;
    st = rdmx_mem_alloc(ctx, RDMX_RINGS_BYTES,
                        RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, mr_p);
    if (st != RDMX_OK)
        return st;
    st = rdmx_mr_pack(*mr_p, 0, RDMX_RINGS_BYTES,
                      RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, desc, cap, len_p);
    if (st != RDMX_OK) {
        rdmx_mem_deregister(*mr_p);
        *mr_p = NULL;
        return st;
    }
    /* (zeroed: no sequence written, nobody asleep, both sides fence) */
    rings_set(rdmx_mr_addr(*mr_p), req, ans);
    /* The server, the requests ring's reader, makes the heavy fence before
     * it sleeps where it can, so its clients need not fence each request.
     * The answers ring keeps fences on both sides: its reader, a client,
     * goes to sleep far more often (docs/RPC_RINGS.md, "Sleeping"). */
    __atomic_store_n((uint32_t *)(req->base + RDMX_RING_FENCES),
                     (uint32_t)rdmx__peer_fence_ready(), __ATOMIC_RELAXED);
    return RDMX_OK;
}

rdmx_status_t rdmx__rings_attach(rdmx_ep_t *ep, const void *desc, size_t len,
                                 rdmx_rmem_t **rmem_p, rdmx_ring_t *req,
                                 rdmx_ring_t *ans)
{
    rdmx_status_t st;
    void *base;

    *rmem_p = NULL;
    st = rdmx_rmem_unpack(ep, desc, len, rmem_p);
    if (st != RDMX_OK)
        return st;
    if (rdmx_rmem_length(*rmem_p) != RDMX_RINGS_BYTES ||
        (rdmx_rmem_access(*rmem_p) & RDMX_ACCESS_WRITE) == 0) {
        rdmx_rmem_destroy(*rmem_p);
        *rmem_p = NULL;
        return rdmx__error(RDMX_ERR_BAD_DESCRIPTOR,
                           "rings: not %llu bytes, or no write access",
                           (unsigned long long)RDMX_RINGS_BYTES);
    }
    if (rdmx__rmem_map(*rmem_p, &base) != RDMX_OK) {
        rdmx_rmem_destroy(*rmem_p);
        *rmem_p = NULL;
        return RDMX_ERR_UNSUPPORTED;
    }
    rings_set(base, req, ans);
    return RDMX_OK;
}

static unsigned char *slot_of(unsigned char *base, uint64_t seq)
{
    return base + RDMX_RING_HEAD + (seq % RDMX_RING_SLOTS) * RDMX_RING_STRIDE;
}

int rdmx__ring_write(rdmx_ring_t *o, const rdmx_rpc_hdr_t *h, uint32_t after,
                     const void *data, size_t len, const void *body,
                     size_t blen)
{
    unsigned char *s = slot_of(o->base, o->next);
    unsigned char rec[RDMX_RING_STRIDE]; /* (staged: see below) */
    unsigned char *d =
        rec + 8 + rdmx_rpc_ring_record_encode(h, len + blen, after, rec + 8);
    size_t end;
    int lean;

    if (len != 0)
        memcpy(d, data, len);
    if (blen != 0)
        memcpy(d + len, body, blen);
    /* Into the slot its lines after the first, then the rest of the first,
     * then the sequence: the reader polls the first line, so its stores
     * come last and together. Written in place in record order, the
     * header's stores took the first line from the polling reader and the
     * sequence's took it back, a second transfer between the cores per
     * record (docs/RPC_RINGS.md, "Cache lines"). */
    end = (size_t)(d + len + blen - rec);
    if (end > RDMX_RING_LINE)
        memcpy(s + RDMX_RING_LINE, rec + RDMX_RING_LINE, end - RDMX_RING_LINE);
    memcpy(s + 8, rec + 8, (end < RDMX_RING_LINE ? end : RDMX_RING_LINE) - 8);
    /* The record before its sequence (the reader acquires the sequence);
     * the sequence before the look at the sleeping word: either the reader
     * sees this record or this writer sees the reader asleep
     * (docs/RPC_RINGS.md, "Sleeping"). Where the reader makes the heavy
     * fence before its last look and this process is registered for it, a
     * release store and a plain load, kept in this order by the compiler
     * (the reader's fence orders them in the CPU). In a burst (@o->defer)
     * the same, and the fence the reader does not make is owed, once for
     * the burst, to rdmx__ring_settle: a sequentially consistent exchange
     * per record waited each time for the slot's lines to come back from
     * the polling reader. Elsewhere sequentially consistent operations on
     * both sides, in whose one total order the same holds. */
    lean = o->lean &&
           __atomic_load_n((const uint32_t *)(o->base + RDMX_RING_FENCES),
                           __ATOMIC_RELAXED) != 0;
    if (lean || o->defer) {
        __atomic_store_n((uint64_t *)s, o->next, __ATOMIC_RELEASE);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        o->next++;
        if (__atomic_load_n((const uint32_t *)o->base, __ATOMIC_RELAXED) != 0)
            return 1; /* (asleep already: woken now, nothing owed) */
        if (!lean)
            o->owed = 1;
        return 0;
    }
    __atomic_exchange_n((uint64_t *)s, o->next, __ATOMIC_SEQ_CST);
    o->next++;
    return __atomic_load_n((const uint32_t *)o->base, __ATOMIC_SEQ_CST) != 0;
}

int rdmx__ring_read(rdmx_ring_t *r, unsigned kind, rdmx_rpc_msg_t *m,
                    unsigned char rec[RDMX_RING_STRIDE], uint32_t *after,
                    char *why, size_t why_size)
{
    unsigned char *s = slot_of(r->base, r->next);
    size_t off = 0, len = 0, size;

    uint64_t seq = __atomic_load_n((const uint64_t *)s, __ATOMIC_ACQUIRE);

    /* Each look also reads the slot's second line, which a record of more
     * than 28 bytes of data reaches (32 in an answer) and its writer
     * stores before the first: the record's two lines then come over
     * together, not one after the other. The value is not used: what is
     * read is read after the acquire above (docs/RPC_RINGS.md, "Cache
     * lines"). */
    (void)*(volatile const uint64_t *)(s + RDMX_RING_LINE);
    if (seq != r->next)
        return 0;
    /* Copied out of memory the peer can still write: what is checked is
     * what is used. Only the bytes the record says it has (bounded by the
     * slot; the copy's own lengths are checked against what was copied). */
    size =
        RDMX_RPC_RING_REC_FIXED + RDMX_RPC_HDR_MAX + rdmx_get_le16(s + 8 + 2);
    if (size > RDMX_RING_STRIDE - 8)
        size = RDMX_RING_STRIDE - 8;
    memcpy(rec, s + 8, size);
    if (rdmx_rpc_ring_record_decode(rec, size, kind, &m->h, after, &off, &len,
                                    why, why_size) != RDMX_OK)
        return -1;
    m->data = rec + off;
    m->length = len;
    m->rndv = 0;
    m->can_hold = 0;
    m->ring = 1;
    m->at_ns = 0; /* (the caller's: rdmx__worker_enter) */
    return 1;
}

int rdmx__ring_pending(const rdmx_ring_t *r, uint32_t done)
{
    const unsigned char *s = slot_of(r->base, r->next);

    /* (sequentially consistent: after the exchange on `sleeping`) */
    if (__atomic_load_n((const uint64_t *)s, __ATOMIC_SEQ_CST) != r->next)
        return 0;
    /* (a peek at `after`: the record is read, and checked, by a pass) */
    return (int32_t)(rdmx_get_le32(s + 8 + 4) - done) <= 0;
}
