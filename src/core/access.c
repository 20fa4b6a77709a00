/*
 * One-sided access carried by rdmx: put, get, put-with-notify, flush and
 * 64-bit atomics as messages that the target's worker checks and applies.
 * Used wherever the transport does not enforce registrations itself
 * (ctx->tp_rma == 0: tcp, and any transport with RDMX_RMA=rdmx), and for
 * atomics wherever the transport's own are unusable (ctx->tp_atomics == 0).
 *
 * Why: UCX over tcp emulates put/get/atomics in software, and its target
 * side writes and reads wherever the peer's address says, inside a
 * registration or not: any connected peer could read or crash the process.
 * With rdmx's own protocol the target checks every access against the
 * descriptor its own context issued (mem.c: a MAC over region, range and
 * rights) before it touches memory (docs/SECURITY.md). UCX from 1.16 also
 * selects no atomic protocol for an endpoint with peer failure detection,
 * so atomics are carried there on every transport (docs/CORE.md).
 *
 * Request (AM RDMX_AM_ACCESS, 96-byte header, little-endian):
 *    0 opcode u16 (RDMX_ACC_*), flags u16 (RDMX_ACC_F_NOTIFY), 0 u32
 *    8 tag u64 (names the reply)
 *   16 grant: region id u64, range start u64 (from the region's start),
 *      range length u64, rights u32, 0 u32, MAC u8[16]   (FLUSH: zeros)
 *   64 offset of the access in the region u64, length u64
 *   80 operand u64 (add value, compare value, or a notify's imm), swap u64
 *   data: PUT's bytes (eagerly: the handler sees all of them; by
 *   rendezvous only where the receiver copies them in: rndv_safe)
 * Reply (AM RDMX_AM_ACCESS_REPLY, 24 bytes): tag u64, old value u64,
 *   status i32, 0 u32; data: GET's bytes.
 *
 * The target refuses (and counts: rma_refused; bad_descriptors for a grant
 * it did not issue) before touching memory: a MAC that does not match, a
 * region that is gone, an access outside the grant or without its right,
 * a PUT whose data is not its length, a misaligned atomic. Atomics are
 * sequentially consistent __atomic operations: atomic against every other
 * rdmx atomic on that word and the owner's own __atomic operations.
 * Messages on an endpoint are applied in order, so FLUSH's reply means
 * every earlier access is done. The target's worker must progress.
 *
 * An operation completes when its reply and its own send completion have
 * both arrived (UCX 1.13 reads the header until the send completes).
 */
#include "core/internal.h"

#include "util/bufcache.h"
#include "util/endian.h"
#include "util/hash.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACC_REQ_SIZE   96
#define ACC_REPLY_SIZE 24
#define ACC_PULL_MIN   8192 /* smaller fenced PUTs travel eagerly */

/* Whether a carried access's large bytes may go by rendezvous on @ep's
 * connection: only where the transport then moves them as messages the
 * receiver copies in (tcp; libfabric's rendezvous is rdmx's own). Elsewhere
 * a rendezvous could write from the sender's side into the target's
 * memory, past the target's checks. A context of transport auto decides
 * per connection: its connections to other hosts run over tcp. Worker's
 * lock held. */
static int rndv_safe(rdmx_ep_t *ep)
{
    const rdmx_context_t *ctx = ep->worker->ctx;

    return ctx->rndv_safe || (ctx->transport == RDMX_TRANSPORT_AUTO &&
                              rdmx__ep_transport(ep) == RDMX_TRANSPORT_TCP);
}

/* Both halves done: complete the operation. */
static void amo_finish(rdmx_op_t *op)
{
    rdmx_list_del(&op->link);
    rdmx__op_complete(op, op->status, op->status == RDMX_OK ? op->length : 0);
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
        rdmx__op_complete(op, op->status,
                          op->status == RDMX_OK ? op->length : 0);
        return;
    }
    rdmx_list_insert_tail(&op->ep->amo_pending, &op->link);
}

