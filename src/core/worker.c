/*
 * Worker: the UCX worker, the progress loop, sleeping on its epoll set (the
 * UCX event fd and rdmx's sockets), the optional progress thread, and the
 * pool of operation records.
 *
 * Sockets (listeners, handshakes, control connections) are looked at off
 * the fast path: when the worker is about to sleep (rdmx_worker_arm), after
 * it slept, and every 64th progress pass together with the timers. A
 * connection's end is seen within 64 passes of a busy worker or at once by
 * a sleeping one.
 */
#include "core/internal.h"
#include "util/bufcache.h"
#include "util/peer_fence.h"
#include "util/thread.h"

#include "util/time.h"

#include <errno.h>
#include <sched.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define RDMX_OP_POOL_MAX 4096 /* free op records kept for reuse */

/* --- operation records --------------------------------------------------- */

rdmx_op_t *rdmx__op_get(rdmx_worker_t *w, rdmx_ep_t *ep, rdmx_op_kind_t kind,
                        rdmx_cb_t cb, void *arg)
{
    rdmx_list_t *e = rdmx_list_pop(&w->free_ops);
    rdmx_op_t *op;

    if (e != NULL) {
        w->nfree_ops--;
        op = rdmx_container_of(e, rdmx_op_t, link);
    } else {
        op = malloc(sizeof(*op));
        if (op == NULL)
            return NULL;
    }
    rdmx_list_init(&op->link);
    op->ep = ep;
    op->kind = kind;
    op->cb = cb;
    op->arg = arg;
    op->status = RDMX_OK;
    op->length = 0;
    op->old_p = NULL;
    op->aux = NULL;
    op->issuing = 0;
    op->early = 0;
    op->orphaned = 0;
    op->cb_at_end = 0;
    if (ep != NULL)
        ep->ops++;
    return op;
}

void rdmx__op_put(rdmx_worker_t *w, rdmx_op_t *op)
{
    rdmx_ep_t *ep = op->ep;

    rdmx__buf_free(op->aux);
    op->aux = NULL;
    if (w->nfree_ops < RDMX_OP_POOL_MAX) {
        rdmx_list_insert_tail(&w->free_ops, &op->link);
        w->nfree_ops++;
    } else {
        free(op);
    }
    if (ep != NULL)
        rdmx__ep_release(ep);
}

/* Upper-layer code is about to run at @now (a message's handler, a
 * completion callback): open batches that may wait no longer leave first
 * (rdmx__batch_late), and @now becomes the delivery time. */
static void upper_entry(rdmx_worker_t *w, uint64_t now)
{
    if (!rdmx_list_empty(&w->batched) && rdmx__batch_late(w, now))
        rdmx__batch_send_all(w);
    w->deliver_ns = now;
}

void rdmx__op_complete(rdmx_op_t *op, rdmx_status_t status, size_t length)
{
    rdmx_cb_t cb = op->cb;
    void *arg = op->arg;
    rdmx_ep_t *ep = op->ep;
    rdmx_worker_t *w = ep->worker;

    if (op->kind == RDMX_OP_ACCESS && status == RDMX_OK && op->old_p)
        *op->old_p = op->result;
    if (op->kind == RDMX_OP_RECV && op->aux != NULL && status == RDMX_OK)
        memcpy(op->buf, op->aux, op->capacity); /* (a bounce: all of it) */
    op->ep = NULL; /* keep the ep alive through the callback */
    rdmx__op_put(w, op);
    /* (a callback may answer as a handler does: the same bound) */
    if (__builtin_expect(!rdmx_list_empty(&w->batched), 0))
        upper_entry(w, rdmx_now_ns());
    if (cb != NULL)
        cb(status, length, arg);
    rdmx__ep_release(ep);
    if (w->mt)
        pthread_cond_broadcast(&w->cond);
}

void rdmx__op_defer(rdmx_op_t *op, rdmx_status_t status, size_t length)
{
    op->status = status;
    op->length = length;
    rdmx_list_del(&op->link);
    rdmx_list_insert_tail(&op->ep->worker->done, &op->link);
}

void rdmx__op_started(rdmx_op_t *op, rdmx_status_t st, void *req,
                      size_t len_ok)
{
    op->issuing = 0;
    if (op->early) {
        op->early = 0;
        if (st == RDMX_INPROGRESS)
            op->ep->worker->tp->req_forget(req);
        rdmx__op_defer(op, rdmx__op_status(op->ep, op->early_st),
                       op->early_st == RDMX_OK ? op->early_len : 0);
    } else if (st == RDMX_OK) {
        rdmx__op_defer(op, RDMX_OK, len_ok);
    } else if (st == RDMX_INPROGRESS) {
        rdmx__op_issued(op, req);
    } else {
        rdmx__op_defer(op, rdmx__op_status(op->ep, st), 0);
    }
}

void rdmx__op_issued(rdmx_op_t *op, void *req)
{
    op->req = req;
    rdmx_list_insert_tail(&op->ep->inflight, &op->link);
}

