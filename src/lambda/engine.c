/*
 * rdmx lambda — the engine: parameters, the cache of compiled functions,
 * native functions and plugins, counters.
 *
 * Cache: entries keyed by the SHA-256 of the source hold the bytecode the
 * engine itself dumped after compiling that source (never bytecode from a
 * client), in a hash table with an LRU list, bounded by cache_entries and
 * cache_bytes. A call takes a reference on its entry under the mutex and
 * loads the bytecode into its sandbox state without the lock (once per
 * state: a function image keeps it loaded, sandbox.c); an entry evicted
 * meanwhile is freed by its last reference.
 */
#define _GNU_SOURCE
#include "lambda/lambda_int.h"

#include "core/upper.h"

#include <openssl/sha.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct lambda_fn {
    uint8_t id[RDMX_LAMBDA_ID_LEN];
    struct lambda_fn *hnext;       /* hash chain */
    struct lambda_fn *prev, *next; /* LRU: head = most recent */
    unsigned refs;
    int linked;                    /* in the table and the list */
    size_t len;
    unsigned char code[];
} lambda_fn_t;

typedef struct {
    char name[RDMX_LAMBDA_NAME_MAX + 1];
    rdmx_lambda_native_fn_t fn;
    void *arg;
} native_t;

typedef rdmx__lambda_binding_t binding_t;

struct rdmx_lambda_engine {
    uint64_t max_units;
    size_t max_memory, max_source, max_output, cache_bytes;
    unsigned cache_entries;
    uint64_t max_time_ns;

    pthread_mutex_t lock;
    lambda_fn_t **buckets;
    size_t nbuckets;
    lambda_fn_t *head, *tail;
    size_t nfn, fn_bytes;

    native_t *natives;
    size_t nnatives, natives_cap;
    void **plugins;
    size_t nplugins;
    binding_t *bindings;
    rdmx__lambda_states_t *states;

    rdmx_lambda_stats_t stats;
};

/* --- ids ------------------------------------------------------------------ */

void rdmx_lambda_id(const void *source, size_t length,
                    uint8_t id[RDMX_LAMBDA_ID_LEN])
{
    SHA256(source != NULL ? source : (const void *)"", length, id);
}

void rdmx_lambda_id_hex(const uint8_t id[RDMX_LAMBDA_ID_LEN], char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    unsigned i;
    for (i = 0; i < RDMX_LAMBDA_ID_LEN; i++) {
        hex[2 * i] = digits[id[i] >> 4];
        hex[2 * i + 1] = digits[id[i] & 15];
    }
    hex[64] = '\0';
}

/* --- cache (engine lock held) ------------------------------------------- */

static size_t bucket_of(const rdmx_lambda_engine_t *e, const uint8_t *id)
{
    uint64_t h;
    memcpy(&h, id, sizeof(h)); /* a SHA-256: any 8 bytes are uniform */
    return (size_t)(h & (e->nbuckets - 1));
}

static void lru_unlink(rdmx_lambda_engine_t *e, lambda_fn_t *f)
{
    if (f->prev != NULL)
        f->prev->next = f->next;
    else
        e->head = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    else
        e->tail = f->prev;
    f->prev = f->next = NULL;
}

static void lru_push(rdmx_lambda_engine_t *e, lambda_fn_t *f)
{
    f->prev = NULL;
    f->next = e->head;
    if (e->head != NULL)
        e->head->prev = f;
    e->head = f;
    if (e->tail == NULL)
        e->tail = f;
}

static lambda_fn_t *cache_find(rdmx_lambda_engine_t *e, const uint8_t *id)
{
    lambda_fn_t *f;
    if (e->nbuckets == 0)
        return NULL;
    for (f = e->buckets[bucket_of(e, id)]; f != NULL; f = f->hnext)
        if (memcmp(f->id, id, RDMX_LAMBDA_ID_LEN) == 0)
            return f;
    return NULL;
}

