/*
 * rdmx-kvd: the rdmx key-value cache server.
 *
 * Values live in one region registered at start (--memory). The kv.*
 * handlers (src/kv/proto.h, docs/KV.md) run on the RPC server's workers:
 * GET answers small values inline and RDMA-writes larger ones into the
 * caller's buffer before answering; PUT takes small values inline and pulls
 * larger ones with RDMA read into a reserved item that becomes visible only
 * when complete. An item is referenced while a transfer reads it, so a
 * concurrent PUT or DELETE never frees memory a GET is still writing from.
 *
 * Lambdas (docs/LAMBDA.md): "lambda.eval/call/native" run sandboxed Lua
 * next to the store, with kv.get/put/delete/exists over it under the same
 * limits as remote clients; --plugin-dir adds the operator's natives.
 */
#define _GNU_SOURCE
#include <rdmx/lambda.h>
#include <rdmx/rdmx.h>

#include "kv/proto.h"
#include "kv/store.h"
#include "util/time.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KVD_DEFAULT_LISTEN "127.0.0.1:11311"

typedef struct {
    rdmx_context_t *ctx;
    rdmx_rpc_server_t *srv;
    rdmx_mr_t *mr;           /* the value region */
    rdmx_kv_store_t *store;
    rdmx_lambda_engine_t *lambda; /* NULL with --no-lambda */
    rdmx_lambda_env_t lambda_env;
    size_t inline_threshold;
    uint64_t bad_requests;   /* atomic */
    uint64_t xfers;          /* RDMA transfers in flight (atomic) */
    uint64_t started_ms;
} kvd_t;

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static uint64_t now_ms(void)
{
    return rdmx_now_ns() / 1000000;
}

/* --- answers --------------------------------------------------------------- */

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

/* Decode the single request of @req; answers PROTO and returns -1 if bad. */
static int decode(kvd_t *k, rdmx_rpc_req_t *req, int inline_value,
                  rdmx_kv_req_t *r)
{
    size_t len, used;
    const void *data = rdmx_rpc_req_data(req, &len);
    char why[160];

    if (rdmx__kv_req_decode(data, len, inline_value, r, &used, why,
                           sizeof(why)) != RDMX_OK ||
        used != len) {
        __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO, "%s: %s",
                               rdmx_rpc_req_name(req),
                               used != len && used ? "trailing bytes" : why);
        return -1;
    }
    if (r->klen == 0) {
        __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
        rdmx_rpc_respond_error(req, RDMX_ERR_INVALID, "%s: empty key",
                               rdmx_rpc_req_name(req));
        return -1;
    }
    return 0;
}

/* --- GET --------------------------------------------------------------------- */

typedef struct {
    kvd_t *k;
    rdmx_rpc_req_t *req;
    rdmx_kv_item_t *item;
    int flushed;
} xfer_t;

