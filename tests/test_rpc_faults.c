/*
 * rpc_faults: an RPC channel lives through its server's failures.
 *
 * Processes: the test (client) forks a small "launcher" before it creates
 * its rdmx context. The launcher never touches UCX; on request (a line on a
 * pipe) it starts the RPC test server (tests/rpc_server.c) on a given
 * address, reaps it, or stops it with SIGTERM. The client sends SIGKILL,
 * SIGSTOP and SIGCONT to the server itself (its pid comes back from the
 * launcher), so the moment of each fault is measured where the calls are.
 * The server is restarted on the same port every time.
 *
 * Phases, all on one client worker:
 *
 *  A. kill and restart. 50 calls outstanding (20 "spin" 200 ms, 10
 *     "echo_once", 10 "echo" — idempotent by the server's WELCOME — and 10
 *     "echo_once" marked RDMX_RPC_IDEMPOTENT by the call, some of 64-256
 *     KiB) when the server is SIGKILLed. Proven: every non-idempotent call
 *     pending at the kill fails with a connection error within 1 s, its
 *     callback exactly once; the channel reports DOWN; idempotent calls stay
 *     pending (stats.retries counts them); calls made while the server is
 *     down are queued, a one-way message is refused (BUSY); the channel
 *     keeps retrying (CONNECTING/DOWN, refused); after the server is
 *     restarted on the same port the channel is READY again by itself,
 *     stats.reconnects == 1, every idempotent call and every call made while
 *     down succeeds with its exact echo, new calls work; the state callback
 *     saw READY, DOWN, (CONNECTING, DOWN)*, CONNECTING, READY.
 *  B. backoff. A channel to the dead port, backoff 20..160 ms: the gaps
 *     between DOWN and the next CONNECTING follow 20, 40, 80, 160, 160, ...
 *     each at least 75 % of its step (a timer never fires early) and at
 *     most 125 % plus scheduling slack; the median of the gaps at the
 *     maximum stays within the jitter (the cap holds), they are larger than
 *     the first two together (it grows), and they vary (jitter).
 *  C. SIGSTOP. heartbeat 100 ms / timeout 500 ms: idle, the channel sends
 *     no pings; calls with a 250 ms
 *     deadline time out (RDMX_ERR_TIMEOUT) after 250 ms; the channel goes
 *     DOWN (status TIMEOUT) 0.45..1 s after the stop, failing the pending
 *     non-idempotent calls with TIMEOUT; it cannot become READY while the
 *     server is stopped (a reconnect attempt times out); after SIGCONT it
 *     is READY again, the idempotent calls issued during the stop succeed,
 *     new calls work.
 *  E. fail fast (the default; A and C ask for wait_for_ready). 5 "spin"
 *     and 5 "echo" calls in flight when the server is SIGKILLed: the spins
 *     fail with RDMX_ERR_CONN_RESET at once, the idempotent echoes with
 *     RDMX_ERR_UNREACHABLE when the one reconnect attempt is refused, all
 *     within 500 ms; a call made while the channel is DOWN fails at once
 *     (< 100 ms) with RDMX_ERR_UNREACHABLE and a detail saying the channel
 *     is down; the channel is READY again after a restart.
 *  D. circuit breaker, threshold 3, open 300 ms. Handler errors ("fail")
 *     do not trip it; with the server dead, three calls time out and the
 *     breaker opens after the third; new calls then fail synchronously with
 *     RDMX_ERR_BUSY (callback never runs, stats.fast_failed counts them);
 *     300 ms later it is HALF_OPEN: one probe goes through, a second call is
 *     refused; the failing probe opens it again; once the server is back the
 *     next probe succeeds (other calls refused meanwhile) and the breaker is
 *     CLOSED; calls flow. Sequence: CLOSED, OPEN, HALF_OPEN, OPEN,
 *     HALF_OPEN, CLOSED.
 *
 * Timing upper bounds add the longest pause this process itself saw in
 * progressing the worker (a loaded 2-core machine delays timers by tens of
 * ms); lower bounds are exact. Every wait goes through wstep(), and at the
 * end the test checks that rdmx_worker_wait() never came back much later
 * than its timeout (core.h). RPC_FAULTS_PHASES=BC runs only some phases.
 *
 * Run over tcp and shm (RDMX_TRANSPORT).
 */
#define _GNU_SOURCE
#include "harness.h"
#include "rpc_server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Waiting                                                                  */
/* ------------------------------------------------------------------------ */

/* Every wait of the test goes through here: rdmx_worker_wait() must come
 * back once its timeout passed (core.h), which is checked at the end. */
static struct {
    double worst_ms;
    int timeout_ms;
    const char *where;
} overrun;

/* Hiccups: the longest time, since hiccup_reset(), that this process did
 * not progress the worker beyond what it asked for (time between waits,
 * waits that overran). On a loaded 2-core machine the scheduler alone
 * causes tens of ms; the channel's timers can only be as punctual as the
 * progress, so the upper bounds of timing checks add it. */
static double hiccup_ms, last_step_end;

static void hiccup_reset(void)
{
    hiccup_ms = 0;
    last_step_end = th_now_ms();
}

static void wstep(rdmx_worker_t *w, int ms, const char *where)
{
    double t = th_now_ms(), d;

    if (last_step_end > 0 && t - last_step_end > hiccup_ms)
        hiccup_ms = t - last_step_end;
    rdmx_worker_wait(w, ms);
    last_step_end = th_now_ms();
    d = last_step_end - t;
    if (d - ms > overrun.worst_ms) {
        overrun.worst_ms = d - ms;
        overrun.timeout_ms = ms;
        overrun.where = where;
    }
    if (d - ms > hiccup_ms)
        hiccup_ms = d - ms;
}

/* Progress for about @p ms. */
static void progress_for(rdmx_worker_t *w, int ms, const char *where)
{
    double end = th_now_ms() + ms;

    while (th_now_ms() < end)
        wstep(w, 1, where);
}

/* ------------------------------------------------------------------------ */
/* Launcher                                                                 */
/* ------------------------------------------------------------------------ */

/* Runs in a child forked before UCX exists. Commands, one per line:
 *   start ADDR   spawn the RPC server on ADDR -> "started PID PORT"
 *   reap         wait for the server to exit  -> "exited WSTATUS"
 *   stop         SIGTERM it and wait          -> "exited WSTATUS"
 * EOF: kill whatever runs and exit. */
/* Like th_spawn_self(), but execs /proc/self/exe itself rather than the
 * path it links to: when the test binary is rebuilt while the test runs
 * (several people share one build tree), the old inode is still there. */
