/*
 * The KV server (server.h): the kv.* handlers over the store, the lambda
 * environment, the stats answer and the server's life cycle.
 *
 * Values live in one region registered at create. The handlers run on the
 * RPC server's workers: GET answers small values inline and RDMA-writes
 * larger ones into the caller's buffer before answering; PUT takes small
 * values inline and pulls larger ones with RDMA read into a reserved item
 * that becomes visible only when complete. An item is referenced while a
 * transfer reads it, so a concurrent PUT or DELETE never frees memory a GET
 * is still writing from. The zero-copy batches (kv.batch_get,
 * kv.batch_put) do the same per key into or from the caller's lent slots,
 * at most RDMX_KV_ZBATCH_WINDOW transfers at a time per request, and answer
 * once with a result per key. Each request is decoded once, by its handler.
 */
#define _GNU_SOURCE
#include "kv/server.h"

#include "core/upper.h"
#include "kv/proto.h"
#include "rpc/respond.h"
#include "util/error.h"
#include "util/thread.h"
#include "util/time.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RECLAIM_EVERY_MS 100  /* sweep period */
#define RECLAIM_MAX      1000 /* items per sweep */
#define DRAIN_MS         2000 /* destroy: how long transfers may finish */

struct rdmx_kv_server {
    rdmx_context_t *ctx;
    rdmx_rpc_server_t *rpc;
    rdmx_mr_t *mr;                /* the value region */
    rdmx_kv_store_t *store;
    rdmx_lambda_engine_t *lambda; /* NULL unless cfg.lambda */
    rdmx_lambda_env_t lambda_env; /* the store, for the engine */
    size_t inline_threshold;
    int mapped_gets;         /* answer GET_MAP GETs with a location */
    uint64_t store_id;       /* random: which store a location is in */
    unsigned char *map_desc; /* the store's descriptor (read), sent
                                to GETs with RDMX_KV_GET_MAP_WANT */
    size_t map_desc_len;
    uint64_t store_maps;          /* atomic: descriptors sent */
    uint64_t get_mapped;          /* atomic: GETs answered with a location */
    uint64_t get_again;           /* atomic: GETs asked again after a
                                     mapped copy met a change */
    uint64_t put_pulled;          /* atomic: PUT values read from a lent
                                     buffer */
    uint64_t bad_requests;        /* atomic: any worker */
    uint64_t get_lent;            /* atomic: GETs that lent a buffer */
    uint64_t get_written;         /* atomic: ... whose value went into it */
    uint64_t xfers;               /* atomic: RDMA transfers in flight */
    uint64_t started_ms;          /* create time */
    /* the sweep of expired items: its thread sleeps on `wake` */
    pthread_t reclaimer;
    int reclaiming;               /* the thread runs (creator's thread) */
    int stopping;                 /* under lock: the thread must end */
    pthread_mutex_t lock;
    pthread_cond_t wake;
};

static uint64_t now_ms(void)
{
    return rdmx_now_ns() / 1000000;
}

static void count_bad(rdmx_kv_server_t *s)
{
    __atomic_add_fetch(&s->bad_requests, 1, __ATOMIC_RELAXED);
}

/* --- answers ------------------------------------------------------------ */

/* A GET's value up to this size is copied into its answer, which the
 * transport then sends at once; a larger one is sent from the item. A
 * copied answer the transport does not take at once is copied again by
 * the RPC layer into a kept buffer before UCX copies it into its FIFO or
 * socket: three copies of the value, where the gathered send makes one
 * (docs/PERFORMANCE.md, "KV values sent from the item"). 512 B and the
 * headers fit what every transport takes at once: ~960 B over shared
 * memory (docs/CORE.md, "Small messages at once"), ~620 B over UCX
 * 1.22's tcp, ~8 KiB over 1.13's. */
#define RDMX_KV_COPY_MAX 512
/* Answers built on the stack (a result header and such a value, or a
 * message of at most 255 bytes): at most this size. */
#define RDMX_KV_SMALL_ANSWER (RDMX_KV_RESULT_SIZE + RDMX_KV_COPY_MAX)

/* Answer with a result header, optionally followed by @vlen bytes (a
 * message or a small value: at most RDMX_KV_SMALL_ANSWER in all; a value
 * goes through reply_item). */
static void reply(rdmx_rpc_req_t *req, rdmx_status_t status, uint32_t where,
                  uint32_t flags, uint64_t cas, uint64_t length,
                  const void *value, size_t vlen)
{
    unsigned char out[RDMX_KV_SMALL_ANSWER];
    rdmx_kv_result_t r = {.status = status, .where = where, .flags = flags,
                          .cas = cas, .length = length};

    if (vlen > sizeof(out) - RDMX_KV_RESULT_SIZE) {
        rdmx_rpc_respond_error(req, RDMX_ERR_INTERNAL,
                               "kv: an answer of %zu bytes built on the "
                               "stack",
                               vlen);
        return;
    }
    rdmx__kv_result_encode(&r, out);
    if (vlen != 0)
        memcpy(out + RDMX_KV_RESULT_SIZE, value, vlen);
    rdmx_rpc_respond(req, out, RDMX_KV_RESULT_SIZE + vlen);
}

/* An item whose value an answer is sent from: the reference is dropped
 * when the transport no longer reads it. */
typedef struct {
    rdmx_kv_store_t *store;
    rdmx_kv_item_t *it;
} sent_item_t;

static void item_sent(void *arg)
{
    sent_item_t *x = arg;

    rdmx__kv_store_release(x->store, x->it);
    free(x);
}

/* Answer a GET with the value of @it, which holds a reference that this
 * call takes over. A large value goes out from the item itself: the
 * transport gathers the result header and the value, and the reference
 * keeps the value unchanged until the send is over (store.h, "Reading"). */
