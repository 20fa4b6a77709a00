/*
 * conn_limit: an RPC server's max_connections is enforced by its listener:
 * clients over the limit are refused at once with RDMX_ERR_BUSY and a
 * detail naming the limit, counted and logged at most once a second, and
 * a freed slot is given to the next client.
 *
 * The server is conn_util's RPC server role with --max-connections 5 and 2
 * workers (its log goes to a file the test reads); the test process is the
 * client.
 *
 * Proven:
 *  - 5 channels connect and stay READY; rdmx.stats says connections 5;
 *  - a 6th connection by the core API (rdmx_connect, 3 times, and
 *    rdmx_connect_nb) fails with RDMX_ERR_BUSY in < 1 s (measured, with a
 *    5 s connect timeout: it is the REFUSE, not a timeout) and
 *    rdmx_error_detail() / the failed endpoint's status say "server at its
 *    connection limit (5)";
 *  - a 6th RPC channel: rdmx_channel_wait_ready returns RDMX_ERR_BUSY in
 *    < 1 s with "connection limit (5)" in the detail, the channel is DOWN;
 *  - the server's listener worker counts every refusal exactly in
 *    conns_refused (rdmx_worker_stats, read by the "wstats" handler over
 *    the held channels); a burst of 40 more refusals is counted exactly
 *    and logged by the server at most once a second (log lines <= 1 +
 *    elapsed seconds since the first refusal, and at least 1); a refusal
 *    every 50 ms for 2.5 s gives 2-3 lines, not 50;
 *  - the RPC layer's rdmx.stats "connections_refused" ("over
 *    max_connections", rpc.h) counts the same refusals;
 *  - after one of the 5 closes, the refused channel (still retrying with
 *    backoff) becomes READY by itself and answers a call; the server is at
 *    5 again, so a new core connect is BUSY again; after another of the 5
 *    closes, a new channel is accepted (within 3 s of the close) and
 *    answers a call;
 *  - the held channels never noticed: every one answers a call at the end,
 *    and the server exits 0 on SIGTERM.
 */
#define _GNU_SOURCE
#include "conn_util.h"
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIMIT   5
#define WORKERS 2
#define BURST   40

/* Checks whose failure does not stop the test: the rest still runs and
 * the test exits 1 at the end (so one bug does not hide the others). */
static int soft_failures;
#define SOFT_CHECKF(cond, ...)                                                 \
    do {                                                                       \
        if (!(cond)) {                                                         \
            char sf_[512];                                                     \
            snprintf(sf_, sizeof(sf_), __VA_ARGS__);                           \
            th_log("FAIL %s:%d: %s", __FILE__, __LINE__, sf_);                 \
            soft_failures++;                                                   \
        }                                                                      \
    } while (0)

static th_proc_t server;
static char server_log[256];
static rdmx_worker_t *w;
static rdmx_channel_t *held[LIMIT];

static void echo_ok(rdmx_channel_t *ch, const char *msg)
{
    char back[64];
    size_t len = 0, n = strlen(msg);

    CHECK_OK(rdmx_call(ch, "echo", msg, n, back, sizeof(back), NULL, &len));
    CHECK(len == n && memcmp(back, msg, n) == 0);
}

/* Worker 0's counters (the listener's), through the held channels. */
static rdmx_worker_stats_t listener_stats(void)
{
    rdmx_worker_stats_t st;
    int i;

    for (i = 0; i < LIMIT; i++) {
        cu_wstats_t r;
        size_t len = 0;

        if (held[i] == NULL)
            continue;
        CHECK_OK(
            rdmx_call(held[i], "wstats", NULL, 0, &r, sizeof(r), NULL, &len));
        CHECK(len == sizeof(r));
        if (r.index == 0)
            return r.st;
    }
    th_fail(__FILE__, __LINE__, "no held channel is on worker 0");
    memset(&st, 0, sizeof(st));
    return st;
}

/* Refusals by rdmx_connect, and those whose rdmx_error_detail() did not
 * name the limit (checked once at the end). */
static unsigned n_refusals, n_bad_detail;
static char bad_detail[256];

/* One core connect that must be refused at once. Returns its time. */
static double refused_connect(void)
{
    rdmx_ep_params_t p = {.field_mask = RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT,
                          .connect_timeout_ms = 5000};
    rdmx_ep_t *ep = NULL;
    double t0 = th_now_ms(), dt;
    rdmx_status_t st = rdmx_connect(w, server.addr, &p, &ep);
    char detail[256];

    dt = th_now_ms() - t0;
    snprintf(detail, sizeof(detail), "%s", rdmx_error_detail());
    CHECKF(st == RDMX_ERR_BUSY,
           "connect over the limit: %s (%s) after %.0f ms, expected "
           "RDMX_ERR_BUSY",
           rdmx_status_name(st), detail, dt);
    n_refusals++;
    if (strstr(detail, "server at its connection limit (5)") == NULL) {
        if (n_bad_detail++ == 0)
            snprintf(bad_detail, sizeof(bad_detail), "%s", detail);
    }
    CHECKF(dt < 1000.0 * TH_SLOW, "refusal took %.0f ms", dt);
    return dt;
}

