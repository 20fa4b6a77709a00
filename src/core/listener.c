/*
 * Listener: a TCP socket owned by rdmx. It accepts connections, reads each
 * one's HELLO (protocol version, the client worker's id and transport
 * address), enforces the connection limit, and hands the socket to the
 * worker that will own the connection. Only a socket and some bytes move
 * between workers, never a transport object: the worker that owns a
 * connection creates its transport endpoint itself (ep.c).
 *
 * A peer that sends garbage, an HTTP request or nothing at all costs one
 * socket until its handshake deadline and never reaches a transport.
 */
#define _GNU_SOURCE
#include "core/internal.h"

#include "util/time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_TIMEOUT_NS  (10000ull * 1000000ull)
#define REFUSE_LOG_NS     (1000ull * 1000000ull) /* a log line per second */
#define ACCEPT_BATCH      64

/* Best-effort REFUSE on a socket no epoll set holds, then close it. */
static void refuse_fd(int fd, rdmx_status_t status, const char *why)
{
    rdmx_sock_t s = {.fd = fd};
    rdmx_bs_msg_t m = {.status = status};

    snprintf(m.message, sizeof(m.message), "%s", why);
    /* A closed or full socket loses the frame: the client then sees the
     * connection end, which is as much as it can be told. */
    rdmx__sock_send(&s, RDMX_BS_REFUSE, &m);
    rdmx__sock_close(&s);
}

static void pending_free(rdmx_pending_t *p)
{
    rdmx_list_del(&p->link);
    p->listener->npending--;
    rdmx__sock_close(&p->sock);
    free(p->hello);
    free(p);
}

/* Take @p's socket out of the epoll set, free @p, refuse the socket. */
static void pending_refuse(rdmx_pending_t *p, rdmx_status_t status,
                           const char *why)
{
    rdmx_worker_t *w = p->listener->worker;
    int fd = p->sock.fd;

    epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, NULL);
    w->nsocks--;
    p->sock.fd = -1;
    p->sock.worker = NULL;
    pending_free(p);
    refuse_fd(fd, status, why);
}

/* Count a refusal at the limit and say so, at most once a second. */
static void note_refused(rdmx_listener_t *l, const char *peer)
{
    rdmx_limit_t *lim = l->limit;
    uint64_t now = rdmx_now_ns();
    uint64_t n = __atomic_add_fetch(&lim->refused, 1, __ATOMIC_RELAXED);

    l->worker->stats.conns_refused++;
    if (rdmx_since(now, lim->last_log_ns) >= REFUSE_LOG_NS ||
        lim->last_log_ns == 0) {
        lim->last_log_ns = now;
        rdmx_warn("listener port %u: refusing %s: server at its connection "
                  "limit (%u); %llu refused so far",
                  l->port, peer, lim->max, (unsigned long long)n);
    }
}

