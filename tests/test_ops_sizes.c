/*
 * ops_sizes: every operation moves the right bytes, at every size.
 *
 * A client and a test server (separate processes) exercise send/recv in both
 * directions (0 B ... 64 MiB), put, put-with-notify, get (1 B ... 64 MiB) and
 * the atomics. Each transfer carries a pattern derived from a per-size seed
 * and is verified byte for byte by the receiving side: the server checks
 * puts after a flush and checks put-with-notify data inside its notify
 * callback (the data must be there when the notification is delivered, with
 * the right immediate, offset and length). Local buffers are unregistered,
 * rdmx_mem_register'ed or rdmx_mem_alloc'ed; remote regions are
 * rdmx_mem_alloc'ed (one-sided over shm) or malloc'ed and registered
 * (emulated RMA); remote offsets are aligned and unaligned. Put and get
 * also run with RDMX_OP_FLAG_STREAM (streamed stores where rdmx copies into
 * mapped memory), and an unknown flag is RDMX_ERR_INVALID. Each operation
 * runs through the blocking wrapper and as several non-blocking operations
 * in flight at once, which also proves message ordering. Guard bytes around
 * every target range prove nothing outside it is touched.
 * Fetch-add and compare-and-swap (swap and no-swap) return the old value and
 * leave the expected word; concurrent fetch-adds return distinct old values.
 * Finally: a message that arrives before its receive (counted as
 * unexpected) is delivered intact, and a receive that is too small fails
 * with RDMX_ERR_TOO_BIG and the needed length, writes nothing past its
 * capacity, and the message then goes to the next, bigger receive; a
 * blocking receive that times out returns RDMX_ERR_TIMEOUT and does not
 * swallow the next message.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_SIZE      (64 * TH_MIB + 64 * TH_KIB)
#define REG_SIZE      (64 * TH_MIB + 64 * TH_KIB)
#define BIG_LIMIT     (TH_MIB + 3) /* sizes above run fewer variants */
#define MAX_BATCH     8
#define OP_TIMEOUT_MS 120000

static const size_t sizes[] = {
    0, 1, 7, 8, 4095, 4096, 65537, TH_MIB + 3, 16 * TH_MIB, 64 * TH_MIB};

typedef struct {
    const char *name;
    uint8_t *src, *dst;
    rdmx_mr_t *smr, *dmr;
    ts_region_t *remote;
    uint64_t roff;  /* base offset in the remote region */
    unsigned flags; /* TS_FLAG_* for the server's message buffers */
    int big;        /* also run sizes above BIG_LIMIT */
} variant_t;

static rdmx_worker_t *worker;
static rdmx_ep_t *ep;
static uint64_t n_notifies;

/* Params of an operation: a non-blocking one tracked by @p req (OP_CB: no
 * local region); a blocking one; a blocking receive that waits up to @p ms.
 * @p mr_ is the local region holding the buffer (NULL: none). */
#define OP_CB(req)                                                             \
    (&(rdmx_op_params_t){                                                      \
        .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = th_req_cb, .arg = (req)})
#define OP_NB(req, mr_)                                                        \
    (&(rdmx_op_params_t){.field_mask =                                         \
                             RDMX_OP_PARAM_FIELD_CB | RDMX_OP_PARAM_FIELD_MR,  \
                         .cb = th_req_cb,                                      \
                         .arg = (req),                                         \
                         .mr = (mr_)})
#define OP_MR(mr_)                                                             \
    (&(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_MR, .mr = (mr_)})
#define OP_STREAM(mr_)                                                         \
    (&(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_MR |                \
                                       RDMX_OP_PARAM_FIELD_FLAGS,              \
                         .mr = (mr_),                                          \
                         .flags = RDMX_OP_FLAG_STREAM})
#define OP_RECV(mr_, ms)                                                       \
    (&(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_MR |                \
                                       RDMX_OP_PARAM_FIELD_TIMEOUT,            \
                         .mr = (mr_),                                          \
                         .timeout_ms = (ms)})

static void check_reply_ok(const ts_reply_t *rep, const char *what)
{
    CHECKF(rep->status == RDMX_OK, "%s: server says %s", what,
           rdmx_status_name((rdmx_status_t)rep->status));
}

