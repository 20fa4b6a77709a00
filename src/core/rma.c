/*
 * One-sided operations: put, get, put-with-notify, 64-bit atomics, flush.
 *
 * Every operation is checked against its descriptor before anything is
 * issued: the range [offset, offset + length) must lie inside it (without
 * overflow), the descriptor must grant the right, and it must have been
 * unpacked on this endpoint.
 *
 * Atomics are carried by rdmx itself (atomic.c).
 *
 * Put-with-notify is put -> endpoint flush -> NOTIFY active message sent
 * from the flush's completion. UCX orders neither RMA against AMs nor, in
 * 1.13, ucp_worker_fence across lanes (UCX_NOTES 7), so the flush is what
 * makes the data visible before the peer hears about it.
 */
#include "core/internal.h"

#include "util/endian.h"

#include <inttypes.h>

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

static void rma_done(void *req, ucs_status_t us, void *user_data)
{
    rdmx_op_t *op = user_data;

    if (rdmx__op_ucx_done(op, req))
        rdmx__op_complete(op, rdmx__op_status(op->ep, us), op->length);
}

static void request_param(ucp_request_param_t *p, rdmx_op_t *op,
                          rdmx_mr_t *mr)
{
    p->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p->cb.send = rma_done;
    p->user_data = op;
    rdmx__param_memh(p, mr);
}

/* Turn UCX's immediate answer into ours, releasing @op unless pending. */
static rdmx_status_t finish_issue(rdmx_op_t *op, ucs_status_ptr_t r,
                                  const char *what)
{
    rdmx_worker_t *w = op->ep->worker;
    rdmx_ep_t *ep = op->ep;

    if (UCS_PTR_IS_PTR(r)) {
        rdmx__op_issued(op, r);
        return RDMX_INPROGRESS;
    }
    if (op->kind == RDMX_OP_ATOMIC && r == NULL && op->old_p != NULL)
        *op->old_p = op->result;
    rdmx__op_put(w, op);
    if (r == NULL)
        return RDMX_OK;
    return rdmx__error(rdmx__op_status(ep, UCS_PTR_STATUS(r)), "%s to %s: %s",
                       what, ep->peer, ucs_status_string(UCS_PTR_STATUS(r)));
}

typedef enum { RMA_PUT, RMA_GET } rma_dir_t;

static rdmx_status_t rma(rdmx_ep_t *ep, rma_dir_t dir, void *buf,
                         size_t length, rdmx_mr_t *mr, rdmx_rmem_t *rm,
                         uint64_t offset, rdmx_cb_t cb, void *arg)
{
    const char *what = dir == RMA_PUT ? "put" : "get";
    ucp_request_param_t p;
    ucs_status_ptr_t r;
    rdmx_status_t st;
    uint64_t raddr;
    rdmx_op_t *op;
    rdmx_worker_t *w;

    if (ep == NULL || (buf == NULL && length != 0))
        return rdmx__error(RDMX_ERR_INVALID, "%s: NULL argument", what);
    w = ep->worker;
    rdmx__lock(w);
    st = rdmx__rma_check(ep, rm, offset, length,
                   dir == RMA_PUT ? RDMX_ACCESS_WRITE : RDMX_ACCESS_READ, what,
                   &raddr);
    if (st != RDMX_OK)
        goto out;
    op = rdmx__op_get(w, ep, RDMX_OP_RMA, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "%s: out of memory", what);
        goto out;
    }
    op->length = length;
    request_param(&p, op, mr);
    if (dir == RMA_PUT)
        r = ucp_put_nbx(ep->ucp_ep, buf, length, raddr, rm->rkey, &p);
    else
        r = ucp_get_nbx(ep->ucp_ep, buf, length, raddr, rm->rkey, &p);
    st = finish_issue(op, r, what);
out:
    rdmx__unlock(w);
    return st;
}

rdmx_status_t rdmx_put_nb(rdmx_ep_t *ep, const void *buf, size_t length,
                          rdmx_mr_t *mr, rdmx_rmem_t *rmem, uint64_t offset,
                          rdmx_cb_t cb, void *arg)
{
    return rma(ep, RMA_PUT, (void *)buf, length, mr, rmem, offset, cb, arg);
}

rdmx_status_t rdmx_get_nb(rdmx_ep_t *ep, void *buf, size_t length,
                          rdmx_mr_t *mr, rdmx_rmem_t *rmem, uint64_t offset,
                          rdmx_cb_t cb, void *arg)
{
    return rma(ep, RMA_GET, buf, length, mr, rmem, offset, cb, arg);
}

/* --- put with notify ---------------------------------------------------- */

