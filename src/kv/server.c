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
 * is still writing from. Each request is decoded once, by its handler.
 */
#define _GNU_SOURCE
#include "kv/server.h"

#include "kv/proto.h"
#include "util/error.h"
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
    uint64_t bad_requests;        /* atomic: any worker */
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

/* Answer with a result header, optionally followed by @vlen bytes. */
static void reply(rdmx_rpc_req_t *req, rdmx_status_t status, uint32_t where,
                  uint32_t flags, uint64_t cas, uint64_t length,
                  const void *value, size_t vlen)
{
    unsigned char stack[RDMX_KV_RESULT_SIZE + 4096], *out = stack;
    rdmx_kv_result_t r = {.status = status, .where = where, .flags = flags,
                          .cas = cas, .length = length};

    if (RDMX_KV_RESULT_SIZE + vlen > sizeof(stack) &&
        (out = malloc(RDMX_KV_RESULT_SIZE + vlen)) == NULL) {
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    rdmx__kv_result_encode(&r, out);
    if (vlen != 0)
        memcpy(out + RDMX_KV_RESULT_SIZE, value, vlen);
    rdmx_rpc_respond(req, out, RDMX_KV_RESULT_SIZE + vlen);
    if (out != stack)
        free(out);
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

/* An RDMA transfer of a GET or PUT in flight. */
typedef struct {
    rdmx_kv_server_t *s;
    rdmx_rpc_req_t *req;
    rdmx_kv_item_t *item; /* GET: referenced; PUT: reserved */
    rdmx_kv_req_t r;      /* PUT: the request (its key points into req) */
    int flushed;          /* GET: the endpoint flush was started */
} xfer_t;

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
    st = rdmx__kv_store_get(s->store, r.key, r.klen, now_ms(), &it);
    if (st != RDMX_OK) {
        reply_status(req, st);
        return;
    }
    len = rdmx__kv_item_length(it);
    if (!(r.mode & RDMX_KV_GET_BUF) || len <= s->inline_threshold) {
        if ((r.mode & RDMX_KV_GET_BUF) && len > r.vlen)
            reply(req, RDMX_ERR_TOO_BIG, RDMX_KV_WHERE_NONE,
                  rdmx__kv_item_flags(it), rdmx__kv_item_cas(it), len, NULL,
                  0);
        else
            reply(req, RDMX_OK, RDMX_KV_WHERE_INLINE, rdmx__kv_item_flags(it),
                  rdmx__kv_item_cas(it), len,
                  rdmx__kv_item_value(s->store, it), len);
        rdmx__kv_store_release(s->store, it);
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
    x = calloc(1, sizeof(*x));
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
    x->s = s;
    x->req = req;
    x->item = it;
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
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        rdmx__kv_store_abort(s->store, it);
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    x->s = s;
    x->req = req;
    x->item = it;
    x->r = r;
    __atomic_add_fetch(&s->xfers, 1, __ATOMIC_RELAXED);
    st = rdmx_get_nb(rdmx_rpc_req_ep(req), rmem, 0,
                     rdmx__kv_item_value(s->store, it), (size_t)r.vlen,
                     &(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_CB |
                                                       RDMX_OP_PARAM_FIELD_MR,
                                         .cb = put_done,
                                         .arg = x,
                                         .mr = s->mr});
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
    if (name[0] != '\0')                                                       \
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
                             RDMX_ACCESS_READ | RDMX_ACCESS_WRITE,
                             &s->mr)) != RDMX_OK ||
        (st = rdmx__kv_store_create(rdmx_mr_addr(s->mr), cfg->memory, &stp,
                                    &s->store)) != RDMX_OK ||
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
