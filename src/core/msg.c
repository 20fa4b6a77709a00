/*
 * Two-sided messages: rdmx_send_nb / rdmx_recv_nb over UCX active messages.
 *
 * Matching: each endpoint keeps its posted receives and its unexpected
 * messages in arrival order; at most one of the two lists is non-empty.
 * Small messages arrive eagerly and are copied into the receive (or into an
 * unexpected buffer). Large ones arrive as a rendezvous descriptor: the
 * data moves straight into the posted buffer (zero-copy, RDMA read on
 * verbs), and an unexpected one waits as a descriptor, not a copy.
 */
#include "core/internal.h"
#include "util/bufcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rdmx_status_t rdmx__send(rdmx_ep_t *ep, const void *buf, size_t length,
                         rdmx_mr_t *mr, rdmx_cb_t cb, void *arg)
{
    rdmx_worker_t *w;
    rdmx_status_t st;
    rdmx_op_t *op;
    void *req = NULL;

    if (ep == NULL || (buf == NULL && length != 0))
        return rdmx__error(RDMX_ERR_INVALID, "send: NULL argument");
    w = ep->worker;
    rdmx__lock(w);
    if ((st = rdmx__ep_usable(ep)) != RDMX_OK)
        goto out;
    /* A message the transport takes in the call (the same test as the
     * upper layers' sends: rdmx__msg_try_now) leaves without a record, and
     * names its connection instead of carrying UCX's reply endpoint
     * (docs/CORE.md, "Who sent a message"). */
    st = rdmx__msg_try_now(ep, RDMX_AM_MSG, NULL, 0, buf, length, 0);
    if (st != RDMX_ERR_NO_RESOURCE) {
        if (st == RDMX_OK)
            w->stats.msgs_sent++;
        else
            st = rdmx__op_error(ep, st, "send");
        goto out;
    }
    op = rdmx__op_get(w, ep, RDMX_OP_SEND, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "send: out of memory");
        goto out;
    }
    op->length = length;
    w->stats.msgs_sent++;
    st = w->tp->send(ep->tep, RDMX_AM_MSG, NULL, 0, buf, length,
                     mr != NULL ? mr->tmr : NULL, 0, op, &req);
    st = rdmx__op_issue(op, st, req, "send");
out:
    rdmx__unlock(w);
    return st;
}

rdmx_status_t rdmx__msg_send(rdmx_ep_t *ep, unsigned id, const void *hdr,
                             size_t hlen, const void *data, size_t length,
                             rdmx_cb_t cb, void *arg)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_status_t st;
    rdmx_op_t *op;
    void *req = NULL;

    if (hlen > RDMX_OP_HDR_MAX)
        return rdmx__error(RDMX_ERR_INVALID, "message header of %zu bytes",
                           hlen);
    if ((st = rdmx__ep_usable(ep)) != RDMX_OK)
        return st;
    op = rdmx__op_get(w, ep, RDMX_OP_SEND, cb, arg);
    if (op == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "send: out of memory");
    op->length = length;
    if (hlen != 0)
        memcpy(op->hdr, hdr, hlen);
    st = w->tp->send(ep->tep, id, op->hdr, hlen, data, length, NULL, 0, op,
                     &req);
    return rdmx__op_issue(op, st, req, "send");
}

_Static_assert(RDMX_MSG_IOV_MAX == RDMX_TP_IOV_MAX,
               "upper.h and transport.h disagree on the pieces of a send");

/* A gathered send on a transport that cannot gather: the pieces joined
 * into one buffer, freed when the send is done. */
typedef struct {
    rdmx_cb_t cb;
    void *arg;
    void *buf;
} joined_t;

static void joined_done(rdmx_status_t status, size_t length, void *arg)
{
    joined_t *j = arg;

    rdmx__buf_free(j->buf);
    if (j->cb != NULL)
        j->cb(status, length, j->arg);
    free(j);
}

static rdmx_status_t send_joined(rdmx_ep_t *ep, unsigned id, const void *hdr,
                                 size_t hlen, const rdmx_msg_iov_t *iov,
                                 unsigned n, size_t total, rdmx_cb_t cb,
                                 void *arg)
{
    joined_t *j = malloc(sizeof(*j));
    unsigned char *p;
    rdmx_status_t st;
    unsigned i;

    if (j == NULL || (j->buf = rdmx__buf_alloc(total)) == NULL) {
        free(j);
        return rdmx__error(RDMX_ERR_NO_MEMORY,
                           "send: out of memory for %zu "
                           "bytes",
                           total);
    }
    for (p = j->buf, i = 0; i < n; p += iov[i].length, i++)
        if (iov[i].length != 0)
            memcpy(p, iov[i].base, iov[i].length);
    j->cb = cb;
    j->arg = arg;
    st = rdmx__msg_send(ep, id, hdr, hlen, j->buf, total, joined_done, j);
    if (st != RDMX_INPROGRESS) {
        rdmx__buf_free(j->buf);
        free(j);
    }
    /* (in progress, @j is the operation record's until joined_done: the
     * static analyzer does not follow it into the record) */
    /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
    return st;
}

