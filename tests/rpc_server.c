/*
 * RPC test server (see rpc_server.h): a real rdmx RPC server with handlers
 * that the RPC tests drive from another process.
 */
#include "rpc_server.h"

#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t trs_stop;
static rdmx_context_t *trs_ctx;
static uint64_t trs_oneways; /* atomic */

static void on_term(int sig)
{
    (void)sig;
    trs_stop = 1;
}

/* FNV-1a over 8-byte words (then the tail's bytes): order-sensitive like
 * the byte-wise one, and 8 times fewer dependent multiplies over 1 GiB. */
static uint64_t fnv64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull, w;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        memcpy(&w, p + i, 8);
        h ^= w;
        h *= 0x100000001b3ull;
    }
    for (; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t trs_checksum(const void *data, size_t len)
{
    return fnv64(data, len);
}

static void h_echo(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const void *data = rdmx_rpc_req_data(req, &len);
    (void)arg;
    rdmx_rpc_respond(req, data, len);
}

static void h_fail(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const char *data = rdmx_rpc_req_data(req, &len);
    (void)arg;
    rdmx_rpc_respond_error(req, RDMX_ERR_INVALID, "fail: %.*s",
                           (int)(len > 200 ? 200 : len), data);
}

static void h_spin(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const unsigned char *data = rdmx_rpc_req_data(req, &len);
    uint32_t ms = 0;
    struct timespec t0, t;
    (void)arg;
    if (len >= 4)
        memcpy(&ms, data, 4);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 <
             ms);
    rdmx_rpc_respond(req, "done", 4);
}

/* "echo_later" keeps its request unanswered; "release" answers every kept
 * one with its own payload, read only then (the payload must outlive the
 * handler until the answer: also when it came in a batch, whose buffer is
 * the transport's only during the callback), then answers the count. A
 * connection's calls all run on its worker's thread: one list per thread. */
#define LATER_MAX 256
static __thread rdmx_rpc_req_t *later[LATER_MAX];
static __thread uint32_t nlater;

static void h_echo_later(rdmx_rpc_req_t *req, void *arg)
{
    (void)arg;
    if (nlater == LATER_MAX) {
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_RESOURCE, "echo_later: full");
        return;
    }
    later[nlater++] = req;
}

static void h_release(rdmx_rpc_req_t *req, void *arg)
{
    uint32_t n = nlater;

    (void)arg;
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const void *data = rdmx_rpc_req_data(later[i], &len);
        rdmx_rpc_respond(later[i], data, len);
    }
    nlater = 0;
    rdmx_rpc_respond(req, &n, sizeof(n));
}

static void h_worker(rdmx_rpc_req_t *req, void *arg)
{
    uint32_t w = rdmx_rpc_req_worker(req);
    (void)arg;
    rdmx_rpc_respond(req, &w, sizeof(w));
}

static void h_oneway(rdmx_rpc_req_t *req, void *arg)
{
    (void)arg;
    __atomic_add_fetch(&trs_oneways, 1, __ATOMIC_RELAXED);
    rdmx_rpc_respond(req, NULL, 0); /* ignored for one-way */
}

static void h_count(rdmx_rpc_req_t *req, void *arg)
{
    uint64_t n = __atomic_load_n(&trs_oneways, __ATOMIC_RELAXED);
    (void)arg;
    rdmx_rpc_respond(req, &n, sizeof(n));
}

/* --- bulk ------------------------------------------------------------------ */

typedef struct {
    rdmx_rpc_req_t *req;
    rdmx_mr_t *mr;
    void *buf;
    size_t len;
    int push;
} bulk_op_t;

static void bulk_done(rdmx_status_t st, size_t length, void *arg)
{
    bulk_op_t *op = arg;
    (void)length;
    if (st != RDMX_OK) {
        rdmx_rpc_respond_error(op->req, st, "bulk %s failed: %s",
                               op->push ? "push" : "pull", rdmx_strerror(st));
    } else if (op->push) {
        rdmx_rpc_respond(op->req, NULL, 0);
    } else {
        uint64_t sum = fnv64(op->buf, op->len);
        rdmx_rpc_respond(op->req, &sum, sizeof(sum));
    }
    rdmx_mem_deregister(op->mr);
    free(op->buf);
    free(op);
}

/* bulk_pull: descriptor 0 (READ); answers trs_checksum of its bytes.
 * bulk_push: payload u64 seed; fills descriptor 0 (WRITE) with the harness
 * pattern of that seed. Both answer after the transfer completed. */