/* Free an orphaned record whose request the transport is done with (or
 * whose transport is gone), telling its owner now if it waited for that. */
static void orphan_free(rdmx_op_t *op)
{
    if (op->cb_at_end && op->cb != NULL)
        op->cb(op->status, 0, op->arg);
    rdmx__buf_free(op->aux);
    free(op);
}

int rdmx__op_tp_done(rdmx_op_t *op, void *req)
{
    rdmx_list_del(&op->link);
    if (op->orphaned) {
        orphan_free(op); /* its request was released when it was orphaned */
        return 0;
    }
    op->ep->worker->tp->req_forget(req);
    return 1;
}

/* The backend finished a request of @op: the next step for its kind. */
void rdmx__tp_done(rdmx_op_t *op, void *req, rdmx_status_t status,
                   size_t length)
{
    if (op->issuing) { /* (inside the call that started it) */
        op->early = 1;
        op->early_st = status;
        op->early_len = length;
        return;
    }
    switch (op->kind) {
    case RDMX_OP_INTERNAL: {
        rdmx_worker_t *w = op->arg;
        w->tp->req_forget(req);
        rdmx__op_put(w, op);
        return;
    }
    case RDMX_OP_ACCESS:
        if (op->amo_tag != 0) { /* carried by rdmx: wait for the reply */
            rdmx__amo_sent(op, req, status);
            return;
        }
        if (rdmx__op_tp_done(op, req)) /* the transport's own */
            rdmx__op_complete(op, rdmx__op_status(op->ep, status), 8);
        return;
    case RDMX_OP_NOTIFY:
        rdmx__notify_step(op, req, status);
        return;
    default:
        if (rdmx__op_tp_done(op, req))
            rdmx__op_complete(op, rdmx__op_status(op->ep, status),
                              op->kind == RDMX_OP_RECV ? length
                                                       : op->length);
    }
}

rdmx_status_t rdmx__op_issue(rdmx_op_t *op, rdmx_status_t st, void *req,
                             const char *what)
{
    rdmx_worker_t *w = op->ep->worker;
    rdmx_ep_t *ep = op->ep;

    if (st == RDMX_INPROGRESS) {
        rdmx__op_issued(op, req);
        return RDMX_INPROGRESS;
    }
    rdmx__op_put(w, op);
    if (st == RDMX_OK)
        return RDMX_OK;
    return rdmx__op_error(ep, st, what);
}

rdmx_status_t rdmx__op_error(rdmx_ep_t *ep, rdmx_status_t st, const char *what)
{
    char why[200];

    snprintf(why, sizeof(why), "%s", rdmx_error_detail());
    return rdmx__error(rdmx__op_status(ep, st), "%s to %s: %s", what, ep->peer,
                       why);
}

void rdmx__op_orphan_all(rdmx_ep_t *ep)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ep->inflight)) != NULL) {
        rdmx_op_t *op = rdmx_container_of(e, rdmx_op_t, link);
        /* The record stays with UCX; a stand-in carries the completion,
         * unless the completion must wait for UCX (cb_at_end). */
        rdmx_op_t *stand_in =
            op->cb_at_end ? NULL
                          : rdmx__op_get(w, NULL, op->kind, op->cb, op->arg);
        op->orphaned = 1;
        op->status = ep->status;
        op->ep = NULL;
        if (op->kind == RDMX_OP_ACCESS) /* a late reply must not find it */
            rdmx_ptrmap_del(&w->amo_ops, (void *)op->amo_tag);
        /* Released now: UCX frees it when (if ever) it completes, and must
         * find it released when the worker is destroyed. */
        w->tp->req_forget(op->req);
        rdmx_list_insert_tail(&w->orphans, &op->link);
        if (stand_in == NULL) {
            if (op->cb && !op->cb_at_end)
                op->cb(ep->status, 0, op->arg);
            rdmx__ep_release(ep);
            continue;
        }
        stand_in->ep = ep; /* takes over op's reference */
        rdmx__op_defer(stand_in, ep->status, 0);
    }
}

rdmx_status_t rdmx__op_status(rdmx_ep_t *ep, rdmx_status_t status)
{
    if (status == RDMX_OK)
        return RDMX_OK;
    if (ep->status != RDMX_OK)
        return ep->status;
    return status;
}

/* --- progress thread ------------------------------------------------------ */

static uint64_t next_hook_ns(rdmx_worker_t *w);

static void *progress_thread(void *arg)
{
    rdmx_worker_t *w = arg;
    struct pollfd pfd = {.fd = w->epfd, .events = POLLIN};

    rdmx__thread_name("rdmx-progress", -1);
    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        unsigned n;
        rdmx_status_t st = RDMX_ERR_BUSY;
        int sleep_ms = 100;

        pthread_mutex_lock(&w->lock);
        n = rdmx_worker_progress(w);
        if (n > 0) /* callbacks may have set what a waiter waits for */
            pthread_cond_broadcast(&w->cond);
        if (n == 0) {
            st = rdmx_worker_arm(w);
            uint64_t next = next_hook_ns(w), now = rdmx_now_ns();
            if (next != UINT64_MAX)
                sleep_ms = next <= now ? 0
                           : next - now >= 100000000ull
                               ? 100
                               : (int)((next - now + 999999) / 1000000);
        }
        pthread_mutex_unlock(&w->lock);
        /* Sleep at most 100 ms so deadlines and stop are noticed. */
        if (n == 0 && st == RDMX_OK) {
            poll(&pfd, 1, sleep_ms);
            w->hooks_due = 1;
        }
    }
    return NULL;
}