rdmx_status_t rdmx__msg_sendv(rdmx_ep_t *ep, unsigned id, const void *hdr,
                              size_t hlen, const rdmx_msg_iov_t *iov,
                              unsigned n, rdmx_cb_t cb, void *arg)
{
    rdmx_worker_t *w = ep->worker;
    size_t total = 0;
    rdmx_status_t st;
    rdmx_op_t *op;
    void *req = NULL;
    unsigned i;

    if (hlen > RDMX_OP_HDR_MAX || n == 0 || n > RDMX_MSG_IOV_MAX)
        return rdmx__error(RDMX_ERR_INVALID,
                           "send: header of %zu bytes, "
                           "%u pieces",
                           hlen, n);
    for (i = 0; i < n; i++)
        total += iov[i].length;
    if ((st = rdmx__ep_usable(ep)) != RDMX_OK)
        return st;
    if (w->tp->sendv == NULL)
        return send_joined(ep, id, hdr, hlen, iov, n, total, cb, arg);
    op = rdmx__op_get(w, ep, RDMX_OP_SEND, cb, arg);
    if (op == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "send: out of memory");
    op->length = total;
    op->cb_at_end = 1; /* the pieces are the caller's until UCX is done */
    if (hlen != 0)
        memcpy(op->hdr, hdr, hlen);
    for (i = 0; i < n; i++) {
        op->iov[i].base = iov[i].base;
        op->iov[i].length = iov[i].length;
    }
    st = w->tp->sendv(ep->tep, id, op->hdr, hlen, op->iov, n, 0, op, &req);
    return rdmx__op_issue(op, st, req, "send");
}

/* Say which peer a failed send was for (out of the send's path). */
static rdmx_status_t __attribute__((noinline, cold))
send_failed(rdmx_ep_t *ep, rdmx_status_t st)
{
    char why[200];

    snprintf(why, sizeof(why), "%s", rdmx_error_detail());
    return rdmx__error(st, "send to %s: %s", ep->peer, why);
}

int rdmx__now_probe(rdmx_ep_t *ep)
{
    if (++ep->now_skipped < ep->now_every) {
        ep->worker->stats.msgs_not_at_once++;
        return 0;
    }
    ep->now_skipped = 0;
    return 1;
}

void rdmx__now_took(rdmx_ep_t *ep, size_t n)
{
    ep->now_ok = n;
    if (n > ep->now_max) /* a probe taken: that refusal was a full queue,
                            not the size */
        ep->now_max = SIZE_MAX;
}

rdmx_status_t rdmx__now_refused(rdmx_ep_t *ep, size_t n, rdmx_status_t st)
{
    if (st != RDMX_ERR_NO_RESOURCE)
        return st;
    ep->worker->stats.msgs_not_at_once++;
    if (n <= ep->now_ok) {
        /* A size it took before: its queue is full, and what it refused
         * lately says nothing about sizes. */
        ep->now_max = SIZE_MAX;
    } else if (n <= ep->now_max) {
        /* Larger than all it took: its limit, until a probe says
         * otherwise. Probes come after 1, 2, 4 ... 256 skipped. */
        ep->now_max = n - 1;
        ep->now_every = 1;
        ep->now_skipped = 0;
    } else if (ep->now_every < 256) {
        ep->now_every *= 2; /* a probe refused */
    }
    return st;
}

size_t rdmx__ep_at_once_max(const rdmx_ep_t *ep)
{
    return ep->now_max;
}

rdmx_status_t rdmx__msg_send_now(rdmx_ep_t *ep, unsigned id, const void *hdr,
                                 size_t hlen, const void *data, size_t length,
                                 rdmx_send_how_t how)
{
    rdmx_status_t st;

    if (ep->status != RDMX_OK || ep->state != RDMX_EP_CONNECTED)
        return rdmx__ep_usable(ep);
    if (rdmx__batch_holds(ep, how)) {
        if (rdmx__batch_add(ep, id, hdr, hlen, data, length, how))
            return RDMX_OK;   /* leaves with the batch */
        rdmx__batch_send(ep); /* (too large for it: the batch goes first) */
        if (ep->status != RDMX_OK)
            return rdmx__ep_usable(ep); /* (the batch failed its endpoint) */
    }
    st = rdmx__msg_try_now(ep, id, hdr, hlen, data, length, 0);
    if (st != RDMX_OK && st != RDMX_ERR_NO_RESOURCE)
        return send_failed(ep, st);
    return st;
}

