/*
 * The generic test server. A test binary runs it in a child process (argv[1]
 * "--server"); it listens on 127.0.0.1 with a free port, prints "PORT n",
 * accepts one client and then executes the client's commands (ts_msg_t, see
 * harness.h) one after the other: allocate and describe memory, fill or
 * verify it, receive and check a message, send one, report the
 * put-with-notify notifications it saw (each verified in the notify
 * callback, when the data must already be in place), count self-describing
 * data messages. It progresses its worker whenever it waits, so emulated
 * RMA against it works. It exits 0 after TS_QUIT when the client's close
 * arrived as RDMX_ERR_CONN_CLOSED, non-zero on anything unexpected.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SRV_MAX_REGIONS  64
#define SRV_MAX_NOTIFIES 256

typedef struct {
    int used;
    rdmx_mr_t *mr;
    void *mem; /* malloc'ed memory for TS_KIND_REGISTER */
    uint8_t *addr;
    uint64_t size;
} srv_region_t;

typedef struct {
    int used;
    uint64_t imm, offset, length;
    int ok;
    int region;
} srv_notify_t;

static struct {
    rdmx_context_t *ctx;
    rdmx_worker_t *worker;
    rdmx_listener_t *listener;
    rdmx_ep_t *ep;
    volatile int ep_failed;
    rdmx_status_t ep_err;
    int refused;
    srv_region_t regions[SRV_MAX_REGIONS];
    srv_notify_t notifies[SRV_MAX_NOTIFIES];
    uint64_t notify_count, notify_lost;
    uint64_t data_ok, data_bad;
    ts_reply_t reply;
} S;

static void srv_accept_cb(rdmx_ep_t *ep, void *arg)
{
    (void)arg;
    if (S.ep != NULL) {
        /* One client per server. */
        S.refused++;
        rdmx_ep_close(ep);
        return;
    }
    S.ep = ep;
}

static void srv_error_cb(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    (void)arg;
    if (ep != S.ep)
        return;
    S.ep_err = status;
    S.ep_failed = 1;
}

static int srv_region_of(const rdmx_mr_t *mr)
{
    int i;

    for (i = 0; i < SRV_MAX_REGIONS; i++)
        if (S.regions[i].used && S.regions[i].mr == mr)
            return i;
    return -1;
}

static void srv_notify_cb(rdmx_ep_t *ep, const rdmx_notify_t *n, void *arg)
{
    int i, r = srv_region_of(n->mr);
    int ok = 0;

    (void)ep;
    (void)arg;
    S.notify_count++;
    /* The data must be in place when the notification is delivered. */
    if (r >= 0 && n->offset <= S.regions[r].size &&
        n->length <= S.regions[r].size - n->offset)
        ok = th_check(S.regions[r].addr + n->offset, n->length, n->imm) < 0;
    for (i = 0; i < SRV_MAX_NOTIFIES; i++) {
        if (!S.notifies[i].used) {
            S.notifies[i].used = 1;
            S.notifies[i].imm = n->imm;
            S.notifies[i].offset = n->offset;
            S.notifies[i].length = n->length;
            S.notifies[i].ok = ok;
            S.notifies[i].region = r;
            return;
        }
    }
    S.notify_lost++;
}

static void srv_wait(th_req_t *req)
{
    double deadline = th_now_ms() + 300000.0 * TH_SLOW;

    while (!atomic_load(&req->done)) {
        rdmx_worker_wait(S.worker, 100);
        CHECKF(th_now_ms() < deadline, "server: operation never completed");
    }
}

static void srv_reply(int32_t status, uint64_t v0, uint64_t v1, uint64_t v2,
                      uint64_t v3, const void *blob, size_t blob_len)
{
    ts_reply_t *rep = &S.reply;

    CHECK(blob_len <= TS_MAX_BLOB);
    memset(rep, 0, TS_REPLY_HDR);
    rep->magic = TS_MAGIC;
    rep->status = status;
    rep->v[0] = v0;
    rep->v[1] = v1;
    rep->v[2] = v2;
    rep->v[3] = v3;
    rep->blob_len = (uint32_t)blob_len;
    if (blob_len)
        memcpy(rep->blob, blob, blob_len);
    CHECK_OK(rdmx_send(S.ep, rep, TS_REPLY_HDR + blob_len, NULL));
}

