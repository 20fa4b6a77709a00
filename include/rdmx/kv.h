/*
 * rdmx — KV cache client: one client over one or many rdmx-kvd servers.
 *
 * Keys (binary, 1..max_key bytes) map to servers by jump consistent hashing
 * of their 64-bit hash; with replicas R > 1 a write goes to R consecutive
 * servers and a read to the first of them that is up. A server that fails
 * is skipped while its channel is down (it reconnects by itself).
 *
 * Zero-copy: a GET into a buffer inside a registered region (its
 * rdmx_mr_t in rdmx_kv_op_params_t.mr) lets the server RDMA-write a large
 * value straight into it; a PUT from a registered buffer lets the server
 * RDMA-read the value. Without a region, values travel inside the RPC
 * messages. The region is a hint: on a tcp context (no RDMA: one-sided
 * access is carried as messages there) values travel inline regardless.
 * The zero-copy batches (rdmx_kv_batch_get, rdmx_kv_batch_put) always
 * move values between the servers and slots of registered regions.
 *
 * Lent buffers: a GET's buffer is yours again the moment the call returns
 * (its callback runs), whatever the status: the server checks right before
 * it writes that you still wait, and a GET that times out or is canceled
 * completes only after the server's word or, if none comes within 200 ms,
 * after the connection to that server was aborted (it reconnects). So a
 * GET may return up to 200 ms after its timeout (docs/RPC.md, "Lent
 * buffers").
 *
 * Threading: a client lives on one rdmx worker and follows its rules
 * (core.h): use it from the thread that progresses the worker, or create
 * the worker with RDMX_WORKER_FLAG_PROGRESS_THREAD. For rate, use one
 * worker and client per thread.
 *
 * Limits: rdmx-kvd takes keys up to 250 bytes and values up to 1 MiB by
 * default (its --max-key and --max-value); larger ones get
 * RDMX_ERR_TOO_BIG.
 *
 * Errors: RDMX_ERR_NOT_FOUND (miss; also CAS, REPLACE and DELETE on a
 * missing key), RDMX_ERR_EXISTS (ADD on a present key, CAS conflict),
 * RDMX_ERR_TOO_BIG (value larger than the buffer: meta->length says the
 * size needed; or over the server's limit), RDMX_ERR_NO_MEMORY (server
 * full with eviction off), RDMX_ERR_INVALID (bad key, INCR on a
 * non-number), RDMX_ERR_UNREACHABLE (no replica up, fail fast),
 * RDMX_ERR_TIMEOUT, transport errors; rdmx_error_detail() says more.
 */
#ifndef RDMX_KV_H
#define RDMX_KV_H

#include <rdmx/rpc.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rdmx_kv rdmx_kv_t;

enum {
    RDMX_KV_PARAM_FIELD_REPLICAS = 1u << 0,
    RDMX_KV_PARAM_FIELD_TIMEOUT = 1u << 1,
    RDMX_KV_PARAM_FIELD_INLINE_MAX = 1u << 2,
    RDMX_KV_PARAM_FIELD_AUTH_SECRET = 1u << 3,
    RDMX_KV_PARAM_FIELD_WAIT_FOR_READY = 1u << 4,
    RDMX_KV_PARAM_FIELD_CHANNEL = 1u << 5,
};

/* Earlier names, kept for one release. */
#define RDMX_KV_FIELD_DEPRECATED_(name)                                        \
    RDMX_KV_FIELD_##name RDMX_DEPRECATED(                                      \
        "renamed RDMX_KV_PARAM_FIELD_" #name) = RDMX_KV_PARAM_FIELD_##name
enum {
    RDMX_KV_FIELD_DEPRECATED_(REPLICAS),
    RDMX_KV_FIELD_DEPRECATED_(TIMEOUT),
    RDMX_KV_FIELD_DEPRECATED_(INLINE_MAX),
    RDMX_KV_FIELD_DEPRECATED_(AUTH_SECRET),
    RDMX_KV_FIELD_DEPRECATED_(WAIT_FOR_READY),
};
#undef RDMX_KV_FIELD_DEPRECATED_

