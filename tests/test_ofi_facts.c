/*
 * ofi_facts: the libfabric backend's selection and the provider facts it
 * relies on (docs/FABRIC.md), in one process:
 * - "ofi[:PROVIDER]" specs parse to their medium; bad ones are refused;
 *   an unknown provider fails the context with words that list the
 *   providers this host does offer.
 * - For ofi:tcp and ofi:shm: the context says which backend and provider
 *   run (rdmx_context_backend), a worker has a wake-up fd, two workers
 *   connect (the first message pairs the backend endpoints, FI_SOURCE
 *   names the sender), small messages arrive in order, and a worker that
 *   arms and sleeps still gets a message.
 * - ofi:shm: a receiver's FIN leaves with its receive. The receiver
 *   sends small messages toward the sender, which does not progress,
 *   until 3,000 of them could not leave at once; then a large message of
 *   the sender reaches it. Once its receive has completed, the sender
 *   alone, the receiver never progressing again, must see its send done.
 * - Frame headers: the decoder refuses every malformed shape.
 * - A worker over ofi:tcp takes under 48 MiB of resident memory (rxm's
 *   receive pools at the backend's default).
 * - A UCX client connecting to an ofi server, and an ofi client
 *   connecting to a UCX server, are refused in words that name the
 *   mismatch (UCX never parses an ofi address).
 */
#include "harness.h"

#include "core/ofi/frame.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_parse(void)
{
    static const struct {
        const char *name;
        rdmx_transport_t t;
    } good[] = {{"ofi", RDMX_TRANSPORT_AUTO},
                {"ofi:tcp", RDMX_TRANSPORT_TCP},
                {"ofi:shm", RDMX_TRANSPORT_SHM},
                {"ofi:efa", RDMX_TRANSPORT_RDMA},
                {"ofi:verbs", RDMX_TRANSPORT_RDMA},
                {"ofi:tcp;ofi_rxm", RDMX_TRANSPORT_TCP},
                {"ofi:udp;ofi_rxd", RDMX_TRANSPORT_AUTO}};
    const char *bad[] = {"ofi:", "ofix", "of", "ofi;tcp", " ofi"};

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        rdmx_transport_t t = (rdmx_transport_t)99;
        CHECK_OK(rdmx_transport_parse(good[i].name, &t));
        CHECKF(t == good[i].t, "%s: medium %d", good[i].name, (int)t);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rdmx_transport_t t;
        CHECKF(rdmx_transport_parse(bad[i], &t) == RDMX_ERR_INVALID,
               "rdmx_transport_parse(\"%s\") accepted", bad[i]);
    }
}

static void test_unknown_provider(void)
{
    rdmx_status_t st;
    rdmx_context_t *ctx = th_context_on("ofi:nosuch", &st);

    CHECK(ctx == NULL);
    CHECK(st == RDMX_ERR_UNSUPPORTED);
    CHECKF(strstr(rdmx_error_detail(), "nosuch") != NULL &&
               strstr(rdmx_error_detail(), "tcp;ofi_rxm") != NULL,
           "detail does not name the spec and the providers: %s",
           rdmx_error_detail());
    th_log("ofi:nosuch: %s", rdmx_error_detail());
}

