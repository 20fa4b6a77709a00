/*
 * rdmx — RPC: named handlers on a multi-worker server; channels that own a
 * connection with deadlines, cancellation, one-way messages, zero-copy bulk
 * arguments, credits, heartbeats, reconnection, retries, a circuit breaker,
 * optional shared-secret authentication and per-handler metrics.
 *
 * Server threading: a server runs N workers, each a thread with its own
 * rdmx worker. A connection is handed to one worker and stays there; its
 * handlers run on that worker's thread, one at a time, without locks. A
 * request may be answered from its handler or later (deferred), but only
 * from the same worker thread.
 *
 * Client threading: a channel lives on an rdmx worker and follows the
 * worker's rules (core.h): its calls, callbacks and timers run on the thread
 * that progresses the worker. Use one worker and channel per client thread
 * for rate; with RDMX_WORKER_FLAG_PROGRESS_THREAD any thread may call.
 *
 * The wire protocol is in docs/PROTOCOL.md; the design in docs/RPC.md.
 */
#ifndef RDMX_RPC_H
#define RDMX_RPC_H

#include <rdmx/core.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rdmx_rpc_server rdmx_rpc_server_t;
typedef struct rdmx_rpc_req rdmx_rpc_req_t; /**< one request, server side */
typedef struct rdmx_channel rdmx_channel_t; /**< client side of a server */

/** Longest handler name, without the NUL. */
#define RDMX_RPC_NAME_MAX 63

/** The 32-bit id of a handler name, as carried on the wire. */
RDMX_API uint32_t rdmx_rpc_id(const char *name);

/* ------------------------------------------------------------------------ */
/* Metrics                                                                  */
/* ------------------------------------------------------------------------ */

/** Counters and latency of one handler (server) or method (client). */
typedef struct {
    char name[RDMX_RPC_NAME_MAX + 1];
    uint64_t calls;     /**< requests received / calls completed */
    uint64_t errors;    /**< completed with an error status */
    uint64_t timeouts;  /**< expired (client: deadline; server: dropped) */
    uint64_t bytes_in;  /**< request payload bytes (server) / response */
    uint64_t bytes_out; /**< response payload bytes (server) / request */
    uint64_t p50_ns;    /**< latency percentiles: server, arrival to */
    uint64_t p99_ns;    /**< response sent; client, call to completion */
    uint64_t p999_ns;
    uint64_t max_ns;
} rdmx_rpc_metrics_t;

/* ------------------------------------------------------------------------ */
/* Server                                                                   */
/* ------------------------------------------------------------------------ */

enum {
    RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS = 1u << 0,
    RDMX_RPC_SERVER_PARAM_FIELD_WORKERS = 1u << 1,
    RDMX_RPC_SERVER_PARAM_FIELD_MAX_CONNECTIONS = 1u << 2,
    RDMX_RPC_SERVER_PARAM_FIELD_CREDITS = 1u << 3,
    RDMX_RPC_SERVER_PARAM_FIELD_MAX_MESSAGE = 1u << 4,
    RDMX_RPC_SERVER_PARAM_FIELD_AUTH_SECRET = 1u << 5,
    RDMX_RPC_SERVER_PARAM_FIELD_POLL = 1u << 6,
    RDMX_RPC_SERVER_PARAM_FIELD_MAX_INFLIGHT = 1u << 7,
    RDMX_RPC_SERVER_PARAM_FIELD_MAX_RECEIVING = 1u << 8,
    RDMX_RPC_SERVER_PARAM_FIELD_RINGS = 1u << 9,
};

/* Earlier names, kept for one release. */
#define RDMX_RPC_SERVER_FIELD_DEPRECATED_(name)                                \
    RDMX_RPC_SERVER_FIELD_##name RDMX_DEPRECATED(                              \
        "renamed RDMX_RPC_SERVER_PARAM_FIELD_" #name) =                        \
        RDMX_RPC_SERVER_PARAM_FIELD_##name