/* --- worker --------------------------------------------------------------- */

/* Core's own messages, by id. */
static rdmx_core_handler_t *const core_handlers[] = {
    [RDMX_AM_BIND] = rdmx__am_bind,
    [RDMX_AM_BIND_ACK] = rdmx__am_bind_ack,
    [RDMX_AM_MSG] = rdmx__am_msg,
    [RDMX_AM_NOTIFY] = rdmx__am_notify,
    [RDMX_AM_BYE] = rdmx__am_bye,
    [RDMX_AM_BYE_ACK] = rdmx__am_bye_ack,
    [RDMX_AM_ACCESS] = rdmx__am_access,
    [RDMX_AM_ACCESS_REPLY] = rdmx__am_access_reply,
    [RDMX_AM_BATCH] = rdmx__am_batch,
};

rdmx_status_t rdmx_worker_create(rdmx_context_t *context,
                                 const rdmx_worker_params_t *params,
                                 rdmx_worker_t **worker_p)
{
    rdmx_worker_t *w;
    pthread_mutexattr_t ma;
    rdmx_status_t status;
    uint64_t flags = 0;

    if (context == NULL || worker_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "worker_create: NULL argument");
    if (params != NULL && (params->field_mask & RDMX_WORKER_PARAM_FIELD_FLAGS))
        flags = params->flags;

    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "worker: out of memory");
    w->ctx = context;
    w->tp = context->tp;
    w->mt = !!(flags & RDMX_WORKER_FLAG_PROGRESS_THREAD);
    w->busy = !!(flags & RDMX_WORKER_FLAG_BUSY_POLL);
    rdmx_list_init(&w->eps);
    rdmx_list_init(&w->closing);
    rdmx_list_init(&w->listeners);
    rdmx_list_init(&w->conn_reqs);
    rdmx_list_init(&w->done);
    rdmx_list_init(&w->ep_events);
    rdmx_list_init(&w->free_ops);
    rdmx_list_init(&w->orphans);
    rdmx_list_init(&w->hooks);
    rdmx_list_init(&w->pollers);
    rdmx_list_init(&w->handoff);
    rdmx_list_init(&w->spares);
    rdmx_list_init(&w->batched);
    w->epfd = -1;
    pthread_mutex_init(&w->handoff_lock, NULL);
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&w->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_cond_init(&w->cond, NULL);
    if ((status = rdmx__timers_init(w)) != RDMX_OK)
        goto err_free;
    w->grants = calloc(RDMX_GRANT_CACHE, sizeof(*w->grants));
    if (w->grants == NULL || rdmx_ptrmap_init(&w->tokens) != 0 ||
        rdmx_ptrmap_init(&w->amo_ops) != 0) {
        rdmx_ptrmap_cleanup(&w->tokens);
        status = rdmx__error(RDMX_ERR_NO_MEMORY, "worker: out of memory");
        rdmx__timers_cleanup(w);
        goto err_free;
    }
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0) {
        status = rdmx__error(RDMX_ERR_NO_RESOURCE, "worker: epoll: %s",
                             strerror(errno));
        goto err_map;
    }
    status =
        w->tp->worker_create(context->tctx, w,
                             (w->mt ? RDMX_TP_WORKER_THREADED : 0u) |
                                 (w->busy ? RDMX_TP_WORKER_BUSY : 0u),
                             w->epfd, &w->tw, &w->efd, &w->addr, &w->addr_len);
    if (status != RDMX_OK)
        goto err_epfd;
    if (w->efd >= 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->efd, &ev) != 0) {
            status = rdmx__error(RDMX_ERR_NO_RESOURCE, "worker: epoll: %s",
                                 strerror(errno));
            goto err_epoll;
        }
    }
    if (getrandom(&w->id, sizeof(w->id), 0) != (ssize_t)sizeof(w->id)) {
        status = rdmx__error(RDMX_ERR_INTERNAL, "worker: no random bytes");
        goto err_epoll;
    }
    for (unsigned i = 0; i < sizeof(core_handlers) / sizeof(core_handlers[0]);
         i++)
        if (core_handlers[i] != NULL &&
            (status = w->tp->set_handler(w->tw, i, 0)) != RDMX_OK)
            goto err_epoll;

    if (w->mt && pthread_create(&w->thread, NULL, progress_thread, w) != 0) {
        status = rdmx__error(RDMX_ERR_NO_RESOURCE,
                             "worker: cannot start progress thread");
        goto err_epoll;
    }
    *worker_p = w;
    return RDMX_OK;

