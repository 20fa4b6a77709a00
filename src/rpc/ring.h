/*
 * ring.h — small RPC calls written straight into shared memory
 * (docs/RPC_RINGS.md).
 *
 * A server gives each client on shared memory one region it allocated
 * (rdmx_mem_alloc) holding two rings of RDMX_RING_SLOTS slots: the
 * requests ring, which the client writes and the server reads, then the
 * answers ring, which the server writes and the client reads. The client
 * maps the region (rdmx__rmem_map); the server never maps memory of a
 * client's (UCX 1.13 crashes when it unpacks the key of a shared-memory
 * segment that is already gone, which a client that closes at once would
 * make happen). Record k of a ring goes into slot k mod RDMX_RING_SLOTS,
 * its later cache lines first and its sequence word last; the reader
 * polls its next slot's sequence word and second line. A ring's first
 * cache line holds its reader's `sleeping` word, which a writer reads
 * after its record to learn whether it must wake the reader with a
 * message, and its `fences` word: 1 when the reader makes the heavy
 * fence before it looks a last time (util/peer_fence.h), so that a writer
 * whose process is registered may publish with a plain release store
 * instead of a sequentially consistent exchange.
 *
 * A ring: line 0 {sleeping u32, fences u32, 0...}; then the slots,
 * RDMX_RING_STRIDE bytes each: {sequence u64, the record (wire.h: lengths,
 * `after`, header, data)}. Little-endian as the wire (the peer is on the same
 * host).
 */
#ifndef RDMX_RPC_RING_H
#define RDMX_RPC_RING_H

#include "rpc/internal.h"
#include "util/fence.h"

#define RDMX_RING_SLOTS  64u
#define RDMX_RING_STRIDE 256u
#define RDMX_RING_LINE   64u            /* a cache line */
#define RDMX_RING_HEAD   RDMX_RING_LINE /* line 0: the reader's words */
#define RDMX_RING_FENCES 4u             /* line 0: the `fences` word's offset */
#define RDMX_RING_REC    16u            /* sequence, the record's fixed part */
#define RDMX_RING_BYTES  (RDMX_RING_HEAD + RDMX_RING_SLOTS * RDMX_RING_STRIDE)
/* A connection's region: its requests ring, then its answers ring. */
#define RDMX_RINGS_BYTES (2 * RDMX_RING_BYTES)
/* Header and data of one record at most. */
#define RDMX_RING_RECORD_MAX (RDMX_RING_STRIDE - RDMX_RING_REC)
/* A packed descriptor of the region fits this (RING's aux). */
#define RDMX_RING_DESC_MAX 256u

/* One ring as one side sees it: where it is, and the sequence of the next
 * record this side writes or reads (from 1). base NULL: none. */
typedef struct {
    unsigned char *base;
    uint64_t next;
    int lean;  /* writer: this process may skip its fence where the ring's
                * reader says it fences (rdmx__peer_fence_ready) */
    int defer; /* writer, set by the caller for a burst of records: their
                * fence waits for rdmx__ring_settle at the burst's end */
    int owed;  /* writer: a record of the burst still owes that fence */
} rdmx_ring_t;

/* Server: allocate a connection's region on @ctx, set its two rings, and
 * pack its descriptor for the client into @desc (@cap bytes;
 * RDMX_RING_DESC_MAX is enough), its length to *@len_p. */
rdmx_status_t rdmx__rings_create(rdmx_context_t *ctx, rdmx_mr_t **mr_p,
                                 rdmx_ring_t *req, rdmx_ring_t *ans, void *desc,
                                 size_t cap, size_t *len_p);

/* Client: map the region the server described on @ep and set its two
 * rings. RDMX_ERR_UNSUPPORTED when the transport does not map it here;
 * RDMX_ERR_BAD_DESCRIPTOR for a bad one. */
rdmx_status_t rdmx__rings_attach(rdmx_ep_t *ep, const void *desc, size_t len,
                                 rdmx_rmem_t **rmem_p, rdmx_ring_t *req,
                                 rdmx_ring_t *ans);

/* Whether a record of @len bytes of data fits a slot. */
static inline int rdmx__ring_fits(size_t len)
{
    return len <= RDMX_RING_RECORD_MAX - RDMX_RPC_HDR_MAX;
}

/* Write the next record (header @h, `after` @after, data @data then
 * @body) into @o's slot for o->next, which the caller knows to be free,
 * and advance. Returns 1 when the reader may be asleep (the caller wakes
 * it with a message). With @o->defer set the record's fence waits for
 * rdmx__ring_settle. */
int rdmx__ring_write(rdmx_ring_t *o, const rdmx_rpc_hdr_t *h, uint32_t after,
                     const void *data, size_t len, const void *body,
                     size_t blen);

/* The end of a burst of records written with @o->defer set: 1 when the
 * reader may be asleep (the caller wakes it with a message). Within the
 * burst each record was published by a release store and the reader's
 * `sleeping` word read without a fence: a reader seen asleep was woken at
 * once, and one that fell asleep as a record was written is seen here,
 * after the fence, at the latest (docs/RPC_RINGS.md, "Sleeping"). */
static inline int rdmx__ring_settle(rdmx_ring_t *o)
{
    if (!o->owed || o->base == NULL)
        return 0;
    o->owed = 0;
    /* (orders every store of the burst before the load: with the reader's
     * sequentially consistent exchange of `sleeping` and load of the
     * sequence, one of the two sides sees the other) */
    rdmx_fence_full();
    return __atomic_load_n((const uint32_t *)o->base, __ATOMIC_RELAXED) != 0;
}

/* The next record of @r if it was written, copied into @rec (what is
 * checked is what is used) and decoded as a record of @kind: 1 with @m
 * (data pointing into @rec) and its `after`; 0 when not written yet; -1
 * when it does not decode (@why says why; @m->h holds what could be
 * read). It stays the next record until rdmx__ring_consume. */
int rdmx__ring_read(rdmx_ring_t *r, unsigned kind, rdmx_rpc_msg_t *m,
                    unsigned char rec[RDMX_RING_STRIDE], uint32_t *after,
                    char *why, size_t why_size);

static inline void rdmx__ring_consume(rdmx_ring_t *r)
{
    r->next++;
}

/* Whether the next record of @r was written and may run now: its `after`
 * is at most @done (answers carry 0). */
int rdmx__ring_pending(const rdmx_ring_t *r, uint32_t done);

/* The reader is about to sleep (@on 1) or polls again (0). After setting
 * the words of all its rings, the reader makes the heavy fence once
 * (rdmx__peer_fence_heavy; nothing where its process is not ready, and
 * then its rings do not say `fences`) and must look at each ring once
 * more before it sleeps (rdmx__ring_pending): a writer that wrote before
 * it saw the word does not wake it. */
static inline void rdmx__ring_sleeping(rdmx_ring_t *r, int on)
{
    if (on) /* (sequentially consistent: see rdmx__ring_write) */
        __atomic_exchange_n((uint32_t *)r->base, 1u, __ATOMIC_SEQ_CST);
    else
        __atomic_store_n((uint32_t *)r->base, 0u, __ATOMIC_RELAXED);
}

#endif /* RDMX_RPC_RING_H */
