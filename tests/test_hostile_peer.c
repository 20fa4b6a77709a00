/*
 * hostile_peer: a connected peer that forges descriptors and bypasses the
 * rdmx library's own checks cannot read, write or crash anything outside
 * what the server exposed (docs/SECURITY.md).
 *
 * The server (tests/test_server.c, a separate process) holds a 12 KiB
 * region filled with a known pattern — canary, exposed, canary, 4 KiB each
 * — and a 4 KiB "secret" region, and exposes only the middle 4 KiB, read
 * only. The test runs with one-sided access carried by rdmx (the default on
 * tcp; RDMX_RMA=rdmx on shared memory, whose default is the kernel's
 * boundary: docs/SECURITY.md). Proven:
 *  - the honest descriptor reads the exposed range; a put through it fails
 *    in the library (RDMX_ERR_DENIED).
 *  - forged descriptors (rights widened to all, length doubled, length
 *    1 GiB, start moved back onto the canary, region id of the secret, the
 *    MAC altered), each with its FNV checksum recomputed so that unpack
 *    takes it: every put, get and atomic through them fails with
 *    RDMX_ERR_BAD_DESCRIPTOR from the server ("did not issue"); a
 *    descriptor with a bad checksum is refused by unpack.
 *  - a peer that skips the library's checks and sends rdmx's access
 *    messages itself with the genuine grant (valid MAC): a get past the
 *    grant, an offset that wraps 64 bits, a 2^62-byte length get
 *    RDMX_ERR_OUT_OF_RANGE; a put and an atomic on the read-only grant get
 *    RDMX_ERR_DENIED; unknown flag bits and an unknown opcode get
 *    RDMX_ERR_PROTO.
 *  - tcp: a peer with its own UCX context (RMA enabled), bootstrapped by
 *    hand, unpacks the descriptor's UCX key and puts and gets straight
 *    through UCX at the exposed range and around it: the server's UCX has
 *    no software put/get handlers installed (rdmx asked for no RMA), so
 *    nothing is written, no get is answered (given up after 1 s), and
 *    the server lives. The same peer first sends messages without UCX's
 *    reply endpoint, named by a guessed token, by the token of its
 *    own handshake (never bound) and by a header too short for a token:
 *    each is dropped as a protocol error.
 *  - the test's own buffers (canary-filled) are untouched by every refused
 *    get; the server's 12 KiB and its secret still hold their patterns
 *    byte for byte; the server's counters grew by exactly the refusals
 *    (bad_descriptors 9, rma_refused 15, proto_errors 2, 5 over tcp); the
 *    server is alive and exits cleanly.
 */
#define _GNU_SOURCE
#include "harness.h"

#include "core/internal.h" /* a peer that bypasses the library's checks */
#include "util/endian.h"
#include "util/hash.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define K4 4096u

static rdmx_worker_t *worker;
static rdmx_ep_t *ep;
static uint8_t local[2 * K4];
static const uint64_t seed_local = 0x10ca1;

/* Offsets in a descriptor (src/core/mem.c). */
#define D_ACCESS 6
#define D_REGION 8
#define D_ADDR   16
#define D_LENGTH 24
#define D_OFFSET 32
#define D_RKEY   40
#define D_FIXED  48

static void refresh_fnv(uint8_t *d, size_t len)
{
    rdmx_put_le64(d + len - 8, rdmx_sum64(d, len - 8));
}

/* Run one non-blocking operation to completion; its status. */
static rdmx_status_t run(int kind, rdmx_rmem_t *rm, uint64_t off, size_t len)
{
    th_req_t req;
    rdmx_op_params_t op = {
        .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = th_req_cb, .arg = &req};
    static uint64_t old;
    rdmx_status_t st;

    th_req_init(&req);
    switch (kind) {
    case 0:
        st = rdmx_get_nb(ep, rm, off, local, len, &op);
        break;
    case 1:
        st = rdmx_put_nb(ep, rm, off, local, len, &op);
        break;
    case 2:
        st = rdmx_put_notify_nb(ep, rm, off, local, len, 5, &op);
        break;
    default:
        st = rdmx_atomic_fadd_nb(ep, rm, off, 1, &old, &op);
        break;
    }
    if (th_req_start(&req, st, len) != RDMX_INPROGRESS)
        return req.status;
    th_req_wait(worker, &req, 1, 10000);
    return req.status;
}