static void launcher_spawn_server(th_proc_t *srv, const char *addr)
{
    char *argv[] = {"test_rpc_faults", "rpc-server", "--address", (char *)addr,
                    NULL};
    char line[128];
    size_t got = 0;
    int fds[2];
    unsigned port = 0;
    double deadline = th_now_ms() + 20000.0 * TH_SLOW;
    pid_t parent = getpid();

    CHECKF(pipe2(fds, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
    fflush(NULL);
    srv->pid = fork();
    CHECKF(srv->pid >= 0, "fork: %s", strerror(errno));
    if (srv->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(fds[1], 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    memset(line, 0, sizeof(line));
    while (memchr(line, '\n', got) == NULL) {
        struct pollfd pfd = {fds[0], POLLIN, 0};
        ssize_t n;

        CHECKF(th_now_ms() < deadline, "server printed no port in 20 s");
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        n = read(fds[0], line + got, sizeof(line) - 1 - got);
        CHECKF(n > 0,
               "server exited before printing its port (wait "
               "status 0x%x)",
               th_wait_exit(srv, 5000));
        got += (size_t)n;
        CHECK(got < sizeof(line) - 1);
    }
    close(fds[0]);
    CHECKF(sscanf(line, "PORT %u", &port) == 1 && port > 0 && port < 65536,
           "bad port line '%s'", line);
    srv->port = (uint16_t)port;
}

static int launcher_main(int in, int out)
{
    th_proc_t srv = {.pid = -1};
    FILE *f = fdopen(in, "r");
    char line[256], addr[128];

    th_init("rpc_faults-launcher", 230);
    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "start %127s", addr) == 1) {
            CHECKF(srv.pid <= 0, "launcher: a server is still running");
            launcher_spawn_server(&srv, addr);
            dprintf(out, "started %d %u\n", (int)srv.pid, (unsigned)srv.port);
        } else if (strcmp(line, "reap\n") == 0 || strcmp(line, "stop\n") == 0) {
            int ws;

            CHECKF(srv.pid > 0, "launcher: no server");
            if (line[1] == 't')
                th_kill(&srv, SIGTERM);
            ws = th_wait_exit(&srv, 10000);
            dprintf(out, "exited %d\n", ws);
        } else {
            th_fail(__FILE__, __LINE__, "launcher: bad command '%s'", line);
        }
    }
    if (srv.pid > 0) {
        th_kill(&srv, SIGKILL);
        th_wait_exit(&srv, 5000);
    }
    return 0;
}

static struct {
    pid_t pid;
    int cmd, reply; /* our ends */
} launcher = {-1, -1, -1};

static struct {
    pid_t pid; /* -1: not running */
    uint16_t port;
    char addr[64];
} server = {-1, 0, ""};

static void launcher_spawn(void)
{
    int c2l[2], l2c[2];
    pid_t parent = getpid();

    CHECKF(pipe2(c2l, O_CLOEXEC) == 0 && pipe2(l2c, O_CLOEXEC) == 0, "pipe: %s",
           strerror(errno));
    fflush(NULL);
    launcher.pid = fork();
    CHECKF(launcher.pid >= 0, "fork: %s", strerror(errno));
    if (launcher.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        close(c2l[1]);
        close(l2c[0]);
        _exit(launcher_main(c2l[0], l2c[1]));
    }
    close(c2l[0]);
    close(l2c[1]);
    launcher.cmd = c2l[1];
    launcher.reply = l2c[0];
}

/* Send a command and read the one-line answer, progressing @p w (if any)
 * meanwhile so that the channels' timers keep running. */
static void launcher_ask(rdmx_worker_t *w, const char *cmd, char *reply,
                         size_t cap, int timeout_ms)
{
    double deadline = th_now_ms() + (double)timeout_ms * TH_SLOW;
    size_t got = 0;

    CHECKF(write(launcher.cmd, cmd, strlen(cmd)) == (ssize_t)strlen(cmd),
           "launcher: write: %s", strerror(errno));
    memset(reply, 0, cap);
    while (memchr(reply, '\n', got) == NULL) {
        struct pollfd pfd = {launcher.reply, POLLIN, 0};
        ssize_t n;

        CHECKF(th_now_ms() < deadline, "launcher: no answer to '%.*s' in %d ms",
               (int)strcspn(cmd, "\n"), cmd, timeout_ms * TH_SLOW);
        if (poll(&pfd, 1, w != NULL ? 0 : 10) <= 0) {
            if (w != NULL)
                wstep(w, 2, "waiting for the launcher");
            continue;
        }
        n = read(launcher.reply, reply + got, cap - 1 - got);
        CHECKF(n > 0, "launcher died (answering '%.*s')",
               (int)strcspn(cmd, "\n"), cmd);
        got += (size_t)n;
        CHECK(got < cap - 1);
    }
}

/* Start the server on @p addr ("127.0.0.1:0" the first time, then the same
 * port again). */
static void server_start(rdmx_worker_t *w, const char *addr)
{
    char cmd[160], reply[128];
    int pid;
    unsigned port;
    double t0 = th_now_ms();

    CHECK(server.pid < 0);
    snprintf(cmd, sizeof(cmd), "start %s\n", addr);
    launcher_ask(w, cmd, reply, sizeof(reply), 30000);
    CHECKF(sscanf(reply, "started %d %u", &pid, &port) == 2, "launcher: '%s'",
           reply);
    server.pid = pid;
    server.port = (uint16_t)port;
    snprintf(server.addr, sizeof(server.addr), "127.0.0.1:%u", port);
    th_log("server pid %d listening on %s (started in %.0f ms)", pid,
           server.addr, th_now_ms() - t0);
}

/* Wait for the server's exit (after a signal, or SIGTERM with @p stop). */
static int server_reap(rdmx_worker_t *w, int stop)
{
    char reply[128];
    int ws;
    double t0 = th_now_ms();

    CHECK(server.pid > 0);
    launcher_ask(w, stop ? "stop\n" : "reap\n", reply, sizeof(reply), 20000);
    CHECKF(sscanf(reply, "exited %d", &ws) == 1, "launcher: '%s'", reply);
    th_log("server pid %d exited (status 0x%x) after %.0f ms", (int)server.pid,
           ws, th_now_ms() - t0);
    server.pid = -1;
    return ws;
}

static void server_signal(int sig)
{
    CHECK(server.pid > 0);
    CHECKF(kill(server.pid, sig) == 0, "kill(%d, %d): %s", (int)server.pid, sig,
           strerror(errno));
}

/* SIGKILL the server and reap it; returns the kill time. */
static double server_kill(rdmx_worker_t *w)
{
    double t;
    int ws;

    server_signal(SIGKILL);
    t = th_now_ms();
    ws = server_reap(w, 0);
    CHECKF(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
           "server wait status 0x%x after SIGKILL", ws);
    return t;
}

/* ------------------------------------------------------------------------ */
/* Channel state log                                                        */
/* ------------------------------------------------------------------------ */

#define EV_MAX 1024

typedef struct {
    double t;
    int breaker; /* 0: channel state event, 1: breaker event */
    int value;   /* rdmx_channel_state_t or rdmx_breaker_state_t */
    rdmx_status_t status;
} ev_t;

typedef struct {
    rdmx_channel_t *ch; /* set after create; callbacks may come before */
    rdmx_channel_state_t state;
    rdmx_breaker_state_t breaker;
    int n, lost, bad;
    char why[200];
    ev_t ev[EV_MAX];
} evlog_t;

static const char *state_name(int s)
{
    static const char *n[] = {"CONNECTING", "READY", "DOWN", "CLOSED"};
    return s >= 0 && s < 4 ? n[s] : "?";
}

static const char *breaker_name(int b)
{
    static const char *n[] = {"CLOSED", "OPEN", "HALF_OPEN"};
    return b >= 0 && b < 3 ? n[b] : "?";
}

static void ev_push(evlog_t *lg, int breaker, int value, rdmx_status_t st,
                    double t)
{
    if (lg->n == EV_MAX) {
        lg->lost++;
        return;
    }
    lg->ev[lg->n].t = t;
    lg->ev[lg->n].breaker = breaker;
    lg->ev[lg->n].value = value;
    lg->ev[lg->n].status = st;
    lg->n++;
}

static void state_cb(rdmx_channel_t *ch, rdmx_channel_state_t state,
                     rdmx_breaker_state_t breaker, rdmx_status_t status,
                     void *arg)
{
    evlog_t *lg = arg;
    double t = th_now_ms();
    int changed = 0;

    if (lg->ch != NULL && ch != lg->ch && !lg->bad) {
        lg->bad = 1;
        snprintf(lg->why, sizeof(lg->why), "callback for another channel");
    }
    if (rdmx_channel_state(ch) != state || rdmx_channel_breaker(ch) != breaker)
        if (!lg->bad) {
            lg->bad = 1;
            snprintf(lg->why, sizeof(lg->why),
                     "callback says %s/%s, the channel %s/%s",
                     state_name(state), breaker_name(breaker),
                     state_name(rdmx_channel_state(ch)),
                     breaker_name(rdmx_channel_breaker(ch)));
        }
    if (state != lg->state) {
        int ok =
            state == RDMX_CHANNEL_CLOSED ||
            (lg->state == RDMX_CHANNEL_CONNECTING &&
             (state == RDMX_CHANNEL_READY || state == RDMX_CHANNEL_DOWN)) ||
            (lg->state == RDMX_CHANNEL_READY && state == RDMX_CHANNEL_DOWN) ||
            (lg->state == RDMX_CHANNEL_DOWN &&
             state == RDMX_CHANNEL_CONNECTING);
        if (!ok && !lg->bad) {
            lg->bad = 1;
            snprintf(lg->why, sizeof(lg->why), "state %s -> %s",
                     state_name(lg->state), state_name(state));
        }
        ev_push(lg, 0, state, status, t);
        lg->state = state;
        changed = 1;
    }
    if (breaker != lg->breaker) {
        ev_push(lg, 1, breaker, status, t);
        lg->breaker = breaker;
        changed = 1;
    }
    if (!changed && !lg->bad) {
        lg->bad = 1;
        snprintf(lg->why, sizeof(lg->why),
                 "callback without a change (%s/%s, %s)", state_name(state),
                 breaker_name(breaker), rdmx_status_name(status));
    }
}

static void evlog_check(const evlog_t *lg)
{
    CHECKF(!lg->bad, "state callback: %s", lg->why);
    CHECKF(lg->lost == 0, "state log overflow (%d events lost)", lg->lost);
}

/* Index of the first channel-state (or breaker, @p breaker) event with
 * value @p value at or after index @p from, or -1. */
static int ev_find(const evlog_t *lg, int from, int breaker, int value)
{
    for (int i = from; i < lg->n; i++)
        if (lg->ev[i].breaker == breaker && lg->ev[i].value == value)
            return i;
    return -1;
}

static void evlog_print(const evlog_t *lg, int from, double t0)
{
    char buf[900];
    size_t off = 0;

    for (int i = from; i < lg->n && off < sizeof(buf) - 64; i++)
        off += (size_t)snprintf(
            buf + off, sizeof(buf) - off, "%s%s%s@%.0f", i > from ? " " : "",
            lg->ev[i].breaker ? "breaker:" : "",
            lg->ev[i].breaker ? breaker_name(lg->ev[i].value)
                              : state_name(lg->ev[i].value),
            lg->ev[i].t - t0);
    th_log("  events (ms from the fault): %s%s", off ? buf : "(none)",
           off >= sizeof(buf) - 64 ? " ..." : "");
}

static rdmx_channel_t *channel_new(rdmx_worker_t *w, evlog_t *lg,
                                   rdmx_channel_params_t *p)
{
    rdmx_channel_t *ch = NULL;

    memset(lg, 0, sizeof(*lg));
    lg->state = RDMX_CHANNEL_CONNECTING;
    lg->breaker = RDMX_BREAKER_CLOSED;
    p->field_mask |= RDMX_CHANNEL_PARAM_FIELD_STATE_CB;
    p->state_cb = state_cb;
    p->state_arg = lg;
    CHECK_OK(rdmx_channel_create(w, server.addr, p, &ch));
    lg->ch = ch;
    return ch;
}

/* Progress @p w until @p cond holds; fail after @p ms (x TH_SLOW). */
#define WAIT_UNTIL(w, cond, ms, ...)                                           \
    do {                                                                       \
        double wu_deadline_ = th_now_ms() + (double)(ms)*TH_SLOW;              \
        while (!(cond)) {                                                      \
            CHECKF(th_now_ms() < wu_deadline_, __VA_ARGS__);                   \
            wstep((w), 2, #cond);                                              \
        }                                                                      \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Calls                                                                    */
/* ------------------------------------------------------------------------ */

enum { K_SPIN, K_ECHO };

typedef struct {
    const char *method;
    int kind;
    int idempotent; /* expected to be retried */
    uint64_t seed;
    size_t len;
    double t_start;
    int timeout_ms;
    /* filled by the callback */
    int cb_calls;
    rdmx_status_t status;
    double t_done;
    int resp_ok;
    char msg[200];
} rec_t;

static void rec_cb(const rdmx_call_result_t *r, void *arg)
{
    rec_t *c = arg;

    c->cb_calls++;
    c->status = r->status;
    c->t_done = th_now_ms();
    snprintf(c->msg, sizeof(c->msg), "%s",
             r->message != NULL ? r->message : "(null message)");
    if (r->status != RDMX_OK)
        c->resp_ok = r->data == NULL && r->length == 0;
    else if (c->kind == K_SPIN)
        c->resp_ok = r->length == 4 && memcmp(r->data, "done", 4) == 0;
    else
        c->resp_ok = r->length == c->len &&
                     (c->len == 0 || th_check(r->data, c->len, c->seed) < 0);
}

static unsigned char *scratch; /* request buffer, SCRATCH bytes */
#define SCRATCH (512 * TH_KIB)

/* Start a call for @p c: "spin" takes @p arg ms; echo methods send @p arg
 * pattern bytes. @p flags: RDMX_RPC_IDEMPOTENT in the call params. Returns
 * what rdmx_call_nb returned. */
static rdmx_status_t rec_start(rdmx_channel_t *ch, rec_t *c, const char *method,
                               uint32_t arg, int timeout_ms, unsigned flags)
{
    rdmx_call_params_t p;
    rdmx_status_t st;
    const void *data;
    size_t len;

    memset(c, 0, sizeof(*c));
    c->method = method;
    c->kind = strcmp(method, "spin") == 0 ? K_SPIN : K_ECHO;
    c->timeout_ms = timeout_ms;
    if (c->kind == K_SPIN) {
        memcpy(scratch, &arg, 4);
        data = scratch;
        len = 4;
    } else {
        static uint64_t n;

        c->seed = th_seed(0xfa, ++n, arg);
        c->len = arg;
        CHECK(arg <= SCRATCH);
        th_fill(scratch, arg, c->seed);
        data = scratch;
        len = arg;
    }
    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CALL_PARAM_FIELD_TIMEOUT;
    p.timeout_ms = timeout_ms;
    if (flags) {
        p.field_mask |= RDMX_CALL_PARAM_FIELD_FLAGS;
        p.flags = flags;
    }
    p.field_mask |= RDMX_CALL_PARAM_FIELD_CB;
    p.cb = rec_cb;
    p.arg = c;
    c->t_start = th_now_ms();
    st = rdmx_call_nb(ch, method, data, len, &p, NULL);
    /* The buffer is free at once: scribble over it to prove it. */
    memset(scratch, 0xee, len);
    return st;
}

static void rec_start_ok(rdmx_channel_t *ch, rec_t *c, const char *method,
                         uint32_t arg, int timeout_ms, unsigned flags)
{
    CHECK_ST(rec_start(ch, c, method, arg, timeout_ms, flags), RDMX_INPROGRESS);
}

static int recs_done(const rec_t *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].cb_calls == 0)
            return 0;
    return 1;
}

static void recs_check_once(const rec_t *r, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        CHECKF(r[i].cb_calls == 1, "%s #%zu (%s): callback ran %d times", what,
               i, r[i].method, r[i].cb_calls);
}

static void rec_expect_ok(const rec_t *c, const char *what, size_t i)
{
    CHECKF(c->cb_calls == 1, "%s #%zu (%s): callback ran %d times", what, i,
           c->method, c->cb_calls);
    CHECKF(c->status == RDMX_OK, "%s #%zu (%s, %zu B): %s: %s", what, i,
           c->method, c->len, rdmx_status_name(c->status), c->msg);
    CHECKF(c->resp_ok, "%s #%zu (%s, %zu B): wrong response", what, i,
           c->method, c->len);
}

/* A few blocking echo calls of assorted sizes, verified. */
static void echo_round(rdmx_channel_t *ch, int n, const char *what)
{
    static const size_t sizes[] = {0, 1, 100, 4096, 70000, 300 * 1024};
    unsigned char *resp = th_alloc(SCRATCH);

    for (int i = 0; i < n; i++) {
        size_t len = sizes[i % 6], got = 0;
        uint64_t seed = th_seed(0xec, (uint64_t)i, len);
        rdmx_status_t st;

        th_fill(scratch, len, seed);
        st = rdmx_call(ch, i % 2 ? "echo_once" : "echo", scratch, len, resp,
                       SCRATCH, NULL, &got);
        CHECKF(st == RDMX_OK, "%s: echo %d of %zu B: %s: %s", what, i, len,
               rdmx_status_name(st), rdmx_error_detail());
        CHECK_EQ_U64(got, len);
        CHECK_PATTERN(resp, len, seed, 0);
    }
    free(resp);
}

static int is_conn_error(rdmx_status_t st)
{
    return st == RDMX_ERR_CONN_RESET || st == RDMX_ERR_CONN_CLOSED ||
           st == RDMX_ERR_CONN_REFUSED || st == RDMX_ERR_UNREACHABLE ||
           st == RDMX_ERR_IO;
}

/* ------------------------------------------------------------------------ */
/* A: kill with calls in flight, restart                                    */
/* ------------------------------------------------------------------------ */

#define A_SPIN 20
#define A_ONCE 10
#define A_ECHO 10
#define A_FLAG 10
#define A_N    (A_SPIN + A_ONCE + A_ECHO + A_FLAG)
#define A_DOWN 10 /* calls made while the server is down */

static void phase_kill_restart(rdmx_worker_t *w)
{
    static evlog_t lg;
    static rec_t rec[A_N], down[A_DOWN + 1];
    rdmx_channel_params_t p;
    rdmx_channel_stats_t s;
    rdmx_channel_t *ch;
    int long_ms = 20000 * TH_SLOW, n = 0, i, idem_pending = 0, failed = 0;
    int nonidem_pending = 0, by_status[32] = {0}, ev_kill, ev_down, ev_ready;
    int attempts = 0;
    double t_kill, t_last_fail = 0, t_restart, t0 = th_now_ms();
    static const uint32_t big[] = {64 * 1024, 100000, 256 * 1024};

    th_log("A: kill the server with %d calls in flight, restart it", A_N);
    memset(&p, 0, sizeof(p)); /* defaults: heartbeats 250/1000, backoff
                                 50..2000, 3 retries */
    p.field_mask = RDMX_CHANNEL_PARAM_FIELD_WAIT_FOR_READY; /* (E: without) */
    p.wait_for_ready = 1;
    ch = channel_new(w, &lg, &p);
    CHECK(rdmx_channel_state(ch) == RDMX_CHANNEL_CONNECTING);
    CHECK_OK(rdmx_channel_wait_ready(ch, 10000 * TH_SLOW));
    CHECK(lg.n == 1 && lg.ev[0].value == RDMX_CHANNEL_READY);
    echo_round(ch, 6, "A warm-up");

    for (i = 0; i < A_SPIN; i++)
        rec_start_ok(ch, &rec[n++], "spin", 200, 60000 * TH_SLOW, 0);
    for (i = 0; i < A_ONCE; i++)
        rec_start_ok(ch, &rec[n++], "echo_once",
                     i % 3 ? 33u * i : big[(i / 3) % 3], 60000 * TH_SLOW, 0);
    for (i = 0; i < A_ECHO; i++) {
        rec_start_ok(ch, &rec[n], "echo", i % 3 ? 1000u + i : big[(i / 3) % 3],
                     long_ms, 0);
        rec[n++].idempotent = 1;
    }
    for (i = 0; i < A_FLAG; i++) {
        rec_start_ok(ch, &rec[n], "echo_once",
                     i % 3 ? 77u * i : big[(i / 3) % 3], long_ms,
                     RDMX_RPC_IDEMPOTENT);
        rec[n++].idempotent = 1;
    }
    CHECK(n == A_N);

    /* Let the server finish the first spin, then kill it at once: the
     * second spin then has ~200 ms to go, so no answer is on its way at
     * the kill. (A fixed wait of 300 ms let a first spin that started late,
     * on a loaded machine, answer just before the kill; its answer arrived
     * after it, and the call counted as pending ended with RDMX_OK.) */
    while (rec[0].cb_calls == 0) {
        CHECKF(th_now_ms() - t0 < 10000.0 * TH_SLOW,
               "A: the first spin did not end within 10 s");
        wstep(w, 1, "A: before the kill");
    }
    for (i = 0; i < A_N; i++) {
        if (rec[i].cb_calls) {
            CHECKF(rec[i].status == RDMX_OK && rec[i].resp_ok,
                   "call #%d (%s) before the kill: %s: %s", i, rec[i].method,
                   rdmx_status_name(rec[i].status), rec[i].msg);
        } else if (rec[i].idempotent) {
            idem_pending++;
        } else {
            nonidem_pending++;
        }
    }
    CHECK(rdmx_channel_state(ch) == RDMX_CHANNEL_READY);
    ev_kill = lg.n;
    t_kill = server_kill(w);
    th_log("A: killed the server; %d non-idempotent and %d idempotent calls "
           "pending",
           nonidem_pending, idem_pending);
    CHECK(nonidem_pending >= A_SPIN + A_ONCE - 3);
    CHECK(idem_pending == A_ECHO + A_FLAG);

    /* Non-idempotent calls fail promptly with a connection error. */
    {
        int left;

        do {
            left = 0;
            for (i = 0; i < A_N; i++)
                left += !rec[i].idempotent && !rec[i].cb_calls;
            CHECKF(left == 0 || th_now_ms() - t_kill < 5000.0 * TH_SLOW,
                   "%d non-idempotent calls still pending 5 s after the kill",
                   left);
            if (left)
                wstep(w, 2, "A: calls failing after the kill");
        } while (left);
    }
    for (i = 0; i < A_N; i++) {
        if (rec[i].idempotent || rec[i].t_done < t_kill)
            continue;
        CHECKF(rec[i].cb_calls == 1, "call #%d: callback ran %d times", i,
               rec[i].cb_calls);
        CHECKF(is_conn_error(rec[i].status),
               "call #%d (%s) pending at the kill ended with %s (%s), want a "
               "connection error",
               i, rec[i].method, rdmx_status_name(rec[i].status), rec[i].msg);
        CHECK(rec[i].resp_ok);
        by_status[-rec[i].status & 31]++;
        failed++;
        if (rec[i].t_done > t_last_fail)
            t_last_fail = rec[i].t_done;
    }
    CHECK(failed == nonidem_pending);
    for (i = 0; i < 32; i++)
        if (by_status[i])
            th_log("A: %d calls failed with %s", by_status[i],
                   rdmx_status_name(-i));
    th_log("A: last non-idempotent failure %.1f ms after the kill",
           t_last_fail - t_kill);
    CHECKF(t_last_fail - t_kill < 1000.0 * TH_SLOW,
           "pending calls took %.0f ms to fail after the kill",
           t_last_fail - t_kill);
    for (i = 0; i < A_N; i++)
        if (rec[i].idempotent)
            CHECKF(rec[i].cb_calls == 0,
                   "idempotent call #%d (%s) completed at the kill: %s: %s", i,
                   rec[i].method, rdmx_status_name(rec[i].status), rec[i].msg);

    ev_down = ev_find(&lg, ev_kill, 0, RDMX_CHANNEL_DOWN);
    CHECKF(ev_down == ev_kill, "no DOWN right after the kill");
    th_log("A: channel DOWN %.1f ms after the kill (%s)",
           lg.ev[ev_down].t - t_kill, rdmx_status_name(lg.ev[ev_down].status));
    CHECK(lg.ev[ev_down].t - t_kill < 1000.0 * TH_SLOW);
    CHECK(lg.ev[ev_down].status < 0);
    rdmx_channel_stats(ch, &s);
    CHECKF(s.retries >= (uint64_t)idem_pending,
           "stats.retries %llu, %d idempotent calls were pending",
           (unsigned long long)s.retries, idem_pending);

    /* While it is down: calls queue, one-way messages are refused. */
    for (i = 0; i < A_DOWN; i++)
        rec_start_ok(ch, &down[i], i % 2 ? "echo_once" : "echo",
                     i % 4 == 3 ? 200000u : 10u + 7u * i, long_ms, 0);
    CHECK_ST(rdmx_call_oneway(ch, "oneway", "x", 1), RDMX_ERR_BUSY);

    /* The channel keeps trying with backoff (50, 100, 200 ms...). */
    progress_for(w, 600, "A: server down");
    CHECK(rdmx_channel_state(ch) != RDMX_CHANNEL_READY);
    for (i = ev_down + 1; i < lg.n; i++)
        if (!lg.ev[i].breaker && lg.ev[i].value == RDMX_CHANNEL_CONNECTING)
            attempts++;
    for (i = ev_down + 1; i < lg.n; i++)
        if (!lg.ev[i].breaker && lg.ev[i].value == RDMX_CHANNEL_DOWN) {
            th_log("A: reconnect attempt failed: %s",
                   rdmx_status_name(lg.ev[i].status));
            break;
        }
    CHECKF(attempts >= 2, "%d reconnect attempts in 600 ms", attempts);
    for (i = 0; i < A_N; i++)
        if (rec[i].idempotent)
            CHECK(rec[i].cb_calls == 0);
    for (i = 0; i < A_DOWN; i++)
        CHECK(down[i].cb_calls == 0);

    /* Same port, new process: the channel finds it alone. */
    {
        uint16_t port = server.port;
        char addr[64];

        snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);
        server_start(w, addr);
        CHECK(server.port == port);
    }
    t_restart = th_now_ms();
    WAIT_UNTIL(w, rdmx_channel_state(ch) == RDMX_CHANNEL_READY, 10000,
               "channel not READY 10 s after the restart");
    ev_ready = lg.n - 1;
    CHECK(lg.ev[ev_ready].value == RDMX_CHANNEL_READY);
    th_log("A: READY %.0f ms after the restart (%d reconnect attempts "
           "before it)",
           lg.ev[ev_ready].t - t_restart, attempts);
    WAIT_UNTIL(w, recs_done(rec, A_N) && recs_done(down, A_DOWN), 20000,
               "calls still pending 20 s after the restart");
    for (i = 0; i < A_N; i++)
        if (rec[i].idempotent)
            rec_expect_ok(&rec[i], "A retried", (size_t)i);
    for (i = 0; i < A_DOWN; i++)
        rec_expect_ok(&down[i], "A made while down", (size_t)i);
    rdmx_channel_stats(ch, &s);
    th_log("A: stats: calls %llu completed %llu failed %llu retries %llu "
           "reconnects %llu pings %llu queued %llu",
           (unsigned long long)s.calls, (unsigned long long)s.completed,
           (unsigned long long)s.failed, (unsigned long long)s.retries,
           (unsigned long long)s.reconnects, (unsigned long long)s.pings,
           (unsigned long long)s.queued);
    CHECK(s.retries >= (uint64_t)idem_pending);
    CHECK_EQ_U64(s.reconnects, 1);
    CHECK_EQ_U64(s.failed, (uint64_t)failed);

    echo_round(ch, 12, "A after the restart");

    /* READY, DOWN, (CONNECTING, DOWN)*, CONNECTING, READY. */
    evlog_check(&lg);
    for (i = 0; i < lg.n; i++) {
        int want;

        CHECK(!lg.ev[i].breaker);
        if (i == 0 || i == lg.n - 1)
            want = RDMX_CHANNEL_READY;
        else if (i == lg.n - 2)
            want = RDMX_CHANNEL_CONNECTING;
        else
            want = i % 2 ? RDMX_CHANNEL_DOWN : RDMX_CHANNEL_CONNECTING;
        CHECKF(lg.ev[i].value == want, "event %d is %s, want %s", i,
               state_name(lg.ev[i].value), state_name(want));
    }
    CHECK(lg.n >= 5);
    evlog_print(&lg, 0, t_kill);
    rdmx_channel_destroy(ch);
    recs_check_once(rec, A_N, "A");
    recs_check_once(down, A_DOWN, "A down");
    th_log("A: ok (%.0f ms)", th_now_ms() - t0);
}

