/*
 * ucx_am_rpc — the smallest RPC that can be built on UCX active messages, as
 * a reference for rdmx-perf's rpc_lat and rpc_rate: the client sends a
 * request (an AM with an H-byte header and an S-byte payload), the server's
 * AM callback answers it at once with the same header and payload on its
 * endpoint, the client's AM callback counts the answer. No matching, no
 * call records, no deadlines, no credits: what is left is UCX.
 *
 * -m put: the same request/response by one-sided writes instead (the
 * design of docs/RPC_RINGS.md, bare). Each side maps a ring of WINDOW
 * slots (ucp_mem_map, allocated by UCX so that shared memory can map it)
 * and sends the other its address and rkey in one AM. A call is one
 * ucp_put_nbx of [payload | length | sequence] into the server's slot
 * (sequence % WINDOW); the server polls its next slot's sequence word,
 * answers with one put of the same shape into the client's slot, and the
 * client polls that. The sequence word is the record's last 8 bytes: a
 * reader that sees it sees the bytes before it as long as the put lands in
 * order (x86 stores with a forward copy, UCX's shared-memory put; on RDMA
 * an RC write). Neither side calls ucp_worker_progress while it waits
 * except every 4096th empty poll (for the quit message and errors).
 * -m ptr: the same rings, written with plain stores through the pointer
 * ucp_rkey_ptr gives where the peer's ring is mapped into this process
 * (shared memory), the sequence word last with a release store.
 *
 *   ucx_am_rpc -l PORT [-e] [-m am|put]          server on 127.0.0.1 (one
 * client) ucx_am_rpc HOST:PORT -t lat|rate [-s SIZE] [-H HDR] [-n N] [-w
 * WARMUP]
 *              [-W WINDOW] [-e] [-m am|put]      client
 *
 * Connection setup is UCX's sockaddr client/server mode, like rdmx's. -e
 * creates both endpoints with UCP_ERR_HANDLING_MODE_PEER (rdmx's mode; set
 * UCX_MM_ERROR_HANDLING=y as well for shared memory). Transports come from
 * UCX_TLS / UCX_NET_DEVICES as for ucx_perftest.
 *
 * lat: one call at a time, p50 / p99 / mean of the round trip (us), one
 * clock_gettime per call (as rdmx-perf). rate: up to WINDOW calls in flight,
 * calls per second over the measured calls. Output: one line
 *   ucx_am_rpc test=lat size=64 hdr=0 iters=N p50_us=.. p99_us=.. avg_us=..
 *   calls_per_s=..
 *
 * Build (bench/vs-ucx.sh does this, after make):
 *   cc -O2 -I tools/common -o ucx_am_rpc bench/ucx_am_rpc.c \
 *      build/lib/librdmx_tools_common.a -lucp -lucs
 */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>

#include "bench.h"
#include "options.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define AM_REQ  11
#define AM_RESP 12
#define AM_QUIT 13
#define AM_RING       14   /* -m put: header ring_hdr_t, data the rkey */
#define SLOTS   4096 /* payload copies the server keeps while UCX sends */
#define IDLE_PROGRESS 4096 /* -m put: empty polls between two progress calls   \
                            */

static ucp_context_h g_ctx;
static ucp_worker_h g_worker;
static ucp_ep_h g_ep;
static int g_err_mode;
static volatile int g_failed;

/* server */
static int g_quit;
static unsigned char *g_slots;
static size_t g_slot_size;
static unsigned g_slot;
static unsigned g_pending_sends;

/* client */
static uint64_t g_done;

/* -m put: this side's ring, the peer's, and one record staged for a put */
typedef struct {
    uint64_t addr;
    uint32_t slots, stride, rec_len, pad;
} ring_hdr_t;

static int g_put, g_ptr;          /* -m put; -m ptr (both set) */
static unsigned char *g_peer_ptr; /* -m ptr: the peer's ring, mapped here */
static ucp_mem_h g_ring_memh;
static unsigned char *g_ring;
static size_t g_rec_len; /* payload, length (u32), pad (u32), sequence (u64) */
static uint32_t g_ring_slots, g_stride;
static ucp_rkey_h g_peer_rkey;
static uint64_t g_peer_addr;
static unsigned char g_peer_rkey_buf[1024];
static size_t g_peer_rkey_len;
static volatile int g_peer_ring; /* the peer's AM_RING arrived */
static unsigned char *g_stage;

