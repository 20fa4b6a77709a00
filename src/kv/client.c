/*
 * KV client: channels to the servers, jump-hash sharding with replicas, and
 * the kv.* calls (requests encoded by proto.c). Every operation is a kv_op_t:
 * one RPC call per server it touches. The non-blocking forms start its
 * calls at once (op_start); the blocking forms build the same op and run it
 * with the one wait, op_wait, which starts the calls one after the other
 * and progresses the worker (or sleeps, with a progress thread) until each
 * ended.
 */
#include <rdmx/kv.h>

#include "core/upper.h"
#include "kv/proto.h"
#include "lambda/lambda_int.h"
#include "rpc/internal.h"
#include "util/bufcache.h"
#include "util/endian.h"
#include "util/fence.h"
#include "util/hash.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_MAX_SERVERS 1024

/* Over tcp a PUT sends its value inline up to this size, which fits one
 * of the transport's 260 KiB segments with its headers, and lends it above
 * (the server pulls it with a carried read, straight into the item). With
 * the value sent from the caller's buffer (rdmx__call_direct), inline is
 * 1.4x as fast as lending at 192 KiB with 8 clients; at 512 KiB and 1 MiB
 * the two are even (docs/PERFORMANCE.md, "Requests sent from the caller's
 * buffer"). A GET over tcp is answered inline at any size. */
#define KV_TCP_INLINE_MAX ((size_t)256 * 1024)

/* Over shared memory a server's pull of a value in rdmx_mem_alloc memory
 * is its own copy out of the client's buffer, which it maps: no round
 * trip. The request then fits a ring record (docs/RPC_RINGS.md), where an
 * inline value of more than this goes by message. So, unless the caller
 * set inline_max, such a value above this is lent: 4 KiB SETs with one
 * client 1.14-1.38x as fast, with 8 clients even; 1 KiB 1.07-1.10x
 * (docs/PERFORMANCE.md, "SETs lent over shared memory"). */
#define KV_MAPPED_INLINE_MAX ((size_t)128)

/* A blocking PUT over shared memory of a value from plain memory, of this
 * size up to KV_BOUNCE_MAX, is copied by the client into a registered
 * buffer of its own and lent from there: the client's copy and the
 * server's pull (its own copy, written around the cache) cost less than
 * the value going inline through UCX's rendezvous (docs/PERFORMANCE.md,
 * "Plain-buffer SETs over shared memory"). The buffer is kept for the
 * next PUT: one per client, the size of the largest value so far (at
 * least KV_BOUNCE_MIN, a power of two). */
#define KV_BOUNCE_MIN ((size_t)64 * 1024)
#define KV_BOUNCE_MAX ((size_t)16 * 1024 * 1024)

/*
 * A server's store as this client maps it, for mapped GETs (docs/KV.md,
 * "Mapped GETs over shared memory"). GETs ask for its descriptor until
 * one answer brought it; kept only where the transport maps it. Guarded
 * by the worker's lock.
 */
typedef struct {
    rdmx_rmem_t *rm;           /* the store's descriptor; NULL: none */
    rdmx_ep_t *ep;             /* the connection it came on */
    const unsigned char *base; /* where the store is mapped here */
    uint64_t len;
    uint64_t id;           /* the store's id */
    rdmx_ep_t *refused_ep; /* no map on this connection */
} kv_map_t;

/* Forget server @m's map (its connection changed, or it named another
 * store). Worker's lock held. */
static void map_drop(kv_map_t *m)
{
    if (m->rm != NULL)
        rdmx_rmem_destroy(m->rm);
    m->rm = NULL;
    m->base = NULL;
}

struct rdmx_kv {
    rdmx_worker_t *w;
    unsigned n;
    unsigned replicas;
    int timeout_ms;
    size_t inline_max;
    int inline_max_set; /* by the caller: kept over shared memory too */
    rdmx_mr_t *bounce;  /* a blocking PUT's copy of a plain value, lent
                           (KV_BOUNCE_MIN); NULL until the first */
    int bounce_busy;    /* (atomic) a PUT is using it */
    int tcp;            /* tcp: one-sided access is carried over
                           messages (docs/SECURITY.md), so lending pays
                           only for large PUTs (below) */
    /* The largest value a server answered inline to a GET that lent its
     * buffer: at most that server's inline threshold, so a GET into a
     * buffer no larger would be answered inline too, and lends nothing
     * (get_msg). Read and written without the worker's lock: a lost
     * update only costs a lent buffer that was not needed. */
    size_t get_inline_seen;
    kv_map_t *map; /* per server */
    rdmx_channel_t **ch;
    char **addr;
};

/* --- placement ------------------------------------------------------------ */

/* Jump consistent hash (Lamping and Veach, 2014): bucket of @key among @n,
 * moving only 1/n of the keys when a bucket is added. */
static unsigned jump_hash(uint64_t key, unsigned n)
{
    int64_t b = -1, j = 0;

    while (j < (int64_t)n) {
        b = j;
        key = key * 2862933555777941757ull + 1;
        j = (int64_t)((double)(b + 1) *
                      ((double)(1ll << 31) / (double)((key >> 33) + 1)));
    }
    return (unsigned)b;
}

static uint64_t key_hash(const void *key, size_t klen)
{
    return rdmx_mix64(rdmx_fnv1a64(key, klen));
}

unsigned rdmx_kv_server_of(const rdmx_kv_t *kv, const void *key, size_t klen)
{
    if (kv->n == 1) /* (what jump_hash gives for one: no key to hash) */
        return 0;
    return jump_hash(key_hash(key, klen), kv->n);
}

unsigned rdmx_kv_servers(const rdmx_kv_t *kv)
{
    return kv->n;
}

rdmx_channel_t *rdmx_kv_channel(rdmx_kv_t *kv, unsigned index)
{
    return index < kv->n ? kv->ch[index] : NULL;
}

static int server_up(rdmx_kv_t *kv, unsigned i)
{
    return rdmx_channel_state(kv->ch[i]) == RDMX_CHANNEL_READY &&
           rdmx_channel_breaker(kv->ch[i]) != RDMX_BREAKER_OPEN;
}

/* The replica to read @key from: the first one up, else the primary. */
static unsigned read_server(rdmx_kv_t *kv, const void *key, size_t klen)
{
    unsigned first = rdmx_kv_server_of(kv, key, klen);

    for (unsigned r = 0; r < kv->replicas; r++) {
        unsigned i = (first + r) % kv->n;
        if (server_up(kv, i))
            return i;
    }
    return first;
}

/* --- lifecycle ------------------------------------------------------------ */

rdmx_status_t rdmx_kv_create(rdmx_worker_t *w, const char *servers,
                             const rdmx_kv_params_t *p, rdmx_kv_t **kv_p)
{
    uint64_t f = p ? p->field_mask : 0;
    rdmx_channel_params_t cp = {0};
    rdmx_kv_t *kv;
    char *list, *save = NULL, *tok;
    rdmx_status_t st = RDMX_OK;

    if (w == NULL || servers == NULL || kv_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "kv: NULL argument");
    kv = calloc(1, sizeof(*kv));
    list = strdup(servers);
    if (kv == NULL || list == NULL) {
        free(kv);
        free(list);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv: out of memory");
    }
    kv->w = w;
    kv->tcp =
        rdmx__context_requested(rdmx__worker_context(w)) == RDMX_TRANSPORT_TCP;
    kv->replicas = (f & RDMX_KV_PARAM_FIELD_REPLICAS) && p->replicas ? p->replicas
                                                               : 1;
    kv->timeout_ms = (f & RDMX_KV_PARAM_FIELD_TIMEOUT) ? p->timeout_ms : 5000;
    kv->inline_max_set = (f & RDMX_KV_PARAM_FIELD_INLINE_MAX) != 0;
    kv->inline_max = kv->inline_max_set ? p->inline_max : 8192;
    kv->ch = calloc(KV_MAX_SERVERS, sizeof(*kv->ch));
    kv->addr = calloc(KV_MAX_SERVERS, sizeof(*kv->addr));
    kv->map = calloc(KV_MAX_SERVERS, sizeof(*kv->map));
    if (kv->ch == NULL || kv->addr == NULL || kv->map == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "kv: out of memory");
        goto err;
    }
    if ((f & RDMX_KV_PARAM_FIELD_CHANNEL) && p->channel != NULL)
        cp = *p->channel;
    /* A server pulling a large value is silent until done: a dead one is
     * found by the transport or the operation's own timeout. */
    if (!(cp.field_mask & RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT)) {
        cp.field_mask |= RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT;
        cp.heartbeat_ms = 250;
    }
    if (!(cp.field_mask & RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT)) {
        cp.field_mask |= RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT;
        cp.heartbeat_timeout_ms = kv->timeout_ms > 1000 ? kv->timeout_ms
                                                        : 1000;
    }
    /* this client's own members */
    cp.field_mask |= RDMX_CHANNEL_PARAM_FIELD_TIMEOUT |
                     RDMX_CHANNEL_PARAM_FIELD_WAIT_FOR_READY |
                     RDMX_CHANNEL_PARAM_FIELD_AUTH_SECRET;
    cp.timeout_ms = kv->timeout_ms;
    cp.wait_for_ready =
        (f & RDMX_KV_PARAM_FIELD_WAIT_FOR_READY) && p->wait_for_ready;
    cp.auth_secret = (f & RDMX_KV_PARAM_FIELD_AUTH_SECRET) ? p->auth_secret
                                                             : NULL;
    cp.auth_secret_len =
        (f & RDMX_KV_PARAM_FIELD_AUTH_SECRET) ? p->auth_secret_len : 0;
    for (tok = strtok_r(list, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (*tok == '\0')
            continue;
        if (kv->n == KV_MAX_SERVERS) {
            st = rdmx__error(RDMX_ERR_INVALID, "kv: more than %d servers",
                             KV_MAX_SERVERS);
            goto err;
        }
        kv->addr[kv->n] = strdup(tok);
        st = rdmx_channel_create(w, tok, &cp, &kv->ch[kv->n]);
        if (st != RDMX_OK)
            goto err;
        kv->n++;
    }
    if (kv->n == 0) {
        st = rdmx__error(RDMX_ERR_INVALID, "kv: no server in '%s'", servers);
        goto err;
    }
    if (kv->replicas > kv->n)
        kv->replicas = kv->n;
    free(list);
    *kv_p = kv;
    return RDMX_OK;
err:
    free(list);
    rdmx_kv_destroy(kv);
    return st;
}

