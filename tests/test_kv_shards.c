/*
 * kv_shards: one client over three rdmx-kvd servers (include/rdmx/kv.h:
 * jump consistent hashing, replicas, channels that reconnect).
 *
 * - 3,000 keys spread over the servers: each holds 20-47 % of them
 *   (curr_items), exactly the keys rdmx_kv_server_of() names; every key
 *   reads back.
 * - One server is SIGKILLed: every kind of operation on its keys (get, put,
 *   exists, delete, touch, incr, and its part of an mget) fails with an
 *   error that is not NOT_FOUND, each within the client's 1 s timeout plus
 *   slack (no hang); the keys of the other two still read back and take
 *   writes. (Calls that must fail go through clients with a 1 s timeout,
 *   everything else through clients with a 15 s one, so that a busy host
 *   does not fail ordinary calls.)
 * - It is restarted on the same port: the client's channel reconnects by
 *   itself (reconnects counted), the keys it held are gone (NOT_FOUND),
 *   writes and reads on it work, its curr_items counts exactly them; the
 *   other servers' keys are intact.
 * - replicas = 2 (a second client): 1,500 keys, each on its server and the
 *   next (curr_items per server adds up to that); another server is
 *   SIGKILLed; once the client has noticed (its channel is no longer ready),
 *   every key still reads back (from the replica), one by one and by mget;
 *   a write to a key whose first server is dead fails but reaches the
 *   replica, which serves the new value; an mput with the server dead
 *   reports an error for every item with a copy there (first or second)
 *   and stores the others.
 * - Conditional writes with two copies (before that kill): a CAS put with
 *   a stale version is EXISTS, with the version read OK, and the second
 *   copy follows (read from it once the first copy's server is dead); the
 *   same for a delete with a version; rdmx_kv_put_nb refuses CAS with
 *   replicas > 1 (RDMX_ERR_UNSUPPORTED, no callback).
 * - The surviving servers exit 0 on SIGTERM.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <rdmx/kv.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- kvd launcher: the same block in test_kv_ops.c, test_kv_torture.c and
 * test_kv_shards.c (tests/CMakeLists.txt builds each test from one file). --
 *
 * A child forked before the test creates its rdmx context ("launcher") runs
 * every other process on request over a socketpair: rdmx-kvd servers (their
 * "listening on HOST:PORT" line read from a pipe) and one-shot commands such
 * as rdmx-kv. It reaps them and reports wait statuses. So servers can be
 * started, killed and restarted, and the CLI run, at any point of a test
 * without the test process forking once UCX is up. Everything dies with the
 * test (PR_SET_PDEATHSIG on the launcher and on its children). Binaries are
 * taken from the test binary's directory (build/bin or build-asan/bin). */

enum { KL_KVD = 1, KL_WAIT, KL_RUN, KL_ALIVE };

typedef struct {
    int op;
    int pid;
    int timeout_ms;
    char in_path[256];  /* KL_RUN: stdin ("" = /dev/null) */
    char out_path[256]; /* KL_RUN: stdout ("" = /dev/null) */
    char err_path[256]; /* KL_RUN: stderr ("" = the test's stderr) */
    size_t args_len;
    char args[3072]; /* NUL-terminated arguments back to back */
} kl_req_t;

typedef struct {
    int ok; /* 0: failed, text says why */
    int pid;
    int port;
    int wstatus;
    int alive;
    double ms; /* KL_WAIT, KL_RUN: time until it exited */
    char text[2048];
} kl_rep_t;

typedef struct {
    int pid; /* 0 once reaped */
    uint16_t port;
    char addr[64]; /* "127.0.0.1:port" */
} kvd_t;

static int kl_fd = -1;
static char kl_dir[PATH_MAX];
static struct {
    int pid, fd;
} kl_procs[64];

static void kl_exec(const char *path, char **argv, int in, int out, int err)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (in >= 0)
        dup2(in, 0);
    if (out >= 0)
        dup2(out, 1);
    if (err >= 0)
        dup2(err, 2);
    /* Others may be relinking the binary right now (a shared build tree):
     * wait for the linker (ETXTBSY, ENOENT, ENOEXEC, EACCES until it sets
     * the mode) for up to 10 s. */
    for (int i = 0; i < 200; i++) {
        execv(path, argv);
        if (errno != ETXTBSY && errno != ENOENT && errno != ENOEXEC &&
            errno != EACCES)
            break;
        usleep(50000);
    }
    fprintf(stderr, "launcher: exec %s: %s\n", path, strerror(errno));
    _exit(127);
}

static int kl_split(kl_req_t *q, char **argv, int max, char *path0,
                    size_t path_size)
{
    int n = 0;
    size_t off = 0;

    while (off < q->args_len && n < max - 1) {
        argv[n++] = q->args + off;
        off += strlen(q->args + off) + 1;
    }
    argv[n] = NULL;
    if (n == 0)
        return -1;
    {
        size_t a = strlen(kl_dir), b = strlen(argv[0]);
        if (a + 1 + b + 1 > path_size)
            return -1;
        memcpy(path0, kl_dir, a);
        path0[a] = '/';
        memcpy(path0 + a + 1, argv[0], b + 1);
    }
    argv[0] = path0;
    return n;
}

