/*
 * rpc_netem: RPC over a real (virtual) network link with delay and loss.
 *
 * tests/rpc_netem.sh builds two network namespaces joined by a veth pair,
 * puts `tc netem delay 5ms loss 1%` on both ends, and runs this binary in
 * each: "server" in one (the RPC test server, tests/rpc_server.c), "client"
 * in the other, both with RDMX_TRANSPORT=tcp and UCX_NET_DEVICES=<their
 * veth>, so the traffic can only take the veth.
 *
 * The client:
 *  1. connects (the channel's connect survives lost SYNs: 10 s limit);
 *  2. makes 100 sequential small calls and measures their round trips: the
 *     fastest must take at least --min-rtt-ms (10 ms with netem: 5 ms each
 *     way), which proves the packets crossed the delayed veth;
 *  3. makes 400 more calls, 16 in flight at a time, payloads from 0 B to
 *     1 MiB (every 8th of 64 KiB or more), "echo" and "echo_once"
 *     alternating; every response is checked byte for byte;
 *  4. requires every one of the 500 calls to succeed (TCP retransmits the
 *     lost segments; no reconnect may happen: stats.reconnects == 0,
 *     stats.failed == 0), prints p50/p99 of both kinds of calls;
 *  5. reads the interface counters of its namespace (/proc/self/net/dev):
 *     the veth must have carried at least all request bytes out and all
 *     response bytes in; and the connection's peer is the server address.
 *
 * Usage:
 *   test_rpc_netem server --address HOST:PORT     (rpc_server.c options)
 *   test_rpc_netem client --address HOST:PORT --dev VETH [--min-rtt-ms N]
 *                         [--calls N]
 */
#define _GNU_SOURCE
#include "harness.h"
#include "rpc_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW  16
#define SEQ     100
#define MAX_LEN (1024 * 1024)

typedef struct {
    int cb_calls;
    rdmx_status_t status;
    uint64_t seed;
    size_t len;
    double t_start, t_done;
    int ok;
    char msg[160];
} slot_t;

static slot_t slots[WINDOW];
static int completed;

static void on_done(const rdmx_call_result_t *r, void *arg)
{
    slot_t *s = arg;

    s->cb_calls++;
    s->status = r->status;
    s->t_done = th_now_ms();
    snprintf(s->msg, sizeof(s->msg), "%s", r->message ? r->message : "");
    s->ok = r->status == RDMX_OK && r->length == s->len &&
            (s->len == 0 || th_check(r->data, s->len, s->seed) < 0);
    completed++;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double q)
{
    int i = (int)(q * (n - 1) + 0.5);

    return v[i < n ? i : n - 1];
}

/* rx/tx bytes of @p dev in this process's network namespace. */
static void dev_bytes(const char *dev, uint64_t *rx, uint64_t *tx)
{
    FILE *f = fopen("/proc/self/net/dev", "r");
    char line[512];
    int found = 0;

    CHECKF(f != NULL, "cannot open /proc/self/net/dev");
    while (fgets(line, sizeof(line), f) != NULL) {
        char name[64];
        unsigned long long v[9];

        if (sscanf(line,
                   " %63[^:]: %llu %llu %llu %llu %llu %llu %llu %llu %llu",
                   name, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
                   &v[8]) == 10 &&
            strcmp(name, dev) == 0) {
            *rx = v[0];
            *tx = v[8];
            found = 1;
        }
    }
    fclose(f);
    CHECKF(found, "interface %s not in /proc/self/net/dev", dev);
}

/* Payload size of call @p i of the windowed part: mostly small, every 8th
 * 64 KiB or more, one in 64 of 1 MiB. */
static size_t size_of(int i)
{
    static const size_t small[] = {0, 1, 7, 100, 512, 1000, 4096, 9000};
    static const size_t big[] = {64 * 1024, 100000, 200 * 1024, 256 * 1024,
                                 65537,     300000, 128 * 1024};

    if (i % 64 == 63)
        return MAX_LEN;
    if (i % 8 == 7)
        return big[(i / 8) % 7];
    return small[i % 8];
}