static void die(const char *what, ucs_status_t st)
{
    fprintf(stderr, "ucx_am_rpc: %s: %s\n", what, ucs_status_string(st));
    exit(1);
}

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    (void)status;
    g_failed = 1;
}

static void send_cb(void *req, ucs_status_t status, void *user_data)
{
    (void)status;
    (void)user_data;
    g_pending_sends--;
    ucp_request_free(req);
}

static void send_am(unsigned id, const void *hdr, size_t hlen,
                    const void *data, size_t len)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
        .cb.send = send_cb,
    };
    ucs_status_ptr_t r = ucp_am_send_nbx(g_ep, id, hdr, hlen, data, len, &p);

    if (UCS_PTR_IS_ERR(r)) {
        die("am send", UCS_PTR_STATUS(r));
    }
    if (r != NULL) {
        g_pending_sends++;
    }
}

/* Server: answer a request with its header and payload. The payload is
 * copied into a slot that outlives a send UCX could not finish at once. */
static ucs_status_t req_cb(void *arg, const void *header, size_t hlen,
                           void *data, size_t len,
                           const ucp_am_recv_param_t *param)
{
    static unsigned char hdr_copy[SLOTS][64];
    unsigned s = g_slot++ % SLOTS;
    unsigned char *slot = g_slots + (size_t)s * g_slot_size;

    (void)arg;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV || len > g_slot_size ||
        hlen > sizeof(hdr_copy[0])) {
        fprintf(stderr, "ucx_am_rpc: request too large\n");
        exit(1);
    }
    memcpy(slot, data, len);
    memcpy(hdr_copy[s], header, hlen);
    send_am(AM_RESP, hdr_copy[s], hlen, slot, len);
    return UCS_OK;
}

static ucs_status_t quit_cb(void *arg, const void *header, size_t hlen,
                            void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    (void)arg, (void)header, (void)hlen, (void)data, (void)len, (void)param;
    g_quit = 1;
    return UCS_OK;
}

/* Either side: the peer's ring (-m put). Kept for the main loop, which
 * unpacks the rkey. */
static ucs_status_t ring_cb(void *arg, const void *header, size_t hlen,
                            void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    ring_hdr_t rh;

    (void)arg;
    if (hlen != sizeof(rh) || len > sizeof(g_peer_rkey_buf) ||
        (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        fprintf(stderr, "ucx_am_rpc: bad ring message\n");
        exit(1);
    }
    memcpy(&rh, header, sizeof(rh));
    g_peer_addr = rh.addr;
    g_ring_slots = rh.slots;
    g_stride = rh.stride;
    g_rec_len = rh.rec_len;
    if (g_ring_slots == 0 || g_rec_len < 2 * sizeof(uint64_t) ||
        g_stride < g_rec_len || g_rec_len % sizeof(uint64_t) != 0) {
        fprintf(stderr, "ucx_am_rpc: bad ring geometry\n");
        exit(1);
    }
    memcpy(g_peer_rkey_buf, data, len);
    g_peer_rkey_len = len;
    g_peer_ring = 1;
    return UCS_OK;
}

/* Client: an answer arrived. */
static ucs_status_t resp_cb(void *arg, const void *header, size_t hlen,
                            void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    (void)arg, (void)header, (void)hlen, (void)data, (void)len, (void)param;
    g_done++;
    return UCS_OK;
}

static void set_handler(unsigned id, ucp_am_recv_callback_t cb)
{
    ucp_am_handler_param_t p = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                      UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id = id,
        .cb = cb,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
    };
    ucs_status_t st = ucp_worker_set_am_recv_handler(g_worker, &p);

    if (st != UCS_OK) {
        die("set AM handler", st);
    }
}

static void init(void)
{
    ucp_params_t cp = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features = UCP_FEATURE_AM | (g_put ? UCP_FEATURE_RMA : 0),
    };
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    ucs_status_t st;

    if ((st = ucp_init(&cp, NULL, &g_ctx)) != UCS_OK) {
        die("ucp_init", st);
    }
    if ((st = ucp_worker_create(g_ctx, &wp, &g_worker)) != UCS_OK) {
        die("ucp_worker_create", st);
    }
}

static void fill_ep_params(ucp_ep_params_t *ep)
{
    ep->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep->err_handler.cb = ep_err_cb;
    ep->err_handler.arg = NULL;
    ep->err_mode =
        g_err_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
}

