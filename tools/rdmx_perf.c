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
 *               (ucp_am_lat).
 *   send_bw     the client keeps up to W sends in flight; the server keeps
 *               2W receives posted and acknowledges every window of W
 *               messages; the client never runs more than two windows ahead
 *               of the acknowledgements (ucp_am_bw, with flow control).
 *   put_lat     the client puts SIZE bytes into the server's buffer; the
 *               server polls the buffer's last byte (a sequence number) while
 *               progressing, then puts back into the client's buffer, which
 *               the client polls; one-way = round trip / 2 (ucp_put_lat).
 *   put_bw,     W operations in flight, then a flush, per window; reported
 *   get_bw      as MB/s and messages/s. With --flush end: up to W
 *               operations in flight and one flush at the end, which is
 *               exactly ucx_perftest's ucp_put_bw / ucp_get with -O W.
 *   get_lat     one get at a time; the latency of each get (ucp_get -O 1).
 *   atomic_lat  one 64-bit fetch-and-add at a time (ucp_fadd -O 1).
 * All buffers on both sides come from rdmx_mem_alloc(), which like
 * ucx_perftest's "-m host" maps memory with UCP_MEM_MAP_ALLOCATE. Each side
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
#include <rdmx/rdmx.h>

#include <ctype.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
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
    TEST_COUNT
} test_id_t;

static const struct {
    const char *name;
    bool bw;       /* window test: per-window times, MB/s */
    bool pingpong; /* one-way latency = round trip / 2 */
} g_tests[TEST_COUNT] = {
    [TEST_SEND_LAT] = {"send_lat", false, true},
    [TEST_SEND_BW] = {"send_bw", true, false},
    [TEST_PUT_LAT] = {"put_lat", false, true},
    [TEST_PUT_BW] = {"put_bw", true, false},
    [TEST_GET_LAT] = {"get_lat", false, false},
    [TEST_GET_BW] = {"get_bw", true, false},
    [TEST_ATOMIC_LAT] = {"atomic_lat", false, false},
};

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
} opts_t;

/* ------------------------------------------------------------------------ */
/* Control protocol                                                         */
/* ------------------------------------------------------------------------ */

/* Little-endian, fixed layout; both ends are this program. */
#define CTRL_MAGIC 0x50584452u /* "RDXP" */
#define CTRL_HDR   56
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
    if (c->test >= TEST_COUNT || c->window == 0 || c->size == 0) {
        reply.status = RDMX_ERR_INVALID;
        return ctrl_send(p, &reply, NULL, "reply");
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
 * exactly as ucx_perftest's ucp_put_bw / ucp_get with -O W; the per-window
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
        "       rdmx-perf HOST:PORT -t TEST[,TEST...|all] [-s SIZE[,SIZE...] "
        "| -a]\n"
        "                 [-n ITERS] [-w WARMUP] [-W WINDOW] "
        "[--flush window|end]\n"
        "                 [--transport T] [--json] [--timeout S]\n"
        "\n"
        "tests: send_lat send_bw put_lat put_bw get_lat get_bw "
        "atomic_lat (or all)\n"
        "  -s SIZE      message size in bytes; k/m/g suffixes are "
        "binary (default 8)\n"
        "  -a           sweep sizes 8 B .. 8 MiB in powers of 4\n"
        "  -n ITERS     measured iterations (default %d, fewer above "
        "64 KiB)\n"
        "  -w WARMUP    warm-up iterations (default min(%d, ITERS/10))\n"
        "  -W WINDOW    operations in flight in *_bw tests (default %d)\n"
        "  --flush M    put_bw/get_bw: flush after each window (window, "
        "default)\n"
        "               or only at the end, like ucx_perftest (end)\n"
        "  --transport  auto|shm|tcp|rdma (default auto, or "
        "RDMX_TRANSPORT)\n"
        "  --json       one JSON object per result line\n"
        "  --once       server: exit after the first client\n"
        "  --timeout S  give up when a test takes longer (default %d s, "
        "0: never)\n"
        "Loopback addresses use UCX_NET_DEVICES=lo unless it is set.\n",
        DEFAULT_ITERS, DEFAULT_WARMUP, DEFAULT_WINDOW, DEFAULT_TIMEOUT_S);
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

        if (strcmp(tok, "all") == 0) {
            for (int i = 0; i < TEST_COUNT; i++) {
                o->tests[i] = true;
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
    while ((c = getopt_long(argc, argv, "t:s:an:w:W:h", longopts, NULL)) !=
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
            break;
        case 'a':
            sweep = true;
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

    rc = o.listen ? run_server(p, &o, host) : run_client(p, &o);

    teardown_conn(p);
    rdmx_worker_destroy(p->worker);
    rdmx_context_destroy(p->ctx);
    return rc < 0 ? 1 : 0;
}