/* ------------------------------------------------------------------------ */
/* B: backoff while the server stays down                                   */
/* ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define B_MIN  20
#define B_MAX  160
#define B_GAPS 10

static void phase_backoff(rdmx_worker_t *w)
{
    static evlog_t lg;
    rdmx_channel_params_t p;
    rdmx_channel_t *ch;
    double gap[B_GAPS], conn_ms[B_GAPS], t0 = th_now_ms();
    double slack = 75.0 * TH_SLOW, sat_min = 1e9, sat_max = 0, sat[B_GAPS];
    int ngaps = 0, i, nsat = 0;
    rdmx_status_t down_status = RDMX_OK;
    char line[400];
    size_t off = 0;

    th_log("B: backoff %d..%d ms against a dead port", B_MIN, B_MAX);
    CHECK(server.pid < 0);
    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MIN |
                   RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MAX;
    p.backoff_min_ms = B_MIN;
    p.backoff_max_ms = B_MAX;
    ch = channel_new(w, &lg, &p);

    for (;;) {
        /* Gaps DOWN -> CONNECTING; the log alternates DOWN, CONNECTING. */
        ngaps = 0;
        for (i = 0; i + 1 < lg.n && ngaps < B_GAPS; i++)
            if (lg.ev[i].value == RDMX_CHANNEL_DOWN &&
                lg.ev[i + 1].value == RDMX_CHANNEL_CONNECTING) {
                gap[ngaps] = lg.ev[i + 1].t - lg.ev[i].t;
                conn_ms[ngaps] = lg.ev[i].t - (i > 0 ? lg.ev[i - 1].t : t0);
                down_status = lg.ev[i].status;
                ngaps++;
            }
        if (ngaps == B_GAPS)
            break;
        CHECKF(th_now_ms() - t0 < 10000.0 * TH_SLOW,
               "only %d reconnect attempts in 10 s", ngaps);
        wstep(w, 2, "B: reconnect attempts");
    }
    evlog_check(&lg);
    for (i = 0; i < lg.n && i < 2 * B_GAPS; i++) {
        CHECK(!lg.ev[i].breaker);
        CHECKF(lg.ev[i].value ==
                   (i % 2 ? RDMX_CHANNEL_CONNECTING : RDMX_CHANNEL_DOWN),
               "event %d: %s", i, state_name(lg.ev[i].value));
        if (lg.ev[i].value == RDMX_CHANNEL_DOWN)
            CHECKF(is_conn_error(lg.ev[i].status) ||
                       lg.ev[i].status == RDMX_ERR_TIMEOUT,
                   "DOWN because of %s", rdmx_status_name(lg.ev[i].status));
    }
    for (i = 0; i < B_GAPS; i++)
        off +=
            (size_t)snprintf(line + off, sizeof(line) - off, " %.1f", gap[i]);
    th_log("B: gaps DOWN->CONNECTING (ms):%s", line);
    off = 0;
    for (i = 0; i < B_GAPS; i++)
        off += (size_t)snprintf(line + off, sizeof(line) - off, " %.1f",
                                conn_ms[i]);
    th_log("B: connect attempt durations (ms):%s; last status %s", line,
           rdmx_status_name(down_status));

    for (i = 0; i < B_GAPS; i++) {
        double b = B_MIN << i > B_MAX ? B_MAX : B_MIN << i;

        /* Never early (a timer does not fire before its time); late by
         * at most the scheduling slack. */
        CHECKF(gap[i] >= 0.75 * b - 1.0 && gap[i] <= 1.25 * b + slack,
               "gap %d: %.1f ms, backoff %.0f ms +-25 %% allows %.1f..%.1f "
               "(+%.0f ms slack)",
               i, gap[i], b, 0.75 * b, 1.25 * b, slack);
        if (B_MIN << i >= B_MAX) {
            sat[nsat++] = gap[i];
            if (gap[i] < sat_min)
                sat_min = gap[i];
            if (gap[i] > sat_max)
                sat_max = gap[i];
        }
    }
    /* Bounded: the median of the gaps at the maximum is within its
     * jitter (without the cap they would be 240 ms and more). */
    qsort(sat, (size_t)nsat, sizeof(sat[0]), cmp_double);
    CHECKF(sat[nsat / 2] <= 1.25 * B_MAX + 10.0 * TH_SLOW,
           "median gap at the maximum %.1f ms > %.0f", sat[nsat / 2],
           1.25 * B_MAX);
    /* Grows: the saturated gaps are several times the first ones. */
    CHECKF(gap[0] + gap[1] < sat[nsat / 2],
           "backoff does not grow: %.1f %.1f ... median %.1f", gap[0], gap[1],
           sat[nsat / 2]);
    CHECKF(sat_max - sat_min >= 2.0,
           "no jitter: %d gaps at the max all within %.1f ms", nsat,
           sat_max - sat_min);
    rdmx_channel_destroy(ch);
    th_log("B: ok (%.0f ms)", th_now_ms() - t0);
}

