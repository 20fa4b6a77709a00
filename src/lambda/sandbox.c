/*
 * rdmx lambda — the sandbox state and one call in it: the budgeted
 * allocator, the instruction/deadline hook, the sandboxed libraries opened
 * once and frozen, the call's own environment with the globals of the
 * function contract (input, args, kv), and the conversion of the result.
 * A state serves many calls one after the other, maybe on different
 * threads: the allocator's user data, the record every budget is counted
 * in, is a call's only while that call owns the state (docs/LAMBDA.md,
 * "Sandbox states").
 *
 * Isolation between calls of one state: the state lives in an arena
 * (arena.c), and every call begins by copying back a saved image of it,
 * the pristine state or the pristine state with the call's function
 * loaded (image_begin): nothing an earlier call did is there.
 *
 * The contract within a call: the library tables a function sees are
 * empty proxies whose protected metatables read through to the real
 * tables and refuse writes; rawset refuses them; the string metatable is
 * protected the same way; the real tables are reachable from no Lua code.
 * A call's globals are a table (_ENV, _G) reading the frozen globals
 * through a protected metatable, made in the image; the registry's
 * globals point to it (load without an env).
 *
 * Budgets
 * - Memory: the state's allocator refuses to grow more than max_memory
 *   past what the state held when the call began (its image); Lua then
 *   collects and raises "not enough memory" (reported as the memory
 *   budget).
 * - Work ("instructions"): a count hook every hook_count VM instructions
 *   adds them up; library functions whose work is not VM instructions
 *   charge it (third_party/lua-5.4-safelib/, the wrappers below, 1 unit per
 *   64 bytes allocated). Past max_instructions the call stops.
 * - Time: the hook and every charge past clock_at compare the monotonic
 *   clock with the deadline (the caller's, or start + max_time).
 * - A stop cannot be caught for good: the stop error is raised again at the
 *   very next VM instruction of every thread (count hook of 1), coroutines
 *   can no longer be resumed, and the final status comes from r->stop, not
 *   from what the function did with the error.
 * - After the call, and while a state is closed: the hook stays on every
 *   instruction with the state marked closing, so Lua code met there stops
 *   at once (there is none: __gc is refused, Lua's own finalizers are C).
 */
#include "lambda/lambda_int.h"

#include "core/upper.h"
#include "util/time.h"

#include <lauxlib.h>
#include <lualib.h>
#include <openssl/rand.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Check the clock at least every this many charged units. */
#define CLOCK_EVERY 4096u

static void hook(lua_State *L, lua_Debug *ar);
static void env_own(lua_State *L, int idx);

static inline rdmx__lambda_run_t *run_of(lua_State *L)
{
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

int rdmx__lambda_buf_append(rdmx__lambda_buf_t *b, const void *p, size_t n)
{
    if (n > b->max - b->len)
        return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *d;
        while (cap < b->len + n + 1)
            cap *= 2;
        d = realloc(b->data, cap);
        if (d == NULL)
            return -2;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* --- budgets ------------------------------------------------------------ */

static int deadline_passed(rdmx__lambda_run_t *r)
{
    if (rdmx_now_ns() < r->deadline_ns)
        return 0;
    r->stop = r->deadline_is_callers ? RDMX_LAMBDA_LIMIT_DEADLINE
                                     : RDMX_LAMBDA_LIMIT_TIME;
    return 1;
}

/* Make every thread that runs next meet the stop at its next instruction:
 * the running one now, the others when they resume (they cannot, see
 * co_switch) or when their own hook comes. */
static void trap_current(rdmx__lambda_run_t *r)
{
    if (r->current != NULL)
        lua_sethook(r->current, hook, LUA_MASKCOUNT, 1);
}

static int raise_stop(lua_State *L, rdmx__lambda_run_t *r)
{
    lua_sethook(L, hook, LUA_MASKCOUNT, 1);
    if (!lua_checkstack(L, 1))
        lua_settop(L, 0); /* a C function being aborted: room for one */
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->stop_ref);
    return lua_error(L);
}

/* Instruction interval of the hook: 1000 while the state is small, fewer as
 * it grows, because one instruction can then cost more (comparing two long
 * strings, an emergency collection): the time between two looks at the
 * clock stays short. */
static int hook_interval(const rdmx__lambda_run_t *r)
{
    size_t per = ((size_t)1 << 30) / (r->mem ? r->mem : 1);
    if (per >= RDMX__LAMBDA_HOOK_EVERY)
        return RDMX__LAMBDA_HOOK_EVERY;
    return per < 32 ? 32 : (int)per;
}

/* Take @n as the interval, and note from which size of the state it
 * should be halved (hook_interval(r) <= n / 2 from there): the allocator
 * then compares instead of dividing. */
static void set_interval(rdmx__lambda_run_t *r, int n)
{
    r->hook_count = n;
    r->shorten_at =
        n / 2 >= 32 ? ((size_t)1 << 30) / (size_t)(n / 2 + 1) + 1 : SIZE_MAX;
}

/* The state grew enough that the hook's interval should be at most half
 * what it is: set the shorter one now rather than at the next hook, which
 * may be up to the old interval of long-string instructions away. The
 * instructions already run in this interval go uncounted (Lua restarts the
 * count); the growth that brought us here was charged many times more. */
static void shorten_hook(rdmx__lambda_run_t *r)
{
    set_interval(r, hook_interval(r));
    lua_sethook(r->current, hook, LUA_MASKCOUNT, r->hook_count);
}

static void hook(lua_State *L, lua_Debug *ar)
{
    rdmx__lambda_run_t *r = run_of(L);
    int n;
    (void)ar;
    r->current = L;
    if (!r->stop && !r->closing) {
        /* this thread's interval: a coroutine's may differ from the last
         * one set on another thread */
        r->units += (uint64_t)lua_gethookcount(L);
        if (r->units > r->max_units)
            r->stop = RDMX_LAMBDA_LIMIT_INSTRUCTIONS;
        else if (!deadline_passed(r)) {
            n = hook_interval(r);
            if (n != r->hook_count)
                set_interval(r, n);
            if (n != lua_gethookcount(L))
                lua_sethook(L, hook, LUA_MASKCOUNT, n);
            return;
        }
    }
    raise_stop(L, r);
}

void rdmx__lambda_charge(lua_State *L, uint64_t units)
{
    rdmx__lambda_run_t *r = run_of(L);
    if (!r->armed)
        return;
    if (!r->stop && !r->closing) {
        r->units += units;
        if (r->units > r->max_units)
            r->stop = RDMX_LAMBDA_LIMIT_INSTRUCTIONS;
        else if (r->units >= r->clock_at) {
            r->clock_at = r->units + CLOCK_EVERY;
            if (!deadline_passed(r))
                return;
        } else
            return;
    }
    raise_stop(L, r);
}

/* The allocator enforces max_memory and charges allocation work. It never
 * raises (it cannot): a stop it detects is delivered by the hook at the
 * running thread's next instruction. */
static void *lalloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    rdmx__lambda_run_t *r = ud;
    size_t old = ptr != NULL ? osize : 0;
    void *p;

    if (nsize == 0) {
        if (ptr != NULL) {
            r->mem -= osize;
            rdmx__arena_realloc(r->arena, ptr, osize, 0);
        }
        return NULL;
    }
    if (nsize > old) {
        size_t grow = nsize - old;
        int charge = r->armed && !r->closing && !r->stop;
        if (grow > r->mem_limit - r->mem) {
            r->mem_refused = 1;
            if (charge) {
                /* Lua collects everything before it gives up: charge that
                 * work and look at the clock, it can be long. */
                r->units += r->mem / 64;
                if (r->units > r->max_units)
                    r->stop = RDMX_LAMBDA_LIMIT_INSTRUCTIONS;
                else
                    deadline_passed(r);
                if (r->stop)
                    trap_current(r);
            }
            return NULL;
        }
        if (charge) {
            r->units += grow / 64;
            if (r->units > r->max_units)
                r->stop = RDMX_LAMBDA_LIMIT_INSTRUCTIONS;
            else if (r->units >= r->clock_at) {
                r->clock_at = r->units + CLOCK_EVERY;
                deadline_passed(r);
            }
            if (r->stop)
                trap_current(r);
        }
    }
    p = rdmx__arena_realloc(r->arena, ptr, osize, nsize);
    if (p == NULL) {
        /* the arena is full (a shrink never fails): the budget, past what
         * its size classes and unmerged blocks cost (engine.c,
         * arena_size) */
        r->mem_refused = 1;
        return NULL;
    }
    r->mem = r->mem - old + nsize;
    if (r->mem > r->mem_peak)
        r->mem_peak = r->mem;
    if (r->mem >= r->shorten_at && r->armed && !r->closing && !r->stop &&
        r->current != NULL)
        shorten_hook(r);
    return p;
}