enum {
    RDMX_RPC_SERVER_FIELD_DEPRECATED_(ADDRESS),
    RDMX_RPC_SERVER_FIELD_DEPRECATED_(WORKERS),
    RDMX_RPC_SERVER_FIELD_DEPRECATED_(MAX_CONNECTIONS),
    RDMX_RPC_SERVER_FIELD_DEPRECATED_(CREDITS),
    RDMX_RPC_SERVER_FIELD_DEPRECATED_(MAX_MESSAGE),
    RDMX_RPC_SERVER_FIELD_DEPRECATED_(AUTH_SECRET),
    RDMX_RPC_SERVER_FIELD_DEPRECATED_(POLL),
    RDMX_RPC_SERVER_FIELD_DEPRECATED_(MAX_INFLIGHT),
};
#undef RDMX_RPC_SERVER_FIELD_DEPRECATED_

/** How a server worker waits for work. */
typedef enum {
    RDMX_RPC_POLL_ADAPTIVE = 0, /**< spin ~100 us after work, then sleep */
    RDMX_RPC_POLL_BUSY = 1,     /**< spin always: lowest latency, a core each */
    RDMX_RPC_POLL_SLEEP = 2     /**< sleep on the event fd when idle */
} rdmx_rpc_poll_t;

typedef struct {
    uint64_t field_mask;
    /** "host:port" to listen on; port 0 picks one. Default "0.0.0.0:0". */
    const char *address;
    /** Worker threads. Default (0): one per online CPU. */
    unsigned workers;
    /** Connections at once; more are refused (RDMX_ERR_BUSY). Default
     *  1024. */
    unsigned max_connections;
    /** Requests a connection may have in flight (its credits). The client
     *  learns them at connect. Default 256. */
    unsigned credits;
    /** Largest request or response payload. Default 64 MiB. */
    size_t max_message;
    /** Shared secret (at most 4096 bytes); NULL/0 = no authentication (the
     *  default). Clients prove they hold it in the connection's handshake
     *  (HMAC-SHA256 over fresh nonces) before the server's transport sees
     *  anything of theirs; others are refused with RDMX_ERR_DENIED and
     *  counted in auth_failed (docs/SECURITY.md). */
    const void *auth_secret;
    size_t auth_secret_len;
    /** How workers wait for work. Default RDMX_RPC_POLL_ADAPTIVE. */
    rdmx_rpc_poll_t poll;
    /** Deferred requests a worker holds at once over all its connections;
     *  past it, new requests get RDMX_ERR_BUSY. Default 65536. */
    unsigned max_inflight;
    /** Bytes of large requests (those the server receives by rendezvous,
     *  above the transport's eager limit) being received on one connection
     *  at once; past it, new ones wait (counted in waited) and their
     *  transfers start, in order, as earlier ones end. Bounds the memory
     *  a peer that stalls its transfers can hold. Default 4 x max_message;
     *  at least max_message + 64 KiB (a bulk table beside the largest
     *  payload); a request larger than it gets RDMX_ERR_TOO_BIG. */
    size_t max_receiving;
    /** Connections per worker given request rings: small calls written
     *  into the server's memory instead of sent, where the client's
     *  transport is shared memory (32 KiB each; docs/RPC_RINGS.md). Default
     *  64, also the most; 0: none, every call comes as messages. */
    unsigned rings;
} rdmx_rpc_server_params_t;

/** A request arrived. Answer it with rdmx_rpc_respond*() now or later. */
typedef void (*rdmx_rpc_handler_t)(rdmx_rpc_req_t *req, void *arg);

enum {
    /** No response: the caller does not wait (rdmx_call_oneway). */
    RDMX_RPC_ONEWAY = 1u << 0,
    /** Safe to run twice: channels retry it after a connection failure. */
    RDMX_RPC_IDEMPOTENT = 1u << 1,
    /** A call flag only: more calls on the channel follow at once. The
     *  request may wait to leave with them as one message, until a call
     *  without the flag, or the worker's next progress or arm (docs/RPC.md,
     *  "Batched calls"). */
    RDMX_RPC_MORE = 1u << 2,
};

