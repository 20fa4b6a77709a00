/*
 * rdmx-perf: the RPC server — its handlers (perf.echo, perf.info, perf.pull,
 * perf.push, perf.lambda_nocache, and the library's lambda.* handlers),
 * started on a port of its own for each RPC test (the server half of
 * rpc_* and lambda_lat), or alone with --rpc-only.
 */
#include "perf.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>

/* The name of an rdmx_rpc_poll_t, as --poll takes it. */
const char *perf_poll_name(int poll)
{
    switch (poll) {
    case RDMX_RPC_POLL_ADAPTIVE:
        return "adaptive";
    case RDMX_RPC_POLL_BUSY:
        return "busy";
    case RDMX_RPC_POLL_SLEEP:
        return "sleep";
    default:
        return "?";
    }
}

/* A bulk transfer a handler started; kept on its worker's free list. */
typedef struct bulk_op {
    struct bulk_op *next;
    rdmx_rpc_req_t *req;
    struct rpc_srv *srv;
    unsigned wi;
    size_t len;
} bulk_op_t;

/* The handlers' state. Each server worker has its own bulk buffer and free
 * list, touched only by that worker's thread (its handlers run there). */
typedef struct rpc_srv {
    rdmx_context_t *ctx;
    rdmx_rpc_server_t *srv;
    unsigned workers;
    rdmx_rpc_poll_t poll;
    char info[128];                       /* perf.info's answer */
    rdmx_lambda_engine_t *lambda;         /* lambda.eval/call/native */
    rdmx_lambda_engine_t *lambda_nocache; /* perf.lambda_nocache */
    struct {
        rdmx_mr_t *mr;
        size_t len;
        bulk_op_t *free_ops;
    } w[RPC_MAX_WORKERS];
} rpc_srv_t;

/* perf.echo: answer with the request. */
static void h_echo(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const void *data = rdmx_rpc_req_data(req, &len);

    (void)arg;
    rdmx_rpc_respond(req, data, len);
}

/* perf.info: "transport=T workers=N poll=P" */
static void h_info(rdmx_rpc_req_t *req, void *arg)
{
    rpc_srv_t *s = arg;

    rdmx_rpc_respond(req, s->info, strlen(s->info));
}

/* Worker @p wi's bulk buffer, at least @p len bytes. The test's size is
 * allocated before the server starts; this only grows it for a larger
 * request (--rpc-only servers). */
static rdmx_mr_t *bulk_buffer(rpc_srv_t *s, unsigned wi, size_t len)
{
    size_t want = len < 16 ? 16 : len;

    if (s->w[wi].len < want) {
        if (s->w[wi].mr) {
            rdmx_mem_deregister(s->w[wi].mr);
        }
        s->w[wi].mr = NULL;
        s->w[wi].len = 0;
        if (rdmx_mem_alloc(s->ctx, want, RDMX_ACCESS_ALL, &s->w[wi].mr) !=
            RDMX_OK) {
            s->w[wi].mr = NULL;
            return NULL;
        }
        s->w[wi].len = want;
    }
    return s->w[wi].mr;
}

static bulk_op_t *bulk_op_get(rpc_srv_t *s, rdmx_rpc_req_t *req, size_t len)
{
    unsigned wi = rdmx_rpc_req_worker(req);
    bulk_op_t *op;

    if (wi >= RPC_MAX_WORKERS || bulk_buffer(s, wi, len) == NULL) {
        return NULL;
    }
    op = s->w[wi].free_ops;
    if (op != NULL) {
        s->w[wi].free_ops = op->next;
    } else if ((op = malloc(sizeof(*op))) == NULL) {
        return NULL;
    }
    op->req = req;
    op->srv = s;
    op->wi = wi;
    op->len = len;
    return op;
}

static void bulk_op_put(bulk_op_t *op)
{
    rpc_srv_t *s = op->srv;

    op->next = s->w[op->wi].free_ops;
    s->w[op->wi].free_ops = op;
}