/* Write guard patterns around [off, off + len) of the remote region. */
static void remote_guards_set(const variant_t *v, uint64_t off, uint64_t len,
                              uint64_t seed)
{
    uint64_t before = off < 16 ? off : 16;
    uint64_t after = REG_SIZE - (off + len) < 16 ? REG_SIZE - (off + len) : 16;

    if (before)
        ts_fill(ep, v->remote, off - before, before, seed);
    if (after)
        ts_fill(ep, v->remote, off + len, after, seed + 1);
}

static void remote_guards_check(const variant_t *v, uint64_t off, uint64_t len,
                                uint64_t seed)
{
    uint64_t before = off < 16 ? off : 16;
    uint64_t after = REG_SIZE - (off + len) < 16 ? REG_SIZE - (off + len) : 16;

    if (before)
        TS_VERIFY_REMOTE(ep, v->remote, off - before, before, seed);
    if (after)
        TS_VERIFY_REMOTE(ep, v->remote, off + len, after, seed + 1);
}

static void check_notify(uint64_t imm, const variant_t *v, uint64_t off,
                         size_t size)
{
    ts_reply_t rep;

    ts_call(ep, TS_NOTIFY_WAIT, imm, 10000, 0, 0, &rep);
    CHECKF(rep.status == RDMX_OK,
           "no notification with imm %llx reached the server",
           (unsigned long long)imm);
    CHECKF(rep.v[0] == off && rep.v[1] == size,
           "notify: offset %llu length %llu, expected %llu %zu",
           (unsigned long long)rep.v[0], (unsigned long long)rep.v[1],
           (unsigned long long)off, size);
    CHECKF(rep.v[3] == v->remote->region,
           "notify names region %lld, expected %llu", (long long)rep.v[3],
           (unsigned long long)v->remote->region);
    CHECKF(rep.v[2] == 1,
           "notify for %zu bytes at %llu arrived before the data was in "
           "place",
           size, (unsigned long long)off);
}

/* ------------------------------------------------------------------------ */
/* Blocking wrappers                                                        */
/* ------------------------------------------------------------------------ */

static void blocking_ops(size_t size, const variant_t *v, int vi)
{
    ts_reply_t rep;
    uint64_t seed, gseed = th_seed(99, size, vi);
    size_t len = (size_t)-1;
    uint64_t off;

    /* send, client -> server */
    seed = th_seed(1, size, vi);
    th_fill(v->src, size, seed);
    ts_post(ep, TS_RECV, size, size, seed, v->flags);
    CHECK_OK(rdmx_send(ep, v->src, size, OP_MR(v->smr)));
    ts_reply(ep, &rep);
    check_reply_ok(&rep, "recv of a sent message");
    CHECKF(rep.v[0] == size && rep.v[1] == 1,
           "send %zu B (%s): server received %llu bytes, content %s", size,
           v->name, (unsigned long long)rep.v[0], rep.v[1] ? "ok" : "WRONG");

    /* send, server -> client */
    seed = th_seed(2, size, vi);
    memset(v->dst, 0xee, size + 8);
    ts_post(ep, TS_SEND, size, seed, v->flags, 0);
    CHECK_OK(rdmx_recv(ep, v->dst, size, OP_RECV(v->dmr, OP_TIMEOUT_MS), &len));
    CHECK_EQ_U64(len, size);
    CHECK_PATTERN(v->dst, size, seed, 0);
    for (len = size; len < size + 8; len++)
        CHECKF(v->dst[len] == 0xee, "recv wrote past the message");

    if (size == 0)
        return;

    /* put */
    off = v->roff;
    seed = th_seed(3, size, vi);
    th_fill(v->src, size, seed);
    remote_guards_set(v, off, size, gseed);
    CHECK_OK(rdmx_put(ep, v->remote->rmem, off, v->src, size, OP_MR(v->smr)));
    CHECK_OK(rdmx_ep_flush(ep, NULL));
    TS_VERIFY_REMOTE(ep, v->remote, off, size, seed);
    remote_guards_check(v, off, size, gseed);

    /* put with notify */
    off = v->roff + 5;
    seed = th_seed(4, size, vi);
    th_fill(v->src, size, seed);
    remote_guards_set(v, off, size, gseed);
    CHECK_OK(rdmx_put_notify(ep, v->remote->rmem, off, v->src, size, seed,
                             OP_MR(v->smr)));
    n_notifies++;
    check_notify(seed, v, off, size);
    remote_guards_check(v, off, size, gseed);

    /* get */
    off = v->roff;
    seed = th_seed(5, size, vi);
    ts_fill(ep, v->remote, off, size, seed);
    memset(v->dst, 0xee, size + 8);
    CHECK_OK(rdmx_get(ep, v->remote->rmem, off, v->dst, size, OP_MR(v->dmr)));
    CHECK_PATTERN(v->dst, size, seed, 0);
    for (len = size; len < size + 8; len++)
        CHECKF(v->dst[len] == 0xee, "get wrote past its buffer");

    /* put and get around the cache (RDMX_OP_FLAG_STREAM: over shm into
     * and out of mapped memory with streamed stores): the same bytes */
    off = v->roff + 3;
    seed = th_seed(6, size, vi);
    th_fill(v->src, size, seed);
    remote_guards_set(v, off, size, gseed);
    CHECK_OK(
        rdmx_put(ep, v->remote->rmem, off, v->src, size, OP_STREAM(v->smr)));
    CHECK_OK(rdmx_ep_flush(ep, NULL));
    TS_VERIFY_REMOTE(ep, v->remote, off, size, seed);
    remote_guards_check(v, off, size, gseed);
    seed = th_seed(7, size, vi);
    ts_fill(ep, v->remote, off, size, seed);
    memset(v->dst, 0xee, size + 8);
    CHECK_OK(
        rdmx_get(ep, v->remote->rmem, off, v->dst, size, OP_STREAM(v->dmr)));
    CHECK_PATTERN(v->dst, size, seed, 0);
    for (len = size; len < size + 8; len++)
        CHECKF(v->dst[len] == 0xee, "streamed get wrote past its buffer");
}