static void h_bulk(rdmx_rpc_req_t *req, void *arg)
{
    int push = arg != NULL;
    rdmx_rmem_t *rmem;
    bulk_op_t *op;
    rdmx_op_params_t opp = {0};
    rdmx_status_t st;
    uint64_t seed = 0;
    size_t plen;
    const void *p = rdmx_rpc_req_data(req, &plen);

    if (rdmx_rpc_req_bulk_count(req) != 1) {
        rdmx_rpc_respond_error(req, RDMX_ERR_INVALID, "want 1 descriptor, "
                                                      "got %u",
                               rdmx_rpc_req_bulk_count(req));
        return;
    }
    if ((st = rdmx_rpc_req_bulk(req, 0, &rmem)) != RDMX_OK) {
        rdmx_rpc_respond_error(req, st, "%s", rdmx_error_detail());
        return;
    }
    op = calloc(1, sizeof(*op));
    op->req = req;
    op->push = push;
    op->len = rdmx_rmem_length(rmem);
    op->buf = th_alloc(op->len);
    if (push) {
        if (plen >= 8)
            memcpy(&seed, p, 8);
        th_fill(op->buf, op->len, seed);
    }
    st = rdmx_mem_register(trs_ctx, op->buf, op->len ? op->len : 1,
                           RDMX_ACCESS_ALL, &op->mr);
    if (st != RDMX_OK) {
        rdmx_rpc_respond_error(req, st, "register: %s", rdmx_error_detail());
        free(op->buf);
        free(op);
        return;
    }
    opp.field_mask = RDMX_OP_PARAM_FIELD_CB | RDMX_OP_PARAM_FIELD_MR;
    opp.cb = bulk_done;
    opp.arg = op;
    opp.mr = op->mr;
    st = push ? rdmx_put_nb(rdmx_rpc_req_ep(req), rmem, 0, op->buf, op->len,
                            &opp)
              : rdmx_get_nb(rdmx_rpc_req_ep(req), rmem, 0, op->buf, op->len,
                            &opp);
    if (st == RDMX_OK)
        bulk_done(RDMX_OK, op->len, op);
    else if (st != RDMX_INPROGRESS)
        bulk_done(st, 0, op);
}

int trs_main(int argc, char **argv)
{
    rdmx_rpc_server_params_t sp = {0};
    rdmx_rpc_server_t *srv;
    const char *secret = NULL;
    int i;

    sp.field_mask = RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS |
                    RDMX_RPC_SERVER_PARAM_FIELD_WORKERS;
    sp.address = "127.0.0.1:0";
    sp.workers = 2;
    for (i = 0; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--address") == 0) {
            sp.address = argv[i + 1];
        } else if (strcmp(argv[i], "--workers") == 0) {
            sp.workers = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--credits") == 0) {
            sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_CREDITS;
            sp.credits = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--max-message") == 0) {
            sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_MAX_MESSAGE;
            sp.max_message = strtoull(argv[i + 1], NULL, 0);
        } else if (strcmp(argv[i], "--max-connections") == 0) {
            sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_MAX_CONNECTIONS;
            sp.max_connections = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--secret") == 0) {
            secret = argv[i + 1];
        } else if (strcmp(argv[i], "--poll") == 0) {
            sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_POLL;
            sp.poll = (rdmx_rpc_poll_t)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--rings") == 0) {
            sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_RINGS;
            sp.rings = (unsigned)atoi(argv[i + 1]);
        } else {
            fprintf(stderr, "rpc test server: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (secret != NULL) {
        sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_AUTH_SECRET;
        sp.auth_secret = secret;
        sp.auth_secret_len = strlen(secret);
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    trs_ctx = th_context();
    CHECK_OK(rdmx_rpc_server_create(trs_ctx, &sp, &srv));
    CHECK_OK(rdmx_rpc_server_register(srv, "echo", h_echo, NULL,
                                      RDMX_RPC_IDEMPOTENT));
    CHECK_OK(rdmx_rpc_server_register(srv, "echo_once", h_echo, NULL, 0));
    CHECK_OK(rdmx_rpc_server_register(srv, "fail", h_fail, NULL, 0));
    CHECK_OK(rdmx_rpc_server_register(srv, "spin", h_spin, NULL, 0));
    CHECK_OK(
        rdmx_rpc_server_register(srv, "echo_later", h_echo_later, NULL, 0));
    CHECK_OK(rdmx_rpc_server_register(srv, "release", h_release, NULL, 0));
    CHECK_OK(rdmx_rpc_server_register(srv, "worker", h_worker, NULL,
                                      RDMX_RPC_IDEMPOTENT));
    CHECK_OK(rdmx_rpc_server_register(srv, "oneway", h_oneway, NULL,
                                      RDMX_RPC_ONEWAY));
    CHECK_OK(rdmx_rpc_server_register(srv, "count", h_count, NULL,
                                      RDMX_RPC_IDEMPOTENT));
    CHECK_OK(rdmx_rpc_server_register(srv, "bulk_pull", h_bulk, NULL, 0));
    CHECK_OK(rdmx_rpc_server_register(srv, "bulk_push", h_bulk, (void *)1, 0));
    CHECK_OK(rdmx_rpc_server_start(srv));
    th_announce_port(rdmx_rpc_server_port(srv));
    while (!trs_stop)
        usleep(10000);
    rdmx_rpc_server_destroy(srv);
    rdmx_context_destroy(trs_ctx);
    return 0;
}
