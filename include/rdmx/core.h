/*
 * rdmx — core: contexts, workers, connections, registered memory and the
 * operations on them (send/receive, put, get, put-with-notify, atomics).
 *
 * Threading: a worker and everything created on it (listeners, endpoints,
 * operations) belong to one thread at a time — the thread that calls
 * rdmx_worker_progress(). Completion callbacks run inside
 * rdmx_worker_progress() (or inside the call that started the operation, if
 * it completes at once), on that thread. A callback may start new operations
 * but must not call rdmx_worker_progress() or a blocking wrapper.
 * A worker created with RDMX_WORKER_FLAG_PROGRESS_THREAD is progressed by a
 * thread of its own; then every function on it may be called from any thread
 * and the blocking wrappers sleep until their operation completes.
 *
 * Back-pressure: RDMX_ERR_NO_RESOURCE means "progress the worker, then retry".
 */
#ifndef RDMX_CORE_H
#define RDMX_CORE_H

#include <stddef.h>
#include <stdint.h>

#include <rdmx/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rdmx_context rdmx_context_t;   /**< UCX context, memory */
typedef struct rdmx_worker rdmx_worker_t;     /**< progress engine */
typedef struct rdmx_listener rdmx_listener_t; /**< accepts connections */
typedef struct rdmx_ep rdmx_ep_t;             /**< one connection */
typedef struct rdmx_mr rdmx_mr_t;             /**< local registered memory */
typedef struct rdmx_rmem rdmx_rmem_t;         /**< a peer's memory, unpacked */

/**
 * Completion of a non-blocking operation. Runs exactly once.
 * @param status  RDMX_OK or a negative error.
 * @param length  bytes transferred (for a receive: the message length; with
 *                RDMX_ERR_TOO_BIG, the length the message needs).
 * @param arg     the user argument given when the operation started.
 */
typedef void (*rdmx_cb_t)(rdmx_status_t status, size_t length, void *arg);

/** A timeout of no limit (docs/API.md, "Timeouts": every timeout is in
 *  ms; > 0 a limit, 0 no waiting, any negative value no limit). */
#define RDMX_TIMEOUT_INFINITE (-1)

/* ------------------------------------------------------------------------ */
/* Context                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum {
    RDMX_TRANSPORT_AUTO = 0, /**< whatever UCX finds: rdma, shm, tcp */
    RDMX_TRANSPORT_SHM = 1,  /**< shared memory (tcp for the handshake) */
    RDMX_TRANSPORT_TCP = 2,  /**< tcp only */
    RDMX_TRANSPORT_RDMA = 3  /**< InfiniBand / RoCE; fails without a device */
} rdmx_transport_t;

enum {
    RDMX_CONTEXT_PARAM_FIELD_TRANSPORT = 1u << 0,
    RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES = 1u << 1,
    RDMX_CONTEXT_PARAM_FIELD_NAME = 1u << 2,
    RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME = 1u << 3,
};

typedef struct {
    uint64_t field_mask;
    /** Default RDMX_TRANSPORT_AUTO; the environment's RDMX_TRANSPORT
     *  (auto|shm|tcp|rdma) overrides the default, not an explicit value. */
    rdmx_transport_t transport;
    /** Network devices UCX may use, as UCX_NET_DEVICES ("lo", "eth0",
     *  "mlx5_0:1"). Default: UCX_NET_DEVICES from the environment, else all.
     *  Use "lo" when every peer is on this host: UCX's tcp transport
     *  otherwise opens connections over every interface. */
    const char *net_devices;
    /** Name shown in logs. Default "rdmx". */
    const char *name;
    /** The transport as text, backend included: "auto", "shm", "tcp",
     *  "rdma" (UCX) or "ofi[:PROVIDER]" (libfabric: "ofi:tcp", "ofi:shm",
     *  "ofi:efa", any prov_name; "ofi" alone: the first provider with the
     *  capabilities rdmx needs). Wins over @transport; the environment's
     *  RDMX_TRANSPORT takes the same forms. docs/FABRIC.md. */
    const char *transport_name;
} rdmx_context_params_t;

/**
 * Create a context. It reads UCX's configuration, turns on what rdmx relies
 * on (shared memory with peer failure detection, listener ports that can be
 * bound again at once) and selects the transport.
 * @return RDMX_ERR_INVALID (unknown transport, or a bad RDMX_TRANSPORT in
 *         the environment), RDMX_ERR_UNSUPPORTED for RDMX_TRANSPORT_RDMA
 *         without an RDMA device, or when the library is older than
 *         the headers the program was compiled with (or of another
 *         major version), RDMX_ERR_IO if UCX cannot start.
 */