/* --- the sandboxed library ------------------------------------------------ */

/* print: into the output, as Lua's print would write to stdout. */
static int l_print(lua_State *L)
{
    rdmx__lambda_run_t *r = run_of(L);
    int n = lua_gettop(L), i, rc = 0;
    size_t total = 0;
    for (i = 1; i <= n && rc == 0; i++) {
        size_t l;
        const char *s = luaL_tolstring(L, i, &l);
        if (i > 1)
            rc = rdmx__lambda_buf_append(&r->out, "\t", 1);
        if (rc == 0)
            rc = rdmx__lambda_buf_append(&r->out, s, l);
        total += l;
        lua_pop(L, 1);
    }
    if (rc == 0)
        rc = rdmx__lambda_buf_append(&r->out, "\n", 1);
    if (rc == -2)
        return luaL_error(L, "print: out of memory");
    if (rc == -1) {
        r->stop = RDMX_LAMBDA_LIMIT_OUTPUT;
        return raise_stop(L, r);
    }
    rdmx__lambda_charge(L, 1 + total / 64);
    return 0;
}

/* setmetatable: no __gc; a call's globals become a plain table first
 * (env_own). Lua runs finalizers with hooks off (lgc.c,
 * GCTM), so a finalizer would escape every budget. An object is marked for
 * finalization only here, by a raw look at mt.__gc: refusing it is exact. */
static int l_setmetatable(lua_State *L)
{
    if (lua_type(L, 2) == LUA_TTABLE &&
        (lua_pushliteral(L, "__gc"), lua_rawget(L, 2)) != LUA_TNIL)
        return luaL_error(L, "__gc metamethods are not allowed in the "
                             "sandbox");
    lua_settop(L, 2);
    env_own(L, 1); /* a metatable on the globals: make them a plain table */
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, 2, 1);
    return 1;
}

/* load: text chunks only, whatever mode the caller asks for. */
/* A reader function given to load, wrapped: each piece it returns is
 * charged as parsing, as a string chunk is, so that a reader feeding the
 * parser for ever meets the budgets (the parser itself runs no VM
 * instruction the hook would count). */
static int charged_reader(lua_State *L)
{
    size_t l = 0;

    lua_pushvalue(L, lua_upvalueindex(1));
    lua_call(L, 0, 1);
    if (lua_type(L, -1) == LUA_TSTRING)
        lua_tolstring(L, -1, &l);
    rdmx__lambda_charge(L, 1 + l / 4);
    return 1;
}

static int l_load(lua_State *L)
{
    int n = lua_gettop(L);
    size_t l = 0;
    if (lua_type(L, 1) == LUA_TSTRING)
        lua_tolstring(L, 1, &l);
    else if (lua_type(L, 1) == LUA_TFUNCTION) {
        lua_pushvalue(L, 1);
        lua_pushcclosure(L, charged_reader, 1);
        lua_replace(L, 1);
    }
    rdmx__lambda_charge(L, 1 + l / 4); /* parsing */
    if (n > 4)
        n = 4;
    if (n < 3)
        n = 3;
    lua_settop(L, n); /* keeps "env given as nil" apart from "no env" */
    lua_pushliteral(L, "t");
    lua_replace(L, 3);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
}

/* collectgarbage: "count", "isrunning"; "collect" and "step" are charged
 * as the collection they cause. */
static int l_collectgarbage(lua_State *L)
{
    rdmx__lambda_run_t *r = run_of(L);
    const char *opt = luaL_optstring(L, 1, "collect");
    if (strcmp(opt, "count") == 0) {
        /* the sandbox's own size and the call's bytes: nothing that tells
         * what other calls left in the state */
        size_t b =
            r->mem_shown + (r->mem > r->mem_base ? r->mem - r->mem_base : 0);
        lua_pushnumber(L, (lua_Number)b / 1024);
        return 1;
    }
    if (strcmp(opt, "isrunning") == 0) {
        lua_pushboolean(L, lua_gc(L, LUA_GCISRUNNING));
        return 1;
    }
    if (strcmp(opt, "collect") == 0 || strcmp(opt, "step") == 0) {
        rdmx__lambda_charge(L, 1 + r->mem / 64);
        if (opt[0] == 'c') {
            lua_gc(L, LUA_GCCOLLECT);
            lua_pushinteger(L, 0);
        } else
            lua_pushboolean(L, lua_gc(L, LUA_GCSTEP, 0));
        return 1;
    }
    return luaL_error(L, "collectgarbage(\"%s\") is not available in the "
                         "sandbox",
                      opt);
}

/* Wrappers that charge a C function's work before calling it. */
enum {
    COST_STRLEN = 1, /* arg 1's length / 64 (tonumber) */
    COST_RANGE = 2,  /* string.byte / utf8.codepoint: i..j */
    COST_FORMAT = 3, /* string.pack/packsize/unpack: format length / 4 */
    COST_ARGS = 4,   /* string.char, utf8.char, string.format: arguments */
    COST_DECODE = 5, /* utf8.len / offset: arg 1's length / 4 (decoding) */
    COST_PCALL = 7,  /* pcall / xpcall: a setjmp */
};

/* continuation of a wrapped call: keeps pcall etc. yieldable */
static int finish_call(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    return lua_gettop(L);
}

static size_t posrel(lua_Integer pos, size_t len)
{
    if (pos > 0)
        return (size_t)pos;
    if (pos == 0 || pos < -(lua_Integer)len)
        return 1;
    return len + (size_t)pos + 1;
}

