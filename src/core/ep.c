/*
 * Endpoints: connect, accept, the HELLO handshake, failure and close.
 *
 * Life of an endpoint:
 *   client: rdmx_connect_nb -> CONNECTING -(HELLO_ACK)-> CONNECTED
 *   server: conn request -> ACCEPTING -(HELLO)-> CONNECTED (accept_cb)
 *   any:    -(peer failed / BYE / deadline)-> FAILED -(rdmx_ep_close)->
 *           CLOSING -(UCX close done, no op left)-> freed
 * The handshake makes sure the first message on a new UCX endpoint is a
 * small one (UCX sends the first AM eagerly whatever its size) and checks
 * the peer speaks our protocol version.
 *
 * UCX callbacks (error handler, AM handlers) only record what happened and
 * queue the endpoint on worker->ep_events; the user's callbacks run from
 * rdmx__ep_progress, where closing an endpoint is safe.
 */
#include "core/internal.h"

#include "util/endian.h"
#include "util/time.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#define RDMX_CLOSE_TIMEOUT_NS  (2000ull * 1000000ull)
#define RDMX_ACCEPT_TIMEOUT_NS (10000ull * 1000000ull)
#define RDMX_REPORT_MAX_NS     (1000ull * 1000000ull)

/* HELLO and BYE headers never change: static memory outlives every send. */
static const unsigned char hello_hdr[RDMX_HELLO_SIZE] = {
    RDMX_WIRE_MAGIC & 0xff,         (RDMX_WIRE_MAGIC >> 8) & 0xff,
    (RDMX_WIRE_MAGIC >> 16) & 0xff, (RDMX_WIRE_MAGIC >> 24) & 0xff,
    RDMX_WIRE_VERSION,              0, 0, 0};
static const unsigned char ack_ok_hdr[RDMX_HELLO_SIZE] = {
    RDMX_WIRE_MAGIC & 0xff,         (RDMX_WIRE_MAGIC >> 8) & 0xff,
    (RDMX_WIRE_MAGIC >> 16) & 0xff, (RDMX_WIRE_MAGIC >> 24) & 0xff,
    0,                              0, 0, 0};
static const unsigned char ack_bad_version_hdr[RDMX_HELLO_SIZE] = {
    RDMX_WIRE_MAGIC & 0xff,         (RDMX_WIRE_MAGIC >> 8) & 0xff,
    (RDMX_WIRE_MAGIC >> 16) & 0xff, (RDMX_WIRE_MAGIC >> 24) & 0xff,
    (unsigned char)-RDMX_ERR_PROTO, 0, 0, 0};
static const unsigned char bye_hdr[RDMX_HELLO_SIZE] = {0};

/* A close request outlives its endpoint when the close times out. */
typedef struct {
    rdmx_ep_t *ep; /* NULL once the endpoint gave up waiting */
    void *req;     /* the UCX close request */
} rdmx_closer_t;

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

static void ep_error_handler(void *arg, ucp_ep_h ucp_ep, ucs_status_t us)
{
    rdmx_ep_t *ep = arg;
    rdmx_status_t st;

    ep->dead = 1;
    /* A refused or unreachable connect shows up here too; once connected,
     * any transport error means the peer is gone. */
    if (ep->state == RDMX_EP_CONNECTING &&
        (us == UCS_ERR_UNREACHABLE || us == UCS_ERR_REJECTED ||
         us == UCS_ERR_NOT_CONNECTED || us == UCS_ERR_CONNECTION_RESET))
        st = RDMX_ERR_CONN_REFUSED;
    else if (ep->state == RDMX_EP_CONNECTING)
        st = rdmx__from_ucs(us);
    else if (ep->peer_closed)
        st = RDMX_ERR_CONN_CLOSED; /* the disconnect that follows a BYE */
    else
        st = RDMX_ERR_CONN_RESET;
    rdmx_debug("ep %p (%s): UCX error %s", (void *)ep, ep->peer,
               ucs_status_string(us));
    rdmx__error(st, "connection to %s: %s", ep->peer, ucs_status_string(us));
    rdmx__ep_fail(ep, st);
}