static void reply_item(rdmx_kv_server_t *s, rdmx_rpc_req_t *req,
                       rdmx_kv_item_t *it)
{
    size_t len = rdmx__kv_item_length(it);
    unsigned char head[RDMX_KV_RESULT_SIZE];
    rdmx_kv_result_t r = {.status = RDMX_OK,
                          .where = RDMX_KV_WHERE_INLINE,
                          .flags = rdmx__kv_item_flags(it),
                          .cas = rdmx__kv_item_cas(it),
                          .length = len};
    sent_item_t *x;

    if (len <= RDMX_KV_COPY_MAX) {
        reply(req, RDMX_OK, RDMX_KV_WHERE_INLINE, r.flags, r.cas, len,
              rdmx__kv_item_value(s->store, it), len);
        rdmx__kv_store_release(s->store, it);
        return;
    }
    if ((x = malloc(sizeof(*x))) == NULL) {
        rdmx__kv_store_release(s->store, it);
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    x->store = s->store;
    x->it = it;
    rdmx__kv_result_encode(&r, head);
    rdmx__rpc_respond_parts(req, head, sizeof(head),
                            rdmx__kv_item_value(s->store, it), len, item_sent,
                            x);
}

/* A failed operation: status and a message after the header. */
static void reply_error(rdmx_rpc_req_t *req, rdmx_status_t status,
                        const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void reply_error(rdmx_rpc_req_t *req, rdmx_status_t status,
                        const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(msg))
        n = sizeof(msg) - 1;
    reply(req, status, RDMX_KV_WHERE_NONE, 0, 0, 0, msg, (size_t)n);
}

static void reply_status(rdmx_rpc_req_t *req, rdmx_status_t st)
{
    if (st == RDMX_OK)
        reply(req, RDMX_OK, RDMX_KV_WHERE_NONE, 0, 0, 0, NULL, 0);
    else if (st == RDMX_ERR_NOT_FOUND || st == RDMX_ERR_EXISTS)
        /* ordinary outcomes: the store sets no detail for them */
        reply_error(req, st, "%s", rdmx_strerror(st));
    else
        reply_error(req, st, "%s", rdmx_error_detail()[0]
                                       ? rdmx_error_detail()
                                       : rdmx_strerror(st));
}

/* Decode the single request of @req, with value bytes as @value says;
 * answers PROTO (or INVALID for an empty key) and returns -1 if bad. */
static int decode(rdmx_kv_server_t *s, rdmx_rpc_req_t *req,
                  rdmx_kv_value_t value, rdmx_kv_req_t *r)
{
    size_t len, used;
    const void *data = rdmx_rpc_req_data(req, &len);
    char why[160];

    if (rdmx__kv_req_decode(data, len, value, r, &used, why, sizeof(why)) !=
            RDMX_OK ||
        used != len) {
        count_bad(s);
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO, "%s: %s",
                               rdmx_rpc_req_name(req),
                               used != len && used ? "trailing bytes" : why);
        return -1;
    }
    if (r->klen == 0) {
        count_bad(s);
        rdmx_rpc_respond_error(req, RDMX_ERR_INVALID, "%s: empty key",
                               rdmx_rpc_req_name(req));
        return -1;
    }
    return 0;
}

/* --- GET ---------------------------------------------------------------- */

/* An RDMA transfer of a GET or PUT in flight. Allocated with malloc, not
 * calloc: calloc (glibc 2.36, Debian 12's) never takes from the thread's
 * cache of freed blocks, so with it every record cost a trip through the
 * allocator's bins both ways (~300 instructions of a 4 KiB SET's ~3,000
 * on the server); xfer_new makes it whole. */
typedef struct {
    rdmx_kv_server_t *s;
    rdmx_rpc_req_t *req;
    rdmx_kv_item_t *item; /* GET: referenced; PUT: reserved */
    rdmx_kv_req_t r;      /* PUT: the request (its key points into req) */
    int flushed;          /* GET: the endpoint flush was started */
} xfer_t;

static xfer_t *xfer_new(rdmx_kv_server_t *s, rdmx_rpc_req_t *req,
                        rdmx_kv_item_t *it)
{
    xfer_t *x = malloc(sizeof(*x));

    if (x != NULL)
        *x = (xfer_t){.s = s, .req = req, .item = it};
    return x;
}

static void get_done(rdmx_status_t st, size_t length, void *arg)
{
    xfer_t *x = arg;
    rdmx_kv_item_t *it = x->item;

    (void)length;
    if (st == RDMX_OK && !x->flushed) {
        /* the value must be at the caller before the answer */
        x->flushed = 1;
        st = rdmx_ep_flush_nb(
            rdmx_rpc_req_ep(x->req),
            &(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_CB,
                                .cb = get_done,
                                .arg = x});
        if (st == RDMX_INPROGRESS)
            return;
    }
    if (st == RDMX_OK)
        reply(x->req, RDMX_OK, RDMX_KV_WHERE_BUFFER, rdmx__kv_item_flags(it),
              rdmx__kv_item_cas(it), rdmx__kv_item_length(it), NULL, 0);
    else
        reply_error(x->req, st, "writing the value into the caller's buffer "
                                "failed: %s",
                    rdmx_strerror(st));
    rdmx__kv_store_release(x->s->store, it);
    __atomic_sub_fetch(&x->s->xfers, 1, __ATOMIC_RELAXED);
    free(x);
}

/*
 * A GET of a caller that maps the store: where the value of @it lies and
 * its stamp, which the caller checks after its copy, and the store's
 * descriptor if the caller asked for it; or TOO_BIG if its buffer is
 * smaller. No reference outlives the answer (docs/KV.md, "Mapped GETs
 * over shared memory").
 */
static void reply_location(rdmx_kv_server_t *s, rdmx_rpc_req_t *req,
                           const rdmx_kv_req_t *r, rdmx_kv_item_t *it)
{
    size_t len = rdmx__kv_item_length(it);
    int want = (r->mode & RDMX_KV_GET_MAP_WANT) != 0;
    size_t n = RDMX_KV_RESULT_SIZE + RDMX_KV_LOCATION_SIZE +
               (want ? s->map_desc_len : 0);
    rdmx_kv_result_t res = {.status = RDMX_OK,
                            .where = RDMX_KV_WHERE_STORE,
                            .flags = rdmx__kv_item_flags(it),
                            .cas = rdmx__kv_item_cas(it),
                            .length = len};
    rdmx_kv_location_t l = {.store_id = s->store_id,
                            .stamp_offset =
                                rdmx__kv_item_stamp_offset(s->store, it),
                            .value_offset = rdmx__kv_item_offset(s->store, it),
                            .stamp = rdmx__kv_item_stamp(it)};
    unsigned char small[RDMX_KV_RESULT_SIZE + RDMX_KV_LOCATION_SIZE];
    unsigned char *out = small;

    if (len > r->vlen) {
        reply(req, RDMX_ERR_TOO_BIG, RDMX_KV_WHERE_NONE, res.flags, res.cas,
              len, NULL, 0);
    } else if (want && (out = malloc(n)) == NULL) {
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
    } else {
        rdmx__kv_result_encode(&res, out);
        rdmx__kv_location_encode(&l, out + RDMX_KV_RESULT_SIZE);
        if (want) {
            memcpy(out + RDMX_KV_RESULT_SIZE + RDMX_KV_LOCATION_SIZE,
                   s->map_desc, s->map_desc_len);
            __atomic_add_fetch(&s->store_maps, 1, __ATOMIC_RELAXED);
        }
        __atomic_add_fetch(&s->get_mapped, 1, __ATOMIC_RELAXED);
        rdmx_rpc_respond(req, out, n);
    }
    if (out != small)
        free(out);
    rdmx__kv_store_release(s->store, it);
}