err_epoll:
    w->tp->worker_destroy(w->tw);
err_epfd:
    close(w->epfd);
err_map:
    rdmx__timers_cleanup(w);
    rdmx_ptrmap_cleanup(&w->amo_ops);
    rdmx_ptrmap_cleanup(&w->tokens);
err_free:
    free(w->grants);
    pthread_mutex_destroy(&w->handoff_lock);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return status;
}

/* Reject the connection requests queued on @w (their listeners exist:
 * rdmx_listener_destroy takes its own off every worker). */
static void reject_all_queued(rdmx_worker_t *w)
{
    rdmx_list_t *e;

    pthread_mutex_lock(&w->handoff_lock);
    while ((e = rdmx_list_pop(&w->handoff)) != NULL)
        rdmx_list_insert_tail(&w->conn_reqs, e);
    w->handoff_pending = 0;
    pthread_mutex_unlock(&w->handoff_lock);
    while ((e = rdmx_list_pop(&w->conn_reqs)) != NULL)
        rdmx__conn_req_reject(rdmx_container_of(e, rdmx_conn_req_t, link),
                              RDMX_ERR_CONN_REFUSED,
                              "server is shutting down");
}

void rdmx_worker_destroy(rdmx_worker_t *w)
{
    rdmx_list_t *e;

    if (w == NULL)
        return;
    if (w->mt) {
        __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
        w->tp->signal(w->tw);
        pthread_join(w->thread, NULL);
        w->mt = 0; /* only this thread from here on */
    }
    /* Listeners first: from here on connections are refused, not queued.
     * Connection requests are only sockets (no UCX object moves between
     * workers), so nothing here needs UCX's async thread held. */
    w->destroying = 1;
    rdmx__timers_cancel_all(w);
    while (!rdmx_list_empty(&w->listeners))
        rdmx_listener_destroy(
            rdmx_container_of(w->listeners.next, rdmx_listener_t, link));
    reject_all_queued(w); /* other workers' listeners' (they exist) */
    rdmx__ep_destroy_all(w);
    rdmx__spares_sweep(w, 0, 1);
    while ((e = rdmx_list_pop(&w->free_ops)) != NULL)
        free(rdmx_container_of(e, rdmx_op_t, link));
    w->tp->worker_destroy(w->tw);
    close(w->epfd);
    /* Requests UCX never completed went with its worker. */
    while ((e = rdmx_list_pop(&w->orphans)) != NULL)
        orphan_free(rdmx_container_of(e, rdmx_op_t, link));
    rdmx__timers_cleanup(w); /* (endpoints' callbacks may have started some) */
    rdmx_ptrmap_cleanup(&w->amo_ops);
    rdmx_ptrmap_cleanup(&w->tokens);
    free(w->grants);
    pthread_mutex_destroy(&w->handoff_lock);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* A message arrived: core's own ids go to their handlers, the rest to the
 * layer that registered the id, once the sender is known to be live. */
rdmx_status_t rdmx__tp_deliver(rdmx_worker_t *w, unsigned id,
                               rdmx_tep_t *tep, const void *hdr, size_t hlen,
                               void *data, size_t len, unsigned flags)
{
    rdmx_msg_info_t info;

    if (id < RDMX_AM_CORE_LAST) {
        if (id < sizeof(core_handlers) / sizeof(core_handlers[0]) &&
            core_handlers[id] != NULL)
            return core_handlers[id](w, tep, hdr, hlen, data, len, flags);
        w->stats.proto_errors++;
        return RDMX_OK;
    }
    info.ep = tep != NULL ? tep->owner : NULL;
    if (info.ep == NULL || info.ep->status != RDMX_OK ||
        id >= RDMX_MSG_ID_MAX || w->handlers[id] == NULL) {
        if (info.ep == NULL || id >= RDMX_MSG_ID_MAX ||
            w->handlers[id] == NULL)
            w->stats.proto_errors++;
        else
            w->stats.msgs_dropped++;
        return RDMX_OK; /* closing, or not an rdmx peer */
    }
    info.flags = flags;
    /* The clock, read once for the message: the layers above take its
     * arrival from here (rdmx__worker_deliver_ns). */
    upper_entry(w, rdmx_now_ns());
    if (info.ep->status != RDMX_OK) { /* (a batch sent just now failed it) */
        w->stats.msgs_dropped++;
        return RDMX_OK;
    }
    return w->handlers[id](w, hdr, hlen, data, len, &info);
}

rdmx_status_t rdmx__worker_set_handler(rdmx_worker_t *w, unsigned id,
                                       rdmx_msg_handler_t fn)
{
    if (id < RDMX_MSG_ID_UPPER || id >= RDMX_MSG_ID_MAX || fn == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "message id %u: not %u..%u",
                           id, RDMX_MSG_ID_UPPER, RDMX_MSG_ID_MAX - 1);
    w->handlers[id] = fn;
    /* Upper layers may keep a message's data past the callback. */
    return w->tp->set_handler(w->tw, id, 1);
}

rdmx_context_t *rdmx__worker_context(const rdmx_worker_t *w)
{
    return w->ctx;
}

int rdmx__worker_threaded(const rdmx_worker_t *w)
{
    return w->mt;
}

void rdmx__worker_proto_error(rdmx_worker_t *w)
{
    w->stats.proto_errors++;
}

void rdmx__worker_lock(rdmx_worker_t *w)
{
    rdmx__lock(w);
}

void rdmx__worker_unlock(rdmx_worker_t *w)
{
    rdmx__unlock(w);
}

/* Poll for up to ctx->spin_ns (RDMX_SPIN_US; 0: sleep at once) after the
 * last event, while this thread holds a polling slot (spin.c; none free:
 * sleep at once), then sleep on the worker's fd until the next event or
 * timer (at most 100 ms at a time); a busy-polled worker polls until
 * done. */
void rdmx__progress_until(rdmx_worker_t *w, volatile int *done)
{
    rdmx__wait_deadline(w, done, UINT64_MAX);
}

/* May this waiter poll (spin.c)? A busy-polled worker always does. */
static int wait_polls(rdmx_worker_t *w, uint64_t spin_ns, int again,
                      rdmx_spin_slot_t *slot)
{
    return spin_ns != 0 &&
           (w->busy ||
            rdmx__spin_claim(
                (unsigned)((uintptr_t)w >> 6),
                (rdmx__context_poll_yields(w->ctx) ? RDMX_SPIN_YIELDS : 0) |
                    (again ? RDMX_SPIN_AGAIN : 0),
                slot));
}

int rdmx__wait_deadline(rdmx_worker_t *w, volatile int *done,
                        uint64_t deadline_ns)
{
    uint64_t idle_since = 0, spin_ns = w->ctx->spin_ns, now;
    unsigned spins = 0;
    rdmx_spin_slot_t slot = {.index = RDMX_SPIN_NONE};
    int asked = 0, polls = 0, pass = 1, turns = 0, turned = 0;
    int may_take_turns;

    if (w->mt) {
        int rc = 0;
        pthread_mutex_lock(&w->lock);
        w->tp->signal(w->tw); /* the progress thread may be asleep */
        while (!*done) {
            struct timespec ts;
            if (rdmx_now_ns() >= deadline_ns) {
                rc = -1;
                break;
            }
            /* (the progress thread broadcasts after every pass with work;
             * 10 ms bounds a missed one) */
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 10 * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&w->cond, &w->lock, &ts);
        }
        pthread_mutex_unlock(&w->lock);
        return rc;
    }
    /* Over shared memory and RDMA, waiters that outnumber the CPUs take
     * turns ("Polling slots" in docs/CORE.md). */
    may_take_turns =
        spin_ns != 0 && !w->busy && !rdmx__context_poll_yields(w->ctx);
    /* A waiter that yields and may not poll now (pressure, or no polling
     * at all) sleeps at once: its answer is a round trip over tcp away,
     * and the arm sees anything that came meanwhile (spin.c). */
    if (rdmx__context_poll_yields(w->ctx) && !w->busy) {
        asked = 1;
        polls = wait_polls(w, spin_ns, 0, &slot);
        pass = polls || (deadline_ns != UINT64_MAX &&
                         rdmx_now_ns() >= deadline_ns); /* (one try) */
    }
    while (!*done) {
        if (pass && rdmx_worker_progress(w) > 0) {
            idle_since = 0;
            continue;
        }
        pass = 1;
        /* Idle: poll on only while holding a polling slot (spin.c). */
        if (!asked) {
            asked = 1;
            polls = wait_polls(w, spin_ns, turned, &slot);
            turns = may_take_turns && !polls;
        }
        if (polls && (++spins & 63) != 0) {
            if (slot.turns) /* (a holder, while the host is crowded) */
                sched_yield();
            continue;
        }
        if (polls && !w->busy)
            polls = rdmx__spin_confirm(&slot);
        now = rdmx_now_ns();
        if (now >= deadline_ns) {
            rdmx__spin_release(&slot);
            return -1;
        }
        if (idle_since == 0)
            idle_since = now;
        if (turns && rdmx_since(now, idle_since) < spin_ns) {
            /* Every slot taken (more waiters than CPUs) over shared memory
             * or RDMA: give the CPU to whoever is runnable after each
             * empty pass, instead of sleeping. The answer comes by memory,
             * so a waiter that looks again when its turn comes needs no
             * wake-up (a system call for its peer, a context switch for
             * itself). */
            sched_yield();
            asked = 0; /* (the slots again: one may have come free) */
            turned = 1;
            continue;
        }
        if ((!polls || rdmx_since(now, idle_since) >= spin_ns) && !w->busy) {
            /* Sleep until an event, a timer (rdmx__worker_sleep knows them)
             * or the deadline: a thread blocked on a stopped peer wakes a
             * few times a second, not a thousand. */
            rdmx__spin_release(&slot);
            asked = 0;
            turned = 0;
            rdmx__worker_sleep(w, deadline_ns - now > 100000000ull
                                      ? now + 100000000ull
                                      : deadline_ns);
        }
    }
    rdmx__spin_release(&slot);
    return 0;
}

