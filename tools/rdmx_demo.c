/*
 * rdmx-demo: the four kinds of rdmx transfer between two processes, and a
 * function shipped to run next to the data.
 *
 *   rdmx-demo MODE --listen PORT [--host H] [options]   (server)
 *   rdmx-demo MODE HOST:PORT [options]                   (client)
 *
 * MODE is send, write, read, atomic or lambda. The server serves one client
 * and exits. The client connects and says hello (mode, size, seed); for
 * write, read and atomic the server allocates memory, packs a descriptor and
 * sends it; then:
 *   send    the client sends SIZE bytes; the server verifies them.
 *   write   the client writes SIZE bytes with put-with-notify; the server
 *           verifies them in its notify callback.
 *   read    the server fills SIZE bytes; the client reads them with get and
 *           verifies them.
 *   atomic  the client runs fetch-add and compare-and-swap (one that swaps,
 *           one that must not); it checks the old values, the server checks
 *           the final ones.
 * The data is a pattern derived from a seed, so each side verifies without
 * a copy. The client reports its outcome (DONE), the server answers with
 * its own (RESULT); each exits 0 only if both sides succeeded.
 *
 *   lambda  the server is an RPC server with a lambda engine
 *           (rdmx_lambda_register_handlers: "lambda.eval", "lambda.call",
 *           "lambda.native"; docs/LAMBDA.md). The client ships a Lua
 *           function with SIZE bytes of input (by default a built-in
 *           function that computes the FNV-1a checksum of its input, which
 *           the client verifies against its own computation), calls it a
 *           second time by hash (the server's cache), times both, and shows
 *           an endless loop stopped by the server's budget. It reports its
 *           outcome with "demo.done"; "demo.stats" gives the engine's
 *           counters. With --serve the server keeps serving any number of
 *           clients until SIGTERM or SIGINT (tests/test_lambda_rpc.c runs it
 *           so).
 */
#define _GNU_SOURCE
#include <rdmx/lambda.h>
#include <rdmx/rdmx.h>

#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEMO_MAGIC         0x31444d52u /* "RMD1" */
#define DEMO_MAX_BLOB      16384
#define DEMO_TEXT          200
#define CONNECT_TIMEOUT_MS 10000
#define STEP_TIMEOUT_MS    60000
#define ATOMIC_ADD         42

enum { MODE_SEND, MODE_WRITE, MODE_READ, MODE_ATOMIC, MODE_LAMBDA, MODE_COUNT };
static const char *mode_names[MODE_COUNT] = {"send", "write", "read",
                                             "atomic", "lambda"};

enum { MSG_HELLO = 1, MSG_DESC, MSG_DONE, MSG_RESULT };

/* Control message; a descriptor follows the header in MSG_DESC. */
typedef struct {
    uint32_t magic;
    uint32_t type;
    uint32_t mode;
    int32_t status; /* MSG_DONE / MSG_RESULT: RDMX_OK or an error */
    uint64_t size;
    uint64_t seed;
    uint64_t value[2]; /* atomic: initial words */
    uint32_t blob_len;
    char text[DEMO_TEXT]; /* what went wrong, for the other side */
    uint8_t blob[DEMO_MAX_BLOB];
} demo_msg_t;

#define DEMO_HDR offsetof(demo_msg_t, blob)

static const char *prog = "rdmx-demo";
static int g_mode = -1;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt,
                                                                ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", prog);
    if (g_mode >= 0)
        fprintf(stderr, "%s: ", mode_names[g_mode]);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Fail with the status and the library's detail of the last error. */
__attribute__((noreturn)) static void die_st(const char *what, rdmx_status_t st)
{
    const char *detail = rdmx_error_detail();
    char copy[256];

    snprintf(copy, sizeof(copy), "%s", detail ? detail : "");
    die("%s failed: %s (%s)%s%s", what, rdmx_strerror(st), rdmx_status_name(st),
        copy[0] ? ": " : "", copy);
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void pattern_fill(uint8_t *buf, size_t len, uint64_t seed)
{
    size_t i;

    for (i = 0; i + 8 <= len; i += 8) {
        uint64_t w = mix64(seed + i / 8);

        memcpy(buf + i, &w, 8);
    }
    if (i < len) {
        uint64_t w = mix64(seed + i / 8);

        memcpy(buf + i, &w, len - i);
    }
}

/* Index of the first wrong byte, or -1. */
static int64_t pattern_check(const uint8_t *buf, size_t len, uint64_t seed)
{
    size_t i;

    for (i = 0; i < len; i += 8) {
        uint64_t w = mix64(seed + i / 8);
        size_t n = len - i < 8 ? len - i : 8, j;

        if (memcmp(buf + i, &w, n) != 0) {
            const uint8_t *wb = (const uint8_t *)&w;

            for (j = 0; j < n; j++)
                if (buf[i + j] != wb[j])
                    return (int64_t)(i + j);
        }
    }
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s MODE --listen PORT [--host H] [options]   (server)\n"
            "       %s MODE HOST:PORT [options]                   (client)\n"
            "\n"
            "MODE:\n"
            "  send    client sends SIZE bytes, server verifies them\n"
            "  write   client writes SIZE bytes into server memory with\n"
            "          put-with-notify, server verifies them when notified\n"
            "  read    server fills SIZE bytes, client reads them with get\n"
            "          and verifies them\n"
            "  atomic  client runs fetch-add and compare-and-swap on server\n"
            "          memory; both sides verify the values\n"
            "  lambda  client ships a Lua function with SIZE bytes of input "
            "to the\n"
            "          server's sandbox (built-in: the FNV-1a checksum of "
            "the input,\n"
            "          verified here), calls it again by hash (cached "
            "there), and\n"
            "          shows an endless loop stopped by the server's budget\n"
            "\n"
            "options:\n"
            "  --listen PORT     serve one client on PORT (0: any free port;\n"
            "                    the chosen one is printed as\n"
            "                    \"listening on HOST:PORT\")\n"
            "  --host H          address to listen on (default 0.0.0.0)\n"
            "  --transport T     auto, shm, tcp, rdma (UCX) or "
            "ofi[:PROVIDER]\n"
            "                    (libfabric) (default: $RDMX_TRANSPORT, "
            "else auto)\n"
            "  --size N          bytes to move, with K/M/G suffixes "
            "(default 1M;\n"
            "                    lambda: bytes of input, default 64K)\n"
            "  --help            this text\n"
            "\n"
            "lambda, server (an RPC server with lambda.eval/call/native,\n"
            "docs/LAMBDA.md):\n"
            "  --serve           serve any number of clients until SIGTERM "
            "or SIGINT\n"
            "  --workers N       RPC worker threads (default 1)\n"
            "  --plugin-dir DIR  load the native plugins DIR/*.so\n"
            "  --max-instructions N  work units per call (default 10M)\n"
            "  --max-memory SIZE     Lua memory per call (default 64M)\n"
            "  --max-time-ms MS      wall-clock limit per call (default "
            "1000; 0: only\n"
            "                        the caller's deadline)\n"
            "  --cache N         compiled functions kept (default 256; 0: "
            "no cache)\n"
            "lambda, client:\n"
            "  --function FILE   ship FILE.lua instead of the built-in "
            "function (its\n"
            "                    output is printed, not verified)\n"
            "  --input TEXT      the input: TEXT, or @FILE for a file's "
            "bytes\n"
            "                    (default: SIZE bytes of a pattern)\n"
            "  --native NAME     call the server's native function NAME "
            "with the input\n"
            "\n"
            "With a loopback address and UCX_NET_DEVICES unset, traffic is "
            "kept\n"
            "on the loopback device. Exit status: 0 when both sides verified "
            "the\n"
            "data, 1 on failure, 2 on bad usage.\n",
            prog, prog);
}

