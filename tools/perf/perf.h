/*
 * rdmx-perf's internal header: the tests, the options, the control
 * messages, the state of one process, and what each file offers the
 * others. main.c describes the tool and its methodology.
 *
 *   main.c        main(), the client's loop over tests, the server's loop
 *                 over clients
 *   options.c     the command line (usage, -t, -s, the rest)
 *   conn.c        the connection: completions, failures, the watchdog
 *   control.c     control messages between client and server processes
 *   core_tests.c  send/put/get/atomic tests, both halves
 *   rpc_server.c  the RPC server and its handlers (server half, --rpc-only)
 *   rpc_client.c  RPC client threads (client half of rpc_* and lambda_lat)
 *   lambda.c      what lambda_lat adds: its requests, phases and handler
 *   report.c      results: percentiles, rates, every line printed
 *
 * Everything runs on the main thread except the RPC client threads
 * (rpc_client.c, lambda.c), which share only their rpc_run_t.
 */
#ifndef RDMX_PERF_H
#define RDMX_PERF_H

#include <rdmx/lambda.h>
#include <rdmx/rdmx.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* Tests and options                                                        */
/* ------------------------------------------------------------------------ */

typedef enum {
    TEST_SEND_LAT,
    TEST_SEND_BW,
    TEST_PUT_LAT,
    TEST_PUT_BW,
    TEST_GET_LAT,
    TEST_GET_BW,
    TEST_ATOMIC_LAT,
    TEST_RPC_LAT,
    TEST_RPC_RATE,
    TEST_RPC_BULK,
    TEST_RPC_BULK_PUSH,
    TEST_LAMBDA_LAT,
    TEST_COUNT
} test_id_t;

typedef struct {
    const char *name;
    bool bw;         /* window test: per-window times, MB/s */
    bool pingpong;   /* one-way latency = round trip / 2 */
    bool rpc;        /* runs over an RPC server and channels */
    size_t size;     /* default size (0: the global default, 8 B) */
    uint64_t window; /* default window (0: DEFAULT_WINDOW or 1) */
} perf_test_t;

/* Indexed by test_id_t (options.c). */
extern const perf_test_t g_tests[TEST_COUNT];

/* RPC handler names (the server registers them all). */
#define RPC_ECHO           "perf.echo"
#define RPC_PULL           "perf.pull"
#define RPC_PUSH           "perf.push"
#define RPC_INFO           "perf.info"
#define RPC_LAMBDA_NOCACHE "perf.lambda_nocache"
#define RPC_MAX_WORKERS    64
#define RPC_MAX_THREADS    256

#define MAX_SIZES         64
#define DEFAULT_WINDOW    16
#define DEFAULT_ITERS     10000
#define DEFAULT_WARMUP    1000
#define DEFAULT_TIMEOUT_S 300
#define CONNECT_TIMEOUT   10000 /* ms */

typedef struct {
    const char *listen;   /* server: HOST:PORT (a bare PORT: 0.0.0.0:PORT) */
    const char *address;  /* client: HOST:PORT */
    char host[256];       /* the host of either */
    char listen_buf[300]; /* --listen PORT made 0.0.0.0:PORT */
    bool tests[TEST_COUNT];
    size_t sizes[MAX_SIZES];
    unsigned nsizes;
    uint64_t iters;  /* 0: default per test and size */
    uint64_t warmup; /* UINT64_MAX: default */
    uint64_t window;
    rdmx_transport_t transport;
    bool transport_set;
    const char *transport_name; /* --transport as given (ofi[:PROVIDER]) */
    bool json;
    bool once;
    bool flush_windows; /* put_bw/get_bw: flush per window (else at end) */
    bool batch;         /* rpc_rate: calls of a burst with RDMX_RPC_MORE */
    bool no_rings;      /* rpc_*: no request rings (channel param) */
    unsigned timeout_s;
    bool sizes_set;          /* -s or -a given: RPC tests use them too */
    bool window_set;         /* -W given */
    unsigned threads;        /* RPC client threads (-T), default 1 */
    unsigned server_workers; /* RPC server workers; 0: the default (1) */
    int poll;                /* rdmx_rpc_poll_t; -1: the default (busy) */
    bool rpc_only;        /* server: an RPC server alone; client: no control */
    const char *metrics_listen; /* --rpc-only server: HTTP /metrics, /health */
    const char *function; /* lambda_lat: --function FILE (NULL: "return") */
    char *function_src;   /* its source (malloc'd) */
    size_t function_len;
} opts_t;

/* ------------------------------------------------------------------------ */
/* Control messages (control.c)                                             */
/* ------------------------------------------------------------------------ */