/** Create a server on @p context (not started). */
RDMX_API rdmx_status_t rdmx_rpc_server_create(
    rdmx_context_t *context, const rdmx_rpc_server_params_t *params,
    rdmx_rpc_server_t **server_p);

/**
 * Register a handler by @p name (1..RDMX_RPC_NAME_MAX bytes) with flags
 * RDMX_RPC_*. Only before rdmx_rpc_server_start().
 * @return RDMX_ERR_EXISTS if the name, or another whose id collides with it,
 *         is registered (names starting "rdmx." are reserved).
 */
RDMX_API rdmx_status_t rdmx_rpc_server_register(rdmx_rpc_server_t *server,
                                                const char *name,
                                                rdmx_rpc_handler_t handler,
                                                void *arg, unsigned flags);

/** Listen and start the workers. The built-in "rdmx.stats" (metrics as
 *  text) and "rdmx.ping" handlers are registered here. */
RDMX_API rdmx_status_t rdmx_rpc_server_start(rdmx_rpc_server_t *server);

/** The port the server listens on. */
RDMX_API uint16_t rdmx_rpc_server_port(const rdmx_rpc_server_t *server);

/** How many workers the server runs. */
RDMX_API unsigned rdmx_rpc_server_workers(const rdmx_rpc_server_t *server);

/**
 * Stop: close the listener, answer requests still deferred with
 * RDMX_ERR_CANCELED, close connections in order (clients see
 * RDMX_ERR_CONN_CLOSED), join the workers, free everything.
 */
RDMX_API void rdmx_rpc_server_destroy(rdmx_rpc_server_t *server);

/** Server counters (summed over workers). */
typedef struct {
    uint64_t connections;         /**< open now */
    uint64_t connections_total;   /**< accepted since start */
    uint64_t connections_refused; /**< over max_connections */
    uint64_t requests;            /**< requests and one-way messages */
    uint64_t responses;           /**< responses sent (errors included) */
    uint64_t errors;              /**< error responses sent */
    uint64_t unknown_handler;     /**< requests for a name not registered */
    uint64_t malformed;           /**< bad magic, version, kind or lengths */
    uint64_t too_big;             /**< payload over max_message */
    uint64_t no_credit;           /**< over a connection's credits */
    uint64_t busy;                /**< refused: worker's max_inflight */
    uint64_t expired;             /**< deadline passed: dropped, not answered */
    uint64_t canceled;            /**< canceled by the caller */
    uint64_t auth_failed;         /**< connections refused in the handshake
                                       for a wrong or missing secret */
    uint64_t pings;               /**< heartbeats answered */
    uint64_t waited;              /**< large requests whose transfer waited
                                       for room in their connection's
                                       max_receiving */
    uint64_t ring_requests;       /**< requests the client wrote into the
                                       connection's ring in this server's
                                       memory instead of sending them
                                       (docs/RPC_RINGS.md; shared memory) */
    uint64_t ring_responses;      /**< answers written into the client's
                                       ring instead of sent */
} rdmx_rpc_server_stats_t;

RDMX_API void rdmx_rpc_server_stats(rdmx_rpc_server_t *server,
                                    rdmx_rpc_server_stats_t *stats_p);

/**
 * Per-handler metrics, summed over workers, into @p out (up to @p max
 * entries). @return the number of handlers (may exceed @p max).
 */
RDMX_API unsigned rdmx_rpc_server_metrics(rdmx_rpc_server_t *server,
                                          rdmx_rpc_metrics_t *out,
                                          unsigned max);

/* --- inside a handler ----------------------------------------------------- */

/** The request payload (valid until the request is answered). */
RDMX_API const void *rdmx_rpc_req_data(const rdmx_rpc_req_t *req,
                                       size_t *length_p);

/** The name the request's handler was registered with. */
RDMX_API const char *rdmx_rpc_req_name(const rdmx_rpc_req_t *req);

/** Who called: the peer's "host:port", and whether it authenticated. */
RDMX_API const char *rdmx_rpc_req_peer(const rdmx_rpc_req_t *req);
RDMX_API int rdmx_rpc_req_authenticated(const rdmx_rpc_req_t *req);