/* A HELLO arrived on @p: refuse, or hand the connection to a worker. */
static void take_hello(rdmx_pending_t *p, const rdmx_bs_msg_t *m)
{
    rdmx_listener_t *l = p->listener;
    rdmx_worker_t *w = l->worker;
    rdmx_limit_t *lim = l->limit;
    rdmx_conn_req_t *cr;
    char why[96];

    if (__atomic_load_n(&l->paused, __ATOMIC_ACQUIRE)) {
        w->stats.conns_refused++;
        pending_refuse(p, RDMX_ERR_CONN_REFUSED, "server is shutting down");
        return;
    }
    if (lim->max != 0 &&
        __atomic_add_fetch(&lim->now, 1, __ATOMIC_ACQ_REL) > lim->max) {
        __atomic_sub_fetch(&lim->now, 1, __ATOMIC_ACQ_REL);
        note_refused(l, p->peer);
        snprintf(why, sizeof(why), "server at its connection limit (%u)",
                 lim->max);
        pending_refuse(p, RDMX_ERR_BUSY, why);
        return;
    }
    if (lim->max == 0)
        __atomic_add_fetch(&lim->now, 1, __ATOMIC_ACQ_REL);

    cr = calloc(1, sizeof(*cr));
    if (cr == NULL || (cr->peer_addr = malloc(m->addr_len)) == NULL ||
        rdmx__secret_copy(l->secret, l->secret_len, &cr->secret,
                          &cr->secret_len) != RDMX_OK) {
        if (cr != NULL)
            free(cr->peer_addr);
        free(cr);
        __atomic_sub_fetch(&lim->now, 1, __ATOMIC_ACQ_REL);
        pending_free(p); /* the client sees the connection end */
        return;
    }
    /* The socket leaves this worker's set; its new owner adds it. */
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, p->sock.fd, NULL);
    w->nsocks--;
    cr->sock.fd = p->sock.fd;
    p->sock.fd = -1;
    p->sock.worker = NULL;
    cr->origin = l;
    cr->peer_worker = m->worker_id;
    memcpy(cr->peer_addr, m->addr, m->addr_len);
    cr->peer_addr_len = m->addr_len;
    snprintf(cr->peer, sizeof(cr->peer), "%s", p->peer);
    cr->limit = lim;
    __atomic_add_fetch(&lim->refs, 1, __ATOMIC_ACQ_REL);
    cr->ep_params = l->params.ep_params;
    cr->accept_cb = l->params.accept_cb;
    cr->accept_arg = l->params.arg;
    memcpy(cr->cnonce, m->nonce, RDMX_NONCE_SIZE);
    memcpy(cr->snonce, p->snonce, RDMX_NONCE_SIZE);
    pending_free(p);
    if (l->ntargets > 0) {
        rdmx_worker_t *t = l->targets[l->next_target++ % l->ntargets];
        if (t != w) {
            rdmx__worker_handoff(t, cr);
            return;
        }
    }
    rdmx_list_insert_tail(&w->conn_reqs, &cr->link);
}

/* Count a failed authentication and say so, at most once a second. */
static void note_auth_failed(rdmx_listener_t *l, const char *peer,
                             const char *why)
{
    uint64_t now = rdmx_now_ns();
    uint64_t n = __atomic_add_fetch(&l->auth_failed, 1, __ATOMIC_RELAXED);

    l->worker->stats.auth_failed++;
    l->worker->stats.handshakes_failed++;
    if (rdmx_since(now, l->auth_log_ns) >= REFUSE_LOG_NS ||
        l->auth_log_ns == 0) {
        l->auth_log_ns = now;
        rdmx_warn("listener port %u: %s failed authentication (%s); %llu so "
                  "far",
                  l->port, peer, why, (unsigned long long)n);
    }
}

/* A HELLO to a listener with a secret: keep it (nothing in it is parsed
 * further, its transport address least of all) and send a CHALLENGE. */
static void challenge(rdmx_pending_t *p, const unsigned char *body,
                      size_t len)
{
    rdmx_bs_msg_t c;

    if ((p->hello = malloc(len)) == NULL ||
        rdmx__random(p->snonce, RDMX_NONCE_SIZE) != RDMX_OK) {
        pending_free(p); /* the client sees the connection end */
        return;
    }
    memcpy(p->hello, body, len);
    p->hello_len = len;
    rdmx__sock_consume(&p->sock);
    memset(&c, 0, sizeof(c));
    memcpy(c.nonce, p->snonce, RDMX_NONCE_SIZE);
    if (rdmx__sock_send(&p->sock, RDMX_BS_CHALLENGE, &c) != RDMX_OK)
        pending_free(p);
}

/* The AUTH after a CHALLENGE: a good proof lets the HELLO through. */
static void check_auth(rdmx_pending_t *p, const unsigned char *body,
                       size_t len)
{
    rdmx_listener_t *l = p->listener;
    unsigned char want[RDMX_MAC_SIZE];
    rdmx_bs_msg_t a, m;

    if (rdmx__bs_decode(RDMX_BS_AUTH, body, len, &a) != RDMX_OK) {
        note_auth_failed(l, p->peer, "malformed AUTH");
        pending_refuse(p, RDMX_ERR_DENIED, rdmx_error_detail());
        return;
    }
    /* (decoded before: it cannot fail now) */
    rdmx__bs_decode(RDMX_BS_HELLO, p->hello, p->hello_len, &m);
    if (rdmx__bs_client_proof(l->secret, l->secret_len, p->snonce, &m,
                              want) != RDMX_OK ||
        !rdmx__mac_equal(want, a.proof)) {
        note_auth_failed(l, p->peer, "wrong proof");
        pending_refuse(p, RDMX_ERR_DENIED,
                       "authentication failed: wrong secret");
        return;
    }
    take_hello(p, &m);
}

