/*
 * Unit test of the lambda engine (include/rdmx/lambda.h, docs/LAMBDA.md):
 * one process, no network; the engine is called directly.
 *
 * - budgets: an infinite loop, memory bombs, deep recursion, the time limit,
 *   the caller's deadline, the output limit; library functions that work
 *   without VM instructions (pattern matching, string.rep(""), table.move,
 *   table.insert with a lying __len) are stopped too; a stop cannot be
 *   caught (pcall, coroutines) and the next call works;
 * - the sandbox: the exact set of globals and library fields, every
 *   forbidden function unreachable, binary chunks refused (as the source
 *   and through load), __gc refused;
 * - errors, inputs, args and outputs of every type;
 * - the cache: by id after eval, NOT_FOUND, LRU eviction, byte bound;
 * - 4 threads x many calls, correct results, shared cache;
 * - the kv environment with a fake store: wiring, large values, errors;
 * - natives: the sample plugin (tests/plugins/upper.c), unknown names,
 *   output limit, broken plugins refused;
 * - the RPC request format: round trips, every truncation and bad field;
 * - isolation between the calls of one state: hostile pairs (one
 *   call plants, the next looks), in both state modes;
 * - fresh states: every call from an image (interned strings, accounting,
 *   function images, memory given back);
 * - per-call cost (printed): compile vs cached bytecode.
 */
#define _GNU_SOURCE
#include "harness.h"

#include "core/internal.h"
#include "lambda/lambda_int.h"
#include "util/time.h"

#include <rdmx/lambda.h>

#include <lauxlib.h>
#include <lua.h>

#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

/* --- helpers ------------------------------------------------------------- */

static rdmx_lambda_engine_t *mk_engine(const rdmx_lambda_params_t *p)
{
    rdmx_lambda_engine_t *e;
    CHECK_OK(rdmx_lambda_engine_create(p, &e));
    return e;
}

/* 1: ev() runs a call as the RPC handler does: the state stays held
 * until the answer is out, then is restored to its image and given back
 * (rdmx__lambda_engine_tidy), so the next call begins without a copy */
static int held_mode;

static rdmx_status_t ev(rdmx_lambda_engine_t *e, const char *src,
                        const rdmx_lambda_call_params_t *c,
                        rdmx_lambda_result_t *r)
{
    rdmx__lambda_state_t *held;
    rdmx_status_t st;

    if (!held_mode)
        return rdmx_lambda_engine_eval(e, src, strlen(src), c, r);
    st = rdmx__lambda_engine_eval(e, src, strlen(src), c, r, &held);
    rdmx__lambda_engine_tidy(e, held);
    return st;
}

/* eval must succeed with exactly @p want as output */
static void expect_out_(const char *file, int line, rdmx_lambda_engine_t *e,
                        const char *src, const rdmx_lambda_call_params_t *c,
                        const char *want)
{
    rdmx_lambda_result_t r;
    rdmx_status_t st = ev(e, src, c, &r);
    if (st != RDMX_OK)
        th_fail(file, line, "%s\n  -> %s: %s", src, rdmx_status_name(st),
                r.message);
    if (r.output_len != strlen(want) || memcmp(r.output, want, r.output_len))
        th_fail(file, line, "%s\n  -> output \"%s\" (%zu B), want \"%s\"",
                src, r.output, r.output_len, want);
    rdmx_lambda_result_free(&r);
}
#define EXPECT_OUT(e, src, want)                                               \
    expect_out_(__FILE__, __LINE__, (e), (src), NULL, (want))

/* eval must fail with @p want and a message containing @p sub */
static rdmx_lambda_result_t expect_err_(const char *file, int line,
                                        rdmx_lambda_engine_t *e,
                                        const char *src,
                                        const rdmx_lambda_call_params_t *c,
                                        rdmx_status_t want, const char *sub)
{
    rdmx_lambda_result_t r;
    rdmx_status_t st = ev(e, src, c, &r);
    if (st != want)
        th_fail(file, line, "%s\n  -> %s (%s), want %s", src,
                rdmx_status_name(st), r.message, rdmx_status_name(want));
    if (strstr(r.message, sub) == NULL)
        th_fail(file, line, "%s\n  -> message \"%s\" lacks \"%s\"", src,
                r.message, sub);
    if (strcmp(rdmx_error_detail(), r.message) != 0)
        th_fail(file, line, "detail \"%s\" != message \"%s\"",
                rdmx_error_detail(), r.message);
    if (r.output != NULL || r.output_len != 0)
        th_fail(file, line, "output on error");
    return r;
}
#define EXPECT_ERR(e, src, st, sub)                                            \
    expect_err_(__FILE__, __LINE__, (e), (src), NULL, (st), (sub))

/* A genuine Lua 5.4 binary chunk of @p src. */
typedef struct {
    unsigned char buf[8192];
    size_t n;
} dumpbuf_t;

static int dump_w(lua_State *L, const void *p, size_t sz, void *ud)
{
    dumpbuf_t *d = ud;
    (void)L;
    if (d->n + sz > sizeof(d->buf))
        return 1;
    memcpy(d->buf + d->n, p, sz);
    d->n += sz;
    return 0;
}

static void make_bytecode(const char *src, dumpbuf_t *d)
{
    lua_State *L = luaL_newstate();
    d->n = 0;
    CHECK(luaL_loadstring(L, src) == LUA_OK);
    CHECK(lua_dump(L, dump_w, d, 0) == 0);
    CHECK(d->n > 4 && d->buf[0] == 0x1b);
    lua_close(L);
}

static void still_works(rdmx_lambda_engine_t *e)
{
    EXPECT_OUT(e, "return 'still ' .. 'ok'", "still ok");
}

/* --- budgets --------------------------------------------------------------- */