typedef struct {
    uint64_t field_mask;
    unsigned replicas; /**< copies of each key (default 1) */
    /** Deadline of each operation, ms (default 5000;
     *  RDMX_TIMEOUT_INFINITE: none); rdmx_kv_op_params_t overrides it per
     *  operation. */
    int timeout_ms;
    /** PUT values up to this size travel inline; larger ones from a
     *  registered buffer are pulled by the server. Default 8192; unset,
     *  over UCX's shared memory, 128 for rdmx_mem_alloc memory (which the
     *  server maps: its pull is its own copy, with no round trip). Over
     *  tcp values up to 256 KiB travel inline whatever this says. */
    size_t inline_max;
    const void *auth_secret; /**< the servers' shared secret, if any */
    size_t auth_secret_len;
    /** Default 0, fail fast: an operation on a server whose connection is
     *  down fails at once (RDMX_ERR_UNREACHABLE, or RDMX_ERR_CONN_RESET for
     *  one in flight when it broke), and a read goes to the next replica
     *  that is up. Non-zero: operations wait for the server up to their
     *  timeout (rdmx_channel_params_t.wait_for_ready). */
    int wait_for_ready;
    /** Options of each server's channel (copied), e.g. credits, queue,
     *  retries, breaker, backoff, state_cb (called for every server's
     *  channel). The members above take precedence: the channels always
     *  get this client's timeout_ms, wait_for_ready and auth_secret. Unless
     *  set here, heartbeats ping after 250 ms of silence and give up after
     *  max(timeout_ms, 1000) ms: a server pulling a large value is silent
     *  until done. Default: the channels' defaults with those. */
    const rdmx_channel_params_t *channel;
} rdmx_kv_params_t;

/**
 * Create a client for @p servers ("host:port,host:port,..."); connections
 * start at once (rdmx_kv_wait_ready waits for them).
 */
RDMX_API rdmx_status_t rdmx_kv_create(rdmx_worker_t *worker,
                                      const char *servers,
                                      const rdmx_kv_params_t *params,
                                      rdmx_kv_t **kv_p);
RDMX_API void rdmx_kv_destroy(rdmx_kv_t *kv);

/** Wait until every server is connected. RDMX_ERR_TIMEOUT after
 *  @p timeout_ms (RDMX_TIMEOUT_INFINITE: no limit). */
RDMX_API rdmx_status_t rdmx_kv_wait_ready(rdmx_kv_t *kv, int timeout_ms);

/** Number of servers, and which one (index) owns @p key first. */
RDMX_API unsigned rdmx_kv_servers(const rdmx_kv_t *kv);
RDMX_API unsigned rdmx_kv_server_of(const rdmx_kv_t *kv, const void *key,
                                    size_t klen);
/** The channel to server @p index (state, stats, metrics). */
RDMX_API rdmx_channel_t *rdmx_kv_channel(rdmx_kv_t *kv, unsigned index);

/** Metadata of a stored value. */
typedef struct {
    size_t length;  /**< value length (needed size with RDMX_ERR_TOO_BIG) */
    uint32_t flags; /**< the client flags stored with it */
    uint64_t cas;   /**< its version */
    /** In a completion callback: what went wrong, in words ("" on
     *  success); valid during the callback, on whatever thread runs it
     *  (rdmx_error_detail() is per thread and may be stale there). */
    const char *message;
} rdmx_kv_meta_t;

/**
 * Completion of a non-blocking operation: runs once, from the worker's
 * progress. @p meta: length/flags/version (GET), the new version in
 * meta->cas (PUT); the needed length with RDMX_ERR_TOO_BIG.
 */
typedef void (*rdmx_kv_cb_t)(rdmx_status_t status, const rdmx_kv_meta_t *meta,
                             void *arg);

typedef enum {
    RDMX_KV_PUT_SET = 0,     /**< store */
    RDMX_KV_PUT_ADD = 1,     /**< only if absent (else RDMX_ERR_EXISTS) */
    RDMX_KV_PUT_REPLACE = 2, /**< only if present (else NOT_FOUND) */
    RDMX_KV_PUT_CAS = 3      /**< only if its version is still `cas` */
} rdmx_kv_put_mode_t;

enum {
    RDMX_KV_OP_PARAM_FIELD_MR = 1u << 0,
    RDMX_KV_OP_PARAM_FIELD_TIMEOUT = 1u << 1,
    RDMX_KV_OP_PARAM_FIELD_CB = 1u << 2, /**< cb and arg */
    RDMX_KV_OP_PARAM_FIELD_MODE = 1u << 3,
    RDMX_KV_OP_PARAM_FIELD_FLAGS = 1u << 4,
    RDMX_KV_OP_PARAM_FIELD_TTL = 1u << 5,
    RDMX_KV_OP_PARAM_FIELD_CAS = 1u << 6,
    RDMX_KV_OP_PARAM_FIELD_MORE = 1u << 7,
};

