/*
 * One-sided operations: put, get, put-with-notify, 64-bit atomics, flush.
 *
 * Every operation is checked against its descriptor before anything is
 * issued: the range [offset, offset + length) must lie inside it (without
 * overflow), the descriptor must grant the right, and it must have been
 * unpacked on this endpoint.
 *
 * Where the transport does not enforce registrations itself (tcp; any
 * transport with RDMX_RMA=rdmx) rdmx carries put, get, put-with-notify and
 * flush, and the target checks each against the descriptor it issued
 * (access.c); atomics are carried there too, and wherever the transport's
 * own are unusable.
 *
 * With the transport's one-sided operations, put-with-notify is put ->
 * endpoint flush -> NOTIFY active message sent from the flush's
 * completion. UCX orders neither RMA against AMs nor, in 1.13, its worker
 * fence across lanes (UCX_NOTES 7), so the flush is what makes the data
 * visible before the peer hears about it. A backend with its own
 * put_notify (ofi: a write with remote CQ data, docs/FABRIC.md) keeps
 * that promise itself. Carried, the target applies the put and then
 * tells its notify callback.
 */
#include "core/internal.h"

#include "util/copy.h"
#include "util/endian.h"

#include <inttypes.h>
#include <string.h>

rdmx_status_t rdmx__rma_check(rdmx_ep_t *ep, rdmx_rmem_t *rm, uint64_t offset,
                              uint64_t length, unsigned need,
                              const char *what, uint64_t *raddr_p)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_status_t st;

    if (rm == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "%s: no descriptor", what);
    if ((st = rdmx__ep_usable(ep)) != RDMX_OK)
        return st;
    if (rm->ep != ep)
        return rdmx__error(rm->ep == NULL ? RDMX_ERR_CONN_CLOSED
                                          : RDMX_ERR_INVALID,
                           "%s: descriptor %s", what,
                           rm->ep == NULL ? "belongs to a closed endpoint"
                                          : "was unpacked on another endpoint");
    if (offset > rm->length || length > rm->length - offset) {
        w->stats.rma_refused++;
        return rdmx__error(RDMX_ERR_OUT_OF_RANGE,
                           "%s: offset %" PRIu64 " + length %" PRIu64
                           " exceeds descriptor length %" PRIu64,
                           what, offset, length, rm->length);
    }
    if ((rm->access & need) != need) {
        w->stats.rma_refused++;
        return rdmx__error(RDMX_ERR_DENIED,
                           "%s: descriptor grants rights 0x%x, needs 0x%x",
                           what, rm->access, need);
    }
    *raddr_p = rm->addr + offset;
    return RDMX_OK;
}

typedef enum { RMA_PUT, RMA_GET } rma_dir_t;

static rdmx_status_t rma(rdmx_ep_t *ep, rma_dir_t dir, void *buf, size_t length,
                         rdmx_mr_t *mr, rdmx_rmem_t *rm, uint64_t offset,
                         unsigned flags, rdmx_cb_t cb, void *arg)
{
    const char *what = dir == RMA_PUT ? "put" : "get";
    rdmx_status_t st;
    uint64_t raddr = 0; /* (set by rdmx__rma_check; GCC -O3 cannot see it) */
    rdmx_op_t *op;
    rdmx_worker_t *w;
    unsigned char *here;
    void *req = NULL;

    if (ep == NULL || (buf == NULL && length != 0))
        return rdmx__error(RDMX_ERR_INVALID, "%s: NULL argument", what);
    w = ep->worker;
    rdmx__lock(w);
    st = rdmx__rma_check(ep, rm, offset, length,
                         dir == RMA_PUT ? RDMX_ACCESS_WRITE : RDMX_ACCESS_READ,
                         what, &raddr);
    if (st != RDMX_OK)
        goto out;
    /* Over UCX's shared memory a peer's rdmx_mem_alloc memory is mapped
     * here (its unpack attached the segment): one copy, done before this
     * returns, on every UCX version, and in a context that carries its
     * other accesses (auto: rdmx__ep_maps_peer). UCX 1.22 makes a get of
     * it a request that the peer's own worker serves by message ("software
     * emulation"): 2.7x slower for a 64 KiB KV PUT (docs/CORE.md, "Mapped
     * one-sided access"). The attachment lives as long as the key, so a
     * peer that frees its memory leaves it readable here until then. (A
     * fenced grant has no transport key: never mapped.) */
    if (length != 0 && (here = rdmx__rmem_here(rm)) != NULL) {
        unsigned char *at = here + (raddr - rm->addr);
        void *to = dir == RMA_PUT ? (void *)at : buf;
        const void *from = dir == RMA_PUT ? (const void *)buf : at;

        if (flags & RDMX_OP_FLAG_STREAM)
            rdmx__copy_stream(to, from, length); /* (util/copy.h) */
        else
            memcpy(to, from, length);
        st = RDMX_OK; /* (done: the callback does not run) */
        goto out;
    }
    if (!w->ctx->tp_rma || (rm->access & RDMX_ACCESS_FENCED)) {
        st = rdmx__access_issue(ep, rm,
                                dir == RMA_PUT ? RDMX_ACC_PUT : RDMX_ACC_GET,
                                0, offset, buf, length, mr, 0, 0, NULL, cb,
                                arg);
        goto out;
    }
    op = rdmx__op_get(w, ep, RDMX_OP_RMA, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "%s: out of memory", what);
        goto out;
    }
    op->length = length;
    if (dir == RMA_PUT)
        st = w->tp->put(ep->tep, buf, length, mr ? mr->tmr : NULL, raddr,
                        rm->trkey, op, &req);
    else
        st = w->tp->get(ep->tep, buf, length, mr ? mr->tmr : NULL, raddr,
                        rm->trkey, op, &req);
    st = rdmx__op_issue(op, st, req, what);