static void kl_read_some(int fd, char *text, size_t size, size_t *len)
{
    for (;;) {
        ssize_t n;
        if (*len + 1 >= size)
            return;
        n = read(fd, text + *len, size - 1 - *len);
        if (n <= 0)
            return;
        *len += (size_t)n;
        text[*len] = '\0';
    }
}

static void kl_do_kvd(kl_req_t *q, kl_rep_t *r)
{
    char path[PATH_MAX], *argv[64];
    int fds[2], slot = -1;
    size_t len = 0;
    double deadline;
    char *p;

    for (int i = 0; i < 64; i++)
        if (kl_procs[i].pid == 0) {
            slot = i;
            break;
        }
    if (slot < 0 || kl_split(q, argv, 64, path, sizeof(path)) < 0 ||
        pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(r->text, sizeof(r->text), "no slot/args/pipe");
        return;
    }
    r->pid = fork();
    if (r->pid == 0)
        kl_exec(path, argv, -1, fds[1], -1);
    close(fds[1]);
    if (r->pid < 0) {
        close(fds[0]);
        snprintf(r->text, sizeof(r->text), "fork: %s", strerror(errno));
        return;
    }
    deadline = th_now_ms() + q->timeout_ms;
    while ((p = strstr(r->text, "listening on ")) == NULL ||
           strchr(p, '\n') == NULL) {
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int left = (int)(deadline - th_now_ms());
        ssize_t n;

        if (left <= 0 || len + 1 >= sizeof(r->text))
            break;
        if (poll(&pfd, 1, left) <= 0)
            continue;
        n = read(fds[0], r->text + len, sizeof(r->text) - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        r->text[len] = '\0';
    }
    if (p != NULL && strchr(p, '\n') != NULL) {
        char *sp = strchr(p + 13, ' '), *nl = strchr(p, '\n'), *colon;
        char *end = sp != NULL && sp < nl ? sp : nl;
        *end = '\0';
        colon = strrchr(p + 13, ':');
        r->port = colon != NULL ? atoi(colon + 1) : 0;
        *end = end == nl ? '\n' : ' ';
    }
    if (r->port <= 0 || r->port > 65535) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, &r->wstatus, 0);
        close(fds[0]);
        r->ok = 0;
        return;
    }
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    kl_procs[slot].pid = r->pid;
    kl_procs[slot].fd = fds[0];
    r->ok = 1;
}

static void kl_forget(int pid, char *text, size_t size)
{
    for (int i = 0; i < 64; i++)
        if (kl_procs[i].pid == pid) {
            size_t len = strlen(text);
            kl_read_some(kl_procs[i].fd, text, size, &len);
            close(kl_procs[i].fd);
            kl_procs[i].pid = 0;
        }
}

static void kl_do_wait(kl_req_t *q, kl_rep_t *r)
{
    double t0 = th_now_ms();

    for (;;) {
        pid_t w = waitpid(q->pid, &r->wstatus, WNOHANG);
        if (w == q->pid) {
            r->ok = 1;
            r->ms = th_now_ms() - t0;
            kl_forget(q->pid, r->text, sizeof(r->text));
            return;
        }
        if (w < 0 || th_now_ms() - t0 > q->timeout_ms) {
            snprintf(r->text, sizeof(r->text), "pid %d did not exit in %d ms",
                     q->pid, q->timeout_ms);
            return;
        }
        th_sleep_ms(2);
    }
}

static void kl_do_run(kl_req_t *q, kl_rep_t *r)
{
    char path[PATH_MAX], *argv[64];
    int in, out, err = -1;
    double t0 = th_now_ms();

    if (kl_split(q, argv, 64, path, sizeof(path)) < 0) {
        snprintf(r->text, sizeof(r->text), "no command");
        return;
    }
    in = open(q->in_path[0] ? q->in_path : "/dev/null", O_RDONLY | O_CLOEXEC);
    out = open(q->out_path[0] ? q->out_path : "/dev/null",
               O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (q->err_path[0])
        err = open(q->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (in < 0 || out < 0 || (q->err_path[0] && err < 0)) {
        snprintf(r->text, sizeof(r->text), "open: %s", strerror(errno));
        return;
    }
    r->pid = fork();
    if (r->pid == 0)
        kl_exec(path, argv, in, out, err);
    close(in);
    close(out);
    if (err >= 0)
        close(err);
    for (;;) {
        pid_t w = waitpid(r->pid, &r->wstatus, WNOHANG);
        if (w == r->pid) {
            r->ok = 1;
            break;
        }
        if (w < 0 || th_now_ms() - t0 > q->timeout_ms) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, &r->wstatus, 0);
            snprintf(r->text, sizeof(r->text), "%s ran over %d ms", argv[0],
                     q->timeout_ms);
            break;
        }
        th_sleep_ms(2);
    }
    r->ms = th_now_ms() - t0;
}

