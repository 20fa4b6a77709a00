/*
 * The operations' params, and the blocking forms: start the positional
 * form, then wait for its callback with the one wait primitive
 * (rdmx__wait_deadline: poll, then sleep; with a progress thread, sleep on
 * the worker's condition) until params->timeout_ms.
 */
#include "core/internal.h"

#include "util/time.h"

rdmx_status_t rdmx__op_args(const rdmx_op_params_t *p, int nb,
                            const char *what, rdmx__op_args_t *a)
{
    uint64_t mask = p != NULL ? p->field_mask : 0;

    a->cb = NULL;
    a->arg = NULL;
    a->mr = (mask & RDMX_OP_PARAM_FIELD_MR) ? p->mr : NULL;
    a->timeout_ms = RDMX_TIMEOUT_INFINITE;
    a->flags = (mask & RDMX_OP_PARAM_FIELD_FLAGS) ? p->flags : 0;
    if (a->flags & ~(unsigned)RDMX_OP_FLAG_STREAM)
        return rdmx__error(RDMX_ERR_INVALID, "%s: unknown flags 0x%x", what,
                           a->flags & ~(unsigned)RDMX_OP_FLAG_STREAM);
    if (nb) {
        if (!(mask & RDMX_OP_PARAM_FIELD_CB) || p->cb == NULL)
            return rdmx__error(RDMX_ERR_INVALID,
                               "%s: params->cb is required (set "
                               "RDMX_OP_PARAM_FIELD_CB)",
                               what);
        if (mask & RDMX_OP_PARAM_FIELD_TIMEOUT)
            return rdmx__error(RDMX_ERR_INVALID,
                               "%s: params->timeout_ms is for the blocking "
                               "form",
                               what);
        a->cb = p->cb;
        a->arg = p->arg;
    } else {
        if (mask & RDMX_OP_PARAM_FIELD_CB)
            return rdmx__error(RDMX_ERR_INVALID,
                               "%s: params->cb is for the _nb form", what);
        if (mask & RDMX_OP_PARAM_FIELD_TIMEOUT)
            a->timeout_ms = p->timeout_ms;
    }
    return RDMX_OK;
}

typedef struct {
    volatile int done;
    rdmx_status_t status;
    size_t length;
} waiter_t;

static void waiter_cb(rdmx_status_t status, size_t length, void *arg)
{
    waiter_t *wt = arg;
    wt->status = status;
    wt->length = length;
    wt->done = 1;
}