static void cache_remove(rdmx_lambda_engine_t *e, lambda_fn_t *f)
{
    lambda_fn_t **pp = &e->buckets[bucket_of(e, f->id)];
    while (*pp != f)
        pp = &(*pp)->hnext;
    *pp = f->hnext;
    f->hnext = NULL;
    lru_unlink(e, f);
    f->linked = 0;
    e->nfn--;
    e->fn_bytes -= f->len;
    if (f->refs == 0)
        free(f);
}

/* A referenced entry for @p id, most recent now; NULL if absent. */
static lambda_fn_t *cache_get(rdmx_lambda_engine_t *e, const uint8_t *id)
{
    lambda_fn_t *f;
    pthread_mutex_lock(&e->lock);
    f = cache_find(e, id);
    if (f != NULL) {
        f->refs++;
        lru_unlink(e, f);
        lru_push(e, f);
        e->stats.cache_hits++;
    } else
        e->stats.cache_misses++;
    pthread_mutex_unlock(&e->lock);
    return f;
}

/* Drop a call's reference to @f (NULL: none); e->lock held. */
static void fn_unref_locked(lambda_fn_t *f)
{
    if (f != NULL && --f->refs == 0 && !f->linked)
        free(f);
}

static void cache_insert(rdmx_lambda_engine_t *e, const uint8_t *id,
                         const unsigned char *code, size_t len)
{
    lambda_fn_t *f;
    if (e->cache_entries == 0 || len > e->cache_bytes)
        return;
    f = malloc(sizeof(*f) + len);
    if (f == NULL)
        return;
    memcpy(f->id, id, RDMX_LAMBDA_ID_LEN);
    memcpy(f->code, code, len);
    f->len = len;
    f->refs = 0;
    f->linked = 1;
    f->prev = f->next = NULL;
    pthread_mutex_lock(&e->lock);
    if (cache_find(e, id) != NULL) { /* another thread was first */
        pthread_mutex_unlock(&e->lock);
        free(f);
        return;
    }
    while (e->tail != NULL && (e->nfn + 1 > e->cache_entries ||
                               e->fn_bytes + len > e->cache_bytes)) {
        /* (cache_remove unlinks before it frees: the analyzer loses track) */
        /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
        cache_remove(e, e->tail);
        e->stats.cache_evictions++;
    }
    f->hnext = e->buckets[bucket_of(e, id)];
    e->buckets[bucket_of(e, id)] = f;
    lru_push(e, f);
    e->nfn++;
    e->fn_bytes += len;
    pthread_mutex_unlock(&e->lock);
}

/* --- natives ------------------------------------------------------------- */

static rdmx_status_t add_native(rdmx_lambda_engine_t *e, const char *name,
                                rdmx_lambda_native_fn_t fn, void *arg)
{
    size_t i, n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > RDMX_LAMBDA_NAME_MAX || fn == NULL)
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: native name must be 1..%d bytes and fn "
                           "not NULL",
                           RDMX_LAMBDA_NAME_MAX);
    pthread_mutex_lock(&e->lock);
    for (i = 0; i < e->nnatives; i++)
        if (strcmp(e->natives[i].name, name) == 0) {
            pthread_mutex_unlock(&e->lock);
            return rdmx__error(RDMX_ERR_EXISTS,
                               "lambda: native \"%s\" is registered twice",
                               name);
        }
    if (e->nnatives == e->natives_cap) {
        size_t cap = e->natives_cap ? e->natives_cap * 2 : 16;
        native_t *nv = realloc(e->natives, cap * sizeof(*nv));
        if (nv == NULL) {
            pthread_mutex_unlock(&e->lock);
            return rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
        }
        e->natives = nv;
        e->natives_cap = cap;
    }
    memcpy(e->natives[e->nnatives].name, name, n + 1);
    e->natives[e->nnatives].fn = fn;
    e->natives[e->nnatives].arg = arg;
    e->nnatives++;
    e->stats.natives = e->nnatives;
    pthread_mutex_unlock(&e->lock);
    return RDMX_OK;
}