static void kl_serve(int fd)
{
    static kl_req_t q;
    static kl_rep_t r;

    for (;;) {
        ssize_t n = recv(fd, &q, sizeof(q), 0);
        if (n != (ssize_t)sizeof(q))
            _exit(0);
        memset(&r, 0, sizeof(r));
        switch (q.op) {
        case KL_KVD:
            kl_do_kvd(&q, &r);
            break;
        case KL_WAIT:
            kl_do_wait(&q, &r);
            break;
        case KL_RUN:
            kl_do_run(&q, &r);
            break;
        case KL_ALIVE:
            r.ok = 1;
            r.alive = waitpid(q.pid, &r.wstatus, WNOHANG) == 0;
            if (!r.alive)
                kl_forget(q.pid, r.text, sizeof(r.text));
            break;
        default:
            break;
        }
        if (send(fd, &r, sizeof(r), MSG_NOSIGNAL) != (ssize_t)sizeof(r))
            _exit(0);
    }
}

/* Fork the launcher; call before th_context(). */
static void kl_start(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    int sv[2];
    pid_t parent = getpid(), pid;

    CHECKF(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = '\0';
    snprintf(kl_dir, sizeof(kl_dir), "%s", dirname(exe));
    CHECKF(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0,
           "socketpair: %s", strerror(errno));
    fflush(NULL);
    pid = fork();
    CHECKF(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        alarm(0);
        close(sv[0]);
        kl_serve(sv[1]);
        _exit(0);
    }
    close(sv[1]);
    kl_fd = sv[0];
}

static void kl_call(kl_req_t *q, kl_rep_t *r)
{
    struct pollfd pfd = {kl_fd, POLLIN, 0};

    CHECKF(send(kl_fd, q, sizeof(*q), MSG_NOSIGNAL) == (ssize_t)sizeof(*q),
           "launcher send: %s", strerror(errno));
    CHECKF(poll(&pfd, 1, q->timeout_ms + 30000) == 1, "launcher: no answer");
    CHECKF(recv(kl_fd, r, sizeof(*r), 0) == (ssize_t)sizeof(*r),
           "launcher recv: %s", strerror(errno));
}

static void kl_args(kl_req_t *q, const char *first, va_list ap)
{
    const char *a;

    q->args_len = 0;
    for (a = first; a != NULL; a = va_arg(ap, const char *)) {
        size_t l = strlen(a) + 1;
        CHECKF(q->args_len + l <= sizeof(q->args), "arguments too long");
        memcpy(q->args + q->args_len, a, l);
        q->args_len += l;
    }
}

/* Start rdmx-kvd listening on @listen (NULL: 127.0.0.1:0, a free port) with
 * the NULL-terminated options that follow. Returns 0, or -1 (with @why) if it
 * exited or printed no address in time. */
__attribute__((unused)) static int
kvd_try_start(kvd_t *k, const char *listen, char *why, size_t why_size, ...)
{
    static kl_req_t q;
    static kl_rep_t r;
    va_list ap;
    size_t l;

    memset(&q, 0, sizeof(q));
    q.op = KL_KVD;
    q.timeout_ms = 20000 * TH_SLOW;
    va_start(ap, why_size);
    kl_args(&q, "rdmx-kvd", ap);
    va_end(ap);
    l = strlen("--listen") + 1;
    /* append --listen ADDR */
    memcpy(q.args + q.args_len, "--listen", l);
    q.args_len += l;
    l = strlen(listen ? listen : "127.0.0.1:0") + 1;
    memcpy(q.args + q.args_len, listen ? listen : "127.0.0.1:0", l);
    q.args_len += l;
    kl_call(&q, &r);
    if (!r.ok) {
        snprintf(why, why_size, "rdmx-kvd did not start (wait status 0x%x): %s",
                 r.wstatus, r.text);
        return -1;
    }
    k->pid = r.pid;
    k->port = (uint16_t)r.port;
    snprintf(k->addr, sizeof(k->addr), "127.0.0.1:%d", r.port);
    return 0;
}

#define kvd_start(k, listen, ...)                                              \
    do {                                                                       \
        char kvd_why_[2200];                                                   \
        if (kvd_try_start((k), (listen), kvd_why_, sizeof(kvd_why_),           \
                          __VA_ARGS__) != 0)                                   \
            th_fail(__FILE__, __LINE__, "%s", kvd_why_);                       \
    } while (0)

/* Wait up to @timeout_ms for @k to exit: its wait status; its remaining
 * stdout into @out (may be NULL); how long it took into *ms_p (may be
 * NULL). Fails the test if it does not exit. */
__attribute__((unused)) static int kvd_wait(kvd_t *k, int timeout_ms, char *out,
                                            size_t out_size, double *ms_p)
{
    static kl_req_t q;
    static kl_rep_t r;

    memset(&q, 0, sizeof(q));
    q.op = KL_WAIT;
    q.pid = k->pid;
    q.timeout_ms = timeout_ms;
    CHECK(k->pid > 0);
    kl_call(&q, &r);
    CHECKF(r.ok, "rdmx-kvd %s: %s", k->addr, r.text);
    k->pid = 0;
    if (out != NULL)
        snprintf(out, out_size, "%s", r.text);
    if (ms_p != NULL)
        *ms_p = r.ms;
    return r.wstatus;
}

/* Has @k exited? If so (reaped now): 1, its wait status in *ws_p and the
 * rest of its stdout in @out (both may be NULL). */
__attribute__((unused)) static int kvd_exited(kvd_t *k, int *ws_p, char *out,
                                              size_t out_size)
{
    static kl_req_t q;
    static kl_rep_t r;

    if (k->pid <= 0)
        return 1;
    memset(&q, 0, sizeof(q));
    q.op = KL_ALIVE;
    q.pid = k->pid;
    q.timeout_ms = 1000;
    kl_call(&q, &r);
    if (r.alive)
        return 0;
    k->pid = 0;
    if (ws_p != NULL)
        *ws_p = r.wstatus;
    if (out != NULL)
        snprintf(out, out_size, "%s", r.text);
    return 1;
}

__attribute__((unused)) static int kvd_alive(kvd_t *k)
{
    int ws = 0;

    if (k->pid <= 0)
        return 0;
    if (!kvd_exited(k, &ws, NULL, 0))
        return 1;
    th_log("rdmx-kvd %s exited: wait status 0x%x", k->addr, ws);
    return 0;
}

__attribute__((unused)) static void kvd_kill(kvd_t *k, int sig)
{
    CHECK(k->pid > 0);
    CHECKF(kill(k->pid, sig) == 0, "kill: %s", strerror(errno));
}

/* SIGTERM @k and check it exits 0 within 10 s. */
__attribute__((unused)) static void kvd_stop(kvd_t *k)
{
    int ws;

    if (k->pid <= 0)
        return;
    kvd_kill(k, SIGTERM);
    ws = kvd_wait(k, 10000 * TH_SLOW, NULL, 0, NULL);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
           "rdmx-kvd %s: wait status 0x%x after SIGTERM", k->addr, ws);
}

