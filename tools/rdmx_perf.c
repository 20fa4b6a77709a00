/*
 * rdmx-perf — a perftest-style benchmark of rdmx between two processes.
 *
 * The server (`rdmx-perf --listen [HOST:]PORT`) waits for clients; the client
 * (`rdmx-perf HOST:PORT -t TEST ...`) runs tests against it. Before each test
 * the client sends a small control message naming the test, the size, the
 * iteration counts and the window, together with a descriptor of its receive
 * buffer; the server allocates its buffers with rdmx_mem_alloc(), replies
 * with a descriptor of its own and runs its half of the test. At the end the
 * client sends DONE and waits for the server's acknowledgement, so the two
 * halves start every test from the same point; QUIT / QUIT_ACK ends the
 * session, and the client closes first so that nothing the server sent can
 * be overtaken by the disconnect.
 *
 * The methodology follows ucx_perftest (UCP tests) so that their figures can
 * be compared directly:
 *   send_lat    ping-pong of SIZE-byte messages with receives posted before
 *               the message can arrive; one-way latency = round trip / 2
 *               (ucx_perftest's AM latency test).
 *   send_bw     the client keeps up to W sends in flight; the server keeps
 *               2W receives posted and acknowledges every window of W
 *               messages; the client never runs more than two windows ahead
 *               of the acknowledgements (ucx_perftest's AM bandwidth test, with flow control).
 *   put_lat     the client puts SIZE bytes into the server's buffer; the
 *               server polls the buffer's last byte (a sequence number) while
 *               progressing, then puts back into the client's buffer, which
 *               the client polls; one-way = round trip / 2 (ucx_perftest's put latency test).
 *   put_bw,     W operations in flight, then a flush, per window; reported
 *   get_bw      as MB/s and messages/s. With --flush end: up to W
 *               operations in flight and one flush at the end, which is
 *               exactly ucx_perftest's put bandwidth / get tests with -O W.
 *   get_lat     one get at a time; the latency of each get (ucx_perftest's get test, -O 1).
 *   atomic_lat  one 64-bit fetch-and-add at a time (ucx_perftest's fetch-add test, -O 1).
 * RPC tests (rdmx_rpc_server_* on the server, channels on the client):
 *   rpc_lat     blocking round trips (rdmx_call) of SIZE bytes (default 64)
 *               to an "echo" handler that returns its request; the latency
 *               columns are whole round trips (not halved).
 *   rpc_rate    calls per second with W calls in flight (rdmx_call_nb,
 *               default W 32) to the same handler; with -T N, N client
 *               threads each with its own worker and channel.
 *   rpc_bulk    a call carrying a bulk descriptor of SIZE bytes (default
 *               64 MiB) of the client's memory; the handler pulls it with
 *               rdmx_get_nb and then answers. GB/s of payload moved.
 *   rpc_bulk_push  the same, the handler pushes SIZE bytes into the
 *               client's memory with rdmx_put_nb, flushes, then answers.
 *               With one call in flight the client checks a token in the
 *               first and last 8 bytes that moved.
 *   lambda_lat  the cost of calling an empty Lua function ("return") next to
 *               the data, against a plain RPC round trip, in one run: four
 *               kinds of blocking call, interleaved in blocks of 100 so that
 *               a slow phase of the machine hits all of them alike:
 *                 rpc      perf.echo of SIZE bytes (default 0)
 *                 hash     lambda.call by the function's id: the engine has
 *                          its compiled code cached (the common case)
 *                 source   lambda.eval with the source every time; the
 *                          engine still finds the compiled code cached
 *                 nocache  perf.lambda_nocache: the same lambda.eval
 *                          request, run by a second engine without a cache
 *                          (cache_entries 0), so every call compiles
 *               Requests are encoded once (docs/LAMBDA.md, "Wire format");
 *               SIZE bytes of input go to every call. Each kind gets p50,
 *               p99, p99.9 and its ratio to rpc. --function FILE calls
 *               another function than "return". Not part of "-t rpc".
 * For these the server starts an RPC server on another port for the test
 * only (--server-workers, --poll; busy polling by default) and sleeps on its
 * control connection meanwhile, so that its CPU belongs to the RPC workers;
 * the client's control thread sleeps too. -n is per client thread; calls/s
 * are over all threads, from the first thread's start to the last one's
 * end. --rpc-only runs an RPC server alone (server) or connects the
 * channels straight to one (client), for several client processes against
 * one server. The rpc_bulk* channels allow 30 s of silence before declaring
 * the server down (default 1 s): a worker copying a large buffer inside a
 * handler answers no heartbeat meanwhile.
 * All buffers on both sides come from rdmx_mem_alloc(), which like
 * ucx_perftest's "-m host" maps memory with UCX's "allocate" flag. Each side
 * has a send and a receive buffer of SIZE bytes, as in ucx_perftest, and
 * every operation reuses them.
 *
 * Latency percentiles come from per-iteration timestamps (CLOCK_MONOTONIC,
 * one clock read per iteration, as ucx_perftest reads its clock once per
 * iteration); for bandwidth tests they are the times of whole windows. MB
 * are 10^6 bytes. The server busy-polls while a client is connected and
 * sleeps on the worker's file descriptor otherwise, so an idle server costs
 * no CPU (important on a 2-core machine). Nothing is allocated on the hot
 * path: sample arrays and buffers are set up before each test.
 */
#include <rdmx/lambda.h>
#include <rdmx/rdmx.h>

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

static const struct {
    const char *name;
    bool bw;       /* window test: per-window times, MB/s */
    bool pingpong; /* one-way latency = round trip / 2 */
    bool rpc;      /* runs over an RPC server and channels */
    size_t size;   /* default size (0: the global default, 8 B) */
    uint64_t window; /* default window (0: DEFAULT_WINDOW or 1) */
} g_tests[TEST_COUNT] = {
    [TEST_SEND_LAT] = {"send_lat", false, true},
    [TEST_SEND_BW] = {"send_bw", true, false},
    [TEST_PUT_LAT] = {"put_lat", false, true},
    [TEST_PUT_BW] = {"put_bw", true, false},
    [TEST_GET_LAT] = {"get_lat", false, false},
    [TEST_GET_BW] = {"get_bw", true, false},
    [TEST_ATOMIC_LAT] = {"atomic_lat", false, false},
    [TEST_RPC_LAT] = {"rpc_lat", false, false, true, 64, 1},
    [TEST_RPC_RATE] = {"rpc_rate", true, false, true, 64, 32},
    [TEST_RPC_BULK] = {"rpc_bulk", false, false, true, 64u << 20, 1},
    [TEST_RPC_BULK_PUSH] = {"rpc_bulk_push", false, false, true, 64u << 20,
                            1},
    [TEST_LAMBDA_LAT] = {"lambda_lat", false, false, true, 0, 1},
};

/* RPC handler names (the server registers them all). */
#define RPC_ECHO "perf.echo"
#define RPC_PULL "perf.pull"
#define RPC_PUSH "perf.push"
#define RPC_INFO "perf.info"
#define RPC_LAMBDA_NOCACHE "perf.lambda_nocache"
#define RPC_MAX_WORKERS 64
#define RPC_MAX_THREADS 256

#define MAX_SIZES         64
#define DEFAULT_WINDOW    16
#define DEFAULT_ITERS     10000
#define DEFAULT_WARMUP    1000
#define DEFAULT_TIMEOUT_S 300
#define CONNECT_TIMEOUT   10000 /* ms */

typedef struct {
    const char *listen;  /* server: [HOST:]PORT */
    const char *address; /* client: HOST:PORT */
    bool tests[TEST_COUNT];
    size_t sizes[MAX_SIZES];
    unsigned nsizes;
    uint64_t iters;  /* 0: default per test and size */
    uint64_t warmup; /* UINT64_MAX: default */
    uint64_t window;
    rdmx_transport_t transport;
    bool transport_set;
    bool json;
    bool once;
    bool flush_windows; /* put_bw/get_bw: flush per window (else at end) */
    unsigned timeout_s;
    bool sizes_set;  /* -s or -a given: RPC tests use them too */
    bool window_set; /* -W given */
    unsigned threads; /* RPC client threads (-T), default 1 */
    unsigned server_workers; /* RPC server workers; 0: the default (1) */
    int poll;        /* rdmx_rpc_poll_t; -1: the default (busy) */
    bool rpc_only;   /* server: an RPC server alone; client: no control */
    const char *function; /* lambda_lat: --function FILE (NULL: "return") */
    char *function_src;   /* its source (malloc'd) */
    size_t function_len;
} opts_t;

/* ------------------------------------------------------------------------ */
/* Control protocol                                                         */
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

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static uint32_t get_le32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        v |= (uint32_t)p[i] << (8 * i);
    }
    return v;
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

static size_t ctrl_encode(const ctrl_t *c, unsigned char *buf)
{
    memset(buf, 0, CTRL_HDR);
    put_le32(buf + 0, CTRL_MAGIC);
    put_le32(buf + 4, c->op);
    put_le32(buf + 8, c->test);
    put_le32(buf + 12, (uint32_t)c->status);
    put_le32(buf + 16, c->transport);
    put_le64(buf + 20, c->size);
    put_le64(buf + 28, c->iters);
    put_le64(buf + 36, c->warmup);
    put_le64(buf + 44, c->window);
    put_le32(buf + 52, c->desc_len);
    put_le32(buf + 56, c->workers);
    put_le32(buf + 60, c->poll);
    put_le32(buf + 64, c->rpc_port);
    put_le32(buf + 68, c->threads);
    put_le64(buf + 72, c->stat);
    put_le64(buf + 80, c->stat2);
    return CTRL_HDR + c->desc_len; /* descriptor bytes follow, if any */
}

static bool ctrl_decode(const unsigned char *buf, size_t len, ctrl_t *c)
{
    if (len < CTRL_HDR || get_le32(buf) != CTRL_MAGIC) {
        return false;
    }
    c->op = get_le32(buf + 4);
    c->test = get_le32(buf + 8);
    c->status = (int32_t)get_le32(buf + 12);
    c->transport = get_le32(buf + 16);
    c->size = get_le64(buf + 20);
    c->iters = get_le64(buf + 28);
    c->warmup = get_le64(buf + 36);
    c->window = get_le64(buf + 44);
    c->desc_len = get_le32(buf + 52);
    c->workers = get_le32(buf + 56);
    c->poll = get_le32(buf + 60);
    c->rpc_port = get_le32(buf + 64);
    c->threads = get_le32(buf + 68);
    c->stat = get_le64(buf + 72);
    c->stat2 = get_le64(buf + 80);
    c->desc = buf + CTRL_HDR;
    return (size_t)CTRL_HDR + c->desc_len <= len;
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

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void ops_reset(ops_t *o)
{
    memset(o, 0, sizeof(*o));
}

static void ops_cb(rdmx_status_t status, size_t length, void *arg)
{
    ops_t *o = arg;

    if (status != RDMX_OK && o->err == RDMX_OK) {
        o->err = status;
    }
    o->last_length = length;
    o->done++;
}

/* Client send_bw: the server acknowledged one more window. */
static void ack_cb(rdmx_status_t status, size_t length, void *arg)
{
    perf_t *p = arg;

    if (status == RDMX_OK && p->ack_time != NULL) {
        p->ack_time[p->ack_rx.done] = now_ns();
    }
    ops_cb(status, length, &p->ack_rx);
}

static void ep_error_cb(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    perf_t *p = arg;

    if (ep == p->ep) {
        p->conn_status = status;
    } else if (ep == p->pending) {
        p->pending_status = status;
    }
}

/* ------------------------------------------------------------------------ */
/* Errors and waiting                                                       */
/* ------------------------------------------------------------------------ */

/* Print "rdmx-perf: WHAT: reason (detail)" and return -1. Call right after
 * the failing rdmx call: the detail is only valid until the next one. */
static int fail(const char *what, rdmx_status_t status)
{
    const char *detail = rdmx_error_detail();

    fprintf(stderr, "rdmx-perf: %s: %s (%s)%s%s\n", what, rdmx_strerror(status),
            rdmx_status_name(status), detail[0] ? ": " : "", detail);
    return -1;
}

/* The same for an error a completion callback reported (no detail). */
static int fail_status(const char *what, rdmx_status_t status)
{
    fprintf(stderr, "rdmx-perf: %s: %s (%s)\n", what, rdmx_strerror(status),
            rdmx_status_name(status));
    return -1;
}

static int fail_msg(const char *what)
{
    fprintf(stderr, "rdmx-perf: %s\n", what);
    return -1;
}

static int conn_failed(perf_t *p, const char *what)
{
    if (p->quiet_close) {
        return -1; /* the caller expects that the peer may leave */
    }
    fprintf(stderr, "rdmx-perf: %s: connection lost: %s (%s)\n", what,
            rdmx_strerror(p->conn_status), rdmx_status_name(p->conn_status));
    return -1;
}

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
    return fail(what, st);
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
            return conn_failed(p, what);
        }
    }
    if (__builtin_expect(o->err != RDMX_OK, 0)) {
        return fail_status(what, o->err);
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
            return conn_failed(p, what);
        }
    }
    return 0;
}

static volatile sig_atomic_t g_watchdog_armed;

static void watchdog(int sig)
{
    static const char msg[] =
        "rdmx-perf: timed out (no test finished within --timeout seconds)\n";
    (void)sig;
    if (g_watchdog_armed) {
        ssize_t r = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)r;
        _exit(3);
    }
}

static void watchdog_arm(unsigned seconds)
{
    g_watchdog_armed = seconds != 0;
    alarm(seconds);
}

/* ------------------------------------------------------------------------ */
/* Control messages                                                         */
/* ------------------------------------------------------------------------ */

static int ctrl_post_recv(perf_t *p)
{
    int rc;

    START(rc, p, &p->ctrl_rx_ops, "post control receive",
          rdmx_recv_nb(p->ep, p->ctrl_rx, sizeof(p->ctrl_rx), NULL, ops_cb,
                       &p->ctrl_rx_ops));
    return rc;
}

/* Wait for the control message whose receive was posted last. */
static int ctrl_wait(perf_t *p, ctrl_t *c, const char *what)
{
    if (wait_done(p, &p->ctrl_rx_ops, p->ctrl_rx_ops.posted, what) < 0) {
        return -1;
    }
    if (!ctrl_decode(p->ctrl_rx, p->ctrl_rx_ops.last_length, c)) {
        fprintf(stderr,
                "rdmx-perf: %s: malformed control message (%zu bytes)\n", what,
                p->ctrl_rx_ops.last_length);
        return -1;
    }
    return 0;
}