void rdmx_kv_destroy(rdmx_kv_t *kv)
{
    if (kv == NULL)
        return;
    for (unsigned i = 0; i < KV_MAX_SERVERS && kv->ch != NULL; i++) {
        if (kv->ch[i] != NULL)
            rdmx_channel_destroy(kv->ch[i]);
        if (kv->addr != NULL)
            free(kv->addr[i]);
        if (kv->map != NULL)
            map_drop(&kv->map[i]);
    }
    if (kv->bounce != NULL)
        rdmx_mem_deregister(kv->bounce);
    free(kv->map);
    free(kv->ch);
    free(kv->addr);
    free(kv);
}

rdmx_status_t rdmx_kv_wait_ready(rdmx_kv_t *kv, int timeout_ms)
{
    for (unsigned i = 0; i < kv->n; i++) {
        rdmx_status_t st = rdmx_channel_wait_ready(kv->ch[i], timeout_ms);
        if (st != RDMX_OK)
            return st;
    }
    return RDMX_OK;
}

/* --- requests ------------------------------------------------------------- */

static rdmx_status_t check_key(size_t klen, const void *key)
{
    if (key == NULL || klen == 0 || klen > 65535)
        return rdmx__error(RDMX_ERR_INVALID, "kv: key of %zu bytes", klen);
    return RDMX_OK;
}

/* A request ready to go: its bytes (in `space`, or on the heap when
 * larger; encoded by proto.c) and the caller's buffer it lends, if any.
 * Never copied: `data` may point into it. */
typedef struct {
    unsigned char *data;
    size_t len;
    /* The request's last bytes in the caller's memory (a blocking PUT's
     * value), which the channel sends from there when that pays
     * (rdmx__call_direct); 0 bytes when all is in data. */
    const void *body;
    size_t body_len;
    rdmx_rpc_bulk_t bulk;
    unsigned nbulk; /* 0 or 1 */
    unsigned char space[1024];
} kv_msg_t;

static void msg_init(kv_msg_t *m)
{
    m->data = NULL;
    m->len = 0;
    m->body = NULL;
    m->body_len = 0;
    m->nbulk = 0;
}

/* Room for @len bytes of request; NULL when out of memory. */
static unsigned char *msg_alloc(kv_msg_t *m, size_t len)
{
    m->len = len;
    m->data = len <= sizeof(m->space) ? m->space : rdmx__buf_alloc(len);
    return m->data;
}

static void msg_free(kv_msg_t *m)
{
    if (m->data != m->space)
        rdmx__buf_free(m->data);
    m->data = NULL;
}

/* Encode the single request @r with @inline_len value bytes into @m. */
static rdmx_status_t msg_encode(kv_msg_t *m, const rdmx_kv_req_t *r,
                                size_t inline_len, const char *what)
{
    if (msg_alloc(m, rdmx__kv_req_size(r->klen, inline_len)) == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "%s: out of memory", what);
    rdmx__kv_req_encode(r, inline_len, m->data);
    return RDMX_OK;
}

/* Lend the handler @len bytes at @p, inside @mr, with @access. */
static void msg_lend(kv_msg_t *m, rdmx_mr_t *mr, const void *p, size_t len,
                     unsigned access)
{
    m->bulk.mr = mr;
    m->bulk.offset =
        (uint64_t)((const char *)p - (const char *)rdmx_mr_addr(mr));
    m->bulk.length = len;
    m->bulk.access = access;
    m->nbulk = 1;
}

/* --- the mapped store ---------------------------------------------------- */

/*
 * The mode bits a GET to @server sets for a mapped answer: RDMX_KV_GET_MAP
 * when the store is mapped on the current connection, with
 * RDMX_KV_GET_MAP_WANT when its descriptor is still to come; 0 over tcp,
 * when not connected, and on a connection whose answers cannot be
 * mapped.
 */
static uint8_t map_mode(rdmx_kv_t *kv, unsigned server)
{
    kv_map_t *m = &kv->map[server];
    rdmx_ep_t *ep;
    uint8_t mode = 0;

    if (kv->tcp)
        return 0;
    rdmx__worker_lock(kv->w);
    ep = rdmx_channel_ep(kv->ch[server]);
    if (ep == NULL || m->refused_ep == ep) {
        /* none */
    } else if (m->rm != NULL && m->ep == ep && rdmx__rmem_mapped(m->rm)) {
        mode = RDMX_KV_GET_MAP;
    } else if (!rdmx__ep_maps_peer(ep)) {
        m->refused_ep = ep; /* (tcp, libfabric, RDMX_RMA=rdmx) */
    } else {
        map_drop(m); /* (of an earlier connection) */
        mode = RDMX_KV_GET_MAP | RDMX_KV_GET_MAP_WANT;
    }
    rdmx__worker_unlock(kv->w);
    return mode;
}

/* Server @server answered a GET that asked for its store with the value
 * itself: it has no mapped GETs. Not asked again on this connection.
 * Worker's lock held. */
static void map_refused(rdmx_kv_t *kv, unsigned server)
{
    kv->map[server].refused_ep = rdmx_channel_ep(kv->ch[server]);
}

/*
 * Keep the store descriptor @desc (@n bytes) of store @id that an answer
 * from @server brought, if the transport maps it here; otherwise mapped
 * GETs stop on this connection. Worker's lock held.
 */
static void map_install(rdmx_kv_t *kv, unsigned server, uint64_t id,
                        const void *desc, size_t n)
{
    kv_map_t *m = &kv->map[server];
    rdmx_ep_t *ep = rdmx_channel_ep(kv->ch[server]);
    rdmx_rmem_t *rm = NULL;
    void *base = NULL;

    if (ep == NULL)
        return;
    if (m->rm != NULL && m->ep == ep && rdmx__rmem_mapped(m->rm) && m->id == id)
        return; /* an answer of a GET sent before the map came */
    map_drop(m);
    if (rdmx_rmem_unpack(ep, desc, n, &rm) != RDMX_OK ||
        rdmx__rmem_map(rm, &base) != RDMX_OK) {
        /* a transport that does not map the store (tcp, a NIC, RDMX_RMA=
         * rdmx): not on this connection */
        if (rm != NULL)
            rdmx_rmem_destroy(rm);
        m->refused_ep = ep;
        return;
    }
    m->rm = rm;
    m->ep = ep;
    m->base = base;
    m->len = rdmx_rmem_length(rm);
    m->id = id;
}

/* How @server's connection runs, for the rules that depend on it. */
typedef enum {
    PATH_TCP,    /* tcp (asked for, or auto's to another host): an inline
                    value is faster */
    PATH_MAPPED, /* UCX's shared memory: the server maps this client's
                    rdmx_mem_alloc memory, its pull of a lent value is its
                    own copy */
    PATH_OTHER   /* anything else, or not connected */
} kv_path_t;

static kv_path_t server_path(rdmx_kv_t *kv, unsigned server)
{
    rdmx_ep_t *ep;
    kv_path_t path = PATH_OTHER;

    if (kv->tcp)
        return PATH_TCP;
    rdmx__worker_lock(kv->w);
    ep = rdmx_channel_ep(kv->ch[server]);
    if (ep != NULL && rdmx__ep_transport(ep) == RDMX_TRANSPORT_TCP)
        path = PATH_TCP;
    else if (rdmx__ep_maps_peer(ep))
        path = PATH_MAPPED;
    rdmx__worker_unlock(kv->w);
    return path;
}

/*
 * A GET of @key into @buf for @server. Where the store is mapped, asks for
 * the value's place in it (the client copies the value). Otherwise lends
 * @buf when it lies in @mr and is larger than a value a server answered
 * inline to a lent buffer (below that the answer comes inline anyway, and
 * the lending costs a descriptor).
 */
static rdmx_status_t get_msg(rdmx_kv_t *kv, kv_msg_t *m, unsigned server,
                             const void *key, size_t klen, void *buf,
                             size_t capacity, rdmx_mr_t *mr, const char *what)
{
    rdmx_kv_req_t r = {.klen = (uint16_t)klen, .key = key};

    if (mr != NULL && server_path(kv, server) == PATH_TCP)
        mr = NULL; /* a hint: over tcp an inline answer is faster */
    if (capacity > RDMX_KV_MAP_ABOVE)
        r.mode = map_mode(kv, server);
    /* (a GET that still asks for the map lends its buffer too: a server
     * without mapped GETs writes into it) */
    if (r.mode != RDMX_KV_GET_MAP && mr != NULL && capacity > 0 &&
        capacity > __atomic_load_n(&kv->get_inline_seen, __ATOMIC_RELAXED)) {
        r.mode |= RDMX_KV_GET_BUF;
        msg_lend(m, mr, buf, capacity, RDMX_ACCESS_WRITE);
    }
    if (r.mode != 0)
        r.vlen = capacity;
    return msg_encode(m, &r, 0, what);
}

/* A GET's or PUT's params, checked and with their defaults. */
typedef struct {
    rdmx_mr_t *mr;
    int has_timeout, timeout_ms;
    int more; /* RDMX_KV_OP_PARAM_FIELD_MORE */
    rdmx_kv_cb_t cb;
    void *arg;
    rdmx_kv_put_mode_t mode;
    uint32_t flags, ttl_ms;
    uint64_t cas;
} kv_args_t;

/* Check @p for a _nb form (@nb: cb required) or a blocking one (no cb). */
static rdmx_status_t kv_args(const rdmx_kv_op_params_t *p, int nb,
                             const char *what, kv_args_t *a)
{
    uint64_t f = p != NULL ? p->field_mask : 0;

    memset(a, 0, sizeof(*a));
    a->mode = RDMX_KV_PUT_SET;
    if (f & RDMX_KV_OP_PARAM_FIELD_MR)
        a->mr = p->mr;
    if (f & RDMX_KV_OP_PARAM_FIELD_TIMEOUT) {
        a->has_timeout = 1;
        a->timeout_ms = p->timeout_ms;
    }
    if (f & RDMX_KV_OP_PARAM_FIELD_MODE)
        a->mode = p->mode;
    if (f & RDMX_KV_OP_PARAM_FIELD_FLAGS)
        a->flags = p->flags;
    if (f & RDMX_KV_OP_PARAM_FIELD_TTL)
        a->ttl_ms = p->ttl_ms;
    if (f & RDMX_KV_OP_PARAM_FIELD_CAS)
        a->cas = p->cas;
    if (f & RDMX_KV_OP_PARAM_FIELD_MORE)
        a->more = p->more != 0;
    if ((unsigned)a->mode > RDMX_KV_PUT_CAS)
        return rdmx__error(RDMX_ERR_INVALID,
                           "%s: mode %d (RDMX_KV_PUT_SET..RDMX_KV_PUT_CAS)",
                           what, (int)a->mode);
    if (nb) {
        if (!(f & RDMX_KV_OP_PARAM_FIELD_CB) || p->cb == NULL)
            return rdmx__error(RDMX_ERR_INVALID,
                               "%s: params->cb is required (set "
                               "RDMX_KV_OP_PARAM_FIELD_CB)",
                               what);
        a->cb = p->cb;
        a->arg = p->arg;
    } else if (f & RDMX_KV_OP_PARAM_FIELD_CB) {
        return rdmx__error(RDMX_ERR_INVALID,
                           "%s: params->cb is for the _nb form", what);
    }
    return RDMX_OK;
}