/* "name value" line of a stats text. */
__attribute__((unused)) static uint64_t stat_of(const char *text,
                                                const char *name)
{
    size_t l = strlen(name);
    const char *p = text;

    while ((p = strstr(p, name)) != NULL) {
        if ((p == text || p[-1] == '\n') && p[l] == ' ')
            return strtoull(p + l + 1, NULL, 10);
        p += l;
    }
    th_fail(__FILE__, __LINE__, "no '%s' in the stats:\n%s", name, text);
}

/* ---- end of the launcher block ---------------------------------------- */

#define NS    3
#define NKEYS 3000
#define NREP  1500
/* the timeout of the clients that call dead servers */
#define TIMEOUT (TH_SANITIZED ? 2000 : 1000)
/* the timeout of the clients for everything else (a busy host may stall a
 * single call for a while) */
#define PATIENT (15000 * TH_SLOW)
/* an operation on a dead server must end within this */
#define BOUND (TIMEOUT + 2000.0 * TH_SLOW)

static kvd_t srv[NS];
static int soft_failures; /* checks that let the test go on */
static int nb_calls;

static void nb_cb(rdmx_status_t st, const rdmx_kv_meta_t *meta, void *arg)
{
    (void)st;
    (void)meta;
    (*(int *)arg)++;
}
static rdmx_worker_t *worker;

static size_t make_value(char *buf, const char *prefix, int i, int gen)
{
    size_t len = 16 + (size_t)(th_seed((uint64_t)i, (uint64_t)gen, 5) % 48);

    th_fill(buf, len, th_seed((uint64_t)i, (uint64_t)gen, (uint64_t)prefix[0]));
    return len;
}

static void key_of(char *key, size_t size, const char *prefix, int i)
{
    snprintf(key, size, "%s:%d", prefix, i);
}

static rdmx_kv_t *client(const char *servers, unsigned replicas, int timeout_ms)
{
    rdmx_kv_params_t p;
    rdmx_kv_t *kv = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_KV_FIELD_TIMEOUT | RDMX_KV_FIELD_REPLICAS;
    p.timeout_ms = timeout_ms;
    p.replicas = replicas;
    CHECK_OK(rdmx_kv_create(worker, servers, &p, &kv));
    CHECK_OK(rdmx_kv_wait_ready(kv, 20000 * TH_SLOW));
    CHECK(rdmx_kv_servers(kv) == NS);
    return kv;
}

static uint64_t items_on(rdmx_kv_t *kv, unsigned s)
{
    char st[4096];

    CHECK_OK(rdmx_kv_stats(kv, s, st, sizeof(st)));
    return stat_of(st, "curr_items");
}

/* Read @key and compare with generation @gen of the value. */
static void expect_value(rdmx_kv_t *kv, const char *prefix, int i, int gen)
{
    char key[32], want[64], got[64];
    size_t len = make_value(want, prefix, i, gen);
    rdmx_kv_meta_t m;

    key_of(key, sizeof(key), prefix, i);
    memset(&m, 0, sizeof(m));
    CHECK_OK(rdmx_kv_get(kv, key, strlen(key), got, sizeof(got), NULL, &m));
    CHECKF(m.length == len && memcmp(got, want, len) == 0,
           "%s: %zu bytes, not the %zu bytes written", key, m.length, len);
}

