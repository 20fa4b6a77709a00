/*
 * rdmx-perf — a perftest-style benchmark of rdmx between two processes.
 *
 * The server (`rdmx-perf --listen [HOST:]PORT`) waits for clients; the client
 * (`rdmx-perf HOST:PORT -t TEST ...`) runs tests against it. Before each test
 * the client sends a small control message naming the test, the size, the
 * iteration counts and the window, together with a descriptor of its receive
 * buffer; the server allocates its buffers with rdmx_mem_alloc(), replies
 * with a descriptor of its own and runs its half of the test. At the end the
 * client sends DONE and waits for the server's acknowledgement, so the two
 * halves start every test from the same point; QUIT / QUIT_ACK ends the
 * session, and the client closes first so that nothing the server sent can
 * be overtaken by the disconnect.
 *
 * The methodology follows ucx_perftest (UCP tests) so that their figures can
 * be compared directly:
 *   send_lat    ping-pong of SIZE-byte messages with receives posted before
 *               the message can arrive; one-way latency = round trip / 2
 *               (ucx_perftest's AM latency test).
 *   send_bw     the client keeps up to W sends in flight; the server keeps
 *               2W receives posted and acknowledges every window of W
 *               messages; the client never runs more than two windows ahead
 *               of the acknowledgements (ucx_perftest's AM bandwidth test,
 *               with flow control).
 *   put_lat     the client puts SIZE bytes into the server's buffer; the
 *               server polls the buffer's last byte (a sequence number) while
 *               progressing, then puts back into the client's buffer, which
 *               the client polls; one-way = round trip / 2 (ucx_perftest's
 *               put latency test).
 *   put_bw,     W operations in flight, then a flush, per window; reported
 *   get_bw      as MB/s and messages/s. With --flush end: up to W
 *               operations in flight and one flush at the end, which is
 *               exactly ucx_perftest's put bandwidth / get tests with -O W.
 *   get_lat     one get at a time; the latency of each get (ucx_perftest's
 *               get test, -O 1).
 *   atomic_lat  one 64-bit fetch-and-add at a time (ucx_perftest's
 *               fetch-add test, -O 1).
 * RPC tests (rdmx_rpc_server_* on the server, channels on the client):
 *   rpc_lat     blocking round trips (rdmx_call) of SIZE bytes (default 64)
 *               to an "echo" handler that returns its request; the latency
 *               columns are whole round trips (not halved).
 *   rpc_rate    calls per second with W calls in flight (rdmx_call_nb,
 *               default W 32) to the same handler; with -T N, N client
 *               threads each with its own worker and channel.
 *   rpc_bulk    a call carrying a bulk descriptor of SIZE bytes (default
 *               64 MiB) of the client's memory; the handler pulls it with
 *               rdmx_get_nb and then answers. GB/s of payload moved.
 *   rpc_bulk_push  the same, the handler pushes SIZE bytes into the
 *               client's memory with rdmx_put_nb, flushes, then answers.
 *               With one call in flight the client checks a token in the
 *               first and last 8 bytes that moved.
 *   lambda_lat  the cost of calling an empty Lua function ("return") next to
 *               the data, against a plain RPC round trip, in one run: four
 *               kinds of blocking call, interleaved in blocks of 100 so that
 *               a slow phase of the machine hits all of them alike:
 *                 rpc      perf.echo of SIZE bytes (default 0)
 *                 hash     lambda.call by the function's id: the engine has
 *                          its compiled code cached (the common case)
 *                 source   lambda.eval with the source every time; the
 *                          engine still finds the compiled code cached
 *                 nocache  perf.lambda_nocache: the same lambda.eval
 *                          request, run by a second engine without a cache
 *                          (cache_entries 0), so every call compiles
 *               Requests are encoded once (docs/LAMBDA.md, "Wire format");
 *               SIZE bytes of input go to every call. Each kind gets p50,
 *               p99, p99.9 and its ratio to rpc. --function FILE calls
 *               another function than "return". Not part of "-t rpc".
 * For these the server starts an RPC server on another port for the test
 * only (--server-workers, --poll; busy polling by default) and sleeps on its
 * control connection meanwhile, so that its CPU belongs to the RPC workers;
 * the client's control thread sleeps too. -n is per client thread; calls/s
 * are over all threads, from the first thread's start to the last one's
 * end. --rpc-only runs an RPC server alone (server) or connects the
 * channels straight to one (client), for several client processes against
 * one server. The rpc_bulk* channels allow 30 s of silence before declaring
 * the server down (default 1 s): a worker copying a large buffer inside a
 * handler answers no heartbeat meanwhile.
 * All buffers on both sides come from rdmx_mem_alloc(), which like
 * ucx_perftest's "-m host" maps memory with UCX's "allocate" flag. Each side
 * has a send and a receive buffer of SIZE bytes, as in ucx_perftest, and
 * every operation reuses them.
 *
 * Latency percentiles come from per-iteration timestamps (CLOCK_MONOTONIC,
 * one clock read per iteration, as ucx_perftest reads its clock once per
 * iteration); for bandwidth tests they are the times of whole windows. MB
 * are 10^6 bytes. The server busy-polls while a client is connected and
 * sleeps on the worker's file descriptor otherwise, so an idle server costs
 * no CPU (important on a 2-core machine). Nothing is allocated on the hot
 * path: sample arrays and buffers are set up before each test.
 *
 * The code, by concern: perf.h lists the files.
 */
