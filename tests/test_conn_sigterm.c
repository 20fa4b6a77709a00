/*
 * conn_sigterm: an RPC server SIGTERMed while client processes churn
 * connections shuts down cleanly, and the clients see errors but never
 * crash.
 *
 * Each round starts conn_util's RPC server role (2 workers) and forks 4
 * churning client processes (the test process never creates an rdmx
 * context). Each client keeps one long-lived channel and, in a loop: calls
 * "echo_once" on it, opens a fresh channel, waits until READY, calls
 * "echo_once" on it and destroys it (not idempotent, so a call the
 * SIGTERM cuts off fails at once instead of being resent), and keeps 4
 * core connections (rdmx_connect_nb) in handshake at all times, each
 * closed as soon as it completed or failed and replaced at once. Once every
 * client reported a good first cycle, the test tells them "term is coming" (a
 * byte on their control pipe), sends SIGTERM to the server, waits for it, lets
 * the clients run on for 300 ms against the dead server, then tells them to
 * stop. RDMX_TEST_TERM_ROUNDS rounds (default 5).
 *
 * Proven:
 *  - the server exits 0 within 5 s of SIGTERM and logs "shutting down" and
 *    "shut down after N ms" (its own log, read by the test);
 *  - no client dies of a signal: each exits 0 after destroying its
 *    channels, worker and context (exit 1 = an error before the SIGTERM or
 *    an echo answered with wrong bytes; signal = crash);
 *  - before the SIGTERM every call, channel and core connection succeeded
 *    (an error then fails the client); afterwards errors are expected and
 *    counted, by status, and reported; calls and channels started after
 *    the SIGTERM was announced fail within their deadline (1 s, 1.5 s)
 *    plus 2.5 s of slack instead of hanging (before it the deadlines are
 *    5 s and 7.5 s, so that a loaded machine does not fail the test);
 *  - the churn was real: over all rounds, the clients made successful
 *    calls and saw errors.
 *
 * Each client's stderr goes to a file (UCX logs an error for every connect
 * to the dead server's transport), shown when the client fails. With UCX
 * 1.13 the tcp variant fails now and then: a client aborts in UCX's tcp
 * wireup ("wireup_ep.c:241 Assertion `wireup_ep->pending_count == 0'")
 * when the server dies under it, about once in 25 rounds (6 in ~165). That
 * abort, and only it, on a UCX older than 1.16, is counted and reported as
 * a WARNING instead of failing the test: it is UCX's crash in a client
 * process, not rdmx's. UCX 1.22 has one of its own, rarer (once in ~20
 * runs of this test): a tcp endpoint destroyed with a request still
 * pending hits the purge callback that asserts ("stubs.c:107 Assertion
 * `0' failed", from uct_tcp_ep_t's cleanup), when the server dies during
 * the transport's wire-up; it is treated the same way on UCX 1.16 and
 * later. Any other signal death fails.
 */
#define _GNU_SOURCE
#include "conn_util.h"
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h> /* ucp_get_version: which UCX bugs to expect */
#include <unistd.h>

static int known_ucx_aborts;

static const char *ucx_version_str(void)
{
    static char v[32];
    unsigned major, minor, release;

    ucp_get_version(&major, &minor, &release);
    snprintf(v, sizeof(v), "%u.%u.%u", major, minor, release);
    return v;
}

/* A client that died of SIGABRT in one of UCX's known tcp wire-up
 * assertions: 1.13's (fixed in later releases) on a UCX older than 1.16,
 * the pending-purge one on 1.16 and later (above). */
static int ucx_known_abort(int ws, const char *log)
{
    unsigned major, minor, release;

    ucp_get_version(&major, &minor, &release);
    if (!WIFSIGNALED(ws) || WTERMSIG(ws) != SIGABRT || major != 1)
        return 0;
    if (minor < 16)
        return strstr(log, "wireup_ep.c:241") != NULL ||
               strstr(log, "tcp_ep.c:478") != NULL;
    return strstr(log, "stubs.c:107") != NULL;
}