/* Send the NOTIFY for @op; its completion completes the op. */
static ucs_status_ptr_t notify_send(rdmx_op_t *op)
{
    ucp_request_param_t p;

    if (op->ep->ucp_ep == NULL || op->ep->status != RDMX_OK)
        return UCS_STATUS_PTR(UCS_ERR_CANCELED);
    request_param(&p, op, NULL);
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    return ucp_am_send_nbx(op->ep->ucp_ep, RDMX_AM_NOTIFY, op->hdr,
                           RDMX_NOTIFY_SIZE, NULL, 0, &p);
}

static void notify_flushed(void *req, ucs_status_t us, void *user_data)
{
    rdmx_op_t *op = user_data;
    ucs_status_ptr_t r;

    if (!rdmx__op_ucx_done(op, req))
        return;
    if (us != UCS_OK) {
        rdmx__op_complete(op, rdmx__op_status(op->ep, us), 0);
        return;
    }
    r = notify_send(op);
    if (r == NULL)
        rdmx__op_complete(op, RDMX_OK, op->length);
    else if (UCS_PTR_IS_ERR(r))
        rdmx__op_complete(op, rdmx__op_status(op->ep, UCS_PTR_STATUS(r)), 0);
    else
        rdmx__op_issued(op, r);
}

rdmx_status_t rdmx_put_notify_nb(rdmx_ep_t *ep, const void *buf,
                                 size_t length, rdmx_mr_t *mr,
                                 rdmx_rmem_t *rm, uint64_t offset,
                                 uint64_t imm, rdmx_cb_t cb, void *arg)
{
    ucp_request_param_t p = {0};
    ucs_status_ptr_t r;
    rdmx_status_t st;
    uint64_t raddr;
    rdmx_op_t *op;
    rdmx_worker_t *w;

    if (ep == NULL || (buf == NULL && length != 0))
        return rdmx__error(RDMX_ERR_INVALID, "put_notify: NULL argument");
    w = ep->worker;
    rdmx__lock(w);
    st = rdmx__rma_check(ep, rm, offset, length, RDMX_ACCESS_WRITE, "put_notify",
                   &raddr);
    if (st != RDMX_OK)
        goto out;
    op = rdmx__op_get(w, ep, RDMX_OP_NOTIFY, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "put_notify: out of memory");
        goto out;
    }
    op->length = length;
    rdmx_put_le64(op->hdr, imm);
    rdmx_put_le64(op->hdr + 8, rm->region_id);
    rdmx_put_le64(op->hdr + 16, rm->region_offset + offset);
    rdmx_put_le64(op->hdr + 24, length);

    /* The put's own completion is not needed: the flush covers it. */
    rdmx__param_memh(&p, mr);
    r = ucp_put_nbx(ep->ucp_ep, buf, length, raddr, rm->rkey, &p);
    if (UCS_PTR_IS_ERR(r)) {
        st = finish_issue(op, r, "put_notify");
        goto out;
    }
    if (r != NULL)
        ucp_request_free(r);
    request_param(&p, op, NULL);
    p.cb.send = notify_flushed;
    r = ucp_ep_flush_nbx(ep->ucp_ep, &p);
    if (r == NULL)
        r = notify_send(op);
    st = finish_issue(op, r, "put_notify");
out:
    rdmx__unlock(w);
    return st;
}

ucs_status_t rdmx__am_notify(void *arg, const void *header, size_t hlen,
                             void *data, size_t len,
                             const ucp_am_recv_param_t *param)
{
    rdmx_worker_t *w = arg;
    rdmx_ep_t *ep = rdmx__ep_lookup(w, param);
    const unsigned char *h = header;
    rdmx_notify_t n;

    if (ep == NULL || ep->status != RDMX_OK)
        return UCS_OK;
    if (hlen != RDMX_NOTIFY_SIZE || len != 0) {
        w->stats.proto_errors++;
        rdmx_warn("notify from %s: malformed (%zu-byte header), dropped",
                  ep->peer, hlen);
        return UCS_OK;
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
        return UCS_OK;
    }
    w->stats.notifies_received++;
    if (ep->params.notify_cb != NULL)
        ep->params.notify_cb(ep, &n, ep->params.user_data);
    return UCS_OK;
}

rdmx_status_t rdmx_ep_flush_nb(rdmx_ep_t *ep, rdmx_cb_t cb, void *arg)
{
    ucp_request_param_t p;
    rdmx_status_t st;
    rdmx_op_t *op;
    rdmx_worker_t *w;

    if (ep == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "flush: NULL endpoint");
    w = ep->worker;
    rdmx__lock(w);
    if ((st = rdmx__ep_usable(ep)) != RDMX_OK)
        goto out;
    op = rdmx__op_get(w, ep, RDMX_OP_RMA, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "flush: out of memory");
        goto out;
    }
    request_param(&p, op, NULL);
    st = finish_issue(op, ucp_ep_flush_nbx(ep->ucp_ep, &p), "flush");
out:
    rdmx__unlock(w);
    return st;
}