static void put_value(rdmx_kv_t *kv, const char *prefix, int i, int gen)
{
    char key[32], v[64];
    size_t len = make_value(v, prefix, i, gen);

    key_of(key, sizeof(key), prefix, i);
    CHECK_OK(rdmx_kv_put(kv, key, strlen(key), v, len, NULL, NULL, NULL));
}

/* Run @st's operation, check it failed with a transport error in time. */
#define EXPECT_DEAD(what, expr)                                                \
    do {                                                                       \
        double t0_ = th_now_ms(), dt_;                                         \
        rdmx_status_t st_ = (expr);                                            \
        dt_ = th_now_ms() - t0_;                                               \
        th_log("  %-28s -> %s after %.0f ms (%s)", what,                       \
               rdmx_status_name(st_), dt_, rdmx_error_detail());               \
        CHECKF(st_ < 0 && st_ != RDMX_ERR_NOT_FOUND,                           \
               "%s on a dead server returned %s", what,                        \
               rdmx_status_name(st_));                                         \
        CHECKF(dt_ < BOUND, "%s on a dead server took %.0f ms", what, dt_);    \
    } while (0)

/* Progress until @ch's state is (or, with @not, is no longer) @state. */
static double wait_state(rdmx_channel_t *ch, rdmx_channel_state_t state,
                         int not, int timeout_ms, const char *what)
{
    double t0 = th_now_ms();

    while ((rdmx_channel_state(ch) == state) == not ) {
        CHECKF(th_now_ms() - t0 < timeout_ms * TH_SLOW,
               "%s: channel state %d after %d ms", what,
               (int)rdmx_channel_state(ch), timeout_ms * TH_SLOW);
        rdmx_worker_wait(worker, 10);
    }
    return th_now_ms() - t0;
}

static void kill_server(int s)
{
    int ws;

    kvd_kill(&srv[s], SIGKILL);
    ws = kvd_wait(&srv[s], 10000 * TH_SLOW, NULL, 0, NULL);
    CHECKF(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
           "server %d: wait status 0x%x", s, ws);
}

