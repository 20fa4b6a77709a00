/*
 * rpc_bulk: zero-copy bulk arguments of RPC calls. The client lends the
 * handler registered memory through rdmx_rpc_bulk_t descriptors; the RPC
 * test server's "bulk_pull" reads descriptor 0 with RDMA get and answers
 * a checksum of the bytes (trs_checksum, FNV-1a over words), "bulk_push" writes
 * the harness pattern of a seed into descriptor 0 with RDMA put.
 *
 * Proven:
 *  - 1 GiB upload: the server's checksum of what it pulled equals the
 *    client's checksum of its buffer.
 *  - 1 GiB download: every byte the server pushed is the pattern
 *    (CHECK_PATTERN over the whole buffer).
 *  - 1 B, 4 KiB and 1 MiB both ways, from malloc'ed + registered and from
 *    rdmx_mem_alloc'ed memory; a descriptor of a sub-range at an unaligned
 *    offset: the push lands exactly there (guard bytes before and after
 *    untouched) and the pull reads exactly that range.
 *  - 8 pulls with 8 different regions in flight at once: each answer is the
 *    checksum of its own region.
 *  - refusals: a READ-only descriptor given to bulk_push (the server's put
 *    is refused: the call fails with RDMX_ERR_DENIED and nothing is
 *    written); a WRITE-only descriptor given to bulk_pull fails the same
 *    way; 9 descriptors, a NULL region or a NULL table fail locally with
 *    RDMX_ERR_INVALID (callback never runs, nothing sent); 2 descriptors
 *    reach the handler, which says so; a descriptor over a range outside
 *    its region fails locally with RDMX_ERR_OUT_OF_RANGE. The channel keeps
 *    working after each.
 *  - transports of two kinds (tcp runs only): a client context of transport
 *    auto reaches the tcp server over tcp; the server pushes 64 KiB, 1 MiB
 *    and 5 MiB into its registered and its rdmx_mem_alloc'ed memory and
 *    pulls the same sizes from it, every byte checked. From ~260 KiB
 *    tcp sends such bytes by rendezvous, which the auto client refused as
 *    PROTO (its context is not tcp); its own replies to the pulls now go
 *    by rendezvous too, as a tcp context's do.
 *  - a lender that frees its memory: 8 pulls behind a busy server fail
 *    with a message (over ofi:shm they may read what is still mapped), 8
 *    that race the free fail so or carry the lent bytes, and the server
 *    serves on (test_lender_gone). A pull counts as behind the server's
 *    20 ms spin only if the client freed the memory within 20 ms of
 *    asking for the spin; otherwise it counts as racing.
 * Throughput of the 1 GiB transfers is printed (not asserted).
 */
#define _GNU_SOURCE
#include "harness.h"
#include "rpc_server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rdmx_context_t *ctx;
static rdmx_worker_t *wk;
static rdmx_channel_t *ch;

static rdmx_call_params_t bulk_params(rdmx_rpc_bulk_t *b, unsigned n,
                                      int timeout_ms)
{
    rdmx_call_params_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CALL_PARAM_FIELD_BULK | RDMX_CALL_PARAM_FIELD_TIMEOUT;
    p.bulk = b;
    p.nbulk = n;
    p.timeout_ms = timeout_ms;
    return p;
}

static rdmx_rpc_bulk_t bulk_of(rdmx_mr_t *mr, uint64_t off, uint64_t len,
                               unsigned access)
{
    rdmx_rpc_bulk_t b;

    memset(&b, 0, sizeof(b));
    b.mr = mr;
    b.offset = off;
    b.length = len;
    b.access = access;
    return b;
}