rdmx_status_t rdmx_lambda_engine_register_native(rdmx_lambda_engine_t *engine,
                                                 const char *name,
                                                 rdmx_lambda_native_fn_t fn,
                                                 void *arg)
{
    if (engine == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL engine");
    return add_native(engine, name, fn, arg);
}

static rdmx_status_t registry_register(rdmx_lambda_registry_t *r,
                                       const char *name,
                                       rdmx_lambda_native_fn_t fn, void *arg)
{
    return add_native(r->priv, name, fn, arg);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static rdmx_status_t load_plugin(rdmx_lambda_engine_t *e, const char *path)
{
    struct stat sb;
    void *h, *sym;
    rdmx_lambda_plugin_init_t init;
    rdmx_lambda_registry_t reg;
    void **pl;
    int rc;

    if (stat(path, &sb) != 0)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: plugin %s: %s", path,
                           strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return RDMX_OK; /* not a file: not a plugin */
    if (sb.st_mode & S_IWOTH)
        return rdmx__error(RDMX_ERR_DENIED,
                           "lambda: plugin %s is world-writable", path);
    pl = realloc(e->plugins, (e->nplugins + 1) * sizeof(*pl));
    if (pl == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
    e->plugins = pl;
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: plugin %s: %s", path,
                           dlerror());
    e->plugins[e->nplugins++] = h;
    sym = dlsym(h, RDMX_LAMBDA_PLUGIN_INIT);
    if (sym == NULL)
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: plugin %s does not export %s", path,
                           RDMX_LAMBDA_PLUGIN_INIT);
    memcpy(&init, &sym, sizeof(init));
    reg.abi = RDMX_LAMBDA_PLUGIN_ABI;
    reg.register_native = registry_register;
    reg.priv = e;
    rc = init(&reg);
    if (rc != 0) {
        /* keep a detail the init's own registration may have left */
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: plugin %s: %s returned %d", path,
                           RDMX_LAMBDA_PLUGIN_INIT, rc);
    }
    return RDMX_OK;
}

static rdmx_status_t load_plugins(rdmx_lambda_engine_t *e, const char *dir)
{
    struct stat sb;
    DIR *d;
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0, i;
    rdmx_status_t st = RDMX_OK;

    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: plugin_dir %s is not a directory", dir);
    if (sb.st_mode & S_IWOTH)
        return rdmx__error(RDMX_ERR_DENIED,
                           "lambda: plugin_dir %s is world-writable", dir);
    d = opendir(dir);
    if (d == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: plugin_dir %s: %s", dir,
                           strerror(errno));
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        char *p;
        if (l < 4 || strcmp(de->d_name + l - 3, ".so") != 0 ||
            de->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **nn;
            cap = cap ? cap * 2 : 8;
            nn = realloc(names, cap * sizeof(*nn));
            if (nn == NULL) {
                st = rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
                break;
            }
            names = nn;
        }
        if (asprintf(&p, "%s/%s", dir, de->d_name) < 0) {
            st = rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
            break;
        }
        names[n++] = p;
    }
    closedir(d);
    if (st == RDMX_OK && n > 1)
        qsort(names, n, sizeof(*names), name_cmp); /* a stable order */
    for (i = 0; i < n && st == RDMX_OK; i++)
        st = load_plugin(e, names[i]);
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

/* --- create / destroy ----------------------------------------------------- */

/* Address space of a state's arena: the sandbox and a loaded function
 * (source beyond 1 GiB is not worth room), and a call's max_memory (at most
 * RDMX__LAMBDA_MAX_MEMORY) with room for what the allocator does not merge:
 * freed small blocks serve their own size class only (docs/LAMBDA.md,
 * "Fresh states from an image"). Reserved, not committed. */
static size_t arena_size(size_t max_memory, size_t max_source)
{
    size_t s = max_source < ((size_t)1 << 30) ? max_source : (size_t)1 << 30;

    return 4 * max_memory + 4 * s + ((size_t)64 << 20);
}