/* The largest value in @mr a PUT over @path sends inline (larger ones are
 * lent): inline_max, or KV_MAPPED_INLINE_MAX where the server maps @mr. */
static size_t put_inline_max(const rdmx_kv_t *kv, kv_path_t path,
                             const rdmx_mr_t *mr)
{
    if (!kv->inline_max_set && path == PATH_MAPPED && rdmx__mr_allocated(mr) &&
        kv->inline_max > KV_MAPPED_INLINE_MAX)
        return KV_MAPPED_INLINE_MAX;
    return kv->inline_max;
}

/* The client's bounce buffer with room for @vlen bytes, taken for one
 * blocking PUT to @server, or NULL (not over shared memory to that
 * server, the caller set inline_max, another PUT has it, out of memory:
 * the value goes inline). */
static rdmx_mr_t *bounce_take(rdmx_kv_t *kv, unsigned server, size_t vlen)
{
    size_t size = KV_BOUNCE_MIN;

    if (kv->inline_max_set || vlen < KV_BOUNCE_MIN || vlen > KV_BOUNCE_MAX ||
        server_path(kv, server) != PATH_MAPPED ||
        __atomic_exchange_n(&kv->bounce_busy, 1, __ATOMIC_ACQUIRE))
        return NULL;
    if (kv->bounce != NULL && rdmx_mr_length(kv->bounce) >= vlen)
        return kv->bounce;
    if (kv->bounce != NULL)
        rdmx_mem_deregister(kv->bounce);
    kv->bounce = NULL;
    while (size < vlen)
        size *= 2;
    if (rdmx_mem_alloc(rdmx__worker_context(kv->w), size, RDMX_ACCESS_READ,
                       &kv->bounce) != RDMX_OK) {
        kv->bounce = NULL;
        __atomic_store_n(&kv->bounce_busy, 0, __ATOMIC_RELEASE);
        return NULL;
    }
    return kv->bounce;
}

/* The PUT that took the bounce buffer ended with @st. After a failure a
 * server may still read it (a lent read is not fenced): dropped rather
 * than written again. */
static void bounce_give(rdmx_kv_t *kv, rdmx_status_t st)
{
    if (st != RDMX_OK && kv->bounce != NULL) {
        rdmx_mem_deregister(kv->bounce);
        kv->bounce = NULL;
    }
    __atomic_store_n(&kv->bounce_busy, 0, __ATOMIC_RELEASE);
}

/* A PUT of @value under @key with @opts' mode, flags, TTL and version, for
 * @server (the first replica); a value in @mr larger than put_inline_max
 * is lent, not inline. With @direct (the caller waits for the end) an
 * inline value is the request's body, not encoded into it. *r_p gets the
 * request. */
static rdmx_status_t put_msg(rdmx_kv_t *kv, kv_msg_t *m, unsigned server,
                             const void *key, size_t klen, const void *value,
                             size_t vlen, rdmx_mr_t *mr, const kv_args_t *opts,
                             int direct, rdmx_kv_req_t *r_p, const char *what)
{
    kv_path_t path = mr != NULL ? server_path(kv, server) : PATH_OTHER;
    int bulk;

    if (path == PATH_TCP && vlen <= KV_TCP_INLINE_MAX)
        mr = NULL; /* a hint: over tcp inline is faster up to there */
    bulk = mr != NULL && vlen > put_inline_max(kv, path, mr);
    *r_p = (rdmx_kv_req_t){
        .mode = (uint8_t)opts->mode,
        .klen = (uint16_t)klen,
        .key = key,
        .flags = opts->flags,
        .ttl_ms = opts->ttl_ms,
        .cas = opts->cas,
        .vlen = vlen,
        .value = value};
    if (bulk) {
        r_p->mode |= RDMX_KV_PUT_BULK;
        msg_lend(m, mr, value, vlen, RDMX_ACCESS_READ);
    } else if (direct && vlen > 0) {
        m->body = value; /* the request's tail: the same bytes on the wire */
        m->body_len = vlen;
    }
    return msg_encode(m, r_p, bulk || m->body_len > 0 ? 0 : vlen, what);
}

/* --- operations in flight ------------------------------------------------- */

typedef struct kv_op kv_op_t;

/* The argument of a call's completion: its op, and whether the call is the
 * op's first copy. */
typedef struct {
    kv_op_t *op;
    int first;
} kv_call_t;

/*
 * One operation: a call of `method` with the request `msg` to each of
 * `copies` servers from `server` on (a key's replicas, or every server),
 * what the answers go into, and how the end is told. A non-blocking op
 * (op_start, on the heap) starts every copy at once and reports to `cb`; a
 * blocking one (op_wait, on the caller's stack) starts a copy at a time.
 * The outcome fields are written by the calls' completions (the worker's
 * thread: progress, or its progress thread under the worker's lock).
 */
struct kv_op {
    rdmx_kv_t *kv;
    const char *method;         /* RDMX_KV_H_* */
    size_t length;              /* the request's bytes */
    kv_msg_t *msg;              /* the request; a blocking op's until its
                                   end (`later` is encoded into it) */
    const rdmx_kv_req_t *later; /* blocking, conditional: the header of the
                                   copies after the first, which go out
                                   only if the first succeeded; or NULL */
    unsigned server;            /* the first copy's server */
    unsigned copies;            /* calls in all */
    int has_timeout;            /* timeout_ms overrides the channels' */
    int timeout_ms;
    int more;                   /* more ops follow: RDMX_RPC_MORE */
    unsigned next;              /* copies started so far */
    /* where answers go */
    void *buf;                  /* GET: an inline value (capacity bytes) */
    size_t capacity;
    int lent;     /* GET: buf went as a lent buffer */
    int remap;    /* GET: the mapped copy must be asked again without a map */
    int want_map; /* GET: asked for the store's descriptor */
    size_t scrub; /* GET: bytes of buf a mapped copy wrote before it was
                     asked again */
    /* A non-blocking GET's request (at the op's end), for asking again */
    unsigned char *req;
    size_t req_len;
    /* A blocking GET's answer that comes by rendezvous lands in head (the
     * result) and buf (the value) with no copy (rdmx__call_direct). */
    unsigned char head[RDMX_KV_RESULT_SIZE];
    unsigned char *resp;        /* non-NULL: the raw answer, up to resp_cap
                                   bytes; its length in resp_len */
    size_t resp_cap, resp_len;
    /* outcome */
    unsigned pending;           /* calls started and not ended */
    rdmx_status_t first_status; /* the first copy's (INPROGRESS until it
                                   ended), and its meta */
    rdmx_kv_meta_t first_meta;
    rdmx_status_t status;       /* the first error, or RDMX_OK */
    int answered;               /* ... reported by a call's end, not by
                                   starting one */
    unsigned failed;            /* ... its copy (blocking ops) */
    rdmx_kv_meta_t meta;        /* to report: the first copy's, or the
                                   first error's with TOO_BIG */
    /* how the end is told */
    rdmx_kv_cb_t cb;            /* non-blocking: called, then op freed */
    void *arg;
    volatile int done;          /* blocking: the copy in flight ended */
    kv_call_t call[2];          /* [0]: the first copy's; [1]: the others' */
    char message[256]; /* the error in words (last: op_init clears only its
                          first byte) */
};

/* Set @op up for @copies calls of @method with @msg from @server on. */
static void op_init(kv_op_t *op, rdmx_kv_t *kv, const char *method,
                    kv_msg_t *msg, unsigned server, unsigned copies)
{
    memset(op, 0, offsetof(kv_op_t, message));
    op->message[0] = '\0';
    op->kv = kv;
    op->method = method;
    op->msg = msg;
    op->length = msg->len + msg->body_len;
    op->server = server;
    op->copies = copies;
    op->first_status = RDMX_INPROGRESS;
}

/* The op's own deadline and batching, if its params gave them. */
static void op_limit(kv_op_t *op, const kv_args_t *a)
{
    op->has_timeout = a->has_timeout;
    op->more = a->more;
    op->timeout_ms = a->timeout_ms;
}

/* Note an error of the copy started last, unless one is noted already. */
static void op_error(kv_op_t *op, rdmx_status_t st, const char *message,
                     int answered, const rdmx_kv_meta_t *meta)
{
    if (op->status != RDMX_OK)
        return;
    op->status = st;
    op->answered = answered;
    op->failed = op->next - 1;
    snprintf(op->message, sizeof(op->message), "%s", message);
    if (st == RDMX_ERR_TOO_BIG && meta != NULL)
        op->meta = *meta;
}

/* Every call of @op ended: wake its waiter, or report and free it. */
static void op_end(kv_op_t *op)
{
    if (op->cb == NULL) {
        op->done = 1; /* last: the waiter may return, the op vanish */
        return;
    }
    if (op->status != RDMX_OK)
        rdmx__error(op->status, "%s", op->message);
    op->meta.message = op->message;
    op->cb(op->status, &op->meta, op->arg);
    free(op);
}

/*
 * The RPC layer refused @op's request as over its server's message limit:
 * say so in the KV's terms (the server's max_value, rdmx-kvd --max-value)
 * into @msg, unless the limit is not known (then @rpc_msg stays).
 */
static void too_big_message(const kv_op_t *op, const char *rpc_msg,
                            char *msg, size_t size)
{
    uint64_t max = rdmx__channel_max_message(op->kv->ch[op->server]);
    int batch = strcmp(op->method, RDMX_KV_H_MPUT) == 0;

    if (max <= RDMX_KV_MESSAGE_SLACK) {
        snprintf(msg, size, "%s", rpc_msg);
        return;
    }
    snprintf(msg, size,
             "%s on %s: a request of %zu bytes; the server takes values of "
             "up to %llu bytes (its max_value)%s",
             op->method, op->kv->addr[op->server], op->length,
             (unsigned long long)(max - RDMX_KV_MESSAGE_SLACK),
             batch ? " in a batch that size in all: send fewer items at once"
                   : "");
}

/* What copying a mapped answer found. */
enum { MAP_COPIED, MAP_AGAIN, MAP_BAD };

/*
 * Copy the value a GET's answer locates (@loc, @n bytes after the result
 * @res) out of @server's mapped store into op->buf, then check the item's
 * stamp: MAP_COPIED; MAP_AGAIN when the map is gone or names another
 * store, or the stamp changed under the copy (the GET is asked again
 * without a map); MAP_BAD (@msg says why) for a location outside the store.
 * Worker's lock held (a completion).
 */