RDMX_API rdmx_status_t
rdmx_context_create_v(unsigned api_version, const rdmx_context_params_t *params,
                      rdmx_context_t **ctx_p);

/* Every program passes the version it was compiled against, so a library
 * older than its headers says so (RDMX_ERR_UNSUPPORTED) instead of
 * misreading a newer struct. */
static inline rdmx_status_t
rdmx_context_create(const rdmx_context_params_t *params, rdmx_context_t **ctx_p)
{
    return rdmx_context_create_v(RDMX_VERSION_NUMBER, params, ctx_p);
}

/** Destroy a context. Its workers must be destroyed first; regions still
 *  registered are released (their handles become invalid). */
RDMX_API void rdmx_context_destroy(rdmx_context_t *context);

/**
 * The transport the context uses: the one it was created for, with
 * RDMX_TRANSPORT_AUTO resolved — RDMX_TRANSPORT_RDMA when the host has an
 * RDMA device, else RDMX_TRANSPORT_TCP (UCX still reaches peers on this
 * host through shared memory then; rdmx_ep_transport() says what one
 * connection uses).
 */
RDMX_API rdmx_transport_t rdmx_context_transport(const rdmx_context_t *context);

/** "auto", "shm", "tcp", "rdma"; NULL for an unknown value. */
RDMX_API const char *rdmx_transport_name(rdmx_transport_t transport);

/** Parse "auto", "shm", "tcp" or "rdma"; also "ofi[:PROVIDER]", for which
 *  it writes the medium (ofi:tcp: tcp, ofi:shm: shm, ofi:efa/verbs/cxi/psm:
 *  rdma, else auto) — pass the text itself as transport_name to select the
 *  libfabric backend. */
RDMX_API rdmx_status_t rdmx_transport_parse(const char *name,
                                            rdmx_transport_t *transport_p);

/** The backend a context runs, for start lines: "ucx", or "ofi 1.17
 *  tcp;ofi_rxm, domain lo" (libfabric's version, provider and domain). */
RDMX_API const char *rdmx_context_backend(const rdmx_context_t *context);

/* ------------------------------------------------------------------------ */
/* Worker                                                                   */
/* ------------------------------------------------------------------------ */

enum {
    RDMX_WORKER_PARAM_FIELD_FLAGS = 1u << 0,
};

enum {
    /** Progress the worker on a thread of its own; every call on the worker
     *  may then come from any thread. */
    RDMX_WORKER_FLAG_PROGRESS_THREAD = 1u << 0,
    /** The owner polls the worker and does not sleep on it (a thread that
     *  owns a core: a busy-polling server, a benchmark): rdmx's blocking
     *  calls on it poll until they end instead of sleeping after
     *  RDMX_SPIN_US, and the backend may leave out what lets a sleeper
     *  wake on each completion (UCX: nothing changes; libfabric: a
     *  completion queue without a wait object, whose progress is cheaper
     *  over tcp). rdmx_worker_wait() and the fd still work, but a wake-up
     *  may come up to 1 ms late. */
    RDMX_WORKER_FLAG_BUSY_POLL = 1u << 1,
};

typedef struct {
    uint64_t field_mask;
    uint64_t flags; /**< RDMX_WORKER_FLAG_*; default 0 */
} rdmx_worker_params_t;

/** Counters of a worker. Only ever grow. */
typedef struct {
    uint64_t eps_opened;        /**< endpoints that completed the handshake */
    uint64_t eps_failed;        /**< endpoints that failed (peer died, ...) */
    uint64_t msgs_sent;         /**< two-sided messages sent */
    uint64_t msgs_received;     /**< two-sided messages delivered */
    uint64_t msgs_unexpected;   /**< messages that arrived before a receive */
    uint64_t recv_too_small;    /**< receives failed with RDMX_ERR_TOO_BIG */
    uint64_t notifies_received; /**< put-with-notify notifications */
    uint64_t rma_refused;       /**< put/get/atomic refused by bounds/rights */
    uint64_t bad_descriptors;   /**< descriptors refused by unpack */
    uint64_t proto_errors;      /**< malformed or unknown messages dropped */
    uint64_t conns_refused;     /**< connections a listener refused: at its
                                     limit, or shutting down */
    uint64_t handshakes_failed; /**< connections that ended before their
                                     handshake completed */
    uint64_t auth_failed;       /**< connections refused by a listener for a
                                     wrong or missing proof of its secret */
    uint64_t msgs_dropped;      /**< messages for no live endpoint of
                                     their sender (one closing or closed:
                                     in flight at its close), dropped */
    uint64_t batches_sent;      /**< batches sent: one message carrying
                                     several small ones (docs/CORE.md,
                                     "Batched messages") */
    uint64_t msgs_batched;      /**< small messages that left in a batch */
    uint64_t msgs_at_once;      /**< small messages of the upper layers (a
                                     batch counts once) that the transport
                                     took at once from the sender's buffer */
    uint64_t msgs_not_at_once;  /**< those it could not take so (larger
                                     than its immediate path, or its queue
                                     full): sent through a request, from a
                                     copy if the buffer could not wait
                                     (docs/CORE.md, "Small messages at
                                     once") */
} rdmx_worker_stats_t;