static int l_charged(lua_State *L)
{
    int kind = (int)lua_tointeger(L, lua_upvalueindex(2));
    uint64_t cost = 1;
    size_t l = 0;
    if (lua_type(L, 1) == LUA_TSTRING)
        lua_tolstring(L, 1, &l);
    switch (kind) {
    case COST_STRLEN:
        cost += l / 64;
        break;
    case COST_RANGE: {
        lua_Integer i = lua_isinteger(L, 2) ? lua_tointeger(L, 2) : 1;
        lua_Integer j = lua_isinteger(L, 3) ? lua_tointeger(L, 3) : i;
        size_t pi = posrel(i, l), pj;
        if (j > (lua_Integer)l)
            pj = l;
        else if (j >= 0)
            pj = (size_t)j;
        else if (j < -(lua_Integer)l)
            pj = 0;
        else
            pj = l + (size_t)j + 1;
        if (pj >= pi)
            cost += pj - pi + 1;
        break;
    }
    case COST_FORMAT:
    case COST_DECODE:
        cost += l / 4;
        break;
    case COST_PCALL:
        cost += 16;
        break;
    default:
        cost += (uint64_t)lua_gettop(L) + l / 64;
        break;
    }
    rdmx__lambda_charge(L, cost);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_callk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, finish_call);
    return lua_gettop(L);
}

/* error: luaB_error plus a charge (raising and catching an error costs
 * about a microsecond, some 200 instructions); not a wrapper, so that
 * levels keep their meaning. */
static int l_error(lua_State *L)
{
    int level = (int)luaL_optinteger(L, 2, 1);
    rdmx__lambda_charge(L, 200);
    lua_settop(L, 1);
    if (lua_type(L, 1) == LUA_TSTRING && level > 0) {
        luaL_where(L, level);
        lua_pushvalue(L, 1);
        lua_concat(L, 2);
    }
    return lua_error(L);
}

/* xpcall's message handler goes through this shim. When the stop is
 * raised from the hook, Lua calls the handler from inside the hook, where
 * hooks are off (ldo.c, luaD_hook: allowhook is restored only on a normal
 * return); a looping handler would then never be stopped. Once the call
 * is stopped the user's handler is not called at all. */
static int xpcall_handler(lua_State *L)
{
    rdmx__lambda_run_t *r = run_of(L);
    if (r->stop || r->closing)
        return 1; /* the message, unchanged */
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int l_xpcall(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    rdmx__lambda_charge(L, 16);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, xpcall_handler, 1);
    lua_replace(L, 2);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_callk(L, n, LUA_MULTRET, 0, finish_call);
    return lua_gettop(L);
}

static void wrap_field(lua_State *L, int t, const char *name, int kind)
{
    t = lua_absindex(L, t);
    lua_getfield(L, t, name);
    lua_pushinteger(L, kind);
    lua_pushcclosure(L, l_charged, 2);
    lua_setfield(L, t, name);
}

/* Coroutines: keep r->current on the running thread, refuse to resume
 * once the call is stopped, and deliver a stop that happened inside. */
static int co_switch(lua_State *L, lua_State *co)
{
    rdmx__lambda_run_t *r = run_of(L);
    int st;
    if (r->stop || r->closing)
        return raise_stop(L, r);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    /* a coroutine made while the state was small keeps its long interval
     * until its own hook: shorten it as the running thread's was */
    if (lua_gethookcount(co) > r->hook_count)
        lua_sethook(co, hook, LUA_MASKCOUNT, r->hook_count);
    r->current = co;
    st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    r->current = L;
    if (r->stop || r->closing)
        return raise_stop(L, r);
    if (st != LUA_OK)
        return lua_error(L);
    return lua_gettop(L);
}

static int co_resume(lua_State *L)
{
    lua_State *co = lua_tothread(L, 1);
    luaL_argexpected(L, co != NULL, 1, "coroutine");
    return co_switch(L, co);
}

static int co_wrapped(lua_State *L)
{
    return co_switch(L, lua_tothread(L, lua_upvalueindex(2)));
}

static int co_wrap(lua_State *L)
{
    lua_State *co;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1); /* the original wrap: a closure */
    if (lua_getupvalue(L, -1, 1) == NULL || lua_tothread(L, -1) == NULL)
        return luaL_error(L, "coroutine.wrap: unexpected closure");
    co = lua_tothread(L, -1);
    (void)co;
    lua_pushcclosure(L, co_wrapped, 2); /* (original closure, thread) */
    return 1;
}

static void patch_coroutine(lua_State *L, int t)
{
    static const char *names[] = {"resume", "close"};
    unsigned i;
    t = lua_absindex(L, t);
    for (i = 0; i < 2; i++) {
        lua_getfield(L, t, names[i]);
        lua_pushcclosure(L, co_resume, 1);
        lua_setfield(L, t, names[i]);
    }
    lua_getfield(L, t, "wrap");
    lua_pushcclosure(L, co_wrap, 1);
    lua_setfield(L, t, "wrap");
}

/* kv.*: the host's environment. */
static rdmx__lambda_run_t *kv_run(lua_State *L, uint64_t units)
{
    rdmx__lambda_charge(L, units);
    rdmx__error(RDMX_OK, "%s", ""); /* a callback may set a detail */
    return run_of(L);
}

static int kv_fail(lua_State *L, const char *what, rdmx_status_t st)
{
    const char *d = rdmx_error_detail();
    return luaL_error(L, "kv.%s: %s (%s)", what,
                      d[0] != '\0' ? d : rdmx_strerror(st),
                      rdmx_status_name(st));
}

static int kv_get(lua_State *L)
{
    size_t klen, vlen = 0;
    const char *k = luaL_checklstring(L, 1, &klen);
    rdmx__lambda_run_t *r = kv_run(L, 1 + klen / 64);
    const rdmx_lambda_env_t *env = r->call->env;
    char small[4096];
    rdmx_status_t st;
    int tries;

    st = env->kv_get(env->ctx, k, klen, small, sizeof(small), &vlen);
    if (st == RDMX_OK && vlen <= sizeof(small)) {
        lua_pushlstring(L, small, vlen);
        rdmx__lambda_charge(L, vlen / 64);
        return 1;
    }
    for (tries = 0; tries < 4 && (st == RDMX_ERR_TOO_BIG || st == RDMX_OK);
         tries++) {
        luaL_Buffer b;
        size_t need = vlen, got = 0;
        int top = lua_gettop(L);
        char *p = luaL_buffinitsize(L, &b, need); /* counts as memory */
        st = env->kv_get(env->ctx, k, klen, p, need, &got);
        if (st == RDMX_OK && got <= need) {
            luaL_pushresultsize(&b, got);
            rdmx__lambda_charge(L, got / 64);
            return 1;
        }
        lua_settop(L, top);
        vlen = got;
        if (st == RDMX_OK)
            st = RDMX_ERR_TOO_BIG; /* grew meanwhile: again */
    }
    if (st == RDMX_ERR_NOT_FOUND) {
        lua_pushnil(L);
        return 1;
    }
    return kv_fail(L, "get", st);
}