static void h_get(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_kv_server_t *s = arg;
    rdmx_kv_req_t r;
    rdmx_kv_item_t *it;
    rdmx_rmem_t *rmem;
    rdmx_status_t st;
    size_t len;
    xfer_t *x;

    if (decode(s, req, RDMX_KV_VALUE_NONE, &r) != 0)
        return;
    if (r.mode & RDMX_KV_GET_BUF)
        __atomic_add_fetch(&s->get_lent, 1, __ATOMIC_RELAXED);
    if (r.mode & RDMX_KV_GET_AGAIN)
        __atomic_add_fetch(&s->get_again, 1, __ATOMIC_RELAXED);
    st = rdmx__kv_store_get(s->store, r.key, r.klen, now_ms(), &it);
    if (st != RDMX_OK) {
        reply_status(req, st);
        return;
    }
    len = rdmx__kv_item_length(it);
    if ((r.mode & RDMX_KV_GET_MAP) && s->mapped_gets &&
        len > RDMX_KV_MAP_ABOVE) {
        reply_location(s, req, &r, it);
        return;
    }
    if (!(r.mode & RDMX_KV_GET_BUF) || len <= s->inline_threshold) {
        if ((r.mode & RDMX_KV_GET_BUF) && len > r.vlen) {
            reply(req, RDMX_ERR_TOO_BIG, RDMX_KV_WHERE_NONE,
                  rdmx__kv_item_flags(it), rdmx__kv_item_cas(it), len, NULL,
                  0);
            rdmx__kv_store_release(s->store, it);
        } else {
            reply_item(s, req, it); /* (takes the reference) */
        }
        return;
    }
    /* Large value, caller lent a buffer: RDMA-write it there. */
    if ((st = rdmx_rpc_req_bulk(req, 0, &rmem)) != RDMX_OK) {
        count_bad(s);
        if (st == RDMX_ERR_OUT_OF_RANGE)
            st = RDMX_ERR_PROTO; /* buffer flag without a descriptor */
        rdmx__kv_store_release(s->store, it);
        rdmx_rpc_respond_error(req, st, "kv.get: buffer descriptor: %s",
                               rdmx_error_detail());
        return;
    }
    if (rdmx_rmem_length(rmem) < len) {
        reply(req, RDMX_ERR_TOO_BIG, RDMX_KV_WHERE_NONE,
              rdmx__kv_item_flags(it), rdmx__kv_item_cas(it), len, NULL, 0);
        rdmx__kv_store_release(s->store, it);
        return;
    }
    x = xfer_new(s, req, it);
    if (x == NULL) {
        rdmx__kv_store_release(s->store, it);
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    /* The caller's buffer is lent only until its deadline (or cancel):
     * after that not a byte may land in it (docs/RPC.md, "Lent
     * buffers"). Checked right before the write. */
    if (!rdmx_rpc_req_may_write(req)) {
        free(x);
        rdmx__kv_store_release(s->store, it);
        rdmx_rpc_respond_error(req, RDMX_ERR_TIMEOUT,
                               "kv.get: the call expired before the value "
                               "was written; nothing was written");
        return;
    }
    __atomic_add_fetch(&s->get_written, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->xfers, 1, __ATOMIC_RELAXED);
    st = rdmx_put_nb(rdmx_rpc_req_ep(req), rmem, 0,
                     rdmx__kv_item_value(s->store, it), len,
                     &(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_CB |
                                                       RDMX_OP_PARAM_FIELD_MR,
                                         .cb = get_done,
                                         .arg = x,
                                         .mr = s->mr});
    if (st != RDMX_INPROGRESS)
        get_done(st, len, x);
}

/* --- PUT ---------------------------------------------------------------- */

/* The flags of the pull of a lent value of @vlen bytes into a reserved
 * item: a large one is written around the cache (store.h,
 * RDMX_KV_STREAM_MIN). */
static unsigned pull_flags(uint64_t vlen)
{
    return vlen >= RDMX_KV_STREAM_MIN ? RDMX_OP_FLAG_STREAM : 0;
}

/* Answer a PUT whose commit returned @st (and the new version @cas). */
static void put_reply(rdmx_rpc_req_t *req, const rdmx_kv_req_t *r,
                      rdmx_status_t st, uint64_t cas)
{
    if (st == RDMX_OK)
        reply(req, RDMX_OK, RDMX_KV_WHERE_NONE, r->flags, cas, r->vlen, NULL,
              0);
    else
        reply_status(req, st);
}

static void put_done(rdmx_status_t st, size_t length, void *arg)
{
    xfer_t *x = arg;
    uint64_t cas = 0;

    (void)length;
    if (st != RDMX_OK) {
        rdmx__kv_store_abort(x->s->store, x->item);
        reply_error(x->req, st, "reading the value from the caller failed: "
                                "%s",
                    rdmx_strerror(st));
    } else {
        st = rdmx__kv_store_commit(
            x->s->store, x->item,
            (rdmx_kv_store_mode_t)(x->r.mode & RDMX_KV_MODE_MASK), x->r.cas,
            x->r.flags, x->r.ttl_ms, now_ms(), &cas);
        put_reply(x->req, &x->r, st, cas);
    }
    __atomic_sub_fetch(&x->s->xfers, 1, __ATOMIC_RELAXED);
    free(x);
}

static void h_put(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_kv_server_t *s = arg;
    rdmx_kv_req_t r;
    rdmx_kv_item_t *it;
    rdmx_rmem_t *rmem;
    rdmx_status_t st;
    uint64_t cas = 0;
    xfer_t *x;

    if (decode(s, req, RDMX_KV_VALUE_PUT, &r) != 0)
        return;
    if ((r.mode & RDMX_KV_MODE_MASK) > RDMX_KV_STORE_CAS) {
        count_bad(s);
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO, "kv.put: mode %u",
                               r.mode & RDMX_KV_MODE_MASK);
        return;
    }
    if (!(r.mode & RDMX_KV_PUT_BULK)) {
        st = rdmx__kv_store_set(
            s->store, r.key, r.klen, r.value, (size_t)r.vlen,
            (rdmx_kv_store_mode_t)(r.mode & RDMX_KV_MODE_MASK), r.cas,
            r.flags, r.ttl_ms, now_ms(), &cas);
        put_reply(req, &r, st, cas);
        return;
    }
    if ((st = rdmx_rpc_req_bulk(req, 0, &rmem)) != RDMX_OK) {
        count_bad(s);
        rdmx_rpc_respond_error(req, st == RDMX_ERR_OUT_OF_RANGE
                                        ? RDMX_ERR_PROTO
                                        : st,
                               "kv.put: value descriptor: %s",
                               rdmx_error_detail());
        return;
    }
    if (rdmx_rmem_length(rmem) < r.vlen) {
        count_bad(s);
        rdmx_rpc_respond_error(req, RDMX_ERR_OUT_OF_RANGE,
                               "kv.put: value of %llu bytes, descriptor of "
                               "%llu",
                               (unsigned long long)r.vlen,
                               (unsigned long long)rdmx_rmem_length(rmem));
        return;
    }
    st = rdmx__kv_store_reserve(s->store, r.key, r.klen, (size_t)r.vlen,
                                now_ms(), &it);
    if (st != RDMX_OK) {
        reply_status(req, st);
        return;
    }
    x = xfer_new(s, req, it);
    if (x == NULL) {
        rdmx__kv_store_abort(s->store, it);
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    x->r = r;
    __atomic_add_fetch(&s->xfers, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->put_pulled, 1, __ATOMIC_RELAXED);
    st =
        rdmx_get_nb(rdmx_rpc_req_ep(req), rmem, 0,
                    rdmx__kv_item_value(s->store, it), (size_t)r.vlen,
                    &(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_CB |
                                                      RDMX_OP_PARAM_FIELD_MR |
                                                      RDMX_OP_PARAM_FIELD_FLAGS,
                                        .cb = put_done,
                                        .arg = x,
                                        .mr = s->mr,
                                        .flags = pull_flags(r.vlen)});
    if (st != RDMX_INPROGRESS)
        put_done(st, (size_t)r.vlen, x);
}

/* --- small commands ----------------------------------------------------- */

static void h_delete(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_kv_server_t *s = arg;
    rdmx_kv_req_t r;

    if (decode(s, req, RDMX_KV_VALUE_NONE, &r) == 0)
        reply_status(req, rdmx__kv_store_delete(s->store, r.key, r.klen,
                                                r.cas, now_ms()));
}

static void h_touch(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_kv_server_t *s = arg;
    rdmx_kv_req_t r;

    if (decode(s, req, RDMX_KV_VALUE_NONE, &r) == 0)
        reply_status(req, rdmx__kv_store_touch(s->store, r.key, r.klen,
                                               r.ttl_ms, now_ms()));
}

static void h_exists(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_kv_server_t *s = arg;
    rdmx_kv_req_t r;

    if (decode(s, req, RDMX_KV_VALUE_NONE, &r) == 0)
        reply_status(req, rdmx__kv_store_exists(s->store, r.key, r.klen,
                                                now_ms()));
}

static void h_incr(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_kv_server_t *s = arg;
    rdmx_kv_req_t r;
    uint64_t v = 0;
    rdmx_status_t st;

    if (decode(s, req, RDMX_KV_VALUE_NONE, &r) != 0)
        return;
    st = rdmx__kv_store_incr(s->store, r.key, r.klen, r.cas,
                             (r.mode & RDMX_KV_INCR_DECR) != 0, now_ms(), &v);
    if (st == RDMX_OK)
        reply(req, RDMX_OK, RDMX_KV_WHERE_NONE, 0, 0, v, NULL, 0);
    else
        reply_status(req, st);
}

static void h_flush(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_kv_server_t *s = arg;

    rdmx__kv_store_flush(s->store);
    rdmx_rpc_respond(req, NULL, 0);
}

/* --- batches ------------------------------------------------------------ */

/* A growing answer. */
typedef struct {
    unsigned char *p;
    size_t len, cap;
} out_t;

static int out_put(out_t *o, const void *data, size_t len)
{
    if (o->len + len > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4096;
        unsigned char *n;
        while (cap < o->len + len)
            cap *= 2;
        if ((n = realloc(o->p, cap)) == NULL)
            return -1;
        o->p = n;
        o->cap = cap;
    }
    memcpy(o->p + o->len, data, len);
    o->len += len;
    return 0;
}

static int out_result(out_t *o, rdmx_status_t st, uint32_t where,
                      uint32_t flags, uint64_t cas, uint64_t length)
{
    unsigned char h[RDMX_KV_RESULT_SIZE];
    rdmx_kv_result_t r = {.status = st, .where = where, .flags = flags,
                          .cas = cas, .length = length};
    rdmx__kv_result_encode(&r, h);
    return out_put(o, h, sizeof(h));
}

typedef enum { BATCH_MGET, BATCH_MPUT, BATCH_PREFIX } batch_kind_t;

/*
 * A batch (kv.mget, kv.mput, kv.prefix): decode each request once and run
 * it; the answer is a result per key (mget: each followed by its value
 * inline), or for prefix the count of keys present before the first miss.
 * A malformed batch is answered PROTO as a whole; an mput item with an
 * unknown mode gets a PROTO result of its own.
 */
static void h_batch(rdmx_rpc_req_t *req, rdmx_kv_server_t *s,
                    batch_kind_t kind)
{
    size_t left, used;
    const unsigned char *p = rdmx_rpc_req_data(req, &left);
    uint32_t n, hits = 0;
    int miss = 0;
    out_t o = {0};
    char why[160];
    uint64_t now = now_ms();

    if (rdmx__kv_batch_decode(p, left, &n) != RDMX_OK) {
        count_bad(s);
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO,
                               "%s: bad batch header (1..%d keys)",
                               rdmx_rpc_req_name(req), RDMX_KV_BATCH_MAX);
        return;
    }
    p += RDMX_KV_BATCH_HDR;
    left -= RDMX_KV_BATCH_HDR;
    for (uint32_t i = 0; i < n; i++) {
        rdmx_kv_req_t r;
        rdmx_kv_item_t *it;
        rdmx_status_t st;
        uint64_t cas = 0;

        if (rdmx__kv_req_decode(p, left,
                                kind == BATCH_MPUT ? RDMX_KV_VALUE_INLINE
                                                   : RDMX_KV_VALUE_NONE,
                                &r, &used, why, sizeof(why)) != RDMX_OK ||
            r.klen == 0) {
            count_bad(s);
            free(o.p);
            rdmx_rpc_respond_error(req, RDMX_ERR_PROTO, "%s: key %u: %s",
                                   rdmx_rpc_req_name(req), i,
                                   r.klen ? why : "empty key");
            return;
        }
        p += used;
        left -= used;
        if (kind == BATCH_MGET) {
            st = rdmx__kv_store_get(s->store, r.key, r.klen, now, &it);
            if (st != RDMX_OK) {
                out_result(&o, st, RDMX_KV_WHERE_NONE, 0, 0, 0);
                continue;
            }
            size_t vl = rdmx__kv_item_length(it);
            if (vl > r.vlen) {
                out_result(&o, RDMX_ERR_TOO_BIG, RDMX_KV_WHERE_NONE,
                           rdmx__kv_item_flags(it), rdmx__kv_item_cas(it),
                           vl);
            } else if (out_result(&o, RDMX_OK, RDMX_KV_WHERE_INLINE,
                                  rdmx__kv_item_flags(it),
                                  rdmx__kv_item_cas(it), vl) != 0 ||
                       out_put(&o, rdmx__kv_item_value(s->store, it), vl) !=
                           0) {
                rdmx__kv_store_release(s->store, it);
                free(o.p);
                rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY,
                                       "out of memory");
                return;
            }
            rdmx__kv_store_release(s->store, it);
        } else if (kind == BATCH_MPUT) {
            if ((r.mode & RDMX_KV_MODE_MASK) > RDMX_KV_STORE_CAS) {
                count_bad(s);
                out_result(&o, RDMX_ERR_PROTO, RDMX_KV_WHERE_NONE, 0, 0, 0);
                continue;
            }
            st = rdmx__kv_store_set(
                s->store, r.key, r.klen, r.value, (size_t)r.vlen,
                (rdmx_kv_store_mode_t)(r.mode & RDMX_KV_MODE_MASK), r.cas,
                r.flags, r.ttl_ms, now, &cas);
            out_result(&o, st, RDMX_KV_WHERE_NONE, r.flags, cas, r.vlen);
        } else {
            if (!miss && rdmx__kv_store_exists(s->store, r.key, r.klen, now) ==
                             RDMX_OK)
                hits++;
            else
                miss = 1;
        }
    }
    if (left != 0) {
        count_bad(s);
        free(o.p);
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO, "%s: %zu trailing bytes",
                               rdmx_rpc_req_name(req), left);
        return;
    }
    if (kind == BATCH_PREFIX) {
        unsigned char h[RDMX_KV_PREFIX_SIZE];
        rdmx__kv_prefix_encode(hits, h);
        rdmx_rpc_respond(req, h, sizeof(h));
    } else {
        rdmx_rpc_respond(req, o.p, o.len);
    }
    free(o.p);
}

