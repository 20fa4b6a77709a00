/*
 * rdmx lambda — internals shared by engine.c (engine, cache, natives,
 * plugins), sandbox.c (the frozen sandbox state, one call in it), states.c
 * (the engine's pool of states), arena.c (the memory a state lives in, and
 * its images), rpc.c (wire format, handlers, client) and
 * the Lua library functions rewritten to charge their work
 * (third_party/lua-5.4-safelib/).
 */
#ifndef RDMX_LAMBDA_INT_H
#define RDMX_LAMBDA_INT_H

#include <rdmx/lambda.h>

#include "lambda/arena.h"

#include <lua.h>

#include <stddef.h>
#include <stdint.h>

/* Defaults and floors of rdmx_lambda_params_t. */
#define RDMX__LAMBDA_DEF_INSTRUCTIONS 10000000ull
#define RDMX__LAMBDA_DEF_MEMORY       ((size_t)64 << 20)
#define RDMX__LAMBDA_DEF_SOURCE       ((size_t)1 << 20)
#define RDMX__LAMBDA_DEF_OUTPUT       ((size_t)16 << 20)
#define RDMX__LAMBDA_DEF_CACHE        256u
#define RDMX__LAMBDA_DEF_CACHE_BYTES  ((size_t)64 << 20)
#define RDMX__LAMBDA_DEF_TIME_MS      1000u
#define RDMX__LAMBDA_MIN_INSTRUCTIONS 1000ull
#define RDMX__LAMBDA_MIN_MEMORY       ((size_t)256 << 10)
#define RDMX__LAMBDA_MAX_SPARES       64u /* spare_states: checked, unused */

/* Function images a state keeps, and the bytes they hold at most
 * (docs/LAMBDA.md, "Fresh states from an image"). */
#define RDMX__LAMBDA_FN_IMAGES      64u
#define RDMX__LAMBDA_FN_IMAGE_BYTES ((size_t)16 << 20)
/* max_memory at most: a state's arena reserves a few times as much address
 * space (engine.c, arena_size). */
#define RDMX__LAMBDA_MAX_MEMORY ((size_t)1 << 40)

/* Names every call's environment holds (sandbox.c, env_names). */
#define RDMX__LAMBDA_ENV_NAMES 5

/* VM instructions between two budget checks while the state is small; the
 * interval shrinks as the state grows (see sandbox.c, hook_interval). */
#define RDMX__LAMBDA_HOOK_EVERY 1000

/* The limit values plus one internal state: the call is over and its state
 * is being closed (finalizers must not run Lua code). */
#define RDMX__LAMBDA_CLOSING 100

/* A growable byte buffer outside the Lua state (the output). */
typedef struct {
    char *data;
    size_t len, cap, max;
} rdmx__lambda_buf_t;

/* Append; -1 past max (nothing appended), -2 out of memory. */
int rdmx__lambda_buf_append(rdmx__lambda_buf_t *b, const void *p, size_t n);

struct rdmx__lambda_state;

/* One call: what to run, its limits, its accounting and its result. */
typedef struct rdmx__lambda_run {
    /* --- in --- */
    uint64_t max_units;
    size_t max_memory;
    size_t max_output;
    uint64_t max_time_ns;          /* 0: none */
    const rdmx_lambda_call_params_t *call;
    const char *code;              /* source text or the engine's bytecode */
    size_t code_len;
    int binary;                    /* code is the engine's own lua_dump */
    int want_dump;                 /* dump the compiled function (cache) */
    const uint8_t *id;             /* the function's id (SHA-256 of source) */

    /* --- accounting (one thread; the state's allocator ud) --- */
    rdmx__arena_t *arena;          /* the state's arena */
    uint64_t units;                /* work used */
    uint64_t clock_at;             /* check the clock when units reach it */
    uint64_t deadline_ns;          /* effective: min(caller's, max_time) */
    int deadline_is_callers;
    int hook_count;                /* current hook interval */
    size_t shorten_at;             /* mem from which it should halve */
    size_t mem;                    /* bytes the state holds */
    size_t mem_base;               /* ... when the call began */
    size_t mem_limit;              /* mem_base + max_memory (saturated) */
    size_t mem_peak;               /* highest mem */
    size_t mem_shown;              /* the sandbox's own size (count) */
    int mem_refused;               /* an allocation hit max_memory */
    int seeded;                    /* math.random seeded for this call */
    int armed;                     /* the function runs: budgets apply */
    int stop;                      /* rdmx_lambda_limit_t that stopped it */
    int closing;
    struct rdmx__lambda_state *state; /* the state the call runs in */
    lua_State *L;                  /* main thread */
    lua_State *current;            /* the thread running now */
    int stop_ref;                  /* registry ref of the stop message */

    /* --- out --- */
    rdmx__lambda_buf_t out;
    unsigned char *dump;           /* malloc'd bytecode (want_dump) */
    size_t dump_len, dump_cap;
    int dump_failed;
    rdmx_lambda_type_t type;
    int compile_error;
    rdmx_lambda_limit_t limit;
    char msg[256];
    uint64_t elapsed_ns;
} rdmx__lambda_run_t;