/** The caller's deadline on this host's CLOCK_MONOTONIC, in ns, or 0 for
 *  none. */
RDMX_API uint64_t rdmx_rpc_req_deadline(const rdmx_rpc_req_t *req);

/** Non-zero once the caller canceled the call or its deadline passed: a
 *  deferred handler may stop work; its response becomes a short ERROR. */
RDMX_API int rdmx_rpc_req_expired(const rdmx_rpc_req_t *req);

/** Whether the caller still waits, checked now: not expired, not canceled,
 *  and its connection alive (one non-blocking peek at the control
 *  socket). A handler that writes into a caller's buffer (a bulk
 *  descriptor with RDMX_ACCESS_WRITE) calls this immediately before each
 *  write and writes nothing once it returns 0: the caller's call
 *  completes only after the server's answer, or after it closed the
 *  connection, so that no byte lands in its buffer after the call
 *  returned (docs/RPC.md, "Lent buffers"). */
RDMX_API int rdmx_rpc_req_may_write(const rdmx_rpc_req_t *req);

/** Index of the worker running the handler, 0..workers-1. */
RDMX_API unsigned rdmx_rpc_req_worker(const rdmx_rpc_req_t *req);

/** The connection's endpoint: for rdmx_get_nb/rdmx_put_nb on bulk. */
RDMX_API rdmx_ep_t *rdmx_rpc_req_ep(const rdmx_rpc_req_t *req);

/** How many bulk descriptors the request carries. */
RDMX_API unsigned rdmx_rpc_req_bulk_count(const rdmx_rpc_req_t *req);

/**
 * The @p index-th bulk descriptor, unpacked on the connection (owned by the
 * request; released when it is answered). Pull with rdmx_get_nb(), push
 * with rdmx_put_nb(), and answer once they completed.
 */
RDMX_API rdmx_status_t rdmx_rpc_req_bulk(rdmx_rpc_req_t *req, unsigned index,
                                         rdmx_rmem_t **rmem_p);

/** Answer with a payload (copied or sent before return; may be 0 bytes). */
RDMX_API rdmx_status_t rdmx_rpc_respond(rdmx_rpc_req_t *req, const void *data,
                                        size_t length);

/** Answer with an error status (negative) and a message for the caller. */
RDMX_API rdmx_status_t rdmx_rpc_respond_error(rdmx_rpc_req_t *req,
                                              rdmx_status_t status,
                                              const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------ */
/* Channel (client)                                                         */
/* ------------------------------------------------------------------------ */

typedef enum {
    RDMX_CHANNEL_CONNECTING = 0, /**< connecting or handshaking */
    RDMX_CHANNEL_READY = 1,      /**< connected: calls go out */
    RDMX_CHANNEL_DOWN = 2,       /**< lost; reconnecting after a backoff */
    RDMX_CHANNEL_CLOSED = 3      /**< destroyed, or refused for good (auth) */
} rdmx_channel_state_t;

typedef enum {
    RDMX_BREAKER_CLOSED = 0,   /**< calls flow */
    RDMX_BREAKER_OPEN = 1,     /**< calls fail fast with RDMX_ERR_BUSY */
    RDMX_BREAKER_HALF_OPEN = 2 /**< one probe call decides */
} rdmx_breaker_state_t;

/** The channel's state or its breaker's changed; @p status says why. */
typedef void (*rdmx_channel_state_cb_t)(rdmx_channel_t *channel,
                                        rdmx_channel_state_t state,
                                        rdmx_breaker_state_t breaker,
                                        rdmx_status_t status, void *arg);

enum {
    RDMX_CHANNEL_PARAM_FIELD_TIMEOUT = 1u << 0,
    RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT = 1u << 1,
    RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT = 1u << 2,
    RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MIN = 1u << 3,
    RDMX_CHANNEL_PARAM_FIELD_RETRIES = 1u << 4,
    RDMX_CHANNEL_PARAM_FIELD_BREAKER_THRESHOLD = 1u << 5,
    RDMX_CHANNEL_PARAM_FIELD_CREDITS = 1u << 6,
    RDMX_CHANNEL_PARAM_FIELD_QUEUE = 1u << 7,
    RDMX_CHANNEL_PARAM_FIELD_AUTH_SECRET = 1u << 8,
    RDMX_CHANNEL_PARAM_FIELD_STATE_CB = 1u << 9, /**< state_cb, state_arg */
    RDMX_CHANNEL_PARAM_FIELD_WAIT_FOR_READY = 1u << 10,
    RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT = 1u << 11,
    RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MAX = 1u << 12,
    RDMX_CHANNEL_PARAM_FIELD_BREAKER_OPEN = 1u << 13,
    RDMX_CHANNEL_PARAM_FIELD_RINGS = 1u << 14,
};

/* Earlier names, kept for one release (the three that covered two members
 * cover both new bits). */
#define RDMX_CHANNEL_FIELD_DEPRECATED_(name, value)                            \
    RDMX_CHANNEL_FIELD_##name RDMX_DEPRECATED(                                 \
        "renamed RDMX_CHANNEL_PARAM_FIELD_*") = (value)