static rdmx_ep_t *ep_alloc(rdmx_worker_t *w, const rdmx_ep_params_t *params)
{
    rdmx_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return NULL;
    ep->worker = w;
    ep->status = RDMX_OK;
    if (params != NULL)
        ep->params = *params;
    rdmx_list_init(&ep->recvs);
    rdmx_list_init(&ep->unexpected);
    rdmx_list_init(&ep->rmems);
    rdmx_list_init(&ep->inflight);
    rdmx_list_init(&ep->event_link);
    rdmx_list_insert_tail(&w->eps, &ep->link);
    return ep;
}

static void ep_free(rdmx_ep_t *ep)
{
    rdmx_list_del(&ep->link);
    rdmx_list_del(&ep->event_link);
    set_deadline(ep, 0);
    free(ep);
}

rdmx_ep_t *rdmx__ep_lookup(rdmx_worker_t *w, const ucp_am_recv_param_t *param)
{
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ||
        param->reply_ep == NULL) {
        w->stats.proto_errors++;
        return NULL;
    }
    return rdmx_ptrmap_get(&w->ep_map, param->reply_ep);
}

/* Fire-and-forget send of a constant header (HELLO_ACK, BYE). */
static void send_control(rdmx_ep_t *ep, unsigned id, const void *hdr)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY};
    ucs_status_ptr_t r;

    if (ep->ucp_ep == NULL)
        return;
    r = ucp_am_send_nbx(ep->ucp_ep, id, hdr, RDMX_HELLO_SIZE, NULL, 0, &p);
    if (UCS_PTR_IS_PTR(r))
        ucp_request_free(r); /* released by UCX on completion */
}

static void close_done(void *req, ucs_status_t us, void *user_data)
{
    rdmx_closer_t *closer = user_data;

    rdmx_debug("UCX close done: %s", ucs_status_string(us));

    if (closer->ep != NULL) {
        closer->ep->closer = NULL;
        ucp_request_free(req);
    } /* else: released when the endpoint gave up on it */
    free(closer);
}

/* Close the UCX endpoint: orderly (flush) when healthy, forced otherwise.
 * Descriptors' rkeys go first, as UCX requires. */
static void ucp_close(rdmx_ep_t *ep, int force)
{
    rdmx_worker_t *w = ep->worker;
    ucp_request_param_t p = {0};
    rdmx_closer_t *closer;
    ucs_status_ptr_t r;

    rdmx__rmem_detach_all(ep);
    if (ep->ucp_ep == NULL)
        return;
    rdmx_ptrmap_del(&w->ep_map, ep->ucp_ep);
    closer = malloc(sizeof(*closer));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    if (closer != NULL) {
        closer->ep = ep;
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK |
                          UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = close_done;
        p.user_data = closer;
    }
    rdmx_debug("ep %p (%s): UCX close, %s", (void *)ep, ep->peer,
               force ? "forced" : "flush");
    r = ucp_ep_close_nbx(ep->ucp_ep, &p);
    ep->ucp_ep = NULL;
    if (UCS_PTR_IS_PTR(r) && closer != NULL) {
        closer->req = r;
        ep->closer = closer;
        ep->close_deadline_ns = rdmx_now_ns() + RDMX_CLOSE_TIMEOUT_NS;
    } else {
        if (UCS_PTR_IS_PTR(r))
            ucp_request_free(r);
        free(closer);
    }
}

