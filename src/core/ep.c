/*
 * Endpoints: connect, accept, the bootstrap handshake, failure and close.
 *
 * Life of an endpoint (docs/CORE.md, "Connections"):
 *   client: rdmx_connect_nb: TCP connect -> HELLO -> WELCOME (the server
 *           worker's transport address) -> UCX endpoint -> BIND over UCX
 *           -> BIND_ACK -> CONNECTED
 *   server: the listener read HELLO and handed the socket to this worker:
 *           UCX endpoint to the client's address -> WELCOME -> ACCEPTING
 *           -(BIND)-> CONNECTED (accept_cb)
 *   any:    -(peer failed / BYE / control socket closed / deadline)->
 *           FAILED -(rdmx_ep_close)-> CLOSING -(UCX close done, no op
 *           left)-> freed
 * The BIND round trip makes the first message on a new UCX endpoint a small
 * one (UCX sends the first AM eagerly whatever its size) and proves the
 * transport path works both ways before anyone is told "connected".
 *
 * Pairing. Both sides create a UCX endpoint from the other's worker
 * address, and UCX pairs them by a per-peer sequence number: the n-th
 * endpoint a client worker creates toward a server worker meets the n-th
 * endpoint that server worker created toward it. With several handshakes
 * between the same two workers in flight, the n-th may belong to another
 * rdmx connection than the one that created it. BIND names the connection
 * (the token from WELCOME) and arrives on whichever UCX endpoint UCX
 * paired; the server then gives that UCX endpoint to the named connection,
 * and the one it had to the connection that owned the other (or keeps it as
 * a spare for the next connection from that worker, when the handshake it
 * was made for ended first). Both sides create endpoints only on those
 * steps, so counts stay level and no message is ever delivered to the wrong
 * connection.
 *
 * The bootstrap socket stays open as the connection's control channel: its
 * end (the peer process died, its kernel closed the socket) fails the
 * endpoint at once on every transport.
 *
 * UCX callbacks and socket events only record what happened and queue the
 * endpoint on worker->ep_events; the user's callbacks run from
 * rdmx__ep_progress, where closing an endpoint is safe.
 */
#include "core/internal.h"

#include "util/endian.h"
#include "util/time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define RDMX_CLOSE_TIMEOUT_NS  (2000ull * 1000000ull)
#define RDMX_ACCEPT_TIMEOUT_NS (10000ull * 1000000ull)
#define RDMX_REPORT_MAX_NS     (1000ull * 1000000ull)
#define RDMX_SPARE_TTL_NS      (60000ull * 1000000ull)

/* BIND_ACK and BYE headers never change: static memory outlives every
 * send. */
static const unsigned char ack_ok_hdr[RDMX_BIND_SIZE] = {
    RDMX_WIRE_MAGIC & 0xff, (RDMX_WIRE_MAGIC >> 8) & 0xff,
    (RDMX_WIRE_MAGIC >> 16) & 0xff, (RDMX_WIRE_MAGIC >> 24) & 0xff};
static const unsigned char bye_hdr[RDMX_BIND_SIZE] = {0};

/* A close request outlives its endpoint when the close times out. */
typedef struct {
    rdmx_ep_t *ep; /* NULL once the endpoint gave up waiting */
    void *req;     /* the UCX close request */
} rdmx_closer_t;

static void on_ctl_event(rdmx_sock_t *s, uint32_t events);

static void queue_event(rdmx_ep_t *ep, unsigned ev)
{
    ep->events |= ev;
    if (rdmx_list_empty(&ep->event_link))
        rdmx_list_insert_tail(&ep->worker->ep_events, &ep->event_link);
}

static void set_deadline(rdmx_ep_t *ep, uint64_t deadline_ns)
{
    if (ep->connect_deadline_ns == 0 && deadline_ns != 0)
        ep->worker->connecting++;
    else if (ep->connect_deadline_ns != 0 && deadline_ns == 0)
        ep->worker->connecting--;
    ep->connect_deadline_ns = deadline_ns;
}

void rdmx__ep_fail(rdmx_ep_t *ep, rdmx_status_t status)
{
    if (ep->status != RDMX_OK)
        return;
    ep->status = status;
    ep->fail_ns = rdmx_now_ns();
    if (!ep->user_closed) {
        ep->state = RDMX_EP_FAILED;
        queue_event(ep, RDMX_EPEV_FAILED);
    }
}

/* Fail @ep with @status and a detail message. */
static void fail_with(rdmx_ep_t *ep, rdmx_status_t status, const char *fmt,
                      const char *arg)
{
    char msg[256];

    snprintf(msg, sizeof(msg), fmt, arg);
    if (ep->status == RDMX_OK)
        snprintf(ep->why, sizeof(ep->why), "%.159s", msg);
    rdmx__error(status, "connection to %s: %s", ep->peer, msg);
    rdmx_debug("ep %p (%s): %s", (void *)ep, ep->peer, msg);
    rdmx__ep_fail(ep, status);
}

void rdmx__ep_fail_why(rdmx_ep_t *ep, rdmx_status_t status, const char *what,
                       int timeout_ms)
{
    char msg[96];

    snprintf(msg, sizeof(msg), "%s not complete within %d ms", what,
             timeout_ms);
    fail_with(ep, status, "%s", msg);
}

void rdmx__tp_ep_failed(rdmx_tep_t *tep, rdmx_status_t status,
                        const char *why)
{
    rdmx_ep_t *ep = tep->owner;
    rdmx_status_t st;

    (void)status;
    tep->failed = 1;
    if (ep == NULL)
        return; /* a spare: closed by the next sweep */
    ep->dead = 1;
    if (ep->state == RDMX_EP_CONNECTING || ep->state == RDMX_EP_ACCEPTING)
        st = RDMX_ERR_UNREACHABLE; /* the transport cannot reach the peer */
    else if (ep->peer_closed)
        st = RDMX_ERR_CONN_CLOSED; /* the disconnect that follows a BYE */
    else
        st = RDMX_ERR_CONN_RESET;
    rdmx_debug("ep %p (%s): transport error: %s", (void *)ep, ep->peer, why);
    if (ep->status == RDMX_OK)
        snprintf(ep->why, sizeof(ep->why), "%.159s", why);
    rdmx__error(st, "connection to %s: %s", ep->peer, why);
    rdmx__ep_fail(ep, st);
}

/* --- transport endpoints ------------------------------------------------------ */