/* ------------------------------------------------------------------------ */
/* Non-blocking, several in flight                                          */
/* ------------------------------------------------------------------------ */

static void start_ok(th_req_t *req, rdmx_status_t st, size_t len)
{
    th_req_start(req, st, len);
    CHECKF(st == RDMX_OK || st == RDMX_INPROGRESS,
           "starting an operation failed: %s (%s)", rdmx_status_name(st),
           rdmx_error_detail());
}

static void wait_all_ok(th_req_t *reqs, size_t n, const char *what, size_t size)
{
    size_t i;

    th_req_wait(worker, reqs, n, OP_TIMEOUT_MS);
    for (i = 0; i < n; i++)
        CHECKF(reqs[i].status == RDMX_OK, "%s of %zu B #%zu failed: %s", what,
               size, i, rdmx_status_name(reqs[i].status));
}

static void nb_ops(size_t size, const variant_t *v, int vi)
{
    size_t k = BUF_SIZE / (size ? size : 1), i;
    th_req_t reqs[3 * MAX_BATCH + 2];
    ts_msg_t cmds[MAX_BATCH];
    ts_reply_t *reps = th_alloc(MAX_BATCH * sizeof(ts_reply_t));
    uint64_t seeds[MAX_BATCH], off;

    if (k > MAX_BATCH)
        k = MAX_BATCH;

    /* k sends client -> server, each announced by a TS_RECV command; all
     * commands, messages and reply receives in flight at once. The server
     * takes them in order, so this also proves ordering. */
    for (i = 0; i < k; i++) {
        seeds[i] = th_seed(10 + i, size, vi);
        th_fill(v->src + i * size, size, seeds[i]);
        ts_msg_init(&cmds[i], TS_RECV, size, size, seeds[i], v->flags);
    }
    for (i = 0; i < 3 * k; i++)
        th_req_init(&reqs[i]);
    for (i = 0; i < k; i++) {
        th_req_t *r = &reqs[2 * k + i];

        CHECK_ST(rdmx_recv_nb(ep, &reps[i], sizeof(reps[i]), OP_CB(r)),
                 RDMX_INPROGRESS);
    }
    for (i = 0; i < k; i++) {
        start_ok(
            &reqs[2 * i],
            rdmx_send_nb(ep, &cmds[i], sizeof(cmds[i]), OP_CB(&reqs[2 * i])),
            sizeof(cmds[i]));
        start_ok(&reqs[2 * i + 1],
                 rdmx_send_nb(ep, v->src + i * size, size,
                              OP_NB(&reqs[2 * i + 1], v->smr)),
                 size);
    }
    wait_all_ok(reqs, 3 * k, "nb send/recv", size);
    for (i = 0; i < k; i++) {
        check_reply_ok(&reps[i], "nb recv");
        CHECKF(reps[i].v[0] == size && reps[i].v[1] == 1,
               "nb send #%zu of %zu B: server got %llu bytes, content %s", i,
               size, (unsigned long long)reps[i].v[0],
               reps[i].v[1] ? "ok" : "WRONG (out of order?)");
    }

    /* k sends server -> client into k receives posted first. */
    for (i = 0; i < k; i++) {
        seeds[i] = th_seed(20 + i, size, vi);
        th_req_init(&reqs[i]);
        memset(v->dst + i * size, 0, size);
        CHECK_ST(
            rdmx_recv_nb(ep, v->dst + i * size, size, OP_NB(&reqs[i], v->dmr)),
            RDMX_INPROGRESS);
    }
    for (i = 0; i < k; i++)
        ts_post(ep, TS_SEND, size, seeds[i], v->flags, 0);
    wait_all_ok(reqs, k, "nb recv", size);
    for (i = 0; i < k; i++) {
        CHECK_EQ_U64(reqs[i].length, size);
        CHECK_PATTERN(v->dst + i * size, size, seeds[i], 0);
    }

    if (size == 0) {
        free(reps);
        return;
    }

    /* k puts to adjacent ranges, then a non-blocking flush. */
    off = v->roff;
    for (i = 0; i < k; i++) {
        seeds[i] = th_seed(30 + i, size, vi);
        th_fill(v->src + i * size, size, seeds[i]);
        th_req_init(&reqs[i]);
    }
    for (i = 0; i < k; i++)
        start_ok(&reqs[i],
                 rdmx_put_nb(ep, v->remote->rmem, off + i * size,
                             v->src + i * size, size, OP_NB(&reqs[i], v->smr)),
                 size);
    th_req_init(&reqs[k]);
    start_ok(&reqs[k], rdmx_ep_flush_nb(ep, OP_CB(&reqs[k])), 0);
    wait_all_ok(reqs, k + 1, "nb put", size);
    for (i = 0; i < k; i++)
        TS_VERIFY_REMOTE(ep, v->remote, off + i * size, size, seeds[i]);

    /* k puts with notify. */
    for (i = 0; i < k; i++) {
        seeds[i] = th_seed(40 + i, size, vi);
        th_fill(v->src + i * size, size, seeds[i]);
        th_req_init(&reqs[i]);
    }
    for (i = 0; i < k; i++)
        start_ok(&reqs[i],
                 rdmx_put_notify_nb(ep, v->remote->rmem, off + i * size,
                                    v->src + i * size, size, seeds[i],
                                    OP_NB(&reqs[i], v->smr)),
                 size);
    wait_all_ok(reqs, k, "nb put_notify", size);
    n_notifies += k;
    for (i = 0; i < k; i++)
        check_notify(seeds[i], v, off + i * size, size);

    /* k gets. */
    for (i = 0; i < k; i++) {
        seeds[i] = th_seed(50 + i, size, vi);
        ts_fill(ep, v->remote, off + i * size, size, seeds[i]);
        memset(v->dst + i * size, 0, size);
        th_req_init(&reqs[i]);
    }
    for (i = 0; i < k; i++)
        start_ok(&reqs[i],
                 rdmx_get_nb(ep, v->remote->rmem, off + i * size,
                             v->dst + i * size, size, OP_NB(&reqs[i], v->dmr)),
                 size);
    wait_all_ok(reqs, k, "nb get", size);
    for (i = 0; i < k; i++)
        CHECK_PATTERN(v->dst + i * size, size, seeds[i], 0);

    /* Mixed: puts to the first half, gets from the second half and a
     * message round trip, all in flight together. */
    if (k >= 2) {
        size_t h = k / 2, n = 0;
        uint64_t mseed = th_seed(60, size, vi);
        size_t mlen = size < 4096 ? size : 4096;
        uint8_t *mbuf = th_alloc(mlen);

        for (i = 0; i < h; i++) {
            seeds[i] = th_seed(61 + i, size, vi);
            th_fill(v->src + i * size, size, seeds[i]);
        }
        for (i = h; i < 2 * h; i++) {
            seeds[i] = th_seed(61 + i, size, vi);
            ts_fill(ep, v->remote, off + i * size, size, seeds[i]);
            memset(v->dst + i * size, 0, size);
        }
        th_fill(mbuf, mlen, mseed);
        ts_msg_init(&cmds[0], TS_RECV, mlen, mlen, mseed, 0);
        for (i = 0; i < 2 * h + 3; i++)
            th_req_init(&reqs[i]);
        CHECK_ST(rdmx_recv_nb(ep, &reps[0], sizeof(reps[0]), OP_CB(&reqs[n++])),
                 RDMX_INPROGRESS);
        for (i = 0; i < h; i++) {
            start_ok(&reqs[n],
                     rdmx_put_nb(ep, v->remote->rmem, off + i * size,
                                 v->src + i * size, size,
                                 OP_NB(&reqs[n], v->smr)),
                     size);
            n++;
            start_ok(&reqs[n],
                     rdmx_get_nb(ep, v->remote->rmem, off + (h + i) * size,
                                 v->dst + (h + i) * size, size,
                                 OP_NB(&reqs[n], v->dmr)),
                     size);
            n++;
        }
        start_ok(&reqs[n],
                 rdmx_send_nb(ep, &cmds[0], sizeof(cmds[0]), OP_CB(&reqs[n])),
                 sizeof(cmds[0]));
        n++;
        start_ok(&reqs[n], rdmx_send_nb(ep, mbuf, mlen, OP_CB(&reqs[n])), mlen);
        n++;
        wait_all_ok(reqs, n, "mixed", size);
        CHECK_OK(rdmx_ep_flush(ep, NULL));
        check_reply_ok(&reps[0], "mixed recv");
        CHECK(reps[0].v[0] == mlen && reps[0].v[1] == 1);
        for (i = 0; i < h; i++)
            TS_VERIFY_REMOTE(ep, v->remote, off + i * size, size, seeds[i]);
        for (i = h; i < 2 * h; i++)
            CHECK_PATTERN(v->dst + i * size, size, seeds[i], 0);
        free(mbuf);
    }
    free(reps);
}