static const char *kind_name[] = {"get", "put", "put_notify", "fadd"};

/* Forge: edit @field of the honest descriptor, recompute its checksum,
 * unpack (the library cannot tell), then every operation must be refused
 * by the server. Returns the number of refusals. */
static unsigned forged(const uint8_t *desc, size_t len, const char *what,
                       void (*edit)(uint8_t *d, size_t len), uint64_t off,
                       size_t n)
{
    uint8_t *d = th_alloc(len);
    rdmx_rmem_t *rm;
    unsigned refused = 0;

    memcpy(d, desc, len);
    edit(d, len);
    refresh_fnv(d, len);
    CHECKF(rdmx_rmem_unpack(ep, d, len, &rm) == RDMX_OK,
           "%s: unpack refused a well-formed forgery (%s)", what,
           rdmx_error_detail());
    for (int k = 0; k < 4; k++) {
        rdmx_status_t st;
        uint64_t o = k == 3 ? off & ~7ull : off;
        size_t l = k == 3 ? 8 : n;

        /* (the forged rights may not even allow it in the library) */
        if (o > rdmx_rmem_length(rm) || l > rdmx_rmem_length(rm) - o)
            continue;
        if (!(rdmx_rmem_access(rm) &
              (k == 0 ? RDMX_ACCESS_READ
                      : k == 3 ? RDMX_ACCESS_ATOMIC : RDMX_ACCESS_WRITE)))
            continue;
        th_fill(local, sizeof(local), seed_local);
        st = run(k, rm, o, l);
        CHECKF(st == RDMX_ERR_BAD_DESCRIPTOR,
               "%s: %s of %zu bytes at %llu returned %s (%s), expected "
               "RDMX_ERR_BAD_DESCRIPTOR",
               what, kind_name[k], l, (unsigned long long)o,
               rdmx_status_name(st), rdmx_error_detail());
        CHECKF(th_check(local, sizeof(local), seed_local) < 0,
               "%s: a refused %s changed the caller's buffer", what,
               kind_name[k]);
        refused++;
    }
    CHECKF(refused > 0, "%s: nothing was tried", what);
    rdmx_rmem_destroy(rm);
    free(d);
    th_log("forged (%s): %u operations refused by the server", what,
           refused);
    return refused;
}

static void edit_rights(uint8_t *d, size_t len)
{
    (void)len;
    rdmx_put_le16(d + D_ACCESS, RDMX_ACCESS_ALL);
}

static void edit_len2(uint8_t *d, size_t len)
{
    (void)len;
    rdmx_put_le64(d + D_LENGTH, 2 * K4);
}

static void edit_len1g(uint8_t *d, size_t len)
{
    (void)len;
    rdmx_put_le64(d + D_LENGTH, 1ull << 30);
}

static void edit_back(uint8_t *d, size_t len)
{
    (void)len;
    rdmx_put_le64(d + D_ADDR, rdmx_get_le64(d + D_ADDR) - K4);
    rdmx_put_le64(d + D_OFFSET, rdmx_get_le64(d + D_OFFSET) - K4);
}

static uint64_t secret_region;
static void edit_region(uint8_t *d, size_t len)
{
    (void)len;
    rdmx_put_le64(d + D_REGION, secret_region);
}

static void edit_mac(uint8_t *d, size_t len)
{
    d[len - 8 - 16] ^= 0x01; /* the MAC's first byte */
}

/* Bypass the library's checks: send an access message with the genuine
 * grant of @rm but any operation, offset and length. */