/* bulk_pull of [off, off + len) of @mr; returns the server's checksum. */
static uint64_t pull(rdmx_mr_t *mr, uint64_t off, uint64_t len,
                     int timeout_ms)
{
    rdmx_rpc_bulk_t b = bulk_of(mr, off, len, RDMX_ACCESS_READ);
    rdmx_call_params_t p = bulk_params(&b, 1, timeout_ms * TH_SLOW);
    uint64_t sum = 0;
    size_t rlen = 0;

    CHECK_OK(rdmx_call(ch, "bulk_pull", NULL, 0, &sum, sizeof(sum), &p, &rlen));
    CHECK_EQ_U64(rlen, sizeof(sum));
    return sum;
}

/* bulk_push of the pattern of @seed into [off, off + len) of @mr. */
static void push(rdmx_mr_t *mr, uint64_t off, uint64_t len, uint64_t seed,
                 int timeout_ms)
{
    rdmx_rpc_bulk_t b = bulk_of(mr, off, len, RDMX_ACCESS_WRITE);
    rdmx_call_params_t p = bulk_params(&b, 1, timeout_ms * TH_SLOW);
    size_t rlen = 99;

    CHECK_OK(
        rdmx_call(ch, "bulk_push", &seed, sizeof(seed), NULL, 0, &p, &rlen));
    CHECK_EQ_U64(rlen, 0);
}

/* ------------------------------------------------------------------------ */

/* A client context of transport auto against the tcp server (tcp runs). */
static void test_auto_client(const char *addr)
{
    static const size_t sizes[] = {64 * 1024, TH_MIB, 5 * TH_MIB};
    rdmx_context_params_t cp = {.field_mask =
                                    RDMX_CONTEXT_PARAM_FIELD_TRANSPORT |
                                    RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES,
                                .transport = RDMX_TRANSPORT_AUTO,
                                .net_devices = "lo"};
    rdmx_context_t *actx = NULL;
    rdmx_worker_t *aw = NULL;
    rdmx_channel_t *ach = NULL, *keep = ch;
    rdmx_worker_stats_t s0, s1;
    rdmx_mr_t *mrs[2];
    unsigned char *reg;

    if (strcmp(th_transport_env(), "tcp") != 0)
        return;
    CHECK_OK(rdmx_context_create(&cp, &actx));
    CHECK_OK(rdmx_worker_create(actx, NULL, &aw));
    CHECK_OK(rdmx_channel_create(aw, addr, NULL, &ach));
    CHECK_OK(rdmx_channel_wait_ready(ach, 10000 * TH_SLOW));
    CHECKF(rdmx_ep_transport(rdmx_channel_ep(ach)) == RDMX_TRANSPORT_TCP,
           "auto client: the tcp server's connection runs over %s",
           rdmx_transport_name(rdmx_ep_transport(rdmx_channel_ep(ach))));
    reg = th_alloc(5 * TH_MIB);
    CHECK_OK(
        rdmx_mem_register(actx, reg, 5 * TH_MIB, RDMX_ACCESS_ALL, &mrs[0]));
    CHECK_OK(rdmx_mem_alloc(actx, 5 * TH_MIB, RDMX_ACCESS_ALL, &mrs[1]));
    rdmx_worker_stats(aw, &s0);
    ch = ach; /* (push and pull call on ch) */
    for (unsigned m = 0; m < 2; m++) {
        unsigned char *buf = rdmx_mr_addr(mrs[m]);
        for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            uint64_t seed = th_seed(9, m, i);
            memset(buf, 0, sizes[i]);
            push(mrs[m], 0, sizes[i], seed, 60000);
            CHECK_PATTERN(buf, sizes[i], seed, 0);
            th_fill(buf, sizes[i], seed + 1);
            CHECKF(pull(mrs[m], 0, sizes[i], 60000) ==
                       trs_checksum(buf, sizes[i]),
                   "auto client: the server pulled other bytes than %zu "
                   "of %s memory",
                   sizes[i], m == 0 ? "registered" : "allocated");
        }
    }
    ch = keep;
    rdmx_worker_stats(aw, &s1);
    CHECK_EQ_U64(s1.proto_errors, s0.proto_errors);
    CHECK_EQ_U64(s1.rma_refused, s0.rma_refused);
    rdmx_channel_destroy(ach);
    rdmx_mem_deregister(mrs[0]);
    rdmx_mem_deregister(mrs[1]);
    free(reg);
    rdmx_worker_destroy(aw);
    rdmx_context_destroy(actx);
}

