/*
 * KV client: channels to the servers, jump-hash sharding with replicas, and
 * the kv.* calls (proto.h). Each operation is one RPC call per server it
 * touches; the blocking forms progress the worker until their call ends.
 */
#include <rdmx/kv.h>

#include "core/upper.h"
#include "kv/proto.h"
#include "lambda/lambda_int.h"
#include "util/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_MAX_SERVERS 1024

struct rdmx_kv {
    rdmx_worker_t *w;
    unsigned n;
    unsigned replicas;
    int timeout_ms;
    size_t inline_max;
    int no_rma;           /* tcp: UCX emulates RMA over messages; lent
                             buffers would only add round trips */
    rdmx_channel_t **ch;
    char **addr;
};

/* --- placement ------------------------------------------------------------- */

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

/* --- lifecycle ------------------------------------------------------------- */

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
    kv->no_rma = rdmx_context_transport(rdmx__worker_context(w)) == RDMX_TRANSPORT_TCP;
    kv->replicas = (f & RDMX_KV_FIELD_REPLICAS) && p->replicas ? p->replicas
                                                               : 1;
    kv->timeout_ms = (f & RDMX_KV_FIELD_TIMEOUT) && p->timeout_ms > 0
                         ? p->timeout_ms
                         : 5000;
    kv->inline_max = (f & RDMX_KV_FIELD_INLINE_MAX) ? p->inline_max : 8192;
    kv->ch = calloc(KV_MAX_SERVERS, sizeof(*kv->ch));
    kv->addr = calloc(KV_MAX_SERVERS, sizeof(*kv->addr));
    if (kv->ch == NULL || kv->addr == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "kv: out of memory");
        goto err;
    }
    cp.field_mask = RDMX_CHANNEL_FIELD_TIMEOUT | RDMX_CHANNEL_FIELD_HEARTBEAT;
    cp.timeout_ms = kv->timeout_ms;
    /* A server pulling a large value is silent until done: a dead one is
     * found by the transport or the operation's own timeout. */
    cp.heartbeat_ms = 250;
    cp.heartbeat_timeout_ms = kv->timeout_ms > 1000 ? kv->timeout_ms : 1000;
    if ((f & RDMX_KV_FIELD_WAIT_FOR_READY) && p->wait_for_ready) {
        cp.field_mask |= RDMX_CHANNEL_FIELD_WAIT_FOR_READY;
        cp.wait_for_ready = 1;
    }
    if ((f & RDMX_KV_FIELD_AUTH_SECRET) && p->auth_secret != NULL) {
        cp.field_mask |= RDMX_CHANNEL_FIELD_AUTH_SECRET;
        cp.auth_secret = p->auth_secret;
        cp.auth_secret_len = p->auth_secret_len;
    }
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
    }
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

/* --- one call -------------------------------------------------------------- */

/* A non-blocking operation over one or more replicas. */
typedef struct {
    rdmx_kv_cb_t cb;
    void *arg;
    unsigned pending;     /* replica calls not done yet */
    rdmx_status_t status; /* first error */
    rdmx_kv_meta_t meta;  /* of the first replica */
    char message[256];
} kv_nb_t;

/* What a call's completion does with the response. */
typedef struct {
    kv_nb_t *nb;          /* non-blocking: report here, then free this */
    int first;            /* the first replica's call */
    volatile int done;
    rdmx_status_t status;
    char message[256];
    /* GET */
    void *buf;
    size_t capacity;
    rdmx_kv_meta_t meta;
    /* raw copy of the response (batches, stats, incr) */
    unsigned char *resp;
    size_t resp_cap, resp_len;
} kv_wait_t;