rdmx_status_t rdmx__access_issue(rdmx_ep_t *ep, rdmx_rmem_t *rm,
                                 unsigned opcode, unsigned flags,
                                 uint64_t offset, void *buf, size_t length,
                                 rdmx_mr_t *mr, uint64_t operand,
                                 uint64_t swap, uint64_t *old_p, rdmx_cb_t cb,
                                 void *arg)
{
    rdmx_worker_t *w = ep->worker;
    int put = opcode == RDMX_ACC_PUT;
    void *req = NULL;
    rdmx_status_t st;
    rdmx_op_t *op;

    op = rdmx__op_get(w, ep, RDMX_OP_ACCESS, cb, arg);
    if (op == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "access: out of memory");
    op->length = length;
    op->old_p = old_p;
    op->buf = buf;
    op->capacity = length;
    op->mr = mr;
    op->stage = opcode;
    op->status = RDMX_OK;
    op->amo_tag = ++w->amo_seq;
    op->amo_wait = 2; /* the send and the reply */
    if (rdmx_ptrmap_put(&w->amo_ops, (void *)op->amo_tag, op) != 0) {
        rdmx__op_put(w, op);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "access: out of memory");
    }
    memset(op->hdr, 0, ACC_REQ_SIZE);
    rdmx_put_le16(op->hdr, (uint16_t)opcode);
    rdmx_put_le16(op->hdr + 2, (uint16_t)flags);
    rdmx_put_le64(op->hdr + 8, op->amo_tag);
    if (rm != NULL) {
        rdmx_put_le64(op->hdr + 16, rm->region_id);
        rdmx_put_le64(op->hdr + 24, rm->region_offset);
        rdmx_put_le64(op->hdr + 32, rm->length);
        rdmx_put_le32(op->hdr + 40, rm->access);
        memcpy(op->hdr + 48, rm->mac, RDMX_GRANT_MAC);
        rdmx_put_le64(op->hdr + 64, rm->region_offset + offset);
    }
    rdmx_put_le64(op->hdr + 72, length);
    rdmx_put_le64(op->hdr + 80, operand);
    rdmx_put_le64(op->hdr + 88, swap);
    if (put && w->ctx->tp_rma && !rndv_safe(ep) && mr != NULL &&
        length > ACC_PULL_MIN) {
        /* A large fenced PUT where the transport has one-sided reads: the
         * target pulls the bytes itself, so that nothing but its own
         * worker ever writes into its memory. */
        size_t dlen = 0;
        uint64_t off = (uint64_t)((const char *)buf - (const char *)mr->addr);
        if (rdmx_mr_pack(mr, off, length, RDMX_ACCESS_READ, NULL, 0, &dlen) ==
                RDMX_OK &&
            (op->aux = rdmx__buf_alloc(dlen)) != NULL &&
            rdmx_mr_pack(mr, off, length, RDMX_ACCESS_READ, op->aux, dlen,
                         &dlen) == RDMX_OK) {
            rdmx_put_le16(op->hdr + 2, (uint16_t)(flags | RDMX_ACC_F_PULL));
            st = w->tp->send(ep->tep, RDMX_AM_ACCESS, op->hdr, ACC_REQ_SIZE,
                             op->aux, dlen, NULL, RDMX_TP_SEND_EAGER, op,
                             &req);
            goto sent;
        }
    }
    /* Over tcp a large PUT may go by rendezvous (the target copies it in
     * as it arrives); elsewhere a rendezvous could write from the sender's
     * side into the target's memory, past the target's checks: eager. */
    st = w->tp->send(ep->tep, RDMX_AM_ACCESS, op->hdr, ACC_REQ_SIZE,
                     put ? buf : NULL, put ? length : 0,
                     put && mr != NULL ? mr->tmr : NULL,
                     put && rndv_safe(ep) ? 0 : RDMX_TP_SEND_EAGER, op, &req);
sent:
    if (st != RDMX_OK && st != RDMX_INPROGRESS) {
        char why[200];
        snprintf(why, sizeof(why), "%s", rdmx_error_detail());
        rdmx_ptrmap_del(&w->amo_ops, (void *)op->amo_tag);
        rdmx__op_put(w, op);
        return rdmx__error(rdmx__op_status(ep, st), "access to %s: %s",
                           ep->peer, why);
    }
    if (st == RDMX_OK) {
        op->amo_wait--; /* sent */
        rdmx_list_insert_tail(&ep->amo_pending, &op->link);
    } else {
        rdmx__op_issued(op, req);
    }
    return RDMX_INPROGRESS;
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
    if (!w->ctx->tp_atomics || (rm->access & RDMX_ACCESS_FENCED)) {
        st = rdmx__access_issue(ep, rm, opcode, 0, offset, NULL, 8, NULL,
                                operand, swap, old_p, cb, arg);
        goto out;
    }
    /* The transport's own (UCX before 1.16 on shared memory and RDMA:
     * one-sided, offloaded on RDMA NICs). */
    op = rdmx__op_get(w, ep, RDMX_OP_ACCESS, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "atomic: out of memory");
        goto out;
    }
    op->length = 8;
    op->old_p = old_p;
    op->amo_tag = 0;
    op->operand = operand;
    op->result = swap;
    st = w->tp->atomic(ep->tep, opcode == RDMX_ACC_CSWAP, &op->operand,
                       &op->result, raddr, rm->trkey, op, &req);
    if (st == RDMX_OK && old_p != NULL)
        *old_p = op->result;
    st = rdmx__op_issue(op, st, req, "atomic");