/* A transport endpoint toward the worker whose address is @addr. */
static rdmx_status_t tep_create(rdmx_worker_t *w, const void *addr,
                                size_t len, uint64_t peer_worker,
                                rdmx_tep_t **tep_p)
{
    rdmx_status_t st = w->tp->ep_create(w->tw, addr, len, tep_p);

    if (st == RDMX_OK) {
        (*tep_p)->owner = NULL;
        (*tep_p)->peer_worker = peer_worker;
        (*tep_p)->failed = 0;
    }
    return st;
}

/* This side's name for @ep's connection (the key in worker->tokens), and
 * the peer's (what this side's messages carry): the server's is the
 * token, the client's client_token. */
static uint64_t own_token(const rdmx_ep_t *ep)
{
    return ep->accept_cb != NULL ? ep->token : ep->client_token;
}

static uint64_t peer_token(const rdmx_ep_t *ep)
{
    return ep->accept_cb != NULL ? ep->client_token : ep->token;
}

static void ep_take_tep(rdmx_ep_t *ep, rdmx_tep_t *tep)
{
    if (ep->tep != NULL && ep->tep != tep) {
        /* (what the old one still delivers while it closes reaches no
         * one) */
        if (ep->tep->owner == ep)
            ep->tep->owner = NULL;
        ep->tep->tx_token = 0;
    }
    ep->tep = tep;
    ep->transport = RDMX_TRANSPORT_AUTO; /* (the new lanes asked anew) */
    ep->maps_peer = 0;
    if (tep != NULL) {
        tep->owner = ep;
        tep->tx_token = ep->bound ? peer_token(ep) : 0;
    }
}

/* BIND (server) or BIND_ACK (client) done: the transport pair is the
 * connection's, and messages may name their receiver (docs/CORE.md, "Who
 * sent a message"). */
static void ep_bind(rdmx_ep_t *ep)
{
    ep->bound = 1;
    if (ep->tep != NULL)
        ep->tep->tx_token = peer_token(ep);
}

rdmx_tep_t *rdmx__tp_token(rdmx_worker_t *w, uint64_t token)
{
    rdmx_ep_t *ep = w->tok_last_ep;

    if (ep == NULL || token != w->tok_last) {
        ep = token != 0 ? rdmx_ptrmap_get(&w->tokens, (void *)token) : NULL;
        if (ep == NULL || !ep->bound)
            return NULL;
        w->tok_last = token;
        w->tok_last_ep = ep;
    }
    return ep->tep;
}

/* Keep @tep, whose handshake ended, for the next connection from the same
 * worker: the transport may pair that one's endpoint with it. */
static void tep_make_spare(rdmx_worker_t *w, rdmx_tep_t *tep)
{
    tep->owner = NULL;
    tep->tx_token = 0;
    tep->expire_ns = rdmx_now_ns() + RDMX_SPARE_TTL_NS;
    rdmx_list_insert_tail(&w->spares, &tep->link);
}

/* Close a spare, waiting for nothing. */
static void tep_drop(rdmx_worker_t *w, rdmx_tep_t *tep)
{
    void *req = NULL;

    w->tp->ep_close(w->tw, tep, 1, NULL, &req);
}

void rdmx__spares_sweep(rdmx_worker_t *w, uint64_t now, int all)
{
    rdmx_list_t *pos, *tmp;

    rdmx_list_for_each_safe(pos, tmp, &w->spares)
    {
        rdmx_tep_t *tep = rdmx_container_of(pos, rdmx_tep_t, link);
        if (all || tep->failed || now >= tep->expire_ns) {
            rdmx_list_del(&tep->link);
            tep_drop(w, tep);
        }
    }
}

/* --- endpoint records -------------------------------------------------------- */

static rdmx_ep_t *ep_alloc(rdmx_worker_t *w, const rdmx_ep_params_t *params)
{
    rdmx_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return NULL;
    ep->worker = w;
    ep->status = RDMX_OK;
    ep->ctl.fd = -1;
    ep->now_max = SIZE_MAX;
    ep->now_every = 1;
    if (params != NULL)
        ep->params = *params;
    rdmx_list_init(&ep->recvs);
    rdmx_list_init(&ep->unexpected);
    rdmx_list_init(&ep->rmems);
    rdmx_list_init(&ep->inflight);
    rdmx_list_init(&ep->amo_pending);
    rdmx_list_init(&ep->event_link);
    rdmx_list_init(&ep->batch_link);
    rdmx_list_insert_tail(&w->eps, &ep->link);
    return ep;
}

static void ep_free(rdmx_ep_t *ep)
{
    rdmx__batch_free(ep);
    rdmx_list_del(&ep->link);
    rdmx_list_del(&ep->event_link);
    set_deadline(ep, 0);
    if (own_token(ep) != 0 &&
        rdmx_ptrmap_get(&ep->worker->tokens, (void *)own_token(ep)) == ep)
        rdmx_ptrmap_del(&ep->worker->tokens, (void *)own_token(ep));
    if (ep->worker->tok_last_ep == ep)
        ep->worker->tok_last_ep = NULL;
    rdmx__sock_close(&ep->ctl);
    rdmx__secret_free(&ep->secret, &ep->secret_len);
    for (unsigned i = 0; i < 4; i++)
        rdmx_rmem_destroy(ep->pull_keys[i].rm);
    free(ep->flush_tags);
    if (ep->limit != NULL) {
        __atomic_sub_fetch(&ep->limit->now, 1, __ATOMIC_ACQ_REL);
        rdmx__limit_put(ep->limit);
    }
    free(ep);
}

/* Fire-and-forget send of a header that outlives the send. */
static void send_control(rdmx_ep_t *ep, unsigned id, const void *hdr)
{
    if (ep->tep == NULL)
        return;
    rdmx__batch_send(ep); /* a BYE says everything before it was sent */
    ep->worker->tp->send(ep->tep, id, hdr, RDMX_BIND_SIZE, NULL, 0, NULL, 0,
                         NULL, NULL);
}

void rdmx__tp_closed(void *arg)
{
    rdmx_closer_t *closer = arg;

    if (closer->ep != NULL) {
        closer->ep->closer = NULL;
        closer->ep->worker->tp->req_forget(closer->req);
    } /* else: forgotten when the endpoint gave up on it */
    free(closer);
}

/* Close the transport endpoint: orderly (flush) when healthy, forced
 * otherwise. Descriptors' remote keys go first. A server endpoint whose
 * handshake never completed keeps its transport endpoint as a spare
 * (Pairing). */