static void test_1gib(void)
{
    const size_t size = TH_GIB;
    unsigned char *buf = th_alloc(size);
    rdmx_mr_t *mr;
    uint64_t seed = th_seed(1, 1, 1), want, got;
    double t0, t_up, t_down;

    th_fill(buf, size, seed);
    CHECK_OK(rdmx_mem_register(ctx, buf, size, RDMX_ACCESS_ALL, &mr));
    want = trs_checksum(buf, size);

    t0 = th_now_ms();
    got = pull(mr, 0, size, 120000);
    t_up = th_now_ms() - t0;
    CHECKF(got == want, "1 GiB upload: server checksum %016llx, client "
                        "%016llx",
           (unsigned long long)got, (unsigned long long)want);
    th_log("1 GiB upload (bulk_pull, server RDMA get + checksum): %.0f ms, "
           "%.0f MB/s end to end",
           t_up, size / 1e6 / (t_up / 1000.0));

    seed = th_seed(1, 2, 1);
    /* Different contents first, so a push that did nothing cannot pass. */
    memset(buf, 0, 4096);
    memset(buf + size - 4096, 0, 4096);
    t0 = th_now_ms();
    push(mr, 0, size, seed, 120000);
    t_down = th_now_ms() - t0;
    CHECK_PATTERN(buf, size, seed, 0);
    th_log("1 GiB download (bulk_push, server fill + RDMA put): %.0f ms, "
           "%.0f MB/s end to end; verified byte for byte",
           t_down, size / 1e6 / (t_down / 1000.0));

    rdmx_mem_deregister(mr);
    free(buf);
}

/* ------------------------------------------------------------------------ */

static void test_small(void)
{
    static const size_t sizes[] = {1, 4096, TH_MIB};
    const size_t guard = 4096 + 3; /* unaligned sub-range start */
    const size_t region = TH_MIB + 2 * 8192;

    for (int kind = 0; kind < 2; kind++) {
        rdmx_mr_t *mr;
        unsigned char *buf;

        if (kind == 0) {
            buf = th_alloc(region);
            CHECK_OK(rdmx_mem_register(ctx, buf, region, RDMX_ACCESS_ALL, &mr));
        } else {
            CHECK_OK(rdmx_mem_alloc(ctx, region, RDMX_ACCESS_ALL, &mr));
            buf = rdmx_mr_addr(mr);
        }
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            size_t len = sizes[i];
            uint64_t seed = th_seed(2, (uint64_t)kind, len);
            uint64_t sum;

            /* pull from offset 0 */
            th_fill(buf, len, seed);
            sum = pull(mr, 0, len, 30000);
            CHECKF(sum == trs_checksum(buf, len),
                   "pull of %zu bytes: wrong checksum", len);

            /* push into a sub-range; guards must stay */
            memset(buf, 0x5a, region);
            push(mr, guard, len, seed ^ 1, 30000);
            CHECK_PATTERN(buf + guard, len, seed ^ 1, 0);
            for (size_t j = 0; j < guard; j++)
                CHECKF(buf[j] == 0x5a, "push of %zu bytes at %zu wrote byte "
                                       "%zu before the range",
                       len, guard, j);
            for (size_t j = guard + len; j < region; j++)
                CHECKF(buf[j] == 0x5a, "push of %zu bytes at %zu wrote byte "
                                       "%zu after the range",
                       len, guard, j);

            /* pull exactly the sub-range */
            sum = pull(mr, guard, len, 30000);
            CHECKF(sum == trs_checksum(buf + guard, len),
                   "pull of %zu bytes at offset %zu: wrong checksum", len,
                   guard);
        }
        rdmx_mem_deregister(mr);
        if (kind == 0)
            free(buf);
    }
    th_log("small: 1 B, 4 KiB, 1 MiB pulled and pushed (registered and "
           "allocated memory, unaligned sub-range, guards intact)");
}