rdmx_status_t rdmx_lambda_engine_create(const rdmx_lambda_params_t *params,
                                        rdmx_lambda_engine_t **engine_p)
{
    rdmx_lambda_params_t p = {0};
    rdmx_lambda_engine_t *e;
    uint64_t m = params != NULL ? params->field_mask : 0;
    int time_ms = RDMX__LAMBDA_DEF_TIME_MS;
    rdmx_status_t st;

    if (engine_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL engine_p");
    *engine_p = NULL;
    p.max_instructions = (m & RDMX_LAMBDA_PARAM_FIELD_MAX_INSTRUCTIONS)
                             ? params->max_instructions
                             : RDMX__LAMBDA_DEF_INSTRUCTIONS;
    p.max_memory = (m & RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY) ? params->max_memory
                                                      : RDMX__LAMBDA_DEF_MEMORY;
    p.max_source = (m & RDMX_LAMBDA_PARAM_FIELD_MAX_SOURCE) ? params->max_source
                                                      : RDMX__LAMBDA_DEF_SOURCE;
    p.max_output = (m & RDMX_LAMBDA_PARAM_FIELD_MAX_OUTPUT) ? params->max_output
                                                      : RDMX__LAMBDA_DEF_OUTPUT;
    p.cache_entries = (m & RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES)
                          ? params->cache_entries
                          : RDMX__LAMBDA_DEF_CACHE;
    p.cache_bytes = (m & RDMX_LAMBDA_PARAM_FIELD_CACHE_BYTES)
                        ? params->cache_bytes
                        : RDMX__LAMBDA_DEF_CACHE_BYTES;
    if (m & RDMX_LAMBDA_PARAM_FIELD_MAX_TIME)
        time_ms = params->max_time_ms;
    /* checked as it always was; fresh states need no spares now */
    p.spare_states =
        (m & RDMX_LAMBDA_PARAM_FIELD_SPARE_STATES) ? params->spare_states : 0;
    /* fresh_states: every call begins from a pristine state; 0 asked for
     * reused states, which fresh ones now cost no more than (unused) */
    if (p.spare_states > RDMX__LAMBDA_MAX_SPARES)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: spare_states %u over %u",
                           p.spare_states, RDMX__LAMBDA_MAX_SPARES);
    if (p.max_instructions < RDMX__LAMBDA_MIN_INSTRUCTIONS)
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: max_instructions %llu below %llu",
                           (unsigned long long)p.max_instructions,
                           (unsigned long long)RDMX__LAMBDA_MIN_INSTRUCTIONS);
    if (p.max_memory < RDMX__LAMBDA_MIN_MEMORY)
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: max_memory %zu below %zu", p.max_memory,
                           RDMX__LAMBDA_MIN_MEMORY);
    if (p.max_memory > RDMX__LAMBDA_MAX_MEMORY)
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: max_memory %zu over %zu (1 TiB)",
                           p.max_memory, RDMX__LAMBDA_MAX_MEMORY);
    if (p.max_source == 0 || p.max_output == 0)
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: max_source and max_output must be > 0");

    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
    e->max_units = p.max_instructions;
    e->max_memory = p.max_memory;
    e->max_source = p.max_source;
    e->max_output = p.max_output;
    e->cache_entries = p.cache_entries;
    e->cache_bytes = p.cache_bytes;
    /* (0 ns: no limit; a limit of 0 ms stops every call at once) */
    e->max_time_ns = time_ms < 0    ? 0
                     : time_ms == 0 ? 1
                                    : (uint64_t)time_ms * 1000000ull;
    if (e->cache_entries > 0) {
        size_t nb = 16;
        while (nb < 2 * (size_t)e->cache_entries && nb < ((size_t)1 << 24))
            nb *= 2;
        e->buckets = calloc(nb, sizeof(*e->buckets));
        if (e->buckets == NULL) {
            free(e);
            return rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
        }
        e->nbuckets = nb;
    }
    e->states =
        rdmx__lambda_states_create(arena_size(e->max_memory, e->max_source));
    if (e->states == NULL) { /* nothing else is set up yet */
        free(e->buckets);
        free(e);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
    }
    pthread_mutex_init(&e->lock, NULL);
    if ((m & RDMX_LAMBDA_PARAM_FIELD_PLUGIN_DIR) && params->plugin_dir != NULL &&
        params->plugin_dir[0] != '\0') {
        st = load_plugins(e, params->plugin_dir);
        if (st != RDMX_OK) {
            char detail[256];
            snprintf(detail, sizeof(detail), "%s", rdmx_error_detail());
            rdmx_lambda_engine_destroy(e);
            return rdmx__error(st, "%s", detail);
        }
    }
    *engine_p = e;
    return RDMX_OK;
}