/* ------------------------------------------------------------------------ */
/* C: SIGSTOP / SIGCONT                                                     */
/* ------------------------------------------------------------------------ */

#define C_SHORT 4 /* echo_once, 250 ms deadline: time out */
#define C_ONCE  2 /* echo_once, long deadline: fail when the channel drops */
#define C_IDEM  4 /* echo, long deadline: retried after SIGCONT */
#define C_N     (C_SHORT + C_ONCE + C_IDEM)

static void phase_stop_cont(rdmx_worker_t *w)
{
    static evlog_t lg;
    static rec_t rec[C_N];
    rdmx_channel_params_t p;
    rdmx_channel_stats_t s0, s;
    rdmx_channel_t *ch;
    double t_stop, t_down, t_cont, t0 = th_now_ms(), hiccup, bound;
    int i, ev_stop, ev_down, ev;

    th_log("C: SIGSTOP the server (heartbeat 100 ms, timeout 500 ms)");
    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                   RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT |
                   RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT |
                   RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MIN |
                   RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MAX;
    p.field_mask |= RDMX_CHANNEL_PARAM_FIELD_WAIT_FOR_READY;
    p.wait_for_ready = 1; /* idempotent calls ride through the stop */
    p.heartbeat_ms = 100;
    p.heartbeat_timeout_ms = 500;
    p.connect_timeout_ms = 1000;
    p.backoff_min_ms = 50;
    p.backoff_max_ms = 200;
    ch = channel_new(w, &lg, &p);
    CHECK_OK(rdmx_channel_wait_ready(ch, 10000 * TH_SLOW));
    echo_round(ch, 6, "C before the stop");
    /* Idle for a few heartbeats: an idle channel sends no pings (rpc.h),
     * and nothing drops. */
    rdmx_channel_stats(ch, &s0);
    progress_for(w, 600, "C: idle");
    {
        rdmx_channel_stats_t s1;
        rdmx_channel_stats(ch, &s1);
        CHECKF(s1.pings == s0.pings, "%llu pings in 600 ms idle",
               (unsigned long long)(s1.pings - s0.pings));
        s0 = s1;
    }
    CHECK(rdmx_channel_state(ch) == RDMX_CHANNEL_READY);
    echo_round(ch, 1, "C right before the stop");

    ev_stop = lg.n;
    server_signal(SIGSTOP);
    /* (kill() returns before a thread on another CPU has stopped) */
    th_wait_stopped(server.pid, 2000);
    t_stop = th_now_ms();
    hiccup_reset();
    for (i = 0; i < C_N; i++) {
        if (i < C_SHORT)
            rec_start_ok(ch, &rec[i], "echo_once", 100u + i, 250, 0);
        else if (i < C_SHORT + C_ONCE)
            rec_start_ok(ch, &rec[i], "echo_once", 5000u + i, 30000 * TH_SLOW,
                         0);
        else {
            rec_start_ok(ch, &rec[i], "echo", i % 2 ? 300000u : 64u,
                         30000 * TH_SLOW, 0);
            rec[i].idempotent = 1;
        }
    }
    WAIT_UNTIL(w, (ev_down = ev_find(&lg, ev_stop, 0, RDMX_CHANNEL_DOWN)) >= 0,
               3000, "channel not DOWN 3 s after SIGSTOP");
    t_down = lg.ev[ev_down].t;
    th_log("C: channel DOWN %.0f ms after SIGSTOP (%s)", t_down - t_stop,
           rdmx_status_name(lg.ev[ev_down].status));
    CHECKF(ev_down == ev_stop, "state changes before DOWN");
    /* A pause in progress longer than a heartbeat (100 ms) restarts the
     * silence window by design (rpc.h): then allow the pause and another
     * timeout on top. */
    hiccup = hiccup_ms;
    bound = 1000.0 * TH_SLOW + (hiccup > 90.0 ? hiccup + 500.0 : hiccup);
    if (hiccup > 20.0)
        th_log("C: progress paused up to %.0f ms (loaded machine); DOWN "
               "bound %.0f ms",
               hiccup, bound);
    CHECKF(t_down - t_stop >= 450.0 && t_down - t_stop <= bound,
           "DOWN %.0f ms after SIGSTOP; heartbeat timeout is 500 ms, bound "
           "%.0f ms (largest pause in progress %.0f ms)",
           t_down - t_stop, bound, hiccup);
    CHECK_ST(lg.ev[ev_down].status, RDMX_ERR_TIMEOUT);

    for (i = 0; i < C_SHORT; i++) {
        CHECKF(rec[i].cb_calls == 1, "short call #%d: %d callbacks", i,
               rec[i].cb_calls);
        CHECKF(rec[i].status == RDMX_ERR_TIMEOUT,
               "short call #%d: %s (%s), want TIMEOUT", i,
               rdmx_status_name(rec[i].status), rec[i].msg);
        CHECKF(rec[i].t_done - rec[i].t_start >= 249.0 &&
                   rec[i].t_done - rec[i].t_start <=
                       250.0 + 100.0 * TH_SLOW + hiccup,
               "250 ms call timed out after %.0f ms",
               rec[i].t_done - rec[i].t_start);
    }
    th_log("C: 250 ms calls timed out after %.0f ms",
           rec[0].t_done - rec[0].t_start);
    for (i = C_SHORT; i < C_SHORT + C_ONCE; i++) {
        CHECKF(rec[i].cb_calls == 1, "call #%d: %d callbacks", i,
               rec[i].cb_calls);
        CHECKF(rec[i].status == RDMX_ERR_TIMEOUT,
               "non-idempotent call #%d when the channel dropped: %s (%s)", i,
               rdmx_status_name(rec[i].status), rec[i].msg);
        CHECKF(rec[i].t_done - t_down < 50.0 * TH_SLOW + hiccup,
               "call #%d failed %.0f ms after DOWN", i, rec[i].t_done - t_down);
    }
    for (i = C_SHORT + C_ONCE; i < C_N; i++)
        CHECKF(rec[i].cb_calls == 0, "idempotent call #%d ended: %s (%s)", i,
               rdmx_status_name(rec[i].status), rec[i].msg);
    rdmx_channel_stats(ch, &s);
    CHECKF(s.pings > s0.pings, "no ping during the silence");
    CHECK(s.retries >= C_IDEM);

    /* Stay stopped past a connect timeout: no READY can happen. */
    progress_for(w, 1300, "C: server stopped");
    CHECKF(ev_find(&lg, ev_down, 0, RDMX_CHANNEL_READY) < 0,
           "READY while the server is stopped");
    for (ev = ev_down + 1; ev < lg.n; ev++)
        if (lg.ev[ev].value == RDMX_CHANNEL_DOWN)
            th_log("C: reconnect to the stopped server failed after %.0f ms: "
                   "%s",
                   lg.ev[ev].t - lg.ev[ev - 1].t,
                   rdmx_status_name(lg.ev[ev].status));
    CHECK(ev_find(&lg, ev_down, 0, RDMX_CHANNEL_CONNECTING) > ev_down);

    server_signal(SIGCONT);
    t_cont = th_now_ms();
    WAIT_UNTIL(w, rdmx_channel_state(ch) == RDMX_CHANNEL_READY, 10000,
               "channel not READY 10 s after SIGCONT");
    th_log("C: READY %.0f ms after SIGCONT", th_now_ms() - t_cont);
    WAIT_UNTIL(w, recs_done(rec, C_N), 15000,
               "calls pending 15 s after SIGCONT");
    for (i = C_SHORT + C_ONCE; i < C_N; i++)
        rec_expect_ok(&rec[i], "C retried", (size_t)i);
    echo_round(ch, 6, "C after SIGCONT");
    rdmx_channel_stats(ch, &s);
    CHECK(s.reconnects >= 1);
    evlog_check(&lg);
    evlog_print(&lg, 0, t_stop);
    rdmx_channel_destroy(ch);
    recs_check_once(rec, C_N, "C");
    th_log("C: ok (%.0f ms)", th_now_ms() - t0);
}

