/*
 * Test harness shared by the rdmx tests.
 *
 * - CHECK macros that print file:line, the failed expression and, for rdmx
 *   calls, the status name and rdmx_error_detail(), then exit(1).
 * - Process helpers: a test binary re-executes itself as a server
 *   (th_spawn_self), reads the server's "PORT n" line, waits with a timeout
 *   and kills. Servers are always spawned before the client creates its rdmx
 *   context: nothing forks once UCX is initialised.
 * - A deterministic data pattern (th_fill / th_check) derived from a seed and
 *   the byte position, so both sides can verify without exchanging data.
 * - Request trackers (th_req_t) for non-blocking operations.
 * - A generic command server (test_server.c) and the client side of its
 *   protocol (ts_*), used by the integration tests: the client asks the
 *   server to allocate and describe memory, fill or verify it, expect or
 *   send messages, and report what it saw.
 */
#ifndef RDMX_TEST_HARNESS_H
#define RDMX_TEST_HARNESS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <rdmx/rdmx.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TH_SANITIZED 1
#endif
#endif
#ifndef TH_SANITIZED
#define TH_SANITIZED 0
#endif

/* Timeouts are stretched by this factor under sanitizers. */
#define TH_SLOW (TH_SANITIZED ? 4 : 1)

#define TH_KIB ((size_t)1 << 10)
#define TH_MIB ((size_t)1 << 20)
#define TH_GIB ((size_t)1 << 30)

/* ------------------------------------------------------------------------ */
/* Failing                                                                  */
/* ------------------------------------------------------------------------ */

__attribute__((noreturn, format(printf, 3, 4))) void
th_fail(const char *file, int line, const char *fmt, ...);

__attribute__((noreturn)) void th_fail_status(const char *file, int line,
                                              const char *expr,
                                              rdmx_status_t got,
                                              rdmx_status_t want);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            th_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                   \
    } while (0)

#define CHECKF(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond))                                                           \
            th_fail(__FILE__, __LINE__, __VA_ARGS__);                          \
    } while (0)

