/*
 * descriptors: memory descriptors are checked, and refusals are exact.
 *
 * - rdmx_mr_pack refuses ranges outside the region (including offset +
 *   length overflowing uint64) with RDMX_ERR_OUT_OF_RANGE and rights the
 *   region lacks with RDMX_ERR_DENIED; the size query and a too-small buffer
 *   (RDMX_ERR_TOO_BIG with the needed size) work.
 * - On a descriptor of a sub-range of a server region, put, put-with-notify,
 *   get and the atomics outside the range (offset past the end, length past
 *   the end, offset + length overflowing, unaligned atomics) fail at once
 *   with RDMX_ERR_OUT_OF_RANGE (RDMX_ERR_INVALID accepted for unaligned
 *   atomics), through both the non-blocking call (whose callback never
 *   runs) and the blocking wrapper; operations the descriptor's rights do
 *   not allow fail with RDMX_ERR_DENIED. The server's memory, a larger
 *   region around the described range, is unchanged afterwards and no
 *   notification arrived, so nothing was issued; the worker's rma_refused
 *   counter grew by the number of refusals. Offsets are relative to the
 *   described range (a valid put lands at range start + offset).
 * - rdmx_rmem_unpack refuses, with RDMX_ERR_BAD_DESCRIPTOR and without
 *   crashing or reading past the blob (each blob is in a heap buffer of its
 *   exact size), every truncation of a valid descriptor, every single-bit
 *   flip of it, random blobs, valid prefixes with random tails and zero
 *   length; bad_descriptors grew by exactly that many, and the endpoint
 *   still works afterwards.
 * - A valid descriptor of the other backend (a region of a UCX context on
 *   an ofi endpoint, or of an ofi context on a UCX one) is refused with
 *   RDMX_ERR_BAD_DESCRIPTOR in words that name both backends, and counted
 *   in bad_descriptors (skipped when this librdmx has no libfabric).
 */
#define _GNU_SOURCE
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REGION  (64 * TH_KIB)
#define SUB_OFF 1024
#define SUB_LEN 2048

enum { OP_PUT, OP_PUTN, OP_GET, OP_FADD, OP_CSWAP };
static const char *op_names[] = {"put", "put_notify", "get", "fadd", "cswap"};

static rdmx_worker_t *worker;
static rdmx_ep_t *ep;
static uint64_t refused_min, refused_max, n_bad;
static uint8_t local[4096];

static rdmx_status_t issue(int op, int blocking, rdmx_rmem_t *rmem,
                           uint64_t off, size_t len, th_req_t *req)
{
    static uint64_t old;
    const rdmx_op_params_t p = {
        .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = th_req_cb, .arg = req};

    switch (op) {
    case OP_PUT:
        return blocking ? rdmx_put(ep, rmem, off, local, len, NULL)
                        : rdmx_put_nb(ep, rmem, off, local, len, &p);
    case OP_PUTN:
        return blocking ? rdmx_put_notify(ep, rmem, off, local, len, 77, NULL)
                        : rdmx_put_notify_nb(ep, rmem, off, local, len, 77, &p);
    case OP_GET:
        return blocking ? rdmx_get(ep, rmem, off, local, len, NULL)
                        : rdmx_get_nb(ep, rmem, off, local, len, &p);
    case OP_FADD:
        return blocking ? rdmx_atomic_fadd(ep, rmem, off, 1, &old, NULL)
                        : rdmx_atomic_fadd_nb(ep, rmem, off, 1, &old, &p);
    default:
        return blocking ? rdmx_atomic_cswap(ep, rmem, off, 0, 1, &old, NULL)
                        : rdmx_atomic_cswap_nb(ep, rmem, off, 0, 1, &old, &p);
    }
}

/* The operation must be refused with @p want (or @p alt, if not OK) through
 * both forms, and never reach the callback. */
