/*
 * The KV server behind rdmx-kvd: one context, one region of `memory` bytes
 * registered at create, the store (store.h) over it, the kv.* handlers
 * (proto.h) on an RPC server, the lambda.* handlers with kv.get/put/
 * delete/exists over the same store (docs/LAMBDA.md), and a thread that
 * removes expired items in bounded sweeps ten times a second.
 * docs/KV.md ("Server") explains the handlers.
 *
 * Internal (rdmx__, kept out of the shared library by its version script):
 * a program reaches it through the static library, as rdmx-kvd does.
 *
 * Threads: create, start and destroy from one thread; stats and info from
 * any. The handlers run on the RPC server's workers.
 *
 * @code
 * rdmx_kv_server_config_t cfg = {.listen = "127.0.0.1:11311",
 *                                .memory = 64u << 20, ...};
 * rdmx_kv_server_t *s;
 * if (rdmx__kv_server_create(&cfg, &s) != RDMX_OK ||
 *     rdmx__kv_server_start(s) != RDMX_OK)
 *     // rdmx_error_detail() says why
 * // ... serve until told to stop, then:
 * rdmx__kv_server_destroy(s);
 * @endcode
 */
#ifndef RDMX_KV_SERVER_H
#define RDMX_KV_SERVER_H

#include <rdmx/lambda.h>
#include <rdmx/rdmx.h>

#include "kv/store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rdmx_kv_server rdmx_kv_server_t;

/* What a server is made of; read at create (nothing is kept). */
typedef struct {
    const char *listen;             /* "host:port" (port 0: any free one) */
    rdmx_context_params_t context;  /* transport, devices, name */
    size_t memory;                  /* value region, registered at create */
    unsigned workers;               /* RPC server threads; 0: one per CPU */
    unsigned max_connections;       /* clients at once; more get BUSY */
    size_t max_key;                 /* longest key, 1..65535 */
    size_t max_value;               /* largest value */
    size_t inline_threshold;        /* GET answers values up to this size
                                       inline, larger ones into a lent
                                       buffer */
    int no_mapped_gets;             /* non-zero: GETs never answer where a
                                       value lies in the store (docs/KV.md,
                                       "Mapped GETs over shared memory") */
    rdmx_kv_eviction_t eviction;    /* memory full: evict or refuse */
    const void *auth_secret;        /* clients must prove it; NULL: none */
    size_t auth_secret_len;
    int lambda;                     /* non-zero: serve lambda.* */
    rdmx_lambda_params_t lambda_params; /* its engine's limits, plugins */
} rdmx_kv_server_config_t;

/*
 * The server's stats answer (kv.stats), one "name value" line per entry
 * of X(field, name), in this order, then the lambda engine's lines while
 * it serves lambdas. The store's counters (RDMX_KV_STORE_STATS) sit in the
 * middle; those named "" are in the struct but not in the answer.
 */
#define RDMX_KV_SERVER_STATS(X)                                                \
    X(pid, "pid")                             /* the server's process */       \
    X(uptime, "uptime")                       /* seconds since create */       \
    X(curr_connections, "curr_connections")   /* clients connected now */      \
    X(total_connections, "total_connections") /* accepted since start */       \
    X(rejected_connections, "rejected_connections") /* over max_connections */ \
    RDMX_KV_STORE_STATS(X)                                                     \
    X(bad_requests, "bad_requests") /* malformed kv.* requests, and requests   \
                                       the RPC server refused as malformed,    \
                                       for an unknown handler or too big */    \
    X(rpc_requests, "rpc_requests") /* requests received */                    \
    X(rpc_errors, "rpc_errors")     /* error answers sent */                   \
    X(get_buffers_lent, "get_buffers_lent") /* GETs that lent a buffer */      \
    X(get_buffers_written, "get_buffers_written") /* ... whose value was       \
                                                     written into it (above    \
                                                     the inline threshold) */  \
    X(store_maps, "store_maps") /* answers that carried the store's            \
                                   descriptor: clients mapping it */           \
    X(get_mapped, "get_mapped") /* GETs answered with the value's place in     \
                                   the store, copied by the client */          \
    X(get_again, "get_again")   /* GETs asked again: a mapped copy met a       \
                                   rewrite, delete or eviction of its item */  \
    X(put_pulled, "put_pulled") /* PUT values (kv.put, kv.batch_put) read      \
                                   from the client's lent buffer */

/* The lambda engine's lines of the stats answer: X(field of
 * rdmx_lambda_stats_t, name), in order. */
#define RDMX_KV_LAMBDA_STATS(X)                                                \
    X(calls, "lambda_calls")                                                   \
    X(errors, "lambda_errors")                                                 \
    X(syntax_errors, "lambda_syntax_errors")                                   \
    X(budget_instructions, "lambda_budget_instructions")                       \
    X(budget_memory, "lambda_budget_memory")                                   \
    X(budget_time, "lambda_budget_time")                                       \
    X(budget_output, "lambda_budget_output")                                   \
    X(cache_hits, "lambda_cache_hits")                                         \
    X(cache_misses, "lambda_cache_misses")                                     \
    X(cache_evictions, "lambda_cache_evictions")                               \
    X(cache_entries, "lambda_cache_entries")                                   \
    X(natives, "lambda_natives")                                               \
    X(native_calls, "lambda_native_calls")                                     \
    X(states_ready, "lambda_states_ready")                                     \
    X(states_built, "lambda_states_built")

typedef struct {
#define RDMX_KV_SERVER_STATS_FIELD(field, name) uint64_t field;
    RDMX_KV_SERVER_STATS(RDMX_KV_SERVER_STATS_FIELD)
#undef RDMX_KV_SERVER_STATS_FIELD
    int lambda_on;              /* serving lambdas: `lambda` is valid */
    rdmx_lambda_stats_t lambda; /* the engine's counters */
} rdmx_kv_server_stats_t;

/* Where a started server listens and what it runs on. */
typedef struct {
    uint16_t port;               /* the port bound */
    unsigned workers;            /* RPC server threads */
    rdmx_transport_t transport;  /* the context's */
    rdmx_rpc_server_t *rpc;      /* its RPC server (for the metrics
                                    endpoint: rdmx_metrics_http_create) */
} rdmx_kv_server_info_t;

/*
 * Make a server as @cfg says: its context, the region, the store, the RPC
 * server with the kv.* (and lambda.*) handlers registered. Nothing is
 * served until rdmx__kv_server_start(). An error of any of these parts
 * (with its rdmx_error_detail()) undoes the others.
 */
rdmx_status_t rdmx__kv_server_create(const rdmx_kv_server_config_t *cfg,
                                     rdmx_kv_server_t **server_p);

/* Start listening and serving, and the sweep of expired items. */
rdmx_status_t rdmx__kv_server_start(rdmx_kv_server_t *s);

/*
 * Stop and free: end the sweep, let transfers in flight finish (their
 * requests are answered) for at most 2 s, then stop the RPC server (which
 * fails what remains) and release the store, the region and the context.
 * NULL is ignored.
 */
void rdmx__kv_server_destroy(rdmx_kv_server_t *s);

/* A snapshot of the counters the stats answer reports. */
void rdmx__kv_server_stats(rdmx_kv_server_t *s,
                           rdmx_kv_server_stats_t *stats_p);

/* Port, workers, transport and RPC server of a started server. */
void rdmx__kv_server_info(const rdmx_kv_server_t *s,
                          rdmx_kv_server_info_t *info_p);

#endif /* RDMX_KV_SERVER_H */
