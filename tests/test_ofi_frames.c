/*
 * ofi_frames: a peer on raw libfabric sends forged frames of the ofi
 * backend (docs/FABRIC.md, "Frames" and "Pairing") to a real rdmx RPC
 * server (tests/conn_util.c's role, one worker, a separate process) over
 * ofi:tcp or ofi:shm (RDMX_TRANSPORT). The peer bootstraps by hand (HELLO
 * with its own "ROFI" address, docs/PROTOCOL.md) so that the server puts it
 * in its AV; frames of other processes would not even reach the backend's
 * checks. After every case a well-behaved rdmx client (this process,
 * through the library) still gets its echo answered, and the server's
 * counters moved by exactly what the case sent:
 *  - malformed frames: 0, 1, 8 and 15 bytes; kinds 0, 4, 255; ids 32 and
 *    255; hlen 97 and 65535; hlen past the end of the frame; src 0;
 *    reserved bytes set; an RTS of 39 bytes, with flags, with rendezvous
 *    id 0; FINs with a header, an id, a positive status, rendezvous id 0,
 *    and for a rendezvous never sent: proto_errors +1 each.
 *  - pairing: a MSG with dst 0 (+1), a frame whose src is not the
 *    endpoint's peer id (+1); dst naming no endpoint, a generation
 *    already gone, the server side of the good client's connection (ids
 *    1..8), a closed endpoint, and the closed id after its slot was
 *    reused: dropped, msgs_dropped +1 each (proto_errors and
 *    msgs_unexpected unchanged, the good client unaffected).
 *  - BIND: replayed with dst 0 and with the endpoint's id (+1 each);
 *    with a wrong magic (+1), a made-up token (+1) or as an RTS frame
 *    (+1), after which the connection's own BIND still pairs it; with
 *    another connection's token, made under another worker id (+1), after
 *    which both connections' own BINDs still pair them.
 *  - RPC over frames: a header of version 3 (malformed +1, ERROR back);
 *    rendezvous RTS of REQUESTs with lengths 2^64-1 and 2^63 (malformed
 *    +1 each, ERROR and FIN(CANCELED) back), 100 MiB (too_big +1, ERROR
 *    TOO_BIG), 3.5 MiB of which 3 MiB is bulk table (over max_receiving:
 *    too_big +1, ERROR TOO_BIG), and one before the RPC handshake
 *    (malformed +1): nothing is pulled.
 *  - a plausible RTS (64 KiB) with a key and an address the peer never
 *    registered, and one whose address + length wraps 64 bits: the
 *    server's pulls fail (tcp: at once; shm: when the peer's connection
 *    ends, its provider never answers such a read); both requests are
 *    counted as errors of "echo" and not answered.
 *  - max_receiving (the server runs with max_message 1 MiB and
 *    max_receiving 3 MiB; shm only): three 1 MiB pulls that stay in
 *    flight fill the connection's budget; a fourth request waits (waited
 *    +1; no answer, no FIN), a CANCEL finds it (canceled +1), and it ends
 *    with the connection (echo errors +4).
 *  - a flood: 4,000 garbage frames and 200 forged RTS back to back:
 *    proto_errors +4,000, malformed +200, every FIN and ERROR back.
 * Ordering: frames between two libfabric endpoints arrive in order
 * (FI_ORDER_SAS), so an RPC PING sent after a case's frames is answered
 * after the server handled them all; the counters are read then.
 */
#define _GNU_SOURCE
#include "conn_util.h"

#include "core/ofi/frame.h"
#include "util/endian.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define RX_N  32    /* receive buffers of the raw peer */
#define RX_SZ 16384 /* the backend's frame size */
#define TX_N  256   /* sends in flight */
#define TX_SZ 256

#define WIRE_MAGIC 0x58444d52u /* "RMDX" */
#define ADDR_MAGIC 0x49464f52u /* "ROFI" */
#define AM_BIND    0
#define BIND_SIZE  24 /* magic, status, token, the client's name */
#define AM_MSG     2
#define AM_RPC     16
#define RPC_V      0x20 /* version 2 in the high nibble */

/* --- the raw peer -------------------------------------------------------- */

static struct {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    fi_addr_t srv; /* the server worker */
    int have_srv;
    unsigned char srv_name[256];
    size_t srv_name_len;
    unsigned char addr[48 + 256]; /* our "ROFI" blob */
    size_t addr_len;
    unsigned char *rx, *tx;
    struct fi_context2 rx_ctx[RX_N], tx_ctx[TX_N];
    uint64_t tx_posted, tx_done;
} R;

/* What came back from the server. */
static struct {
    uint64_t frames, acks, fins, cq_errors;
    uint32_t ack_dst, ack_src;
    int32_t fin_status;
    uint64_t rpc[16];      /* by kind */
    uint64_t pong_id;      /* of the last PONG */
    int32_t err_status;    /* of the last ERROR */
    uint64_t fin_canceled; /* FINs with RDMX_ERR_CANCELED */
    uint64_t fin_failed;   /* FINs with another error */
} got;

/* A connection of the raw peer: its control socket, its endpoint id, the
 * server's id for it once bound. */
typedef struct {
    int fd;
    uint64_t token;
    uint32_t src, srv_id;
} raw_conn_t;

static uint32_t next_src = 0x100;

/* An RPC message's header, from a frame or from a batch in one. */
static void on_rpc(const unsigned char *hdr, size_t hlen)
{
    unsigned kind;

    if (hlen < 16)
        return;
    kind = hdr[0] & 0x0f;
    got.rpc[kind]++;
    if (kind == 7)
        got.pong_id = rdmx_get_le64(hdr + 8);
    if (kind == 3)
        got.err_status = (int32_t)rdmx_get_le32(hdr + 4);
}