/* ------------------------------------------------------------------------ */

typedef struct {
    atomic_int calls;
    rdmx_status_t status;
    uint64_t sum;
    size_t len;
    char msg[300];
} res_t;

static void res_cb(const rdmx_call_result_t *r, void *arg)
{
    res_t *res = arg;

    atomic_fetch_add(&res->calls, 1);
    res->status = r->status;
    res->len = r->length;
    snprintf(res->msg, sizeof(res->msg), "%s", r->message);
    if (r->status == RDMX_OK && r->length == 8)
        memcpy(&res->sum, r->data, 8);
}

/* rdmx_call_nb of @method on the channel with @p's fields and res_cb
 * reporting into @res. */
static rdmx_status_t call_res(const char *method, const void *data, size_t len,
                              const rdmx_call_params_t *p, res_t *res)
{
    rdmx_call_params_t cp = *p;

    cp.field_mask |= RDMX_CALL_PARAM_FIELD_CB;
    cp.cb = res_cb;
    cp.arg = res;
    return rdmx_call_nb(ch, method, data, len, &cp, NULL);
}

static void wait_res(res_t *res, int n, int timeout_ms)
{
    double deadline = th_now_ms() + (double)timeout_ms * TH_SLOW;

    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += atomic_load(&res[i].calls) == 0;
        if (left == 0)
            break;
        CHECKF(th_now_ms() < deadline, "%d of %d bulk calls pending", left, n);
        rdmx_worker_wait(wk, 5);
    }
    for (int i = 0; i < n; i++)
        CHECKF(atomic_load(&res[i].calls) == 1, "callback ran %d times",
               atomic_load(&res[i].calls));
}

static void test_concurrent(void)
{
    enum { N = 8 };
    const size_t len = TH_MIB + 17;
    rdmx_mr_t *mr[N];
    unsigned char *buf[N];
    rdmx_rpc_bulk_t b[N];
    rdmx_call_params_t p[N];
    res_t res[N];

    memset(res, 0, sizeof(res));
    for (int i = 0; i < N; i++) {
        buf[i] = th_alloc(len);
        th_fill(buf[i], len, th_seed(3, (uint64_t)i, 0));
        CHECK_OK(rdmx_mem_register(ctx, buf[i], len, RDMX_ACCESS_READ, &mr[i]));
        b[i] = bulk_of(mr[i], 0, len - (size_t)i, RDMX_ACCESS_READ);
        p[i] = bulk_params(&b[i], 1, 30000 * TH_SLOW);
        CHECK_ST(call_res("bulk_pull", NULL, 0, &p[i], &res[i]),
                 RDMX_INPROGRESS);
    }
    wait_res(res, N, 30000);
    for (int i = 0; i < N; i++) {
        CHECKF(res[i].status == RDMX_OK, "concurrent pull %d: %s (%s)", i,
               rdmx_status_name(res[i].status), res[i].msg);
        CHECKF(res[i].sum == trs_checksum(buf[i], len - (size_t)i),
               "concurrent pull %d: checksum of another region", i);
        rdmx_mem_deregister(mr[i]);
        free(buf[i]);
    }
    th_log("concurrent: %d pulls of different regions in flight, each "
           "answered with its own checksum",
           N);
}

/* ------------------------------------------------------------------------ */