static void on_pending_event(rdmx_sock_t *s, uint32_t events)
{
    rdmx_pending_t *p = rdmx_container_of(s, rdmx_pending_t, sock);
    rdmx_listener_t *l = p->listener;
    rdmx_worker_t *w = l->worker;
    unsigned want = p->hello == NULL ? RDMX_BS_HELLO : RDMX_BS_AUTH;
    const unsigned char *body;
    rdmx_bs_msg_t m;
    unsigned type;
    size_t len;
    int rc;

    if ((events & EPOLLOUT) && rdmx__sock_flush(s) < 0) {
        w->stats.handshakes_failed++;
        pending_free(p);
        return;
    }
    rc = rdmx__sock_read_frame(s, &type, &body, &len);
    if (rc == 0)
        return;
    if (rc < 0 && rc != RDMX_ERR_PROTO) {
        if (want == RDMX_BS_AUTH)
            note_auth_failed(l, p->peer, "it left without a proof");
        else
            w->stats.handshakes_failed++;
        pending_free(p);
        return;
    }
    if (rc > 0 && type == RDMX_BS_AUTH && want == RDMX_BS_AUTH) {
        check_auth(p, body, len);
        return;
    }
    if (rc == RDMX_ERR_PROTO || type != want ||
        rdmx__bs_decode(type, body, len, &m) != RDMX_OK) {
        char why[160];

        if (rc > 0 && type != want)
            rdmx__error(RDMX_ERR_PROTO,
                        "bootstrap: expected %s, got frame type %u",
                        want == RDMX_BS_HELLO ? "HELLO" : "AUTH", type);
        snprintf(why, sizeof(why), "%s", rdmx_error_detail());
        w->stats.proto_errors++;
        if (want == RDMX_BS_AUTH)
            note_auth_failed(l, p->peer, why);
        else
            w->stats.handshakes_failed++;
        rdmx_debug("listener: %s: %s", p->peer, why);
        pending_refuse(p, RDMX_ERR_PROTO, why);
        return;
    }
    if (l->secret != NULL) {
        challenge(p, body, len);
        return;
    }
    take_hello(p, &m);
}

static void on_listen_event(rdmx_sock_t *s, uint32_t events)
{
    rdmx_listener_t *l = rdmx_container_of(s, rdmx_listener_t, sock);
    rdmx_worker_t *w = l->worker;

    (void)events;
    for (unsigned i = 0; i < ACCEPT_BATCH; i++) {
        int one = 1;
        int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        rdmx_pending_t *p;

        if (fd < 0 && (errno == EMFILE || errno == ENFILE) &&
            l->spare_fd >= 0) {
            /* Out of file descriptors: give the reserved one back, take
             * the connection, tell the client why, and reserve again. */
            uint64_t now = rdmx_now_ns();
            close(l->spare_fd);
            fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                w->stats.conns_refused++;
                refuse_fd(fd, RDMX_ERR_NO_RESOURCE,
                          "server out of file descriptors (ulimit -n)");
            }
            l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (rdmx_since(now, l->limit->last_log_ns) >= REFUSE_LOG_NS ||
                l->limit->last_log_ns == 0) {
                l->limit->last_log_ns = now;
                rdmx_warn("listener port %u: out of file descriptors: "
                          "refusing connections (raise ulimit -n, or set a "
                          "connection limit)",
                          l->port);
            }
            continue;
        }
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED)
                rdmx_warn("listener port %u: accept: %s", l->port,
                          strerror(errno));
            return;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        p = calloc(1, sizeof(*p));
        if (p == NULL) {
            close(fd);
            continue;
        }
        p->listener = l;
        p->deadline_ns = rdmx_now_ns() + HELLO_TIMEOUT_NS;
        rdmx__sock_peer_name(fd, p->peer, sizeof(p->peer));
        if (rdmx__sock_attach(w, &p->sock, fd, EPOLLIN | EPOLLRDHUP,
                              on_pending_event) != RDMX_OK) {
            close(fd);
            free(p);
            continue;
        }
        rdmx_list_insert_tail(&l->pending, &p->link);
        l->npending++;
        /* The HELLO usually came with the connection. */
        on_pending_event(&p->sock, EPOLLIN);
    }
}