static void get_done(rdmx_status_t st, size_t length, void *arg)
{
    xfer_t *x = arg;
    rdmx_kv_item_t *it = x->item;

    (void)length;
    if (st == RDMX_OK && !x->flushed) {
        /* the value must be at the caller before the answer */
        x->flushed = 1;
        st = rdmx_ep_flush_nb(rdmx_rpc_req_ep(x->req), get_done, x);
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
    rdmx__kv_store_release(x->k->store, it);
    __atomic_sub_fetch(&x->k->xfers, 1, __ATOMIC_RELAXED);
    free(x);
}

static void h_get(rdmx_rpc_req_t *req, void *arg)
{
    kvd_t *k = arg;
    rdmx_kv_req_t r;
    rdmx_kv_item_t *it;
    rdmx_rmem_t *rmem;
    rdmx_status_t st;
    size_t len;
    xfer_t *x;

    if (decode(k, req, 0, &r) != 0)
        return;
    st = rdmx__kv_store_get(k->store, r.key, r.klen, now_ms(), &it);
    if (st != RDMX_OK) {
        reply_status(req, st);
        return;
    }
    len = rdmx__kv_item_length(it);
    if (!(r.mode & RDMX_KV_GET_BUF) || len <= k->inline_threshold) {
        if ((r.mode & RDMX_KV_GET_BUF) && len > r.vlen)
            reply(req, RDMX_ERR_TOO_BIG, RDMX_KV_WHERE_NONE,
                  rdmx__kv_item_flags(it), rdmx__kv_item_cas(it), len, NULL,
                  0);
        else
            reply(req, RDMX_OK, RDMX_KV_WHERE_INLINE, rdmx__kv_item_flags(it),
                  rdmx__kv_item_cas(it), len,
                  rdmx__kv_item_value(k->store, it), len);
        rdmx__kv_store_release(k->store, it);
        return;
    }
    /* Large value, caller lent a buffer: RDMA-write it there. */
    if ((st = rdmx_rpc_req_bulk(req, 0, &rmem)) != RDMX_OK) {
        __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
        if (st == RDMX_ERR_OUT_OF_RANGE)
            st = RDMX_ERR_PROTO; /* buffer flag without a descriptor */
        rdmx__kv_store_release(k->store, it);
        rdmx_rpc_respond_error(req, st, "kv.get: buffer descriptor: %s",
                               rdmx_error_detail());
        return;
    }
    if (rdmx_rmem_length(rmem) < len) {
        reply(req, RDMX_ERR_TOO_BIG, RDMX_KV_WHERE_NONE,
              rdmx__kv_item_flags(it), rdmx__kv_item_cas(it), len, NULL, 0);
        rdmx__kv_store_release(k->store, it);
        return;
    }
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        rdmx__kv_store_release(k->store, it);
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    /* The caller's buffer is lent only until its deadline (or cancel):
     * after that not a byte may land in it (docs/RPC.md, "Lent
     * buffers"). Checked right before the write. */
    if (!rdmx_rpc_req_may_write(req)) {
        free(x);
        rdmx__kv_store_release(k->store, it);
        rdmx_rpc_respond_error(req, RDMX_ERR_TIMEOUT,
                               "kv.get: the call expired before the value "
                               "was written; nothing was written");
        return;
    }
    x->k = k;
    x->req = req;
    x->item = it;
    __atomic_add_fetch(&k->xfers, 1, __ATOMIC_RELAXED);
    st = rdmx_put_nb(rdmx_rpc_req_ep(req), rdmx__kv_item_value(k->store, it),
                     len, k->mr, rmem, 0, get_done, x);
    if (st != RDMX_INPROGRESS)
        get_done(st, len, x);
}

/* --- PUT --------------------------------------------------------------------- */

static void put_done(rdmx_status_t st, size_t length, void *arg)
{
    xfer_t *x = arg;
    rdmx_kv_req_t r;
    size_t len;
    uint64_t cas = 0;
    const void *data = rdmx_rpc_req_data(x->req, &len);
    size_t used;
    char why[8];

    (void)length;
    rdmx__kv_req_decode(data, len, 0, &r, &used, why, sizeof(why));
    if (st != RDMX_OK) {
        rdmx__kv_store_abort(x->k->store, x->item);
        reply_error(x->req, st, "reading the value from the caller failed: "
                                "%s",
                    rdmx_strerror(st));
    } else {
        st = rdmx__kv_store_commit(x->k->store, x->item,
                                   (rdmx_kv_store_mode_t)(r.mode & 0x7f),
                                   r.cas, r.flags, r.ttl_ms, now_ms(), &cas);
        if (st == RDMX_OK)
            reply(x->req, RDMX_OK, RDMX_KV_WHERE_NONE, r.flags, cas, r.vlen,
                  NULL, 0);
        else
            reply_status(x->req, st);
    }
    __atomic_sub_fetch(&x->k->xfers, 1, __ATOMIC_RELAXED);
    free(x);
}

static void h_put(rdmx_rpc_req_t *req, void *arg)
{
    kvd_t *k = arg;
    rdmx_kv_req_t r;
    rdmx_kv_item_t *it;
    rdmx_rmem_t *rmem;
    rdmx_status_t st;
    uint64_t cas = 0;
    int bulk;
    xfer_t *x;

    /* the mode byte says whether the value is inline: peek at it */
    {
        size_t len;
        const unsigned char *p = rdmx_rpc_req_data(req, &len);
        bulk = len > 0 && (p[0] & RDMX_KV_PUT_BULK);
    }
    if (decode(k, req, !bulk, &r) != 0)
        return;
    if ((r.mode & 0x7f) > RDMX_KV_STORE_CAS) {
        __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO, "kv.put: mode %u",
                               r.mode & 0x7f);
        return;
    }
    if (!bulk) {
        st = rdmx__kv_store_set(k->store, r.key, r.klen, r.value,
                                (size_t)r.vlen,
                                (rdmx_kv_store_mode_t)(r.mode & 0x7f), r.cas,
                                r.flags, r.ttl_ms, now_ms(), &cas);
        if (st == RDMX_OK)
            reply(req, RDMX_OK, RDMX_KV_WHERE_NONE, r.flags, cas, r.vlen,
                  NULL, 0);
        else
            reply_status(req, st);
        return;
    }
    if ((st = rdmx_rpc_req_bulk(req, 0, &rmem)) != RDMX_OK) {
        __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
        rdmx_rpc_respond_error(req, st == RDMX_ERR_OUT_OF_RANGE
                                        ? RDMX_ERR_PROTO
                                        : st,
                               "kv.put: value descriptor: %s",
                               rdmx_error_detail());
        return;
    }
    if (rdmx_rmem_length(rmem) < r.vlen) {
        __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
        rdmx_rpc_respond_error(req, RDMX_ERR_OUT_OF_RANGE,
                               "kv.put: value of %llu bytes, descriptor of "
                               "%llu",
                               (unsigned long long)r.vlen,
                               (unsigned long long)rdmx_rmem_length(rmem));
        return;
    }
    st = rdmx__kv_store_reserve(k->store, r.key, r.klen, (size_t)r.vlen,
                                now_ms(), &it);
    if (st != RDMX_OK) {
        reply_status(req, st);
        return;
    }
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        rdmx__kv_store_abort(k->store, it);
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY, "out of memory");
        return;
    }
    x->k = k;
    x->req = req;
    x->item = it;
    __atomic_add_fetch(&k->xfers, 1, __ATOMIC_RELAXED);
    st = rdmx_get_nb(rdmx_rpc_req_ep(req), rdmx__kv_item_value(k->store, it),
                     (size_t)r.vlen, k->mr, rmem, 0, put_done, x);
    if (st != RDMX_INPROGRESS)
        put_done(st, (size_t)r.vlen, x);
}

