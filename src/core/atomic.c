/*
 * Remote 64-bit atomics (fetch-and-add, compare-and-swap): the transport's
 * own where the backend has them (rdmx_tp_ops_t.has_atomics: UCX before
 * 1.16), else carried by rdmx and applied by the target's worker.
 *
 * Why not the transport's atomics: UCX from 1.16 on selects no atomic
 * protocol at all for an endpoint with peer failure detection (the
 * protocols v2 code keeps only protocols that can abort a request, and no
 * atomic one can), so a UCX atomic fails there and marks the endpoint
 * failed; rdmx cannot give up failure detection. On tcp and shared memory
 * UCX 1.13 emulated atomics with active messages anyway, so carrying them
 * ourselves costs the same there and behaves the same on every version
 * (docs/CORE.md, "UCX versions").
 *
 * Request (AM RDMX_AM_ATOMIC, header only, 48 bytes little-endian):
 *   opcode u32, reserved u32, tag u64, region id u64, offset in the
 *   region u64, operand u64 (add value / compare), swap u64
 * Reply (AM RDMX_AM_ATOMIC_REPLY, 24 bytes): tag u64, old value u64,
 *   status i32, reserved u32
 * The target checks the region exists, grants RDMX_ACCESS_ATOMIC and holds
 * the aligned word, then applies a sequentially consistent __atomic
 * operation: atomic against every other rdmx atomic on that word (from any
 * peer, on any worker of the process) and the owner's own __atomic
 * operations. The target's worker must progress for atomics to complete,
 * as for emulated RMA.
 *
 * An operation completes when its reply and its own send completion have
 * both arrived (UCX 1.13 reads the header until the send completes).
 */
#include "core/internal.h"

#include "util/endian.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define AMO_REQ_SIZE   48
#define AMO_REPLY_SIZE 24

enum { AMO_FADD = 1, AMO_CSWAP = 2 };

/* Both halves done: complete the operation. */
static void amo_finish(rdmx_op_t *op)
{
    rdmx_list_del(&op->link);
    rdmx__op_complete(op, op->status, 8);
}

void rdmx__amo_sent(rdmx_op_t *op, void *req, rdmx_status_t status)
{
    if (!rdmx__op_tp_done(op, req))
        return; /* orphaned: the endpoint failed, a stand-in completed */
    if (status != RDMX_OK && op->amo_wait == 2) {
        /* The request never left: no reply will come. */
        rdmx_ptrmap_del(&op->ep->worker->amo_ops, (void *)op->amo_tag);
        op->status = rdmx__op_status(op->ep, status);
        op->amo_wait = 1;
    }
    if (--op->amo_wait == 0) {
        rdmx_list_init(&op->link);
        rdmx__op_complete(op, op->status, 8);
        return;
    }
    rdmx_list_insert_tail(&op->ep->amo_pending, &op->link);
}