static void expect_refused(int op, rdmx_rmem_t *rmem, uint64_t off, size_t len,
                           rdmx_status_t want, rdmx_status_t alt, int line)
{
    int blocking;

    for (blocking = 0; blocking < 2; blocking++) {
        th_req_t req;
        rdmx_status_t st;
        char detail[256];

        th_req_init(&req);
        st = issue(op, blocking, rmem, off, len, &req);
        snprintf(detail, sizeof(detail), "%s", rdmx_error_detail());
        if (st != want && (alt == RDMX_OK || st != alt))
            th_fail(__FILE__, line,
                    "%s%s(offset %llu, length %zu) returned %s, expected %s; "
                    "detail: %s",
                    op_names[op], blocking ? "" : "_nb",
                    (unsigned long long)off, len, rdmx_status_name(st),
                    rdmx_status_name(want), detail);
        if (st == RDMX_ERR_INVALID)
            refused_max++;
        else {
            refused_min++;
            refused_max++;
        }
        if (!blocking) {
            th_progress_for(worker, 1);
            CHECKF(atomic_load(&req.cb_calls) == 0,
                   "%s_nb returned %s but its callback ran", op_names[op],
                   rdmx_status_name(st));
        }
    }
}

#define REFUSED(op, rmem, off, len, want)                                      \
    expect_refused(op, rmem, off, len, want, RDMX_OK, __LINE__)
#define REFUSED2(op, rmem, off, len, want, alt)                                \
    expect_refused(op, rmem, off, len, want, alt, __LINE__)

/* ------------------------------------------------------------------------ */

static void local_pack(rdmx_context_t *ctx)
{
    rdmx_mr_t *mr, *ro;
    uint8_t buf[TS_MAX_BLOB], *mem;
    size_t need = 0, got = 0;
    rdmx_status_t st;

    CHECK_OK(
        rdmx_mem_alloc(ctx, 4096, RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &mr));
    CHECK_OK(rdmx_mr_pack(mr, 0, 4096, RDMX_ACCESS_READ, NULL, 0, &need));
    CHECK(need > 0 && need <= sizeof(buf));
    got = 0;
    CHECK_ST(rdmx_mr_pack(mr, 0, 4096, RDMX_ACCESS_READ, buf, need - 1, &got),
             RDMX_ERR_TOO_BIG);
    CHECK_EQ_U64(got, need);
    CHECK_OK(rdmx_mr_pack(mr, 0, 4096, RDMX_ACCESS_READ, buf, need, &got));
    CHECK_EQ_U64(got, need);
    CHECK_OK(
        rdmx_mr_pack(mr, 4095, 1, RDMX_ACCESS_WRITE, buf, sizeof(buf), &got));

    CHECK_ST(
        rdmx_mr_pack(mr, 0, 4097, RDMX_ACCESS_READ, buf, sizeof(buf), &got),
        RDMX_ERR_OUT_OF_RANGE);
    CHECK_ST(
        rdmx_mr_pack(mr, 4096, 1, RDMX_ACCESS_READ, buf, sizeof(buf), &got),
        RDMX_ERR_OUT_OF_RANGE);
    CHECK_ST(
        rdmx_mr_pack(mr, 4097, 0, RDMX_ACCESS_READ, buf, sizeof(buf), &got),
        RDMX_ERR_OUT_OF_RANGE);
    CHECK_ST(
        rdmx_mr_pack(mr, 1, 4096, RDMX_ACCESS_READ, buf, sizeof(buf), &got),
        RDMX_ERR_OUT_OF_RANGE);
    CHECK_ST(rdmx_mr_pack(mr, UINT64_MAX, 2, RDMX_ACCESS_READ, buf, sizeof(buf),
                          &got),
             RDMX_ERR_OUT_OF_RANGE);
    CHECK_ST(rdmx_mr_pack(mr, 2, UINT64_MAX, RDMX_ACCESS_READ, buf, sizeof(buf),
                          &got),
             RDMX_ERR_OUT_OF_RANGE);
    CHECK_ST(rdmx_mr_pack(mr, 0, UINT64_MAX, RDMX_ACCESS_READ, buf, sizeof(buf),
                          &got),
             RDMX_ERR_OUT_OF_RANGE);

    CHECK_ST(
        rdmx_mr_pack(mr, 0, 4096, RDMX_ACCESS_ATOMIC, buf, sizeof(buf), &got),
        RDMX_ERR_DENIED);
    CHECK_ST(rdmx_mr_pack(mr, 0, 4096, RDMX_ACCESS_ALL, buf, sizeof(buf), &got),
             RDMX_ERR_DENIED);
    st = rdmx_mr_pack(mr, 0, 4096, 1u << 7, buf, sizeof(buf), &got);
    CHECKF(st == RDMX_ERR_INVALID || st == RDMX_ERR_DENIED,
           "pack with an unknown access bit returned %s", rdmx_status_name(st));

    /* A registered (not allocated) read-only region. */
    mem = th_alloc(8192);
    CHECK_OK(rdmx_mem_register(ctx, mem, 8192, RDMX_ACCESS_READ, &ro));
    CHECK_ST(
        rdmx_mr_pack(ro, 0, 8192, RDMX_ACCESS_WRITE, buf, sizeof(buf), &got),
        RDMX_ERR_DENIED);
    CHECK_ST(
        rdmx_mr_pack(ro, 0, 8193, RDMX_ACCESS_READ, buf, sizeof(buf), &got),
        RDMX_ERR_OUT_OF_RANGE);
    CHECK_OK(
        rdmx_mr_pack(ro, 100, 8092, RDMX_ACCESS_READ, buf, sizeof(buf), &got));
    rdmx_mem_deregister(ro);
    free(mem);
    rdmx_mem_deregister(mr);
}