/* --- small commands ------------------------------------------------------------ */

static void h_delete(rdmx_rpc_req_t *req, void *arg)
{
    kvd_t *k = arg;
    rdmx_kv_req_t r;

    if (decode(k, req, 0, &r) == 0)
        reply_status(req, rdmx__kv_store_delete(k->store, r.key, r.klen,
                                                r.cas, now_ms()));
}

static void h_touch(rdmx_rpc_req_t *req, void *arg)
{
    kvd_t *k = arg;
    rdmx_kv_req_t r;

    if (decode(k, req, 0, &r) == 0)
        reply_status(req, rdmx__kv_store_touch(k->store, r.key, r.klen,
                                               r.ttl_ms, now_ms()));
}

static void h_exists(rdmx_rpc_req_t *req, void *arg)
{
    kvd_t *k = arg;
    rdmx_kv_req_t r;

    if (decode(k, req, 0, &r) == 0)
        reply_status(req, rdmx__kv_store_exists(k->store, r.key, r.klen,
                                                now_ms()));
}

static void h_incr(rdmx_rpc_req_t *req, void *arg)
{
    kvd_t *k = arg;
    rdmx_kv_req_t r;
    uint64_t v = 0;
    rdmx_status_t st;

    if (decode(k, req, 0, &r) != 0)
        return;
    st = rdmx__kv_store_incr(k->store, r.key, r.klen, r.cas, r.mode & 1,
                             now_ms(), &v);
    if (st == RDMX_OK)
        reply(req, RDMX_OK, RDMX_KV_WHERE_NONE, 0, 0, v, NULL, 0);
    else
        reply_status(req, st);
}

static void h_flush(rdmx_rpc_req_t *req, void *arg)
{
    kvd_t *k = arg;

    rdmx__kv_store_flush(k->store);
    rdmx_rpc_respond(req, NULL, 0);
}

/* --- batches ------------------------------------------------------------------- */

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

/* Walk the batch of @req; @fn handles each request. -1: answered PROTO. */
static int batch_count(kvd_t *k, rdmx_rpc_req_t *req, const unsigned char **p,
                       size_t *left, uint32_t *n)
{
    size_t len;
    const unsigned char *d = rdmx_rpc_req_data(req, &len);

    if (len < RDMX_KV_BATCH_HDR ||
        (*n = (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 |
              (uint32_t)d[3] << 24) == 0 ||
        *n > RDMX_KV_BATCH_MAX || (d[4] | d[5] | d[6] | d[7])) {
        __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO,
                               "%s: bad batch header (1..%d keys)",
                               rdmx_rpc_req_name(req), RDMX_KV_BATCH_MAX);
        return -1;
    }
    *p = d + RDMX_KV_BATCH_HDR;
    *left = len - RDMX_KV_BATCH_HDR;
    return 0;
}