/* ------------------------------------------------------------------------ */
/* D: circuit breaker                                                       */
/* ------------------------------------------------------------------------ */

#define D_THRESHOLD 3
#define D_OPEN_MS   300

static void phase_breaker(rdmx_worker_t *w)
{
    static evlog_t lg;
    static rec_t r[8], probe, other, fast[5];
    rdmx_channel_params_t p;
    rdmx_channel_stats_t s;
    rdmx_channel_t *ch;
    double t_open, t_half, h_fail, t0 = th_now_ms();
    int i, e_open, e_half, busy = 0;
    rdmx_status_t st;
    char resp[64];
    size_t got;
    static const int want[] = {RDMX_BREAKER_OPEN, RDMX_BREAKER_HALF_OPEN,
                               RDMX_BREAKER_OPEN, RDMX_BREAKER_HALF_OPEN,
                               RDMX_BREAKER_CLOSED};

    th_log("D: circuit breaker, threshold %d, open %d ms", D_THRESHOLD,
           D_OPEN_MS);
    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CHANNEL_PARAM_FIELD_BREAKER_THRESHOLD |
                   RDMX_CHANNEL_PARAM_FIELD_BREAKER_OPEN |
                   RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MIN |
                   RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MAX |
                   RDMX_CHANNEL_PARAM_FIELD_WAIT_FOR_READY;
    p.wait_for_ready = 1; /* calls reach the breaker while the server is
                             down, instead of failing at the channel */
    p.breaker_threshold = D_THRESHOLD;
    p.breaker_open_ms = D_OPEN_MS;
    p.backoff_min_ms = 20;
    p.backoff_max_ms = 100;
    ch = channel_new(w, &lg, &p);
    CHECK_OK(rdmx_channel_wait_ready(ch, 10000 * TH_SLOW));
    echo_round(ch, 2, "D");

    /* A handler's error is an answer: it never trips the breaker. */
    for (i = 0; i < 2 * D_THRESHOLD; i++) {
        st = rdmx_call(ch, "fail", "no", 2, resp, sizeof(resp), NULL, &got);
        CHECK_ST(st, RDMX_ERR_INVALID);
        CHECKF(strstr(rdmx_error_detail(), "fail: no") != NULL,
               "fail's message: %s", rdmx_error_detail());
    }
    CHECK(rdmx_channel_breaker(ch) == RDMX_BREAKER_CLOSED);

    server_kill(w);
    WAIT_UNTIL(w, rdmx_channel_state(ch) != RDMX_CHANNEL_READY, 2000,
               "channel still READY 2 s after the kill");

    /* Consecutive failures: timeouts of calls queued while down. */
    hiccup_reset();
    for (i = 0; i < D_THRESHOLD; i++) {
        CHECKF(rdmx_channel_breaker(ch) == RDMX_BREAKER_CLOSED,
               "breaker %s after %d failures",
               breaker_name(rdmx_channel_breaker(ch)), i);
        rec_start_ok(ch, &r[i], "echo_once", 16, 100, 0);
        WAIT_UNTIL(w, r[i].cb_calls > 0, 3000, "100 ms call pending 3 s");
        CHECKF(r[i].status == RDMX_ERR_TIMEOUT || is_conn_error(r[i].status),
               "call %d with the server dead: %s (%s)", i,
               rdmx_status_name(r[i].status), r[i].msg);
        th_log("D: failure %d: %s after %.0f ms", i + 1,
               rdmx_status_name(r[i].status), r[i].t_done - r[i].t_start);
    }
    /* (the OPEN event is logged just before the third failure's
     * callback runs: a stall of this process between the two, seen as a
     * hiccup of its waits, moves the callback's time on) */
    h_fail = hiccup_ms;
    hiccup_reset();
    CHECK(rdmx_channel_breaker(ch) == RDMX_BREAKER_OPEN);
    e_open = ev_find(&lg, 0, 1, RDMX_BREAKER_OPEN);
    CHECK(e_open >= 0);
    t_open = lg.ev[e_open].t;
    CHECKF(t_open >= r[D_THRESHOLD - 1].t_done - 1.0 - h_fail,
           "OPEN before the third failure (%.1f ms before its callback, "
           "hiccup %.1f ms)",
           r[D_THRESHOLD - 1].t_done - t_open, h_fail);

    /* Open: calls fail at once, synchronously, callback never runs. */
    rdmx_channel_stats(ch, &s);
    {
        uint64_t ff0 = s.fast_failed;
        double ts = th_now_ms();

        for (i = 0; i < 5; i++) {
            st = rec_start(ch, &fast[i], "echo", 8, 5000, 0);
            CHECK_ST(st, RDMX_ERR_BUSY);
            CHECKF(strstr(rdmx_error_detail(), "breaker") != NULL, "detail: %s",
                   rdmx_error_detail());
        }
        st = rdmx_call(ch, "echo", "x", 1, resp, sizeof(resp), NULL, &got);
        CHECK_ST(st, RDMX_ERR_BUSY);
        CHECKF(th_now_ms() - ts < 50.0 * TH_SLOW,
               "6 refused calls took %.1f ms", th_now_ms() - ts);
        progress_for(w, 20, "D: breaker open");
        for (i = 0; i < 5; i++)
            CHECK(fast[i].cb_calls == 0);
        rdmx_channel_stats(ch, &s);
        CHECK_EQ_U64(s.fast_failed - ff0, 6);
    }
    CHECK(rdmx_channel_breaker(ch) == RDMX_BREAKER_OPEN);

    /* Half-open after D_OPEN_MS, by the channel's timer. */
    WAIT_UNTIL(w, rdmx_channel_breaker(ch) == RDMX_BREAKER_HALF_OPEN, 3000,
               "breaker not HALF_OPEN 3 s after it opened");
    e_half = ev_find(&lg, e_open, 1, RDMX_BREAKER_HALF_OPEN);
    CHECK(e_half > e_open);
    t_half = lg.ev[e_half].t;
    th_log("D: OPEN -> HALF_OPEN after %.1f ms", t_half - t_open);
    CHECKF(t_half - t_open >= D_OPEN_MS - 1.0 &&
               t_half - t_open <= D_OPEN_MS + 100.0 * TH_SLOW + hiccup_ms,
           "HALF_OPEN %.1f ms after OPEN, want %d (largest pause in "
           "progress %.0f ms)",
           t_half - t_open, D_OPEN_MS, hiccup_ms);

    /* One probe; a second call is refused; the probe fails: OPEN again. */
    rec_start_ok(ch, &probe, "echo_once", 32, 100, 0);
    CHECK_ST(rec_start(ch, &other, "echo", 32, 100, 0), RDMX_ERR_BUSY);
    WAIT_UNTIL(w, probe.cb_calls > 0, 3000, "probe pending 3 s");
    CHECKF(probe.status == RDMX_ERR_TIMEOUT || is_conn_error(probe.status),
           "probe with the server dead: %s", rdmx_status_name(probe.status));
    CHECK(rdmx_channel_breaker(ch) == RDMX_BREAKER_OPEN);
    progress_for(w, 5, "D: after the probe");
    CHECK(other.cb_calls == 0);

    /* The server comes back; the next probe closes the breaker. */
    {
        char addr[64];

        snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)server.port);
        server_start(w, addr);
    }
    WAIT_UNTIL(w,
               rdmx_channel_state(ch) == RDMX_CHANNEL_READY &&
                   rdmx_channel_breaker(ch) == RDMX_BREAKER_HALF_OPEN,
               10000, "not READY and HALF_OPEN 10 s after the restart (%s/%s)",
               state_name(rdmx_channel_state(ch)),
               breaker_name(rdmx_channel_breaker(ch)));
    rec_start_ok(ch, &probe, "echo", 5000, 5000 * TH_SLOW, 0);
    for (i = 0; i < 3; i++) {
        CHECK_ST(rec_start(ch, &other, "echo", 8, 1000, 0), RDMX_ERR_BUSY);
        busy++;
    }
    WAIT_UNTIL(w, probe.cb_calls > 0, 5000, "probe pending 5 s");
    rec_expect_ok(&probe, "D probe", 0);
    CHECK(rdmx_channel_breaker(ch) == RDMX_BREAKER_CLOSED);
    for (i = 3; i < 8; i++)
        rec_start_ok(ch, &r[i], "echo", 1000u * i, 5000 * TH_SLOW, 0);
    WAIT_UNTIL(w, recs_done(r + 3, 5), 5000, "calls pending 5 s");
    for (i = 3; i < 8; i++)
        rec_expect_ok(&r[i], "D after CLOSED", (size_t)i);
    echo_round(ch, 6, "D after CLOSED");

    evlog_check(&lg);
    {
        int nb = 0;

        for (i = 0; i < lg.n; i++) {
            if (!lg.ev[i].breaker)
                continue;
            CHECKF(nb < 5 && lg.ev[i].value == want[nb],
                   "breaker event %d is %s", nb, breaker_name(lg.ev[i].value));
            nb++;
        }
        CHECKF(nb == 5, "%d breaker events, want 5", nb);
    }
    rdmx_channel_stats(ch, &s);
    th_log("D: stats: fast_failed %llu failed %llu completed %llu, %d BUSY "
           "while the probe flew",
           (unsigned long long)s.fast_failed, (unsigned long long)s.failed,
           (unsigned long long)s.completed, busy);
    CHECK(busy >= 1);
    CHECK_EQ_U64(s.fast_failed, 6 + 1 + busy);
    evlog_print(&lg, 0, t_open);
    rdmx_channel_destroy(ch);
    recs_check_once(r, 3, "D failures");
    recs_check_once(r + 3, 5, "D after");
    th_log("D: ok (%.0f ms)", th_now_ms() - t0);
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* E: fail fast (the default)                                               */
/* ------------------------------------------------------------------------ */

