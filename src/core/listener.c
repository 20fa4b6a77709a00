/*
 * Listener: a UCX listener on a socket address. Connection requests are
 * queued from UCX's callback and turned into endpoints by the worker's
 * progress (UCX_NOTES: do not create endpoints inside the callback).
 */
#include "core/internal.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

static void on_conn_request(ucp_conn_request_h req, void *arg)
{
    rdmx_listener_t *l = arg;
    rdmx_conn_req_t *cr;

    if ((cr = malloc(sizeof(*cr))) == NULL) {
        ucp_listener_reject(l->ucp, req);
        return;
    }
    cr->origin = l;
    cr->ucp_listener = l->ucp;
    cr->req = req;
    cr->ep_params = l->params.ep_params;
    cr->accept_cb = l->params.accept_cb;
    cr->accept_arg = l->params.arg;
    if (l->paused) {
        rdmx_list_insert_tail(&l->paused_reqs, &cr->link);
        return;
    }
    if (l->ntargets > 0) {
        rdmx_worker_t *t = l->targets[l->next_target++ % l->ntargets];
        if (t != l->worker) {
            rdmx__worker_handoff(t, cr);
            return;
        }
    }
    rdmx_list_insert_tail(&l->worker->conn_reqs, &cr->link);
}

rdmx_status_t rdmx_listener_create(rdmx_worker_t *w,
                                   const rdmx_listener_params_t *params,
                                   rdmx_listener_t **listener_p)
{
    const char *address = "0.0.0.0:0";
    char host[256], port_str[8];
    uint16_t port;
    struct addrinfo hints = {0}, *res;
    ucp_listener_params_t lp = {0};
    ucp_listener_attr_t attr = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    rdmx_listener_t *l;
    ucs_status_t us;
    rdmx_status_t st;
    int rc;

    if (w == NULL || params == NULL || listener_p == NULL ||
        !(params->field_mask & RDMX_LISTENER_PARAM_FIELD_ACCEPT_CB) ||
        params->accept_cb == NULL)
        return rdmx__error(RDMX_ERR_INVALID,
                           "listener: worker, params and accept_cb required");
    if ((params->field_mask & RDMX_LISTENER_PARAM_FIELD_ADDRESS) &&
        params->address != NULL)
        address = params->address;
    st = rdmx_addr_parse(address, host, sizeof(host), &port);
    if (st != RDMX_OK)
        return st;
    snprintf(port_str, sizeof(port_str), "%u", port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    rc = getaddrinfo(host, port_str, &hints, &res);
    if (rc != 0)
        return rdmx__error(RDMX_ERR_UNREACHABLE, "listen on '%s': %s",
                           address, gai_strerror(rc));

    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        freeaddrinfo(res);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "listener: out of memory");
    }
    l->worker = w;
    l->params = *params;
    rdmx_list_init(&l->paused_reqs);
    if (!(params->field_mask & RDMX_LISTENER_PARAM_FIELD_EP_PARAMS))
        memset(&l->params.ep_params, 0, sizeof(l->params.ep_params));
    if ((params->field_mask & RDMX_LISTENER_PARAM_FIELD_WORKERS) &&
        params->nworkers > 0) {
        if (params->workers == NULL) {
            freeaddrinfo(res);
            free(l);
            return rdmx__error(RDMX_ERR_INVALID, "listener: workers is NULL");
        }
        l->targets = malloc(params->nworkers * sizeof(*l->targets));
        if (l->targets == NULL) {
            freeaddrinfo(res);
            free(l);
            return rdmx__error(RDMX_ERR_NO_MEMORY, "listener: out of memory");
        }
        for (unsigned i = 0; i < params->nworkers; i++) {
            if (params->workers[i] == NULL ||
                params->workers[i]->ctx != w->ctx) {
                freeaddrinfo(res);
                free(l->targets);
                free(l);
                return rdmx__error(RDMX_ERR_INVALID,
                                   "listener: worker %u is NULL or of "
                                   "another context",
                                   i);
            }
            l->targets[i] = params->workers[i];
        }
        l->ntargets = params->nworkers;
    }

    lp.field_mask =
        UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = res->ai_addr;
    lp.sockaddr.addrlen = res->ai_addrlen;
    lp.conn_handler.cb = on_conn_request;
    lp.conn_handler.arg = l;
    rdmx__lock(w);
    us = ucp_listener_create(w->ucp, &lp, &l->ucp);
    freeaddrinfo(res);
    if (us != UCS_OK) {
        rdmx__unlock(w);
        free(l->targets);
        free(l);
        if (us == UCS_ERR_BUSY)
            return rdmx__error(RDMX_ERR_ADDR_IN_USE, "listen on %s: address "
                                                     "already in use",
                               address);
        return rdmx__error(RDMX_ERR_UNREACHABLE, "listen on %s: %s", address,
                           ucs_status_string(us));
    }
    if (ucp_listener_query(l->ucp, &attr) == UCS_OK) {
        if (attr.sockaddr.ss_family == AF_INET)
            l->port = ntohs(((struct sockaddr_in *)&attr.sockaddr)->sin_port);
        else if (attr.sockaddr.ss_family == AF_INET6)
            l->port =
                ntohs(((struct sockaddr_in6 *)&attr.sockaddr)->sin6_port);
    }
    rdmx_list_insert_tail(&w->listeners, &l->link);
    rdmx__unlock(w);
    *listener_p = l;
    return RDMX_OK;
}

