/*
 * The HTTP endpoint of an RPC server (include/rdmx/metrics.h): GET
 * /metrics in Prometheus text format, GET /health in JSON, over
 * libmicrohttpd (the only file that includes it). docs/OPERATIONS.md
 * lists the names and says how reading never blocks the data path.
 *
 * Threads: libmicrohttpd's one internal thread runs every callback here;
 * create and destroy run on the caller's. The HTTP counters are written by
 * that thread alone and read by it alone (relaxed atomics all the same).
 */
#define _GNU_SOURCE
#include <rdmx/metrics.h>

#include "rpc/health.h"
#include "rpc/internal.h"

#include <microhttpd.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Request line and headers past this are refused (431) by libmicrohttpd. */
#define METRICS_HTTP_MEMORY_LIMIT (16u << 10)
#define METRICS_HTTP_CONNECTIONS  32
#define METRICS_HTTP_TIMEOUT_S    10

/* Set at create and read-only afterwards, but for the HTTP counters. */
struct rdmx_metrics_http {
    struct MHD_Daemon *daemon;            /* its thread runs every callback */
    uint16_t port;                        /* the port bound */
    rdmx_rpc_server_t *rpc;               /* or NULL; outlives the endpoint */
    rdmx_metrics_collect_cb_t collect_cb; /* or NULL */
    void *collect_arg;
    uint64_t memory; /* bytes the program registers */
    /* Markers in a request's con_cls: seen by the URI log (libmicrohttpd
     * may still refuse it) or handed to on_request. */
    char seen, handled;
    /* HTTP counters: written by the HTTP thread (relaxed atomics). */
    uint64_t req_metrics, req_health, req_other, bad_requests;
};

/* A page being written, on the HTTP thread's stack. */
struct rdmx_metrics_page {
    char *buf;       /* malloc'd; NULL after an allocation failed */
    size_t len, cap; /* bytes written, bytes allocated */
    char last[128];  /* name of the last sample written */
};

/* --- page text ------------------------------------------------------------ */

/* Append printf-style text to @p, growing it; on failure the page is
 * dropped (buf NULL) and later appends do nothing. */
static void page_printf(rdmx_metrics_page_t *p, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (p->buf == NULL)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(p->buf + p->len, p->cap - p->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            free(p->buf);
            p->buf = NULL;
            return;
        }
        if ((size_t)n < p->cap - p->len) {
            p->len += (size_t)n;
            return;
        }
        size_t cap = (p->cap + (size_t)n + 1) * 2;
        char *b = realloc(p->buf, cap);
        if (b == NULL) {
            free(p->buf);
            p->buf = NULL;
            return;
        }
        p->buf = b;
        p->cap = cap;
    }
}

/* Append @s with '\\', '"' and newlines escaped (a label value, JSON
 * string or HELP text: the same three escapes serve all). */
static void page_escaped(rdmx_metrics_page_t *p, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"')
            page_printf(p, "\\%c", *s);
        else if (*s == '\n')
            page_printf(p, "\\n");
        else if ((unsigned char)*s < 0x20)
            page_printf(p, " ");
        else
            page_printf(p, "%c", *s);
    }
}

/* HELP and TYPE lines of @name, unless its previous sample wrote them. */
static void page_header(rdmx_metrics_page_t *p, const char *name,
                        const char *type, const char *help)
{
    if (strcmp(p->last, name) == 0)
        return;
    snprintf(p->last, sizeof(p->last), "%s", name);
    page_printf(p, "# HELP %s ", name);
    for (const char *s = help; *s != '\0'; s++) {
        if (*s == '\\')
            page_printf(p, "\\\\");
        else if (*s == '\n')
            page_printf(p, "\\n");
        else
            page_printf(p, "%c", *s);
    }
    page_printf(p, "\n# TYPE %s %s\n", name, type);
}