out:
    rdmx__unlock(w);
    return st;
}

rdmx_status_t rdmx__atomic(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                           unsigned opcode, uint64_t a, uint64_t b,
                           uint64_t *old_p, rdmx_cb_t cb, void *arg)
{
    return amo_issue(ep, rmem, offset, opcode, a, b, old_p, cb, arg);
}

rdmx_status_t rdmx_atomic_fadd_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                  uint64_t offset, uint64_t value,
                                  uint64_t *old_p,
                                  const rdmx_op_params_t *params)
{
    rdmx__op_args_t a;
    rdmx_status_t st = rdmx__op_nb_args(params, "atomic_fadd_nb", &a);

    return st != RDMX_OK ? st
                         : amo_issue(ep, rmem, offset, RDMX_ACC_FADD, value, 0,
                                     old_p, a.cb, a.arg);
}

rdmx_status_t rdmx_atomic_cswap_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                   uint64_t offset, uint64_t compare,
                                   uint64_t swap, uint64_t *old_p,
                                   const rdmx_op_params_t *params)
{
    rdmx__op_args_t a;
    rdmx_status_t st = rdmx__op_nb_args(params, "atomic_cswap_nb", &a);

    return st != RDMX_OK ? st
                         : amo_issue(ep, rmem, offset, RDMX_ACC_CSWAP, compare,
                                     swap, old_p, a.cb, a.arg);
}

/* A request checked against its grant and applied. */
typedef struct {
    rdmx_mr_t *mr;
    uint64_t offset, length;
    uint64_t old;
    const void *out; /* GET: the bytes to send back */
    size_t out_len;
    void *in;        /* PUT by rendezvous or pull: checked, the bytes go
                        here */
    int pull;        /* ... read by this side from the descriptor in the
                        request's data */
    int fenced;      /* ... into a fenced grant: through a bounce buffer,
                        so that nothing lands once the endpoint closed */
    int notify;      /* ... and then tell the notify callback */
    uint64_t imm;
} applied_t;