out:
    rdmx__unlock(w);
    return st;
}

rdmx_status_t rdmx__put(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                        const void *buf, size_t length, rdmx_mr_t *mr,
                        unsigned flags, rdmx_cb_t cb, void *arg)
{
    return rma(ep, RMA_PUT, (void *)buf, length, mr, rmem, offset, flags, cb,
               arg);
}

rdmx_status_t rdmx__get(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                        void *buf, size_t length, rdmx_mr_t *mr, unsigned flags,
                        rdmx_cb_t cb, void *arg)
{
    return rma(ep, RMA_GET, buf, length, mr, rmem, offset, flags, cb, arg);
}

rdmx_status_t rdmx_put_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                          const void *buf, size_t length,
                          const rdmx_op_params_t *params)
{
    rdmx__op_args_t a;
    rdmx_status_t st = rdmx__op_nb_args(params, "put_nb", &a);

    return st != RDMX_OK ? st
                         : rdmx__put(ep, rmem, offset, buf, length, a.mr,
                                     a.flags, a.cb, a.arg);
}

rdmx_status_t rdmx_get_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                          void *buf, size_t length,
                          const rdmx_op_params_t *params)
{
    rdmx__op_args_t a;
    rdmx_status_t st = rdmx__op_nb_args(params, "get_nb", &a);

    return st != RDMX_OK ? st
                         : rdmx__get(ep, rmem, offset, buf, length, a.mr,
                                     a.flags, a.cb, a.arg);
}

/* --- put with notify ---------------------------------------------------- */

/* Send the NOTIFY of @op (stage 1); its completion completes the op.
 * RDMX_OK, RDMX_INPROGRESS (issued) or an error. */
static rdmx_status_t notify_send(rdmx_op_t *op)
{
    rdmx_ep_t *ep = op->ep;
    void *req = NULL;
    rdmx_status_t st;

    if (ep->tep == NULL || ep->status != RDMX_OK)
        return rdmx__error(ep->status != RDMX_OK ? ep->status
                                                 : RDMX_ERR_CANCELED,
                           "put_notify to %s: endpoint closed", ep->peer);
    op->stage = 1;
    rdmx__batch_send(ep); /* (messages sent before it stay before it) */
    st = ep->worker->tp->send(ep->tep, RDMX_AM_NOTIFY, op->hdr,
                              RDMX_NOTIFY_SIZE, NULL, 0, NULL, 0, op, &req);
    if (st == RDMX_INPROGRESS)
        rdmx__op_issued(op, req);
    return st;
}

void rdmx__notify_step(rdmx_op_t *op, void *req, rdmx_status_t status)
{
    rdmx_status_t st;

    if (!rdmx__op_tp_done(op, req))
        return;
    if (status != RDMX_OK) {
        rdmx__op_complete(op, rdmx__op_status(op->ep, status), 0);
        return;
    }
    if (op->stage == 1) { /* the notification went */
        rdmx__op_complete(op, RDMX_OK, op->length);
        return;
    }
    st = notify_send(op); /* the flush completed: the data is there */
    if (st == RDMX_OK)
        rdmx__op_complete(op, RDMX_OK, op->length);
    else if (st != RDMX_INPROGRESS)
        rdmx__op_complete(op, rdmx__op_status(op->ep, st), 0);
}

rdmx_status_t rdmx_put_notify_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                 uint64_t offset, const void *buf,
                                 size_t length, uint64_t imm,
                                 const rdmx_op_params_t *params)
{
    rdmx__op_args_t a;
    rdmx_status_t st = rdmx__op_nb_args(params, "put_notify_nb", &a);

    return st != RDMX_OK ? st
                         : rdmx__put_notify(ep, rmem, offset, buf, length, imm,
                                            a.mr, a.cb, a.arg);
}