static int kv_put(lua_State *L)
{
    size_t klen, vlen;
    const char *k = luaL_checklstring(L, 1, &klen);
    const char *v = luaL_checklstring(L, 2, &vlen);
    lua_Integer ttl = luaL_optinteger(L, 3, 0);
    rdmx__lambda_run_t *r;
    const rdmx_lambda_env_t *env;
    rdmx_status_t st;
    luaL_argcheck(L, ttl >= 0, 3, "ttl_ms must be >= 0");
    r = kv_run(L, 1 + (klen + vlen) / 64);
    env = r->call->env;
    st = env->kv_put(env->ctx, k, klen, v, vlen, (uint64_t)ttl);
    if (st != RDMX_OK)
        return kv_fail(L, "put", st);
    lua_pushboolean(L, 1);
    return 1;
}

static int kv_bool(lua_State *L, int del)
{
    size_t klen;
    const char *k = luaL_checklstring(L, 1, &klen);
    rdmx__lambda_run_t *r = kv_run(L, 1 + klen / 64);
    const rdmx_lambda_env_t *env = r->call->env;
    rdmx_status_t st = del ? env->kv_delete(env->ctx, k, klen)
                           : env->kv_exists(env->ctx, k, klen);
    if (st != RDMX_OK && st != RDMX_ERR_NOT_FOUND)
        return kv_fail(L, del ? "delete" : "exists", st);
    lua_pushboolean(L, st == RDMX_OK);
    return 1;
}

static int kv_delete(lua_State *L)
{
    return kv_bool(L, 1);
}

static int kv_exists(lua_State *L)
{
    return kv_bool(L, 0);
}

static void open_kv(lua_State *L, const rdmx_lambda_env_t *env)
{
    lua_createtable(L, 0, 4);
    if (env->kv_get != NULL) {
        lua_pushcfunction(L, kv_get);
        lua_setfield(L, -2, "get");
    }
    if (env->kv_put != NULL) {
        lua_pushcfunction(L, kv_put);
        lua_setfield(L, -2, "put");
    }
    if (env->kv_delete != NULL) {
        lua_pushcfunction(L, kv_delete);
        lua_setfield(L, -2, "delete");
    }
    if (env->kv_exists != NULL) {
        lua_pushcfunction(L, kv_exists);
        lua_setfield(L, -2, "exists");
    }
    lua_setglobal(L, "kv");
}

/* math.random and math.randomseed (upvalue 1): the first use in a call
 * seeds the generator from the system's random bytes, so that a call's
 * numbers tell nothing of the image (which holds the generator as it was
 * when saved), of other calls or of the clock. */
static int l_random(lua_State *L)
{
    rdmx__lambda_run_t *r = run_of(L);

    if (!r->seeded && r->state != NULL) {
        uint64_t seed[2] = {0, 0};
        r->seeded = 1;
        if (RAND_bytes((unsigned char *)seed, (int)sizeof(seed)) != 1) {
            seed[0] = rdmx_now_ns();
            seed[1] = (uint64_t)(uintptr_t)r->state ^ r->state->calls;
        }
        lua_rawgeti(L, LUA_REGISTRYINDEX, r->state->seed_ref);
        lua_pushinteger(L, (lua_Integer)seed[0]);
        lua_pushinteger(L, (lua_Integer)seed[1]);
        lua_call(L, 2, 0);
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* --- frozen tables ------------------------------------------------------- */

/* The keys (their addresses) that mark a frozen table's metatable and the
 * environments' metatable. */
static const char frozen_tag, env_tag;

/* 1 if the metatable of the value at @p idx holds @p tag. */
static int mt_has(lua_State *L, int idx, const char *tag)
{
    int has;
    if (!lua_getmetatable(L, idx))
        return 0;
    has = lua_rawgetp(L, -1, tag) != LUA_TNIL;
    lua_pop(L, 2);
    return has;
}

/* Make the call's environment at @p idx a plain table: a copy of every
 * frozen global it does not hold yet, and no metatable. Done when the call
 * hides a frozen global (assigns it nil) or sets a metatable on its
 * globals, so that both behave exactly as on any table. */
static void env_own(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    if (!mt_has(L, idx, &env_tag))
        return;
    lua_getmetatable(L, idx);
    lua_pushliteral(L, "__index");
    lua_rawget(L, -2); /* mt, the frozen globals */
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pushvalue(L, -2);
        if (lua_rawget(L, idx) == LUA_TNIL) {
            lua_pop(L, 1);
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, idx);
        } else
            lua_pop(L, 2);
    }
    lua_pop(L, 2);
    lua_pushnil(L);
    lua_setmetatable(L, idx);
}

/* __newindex of a call's environment: a new global. Hiding a frozen one
 * (assigning it nil) first makes the environment its own (env_own). */
static int env_newindex(lua_State *L)
{
    lua_settop(L, 3);
    if (lua_isnil(L, 3)) {
        lua_pushvalue(L, 2);
        if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
            env_own(L, 1);
        lua_pop(L, 1);
    }
    lua_rawset(L, 1);
    return 0;
}

/* __newindex of a frozen proxy. */
static int frozen_newindex(lua_State *L)
{
    return luaL_error(L, "attempt to modify a read-only table");
}

/* The iterator __pairs gives for a frozen proxy: next over the real table
 * (upvalue 1), whatever table it is passed; the real table itself never
 * reaches Lua code. */
static int frozen_next(lua_State *L)
{
    lua_settop(L, 2);
    if (lua_next(L, lua_upvalueindex(1)))
        return 2;
    lua_pushnil(L);
    return 1;
}

/* __pairs of a frozen proxy or a call's environment: (the closure's own
 * next function, its upvalue: frozen_next or env_next; the table; nil). */
static int upvalue_pairs(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 1);
    lua_pushnil(L);
    return 3;
}

/* rawset, refusing frozen proxies (luaB_rawset otherwise); hiding a frozen
 * global makes the environment its own first. */
static int l_rawset(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checkany(L, 2);
    luaL_checkany(L, 3);
    if (mt_has(L, 1, &frozen_tag))
        return luaL_error(L, "attempt to modify a read-only table");
    if (lua_isnil(L, 3))
        env_own(L, 1);
    lua_settop(L, 3);
    lua_rawset(L, 1);
    return 1;
}

/* getmetatable: nil for a frozen proxy and a call's environment, whose
 * metatables are the sandbox's (luaB_getmetatable, upvalue 1, otherwise). */
static int l_getmetatable(lua_State *L)
{
    luaL_checkany(L, 1);
    if (mt_has(L, 1, &frozen_tag) || mt_has(L, 1, &env_tag)) {
        lua_pushnil(L);
        return 1;
    }
    lua_settop(L, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, 1, 1);
    return 1;
}

/* Replace the table at the top of the stack with its frozen proxy: an empty
 * table whose protected metatable reads the real one (__index), refuses
 * writes (__newindex) and lists its fields (__pairs). */