__attribute__((noreturn, format(printf, 1, 2))) static void
usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", prog);
    exit(2);
}

/* ------------------------------------------------------------------------ */
/* rdmx plumbing                                                            */
/* ------------------------------------------------------------------------ */

static struct {
    rdmx_context_t *ctx;
    rdmx_worker_t *worker;
    rdmx_listener_t *listener;
    rdmx_ep_t *ep;
    volatile int ep_failed;
    rdmx_status_t ep_err;
    /* write mode, server side */
    rdmx_mr_t *mr;
    uint64_t seed;
    int notified;
    int notify_ok;
    char notify_text[DEMO_TEXT];
} g;

static void ep_error_cb(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    (void)ep;
    (void)arg;
    g.ep_failed = 1;
    g.ep_err = status;
}

static void accept_cb(rdmx_ep_t *ep, void *arg)
{
    (void)arg;
    if (g.ep != NULL) {
        rdmx_ep_close(ep); /* one client only */
        return;
    }
    g.ep = ep;
}

static void notify_cb(rdmx_ep_t *ep, const rdmx_notify_t *n, void *arg)
{
    int64_t bad;

    (void)ep;
    (void)arg;
    if (g.notified++)
        return;
    if (n->imm != g.seed) {
        snprintf(g.notify_text, sizeof(g.notify_text),
                 "notification carries immediate %" PRIx64
                 ", expected %" PRIx64,
                 n->imm, g.seed);
        return;
    }
    if (n->mr != g.mr || n->offset != 0 || n->length != rdmx_mr_length(g.mr)) {
        snprintf(g.notify_text, sizeof(g.notify_text),
                 "notification for offset %" PRIu64 " length %" PRIu64
                 ", expected 0 and %zu",
                 n->offset, n->length, rdmx_mr_length(g.mr));
        return;
    }
    bad = pattern_check(rdmx_mr_addr(g.mr), n->length, g.seed);
    if (bad >= 0) {
        snprintf(g.notify_text, sizeof(g.notify_text),
                 "data differs at byte %" PRId64 " of %" PRIu64, bad,
                 n->length);
        return;
    }
    g.notify_ok = 1;
}

/* --transport or RDMX_TRANSPORT as given: an "ofi[:PROVIDER]" spec picks
 * the libfabric backend (docs/FABRIC.md). */
static const char *transport_spec;

/* The context, and the worker unless @p with_worker is 0 (an RPC server
 * makes its own). */
static void create_context(rdmx_transport_t transport, const char *host,
                           int with_worker)
{
    rdmx_context_params_t cp;
    const char *devs = getenv("UCX_NET_DEVICES");
    rdmx_status_t st;

    memset(&cp, 0, sizeof(cp));
    cp.field_mask =
        RDMX_CONTEXT_PARAM_FIELD_TRANSPORT | RDMX_CONTEXT_PARAM_FIELD_NAME;
    cp.transport = transport;
    cp.name = "rdmx-demo";
    if (transport_spec != NULL && !strncmp(transport_spec, "ofi", 3)) {
        cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME;
        cp.transport_name = transport_spec;
    }
    /* Project rule: loopback traffic stays on the loopback device. */
    if (rdmx_host_is_loopback(host) && (devs == NULL || *devs == '\0')) {
        cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
        cp.net_devices = "lo";
    }
    st = rdmx_context_create(&cp, &g.ctx);
    if (st != RDMX_OK)
        die_st("creating the rdmx context", st);
    if (cp.field_mask & RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME)
        fprintf(stderr, "rdmx-demo: backend %s\n", rdmx_context_backend(g.ctx));
    if (!with_worker)
        return;
    st = rdmx_worker_create(g.ctx, NULL, &g.worker);
    if (st != RDMX_OK)
        die_st("creating the worker", st);
}

typedef struct {
    volatile int done;
    rdmx_status_t status;
    size_t length;
} req_t;

static void req_cb(rdmx_status_t status, size_t length, void *arg)
{
    req_t *r = arg;

    r->status = status;
    r->length = length;
    r->done = 1;
}

/* Progress until *flag is set; fail after @p timeout_ms (< 0: never) or
 * when the connection fails. */
static void wait_for(volatile int *flag, int timeout_ms, const char *what)
{
    double deadline = now_ms() + timeout_ms;

    while (!*flag) {
        if (g.ep_failed)
            die("connection lost while waiting for %s: %s", what,
                rdmx_strerror(g.ep_err));
        if (timeout_ms >= 0 && now_ms() > deadline)
            die("timed out after %d ms waiting for %s", timeout_ms, what);
        rdmx_worker_wait(g.worker, 100);
    }
}

static void send_msg(demo_msg_t *m, uint32_t type)
{
    rdmx_status_t st;

    m->magic = DEMO_MAGIC;
    m->type = type;
    m->mode = (uint32_t)g_mode;
    st = rdmx_send(g.ep, m, DEMO_HDR + m->blob_len, NULL);
    if (st != RDMX_OK)
        die_st("sending a control message", st);
}

static void recv_msg(demo_msg_t *m, uint32_t type)
{
    req_t r = {0, RDMX_OK, 0};
    rdmx_status_t st;

    st = rdmx_recv_nb(g.ep, m, sizeof(*m), &(rdmx_op_params_t){
        .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = req_cb, .arg = &r});
    if (st != RDMX_INPROGRESS)
        die_st("posting a receive", st);
    wait_for(&r.done, STEP_TIMEOUT_MS, "the peer's message");
    if (r.status != RDMX_OK)
        die_st("receiving a control message", r.status);
    if (r.length < DEMO_HDR || m->magic != DEMO_MAGIC ||
        r.length != DEMO_HDR + m->blob_len || m->blob_len > DEMO_MAX_BLOB)
        die("malformed control message from the peer (%zu bytes)", r.length);
    m->text[DEMO_TEXT - 1] = '\0';
    /* The server gives up early with a RESULT that says why. */
    if (m->type == MSG_RESULT && type != MSG_RESULT && m->status != RDMX_OK)
        die("server reports: %s", m->text);
    if (m->type != type)
        die("unexpected control message %u from the peer (expected %u)",
            m->type, type);
}

static void run_op(rdmx_status_t st, const char *what)
{
    if (st != RDMX_OK)
        die_st(what, st);
}

/* ------------------------------------------------------------------------ */
/* Server                                                                   */
/* ------------------------------------------------------------------------ */