static void h_mget(rdmx_rpc_req_t *req, void *arg)
{
    h_batch(req, arg, BATCH_MGET);
}

static void h_mput(rdmx_rpc_req_t *req, void *arg)
{
    h_batch(req, arg, BATCH_MPUT);
}

static void h_prefix(rdmx_rpc_req_t *req, void *arg)
{
    h_batch(req, arg, BATCH_PREFIX);
}

/* --- zero-copy batches ------------------------------------------------- */

typedef struct zbatch zbatch_t;

/* One transfer of a zero-copy batch in flight (a window slot). */
typedef struct {
    zbatch_t *b;
    uint32_t i;           /* the key's index in the request */
    rdmx_kv_item_t *item; /* GET: referenced; PUT: reserved; NULL: free */
} zxfer_t;

/*
 * A kv.batch_get or kv.batch_put being served: its keys decoded and
 * checked, their results, and at most RDMX_KV_ZBATCH_WINDOW transfers in
 * flight. Owned by the worker that runs the handler (its transfers
 * complete in that worker's progress); freed when answered.
 */
struct zbatch {
    rdmx_kv_server_t *s;
    rdmx_rpc_req_t *req;
    int put;                 /* kv.batch_put */
    uint32_t n;              /* keys */
    uint32_t next;           /* keys started so far */
    unsigned inflight;       /* transfers not completed */
    int pumping;             /* pump() runs: completions do not re-enter */
    int wrote;               /* GET: some value was written */
    int flushing;            /* GET: the endpoint flush was started */
    rdmx_status_t stop;      /* not RDMX_OK: start nothing more, answer it */
    rdmx_rmem_t *rmem[RDMX_RPC_BULK_MAX]; /* the request's descriptors */
    rdmx_kv_zitem_t *z;      /* n keys (their keys point into req) */
    unsigned char *out;      /* n results, RDMX_KV_RESULT_SIZE each */
    zxfer_t x[RDMX_KV_ZBATCH_WINDOW];
};

