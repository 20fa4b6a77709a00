/*
 * connect_cycles: connections come and go without leaking, and orderly
 * closes are reported as such.
 *
 * One server process (this binary with --cycles-server) accepts any number
 * of connections, echoes every message and answers "STATS" with its
 * counters. The client runs 200 cycles of connect (handshake) / small
 * message round trip / close. After a warm-up of 20 cycles and again at the
 * end, it waits until the server has processed every close and then samples
 * the server's open file descriptors (/proc/PID/fd) and VmRSS
 * (/proc/PID/status), and its own fds. Proven: fds are back to the same
 * count (+-2) on both sides; the server's RSS grew by less than 4 MiB (not
 * checked under ASan, whose quarantine holds freed memory); the server's
 * endpoint error callback saw RDMX_ERR_CONN_CLOSED for every one of the
 * client's orderly closes and no other error; the server's worker counted
 * every handshake in eps_opened.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CYCLES  200
#define WARMUP  20
#define MAX_EPS 64
#define MSG_CAP 256

typedef struct {
    uint64_t closed_ok, closed_err, open_eps, accepted, eps_opened;
} cyc_stats_t;

/* ------------------------------------------------------------------------ */
/* Server                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    rdmx_ep_t *ep;
    th_req_t req;
    int posted;
    int failed;
    char buf[MSG_CAP];
} slot_t;

static slot_t slots[MAX_EPS];
static cyc_stats_t sstats;
static rdmx_status_t last_err = RDMX_OK;

static slot_t *slot_of(rdmx_ep_t *ep)
{
    int i;

    for (i = 0; i < MAX_EPS; i++)
        if (slots[i].ep == ep)
            return &slots[i];
    return NULL;
}

static void post_recv(slot_t *s)
{
    rdmx_op_params_t op = {
        .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = th_req_cb, .arg = &s->req};

    th_req_init(&s->req);
    s->posted = 1;
    th_req_start(&s->req, rdmx_recv_nb(s->ep, s->buf, sizeof(s->buf), &op), 0);
}

static void srv_accept(rdmx_ep_t *ep, void *arg)
{
    slot_t *s = slot_of(NULL);

    (void)arg;
    sstats.accepted++;
    if (s == NULL) {
        th_log("cycles server: too many connections, refusing one");
        rdmx_ep_close(ep);
        return;
    }
    memset(s, 0, sizeof(*s));
    s->ep = ep;
    sstats.open_eps++;
    post_recv(s);
}

static void srv_error(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    slot_t *s = slot_of(ep);

    (void)arg;
    CHECKF(s != NULL, "error callback for an unknown endpoint");
    CHECKF(!s->failed, "error callback ran twice for one endpoint");
    s->failed = 1;
    if (status == RDMX_ERR_CONN_CLOSED) {
        sstats.closed_ok++;
    } else {
        sstats.closed_err++;
        last_err = status;
        th_log("cycles server: connection ended with %s",
               rdmx_status_name(status));
    }
}

static int cycles_server(void)
{
    rdmx_context_t *ctx;
    rdmx_worker_t *worker;
    rdmx_listener_t *listener;
    rdmx_ep_params_t ep_p;
    int quit = 0, i;

    th_init("connect_cycles-server", 600);
    ctx = th_context();
    worker = th_worker(ctx, 0);
    memset(&ep_p, 0, sizeof(ep_p));
    ep_p.field_mask = RDMX_EP_PARAM_FIELD_ERROR_CB;
    ep_p.error_cb = srv_error;
    listener = th_listen(worker, srv_accept, &ep_p);
    th_announce_port(rdmx_listener_port(listener));

    while (!quit) {
        rdmx_worker_wait(worker, 100);
        for (i = 0; i < MAX_EPS; i++) {
            slot_t *s = &slots[i];

            if (s->ep == NULL)
                continue;
            if (s->posted && atomic_load(&s->req.done)) {
                s->posted = 0;
                if (s->req.status == RDMX_OK) {
                    size_t len = s->req.length;

                    if (len == 5 && memcmp(s->buf, "STATS", 5) == 0) {
                        rdmx_worker_stats_t ws;

                        rdmx_worker_stats(worker, &ws);
                        sstats.eps_opened = ws.eps_opened;
                        CHECK_OK(
                            rdmx_send(s->ep, &sstats, sizeof(sstats), NULL));
                    } else if (len == 4 && memcmp(s->buf, "QUIT", 4) == 0) {
                        CHECK_OK(rdmx_send(s->ep, "BYE", 3, NULL));
                        quit = 1;
                    } else {
                        CHECK_OK(rdmx_send(s->ep, s->buf, len, NULL));
                    }
                    if (!s->failed)
                        post_recv(s);
                } else if (!s->failed) {
                    th_log("cycles server: receive failed with %s",
                           rdmx_status_name(s->req.status));
                }
            }
            if (s->failed) {
                rdmx_ep_close(s->ep);
                s->ep = NULL;
                sstats.open_eps--;
            }
        }
    }
    /* Let the last client close, then clean up. */
    th_progress_for(worker, 100);
    for (i = 0; i < MAX_EPS; i++)
        if (slots[i].ep)
            rdmx_ep_close(slots[i].ep);
    rdmx_listener_destroy(listener);
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    if (sstats.closed_err) {
        th_log("FAIL: %llu connections ended with an error (last %s)",
               (unsigned long long)sstats.closed_err,
               rdmx_status_name(last_err));
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Client                                                                   */
/* ------------------------------------------------------------------------ */

static rdmx_worker_t *worker;
static th_proc_t server;

typedef struct {
    int srv_fds, cli_fds;
    long srv_rss_kib;
    cyc_stats_t st;
} sample_t;

static uint64_t closed; /* connections the client has closed */

/* Limit of the client's blocking receives. */
static const rdmx_op_params_t recv_limit = {
    .field_mask = RDMX_OP_PARAM_FIELD_TIMEOUT, .timeout_ms = 10000 * TH_SLOW};

static rdmx_ep_t *cconnect(void)
{
    rdmx_ep_params_t p = {.field_mask = RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT,
                          .connect_timeout_ms = 10000 * TH_SLOW};
    rdmx_ep_t *ep = NULL;

    CHECK_OK(rdmx_connect(worker, server.addr, &p, &ep));
    return ep;
}

static void one_cycle(int i)
{
    rdmx_ep_t *ep = cconnect();
    char msg[64], back[MSG_CAP];
    size_t len = 0;
    int n = snprintf(msg, sizeof(msg), "ping %d", i);

    CHECK_OK(rdmx_send(ep, msg, (size_t)n, NULL));
    CHECK_OK(rdmx_recv(ep, back, sizeof(back), &recv_limit, &len));
    CHECK(len == (size_t)n && memcmp(back, msg, len) == 0);
    rdmx_ep_close(ep);
    closed++;
}

/* Closes finish asynchronously (BYE, acknowledgement, UCX teardown, at
 * most ~2 s for an unacknowledged one): progress until both processes' fd
 * counts have been stable for 200 ms, then sample. */
static void settle_and_sample(sample_t *s)
{
    double deadline = th_now_ms() + 5000.0 * TH_SLOW, stable_since;
    int cli = th_fd_count(0), srv = th_fd_count(server.pid);

    stable_since = th_now_ms();
    while (th_now_ms() - stable_since < 200.0 && th_now_ms() < deadline) {
        int c, v;

        th_progress_for(worker, 20);
        c = th_fd_count(0);
        v = th_fd_count(server.pid);
        if (c != cli || v != srv) {
            cli = c;
            srv = v;
            stable_since = th_now_ms();
        }
    }
    s->cli_fds = cli;
    s->srv_fds = srv;
    s->srv_rss_kib = th_rss_kib(server.pid);
}

/* Wait until the server processed every close so far, then sample. */
static void take_sample(sample_t *s)
{
    double deadline = th_now_ms() + 20000.0 * TH_SLOW;

    for (;;) {
        rdmx_ep_t *ep = cconnect();
        size_t len = 0;

        CHECK_OK(rdmx_send(ep, "STATS", 5, NULL));
        CHECK_OK(rdmx_recv(ep, &s->st, sizeof(s->st), &recv_limit, &len));
        CHECK(len == sizeof(s->st));
        if (s->st.closed_ok + s->st.closed_err == closed &&
            s->st.open_eps == 1) {
            settle_and_sample(s);
            rdmx_ep_close(ep);
            closed++;
            return;
        }
        rdmx_ep_close(ep);
        closed++;
        CHECKF(th_now_ms() < deadline,
               "server never caught up: %llu closes seen, %llu made, %llu "
               "endpoints open",
               (unsigned long long)(s->st.closed_ok + s->st.closed_err),
               (unsigned long long)closed, (unsigned long long)s->st.open_eps);
        th_sleep_ms(20);
    }
}

int main(int argc, char **argv)
{
    rdmx_context_t *ctx;
    sample_t s1, s2;
    rdmx_ep_t *ep;
    char bye[8];
    size_t len = 0;
    double t0;
    int i;

    if (argc > 1 && strcmp(argv[1], "--cycles-server") == 0)
        return cycles_server();

    th_init("connect_cycles", 170);
    th_spawn_self(&server, "--cycles-server", 30000, NULL);
    ctx = th_context();
    worker = th_worker(ctx, 0);

    t0 = th_now_ms();
    for (i = 0; i < WARMUP; i++)
        one_cycle(i);
    take_sample(&s1);
    for (; i < CYCLES; i++)
        one_cycle(i);
    take_sample(&s2);
    th_log("%d cycles in %.0f ms", CYCLES, th_now_ms() - t0);
    th_log("server fds %d -> %d, RSS %ld -> %ld KiB; client fds %d -> %d",
           s1.srv_fds, s2.srv_fds, s1.srv_rss_kib, s2.srv_rss_kib, s1.cli_fds,
           s2.cli_fds);
    th_log("server: %llu orderly closes, %llu errors, %llu accepted, "
           "eps_opened %llu",
           (unsigned long long)s2.st.closed_ok,
           (unsigned long long)s2.st.closed_err,
           (unsigned long long)s2.st.accepted,
           (unsigned long long)s2.st.eps_opened);

    CHECKF(s2.st.closed_err == 0,
           "the server saw %llu errors instead of RDMX_ERR_CONN_CLOSED",
           (unsigned long long)s2.st.closed_err);
    CHECK_EQ_U64(s2.st.closed_ok, closed - 1);
    CHECK_EQ_U64(s2.st.accepted, closed);
    CHECK_EQ_U64(s2.st.eps_opened, closed);
    CHECKF(abs(s2.srv_fds - s1.srv_fds) <= 2, "server fds %d -> %d", s1.srv_fds,
           s2.srv_fds);
    CHECKF(abs(s2.cli_fds - s1.cli_fds) <= 2, "client fds %d -> %d", s1.cli_fds,
           s2.cli_fds);
    if (!TH_SANITIZED)
        CHECKF(s2.srv_rss_kib - s1.srv_rss_kib < 4096,
               "server RSS grew by %ld KiB over %d cycles",
               s2.srv_rss_kib - s1.srv_rss_kib, CYCLES - WARMUP);

    ep = cconnect();
    CHECK_OK(rdmx_send(ep, "QUIT", 4, NULL));
    CHECK_OK(rdmx_recv(ep, bye, sizeof(bye), &recv_limit, &len));
    CHECK(len == 3 && memcmp(bye, "BYE", 3) == 0);
    rdmx_ep_close(ep);
    th_check_exit_ok("server", th_wait_exit(&server, 20000));

    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    th_log("ok");
    return 0;
}