static void kv_done(const rdmx_call_result_t *r, void *arg)
{
    kv_wait_t *wt = arg;
    rdmx_kv_result_t res;

    wt->status = r->status;
    if (r->status != RDMX_OK) {
        snprintf(wt->message, sizeof(wt->message), "%s", r->message);
        goto out;
    }
    if (wt->resp != NULL) {
        size_t n = r->length < wt->resp_cap ? r->length : wt->resp_cap;
        memcpy(wt->resp, r->data, n);
        wt->resp_len = n;
        if (r->length > wt->resp_cap) {
            wt->status = RDMX_ERR_TOO_BIG;
            snprintf(wt->message, sizeof(wt->message), "response of %zu "
                                                       "bytes",
                     r->length);
        }
        goto out;
    }
    if (rdmx__kv_result_decode(r->data, r->length, &res) != RDMX_OK) {
        wt->status = RDMX_ERR_PROTO;
        snprintf(wt->message, sizeof(wt->message), "bad result from server");
        goto out;
    }
    wt->meta.length = (size_t)res.length;
    wt->meta.flags = res.flags;
    wt->meta.cas = res.cas;
    wt->status = (rdmx_status_t)res.status;
    if (res.status != RDMX_OK) {
        size_t mlen = r->length - RDMX_KV_RESULT_SIZE;
        if (mlen > sizeof(wt->message) - 1)
            mlen = sizeof(wt->message) - 1;
        memcpy(wt->message, (const char *)r->data + RDMX_KV_RESULT_SIZE, mlen);
        wt->message[mlen] = '\0';
        goto out;
    }
    if (res.where == RDMX_KV_WHERE_INLINE) {
        if (res.length > wt->capacity) {
            wt->status = RDMX_ERR_TOO_BIG;
            snprintf(wt->message, sizeof(wt->message),
                     "value of %llu bytes, buffer of %zu",
                     (unsigned long long)res.length, wt->capacity);
        } else if (res.length != 0) {
            memcpy(wt->buf, (const char *)r->data + RDMX_KV_RESULT_SIZE,
                   (size_t)res.length);
        }
    }
out:
    wt->done = 1;
    if (wt->nb != NULL) {
        kv_nb_t *nb = wt->nb;
        if (wt->first)
            nb->meta = wt->meta;
        if (nb->status == RDMX_OK && wt->status != RDMX_OK) {
            nb->status = wt->status;
            snprintf(nb->message, sizeof(nb->message), "%s", wt->message);
            if (wt->status == RDMX_ERR_TOO_BIG)
                nb->meta = wt->meta;
        }
        free(wt);
        if (--nb->pending == 0) {
            if (nb->status != RDMX_OK)
                rdmx__error(nb->status, "%s", nb->message);
            nb->meta.message = nb->message;
            nb->cb(nb->status, &nb->meta, nb->arg);
            free(nb);
        }
    }
}

