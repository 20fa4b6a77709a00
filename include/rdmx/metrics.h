/**
 * @file metrics.h
 * An HTTP endpoint for an RPC server: GET /metrics (Prometheus text
 * format) and GET /health (JSON). docs/OPERATIONS.md lists the names.
 *
 * The endpoint runs on a thread of its own and reads the server's counters
 * the way its "rdmx.stats" handler does (relaxed loads of counters each
 * worker writes alone): a scrape never waits for a worker, nor a worker for
 * a scrape. The collect callback runs on that thread.
 *
 * @code
 * rdmx_metrics_http_params_t mp = {
 *     .field_mask = RDMX_METRICS_HTTP_PARAM_FIELD_ADDRESS |
 *                   RDMX_METRICS_HTTP_PARAM_FIELD_RPC_SERVER,
 *     .address = "127.0.0.1:9311",
 *     .rpc_server = server};
 * rdmx_metrics_http_t *m;
 * if (rdmx_metrics_http_create(&mp, &m) == RDMX_OK) {
 *     // ... serve; then, before rdmx_rpc_server_destroy(server):
 *     rdmx_metrics_http_destroy(m);
 * }
 * @endcode
 */
#ifndef RDMX_METRICS_H
#define RDMX_METRICS_H

#include <rdmx/rpc.h>
#include <rdmx/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rdmx_metrics_http rdmx_metrics_http_t;
/** A page being written; valid during the collect callback only. */
typedef struct rdmx_metrics_page rdmx_metrics_page_t;

/** What a metric is, as Prometheus types it. */
typedef enum {
    RDMX_METRIC_COUNTER = 0, /**< only grows; the name ends in "_total" */
    RDMX_METRIC_GAUGE = 1    /**< a level */
} rdmx_metric_type_t;

/** Add the program's own metrics to a /metrics page (on the endpoint's
 *  thread; must not block). */
typedef void (*rdmx_metrics_collect_cb_t)(rdmx_metrics_page_t *page, void *arg);

enum {
    RDMX_METRICS_HTTP_PARAM_FIELD_ADDRESS = 1u << 0,
    RDMX_METRICS_HTTP_PARAM_FIELD_RPC_SERVER = 1u << 1,
    RDMX_METRICS_HTTP_PARAM_FIELD_COLLECT_CB = 1u << 2, /**< and collect_arg */
    RDMX_METRICS_HTTP_PARAM_FIELD_MEMORY = 1u << 3,
};

typedef struct {
    uint64_t field_mask;
    /** "host:port" to listen on (an IPv4 address or a host name);
     *  port 0 picks one. Default "127.0.0.1:0". */
    const char *address;
    /** The server whose counters, handlers, transport and workers the
     *  pages show; started, and destroyed only after the endpoint.
     *  Default: none (the pages show the process and the build only). */
    rdmx_rpc_server_t *rpc_server;
    /** Called for each /metrics page after rdmx's own metrics. Default:
     *  none. */
    rdmx_metrics_collect_cb_t collect_cb;
    void *collect_arg;
    /** Bytes the program registers, for the memory gauges and the memlock
     *  warning. Default 0. */
    size_t memory;
} rdmx_metrics_http_params_t;

/**
 * Listen on @p params->address and serve /metrics and /health from a
 * thread of the endpoint's own until rdmx_metrics_http_destroy().
 * @return RDMX_ERR_INVALID (bad address), RDMX_ERR_IO (cannot listen:
 *         rdmx_error_detail() says why).
 */
RDMX_API rdmx_status_t rdmx_metrics_http_create(
    const rdmx_metrics_http_params_t *params, rdmx_metrics_http_t **metrics_p);

/** The port the endpoint listens on. */
RDMX_API uint16_t rdmx_metrics_http_port(const rdmx_metrics_http_t *metrics);

/** Stop serving (waits for a page being written) and free. NULL is
 *  ignored. */
RDMX_API void rdmx_metrics_http_destroy(rdmx_metrics_http_t *metrics);

/**
 * Add one sample to a page: @p name (letters, digits, '_'; a counter's
 * ends in "_total"), its type and one-line help, and its value. The first
 * sample of a name writes its HELP and TYPE lines; give the samples of
 * one name one after another.
 * @p labels is NULL or the text inside the braces, already escaped
 * (`handler="kv.get"`).
 */
RDMX_API void rdmx_metrics_page_add(rdmx_metrics_page_t *page, const char *name,
                                    rdmx_metric_type_t type, const char *help,
                                    const char *labels, uint64_t value);

#ifdef __cplusplus
}
#endif

#endif /* RDMX_METRICS_H */