static srv_region_t *srv_region(uint64_t idx, uint64_t offset, uint64_t len)
{
    srv_region_t *r;

    CHECKF(idx < SRV_MAX_REGIONS && S.regions[idx].used,
           "server: no region %llu", (unsigned long long)idx);
    r = &S.regions[idx];
    CHECKF(offset <= r->size && len <= r->size - offset,
           "server: [%llu, +%llu) outside region %llu of %llu bytes",
           (unsigned long long)offset, (unsigned long long)len,
           (unsigned long long)idx, (unsigned long long)r->size);
    return r;
}

static void srv_alloc(const ts_msg_t *m)
{
    srv_region_t *r = NULL;
    rdmx_status_t st;
    uint8_t blob[TS_MAX_BLOB];
    size_t blob_len = 0;
    int i;

    for (i = 0; i < SRV_MAX_REGIONS && r == NULL; i++)
        if (!S.regions[i].used)
            r = &S.regions[i];
    CHECKF(r != NULL, "server: out of region slots");
    memset(r, 0, sizeof(*r));
    if (m->c == TS_KIND_ALLOC) {
        st = rdmx_mem_alloc(S.ctx, m->a, (unsigned)m->b, &r->mr);
    } else {
        r->mem = th_alloc(m->a);
        memset(r->mem, 0, m->a);
        st = rdmx_mem_register(S.ctx, r->mem, m->a, (unsigned)m->b, &r->mr);
    }
    if (st != RDMX_OK) {
        th_log("server: allocating %llu bytes: %s (%s)",
               (unsigned long long)m->a, rdmx_status_name(st),
               rdmx_error_detail());
        free(r->mem);
        srv_reply(st, 0, 0, 0, 0, NULL, 0);
        return;
    }
    r->used = 1;
    r->size = m->a;
    r->addr = rdmx_mr_addr(r->mr);
    CHECK(r->addr != NULL);
    CHECK_EQ_U64(rdmx_mr_length(r->mr), m->a);
    if (m->c == TS_KIND_REGISTER)
        CHECK(r->addr == r->mem);
    if (m->d)
        th_fill(r->addr, r->size, m->d);
    CHECK_OK(rdmx_mr_pack(r->mr, 0, r->size, (unsigned)m->b, blob, sizeof(blob),
                          &blob_len));
    srv_reply(RDMX_OK, (uint64_t)(r - S.regions), 0, 0, 0, blob, blob_len);
}

static void srv_free_region(srv_region_t *r)
{
    rdmx_mem_deregister(r->mr);
    free(r->mem);
    memset(r, 0, sizeof(*r));
}

static void srv_recv(const ts_msg_t *m)
{
    uint8_t *buf = th_alloc(m->a);
    rdmx_mr_t *mr = NULL;
    th_req_t req;
    rdmx_op_params_t op = {.field_mask =
                               RDMX_OP_PARAM_FIELD_CB | RDMX_OP_PARAM_FIELD_MR,
                           .cb = th_req_cb,
                           .arg = &req};
    rdmx_status_t st;
    int ok;

    if ((m->d & TS_FLAG_REGISTERED) && m->a > 0)
        CHECK_OK(rdmx_mem_register(S.ctx, buf, m->a,
                                   RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &mr));
    op.mr = mr;
    th_req_init(&req);
    st = rdmx_recv_nb(S.ep, buf, m->a, &op);
    CHECK_ST(st, RDMX_INPROGRESS);
    srv_wait(&req);
    ok = req.status == RDMX_OK && req.length == m->b &&
         th_check(buf, m->b, m->c) < 0;
    if (mr)
        rdmx_mem_deregister(mr);
    free(buf);
    srv_reply(req.status, req.length, (uint64_t)ok, 0, 0, NULL, 0);
}

static void srv_send(const ts_msg_t *m)
{
    uint8_t *buf = th_alloc(m->a);
    rdmx_mr_t *mr = NULL;
    th_req_t req;
    rdmx_op_params_t op = {.field_mask =
                               RDMX_OP_PARAM_FIELD_CB | RDMX_OP_PARAM_FIELD_MR,
                           .cb = th_req_cb,
                           .arg = &req};

    th_fill(buf, m->a, m->b);
    if ((m->c & TS_FLAG_REGISTERED) && m->a > 0)
        CHECK_OK(rdmx_mem_register(S.ctx, buf, m->a,
                                   RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &mr));
    op.mr = mr;
    th_req_init(&req);
    th_req_start(&req, rdmx_send_nb(S.ep, buf, m->a, &op), m->a);
    srv_wait(&req);
    CHECK_ST(req.status, RDMX_OK);
    if (mr)
        rdmx_mem_deregister(mr);
    free(buf);
}