void rdmx_metrics_page_add(rdmx_metrics_page_t *p, const char *name,
                           rdmx_metric_type_t type, const char *help,
                           const char *labels, uint64_t value)
{
    page_header(p, name, type == RDMX_METRIC_COUNTER ? "counter" : "gauge",
                help);
    if (labels != NULL && labels[0] != '\0')
        page_printf(p, "%s{%s} %llu\n", name, labels,
                    (unsigned long long)value);
    else
        page_printf(p, "%s %llu\n", name, (unsigned long long)value);
}

/* --- latency histograms --------------------------------------------------- */

/* Upper bounds of the histogram's buckets, in ns (docs/OPERATIONS.md). */
static const uint64_t le_ns[] = {
    1000,          2500,          5000,      10000,      25000,
    50000,         100000,        250000,    500000,     1000000,
    2500000,       5000000,       10000000,  25000000,   50000000,
    100000000,     250000000,     500000000, 1000000000, 2500000000ull,
    5000000000ull, 10000000000ull};
#define NLE (sizeof(le_ns) / sizeof(le_ns[0]))

/* Range [lo, hi) of the server histogram's bucket @idx (rpc/metrics.c's
 * log-linear layout), in ns. */
static void bucket_range(unsigned idx, uint64_t *lo_p, uint64_t *hi_p)
{
    unsigned e, sub;
    uint64_t width;

    if (idx < RDMX_HIST_SUB) {
        *lo_p = idx;
        *hi_p = idx + 1;
        return;
    }
    e = idx / RDMX_HIST_SUB + 3;
    sub = idx % RDMX_HIST_SUB;
    width = 1ull << (e - 4);
    *lo_p = (1ull << e) + sub * width;
    *hi_p = *lo_p + width;
}

/* One handler's latency as a Prometheus histogram: each server bucket
 * goes to the first bound its whole range is at or below. */
static void page_histogram(rdmx_metrics_page_t *p, const char *label,
                           const rdmx_hist_t *h)
{
    static const char name[] = "rdmx_rpc_handler_latency_seconds";
    uint64_t cum[NLE] = {0}, total = 0;
    double sum_ns = 0;

    page_header(p, name, "histogram",
                "Time from a request's arrival to its answer.");
    for (unsigned i = 0; i < RDMX_HIST_BUCKETS; i++) {
        uint64_t n = h->bucket[i], lo, hi;
        if (n == 0)
            continue;
        bucket_range(i, &lo, &hi);
        total += n;
        sum_ns += (double)n * (double)(lo + hi) / 2.0;
        for (unsigned k = 0; k < NLE; k++) {
            if (hi - 1 <= le_ns[k]) {
                cum[k] += n;
                break;
            }
        }
    }
    for (unsigned k = 1; k < NLE; k++)
        cum[k] += cum[k - 1];
    for (unsigned k = 0; k < NLE; k++)
        page_printf(p, "%s_bucket{%s,le=\"%g\"} %llu\n", name, label,
                    (double)le_ns[k] / 1e9, (unsigned long long)cum[k]);
    page_printf(p, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, label,
                (unsigned long long)total);
    page_printf(p, "%s_sum{%s} %.9f\n", name, label, sum_ns / 1e9);
    page_printf(p, "%s_count{%s} %llu\n", name, label,
                (unsigned long long)total);
}

/* --- what the pages show -------------------------------------------------- */