/* Check @h (and PUT's @data) against the grant it carries and apply it. */
static rdmx_status_t access_apply(rdmx_worker_t *w, rdmx_ep_t *ep,
                                  const unsigned char *h, const void *data,
                                  size_t len, unsigned flags, applied_t *a)
{
    unsigned opcode = rdmx_get_le16(h), aflags = rdmx_get_le16(h + 2);
    uint64_t region = rdmx_get_le64(h + 16), goff = rdmx_get_le64(h + 24);
    uint64_t glen = rdmx_get_le64(h + 32), off = rdmx_get_le64(h + 64);
    uint64_t n = rdmx_get_le64(h + 72), operand = rdmx_get_le64(h + 80);
    uint64_t swap = rdmx_get_le64(h + 88);
    unsigned gaccess = rdmx_get_le32(h + 40), need;
    int pull = (aflags & RDMX_ACC_F_PULL) != 0;
    rdmx_mr_t *mr;
    void *p;

    if (opcode < RDMX_ACC_FADD || opcode > RDMX_ACC_FLUSH ||
        (aflags & ~(RDMX_ACC_F_NOTIFY | RDMX_ACC_F_PULL)) ||
        (aflags && opcode != RDMX_ACC_PUT) ||
        ((flags & RDMX_MSG_RNDV) &&
         (opcode != RDMX_ACC_PUT || pull || !rndv_safe(ep))) ||
        (pull ? len == 0 || !(w->ctx->tp_rma || rdmx__ep_maps_peer(ep))
         : opcode == RDMX_ACC_PUT ? len != n
                                  : len != 0))
        return RDMX_ERR_PROTO;
    if (opcode == RDMX_ACC_FLUSH)
        return RDMX_OK;
    if (!rdmx__grant_valid(w, region, goff, glen, gaccess, h + 48)) {
        w->stats.bad_descriptors++;
        return RDMX_ERR_BAD_DESCRIPTOR;
    }
    mr = rdmx__mr_find(w->ctx, region);
    if (mr == NULL)
        return RDMX_ERR_NOT_FOUND; /* deregistered since */
    need = opcode == RDMX_ACC_PUT   ? RDMX_ACCESS_WRITE
           : opcode == RDMX_ACC_GET ? RDMX_ACCESS_READ
                                    : RDMX_ACCESS_ATOMIC;
    /* (a grant this context issued lies inside its region, with rights
     * the region has: mr_pack checked; checked again all the same) */
    if ((gaccess & need) != need ||
        (gaccess & ~(mr->access | RDMX_ACCESS_FENCED)))
        return RDMX_ERR_DENIED;
    if (goff > mr->length || glen > mr->length - goff || off < goff ||
        off - goff > glen || n > glen - (off - goff))
        return RDMX_ERR_OUT_OF_RANGE;
    p = (char *)mr->addr + off;
    a->mr = mr;
    a->offset = off;
    a->length = n;
    switch (opcode) {
    case RDMX_ACC_PUT:
        if ((flags & RDMX_MSG_RNDV) || pull) {
            /* (the bytes are still at the initiator: fetch, then apply) */
            a->in = p;
            a->pull = pull;
            a->fenced = (gaccess & RDMX_ACCESS_FENCED) != 0;
            a->notify = (aflags & RDMX_ACC_F_NOTIFY) != 0;
            a->imm = operand;
            return RDMX_OK;
        }
        if (n != 0)
            memcpy(p, data, n);
        if (aflags & RDMX_ACC_F_NOTIFY) {
            rdmx_notify_t nt = {.imm = operand, .mr = mr, .offset = off,
                                .length = n};
            w->stats.notifies_received++;
            if (ep->params.notify_cb != NULL)
                ep->params.notify_cb(ep, &nt, ep->params.user_data);
        }
        return RDMX_OK;
    case RDMX_ACC_GET:
        a->out = p;
        a->out_len = n;
        return RDMX_OK;
    default:
        break;
    }
    if (n != 8 || (uintptr_t)p % 8 != 0)
        return RDMX_ERR_INVALID;
    if (opcode == RDMX_ACC_FADD) {
        a->old = __atomic_fetch_add((uint64_t *)p, operand, __ATOMIC_SEQ_CST);
    } else {
        uint64_t expected = operand;
        __atomic_compare_exchange_n((uint64_t *)p, &expected, swap, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        a->old = expected; /* == operand when the swap happened */
    }
    return RDMX_OK;
}

/* Send the reply to a request (@tag: its 8 bytes) with @st, @old and a
 * get's bytes. */
static void send_reply(rdmx_worker_t *w, rdmx_ep_t *ep, const void *tag,
                       rdmx_status_t st, const applied_t *a)
{
    rdmx_op_t *holder;
    void *req = NULL;

    /* The reply's header lives in an operation record until its send
     * completes (rdmx__tp_done returns it to the pool); GET's data is the
     * region's memory itself. */
    holder = rdmx__op_get(w, NULL, RDMX_OP_INTERNAL, NULL, w);
    if (holder == NULL)
        return; /* the initiator's endpoint fails or times out */
    memcpy(holder->hdr, tag, 8);
    rdmx_put_le64(holder->hdr + 8, a->old);
    rdmx_put_le32(holder->hdr + 16, (uint32_t)st);
    rdmx_put_le32(holder->hdr + 20, 0);
    rdmx__batch_send(ep); /* (messages sent before it stay before it) */
    if (w->tp->send(ep->tep, RDMX_AM_ACCESS_REPLY, holder->hdr, ACC_REPLY_SIZE,
                    a->out, a->out_len, a->out != NULL ? a->mr->tmr : NULL,
                    a->out != NULL && rndv_safe(ep) ? 0 : RDMX_TP_SEND_EAGER,
                    holder, &req) != RDMX_INPROGRESS)
        rdmx__op_put(w, holder);
}

/* Answer the FLUSHes that waited for every earlier PUT's bytes. */
static void flush_answer(rdmx_worker_t *w, rdmx_ep_t *ep)
{
    applied_t none = {0};

    for (unsigned i = 0; i < ep->nflush; i++) {
        unsigned char tag[8];
        rdmx_put_le64(tag, ep->flush_tags[i]);
        send_reply(w, ep, tag, RDMX_OK, &none);
    }
    ep->nflush = 0;
}

/* A FLUSH while earlier PUTs' bytes are still being fetched: answered
 * when they are in (the reply means every earlier access is done). */
static int flush_wait(rdmx_ep_t *ep, const unsigned char *h)
{
    if (ep->acc_fetching == 0)
        return 0;
    if (ep->nflush == ep->capflush) {
        unsigned cap = ep->capflush ? 2 * ep->capflush : 4;
        uint64_t *t = realloc(ep->flush_tags, cap * sizeof(*t));
        if (t == NULL)
            return 0; /* (answered at once: as before this existed) */
        ep->flush_tags = t;
        ep->capflush = cap;
    }
    ep->flush_tags[ep->nflush++] = rdmx_get_le64(h + 8);
    return 1;
}

/* A PUT that came by rendezvous, checked: its bytes being fetched. */
typedef struct {
    rdmx_ep_t *ep;
    unsigned char tag[8];
    applied_t a;
} fetch_t;

static void put_fetched(rdmx_status_t status, size_t length, void *arg)
{
    fetch_t *f = arg;
    rdmx_ep_t *ep = f->ep;
    rdmx_worker_t *w = ep->worker;

    (void)length;
    ep->acc_fetching--;
    /* (a closed or failed endpoint: nothing more for its peer) */
    if (ep->status == RDMX_OK && ep->tep != NULL) {
        if (status == RDMX_OK && f->a.notify) {
            rdmx_notify_t nt = {.imm = f->a.imm, .mr = f->a.mr,
                                .offset = f->a.offset,
                                .length = f->a.length};
            w->stats.notifies_received++;
            if (ep->params.notify_cb != NULL)
                ep->params.notify_cb(ep, &nt, ep->params.user_data);
        }
        send_reply(w, ep, f->tag,
                   status == RDMX_OK ? RDMX_OK : RDMX_ERR_PROTO, &f->a);
        if (ep->acc_fetching == 0)
            flush_answer(w, ep);
    }
    free(f);
}

/* The initiator's descriptor @desc of @length bytes to pull: its region's
 * key, unpacked once per endpoint and region (unpacking maps the peer's
 * memory on shared memory: once per 64 MiB push cost more than the copy),
 * and the address in *@raddr_p. NULL if it is not a readable descriptor
 * of exactly @length bytes. */
static rdmx_rmem_t *pull_key(rdmx_ep_t *ep, const unsigned char *desc,
                             size_t dlen, uint64_t length, uint64_t *raddr_p)
{
    uint64_t region, hash, rkl;
    rdmx_rmem_t *rm;
    unsigned i;

    /* (the checks of rdmx_rmem_unpack that a cached key skips) */
    if (dlen < 48 + RDMX_GRANT_MAC + 8 ||
        rdmx_get_le32(desc) != RDMX_DESC_MAGIC ||
        rdmx_get_le16(desc + 4) != RDMX_DESC_VERSION)
        return NULL;
    rkl = rdmx_get_le32(desc + 40);
    if (dlen != 48 + rkl + RDMX_GRANT_MAC + 8 ||
        rdmx_get_le64(desc + dlen - 8) != rdmx_sum64(desc, dlen - 8) ||
        rdmx_get_le64(desc + 24) != length ||
        !(rdmx_get_le16(desc + 6) & RDMX_ACCESS_READ) ||
        rdmx_get_le64(desc + 16) + length < rdmx_get_le64(desc + 16))
        return NULL;
    region = rdmx_get_le64(desc + 8);
    hash = rdmx_sum64(desc + 48, rkl);
    *raddr_p = rdmx_get_le64(desc + 16);
    for (i = 0; i < 4; i++)
        if (ep->pull_keys[i].rm != NULL && ep->pull_keys[i].region == region &&
            ep->pull_keys[i].key_hash == hash)
            return ep->pull_keys[i].rm;
    if (rdmx_rmem_unpack(ep, desc, dlen, &rm) != RDMX_OK)
        return NULL;
    i = ep->pull_next++ % 4;
    rdmx_rmem_destroy(ep->pull_keys[i].rm);
    ep->pull_keys[i].region = region;
    ep->pull_keys[i].key_hash = hash;
    ep->pull_keys[i].rm = rm;
    return rm;
}

/* Bring a checked PUT's bytes into the region: by reading them from the
 * initiator's memory (a->pull: @data is its descriptor, @dlen bytes, read
 * here; copied at once where the transport maps that memory here), or by
 * receiving the rendezvous @data. Otherwise a fenced grant's bytes go
 * through a bounce buffer the receive record owns (copied in when it
 * completes). The reply follows the data when this returns RDMX_OK or
 * RDMX_INPROGRESS, which say who owns @data (rdmx_core_handler_t):
 * RDMX_INPROGRESS only when the receive took the rendezvous descriptor.
 * Anything else is an error for the caller to answer. */
static rdmx_status_t put_fetch(rdmx_worker_t *w, rdmx_ep_t *ep,
                               const unsigned char *h, void *data,
                               size_t dlen, applied_t *a)
{
    rdmx_rmem_t *src = NULL;
    uint64_t raddr = 0;
    fetch_t *f;
    rdmx_op_t *op;
    rdmx_status_t st;
    unsigned char *here;
    void *req = NULL, *dst;

    if (a->pull &&
        (src = pull_key(ep, data, dlen, a->length, &raddr)) == NULL)
        return RDMX_ERR_PROTO;
    f = malloc(sizeof(*f));
    if (f == NULL ||
        (op = rdmx__op_get(w, ep, RDMX_OP_RECV, put_fetched, f)) == NULL) {
        free(f);
        return RDMX_ERR_NO_MEMORY;
    }
    f->ep = ep;
    memcpy(f->tag, h + 8, 8);
    f->a = *a;
    ep->acc_fetching++;
    op->buf = a->in;
    op->capacity = a->length;
    op->mr = a->mr;
    if (a->pull && a->length != 0 && (here = rdmx__rmem_here(src)) != NULL) {
        dst = here + (raddr - src->addr);
        /* The initiator's memory is mapped here (shared memory): one copy,
         * done before this returns, so a fenced grant needs no bounce
         * buffer: nothing can land once the endpoint closed. */
        memcpy(a->in, dst, a->length);
        rdmx__op_defer(op, RDMX_OK, a->length);
        return RDMX_OK;
    }
    if (a->pull && !w->ctx->tp_rma) {
        /* a context that maps its peers but has no one-sided reads of
         * its own (auto): the initiator's memory had to be mapped */
        rdmx__op_defer(op, RDMX_ERR_UNSUPPORTED, 0);
        return RDMX_OK;
    }
    if (a->fenced && a->length != 0 &&
        (op->aux = rdmx__buf_alloc(a->length)) == NULL) {
        rdmx__op_defer(op, RDMX_ERR_NO_MEMORY, 0);
        return RDMX_OK; /* (a descriptor not taken goes back to its sender) */
    }
    dst = op->aux != NULL ? op->aux : a->in;
    op->issuing = 1;
    if (a->pull) {
        st = w->tp->get(ep->tep, dst, a->length,
                        op->aux != NULL ? NULL : a->mr->tmr, raddr,
                        src->trkey, op, &req);
        rdmx__op_started(op, st, req, a->length);
        return RDMX_OK;
    }
    st = w->tp->recv(w->tw, data, dst, a->length,
                     op->aux != NULL ? NULL : a->mr->tmr, op, &req);
    rdmx__op_started(op, st, req, a->length);
    return RDMX_INPROGRESS;
}

rdmx_status_t rdmx__am_access(rdmx_worker_t *w, rdmx_tep_t *tep,
                              const void *header, size_t hlen, void *data,
                              size_t len, unsigned flags)
{
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;
    applied_t a = {0};
    rdmx_status_t st;

    if (ep == NULL || ep->tep == NULL || ep->status != RDMX_OK) {
        if (ep == NULL)
            w->stats.proto_errors++;
        else
            w->stats.msgs_dropped++;
        return RDMX_OK;
    }
    if (hlen != ACC_REQ_SIZE) {
        w->stats.proto_errors++;
        return RDMX_OK; /* no tag to answer to */
    }
    st = access_apply(w, ep, header, data, len, flags, &a);
    if (st == RDMX_OK && rdmx_get_le16(header) == RDMX_ACC_FLUSH &&
        flush_wait(ep, header))
        return RDMX_OK;
    if (st == RDMX_OK && a.in != NULL) {
        st = put_fetch(w, ep, header, data, len, &a);
        if (st == RDMX_OK || st == RDMX_INPROGRESS)
            return st; /* (the reply follows the data) */
    }
    if (st != RDMX_OK) {
        if (st == RDMX_ERR_PROTO)
            w->stats.proto_errors++;
        else
            w->stats.rma_refused++;
        rdmx_debug("access from %s refused: %s", ep->peer,
                   rdmx_strerror(st));
    }
    send_reply(w, ep, (const unsigned char *)header + 8, st, &a);
    return RDMX_OK;
}

/* A GET's bytes that came by rendezvous arrived (or not). */
static void get_fetched(rdmx_status_t status, size_t length, void *arg)
{
    uint64_t *g = arg; /* {worker, tag} */
    rdmx_worker_t *w = (rdmx_worker_t *)(uintptr_t)g[0];
    rdmx_op_t *op = rdmx_ptrmap_get(&w->amo_ops, (void *)g[1]);

    (void)length;
    free(g);
    if (op == NULL)
        return; /* its endpoint failed meanwhile: already completed */
    rdmx_ptrmap_del(&w->amo_ops, (void *)op->amo_tag);
    op->status = status == RDMX_OK ? RDMX_OK : rdmx__op_status(op->ep, status);
    if (--op->amo_wait == 0)
        amo_finish(op); /* else rdmx__amo_sent completes it */
}

rdmx_status_t rdmx__am_access_reply(rdmx_worker_t *w, rdmx_tep_t *tep,
                                    const void *header, size_t hlen,
                                    void *data, size_t len, unsigned flags)
{
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;
    const unsigned char *h = header;
    int rndv = (flags & RDMX_MSG_RNDV) != 0;
    rdmx_status_t st;
    rdmx_op_t *op;

    if (ep == NULL || hlen != ACC_REPLY_SIZE ||
        (op = rdmx_ptrmap_get(&w->amo_ops, (void *)rdmx_get_le64(h))) ==
            NULL ||
        op->ep != ep) {
        w->stats.proto_errors++; /* late, forged or malformed */
        return RDMX_OK;
    }
    st = (rdmx_status_t)(int32_t)rdmx_get_le32(h + 16);
    if (st == RDMX_OK &&
        (op->stage == RDMX_ACC_GET ? len != op->capacity
                                   : len != 0 || rndv)) {
        w->stats.proto_errors++;
        st = RDMX_ERR_PROTO;
    }
    if (st == RDMX_OK && rndv) {
        /* A GET's bytes by rendezvous: fetch them into the caller's buffer;
         * the tag stays until they are in (or the endpoint failed). */
        uint64_t *g = malloc(2 * sizeof(*g));
        rdmx_op_t *rop = g != NULL ? rdmx__op_get(w, ep, RDMX_OP_RECV,
                                                  get_fetched, g)
                                   : NULL;
        void *req = NULL;

        if (rop != NULL) {
            g[0] = (uint64_t)(uintptr_t)w;
            g[1] = op->amo_tag;
            rop->buf = op->buf;
            rop->capacity = len;
            rop->mr = op->mr;
            rop->issuing = 1;
            st = w->tp->recv(w->tw, data, op->buf, len,
                             op->mr != NULL ? op->mr->tmr : NULL, rop, &req);
            rdmx__op_started(rop, st, req, len);
            return RDMX_INPROGRESS;
        }
        free(g);
        st = RDMX_ERR_NO_MEMORY;
    }
    rdmx_ptrmap_del(&w->amo_ops, (void *)op->amo_tag);
    if (st != RDMX_OK) {
        if (st != RDMX_ERR_NOT_FOUND && st != RDMX_ERR_DENIED &&
            st != RDMX_ERR_OUT_OF_RANGE && st != RDMX_ERR_INVALID &&
            st != RDMX_ERR_BAD_DESCRIPTOR && st != RDMX_ERR_NO_MEMORY)
            st = RDMX_ERR_PROTO;
        rdmx__error(st, "%s at %s refused by the target: %s",
                    op->stage == RDMX_ACC_PUT   ? "put"
                    : op->stage == RDMX_ACC_GET ? "get"
                                                : "atomic",
                    ep->peer,
                    st == RDMX_ERR_BAD_DESCRIPTOR
                        ? "it did not issue this descriptor"
                        : rdmx_strerror(st));
    } else if (op->stage == RDMX_ACC_GET) {
        if (len != 0)
            memcpy(op->buf, data, len);
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