static void test_refusals(void)
{
    const size_t len = 64 * TH_KIB;
    unsigned char *buf = th_alloc(len);
    rdmx_mr_t *mr;
    rdmx_rpc_bulk_t b[9];
    rdmx_call_params_t p;
    res_t res;
    uint64_t seed = th_seed(4, 0, 0), keep = th_seed(4, 1, 0);
    size_t rlen;
    rdmx_channel_stats_t s0, s1;

    CHECK_OK(rdmx_mem_register(ctx, buf, len, RDMX_ACCESS_ALL, &mr));
    th_fill(buf, len, keep);

    /* READ-only descriptor to bulk_push: the server's put is refused. */
    memset(&res, 0, sizeof(res));
    b[0] = bulk_of(mr, 0, len, RDMX_ACCESS_READ);
    p = bulk_params(b, 1, 30000 * TH_SLOW);
    CHECK_ST(call_res("bulk_push", &seed, sizeof(seed), &p, &res),
             RDMX_INPROGRESS);
    wait_res(&res, 1, 30000);
    CHECKF(res.status == RDMX_ERR_DENIED,
           "bulk_push through a READ-only descriptor: %s (%s)",
           rdmx_status_name(res.status), res.msg);
    CHECK(res.msg[0] != '\0');
    th_progress_for(wk, 20);
    CHECK_PATTERN(buf, len, keep, 0); /* nothing written */
    th_log("refusal: READ-only descriptor to bulk_push -> %s (\"%s\"), "
           "memory untouched",
           rdmx_status_name(res.status), res.msg);

    /* WRITE-only descriptor to bulk_pull: the get is refused. */
    memset(&res, 0, sizeof(res));
    b[0] = bulk_of(mr, 0, len, RDMX_ACCESS_WRITE);
    CHECK_ST(call_res("bulk_pull", NULL, 0, &p, &res), RDMX_INPROGRESS);
    wait_res(&res, 1, 30000);
    CHECKF(res.status == RDMX_ERR_DENIED,
           "bulk_pull through a WRITE-only descriptor: %s (%s)",
           rdmx_status_name(res.status), res.msg);

    /* Too many descriptors, NULL region, NULL table: refused locally. */
    s0 = (rdmx_channel_stats_t){0};
    rdmx_channel_stats(ch, &s0);
    memset(&res, 0, sizeof(res));
    for (int i = 0; i < 9; i++)
        b[i] = bulk_of(mr, 0, len, RDMX_ACCESS_READ);
    p = bulk_params(b, 9, 30000);
    CHECK_ST(call_res("bulk_pull", NULL, 0, &p, &res), RDMX_ERR_INVALID);
    CHECK_ST(rdmx_call(ch, "bulk_pull", NULL, 0, NULL, 0, &p, &rlen),
             RDMX_ERR_INVALID);
    p = bulk_params(b, 1, 30000);
    b[0].mr = NULL;
    CHECK_ST(call_res("bulk_pull", NULL, 0, &p, &res), RDMX_ERR_INVALID);
    p = bulk_params(NULL, 1, 30000);
    CHECK_ST(call_res("bulk_pull", NULL, 0, &p, &res), RDMX_ERR_INVALID);
    /* A range outside the region cannot be described. */
    b[0] = bulk_of(mr, 1, len, RDMX_ACCESS_READ);
    p = bulk_params(b, 1, 30000);
    CHECK_ST(call_res("bulk_pull", NULL, 0, &p, &res), RDMX_ERR_OUT_OF_RANGE);
    th_progress_for(wk, 20);
    CHECK(atomic_load(&res.calls) == 0);
    rdmx_channel_stats(ch, &s1);
    CHECK_EQ_U64(s1.calls, s0.calls);

    /* Two descriptors reach the handler (it wants one). */
    memset(&res, 0, sizeof(res));
    b[0] = bulk_of(mr, 0, len, RDMX_ACCESS_READ);
    b[1] = bulk_of(mr, 0, len / 2, RDMX_ACCESS_READ);
    p = bulk_params(b, 2, 30000 * TH_SLOW);
    CHECK_ST(call_res("bulk_pull", NULL, 0, &p, &res), RDMX_INPROGRESS);
    wait_res(&res, 1, 30000);
    CHECKF(res.status == RDMX_ERR_INVALID && strstr(res.msg, "got 2") != NULL,
           "2 descriptors: %s (%s)", rdmx_status_name(res.status), res.msg);

    /* All 8 allowed descriptors travel too. */
    memset(&res, 0, sizeof(res));
    for (int i = 0; i < 8; i++)
        b[i] = bulk_of(mr, (uint64_t)i, len - (uint64_t)i, RDMX_ACCESS_READ);
    p = bulk_params(b, 8, 30000 * TH_SLOW);
    CHECK_ST(call_res("bulk_pull", NULL, 0, &p, &res), RDMX_INPROGRESS);
    wait_res(&res, 1, 30000);
    CHECKF(res.status == RDMX_ERR_INVALID && strstr(res.msg, "got 8") != NULL,
           "8 descriptors: %s (%s)", rdmx_status_name(res.status), res.msg);

    /* The channel still works with good descriptors. */
    CHECK(pull(mr, 0, len, 30000) == trs_checksum(buf, len));
    CHECK_PATTERN(buf, len, keep, 0);
    rdmx_mem_deregister(mr);
    free(buf);
    th_log("refusals: WRITE-only to bulk_pull -> DENIED; 9 descriptors, NULL "
           "region/table -> INVALID locally; out-of-range -> OUT_OF_RANGE; 2 "
           "and 8 descriptors reach the handler");
}