static void on_frame(const unsigned char *buf, size_t len)
{
    rdmx_ofi_frame_t f;

    got.frames++;
    if (rdmx__ofi_frame_parse(buf, len, &f) != 0) {
        th_log("raw: the server sent a frame the decoder refuses (%zu "
               "bytes)",
               len);
        return;
    }
    if (f.kind == RDMX_OFI_FRAME_FIN) {
        got.fins++;
        got.fin_status = f.status;
        if (f.status == RDMX_ERR_CANCELED)
            got.fin_canceled++;
        else if (f.status != 0)
            got.fin_failed++;
        return;
    }
    if (f.kind == RDMX_OFI_FRAME_EAGER && f.id == 1) { /* BIND_ACK */
        got.acks++;
        got.ack_dst = f.dst;
        got.ack_src = f.src;
        return;
    }
    if (f.kind == RDMX_OFI_FRAME_EAGER && f.id == AM_RPC)
        on_rpc(f.hdr, f.hlen);
    if (f.kind == RDMX_OFI_FRAME_EAGER && f.id == 8) { /* a batch */
        const unsigned char *p = f.data, *end = f.data + f.len;
        CHECKF(f.hlen == 0 && f.len > 0 && f.len % 8 == 0,
               "raw: a batch of %zu bytes, header %zu", f.len, f.hlen);
        while (p < end) { /* id, hlen, 0, 0, len (LE u32), hdr, data, pad */
            CHECK(end - p >= 8 && p[0] == AM_RPC && p[2] == 0 && p[3] == 0 &&
                  (size_t)p[1] + rdmx_get_le32(p + 4) <= (size_t)(end - p) - 8);
            on_rpc(p + 8, p[1]);
            p += (8 + p[1] + rdmx_get_le32(p + 4) + 7) & ~(size_t)7;
        }
        CHECK(p == end);
    }
}

static void rx_post(unsigned i)
{
    ssize_t ret;

    do {
        ret = fi_recv(R.ep, R.rx + (size_t)i * RX_SZ, RX_SZ, NULL,
                      FI_ADDR_UNSPEC, &R.rx_ctx[i]);
    } while (ret == -FI_EAGAIN);
    CHECKF(ret == 0, "raw: fi_recv: %s", fi_strerror((int)-ret));
}

static void raw_progress(void)
{
    struct fi_cq_data_entry e[16];
    ssize_t n = fi_cq_read(R.cq, e, 16);

    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err = {0};
        if (fi_cq_readerr(R.cq, &err, 0) == 1) {
            got.cq_errors++;
            th_log("raw: completion error: %s", fi_strerror(err.err));
            if ((void *)err.op_context >= (void *)R.tx_ctx &&
                (void *)err.op_context < (void *)(R.tx_ctx + TX_N))
                R.tx_done++;
            else if ((void *)err.op_context >= (void *)R.rx_ctx &&
                     (void *)err.op_context < (void *)(R.rx_ctx + RX_N))
                rx_post((unsigned)((struct fi_context2 *)err.op_context -
                                   R.rx_ctx));
        }
        return;
    }
    for (ssize_t i = 0; i < n; i++) {
        struct fi_context2 *c = e[i].op_context;
        if (c >= R.rx_ctx && c < R.rx_ctx + RX_N) {
            unsigned k = (unsigned)(c - R.rx_ctx);
            on_frame(R.rx + (size_t)k * RX_SZ, e[i].len);
            rx_post(k);
        } else {
            R.tx_done++;
        }
    }
}

/* Progress the raw peer for @ms. */
static void raw_spin(int ms)
{
    double end = th_now_ms() + ms;

    while (th_now_ms() < end)
        raw_progress();
}

/* Send @len bytes as one message to the server worker. */
static void raw_send(const void *buf, size_t len)
{
    unsigned slot = (unsigned)(R.tx_posted % TX_N);
    unsigned char *p = R.tx + (size_t)slot * TX_SZ;
    double end = th_now_ms() + 10000.0 * TH_SLOW;
    ssize_t ret;

    CHECK(len <= TX_SZ);
    while (R.tx_posted - R.tx_done >= TX_N) {
        raw_progress();
        CHECKF(th_now_ms() < end, "raw: sends do not complete");
    }
    memcpy(p, buf, len);
    while ((ret = fi_send(R.ep, p, len, NULL, R.srv, &R.tx_ctx[slot])) ==
           -FI_EAGAIN) {
        raw_progress();
        CHECKF(th_now_ms() < end, "raw: fi_send keeps saying EAGAIN");
    }
    CHECKF(ret == 0, "raw: fi_send: %s", fi_strerror((int)-ret));
    R.tx_posted++;
}

/* A frame: header fields as given, then @hdr (@hlen_bytes of it: may
 * differ from the @hlen field), then @data. */
static void frame(unsigned kind, unsigned id, unsigned hlen, uint32_t src,
                  uint32_t dst, const void *hdr, size_t hlen_bytes,
                  const void *data, size_t dlen)
{
    unsigned char b[TX_SZ];

    CHECK(RDMX_OFI_FRAME_SIZE + hlen_bytes + dlen <= sizeof(b));
    b[0] = (unsigned char)kind;
    b[1] = (unsigned char)id;
    rdmx_put_le16(b + 2, (uint16_t)hlen);
    rdmx_put_le32(b + 4, src);
    rdmx_put_le32(b + 8, dst);
    rdmx_put_le32(b + 12, 0);
    if (hlen_bytes)
        memcpy(b + 16, hdr, hlen_bytes);
    if (dlen)
        memcpy(b + 16 + hlen_bytes, data, dlen);
    raw_send(b, 16 + hlen_bytes + dlen);
}