/* Little-endian, fixed layout; both ends are this program. */
#define CTRL_MAGIC 0x50584452u /* "RDXP" */
#define CTRL_HDR   88
#define CTRL_MAX   1024

enum {
    OP_TEST = 1,     /* client: run a test; carries its descriptor */
    OP_REPLY = 2,    /* server: status + its descriptor */
    OP_DONE = 3,     /* client: the test is over */
    OP_DONE_ACK = 4, /* server: released the test's resources */
    OP_QUIT = 5,     /* client: leaving */
    OP_QUIT_ACK = 6, /* server: the client may close now */
};

typedef struct {
    uint32_t op;
    uint32_t test;
    int32_t status;
    uint32_t transport;
    uint64_t size;
    uint64_t iters;
    uint64_t warmup;
    uint64_t window;
    uint32_t desc_len;
    /* RPC tests. TEST: server workers (0: the server's default), poll mode
     * (UINT32_MAX: default), client threads. REPLY: the workers and poll
     * mode in use and the RPC server's port. DONE_ACK: requests the server
     * answered (stat) and error responses it sent (stat2). */
    uint32_t workers;
    uint32_t poll;
    uint32_t rpc_port;
    uint32_t threads;
    uint64_t stat;
    uint64_t stat2;
    const unsigned char *desc; /* points into the receive buffer */
} ctrl_t;

static inline void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static inline uint32_t get_le32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        v |= (uint32_t)p[i] << (8 * i);
    }
    return v;
}

/* ------------------------------------------------------------------------ */
/* State                                                                    */
/* ------------------------------------------------------------------------ */

/* A class of operations: how many were started and how many completed. */
typedef struct {
    uint64_t posted;
    uint64_t done;
    size_t last_length;
    rdmx_status_t err; /* first error a completion reported */
} ops_t;

#define ACK_RING 4

typedef struct {
    rdmx_context_t *ctx;
    rdmx_worker_t *worker;
    rdmx_ep_t *ep;             /* the connection being served / used */
    rdmx_status_t conn_status; /* set by the endpoint's error callback */
    bool quiet_close;          /* losing the connection is not an error */
    rdmx_ep_t *pending;        /* server: accepted, not yet served */
    rdmx_status_t pending_status;

    unsigned char ctrl_rx[CTRL_MAX];
    unsigned char ctrl_tx[CTRL_MAX];
    ops_t ctrl_rx_ops;
    ops_t ctrl_tx_ops;

    /* Per test. */
    rdmx_mr_t *smr;    /* local send buffer */
    rdmx_mr_t *rmr;    /* local receive buffer (the remote target) */
    rdmx_rmem_t *peer; /* the peer's receive buffer */
    size_t size;
    ops_t tx, rx, rma, flush, ack_tx, ack_rx;
    uint64_t ack_buf[ACK_RING];
    uint64_t *ack_time; /* client send_bw: when each window's ack arrived */
    uint64_t atomic_old;

    /* Server: options and the host to run RPC servers on. */
    const opts_t *opts;
    char host[256];
} perf_t;

/* Timing of one run: samples are per iteration (latency tests) or per full
 * window (bandwidth tests), in ns. */
typedef struct {
    uint64_t *samples;
    uint64_t nsamples;
    uint64_t t_start;
    uint64_t t_end;
} timing_t;

/* One result line. */
typedef struct {
    test_id_t test;
    size_t size;
    uint64_t iters;
    uint64_t window;
    double p50_us, p99_us, p999_us, avg_us; /* one-way / per op / per window */
    double mb_s;                            /* 10^6 bytes per second */
    double msg_s;
    /* RPC tests */
    unsigned threads, workers;
    int poll;
    uint64_t server_responses, server_errors;
} result_t;

/* ------------------------------------------------------------------------ */
/* RPC client threads (rpc_client.c, lambda.c)                              */
/* ------------------------------------------------------------------------ */

typedef struct rpc_run rpc_run_t;

/* lambda_lat: the kinds of call it compares (see main.c). */
enum { LK_RPC, LK_HASH, LK_SOURCE, LK_NOCACHE, LK_COUNT };
#define LAMBDA_SOURCE  "return" /* the empty function (default) */
#define LAMBDA_BLOCK   100      /* calls of one kind in a row */
#define LAMBDA_OUT_MAX 65536    /* --function: longest output accepted */

