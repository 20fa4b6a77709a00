/*
 * rdmx-perf: results — percentiles and rates from the samples, and every
 * line rdmx-perf prints about them: the header, a row or a JSON object per
 * result, the RPC tests' notes and lambda_lat's table. Latencies in us, MB
 * are 10^6 bytes.
 */
#include "perf.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

/* lambda_lat's kinds of call (LK_*): their names and what each calls. */
static const char *const lk_names[LK_COUNT] = {"rpc", "hash", "source",
                                               "nocache"};
static const char *const lk_what[LK_COUNT] = {
    "perf.echo (plain RPC round trip)",
    "lambda.call by id, compiled code cached",
    "lambda.eval with the source, cached engine",
    "lambda.eval with the source, no cache",
};

/* qsort() order of uint64_t samples. */
int perf_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted samples. */
double perf_percentile(const uint64_t *s, uint64_t n, double q)
{
    uint64_t rank;

    if (n == 0) {
        return NAN;
    }
    rank = (uint64_t)ceil(q * (double)n);
    rank = rank == 0 ? 1 : rank > n ? n : rank;
    return (double)s[rank - 1];
}

/* A core test's result from its timing: percentiles (one-way for the
 * ping-pongs), average, rates. Sorts the samples. */
void perf_compute(result_t *r, timing_t *t)
{
    const bool pp = g_tests[r->test].pingpong;
    const double div = pp ? 2000.0 : 1000.0; /* ns -> us (one-way) */
    const double secs = (double)(t->t_end - t->t_start) / 1e9;
    const double msgs = (double)r->iters * (pp ? 2.0 : 1.0);

    qsort(t->samples, t->nsamples, sizeof(*t->samples), perf_cmp_u64);
    r->p50_us = perf_percentile(t->samples, t->nsamples, 0.50) / div;
    r->p99_us = perf_percentile(t->samples, t->nsamples, 0.99) / div;
    r->p999_us = perf_percentile(t->samples, t->nsamples, 0.999) / div;
    if (g_tests[r->test].bw) {
        r->avg_us = secs * 1e6 / (double)nwindows(r->iters, r->window);
    } else {
        r->avg_us = secs * 1e6 / msgs;
    }
    r->msg_s = secs > 0 ? msgs / secs : NAN;
    r->mb_s = r->msg_s * (double)r->size / 1e6;
}

/* What one timestamp costs (ns): every latency sample includes one. */
double g_clock_ns;

/* Measure it: the best of 5 runs of 10,000 reads. */
double perf_clock_cost_ns(void)
{
    double best = 1e9;

    for (int r = 0; r < 5; r++) {
        uint64_t t0 = now_ns(), t1;
        volatile uint64_t sink = 0;

        for (int i = 0; i < 10000; i++) {
            sink += now_ns();
        }
        t1 = now_ns();
        if ((double)(t1 - t0) / 10000.0 < best) {
            best = (double)(t1 - t0) / 10000.0;
        }
        (void)sink;
    }
    return best;
}

/* The first reply of a run names the server's transport: remember it, warn
 * when it differs from ours, and print the table's header. */
void perf_server_transport(const opts_t *o, uint32_t transport,
                           const char **server_transport)
{
    if (*server_transport != NULL) {
        return;
    }
    *server_transport = rdmx_transport_name((rdmx_transport_t)transport);
    if (transport != (uint32_t)o->transport) {
        fprintf(stderr,
                "rdmx-perf: warning: the server runs transport %s, this "
                "client %s; UCX uses what both have\n",
                *server_transport ? *server_transport : "?",
                rdmx_transport_name(o->transport));
    }
    perf_print_header(o, *server_transport ? *server_transport : "?");
}

/* The text table's header (nothing with --json). */
void perf_print_header(const opts_t *o, const char *server_transport)
{
    if (o->json) {
        return;
    }
    printf("# rdmx-perf %s -> %s, transport %s (server: %s), window %" PRIu64
           ", put/get_bw flush per %s\n",
           rdmx_version(), o->address,
           rdmx_transport_name(o->transport) ? rdmx_transport_name(o->transport)
                                             : "?",
           server_transport, o->window, o->flush_windows ? "window" : "run");
    printf("# latency columns: one-way (round trip / 2) for send_lat and "
           "put_lat, per operation\n"
           "# for get_lat and atomic_lat, per window of W operations for "
           "*_bw; MB = 10^6 bytes\n"
           "# each sample includes one clock_gettime (%.1f ns here)\n",
           g_clock_ns);
    printf("%-10s %10s %9s %10s %10s %10s %10s %11s %12s\n", "test", "bytes",
           "iters", "p50[us]", "p99[us]", "p99.9[us]", "avg[us]", "MB/s",
           "msg/s");
    fflush(stdout);
}