/* Send a control message (header + @p desc) and wait for its completion. */
static int ctrl_send(perf_t *p, ctrl_t *c, const void *desc, const char *what)
{
    size_t len;
    int rc;

    c->desc_len = desc ? c->desc_len : 0;
    if ((size_t)CTRL_HDR + c->desc_len > sizeof(p->ctrl_tx)) {
        return fail_msg("descriptor too large for a control message");
    }
    len = ctrl_encode(c, p->ctrl_tx);
    if (c->desc_len) {
        memcpy(p->ctrl_tx + CTRL_HDR, desc, c->desc_len);
    }
    START(rc, p, &p->ctrl_tx_ops, what,
          rdmx_send_nb(p->ep, p->ctrl_tx, len, NULL, ops_cb, &p->ctrl_tx_ops));
    if (rc < 0) {
        return -1;
    }
    return wait_done(p, &p->ctrl_tx_ops, p->ctrl_tx_ops.posted, what);
}

/* ------------------------------------------------------------------------ */
/* Per-test resources                                                       */
/* ------------------------------------------------------------------------ */

static size_t buffer_size(size_t size)
{
    return size < 64 ? 64 : size; /* atomics need 8 aligned bytes */
}

/* Allocate the local buffers and pack a descriptor of the receive buffer
 * into @p desc. In put_lat the last byte of each buffer is a sequence
 * number; it starts at 0xff, like ucx_perftest's "unknown" value. */
static int test_setup(perf_t *p, test_id_t test, size_t size,
                      unsigned char *desc, size_t desc_cap, size_t *desc_len)
{
    size_t len = buffer_size(size);
    rdmx_status_t st;

    p->size = size;
    st = rdmx_mem_alloc(p->ctx, len, RDMX_ACCESS_ALL, &p->smr);
    if (st != RDMX_OK) {
        return fail("allocate send buffer", st);
    }
    st = rdmx_mem_alloc(p->ctx, len, RDMX_ACCESS_ALL, &p->rmr);
    if (st != RDMX_OK) {
        return fail("allocate receive buffer", st);
    }
    if (test == TEST_PUT_LAT) {
        ((uint8_t *)rdmx_mr_addr(p->smr))[size - 1] = 0xff;
        ((uint8_t *)rdmx_mr_addr(p->rmr))[size - 1] = 0xff;
    }
    st =
        rdmx_mr_pack(p->rmr, 0, len, RDMX_ACCESS_ALL, desc, desc_cap, desc_len);
    if (st != RDMX_OK) {
        return fail("pack descriptor", st);
    }
    ops_reset(&p->tx);
    ops_reset(&p->rx);
    ops_reset(&p->rma);
    ops_reset(&p->flush);
    ops_reset(&p->ack_tx);
    ops_reset(&p->ack_rx);
    return 0;
}

static bool ops_idle(const ops_t *o)
{
    return o->done >= o->posted;
}

static void test_cleanup(perf_t *p)
{
    if (p->peer) {
        rdmx_rmem_destroy(p->peer);
        p->peer = NULL;
    }
    if (p->smr) {
        rdmx_mem_deregister(p->smr);
        p->smr = NULL;
    }
    if (p->rmr) {
        rdmx_mem_deregister(p->rmr);
        p->rmr = NULL;
    }
    free(p->ack_time);
    p->ack_time = NULL;
}

/* Close the connection, let its operations finish or fail (a pending one
 * may still point into the test's memory), then release the memory. */
static void teardown_conn(perf_t *p)
{
    const ops_t *all[] = {&p->ctrl_rx_ops, &p->ctrl_tx_ops, &p->tx,
                          &p->rx,          &p->rma,         &p->flush,
                          &p->ack_tx,      &p->ack_rx};
    uint64_t deadline = now_ns() + 2000000000ull;

    if (p->ep != NULL) {
        rdmx_ep_close(p->ep);
        p->ep = NULL;
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
            while (!ops_idle(all[i]) && now_ns() < deadline) {
                rdmx_worker_progress(p->worker);
            }
        }
    }
    test_cleanup(p);
}

static uint64_t nwindows(uint64_t count, uint64_t window)
{
    return (count + window - 1) / window;
}

static uint64_t window_end(uint64_t k, uint64_t count, uint64_t window)
{
    uint64_t end = (k + 1) * window;
    return end < count ? end : count;
}

/* ------------------------------------------------------------------------ */
/* Server halves                                                            */
/* ------------------------------------------------------------------------ */

/* Start operations on the connection (0, or -1 with the error reported). */
static inline int post_recv(perf_t *p, ops_t *o, void *buf, size_t len,
                            rdmx_mr_t *mr, const char *what)
{
    int rc;

    START(rc, p, o, what, rdmx_recv_nb(p->ep, buf, len, mr, ops_cb, o));
    return rc;
}

static inline int post_send(perf_t *p, ops_t *o, const void *buf, size_t len,
                            rdmx_mr_t *mr, const char *what)
{
    int rc;

    START(rc, p, o, what, rdmx_send_nb(p->ep, buf, len, mr, ops_cb, o));
    return rc;
}

static inline int post_put(perf_t *p, const char *what)
{
    int rc;

    START(rc, p, &p->rma, what,
          rdmx_put_nb(p->ep, rdmx_mr_addr(p->smr), p->size, p->smr, p->peer, 0,
                      ops_cb, &p->rma));
    return rc;
}

static inline int post_get(perf_t *p, const char *what)
{
    int rc;

    START(rc, p, &p->rma, what,
          rdmx_get_nb(p->ep, rdmx_mr_addr(p->rmr), p->size, p->rmr, p->peer, 0,
                      ops_cb, &p->rma));
    return rc;
}

static inline int post_fadd(perf_t *p, const char *what)
{
    int rc;

    START(rc, p, &p->rma, what,
          rdmx_atomic_fadd_nb(p->ep, p->peer, 0, 1, &p->atomic_old, ops_cb,
                              &p->rma));
    return rc;
}

static inline int post_flush(perf_t *p, const char *what)
{
    int rc;

    START(rc, p, &p->flush, what, rdmx_ep_flush_nb(p->ep, ops_cb, &p->flush));
    return rc;
}

static int server_send_lat(perf_t *p, uint64_t total)
{
    void *sbuf = rdmx_mr_addr(p->smr), *rbuf = rdmx_mr_addr(p->rmr);
    const char *rx = "send_lat: receive", *tx = "send_lat: send";

    if (total == 0) {
        return 0;
    }
    if (post_recv(p, &p->rx, rbuf, p->size, p->rmr, rx) < 0) {
        return -1;
    }
    for (uint64_t i = 0; i < total; i++) {
        if (wait_done(p, &p->rx, i + 1, rx) < 0 ||
            (i + 1 < total &&
             post_recv(p, &p->rx, rbuf, p->size, p->rmr, rx) < 0) ||
            wait_inflight(p, &p->tx, 0, tx) < 0 ||
            post_send(p, &p->tx, sbuf, p->size, p->smr, tx) < 0) {
            return -1;
        }
    }
    return wait_done(p, &p->tx, p->tx.posted, tx);
}

/* One phase (warm-up or measured) of send_bw: receive @p count messages
 * with up to 2W receives posted, acknowledge every window of W. */
static int server_send_bw_phase(perf_t *p, uint64_t count, uint64_t window)
{
    void *rbuf = rdmx_mr_addr(p->rmr);
    uint64_t base = p->rx.posted, posted = 0, acks = 0;
    uint64_t nwin = nwindows(count, window);
    const char *rx = "send_bw: receive", *tx = "send_bw: ack";

    while (acks < nwin) {
        while (posted < count && posted - (p->rx.done - base) < 2 * window) {
            if (post_recv(p, &p->rx, rbuf, p->size, p->rmr, rx) < 0) {
                return -1;
            }
            posted++;
        }
        while (acks < nwin &&
               p->rx.done - base >= window_end(acks, count, window)) {
            uint64_t *slot = &p->ack_buf[acks % ACK_RING];

            if (wait_inflight(p, &p->ack_tx, ACK_RING - 1, tx) < 0) {
                return -1;
            }
            *slot = acks;
            if (post_send(p, &p->ack_tx, slot, sizeof(*slot), NULL, tx) < 0) {
                return -1;
            }
            acks++;
        }
        if (acks < nwin && progress_lost(p)) {
            return conn_failed(p, rx);
        }
        if (p->rx.err != RDMX_OK) {
            return fail_status(rx, p->rx.err);
        }
    }
    return wait_done(p, &p->ack_tx, p->ack_tx.posted, tx);
}

static int server_put_lat(perf_t *p, uint64_t total)
{
    volatile uint8_t *slast = (uint8_t *)rdmx_mr_addr(p->smr) + p->size - 1;
    const volatile uint8_t *rlast =
        (const uint8_t *)rdmx_mr_addr(p->rmr) + p->size - 1;
    const char *what = "put_lat: put";

    for (uint64_t i = 0; i < total; i++) {
        uint8_t sn = (uint8_t)i;

        if (wait_byte(p, rlast, sn, "put_lat: wait for data") < 0) {
            return -1;
        }
        *slast = sn;
        if (wait_inflight(p, &p->rma, 0, what) < 0 || post_put(p, what) < 0) {
            return -1;
        }
    }
    return wait_done(p, &p->rma, p->rma.posted, what);
}

/* ------------------------------------------------------------------------ */
/* RPC server                                                               */
/* ------------------------------------------------------------------------ */

static const char *poll_name(int poll)
{
    switch (poll) {
    case RDMX_RPC_POLL_ADAPTIVE:
        return "adaptive";
    case RDMX_RPC_POLL_BUSY:
        return "busy";
    case RDMX_RPC_POLL_SLEEP:
        return "sleep";
    default:
        return "?";
    }
}

/* A bulk transfer a handler started; kept on its worker's free list. */
typedef struct bulk_op {
    struct bulk_op *next;
    rdmx_rpc_req_t *req;
    struct rpc_srv *srv;
    unsigned wi;
    size_t len;
} bulk_op_t;

/* The handlers' state. Each server worker has its own bulk buffer and free
 * list, touched only by that worker's thread (its handlers run there). */
typedef struct rpc_srv {
    rdmx_context_t *ctx;
    rdmx_rpc_server_t *srv;
    unsigned workers;
    rdmx_rpc_poll_t poll;
    char info[128]; /* perf.info's answer */
    rdmx_lambda_engine_t *lambda;         /* lambda.eval/call/native */
    rdmx_lambda_engine_t *lambda_nocache; /* perf.lambda_nocache */
    struct {
        rdmx_mr_t *mr;
        size_t len;
        bulk_op_t *free_ops;
    } w[RPC_MAX_WORKERS];
} rpc_srv_t;

/* perf.echo: answer with the request. */
static void h_echo(rdmx_rpc_req_t *req, void *arg)
{
    size_t len;
    const void *data = rdmx_rpc_req_data(req, &len);

    (void)arg;
    rdmx_rpc_respond(req, data, len);
}

/* perf.info: "transport=T workers=N poll=P" */
static void h_info(rdmx_rpc_req_t *req, void *arg)
{
    rpc_srv_t *s = arg;

    rdmx_rpc_respond(req, s->info, strlen(s->info));
}

/* perf.lambda_nocache: a lambda.eval request without args (u8 version 1,
 * u8 nkeys 0, u16 nargs 0, u32 source_len, u32 input_len, source, input),
 * run exactly as the library's lambda.eval handler runs it, by the engine
 * without a cache: every call compiles the source. */
static void h_lambda_nocache(rdmx_rpc_req_t *req, void *arg)
{
    rpc_srv_t *s = arg;
    size_t len;
    const unsigned char *b = rdmx_rpc_req_data(req, &len);
    rdmx_lambda_call_t call = {0};
    rdmx_lambda_result_t res;
    uint32_t slen, ilen;
    rdmx_status_t st;

    if (len < 12 || b[0] != 1 || b[1] != 0 || b[2] != 0 || b[3] != 0) {
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO,
                               "perf.lambda_nocache: not a lambda.eval "
                               "request without args");
        return;
    }
    slen = get_le32(b + 4);
    ilen = get_le32(b + 8);
    if ((uint64_t)12 + slen + ilen != len) {
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO,
                               "perf.lambda_nocache: lengths do not add up");
        return;
    }
    call.input = b + 12 + slen;
    call.input_len = ilen;
    call.deadline_ns = rdmx_rpc_req_deadline(req);
    st = rdmx_lambda_engine_eval(s->lambda_nocache, (const char *)b + 12, slen,
                                 &call, &res);
    if (st == RDMX_OK) {
        rdmx_rpc_respond(req, res.output, res.output_len);
    } else {
        rdmx_rpc_respond_error(req, st, "%s", res.message);
    }
    rdmx_lambda_result_free(&res);
}

/* Worker @p wi's bulk buffer, at least @p len bytes. The test's size is
 * allocated before the server starts; this only grows it for a larger
 * request (--rpc-only servers). */
static rdmx_mr_t *bulk_buffer(rpc_srv_t *s, unsigned wi, size_t len)
{
    size_t want = len < 16 ? 16 : len;

    if (s->w[wi].len < want) {
        if (s->w[wi].mr) {
            rdmx_mem_deregister(s->w[wi].mr);
        }
        s->w[wi].mr = NULL;
        s->w[wi].len = 0;
        if (rdmx_mem_alloc(s->ctx, want, RDMX_ACCESS_ALL, &s->w[wi].mr) !=
            RDMX_OK) {
            s->w[wi].mr = NULL;
            return NULL;
        }
        s->w[wi].len = want;
    }
    return s->w[wi].mr;
}

static bulk_op_t *bulk_op_get(rpc_srv_t *s, rdmx_rpc_req_t *req, size_t len)
{
    unsigned wi = rdmx_rpc_req_worker(req);
    bulk_op_t *op;

    if (wi >= RPC_MAX_WORKERS || bulk_buffer(s, wi, len) == NULL) {
        return NULL;
    }
    op = s->w[wi].free_ops;
    if (op != NULL) {
        s->w[wi].free_ops = op->next;
    } else if ((op = malloc(sizeof(*op))) == NULL) {
        return NULL;
    }
    op->req = req;
    op->srv = s;
    op->wi = wi;
    op->len = len;
    return op;
}

static void bulk_op_put(bulk_op_t *op)
{
    rpc_srv_t *s = op->srv;

    op->next = s->w[op->wi].free_ops;
    s->w[op->wi].free_ops = op;
}

static unsigned char *bulk_addr(const bulk_op_t *op)
{
    return rdmx_mr_addr(op->srv->w[op->wi].mr);
}