RDMX_API rdmx_status_t rdmx_worker_create(rdmx_context_t *context,
                                          const rdmx_worker_params_t *params,
                                          rdmx_worker_t **worker_p);

/**
 * Destroy a worker: closes its endpoints (pending operations complete with
 * RDMX_ERR_CANCELED) and listeners, waits a bounded time for closes to
 * finish, and frees everything.
 */
RDMX_API void rdmx_worker_destroy(rdmx_worker_t *worker);

/**
 * Make progress: deliver arrived messages, complete operations, run their
 * callbacks, accept connections. Never blocks.
 * @return how many events were processed; 0 when there was nothing to do.
 */
RDMX_API unsigned rdmx_worker_progress(rdmx_worker_t *worker);

/**
 * A file descriptor that becomes readable when the worker has events, for
 * epoll/poll. Arm the worker with rdmx_worker_arm() before sleeping on it.
 */
RDMX_API rdmx_status_t rdmx_worker_efd(rdmx_worker_t *worker, int *fd_p);

/**
 * Prepare to sleep on the worker's fd. Sends the messages that wait in the
 * worker's batches (calls made back to back, docs/RPC.md "Batched
 * calls"); one made after the arm, before the sleep, makes the fd
 * readable, so the loop progresses again and that sends it.
 * @return RDMX_OK: sleep is safe; RDMX_ERR_BUSY: events are pending,
 *         call rdmx_worker_progress() again first.
 */
RDMX_API rdmx_status_t rdmx_worker_arm(rdmx_worker_t *worker);

/**
 * Progress, and sleep on the worker's fd when there is nothing to do, until
 * at least one event was processed or @p timeout_ms passed (-1: forever).
 */
RDMX_API rdmx_status_t rdmx_worker_wait(rdmx_worker_t *worker, int timeout_ms);

/** Wake a worker sleeping in rdmx_worker_wait() (from any thread). */
RDMX_API void rdmx_worker_signal(rdmx_worker_t *worker);

/** Copy the worker's counters into @p stats_p. */
RDMX_API void rdmx_worker_stats(rdmx_worker_t *worker,
                                rdmx_worker_stats_t *stats_p);

/**
 * A function run on a worker's thread (rdmx_worker_post, timers). Runs
 * exactly once: with RDMX_OK when it is due, or with RDMX_ERR_CANCELED when
 * its timer was canceled or its worker is destroyed first — then it must
 * only release what @p arg holds.
 */
typedef void (*rdmx_task_cb_t)(rdmx_status_t status, void *arg);

/**
 * Run @p cb(RDMX_OK, @p arg) on the worker's thread, from its next
 * progress, and wake the worker if it sleeps. May be called from any
 * thread, also while another thread progresses the worker; functions
 * posted from one thread run in the order they were posted. Functions
 * still queued when the worker is destroyed run with RDMX_ERR_CANCELED.
 * @return RDMX_OK, RDMX_ERR_NO_MEMORY.
 */
RDMX_API rdmx_status_t rdmx_worker_post(rdmx_worker_t *worker,
                                        rdmx_task_cb_t cb, void *arg);

/**
 * Run @p cb(RDMX_OK, @p arg) on the worker's thread once @p delay_ms have
 * passed (0: at the next progress), from its progress; a sleeping worker
 * wakes for it. The worker's thread only (any thread with a progress
 * thread). Timers are checked every 64th progress pass of a busy worker,
 * so one fires within about a millisecond of its time.
 * @param timer_id_p  (may be NULL) the timer's id, for
 *                    rdmx_worker_timer_cancel().
 * @return RDMX_OK, RDMX_ERR_INVALID (negative delay, NULL cb),
 *         RDMX_ERR_NO_MEMORY.
 */
RDMX_API rdmx_status_t rdmx_worker_timer_start(rdmx_worker_t *worker,
                                               int delay_ms, rdmx_task_cb_t cb,
                                               void *arg, uint64_t *timer_id_p);

/**
 * Cancel a timer that has not fired: its callback runs now, inside this
 * call, with RDMX_ERR_CANCELED.
 * @return RDMX_OK, RDMX_ERR_NOT_FOUND (it already fired or was canceled).
 */
RDMX_API rdmx_status_t rdmx_worker_timer_cancel(rdmx_worker_t *worker,
                                                uint64_t timer_id);