/* ------------------------------------------------------------------------ */
/* Atomics                                                                  */
/* ------------------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void atomics(const ts_region_t *r)
{
    const uint64_t off = 64, big = 0xdeadbeefcafef00dull;
    uint64_t old = 0, olds[16], init;
    th_req_t reqs[16];
    size_t i, winners = 0;

    ts_set64(ep, r, off - 8, 111);
    ts_set64(ep, r, off + 8, 222);
    ts_set64(ep, r, off, 1000);

    CHECK_OK(rdmx_atomic_fadd(ep, r->rmem, off, 5, &old, NULL));
    CHECK_EQ_U64(old, 1000);
    CHECK_OK(
        rdmx_atomic_fadd(ep, r->rmem, off, UINT64_MAX, &old, NULL)); /* -1 */
    CHECK_EQ_U64(old, 1005);
    CHECK_EQ_U64(ts_read64(ep, r, off), 1004);

    /* compare-and-swap that swaps */
    CHECK_OK(rdmx_atomic_cswap(ep, r->rmem, off, 1004, big, &old, NULL));
    CHECK_EQ_U64(old, 1004);
    CHECK_EQ_U64(ts_read64(ep, r, off), big);
    /* ... and one that does not */
    old = 0;
    CHECK_OK(rdmx_atomic_cswap(ep, r->rmem, off, 1004, 7, &old, NULL));
    CHECK_EQ_U64(old, big);
    CHECK_EQ_U64(ts_read64(ep, r, off), big);
    /* fetch-add wraps around 2^64 */
    ts_set64(ep, r, off, UINT64_MAX - 1);
    CHECK_OK(rdmx_atomic_fadd(ep, r->rmem, off, 3, &old, NULL));
    CHECK_EQ_U64(old, UINT64_MAX - 1);
    CHECK_EQ_U64(ts_read64(ep, r, off), 1);
    /* neighbours untouched */
    CHECK_EQ_U64(ts_read64(ep, r, off - 8), 111);
    CHECK_EQ_U64(ts_read64(ep, r, off + 8), 222);

    /* the last word of the region */
    ts_set64(ep, r, REG_SIZE - 8, 40);
    CHECK_OK(rdmx_atomic_fadd(ep, r->rmem, REG_SIZE - 8, 2, &old, NULL));
    CHECK_EQ_U64(old, 40);
    CHECK_EQ_U64(ts_read64(ep, r, REG_SIZE - 8), 42);

    /* 16 fetch-adds in flight: distinct old values, exact sum. */
    init = (uint64_t)1 << 40;
    ts_set64(ep, r, off, init);
    for (i = 0; i < 16; i++) {
        th_req_init(&reqs[i]);
        olds[i] = 0;
    }
    for (i = 0; i < 16; i++)
        start_ok(
            &reqs[i],
            rdmx_atomic_fadd_nb(ep, r->rmem, off, 1, &olds[i], OP_CB(&reqs[i])),
            8);
    wait_all_ok(reqs, 16, "nb fadd", 8);
    qsort(olds, 16, sizeof(olds[0]), cmp_u64);
    for (i = 0; i < 16; i++)
        CHECKF(olds[i] == init + i, "fadd old values not distinct: #%zu = %llu",
               i, (unsigned long long)(olds[i] - init));
    CHECK_EQ_U64(ts_read64(ep, r, off), init + 16);

    /* 8 compare-and-swaps in flight on the same old value: exactly one
     * wins, the others see the winner's value. */
    init = 5000;
    ts_set64(ep, r, off, init);
    for (i = 0; i < 8; i++) {
        th_req_init(&reqs[i]);
        olds[i] = 0;
    }
    for (i = 0; i < 8; i++)
        start_ok(&reqs[i],
                 rdmx_atomic_cswap_nb(ep, r->rmem, off, init, 6000 + i,
                                      &olds[i], OP_CB(&reqs[i])),
                 8);
    wait_all_ok(reqs, 8, "nb cswap", 8);
    {
        uint64_t final = ts_read64(ep, r, off);

        CHECK(final >= 6000 && final < 6008);
        for (i = 0; i < 8; i++) {
            if (olds[i] == init) {
                winners++;
                CHECK_EQ_U64(final, 6000 + i);
            } else {
                CHECK_EQ_U64(olds[i], final);
            }
        }
        CHECKF(winners == 1, "%zu compare-and-swaps won", winners);
    }
}

