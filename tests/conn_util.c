/*
 * Helpers for the connection tests; see conn_util.h.
 */
#define _GNU_SOURCE
#include "conn_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* The server role                                                          */
/* ------------------------------------------------------------------------ */

static volatile sig_atomic_t cu_stop;

static void cu_on_term(int sig)
{
    (void)sig;
    cu_stop = 1;
}

static void cu_h_echo(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const void *data = rdmx_rpc_req_data(req, &len);

    (void)arg;
    rdmx_rpc_respond(req, data, len);
}

static void cu_h_worker(rdmx_rpc_req_t *req, void *arg)
{
    uint32_t w = rdmx_rpc_req_worker(req);

    (void)arg;
    rdmx_rpc_respond(req, &w, sizeof(w));
}

static void cu_h_wstats(rdmx_rpc_req_t *req, void *arg)
{
    cu_wstats_t r;

    (void)arg;
    memset(&r, 0, sizeof(r));
    r.index = rdmx_rpc_req_worker(req);
    rdmx_worker_stats(rdmx_ep_worker(rdmx_rpc_req_ep(req)), &r.st);
    rdmx_rpc_respond(req, &r, sizeof(r));
}

int cu_server_main(int argc, char **argv)
{
    rdmx_rpc_server_params_t sp;
    rdmx_rpc_server_t *srv;
    rdmx_context_t *ctx;
    struct sigaction sa;
    double t0;
    int i;

    th_init("conn-rpc-server", 1800);
    memset(&sp, 0, sizeof(sp));
    sp.field_mask = RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS |
                    RDMX_RPC_SERVER_PARAM_FIELD_WORKERS;
    sp.address = "127.0.0.1:0";
    sp.workers = 2;
    for (i = 0; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--workers") == 0) {
            sp.workers = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--max-connections") == 0) {
            sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_MAX_CONNECTIONS;
            sp.max_connections = (unsigned)atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--max-message") == 0) {
            sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_MAX_MESSAGE;
            sp.max_message = (size_t)strtoull(argv[i + 1], NULL, 0);
        } else if (strcmp(argv[i], "--max-receiving") == 0) {
            sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_MAX_RECEIVING;
            sp.max_receiving = (size_t)strtoull(argv[i + 1], NULL, 0);
        } else if (strcmp(argv[i], "--poll") == 0) {
            sp.field_mask |= RDMX_RPC_SERVER_PARAM_FIELD_POLL;
            sp.poll = (rdmx_rpc_poll_t)atoi(argv[i + 1]);
        } else {
            th_log("unknown option %s", argv[i]);
            return 2;
        }
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = cu_on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    ctx = th_context();
    CHECK_OK(rdmx_rpc_server_create(ctx, &sp, &srv));
    CHECK_OK(rdmx_rpc_server_register(srv, "echo", cu_h_echo, NULL,
                                      RDMX_RPC_IDEMPOTENT));
    CHECK_OK(rdmx_rpc_server_register(srv, "echo_once", cu_h_echo, NULL, 0));
    CHECK_OK(rdmx_rpc_server_register(srv, "worker", cu_h_worker, NULL,
                                      RDMX_RPC_IDEMPOTENT));
    CHECK_OK(rdmx_rpc_server_register(srv, "wstats", cu_h_wstats, NULL,
                                      RDMX_RPC_IDEMPOTENT));
    CHECK_OK(rdmx_rpc_server_start(srv));
    th_announce_port(rdmx_rpc_server_port(srv));
    while (!cu_stop)
        usleep(10000);
    th_log("shutting down (signal)");
    t0 = th_now_ms();
    rdmx_rpc_server_destroy(srv);
    rdmx_context_destroy(ctx);
    th_log("shut down after %.0f ms", th_now_ms() - t0);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Processes                                                                */
/* ------------------------------------------------------------------------ */

void cu_log_path(char *buf, size_t size, const char *tag)
{
    static unsigned n;

    snprintf(buf, size, "/tmp/rdmx-%s-%d-%u.log", tag, (int)getpid(), n++);
}

void cu_spawn_logged(th_proc_t *proc, const char *log_path, const char *role,
                     int timeout_ms, ...)
{
    char exe[PATH_MAX], line[128];
    char *argv[24];
    int argc = 0, fds[2], logfd;
    size_t got = 0;
    ssize_t n;
    va_list ap;
    const char *arg;
    double deadline;
    pid_t parent = getpid();
    unsigned port = 0;

    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    CHECKF(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = '\0';
    argv[argc++] = exe;
    argv[argc++] = (char *)role;
    va_start(ap, timeout_ms);
    while ((arg = va_arg(ap, const char *)) != NULL && argc < 23)
        argv[argc++] = (char *)arg;
    va_end(ap);
    argv[argc] = NULL;

    logfd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                 0600);
    CHECKF(logfd >= 0, "open %s: %s", log_path, strerror(errno));
    CHECKF(pipe2(fds, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
    fflush(NULL);
    proc->pid = fork();
    CHECKF(proc->pid >= 0, "fork: %s", strerror(errno));
    if (proc->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(fds[1], 1);
        dup2(logfd, 2);
        execv(exe, argv);
        _exit(127);
    }
    close(fds[1]);
    close(logfd);

    deadline = th_now_ms() + (double)timeout_ms * TH_SLOW;
    memset(line, 0, sizeof(line));
    while (!memchr(line, '\n', got)) {
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int left = (int)(deadline - th_now_ms());

        if (left <= 0) {
            th_kill(proc, SIGKILL);
            th_fail(__FILE__, __LINE__, "server '%s' printed no port in %d ms",
                    role, timeout_ms * TH_SLOW);
        }
        if (poll(&pfd, 1, left) <= 0)
            continue;
        n = read(fds[0], line + got, sizeof(line) - 1 - got);
        if (n <= 0) {
            char text[4096];

            th_wait_exit(proc, 5000);
            cu_read_file(log_path, text, sizeof(text));
            th_fail(__FILE__, __LINE__,
                    "server '%s' exited before printing its port; its "
                    "log:\n%s",
                    role, text);
        }
        got += (size_t)n;
        CHECKF(got < sizeof(line) - 1, "server output too long: %s", line);
    }
    close(fds[0]);
    CHECKF(sscanf(line, "PORT %u", &port) == 1 && port > 0 && port < 65536,
           "bad port line from server: '%s'", line);
    proc->port = (uint16_t)port;
    snprintf(proc->addr, sizeof(proc->addr), "127.0.0.1:%u", port);
}

size_t cu_read_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t got = 0;

    buf[0] = '\0';
    if (fd < 0)
        return 0;
    while (got + 1 < size) {
        ssize_t n = read(fd, buf + got, size - 1 - got);

        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    return got;
}

unsigned cu_count(const char *text, const char *needle)
{
    unsigned n = 0;
    size_t len = strlen(needle);

    while ((text = strstr(text, needle)) != NULL) {
        n++;
        text += len;
    }
    return n;
}

pid_t cu_fork(int (*fn)(void *), void *arg, unsigned alarm_s)
{
    pid_t parent = getpid(), pid;

    fflush(NULL);
    pid = fork();
    CHECKF(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        alarm(alarm_s * TH_SLOW); /* fork does not inherit the alarm */
        _exit(fn(arg));
    }
    return pid;
}

int cu_wait_pid(pid_t pid, int timeout_ms)
{
    double deadline = th_now_ms() + (double)timeout_ms * TH_SLOW;
    int ws = 0;

    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);

        if (r == pid)
            return ws;
        CHECKF(r == 0, "waitpid %d: %s", (int)pid, strerror(errno));
        if (th_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            return -1;
        }
        th_sleep_ms(5);
    }
}

const char *cu_wstatus_str(int ws, char *buf, size_t size)
{
    if (ws == -1)
        snprintf(buf, size, "killed after its timeout");
    else if (WIFEXITED(ws))
        snprintf(buf, size, "exit %d", WEXITSTATUS(ws));
    else if (WIFSIGNALED(ws))
        snprintf(buf, size, "signal %d (%s)%s", WTERMSIG(ws),
                 strsignal(WTERMSIG(ws)), WCOREDUMP(ws) ? ", core" : "");
    else
        snprintf(buf, size, "wait status 0x%x", ws);
    return buf;
}

long cu_env_long(const char *name, long def)
{
    const char *v = getenv(name);
    char *end;
    long x;

    if (v == NULL || *v == '\0')
        return def;
    errno = 0;
    x = strtol(v, &end, 0);
    if (errno != 0 || *end != '\0') {
        th_log("ignoring %s='%s' (not a number)", name, v);
        return def;
    }
    return x;
}

/* ------------------------------------------------------------------------ */
/* RPC                                                                      */
/* ------------------------------------------------------------------------ */

rdmx_channel_t *cu_channel(rdmx_worker_t *w, const char *addr,
                           int connect_timeout_ms, int heartbeat_ms)
{
    rdmx_channel_params_t p;
    rdmx_channel_t *ch = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT;
    p.connect_timeout_ms = connect_timeout_ms * TH_SLOW;
    if (heartbeat_ms >= 0) {
        p.field_mask |= RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                        RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT;
        p.heartbeat_ms = heartbeat_ms;
        p.heartbeat_timeout_ms = heartbeat_ms * 4;
    }
    CHECK_OK(rdmx_channel_create(w, addr, &p, &ch));
    CHECK(ch != NULL);
    CHECK_OK(rdmx_channel_wait_ready(ch, 10000 * TH_SLOW));
    return ch;
}

void cu_stats_text(rdmx_channel_t *ch, char *buf, size_t size)
{
    size_t len = 0;

    CHECK_OK(rdmx_call(ch, "rdmx.stats", NULL, 0, buf, size - 1, NULL, &len));
    CHECK(len < size);
    buf[len] = '\0';
}

uint64_t cu_text_stat(const char *text, const char *key)
{
    size_t klen = strlen(key);
    const char *p = text;

    while (p != NULL && *p) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ' ') {
            unsigned long long v;

            CHECKF(sscanf(p + klen + 1, "%llu", &v) == 1,
                   "bad '%s' line in rdmx.stats", key);
            return v;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    th_fail(__FILE__, __LINE__, "no '%s' in rdmx.stats:\n%s", key, text);
}

uint64_t cu_server_stat(rdmx_channel_t *ch, const char *key)
{
    static char text[16384];

    cu_stats_text(ch, text, sizeof(text));
    return cu_text_stat(text, key);
}

void cu_worker_stats(rdmx_worker_t *w, const char *addr, unsigned nworkers,
                     rdmx_worker_stats_t *sum, rdmx_worker_stats_t *w0)
{
    rdmx_channel_t *chs[32];
    int seen[32] = {0};
    unsigned nseen = 0, n = 0, i;

    CHECK(nworkers > 0 && nworkers <= 32);
    memset(sum, 0, sizeof(*sum));
    while (nseen < nworkers) {
        cu_wstats_t r;
        size_t len = 0;

        CHECKF(n < 32, "32 connections did not reach all %u workers", nworkers);
        chs[n] = cu_channel(w, addr, 5000, -1);
        CHECK_OK(
            rdmx_call(chs[n], "wstats", NULL, 0, &r, sizeof(r), NULL, &len));
        n++;
        CHECK(len == sizeof(r) && r.index < nworkers);
        if (seen[r.index])
            continue;
        seen[r.index] = 1;
        nseen++;
        for (i = 0; i < sizeof(r.st) / sizeof(uint64_t); i++)
            ((uint64_t *)sum)[i] += ((const uint64_t *)&r.st)[i];
        if (r.index == 0 && w0 != NULL)
            *w0 = r.st;
    }
    for (i = 0; i < n; i++)
        rdmx_channel_destroy(chs[i]);
}

static int cu_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

double cu_percentile(double *v, size_t n, double p)
{
    size_t k;

    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), cu_cmp_double);
    {
        double x = p / 100.0 * (double)n;

        k = (size_t)x;
        if ((double)k < x)
            k++;
    }
    if (k > 0)
        k--;
    if (k >= n)
        k = n - 1;
    return v[k];
}
