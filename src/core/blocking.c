/*
 * Blocking wrappers: start the non-blocking form, then wait for its
 * callback with the one wait primitive (rdmx__wait_until: poll, then
 * sleep; with a progress thread, sleep on the worker's condition).
 */
#include "core/internal.h"

#include "util/time.h"

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

/* Wait for @wt after its operation returned @st. */
static rdmx_status_t wait_for(rdmx_worker_t *w, waiter_t *wt, rdmx_status_t st)
{
    if (st != RDMX_INPROGRESS)
        return st;
    rdmx__wait_until(w, &wt->done);
    return wt->status;
}

rdmx_status_t rdmx_send(rdmx_ep_t *ep, const void *buf, size_t length,
                        rdmx_mr_t *mr)
{
    waiter_t wt = {0};
    return wait_for(ep->worker, &wt,
                    rdmx_send_nb(ep, buf, length, mr, waiter_cb, &wt));
}

rdmx_status_t rdmx_recv(rdmx_ep_t *ep, void *buf, size_t capacity,
                        rdmx_mr_t *mr, int timeout_ms, size_t *length_p)
{
    rdmx_worker_t *w = ep->worker;
    waiter_t wt = {0};
    rdmx_op_t *op = NULL;
    rdmx_status_t st;
    uint64_t deadline;

    if (buf == NULL && capacity != 0)
        return rdmx__error(RDMX_ERR_INVALID, "recv: NULL buffer");
    st = rdmx__recv_post(ep, buf, capacity, mr, waiter_cb, &wt, &op);
    if (st != RDMX_INPROGRESS)
        return st;
    deadline = timeout_ms > 0
                   ? rdmx_now_ns() + (uint64_t)timeout_ms * 1000000ull
                   : UINT64_MAX;
    if (rdmx__wait_deadline(w, &wt.done, deadline) < 0) {
        /* Unmatched: take it back (it completes with RDMX_ERR_TIMEOUT).
         * Matched: its data is moving; wait for it. */
        rdmx__lock(w);
        rdmx__recv_cancel(ep, op);
        rdmx__unlock(w);
        rdmx__wait_until(w, &wt.done);
    }
    if (wt.status == RDMX_ERR_TIMEOUT)
        return rdmx__error(RDMX_ERR_TIMEOUT, "recv: no message within %d ms",
                           timeout_ms);
    if (wt.status == RDMX_OK || wt.status == RDMX_ERR_TOO_BIG) {
        if (length_p != NULL)
            *length_p = wt.length;
    }
    return wt.status;
}

rdmx_status_t rdmx_put(rdmx_ep_t *ep, const void *buf, size_t length,
                       rdmx_mr_t *mr, rdmx_rmem_t *rmem, uint64_t offset)
{
    waiter_t wt = {0};
    return wait_for(ep->worker, &wt,
                    rdmx_put_nb(ep, buf, length, mr, rmem, offset, waiter_cb,
                                &wt));
}

rdmx_status_t rdmx_put_notify(rdmx_ep_t *ep, const void *buf, size_t length,
                              rdmx_mr_t *mr, rdmx_rmem_t *rmem,
                              uint64_t offset, uint64_t imm)
{
    waiter_t wt = {0};
    return wait_for(ep->worker, &wt,
                    rdmx_put_notify_nb(ep, buf, length, mr, rmem, offset, imm,
                                       waiter_cb, &wt));
}

rdmx_status_t rdmx_get(rdmx_ep_t *ep, void *buf, size_t length,
                       rdmx_mr_t *mr, rdmx_rmem_t *rmem, uint64_t offset)
{
    waiter_t wt = {0};
    return wait_for(ep->worker, &wt,
                    rdmx_get_nb(ep, buf, length, mr, rmem, offset, waiter_cb,
                                &wt));
}

rdmx_status_t rdmx_atomic_fadd(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                               uint64_t offset, uint64_t value,
                               uint64_t *old_p)
{
    waiter_t wt = {0};
    return wait_for(ep->worker, &wt,
                    rdmx_atomic_fadd_nb(ep, rmem, offset, value, old_p,
                                        waiter_cb, &wt));
}

rdmx_status_t rdmx_atomic_cswap(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                uint64_t offset, uint64_t compare,
                                uint64_t swap, uint64_t *old_p)
{
    waiter_t wt = {0};
    return wait_for(ep->worker, &wt,
                    rdmx_atomic_cswap_nb(ep, rmem, offset, compare, swap,
                                         old_p, waiter_cb, &wt));
}

rdmx_status_t rdmx_ep_flush(rdmx_ep_t *ep)
{
    waiter_t wt = {0};
    return wait_for(ep->worker, &wt, rdmx_ep_flush_nb(ep, waiter_cb, &wt));
}