/* Start one replica call of a non-blocking operation. */
static rdmx_status_t kv_call_nb(rdmx_kv_t *kv, unsigned server,
                                const char *method, const void *req,
                                size_t len, const rdmx_rpc_bulk_t *bulk,
                                unsigned nbulk, kv_nb_t *nb, int first,
                                void *buf, size_t capacity)
{
    rdmx_call_params_t cp = {0};
    kv_wait_t *wt = calloc(1, sizeof(*wt));
    rdmx_status_t st;

    if (wt == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv: out of memory");
    wt->nb = nb;
    wt->first = first;
    wt->buf = buf;
    wt->capacity = capacity;
    if (nbulk > 0) {
        cp.field_mask = RDMX_CALL_FIELD_BULK;
        cp.bulk = bulk;
        cp.nbulk = nbulk;
    }
    nb->pending++;
    st = rdmx_call_nb(kv->ch[server], method, req, len, &cp, kv_done, wt,
                      NULL);
    if (st != RDMX_INPROGRESS) {
        nb->pending--;
        free(wt);
        return st;
    }
    return RDMX_INPROGRESS;
}

static rdmx_status_t kv_call(rdmx_kv_t *kv, unsigned server,
                             const char *method, const void *req, size_t len,
                             const rdmx_rpc_bulk_t *bulk, unsigned nbulk,
                             kv_wait_t *wt)
{
    rdmx_call_params_t cp = {0};
    rdmx_status_t st;

    if (nbulk > 0) {
        cp.field_mask = RDMX_CALL_FIELD_BULK;
        cp.bulk = bulk;
        cp.nbulk = nbulk;
    }
    st = rdmx_call_nb(kv->ch[server], method, req, len, &cp, kv_done, wt,
                      NULL);
    if (st != RDMX_INPROGRESS)
        return st;
    rdmx__wait_until(kv->w, &wt->done);
    if (wt->status != RDMX_OK)
        return rdmx__error(wt->status, "%s on %s: %s", method,
                           kv->addr[server], wt->message);
    return RDMX_OK;
}

static rdmx_status_t check_key(size_t klen, const void *key)
{
    if (key == NULL || klen == 0 || klen > 65535)
        return rdmx__error(RDMX_ERR_INVALID, "kv: key of %zu bytes", klen);
    return RDMX_OK;
}

/* Build a single-key request in @stack or the heap. */
static unsigned char *build_req(const rdmx_kv_req_t *r, size_t inline_len,
                                unsigned char *stack, size_t stack_size,
                                size_t *len_p)
{
    size_t len = rdmx__kv_req_size(r->klen, inline_len);
    unsigned char *p = len <= stack_size ? stack : malloc(len);

    if (p != NULL)
        rdmx__kv_req_encode(r, inline_len, p);
    *len_p = len;
    return p;
}

/* --- operations ------------------------------------------------------------ */

rdmx_status_t rdmx_kv_get(rdmx_kv_t *kv, const void *key, size_t klen,
                          void *buf, size_t capacity, rdmx_mr_t *mr,
                          rdmx_kv_meta_t *meta_p)
{
    rdmx_kv_req_t r = {0};
    rdmx_rpc_bulk_t b;
    unsigned char stack[512], *req;
    kv_wait_t wt = {0};
    size_t len;
    rdmx_status_t st;

    if ((st = check_key(klen, key)) != RDMX_OK)
        return st;
    if (kv->no_rma)
        mr = NULL; /* a hint: inline is faster without real RMA */
    if (buf == NULL && capacity != 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv get: NULL buffer");
    r.klen = (uint16_t)klen;
    r.key = key;
    if (mr != NULL && capacity > 0) {
        uint64_t off = (uint64_t)((const char *)buf -
                                  (const char *)rdmx_mr_addr(mr));
        r.mode = RDMX_KV_GET_BUF;
        r.vlen = capacity;
        b.mr = mr;
        b.offset = off;
        b.length = capacity;
        b.access = RDMX_ACCESS_WRITE;
    }
    req = build_req(&r, 0, stack, sizeof(stack), &len);
    if (req == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv get: out of memory");
    wt.buf = buf;
    wt.capacity = capacity;
    st = kv_call(kv, read_server(kv, key, klen), RDMX_KV_H_GET, req, len, &b,
                 r.mode ? 1 : 0, &wt);
    if (req != stack)
        free(req);
    if (meta_p != NULL && (st == RDMX_OK || st == RDMX_ERR_TOO_BIG))
        *meta_p = wt.meta;
    return st;
}

rdmx_status_t rdmx_kv_put(rdmx_kv_t *kv, const void *key, size_t klen,
                          const void *value, size_t vlen, rdmx_mr_t *mr,
                          const rdmx_kv_put_opts_t *opts, uint64_t *cas_p)
{
    rdmx_kv_req_t r = {0};
    rdmx_rpc_bulk_t b;
    unsigned char stack[1024], *req;
    size_t len, inline_len;
    unsigned first;
    int bulk;
    rdmx_status_t st = RDMX_OK, st1;

    if ((st = check_key(klen, key)) != RDMX_OK)
        return st;
    if (kv->no_rma)
        mr = NULL; /* a hint: inline is faster without real RMA */
    if (value == NULL && vlen != 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv put: NULL value");
    if (opts != NULL && (unsigned)opts->mode > RDMX_KV_PUT_CAS)
        return rdmx__error(RDMX_ERR_INVALID, "kv put: mode %d",
                           (int)opts->mode);
    bulk = mr != NULL && vlen > kv->inline_max;
    r.mode = (uint8_t)(opts ? opts->mode : RDMX_KV_PUT_SET);
    if (bulk)
        r.mode |= RDMX_KV_PUT_BULK;
    r.klen = (uint16_t)klen;
    r.key = key;
    r.flags = opts ? opts->flags : 0;
    r.ttl_ms = opts ? opts->ttl_ms : 0;
    r.cas = opts ? opts->cas : 0;
    r.vlen = vlen;
    r.value = value;
    inline_len = bulk ? 0 : vlen;
    if (bulk) {
        b.mr = mr;
        b.offset = (uint64_t)((const char *)value -
                              (const char *)rdmx_mr_addr(mr));
        b.length = vlen;
        b.access = RDMX_ACCESS_READ;
    }
    req = build_req(&r, inline_len, stack, sizeof(stack), &len);
    if (req == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv put: out of memory");
    first = rdmx_kv_server_of(kv, key, klen);
    /* Every replica gets the write; the first error is reported. Each
     * server has its own versions: the first copy decides a conditional
     * write (ADD, REPLACE, CAS), the others then store unconditionally. */
    for (unsigned i = 0; i < kv->replicas; i++) {
        kv_wait_t wt = {0};
        if (i == 1 && (r.mode & 0x7f) != RDMX_KV_PUT_SET) {
            if (st != RDMX_OK)
                break;
            req[0] = (unsigned char)((req[0] & RDMX_KV_PUT_BULK) |
                                     RDMX_KV_PUT_SET);
        }
        st1 = kv_call(kv, (first + i) % kv->n, RDMX_KV_H_PUT, req, len, &b,
                      bulk ? 1 : 0, &wt);
        if (i == 0 && cas_p != NULL && st1 == RDMX_OK)
            *cas_p = wt.meta.cas;
        if (st == RDMX_OK && st1 != RDMX_OK)
            st = st1;
    }
    if (req != stack)
        free(req);
    return st;
}

/* Keyed operation without a value, sent to every replica (writes) or to
 * the read server (exists). */
static rdmx_status_t keyed(rdmx_kv_t *kv, const char *method,
                           const rdmx_kv_req_t *r, int write,
                           kv_wait_t *first_wt)
{
    unsigned char stack[512], *req;
    size_t len;
    unsigned first;
    rdmx_status_t st = RDMX_OK, st1;

    if ((st = check_key(r->klen, r->key)) != RDMX_OK)
        return st;
    req = build_req(r, 0, stack, sizeof(stack), &len);
    if (req == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv: out of memory");
    if (!write) {
        st = kv_call(kv, read_server(kv, r->key, r->klen), method, req, len,
                     NULL, 0, first_wt);
    } else {
        first = rdmx_kv_server_of(kv, r->key, r->klen);
        for (unsigned i = 0; i < kv->replicas; i++) {
            kv_wait_t wt = {0};
            if (i == 1 && r->cas != 0 && strcmp(method, RDMX_KV_H_DELETE) == 0) {
                /* the first copy checked the version; the others follow */
                if (st != RDMX_OK)
                    break;
                memset(req + 16, 0, 8);
            }
            st1 = kv_call(kv, (first + i) % kv->n, method, req, len, NULL, 0,
                          i == 0 ? first_wt : &wt);
            if (st == RDMX_OK && st1 != RDMX_OK)
                st = st1;
        }
    }
    if (req != stack)
        free(req);
    return st;
}

rdmx_status_t rdmx_kv_delete(rdmx_kv_t *kv, const void *key, size_t klen,
                             uint64_t cas)
{
    rdmx_kv_req_t r = {.klen = (uint16_t)klen, .key = key, .cas = cas};
    kv_wait_t wt = {0};

    if (klen > 65535)
        return check_key(klen, key);
    return keyed(kv, RDMX_KV_H_DELETE, &r, 1, &wt);
}

rdmx_status_t rdmx_kv_touch(rdmx_kv_t *kv, const void *key, size_t klen,
                            uint32_t ttl_ms)
{
    rdmx_kv_req_t r = {.klen = (uint16_t)klen, .key = key, .ttl_ms = ttl_ms};
    kv_wait_t wt = {0};

    if (klen > 65535)
        return check_key(klen, key);
    return keyed(kv, RDMX_KV_H_TOUCH, &r, 1, &wt);
}

rdmx_status_t rdmx_kv_exists(rdmx_kv_t *kv, const void *key, size_t klen)
{
    rdmx_kv_req_t r = {.klen = (uint16_t)klen, .key = key};
    kv_wait_t wt = {0};

    if (klen > 65535)
        return check_key(klen, key);
    return keyed(kv, RDMX_KV_H_EXISTS, &r, 0, &wt);
}

rdmx_status_t rdmx_kv_incr(rdmx_kv_t *kv, const void *key, size_t klen,
                           uint64_t delta, int decr, uint64_t *value_p)
{
    rdmx_kv_req_t r = {.klen = (uint16_t)klen, .key = key, .cas = delta,
                       .mode = (uint8_t)(decr ? 1 : 0)};
    kv_wait_t wt = {0};
    rdmx_status_t st;

    if (klen > 65535)
        return check_key(klen, key);
    st = keyed(kv, RDMX_KV_H_INCR, &r, 1, &wt);
    /* the new value travels in the result's length field */
    if (st == RDMX_OK && value_p != NULL)
        *value_p = wt.meta.length;
    return st;
}

/* --- batches ---------------------------------------------------------------- */

/* Send the batch of @idx[0..n) items (keys only, or with inline values) to
 * @server; the response is n results (each followed by its inline value). */
static rdmx_status_t batch(rdmx_kv_t *kv, unsigned server, const char *method,
                           const rdmx_kv_req_t *reqs, const size_t *inl,
                           size_t n, kv_wait_t *wt, size_t resp_cap)
{
    size_t len = RDMX_KV_BATCH_HDR, off;
    unsigned char *req;
    rdmx_status_t st;

    for (size_t i = 0; i < n; i++)
        len += rdmx__kv_req_size(reqs[i].klen, inl ? inl[i] : 0);
    req = malloc(len);
    wt->resp = malloc(resp_cap);
    wt->resp_cap = resp_cap;
    if (req == NULL || wt->resp == NULL) {
        free(req);
        free(wt->resp);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv batch: out of memory");
    }
    req[0] = (unsigned char)n;
    req[1] = (unsigned char)(n >> 8);
    req[2] = (unsigned char)(n >> 16);
    req[3] = (unsigned char)(n >> 24);
    memset(req + 4, 0, 4);
    off = RDMX_KV_BATCH_HDR;
    for (size_t i = 0; i < n; i++) {
        rdmx__kv_req_encode(&reqs[i], inl ? inl[i] : 0, req + off);
        off += rdmx__kv_req_size(reqs[i].klen, inl ? inl[i] : 0);
    }
    st = kv_call(kv, server, method, req, len, NULL, 0, wt);
    free(req);
    return st;
}

/* Send the items of idx[0..m) (one server) as one kv.mget batch. */
static rdmx_status_t mget_batch(rdmx_kv_t *kv, unsigned s,
                                rdmx_kv_mget_t *items, const size_t *idx,
                                size_t m, rdmx_kv_req_t *reqs)
{
    kv_wait_t wt = {0};
    size_t cap = 64, off = 0;
    rdmx_status_t st;

    for (size_t k = 0; k < m; k++) {
        rdmx_kv_mget_t *it = &items[idx[k]];
        memset(&reqs[k], 0, sizeof(reqs[k]));
        reqs[k].klen = (uint16_t)it->klen;
        reqs[k].key = it->key;
        reqs[k].vlen = it->capacity;
        cap += RDMX_KV_RESULT_SIZE + it->capacity;
    }
    st = batch(kv, s, RDMX_KV_H_MGET, reqs, NULL, m, &wt, cap);
    for (size_t k = 0; k < m; k++) {
        rdmx_kv_mget_t *it = &items[idx[k]];
        rdmx_kv_result_t res;
        if (st != RDMX_OK) {
            it->status = st;
            continue;
        }
        if (rdmx__kv_result_decode(wt.resp + off, wt.resp_len - off, &res) !=
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
                memcpy(it->buf, wt.resp + off, (size_t)res.length);
            else if (res.length > it->capacity)
                it->status = RDMX_ERR_TOO_BIG;
            off += (size_t)res.length;
        }
    }
    free(wt.resp);
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

/* Send the items of idx[0..m) to server @s as one kv.mput batch. @plain:
 * store unconditionally (the copies after the first of CAS/ADD/REPLACE). */
static rdmx_status_t mput_batch(rdmx_kv_t *kv, unsigned s,
                                rdmx_kv_mput_t *items, const size_t *idx,
                                size_t m, rdmx_kv_req_t *reqs, size_t *inl,
                                int first_copy)
{
    kv_wait_t wt = {0};
    rdmx_status_t st;

    for (size_t k = 0; k < m; k++) {
        rdmx_kv_mput_t *it = &items[idx[k]];
        memset(&reqs[k], 0, sizeof(reqs[k]));
        reqs[k].mode = (uint8_t)(first_copy ? it->opts.mode : RDMX_KV_PUT_SET);
        reqs[k].klen = (uint16_t)it->klen;
        reqs[k].key = it->key;
        reqs[k].flags = it->opts.flags;
        reqs[k].ttl_ms = it->opts.ttl_ms;
        reqs[k].cas = it->opts.cas;
        reqs[k].vlen = it->vlen;
        reqs[k].value = it->value;
        inl[k] = it->vlen;
    }
    st = batch(kv, s, RDMX_KV_H_MPUT, reqs, inl, m,  &wt,
               m * RDMX_KV_RESULT_SIZE + 64);
    for (size_t k = 0; k < m; k++) {
        rdmx_kv_mput_t *it = &items[idx[k]];
        rdmx_kv_result_t res;
        rdmx_status_t ist = st;
        if (st == RDMX_OK &&
            rdmx__kv_result_decode(wt.resp + k * RDMX_KV_RESULT_SIZE,
                                   wt.resp_len - k * RDMX_KV_RESULT_SIZE,
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
    free(wt.resp);
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
            (unsigned)it->opts.mode > RDMX_KV_PUT_CAS) {
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
        size_t m = 0, j;
        rdmx_kv_req_t *reqs;
        kv_wait_t wt = {0};
        rdmx_status_t st;
        uint32_t got;

        if (check_key(klens[i], keys[i]) != RDMX_OK)
            return check_key(klens[i], keys[i]);
        s = read_server(kv, keys[i], klens[i]);
        for (j = i; j < n && m < RDMX_KV_BATCH_MAX; j++, m++)
            if (check_key(klens[j], keys[j]) != RDMX_OK ||
                read_server(kv, keys[j], klens[j]) != s)
                break;
        reqs = calloc(m, sizeof(*reqs));
        if (reqs == NULL)
            return rdmx__error(RDMX_ERR_NO_MEMORY, "kv: out of memory");
        for (size_t k = 0; k < m; k++) {
            reqs[k].klen = (uint16_t)klens[i + k];
            reqs[k].key = keys[i + k];
        }
        st = batch(kv, s, RDMX_KV_H_PREFIX, reqs, NULL, m, &wt, 64);
        free(reqs);
        if (st != RDMX_OK || wt.resp_len < 4) {
            free(wt.resp);
            return st != RDMX_OK ? st
                                 : rdmx__error(RDMX_ERR_PROTO, "kv prefix: "
                                                               "short answer");
        }
        got = (uint32_t)wt.resp[0] | (uint32_t)wt.resp[1] << 8 |
              (uint32_t)wt.resp[2] << 16 | (uint32_t)wt.resp[3] << 24;
        free(wt.resp);
        hits += got;
        if (got < m)
            break;
        i += m;
    }
    *hits_p = hits;
    return RDMX_OK;
}

rdmx_status_t rdmx_kv_flush(rdmx_kv_t *kv)
{
    rdmx_status_t st = RDMX_OK;

    for (unsigned s = 0; s < kv->n; s++) {
        kv_wait_t wt = {0};
        unsigned char dummy[8];
        wt.resp = dummy;
        wt.resp_cap = sizeof(dummy);
        rdmx_status_t st1 = kv_call(kv, s, RDMX_KV_H_FLUSH, NULL, 0, NULL, 0,
                                    &wt);
        if (st == RDMX_OK && st1 != RDMX_OK)
            st = st1;
    }
    return st;
}

rdmx_status_t rdmx_kv_stats(rdmx_kv_t *kv, unsigned index, char *buf,
                            size_t size)
{
    kv_wait_t wt = {0};
    rdmx_status_t st;

    if (index >= kv->n || buf == NULL || size == 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv stats: server %u of %u",
                           index, kv->n);
    wt.resp = (unsigned char *)buf;
    wt.resp_cap = size - 1;
    st = kv_call(kv, index, RDMX_KV_H_STATS, NULL, 0, NULL, 0, &wt);
    buf[st == RDMX_OK || st == RDMX_ERR_TOO_BIG ? wt.resp_len : 0] = '\0';
    return st;
}

/* --- lambda ------------------------------------------------------------------ */

rdmx_status_t rdmx_kv_eval(rdmx_kv_t *kv, const char *source, size_t length,
                           const char *const *keys, unsigned nkeys,
                           const char *const *args, unsigned nargs, void *out,
                           size_t capacity, size_t *out_len_p)
{
    const char *all[RDMX_LAMBDA_ARGS_MAX];
    unsigned s = 0, i;
    rdmx_status_t st;

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
                             nkeys + nargs, nkeys, out, capacity, out_len_p);
}

/* --- non-blocking forms ------------------------------------------------------ */

rdmx_status_t rdmx_kv_get_nb(rdmx_kv_t *kv, const void *key, size_t klen,
                             void *buf, size_t capacity, rdmx_mr_t *mr,
                             rdmx_kv_cb_t cb, void *arg)
{
    rdmx_kv_req_t r = {0};
    rdmx_rpc_bulk_t b;
    unsigned char stack[512], *req;
    kv_nb_t *nb;
    size_t len;
    rdmx_status_t st;

    if ((st = check_key(klen, key)) != RDMX_OK)
        return st;
    if (kv->no_rma)
        mr = NULL; /* a hint: inline is faster without real RMA */
    if (cb == NULL || (buf == NULL && capacity != 0))
        return rdmx__error(RDMX_ERR_INVALID, "kv get_nb: NULL argument");
    r.klen = (uint16_t)klen;
    r.key = key;
    if (mr != NULL && capacity > 0) {
        r.mode = RDMX_KV_GET_BUF;
        r.vlen = capacity;
        b.mr = mr;
        b.offset = (uint64_t)((const char *)buf -
                              (const char *)rdmx_mr_addr(mr));
        b.length = capacity;
        b.access = RDMX_ACCESS_WRITE;
    }
    nb = calloc(1, sizeof(*nb));
    req = build_req(&r, 0, stack, sizeof(stack), &len);
    if (nb == NULL || req == NULL) {
        free(nb);
        if (req != stack)
            free(req);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv get_nb: out of memory");
    }
    nb->cb = cb;
    nb->arg = arg;
    st = kv_call_nb(kv, read_server(kv, key, klen), RDMX_KV_H_GET, req, len,
                    &b, r.mode ? 1 : 0, nb, 1, buf, capacity);
    if (req != stack)
        free(req);
    if (st != RDMX_INPROGRESS)
        free(nb);
    return st;
}

rdmx_status_t rdmx_kv_put_nb(rdmx_kv_t *kv, const void *key, size_t klen,
                             const void *value, size_t vlen, rdmx_mr_t *mr,
                             const rdmx_kv_put_opts_t *opts, rdmx_kv_cb_t cb,
                             void *arg)
{
    rdmx_kv_req_t r = {0};
    rdmx_rpc_bulk_t b;
    unsigned char stack[1024], *req;
    size_t len;
    unsigned first, started = 0;
    kv_nb_t *nb;
    int bulk;
    rdmx_status_t st = RDMX_OK;

    if ((st = check_key(klen, key)) != RDMX_OK)
        return st;
    if (kv->no_rma)
        mr = NULL; /* a hint: inline is faster without real RMA */
    if (cb == NULL || (value == NULL && vlen != 0))
        return rdmx__error(RDMX_ERR_INVALID, "kv put_nb: NULL argument");
    if (opts != NULL && (unsigned)opts->mode > RDMX_KV_PUT_CAS)
        return rdmx__error(RDMX_ERR_INVALID, "kv put: mode %d",
                           (int)opts->mode);
    if (kv->replicas > 1 && opts != NULL && opts->mode != RDMX_KV_PUT_SET)
        return rdmx__error(RDMX_ERR_UNSUPPORTED,
                           "kv put_nb: a conditional write needs its first "
                           "copy's answer before the others; use rdmx_kv_put "
                           "with replicas > 1");
    bulk = mr != NULL && vlen > kv->inline_max;
    r.mode = (uint8_t)(opts ? opts->mode : RDMX_KV_PUT_SET);
    if (bulk)
        r.mode |= RDMX_KV_PUT_BULK;
    r.klen = (uint16_t)klen;
    r.key = key;
    r.flags = opts ? opts->flags : 0;
    r.ttl_ms = opts ? opts->ttl_ms : 0;
    r.cas = opts ? opts->cas : 0;
    r.vlen = vlen;
    r.value = value;
    if (bulk) {
        b.mr = mr;
        b.offset = (uint64_t)((const char *)value -
                              (const char *)rdmx_mr_addr(mr));
        b.length = vlen;
        b.access = RDMX_ACCESS_READ;
    }
    nb = calloc(1, sizeof(*nb));
    req = build_req(&r, bulk ? 0 : vlen, stack, sizeof(stack), &len);
    if (nb == NULL || req == NULL) {
        free(nb);
        if (req != stack)
            free(req);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "kv put_nb: out of memory");
    }
    nb->cb = cb;
    nb->arg = arg;
    nb->pending = 1; /* held until every replica call is started */
    first = rdmx_kv_server_of(kv, key, klen);
    for (unsigned i = 0; i < kv->replicas; i++) {
        rdmx_status_t st1 = kv_call_nb(kv, (first + i) % kv->n,
                                       RDMX_KV_H_PUT, req, len, &b,
                                       bulk ? 1 : 0, nb, i == 0, NULL, 0);
        if (st1 == RDMX_INPROGRESS)
            started++;
        else if (st == RDMX_OK)
            st = st1;
    }
    if (req != stack)
        free(req);
    if (started == 0) {
        free(nb);
        return st != RDMX_OK ? st : rdmx__error(RDMX_ERR_INTERNAL, "kv put");
    }
    if (st != RDMX_OK && nb->status == RDMX_OK) {
        nb->status = st; /* a replica could not even be asked */
        snprintf(nb->message, sizeof(nb->message), "%s", rdmx_error_detail());
    }
    if (--nb->pending == 0) { /* all finished at once (cannot, but be safe) */
        nb->meta.message = nb->message;
        nb->cb(nb->status, &nb->meta, nb->arg);
        free(nb);
    }
    return RDMX_INPROGRESS;
}