static void test_frames(void)
{
    unsigned char b[RDMX_OFI_FRAME_SIZE + RDMX_OFI_FRAME_HDR_MAX + 8];
    rdmx_ofi_frame_t f;

    rdmx__ofi_frame_pack(b, RDMX_OFI_FRAME_EAGER, 17, 16, 5, 9);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE + 16 + 8, &f) == 0);
    CHECK(f.kind == RDMX_OFI_FRAME_EAGER && f.id == 17 && f.hlen == 16 &&
          f.src == 5 && f.dst == 9 && f.len == 8 &&
          f.hdr == b + RDMX_OFI_FRAME_SIZE &&
          f.data == b + RDMX_OFI_FRAME_SIZE + 16);
    /* The header must fit. */
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE + 15, &f) != 0);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE - 1, &f) != 0);
    CHECK(rdmx__ofi_frame_parse(NULL, 100, &f) != 0);
    rdmx__ofi_frame_pack(b, 0, 17, 0, 5, 9); /* unknown kind */
    CHECK(rdmx__ofi_frame_parse(b, sizeof(b), &f) != 0);
    rdmx__ofi_frame_pack(b, RDMX_OFI_FRAME_EAGER, RDMX_OFI_FRAME_ID_MAX, 0, 5,
                         9);
    CHECK(rdmx__ofi_frame_parse(b, sizeof(b), &f) != 0);
    rdmx__ofi_frame_pack(b, RDMX_OFI_FRAME_EAGER, 1, RDMX_OFI_FRAME_HDR_MAX + 1,
                         5, 9);
    CHECK(rdmx__ofi_frame_parse(b, sizeof(b), &f) != 0);
    rdmx__ofi_frame_pack(b, RDMX_OFI_FRAME_EAGER, 1, 0, 0, 9); /* src 0 */
    CHECK(rdmx__ofi_frame_parse(b, sizeof(b), &f) != 0);
    rdmx__ofi_frame_pack(b, RDMX_OFI_FRAME_EAGER, 1, 0, 5, 0);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE, &f) == 0 && f.len == 0);
    b[13] = 1; /* reserved */
    CHECK(rdmx__ofi_frame_parse(b, sizeof(b), &f) != 0);

    /* RTS: exactly 40 bytes after the core header, id never 0. */
    rdmx__ofi_frame_pack(b, RDMX_OFI_FRAME_RTS, 2, 8, 5, 9);
    rdmx__ofi_rts_pack(b + RDMX_OFI_FRAME_SIZE + 8, 1u << 20, 77, 0x1000,
                       0xabcd);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE + 8 + 40, &f) == 0);
    CHECK(f.length == 1u << 20 && f.rndv_id == 77 && f.raddr == 0x1000 &&
          f.key == 0xabcd && f.hlen == 8);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE + 8 + 39, &f) != 0);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE + 8 + 41, &f) != 0);
    rdmx__ofi_rts_pack(b + RDMX_OFI_FRAME_SIZE + 8, 1, 0, 0, 0);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE + 8 + 40, &f) != 0);
    /* FIN: no header, id 0, 16 bytes, a status <= 0. */
    rdmx__ofi_frame_pack(b, RDMX_OFI_FRAME_FIN, 0, 0, 5, 9);
    rdmx__ofi_fin_pack(b + RDMX_OFI_FRAME_SIZE, 77, RDMX_ERR_CANCELED);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE + 16, &f) == 0);
    CHECK(f.rndv_id == 77 && f.status == RDMX_ERR_CANCELED);
    rdmx__ofi_fin_pack(b + RDMX_OFI_FRAME_SIZE, 77, 1);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE + 16, &f) != 0);
    rdmx__ofi_frame_pack(b, RDMX_OFI_FRAME_FIN, 3, 0, 5, 9);
    rdmx__ofi_fin_pack(b + RDMX_OFI_FRAME_SIZE, 77, 0);
    CHECK(rdmx__ofi_frame_parse(b, RDMX_OFI_FRAME_SIZE + 16, &f) != 0);
}

static rdmx_ep_t *accepted;
static int accepts;

static void on_accept(rdmx_ep_t *ep, void *arg)
{
    (void)arg;
    accepted = ep;
    accepts++;
}

static rdmx_status_t connect_st;

static int ops_done;

static void on_op(rdmx_status_t st, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    CHECK_OK(st);
    ops_done++;
}

#define WAITING 3000

static void on_count(rdmx_status_t st, size_t len, void *arg)
{
    (void)len;
    CHECK_OK(st);
    (*(int *)arg)++;
}

/* Worker @p b (endpoint @p b_ep toward @p a) receives a large message from
 * @p a (endpoint @p a_ep) after small messages of its own to @p a could
 * not leave at once (docs/FABRIC.md, "Large messages"). */