static void srv_notify_wait(const ts_msg_t *m)
{
    double deadline = th_now_ms() + (double)m->b * TH_SLOW;
    int i;

    for (;;) {
        for (i = 0; i < SRV_MAX_NOTIFIES; i++) {
            srv_notify_t *n = &S.notifies[i];

            if (n->used && n->imm == m->a) {
                n->used = 0;
                srv_reply(RDMX_OK, n->offset, n->length, (uint64_t)n->ok,
                          (uint64_t)(int64_t)n->region, NULL, 0);
                return;
            }
        }
        if (th_now_ms() > deadline || S.ep_failed) {
            srv_reply(RDMX_ERR_TIMEOUT, 0, 0, 0, 0, NULL, 0);
            return;
        }
        rdmx_worker_wait(S.worker, 10);
    }
}

static void srv_cleanup(void)
{
    int i;

    if (S.ep)
        rdmx_ep_close(S.ep);
    S.ep = NULL;
    for (i = 0; i < SRV_MAX_REGIONS; i++)
        if (S.regions[i].used)
            srv_free_region(&S.regions[i]);
    rdmx_listener_destroy(S.listener);
    rdmx_worker_destroy(S.worker);
    rdmx_context_destroy(S.ctx);
}

/* Execute one command; returns 0 to go on, 1 after TS_QUIT. */
static int srv_dispatch(const uint8_t *buf, size_t len)
{
    const ts_msg_t *m = (const ts_msg_t *)buf;
    srv_region_t *r;
    uint64_t v;

    CHECKF(len >= sizeof(*m) && m->magic == TS_MAGIC,
           "server: malformed command (%zu bytes)", len);
    switch (m->cmd) {
    case TS_ALLOC:
        srv_alloc(m);
        break;
    case TS_PACK: {
        uint8_t blob[TS_MAX_BLOB];
        size_t blob_len = 0;
        rdmx_status_t st;

        r = srv_region(m->a, 0, 0);
        st = rdmx_mr_pack(r->mr, m->b, m->c, (unsigned)m->d, blob, sizeof(blob),
                          &blob_len);
        srv_reply(st, 0, 0, 0, 0, blob, st == RDMX_OK ? blob_len : 0);
        break;
    }
    case TS_FREE:
        srv_free_region(srv_region(m->a, 0, 0));
        srv_reply(RDMX_OK, 0, 0, 0, 0, NULL, 0);
        break;
    case TS_FILL:
        r = srv_region(m->a, m->b, m->c);
        if (m->d)
            th_fill_at(r->addr + m->b, m->c, m->d, m->pos);
        else
            memset(r->addr + m->b, 0, m->c);
        srv_reply(RDMX_OK, 0, 0, 0, 0, NULL, 0);
        break;
    case TS_VERIFY: {
        int64_t bad;

        r = srv_region(m->a, m->b, m->c);
        if (m->d) {
            bad = th_check_at(r->addr + m->b, m->c, m->d, m->pos);
        } else {
            uint64_t i;

            for (bad = -1, i = 0; i < m->c && bad < 0; i++)
                if (r->addr[m->b + i])
                    bad = (int64_t)i;
        }
        srv_reply(RDMX_OK, bad < 0, bad < 0 ? 0 : (uint64_t)bad, 0, 0, NULL, 0);
        break;
    }
    case TS_SET64:
        r = srv_region(m->a, m->b, 8);
        CHECK(m->b % 8 == 0);
        __atomic_store_n((uint64_t *)(void *)(r->addr + m->b), m->c,
                         __ATOMIC_SEQ_CST);
        srv_reply(RDMX_OK, 0, 0, 0, 0, NULL, 0);
        break;
    case TS_READ64:
        r = srv_region(m->a, m->b, 8);
        CHECK(m->b % 8 == 0);
        v = __atomic_load_n((uint64_t *)(void *)(r->addr + m->b),
                            __ATOMIC_SEQ_CST);
        srv_reply(RDMX_OK, v, 0, 0, 0, NULL, 0);
        break;
    case TS_RECV:
        srv_recv(m);
        break;
    case TS_SEND:
        srv_send(m);
        break;
    case TS_NOTIFY_WAIT:
        srv_notify_wait(m);
        break;
    case TS_DATA:
        if (len == sizeof(*m) + m->b &&
            th_check(buf + sizeof(*m), m->b, m->a) < 0)
            S.data_ok++;
        else
            S.data_bad++;
        break;
    case TS_STATS: {
        rdmx_worker_stats_t stats;

        rdmx_worker_stats(S.worker, &stats);
        srv_reply(RDMX_OK, S.data_ok, S.data_bad, S.notify_count, S.notify_lost,
                  &stats, sizeof(stats));
        break;
    }
    case TS_HANG:
        srv_reply(RDMX_OK, 0, 0, 0, 0, NULL, 0);
        for (;;)
            rdmx_worker_wait(S.worker, 100);
    case TS_QUIT:
        srv_reply(RDMX_OK, 0, 0, 0, 0, NULL, 0);
        return 1;
    default:
        th_fail(__FILE__, __LINE__, "server: unknown command %u", m->cmd);
    }
    return 0;
}