static unsigned char *bulk_addr(const bulk_op_t *op)
{
    return rdmx_mr_addr(op->srv->w[op->wi].mr);
}

/* The request's descriptor 0, or an error answer (then NULL). */
static rdmx_rmem_t *req_bulk0(rdmx_rpc_req_t *req)
{
    rdmx_rmem_t *rm;
    rdmx_status_t st;

    if (rdmx_rpc_req_bulk_count(req) != 1) {
        rdmx_rpc_respond_error(req, RDMX_ERR_INVALID,
                               "expected 1 bulk descriptor, got %u",
                               rdmx_rpc_req_bulk_count(req));
        return NULL;
    }
    st = rdmx_rpc_req_bulk(req, 0, &rm);
    if (st != RDMX_OK) {
        rdmx_rpc_respond_error(req, st, "bulk descriptor: %s",
                               rdmx_error_detail());
        return NULL;
    }
    return rm;
}

/* pull done: answer with the first and last 8 bytes that arrived (the
 * client checks them when it has one call in flight). */
static void pull_done(rdmx_status_t status, size_t length, void *arg)
{
    bulk_op_t *op = arg;
    const unsigned char *b = bulk_addr(op);
    unsigned char out[16];

    (void)length;
    if (status != RDMX_OK) {
        rdmx_rpc_respond_error(op->req, status, "bulk get: %s",
                               rdmx_strerror(status));
    } else {
        memcpy(out, b, 8);
        memcpy(out + 8, b + op->len - 8, 8);
        rdmx_rpc_respond(op->req, out, op->len >= 8 ? sizeof(out) : 0);
    }
    bulk_op_put(op);
}

/* perf.pull: get the caller's descriptor 0 (READ) into this worker's
 * buffer, then answer. */
static void h_pull(rdmx_rpc_req_t *req, void *arg)
{
    rpc_srv_t *s = arg;
    rdmx_rmem_t *rm = req_bulk0(req);
    bulk_op_t *op;
    rdmx_status_t st;
    size_t len;

    if (rm == NULL) {
        return;
    }
    len = (size_t)rdmx_rmem_length(rm);
    if ((op = bulk_op_get(s, req, len)) == NULL) {
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY,
                               "no buffer of %zu bytes", len);
        return;
    }
    st = rdmx_get_nb(rdmx_rpc_req_ep(req), rm, 0, bulk_addr(op), len,
                     &PERF_OP_CB(pull_done, op, s->w[op->wi].mr));
    if (st == RDMX_OK) {
        pull_done(RDMX_OK, len, op);
    } else if (st != RDMX_INPROGRESS) {
        rdmx_rpc_respond_error(req, st, "bulk get: %s", rdmx_error_detail());
        bulk_op_put(op);
    }
}

static void push_flushed(rdmx_status_t status, size_t length, void *arg)
{
    bulk_op_t *op = arg;

    (void)length;
    if (status != RDMX_OK) {
        rdmx_rpc_respond_error(op->req, status, "flush after the bulk put: %s",
                               rdmx_strerror(status));
    } else {
        rdmx_rpc_respond(op->req, NULL, 0);
    }
    bulk_op_put(op);
}

/* The put completed locally: flush, so that the data is at the caller
 * before the answer (UCX orders neither put and message nor lanes). */
static void push_put_done(rdmx_status_t status, size_t length, void *arg)
{
    bulk_op_t *op = arg;
    rdmx_status_t st;

    (void)length;
    if (status != RDMX_OK) {
        rdmx_rpc_respond_error(op->req, status, "bulk put: %s",
                               rdmx_strerror(status));
        bulk_op_put(op);
        return;
    }
    st = rdmx_ep_flush_nb(rdmx_rpc_req_ep(op->req),
                          &PERF_OP_CB(push_flushed, op, NULL));
    if (st == RDMX_OK) {
        push_flushed(RDMX_OK, 0, op);
    } else if (st != RDMX_INPROGRESS) {
        push_flushed(st, 0, op);
    }
}

