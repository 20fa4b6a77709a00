/*
 * RPC server: N worker threads, each with its own rdmx worker. The listener
 * (on worker 0) spreads connections round-robin; a connection stays on its
 * worker, so handlers run without locks. See docs/RPC.md.
 *
 * A request is a record from the worker's pool. Its payload is UCX's
 * receive buffer, held (RDMX_INPROGRESS) when the handler defers its answer,
 * or a buffer of ours for rendezvous messages. Every REQUEST is answered
 * exactly once — RESPONSE, or ERROR — so the caller's credits come back even
 * for work that expired or was canceled (then only a short ERROR travels).
 */
#include "rpc/internal.h"
#include "rpc/respond.h"
#include "rpc/ring.h"
#include "util/bufcache.h"
#include "util/endian.h"
#include "util/peer_fence.h"
#include "util/thread.h"

#include <pthread.h>
#include <sched.h>

#include "util/time.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SRV_DEFAULT_ADDRESS  "0.0.0.0:0"
#define SRV_DEFAULT_CONNS    1024
#define SRV_DEFAULT_CREDITS  256
#define SRV_DEFAULT_MAX_MSG  (64ull << 20)
#define SRV_DEFAULT_INFLIGHT 65536
#define SRV_AUX_SLACK        (64u << 10) /* max_receiving beyond max_message */
#define SRV_REQ_POOL_MAX     1024
#define SRV_REQ_INLINE       1024 /* a request copied into its record */
#define SRV_RINGS_MAX        64   /* connections with a ring per worker */
#define SRV_RING_BURST       16   /* records taken from one ring per pass */

typedef struct {
    char name[RDMX_RPC_NAME_MAX + 1];
    uint32_t id;
    unsigned flags;
    rdmx_rpc_handler_t fn;
    void *arg;
} handler_t;

typedef struct server_worker server_worker_t;

/* Descriptors unpacked on a connection, kept for the next request that
 * brings the same bytes: over shared memory an unpack maps the peer's
 * segment and the first touch of every page faults, so unpacking per call
 * costs more than the copy (60-200x slower bulk calls measured). */
#define DCACHE_SIZE 8

typedef struct {
    rdmx_rmem_t *rmem;  /* NULL: empty slot */
    unsigned refs;      /* requests using it now */
    uint64_t last_use;
    uint32_t len;
    unsigned char desc[RDMX_RPC_BULK_DESC_MAX];
} dcache_t;

/* (Authentication happened in the connection's bootstrap, before the
 * endpoint existed: every connection here passed it if the server has a
 * secret.) */
typedef enum {
    CONN_HELLO, /* waiting for HELLO */
    CONN_READY  /* WELCOME sent: requests run */
} conn_state_t;

typedef struct {
    rdmx_rpc_link_t link; /* role SERVER; first */
    rdmx_list_t node;     /* sw->conns */
    server_worker_t *sw;
    rdmx_ep_t *ep;        /* NULL once closed */
    conn_state_t state;
    unsigned inflight;    /* requests not answered yet (credits used) */
    uint64_t receiving;   /* bytes of requests being received by rendezvous
                             (max_receiving) */
    rdmx_list_t waiting;  /* requests whose rendezvous waits for room in
                             max_receiving, in arrival order (req->link) */
    unsigned nwaiting;
    unsigned refs;        /* request records pointing here */
    rdmx_ptrmap_t deferred; /* request id -> deferred request (CANCEL) */
    dcache_t *dcache;     /* [DCACHE_SIZE], allocated on first bulk use */
    uint64_t dcache_clock;
    /* the connection's rings, in memory of ours the client maps
     * (docs/RPC_RINGS.md; ring_mr NULL: none) */
    rdmx_mr_t *ring_mr;
    rdmx_ring_t ring;    /* requests: the client writes, we read */
    rdmx_ring_t ans;     /* answers to them: we write, the client reads */
    unsigned ring_index; /* its place in sw->rings */
    uint32_t msgs_in;    /* REQUEST and ONEWAY messages taken: a ring
                            record runs after those its writer sent before
                            it (its `after`) */
    char peer[64];
} conn_t;

struct rdmx_rpc_req {
    rdmx_list_t link;     /* pool */
    conn_t *conn;
    handler_t *handler;
    unsigned hidx;
    uint64_t id;
    int oneway;
    int answered;
    int deferred;         /* the handler returned without answering */
    int by_ring;          /* it came by the connection's ring */
    int canceled;
    const unsigned char *data; /* aux || payload */
    size_t aux_len, len;
    void *ucx_data;       /* the transport's buffer we hold (or a
                             rendezvous descriptor waiting), or NULL */
    void *own;            /* our buffer (rendezvous, copies), or NULL */
    size_t receiving;     /* bytes counted in conn->receiving until its
                             rendezvous ends */
    size_t wait_len;      /* waiting: the rendezvous' length */
    uint64_t arrival_ns, deadline_ns;
    unsigned nbulk;
    rdmx_rpc_bulk_ref_t bulk[RDMX_RPC_BULK_MAX];
    rdmx_rmem_t *rmem[RDMX_RPC_BULK_MAX];
    dcache_t *cached[RDMX_RPC_BULK_MAX]; /* the cache slot rmem[i] is from */
    /* A request that the transport cannot lend past its callback (one of
     * a batch, or one that arrived inline: up to ~960 bytes over shared
     * memory) and that fits is copied here, not into a buffer of its
     * own (data then points here; req_get does not clear it). */
    unsigned char inl[SRV_REQ_INLINE];
};

/*
 * The server's counters: the fields of rdmx_rpc_server_stats_t
 * (include/rdmx/rpc.h, where each is documented), in its order, as
 * X(field, source). WORKER fields are counted by each worker in its
 * worker_stats_t and summed by rdmx_rpc_server_stats(); SERVER fields are
 * not counted by workers, rdmx_rpc_server_stats() reads them from the
 * server and its listener. rdmx.stats prints one "field value" line per
 * entry, in this order (tests and tools parse it). The assertions below
 * hold the list to the public struct: same names, order and size.
 */
#define SERVER_STATS(X)                                                        \
    X(connections, SERVER)                                                     \
    X(connections_total, WORKER)                                               \
    X(connections_refused, WORKER)                                             \
    X(requests, WORKER)                                                        \
    X(responses, WORKER)                                                       \
    X(errors, WORKER)                                                          \
    X(unknown_handler, WORKER)                                                 \
    X(malformed, WORKER)                                                       \
    X(too_big, WORKER)                                                         \
    X(no_credit, WORKER)                                                       \
    X(busy, WORKER)                                                            \
    X(expired, WORKER)                                                         \
    X(canceled, WORKER)                                                        \
    X(auth_failed, SERVER)                                                     \
    X(pings, WORKER)                                                           \
    X(waited, WORKER)                                                          \
    X(ring_requests, WORKER)                                                   \
    X(ring_responses, WORKER)

enum {
#define STAT_INDEX(f, src) STAT_INDEX_##f,
    SERVER_STATS(STAT_INDEX)
#undef STAT_INDEX
    STAT_COUNT
};

