/*
 * Test harness: failure reporting, processes, data pattern, request
 * tracking and the client side of the test server's protocol. See
 * harness.h.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char th_name[64] = "test";
static int th_context_made;

/* ------------------------------------------------------------------------ */
/* Failing, logging                                                         */
/* ------------------------------------------------------------------------ */

void th_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s[%d]: FAIL %s:%d: ", th_name, (int)getpid(), file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(NULL);
    _exit(1);
}

void th_fail_status(const char *file, int line, const char *expr,
                    rdmx_status_t got, rdmx_status_t want)
{
    /* Read the detail before anything else can overwrite it. */
    const char *detail = rdmx_error_detail();
    char copy[512];

    snprintf(copy, sizeof(copy), "%s", detail ? detail : "(null)");
    th_fail(file, line, "%s returned %s (%d, \"%s\"), expected %s; detail: %s",
            expr, rdmx_status_name(got), (int)got, rdmx_strerror(got),
            rdmx_status_name(want), copy[0] ? copy : "(none)");
}

void th_log(const char *fmt, ...)
{
    va_list ap;
    char buf[1024];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s[%d]: %s\n", th_name, (int)getpid(), buf);
}

static void th_on_alarm(int sig)
{
    char msg[160];
    int n;

    (void)sig;
    n = snprintf(msg, sizeof(msg), "%s[%d]: FAIL: timed out (alarm)\n", th_name,
                 (int)getpid());
    if (n > 0 && write(2, msg, (size_t)n) < 0) {
        /* nothing to do */
    }
    _exit(124);
}

void th_init(const char *name, unsigned timeout_s)
{
    struct sigaction sa;

    snprintf(th_name, sizeof(th_name), "%s", name);
    setvbuf(stderr, NULL, _IONBF, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = th_on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    alarm(timeout_s * TH_SLOW);
}

double th_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void th_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

const char *th_transport_env(void)
{
    const char *t = getenv("RDMX_TRANSPORT");

    return (t && *t) ? t : "auto";
}

int th_maps_local(void)
{
    const char *t = th_transport_env(), *rma = getenv("RDMX_RMA");

    return (strcmp(t, "shm") == 0 || strcmp(t, "auto") == 0) &&
           !(rma != NULL && strcmp(rma, "rdmx") == 0);
}

rdmx_context_t *th_context(void)
{
    rdmx_context_params_t params;
    rdmx_context_t *ctx = NULL;
    const char *devs = getenv("UCX_NET_DEVICES");

    memset(&params, 0, sizeof(params));
    params.field_mask = RDMX_CONTEXT_PARAM_FIELD_NAME;
    params.name = th_name;
    if (devs == NULL || *devs == '\0') {
        params.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
        params.net_devices = "lo";
    }
    CHECK_OK(rdmx_context_create(&params, &ctx));
    CHECK(ctx != NULL);
    th_context_made = 1;
    return ctx;
}

rdmx_worker_t *th_worker(rdmx_context_t *ctx, uint64_t flags)
{
    rdmx_worker_params_t params;
    rdmx_worker_t *w = NULL;

    memset(&params, 0, sizeof(params));
    params.field_mask = RDMX_WORKER_PARAM_FIELD_FLAGS;
    params.flags = flags;
    CHECK_OK(rdmx_worker_create(ctx, &params, &w));
    CHECK(w != NULL);
    return w;
}

/* From this size on th_alloc asks for transparent huge pages: a test that
 * fills 1 GiB would otherwise take 262,144 first-touch page faults (3 s
 * here), which test nothing of rdmx. */
#define TH_HUGE_MIN  (32u << 20)
#define TH_HUGE_PAGE (2u << 20)

void *th_alloc(size_t size)
{
    void *p = NULL;

    if (size >= TH_HUGE_MIN) {
        if (posix_memalign(&p, TH_HUGE_PAGE, size) != 0)
            p = NULL;
        else
            (void)madvise(p, size, MADV_HUGEPAGE); /* (a hint; may be off) */
    } else {
        p = malloc(size ? size : 1);
    }
    CHECKF(p != NULL, "out of memory allocating %zu bytes", size);
    return p;
}

/* ------------------------------------------------------------------------ */
/* Pattern                                                                  */
/* ------------------------------------------------------------------------ */

static inline uint64_t th_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t th_seed(uint64_t a, uint64_t b, uint64_t c)
{
    return th_mix(th_mix(th_mix(a) ^ b) ^ c) | 1;
}

/* Pattern words are stored little-endian. */
static inline uint64_t th_le(uint64_t w)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(w);
#else
    return w;
#endif
}