void rdmx_lambda_engine_destroy(rdmx_lambda_engine_t *engine)
{
    rdmx_lambda_engine_t *e = engine;
    size_t i;
    if (e == NULL)
        return;
    rdmx__lambda_states_destroy(e->states);
    while (e->tail != NULL)
        /* (cache_remove unlinks before it frees: the analyzer loses track) */
        /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
        cache_remove(e, e->tail);
    free(e->buckets);
    free(e->natives);
    for (i = 0; i < e->nplugins; i++)
        dlclose(e->plugins[i]);
    free(e->plugins);
    while (e->bindings != NULL) {
        binding_t *b = e->bindings;
        e->bindings = b->next;
        free(b);
    }
    pthread_mutex_destroy(&e->lock);
    free(e);
}

rdmx__lambda_binding_t *rdmx__lambda_binding(rdmx_lambda_engine_t *engine,
                                             const rdmx_lambda_env_t *env)
{
    binding_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->engine = engine;
    b->env = env;
    pthread_mutex_lock(&engine->lock);
    b->next = engine->bindings;
    engine->bindings = b;
    pthread_mutex_unlock(&engine->lock);
    return b;
}

void rdmx_lambda_engine_stats(rdmx_lambda_engine_t *engine,
                              rdmx_lambda_stats_t *stats_p)
{
    pthread_mutex_lock(&engine->lock);
    *stats_p = engine->stats;
    stats_p->cache_entries = engine->nfn;
    stats_p->cache_bytes = engine->fn_bytes;
    pthread_mutex_unlock(&engine->lock);
}

/* --- calls ----------------------------------------------------------------- */

void rdmx_lambda_result_free(rdmx_lambda_result_t *result)
{
    if (result == NULL)
        return;
    free(result->output);
    result->output = NULL;
    result->output_len = 0;
}

static void result_init(rdmx_lambda_result_t *res)
{
    memset(res, 0, sizeof(*res));
}

/* Count the outcome, set the detail, and drop the call's reference to
 * its cached function @fn (NULL: none), under the one lock. @p fresh: 1
 * the call ran in a state found ready (a pooled state), 0 it built its
 * state, -1 it ran no Lua state. */
static rdmx_status_t finish(rdmx_lambda_engine_t *e, rdmx_status_t st,
                            rdmx_lambda_result_t *res, int syntax, int fresh,
                            lambda_fn_t *fn)
{
    pthread_mutex_lock(&e->lock);
    fn_unref_locked(fn);
    e->stats.calls++;
    if (fresh == 1)
        e->stats.states_ready++;
    else if (fresh == 0)
        e->stats.states_built++;
    if (st != RDMX_OK)
        e->stats.errors++;
    if (syntax)
        e->stats.syntax_errors++;
    switch (res->limit) {
    case RDMX_LAMBDA_LIMIT_INSTRUCTIONS:
        e->stats.budget_instructions++;
        break;
    case RDMX_LAMBDA_LIMIT_MEMORY:
        e->stats.budget_memory++;
        break;
    case RDMX_LAMBDA_LIMIT_TIME:
    case RDMX_LAMBDA_LIMIT_DEADLINE:
        e->stats.budget_time++;
        break;
    case RDMX_LAMBDA_LIMIT_OUTPUT:
        e->stats.budget_output++;
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&e->lock);
    if (st != RDMX_OK)
        return rdmx__error(st, "%s", res->message);
    return RDMX_OK;
}