static void tp_close(rdmx_ep_t *ep, int force)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_tep_t *tep = ep->tep;
    rdmx_closer_t *closer;
    rdmx_status_t st;
    void *req = NULL;

    rdmx__rmem_detach_all(ep);
    if (tep == NULL)
        return;
    ep_take_tep(ep, NULL);
    if (!ep->bound && ep->accept_cb != NULL && !tep->failed &&
        ep->token != 0) {
        tep_make_spare(w, tep);
        return;
    }
    closer = malloc(sizeof(*closer));
    if (closer != NULL)
        closer->ep = ep;
    rdmx_debug("ep %p (%s): transport close, %s", (void *)ep, ep->peer,
               force ? "forced" : "flush");
    st = w->tp->ep_close(w->tw, tep, force, closer, &req);
    if (st == RDMX_INPROGRESS && closer != NULL) {
        closer->req = req;
        ep->closer = closer;
        ep->close_deadline_ns = rdmx_now_ns() + RDMX_CLOSE_TIMEOUT_NS;
    } else {
        free(closer);
    }
}

/* Stop waiting for @ep's transport close: the request finishes on its
 * own, without the endpoint. */
static void closer_forget(rdmx_ep_t *ep)
{
    rdmx_closer_t *closer = ep->closer;

    closer->ep = NULL;
    ep->worker->tp->req_forget(closer->req);
    ep->closer = NULL;
}

/* Tear down a failed endpoint's transport side, once. */
static void tear_down(rdmx_ep_t *ep)
{
    if (ep->torn_down)
        return;
    ep->torn_down = 1;
    set_deadline(ep, 0);
    rdmx__msg_purge(ep, ep->status);
    tp_close(ep, 1);
    /* Requests the forced close did not complete (a rendezvous send whose
     * receiver died, on shared memory) complete now, with the error; so do
     * atomics waiting for a reply. */
    rdmx__op_orphan_all(ep);
    rdmx__amo_fail_all(ep);
}

/* Handle one endpoint's queued events. Returns 1 if it stays queued. */
static int handle_events(rdmx_ep_t *ep)
{
    rdmx_worker_t *w = ep->worker;
    unsigned ev = ep->events;

    if (!ep->user_closed && ep->status == RDMX_OK &&
        (ev & (RDMX_EPEV_CONNECTED | RDMX_EPEV_ACCEPTED))) {
        ep->events &= ~(RDMX_EPEV_CONNECTED | RDMX_EPEV_ACCEPTED);
        ep->reported = 1;
        if ((ev & RDMX_EPEV_CONNECTED) && ep->connect_cb)
            ep->connect_cb(ep, RDMX_OK, ep->connect_arg);
        if (ev & RDMX_EPEV_ACCEPTED)
            ep->accept_cb(ep, ep->accept_arg);
    }
    if (ep->user_closed) {
        ep->events = 0;
        return 0;
    }
    if (ep->status == RDMX_OK && (ep->events & RDMX_EPEV_PEER_CLOSED)) {
        /* Rendezvous receives of messages sent before the BYE finish. */
        if (!rdmx_list_empty(&ep->inflight))
            return 1;
        rdmx__error(RDMX_ERR_CONN_CLOSED, "%s closed the connection",
                    ep->peer);
        rdmx__ep_fail(ep, RDMX_ERR_CONN_CLOSED);
        rdmx_list_del(&ep->event_link); /* handled right here */
    }
    if (ep->status == RDMX_OK) {
        ep->events = 0;
        return 0;
    }

    /* Failed. */
    tear_down(ep);
    if (!ep->reported) {
        ep->events = 0;
        if (ep->accept_cb != NULL) {
            /* The user never saw this endpoint: free it quietly. */
            w->stats.handshakes_failed++;
            rdmx_ep_close(ep);
        } else if (!ep->error_done) {
            ep->error_done = 1;
            if (ep->connect_cb)
                ep->connect_cb(ep, ep->status, ep->connect_arg);
        }
        return 0;
    }
    /* Report after the endpoint's operations completed with their errors
     * (they complete at the next progress at the latest). */
    if (ep->ops > 0 &&
        rdmx_since(rdmx_now_ns(), ep->fail_ns) < RDMX_REPORT_MAX_NS)
        return 1;
    ep->events = 0;
    if (!ep->error_done) {
        ep->error_done = 1;
        if (ep->status != RDMX_ERR_CONN_CLOSED) /* (an orderly close) */
            w->stats.eps_failed++;
        if (ep->params.error_cb)
            ep->params.error_cb(ep, ep->status, ep->params.user_data);
    }
    return 0;
}

unsigned rdmx__ep_progress(rdmx_worker_t *w)
{
    unsigned n = 0;
    rdmx_list_t *pos, *tmp, again;

    if (w->connecting > 0) {
        uint64_t now = rdmx_now_ns();
        rdmx_list_for_each_safe(pos, tmp, &w->eps)
        {
            rdmx_ep_t *ep = rdmx_container_of(pos, rdmx_ep_t, link);
            if (ep->connect_deadline_ns != 0 &&
                now >= ep->connect_deadline_ns) {
                set_deadline(ep, 0);
                if (ep->peer_closed) {
                    rdmx__ep_fail(ep, RDMX_ERR_CONN_CLOSED);
                    continue;
                }
                /* (which step: a WELCOME over the socket, or the
                 * BIND_ACK that proves the transport path) */
                fail_with(ep, RDMX_ERR_TIMEOUT, "%s",
                          ep->accept_cb != NULL ? "handshake timed out"
                          : ep->tep == NULL
                              ? "timed out waiting for the server's WELCOME"
                              : "timed out waiting for the server's "
                                "BIND_ACK over the transport");
            }
        }
    }

    rdmx_list_init(&again);
    while (!rdmx_list_empty(&w->ep_events)) {
        rdmx_list_t *e = rdmx_list_pop(&w->ep_events);
        rdmx_ep_t *ep = rdmx_container_of(e, rdmx_ep_t, event_link);
        n++;
        if (handle_events(ep) && rdmx_list_empty(&ep->event_link))
            rdmx_list_insert_tail(&again, &ep->event_link);
    }
    while (!rdmx_list_empty(&again)) {
        rdmx_list_t *e = rdmx_list_pop(&again);
        rdmx_list_insert_tail(&w->ep_events, e);
    }

    if (!rdmx_list_empty(&w->closing)) {
        uint64_t now = rdmx_now_ns();
        rdmx_list_for_each_safe(pos, tmp, &w->closing)
        {
            rdmx_ep_t *ep = rdmx_container_of(pos, rdmx_ep_t, link);
            if (ep->tep != NULL) {
                /* BYE sent: close once the peer has acknowledged it and
                 * our own operations are done. Forced: after the BYE_ACK
                 * nothing is left to flush but what rdmx_ep_flush
                 * covers. */
                if (!(ep->bye_acked && rdmx_list_empty(&ep->inflight)) &&
                    !ep->dead && now < ep->close_deadline_ns)
                    continue;
                tp_close(ep, 1);
                n++;
            }
            if (ep->closer != NULL && now >= ep->close_deadline_ns) {
                /* A flush close can hang on a stopped peer (UCX_NOTES 8):
                 * the request finishes on its own, without the endpoint. */
                rdmx_debug("ep %p (%s): close timed out", (void *)ep,
                           ep->peer);
                closer_forget(ep);
            }
            if (ep->closer != NULL)
                continue;
            rdmx__op_orphan_all(ep);
            rdmx__amo_fail_all(ep);
            if (ep->ops == 0) {
                ep_free(ep);
                n++;
            }
        }
    }
    return n;
}

