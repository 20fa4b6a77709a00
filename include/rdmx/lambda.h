/*
 * rdmx — Lambda: a client ships a small function (Lua 5.4 source) that runs
 * next to the data, in a sandbox with budgets; or calls a native function an
 * operator installed as a plugin.
 *
 * - Engine: shared by any number of threads (an RPC server's workers). Every
 *   call has a sandbox state to itself while it runs, pristine (restored
 *   from a saved image of the state before any call), and its own globals:
 *   nothing a call sets is seen by another.
 *   The cache of compiled functions (keyed by the SHA-256 of the source)
 *   and the pool are shared, under mutexes.
 * - Sandbox: base (no dofile/loadfile/warn; load is text-only; print writes
 *   into the output; collectgarbage only "count"), string (no dump),
 *   table, math, utf8, coroutine, os.time/clock/date/difftime, the library
 *   tables read-only. No io, package/require, debug, binary chunks.
 * - Budgets per call: VM instructions plus the work of library functions
 *   (max_instructions), memory (max_memory), wall-clock time (max_time_ms
 *   and the caller's deadline), output (max_output), source (max_source).
 * - Function contract: the chunk sees the global string `input` and the
 *   table `args` (strings), also split into `KEYS` (the first nkeys) and
 *   `ARGV` (the rest); it returns one string, number, boolean or
 *   nothing; print() output comes first. Optional near-data access through
 *   an environment (kv.get/put/delete/exists) the host supplies per call.
 * - Natives: every *.so in plugin_dir exports rdmx_lambda_plugin_init(),
 *   which registers functions by name. Machine code from clients is never
 *   run.
 * - RPC glue: "lambda.eval", "lambda.call" and "lambda.native" handlers for
 *   any rdmx_rpc_server_t, and client helpers.
 *
 * Status codes: RDMX_ERR_INVALID (syntax or runtime error, bad return
 * value), RDMX_ERR_NO_RESOURCE (instruction or memory budget), RDMX_ERR_TIMEOUT
 * (deadline or max_time_ms), RDMX_ERR_TOO_BIG (source or output over its
 * limit), RDMX_ERR_NOT_FOUND (unknown function id or native name). The Lua
 * message is in rdmx_error_detail() and the result's message.
 *
 * The design, the sandbox rules and the wire format are in docs/LAMBDA.md.
 */
#ifndef RDMX_LAMBDA_H
#define RDMX_LAMBDA_H

#include <rdmx/rpc.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rdmx_lambda_engine rdmx_lambda_engine_t;
typedef struct rdmx_lambda_registry rdmx_lambda_registry_t;
typedef struct rdmx_lambda_output rdmx_lambda_output_t;

/** A function's id: SHA-256 of its source. */
#define RDMX_LAMBDA_ID_LEN 32
/** Longest native function name, without the NUL. */
#define RDMX_LAMBDA_NAME_MAX 63
/** Most extra string arguments of one call. */
#define RDMX_LAMBDA_ARGS_MAX 255
/** Version of the plugin interface (rdmx_lambda_registry_t::abi). */
#define RDMX_LAMBDA_PLUGIN_ABI 1

/* ------------------------------------------------------------------------ */
/* Engine                                                                   */
/* ------------------------------------------------------------------------ */

enum {
    RDMX_LAMBDA_PARAM_FIELD_MAX_INSTRUCTIONS = 1u << 0,
    RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY = 1u << 1,
    RDMX_LAMBDA_PARAM_FIELD_MAX_SOURCE = 1u << 2,
    RDMX_LAMBDA_PARAM_FIELD_MAX_OUTPUT = 1u << 3,
    RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES = 1u << 4,
    RDMX_LAMBDA_PARAM_FIELD_PLUGIN_DIR = 1u << 5,
    RDMX_LAMBDA_PARAM_FIELD_MAX_TIME = 1u << 6,
    RDMX_LAMBDA_PARAM_FIELD_CACHE_BYTES = 1u << 7,
    RDMX_LAMBDA_PARAM_FIELD_SPARE_STATES = 1u << 8,
    RDMX_LAMBDA_PARAM_FIELD_FRESH_STATES = 1u << 9,
};

/* Earlier names, kept for one release. */
#define RDMX_LAMBDA_FIELD_DEPRECATED_(name)                                    \
    RDMX_LAMBDA_FIELD_##name RDMX_DEPRECATED(                                  \
        "renamed RDMX_LAMBDA_PARAM_FIELD_" #name) =                            \
        RDMX_LAMBDA_PARAM_FIELD_##name