#define CLIENTS 4
#define PENDING 4  /* core connections in handshake per client */
#define NSTATUS 64 /* error counters by -status */

static th_proc_t server;
static char server_log[256];

typedef struct {
    uint64_t ok_calls;   /* echo answered correctly */
    uint64_t ok_conns;   /* core connections that completed */
    uint64_t err_before; /* errors before "term is coming" */
    uint64_t errors;     /* errors after */
    uint64_t by_status[NSTATUS];
    double slowest_ms; /* slowest failing operation after the term */
    int bad_data;      /* an echo came back wrong */
} churn_report_t;

typedef struct {
    int id;
    int ctl;       /* read end: 'T' term is coming, 'S' stop */
    int out;       /* write end: 'R' ready, then the report */
    char log[256]; /* its stderr */
} churn_arg_t;

/* --- client ------------------------------------------------------------- */

typedef struct {
    rdmx_ep_t *ep;
    int done;
    rdmx_status_t st;
} pend_t;

static churn_report_t rep;
static int term_seen, stop_seen, ctl_fd = -1;
static char first_err[256];

/* Read the control pipe: the test writes 'T' before it sends SIGTERM, so
 * an error caused by the SIGTERM always finds it there. */
static void poll_ctl(void)
{
    char c;

    while (read(ctl_fd, &c, 1) == 1) {
        if (c == 'T')
            term_seen = 1;
        else if (c == 'S')
            stop_seen = 1;
    }
}

static int deadline_ms(void);

/* Count an error; @p ms is how long the operation took, or < 0 when it
 * started before the SIGTERM was announced (its deadline was longer). */
static void note(rdmx_status_t st, const char *what, double ms)
{
    if (st == RDMX_OK)
        return;
    poll_ctl();
    if (!term_seen) {
        rep.err_before++;
        if (!first_err[0])
            snprintf(first_err, sizeof(first_err), "%s: %s (%s)", what,
                     rdmx_status_name(st), rdmx_error_detail());
        return;
    }
    rep.errors++;
    rep.by_status[(-st) < NSTATUS ? -st : 0]++;
    if (ms > 3000.0 * TH_SLOW)
        th_log("%s: %s after %.0f ms (%s)", what, rdmx_status_name(st), ms,
               rdmx_error_detail());
    if (ms > rep.slowest_ms)
        rep.slowest_ms = ms;
}

static void pend_cb(rdmx_ep_t *ep, rdmx_status_t st, void *arg)
{
    pend_t *p = arg;

    if (p->ep == ep) {
        p->st = st;
        p->done = 1;
    }
}

static void pend_step(rdmx_worker_t *w, pend_t *pend, int restart)
{
    for (int i = 0; i < PENDING; i++) {
        pend_t *p = &pend[i];

        if (p->ep != NULL && !p->done && restart)
            continue;
        if (p->ep != NULL) {
            if (p->done) {
                if (p->st == RDMX_OK)
                    rep.ok_conns++;
                else
                    note(p->st, "core connect", -1);
            }
            rdmx_ep_close(p->ep);
            p->ep = NULL;
        }
        p->done = 0;
        if (restart) {
            rdmx_ep_params_t ep_params = {
                .field_mask = RDMX_EP_PARAM_FIELD_CONNECT_CB |
                              RDMX_EP_PARAM_FIELD_USER_DATA |
                              RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT,
                .connect_cb = pend_cb,
                .user_data = p,
                .connect_timeout_ms = deadline_ms()};
            rdmx_status_t st =
                rdmx_connect_nb(w, server.addr, &ep_params, &p->ep);

            if (st != RDMX_OK && st != RDMX_INPROGRESS) {
                note(st, "rdmx_connect_nb", -1);
                if (p->ep != NULL)
                    rdmx_ep_close(p->ep);
                p->ep = NULL;
            }
        }
    }
}

/* Deadlines: 5 s while the server runs (a loaded machine must not fail
 * the test), 1 s once the SIGTERM was announced (so that the loop goes on
 * against the dead server). */