/* The request's descriptor 0, or an error answer (then NULL). */
static rdmx_rmem_t *req_bulk0(rdmx_rpc_req_t *req)
{
    rdmx_rmem_t *rm;
    rdmx_status_t st;

    if (rdmx_rpc_req_bulk_count(req) != 1) {
        rdmx_rpc_respond_error(req, RDMX_ERR_INVALID,
                               "expected 1 bulk descriptor, got %u",
                               rdmx_rpc_req_bulk_count(req));
        return NULL;
    }
    st = rdmx_rpc_req_bulk(req, 0, &rm);
    if (st != RDMX_OK) {
        rdmx_rpc_respond_error(req, st, "bulk descriptor: %s",
                               rdmx_error_detail());
        return NULL;
    }
    return rm;
}

/* pull done: answer with the first and last 8 bytes that arrived (the
 * client checks them when it has one call in flight). */
static void pull_done(rdmx_status_t status, size_t length, void *arg)
{
    bulk_op_t *op = arg;
    const unsigned char *b = bulk_addr(op);
    unsigned char out[16];

    (void)length;
    if (status != RDMX_OK) {
        rdmx_rpc_respond_error(op->req, status, "bulk get: %s",
                               rdmx_strerror(status));
    } else {
        memcpy(out, b, 8);
        memcpy(out + 8, b + op->len - 8, 8);
        rdmx_rpc_respond(op->req, out, op->len >= 8 ? sizeof(out) : 0);
    }
    bulk_op_put(op);
}

/* perf.pull: get the caller's descriptor 0 (READ) into this worker's
 * buffer, then answer. */
static void h_pull(rdmx_rpc_req_t *req, void *arg)
{
    rpc_srv_t *s = arg;
    rdmx_rmem_t *rm = req_bulk0(req);
    bulk_op_t *op;
    rdmx_status_t st;
    size_t len;

    if (rm == NULL) {
        return;
    }
    len = (size_t)rdmx_rmem_length(rm);
    if ((op = bulk_op_get(s, req, len)) == NULL) {
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY,
                               "no buffer of %zu bytes", len);
        return;
    }
    st = rdmx_get_nb(rdmx_rpc_req_ep(req), bulk_addr(op), len,
                     s->w[op->wi].mr, rm, 0, pull_done, op);
    if (st == RDMX_OK) {
        pull_done(RDMX_OK, len, op);
    } else if (st != RDMX_INPROGRESS) {
        rdmx_rpc_respond_error(req, st, "bulk get: %s", rdmx_error_detail());
        bulk_op_put(op);
    }
}

static void push_flushed(rdmx_status_t status, size_t length, void *arg)
{
    bulk_op_t *op = arg;

    (void)length;
    if (status != RDMX_OK) {
        rdmx_rpc_respond_error(op->req, status, "flush after the bulk put: %s",
                               rdmx_strerror(status));
    } else {
        rdmx_rpc_respond(op->req, NULL, 0);
    }
    bulk_op_put(op);
}

/* The put completed locally: flush, so that the data is at the caller
 * before the answer (UCX orders neither put and message nor lanes). */
static void push_put_done(rdmx_status_t status, size_t length, void *arg)
{
    bulk_op_t *op = arg;
    rdmx_status_t st;

    (void)length;
    if (status != RDMX_OK) {
        rdmx_rpc_respond_error(op->req, status, "bulk put: %s",
                               rdmx_strerror(status));
        bulk_op_put(op);
        return;
    }
    st = rdmx_ep_flush_nb(rdmx_rpc_req_ep(op->req), push_flushed, op);
    if (st == RDMX_OK) {
        push_flushed(RDMX_OK, 0, op);
    } else if (st != RDMX_INPROGRESS) {
        push_flushed(st, 0, op);
    }
}

/* perf.push: payload u64 token; write the token into the first and last 8
 * bytes of this worker's buffer, put it into the caller's descriptor 0
 * (WRITE), flush, answer. */
static void h_push(rdmx_rpc_req_t *req, void *arg)
{
    rpc_srv_t *s = arg;
    rdmx_rmem_t *rm = req_bulk0(req);
    const void *token;
    size_t tlen, len;
    bulk_op_t *op;
    rdmx_status_t st;

    if (rm == NULL) {
        return;
    }
    token = rdmx_rpc_req_data(req, &tlen);
    len = (size_t)rdmx_rmem_length(rm);
    if ((op = bulk_op_get(s, req, len)) == NULL) {
        rdmx_rpc_respond_error(req, RDMX_ERR_NO_MEMORY,
                               "no buffer of %zu bytes", len);
        return;
    }
    if (tlen == 8 && len >= 8) {
        memcpy(bulk_addr(op), token, 8);
        memcpy(bulk_addr(op) + len - 8, token, 8);
    }
    st = rdmx_put_nb(rdmx_rpc_req_ep(req), bulk_addr(op), len,
                     s->w[op->wi].mr, rm, 0, push_put_done, op);
    if (st == RDMX_OK) {
        push_put_done(RDMX_OK, len, op);
    } else if (st != RDMX_INPROGRESS) {
        rdmx_rpc_respond_error(req, st, "bulk put: %s", rdmx_error_detail());
        bulk_op_put(op);
    }
}

/* Start an RPC server on @p address with the perf handlers. @p bulk > 0
 * allocates each worker's bulk buffer up front. */
static int rpc_srv_start(rpc_srv_t *s, rdmx_context_t *ctx,
                         const char *address, unsigned workers,
                         rdmx_rpc_poll_t poll, size_t bulk, size_t max_message,
                         unsigned credits)
{
    rdmx_rpc_server_params_t sp = {
        .field_mask = RDMX_RPC_SERVER_FIELD_ADDRESS |
                      RDMX_RPC_SERVER_FIELD_WORKERS |
                      RDMX_RPC_SERVER_FIELD_POLL |
                      RDMX_RPC_SERVER_FIELD_MAX_MESSAGE |
                      RDMX_RPC_SERVER_FIELD_CREDITS,
        .address = address,
        .workers = workers,
        .poll = poll,
        .max_message = max_message,
        .credits = credits,
    };
    rdmx_status_t st;

    memset(s, 0, sizeof(*s));
    s->ctx = ctx;
    s->workers = workers;
    s->poll = poll;
    snprintf(s->info, sizeof(s->info), "transport=%s workers=%u poll=%s",
             rdmx_transport_name(rdmx_context_transport(ctx)), workers,
             poll_name(poll));
    if (workers == 0 || workers > RPC_MAX_WORKERS) {
        return fail_msg("bad number of server workers");
    }
    for (unsigned i = 0; bulk > 0 && i < workers; i++) {
        if (bulk_buffer(s, i, bulk) == NULL) {
            return fail("allocate the RPC server's bulk buffers",
                        RDMX_ERR_NO_MEMORY);
        }
    }
    st = rdmx_lambda_engine_create(NULL, &s->lambda);
    if (st == RDMX_OK) {
        rdmx_lambda_params_t lp = {
            .field_mask = RDMX_LAMBDA_FIELD_CACHE_ENTRIES,
            .cache_entries = 0,
        };

        st = rdmx_lambda_engine_create(&lp, &s->lambda_nocache);
    }
    if (st != RDMX_OK) {
        return fail("create the lambda engines", st);
    }
    st = rdmx_rpc_server_create(ctx, &sp, &s->srv);
    if (st != RDMX_OK) {
        return fail("create the RPC server", st);
    }
    if ((st = rdmx_rpc_server_register(s->srv, RPC_ECHO, h_echo, s,
                                       RDMX_RPC_IDEMPOTENT)) != RDMX_OK ||
        (st = rdmx_rpc_server_register(s->srv, RPC_INFO, h_info, s,
                                       RDMX_RPC_IDEMPOTENT)) != RDMX_OK ||
        (st = rdmx_rpc_server_register(s->srv, RPC_PULL, h_pull, s, 0)) !=
            RDMX_OK ||
        (st = rdmx_rpc_server_register(s->srv, RPC_PUSH, h_push, s, 0)) !=
            RDMX_OK ||
        (st = rdmx_rpc_server_register(s->srv, RPC_LAMBDA_NOCACHE,
                                       h_lambda_nocache, s, 0)) != RDMX_OK ||
        (st = rdmx_lambda_register_handlers(s->srv, s->lambda, NULL)) !=
            RDMX_OK) {
        return fail("register the RPC handlers", st);
    }
    st = rdmx_rpc_server_start(s->srv);
    if (st != RDMX_OK) {
        char what[300];

        snprintf(what, sizeof(what), "start the RPC server on %s", address);
        return fail(what, st);
    }
    return 0;
}

static void rpc_srv_stop(rpc_srv_t *s, rdmx_rpc_server_stats_t *stats)
{
    if (s->srv != NULL) {
        if (stats != NULL) {
            rdmx_rpc_server_stats(s->srv, stats);
        }
        rdmx_rpc_server_destroy(s->srv);
        s->srv = NULL;
    }
    /* after the server: its handlers use them until it is gone */
    if (s->lambda != NULL) {
        rdmx_lambda_engine_destroy(s->lambda);
        s->lambda = NULL;
    }
    if (s->lambda_nocache != NULL) {
        rdmx_lambda_engine_destroy(s->lambda_nocache);
        s->lambda_nocache = NULL;
    }
    for (unsigned i = 0; i < RPC_MAX_WORKERS; i++) {
        while (s->w[i].free_ops != NULL) {
            bulk_op_t *op = s->w[i].free_ops;
            s->w[i].free_ops = op->next;
            free(op);
        }
        if (s->w[i].mr != NULL) {
            rdmx_mem_deregister(s->w[i].mr);
            s->w[i].mr = NULL;
            s->w[i].len = 0;
        }
    }
}

/* "host:port", with brackets for an IPv6 host. */
static void format_address(char *out, size_t cap, const char *host,
                           unsigned port)
{
    bool v6 = strchr(host, ':') != NULL;

    snprintf(out, cap, "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "",
             port);
}

/* Wait for a control message while sleeping on the worker's fd: during an
 * RPC test this process's CPU time belongs to the RPC server's workers. */
static int ctrl_wait_idle(perf_t *p, ctrl_t *c, const char *what)
{
    while (p->ctrl_rx_ops.done < p->ctrl_rx_ops.posted) {
        if (p->conn_status != RDMX_OK) {
            return conn_failed(p, what);
        }
        rdmx_worker_wait(p->worker, 100);
    }
    if (p->ctrl_rx_ops.err != RDMX_OK) {
        return fail_status(what, p->ctrl_rx_ops.err);
    }
    if (!ctrl_decode(p->ctrl_rx, p->ctrl_rx_ops.last_length, c)) {
        return fail_msg("malformed control message");
    }
    return 0;
}

/* The server half of an RPC test: run an RPC server for its duration. */
static int server_rpc_test(perf_t *p, const ctrl_t *c)
{
    const opts_t *o = p->opts;
    ctrl_t reply = {.op = OP_REPLY, .test = c->test}, done;
    ctrl_t ack = {.op = OP_DONE_ACK, .test = c->test};
    rdmx_rpc_server_stats_t stats = {0};
    char address[300];
    rpc_srv_t *s;
    unsigned workers;
    int poll, rc;

    workers = c->workers ? c->workers
              : o->server_workers ? o->server_workers
                                  : 1;
    poll = c->poll != UINT32_MAX ? (int)c->poll
           : o->poll >= 0        ? o->poll
                                 : RDMX_RPC_POLL_BUSY;
    reply.transport = (uint32_t)rdmx_context_transport(p->ctx);
    reply.workers = workers;
    reply.poll = (uint32_t)poll;
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        reply.status = RDMX_ERR_NO_MEMORY;
        return ctrl_send(p, &reply, NULL, "reply");
    }
    format_address(address, sizeof(address), p->host, 0);
    if (poll < 0 || poll > RDMX_RPC_POLL_SLEEP ||
        rpc_srv_start(s, p->ctx, address, workers, (rdmx_rpc_poll_t)poll,
                      c->test == TEST_RPC_BULK ||
                              c->test == TEST_RPC_BULK_PUSH
                          ? c->size
                          : 0,
                      c->size + 4096 > (64u << 20) ? c->size + 4096
                                                   : (64u << 20),
                      /* credits are per connection (client thread) */
                      c->window > 240 ? (unsigned)c->window + 16 : 256) < 0) {
        rpc_srv_stop(s, NULL);
        free(s);
        reply.status = RDMX_ERR_INVALID;
        return ctrl_send(p, &reply, NULL, "reply");
    }
    reply.rpc_port = rdmx_rpc_server_port(s->srv);
    rc = ctrl_post_recv(p);
    if (rc == 0) {
        rc = ctrl_send(p, &reply, NULL, "reply");
    }
    if (rc == 0) {
        rc = ctrl_wait_idle(p, &done, "wait for the client's done");
    }
    if (rc == 0 && done.op != OP_DONE) {
        rc = fail_msg("protocol error: expected DONE");
    }
    rpc_srv_stop(s, &stats);
    free(s);
    if (rc == 0) {
        ack.stat = stats.responses;
        ack.stat2 = stats.errors;
        rc = ctrl_send(p, &ack, NULL, "done ack");
    }
    return rc;
}

/* Run the server half of the test in @p c. The DONE control message that
 * ends it is received into ctrl_rx. */
static int server_test(perf_t *p, const ctrl_t *c)
{
    unsigned char desc[CTRL_MAX - CTRL_HDR];
    size_t desc_len = 0;
    ctrl_t reply = {.op = OP_REPLY, .test = c->test};
    ctrl_t done;
    rdmx_status_t st;
    uint64_t total = c->warmup + c->iters;
    int rc = 0;

    reply.transport = (uint32_t)rdmx_context_transport(p->ctx);
    if (c->test >= TEST_COUNT || c->window == 0 ||
        (c->size == 0 && c->test != TEST_LAMBDA_LAT)) {
        reply.status = RDMX_ERR_INVALID;
        return ctrl_send(p, &reply, NULL, "reply");
    }
    if (g_tests[c->test].rpc) {
        return server_rpc_test(p, c);
    }
    if (test_setup(p, (test_id_t)c->test, c->size, desc, sizeof(desc),
                   &desc_len) < 0) {
        reply.status = RDMX_ERR_NO_MEMORY;
        test_cleanup(p);
        return ctrl_send(p, &reply, NULL, "reply");
    }
    st = rdmx_rmem_unpack(p->ep, c->desc, c->desc_len, &p->peer);
    if (st != RDMX_OK) {
        fail("unpack the client's descriptor", st);
        reply.status = st;
        test_cleanup(p);
        return ctrl_send(p, &reply, NULL, "reply");
    }
    reply.desc_len = (uint32_t)desc_len;
    if (ctrl_send(p, &reply, desc, "reply") < 0) {
        return -1;
    }

    switch ((test_id_t)c->test) {
    case TEST_SEND_LAT:
        rc = server_send_lat(p, total);
        break;
    case TEST_SEND_BW:
        rc = server_send_bw_phase(p, c->warmup, c->window);
        if (rc == 0) {
            rc = server_send_bw_phase(p, c->iters, c->window);
        }
        break;
    case TEST_PUT_LAT:
        rc = server_put_lat(p, total);
        break;
    default: /* one-sided: only progress until DONE */
        break;
    }
    if (rc == 0) {
        rc = ctrl_post_recv(p);
    }
    if (rc == 0) {
        rc = ctrl_wait(p, &done, "wait for the client's done");
    }
    if (rc == 0 && done.op != OP_DONE) {
        rc = fail_msg("protocol error: expected DONE");
    }
    if (rc == 0) {
        ctrl_t ack = {.op = OP_DONE_ACK, .test = c->test};
        rc = ctrl_send(p, &ack, NULL, "done ack");
    }
    if (rc == 0) {
        test_cleanup(p); /* else teardown_conn() does it after the close */
    }
    return rc;
}