static void conn_cb(ucp_conn_request_h req, void *arg)
{
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST,
        .conn_request = req,
    };
    ucs_status_t st;

    (void)arg;
    if (g_ep != NULL) {
        ucp_listener_reject(*(ucp_listener_h *)arg, req);
        return;
    }
    fill_ep_params(&ep);
    if ((st = ucp_ep_create(g_worker, &ep, &g_ep)) != UCS_OK) {
        die("accept", st);
    }
}

static void close_ep(void)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_EP_CLOSE_FLAG_FORCE,
    };
    ucs_status_ptr_t r;

    if (g_ep == NULL) {
        return;
    }
    r = ucp_ep_close_nbx(g_ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) {
            ucp_worker_progress(g_worker);
        }
        ucp_request_free(r);
    }
    g_ep = NULL;
}

/* --- -m put: rings written by the peer --------------------------------- */

static volatile uint64_t *slot_seq(unsigned char *ring, uint64_t seq)
{
    return (volatile uint64_t *)(ring + (seq % g_ring_slots) * g_stride +
                                 g_rec_len - sizeof(uint64_t));
}

/* Map this side's ring (g_ring_slots x g_stride, zeroed) and send the peer its
 * address and rkey. */
static void ring_offer(void)
{
    ucp_mem_map_params_t mp = {
        .field_mask =
            UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .length = (size_t)g_ring_slots * g_stride,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ring_hdr_t rh;
    void *rkey;
    size_t rkey_len;
    ucs_status_t st;

    if ((st = ucp_mem_map(g_ctx, &mp, &g_ring_memh)) != UCS_OK) {
        die("ucp_mem_map", st);
    }
    if ((st = ucp_mem_query(g_ring_memh, &ma)) != UCS_OK) {
        die("ucp_mem_query", st);
    }
    g_ring = ma.address;
    memset(g_ring, 0, (size_t)g_ring_slots * g_stride);
    if ((st = ucp_rkey_pack(g_ctx, g_ring_memh, &rkey, &rkey_len)) != UCS_OK) {
        die("ucp_rkey_pack", st);
    }
    rh.addr = (uint64_t)(uintptr_t)g_ring;
    rh.slots = g_ring_slots;
    rh.stride = g_stride;
    rh.rec_len = (uint32_t)g_rec_len;
    rh.pad = 0;
    send_am(AM_RING, &rh, sizeof(rh), rkey, rkey_len);
    while (g_pending_sends > 0 && !g_failed) {
        ucp_worker_progress(g_worker);
    }
    ucp_rkey_buffer_release(rkey);
}

/* Wait for the peer's ring and unpack its rkey. */
static void ring_take(void)
{
    ucs_status_t st;

    while (!g_peer_ring && !g_failed) {
        ucp_worker_progress(g_worker);
    }
    if (g_failed) {
        die("ring exchange", UCS_ERR_CONNECTION_RESET);
    }
    st = ucp_ep_rkey_unpack(g_ep, g_peer_rkey_buf, &g_peer_rkey);
    if (st != UCS_OK) {
        die("ucp_ep_rkey_unpack", st);
    }
    if (g_ptr && (st = ucp_rkey_ptr(g_peer_rkey, g_peer_addr,
                                    (void **)&g_peer_ptr)) != UCS_OK) {
        die("ucp_rkey_ptr (the peer's ring is not mapped here)", st);
    }
}

static void ring_free(void)
{
    if (g_peer_rkey != NULL) {
        ucp_rkey_destroy(g_peer_rkey);
    }
    if (g_ring_memh != NULL) {
        ucp_mem_unmap(g_ctx, g_ring_memh);
    }
}

/* Put the staged record (sequence @seq) into the peer's slot for @seq. */
static void put_record(uint64_t seq)
{
    ucp_request_param_t p = {.op_attr_mask = 0};
    ucs_status_ptr_t r;

    if (g_ptr) {
        unsigned char *slot = g_peer_ptr + (seq % g_ring_slots) * g_stride;

        memcpy(slot, g_stage, g_rec_len - sizeof(seq));
        __atomic_store_n((uint64_t *)(slot + g_rec_len - sizeof(seq)), seq,
                         __ATOMIC_RELEASE);
        return;
    }
    memcpy(g_stage + g_rec_len - sizeof(seq), &seq, sizeof(seq));
    r = ucp_put_nbx(g_ep, g_stage, g_rec_len,
                    g_peer_addr + (seq % g_ring_slots) * g_stride, g_peer_rkey,
                    &p);
    if (UCS_PTR_IS_ERR(r)) {
        die("put", UCS_PTR_STATUS(r));
    }
    if (r != NULL) { /* (not on shared memory: a put there is a copy) */
        while (ucp_request_check_status(r) == UCS_INPROGRESS) {
            ucp_worker_progress(g_worker);
        }
        ucp_request_free(r);
    }
}

/* Wait until this side's slot for @seq holds @seq. */
static void wait_slot(uint64_t seq)
{
    volatile uint64_t *w = slot_seq(g_ring, seq);
    unsigned idle = 0;

    while (__atomic_load_n(w, __ATOMIC_ACQUIRE) != seq) {
        if (++idle == IDLE_PROGRESS) {
            idle = 0;
            ucp_worker_progress(g_worker);
            if (g_failed || g_quit) {
                return;
            }
        }
    }
}

/* Server, -m put: answer each request in sequence with its payload. */
static void serve_put(void)
{
    uint64_t seq = 1;

    ring_take();
    if ((g_stage = calloc(1, g_rec_len)) == NULL) {
        fprintf(stderr, "ucx_am_rpc: out of memory\n");
        exit(1);
    }
    ring_offer();
    while (!g_quit && !g_failed) {
        unsigned char *slot;
        uint32_t len;

        wait_slot(seq);
        if (g_quit || g_failed) {
            break;
        }
        slot = g_ring + (seq % g_ring_slots) * g_stride;
        memcpy(&len, slot + g_rec_len - 2 * sizeof(uint64_t), sizeof(len));
        if (len > g_rec_len - 2 * sizeof(uint64_t)) {
            fprintf(stderr, "ucx_am_rpc: bad record length %u\n", len);
            exit(1);
        }
        memcpy(g_stage, slot, len);
        memcpy(g_stage + g_rec_len - 2 * sizeof(uint64_t), &len, sizeof(len));
        put_record(seq);
        seq++;
    }
}

static int run_server(int port)
{
    static ucp_listener_h listener;
    struct sockaddr_in sa = {
        .sin_family = AF_INET,
        .sin_port = htons((uint16_t)port),
        .sin_addr.s_addr = htonl(INADDR_LOOPBACK), /* loopback only */
    };
    ucp_listener_params_t lp = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof(sa)},
        .conn_handler = {.cb = conn_cb, .arg = &listener},
    };
    ucs_status_t st;

    g_slot_size = 1 << 16;
    g_slots = malloc((size_t)SLOTS * g_slot_size);
    if (g_slots == NULL) {
        fprintf(stderr, "ucx_am_rpc: out of memory\n");
        return 1;
    }
    set_handler(AM_REQ, req_cb);
    set_handler(AM_QUIT, quit_cb);
    set_handler(AM_RING, ring_cb);
    if ((st = ucp_listener_create(g_worker, &lp, &listener)) != UCS_OK) {
        die("listen", st);
    }
    printf("listening on port %d\n", port);
    fflush(stdout);
    if (g_put) {
        serve_put();
    }
    while (!g_quit && !g_failed) {
        ucp_worker_progress(g_worker);
    }
    while (g_pending_sends > 0 && !g_failed) {
        ucp_worker_progress(g_worker);
    }
    close_ep();
    ring_free();
    ucp_listener_destroy(listener);
    free(g_slots);
    free(g_stage);
    return 0;
}