static void raw_open(const char *prov)
{
    struct fi_info *hints = fi_allocinfo(), *list = NULL, *pick;
    struct fi_cq_attr cqa = {
        .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE, .size = 1024};
    struct fi_av_attr ava = {.type = FI_AV_TABLE, .count = 4};
    size_t n = 256;
    uint64_t r = 0;
    int ret;

    CHECK(hints != NULL);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_SOURCE | FI_RMA | FI_READ | FI_REMOTE_READ;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    /* (no FI_MR_LOCAL: the peer registers nothing; no region of its own is
     * ever offered to the server) */
    hints->domain_attr->mr_mode =
        FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_COMPLETION;
    hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->fabric_attr->prov_name = strdup(prov);
    ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &list);
    CHECKF(ret == 0, "raw: fi_getinfo(%s): %s", prov, fi_strerror(-ret));
    pick = list;
    for (struct fi_info *i = list; i != NULL; i = i->next)
        if (i->domain_attr->name && !strcmp(i->domain_attr->name, "lo")) {
            pick = i;
            break;
        }
    R.info = fi_dupinfo(pick);
    fi_freeinfo(list);
    fi_freeinfo(hints);
    if (R.info->addr_format == FI_ADDR_STR) {
        /* (a name of our own: a region a killed process left under our
         * pid's name must not fail fi_endpoint) */
        char *name = malloc(64);
        CHECK(name != NULL);
        getentropy(&r, sizeof(r));
        snprintf(name, 64, "fi_shm://%d-raw%016llx", (int)getpid(),
                 (unsigned long long)r);
        free(R.info->src_addr);
        R.info->src_addr = name;
        R.info->src_addrlen = strlen(name) + 1;
    }
    CHECK(fi_fabric(R.info->fabric_attr, &R.fabric, NULL) == 0);
    CHECK(fi_domain(R.fabric, R.info, &R.domain, NULL) == 0);
    CHECK(fi_cq_open(R.domain, &cqa, &R.cq, NULL) == 0);
    CHECK(fi_av_open(R.domain, &ava, &R.av, NULL) == 0);
    CHECK(fi_endpoint(R.domain, R.info, &R.ep, NULL) == 0);
    CHECK(fi_ep_bind(R.ep, &R.av->fid, 0) == 0);
    CHECK(fi_ep_bind(R.ep, &R.cq->fid, FI_TRANSMIT | FI_RECV) == 0);
    CHECK(fi_enable(R.ep) == 0);
    R.rx = th_alloc((size_t)RX_N * RX_SZ);
    R.tx = th_alloc((size_t)TX_N * TX_SZ);
    for (unsigned i = 0; i < RX_N; i++)
        rx_post(i);
    /* "ROFI" 1 0 n, instance, prov_name[32], then fi_getname() */
    memset(R.addr, 0, sizeof(R.addr));
    ret = fi_getname(&R.ep->fid, R.addr + 48, &n);
    CHECKF(ret == 0 && n > 0 && n <= 256, "raw: fi_getname: %s",
           fi_strerror(-ret));
    rdmx_put_le32(R.addr, ADDR_MAGIC);
    R.addr[4] = 1;
    rdmx_put_le16(R.addr + 6, (uint16_t)n);
    rdmx_put_le64(R.addr + 8, 0x0f1f2f3full);
    memcpy(R.addr + 16, R.info->fabric_attr->prov_name,
           strlen(R.info->fabric_attr->prov_name));
    R.addr_len = 48 + n;
    th_log("raw peer: %s, domain %s", R.info->fabric_attr->prov_name,
           R.info->domain_attr->name);
}

static void raw_close(void)
{
    fi_close(&R.ep->fid);
    fi_close(&R.av->fid);
    fi_close(&R.cq->fid);
    fi_close(&R.domain->fid);
    fi_close(&R.fabric->fid);
    fi_freeinfo(R.info);
    free(R.rx);
    free(R.tx);
}

static void read_all(int fd, void *buf, size_t len)
{
    unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        CHECKF(n > 0, "raw bootstrap: the server closed or said nothing");
        p += n;
        len -= (size_t)n;
    }
}

/* A connection by hand: HELLO with our address and @worker_id, WELCOME
 * back (its token and the server worker's address, inserted in our AV
 * the first time). The socket stays open: it is the connection. */