/* The client said QUIT: acknowledge, then let the client close first, so
 * that nothing the server sent can be overtaken by the disconnect. */
static int server_quit(perf_t *p)
{
    ctrl_t ack = {.op = OP_QUIT_ACK};
    uint64_t deadline = now_ns() + 2000000000ull;

    if (ctrl_send(p, &ack, NULL, "quit ack") < 0) {
        return -1;
    }
    while (p->conn_status == RDMX_OK && now_ns() < deadline) {
        rdmx_worker_wait(p->worker, 10);
    }
    return 0;
}

/* Serve one connected client until it quits or fails. */
static int serve_client(perf_t *p)
{
    for (;;) {
        ctrl_t c;
        int rc;

        if (ctrl_post_recv(p) < 0) {
            return -1;
        }
        /* between tests, a client may go away without QUIT */
        p->quiet_close = true;
        rc = ctrl_wait(p, &c, "wait for a request");
        p->quiet_close = false;
        if (rc < 0) {
            if (p->conn_status == RDMX_OK) {
                return -1;
            }
            fprintf(stderr, "rdmx-perf: the client left without QUIT: %s\n",
                    rdmx_strerror(p->conn_status));
            return 0;
        }
        if (c.op == OP_QUIT) {
            return server_quit(p);
        }
        if (c.op != OP_TEST) {
            return fail_msg("protocol error: expected a test request");
        }
        if (server_test(p, &c) < 0) {
            return -1;
        }
    }
}

static void accept_cb(rdmx_ep_t *ep, void *arg)
{
    perf_t *p = arg;

    if (p->pending != NULL) {
        rdmx_ep_close(ep); /* one client at a time */
        return;
    }
    p->pending = ep;
    p->pending_status = RDMX_OK;
}

/* ------------------------------------------------------------------------ */
/* Client halves                                                            */
/* ------------------------------------------------------------------------ */

/* Timing of one run: samples are per iteration (latency tests) or per full
 * window (bandwidth tests), in ns. */
typedef struct {
    uint64_t *samples;
    uint64_t nsamples;
    uint64_t t_start;
    uint64_t t_end;
} timing_t;

static inline void sample(timing_t *t, uint64_t *t_last)
{
    uint64_t now = now_ns();

    t->samples[t->nsamples++] = now - *t_last;
    *t_last = now;
}

static int client_send_lat(perf_t *p, uint64_t warmup, uint64_t iters,
                           timing_t *t)
{
    void *sbuf = rdmx_mr_addr(p->smr), *rbuf = rdmx_mr_addr(p->rmr);
    uint64_t total = warmup + iters, t_last = 0;
    const char *rx = "send_lat: receive", *tx = "send_lat: send";

    if (post_recv(p, &p->rx, rbuf, p->size, p->rmr, rx) < 0) {
        return -1;
    }
    for (uint64_t i = 0; i < total; i++) {
        if (i == warmup) {
            t_last = t->t_start = now_ns();
        }
        if (wait_inflight(p, &p->tx, 0, tx) < 0 ||
            post_send(p, &p->tx, sbuf, p->size, p->smr, tx) < 0 ||
            wait_done(p, &p->rx, i + 1, rx) < 0 ||
            (i + 1 < total &&
             post_recv(p, &p->rx, rbuf, p->size, p->rmr, rx) < 0)) {
            return -1;
        }
        if (i >= warmup) {
            sample(t, &t_last);
        }
    }
    t->t_end = t_last;
    return wait_done(p, &p->tx, p->tx.posted, tx);
}

/* One phase of send_bw. With @p t, the phase is timed per window by the
 * arrival of the server's acknowledgements. */
static int client_send_bw_phase(perf_t *p, uint64_t count, uint64_t window,
                                timing_t *t)
{
    void *sbuf = rdmx_mr_addr(p->smr);
    uint64_t nwin = nwindows(count, window), msg = 0, t_start;
    const char *tx = "send_bw: send", *ack = "send_bw: ack";

    if (count == 0) {
        return 0;
    }
    ops_reset(&p->ack_rx);
    t_start = now_ns();
    for (uint64_t k = 0; k < nwin; k++) {
        uint64_t end = window_end(k, count, window);
        int rc;

        START(rc, p, &p->ack_rx, ack,
              rdmx_recv_nb(p->ep, &p->ack_buf[k % ACK_RING],
                           sizeof(p->ack_buf[0]), NULL, ack_cb, p));
        if (rc < 0) {
            return -1;
        }
        /* at most two windows ahead of the acknowledgements */
        if (k >= 2 && wait_done(p, &p->ack_rx, k - 1, ack) < 0) {
            return -1;
        }
        for (; msg < end; msg++) {
            if (wait_inflight(p, &p->tx, window - 1, tx) < 0 ||
                post_send(p, &p->tx, sbuf, p->size, p->smr, tx) < 0) {
                return -1;
            }
        }
    }
    if (wait_done(p, &p->ack_rx, nwin, ack) < 0 ||
        wait_done(p, &p->tx, p->tx.posted, tx) < 0) {
        return -1;
    }
    if (t != NULL) {
        uint64_t prev = t_start;

        t->t_start = t_start;
        for (uint64_t k = 0; k < nwin; k++) {
            if (window_end(k, count, window) - k * window == window) {
                t->samples[t->nsamples++] = p->ack_time[k] - prev;
            }
            prev = p->ack_time[k];
        }
        t->t_end = p->ack_time[nwin - 1];
    }
    return 0;
}

static int client_put_lat(perf_t *p, uint64_t warmup, uint64_t iters,
                          timing_t *t)
{
    volatile uint8_t *slast = (uint8_t *)rdmx_mr_addr(p->smr) + p->size - 1;
    const volatile uint8_t *rlast =
        (const uint8_t *)rdmx_mr_addr(p->rmr) + p->size - 1;
    uint64_t total = warmup + iters, t_last = 0;
    const char *what = "put_lat: put";

    for (uint64_t i = 0; i < total; i++) {
        uint8_t sn = (uint8_t)i;

        if (i == warmup) {
            t_last = t->t_start = now_ns();
        }
        *slast = sn;
        if (wait_inflight(p, &p->rma, 0, what) < 0 || post_put(p, what) < 0 ||
            wait_byte(p, rlast, sn, "put_lat: wait for the reply") < 0) {
            return -1;
        }
        if (i >= warmup) {
            sample(t, &t_last);
        }
    }
    t->t_end = t_last;
    return wait_done(p, &p->rma, p->rma.posted, what);
}

/* get_lat and atomic_lat: one operation at a time. */
static int client_rma_lat(perf_t *p, test_id_t test, uint64_t warmup,
                          uint64_t iters, timing_t *t)
{
    uint64_t total = warmup + iters, t_last = 0;
    const bool get = test == TEST_GET_LAT;
    const char *what = get ? "get_lat: get" : "atomic_lat: fetch-add";

    for (uint64_t i = 0; i < total; i++) {
        if (i == warmup) {
            t_last = t->t_start = now_ns();
        }
        if ((get ? post_get(p, what) : post_fadd(p, what)) < 0 ||
            wait_done(p, &p->rma, p->rma.posted, what) < 0) {
            return -1;
        }
        if (i >= warmup) {
            sample(t, &t_last);
        }
    }
    t->t_end = t_last;
    if (!get && p->atomic_old != total - 1) {
        fprintf(stderr,
                "rdmx-perf: atomic_lat: the last fetch-add returned %" PRIu64
                ", expected %" PRIu64 "\n",
                p->atomic_old, total - 1);
        return -1;
    }
    return 0;
}

/*
 * put_bw and get_bw. With @p flush_windows: windows of W operations, each
 * closed by a flush (the default). Without: up to W operations in flight
 * (counted by local completion) and one flush at the end of the phase,
 * exactly as ucx_perftest's put bandwidth / get tests with -O W; the per-window
 * times are then the times to issue W operations.
 */