/* Run a call in a pooled state. With @p held_p, the state stays the
 * caller's (rdmx__lambda_engine_tidy gives it back); without, it goes back
 * to the pool now, and the next call in it restores its image first. @fn:
 * the cached function @code is from, whose reference the call gives back
 * here (NULL: none). */
static rdmx_status_t run(rdmx_lambda_engine_t *e, lambda_fn_t *fn,
                         const char *code, size_t len, int binary,
                         int want_dump, const rdmx_lambda_call_params_t *call,
                         rdmx_lambda_result_t *res,
                         rdmx__lambda_state_t **held_p)
{
    rdmx_lambda_call_params_t c = {0};
    uint64_t m = call != NULL ? call->field_mask : 0;
    rdmx__lambda_run_t r;
    rdmx__lambda_state_t *state;
    rdmx_status_t st;
    int fresh;

    /* Only the members the mask names; the sandbox reads them all. */
    c.field_mask = m;
    if (m & RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT) {
        c.input = call->input;
        c.input_len = call->input_len;
    }
    if (m & RDMX_LAMBDA_CALL_PARAM_FIELD_ARGS) {
        c.args = call->args;
        c.nargs = call->nargs;
    }
    if (m & RDMX_LAMBDA_CALL_PARAM_FIELD_NKEYS)
        c.nkeys = call->nkeys;
    if (m & RDMX_LAMBDA_CALL_PARAM_FIELD_DEADLINE)
        c.deadline_ns = call->deadline_ns;
    if (m & RDMX_LAMBDA_CALL_PARAM_FIELD_ENV)
        c.env = call->env;

    memset(&r, 0, sizeof(r));
    r.max_units = e->max_units;
    r.max_memory = e->max_memory;
    r.max_output = e->max_output;
    r.max_time_ns = e->max_time_ns;
    r.call = &c;
    r.code = code;
    r.code_len = len;
    r.binary = binary;
    r.want_dump = want_dump;
    r.id = res->id;
    if (r.call->nargs > RDMX_LAMBDA_ARGS_MAX ||
        (r.call->nargs > 0 && r.call->args == NULL) ||
        (r.call->input == NULL && r.call->input_len > 0)) {
        snprintf(res->message, sizeof(res->message),
                 "lambda: bad call (nargs %u, max %d; NULL input or args)",
                 r.call->nargs, RDMX_LAMBDA_ARGS_MAX);
        return finish(e, RDMX_ERR_INVALID, res, 0, -1, fn);
    }
    state = rdmx__lambda_states_take(e->states, &fresh);
    if (state == NULL) {
        snprintf(res->message, sizeof(res->message),
                 "lambda: out of memory (a sandbox state)");
        return finish(e, RDMX_ERR_NO_MEMORY, res, 0, -1, fn);
    }
    st = rdmx__lambda_run(&r, state);
    if (held_p != NULL)
        *held_p = state;
    else
        rdmx__lambda_states_done(e->states, state);
    res->output = r.out.data;
    res->output_len = r.out.len;
    res->type = st == RDMX_OK ? r.type : RDMX_LAMBDA_NIL;
    res->limit = r.limit;
    memcpy(res->message, r.msg, sizeof(res->message));
    res->instructions = r.units;
    res->memory_peak = r.mem_peak;
    res->elapsed_ns = r.elapsed_ns;
    /* (a held call is a server's, which sends output_len bytes: no empty
     * buffer for a function that returned nothing) */
    if (st == RDMX_OK && res->output == NULL && held_p == NULL) {
        res->output = calloc(1, 1);
        if (res->output == NULL) {
            snprintf(res->message, sizeof(res->message), "out of memory");
            st = RDMX_ERR_NO_MEMORY;
        }
    }
    if (want_dump && !r.compile_error && !r.dump_failed && r.dump != NULL)
        cache_insert(e, res->id, r.dump, r.dump_len);
    free(r.dump);
    return finish(e, st, res, r.compile_error && !binary, fresh, fn);
}

