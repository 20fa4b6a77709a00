/*
 * ofi_mr: the libfabric backend's memory registration and its one-sided
 * operations, in one process (docs/FABRIC.md, "Memory registration"):
 * for ofi:tcp (with RDMX_RMA=transport) and ofi:shm, two workers connect,
 * one registers a region, the other unpacks its descriptor and runs put,
 * get (one of 9 MiB: three pieces), fetch-add, compare-and-swap, flush and
 * put-with-notify, and reads back what landed.
 *
 * The local providers ask for no mr_mode bit (tcp) or FI_MR_VIRT_ADDR
 * only (shm): RDMX_OFI_MR_MODE_EXTRA makes the backend honour the others
 * as a provider asking for them would need (FI_MR_LOCAL descs, provider
 * keys read with fi_mr_key, memory allocated before registration,
 * per-worker registrations with a key table, raw keys), so every such
 * path runs here; tcp runs remote addresses as offsets, shm as virtual
 * addresses (FI_MR_VIRT_ADDR). Each combination is a fresh context.
 * put-with-notify runs as fi_writedata joined with the NOTIFY message by
 * its token, and (RDMX_OFI_NO_CQ_DATA) as write, then the NOTIFY.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REGION (10u << 20)
#define BIG    ((9u << 20) + 5)

static rdmx_ep_t *accepted;
static int accepts, ops_done, notified;
static rdmx_status_t last_st;
static rdmx_notify_t last_notify;

static void on_accept(rdmx_ep_t *ep, void *arg)
{
    (void)arg;
    accepted = ep;
    accepts++;
}

static void on_op(rdmx_status_t st, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    last_st = st;
    ops_done++;
}

static void on_notify(rdmx_ep_t *ep, const rdmx_notify_t *n, void *arg)
{
    (void)ep;
    (void)arg;
    last_notify = *n;
    notified++;
}

/* Start an operation with on_op and wait for it; its status. */
#define RUN(cw, sw, call, what)                                                \
    do {                                                                       \
        rdmx_status_t st_;                                                     \
        ops_done = 0;                                                          \
        st_ = (call);                                                          \
        if (st_ == RDMX_INPROGRESS)                                            \
            th_progress_pair(cw, sw, &ops_done, 1, what);                      \
        else                                                                   \
            last_st = st_;                                                     \
        CHECKF(last_st == RDMX_OK, "%s: %s (%s)", what,                        \
               rdmx_status_name(last_st), rdmx_error_detail());                \
    } while (0)