#include "perf.h"

#include <signal.h>
#include <stdlib.h>

/* The client: every selected test at every size, over one control
 * connection (or, with --rpc-only, channels straight to an RPC server),
 * then QUIT. */
static int run_client(perf_t *p, const opts_t *o)
{
    const char *server_transport = NULL;
    rdmx_ep_params_t ep_params = {
        .field_mask =
            RDMX_EP_PARAM_FIELD_ERROR_CB | RDMX_EP_PARAM_FIELD_USER_DATA,
        .error_cb = perf_ep_error_cb,
        .user_data = p,
    };
    rdmx_status_t st;

    g_clock_ns = perf_clock_cost_ns();
    perf_watchdog_arm(o->timeout_s);
    if (o->rpc_only) {
        /* channels straight to an RPC server: no control connection */
        for (unsigned si = 0; si < o->nsizes; si++) {
            for (int ti = 0; ti < TEST_COUNT; ti++) {
                if (!o->tests[ti]) {
                    continue;
                }
                if (!g_tests[ti].rpc) {
                    fprintf(stderr,
                            "rdmx-perf: %s needs the control "
                            "connection (drop --rpc-only)\n",
                            g_tests[ti].name);
                    return -1;
                }
                if (!o->sizes_set && si != 0) {
                    continue;
                }
                if (perf_client_rpc_test(p, o, (test_id_t)ti,
                                         o->sizes_set ? o->sizes[si]
                                                      : g_tests[ti].size,
                                         &server_transport) < 0) {
                    return -1;
                }
            }
        }
        return 0;
    }
    ep_params.field_mask |= RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT;
    ep_params.connect_timeout_ms = CONNECT_TIMEOUT;
    st = rdmx_connect(p->worker, o->address, &ep_params, &p->ep);
    if (st != RDMX_OK) {
        perf_fail("connect", st); /* the detail names the address */
        if (p->ep) {
            rdmx_ep_close(p->ep);
            p->ep = NULL;
        }
        return -1;
    }
    for (unsigned si = 0; si < o->nsizes; si++) {
        for (int ti = 0; ti < TEST_COUNT; ti++) {
            size_t size = o->sizes[si];

            if (!o->tests[ti]) {
                continue;
            }
            if (ti == TEST_ATOMIC_LAT) {
                /* 64-bit operand: run once, with the first size in a list */
                if (si != 0) {
                    continue;
                }
                size = 8;
            }
            if (g_tests[ti].rpc) {
                /* without -s/-a: once, with the test's own default size */
                if (!o->sizes_set && si != 0) {
                    continue;
                }
                if (perf_client_rpc_test(p, o, (test_id_t)ti,
                                         o->sizes_set ? size : g_tests[ti].size,
                                         &server_transport) < 0) {
                    return -1;
                }
                continue;
            }
            if (perf_client_test(p, o, (test_id_t)ti, size, &server_transport) <
                0) {
                return -1;
            }
        }
    }
    /* QUIT -> QUIT_ACK, then close: the server waits for our close */
    return perf_ctrl_quit(p);
}

/* Listener: keep the first client that arrives (one at a time). */
static void accept_cb(rdmx_ep_t *ep, void *arg)
{
    perf_t *p = arg;

    if (p->pending != NULL) {
        rdmx_ep_close(ep); /* one client at a time */
        return;
    }
    p->pending = ep;
    p->pending_status = RDMX_OK;
}

/* The server: wait for a client, serve it until it leaves, again (with
 * --once: one client). Sleeps on the worker's fd while idle. */