/** Optional arguments of a GET or PUT. */
typedef struct {
    uint64_t field_mask;
    /** The registered region holding the buffer. With it a large GET is
     *  RDMA-written by the server straight into the buffer, and a large
     *  PUT is pulled by the server with RDMA read. Default NULL: values
     *  travel inside the messages. */
    rdmx_mr_t *mr;
    /** Deadline, ms. Default: the client's timeout_ms. */
    int timeout_ms;
    /** _nb forms: required; runs once. Blocking forms: must not be set. */
    rdmx_kv_cb_t cb;
    void *arg;
    /** PUT: the condition (default RDMX_KV_PUT_SET). */
    rdmx_kv_put_mode_t mode;
    /** PUT: stored with the value, returned by GET (default 0). */
    uint32_t flags;
    /** PUT: time to live, ms (default 0: until evicted). */
    uint32_t ttl_ms;
    /** PUT with RDMX_KV_PUT_CAS: the expected version. */
    uint64_t cas;
    /** Nonzero when more operations follow at once: this one may wait to
     *  leave with them as one message per server, until an operation
     *  without it to that server, or the worker's next progress (a
     *  blocking form's own wait sends it; docs/RPC.md, "Batched calls").
     *  Default 0. */
    int more;
} rdmx_kv_op_params_t;

/**
 * Read @p key into @p buf (@p capacity bytes). @p meta_p (may be NULL) gets
 * length, flags and version. Bytes of @p buf past the value are not
 * written, with one exception over shared memory: a GET that copied a
 * value out of the server's store while it was rewritten is sent again,
 * and what its first copy wrote past the value returned is zeroed
 * (docs/KV.md, "Mapped GETs over shared memory"). Nothing is ever
 * written past @p capacity.
 * @return RDMX_OK; RDMX_ERR_NOT_FOUND (miss); RDMX_ERR_TOO_BIG (the value
 *         is longer than @p capacity: meta_p->length says how long);
 *         RDMX_ERR_INVALID (empty or too long key); RDMX_ERR_TIMEOUT;
 *         RDMX_ERR_UNREACHABLE (no replica up); transport errors.
 */
RDMX_API rdmx_status_t rdmx_kv_get(rdmx_kv_t *kv, const void *key, size_t klen,
                                   void *buf, size_t capacity,
                                   const rdmx_kv_op_params_t *params,
                                   rdmx_kv_meta_t *meta_p);

/** Non-blocking GET: @p buf (and the region) must stay valid until the
 *  callback ran. @return RDMX_INPROGRESS (it will run) or an error (it
 *  will not). */
RDMX_API rdmx_status_t rdmx_kv_get_nb(rdmx_kv_t *kv, const void *key,
                                      size_t klen, void *buf, size_t capacity,
                                      const rdmx_kv_op_params_t *params);

/**
 * Store @p vlen bytes at @p value under @p key (params NULL: SET, no TTL,
 * inline). The new version goes to @p cas_p (may be NULL).
 * @return RDMX_OK; RDMX_ERR_EXISTS (ADD on a present key; CAS on a changed
 *         version); RDMX_ERR_NOT_FOUND (REPLACE or CAS on a missing key);
 *         RDMX_ERR_TOO_BIG (over the server's --max-value, which the
 *         detail gives); RDMX_ERR_NO_MEMORY (server full, eviction off);
 *         RDMX_ERR_INVALID (bad key or mode); RDMX_ERR_TIMEOUT; transport
 *         errors.
 */
RDMX_API rdmx_status_t rdmx_kv_put(rdmx_kv_t *kv, const void *key, size_t klen,
                                   const void *value, size_t vlen,
                                   const rdmx_kv_op_params_t *params,
                                   uint64_t *cas_p);

/** Non-blocking PUT (to every replica; the callback reports the first
 *  error). The key and inline values are copied; a value in a region must
 *  stay until the callback. With replicas > 1 only RDMX_KV_PUT_SET
 *  (RDMX_ERR_UNSUPPORTED otherwise: rdmx_kv_put lets the first copy decide
 *  a conditional write). */