int main(void)
{
    char servers[256], key[32], why[2200], port[32];
    rdmx_context_t *ctx;
    rdmx_kv_t *kv, *kv2, *kvq, *kv2q; /* patient and quick clients */
    unsigned owner[NKEYS], rep_owner[NREP];
    uint64_t count[NS] = {0}, items[NS];
    const int victim = 1, victim2 = 0;
    int vkeys[3], nv = 0, nputs = 0, kcas = -1, kdel = -1;
    double t0, dt;

    th_init("kv_shards", 170);
    t0 = th_now_ms();
    kl_start();
    for (int s = 0; s < NS; s++)
        kvd_start(&srv[s], NULL, "--workers", "1", "--memory", "16m", NULL);
    snprintf(servers, sizeof(servers), "%s,%s,%s", srv[0].addr, srv[1].addr,
             srv[2].addr);
    th_log("servers %s (transport %s)", servers, th_transport_env());
    ctx = th_context();
    worker = th_worker(ctx, 0);
    kv = client(servers, 1, PATIENT);
    kvq = client(servers, 1, TIMEOUT);

    /* --- spread ---------------------------------------------------------- */
    for (int i = 0; i < NKEYS; i++) {
        key_of(key, sizeof(key), "k", i);
        owner[i] = rdmx_kv_server_of(kv, key, strlen(key));
        CHECK(owner[i] < NS);
        count[owner[i]]++;
        put_value(kv, "k", i, 0);
    }
    for (int s = 0; s < NS; s++) {
        items[s] = items_on(kv, (unsigned)s);
        th_log("server %d: %" PRIu64 " items (%.1f %%), %" PRIu64
               " keys mapped to it",
               s, items[s], 100.0 * (double)items[s] / NKEYS, count[s]);
        CHECK_EQ_U64(items[s], count[s]);
        CHECKF(items[s] >= NKEYS * 20 / 100 && items[s] <= NKEYS * 47 / 100,
               "server %d holds %" PRIu64 " of %d keys", s, items[s], NKEYS);
    }
    for (int i = 0; i < NKEYS; i++)
        expect_value(kv, "k", i, 0);
    th_log("spread: ok (%.1f s)", (th_now_ms() - t0) / 1000);

    /* --- kill one -------------------------------------------------------- */
    for (int i = 0; i < NKEYS && nv < 3; i++)
        if (owner[i] == (unsigned)victim)
            vkeys[nv++] = i;
    CHECK(nv == 3);
    kill_server(victim);
    {
        char k0[32], v[64], buf[64];
        rdmx_kv_meta_t m;
        uint64_t n;

        key_of(k0, sizeof(k0), "k", vkeys[0]);
        EXPECT_DEAD("get", rdmx_kv_get(kvq, k0, strlen(k0), buf, sizeof(buf),
                                       NULL, &m));
        EXPECT_DEAD("put", rdmx_kv_put(kvq, k0, strlen(k0), v,
                                       make_value(v, "k", vkeys[0], 1), NULL,
                                       NULL, NULL));
        key_of(k0, sizeof(k0), "k", vkeys[1]);
        EXPECT_DEAD("exists", rdmx_kv_exists(kvq, k0, strlen(k0)));
        EXPECT_DEAD("delete", rdmx_kv_delete(kvq, k0, strlen(k0), 0));
        key_of(k0, sizeof(k0), "k", vkeys[2]);
        EXPECT_DEAD("touch", rdmx_kv_touch(kvq, k0, strlen(k0), 1000));
        EXPECT_DEAD("incr", rdmx_kv_incr(kvq, k0, strlen(k0), 1, 0, &n));
        dt = wait_state(rdmx_kv_channel(kvq, victim), RDMX_CHANNEL_READY, 1,
                        5000, "dead server");
        th_log("  channel to the dead server: state %d",
               (int)rdmx_channel_state(rdmx_kv_channel(kvq, victim)));
        (void)dt;
    }
    /* the others: every key reads back, writes work */
    {
        double t1 = th_now_ms();
        int n = 0;
        for (int i = 0; i < NKEYS; i++)
            if (owner[i] != (unsigned)victim) {
                expect_value(kv, "k", i, 0);
                n++;
            }
        for (int i = 0; i < NKEYS; i += 10)
            if (owner[i] != (unsigned)victim) {
                put_value(kv, "k", i, 2);
                expect_value(kv, "k", i, 2);
                put_value(kv, "k", i, 0);
            }
        th_log("  %d keys on the live servers read back in %.0f ms", n,
               th_now_ms() - t1);
    }
    /* an mget over all three: the dead server's part fails */
    {
        enum { M = 30 };
        static char mk[M][32], out[M][64];
        rdmx_kv_mget_t g[M];
        int idx[M], n = 0;
        double t1 = th_now_ms();
        rdmx_status_t st;

        memset(g, 0, sizeof(g));
        for (int i = 0; i < NKEYS && n < M; i++)
            if ((int)owner[i] == n % NS) {
                idx[n] = i;
                key_of(mk[n], sizeof(mk[n]), "k", i);
                g[n].key = mk[n];
                g[n].klen = strlen(mk[n]);
                g[n].buf = out[n];
                g[n].capacity = sizeof(out[n]);
                n++;
            }
        st = rdmx_kv_mget(kvq, g, M);
        th_log("  mget over all servers: %s after %.0f ms",
               rdmx_status_name(st), th_now_ms() - t1);
        CHECKF(st < 0 && st != RDMX_ERR_NOT_FOUND,
               "mget with a dead server returned %s", rdmx_status_name(st));
        CHECKF(th_now_ms() - t1 < BOUND, "mget took %.0f ms", th_now_ms() - t1);
        for (int k = 0; k < M; k++) {
            if (owner[idx[k]] == (unsigned)victim) {
                CHECKF(g[k].status < 0 && g[k].status != RDMX_ERR_NOT_FOUND,
                       "mget item on the dead server: %s",
                       rdmx_status_name(g[k].status));
            } else {
                char want[64];
                size_t len = make_value(want, "k", idx[k], 0);
                CHECKF(g[k].status == RDMX_OK && g[k].meta.length == len &&
                           memcmp(out[k], want, len) == 0,
                       "mget item %d on a live server: %s", k,
                       rdmx_status_name(g[k].status));
            }
        }
    }
    th_log("kill: ok (%.1f s)", (th_now_ms() - t0) / 1000);

    /* --- restart on the same port --------------------------------------- */
    snprintf(port, sizeof(port), "127.0.0.1:%u", (unsigned)srv[victim].port);
    {
        double t1 = th_now_ms();
        while (kvd_try_start(&srv[victim], port, why, sizeof(why), "--workers",
                             "1", "--memory", "16m", NULL) != 0) {
            CHECKF(th_now_ms() - t1 < 15000.0 * TH_SLOW, "restart on %s: %s",
                   port, why);
            th_log("  restart on %s failed, retrying: %s", port, why);
            th_progress_for(worker, 200);
        }
    }
    CHECK(strcmp(srv[victim].addr, port) == 0);
    dt = wait_state(rdmx_kv_channel(kv, victim), RDMX_CHANNEL_READY, 0, 15000,
                    "restarted server");
    th_log("  channel ready %.0f ms after the restart", dt);
    {
        rdmx_channel_stats_t cs;
        char buf[64];
        rdmx_kv_meta_t m;

        rdmx_channel_stats(rdmx_kv_channel(kv, victim), &cs);
        CHECKF(cs.reconnects >= 1, "reconnects %" PRIu64, cs.reconnects);
        for (int i = 0; i < NKEYS; i++) {
            if (owner[i] != (unsigned)victim)
                continue;
            key_of(key, sizeof(key), "k", i);
            CHECK_ST(
                rdmx_kv_get(kv, key, strlen(key), buf, sizeof(buf), NULL, &m),
                RDMX_ERR_NOT_FOUND);
            if (i % 3 == 0) {
                put_value(kv, "k", i, 3);
                expect_value(kv, "k", i, 3);
                nputs++;
            }
        }
        CHECK_EQ_U64(items_on(kv, victim), nputs);
        for (int i = 0; i < NKEYS; i++)
            if (owner[i] != (unsigned)victim)
                expect_value(kv, "k", i, 0);
        th_log("restart: ok: %d keys written to the restarted server "
               "(%.1f s)",
               nputs, (th_now_ms() - t0) / 1000);
    }

    /* --- replicas = 2 --------------------------------------------------- */
    CHECK_OK(rdmx_kv_flush(kv));
    kv2 = client(servers, 2, PATIENT);
    kv2q = client(servers, 2, TIMEOUT);
    memset(count, 0, sizeof(count));
    for (int i = 0; i < NREP; i++) {
        key_of(key, sizeof(key), "r", i);
        rep_owner[i] = rdmx_kv_server_of(kv2, key, strlen(key));
        count[rep_owner[i]]++;
        count[(rep_owner[i] + 1) % NS]++;
        put_value(kv2, "r", i, 0);
    }
    for (int s = 0; s < NS; s++) {
        items[s] = items_on(kv2, (unsigned)s);
        th_log("replicas: server %d holds %" PRIu64 " items", s, items[s]);
        CHECK_EQ_U64(items[s], count[s]);
    }
    /* conditional writes with two copies: the first copy decides, both
     * follow (checked on the second copy once the first is dead) */
    for (int i = 0; i < NREP; i++) {
        if (rep_owner[i] != (unsigned)victim2)
            continue;
        if (kcas < 0) {
            kcas = i;
        } else {
            kdel = i;
            break;
        }
    }
    CHECK(kcas >= 0 && kdel >= 0);
    {
        char buf[64], v[64];
        rdmx_kv_meta_t m;
        rdmx_kv_put_opts_t o = {RDMX_KV_PUT_CAS, 0, 0, 0};
        rdmx_status_t st;
        size_t len = make_value(v, "r", kcas, 1);
        uint64_t cas = 0;

        key_of(key, sizeof(key), "r", kcas);
        CHECK_OK(
            rdmx_kv_get(kv2, key, strlen(key), buf, sizeof(buf), NULL, &m));
        o.cas = m.cas + 1000; /* stale: refused, nothing changes */
        CHECK_ST(rdmx_kv_put(kv2, key, strlen(key), v, len, NULL, &o, NULL),
                 RDMX_ERR_EXISTS);
        o.cas = m.cas;
        st = rdmx_kv_put(kv2, key, strlen(key), v, len, NULL, &o, &cas);
        th_log("  CAS put with the version read (%" PRIu64 "), replicas 2: "
               "%s",
               m.cas, rdmx_status_name(st));
        if (st != RDMX_OK) {
            th_log("FAIL %s:%d (continuing): a CAS put with the current "
                   "version, replicas 2, returned %s (%s)",
                   __FILE__, __LINE__, rdmx_status_name(st),
                   rdmx_error_detail());
            soft_failures++;
        }
        expect_value(kv2, "r", kcas, 1);
        /* the non-blocking form refuses conditional writes with copies */
        st = rdmx_kv_put_nb(kv2, key, strlen(key), v, len, NULL, &o, nb_cb,
                            &nb_calls);
        CHECKF(st == RDMX_ERR_UNSUPPORTED,
               "rdmx_kv_put_nb CAS with replicas 2: %s", rdmx_status_name(st));
        /* a delete with the version read */
        key_of(key, sizeof(key), "r", kdel);
        CHECK_OK(
            rdmx_kv_get(kv2, key, strlen(key), buf, sizeof(buf), NULL, &m));
        CHECK_ST(rdmx_kv_delete(kv2, key, strlen(key), m.cas + 1000),
                 RDMX_ERR_EXISTS);
        st = rdmx_kv_delete(kv2, key, strlen(key), m.cas);
        if (st != RDMX_OK) {
            th_log("FAIL %s:%d (continuing): a delete with the current "
                   "version, replicas 2, returned %s (%s)",
                   __FILE__, __LINE__, rdmx_status_name(st),
                   rdmx_error_detail());
            soft_failures++;
        }
        CHECK_ST(rdmx_kv_exists(kv2, key, strlen(key)), RDMX_ERR_NOT_FOUND);
        th_progress_for(worker, 20);
        CHECKF(nb_calls == 0, "a refused put_nb ran its callback");
    }
    kill_server(victim2);
    /* (the patient client's heartbeat allows 15 s of silence; a killed
     * server is normally found at once through its closed connection) */
    dt = wait_state(rdmx_kv_channel(kv2, victim2), RDMX_CHANNEL_READY, 1, 20000,
                    "dead server (replicas)");
    dt += wait_state(rdmx_kv_channel(kv2q, victim2), RDMX_CHANNEL_READY, 1,
                     5000, "dead server (replicas, quick client)");
    th_log("  the clients noticed the dead server after %.0f ms", dt);
    {
        double t1 = th_now_ms();
        char buf[64];
        rdmx_kv_meta_t m;
        for (int i = 0; i < NREP; i++)
            if (i != kdel)
                expect_value(kv2, "r", i, i == kcas ? 1 : 0);
        /* the second copies followed the conditional write and delete */
        key_of(key, sizeof(key), "r", kdel);
        if (rdmx_kv_get(kv2, key, strlen(key), buf, sizeof(buf), NULL, &m) !=
            RDMX_ERR_NOT_FOUND) {
            th_log("FAIL %s:%d (continuing): r:%d, deleted with its version, "
                   "is still on its second copy",
                   __FILE__, __LINE__, kdel);
            soft_failures++;
        }
        th_log("  all %d keys read back in %.0f ms", NREP, th_now_ms() - t1);
        CHECKF(th_now_ms() - t1 < 20000.0 * TH_SLOW, "reads took %.0f ms",
               th_now_ms() - t1);
    }
    {
        rdmx_kv_mget_t *g = th_alloc(NREP * sizeof(*g));
        static char mk[NREP][32], out[NREP][64];
        rdmx_status_t st;

        memset(g, 0, NREP * sizeof(*g));
        for (int i = 0; i < NREP; i++) {
            key_of(mk[i], sizeof(mk[i]), "r", i);
            g[i].key = mk[i];
            g[i].klen = strlen(mk[i]);
            g[i].buf = out[i];
            g[i].capacity = sizeof(out[i]);
        }
        st = rdmx_kv_mget(kv2, g, NREP);
        for (int i = 0; i < NREP; i++) {
            char want[64];
            size_t len = make_value(want, "r", i, i == kcas ? 1 : 0);
            if (i == kdel) {
                CHECKF(g[i].status == RDMX_ERR_NOT_FOUND,
                       "mget of the deleted r:%d: %s", i,
                       rdmx_status_name(g[i].status));
                continue;
            }
            CHECKF(g[i].status == RDMX_OK && g[i].meta.length == len &&
                       memcmp(out[i], want, len) == 0,
                   "mget r:%d with one replica dead: %s", i,
                   rdmx_status_name(g[i].status));
        }
        CHECK(st == RDMX_OK || st == RDMX_ERR_NOT_FOUND);
        free(g);
    }
    /* a write to a key whose first server is dead: fails, reaches the
     * replica */
    for (int i = 0; i < NREP; i++) {
        if (rep_owner[i] != (unsigned)victim2 || i == kcas || i == kdel)
            continue;
        char v[64];
        size_t len = make_value(v, "r", i, 1);
        key_of(key, sizeof(key), "r", i);
        EXPECT_DEAD(
            "put, first replica dead",
            rdmx_kv_put(kv2q, key, strlen(key), v, len, NULL, NULL, NULL));
        expect_value(kv2, "r", i, 1);
        break;
    }
    /* mput with a dead server: the items it should hold (as first or
     * second copy) report an error, the others are stored */
    {
        enum { M = 60 };
        static char mk[M][32], mv[M][64];
        rdmx_kv_mput_t p[M];
        int bad_ok = 0, good_bad = 0;
        double t1 = th_now_ms();
        rdmx_status_t st;

        memset(p, 0, sizeof(p));
        for (int i = 0; i < M; i++) {
            key_of(mk[i], sizeof(mk[i]), "r", i);
            p[i].key = mk[i];
            p[i].klen = strlen(mk[i]);
            p[i].value = mv[i];
            p[i].vlen = make_value(mv[i], "r", i, 2);
        }
        st = rdmx_kv_mput(kv2q, p, M);
        th_log("  mput of %d keys with a server dead: %s after %.0f ms", M,
               rdmx_status_name(st), th_now_ms() - t1);
        CHECKF(th_now_ms() - t1 < 2 * BOUND, "mput took %.0f ms",
               th_now_ms() - t1);
        CHECKF(st < 0, "mput with a dead replica returned %s",
               rdmx_status_name(st));
        for (int i = 0; i < M; i++) {
            int dead = rep_owner[i] == (unsigned)victim2 ||
                       (rep_owner[i] + 1) % NS == (unsigned)victim2;
            if (dead && p[i].status == RDMX_OK) {
                if (bad_ok++ == 0)
                    th_log("  r:%d (servers %u, %u) reported OK", i,
                           rep_owner[i], (rep_owner[i] + 1) % NS);
            }
            if (!dead && p[i].status != RDMX_OK)
                good_bad++;
            if (!dead || rep_owner[i] != (unsigned)victim2)
                expect_value(kv2, "r", i, 2); /* a live copy has it */
        }
        CHECKF(good_bad == 0, "%d mput items on live servers failed", good_bad);
        if (bad_ok) {
            th_log("FAIL %s:%d (continuing): %d mput items whose second "
                   "copy went to the dead server reported RDMX_OK",
                   __FILE__, __LINE__, bad_ok);
            soft_failures++;
        }
    }
    th_log("replicas: ok (%.1f s)", (th_now_ms() - t0) / 1000);

    rdmx_kv_destroy(kv2q);
    rdmx_kv_destroy(kv2);
    rdmx_kv_destroy(kvq);
    rdmx_kv_destroy(kv);
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    for (int s = 0; s < NS; s++)
        kvd_stop(&srv[s]);
    if (soft_failures) {
        th_log("FAILED: %d check(s) failed (%.1f s)", soft_failures,
               (th_now_ms() - t0) / 1000);
        return 1;
    }
    th_log("ok (%.1f s)", (th_now_ms() - t0) / 1000);
    return 0;
}