static rdmx_status_t raw_access(rdmx_rmem_t *rm, unsigned opcode,
                                unsigned flags, uint64_t off, size_t len)
{
    th_req_t req;
    rdmx_status_t st;
    int put = opcode == RDMX_ACC_PUT;
    size_t room = put ? (len <= sizeof(local) ? len : 0) : 0;

    th_req_init(&req);
    rdmx__lock(worker);
    /* (a get's length is what the reply must carry: the library would
     * refuse a reply longer than its buffer) */
    st = rdmx__access_issue(ep, rm, opcode, flags, off, local,
                            put ? room : len, NULL, 1, 0, NULL, th_req_cb,
                            &req);
    rdmx__unlock(worker);
    if (th_req_start(&req, st, 0) != RDMX_INPROGRESS)
        return req.status;
    th_req_wait(worker, &req, 1, 10000);
    return req.status;
}


/* --- a peer on raw UCX --------------------------------------------------- */

/* The server worker's UCX address, from a hand-made bootstrap (HELLO with
 * @addr; docs/PROTOCOL.md), and the token of its WELCOME in *@token_p.
 * The socket stays open in *@fd_p. */
static size_t raw_bootstrap(const th_proc_t *srv, const void *addr, size_t alen,
                            uint8_t *out, size_t cap, int *fd_p,
                            uint64_t *token_p)
{
    const char *colon = strrchr(srv->addr, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET};
    struct timeval tv = {.tv_sec = 10};
    uint8_t *f = th_alloc(8 + 32 + alen), h[8];
    size_t got = 0, blen;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    memset(f, 0, 8 + 32);
    rdmx_put_le32(f, (uint32_t)(32 + alen));
    f[4] = 1; /* HELLO */
    rdmx_put_le32(f + 8, 0x58444d52u);
    rdmx_put_le16(f + 12, RDMX_WIRE_VERSION);
    rdmx_put_le64(f + 16, 0xbadc0ffeeull);
    memcpy(f + 40, addr, alen);
    CHECK(send(fd, f, 40 + alen, MSG_NOSIGNAL) == (ssize_t)(40 + alen));
    free(f);
    while (got < 8) {
        ssize_t n = recv(fd, h + got, 8 - got, 0);
        CHECK(n > 0);
        got += (size_t)n;
    }
    blen = rdmx_get_le32(h);
    CHECKF(h[4] == 2 && blen > 24 && blen - 24 <= cap,
           "raw bootstrap: frame type %u of %zu bytes", h[4], blen);
    {
        uint8_t *b = th_alloc(blen);
        got = 0;
        while (got < blen) {
            ssize_t n = recv(fd, b + got, blen - got, 0);
            CHECK(n > 0);
            got += (size_t)n;
        }
        memcpy(out, b + 24, blen - 24);
        *token_p = rdmx_get_le64(b + 16);
        free(b);
    }
    *fd_p = fd;
    return blen - 24;
}

static int raw_done;
static void raw_cb(void *req, ucs_status_t st, void *arg)
{
    (void)req;
    (void)st;
    (void)arg;
    raw_done++;
}

static void raw_err(void *arg, ucp_ep_h uep, ucs_status_t st)
{
    (void)arg;
    (void)uep;
    (void)st;
}

/* Progress @uw for @ms; how many of @reqs completed (NULL: at once). */
static int raw_settle(ucp_worker_h uw, ucs_status_ptr_t *reqs, int n, int ms)
{
    double end = th_now_ms() + ms;
    int done;

    do {
        ucp_worker_progress(uw);
        done = 0;
        for (int i = 0; i < n; i++)
            done += !UCS_PTR_IS_PTR(reqs[i]) ||
                    ucp_request_check_status(reqs[i]) != UCS_INPROGRESS;
    } while (done < n && th_now_ms() < end);
    return done;
}

/* Messages without UCX's reply endpoint name their connection by a token
 * in front of the header (docs/CORE.md, "Who sent a message"): send
 * messages (rdmx_send's, whose header is the token alone) named by a
 * guessed token, by the token of this very handshake (never bound: no
 * BIND was sent) and by a header too short to hold one. The server must
 * drop each as a protocol error. @return how many. */