/* Fetch a descriptor the server packs of its region @p r. */
static rdmx_rmem_t *server_pack(const ts_region_t *r, uint64_t off,
                                uint64_t len, unsigned access, uint8_t *blob,
                                size_t *blob_len)
{
    ts_reply_t rep;
    rdmx_rmem_t *rmem = NULL;

    ts_call(ep, TS_PACK, r->region, off, len, access, &rep);
    CHECKF(rep.status == RDMX_OK, "server pack failed: %s",
           rdmx_status_name((rdmx_status_t)rep.status));
    CHECK_OK(rdmx_rmem_unpack(ep, rep.blob, rep.blob_len, &rmem));
    CHECK_EQ_U64(rdmx_rmem_length(rmem), len);
    CHECK_EQ_U64(rdmx_rmem_access(rmem), access);
    if (blob) {
        memcpy(blob, rep.blob, rep.blob_len);
        *blob_len = rep.blob_len;
    }
    return rmem;
}

static void remote_refusals(const ts_region_t *r, uint64_t seed)
{
    rdmx_rmem_t *sub, *ro, *wo, *na;
    ts_reply_t rep;
    const uint64_t L = SUB_LEN;
    uint64_t notifies_before;
    int op;

    ts_call(ep, TS_STATS, 0, 0, 0, 0, &rep);
    notifies_before = rep.v[2];
    sub = server_pack(r, SUB_OFF, SUB_LEN, RDMX_ACCESS_ALL, NULL, NULL);
    ro = server_pack(r, 0, 4096, RDMX_ACCESS_READ, NULL, NULL);
    wo = server_pack(r, 0, 4096, RDMX_ACCESS_WRITE, NULL, NULL);
    na = server_pack(r, 0, 4096, RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, NULL,
                     NULL);

    /* Server-side pack refusals. */
    ts_call(ep, TS_PACK, r->region, 0, REGION + 1, RDMX_ACCESS_READ, &rep);
    CHECK_ST((rdmx_status_t)rep.status, RDMX_ERR_OUT_OF_RANGE);
    ts_call(ep, TS_PACK, r->region, UINT64_MAX - 10, 20, RDMX_ACCESS_READ,
            &rep);
    CHECK_ST((rdmx_status_t)rep.status, RDMX_ERR_OUT_OF_RANGE);

    for (op = OP_PUT; op <= OP_GET; op++) {
        REFUSED(op, sub, L + 1, 1, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, L, 1, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, L - 1, 2, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, 0, L + 1, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, 1, L, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, UINT64_MAX, 1, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, UINT64_MAX - 7, 16, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, 16, SIZE_MAX - 7, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, UINT64_MAX - (SUB_OFF - 1), SUB_OFF + 8,
                RDMX_ERR_OUT_OF_RANGE);
    }
    for (op = OP_FADD; op <= OP_CSWAP; op++) {
        REFUSED(op, sub, L, 8, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, L + 8, 8, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, UINT64_MAX - 7, 8, RDMX_ERR_OUT_OF_RANGE);
        REFUSED(op, sub, UINT64_MAX & ~(uint64_t)7, 8, RDMX_ERR_OUT_OF_RANGE);
        REFUSED2(op, sub, 4, 8, RDMX_ERR_INVALID, RDMX_ERR_OUT_OF_RANGE);
        REFUSED2(op, sub, 1, 8, RDMX_ERR_INVALID, RDMX_ERR_OUT_OF_RANGE);
        REFUSED2(op, sub, L - 4, 8, RDMX_ERR_INVALID, RDMX_ERR_OUT_OF_RANGE);
    }

    /* Rights. */
    REFUSED(OP_PUT, ro, 0, 16, RDMX_ERR_DENIED);
    REFUSED(OP_PUTN, ro, 0, 16, RDMX_ERR_DENIED);
    REFUSED(OP_FADD, ro, 0, 8, RDMX_ERR_DENIED);
    REFUSED(OP_GET, wo, 0, 16, RDMX_ERR_DENIED);
    REFUSED(OP_CSWAP, wo, 0, 8, RDMX_ERR_DENIED);
    REFUSED(OP_FADD, na, 0, 8, RDMX_ERR_DENIED);
    REFUSED(OP_CSWAP, na, 0, 8, RDMX_ERR_DENIED);

    /* Nothing reached the server. */
    CHECK_OK(rdmx_ep_flush(ep, NULL));
    TS_VERIFY_REMOTE(ep, r, 0, REGION, seed);
    ts_call(ep, TS_STATS, 0, 0, 0, 0, &rep);
    CHECKF(rep.v[2] == notifies_before, "%llu notifications reached the server",
           (unsigned long long)(rep.v[2] - notifies_before));

    /* What the rights do allow works, relative to the described range. */
    CHECK_OK(rdmx_get(ep, ro, 8, local, 16, NULL));
    CHECK_PATTERN(local, 16, seed, 8);
    th_fill(local, 8, seed ^ 1);
    CHECK_OK(rdmx_put(ep, sub, L - 8, local, 8, NULL));
    CHECK_OK(rdmx_ep_flush(ep, NULL));
    TS_VERIFY_REMOTE(ep, r, SUB_OFF + L - 8, 8, seed ^ 1);
    TS_VERIFY_REMOTE_POS(ep, r, 0, SUB_OFF + L - 8, seed, 0);
    TS_VERIFY_REMOTE_POS(ep, r, SUB_OFF + L, REGION - SUB_OFF - L, seed,
                         SUB_OFF + L);
    /* A notification names the offset from the start of the region, not
     * from the start of the descriptor. */
    th_fill(local, 32, seed ^ 3);
    CHECK_OK(rdmx_put_notify(ep, sub, 64, local, 32, seed ^ 3, NULL));
    ts_call(ep, TS_NOTIFY_WAIT, seed ^ 3, 10000, 0, 0, &rep);
    CHECK(rep.status == RDMX_OK);
    CHECKF(rep.v[0] == SUB_OFF + 64 && rep.v[1] == 32 && rep.v[2] == 1 &&
               rep.v[3] == r->region,
           "notify on a sub-range descriptor: offset %llu length %llu ok %llu "
           "region %llu, expected %u 32 1 %llu",
           (unsigned long long)rep.v[0], (unsigned long long)rep.v[1],
           (unsigned long long)rep.v[2], (unsigned long long)rep.v[3],
           SUB_OFF + 64, (unsigned long long)r->region);
    ts_fill(ep, r, 0, REGION, seed);

    rdmx_rmem_destroy(sub);
    rdmx_rmem_destroy(ro);
    rdmx_rmem_destroy(wo);
    rdmx_rmem_destroy(na);
}

/* ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x1234567;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Unpack a copy of @p blob in a heap buffer of exactly @p len bytes; it
 * must be refused. Returns 1 if it was (wrongly) accepted. */
static int unpack_bad(const uint8_t *blob, size_t len, const char *what,
                      size_t which)
{
    uint8_t *copy = th_alloc(len);
    rdmx_rmem_t *rmem = NULL;
    rdmx_status_t st;

    memcpy(copy, blob, len);
    st = rdmx_rmem_unpack(ep, copy, len, &rmem);
    free(copy);
    if (st == RDMX_OK) {
        th_log("ACCEPTED a bad descriptor: %s %zu (%zu bytes)", what, which,
               len);
        rdmx_rmem_destroy(rmem);
        return 1;
    }
    CHECKF(st == RDMX_ERR_BAD_DESCRIPTOR,
           "unpack of %s %zu returned %s, expected RDMX_ERR_BAD_DESCRIPTOR",
           what, which, rdmx_status_name(st));
    n_bad++;
    return 0;
}

static void garbage(const ts_region_t *r, uint64_t seed)
{
    uint8_t blob[TS_MAX_BLOB], work[TS_MAX_BLOB * 2];
    size_t n = 0, i, accepted = 0;
    rdmx_rmem_t *rmem;
    rdmx_worker_stats_t s0, s1;
    rdmx_status_t st;

    rmem = server_pack(r, SUB_OFF, SUB_LEN, RDMX_ACCESS_ALL, blob, &n);
    rdmx_rmem_destroy(rmem);
    th_log("descriptor of %zu bytes", n);

    rdmx_worker_stats(worker, &s0);
    n_bad = 0;

    for (i = 0; i < n; i++)
        accepted += unpack_bad(blob, i, "truncation to", i);
    for (i = 0; i < n * 8; i++) {
        memcpy(work, blob, n);
        work[i / 8] ^= (uint8_t)(1u << (i % 8));
        accepted += unpack_bad(work, n, "bit flip", i);
    }
    for (i = 0; i < 2000; i++) {
        size_t len = 1 + rnd() % (2 * n), j;

        for (j = 0; j < len; j++)
            work[j] = (uint8_t)rnd();
        accepted += unpack_bad(work, len, "random blob", i);
    }
    for (i = 1; i < n; i++) {
        size_t j;

        memcpy(work, blob, i);
        for (j = i; j < n; j++)
            work[j] = (uint8_t)rnd();
        if (memcmp(work, blob, n) != 0)
            accepted += unpack_bad(work, n, "valid prefix of", i);
    }
    memset(work, 0, n);
    accepted += unpack_bad(work, n, "all zero", 0);
    memset(work, 0xff, n);
    accepted += unpack_bad(work, n, "all ones", 0);
    accepted += unpack_bad(blob, 0, "zero length", 0);
    rmem = NULL;
    st = rdmx_rmem_unpack(ep, NULL, 0, &rmem);
    CHECKF(st == RDMX_ERR_BAD_DESCRIPTOR || st == RDMX_ERR_INVALID,
           "unpack(NULL, 0) returned %s", rdmx_status_name(st));
    if (st == RDMX_ERR_BAD_DESCRIPTOR)
        n_bad++;

    CHECKF(accepted == 0, "%zu corrupt descriptors were accepted", accepted);
    rdmx_worker_stats(worker, &s1);
    CHECKF(s1.bad_descriptors - s0.bad_descriptors == n_bad,
           "bad_descriptors grew by %llu, %llu descriptors were refused",
           (unsigned long long)(s1.bad_descriptors - s0.bad_descriptors),
           (unsigned long long)n_bad);
    th_log("%llu corrupt descriptors refused", (unsigned long long)n_bad);

    /* The endpoint still works with the valid descriptor. */
    CHECK_OK(rdmx_rmem_unpack(ep, blob, n, &rmem));
    th_fill(local, 64, seed ^ 2);
    CHECK_OK(rdmx_put(ep, rmem, 0, local, 64, NULL));
    CHECK_OK(rdmx_ep_flush(ep, NULL));
    TS_VERIFY_REMOTE(ep, r, SUB_OFF, 64, seed ^ 2);
    CHECK_OK(rdmx_get(ep, rmem, 64, local, 64, NULL));
    CHECK_PATTERN(local, 64, seed, SUB_OFF + 64);
    rdmx_rmem_destroy(rmem);
}