int ts_server_main(int argc, char **argv)
{
    rdmx_ep_params_t ep_p;
    size_t cap = sizeof(ts_msg_t) + TS_MAX_DATA;
    uint8_t *buf;
    double deadline;
    char name[64];
    const char *base = strrchr(argv[0], '/');

    (void)argc;
    snprintf(name, sizeof(name), "%s-server", base ? base + 1 : argv[0]);
    th_init(name, 600);

    S.ctx = th_context();
    S.worker = th_worker(S.ctx, 0);
    memset(&ep_p, 0, sizeof(ep_p));
    ep_p.field_mask =
        RDMX_EP_PARAM_FIELD_ERROR_CB | RDMX_EP_PARAM_FIELD_NOTIFY_CB;
    ep_p.error_cb = srv_error_cb;
    ep_p.notify_cb = srv_notify_cb;
    S.listener = th_listen(S.worker, srv_accept_cb, &ep_p);
    CHECK(rdmx_listener_port(S.listener) != 0);
    th_announce_port(rdmx_listener_port(S.listener));

    deadline = th_now_ms() + 120000.0 * TH_SLOW;
    while (S.ep == NULL) {
        rdmx_worker_wait(S.worker, 100);
        CHECKF(th_now_ms() < deadline, "server: no client connected");
    }

    buf = th_alloc(cap);
    for (;;) {
        th_req_t req;
        rdmx_op_params_t op = {
            .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = th_req_cb, .arg = &req};
        rdmx_status_t st;

        th_req_init(&req);
        st = rdmx_recv_nb(S.ep, buf, cap, &op);
        if (st == RDMX_INPROGRESS)
            srv_wait(&req);
        else
            th_req_start(&req, st, 0);
        if (req.status != RDMX_OK) {
            /* The client went away without TS_QUIT. */
            th_log("server: receive failed: %s; connection %s",
                   rdmx_status_name(req.status),
                   S.ep_failed ? rdmx_status_name(S.ep_err) : "up");
            free(buf);
            srv_cleanup();
            return 3;
        }
        if (srv_dispatch(buf, req.length))
            break;
    }
    free(buf);

    /* TS_QUIT: the client closes next; that must look like an orderly
     * close. */
    deadline = th_now_ms() + 10000.0 * TH_SLOW;
    while (!S.ep_failed && th_now_ms() < deadline)
        rdmx_worker_wait(S.worker, 100);
    if (!S.ep_failed) {
        th_log("server: FAIL: the client's close was not reported");
        srv_cleanup();
        return 6;
    }
    if (S.ep_err != RDMX_ERR_CONN_CLOSED) {
        th_log("server: FAIL: the client's orderly close was reported as "
               "%s, expected RDMX_ERR_CONN_CLOSED",
               rdmx_status_name(S.ep_err));
        srv_cleanup();
        return 5;
    }
    CHECKF(rdmx_ep_status(S.ep) == RDMX_ERR_CONN_CLOSED,
           "server: rdmx_ep_status after close is %s",
           rdmx_status_name(rdmx_ep_status(S.ep)));
    srv_cleanup();
    return 0;
}