static int deadline_ms(void)
{
    return (term_seen ? 1000 : 5000) * TH_SLOW;
}

/* rdmx_channel_wait_ready for 1.5 x the deadline from @p t0; the limit
 * shrinks as soon as the SIGTERM is announced. */
static rdmx_status_t wait_ready(rdmx_channel_t *ch, double t0)
{
    for (;;) {
        rdmx_status_t st = rdmx_channel_wait_ready(ch, 20);

        if (st != RDMX_ERR_TIMEOUT)
            return st;
        poll_ctl();
        if (th_now_ms() - t0 >= deadline_ms() * 1.5)
            return RDMX_ERR_TIMEOUT; /* (detail: "not ready after 20 ms") */
    }
}

static int echo(rdmx_channel_t *ch, const char *what, unsigned n)
{
    char msg[64], back[64];
    size_t len = 0;
    int m = snprintf(msg, sizeof(msg), "%s %u", what, n);
    rdmx_call_params_t cp;
    double t0 = th_now_ms();
    int after = term_seen;
    rdmx_status_t st;

    memset(&cp, 0, sizeof(cp));
    cp.field_mask = RDMX_CALL_PARAM_FIELD_TIMEOUT;
    cp.timeout_ms = deadline_ms();
    /* not idempotent: a call the SIGTERM cut off fails now instead of
     * being resent until its deadline */
    st = rdmx_call(ch, "echo_once", msg, (size_t)m, back, sizeof(back), &cp,
                   &len);
    if (st == RDMX_OK) {
        if (len != (size_t)m || memcmp(back, msg, len) != 0) {
            th_log("echo '%s' answered %zu bytes '%.*s'", msg, len, (int)len,
                   back);
            rep.bad_data = 1;
        }
        rep.ok_calls++;
        return 0;
    }
    note(st, what, after ? th_now_ms() - t0 : -1);
    return -1;
}

static int churn_client(void *arg)
{
    const churn_arg_t *a = arg;
    int lfd = open(a->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    rdmx_context_t *ctx;

    /* stderr to a file: UCX logs an error for every connect to the dead
     * server's transport; the test shows the file if this client fails */
    if (lfd >= 0) {
        dup2(lfd, 2);
        close(lfd);
    }
    ctx = th_context();
    rdmx_worker_t *w = th_worker(ctx, 0);
    rdmx_channel_t *held = cu_channel(w, server.addr, 5000, -1);
    rdmx_channel_params_t p;
    pend_t pend[PENDING];
    int ready = 0;
    unsigned n = 0;

    memset(pend, 0, sizeof(pend));
    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT;
    ctl_fd = a->ctl;
    fcntl(ctl_fd, F_SETFL, O_NONBLOCK);
    for (;;) {
        rdmx_channel_t *ch = NULL;
        rdmx_status_t st;
        double t0;
        int after;

        poll_ctl();
        if (stop_seen)
            break;
        n++;
        echo(held, "held", n);
        pend_step(w, pend, 1);
        t0 = th_now_ms();
        after = term_seen;
        p.connect_timeout_ms = deadline_ms();
        st = rdmx_channel_create(w, server.addr, &p, &ch);
        if (st == RDMX_OK)
            st = wait_ready(ch, t0);
        if (st == RDMX_OK)
            st = echo(ch, "fresh", n) == 0 ? RDMX_OK : RDMX_ERR_INTERNAL;
        else
            note(st, "channel", after ? th_now_ms() - t0 : -1);
        if (ch != NULL)
            rdmx_channel_destroy(ch);
        pend_step(w, pend, 1);
        rdmx_worker_progress(w);
        if (!ready && st == RDMX_OK && !term_seen) {
            ready = 1;
            CHECK(write(a->out, "R", 1) == 1);
        }
    }
    pend_step(w, pend, 0);
    rdmx_channel_destroy(held);
    th_progress_for(w, 20);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    if (first_err[0])
        th_log("client %d: error before the SIGTERM: %s", a->id, first_err);
    CHECK(write(a->out, &rep, sizeof(rep)) == (ssize_t)sizeof(rep));
    return rep.err_before == 0 && !rep.bad_data ? 0 : 1;
}

/* --- test ----------------------------------------------------------------- */

static void fail_with_log(const char *what)
{
    static char text[16384];
    size_t n = cu_read_file(server_log, text, sizeof(text));

    th_log("server log (%zu bytes):\n%s", n, text);
    th_fail(__FILE__, __LINE__, "%s", what);
}

static void read_all(int fd, void *buf, size_t len, int timeout_ms)
{
    size_t got = 0;
    double deadline = th_now_ms() + (double)timeout_ms * TH_SLOW;

    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);

        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        CHECKF(n != 0, "pipe closed after %zu of %zu bytes", got, len);
        CHECKF(errno == EAGAIN || errno == EINTR, "read: %s", strerror(errno));
        CHECKF(th_now_ms() < deadline, "nothing on the pipe in %d ms",
               timeout_ms);
        th_sleep_ms(2);
    }
}