/* One result: a table row, or a JSON object with --json. */
void perf_print_result(const opts_t *o, const result_t *r)
{
    if (o->json && g_tests[r->test].rpc) {
        printf("{\"test\":\"%s\",\"bytes\":%zu,\"iterations\":%" PRIu64
               ",\"window\":%" PRIu64 ",\"threads\":%u,"
               "\"server_workers\":%u,\"poll\":\"%s\",\"transport\":\"%s\","
               "\"latency\":\"%s\",\"p50_us\":%.4f,\"p99_us\":%.4f,"
               "\"p999_us\":%.4f,\"avg_us\":%.4f,\"mb_per_s\":%.2f,"
               "\"gb_per_s\":%.4f,\"msg_per_s\":%.1f,\"calls_per_s\":%.1f,"
               "\"clock_ns\":%.1f}\n",
               g_tests[r->test].name, r->size, r->iters, r->window, r->threads,
               r->workers, perf_poll_name(r->poll),
               rdmx_transport_name(o->transport),
               r->test == TEST_RPC_RATE  ? "window"
               : r->test == TEST_RPC_LAT ? "round_trip"
                                         : "call",
               r->p50_us, r->p99_us, r->p999_us, r->avg_us, r->mb_s,
               r->mb_s / 1000.0, r->msg_s, r->msg_s, g_clock_ns);
        fflush(stdout);
        return;
    }
    if (o->json) {
        printf("{\"test\":\"%s\",\"bytes\":%zu,\"iterations\":%" PRIu64
               ",\"window\":%" PRIu64 ",\"transport\":\"%s\","
               "\"p50_us\":%.4f,\"p99_us\":%.4f,\"p999_us\":%.4f,"
               "\"avg_us\":%.4f,\"mb_per_s\":%.2f,\"msg_per_s\":%.1f,"
               "\"flush\":\"%s\",\"clock_ns\":%.1f}\n",
               g_tests[r->test].name, r->size, r->iters, r->window,
               rdmx_transport_name(o->transport), r->p50_us, r->p99_us,
               r->p999_us, r->avg_us, r->mb_s, r->msg_s,
               o->flush_windows ? "window" : "end", g_clock_ns);
    } else {
        printf("%-10s %10zu %9" PRIu64
               " %10.3f %10.3f %10.3f %10.3f %11.2f %12.0f\n",
               g_tests[r->test].name, r->size, r->iters, r->p50_us, r->p99_us,
               r->p999_us, r->avg_us, r->mb_s, r->msg_s);
    }
    fflush(stdout);
}

/* The line above an RPC test's row: threads, server, what latency means. */
void perf_print_rpc_note(const opts_t *o, const result_t *r,
                         const char *server_transport)
{
    if (o->json) {
        return;
    }
    printf("# %s: %u client thread(s), %" PRIu64 " call(s) in flight each; "
           "server %s: %u worker(s), poll %s; msg/s = calls/s; latency per ",
           g_tests[r->test].name, r->threads, r->window,
           server_transport ? server_transport : "?", r->workers,
           perf_poll_name(r->poll));
    if (r->test == TEST_RPC_RATE) {
        printf("window of %" PRIu64 " calls\n", r->window);
    } else if (r->test == TEST_RPC_LAT) {
        printf("round trip (not halved)\n");
    } else {
        printf("call (completion to completion)\n");
    }
    fflush(stdout);
}

/* Merge the threads' samples and timings into @p r. */
void perf_rpc_compute(const rpc_run_t *run, result_t *r)
{
    uint64_t n = 0, sum = 0, t0 = UINT64_MAX, t1 = 0, *all;
    double secs, calls = (double)run->iters * run->threads;

    for (unsigned i = 0; i < run->threads; i++) {
        n += run->th[i].nsamples;
    }
    all = calloc(n ? n : 1, sizeof(*all));
    n = 0;
    for (unsigned i = 0; i < run->threads; i++) {
        const rpc_thread_t *t = &run->th[i];

        for (uint64_t k = 0; k < t->nsamples; k++) {
            if (all != NULL) {
                all[n] = t->samples[k];
            }
            sum += t->samples[k];
            n++;
        }
        t0 = t->t_start < t0 ? t->t_start : t0;
        t1 = t->t_end > t1 ? t->t_end : t1;
    }
    if (all != NULL) {
        qsort(all, n, sizeof(*all), perf_cmp_u64);
        r->p50_us = perf_percentile(all, n, 0.50) / 1000.0;
        r->p99_us = perf_percentile(all, n, 0.99) / 1000.0;
        r->p999_us = perf_percentile(all, n, 0.999) / 1000.0;
    } else {
        r->p50_us = r->p99_us = r->p999_us = NAN;
    }
    r->avg_us = n ? (double)sum / (double)n / 1000.0 : NAN;
    secs = t1 > t0 ? (double)(t1 - t0) / 1e9 : NAN;
    r->msg_s = calls / secs;
    r->mb_s = r->msg_s * (double)r->size / 1e6;
    free(all);
}

