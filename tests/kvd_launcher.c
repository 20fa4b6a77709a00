/*
 * The launcher of tests/kvd_launcher.h: a child process that starts servers
 * and commands for the test over a socketpair, so that the test process
 * never forks once UCX is up.
 */
#define _GNU_SOURCE
#include "kvd_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
void kl_start(void)
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

void kl_call(kl_req_t *q, kl_rep_t *r)
{
    struct pollfd pfd = {kl_fd, POLLIN, 0};

    CHECKF(send(kl_fd, q, sizeof(*q), MSG_NOSIGNAL) == (ssize_t)sizeof(*q),
           "launcher send: %s", strerror(errno));
    CHECKF(poll(&pfd, 1, q->timeout_ms + 30000) == 1, "launcher: no answer");
    CHECKF(recv(kl_fd, r, sizeof(*r), 0) == (ssize_t)sizeof(*r),
           "launcher recv: %s", strerror(errno));
}

void kl_args(kl_req_t *q, const char *first, va_list ap)
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

/* Ask the launcher to start a server with q->args; fill @k. */
static int server_start(kl_req_t *q, kvd_t *k, char *why, size_t why_size)
{
    static kl_rep_t r;

    q->op = KL_KVD;
    q->timeout_ms = 20000 * TH_SLOW;
    kl_call(q, &r);
    if (!r.ok) {
        snprintf(why, why_size, "%s did not start (wait status 0x%x): %s",
                 q->args, r.wstatus, r.text);
        return -1;
    }
    k->pid = r.pid;
    k->port = (uint16_t)r.port;
    snprintf(k->addr, sizeof(k->addr), "127.0.0.1:%d", r.port);
    return 0;
}

static void append_arg(kl_req_t *q, const char *a)
{
    size_t l = strlen(a) + 1;

    CHECKF(q->args_len + l <= sizeof(q->args), "arguments too long");
    memcpy(q->args + q->args_len, a, l);
    q->args_len += l;
}

int kvd_try_start(kvd_t *k, const char *listen, char *why, size_t why_size, ...)
{
    static kl_req_t q;
    va_list ap;

    memset(&q, 0, sizeof(q));
    va_start(ap, why_size);
    kl_args(&q, "rdmx-kvd", ap);
    va_end(ap);
    append_arg(&q, "--listen");
    append_arg(&q, listen ? listen : "127.0.0.1:0");
    return server_start(&q, k, why, why_size);
}

int kl_server_try_start(kvd_t *k, char *why, size_t why_size, const char *prog,
                        ...)
{
    static kl_req_t q;
    va_list ap;

    memset(&q, 0, sizeof(q));
    va_start(ap, prog);
    kl_args(&q, prog, ap);
    va_end(ap);
    return server_start(&q, k, why, why_size);
}

int kl_run(const char *in, const char *out, const char *err, int timeout_ms,
           double *ms_p, const char *prog, ...)
{
    static kl_req_t q;
    static kl_rep_t r;
    va_list ap;

    memset(&q, 0, sizeof(q));
    q.op = KL_RUN;
    q.timeout_ms = timeout_ms;
    snprintf(q.in_path, sizeof(q.in_path), "%s", in ? in : "");
    snprintf(q.out_path, sizeof(q.out_path), "%s", out ? out : "");
    snprintf(q.err_path, sizeof(q.err_path), "%s", err ? err : "");
    va_start(ap, prog);
    kl_args(&q, prog, ap);
    va_end(ap);
    kl_call(&q, &r);
    if (ms_p != NULL)
        *ms_p = r.ms;
    if (!r.ok) {
        th_log("%s: %s (wait status 0x%x)", prog, r.text, r.wstatus);
        return -1;
    }
    return r.wstatus;
}

/* Wait up to @timeout_ms for @k to exit: its wait status; its remaining
 * stdout into @out (may be NULL); how long it took into *ms_p (may be
 * NULL). Fails the test if it does not exit. */
int kvd_wait(kvd_t *k, int timeout_ms, char *out, size_t out_size, double *ms_p)
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
int kvd_exited(kvd_t *k, int *ws_p, char *out, size_t out_size)
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

int kvd_alive(kvd_t *k)
{
    int ws = 0;

    if (k->pid <= 0)
        return 0;
    if (!kvd_exited(k, &ws, NULL, 0))
        return 1;
    th_log("rdmx-kvd %s exited: wait status 0x%x", k->addr, ws);
    return 0;
}

void kvd_kill(kvd_t *k, int sig)
{
    CHECK(k->pid > 0);
    CHECKF(kill(k->pid, sig) == 0, "kill: %s", strerror(errno));
}

/* SIGTERM @k and check it exits 0 within 10 s. */
void kvd_stop(kvd_t *k)
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
uint64_t stat_of(const char *text, const char *name)
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