/* Word @p i of the pattern of @p s (s already mixed): one multiply by an
 * odd constant and a shift-xor, both bijections, so no two words of a
 * stream are equal and a word found at the wrong place fails. Cheap, as a
 * test fills and checks up to 1 GiB per direction. */
static inline uint64_t th_word(uint64_t s, uint64_t i)
{
    uint64_t x = (s + i) * 0xbf58476d1ce4e5b9ull;

    return x ^ (x >> 31);
}

static inline uint8_t th_byte_at(uint64_t s, uint64_t pos)
{
    uint64_t w = th_word(s, pos / 8);

    return (uint8_t)(w >> (8 * (pos % 8)));
}

void th_fill_at(void *buf, size_t len, uint64_t seed, uint64_t pos)
{
    uint8_t *p = buf;
    uint64_t s = th_mix(seed);
    size_t i = 0;

    for (; i < len && (pos + i) % 8 != 0; i++)
        p[i] = th_byte_at(s, pos + i);
    for (; i + 8 <= len; i += 8) {
        uint64_t w = th_le(th_word(s, (pos + i) / 8));

        memcpy(p + i, &w, 8);
    }
    for (; i < len; i++)
        p[i] = th_byte_at(s, pos + i);
}

int64_t th_check_at(const void *buf, size_t len, uint64_t seed, uint64_t pos)
{
    const uint8_t *p = buf;
    uint64_t s = th_mix(seed);
    size_t i = 0;

    for (; i < len && (pos + i) % 8 != 0; i++)
        if (p[i] != th_byte_at(s, pos + i))
            return (int64_t)i;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = th_le(th_word(s, (pos + i) / 8)), got;

        memcpy(&got, p + i, 8);
        if (got != w) {
            size_t j;

            for (j = i; j < i + 8; j++)
                if (p[j] != th_byte_at(s, pos + j))
                    return (int64_t)j;
        }
    }
    for (; i < len; i++)
        if (p[i] != th_byte_at(s, pos + i))
            return (int64_t)i;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Processes                                                                */
/* ------------------------------------------------------------------------ */