void rdmx__wait_until(rdmx_worker_t *w, volatile int *done)
{
    rdmx__wait_deadline(w, done, UINT64_MAX);
}

void rdmx__hook_add(rdmx_worker_t *w, rdmx_hook_t *hook)
{
    rdmx_list_insert_tail(&w->hooks, &hook->link);
}

void rdmx__hook_del(rdmx_hook_t *hook)
{
    rdmx_list_del(&hook->link);
}

void rdmx__worker_handoff(rdmx_worker_t *w, rdmx_conn_req_t *cr)
{
    pthread_mutex_lock(&w->handoff_lock);
    rdmx_list_insert_tail(&w->handoff, &cr->link);
    __atomic_store_n(&w->handoff_pending, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&w->handoff_lock);
    w->tp->signal(w->tw);
}

/* Take the connection requests other workers handed over. */
static void take_handoffs(rdmx_worker_t *w)
{
    rdmx_list_t *e;

    pthread_mutex_lock(&w->handoff_lock);
    while ((e = rdmx_list_pop(&w->handoff)) != NULL)
        rdmx_list_insert_tail(&w->conn_reqs, e);
    w->handoff_pending = 0;
    pthread_mutex_unlock(&w->handoff_lock);
}

/* Run the timers that are due; returns the events they processed. */
static unsigned run_hooks(rdmx_worker_t *w)
{
    uint64_t now = rdmx_now_ns();
    rdmx_list_t *pos, *tmp;
    unsigned n = 0;

    rdmx_list_for_each_safe(pos, tmp, &w->hooks)
    {
        rdmx_hook_t *h = rdmx_container_of(pos, rdmx_hook_t, link);
        if (now >= h->next_ns)
            n += h->fn(h, now);
    }
    return n;
}

