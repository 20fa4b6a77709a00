/*
 * rdmx-demo: the four kinds of rdmx transfer between two processes.
 *
 *   rdmx-demo MODE --listen PORT [--host H] [options]   (server)
 *   rdmx-demo MODE HOST:PORT [options]                   (client)
 *
 * MODE is send, write, read or atomic. The server serves one client and
 * exits. The client connects and says hello (mode, size, seed); for write,
 * read and atomic the server allocates memory, packs a descriptor and sends
 * it; then:
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
 */
#define _GNU_SOURCE
#include <rdmx/rdmx.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
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

enum { MODE_SEND, MODE_WRITE, MODE_READ, MODE_ATOMIC, MODE_COUNT };
static const char *mode_names[MODE_COUNT] = {"send", "write", "read", "atomic"};

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

/* "1M", "64k", "4096", "1GiB" -> bytes (binary suffixes). */
static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v, mul = 1;

    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mul = 1ull << 10;
        end++;
        break;
    case 'M':
        mul = 1ull << 20;
        end++;
        break;
    case 'G':
        mul = 1ull << 30;
        end++;
        break;
    case 'T':
        mul = 1ull << 40;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || (v && mul > UINT64_MAX / v) ||
        v * mul > (unsigned long long)SIZE_MAX)
        return -1;
    *out = (size_t)(v * mul);
    return 0;
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
            "\n"
            "options:\n"
            "  --listen PORT     serve one client on PORT (0: any free port;\n"
            "                    the chosen one is printed as\n"
            "                    \"listening on HOST:PORT\")\n"
            "  --host H          address to listen on (default 0.0.0.0)\n"
            "  --transport T     auto, shm, tcp or rdma (default: "
            "$RDMX_TRANSPORT,\n"
            "                    else auto)\n"
            "  --size N          bytes to move, with K/M/G suffixes "
            "(default 1M)\n"
            "  --help            this text\n"
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

static void create_context(rdmx_transport_t transport, const char *host)
{
    rdmx_context_params_t cp;
    const char *devs = getenv("UCX_NET_DEVICES");
    rdmx_status_t st;

    memset(&cp, 0, sizeof(cp));
    cp.field_mask =
        RDMX_CONTEXT_PARAM_FIELD_TRANSPORT | RDMX_CONTEXT_PARAM_FIELD_NAME;
    cp.transport = transport;
    cp.name = "rdmx-demo";
    /* Project rule: loopback traffic stays on the loopback device. */
    if (rdmx_host_is_loopback(host) && (devs == NULL || *devs == '\0')) {
        cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
        cp.net_devices = "lo";
    }
    st = rdmx_context_create(&cp, &g.ctx);
    if (st != RDMX_OK)
        die_st("creating the rdmx context", st);
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

    st = rdmx_recv_nb(g.ep, m, sizeof(*m), NULL, req_cb, &r);
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
    create_context(transport, host);
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
        st = rdmx_recv_nb(g.ep, buf, size, NULL, req_cb, &r);
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
    uint8_t *buf = NULL;
    uint64_t seed;
    int ok = 0;
    char result[DEMO_TEXT] = "";
    double t0 = 0, dt = 0;
    rdmx_status_t st;

    if (m == NULL)
        die("out of memory");
    create_context(transport, host);
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = RDMX_EP_PARAM_FIELD_ERROR_CB;
    ep_params.error_cb = ep_error_cb;
    st = rdmx_connect(g.worker, address, &ep_params, CONNECT_TIMEOUT_MS, &g.ep);
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

    memset(m, 0, DEMO_HDR);
    m->size = size;
    m->seed = seed;
    send_msg(m, MSG_HELLO);

    if (g_mode == MODE_SEND) {
        pattern_fill(buf, size, seed);
        t0 = now_ms();
        run_op(rdmx_send(g.ep, buf, size, mr), "sending the data");
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
            run_op(rdmx_put_notify(g.ep, buf, size, mr, rmem, 0, seed),
                   "put-with-notify");
            dt = now_ms() - t0;
            ok = 1;
        } else if (g_mode == MODE_READ) {
            int64_t bad;

            memset(buf, 0, size);
            t0 = now_ms();
            run_op(rdmx_get(g.ep, buf, size, mr, rmem, 0), "get");
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
                run_op(rdmx_atomic_fadd(g.ep, rmem, 0, ATOMIC_ADD, &old),
                       "fetch-add");
                if (old != w0)
                    snprintf(result, sizeof(result),
                             "fetch-add returned %" PRIx64
                             ", expected %" PRIx64,
                             old, w0);
                run_op(rdmx_atomic_cswap(g.ep, rmem, 8, w1, swap, &old),
                       "compare-and-swap");
                if (!result[0] && old != w1)
                    snprintf(result, sizeof(result),
                             "compare-and-swap returned %" PRIx64
                             ", expected %" PRIx64 " (swap)",
                             old, w1);
                /* Compares against the old value again: must not swap. */
                run_op(rdmx_atomic_cswap(g.ep, rmem, 8, w1, other, &old),
                       "compare-and-swap");
                if (!result[0] && old != swap)
                    snprintf(result, sizeof(result),
                             "second compare-and-swap returned %" PRIx64
                             ", expected %" PRIx64 " (no swap)",
                             old, swap);
                run_op(rdmx_ep_flush(g.ep), "flush");
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

int main(int argc, char **argv)
{
    const char *listen = NULL, *host = "0.0.0.0", *target = NULL;
    const char *transport_name = NULL, *mode = NULL;
    size_t size = 1u << 20;
    rdmx_transport_t transport = RDMX_TRANSPORT_AUTO;
    int i;

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
            if (parse_size(val, &size) != 0)
                usage_error("bad size '%s' (e.g. 4096, 64K, 1M, 1G)", val);
        } else
            usage_error("unknown option %s", opt);
    }

    if (mode == NULL)
        usage_error("missing MODE (send, write, read or atomic)");
    for (i = 0; i < MODE_COUNT; i++)
        if (strcmp(mode, mode_names[i]) == 0)
            g_mode = i;
    if (g_mode < 0)
        usage_error("unknown mode '%s' (send, write, read or atomic)", mode);
    if ((listen == NULL) == (target == NULL))
        usage_error("give either --listen PORT (server) or HOST:PORT "
                    "(client)");
    if (size == 0 && (g_mode == MODE_WRITE || g_mode == MODE_READ))
        usage_error("--size must be at least 1 for %s", mode);

    if (transport_name == NULL) {
        transport_name = getenv("RDMX_TRANSPORT");
        if (transport_name && *transport_name == '\0')
            transport_name = NULL;
    }
    if (transport_name &&
        rdmx_transport_parse(transport_name, &transport) != RDMX_OK)
        usage_error("unknown transport '%s' (auto, shm, tcp or rdma)",
                    transport_name);

    if (listen) {
        char *end;
        unsigned long port = strtoul(listen, &end, 10);

        if (*listen == '\0' || *end != '\0' || port > 65535)
            usage_error("bad port '%s'", listen);
        return run_server(host, (unsigned)port, transport);
    } else {
        char thost[256];
        uint16_t port;

        if (rdmx_addr_parse(target, thost, sizeof(thost), &port) != RDMX_OK ||
            port == 0)
            usage_error("bad address '%s' (HOST:PORT or [V6]:PORT)", target);
        return run_client(target, thost, size, transport);
    }
}