enum {
    RDMX_LAMBDA_FIELD_DEPRECATED_(MAX_INSTRUCTIONS),
    RDMX_LAMBDA_FIELD_DEPRECATED_(MAX_MEMORY),
    RDMX_LAMBDA_FIELD_DEPRECATED_(MAX_SOURCE),
    RDMX_LAMBDA_FIELD_DEPRECATED_(MAX_OUTPUT),
    RDMX_LAMBDA_FIELD_DEPRECATED_(CACHE_ENTRIES),
    RDMX_LAMBDA_FIELD_DEPRECATED_(PLUGIN_DIR),
    RDMX_LAMBDA_FIELD_DEPRECATED_(MAX_TIME),
    RDMX_LAMBDA_FIELD_DEPRECATED_(CACHE_BYTES),
};
#undef RDMX_LAMBDA_FIELD_DEPRECATED_

typedef struct {
    uint64_t field_mask;
    /** Work units per call: one per VM instruction (counted in steps of
     *  1000), plus library work (pattern-matching steps, elements moved,
     *  64 bytes allocated, ...). Default 10,000,000; at least 1000. */
    uint64_t max_instructions;
    /** Bytes a call may add to its Lua state (input included). Default
     *  64 MiB; at least 256 KiB, at most 1 TiB. */
    size_t max_memory;
    /** Longest source. Default 1 MiB. */
    size_t max_source;
    /** Longest output (print() plus the return value). Default 16 MiB. */
    size_t max_output;
    /** Compiled functions kept (LRU). Default 256; 0 = no cache. */
    unsigned cache_entries;
    /** Bytes of compiled code kept at most. Default 64 MiB. */
    size_t cache_bytes;
    /** Directory of native plugins (*.so), loaded at creation; NULL (the
     *  default) = none. Refused if it or a plugin is world-writable. */
    const char *plugin_dir;
    /** Wall-clock limit of one call, ms, besides the caller's deadline.
     *  Default 1000; RDMX_TIMEOUT_INFINITE: only the caller's deadline. */
    int max_time_ms;
    /** Unused (fresh states are restored from an image and need no states
     *  built ahead); still refused over 64. */
    unsigned spare_states;
    /** Unused: every call begins from a pristine Lua state, its pooled
     *  state restored from a saved image of itself (docs/LAMBDA.md,
     *  "Fresh states from an image"). 0 once selected reused states, for
     *  callers who trust each other; fresh states now cost no more. */
    int fresh_states;
} rdmx_lambda_params_t;

/** Near-data access for kv.get/put/delete/exists, supplied by the host
 *  (rdmx-kvd implements it with its store). Callbacks run on the calling
 *  thread, possibly on several threads at once; a NULL callback leaves that
 *  kv function out. A callback may set rdmx_error_detail() (internal code:
 *  rdmx__error) to explain an error; the text reaches the Lua error. */
typedef struct {
    void *ctx;
    /** Copy the value of the key into @p buf (up to @p cap bytes) and set
     *  *vlen_p to its length. RDMX_OK; RDMX_ERR_NOT_FOUND; RDMX_ERR_TOO_BIG
     *  with *vlen_p = the length needed (the engine retries with a buffer
     *  that large); another error. */
    rdmx_status_t (*kv_get)(void *ctx, const void *key, size_t klen, void *buf,
                            size_t cap, size_t *vlen_p);
    /** Store a value; ttl_ms 0 = no expiry. */
    rdmx_status_t (*kv_put)(void *ctx, const void *key, size_t klen,
                            const void *value, size_t vlen, uint64_t ttl_ms);
    /** RDMX_OK deleted, RDMX_ERR_NOT_FOUND absent, or an error. */
    rdmx_status_t (*kv_delete)(void *ctx, const void *key, size_t klen);
    /** RDMX_OK present, RDMX_ERR_NOT_FOUND absent, or an error. */
    rdmx_status_t (*kv_exists)(void *ctx, const void *key, size_t klen);
} rdmx_lambda_env_t;

/** One extra argument (binary-safe). */
typedef struct {
    const void *data;
    size_t len;
} rdmx_lambda_arg_t;