static uint64_t deadline_of(int timeout_ms)
{
    return timeout_ms < 0 ? UINT64_MAX
                          : rdmx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

/* Wait for @wt after its operation on @ep returned @st. Past the limit the
 * transport cannot take the operation back: fail the connection, whose
 * teardown completes it, and wait for that. */
static rdmx_status_t wait_op(rdmx_ep_t *ep, waiter_t *wt, rdmx_status_t st,
                             int timeout_ms, const char *what)
{
    rdmx_worker_t *w = ep->worker;

    if (st != RDMX_INPROGRESS)
        return st;
    if (rdmx__wait_deadline(w, &wt->done, deadline_of(timeout_ms)) == 0)
        return wt->status;
    rdmx__lock(w);
    rdmx__ep_fail_why(ep, RDMX_ERR_TIMEOUT, what, timeout_ms);
    rdmx__unlock(w);
    rdmx__wait_until(w, &wt->done);
    return rdmx__error(RDMX_ERR_TIMEOUT,
                       "%s: not complete within %d ms; the connection to %s "
                       "was failed to take it back",
                       what, timeout_ms, ep->peer);
}

#define BLOCKING_ARGS(what)                                                    \
    rdmx__op_args_t a;                                                         \
    waiter_t wt = {0};                                                         \
    rdmx_status_t st = rdmx__op_args(params, 0, what, &a);                     \
    if (st != RDMX_OK)                                                         \
        return st;                                                             \
    if (ep == NULL)                                                            \
        return rdmx__error(RDMX_ERR_INVALID, "%s: NULL endpoint", what)

rdmx_status_t rdmx_send(rdmx_ep_t *ep, const void *buf, size_t length,
                        const rdmx_op_params_t *params)
{
    BLOCKING_ARGS("send");
    st = rdmx__send(ep, buf, length, a.mr, waiter_cb, &wt);
    return wait_op(ep, &wt, st, a.timeout_ms, "send");
}

rdmx_status_t rdmx_recv(rdmx_ep_t *ep, void *buf, size_t capacity,
                        const rdmx_op_params_t *params, size_t *length_p)
{
    rdmx_op_t *op = NULL;
    rdmx_worker_t *w;

    BLOCKING_ARGS("recv");
    w = ep->worker;
    if (buf == NULL && capacity != 0)
        return rdmx__error(RDMX_ERR_INVALID, "recv: NULL buffer");
    st = rdmx__recv_post(ep, buf, capacity, a.mr, waiter_cb, &wt, &op);
    if (st != RDMX_INPROGRESS)
        return st;
    if (rdmx__wait_deadline(w, &wt.done, deadline_of(a.timeout_ms)) < 0) {
        /* Unmatched: take it back (it completes with RDMX_ERR_TIMEOUT).
         * Matched: its data is moving; wait for it. */
        rdmx__lock(w);
        rdmx__recv_cancel(ep, op);
        rdmx__unlock(w);
        rdmx__wait_until(w, &wt.done);
    }
    if (wt.status == RDMX_ERR_TIMEOUT)
        return rdmx__error(RDMX_ERR_TIMEOUT, "recv: no message within %d ms",
                           a.timeout_ms);
    if (wt.status == RDMX_OK || wt.status == RDMX_ERR_TOO_BIG) {
        if (length_p != NULL)
            *length_p = wt.length;
    }
    return wt.status;
}

rdmx_status_t rdmx_put(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                       const void *buf, size_t length,
                       const rdmx_op_params_t *params)
{
    BLOCKING_ARGS("put");
    st =
        rdmx__put(ep, rmem, offset, buf, length, a.mr, a.flags, waiter_cb, &wt);
    return wait_op(ep, &wt, st, a.timeout_ms, "put");
}

rdmx_status_t rdmx_put_notify(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                              uint64_t offset, const void *buf, size_t length,
                              uint64_t imm, const rdmx_op_params_t *params)
{
    BLOCKING_ARGS("put_notify");
    st = rdmx__put_notify(ep, rmem, offset, buf, length, imm, a.mr, waiter_cb,
                          &wt);
    return wait_op(ep, &wt, st, a.timeout_ms, "put_notify");
}

rdmx_status_t rdmx_get(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                       void *buf, size_t length,
                       const rdmx_op_params_t *params)
{
    BLOCKING_ARGS("get");
    st =
        rdmx__get(ep, rmem, offset, buf, length, a.mr, a.flags, waiter_cb, &wt);
    return wait_op(ep, &wt, st, a.timeout_ms, "get");
}

rdmx_status_t rdmx_atomic_fadd(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                               uint64_t offset, uint64_t value,
                               uint64_t *old_p,
                               const rdmx_op_params_t *params)
{
    BLOCKING_ARGS("atomic_fadd");
    st = rdmx__atomic(ep, rmem, offset, RDMX_ACC_FADD, value, 0, old_p,
                      waiter_cb, &wt);
    return wait_op(ep, &wt, st, a.timeout_ms, "atomic_fadd");
}

rdmx_status_t rdmx_atomic_cswap(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                uint64_t offset, uint64_t compare,
                                uint64_t swap, uint64_t *old_p,
                                const rdmx_op_params_t *params)
{
    BLOCKING_ARGS("atomic_cswap");
    st = rdmx__atomic(ep, rmem, offset, RDMX_ACC_CSWAP, compare, swap, old_p,
                      waiter_cb, &wt);
    return wait_op(ep, &wt, st, a.timeout_ms, "atomic_cswap");
}

rdmx_status_t rdmx_ep_flush(rdmx_ep_t *ep, const rdmx_op_params_t *params)
{
    BLOCKING_ARGS("ep_flush");
    st = rdmx__flush(ep, waiter_cb, &wt);
    return wait_op(ep, &wt, st, a.timeout_ms, "ep_flush");
}