void rdmx__listener_sweep(rdmx_worker_t *w, uint64_t now)
{
    rdmx_list_t *lp, *pos, *tmp;

    rdmx_list_for_each(lp, &w->listeners)
    {
        rdmx_listener_t *l = rdmx_container_of(lp, rdmx_listener_t, link);
        rdmx_list_for_each_safe(pos, tmp, &l->pending)
        {
            rdmx_pending_t *p = rdmx_container_of(pos, rdmx_pending_t, link);
            if (now < p->deadline_ns)
                break; /* in deadline order */
            if (p->hello != NULL) {
                note_auth_failed(l, p->peer, "no proof in time");
            } else {
                rdmx_debug("listener port %u: %s sent no HELLO in time",
                           l->port, p->peer);
                w->stats.handshakes_failed++;
            }
            pending_free(p);
        }
    }
}

static rdmx_status_t open_socket(const char *address, int *fd_p,
                                 uint16_t *port_p)
{
    char host[256], port_str[8];
    uint16_t port;
    struct addrinfo hints = {0}, *res;
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    rdmx_status_t st;
    int fd, one = 1, rc;

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
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                0);
    if (fd < 0) {
        st = rdmx__error(RDMX_ERR_NO_RESOURCE, "listen on %s: socket: %s",
                         address, strerror(errno));
        goto out;
    }
    /* A restarted server gets its port back at once. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
        st = rdmx__error(errno == EADDRINUSE ? RDMX_ERR_ADDR_IN_USE
                                             : RDMX_ERR_UNREACHABLE,
                         "listen on %s: %s", address,
                         errno == EADDRINUSE ? "address already in use"
                                             : strerror(errno));
        close(fd);
        goto out;
    }
    if (listen(fd, 4096) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sslen) != 0) {
        st = rdmx__error(RDMX_ERR_UNREACHABLE, "listen on %s: %s", address,
                         strerror(errno));
        close(fd);
        goto out;
    }
    /* (getsockname filled ss, which the analyzer does not model) */
    /* NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult) */
    *port_p = ntohs(ss.ss_family == AF_INET6
                        ? ((struct sockaddr_in6 *)&ss)->sin6_port
                        : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_p = fd;
    st = RDMX_OK;
out:
    freeaddrinfo(res);
    return st;
}

rdmx_status_t rdmx_listener_create(rdmx_worker_t *w,
                                   const rdmx_listener_params_t *params,
                                   rdmx_listener_t **listener_p)
{
    const char *address = "0.0.0.0:0";
    rdmx_listener_t *l;
    rdmx_status_t st;
    int fd;

    if (w == NULL || params == NULL || listener_p == NULL ||
        !(params->field_mask & RDMX_LISTENER_PARAM_FIELD_ACCEPT_CB) ||
        params->accept_cb == NULL)
        return rdmx__error(RDMX_ERR_INVALID,
                           "listener: worker, params and accept_cb required");
    if ((params->field_mask & RDMX_LISTENER_PARAM_FIELD_ADDRESS) &&
        params->address != NULL)
        address = params->address;

    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "listener: out of memory");
    l->worker = w;
    l->params = *params;
    l->sock.fd = -1;
    /* One descriptor kept in reserve: at the process's fd limit it lets
     * the listener accept a connection long enough to refuse it. */
    l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    rdmx_list_init(&l->pending);
    if (!(params->field_mask & RDMX_LISTENER_PARAM_FIELD_EP_PARAMS))
        memset(&l->params.ep_params, 0, sizeof(l->params.ep_params));
    l->limit = calloc(1, sizeof(*l->limit));
    if (l->limit == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "listener: out of memory");
        goto err_free;
    }
    l->limit->refs = 1;
    if ((params->field_mask & RDMX_LISTENER_PARAM_FIELD_AUTH_SECRET) &&
        (st = rdmx__secret_copy(params->auth_secret, params->auth_secret_len,
                                &l->secret, &l->secret_len)) != RDMX_OK)
        goto err_free;
    if (params->field_mask & RDMX_LISTENER_PARAM_FIELD_MAX_CONNECTIONS)
        l->limit->max = params->max_connections;
    if ((params->field_mask & RDMX_LISTENER_PARAM_FIELD_WORKERS) &&
        params->nworkers > 0) {
        if (params->workers == NULL) {
            st = rdmx__error(RDMX_ERR_INVALID, "listener: workers is NULL");
            goto err_free;
        }
        l->targets = malloc(params->nworkers * sizeof(*l->targets));
        if (l->targets == NULL) {
            st = rdmx__error(RDMX_ERR_NO_MEMORY, "listener: out of memory");
            goto err_free;
        }
        for (unsigned i = 0; i < params->nworkers; i++) {
            if (params->workers[i] == NULL ||
                params->workers[i]->ctx != w->ctx) {
                st = rdmx__error(RDMX_ERR_INVALID,
                                 "listener: worker %u is NULL or of another "
                                 "context",
                                 i);
                goto err_free;
            }
            l->targets[i] = params->workers[i];
        }
        l->ntargets = params->nworkers;
    }
    if ((st = open_socket(address, &fd, &l->port)) != RDMX_OK)
        goto err_free;
    rdmx__lock(w);
    st = rdmx__sock_attach(w, &l->sock, fd, EPOLLIN, on_listen_event);
    if (st != RDMX_OK) {
        rdmx__unlock(w);
        close(fd);
        goto err_free;
    }
    rdmx_list_insert_tail(&w->listeners, &l->link);
    rdmx__unlock(w);
    *listener_p = l;
    return RDMX_OK;