enum {
    RDMX_CHANNEL_FIELD_DEPRECATED_(TIMEOUT, RDMX_CHANNEL_PARAM_FIELD_TIMEOUT),
    RDMX_CHANNEL_FIELD_DEPRECATED_(CONNECT_TIMEOUT,
                                   RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT),
    RDMX_CHANNEL_FIELD_DEPRECATED_(
        HEARTBEAT, RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                       RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT),
    RDMX_CHANNEL_FIELD_DEPRECATED_(BACKOFF,
                                   RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MIN |
                                       RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MAX),
    RDMX_CHANNEL_FIELD_DEPRECATED_(RETRIES, RDMX_CHANNEL_PARAM_FIELD_RETRIES),
    RDMX_CHANNEL_FIELD_DEPRECATED_(BREAKER,
                                   RDMX_CHANNEL_PARAM_FIELD_BREAKER_THRESHOLD |
                                       RDMX_CHANNEL_PARAM_FIELD_BREAKER_OPEN),
    RDMX_CHANNEL_FIELD_DEPRECATED_(CREDITS, RDMX_CHANNEL_PARAM_FIELD_CREDITS),
    RDMX_CHANNEL_FIELD_DEPRECATED_(QUEUE, RDMX_CHANNEL_PARAM_FIELD_QUEUE),
    RDMX_CHANNEL_FIELD_DEPRECATED_(AUTH_SECRET,
                                   RDMX_CHANNEL_PARAM_FIELD_AUTH_SECRET),
    RDMX_CHANNEL_FIELD_DEPRECATED_(STATE_CB, RDMX_CHANNEL_PARAM_FIELD_STATE_CB),
    RDMX_CHANNEL_FIELD_DEPRECATED_(WAIT_FOR_READY,
                                   RDMX_CHANNEL_PARAM_FIELD_WAIT_FOR_READY),
};
#undef RDMX_CHANNEL_FIELD_DEPRECATED_