static rdmx_status_t amo_issue(rdmx_ep_t *ep, rdmx_rmem_t *rm,
                               uint64_t offset, unsigned opcode,
                               uint64_t operand, uint64_t swap,
                               uint64_t *old_p, rdmx_cb_t cb, void *arg)
{
    rdmx_status_t st;
    rdmx_worker_t *w;
    uint64_t raddr;
    rdmx_op_t *op;
    void *req = NULL;

    if (ep == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "atomic: NULL endpoint");
    w = ep->worker;
    rdmx__lock(w);
    st = rdmx__rma_check(ep, rm, offset, 8, RDMX_ACCESS_ATOMIC, "atomic",
                         &raddr);
    if (st != RDMX_OK)
        goto out;
    if (raddr % 8 != 0) {
        w->stats.rma_refused++;
        st = rdmx__error(RDMX_ERR_INVALID,
                         "atomic: offset %" PRIu64 " is not 8-byte aligned",
                         offset);
        goto out;
    }
    op = rdmx__op_get(w, ep, RDMX_OP_ATOMIC, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "atomic: out of memory");
        goto out;
    }
    op->length = 8;
    op->old_p = old_p;
    if (w->ctx->tp_atomics) {
        /* The transport's own (UCX before 1.16: one-sided on shared
         * memory, offloaded on RDMA NICs). */
        op->amo_tag = 0;
        op->operand = operand;
        op->result = swap;
        st = w->tp->atomic(ep->tep, opcode == AMO_CSWAP, &op->operand,
                           &op->result, raddr, rm->trkey, op, &req);
        if (st == RDMX_OK && old_p != NULL)
            *old_p = op->result;
        st = rdmx__op_issue(op, st, req, "atomic");
        goto out;
    }
    op->amo_tag = ++w->amo_seq;
    op->amo_wait = 2; /* the send and the reply */
    if (rdmx_ptrmap_put(&w->amo_ops, (void *)op->amo_tag, op) != 0) {
        rdmx__op_put(w, op);
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "atomic: out of memory");
        goto out;
    }
    rdmx_put_le32(op->hdr, opcode);
    rdmx_put_le32(op->hdr + 4, 0);
    rdmx_put_le64(op->hdr + 8, op->amo_tag);
    rdmx_put_le64(op->hdr + 16, rm->region_id);
    rdmx_put_le64(op->hdr + 24, rm->region_offset + offset);
    rdmx_put_le64(op->hdr + 32, operand);
    rdmx_put_le64(op->hdr + 40, swap);
    st = w->tp->send(ep->tep, RDMX_AM_ATOMIC, op->hdr, AMO_REQ_SIZE, NULL, 0,
                     NULL, 0, op, &req);
    if (st != RDMX_OK && st != RDMX_INPROGRESS) {
        char why[200];
        snprintf(why, sizeof(why), "%s", rdmx_error_detail());
        rdmx_ptrmap_del(&w->amo_ops, (void *)op->amo_tag);
        rdmx__op_put(w, op);
        st = rdmx__error(rdmx__op_status(ep, st), "atomic to %s: %s",
                         ep->peer, why);
        goto out;
    }
    if (st == RDMX_OK) {
        op->amo_wait--; /* sent */
        rdmx_list_insert_tail(&ep->amo_pending, &op->link);
    } else {
        rdmx__op_issued(op, req);
    }
    st = RDMX_INPROGRESS;
out:
    rdmx__unlock(w);
    return st;
}

rdmx_status_t rdmx_atomic_fadd_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                  uint64_t offset, uint64_t value,
                                  uint64_t *old_p, rdmx_cb_t cb, void *arg)
{
    return amo_issue(ep, rmem, offset, AMO_FADD, value, 0, old_p, cb, arg);
}

rdmx_status_t rdmx_atomic_cswap_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                   uint64_t offset, uint64_t compare,
                                   uint64_t swap, uint64_t *old_p,
                                   rdmx_cb_t cb, void *arg)
{
    return amo_issue(ep, rmem, offset, AMO_CSWAP, compare, swap, old_p, cb,
                     arg);
}

