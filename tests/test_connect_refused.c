/*
 * connect_refused: connecting to nothing fails fast and cleanly.
 *
 * - rdmx_connect to a closed port on 127.0.0.1 fails with
 *   RDMX_ERR_CONN_REFUSED (or RDMX_ERR_UNREACHABLE) in under 1 s, several
 *   times in a row.
 * - rdmx_connect_nb to it returns at once with the endpoint written, and
 *   its callback runs exactly once, with the error, in under 1 s; the
 *   endpoint can then be closed.
 * - A "blackhole" on loopback: a plain TCP socket that listens but never
 *   accepts or answers. The kernel completes the TCP handshake, the rdmx
 *   handshake never happens, so rdmx_connect(timeout 300 ms) and
 *   rdmx_connect_nb(timeout 300 ms) fail with RDMX_ERR_TIMEOUT after about
 *   the timeout, not much earlier and not much later.
 * - A malformed address fails with RDMX_ERR_INVALID.
 * - After all that the worker connects to a real server and exchanges a
 *   message; closing that endpoint with a receive posted completes the
 *   receive with RDMX_ERR_CANCELED, and the server sees an orderly close.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int connect_calls;
static rdmx_status_t connect_status = RDMX_INPROGRESS;
static rdmx_ep_t *connect_ep;
static double t_connect_cb;

static void connect_cb(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    CHECK(arg == &connect_calls);
    connect_calls++;
    connect_status = status;
    connect_ep = ep;
    t_connect_cb = th_now_ms();
}

/* Endpoint params of a connect limited to @p timeout_ms; with @p cb (for
 * rdmx_connect_nb), that connect callback with @p arg. */
static rdmx_ep_params_t conn_params(int timeout_ms, rdmx_connect_cb_t cb,
                                    void *arg)
{
    rdmx_ep_params_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT;
    p.connect_timeout_ms = timeout_ms;
    if (cb != NULL) {
        p.field_mask |=
            RDMX_EP_PARAM_FIELD_CONNECT_CB | RDMX_EP_PARAM_FIELD_USER_DATA;
        p.connect_cb = cb;
        p.user_data = arg;
    }
    return p;
}

/* A TCP socket bound to a free loopback port; listening if @p listening. */
static int loopback_socket(int listening, uint16_t *port)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    CHECK(fd >= 0);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&sin, &len) == 0);
    *port = ntohs(sin.sin_port);
    if (listening)
        CHECK(listen(fd, 16) == 0);
    return fd;
}

static void refused_blocking(rdmx_worker_t *worker, const char *addr)
{
    rdmx_ep_params_t p = conn_params(5000, NULL, NULL);
    rdmx_ep_t *ep = NULL;
    double t0 = th_now_ms(), dt;
    rdmx_status_t st = rdmx_connect(worker, addr, &p, &ep);

    dt = th_now_ms() - t0;
    CHECKF(st == RDMX_ERR_CONN_REFUSED || st == RDMX_ERR_UNREACHABLE,
           "rdmx_connect to closed %s returned %s (%s)", addr,
           rdmx_status_name(st), rdmx_error_detail());
    CHECKF(dt < 1000.0, "refused connect took %.0f ms", dt);
    th_log("rdmx_connect refused: %s in %.1f ms", rdmx_status_name(st), dt);
}

static void refused_nb(rdmx_worker_t *worker, const char *addr)
{
    rdmx_ep_params_t p = conn_params(5000, connect_cb, &connect_calls);
    rdmx_ep_t *ep = NULL;
    double t0 = th_now_ms();
    rdmx_status_t st;

    connect_calls = 0;
    connect_status = RDMX_INPROGRESS;
    st = rdmx_connect_nb(worker, addr, &p, &ep);
    CHECKF(st == RDMX_OK || st == RDMX_INPROGRESS,
           "rdmx_connect_nb returned %s", rdmx_status_name(st));
    CHECK(ep != NULL);
    while (connect_calls == 0) {
        CHECKF(th_now_ms() - t0 < 5000.0, "connect callback never ran");
        rdmx_worker_wait(worker, 10);
    }
    th_progress_for(worker, 20);
    CHECK(connect_calls == 1);
    CHECK(connect_ep == ep);
    CHECKF(connect_status == RDMX_ERR_CONN_REFUSED ||
               connect_status == RDMX_ERR_UNREACHABLE,
           "connect callback status %s", rdmx_status_name(connect_status));
    CHECKF(t_connect_cb - t0 < 1000.0, "refused connect_nb took %.0f ms",
           t_connect_cb - t0);
    CHECK(rdmx_ep_status(ep) < 0);
    th_log("rdmx_connect_nb refused: %s in %.1f ms",
           rdmx_status_name(connect_status), t_connect_cb - t0);
    rdmx_ep_close(ep);
}