#define E_SPIN 5
#define E_ECHO 5

static void phase_fail_fast(rdmx_worker_t *w)
{
    rec_t rec[E_SPIN + E_ECHO], late;
    rdmx_channel_params_t p;
    rdmx_channel_t *ch;
    evlog_t lg;
    double t_kill, t_call, worst = 0;
    int i, n = 0;
    rdmx_status_t st;
    char addr[64];

    th_log("E: fail fast: kill the server with %d calls in flight",
           E_SPIN + E_ECHO);
    memset(&p, 0, sizeof(p)); /* defaults: fail fast, 3 retries */
    ch = channel_new(w, &lg, &p);
    CHECK_OK(rdmx_channel_wait_ready(ch, 10000 * TH_SLOW));
    echo_round(ch, 2, "E warm-up");
    for (i = 0; i < E_SPIN; i++) /* not idempotent */
        rec_start_ok(ch, &rec[n++], "spin", 5000, 60000 * TH_SLOW, 0);
    for (i = 0; i < E_ECHO; i++) /* idempotent: retried once, then fail */
        rec_start_ok(ch, &rec[n++], "echo", 1000u + (unsigned)i,
                     60000 * TH_SLOW, 0);
    progress_for(w, 50, "E: calls in flight");
    t_kill = server_kill(w);
    WAIT_UNTIL(w, recs_done(rec, (size_t)n), 2000,
               "E: calls still pending 2 s after the kill");
    recs_check_once(rec, (size_t)n, "E");
    for (i = 0; i < n; i++) {
        double after = rec[i].t_done - t_kill;
        if (after > worst)
            worst = after;
        if (i < E_SPIN)
            CHECKF(rec[i].status == RDMX_ERR_CONN_RESET,
                   "E: in-flight spin #%d: %s (%s), want CONN_RESET", i,
                   rdmx_status_name(rec[i].status), rec[i].msg);
        else
            CHECKF(rec[i].status == RDMX_ERR_UNREACHABLE ||
                       rec[i].status == RDMX_ERR_CONN_REFUSED,
                   "E: idempotent echo #%d: %s (%s), want UNREACHABLE after "
                   "the failed reconnect",
                   i, rdmx_status_name(rec[i].status), rec[i].msg);
    }
    th_log("E: every call failed within %.1f ms of the kill", worst);
    CHECKF(worst < 500.0 * TH_SLOW,
           "E: the last call failed %.0f ms after the kill (bound 500 ms)",
           worst);
    /* A call while the channel is down fails at once, and says why. */
    WAIT_UNTIL(w, rdmx_channel_state(ch) == RDMX_CHANNEL_DOWN, 2000,
               "E: channel not DOWN");
    t_call = th_now_ms();
    st = rec_start(ch, &late, "echo", 10, 5000, 0);
    t_call = th_now_ms() - t_call;
    CHECKF(st == RDMX_ERR_UNREACHABLE, "E: call while down: %s, want "
           "UNREACHABLE", rdmx_status_name(st));
    CHECKF(strstr(rdmx_error_detail(), "is down") != NULL,
           "E: detail '%s' does not say the channel is down",
           rdmx_error_detail());
    CHECKF(t_call < 100.0 * TH_SLOW, "E: the refused call took %.1f ms",
           t_call);
    th_log("E: a call while down failed in %.2f ms: %s", t_call,
           rdmx_error_detail());
    /* The channel keeps reconnecting: back to READY with the server. */
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)server.port);
    server_start(w, addr);
    CHECK_OK(rdmx_channel_wait_ready(ch, 10000 * TH_SLOW));
    echo_round(ch, 2, "E after the restart");
    rdmx_channel_destroy(ch);
}