static void test_fin_leaves(const char *spec, rdmx_worker_t *a, rdmx_ep_t *a_ep,
                            rdmx_worker_t *b, rdmx_ep_t *b_ep)
{
    size_t big = 1u << 20;
    unsigned char *src = malloc(big), *dst = calloc(1, big);
    int filled = 0, sent = 0, recvd = 0, waiting = 0;
    unsigned n = 0;
    rdmx_op_params_t fop = {
        .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = on_count, .arg = &filled};
    rdmx_op_params_t sop = fop, rop = fop;
    rdmx_status_t st;
    double t0;

    CHECK(src != NULL && dst != NULL);
    sop.arg = &sent;
    rop.arg = &recvd;
    for (size_t i = 0; i < big; i++)
        src[i] = (unsigned char)(i * 13 + 5);
    /* b's small messages until 3,000 of them could not leave at once (a
     * does not progress, its receive queue fills). */
    while (waiting < WAITING && n < 100000) {
        st = rdmx_send_nb(b_ep, &n, sizeof(n), &fop);
        CHECKF(st == RDMX_OK || st == RDMX_INPROGRESS, "send %u: %s", n,
               rdmx_error_detail());
        if (st == RDMX_OK)
            filled++;
        else
            waiting++;
        n++;
    }
    CHECKF(waiting == WAITING,
           "%u small messages toward a worker that does not "
           "progress all left at once",
           n);
    th_log("%s: %u small messages, %d of them left at once", spec, n, filled);
    /* a's large message: its RTS reaches b. */
    CHECK(rdmx_recv_nb(b_ep, dst, big, &rop) == RDMX_INPROGRESS);
    CHECK(rdmx_send_nb(a_ep, src, big, &sop) == RDMX_INPROGRESS);
    /* Both, until b's receive completes, and not one pass of b after. */
    t0 = th_now_ms();
    while (recvd == 0) {
        rdmx_worker_progress(a);
        rdmx_worker_progress(b);
        CHECK(th_now_ms() - t0 < 5000.0 * TH_SLOW);
    }
    CHECK(memcmp(src, dst, big) == 0);
    /* a alone: the FIN is on its way, a's send completes. */
    t0 = th_now_ms();
    while (sent == 0 && th_now_ms() - t0 < 2000.0 * TH_SLOW)
        rdmx_worker_progress(a);
    CHECKF(sent == 1, "the sender's large message never completed: the "
                      "receiver's FIN did not leave with its receive");
    /* What b queued reaches a (unexpected there): both sides drain. */
    t0 = th_now_ms();
    while (filled < (int)n) {
        rdmx_worker_progress(a);
        rdmx_worker_progress(b);
        CHECK(th_now_ms() - t0 < 5000.0 * TH_SLOW);
    }
    free(src);
    free(dst);
}

/* @p cw connected to @p l of @p sw: the endpoint; the outcome in
 * connect_st. */
static rdmx_ep_t *connect_to(rdmx_worker_t *cw, rdmx_worker_t *sw,
                             rdmx_listener_t *l)
{
    accepts = 0;
    accepted = NULL;
    return th_connect_pair(cw, sw, l, &connect_st);
}