static void test_budgets(void)
{
    rdmx_lambda_params_t p = {
        .field_mask = RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY,
        .max_memory = 8 * TH_MIB,
    };
    /* no time limit: the instruction budget must be what stops these,
     * however slow the build */
    rdmx_lambda_params_t np = {.field_mask = RDMX_LAMBDA_PARAM_FIELD_MAX_TIME,
                               .max_time_ms = RDMX_TIMEOUT_INFINITE};
    rdmx_lambda_engine_t *e = mk_engine(&np);
    rdmx_lambda_engine_t *small = mk_engine(&p); /* 8 MiB */
    rdmx_lambda_result_t r;
    rdmx_lambda_call_params_t call = {0};
    rdmx_lambda_stats_t s;
    double t;
    static const char *work_bombs[] = {
        "while true do end",
        "local i = 0 repeat i = i + 1 until false",
        /* catching the stop does not help */
        "while true do pcall(function() while true do end end) end",
        "while true do pcall(error) end",
        "local f f = function() pcall(f) end while true do f() end",
        "while true do xpcall(function() while true do end end, "
        "function(m) while true do end end) end",
        /* nor running in a coroutine */
        "local co = coroutine.wrap(function() while true do end end) "
        "pcall(co) while true do end",
        "local co = coroutine.create(function() while true do end end) "
        "return tostring(coroutine.resume(co))",
        /* library work without VM instructions */
        "return (string.rep('a', 200000)):find('.-.-.-.-b')",
        "return (string.rep('a', 200000)):match('(.-)%1b')",
        "local n = 0 for _ in (string.rep('a', 100000)):gmatch('.-.-.-b') "
        "do n = n + 1 end return n",
        "return (string.rep('a', 100000)):gsub('.-.-.-b', '')",
        "return #string.rep('', 1 << 62)", /* returns at once, then: */
        "local t = {} table.move(t, 1, 1 << 62, 2)",
        "local t = setmetatable({}, {__len = function() return 1 << 40 end}) "
        "table.insert(t, 1, 'x')",
        "local t = setmetatable({}, {__len = function() return 1 << 40 end}) "
        "table.remove(t, 1)",
        "local s = string.rep('a', 1 << 20) while true do utf8.len(s) end",
        "local s = string.rep('a', 1 << 20) "
        "while true do s:find('b', 1, true) end",
        "local t = {} for i = 1, 1000 do t[i] = 1000 - i end "
        "while true do table.sort(t, function(a, b) return a < b end) end",
        "while true do collectgarbage() end",
        /* the parser fed for ever by a reader: its work is charged */
        "local c, first = string.rep('x', 1 << 20), true "
        "load(function() if first then first = false return '--[[' end "
        "return c end)",
    };
    unsigned i;

    th_log("budgets: instructions");
    for (i = 0; i < sizeof(work_bombs) / sizeof(work_bombs[0]); i++) {
        if (strstr(work_bombs[i], "'', 1 << 62") != NULL) {
            EXPECT_OUT(e, work_bombs[i], "0");
            continue;
        }
        t = th_now_ms();
        r = EXPECT_ERR(e, work_bombs[i], RDMX_ERR_NO_RESOURCE,
                       "instruction budget of 10000000 exceeded");
        t = th_now_ms() - t;
        CHECK_EQ_U64(r.limit, RDMX_LAMBDA_LIMIT_INSTRUCTIONS);
        CHECKF(r.instructions > 10000000 && r.instructions < 13000000,
               "%s: %llu units", work_bombs[i],
               (unsigned long long)r.instructions);
        CHECKF(t < 5000.0 * TH_SLOW, "%s stopped after %.0f ms", work_bombs[i],
               t);
        th_log("  %.60s: %.1f ms", work_bombs[i], t);
        still_works(e);
    }
    /* a stop caught inside a coroutine: the function returns, the call
     * still fails */
    EXPECT_ERR(e,
               "local co = coroutine.create(function() while true do end "
               "end) coroutine.resume(co) return 'escaped'",
               RDMX_ERR_NO_RESOURCE, "instruction budget");

    th_log("budgets: memory");
    {
        static const char *mem_bombs[] = {
            "local s = 'x' while true do s = s .. s end",
            "local s = 'x' while true do s = string.rep(s, 2) end",
            "local t, i = {}, 0 while true do i = i + 1 t[i] = {} end",
            "local t, i = {}, 0 while true do i = i + 1 t[i] = "
            "tostring(i) .. 'padding-padding' end",
            "local t = {} while true do t[#t + 1] = string.rep('x', 1000) "
            "end",
            /* caught with pcall, and again: still capped */
            "local t = {} while true do pcall(function() "
            "t[#t + 1] = string.rep('x', 100000) end) end",
        };
        for (i = 0; i < sizeof(mem_bombs) / sizeof(mem_bombs[0]); i++) {
            rdmx_status_t st;
            t = th_now_ms();
            st = ev(small, mem_bombs[i], NULL, &r);
            t = th_now_ms() - t;
            CHECKF(st == RDMX_ERR_NO_RESOURCE, "%s -> %s %s", mem_bombs[i],
                   rdmx_status_name(st), r.message);
            /* the pcall loop can also end on the work its collections
             * cost: both are the budgets doing their job */
            CHECKF(r.limit == RDMX_LAMBDA_LIMIT_MEMORY ||
                       (i == 5 && r.limit == RDMX_LAMBDA_LIMIT_INSTRUCTIONS),
                   "%s: limit %d (%s)", mem_bombs[i], r.limit, r.message);
            if (r.limit == RDMX_LAMBDA_LIMIT_MEMORY)
                CHECK(strstr(r.message, "memory budget of 8388608 bytes") !=
                      NULL);
            CHECKF(r.memory_peak <= 8 * TH_MIB, "peak %zu", r.memory_peak);
            th_log("  %.60s: %.1f ms, peak %zu KiB (%s)", mem_bombs[i], t,
                   r.memory_peak >> 10, r.message);
            still_works(small);
        }
        /* a big input counts against the memory budget */
        call.field_mask = RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT;
        call.input = th_alloc(9 * TH_MIB);
        memset((void *)call.input, 'a', 9 * TH_MIB);
        call.input_len = 9 * TH_MIB;
        expect_err_(__FILE__, __LINE__, small, "return #input", &call,
                    RDMX_ERR_NO_RESOURCE, "memory budget");
        expect_out_(__FILE__, __LINE__, e, "return #input", &call, "9437184");
        free((void *)call.input);
        memset(&call, 0, sizeof(call));
    }

    th_log("budgets: recursion");
    {
        rdmx_status_t st;
        st = ev(e, "local function f(n) return 1 + f(n + 1) end return f(1)",
                NULL, &r);
        CHECKF((st == RDMX_ERR_INVALID && strstr(r.message, "stack overflow")) ||
                   (st == RDMX_ERR_NO_RESOURCE &&
                    r.limit == RDMX_LAMBDA_LIMIT_MEMORY),
               "%s %s", rdmx_status_name(st), r.message);
        th_log("  deep recursion (64 MiB): %s", r.message);
        st = ev(small, "local function f(n) return 1 + f(n + 1) end "
                       "return f(1)",
                NULL, &r);
        CHECKF(st == RDMX_ERR_NO_RESOURCE && r.limit == RDMX_LAMBDA_LIMIT_MEMORY,
               "%s %s", rdmx_status_name(st), r.message);
        th_log("  deep recursion (8 MiB): %s", r.message);
        r = EXPECT_ERR(e,
                       "local function f() return coroutine.wrap(f)() end "
                       "return f()",
                       RDMX_ERR_INVALID, "stack overflow");
        th_log("  nested coroutines: %s", r.message);
        EXPECT_ERR(e, "local s = '(' return load(s:rep(100000))",
                   RDMX_ERR_INVALID, "");
        still_works(e);
        still_works(small);
    }

    th_log("budgets: time and deadline");
    {
        rdmx_lambda_params_t tp = {
            .field_mask = RDMX_LAMBDA_PARAM_FIELD_MAX_INSTRUCTIONS |
                          RDMX_LAMBDA_PARAM_FIELD_MAX_TIME,
            .max_instructions = UINT64_MAX / 2,
            .max_time_ms = 100,
        };
        rdmx_lambda_engine_t *te = mk_engine(&tp);
        t = th_now_ms();
        r = EXPECT_ERR(te, "while true do end", RDMX_ERR_TIMEOUT,
                       "time budget of 100 ms exceeded");
        t = th_now_ms() - t;
        CHECK_EQ_U64(r.limit, RDMX_LAMBDA_LIMIT_TIME);
        CHECKF(t >= 100 && t < 100 + 1000.0 * TH_SLOW, "stopped after %.1f ms",
               t);
        th_log("  max_time 100 ms: stopped after %.1f ms", t);

        /* (the clock read first: a thread preempted between the two
         * reads would otherwise see less than the 30 ms pass) */
        t = th_now_ms();
        call.field_mask = RDMX_LAMBDA_CALL_PARAM_FIELD_DEADLINE;
        call.deadline_ns = rdmx_now_ns() + 30 * 1000000ull;
        r = expect_err_(__FILE__, __LINE__, te, "while true do end", &call,
                        RDMX_ERR_TIMEOUT, "deadline passed");
        t = th_now_ms() - t;
        CHECK_EQ_U64(r.limit, RDMX_LAMBDA_LIMIT_DEADLINE);
        CHECKF(t >= 25 && t < 30 + 1000.0 * TH_SLOW, "stopped after %.1f ms",
               t);
        th_log("  caller's deadline in 30 ms: stopped after %.1f ms", t);
        /* a later deadline than max_time: max_time wins */
        call.deadline_ns = rdmx_now_ns() + 60ull * 1000000000ull;
        r = expect_err_(__FILE__, __LINE__, te, "while true do end", &call,
                        RDMX_ERR_TIMEOUT, "time budget");
        /* already passed: nothing runs */
        call.deadline_ns = rdmx_now_ns() - 1;
        expect_err_(__FILE__, __LINE__, te, "return 1", &call,
                    RDMX_ERR_TIMEOUT, "deadline passed before");
        memset(&call, 0, sizeof(call));
        /* the time limit also stops work the instruction count misses: two
         * long equal strings compared in a loop. The hook's interval must
         * shrink as the strings are made, not at the next hook. */
        t = th_now_ms();
        r = EXPECT_ERR(te,
                       "local m = string.rep('a', 1 << 20) "
                       "local a = m:rep(20) local b = m:rep(20) "
                       "local n = 0 while true do if a == b then n = n + 1 "
                       "end end",
                       RDMX_ERR_TIMEOUT, "time budget");
        t = th_now_ms() - t;
        th_log("  long-string compares, 40 MB heap: stopped after %.1f ms",
               t);
        CHECKF(t < 100 + 400.0 * TH_SLOW, "stopped after %.1f ms", t);
        /* the same from coroutines made while the state was small: each
         * kept a 1000-instruction interval, and the main thread's hook
         * (short by then) came only every few resumes */
        t = th_now_ms();
        r = EXPECT_ERR(te,
                       "local a, b local cos = {} "
                       "for i = 1, 20 do cos[i] = coroutine.wrap(function() "
                       "while true do for _ = 1, 100 do if a == b then end "
                       "end coroutine.yield() end end) end "
                       "local m = string.rep('a', 1 << 20) "
                       "a = m:rep(20) b = m:rep(20) "
                       "while true do for i = 1, 20 do cos[i]() end end",
                       RDMX_ERR_TIMEOUT, "time budget");
        t = th_now_ms() - t;
        th_log("  the same in 20 coroutines made before: stopped after "
               "%.1f ms",
               t);
        CHECKF(t < 100 + 400.0 * TH_SLOW, "stopped after %.1f ms", t);
        still_works(te);
        rdmx_lambda_engine_destroy(te);
    }

    th_log("budgets: output");
    {
        rdmx_lambda_params_t op = {.field_mask =
                                       RDMX_LAMBDA_PARAM_FIELD_MAX_OUTPUT,
                                   .max_output = 1000};
        rdmx_lambda_engine_t *oe = mk_engine(&op);
        r = EXPECT_ERR(oe, "while true do print('spam') end",
                       RDMX_ERR_TOO_BIG, "output budget of 1000 bytes");
        CHECK_EQ_U64(r.limit, RDMX_LAMBDA_LIMIT_OUTPUT);
        EXPECT_ERR(oe, "pcall(print, string.rep('x', 2000)) return 1",
                   RDMX_ERR_TOO_BIG, "output budget");
        EXPECT_ERR(oe, "return string.rep('x', 1001)", RDMX_ERR_TOO_BIG,
                   "output budget");
        {
            char want[1001];
            memset(want, 'x', 1000);
            want[1000] = '\0';
            EXPECT_OUT(oe, "return string.rep('x', 1000)", want);
        }
        rdmx_lambda_engine_destroy(oe);
    }

    th_log("budgets: source");
    {
        rdmx_lambda_params_t sp = {.field_mask =
                                       RDMX_LAMBDA_PARAM_FIELD_MAX_SOURCE,
                                   .max_source = 100};
        rdmx_lambda_engine_t *se = mk_engine(&sp);
        char src[128];
        memset(src, ' ', sizeof(src) - 1);
        src[sizeof(src) - 1] = '\0';
        r = EXPECT_ERR(se, src, RDMX_ERR_TOO_BIG, "exceeds max_source");
        CHECK_EQ_U64(r.limit, RDMX_LAMBDA_LIMIT_SOURCE);
        rdmx_lambda_engine_destroy(se);
    }

    /* bad parameters */
    {
        rdmx_lambda_params_t bp = {.field_mask =
                                       RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY,
                                   .max_memory = 1000};
        rdmx_lambda_engine_t *be;
        CHECK_ST(rdmx_lambda_engine_create(&bp, &be), RDMX_ERR_INVALID);
        bp.field_mask = RDMX_LAMBDA_PARAM_FIELD_MAX_INSTRUCTIONS;
        bp.max_instructions = 10;
        CHECK_ST(rdmx_lambda_engine_create(&bp, &be), RDMX_ERR_INVALID);
    }

    rdmx_lambda_engine_stats(e, &s);
    CHECKF(s.budget_instructions >= 20, "%llu",
           (unsigned long long)s.budget_instructions);
    rdmx_lambda_engine_destroy(e);
    rdmx_lambda_engine_destroy(small);
}

/* --- the sandbox ----------------------------------------------------------- */