/* ------------------------------------------------------------------------ */
/* Unexpected messages, receives too small                                  */
/* ------------------------------------------------------------------------ */

static void unexpected(uint8_t *dst)
{
    static const size_t lens[] = {4096, 4 * TH_MIB};
    rdmx_worker_stats_t s0, s1;
    size_t i, len;

    for (i = 0; i < 2; i++) {
        uint64_t seed = th_seed(70, lens[i], 0);
        double deadline = th_now_ms() + 10000.0 * TH_SLOW;

        rdmx_worker_stats(worker, &s0);
        ts_post(ep, TS_SEND, lens[i], seed, 0, 0);
        do {
            rdmx_worker_wait(worker, 10);
            rdmx_worker_stats(worker, &s1);
            CHECKF(th_now_ms() < deadline,
                   "a %zu B message sent before its receive was not counted "
                   "as unexpected",
                   lens[i]);
        } while (s1.msgs_unexpected == s0.msgs_unexpected);
        CHECK_EQ_U64(s1.msgs_unexpected, s0.msgs_unexpected + 1);
        th_progress_for(worker, 20);
        memset(dst, 0, lens[i]);
        CHECK_OK(
            rdmx_recv(ep, dst, lens[i], OP_RECV(NULL, OP_TIMEOUT_MS), &len));
        CHECK_EQ_U64(len, lens[i]);
        CHECK_PATTERN(dst, len, seed, 0);
        rdmx_worker_stats(worker, &s1);
        CHECK(s1.msgs_received >= s0.msgs_received + 1);
    }
}