static void h_batch(rdmx_rpc_req_t *req, void *arg, int kind)
{
    kvd_t *k = arg;
    const unsigned char *p;
    size_t left, used;
    uint32_t n, hits = 0;
    int miss = 0;
    out_t o = {0};
    char why[160];
    uint64_t now = now_ms();

    if (batch_count(k, req, &p, &left, &n) != 0)
        return;
    for (uint32_t i = 0; i < n; i++) {
        rdmx_kv_req_t r;
        rdmx_kv_item_t *it;
        rdmx_status_t st;
        uint64_t cas = 0;

        if (rdmx__kv_req_decode(p, left, kind == 1, &r, &used, why,
                               sizeof(why)) != RDMX_OK ||
            r.klen == 0) {
            __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
            free(o.p);
            rdmx_rpc_respond_error(req, RDMX_ERR_PROTO, "%s: key %u: %s",
                                   rdmx_rpc_req_name(req), i,
                                   r.klen ? why : "empty key");
            return;
        }
        p += used;
        left -= used;
        if (kind == 0) { /* mget */
            st = rdmx__kv_store_get(k->store, r.key, r.klen, now, &it);
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
                       out_put(&o, rdmx__kv_item_value(k->store, it), vl) !=
                           0) {
                rdmx__kv_store_release(k->store, it);
                free(o.p);
                rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY,
                                       "out of memory");
                return;
            }
            rdmx__kv_store_release(k->store, it);
        } else if (kind == 1) { /* mput */
            if ((r.mode & 0x7f) > RDMX_KV_STORE_CAS) {
                __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
                out_result(&o, RDMX_ERR_PROTO, RDMX_KV_WHERE_NONE, 0, 0, 0);
                continue;
            }
            st = rdmx__kv_store_set(k->store, r.key, r.klen, r.value,
                                    (size_t)r.vlen,
                                    (rdmx_kv_store_mode_t)(r.mode & 0x7f),
                                    r.cas, r.flags, r.ttl_ms, now, &cas);
            out_result(&o, st, RDMX_KV_WHERE_NONE, r.flags, cas, r.vlen);
        } else { /* prefix */
            if (!miss && rdmx__kv_store_exists(k->store, r.key, r.klen, now) ==
                             RDMX_OK)
                hits++;
            else
                miss = 1;
        }
    }
    if (left != 0) {
        __atomic_add_fetch(&k->bad_requests, 1, __ATOMIC_RELAXED);
        free(o.p);
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO, "%s: %zu trailing bytes",
                               rdmx_rpc_req_name(req), left);
        return;
    }
    if (kind == 2) {
        unsigned char h[4] = {(unsigned char)hits, (unsigned char)(hits >> 8),
                              (unsigned char)(hits >> 16),
                              (unsigned char)(hits >> 24)};
        rdmx_rpc_respond(req, h, sizeof(h));
    } else {
        rdmx_rpc_respond(req, o.p, o.len);
    }
    free(o.p);
}

static void h_mget(rdmx_rpc_req_t *req, void *arg) { h_batch(req, arg, 0); }
static void h_mput(rdmx_rpc_req_t *req, void *arg) { h_batch(req, arg, 1); }
static void h_prefix(rdmx_rpc_req_t *req, void *arg) { h_batch(req, arg, 2); }

/* --- lambda environment: the store, as a remote client sees it ------------- */

static rdmx_status_t env_get(void *ctx, const void *key, size_t klen,
                             void *buf, size_t cap, size_t *vlen_p)
{
    kvd_t *k = ctx;
    rdmx_kv_item_t *it;
    rdmx_status_t st;
    size_t len;

    st = rdmx__kv_store_get(k->store, key, klen, now_ms(), &it);
    if (st != RDMX_OK)
        return st;
    len = rdmx__kv_item_length(it);
    *vlen_p = len;
    if (len <= cap)
        memcpy(buf, rdmx__kv_item_value(k->store, it), len);
    rdmx__kv_store_release(k->store, it);
    return len <= cap ? RDMX_OK : RDMX_ERR_TOO_BIG;
}

static rdmx_status_t env_put(void *ctx, const void *key, size_t klen,
                             const void *value, size_t vlen, uint64_t ttl_ms)
{
    kvd_t *k = ctx;

    return rdmx__kv_store_set(k->store, key, klen, value, vlen,
                              RDMX_KV_STORE_SET, 0, 0, ttl_ms, now_ms(), NULL);
}