static void test_sandbox(void)
{
    rdmx_lambda_engine_t *e = mk_engine(NULL);
    rdmx_lambda_call_params_t call = {0};
    rdmx_lambda_result_t r;
    const char *keys =
        "local function keys(t) local n = {} for k in pairs(t) do "
        "n[#n + 1] = tostring(k) end table.sort(n) "
        "return table.concat(n, ' ') end ";
    char src[1024];
    static const struct {
        const char *src, *msg;
    } forbidden[] = {
        {"return io.open('/etc/passwd')", "global 'io'"},
        {"return io.popen('id')", "global 'io'"},
        {"return os.execute('true')", "field 'execute'"},
        {"return os.getenv('HOME')", "field 'getenv'"},
        {"return os.remove('/tmp/x')", "field 'remove'"},
        {"return os.rename('/tmp/x', '/tmp/y')", "field 'rename'"},
        {"return os.exit(1)", "field 'exit'"},
        {"return os.tmpname()", "field 'tmpname'"},
        {"return os.setlocale('C')", "field 'setlocale'"},
        {"return require('os')", "global 'require'"},
        {"return package.loaded", "global 'package'"},
        {"return package.loadlib('libc.so.6', 'system')", "global 'package'"},
        {"return debug.getinfo(1)", "global 'debug'"},
        {"return debug.sethook()", "global 'debug'"},
        {"return debug.getregistry()", "global 'debug'"},
        {"return dofile('/etc/passwd')", "global 'dofile'"},
        {"return loadfile('/etc/passwd')", "global 'loadfile'"},
        {"return string.dump(function() end)", "field 'dump'"},
        {"return ('x'):dump()", "method 'dump'"},
        {"return getmetatable('').__index.dump(print)", "field 'dump'"},
        {"return collectgarbage('stop')", "not available in the sandbox"},
        {"return collectgarbage('generational')", "not available"},
        {"return collectgarbage('incremental', 1, 1, 1)", "not available"},
        {"return collectgarbage('setpause', 1000)", "not available"},
        {"warn('@on')", "global 'warn'"},
        {"return _G.io or _ENV.os.execute()", "field 'execute'"},
        {"setmetatable({}, {__gc = function() while true do end end})",
         "__gc metamethods are not allowed"},
        {"setmetatable({}, {__gc = true})", "__gc metamethods"},
        {"return kv.get('x')", "global 'kv'"},
    };
    unsigned i;

    th_log("sandbox: globals and libraries are exactly these");
    snprintf(src, sizeof(src), "%s return keys(_G)", keys);
    EXPECT_OUT(e, src,
               "ARGV KEYS _G _VERSION args assert collectgarbage coroutine error "
               "getmetatable input ipairs load math next os pairs pcall print "
               "rawequal rawget rawlen rawset select setmetatable string "
               "table tonumber tostring type utf8 xpcall");
    snprintf(src, sizeof(src), "%s return keys(os)", keys);
    EXPECT_OUT(e, src, "clock date difftime time");
    snprintf(src, sizeof(src), "%s return keys(string)", keys);
    EXPECT_OUT(e, src,
               "byte char find format gmatch gsub len lower match pack "
               "packsize rep reverse sub unpack upper");
    snprintf(src, sizeof(src), "%s return keys(table)", keys);
    EXPECT_OUT(e, src, "concat insert move pack remove sort unpack");
    snprintf(src, sizeof(src), "%s return keys(coroutine)", keys);
    EXPECT_OUT(e, src,
               "close create isyieldable resume running status wrap yield");
    snprintf(src, sizeof(src), "%s return keys(utf8)", keys);
    EXPECT_OUT(e, src, "char charpattern codepoint codes len offset");
    snprintf(src, sizeof(src), "%s return getmetatable('').__index == string",
             keys);
    EXPECT_OUT(e, src, "true");

    th_log("sandbox: %zu forbidden things",
           sizeof(forbidden) / sizeof(forbidden[0]));
    for (i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
        EXPECT_ERR(e, forbidden[i].src, RDMX_ERR_INVALID, forbidden[i].msg);

    th_log("sandbox: binary chunks");
    {
        static dumpbuf_t d;
        rdmx_status_t st;
        make_bytecode("return 'I am bytecode'", &d);
        /* as the function's source */
        st = rdmx_lambda_engine_eval(e, (const char *)d.buf, d.n, NULL, &r);
        CHECK_EQ_U64(st, RDMX_ERR_INVALID);
        CHECKF(strstr(r.message, "attempt to load a binary chunk"), "%s",
               r.message);
        /* through load(), whatever mode is asked for, also from a reader */
        call.field_mask = RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT;
        call.input = d.buf;
        call.input_len = d.n;
        expect_out_(__FILE__, __LINE__, e,
                    "local f, err = load(input) return tostring(f) .. ' ' .. "
                    "err",
                    &call, "nil attempt to load a binary chunk (mode is 't')");
        expect_out_(__FILE__, __LINE__, e,
                    "local f, err = load(input, 'x', 'b') return err", &call,
                    "attempt to load a binary chunk (mode is 't')");
        expect_out_(__FILE__, __LINE__, e,
                    "local f, err = load(input, 'x', 'bt', {}) return err",
                    &call, "attempt to load a binary chunk (mode is 't')");
        expect_out_(__FILE__, __LINE__, e,
                    "local done = false local f, err = load(function() "
                    "if done then return nil end done = true return input "
                    "end, 'r', 'b') return err",
                    &call, "attempt to load a binary chunk (mode is 't')");
        memset(&call, 0, sizeof(call));
        /* text load works, with the sandbox's globals or a given env */
        EXPECT_OUT(e, "return load('return 1 + 1')()", "2");
        EXPECT_OUT(e, "return load('return x', 'c', 't', {x = 'env'})()",
                   "env");
        EXPECT_OUT(e, "return tostring(load('return io', 'c', 'b')())",
                   "nil");
    }
    still_works(e);
    rdmx_lambda_engine_destroy(e);
}

/* --- isolation between calls of one state --------------------------------- */

/* Hostile pairs: each plant tries to leave something for a later call;
 * its look must see nothing of it, run before the plant (the baseline),
 * after it, and after the plant once more (the second run of a cached
 * closure). The plant's own outcome is checked too: every attempt on a
 * shared table is refused. */
static const struct {
    const char *what, *plant, *plant_out, *look, *look_out;
} hostile[] = {
    {"globals",
     "x = 1 rawset(_G, 'y', 2) _ENV.z = 3 _G._G = nil print = nil "
     "return tostring(x) .. y .. z .. tostring(print)",
     "123nil",
     "return tostring(x) .. tostring(y) .. tostring(z) .. type(print) .. "
     "tostring(_G == _ENV)",
     "nilnilnilfunctiontrue"},
    {"library fields",
     "local n = 0 for _, f in ipairs({"
     "function() string.x = 1 end, function() string.upper = nil end, "
     "function() rawset(string, 'x', 1) end, "
     "function() rawset(table, 'insert', print) end, "
     "function() table.insert(math, 'x') end, "
     "function() table.move({1}, 1, 1, 1, os) end, "
     "function() math.pi = 3 end, function() os.time = nil end, "
     "function() coroutine.x = 1 end, function() utf8.x = 1 end, "
     "function() load('x = 1', 'c', 't', string)() end, "
     "function() load('upper = nil', 'c', 't', string)() end}) do "
     "local ok, e = pcall(f) "
     "if not ok and e:find('read%-only table') then n = n + 1 end end "
     "return n",
     "12",
     "local n = 0 for k in pairs(string) do n = n + 1 end "
     "return tostring(string.x) .. tostring(rawget(string, 'x')) .. n .. "
     "('a'):upper() .. type(table.insert) .. tostring(math.x) .. "
     "math.pi .. type(os.time) .. tostring(coroutine.x) .. "
     "tostring(utf8.x)",
     "nilnil16Afunctionnil3.1415926535898functionnilnil"},
    {"metatables",
     "local m = tostring(getmetatable(string)) .. "
     "tostring(getmetatable(_G)) local n = 0 for _, f in ipairs({"
     "function() setmetatable(string, {}) end, "
     "function() setmetatable(_G, {__index = function() return 'p' end}) "
     "end, "
     "function() getmetatable('').__index = {} end, "
     "function() getmetatable('').__index.upper = nil end, "
     "function() getmetatable('').x = 1 end, "
     "function() rawset(getmetatable(''), '__index', {}) end, "
     "function() rawset(getmetatable('').__index, 'x', 1) end}) do "
     "if not pcall(f) then n = n + 1 end end "
     "return m .. n .. tostring(getmetatable(_G).__index('x'))",
     "nilnil6p",
     "return tostring(nosuch) .. tostring(getmetatable('').x) .. "
     "('b'):upper() .. tostring(getmetatable('').__index == string) .. "
     "tostring(string.x)",
     "nilnilBtruenil"},
    {"load",
     "load('leak = 1')() load('leak2 = 2', 'c', 't', _G)() "
     "local ok = pcall(load('string.x = 1')) "
     "return leak .. leak2 .. tostring(ok)",
     "12false",
     "return tostring(leak) .. tostring(leak2) .. "
     "tostring(load('return leak')()) .. tostring(string.x) .. "
     "tostring(load('return _G')() == _G)",
     "nilnilnilniltrue"},
    {"coroutines",
     "co = coroutine.create(function() while true do "
     "coroutine.yield(1) end end) coroutine.resume(co) "
     "w = coroutine.wrap(function() local c <close> = setmetatable({}, "
     "{__close = function() print('closed') end}) coroutine.yield() end) "
     "w() return coroutine.status(co)",
     "suspended",
     "collectgarbage() local _, main = coroutine.running() "
     "return tostring(co) .. tostring(w) .. tostring(main)",
     "nilniltrue"},
    {"cached closure",
     "local n = 0 counter = function() n = n + 1 return n end "
     "keep = function() return _ENV end "
     "return counter() .. counter()",
     "12", "return tostring(counter) .. tostring(keep)", "nilnil"},
    {"string.dump",
     "local n = 0 for _, f in ipairs({"
     "function() string.dump = print end, "
     "function() rawset(string, 'dump', print) end, "
     "function() getmetatable('').__index.dump = print end}) do "
     "if not pcall(f) then n = n + 1 end end return n",
     "3",
     "return tostring(string.dump) .. "
     "tostring(getmetatable('').__index.dump) .. tostring(('x').dump)",
     "nilnilnil"},
    {"random seed", "math.randomseed(42) return math.random(1, 1 << 40)",
     NULL, /* the first draw of seed 42: the look must not repeat it */
     "return math.random(1, 1 << 40)", NULL},
};

/* The error values and memory a call leaves, and the registry's globals
 * seen through load. */
static void isolation_extra(rdmx_lambda_engine_t *e)
{
    rdmx_lambda_params_t p = {.field_mask = RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY,
                              .max_memory = 1u << 20};
    rdmx_lambda_call_params_t call = {.field_mask =
                                          RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT};
    rdmx_lambda_engine_t *small;
    rdmx_lambda_result_t r;
    int i;

    /* an error value (a table, _G itself) is dropped with the call */
    EXPECT_ERR(e, "leak = 'x' error(_G)", RDMX_ERR_INVALID,
               "(error object is a table value)");
    EXPECT_ERR(e,
               "error(setmetatable({}, {__tostring = function() "
               "return 'planted' end}))",
               RDMX_ERR_INVALID, "(error object is a table value)");
    EXPECT_OUT(e, "return tostring(leak)", "nil");
    /* load without an env binds to the running call's globals */
    for (i = 0; i < 3; i++) {
        call.input = i % 2 ? "odd" : "even";
        call.input_len = strlen(call.input);
        expect_out_(__FILE__, __LINE__, e,
                    "mine = input return load('return mine')()", &call,
                    call.input);
    }
    /* a stopped call leaves its state able to serve the next one */
    EXPECT_ERR(e,
               "co = coroutine.wrap(function() while true do end end) "
               "co()",
               RDMX_ERR_NO_RESOURCE, "instruction budget");
    EXPECT_OUT(e,
               "return tostring(co) .. coroutine.status("
               "coroutine.create(print))",
               "nilsuspended");

    /* memory: a call's garbage neither counts against the next call nor
     * gives it room past its budget */
    small = mk_engine(&p);
    for (i = 0; i < 3; i++) { /* string.rep peaks at twice its result */
        EXPECT_OUT(small, "big = string.rep('x', 400000) return #big",
                   "400000");
        EXPECT_OUT(small, "return collectgarbage('count') < 300", "true");
        EXPECT_OUT(small, "local s = string.rep('y', 450000) return #s",
                   "450000");
        EXPECT_ERR(small, "local s = string.rep('y', 600000) return #s",
                   RDMX_ERR_NO_RESOURCE, "memory budget");
    }
    CHECK_OK(ev(small,
                "local t = {} for i = 1, 20000 do t[i] = i end "
                "return #t",
                NULL, &r));
    CHECKF(r.memory_peak > 100000 && r.memory_peak <= (1u << 20), "peak %zu",
           r.memory_peak);
    rdmx_lambda_result_free(&r);
    rdmx_lambda_engine_destroy(small);
}

static void test_isolation(int held)
{
    rdmx_lambda_engine_t *e = mk_engine(NULL);
    rdmx_lambda_stats_t s;
    rdmx_lambda_result_t r;
    char first[64];
    unsigned i, round;

    held_mode = held;
    th_log("isolation: %zu hostile pairs, %s",
           sizeof(hostile) / sizeof(hostile[0]),
           held ? "each state restored after its call (as a server does)"
                : "each state restored as its next call begins");
    for (i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
        if (hostile[i].plant_out == NULL) { /* the random seed */
            CHECK_OK(ev(e, hostile[i].plant, NULL, &r));
            snprintf(first, sizeof(first), "%s", r.output);
            rdmx_lambda_result_free(&r);
            for (round = 0; round < 3; round++) {
                CHECK_OK(ev(e, hostile[i].look, NULL, &r));
                CHECKF(strcmp(r.output, first) != 0,
                       "random: the seed of an earlier call reached "
                       "this one (%s)",
                       first);
                rdmx_lambda_result_free(&r);
            }
            continue;
        }
        for (round = 0; round < 2; round++) {
            expect_out_(__FILE__, __LINE__, e, hostile[i].look, NULL,
                        hostile[i].look_out);
            expect_out_(__FILE__, __LINE__, e, hostile[i].plant, NULL,
                        hostile[i].plant_out);
            expect_out_(__FILE__, __LINE__, e, hostile[i].look, NULL,
                        hostile[i].look_out);
        }
    }
    /* and every plant before every look, in one state */
    for (i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++)
        if (hostile[i].plant_out != NULL)
            expect_out_(__FILE__, __LINE__, e, hostile[i].plant, NULL,
                        hostile[i].plant_out);
    for (i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++)
        if (hostile[i].look_out != NULL)
            expect_out_(__FILE__, __LINE__, e, hostile[i].look, NULL,
                        hostile[i].look_out);
    isolation_extra(e);
    rdmx_lambda_engine_stats(e, &s);
    /* one thread: one state served every call */
    CHECKF(s.states_built == 1, "%llu states built",
           (unsigned long long)s.states_built);
    rdmx_lambda_engine_destroy(e);
    held_mode = 0;
}

/* --- errors, inputs, outputs ----------------------------------------------- */

static void test_contract(void)
{
    rdmx_lambda_engine_t *e = mk_engine(NULL);
    rdmx_lambda_arg_t args[3] = {{"one", 3}, {"t\0o", 3}, {"", 0}};
    rdmx_lambda_call_params_t call = {.field_mask =
                                          RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT |
                                          RDMX_LAMBDA_CALL_PARAM_FIELD_ARGS,
                                      .input = "in\0put",
                                      .input_len = 6,
                                      .args = args,
                                      .nargs = 3};
    rdmx_lambda_result_t r;

    th_log("contract: errors");
    r = EXPECT_ERR(e, "return 1 +", RDMX_ERR_INVALID,
                   "lambda:1: unexpected symbol near <eof>");
    EXPECT_ERR(e, "x = = 2", RDMX_ERR_INVALID, "lambda:1:");
    EXPECT_ERR(e, "\n\nerror('boom')", RDMX_ERR_INVALID, "lambda:3: boom");
    EXPECT_ERR(e, "error('plain', 0)", RDMX_ERR_INVALID, "plain");
    EXPECT_ERR(e, "error({})", RDMX_ERR_INVALID,
               "(error object is a table value)");
    EXPECT_ERR(e, "return nil + 1", RDMX_ERR_INVALID,
               "attempt to perform arithmetic on a nil value");
    EXPECT_ERR(e, "local t = nil return t.x", RDMX_ERR_INVALID,
               "attempt to index a nil value (local 't')");
    EXPECT_ERR(e, "return {}", RDMX_ERR_INVALID,
               "lambda returned a table; return a string");
    EXPECT_ERR(e, "return print", RDMX_ERR_INVALID, "returned a function");
    EXPECT_ERR(e, "return 1, 2", RDMX_ERR_INVALID,
               "lambda returned 2 values");
    EXPECT_ERR(e, "print('lost') error('x')", RDMX_ERR_INVALID, "x");

    th_log("contract: inputs and args");
    expect_out_(__FILE__, __LINE__, e, "return #input", &call, "6");
    expect_out_(__FILE__, __LINE__, e, "return input:byte(3)", &call, "0");
    expect_out_(__FILE__, __LINE__, e,
                "return #args .. ':' .. args[1] .. ':' .. #args[2] .. ':' .. "
                "#args[3] .. ':' .. type(args[4])",
                &call, "3:one:3:0:nil");
    expect_out_(__FILE__, __LINE__, e, "return type(input) .. #args", NULL,
                "string0");

    th_log("contract: outputs of each type");
    {
        rdmx_status_t st = ev(e, "return input", &call, &r);
        CHECK_OK(st);
        CHECK_EQ_U64(r.type, RDMX_LAMBDA_STRING);
        CHECK_EQ_U64(r.output_len, 6);
        CHECK(memcmp(r.output, "in\0put", 6) == 0);
        CHECK(r.output[6] == '\0');
        rdmx_lambda_result_free(&r);
        CHECK_OK(ev(e, "return 6 * 7", NULL, &r));
        CHECK_EQ_U64(r.type, RDMX_LAMBDA_INTEGER);
        CHECK(strcmp(r.output, "42") == 0);
        rdmx_lambda_result_free(&r);
        CHECK_OK(ev(e, "return -(1 << 63)", NULL, &r));
        CHECK(strcmp(r.output, "-9223372036854775808") == 0);
        rdmx_lambda_result_free(&r);
        CHECK_OK(ev(e, "return 3 / 2", NULL, &r));
        CHECK_EQ_U64(r.type, RDMX_LAMBDA_FLOAT);
        CHECK(strcmp(r.output, "1.5") == 0);
        rdmx_lambda_result_free(&r);
        CHECK_OK(ev(e, "return 2.0", NULL, &r));
        CHECK(strcmp(r.output, "2.0") == 0);
        rdmx_lambda_result_free(&r);
        CHECK_OK(ev(e, "return 1 < 2", NULL, &r));
        CHECK_EQ_U64(r.type, RDMX_LAMBDA_BOOLEAN);
        CHECK(strcmp(r.output, "true") == 0);
        rdmx_lambda_result_free(&r);
        CHECK_OK(ev(e, "return false", NULL, &r));
        CHECK(strcmp(r.output, "false") == 0);
        rdmx_lambda_result_free(&r);
        CHECK_OK(ev(e, "local x = 1", NULL, &r));
        CHECK_EQ_U64(r.type, RDMX_LAMBDA_NIL);
        CHECK(r.output != NULL && r.output_len == 0);
        rdmx_lambda_result_free(&r);
        CHECK_OK(ev(e, "return nil", NULL, &r));
        CHECK_EQ_U64(r.type, RDMX_LAMBDA_NIL);
        rdmx_lambda_result_free(&r);
        CHECK_OK(ev(e, "print('a', 1, nil, true) print() return 'end'", NULL,
                    &r));
        CHECK(strcmp(r.output, "a\t1\tnil\ttrue\n\nend") == 0);
        CHECK_EQ_U64(r.type, RDMX_LAMBDA_STRING);
        CHECK(r.instructions < 1000 && r.memory_peak > 0 &&
              r.elapsed_ns > 0);
        rdmx_lambda_result_free(&r);
    }
    /* the libraries do their job */
    EXPECT_OUT(e,
               "local t = {} for w in ('b a c'):gmatch('%a') do t[#t+1] = w "
               "end table.sort(t) return table.concat(t, ',') .. "
               "select(2, ('aXbX'):gsub('X', '-')) .. ('%5.1f'):format(3.14159)"
               " .. math.max(3, 9) .. utf8.char(72, 105) .. #os.date('%Y')",
               "a,b,c2  3.19Hi4");
    EXPECT_OUT(e,
               "local co = coroutine.wrap(function(a) local b = "
               "coroutine.yield(a + 1) return b * 2 end) "
               "return co(1) .. ',' .. co(10)",
               "2,20");
    EXPECT_OUT(e, "local t = {1,2,3} table.insert(t, 1, 0) table.remove(t) "
                  "return table.concat(table.move(t, 1, 3, 2, {9}), ' ') "
                  ".. ' ' .. select('#', table.unpack(t))",
               "9 0 1 2 3");
    EXPECT_OUT(e, "return string.rep('ab', 3, '-') .. ('x'):rep(0)",
               "ab-ab-ab");
    EXPECT_OUT(e, "local ok, e = pcall(error, 'caught') return e", "caught");
    EXPECT_OUT(e, "return type(os.time()) .. type(os.clock())",
               "numbernumber");
    EXPECT_OUT(e, "return collectgarbage('count') > 0 and "
                  "collectgarbage() == 0",
               "true");
    EXPECT_OUT(e, "do local x <close> = setmetatable({}, {__close = "
                  "function() print('closed') end}) end return 'after'",
               "closed\nafter");
    /* nothing survives a call: its globals are its own, the libraries are
     * read-only (the hostile pairs are in test_isolation) */
    EXPECT_OUT(e, "leak = 'secret' string = nil return 'set'", "set");
    EXPECT_ERR(e, "string.upper = nil", RDMX_ERR_INVALID,
               "lambda:1: attempt to modify a read-only table");
    EXPECT_OUT(e, "return tostring(leak) .. ('x'):upper() .. string.upper('y')",
               "nilXY");
    rdmx_lambda_engine_destroy(e);
}

/* --- fresh states from an image ------------------------------------------ */

/* Run @p src on @p e; 1 if the call found a pooled state. */
static int pooled_call(rdmx_lambda_engine_t *e, const char *src,
                       const char *want, size_t *peak_p)
{
    rdmx_lambda_stats_t a, b;
    rdmx_lambda_result_t r;

    rdmx_lambda_engine_stats(e, &a);
    CHECK_OK(ev(e, src, NULL, &r));
    CHECKF(strcmp(r.output, want) == 0, "%s: got '%s', want '%s'", src,
           r.output, want);
    if (peak_p != NULL)
        *peak_p = r.memory_peak;
    rdmx_lambda_result_free(&r);
    rdmx_lambda_engine_stats(e, &b);
    CHECK(b.states_ready + b.states_built ==
          a.states_ready + a.states_built + 1);
    return b.states_ready == a.states_ready + 1;
}

/* Call function @p i (of those test_fresh_states made) by id and check its
 * output. */
static void call_fn(rdmx_lambda_engine_t *e, const uint8_t *id, int i)
{
    rdmx_lambda_result_t r;
    char want[32];

    snprintf(want, sizeof(want), "f%d:nil", i);
    CHECK_OK(rdmx_lambda_engine_call(e, id, NULL, &r));
    CHECKF(strcmp(r.output, want) == 0, "function %d by id: got '%s'", i,
           r.output);
    rdmx_lambda_result_free(&r);
}

static void test_fresh_states(void)
{
    rdmx_lambda_params_t p = {.field_mask =
                                  RDMX_LAMBDA_PARAM_FIELD_SPARE_STATES |
                                  RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY |
                                  RDMX_LAMBDA_PARAM_FIELD_FRESH_STATES,
                              .max_memory = RDMX__LAMBDA_MIN_MEMORY,
                              .fresh_states = 1};
    enum { NFN = RDMX__LAMBDA_FN_IMAGES + 4 };
    uint8_t ids[NFN][RDMX_LAMBDA_ID_LEN];
    rdmx_lambda_engine_t *e, *big, *x = NULL;
    rdmx_lambda_result_t r;
    rdmx_lambda_stats_t s;
    size_t peak1 = 0, peak2 = 0;
    long before, after;
    char src[128];
    int i, round;

    th_log("fresh states: every call from an image of the pristine state");
    /* spare_states is still checked, though fresh states need none now;
     * fresh_states 0 (once reused states) is accepted and changes
     * nothing */
    p.fresh_states = 0;
    x = mk_engine(&p);
    EXPECT_OUT(x, "leak = 'secret' return 'set'", "set");
    EXPECT_OUT(x, "return tostring(leak)", "nil");
    rdmx_lambda_engine_destroy(x);
    x = NULL;
    p.fresh_states = 1;
    p.spare_states = RDMX__LAMBDA_MAX_SPARES + 1;
    CHECK_ST(rdmx_lambda_engine_create(&p, &x), RDMX_ERR_INVALID);
    CHECKF(strstr(rdmx_error_detail(), "spare_states 65 over 64") != NULL,
           "detail: %s", rdmx_error_detail());
    CHECK(x == NULL);
    p.spare_states = 2;
    e = mk_engine(&p);

    /* the first call builds the state, the next ones take it again; the
     * accounting is the same either way (compiled each time: no cache),
     * and the same call after call (from the function's image) */
    p.field_mask |= RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES;
    p.cache_entries = 0;
    x = mk_engine(&p);
    CHECK(pooled_call(x, "return 'a'", "a", &peak1) == 0);
    CHECK(pooled_call(x, "return 'a'", "a", &peak2) == 1);
    th_log("  memory peak of 'return' compiled: %zu B in a new state, %zu B "
           "in the pooled one",
           peak1, peak2);
    CHECKF(peak2 == peak1, "peak %zu B pooled, %zu B built", peak2, peak1);
    rdmx_lambda_engine_destroy(x);
    CHECK(pooled_call(e, "return 'a'", "a", NULL) == 0);
    CHECK(pooled_call(e, "return 'a'", "a", &peak1) == 1);
    for (i = 0; i < 3; i++) {
        CHECK(pooled_call(e, "return 'a'", "a", &peak2) == 1);
        CHECKF(peak2 == peak1, "peak %zu B, then %zu B", peak1, peak2);
    }

    /* the same state, one call after the other: nothing the first leaves,
     * globals, the string library or the contract's tables, reaches the
     * second; nor the interned strings of the first (a fresh state's
     * string table holds only the sandbox's) */
    for (round = 0; round < 3; round++) {
        CHECK(pooled_call(e,
                          "leak = 'secret' string = nil "
                          "input = 'x' args[9] = 1 KEYS[9] = 1 "
                          "ARGV[1] = 1 return 'set'",
                          "set", NULL) == 1);
        CHECK(pooled_call(e,
                          "return tostring(leak) .. ('x'):upper() .. "
                          "input .. tostring(args[9]) .. "
                          "tostring(KEYS[9]) .. #ARGV",
                          "nilXnilnil0", NULL) == 1);
    }
    rdmx_lambda_engine_stats(e, &s);
    CHECK(s.states_built == 1);

    /* The interned strings of an earlier call: making a string the state
     * already holds allocates nothing, which collectgarbage('count')
     * shows (the probe sees it within a call: the second 'planted-secret1'
     * costs nothing); the string an earlier call made costs as much as a
     * new one. */
    {
        double made_planted, made_new, made_again;
        EXPECT_OUT(e, "keep = 'planted-secre' .. 't1' return 1", "1");
        CHECK_OK(ev(e,
                    "local a = collectgarbage('count') "
                    "local s = 'planted-secre' .. 't1' "
                    "local b = collectgarbage('count') "
                    "local t = 'planted-secre' .. 'T1' "
                    "local c = collectgarbage('count') "
                    "local u = 'planted-secre' .. 't1' "
                    "local d = collectgarbage('count') "
                    "return ((b - a) * 1024) .. ' ' .. ((c - b) * 1024) "
                    ".. ' ' .. ((d - c) * 1024)",
                    NULL, &r));
        CHECK(sscanf(r.output, "%lf %lf %lf", &made_planted, &made_new,
                     &made_again) == 3);
        th_log("  bytes to make the earlier call's string %.0f, a new one "
               "%.0f, the same again %.0f",
               made_planted, made_new, made_again);
        CHECKF(made_again == 0 && made_new > 0, "the probe sees nothing (%s)",
               r.output);
        CHECKF(made_planted == made_new,
               "the state held an earlier call's string (%s)", r.output);
        rdmx_lambda_result_free(&r);
    }

    /* math.random: every call that uses it gets numbers of its own, the
     * first call of the state and a call after calls that did not use it
     * included (the images hold one generator state) */
    {
        char seen[6][32];
        int k, j;
        for (k = 0; k < 6; k++) {
            EXPECT_OUT(e, "return 1", "1");
            CHECK_OK(ev(e, "return math.random(0)", NULL, &r));
            snprintf(seen[k], sizeof(seen[k]), "%s", r.output);
            rdmx_lambda_result_free(&r);
            for (j = 0; j < k; j++)
                CHECKF(strcmp(seen[j], seen[k]) != 0,
                       "calls %d and %d drew the same number %s", j, k,
                       seen[k]);
        }
    }

    /* the budget holds as before (256 KiB here), and the next call is
     * whole again */
    EXPECT_ERR(e, "local s = string.rep('x', 300000) return #s",
               RDMX_ERR_NO_RESOURCE, "memory budget");
    EXPECT_OUT(e, "return #string.rep('x', 100000)", "100000");

    /* more functions by id than a state keeps images of (LRU): each call
     * runs its own function, whichever image it begins from */
    for (i = 0; i < NFN; i++) {
        char want[32];
        snprintf(src, sizeof(src),
                 "local r = 'f%d:' .. tostring(seen) seen = 1 return r", i);
        snprintf(want, sizeof(want), "f%d:nil", i);
        CHECK_OK(ev(e, src, NULL, &r));
        CHECKF(strcmp(r.output, want) == 0, "eval %d: %s", i, r.output);
        memcpy(ids[i], r.id, RDMX_LAMBDA_ID_LEN);
        rdmx_lambda_result_free(&r);
    }
    for (round = 0; round < 3; round++)
        for (i = 0; i < NFN; i++)
            call_fn(e, ids[(i * 7 + round) % NFN], (i * 7 + round) % NFN);
    for (i = 0; i < 50; i++)
        call_fn(e, ids[i % 3], i % 3);
    rdmx_lambda_engine_destroy(e);

    /* memory a call used beyond its image goes back to the system when
     * the call ends */
    p.field_mask = RDMX_LAMBDA_PARAM_FIELD_MAX_INSTRUCTIONS |
                   RDMX_LAMBDA_PARAM_FIELD_MAX_TIME;
    p.max_instructions = 10000000000ull; /* the memory budget stops first */
    /* (the 16 MiB string below copies 2 GiB on its way: over a second
     * under a sanitizer on a loaded host, and time is not tested here) */
    p.max_time_ms = 30000;
    big = mk_engine(&p);
    EXPECT_OUT(big, "return 'warm'", "warm");
    before = th_rss_kib(getpid());
    CHECK_OK(ev(big,
                "local t = {} for i = 1, 40 do t[i] = string.rep('x', 1 << 20)"
                " .. i end return #t",
                NULL, &r));
    CHECK(strcmp(r.output, "40") == 0);
    after = th_rss_kib(getpid());
    th_log("  RSS %ld KiB, after a call that held %zu KiB %ld KiB", before,
           r.memory_peak / 1024, after);
    CHECKF(r.memory_peak > ((size_t)40 << 20), "peak %zu", r.memory_peak);
    CHECKF(after - before < 8 * 1024,
           "a state kept the last call's memory: RSS %ld -> %ld KiB", before,
           after);
    rdmx_lambda_result_free(&r);

    /* freed memory of one size serves other sizes (the budget, 64 MiB,
     * is what stops a call, not the arena): a 16 MiB string grown 64 KiB
     * at a time, then strings of ever larger sizes up to 19 MB, each
     * dropped before the next */
    EXPECT_OUT(big,
               "local s = '' for i = 1, 256 do s = s .. string.rep('x', "
               "65536) end return #s",
               "16777216");
    EXPECT_OUT(big,
               "local n, s, k = 0, nil, ('y'):rep(1000) for i = 1, 60 do "
               "s = k:rep(1000 + i * 300) n = n + #s % 7 end return n > 0",
               "true");
    rdmx_lambda_engine_destroy(big);
}

/* --- cache ----------------------------------------------------------------- */

static void test_cache(void)
{
    rdmx_lambda_params_t p = {.field_mask =
                                  RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES,
                              .cache_entries = 4};
    rdmx_lambda_engine_t *e = mk_engine(&p);
    rdmx_lambda_result_t r;
    rdmx_lambda_stats_t s;
    uint8_t ids[6][RDMX_LAMBDA_ID_LEN], zero[RDMX_LAMBDA_ID_LEN] = {0};
    char src[64], hex[65];
    rdmx_lambda_call_params_t call = {.field_mask =
                                          RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT,
                                      .input = "abc",
                                      .input_len = 3};
    unsigned i;

    th_log("cache: by id after eval, NOT_FOUND, eviction");
    CHECK_ST(rdmx_lambda_engine_call(e, zero, NULL, &r), RDMX_ERR_NOT_FOUND);
    CHECK(strstr(r.message, "not cached here; send its source") != NULL);
    for (i = 0; i < 6; i++) {
        snprintf(src, sizeof(src), "return input .. %u", i);
        CHECK_OK(ev(e, src, &call, &r));
        CHECK(!r.cached);
        rdmx_lambda_id(src, strlen(src), ids[i]);
        CHECK(memcmp(ids[i], r.id, RDMX_LAMBDA_ID_LEN) == 0);
        rdmx_lambda_result_free(&r);
        /* by id: the same function, cached */
        CHECK_OK(rdmx_lambda_engine_call(e, ids[i], &call, &r));
        CHECK(r.cached);
        snprintf(src, sizeof(src), "abc%u", i);
        CHECK(strcmp(r.output, src) == 0);
        rdmx_lambda_result_free(&r);
    }
    /* 4 entries: 0 and 1 were evicted (least recently used) */
    CHECK_ST(rdmx_lambda_engine_call(e, ids[0], &call, &r),
             RDMX_ERR_NOT_FOUND);
    CHECK_ST(rdmx_lambda_engine_call(e, ids[1], &call, &r),
             RDMX_ERR_NOT_FOUND);
    for (i = 2; i < 6; i++) {
        CHECK_OK(rdmx_lambda_engine_call(e, ids[i], &call, &r));
        rdmx_lambda_result_free(&r);
    }
    /* use 2, add a new one: 3 goes (LRU), 2 stays */
    CHECK_OK(rdmx_lambda_engine_call(e, ids[2], &call, &r));
    rdmx_lambda_result_free(&r);
    CHECK_OK(ev(e, "return 'new'", NULL, &r));
    rdmx_lambda_result_free(&r);
    CHECK_ST(rdmx_lambda_engine_call(e, ids[3], &call, &r),
             RDMX_ERR_NOT_FOUND);
    CHECK_OK(rdmx_lambda_engine_call(e, ids[2], &call, &r));
    rdmx_lambda_result_free(&r);
    /* eval of a cached source uses the cache */
    snprintf(src, sizeof(src), "return input .. %u", 5);
    CHECK_OK(ev(e, src, &call, &r));
    CHECK(r.cached && strcmp(r.output, "abc5") == 0);
    rdmx_lambda_result_free(&r);
    /* a runtime error still caches the function; a syntax error does not */
    CHECK_ST(ev(e, "error('rt')", NULL, &r), RDMX_ERR_INVALID);
    memcpy(ids[0], r.id, RDMX_LAMBDA_ID_LEN);
    CHECK_ST(rdmx_lambda_engine_call(e, ids[0], NULL, &r), RDMX_ERR_INVALID);
    CHECK(strstr(r.message, "rt") != NULL && r.cached);
    CHECK_ST(ev(e, "syntax(", NULL, &r), RDMX_ERR_INVALID);
    memcpy(ids[0], r.id, RDMX_LAMBDA_ID_LEN);
    CHECK_ST(rdmx_lambda_engine_call(e, ids[0], NULL, &r), RDMX_ERR_NOT_FOUND);
    rdmx_lambda_engine_stats(e, &s);
    CHECK_EQ_U64(s.cache_entries, 4);
    CHECKF(s.cache_evictions == 4, "evictions %llu",
           (unsigned long long)s.cache_evictions);
    CHECKF(s.syntax_errors == 1, "%llu", (unsigned long long)s.syntax_errors);
    CHECK(s.cache_bytes > 0 && s.cache_hits > 0 && s.cache_misses > 0);
    rdmx_lambda_id_hex(ids[0], hex);
    CHECK(strlen(hex) == 64);
    th_log("  id of \"return input .. 0\": %s", hex);
    rdmx_lambda_engine_destroy(e);

    /* a byte bound: only what fits stays */
    p.field_mask = RDMX_LAMBDA_PARAM_FIELD_CACHE_BYTES;
    p.cache_bytes = 1;
    e = mk_engine(&p);
    CHECK_OK(ev(e, "return 1", NULL, &r));
    rdmx_lambda_result_free(&r);
    memcpy(ids[0], r.id, RDMX_LAMBDA_ID_LEN);
    CHECK_ST(rdmx_lambda_engine_call(e, ids[0], NULL, &r), RDMX_ERR_NOT_FOUND);
    rdmx_lambda_engine_destroy(e);
    /* no cache */
    p.field_mask = RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES;
    p.cache_entries = 0;
    e = mk_engine(&p);
    CHECK_OK(ev(e, "return 1", NULL, &r));
    rdmx_lambda_result_free(&r);
    CHECK_OK(ev(e, "return 1", NULL, &r));
    CHECK(!r.cached);
    rdmx_lambda_result_free(&r);
    memcpy(ids[0], r.id, RDMX_LAMBDA_ID_LEN);
    CHECK_ST(rdmx_lambda_engine_call(e, ids[0], NULL, &r), RDMX_ERR_NOT_FOUND);
    rdmx_lambda_engine_destroy(e);
}

/* --- threads --------------------------------------------------------------- */

#define NTHREADS 4
static int thread_calls;

typedef struct {
    rdmx_lambda_engine_t *e;
    unsigned idx;
    unsigned budget_stops;
} thr_t;

static void *thread_main(void *arg)
{
    thr_t *t = arg;
    unsigned i;
    char in[64], want[128], src[128];
    for (i = 0; i < (unsigned)thread_calls; i++) {
        rdmx_lambda_result_t r;
        rdmx_lambda_arg_t a = {in, 0};
        rdmx_lambda_call_params_t c = {.field_mask =
                                           RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT |
                                           RDMX_LAMBDA_CALL_PARAM_FIELD_ARGS,
                                       .input = in,
                                       .args = &a,
                                       .nargs = 1};
        unsigned k = i % 8; /* 8 sources shared by all threads */
        rdmx_status_t st;
        snprintf(in, sizeof(in), "t%u-i%u", t->idx, i);
        c.input_len = a.len = strlen(in);
        if (i % 499 == 13) {
            st = ev(t->e, "while true do end", &c, &r);
            CHECKF(st == RDMX_ERR_NO_RESOURCE, "%s: %s (%.1f ms)", rdmx_status_name(st), r.message, r.elapsed_ns / 1e6);
            t->budget_stops++;
            continue;
        }
        snprintf(src, sizeof(src),
                 "leak = input return input:upper() .. '/' .. args[1] .. "
                 "'/%u/' .. tostring(rawget(_G, 'x%u'))",
                 k, t->idx);
        if (i % 3 == 0) {
            uint8_t id[RDMX_LAMBDA_ID_LEN];
            rdmx_lambda_id(src, strlen(src), id);
            st = rdmx_lambda_engine_call(t->e, id, &c, &r);
            if (st == RDMX_ERR_NOT_FOUND)
                st = ev(t->e, src, &c, &r);
        } else
            st = ev(t->e, src, &c, &r);
        CHECKF(st == RDMX_OK, "%s: %s", rdmx_status_name(st), r.message);
        snprintf(want, sizeof(want), "T%u-I%u/%s/%u/nil", t->idx, i, in, k);
        CHECKF(strcmp(r.output, want) == 0, "got %s want %s", r.output,
               want);
        rdmx_lambda_result_free(&r);
    }
    return NULL;
}

static void test_threads(void)
{
    /* no time limit: on a loaded machine the budget stops must still be
     * instruction stops */
    rdmx_lambda_params_t p = {.field_mask = RDMX_LAMBDA_PARAM_FIELD_MAX_TIME,
                              .max_time_ms = RDMX_TIMEOUT_INFINITE};
    rdmx_lambda_engine_t *e = mk_engine(&p);
    pthread_t th[NTHREADS];
    thr_t t[NTHREADS];
    rdmx_lambda_stats_t s;
    unsigned i, stops = 0;
    double ms = th_now_ms();

    thread_calls = TH_SANITIZED ? 500 : 3000;
    th_log("threads: %d x %d calls", NTHREADS, thread_calls);
    for (i = 0; i < NTHREADS; i++) {
        t[i].e = e;
        t[i].idx = i;
        t[i].budget_stops = 0;
        CHECK(pthread_create(&th[i], NULL, thread_main, &t[i]) == 0);
    }
    for (i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        stops += t[i].budget_stops;
    }
    ms = th_now_ms() - ms;
    rdmx_lambda_engine_stats(e, &s);
    /* every call counted (plus the by-id attempts that got NOT_FOUND) */
    CHECK(s.calls >= (uint64_t)NTHREADS * thread_calls);
    CHECK_EQ_U64(s.errors - stops, s.calls - (uint64_t)NTHREADS * thread_calls);
    CHECK_EQ_U64(s.budget_instructions, stops);
    CHECKF(s.cache_entries == 8 * NTHREADS + 1, "cache entries %llu",
           (unsigned long long)s.cache_entries);
    th_log("  %.0f ms, %u budget stops, cache hits %llu misses %llu", ms,
           stops, (unsigned long long)s.cache_hits,
           (unsigned long long)s.cache_misses);
    rdmx_lambda_engine_destroy(e);
}

/* --- kv environment ---------------------------------------------------------- */

#define FAKE_N 32
typedef struct {
    pthread_mutex_t mu;
    struct {
        char key[64];
        char *val;
        size_t vlen;
        uint64_t ttl;
        int used;
    } e[FAKE_N];
    unsigned gets_too_big;
} fakekv_t;

static int fk_find(fakekv_t *f, const void *k, size_t kl)
{
    int i;
    for (i = 0; i < FAKE_N; i++)
        if (f->e[i].used && strlen(f->e[i].key) == kl &&
            memcmp(f->e[i].key, k, kl) == 0)
            return i;
    return -1;
}

static rdmx_status_t fk_get(void *ctx, const void *k, size_t kl, void *buf,
                            size_t cap, size_t *vlen_p)
{
    fakekv_t *f = ctx;
    rdmx_status_t st = RDMX_OK;
    int i;
    pthread_mutex_lock(&f->mu);
    i = fk_find(f, k, kl);
    if (i < 0)
        st = RDMX_ERR_NOT_FOUND;
    else {
        *vlen_p = f->e[i].vlen;
        if (f->e[i].vlen > cap) {
            f->gets_too_big++;
            st = RDMX_ERR_TOO_BIG;
        } else
            memcpy(buf, f->e[i].val, f->e[i].vlen);
    }
    pthread_mutex_unlock(&f->mu);
    return st;
}

static rdmx_status_t fk_put(void *ctx, const void *k, size_t kl,
                            const void *v, size_t vl, uint64_t ttl)
{
    fakekv_t *f = ctx;
    int i;
    if (kl == 2 && memcmp(k, "ro", 2) == 0)
        return rdmx__error(RDMX_ERR_DENIED, "key ro is read-only");
    if (kl == 4 && memcmp(k, "full", 4) == 0)
        return RDMX_ERR_NO_MEMORY; /* no detail: the status's text */
    if (kl >= 64)
        return rdmx__error(RDMX_ERR_INVALID, "key of %zu bytes", kl);
    pthread_mutex_lock(&f->mu);
    i = fk_find(f, k, kl);
    if (i < 0)
        for (i = 0; i < FAKE_N && f->e[i].used; i++)
            ;
    CHECK(i < FAKE_N);
    free(f->e[i].val);
    memcpy(f->e[i].key, k, kl);
    f->e[i].key[kl] = '\0';
    f->e[i].val = th_alloc(vl);
    memcpy(f->e[i].val, v, vl);
    f->e[i].vlen = vl;
    f->e[i].ttl = ttl;
    f->e[i].used = 1;
    pthread_mutex_unlock(&f->mu);
    return RDMX_OK;
}

static rdmx_status_t fk_delete(void *ctx, const void *k, size_t kl)
{
    fakekv_t *f = ctx;
    int i;
    pthread_mutex_lock(&f->mu);
    i = fk_find(f, k, kl);
    if (i >= 0) {
        free(f->e[i].val);
        f->e[i].val = NULL;
        f->e[i].used = 0;
    }
    pthread_mutex_unlock(&f->mu);
    return i >= 0 ? RDMX_OK : RDMX_ERR_NOT_FOUND;
}

static rdmx_status_t fk_exists(void *ctx, const void *k, size_t kl)
{
    fakekv_t *f = ctx;
    int i;
    if (kl == 5 && memcmp(k, "crash", 5) == 0)
        return RDMX_ERR_IO;
    pthread_mutex_lock(&f->mu);
    i = fk_find(f, k, kl);
    pthread_mutex_unlock(&f->mu);
    return i >= 0 ? RDMX_OK : RDMX_ERR_NOT_FOUND;
}

static void test_kv(void)
{
    static fakekv_t f;
    rdmx_lambda_env_t env = {&f, fk_get, fk_put, fk_delete, fk_exists};
    rdmx_lambda_env_t get_only = {&f, fk_get, NULL, NULL, NULL};
    rdmx_lambda_call_params_t call = {
        .field_mask = RDMX_LAMBDA_CALL_PARAM_FIELD_ENV, .env = &env};
    /* no time limit: the instruction budget must be what stops the kv loop
     * below, however slow the build or busy the machine */
    rdmx_lambda_params_t np = {.field_mask = RDMX_LAMBDA_PARAM_FIELD_MAX_TIME,
                               .max_time_ms = RDMX_TIMEOUT_INFINITE};
    rdmx_lambda_engine_t *e = mk_engine(&np);
    int i;

    th_log("kv: get/put/delete/exists wired to the host's env");
    pthread_mutex_init(&f.mu, NULL);
    expect_out_(__FILE__, __LINE__, e,
                "assert(kv.get('a') == nil) "
                "assert(kv.put('a', 'x') == true) "
                "assert(kv.get('a') == 'x') "
                "assert(kv.exists('a') == true) "
                "assert(kv.delete('a') == true) "
                "assert(kv.delete('a') == false) "
                "assert(kv.exists('a') == false) "
                "assert(kv.put('n', 42, 1500)) "
                "assert(kv.get('n') == '42') "
                "kv.put('big', string.rep('z', 100000), 7) "
                "assert(#kv.get('big') == 100000) "
                "kv.put('bin', 'a\\0b') assert(#kv.get('bin') == 3) "
                "return 'kv ok'",
                &call, "kv ok");
    i = fk_find(&f, "n", 1);
    CHECK(i >= 0 && f.e[i].ttl == 1500 && f.e[i].vlen == 2);
    i = fk_find(&f, "big", 3);
    CHECK(i >= 0 && f.e[i].ttl == 7 && f.e[i].vlen == 100000);
    CHECK(f.gets_too_big >= 1); /* the large value took the retry path */

    th_log("kv: errors");
    expect_err_(__FILE__, __LINE__, e, "kv.put('ro', 'x')", &call,
                RDMX_ERR_INVALID,
                "kv.put: key ro is read-only (RDMX_ERR_DENIED)");
    expect_err_(__FILE__, __LINE__, e, "kv.put('full', 'x')", &call,
                RDMX_ERR_INVALID, "kv.put: out of memory (RDMX_ERR_NO_MEMORY)");
    expect_err_(__FILE__, __LINE__, e, "return kv.exists('crash')", &call,
                RDMX_ERR_INVALID, "kv.exists: transport I/O error");
    expect_out_(__FILE__, __LINE__, e,
                "local ok, err = pcall(kv.put, 'ro', 'x') return err", &call,
                "kv.put: key ro is read-only (RDMX_ERR_DENIED)");
    expect_err_(__FILE__, __LINE__, e, "kv.get({})", &call, RDMX_ERR_INVALID,
                "bad argument #1");
    expect_err_(__FILE__, __LINE__, e, "kv.put('k')", &call,
                RDMX_ERR_INVALID, "bad argument #2");
    expect_err_(__FILE__, __LINE__, e, "kv.put('k', 'v', -1)", &call,
                RDMX_ERR_INVALID, "ttl_ms must be >= 0");
    CHECK(fk_find(&f, "ro", 2) < 0 && fk_find(&f, "k", 1) < 0);
    /* a value larger than the memory budget cannot be read into it */
    {
        rdmx_lambda_params_t p = {.field_mask =
                                      RDMX_LAMBDA_PARAM_FIELD_MAX_MEMORY,
                                  .max_memory = 256 * 1024};
        rdmx_lambda_engine_t *se = mk_engine(&p);
        char *v = th_alloc(512 * 1024);
        memset(v, 'v', 512 * 1024);
        CHECK_OK(fk_put(&f, "huge", 4, v, 512 * 1024, 0));
        free(v);
        expect_err_(__FILE__, __LINE__, se, "return #kv.get('huge')", &call,
                    RDMX_ERR_NO_RESOURCE, "memory budget");
        rdmx_lambda_engine_destroy(se);
    }
    /* partial env: only what the host gives */
    call.env = &get_only;
    expect_out_(__FILE__, __LINE__, e,
                "return type(kv.get) .. type(kv.put) .. #kv.get('n')", &call,
                "functionnil2");
    /* kv work counts against the budgets */
    call.env = &env;
    expect_err_(__FILE__, __LINE__, e, "while true do kv.exists('a') end",
                &call, RDMX_ERR_NO_RESOURCE, "instruction budget");
    for (i = 0; i < FAKE_N; i++)
        free(f.e[i].val);
    rdmx_lambda_engine_destroy(e);
}

/* --- natives and plugins ----------------------------------------------------- */

static rdmx_status_t nat_rev(const void *in, size_t len,
                             rdmx_lambda_output_t *out, void *arg)
{
    const char *p = in;
    size_t i;
    CHECK(arg == (void *)&thread_calls);
    for (i = len; i > 0; i--) {
        rdmx_status_t st = rdmx_lambda_output_append(out, p + i - 1, 1);
        if (st != RDMX_OK)
            return st;
    }
    return RDMX_OK;
}

static rdmx_status_t nat_greedy(const void *in, size_t len,
                                rdmx_lambda_output_t *out, void *arg)
{
    (void)in;
    (void)len;
    (void)arg;
    /* ignores the append error: the engine still reports it */
    while (rdmx_lambda_output_append(out, "0123456789", 10) == RDMX_OK)
        ;
    return RDMX_OK;
}

/* cc -shared -fPIC @p src into @p so; the include dirs are the project's
 * and the build's (rdmx/version.h) */
static void compile_plugin(const char *src, const char *so)
{
    char cmd[2048], file[512], inc[512];
    const char *cc = getenv("CC") != NULL ? getenv("CC") : "cc";
    int rc;
    snprintf(file, sizeof(file), "%s", __FILE__);
    snprintf(inc, sizeof(inc), "%s/../include", dirname(file));
    snprintf(cmd, sizeof(cmd),
             "%s -shared -fPIC -O1 -I'%s' -I'%s' -o '%s' '%s' 2>&1", cc, inc,
             RDMX_GENERATED_INCLUDE_DIR, so, src);
    rc = system(cmd);
    CHECKF(rc == 0, "%s failed (%d)", cmd, rc);
    chmod(so, 0755);
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    CHECK(fp != NULL);
    fputs(text, fp);
    fclose(fp);
}

static rdmx_status_t plugin_dir_engine(const char *dir,
                                       rdmx_lambda_engine_t **e)
{
    rdmx_lambda_params_t p = {.field_mask = RDMX_LAMBDA_PARAM_FIELD_PLUGIN_DIR |
                                            RDMX_LAMBDA_PARAM_FIELD_MAX_OUTPUT,
                              .plugin_dir = dir,
                              .max_output = 64 * 1024};
    return rdmx_lambda_engine_create(&p, e);
}

static void test_natives(void)
{
    char dir[512], path[600], src[512];
    rdmx_lambda_engine_t *e;
    rdmx_lambda_result_t r;
    rdmx_lambda_stats_t s;
    char *big;

    th_log("natives: the sample plugin");
#ifdef RDMX_LAMBDA_PLUGIN_DIR
    snprintf(dir, sizeof(dir), "%s", RDMX_LAMBDA_PLUGIN_DIR);
    th_log("  built by CMake in %s", dir);
#else
    {
        char file[512];
        snprintf(dir, sizeof(dir), "%s/good", tmpdir);
        CHECK(mkdir(dir, 0755) == 0);
        snprintf(file, sizeof(file), "%s", __FILE__);
        snprintf(src, sizeof(src), "%s/plugins/upper.c", dirname(file));
        snprintf(path, sizeof(path), "%s/upper.so", dir);
        compile_plugin(src, path);
        th_log("  compiled into %s", path);
    }
#endif
    CHECK_OK(plugin_dir_engine(dir, &e));
    CHECK_OK(rdmx_lambda_engine_native(e, "upper", "hello, World", 12, &r));
    CHECK(r.output_len == 12 && strcmp(r.output, "HELLO, WORLD") == 0);
    rdmx_lambda_result_free(&r);
    CHECK_OK(rdmx_lambda_engine_native(e, "upper", NULL, 0, &r));
    CHECK(r.output_len == 0 && r.output != NULL);
    rdmx_lambda_result_free(&r);
    CHECK_ST(rdmx_lambda_engine_native(e, "upper.fail", "x", 1, &r),
             RDMX_ERR_INVALID);
    CHECK(strcmp(r.message, "upper.fail: fails on purpose") == 0);
    CHECK(strcmp(rdmx_error_detail(), r.message) == 0);
    CHECK_ST(rdmx_lambda_engine_native(e, "lower", "x", 1, &r),
             RDMX_ERR_NOT_FOUND);
    CHECK(strstr(r.message, "no native function \"lower\"") != NULL);
    big = th_alloc(100 * 1024);
    memset(big, 'a', 100 * 1024);
    CHECK_ST(rdmx_lambda_engine_native(e, "upper", big, 100 * 1024, &r),
             RDMX_ERR_TOO_BIG);
    CHECK_EQ_U64(r.limit, RDMX_LAMBDA_LIMIT_OUTPUT);
    free(big);
    /* direct registration, duplicates */
    CHECK_OK(rdmx_lambda_engine_register_native(e, "rev", nat_rev,
                                                &thread_calls));
    CHECK_OK(rdmx_lambda_engine_register_native(e, "greedy", nat_greedy,
                                                NULL));
    CHECK_ST(rdmx_lambda_engine_register_native(e, "upper", nat_rev, NULL),
             RDMX_ERR_EXISTS);
    CHECK_ST(rdmx_lambda_engine_register_native(e, "", nat_rev, NULL),
             RDMX_ERR_INVALID);
    CHECK_ST(rdmx_lambda_engine_register_native(
                 e, "a-name-that-is-far-too-long-for-the-native-table-of-the-lambda-"
                    "engine",
                 nat_rev, NULL),
             RDMX_ERR_INVALID);
    CHECK_OK(rdmx_lambda_engine_native(e, "rev", "abc", 3, &r));
    CHECK(strcmp(r.output, "cba") == 0);
    rdmx_lambda_result_free(&r);
    CHECK_ST(rdmx_lambda_engine_native(e, "greedy", "", 0, &r),
             RDMX_ERR_TOO_BIG);
    rdmx_lambda_engine_stats(e, &s);
    CHECK_EQ_U64(s.natives, 4);
    /* natives are not Lua globals */
    EXPECT_ERR(e, "return upper('x')", RDMX_ERR_INVALID, "global 'upper'");
    rdmx_lambda_engine_destroy(e);

    th_log("natives: broken plugins refuse the engine");
    {
        static const struct {
            const char *name, *code, *msg;
        } bad[] = {
            {"noinit", "int something(void) { return 0; }\n",
             "does not export rdmx_lambda_plugin_init"},
            {"initfails",
             "#include <rdmx/lambda.h>\n"
             "int rdmx_lambda_plugin_init(rdmx_lambda_registry_t *r)"
             " { (void)r; return 7; }\n",
             "returned 7"},
            {"dup",
             "#include <rdmx/lambda.h>\n"
             "static rdmx_status_t f(const void *i, size_t l, "
             "rdmx_lambda_output_t *o, void *a) { (void)i; (void)l; (void)o;"
             " (void)a; return RDMX_OK; }\n"
             "int rdmx_lambda_plugin_init(rdmx_lambda_registry_t *r) {"
             " rdmx_lambda_register_native(r, \"x\", f, 0);"
             " return rdmx_lambda_register_native(r, \"x\", f, 0) ? 1 : 0;"
             " }\n",
             "returned 1"},
        };
        unsigned i;
        for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            snprintf(dir, sizeof(dir), "%s/%s", tmpdir, bad[i].name);
            CHECK(mkdir(dir, 0755) == 0);
            snprintf(src, sizeof(src), "%s/%s.c", tmpdir, bad[i].name);
            write_file(src, bad[i].code);
            snprintf(path, sizeof(path), "%s/p.so", dir);
            compile_plugin(src, path);
            CHECK_ST(plugin_dir_engine(dir, &e), RDMX_ERR_INVALID);
            CHECKF(strstr(rdmx_error_detail(), bad[i].msg) != NULL,
                   "%s: %s", bad[i].name, rdmx_error_detail());
            th_log("  %s: %s", bad[i].name, rdmx_error_detail());
        }
        /* not a shared object */
        snprintf(dir, sizeof(dir), "%s/junk", tmpdir);
        CHECK(mkdir(dir, 0755) == 0);
        snprintf(path, sizeof(path), "%s/junk.so", dir);
        write_file(path, "not an ELF file\n");
        chmod(path, 0644);
        CHECK_ST(plugin_dir_engine(dir, &e), RDMX_ERR_INVALID);
        th_log("  junk: %s", rdmx_error_detail());
        /* world-writable file, then directory */
        chmod(path, 0666);
        CHECK_ST(plugin_dir_engine(dir, &e), RDMX_ERR_DENIED);
        CHECK(strstr(rdmx_error_detail(), "world-writable") != NULL);
        unlink(path);
        chmod(dir, 0777);
        CHECK_ST(plugin_dir_engine(dir, &e), RDMX_ERR_DENIED);
        chmod(dir, 0755);
        /* empty directory: fine; missing: refused */
        CHECK_OK(plugin_dir_engine(dir, &e));
        rdmx_lambda_engine_destroy(e);
        snprintf(dir, sizeof(dir), "%s/missing", tmpdir);
        CHECK_ST(plugin_dir_engine(dir, &e), RDMX_ERR_INVALID);
    }
}