static void run(const char *spec, const char *extra)
{
    rdmx_context_t *ctx;
    rdmx_listener_t *l;
    rdmx_ep_params_t ep_p;
    rdmx_worker_t *sw, *cw;
    rdmx_op_params_t op;
    rdmx_mr_t *mr, *lmr;
    rdmx_rmem_t *rm;
    rdmx_ep_t *ep;
    unsigned char desc[8192], *region, *src, *dst;
    size_t dlen = 0;
    uint64_t old = 0;
    rdmx_status_t st;

    if (extra != NULL)
        setenv("RDMX_OFI_MR_MODE_EXTRA", extra, 1);
    else
        unsetenv("RDMX_OFI_MR_MODE_EXTRA");
    ctx = th_context_on(spec, &st);
    CHECKF(st == RDMX_OK, "%s: %s", spec, rdmx_error_detail());
    /* (workers first: with FI_MR_ENDPOINT a region's key table names the
     * workers that exist when it is registered) */
    sw = th_worker(ctx, 0);
    cw = th_worker(ctx, 0);

    memset(&ep_p, 0, sizeof(ep_p));
    ep_p.field_mask = RDMX_EP_PARAM_FIELD_NOTIFY_CB;
    ep_p.notify_cb = on_notify;
    l = th_listen(sw, on_accept, &ep_p);
    accepts = 0;
    accepted = NULL;
    ep = th_connect_pair(cw, sw, l, &st);
    CHECKF(st == RDMX_OK, "connect: %s (%s)", rdmx_status_name(st),
           rdmx_error_detail());
    th_progress_pair(sw, cw, &accepts, 1, "accept");

    CHECK_OK(rdmx_mem_alloc(ctx, REGION, RDMX_ACCESS_ALL, &mr));
    region = rdmx_mr_addr(mr);
    CHECK_OK(rdmx_mr_pack(mr, 0, REGION, RDMX_ACCESS_ALL, desc, sizeof(desc),
                          &dlen));
    CHECKF(rdmx_rmem_unpack(ep, desc, dlen, &rm) == RDMX_OK, "%s %s: %s", spec,
           extra ? extra : "-", rdmx_error_detail());
    src = malloc(BIG);
    dst = malloc(BIG);
    CHECK(src != NULL && dst != NULL);
    for (size_t i = 0; i < BIG; i++)
        src[i] = (unsigned char)(i * 13 + 7);
    /* the local side registered too (its desc is used with FI_MR_LOCAL) */
    CHECK_OK(rdmx_mem_register(ctx, dst, BIG, 0, &lmr));

    memset(&op, 0, sizeof(op));
    op.field_mask = RDMX_OP_PARAM_FIELD_CB;
    op.cb = on_op;
    /* put (unregistered source), then get it back into a region */
    RUN(cw, sw, rdmx_put_nb(ep, rm, 100, src, 4096, &op), "put");
    RUN(cw, sw, rdmx_ep_flush_nb(ep, &op), "flush");
    CHECK(memcmp(region + 100, src, 4096) == 0);
    memset(dst, 0, 4096);
    op.field_mask = RDMX_OP_PARAM_FIELD_CB | RDMX_OP_PARAM_FIELD_MR;
    op.mr = lmr;
    RUN(cw, sw, rdmx_get_nb(ep, rm, 100, dst, 4096, &op), "get");
    CHECK(memcmp(dst, src, 4096) == 0);
    op.field_mask = RDMX_OP_PARAM_FIELD_CB;
    /* 9 MiB each way: pieces of at most 4 MiB */
    RUN(cw, sw, rdmx_put_nb(ep, rm, 8, src, BIG, &op), "big put");
    CHECK(memcmp(region + 8, src, BIG) == 0);
    memset(dst, 0, BIG);
    RUN(cw, sw, rdmx_get_nb(ep, rm, 8, dst, BIG, &op), "big get");
    CHECK(memcmp(dst, src, BIG) == 0);
    /* atomics on the word at 8 MiB + 8 */
    memset(region + (8u << 20) + 8, 0, 8);
    RUN(cw, sw, rdmx_atomic_fadd_nb(ep, rm, (8u << 20) + 8, 5, &old, &op),
        "fadd");
    CHECK(old == 0);
    RUN(cw, sw, rdmx_atomic_fadd_nb(ep, rm, (8u << 20) + 8, 7, &old, &op),
        "fadd");
    CHECK(old == 5);
    RUN(cw, sw, rdmx_atomic_cswap_nb(ep, rm, (8u << 20) + 8, 12, 99, &old, &op),
        "cswap");
    CHECK(old == 12);
    RUN(cw, sw, rdmx_atomic_cswap_nb(ep, rm, (8u << 20) + 8, 12, 5, &old, &op),
        "cswap (no swap)");
    CHECK(old == 99);
    CHECK(__atomic_load_n((uint64_t *)(void *)(region + (8u << 20) + 8),
                          __ATOMIC_SEQ_CST) == 99);
    /* put-with-notify: the data is there when the notification comes */
    notified = 0;
    memset(region + 4096, 0, 64);
    RUN(cw, sw, rdmx_put_notify_nb(ep, rm, 4096, src + 1, 64, 4242, &op),
        "put_notify");
    th_progress_pair(cw, sw, &notified, 1, "notify");
    CHECK(last_notify.imm == 4242 && last_notify.offset == 4096 &&
          last_notify.length == 64 && last_notify.mr == mr);
    CHECK(memcmp(region + 4096, src + 1, 64) == 0);
    /* outside the region: refused before anything is sent */
    CHECK(rdmx_put_nb(ep, rm, REGION - 4, src, 8, &op) ==
          RDMX_ERR_OUT_OF_RANGE);
    th_log("%s with extra mr_mode bits %s: put, get, atomics, flush, "
           "put_notify ok",
           spec, extra ? extra : "(none)");

    rdmx_rmem_destroy(rm);
    rdmx_mem_deregister(lmr);
    rdmx_mem_deregister(mr);
    free(src);
    free(dst);
    th_close_pair(ctx, sw, cw, l, ep, accepted);
}

int main(void)
{
    static const char *extras[] = {
        NULL,
        "local",
        "prov_key,allocated",
        "endpoint",
        "raw",
        "local,allocated,prov_key,endpoint",
        "local,prov_key,raw",
    };

    th_init("ofi_mr", 60);
    setenv("RDMX_RMA", "transport", 1); /* (ofi:tcp carries by default) */
    for (size_t i = 0; i < sizeof(extras) / sizeof(extras[0]); i++) {
        run("ofi:tcp", extras[i]);
        run("ofi:shm", extras[i]);
    }
    /* put-with-notify as a provider without remote CQ data does it: the
     * NOTIFY message once the write completed */
    setenv("RDMX_OFI_NO_CQ_DATA", "1", 1);
    run("ofi:tcp", NULL);
    run("ofi:shm", "local");
    unsetenv("RDMX_OFI_NO_CQ_DATA");
    th_log("ok");
    return 0;
}