/* ------------------------------------------------------------------------ */
/* Connections                                                              */
/* ------------------------------------------------------------------------ */

/** A received put-with-notify: the data is visible when this is delivered. */
typedef struct {
    uint64_t imm;    /**< the sender's 64-bit immediate value */
    uint64_t offset; /**< where the data starts, from the start of @p mr */
    uint64_t length; /**< how many bytes were written */
    rdmx_mr_t *mr;   /**< the written region; NULL if it was deregistered */
} rdmx_notify_t;

/** A put-with-notify arrived on @p ep. */
typedef void (*rdmx_notify_cb_t)(rdmx_ep_t *ep, const rdmx_notify_t *notify,
                                 void *arg);

/**
 * The connection failed or the peer left. Runs once per endpoint, after every
 * pending operation on it has completed with an error. @p status is
 * RDMX_ERR_CONN_CLOSED when the peer closed its side in order, another error
 * when it failed. The endpoint stays valid until rdmx_ep_close().
 */
typedef void (*rdmx_ep_error_cb_t)(rdmx_ep_t *ep, rdmx_status_t status,
                                   void *arg);

/** A connection completed (status RDMX_OK, @p ep usable) or failed. */
typedef void (*rdmx_connect_cb_t)(rdmx_ep_t *ep, rdmx_status_t status,
                                  void *arg);

enum {
    RDMX_EP_PARAM_FIELD_ERROR_CB = 1u << 0,
    RDMX_EP_PARAM_FIELD_NOTIFY_CB = 1u << 1,
    RDMX_EP_PARAM_FIELD_USER_DATA = 1u << 2,
    RDMX_EP_PARAM_FIELD_AUTH_SECRET = 1u << 3,
    RDMX_EP_PARAM_FIELD_CONNECT_CB = 1u << 4,
    RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT = 1u << 5,
};

/** Callbacks of an endpoint, for connect and for accepted connections. */
typedef struct {
    uint64_t field_mask;
    rdmx_ep_error_cb_t error_cb; /**< default: none */
    rdmx_notify_cb_t notify_cb;  /**< default: notifications are counted
                                      and dropped */
    void *user_data;             /**< passed to every callback here */
    /** rdmx_connect_nb only, required there: runs once the handshake
     *  completed or failed. */
    rdmx_connect_cb_t connect_cb;
    /** rdmx_connect(_nb) only: limit of the connection attempt, ms.
     *  Default RDMX_TIMEOUT_INFINITE (the kernel's and the handshake's
     *  own limits still apply). */
    int connect_timeout_ms;
    /** rdmx_connect only: the server's shared secret (copied; at most
     *  4096 bytes). With it the connection succeeds only if the server
     *  proves it holds the same secret (RDMX_ERR_DENIED otherwise); a
     *  server with a secret refuses a client without it (RDMX_ERR_DENIED).
     *  The proofs are HMAC-SHA256 in the TCP handshake, before either side
     *  hands anything of the peer's to its transport (docs/SECURITY.md).
     *  Default: none. */
    const void *auth_secret;
    size_t auth_secret_len;
} rdmx_ep_params_t;

/**
 * Start connecting to @p address ("host:port", "[v6addr]:port").
 * @p ep_p is written at once; params->connect_cb (required) runs with
 * params->user_data once the handshake completed or failed. The statuses
 * it may get: RDMX_OK, RDMX_ERR_CONN_REFUSED (nothing listens; the
 * server refused or is shutting down), RDMX_ERR_BUSY (server at its
 * connection limit), RDMX_ERR_DENIED (authentication), RDMX_ERR_UNREACHABLE
 * (no route, unresolvable name, transport cannot reach the peer),
 * RDMX_ERR_TIMEOUT (params->connect_timeout_ms), RDMX_ERR_PROTO (not an
 * rdmx peer, or another version). After a failure call rdmx_ep_close().
 * @return RDMX_INPROGRESS; RDMX_ERR_INVALID (bad address, no connect_cb),
 *         RDMX_ERR_UNREACHABLE (unresolvable host).
 */
RDMX_API rdmx_status_t rdmx_connect_nb(rdmx_worker_t *worker,
                                       const char *address,
                                       const rdmx_ep_params_t *params,
                                       rdmx_ep_t **ep_p);

/** Connect and wait (params->connect_timeout_ms; connect_cb must not be
 *  set). Returns what rdmx_connect_nb's callback would get; on error
 *  *ep_p is NULL and nothing needs closing. */
RDMX_API rdmx_status_t rdmx_connect(rdmx_worker_t *worker, const char *address,
                                    const rdmx_ep_params_t *params,
                                    rdmx_ep_t **ep_p);