static void too_small_nb(uint8_t *dst, size_t msg, size_t cap)
{
    uint64_t seed = th_seed(80, msg, cap);
    rdmx_worker_stats_t s0, s1;
    th_req_t req;
    size_t i, len = 0;

    rdmx_worker_stats(worker, &s0);
    memset(dst, 0xee, msg + 8);
    ts_post(ep, TS_SEND, msg, seed, 0, 0);
    th_req_init(&req);
    CHECK_ST(rdmx_recv_nb(ep, dst, cap, OP_CB(&req)), RDMX_INPROGRESS);
    th_req_wait(worker, &req, 1, OP_TIMEOUT_MS);
    CHECK_ST(req.status, RDMX_ERR_TOO_BIG);
    CHECKF(req.length == msg,
           "too-small receive reports %zu as the needed length, expected %zu",
           req.length, msg);
    for (i = cap; i < msg + 8; i++)
        CHECKF(dst[i] == 0xee,
               "receive of capacity %zu wrote byte %zu of a %zu B message", cap,
               i, msg);
    rdmx_worker_stats(worker, &s1);
    CHECK_EQ_U64(s1.recv_too_small, s0.recv_too_small + 1);

    /* The message waits for the next receive. */
    CHECK_OK(rdmx_recv(ep, dst, msg + 8, OP_RECV(NULL, OP_TIMEOUT_MS), &len));
    CHECK_EQ_U64(len, msg);
    CHECK_PATTERN(dst, msg, seed, 0);
}