static int client_main(int argc, char **argv)
{
    const char *address = NULL, *dev = NULL;
    int min_rtt = 10, calls = 500, i;
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    rdmx_channel_t *ch;
    rdmx_channel_params_t p;
    rdmx_channel_stats_t st;
    rdmx_call_params_t cp;
    unsigned char *buf, *resp;
    double *seq_ms, *win_ms, t0, t_seq, t_win;
    uint64_t rx0, tx0, rx1, tx1, req_bytes = 0, resp_bytes = 0;
    int nwin, started = 0, nwin_ms = 0;

    for (i = 0; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--address") == 0)
            address = argv[i + 1];
        else if (strcmp(argv[i], "--dev") == 0)
            dev = argv[i + 1];
        else if (strcmp(argv[i], "--min-rtt-ms") == 0)
            min_rtt = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--calls") == 0)
            calls = atoi(argv[i + 1]);
        else
            th_fail(__FILE__, __LINE__, "unknown option %s", argv[i]);
    }
    CHECKF(address != NULL && dev != NULL && calls > SEQ,
           "usage: client --address HOST:PORT --dev VETH [--min-rtt-ms N] "
           "[--calls N > %d]",
           SEQ);
    nwin = calls - SEQ;
    th_log("client: %d calls to %s over %s (transport %s), expecting round "
           "trips >= %d ms",
           calls, address, dev, th_transport_env(), min_rtt);

    buf = th_alloc(MAX_LEN);
    resp = th_alloc(MAX_LEN);
    seq_ms = th_alloc(sizeof(double) * SEQ);
    win_ms = th_alloc(sizeof(double) * (size_t)nwin);
    dev_bytes(dev, &rx0, &tx0);

    ctx = th_context();
    w = th_worker(ctx, 0);
    memset(&p, 0, sizeof(p));
    /* Lost SYNs are retransmitted after 1 s, 3 s, ...; a lost segment
     * after >= 200 ms: give the connect and the heartbeat room so that
     * loss alone never takes the channel down (checked: no reconnect). */
    p.field_mask = RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT |
                   RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                   RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT |
                   RDMX_CHANNEL_PARAM_FIELD_TIMEOUT;
    p.connect_timeout_ms = 10000;
    p.heartbeat_ms = 500;
    p.heartbeat_timeout_ms = 8000;
    p.timeout_ms = 30000 * TH_SLOW;
    t0 = th_now_ms();
    CHECK_OK(rdmx_channel_create(w, address, &p, &ch));
    CHECK_OK(rdmx_channel_wait_ready(ch, 40000 * TH_SLOW));
    {
        char peer[128] = "";

        CHECK(rdmx_channel_ep(ch) != NULL);
        CHECK_OK(rdmx_ep_peer_address(rdmx_channel_ep(ch), peer, sizeof(peer)));
        th_log("client: READY after %.0f ms; connection peer %s",
               th_now_ms() - t0, peer);
        {
            /* the peer is the server's host, never anything else */
            char host[128];
            size_t hl = strcspn(address, ":");

            snprintf(host, sizeof(host), "%.*s", (int)hl, address);
            CHECKF(strncmp(peer, host, strlen(host)) == 0,
                   "connection peer %s is not %s", peer, host);
        }
    }

    /* 1: sequential small calls, round trips. */
    t_seq = th_now_ms();
    for (i = 0; i < SEQ; i++) {
        size_t len = (size_t)(i % 5) * 50, got = 0;
        uint64_t seed = th_seed(1, (uint64_t)i, len);
        double t;
        rdmx_status_t s;

        th_fill(buf, len, seed);
        t = th_now_ms();
        s = rdmx_call(ch, i % 2 ? "echo_once" : "echo", buf, len, resp, MAX_LEN,
                      NULL, &got);
        seq_ms[i] = th_now_ms() - t;
        CHECKF(s == RDMX_OK, "sequential call %d: %s: %s", i,
               rdmx_status_name(s), rdmx_error_detail());
        CHECK_EQ_U64(got, len);
        CHECK_PATTERN(resp, len, seed, 0);
        req_bytes += len;
        resp_bytes += len;
    }
    t_seq = th_now_ms() - t_seq;
    qsort(seq_ms, SEQ, sizeof(double), cmp_double);
    th_log("client: %d sequential calls in %.0f ms: round trip min %.2f "
           "p50 %.2f p99 %.2f max %.2f ms",
           SEQ, t_seq, seq_ms[0], pct(seq_ms, SEQ, 0.5), pct(seq_ms, SEQ, 0.99),
           seq_ms[SEQ - 1]);
    CHECKF(seq_ms[0] >= (double)min_rtt,
           "fastest round trip %.2f ms < %d ms: the traffic did not cross "
           "the delayed link",
           seq_ms[0], min_rtt);

    /* 2: windowed calls of assorted sizes. */
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = RDMX_CALL_PARAM_FIELD_TIMEOUT | RDMX_CALL_PARAM_FIELD_CB;
    cp.timeout_ms = 30000 * TH_SLOW;
    cp.cb = on_done;
    t_win = th_now_ms();
    for (i = 0; i < WINDOW; i++)
        slots[i].cb_calls = 1; /* free */
    completed = 0;
    while (completed < nwin) {
        for (i = 0; i < WINDOW && started < nwin; i++) {
            slot_t *s = &slots[i];
            rdmx_status_t r;

            if (s->cb_calls == 0)
                continue; /* in flight */
            if (s->t_start > 0) {
                /* the previous call of this slot ended: verify it */
                CHECKF(s->cb_calls == 1, "callback ran %d times", s->cb_calls);
                CHECKF(s->status == RDMX_OK, "call of %zu B: %s: %s", s->len,
                       rdmx_status_name(s->status), s->msg);
                CHECKF(s->ok, "call of %zu B: response differs", s->len);
                win_ms[nwin_ms++] = s->t_done - s->t_start;
            }
            memset(s, 0, sizeof(*s));
            s->len = size_of(started);
            s->seed = th_seed(2, (uint64_t)started, s->len);
            th_fill(buf, s->len, s->seed);
            s->t_start = th_now_ms();
            cp.arg = s;
            r = rdmx_call_nb(ch, started % 2 ? "echo_once" : "echo", buf,
                             s->len, &cp, NULL);
            CHECKF(r == RDMX_INPROGRESS, "call %d: %s: %s", started,
                   rdmx_status_name(r), rdmx_error_detail());
            req_bytes += s->len;
            resp_bytes += s->len;
            started++;
        }
        rdmx_worker_wait(w, 10);
    }
    for (i = 0; i < WINDOW; i++) {
        slot_t *s = &slots[i];

        if (s->t_start == 0)
            continue;
        CHECKF(s->cb_calls == 1, "callback ran %d times", s->cb_calls);
        CHECKF(s->status == RDMX_OK, "call of %zu B: %s: %s", s->len,
               rdmx_status_name(s->status), s->msg);
        CHECKF(s->ok, "call of %zu B: response differs", s->len);
        win_ms[nwin_ms++] = s->t_done - s->t_start;
    }
    CHECK(nwin_ms == nwin);
    t_win = th_now_ms() - t_win;
    qsort(win_ms, (size_t)nwin, sizeof(double), cmp_double);
    th_log("client: %d calls, %d in flight, 0 B..1 MiB (%.1f MiB each way) "
           "in %.0f ms: latency p50 %.1f p99 %.1f max %.1f ms",
           nwin, WINDOW, (double)(req_bytes) / TH_MIB, t_win,
           pct(win_ms, nwin, 0.5), pct(win_ms, nwin, 0.99), win_ms[nwin - 1]);

    rdmx_channel_stats(ch, &st);
    th_log("client: stats: calls %llu completed %llu failed %llu retries "
           "%llu reconnects %llu pings %llu",
           (unsigned long long)st.calls, (unsigned long long)st.completed,
           (unsigned long long)st.failed, (unsigned long long)st.retries,
           (unsigned long long)st.reconnects, (unsigned long long)st.pings);
    CHECK_EQ_U64(st.completed, (uint64_t)calls);
    CHECK_EQ_U64(st.failed, 0);
    CHECK_EQ_U64(st.reconnects, 0);
    CHECK_EQ_U64(st.retries, 0);
    CHECK(rdmx_channel_state(ch) == RDMX_CHANNEL_READY);
    rdmx_channel_destroy(ch);

    /* 5: the bytes went over the veth. */
    dev_bytes(dev, &rx1, &tx1);
    th_log("client: %s carried %.1f MiB out, %.1f MiB in (payload %.1f MiB "
           "each way)",
           dev, (double)(tx1 - tx0) / TH_MIB, (double)(rx1 - rx0) / TH_MIB,
           (double)req_bytes / TH_MIB);
    CHECKF(tx1 - tx0 >= req_bytes && rx1 - rx0 >= resp_bytes,
           "%s carried %llu B out / %llu B in, less than the %llu B of "
           "payload each way",
           dev, (unsigned long long)(tx1 - tx0),
           (unsigned long long)(rx1 - rx0), (unsigned long long)req_bytes);

    free(buf);
    free(resp);
    free(seq_ms);
    free(win_ms);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    th_log("client: ok (%.1f s)", (th_now_ms() - t0) / 1000.0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "server") == 0) {
        th_init("rpc_netem-server", 200);
        return trs_main(argc - 2, argv + 2);
    }
    if (argc > 1 && strcmp(argv[1], "client") == 0) {
        th_init("rpc_netem", 150);
        return client_main(argc - 2, argv + 2);
    }
    fprintf(stderr,
            "usage: %s server|client --address HOST:PORT ... "
            "(run by tests/rpc_netem.sh)\n",
            argv[0]);
    return 2;
}