/**
 * The transport a connection's messages use: RDMX_TRANSPORT_SHM,
 * RDMX_TRANSPORT_TCP or RDMX_TRANSPORT_RDMA (what UCX chose for it);
 * RDMX_TRANSPORT_AUTO while it is not connected. The backend is asked
 * once per connection (UCX's answer takes microseconds); later calls
 * return what it said.
 */
RDMX_API rdmx_transport_t rdmx_ep_transport(const rdmx_ep_t *ep);

/**
 * Close an endpoint. The peer sees an orderly close (its error_cb gets
 * RDMX_ERR_CONN_CLOSED). Posted receives complete with RDMX_ERR_CANCELED;
 * operations already issued finish or fail. Their callbacks run from later
 * rdmx_worker_progress() calls (rdmx_worker_destroy() runs them too).
 * Messages sent before the close reach the peer before its error_cb; call
 * rdmx_ep_flush() first if puts must be complete at the peer.
 * Descriptors unpacked on it stop working (RDMX_ERR_CONN_CLOSED).
 * @p ep is invalid afterwards. A close that the peer does not acknowledge
 * is abandoned after 2 s.
 */
RDMX_API void rdmx_ep_close(rdmx_ep_t *ep);

/** The user_data given in the endpoint's params. */
RDMX_API void *rdmx_ep_user_data(const rdmx_ep_t *ep);

/** Replace the endpoint's callbacks (fields named in params->field_mask). */
RDMX_API rdmx_status_t rdmx_ep_set_params(rdmx_ep_t *ep,
                                          const rdmx_ep_params_t *params);

/** The worker @p ep belongs to. */
RDMX_API rdmx_worker_t *rdmx_ep_worker(const rdmx_ep_t *ep);

/** RDMX_OK while connected, else the error that ended the connection. */
RDMX_API rdmx_status_t rdmx_ep_status(const rdmx_ep_t *ep);

/** The peer's address as "host:port" into @p buf (NUL-terminated). */
RDMX_API rdmx_status_t rdmx_ep_peer_address(const rdmx_ep_t *ep, char *buf,
                                            size_t size);

/* ------------------------------------------------------------------------ */
/* Listener                                                                 */
/* ------------------------------------------------------------------------ */

/** A new connection was accepted. Set its callbacks with rdmx_ep_set_params;
 *  close it with rdmx_ep_close() to refuse it. */
typedef void (*rdmx_accept_cb_t)(rdmx_ep_t *ep, void *arg);

enum {
    RDMX_LISTENER_PARAM_FIELD_ADDRESS = 1u << 0,
    RDMX_LISTENER_PARAM_FIELD_ACCEPT_CB = 1u << 1,
    RDMX_LISTENER_PARAM_FIELD_EP_PARAMS = 1u << 2,
    RDMX_LISTENER_PARAM_FIELD_WORKERS = 1u << 3,
    RDMX_LISTENER_PARAM_FIELD_MAX_CONNECTIONS = 1u << 4,
    RDMX_LISTENER_PARAM_FIELD_AUTH_SECRET = 1u << 5,
};

typedef struct {
    uint64_t field_mask;
    /** "host:port"; port 0 picks a free port. Default "0.0.0.0:0". */
    const char *address;
    rdmx_accept_cb_t accept_cb; /**< required */
    void *arg;                  /**< passed to accept_cb */
    /** Callbacks given to each accepted endpoint. Default: none. */
    rdmx_ep_params_t ep_params;
    /** Spread accepted connections round-robin over these workers (the
     *  listener's own may be one of them), each progressed by its own
     *  thread; accept_cb then runs on the receiving worker's thread.
     *  Default: the listener's worker takes every connection. */
    rdmx_worker_t *const *workers;
    unsigned nworkers;
    /** Connections open at once, over every worker. A client past it gets
     *  RDMX_ERR_BUSY "server at its connection limit (N)" at once; the
     *  refusal is counted (conns_refused) and logged, at most once a
     *  second. Default 0: no limit but the process's file descriptors
     *  (one per connection; see docs/CORE.md, "Connections at scale"). */
    unsigned max_connections;
    /** Shared secret (copied; at most 4096 bytes): only clients that prove
     *  they hold it (HMAC-SHA256 over fresh nonces, in the TCP handshake)
     *  get a connection; others get RDMX_ERR_DENIED, counted (auth_failed)
     *  and logged at most once a second. Nothing a client sends reaches
     *  the transport before its proof checked out. Default: none. */
    const void *auth_secret;
    size_t auth_secret_len;
} rdmx_listener_params_t;

/** Listen on params->address. RDMX_ERR_ADDR_IN_USE if the port is taken. */
RDMX_API rdmx_status_t rdmx_listener_create(
    rdmx_worker_t *worker, const rdmx_listener_params_t *params,
    rdmx_listener_t **listener_p);