static int map_copy(kv_op_t *op, const rdmx_kv_result_t *res,
                    const unsigned char *loc, size_t n, char *msg, size_t size)
{
    kv_map_t *m = &op->kv->map[op->server];
    rdmx_kv_location_t l;
    const uint64_t *stamp_at;

    if (rdmx__kv_location_decode(loc, n, &l) != RDMX_OK) {
        snprintf(msg, size, "a mapped answer without its location");
        return MAP_BAD;
    }
    if (n > RDMX_KV_LOCATION_SIZE) /* the store's descriptor follows */
        map_install(op->kv, op->server, l.store_id, loc + RDMX_KV_LOCATION_SIZE,
                    n - RDMX_KV_LOCATION_SIZE);
    if (m->rm == NULL || !rdmx__rmem_mapped(m->rm))
        return MAP_AGAIN;
    if (l.store_id != m->id) {
        map_drop(m); /* another store: asked for again */
        return MAP_AGAIN;
    }
    if (l.value_offset > m->len || res->length > m->len - l.value_offset ||
        m->len < 8 || l.stamp_offset > m->len - 8 || l.stamp_offset % 8 != 0 ||
        res->length > op->capacity) {
        snprintf(msg, size,
                 "a value of %llu bytes at %llu (stamp at %llu) outside the "
                 "store's %llu bytes or the buffer's %zu",
                 (unsigned long long)res->length,
                 (unsigned long long)l.value_offset,
                 (unsigned long long)l.stamp_offset, (unsigned long long)m->len,
                 op->capacity);
        return MAP_BAD;
    }
    stamp_at = (const uint64_t *)(const void *)(m->base + l.stamp_offset);
    if (__atomic_load_n(stamp_at, __ATOMIC_ACQUIRE) != l.stamp)
        return MAP_AGAIN; /* changed already: nothing copied */
    memcpy(op->buf, m->base + l.value_offset, (size_t)res->length);
    /* the copy, then the stamp: a writer changes the stamp before the
     * bytes (store.c, stamp_void) */
    rdmx_fence_acquire();
    if (__atomic_load_n(stamp_at, __ATOMIC_RELAXED) == l.stamp)
        return MAP_COPIED;
    /* Changed under the copy: what it wrote past the value the GET asked
     * again returns is zeroed then (call_done), not left with bytes of
     * whatever the store held there */
    if (res->length > op->scrub)
        op->scrub = (size_t)res->length;
    return MAP_AGAIN;
}

/*
 * What a call's end says: its status, the meta of a kv result, a message
 * for an error (@msg, @size bytes). A GET's inline value is copied into
 * op->buf, a raw answer into op->resp.
 */
static rdmx_status_t call_answer(kv_op_t *op, const rdmx_call_result_t *r,
                                 rdmx_kv_meta_t *meta, char *msg, size_t size)
{
    rdmx_kv_result_t res;
    /* the bytes after the result: in buf if the answer landed in place */
    int in_place = r->status == RDMX_OK && r->data == op->head;
    const char *rest;
    size_t n;

    if (r->status == RDMX_ERR_TOO_BIG) {
        too_big_message(op, r->message, msg, size);
        return r->status;
    }
    if (r->status != RDMX_OK) {
        snprintf(msg, size, "%s", r->message);
        return r->status;
    }
    if (op->resp != NULL) {
        n = r->length < op->resp_cap ? r->length : op->resp_cap;
        if (n != 0)
            memcpy(op->resp, r->data, n);
        op->resp_len = n;
        if (r->length > op->resp_cap) {
            snprintf(msg, size, "response of %zu bytes", r->length);
            return RDMX_ERR_TOO_BIG;
        }
        return RDMX_OK;
    }
    if (rdmx__kv_result_decode(r->data, r->length, &res) != RDMX_OK) {
        snprintf(msg, size, "bad result from server");
        return RDMX_ERR_PROTO;
    }
    meta->length = (size_t)res.length;
    meta->flags = res.flags;
    meta->cas = res.cas;
    if (op->want_map && res.status == RDMX_OK &&
        res.where != RDMX_KV_WHERE_STORE && res.length > RDMX_KV_MAP_ABOVE)
        map_refused(op->kv, op->server); /* a server without them */
    rest = in_place ? (const char *)op->buf
                    : (const char *)r->data + RDMX_KV_RESULT_SIZE;
    if (res.status != RDMX_OK) {
        n = r->length - RDMX_KV_RESULT_SIZE;
        if (n > size - 1)
            n = size - 1;
        memcpy(msg, rest, n);
        msg[n] = '\0';
        return (rdmx_status_t)res.status;
    }
    if (res.where == RDMX_KV_WHERE_STORE) {
        switch (map_copy(op, &res, (const unsigned char *)rest,
                         r->length - RDMX_KV_RESULT_SIZE, msg, size)) {
        case MAP_COPIED:
            break;
        case MAP_AGAIN:
            op->remap = 1;
            break;
        default:
            return RDMX_ERR_PROTO;
        }
    } else if (res.where == RDMX_KV_WHERE_INLINE) {
        if (res.length > op->capacity) {
            snprintf(msg, size, "value of %llu bytes, buffer of %zu",
                     (unsigned long long)res.length, op->capacity);
            return RDMX_ERR_TOO_BIG;
        }
        if (op->lent && res.length > __atomic_load_n(&op->kv->get_inline_seen,
                                                     __ATOMIC_RELAXED))
            __atomic_store_n(&op->kv->get_inline_seen, (size_t)res.length,
                             __ATOMIC_RELAXED);
        if (res.length != 0 && !in_place)
            memcpy(op->buf, rest, (size_t)res.length);
    }
    return RDMX_OK;
}

static void op_again(kv_op_t *op);

static void call_done(const rdmx_call_result_t *r, void *arg)
{
    kv_call_t *c = arg;
    kv_op_t *op = c->op;
    rdmx_kv_meta_t meta = {0};
    char msg[256]; /* (written by call_answer on error, read only then) */
    rdmx_status_t st = call_answer(op, r, &meta, msg, sizeof(msg));

    if (op->remap) {
        op_again(op);
        return;
    }
    if (op->scrub > 0) {
        size_t n = st == RDMX_OK ? meta.length : 0;

        if (n < op->scrub)
            memset((char *)op->buf + n, 0, op->scrub - n);
    }
    if (c->first) {
        op->first_status = st;
        op->first_meta = meta;
        op->meta = meta;
    }
    if (st != RDMX_OK)
        op_error(op, st, msg, 1, &meta);
    if (--op->pending == 0)
        op_end(op);
}

/* Start the next copy of @op. RDMX_INPROGRESS, or the error that kept it
 * from starting (noted in @op; rdmx_error_detail() has it). */
static rdmx_status_t op_call(kv_op_t *op)
{
    rdmx_kv_t *kv = op->kv;
    unsigned i = op->next++;
    kv_call_t *c = &op->call[i == 0 ? 0 : 1];
    rdmx_call_params_t cp = {0};
    rdmx_status_t st;

    c->op = op;
    c->first = i == 0;
    cp.field_mask = RDMX_CALL_PARAM_FIELD_CB;
    cp.cb = call_done;
    cp.arg = c;
    if (op->msg->nbulk > 0) {
        cp.field_mask |= RDMX_CALL_PARAM_FIELD_BULK;
        cp.bulk = &op->msg->bulk;
        cp.nbulk = op->msg->nbulk;
    }
    if (op->has_timeout) {
        cp.field_mask |= RDMX_CALL_PARAM_FIELD_TIMEOUT;
        cp.timeout_ms = op->timeout_ms;
    }
    if (op->more) {
        cp.field_mask |= RDMX_CALL_PARAM_FIELD_FLAGS;
        cp.flags = RDMX_RPC_MORE;
    }
    op->pending++;
    if (op->cb == NULL) {
        /* blocking: its caller waits for the end, so a PUT's value goes
         * from its buffer itself, and a GET's large answer may land in
         * its buffer itself */
        rdmx_call_direct_t d = {.body = op->msg->body,
                                .body_len = op->msg->body_len};
        if (op->buf != NULL && op->capacity > 0 && op->resp == NULL &&
            op->copies == 1) {
            d.into[0] = (rdmx_msg_piece_t){op->head, sizeof(op->head)};
            d.into[1] = (rdmx_msg_piece_t){op->buf, op->capacity};
            d.ninto = 2;
        }
        st = rdmx__call_direct(kv->ch[(op->server + i) % kv->n], op->method,
                               op->msg->data, op->msg->len, &cp, &d, NULL);
    } else {
        st = rdmx_call_nb(kv->ch[(op->server + i) % kv->n], op->method,
                          op->msg->data, op->msg->len, &cp, NULL);
    }
    if (st != RDMX_INPROGRESS) {
        char msg[256];

        op->pending--;
        if (i == 0)
            op->first_status = st;
        if (st == RDMX_ERR_TOO_BIG) {
            too_big_message(op, rdmx_error_detail(), msg, sizeof(msg));
            rdmx__error(st, "%s", msg);
        }
        op_error(op, st, rdmx_error_detail(), 0, NULL);
    }
    return st;
}

/* A GET's mode sent again: no map, no lent buffer, and saying so. */
static unsigned char again_mode(unsigned char mode)
{
    return (unsigned char)((mode & ~(RDMX_KV_GET_MAP | RDMX_KV_GET_MAP_WANT |
                                     RDMX_KV_GET_BUF)) |
                           RDMX_KV_GET_AGAIN);
}

/*
 * A mapped GET's copy met a changed stamp (or a map gone): send the GET
 * again with RDMX_KV_GET_AGAIN instead of the map, lending nothing (it is
 * answered inline). The call that ended counts no more; a blocking op's
 * waiter sends it, a non-blocking op is sent from its kept request. At
 * most once: the second request asks for no map.
 */
static void op_again(kv_op_t *op)
{
    op->remap = 0;
    op->want_map = 0;
    op->lent = 0;
    op->pending--;
    op->next--;
    if (op->cb == NULL) {
        op->msg->data[0] = again_mode(op->msg->data[0]);
        op->msg->nbulk = 0;
        op->done = 1; /* op_wait starts the copy again */
        return;
    }
    {
        kv_msg_t m;

        msg_init(&m);
        op->req[0] = again_mode(op->req[0]);
        m.data = op->req;
        m.len = op->req_len;
        op->msg = &m;
        (void)op_call(op); /* (an error is noted in op) */
        op->msg = NULL;
    }
    if (op->pending == 0)
        op_end(op);
}

/*
 * Start a non-blocking @op (on the heap): every copy at once, under the
 * worker's lock so that no completion runs before all started.
 * RDMX_INPROGRESS: op->cb will run once (the first error, if any, is its
 * status). Otherwise no copy started: @op is freed, the error returned.
 */