static void wait_done(uint64_t target)
{
    while (g_done < target) {
        ucp_worker_progress(g_worker);
        if (g_failed) {
            fprintf(stderr, "ucx_am_rpc: the connection failed\n");
            exit(1);
        }
    }
}

/* Client: tell the server to quit, then disconnect. */
static void quit_server(void)
{
    send_am(AM_QUIT, NULL, 0, NULL, 0);
    while (g_pending_sends > 0) {
        ucp_worker_progress(g_worker);
    }
    /* let the quit arrive before the disconnect can overtake it */
    for (uint64_t end = now_ns() + 50000000ull; now_ns() < end;) {
        ucp_worker_progress(g_worker);
    }
    close_ep();
}

/* The report line of a client run (both modes). */
static void report(const char *test, size_t size, size_t hlen, uint64_t iters,
                   uint64_t window, int lat, uint64_t *samples, uint64_t t0,
                   uint64_t t1)
{
    printf("ucx_am_rpc test=%s mode=%s size=%zu hdr=%zu iters=%llu "
           "window=%llu",
           test,
           g_ptr   ? "ptr"
           : g_put ? "put"
                   : "am",
           size, hlen, (unsigned long long)iters,
           (unsigned long long)(lat ? 1 : window));
    if (lat) {
        double sum = 0;

        for (uint64_t i = 0; i < iters; i++) {
            sum += (double)samples[i];
        }
        qsort(samples, iters, sizeof(*samples), cmp_u64);
        printf(" p50_us=%.4f p99_us=%.4f avg_us=%.4f",
               (double)samples[(iters - 1) / 2] / 1e3,
               (double)samples[(uint64_t)((double)(iters - 1) * 0.99)] / 1e3,
               sum / (double)iters / 1e3);
    }
    printf(" calls_per_s=%.1f\n", (double)iters / ((double)(t1 - t0) / 1e9));
}