/** Stop listening. Accepted endpoints stay open; connections whose
 *  handshake has not completed (on any worker the listener hands
 *  connections to) are refused with RDMX_ERR_CONN_REFUSED. */
RDMX_API void rdmx_listener_destroy(rdmx_listener_t *listener);

/** The port the listener is bound to (the chosen one for port 0). */
RDMX_API uint16_t rdmx_listener_port(const rdmx_listener_t *listener);

/* ------------------------------------------------------------------------ */
/* Registered memory and descriptors                                        */
/* ------------------------------------------------------------------------ */

enum {
    RDMX_ACCESS_READ = 1u << 0,   /**< peers may get from it */
    RDMX_ACCESS_WRITE = 1u << 1,  /**< peers may put into it */
    RDMX_ACCESS_ATOMIC = 1u << 2, /**< peers may run atomics on it */
    RDMX_ACCESS_ALL = 7u,
    /** rdmx_mr_pack only, not a right: every access through the descriptor
     *  is carried to this process's worker, which checks and applies it,
     *  and applies none from an endpoint once it is closed — even on
     *  transports with their own one-sided operations. A buffer lent this
     *  way is safe to reuse once the peer answered or the endpoint is
     *  closed (RPC lends buffers for writing this way: docs/RPC.md, "Lent
     *  buffers"). Costs the transport's one-sided speed on shared memory
     *  and RDMA. */
    RDMX_ACCESS_FENCED = 1u << 3,
};

/**
 * Register @p length bytes at @p addr for local use in operations and for
 * remote access with the rights in @p access (RDMX_ACCESS_*).
 */
RDMX_API rdmx_status_t rdmx_mem_register(rdmx_context_t *context, void *addr,
                                         size_t length, unsigned access,
                                         rdmx_mr_t **mr_p);

/**
 * Allocate and register @p length bytes (zeroed). Memory allocated this way
 * is reachable truly one-sided over shared memory: a peer's put/get/atomic
 * does not need this process to progress.
 */
RDMX_API rdmx_status_t rdmx_mem_alloc(rdmx_context_t *context, size_t length,
                                      unsigned access, rdmx_mr_t **mr_p);

/** Deregister (and free, for rdmx_mem_alloc) the region. */
RDMX_API void rdmx_mem_deregister(rdmx_mr_t *mr);

RDMX_API void *rdmx_mr_addr(const rdmx_mr_t *mr);
RDMX_API size_t rdmx_mr_length(const rdmx_mr_t *mr);

/**
 * Pack a descriptor of bytes [offset, offset + length) of @p mr with the
 * rights @p access (a subset of the region's) into @p buf. The descriptor is
 * versioned, little-endian and checksummed; any peer can unpack it. It
 * carries a MAC by this context: where rdmx carries one-sided access (tcp),
 * this process refuses any access outside what it describes
 * (docs/SECURITY.md says what each transport enforces).
 * A peer holding it may access the range until the region is deregistered
 * — or, with the transport's own one-sided operations (shared memory,
 * RDMA), until its endpoint is gone; closing an endpoint is orderly (BYE),
 * so a write the peer queued earlier may still land first. Take the
 * buffer back after the peer's word (an answer), as RPC does for lent
 * buffers (docs/RPC.md, "Lent buffers").
 * With @p buf NULL, only writes the size needed to @p size_p.
 * @return RDMX_ERR_OUT_OF_RANGE, RDMX_ERR_DENIED (rights the region lacks),
 *         RDMX_ERR_TOO_BIG (@p size smaller than needed; @p size_p says).
 */
RDMX_API rdmx_status_t rdmx_mr_pack(const rdmx_mr_t *mr, uint64_t offset,
                                    uint64_t length, unsigned access, void *buf,
                                    size_t size, size_t *size_p);

/**
 * Unpack a peer's descriptor for use on @p ep.
 * @return RDMX_ERR_BAD_DESCRIPTOR for a truncated, corrupt or unknown-version
 *         blob (and counts it in the worker's bad_descriptors).
 */
RDMX_API rdmx_status_t rdmx_rmem_unpack(rdmx_ep_t *ep, const void *buf,
                                        size_t size, rdmx_rmem_t **rmem_p);

/** Release an unpacked descriptor. */
RDMX_API void rdmx_rmem_destroy(rdmx_rmem_t *rmem);

/** Length in bytes of the remote range the descriptor covers. */
RDMX_API uint64_t rdmx_rmem_length(const rdmx_rmem_t *rmem);

/** The rights (RDMX_ACCESS_*) the descriptor grants. */
RDMX_API unsigned rdmx_rmem_access(const rdmx_rmem_t *rmem);

/* ------------------------------------------------------------------------ */
/* Operations                                                               */
/* ------------------------------------------------------------------------ */