#define STAT_CHECK(f, src)                                                   \
    _Static_assert(offsetof(rdmx_rpc_server_stats_t, f) ==                   \
                       STAT_INDEX_##f * sizeof(uint64_t),                    \
                   "SERVER_STATS: " #f " is not where the struct has it");   \
    _Static_assert(_Generic(((rdmx_rpc_server_stats_t *)0)->f,               \
                            uint64_t: 1, default: 0),                        \
                   "SERVER_STATS: " #f " is not a uint64_t");
SERVER_STATS(STAT_CHECK)
#undef STAT_CHECK
_Static_assert(sizeof(rdmx_rpc_server_stats_t) ==
                   STAT_COUNT * sizeof(uint64_t),
               "SERVER_STATS: the struct has fields the list has not");

/* One worker's share of the WORKER counters: written by the worker's
 * thread only, read racily (relaxed loads) by rdmx_rpc_server_stats(). */
typedef struct {
#define FIELD_WORKER(f) uint64_t f;
#define FIELD_SERVER(f)
#define FIELD(f, src) FIELD_##src(f)
    SERVER_STATS(FIELD)
#undef FIELD
#undef FIELD_SERVER
#undef FIELD_WORKER
} worker_stats_t;

/* Count one more in @sw's field @f: a relaxed atomic store, as the worker's
 * thread is the only writer and rdmx_rpc_server_stats() reads the fields
 * from other threads (a plain ++ is a data race in C11). */
#define STAT_INC(sw, f)                                                        \
    __atomic_store_n(&(sw)->stats.f, (sw)->stats.f + 1, __ATOMIC_RELAXED)

struct server_worker {
    rdmx_rpc_server_t *srv;
    unsigned index;
    rdmx_worker_t *w;
    pthread_t thread;
    int running;
    rdmx_list_t conns;
    rdmx_list_t pool;     /* free request records */
    unsigned npool;
    unsigned deferred;    /* requests held by handlers */
    rdmx_rpc_req_t *current; /* the request whose handler is running */
    int current_answered;    /* ... and it answered before returning */
    rdmx_rpc_counters_t *counters; /* [srv->nhandlers] */
    worker_stats_t stats;
    /* connections with a ring, polled in every pass of the worker while
     * there are any (NULL: a free place) */
    conn_t *rings[SRV_RINGS_MAX];
    unsigned nrings;                          /* places used: [0, nrings) */
    rdmx_poller_t poller;                     /* on w while nrings != 0 */
    unsigned char ring_rec[RDMX_RING_STRIDE]; /* a record copied out */
};

struct rdmx_rpc_server {
    rdmx_context_t *ctx;
    char address[256];
    unsigned nworkers;
    unsigned max_connections;
    unsigned credits;
    uint64_t max_message;
    uint64_t max_receiving;
    unsigned max_inflight;
    unsigned max_rings; /* connections with rings per worker (rpc.h) */
    rdmx_rpc_poll_t poll;
    unsigned char *secret;
    size_t secret_len;
    handler_t *handlers;
    unsigned nhandlers, cap;
    int32_t *slots;       /* id hash -> handler index, -1 empty */
    unsigned slot_mask;
    uint32_t *wl_ids, *wl_flags; /* handler table for WELCOME */
    server_worker_t *workers;
    rdmx_listener_t *listener;
    uint16_t port;
    int started;
    volatile int stop;
    unsigned conns_now;   /* atomic */
};

static void req_finish(rdmx_rpc_req_t *req);

/* --- handler table ----------------------------------------------------------- */

static handler_t *handler_find(rdmx_rpc_server_t *s, uint32_t id,
                               unsigned *idx_p)
{
    for (unsigned i = id & s->slot_mask;; i = (i + 1) & s->slot_mask) {
        int32_t k = s->slots[i];
        if (k < 0)
            return NULL;
        if (s->handlers[k].id == id) {
            *idx_p = (unsigned)k;
            return &s->handlers[k];
        }
    }
}

static rdmx_status_t build_slots(rdmx_rpc_server_t *s)
{
    unsigned n = 16;

    while (n < s->nhandlers * 4)
        n *= 2;
    free(s->slots);
    s->slots = malloc(n * sizeof(*s->slots));
    s->wl_ids = malloc((s->nhandlers + 1) * sizeof(uint32_t));
    s->wl_flags = malloc((s->nhandlers + 1) * sizeof(uint32_t));
    if (s->slots == NULL || s->wl_ids == NULL || s->wl_flags == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "server: out of memory");
    s->slot_mask = n - 1;
    for (unsigned i = 0; i < n; i++)
        s->slots[i] = -1;
    for (unsigned k = 0; k < s->nhandlers; k++) {
        unsigned i = s->handlers[k].id & s->slot_mask;
        while (s->slots[i] >= 0)
            i = (i + 1) & s->slot_mask;
        s->slots[i] = (int32_t)k;
        s->wl_ids[k] = s->handlers[k].id;
        s->wl_flags[k] = s->handlers[k].flags;
    }
    return RDMX_OK;
}

static rdmx_status_t add_handler(rdmx_rpc_server_t *s, const char *name,
                                 rdmx_rpc_handler_t fn, void *arg,
                                 unsigned flags)
{
    uint32_t id = rdmx_rpc_id(name);
    handler_t *h;

    for (unsigned i = 0; i < s->nhandlers; i++) {
        if (strcmp(s->handlers[i].name, name) == 0)
            return rdmx__error(RDMX_ERR_EXISTS, "handler '%s' is already "
                                                "registered",
                               name);
        if (s->handlers[i].id == id)
            return rdmx__error(RDMX_ERR_EXISTS,
                               "handler '%s' has the id 0x%08x of '%s'; "
                               "choose another name",
                               name, id, s->handlers[i].name);
    }
    if (s->nhandlers == s->cap) {
        unsigned cap = s->cap ? s->cap * 2 : 16;
        handler_t *n = realloc(s->handlers, cap * sizeof(*n));
        if (n == NULL)
            return rdmx__error(RDMX_ERR_NO_MEMORY, "server: out of memory");
        s->handlers = n;
        s->cap = cap;
    }
    h = &s->handlers[s->nhandlers++];
    memset(h, 0, sizeof(*h));
    snprintf(h->name, sizeof(h->name), "%s", name);
    h->id = id;
    h->flags = flags;
    h->fn = fn;
    h->arg = arg;
    return RDMX_OK;
}

rdmx_status_t rdmx_rpc_server_register(rdmx_rpc_server_t *s, const char *name,
                                       rdmx_rpc_handler_t fn, void *arg,
                                       unsigned flags)
{
    size_t len;

    if (s == NULL || name == NULL || fn == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "register: NULL argument");
    len = strlen(name);
    if (len == 0 || len > RDMX_RPC_NAME_MAX)
        return rdmx__error(RDMX_ERR_INVALID, "register: name of %zu bytes, "
                                             "1..%d allowed",
                           len, RDMX_RPC_NAME_MAX);
    if (flags & ~(unsigned)(RDMX_RPC_ONEWAY | RDMX_RPC_IDEMPOTENT))
        return rdmx__error(RDMX_ERR_INVALID, "register '%s': unknown flags "
                                             "0x%x",
                           name, flags);
    if (strncmp(name, "rdmx.", 5) == 0)
        return rdmx__error(RDMX_ERR_EXISTS, "register '%s': names starting "
                                            "'rdmx.' are reserved",
                           name);
    if (s->started)
        return rdmx__error(RDMX_ERR_BUSY, "register '%s': the server is "
                                          "already started",
                           name);
    if (s->nhandlers + 2 >= RDMX_RPC_HANDLERS_MAX)
        return rdmx__error(RDMX_ERR_NO_RESOURCE, "register '%s': at most %d "
                                                 "handlers",
                           name, RDMX_RPC_HANDLERS_MAX - 2);
    return add_handler(s, name, fn, arg, flags);
}

/* --- requests ------------------------------------------------------------- */

static rdmx_rpc_req_t *req_get(server_worker_t *sw)
{
    rdmx_list_t *e = rdmx_list_pop(&sw->pool);
    rdmx_rpc_req_t *req;

    if (e != NULL) {
        sw->npool--;
        req = rdmx_container_of(e, rdmx_rpc_req_t, link);
    } else if ((req = malloc(sizeof(*req))) == NULL) {
        return NULL;
    }
    memset(req, 0, offsetof(rdmx_rpc_req_t, bulk));
    return req;
}

static void conn_put(conn_t *c)
{
    if (--c->refs == 0 && c->ep == NULL) {
        rdmx_ptrmap_cleanup(&c->deferred);
        free(c->dcache);
        free(c);
    }
}

/* Release the cached descriptors (before the endpoint closes). */
static void dcache_clear(conn_t *c)
{
    for (unsigned i = 0; c->dcache != NULL && i < DCACHE_SIZE; i++) {
        dcache_t *d = &c->dcache[i];
        if (d->rmem != NULL && d->refs == 0) {
            rdmx_rmem_destroy(d->rmem);
            d->rmem = NULL;
        }
    }
}

/* The unpacked form of descriptor @desc, from the cache or new. Cached
 * entries are shared by requests (refs); an entry in use is never evicted. */
static rdmx_status_t dcache_get(conn_t *c, const unsigned char *desc,
                                uint32_t len, rdmx_rmem_t **rmem_p,
                                dcache_t **slot_p)
{
    dcache_t *victim = NULL;
    rdmx_status_t st;

    *slot_p = NULL;
    if (c->dcache == NULL)
        c->dcache = calloc(DCACHE_SIZE, sizeof(*c->dcache));
    for (unsigned i = 0; c->dcache != NULL && i < DCACHE_SIZE; i++) {
        dcache_t *d = &c->dcache[i];
        if (d->rmem != NULL && d->len == len &&
            memcmp(d->desc, desc, len) == 0) {
            d->refs++;
            d->last_use = ++c->dcache_clock;
            *rmem_p = d->rmem;
            *slot_p = d;
            return RDMX_OK;
        }
        if (d->refs == 0 &&
            (victim == NULL || d->rmem == NULL ||
             (victim->rmem != NULL && d->last_use < victim->last_use)))
            victim = d;
    }
    st = rdmx_rmem_unpack(c->ep, desc, len, rmem_p);
    if (st != RDMX_OK || victim == NULL)
        return st; /* not cached: the request owns it */
    if (victim->rmem != NULL)
        rdmx_rmem_destroy(victim->rmem);
    victim->rmem = *rmem_p;
    victim->refs = 1;
    victim->last_use = ++c->dcache_clock;
    victim->len = len;
    memcpy(victim->desc, desc, len);
    *slot_p = victim;
    return RDMX_OK;
}

static void send_error(conn_t *c, uint64_t id, uint32_t handler,
                       rdmx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void send_error(conn_t *c, uint64_t id, uint32_t handler,
                       rdmx_status_t status, const char *fmt, ...)
{
    rdmx_rpc_hdr_t h;
    char msg[256];
    va_list ap;
    int n;

    if (c->ep == NULL)
        return;
    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(msg))
        n = sizeof(msg) - 1;
    rdmx__rpc_hdr(&h, RDMX_RPC_MSG_ERROR, handler, id);
    h.status = status;
    h.payload = (uint32_t)n;
    STAT_INC(c->sw, errors);
    STAT_INC(c->sw, responses);
    rdmx__rpc_send(c->ep, &h, msg, (size_t)n);
}

/* rdmx_rpc_req_expired at @now. */
static int expired_at(const rdmx_rpc_req_t *req, uint64_t now)
{
    return req->canceled || req->conn->ep == NULL ||
           (req->deadline_ns != 0 && now >= req->deadline_ns);
}

int rdmx_rpc_req_expired(const rdmx_rpc_req_t *req)
{
    return expired_at(req, req->deadline_ns != 0 ? rdmx_now_ns() : 0);
}

int rdmx_rpc_req_may_write(const rdmx_rpc_req_t *req)
{
    /* The deadline is counted from the request's arrival, which comes
     * late if this process was stopped; the caller closes its connection
     * before it gives up on a lent buffer, and the control socket says so
     * even then. */
    return !rdmx_rpc_req_expired(req) && rdmx__ep_peer_alive(req->conn->ep);
}

/* What a request holds goes back (credit, memory, the record); its
 * reference to the connection stays for the caller to drop. */
static void req_release(rdmx_rpc_req_t *req)
{
    conn_t *c = req->conn;
    server_worker_t *sw = c->sw;

    for (unsigned i = 0; i < req->nbulk; i++) {
        if (req->cached[i] != NULL) {
            /* the connection is gone: nobody will reuse it */
            if (--req->cached[i]->refs == 0 && c->ep == NULL) {
                rdmx_rmem_destroy(req->cached[i]->rmem);
                req->cached[i]->rmem = NULL;
            }
        } else if (req->rmem[i] != NULL)
            rdmx_rmem_destroy(req->rmem[i]);
    }
    if (req->ucx_data != NULL)
        rdmx__msg_release(sw->w, req->ucx_data);
    rdmx__buf_free(req->own);
    if (req->deferred) {
        sw->deferred--;
        rdmx_ptrmap_del(&c->deferred, (void *)(uintptr_t)req->id);
    }
    if (!req->oneway)
        c->inflight--;
    if (sw->npool < SRV_REQ_POOL_MAX) {
        rdmx_list_insert_tail(&sw->pool, &req->link);
        sw->npool++;
    } else {
        free(req);
    }
}

/* Common end of an answer: metrics, credits, memory. */
static void req_finish(rdmx_rpc_req_t *req)
{
    conn_t *c = req->conn;

    req_release(req);
    conn_put(c);
}

/* Answer @req: RESPONSE when @status is RDMX_OK, else ERROR with @msg.
 * The response's data is @data (@len bytes), then @body (@blen bytes, sent
 * from where it is) when @done is given: @done(@arg) runs exactly once,
 * when the transport no longer reads @body, whatever happens. */
static rdmx_status_t answer_parts(rdmx_rpc_req_t *req, rdmx_status_t status,
                                  const void *data, size_t len,
                                  const void *body, size_t blen,
                                  const char *msg, void (*done)(void *),
                                  void *arg)
{
    conn_t *c = req->conn;
    server_worker_t *sw = c->sw;
    rdmx_rpc_counters_t *m = &sw->counters[req->hidx];
    rdmx_status_t st = RDMX_OK;
    rdmx_rpc_hdr_t h;
    uint64_t now;

    if (req->answered) {
        if (done != NULL)
            done(arg);
        return rdmx__error(RDMX_ERR_INVALID, "request %llu of '%s' was "
                                             "already answered",
                           (unsigned long long)req->id, req->handler->name);
    }
    req->answered = 1;
    now = rdmx_now_ns();
    if (req == sw->current)
        sw->current_answered = 1;
    RDMX_COUNT_ADD(m->calls, 1);
    if (status != RDMX_OK)
        RDMX_COUNT_ADD(m->errors, 1);
    if (req->oneway || c->ep == NULL) {
        /* nothing to send */
    } else if (expired_at(req, now)) {
        /* The caller gave up: a short ERROR returns its credit. */
        RDMX_COUNT_ADD(m->timeouts, 1);
        STAT_INC(sw, expired);
        send_error(c, req->id, req->handler->id,
                   req->canceled ? RDMX_ERR_CANCELED : RDMX_ERR_TIMEOUT,
                   "dropped: the call %s before the handler answered",
                   req->canceled ? "was canceled" : "expired");
    } else if (status == RDMX_OK) {
        if (len > sw->srv->max_message || blen > sw->srv->max_message - len) {
            send_error(c, req->id, req->handler->id, RDMX_ERR_TOO_BIG,
                       "response of %zu bytes exceeds the limit of %llu",
                       len + blen, (unsigned long long)sw->srv->max_message);
            st = rdmx__error(RDMX_ERR_TOO_BIG,
                             "response of %zu bytes "
                             "exceeds max_message",
                             len + blen);
        } else {
            rdmx__rpc_hdr(&h, RDMX_RPC_MSG_RESPONSE, req->handler->id, req->id);
            h.payload = (uint32_t)(len + blen);
            STAT_INC(sw, responses);
            RDMX_COUNT_ADD(m->bytes_out, len + blen);
            if (req->by_ring && c->ans.base != NULL &&
                rdmx__ring_fits(len + blen)) {
                /* into the client's ring (docs/RPC_RINGS.md); a client
                 * that sleeps is woken by a message */
                if (rdmx__ring_write(&c->ans, &h, 0, data, len, body, blen))
                    rdmx__rpc_send_ctl(c->ep, RDMX_RPC_MSG_WAKE, 0, 0);
                STAT_INC(sw, ring_responses);
            } else if (done != NULL) {
                st = rdmx__rpc_send_parts(c->ep, &h, data, len, body, blen,
                                          done, arg);
                done = NULL; /* rdmx__rpc_send_parts calls it */
            } else {
                st = rdmx__rpc_send(c->ep, &h, data, len);
            }
        }
    } else {
        send_error(c, req->id, req->handler->id, status, "%s", msg);
    }
    /* arrival to the answer (one clock read serves this and the deadline) */
    rdmx__hist_add(&m->hist, rdmx_since(now, req->arrival_ns));
    req_finish(req);
    if (done != NULL)
        done(arg);
    return st;
}

static rdmx_status_t answer(rdmx_rpc_req_t *req, rdmx_status_t status,
                            const void *data, size_t len, const char *msg)
{
    return answer_parts(req, status, data, len, NULL, 0, msg, NULL, NULL);
}

rdmx_status_t rdmx__rpc_respond_parts(rdmx_rpc_req_t *req, const void *head,
                                      size_t hlen, const void *body,
                                      size_t blen, void (*done)(void *arg),
                                      void *arg)
{
    if (req == NULL || done == NULL || hlen > RDMX_RPC_RESPOND_HEAD_MAX ||
        (head == NULL && hlen != 0) || (body == NULL && blen != 0)) {
        if (done != NULL)
            done(arg);
        return rdmx__error(RDMX_ERR_INVALID,
                           "respond: NULL argument or a "
                           "head of %zu bytes",
                           hlen);
    }
    return answer_parts(req, RDMX_OK, head, hlen, body, blen, NULL, done, arg);
}

rdmx_status_t rdmx_rpc_respond(rdmx_rpc_req_t *req, const void *data,
                               size_t length)
{
    if (req == NULL || (data == NULL && length != 0))
        return rdmx__error(RDMX_ERR_INVALID, "respond: NULL argument");
    return answer(req, RDMX_OK, data, length, NULL);
}

rdmx_status_t rdmx_rpc_respond_error(rdmx_rpc_req_t *req,
                                     rdmx_status_t status, const char *fmt,
                                     ...)
{
    char msg[256] = "";
    va_list ap;

    if (req == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "respond_error: NULL request");
    if (status >= 0)
        status = RDMX_ERR_INTERNAL;
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    return answer(req, status, NULL, 0, msg);
}

const void *rdmx_rpc_req_data(const rdmx_rpc_req_t *req, size_t *length_p)
{
    if (length_p != NULL)
        *length_p = req->len;
    return req->data + req->aux_len;
}

const char *rdmx_rpc_req_name(const rdmx_rpc_req_t *req)
{
    return req->handler->name;
}

const char *rdmx_rpc_req_peer(const rdmx_rpc_req_t *req)
{
    return req->conn->peer;
}

int rdmx_rpc_req_authenticated(const rdmx_rpc_req_t *req)
{
    return req->conn->sw->srv->secret != NULL;
}

uint64_t rdmx_rpc_req_deadline(const rdmx_rpc_req_t *req)
{
    return req->deadline_ns;
}

unsigned rdmx_rpc_req_worker(const rdmx_rpc_req_t *req)
{
    return req->conn->sw->index;
}

rdmx_ep_t *rdmx_rpc_req_ep(const rdmx_rpc_req_t *req)
{
    return req->conn->ep;
}

unsigned rdmx_rpc_req_bulk_count(const rdmx_rpc_req_t *req)
{
    return req->nbulk;
}

rdmx_status_t rdmx_rpc_req_bulk(rdmx_rpc_req_t *req, unsigned index,
                                rdmx_rmem_t **rmem_p)
{
    rdmx_status_t st;

    if (req == NULL || rmem_p == NULL || index >= req->nbulk)
        return rdmx__error(RDMX_ERR_OUT_OF_RANGE, "bulk %u: the request has "
                                                  "%u descriptors",
                           index, req ? req->nbulk : 0);
    if (req->conn->ep == NULL)
        return rdmx__error(RDMX_ERR_CONN_RESET, "bulk: the caller is gone");
    if (req->rmem[index] == NULL) {
        st = dcache_get(req->conn, req->bulk[index].desc,
                        req->bulk[index].length, &req->rmem[index],
                        &req->cached[index]);
        if (st != RDMX_OK)
            return st;
    }
    *rmem_p = req->rmem[index];
    return RDMX_OK;
}

/* Run the handler of a request whose bytes are all here. Returns 1 when it
 * was answered (then @req is gone), 0 when the handler kept it. */
static int run_request(rdmx_rpc_req_t *req)
{
    conn_t *c = req->conn;
    server_worker_t *sw = c->sw;
    rdmx_rpc_req_t *outer = sw->current;
    int outer_answered = sw->current_answered, answered;
    char why[160];

    if (req->aux_len != 0 &&
        rdmx_rpc_bulk_decode(req->data, req->aux_len, req->bulk,
                             RDMX_RPC_BULK_MAX, &req->nbulk, why,
                             sizeof(why)) != RDMX_OK) {
        STAT_INC(sw, malformed);
        req->nbulk = 0;
        answer(req, RDMX_ERR_PROTO, NULL, 0, why);
        return 1;
    }
    for (unsigned i = 0; i < req->nbulk; i++) {
        req->rmem[i] = NULL;
        req->cached[i] = NULL;
    }
    RDMX_COUNT_ADD(sw->counters[req->hidx].bytes_in, req->len);
    /* Handlers may nest (a handler's own operation completing inside it
     * can finish another request): save the outer one. */
    sw->current = req;
    sw->current_answered = 0;
    req->handler->fn(req, req->handler->arg);
    answered = sw->current_answered;
    sw->current = outer;
    sw->current_answered = outer_answered;
    return answered;
}

/* A request whose handler returned without answering: keep it findable. */
static void mark_deferred(rdmx_rpc_req_t *req)
{
    req->deferred = 1;
    req->conn->sw->deferred++;
    rdmx_ptrmap_put(&req->conn->deferred, (void *)(uintptr_t)req->id, req);
}

static void rndv_done(rdmx_status_t status, size_t length, void *arg);

/* Receive @req's payload, whose rendezvous descriptor of @length bytes is
 * @desc: into a buffer of ours, counted in the connection's receiving
 * bytes until it ends. */
static void rndv_start(rdmx_rpc_req_t *req, void *desc, size_t length)
{
    conn_t *c = req->conn;
    rdmx_status_t st;

    req->own = rdmx__buf_alloc(length);
    if (req->own == NULL) {
        rdmx__msg_release(c->sw->w, desc);
        answer(req, RDMX_ERR_NO_MEMORY, NULL, 0, "server out of memory");
        return;
    }
    req->data = req->own;
    req->receiving = length;
    c->receiving += length;
    st = rdmx__msg_recv(c->ep, desc, req->own, length, rndv_done, req);
    if (st != RDMX_INPROGRESS) {
        c->receiving -= length;
        req->receiving = 0;
        answer(req, st, NULL, 0, "the server could not receive the request");
    }
}

/* A request's rendezvous ended: its bytes leave the connection's count,
 * and the requests waiting for that room start, in order. */
static void rndv_uncount(rdmx_rpc_req_t *req)
{
    conn_t *c = req->conn;
    uint64_t max = c->sw->srv->max_receiving;
    rdmx_rpc_req_t *next;
    void *desc;

    c->receiving -= req->receiving;
    req->receiving = 0;
    while (c->ep != NULL && !rdmx_list_empty(&c->waiting)) {
        next = rdmx_container_of(c->waiting.next, rdmx_rpc_req_t, link);
        if (next->wait_len > max - c->receiving)
            break;
        rdmx_list_del(&next->link);
        c->nwaiting--;
        if (rdmx_rpc_req_expired(next)) {
            /* canceled or past its deadline while it waited: the short
             * ERROR, nothing pulled (req_finish gives the descriptor back) */
            answer(next, RDMX_ERR_TIMEOUT, NULL, 0, "expired");
            continue;
        }
        desc = next->ucx_data;
        next->ucx_data = NULL;
        rndv_start(next, desc, next->wait_len);
    }
}

static void rndv_done(rdmx_status_t status, size_t length, void *arg)
{
    rdmx_rpc_req_t *req = arg;

    (void)length;
    rndv_uncount(req);
    if (status != RDMX_OK) {
        req->answered = 1; /* nothing to answer: the link is gone */
        RDMX_COUNT_ADD(req->conn->sw->counters[req->hidx].errors, 1);
        req_finish(req);
        return;
    }
    if (!run_request(req))
        mark_deferred(req);
}

static rdmx_status_t on_request(conn_t *c, rdmx_rpc_msg_t *m)
{
    server_worker_t *sw = c->sw;
    rdmx_rpc_server_t *s = sw->srv;
    const rdmx_rpc_hdr_t *h = &m->h;
    int oneway = h->kind == RDMX_RPC_MSG_ONEWAY;
    rdmx_rpc_req_t *req;
    handler_t *hd;
    unsigned hidx = 0;
    int held; /* the transport's buffer is lent to the request */

    STAT_INC(sw, requests);
    if (c->state != CONN_READY) {
        STAT_INC(sw, malformed);
        if (!oneway)
            send_error(c, h->id, h->handler, RDMX_ERR_PROTO,
                       "request before the handshake (HELLO)");
        return RDMX_OK;
    }
    hd = handler_find(s, h->handler, &hidx);
    if (hd == NULL) {
        STAT_INC(sw, unknown_handler);
        if (!oneway)
            send_error(c, h->id, h->handler, RDMX_ERR_NOT_FOUND,
                       "no handler with id 0x%08x", h->handler);
        return RDMX_OK;
    }
    if (h->payload > s->max_message) {
        STAT_INC(sw, too_big);
        if (!oneway)
            send_error(c, h->id, h->handler, RDMX_ERR_TOO_BIG,
                       "request of %u bytes to '%s' exceeds the limit of "
                       "%llu",
                       h->payload, hd->name,
                       (unsigned long long)s->max_message);
        return RDMX_OK;
    }
    if (!oneway && c->inflight >= s->credits) {
        STAT_INC(sw, no_credit);
        send_error(c, h->id, h->handler, RDMX_ERR_NO_RESOURCE,
                   "more than %u requests in flight on this connection",
                   s->credits);
        return RDMX_OK;
    }
    if (m->rndv && m->length > s->max_receiving) {
        /* (payload and bulk table together: it could never start) */
        STAT_INC(sw, too_big);
        if (!oneway)
            send_error(c, h->id, h->handler, RDMX_ERR_TOO_BIG,
                       "request of %zu bytes (payload and bulk table) to "
                       "'%s' exceeds max_receiving, %llu",
                       m->length, hd->name,
                       (unsigned long long)s->max_receiving);
        return RDMX_OK; /* the descriptor goes back: nothing pulled */
    }
    if (m->rndv && c->nwaiting >= s->credits) {
        /* (ONEWAYs take no credit: this bounds their waiting records) */
        STAT_INC(sw, no_credit);
        if (!oneway)
            send_error(c, h->id, h->handler, RDMX_ERR_NO_RESOURCE,
                       "%u large requests already wait on this connection",
                       c->nwaiting);
        return RDMX_OK; /* the descriptor goes back: nothing pulled */
    }
    if (sw->deferred >= s->max_inflight) {
        STAT_INC(sw, busy);
        if (!oneway)
            send_error(c, h->id, h->handler, RDMX_ERR_BUSY,
                       "server worker holds %u requests", sw->deferred);
        return RDMX_OK;
    }
    req = req_get(sw);
    if (req == NULL) {
        STAT_INC(sw, busy);
        if (!oneway)
            send_error(c, h->id, h->handler, RDMX_ERR_NO_MEMORY,
                       "server out of memory");
        return RDMX_OK;
    }
    req->conn = c;
    c->refs++;
    if (!oneway)
        c->inflight++;
    req->handler = hd;
    req->hidx = hidx;
    req->id = h->id;
    req->oneway = oneway;
    req->aux_len = h->aux;
    req->len = h->payload;
    req->arrival_ns = m->at_ns;
    req->by_ring = m->ring;
    if (h->deadline_us != 0)
        req->deadline_ns = req->arrival_ns + (uint64_t)h->deadline_us * 1000;

    if (m->rndv) {
        if (c->nwaiting != 0 || m->length > s->max_receiving - c->receiving) {
            /* Back-pressure: the transfer starts when earlier ones of
             * this connection made room (rndv_uncount). */
            req->ucx_data = m->data;
            req->wait_len = m->length;
            rdmx_list_insert_tail(&c->waiting, &req->link);
            c->nwaiting++;
            STAT_INC(sw, waited);
            return RDMX_INPROGRESS; /* we hold the descriptor */
        }
        rndv_start(req, m->data, m->length);
        return RDMX_INPROGRESS; /* the descriptor is the receive's */
    }
    held = m->can_hold || m->length == 0;
    if (held) {
        req->data = m->data;
    } else if (m->length <= sizeof(req->inl)) {
        /* UCX cannot lend this buffer past the callback: copy it now,
         * into the record if it fits (no allocation per request). */
        memcpy(req->inl, m->data, m->length);
        req->data = req->inl;
    } else {
        req->own = rdmx__buf_alloc(m->length);
        if (req->own == NULL) {
            answer(req, RDMX_ERR_NO_MEMORY, NULL, 0, "server out of memory");
            return RDMX_OK;
        }
        memcpy(req->own, m->data, m->length);
        req->data = req->own;
    }
    if (run_request(req))
        return RDMX_OK;
    mark_deferred(req);
    if (held && m->length != 0) {
        req->ucx_data = m->data;
        return RDMX_INPROGRESS;
    }
    return RDMX_OK;
}

/* --- handshake ------------------------------------------------------------ */

static void send_welcome(conn_t *c, uint64_t id)
{
    rdmx_rpc_server_t *s = c->sw->srv;
    rdmx_rpc_welcome_t wl = {0};
    size_t size = rdmx_rpc_welcome_size(s->nhandlers);
    unsigned char *body = malloc(size);
    rdmx_rpc_hdr_t h;

    if (body == NULL)
        return;
    wl.credits = s->credits;
    wl.worker = c->sw->index;
    wl.max_message = s->max_message;
    wl.nhandlers = s->nhandlers;
    rdmx_rpc_welcome_encode(&wl, s->wl_ids, s->wl_flags, body);
    rdmx__rpc_hdr(&h, RDMX_RPC_MSG_WELCOME, 0, id);
    h.aux = (uint32_t)size;
    c->state = CONN_READY;
    rdmx__rpc_send(c->ep, &h, body, size);
    free(body);
}

/* --- rings (docs/RPC_RINGS.md) ---------------------------------------------
 */

/* The connection's rings go: nothing more is read or written there (a
 * late write of the client's lands in memory nobody reads). */
static void ring_drop(conn_t *c)
{
    server_worker_t *sw = c->sw;

    if (c->ring_mr == NULL)
        return;
    rdmx_mem_deregister(c->ring_mr);
    c->ring_mr = NULL;
    c->ring.base = c->ans.base = NULL;
    sw->rings[c->ring_index] = NULL;
    while (sw->nrings > 0 && sw->rings[sw->nrings - 1] == NULL)
        sw->nrings--;
    if (sw->nrings == 0)
        rdmx__poller_del(sw->w, &sw->poller);
}

/* Offer the client rings for its requests and their answers (RING),
 * where the transport is shared memory and the worker polls fewer than
 * SRV_RINGS_MAX; else the connection keeps messages alone. */
static void ring_offer(conn_t *c)
{
    server_worker_t *sw = c->sw;
    unsigned char desc[RDMX_RING_DESC_MAX];
    size_t len = 0;
    rdmx_rpc_hdr_t h;
    unsigned i;

    if (rdmx_ep_transport(c->ep) != RDMX_TRANSPORT_SHM)
        return;
    for (i = 0; i < sw->srv->max_rings && sw->rings[i] != NULL; i++)
        ;
    if (i == sw->srv->max_rings)
        return;
    if (rdmx__rings_create(sw->srv->ctx, &c->ring_mr, &c->ring, &c->ans, desc,
                           sizeof(desc), &len) != RDMX_OK) {
        rdmx_debug("rpc: no ring for %s: %s", c->peer, rdmx_error_detail());
        return;
    }
    if (sw->nrings == 0)
        rdmx__poller_add(sw->w, &sw->poller);
    sw->rings[i] = c;
    c->ring_index = i;
    if (i >= sw->nrings)
        sw->nrings = i + 1;
    rdmx__rpc_hdr(&h, RDMX_RPC_MSG_RING, 0, 0);
    h.aux = (uint32_t)len;
    if (rdmx__rpc_send(c->ep, &h, desc, len) != RDMX_OK)
        ring_drop(c);
}

/* Run the requests written into the worker's rings since the last look,
 * up to SRV_RING_BURST per ring (the worker's poller: a progress pass);
 * returns how many records it took. */
static unsigned ring_take(conn_t *c, unsigned max);

static unsigned rings_poll(rdmx_poller_t *p)
{
    server_worker_t *sw = rdmx_container_of(p, server_worker_t, poller);
    unsigned n = 0;

    for (unsigned i = 0; i < sw->nrings; i++) {
        conn_t *c = sw->rings[i];

        if (c == NULL)
            continue;
        c->refs++; /* (a handler may close it) */
        n += ring_take(c, SRV_RING_BURST);
        conn_put(c);
    }
    return n;
}

/* Run up to @max records of @c's ring, in order, each only once the
 * messages sent before it were taken; returns how many it took. The
 * caller holds a reference to @c: a handler may close it (then it stops). */
static unsigned ring_take(conn_t *c, unsigned max)
{
    server_worker_t *sw = c->sw;
    unsigned n = 0;
    uint64_t now = 0;
    char why[160];

    /* the answers this pass writes into the client's ring share one fence
     * (rdmx__ring_settle below) */
    c->ans.defer = 1;
    while (n < max) {
        rdmx_rpc_msg_t m;
        uint32_t after = 0;
        int r = rdmx__ring_read(&c->ring, RDMX_RPC_MSG_REQUEST, &m,
                                sw->ring_rec, &after, why, sizeof(why));

        if (r == 0 || (r > 0 && (int32_t)(after - c->msgs_in) > 0))
            break; /* not written, or its messages are still on the way */
        rdmx__ring_consume(&c->ring);
        n++;
        if (r < 0) {
            rdmx__server_on_bad(&c->link, c->ep, &m.h, why);
        } else {
            STAT_INC(sw, ring_requests);
            m.at_ns = now = rdmx__worker_enter(sw->w, now);
            on_request(c, &m);
        }
        if (c->ep == NULL || c->ring_mr == NULL)
            break; /* closed by the handler */
    }
    c->ans.defer = 0;
    if (rdmx__ring_settle(&c->ans) && c->ep != NULL)
        rdmx__rpc_send_ctl(c->ep, RDMX_RPC_MSG_WAKE, 0, 0);
    return n;
}

/* The worker is about to sleep (@on), or polls again: every ring's
 * sleeping word. */
static void rings_doze(rdmx_poller_t *p, int on)
{
    server_worker_t *sw = rdmx_container_of(p, server_worker_t, poller);

    for (unsigned i = 0; i < sw->nrings; i++)
        if (sw->rings[i] != NULL)
            rdmx__ring_sleeping(&sw->rings[i]->ring, on);
}

/* After the marks and the heavy fence: 1 when a record already waits. */
static int rings_waiting(rdmx_poller_t *p)
{
    server_worker_t *sw = rdmx_container_of(p, server_worker_t, poller);
    int waiting = 0;

    for (unsigned i = 0; i < sw->nrings; i++)
        if (sw->rings[i] != NULL)
            waiting |=
                rdmx__ring_pending(&sw->rings[i]->ring, sw->rings[i]->msgs_in);
    return waiting;
}

static void on_hello(conn_t *c, rdmx_rpc_msg_t *m)
{
    const unsigned char *p = m->data;
    uint32_t features = 0;

    if (c->state == CONN_HELLO && m->h.aux == RDMX_RPC_HELLO_SIZE &&
        m->h.payload == 0)
        features = rdmx_get_le32(p);
    if (c->state != CONN_HELLO || m->h.aux != RDMX_RPC_HELLO_SIZE ||
        m->h.payload != 0 || (features & ~RDMX_RPC_HELLO_F_KNOWN) != 0) {
        STAT_INC(c->sw, malformed);
        send_error(c, m->h.id, 0, RDMX_ERR_PROTO,
                   "HELLO: unexpected, or %u bytes with unknown features "
                   "set",
                   m->h.aux);
        return;
    }
    /* (the ring first: the channel has it when WELCOME makes it ready) */
    if (features & RDMX_RPC_HELLO_F_RINGS)
        ring_offer(c);
    send_welcome(c, m->h.id);
}

/* --- connections ----------------------------------------------------------- */

static void conn_ep_error(rdmx_ep_t *ep, rdmx_status_t status, void *arg);
static void server_accept(rdmx_ep_t *ep, void *arg);

static server_worker_t *worker_of(rdmx_rpc_server_t *s, rdmx_worker_t *w)
{
    for (unsigned i = 0; i < s->nworkers; i++)
        if (s->workers[i].w == w)
            return &s->workers[i];
    return NULL;
}

static conn_t *conn_create(rdmx_ep_t *ep, rdmx_rpc_server_t *s)
{
    server_worker_t *sw = worker_of(s, rdmx_ep_worker(ep));
    conn_t *c;

    if (sw == NULL)
        return NULL;
    if (__atomic_add_fetch(&s->conns_now, 1, __ATOMIC_RELAXED) >
        s->max_connections) {
        __atomic_sub_fetch(&s->conns_now, 1, __ATOMIC_RELAXED);
        STAT_INC(sw, connections_refused);
        rdmx_warn("rpc: refusing %s: %u connections open", rdmx__ep_peer(ep),
                  s->max_connections);
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || rdmx_ptrmap_init(&c->deferred) != 0) {
        free(c);
        __atomic_sub_fetch(&s->conns_now, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    c->link.role = RDMX_RPC_LINK_SERVER;
    c->sw = sw;
    c->ep = ep;
    c->refs = 1; /* the connection's own */
    c->state = CONN_HELLO;
    rdmx_list_init(&c->waiting);
    snprintf(c->peer, sizeof(c->peer), "%s", rdmx__ep_peer(ep));
    rdmx_list_insert_tail(&sw->conns, &c->node);
    STAT_INC(sw, connections_total);
    rdmx__ep_set_upper(ep, c);
    return c;
}

/* Close and forget a connection; requests still held keep the record. */
static void conn_close(conn_t *c)
{
    rdmx_ep_t *ep = c->ep;
    rdmx_list_t *e;

    if (ep == NULL)
        return;
    ring_drop(c);
    dcache_clear(c);
    /* Requests waiting to be received: their descriptors go back while
     * the endpoint still exists; nothing to answer (the link is gone). */
    while ((e = rdmx_list_pop(&c->waiting)) != NULL) {
        rdmx_rpc_req_t *req = rdmx_container_of(e, rdmx_rpc_req_t, link);
        c->nwaiting--;
        req->answered = 1;
        RDMX_COUNT_ADD(c->sw->counters[req->hidx].errors, 1);
        req_release(req);
        c->refs--; /* (the connection's own reference keeps it) */
    }
    rdmx__ep_set_upper(ep, NULL);
    c->ep = NULL;
    rdmx_list_del(&c->node);
    __atomic_sub_fetch(&c->sw->srv->conns_now, 1, __ATOMIC_RELAXED);
    rdmx_ep_close(ep);
    conn_put(c);
}

rdmx_rpc_link_t *rdmx__server_link_for(rdmx_ep_t *ep)
{
    void *srv;
    conn_t *c;

    /* A message that came before the accept callback ran: take the
     * endpoint now; failures reach conn_ep_error from here on. */
    if (!rdmx__ep_adopt(ep, server_accept, &srv))
        return NULL;
    c = conn_create(ep, srv);
    /* (refused: the accept event, which still comes, closes it) */
    return c != NULL ? &c->link : NULL;
}

static void server_accept(rdmx_ep_t *ep, void *arg)
{
    if (rdmx__ep_upper(ep) != NULL)
        return; /* set up by its first message */
    if (conn_create(ep, arg) == NULL)
        rdmx_ep_close(ep);
}

static void conn_ep_error(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    conn_t *c = rdmx__ep_upper(ep);

    (void)arg;
    (void)status;
    if (c != NULL)
        conn_close(c);
    else
        rdmx_ep_close(ep);
}

static rdmx_rpc_req_t *waiting_find(conn_t *c, uint64_t id)
{
    rdmx_list_t *e;

    rdmx_list_for_each(e, &c->waiting)
    {
        rdmx_rpc_req_t *req = rdmx_container_of(e, rdmx_rpc_req_t, link);
        if (req->id == id && !req->oneway)
            return req;
    }
    return NULL;
}

rdmx_status_t rdmx__server_on_msg(rdmx_rpc_link_t *link, rdmx_ep_t *ep,
                                 rdmx_rpc_msg_t *m)
{
    conn_t *c = (conn_t *)link;
    rdmx_rpc_req_t *req;

    (void)ep;
    if (m->rndv && m->h.kind != RDMX_RPC_MSG_REQUEST &&
        m->h.kind != RDMX_RPC_MSG_ONEWAY) {
        STAT_INC(c->sw, malformed);
        send_error(c, m->h.id, m->h.handler, RDMX_ERR_PROTO,
                   "message of kind %u too large", m->h.kind);
        return RDMX_OK;
    }
    switch (m->h.kind) {
    case RDMX_RPC_MSG_REQUEST:
    case RDMX_RPC_MSG_ONEWAY:
        /* Records its client wrote before sending this run first (the
         * client wrote them before it sent this: they are visible). */
        if (c->ring_mr != NULL) {
            int gone;

            c->refs++; /* (a handler may close it) */
            ring_take(c, RDMX_RING_SLOTS);
            gone = c->ep == NULL;
            conn_put(c);
            if (gone)
                return RDMX_OK; /* (nothing to answer on) */
        }
        c->msgs_in++;
        return on_request(c, m);
    case RDMX_RPC_MSG_CANCEL:
        req = rdmx_ptrmap_get(&c->deferred, (void *)(uintptr_t)m->h.id);
        if (req == NULL) /* (or one waiting to be received: at most credits) */
            req = waiting_find(c, m->h.id);
        if (req != NULL && !req->canceled) {
            req->canceled = 1;
            STAT_INC(c->sw, canceled);
        }
        return RDMX_OK;
    case RDMX_RPC_MSG_PING:
        STAT_INC(c->sw, pings);
        rdmx__rpc_send_ctl(c->ep, RDMX_RPC_MSG_PONG, m->h.id, 0);
        return RDMX_OK;
    case RDMX_RPC_MSG_HELLO:
        on_hello(c, m);
        return RDMX_OK;
    case RDMX_RPC_MSG_WAKE:
        return RDMX_OK; /* (it woke the worker: the ring's record is next) */
    default:
        STAT_INC(c->sw, malformed);
        send_error(c, m->h.id, m->h.handler, RDMX_ERR_PROTO,
                   "a server does not take messages of kind %u", m->h.kind);
        return RDMX_OK;
    }
}

void rdmx__server_on_bad(rdmx_rpc_link_t *link, rdmx_ep_t *ep,
                         const rdmx_rpc_hdr_t *h, const char *why)
{
    conn_t *c = (conn_t *)link;

    (void)ep;
    STAT_INC(c->sw, malformed);
    rdmx_debug("rpc: malformed message from %s: %s", c->peer, why);
    if (h->kind != RDMX_RPC_MSG_ONEWAY && h->kind != RDMX_RPC_MSG_ERROR &&
        h->kind != RDMX_RPC_MSG_RESPONSE)
        send_error(c, h->id, h->handler, RDMX_ERR_PROTO, "malformed: %s",
                   why);
}

/* --- built-in handlers ------------------------------------------------------ */

static void h_ping(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const void *data = rdmx_rpc_req_data(req, &len);

    (void)arg;
    rdmx_rpc_respond(req, data, len);
}

static void h_stats(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_rpc_server_t *s = arg;
    rdmx_rpc_server_stats_t st;
    rdmx_rpc_metrics_t *m;
    unsigned n, i;
    size_t cap = 4096, off = 0;
    char *out;

    rdmx_rpc_server_stats(s, &st);
    n = s->nhandlers;
    m = calloc(n ? n : 1, sizeof(*m));
    cap += (size_t)n * 200;
    out = malloc(cap);
    if (m == NULL || out == NULL) {
        free(m);
        free(out);
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    rdmx_rpc_server_metrics(s, m, n);
    off += (size_t)snprintf(out + off, cap - off, "workers %u\n",
                            s->nworkers);
#define LINE(f, src)                                                         \
    off += (size_t)snprintf(out + off, cap - off, "%s %llu\n", #f,          \
                            (unsigned long long)st.f);
    SERVER_STATS(LINE)
#undef LINE
    off += (size_t)snprintf(out + off, cap - off,
                            "%-24s %10s %8s %8s %12s %12s %9s %9s %9s "
                            "%9s\n",
                            "handler", "calls", "errors", "timeouts",
                            "bytes_in", "bytes_out", "p50_us", "p99_us",
                            "p999_us", "max_us");
    for (i = 0; i < n && off < cap; i++)
        off += (size_t)snprintf(
            out + off, cap - off,
            "%-24s %10llu %8llu %8llu %12llu %12llu %9.1f %9.1f %9.1f "
            "%9.1f\n",
            m[i].name, (unsigned long long)m[i].calls,
            (unsigned long long)m[i].errors,
            (unsigned long long)m[i].timeouts,
            (unsigned long long)m[i].bytes_in,
            (unsigned long long)m[i].bytes_out, m[i].p50_ns / 1e3,
            m[i].p99_ns / 1e3, m[i].p999_ns / 1e3, m[i].max_ns / 1e3);
    if (off > cap)
        off = cap;
    rdmx_rpc_respond(req, out, off);
    free(out);
    free(m);
}

/* --- workers ---------------------------------------------------------------- */

static void worker_shutdown(server_worker_t *sw)
{
    rdmx_list_t *pos, *tmp;

    /* The listener (worker 0's) refuses new connections from now on; it
     * goes with rdmx_worker_destroy(worker 0). */
    if (sw->index == 0 && sw->srv->listener != NULL)
        rdmx__listener_pause(sw->srv->listener);
    rdmx_list_for_each_safe(pos, tmp, &sw->conns)
    {
        conn_t *c = rdmx_container_of(pos, conn_t, node);
        /* Requests still deferred are answered CANCELED and freed. */
        while (c->deferred.count > 0) {
            rdmx_rpc_req_t *req = NULL;
            for (size_t i = 0; i <= c->deferred.mask && req == NULL; i++)
                if (c->deferred.slots[i].key != NULL)
                    req = c->deferred.slots[i].value;
            if (req == NULL)
                break;
            /* (answer removes req from c->deferred before it frees it: the
             * analyzer loses track) */
            /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
            answer(req, RDMX_ERR_CANCELED, NULL, 0,
                   "the server is shutting down");
        }
        conn_close(c);
    }
}

/*
 * Adaptive polling: after the last work, poll for twice the context's spin
 * time (100 us by default; RDMX_SPIN_US=0: none) while holding a polling
 * slot (src/core/spin.c; none free: over tcp sleep at once, over shared
 * memory and RDMA take turns for that time), then sleep on the worker's
 * fd.
 */
/* Idle for less than @spin_ns since *@since (0: from now on)? */
static int within_spin(uint64_t *since, uint64_t spin_ns)
{
    uint64_t now = rdmx_now_ns();

    if (*since == 0)
        *since = now;
    return rdmx_since(now, *since) < spin_ns;
}

static void *worker_main(void *arg)
{
    server_worker_t *sw = arg;
    rdmx_rpc_server_t *s = sw->srv;
    /* (0: work lately; the idle time counts from the first check after) */
    uint64_t last_work = 0, spin_ns = 2 * rdmx__context_spin_ns(s->ctx);
    unsigned spins = 0;
    rdmx_spin_slot_t slot = {.index = RDMX_SPIN_NONE};
    int asked = 0, polls = 0, turned = 0, worked = 0;
    int yields = rdmx__context_poll_yields(s->ctx); /* (tcp) */

    rdmx__thread_name("rdmx-rpc", (int)sw->index);
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        if (rdmx_worker_progress(sw->w) > 0) {
            spins = 0;
            last_work = 0; /* (no clock read per busy pass) */
            turned = 0;    /* (a new idle spell comes) */
            worked = 1;
            continue;
        }
        if (s->poll == RDMX_RPC_POLL_BUSY)
            continue;
        if (s->poll == RDMX_RPC_POLL_ADAPTIVE && spin_ns != 0) {
            /* polls on only while it holds a polling slot */
            if (!asked) {
                asked = 1;
                polls = rdmx__spin_claim((unsigned)sw->index,
                                         (yields ? RDMX_SPIN_YIELDS : 0) |
                                             (turned ? RDMX_SPIN_AGAIN : 0) |
                                             (worked ? 0 : RDMX_SPIN_IDLE),
                                         &slot);
            }
            if (polls) {
                if ((++spins & 63) != 0) {
                    if (slot.turns) /* (the host is crowded) */
                        sched_yield();
                    continue;
                }
                polls = rdmx__spin_confirm(&slot);
                if (polls && within_spin(&last_work, spin_ns))
                    continue;
            } else if (!yields && within_spin(&last_work, spin_ns)) {
                /* No slot over shared memory or RDMA: take turns, as a
                 * waiting caller does (docs/CORE.md, "Taking turns"). */
                sched_yield();
                asked = 0; /* (the slots again at the next idle pass) */
                turned = 1;
                continue;
            }
        }
        rdmx__spin_release(&slot);
        asked = 0;
        rdmx__worker_sleep(sw->w, rdmx_now_ns() + 100 * 1000000ull);
        last_work = 0;
        turned = 0;
        worked = 0; /* (a timer's wake-up brings no work) */
    }
    rdmx__spin_release(&slot);
    worker_shutdown(sw);
    return NULL;
}

/* --- server ------------------------------------------------------------------- */

rdmx_status_t rdmx_rpc_server_create(rdmx_context_t *ctx,
                                     const rdmx_rpc_server_params_t *p,
                                     rdmx_rpc_server_t **server_p)
{
    rdmx_rpc_server_t *s;
    uint64_t f = p ? p->field_mask : 0;
    long ncpu;

    if (ctx == NULL || server_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "rpc server: NULL argument");
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "rpc server: out of memory");
    s->ctx = ctx;
    snprintf(s->address, sizeof(s->address), "%s",
             (f & RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS) && p->address
                 ? p->address
                 : SRV_DEFAULT_ADDRESS);
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    s->nworkers = (f & RDMX_RPC_SERVER_PARAM_FIELD_WORKERS) && p->workers
                      ? p->workers
                      : (unsigned)(ncpu > 0 ? ncpu : 1);
    s->max_connections = (f & RDMX_RPC_SERVER_PARAM_FIELD_MAX_CONNECTIONS) &&
                                 p->max_connections
                             ? p->max_connections
                             : SRV_DEFAULT_CONNS;
    s->credits = (f & RDMX_RPC_SERVER_PARAM_FIELD_CREDITS) && p->credits
                     ? p->credits
                     : SRV_DEFAULT_CREDITS;
    s->max_message = (f & RDMX_RPC_SERVER_PARAM_FIELD_MAX_MESSAGE) && p->max_message
                         ? p->max_message
                         : SRV_DEFAULT_MAX_MSG;
    if (s->max_message > UINT32_MAX - 4096)
        s->max_message = UINT32_MAX - 4096;
    s->max_receiving =
        (f & RDMX_RPC_SERVER_PARAM_FIELD_MAX_RECEIVING) && p->max_receiving
            ? p->max_receiving
            : 4 * s->max_message;
    /* (at least one largest payload with a bulk table beside it) */
    if (s->max_receiving < s->max_message + SRV_AUX_SLACK)
        s->max_receiving = s->max_message + SRV_AUX_SLACK;
    s->max_inflight = (f & RDMX_RPC_SERVER_PARAM_FIELD_MAX_INFLIGHT) &&
                              p->max_inflight
                          ? p->max_inflight
                          : SRV_DEFAULT_INFLIGHT;
    s->poll = (f & RDMX_RPC_SERVER_PARAM_FIELD_POLL) ? p->poll
                                                : RDMX_RPC_POLL_ADAPTIVE;
    s->max_rings =
        (f & RDMX_RPC_SERVER_PARAM_FIELD_RINGS) ? p->rings : SRV_RINGS_MAX;
    if (s->nworkers > 1024 || s->poll > RDMX_RPC_POLL_SLEEP ||
        s->max_rings > SRV_RINGS_MAX) {
        rdmx_status_t st = rdmx__error(
            RDMX_ERR_INVALID,
            "rpc server: %u workers, poll mode %d, %u rings per worker "
            "(at most %u)",
            s->nworkers, (int)s->poll, s->max_rings, SRV_RINGS_MAX);
        free(s);
        return st;
    }
    if ((f & RDMX_RPC_SERVER_PARAM_FIELD_AUTH_SECRET) && p->auth_secret != NULL &&
        p->auth_secret_len > 0) {
        s->secret = malloc(p->auth_secret_len);
        if (s->secret == NULL) {
            free(s);
            return rdmx__error(RDMX_ERR_NO_MEMORY, "rpc server: out of "
                                                   "memory");
        }
        memcpy(s->secret, p->auth_secret, p->auth_secret_len);
        s->secret_len = p->auth_secret_len;
    }
    *server_p = s;
    return RDMX_OK;
}

rdmx_status_t rdmx_rpc_server_start(rdmx_rpc_server_t *s)
{
    rdmx_listener_params_t lp = {0};
    rdmx_worker_params_t wp = {.field_mask = RDMX_WORKER_PARAM_FIELD_FLAGS};
    rdmx_worker_t **ws = NULL;
    rdmx_status_t st;
    unsigned i;

    if (s == NULL || s->started)
        return rdmx__error(RDMX_ERR_INVALID, "rpc server: NULL or started");
    if ((st = add_handler(s, "rdmx.stats", h_stats, s, RDMX_RPC_IDEMPOTENT)) ||
        (st = add_handler(s, "rdmx.ping", h_ping, s, RDMX_RPC_IDEMPOTENT)) ||
        (st = build_slots(s)))
        return st;
    if (s->poll == RDMX_RPC_POLL_BUSY)
        wp.flags = RDMX_WORKER_FLAG_BUSY_POLL; /* (its workers never sleep) */
    s->workers = calloc(s->nworkers, sizeof(*s->workers));
    ws = calloc(s->nworkers, sizeof(*ws));
    if (s->workers == NULL || ws == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "rpc server: out of memory");
        goto err;
    }
    for (i = 0; i < s->nworkers; i++) {
        server_worker_t *sw = &s->workers[i];
        sw->srv = s;
        sw->index = i;
        sw->poller.poll = rings_poll;
        sw->poller.doze = rings_doze;
        sw->poller.waiting = rings_waiting;
        sw->poller.fenced = rdmx__peer_fence_ready(); /* (ring.c) */
        rdmx_list_init(&sw->conns);
        rdmx_list_init(&sw->pool);
        sw->counters = calloc(s->nhandlers, sizeof(*sw->counters));
        if (sw->counters == NULL) {
            st = rdmx__error(RDMX_ERR_NO_MEMORY, "rpc server: out of memory");
            goto err;
        }
        if ((st = rdmx_worker_create(s->ctx, &wp, &sw->w)) != RDMX_OK ||
            (st = rdmx__rpc_attach(sw->w)) != RDMX_OK)
            goto err;
        ws[i] = sw->w;
    }
    lp.field_mask = RDMX_LISTENER_PARAM_FIELD_ADDRESS |
                    RDMX_LISTENER_PARAM_FIELD_ACCEPT_CB |
                    RDMX_LISTENER_PARAM_FIELD_EP_PARAMS |
                    RDMX_LISTENER_PARAM_FIELD_WORKERS |
                    RDMX_LISTENER_PARAM_FIELD_MAX_CONNECTIONS;
    lp.max_connections = s->max_connections;
    if (s->secret != NULL) {
        lp.field_mask |= RDMX_LISTENER_PARAM_FIELD_AUTH_SECRET;
        lp.auth_secret = s->secret;
        lp.auth_secret_len = s->secret_len;
    }
    lp.address = s->address;
    lp.accept_cb = server_accept;
    lp.arg = s;
    lp.ep_params.field_mask = RDMX_EP_PARAM_FIELD_ERROR_CB;
    lp.ep_params.error_cb = conn_ep_error;
    lp.workers = ws;
    lp.nworkers = s->nworkers;
    if ((st = rdmx_listener_create(s->workers[0].w, &lp, &s->listener)) !=
        RDMX_OK)
        goto err;
    s->port = rdmx_listener_port(s->listener);
    s->started = 1;
    for (i = 0; i < s->nworkers; i++) {
        if (pthread_create(&s->workers[i].thread, NULL, worker_main,
                           &s->workers[i]) != 0) {
            st = rdmx__error(RDMX_ERR_NO_RESOURCE, "rpc server: cannot start "
                                                   "worker thread %u",
                             i);
            __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
            goto err;
        }
        s->workers[i].running = 1;
    }
    free(ws);
    rdmx_debug("rpc server: listening on port %u with %u workers", s->port,
               s->nworkers);
    return RDMX_OK;

err:
    free(ws);
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    for (i = 0; s->workers != NULL && i < s->nworkers; i++) {
        if (s->workers[i].running) {
            rdmx_worker_signal(s->workers[i].w);
            pthread_join(s->workers[i].thread, NULL);
            s->workers[i].running = 0;
        }
    }
    if (s->listener != NULL) {
        rdmx_listener_destroy(s->listener);
        s->listener = NULL;
    }
    for (i = 0; s->workers != NULL && i < s->nworkers; i++) {
        if (s->workers[i].w != NULL)
            rdmx_worker_destroy(s->workers[i].w);
        free(s->workers[i].counters);
    }
    free(s->workers);
    s->workers = NULL;
    s->nhandlers -= 2;
    s->started = 0;
    s->stop = 0;
    return st;
}

uint16_t rdmx_rpc_server_port(const rdmx_rpc_server_t *s)
{
    return s->port;
}

unsigned rdmx_rpc_server_workers(const rdmx_rpc_server_t *s)
{
    return s->nworkers;
}

void rdmx_rpc_server_destroy(rdmx_rpc_server_t *s)
{
    if (s == NULL)
        return;
    if (s->started) {
        __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
        for (unsigned i = 0; i < s->nworkers; i++)
            rdmx_worker_signal(s->workers[i].w);
        for (unsigned i = 0; i < s->nworkers; i++)
            pthread_join(s->workers[i].thread, NULL);
        /* Worker 0 first: destroying it destroys the listener, which
         * rejects the requests it handed to the other workers. */
        s->listener = NULL;
        for (unsigned i = 0; i < s->nworkers; i++) {
            server_worker_t *sw = &s->workers[i];
            rdmx_list_t *e;
            rdmx_worker_destroy(sw->w);
            while ((e = rdmx_list_pop(&sw->pool)) != NULL)
                free(rdmx_container_of(e, rdmx_rpc_req_t, link));
            free(sw->counters);
        }
        free(s->workers);
    }
    free(s->handlers);
    free(s->slots);
    free(s->wl_ids);
    free(s->wl_flags);
    if (s->secret != NULL) {
        memset(s->secret, 0, s->secret_len);
        free(s->secret);
    }
    free(s);
}

void rdmx_rpc_server_stats(rdmx_rpc_server_t *s,
                           rdmx_rpc_server_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (s == NULL || !s->started)
        return;
    for (unsigned i = 0; i < s->nworkers; i++) {
        const worker_stats_t *w = &s->workers[i].stats;
#define ADD_WORKER(f) out->f += __atomic_load_n(&w->f, __ATOMIC_RELAXED);
#define ADD_SERVER(f)
#define ADD(f, src) ADD_##src(f)
        SERVER_STATS(ADD)
#undef ADD
#undef ADD_SERVER
#undef ADD_WORKER
    }
    out->connections = __atomic_load_n(&s->conns_now, __ATOMIC_RELAXED);
    /* Refused by the listener before any connection existed. */
    if (s->listener != NULL) {
        out->connections_refused += rdmx__listener_refused(s->listener);
        /* (authentication is the listener's: docs/SECURITY.md) */
        out->auth_failed = rdmx__listener_auth_failed(s->listener);
    }
}

unsigned rdmx_rpc_server_metrics(rdmx_rpc_server_t *s,
                                 rdmx_rpc_metrics_t *out, unsigned max)
{
    rdmx_rpc_counters_t *sum;

    if (s == NULL || !s->started)
        return 0;
    sum = malloc(sizeof(*sum));
    if (sum == NULL)
        return 0;
    for (unsigned k = 0; k < s->nhandlers && k < max; k++) {
        memset(sum, 0, sizeof(*sum));
        for (unsigned i = 0; i < s->nworkers; i++)
            rdmx__counters_merge(sum, &s->workers[i].counters[k]);
        rdmx__counters_export(sum, s->handlers[k].name, &out[k]);
    }
    free(sum);
    return s->nhandlers;
}

int rdmx__rpc_server_counters(rdmx_rpc_server_t *s, unsigned k,
                              rdmx_rpc_counters_t *out, const char **name_p)
{
    if (s == NULL || !s->started || k >= s->nhandlers)
        return 0;
    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i < s->nworkers; i++)
        rdmx__counters_merge(out, &s->workers[i].counters[k]);
    *name_p = s->handlers[k].name;
    return 1;
}

rdmx_context_t *rdmx__rpc_server_context(const rdmx_rpc_server_t *s)
{
    return s->ctx;
}
