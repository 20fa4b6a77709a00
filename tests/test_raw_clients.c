/*
 * raw_clients: raw TCP peers on an RPC server's listener port (garbage, an
 * HTTP request, silence, a truncated frame, bad HELLOs) are dropped and
 * counted without disturbing the clients it serves.
 *
 * The server is conn_util's RPC server role (2 workers; its log goes to a
 * file). A caller process (forked before the test creates its rdmx
 * context) calls "echo" on a held channel in a loop (1 s deadline, answer
 * checked byte for byte) and every 10th round opens a fresh channel, calls
 * it and closes it, from before the first raw socket until after the last
 * one is gone. Meanwhile the test process opens raw sockets to the port:
 *
 *   prompt (each must be closed by the server, read() 0 or an error,
 *   within 1 s):
 *     5  x 1 KiB of seeded random bytes (the header is made invalid)
 *     3  x "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
 *     2  x a well-formed frame of an unknown type (9): a REFUSE frame with
 *          RDMX_ERR_PROTO comes back first
 *     1  x a HELLO with a wrong magic, 1 x a HELLO of protocol version 999,
 *          1 x one of version 4 (the one before tcp's larger segments):
 *          REFUSE, RDMX_ERR_PROTO
 *     5  x connect and close at once
 *   held:
 *     20 x nothing at all; the server must not close them within 2 s; then
 *          the test closes 10 of them; the other 10 must be closed by the
 *          server at its 10 s handshake deadline (between 9.5 and 12.5 s)
 *     5  x an 8-byte frame header announcing a 60000-byte HELLO, then
 *          nothing; 3 x the same header and 30000 of the bytes: both
 *          closed at the handshake deadline too.
 *
 * Proven: every one of the caller's calls and fresh channels succeeded
 * (it exits 1 on the first failure, with its detail) and it kept calling
 * throughout (>= 1 call per 100 ms of the run); the server stays up and
 * exits 0 on SIGTERM; the listener's worker counted exactly: proto_errors
 * + the 12 malformed ones, handshakes_failed + every raw socket (12 + 5 +
 * 20 + 8); the server's fd count (the least over 600 ms: the caller's
 * channels come and go) comes back to where it was (+-2).
 */
#define _GNU_SOURCE
#include "conn_util.h"
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORKERS 2

static th_proc_t server;
static char server_log[256];

/* --- the caller ---------------------------------------------------------- */

typedef struct {
    uint64_t calls, fresh;
    double max_ms;
    double run_ms;
} caller_report_t;

typedef struct {
    int ctl; /* read: 'S' stop */
    int out; /* write: 'R' ready, then caller_report_t */
} caller_arg_t;

static int caller_main(void *arg)
{
    const caller_arg_t *a = arg;
    rdmx_context_t *ctx = th_context();
    rdmx_worker_t *w = th_worker(ctx, 0);
    rdmx_channel_t *held = cu_channel(w, server.addr, 5000, -1);
    rdmx_call_params_t cp;
    caller_report_t rep;
    double t_start = th_now_ms();
    unsigned n = 0;
    char c;

    memset(&rep, 0, sizeof(rep));
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = RDMX_CALL_PARAM_FIELD_TIMEOUT;
    cp.timeout_ms = 1000 * TH_SLOW;
    fcntl(a->ctl, F_SETFL, O_NONBLOCK);
    for (;;) {
        char msg[64], back[64];
        size_t len = 0;
        int m = snprintf(msg, sizeof(msg), "call %u", n);
        double t0 = th_now_ms(), dt;

        if (read(a->ctl, &c, 1) == 1 && c == 'S')
            break;
        CHECK_OK(rdmx_call(held, "echo", msg, (size_t)m, back, sizeof(back),
                           &cp, &len));
        CHECKF(len == (size_t)m && memcmp(msg, back, len) == 0,
               "echo '%s' answered '%.*s'", msg, (int)len, back);
        dt = th_now_ms() - t0;
        if (dt > rep.max_ms)
            rep.max_ms = dt;
        rep.calls++;
        if (n == 0)
            CHECK(write(a->out, "R", 1) == 1);
        if (n % 10 == 0) {
            rdmx_channel_t *ch = cu_channel(w, server.addr, 5000, -1);

            m = snprintf(msg, sizeof(msg), "fresh %u", n);
            CHECK_OK(rdmx_call(ch, "echo", msg, (size_t)m, back, sizeof(back),
                               &cp, &len));
            CHECK(len == (size_t)m && memcmp(msg, back, len) == 0);
            rdmx_channel_destroy(ch);
            rep.fresh++;
        }
        n++;
        /* a call every few ms, not a busy loop that starves the server */
        th_progress_for(w, 2);
    }
    rep.run_ms = th_now_ms() - t_start;
    rdmx_channel_destroy(held);
    th_progress_for(w, 20);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    CHECK(write(a->out, &rep, sizeof(rep)) == (ssize_t)sizeof(rep));
    return 0;
}