/* The earliest armed timer, or UINT64_MAX. */
static uint64_t next_hook_ns(rdmx_worker_t *w)
{
    uint64_t next = UINT64_MAX;
    rdmx_list_t *pos;

    rdmx_list_for_each(pos, &w->hooks)
    {
        rdmx_hook_t *h = rdmx_container_of(pos, rdmx_hook_t, link);
        if (h->next_ns < next)
            next = h->next_ns;
    }
    return next;
}

/* Run callbacks that were deferred to progress (never inline in a call). */
static unsigned run_deferred(rdmx_worker_t *w)
{
    unsigned n = 0;
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&w->done)) != NULL) {
        rdmx_op_t *op = rdmx_container_of(e, rdmx_op_t, link);
        rdmx__op_complete(op, op->status, op->length);
        n++;
    }
    return n;
}

#define SWEEP_INTERVAL_NS (100ull * 1000000ull)
#define SOCK_INTERVAL_NS  (1000000ull)

/* Socket events @evs[0..@k) from an epoll_wait on the worker's set:
 * rdmx's own sockets' handlers run; the backend's fd (no pointer) is left
 * to its progress. Then the listener's and the spares' sweep when due. */
static unsigned socket_events(rdmx_worker_t *w, const struct epoll_event *evs,
                              int k)
{
    unsigned n = 0;
    uint64_t now;

    for (int i = 0; i < k; i++) {
        rdmx_sock_t *s = evs[i].data.ptr;
        if (s == NULL)
            continue; /* the backend's fd: its progress handles it */
        s->on_event(s, evs[i].events);
        n++;
    }
    now = rdmx_now_ns();
    if (now >= w->next_sweep_ns) {
        w->next_sweep_ns = now + SWEEP_INTERVAL_NS;
        rdmx__listener_sweep(w, now);
        rdmx__spares_sweep(w, now, 0);
    }
    return n;
}

unsigned rdmx__worker_poll_sockets(rdmx_worker_t *w)
{
    struct epoll_event evs[64];

    if (w->nsocks == 0 && rdmx_list_empty(&w->spares))
        return 0;
    return socket_events(w, evs, epoll_wait(w->epfd, evs, 64, 0));
}

/* The work of a progress pass beside the transport's: hand-offs, posted
 * tasks, accepts, deferred completions, endpoint events, and every 64th
 * pass (or after a sleep) the timers and sockets. Kept out of line so that
 * a pass with none of it costs a few loads and compares. */