rdmx_status_t rdmx__lambda_engine_eval(rdmx_lambda_engine_t *engine,
                                       const char *source, size_t length,
                                       const rdmx_lambda_call_params_t *call,
                                       rdmx_lambda_result_t *result,
                                       rdmx__lambda_state_t **held_p)
{
    rdmx_lambda_engine_t *e = engine;
    lambda_fn_t *f;

    if (held_p != NULL)
        *held_p = NULL;
    if (result == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL result");
    result_init(result);
    if (e == NULL || (source == NULL && length > 0)) {
        snprintf(result->message, sizeof(result->message),
                 "lambda: NULL engine or source");
        return rdmx__error(RDMX_ERR_INVALID, "%s", result->message);
    }
    rdmx_lambda_id(source, length, result->id);
    if (length > e->max_source) {
        result->limit = RDMX_LAMBDA_LIMIT_SOURCE;
        snprintf(result->message, sizeof(result->message),
                 "source of %zu bytes exceeds max_source of %zu", length,
                 e->max_source);
        return finish(e, RDMX_ERR_TOO_BIG, result, 0, -1, NULL);
    }
    f = cache_get(e, result->id);
    if (f != NULL) {
        result->cached = 1;
        return run(e, f, (const char *)f->code, f->len, 1, 0, call, result,
                   held_p);
    }
    return run(e, NULL, source != NULL ? source : "", length, 0,
               e->cache_entries > 0, call, result, held_p);
}

rdmx_status_t rdmx_lambda_engine_eval(rdmx_lambda_engine_t *engine,
                                      const char *source, size_t length,
                                      const rdmx_lambda_call_params_t *call,
                                      rdmx_lambda_result_t *result)
{
    return rdmx__lambda_engine_eval(engine, source, length, call, result, NULL);
}

rdmx_status_t rdmx__lambda_engine_call(rdmx_lambda_engine_t *engine,
                                       const uint8_t id[RDMX_LAMBDA_ID_LEN],
                                       const rdmx_lambda_call_params_t *call,
                                       rdmx_lambda_result_t *result,
                                       rdmx__lambda_state_t **held_p)
{
    rdmx_lambda_engine_t *e = engine;
    lambda_fn_t *f;
    char hex[65];

    if (held_p != NULL)
        *held_p = NULL;
    if (result == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL result");
    result_init(result);
    if (e == NULL || id == NULL) {
        snprintf(result->message, sizeof(result->message),
                 "lambda: NULL engine or id");
        return rdmx__error(RDMX_ERR_INVALID, "%s", result->message);
    }
    memcpy(result->id, id, RDMX_LAMBDA_ID_LEN);
    f = cache_get(e, id);
    if (f == NULL) {
        rdmx_lambda_id_hex(id, hex);
        snprintf(result->message, sizeof(result->message),
                 "function %.16s... is not cached here; send its source",
                 hex);
        /* the ordinary first step of a client that calls by hash: a
         * cache miss, not a call or an error */
        return rdmx__error(RDMX_ERR_NOT_FOUND, "%s", result->message);
    }
    result->cached = 1;
    return run(e, f, (const char *)f->code, f->len, 1, 0, call, result, held_p);
}

rdmx_status_t rdmx_lambda_engine_call(rdmx_lambda_engine_t *engine,
                                      const uint8_t id[RDMX_LAMBDA_ID_LEN],
                                      const rdmx_lambda_call_params_t *call,
                                      rdmx_lambda_result_t *result)
{
    return rdmx__lambda_engine_call(engine, id, call, result, NULL);
}

void rdmx__lambda_engine_tidy(rdmx_lambda_engine_t *engine,
                              rdmx__lambda_state_t *held)
{
    if (held == NULL)
        return;
    rdmx__lambda_state_tidy(held);
    rdmx__lambda_states_done(engine->states, held);
}

/* --- native calls -------------------------------------------------------- */

typedef struct {
    rdmx_lambda_output_t pub;
    rdmx__lambda_buf_t buf;
    int overflow;
    char error[256];
} native_out_t;

static rdmx_status_t out_append(rdmx_lambda_output_t *out, const void *data,
                                size_t length)
{
    native_out_t *o = out->priv;
    int rc;
    if (data == NULL && length > 0)
        return RDMX_ERR_INVALID;
    rc = rdmx__lambda_buf_append(&o->buf, data, length);
    if (rc == -1) {
        o->overflow = 1;
        return RDMX_ERR_TOO_BIG;
    }
    return rc == 0 ? RDMX_OK : RDMX_ERR_NO_MEMORY;
}

static void out_set_error(rdmx_lambda_output_t *out, const char *message)
{
    native_out_t *o = out->priv;
    snprintf(o->error, sizeof(o->error), "%s", message ? message : "");
}

rdmx_status_t rdmx_lambda_engine_native(rdmx_lambda_engine_t *engine,
                                        const char *name, const void *input,
                                        size_t length,
                                        rdmx_lambda_result_t *result)
{
    rdmx_lambda_engine_t *e = engine;
    rdmx_lambda_native_fn_t fn = NULL;
    void *arg = NULL;
    native_out_t o;
    rdmx_status_t st;
    size_t i;

    if (result == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL result");
    result_init(result);
    if (e == NULL || name == NULL || (input == NULL && length > 0)) {
        snprintf(result->message, sizeof(result->message),
                 "lambda: NULL engine, name or input");
        return rdmx__error(RDMX_ERR_INVALID, "%s", result->message);
    }
    pthread_mutex_lock(&e->lock);
    for (i = 0; i < e->nnatives; i++)
        if (strcmp(e->natives[i].name, name) == 0) {
            fn = e->natives[i].fn;
            arg = e->natives[i].arg;
            break;
        }
    e->stats.native_calls++;
    pthread_mutex_unlock(&e->lock);
    if (fn == NULL) {
        snprintf(result->message, sizeof(result->message),
                 "no native function \"%.64s\"", name);
        return finish(e, RDMX_ERR_NOT_FOUND, result, 0, -1, NULL);
    }

    memset(&o, 0, sizeof(o));
    o.pub.append = out_append;
    o.pub.set_error = out_set_error;
    o.pub.priv = &o;
    o.buf.max = e->max_output;
    st = fn(input != NULL ? input : "", length, &o.pub, arg);
    if (st == RDMX_OK && o.overflow)
        st = RDMX_ERR_TOO_BIG;
    if (st > 0) {
        snprintf(o.error, sizeof(o.error), "native \"%.64s\" returned %d",
                 name, (int)st);
        st = RDMX_ERR_INTERNAL;
    }
    if (st != RDMX_OK) {
        if (o.overflow)
            result->limit = RDMX_LAMBDA_LIMIT_OUTPUT;
        if (o.error[0] != '\0')
            snprintf(result->message, sizeof(result->message), "%s",
                     o.error);
        else if (o.overflow)
            snprintf(result->message, sizeof(result->message),
                     "native \"%.64s\": output budget of %zu bytes exceeded",
                     name, e->max_output);
        else
            snprintf(result->message, sizeof(result->message),
                     "native \"%.64s\": %s", name, rdmx_strerror(st));
        free(o.buf.data);
        return finish(e, st, result, 0, -1, NULL);
    }
    if (o.buf.data == NULL)
        o.buf.data = calloc(1, 1);
    if (o.buf.data == NULL) {
        snprintf(result->message, sizeof(result->message), "out of memory");
        return finish(e, RDMX_ERR_NO_MEMORY, result, 0, -1, NULL);
    }
    result->output = o.buf.data;
    result->output_len = o.buf.len;
    result->type = RDMX_LAMBDA_STRING;
    return finish(e, RDMX_OK, result, 0, -1, NULL);
}