static void too_small_blocking(uint8_t *dst)
{
    uint64_t seed = th_seed(81, 5000, 0);
    size_t len = 0;

    ts_post(ep, TS_SEND, 5000, seed, 0, 0);
    CHECK_ST(rdmx_recv(ep, dst, 10, OP_RECV(NULL, OP_TIMEOUT_MS), &len),
             RDMX_ERR_TOO_BIG);
    CHECKF(len == 5000, "blocking too-small receive: length %zu, not 5000",
           len);
    CHECK_OK(rdmx_recv(ep, dst, 8192, OP_RECV(NULL, OP_TIMEOUT_MS), &len));
    CHECK_EQ_U64(len, 5000);
    CHECK_PATTERN(dst, 5000, seed, 0);
}

/* A blocking receive that times out gives up its place: the next message
 * goes to the next receive, intact. */
static void recv_timeout(uint8_t *dst)
{
    uint64_t seed = th_seed(82, 333, 0);
    size_t len = 12345;
    double t0 = th_now_ms(), dt;

    CHECK_ST(rdmx_recv(ep, dst, 4096, OP_RECV(NULL, 100), &len),
             RDMX_ERR_TIMEOUT);
    dt = th_now_ms() - t0;
    CHECKF(dt >= 90.0 && dt < 2000.0 * TH_SLOW,
           "a receive with a 100 ms timeout returned after %.0f ms", dt);
    ts_post(ep, TS_SEND, 333, seed, 0, 0);
    CHECK_OK(rdmx_recv(ep, dst, 4096, OP_RECV(NULL, OP_TIMEOUT_MS), &len));
    CHECK_EQ_U64(len, 333);
    CHECK_PATTERN(dst, 333, seed, 0);
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    th_proc_t server;
    rdmx_context_t *ctx;
    ts_region_t ra, rm;
    uint8_t *src, *dst, *src_r;
    rdmx_mr_t *src_mr, *dst_mr;
    variant_t variants[4];
    ts_reply_t rep;
    size_t si;
    int vi;
    double t0;

    if (argc > 1 && strcmp(argv[1], "--server") == 0)
        return ts_server_main(argc, argv);

    th_init("ops_sizes", 280);
    th_spawn_self(&server, "--server", 30000, NULL);
    ctx = th_context();
    worker = th_worker(ctx, 0);
    ep = th_connect(worker, &server, NULL);
    th_log("transport %s, server %s", th_transport_env(), server.addr);

    /* Endpoint and context accessors. */
    {
        char peer[64], tiny[4];
        rdmx_transport_t want = RDMX_TRANSPORT_AUTO;

        CHECK(rdmx_ep_worker(ep) == worker);
        CHECK_OK(rdmx_ep_peer_address(ep, peer, sizeof(peer)));
        CHECKF(strcmp(peer, server.addr) == 0, "peer address %s, not %s",
               peer, server.addr);
        CHECK_ST(rdmx_ep_peer_address(ep, tiny, sizeof(tiny)),
                 RDMX_ERR_TOO_BIG);
        CHECK_OK(rdmx_transport_parse(th_transport_env(), &want));
        /* (auto resolves to what reaches other hosts: rdma or tcp) */
        if (want == RDMX_TRANSPORT_AUTO)
            CHECK(rdmx_context_transport(ctx) == RDMX_TRANSPORT_TCP ||
                  rdmx_context_transport(ctx) == RDMX_TRANSPORT_RDMA);
        else
            CHECK(rdmx_context_transport(ctx) == want);
    }

    /* Local buffers: malloc'ed, malloc'ed + registered, rdmx_mem_alloc'ed.
     * Eight spare bytes for guards. */
    src = th_alloc(BUF_SIZE + 8);
    dst = th_alloc(BUF_SIZE + 8);
    src_r = th_alloc(BUF_SIZE + 8);
    CHECK_OK(rdmx_mem_register(ctx, src_r, BUF_SIZE + 8,
                               RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &src_mr));
    CHECK_OK(rdmx_mem_alloc(ctx, BUF_SIZE + 8,
                            RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &dst_mr));
    CHECK(rdmx_mr_addr(src_mr) == src_r);
    CHECK_EQ_U64(rdmx_mr_length(dst_mr), BUF_SIZE + 8);

    /* Remote regions: allocated (one-sided over shm) and registered
     * malloc memory (emulated RMA). */
    ts_alloc(ep, &ra, REG_SIZE, RDMX_ACCESS_ALL, TS_KIND_ALLOC, 0);
    ts_alloc(ep, &rm, REG_SIZE, RDMX_ACCESS_ALL, TS_KIND_REGISTER, 0);

    variants[0] = (variant_t){
        "unregistered->registered", src, dst, NULL, NULL, &rm, 3, 0, 1};
    variants[1] = (variant_t){"registered->allocated",
                              src_r,
                              rdmx_mr_addr(dst_mr),
                              src_mr,
                              dst_mr,
                              &ra,
                              0,
                              TS_FLAG_REGISTERED,
                              1};
    variants[2] =
        (variant_t){"unregistered->allocated", src, dst, NULL, NULL, &ra, 1,
                    TS_FLAG_REGISTERED,        0};
    variants[3] = (variant_t){"registered->registered",
                              src_r,
                              rdmx_mr_addr(dst_mr),
                              src_mr,
                              dst_mr,
                              &rm,
                              8,
                              0,
                              0};

    /* a flag rdmx does not know is refused before anything moves */
    CHECK_ST(
        rdmx_get(ep, ra.rmem, 0, dst, 1,
                 &(rdmx_op_params_t){.field_mask = RDMX_OP_PARAM_FIELD_FLAGS,
                                     .flags = 1u << 7}),
        RDMX_ERR_INVALID);

    for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        t0 = th_now_ms();
        for (vi = 0; vi < 4; vi++) {
            if (sizes[si] > BIG_LIMIT && !variants[vi].big)
                continue;
            blocking_ops(sizes[si], &variants[vi], vi);
            nb_ops(sizes[si], &variants[vi], vi);
        }
        th_log("size %zu ok (%.0f ms)", sizes[si], th_now_ms() - t0);
    }

    atomics(&ra);
    atomics(&rm);
    th_log("atomics ok");

    unexpected(dst);
    too_small_nb(dst, 4096, 100);
    too_small_nb(dst, 1, 0);
    too_small_nb(dst, 2 * TH_MIB + 1, TH_MIB);
    too_small_blocking(dst);
    recv_timeout(dst);
    th_log("unexpected / too small ok");

    /* Every notification was delivered once, none lost. */
    ts_call(ep, TS_STATS, 0, 0, 0, 0, &rep);
    CHECKF(rep.v[2] == n_notifies && rep.v[3] == 0,
           "server saw %llu notifications (%llu lost), expected %llu",
           (unsigned long long)rep.v[2], (unsigned long long)rep.v[3],
           (unsigned long long)n_notifies);
    {
        rdmx_worker_stats_t ss;

        CHECK(rep.blob_len == sizeof(ss));
        memcpy(&ss, rep.blob, sizeof(ss));
        CHECK_EQ_U64(ss.notifies_received, n_notifies);
        CHECK_EQ_U64(ss.rma_refused, 0);
        CHECK_EQ_U64(ss.proto_errors, 0);
    }

    ts_free(ep, &ra);
    ts_free(ep, &rm);
    ts_quit(ep);
    th_check_exit_ok("server", th_wait_exit(&server, 20000));

    rdmx_mem_deregister(src_mr);
    rdmx_mem_deregister(dst_mr);
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    free(src);
    free(dst);
    free(src_r);
    th_log("ok");
    return 0;
}