static unsigned raw_named(ucp_worker_h uw, ucp_ep_h uep, uint64_t welcome)
{
    uint64_t guess;
    uint8_t named[3][8], payload[64];
    size_t hlen[3] = {8, 8, 4};
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = 0}; /* (no UCP_AM_SEND_FLAG_REPLY) */

    th_fill(&guess, sizeof(guess), 0x70c3);
    rdmx_put_le64(named[0], guess | 1);
    rdmx_put_le64(named[1], welcome);
    rdmx_put_le64(named[2], welcome);
    memset(payload, 0x33, sizeof(payload));
    for (int i = 0; i < 3; i++) {
        ucs_status_ptr_t p;
        p = ucp_am_send_nbx(uep, RDMX_AM_MSG, named[i], hlen[i], payload,
                            sizeof(payload), &rp);
        CHECKF(raw_settle(uw, &p, 1, 2000) == 1,
               "raw named message %d "
               "not sent",
               i);
        if (UCS_PTR_IS_PTR(p))
            ucp_request_free(p);
    }
    th_log("raw UCX: messages named by a guessed token, by the unbound "
           "handshake's token, and too short for one: sent");
    return 3;
}

/* Put and get through UCX itself with the descriptor's key. */
static unsigned raw_ucx_attack(const th_proc_t *srv, const uint8_t *desc,
                               size_t dlen)
{
    ucp_params_t up = {0};
    ucp_worker_params_t wp = {0};
    ucp_ep_params_t ep_p = {0};
    ucp_config_t *cfg;
    ucp_context_h uc;
    ucp_worker_h uw;
    ucp_address_t *addr;
    size_t alen, slen;
    uint8_t saddr[8192];
    ucp_ep_h uep;
    ucp_rkey_h rkey;
    uint64_t base = rdmx_get_le64(desc + D_ADDR);
    uint32_t klen = rdmx_get_le32(desc + D_RKEY);
    uint8_t buf[K4];
    int fd, gets_answered = 0;
    uint64_t welcome = 0;
    unsigned proto;

    (void)dlen;
    CHECK(ucp_config_read(NULL, NULL, &cfg) == UCS_OK);
    CHECK(ucp_config_modify(cfg, "TLS", "tcp") == UCS_OK);
    up.field_mask = UCP_PARAM_FIELD_FEATURES;
    up.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
    CHECK(ucp_init(&up, cfg, &uc) == UCS_OK);
    ucp_config_release(cfg);
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    CHECK(ucp_worker_create(uc, &wp, &uw) == UCS_OK);
    CHECK(ucp_worker_get_address(uw, &addr, &alen) == UCS_OK);
    slen = raw_bootstrap(srv, addr, alen, saddr, sizeof(saddr), &fd, &welcome);
    ep_p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep_p.address = (ucp_address_t *)saddr;
    ep_p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep_p.err_handler.cb = raw_err;
    (void)slen;
    CHECK(ucp_ep_create(uw, &ep_p, &uep) == UCS_OK);
    proto = raw_named(uw, uep, welcome);
    if (ucp_ep_rkey_unpack(uep, desc + D_FIXED, &rkey) != UCS_OK) {
        th_log("raw UCX: the key (%u bytes) does not even unpack", klen);
    } else {
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                                  .cb.send = raw_cb};
        int64_t offs[] = {0, -(int64_t)K4, (int64_t)K4, 1 << 20};
        ucs_status_ptr_t gets[4];
        ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t closing;
        static uint8_t gbuf[4][64];

        memset(buf, 0x5a, sizeof(buf));
        for (int i = 0; i < 4; i++) {
            ucs_status_ptr_t p =
                ucp_put_nbx(uep, buf, 64, base + offs[i], rkey, &rp);
            raw_settle(uw, &p, 1, 1000);
            if (UCS_PTR_IS_PTR(p))
                ucp_request_free(p); /* (UCX finishes it on its own) */
            gets[i] = ucp_get_nbx(uep, gbuf[i], 64, base + offs[i], rkey, &rp);
        }
        gets_answered = raw_settle(uw, gets, 4, 1000);
        for (int i = 0; i < 4; i++)
            if (!UCS_PTR_IS_PTR(gets[i]) ||
                ucp_request_check_status(gets[i]) != UCS_INPROGRESS)
                CHECKF(!UCS_PTR_IS_PTR(gets[i]) &&
                           UCS_PTR_STATUS(gets[i]) != UCS_OK,
                       "raw UCX: get %d was answered by the server", i);
        ucp_rkey_destroy(rkey);
        /* A forced close fails what is left. */
        closing = ucp_ep_close_nbx(uep, &cp);
        raw_settle(uw, &closing, 1, 2000);
        if (UCS_PTR_IS_PTR(closing))
            ucp_request_free(closing);
        raw_settle(uw, gets, 4, 2000);
        for (int i = 0; i < 4; i++)
            if (UCS_PTR_IS_PTR(gets[i]))
                ucp_request_free(gets[i]);
        uep = NULL;
    }
    if (uep != NULL) {
        ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t closing = ucp_ep_close_nbx(uep, &cp);
        raw_settle(uw, &closing, 1, 2000);
        if (UCS_PTR_IS_PTR(closing))
            ucp_request_free(closing);
    }
    (void)gets_answered;
    close(fd);
    ucp_worker_release_address(uw, addr);
    ucp_worker_destroy(uw);
    ucp_cleanup(uc);
    th_log("raw UCX: puts and gets with the descriptor's key at the exposed "
           "range and around it: no get answered");
    return proto;
}