static void freeze(lua_State *L)
{
    lua_newtable(L);          /* real, proxy */
    lua_createtable(L, 0, 6); /* real, proxy, mt */
    lua_pushvalue(L, -3);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, frozen_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushvalue(L, -3);
    lua_pushcclosure(L, frozen_next, 1);
    lua_pushcclosure(L, upvalue_pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pushboolean(L, 1);
    lua_rawsetp(L, -2, &frozen_tag);
    lua_setmetatable(L, -2); /* real, proxy */
    lua_remove(L, -2);
}

/* The iterator __pairs gives for a call's environment (argument 1): its
 * own keys, then the frozen globals (upvalue 1) it does not hide. A key
 * in neither is one of its own removed during the traversal. */
static int env_next(lua_State *L)
{
    int own = 1;
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 2);
    if (!lua_isnil(L, 2)) {
        lua_pushvalue(L, 2);
        if (lua_rawget(L, 1) == LUA_TNIL) {
            lua_pushvalue(L, 2);
            own = lua_rawget(L, lua_upvalueindex(1)) == LUA_TNIL;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    if (own) {
        lua_pushvalue(L, 2);
        if (lua_next(L, 1))
            return 2;
        lua_pushnil(L); /* the frozen globals from the start */
    } else
        lua_pushvalue(L, 2);
    while (lua_next(L, lua_upvalueindex(1))) {
        lua_pushvalue(L, -2);
        if (lua_rawget(L, 1) == LUA_TNIL) {
            lua_pop(L, 1);
            return 2;
        }
        lua_pop(L, 2); /* hidden by the call's own: next */
    }
    lua_pushnil(L);
    return 1;
}

/* Open a library function, leave its table on the stack. */
static void open_lib(lua_State *L, lua_CFunction open)
{
    lua_pushcfunction(L, open);
    lua_call(L, 0, 1);
}

static void set_nil(lua_State *L, int t, const char *name)
{
    t = lua_absindex(L, t);
    lua_pushnil(L);
    lua_setfield(L, t, name);
}

/* The names every environment holds, interned once per state (the state's
 * name_ref, in this order). */
static const char *const env_names[RDMX__LAMBDA_ENV_NAMES] = {
    "_G", "input", "args", "KEYS", "ARGV"};
enum { NAME_G, NAME_INPUT, NAME_ARGS, NAME_KEYS, NAME_ARGV };

/* Open the sandboxed libraries into the globals, then freeze what calls
 * share (see the top of the file); fills @p s's references. */
static void open_sandbox(lua_State *L, rdmx__lambda_state_t *s)
{
    static const char *os_keep[] = {"time", "clock", "date", "difftime"};
    static const char *libs[] = {"string", "table",     "math",
                                 "utf8",   "coroutine", "os"};
    unsigned i;
    int g;

    /* base, into the globals */
    open_lib(L, luaopen_base);
    g = lua_gettop(L);
    set_nil(L, g, "dofile");
    set_nil(L, g, "loadfile");
    set_nil(L, g, "warn");
    lua_pushcfunction(L, l_print);
    lua_setfield(L, g, "print");
    lua_pushcfunction(L, l_collectgarbage);
    lua_setfield(L, g, "collectgarbage");
    lua_getfield(L, g, "setmetatable");
    lua_pushcclosure(L, l_setmetatable, 1);
    lua_setfield(L, g, "setmetatable");
    lua_getfield(L, g, "load");
    lua_pushcclosure(L, l_load, 1);
    lua_setfield(L, g, "load");
    wrap_field(L, g, "tonumber", COST_STRLEN);
    lua_pushcfunction(L, l_error);
    lua_setfield(L, g, "error");
    wrap_field(L, g, "pcall", COST_PCALL);
    lua_getfield(L, g, "xpcall");
    lua_pushcclosure(L, l_xpcall, 1);
    lua_setfield(L, g, "xpcall");
    lua_pushcfunction(L, l_rawset);
    lua_setfield(L, g, "rawset");
    lua_getfield(L, g, "getmetatable");
    lua_pushcclosure(L, l_getmetatable, 1);
    lua_setfield(L, g, "getmetatable");

    /* string: no dump; charged matching, rep and scans */
    open_lib(L, luaopen_string);
    set_nil(L, -1, "dump");
    rdmx__lambda_patch_string(L, -1);
    wrap_field(L, -1, "byte", COST_RANGE);
    wrap_field(L, -1, "char", COST_ARGS);
    wrap_field(L, -1, "format", COST_ARGS);
    wrap_field(L, -1, "pack", COST_FORMAT);
    wrap_field(L, -1, "packsize", COST_FORMAT);
    wrap_field(L, -1, "unpack", COST_FORMAT);
    lua_setfield(L, g, "string");

    /* table: the charged copy */
    open_lib(L, rdmx__lambda_open_table);
    lua_setfield(L, g, "table");

    open_lib(L, luaopen_math);
    lua_setfield(L, g, "math");

    open_lib(L, luaopen_utf8);
    wrap_field(L, -1, "len", COST_DECODE);
    wrap_field(L, -1, "offset", COST_DECODE);
    wrap_field(L, -1, "codepoint", COST_RANGE);
    wrap_field(L, -1, "char", COST_ARGS);
    lua_setfield(L, g, "utf8");

    open_lib(L, luaopen_coroutine);
    patch_coroutine(L, -1);
    lua_setfield(L, g, "coroutine");

    /* os: only the clock and calendar functions */
    open_lib(L, luaopen_os);
    lua_createtable(L, 0, 4);
    for (i = 0; i < sizeof(os_keep) / sizeof(os_keep[0]); i++) {
        lua_getfield(L, -2, os_keep[i]);
        lua_setfield(L, -2, os_keep[i]);
    }
    lua_setfield(L, g, "os");
    lua_pop(L, 1); /* the full os table */

    /* math.randomseed, to seed each call's generator at its first use
     * (l_random) */
    lua_getfield(L, g, "math");
    lua_getfield(L, -1, "randomseed");
    s->seed_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getfield(L, -1, "random");
    lua_pushcclosure(L, l_random, 1);
    lua_setfield(L, -2, "random");
    lua_getfield(L, -1, "randomseed");
    lua_pushcclosure(L, l_random, 1);
    lua_setfield(L, -2, "randomseed");
    lua_pop(L, 1);

    /* freeze: every library behind a proxy; the string metatable protected,
     * showing a frozen view whose __index is the string proxy */
    for (i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
        lua_getfield(L, g, libs[i]);
        freeze(L);
        lua_setfield(L, g, libs[i]);
    }
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1); /* "", the string metatable */
    lua_createtable(L, 0, 1);
    lua_getfield(L, g, "string");
    lua_setfield(L, -2, "__index");
    freeze(L);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 2);

    /* the globals: frozen too (no Lua code reaches them but through the
     * environments' protected metatable); each call has its own _G */
    set_nil(L, g, "_G");
    lua_createtable(L, 0, 5); /* the environments' metatable */
    lua_pushvalue(L, g);
    lua_setfield(L, -2, "__index");
    lua_pushvalue(L, g);
    lua_pushcclosure(L, env_newindex, 1);
    lua_setfield(L, -2, "__newindex");
    lua_pushboolean(L, 1);
    lua_rawsetp(L, -2, &env_tag);
    lua_pushvalue(L, g);
    lua_pushcclosure(L, env_next, 1);
    lua_pushcclosure(L, upvalue_pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    s->env_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pop(L, 1);         /* g: the env metatable's upvalues hold it */
    lua_pushboolean(L, 0); /* a function image's function (fn_find) */
    s->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    for (i = 0; i < RDMX__LAMBDA_ENV_NAMES; i++) {
        lua_pushstring(L, env_names[i]);
        s->name_ref[i] = luaL_ref(L, LUA_REGISTRYINDEX);
    }
}

static const char *stop_message(rdmx__lambda_run_t *r, int limit, char *buf,
                                size_t cap)
{
    switch (limit) {
    case RDMX_LAMBDA_LIMIT_INSTRUCTIONS:
        snprintf(buf, cap, "instruction budget of %" PRIu64 " exceeded",
                 r->max_units);
        break;
    case RDMX_LAMBDA_LIMIT_MEMORY:
        snprintf(buf, cap, "memory budget of %zu bytes exceeded",
                 r->max_memory);
        break;
    case RDMX_LAMBDA_LIMIT_TIME:
        snprintf(buf, cap, "time budget of %" PRIu64 " ms exceeded",
                 r->max_time_ns / 1000000);
        break;
    case RDMX_LAMBDA_LIMIT_DEADLINE:
        snprintf(buf, cap, "deadline passed");
        break;
    case RDMX_LAMBDA_LIMIT_OUTPUT:
        snprintf(buf, cap, "output budget of %zu bytes exceeded",
                 r->max_output);
        break;
    default:
        snprintf(buf, cap, "lambda stopped");
        break;
    }
    return buf;
}

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud)
{
    rdmx__lambda_run_t *r = ud;
    (void)L;
    if (r->dump_len + sz > r->dump_cap) {
        size_t cap = r->dump_cap ? r->dump_cap * 2 : 1024;
        unsigned char *d;
        while (cap < r->dump_len + sz)
            cap *= 2;
        d = realloc(r->dump, cap);
        if (d == NULL) {
            r->dump_failed = 1;
            return 1;
        }
        r->dump = d;
        r->dump_cap = cap;
    }
    memcpy(r->dump + r->dump_len, p, sz);
    r->dump_len += sz;
    return 0;
}