void rdmx__ep_release(rdmx_ep_t *ep)
{
    ep->ops--;
}

/* --- the control socket ----------------------------------------------------- */

/* The client's name for @ep's connection: random, never 0, not in use at
 * its worker. */
static rdmx_status_t name_ep(rdmx_ep_t *ep)
{
    rdmx_worker_t *w = ep->worker;
    uint64_t t;

    do {
        if (getrandom(&t, sizeof(t), 0) != (ssize_t)sizeof(t))
            return rdmx__error(RDMX_ERR_NO_RESOURCE, "getrandom: %s",
                               strerror(errno));
        t |= 1; /* never 0 */
    } while (rdmx_ptrmap_get(&w->tokens, (void *)t) != NULL);
    if (rdmx_ptrmap_put(&w->tokens, (void *)t, ep) != 0)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "connect: out of memory");
    ep->client_token = t;
    return RDMX_OK;
}

/* The BIND of a client endpoint, over its new UCX endpoint: the server's
 * token, and the client's own name for the connection. */
static void send_bind(rdmx_ep_t *ep)
{
    rdmx_put_le32(ep->bind_hdr, RDMX_WIRE_MAGIC);
    rdmx_put_le32(ep->bind_hdr + 4, 0);
    rdmx_put_le64(ep->bind_hdr + 8, ep->token);
    rdmx_put_le64(ep->bind_hdr + 16, ep->client_token);
    send_control(ep, RDMX_AM_BIND, ep->bind_hdr);
}

/* Client: the server wants proof of the secret before anything else. */
static void answer_challenge(rdmx_ep_t *ep, const rdmx_bs_msg_t *c)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_bs_msg_t hello = {.worker_id = w->id,
                           .addr = w->addr,
                           .addr_len = w->addr_len};
    rdmx_bs_msg_t a;

    if (ep->secret == NULL) {
        fail_with(ep, RDMX_ERR_DENIED, "%s",
                  "the server requires authentication; no secret given");
        return;
    }
    ep->challenged = 1;
    memcpy(ep->snonce, c->nonce, RDMX_NONCE_SIZE);
    memcpy(hello.nonce, ep->nonce, RDMX_NONCE_SIZE);
    memset(&a, 0, sizeof(a));
    if (rdmx__bs_client_proof(ep->secret, ep->secret_len, ep->snonce, &hello,
                              a.proof) != RDMX_OK ||
        rdmx__sock_send(&ep->ctl, RDMX_BS_AUTH, &a) != RDMX_OK)
        fail_with(ep, RDMX_ERR_CONN_REFUSED, "%s", rdmx_error_detail());
}

/* Client: the server's WELCOME (or CHALLENGE, or REFUSE) arrived. */
static void client_on_frame(rdmx_ep_t *ep, unsigned type,
                            const unsigned char *body, size_t len)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_bs_msg_t m;
    rdmx_tep_t *tep;
    rdmx_status_t st;

    if (ep->tep != NULL) {
        w->stats.proto_errors++; /* nothing is expected after WELCOME */
        return;
    }
    st = rdmx__bs_decode(type, body, len, &m);
    if (st != RDMX_OK) {
        w->stats.proto_errors++;
        fail_with(ep, RDMX_ERR_PROTO, "%s", rdmx_error_detail());
        return;
    }
    if (type == RDMX_BS_REFUSE) {
        fail_with(ep, m.status, "refused: %s", m.message);
        return;
    }
    if (type == RDMX_BS_CHALLENGE && !ep->challenged) {
        answer_challenge(ep, &m);
        return;
    }
    if (type != RDMX_BS_WELCOME) {
        w->stats.proto_errors++;
        fail_with(ep, RDMX_ERR_PROTO, "%s", "expected WELCOME");
        return;
    }
    if (ep->secret != NULL) {
        unsigned char want[RDMX_MAC_SIZE];
        if (!ep->challenged || !(m.flags & RDMX_BS_F_PROOF) ||
            rdmx__bs_server_proof(ep->secret, ep->secret_len, ep->nonce,
                                  ep->snonce, &m, want) != RDMX_OK ||
            !rdmx__mac_equal(want, m.proof)) {
            fail_with(ep, RDMX_ERR_DENIED, "%s",
                      "the server did not prove it knows the secret");
            return;
        }
        rdmx__secret_free(&ep->secret, &ep->secret_len);
    }
    ep->token = m.token;
    ep->peer_worker = m.worker_id;
    if ((st = name_ep(ep)) != RDMX_OK) {
        fail_with(ep, st, "%s", rdmx_error_detail());
        return;
    }
    st = tep_create(w, m.addr, m.addr_len, m.worker_id, &tep);
    if (st != RDMX_OK) {
        fail_with(ep, st, "%s", rdmx_error_detail());
        return;
    }
    ep_take_tep(ep, tep);
    if (m.worker_id == w->id) {
        /* Connected to this very worker: make the server side's UCX
         * endpoint right after this one, so UCX pairs the two. */
        rdmx_ep_t *srv = rdmx_ptrmap_get(&w->tokens, (void *)m.token);
        if (srv != NULL && srv->tep == NULL &&
            tep_create(w, w->addr, w->addr_len, w->id, &tep) == RDMX_OK)
            ep_take_tep(srv, tep);
    }
    send_bind(ep);
}