static void test_provider(const char *spec, rdmx_transport_t medium,
                          const char *prov)
{
    rdmx_status_t st;
    rdmx_context_t *ctx = th_context_on(spec, &st);
    rdmx_worker_t *sw, *cw;
    rdmx_listener_t *l;
    rdmx_ep_t *ep;
    rdmx_op_params_t op;
    char out[8][64], in[8][64];
    int fd;

    CHECKF(st == RDMX_OK, "%s: %s", spec, rdmx_error_detail());
    th_log("%s: backend \"%s\"", spec, rdmx_context_backend(ctx));
    CHECK(strncmp(rdmx_context_backend(ctx), "ofi ", 4) == 0);
    CHECK(strstr(rdmx_context_backend(ctx), prov) != NULL);
    CHECK(rdmx_context_transport(ctx) == medium);
    sw = th_worker(ctx, 0);
    cw = th_worker(ctx, 0);
    CHECK_OK(rdmx_worker_efd(sw, &fd));
    CHECK(fd >= 0);
    l = th_listen(sw, on_accept, NULL);
    ep = connect_to(cw, sw, l);
    CHECKF(connect_st == RDMX_OK, "%s: connect: %s (%s)", spec,
           rdmx_status_name(connect_st), rdmx_error_detail());
    th_progress_pair(sw, cw, &accepts, 1, "accept");
    CHECK(rdmx_ep_transport(ep) == medium);
    CHECK(rdmx_ep_transport(accepted) == medium);

    /* Messages both ways, in order. */
    memset(&op, 0, sizeof(op));
    op.field_mask = RDMX_OP_PARAM_FIELD_CB;
    op.cb = on_op;
    ops_done = 0;
    for (int i = 0; i < 8; i++) {
        snprintf(out[i], sizeof(out[i]), "message %d of %s", i, spec);
        memset(in[i], 0, sizeof(in[i]));
        CHECK(rdmx_recv_nb(accepted, in[i], sizeof(in[i]), &op) ==
              RDMX_INPROGRESS);
    }
    for (int i = 0; i < 8; i++) {
        st = rdmx_send_nb(ep, out[i], strlen(out[i]) + 1, &op);
        CHECK(st == RDMX_OK || st == RDMX_INPROGRESS);
        if (st == RDMX_OK)
            ops_done++;
    }
    th_progress_pair(sw, cw, &ops_done, 16, "messages");
    for (int i = 0; i < 8; i++)
        CHECKF(strcmp(in[i], out[i]) == 0, "message %d: '%s'", i, in[i]);

    /* Large messages (pulled by the receiver): one with its receive
     * posted first, one that arrives before its receive. */
    {
        size_t big = (9u << 20) + 3;
        unsigned char *src = malloc(big), *dst = malloc(big);
        CHECK(src != NULL && dst != NULL);
        for (size_t i = 0; i < big; i++)
            src[i] = (unsigned char)(i * 7 + 1);
        ops_done = 0;
        memset(dst, 0, big);
        CHECK(rdmx_recv_nb(accepted, dst, big, &op) == RDMX_INPROGRESS);
        st = rdmx_send_nb(ep, src, big, &op);
        CHECK(st == RDMX_INPROGRESS || st == RDMX_OK);
        ops_done += st == RDMX_OK;
        th_progress_pair(sw, cw, &ops_done, 2, "large message");
        CHECK(memcmp(src, dst, big) == 0);
        ops_done = 0;
        memset(dst, 0, big);
        st = rdmx_send_nb(ep, src, big, &op);
        CHECK(st == RDMX_INPROGRESS || st == RDMX_OK);
        ops_done += st == RDMX_OK;
        for (int i = 0; i < 100; i++) {
            rdmx_worker_progress(cw);
            rdmx_worker_progress(sw);
        }
        CHECK(rdmx_recv_nb(accepted, dst, big, &op) == RDMX_INPROGRESS);
        th_progress_pair(sw, cw, &ops_done, 2, "unexpected large message");
        CHECK(memcmp(src, dst, big) == 0);
        free(src);
        free(dst);
    }

    /* A worker that arms and sleeps (rdmx_worker_wait) still gets a
     * message. */
    ops_done = 0;
    CHECK(rdmx_recv_nb(accepted, in[0], sizeof(in[0]), &op) == RDMX_INPROGRESS);
    {
        double t0 = th_now_ms();
        while (rdmx_worker_arm(sw) != RDMX_OK) {
            rdmx_worker_progress(sw);
            CHECK(th_now_ms() - t0 < 5000.0 * TH_SLOW);
        }
        st = rdmx_send_nb(ep, "wake", 5, &op);
        CHECK(st == RDMX_OK || st == RDMX_INPROGRESS);
        if (st == RDMX_OK)
            ops_done++;
        t0 = th_now_ms();
        while (ops_done < 2) {
            rdmx_worker_progress(cw);
            rdmx_worker_wait(sw, 100);
            CHECK(th_now_ms() - t0 < 5000.0 * TH_SLOW);
        }
        CHECK(strcmp(in[0], "wake") == 0);
    }

    if (medium == RDMX_TRANSPORT_SHM) /* (tcp took 100,000 at once) */
        test_fin_leaves(spec, cw, ep, sw, accepted);
    th_close_pair(ctx, sw, cw, l, ep, accepted);
}