/* One client thread: its own worker and channel. */
typedef struct {
    rpc_run_t *run;
    unsigned index;
    pthread_t tid;
    bool started;
    int rc;
    rdmx_worker_t *w;
    rdmx_channel_t *ch;
    rdmx_mr_t *mr; /* bulk: the memory lent to the handler */
    rdmx_rpc_bulk_t bulk;
    rdmx_call_params_t params;
    const char *method;
    unsigned char *req;  /* request payload */
    unsigned char *resp; /* rpc_lat: response buffer */
    /* lambda_lat: the encoded lambda.call and lambda.eval requests, and the
     * samples of each kind */
    unsigned char *lreq[LK_COUNT];
    size_t lreq_len[LK_COUNT];
    uint64_t *lsamples[LK_COUNT], lnsamples[LK_COUNT];
    size_t lout_len; /* the function's output length (from the first call) */
    uint64_t token;  /* bulk: value of the last call issued */
    bool validate;   /* bulk: check the token (one call in flight) */
    uint64_t bad;    /* bulk: answers that did not check out */
    /* completions and timing */
    uint64_t done;
    bool measuring;
    uint64_t sample_every, sample_count;
    uint64_t *samples, nsamples, cap;
    uint64_t t_last, t_start, t_end;
    rdmx_status_t err;
    char errmsg[300];
} rpc_thread_t;

struct rpc_run {
    const opts_t *o;
    rdmx_context_t *ctx;
    test_id_t test;
    char address[300];
    size_t size;
    uint64_t iters, warmup, window;
    unsigned threads;
    pthread_barrier_t barrier;
    volatile int abort;
    volatile unsigned finished; /* threads that returned */
    char server_info[128];      /* perf.info, from thread 0 */
    rpc_thread_t *th;
};

/* ------------------------------------------------------------------------ */
/* Errors and waiting (conn.c; the waits are inline: hot path)              */
/* ------------------------------------------------------------------------ */

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void ops_reset(ops_t *o)
{
    memset(o, 0, sizeof(*o));
}

/* Completion callback of every operation counted in an ops_t (@p arg). */
void perf_ops_cb(rdmx_status_t status, size_t length, void *arg);
/* The endpoint's error callback (@p arg: the perf_t). */
void perf_ep_error_cb(rdmx_ep_t *ep, rdmx_status_t status, void *arg);

/* Print "rdmx-perf: WHAT: reason (detail)" and return -1. Call right after
 * the failing rdmx call: the detail is only valid until the next one. */
int perf_fail(const char *what, rdmx_status_t status);
/* The same for an error a completion callback reported (no detail). */
int perf_fail_status(const char *what, rdmx_status_t status);
/* "rdmx-perf: WHAT", -1. */
int perf_fail_msg(const char *what);
/* The connection was lost: say so (unless p->quiet_close), -1. */
int perf_conn_failed(perf_t *p, const char *what);

/*
 * Account for an operation that was just started: 0 when it runs (or ran),
 * 1 on back-pressure (the worker was progressed: start it again), -1 on an
 * error (reported). Use through START(), which retries.
 */
static inline int started(perf_t *p, rdmx_status_t st, ops_t *o,
                          const char *what)
{
    if (st == RDMX_INPROGRESS) {
        o->posted++;
        return 0;
    }
    if (st == RDMX_OK) { /* completed at once; the callback does not run */
        o->posted++;
        o->done++;
        return 0;
    }
    if (st == RDMX_ERR_NO_RESOURCE) {
        rdmx_worker_progress(p->worker);
        return 1;
    }
    return perf_fail(what, st);
}

/* The parameters of a non-blocking operation: callback @p _cb with @p _arg,
 * local region @p _mr (NULL: none). Use as &PERF_OP_CB(...). */
#define PERF_OP_CB(_cb, _arg, _mr)                                             \
    (rdmx_op_params_t)                                                         \
    {                                                                          \
        .field_mask = RDMX_OP_PARAM_FIELD_CB | RDMX_OP_PARAM_FIELD_MR,         \
        .cb = (_cb), .arg = (_arg), .mr = (_mr)                                \
    }

/* Start @p _call, retrying on back-pressure; leaves 0 or -1 in @p _rc. */
#define START(_rc, _p, _ops, _what, _call)                                     \
    do {                                                                       \
        (_rc) = started((_p), (_call), (_ops), (_what));                       \
    } while ((_rc) > 0)

/* Progress once; true when the connection has failed. An operation may
 * have completed in the same call, so callers check for it before giving
 * up. */
static inline bool progress_lost(perf_t *p)
{
    rdmx_worker_progress(p->worker);
    return __builtin_expect(p->conn_status != RDMX_OK, 0);
}