static void out_append(lua_State *L, rdmx__lambda_run_t *r, const char *s,
                       size_t l)
{
    int rc = rdmx__lambda_buf_append(&r->out, s, l);
    if (rc == -2)
        luaL_error(L, "out of memory for the output");
    if (rc == -1) {
        r->stop = RDMX_LAMBDA_LIMIT_OUTPUT;
        raise_stop(L, r);
    }
}

/* --- a call's function and globals -------------------------------------- */

/* Push the function a function image holds and return 1, or push nothing
 * and return 0 (the pristine image). Allocates nothing. */
static int fn_find(lua_State *L, const rdmx__lambda_state_t *s)
{
    if (lua_rawgeti(L, LUA_REGISTRYINDEX, s->fn_ref) == LUA_TFUNCTION)
        return 1;
    lua_pop(L, 1);
    return 0;
}

/* Push the name @p n of env_names. */
static void env_name(lua_State *L, const rdmx__lambda_state_t *s, int n)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->name_ref[n]);
}

/* Push a call's globals: a new table over the frozen ones (their
 * protected metatable), with room for the contract's names without
 * growing, and those names set raw (no __newindex): _G, input (empty),
 * args, KEYS, ARGV (empty tables). */
static void env_new(lua_State *L, const rdmx__lambda_state_t *state)
{
    lua_createtable(L, 0, 8);
    lua_rawgeti(L, LUA_REGISTRYINDEX, state->env_mt_ref);
    lua_setmetatable(L, -2);
    env_name(L, state, NAME_G);
    lua_pushvalue(L, -2);
    lua_rawset(L, -3);
    env_name(L, state, NAME_INPUT);
    lua_pushliteral(L, "");
    lua_rawset(L, -3);
    env_name(L, state, NAME_ARGS);
    lua_newtable(L);
    lua_rawset(L, -3);
    env_name(L, state, NAME_KEYS);
    lua_newtable(L);
    lua_rawset(L, -3);
    env_name(L, state, NAME_ARGV);
    lua_newtable(L);
    lua_rawset(L, -3);
}

/* Append args[@p from, @p to) to the table named @p n in the globals at
 * stack index 1. */
static void env_args(lua_State *L, const rdmx__lambda_state_t *state, int n,
                     const rdmx_lambda_call_params_t *c, unsigned from,
                     unsigned to)
{
    unsigned i;

    if (from == to)
        return;
    env_name(L, state, n);
    lua_rawget(L, 1);
    for (i = from; i < to; i++) {
        lua_pushlstring(L, c->args[i].data != NULL ? c->args[i].data : "",
                        c->args[i].len);
        lua_rawseti(L, -2, (lua_Integer)(i - from) + 1);
    }
    lua_pop(L, 1);
}

/* Everything that touches the state for a call runs here, under lua_pcall:
 * the call's environment, its function bound to it, the run, the result. */
static int pmain(lua_State *L)
{
    rdmx__lambda_run_t *r = lua_touserdata(L, 1);
    rdmx__lambda_state_t *state = r->state;
    const rdmx_lambda_call_params_t *c = r->call;
    char msg[128];
    int base, nres, st;
    unsigned nkeys = c->nkeys < c->nargs ? c->nkeys : c->nargs;

    /* 1: the call's globals, 2: the function of a function image, or
     * nil. The image holds the globals made already, the registry's
     * globals pointing to them (lua_setglobal below, load without an env),
     * and the function's _ENV bound to them (it was loaded so). */
    lua_settop(L, 2);
    lua_rawgeti(L, LUA_REGISTRYINDEX, state->env_ref);
    lua_replace(L, 1);
    if (c->input_len > 0) {
        env_name(L, state, NAME_INPUT);
        lua_pushlstring(L, c->input, c->input_len);
        lua_rawset(L, 1);
    }
    /* KEYS and ARGV: the same strings split at nkeys (Redis scripts' names) */
    env_args(L, state, NAME_ARGS, c, 0, c->nargs);
    env_args(L, state, NAME_KEYS, c, 0, nkeys);
    env_args(L, state, NAME_ARGV, c, nkeys, c->nargs);
    if (c->env != NULL)
        open_kv(L, c->env);

    /* the function, with _ENV (its one upvalue) the call's globals */
    if (lua_type(L, 2) == LUA_TFUNCTION) {
        lua_pushvalue(L, 2);
    } else {
        st = luaL_loadbufferx(L, r->code, r->code_len, "=lambda",
                              r->binary ? "b" : "t");
        if (st != LUA_OK) {
            r->compile_error = 1;
            return lua_error(L);
        }
        if (r->want_dump)
            lua_dump(L, dump_writer, r, 0);
    }

    /* arm the budgets: the function's work starts here */
    r->units = 0;
    r->clock_at = CLOCK_EVERY;
    r->armed = 1;
    r->current = L;
    set_interval(r, hook_interval(r));
    if (deadline_passed(r))
        return raise_stop(L, r);
    lua_sethook(L, hook, LUA_MASKCOUNT, r->hook_count);

    base = lua_gettop(L) - 1;
    lua_call(L, 0, LUA_MULTRET);
    nres = lua_gettop(L) - base;
    if (nres > 1)
        return luaL_error(L, "lambda returned %d values; return at most one",
                          nres);
    if (nres == 0 || lua_isnil(L, -1)) {
        r->type = RDMX_LAMBDA_NIL;
        return 0;
    }
    switch (lua_type(L, -1)) {
    case LUA_TSTRING: {
        size_t l;
        const char *s = lua_tolstring(L, -1, &l);
        r->type = RDMX_LAMBDA_STRING;
        out_append(L, r, s, l);
        break;
    }
    case LUA_TBOOLEAN:
        r->type = RDMX_LAMBDA_BOOLEAN;
        if (lua_toboolean(L, -1))
            out_append(L, r, "true", 4);
        else
            out_append(L, r, "false", 5);
        break;
    case LUA_TNUMBER: {
        size_t l;
        const char *s;
        r->type = lua_isinteger(L, -1) ? RDMX_LAMBDA_INTEGER
                                       : RDMX_LAMBDA_FLOAT;
        lua_pushvalue(L, -1);
        s = lua_tolstring(L, -1, &l); /* Lua's own formatting */
        out_append(L, r, s, l);
        break;
    }
    default:
        snprintf(msg, sizeof(msg),
                 "lambda returned a %s; return a string, number, boolean or "
                 "nil",
                 luaL_typename(L, -1));
        lua_pushstring(L, msg);
        return lua_error(L);
    }
    return 0;
}