static rdmx_status_t op_start(kv_op_t *op)
{
    rdmx_worker_t *w = op->kv->w;
    unsigned started = 0;
    rdmx_status_t st;

    rdmx__worker_lock(w);
    op->pending = 1; /* held until every copy is started */
    while (op->next < op->copies)
        if (op_call(op) == RDMX_INPROGRESS)
            started++;
    op->msg = NULL; /* rdmx_call_nb copied it */
    if (started == 0) {
        st = op->status;
        free(op);
    } else {
        st = RDMX_INPROGRESS;
        if (--op->pending == 0) /* every call ended at once (cannot, but be
                                   safe) */
            op_end(op);
    }
    rdmx__worker_unlock(w);
    return st;
}

/*
 * The one wait of the blocking forms: run @op (on the caller's stack) a
 * copy at a time, each started once the one before ended, progressing the
 * worker until it ends (rdmx__wait_until: polling, then sleeping; with a
 * progress thread, sleeping). A conditional op (op->later) stops after a
 * failed first copy and sends the others the `later` header. Returns the
 * first error — with the detail "METHOD on ADDR: message" when a call's
 * end reported it; a call that could not start leaves its own — or
 * RDMX_OK.
 */
static rdmx_status_t op_wait(kv_op_t *op)
{
    rdmx_kv_t *kv = op->kv;

    while (op->next < op->copies) {
        if (op->next == 1 && op->later != NULL) {
            if (op->status != RDMX_OK)
                break; /* the first copy decided */
            rdmx__kv_req_encode_header(op->later, op->msg->data);
        }
        if (op_call(op) != RDMX_INPROGRESS)
            continue;
        rdmx__wait_until(kv->w, &op->done);
        op->done = 0;
    }
    if (op->status != RDMX_OK && op->answered)
        return rdmx__error(op->status, "%s on %s: %s", op->method,
                           kv->addr[(op->server + op->failed) % kv->n],
                           op->message);
    return op->status;
}

/* --- GET and PUT ---------------------------------------------------------- */