/* --- the RPC request format --------------------------------------------------- */

static void decode_must_fail(rdmx__lambda_kind_t k, const unsigned char *b,
                             size_t len, int line)
{
    rdmx__lambda_req_t req;
    unsigned char *copy = th_alloc(len); /* exact size: ASan sees over-reads */
    memcpy(copy, b, len);
    if (rdmx__lambda_decode(k, copy, len, &req) != RDMX_ERR_PROTO)
        th_fail(__FILE__, line, "kind %d, %zu bytes: decoded", (int)k, len);
    free(copy);
}

static void test_wire(void)
{
    rdmx_lambda_engine_t *e = mk_engine(NULL);
    const char *args[] = {"x", "", "zz"};
    const char *src = "return input .. #args .. args[1] .. args[3] .. "
                      "#KEYS .. KEYS[1] .. #ARGV .. ARGV[2]";
    uint8_t id[RDMX_LAMBDA_ID_LEN];
    rdmx__lambda_req_t req;
    rdmx_lambda_result_t r;
    unsigned char *buf, *copy;
    size_t len, cut;
    unsigned k;

    th_log("wire: round trips, truncations, bad fields");
    CHECK_OK(rdmx_lambda_engine_register_native(e, "rev", nat_rev,
                                                &thread_calls));
    rdmx_lambda_id(src, strlen(src), id);
    {
        rdmx_lambda_arg_t a[3] = {{"x", 1}, {"", 0}, {"zz", 2}};
        rdmx_lambda_call_params_t c = {.field_mask =
                                           RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT |
                                           RDMX_LAMBDA_CALL_PARAM_FIELD_ARGS |
                                           RDMX_LAMBDA_CALL_PARAM_FIELD_NKEYS,
                                       .input = "in",
                                       .input_len = 2,
                                       .args = a,
                                       .nargs = 3,
                                       .nkeys = 1};
        CHECK_OK(ev(e, src, &c, &r)); /* cached for the CALL */
        rdmx_lambda_result_free(&r);
    }
    for (k = 0; k < 3; k++) {
        rdmx__lambda_kind_t kind = (rdmx__lambda_kind_t)k;
        void *b;
        CHECK_OK(rdmx__lambda_encode(kind, src, strlen(src), id, "rev", "in",
                                     2, args, 3, 1, &b, &len));
        buf = b;
        CHECK_OK(rdmx__lambda_decode(kind, buf, len, &req));
        CHECK(req.input_len == 2 && memcmp(req.input, "in", 2) == 0);
        if (kind != RDMX__LAMBDA_NATIVE)
            CHECK(req.nargs == 3 && req.nkeys == 1 && req.args[2].len == 2 &&
                  memcmp(req.args[2].data, "zz", 2) == 0 &&
                  req.args[1].len == 0);
        if (kind == RDMX__LAMBDA_EVAL)
            CHECK(req.source_len == strlen(src) &&
                  memcmp(req.source, src, req.source_len) == 0);
        if (kind == RDMX__LAMBDA_CALL)
            CHECK(memcmp(req.id, id, RDMX_LAMBDA_ID_LEN) == 0);
        if (kind == RDMX__LAMBDA_NATIVE)
            CHECK(req.name_len == 3 && memcmp(req.name, "rev", 3) == 0);
        /* served as a handler would */
        CHECK_OK(rdmx__lambda_serve(e, kind, &req, 0, NULL, &r, NULL));
        CHECKF(strcmp(r.output,
                      kind == RDMX__LAMBDA_NATIVE ? "ni" : "in3xzz1x2zz") == 0,
               "%s", r.output);
        rdmx_lambda_result_free(&r);
        /* every truncation and an extension are refused */
        for (cut = 0; cut < len; cut++)
            decode_must_fail(kind, buf, cut, __LINE__);
        copy = th_alloc(len + 1);
        memcpy(copy, buf, len);
        copy[len] = 'x';
        decode_must_fail(kind, copy, len + 1, __LINE__);
        memcpy(copy, buf, len);
        copy[0] = 2; /* version */
        decode_must_fail(kind, copy, len, __LINE__);
        copy[0] = 1;
        if (kind != RDMX__LAMBDA_NATIVE) {
            size_t off = kind == RDMX__LAMBDA_EVAL ? 8 : 36;
            copy[1] = 4; /* nkeys > nargs */
            decode_must_fail(kind, copy, len, __LINE__);
            copy[1] = 1;
            copy[2] = 0xff; /* nargs 255: lengths do not fit */
            decode_must_fail(kind, copy, len, __LINE__);
            copy[2] = 0x00;
            copy[3] = 0x01; /* nargs 256 */
            decode_must_fail(kind, copy, len, __LINE__);
            copy[2] = 3;
            copy[3] = 0;
            memset(copy + off, 0xff, 4); /* input length past the end */
            decode_must_fail(kind, copy, len, __LINE__);
        } else {
            copy[1] = 0; /* name length 0 */
            decode_must_fail(kind, copy, len, __LINE__);
            copy[1] = 64;
            decode_must_fail(kind, copy, len, __LINE__);
            copy[1] = 3;
            copy[2] = 1; /* reserved */
            decode_must_fail(kind, copy, len, __LINE__);
            copy[2] = 0;
            copy[RDMX__LAMBDA_NATIVE_HDR + 1] = '\0'; /* NUL in the name */
            decode_must_fail(kind, copy, len, __LINE__);
        }
        free(copy);
        free(buf);
    }
    /* random bytes never crash the decoder */
    {
        uint64_t x = 88172645463325252ull;
        unsigned i, j, ok = 0;
        for (i = 0; i < 20000; i++) {
            size_t n = (size_t)(i % 80);
            copy = th_alloc(n);
            for (j = 0; j < n; j++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                copy[j] = (unsigned char)(x >> 24);
                if (j == 0)
                    copy[j] = 1;
                else if ((j == 1 || j == 3) && (x & 1))
                    copy[j] = 0;
            }
            if (rdmx__lambda_decode((rdmx__lambda_kind_t)(i % 3), copy, n,
                                    &req) == RDMX_OK)
                ok++;
            free(copy);
        }
        th_log("  20000 random requests: %u decoded, the rest refused", ok);
    }
    /* encoder refusals */
    {
        void *b;
        CHECK_ST(rdmx__lambda_encode(RDMX__LAMBDA_NATIVE, NULL, 0, NULL, "",
                                     NULL, 0, NULL, 0, 0, &b, &len),
                 RDMX_ERR_INVALID);
        CHECK_ST(rdmx__lambda_encode(RDMX__LAMBDA_EVAL, "x", 1, NULL, NULL,
                                     NULL, 0, NULL, 256, 0, &b, &len),
                 RDMX_ERR_INVALID);
        CHECK_ST(rdmx__lambda_encode(RDMX__LAMBDA_EVAL, "x", 1, NULL, NULL,
                                     NULL, 0, args, 3, 4, &b, &len),
                 RDMX_ERR_INVALID);
        CHECK_ST(rdmx__lambda_encode(RDMX__LAMBDA_CALL, NULL, 0, NULL, NULL,
                                     NULL, 0, NULL, 0, 0, &b, &len),
                 RDMX_ERR_INVALID);
    }
    rdmx_lambda_engine_destroy(e);
}

