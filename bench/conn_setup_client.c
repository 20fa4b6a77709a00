/*
 * conn_setup_client — open a connection, make one small request, close it;
 * N times in a row. For bench/conn-setup.sh, which measures what this costs
 * the server.
 *
 *   conn_setup_client rdmx HOST:PORT N [--timeout MS]
 *   conn_setup_client memcached HOST:PORT N [--timeout MS]
 *
 * rdmx: one rdmx context and one worker for the whole run (as a real client
 * keeps them), and per connection: rdmx_kv_create() on that one server,
 * rdmx_kv_wait_ready() (the connection and the RPC channel's handshake),
 * rdmx_kv_exists() of a key that is never stored (one request and its
 * answer, RDMX_ERR_NOT_FOUND expected), rdmx_kv_destroy() (orderly close;
 * the close completes during the next connection's progress, and the last
 * one in rdmx_worker_destroy()). The transport comes from RDMX_TRANSPORT,
 * the network devices from UCX_NET_DEVICES.
 *
 * memcached: per connection a blocking TCP socket: connect(), send
 * "version\r\n", read the reply line ("VERSION x.y.z\r\n"), close().
 *
 * Each connection is timed in three phases with clock_gettime(MONOTONIC):
 * open (connect + handshake), request (the request and its answer), close.
 * A failed connection counts as an error and the run goes on (up to 10
 * errors, the first 3 printed with their detail on stderr).
 * Output, one line on stdout:
 *   conn_setup_client mode=rdmx conns=N errors=E wall_s=.. conns_per_s=..
 *     open_us_p50=.. open_us_p99=.. open_us_max=.. req_us_avg=..
 *     close_us_avg=.. total_us_p50=.. total_us_p99=.. total_us_max=..
 *     client_cpu_us_per_conn=..
 * Exit status 0 if every connection worked, 1 otherwise.
 *
 * Build (bench/conn-setup.sh does this, after make):
 *   cc -O2 -I include -I tools/common -o conn_setup_client \
 *      bench/conn_setup_client.c build/lib/librdmx_tools_common.a \
 *      build/lib/librdmx.a $(pkg-config --libs ucx libcrypto lua5.4) \
 *      -lpthread -ldl -lm
 */
#define _GNU_SOURCE
#include <rdmx/kv.h>
#include <rdmx/rdmx.h>

#include "bench.h"
#include "options.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_ERRORS 10
#define PRINT_ERRORS 3

static const char MISSING_KEY[] = "conn-setup:never-stored";

/* Percentile p (0..1) of n sorted values, in us. */
static double pct_us(const uint64_t *v, size_t n, double p)
{
    size_t i;
    if (n == 0)
        return 0;
    i = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)v[i] / 1e3;
}

typedef struct {
    uint64_t *open_ns, *total_ns; /* per successful connection */
    size_t n;                     /* successful connections */
    uint64_t req_ns, close_ns;    /* sums */
    unsigned errors;
} results_t;

static void error_note(results_t *r, unsigned long i, const char *what,
                       const char *detail)
{
    r->errors++;
    if (r->errors <= PRINT_ERRORS)
        fprintf(stderr, "conn_setup_client: connection %lu: %s: %s\n", i,
                what, detail);
}

/* --- rdmx ----------------------------------------------------------------- */