/* A region of a context of the other backend, described and unpacked on
 * @p ep: refused, named, counted. */
static void cross_backend(rdmx_context_t *ctx)
{
    int ofi = strncmp(rdmx_context_backend(ctx), "ofi", 3) == 0;
    rdmx_context_params_t p;
    rdmx_context_t *other = NULL;
    rdmx_worker_stats_t s0, s1;
    rdmx_rmem_t *rmem = NULL;
    uint8_t blob[TS_MAX_BLOB];
    rdmx_status_t st;
    rdmx_mr_t *mr;
    size_t n = 0;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME |
                   RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
    p.transport_name = ofi ? "tcp" : "ofi:tcp";
    p.net_devices = "lo";
    st = rdmx_context_create(&p, &other);
    if (!ofi && st == RDMX_ERR_UNSUPPORTED) {
        th_log("cross-backend descriptor: skipped (%s)", rdmx_error_detail());
        return;
    }
    CHECKF(st == RDMX_OK, "context %s: %s", p.transport_name,
           rdmx_error_detail());
    CHECK_OK(rdmx_mem_alloc(other, 4096, RDMX_ACCESS_ALL, &mr));
    CHECK_OK(
        rdmx_mr_pack(mr, 0, 4096, RDMX_ACCESS_ALL, blob, sizeof(blob), &n));
    rdmx_worker_stats(worker, &s0);
    st = rdmx_rmem_unpack(ep, blob, n, &rmem);
    rdmx_worker_stats(worker, &s1);
    CHECKF(
        st == RDMX_ERR_BAD_DESCRIPTOR &&
            strstr(rdmx_error_detail(), ofi ? "backend ucx" : "backend ofi") !=
                NULL &&
            strstr(rdmx_error_detail(), ofi ? "uses ofi" : "uses ucx") != NULL,
        "descriptor of the other backend: %s (%s)", rdmx_status_name(st),
        rdmx_error_detail());
    CHECK_EQ_U64(s1.bad_descriptors - s0.bad_descriptors, 1);
    th_log("cross-backend descriptor refused: %s", rdmx_error_detail());
    rdmx_mem_deregister(mr);
    rdmx_context_destroy(other);
}