static rdmx_status_t limit_status(int limit)
{
    switch (limit) {
    case RDMX_LAMBDA_LIMIT_INSTRUCTIONS:
    case RDMX_LAMBDA_LIMIT_MEMORY:
        return RDMX_ERR_NO_RESOURCE;
    case RDMX_LAMBDA_LIMIT_TIME:
    case RDMX_LAMBDA_LIMIT_DEADLINE:
        return RDMX_ERR_TIMEOUT;
    case RDMX_LAMBDA_LIMIT_OUTPUT:
    case RDMX_LAMBDA_LIMIT_SOURCE:
        return RDMX_ERR_TOO_BIG;
    default:
        return RDMX_ERR_INVALID;
    }
}

/* Everything a state holds before any call: the frozen sandbox; the stop
 * error, allocated now to be raised later without allocating; and a
 * call's globals, made once here (every call begins from its own copy of
 * the image), the registry's globals pointing to them. */
static int prepare(lua_State *L)
{
    rdmx__lambda_state_t *s = lua_touserdata(L, 1);

    lua_settop(L, 0);
    open_sandbox(L, s);
    lua_pushstring(L, "lambda stopped: budget exhausted");
    s->stop_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    env_new(L, s);
    lua_pushvalue(L, -1);
    lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    s->env_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

/* Save the arena into @p im, with what the state holds: collected fully
 * first, so that a call beginning from it finds the collector at rest. */
static int image_save(rdmx__lambda_state_t *s, rdmx__lambda_image_t *im)
{
    lua_gc(s->L, LUA_GCCOLLECT);
    if (rdmx__arena_save(s->arena, &im->img) != 0)
        return -1;
    im->mem = s->owner.mem;
    return 0;
}

rdmx_status_t rdmx__lambda_state_build(rdmx__lambda_state_t *s,
                                       size_t arena_size)
{
    lua_State *L;

    memset(&s->owner, 0, sizeof(s->owner));
    s->owner.max_memory = SIZE_MAX; /* the call's budget applies on use */
    s->owner.mem_limit = SIZE_MAX;
    s->stop_ref = s->owner.stop_ref = LUA_NOREF;
    s->L = NULL;
    if ((s->arena = rdmx__arena_create(arena_size)) == NULL)
        return RDMX_ERR_NO_MEMORY;
    s->owner.arena = s->arena;
    L = lua_newstate(lalloc, &s->owner);
    if (L == NULL) {
        rdmx__arena_destroy(s->arena);
        s->arena = NULL;
        return RDMX_ERR_NO_MEMORY;
    }
    s->L = L;
    s->owner.L = s->owner.current = L;
    lua_pushcfunction(L, prepare);
    lua_pushlightuserdata(L, s);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        rdmx__lambda_state_close(s);
        return RDMX_ERR_NO_MEMORY;
    }
    s->owner.stop_ref = s->stop_ref;
    s->owner.armed = 1;
    s->owner.closing = 1;
    s->sandbox_mem = s->owner.mem;
    s->calls = 0;
    s->nfn_images = 0;
    s->fn_image_bytes = 0;
    lua_sethook(L, hook, LUA_MASKCOUNT, 1);
    if (image_save(s, &s->pristine) != 0) {
        rdmx__lambda_state_close(s);
        return RDMX_ERR_NO_MEMORY;
    }
    s->begun = s->clean = &s->pristine.img; /* the arena is what was saved */
    return RDMX_OK;
}

/* Nothing of a state lives outside its arena (the sandbox has no io and
 * refuses __gc, so Lua's own finalizers would only free memory): unmapping
 * the arena is closing the state. */
void rdmx__lambda_state_close(rdmx__lambda_state_t *s)
{
    unsigned i;

    if (s->L == NULL)
        return;
    rdmx__arena_destroy(s->arena);
    s->arena = NULL;
    rdmx__arena_image_free(&s->pristine.img);
    for (i = 0; i < RDMX__LAMBDA_FN_IMAGES; i++)
        rdmx__arena_image_free(&s->fn_images[i].img);
    s->nfn_images = 0;
    s->fn_image_bytes = 0;
    s->begun = s->clean = NULL;
    s->L = NULL;
}

/* Load the engine's bytecode (the run at index 1) as a function image's
 * function. */
static int load_keep(lua_State *L)
{
    rdmx__lambda_run_t *r = lua_touserdata(L, 1);

    if (luaL_loadbufferx(L, r->code, r->code_len, "=lambda", "b") != LUA_OK)
        return lua_error(L);
    lua_rawseti(L, LUA_REGISTRYINDEX, r->state->fn_ref);
    return 0;
}

/* Drop the function image @p im (its slot becomes free). */
static void image_drop(rdmx__lambda_state_t *s, rdmx__lambda_image_t *im)
{
    if (s->clean == &im->img)
        s->clean = NULL;
    s->fn_image_bytes -= im->img.len;
    rdmx__arena_image_free(&im->img);
    im->used = 0;
    s->nfn_images--;
}

/* The image that a call of @p r begins from: the one of its function,
 * saved now if there is none (the least recently used give way, past
 * RDMX__LAMBDA_FN_IMAGES or RDMX__LAMBDA_FN_IMAGE_BYTES); the pristine one
 * for source, or when that fails. The arena is made that image. 1 when
 * the image holds the function. */
/* Make the arena @p img, copying it back unless the arena is that image
 * already (tidied after the last call, or never used); a call is about to
 * change it. */
static void arena_from(rdmx__lambda_state_t *s, const rdmx__arena_image_t *img)
{
    if (s->clean != img)
        rdmx__arena_restore(s->arena, img);
    s->clean = NULL;
}