/* Tear down a failed endpoint's transport side, once. */
static void tear_down(rdmx_ep_t *ep)
{
    if (ep->torn_down)
        return;
    ep->torn_down = 1;
    set_deadline(ep, 0);
    rdmx__msg_purge(ep, ep->status);
    ucp_close(ep, 1);
    /* Requests the forced close did not complete (a rendezvous send whose
     * receiver died, on shared memory) complete now, with the error. */
    rdmx__op_orphan_all(ep);
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
            w->stats.eps_failed++;
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
    if (ep->ops > 0 && rdmx_now_ns() - ep->fail_ns < RDMX_REPORT_MAX_NS)
        return 1;
    ep->events = 0;
    if (!ep->error_done) {
        ep->error_done = 1;
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
                rdmx__error(RDMX_ERR_TIMEOUT, "connect to %s: timed out",
                            ep->peer);
                rdmx__ep_fail(ep, RDMX_ERR_TIMEOUT);
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
            if (ep->ucp_ep != NULL) {
                /* BYE sent: close once the peer has acknowledged it and
                 * our own operations are done. Forced: a flush close on
                 * shared memory leaves a socket behind per connection in
                 * UCX 1.13, and after the BYE_ACK nothing is left to flush
                 * but what rdmx_ep_flush covers. */
                if (!(ep->bye_acked && rdmx_list_empty(&ep->inflight)) &&
                    !ep->dead && now < ep->close_deadline_ns)
                    continue;
                ucp_close(ep, 1);
                n++;
            }
            if (ep->closer != NULL && now >= ep->close_deadline_ns) {
                /* A flush close can hang on a stopped peer (UCX_NOTES 8):
                 * the request finishes on its own, without the endpoint. */
                rdmx_debug("ep %p (%s): close timed out", (void *)ep,
                           ep->peer);
                rdmx_closer_t *closer = ep->closer;
                closer->ep = NULL;
                ucp_request_free(closer->req);
                ep->closer = NULL;
            }
            if (ep->closer != NULL)
                continue;
            rdmx__op_orphan_all(ep);
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

rdmx_status_t rdmx_connect_nb(rdmx_worker_t *w, const char *address,
                              const rdmx_ep_params_t *params, int timeout_ms,
                              rdmx_connect_cb_t cb, void *arg,
                              rdmx_ep_t **ep_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    ucp_ep_params_t ep_params = {0};
    ucs_status_t us;
    rdmx_status_t st;
    rdmx_ep_t *ep;

    if (w == NULL || address == NULL || ep_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "connect: NULL argument");
    st = resolve(address, &ss, &sslen);
    if (st != RDMX_OK)
        return st;

    rdmx__lock(w);
    ep = ep_alloc(w, params);
    if (ep == NULL) {
        rdmx__unlock(w);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "connect: out of memory");
    }
    snprintf(ep->peer, sizeof(ep->peer), "%s", address);
    ep->state = RDMX_EP_CONNECTING;
    ep->connect_cb = cb;
    ep->connect_arg = arg;

    ep_params.field_mask =
        UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
        UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.sockaddr.addr = (struct sockaddr *)&ss;
    ep_params.sockaddr.addrlen = sslen;
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.err_handler.cb = ep_error_handler;
    ep_params.err_handler.arg = ep;
    us = ucp_ep_create(w->ucp, &ep_params, &ep->ucp_ep);
    if (us != UCS_OK) {
        ep_free(ep);
        rdmx__unlock(w);
        return rdmx__error(RDMX_ERR_UNREACHABLE, "connect to %s: %s", address,
                           ucs_status_string(us));
    }
    if (rdmx_ptrmap_put(&w->ep_map, ep->ucp_ep, ep) != 0) {
        ucp_close(ep, 1);
        ep_free(ep);
        rdmx__unlock(w);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "connect: out of memory");
    }
    if (timeout_ms > 0)
        set_deadline(ep, rdmx_now_ns() + (uint64_t)timeout_ms * 1000000ull);

    /* The HELLO: a small first message. A refused connection shows up in
     * the error handler. */
    send_control(ep, RDMX_AM_HELLO, hello_hdr);
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

rdmx_status_t rdmx_connect(rdmx_worker_t *w, const char *address,
                           const rdmx_ep_params_t *params, int timeout_ms,
                           rdmx_ep_t **ep_p)
{
    connect_wait_t cw = {0, RDMX_OK};
    rdmx_ep_t *ep;
    rdmx_status_t st;

    st = rdmx_connect_nb(w, address, params, timeout_ms, connect_waited, &cw,
                         &ep);
    if (st != RDMX_INPROGRESS)
        return st;
    if (w->mt) {
        pthread_mutex_lock(&w->lock);
        while (!cw.done)
            pthread_cond_wait(&w->cond, &w->lock);
        pthread_mutex_unlock(&w->lock);
    } else {
        while (!cw.done)
            rdmx_worker_progress(w);
    }
    if (cw.status != RDMX_OK) {
        rdmx_ep_close(ep);
        return rdmx__error(cw.status, "connect to %s: %s", address,
                           rdmx_strerror(cw.status));
    }
    *ep_p = ep;
    return RDMX_OK;
}

/* --- accept ------------------------------------------------------------------ */

void rdmx__ep_accept(rdmx_worker_t *w, rdmx_conn_req_t *cr)
{
    ucp_conn_request_attr_t attr = {
        .field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};
    ucp_ep_params_t ep_params = {0};
    rdmx_ep_t *ep;
    ucs_status_t us;

    ep = ep_alloc(w, &cr->ep_params);
    if (ep == NULL) {
        ucp_listener_reject(cr->ucp_listener, cr->req);
        free(cr);
        return;
    }
    ep->state = RDMX_EP_ACCEPTING;
    ep->accept_cb = cr->accept_cb;
    ep->accept_arg = cr->accept_arg;
    if (ucp_conn_request_query(cr->req, &attr) == UCS_OK) {
        char host[INET6_ADDRSTRLEN] = "?";
        uint16_t port = 0;
        if (attr.client_address.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&attr.client_address;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
            port = ntohs(a->sin_port);
            snprintf(ep->peer, sizeof(ep->peer), "%s:%u", host, port);
        } else if (attr.client_address.ss_family == AF_INET6) {
            struct sockaddr_in6 *a =
                (struct sockaddr_in6 *)&attr.client_address;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
            port = ntohs(a->sin6_port);
            snprintf(ep->peer, sizeof(ep->peer), "[%s]:%u", host, port);
        }
    }

    ep_params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                           UCP_EP_PARAM_FIELD_ERR_HANDLER |
                           UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.conn_request = cr->req;
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.err_handler.cb = ep_error_handler;
    ep_params.err_handler.arg = ep;
    free(cr);
    us = ucp_ep_create(w->ucp, &ep_params, &ep->ucp_ep);
    if (us != UCS_OK) {
        rdmx_warn("accept from %s: %s", ep->peer, ucs_status_string(us));
        ep_free(ep);
        return;
    }
    if (rdmx_ptrmap_put(&w->ep_map, ep->ucp_ep, ep) != 0) {
        ucp_close(ep, 1);
        ep_free(ep);
        return;
    }
    /* A peer that connects but never says HELLO is dropped. */
    set_deadline(ep, rdmx_now_ns() + RDMX_ACCEPT_TIMEOUT_NS);
}

ucs_status_t rdmx__am_hello(void *arg, const void *header, size_t hlen,
                            void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    rdmx_worker_t *w = arg;
    rdmx_ep_t *ep = rdmx__ep_lookup(w, param);
    const unsigned char *h = header;

    if (ep == NULL || ep->state != RDMX_EP_ACCEPTING) {
        w->stats.proto_errors++;
        return UCS_OK;
    }
    if (hlen != RDMX_HELLO_SIZE || len != 0 ||
        rdmx_get_le32(h) != RDMX_WIRE_MAGIC) {
        w->stats.proto_errors++;
        rdmx__error(RDMX_ERR_PROTO, "HELLO from %s: not an rdmx peer",
                    ep->peer);
        rdmx__ep_fail(ep, RDMX_ERR_PROTO);
        return UCS_OK;
    }
    if (h[4] != RDMX_WIRE_VERSION) {
        w->stats.proto_errors++;
        rdmx_warn("HELLO from %s: protocol version %u, this is %u", ep->peer,
                  h[4], RDMX_WIRE_VERSION);
        send_control(ep, RDMX_AM_HELLO_ACK, ack_bad_version_hdr);
        rdmx__ep_fail(ep, RDMX_ERR_PROTO);
        return UCS_OK;
    }
    send_control(ep, RDMX_AM_HELLO_ACK, ack_ok_hdr);
    set_deadline(ep, 0);
    ep->state = RDMX_EP_CONNECTED;
    w->stats.eps_opened++;
    queue_event(ep, RDMX_EPEV_ACCEPTED);
    return UCS_OK;
}

ucs_status_t rdmx__am_hello_ack(void *arg, const void *header, size_t hlen,
                                void *data, size_t len,
                                const ucp_am_recv_param_t *param)
{
    rdmx_worker_t *w = arg;
    rdmx_ep_t *ep = rdmx__ep_lookup(w, param);
    const unsigned char *h = header;

    if (ep == NULL || ep->state != RDMX_EP_CONNECTING) {
        w->stats.proto_errors++;
        return UCS_OK;
    }
    if (hlen != RDMX_HELLO_SIZE || rdmx_get_le32(h) != RDMX_WIRE_MAGIC) {
        w->stats.proto_errors++;
        rdmx__ep_fail(ep, RDMX_ERR_PROTO);
        return UCS_OK;
    }
    if (h[4] != 0) {
        rdmx__error(RDMX_ERR_PROTO, "connect to %s: peer refused our "
                                    "protocol version %u",
                    ep->peer, RDMX_WIRE_VERSION);
        rdmx__ep_fail(ep, RDMX_ERR_PROTO);
        return UCS_OK;
    }
    set_deadline(ep, 0);
    ep->state = RDMX_EP_CONNECTED;
    w->stats.eps_opened++;
    queue_event(ep, RDMX_EPEV_CONNECTED);
    return UCS_OK;
}

/* The peer closes in order: everything it sent arrived before its BYE (one
 * lane, in order). Acknowledge; end the connection (RDMX_ERR_CONN_CLOSED)
 * once rendezvous receives still moving data are done, or after a bound. */
ucs_status_t rdmx__am_bye(void *arg, const void *header, size_t hlen,
                          void *data, size_t len,
                          const ucp_am_recv_param_t *param)
{
    rdmx_worker_t *w = arg;
    rdmx_ep_t *ep = rdmx__ep_lookup(w, param);

    if (ep == NULL)
        return UCS_OK;
    send_control(ep, RDMX_AM_BYE_ACK, bye_hdr);
    if (!ep->peer_closed && ep->status == RDMX_OK) {
        ep->peer_closed = 1;
        set_deadline(ep, rdmx_now_ns() + RDMX_CLOSE_TIMEOUT_NS);
        queue_event(ep, RDMX_EPEV_PEER_CLOSED);
    }
    return UCS_OK;
}

ucs_status_t rdmx__am_bye_ack(void *arg, const void *header, size_t hlen,
                              void *data, size_t len,
                              const ucp_am_recv_param_t *param)
{
    rdmx_worker_t *w = arg;
    rdmx_ep_t *ep = rdmx__ep_lookup(w, param);

    if (ep != NULL)
        ep->bye_acked = 1;
    return UCS_OK;
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
    healthy = ep->status == RDMX_OK && ep->state == RDMX_EP_CONNECTED;
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
    if (healthy && !ep->peer_closed && ep->ucp_ep != NULL) {
        /* BYE, then close when the peer acknowledged it (progress does). */
        send_control(ep, RDMX_AM_BYE, bye_hdr);
        ep->bye_sent = 1;
        ep->close_deadline_ns = rdmx_now_ns() + RDMX_CLOSE_TIMEOUT_NS;
    } else {
        ucp_close(ep, !healthy || ep->dead);
    }
    rdmx__unlock(w);
}

void rdmx__ep_destroy_all(rdmx_worker_t *w)
{
    uint64_t deadline = rdmx_now_ns() + RDMX_CLOSE_TIMEOUT_NS;

    while (!rdmx_list_empty(&w->eps))
        rdmx_ep_close(rdmx_container_of(w->eps.next, rdmx_ep_t, link));
    while (!rdmx_list_empty(&w->closing) && rdmx_now_ns() < deadline)
        rdmx_worker_progress(w);
    while (!rdmx_list_empty(&w->closing)) {
        rdmx_ep_t *ep = rdmx_container_of(w->closing.next, rdmx_ep_t, link);
        rdmx_warn("ep %p (%s): freed with %u operations outstanding",
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

rdmx_status_t rdmx_ep_status(const rdmx_ep_t *ep)
{
    return ep->status;
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