RDMX_API rdmx_status_t rdmx_kv_put_nb(rdmx_kv_t *kv, const void *key,
                                      size_t klen, const void *value,
                                      size_t vlen,
                                      const rdmx_kv_op_params_t *params);

/** Delete @p key (@p cas 0: any version). */
RDMX_API rdmx_status_t rdmx_kv_delete(rdmx_kv_t *kv, const void *key,
                                      size_t klen, uint64_t cas);

/** Set a new time to live (0 = none) without reading the value. */
RDMX_API rdmx_status_t rdmx_kv_touch(rdmx_kv_t *kv, const void *key,
                                     size_t klen, uint32_t ttl_ms);

/** Add @p delta to (or subtract, with @p decr) the decimal number stored
 *  under @p key; memcached semantics (wraps up, floors at 0 down). */
RDMX_API rdmx_status_t rdmx_kv_incr(rdmx_kv_t *kv, const void *key, size_t klen,
                                    uint64_t delta, int decr,
                                    uint64_t *value_p);

/** RDMX_OK if present, RDMX_ERR_NOT_FOUND if not. */
RDMX_API rdmx_status_t rdmx_kv_exists(rdmx_kv_t *kv, const void *key,
                                      size_t klen);

/** One key of a multi-get. */
typedef struct {
    const void *key;
    size_t klen;
    void *buf; /**< where the value goes */
    size_t capacity;
    rdmx_status_t status; /**< out: RDMX_OK, NOT_FOUND, TOO_BIG, ... */
    rdmx_kv_meta_t meta;  /**< out */
} rdmx_kv_mget_t;

/** Read many keys: one round trip per server involved (per 4096 keys). */
RDMX_API rdmx_status_t rdmx_kv_mget(rdmx_kv_t *kv, rdmx_kv_mget_t *items,
                                    size_t n);

/** One key of a multi-put (values travel inline). */
typedef struct {
    const void *key;
    size_t klen;
    const void *value;
    size_t vlen;
    rdmx_kv_put_mode_t mode; /**< as rdmx_kv_op_params_t's */
    uint32_t flags;
    uint32_t ttl_ms;
    uint64_t cas;         /**< in: for RDMX_KV_PUT_CAS; out: new version */
    rdmx_status_t status; /**< out */
} rdmx_kv_mput_t;

RDMX_API rdmx_status_t rdmx_kv_mput(rdmx_kv_t *kv, rdmx_kv_mput_t *items,
                                    size_t n);

/** One key of a zero-copy batch (rdmx_kv_batch_get, rdmx_kv_batch_put). */
typedef struct {
    const void *key;
    size_t klen;
    rdmx_mr_t *mr;        /**< registered region holding buf (required) */
    void *buf;            /**< GET: the slot; PUT: the value */
    size_t size;          /**< GET: the slot's capacity; PUT: value length */
    rdmx_status_t status; /**< out: RDMX_OK, NOT_FOUND, TOO_BIG, ... */
    size_t length;        /**< out, GET: value length (the needed length
                               with TOO_BIG; nothing written then) */
} rdmx_kv_batch_item_t;

/**
 * GET every key into its slot: the server RDMA-writes each value into the
 * slot, one request per server involved (split at the server's
 * per-request limits: 4096 keys, 64 MiB of slots, its message size, 8
 * regions), one reply each; the requests to all servers go out at once.
 * Each slot [buf, buf + size) must lie inside its region. Nothing is
 * written outside a slot, nor into any slot once the call returned; a
 * value longer than its slot gets RDMX_ERR_TOO_BIG, its length in
 * `length`, and leaves the slot untouched. An item whose request failed
 * (RDMX_ERR_TIMEOUT, RDMX_ERR_CONN_RESET, RDMX_ERR_UNREACHABLE, ...) gets
 * that status; its slot may have been written in part. docs/KV.md,
 * "Zero-copy batches".
 * params: timeout (RDMX_KV_OP_PARAM_FIELD_TIMEOUT, per request); others
 * ignored.
 * @return RDMX_OK when every item has a status (per-item outcomes in
 *         items[i].status), or an error for the whole batch: bad arguments
 *         (RDMX_ERR_INVALID: the bad items' status INVALID, the others'
 *         CANCELED; nothing sent), RDMX_ERR_NO_MEMORY.
 * @code
 * // blocks of 64 KiB in one registered buffer `mr`
 * rdmx_kv_batch_item_t it[2] = {
 *     {.key = "a", .klen = 1, .mr = mr, .buf = base, .size = 65536},
 *     {.key = "b", .klen = 1, .mr = mr, .buf = base + 65536, .size = 65536}};
 * if (rdmx_kv_batch_get(kv, it, 2, NULL) == RDMX_OK && it[0].status == RDMX_OK)
 *     use(base, it[0].length);
 * @endcode
 */