static unsigned __attribute__((noinline)) progress_rest(rdmx_worker_t *w)
{
    unsigned n = 0;

    /* (being destroyed: requests wait to be rejected at the end) */
    if (__atomic_load_n(&w->handoff_pending, __ATOMIC_ACQUIRE) &&
        !w->destroying)
        take_handoffs(w);
    if (__atomic_load_n(&w->post_pending, __ATOMIC_ACQUIRE) && !w->destroying)
        n += rdmx__posts_run(w);
    while (!rdmx_list_empty(&w->conn_reqs) && !w->destroying) {
        rdmx_list_t *e = rdmx_list_pop(&w->conn_reqs);
        rdmx__ep_accept(w, rdmx_container_of(e, rdmx_conn_req_t, link));
        n++;
    }
    if (!rdmx_list_empty(&w->done))
        n += run_deferred(w);
    if (!rdmx_list_empty(&w->ep_events) || w->connecting ||
        !rdmx_list_empty(&w->closing))
        n += rdmx__ep_progress(w);
    /* Timers and sockets: every 64th pass (a clock read costs as much as
     * an idle pass), and when a sleep says so. A busy worker looks
     * at its sockets at most once a millisecond: epoll_wait is a syscall,
     * as dear as a whole round trip over shared memory. */
    if ((w->hook_tick & 63) == 0 || w->hooks_due) {
        uint64_t now = rdmx_now_ns();
        if (w->hooks_due || now >= w->next_sock_ns) {
            w->next_sock_ns = now + SOCK_INTERVAL_NS;
            n += rdmx__worker_poll_sockets(w);
        }
        w->hooks_due = 0;
        if (!rdmx_list_empty(&w->hooks))
            n += run_hooks(w);
    }
    return n;
}

/* --- pollers (upper.h) ------------------------------------------------------
 */

void rdmx__poller_add(rdmx_worker_t *w, rdmx_poller_t *p)
{
    rdmx__lock(w);
    rdmx_list_insert_tail(&w->pollers, &p->link);
    rdmx__unlock(w);
}

void rdmx__poller_del(rdmx_worker_t *w, rdmx_poller_t *p)
{
    rdmx__lock(w);
    if (w->dozing)
        p->doze(p, 0);
    rdmx_list_del(&p->link);
    rdmx__unlock(w);
}

static unsigned pollers_poll(rdmx_worker_t *w)
{
    rdmx_list_t *pos, *tmp;
    unsigned n = 0;

    if (w->dozing) {
        w->dozing = 0;
        rdmx_list_for_each(pos, &w->pollers)
        {
            rdmx_poller_t *p = rdmx_container_of(pos, rdmx_poller_t, link);
            p->doze(p, 0);
        }
    }
    /* (safe: a poller's callbacks may remove it) */
    rdmx_list_for_each_safe(pos, tmp, &w->pollers)
    {
        rdmx_poller_t *p = rdmx_container_of(pos, rdmx_poller_t, link);
        n += p->poll(p);
    }
    return n;
}

/* Before a sleep: every poller marks its memory, the heavy fence where a
 * poller's writers publish without one of their own (docs/RPC_RINGS.md,
 * "Sleeping"), then every poller looks once more; nonzero when one
 * already holds something, or when the fence failed (stay awake: such a
 * writer might not see the mark). */
static int pollers_doze(rdmx_worker_t *w)
{
    rdmx_list_t *pos;
    int busy = 0, heavy = 0;

    w->dozing = 1;
    rdmx_list_for_each(pos, &w->pollers)
    {
        rdmx_poller_t *p = rdmx_container_of(pos, rdmx_poller_t, link);
        p->doze(p, 1);
        heavy |= p->fenced;
    }
    if (heavy && rdmx__peer_fence_heavy() != 0)
        return 1;
    rdmx_list_for_each(pos, &w->pollers)
    {
        rdmx_poller_t *p = rdmx_container_of(pos, rdmx_poller_t, link);
        busy |= p->waiting(p);
    }
    return busy;
}

unsigned rdmx_worker_progress(rdmx_worker_t *w)
{
    unsigned n;

    rdmx__lock(w);
    if (!rdmx_list_empty(&w->batched)) /* (made since the last pass) */
        rdmx__batch_send_all(w);
    w->armed = 0;
    w->pass++;
    w->in_pass++;
    n = w->tp->progress(w->tw);
    if (!rdmx_list_empty(&w->pollers))
        n += pollers_poll(w);
    w->in_pass--;
    if (!rdmx_list_empty(&w->batched)) /* (sent in the pass after a first) */
        rdmx__batch_send_all(w);
    /* (one test of everything progress_rest looks at) */
    if ((++w->hook_tick & 63) == 0 ||
        (w->hooks_due | w->connecting |
         __atomic_load_n(&w->handoff_pending, __ATOMIC_ACQUIRE) |
         __atomic_load_n(&w->post_pending, __ATOMIC_ACQUIRE)) != 0 ||
        !rdmx_list_empty(&w->conn_reqs) || !rdmx_list_empty(&w->done) ||
        !rdmx_list_empty(&w->ep_events) || !rdmx_list_empty(&w->closing)) {
        n += progress_rest(w);
        if (!rdmx_list_empty(&w->batched)) /* (held by its callbacks) */
            rdmx__batch_send_all(w);
    }
    rdmx__unlock(w);
    return n;
}

uint64_t rdmx__worker_deliver_ns(const rdmx_worker_t *w)
{
    return w->deliver_ns;
}