/* perf.push: payload u64 token; write the token into the first and last 8
 * bytes of this worker's buffer, put it into the caller's descriptor 0
 * (WRITE), flush, answer. */
static void h_push(rdmx_rpc_req_t *req, void *arg)
{
    rpc_srv_t *s = arg;
    rdmx_rmem_t *rm = req_bulk0(req);
    const void *token;
    size_t tlen, len;
    bulk_op_t *op;
    rdmx_status_t st;

    if (rm == NULL) {
        return;
    }
    token = rdmx_rpc_req_data(req, &tlen);
    len = (size_t)rdmx_rmem_length(rm);
    if ((op = bulk_op_get(s, req, len)) == NULL) {
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY,
                               "no buffer of %zu bytes", len);
        return;
    }
    if (tlen == 8 && len >= 8) {
        memcpy(bulk_addr(op), token, 8);
        memcpy(bulk_addr(op) + len - 8, token, 8);
    }
    st = rdmx_put_nb(rdmx_rpc_req_ep(req), rm, 0, bulk_addr(op), len,
                     &PERF_OP_CB(push_put_done, op, s->w[op->wi].mr));
    if (st == RDMX_OK) {
        push_put_done(RDMX_OK, len, op);
    } else if (st != RDMX_INPROGRESS) {
        rdmx_rpc_respond_error(req, st, "bulk put: %s", rdmx_error_detail());
        bulk_op_put(op);
    }
}

/* Start an RPC server on @p address with the perf handlers. @p bulk > 0
 * allocates each worker's bulk buffer up front. */
static int rpc_srv_start(rpc_srv_t *s, rdmx_context_t *ctx, const char *address,
                         unsigned workers, rdmx_rpc_poll_t poll, size_t bulk,
                         size_t max_message, unsigned credits)
{
    rdmx_rpc_server_params_t sp = {
        .field_mask =
            RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS | RDMX_RPC_SERVER_PARAM_FIELD_WORKERS |
            RDMX_RPC_SERVER_PARAM_FIELD_POLL | RDMX_RPC_SERVER_PARAM_FIELD_MAX_MESSAGE |
            RDMX_RPC_SERVER_PARAM_FIELD_CREDITS,
        .address = address,
        .workers = workers,
        .poll = poll,
        .max_message = max_message,
        .credits = credits,
    };
    rdmx_status_t st;

    memset(s, 0, sizeof(*s));
    s->ctx = ctx;
    s->workers = workers;
    s->poll = poll;
    snprintf(s->info, sizeof(s->info), "transport=%s workers=%u poll=%s",
             rdmx_transport_name(rdmx_context_transport(ctx)), workers,
             perf_poll_name(poll));
    if (workers == 0 || workers > RPC_MAX_WORKERS) {
        return perf_fail_msg("bad number of server workers");
    }
    for (unsigned i = 0; bulk > 0 && i < workers; i++) {
        if (bulk_buffer(s, i, bulk) == NULL) {
            return perf_fail("allocate the RPC server's bulk buffers",
                             RDMX_ERR_NO_MEMORY);
        }
    }
    st = rdmx_lambda_engine_create(NULL, &s->lambda);
    if (st == RDMX_OK) {
        rdmx_lambda_params_t lp = {
            .field_mask = RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES,
            .cache_entries = 0,
        };

        st = rdmx_lambda_engine_create(&lp, &s->lambda_nocache);
    }
    if (st != RDMX_OK) {
        return perf_fail("create the lambda engines", st);
    }
    st = rdmx_rpc_server_create(ctx, &sp, &s->srv);
    if (st != RDMX_OK) {
        return perf_fail("create the RPC server", st);
    }
    if ((st = rdmx_rpc_server_register(s->srv, RPC_ECHO, h_echo, s,
                                       RDMX_RPC_IDEMPOTENT)) != RDMX_OK ||
        (st = rdmx_rpc_server_register(s->srv, RPC_INFO, h_info, s,
                                       RDMX_RPC_IDEMPOTENT)) != RDMX_OK ||
        (st = rdmx_rpc_server_register(s->srv, RPC_PULL, h_pull, s, 0)) !=
            RDMX_OK ||
        (st = rdmx_rpc_server_register(s->srv, RPC_PUSH, h_push, s, 0)) !=
            RDMX_OK ||
        (st = rdmx_rpc_server_register(s->srv, RPC_LAMBDA_NOCACHE,
                                       perf_lambda_nocache, s->lambda_nocache,
                                       0)) != RDMX_OK ||
        (st = rdmx_lambda_register_handlers(s->srv, s->lambda, NULL)) !=
            RDMX_OK) {
        return perf_fail("register the RPC handlers", st);
    }
    st = rdmx_rpc_server_start(s->srv);
    if (st != RDMX_OK) {
        char what[300];

        snprintf(what, sizeof(what), "start the RPC server on %s", address);
        return perf_fail(what, st);
    }
    return 0;
}