void rdmx__msg_release(rdmx_worker_t *w, void *data)
{
    w->tp->release(w->tw, data);
}

/* Move a large message into @op's buffer. */
static void rndv_start(rdmx_op_t *op, void *desc, size_t length)
{
    rdmx_worker_t *w = op->ep->worker;
    void *req = NULL;
    rdmx_status_t st;

    op->issuing = 1;
    st = w->tp->recv(w->tw, desc, op->buf, length,
                     op->mr != NULL ? op->mr->tmr : NULL, op, &req);
    rdmx__op_started(op, st, req, length);
}

rdmx_status_t rdmx__msg_recv(rdmx_ep_t *ep, void *desc, void *buf,
                             size_t length, rdmx_cb_t cb, void *arg)
{
    rdmx_op_t *op = rdmx__op_get(ep->worker, ep, RDMX_OP_RECV, cb, arg);

    if (op == NULL) {
        ep->worker->tp->release(ep->worker->tw, desc);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "recv: out of memory");
    }
    op->buf = buf;
    op->capacity = length;
    op->mr = NULL;
    rndv_start(op, desc, length);
    return RDMX_INPROGRESS;
}

int rdmx__msg_scatters(const rdmx_worker_t *w)
{
    return w->tp->recvv != NULL;
}

rdmx_status_t rdmx__msg_recvv(rdmx_ep_t *ep, void *desc,
                              const rdmx_msg_piece_t *pieces, unsigned n,
                              size_t length, rdmx_cb_t cb, void *arg)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_op_t *op;
    void *req = NULL;
    rdmx_status_t st;

    if (n == 0 || n > RDMX_TP_IOV_MAX || (n > 1 && w->tp->recvv == NULL)) {
        w->tp->release(w->tw, desc);
        return rdmx__error(RDMX_ERR_INVALID, "recv: %u pieces", n);
    }
    if ((op = rdmx__op_get(w, ep, RDMX_OP_RECV, cb, arg)) == NULL) {
        w->tp->release(w->tw, desc);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "recv: out of memory");
    }
    for (unsigned i = 0; i < n; i++) {
        op->piece[i].base = pieces[i].base;
        op->piece[i].length = pieces[i].length;
    }
    op->mr = NULL;
    /* The pieces are the caller's: tell it only once the transport writes
     * into them no more (an endpoint that fails first orphans the record;
     * its callback then waits for the transport's end). */
    op->cb_at_end = 1;
    op->issuing = 1;
    if (n == 1)
        st =
            w->tp->recv(w->tw, desc, op->piece[0].base, length, NULL, op, &req);
    else
        st = w->tp->recvv(w->tw, desc, op->piece, n, length, op, &req);
    rdmx__op_started(op, st, req, length);
    return RDMX_INPROGRESS;
}

rdmx_status_t rdmx__am_msg(rdmx_worker_t *w, rdmx_tep_t *tep,
                           const void *header, size_t hlen, void *data,
                           size_t len, unsigned flags)
{
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;
    int rndv = !!(flags & RDMX_MSG_RNDV);
    rdmx_unexp_t *u;
    rdmx_list_t *e;

    (void)header;
    if (ep == NULL || ep->status != RDMX_OK || hlen != 0) {
        if (hlen != 0 || ep == NULL)
            w->stats.proto_errors++;
        else
            w->stats.msgs_dropped++;
        return RDMX_OK; /* dropped: closing, or not ours */
    }
    while ((e = rdmx_list_pop(&ep->recvs)) != NULL) {
        rdmx_op_t *op = rdmx_container_of(e, rdmx_op_t, link);
        if (len > op->capacity) {
            /* This receive is too small; the message tries the next. */
            w->stats.recv_too_small++;
            rdmx__error(RDMX_ERR_TOO_BIG, "recv: message of %zu bytes, buffer "
                                          "of %zu",
                        len, op->capacity);
            rdmx__op_defer(op, RDMX_ERR_TOO_BIG, len);
            continue;
        }
        w->stats.msgs_received++;
        if (rndv) {
            rndv_start(op, data, len);
            return RDMX_INPROGRESS;
        }
        if (len != 0)
            memcpy(op->buf, data, len);
        rdmx__op_defer(op, RDMX_OK, len);
        return RDMX_OK;
    }

    /* No receive posted: keep the message until one is. */
    u = malloc(sizeof(*u) + (rndv ? 0 : len));
    if (u == NULL) {
        rdmx_error("recv from %s: out of memory, message of %zu bytes lost",
                   ep->peer, len);
        rdmx__ep_fail(ep, RDMX_ERR_NO_MEMORY);
        return RDMX_OK;
    }
    w->stats.msgs_unexpected++;
    u->length = len;
    u->rndv_desc = rndv ? data : NULL;
    if (!rndv && len != 0)
        memcpy(u->data, data, len);
    rdmx_list_insert_tail(&ep->unexpected, &u->link);
    return rndv ? RDMX_INPROGRESS : RDMX_OK;
}