/* Events of an endpoint's TCP socket: the client's handshake, then, on
 * both sides, the end of the peer process. */
static void on_ctl_event(rdmx_sock_t *s, uint32_t events)
{
    rdmx_ep_t *ep = rdmx_container_of(s, rdmx_ep_t, ctl);
    rdmx_worker_t *w = ep->worker;
    const unsigned char *body;
    unsigned type;
    size_t len;
    int rc;

    if (ep->accept_cb == NULL && !ep->tcp_connected) {
        int err = 0;
        socklen_t elen = sizeof(err);
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
            err = errno;
        if (err != 0) {
            rdmx__sock_close(s);
            fail_with(ep,
                      err == ECONNREFUSED ? RDMX_ERR_CONN_REFUSED
                                          : RDMX_ERR_UNREACHABLE,
                      "%s", strerror(err));
            return;
        }
        ep->tcp_connected = 1;
        rdmx__sock_set_events(s, EPOLLIN | EPOLLRDHUP);
        {
            rdmx_bs_msg_t m = {.version = RDMX_WIRE_VERSION,
                               .worker_id = w->id,
                               .addr = w->addr,
                               .addr_len = w->addr_len};
            rdmx_status_t st;
            memcpy(m.nonce, ep->nonce, RDMX_NONCE_SIZE);
            st = rdmx__sock_send(s, RDMX_BS_HELLO, &m);
            if (st != RDMX_OK) {
                rdmx__sock_close(s);
                fail_with(ep, RDMX_ERR_CONN_REFUSED, "%s",
                          rdmx_error_detail());
                return;
            }
        }
    }
    /* (a send error shows again in the read below, as the connection's
     * end) */
    if (events & EPOLLOUT)
        (void)rdmx__sock_flush(s);
    while ((rc = rdmx__sock_read_frame(s, &type, &body, &len)) > 0) {
        if (ep->accept_cb == NULL && ep->state == RDMX_EP_CONNECTING &&
            ep->status == RDMX_OK)
            client_on_frame(ep, type, body, len);
        else
            w->stats.proto_errors++; /* no control messages defined yet */
        rdmx__sock_consume(s);
        if (s->fd < 0 || ep->status != RDMX_OK)
            return; /* (refused: what follows is only the socket's end) */
    }
    if (rc == 0)
        return;
    /* The connection ended: the peer process is gone, or it closed. */
    rdmx__sock_close(s);
    if (ep->status != RDMX_OK || ep->user_closed)
        return;
    if (ep->peer_closed)
        return; /* its BYE came first: an orderly close */
    if (rc == RDMX_ERR_PROTO) {
        w->stats.proto_errors++;
        fail_with(ep, RDMX_ERR_PROTO, "%s", "garbage on the control socket");
    } else if (ep->state == RDMX_EP_CONNECTING) {
        fail_with(ep, RDMX_ERR_CONN_REFUSED, "%s",
                  "the server closed the connection during the handshake");
    } else if (ep->state == RDMX_EP_ACCEPTING) {
        fail_with(ep, RDMX_ERR_CONN_RESET, "%s",
                  "the client left during the handshake");
    } else {
        fail_with(ep, RDMX_ERR_CONN_RESET, "%s",
                  "the peer's control connection closed (process gone)");
    }
}

/* --- connect --------------------------------------------------------------- */

static rdmx_status_t resolve(const char *address, struct sockaddr_storage *ss,
                             socklen_t *len_p)
{
    char host[256];
    char port_str[8];
    uint16_t port;
    struct addrinfo hints = {0}, *res;
    rdmx_status_t st;
    int rc;

    st = rdmx_addr_parse(address, host, sizeof(host), &port);
    if (st != RDMX_OK)
        return st;
    if (port == 0)
        return rdmx__error(RDMX_ERR_INVALID, "connect to '%s': port 0",
                           address);
    snprintf(port_str, sizeof(port_str), "%u", port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, port_str, &hints, &res);
    if (rc != 0)
        return rdmx__error(RDMX_ERR_UNREACHABLE, "resolve '%s': %s", host,
                           gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len_p = res->ai_addrlen;
    freeaddrinfo(res);
    return RDMX_OK;
}

static rdmx_status_t connect_start(rdmx_worker_t *w, const char *address,
                                   const rdmx_ep_params_t *params,
                                   rdmx_connect_cb_t cb, void *arg,
                                   rdmx_ep_t **ep_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    rdmx_status_t st;
    rdmx_ep_t *ep;
    int fd, one = 1, rc, err;

    if (w == NULL || address == NULL || ep_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "connect: NULL argument");
    st = resolve(address, &ss, &sslen);
    if (st != RDMX_OK)
        return st;
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rdmx__error(RDMX_ERR_NO_RESOURCE, "connect to %s: socket: %s",
                           address, strerror(errno));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    rc = connect(fd, (struct sockaddr *)&ss, sslen);
    err = rc == 0 ? 0 : errno;

    rdmx__lock(w);
    ep = ep_alloc(w, params);
    if (ep == NULL) {
        rdmx__unlock(w);
        close(fd);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "connect: out of memory");
    }
    if (params != NULL &&
        (params->field_mask & RDMX_EP_PARAM_FIELD_AUTH_SECRET))
        st = rdmx__secret_copy(params->auth_secret, params->auth_secret_len,
                               &ep->secret, &ep->secret_len);
    if (st != RDMX_OK || (st = rdmx__random(ep->nonce, RDMX_NONCE_SIZE)) !=
                             RDMX_OK) {
        ep_free(ep);
        rdmx__unlock(w);
        close(fd);
        return st;
    }
    ep->params.auth_secret = NULL; /* (the copy above is what counts) */
    ep->params.auth_secret_len = 0;
    snprintf(ep->peer, sizeof(ep->peer), "%s", address);
    ep->state = RDMX_EP_CONNECTING;
    ep->connect_cb = cb;
    ep->connect_arg = arg;
    if (params != NULL &&
        (params->field_mask & RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT) &&
        params->connect_timeout_ms >= 0)
        set_deadline(ep, rdmx_now_ns() +
                             (uint64_t)params->connect_timeout_ms * 1000000ull);
    if (err != 0 && err != EINPROGRESS) {
        /* Refused at once (loopback): the callback says so, as always. */
        close(fd);
        fail_with(ep,
                  err == ECONNREFUSED ? RDMX_ERR_CONN_REFUSED
                                      : RDMX_ERR_UNREACHABLE,
                  "%s", strerror(err));
    } else if (rdmx__sock_attach(w, &ep->ctl, fd,
                                 EPOLLOUT | EPOLLIN | EPOLLRDHUP,
                                 on_ctl_event) != RDMX_OK) {
        close(fd);
        ep->ctl.fd = -1;
        fail_with(ep, RDMX_ERR_NO_RESOURCE, "%s", rdmx_error_detail());
    }
    *ep_p = ep;
    rdmx__unlock(w);
    return RDMX_INPROGRESS;
}