void rdmx__conn_req_reject(rdmx_conn_req_t *cr)
{
    ucp_listener_reject(cr->ucp_listener, cr->req);
    free(cr);
}

void rdmx__listener_pause(rdmx_listener_t *l)
{
    rdmx__lock(l->worker);
    l->paused = 1;
    rdmx__unlock(l->worker);
}

/* Reject and free the requests of @l queued on @list. */
static void reject_queued(rdmx_list_t *list, const rdmx_listener_t *l)
{
    rdmx_list_t *pos, *tmp;

    rdmx_list_for_each_safe(pos, tmp, list)
    {
        rdmx_conn_req_t *cr = rdmx_container_of(pos, rdmx_conn_req_t, link);
        if (cr->origin == l) {
            rdmx_list_del(&cr->link);
            rdmx__conn_req_reject(cr);
        }
    }
}

/* Requests of @l that @w holds: taken over ones and those still handed. */
static void reject_queued_on(rdmx_worker_t *w, const rdmx_listener_t *l)
{
    reject_queued(&w->conn_reqs, l);
    pthread_mutex_lock(&w->handoff_lock);
    reject_queued(&w->handoff, l);
    pthread_mutex_unlock(&w->handoff_lock);
}

/*
 * UCX 1.13 neither rejects nor frees connection requests it delivered, so
 * every request of this listener still queued on any worker is rejected
 * here, before ucp_listener_destroy. The targets must not be progressed
 * meanwhile by another thread (progress-thread workers are locked).
 *
 * UCX 1.13 race (uct tcp_sockcm): a connection the listener's socket
 * accepted before ucp_listener_destroy whose first data arrives after it
 * runs the connection request callback with the freed listener (SEGV in
 * UCX's async thread). Those sockets stay on the worker's connection manager
 * until ucp_worker_destroy, so the safe moment to destroy a listener is
 * together with its worker: rdmx_worker_destroy does that, with UCX's async
 * thread held from before it closes its endpoints to the end of
 * ucp_worker_destroy. Destroying a listener of a worker that lives on leaves
 * this window open while the worker lives.
 */
void rdmx_listener_destroy(rdmx_listener_t *l)
{
    rdmx_worker_t *w;

    if (l == NULL)
        return;
    w = l->worker;
    rdmx__lock(w);
    l->paused = 1; /* no more hand-offs from here on */
    rdmx__unlock(w);
    for (unsigned i = 0; i < l->ntargets; i++) {
        rdmx_worker_t *t = l->targets[i];
        if (t == w)
            continue;
        rdmx__lock(t);
        reject_queued_on(t, l);
        rdmx__unlock(t);
    }
    rdmx__lock(w);
    reject_queued_on(w, l);
    reject_queued(&l->paused_reqs, l);
    ucp_listener_destroy(l->ucp);
    rdmx_list_del(&l->link);
    rdmx__unlock(w);
    free(l->targets);
    free(l);
}

uint16_t rdmx_listener_port(const rdmx_listener_t *l)
{
    return l->port;
}