typedef struct {
    uint64_t field_mask;
    /** Default deadline of a call, ms. Default 5000;
     *  RDMX_TIMEOUT_INFINITE: none. */
    int timeout_ms;
    /** Limit of one connection attempt, ms. Default 2000. */
    int connect_timeout_ms;
    /** While calls are in flight: ping when nothing arrived for
     *  heartbeat_ms (default 250; 0 turns heartbeats off); declare the
     *  server down when nothing arrived for heartbeat_timeout_ms (default
     *  1000). An idle channel sends no pings: a server process that dies
     *  ends the connection's control socket and the channel goes DOWN at
     *  once; a frozen or partitioned server is found by the next call's
     *  heartbeats. */
    int heartbeat_ms;
    int heartbeat_timeout_ms;
    /** Reconnect after backoff_min_ms (default 50), doubling to
     *  backoff_max_ms (default 2000), each with +-25 % jitter. */
    int backoff_min_ms;
    int backoff_max_ms;
    /** Times an idempotent call is resent after its connection failed.
     *  Default 3. */
    unsigned retries;
    /** Open the breaker after this many consecutive failed calls (transport
     *  failures and timeouts; handler errors do not count). Default 0 (no
     *  breaker). After breaker_open_ms (default 1000) one call probes. */
    unsigned breaker_threshold;
    int breaker_open_ms;
    /** Calls in flight at most; the server's credits cap it. Default: the
     *  server's credits. */
    unsigned credits;
    /** Past the credits (or while connecting): queue up to @p queue calls
     *  (default 4096) until their deadline; 0 = fail with
     *  RDMX_ERR_NO_RESOURCE (past credits) or RDMX_ERR_BUSY (not ready). */
    unsigned queue;
    /** The server's secret; default none. A wrong or missing one, or a
     *  server that cannot prove it holds this one, ends the channel in
     *  RDMX_CHANNEL_CLOSED with RDMX_ERR_DENIED (no retries). */
    const void *auth_secret;
    size_t auth_secret_len;
    rdmx_channel_state_cb_t state_cb;
    void *state_arg;
    /** Default 0, fail fast: while the channel is DOWN (its connection was
     *  lost, or an attempt failed) a new call fails at once with
     *  RDMX_ERR_UNREACHABLE and the reason; when the connection is lost,
     *  calls in flight fail at once (RDMX_ERR_CONN_RESET, or the heartbeat's
     *  RDMX_ERR_TIMEOUT) except idempotent ones with retries left, which
     *  wait for the next connection attempt and fail with it if it fails.
     *  Calls made while the channel is CONNECTING wait for that attempt.
     *  Non-zero: calls wait (queued) through DOWN until their deadline, as
     *  gRPC's wait-for-ready. */
    int wait_for_ready;
    /** Default 1: over shared memory, ask the server for request rings and
     *  write small calls into them (docs/RPC_RINGS.md); 0: every call goes
     *  as messages. */
    int rings;
} rdmx_channel_params_t;

/**
 * Create a channel to @p address ("host:port") on @p worker and start
 * connecting; calls made before the connection is up are queued.
 */
RDMX_API rdmx_status_t rdmx_channel_create(rdmx_worker_t *worker,
                                           const char *address,
                                           const rdmx_channel_params_t *params,
                                           rdmx_channel_t **channel_p);

/** Complete every pending call with RDMX_ERR_CANCELED (their callbacks run
 *  here, but that of an rdmx_call whose answer is landing in its buffer
 *  or whose request is still being sent from it: it runs once the
 *  transport uses the buffer no more), close the connection and free the
 *  channel. */
RDMX_API void rdmx_channel_destroy(rdmx_channel_t *channel);

RDMX_API rdmx_channel_state_t rdmx_channel_state(const rdmx_channel_t *channel);
RDMX_API rdmx_breaker_state_t
rdmx_channel_breaker(const rdmx_channel_t *channel);

/**
 * Wait (progressing the worker) until the channel is READY.
 * @return RDMX_OK; RDMX_ERR_TIMEOUT after @p timeout_ms
 *         (RDMX_TIMEOUT_INFINITE: no limit); RDMX_ERR_DENIED (refused
 *         for good: authentication); RDMX_ERR_CANCELED (destroyed).
 */
RDMX_API rdmx_status_t rdmx_channel_wait_ready(rdmx_channel_t *channel,
                                               int timeout_ms);

/** The endpoint of the current connection (NULL unless READY): for
 *  registering bulk memory use, or core operations beside RPC. */
RDMX_API rdmx_ep_t *rdmx_channel_ep(const rdmx_channel_t *channel);