rdmx_status_t rdmx_kv_get(rdmx_kv_t *kv, const void *key, size_t klen,
                          void *buf, size_t capacity,
                          const rdmx_kv_op_params_t *params,
                          rdmx_kv_meta_t *meta_p)
{
    kv_args_t a;
    kv_msg_t m;
    kv_op_t op;
    unsigned server;
    rdmx_status_t st;

    if ((st = kv_args(params, 0, "kv get", &a)) != RDMX_OK)
        return st;
    if ((st = check_key(klen, key)) != RDMX_OK)
        return st;
    if (buf == NULL && capacity != 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv get: NULL buffer");
    server = read_server(kv, key, klen);
    msg_init(&m);
    if ((st = get_msg(kv, &m, server, key, klen, buf, capacity, a.mr,
                      "kv get")) != RDMX_OK)
        return st;
    op_init(&op, kv, RDMX_KV_H_GET, &m, server, 1);
    op.want_map = (m.data[0] & RDMX_KV_GET_MAP_WANT) != 0;
    op_limit(&op, &a);
    op.buf = buf;
    op.capacity = capacity;
    op.lent = m.nbulk > 0;
    st = op_wait(&op);
    msg_free(&m);
    if (meta_p != NULL && (st == RDMX_OK || st == RDMX_ERR_TOO_BIG))
        *meta_p = op.first_meta;
    return st;
}

rdmx_status_t rdmx_kv_get_nb(rdmx_kv_t *kv, const void *key, size_t klen,
                             void *buf, size_t capacity,
                             const rdmx_kv_op_params_t *params)
{
    kv_args_t a;
    kv_msg_t m;
    kv_op_t *op;
    unsigned server;
    int mapped;
    rdmx_status_t st;

    if ((st = kv_args(params, 1, "kv get_nb", &a)) != RDMX_OK)
        return st;
    if ((st = check_key(klen, key)) != RDMX_OK)
        return st;
    if (buf == NULL && capacity != 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv get_nb: NULL argument");
    server = read_server(kv, key, klen);
    msg_init(&m);
    if ((st = get_msg(kv, &m, server, key, klen, buf, capacity, a.mr,
                      "kv get_nb")) != RDMX_OK)
        return st;
    /* a mapped GET keeps its request, to ask again without the map */
    mapped = (m.data[0] & RDMX_KV_GET_MAP) != 0;
    if ((op = malloc(sizeof(*op) + (mapped ? m.len : 0))) == NULL) {
        msg_free(&m);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv get_nb: out of memory");
    }
    op_init(op, kv, RDMX_KV_H_GET, &m, server, 1);
    op->want_map = (m.data[0] & RDMX_KV_GET_MAP_WANT) != 0;
    if (mapped) {
        op->req = (unsigned char *)(op + 1);
        op->req_len = m.len;
        memcpy(op->req, m.data, m.len);
    }
    op_limit(op, &a);
    op->buf = buf;
    op->capacity = capacity;
    op->lent = m.nbulk > 0;
    op->cb = a.cb;
    op->arg = a.arg;
    st = op_start(op);
    msg_free(&m);
    return st;
}

rdmx_status_t rdmx_kv_put(rdmx_kv_t *kv, const void *key, size_t klen,
                          const void *value, size_t vlen,
                          const rdmx_kv_op_params_t *params, uint64_t *cas_p)
{
    rdmx_kv_req_t r, later;
    kv_args_t a;
    kv_msg_t m;
    kv_op_t op;
    unsigned server;
    rdmx_mr_t *bounce = NULL;
    rdmx_status_t st;

    if ((st = kv_args(params, 0, "kv put", &a)) != RDMX_OK)
        return st;
    if ((st = check_key(klen, key)) != RDMX_OK)
        return st;
    if (value == NULL && vlen != 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv put: NULL value");
    msg_init(&m);
    server = rdmx_kv_server_of(kv, key, klen);
    if (a.mr == NULL && value != NULL &&
        (bounce = bounce_take(kv, server, vlen)) != NULL) {
        memcpy(rdmx_mr_addr(bounce), value, vlen);
        value = rdmx_mr_addr(bounce);
        a.mr = bounce;
    }
    if ((st = put_msg(kv, &m, server, key, klen, value, vlen, a.mr, &a, 1, &r,
                      "kv put")) != RDMX_OK) {
        if (bounce != NULL)
            bounce_give(kv, RDMX_OK); /* (nothing was sent) */
        return st;
    }
    /* Every replica gets the write; the first error is reported. Each
     * server has its own versions: the first copy decides a conditional
     * write (ADD, REPLACE, CAS), the others then store unconditionally. */
    op_init(&op, kv, RDMX_KV_H_PUT, &m, server, kv->replicas);
    op_limit(&op, &a);
    if ((r.mode & RDMX_KV_MODE_MASK) != RDMX_KV_PUT_SET) {
        later = r;
        later.mode = (uint8_t)((r.mode & RDMX_KV_PUT_BULK) | RDMX_KV_PUT_SET);
        op.later = &later;
    }
    st = op_wait(&op);
    msg_free(&m);
    if (bounce != NULL)
        bounce_give(kv, st);
    if (cas_p != NULL && op.first_status == RDMX_OK)
        *cas_p = op.first_meta.cas;
    return st;
}

rdmx_status_t rdmx_kv_put_nb(rdmx_kv_t *kv, const void *key, size_t klen,
                             const void *value, size_t vlen,
                             const rdmx_kv_op_params_t *params)
{
    rdmx_kv_req_t r;
    kv_args_t a;
    kv_msg_t m;
    kv_op_t *op;
    unsigned server;
    rdmx_status_t st;

    if ((st = kv_args(params, 1, "kv put_nb", &a)) != RDMX_OK)
        return st;
    if ((st = check_key(klen, key)) != RDMX_OK)
        return st;
    if (value == NULL && vlen != 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv put_nb: NULL argument");
    if (kv->replicas > 1 && a.mode != RDMX_KV_PUT_SET)
        return rdmx__error(RDMX_ERR_UNSUPPORTED,
                           "kv put_nb: a conditional write needs its first "
                           "copy's answer before the others; use rdmx_kv_put "
                           "with replicas > 1");
    msg_init(&m);
    server = rdmx_kv_server_of(kv, key, klen);
    if ((st = put_msg(kv, &m, server, key, klen, value, vlen, a.mr, &a, 0, &r,
                      "kv put_nb")) != RDMX_OK)
        return st;
    if ((op = malloc(sizeof(*op))) == NULL) {
        msg_free(&m);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv put_nb: out of memory");
    }
    op_init(op, kv, RDMX_KV_H_PUT, &m, server, kv->replicas);
    op_limit(op, &a);
    op->cb = a.cb;
    op->arg = a.arg;
    st = op_start(op);
    msg_free(&m);
    return st;
}

/* --- keyed commands ------------------------------------------------------- */

/* A keyed request without a value: to every replica one after the other
 * (@write; @later as in kv_op_t) or to the read server. @meta_p (may be
 * NULL): the first copy's meta. */
static rdmx_status_t keyed(rdmx_kv_t *kv, const char *method,
                           const rdmx_kv_req_t *r, int write,
                           const rdmx_kv_req_t *later, rdmx_kv_meta_t *meta_p)
{
    kv_msg_t m;
    kv_op_t op;
    rdmx_status_t st;

    if ((st = check_key(r->klen, r->key)) != RDMX_OK)
        return st;
    msg_init(&m);
    if ((st = msg_encode(&m, r, 0, "kv")) != RDMX_OK)
        return st;
    if (write)
        op_init(&op, kv, method, &m, rdmx_kv_server_of(kv, r->key, r->klen),
                kv->replicas);
    else
        op_init(&op, kv, method, &m, read_server(kv, r->key, r->klen), 1);
    op.later = later;
    st = op_wait(&op);
    msg_free(&m);
    if (meta_p != NULL)
        *meta_p = op.first_meta;
    return st;
}

rdmx_status_t rdmx_kv_delete(rdmx_kv_t *kv, const void *key, size_t klen,
                             uint64_t cas)
{
    rdmx_kv_req_t r = {.klen = (uint16_t)klen, .key = key, .cas = cas};
    rdmx_kv_req_t later = r;

    if (klen > 65535)
        return check_key(klen, key);
    /* at a version: the first copy checks it, the others follow */
    later.cas = 0;
    return keyed(kv, RDMX_KV_H_DELETE, &r, 1, cas != 0 ? &later : NULL,
                 NULL);
}

rdmx_status_t rdmx_kv_touch(rdmx_kv_t *kv, const void *key, size_t klen,
                            uint32_t ttl_ms)
{
    rdmx_kv_req_t r = {.klen = (uint16_t)klen, .key = key, .ttl_ms = ttl_ms};

    if (klen > 65535)
        return check_key(klen, key);
    return keyed(kv, RDMX_KV_H_TOUCH, &r, 1, NULL, NULL);
}

rdmx_status_t rdmx_kv_exists(rdmx_kv_t *kv, const void *key, size_t klen)
{
    rdmx_kv_req_t r = {.klen = (uint16_t)klen, .key = key};

    if (klen > 65535)
        return check_key(klen, key);
    return keyed(kv, RDMX_KV_H_EXISTS, &r, 0, NULL, NULL);
}

rdmx_status_t rdmx_kv_incr(rdmx_kv_t *kv, const void *key, size_t klen,
                           uint64_t delta, int decr, uint64_t *value_p)
{
    rdmx_kv_req_t r = {.klen = (uint16_t)klen, .key = key, .cas = delta,
                       .mode = (uint8_t)(decr ? RDMX_KV_INCR_DECR : 0)};
    rdmx_kv_meta_t meta;
    rdmx_status_t st;

    if (klen > 65535)
        return check_key(klen, key);
    st = keyed(kv, RDMX_KV_H_INCR, &r, 1, NULL, &meta);
    /* the new value travels in the result's length field */
    if (st == RDMX_OK && value_p != NULL)
        *value_p = meta.length;
    return st;
}

/* --- batches -------------------------------------------------------------- */

/* Send the batch of @reqs[0..n) (each with @inl[i] value bytes inline;
 * @inl NULL: keys only) to @server as one call of @method. The raw answer
 * (up to @resp_cap bytes) goes to *resp_p, for the caller to free (NULL
 * when out of memory), its length to *resp_len_p. */
static rdmx_status_t batch(rdmx_kv_t *kv, unsigned server, const char *method,
                           const rdmx_kv_req_t *reqs, const size_t *inl,
                           size_t n, size_t resp_cap, unsigned char **resp_p,
                           size_t *resp_len_p)
{
    kv_msg_t m;
    kv_op_t op;
    rdmx_status_t st;

    msg_init(&m);
    *resp_p = malloc(resp_cap);
    *resp_len_p = 0;
    if (*resp_p == NULL ||
        msg_alloc(&m, rdmx__kv_batch_size(reqs, inl, n)) == NULL) {
        free(*resp_p);
        *resp_p = NULL;
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv batch: out of memory");
    }
    rdmx__kv_batch_encode(reqs, inl, n, m.data);
    op_init(&op, kv, method, &m, server, 1);
    op.resp = *resp_p;
    op.resp_cap = resp_cap;
    st = op_wait(&op);
    msg_free(&m);
    *resp_len_p = op.resp_len;
    return st;
}

/* Send the items of idx[0..m) (one server) as one kv.mget batch. */
static rdmx_status_t mget_batch(rdmx_kv_t *kv, unsigned s,
                                rdmx_kv_mget_t *items, const size_t *idx,
                                size_t m, rdmx_kv_req_t *reqs)
{
    unsigned char *resp;
    size_t cap = 64, off = 0, resp_len;
    rdmx_status_t st;

    for (size_t k = 0; k < m; k++) {
        rdmx_kv_mget_t *it = &items[idx[k]];
        memset(&reqs[k], 0, sizeof(reqs[k]));
        reqs[k].klen = (uint16_t)it->klen;
        reqs[k].key = it->key;
        reqs[k].vlen = it->capacity;
        cap += RDMX_KV_RESULT_SIZE + it->capacity;
    }
    st = batch(kv, s, RDMX_KV_H_MGET, reqs, NULL, m, cap, &resp, &resp_len);
    for (size_t k = 0; k < m; k++) {
        rdmx_kv_mget_t *it = &items[idx[k]];
        rdmx_kv_result_t res;
        if (st != RDMX_OK) {
            it->status = st;
            continue;
        }
        if (rdmx__kv_result_decode(resp + off, resp_len - off, &res) !=
            RDMX_OK) {
            it->status = st = RDMX_ERR_PROTO;
            continue;
        }
        off += RDMX_KV_RESULT_SIZE;
        it->status = (rdmx_status_t)res.status;
        it->meta.length = (size_t)res.length;
        it->meta.flags = res.flags;
        it->meta.cas = res.cas;
        if (res.where == RDMX_KV_WHERE_INLINE) {
            if (res.length <= it->capacity && res.length != 0)
                memcpy(it->buf, resp + off, (size_t)res.length);
            else if (res.length > it->capacity)
                it->status = RDMX_ERR_TOO_BIG;
            off += (size_t)res.length;
        }
    }
    free(resp);
    return st;
}

rdmx_status_t rdmx_kv_mget(rdmx_kv_t *kv, rdmx_kv_mget_t *items, size_t n)
{
    rdmx_kv_req_t *reqs;
    size_t *idx;
    unsigned *srv;
    rdmx_status_t st = RDMX_OK;

    if (n == 0)
        return RDMX_OK;
    reqs = calloc(RDMX_KV_BATCH_MAX, sizeof(*reqs));
    idx = calloc(n, sizeof(*idx));
    srv = calloc(n, sizeof(*srv));
    if (reqs == NULL || idx == NULL || srv == NULL) {
        free(reqs);
        free(idx);
        free(srv);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv mget: out of memory");
    }
    /* Place every key once: channels may change state meanwhile. */
    for (size_t i = 0; i < n; i++) {
        items[i].status = RDMX_ERR_CANCELED;
        if (check_key(items[i].klen, items[i].key) != RDMX_OK ||
            (items[i].buf == NULL && items[i].capacity != 0)) {
            items[i].status = RDMX_ERR_INVALID;
            srv[i] = UINT32_MAX;
        } else {
            srv[i] = read_server(kv, items[i].key, items[i].klen);
        }
    }
    for (unsigned s = 0; s < kv->n; s++) {
        size_t m = 0;
        for (size_t i = 0; i <= n; i++) {
            if (i < n && srv[i] == s)
                idx[m++] = i;
            if (m > 0 && (m == RDMX_KV_BATCH_MAX || i == n)) {
                rdmx_status_t st1 = mget_batch(kv, s, items, idx, m, reqs);
                if (st == RDMX_OK && st1 != RDMX_OK)
                    st = st1;
                m = 0;
            }
        }
    }
    for (size_t i = 0; i < n && st == RDMX_OK; i++)
        if (items[i].status == RDMX_ERR_INVALID)
            st = rdmx__error(RDMX_ERR_INVALID, "kv mget: key %zu is invalid",
                             i);
    free(reqs);
    free(idx);
    free(srv);
    return st;
}

/* Send the items of idx[0..m) to server @s as one kv.mput batch.
 * @first_copy: the first copy decides conditional writes (CAS, ADD,
 * REPLACE) and its versions are the items'; the others store
 * unconditionally. */
static rdmx_status_t mput_batch(rdmx_kv_t *kv, unsigned s,
                                rdmx_kv_mput_t *items, const size_t *idx,
                                size_t m, rdmx_kv_req_t *reqs, size_t *inl,
                                int first_copy)
{
    unsigned char *resp;
    size_t resp_len;
    rdmx_status_t st;

    for (size_t k = 0; k < m; k++) {
        rdmx_kv_mput_t *it = &items[idx[k]];
        memset(&reqs[k], 0, sizeof(reqs[k]));
        reqs[k].mode = (uint8_t)(first_copy ? it->mode : RDMX_KV_PUT_SET);
        reqs[k].klen = (uint16_t)it->klen;
        reqs[k].key = it->key;
        reqs[k].flags = it->flags;
        reqs[k].ttl_ms = it->ttl_ms;
        /* (later copies store unconditionally; it->cas holds the first
         * copy's new version by then) */
        reqs[k].cas = first_copy ? it->cas : 0;
        reqs[k].vlen = it->vlen;
        reqs[k].value = it->value;
        inl[k] = it->vlen;
    }
    st = batch(kv, s, RDMX_KV_H_MPUT, reqs, inl, m,
               m * RDMX_KV_RESULT_SIZE + 64, &resp, &resp_len);
    for (size_t k = 0; k < m; k++) {
        rdmx_kv_mput_t *it = &items[idx[k]];
        rdmx_kv_result_t res;
        rdmx_status_t ist = st;
        if (st == RDMX_OK &&
            rdmx__kv_result_decode(resp + k * RDMX_KV_RESULT_SIZE,
                                   resp_len - k * RDMX_KV_RESULT_SIZE,
                                   &res) != RDMX_OK)
            ist = st = RDMX_ERR_PROTO;
        else if (st == RDMX_OK)
            ist = (rdmx_status_t)res.status;
        if (first_copy && ist == RDMX_OK)
            it->cas = res.cas;
        /* the first error of any copy stays */
        if (it->status >= 0)
            it->status = ist == RDMX_OK ? RDMX_OK : ist;
    }
    free(resp);
    return st;
}

rdmx_status_t rdmx_kv_mput(rdmx_kv_t *kv, rdmx_kv_mput_t *items, size_t n)
{
    rdmx_kv_req_t *reqs;
    size_t *idx, *inl;
    unsigned *srv;
    rdmx_status_t st = RDMX_OK;

    if (n == 0)
        return RDMX_OK;
    reqs = calloc(RDMX_KV_BATCH_MAX, sizeof(*reqs));
    inl = calloc(RDMX_KV_BATCH_MAX, sizeof(*inl));
    idx = calloc(n, sizeof(*idx));
    srv = calloc(n, sizeof(*srv));
    if (reqs == NULL || idx == NULL || inl == NULL || srv == NULL) {
        free(reqs);
        free(idx);
        free(inl);
        free(srv);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv mput: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        rdmx_kv_mput_t *it = &items[i];
        it->status = RDMX_INPROGRESS; /* nothing known yet */
        srv[i] = rdmx_kv_server_of(kv, it->key, it->klen);
        if (check_key(it->klen, it->key) != RDMX_OK ||
            (it->value == NULL && it->vlen != 0) ||
            (unsigned)it->mode > RDMX_KV_PUT_CAS) {
            it->status = RDMX_ERR_INVALID;
            srv[i] = UINT32_MAX;
        }
    }
    /* Copy by copy: the first decides conditional writes (each server has
     * its own versions), the others store what the first accepted. */
    for (unsigned rep = 0; rep < kv->replicas; rep++) {
        for (unsigned s = 0; s < kv->n; s++) {
            size_t m = 0;
            for (size_t i = 0; i <= n; i++) {
                if (i < n && srv[i] != UINT32_MAX &&
                    (srv[i] + rep) % kv->n == s &&
                    (rep == 0 || items[i].status == RDMX_OK))
                    idx[m++] = i;
                if (m > 0 && (m == RDMX_KV_BATCH_MAX || i == n)) {
                    rdmx_status_t st1 = mput_batch(kv, s, items, idx, m, reqs,
                                                   inl, rep == 0);
                    if (st == RDMX_OK && st1 != RDMX_OK)
                        st = st1;
                    m = 0;
                }
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].status == RDMX_INPROGRESS)
            items[i].status = RDMX_ERR_INTERNAL;
        if (st == RDMX_OK && items[i].status != RDMX_OK)
            st = rdmx__error(items[i].status, "kv mput: key %zu: %s", i,
                             rdmx_strerror(items[i].status));
    }
    free(reqs);
    free(idx);
    free(inl);
    free(srv);
    return st;
}

rdmx_status_t rdmx_kv_prefix_hits(rdmx_kv_t *kv, const void *const *keys,
                                  const size_t *klens, size_t n,
                                  size_t *hits_p)
{
    size_t hits = 0, i = 0;

    /* Runs of consecutive keys on one server go in one round trip. */
    while (i < n) {
        unsigned s;
        size_t m = 0, j, resp_len;
        rdmx_kv_req_t *reqs;
        unsigned char *resp;
        rdmx_status_t st;
        uint32_t got;

        if (check_key(klens[i], keys[i]) != RDMX_OK)
            return check_key(klens[i], keys[i]);
        s = read_server(kv, keys[i], klens[i]);
        for (j = i; j < n && m < RDMX_KV_BATCH_MAX; j++, m++)
            if (check_key(klens[j], keys[j]) != RDMX_OK ||
                read_server(kv, keys[j], klens[j]) != s)
                break;
        reqs = calloc(m ? m : 1, sizeof(*reqs));
        if (reqs == NULL)
            return rdmx__error(RDMX_ERR_NO_MEMORY, "kv: out of memory");
        for (size_t k = 0; k < m; k++) {
            reqs[k].klen = (uint16_t)klens[i + k];
            reqs[k].key = keys[i + k];
        }
        st = batch(kv, s, RDMX_KV_H_PREFIX, reqs, NULL, m, 64, &resp,
                   &resp_len);
        free(reqs);
        if (st == RDMX_OK &&
            rdmx__kv_prefix_decode(resp, resp_len, &got) != RDMX_OK)
            st = rdmx__error(RDMX_ERR_PROTO, "kv prefix: short answer");
        free(resp);
        if (st != RDMX_OK)
            return st;
        hits += got;
        if (got < m)
            break;
        i += m;
    }
    *hits_p = hits;
    return RDMX_OK;
}

/* --- zero-copy batches ----------------------------------------------------- */

typedef struct zbatch zbatch_t;

/* One request of a zero-copy batch: the keys it carries (items[idx[k]]),
 * the regions it lends, its encoded bytes (freed once started). */
typedef struct {
    zbatch_t *b;
    unsigned server;
    const size_t *idx; /* into zbatch_t.idx */
    size_t m;
    rdmx_rpc_bulk_t bulk[RDMX_RPC_BULK_MAX];
    unsigned nbulk;
} zreq_t;

/* A zero-copy batch in flight: its requests and how many have not ended.
 * `pending` and the items' outcomes are written by the calls' completions
 * (the worker's thread, or its progress thread under the worker's lock). */
struct zbatch {
    rdmx_kv_t *kv;
    int put;
    rdmx_kv_batch_item_t *items;
    size_t *idx;       /* the items of every request, request by request */
    zreq_t *req;
    size_t nreq;
    unsigned pending;  /* requests started and not ended */
    volatile int done; /* every request ended */
};

/* Note @st as item @it's outcome of one copy: the first error stays. */
static void zitem_status(rdmx_kv_batch_item_t *it, rdmx_status_t st)
{
    if (it->status >= 0)
        it->status = st;
}

/* Every item of @q gets @st. */
static void zreq_fail(zreq_t *q, rdmx_status_t st)
{
    for (size_t k = 0; k < q->m; k++)
        zitem_status(&q->b->items[q->idx[k]], st);
}

/* A request ended: the answer's results go to its items, or the call's
 * error to all of them. An answer that does not match the request (length,
 * a result that cannot be) is PROTO for all. */
static void zcall_done(const rdmx_call_result_t *r, void *arg)
{
    zreq_t *q = arg;
    zbatch_t *b = q->b;
    rdmx_kv_result_t res;
    rdmx_status_t st = r->status;

    if (st == RDMX_OK && r->length != q->m * RDMX_KV_RESULT_SIZE)
        st = RDMX_ERR_PROTO;
    for (size_t k = 0; k < q->m && st == RDMX_OK; k++) {
        rdmx_kv_batch_item_t *it = &b->items[q->idx[k]];
        if (rdmx__kv_result_decode((const char *)r->data +
                                       k * RDMX_KV_RESULT_SIZE,
                                   RDMX_KV_RESULT_SIZE, &res) != RDMX_OK ||
            (res.where == RDMX_KV_WHERE_BUFFER &&
             (b->put || res.length > it->size)))
            st = RDMX_ERR_PROTO;
    }
    if (st != RDMX_OK) {
        zreq_fail(q, st);
    } else {
        for (size_t k = 0; k < q->m; k++) {
            rdmx_kv_batch_item_t *it = &b->items[q->idx[k]];
            rdmx__kv_result_decode((const char *)r->data +
                                       k * RDMX_KV_RESULT_SIZE,
                                   RDMX_KV_RESULT_SIZE, &res);
            zitem_status(it, (rdmx_status_t)res.status);
            if (!b->put)
                it->length = (size_t)res.length;
        }
    }
    if (--b->pending == 0)
        b->done = 1;
}

/* The offset of @it's slot in its region (a 0-byte slot without a
 * buffer: 0). */
static uint64_t zslot_offset(const rdmx_kv_batch_item_t *it)
{
    if (it->buf == NULL)
        return 0;
    return (uint64_t)((const char *)it->buf -
                      (const char *)rdmx_mr_addr(it->mr));
}

/* Encode request @q (the lent spans, then every key with its locator) into
 * @m; @a: the call's flags and TTL (PUT). */
static rdmx_status_t zreq_encode(zreq_t *q, kv_msg_t *m, const kv_args_t *a)
{
    zbatch_t *b = q->b;
    uint64_t lo[RDMX_RPC_BULK_MAX], hi[RDMX_RPC_BULK_MAX];
    unsigned char bulk_of[RDMX_KV_BATCH_MAX];
    size_t len = RDMX_KV_BATCH_HDR, off = RDMX_KV_BATCH_HDR;

    q->nbulk = 0;
    for (size_t k = 0; k < q->m; k++) {
        const rdmx_kv_batch_item_t *it = &b->items[q->idx[k]];
        uint64_t o = zslot_offset(it);
        unsigned j = 0;

        while (j < q->nbulk && q->bulk[j].mr != it->mr)
            j++;
        if (j == q->nbulk) {
            q->bulk[j].mr = it->mr;
            lo[j] = o;
            hi[j] = o + it->size;
            q->nbulk++;
        }
        if (o < lo[j])
            lo[j] = o;
        if (o + it->size > hi[j])
            hi[j] = o + it->size;
        bulk_of[k] = (unsigned char)j;
        len += RDMX_KV_REQ_SIZE + it->klen + RDMX_KV_LOC_SIZE;
    }
    for (unsigned j = 0; j < q->nbulk; j++) {
        /* a descriptor is never empty: a span of 0-byte slots lends a
         * byte beside them (the server writes nothing there) */
        if (hi[j] == lo[j]) {
            if (hi[j] < rdmx_mr_length(q->bulk[j].mr))
                hi[j]++;
            else
                lo[j]--;
        }
        q->bulk[j].offset = lo[j];
        q->bulk[j].length = hi[j] - lo[j];
        q->bulk[j].access = b->put ? RDMX_ACCESS_READ : RDMX_ACCESS_WRITE;
    }
    if (msg_alloc(m, len) == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv batch: out of memory");
    rdmx__kv_batch_hdr_encode((uint32_t)q->m, m->data);
    for (size_t k = 0; k < q->m; k++) {
        const rdmx_kv_batch_item_t *it = &b->items[q->idx[k]];
        rdmx_kv_zitem_t z = {
            .r = {.klen = (uint16_t)it->klen,
                  .key = it->key,
                  .vlen = it->size,
                  .flags = b->put ? a->flags : 0,
                  .ttl_ms = b->put ? a->ttl_ms : 0},
            .bulk = bulk_of[k]};
        z.offset = zslot_offset(it) - lo[bulk_of[k]];
        rdmx__kv_zitem_encode(&z, m->data + off);
        off += rdmx__kv_zitem_size(&z);
    }
    return RDMX_OK;
}

/* The most bytes of one request to server @s: its message limit (once
 * known) less room for the bulk table, at least what every KV server
 * takes. */
static size_t zreq_limit(rdmx_kv_t *kv, unsigned s)
{
    uint64_t max = rdmx__channel_max_message(kv->ch[s]);

    return max > RDMX_KV_MESSAGE_SLACK ? (size_t)max - 16384
                                       : RDMX_KV_MESSAGE_SLACK - 16384;
}

/*
 * Cut the items in @order[0..n) (all for server @s) into requests at the
 * per-request limits, appending them to @b (room for n more). A request
 * ends before a key that would pass RDMX_KV_BATCH_MAX keys, the message
 * limit, RDMX_KV_ZBATCH_BYTES of slots (unless it would be alone) or
 * RDMX_RPC_BULK_MAX regions.
 */
static void zsplit(zbatch_t *b, unsigned s, const size_t *order, size_t n)
{
    size_t limit = zreq_limit(b->kv, s);
    zreq_t *q = NULL;
    rdmx_mr_t *mrs[RDMX_RPC_BULK_MAX];
    unsigned nmr = 0;
    size_t bytes = 0;
    uint64_t slots = 0;

    for (size_t i = 0; i < n; i++) {
        const rdmx_kv_batch_item_t *it = &b->items[order[i]];
        size_t entry = RDMX_KV_REQ_SIZE + it->klen + RDMX_KV_LOC_SIZE;
        unsigned j = 0;

        while (j < nmr && mrs[j] != it->mr)
            j++;
        if (q == NULL || q->m == RDMX_KV_BATCH_MAX ||
            bytes + entry > limit ||
            slots + it->size > RDMX_KV_ZBATCH_BYTES ||
            (j == nmr && nmr == RDMX_RPC_BULK_MAX)) {
            q = &b->req[b->nreq++];
            q->b = b;
            q->server = s;
            q->idx = &order[i];
            q->m = 0;
            nmr = 0;
            j = 0;
            bytes = RDMX_KV_BATCH_HDR;
            slots = 0;
        }
        if (j == nmr)
            mrs[nmr++] = it->mr;
        q->m++;
        bytes += entry;
        slots += it->size;
    }
}

/* Check item @i: a key, a region, the slot inside it. */
static rdmx_status_t zitem_check(const rdmx_kv_batch_item_t *it, size_t i,
                                 const char *what)
{
    uintptr_t base, end, p;

    if (check_key(it->klen, it->key) != RDMX_OK)
        return rdmx__error(RDMX_ERR_INVALID, "%s: item %zu: key of %zu bytes",
                           what, i, it->klen);
    if (it->mr == NULL || (it->buf == NULL && it->size != 0))
        return rdmx__error(RDMX_ERR_INVALID, "%s: item %zu: %s", what, i,
                           it->mr == NULL ? "no region (mr)" : "NULL buffer");
    base = (uintptr_t)rdmx_mr_addr(it->mr);
    end = base + rdmx_mr_length(it->mr);
    p = (uintptr_t)it->buf;
    if (it->buf == NULL)
        p = base; /* a 0-byte slot without a buffer: the region's start */
    if (p < base || p > end || it->size > end - p)
        return rdmx__error(RDMX_ERR_INVALID,
                           "%s: item %zu: slot of %zu bytes at %p is not "
                           "inside its region (%p, %zu bytes)",
                           what, i, it->size, it->buf, (void *)base,
                           rdmx_mr_length(it->mr));
    return RDMX_OK;
}

/*
 * The two zero-copy batches (@put: rdmx_kv_batch_put): check every item,
 * group the items by server (every copy of a PUT), cut the groups into
 * requests (zsplit), start them all, wait until every one ended. Memory:
 * an index and a request record per item at most, and the requests'
 * bytes while they start.
 */
static rdmx_status_t zbatch_run(rdmx_kv_t *kv, rdmx_kv_batch_item_t *items,
                                size_t n, const rdmx_kv_op_params_t *params,
                                int put)
{
    const char *what = put ? "kv batch_put" : "kv batch_get";
    unsigned copies = put ? kv->replicas : 1;
    rdmx_status_t st = RDMX_OK, st1;
    unsigned *srv = NULL;
    size_t total, nidx = 0;
    zbatch_t b;
    kv_args_t a;

    if (kv == NULL || (items == NULL && n > 0))
        return rdmx__error(RDMX_ERR_INVALID, "%s: NULL argument", what);
    if ((st = kv_args(params, 0, what, &a)) != RDMX_OK)
        return st;
    if (put && a.mode != RDMX_KV_PUT_SET)
        return rdmx__error(RDMX_ERR_INVALID,
                           "%s: mode %d; a batch only stores (SET)", what,
                           (int)a.mode);
    for (size_t i = 0; i < n; i++) {
        items[i].status = RDMX_INPROGRESS; /* nothing known yet */
        items[i].length = 0;
        if ((st1 = zitem_check(&items[i], i, what)) != RDMX_OK) {
            items[i].status = st1;
            if (st == RDMX_OK)
                st = st1;
        }
    }
    if (st != RDMX_OK) {
        char why[256];

        snprintf(why, sizeof(why), "%s", rdmx_error_detail());
        for (size_t i = 0; i < n; i++)
            if (items[i].status == RDMX_INPROGRESS)
                items[i].status = RDMX_ERR_CANCELED;
        return rdmx__error(st, "%s", why);
    }
    if (n == 0)
        return RDMX_OK;
    total = n * copies;
    memset(&b, 0, sizeof(b));
    b.kv = kv;
    b.put = put;
    b.items = items;
    b.idx = malloc(total * sizeof(*b.idx));
    b.req = calloc(total, sizeof(*b.req));
    srv = malloc(n * sizeof(*srv));
    if (b.idx == NULL || b.req == NULL || srv == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "%s: out of memory", what);
        for (size_t i = 0; i < n; i++)
            items[i].status = RDMX_ERR_CANCELED;
        goto out_free;
    }
    /* Place every key once: channels may change state meanwhile. */
    for (size_t i = 0; i < n; i++)
        srv[i] = put ? rdmx_kv_server_of(kv, items[i].key, items[i].klen)
                     : read_server(kv, items[i].key, items[i].klen);
    for (unsigned c = 0; c < copies; c++) {
        for (unsigned s = 0; s < kv->n; s++) {
            size_t first = nidx;
            for (size_t i = 0; i < n; i++)
                if ((srv[i] + c) % kv->n == s)
                    b.idx[nidx++] = i;
            if (nidx > first)
                zsplit(&b, s, &b.idx[first], nidx - first);
        }
    }
    /* Start every request under the worker's lock, so that no completion
     * runs before all started; pending holds one until then. */
    rdmx__worker_lock(kv->w);
    b.pending = 1;
    for (size_t r = 0; r < b.nreq; r++) {
        zreq_t *q = &b.req[r];
        rdmx_call_params_t cp = {0};
        kv_msg_t m;

        msg_init(&m);
        if ((st1 = zreq_encode(q, &m, &a)) != RDMX_OK) {
            zreq_fail(q, st1);
            continue;
        }
        cp.field_mask = RDMX_CALL_PARAM_FIELD_CB | RDMX_CALL_PARAM_FIELD_BULK;
        cp.cb = zcall_done;
        cp.arg = q;
        cp.bulk = q->bulk;
        cp.nbulk = q->nbulk;
        if (a.has_timeout) {
            cp.field_mask |= RDMX_CALL_PARAM_FIELD_TIMEOUT;
            cp.timeout_ms = a.timeout_ms;
        }
        b.pending++;
        st1 = rdmx_call_nb(kv->ch[q->server], put ? RDMX_KV_H_BPUT
                                                  : RDMX_KV_H_BGET,
                           m.data, m.len, &cp, NULL);
        msg_free(&m);
        if (st1 != RDMX_INPROGRESS) {
            b.pending--;
            zreq_fail(q, st1);
        }
    }
    if (--b.pending == 0)
        b.done = 1;
    rdmx__worker_unlock(kv->w);
    rdmx__wait_until(kv->w, &b.done);
    for (size_t i = 0; i < n; i++)
        if (items[i].status == RDMX_INPROGRESS) /* cannot: every request
                                                   has its items */
            items[i].status = RDMX_ERR_INTERNAL;
out_free:
    free(srv);
    free(b.req);
    free(b.idx);
    return st;
}

rdmx_status_t rdmx_kv_batch_get(rdmx_kv_t *kv, rdmx_kv_batch_item_t *items,
                                size_t n, const rdmx_kv_op_params_t *params)
{
    return zbatch_run(kv, items, n, params, 0);
}

rdmx_status_t rdmx_kv_batch_put(rdmx_kv_t *kv, rdmx_kv_batch_item_t *items,
                                size_t n, const rdmx_kv_op_params_t *params)
{
    return zbatch_run(kv, items, n, params, 1);
}

/* --- every server, one server --------------------------------------------- */

rdmx_status_t rdmx_kv_flush(rdmx_kv_t *kv)
{
    unsigned char dummy[8];
    kv_msg_t m;
    kv_op_t op;

    /* every server in turn (copies from server 0); the first error */
    msg_init(&m);
    op_init(&op, kv, RDMX_KV_H_FLUSH, &m, 0, kv->n);
    op.resp = dummy;
    op.resp_cap = sizeof(dummy);
    return op_wait(&op);
}

rdmx_status_t rdmx_kv_stats(rdmx_kv_t *kv, unsigned index, char *buf,
                            size_t size)
{
    kv_msg_t m;
    kv_op_t op;
    rdmx_status_t st;

    if (index >= kv->n || buf == NULL || size == 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv stats: server %u of %u",
                           index, kv->n);
    msg_init(&m);
    op_init(&op, kv, RDMX_KV_H_STATS, &m, index, 1);
    op.resp = (unsigned char *)buf;
    op.resp_cap = size - 1;
    st = op_wait(&op);
    buf[st == RDMX_OK || st == RDMX_ERR_TOO_BIG ? op.resp_len : 0] = '\0';
    return st;
}

/* --- lambda --------------------------------------------------------------- */

rdmx_status_t rdmx_kv_eval(rdmx_kv_t *kv, const char *source, size_t length,
                           const rdmx_kv_eval_params_t *params, void *out,
                           size_t capacity, size_t *out_len_p)
{
    uint64_t f = params != NULL ? params->field_mask : 0;
    const char *const *keys =
        (f & RDMX_KV_EVAL_PARAM_FIELD_KEYS) ? params->keys : NULL;
    unsigned nkeys = (f & RDMX_KV_EVAL_PARAM_FIELD_KEYS) ? params->nkeys : 0;
    const char *const *args =
        (f & RDMX_KV_EVAL_PARAM_FIELD_ARGS) ? params->args : NULL;
    unsigned nargs = (f & RDMX_KV_EVAL_PARAM_FIELD_ARGS) ? params->nargs : 0;
    const char *all[RDMX_LAMBDA_ARGS_MAX];
    rdmx_call_params_t cp = {0};
    unsigned s = 0, i;
    rdmx_status_t st;

    if (f & RDMX_KV_EVAL_PARAM_FIELD_TIMEOUT) {
        cp.field_mask = RDMX_CALL_PARAM_FIELD_TIMEOUT;
        cp.timeout_ms = params->timeout_ms;
    }
    if (kv == NULL || (source == NULL && length > 0) ||
        (nkeys > 0 && keys == NULL) || (nargs > 0 && args == NULL))
        return rdmx__error(RDMX_ERR_INVALID, "kv eval: NULL argument");
    if ((size_t)nkeys + nargs > RDMX_LAMBDA_ARGS_MAX)
        return rdmx__error(RDMX_ERR_INVALID,
                           "kv eval: %u keys and %u args, at most %d in all",
                           nkeys, nargs, RDMX_LAMBDA_ARGS_MAX);
    for (i = 0; i < nkeys; i++) {
        size_t klen = keys[i] != NULL ? strlen(keys[i]) : 0;
        if ((st = check_key(klen, keys[i])) != RDMX_OK)
            return st;
        if (i == 0)
            s = rdmx_kv_server_of(kv, keys[0], klen);
        else if (rdmx_kv_server_of(kv, keys[i], klen) != s)
            return rdmx__error(RDMX_ERR_INVALID,
                               "kv eval: key '%.64s' lives on %s, not on %s "
                               "with '%.64s': a function runs on one server",
                               keys[i], kv->addr[rdmx_kv_server_of(
                                            kv, keys[i], klen)],
                               kv->addr[s], keys[0]);
        all[i] = keys[i];
    }
    for (i = 0; i < nargs; i++)
        all[nkeys + i] = args[i];
    return rdmx__lambda_eval(kv->ch[s], source, length, NULL, 0, all,
                             nkeys + nargs, nkeys, &cp, out, capacity,
                             out_len_p);
}