enum {
    RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT = 1u << 0, /**< input, input_len */
    RDMX_LAMBDA_CALL_PARAM_FIELD_ARGS = 1u << 1,  /**< args, nargs */
    RDMX_LAMBDA_CALL_PARAM_FIELD_NKEYS = 1u << 2,
    RDMX_LAMBDA_CALL_PARAM_FIELD_DEADLINE = 1u << 3,
    RDMX_LAMBDA_CALL_PARAM_FIELD_ENV = 1u << 4,
};

/** What a call gets. NULL: no input, no args, no deadline, no env. */
typedef struct {
    uint64_t field_mask;
    const void *input; /**< the global `input` (a string); default "" */
    size_t input_len;
    /** The global table `args`, up to RDMX_LAMBDA_ARGS_MAX; default
     *  empty. */
    const rdmx_lambda_arg_t *args;
    unsigned nargs;
    /** The first @p nkeys of @p args name keys (as in Redis scripts): the
     *  function also sees them as the table `KEYS` and the rest as `ARGV`.
     *  At most nargs; default 0. */
    unsigned nkeys;
    /** Absolute deadline, ns on CLOCK_MONOTONIC (rdmx_rpc_req_deadline());
     *  default none. */
    uint64_t deadline_ns;
    const rdmx_lambda_env_t *env; /**< default NULL: no `kv` table */
} rdmx_lambda_call_params_t;

/** Type of the value the function returned. */
typedef enum {
    RDMX_LAMBDA_NIL = 0, /**< returned nothing or nil: output is print()'s */
    RDMX_LAMBDA_STRING = 1,
    RDMX_LAMBDA_INTEGER = 2, /**< formatted as "%lld" */
    RDMX_LAMBDA_FLOAT = 3,   /**< formatted as Lua does ("%.14g", "1.0") */
    RDMX_LAMBDA_BOOLEAN = 4  /**< "true" / "false" */
} rdmx_lambda_type_t;

/** Which limit stopped a call. */
typedef enum {
    RDMX_LAMBDA_LIMIT_NONE = 0,
    RDMX_LAMBDA_LIMIT_INSTRUCTIONS = 1, /**< RDMX_ERR_NO_RESOURCE */
    RDMX_LAMBDA_LIMIT_MEMORY = 2,       /**< RDMX_ERR_NO_RESOURCE */
    RDMX_LAMBDA_LIMIT_TIME = 3,         /**< max_time_ms: RDMX_ERR_TIMEOUT */
    RDMX_LAMBDA_LIMIT_DEADLINE = 4,     /**< caller's: RDMX_ERR_TIMEOUT */
    RDMX_LAMBDA_LIMIT_OUTPUT = 5,       /**< RDMX_ERR_TOO_BIG */
    RDMX_LAMBDA_LIMIT_SOURCE = 6        /**< RDMX_ERR_TOO_BIG */
} rdmx_lambda_limit_t;

/** How a call ended. Release with rdmx_lambda_result_free(). */
typedef struct {
    /** Output (malloc'd, NUL-terminated; NULL with length 0 on error). */
    char *output;
    size_t output_len;
    rdmx_lambda_type_t type;
    rdmx_lambda_limit_t limit;
    /** The error message ("" on success), also in rdmx_error_detail(). */
    char message[256];
    uint64_t instructions; /**< work units used (see max_instructions) */
    size_t memory_peak;    /**< the call's peak bytes in its Lua state */
    uint64_t elapsed_ns;   /**< the whole call: state, load, run */
    uint8_t id[RDMX_LAMBDA_ID_LEN]; /**< the function's id */
    int cached;                     /**< compiled code came from the cache */
} rdmx_lambda_result_t;

/** Create an engine (params may be NULL: defaults). Loads the plugins.
 *  @return RDMX_ERR_INVALID (bad limit, unusable plugin: the detail names
 *  it), RDMX_ERR_DENIED (world-writable plugin dir or file),
 *  RDMX_ERR_EXISTS (two natives of one name), RDMX_ERR_NO_MEMORY. */
RDMX_API rdmx_status_t rdmx_lambda_engine_create(
    const rdmx_lambda_params_t *params, rdmx_lambda_engine_t **engine_p);

/** Free the engine: no call may be running. Unloads the plugins. */
RDMX_API void rdmx_lambda_engine_destroy(rdmx_lambda_engine_t *engine);