/* A saved image of a state's arena: the pristine state, or the pristine
 * state with one function loaded. */
typedef struct {
    rdmx__arena_image_t img;
    size_t mem;                     /* bytes the state holds in it */
    uint8_t id[RDMX_LAMBDA_ID_LEN]; /* the function's (function images) */
    uint64_t used;                  /* LRU clock */
} rdmx__lambda_image_t;

/* A sandbox state: the libraries opened and frozen once, then many calls,
 * each beginning from a saved image of the state's arena (docs/LAMBDA.md,
 * "Sandbox states"). Owned by one thread at a time: the pool hands it over
 * under its mutex. */
typedef struct rdmx__lambda_state {
    struct rdmx__lambda_state *next; /* pool list link (states.c) */
    lua_State *L;
    int stop_ref;             /* registry ref of the stop message */
    int env_mt_ref;           /* registry ref of the environments' metatable */
    int seed_ref;             /* registry ref of math.randomseed */
    int fn_ref;               /* registry ref of a function image's function */
    int env_ref;              /* registry ref of a call's globals */
    size_t sandbox_mem;       /* bytes held right after the build */
    uint64_t calls;           /* calls run in this state */
    /* registry refs of the names every environment holds */
    int name_ref[RDMX__LAMBDA_ENV_NAMES];
    rdmx__lambda_run_t owner; /* allocator ud while no call owns the state */
    /* the arena, the pristine image, function images */
    rdmx__arena_t *arena;
    rdmx__lambda_image_t pristine;
    rdmx__lambda_image_t fn_images[RDMX__LAMBDA_FN_IMAGES];
    unsigned nfn_images;   /* slots in use (bytes != NULL) */
    size_t fn_image_bytes; /* bytes they hold */
    uint64_t image_clock;
    const rdmx__arena_image_t *begun; /* the image the last call began from */
    /* the image the arena equals now (a call beginning from it copies
     * nothing), NULL once a call has run in it */
    const rdmx__arena_image_t *clean;
} rdmx__lambda_state_t;

/* sandbox.c: build a state (any thread) in an arena of @p arena_size
 * bytes. RDMX_ERR_NO_MEMORY. */
rdmx_status_t rdmx__lambda_state_build(rdmx__lambda_state_t *s,
                                       size_t arena_size);
/* sandbox.c: close a state, built or used (any thread). */
void rdmx__lambda_state_close(rdmx__lambda_state_t *s);

/* sandbox.c: run one call in @p s's state, begun from an image (copied
 * back into the arena unless the arena is that image already); the state
 * is handed back idle. Returns the
 * status; r->msg, r->out, r->type, r->limit, r->units, r->mem_peak (the
 * call's bytes) are filled. */
rdmx_status_t rdmx__lambda_run(rdmx__lambda_run_t *r, rdmx__lambda_state_t *s);
/* sandbox.c: restore an idle state to the image its last call began from,
 * ahead of the next call (docs/LAMBDA.md, "Restored after the answer"). */
void rdmx__lambda_state_tidy(rdmx__lambda_state_t *s);

/* states.c: the states of an engine, a free list: a call pops a state, or
 * builds one when the list is empty, and pushes it back when done. The
 * list holds as many states as calls ever ran at once; each lives in an
 * arena of @p arena_size bytes (docs/LAMBDA.md, "Sandbox states"). */
typedef struct rdmx__lambda_states rdmx__lambda_states_t;

/* NULL when out of memory. */
rdmx__lambda_states_t *rdmx__lambda_states_create(size_t arena_size);
/* Close every state the pool holds. */
void rdmx__lambda_states_destroy(rdmx__lambda_states_t *st);
/* A state for one call: a pooled one (*@p ready_p 1) or one built now (0).
 * NULL when out of memory. */
rdmx__lambda_state_t *rdmx__lambda_states_take(rdmx__lambda_states_t *st,
                                               int *ready_p);
/* A state a call is done with: back on the free list. */
void rdmx__lambda_states_done(rdmx__lambda_states_t *st,
                              rdmx__lambda_state_t *s);

/* sandbox.c: charge @p units of library work to the running call; raises
 * the budget error (a Lua error that cannot be caught for good) when a
 * budget is exhausted or the deadline passed. */
void rdmx__lambda_charge(lua_State *L, uint64_t units);

/* third_party/lua-5.4-safelib/ltablib.c: Lua 5.4's table library with
 * charged loops (a table). */
int rdmx__lambda_open_table(lua_State *L);

/* third_party/lua-5.4-safelib/lstrlib.c: replace find, match, gmatch, gsub
 * and rep in the string library table at @p idx with charged versions. */