/* --- per-call cost ------------------------------------------------------------ */

static double rate(rdmx_lambda_engine_t *e, const char *src, int by_id,
                   unsigned n)
{
    rdmx_lambda_result_t r;
    uint8_t id[RDMX_LAMBDA_ID_LEN];
    rdmx_lambda_call_params_t c = {.field_mask =
                                       RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT,
                                   .input = "x",
                                   .input_len = 1};
    double t;
    unsigned i;
    rdmx_lambda_id(src, strlen(src), id);
    CHECK_OK(ev(e, src, &c, &r)); /* warm (and cache) */
    rdmx_lambda_result_free(&r);
    t = th_now_ms();
    for (i = 0; i < n; i++) {
        rdmx_status_t st = by_id ? rdmx_lambda_engine_call(e, id, &c, &r)
                                 : ev(e, src, &c, &r);
        CHECKF(st == RDMX_OK, "%s", r.message);
        rdmx_lambda_result_free(&r);
    }
    t = th_now_ms() - t;
    return n / (t / 1000.0);
}

static void test_perf(void)
{
    rdmx_lambda_params_t p = {.field_mask =
                                  RDMX_LAMBDA_PARAM_FIELD_CACHE_ENTRIES,
                              .cache_entries = 0};
    rdmx_lambda_engine_t *nocache = mk_engine(&p), *e = mk_engine(NULL);
    unsigned n = TH_SANITIZED ? 2000 : 20000;
    static char big[8192];
    size_t off = 0;
    int i;
    const char *trivial = "return input";

    /* a ~6 KB function: 60 small local functions */
    for (i = 0; i < 60; i++)
        off += (size_t)snprintf(big + off, sizeof(big) - off,
                                "local function f%d(a, b) local t = {} for i "
                                "= 1, a do t[i] = b .. i end return #t end\n",
                                i);
    snprintf(big + off, sizeof(big) - off, "return input .. f1(2, 'x')");
    th_log("per call, 1 thread, %u calls:", n);
    th_log("  trivial, source (compiled):  %9.0f calls/s",
           rate(nocache, trivial, 0, n));
    th_log("  trivial, eval, cached:       %9.0f calls/s",
           rate(e, trivial, 0, n));
    th_log("  trivial, by id (bytecode):   %9.0f calls/s",
           rate(e, trivial, 1, n));
    th_log("  %zu B source, compiled:     %9.0f calls/s", strlen(big),
           rate(nocache, big, 0, n / 4));
    th_log("  %zu B source, by id:        %9.0f calls/s", strlen(big),
           rate(e, big, 1, n / 4));
    rdmx_lambda_engine_destroy(nocache);
    rdmx_lambda_engine_destroy(e);
}

int main(int argc, char **argv)
{
    char cmd[300];
    (void)argc;
    (void)argv;
    th_init("lambda_sandbox", 120);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rdmx_lambda_XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL);
    chmod(tmpdir, 0755);
    test_contract();
    test_isolation(0);
    test_isolation(1);
    test_fresh_states();
    test_sandbox();
    test_cache();
    test_kv();
    test_natives();
    test_wire();
    test_budgets();
    test_threads();
    test_perf();
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    CHECK(system(cmd) == 0);
    th_log("PASS");
    return 0;
}