static rdmx_status_t env_delete(void *ctx, const void *key, size_t klen)
{
    kvd_t *k = ctx;

    return rdmx__kv_store_delete(k->store, key, klen, 0, now_ms());
}

static rdmx_status_t env_exists(void *ctx, const void *key, size_t klen)
{
    kvd_t *k = ctx;

    return rdmx__kv_store_exists(k->store, key, klen, now_ms());
}

/* --- stats ----------------------------------------------------------------------- */

static void h_stats(rdmx_rpc_req_t *req, void *arg)
{
    kvd_t *k = arg;
    rdmx_kv_store_stats_t s;
    rdmx_rpc_server_stats_t r;
    char out[4096];
    size_t o = 0;

    rdmx__kv_store_stats(k->store, &s);
    rdmx_rpc_server_stats(k->srv, &r);
#define P(name, v)                                                             \
    o += (size_t)snprintf(out + o, sizeof(out) - o, "%s %llu\n", name,        \
                          (unsigned long long)(v))
    P("pid", getpid());
    P("uptime", (now_ms() - k->started_ms) / 1000);
    P("curr_connections", r.connections);
    P("total_connections", r.connections_total);
    P("rejected_connections", r.connections_refused);
    P("curr_items", s.curr_items);
    P("total_items", s.total_items);
    P("bytes", s.bytes);
    P("limit_maxbytes", s.limit_maxbytes);
    P("cmd_get", s.cmd_get);
    P("cmd_set", s.cmd_set);
    P("cmd_touch", s.cmd_touch);
    P("cmd_flush", s.cmd_flush);
    P("get_hits", s.get_hits);
    P("get_misses", s.get_misses);
    P("get_expired", s.get_expired);
    P("delete_hits", s.delete_hits);
    P("delete_misses", s.delete_misses);
    P("incr_hits", s.incr_hits);
    P("incr_misses", s.incr_misses);
    P("decr_hits", s.decr_hits);
    P("decr_misses", s.decr_misses);
    P("cas_hits", s.cas_hits);
    P("cas_misses", s.cas_misses);
    P("cas_badval", s.cas_badval);
    P("touch_hits", s.touch_hits);
    P("touch_misses", s.touch_misses);
    P("evictions", s.evictions);
    P("evicted_unfetched", s.evicted_unfetched);
    P("expired_unfetched", s.expired_unfetched);
    P("reclaimed", s.reclaimed);
    P("free_bytes", s.alloc_free_bytes);
    P("largest_free_block", s.alloc_largest_free);
    P("bad_requests", __atomic_load_n(&k->bad_requests, __ATOMIC_RELAXED) +
                          r.malformed + r.unknown_handler + r.too_big);
    P("rpc_requests", r.requests);
    P("rpc_errors", r.errors);
    if (k->lambda != NULL) {
        rdmx_lambda_stats_t l;
        rdmx_lambda_engine_stats(k->lambda, &l);
        P("lambda_calls", l.calls);
        P("lambda_errors", l.errors);
        P("lambda_syntax_errors", l.syntax_errors);
        P("lambda_budget_instructions", l.budget_instructions);
        P("lambda_budget_memory", l.budget_memory);
        P("lambda_budget_time", l.budget_time);
        P("lambda_budget_output", l.budget_output);
        P("lambda_cache_hits", l.cache_hits);
        P("lambda_cache_misses", l.cache_misses);
        P("lambda_cache_evictions", l.cache_evictions);
        P("lambda_cache_entries", l.cache_entries);
        P("lambda_natives", l.natives);
        P("lambda_native_calls", l.native_calls);
    }
#undef P
    rdmx_rpc_respond(req, out, o < sizeof(out) ? o : sizeof(out));
}