void rdmx__lambda_patch_string(lua_State *L, int idx);

/* --- rpc.c: the request format (docs/LAMBDA.md, "Wire format") -------- */

#define RDMX__LAMBDA_WIRE_VERSION 1
#define RDMX__LAMBDA_EVAL_HDR     12 /* version, nkeys, nargs, slen, ilen */
#define RDMX__LAMBDA_CALL_HDR     40 /* version, nkeys, nargs, id, ilen */
#define RDMX__LAMBDA_NATIVE_HDR   8  /* version, name len, 0, ilen */

typedef struct {
    const char *source;            /* eval */
    size_t source_len;
    const uint8_t *id;             /* call: 32 bytes */
    const char *name;              /* native (not NUL-terminated) */
    size_t name_len;
    const void *input;
    size_t input_len;
    unsigned nargs;
    unsigned nkeys; /* the first nkeys args are keys */
    rdmx_lambda_arg_t args[RDMX_LAMBDA_ARGS_MAX];
} rdmx__lambda_req_t;

typedef enum {
    RDMX__LAMBDA_EVAL = 0,
    RDMX__LAMBDA_CALL = 1,
    RDMX__LAMBDA_NATIVE = 2
} rdmx__lambda_kind_t;

/* Decode and validate a request payload; RDMX_ERR_PROTO with a detail on
 * anything malformed. Pointers point into @p p. */
rdmx_status_t rdmx__lambda_decode(rdmx__lambda_kind_t kind, const void *p,
                                  size_t len, rdmx__lambda_req_t *req);

/* Encode a request into a malloc'd buffer. For EVAL pass source, for CALL
 * id, for NATIVE name (NUL-terminated). */
rdmx_status_t rdmx__lambda_encode(rdmx__lambda_kind_t kind,
                                  const char *source, size_t source_len,
                                  const uint8_t *id, const char *name,
                                  const void *input, size_t input_len,
                                  const char *const *args, unsigned nargs,
                                  unsigned nkeys, void **buf_p, size_t *len_p);

/* rdmx_lambda_eval with the first @p nkeys of @p args marked as keys, and
 * the calls' params @p cparams (NULL: the channel's defaults). */
rdmx_status_t rdmx__lambda_eval(rdmx_channel_t *channel, const char *source,
                                size_t length, const void *input,
                                size_t input_len, const char *const *args,
                                unsigned nargs, unsigned nkeys,
                                const rdmx_call_params_t *cparams, void *out,
                                size_t capacity, size_t *out_len_p);

/* Serve a decoded request with @p engine (what a handler does, without
 * the RPC request: tests use it directly). With @p held_p, the sandbox
 * state the call ran in stays the caller's (*@p held_p, NULL when none
 * ran) until it passes it to rdmx__lambda_engine_tidy(), after sending
 * the answer, and a call that made no output leaves result->output NULL
 * (length 0); without, the state goes back to the pool at once and the
 * output is never NULL on success (rdmx_lambda_result_t). */
rdmx_status_t
rdmx__lambda_serve(rdmx_lambda_engine_t *engine, rdmx__lambda_kind_t kind,
                   const rdmx__lambda_req_t *req, uint64_t deadline_ns,
                   const rdmx_lambda_env_t *env, rdmx_lambda_result_t *result,
                   rdmx__lambda_state_t **held_p);

/* engine.c: rdmx_lambda_engine_eval() and _call() keeping the state the
 * call ran in (@p held_p as for rdmx__lambda_serve; NULL: back at once). */
rdmx_status_t rdmx__lambda_engine_eval(rdmx_lambda_engine_t *engine,
                                       const char *source, size_t length,
                                       const rdmx_lambda_call_params_t *call,
                                       rdmx_lambda_result_t *result,
                                       rdmx__lambda_state_t **held_p);
rdmx_status_t rdmx__lambda_engine_call(rdmx_lambda_engine_t *engine,
                                       const uint8_t id[RDMX_LAMBDA_ID_LEN],
                                       const rdmx_lambda_call_params_t *call,
                                       rdmx_lambda_result_t *result,
                                       rdmx__lambda_state_t **held_p);
/* engine.c: a held state (or NULL) restored to its last call's image and
 * given back to the pool: what a server does once the answer is sent. */
void rdmx__lambda_engine_tidy(rdmx_lambda_engine_t *engine,
                              rdmx__lambda_state_t *held);

/* engine.c: a handler binding (engine + env), freed with the engine. */
typedef struct rdmx__lambda_binding {
    struct rdmx__lambda_binding *next;
    rdmx_lambda_engine_t *engine;
    const rdmx_lambda_env_t *env;
} rdmx__lambda_binding_t;

rdmx__lambda_binding_t *rdmx__lambda_binding(rdmx_lambda_engine_t *engine,
                                             const rdmx_lambda_env_t *env);

#endif /* RDMX_LAMBDA_INT_H */