/* Progress until @p o has at least @p target completions. */
static inline int wait_done(perf_t *p, ops_t *o, uint64_t target,
                            const char *what)
{
    while (o->done < target) {
        if (progress_lost(p) && o->done < target) {
            return perf_conn_failed(p, what);
        }
    }
    if (__builtin_expect(o->err != RDMX_OK, 0)) {
        return perf_fail_status(what, o->err);
    }
    return 0;
}

/* Progress until at most @p max operations of @p o are in flight. */
static inline int wait_inflight(perf_t *p, ops_t *o, uint64_t max,
                                const char *what)
{
    return o->posted > max ? wait_done(p, o, o->posted - max, what) : 0;
}

/* Progress until the byte at @p addr equals @p sn. */
static inline int wait_byte(perf_t *p, const volatile uint8_t *addr, uint8_t sn,
                            const char *what)
{
    while (*addr != sn) {
        if (progress_lost(p) && *addr != sn) {
            return perf_conn_failed(p, what);
        }
    }
    return 0;
}

/* SIGALRM: end the process when a test outlived --timeout. */
void perf_watchdog(int sig);
/* (Re)start the watchdog: @p seconds from now (0: never). */
void perf_watchdog_arm(unsigned seconds);

/* Close the connection, let its operations finish or fail (a pending one
 * may still point into the test's memory), then release the memory. */
void perf_teardown_conn(perf_t *p);

/* Windows of @p window operations in @p count, the last one maybe short. */
static inline uint64_t nwindows(uint64_t count, uint64_t window)
{
    return (count + window - 1) / window;
}

/* Where window @p k ends (exclusive). */
static inline uint64_t window_end(uint64_t k, uint64_t count, uint64_t window)
{
    uint64_t end = (k + 1) * window;
    return end < count ? end : count;
}

/* ------------------------------------------------------------------------ */
/* What each file offers                                                    */
/* ------------------------------------------------------------------------ */

/* options.c: fill @p o from the command line; -1 after a message (exit 2).
 * --help prints the usage and exits. */
int perf_parse_args(int argc, char **argv, opts_t *o);

/* control.c */
int perf_ctrl_post_recv(perf_t *p);
int perf_ctrl_wait(perf_t *p, ctrl_t *c, const char *what);
int perf_ctrl_wait_idle(perf_t *p, ctrl_t *c, const char *what);
int perf_ctrl_send(perf_t *p, ctrl_t *c, const void *desc, const char *what);
int perf_ctrl_request(perf_t *p, ctrl_t *req, const void *desc, ctrl_t *reply);
int perf_ctrl_done(perf_t *p, test_id_t test, ctrl_t *ack);
int perf_ctrl_quit(perf_t *p);
int perf_serve_client(perf_t *p);

/* core_tests.c */
uint64_t perf_default_iters(size_t size);
void perf_test_cleanup(perf_t *p);
int perf_server_test(perf_t *p, const ctrl_t *c);
int perf_client_test(perf_t *p, const opts_t *o, test_id_t test, size_t size,
                     const char **server_transport);

/* rpc_server.c */
const char *perf_poll_name(int poll);
void perf_format_address(char *out, size_t cap, const char *host,
                         unsigned port);
int perf_server_rpc_test(perf_t *p, const ctrl_t *c);
int perf_run_rpc_server(perf_t *p, const opts_t *o, const char *host);

/* rpc_client.c */
void perf_rpc_thread_fail(rpc_thread_t *t, const char *what, rdmx_status_t st,
                          const char *detail);
int perf_client_rpc_test(perf_t *p, const opts_t *o, test_id_t test,
                         size_t size, const char **server_transport);

/* lambda.c */
void perf_lambda_nocache(rdmx_rpc_req_t *req, void *arg);
int perf_lambda_setup(rpc_thread_t *t);
int perf_lambda_phase(rpc_thread_t *t, uint64_t count, bool measure);

/* report.c */
extern double g_clock_ns; /* what one timestamp costs (ns) */
double perf_clock_cost_ns(void);
int perf_cmp_u64(const void *a, const void *b);
double perf_percentile(const uint64_t *s, uint64_t n, double q);
void perf_compute(result_t *r, timing_t *t);
void perf_rpc_compute(const rpc_run_t *run, result_t *r);
void perf_server_transport(const opts_t *o, uint32_t transport,
                           const char **server_transport);
void perf_print_header(const opts_t *o, const char *server_transport);
void perf_print_result(const opts_t *o, const result_t *r);
void perf_print_rpc_note(const opts_t *o, const result_t *r,
                         const char *server_transport);
void perf_lambda_print(const opts_t *o, const rpc_run_t *run, const result_t *r,
                       const char *server_transport);

#endif