static int nb_done;
static rdmx_status_t nb_status;

static void nb_cb(rdmx_ep_t *ep, rdmx_status_t st, void *arg)
{
    (void)ep;
    (void)arg;
    nb_status = st;
    nb_done = 1;
}

/* Wait until @p ch is READY (a refused channel keeps trying: BUSY from
 * wait_ready only says it is still refused). */
static double wait_ready_retrying(rdmx_channel_t *ch, int timeout_ms)
{
    double t0 = th_now_ms();

    for (;;) {
        rdmx_status_t st = rdmx_channel_wait_ready(ch, 50);

        if (st == RDMX_OK)
            return th_now_ms() - t0;
        CHECKF(st == RDMX_ERR_BUSY || st == RDMX_ERR_TIMEOUT,
               "waiting for a slot: %s (%s)", rdmx_status_name(st),
               rdmx_error_detail());
        CHECKF(th_now_ms() - t0 < (double)timeout_ms * TH_SLOW,
               "no slot after %d ms (last: %s, %s)", timeout_ms,
               rdmx_status_name(st), rdmx_error_detail());
        if (st == RDMX_ERR_BUSY)
            th_progress_for(w, 10);
    }
}

int main(int argc, char **argv)
{
    rdmx_context_t *ctx;
    rdmx_worker_stats_t s0, s1, s2;
    rdmx_channel_t *sixth, *late;
    rdmx_channel_params_t cp;
    rdmx_ep_params_t nb_params = {.field_mask =
                                      RDMX_EP_PARAM_FIELD_CONNECT_CB |
                                      RDMX_EP_PARAM_FIELD_USER_DATA |
                                      RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT,
                                  .connect_cb = nb_cb,
                                  .user_data = NULL,
                                  .connect_timeout_ms = 5000};
    rdmx_ep_t *ep = NULL;
    static char text[65536];
    double t0, dt, t_first, sum = 0;
    uint64_t refused = 0, rpc_refused0;
    unsigned lines;
    char msg[32];
    int i, ws;
    rdmx_status_t st;

    if (argc > 1 && strcmp(argv[1], CU_SERVER_ROLE) == 0)
        return cu_server_main(argc - 2, argv + 2);
    th_init("conn_limit", 110);
    cu_log_path(server_log, sizeof(server_log), "conn_limit");
    cu_spawn_logged(&server, server_log, CU_SERVER_ROLE, 30000, "--workers",
                    "2", "--max-connections", "5", NULL);
    ctx = th_context();
    w = th_worker(ctx, 0);

    /* 5 clients connect and stay */
    for (i = 0; i < LIMIT; i++) {
        held[i] = cu_channel(w, server.addr, 5000, -1);
        snprintf(msg, sizeof(msg), "held %d", i);
        echo_ok(held[i], msg);
    }
    CHECK_EQ_U64(cu_server_stat(held[0], "connections"), LIMIT);
    rpc_refused0 = cu_server_stat(held[0], "connections_refused");
    s0 = listener_stats();
    th_log("5 channels up; listener conns_refused %llu",
           (unsigned long long)s0.conns_refused);

    /* the 6th, core API */
    t_first = th_now_ms();
    for (i = 0; i < 3; i++) {
        dt = refused_connect();
        sum += dt;
        refused++;
        th_log("core connect #%d over the limit: RDMX_ERR_BUSY after %.2f ms "
               "(%s)",
               i + 1, dt, rdmx_error_detail());
    }
    t0 = th_now_ms();
    st = rdmx_connect_nb(w, server.addr, &nb_params, &ep);
    CHECKF(st == RDMX_INPROGRESS, "rdmx_connect_nb: %s", rdmx_status_name(st));
    while (!nb_done && th_now_ms() - t0 < 5000.0 * TH_SLOW)
        rdmx_worker_wait(w, 10);
    dt = th_now_ms() - t0;
    CHECKF(nb_done && nb_status == RDMX_ERR_BUSY,
           "rdmx_connect_nb over the limit: %s after %.0f ms",
           nb_done ? rdmx_status_name(nb_status) : "not done", dt);
    CHECK(rdmx_ep_status(ep) == RDMX_ERR_BUSY);
    CHECKF(dt < 1000.0 * TH_SLOW, "refusal took %.0f ms", dt);
    rdmx_ep_close(ep);
    refused++;
    th_log("rdmx_connect_nb over the limit: RDMX_ERR_BUSY after %.2f ms", dt);

    s1 = listener_stats();
    CHECK_EQ_U64(s1.conns_refused - s0.conns_refused, refused);

    /* the 6th, RPC channel */
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT |
                    RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MIN |
                    RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MAX;
    cp.connect_timeout_ms = 5000;
    cp.backoff_min_ms = 50;
    cp.backoff_max_ms = 400;
    t0 = th_now_ms();
    CHECK_OK(rdmx_channel_create(w, server.addr, &cp, &sixth));
    st = rdmx_channel_wait_ready(sixth, 5000);
    dt = th_now_ms() - t0;
    {
        char detail[256];

        snprintf(detail, sizeof(detail), "%s", rdmx_error_detail());
        th_log("6th channel: %s after %.1f ms (%s)", rdmx_status_name(st), dt,
               detail);
        CHECKF(st == RDMX_ERR_BUSY, "6th channel: %s (%s)",
               rdmx_status_name(st), detail);
        SOFT_CHECKF(strstr(detail, "connection limit (5)") != NULL,
                    "6th channel detail: '%s'", detail);
    }
    CHECKF(dt < 1000.0 * TH_SLOW, "6th channel refused after %.0f ms", dt);
    CHECK(rdmx_channel_state(sixth) == RDMX_CHANNEL_DOWN);

    /* a burst: counted exactly (the channel above may have retried) */
    s1 = listener_stats();
    for (i = 0; i < BURST; i++)
        refused_connect();
    s2 = listener_stats();
    /* the 6th channel keeps retrying meanwhile (backoff 50-400 ms) */
    CHECKF(s2.conns_refused - s1.conns_refused >= BURST &&
               s2.conns_refused - s1.conns_refused <= BURST + 10,
           "%d refused connects counted as %llu", BURST,
           (unsigned long long)(s2.conns_refused - s1.conns_refused));
    refused = s2.conns_refused - s0.conns_refused;
    {
        uint64_t rpc_refused =
            cu_server_stat(held[0], "connections_refused") - rpc_refused0;

        th_log("refusals: listener conns_refused +%llu, rdmx.stats "
               "connections_refused +%llu",
               (unsigned long long)refused, (unsigned long long)rpc_refused);
        dt = (th_now_ms() - t_first) / 1000.0;
        cu_read_file(server_log, text, sizeof(text));
        lines = cu_count(text, "connection limit (5)");
        th_log("server logged %u refusal lines in %.2f s", lines, dt);
        SOFT_CHECKF(lines >= 1 && lines <= 1 + (unsigned)dt,
                    "%u log lines about the limit in %.2f s", lines, dt);
        SOFT_CHECKF(rpc_refused == refused,
                    "rdmx.stats connections_refused grew by %llu, the listener "
                    "refused %llu connections",
                    (unsigned long long)rpc_refused,
                    (unsigned long long)refused);
    }

    /* the log stays at one line a second under a steady trickle */
    cu_read_file(server_log, text, sizeof(text));
    lines = cu_count(text, "connection limit (5)");
    t0 = th_now_ms();
    for (i = 0; th_now_ms() - t0 < 2500.0; i++) {
        refused_connect();
        th_progress_for(w, 50);
    }
    dt = (th_now_ms() - t0) / 1000.0;
    cu_read_file(server_log, text, sizeof(text));
    lines = cu_count(text, "connection limit (5)") - lines;
    th_log("%d refusals in %.2f s: the server logged %u lines about them", i,
           dt, lines);
    SOFT_CHECKF(lines >= 2 && lines <= 1 + (unsigned)dt,
                "%u log lines about the limit for %d refusals in %.2f s", lines,
                i, dt);

    /* a slot frees: the refused channel gets it */
    rdmx_channel_destroy(held[4]);
    held[4] = NULL;
    dt = wait_ready_retrying(sixth, 5000);
    th_log("one held channel closed: the 6th channel was READY %.0f ms later",
           dt);
    echo_ok(sixth, "sixth");
    CHECK_EQ_U64(cu_server_stat(held[0], "connections"), LIMIT);
    refused_connect();

    /* another slot frees: a new client is accepted */
    rdmx_channel_destroy(held[3]);
    held[3] = NULL;
    t0 = th_now_ms();
    CHECK_OK(rdmx_channel_create(w, server.addr, &cp, &late));
    dt = wait_ready_retrying(late, 3000);
    th_log("another closed: a new channel was READY %.0f ms later",
           th_now_ms() - t0);
    echo_ok(late, "late");
    CHECK_EQ_U64(cu_server_stat(late, "connections"), LIMIT);

    for (i = 0; i < 3; i++) {
        snprintf(msg, sizeof(msg), "still %d", i);
        echo_ok(held[i], msg);
    }
    rdmx_channel_destroy(late);
    rdmx_channel_destroy(sixth);
    for (i = 0; i < 3; i++)
        rdmx_channel_destroy(held[i]);
    th_progress_for(w, 20);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);

    th_kill(&server, SIGTERM);
    ws = th_wait_exit(&server, 20000);
    th_check_exit_ok("server (SIGTERM)", ws);
    unlink(server_log);
    th_log("average refusal %.2f ms", sum / 3);
    SOFT_CHECKF(n_bad_detail == 0,
                "%u of %u connects refused with RDMX_ERR_BUSY had a "
                "detail not naming the limit, e.g. '%s'",
                n_bad_detail, n_refusals, bad_detail);
    if (soft_failures > 0) {
        th_log("FAILED: %d check(s) above", soft_failures);
        return 1;
    }
    th_log("ok");
    return 0;
}