static churn_report_t total;

static void one_round(int round)
{
    churn_arg_t args[CLIENTS];
    pid_t pids[CLIENTS];
    int ctl[CLIENTS][2], out[CLIENTS][2];
    static char text[16384];
    char why[256], st[64];
    double t_term, dt;
    uint64_t ok = 0, err = 0;
    int i, ws, bad = 0;

    cu_log_path(server_log, sizeof(server_log), "conn_sigterm");
    cu_spawn_logged(&server, server_log, CU_SERVER_ROLE, 30000, "--workers",
                    "2", NULL);
    for (i = 0; i < CLIENTS; i++) {
        CHECK(pipe2(ctl[i], O_CLOEXEC) == 0 && pipe2(out[i], O_CLOEXEC) == 0);
        args[i].id = i;
        cu_log_path(args[i].log, sizeof(args[i].log), "conn_sigterm-client");
        args[i].ctl = ctl[i][0];
        args[i].out = out[i][1];
        pids[i] = cu_fork(churn_client, &args[i], 120);
        close(ctl[i][0]);
        close(out[i][1]);
        fcntl(out[i][0], F_SETFL, O_NONBLOCK);
    }
    for (i = 0; i < CLIENTS; i++) {
        char c = 0;

        read_all(out[i][0], &c, 1, 30000);
        CHECKF(c == 'R', "client %d: '%c' instead of ready", i, c);
    }
    th_sleep_ms(300); /* churning at full speed */
    for (i = 0; i < CLIENTS; i++)
        CHECK(write(ctl[i][1], "T", 1) == 1);
    th_sleep_ms(5);
    t_term = th_now_ms();
    th_kill(&server, SIGTERM);
    ws = th_wait_exit(&server, 20000);
    dt = th_now_ms() - t_term;
    cu_read_file(server_log, text, sizeof(text));
    th_log("round %d: server exited %.0f ms after SIGTERM (%s)", round, dt,
           cu_wstatus_str(ws, st, sizeof(st)));
    if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) {
        snprintf(why, sizeof(why), "round %d: server ended with %s", round,
                 cu_wstatus_str(ws, st, sizeof(st)));
        fail_with_log(why);
    }
    if (strstr(text, "shutting down") == NULL ||
        strstr(text, "shut down after") == NULL) {
        snprintf(why, sizeof(why),
                 "round %d: the server did not log its "
                 "shutdown",
                 round);
        fail_with_log(why);
    }
    CHECKF(dt < 5000.0 * TH_SLOW, "round %d: server took %.0f ms to exit",
           round, dt);

    th_sleep_ms(300); /* the clients run against the dead server */
    for (i = 0; i < CLIENTS; i++) {
        /* (a client that died has closed its end: EPIPE, reported below) */
        if (write(ctl[i][1], "S", 1) != 1)
            th_log("round %d: client %d does not read its pipe any more", round,
                   i);
    }
    for (i = 0; i < CLIENTS; i++) {
        ws = cu_wait_pid(pids[i], 30000);
        if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) {
            size_t n = cu_read_file(args[i].log, text, sizeof(text));
            const char *tail = text + (n > 3000 ? n - 3000 : 0);

            th_log("round %d: client %d (pid %d) ended with %s; the end of "
                   "its stderr:\n%s",
                   round, i, (int)pids[i], cu_wstatus_str(ws, st, sizeof(st)),
                   tail);
            if (ucx_known_abort(ws, text)) {
                /* UCX before 1.16: its tcp transport aborts a process whose
                 * peer dies during the transport's wireup. Not rdmx's
                 * crash; counted and reported, any other one fails. */
                th_log("WARNING round %d: client %d hit UCX %s's known tcp "
                       "wireup assertion (see tests/README.md)",
                       round, i, ucx_version_str());
                known_ucx_aborts++;
            } else {
                bad++;
            }
        }
        pids[i] = WIFSIGNALED(ws) || ws == -1 ? -1 : pids[i];
    }
    CHECKF(bad == 0,
           "round %d: %d of %d clients did not exit 0 (a signal "
           "is a crash; exit 1 an error before the SIGTERM or a "
           "wrong answer)",
           round, bad, CLIENTS);
    for (i = 0; i < CLIENTS; i++) {
        churn_report_t r;

        if (pids[i] == -1) {
            /* (died in UCX's known abort, above: it wrote no report) */
            close(out[i][0]);
            close(ctl[i][1]);
            continue;
        }
        read_all(out[i][0], &r, sizeof(r), 1000);
        close(out[i][0]);
        close(ctl[i][1]);
        ok += r.ok_calls;
        err += r.errors;
        total.ok_calls += r.ok_calls;
        total.ok_conns += r.ok_conns;
        total.errors += r.errors;
        for (int k = 0; k < NSTATUS; k++)
            total.by_status[k] += r.by_status[k];
        if (r.slowest_ms > total.slowest_ms)
            total.slowest_ms = r.slowest_ms;
    }
    for (i = 0; i < CLIENTS; i++)
        unlink(args[i].log);
    th_log("round %d: clients made %llu good calls, saw %llu errors after the "
           "SIGTERM; all exited 0",
           round, (unsigned long long)ok, (unsigned long long)err);
    unlink(server_log);
}