/** Channel counters. */
typedef struct {
    uint64_t calls;          /**< calls started */
    uint64_t completed;      /**< completed with RDMX_OK */
    uint64_t failed;         /**< completed with an error */
    uint64_t timeouts;       /**< deadline expired */
    uint64_t canceled;       /**< rdmx_call_cancel */
    uint64_t retries;        /**< idempotent calls resent */
    uint64_t fast_failed;    /**< refused by the open breaker */
    uint64_t reconnects;     /**< connections made after the first */
    uint64_t late_responses; /**< responses to calls already completed */
    uint64_t pings;          /**< heartbeats sent */
    uint64_t queued;         /**< calls that waited for credits or the link */
    uint64_t lent_teardowns; /**< connections closed because a call that
                                  lent a buffer ended and the server did
                                  not answer it in time (docs/RPC.md,
                                  "Lent buffers"), or one whose request
                                  was still being sent from the caller's
                                  memory ended and the server did not
                                  take it in time */
    uint64_t responses_in_place; /**< large responses received straight
                                      into the caller's memory
                                      (rdmx_call's response buffer, a KV
                                      GET's value buffer: docs/RPC.md,
                                      "Large inline messages") */
    uint64_t requests_in_place;  /**< large requests sent straight from
                                      the caller's memory (rdmx_call's
                                      request, a blocking KV PUT's value:
                                      docs/RPC.md, "Large inline
                                      messages") */
    uint64_t ring_calls;         /**< calls written into the server's
                                      memory instead of sent
                                      (docs/RPC_RINGS.md; shared memory) */
    uint64_t ring_responses;     /**< answers the server wrote into this
                                      channel's ring */
} rdmx_channel_stats_t;

RDMX_API void rdmx_channel_stats(rdmx_channel_t *channel,
                                 rdmx_channel_stats_t *stats_p);

/** Per-method metrics of the calls made on the channel. */
RDMX_API unsigned rdmx_channel_metrics(rdmx_channel_t *channel,
                                       rdmx_rpc_metrics_t *out, unsigned max);

/* --- calls ---------------------------------------------------------------- */

/** A piece of caller memory a call lends the handler. */
typedef struct {
    rdmx_mr_t *mr;   /**< registered region */
    uint64_t offset; /**< start within the region */
    uint64_t length;
    unsigned access; /**< RDMX_ACCESS_READ (handler pulls) and/or _WRITE */
} rdmx_rpc_bulk_t;

/** Most bulk descriptors one call carries. */
#define RDMX_RPC_BULK_MAX 8

/** How a call ended. Valid during the callback only. */
typedef struct {
    rdmx_status_t status; /**< RDMX_OK, the handler's error, or a local one
                               (TIMEOUT, CANCELED, CONN_*, BUSY, ...) */
    const void *data;     /**< response payload (RDMX_OK) */
    size_t length;
    const char *message; /**< what went wrong; "" on success */
    uint64_t call_id;
} rdmx_call_result_t;

/** Runs exactly once per call that rdmx_call_nb() accepted. */
typedef void (*rdmx_call_cb_t)(const rdmx_call_result_t *result, void *arg);

enum {
    RDMX_CALL_PARAM_FIELD_TIMEOUT = 1u << 0,
    RDMX_CALL_PARAM_FIELD_FLAGS = 1u << 1,
    RDMX_CALL_PARAM_FIELD_BULK = 1u << 2, /**< bulk and nbulk */
    RDMX_CALL_PARAM_FIELD_CB = 1u << 3,   /**< cb and arg */
};

/* Earlier names, kept for one release. */
enum {
    RDMX_CALL_FIELD_TIMEOUT RDMX_DEPRECATED(
        "renamed RDMX_CALL_PARAM_FIELD_TIMEOUT") =
        RDMX_CALL_PARAM_FIELD_TIMEOUT,
    RDMX_CALL_FIELD_FLAGS RDMX_DEPRECATED(
        "renamed RDMX_CALL_PARAM_FIELD_FLAGS") = RDMX_CALL_PARAM_FIELD_FLAGS,
    RDMX_CALL_FIELD_BULK RDMX_DEPRECATED("renamed RDMX_CALL_PARAM_FIELD_BULK") =
        RDMX_CALL_PARAM_FIELD_BULK,
};