uint64_t rdmx__worker_enter(rdmx_worker_t *w, uint64_t pass_ns)
{
    uint64_t now;

    if (pass_ns != 0 && rdmx_list_empty(&w->batched))
        return pass_ns;
    now = rdmx_now_ns();

    upper_entry(w, now);
    return now;
}

rdmx_status_t rdmx_worker_efd(rdmx_worker_t *w, int *fd_p)
{
    *fd_p = w->epfd;
    return RDMX_OK;
}

/* Arm the worker (rdmx_worker_arm), looking at its sockets first only if
 * @sockets: a caller that then waits on the worker's epoll set itself sees
 * a ready socket there (they are level-triggered members of it). */
static rdmx_status_t arm(rdmx_worker_t *w, int sockets)
{
    rdmx_status_t st = RDMX_OK;

    rdmx__lock(w);
    if (!rdmx_list_empty(&w->batched)) /* (announced with more) */
        rdmx__batch_send_all(w);
    if (!rdmx_list_empty(&w->done) || !rdmx_list_empty(&w->conn_reqs) ||
        !rdmx_list_empty(&w->ep_events) ||
        __atomic_load_n(&w->handoff_pending, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&w->post_pending, __ATOMIC_ACQUIRE) || w->hooks_due ||
        (!rdmx_list_empty(&w->pollers) && pollers_doze(w)) ||
        (sockets && rdmx__worker_poll_sockets(w) > 0)) {
        st = RDMX_ERR_BUSY;
    } else {
        st = w->tp->arm(w->tw);
        w->armed = st == RDMX_OK;
    }
    rdmx__unlock(w);
    return st;
}

rdmx_status_t rdmx_worker_arm(rdmx_worker_t *w)
{
    return arm(w, 1);
}

rdmx_status_t rdmx__worker_sleep(rdmx_worker_t *w, uint64_t deadline)
{
    struct epoll_event evs[64];
    rdmx_status_t st = arm(w, 0);
    uint64_t now, left_ms;
    int k;

    if (st == RDMX_ERR_BUSY) {
        /* UCX 1.13 can say "busy" for seconds with nothing to progress
         * (after peers died on shm): the caller's next pass finds
         * nothing, so stop spinning after a while. */
        if (++w->arm_busy >= 64) {
            struct timespec ts = {0, 200000};
            w->arm_busy = 0;
            nanosleep(&ts, NULL);
        }
        return st;
    }
    w->arm_busy = 0;
    if (st != RDMX_OK)
        return st;
    now = rdmx_now_ns();
    if (now >= deadline)
        return RDMX_ERR_TIMEOUT;
    left_ms = (deadline - now + 999999) / 1000000;
    /* Wake up for connect and close deadlines too. */
    if ((w->connecting || !rdmx_list_empty(&w->closing)) && left_ms > 10)
        left_ms = 10;
    if (!rdmx_list_empty(&w->hooks)) {
        uint64_t next = next_hook_ns(w);
        if (next != UINT64_MAX) {
            uint64_t hook_ms = next > now ? (next - now + 999999) / 1000000 : 0;
            if (hook_ms < left_ms)
                left_ms = hook_ms;
        }
    }
    k = epoll_wait(w->epfd, evs, 64,
                   left_ms > 1000000 ? 1000000 : (int)left_ms);
    if (k < 0) {
        if (errno == EINTR)
            return RDMX_OK;
        return rdmx__error(RDMX_ERR_IO, "epoll_wait: %s", strerror(errno));
    }
    /* What woke it: its sockets are handled here; the transport's fd by
     * the next pass. Timers run at the next pass only when one is due or
     * the sleep timed out; so a wake-up by the transport costs no second
     * look at the sockets. */
    rdmx__lock(w);
    socket_events(w, evs, k);
    if (k == 0 ||
        (!rdmx_list_empty(&w->hooks) && next_hook_ns(w) <= rdmx_now_ns()))
        w->hooks_due = 1;
    rdmx__unlock(w);
    return RDMX_OK;
}

rdmx_status_t rdmx_worker_wait(rdmx_worker_t *w, int timeout_ms)
{
    uint64_t deadline = timeout_ms < 0
                            ? UINT64_MAX
                            : rdmx_now_ns() + (uint64_t)timeout_ms * 1000000ull;

    for (;;) {
        rdmx_status_t st;

        if (rdmx_worker_progress(w) > 0)
            return RDMX_OK;
        st = rdmx__worker_sleep(w, deadline);
        if (st == RDMX_ERR_BUSY) {
            if (rdmx_now_ns() >= deadline)
                return RDMX_ERR_TIMEOUT;
            continue;
        }
        if (st != RDMX_OK)
            return st;
    }
}

void rdmx_worker_signal(rdmx_worker_t *w)
{
    w->tp->signal(w->tw);
}

void rdmx_worker_stats(rdmx_worker_t *w, rdmx_worker_stats_t *stats_p)
{
    rdmx__lock(w);
    *stats_p = w->stats;
    rdmx__unlock(w);
}