RDMX_API rdmx_status_t rdmx_kv_batch_get(rdmx_kv_t *kv,
                                         rdmx_kv_batch_item_t *items, size_t n,
                                         const rdmx_kv_op_params_t *params);

/**
 * PUT every item: the server pulls each value by RDMA read from the
 * caller's region (the same requests and limits as rdmx_kv_batch_get).
 * With replicas: every replica pulls; an item's status is the first error
 * of any copy. params: timeout, ttl_ms, flags (stored with every value);
 * mode, if set, must be RDMX_KV_PUT_SET. @return as rdmx_kv_batch_get.
 */
RDMX_API rdmx_status_t rdmx_kv_batch_put(rdmx_kv_t *kv,
                                         rdmx_kv_batch_item_t *items, size_t n,
                                         const rdmx_kv_op_params_t *params);

/** How many of @p keys, in order, are present before the first miss
 *  (single-server batches; keys on other servers are asked there). */
RDMX_API rdmx_status_t rdmx_kv_prefix_hits(rdmx_kv_t *kv,
                                           const void *const *keys,
                                           const size_t *klens, size_t n,
                                           size_t *hits_p);

/** Drop every key on every server. */
RDMX_API rdmx_status_t rdmx_kv_flush(rdmx_kv_t *kv);

enum {
    RDMX_KV_EVAL_PARAM_FIELD_KEYS = 1u << 0, /**< keys and nkeys */
    RDMX_KV_EVAL_PARAM_FIELD_ARGS = 1u << 1, /**< args and nargs */
    RDMX_KV_EVAL_PARAM_FIELD_TIMEOUT = 1u << 2,
};

/** Optional arguments of rdmx_kv_eval. */
typedef struct {
    uint64_t field_mask;
    const char *const *keys; /**< NUL-terminated; default none */
    unsigned nkeys;
    const char *const *args; /**< NUL-terminated; default none */
    unsigned nargs;
    /** Deadline, ms. Default: the client's timeout_ms. */
    int timeout_ms;
} rdmx_kv_eval_params_t;

/**
 * Run a Lua function next to the data (docs/LAMBDA.md): on the server that
 * owns params->keys[0] (server 0 without keys), in its sandbox, with
 * kv.get/put/delete/exists over that server's store. The function sees
 * the tables KEYS (the keys) and ARGV (the args), both also in `args`,
 * and an empty `input`. Every key must live on that server (else
 * RDMX_ERR_INVALID names the one that does not): a function never reaches
 * another shard, and with replicas its writes stay on the primary. Sent
 * by hash first, with the source when the server does not have it. The
 * output goes to @p out (up to @p capacity bytes; *out_len_p gets its
 * length, or the length needed with RDMX_ERR_TOO_BIG). Lambda errors come
 * back with the server's message in rdmx_error_detail():
 * RDMX_ERR_NO_RESOURCE (instruction or memory budget), RDMX_ERR_TIMEOUT
 * (time budget or deadline), RDMX_ERR_INVALID (syntax or runtime error),
 * RDMX_ERR_TOO_BIG (output or source over the server's limit).
 * nkeys + nargs <= 255.
 */
RDMX_API rdmx_status_t rdmx_kv_eval(rdmx_kv_t *kv, const char *source,
                                    size_t length,
                                    const rdmx_kv_eval_params_t *params,
                                    void *out, size_t capacity,
                                    size_t *out_len_p);

/** Server @p index's statistics as "name value\n" lines (memcached's
 *  names) into @p buf; NUL-terminated. */
RDMX_API rdmx_status_t rdmx_kv_stats(rdmx_kv_t *kv, unsigned index, char *buf,
                                     size_t size);

#ifdef __cplusplus
}
#endif

#endif /* RDMX_KV_H */