err_free:
    if (l->spare_fd >= 0)
        close(l->spare_fd);
    free(l->targets);
    free(l->limit);
    rdmx__secret_free(&l->secret, &l->secret_len);
    free(l);
    return st;
}

void rdmx__conn_req_reject(rdmx_conn_req_t *cr, rdmx_status_t status,
                           const char *why)
{
    int fd = cr->sock.fd;

    cr->sock.fd = -1;
    refuse_fd(fd, status, why);
    __atomic_sub_fetch(&cr->limit->now, 1, __ATOMIC_ACQ_REL);
    rdmx__limit_put(cr->limit);
    rdmx__conn_req_free(cr);
}

void rdmx__conn_req_free(rdmx_conn_req_t *cr)
{
    rdmx__secret_free(&cr->secret, &cr->secret_len);
    free(cr->peer_addr);
    free(cr);
}

void rdmx__listener_pause(rdmx_listener_t *l)
{
    __atomic_store_n(&l->paused, 1, __ATOMIC_RELEASE);
}

/* Refuse and free the requests of @l queued on @list. */
static void reject_queued(rdmx_list_t *list, const rdmx_listener_t *l)
{
    rdmx_list_t *pos, *tmp;

    rdmx_list_for_each_safe(pos, tmp, list)
    {
        rdmx_conn_req_t *cr = rdmx_container_of(pos, rdmx_conn_req_t, link);
        if (cr->origin == l) {
            rdmx_list_del(&cr->link);
            rdmx__conn_req_reject(cr, RDMX_ERR_CONN_REFUSED,
                                  "the listener was closed");
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

/* Connections not yet set up by their worker (on any target) are refused;
 * the targets must not be progressed by another thread meanwhile
 * (progress-thread workers are locked). Accepted endpoints stay. */
void rdmx_listener_destroy(rdmx_listener_t *l)
{
    rdmx_worker_t *w;

    if (l == NULL)
        return;
    w = l->worker;
    rdmx__listener_pause(l);
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
    /* (pending_free unlinks before it frees: the analyzer loses track) */
    while (!rdmx_list_empty(&l->pending))
        /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
        pending_free(rdmx_container_of(l->pending.next, rdmx_pending_t, link));
    rdmx__sock_close(&l->sock);
    if (l->spare_fd >= 0)
        close(l->spare_fd);
    rdmx_list_del(&l->link);
    rdmx__unlock(w);
    rdmx__limit_put(l->limit);
    free(l->targets);
    rdmx__secret_free(&l->secret, &l->secret_len);
    free(l);
}

uint64_t rdmx__listener_refused(const rdmx_listener_t *l)
{
    return __atomic_load_n(&l->limit->refused, __ATOMIC_RELAXED);
}

uint64_t rdmx__listener_auth_failed(const rdmx_listener_t *l)
{
    return __atomic_load_n(&l->auth_failed, __ATOMIC_RELAXED);
}

uint16_t rdmx_listener_port(const rdmx_listener_t *l)
{
    return l->port;
}