/* Client, -m put: @warmup then @iters calls, one at a time (@lat) or up to
 * @window in flight; the report; the quit. */
static int run_client_put(int lat, size_t size, uint64_t iters, uint64_t warmup,
                          uint64_t window, uint64_t *samples)
{
    uint64_t seq = 0, t0 = 0, t1, last = 0;

    for (int phase = 0; phase < 2; phase++) {
        uint64_t n = phase == 0 ? warmup : iters, base = seq, posted = 0;
        uint64_t done = 0;
        unsigned idle = 0;

        if (phase == 1) {
            last = t0 = now_ns();
        }
        while (done < n) {
            while (posted < n && posted - done < (lat ? 1 : window)) {
                put_record(base + ++posted);
            }
            if (__atomic_load_n(slot_seq(g_ring, base + done + 1),
                                __ATOMIC_ACQUIRE) == base + done + 1) {
                done++;
                if (lat && phase == 1) {
                    uint64_t now = now_ns();

                    samples[done - 1] = now - last;
                    last = now;
                }
            } else if (++idle == IDLE_PROGRESS) {
                idle = 0;
                ucp_worker_progress(g_worker);
                if (g_failed) {
                    fprintf(stderr, "ucx_am_rpc: the connection failed\n");
                    return 1;
                }
            }
        }
        seq = base + n;
    }
    t1 = lat ? last : now_ns();
    report(lat ? "lat" : "rate", size, 0, iters, window, lat, samples, t0, t1);
    quit_server();
    ring_free();
    free(g_stage);
    return 0;
}

static int run_client(const char *address, const char *test, size_t size,
                      size_t hlen, uint64_t iters, uint64_t warmup,
                      uint64_t window)
{
    char host[256];
    const char *colon = strrchr(address, ':');
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM},
                    *res;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR,
        .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
    };
    unsigned char *payload = calloc(1, size ? size : 1);
    unsigned char hdr[64] = {0};
    uint64_t *samples = calloc(iters + 1, sizeof(uint64_t));
    int lat = strcmp(test, "lat") == 0;
    uint64_t t0, t1, posted = 0;
    ucs_status_t st;

    if (colon == NULL || (size_t)(colon - address) >= sizeof(host) ||
        payload == NULL || samples == NULL || hlen > sizeof(hdr)) {
        fprintf(stderr, "ucx_am_rpc: bad arguments\n");
        return 2;
    }
    memcpy(host, address, (size_t)(colon - address));
    host[colon - address] = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) {
        fprintf(stderr, "ucx_am_rpc: cannot resolve %s\n", address);
        return 2;
    }
    ep.sockaddr.addr = res->ai_addr;
    ep.sockaddr.addrlen = res->ai_addrlen;
    fill_ep_params(&ep);
    set_handler(AM_RESP, resp_cb);
    if ((st = ucp_ep_create(g_worker, &ep, &g_ep)) != UCS_OK) {
        die("connect", st);
    }
    freeaddrinfo(res);

    if (g_put) {
        /* records: the payload, its length, the sequence; a slot per
         * call in flight */
        g_rec_len = (size + 7) / 8 * 8 + 2 * sizeof(uint64_t);
        g_stride = (uint32_t)((g_rec_len + 63) / 64 * 64);
        g_ring_slots = (uint32_t)window;
        if ((g_stage = calloc(1, g_rec_len)) == NULL) {
            fprintf(stderr, "ucx_am_rpc: out of memory\n");
            return 1;
        }
        memcpy(g_stage + g_rec_len - 2 * sizeof(uint64_t),
               &(uint32_t){(uint32_t)size}, sizeof(uint32_t));
        set_handler(AM_RING, ring_cb);
        ring_offer();
        ring_take();
        int rc = run_client_put(lat, size, iters, warmup, window, samples);

        free(payload);
        free(samples);
        return rc;
    }
    /* warm-up (also completes the connection) */
    for (uint64_t i = 0; i < warmup; i++) {
        send_am(AM_REQ, hdr, hlen, payload, size);
        wait_done(i + 1);
    }
    g_done = 0;
    t0 = now_ns();
    if (lat) {
        uint64_t last = t0;

        for (uint64_t i = 0; i < iters; i++) {
            uint64_t now;

            send_am(AM_REQ, hdr, hlen, payload, size);
            wait_done(i + 1);
            now = now_ns();
            samples[i] = now - last;
            last = now;
        }
        t1 = last;
    } else {
        while (g_done < iters) {
            while (posted < iters && posted - g_done < window) {
                send_am(AM_REQ, hdr, hlen, payload, size);
                posted++;
            }
            ucp_worker_progress(g_worker);
            if (g_failed) {
                fprintf(stderr, "ucx_am_rpc: the connection failed\n");
                return 1;
            }
        }
        t1 = now_ns();
    }
    while (g_pending_sends > 0) {
        ucp_worker_progress(g_worker);
    }
    report(test, size, hlen, iters, window, lat, samples, t0, t1);
    quit_server();
    free(payload);
    free(samples);
    return 0;
}