static int run_rdmx(const char *server, unsigned long n, int timeout_ms,
                    results_t *r)
{
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    rdmx_kv_params_t p = {0};
    rdmx_status_t st;
    char msg[512];

    if ((st = rdmx_context_create(NULL, &ctx)) != RDMX_OK) {
        fprintf(stderr, "conn_setup_client: context: %s: %s\n",
                rdmx_strerror(st), rdmx_error_detail());
        return -1;
    }
    if ((st = rdmx_worker_create(ctx, NULL, &w)) != RDMX_OK) {
        fprintf(stderr, "conn_setup_client: worker: %s: %s\n",
                rdmx_strerror(st), rdmx_error_detail());
        rdmx_context_destroy(ctx);
        return -1;
    }
    p.field_mask = RDMX_KV_PARAM_FIELD_TIMEOUT;
    p.timeout_ms = timeout_ms;

    for (unsigned long i = 0; i < n && r->errors < MAX_ERRORS; i++) {
        rdmx_kv_t *kv = NULL;
        uint64_t t0, t1, t2, t3;

        t0 = now_ns();
        st = rdmx_kv_create(w, server, &p, &kv);
        if (st == RDMX_OK)
            st = rdmx_kv_wait_ready(kv, timeout_ms);
        if (st != RDMX_OK) {
            snprintf(msg, sizeof(msg), "%s (%s)", rdmx_strerror(st),
                     rdmx_error_detail());
            error_note(r, i, "connect", msg);
            rdmx_kv_destroy(kv);
            continue;
        }
        t1 = now_ns();
        st = rdmx_kv_exists(kv, MISSING_KEY, sizeof(MISSING_KEY) - 1);
        t2 = now_ns();
        if (st != RDMX_ERR_NOT_FOUND) {
            snprintf(msg, sizeof(msg), "%s (%s)", rdmx_strerror(st),
                     st == RDMX_OK ? "the key exists" : rdmx_error_detail());
            error_note(r, i, "exists", msg);
            rdmx_kv_destroy(kv);
            continue;
        }
        rdmx_kv_destroy(kv);
        t3 = now_ns();
        r->open_ns[r->n] = t1 - t0;
        r->total_ns[r->n] = t3 - t0;
        r->n++;
        r->req_ns += t2 - t1;
        r->close_ns += t3 - t2;
    }
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    return 0;
}

/* --- memcached ------------------------------------------------------------ */

static int run_memcached(const char *server, unsigned long n, int timeout_ms,
                         results_t *r)
{
    static const char req[] = "version\r\n";
    char host[256], port[8], buf[256], msg[512];
    struct addrinfo hints = {0}, *ai;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    uint16_t portnum;
    int rc;

    if (opt_address(server, host, sizeof(host), &portnum) < 0) {
        fprintf(stderr, "conn_setup_client: bad address '%s': %s\n", server,
                opt_error());
        return -1;
    }
    snprintf(port, sizeof(port), "%u", (unsigned)portnum);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if ((rc = getaddrinfo(host, port, &hints, &ai)) != 0) {
        fprintf(stderr, "conn_setup_client: %s: %s\n", server,
                gai_strerror(rc));
        return -1;
    }

    for (unsigned long i = 0; i < n && r->errors < MAX_ERRORS; i++) {
        uint64_t t0, t1, t2, t3;
        size_t got = 0;
        int fd, one = 1;
        ssize_t k;

        t0 = now_ns();
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            error_note(r, i, "socket", strerror(errno));
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            error_note(r, i, "connect", strerror(errno));
            close(fd);
            continue;
        }
        t1 = now_ns();
        if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) !=
            (ssize_t)(sizeof(req) - 1)) {
            error_note(r, i, "send", strerror(errno));
            close(fd);
            continue;
        }
        while (got < sizeof(buf) - 1) {
            k = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
            if (k <= 0)
                break;
            got += (size_t)k;
            if (memchr(buf, '\n', got) != NULL)
                break;
        }
        buf[got] = '\0';
        t2 = now_ns();
        if (strncmp(buf, "VERSION ", 8) != 0 || strchr(buf, '\n') == NULL) {
            snprintf(msg, sizeof(msg), "reply '%.64s'%s%s", buf,
                     got == 0 ? ": " : "", got == 0 ? strerror(errno) : "");
            error_note(r, i, "version", msg);
            close(fd);
            continue;
        }
        close(fd);
        t3 = now_ns();
        r->open_ns[r->n] = t1 - t0;
        r->total_ns[r->n] = t3 - t0;
        r->n++;
        r->req_ns += t2 - t1;
        r->close_ns += t3 - t2;
    }
    freeaddrinfo(ai);
    return 0;
}

