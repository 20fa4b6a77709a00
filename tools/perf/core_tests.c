/*
 * rdmx-perf: the core tests — send_lat, send_bw, put_lat, put_bw, get_lat,
 * get_bw, atomic_lat (main.c describes their methodology). Each has a
 * client half that times it and a server half that answers, both on the
 * one connection; the buffers are allocated before each test and nothing
 * is allocated while it runs.
 */
#include "perf.h"

#include <inttypes.h>
#include <stdlib.h>

/* Default measured iterations for @p size: fewer above 64 KiB. */
uint64_t perf_default_iters(size_t size)
{
    uint64_t n = DEFAULT_ITERS;

    if (size > 65536) {
        n = (uint64_t)DEFAULT_ITERS * 65536 / size;
        n = n < 100 ? 100 : n;
    }
    return n;
}

/* Client send_bw: the server acknowledged one more window. */
static void ack_cb(rdmx_status_t status, size_t length, void *arg)
{
    perf_t *p = arg;

    if (status == RDMX_OK && p->ack_time != NULL) {
        p->ack_time[p->ack_rx.done] = now_ns();
    }
    perf_ops_cb(status, length, &p->ack_rx);
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
        return perf_fail("allocate send buffer", st);
    }
    st = rdmx_mem_alloc(p->ctx, len, RDMX_ACCESS_ALL, &p->rmr);
    if (st != RDMX_OK) {
        return perf_fail("allocate receive buffer", st);
    }
    if (test == TEST_PUT_LAT) {
        ((uint8_t *)rdmx_mr_addr(p->smr))[size - 1] = 0xff;
        ((uint8_t *)rdmx_mr_addr(p->rmr))[size - 1] = 0xff;
    }
    st =
        rdmx_mr_pack(p->rmr, 0, len, RDMX_ACCESS_ALL, desc, desc_cap, desc_len);
    if (st != RDMX_OK) {
        return perf_fail("pack descriptor", st);
    }
    ops_reset(&p->tx);
    ops_reset(&p->rx);
    ops_reset(&p->rma);
    ops_reset(&p->flush);
    ops_reset(&p->ack_tx);
    ops_reset(&p->ack_rx);
    return 0;
}

void perf_test_cleanup(perf_t *p)
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

/* ------------------------------------------------------------------------ */
/* Server halves                                                            */
/* ------------------------------------------------------------------------ */

/* Start operations on the connection (0, or -1 with the error reported). */
static inline int post_recv(perf_t *p, ops_t *o, void *buf, size_t len,
                            rdmx_mr_t *mr, const char *what)
{
    int rc;

    START(rc, p, o, what, rdmx_recv_nb(p->ep, buf, len, &PERF_OP_CB(perf_ops_cb, o, mr)));
    return rc;
}

static inline int post_send(perf_t *p, ops_t *o, const void *buf, size_t len,
                            rdmx_mr_t *mr, const char *what)
{
    int rc;

    START(rc, p, o, what, rdmx_send_nb(p->ep, buf, len, &PERF_OP_CB(perf_ops_cb, o, mr)));
    return rc;
}

static inline int post_put(perf_t *p, const char *what)
{
    int rc;

    START(rc, p, &p->rma, what,
          rdmx_put_nb(p->ep, p->peer, 0, rdmx_mr_addr(p->smr), p->size,
                      &PERF_OP_CB(perf_ops_cb, &p->rma, p->smr)));
    return rc;
}

static inline int post_get(perf_t *p, const char *what)
{
    int rc;

    START(rc, p, &p->rma, what,
          rdmx_get_nb(p->ep, p->peer, 0, rdmx_mr_addr(p->rmr), p->size,
                      &PERF_OP_CB(perf_ops_cb, &p->rma, p->rmr)));
    return rc;
}

static inline int post_fadd(perf_t *p, const char *what)
{
    int rc;

    START(rc, p, &p->rma, what,
          rdmx_atomic_fadd_nb(p->ep, p->peer, 0, 1, &p->atomic_old,
                              &PERF_OP_CB(perf_ops_cb, &p->rma, NULL)));
    return rc;
}