static int run_server(const char *host, unsigned port,
                      rdmx_transport_t transport)
{
    rdmx_listener_params_t lp;
    char addr[300];
    demo_msg_t *m = calloc(1, sizeof(*m));
    uint8_t *buf = NULL;
    size_t size;
    int ok = 0, client_ok = 0;
    char result[DEMO_TEXT] = "";
    rdmx_status_t st;

    if (m == NULL)
        die("out of memory");
    create_context(transport, host, 1);
    memset(&lp, 0, sizeof(lp));
    snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
             port);
    lp.field_mask = RDMX_LISTENER_PARAM_FIELD_ADDRESS |
                    RDMX_LISTENER_PARAM_FIELD_ACCEPT_CB |
                    RDMX_LISTENER_PARAM_FIELD_EP_PARAMS;
    lp.address = addr;
    lp.accept_cb = accept_cb;
    lp.ep_params.field_mask =
        RDMX_EP_PARAM_FIELD_ERROR_CB | RDMX_EP_PARAM_FIELD_NOTIFY_CB;
    lp.ep_params.error_cb = ep_error_cb;
    lp.ep_params.notify_cb = notify_cb;
    st = rdmx_listener_create(g.worker, &lp, &g.listener);
    if (st != RDMX_OK) {
        char what[340];

        snprintf(what, sizeof(what), "listening on %s", addr);
        die_st(what, st);
    }
    printf(strchr(host, ':') ? "listening on [%s]:%u\n"
                             : "listening on %s:%u\n",
           host, (unsigned)rdmx_listener_port(g.listener));
    fflush(stdout);

    /* Wait for the client as long as it takes. */
    while (g.ep == NULL)
        rdmx_worker_wait(g.worker, 1000);

    recv_msg(m, MSG_HELLO);
    size = m->size;
    g.seed = m->seed;
    if (m->mode != (uint32_t)g_mode) {
        snprintf(m->text, sizeof(m->text),
                 "the server runs mode %s, the client %s", mode_names[g_mode],
                 m->mode < MODE_COUNT ? mode_names[m->mode] : "?");
        fprintf(stderr, "%s: %s\n", prog, m->text);
        m->status = RDMX_ERR_PROTO;
        m->blob_len = 0;
        send_msg(m, MSG_RESULT);
        goto out;
    }

    switch (g_mode) {
    case MODE_SEND: {
        req_t r = {0, RDMX_OK, 0};
        int64_t bad;

        printf("send: client sends %zu bytes, server verifies them\n", size);
        fflush(stdout);
        buf = malloc(size ? size : 1);
        if (buf == NULL)
            die("out of memory for %zu bytes", size);
        st = rdmx_recv_nb(g.ep, buf, size, &(rdmx_op_params_t){
            .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = req_cb, .arg = &r});
        if (st != RDMX_INPROGRESS)
            die_st("posting the data receive", st);
        wait_for(&r.done, STEP_TIMEOUT_MS, "the data");
        if (r.status != RDMX_OK)
            die_st("receiving the data", r.status);
        if (r.length != size)
            snprintf(result, sizeof(result), "received %zu bytes, not %zu",
                     r.length, size);
        else if ((bad = pattern_check(buf, size, g.seed)) >= 0)
            snprintf(result, sizeof(result), "data differs at byte %" PRId64,
                     bad);
        else
            ok = 1;
        break;
    }
    case MODE_WRITE:
    case MODE_READ:
    case MODE_ATOMIC: {
        unsigned access = g_mode == MODE_WRITE  ? RDMX_ACCESS_WRITE
                          : g_mode == MODE_READ ? RDMX_ACCESS_READ
                                                : RDMX_ACCESS_ATOMIC;
        size_t region = g_mode == MODE_ATOMIC ? 16 : size;
        size_t blob_len = 0;
        uint64_t *words;

        if (g_mode == MODE_WRITE)
            printf("write: client writes %zu bytes into server memory with "
                   "put-with-notify, server verifies them when notified\n",
                   size);
        else if (g_mode == MODE_READ)
            printf("read: server fills %zu bytes, client reads them with get "
                   "and verifies them\n",
                   size);
        else
            printf("atomic: client runs fetch-add and compare-and-swap on "
                   "server memory, both sides verify the values\n");
        fflush(stdout);
        if (region == 0) {
            snprintf(m->text, sizeof(m->text), "size must be at least 1");
            m->status = RDMX_ERR_INVALID;
            m->blob_len = 0;
            send_msg(m, MSG_DESC);
            die("size must be at least 1 for %s", mode_names[g_mode]);
        }
        st = rdmx_mem_alloc(g.ctx, region, access, &g.mr);
        if (st != RDMX_OK)
            die_st("allocating registered memory", st);
        words = rdmx_mr_addr(g.mr);
        if (g_mode == MODE_READ)
            pattern_fill(rdmx_mr_addr(g.mr), size, g.seed);
        if (g_mode == MODE_ATOMIC) {
            words[0] = mix64(g.seed);
            words[1] = mix64(g.seed + 1);
        }
        st = rdmx_mr_pack(g.mr, 0, region, access, m->blob, sizeof(m->blob),
                          &blob_len);
        if (st != RDMX_OK)
            die_st("packing the descriptor", st);
        m->status = RDMX_OK;
        m->size = region;
        m->blob_len = (uint32_t)blob_len;
        if (g_mode == MODE_ATOMIC) {
            m->value[0] = words[0];
            m->value[1] = words[1];
        }
        send_msg(m, MSG_DESC);
        break;
    }
    default:
        break;
    }

    /* The client's outcome. The server keeps progressing meanwhile:
     * emulated RMA needs it. */
    recv_msg(m, MSG_DONE);
    client_ok = m->status == RDMX_OK;
    if (!client_ok)
        fprintf(stderr, "%s: %s: client reports: %s\n", prog,
                mode_names[g_mode], m->text);

    if (g_mode == MODE_WRITE) {
        /* put-with-notify completes at the client once the notification
         * was delivered, so it is here by now or about to be. */
        if (client_ok)
            wait_for((volatile int *)&g.notified, STEP_TIMEOUT_MS,
                     "the notification");
        ok = g.notify_ok && g.notified == 1;
        if (!ok)
            snprintf(result, sizeof(result), "%s",
                     g.notify_text[0] ? g.notify_text
                                      : "no or several notifications");
    } else if (g_mode == MODE_READ) {
        ok = client_ok;
    } else if (g_mode == MODE_ATOMIC) {
        uint64_t *words = rdmx_mr_addr(g.mr);
        uint64_t w0 = __atomic_load_n(&words[0], __ATOMIC_SEQ_CST);
        uint64_t w1 = __atomic_load_n(&words[1], __ATOMIC_SEQ_CST);
        uint64_t want0 = mix64(g.seed) + ATOMIC_ADD;
        uint64_t want1 = mix64(g.seed + 2);

        if (w0 != want0 || w1 != want1)
            snprintf(result, sizeof(result),
                     "final words %" PRIx64 " %" PRIx64 ", expected %" PRIx64
                     " %" PRIx64,
                     w0, w1, want0, want1);
        else
            ok = 1;
    }

    memset(m, 0, DEMO_HDR);
    m->status = ok && client_ok ? RDMX_OK : RDMX_ERR_IO;
    snprintf(m->text, sizeof(m->text), "%s", result);
    send_msg(m, MSG_RESULT);

    if (ok && client_ok) {
        if (g_mode == MODE_ATOMIC)
            printf("atomic: ok, server verified the final values\n");
        else if (g_mode == MODE_READ)
            printf("read: ok, client verified %zu bytes\n", size);
        else
            printf("%s: ok, server verified %zu bytes\n", mode_names[g_mode],
                   size);
    } else if (!ok) {
        fprintf(stderr, "%s: %s: verification failed: %s\n", prog,
                mode_names[g_mode], result);
    }