typedef struct {
    volatile int done;
    rdmx_status_t status;
} connect_wait_t;

static void connect_waited(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    connect_wait_t *cw = arg;
    cw->status = status;
    cw->done = 1;
    if (ep->worker->mt)
        pthread_cond_broadcast(&ep->worker->cond);
}

rdmx_status_t rdmx_connect_nb(rdmx_worker_t *w, const char *address,
                              const rdmx_ep_params_t *params,
                              rdmx_ep_t **ep_p)
{
    if (params == NULL ||
        !(params->field_mask & RDMX_EP_PARAM_FIELD_CONNECT_CB) ||
        params->connect_cb == NULL)
        return rdmx__error(RDMX_ERR_INVALID,
                           "connect_nb: params->connect_cb is required (set "
                           "RDMX_EP_PARAM_FIELD_CONNECT_CB)");
    return connect_start(
        w, address, params, params->connect_cb,
        (params->field_mask & RDMX_EP_PARAM_FIELD_USER_DATA) ? params->user_data
                                                             : NULL,
        ep_p);
}

rdmx_status_t rdmx_connect(rdmx_worker_t *w, const char *address,
                           const rdmx_ep_params_t *params, rdmx_ep_t **ep_p)
{
    connect_wait_t cw = {0, RDMX_OK};
    char detail[256];
    rdmx_ep_t *ep;
    rdmx_status_t st;

    if (ep_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "connect: NULL argument");
    *ep_p = NULL;
    if (params != NULL && (params->field_mask & RDMX_EP_PARAM_FIELD_CONNECT_CB))
        return rdmx__error(RDMX_ERR_INVALID,
                           "connect: params->connect_cb is for connect_nb");
    st = connect_start(w, address, params, connect_waited, &cw, &ep);
    if (st != RDMX_INPROGRESS)
        return st;
    rdmx__wait_until(w, &cw.done);
    /* connect_start returned RDMX_INPROGRESS, so ep is set; the analyzer
     * cannot tell, as it cannot see that a status from another file
     * (resolve's) is never RDMX_INPROGRESS. */
    /* NOLINTBEGIN(clang-analyzer-core.NullDereference) */
    /* NOLINTBEGIN(clang-analyzer-core.uninitialized.Assign) */
    if (cw.status != RDMX_OK) {
        /* (the detail of the thread that saw the failure, which may be the
         * worker's progress thread) */
        snprintf(detail, sizeof(detail), "connection to %s: %s", ep->peer,
                 ep->why[0] ? ep->why : rdmx_strerror(cw.status));
        rdmx_ep_close(ep);
        return rdmx__error(cw.status, "%s", detail);
    }
    *ep_p = ep;
    /* NOLINTEND(clang-analyzer-core.uninitialized.Assign) */
    /* NOLINTEND(clang-analyzer-core.NullDereference) */
    return RDMX_OK;
}

/* --- accept ------------------------------------------------------------------ */