/**
 * Run @p source (a Lua text chunk) with @p call. The compiled function is
 * cached under its id (result->id) for rdmx_lambda_engine_call().
 * Always fill *result (release it with rdmx_lambda_result_free).
 */
RDMX_API rdmx_status_t rdmx_lambda_engine_eval(
    rdmx_lambda_engine_t *engine, const char *source, size_t length,
    const rdmx_lambda_call_params_t *call, rdmx_lambda_result_t *result);

/** Run a cached function by id. @return RDMX_ERR_NOT_FOUND if it is not in
 *  the cache (never compiled here, or evicted): send the source again. */
RDMX_API rdmx_status_t rdmx_lambda_engine_call(
    rdmx_lambda_engine_t *engine, const uint8_t id[RDMX_LAMBDA_ID_LEN],
    const rdmx_lambda_call_params_t *call, rdmx_lambda_result_t *result);

/** Run a native function by name. @return RDMX_ERR_NOT_FOUND if unknown;
 *  RDMX_ERR_TOO_BIG past max_output; the function's own error. */
RDMX_API rdmx_status_t rdmx_lambda_engine_native(rdmx_lambda_engine_t *engine,
                                                 const char *name,
                                                 const void *input,
                                                 size_t length,
                                                 rdmx_lambda_result_t *result);

/** Release a result's output (the struct itself is the caller's). */
RDMX_API void rdmx_lambda_result_free(rdmx_lambda_result_t *result);

/** The id of a source: SHA-256. */
RDMX_API void rdmx_lambda_id(const void *source, size_t length,
                             uint8_t id[RDMX_LAMBDA_ID_LEN]);

/** Lower-case hex of an id into @p hex (65 bytes with the NUL). */
RDMX_API void rdmx_lambda_id_hex(const uint8_t id[RDMX_LAMBDA_ID_LEN],
                                 char hex[65]);

/** Engine counters. */
typedef struct {
    uint64_t calls;               /**< eval + call + native (a call by id that
                                       is not cached counts only as a miss) */
    uint64_t errors;              /**< calls that ended with an error */
    uint64_t syntax_errors;       /**< sources that did not compile */
    uint64_t budget_instructions; /**< stopped by each limit */
    uint64_t budget_memory;
    uint64_t budget_time; /**< max_time_ms or the caller's deadline */
    uint64_t budget_output;
    uint64_t cache_hits;   /**< eval or call found compiled code */
    uint64_t cache_misses; /**< eval compiled; call got NOT_FOUND */
    uint64_t cache_evictions;
    uint64_t cache_entries; /**< now */
    uint64_t cache_bytes;   /**< now */
    uint64_t natives;       /**< native functions registered */
    uint64_t native_calls;
    uint64_t states_ready;   /**< calls that found a state ready */
    uint64_t states_built;   /**< calls that built their own */
} rdmx_lambda_stats_t;

RDMX_API void rdmx_lambda_engine_stats(rdmx_lambda_engine_t *engine,
                                       rdmx_lambda_stats_t *stats_p);

/* ------------------------------------------------------------------------ */
/* Native functions and plugins                                             */
/* ------------------------------------------------------------------------ */

/**
 * Output of a native function. A plugin only uses the inline helpers
 * below, which go through these pointers: plugins need no symbol of
 * librdmx, so they load into hosts linked statically as well.
 */
struct rdmx_lambda_output {
    rdmx_status_t (*append)(rdmx_lambda_output_t *out, const void *data,
                            size_t length);
    void (*set_error)(rdmx_lambda_output_t *out, const char *message);
    void *priv; /**< the engine's */
};

/** Append bytes to the output. @return RDMX_ERR_TOO_BIG past max_output
 *  (return it), RDMX_ERR_NO_MEMORY. */
static inline rdmx_status_t rdmx_lambda_output_append(rdmx_lambda_output_t *out,
                                                      const void *data,
                                                      size_t length)
{
    return out->append(out, data, length);
}

/** Give the caller a message with the error status the function returns. */
static inline void rdmx_lambda_output_error(rdmx_lambda_output_t *out,
                                            const char *message)
{
    out->set_error(out, message);
}

/** A native function: read @p length bytes at @p input, append the result
 *  to @p out. Runs on the caller's thread, possibly on several at once;
 *  trusted code, without budgets other than max_output. */
typedef rdmx_status_t (*rdmx_lambda_native_fn_t)(const void *input,
                                                 size_t length,
                                                 rdmx_lambda_output_t *out,
                                                 void *arg);