/* The rdmx call must return exactly @p want. */
#define CHECK_ST(expr, want)                                                   \
    do {                                                                       \
        rdmx_status_t th_st_ = (expr);                                         \
        if (th_st_ != (want))                                                  \
            th_fail_status(__FILE__, __LINE__, #expr, th_st_, (want));         \
    } while (0)

#define CHECK_OK(expr) CHECK_ST(expr, RDMX_OK)

#define CHECK_EQ_U64(a, b)                                                     \
    do {                                                                       \
        uint64_t th_a_ = (uint64_t)(a), th_b_ = (uint64_t)(b);                 \
        if (th_a_ != th_b_)                                                    \
            th_fail(__FILE__, __LINE__,                                        \
                    "%s == %s: %llu (0x%llx) != %llu (0x%llx)", #a, #b,        \
                    (unsigned long long)th_a_, (unsigned long long)th_a_,      \
                    (unsigned long long)th_b_, (unsigned long long)th_b_);     \
    } while (0)

/* th_check() result must be -1 (no mismatch). */
#define CHECK_PATTERN(buf, len, seed, pos)                                     \
    do {                                                                       \
        int64_t th_bad_ = th_check_at((buf), (len), (seed), (pos));            \
        if (th_bad_ >= 0)                                                      \
            th_fail(__FILE__, __LINE__,                                        \
                    "data mismatch at byte %lld of %zu (seed %llx)",           \
                    (long long)th_bad_, (size_t)(len),                         \
                    (unsigned long long)(seed));                               \
    } while (0)

/* Print a progress line to stderr (prefixed with the test name). */
__attribute__((format(printf, 1, 2))) void th_log(const char *fmt, ...);

/* ------------------------------------------------------------------------ */
/* Setup, time                                                              */
/* ------------------------------------------------------------------------ */

/* Name the test, arm alarm(timeout_s * TH_SLOW) with a handler that reports
 * the timeout, unbuffer stderr. */
void th_init(const char *name, unsigned timeout_s);

double th_now_ms(void);
void th_sleep_ms(unsigned ms);

/* "tcp", "shm", ... from RDMX_TRANSPORT, or "auto". */
const char *th_transport_env(void);
/* Whether this run's endpoints to a peer on this host go over UCX's shared
 * memory and map its rdmx_mem_alloc memory: RDMX_TRANSPORT shm or auto
 * (unset), unless RDMX_RMA=rdmx carries every access. */
int th_maps_local(void);

/* Create a context for the tests: transport from RDMX_TRANSPORT (the
 * library's default), net_devices "lo" unless UCX_NET_DEVICES is set. After
 * this, th_spawn_* refuse to fork. */
rdmx_context_t *th_context(void);

/* Worker with @p flags (RDMX_WORKER_FLAG_*). */
rdmx_worker_t *th_worker(rdmx_context_t *ctx, uint64_t flags);

/* ------------------------------------------------------------------------ */
/* Data pattern                                                             */
/* ------------------------------------------------------------------------ */

/* A non-zero seed derived from a few integers. */
uint64_t th_seed(uint64_t a, uint64_t b, uint64_t c);

/* Fill @p len bytes with the pattern of @p seed, starting at position
 * @p pos of the pattern stream. */
void th_fill_at(void *buf, size_t len, uint64_t seed, uint64_t pos);
/* Index of the first byte that differs from the pattern, or -1. */
int64_t th_check_at(const void *buf, size_t len, uint64_t seed, uint64_t pos);

static inline void th_fill(void *buf, size_t len, uint64_t seed)
{
    th_fill_at(buf, len, seed, 0);
}

static inline int64_t th_check(const void *buf, size_t len, uint64_t seed)
{
    return th_check_at(buf, len, seed, 0);
}

/* malloc that fails the test on NULL; th_alloc(0) returns a valid pointer.
 * From 32 MiB on the memory is 2 MiB aligned and asks for huge pages. Free
 * it with free(). */
void *th_alloc(size_t size);

/* ------------------------------------------------------------------------ */
/* Processes                                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
    pid_t pid;
    uint16_t port;
    char addr[64]; /* "127.0.0.1:port" */
} th_proc_t;

/* Run this binary again with argv[1] = @p role and the NULL-terminated
 * extra arguments; wait up to @p timeout_ms for its "PORT n" line.
 * Must be called before th_context(). */
void th_spawn_self(th_proc_t *proc, const char *role, int timeout_ms, ...);

/* Wait for the process to exit. Returns its wait status; kills it and fails
 * the test if it does not exit within @p timeout_ms. */
int th_wait_exit(th_proc_t *proc, int timeout_ms);

/* Non-zero while the process has not exited (reaps it if it has). */
int th_alive(th_proc_t *proc);

void th_kill(th_proc_t *proc, int sig);

/* Wait until every thread of process @p pid shows as stopped in /proc
 * (after a SIGSTOP: the signal takes effect only when a thread returns
 * to user space, so a send in progress finishes first); fail after
 * @p timeout_ms (x TH_SLOW). */
void th_wait_stopped(pid_t pid, int timeout_ms);

/* Fail unless the wait status says "exited with 0". */
void th_check_exit_ok(const char *what, int wstatus);

/* In a server: print "PORT n" on stdout for the parent, then send stdout to
 * stderr so that nothing else goes into the pipe. */
void th_announce_port(uint16_t port);

/* Count of open fds and VmRSS (KiB) of a process (0: self). */
int th_fd_count(pid_t pid);
long th_rss_kib(pid_t pid);

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    atomic_int done;      /* set last, after status/length */
    atomic_int cb_calls;  /* how often the callback ran */
    int immediate;        /* the start call returned RDMX_OK */
    rdmx_status_t status; /* final status */
    size_t length;        /* length reported to the callback */
    double t_done;        /* th_now_ms() at completion */
} th_req_t;

void th_req_init(th_req_t *req);

/* Completion callback for th_req_t (arg = the th_req_t). */
void th_req_cb(rdmx_status_t status, size_t length, void *arg);