rdmx_status_t rdmx__recv_post(rdmx_ep_t *ep, void *buf, size_t capacity,
                              rdmx_mr_t *mr, rdmx_cb_t cb, void *arg,
                              rdmx_op_t **op_p)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_op_t *op;
    rdmx_unexp_t *u;
    rdmx_status_t st;

    rdmx__lock(w);
    if ((st = rdmx__ep_usable(ep)) != RDMX_OK)
        goto out;
    op = rdmx__op_get(w, ep, RDMX_OP_RECV, cb, arg);
    if (op == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "recv: out of memory");
        goto out;
    }
    op->buf = buf;
    op->capacity = capacity;
    op->mr = mr;
    if (op_p != NULL)
        *op_p = op;
    st = RDMX_INPROGRESS;
    if (rdmx_list_empty(&ep->unexpected)) {
        rdmx_list_insert_tail(&ep->recvs, &op->link);
        goto out;
    }
    u = rdmx_container_of(ep->unexpected.next, rdmx_unexp_t, link);
    if (u->length > capacity) {
        w->stats.recv_too_small++;
        rdmx__error(RDMX_ERR_TOO_BIG, "recv: message of %zu bytes, buffer "
                                      "of %zu",
                    u->length, capacity);
        rdmx__op_defer(op, RDMX_ERR_TOO_BIG, u->length);
        goto out;
    }
    rdmx_list_del(&u->link);
    w->stats.msgs_received++;
    if (u->rndv_desc != NULL) {
        rndv_start(op, u->rndv_desc, u->length);
    } else {
        if (u->length != 0)
            memcpy(buf, u->data, u->length);
        rdmx__op_defer(op, RDMX_OK, u->length);
    }
    free(u);
out:
    rdmx__unlock(w);
    return st;
}

rdmx_status_t rdmx_send_nb(rdmx_ep_t *ep, const void *buf, size_t length,
                           const rdmx_op_params_t *params)
{
    rdmx__op_args_t a;
    rdmx_status_t st = rdmx__op_nb_args(params, "send_nb", &a);

    return st != RDMX_OK ? st : rdmx__send(ep, buf, length, a.mr, a.cb, a.arg);
}

rdmx_status_t rdmx_recv_nb(rdmx_ep_t *ep, void *buf, size_t capacity,
                           const rdmx_op_params_t *params)
{
    rdmx__op_args_t a;
    rdmx_status_t st = rdmx__op_nb_args(params, "recv_nb", &a);

    if (st != RDMX_OK)
        return st;
    if (ep == NULL || (buf == NULL && capacity != 0))
        return rdmx__error(RDMX_ERR_INVALID, "recv: NULL argument");
    return rdmx__recv_post(ep, buf, capacity, a.mr, a.cb, a.arg, NULL);
}

int rdmx__recv_cancel(rdmx_ep_t *ep, rdmx_op_t *op)
{
    rdmx_list_t *pos, *tmp;

    rdmx_list_for_each_safe(pos, tmp, &ep->recvs)
    {
        if (pos == &op->link) {
            rdmx__op_defer(op, RDMX_ERR_TIMEOUT, 0);
            return 1;
        }
    }
    return 0;
}

void rdmx__msg_purge(rdmx_ep_t *ep, rdmx_status_t status)
{
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ep->recvs)) != NULL)
        rdmx__op_defer(rdmx_container_of(e, rdmx_op_t, link), status, 0);
    while ((e = rdmx_list_pop(&ep->unexpected)) != NULL) {
        rdmx_unexp_t *u = rdmx_container_of(e, rdmx_unexp_t, link);
        if (u->rndv_desc != NULL)
            ep->worker->tp->release(ep->worker->tw, u->rndv_desc);
        free(u);
    }
}