/* A UCX client's worker address reaches an ofi server: refused at once,
 * in words that say both sides need the same backend. */
static void test_mismatch(void)
{
    rdmx_status_t st;
    rdmx_context_t *octx = th_context_on("ofi:tcp", &st);
    rdmx_context_t *uctx;
    rdmx_worker_t *sw, *cw;
    rdmx_listener_t *l;
    rdmx_ep_t *ep;

    CHECK_OK(st);
    uctx = th_context_on("tcp", &st);
    CHECK_OK(st);
    CHECK(strcmp(rdmx_context_backend(uctx), "ucx") == 0);
    sw = th_worker(octx, 0);
    cw = th_worker(uctx, 0);
    l = th_listen(sw, on_accept, NULL);
    ep = connect_to(cw, sw, l);
    CHECKF(connect_st != RDMX_OK &&
               strstr(rdmx_error_detail(), "libfabric") != NULL,
           "ucx client to ofi server: %s (%s)", rdmx_status_name(connect_st),
           rdmx_error_detail());
    th_log("ucx client -> ofi server: %s", rdmx_error_detail());
    rdmx_ep_close(ep);
    rdmx_listener_destroy(l);

    /* And the other way: an ofi client's address never reaches UCX's
     * parser (which aborts on it). */
    l = th_listen(cw, on_accept, NULL);
    ep = connect_to(sw, cw, l);
    CHECKF(connect_st != RDMX_OK &&
               strstr(rdmx_error_detail(), "libfabric") != NULL,
           "ofi client to ucx server: %s (%s)", rdmx_status_name(connect_st),
           rdmx_error_detail());
    th_log("ofi client -> ucx server: %s", rdmx_error_detail());
    rdmx_ep_close(ep);
    rdmx_listener_destroy(l);
    rdmx_worker_destroy(cw);
    rdmx_worker_destroy(sw);
    rdmx_context_destroy(uctx);
    rdmx_context_destroy(octx);
}

/* What a worker over ofi:tcp costs in resident memory: rxm fills its
 * bounce-buffer pools when the endpoint is enabled, 16.3 MiB per pool of
 * 1024; at its own default of 4096 receive buffers a worker took 5 pools
 * (83 MiB), with the backend's 1024 it takes 2 (docs/FABRIC.md). Run
 * first, before freed pools of other contexts could be reused. */
static void test_worker_memory(void)
{
    rdmx_status_t st;
    rdmx_context_t *ctx = th_context_on("ofi:tcp", &st);
    rdmx_worker_t *w[2];
    long before, after, per;

    CHECKF(st == RDMX_OK, "ofi:tcp: %s", rdmx_error_detail());
    before = th_rss_kib(getpid());
    for (int i = 0; i < 2; i++)
        w[i] = th_worker(ctx, 0);
    after = th_rss_kib(getpid());
    per = (after - before) / 2;
    th_log("ofi:tcp: 2 workers took %ld KiB resident (%ld KiB each)",
           after - before, per);
    CHECKF(per < 48 * 1024,
           "a worker over ofi:tcp took %ld KiB resident (rxm's receive "
           "pools: is FI_OFI_RXM_MSG_RX_SIZE defaulted?)",
           per);
    for (int i = 0; i < 2; i++)
        rdmx_worker_destroy(w[i]);
    rdmx_context_destroy(ctx);
}

int main(void)
{
    th_init("ofi_facts", 60);
    test_worker_memory();
    test_parse();
    test_frames();
    test_unknown_provider();
    test_provider("ofi:tcp", RDMX_TRANSPORT_TCP, "tcp;ofi_rxm");
    test_provider("ofi:shm", RDMX_TRANSPORT_SHM, "shm");
    test_mismatch();
    th_log("ok");
    return 0;
}