int main(int argc, char **argv)
{
    long rounds;
    int r, k;

    if (argc > 1 && strcmp(argv[1], CU_SERVER_ROLE) == 0)
        return cu_server_main(argc - 2, argv + 2);
    rounds = cu_env_long("RDMX_TEST_TERM_ROUNDS", 5);
    CHECK(rounds >= 1);
    th_init("conn_sigterm", (unsigned)(60 + 20 * rounds));
    th_log("transport %s: %ld rounds, %d churning clients", th_transport_env(),
           rounds, CLIENTS);
    for (r = 0; r < rounds; r++)
        one_round(r);
    th_log("all rounds: %llu good calls, %llu core connections completed, "
           "%llu errors after SIGTERM, slowest failure %.0f ms",
           (unsigned long long)total.ok_calls,
           (unsigned long long)total.ok_conns, (unsigned long long)total.errors,
           total.slowest_ms);
    for (k = 0; k < NSTATUS; k++)
        if (total.by_status[k])
            th_log("  %-24s %llu", rdmx_status_name((rdmx_status_t)-k),
                   (unsigned long long)total.by_status[k]);
    CHECK(total.ok_calls > 0);
    CHECKF(total.slowest_ms < 4000.0 * TH_SLOW,
           "a failing call or channel took %.0f ms (deadlines 1000/1500 ms)",
           total.slowest_ms);
    CHECKF(total.errors > 0, "no client saw an error: the churn did not "
                             "reach the shutdown");
    if (known_ucx_aborts > 0)
        th_log("WARNING: %d client(s) aborted in UCX %s's known tcp wireup "
               "assertion",
               known_ucx_aborts, ucx_version_str());
    th_log("ok");
    return 0;
}