static void blackhole(rdmx_worker_t *worker)
{
    uint16_t port;
    int fd = loopback_socket(1, &port);
    char addr[64];
    rdmx_ep_params_t p = conn_params(300, NULL, NULL);
    rdmx_ep_t *ep = NULL;
    double t0, dt;
    rdmx_status_t st;

    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);

    t0 = th_now_ms();
    st = rdmx_connect(worker, addr, &p, &ep);
    dt = th_now_ms() - t0;
    CHECKF(st == RDMX_ERR_TIMEOUT,
           "rdmx_connect to a silent listener returned %s (%s)",
           rdmx_status_name(st), rdmx_error_detail());
    CHECKF(dt > 250.0 && dt < 1500.0 * TH_SLOW,
           "300 ms connect timeout took %.0f ms", dt);
    th_log("blackhole rdmx_connect: %s after %.0f ms", rdmx_status_name(st),
           dt);

    connect_calls = 0;
    p = conn_params(300, connect_cb, &connect_calls);
    t0 = th_now_ms();
    st = rdmx_connect_nb(worker, addr, &p, &ep);
    CHECK(st == RDMX_OK || st == RDMX_INPROGRESS);
    while (connect_calls == 0) {
        CHECKF(th_now_ms() - t0 < 5000.0 * TH_SLOW,
               "connect_nb with a 300 ms timeout: no callback after 5 s");
        rdmx_worker_wait(worker, 10);
    }
    dt = t_connect_cb - t0;
    CHECKF(connect_status == RDMX_ERR_TIMEOUT,
           "connect_nb to a silent listener: %s",
           rdmx_status_name(connect_status));
    CHECKF(dt > 250.0 && dt < 1500.0 * TH_SLOW,
           "300 ms connect_nb timeout took %.0f ms", dt);
    rdmx_ep_close(ep);
    close(fd);
}

int main(int argc, char **argv)
{
    th_proc_t server;
    rdmx_context_t *ctx;
    rdmx_worker_t *worker;
    rdmx_ep_params_t p = conn_params(1000, NULL, NULL);
    rdmx_ep_t *ep = NULL;
    ts_reply_t rep;
    uint16_t port;
    char addr[64];
    int fd, i;

    if (argc > 1 && strcmp(argv[1], "--server") == 0)
        return ts_server_main(argc, argv);

    th_init("connect_refused", 50);
    th_spawn_self(&server, "--server", 30000, NULL);
    ctx = th_context();
    worker = th_worker(ctx, 0);

    /* A port that was free a moment ago and has no listener. */
    fd = loopback_socket(0, &port);
    close(fd);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);

    for (i = 0; i < 3; i++)
        refused_blocking(worker, addr);
    for (i = 0; i < 3; i++)
        refused_nb(worker, addr);

    CHECK_ST(rdmx_connect(worker, "127.0.0.1", &p, &ep), RDMX_ERR_INVALID);
    CHECK_ST(rdmx_connect(worker, "127.0.0.1:99999", &p, &ep),
             RDMX_ERR_INVALID);

    blackhole(worker);

    /* The worker is fine. */
    ep = th_connect(worker, &server, NULL);
    ts_call(ep, TS_STATS, 0, 0, 0, 0, &rep);
    CHECK(rep.status == RDMX_OK);
    ts_call(ep, TS_QUIT, 0, 0, 0, 0, &rep);
    CHECK(rep.status == RDMX_OK);
    /* Closing with a receive posted: it completes with RDMX_ERR_CANCELED
     * (from a later progress call), exactly once. */
    {
        th_req_t req;
        char buf[16];
        rdmx_op_params_t op = {
            .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = th_req_cb, .arg = &req};

        th_req_init(&req);
        CHECK_ST(rdmx_recv_nb(ep, buf, sizeof(buf), &op), RDMX_INPROGRESS);
        rdmx_ep_close(ep);
        th_req_wait(worker, &req, 1, 5000);
        CHECK_ST(req.status, RDMX_ERR_CANCELED);
    }
    th_check_exit_ok("server", th_wait_exit(&server, 20000));

    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    th_log("ok");
    return 0;
}