void th_spawn_self(th_proc_t *proc, const char *role, int timeout_ms, ...)
{
    char exe[PATH_MAX];
    char *argv[16];
    int argc = 0, fds[2];
    ssize_t n;
    va_list ap;
    const char *arg;
    char line[128];
    size_t got = 0;
    double deadline;
    pid_t parent = getpid();

    CHECKF(!th_context_made, "th_spawn_self after th_context(): rdmx must "
                             "not fork once a context exists");
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    CHECKF(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = '\0';

    argv[argc++] = exe;
    argv[argc++] = (char *)role;
    va_start(ap, timeout_ms);
    while ((arg = va_arg(ap, const char *)) != NULL && argc < 15)
        argv[argc++] = (char *)arg;
    va_end(ap);
    argv[argc] = NULL;

    CHECKF(pipe2(fds, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
    fflush(NULL);
    proc->pid = fork();
    CHECKF(proc->pid >= 0, "fork: %s", strerror(errno));
    if (proc->pid == 0) {
        /* Die with the test, even if it is killed. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(fds[1], 1);
        execv(exe, argv);
        fprintf(stderr, "exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    close(fds[1]);

    /* Read "PORT n\n". */
    deadline = th_now_ms() + timeout_ms * TH_SLOW;
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
            int ws = th_wait_exit(proc, 5000);

            th_fail(__FILE__, __LINE__,
                    "server '%s' exited before printing its port "
                    "(wait status 0x%x)",
                    role, ws);
        }
        got += (size_t)n;
        CHECKF(got < sizeof(line) - 1, "server output too long: %s", line);
    }
    close(fds[0]);
    {
        unsigned port = 0;

        CHECKF(sscanf(line, "PORT %u", &port) == 1 && port > 0 && port < 65536,
               "bad port line from server: '%s'", line);
        proc->port = (uint16_t)port;
    }
    snprintf(proc->addr, sizeof(proc->addr), "127.0.0.1:%u",
             (unsigned)proc->port);
}

int th_wait_exit(th_proc_t *proc, int timeout_ms)
{
    double deadline = th_now_ms() + timeout_ms * TH_SLOW;
    int ws = 0;

    CHECK(proc->pid > 0);
    for (;;) {
        pid_t r = waitpid(proc->pid, &ws, WNOHANG);

        if (r == proc->pid) {
            proc->pid = -1;
            return ws;
        }
        CHECKF(r == 0, "waitpid: %s", strerror(errno));
        if (th_now_ms() > deadline) {
            kill(proc->pid, SIGKILL);
            waitpid(proc->pid, &ws, 0);
            proc->pid = -1;
            th_fail(__FILE__, __LINE__, "process did not exit within %d ms",
                    timeout_ms * TH_SLOW);
        }
        th_sleep_ms(5);
    }
}

int th_alive(th_proc_t *proc)
{
    int ws;

    if (proc->pid <= 0)
        return 0;
    if (waitpid(proc->pid, &ws, WNOHANG) == proc->pid) {
        proc->pid = -1;
        return 0;
    }
    return 1;
}

void th_kill(th_proc_t *proc, int sig)
{
    if (proc->pid > 0)
        kill(proc->pid, sig);
}

void th_wait_stopped(pid_t pid, int timeout_ms)
{
    double deadline = th_now_ms() + (double)timeout_ms * TH_SLOW;
    char path[64];

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    for (;;) {
        DIR *d = opendir(path);
        struct dirent *e;
        int threads = 0, stopped = 0;

        CHECKF(d != NULL, "opendir %s: %s", path, strerror(errno));
        while ((e = readdir(d)) != NULL) {
            char stat[384], buf[512], *rp;
            FILE *f;

            if (e->d_name[0] == '.')
                continue;
            snprintf(stat, sizeof(stat), "%s/%s/stat", path, e->d_name);
            if ((f = fopen(stat, "r")) == NULL)
                continue; /* thread gone */
            buf[0] = '\0';
            if (fgets(buf, sizeof(buf), f) == NULL)
                buf[0] = '\0';
            fclose(f);
            threads++;
            /* (the state follows the command's closing parenthesis) */
            rp = strrchr(buf, ')');
            stopped += rp != NULL && rp[1] == ' ' && rp[2] == 'T';
        }
        closedir(d);
        if (threads > 0 && stopped == threads)
            return;
        CHECKF(th_now_ms() < deadline, "process %d: %d of %d threads stopped",
               (int)pid, stopped, threads);
        th_sleep_ms(1);
    }
}

void th_check_exit_ok(const char *what, int ws)
{
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
        return;
    if (WIFEXITED(ws))
        th_fail(__FILE__, __LINE__, "%s exited with %d", what, WEXITSTATUS(ws));
    th_fail(__FILE__, __LINE__, "%s died of signal %d", what,
            WIFSIGNALED(ws) ? WTERMSIG(ws) : -1);
}

void th_announce_port(uint16_t port)
{
    printf("PORT %u\n", (unsigned)port);
    fflush(stdout);
    dup2(2, 1);
}

int th_fd_count(pid_t pid)
{
    char path[64];
    DIR *d;
    struct dirent *e;
    int n = 0;

    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/fd");
    else
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    d = opendir(path);
    CHECKF(d != NULL, "opendir %s: %s", path, strerror(errno));
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return pid == 0 ? n - 1 : n; /* not counting the DIR's own fd */
}

long th_rss_kib(pid_t pid)
{
    char path[64], line[256];
    FILE *f;
    long kib = -1;

    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/status");
    else
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    CHECKF(f != NULL, "open %s: %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    CHECKF(kib >= 0, "no VmRSS in %s", path);
    return kib;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

void th_req_init(th_req_t *req)
{
    atomic_init(&req->done, 0);
    atomic_init(&req->cb_calls, 0);
    req->immediate = 0;
    req->status = RDMX_INPROGRESS;
    req->length = 0;
    req->t_done = 0;
}

void th_req_cb(rdmx_status_t status, size_t length, void *arg)
{
    th_req_t *req = arg;

    if (atomic_fetch_add(&req->cb_calls, 1) != 0)
        th_fail(__FILE__, __LINE__, "completion callback ran twice");
    if (req->immediate)
        th_fail(__FILE__, __LINE__,
                "callback ran for an operation that returned RDMX_OK");
    CHECKF(status != RDMX_INPROGRESS, "callback with RDMX_INPROGRESS");
    req->status = status;
    req->length = length;
    req->t_done = th_now_ms();
    atomic_store(&req->done, 1);
}

rdmx_status_t th_req_start(th_req_t *req, rdmx_status_t st, size_t length)
{
    if (st == RDMX_INPROGRESS)
        return st;
    /* The callback must not have run for an immediate result. */
    CHECKF(atomic_load(&req->cb_calls) == 0,
           "callback ran although the call returned %s", rdmx_status_name(st));
    req->immediate = 1;
    req->status = st;
    req->length = st == RDMX_OK ? length : 0;
    req->t_done = th_now_ms();
    atomic_store(&req->done, 1);
    return st;
}

void th_progress_for(rdmx_worker_t *worker, int ms)
{
    double end = th_now_ms() + ms;

    while (th_now_ms() < end) {
        if (worker)
            rdmx_worker_wait(worker, 1);
        else
            th_sleep_ms(1);
    }
}

void th_req_wait(rdmx_worker_t *worker, th_req_t *reqs, size_t n,
                 int timeout_ms)
{
    double deadline = th_now_ms() + (double)timeout_ms * TH_SLOW;
    size_t i;

    for (;;) {
        size_t pending = 0;

        for (i = 0; i < n; i++)
            pending += !atomic_load(&reqs[i].done);
        if (pending == 0)
            break;
        CHECKF(th_now_ms() < deadline,
               "%zu of %zu operations still pending after %d ms", pending, n,
               timeout_ms * TH_SLOW);
        if (worker)
            rdmx_worker_wait(worker, 10);
        else
            th_sleep_ms(1);
    }
    for (i = 0; i < n; i++)
        CHECKF(atomic_load(&reqs[i].cb_calls) == (reqs[i].immediate ? 0 : 1),
               "request %zu: callback ran %d times", i,
               atomic_load(&reqs[i].cb_calls));
}

/* ------------------------------------------------------------------------ */
/* Both ends in one process                                                 */
/* ------------------------------------------------------------------------ */

rdmx_context_t *th_context_on(const char *spec, rdmx_status_t *st_p)
{
    rdmx_context_params_t p;
    rdmx_context_t *ctx = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME |
                   RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
    p.transport_name = spec;
    p.net_devices = "lo";
    *st_p = rdmx_context_create(&p, &ctx);
    if (ctx != NULL)
        th_context_made = 1;
    return ctx;
}

rdmx_listener_t *th_listen(rdmx_worker_t *worker, rdmx_accept_cb_t accept_cb,
                           const rdmx_ep_params_t *ep_params)
{
    rdmx_listener_params_t lp;
    rdmx_listener_t *l = NULL;

    memset(&lp, 0, sizeof(lp));
    lp.field_mask =
        RDMX_LISTENER_PARAM_FIELD_ADDRESS | RDMX_LISTENER_PARAM_FIELD_ACCEPT_CB;
    lp.address = "127.0.0.1:0";
    lp.accept_cb = accept_cb;
    if (ep_params != NULL) {
        lp.field_mask |= RDMX_LISTENER_PARAM_FIELD_EP_PARAMS;
        lp.ep_params = *ep_params;
    }
    CHECK_OK(rdmx_listener_create(worker, &lp, &l));
    return l;
}

void th_progress_pair(rdmx_worker_t *a, rdmx_worker_t *b, const int *count,
                      int want, const char *what)
{
    double t0 = th_now_ms();

    while (*count < want) {
        rdmx_worker_progress(a);
        if (b != NULL)
            rdmx_worker_progress(b);
        CHECKF(th_now_ms() - t0 < 10000.0 * TH_SLOW, "%s: no progress", what);
    }
}

/* What th_connect_pair's connect callback leaves. */
typedef struct {
    int done;
    rdmx_status_t status;
} th_connect_t;

static void th_on_connect(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    th_connect_t *c = arg;

    (void)ep;
    c->status = status;
    c->done = 1;
}

rdmx_ep_t *th_connect_pair(rdmx_worker_t *cw, rdmx_worker_t *sw,
                           rdmx_listener_t *l, rdmx_status_t *st_p)
{
    th_connect_t c = {0, RDMX_OK};
    rdmx_ep_params_t ep_p;
    rdmx_ep_t *ep = NULL;
    rdmx_status_t st;
    char addr[64];

    memset(&ep_p, 0, sizeof(ep_p));
    ep_p.field_mask =
        RDMX_EP_PARAM_FIELD_CONNECT_CB | RDMX_EP_PARAM_FIELD_USER_DATA;
    ep_p.connect_cb = th_on_connect;
    ep_p.user_data = &c;
    snprintf(addr, sizeof(addr), "127.0.0.1:%u",
             (unsigned)rdmx_listener_port(l));
    st = rdmx_connect_nb(cw, addr, &ep_p, &ep);
    CHECK(st == RDMX_OK || st == RDMX_INPROGRESS);
    th_progress_pair(cw, sw, &c.done, 1, "connect");
    *st_p = c.status;
    return ep;
}

void th_close_pair(rdmx_context_t *ctx, rdmx_worker_t *sw, rdmx_worker_t *cw,
                   rdmx_listener_t *l, rdmx_ep_t *ep, rdmx_ep_t *peer)
{
    rdmx_ep_close(ep);
    rdmx_ep_close(peer);
    for (int i = 0; i < 50; i++) {
        rdmx_worker_progress(sw);
        rdmx_worker_progress(cw);
    }
    rdmx_listener_destroy(l);
    rdmx_worker_destroy(cw);
    rdmx_worker_destroy(sw);
    rdmx_context_destroy(ctx);
}

/* ------------------------------------------------------------------------ */
/* Test server protocol, client side                                        */
/* ------------------------------------------------------------------------ */

void ts_msg_init(ts_msg_t *m, uint32_t cmd, uint64_t a, uint64_t b, uint64_t c,
                 uint64_t d)
{
    memset(m, 0, sizeof(*m));
    m->magic = TS_MAGIC;
    m->cmd = cmd;
    m->a = a;
    m->b = b;
    m->c = c;
    m->d = d;
}

void ts_post_msg(rdmx_ep_t *ep, const ts_msg_t *msg)
{
    CHECK_OK(rdmx_send(ep, msg, sizeof(*msg), NULL));
}

void ts_post(rdmx_ep_t *ep, uint32_t cmd, uint64_t a, uint64_t b, uint64_t c,
             uint64_t d)
{
    ts_msg_t m;

    ts_msg_init(&m, cmd, a, b, c, d);
    ts_post_msg(ep, &m);
}

void ts_reply(rdmx_ep_t *ep, ts_reply_t *reply)
{
    rdmx_op_params_t op = {.field_mask = RDMX_OP_PARAM_FIELD_TIMEOUT,
                           .timeout_ms = 60000 * TH_SLOW};
    size_t len = 0;

    CHECK_OK(rdmx_recv(ep, reply, sizeof(*reply), &op, &len));
    CHECKF(len >= TS_REPLY_HDR && reply->magic == TS_MAGIC &&
               len == TS_REPLY_HDR + reply->blob_len,
           "malformed reply from the test server (%zu bytes)", len);
}

void ts_call(rdmx_ep_t *ep, uint32_t cmd, uint64_t a, uint64_t b, uint64_t c,
             uint64_t d, ts_reply_t *reply)
{
    ts_post(ep, cmd, a, b, c, d);
    ts_reply(ep, reply);
}

void ts_alloc(rdmx_ep_t *ep, ts_region_t *r, uint64_t size, unsigned access,
              int kind, uint64_t seed)
{
    ts_reply_t rep;

    ts_call(ep, TS_ALLOC, size, access, (uint64_t)kind, seed, &rep);
    CHECKF(rep.status == RDMX_OK, "server could not allocate %llu bytes: %s",
           (unsigned long long)size,
           rdmx_status_name((rdmx_status_t)rep.status));
    r->region = rep.v[0];
    r->size = size;
    r->desc_len = rep.blob_len;
    memcpy(r->desc, rep.blob, rep.blob_len);
    r->rmem = NULL;
    CHECK_OK(rdmx_rmem_unpack(ep, r->desc, r->desc_len, &r->rmem));
    CHECK(r->rmem != NULL);
    CHECK_EQ_U64(rdmx_rmem_length(r->rmem), size);
    CHECK_EQ_U64(rdmx_rmem_access(r->rmem), access);
}

void ts_free(rdmx_ep_t *ep, ts_region_t *r)
{
    ts_reply_t rep;

    if (r->rmem)
        rdmx_rmem_destroy(r->rmem);
    r->rmem = NULL;
    ts_call(ep, TS_FREE, r->region, 0, 0, 0, &rep);
    CHECK(rep.status == RDMX_OK);
}

void ts_fill(rdmx_ep_t *ep, const ts_region_t *r, uint64_t offset,
             uint64_t length, uint64_t seed)
{
    ts_reply_t rep;

    ts_call(ep, TS_FILL, r->region, offset, length, seed, &rep);
    CHECKF(rep.status == RDMX_OK, "server fill failed: %s",
           rdmx_status_name((rdmx_status_t)rep.status));
}

void ts_verify_at(const char *file, int line, rdmx_ep_t *ep,
                  const ts_region_t *r, uint64_t offset, uint64_t length,
                  uint64_t seed, uint64_t pos)
{
    ts_msg_t m;
    ts_reply_t rep;

    ts_msg_init(&m, TS_VERIFY, r->region, offset, length, seed);
    m.pos = pos;
    ts_post_msg(ep, &m);
    ts_reply(ep, &rep);
    if (rep.status != RDMX_OK)
        th_fail(file, line, "server verify failed: %s",
                rdmx_status_name((rdmx_status_t)rep.status));
    if (!rep.v[0])
        th_fail(file, line,
                "server memory differs at byte %llu of [%llu, +%llu) "
                "(seed %llx)",
                (unsigned long long)rep.v[1], (unsigned long long)offset,
                (unsigned long long)length, (unsigned long long)seed);
}

uint64_t ts_read64(rdmx_ep_t *ep, const ts_region_t *r, uint64_t offset)
{
    ts_reply_t rep;

    ts_call(ep, TS_READ64, r->region, offset, 0, 0, &rep);
    CHECK(rep.status == RDMX_OK);
    return rep.v[0];
}

void ts_set64(rdmx_ep_t *ep, const ts_region_t *r, uint64_t offset,
              uint64_t value)
{
    ts_reply_t rep;

    ts_call(ep, TS_SET64, r->region, offset, value, 0, &rep);
    CHECK(rep.status == RDMX_OK);
}

void ts_quit(rdmx_ep_t *ep)
{
    ts_reply_t rep;

    ts_call(ep, TS_QUIT, 0, 0, 0, 0, &rep);
    CHECK(rep.status == RDMX_OK);
    rdmx_ep_close(ep);
}

rdmx_ep_t *th_connect(rdmx_worker_t *worker, const th_proc_t *server,
                      const rdmx_ep_params_t *params)
{
    rdmx_ep_params_t p;
    rdmx_ep_t *ep = NULL;

    if (params != NULL)
        p = *params;
    else
        memset(&p, 0, sizeof(p));
    p.field_mask |= RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT;
    p.connect_timeout_ms = 10000 * TH_SLOW;
    CHECK_OK(rdmx_connect(worker, server->addr, &p, &ep));
    CHECK(ep != NULL);
    CHECK_OK(rdmx_ep_status(ep));
    return ep;
}