static int run_server(perf_t *p, const opts_t *o, const char *host)
{
    char address[300];
    rdmx_listener_t *listener = NULL;
    rdmx_listener_params_t lp = {
        .field_mask = RDMX_LISTENER_PARAM_FIELD_ADDRESS |
                      RDMX_LISTENER_PARAM_FIELD_ACCEPT_CB |
                      RDMX_LISTENER_PARAM_FIELD_EP_PARAMS,
        .address = o->listen,
        .accept_cb = accept_cb,
        .arg = p,
        .ep_params =
            {
                .field_mask = RDMX_EP_PARAM_FIELD_ERROR_CB |
                              RDMX_EP_PARAM_FIELD_USER_DATA,
                .error_cb = perf_ep_error_cb,
                .user_data = p,
            },
    };
    rdmx_status_t st;
    int rc = 0;

    st = rdmx_listener_create(p->worker, &lp, &listener);
    if (st != RDMX_OK) {
        char what[300];

        snprintf(what, sizeof(what), "listen on %s", o->listen);
        return perf_fail(what, st);
    }
    perf_format_address(address, sizeof(address), host,
                        rdmx_listener_port(listener));
    printf("listening on %s\n", address);
    fflush(stdout);

    for (;;) {
        /* idle: sleep on the worker's fd until a client arrives */
        while (p->pending == NULL) {
            st = rdmx_worker_wait(p->worker, 1000);
            if (st != RDMX_OK && st != RDMX_ERR_TIMEOUT) {
                rc = perf_fail("wait for a client", st);
                goto out;
            }
        }
        p->ep = p->pending;
        p->conn_status = p->pending_status;
        p->pending = NULL;
        ops_reset(&p->ctrl_rx_ops);
        ops_reset(&p->ctrl_tx_ops);
        rc = p->conn_status == RDMX_OK ? perf_serve_client(p) : 0;
        perf_teardown_conn(p);
        p->conn_status = RDMX_OK;
        if (o->once) {
            break;
        }
        if (rc < 0) {
            fprintf(stderr, "rdmx-perf: client dropped; waiting for the "
                            "next one\n");
        }
    }
out:
    if (p->pending) {
        rdmx_ep_close(p->pending);
        p->pending = NULL;
    }
    rdmx_listener_destroy(listener);
    return rc;
}

/* Exit status: 0 done, 1 a test or the set-up failed, 2 a bad command
 * line, 3 --timeout. */
int main(int argc, char **argv)
{
    static perf_t perf; /* large control buffers: not on the stack */
    perf_t *p = &perf;
    opts_t o;
    rdmx_context_params_t cp = {0};
    rdmx_status_t st;
    int rc;

    if (perf_parse_args(argc, argv, &o) < 0) {
        return 2;
    }
    /* perf_watchdog (conn.c) calls write() and _exit() only, which the
     * check cannot see from this file. */
    /* NOLINTNEXTLINE(bugprone-signal-handler) */
    signal(SIGALRM, perf_watchdog);

    if (o.transport_set) {
        cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_TRANSPORT |
                         RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME;
        cp.transport = o.transport;
        cp.transport_name = o.transport_name;
    }
    if (rdmx_host_is_loopback(o.host) && getenv("UCX_NET_DEVICES") == NULL) {
        cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
        cp.net_devices = "lo";
    }
    cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NAME;
    cp.name = "rdmx-perf";
    st = rdmx_context_create(&cp, &p->ctx);
    if (st != RDMX_OK) {
        perf_fail("create context", st);
        return 1;
    }
    o.transport = rdmx_context_transport(p->ctx);
    if (strncmp(rdmx_context_backend(p->ctx), "ofi", 3) == 0)
        fprintf(stderr, "rdmx-perf: backend %s\n",
                rdmx_context_backend(p->ctx));
    /* (rdmx-perf polls, as ucx_perftest does) */
    rdmx_worker_params_t wp = {.field_mask = RDMX_WORKER_PARAM_FIELD_FLAGS,
                               .flags = RDMX_WORKER_FLAG_BUSY_POLL};
    st = rdmx_worker_create(p->ctx, &wp, &p->worker);
    if (st != RDMX_OK) {
        perf_fail("create worker", st);
        rdmx_context_destroy(p->ctx);
        return 1;
    }

    p->opts = &o;
    snprintf(p->host, sizeof(p->host), "%s", o.host);
    rc = !o.listen    ? run_client(p, &o)
         : o.rpc_only ? perf_run_rpc_server(p, &o, o.host)
                      : run_server(p, &o, o.host);

    perf_teardown_conn(p);
    rdmx_worker_destroy(p->worker);
    rdmx_context_destroy(p->ctx);
    free(o.function_src);
    return rc < 0 ? 1 : 0;
}