rdmx_status_t rdmx__put_notify(rdmx_ep_t *ep, rdmx_rmem_t *rm,
                               uint64_t offset, const void *buf, size_t length,
                               uint64_t imm, rdmx_mr_t *mr, rdmx_cb_t cb,
                               void *arg)
{
    rdmx_status_t st;
    uint64_t raddr = 0; /* (as above) */
    rdmx_op_t *op;
    rdmx_worker_t *w;
    void *req = NULL;

    if (ep == NULL || (buf == NULL && length != 0))
        return rdmx__error(RDMX_ERR_INVALID, "put_notify: NULL argument");
    w = ep->worker;
    rdmx__lock(w);
    st = rdmx__rma_check(ep, rm, offset, length, RDMX_ACCESS_WRITE,
                         "put_notify", &raddr);
    if (st != RDMX_OK)
        goto out;
    if (!w->ctx->tp_rma || (rm->access & RDMX_ACCESS_FENCED)) {
        st = rdmx__access_issue(ep, rm, RDMX_ACC_PUT, RDMX_ACC_F_NOTIFY,
                                offset, (void *)buf, length, mr, imm, 0,
                                NULL, cb, arg);
        goto out;
    }
    op = rdmx__op_get(w, ep, RDMX_OP_NOTIFY, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "put_notify: out of memory");
        goto out;
    }
    op->length = length;
    op->stage = 0;
    rdmx_put_le64(op->hdr, imm);
    rdmx_put_le64(op->hdr + 8, rm->region_id);
    rdmx_put_le64(op->hdr + 16, rm->region_offset + offset);
    rdmx_put_le64(op->hdr + 24, length);

    if (w->tp->put_notify != NULL) { /* (the backend orders it itself) */
        op->stage = 1;
        st = w->tp->put_notify(ep->tep, buf, length, mr ? mr->tmr : NULL, raddr,
                               rm->trkey, op->hdr, RDMX_NOTIFY_SIZE, op, &req);
        st = rdmx__op_issue(op, st, req, "put_notify");
        goto out;
    }
    /* The put's own completion is not needed: the flush covers it. */
    st = w->tp->put(ep->tep, buf, length, mr ? mr->tmr : NULL, raddr,
                    rm->trkey, NULL, NULL);
    if (st != RDMX_OK) {
        st = rdmx__op_issue(op, st, NULL, "put_notify");
        goto out;
    }
    st = w->tp->flush(ep->tep, op, &req);
    if (st == RDMX_OK) {
        st = notify_send(op);
        if (st == RDMX_INPROGRESS)
            goto out; /* issued */
        st = rdmx__op_issue(op, st, NULL, "put_notify");
        goto out;
    }
    st = rdmx__op_issue(op, st, req, "put_notify");
out:
    rdmx__unlock(w);
    return st;
}

rdmx_status_t rdmx__am_notify(rdmx_worker_t *w, rdmx_tep_t *tep,
                              const void *header, size_t hlen, void *data,
                              size_t len, unsigned flags)
{
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;
    const unsigned char *h = header;
    rdmx_notify_t n;

    (void)data;
    (void)flags;
    if (ep == NULL || ep->status != RDMX_OK) {
        if (ep == NULL)
            w->stats.proto_errors++;
        else
            w->stats.msgs_dropped++;
        return RDMX_OK;
    }
    if (hlen != RDMX_NOTIFY_SIZE || len != 0) {
        w->stats.proto_errors++;
        rdmx_warn("notify from %s: malformed (%zu-byte header), dropped",
                  ep->peer, hlen);
        return RDMX_OK;
    }
    n.imm = rdmx_get_le64(h);
    n.mr = rdmx__mr_find(w->ctx, rdmx_get_le64(h + 8));
    n.offset = rdmx_get_le64(h + 16);
    n.length = rdmx_get_le64(h + 24);
    if (n.mr != NULL &&
        (n.offset > n.mr->length || n.length > n.mr->length - n.offset)) {
        w->stats.proto_errors++;
        rdmx_warn("notify from %s: range outside the region, dropped",
                  ep->peer);
        return RDMX_OK;
    }
    w->stats.notifies_received++;
    if (ep->params.notify_cb != NULL)
        ep->params.notify_cb(ep, &n, ep->params.user_data);
    return RDMX_OK;
}

rdmx_status_t rdmx_ep_flush_nb(rdmx_ep_t *ep, const rdmx_op_params_t *params)
{
    rdmx__op_args_t a;
    rdmx_status_t st = rdmx__op_nb_args(params, "ep_flush_nb", &a);

    return st != RDMX_OK ? st : rdmx__flush(ep, a.cb, a.arg);
}

rdmx_status_t rdmx__flush(rdmx_ep_t *ep, rdmx_cb_t cb, void *arg)
{
    rdmx_status_t st;
    rdmx_op_t *op;
    rdmx_worker_t *w;
    void *req = NULL;

    if (ep == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "flush: NULL endpoint");
    w = ep->worker;
    rdmx__lock(w);
    if ((st = rdmx__ep_usable(ep)) != RDMX_OK)
        goto out;
    if (!w->ctx->tp_rma) {
        /* (carried accesses complete when applied; FLUSH is answered
         * after every earlier one on this endpoint) */
        st = rdmx__access_issue(ep, NULL, RDMX_ACC_FLUSH, 0, 0, NULL, 0,
                                NULL, 0, 0, NULL, cb, arg);
        goto out;
    }
    op = rdmx__op_get(w, ep, RDMX_OP_RMA, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "flush: out of memory");
        goto out;
    }
    st = w->tp->flush(ep->tep, op, &req);
    st = rdmx__op_issue(op, st, req, "flush");
out:
    rdmx__unlock(w);
    return st;
}