static inline int post_flush(perf_t *p, const char *what)
{
    int rc;

    START(rc, p, &p->flush, what,
          rdmx_ep_flush_nb(p->ep, &PERF_OP_CB(perf_ops_cb, &p->flush, NULL)));
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
            return perf_conn_failed(p, rx);
        }
        if (p->rx.err != RDMX_OK) {
            return perf_fail_status(rx, p->rx.err);
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
int perf_server_test(perf_t *p, const ctrl_t *c)
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
        return perf_ctrl_send(p, &reply, NULL, "reply");
    }
    if (g_tests[c->test].rpc) {
        return perf_server_rpc_test(p, c);
    }
    if (test_setup(p, (test_id_t)c->test, c->size, desc, sizeof(desc),
                   &desc_len) < 0) {
        reply.status = RDMX_ERR_NO_MEMORY;
        perf_test_cleanup(p);
        return perf_ctrl_send(p, &reply, NULL, "reply");
    }
    st = rdmx_rmem_unpack(p->ep, c->desc, c->desc_len, &p->peer);
    if (st != RDMX_OK) {
        perf_fail("unpack the client's descriptor", st);
        reply.status = st;
        perf_test_cleanup(p);
        return perf_ctrl_send(p, &reply, NULL, "reply");
    }
    reply.desc_len = (uint32_t)desc_len;
    if (perf_ctrl_send(p, &reply, desc, "reply") < 0) {
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
        rc = perf_ctrl_post_recv(p);
    }
    if (rc == 0) {
        rc = perf_ctrl_wait(p, &done, "wait for the client's done");
    }
    if (rc == 0 && done.op != OP_DONE) {
        rc = perf_fail_msg("protocol error: expected DONE");
    }
    if (rc == 0) {
        ctrl_t ack = {.op = OP_DONE_ACK, .test = c->test};
        rc = perf_ctrl_send(p, &ack, NULL, "done ack");
    }
    if (rc == 0) {
        perf_test_cleanup(p); /* else perf_teardown_conn(), after the close */
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Client halves                                                            */
/* ------------------------------------------------------------------------ */

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
                           sizeof(p->ack_buf[0]), &PERF_OP_CB(ack_cb, p, NULL)));
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

int perf_client_test(perf_t *p, const opts_t *o, test_id_t test, size_t size,
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

    r.iters = o->iters ? o->iters : perf_default_iters(size);
    r.window = g_tests[test].bw ? o->window : 1;
    req.warmup = o->warmup != UINT64_MAX         ? o->warmup
                 : r.iters / 10 < DEFAULT_WARMUP ? r.iters / 10
                                                 : DEFAULT_WARMUP;
    req.size = size;
    req.iters = r.iters;
    req.window = r.window;
    req.transport = (uint32_t)o->transport;

    perf_watchdog_arm(o->timeout_s);
    nsamples = g_tests[test].bw ? nwindows(r.iters, r.window) : r.iters;
    t.samples = calloc(nsamples + 1, sizeof(*t.samples));
    if (t.samples == NULL) {
        return perf_fail_msg("out of memory for samples");
    }
    if (test == TEST_SEND_BW) {
        uint64_t maxwin =
            nwindows(r.iters > req.warmup ? r.iters : req.warmup, r.window);
        p->ack_time = calloc(maxwin + 1, sizeof(*p->ack_time));
        if (p->ack_time == NULL) {
            free(t.samples);
            return perf_fail_msg("out of memory for samples");
        }
    }
    if (test_setup(p, test, size, desc, sizeof(desc), &desc_len) < 0) {
        goto out;
    }
    req.desc_len = (uint32_t)desc_len;

    /* request -> reply with the server's descriptor */
    if (perf_ctrl_request(p, &req, desc, &reply) < 0) {
        goto out;
    }
    perf_server_transport(o, reply.transport, server_transport);
    st = rdmx_rmem_unpack(p->ep, reply.desc, reply.desc_len, &p->peer);
    if (st != RDMX_OK) {
        perf_fail("unpack the server's descriptor", st);
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
        rc = perf_fail_msg("unknown test");
        break;
    }
    if (rc < 0) {
        goto out;
    }
    rc = -1;

    /* done -> done ack: the server released its side */
    if (perf_ctrl_done(p, test, &ack) < 0) {
        goto out;
    }
    perf_compute(&r, &t);
    perf_print_result(o, &r);
    perf_test_cleanup(p);
    rc = 0;
out: /* on failure, perf_teardown_conn() releases the memory after the
      * close */
    free(t.samples);
    return rc;
}