/* The process's resident set in bytes (0 if /proc cannot say). */
static uint64_t resident_bytes(void)
{
    unsigned long long size, rss;
    FILE *f = fopen("/proc/self/statm", "r");
    int ok;

    if (f == NULL)
        return 0;
    ok = fscanf(f, "%llu %llu", &size, &rss) == 2;
    fclose(f);
    return ok ? rss * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* What the warnings are decided from; 0 without an RPC server (then
 * there is no context to judge). */
static int facts_of(const rdmx_metrics_http_t *m, rdmx_health_facts_t *f)
{
    if (m->rpc == NULL)
        return 0;
    rdmx__health_facts_of_server(m->rpc, m->memory, f);
    return 1;
}

static unsigned warnings_of(const rdmx_metrics_http_t *m,
                            char (*w)[RDMX_HEALTH_WARNING_LEN])
{
    rdmx_health_facts_t f;
    unsigned n;

    if (!facts_of(m, &f))
        return 0;
    n = rdmx__health_warnings(&f, w, RDMX_HEALTH_WARNINGS_MAX);
    return n < RDMX_HEALTH_WARNINGS_MAX ? n : RDMX_HEALTH_WARNINGS_MAX;
}

/* The RPC server's counters (rdmx_rpc_server_stats_t): field, metric
 * name, help. */
#define RPC_STAT_COUNTERS(X)                                                   \
    X(connections_total, "rdmx_rpc_connections_total",                         \
      "Connections accepted since start.")                                     \
    X(connections_refused, "rdmx_rpc_connections_refused_total",               \
      "Connections refused over max_connections.")                             \
    X(requests, "rdmx_rpc_requests_total",                                     \
      "Requests and one-way messages received.")                               \
    X(responses, "rdmx_rpc_responses_total",                                   \
      "Responses sent, errors included.")                                      \
    X(errors, "rdmx_rpc_errors_total", "Error responses sent.")                \
    X(unknown_handler, "rdmx_rpc_unknown_handler_total",                       \
      "Requests for a handler not registered.")                                \
    X(malformed, "rdmx_rpc_malformed_total",                                   \
      "Requests with bad magic, version, kind or lengths.")                    \
    X(too_big, "rdmx_rpc_too_big_total", "Requests over max_message.")         \
    X(no_credit, "rdmx_rpc_no_credit_total",                                   \
      "Requests over a connection's credits.")                                 \
    X(busy, "rdmx_rpc_busy_total",                                             \
      "Requests refused at a worker's max_inflight.")                          \
    X(expired, "rdmx_rpc_expired_total",                                       \
      "Requests dropped past their deadline.")                                 \
    X(canceled, "rdmx_rpc_canceled_total", "Requests canceled by the caller.") \
    X(auth_failed, "rdmx_rpc_auth_failed_total",                               \
      "Connections refused for a wrong or missing secret.")                    \
    X(pings, "rdmx_rpc_pings_total", "Heartbeats answered.")                   \
    X(waited, "rdmx_rpc_waited_total",                                         \
      "Large requests that waited for room in max_receiving.")                 \
    X(ring_requests, "rdmx_rpc_ring_requests_total",                           \
      "Requests written into a connection's ring (shared memory).")            \
    X(ring_responses, "rdmx_rpc_ring_responses_total",                         \
      "Answers written into a client's ring (shared memory).")

/* `handler="NAME"` with NAME escaped into @buf (cut at @size: a name is
 * at most RDMX_RPC_NAME_MAX bytes, twice that escaped). */
static void handler_label(const char *name, char *buf, size_t size)
{
    size_t n = 0;

    n += (size_t)snprintf(buf, size, "handler=\"");
    for (; *name != '\0' && n + 4 < size; name++) {
        if (*name == '\\' || *name == '"')
            buf[n++] = '\\';
        if ((unsigned char)*name < 0x20)
            buf[n++] = ' ';
        else
            buf[n++] = *name;
    }
    buf[n++] = '"';
    buf[n] = '\0';
}

static void rpc_metrics(rdmx_metrics_http_t *m, rdmx_metrics_page_t *p)
{
    rdmx_rpc_server_stats_t st;
    rdmx_rpc_counters_t *c;
    const char *hname;
    char label[RDMX_RPC_NAME_MAX * 2 + 16];

    rdmx_rpc_server_stats(m->rpc, &st);
    rdmx_metrics_page_add(p, "rdmx_rpc_workers", RDMX_METRIC_GAUGE,
                          "RPC server threads.", NULL,
                          rdmx_rpc_server_workers(m->rpc));
    rdmx_metrics_page_add(p, "rdmx_rpc_connections", RDMX_METRIC_GAUGE,
                          "Clients connected now.", NULL, st.connections);
#define RPC_COUNTER(f, name, help)                                             \
    rdmx_metrics_page_add(p, name, RDMX_METRIC_COUNTER, help, NULL, st.f);
    RPC_STAT_COUNTERS(RPC_COUNTER)
#undef RPC_COUNTER

    /* Per handler: one sample per handler for each name in turn (the
     * samples of a name stay together). */
    if ((c = malloc(sizeof(*c))) == NULL)
        return;
#define HANDLER_COUNTER(f, help)                                               \
    for (unsigned k = 0; rdmx__rpc_server_counters(m->rpc, k, c, &hname);      \
         k++) {                                                                \
        handler_label(hname, label, sizeof(label));                            \
        rdmx_metrics_page_add(p, "rdmx_rpc_handler_" #f "_total",              \
                              RDMX_METRIC_COUNTER, help, label, c->f);         \
    }
    HANDLER_COUNTER(calls, "Requests per handler.")
    HANDLER_COUNTER(errors, "Error answers per handler.")
    HANDLER_COUNTER(timeouts, "Requests per handler dropped past their "
                              "deadline.")
    HANDLER_COUNTER(bytes_in, "Request payload bytes per handler.")
    HANDLER_COUNTER(bytes_out, "Response payload bytes per handler.")
#undef HANDLER_COUNTER
    for (unsigned k = 0; rdmx__rpc_server_counters(m->rpc, k, c, &hname); k++) {
        handler_label(hname, label, sizeof(label));
        page_histogram(p, label, &c->hist);
    }
    free(c);
}

/* The /metrics page; NULL if out of memory. */
static char *metrics_page(rdmx_metrics_http_t *m, size_t *len_p)
{
    rdmx_metrics_page_t p = {.cap = 16384};
    char w[RDMX_HEALTH_WARNINGS_MAX][RDMX_HEALTH_WARNING_LEN];
    rdmx_health_facts_t f;
    uint64_t memlock = rdmx__health_memlock_limit();

    if ((p.buf = malloc(p.cap)) == NULL)
        return NULL;
    page_header(&p, "rdmx_build_info", "gauge", "The rdmx library (1).");
    page_printf(&p, "rdmx_build_info{version=\"%s\",backend=\"ucx\"} 1\n",
                rdmx_version());
    if (facts_of(m, &f)) {
        page_header(&p, "rdmx_transport_info", "gauge",
                    "The context's transport, and what was asked for (1).");
        page_printf(&p,
                    "rdmx_transport_info{transport=\"%s\","
                    "requested=\"%s\"} 1\n",
                    rdmx_transport_name(f.chosen),
                    rdmx_transport_name(f.requested));
    }
    rdmx_metrics_page_add(&p, "rdmx_warnings", RDMX_METRIC_GAUGE,
                          "Slow-path warnings now (see /health).", NULL,
                          warnings_of(m, w));
    rdmx_metrics_page_add(&p, "rdmx_process_resident_memory_bytes",
                          RDMX_METRIC_GAUGE, "Resident set of the process.",
                          NULL, resident_bytes());
    rdmx_metrics_page_add(&p, "rdmx_memory_registered_bytes", RDMX_METRIC_GAUGE,
                          "Memory the program registers.", NULL, m->memory);
    if (memlock != UINT64_MAX)
        rdmx_metrics_page_add(&p, "rdmx_memlock_limit_bytes", RDMX_METRIC_GAUGE,
                              "RLIMIT_MEMLOCK.", NULL, memlock);
    if (m->rpc != NULL)
        rpc_metrics(m, &p);
    rdmx_metrics_page_add(&p, "rdmx_http_requests_total", RDMX_METRIC_COUNTER,
                          "HTTP requests served.", "path=\"/metrics\"",
                          __atomic_load_n(&m->req_metrics, __ATOMIC_RELAXED));
    rdmx_metrics_page_add(&p, "rdmx_http_requests_total", RDMX_METRIC_COUNTER,
                          "HTTP requests served.", "path=\"/health\"",
                          __atomic_load_n(&m->req_health, __ATOMIC_RELAXED));
    rdmx_metrics_page_add(&p, "rdmx_http_requests_total", RDMX_METRIC_COUNTER,
                          "HTTP requests served.", "path=\"other\"",
                          __atomic_load_n(&m->req_other, __ATOMIC_RELAXED));
    rdmx_metrics_page_add(&p, "rdmx_http_bad_requests_total",
                          RDMX_METRIC_COUNTER,
                          "HTTP requests refused (404, 405, 400, 431).", NULL,
                          __atomic_load_n(&m->bad_requests, __ATOMIC_RELAXED));
    if (m->collect_cb != NULL)
        m->collect_cb(&p, m->collect_arg);
    *len_p = p.len;
    return p.buf;
}

/* The /health object; NULL if out of memory. */
static char *health_page(rdmx_metrics_http_t *m, size_t *len_p)
{
    rdmx_metrics_page_t p = {.cap = 2048};
    char w[RDMX_HEALTH_WARNINGS_MAX][RDMX_HEALTH_WARNING_LEN];
    rdmx_health_facts_t f;
    unsigned n = warnings_of(m, w);
    uint64_t memlock = rdmx__health_memlock_limit();

    if ((p.buf = malloc(p.cap)) == NULL)
        return NULL;
    page_printf(&p,
                "{\"status\":\"%s\",\"version\":\"%s\",\"backend\":"
                "\"ucx\"",
                n == 0 ? "ok" : "degraded", rdmx_version());
    if (facts_of(m, &f)) {
        rdmx_rpc_server_stats_t st;
        rdmx_rpc_server_stats(m->rpc, &st);
        page_printf(&p,
                    ",\"transport\":\"%s\",\"requested_transport\":\"%s\","
                    "\"workers\":%u,\"connections\":%llu",
                    rdmx_transport_name(f.chosen),
                    rdmx_transport_name(f.requested),
                    rdmx_rpc_server_workers(m->rpc),
                    (unsigned long long)st.connections);
    }
    page_printf(&p,
                ",\"memory\":{\"registered_bytes\":%llu,"
                "\"resident_bytes\":%llu,\"memlock_limit_bytes\":",
                (unsigned long long)m->memory,
                (unsigned long long)resident_bytes());
    if (memlock == UINT64_MAX)
        page_printf(&p, "null}");
    else
        page_printf(&p, "%llu}", (unsigned long long)memlock);
    page_printf(&p, ",\"warnings\":[");
    for (unsigned i = 0; i < n; i++) {
        page_printf(&p, "%s\"", i ? "," : "");
        page_escaped(&p, w[i]);
        page_printf(&p, "\"");
    }
    page_printf(&p, "]}\n");
    *len_p = p.len;
    return p.buf;
}

/* --- HTTP ----------------------------------------------------------------- */

/* Queue an answer of @code with @body (malloc'd, taken; NULL: a fixed
 * short text) and @type. */
static enum MHD_Result answer(struct MHD_Connection *c, unsigned code,
                              char *body, size_t len, const char *type)
{
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (body == NULL) {
        static const char oom[] = "out of memory\n";
        r = MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom,
                                            MHD_RESPMEM_PERSISTENT);
        code = MHD_HTTP_INTERNAL_SERVER_ERROR;
        type = "text/plain";
    } else {
        r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    }
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

/* A short text body for an error answer. */
static char *error_text(const char *text, size_t *len_p)
{
    char *b = strdup(text);

    *len_p = b != NULL ? strlen(b) : 0;
    return b;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    rdmx_metrics_http_t *m = cls;
    int is_metrics = strcmp(url, "/metrics") == 0;
    int is_health = strcmp(url, "/health") == 0;
    char *body;
    size_t len = 0; /* (a page that failed to build leaves it unset) */

    *con_cls = &m->handled;
    __atomic_add_fetch(is_metrics  ? &m->req_metrics
                       : is_health ? &m->req_health
                                   : &m->req_other,
                       1, __ATOMIC_RELAXED);
    if (!is_metrics && !is_health) {
        __atomic_add_fetch(&m->bad_requests, 1, __ATOMIC_RELAXED);
        body = error_text("not found: GET /metrics or /health\n", &len);
        return answer(c, MHD_HTTP_NOT_FOUND, body, len, "text/plain");
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        __atomic_add_fetch(&m->bad_requests, 1, __ATOMIC_RELAXED);
        body = error_text("method not allowed: GET or HEAD\n", &len);
        return answer(c, MHD_HTTP_METHOD_NOT_ALLOWED, body, len, "text/plain");
    }
    if (is_metrics) {
        body = metrics_page(m, &len);
        return answer(c, MHD_HTTP_OK, body, len,
                      "text/plain; version=0.0.4; charset=utf-8");
    }
    body = health_page(m, &len);
    return answer(c, MHD_HTTP_OK, body, len, "application/json");
}

/* A request's URI arrived: mark it seen, so that on_done can tell one
 * libmicrohttpd refused before on_request ran. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    rdmx_metrics_http_t *m = cls;
    return &m->seen;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    rdmx_metrics_http_t *m = cls;

    if (*con_cls == &m->seen)
        __atomic_add_fetch(&m->bad_requests, 1, __ATOMIC_RELAXED);
}

/* --- create, destroy ------------------------------------------------------ */

/* Resolve "host:port" into @sa (IPv4). */
static rdmx_status_t parse_address(const char *address, struct sockaddr_in *sa)
{
    char host[256];
    uint16_t port;
    struct addrinfo hints = {.ai_family = AF_INET}, *ai;

    if (rdmx_addr_parse(address, host, sizeof(host), &port) != RDMX_OK)
        return rdmx__error(RDMX_ERR_INVALID,
                           "metrics: address '%s': not host:port", address);
    if (getaddrinfo(host, NULL, &hints, &ai) != 0 || ai == NULL)
        return rdmx__error(RDMX_ERR_INVALID,
                           "metrics: address '%s': unknown IPv4 host", address);
    memcpy(sa, ai->ai_addr, sizeof(*sa));
    freeaddrinfo(ai);
    sa->sin_port = htons(port);
    return RDMX_OK;
}

rdmx_status_t rdmx_metrics_http_create(const rdmx_metrics_http_params_t *params,
                                       rdmx_metrics_http_t **metrics_p)
{
    uint64_t mask = params != NULL ? params->field_mask : 0;
    const char *address = "127.0.0.1:0";
    const union MHD_DaemonInfo *di;
    struct sockaddr_in sa;
    rdmx_metrics_http_t *m;
    rdmx_status_t status;

    if (metrics_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "metrics: NULL metrics_p");
    if ((mask & RDMX_METRICS_HTTP_PARAM_FIELD_ADDRESS) &&
        params->address != NULL)
        address = params->address;
    if ((status = parse_address(address, &sa)) != RDMX_OK)
        return status;
    if ((m = calloc(1, sizeof(*m))) == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "metrics: out of memory");
    if (mask & RDMX_METRICS_HTTP_PARAM_FIELD_RPC_SERVER)
        m->rpc = params->rpc_server;
    if (mask & RDMX_METRICS_HTTP_PARAM_FIELD_COLLECT_CB) {
        m->collect_cb = params->collect_cb;
        m->collect_arg = params->collect_arg;
    }
    if (mask & RDMX_METRICS_HTTP_PARAM_FIELD_MEMORY)
        m->memory = params->memory;

    m->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
        on_request, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)METRICS_HTTP_MEMORY_LIMIT,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_HTTP_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_HTTP_TIMEOUT_S,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, m, MHD_OPTION_NOTIFY_COMPLETED,
        on_done, m, MHD_OPTION_END);
    if (m->daemon == NULL) {
        status =
            rdmx__error(RDMX_ERR_IO, "metrics: cannot listen on %s", address);
        goto err_free;
    }
    di = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    m->port = di != NULL ? di->port : ntohs(sa.sin_port);
    *metrics_p = m;
    return RDMX_OK;

err_free:
    free(m);
    return status;
}

uint16_t rdmx_metrics_http_port(const rdmx_metrics_http_t *m)
{
    return m->port;
}

void rdmx_metrics_http_destroy(rdmx_metrics_http_t *m)
{
    if (m == NULL)
        return;
    MHD_stop_daemon(m->daemon);
    free(m);
}