int main(int argc, char **argv)
{
    th_proc_t server;
    rdmx_context_t *ctx;
    ts_region_t ra, rm;
    rdmx_worker_stats_t s0, s1;
    ts_reply_t rep;
    uint64_t seed_a = th_seed(1, 2, 3), seed_m = th_seed(4, 5, 6);

    if (argc > 1 && strcmp(argv[1], "--server") == 0)
        return ts_server_main(argc, argv);

    th_init("descriptors", 110);
    th_spawn_self(&server, "--server", 30000, NULL);
    ctx = th_context();
    worker = th_worker(ctx, 0);

    local_pack(ctx);
    th_log("local pack checks ok");

    ep = th_connect(worker, &server, NULL);
    ts_alloc(ep, &ra, REGION, RDMX_ACCESS_ALL, TS_KIND_ALLOC, seed_a);
    ts_alloc(ep, &rm, REGION, RDMX_ACCESS_ALL, TS_KIND_REGISTER, seed_m);

    rdmx_worker_stats(worker, &s0);
    refused_min = refused_max = 0;
    remote_refusals(&ra, seed_a);
    remote_refusals(&rm, seed_m);
    rdmx_worker_stats(worker, &s1);
    CHECKF(s1.rma_refused - s0.rma_refused >= refused_min &&
               s1.rma_refused - s0.rma_refused <= refused_max,
           "rma_refused grew by %llu, expected %llu (..%llu)",
           (unsigned long long)(s1.rma_refused - s0.rma_refused),
           (unsigned long long)refused_min, (unsigned long long)refused_max);
    th_log("%llu refused operations ok",
           (unsigned long long)(s1.rma_refused - s0.rma_refused));

    garbage(&ra, seed_a);
    garbage(&rm, seed_m);
    cross_backend(ctx);

    ts_call(ep, TS_STATS, 0, 0, 0, 0, &rep);
    {
        rdmx_worker_stats_t ss;

        memcpy(&ss, rep.blob, sizeof(ss));
        CHECK_EQ_U64(ss.proto_errors, 0);
    }
    ts_free(ep, &ra);
    ts_free(ep, &rm);
    ts_quit(ep);
    th_check_exit_ok("server", th_wait_exit(&server, 20000));
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    th_log("ok");
    return 0;
}