void rdmx__ep_accept(rdmx_worker_t *w, rdmx_conn_req_t *cr)
{
    rdmx_bs_msg_t m = {.version = RDMX_WIRE_VERSION, .worker_id = w->id,
                       .addr = w->addr, .addr_len = w->addr_len};
    rdmx_tep_t *tep;
    rdmx_status_t st;
    rdmx_ep_t *ep;
    int fd = cr->sock.fd;

    ep = ep_alloc(w, &cr->ep_params);
    if (ep == NULL || getrandom(&ep->token, sizeof(ep->token), 0) !=
                          (ssize_t)sizeof(ep->token)) {
        if (ep != NULL)
            ep_free(ep);
        rdmx__conn_req_reject(cr, RDMX_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    ep->token |= 1; /* never 0 */
    ep->state = RDMX_EP_ACCEPTING;
    ep->accept_cb = cr->accept_cb;
    ep->accept_arg = cr->accept_arg;
    ep->peer_worker = cr->peer_worker;
    ep->limit = cr->limit; /* its count and reference move here */
    snprintf(ep->peer, sizeof(ep->peer), "%s", cr->peer);
    cr->sock.fd = -1;
    if (rdmx__sock_attach(w, &ep->ctl, fd, EPOLLIN | EPOLLRDHUP,
                          on_ctl_event) != RDMX_OK) {
        close(fd);
        ep->ctl.fd = -1;
        goto fail;
    }
    if (rdmx_ptrmap_put(&w->tokens, (void *)ep->token, ep) != 0)
        goto fail;
    if (cr->peer_worker != w->id) {
        /* (a connection from this very worker makes both UCX endpoints
         * when the WELCOME arrives: client_on_frame) */
        st = tep_create(w, cr->peer_addr, cr->peer_addr_len, cr->peer_worker,
                        &tep);
        if (st != RDMX_OK) {
            rdmx_bs_msg_t r = {.status = st};
            snprintf(r.message, sizeof(r.message), "your transport address: %s",
                     rdmx_error_detail());
            rdmx__sock_send(&ep->ctl, RDMX_BS_REFUSE, &r);
            goto fail;
        }
        ep_take_tep(ep, tep);
    }
    m.token = ep->token;
    if (cr->secret != NULL) {
        m.flags |= RDMX_BS_F_PROOF;
        if (rdmx__bs_server_proof(cr->secret, cr->secret_len, cr->cnonce,
                                  cr->snonce, &m, m.proof) != RDMX_OK)
            goto fail;
    }
    if (rdmx__sock_send(&ep->ctl, RDMX_BS_WELCOME, &m) != RDMX_OK)
        goto fail;
    /* A peer that never says BIND is dropped. */
    set_deadline(ep, rdmx_now_ns() + RDMX_ACCEPT_TIMEOUT_NS);
    rdmx__conn_req_free(cr);
    return;

fail:
    w->stats.handshakes_failed++;
    rdmx__ep_fail(ep, RDMX_ERR_UNREACHABLE);
    rdmx__conn_req_free(cr);
}

/* --- BIND over the transport ---------------------------------------------------- */

rdmx_status_t rdmx__am_bind(rdmx_worker_t *w, rdmx_tep_t *tep,
                            const void *header, size_t hlen, void *data,
                            size_t len, unsigned flags)
{
    const unsigned char *h = header;
    rdmx_tep_t *mine;
    rdmx_ep_t *ep, *other;

    (void)data;
    (void)flags;
    if (tep == NULL || hlen != RDMX_BIND_SIZE || len != 0 ||
        rdmx_get_le32(h) != RDMX_WIRE_MAGIC || rdmx_get_le64(h + 16) == 0) {
        w->stats.proto_errors++;
        return RDMX_OK;
    }
    ep = rdmx_ptrmap_get(&w->tokens, (void *)rdmx_get_le64(h + 8));
    if (ep == NULL || ep->state != RDMX_EP_ACCEPTING || ep->status != RDMX_OK ||
        tep->peer_worker != ep->peer_worker ||
        (tep->owner != NULL && tep->owner->bound)) {
        w->stats.proto_errors++;
        return RDMX_OK;
    }
    other = tep->owner;
    if (other != ep) {
        /* The transport paired the client's endpoint with another of ours
         * toward the same worker: trade (Pairing, above). */
        mine = ep->tep;
        if (other != NULL) {
            ep_take_tep(other, mine);
        } else {
            rdmx_list_del(&tep->link); /* a spare */
            if (mine != NULL)
                tep_make_spare(w, mine);
        }
        ep_take_tep(ep, tep);
    }
    /* (the token stays in w->tokens: the client's messages name it) */
    ep->client_token = rdmx_get_le64(h + 16);
    ep_bind(ep);
    send_control(ep, RDMX_AM_BIND_ACK, ack_ok_hdr);
    set_deadline(ep, 0);
    ep->state = RDMX_EP_CONNECTED;
    w->stats.eps_opened++;
    queue_event(ep, RDMX_EPEV_ACCEPTED);
    return RDMX_OK;
}

rdmx_status_t rdmx__am_bind_ack(rdmx_worker_t *w, rdmx_tep_t *tep,
                                const void *header, size_t hlen, void *data,
                                size_t len, unsigned flags)
{
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;
    const unsigned char *h = header;

    (void)data;
    (void)flags;
    if (ep == NULL || ep->state != RDMX_EP_CONNECTING ||
        ep->accept_cb != NULL || ep->status != RDMX_OK) {
        w->stats.proto_errors++;
        return RDMX_OK;
    }
    if (hlen != RDMX_BIND_SIZE || len != 0 ||
        rdmx_get_le32(h) != RDMX_WIRE_MAGIC) {
        w->stats.proto_errors++;
        fail_with(ep, RDMX_ERR_PROTO, "%s", "malformed BIND_ACK");
        return RDMX_OK;
    }
    ep_bind(ep);
    set_deadline(ep, 0);
    ep->state = RDMX_EP_CONNECTED;
    w->stats.eps_opened++;
    queue_event(ep, RDMX_EPEV_CONNECTED);
    return RDMX_OK;
}

/* The peer closes in order: everything it sent arrived before its BYE (one
 * lane, in order). Acknowledge; end the connection (RDMX_ERR_CONN_CLOSED)
 * once rendezvous receives still moving data are done, or after a bound. */
rdmx_status_t rdmx__am_bye(rdmx_worker_t *w, rdmx_tep_t *tep,
                           const void *header, size_t hlen, void *data,
                           size_t len, unsigned flags)
{
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;

    (void)header;
    (void)hlen;
    (void)data;
    (void)len;
    (void)flags;
    if (ep == NULL) {
        w->stats.proto_errors++;
        return RDMX_OK;
    }
    send_control(ep, RDMX_AM_BYE_ACK, bye_hdr);
    if (!ep->peer_closed && ep->status == RDMX_OK) {
        ep->peer_closed = 1;
        set_deadline(ep, rdmx_now_ns() + RDMX_CLOSE_TIMEOUT_NS);
        queue_event(ep, RDMX_EPEV_PEER_CLOSED);
    }
    return RDMX_OK;
}

rdmx_status_t rdmx__am_bye_ack(rdmx_worker_t *w, rdmx_tep_t *tep,
                               const void *header, size_t hlen, void *data,
                               size_t len, unsigned flags)
{
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;

    (void)w;
    (void)header;
    (void)hlen;
    (void)data;
    (void)len;
    (void)flags;
    if (ep != NULL)
        ep->bye_acked = 1;
    return RDMX_OK;
}

/* --- close ------------------------------------------------------------------- */

void rdmx_ep_close(rdmx_ep_t *ep)
{
    rdmx_worker_t *w;
    int healthy;

    if (ep == NULL || ep->user_closed)
        return;
    w = ep->worker;
    rdmx__lock(w);
    rdmx__batch_send(ep); /* what was sent before the close leaves first */
    healthy = ep->status == RDMX_OK && ep->state == RDMX_EP_CONNECTED &&
              !ep->aborted;
    ep->user_closed = 1;
    ep->state = RDMX_EP_CLOSING;
    if (ep->status == RDMX_OK)
        ep->status = RDMX_ERR_CANCELED;
    set_deadline(ep, 0);
    rdmx_list_del(&ep->event_link);
    ep->events = 0;
    rdmx_list_del(&ep->link);
    rdmx_list_insert_tail(&w->closing, &ep->link);
    rdmx__msg_purge(ep, RDMX_ERR_CANCELED);
    rdmx__rmem_detach_all(ep);
    if (healthy && !ep->peer_closed && ep->tep != NULL) {
        /* BYE, then close when the peer acknowledged it (progress does). */
        send_control(ep, RDMX_AM_BYE, bye_hdr);
        ep->bye_sent = 1;
        ep->close_deadline_ns = rdmx_now_ns() + RDMX_CLOSE_TIMEOUT_NS;
    } else {
        tp_close(ep, !healthy || ep->dead);
    }
    rdmx__unlock(w);
}

void rdmx__ep_abort(rdmx_ep_t *ep)
{
    if (ep == NULL || ep->user_closed)
        return;
    rdmx__lock(ep->worker);
    /* The peer's kernel reports the socket's end at once, even to a
     * stopped process; then no BYE: the transport is closed by force. */
    rdmx__sock_close(&ep->ctl);
    ep->aborted = 1;
    rdmx__unlock(ep->worker);
    rdmx_ep_close(ep);
}

void rdmx__ep_destroy_all(rdmx_worker_t *w)
{
    rdmx_list_t *pos;
    uint64_t deadline;

    while (!rdmx_list_empty(&w->eps))
        rdmx_ep_close(rdmx_container_of(w->eps.next, rdmx_ep_t, link));
    /* (after the closes: a BYE's own deadline is as long) */
    deadline = rdmx_now_ns() + RDMX_CLOSE_TIMEOUT_NS;
    while (!rdmx_list_empty(&w->closing) && rdmx_now_ns() < deadline)
        rdmx_worker_progress(w);
    if (rdmx_list_empty(&w->closing))
        return;
    /* A peer that never acknowledged the BYE (stopped, or gone without a
     * word) still holds the transport endpoint: closed by force here (a
     * spare is dropped with the others), not leaked with the record. The
     * operations still in flight to it complete now, with the close's
     * error (core.h): orphaned as for a failed endpoint, so that the
     * transport's late completions find no endpoint, and their stand-ins'
     * callbacks run in the passes below, which then free the endpoints. */
    rdmx_list_for_each(pos, &w->closing)
    {
        rdmx_ep_t *ep = rdmx_container_of(pos, rdmx_ep_t, link);
        if (ep->tep != NULL)
            tp_close(ep, 1);
        if (ep->closer != NULL)
            closer_forget(ep);
        if (ep->status == RDMX_OK)
            ep->status = RDMX_ERR_CANCELED;
        rdmx__op_orphan_all(ep);
        rdmx__amo_fail_all(ep);
    }
    for (int pass = 0; pass < 8 && !rdmx_list_empty(&w->closing); pass++)
        rdmx_worker_progress(w);
    while (!rdmx_list_empty(&w->closing)) {
        rdmx_ep_t *ep = rdmx_container_of(w->closing.next, rdmx_ep_t, link);
        rdmx_warn("ep %p (%s): freed with %u references outstanding",
                  (void *)ep, ep->peer, ep->ops);
        ep_free(ep);
    }
}

/* --- accessors ----------------------------------------------------------------- */

void *rdmx_ep_user_data(const rdmx_ep_t *ep)
{
    return ep->params.user_data;
}

rdmx_status_t rdmx_ep_set_params(rdmx_ep_t *ep, const rdmx_ep_params_t *params)
{
    if (ep == NULL || params == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "ep_set_params: NULL argument");
    rdmx__lock(ep->worker);
    if (params->field_mask & RDMX_EP_PARAM_FIELD_ERROR_CB)
        ep->params.error_cb = params->error_cb;
    if (params->field_mask & RDMX_EP_PARAM_FIELD_NOTIFY_CB)
        ep->params.notify_cb = params->notify_cb;
    if (params->field_mask & RDMX_EP_PARAM_FIELD_USER_DATA)
        ep->params.user_data = params->user_data;
    ep->params.field_mask |= params->field_mask;
    rdmx__unlock(ep->worker);
    return RDMX_OK;
}

rdmx_worker_t *rdmx_ep_worker(const rdmx_ep_t *ep)
{
    return ep->worker;
}

rdmx_transport_t rdmx__ep_transport(rdmx_ep_t *ep)
{
    if (ep->state != RDMX_EP_CONNECTED)
        return RDMX_TRANSPORT_AUTO;
    if (ep->transport == RDMX_TRANSPORT_AUTO && ep->tep != NULL &&
        ep->worker->tp->ep_transport != NULL)
        ep->transport = ep->worker->tp->ep_transport(ep->tep); /* (kept:
                                     a connected endpoint keeps its lanes) */
    return ep->transport;
}

rdmx_transport_t rdmx_ep_transport(const rdmx_ep_t *ep)
{
    rdmx_transport_t t;

    if (ep == NULL)
        return RDMX_TRANSPORT_AUTO;
    rdmx__lock(ep->worker);
    t = rdmx__ep_transport((rdmx_ep_t *)ep);
    rdmx__unlock(ep->worker);
    return t;
}

rdmx_status_t rdmx_ep_status(const rdmx_ep_t *ep)
{
    return ep->status;
}

void *rdmx__ep_upper(const rdmx_ep_t *ep)
{
    return ep->upper;
}

void rdmx__ep_set_upper(rdmx_ep_t *ep, void *upper)
{
    ep->upper = upper;
}

const char *rdmx__ep_peer(const rdmx_ep_t *ep)
{
    return ep->peer;
}

int rdmx__ep_peer_alive(rdmx_ep_t *ep)
{
    char b;
    ssize_t n;

    if (ep == NULL || ep->status != RDMX_OK || ep->peer_closed)
        return 0;
    if (ep->ctl.fd < 0)
        return 1; /* (no control socket: the transport's word only) */
    n = recv(ep->ctl.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                   errno != EINTR))
        return 0; /* (the worker fails the endpoint when it looks) */
    return 1;
}

const char *rdmx__ep_why(const rdmx_ep_t *ep)
{
    return ep->why;
}

int rdmx__ep_adopt(rdmx_ep_t *ep, rdmx_accept_cb_t accept_cb, void **arg_p)
{
    if (ep->accept_cb != accept_cb || ep->state != RDMX_EP_CONNECTED ||
        ep->reported)
        return 0;
    /* From now on a failure reaches the endpoint's error_cb (core would
     * otherwise free an endpoint whose accept callback has not run yet
     * quietly); the accept event finds it taken. */
    ep->reported = 1;
    *arg_p = ep->accept_arg;
    return 1;
}

rdmx_status_t rdmx_ep_peer_address(const rdmx_ep_t *ep, char *buf,
                                   size_t size)
{
    if (buf == NULL || size == 0)
        return rdmx__error(RDMX_ERR_INVALID, "peer_address: no buffer");
    if (strlen(ep->peer) >= size)
        return rdmx__error(RDMX_ERR_TOO_BIG, "peer_address: needs %zu bytes",
                           strlen(ep->peer) + 1);
    memcpy(buf, ep->peer, strlen(ep->peer) + 1);
    return RDMX_OK;
}
