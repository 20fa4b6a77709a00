/*
 * ring.h — requests written straight into a server's memory
 * (docs/RPC_RINGS.md).
 *
 * A server offers each client on shared memory a ring of RDMX_RING_SLOTS
 * slots in memory it allocated (rdmx_mem_alloc); the client maps it
 * (rdmx__rmem_map) and writes request k into slot k mod RDMX_RING_SLOTS,
 * the sequence word last with a release store; the server polls its next
 * slot's sequence word. The ring's first cache line holds the server's
 * `sleeping` word, which a writer reads after its record to learn whether
 * it must wake the server with a message.
 *
 * Memory: line 0 {sleeping u32, 0...}; then the slots, RDMX_RING_STRIDE
 * bytes each: {sequence u64, header length u16, data length u16, 0 u32,
 * header, data (aux || payload)}. Little-endian as the wire (the peer is
 * on the same host).
 */
#ifndef RDMX_RPC_RING_H
#define RDMX_RPC_RING_H

#include "rpc/internal.h"

#define RDMX_RING_SLOTS  64u
#define RDMX_RING_STRIDE 256u
#define RDMX_RING_HEAD   64u /* line 0: the owner's sleeping word */
#define RDMX_RING_REC    16u /* sequence, the record's fixed part */
#define RDMX_RING_BYTES  (RDMX_RING_HEAD + RDMX_RING_SLOTS * RDMX_RING_STRIDE)
/* Header and data of one record at most. */
#define RDMX_RING_RECORD_MAX (RDMX_RING_STRIDE - RDMX_RING_REC)
/* A packed descriptor of the ring fits this (RING's aux). */
#define RDMX_RING_DESC_MAX 256u

/* The owner's side: a ring the peer writes into. */
typedef struct {
    rdmx_mr_t *mr; /* NULL: none */
    unsigned char *base;
    uint64_t next; /* the sequence expected next (from 1) */
} rdmx_ring_in_t;

/* The writer's side: the peer's ring, mapped here. */
typedef struct {
    rdmx_rmem_t *rmem; /* NULL: none */
    unsigned char *base;
    uint64_t next; /* the sequence of the next record (from 1) */
} rdmx_ring_out_t;

/* Allocate a ring on @ctx and pack its descriptor for the peer into @desc
 * (@cap bytes; RDMX_RING_DESC_MAX is enough), its length to *@len_p. */
rdmx_status_t rdmx__ring_create(rdmx_context_t *ctx, rdmx_ring_in_t *r,
                                void *desc, size_t cap, size_t *len_p);
void rdmx__ring_destroy(rdmx_ring_in_t *r);

/* Map the ring a peer described on @ep. RDMX_ERR_UNSUPPORTED when the
 * transport does not map it here; RDMX_ERR_BAD_DESCRIPTOR for a bad one. */
rdmx_status_t rdmx__ring_attach(rdmx_ep_t *ep, const void *desc, size_t len,
                                rdmx_ring_out_t *o);
void rdmx__ring_detach(rdmx_ring_out_t *o);

/* Whether a record of @len bytes of data fits a slot. */
static inline int rdmx__ring_fits(size_t len)
{
    return len <= RDMX_RING_RECORD_MAX - RDMX_RPC_HDR_MAX;
}

/* Write the next record (header @h, `after` @after, data @data then
 * @body) into @o's slot for o->next, which the caller knows to be free,
 * and advance. Returns 1 when the owner may be asleep (the caller wakes it
 * with a message). */
int rdmx__ring_write(rdmx_ring_out_t *o, const rdmx_rpc_hdr_t *h,
                     uint32_t after, const void *data, size_t len,
                     const void *body, size_t blen);

/* The next record of @r if it was written, copied into @rec (what is
 * checked is what is used) and decoded as a record of @kind: 1 with @m
 * (data pointing into @rec) and its `after`; 0 when not written yet; -1
 * when it does not decode (@why says why; @m->h holds what could be
 * read). It stays the next record until rdmx__ring_consume. */
int rdmx__ring_read(rdmx_ring_in_t *r, unsigned kind, rdmx_rpc_msg_t *m,
                    unsigned char rec[RDMX_RING_STRIDE], uint32_t *after,
                    char *why, size_t why_size);

static inline void rdmx__ring_consume(rdmx_ring_in_t *r)
{
    r->next++;
}

/* Whether the next record of @r was written and may run now: its `after`
 * is at most @done, the messages the owner has taken. */
int rdmx__ring_pending(const rdmx_ring_in_t *r, uint32_t done);

/* The owner is about to sleep (@on 1) or polls again (0). After setting
 * it, the owner must look at its rings once more before it sleeps
 * (rdmx__ring_pending): a writer that wrote before it saw the word does not
 * wake it. */
static inline void rdmx__ring_sleeping(rdmx_ring_in_t *r, int on)
{
    __atomic_store_n((uint32_t *)r->base, (uint32_t)on, __ATOMIC_RELAXED);
    if (on)
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

#endif /* RDMX_RPC_RING_H */