/* The server's fd count without the transient ones: the minimum over
 * 600 ms (the caller opens and closes a channel every few dozen ms; the
 * channels of cu_worker_stats close asynchronously). */
static int server_fds(rdmx_worker_t *w)
{
    double t0 = th_now_ms();
    int n = th_fd_count(server.pid);

    while (th_now_ms() - t0 < 600.0) {
        int m;

        th_progress_for(w, 10);
        m = th_fd_count(server.pid);
        if (m < n)
            n = m;
    }
    return n;
}

/* --- raw sockets --------------------------------------------------------- */

static int raw_connect(void)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    CHECKF(fd >= 0, "socket: %s", strerror(errno));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(server.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECKF(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
           "connect to the listener: %s", strerror(errno));
    return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        CHECKF(n > 0, "send: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* Read until the server closes the socket or @p timeout_ms pass. Returns
 * the time it took (ms) or -1 on timeout; the bytes that came first go to
 * @p buf (up to @p cap; *got_p). */
static double raw_wait_closed(int fd, int timeout_ms, unsigned char *buf,
                              size_t cap, size_t *got_p)
{
    double t0 = th_now_ms();
    size_t got = 0;

    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(t0 + timeout_ms - th_now_ms());
        unsigned char tmp[512];
        ssize_t n;

        if (left <= 0)
            break;
        if (poll(&p, 1, left) <= 0)
            continue;
        n = recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);
        if (n > 0) {
            size_t k = (size_t)n;

            if (buf != NULL && got < cap) {
                if (k > cap - got)
                    k = cap - got;
                memcpy(buf + got, tmp, k);
                got += k;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (got_p != NULL)
            *got_p = got;
        return th_now_ms() - t0; /* 0: closed; < 0: reset */
    }
    if (got_p != NULL)
        *got_p = got;
    return -1;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* Send @p len bytes on a fresh socket; the server must close it within
 * 1 s. With @p want_refuse, the first bytes back must be a REFUSE frame
 * (type 3) with RDMX_ERR_PROTO. */
static void prompt_case(const char *what, const void *data, size_t len,
                        int want_refuse)
{
    int fd = raw_connect();
    unsigned char back[512];
    size_t got = 0;
    double dt;

    if (len > 0)
        raw_send(fd, data, len);
    else
        shutdown(fd, SHUT_WR);
    dt = raw_wait_closed(fd, 1000 * TH_SLOW, back, sizeof(back), &got);
    CHECKF(dt >= 0, "%s: the server did not close the socket within 1 s", what);
    if (want_refuse) {
        CHECKF(got >= 12 && le32(back) == got - 8 && back[4] == 3 &&
                   back[5] == 0 && back[6] == 0 && back[7] == 0,
               "%s: %zu bytes back, not a REFUSE frame", what, got);
        CHECKF((int32_t)le32(back + 8) == RDMX_ERR_PROTO,
               "%s: REFUSE with status %d, expected RDMX_ERR_PROTO", what,
               (int)(int32_t)le32(back + 8));
        th_log("  %-28s closed after %6.2f ms, REFUSE PROTO \"%.*s\"", what, dt,
               (int)(got - 12), (const char *)back + 12);
    } else {
        th_log("  %-28s closed after %6.2f ms (%zu bytes back)", what, dt, got);
    }
    close(fd);
}

/* A HELLO with @p magic and @p version and a 16-byte "address". */
static size_t make_hello(unsigned char *f, uint32_t magic, uint16_t version)
{
    memset(f, 0, 8 + 32);
    put_le32(f, 32);
    f[4] = 1; /* HELLO */
    put_le32(f + 8, magic);
    f[12] = (unsigned char)version;
    f[13] = (unsigned char)(version >> 8);
    memset(f + 24, 0xab, 16);
    return 8 + 32;
}

#define N_SILENT   20
#define N_HDR_ONLY 5
#define N_HDR_HALF 3

int main(int argc, char **argv)
{
    caller_arg_t ca;
    int ctl[2], out[2], ws, i, fds0, fds1;
    pid_t caller;
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    rdmx_worker_stats_t sum0, w00, sum1, w01;
    caller_report_t rep;
    unsigned char buf[1024], hdr[8];
    static unsigned char half[8 + 30000];
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    int silent[N_SILENT], hdr_only[N_HDR_ONLY], hdr_half[N_HDR_HALF];
    int held_open[N_SILENT + N_HDR_ONLY + N_HDR_HALF], nheld = 0;
    double t_held, t_close[N_SILENT + N_HDR_ONLY + N_HDR_HALF];
    unsigned n_proto = 0, n_failed = 0, closed = 0;
    double t_run;
    char c, st[64];

    if (argc > 1 && strcmp(argv[1], CU_SERVER_ROLE) == 0)
        return cu_server_main(argc - 2, argv + 2);
    th_init("raw_clients", 80);
    cu_log_path(server_log, sizeof(server_log), "raw_clients");
    cu_spawn_logged(&server, server_log, CU_SERVER_ROLE, 30000, "--workers",
                    "2", NULL);

    CHECK(pipe2(ctl, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
    ca.ctl = ctl[0];
    ca.out = out[1];
    caller = cu_fork(caller_main, &ca, 70);
    close(ctl[0]);
    close(out[1]);
    CHECK(read(out[0], &c, 1) == 1 && c == 'R');
    t_run = th_now_ms();

    ctx = th_context();
    w = th_worker(ctx, 0);
    cu_worker_stats(w, server.addr, WORKERS, &sum0, &w00);
    fds0 = server_fds(w);
    th_log("server: %d fds; listener proto_errors %llu handshakes_failed "
           "%llu",
           fds0, (unsigned long long)w00.proto_errors,
           (unsigned long long)w00.handshakes_failed);

    /* prompt ones */
    th_log("sockets the server must close at once:");
    for (i = 0; i < 5; i++) {
        char what[32];

        th_fill(buf, sizeof(buf), th_seed(7, (uint64_t)i, 0));
        buf[7] |= 0x80; /* never a valid header by chance */
        snprintf(what, sizeof(what), "1 KiB of garbage #%d", i);
        prompt_case(what, buf, sizeof(buf), 0);
        n_proto++;
        n_failed++;
    }
    for (i = 0; i < 3; i++) {
        prompt_case("HTTP GET", http, strlen(http), 0);
        n_proto++;
        n_failed++;
    }
    for (i = 0; i < 2; i++) {
        memset(buf, 0, 8 + 16);
        put_le32(buf, 16);
        buf[4] = 9;
        prompt_case("frame of type 9", buf, 8 + 16, 1);
        n_proto++;
        n_failed++;
    }
    prompt_case("HELLO with a wrong magic", buf,
                make_hello(buf, 0x12345678u, 1), 1);
    n_proto++;
    n_failed++;
    /* the right magic (docs/PROTOCOL.md: 0x58444d52), a wrong version */
    prompt_case("HELLO of version 999", buf, make_hello(buf, 0x58444d52u, 999),
                1);
    n_proto++;
    n_failed++;
    /* version 4 received tcp in 64 KiB segments (docs/PROTOCOL.md) */
    prompt_case("HELLO of version 4", buf, make_hello(buf, 0x58444d52u, 4), 1);
    n_proto++;
    n_failed++;
    for (i = 0; i < 5; i++) {
        prompt_case("connect, close", NULL, 0, 0);
        n_failed++;
    }

    /* held ones */
    memset(hdr, 0, sizeof(hdr));
    put_le32(hdr, 60000);
    hdr[4] = 1;
    memcpy(half, hdr, 8);
    th_fill(half + 8, sizeof(half) - 8, 99);
    t_held = th_now_ms();
    for (i = 0; i < N_SILENT; i++)
        silent[i] = raw_connect();
    for (i = 0; i < N_HDR_ONLY; i++) {
        hdr_only[i] = raw_connect();
        raw_send(hdr_only[i], hdr, sizeof(hdr));
    }
    for (i = 0; i < N_HDR_HALF; i++) {
        hdr_half[i] = raw_connect();
        raw_send(hdr_half[i], half, sizeof(half));
    }
    n_failed += N_SILENT + N_HDR_ONLY + N_HDR_HALF;
    th_log("holding %d silent sockets, %d with a bare 60000-byte header, %d "
           "with half the body",
           N_SILENT, N_HDR_ONLY, N_HDR_HALF);
    /* 2 s: nothing of it may be closed yet */
    while (th_now_ms() - t_held < 2000.0) {
        for (i = 0; i < N_SILENT; i++) {
            struct pollfd p = {silent[i], POLLIN, 0};

            CHECKF(poll(&p, 1, 0) == 0,
                   "silent socket %d closed by the server after %.0f ms", i,
                   th_now_ms() - t_held);
        }
        th_sleep_ms(50);
    }
    for (i = 0; i < N_SILENT / 2; i++)
        close(silent[i]);
    th_log("closed %d silent sockets after 2 s; waiting for the server to "
           "close the other %d",
           N_SILENT / 2, N_SILENT / 2 + N_HDR_ONLY + N_HDR_HALF);
    for (i = N_SILENT / 2; i < N_SILENT; i++)
        held_open[nheld++] = silent[i];
    for (i = 0; i < N_HDR_ONLY; i++)
        held_open[nheld++] = hdr_only[i];
    for (i = 0; i < N_HDR_HALF; i++)
        held_open[nheld++] = hdr_half[i];
    for (i = 0; i < nheld; i++)
        t_close[i] = -1;
    while (closed < (unsigned)nheld && th_now_ms() - t_held < 14000.0) {
        struct pollfd p[N_SILENT + N_HDR_ONLY + N_HDR_HALF];

        for (i = 0; i < nheld; i++) {
            p[i].fd = t_close[i] < 0 ? held_open[i] : -1;
            p[i].events = POLLIN;
            p[i].revents = 0;
        }
        if (poll(p, (nfds_t)nheld, 100) <= 0)
            continue;
        for (i = 0; i < nheld; i++) {
            if (t_close[i] >= 0 || p[i].revents == 0)
                continue;
            if (recv(held_open[i], buf, sizeof(buf), MSG_DONTWAIT) > 0)
                th_fail(__FILE__, __LINE__,
                        "held socket %d: data from the "
                        "server",
                        i);
            t_close[i] = th_now_ms() - t_held;
            closed++;
        }
    }
    {
        double lo = 1e9, hi = 0;

        for (i = 0; i < nheld; i++) {
            CHECKF(t_close[i] >= 0,
                   "held socket %d (of %d) still open after "
                   "14 s",
                   i, nheld);
            if (t_close[i] < lo)
                lo = t_close[i];
            if (t_close[i] > hi)
                hi = t_close[i];
            close(held_open[i]);
        }
        th_log("the server closed the %d held sockets %.0f-%.0f ms after "
               "they connected",
               nheld, lo, hi);
        CHECKF(lo >= 9500.0 && hi <= 12500.0 * TH_SLOW,
               "held sockets closed %.0f-%.0f ms after connecting (handshake "
               "deadline 10 s)",
               lo, hi);
    }

    /* counters, fds */
    th_progress_for(w, 200);
    cu_worker_stats(w, server.addr, WORKERS, &sum1, &w01);
    th_log("listener: proto_errors +%llu (expected %u), handshakes_failed "
           "+%llu (expected %u)",
           (unsigned long long)(w01.proto_errors - w00.proto_errors), n_proto,
           (unsigned long long)(w01.handshakes_failed - w00.handshakes_failed),
           n_failed);
    CHECK_EQ_U64(w01.proto_errors - w00.proto_errors, n_proto);
    CHECK_EQ_U64(w01.handshakes_failed - w00.handshakes_failed, n_failed);
    CHECK_EQ_U64(sum1.proto_errors - sum0.proto_errors, n_proto);
    fds1 = server_fds(w);
    th_log("server fds %d -> %d", fds0, fds1);
    CHECKF(abs(fds1 - fds0) <= 2,
           "server fds %d before the raw sockets, %d "
           "after",
           fds0, fds1);

    CHECK(write(ctl[1], "S", 1) == 1);
    ws = cu_wait_pid(caller, 20000);
    if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0))
        th_fail(__FILE__, __LINE__, "the caller ended with %s",
                cu_wstatus_str(ws, st, sizeof(st)));
    CHECK(read(out[0], &rep, sizeof(rep)) == (ssize_t)sizeof(rep));
    th_log("caller: %llu calls and %llu fresh channels in %.1f s, all "
           "answered; slowest call %.1f ms",
           (unsigned long long)rep.calls, (unsigned long long)rep.fresh,
           rep.run_ms / 1e3, rep.max_ms);
    CHECKF((double)rep.calls >= (th_now_ms() - t_run) / 100.0,
           "the caller made only %llu calls in %.0f ms",
           (unsigned long long)rep.calls, th_now_ms() - t_run);

    CHECK(th_alive(&server));
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    th_kill(&server, SIGTERM);
    th_check_exit_ok("server (SIGTERM)", th_wait_exit(&server, 20000));
    unlink(server_log);
    th_log("ok");
    return 0;
}