int main(int argc, char **argv)
{
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    int ws;
    double t0;
    /* RPC_FAULTS_PHASES=AC runs only those (for hunting a flake). */
    const char *phases = getenv("RPC_FAULTS_PHASES");

    if (phases == NULL || *phases == '\0')
        phases = "ABCDE";
    if (argc > 1 && strcmp(argv[1], "rpc-server") == 0)
        return trs_main(argc - 2, argv + 2);

    th_init("rpc_faults", 200);
    t0 = th_now_ms();
    th_log("transport %s", th_transport_env());
    launcher_spawn(); /* before any rdmx context */
    server_start(NULL, "127.0.0.1:0");
    ctx = th_context();
    w = th_worker(ctx, 0);
    scratch = th_alloc(SCRATCH);

    if (strchr(phases, 'A'))
        phase_kill_restart(w);
    if (strchr(phases, 'B')) {
        char addr[64];

        server_kill(w);
        phase_backoff(w);
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)server.port);
        server_start(w, addr);
    }
    if (strchr(phases, 'C'))
        phase_stop_cont(w);
    if (strchr(phases, 'D'))
        phase_breaker(w);
    if (strchr(phases, 'E'))
        phase_fail_fast(w);

    ws = server_reap(w, 1);
    th_check_exit_ok("rpc server (SIGTERM)", ws);
    close(launcher.cmd);
    {
        th_proc_t l = {.pid = launcher.pid};

        th_check_exit_ok("launcher", th_wait_exit(&l, 10000));
    }
    close(launcher.reply);
    th_log("longest rdmx_worker_wait overrun: %.0f ms past a %d ms timeout "
           "(%s)",
           overrun.worst_ms, overrun.timeout_ms,
           overrun.where ? overrun.where : "-");
    /* Tens, rarely hundreds of ms when the machine is loaded; seconds
     * are a bug (seen: 15-19 s on shm while UCX kept reporting busy). */
    CHECKF(overrun.worst_ms < 2000.0 * TH_SLOW,
           "rdmx_worker_wait(w, %d) returned %.0f ms after its timeout "
           "(while %s): it must return once the timeout passed",
           overrun.timeout_ms, overrun.worst_ms, overrun.where);
    free(scratch);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    th_log("ok (%.1f s)", (th_now_ms() - t0) / 1000.0);
    return 0;
}