static void zpump(zbatch_t *b);

/* Note key @i's result. */
static void zresult(zbatch_t *b, uint32_t i, rdmx_status_t st, uint32_t where,
                    rdmx_kv_item_t *it, uint64_t cas, uint64_t length)
{
    rdmx_kv_result_t r = {.status = st, .where = where, .cas = cas,
                          .length = length};

    if (it != NULL) {
        r.flags = rdmx__kv_item_flags(it);
        r.cas = rdmx__kv_item_cas(it);
    }
    rdmx__kv_result_encode(&r, b->out + (size_t)i * RDMX_KV_RESULT_SIZE);
}

/* Answer @b and free it: its results, or the error that stopped it. */
static void zanswer(zbatch_t *b, rdmx_status_t st)
{
    rdmx_kv_server_t *s = b->s;
    const char *what = b->put ? RDMX_KV_H_BPUT : RDMX_KV_H_BGET;

    if (st == RDMX_OK && b->stop != RDMX_OK)
        rdmx_rpc_respond_error(b->req, b->stop,
                               "%s: the call ended after %u of %u keys had "
                               "started; the rest were not",
                               what, b->next, b->n);
    else if (st != RDMX_OK)
        rdmx_rpc_respond_error(b->req, st,
                               "%s: flushing the values to the caller "
                               "failed: %s",
                               what, rdmx_strerror(st));
    else
        rdmx_rpc_respond(b->req, b->out, (size_t)b->n * RDMX_KV_RESULT_SIZE);
    free(b->out);
    free(b->z);
    free(b);
    __atomic_sub_fetch(&s->xfers, 1, __ATOMIC_RELAXED);
}

static void zflush_done(rdmx_status_t st, size_t length, void *arg)
{
    (void)length;
    zanswer(arg, st);
}

/* Every transfer of @b completed: flush the endpoint after GET writes (the
 * values must be at the caller before the answer), then answer. */
static void zfinish(zbatch_t *b)
{
    rdmx_status_t st;

    if (!b->put && b->wrote && b->stop == RDMX_OK) {
        b->flushing = 1;
        st = rdmx_ep_flush_nb(
            rdmx_rpc_req_ep(b->req),
            &(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_CB,
                                .cb = zflush_done,
                                .arg = b});
        if (st != RDMX_INPROGRESS)
            zanswer(b, st);
        return;
    }
    zanswer(b, RDMX_OK);
}

/* A GET's write into the caller's slot completed. */
static void zget_done(rdmx_status_t st, size_t length, void *arg)
{
    zxfer_t *x = arg;
    zbatch_t *b = x->b;

    (void)length;
    if (st == RDMX_OK)
        b->wrote = 1;
    zresult(b, x->i, st, st == RDMX_OK ? RDMX_KV_WHERE_BUFFER
                                       : RDMX_KV_WHERE_NONE,
            x->item, 0, rdmx__kv_item_length(x->item));
    rdmx__kv_store_release(b->s->store, x->item);
    x->item = NULL;
    b->inflight--;
    zpump(b);
}

/* A PUT's read from the caller's slot completed: commit, unless the call
 * ended meanwhile (the caller may have its buffer back). */
static void zput_done(rdmx_status_t st, size_t length, void *arg)
{
    zxfer_t *x = arg;
    zbatch_t *b = x->b;
    const rdmx_kv_req_t *r = &b->z[x->i].r;
    uint64_t cas = 0;

    (void)length;
    if (st == RDMX_OK && rdmx_rpc_req_expired(b->req)) {
        st = RDMX_ERR_TIMEOUT;
        if (b->stop == RDMX_OK)
            b->stop = st;
    }
    if (st != RDMX_OK)
        rdmx__kv_store_abort(b->s->store, x->item);
    else
        st = rdmx__kv_store_commit(b->s->store, x->item, RDMX_KV_STORE_SET,
                                   0, r->flags, r->ttl_ms, now_ms(), &cas);
    zresult(b, x->i, st, RDMX_KV_WHERE_NONE, NULL, cas, r->vlen);
    x->item = NULL;
    b->inflight--;
    zpump(b);
}

/* A free window slot of @b (one exists while inflight < window). */
static zxfer_t *zslot(zbatch_t *b)
{
    for (unsigned k = 0; k < RDMX_KV_ZBATCH_WINDOW; k++)
        if (b->x[k].item == NULL)
            return &b->x[k];
    return NULL;
}