/* lambda_lat: each kind's latency, merged over the threads, and its ratio
 * to the plain RPC round trip. */
void perf_lambda_print(const opts_t *o, const rpc_run_t *run, const result_t *r,
                       const char *server_transport)
{
    double p50[LK_COUNT], p99[LK_COUNT], p999[LK_COUNT], avg[LK_COUNT];

    for (int k = 0; k < LK_COUNT; k++) {
        uint64_t n = 0, sum = 0, *all;

        for (unsigned i = 0; i < run->threads; i++) {
            n += run->th[i].lnsamples[k];
        }
        all = calloc(n ? n : 1, sizeof(*all));
        if (all == NULL) {
            p50[k] = p99[k] = p999[k] = avg[k] = NAN;
            continue;
        }
        n = 0;
        for (unsigned i = 0; i < run->threads; i++) {
            for (uint64_t j = 0; j < run->th[i].lnsamples[k]; j++) {
                all[n++] = run->th[i].lsamples[k][j];
                sum += run->th[i].lsamples[k][j];
            }
        }
        qsort(all, n, sizeof(*all), perf_cmp_u64);
        p50[k] = perf_percentile(all, n, 0.50) / 1000.0;
        p99[k] = perf_percentile(all, n, 0.99) / 1000.0;
        p999[k] = perf_percentile(all, n, 0.999) / 1000.0;
        avg[k] = n ? (double)sum / (double)n / 1000.0 : NAN;
        free(all);
    }
    if (!o->json) {
        printf("# lambda_lat: %u client thread(s), blocking calls of %s%s%s "
               "with %zu B of input, %" PRIu64
               " per kind, interleaved in blocks of %d; server %s: %u "
               "worker(s), poll %s; latency per round trip\n",
               r->threads, o->function ? "" : "the empty function \"",
               o->function ? o->function : LAMBDA_SOURCE,
               o->function ? "" : "\"", r->size, r->iters, LAMBDA_BLOCK,
               server_transport ? server_transport : "?", r->workers,
               perf_poll_name(r->poll));
        printf("%-10s %-8s %10s %10s %10s %10s %8s %8s  %s\n", "test", "kind",
               "p50[us]", "p99[us]", "p99.9[us]", "avg[us]", "p50/rpc",
               "p99/rpc", "call");
    }
    for (int k = 0; k < LK_COUNT; k++) {
        if (o->json) {
            printf("{\"test\":\"lambda_lat\",\"kind\":\"%s\",\"bytes\":%zu,"
                   "\"iterations\":%" PRIu64 ",\"threads\":%u,"
                   "\"server_workers\":%u,\"poll\":\"%s\","
                   "\"transport\":\"%s\",\"p50_us\":%.4f,\"p99_us\":%.4f,"
                   "\"p999_us\":%.4f,\"avg_us\":%.4f,\"p50_vs_rpc\":%.3f,"
                   "\"p99_vs_rpc\":%.3f,\"clock_ns\":%.1f}\n",
                   lk_names[k], r->size, r->iters, r->threads, r->workers,
                   perf_poll_name(r->poll), rdmx_transport_name(o->transport),
                   p50[k], p99[k], p999[k], avg[k], p50[k] / p50[LK_RPC],
                   p99[k] / p99[LK_RPC], g_clock_ns);
        } else {
            printf("%-10s %-8s %10.3f %10.3f %10.3f %10.3f %7.2fx %7.2fx  "
                   "%s\n",
                   "lambda_lat", lk_names[k], p50[k], p99[k], p999[k], avg[k],
                   p50[k] / p50[LK_RPC], p99[k] / p99[LK_RPC], lk_what[k]);
        }
    }
    fflush(stdout);
}