enum {
    RDMX_OP_PARAM_FIELD_CB = 1u << 0, /**< cb and arg */
    RDMX_OP_PARAM_FIELD_MR = 1u << 1,
    RDMX_OP_PARAM_FIELD_TIMEOUT = 1u << 2,
    RDMX_OP_PARAM_FIELD_FLAGS = 1u << 3,
};

/** rdmx_op_params_t.flags */
enum {
    /** rdmx_put, rdmx_get and their _nb forms: the bytes written (the
     *  peer's memory for a put, the local buffer for a get) are not read
     *  again soon by this thread. Where rdmx copies them itself (over
     *  shared memory, a peer's rdmx_mem_alloc memory that the transport
     *  maps here), it writes them around the CPU caches (non-temporal
     *  stores), which saves reading each destination line first: a cold
     *  destination is written up to twice as fast, and the copy does not
     *  push out what this core uses. A hint: elsewhere, and on other
     *  operations, it changes nothing. Do not set it for a buffer read
     *  right after: those reads then come from memory. */
    RDMX_OP_FLAG_STREAM = 1u << 0,
};

/** Optional arguments of an operation (as UCX's ucp_request_param_t). */
typedef struct {
    uint64_t field_mask;
    /** _nb forms: required; runs once when the operation completes, unless
     *  the call returned RDMX_OK (done at once) or an error. Blocking
     *  forms: must not be set (RDMX_ERR_INVALID). */
    rdmx_cb_t cb;
    void *arg;
    /** The registered region holding the local buffer. Default NULL: UCX
     *  registers on the fly or copies. */
    rdmx_mr_t *mr;
    /** Blocking forms: the limit, ms (default RDMX_TIMEOUT_INFINITE). A
     *  one-sided operation or send that passes it fails the connection
     *  with RDMX_ERR_TIMEOUT (the transport cannot take it back), and the
     *  call returns once the buffer is the caller's again; a receive is
     *  withdrawn. _nb forms: must not be set (RDMX_ERR_INVALID). */
    int timeout_ms;
    /** RDMX_OP_FLAG_* (default 0); an unknown bit is RDMX_ERR_INVALID. */
    unsigned flags;
} rdmx_op_params_t;

/*
 * Every operation returns RDMX_INPROGRESS (_nb: params->cb will run),
 * RDMX_OK (completed; a _nb form's callback does not run) or an error
 * (nothing was started; the callback does not run). Local buffers must
 * stay valid until completion. Remote offsets are from the start of the
 * descriptor's range. Statuses every operation may return or complete
 * with: RDMX_ERR_INVALID (NULL argument, missing or forbidden params
 * member), RDMX_ERR_CONN_CLOSED (the endpoint was closed or the peer left
 * in order), RDMX_ERR_CONN_RESET (the peer failed), RDMX_ERR_CANCELED
 * (the worker was destroyed), RDMX_ERR_TIMEOUT (a blocking form's limit),
 * RDMX_ERR_NO_MEMORY, RDMX_ERR_IO (the transport failed otherwise).
 * One-sided operations check bounds and rights before they issue
 * anything: RDMX_ERR_OUT_OF_RANGE, RDMX_ERR_DENIED (rights the descriptor
 * lacks), RDMX_ERR_INVALID (a descriptor unpacked on another endpoint);
 * where rdmx carries them the target checks again and refuses with the
 * same statuses.
 */

/** Send @p length bytes (0 B to 1 TiB; large messages move zero-copy). */
RDMX_API rdmx_status_t rdmx_send_nb(rdmx_ep_t *ep, const void *buf,
                                    size_t length,
                                    const rdmx_op_params_t *params);

/**
 * Post a receive of up to @p capacity bytes into @p buf. Messages fill posted
 * receives in the order both were made; messages that arrive first wait.
 * A message longer than @p capacity fails this receive with RDMX_ERR_TOO_BIG
 * (the callback's length: the size it needs) and waits for the next
 * receive. Always RDMX_INPROGRESS or an error: the callback always runs,
 * with the message's length.
 */
RDMX_API rdmx_status_t rdmx_recv_nb(rdmx_ep_t *ep, void *buf, size_t capacity,
                                    const rdmx_op_params_t *params);

/**
 * Write @p length bytes from @p buf to the peer at @p offset of @p rmem.
 * Completion means @p buf may be reused, not that the data is at the peer:
 * it is visible there once a later rdmx_ep_flush() completes with RDMX_OK
 * (or use rdmx_put_notify(), whose notification follows the data).
 */
RDMX_API rdmx_status_t rdmx_put_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                   uint64_t offset, const void *buf,
                                   size_t length,
                                   const rdmx_op_params_t *params);