int main(int argc, char **argv)
{
    const char *test = "lat", *address = NULL;
    size_t size = 64, hlen = 0;
    uint64_t iters = 100000, warmup = 10000, window = 32;
    uint16_t lport = 0;
    int port = -1, c, rc, bad = 0;

    while ((c = getopt(argc, argv, "l:t:s:H:n:w:W:m:eh")) != -1) {
        switch (c) {
        case 'l':
            bad = opt_port(optarg, &lport) < 0;
            port = lport;
            break;
        case 't':
            test = optarg;
            break;
        case 's':
            bad = opt_size(optarg, &size) < 0;
            break;
        case 'H':
            bad = opt_size(optarg, &hlen) < 0;
            break;
        case 'n':
            bad = opt_uint(optarg, 0, UINT64_MAX, &iters) < 0;
            break;
        case 'w':
            bad = opt_uint(optarg, 0, UINT64_MAX, &warmup) < 0;
            break;
        case 'W':
            bad = opt_uint(optarg, 0, UINT64_MAX, &window) < 0;
            break;
        case 'e':
            g_err_mode = 1;
            break;
        case 'm':
            g_ptr = strcmp(optarg, "ptr") == 0;
            g_put = g_ptr || strcmp(optarg, "put") == 0;
            bad = !g_put && strcmp(optarg, "am") != 0;
            break;
        default:
            fprintf(stderr, "usage: ucx_am_rpc -l PORT [-e] [-m am|put|ptr] | "
                            "HOST:PORT -t lat|rate [-s SIZE] [-H HDR] [-n N] "
                            "[-w WARMUP] [-W WINDOW] [-e] [-m am|put|ptr]\n");
            return 2;
        }
        if (bad) {
            fprintf(stderr, "ucx_am_rpc: -%c '%s': %s\n", c, optarg,
                    c == 'm' ? "am, put or ptr" : opt_error());
            return 2;
        }
    }
    if (port < 0 && optind + 1 != argc) {
        fprintf(stderr, "ucx_am_rpc: a server address or -l PORT\n");
        return 2;
    }
    if (port < 0) {
        address = argv[optind];
    }
    if (iters == 0 || window == 0 || size > (1 << 16) ||
        (g_put && window > (1 << 16)) ||
        (strcmp(test, "lat") != 0 && strcmp(test, "rate") != 0)) {
        fprintf(stderr, "ucx_am_rpc: bad arguments\n");
        return 2;
    }
    init();
    rc = port >= 0 ? run_server(port)
                   : run_client(address, test, size, hlen, iters, warmup,
                                window);
    ucp_worker_destroy(g_worker);
    ucp_cleanup(g_ctx);
    return rc;
}