/* --- main ----------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: conn_setup_client rdmx|memcached HOST:PORT N "
               "[--timeout MS]\n");
}

int main(int argc, char **argv)
{
    const char *mode, *server;
    unsigned long n;
    int timeout_ms = 10000, rc;
    results_t r = {0};
    struct rusage ru;
    uint64_t t0, t1, v;
    double wall, cpu_us;

    if (argc >= 2 &&
        (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc != 4 && !(argc == 6 && strcmp(argv[4], "--timeout") == 0)) {
        usage(stderr);
        return 2;
    }
    mode = argv[1];
    server = argv[2];
    if (opt_uint(argv[3], 1, 100000000, &v) < 0) {
        fprintf(stderr, "conn_setup_client: bad N '%s': %s\n", argv[3],
                opt_error());
        return 2;
    }
    n = (unsigned long)v;
    if (argc == 6) {
        if (opt_duration(argv[5], OPT_MS, &v) < 0) {
            fprintf(stderr, "conn_setup_client: bad --timeout '%s': %s\n",
                    argv[5], opt_error());
            return 2;
        }
        if (v == 0 || opt_ns_to_ms(v) > INT_MAX) {
            fprintf(stderr, "conn_setup_client: bad --timeout '%s': 1 ms .. "
                            "%d ms\n",
                    argv[5], INT_MAX);
            return 2;
        }
        timeout_ms = (int)opt_ns_to_ms(v);
    }
    r.open_ns = calloc(n, sizeof(uint64_t));
    r.total_ns = calloc(n, sizeof(uint64_t));
    if (r.open_ns == NULL || r.total_ns == NULL) {
        fprintf(stderr, "conn_setup_client: out of memory\n");
        return 1;
    }

    t0 = now_ns();
    if (strcmp(mode, "rdmx") == 0)
        rc = run_rdmx(server, n, timeout_ms, &r);
    else if (strcmp(mode, "memcached") == 0)
        rc = run_memcached(server, n, timeout_ms, &r);
    else {
        usage(stderr);
        return 2;
    }
    t1 = now_ns();
    if (rc != 0)
        return 1;

    getrusage(RUSAGE_SELF, &ru);
    cpu_us = (double)ru.ru_utime.tv_sec * 1e6 + (double)ru.ru_utime.tv_usec +
             (double)ru.ru_stime.tv_sec * 1e6 + (double)ru.ru_stime.tv_usec;
    wall = (double)(t1 - t0) / 1e9;
    if (r.errors >= MAX_ERRORS)
        fprintf(stderr, "conn_setup_client: stopped after %u errors\n",
                r.errors);
    qsort(r.open_ns, r.n, sizeof(uint64_t), cmp_u64);
    qsort(r.total_ns, r.n, sizeof(uint64_t), cmp_u64);
    printf("conn_setup_client mode=%s conns=%zu errors=%u wall_s=%.4f "
           "conns_per_s=%.1f open_us_p50=%.1f open_us_p99=%.1f "
           "open_us_max=%.1f req_us_avg=%.1f close_us_avg=%.1f "
           "total_us_p50=%.1f total_us_p99=%.1f total_us_max=%.1f "
           "client_cpu_us_per_conn=%.1f\n",
           mode, r.n, r.errors, wall, wall > 0 ? (double)r.n / wall : 0,
           pct_us(r.open_ns, r.n, 0.5), pct_us(r.open_ns, r.n, 0.99),
           pct_us(r.open_ns, r.n, 1.0),
           r.n ? (double)r.req_ns / 1e3 / (double)r.n : 0,
           r.n ? (double)r.close_ns / 1e3 / (double)r.n : 0,
           pct_us(r.total_ns, r.n, 0.5), pct_us(r.total_ns, r.n, 0.99),
           pct_us(r.total_ns, r.n, 1.0),
           r.n ? cpu_us / (double)r.n : 0);
    free(r.open_ns);
    free(r.total_ns);
    return r.errors == 0 ? 0 : 1;
}