int main(int argc, char **argv)
{
    th_proc_t server;
    rdmx_context_t *ctx;
    ts_region_t big, secret;
    ts_reply_t rep;
    rdmx_worker_stats_t s0, s1;
    uint64_t seed_big = th_seed(7, 1, 1), seed_secret = th_seed(7, 2, 2);
    uint8_t desc[TS_MAX_BLOB];
    size_t dlen;
    rdmx_rmem_t *rm;
    unsigned bad = 0, refused = 0, proto = 0;
    rdmx_status_t st;

    if (argc > 1 && strcmp(argv[1], "--server") == 0)
        return ts_server_main(argc, argv);

    th_init("hostile_peer", 110);
    th_spawn_self(&server, "--server", 30000, NULL);
    ctx = th_context();
    worker = th_worker(ctx, 0);
    ep = th_connect(worker, &server, NULL);

    ts_alloc(ep, &big, 3 * K4, RDMX_ACCESS_ALL, TS_KIND_ALLOC, seed_big);
    ts_alloc(ep, &secret, K4, RDMX_ACCESS_ALL, TS_KIND_REGISTER, seed_secret);
    secret_region = rdmx_get_le64(secret.desc + D_REGION);
    ts_call(ep, TS_PACK, big.region, K4, K4, RDMX_ACCESS_READ, &rep);
    CHECK_OK(rep.status);
    dlen = rep.blob_len;
    memcpy(desc, rep.blob, dlen);
    ts_call(ep, TS_STATS, 0, 0, 0, 0, &rep);
    memcpy(&s0, rep.blob, sizeof(s0));

    /* Honest use. */
    CHECK_OK(rdmx_rmem_unpack(ep, desc, dlen, &rm));
    CHECK_EQ_U64(rdmx_rmem_length(rm), K4);
    CHECK_EQ_U64(rdmx_rmem_access(rm), RDMX_ACCESS_READ);
    memset(local, 0, sizeof(local));
    CHECK_OK(run(0, rm, 0, K4));
    CHECKF(th_check_at(local, K4, seed_big, K4) < 0,
           "the exposed range does not read back as the server's pattern");
    CHECK_ST(rdmx_put(ep, rm, 0, local, 8, NULL), RDMX_ERR_DENIED);
    th_log("honest: get of the exposed 4 KiB ok; put refused by the library");

    /* Forgeries with a recomputed checksum. */
    bad += forged(desc, dlen, "rights widened", edit_rights, 0, 64);
    bad += forged(desc, dlen, "length doubled", edit_len2, K4, K4);
    bad += forged(desc, dlen, "length 1 GiB", edit_len1g, 1ull << 20, 64);
    bad += forged(desc, dlen, "start on the canary", edit_back, 0, K4);
    bad += forged(desc, dlen, "region of the secret", edit_region, 0, 64);
    bad += forged(desc, dlen, "MAC altered", edit_mac, 0, 64);
    {
        uint8_t d[TS_MAX_BLOB];
        rdmx_rmem_t *x;

        memcpy(d, desc, dlen);
        rdmx_put_le16(d + D_ACCESS, RDMX_ACCESS_ALL); /* checksum kept */
        CHECK_ST(rdmx_rmem_unpack(ep, d, dlen, &x), RDMX_ERR_BAD_DESCRIPTOR);
        th_log("an edit without a recomputed checksum: refused by unpack");
    }
    refused += bad;

    /* Past the library's checks, with the genuine grant. */
    {
        struct {
            const char *what;
            unsigned opcode, flags;
            uint64_t off;
            size_t len;
            rdmx_status_t want;
        } t[] = {
            {"get past the grant", RDMX_ACC_GET, 0, K4, K4,
             RDMX_ERR_OUT_OF_RANGE},
            {"get straddling the end", RDMX_ACC_GET, 0, K4 - 8, 64,
             RDMX_ERR_OUT_OF_RANGE},
            {"offset wrapping 64 bits", RDMX_ACC_GET, 0, UINT64_MAX - K4 + 1,
             2 * K4, RDMX_ERR_OUT_OF_RANGE},
            {"length 2^62", RDMX_ACC_GET, 0, 0, 1ull << 62,
             RDMX_ERR_OUT_OF_RANGE},
            {"put on a read-only grant", RDMX_ACC_PUT, 0, 0, 64,
             RDMX_ERR_DENIED},
            {"atomic on a read-only grant", RDMX_ACC_FADD, 0, 0, 8,
             RDMX_ERR_DENIED},
            {"unknown flag bits", RDMX_ACC_PUT, 0x8, 0, 8, RDMX_ERR_PROTO},
            {"unknown opcode", 9, 0, 0, 8, RDMX_ERR_PROTO},
        };
        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
            th_fill(local, sizeof(local), seed_local);
            st = raw_access(rm, t[i].opcode, t[i].flags, t[i].off,
                            t[i].len);
            CHECKF(st == t[i].want, "raw %s: %s (%s), expected %s", t[i].what,
                   rdmx_status_name(st), rdmx_error_detail(),
                   rdmx_status_name(t[i].want));
            CHECKF(th_check(local, sizeof(local), seed_local) < 0,
                   "raw %s: the caller's buffer changed", t[i].what);
            if (t[i].want == RDMX_ERR_PROTO)
                proto++;
            else
                refused++;
        }
        th_log("raw access messages with the genuine grant: out of range, "
               "denied and malformed ones refused by the server");
    }
    rdmx_rmem_destroy(rm);
    if (strcmp(th_transport_env(), "tcp") == 0)
        proto += raw_ucx_attack(&server, desc, dlen);

    /* Nothing outside moved, nothing was written. */
    TS_VERIFY_REMOTE(ep, &big, 0, 3 * K4, seed_big);
    TS_VERIFY_REMOTE(ep, &secret, 0, K4, seed_secret);
    ts_call(ep, TS_STATS, 0, 0, 0, 0, &rep);
    memcpy(&s1, rep.blob, sizeof(s1));
    CHECKF(s1.bad_descriptors - s0.bad_descriptors == bad,
           "server bad_descriptors grew by %llu, expected %u",
           (unsigned long long)(s1.bad_descriptors - s0.bad_descriptors),
           bad);
    CHECKF(s1.rma_refused - s0.rma_refused == refused,
           "server rma_refused grew by %llu, expected %u",
           (unsigned long long)(s1.rma_refused - s0.rma_refused), refused);
    CHECKF(s1.proto_errors - s0.proto_errors == proto,
           "server proto_errors grew by %llu, expected %u",
           (unsigned long long)(s1.proto_errors - s0.proto_errors), proto);
    CHECKF(th_alive(&server), "the server died");
    th_log("server memory intact (12 KiB region and secret, byte for byte); "
           "counters: bad_descriptors +%u, rma_refused +%u, proto_errors +%u",
           bad, refused, proto);

    rdmx_rmem_destroy(big.rmem);
    rdmx_rmem_destroy(secret.rmem);
    ts_quit(ep);
    th_check_exit_ok("server", th_wait_exit(&server, 20000));
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    th_log("ok");
    return 0;
}
