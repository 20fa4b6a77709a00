/*
 * The RPC server and client of the metrics_http test (metrics_http.sh),
 * through the public API only:
 *
 *   metrics_peer server ADDR METRICS_ADDR
 *       an RPC server with "test.echo" (answers its payload) and
 *       "test.fail" (answers RDMX_ERR_INVALID), and the metrics endpoint
 *       (rdmx_metrics_http_create) with one metric of its own,
 *       test_collects_total; prints "listening on HOST:PORT" and
 *       "metrics on http://HOST:PORT/metrics", serves until SIGTERM;
 *   metrics_peer client ADDR N
 *       N calls of test.echo and one of test.fail; exits 0 if every echo
 *       came back intact and test.fail failed as it should.
 */
#define _GNU_SOURCE
#include <rdmx/rdmx.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void h_echo(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const void *data = rdmx_rpc_req_data(req, &len);

    rdmx_rpc_respond(req, data, len);
}

static void h_fail(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_rpc_respond_error(req, RDMX_ERR_INVALID, "test.fail always fails");
}

/* The program's own metric, counting its collect calls. */
static void collect(rdmx_metrics_page_t *page, void *arg)
{
    unsigned long *n = arg;

    rdmx_metrics_page_add(page, "test_collects_total", RDMX_METRIC_COUNTER,
                          "Pages the test's collect callback added to.", NULL,
                          ++*n);
}

static int fail(const char *what, rdmx_status_t st)
{
    fprintf(stderr, "metrics_peer: %s: %s (%s)\n", what, rdmx_strerror(st),
            rdmx_error_detail());
    return 1;
}

static int server(const char *addr, const char *maddr)
{
    rdmx_context_params_t cp = {.field_mask =
                                    RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES,
                                .net_devices = "lo"};
    rdmx_rpc_server_params_t sp = {.field_mask =
                                       RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS |
                                       RDMX_RPC_SERVER_PARAM_FIELD_WORKERS,
                                   .address = addr,
                                   .workers = 2};
    rdmx_metrics_http_params_t mp = {
        .field_mask = RDMX_METRICS_HTTP_PARAM_FIELD_ADDRESS |
                      RDMX_METRICS_HTTP_PARAM_FIELD_RPC_SERVER |
                      RDMX_METRICS_HTTP_PARAM_FIELD_COLLECT_CB,
        .address = maddr};
    unsigned long collects = 0;
    rdmx_context_t *ctx;
    rdmx_rpc_server_t *srv;
    rdmx_metrics_http_t *m;
    rdmx_status_t st;
    sigset_t stop;
    int sig;

    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    if ((st = rdmx_context_create(&cp, &ctx)) != RDMX_OK)
        return fail("context", st);
    if ((st = rdmx_rpc_server_create(ctx, &sp, &srv)) != RDMX_OK ||
        (st = rdmx_rpc_server_register(srv, "test.echo", h_echo, NULL,
                                       RDMX_RPC_IDEMPOTENT)) != RDMX_OK ||
        (st = rdmx_rpc_server_register(srv, "test.fail", h_fail, NULL, 0)) !=
            RDMX_OK ||
        (st = rdmx_rpc_server_start(srv)) != RDMX_OK)
        return fail("rpc server", st);
    mp.rpc_server = srv;
    mp.collect_cb = collect;
    mp.collect_arg = &collects;
    if ((st = rdmx_metrics_http_create(&mp, &m)) != RDMX_OK)
        return fail("metrics endpoint", st);
    printf("listening on 127.0.0.1:%u\n", rdmx_rpc_server_port(srv));
    printf("metrics on http://127.0.0.1:%u/metrics\n",
           rdmx_metrics_http_port(m));
    fflush(stdout);
    while (sigwait(&stop, &sig) != 0)
        ;
    rdmx_metrics_http_destroy(m);
    rdmx_rpc_server_destroy(srv);
    rdmx_context_destroy(ctx);
    return 0;
}

static int client(const char *addr, int n)
{
    rdmx_context_params_t cp = {.field_mask =
                                    RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES,
                                .net_devices = "lo"};
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    rdmx_channel_t *ch;
    rdmx_status_t st;
    char msg[64], resp[64];
    size_t len;

    if ((st = rdmx_context_create(&cp, &ctx)) != RDMX_OK ||
        (st = rdmx_worker_create(ctx, NULL, &w)) != RDMX_OK ||
        (st = rdmx_channel_create(w, addr, NULL, &ch)) != RDMX_OK)
        return fail("connect", st);
    for (int i = 0; i < n; i++) {
        int l = snprintf(msg, sizeof(msg), "echo %d", i);
        st = rdmx_call(ch, "test.echo", msg, (size_t)l, resp, sizeof(resp),
                       NULL, &len);
        if (st != RDMX_OK)
            return fail("test.echo", st);
        if (len != (size_t)l || memcmp(msg, resp, len) != 0) {
            fprintf(stderr, "metrics_peer: test.echo answered wrongly\n");
            return 1;
        }
    }
    st = rdmx_call(ch, "test.fail", "x", 1, resp, sizeof(resp), NULL, &len);
    if (st != RDMX_ERR_INVALID)
        return fail("test.fail did not fail with RDMX_ERR_INVALID", st);
    rdmx_channel_destroy(ch);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "server") == 0)
        return server(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "client") == 0)
        return client(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: metrics_peer server ADDR METRICS_ADDR | "
                    "client ADDR N\n");
    return 2;
}