/* Apply a request to local memory; the status and the old value. */
static rdmx_status_t amo_apply(rdmx_worker_t *w, const unsigned char *h,
                               uint64_t *old_p)
{
    unsigned opcode = rdmx_get_le32(h);
    uint64_t id = rdmx_get_le64(h + 16), off = rdmx_get_le64(h + 24);
    uint64_t operand = rdmx_get_le64(h + 32), swap = rdmx_get_le64(h + 40);
    rdmx_mr_t *mr = rdmx__mr_find(w->ctx, id);
    uint64_t *word;

    if (mr == NULL)
        return RDMX_ERR_NOT_FOUND;
    if (!(mr->access & RDMX_ACCESS_ATOMIC))
        return RDMX_ERR_DENIED;
    if (off > mr->length || mr->length - off < 8)
        return RDMX_ERR_OUT_OF_RANGE;
    if (((uintptr_t)mr->addr + off) % 8 != 0)
        return RDMX_ERR_INVALID;
    word = (uint64_t *)((char *)mr->addr + off);
    if (opcode == AMO_FADD) {
        *old_p = __atomic_fetch_add(word, operand, __ATOMIC_SEQ_CST);
    } else if (opcode == AMO_CSWAP) {
        uint64_t expected = operand;
        __atomic_compare_exchange_n(word, &expected, swap, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        *old_p = expected; /* == operand when the swap happened */
    } else {
        return RDMX_ERR_PROTO;
    }
    return RDMX_OK;
}

rdmx_status_t rdmx__am_atomic(rdmx_worker_t *w, rdmx_tep_t *tep,
                              const void *header, size_t hlen, void *data,
                              size_t len, unsigned flags)
{
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;
    rdmx_status_t st;
    rdmx_op_t *holder;
    uint64_t old = 0;
    void *req = NULL;

    (void)data;
    (void)flags;
    if (ep == NULL || ep->tep == NULL || ep->status != RDMX_OK) {
        if (ep == NULL)
            w->stats.proto_errors++;
        return RDMX_OK;
    }
    if (hlen != AMO_REQ_SIZE || len != 0) {
        w->stats.proto_errors++;
        return RDMX_OK; /* no tag to answer to */
    }
    st = amo_apply(w, header, &old);
    if (st != RDMX_OK) {
        w->stats.rma_refused++;
        rdmx_debug("atomic from %s refused: %s", ep->peer,
                   rdmx_strerror(st));
    }
    /* The reply's header lives in an operation record until its send
     * completes (rdmx__tp_done returns it to the pool). */
    holder = rdmx__op_get(w, NULL, RDMX_OP_INTERNAL, NULL, w);
    if (holder == NULL)
        return RDMX_OK; /* the initiator's endpoint fails or times out */
    memcpy(holder->hdr, (const unsigned char *)header + 8, 8); /* tag */
    rdmx_put_le64(holder->hdr + 8, old);
    rdmx_put_le32(holder->hdr + 16, (uint32_t)st);
    rdmx_put_le32(holder->hdr + 20, 0);
    if (w->tp->send(ep->tep, RDMX_AM_ATOMIC_REPLY, holder->hdr,
                    AMO_REPLY_SIZE, NULL, 0, NULL, 0, holder,
                    &req) != RDMX_INPROGRESS)
        rdmx__op_put(w, holder);
    return RDMX_OK;
}

rdmx_status_t rdmx__am_atomic_reply(rdmx_worker_t *w, rdmx_tep_t *tep,
                                    const void *header, size_t hlen,
                                    void *data, size_t len, unsigned flags)
{
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;
    const unsigned char *h = header;
    rdmx_status_t st;
    rdmx_op_t *op;

    (void)data;
    (void)flags;
    if (ep == NULL || hlen != AMO_REPLY_SIZE || len != 0 ||
        (op = rdmx_ptrmap_get(&w->amo_ops, (void *)rdmx_get_le64(h))) ==
            NULL ||
        op->ep != ep) {
        w->stats.proto_errors++; /* late, forged or malformed */
        return RDMX_OK;
    }
    rdmx_ptrmap_del(&w->amo_ops, (void *)op->amo_tag);
    st = (rdmx_status_t)(int32_t)rdmx_get_le32(h + 16);
    if (st != RDMX_OK) {
        if (st != RDMX_ERR_NOT_FOUND && st != RDMX_ERR_DENIED &&
            st != RDMX_ERR_OUT_OF_RANGE && st != RDMX_ERR_INVALID)
            st = RDMX_ERR_PROTO;
        rdmx__error(st, "atomic at %s refused by the target: %s", ep->peer,
                    rdmx_strerror(st));
    } else {
        op->result = rdmx_get_le64(h + 8);
    }
    op->status = st;
    if (--op->amo_wait == 0)
        amo_finish(op); /* else rdmx__amo_sent completes it */
    return RDMX_OK;
}

void rdmx__amo_fail_all(rdmx_ep_t *ep)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ep->amo_pending)) != NULL) {
        rdmx_op_t *op = rdmx_container_of(e, rdmx_op_t, link);
        rdmx_ptrmap_del(&w->amo_ops, (void *)op->amo_tag);
        rdmx_list_init(&op->link);
        rdmx__op_defer(op, ep->status != RDMX_OK ? ep->status
                                                 : RDMX_ERR_CANCELED,
                       0);
    }
}