/* Record the result of starting an operation with th_req_cb / @p req:
 * INPROGRESS leaves it pending, OK completes it with @p length (the
 * callback must then never run), an error completes it with that error.
 * Returns @p st. */
rdmx_status_t th_req_start(th_req_t *req, rdmx_status_t st, size_t length);

/* Progress @p worker (NULL: just sleep, for progress-thread workers) until
 * all @p n requests are done; fail after @p timeout_ms. Checks that every
 * callback ran exactly once (never for immediate completions). */
void th_req_wait(rdmx_worker_t *worker, th_req_t *reqs, size_t n,
                 int timeout_ms);

/* Progress (or sleep) for about @p ms. */
void th_progress_for(rdmx_worker_t *worker, int ms);

/* ------------------------------------------------------------------------ */
/* Both ends in one process                                                 */
/* ------------------------------------------------------------------------ */

/* A context for transport @p spec ("tcp", "ofi:shm", ...) on the network
 * device "lo" whatever the environment says: NULL if it cannot be made;
 * rdmx_context_create's status in *st_p. */
rdmx_context_t *th_context_on(const char *spec, rdmx_status_t *st_p);

/* A listener of @p worker on 127.0.0.1 and a free port: @p accept_cb (arg
 * NULL) gets each accepted endpoint, which has @p ep_params (NULL: none).
 * Fails the test if it cannot listen. */
rdmx_listener_t *th_listen(rdmx_worker_t *worker, rdmx_accept_cb_t accept_cb,
                           const rdmx_ep_params_t *ep_params);

/* Progress @p a, then @p b (NULL: @p a alone), until *@p count reaches
 * @p want; fail ("@p what: no progress") after 10 s. */
void th_progress_pair(rdmx_worker_t *a, rdmx_worker_t *b, const int *count,
                      int want, const char *what);

/* Connect @p cw to @p l's port on 127.0.0.1, progressing @p cw and the
 * listener's worker @p sw until the handshake ended: the endpoint (close it
 * whatever the outcome), the status its connect callback got in *st_p. */
rdmx_ep_t *th_connect_pair(rdmx_worker_t *cw, rdmx_worker_t *sw,
                           rdmx_listener_t *l, rdmx_status_t *st_p);

/* Undo the above: close @p ep and @p peer, progress @p sw and @p cw 50 times
 * each for the closes to go out, destroy @p l, @p cw, @p sw and @p ctx. */
void th_close_pair(rdmx_context_t *ctx, rdmx_worker_t *sw, rdmx_worker_t *cw,
                   rdmx_listener_t *l, rdmx_ep_t *ep, rdmx_ep_t *peer);

/* ------------------------------------------------------------------------ */
/* The test server's protocol                                               */
/* ------------------------------------------------------------------------ */

#define TS_MAGIC    0x52444d58u /* "RDMX" */
#define TS_MAX_BLOB 4096u
#define TS_MAX_DATA (4 * TH_MIB) /* largest DATA payload */

enum {
    TS_ALLOC = 1,   /* a=size b=access c=kind d=seed -> v0=region, blob */
    TS_PACK,        /* a=region b=offset c=length d=access -> st, blob */
    TS_FREE,        /* a=region */
    TS_FILL,        /* a=region b=offset c=length d=seed (0: zeroes) */
    TS_VERIFY,      /* a=region b=offset c=length d=seed -> v0 ok v1 index */
    TS_SET64,       /* a=region b=offset c=value */
    TS_READ64,      /* a=region b=offset -> v0 */
    TS_RECV,        /* a=capacity b=expected length c=seed d=flags; the
                       next message is received and checked -> st, v0 len,
                       v1 ok */
    TS_SEND,        /* a=length b=seed c=flags; sends that message, no
                       reply */
    TS_NOTIFY_WAIT, /* a=imm b=timeout_ms -> st, v0 offset v1 length v2 ok
                       v3 region */
    TS_DATA,        /* a=seed b=length, payload follows; no reply */
    TS_STATS,       /* -> v0 data ok, v1 data bad, v2 notifies, blob =
                       rdmx_worker_stats_t */
    TS_HANG,        /* reply, then only progress until killed */
    TS_QUIT,        /* reply, wait for the client's close, exit */
};