out:
    /* Let the client close first (bounded), then clean up. */
    {
        double deadline = now_ms() + 5000;

        while (!g.ep_failed && now_ms() < deadline)
            rdmx_worker_wait(g.worker, 100);
    }
    rdmx_ep_close(g.ep);
    if (g.mr)
        rdmx_mem_deregister(g.mr);
    rdmx_listener_destroy(g.listener);
    rdmx_worker_destroy(g.worker);
    rdmx_context_destroy(g.ctx);
    free(buf);
    free(m);
    return ok && client_ok ? 0 : 1;
}

/* ------------------------------------------------------------------------ */
/* Client                                                                   */
/* ------------------------------------------------------------------------ */

static int run_client(const char *address, const char *host, size_t size,
                      rdmx_transport_t transport)
{
    rdmx_ep_params_t ep_params;
    demo_msg_t *m = calloc(1, sizeof(*m));
    rdmx_rmem_t *rmem = NULL;
    rdmx_mr_t *mr = NULL;
    rdmx_op_params_t mp = {0}; /* the operations' region */
    uint8_t *buf = NULL;
    uint64_t seed;
    int ok = 0;
    char result[DEMO_TEXT] = "";
    double t0 = 0, dt = 0;
    rdmx_status_t st;

    if (m == NULL)
        die("out of memory");
    create_context(transport, host, 1);
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = RDMX_EP_PARAM_FIELD_ERROR_CB |
                           RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT;
    ep_params.error_cb = ep_error_cb;
    ep_params.connect_timeout_ms = CONNECT_TIMEOUT_MS;
    st = rdmx_connect(g.worker, address, &ep_params, &g.ep);
    if (st != RDMX_OK) {
        char what[300];

        snprintf(what, sizeof(what), "connecting to %s", address);
        die_st(what, st);
    }
    seed = mix64((uint64_t)now_ms() ^ ((uint64_t)getpid() << 32));

    switch (g_mode) {
    case MODE_SEND:
        printf("send: client sends %zu bytes, server verifies them\n", size);
        break;
    case MODE_WRITE:
        printf("write: client writes %zu bytes into server memory with "
               "put-with-notify, server verifies them when notified\n",
               size);
        break;
    case MODE_READ:
        printf("read: server fills %zu bytes, client reads them with get and "
               "verifies them\n",
               size);
        break;
    default:
        printf("atomic: client runs fetch-add and compare-and-swap on server "
               "memory, both sides verify the values\n");
        break;
    }
    fflush(stdout);

    if (g_mode != MODE_ATOMIC) {
        st = rdmx_mem_alloc(g.ctx, size ? size : 1,
                            RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &mr);
        if (st != RDMX_OK)
            die_st("allocating the local buffer", st);
        buf = rdmx_mr_addr(mr);
    }
    mp.field_mask = RDMX_OP_PARAM_FIELD_MR;
    mp.mr = mr;

    memset(m, 0, DEMO_HDR);
    m->size = size;
    m->seed = seed;
    send_msg(m, MSG_HELLO);

    if (g_mode == MODE_SEND) {
        pattern_fill(buf, size, seed);
        t0 = now_ms();
        run_op(rdmx_send(g.ep, buf, size, &mp), "sending the data");
        dt = now_ms() - t0;
        ok = 1;
    } else {
        recv_msg(m, MSG_DESC);
        if (m->status != RDMX_OK)
            die("server refused: %s", m->text);
        st = rdmx_rmem_unpack(g.ep, m->blob, m->blob_len, &rmem);
        if (st != RDMX_OK)
            die_st("unpacking the server's descriptor", st);
        if (g_mode == MODE_WRITE) {
            pattern_fill(buf, size, seed);
            t0 = now_ms();
            run_op(rdmx_put_notify(g.ep, rmem, 0, buf, size, seed, &mp),
                   "put-with-notify");
            dt = now_ms() - t0;
            ok = 1;
        } else if (g_mode == MODE_READ) {
            int64_t bad;

            /* (buf is set for every mode but atomic: the analyzer re-reads
             * g_mode after each call) */
            /* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker) */
            memset(buf, 0, size);
            t0 = now_ms();
            run_op(rdmx_get(g.ep, rmem, 0, buf, size, &mp), "get");
            dt = now_ms() - t0;
            bad = pattern_check(buf, size, seed);
            if (bad >= 0)
                snprintf(result, sizeof(result),
                         "data read differs at byte %" PRId64, bad);
            else
                ok = 1;
        } else {
            uint64_t old = 0, w0 = m->value[0], w1 = m->value[1];
            uint64_t swap = mix64(seed + 2), other = mix64(seed + 3);

            if (w0 != mix64(seed) || w1 != mix64(seed + 1)) {
                snprintf(result, sizeof(result),
                         "server's initial words are not the agreed ones");
            } else {
                run_op(rdmx_atomic_fadd(g.ep, rmem, 0, ATOMIC_ADD, &old, NULL),
                       "fetch-add");
                if (old != w0)
                    snprintf(result, sizeof(result),
                             "fetch-add returned %" PRIx64
                             ", expected %" PRIx64,
                             old, w0);
                run_op(rdmx_atomic_cswap(g.ep, rmem, 8, w1, swap, &old, NULL),
                       "compare-and-swap");
                if (!result[0] && old != w1)
                    snprintf(result, sizeof(result),
                             "compare-and-swap returned %" PRIx64
                             ", expected %" PRIx64 " (swap)",
                             old, w1);
                /* Compares against the old value again: must not swap. */
                run_op(rdmx_atomic_cswap(g.ep, rmem, 8, w1, other, &old,
                                         NULL),
                       "compare-and-swap");
                if (!result[0] && old != swap)
                    snprintf(result, sizeof(result),
                             "second compare-and-swap returned %" PRIx64
                             ", expected %" PRIx64 " (no swap)",
                             old, swap);
                run_op(rdmx_ep_flush(g.ep, NULL), "flush");
                ok = !result[0];
            }
        }
    }

    memset(m, 0, DEMO_HDR);
    m->status = ok ? RDMX_OK : RDMX_ERR_IO;
    snprintf(m->text, sizeof(m->text), "%s", result);
    send_msg(m, MSG_DONE);
    recv_msg(m, MSG_RESULT);

    if (!ok)
        fprintf(stderr, "%s: %s: verification failed: %s\n", prog,
                mode_names[g_mode], result);
    if (m->status != RDMX_OK)
        fprintf(stderr, "%s: %s: server reports: %s\n", prog,
                mode_names[g_mode], m->text[0] ? m->text : "failure");
    ok = ok && m->status == RDMX_OK;
    if (ok) {
        if (g_mode == MODE_ATOMIC)
            printf("atomic: ok, old values and final values verified\n");
        else
            printf("%s: ok, %zu bytes verified (%.2f ms, %.1f MB/s)\n",
                   mode_names[g_mode], size, dt,
                   dt > 0 ? (double)size / dt / 1e3 : 0.0);
    }

    if (rmem)
        rdmx_rmem_destroy(rmem);
    rdmx_ep_close(g.ep);
    if (mr)
        rdmx_mem_deregister(mr);
    rdmx_worker_destroy(g.worker);
    rdmx_context_destroy(g.ctx);
    free(m);
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------------------ */
/* Lambda                                                                   */
/* ------------------------------------------------------------------------ */

#define LAMBDA_DEFAULT_SIZE (64u << 10)
#define LAMBDA_TIMEOUT_MS   10000      /* a call's deadline */
#define LAMBDA_REPEAT       100        /* calls by hash timed after two */
#define LAMBDA_OUT_MAX      (16u << 20) /* the engine's default max_output */

/* Options of the lambda mode. */
typedef struct {
    rdmx_lambda_params_t engine; /* server: budgets, cache, plugins */
    unsigned workers;            /* server: RPC worker threads */
    int serve;                   /* server: any number of clients */
    const char *function;        /* client: FILE.lua; NULL: built-in */
    const char *input;           /* client: TEXT or @FILE; NULL: SIZE bytes */
    const char *native;          /* client: call this native instead */
} lambda_opts_t;

/* The built-in function: FNV-1a (64-bit) of `input`, eight bytes a step.
 * Lua 5.4 integers wrap around like uint64_t, and %x prints them as
 * unsigned, so the client can check the result exactly (fnv1a64). */
static const char builtin_source[] =
    "-- rdmx-demo: FNV-1a (64-bit) of the input\n"
    "local s, n = input, #input\n"
    "local h, P = 0xcbf29ce484222325, 0x100000001b3\n"
    "local byte = string.byte\n"
    "local i = 1\n"
    "while i + 7 <= n do\n"
    "  local a, b, c, d, e, f, g, k = byte(s, i, i + 7)\n"
    "  h = (h ~ a) * P; h = (h ~ b) * P; h = (h ~ c) * P; h = (h ~ d) * P\n"
    "  h = (h ~ e) * P; h = (h ~ f) * P; h = (h ~ g) * P; h = (h ~ k) * P\n"
    "  i = i + 8\n"
    "end\n"
    "for j = i, n do h = (h ~ byte(s, j)) * P end\n"
    "return string.format(\"bytes=%d fnv1a64=%016x\", n, h)\n";

static uint64_t fnv1a64(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The whole of @p path (malloc'd, NUL-terminated); dies on error. */
static char *read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 4096, len = 0, n;
    char *buf = malloc(cap);

    if (f == NULL)
        die("%s: %s", path, strerror(errno));
    while (buf != NULL && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *nb = realloc(buf, cap * 2);

            if (nb == NULL)
                free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    if (buf == NULL)
        die("%s: out of memory", path);
    if (ferror(f))
        die("%s: %s", path, strerror(errno));
    fclose(f);
    buf[len] = '\0';
    *len_p = len;
    return buf;
}

/* --- server --------------------------------------------------------------- */

static volatile sig_atomic_t lambda_stop;

static void on_stop_signal(int sig)
{
    (void)sig;
    lambda_stop = 1;
}

/* The server's state. The handlers run on the RPC workers; the main thread
 * reads `done` (atomic) and, once it is set, the client's outcome. */
static struct {
    rdmx_lambda_engine_t *engine;
    int serve;
    int done;      /* demo.done arrived (atomic; one-client mode) */
    int client_ok; /* written before `done` */
    char client_text[DEMO_TEXT];
} lam;

/* "N calls (H cache hits, M misses), B stopped by a budget, E errors". */
static void lambda_summary(char *buf, size_t cap)
{
    rdmx_lambda_stats_t s;

    rdmx_lambda_engine_stats(lam.engine, &s);
    snprintf(buf, cap,
             "%" PRIu64 " calls (%" PRIu64 " cache hits, %" PRIu64
             " misses), %" PRIu64 " stopped by a budget, %" PRIu64 " errors",
             s.calls, s.cache_hits, s.cache_misses,
             s.budget_instructions + s.budget_memory + s.budget_time +
                 s.budget_output,
             s.errors);
}

/* demo.stats: the engine's counters, "name value" lines. */
static void h_demo_stats(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_lambda_stats_t s;
    char text[1024];
    int n;

    (void)arg;
    rdmx_lambda_engine_stats(lam.engine, &s);
    n = snprintf(text, sizeof(text),
                 "calls %" PRIu64 "\nerrors %" PRIu64
                 "\nsyntax_errors %" PRIu64 "\nbudget_instructions %" PRIu64
                 "\nbudget_memory %" PRIu64 "\nbudget_time %" PRIu64
                 "\nbudget_output %" PRIu64 "\ncache_hits %" PRIu64
                 "\ncache_misses %" PRIu64 "\ncache_evictions %" PRIu64
                 "\ncache_entries %" PRIu64 "\nnatives %" PRIu64
                 "\nnative_calls %" PRIu64 "\n",
                 s.calls, s.errors, s.syntax_errors, s.budget_instructions,
                 s.budget_memory, s.budget_time, s.budget_output, s.cache_hits,
                 s.cache_misses, s.cache_evictions, s.cache_entries, s.natives,
                 s.native_calls);
    rdmx_rpc_respond(req, text, (size_t)n);
}

/* demo.done: the client's outcome, a byte (1: ok) and its text. Answered
 * with the engine's summary. Only the first one counts, and only in
 * one-client mode. */
static void h_demo_done(rdmx_rpc_req_t *req, void *arg)
{
    const char *p;
    size_t len;
    char summary[DEMO_TEXT];

    (void)arg;
    p = rdmx_rpc_req_data(req, &len);
    if (len < 1) {
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO,
                               "demo.done: empty request");
        return;
    }
    if (!lam.serve && !__atomic_load_n(&lam.done, __ATOMIC_ACQUIRE)) {
        len = len - 1 < sizeof(lam.client_text) - 1
                  ? len - 1
                  : sizeof(lam.client_text) - 1;
        memcpy(lam.client_text, p + 1, len);
        lam.client_text[len] = '\0';
        lam.client_ok = p[0] == 1;
        __atomic_store_n(&lam.done, 1, __ATOMIC_RELEASE);
    }
    lambda_summary(summary, sizeof(summary));
    rdmx_rpc_respond(req, summary, strlen(summary));
}

static int run_lambda_server(const char *host, unsigned port,
                             rdmx_transport_t transport,
                             const lambda_opts_t *lo)
{
    const rdmx_lambda_params_t *ep = &lo->engine;
    rdmx_rpc_server_params_t sp;
    rdmx_rpc_server_t *srv;
    rdmx_rpc_server_stats_t ss;
    rdmx_lambda_stats_t ls;
    char addr[300], summary[DEMO_TEXT];
    int ok;
    rdmx_status_t st;

    create_context(transport, host, 0);
    lam.serve = lo->serve;
    st = rdmx_lambda_engine_create(ep, &lam.engine);
    if (st != RDMX_OK)
        die_st("creating the lambda engine", st);
    snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
             port);
    memset(&sp, 0, sizeof(sp));
    sp.field_mask =
        RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS | RDMX_RPC_SERVER_PARAM_FIELD_WORKERS;
    sp.address = addr;
    sp.workers = lo->workers;
    st = rdmx_rpc_server_create(g.ctx, &sp, &srv);
    if (st != RDMX_OK)
        die_st("creating the RPC server", st);
    st = rdmx_lambda_register_handlers(srv, lam.engine, NULL);
    if (st == RDMX_OK)
        st = rdmx_rpc_server_register(srv, "demo.stats", h_demo_stats, NULL,
                                      RDMX_RPC_IDEMPOTENT);
    if (st == RDMX_OK)
        st = rdmx_rpc_server_register(srv, "demo.done", h_demo_done, NULL, 0);
    if (st != RDMX_OK)
        die_st("registering the handlers", st);
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    st = rdmx_rpc_server_start(srv);
    if (st != RDMX_OK) {
        char what[340];

        snprintf(what, sizeof(what), "listening on %s", addr);
        die_st(what, st);
    }
    printf(strchr(host, ':') ? "listening on [%s]:%u\n"
                             : "listening on %s:%u\n",
           host, (unsigned)rdmx_rpc_server_port(srv));
    rdmx_lambda_engine_stats(lam.engine, &ls);
    printf("lambda: serving lambda.eval, lambda.call and lambda.native with "
           "%u worker(s); per call at most %" PRIu64 " instructions, %zu "
           "bytes of memory, %u ms; cache of %u functions; %" PRIu64
           " native(s)%s\n",
           rdmx_rpc_server_workers(srv),
           ep->field_mask & RDMX_LAMBDA_PARAM_FIELD_MAX_INSTRUCTIONS
               ? ep->max_instructions
               : (uint64_t)10000000,
           ep->field_mask & RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY ? ep->max_memory
                                                         : (size_t)64 << 20,
           /* (0: no limit but the caller's deadline) */
           ep->field_mask & RDMX_LAMBDA_PARAM_FIELD_MAX_TIME
               ? (unsigned)(ep->max_time_ms < 0 ? 0 : ep->max_time_ms)
               : 1000u,
           ep->field_mask & RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES ? ep->cache_entries
                                                            : 256,
           ls.natives, lo->serve ? "; until SIGTERM" : "");
    fflush(stdout);

    /* One-client mode: until the client reported (or left without). */
    while (!lambda_stop) {
        usleep(50000);
        if (lo->serve)
            continue;
        if (__atomic_load_n(&lam.done, __ATOMIC_ACQUIRE))
            break;
        rdmx_rpc_server_stats(srv, &ss);
        if (ss.connections_total > 0 && ss.connections == 0)
            break;
    }
    if (!lo->serve) {
        /* Let the client close first (bounded). */
        double deadline = now_ms() + 5000;

        for (;;) {
            rdmx_rpc_server_stats(srv, &ss);
            if (ss.connections == 0 || now_ms() > deadline)
                break;
            usleep(20000);
        }
    }
    lambda_summary(summary, sizeof(summary));
    ok = lo->serve ||
         (__atomic_load_n(&lam.done, __ATOMIC_ACQUIRE) && lam.client_ok);
    if (lo->serve)
        printf("lambda: shutting down; %s\n", summary);
    else if (ok)
        printf("lambda: ok, the client verified the output; %s\n", summary);
    else if (__atomic_load_n(&lam.done, __ATOMIC_ACQUIRE))
        fprintf(stderr, "%s: lambda: client reports: %s\n", prog,
                lam.client_text);
    else
        fprintf(stderr, "%s: lambda: %s\n", prog,
                lambda_stop ? "stopped by a signal before the client reported"
                            : "the client left without reporting");
    fflush(stdout);
    rdmx_rpc_server_destroy(srv);
    rdmx_lambda_engine_destroy(lam.engine);
    rdmx_context_destroy(g.ctx);
    return ok ? 0 : 1;
}

/* --- client --------------------------------------------------------------- */

/* The engine's counters from demo.stats into @p s (cache hits and misses
 * only). -1 if the server is not rdmx-demo's. */
static int lambda_remote_stats(rdmx_channel_t *ch, rdmx_lambda_stats_t *s)
{
    char text[1024], *p;
    size_t len = 0;

    if (rdmx_call(ch, "demo.stats", NULL, 0, text, sizeof(text) - 1, NULL,
                  &len) != RDMX_OK)
        return -1;
    text[len] = '\0';
    memset(s, 0, sizeof(*s));
    if ((p = strstr(text, "\ncache_hits ")) != NULL)
        s->cache_hits = strtoull(p + 12, NULL, 10);
    if ((p = strstr(text, "\ncache_misses ")) != NULL)
        s->cache_misses = strtoull(p + 14, NULL, 10);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Print a function's output: as text if it is, else its length. */
static void print_output(const char *out, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++)
        if (!isprint((unsigned char)out[i]) && out[i] != '\n' &&
            out[i] != '\t')
            break;
    if (i < len || len > 4096)
        printf("lambda: output: %zu bytes (not shown)\n", len);
    else
        printf("lambda: output (%zu bytes): %.*s%s", len, (int)len, out,
               len > 0 && out[len - 1] == '\n' ? "" : "\n");
}

static int run_lambda_client(const char *address, const char *host,
                             size_t size, rdmx_transport_t transport,
                             const lambda_opts_t *lo)
{
    rdmx_channel_params_t cp;
    rdmx_channel_t *ch;
    rdmx_lambda_stats_t s0, s1, s2;
    char result[DEMO_TEXT] = "", *src = NULL, *out, *first = NULL;
    char expect[64], hex[65], done[1 + DEMO_TEXT], reply[DEMO_TEXT];
    const char *detail;
    uint8_t id[RDMX_LAMBDA_ID_LEN], *input;
    rdmx_lambda_eval_params_t ep;
    size_t slen, ilen, olen = 0, flen = 0;
    double t0, t_first = 0, t_second = 0, times[LAMBDA_REPEAT];
    int ok = 0, have_stats, builtin = lo->function == NULL;
    rdmx_status_t st;

    create_context(transport, host, 1);
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = RDMX_CHANNEL_PARAM_FIELD_TIMEOUT |
                    RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT |
                    RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                    RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT;
    cp.timeout_ms = LAMBDA_TIMEOUT_MS;
    cp.connect_timeout_ms = CONNECT_TIMEOUT_MS;
    /* A function holds the server's worker for up to its time budget, and
     * heartbeats wait meanwhile: allow more silence than the default 1 s. */
    cp.heartbeat_ms = 250;
    cp.heartbeat_timeout_ms = LAMBDA_TIMEOUT_MS;
    st = rdmx_channel_create(g.worker, address, &cp, &ch);
    if (st == RDMX_OK)
        st = rdmx_channel_wait_ready(ch, CONNECT_TIMEOUT_MS);
    if (st != RDMX_OK) {
        char what[300];

        snprintf(what, sizeof(what), "connecting to %s", address);
        die_st(what, st);
    }
    out = malloc(LAMBDA_OUT_MAX);
    if (out == NULL)
        die("out of memory");
    have_stats = lambda_remote_stats(ch, &s0) == 0;

    if (lo->input != NULL && lo->input[0] == '@') {
        input = (uint8_t *)read_file(lo->input + 1, &ilen);
    } else if (lo->input != NULL) {
        ilen = strlen(lo->input);
        input = (uint8_t *)strdup(lo->input);
    } else {
        ilen = size;
        input = malloc(size ? size : 1);
        if (input != NULL)
            pattern_fill(input,
                         size, mix64((uint64_t)now_ms() ^
                                     ((uint64_t)getpid() << 32)));
    }
    if (input == NULL)
        die("out of memory for the input");

    if (lo->native != NULL) {
        printf("lambda: calls the server's native function \"%s\" with %zu "
               "bytes of input\n",
               lo->native, ilen);
        t0 = now_ms();
        st = rdmx_lambda_native(ch, lo->native, input, ilen, out,
                                LAMBDA_OUT_MAX, &olen);
        t_first = now_ms() - t0;
        if (st != RDMX_OK) {
            detail = rdmx_error_detail();
            snprintf(result, sizeof(result), "%s: %s", rdmx_status_name(st),
                     detail ? detail : "");
        } else {
            print_output(out, olen);
            ok = 1;
        }
        goto report;
    }

    if (builtin) {
        src = strdup(builtin_source);
        slen = strlen(builtin_source);
        if (src == NULL)
            die("out of memory");
    } else {
        src = read_file(lo->function, &slen);
    }
    ep = (rdmx_lambda_eval_params_t){
        .field_mask = RDMX_LAMBDA_EVAL_PARAM_FIELD_INPUT,
        .input = input,
        .input_len = ilen};
    rdmx_lambda_id(src, slen, id);
    rdmx_lambda_id_hex(id, hex);
    printf("lambda: ships %s (%zu bytes of Lua, id %.16s...) with %zu bytes "
           "of input; the server runs it in its sandbox\n",
           builtin ? "a function computing the FNV-1a checksum of its input"
                   : lo->function,
           slen, hex, ilen);

    /* Call 1: by hash, and with the source if the server lacks it. */
    t0 = now_ms();
    st = rdmx_lambda_eval(ch, src, slen, &ep, out, LAMBDA_OUT_MAX, &olen);
    t_first = now_ms() - t0;
    if (st != RDMX_OK) {
        detail = rdmx_error_detail();
        snprintf(result, sizeof(result), "the function failed: %s: %s",
                 rdmx_status_name(st), detail ? detail : "");
        goto report;
    }
    have_stats = have_stats && lambda_remote_stats(ch, &s1) == 0;
    printf("lambda: call 1: %.3f ms%s\n", t_first,
           !have_stats ? ""
           : s1.cache_misses > s0.cache_misses
               ? ", by hash, not cached on the server: sent again with the "
                 "source, compiled there"
               : ", by hash: the server had it compiled already");
    first = malloc(olen ? olen : 1);
    if (first == NULL)
        die("out of memory");
    memcpy(first, out, olen);
    flen = olen;

    /* Call 2: by hash, from the server's cache. */
    t0 = now_ms();
    st = rdmx_lambda_eval(ch, src, slen, &ep, out, LAMBDA_OUT_MAX, &olen);
    t_second = now_ms() - t0;
    if (st != RDMX_OK) {
        detail = rdmx_error_detail();
        snprintf(result, sizeof(result), "call 2 failed: %s: %s",
                 rdmx_status_name(st), detail ? detail : "");
        goto report;
    }
    have_stats = have_stats && lambda_remote_stats(ch, &s2) == 0;
    printf("lambda: call 2: %.3f ms%s\n", t_second,
           !have_stats ? ", by hash"
           : s2.cache_hits > s1.cache_hits && s2.cache_misses == s1.cache_misses
               ? ", by hash: compiled code from the server's cache"
               : ", by hash, not cached (the server's cache is off or full): "
                 "sent again with the source");
    if (builtin && (olen != flen || memcmp(out, first, olen) != 0)) {
        snprintf(result, sizeof(result), "call 2 returned another output");
        goto report;
    }
    for (int i = 0; i < LAMBDA_REPEAT; i++) {
        t0 = now_ms();
        st = rdmx_lambda_eval(ch, src, slen, &ep, out, LAMBDA_OUT_MAX, &olen);
        times[i] = now_ms() - t0;
        if (st != RDMX_OK) {
            detail = rdmx_error_detail();
            snprintf(result, sizeof(result), "a call by hash failed: %s: %s",
                     rdmx_status_name(st), detail ? detail : "");
            goto report;
        }
    }
    qsort(times, LAMBDA_REPEAT, sizeof(times[0]), cmp_double);
    printf("lambda: %d more calls by hash: median %.3f ms, fastest %.3f ms\n",
           LAMBDA_REPEAT, times[LAMBDA_REPEAT / 2], times[0]);
    print_output(first, flen);
    if (builtin) {
        snprintf(expect, sizeof(expect), "bytes=%zu fnv1a64=%016" PRIx64, ilen,
                 fnv1a64(input, ilen));
        if (flen != strlen(expect) || memcmp(first, expect, flen) != 0) {
            snprintf(result, sizeof(result),
                     "the server computed '%.*s', expected '%s'",
                     (int)(flen < 80 ? flen : 80), first, expect);
            goto report;
        }
        printf("lambda: verified: the same checksum computed here\n");
    }

    /* The sandbox: an endless loop is stopped by the server's budget, and
     * the server goes on serving. */
    t0 = now_ms();
    st = rdmx_lambda_eval(ch, "while true do end", 17, NULL, out,
                          LAMBDA_OUT_MAX, &olen);
    detail = rdmx_error_detail();
    if (st != RDMX_ERR_NO_RESOURCE && st != RDMX_ERR_TIMEOUT) {
        snprintf(result, sizeof(result),
                 "an endless loop was not stopped by a budget: %s: %s",
                 rdmx_status_name(st), detail ? detail : "");
        goto report;
    }
    printf("lambda: sandbox: an endless loop was stopped by the server after "
           "%.0f ms: %s\n",
           now_ms() - t0, detail ? detail : rdmx_strerror(st));
    st = rdmx_lambda_eval(ch, src, slen, &ep, out, LAMBDA_OUT_MAX, &olen);
    if (st != RDMX_OK || (builtin && (olen != flen ||
                                      memcmp(out, first, olen) != 0))) {
        snprintf(result, sizeof(result),
                 "the server did not serve the function again after the loop");
        goto report;
    }
    ok = 1;

report:
    /* Tell rdmx-demo's server the outcome (other servers lack demo.done). */
    done[0] = ok ? 1 : 0;
    /* (length-delimited: 1 + strlen(result) bytes, no terminator) */
    /* NOLINTNEXTLINE(bugprone-not-null-terminated-result) */
    memcpy(done + 1, result, strlen(result));
    if (have_stats) {
        size_t rlen = 0;

        st = rdmx_call(ch, "demo.done", done, 1 + strlen(result), reply,
                       sizeof(reply) - 1, NULL, &rlen);
        if (st == RDMX_OK) {
            reply[rlen] = '\0';
            printf("lambda: server: %s\n", reply);
        } else if (ok) {
            detail = rdmx_error_detail();
            snprintf(result, sizeof(result), "reporting to the server: %s",
                     detail ? detail : rdmx_strerror(st));
            ok = 0;
        }
    }
    if (!ok)
        fprintf(stderr, "%s: lambda: %s\n", prog, result);
    else if (lo->native != NULL)
        printf("lambda: ok, native function %s ran (%.3f ms)\n", lo->native,
               t_first);
    else
        printf("lambda: ok, %s (call 1 %.3f ms, call 2 by hash %.3f ms)\n",
               builtin ? "output verified" : "function ran", t_first,
               t_second);
    rdmx_channel_destroy(ch);
    rdmx_worker_destroy(g.worker);
    rdmx_context_destroy(g.ctx);
    free(first);
    free(src);
    free(input);
    free(out);
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------------------ */

/* A number in [lo, hi] with K/M/G suffixes; dies with a usage error. */
static uint64_t parse_count(const char *opt, const char *val, uint64_t lo,
                            uint64_t hi)
{
    size_t v;

    if (opt_size(val, &v) != 0)
        usage_error("%s '%s': %s", opt, val, opt_error());
    if (v < lo || v > hi)
        usage_error("%s '%s': a number from %" PRIu64 " to %" PRIu64, opt, val,
                    lo, hi);
    return v;
}

int main(int argc, char **argv)
{
    const char *listen = NULL, *host = "0.0.0.0", *target = NULL;
    const char *transport_name = NULL, *mode = NULL, *lambda_opt = NULL;
    size_t size = 1u << 20;
    int size_set = 0;
    rdmx_transport_t transport = RDMX_TRANSPORT_AUTO;
    lambda_opts_t lo;
    int i;

    memset(&lo, 0, sizeof(lo));
    lo.workers = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL, *eq;
        char opt[32];

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (mode == NULL)
                mode = a;
            else if (target == NULL)
                target = a;
            else
                usage_error("unexpected argument '%s'", a);
            continue;
        }
        if (strcmp(a, "--serve") == 0) { /* the only flag without a value */
            lo.serve = 1;
            lambda_opt = a;
            continue;
        }
        /* --opt VALUE or --opt=VALUE */
        eq = strchr(a, '=');
        snprintf(opt, sizeof(opt), "%.*s",
                 (int)(eq ? (size_t)(eq - a) : strlen(a)), a);
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            usage_error("option %s needs a value", opt);
        if (strcmp(opt, "--listen") == 0)
            listen = val;
        else if (strcmp(opt, "--host") == 0)
            host = val;
        else if (strcmp(opt, "--transport") == 0)
            transport_name = val;
        else if (strcmp(opt, "--size") == 0) {
            if (opt_size(val, &size) != 0)
                usage_error("bad size '%s': %s (e.g. 4096, 64K, 1M, 1G)", val,
                            opt_error());
            size_set = 1;
        } else if (strcmp(opt, "--function") == 0) {
            lo.function = val;
            lambda_opt = a;
        } else if (strcmp(opt, "--input") == 0) {
            lo.input = val;
            lambda_opt = a;
        } else if (strcmp(opt, "--native") == 0) {
            lo.native = val;
            lambda_opt = a;
        } else if (strcmp(opt, "--plugin-dir") == 0) {
            lo.engine.field_mask |= RDMX_LAMBDA_PARAM_FIELD_PLUGIN_DIR;
            lo.engine.plugin_dir = val;
            lambda_opt = a;
        } else if (strcmp(opt, "--max-instructions") == 0) {
            lo.engine.field_mask |= RDMX_LAMBDA_PARAM_FIELD_MAX_INSTRUCTIONS;
            lo.engine.max_instructions =
                parse_count(opt, val, 1000, UINT64_MAX);
            lambda_opt = a;
        } else if (strcmp(opt, "--max-memory") == 0) {
            if (opt_size(val, &lo.engine.max_memory) != 0 ||
                lo.engine.max_memory < (256u << 10))
                usage_error("--max-memory '%s': a size of at least 256K",
                            val);
            lo.engine.field_mask |= RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY;
            lambda_opt = a;
        } else if (strcmp(opt, "--max-time-ms") == 0) {
            lo.engine.field_mask |= RDMX_LAMBDA_PARAM_FIELD_MAX_TIME;
            /* (0 on the command line: only the caller's deadline) */
            lo.engine.max_time_ms =
                (int)parse_count(opt, val, 0, 3600000);
            if (lo.engine.max_time_ms == 0)
                lo.engine.max_time_ms = RDMX_TIMEOUT_INFINITE;
            lambda_opt = a;
        } else if (strcmp(opt, "--cache") == 0) {
            lo.engine.field_mask |= RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES;
            lo.engine.cache_entries = (unsigned)parse_count(opt, val, 0,
                                                            1000000);
            lambda_opt = a;
        } else if (strcmp(opt, "--workers") == 0) {
            lo.workers = (unsigned)parse_count(opt, val, 1, 64);
            lambda_opt = a;
        } else
            usage_error("unknown option %s", opt);
    }

    if (mode == NULL)
        usage_error("missing MODE (send, write, read, atomic or lambda)");
    for (i = 0; i < MODE_COUNT; i++)
        if (strcmp(mode, mode_names[i]) == 0)
            g_mode = i;
    if (g_mode < 0)
        usage_error("unknown mode '%s' (send, write, read, atomic or lambda)",
                    mode);
    if (g_mode != MODE_LAMBDA && lambda_opt != NULL)
        usage_error("%s is an option of the lambda mode", lambda_opt);
    if ((listen == NULL) == (target == NULL))
        usage_error("give either --listen PORT (server) or HOST:PORT "
                    "(client)");
    if (g_mode == MODE_LAMBDA && !size_set)
        size = LAMBDA_DEFAULT_SIZE;
    if (size == 0 && (g_mode == MODE_WRITE || g_mode == MODE_READ))
        usage_error("--size must be at least 1 for %s", mode);
    if (lo.native != NULL && lo.function != NULL)
        usage_error("give --function or --native, not both");

    if (transport_name == NULL) {
        transport_name = getenv("RDMX_TRANSPORT");
        if (transport_name && *transport_name == '\0')
            transport_name = NULL;
    }
    transport_spec = transport_name;
    if (transport_name &&
        rdmx_transport_parse(transport_name, &transport) != RDMX_OK)
        usage_error("unknown transport '%s' (auto, shm, tcp, rdma or "
                    "ofi[:PROVIDER])",
                    transport_name);

    if (listen) {
        uint16_t port;

        if (opt_port(listen, &port) != 0)
            usage_error("bad port '%s': %s", listen, opt_error());
        if (g_mode == MODE_LAMBDA)
            return run_lambda_server(host, (unsigned)port, transport, &lo);
        return run_server(host, (unsigned)port, transport);
    } else {
        char thost[256];
        uint16_t port;

        if (opt_address(target, thost, sizeof(thost), &port) != 0)
            usage_error("bad address '%s': %s (HOST:PORT or [V6]:PORT)",
                        target, opt_error());
        if (port == 0)
            usage_error("bad address '%s': port 0 (HOST:PORT or [V6]:PORT)",
                        target);
        if (g_mode == MODE_LAMBDA)
            return run_lambda_client(target, thost, size, transport, &lo);
        return run_client(target, thost, size, transport);
    }
}