/* Start key @i of a GET batch: a result at once, or a write in flight. */
static void zget_start(zbatch_t *b, uint32_t i)
{
    rdmx_kv_server_t *s = b->s;
    const rdmx_kv_zitem_t *z = &b->z[i];
    rdmx_kv_item_t *it;
    rdmx_status_t st;
    zxfer_t *x;
    size_t len;

    st = rdmx__kv_store_get(s->store, z->r.key, z->r.klen, now_ms(), &it);
    if (st != RDMX_OK) {
        zresult(b, i, st, RDMX_KV_WHERE_NONE, NULL, 0, 0);
        return;
    }
    len = rdmx__kv_item_length(it);
    if (len > z->r.vlen || len == 0) {
        /* too big for the slot: the length needed, nothing written */
        zresult(b, i, len == 0 ? RDMX_OK : RDMX_ERR_TOO_BIG,
                len == 0 ? RDMX_KV_WHERE_BUFFER : RDMX_KV_WHERE_NONE, it, 0,
                len);
        rdmx__kv_store_release(s->store, it);
        return;
    }
    /* the slots are lent only until the call ends (docs/RPC.md, "Lent
     * buffers"): asked right before each write */
    if (!rdmx_rpc_req_may_write(b->req)) {
        rdmx__kv_store_release(s->store, it);
        b->stop = RDMX_ERR_TIMEOUT;
        return;
    }
    x = zslot(b);
    x->i = i;
    x->item = it;
    b->inflight++;
    __atomic_add_fetch(&s->put_pulled, 1, __ATOMIC_RELAXED);
    st = rdmx_put_nb(rdmx_rpc_req_ep(b->req), b->rmem[z->bulk], z->offset,
                     rdmx__kv_item_value(s->store, it), len,
                     &(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_CB |
                                                       RDMX_OP_PARAM_FIELD_MR,
                                         .cb = zget_done,
                                         .arg = x,
                                         .mr = s->mr});
    if (st != RDMX_INPROGRESS)
        zget_done(st, len, x);
}

/* Start key @i of a PUT batch: a result at once, or a read in flight. */
static void zput_start(zbatch_t *b, uint32_t i)
{
    rdmx_kv_server_t *s = b->s;
    const rdmx_kv_zitem_t *z = &b->z[i];
    rdmx_kv_item_t *it;
    rdmx_status_t st;
    uint64_t cas = 0;
    zxfer_t *x;

    if (z->r.vlen == 0) {
        st = rdmx__kv_store_set(s->store, z->r.key, z->r.klen, "", 0,
                                RDMX_KV_STORE_SET, 0, z->r.flags, z->r.ttl_ms,
                                now_ms(), &cas);
        zresult(b, i, st, RDMX_KV_WHERE_NONE, NULL, cas, 0);
        return;
    }
    st = rdmx__kv_store_reserve(s->store, z->r.key, z->r.klen,
                                (size_t)z->r.vlen, now_ms(), &it);
    if (st != RDMX_OK) {
        zresult(b, i, st, RDMX_KV_WHERE_NONE, NULL, 0, z->r.vlen);
        return;
    }
    x = zslot(b);
    x->i = i;
    x->item = it;
    b->inflight++;
    st =
        rdmx_get_nb(rdmx_rpc_req_ep(b->req), b->rmem[z->bulk], z->offset,
                    rdmx__kv_item_value(s->store, it), (size_t)z->r.vlen,
                    &(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_CB |
                                                      RDMX_OP_PARAM_FIELD_MR |
                                                      RDMX_OP_PARAM_FIELD_FLAGS,
                                        .cb = zput_done,
                                        .arg = x,
                                        .mr = s->mr,
                                        .flags = pull_flags(z->r.vlen)});
    if (st != RDMX_INPROGRESS)
        zput_done(st, (size_t)z->r.vlen, x);
}

/*
 * Start keys of @b in order while the window has room and the call has
 * not ended; once every started transfer completed and nothing more will
 * start, finish (flush, answer, free: @b is gone then). Completions that
 * run inside it only count down; the loop goes on for them.
 */
static void zpump(zbatch_t *b)
{
    if (b->pumping)
        return;
    b->pumping = 1;
    while (b->stop == RDMX_OK && b->next < b->n &&
           b->inflight < RDMX_KV_ZBATCH_WINDOW) {
        if (rdmx_rpc_req_expired(b->req)) {
            b->stop = RDMX_ERR_TIMEOUT;
            break;
        }
        if (b->put)
            zput_start(b, b->next++);
        else
            zget_start(b, b->next++);
    }
    b->pumping = 0;
    if (b->inflight == 0 && !b->flushing &&
        (b->stop != RDMX_OK || b->next == b->n))
        zfinish(b);
}

/* Refuse a malformed zero-copy batch as a whole: PROTO, counted. */
static void zrefuse(rdmx_kv_server_t *s, rdmx_rpc_req_t *req, const char *fmt,
                    ...) __attribute__((format(printf, 3, 4)));