static int image_begin(rdmx__lambda_run_t *r, rdmx__lambda_state_t *s)
{
    rdmx__lambda_image_t *im = NULL, *lru;
    unsigned i;

    if (r->binary && r->id != NULL) {
        for (i = 0; i < RDMX__LAMBDA_FN_IMAGES; i++)
            if (s->fn_images[i].img.bytes != NULL &&
                memcmp(s->fn_images[i].id, r->id, RDMX_LAMBDA_ID_LEN) == 0) {
                im = &s->fn_images[i];
                break;
            }
    }
    if (im != NULL) {
        arena_from(s, &im->img);
        s->owner.mem = im->mem;
        im->used = ++s->image_clock;
        s->begun = &im->img;
        return 1;
    }
    arena_from(s, &s->pristine.img);
    s->owner.mem = s->pristine.mem;
    s->begun = &s->pristine.img;
    if (!r->binary || r->id == NULL)
        return 0;

    /* a function image: the pristine state with the function loaded, in a
     * free slot (the least recently used one's, when none is free) */
    lru = NULL;
    for (i = 0; i < RDMX__LAMBDA_FN_IMAGES; i++) {
        rdmx__lambda_image_t *x = &s->fn_images[i];
        if (x->img.bytes == NULL) {
            im = x;
            break;
        }
        if (lru == NULL || x->used < lru->used)
            lru = x;
    }
    if (im == NULL) {
        image_drop(s, lru);
        im = lru;
    }
    s->owner.state = s;
    s->owner.code = r->code;
    s->owner.code_len = r->code_len;
    s->owner.id = r->id;
    lua_pushcfunction(s->L, load_keep);
    lua_pushlightuserdata(s->L, &s->owner);
    if (lua_pcall(s->L, 1, 0, 0) != LUA_OK || image_save(s, im) != 0) {
        /* out of room: this call loads the function itself */
        arena_from(s, &s->pristine.img);
        s->owner.mem = s->pristine.mem;
        return 0;
    }
    memcpy(im->id, r->id, RDMX_LAMBDA_ID_LEN);
    im->used = ++s->image_clock;
    s->nfn_images++;
    s->fn_image_bytes += im->img.len;
    s->begun = &im->img;
    /* the bytes the images hold, bounded: the least recently used go */
    while (s->fn_image_bytes > RDMX__LAMBDA_FN_IMAGE_BYTES &&
           s->nfn_images > 1) {
        lru = NULL;
        for (i = 0; i < RDMX__LAMBDA_FN_IMAGES; i++) {
            rdmx__lambda_image_t *x = &s->fn_images[i];
            if (x->img.bytes != NULL && x != im &&
                (lru == NULL || x->used < lru->used))
                lru = x;
        }
        image_drop(s, lru);
    }
    return 1;
}

/* The call is over: the state goes back to its own record (the next call
 * restores an image before anything else), and what the call touched
 * beyond its image goes back to the system. */
static void hand_back(rdmx__lambda_run_t *r, rdmx__lambda_state_t *s)
{
    s->owner.mem = r->mem;
    s->owner.stop_ref = r->stop_ref;
    s->calls++;
    lua_setallocf(s->L, lalloc, &s->owner);
    rdmx__arena_trim(s->arena, s->begun);
}

void rdmx__lambda_state_tidy(rdmx__lambda_state_t *s)
{
    if (s->clean == NULL && s->begun != NULL) {
        rdmx__arena_restore(s->arena, s->begun);
        s->clean = s->begun;
    }
}

rdmx_status_t rdmx__lambda_run(rdmx__lambda_run_t *r, rdmx__lambda_state_t *s)
{
    uint64_t t0 = rdmx_now_ns();
    const rdmx_lambda_call_params_t *c = r->call;
    rdmx_status_t status = RDMX_OK;
    lua_State *L;
    int st, have_fn;

    r->out.max = r->max_output;
    r->stop_ref = LUA_NOREF;
    r->deadline_ns = UINT64_MAX;
    if (r->max_time_ns != 0)
        r->deadline_ns = t0 + r->max_time_ns;
    if (c->deadline_ns != 0 && c->deadline_ns <= r->deadline_ns) {
        r->deadline_ns = c->deadline_ns;
        r->deadline_is_callers = 1;
        if (c->deadline_ns <= t0) {
            r->limit = RDMX_LAMBDA_LIMIT_DEADLINE;
            snprintf(r->msg, sizeof(r->msg),
                     "deadline passed before the call started");
            return RDMX_ERR_TIMEOUT;
        }
    }

    /* the state begins from an image: of the function, if it has one */
    have_fn = image_begin(r, s);

    /* the call owns the state from here: its record counts what the state
     * holds beyond what it held now */
    L = s->L;
    r->arena = s->arena;
    lua_setallocf(L, lalloc, r);
    r->mem = r->mem_base = r->mem_peak = s->owner.mem;
    r->mem_limit =
        r->max_memory > SIZE_MAX - r->mem ? SIZE_MAX : r->mem + r->max_memory;
    r->mem_shown = s->sandbox_mem;
    r->stop_ref = s->stop_ref;
    r->state = s;
    r->L = r->current = L;

    /* the function the image holds, if any (the stack is empty here) */
    if (!have_fn || !fn_find(L, s))
        lua_pushnil(L);
    lua_pushcfunction(L, pmain);
    lua_pushlightuserdata(L, r);
    lua_pushvalue(L, 1);
    st = lua_pcall(L, 2, 0, 0);
    if (st != LUA_OK) {
        if (r->stop) {
            r->limit = (rdmx_lambda_limit_t)r->stop;
            stop_message(r, r->stop, r->msg, sizeof(r->msg));
            status = limit_status(r->stop);
        } else if (st == LUA_ERRMEM) {
            if (r->mem_refused) {
                r->limit = RDMX_LAMBDA_LIMIT_MEMORY;
                stop_message(r, RDMX_LAMBDA_LIMIT_MEMORY, r->msg,
                             sizeof(r->msg));
                status = RDMX_ERR_NO_RESOURCE;
            } else { /* not our allocator's refusal (none known) */
                snprintf(r->msg, sizeof(r->msg), "out of memory");
                status = RDMX_ERR_NO_MEMORY;
            }
        } else {
            const char *m = lua_type(L, -1) == LUA_TSTRING ||
                                    lua_type(L, -1) == LUA_TNUMBER
                                ? lua_tostring(L, -1)
                                : NULL;
            if (m != NULL)
                snprintf(r->msg, sizeof(r->msg), "%s", m);
            else
                snprintf(r->msg, sizeof(r->msg),
                         "(error object is a %s value)",
                         luaL_typename(L, -1));
            status = RDMX_ERR_INVALID;
        }
    } else if (r->stop) {
        /* stopped in a coroutine or a pcall, and the function returned */
        r->limit = (rdmx_lambda_limit_t)r->stop;
        stop_message(r, r->stop, r->msg, sizeof(r->msg));
        status = limit_status(r->stop);
    }

    r->mem_peak -= r->mem_base;
    hand_back(r, s);
    r->elapsed_ns = rdmx_since(rdmx_now_ns(), t0);
    if (status != RDMX_OK) {
        free(r->out.data);
        r->out.data = NULL;
        r->out.len = r->out.cap = 0;
    }
    return status;
}