enum {
    TS_KIND_ALLOC = 0,    /* rdmx_mem_alloc */
    TS_KIND_REGISTER = 1, /* malloc + rdmx_mem_register */
};

enum {
    TS_FLAG_REGISTERED = 1, /* TS_RECV/TS_SEND: register the buffer */
};

typedef struct {
    uint32_t magic;
    uint32_t cmd;
    uint64_t a, b, c, d;
    uint64_t pos; /* TS_FILL/TS_VERIFY: pattern position of the first byte */
} ts_msg_t;

typedef struct {
    uint32_t magic;
    int32_t status;
    uint64_t v[4];
    uint32_t blob_len;
    uint32_t pad;
    uint8_t blob[TS_MAX_BLOB];
} ts_reply_t;

#define TS_REPLY_HDR offsetof(ts_reply_t, blob)

/* Server entry point: run when argv[1] is "--server". */
int ts_server_main(int argc, char **argv);

/* Client side. Each call sends a command and (where the command has one)
 * waits for the reply; failures fail the test. */
void ts_call(rdmx_ep_t *ep, uint32_t cmd, uint64_t a, uint64_t b, uint64_t c,
             uint64_t d, ts_reply_t *reply);
/* Send a command without waiting for a reply (TS_SEND, TS_RECV, TS_DATA). */
void ts_post(rdmx_ep_t *ep, uint32_t cmd, uint64_t a, uint64_t b, uint64_t c,
             uint64_t d);
void ts_post_msg(rdmx_ep_t *ep, const ts_msg_t *msg);
void ts_msg_init(ts_msg_t *m, uint32_t cmd, uint64_t a, uint64_t b, uint64_t c,
                 uint64_t d);
void ts_reply(rdmx_ep_t *ep, ts_reply_t *reply);

typedef struct {
    uint64_t region;
    uint64_t size;
    size_t desc_len;
    uint8_t desc[TS_MAX_BLOB];
    rdmx_rmem_t *rmem;
} ts_region_t;

/* Allocate a region on the server, unpack its descriptor on @p ep. */
void ts_alloc(rdmx_ep_t *ep, ts_region_t *r, uint64_t size, unsigned access,
              int kind, uint64_t seed);
void ts_free(rdmx_ep_t *ep, ts_region_t *r);
void ts_fill(rdmx_ep_t *ep, const ts_region_t *r, uint64_t offset,
             uint64_t length, uint64_t seed);
/* Fail unless the server's region holds the pattern of @p seed there,
 * starting at pattern position @p pos (0 for TS_VERIFY_REMOTE). */
void ts_verify_at(const char *file, int line, rdmx_ep_t *ep,
                  const ts_region_t *r, uint64_t offset, uint64_t length,
                  uint64_t seed, uint64_t pos);
#define TS_VERIFY_REMOTE(ep, r, off, len, seed)                                \
    ts_verify_at(__FILE__, __LINE__, (ep), (r), (off), (len), (seed), 0)
#define TS_VERIFY_REMOTE_POS(ep, r, off, len, seed, pos)                       \
    ts_verify_at(__FILE__, __LINE__, (ep), (r), (off), (len), (seed), (pos))
uint64_t ts_read64(rdmx_ep_t *ep, const ts_region_t *r, uint64_t offset);
void ts_set64(rdmx_ep_t *ep, const ts_region_t *r, uint64_t offset,
              uint64_t value);
/* TS_QUIT, close @p ep. */
void ts_quit(rdmx_ep_t *ep);

/* Connect to a spawned server (params may be NULL); fails the test on
 * error. */
rdmx_ep_t *th_connect(rdmx_worker_t *worker, const th_proc_t *server,
                      const rdmx_ep_params_t *params);

#endif /* RDMX_TEST_HARNESS_H */