static void zrefuse(rdmx_kv_server_t *s, rdmx_rpc_req_t *req, const char *fmt,
                    ...)
{
    char msg[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    count_bad(s);
    rdmx_rpc_respond_error(req, RDMX_ERR_PROTO, "%s: %s",
                           rdmx_rpc_req_name(req), msg);
}

/*
 * kv.batch_get (@put 0) and kv.batch_put: decode and check every key and
 * its slot against the request's descriptors first — any fault refuses
 * the whole request, nothing touched — then serve the keys through the
 * window (zpump). docs/KV.md, "Zero-copy batches".
 */
static void h_zbatch(rdmx_rpc_req_t *req, rdmx_kv_server_t *s, int put)
{
    size_t left, used;
    const unsigned char *p = rdmx_rpc_req_data(req, &left);
    unsigned need = put ? RDMX_ACCESS_READ : RDMX_ACCESS_WRITE;
    unsigned nbulk = rdmx_rpc_req_bulk_count(req);
    rdmx_rmem_t *rmem[RDMX_RPC_BULK_MAX] = {0};
    uint64_t total = 0;
    char why[160];
    zbatch_t *b;
    uint32_t n;

    if (rdmx__kv_batch_decode(p, left, &n) != RDMX_OK) {
        zrefuse(s, req, "bad batch header (1..%d keys)", RDMX_KV_BATCH_MAX);
        return;
    }
    b = calloc(1, sizeof(*b));
    if (b != NULL) {
        b->z = calloc(n, sizeof(*b->z));
        b->out = calloc(n, RDMX_KV_RESULT_SIZE);
    }
    if (b == NULL || b->z == NULL || b->out == NULL) {
        if (b != NULL) {
            free(b->z);
            free(b->out);
        }
        free(b);
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    p += RDMX_KV_BATCH_HDR;
    left -= RDMX_KV_BATCH_HDR;
    for (uint32_t i = 0; i < n; i++) {
        rdmx_kv_zitem_t *z = &b->z[i];
        uint64_t dlen;

        if (rdmx__kv_zitem_decode(p, left, z, &used, why, sizeof(why)) !=
            RDMX_OK) {
            zrefuse(s, req, "key %u: %s", i, why);
            goto err_free;
        }
        p += used;
        left -= used;
        if (z->r.klen == 0) {
            zrefuse(s, req, "key %u: empty key", i);
            goto err_free;
        }
        if (z->bulk >= nbulk) {
            zrefuse(s, req, "key %u: descriptor %u of %u", i, z->bulk, nbulk);
            goto err_free;
        }
        if (rmem[z->bulk] == NULL &&
            rdmx_rpc_req_bulk(req, z->bulk, &rmem[z->bulk]) != RDMX_OK) {
            zrefuse(s, req, "key %u: descriptor %u: %s", i, z->bulk,
                    rdmx_error_detail());
            goto err_free;
        }
        if ((rdmx_rmem_access(rmem[z->bulk]) & need) != need) {
            zrefuse(s, req, "key %u: descriptor %u does not grant %s", i,
                    z->bulk, put ? "read" : "write");
            goto err_free;
        }
        dlen = rdmx_rmem_length(rmem[z->bulk]);
        if (z->offset > dlen || z->r.vlen > dlen - z->offset) {
            zrefuse(s, req,
                    "key %u: slot of %llu bytes at %llu passes the end of "
                    "descriptor %u (%llu bytes)",
                    i, (unsigned long long)z->r.vlen,
                    (unsigned long long)z->offset, z->bulk,
                    (unsigned long long)dlen);
            goto err_free;
        }
        total += z->r.vlen; /* each <= a descriptor's length: no wrap */
        if (n > 1 && total > RDMX_KV_ZBATCH_BYTES) {
            zrefuse(s, req, "more than %llu bytes of slots in %u keys",
                    (unsigned long long)RDMX_KV_ZBATCH_BYTES, n);
            goto err_free;
        }
    }
    if (left != 0) {
        zrefuse(s, req, "%zu trailing bytes", left);
        goto err_free;
    }
    b->s = s;
    b->req = req;
    b->put = put;
    b->n = n;
    memcpy(b->rmem, rmem, sizeof(rmem));
    for (unsigned k = 0; k < RDMX_KV_ZBATCH_WINDOW; k++)
        b->x[k].b = b;
    __atomic_add_fetch(&s->xfers, 1, __ATOMIC_RELAXED);
    zpump(b);
    return;

err_free:
    free(b->out);
    free(b->z);
    free(b);
}

static void h_bget(rdmx_rpc_req_t *req, void *arg)
{
    h_zbatch(req, arg, 0);
}

static void h_bput(rdmx_rpc_req_t *req, void *arg)
{
    h_zbatch(req, arg, 1);
}

/* --- lambda environment: the store, as a remote client sees it ---------- */

static rdmx_status_t env_get(void *ctx, const void *key, size_t klen,
                             void *buf, size_t cap, size_t *vlen_p)
{
    rdmx_kv_server_t *s = ctx;
    rdmx_kv_item_t *it;
    rdmx_status_t st;
    size_t len;

    st = rdmx__kv_store_get(s->store, key, klen, now_ms(), &it);
    if (st != RDMX_OK)
        return st;
    len = rdmx__kv_item_length(it);
    *vlen_p = len;
    if (len <= cap)
        memcpy(buf, rdmx__kv_item_value(s->store, it), len);
    rdmx__kv_store_release(s->store, it);
    return len <= cap ? RDMX_OK : RDMX_ERR_TOO_BIG;
}

static rdmx_status_t env_put(void *ctx, const void *key, size_t klen,
                             const void *value, size_t vlen, uint64_t ttl_ms)
{
    rdmx_kv_server_t *s = ctx;

    return rdmx__kv_store_set(s->store, key, klen, value, vlen,
                              RDMX_KV_STORE_SET, 0, 0, ttl_ms, now_ms(), NULL);
}

static rdmx_status_t env_delete(void *ctx, const void *key, size_t klen)
{
    rdmx_kv_server_t *s = ctx;

    return rdmx__kv_store_delete(s->store, key, klen, 0, now_ms());
}

static rdmx_status_t env_exists(void *ctx, const void *key, size_t klen)
{
    rdmx_kv_server_t *s = ctx;

    return rdmx__kv_store_exists(s->store, key, klen, now_ms());
}

/* --- stats -------------------------------------------------------------- */

void rdmx__kv_server_stats(rdmx_kv_server_t *s,
                           rdmx_kv_server_stats_t *stats_p)
{
    rdmx_kv_store_stats_t st;
    rdmx_rpc_server_stats_t r;
    rdmx_kv_server_stats_t *o = stats_p;

    memset(o, 0, sizeof(*o));
    rdmx__kv_store_stats(s->store, &st);
    rdmx_rpc_server_stats(s->rpc, &r);
    o->pid = (uint64_t)getpid();
    o->uptime = (now_ms() - s->started_ms) / 1000;
    o->curr_connections = r.connections;
    o->total_connections = r.connections_total;
    o->rejected_connections = r.connections_refused;
#define COPY(field, name) o->field = st.field;
    RDMX_KV_STORE_STATS(COPY)
#undef COPY
    o->bad_requests = __atomic_load_n(&s->bad_requests, __ATOMIC_RELAXED) +
                      r.malformed + r.unknown_handler + r.too_big;
    o->rpc_requests = r.requests;
    o->rpc_errors = r.errors;
    o->get_buffers_lent = __atomic_load_n(&s->get_lent, __ATOMIC_RELAXED);
    o->get_buffers_written = __atomic_load_n(&s->get_written, __ATOMIC_RELAXED);
    o->store_maps = __atomic_load_n(&s->store_maps, __ATOMIC_RELAXED);
    o->get_mapped = __atomic_load_n(&s->get_mapped, __ATOMIC_RELAXED);
    o->get_again = __atomic_load_n(&s->get_again, __ATOMIC_RELAXED);
    o->put_pulled = __atomic_load_n(&s->put_pulled, __ATOMIC_RELAXED);
    if (s->lambda != NULL) {
        o->lambda_on = 1;
        rdmx_lambda_engine_stats(s->lambda, &o->lambda);
    }
}

/* The stats answer being written. */
typedef struct {
    char buf[4096];
    size_t len;
    int full; /* a line did not fit: the answer ends before it */
} text_t;

static void text_line(text_t *t, const char *name, uint64_t value)
{
    int n;

    if (t->full)
        return;
    n = snprintf(t->buf + t->len, sizeof(t->buf) - t->len, "%s %llu\n", name,
                 (unsigned long long)value);
    if (n < 0 || (size_t)n >= sizeof(t->buf) - t->len)
        t->full = 1;
    else
        t->len += (size_t)n;
}

/* kv.stats: the counters as text, one "name value" line each. */
static void h_stats(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_kv_server_stats_t st;
    text_t t;

    rdmx__kv_server_stats(arg, &st);
    t.len = 0;
    t.full = 0;
#define LINE(field, name)                                                      \
    if ((name)[0] != '\0')                                                     \
        text_line(&t, name, st.field);
    RDMX_KV_SERVER_STATS(LINE)
#undef LINE
#define LINE(field, name) text_line(&t, name, st.lambda.field);
    if (st.lambda_on) {
        RDMX_KV_LAMBDA_STATS(LINE)
    }
#undef LINE
    rdmx_rpc_respond(req, t.buf, t.len);
}

/* --- life cycle --------------------------------------------------------- */

/* The sweep: every RECLAIM_EVERY_MS, remove up to RECLAIM_MAX expired
 * items, until destroy wakes it. */
static void *reclaim_main(void *arg)
{
    rdmx_kv_server_t *s = arg;
    struct timespec ts;

    rdmx__thread_name("rdmx-kv-reclaim", -1);
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += RECLAIM_EVERY_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!s->stopping &&
               pthread_cond_timedwait(&s->wake, &s->lock, &ts) == 0)
            ;
        if (s->stopping)
            break;
        pthread_mutex_unlock(&s->lock);
        rdmx__kv_store_reclaim(s->store, now_ms(), RECLAIM_MAX);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* The store's random id and its descriptor (the whole region, read
 * access), for mapped GETs; made once. */
static rdmx_status_t map_desc(rdmx_kv_server_t *s, size_t memory)
{
    size_t n = 0;
    rdmx_status_t st;

    if ((st = rdmx__random(&s->store_id, sizeof(s->store_id))) != RDMX_OK)
        return st;
    rdmx_mr_pack(s->mr, 0, memory, RDMX_ACCESS_READ, NULL, 0, &n);
    if ((s->map_desc = malloc(n)) == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv server: out of memory");
    s->map_desc_len = n;
    return rdmx_mr_pack(s->mr, 0, memory, RDMX_ACCESS_READ, s->map_desc, n, &n);
}

/* Register the kv.* handlers on the RPC server. */
static rdmx_status_t register_handlers(rdmx_kv_server_t *s)
{
    static const struct {
        const char *name;
        rdmx_rpc_handler_t fn;
        unsigned flags;
    } h[] = {
        {RDMX_KV_H_GET, h_get, RDMX_RPC_IDEMPOTENT},
        {RDMX_KV_H_PUT, h_put, 0},
        {RDMX_KV_H_DELETE, h_delete, 0},
        {RDMX_KV_H_TOUCH, h_touch, RDMX_RPC_IDEMPOTENT},
        {RDMX_KV_H_INCR, h_incr, 0},
        {RDMX_KV_H_EXISTS, h_exists, RDMX_RPC_IDEMPOTENT},
        {RDMX_KV_H_MGET, h_mget, RDMX_RPC_IDEMPOTENT},
        {RDMX_KV_H_MPUT, h_mput, 0},
        {RDMX_KV_H_PREFIX, h_prefix, RDMX_RPC_IDEMPOTENT},
        {RDMX_KV_H_BGET, h_bget, RDMX_RPC_IDEMPOTENT},
        {RDMX_KV_H_BPUT, h_bput, 0},
        {RDMX_KV_H_FLUSH, h_flush, RDMX_RPC_IDEMPOTENT},
        {RDMX_KV_H_STATS, h_stats, RDMX_RPC_IDEMPOTENT},
    };
    rdmx_status_t st = RDMX_OK;

    for (size_t i = 0; i < sizeof(h) / sizeof(h[0]) && st == RDMX_OK; i++)
        st = rdmx_rpc_server_register(s->rpc, h[i].name, h[i].fn, s,
                                      h[i].flags);
    return st;
}

rdmx_status_t rdmx__kv_server_create(const rdmx_kv_server_config_t *cfg,
                                     rdmx_kv_server_t **server_p)
{
    rdmx_kv_store_params_t stp = {0};
    rdmx_rpc_server_params_t sp = {0};
    pthread_condattr_t ca;
    rdmx_kv_server_t *s;
    rdmx_status_t st;
    char why[256];

    if (cfg == NULL || server_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "kv server: NULL argument");
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv server: out of memory");
    s->inline_threshold = cfg->inline_threshold;
    s->mapped_gets = !cfg->no_mapped_gets;
    s->started_ms = now_ms();
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);

    stp.field_mask = RDMX_KV_STORE_FIELD_MAX_KEY |
                     RDMX_KV_STORE_FIELD_MAX_VALUE |
                     RDMX_KV_STORE_FIELD_EVICTION;
    stp.max_key = cfg->max_key;
    stp.max_value = cfg->max_value;
    stp.eviction = cfg->eviction;
    sp.field_mask = RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS |
                    RDMX_RPC_SERVER_PARAM_FIELD_WORKERS |
                    RDMX_RPC_SERVER_PARAM_FIELD_MAX_MESSAGE |
                    RDMX_RPC_SERVER_PARAM_FIELD_MAX_CONNECTIONS;
    sp.address = cfg->listen;
    sp.workers = cfg->workers;
    sp.max_connections = cfg->max_connections;
    sp.max_message = cfg->max_value + RDMX_KV_MESSAGE_SLACK;
    if (cfg->auth_secret != NULL && cfg->auth_secret_len > 0) {
        sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_AUTH_SECRET;
        sp.auth_secret = cfg->auth_secret;
        sp.auth_secret_len = cfg->auth_secret_len;
    }
    if ((st = rdmx_context_create(&cfg->context, &s->ctx)) != RDMX_OK ||
        (st = rdmx_mem_alloc(s->ctx, cfg->memory,
                             RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &s->mr)) !=
            RDMX_OK ||
        (st = rdmx__kv_store_create(rdmx_mr_addr(s->mr), cfg->memory, &stp,
                                    &s->store)) != RDMX_OK ||
        (st = map_desc(s, cfg->memory)) != RDMX_OK ||
        (st = rdmx_rpc_server_create(s->ctx, &sp, &s->rpc)) != RDMX_OK ||
        (st = register_handlers(s)) != RDMX_OK)
        goto err_destroy;
    if (cfg->lambda) {
        s->lambda_env = (rdmx_lambda_env_t){.ctx = s,
                                            .kv_get = env_get,
                                            .kv_put = env_put,
                                            .kv_delete = env_delete,
                                            .kv_exists = env_exists};
        if ((st = rdmx_lambda_engine_create(&cfg->lambda_params,
                                            &s->lambda)) != RDMX_OK ||
            (st = rdmx_lambda_register_handlers(s->rpc, s->lambda,
                                                &s->lambda_env)) != RDMX_OK)
            goto err_destroy;
    }
    *server_p = s;
    return RDMX_OK;

err_destroy:
    /* (undoing may overwrite the thread's detail: keep the cause's) */
    snprintf(why, sizeof(why), "%s", rdmx_error_detail());
    rdmx__kv_server_destroy(s);
    return rdmx__error(st, "%s", why);
}

rdmx_status_t rdmx__kv_server_start(rdmx_kv_server_t *s)
{
    rdmx_status_t st;

    if ((st = rdmx_rpc_server_start(s->rpc)) != RDMX_OK)
        return st;
    if (pthread_create(&s->reclaimer, NULL, reclaim_main, s) != 0)
        return rdmx__error(RDMX_ERR_NO_RESOURCE,
                           "kv server: cannot start the reclaim thread");
    s->reclaiming = 1;
    return RDMX_OK;
}

void rdmx__kv_server_destroy(rdmx_kv_server_t *s)
{
    if (s == NULL)
        return;
    if (s->reclaiming) {
        pthread_mutex_lock(&s->lock);
        s->stopping = 1;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->reclaimer, NULL);
    }
    for (int i = 0;
         i < DRAIN_MS / 10 && __atomic_load_n(&s->xfers, __ATOMIC_RELAXED);
         i++)
        usleep(10000);
    rdmx_rpc_server_destroy(s->rpc);
    if (s->lambda != NULL)
        rdmx_lambda_engine_destroy(s->lambda);
    rdmx__kv_store_destroy(s->store);
    rdmx_mem_deregister(s->mr);
    rdmx_context_destroy(s->ctx);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s->map_desc);
    free(s);
}

void rdmx__kv_server_info(const rdmx_kv_server_t *s,
                          rdmx_kv_server_info_t *info_p)
{
    info_p->port = rdmx_rpc_server_port(s->rpc);
    info_p->workers = rdmx_rpc_server_workers(s->rpc);
    info_p->transport = rdmx_context_transport(s->ctx);
    info_p->rpc = s->rpc;
}