/* ------------------------------------------------------------------------ */

/* A lender that lets go of its memory before the server reads it: the
 * region is freed right after the call is made. In even rounds a "spin"
 * call of 20 ms goes first on the same connection, so the server looks
 * only after the free and finds the descriptor's memory gone (over shared
 * memory: a segment UCX allocated, destroyed with the client's last
 * attachment; on UCX before 1.19 its unpack used to kill the server:
 * src/core/ucx/rkey_guard.c): that pull must fail, with a message. In odd
 * rounds the free races the server: a pull that got there first must
 * carry the lent bytes' checksum (over shared memory the server's own
 * attachment keeps them; on UCX 1.22 a racing get used to reach the
 * lender's worker after the free and fault there, until such gets became
 * the server's own copy: docs/CORE.md, "Mapped one-sided access"). Over
 * ofi:shm a read is the server's process_vm_readv of the client's
 * address, which no registration guards (docs/SECURITY.md, "The
 * libfabric backend"): memory freed but still mapped reads as what it
 * holds then, so there only the server's survival is judged. The server
 * serves on: the next pull is exact, and it exits 0 at the end. */
static void test_lender_gone(void)
{
    enum { ROUNDS = 16 };
    const size_t len = TH_MIB;
    unsigned refused = 0, raced = 0, behind = 0;
    char first[400] = "";
    int unguarded = strcmp(th_transport_env(), "ofi:shm") == 0;

    for (int i = 0; i < ROUNDS; i++) {
        int late = i % 2 == 0; /* the server looks after the free */
        uint32_t ms = 20;
        double t0 = th_now_ms();
        rdmx_mr_t *mr;
        rdmx_rpc_bulk_t b;
        rdmx_call_params_t p, sp;
        res_t res, spun;
        uint64_t sum;

        memset(&res, 0, sizeof(res));
        memset(&spun, 0, sizeof(spun));
        memset(&sp, 0, sizeof(sp));
        CHECK_OK(rdmx_mem_alloc(ctx, len, RDMX_ACCESS_READ, &mr));
        th_fill(rdmx_mr_addr(mr), len, th_seed(5, (uint64_t)i, 0));
        sum = trs_checksum(rdmx_mr_addr(mr), len);
        if (late)
            CHECK_ST(call_res("spin", &ms, sizeof(ms), &sp, &spun),
                     RDMX_INPROGRESS);
        b = bulk_of(mr, 0, len, RDMX_ACCESS_READ);
        p = bulk_params(&b, 1, 30000 * TH_SLOW);
        CHECK_ST(call_res("bulk_pull", NULL, 0, &p, &res), RDMX_INPROGRESS);
        rdmx_mem_deregister(mr); /* before the server looked */
        /* ... unless this thread lost its CPU for the whole spin (a
         * loaded machine, sanitizers): then the round proves nothing */
        if (late && th_now_ms() - t0 >= ms)
            late = 0;
        behind += late;
        if (i % 2 == 0) {
            wait_res(&spun, 1, 30000);
            CHECK_OK(spun.status);
        }
        wait_res(&res, 1, 30000);
        if (res.status == RDMX_OK) {
            CHECKF(!late || unguarded,
                   "round %d: a pull of freed memory succeeded", i);
            CHECKF(res.sum == sum || unguarded,
                   "round %d: pulled, but not what was lent", i);
            raced++;
            continue;
        }
        CHECKF(res.msg[0] != '\0', "round %d: %s without a message", i,
               rdmx_status_name(res.status));
        if (refused++ == 0)
            snprintf(first, sizeof(first), "%s (%s)",
                     rdmx_status_name(res.status), res.msg);
    }
    /* The server is alive and exact. */
    {
        unsigned char *buf = th_alloc(len);
        rdmx_mr_t *mr;
        th_fill(buf, len, th_seed(5, 99, 0));
        CHECK_OK(rdmx_mem_register(ctx, buf, len, RDMX_ACCESS_READ, &mr));
        CHECK(pull(mr, 0, len, 30000) == trs_checksum(buf, len));
        rdmx_mem_deregister(mr);
        free(buf);
    }
    CHECKF(behind > 0, "no pull of the %d was behind the server's spin",
           ROUNDS / 2);
    th_log("lender gone: %u of %d pulls of freed memory refused (first: "
           "%s), %u got there first, %u of %d surely behind the spin; the "
           "server serves on",
           refused, ROUNDS, first, raced, behind, ROUNDS / 2);
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    th_proc_t srv;
    rdmx_channel_params_t cp;
    double t;

    if (argc > 1 && strcmp(argv[1], "rpc-server") == 0)
        return trs_main(argc - 2, argv + 2);

    th_init("rpc_bulk", 230);
    th_spawn_self(&srv, "rpc-server", 30000, "--workers", "2", NULL);
    ctx = th_context();
    wk = th_worker(ctx, 0);
    memset(&cp, 0, sizeof(cp));
    /* The server's handlers checksum or fill 1 GiB on their worker thread
     * (seconds under ASan) and answer nothing meanwhile: heartbeats must
     * not declare it dead. */
    cp.field_mask = RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                    RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT;
    cp.heartbeat_ms = 1000;
    cp.heartbeat_timeout_ms = 120000 * TH_SLOW;
    CHECK_OK(rdmx_channel_create(wk, srv.addr, &cp, &ch));
    CHECK_OK(rdmx_channel_wait_ready(ch, 10000 * TH_SLOW));

#define STEP(call)                                                             \
    do {                                                                       \
        t = th_now_ms();                                                       \
        call;                                                                  \
        th_log("  (%s: %.0f ms)", #call, th_now_ms() - t);                     \
    } while (0)

    STEP(test_small());
    STEP(test_concurrent());
    STEP(test_refusals());
    STEP(test_lender_gone());
    STEP(test_auto_client(srv.addr));
    STEP(test_1gib());

    rdmx_channel_destroy(ch);
    rdmx_worker_destroy(wk);
    rdmx_context_destroy(ctx);
    th_kill(&srv, SIGTERM);
    th_check_exit_ok("rpc server", th_wait_exit(&srv, 20000));
    th_log("ok");
    return 0;
}