static void rpc_srv_stop(rpc_srv_t *s, rdmx_rpc_server_stats_t *stats)
{
    if (s->srv != NULL) {
        if (stats != NULL) {
            rdmx_rpc_server_stats(s->srv, stats);
        }
        rdmx_rpc_server_destroy(s->srv);
        s->srv = NULL;
    }
    /* after the server: its handlers use them until it is gone */
    if (s->lambda != NULL) {
        rdmx_lambda_engine_destroy(s->lambda);
        s->lambda = NULL;
    }
    if (s->lambda_nocache != NULL) {
        rdmx_lambda_engine_destroy(s->lambda_nocache);
        s->lambda_nocache = NULL;
    }
    for (unsigned i = 0; i < RPC_MAX_WORKERS; i++) {
        while (s->w[i].free_ops != NULL) {
            bulk_op_t *op = s->w[i].free_ops;
            s->w[i].free_ops = op->next;
            free(op);
        }
        if (s->w[i].mr != NULL) {
            rdmx_mem_deregister(s->w[i].mr);
            s->w[i].mr = NULL;
            s->w[i].len = 0;
        }
    }
}

/* "host:port", with brackets for an IPv6 host. */
void perf_format_address(char *out, size_t cap, const char *host, unsigned port)
{
    bool v6 = strchr(host, ':') != NULL;

    snprintf(out, cap, "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* The server half of an RPC test: run an RPC server for its duration. */
int perf_server_rpc_test(perf_t *p, const ctrl_t *c)
{
    const opts_t *o = p->opts;
    ctrl_t reply = {.op = OP_REPLY, .test = c->test}, done;
    ctrl_t ack = {.op = OP_DONE_ACK, .test = c->test};
    rdmx_rpc_server_stats_t stats = {0};
    char address[300];
    rpc_srv_t *s;
    unsigned workers;
    int poll, rc;

    workers = c->workers          ? c->workers
              : o->server_workers ? o->server_workers
                                  : 1;
    poll = c->poll != UINT32_MAX ? (int)c->poll
           : o->poll >= 0        ? o->poll
                                 : RDMX_RPC_POLL_BUSY;
    reply.transport = (uint32_t)rdmx_context_transport(p->ctx);
    reply.workers = workers;
    reply.poll = (uint32_t)poll;
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        reply.status = RDMX_ERR_NO_MEMORY;
        return perf_ctrl_send(p, &reply, NULL, "reply");
    }
    perf_format_address(address, sizeof(address), p->host, 0);
    if (poll < 0 || poll > RDMX_RPC_POLL_SLEEP ||
        rpc_srv_start(
            s, p->ctx, address, workers, (rdmx_rpc_poll_t)poll,
            c->test == TEST_RPC_BULK || c->test == TEST_RPC_BULK_PUSH ? c->size
                                                                      : 0,
            c->size + 4096 > (64u << 20) ? c->size + 4096 : (64u << 20),
            /* credits are per connection (client thread) */
            c->window > 240 ? (unsigned)c->window + 16 : 256) < 0) {
        rpc_srv_stop(s, NULL);
        free(s);
        reply.status = RDMX_ERR_INVALID;
        return perf_ctrl_send(p, &reply, NULL, "reply");
    }
    reply.rpc_port = rdmx_rpc_server_port(s->srv);
    rc = perf_ctrl_post_recv(p);
    if (rc == 0) {
        rc = perf_ctrl_send(p, &reply, NULL, "reply");
    }
    if (rc == 0) {
        rc = perf_ctrl_wait_idle(p, &done, "wait for the client's done");
    }
    if (rc == 0 && done.op != OP_DONE) {
        rc = perf_fail_msg("protocol error: expected DONE");
    }
    rpc_srv_stop(s, &stats);
    free(s);
    if (rc == 0) {
        ack.stat = stats.responses;
        ack.stat2 = stats.errors;
        rc = perf_ctrl_send(p, &ack, NULL, "done ack");
    }
    return rc;
}

static volatile sig_atomic_t g_stop;

static void on_stop(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* --rpc-only: an RPC server with the perf handlers until SIGINT/SIGTERM
 * (with --once: until the last client has left). */
int perf_run_rpc_server(perf_t *p, const opts_t *o, const char *host)
{
    rpc_srv_t *s = calloc(1, sizeof(*s));
    rdmx_rpc_server_stats_t st = {0};
    struct sigaction sa = {0};
    unsigned workers = o->server_workers ? o->server_workers : 1;
    int poll = o->poll >= 0 ? o->poll : RDMX_RPC_POLL_BUSY;
    uint64_t idle_since = 0;
    char address[300];
    rdmx_metrics_http_t *metrics = NULL;

    if (s == NULL) {
        return perf_fail_msg("out of memory");
    }
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (rpc_srv_start(s, p->ctx, o->listen, workers, (rdmx_rpc_poll_t)poll, 0,
                      1u << 30, 1024) < 0) {
        rpc_srv_stop(s, NULL);
        free(s);
        return -1;
    }
    perf_format_address(address, sizeof(address), host,
                        rdmx_rpc_server_port(s->srv));
    printf("listening on %s\n", address);
    printf("# rpc server: %u worker(s), poll %s, transport %s\n", workers,
           perf_poll_name(poll), rdmx_transport_name(o->transport));
    if (o->metrics_listen != NULL) {
        rdmx_metrics_http_params_t mp = {
            .field_mask = RDMX_METRICS_HTTP_PARAM_FIELD_ADDRESS |
                          RDMX_METRICS_HTTP_PARAM_FIELD_RPC_SERVER,
            .address = o->metrics_listen,
            .rpc_server = s->srv};
        rdmx_status_t mst = rdmx_metrics_http_create(&mp, &metrics);
        char mhost[256];
        uint16_t mport;

        if (mst != RDMX_OK) {
            rpc_srv_stop(s, NULL);
            free(s);
            return perf_fail("serve --metrics-listen", mst);
        }
        rdmx_addr_parse(o->metrics_listen, mhost, sizeof(mhost), &mport);
        printf("# metrics on http://%s:%u/metrics\n", mhost,
               rdmx_metrics_http_port(metrics));
    }
    fflush(stdout);
    while (!g_stop) {
        struct timespec ts = {0, 50000000};

        nanosleep(&ts, NULL);
        if (o->once) {
            /* a client makes new channels for every test: leave after 2 s
             * without any */
            rdmx_rpc_server_stats(s->srv, &st);
            if (st.connections_total == 0 || st.connections > 0) {
                idle_since = 0;
            } else if (idle_since == 0) {
                idle_since = now_ns();
            } else if (now_ns() - idle_since > 2000000000ull) {
                break;
            }
        }
    }
    rdmx_metrics_http_destroy(metrics);
    rpc_srv_stop(s, &st);
    free(s);
    fprintf(stderr,
            "rdmx-perf: rpc server: %" PRIu64 " connections, %" PRIu64
            " requests, %" PRIu64 " responses, %" PRIu64 " errors\n",
            st.connections_total, st.requests, st.responses, st.errors);
    return 0;
}