static raw_conn_t raw_connect(const th_proc_t *srv, uint64_t worker_id)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    struct timeval tv = {.tv_sec = 10 * TH_SLOW};
    unsigned char f[8 + 40 + sizeof(R.addr)], h[8], *b;
    raw_conn_t c = {.src = next_src++};
    size_t blen, n;

    c.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sa.sin_port = htons(srv->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    CHECK(connect(c.fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    memset(f, 0, sizeof(f));
    rdmx_put_le32(f, (uint32_t)(32 + R.addr_len));
    f[4] = 1; /* HELLO */
    rdmx_put_le32(f + 8, WIRE_MAGIC);
    rdmx_put_le16(f + 12, 8); /* the wire version */
    rdmx_put_le64(f + 16, worker_id);
    memcpy(f + 40, R.addr, R.addr_len);
    CHECK(send(c.fd, f, 40 + R.addr_len, MSG_NOSIGNAL) ==
          (ssize_t)(40 + R.addr_len));
    read_all(c.fd, h, 8);
    blen = rdmx_get_le32(h);
    CHECKF(h[4] == 2 && blen > 24 + 48 && blen < 65536,
           "raw bootstrap: frame type %u of %zu bytes", h[4], blen);
    b = th_alloc(blen);
    read_all(c.fd, b, blen);
    c.token = rdmx_get_le64(b + 16);
    n = rdmx_get_le16(b + 24 + 6);
    CHECKF(rdmx_get_le32(b + 24) == ADDR_MAGIC && 24 + 48 + n == blen &&
               n <= sizeof(R.srv_name),
           "raw bootstrap: the server's address is not an ofi one");
    if (!R.have_srv) {
        memcpy(R.srv_name, b + 24 + 48, n);
        R.srv_name_len = n;
        CHECK(fi_av_insert(R.av, R.srv_name, 1, &R.srv, 0, NULL) == 1);
        R.have_srv = 1;
    } else {
        CHECK(n == R.srv_name_len && !memcmp(R.srv_name, b + 24 + 48, n));
    }
    free(b);
    return c;
}

static void bind_hdr(unsigned char *h, uint32_t magic, uint64_t token)
{
    rdmx_put_le32(h, magic);
    rdmx_put_le32(h + 4, 0);
    rdmx_put_le64(h + 8, token);
    rdmx_put_le64(h + 16, token ^ 0x7e57); /* any name but 0 */
}

/* BIND @c (dst 0) and wait for its BIND_ACK: the server's id for it. */
static void raw_bind(raw_conn_t *c)
{
    unsigned char h[BIND_SIZE];
    uint64_t acks = got.acks;
    double end = th_now_ms() + 10000.0 * TH_SLOW;

    bind_hdr(h, WIRE_MAGIC, c->token);
    frame(RDMX_OFI_FRAME_EAGER, AM_BIND, BIND_SIZE, c->src, 0, h, BIND_SIZE,
          NULL, 0);
    while (got.acks == acks || got.ack_dst != c->src) {
        raw_progress();
        CHECKF(th_now_ms() < end, "raw: no BIND_ACK for endpoint 0x%x", c->src);
    }
    c->srv_id = got.ack_src;
}

/* An RPC header of @kind (16 bytes; with @aux, 20). */
static size_t rpc_hdr(unsigned char *h, unsigned version_kind, uint32_t word,
                      uint64_t id, uint32_t aux)
{
    memset(h, 0, 20);
    h[0] = (unsigned char)version_kind;
    rdmx_put_le32(h + 4, word);
    rdmx_put_le64(h + 8, id);
    if (aux == 0)
        return 16;
    h[1] = 0x80;
    rdmx_put_le32(h + 16, aux);
    return 20;
}

/* The RPC handshake on a bound connection. */
static void raw_rpc_hello(const raw_conn_t *c)
{
    unsigned char h[20], body[4] = {0};
    uint64_t w = got.rpc[11];
    double end = th_now_ms() + 10000.0 * TH_SLOW;
    size_t hl = rpc_hdr(h, RPC_V | 8, 0, 0, 4);

    frame(RDMX_OFI_FRAME_EAGER, AM_RPC, (unsigned)hl, c->src, c->srv_id, h, hl,
          body, 4);
    while (got.rpc[11] == w) {
        raw_progress();
        CHECKF(th_now_ms() < end, "raw: no RPC WELCOME");
    }
}

/* A PING on @c and its PONG: everything sent before was handled. */
static void raw_marker(const raw_conn_t *c)
{
    static uint64_t id = 1000;
    unsigned char h[20];
    double end = th_now_ms() + 10000.0 * TH_SLOW;
    size_t hl = rpc_hdr(h, RPC_V | 6, 0, ++id, 0);

    frame(RDMX_OFI_FRAME_EAGER, AM_RPC, (unsigned)hl, c->src, c->srv_id, h, hl,
          NULL, 0);
    while (got.pong_id != id) {
        raw_progress();
        CHECKF(th_now_ms() < end, "raw: the server answered no PING");
    }
}

/* A PING on @c: 1 if its PONG came within @ms. */
static int raw_ping(const raw_conn_t *c, int ms)
{
    static uint64_t id = 1u << 30;
    unsigned char h[20];
    double end = th_now_ms() + ms;
    size_t hl = rpc_hdr(h, RPC_V | 6, 0, ++id, 0);

    frame(RDMX_OFI_FRAME_EAGER, AM_RPC, (unsigned)hl, c->src, c->srv_id, h, hl,
          NULL, 0);
    while (got.pong_id != id && th_now_ms() < end)
        raw_progress();
    return got.pong_id == id;
}

/* An RTS of an RPC REQUEST to @handler (rendezvous @rid). */
static void rts_request(const raw_conn_t *c, uint32_t handler, uint64_t id,
                        uint64_t length, uint64_t rid, uint64_t raddr,
                        uint64_t key)
{
    unsigned char h[20], body[RDMX_OFI_RTS_SIZE];
    size_t hl = rpc_hdr(h, RPC_V | 1, handler, id, 0);

    rdmx__ofi_rts_pack(body, length, rid, raddr, key);
    frame(RDMX_OFI_FRAME_RTS, AM_RPC, (unsigned)hl, c->src, c->srv_id, h, hl,
          body, sizeof(body));
}

/* --- the well-behaved client ------------------------------------------------
 */

static rdmx_channel_t *good;
static rdmx_worker_stats_t last_ws;
static char stats_text[16384];

static void server_wstats(rdmx_worker_stats_t *st)
{
    cu_wstats_t r;
    size_t len = 0;

    CHECK_OK(rdmx_call(good, "wstats", NULL, 0, &r, sizeof(r), NULL, &len));
    CHECK(len == sizeof(r) && r.index == 0);
    *st = r.st;
}

/* The "errors" column of handler @name in rdmx.stats. */
static uint64_t handler_errors(const char *name)
{
    const char *p = stats_text;
    size_t n = strlen(name);

    while ((p = strstr(p, name)) != NULL) {
        unsigned long long calls, errors;
        if ((p == stats_text || p[-1] == '\n') && p[n] == ' ' &&
            sscanf(p + n, "%llu %llu", &calls, &errors) == 2)
            return errors;
        p += n;
    }
    th_fail(__FILE__, __LINE__, "no handler '%s' in rdmx.stats", name);
}

/* Spin the raw peer until the server's "echo" errors reach @want or @ms
 * pass (stretched under sanitizers); the count then. */
static uint64_t wait_echo_errors(uint64_t want, double ms)
{
    double end = th_now_ms() + ms * TH_SLOW;

    do {
        raw_spin(10);
        cu_stats_text(good, stats_text, sizeof(stats_text));
    } while (handler_errors("echo") < want && th_now_ms() < end);
    return handler_errors("echo");
}

/* After a case: the good client's echo comes back intact, the server's
 * proto_errors moved by @proto exactly and msgs_dropped (frames for no
 * live endpoint of their sender) by @dropped (msgs_unexpected not at
 * all). */
static void check_server_dropped(const char *what, uint64_t proto,
                                 uint64_t dropped)
{
    unsigned char in[64], out[64];
    rdmx_worker_stats_t ws;
    size_t len = 0;

    th_fill(in, sizeof(in), th_seed(3, proto, 0));
    CHECK_OK(
        rdmx_call(good, "echo", in, sizeof(in), out, sizeof(out), NULL, &len));
    CHECKF(len == sizeof(in) && !memcmp(in, out, len),
           "%s: the good client's echo came back wrong", what);
    server_wstats(&ws);
    CHECKF(ws.proto_errors - last_ws.proto_errors == proto,
           "%s: proto_errors +%llu, expected +%llu", what,
           (unsigned long long)(ws.proto_errors - last_ws.proto_errors),
           (unsigned long long)proto);
    CHECKF(ws.msgs_dropped - last_ws.msgs_dropped == dropped,
           "%s: msgs_dropped +%llu, expected +%llu", what,
           (unsigned long long)(ws.msgs_dropped - last_ws.msgs_dropped),
           (unsigned long long)dropped);
    CHECKF(ws.msgs_unexpected == last_ws.msgs_unexpected,
           "%s: a forged frame reached an endpoint (msgs_unexpected +%llu)",
           what,
           (unsigned long long)(ws.msgs_unexpected - last_ws.msgs_unexpected));
    th_log("%-44s proto_errors +%llu, dropped +%llu, the good client served",
           what, (unsigned long long)proto, (unsigned long long)dropped);
    last_ws = ws;
}

static void check_server(const char *what, uint64_t proto)
{
    check_server_dropped(what, proto, 0);
}

static uint64_t server_stat(const char *key)
{
    cu_stats_text(good, stats_text, sizeof(stats_text));
    return cu_text_stat(stats_text, key);
}

/* --- the cases -------------------------------------------------------------
 */

static void case_malformed(const raw_conn_t *a)
{
    unsigned char junk[128], h[96], body[64];
    uint32_t s = a->src, d = a->srv_id;

    memset(junk, 0x41, sizeof(junk));
    memset(h, 0, sizeof(h));
    /* short: 0, 1, 8, 15 bytes */
    raw_send(junk, 0);
    raw_send(junk, 1);
    raw_send(junk, 8);
    raw_send(junk, 15);
    raw_marker(a);
    check_server("short frames (0, 1, 8, 15 bytes)", 4);

    frame(0, AM_MSG, 0, s, d, NULL, 0, "x", 1);
    frame(4, AM_MSG, 0, s, d, NULL, 0, "x", 1);
    frame(255, AM_MSG, 0, s, d, NULL, 0, "x", 1);
    frame(RDMX_OFI_FRAME_EAGER, 32, 0, s, d, NULL, 0, "x", 1);
    frame(RDMX_OFI_FRAME_EAGER, 255, 0, s, d, NULL, 0, "x", 1);
    raw_marker(a);
    check_server("kinds 0, 4, 255; ids 32, 255", 5);

    frame(RDMX_OFI_FRAME_EAGER, AM_RPC, 97, s, d, junk, 97, NULL, 0);
    frame(RDMX_OFI_FRAME_EAGER, AM_RPC, 65535, s, d, junk, 100, NULL, 0);
    frame(RDMX_OFI_FRAME_EAGER, AM_RPC, 40, s, d, junk, 10, NULL, 0);
    frame(RDMX_OFI_FRAME_EAGER, AM_MSG, 0, 0, d, NULL, 0, "x", 1);
    {
        unsigned char b[20] = {RDMX_OFI_FRAME_EAGER, AM_MSG};
        rdmx_put_le32(b + 4, s);
        rdmx_put_le32(b + 8, d);
        b[14] = 1; /* reserved */
        raw_send(b, sizeof(b));
    }
    raw_marker(a);
    check_server("hlen 97, 65535, past the end; src 0; reserved", 5);

    /* RTS and FIN of the wrong shape */
    rdmx__ofi_rts_pack(body, 4096, 77, 0x1000, 1);
    frame(RDMX_OFI_FRAME_RTS, AM_MSG, 0, s, d, NULL, 0, body, 39);
    rdmx_put_le32(body + 32, 1); /* flags */
    frame(RDMX_OFI_FRAME_RTS, AM_MSG, 0, s, d, NULL, 0, body, 40);
    rdmx__ofi_rts_pack(body, 4096, 0, 0x1000, 1); /* rendezvous id 0 */
    frame(RDMX_OFI_FRAME_RTS, AM_MSG, 0, s, d, NULL, 0, body, 40);
    rdmx__ofi_fin_pack(body, 77, 0);
    frame(RDMX_OFI_FRAME_FIN, 0, 8, s, d, h, 8, body, 16);
    frame(RDMX_OFI_FRAME_FIN, 5, 0, s, d, NULL, 0, body, 16);
    rdmx__ofi_fin_pack(body, 77, 1);
    frame(RDMX_OFI_FRAME_FIN, 0, 0, s, d, NULL, 0, body, 16);
    rdmx__ofi_fin_pack(body, 0, 0);
    frame(RDMX_OFI_FRAME_FIN, 0, 0, s, d, NULL, 0, body, 16);
    raw_marker(a);
    check_server("RTS and FIN of the wrong shape", 7);
    /* well-formed, for a rendezvous the server never sent */
    rdmx__ofi_fin_pack(body, 0x123456789ull, 0);
    frame(RDMX_OFI_FRAME_FIN, 0, 0, s, d, NULL, 0, body, 16);
    raw_marker(a);
    check_server("FIN of a rendezvous never sent", 1);
}

static void case_pairing(const raw_conn_t *a)
{
    uint32_t s = a->src, d = a->srv_id;
    unsigned char h[BIND_SIZE];
    uint64_t dropped = 2; /* (the first two frames below) */

    frame(RDMX_OFI_FRAME_EAGER, AM_MSG, 0, s, 0, NULL, 0, "x", 1);
    frame(RDMX_OFI_FRAME_EAGER, AM_MSG, 0, s + 1000, d, NULL, 0, "x", 1);
    raw_marker(a);
    check_server("MSG with dst 0; src not the endpoint's peer", 2);

    /* Ids that are not ours: none, another generation, and the server's
     * ends of the good client's connection (ids 1..8 of generation 1). */
    frame(RDMX_OFI_FRAME_EAGER, AM_MSG, 0, s, 0x0fffff, NULL, 0, "x", 1);
    frame(RDMX_OFI_FRAME_EAGER, AM_MSG, 0, s, d + (1u << 20), NULL, 0, "x", 1);
    for (uint32_t slot = 1; slot <= 8; slot++) {
        unsigned char rh[20];
        size_t hl = rpc_hdr(rh, RPC_V | 6, 0, 5, 0); /* a PING */
        if (((1u << 20) | slot) == d)
            continue;
        frame(RDMX_OFI_FRAME_EAGER, AM_MSG, 0, s, (1u << 20) | slot, NULL, 0,
              "x", 1);
        frame(RDMX_OFI_FRAME_EAGER, AM_RPC, (unsigned)hl, s, (1u << 20) | slot,
              rh, hl, NULL, 0);
        dropped += 2;
    }
    raw_marker(a);
    check_server_dropped("dst of no endpoint, or of another peer's", 0,
                         dropped);

    bind_hdr(h, WIRE_MAGIC, a->token);
    frame(RDMX_OFI_FRAME_EAGER, AM_BIND, BIND_SIZE, s, 0, h, BIND_SIZE, NULL,
          0);
    frame(RDMX_OFI_FRAME_EAGER, AM_BIND, BIND_SIZE, s, d, h, BIND_SIZE, NULL,
          0);
    raw_marker(a);
    check_server("BIND replayed (dst 0; dst = its endpoint)", 2);
}

static void case_bind(const th_proc_t *srv, const raw_conn_t *a)
{
    unsigned char h[BIND_SIZE], body[RDMX_OFI_RTS_SIZE];
    raw_conn_t b, dd, f, g;

    /* A wrong magic lands on the new endpoint and is refused; the
     * endpoint stays unpaired, so the right BIND then pairs it. */
    b = raw_connect(srv, 0xb0b);
    bind_hdr(h, 0x12345678, b.token);
    frame(RDMX_OFI_FRAME_EAGER, AM_BIND, BIND_SIZE, b.src, 0, h, BIND_SIZE,
          NULL, 0);
    raw_marker(a);
    check_server("BIND with a wrong magic", 1);
    raw_bind(&b);
    raw_marker(a);
    check_server("the right BIND after it", 0);

    dd = raw_connect(srv, 0xd0d);
    bind_hdr(h, WIRE_MAGIC, dd.token ^ 0x5a5a5a5a5a5aull);
    frame(RDMX_OFI_FRAME_EAGER, AM_BIND, BIND_SIZE, dd.src, 0, h, BIND_SIZE,
          NULL, 0);
    raw_marker(a);
    check_server("BIND with a made-up token", 1);
    /* a rendezvous frame posing as a BIND: not a pairing either */
    rdmx__ofi_rts_pack(body, 4096, 1, 0x1000, 1);
    bind_hdr(h, WIRE_MAGIC, dd.token);
    frame(RDMX_OFI_FRAME_RTS, AM_BIND, BIND_SIZE, dd.src, 0, h, BIND_SIZE, body,
          sizeof(body));
    raw_marker(a);
    check_server("an RTS with BIND's id and dst 0", 1);
    raw_bind(&dd);
    raw_marker(a);
    check_server("the right BIND after them", 0);

    /* Two connections under two worker ids: F's endpoint with G's token. */
    f = raw_connect(srv, 0xf0f);
    g = raw_connect(srv, 0x909);
    bind_hdr(h, WIRE_MAGIC, g.token);
    frame(RDMX_OFI_FRAME_EAGER, AM_BIND, BIND_SIZE, f.src, 0, h, BIND_SIZE,
          NULL, 0);
    raw_marker(a);
    check_server("BIND with another connection's token", 1);
    /* Both connections' own BINDs still pair them. */
    raw_bind(&f);
    raw_bind(&g);
    raw_marker(a);
    check_server("the right BINDs after it", 0);
    close(b.fd);
    close(dd.fd);
    close(f.fd);
    close(g.fd);
}

static void case_closed(const th_proc_t *srv, const raw_conn_t *a)
{
    raw_conn_t c = raw_connect(srv, 0xc0c), c2;
    double end = th_now_ms() + 10000.0 * TH_SLOW;

    raw_bind(&c);
    close(c.fd); /* the server closes its endpoint */
    /* until a PING to it goes unanswered: the endpoint is gone */
    while (raw_ping(&c, 500 * TH_SLOW)) {
        CHECKF(th_now_ms() < end, "the server keeps a closed endpoint");
    }
    raw_marker(a);
    check_server_dropped("PING to the endpoint after its close", 0, 1);
    frame(RDMX_OFI_FRAME_EAGER, AM_MSG, 0, c.src, c.srv_id, NULL, 0, "x", 1);
    raw_marker(a);
    check_server_dropped("MSG to a closed endpoint", 0, 1);

    c2 = raw_connect(srv, 0xc0c);
    raw_bind(&c2);
    th_log("closed endpoint 0x%x; the next one is 0x%x%s", c.srv_id, c2.srv_id,
           (c2.srv_id & 0xfffff) == (c.srv_id & 0xfffff)
               ? " (same slot, next generation)"
               : "");
    frame(RDMX_OFI_FRAME_EAGER, AM_MSG, 0, c.src, c.srv_id, NULL, 0, "x", 1);
    frame(RDMX_OFI_FRAME_EAGER, AM_MSG, 0, c2.src, c.srv_id, NULL, 0, "x", 1);
    raw_marker(a);
    check_server_dropped("MSG to the closed id after its slot was reused", 0,
                         2);
    close(c2.fd);
}

static void case_rpc(const th_proc_t *srv, raw_conn_t *a)
{
    uint32_t echo = rdmx_rpc_id("echo");
    uint64_t malformed, too_big, fins;
    unsigned char h[20];
    size_t hl;

    malformed = server_stat("malformed");
    too_big = server_stat("too_big");
    (void)srv;

    /* before the RPC handshake: refused, nothing pulled */
    fins = got.fin_canceled;
    rts_request(a, echo, 1, 1 << 20, 501, 0x1000, 0xbad);
    raw_marker(a);
    check_server("RTS of a REQUEST before the RPC HELLO", 0);
    CHECK(server_stat("malformed") == malformed + 1);
    CHECK(got.fin_canceled == fins + 1);
    malformed++;

    raw_rpc_hello(a);
    hl = rpc_hdr(h, 0x30 | 6, 0, 9, 0); /* version 3 */
    frame(RDMX_OFI_FRAME_EAGER, AM_RPC, (unsigned)hl, a->src, a->srv_id, h, hl,
          NULL, 0);
    raw_marker(a);
    check_server("RPC header of version 3", 0);
    CHECK(server_stat("malformed") == malformed + 1);
    malformed++;

    fins = got.fin_canceled;
    rts_request(a, echo, 2, UINT64_MAX, 502, 0x1000, 0xbad);
    rts_request(a, echo, 3, 1ull << 63, 503, 0x1000, 0xbad);
    raw_marker(a);
    check_server("RTS of 2^64-1 and 2^63 bytes", 0);
    CHECK(server_stat("malformed") == malformed + 2);
    CHECKF(got.fin_canceled == fins + 2, "FINs (canceled) +%llu",
           (unsigned long long)(got.fin_canceled - fins));

    fins = got.fin_canceled;
    rts_request(a, echo, 4, 100ull << 20, 504, 0x1000, 0xbad);
    raw_marker(a);
    check_server("RTS of 100 MiB (max_message 1 MiB)", 0);
    CHECK(server_stat("too_big") == too_big + 1);
    CHECK(got.err_status == RDMX_ERR_TOO_BIG);
    CHECK(got.fin_canceled == fins + 1);

    /* a payload within max_message beside a bulk table that takes the
     * whole past max_receiving (3 MiB): it could never start */
    fins = got.fin_canceled;
    {
        unsigned char body[RDMX_OFI_RTS_SIZE];
        hl = rpc_hdr(h, RPC_V | 1, echo, 5, 3u << 20);
        rdmx__ofi_rts_pack(body, (3u << 20) + (512u << 10), 505, 0x1000, 0xbad);
        frame(RDMX_OFI_FRAME_RTS, AM_RPC, (unsigned)hl, a->src, a->srv_id, h,
              hl, body, sizeof(body));
    }
    raw_marker(a);
    check_server("RTS of 3.5 MiB, 512 KiB of it payload", 0);
    CHECK(server_stat("too_big") == too_big + 2);
    CHECK(got.err_status == RDMX_ERR_TOO_BIG);
    CHECK(got.fin_canceled == fins + 1);
}

/* A pull the server cannot do: nobody registered what the RTS names.
 * On a connection of its own: tcp's provider ends its connection on the
 * first such read (the server's reads fail, its FIN cannot go, the
 * endpoint fails); shm's never answers it, so the server's requests stay
 * in flight until the peer's connection ends. Either way both requests
 * end as errors of "echo", unanswered, and the server serves on. */
static void case_bad_pull(const th_proc_t *srv)
{
    uint32_t echo = rdmx_rpc_id("echo");
    raw_conn_t e = raw_connect(srv, 0xe0e);
    uint64_t errors, open_errors, cq = got.cq_errors, resp = got.rpc[2];

    raw_bind(&e);
    raw_rpc_hello(&e);
    cu_stats_text(good, stats_text, sizeof(stats_text));
    errors = handler_errors("echo");
    rts_request(&e, echo, 11, 64 << 10, 601, 0x10, 0xbadbadbad);
    rts_request(&e, echo, 12, 4096, 602, UINT64_MAX - 100, 0xbadbadbad);
    open_errors = wait_echo_errors(errors + 2, 2000.0) - errors;
    check_server("RTS naming memory nobody registered", 0);
    close(e.fd);
    wait_echo_errors(errors + 2, 5000.0);
    th_log("pulls of unregistered memory: echo errors +%llu while the peer "
           "was connected, +%llu after; FINs with an error %llu, raw "
           "completion errors %llu",
           (unsigned long long)open_errors,
           (unsigned long long)(handler_errors("echo") - errors),
           (unsigned long long)got.fin_failed,
           (unsigned long long)(got.cq_errors - cq));
    CHECKF(handler_errors("echo") == errors + 2,
           "echo errors +%llu, expected +2",
           (unsigned long long)(handler_errors("echo") - errors));
    CHECK(got.rpc[2] == resp); /* never answered */
    check_server("... and after the peer closed", 0);
}

/* max_receiving (the server runs with max_message 1 MiB, max_receiving
 * 3 MiB): large requests whose pulls stay in flight fill a connection's
 * budget; the next waits (waited +1: no answer, no FIN, nothing pulled)
 * and ends with the connection, as the three do; other connections are
 * served meanwhile. Over shm only: there a pull of memory nobody
 * registered stays in flight until the peer's connection ends
 * (case_bad_pull); tcp's provider ends the connection at the first such
 * read, so nothing stays in flight. */
static void case_receiving(const th_proc_t *srv)
{
    uint32_t echo = rdmx_rpc_id("echo");
    raw_conn_t r = raw_connect(srv, 0x5e5);
    uint64_t waited, fins, frames, errors, canceled;

    raw_bind(&r);
    raw_rpc_hello(&r);
    waited = server_stat("waited");
    cu_stats_text(good, stats_text, sizeof(stats_text));
    errors = handler_errors("echo");
    for (uint64_t i = 0; i < 3; i++)
        rts_request(&r, echo, 21 + i, 1 << 20, 621 + i, 0x10, 0xbadbadbad);
    raw_marker(&r);
    check_server("three 1 MiB pulls that stay in flight (3 MiB)", 0);
    CHECK(server_stat("waited") == waited);
    /* one byte more than the budget holds: it waits */
    fins = got.fin_canceled + got.fin_failed;
    frames = got.rpc[2] + got.rpc[3];
    rts_request(&r, echo, 24, 1, 624, 0x10, 0xbadbadbad);
    raw_marker(&r);
    check_server("a fourth request over max_receiving", 0);
    CHECKF(server_stat("waited") == waited + 1, "waited +%llu, expected +1",
           (unsigned long long)(server_stat("waited") - waited));
    CHECKF(got.rpc[2] + got.rpc[3] == frames &&
               got.fin_canceled + got.fin_failed == fins,
           "the waiting request was answered or its descriptor released");
    /* a CANCEL finds the waiting request */
    canceled = server_stat("canceled");
    {
        unsigned char ch[20];
        size_t chl = rpc_hdr(ch, RPC_V | 5, 0, 24, 0);
        frame(RDMX_OFI_FRAME_EAGER, AM_RPC, (unsigned)chl, r.src, r.srv_id, ch,
              chl, NULL, 0);
    }
    raw_marker(&r);
    check_server("a CANCEL of the waiting request", 0);
    CHECKF(server_stat("canceled") == canceled + 1, "canceled +%llu",
           (unsigned long long)(server_stat("canceled") - canceled));
    /* the peer's connection ends: the three pulls fail, the fourth's
     * descriptor goes back; all four end as errors of "echo" */
    close(r.fd);
    wait_echo_errors(errors + 4, 5000.0);
    CHECKF(handler_errors("echo") == errors + 4,
           "echo errors +%llu, expected +4",
           (unsigned long long)(handler_errors("echo") - errors));
    check_server("... and after the peer closed", 0);
}

static void case_flood(const th_proc_t *srv)
{
    uint32_t echo = rdmx_rpc_id("echo");
    raw_conn_t h = raw_connect(srv, 0x404);
    unsigned char junk[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    uint64_t malformed, fins, errs;
    double t0;

    raw_bind(&h);
    raw_rpc_hello(&h);
    malformed = server_stat("malformed");
    fins = got.fin_canceled;
    errs = got.rpc[3];
    t0 = th_now_ms();
    for (int i = 0; i < 4000; i++)
        raw_send(junk, sizeof(junk));
    for (int i = 0; i < 200; i++)
        rts_request(&h, echo, 700 + (uint64_t)i, UINT64_MAX, 700 + (uint64_t)i,
                    0x1000, 1);
    raw_marker(&h);
    th_log("flood of 4,200 frames handled in %.0f ms", th_now_ms() - t0);
    check_server("flood: 4,000 garbage frames, 200 RTS", 4000);
    CHECK(server_stat("malformed") == malformed + 200);
    raw_spin(20);
    CHECKF(got.fin_canceled == fins + 200 && got.rpc[3] == errs + 200,
           "flood: FINs +%llu, ERRORs +%llu",
           (unsigned long long)(got.fin_canceled - fins),
           (unsigned long long)(got.rpc[3] - errs));
    close(h.fd);
}

int main(int argc, char **argv)
{
    const char *tr = getenv("RDMX_TRANSPORT");
    char log[128], text[8192];
    th_proc_t srv;
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    raw_conn_t a;
    const char *prov;

    if (argc > 1 && strcmp(argv[1], CU_SERVER_ROLE) == 0)
        return cu_server_main(argc - 2, argv + 2);
    th_init("ofi_frames", 120);
    CHECKF(tr != NULL && strncmp(tr, "ofi:", 4) == 0,
           "RDMX_TRANSPORT=ofi:tcp or ofi:shm, not %s", tr ? tr : "unset");
    prov = strcmp(tr, "ofi:tcp") == 0 ? "tcp;ofi_rxm" : tr + 4;
    cu_log_path(log, sizeof(log), "ofi-frames");
    cu_spawn_logged(&srv, log, CU_SERVER_ROLE, 30000, "--workers", "1",
                    "--max-message", "1048576", "--max-receiving", "3145728",
                    NULL);
    ctx = th_context();
    w = th_worker(ctx, 0);
    good = cu_channel(w, srv.addr, 10000, -1);
    server_wstats(&last_ws);

    raw_open(prov);
    a = raw_connect(&srv, 0xa0a);
    raw_bind(&a);
    th_log("raw peer bound: its endpoint 0x%x, the server's 0x%x", a.src,
           a.srv_id);
    raw_marker(&a);
    check_server("a well-formed raw connection", 0);

    case_malformed(&a);
    case_pairing(&a);
    case_bind(&srv, &a);
    case_closed(&srv, &a);
    case_rpc(&srv, &a);
    close(a.fd);
    case_bad_pull(&srv);
    if (strcmp(prov, "shm") == 0)
        case_receiving(&srv);
    case_flood(&srv);

    raw_spin(20);
    raw_close();
    rdmx_channel_destroy(good);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    th_kill(&srv, SIGTERM);
    th_check_exit_ok("server", th_wait_exit(&srv, 20000));
    cu_read_file(log, text, sizeof(text));
    unlink(log);
    CHECKF(strstr(text, "shut down after") != NULL, "server log:\n%s", text);
    th_log("PASS");
    return 0;
}