typedef struct {
    uint64_t field_mask;
    /** This call's deadline, ms. Default: the channel's timeout_ms;
     *  RDMX_TIMEOUT_INFINITE: none. */
    int timeout_ms;
    unsigned flags; /**< RDMX_RPC_IDEMPOTENT, RDMX_RPC_MORE; default 0 */
    const rdmx_rpc_bulk_t *bulk; /**< up to RDMX_RPC_BULK_MAX; default none */
    unsigned nbulk;
    /** rdmx_call_nb: required; runs once with the result. rdmx_call: must
     *  not be set. */
    rdmx_call_cb_t cb;
    void *arg;
} rdmx_call_params_t;

/**
 * Call @p method with @p length bytes at @p data (copied or sent before
 * return, so the buffer may be reused at once). The first call toward a
 * server since the worker's last progress pass began leaves at once;
 * calls made right after it, before the worker progresses again, leave
 * together as one message at its next progress, arm or wait (docs/RPC.md,
 * "Batched calls"). params->cb runs once with
 * the result: RDMX_OK, the handler's error, or RDMX_ERR_TIMEOUT (the
 * deadline), RDMX_ERR_CANCELED (rdmx_call_cancel, rdmx_channel_destroy),
 * RDMX_ERR_CONN_RESET / RDMX_ERR_CONN_CLOSED (the connection broke with
 * the call in flight), RDMX_ERR_UNREACHABLE (the channel was down and
 * fails fast), RDMX_ERR_DENIED (authentication), RDMX_ERR_NOT_FOUND (no
 * such handler), RDMX_ERR_BUSY (the server's max_inflight).
 * @return RDMX_INPROGRESS (the callback will run; *call_id_p set if not
 *         NULL), or an error (it will not): RDMX_ERR_INVALID (no cb, a
 *         name over RDMX_RPC_NAME_MAX, more than RDMX_RPC_BULK_MAX bulk),
 *         RDMX_ERR_NO_RESOURCE past the credits with no queue,
 *         RDMX_ERR_BUSY while the breaker is open, RDMX_ERR_TOO_BIG over
 *         the server's max_message, RDMX_ERR_UNREACHABLE (down, fail
 *         fast), RDMX_ERR_DENIED (refused for good).
 */
RDMX_API rdmx_status_t rdmx_call_nb(rdmx_channel_t *channel, const char *method,
                                    const void *data, size_t length,
                                    const rdmx_call_params_t *params,
                                    uint64_t *call_id_p);

/**
 * Call and wait. The response goes to @p resp (up to @p capacity bytes;
 * *resp_len_p gets its length, or the length needed with RDMX_ERR_TOO_BIG).
 * A response large enough to travel by rendezvous is received straight
 * into @p resp, and a request over 192 bytes (8 KiB with bulk
 * descriptors) is sent from @p data itself;
 * the call returns, whatever its status, only once the transport uses
 * neither any more. A request the server does not take (a hung server)
 * is ended by closing the connection 200 ms after the call's end, so the
 * call may return up to that much after its deadline.
 * Returns what rdmx_call_nb or its callback would; on error
 * rdmx_error_detail() holds the message.
 */
RDMX_API rdmx_status_t rdmx_call(rdmx_channel_t *channel, const char *method,
                                 const void *data, size_t length, void *resp,
                                 size_t capacity,
                                 const rdmx_call_params_t *params,
                                 size_t *resp_len_p);

/**
 * Send a one-way message: no response, no deadline. RDMX_OK once handed to
 * the transport; errors as for rdmx_call_nb.
 */
RDMX_API rdmx_status_t rdmx_call_oneway(rdmx_channel_t *channel,
                                        const char *method, const void *data,
                                        size_t length);

/**
 * Cancel a call: its callback runs now with RDMX_ERR_CANCELED, the server
 * is told, a late response is dropped.
 * @return RDMX_ERR_NOT_FOUND if the call already completed.
 */
RDMX_API rdmx_status_t rdmx_call_cancel(rdmx_channel_t *channel,
                                        uint64_t call_id);

#ifdef __cplusplus
}
#endif

#endif /* RDMX_RPC_H */