/**
 * Write, then notify: the peer's notify callback runs with @p imm, the
 * offset within its region and @p length, after the data is visible there.
 * Completes when the data is at the peer and the notification was sent.
 * Costs one more round trip than a put (an endpoint flush orders the data
 * before the notification; see docs/CORE.md).
 */
RDMX_API rdmx_status_t rdmx_put_notify_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                          uint64_t offset, const void *buf,
                                          size_t length, uint64_t imm,
                                          const rdmx_op_params_t *params);

/** Read @p length bytes at @p offset of @p rmem into @p buf. */
RDMX_API rdmx_status_t rdmx_get_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                   uint64_t offset, void *buf, size_t length,
                                   const rdmx_op_params_t *params);

/**
 * Atomically add @p value to the 64-bit word at @p offset and store its
 * previous value in @p *old_p (host byte order) by completion.
 *
 * Completion means the operation is done at the peer. It is atomic against
 * every other rdmx atomic on the word and against the owner's own
 * __atomic operations on it. Where the transport's atomics cannot be used
 * (see docs/CORE.md, "UCX versions"; or RDMX_ATOMICS=rdmx in the
 * environment) rdmx carries the operation and the target's worker applies
 * it, after checking the region's rights and bounds: the target's progress
 * must run.
 * Also returns RDMX_ERR_INVALID for an @p offset not 8-byte aligned
 * (within the region).
 */
RDMX_API rdmx_status_t rdmx_atomic_fadd_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                           uint64_t offset, uint64_t value,
                                           uint64_t *old_p,
                                           const rdmx_op_params_t *params);

/**
 * Atomically: if the word at @p offset equals @p compare, set it to @p swap.
 * The previous value lands in @p *old_p (== compare means the swap happened).
 * As rdmx_atomic_fadd_nb otherwise.
 */
RDMX_API rdmx_status_t rdmx_atomic_cswap_nb(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                            uint64_t offset, uint64_t compare,
                                            uint64_t swap, uint64_t *old_p,
                                            const rdmx_op_params_t *params);

/** Complete when every put and get issued on @p ep so far is done at the
 *  peer (its data visible there). Atomics are done at the peer when their
 *  own completion comes. */
RDMX_API rdmx_status_t rdmx_ep_flush_nb(rdmx_ep_t *ep,
                                        const rdmx_op_params_t *params);

/* Blocking forms: the same arguments; start the operation and progress
 * (or, with a progress thread, sleep) until it completes or
 * params->timeout_ms passes. Return its final status. */
RDMX_API rdmx_status_t rdmx_send(rdmx_ep_t *ep, const void *buf, size_t length,
                                 const rdmx_op_params_t *params);
/** @p length_p: the message's length (with RDMX_ERR_TOO_BIG: the size it
 *  needs). RDMX_ERR_TIMEOUT when no message came within the limit. */
RDMX_API rdmx_status_t rdmx_recv(rdmx_ep_t *ep, void *buf, size_t capacity,
                                 const rdmx_op_params_t *params,
                                 size_t *length_p);
RDMX_API rdmx_status_t rdmx_put(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                uint64_t offset, const void *buf, size_t length,
                                const rdmx_op_params_t *params);
RDMX_API rdmx_status_t rdmx_put_notify(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                       uint64_t offset, const void *buf,
                                       size_t length, uint64_t imm,
                                       const rdmx_op_params_t *params);
RDMX_API rdmx_status_t rdmx_get(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                uint64_t offset, void *buf, size_t length,
                                const rdmx_op_params_t *params);
RDMX_API rdmx_status_t rdmx_atomic_fadd(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                        uint64_t offset, uint64_t value,
                                        uint64_t *old_p,
                                        const rdmx_op_params_t *params);
RDMX_API rdmx_status_t rdmx_atomic_cswap(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                                         uint64_t offset, uint64_t compare,
                                         uint64_t swap, uint64_t *old_p,
                                         const rdmx_op_params_t *params);
RDMX_API rdmx_status_t rdmx_ep_flush(rdmx_ep_t *ep,
                                     const rdmx_op_params_t *params);

/* ------------------------------------------------------------------------ */
/* Misc                                                                     */
/* ------------------------------------------------------------------------ */

/** rdmx's version, "MAJOR.MINOR.PATCH". */
RDMX_API const char *rdmx_version(void);

/** Split "host:port" / "[v6]:port" into its parts. */
RDMX_API rdmx_status_t rdmx_addr_parse(const char *address, char *host,
                                       size_t host_size, uint16_t *port_p);

/** Non-zero when @p host names a loopback address (127/8, ::1, localhost). */
RDMX_API int rdmx_host_is_loopback(const char *host);

#ifdef __cplusplus
}
#endif

#endif /* RDMX_CORE_H */