/* --- main -------------------------------------------------------------------------- */

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s)
        return -1;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0')
        return -1;
    *out = (size_t)v;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: rdmx-kvd [options]\n"
        "  -l, --listen HOST:PORT     address (default " KVD_DEFAULT_LISTEN ")\n"
        "  -m, --memory SIZE          value memory, registered at start\n"
        "                             (default 64m; k/m/g suffixes)\n"
        "  -w, --workers N            server threads (default: one per CPU)\n"
        "  -c, --max-connections N    clients at once (default 1024); more\n"
        "                             get RDMX_ERR_BUSY at once. Each costs a\n"
        "                             file descriptor or two: see ulimit -n\n"
        "      --max-key BYTES        longest key (default 250, at most 65535)\n"
        "      --max-value SIZE       largest value (default 1m)\n"
        "      --inline-threshold SIZE values up to this size are answered\n"
        "                             inline; larger ones are RDMA-written\n"
        "                             into the caller's buffer (default 4k)\n"
        "      --eviction lru|none    full memory: evict least recently used\n"
        "                             (default) or refuse writes (NO_MEMORY)\n"
        "      --auth-secret-file F   require clients to prove this secret\n"
        "      --transport T          auto|shm|tcp|rdma (default: RDMX_TRANSPORT\n"
        "                             or auto)\n"
        "Lambdas (lambda.eval/call/native: sandboxed Lua 5.4 with kv.get/put/\n"
        "delete/exists over this store; see docs/LAMBDA.md):\n"
        "      --no-lambda            do not serve lambdas\n"
        "      --plugin-dir DIR       load the native plugins DIR/*.so at start\n"
        "                             (refused if DIR or a plugin is world-\n"
        "                             writable)\n"
        "      --lambda-max-instructions N  work units per call (default 10M)\n"
        "      --lambda-max-memory SIZE     Lua memory per call (default 64m)\n"
        "      --lambda-max-time MS   wall-clock limit per call besides the\n"
        "                             caller's deadline (default 1000; a call\n"
        "                             holds its server thread meanwhile)\n"
        "      --lambda-cache N       compiled functions kept (default 256)\n"
        "  -h, --help\n"
        "Stops cleanly on SIGTERM or SIGINT. Prints its address at start.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"memory", required_argument, NULL, 'm'},
        {"workers", required_argument, NULL, 'w'},
        {"max-connections", required_argument, NULL, 'c'},
        {"max-key", required_argument, NULL, 'K'},
        {"max-value", required_argument, NULL, 'V'},
        {"inline-threshold", required_argument, NULL, 'I'},
        {"eviction", required_argument, NULL, 'E'},
        {"auth-secret-file", required_argument, NULL, 'A'},
        {"transport", required_argument, NULL, 'T'},
        {"no-lambda", no_argument, NULL, 'N'},
        {"plugin-dir", required_argument, NULL, 'P'},
        {"lambda-max-instructions", required_argument, NULL, 'i'},
        {"lambda-max-memory", required_argument, NULL, 'M'},
        {"lambda-max-time", required_argument, NULL, 't'},
        {"lambda-cache", required_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *listen = KVD_DEFAULT_LISTEN, *secret_file = NULL;
    size_t memory = 64u << 20, max_key = 250, max_value = 1u << 20;
    size_t inline_threshold = 4096;
    unsigned workers = 0, max_connections = 1024;
    rdmx_kv_eviction_t eviction = RDMX_KV_EVICT_LRU;
    rdmx_context_params_t cp = {0};
    rdmx_rpc_server_params_t sp = {0};
    rdmx_kv_store_params_t stp = {0};
    rdmx_lambda_params_t lp = {0};
    int no_lambda = 0;
    char secret[4096];
    size_t secret_len = 0;
    kvd_t k = {0};
    rdmx_status_t st;
    int c;

    while ((c = getopt_long(argc, argv, "l:m:w:c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'm':
            if (parse_size(optarg, &memory) || memory < (1u << 20)) {
                fprintf(stderr, "rdmx-kvd: --memory '%s': a size of at "
                                "least 1m\n", optarg);
                return 2;
            }
            break;
        case 'w': workers = (unsigned)atoi(optarg); break;
        case 'c': {
            char *end;
            unsigned long n = strtoul(optarg, &end, 10);
            if (*end != '\0' || n == 0 || n > 10000000 || optarg[0] == '-') {
                fprintf(stderr, "rdmx-kvd: --max-connections '%s': a number "
                                "of at least 1\n", optarg);
                return 2;
            }
            max_connections = (unsigned)n;
            break;
        }
        case 'K':
            if (parse_size(optarg, &max_key) || max_key == 0 ||
                max_key > 65535) {
                fprintf(stderr, "rdmx-kvd: --max-key '%s': 1..65535\n",
                        optarg);
                return 2;
            }
            break;
        case 'V':
            if (parse_size(optarg, &max_value) || max_value == 0) {
                fprintf(stderr, "rdmx-kvd: --max-value '%s': a size\n",
                        optarg);
                return 2;
            }
            break;
        case 'I':
            if (parse_size(optarg, &inline_threshold)) {
                fprintf(stderr, "rdmx-kvd: --inline-threshold '%s': a size\n",
                        optarg);
                return 2;
            }
            break;
        case 'E':
            if (strcmp(optarg, "lru") == 0) {
                eviction = RDMX_KV_EVICT_LRU;
            } else if (strcmp(optarg, "none") == 0) {
                eviction = RDMX_KV_EVICT_NONE;
            } else {
                fprintf(stderr, "rdmx-kvd: --eviction lru|none\n");
                return 2;
            }
            break;
        case 'A': secret_file = optarg; break;
        case 'T':
            cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_TRANSPORT;
            if (rdmx_transport_parse(optarg, &cp.transport) != RDMX_OK) {
                fprintf(stderr, "rdmx-kvd: --transport auto|shm|tcp|rdma\n");
                return 2;
            }
            break;
        case 'N': no_lambda = 1; break;
        case 'P':
            lp.field_mask |= RDMX_LAMBDA_FIELD_PLUGIN_DIR;
            lp.plugin_dir = optarg;
            break;
        case 'i': {
            size_t v;
            if (parse_size(optarg, &v) || v < 1000) {
                fprintf(stderr, "rdmx-kvd: --lambda-max-instructions '%s': "
                                "a number of at least 1000\n", optarg);
                return 2;
            }
            lp.field_mask |= RDMX_LAMBDA_FIELD_MAX_INSTRUCTIONS;
            lp.max_instructions = v;
            break;
        }
        case 'M':
            if (parse_size(optarg, &lp.max_memory) ||
                lp.max_memory < (256u << 10)) {
                fprintf(stderr, "rdmx-kvd: --lambda-max-memory '%s': a size "
                                "of at least 256k\n", optarg);
                return 2;
            }
            lp.field_mask |= RDMX_LAMBDA_FIELD_MAX_MEMORY;
            break;
        case 't': {
            size_t v;
            if (parse_size(optarg, &v) || v > 3600000) {
                fprintf(stderr, "rdmx-kvd: --lambda-max-time '%s': "
                                "milliseconds, 0..3600000\n", optarg);
                return 2;
            }
            lp.field_mask |= RDMX_LAMBDA_FIELD_MAX_TIME;
            lp.max_time_ms = (unsigned)v;
            break;
        }
        case 'C': {
            size_t v;
            if (parse_size(optarg, &v) || v > 1000000) {
                fprintf(stderr, "rdmx-kvd: --lambda-cache '%s': 0..1000000\n",
                        optarg);
                return 2;
            }
            lp.field_mask |= RDMX_LAMBDA_FIELD_CACHE_ENTRIES;
            lp.cache_entries = (unsigned)v;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (secret_file != NULL) {
        FILE *f = fopen(secret_file, "r");
        if (f == NULL) {
            fprintf(stderr, "rdmx-kvd: %s: %s\n", secret_file,
                    strerror(errno));
            return 2;
        }
        secret_len = fread(secret, 1, sizeof(secret), f);
        fclose(f);
        while (secret_len > 0 && (secret[secret_len - 1] == '\n' ||
                                  secret[secret_len - 1] == '\r'))
            secret_len--;
        if (secret_len == 0) {
            fprintf(stderr, "rdmx-kvd: %s: empty secret\n", secret_file);
            return 2;
        }
    }
    {
        char host[256];
        uint16_t port;
        if (rdmx_addr_parse(listen, host, sizeof(host), &port) == RDMX_OK &&
            rdmx_host_is_loopback(host) && getenv("UCX_NET_DEVICES") == NULL) {
            cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
            cp.net_devices = "lo";
        }
    }
    cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NAME;
    cp.name = "rdmx-kvd";
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);

    k.inline_threshold = inline_threshold;
    k.started_ms = now_ms();
    stp.field_mask = RDMX_KV_STORE_FIELD_MAX_KEY |
                     RDMX_KV_STORE_FIELD_MAX_VALUE |
                     RDMX_KV_STORE_FIELD_EVICTION;
    stp.max_key = max_key;
    stp.max_value = max_value;
    stp.eviction = eviction;
    sp.field_mask = RDMX_RPC_SERVER_FIELD_ADDRESS |
                    RDMX_RPC_SERVER_FIELD_WORKERS |
                    RDMX_RPC_SERVER_FIELD_MAX_MESSAGE |
                    RDMX_RPC_SERVER_FIELD_MAX_CONNECTIONS;
    sp.max_connections = max_connections;
    sp.address = listen;
    sp.workers = workers;
    sp.max_message = max_value + max_key + 4096;
    if (secret_len > 0) {
        sp.field_mask |= RDMX_RPC_SERVER_FIELD_AUTH_SECRET;
        sp.auth_secret = secret;
        sp.auth_secret_len = secret_len;
    }
    if ((st = rdmx_context_create(&cp, &k.ctx)) != RDMX_OK ||
        (st = rdmx_mem_alloc(k.ctx, memory,
                             RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &k.mr)) !=
            RDMX_OK ||
        (st = rdmx__kv_store_create(rdmx_mr_addr(k.mr), memory, &stp,
                                    &k.store)) != RDMX_OK ||
        (st = rdmx_rpc_server_create(k.ctx, &sp, &k.srv)) != RDMX_OK) {
        fprintf(stderr, "rdmx-kvd: %s: %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        return 1;
    }
#define REG(name, fn, flags)                                                   \
    if (st == RDMX_OK)                                                         \
    st = rdmx_rpc_server_register(k.srv, name, fn, &k, flags)
    REG(RDMX_KV_H_GET, h_get, RDMX_RPC_IDEMPOTENT);
    REG(RDMX_KV_H_PUT, h_put, 0);
    REG(RDMX_KV_H_DELETE, h_delete, 0);
    REG(RDMX_KV_H_TOUCH, h_touch, RDMX_RPC_IDEMPOTENT);
    REG(RDMX_KV_H_INCR, h_incr, 0);
    REG(RDMX_KV_H_EXISTS, h_exists, RDMX_RPC_IDEMPOTENT);
    REG(RDMX_KV_H_MGET, h_mget, RDMX_RPC_IDEMPOTENT);
    REG(RDMX_KV_H_MPUT, h_mput, 0);
    REG(RDMX_KV_H_PREFIX, h_prefix, RDMX_RPC_IDEMPOTENT);
    REG(RDMX_KV_H_FLUSH, h_flush, RDMX_RPC_IDEMPOTENT);
    REG(RDMX_KV_H_STATS, h_stats, RDMX_RPC_IDEMPOTENT);
#undef REG
    if (st == RDMX_OK && !no_lambda) {
        k.lambda_env = (rdmx_lambda_env_t){.ctx = &k,
                                           .kv_get = env_get,
                                           .kv_put = env_put,
                                           .kv_delete = env_delete,
                                           .kv_exists = env_exists};
        st = rdmx_lambda_engine_create(&lp, &k.lambda);
        if (st == RDMX_OK)
            st = rdmx_lambda_register_handlers(k.srv, k.lambda,
                                               &k.lambda_env);
    }
    if (st == RDMX_OK)
        st = rdmx_rpc_server_start(k.srv);
    if (st != RDMX_OK) {
        fprintf(stderr, "rdmx-kvd: %s: %s\n", rdmx_strerror(st),
                rdmx_error_detail());
        return 1;
    }
    {
        char host[256];
        uint16_t port;
        char lam[64] = "off";
        rdmx_addr_parse(listen, host, sizeof(host), &port);
        if (k.lambda != NULL) {
            rdmx_lambda_stats_t l;
            rdmx_lambda_engine_stats(k.lambda, &l);
            snprintf(lam, sizeof(lam), "on, %llu natives",
                     (unsigned long long)l.natives);
        }
        printf("rdmx-kvd: listening on %s:%u (memory %zu MiB, %u workers, "
               "transport %s, lambda %s)\n",
               host, rdmx_rpc_server_port(k.srv), memory >> 20,
               rdmx_rpc_server_workers(k.srv),
               rdmx_transport_name(rdmx_context_transport(k.ctx)), lam);
        fflush(stdout);
    }
    /* Expired items are reclaimed lazily on access and here, in bounded
     * sweeps, ten times a second. */
    while (!stop) {
        usleep(100000);
        rdmx__kv_store_reclaim(k.store, now_ms(), 1000);
    }
    printf("rdmx-kvd: shutting down\n");
    fflush(stdout);
    /* Let transfers in flight finish (their requests are answered), for at
     * most 2 s; the rest are failed by the server's shutdown. */
    for (int i = 0; i < 200 && __atomic_load_n(&k.xfers, __ATOMIC_RELAXED);
         i++)
        usleep(10000);
    rdmx_rpc_server_destroy(k.srv);
    if (k.lambda != NULL)
        rdmx_lambda_engine_destroy(k.lambda);
    rdmx__kv_store_destroy(k.store);
    rdmx_mem_deregister(k.mr);
    rdmx_context_destroy(k.ctx);
    return 0;
}