/** Handed to a plugin's init function. */
struct rdmx_lambda_registry {
    unsigned abi; /**< RDMX_LAMBDA_PLUGIN_ABI of the engine */
    rdmx_status_t (*register_native)(rdmx_lambda_registry_t *registry,
                                     const char *name,
                                     rdmx_lambda_native_fn_t fn, void *arg);
    void *priv; /**< the engine's */
};

/** Register a native function (name 1..RDMX_LAMBDA_NAME_MAX bytes).
 *  @return RDMX_ERR_EXISTS for a name already taken, RDMX_ERR_INVALID. */
static inline rdmx_status_t
rdmx_lambda_register_native(rdmx_lambda_registry_t *registry, const char *name,
                            rdmx_lambda_native_fn_t fn, void *arg)
{
    return registry->register_native(registry, name, fn, arg);
}

/** What every plugin exports (C linkage): register its functions, return
 *  0; anything else makes engine creation fail. */
typedef int (*rdmx_lambda_plugin_init_t)(rdmx_lambda_registry_t *registry);
#define RDMX_LAMBDA_PLUGIN_INIT "rdmx_lambda_plugin_init"

/** Register a native function directly (hosts, tests). Thread-safe. */
RDMX_API rdmx_status_t rdmx_lambda_engine_register_native(
    rdmx_lambda_engine_t *engine, const char *name, rdmx_lambda_native_fn_t fn,
    void *arg);

/* ------------------------------------------------------------------------ */
/* RPC                                                                      */
/* ------------------------------------------------------------------------ */

/**
 * Register "lambda.eval", "lambda.call" and "lambda.native" on @p server
 * (before rdmx_rpc_server_start). Calls run on the worker thread that
 * received them, with the request's deadline and @p env (may be NULL; it
 * must outlive the server, as must the engine). Not idempotent (a lambda
 * may write through kv), so channels do not resend them after a failure.
 */
RDMX_API rdmx_status_t rdmx_lambda_register_handlers(
    rdmx_rpc_server_t *server, rdmx_lambda_engine_t *engine,
    const rdmx_lambda_env_t *env);

enum {
    RDMX_LAMBDA_EVAL_PARAM_FIELD_INPUT = 1u << 0, /**< input, input_len */
    RDMX_LAMBDA_EVAL_PARAM_FIELD_ARGS = 1u << 1,  /**< args, nargs */
    RDMX_LAMBDA_EVAL_PARAM_FIELD_TIMEOUT = 1u << 2,
};

/** Optional arguments of rdmx_lambda_eval. */
typedef struct {
    uint64_t field_mask;
    const void *input; /**< the global `input`; default "" */
    size_t input_len;
    const char *const *args; /**< NUL-terminated strings; default none */
    unsigned nargs;
    /** Deadline, ms. Default: the channel's timeout_ms. */
    int timeout_ms;
} rdmx_lambda_eval_params_t;

/**
 * Run @p source on the server of @p channel: first by id ("lambda.call"),
 * and with the source ("lambda.eval") when the server does not have it.
 * The output goes to @p out (up to @p capacity bytes; *out_len_p gets its
 * length, or the length needed with RDMX_ERR_TOO_BIG). Blocking, like
 * rdmx_call; on error rdmx_error_detail() holds the server's message.
 * @return RDMX_OK; RDMX_ERR_NO_RESOURCE (instruction or memory budget),
 *         RDMX_ERR_TIMEOUT (time budget or deadline), RDMX_ERR_INVALID
 *         (syntax or runtime error), RDMX_ERR_TOO_BIG (output or source
 *         over a limit), and what rdmx_call returns.
 */
RDMX_API rdmx_status_t rdmx_lambda_eval(rdmx_channel_t *channel,
                                        const char *source, size_t length,
                                        const rdmx_lambda_eval_params_t *params,
                                        void *out, size_t capacity,
                                        size_t *out_len_p);

/** Run the native function @p name on the server with @p input (the
 *  channel's timeout). As rdmx_lambda_eval. */
RDMX_API rdmx_status_t rdmx_lambda_native(rdmx_channel_t *channel,
                                          const char *name, const void *input,
                                          size_t input_len, void *out,
                                          size_t capacity, size_t *out_len_p);

#ifdef __cplusplus
}
#endif

#endif /* RDMX_LAMBDA_H */