static int client_rma_bw_phase(perf_t *p, test_id_t test, uint64_t count,
                               uint64_t window, bool flush_windows, timing_t *t)
{
    uint64_t nwin = nwindows(count, window), t_last;
    const bool put = test == TEST_PUT_BW;
    const char *what = put ? "put_bw: put" : "get_bw: get";

    t_last = now_ns();
    if (t != NULL) {
        t->t_start = t_last;
    }
    if (!flush_windows) {
        for (uint64_t i = 0; i < count; i++) {
            if (wait_inflight(p, &p->rma, window - 1, what) < 0 ||
                (put ? post_put(p, what) : post_get(p, what)) < 0) {
                return -1;
            }
            if (t != NULL && (i + 1) % window == 0) {
                sample(t, &t_last);
            }
        }
        if (post_flush(p, "flush") < 0 ||
            wait_done(p, &p->flush, p->flush.posted, "flush") < 0 ||
            wait_done(p, &p->rma, p->rma.posted, what) < 0) {
            return -1;
        }
        if (t != NULL) {
            t->t_end = now_ns();
        }
        return 0;
    }
    for (uint64_t k = 0; k < nwin; k++) {
        uint64_t n = window_end(k, count, window) - k * window;

        for (uint64_t j = 0; j < n; j++) {
            if ((put ? post_put(p, what) : post_get(p, what)) < 0) {
                return -1;
            }
        }
        if (post_flush(p, "flush") < 0 ||
            wait_done(p, &p->flush, p->flush.posted, "flush") < 0 ||
            wait_done(p, &p->rma, p->rma.posted, what) < 0) {
            return -1;
        }
        if (t != NULL) {
            if (n == window) {
                sample(t, &t_last);
            } else {
                t_last = now_ns();
            }
        }
    }
    if (t != NULL) {
        t->t_end = t_last;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Results                                                                  */
/* ------------------------------------------------------------------------ */

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

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted samples. */
static double percentile(const uint64_t *s, uint64_t n, double q)
{
    uint64_t rank;

    if (n == 0) {
        return NAN;
    }
    rank = (uint64_t)ceil(q * (double)n);
    rank = rank == 0 ? 1 : rank > n ? n : rank;
    return (double)s[rank - 1];
}

static void compute(result_t *r, timing_t *t)
{
    const bool pp = g_tests[r->test].pingpong;
    const double div = pp ? 2000.0 : 1000.0; /* ns -> us (one-way) */
    const double secs = (double)(t->t_end - t->t_start) / 1e9;
    const double msgs = (double)r->iters * (pp ? 2.0 : 1.0);

    qsort(t->samples, t->nsamples, sizeof(*t->samples), cmp_u64);
    r->p50_us = percentile(t->samples, t->nsamples, 0.50) / div;
    r->p99_us = percentile(t->samples, t->nsamples, 0.99) / div;
    r->p999_us = percentile(t->samples, t->nsamples, 0.999) / div;
    if (g_tests[r->test].bw) {
        r->avg_us = secs * 1e6 / (double)nwindows(r->iters, r->window);
    } else {
        r->avg_us = secs * 1e6 / msgs;
    }
    r->msg_s = secs > 0 ? msgs / secs : NAN;
    r->mb_s = r->msg_s * (double)r->size / 1e6;
}

/* What one timestamp costs (ns): every latency sample includes one. */
static double g_clock_ns;

static double clock_cost_ns(void)
{
    double best = 1e9;

    for (int r = 0; r < 5; r++) {
        uint64_t t0 = now_ns(), t1;
        volatile uint64_t sink = 0;

        for (int i = 0; i < 10000; i++) {
            sink += now_ns();
        }
        t1 = now_ns();
        if ((double)(t1 - t0) / 10000.0 < best) {
            best = (double)(t1 - t0) / 10000.0;
        }
        (void)sink;
    }
    return best;
}

static void print_header(const opts_t *o, const char *server_transport)
{
    if (o->json) {
        return;
    }
    printf("# rdmx-perf %s -> %s, transport %s (server: %s), window %" PRIu64
           ", put/get_bw flush per %s\n",
           rdmx_version(), o->address,
           rdmx_transport_name(o->transport) ? rdmx_transport_name(o->transport)
                                             : "?",
           server_transport, o->window, o->flush_windows ? "window" : "run");
    printf("# latency columns: one-way (round trip / 2) for send_lat and "
           "put_lat, per operation\n"
           "# for get_lat and atomic_lat, per window of W operations for "
           "*_bw; MB = 10^6 bytes\n"
           "# each sample includes one clock_gettime (%.1f ns here)\n",
           g_clock_ns);
    printf("%-10s %10s %9s %10s %10s %10s %10s %11s %12s\n", "test", "bytes",
           "iters", "p50[us]", "p99[us]", "p99.9[us]", "avg[us]", "MB/s",
           "msg/s");
    fflush(stdout);
}

static void print_result(const opts_t *o, const result_t *r)
{
    if (o->json && g_tests[r->test].rpc) {
        printf("{\"test\":\"%s\",\"bytes\":%zu,\"iterations\":%" PRIu64
               ",\"window\":%" PRIu64 ",\"threads\":%u,"
               "\"server_workers\":%u,\"poll\":\"%s\",\"transport\":\"%s\","
               "\"latency\":\"%s\",\"p50_us\":%.4f,\"p99_us\":%.4f,"
               "\"p999_us\":%.4f,\"avg_us\":%.4f,\"mb_per_s\":%.2f,"
               "\"gb_per_s\":%.4f,\"msg_per_s\":%.1f,\"calls_per_s\":%.1f,"
               "\"clock_ns\":%.1f}\n",
               g_tests[r->test].name, r->size, r->iters, r->window,
               r->threads, r->workers, poll_name(r->poll),
               rdmx_transport_name(o->transport),
               r->test == TEST_RPC_RATE  ? "window"
               : r->test == TEST_RPC_LAT ? "round_trip"
                                         : "call",
               r->p50_us,
               r->p99_us, r->p999_us, r->avg_us, r->mb_s, r->mb_s / 1000.0,
               r->msg_s, r->msg_s, g_clock_ns);
        fflush(stdout);
        return;
    }
    if (o->json) {
        printf("{\"test\":\"%s\",\"bytes\":%zu,\"iterations\":%" PRIu64
               ",\"window\":%" PRIu64 ",\"transport\":\"%s\","
               "\"p50_us\":%.4f,\"p99_us\":%.4f,\"p999_us\":%.4f,"
               "\"avg_us\":%.4f,\"mb_per_s\":%.2f,\"msg_per_s\":%.1f,"
               "\"flush\":\"%s\",\"clock_ns\":%.1f}\n",
               g_tests[r->test].name, r->size, r->iters, r->window,
               rdmx_transport_name(o->transport), r->p50_us, r->p99_us,
               r->p999_us, r->avg_us, r->mb_s, r->msg_s,
               o->flush_windows ? "window" : "end", g_clock_ns);
    } else {
        printf("%-10s %10zu %9" PRIu64
               " %10.3f %10.3f %10.3f %10.3f %11.2f %12.0f\n",
               g_tests[r->test].name, r->size, r->iters, r->p50_us, r->p99_us,
               r->p999_us, r->avg_us, r->mb_s, r->msg_s);
    }
    fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                   */
/* ------------------------------------------------------------------------ */

static uint64_t default_iters(size_t size)
{
    uint64_t n = DEFAULT_ITERS;

    if (size > 65536) {
        n = (uint64_t)DEFAULT_ITERS * 65536 / size;
        n = n < 100 ? 100 : n;
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* RPC client                                                               */
/* ------------------------------------------------------------------------ */

typedef struct rpc_run rpc_run_t;

/* lambda_lat: the kinds of call it compares (see the top of the file). */
enum { LK_RPC, LK_HASH, LK_SOURCE, LK_NOCACHE, LK_COUNT };
static const char *const lk_names[LK_COUNT] = {"rpc", "hash", "source",
                                               "nocache"};
static const char *const lk_what[LK_COUNT] = {
    "perf.echo (plain RPC round trip)",
    "lambda.call by id, compiled code cached",
    "lambda.eval with the source, cached engine",
    "lambda.eval with the source, no cache",
};
#define LAMBDA_SOURCE "return" /* the empty function (default) */
#define LAMBDA_BLOCK  100      /* calls of one kind in a row */
#define LAMBDA_OUT_MAX 65536   /* --function: longest output accepted */

/* One client thread: its own worker and channel. */
typedef struct {
    rpc_run_t *run;
    unsigned index;
    pthread_t tid;
    bool started;
    int rc;
    rdmx_worker_t *w;
    rdmx_channel_t *ch;
    rdmx_mr_t *mr;       /* bulk: the memory lent to the handler */
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
    uint64_t token;      /* bulk: value of the last call issued */
    bool validate;       /* bulk: check the token (one call in flight) */
    uint64_t bad;        /* bulk: answers that did not check out */
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

static void rpc_thread_fail(rpc_thread_t *t, const char *what,
                            rdmx_status_t st, const char *detail)
{
    if (!t->run->abort) {
        fprintf(stderr, "rdmx-perf: %s thread %u: %s: %s (%s)%s%s\n",
                g_tests[t->run->test].name, t->index, what, rdmx_strerror(st),
                rdmx_status_name(st), detail && detail[0] ? ": " : "",
                detail ? detail : "");
    }
    t->run->abort = 1;
}

static void rpc_cb(const rdmx_call_result_t *r, void *arg)
{
    rpc_thread_t *t = arg;

    if (r->status != RDMX_OK) {
        if (t->err == RDMX_OK) {
            t->err = r->status;
            snprintf(t->errmsg, sizeof(t->errmsg), "%s", r->message);
        }
    } else if (t->validate) {
        const unsigned char *b = rdmx_mr_addr(t->mr);
        uint64_t first, last;

        if (t->run->test == TEST_RPC_BULK) { /* the server's view */
            if (r->length != 16) {
                t->bad++;
            } else {
                memcpy(&first, r->data, 8);
                memcpy(&last, (const unsigned char *)r->data + 8, 8);
                t->bad += first != t->token || last != t->token;
            }
        } else { /* what the server wrote into our memory */
            memcpy(&first, b, 8);
            memcpy(&last, b + t->run->size - 8, 8);
            t->bad += first != t->token || last != t->token;
        }
    }
    t->done++;
    if (t->measuring && ++t->sample_count == t->sample_every) {
        uint64_t now = now_ns();

        t->sample_count = 0;
        if (t->nsamples < t->cap) {
            t->samples[t->nsamples++] = now - t->t_last;
        }
        t->t_last = now;
    }
}

static rdmx_status_t rpc_issue(rpc_thread_t *t)
{
    rpc_run_t *run = t->run;

    switch (run->test) {
    case TEST_RPC_RATE:
        return rdmx_call_nb(t->ch, RPC_ECHO, t->req, run->size, NULL, rpc_cb,
                            t, NULL);
    case TEST_RPC_BULK:
        if (t->validate) {
            unsigned char *b = rdmx_mr_addr(t->mr);

            t->token++;
            memcpy(b, &t->token, 8);
            memcpy(b + run->size - 8, &t->token, 8);
        }
        return rdmx_call_nb(t->ch, RPC_PULL, NULL, 0, &t->params, rpc_cb, t,
                            NULL);
    default: /* TEST_RPC_BULK_PUSH */
        t->token++;
        return rdmx_call_nb(t->ch, RPC_PUSH, &t->token, sizeof(t->token),
                            &t->params, rpc_cb, t, NULL);
    }
}

/* @p count calls with up to W in flight (rpc_rate, rpc_bulk*). */
static int rpc_phase_window(rpc_thread_t *t, uint64_t count, bool measure)
{
    rpc_run_t *run = t->run;
    const uint64_t base = t->done, window = run->window;
    uint64_t posted = 0;

    t->measuring = measure;
    t->sample_count = 0;
    if (measure) {
        t->t_last = t->t_start = now_ns();
    }
    while (t->done - base < count) {
        while (posted < count && posted - (t->done - base) < window) {
            rdmx_status_t st = rpc_issue(t);

            if (st == RDMX_INPROGRESS) {
                posted++;
                continue;
            }
            if (st == RDMX_ERR_NO_RESOURCE) {
                break; /* over the credits: progress, then retry */
            }
            rpc_thread_fail(t, "call", st, rdmx_error_detail());
            return -1;
        }
        rdmx_worker_progress(t->w);
        if (__builtin_expect(t->err != RDMX_OK, 0)) {
            rpc_thread_fail(t, "call failed", t->err, t->errmsg);
            return -1;
        }
        if (__builtin_expect(run->abort, 0)) {
            return -1;
        }
    }
    if (measure) {
        t->t_end = now_ns();
        t->measuring = false;
    }
    return 0;
}

/* @p count blocking round trips (rpc_lat). */
static int rpc_phase_lat(rpc_thread_t *t, uint64_t count, bool measure)
{
    rpc_run_t *run = t->run;
    uint64_t t_last = 0;

    if (measure) {
        t_last = t->t_start = now_ns();
    }
    for (uint64_t i = 0; i < count; i++) {
        size_t got = 0;
        rdmx_status_t st = rdmx_call(t->ch, RPC_ECHO, t->req, run->size, NULL,
                                     t->resp, run->size, &got);

        if (st != RDMX_OK) {
            rpc_thread_fail(t, "call", st, rdmx_error_detail());
            return -1;
        }
        if (got != run->size || (i == 0 && memcmp(t->resp, t->req, got))) {
            rpc_thread_fail(t, "echo", RDMX_ERR_PROTO,
                            "the answer differs from the request");
            return -1;
        }
        if (measure) {
            uint64_t now = now_ns();

            t->samples[t->nsamples++] = now - t_last;
            t_last = now;
        }
        if (__builtin_expect(run->abort, 0)) {
            return -1;
        }
    }
    if (measure) {
        t->t_end = t_last;
    }
    t->done += count;
    return 0;
}

/* @p count blocking calls of each lambda_lat kind, interleaved in blocks
 * of LAMBDA_BLOCK. */
static int rpc_phase_lambda(rpc_thread_t *t, uint64_t count, bool measure)
{
    static const char *const method[LK_COUNT] = {
        RPC_ECHO, "lambda.call", "lambda.eval", RPC_LAMBDA_NOCACHE};
    rpc_run_t *run = t->run;

    for (uint64_t done = 0; done < count; done += LAMBDA_BLOCK) {
        uint64_t n = count - done < LAMBDA_BLOCK ? count - done : LAMBDA_BLOCK;

        for (int k = 0; k < LK_COUNT; k++) {
            uint64_t t_last = now_ns();

            for (uint64_t i = 0; i < n; i++) {
                size_t got = 0;
                rdmx_status_t st =
                    rdmx_call(t->ch, method[k], t->lreq[k], t->lreq_len[k],
                              NULL, t->resp, run->size + LAMBDA_OUT_MAX, &got);

                if (st != RDMX_OK) {
                    rpc_thread_fail(t, method[k], st, rdmx_error_detail());
                    return -1;
                }
                /* echo: the request back; the function: what it gave the
                 * first time */
                if (got != (k == LK_RPC ? run->size : t->lout_len)) {
                    rpc_thread_fail(t, method[k], RDMX_ERR_PROTO,
                                    "unexpected answer length");
                    return -1;
                }
                if (measure) {
                    uint64_t now = now_ns();

                    t->lsamples[k][t->lnsamples[k]++] = now - t_last;
                    t_last = now;
                }
            }
            if (__builtin_expect(run->abort, 0)) {
                return -1;
            }
        }
    }
    t->done += count * LK_COUNT;
    return 0;
}

static int rpc_phase(rpc_thread_t *t, uint64_t count, bool measure)
{
    switch (t->run->test) {
    case TEST_RPC_LAT:
        return rpc_phase_lat(t, count, measure);
    case TEST_LAMBDA_LAT:
        return rpc_phase_lambda(t, count, measure);
    default:
        return rpc_phase_window(t, count, measure);
    }
}

/* lambda_lat: encode the four requests once (docs/LAMBDA.md, "Wire
 * format"); the input is SIZE bytes of t->req. */
static int lambda_requests(rpc_thread_t *t)
{
    const opts_t *o = t->run->o;
    const char *src = o->function_src ? o->function_src : LAMBDA_SOURCE;
    const size_t size = t->run->size,
                 sl = o->function_src ? o->function_len : strlen(src);
    uint8_t id[RDMX_LAMBDA_ID_LEN];
    unsigned char *b;

    rdmx_lambda_id(src, sl, id);
    t->lreq[LK_RPC] = malloc(size ? size : 1);
    t->lreq[LK_HASH] = b = malloc(40 + size);
    if (t->lreq[LK_RPC] == NULL || b == NULL) {
        return -1;
    }
    memcpy(t->lreq[LK_RPC], t->req, size);
    t->lreq_len[LK_RPC] = size;
    b[0] = 1; /* version */
    b[1] = 0; /* nkeys */
    b[2] = b[3] = 0; /* nargs */
    memcpy(b + 4, id, sizeof(id));
    put_le32(b + 36, (uint32_t)size);
    memcpy(b + 40, t->req, size);
    t->lreq_len[LK_HASH] = 40 + size;
    t->lreq[LK_SOURCE] = b = malloc(12 + sl + size);
    if (b == NULL) {
        return -1;
    }
    b[0] = 1;
    b[1] = b[2] = b[3] = 0;
    put_le32(b + 4, (uint32_t)sl);
    put_le32(b + 8, (uint32_t)size);
    memcpy(b + 12, src, sl);
    memcpy(b + 12 + sl, t->req, size);
    t->lreq_len[LK_SOURCE] = 12 + sl + size;
    t->lreq[LK_NOCACHE] = malloc(t->lreq_len[LK_SOURCE]);
    if (t->lreq[LK_NOCACHE] == NULL) {
        return -1;
    }
    memcpy(t->lreq[LK_NOCACHE], b, t->lreq_len[LK_SOURCE]);
    t->lreq_len[LK_NOCACHE] = t->lreq_len[LK_SOURCE];
    return 0;
}

static int rpc_thread_setup(rpc_thread_t *t)
{
    rpc_run_t *run = t->run;
    const size_t size = run->size;
    rdmx_channel_params_t cp = {
        .field_mask = RDMX_CHANNEL_FIELD_TIMEOUT |
                      RDMX_CHANNEL_FIELD_CONNECT_TIMEOUT,
        /* a call may take as long as a test may */
        .timeout_ms = run->o->timeout_s ? (int)run->o->timeout_s * 1000 : 0,
        .connect_timeout_ms = CONNECT_TIMEOUT,
    };
    rdmx_status_t st;

    if (run->test == TEST_RPC_BULK || run->test == TEST_RPC_BULK_PUSH) {
        /* A server worker moving a large bulk buffer inside a handler
         * answers nothing else meanwhile, heartbeats included: with the
         * default 1 s timeout a slow transfer makes the channel declare the
         * server dead. Keep the default ping interval, allow 30 s. */
        cp.field_mask |= RDMX_CHANNEL_FIELD_HEARTBEAT;
        cp.heartbeat_ms = 250;
        cp.heartbeat_timeout_ms = 30000;
    }

    st = rdmx_worker_create(run->ctx, NULL, &t->w);
    if (st != RDMX_OK) {
        rpc_thread_fail(t, "create worker", st, rdmx_error_detail());
        return -1;
    }
    st = rdmx_channel_create(t->w, run->address, &cp, &t->ch);
    if (st != RDMX_OK) {
        rpc_thread_fail(t, "create channel", st, rdmx_error_detail());
        return -1;
    }
    st = rdmx_channel_wait_ready(t->ch, CONNECT_TIMEOUT);
    if (st != RDMX_OK) {
        rpc_thread_fail(t, "connect", st, rdmx_error_detail());
        return -1;
    }
    if (t->index == 0) {
        size_t got = 0;

        st = rdmx_call(t->ch, RPC_INFO, NULL, 0, NULL, run->server_info,
                       sizeof(run->server_info) - 1, &got);
        if (st != RDMX_OK) {
            rpc_thread_fail(t, "ask the server what it runs", st,
                            rdmx_error_detail());
            return -1;
        }
        run->server_info[got] = '\0';
    }
    if (run->test == TEST_LAMBDA_LAT) {
        t->req = malloc(size + 1);
        t->resp = malloc(size + LAMBDA_OUT_MAX);
        if (t->req == NULL || t->resp == NULL) {
            rpc_thread_fail(t, "allocate buffers", RDMX_ERR_NO_MEMORY, NULL);
            return -1;
        }
        for (size_t i = 0; i < size; i++) {
            t->req[i] = (unsigned char)(i * 7 + t->index);
        }
        if (lambda_requests(t) < 0) {
            rpc_thread_fail(t, "allocate requests", RDMX_ERR_NO_MEMORY, NULL);
            return -1;
        }
        /* lambda.eval once, so that lambda.call finds it cached */
        {
            size_t got = 0;

            st = rdmx_call(t->ch, "lambda.eval", t->lreq[LK_SOURCE],
                           t->lreq_len[LK_SOURCE], NULL, t->resp,
                           size + LAMBDA_OUT_MAX, &got);
            if (st != RDMX_OK) {
                rpc_thread_fail(t, "lambda.eval", st, rdmx_error_detail());
                return -1;
            }
            t->lout_len = got;
        }
        for (int k = 0; k < LK_COUNT; k++) {
            t->lsamples[k] = calloc(run->iters + 1, sizeof(uint64_t));
            if (t->lsamples[k] == NULL) {
                rpc_thread_fail(t, "allocate samples", RDMX_ERR_NO_MEMORY,
                                NULL);
                return -1;
            }
        }
    } else if (run->test == TEST_RPC_LAT || run->test == TEST_RPC_RATE) {
        t->req = malloc(size);
        t->resp = malloc(size);
        if (t->req == NULL || t->resp == NULL) {
            rpc_thread_fail(t, "allocate buffers", RDMX_ERR_NO_MEMORY, NULL);
            return -1;
        }
        for (size_t i = 0; i < size; i++) {
            t->req[i] = (unsigned char)(i * 7 + t->index);
        }
    } else {
        st = rdmx_mem_alloc(run->ctx, size,
                            RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &t->mr);
        if (st != RDMX_OK) {
            rpc_thread_fail(t, "allocate the bulk buffer", st,
                            rdmx_error_detail());
            return -1;
        }
        t->bulk.mr = t->mr;
        t->bulk.offset = 0;
        t->bulk.length = size;
        t->bulk.access = run->test == TEST_RPC_BULK ? RDMX_ACCESS_READ
                                                    : RDMX_ACCESS_WRITE;
        t->params.field_mask = RDMX_CALL_FIELD_BULK;
        t->params.bulk = &t->bulk;
        t->params.nbulk = 1;
        t->validate = run->threads == 1 && run->window == 1 && size >= 8;
    }
    t->sample_every = run->test == TEST_RPC_RATE ? run->window : 1;
    t->cap = run->iters / t->sample_every + 1;
    t->samples = calloc(t->cap, sizeof(*t->samples));
    if (t->samples == NULL) {
        rpc_thread_fail(t, "allocate samples", RDMX_ERR_NO_MEMORY, NULL);
        return -1;
    }
    return 0;
}

static void rpc_thread_teardown(rpc_thread_t *t)
{
    if (t->ch != NULL) {
        rdmx_channel_destroy(t->ch);
        t->ch = NULL;
    }
    if (t->w != NULL) {
        rdmx_worker_destroy(t->w);
        t->w = NULL;
    }
    if (t->mr != NULL) {
        rdmx_mem_deregister(t->mr);
        t->mr = NULL;
    }
    free(t->req);
    free(t->resp);
    t->req = t->resp = NULL;
    for (int k = 0; k < LK_COUNT; k++) {
        free(t->lreq[k]);
        t->lreq[k] = NULL;
    }
}

static void *rpc_thread_main(void *arg)
{
    rpc_thread_t *t = arg;
    rpc_run_t *run = t->run;
    bool ok;

    ok = rpc_thread_setup(t) == 0;
    pthread_barrier_wait(&run->barrier); /* every channel is ready */
    ok = ok && !run->abort && rpc_phase(t, run->warmup, false) == 0;
    pthread_barrier_wait(&run->barrier); /* every warm-up is over */
    ok = ok && !run->abort && rpc_phase(t, run->iters, true) == 0;
    pthread_barrier_wait(&run->barrier); /* nobody measures any more */
    if (ok && t->bad != 0) {
        fprintf(stderr,
                "rdmx-perf: %s thread %u: %" PRIu64 " answers carried the "
                "wrong data\n",
                g_tests[run->test].name, t->index, t->bad);
        ok = false;
    }
    rpc_thread_teardown(t);
    t->rc = ok ? 0 : -1;
    __atomic_add_fetch(&run->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Merge the threads' samples and timings into @p r. */
static void rpc_compute(const rpc_run_t *run, result_t *r)
{
    uint64_t n = 0, sum = 0, t0 = UINT64_MAX, t1 = 0, *all;
    double secs, calls = (double)run->iters * run->threads;

    for (unsigned i = 0; i < run->threads; i++) {
        n += run->th[i].nsamples;
    }
    all = calloc(n ? n : 1, sizeof(*all));
    n = 0;
    for (unsigned i = 0; i < run->threads; i++) {
        const rpc_thread_t *t = &run->th[i];

        for (uint64_t k = 0; k < t->nsamples; k++) {
            if (all != NULL) {
                all[n] = t->samples[k];
            }
            sum += t->samples[k];
            n++;
        }
        t0 = t->t_start < t0 ? t->t_start : t0;
        t1 = t->t_end > t1 ? t->t_end : t1;
    }
    if (all != NULL) {
        qsort(all, n, sizeof(*all), cmp_u64);
        r->p50_us = percentile(all, n, 0.50) / 1000.0;
        r->p99_us = percentile(all, n, 0.99) / 1000.0;
        r->p999_us = percentile(all, n, 0.999) / 1000.0;
    } else {
        r->p50_us = r->p99_us = r->p999_us = NAN;
    }
    r->avg_us = n ? (double)sum / (double)n / 1000.0 : NAN;
    secs = t1 > t0 ? (double)(t1 - t0) / 1e9 : NAN;
    r->msg_s = calls / secs;
    r->mb_s = r->msg_s * (double)r->size / 1e6;
    free(all);
}

/* Parse perf.info's "transport=T workers=N poll=P". */
static void parse_info(const char *info, const char **transport,
                       unsigned *workers, int *poll)
{
    static char tr[32];
    char pl[32] = "";

    if (sscanf(info, "transport=%31s workers=%u poll=%31s", tr, workers,
               pl) == 3) {
        *transport = tr;
        *poll = strcmp(pl, "busy") == 0       ? RDMX_RPC_POLL_BUSY
                : strcmp(pl, "adaptive") == 0 ? RDMX_RPC_POLL_ADAPTIVE
                : strcmp(pl, "sleep") == 0    ? RDMX_RPC_POLL_SLEEP
                                              : -1;
    }
}

static void print_rpc_note(const opts_t *o, const result_t *r,
                           const char *server_transport)
{
    if (o->json) {
        return;
    }
    printf("# %s: %u client thread(s), %" PRIu64 " call(s) in flight each; "
           "server %s: %u worker(s), poll %s; msg/s = calls/s; latency per ",
           g_tests[r->test].name, r->threads, r->window,
           server_transport ? server_transport : "?", r->workers,
           poll_name(r->poll));
    if (r->test == TEST_RPC_RATE) {
        printf("window of %" PRIu64 " calls\n", r->window);
    } else if (r->test == TEST_RPC_LAT) {
        printf("round trip (not halved)\n");
    } else {
        printf("call (completion to completion)\n");
    }
    fflush(stdout);
}

/* lambda_lat: each kind's latency, merged over the threads, and its ratio
 * to the plain RPC round trip. */
static void lambda_print(const opts_t *o, const rpc_run_t *run,
                         const result_t *r, const char *server_transport)
{
    double p50[LK_COUNT], p99[LK_COUNT], p999[LK_COUNT], avg[LK_COUNT];

    for (int k = 0; k < LK_COUNT; k++) {
        uint64_t n = 0, sum = 0, *all;

        for (unsigned i = 0; i < run->threads; i++) {
            n += run->th[i].lnsamples[k];
        }
        all = calloc(n ? n : 1, sizeof(*all));
        if (all == NULL) {
            p50[k] = p99[k] = p999[k] = avg[k] = NAN;
            continue;
        }
        n = 0;
        for (unsigned i = 0; i < run->threads; i++) {
            for (uint64_t j = 0; j < run->th[i].lnsamples[k]; j++) {
                all[n++] = run->th[i].lsamples[k][j];
                sum += run->th[i].lsamples[k][j];
            }
        }
        qsort(all, n, sizeof(*all), cmp_u64);
        p50[k] = percentile(all, n, 0.50) / 1000.0;
        p99[k] = percentile(all, n, 0.99) / 1000.0;
        p999[k] = percentile(all, n, 0.999) / 1000.0;
        avg[k] = n ? (double)sum / (double)n / 1000.0 : NAN;
        free(all);
    }
    if (!o->json) {
        printf("# lambda_lat: %u client thread(s), blocking calls of %s%s%s "
               "with %zu B of input, %" PRIu64
               " per kind, interleaved in blocks of %d; server %s: %u "
               "worker(s), poll %s; latency per round trip\n",
               r->threads,
               o->function ? "" : "the empty function \"",
               o->function ? o->function : LAMBDA_SOURCE,
               o->function ? "" : "\"", r->size, r->iters, LAMBDA_BLOCK,
               server_transport ? server_transport : "?", r->workers,
               poll_name(r->poll));
        printf("%-10s %-8s %10s %10s %10s %10s %8s %8s  %s\n", "test", "kind",
               "p50[us]", "p99[us]", "p99.9[us]", "avg[us]", "p50/rpc",
               "p99/rpc", "call");
    }
    for (int k = 0; k < LK_COUNT; k++) {
        if (o->json) {
            printf("{\"test\":\"lambda_lat\",\"kind\":\"%s\",\"bytes\":%zu,"
                   "\"iterations\":%" PRIu64 ",\"threads\":%u,"
                   "\"server_workers\":%u,\"poll\":\"%s\","
                   "\"transport\":\"%s\",\"p50_us\":%.4f,\"p99_us\":%.4f,"
                   "\"p999_us\":%.4f,\"avg_us\":%.4f,\"p50_vs_rpc\":%.3f,"
                   "\"p99_vs_rpc\":%.3f,\"clock_ns\":%.1f}\n",
                   lk_names[k], r->size, r->iters, r->threads, r->workers,
                   poll_name(r->poll), rdmx_transport_name(o->transport),
                   p50[k], p99[k], p999[k], avg[k], p50[k] / p50[LK_RPC],
                   p99[k] / p99[LK_RPC], g_clock_ns);
        } else {
            printf("%-10s %-8s %10.3f %10.3f %10.3f %10.3f %7.2fx %7.2fx  "
                   "%s\n",
                   "lambda_lat", lk_names[k], p50[k], p99[k], p999[k], avg[k],
                   p50[k] / p50[LK_RPC], p99[k] / p99[LK_RPC], lk_what[k]);
        }
    }
    fflush(stdout);
}

static int client_rpc_test(perf_t *p, const opts_t *o, test_id_t test,
                           size_t size, const char **server_transport)
{
    rpc_run_t *run = calloc(1, sizeof(*run));
    result_t r = {.test = test, .size = size};
    ctrl_t req = {.op = OP_TEST, .test = test}, reply, ack;
    bool barrier = false, have_ctrl = !o->rpc_only;
    unsigned started = 0;
    int rc = -1;

    if (run == NULL) {
        return fail_msg("out of memory");
    }
    r.iters = o->iters ? o->iters
              : test == TEST_RPC_RATE ? 10 * default_iters(size)
                                      : default_iters(size);
    r.window = o->window_set ? o->window : g_tests[test].window;
    if (test == TEST_RPC_LAT || test == TEST_LAMBDA_LAT) {
        r.window = 1; /* blocking calls */
    }
    r.threads = o->threads;
    r.workers = o->server_workers;
    r.poll = o->poll;
    if ((test == TEST_RPC_BULK || test == TEST_RPC_BULK_PUSH) && size < 16) {
        free(run);
        return fail_msg("rpc_bulk: -s must be at least 16 bytes");
    }
    run->o = o;
    run->ctx = p->ctx;
    run->test = test;
    run->size = size;
    run->iters = r.iters;
    run->window = r.window;
    run->threads = r.threads;
    run->warmup = o->warmup != UINT64_MAX              ? o->warmup
                  : r.iters / 10 < DEFAULT_WARMUP * 10 ? r.iters / 10
                                                       : DEFAULT_WARMUP * 10;
    watchdog_arm(o->timeout_s);

    if (have_ctrl) {
        char host[256];
        uint16_t port;

        req.size = size;
        req.iters = r.iters;
        req.warmup = run->warmup;
        req.window = r.window;
        req.transport = (uint32_t)o->transport;
        req.workers = o->server_workers;
        req.poll = o->poll < 0 ? UINT32_MAX : (uint32_t)o->poll;
        req.threads = o->threads;
        if (ctrl_post_recv(p) < 0 || ctrl_send(p, &req, NULL, "request") < 0 ||
            ctrl_wait(p, &reply, "wait for the server's reply") < 0) {
            goto out;
        }
        if (reply.op != OP_REPLY) {
            fail_msg("protocol error: expected a reply");
            goto out;
        }
        if (reply.status != RDMX_OK) {
            fprintf(stderr, "rdmx-perf: %s %zu B: the server refused: %s\n",
                    g_tests[test].name, size,
                    rdmx_strerror((rdmx_status_t)reply.status));
            goto out;
        }
        r.workers = reply.workers;
        r.poll = (int)reply.poll;
        if (*server_transport == NULL) {
            *server_transport =
                rdmx_transport_name((rdmx_transport_t)reply.transport);
            if (reply.transport != (uint32_t)o->transport) {
                fprintf(stderr,
                        "rdmx-perf: warning: the server runs transport %s, "
                        "this client %s; UCX uses what both have\n",
                        *server_transport ? *server_transport : "?",
                        rdmx_transport_name(o->transport));
            }
            print_header(o, *server_transport ? *server_transport : "?");
        }
        if (rdmx_addr_parse(o->address, host, sizeof(host), &port) !=
            RDMX_OK) {
            fail_msg("bad server address");
            goto out;
        }
        format_address(run->address, sizeof(run->address), host,
                       reply.rpc_port);
    } else {
        snprintf(run->address, sizeof(run->address), "%s", o->address);
    }

    run->th = calloc(run->threads, sizeof(*run->th));
    if (run->th == NULL ||
        pthread_barrier_init(&run->barrier, NULL, run->threads) != 0) {
        fail_msg("out of memory for threads");
        goto out;
    }
    barrier = true;
    for (unsigned i = 0; i < run->threads; i++) {
        run->th[i].run = run;
        run->th[i].index = i;
        if (pthread_create(&run->th[i].tid, NULL, rpc_thread_main,
                           &run->th[i]) != 0) {
            /* the barrier counts every thread: cannot go on without it */
            fprintf(stderr, "rdmx-perf: cannot start thread %u\n", i);
            exit(1);
        }
        run->th[i].started = true;
        started++;
    }
    /* Keep the control connection progressed, sleeping on its fd. */
    while (__atomic_load_n(&run->finished, __ATOMIC_ACQUIRE) < started) {
        if (have_ctrl) {
            rdmx_worker_wait(p->worker, 20);
        } else {
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
    }
    rc = 0;
    for (unsigned i = 0; i < started; i++) {
        pthread_join(run->th[i].tid, NULL);
        rc = run->th[i].rc < 0 ? -1 : rc;
    }
    if (have_ctrl) {
        ctrl_t done = {.op = OP_DONE, .test = test};

        if (ctrl_post_recv(p) < 0 || ctrl_send(p, &done, NULL, "done") < 0 ||
            ctrl_wait(p, &ack, "wait for the server's done") < 0) {
            rc = -1;
            goto out;
        }
        if (ack.op != OP_DONE_ACK) {
            fail_msg("protocol error: expected DONE_ACK");
            rc = -1;
            goto out;
        }
        r.server_responses = ack.stat;
        r.server_errors = ack.stat2;
    }
    if (rc < 0) {
        goto out;
    }
    if (!have_ctrl && *server_transport == NULL) {
        const char *tr = NULL;
        unsigned workers = 0;
        int poll = -1;

        parse_info(run->server_info, &tr, &workers, &poll);
        *server_transport = tr ? tr : "?";
        print_header(o, *server_transport);
        r.workers = workers;
        r.poll = poll;
    } else if (!have_ctrl) {
        const char *tr = NULL;

        parse_info(run->server_info, &tr, &r.workers, &r.poll);
    }
    if (have_ctrl && r.server_errors != 0) {
        fprintf(stderr, "rdmx-perf: warning: the server sent %" PRIu64
                        " error responses\n",
                r.server_errors);
    }
    if (test == TEST_LAMBDA_LAT) {
        lambda_print(o, run, &r, *server_transport);
        goto out;
    }
    rpc_compute(run, &r);
    print_rpc_note(o, &r, *server_transport);
    print_result(o, &r);
out:
    if (barrier) {
        pthread_barrier_destroy(&run->barrier);
    }
    for (unsigned i = 0; run->th != NULL && i < run->threads; i++) {
        free(run->th[i].samples);
        for (int k = 0; k < LK_COUNT; k++) {
            free(run->th[i].lsamples[k]);
        }
    }
    free(run->th);
    free(run);
    return rc;
}

static int client_test(perf_t *p, const opts_t *o, test_id_t test, size_t size,
                       const char **server_transport)
{
    unsigned char desc[CTRL_MAX - CTRL_HDR];
    size_t desc_len = 0;
    ctrl_t req = {.op = OP_TEST, .test = test}, reply, ack;
    result_t r = {.test = test, .size = size};
    timing_t t = {0};
    uint64_t nsamples;
    rdmx_status_t st;
    int rc = -1;

    r.iters = o->iters ? o->iters : default_iters(size);
    r.window = g_tests[test].bw ? o->window : 1;
    req.warmup = o->warmup != UINT64_MAX         ? o->warmup
                 : r.iters / 10 < DEFAULT_WARMUP ? r.iters / 10
                                                 : DEFAULT_WARMUP;
    req.size = size;
    req.iters = r.iters;
    req.window = r.window;
    req.transport = (uint32_t)o->transport;

    watchdog_arm(o->timeout_s);
    nsamples = g_tests[test].bw ? nwindows(r.iters, r.window) : r.iters;
    t.samples = calloc(nsamples + 1, sizeof(*t.samples));
    if (t.samples == NULL) {
        return fail_msg("out of memory for samples");
    }
    if (test == TEST_SEND_BW) {
        uint64_t maxwin =
            nwindows(r.iters > req.warmup ? r.iters : req.warmup, r.window);
        p->ack_time = calloc(maxwin + 1, sizeof(*p->ack_time));
        if (p->ack_time == NULL) {
            free(t.samples);
            return fail_msg("out of memory for samples");
        }
    }
    if (test_setup(p, test, size, desc, sizeof(desc), &desc_len) < 0) {
        goto out;
    }
    req.desc_len = (uint32_t)desc_len;

    /* request -> reply with the server's descriptor */
    if (ctrl_post_recv(p) < 0 || ctrl_send(p, &req, desc, "request") < 0 ||
        ctrl_wait(p, &reply, "wait for the server's reply") < 0) {
        goto out;
    }
    if (reply.op != OP_REPLY) {
        fail_msg("protocol error: expected a reply");
        goto out;
    }
    if (reply.status != RDMX_OK) {
        fprintf(stderr, "rdmx-perf: %s %zu B: the server refused: %s\n",
                g_tests[test].name, size,
                rdmx_strerror((rdmx_status_t)reply.status));
        goto out;
    }
    if (*server_transport == NULL) {
        *server_transport =
            rdmx_transport_name((rdmx_transport_t)reply.transport);
        if (reply.transport != (uint32_t)o->transport) {
            fprintf(stderr,
                    "rdmx-perf: warning: the server runs transport %s, this "
                    "client %s; UCX uses what both have\n",
                    *server_transport ? *server_transport : "?",
                    rdmx_transport_name(o->transport));
        }
        print_header(o, *server_transport ? *server_transport : "?");
    }
    st = rdmx_rmem_unpack(p->ep, reply.desc, reply.desc_len, &p->peer);
    if (st != RDMX_OK) {
        fail("unpack the server's descriptor", st);
        goto out;
    }

    switch (test) {
    case TEST_SEND_LAT:
        rc = client_send_lat(p, req.warmup, r.iters, &t);
        break;
    case TEST_SEND_BW:
        rc = client_send_bw_phase(p, req.warmup, r.window, NULL);
        if (rc == 0) {
            rc = client_send_bw_phase(p, r.iters, r.window, &t);
        }
        break;
    case TEST_PUT_LAT:
        rc = client_put_lat(p, req.warmup, r.iters, &t);
        break;
    case TEST_GET_LAT:
    case TEST_ATOMIC_LAT:
        rc = client_rma_lat(p, test, req.warmup, r.iters, &t);
        break;
    case TEST_PUT_BW:
    case TEST_GET_BW:
        rc = client_rma_bw_phase(p, test, req.warmup, r.window,
                                 o->flush_windows, NULL);
        if (rc == 0) {
            rc = client_rma_bw_phase(p, test, r.iters, r.window,
                                     o->flush_windows, &t);
        }
        break;
    default:
        rc = fail_msg("unknown test");
        break;
    }
    if (rc < 0) {
        goto out;
    }
    rc = -1;

    /* done -> done ack: the server released its side */
    {
        ctrl_t done = {.op = OP_DONE, .test = test};
        if (ctrl_post_recv(p) < 0 || ctrl_send(p, &done, NULL, "done") < 0 ||
            ctrl_wait(p, &ack, "wait for the server's done") < 0) {
            goto out;
        }
    }
    if (ack.op != OP_DONE_ACK) {
        fail_msg("protocol error: expected DONE_ACK");
        goto out;
    }
    compute(&r, &t);
    print_result(o, &r);
    test_cleanup(p);
    rc = 0;
out: /* on failure, teardown_conn() releases the memory after the close */
    free(t.samples);
    return rc;
}

static int run_client(perf_t *p, const opts_t *o)
{
    const char *server_transport = NULL;
    rdmx_ep_params_t ep_params = {
        .field_mask =
            RDMX_EP_PARAM_FIELD_ERROR_CB | RDMX_EP_PARAM_FIELD_USER_DATA,
        .error_cb = ep_error_cb,
        .user_data = p,
    };
    rdmx_status_t st;

    g_clock_ns = clock_cost_ns();
    watchdog_arm(o->timeout_s);
    if (o->rpc_only) {
        /* channels straight to an RPC server: no control connection */
        for (unsigned si = 0; si < o->nsizes; si++) {
            for (int ti = 0; ti < TEST_COUNT; ti++) {
                if (!o->tests[ti]) {
                    continue;
                }
                if (!g_tests[ti].rpc) {
                    fprintf(stderr, "rdmx-perf: %s needs the control "
                                    "connection (drop --rpc-only)\n",
                            g_tests[ti].name);
                    return -1;
                }
                if (!o->sizes_set && si != 0) {
                    continue;
                }
                if (client_rpc_test(p, o, (test_id_t)ti,
                                    o->sizes_set ? o->sizes[si]
                                                 : g_tests[ti].size,
                                    &server_transport) < 0) {
                    return -1;
                }
            }
        }
        return 0;
    }
    st = rdmx_connect(p->worker, o->address, &ep_params, CONNECT_TIMEOUT,
                      &p->ep);
    if (st != RDMX_OK) {
        fail("connect", st); /* the detail names the address */
        if (p->ep) {
            rdmx_ep_close(p->ep);
            p->ep = NULL;
        }
        return -1;
    }
    for (unsigned si = 0; si < o->nsizes; si++) {
        for (int ti = 0; ti < TEST_COUNT; ti++) {
            size_t size = o->sizes[si];

            if (!o->tests[ti]) {
                continue;
            }
            if (ti == TEST_ATOMIC_LAT) {
                /* 64-bit operand: run once, with the first size in a list */
                if (si != 0) {
                    continue;
                }
                size = 8;
            }
            if (g_tests[ti].rpc) {
                /* without -s/-a: once, with the test's own default size */
                if (!o->sizes_set && si != 0) {
                    continue;
                }
                if (client_rpc_test(p, o, (test_id_t)ti,
                                    o->sizes_set ? size : g_tests[ti].size,
                                    &server_transport) < 0) {
                    return -1;
                }
                continue;
            }
            if (client_test(p, o, (test_id_t)ti, size, &server_transport) < 0) {
                return -1;
            }
        }
    }
    /* QUIT -> QUIT_ACK, then close: the server waits for our close */
    {
        ctrl_t quit = {.op = OP_QUIT}, ack;

        if (ctrl_post_recv(p) < 0 || ctrl_send(p, &quit, NULL, "quit") < 0 ||
            ctrl_wait(p, &ack, "wait for the server's quit ack") < 0) {
            return -1;
        }
        if (ack.op != OP_QUIT_ACK) {
            return fail_msg("protocol error: expected QUIT_ACK");
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Server                                                                   */
/* ------------------------------------------------------------------------ */

static volatile sig_atomic_t g_stop;

static void on_stop(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* --rpc-only: an RPC server with the perf handlers until SIGINT/SIGTERM
 * (with --once: until the last client has left). */
static int run_rpc_server(perf_t *p, const opts_t *o, const char *host)
{
    rpc_srv_t *s = calloc(1, sizeof(*s));
    rdmx_rpc_server_stats_t st = {0};
    struct sigaction sa = {0};
    unsigned workers = o->server_workers ? o->server_workers : 1;
    int poll = o->poll >= 0 ? o->poll : RDMX_RPC_POLL_BUSY;
    uint64_t idle_since = 0;
    char address[300];

    if (s == NULL) {
        return fail_msg("out of memory");
    }
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (rpc_srv_start(s, p->ctx, o->listen, workers, (rdmx_rpc_poll_t)poll,
                      0, 1u << 30, 1024) < 0) {
        rpc_srv_stop(s, NULL);
        free(s);
        return -1;
    }
    format_address(address, sizeof(address), host,
                   rdmx_rpc_server_port(s->srv));
    printf("listening on %s\n", address);
    printf("# rpc server: %u worker(s), poll %s, transport %s\n", workers,
           poll_name(poll), rdmx_transport_name(o->transport));
    fflush(stdout);
    while (!g_stop) {
        struct timespec ts = {0, 50000000};

        nanosleep(&ts, NULL);
        if (o->once) {
            /* a client makes new channels for every test: leave after 2 s
             * without any */
            rdmx_rpc_server_stats(s->srv, &st);
            if (st.connections_total == 0 || st.connections > 0) {
                idle_since = 0;
            } else if (idle_since == 0) {
                idle_since = now_ns();
            } else if (now_ns() - idle_since > 2000000000ull) {
                break;
            }
        }
    }
    rpc_srv_stop(s, &st);
    free(s);
    fprintf(stderr,
            "rdmx-perf: rpc server: %" PRIu64 " connections, %" PRIu64
            " requests, %" PRIu64 " responses, %" PRIu64 " errors\n",
            st.connections_total, st.requests, st.responses, st.errors);
    return 0;
}

static int run_server(perf_t *p, const opts_t *o, const char *host)
{
    char address[300];
    rdmx_listener_t *listener = NULL;
    rdmx_listener_params_t lp = {
        .field_mask = RDMX_LISTENER_PARAM_FIELD_ADDRESS |
                      RDMX_LISTENER_PARAM_FIELD_ACCEPT_CB |
                      RDMX_LISTENER_PARAM_FIELD_EP_PARAMS,
        .address = o->listen,
        .accept_cb = accept_cb,
        .arg = p,
        .ep_params =
            {
                .field_mask = RDMX_EP_PARAM_FIELD_ERROR_CB |
                              RDMX_EP_PARAM_FIELD_USER_DATA,
                .error_cb = ep_error_cb,
                .user_data = p,
            },
    };
    rdmx_status_t st;
    int rc = 0;

    st = rdmx_listener_create(p->worker, &lp, &listener);
    if (st != RDMX_OK) {
        char what[300];

        snprintf(what, sizeof(what), "listen on %s", o->listen);
        return fail(what, st);
    }
    snprintf(address, sizeof(address), "%s%s%s:%u",
             strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
             (unsigned)rdmx_listener_port(listener));
    printf("listening on %s\n", address);
    fflush(stdout);

    for (;;) {
        /* idle: sleep on the worker's fd until a client arrives */
        while (p->pending == NULL) {
            st = rdmx_worker_wait(p->worker, 1000);
            if (st != RDMX_OK && st != RDMX_ERR_TIMEOUT) {
                rc = fail("wait for a client", st);
                goto out;
            }
        }
        p->ep = p->pending;
        p->conn_status = p->pending_status;
        p->pending = NULL;
        ops_reset(&p->ctrl_rx_ops);
        ops_reset(&p->ctrl_tx_ops);
        rc = p->conn_status == RDMX_OK ? serve_client(p) : 0;
        teardown_conn(p);
        p->conn_status = RDMX_OK;
        if (o->once) {
            break;
        }
        if (rc < 0) {
            fprintf(stderr, "rdmx-perf: client dropped; waiting for the "
                            "next one\n");
            rc = 0;
        }
    }
out:
    if (p->pending) {
        rdmx_ep_close(p->pending);
        p->pending = NULL;
    }
    rdmx_listener_destroy(listener);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: rdmx-perf --listen [HOST:]PORT [--once] [--transport T]\n"
        "                 [--server-workers N] [--poll busy|adaptive|sleep] "
        "[--rpc-only]\n"
        "       rdmx-perf HOST:PORT -t TEST[,TEST...|all|rpc] [-s SIZE[,SIZE...] "
        "| -a]\n"
        "                 [-n ITERS] [-w WARMUP] [-W WINDOW] "
        "[--flush window|end]\n"
        "                 [-T THREADS] [--server-workers N] [--poll MODE] "
        "[--rpc-only]\n"
        "                 [--transport T] [--json] [--timeout S] "
        "[--function FILE]\n"
        "\n"
        "tests: send_lat send_bw put_lat put_bw get_lat get_bw "
        "atomic_lat (all: these)\n"
        "       rpc_lat rpc_rate rpc_bulk rpc_bulk_push (rpc: these)\n"
        "       lambda_lat (an empty Lua function: by id, with its source, "
        "without\n"
        "               the server's cache, each against a plain RPC)\n"
        "  -s SIZE      message size in bytes; k/m/g suffixes are "
        "binary (default 8;\n"
        "               rpc_lat/rpc_rate 64, rpc_bulk* 64m; lambda_lat: "
        "input, 0)\n"
        "  -a           sweep sizes 8 B .. 8 MiB in powers of 4\n"
        "  -n ITERS     measured iterations, per thread for rpc_* (default "
        "%d, fewer\n"
        "               above 64 KiB; rpc_rate 10x)\n"
        "  -w WARMUP    warm-up iterations (default ITERS/10, at most %d; "
        "rpc_* %d)\n"
        "  -W WINDOW    operations in flight in *_bw tests (default %d), "
        "calls in\n"
        "               flight per thread in rpc_rate (32) and rpc_bulk* "
        "(1)\n"
        "  --flush M    put_bw/get_bw: flush after each window (window, "
        "default)\n"
        "               or only at the end, like ucx_perftest (end)\n"
        "  -T THREADS   rpc_*: client threads, each with its own worker and "
        "channel (1)\n"
        "  --server-workers N  RPC server worker threads (server's default, "
        "else 1)\n"
        "  --poll MODE  RPC server polling: busy (default), adaptive, sleep\n"
        "  --function FILE  lambda_lat: call this Lua function instead of "
        "the empty\n"
        "               one (\"return\"; its output must be at most 64 KiB)\n"
        "  --rpc-only   server: run only an RPC server on PORT (until "
        "SIGINT/SIGTERM;\n"
        "               --once: until it had no client for 2 s); client: "
        "connect the\n"
        "               channels straight to it (several client processes)\n"
        "  --transport  auto|shm|tcp|rdma (default auto, or "
        "RDMX_TRANSPORT)\n"
        "  --json       one JSON object per result line\n"
        "  --once       server: exit after the first client\n"
        "  --timeout S  give up when a test takes longer (default %d s, "
        "0: never)\n"
        "Loopback addresses use UCX_NET_DEVICES=lo unless it is set.\n",
        DEFAULT_ITERS, DEFAULT_WARMUP, DEFAULT_WARMUP * 10, DEFAULT_WINDOW,
        DEFAULT_TIMEOUT_S);
}

static int parse_u64(const char *s, uint64_t *v, bool suffixes)
{
    char *end;
    unsigned long long x;
    uint64_t mult = 1;

    if (s == NULL || !isdigit((unsigned char)*s)) {
        return -1;
    }
    x = strtoull(s, &end, 10);
    if (suffixes && *end) {
        switch (tolower((unsigned char)*end)) {
        case 'k':
            mult = 1ull << 10;
            break;
        case 'm':
            mult = 1ull << 20;
            break;
        case 'g':
            mult = 1ull << 30;
            break;
        default:
            return -1;
        }
        end++;
        end += tolower((unsigned char)*end) == 'i'; /* "KiB", "MiB" */
        end += tolower((unsigned char)*end) == 'b'; /* "KB", "MB" */
    }
    if (*end || x > UINT64_MAX / mult) {
        return -1;
    }
    *v = (uint64_t)x * mult;
    return 0;
}

static int parse_tests(const char *arg, opts_t *o)
{
    char buf[256], *save = NULL;

    if (strlen(arg) >= sizeof(buf)) {
        return -1;
    }
    strcpy(buf, arg);
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        bool found = false;

        if (strcmp(tok, "all") == 0 || strcmp(tok, "rpc") == 0) {
            for (int i = 0; i < TEST_COUNT; i++) {
                if (g_tests[i].rpc == (tok[0] == 'r') &&
                    i != TEST_LAMBDA_LAT) {
                    o->tests[i] = true;
                }
            }
            continue;
        }
        for (int i = 0; i < TEST_COUNT; i++) {
            if (strcmp(tok, g_tests[i].name) == 0) {
                o->tests[i] = found = true;
            }
        }
        if (!found) {
            fprintf(stderr, "rdmx-perf: unknown test '%s'\n", tok);
            return -1;
        }
    }
    return 0;
}

static int parse_sizes(const char *arg, opts_t *o)
{
    char buf[512], *save = NULL;

    if (strlen(arg) >= sizeof(buf)) {
        return -1;
    }
    strcpy(buf, arg);
    o->nsizes = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        uint64_t v;

        if (o->nsizes == MAX_SIZES || parse_u64(tok, &v, true) < 0 || v == 0 ||
            v > SIZE_MAX / 2) {
            fprintf(stderr, "rdmx-perf: bad size '%s'\n", tok);
            return -1;
        }
        o->sizes[o->nsizes++] = (size_t)v;
    }
    return o->nsizes ? 0 : -1;
}

enum {
    OPT_LISTEN = 256,
    OPT_TRANSPORT,
    OPT_JSON,
    OPT_ONCE,
    OPT_TIMEOUT,
    OPT_FLUSH,
    OPT_SERVER_WORKERS,
    OPT_POLL,
    OPT_RPC_ONLY,
    OPT_FUNCTION,
};

static int parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"transport", required_argument, NULL, OPT_TRANSPORT},
        {"json", no_argument, NULL, OPT_JSON},
        {"once", no_argument, NULL, OPT_ONCE},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"flush", required_argument, NULL, OPT_FLUSH},
        {"server-workers", required_argument, NULL, OPT_SERVER_WORKERS},
        {"poll", required_argument, NULL, OPT_POLL},
        {"rpc-only", no_argument, NULL, OPT_RPC_ONLY},
        {"function", required_argument, NULL, OPT_FUNCTION},
        {"threads", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool sweep = false, have_tests = false;
    uint64_t v;
    int c;

    memset(o, 0, sizeof(*o));
    o->sizes[0] = 8;
    o->nsizes = 1;
    o->warmup = UINT64_MAX;
    o->window = DEFAULT_WINDOW;
    o->timeout_s = DEFAULT_TIMEOUT_S;
    o->flush_windows = true;
    o->threads = 1;
    o->poll = -1;
    while ((c = getopt_long(argc, argv, "t:s:an:w:W:T:h", longopts, NULL)) !=
           -1) {
        switch (c) {
        case 't':
            if (parse_tests(optarg, o) < 0) {
                return -1;
            }
            have_tests = true;
            break;
        case 's':
            if (parse_sizes(optarg, o) < 0) {
                return -1;
            }
            o->sizes_set = true;
            break;
        case 'a':
            sweep = true;
            o->sizes_set = true;
            break;
        case 'T':
            if (parse_u64(optarg, &v, false) < 0 || v == 0 ||
                v > RPC_MAX_THREADS) {
                fprintf(stderr, "rdmx-perf: bad -T '%s' (1..%d)\n", optarg,
                        RPC_MAX_THREADS);
                return -1;
            }
            o->threads = (unsigned)v;
            break;
        case OPT_SERVER_WORKERS:
            if (parse_u64(optarg, &v, false) < 0 || v == 0 ||
                v > RPC_MAX_WORKERS) {
                fprintf(stderr,
                        "rdmx-perf: bad --server-workers '%s' (1..%d)\n",
                        optarg, RPC_MAX_WORKERS);
                return -1;
            }
            o->server_workers = (unsigned)v;
            break;
        case OPT_POLL:
            if (strcmp(optarg, "busy") == 0) {
                o->poll = RDMX_RPC_POLL_BUSY;
            } else if (strcmp(optarg, "adaptive") == 0) {
                o->poll = RDMX_RPC_POLL_ADAPTIVE;
            } else if (strcmp(optarg, "sleep") == 0) {
                o->poll = RDMX_RPC_POLL_SLEEP;
            } else {
                fprintf(stderr, "rdmx-perf: bad --poll '%s'\n", optarg);
                return -1;
            }
            break;
        case OPT_FUNCTION:
            o->function = optarg;
            break;
        case OPT_RPC_ONLY:
            o->rpc_only = true;
            break;
        case 'n':
            if (parse_u64(optarg, &o->iters, false) < 0 || o->iters == 0) {
                fprintf(stderr, "rdmx-perf: bad -n '%s'\n", optarg);
                return -1;
            }
            break;
        case 'w':
            if (parse_u64(optarg, &o->warmup, false) < 0) {
                fprintf(stderr, "rdmx-perf: bad -w '%s'\n", optarg);
                return -1;
            }
            break;
        case 'W':
            if (parse_u64(optarg, &o->window, false) < 0 || o->window == 0 ||
                o->window > 65536) {
                fprintf(stderr, "rdmx-perf: bad -W '%s'\n", optarg);
                return -1;
            }
            o->window_set = true;
            break;
        case OPT_LISTEN:
            o->listen = optarg;
            break;
        case OPT_TRANSPORT:
            if (rdmx_transport_parse(optarg, &o->transport) != RDMX_OK) {
                fprintf(stderr, "rdmx-perf: bad --transport '%s'\n", optarg);
                return -1;
            }
            o->transport_set = true;
            break;
        case OPT_JSON:
            o->json = true;
            break;
        case OPT_FLUSH:
            if (strcmp(optarg, "window") == 0 || strcmp(optarg, "end") == 0) {
                o->flush_windows = strcmp(optarg, "window") == 0;
            } else {
                fprintf(stderr, "rdmx-perf: bad --flush '%s'\n", optarg);
                return -1;
            }
            break;
        case OPT_ONCE:
            o->once = true;
            break;
        case OPT_TIMEOUT:
            if (parse_u64(optarg, &v, false) < 0 || v > 86400) {
                fprintf(stderr, "rdmx-perf: bad --timeout '%s'\n", optarg);
                return -1;
            }
            o->timeout_s = (unsigned)v;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (sweep) {
        o->nsizes = 0;
        for (size_t s = 8; s <= 8u << 20; s *= 4) {
            o->sizes[o->nsizes++] = s;
        }
    }
    if (o->listen != NULL) {
        if (optind != argc) {
            usage(stderr);
            return -1;
        }
        return 0;
    }
    if (optind + 1 != argc || !have_tests) {
        usage(stderr);
        return -1;
    }
    o->address = argv[optind];
    if (o->function != NULL) {
        FILE *f = fopen(o->function, "rb");
        size_t cap = 1u << 20;

        o->function_src = malloc(cap);
        if (f == NULL || o->function_src == NULL) {
            fprintf(stderr, "rdmx-perf: --function %s: %s\n", o->function,
                    strerror(errno));
            if (f != NULL) {
                fclose(f);
            }
            return -1;
        }
        o->function_len = fread(o->function_src, 1, cap, f);
        fclose(f);
        if (o->function_len == cap) {
            fprintf(stderr, "rdmx-perf: --function %s: over 1 MiB\n",
                    o->function);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    static perf_t perf; /* large control buffers: not on the stack */
    perf_t *p = &perf;
    opts_t o;
    char host[256], listen_addr[300];
    uint16_t port;
    rdmx_context_params_t cp = {0};
    rdmx_status_t st;
    int rc;

    if (parse_args(argc, argv, &o) < 0) {
        return 2;
    }
    signal(SIGALRM, watchdog);

    /* Which host: the listen address (a bare port means all interfaces) or
     * the server's. */
    if (o.listen != NULL && strchr(o.listen, ':') == NULL) {
        uint64_t v;
        if (parse_u64(o.listen, &v, false) < 0 || v > 65535) {
            fprintf(stderr, "rdmx-perf: bad --listen '%s'\n", o.listen);
            return 2;
        }
        snprintf(listen_addr, sizeof(listen_addr), "0.0.0.0:%s", o.listen);
        o.listen = listen_addr;
    }
    st = rdmx_addr_parse(o.listen ? o.listen : o.address, host, sizeof(host),
                         &port);
    if (st != RDMX_OK) {
        fprintf(stderr, "rdmx-perf: bad address '%s': %s\n",
                o.listen ? o.listen : o.address, rdmx_strerror(st));
        return 2;
    }

    if (o.transport_set) {
        cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_TRANSPORT;
        cp.transport = o.transport;
    }
    if (rdmx_host_is_loopback(host) && getenv("UCX_NET_DEVICES") == NULL) {
        cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
        cp.net_devices = "lo";
    }
    cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NAME;
    cp.name = "rdmx-perf";
    st = rdmx_context_create(&cp, &p->ctx);
    if (st != RDMX_OK) {
        fail("create context", st);
        return 1;
    }
    o.transport = rdmx_context_transport(p->ctx);
    st = rdmx_worker_create(p->ctx, NULL, &p->worker);
    if (st != RDMX_OK) {
        fail("create worker", st);
        rdmx_context_destroy(p->ctx);
        return 1;
    }

    p->opts = &o;
    snprintf(p->host, sizeof(p->host), "%s", host);
    rc = !o.listen    ? run_client(p, &o)
         : o.rpc_only ? run_rpc_server(p, &o, host)
                      : run_server(p, &o, host);

    teardown_conn(p);
    rdmx_worker_destroy(p->worker);
    rdmx_context_destroy(p->ctx);
    free(o.function_src);
    return rc < 0 ? 1 : 0;
}
