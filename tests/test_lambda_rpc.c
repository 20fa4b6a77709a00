/*
 * lambda_rpc: lambdas over RPC between real processes (docs/LAMBDA.md).
 *
 * Servers are child processes started by the launcher (kvd_launcher.h):
 * - "a": `rdmx-demo lambda --listen 0 --serve --workers 2 --plugin-dir DIR
 *   --max-instructions 5000000 --max-memory 16m --max-time-ms 5000`, with
 *   the sample plugin tests/plugins/upper.c (build/lambda-plugins);
 * - "b": `rdmx-demo lambda --listen 0 --serve --workers 1
 *   --max-instructions 1T --max-memory 1m --max-time-ms 150 --cache 1`;
 * - rdmx-kvd with lambdas (--max-value 1k, --lambda-max-instructions 2M,
 *   --plugin-dir DIR).
 * The client (this process) checks, part by part:
 *
 * - budgets: on "a" an endless loop ends with "instruction budget of
 *   5000000 exceeded" (RDMX_ERR_NO_RESOURCE), string doubling with "memory
 *   budget of 16777216 bytes exceeded", deep (non-tail) recursion with the
 *   memory budget too; on "b" the loop ends with "time budget of 150 ms
 *   exceeded" (RDMX_ERR_TIMEOUT) after 150 ms or more, doubling with "memory
 *   budget of 1048576 bytes exceeded" (so the options reach the engine).
 *   After every stop the same server answers a normal function correctly;
 *   the engine's counters (demo.stats) count each stop once.
 * - errors: a syntax error and runtime errors (nil index, error()) come
 *   back as RDMX_ERR_INVALID with Lua's message and line ("lambda:2:"); the
 *   runtime error is cached, so the second time it comes back by hash
 *   ("lambda.call: ..."); a syntax error is not ("lambda.eval: ..."); a
 *   table as the return value is refused.
 * - cache: rdmx_lambda_eval of a new function costs lambda.call (NOT_FOUND)
 *   then lambda.eval, the second call lambda.call only (the server's
 *   per-handler call counts in rdmx.stats and its cache hits/misses); a raw
 *   "lambda.call" (rdmx_call) with the SHA-256 of a sent source runs it,
 *   with a random id gives RDMX_ERR_NOT_FOUND and "not cached"; on "b"
 *   (cache of 1) a second function evicts the first, whose raw call is then
 *   NOT_FOUND and whose rdmx_lambda_eval resends the source and works.
 *   A function that returns nothing answers empty, by source and then by
 *   hash, one that prints and returns nil answers what it printed.
 * - sandbox: io, os.execute (the file it would create does not appear),
 *   require, debug, string.dump fail remotely with their Lua messages; a
 *   genuine Lua 5.4 binary chunk (lua_dump) is refused as the source and
 *   through load(..., "b"), while a text load() works.
 * - plugin: the native "upper" upper-cases, "upper.fail" returns its error
 *   and message, an unknown name is RDMX_ERR_NOT_FOUND; "b" has no plugins.
 * - malformed: hand-made lambda.eval/call/native requests (empty, short
 *   header, bad version, nargs 256, nkeys > nargs, lengths short and long,
 *   arg lengths beyond the payload, native names of 0 and 64 bytes, a NUL
 *   in the name, reserved bytes) each get RDMX_ERR_PROTO with a "lambda:"
 *   message; the server process is still alive and serves.
 * - concurrent: 4 threads, each with its own worker and channel to "a"
 *   (2 workers), 160 calls each: a shared checksum function with random
 *   inputs, a per-thread function with arguments, the native, and every
 *   20th call an endless loop; every output is checked against the same
 *   computation here, every loop is stopped.
 * - demo: the rdmx-demo lambda client against "a" (exit 0, output verified,
 *   call 2 from the cache), with --function/--input, with a function that
 *   does not compile (exit 1 and Lua's message); and a one-client server
 *   (without --serve) that exits 0 after its client verified.
 * - kvd: a function doing kv.put/kv.get through rdmx_kv_eval, its value then
 *   read by a plain rdmx_kv_get; kv.put of 2000 bytes over --max-value 1k
 *   fails with "exceeds max_value 1024" (uncaught: RDMX_ERR_INVALID;
 *   caught by pcall: false and the message) and stores nothing; an endless
 *   loop stops at --lambda-max-instructions; the native from --plugin-dir;
 *   `rdmx-kv eval FILE.lua KEY -- ARG` exits 0 with the output (5, then 2),
 *   and 2 with the message for the oversized put; the kvd's stats count
 *   the lambda calls and natives.
 * Finally every server gets SIGTERM and exits 0.
 *
 * Failed checks inside a part are reported and the test continues with the
 * next part (exit status 1 at the end), so one bug does not hide others.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "kvd_launcher.h"
#include "parts.h"

#include <rdmx/kv.h>
#include <rdmx/lambda.h>

#include <lauxlib.h>
#include <lua.h>

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Setup and helpers                                                        */
/* ------------------------------------------------------------------------ */

#define OUT_CAP    (1u << 20)
#define CALL_MS    (10000 * TH_SLOW) /* a call's deadline */
#define N_THREADS  4
#define N_CALLS    160 /* per thread */
#define BOMB_EVERY 20

static kvd_t srv_a, srv_b, kvd;
static rdmx_context_t *ctx;
static rdmx_worker_t *worker;
static rdmx_channel_t *ch_a, *ch_b;
static char plugin_dir[PATH_MAX];
static char tmpdir[64];
static char *out; /* OUT_CAP bytes */
static size_t out_len;
static char detail[1024]; /* rdmx_error_detail() of the last call */

/* A channel on @p w to @p addr, READY. A function holds its server worker
 * for up to its time budget, and heartbeats wait meanwhile: allow 10 s of
 * silence (the default is 1 s). */
static rdmx_channel_t *channel_on(rdmx_worker_t *w, const char *addr)
{
    rdmx_channel_params_t p;
    rdmx_channel_t *c = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CHANNEL_PARAM_FIELD_TIMEOUT |
                   RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                   RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT;
    p.timeout_ms = CALL_MS;
    p.heartbeat_ms = 250;
    p.heartbeat_timeout_ms = CALL_MS;
    CHECK_OK(rdmx_channel_create(w, addr, &p, &c));
    CHECK_OK(rdmx_channel_wait_ready(c, 20000 * TH_SLOW));
    return c;
}

/* The params of rdmx_lambda_eval: @p input (@p ilen bytes) and @p nargs
 * @p args, both given (the channel's deadline). */
static rdmx_lambda_eval_params_t eval_params(const void *input, size_t ilen,
                                             const char *const *args,
                                             unsigned nargs)
{
    rdmx_lambda_eval_params_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask =
        RDMX_LAMBDA_EVAL_PARAM_FIELD_INPUT | RDMX_LAMBDA_EVAL_PARAM_FIELD_ARGS;
    p.input = input;
    p.input_len = ilen;
    p.args = args;
    p.nargs = nargs;
    return p;
}

static void keep_detail(rdmx_status_t st)
{
    const char *d = rdmx_error_detail();

    snprintf(detail, sizeof(detail), "%s", st != RDMX_OK && d ? d : "");
}

/* rdmx_lambda_eval with a string input; output in out/out_len (NUL-ended),
 * the message in `detail`. */
static rdmx_status_t eval_on(rdmx_channel_t *c, const char *src,
                             const char *input)
{
    rdmx_lambda_eval_params_t ep =
        eval_params(input, input ? strlen(input) : 0, NULL, 0);
    rdmx_status_t st;

    out_len = 0;
    st = rdmx_lambda_eval(c, src, strlen(src), &ep, out, OUT_CAP - 1, &out_len);
    keep_detail(st);
    out[st == RDMX_OK ? out_len : 0] = '\0';
    return st;
}

#define EXPECT_OUT(c, src, input, want)                                        \
    do {                                                                       \
        EXPECT_OK(eval_on((c), (src), (input)));                               \
        EXPECT(out_len == strlen(want) && memcmp(out, want, out_len) == 0,     \
               "%s: output '%s', expected '%s'", (src), out, (want));          \
    } while (0)

/* The call must fail with @p want and a message containing @p sub. */
#define EXPECT_FAIL(c, src, input, want, sub)                                  \
    do {                                                                       \
        EXPECT_ST(eval_on((c), (src), (input)), (want));                       \
        EXPECT(strstr(detail, (sub)) != NULL, "%s: message '%s' lacks '%s'",   \
               (src), detail, (sub));                                          \
    } while (0)

/* rdmx_call with a hand-made payload; the message in `detail`. */
static rdmx_status_t raw_call(rdmx_channel_t *c, const char *method,
                              const void *req, size_t len)
{
    rdmx_status_t st;

    out_len = 0;
    st = rdmx_call(c, method, req, len, out, OUT_CAP - 1, NULL, &out_len);
    keep_detail(st);
    out[st == RDMX_OK ? out_len : 0] = '\0';
    return st;
}

/* The server's stats text (demo.stats: the engine's counters; rdmx.stats:
 * the RPC server's) into @p buf. */
static void stats_text(rdmx_channel_t *c, const char *method, char *buf,
                       size_t size)
{
    size_t len = 0;

    EXPECT_OK(rdmx_call(c, method, NULL, 0, buf, size - 1, NULL, &len));
    buf[len] = '\0';
}

/* Engine counter @p name of the server behind @p c. */
static uint64_t engine_stat(rdmx_channel_t *c, const char *name)
{
    char text[2048];

    stats_text(c, "demo.stats", text, sizeof(text));
    return stat_of(text, name);
}

/* Calls of handler @p name in the server's rdmx.stats table. */
static uint64_t handler_calls(rdmx_channel_t *c, const char *name)
{
    char text[8192], *p = text;
    size_t l = strlen(name);

    stats_text(c, "rdmx.stats", text, sizeof(text));
    while ((p = strstr(p, name)) != NULL) {
        if ((p == text || p[-1] == '\n') && p[l] == ' ')
            return strtoull(p + l, NULL, 10);
        p += l;
    }
    part_fail(__FILE__, __LINE__, "no handler %s in rdmx.stats:\n%s", name,
              text);
}

/* --- the wire format (docs/LAMBDA.md), by hand ---------------------------- */

static void le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* lambda.eval without args: 12-byte header, source, input. */
static size_t enc_eval(uint8_t *b, const char *src, const char *input)
{
    size_t sl = strlen(src), il = input ? strlen(input) : 0;

    b[0] = 1;
    b[1] = 0;
    le16(b + 2, 0);
    le32(b + 4, (uint32_t)sl);
    le32(b + 8, (uint32_t)il);
    memcpy(b + 12, src, sl);
    memcpy(b + 12 + sl, input ? input : "", il);
    return 12 + sl + il;
}

/* lambda.call without args: 40-byte header, input. */
static size_t enc_call(uint8_t *b, const uint8_t *id, const char *input)
{
    size_t il = input ? strlen(input) : 0;

    b[0] = 1;
    b[1] = 0;
    le16(b + 2, 0);
    memcpy(b + 4, id, RDMX_LAMBDA_ID_LEN);
    le32(b + 36, (uint32_t)il);
    memcpy(b + 40, input ? input : "", il);
    return 40 + il;
}

/* lambda.native: 8-byte header, name, input. */
static size_t enc_native(uint8_t *b, const char *name, size_t nl,
                         const char *input)
{
    size_t il = strlen(input);

    b[0] = 1;
    b[1] = (uint8_t)nl;
    le16(b + 2, 0);
    le32(b + 4, (uint32_t)il);
    memcpy(b + 8, name, nl);
    memcpy(b + 8 + nl, input, il);
    return 8 + nl + il;
}

/* --- a genuine Lua 5.4 binary chunk --------------------------------------- */

typedef struct {
    char buf[8192];
    size_t n;
} dump_t;

static int dump_w(lua_State *L, const void *p, size_t sz, void *ud)
{
    dump_t *d = ud;

    (void)L;
    if (d->n + sz > sizeof(d->buf))
        return 1;
    memcpy(d->buf + d->n, p, sz);
    d->n += sz;
    return 0;
}

static void make_bytecode(const char *src, dump_t *d)
{
    lua_State *L = luaL_newstate();

    CHECK(L != NULL);
    d->n = 0;
    CHECK(luaL_loadstring(L, src) == LUA_OK);
    CHECK(lua_dump(L, dump_w, d, 0) == 0);
    CHECK(d->n > 4 && d->buf[0] == 0x1b);
    lua_close(L);
}

/* The checksum the concurrent part's shared function computes. */
static const char sum_src[] =
    "local h = 0\n"
    "for i = 1, #input do h = (h * 31 + input:byte(i)) & 0xffffffff end\n"
    "return h\n";

static uint64_t sum_of(const uint8_t *p, size_t n)
{
    uint64_t h = 0;

    for (size_t i = 0; i < n; i++)
        h = (h * 31 + p[i]) & 0xffffffffu;
    return h;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    CHECKF(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

/* The file's first @p size - 1 bytes, NUL-terminated ("" if missing). */
static void read_file(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;

    if (f != NULL) {
        n = fread(buf, 1, size - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
}

/* ------------------------------------------------------------------------ */
/* budgets                                                                  */
/* ------------------------------------------------------------------------ */

static const char loop_src[] = "while true do end";
static const char double_src[] = "local s = 'x' while true do s = s .. s end";
static const char recurse_src[] =
    "local function f(n) return 1 + f(n + 1) end\nreturn f(1)";

static void still_serves(rdmx_channel_t *c, kvd_t *k)
{
    EXPECT(kvd_alive(k), "the server %s died", k->addr);
    EXPECT_OUT(c, "return 'still ' .. input", "serving", "still serving");
}

static void part_budgets(void)
{
    uint64_t ins0 = engine_stat(ch_a, "budget_instructions");
    uint64_t mem0 = engine_stat(ch_a, "budget_memory");
    uint64_t time_b0 = engine_stat(ch_b, "budget_time");
    uint64_t mem_b0 = engine_stat(ch_b, "budget_memory");
    double t0, dt;

    t0 = th_now_ms();
    EXPECT_FAIL(ch_a, loop_src, NULL, RDMX_ERR_NO_RESOURCE,
                "instruction budget of 5000000 exceeded");
    dt = th_now_ms() - t0;
    th_log("  a: endless loop stopped in %.0f ms: %s", dt, detail);
    EXPECT(dt < 4000.0 * TH_SLOW, "the loop took %.0f ms", dt);
    still_serves(ch_a, &srv_a);

    EXPECT_FAIL(ch_a, double_src, NULL, RDMX_ERR_NO_RESOURCE,
                "memory budget of 16777216 bytes exceeded");
    th_log("  a: string doubling: %s", detail);
    still_serves(ch_a, &srv_a);

    EXPECT_FAIL(ch_a, recurse_src, NULL, RDMX_ERR_NO_RESOURCE,
                "memory budget of 16777216 bytes exceeded");
    th_log("  a: deep recursion: %s", detail);
    still_serves(ch_a, &srv_a);

    EXPECT_EQ(engine_stat(ch_a, "budget_instructions"), ins0 + 1);
    EXPECT_EQ(engine_stat(ch_a, "budget_memory"), mem0 + 2);

    /* "b": time instead of instructions, 1 MiB of memory */
    t0 = th_now_ms();
    EXPECT_FAIL(ch_b, loop_src, NULL, RDMX_ERR_TIMEOUT,
                "time budget of 150 ms exceeded");
    dt = th_now_ms() - t0;
    th_log("  b: endless loop stopped in %.0f ms: %s", dt, detail);
    EXPECT(dt >= 145.0 && dt < 3000.0 * TH_SLOW,
           "the loop was stopped after %.0f ms (budget 150 ms)", dt);
    still_serves(ch_b, &srv_b);
    EXPECT_FAIL(ch_b, double_src, NULL, RDMX_ERR_NO_RESOURCE,
                "memory budget of 1048576 bytes exceeded");
    still_serves(ch_b, &srv_b);
    EXPECT_EQ(engine_stat(ch_b, "budget_time"), time_b0 + 1);
    EXPECT_EQ(engine_stat(ch_b, "budget_memory"), mem_b0 + 1);
}

/* ------------------------------------------------------------------------ */
/* errors                                                                   */
/* ------------------------------------------------------------------------ */

static void part_errors(void)
{
    static const char syntax[] = "local x = 1\nreturn x +";
    static const char nil_index[] = "local t = nil\nreturn t.x";
    static const char thrown[] = "error('boom ' .. input)";
    uint64_t syn0 = engine_stat(ch_a, "syntax_errors");

    EXPECT_FAIL(ch_a, syntax, NULL, RDMX_ERR_INVALID, "lambda:2:");
    EXPECT(strstr(detail, "near <eof>") != NULL, "syntax error: '%s'", detail);
    EXPECT(strncmp(detail, "lambda.eval: ", 13) == 0,
           "a syntax error comes from lambda.eval: '%s'", detail);
    /* not cached: the second time it is sent (and refused) again */
    EXPECT_FAIL(ch_a, syntax, NULL, RDMX_ERR_INVALID, "lambda.eval: lambda:2:");
    EXPECT_EQ(engine_stat(ch_a, "syntax_errors"), syn0 + 2);

    EXPECT_FAIL(ch_a, nil_index, NULL, RDMX_ERR_INVALID,
                "lambda:2: attempt to index a nil value (local 't')");
    EXPECT(strncmp(detail, "lambda.eval: ", 13) == 0, "first: '%s'", detail);
    /* compiled, so cached: the second time by hash */
    EXPECT_FAIL(ch_a, nil_index, NULL, RDMX_ERR_INVALID,
                "lambda.call: lambda:2: attempt to index a nil value");

    EXPECT_FAIL(ch_a, thrown, "now", RDMX_ERR_INVALID, "lambda:1: boom now");
    EXPECT_FAIL(ch_a, "return {}", NULL, RDMX_ERR_INVALID, "table");
    still_serves(ch_a, &srv_a);
}

/* ------------------------------------------------------------------------ */
/* cache                                                                    */
/* ------------------------------------------------------------------------ */

static void part_cache(void)
{
    char src1[128], src2[128];
    uint8_t id1[RDMX_LAMBDA_ID_LEN], id[RDMX_LAMBDA_ID_LEN], req[256];
    uint64_t calls0, evals0, hits0, miss0;
    size_t n;

    /* sources no earlier run of this server has seen */
    snprintf(src1, sizeof(src1), "-- %d %.0f\nreturn 'one:' .. input",
             (int)getpid(), th_now_ms());
    snprintf(src2, sizeof(src2), "-- %d %.0f\nreturn 'two:' .. input",
             (int)getpid(), th_now_ms());
    rdmx_lambda_id(src1, strlen(src1), id1);

    calls0 = handler_calls(ch_a, "lambda.call");
    evals0 = handler_calls(ch_a, "lambda.eval");
    hits0 = engine_stat(ch_a, "cache_hits");
    miss0 = engine_stat(ch_a, "cache_misses");
    EXPECT_OUT(ch_a, src1, "x", "one:x");
    /* by hash (NOT_FOUND), then with the source */
    EXPECT_EQ(handler_calls(ch_a, "lambda.call"), calls0 + 1);
    EXPECT_EQ(handler_calls(ch_a, "lambda.eval"), evals0 + 1);
    EXPECT_EQ(engine_stat(ch_a, "cache_misses"), miss0 + 2);
    EXPECT_EQ(engine_stat(ch_a, "cache_hits"), hits0);

    EXPECT_OUT(ch_a, src1, "y", "one:y");
    /* by hash only, from the cache */
    EXPECT_EQ(handler_calls(ch_a, "lambda.call"), calls0 + 2);
    EXPECT_EQ(handler_calls(ch_a, "lambda.eval"), evals0 + 1);
    EXPECT_EQ(engine_stat(ch_a, "cache_hits"), hits0 + 1);
    EXPECT_EQ(engine_stat(ch_a, "cache_misses"), miss0 + 2);

    /* raw lambda.call by the SHA-256 of the source */
    n = enc_call(req, id1, "raw");
    EXPECT_OK(raw_call(ch_a, "lambda.call", req, n));
    EXPECT(strcmp(out, "one:raw") == 0, "raw call by id: '%s'", out);
    /* raw lambda.eval with the source works too */
    n = enc_eval(req, src1, "src");
    EXPECT_OK(raw_call(ch_a, "lambda.eval", req, n));
    EXPECT(strcmp(out, "one:src") == 0, "raw eval: '%s'", out);

    /* an id nobody sent */
    for (size_t i = 0; i < sizeof(id); i++)
        id[i] = (uint8_t)(rand() >> 7);
    n = enc_call(req, id, "x");
    EXPECT_ST(raw_call(ch_a, "lambda.call", req, n), RDMX_ERR_NOT_FOUND);
    EXPECT(strstr(detail, "not cached") != NULL, "unknown id: '%s'", detail);
    /* a new function through the helper: NOT_FOUND handled, source sent */
    EXPECT_OUT(ch_a, src2, "z", "two:z");
    rdmx_lambda_id(src2, strlen(src2), id);
    n = enc_call(req, id, "w");
    EXPECT_OK(raw_call(ch_a, "lambda.call", req, n));
    EXPECT(strcmp(out, "two:w") == 0, "raw call by id: '%s'", out);

    /* "b" keeps one function: the second evicts the first */
    {
        uint64_t ev0 = engine_stat(ch_b, "cache_evictions");
        uint64_t bmiss0;

        EXPECT_OUT(ch_b, src1, "1", "one:1");
        EXPECT_OUT(ch_b, src2, "2", "two:2");
        EXPECT(engine_stat(ch_b, "cache_evictions") >= ev0 + 1,
               "no eviction on a cache of 1");
        n = enc_call(req, id1, "3");
        EXPECT_ST(raw_call(ch_b, "lambda.call", req, n), RDMX_ERR_NOT_FOUND);
        bmiss0 = engine_stat(ch_b, "cache_misses");
        EXPECT_OUT(ch_b, src1, "4", "one:4"); /* resent by the helper */
        EXPECT_EQ(engine_stat(ch_b, "cache_misses"), bmiss0 + 2);
        n = enc_call(req, id1, "5");
        EXPECT_OK(raw_call(ch_b, "lambda.call", req, n));
        EXPECT(strcmp(out, "one:5") == 0, "after the resend: '%s'", out);
    }

    /* No output: empty by source and by hash alike (the server sends no
     * buffer for it), and print()'s output when the return is nil. */
    {
        char empty[96], printed[96];
        snprintf(empty, sizeof(empty), "local pid = %d return", (int)getpid());
        snprintf(printed, sizeof(printed),
                 "local pid = %d print('p') return nil", (int)getpid());
        for (int k = 0; k < 3; k++) {
            EXPECT_OUT(ch_a, empty, NULL, "");
            EXPECT_OUT(ch_a, printed, NULL, "p\n");
        }
        EXPECT_OUT(ch_a, src1, "z", "one:z"); /* and output again after */
    }
}

/* ------------------------------------------------------------------------ */
/* sandbox                                                                  */
/* ------------------------------------------------------------------------ */

static void part_sandbox(void)
{
    char marker[128], src[512];
    dump_t bc;
    struct stat sb;

    snprintf(marker, sizeof(marker), "%s/executed", tmpdir);
    EXPECT_FAIL(ch_a, "return io.open('/etc/passwd'):read('a')", NULL,
                RDMX_ERR_INVALID, "attempt to index a nil value (global 'io')");
    snprintf(src, sizeof(src), "return os.execute('touch %s')", marker);
    EXPECT_FAIL(ch_a, src, NULL, RDMX_ERR_INVALID,
                "attempt to call a nil value (field 'execute')");
    EXPECT(stat(marker, &sb) != 0, "os.execute ran: %s exists", marker);
    EXPECT_FAIL(ch_a, "return require('io')", NULL, RDMX_ERR_INVALID,
                "attempt to call a nil value (global 'require')");
    EXPECT_FAIL(ch_a, "return debug.getinfo(1).source", NULL, RDMX_ERR_INVALID,
                "attempt to index a nil value (global 'debug')");
    EXPECT_FAIL(ch_a, "return string.dump(function() end)", NULL,
                RDMX_ERR_INVALID, "attempt to call a nil value (field 'dump')");

    /* genuine bytecode, which would return "bytecode ran" */
    make_bytecode("return 'bytecode ran'", &bc);
    out_len = 0;
    {
        rdmx_lambda_eval_params_t ep = eval_params(NULL, 0, NULL, 0);
        rdmx_status_t st = rdmx_lambda_eval(ch_a, bc.buf, bc.n, &ep, out,
                                            OUT_CAP - 1, &out_len);
        keep_detail(st);
        EXPECT(st == RDMX_ERR_INVALID,
               "bytecode as the source: %s (output %zu bytes)",
               rdmx_status_name(st), out_len);
        EXPECT(strstr(detail, "attempt to load a binary chunk") != NULL,
               "bytecode as the source: '%s'", detail);
    }
    {
        static const char via_load[] = "return assert(load(input, 'x', 'b'))()";
        rdmx_lambda_eval_params_t ep = eval_params(bc.buf, bc.n, NULL, 0);
        rdmx_status_t st = rdmx_lambda_eval(ch_a, via_load, strlen(via_load),
                                            &ep, out, OUT_CAP - 1, &out_len);
        keep_detail(st);
        EXPECT(st == RDMX_ERR_INVALID, "load of bytecode: %s",
               rdmx_status_name(st));
        EXPECT(strstr(detail, "attempt to load a binary chunk") != NULL,
               "load of bytecode: '%s'", detail);
    }
    EXPECT_OUT(ch_a, "return load('return 1 + ' .. input)()", "41", "42");
    still_serves(ch_a, &srv_a);
}

/* ------------------------------------------------------------------------ */
/* plugin                                                                   */
/* ------------------------------------------------------------------------ */

static rdmx_status_t native_on(rdmx_channel_t *c, const char *name,
                               const char *input)
{
    rdmx_status_t st;

    out_len = 0;
    st = rdmx_lambda_native(c, name, input, strlen(input), out, OUT_CAP - 1,
                            &out_len);
    keep_detail(st);
    out[st == RDMX_OK ? out_len : 0] = '\0';
    return st;
}

static void part_plugin(void)
{
    uint64_t nc0 = engine_stat(ch_a, "native_calls");

    EXPECT_EQ(engine_stat(ch_a, "natives"), 2);
    EXPECT_OK(native_on(ch_a, "upper", "Hello, World 42"));
    EXPECT(strcmp(out, "HELLO, WORLD 42") == 0, "upper: '%s'", out);
    EXPECT_OK(native_on(ch_a, "upper", ""));
    EXPECT_EQ(out_len, 0);
    EXPECT_ST(native_on(ch_a, "upper.fail", "x"), RDMX_ERR_INVALID);
    EXPECT(strstr(detail, "upper.fail: fails on purpose") != NULL,
           "upper.fail: '%s'", detail);
    EXPECT_EQ(engine_stat(ch_a, "native_calls"), nc0 + 3);
    EXPECT_ST(native_on(ch_a, "no.such.native", "x"), RDMX_ERR_NOT_FOUND);
    EXPECT(strstr(detail, "no.such.native") != NULL, "unknown: '%s'", detail);
    /* "b" was started without --plugin-dir */
    EXPECT_EQ(engine_stat(ch_b, "natives"), 0);
    EXPECT_ST(native_on(ch_b, "upper", "x"), RDMX_ERR_NOT_FOUND);
}

/* ------------------------------------------------------------------------ */
/* malformed                                                                */
/* ------------------------------------------------------------------------ */

static void expect_proto(const char *method, const uint8_t *req, size_t len,
                         const char *what)
{
    rdmx_status_t st = raw_call(ch_a, method, req, len);

    EXPECT(st == RDMX_ERR_PROTO, "%s (%s, %zu bytes): %s, expected PROTO (%s)",
           what, method, len, rdmx_status_name(st), detail);
    EXPECT(strstr(detail, "lambda:") != NULL, "%s: message '%s'", what, detail);
}

static void part_malformed(void)
{
    uint8_t b[512] = {0}, id[RDMX_LAMBDA_ID_LEN] = {1, 2, 3};
    size_t n;
    int count = 0;

#define BAD(method, len, what)                                                 \
    do {                                                                       \
        expect_proto((method), b, (len), (what));                              \
        count++;                                                               \
    } while (0)

    BAD("lambda.eval", 0, "empty");
    n = enc_eval(b, "return 1", "in");
    BAD("lambda.eval", 11, "short header");
    b[0] = 2;
    BAD("lambda.eval", n, "version 2");
    b[0] = 1;
    BAD("lambda.eval", n - 1, "one byte short");
    b[n] = 'x';
    BAD("lambda.eval", n + 1, "one byte extra");
    le32(b + 4, 0xffffffffu);
    BAD("lambda.eval", n, "source length beyond the payload");
    n = enc_eval(b, "return 1", "");
    le16(b + 2, 256);
    BAD("lambda.eval", n, "nargs 256");
    le16(b + 2, 1);
    b[1] = 2;
    BAD("lambda.eval", n, "nkeys > nargs");
    b[1] = 0;
    le16(b + 2, 200); /* 200 arg lengths do not fit */
    BAD("lambda.eval", n, "arg lengths beyond the payload");

    n = enc_call(b, id, "in");
    BAD("lambda.call", 39, "short header");
    BAD("lambda.call", n - 1, "one byte short");
    le32(b + 36, 1000);
    BAD("lambda.call", n, "input length beyond the payload");

    n = enc_native(b, "upper", 5, "in");
    BAD("lambda.native", 7, "short header");
    BAD("lambda.native", n - 1, "one byte short");
    n = enc_native(b, "", 0, "in");
    BAD("lambda.native", n, "name of 0 bytes");
    memset(b + 100, 'n', 64);
    n = enc_native(b, (const char *)b + 100, 64, "in");
    BAD("lambda.native", n, "name of 64 bytes");
    n = enc_native(b, "up\0er", 5, "in");
    BAD("lambda.native", n, "NUL in the name");
    n = enc_native(b, "upper", 5, "in");
    b[2] = 1;
    BAD("lambda.native", n, "reserved bytes");
#undef BAD
    th_log("  %d malformed requests refused with RDMX_ERR_PROTO", count);
    still_serves(ch_a, &srv_a);
    EXPECT_OK(native_on(ch_a, "upper", "ok"));
}

/* ------------------------------------------------------------------------ */
/* concurrent                                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    int index;
    pthread_t tid;
    unsigned ok, stopped, bad;
    char err[512];
} cthread_t;

static void cthread_bad(cthread_t *t, const char *fmt, ...)
{
    va_list ap;

    if (t->bad++ == 0) {
        va_start(ap, fmt);
        vsnprintf(t->err, sizeof(t->err), fmt, ap);
        va_end(ap);
    }
}

static void *cthread_main(void *arg)
{
    cthread_t *t = arg;
    rdmx_worker_t *w = NULL;
    rdmx_channel_t *c;
    char own[128], argbuf[32], want[600], *o;
    uint8_t input[300];
    size_t olen = 0;

    o = malloc(OUT_CAP);
    CHECK(o != NULL);
    CHECK_OK(rdmx_worker_create(ctx, NULL, &w));
    c = channel_on(w, srv_a.addr);
    snprintf(own, sizeof(own),
             "return 'T%d:' .. args[1] .. ':' .. #input .. ':' .. "
             "input:sub(1, 3)",
             t->index);
    for (unsigned i = 0; i < N_CALLS; i++) {
        size_t ilen = (size_t)(th_seed(t->index, i, 7) % 200);
        rdmx_lambda_eval_params_t ep;
        rdmx_status_t st;

        th_fill(input, ilen, th_seed(t->index, i, 1));
        for (size_t k = 0; k < ilen; k++) /* printable: native and sub */
            input[k] = (uint8_t)('a' + input[k] % 26);
        if (i % BOMB_EVERY == BOMB_EVERY - 1) {
            ep = eval_params(NULL, 0, NULL, 0);
            st = rdmx_lambda_eval(c, loop_src, strlen(loop_src), &ep, o,
                                  OUT_CAP, &olen);
            if (st == RDMX_ERR_NO_RESOURCE)
                t->stopped++;
            else
                cthread_bad(t, "call %u: endless loop: %s (%s)", i,
                            rdmx_status_name(st), rdmx_error_detail());
            continue;
        }
        switch (i % 3) {
        case 0: /* the shared function */
            ep = eval_params(input, ilen, NULL, 0);
            st = rdmx_lambda_eval(c, sum_src, strlen(sum_src), &ep, o, OUT_CAP,
                                  &olen);
            snprintf(want, sizeof(want), "%" PRIu64, sum_of(input, ilen));
            break;
        case 1: { /* this thread's function, with an argument */
            const char *args[1] = {argbuf};

            snprintf(argbuf, sizeof(argbuf), "%u", i * 7919u);
            ep = eval_params(input, ilen, args, 1);
            st = rdmx_lambda_eval(c, own, strlen(own), &ep, o, OUT_CAP, &olen);
            snprintf(want, sizeof(want), "T%d:%s:%zu:%.*s", t->index, argbuf,
                     ilen, (int)(ilen < 3 ? ilen : 3), (const char *)input);
            break;
        }
        default: /* the native */
            st = rdmx_lambda_native(c, "upper", input, ilen, o, OUT_CAP, &olen);
            for (size_t k = 0; k < ilen; k++)
                want[k] = (char)(input[k] - 'a' + 'A');
            want[ilen] = '\0';
            break;
        }
        if (st != RDMX_OK)
            cthread_bad(t, "call %u (kind %u): %s (%s)", i, i % 3,
                        rdmx_status_name(st), rdmx_error_detail());
        else if (olen != strlen(want) || memcmp(o, want, olen) != 0)
            cthread_bad(t, "call %u (kind %u): output '%.*s', expected '%s'", i,
                        i % 3, (int)(olen < 80 ? olen : 80), o, want);
        else
            t->ok++;
    }
    rdmx_channel_destroy(c);
    rdmx_worker_destroy(w);
    free(o);
    return NULL;
}

static void part_concurrent(void)
{
    static cthread_t th[N_THREADS];
    uint64_t calls0 = engine_stat(ch_a, "calls");
    uint64_t stops0 = engine_stat(ch_a, "budget_instructions");
    unsigned bombs = N_CALLS / BOMB_EVERY, ok = 0;
    double t0 = th_now_ms();

    for (int i = 0; i < N_THREADS; i++) {
        memset(&th[i], 0, sizeof(th[i]));
        th[i].index = i;
        CHECK(pthread_create(&th[i].tid, NULL, cthread_main, &th[i]) == 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i].tid, NULL);
    for (int i = 0; i < N_THREADS; i++) {
        EXPECT(th[i].bad == 0, "thread %d: %u bad calls, first: %s", i,
               th[i].bad, th[i].err);
        EXPECT_EQ(th[i].stopped, bombs);
        ok += th[i].ok;
    }
    EXPECT_EQ(ok, N_THREADS * (N_CALLS - bombs));
    EXPECT_EQ(engine_stat(ch_a, "budget_instructions"),
              stops0 + N_THREADS * bombs);
    /* every call ran at least once (first sends twice: miss, then eval) */
    EXPECT(engine_stat(ch_a, "calls") >= calls0 + N_THREADS * N_CALLS,
           "the engine counted fewer calls than were made");
    th_log("  %d threads x %d calls in %.0f ms (%u loops stopped)", N_THREADS,
           N_CALLS, th_now_ms() - t0, N_THREADS * bombs);
    still_serves(ch_a, &srv_a);
}

/* ------------------------------------------------------------------------ */
/* demo                                                                     */
/* ------------------------------------------------------------------------ */

static void part_demo(void)
{
    char o_path[128], e_path[128], f_path[128], bad_path[128];
    char text[8192];
    int ws;

    snprintf(o_path, sizeof(o_path), "%s/demo.out", tmpdir);
    snprintf(e_path, sizeof(e_path), "%s/demo.err", tmpdir);
    snprintf(f_path, sizeof(f_path), "%s/rev.lua", tmpdir);
    snprintf(bad_path, sizeof(bad_path), "%s/bad.lua", tmpdir);

    /* the built-in function against "a" */
    ws = kl_run(NULL, o_path, e_path, 60000 * TH_SLOW, NULL, "rdmx-demo",
                "lambda", srv_a.addr, "--size", "20000", NULL);
    read_file(o_path, text, sizeof(text));
    EXPECT(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
           "rdmx-demo lambda client: wait status 0x%x:\n%s", ws, text);
    EXPECT(strstr(text, "lambda: verified: the same checksum") != NULL &&
               strstr(text, "bytes=20000 fnv1a64=") != NULL,
           "no verified checksum:\n%s", text);
    EXPECT(strstr(text, "call 2: ") != NULL &&
               strstr(text, "compiled code from the server's cache") != NULL,
           "call 2 not from the cache:\n%s", text);
    EXPECT(strstr(text, "instruction budget of 5000000 exceeded") != NULL,
           "no budget stop shown:\n%s", text);

    /* a function of ours */
    write_file(f_path, "print('len', #input)\nreturn input:reverse()\n");
    ws = kl_run(NULL, o_path, e_path, 60000 * TH_SLOW, NULL, "rdmx-demo",
                "lambda", srv_a.addr, "--function", f_path, "--input",
                "stressed", NULL);
    read_file(o_path, text, sizeof(text));
    EXPECT(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
           "rdmx-demo --function: wait status 0x%x:\n%s", ws, text);
    EXPECT(strstr(text, "len\t8\ndesserts") != NULL, "output:\n%s", text);

    /* one that does not compile: exit 1, Lua's message */
    write_file(bad_path, "return (1 +\n");
    ws = kl_run(NULL, o_path, e_path, 60000 * TH_SLOW, NULL, "rdmx-demo",
                "lambda", srv_a.addr, "--function", bad_path, NULL);
    read_file(e_path, text, sizeof(text));
    EXPECT(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 1,
           "rdmx-demo with a syntax error: wait status 0x%x", ws);
    EXPECT(strstr(text, "lambda:2:") != NULL, "stderr:\n%s", text);

    /* a one-client server: exits 0 once its client verified */
    {
        kvd_t one = {0};
        char sout[4096];

        kl_server_start(&one, "rdmx-demo", "lambda", "--listen", "0", "--host",
                        "127.0.0.1", NULL);
        ws = kl_run(NULL, o_path, e_path, 60000 * TH_SLOW, NULL, "rdmx-demo",
                    "lambda", one.addr, NULL);
        read_file(o_path, text, sizeof(text));
        EXPECT(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
               "client of the one-client server: 0x%x:\n%s", ws, text);
        ws = kvd_wait(&one, 10000 * TH_SLOW, sout, sizeof(sout), NULL);
        EXPECT(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
               "one-client server: wait status 0x%x:\n%s", ws, sout);
        EXPECT(strstr(sout, "lambda: ok, the client verified the output") !=
                   NULL,
               "one-client server said:\n%s", sout);
    }
}

/* ------------------------------------------------------------------------ */
/* kvd                                                                      */
/* ------------------------------------------------------------------------ */

/* rdmx-kv with the NULL-terminated arguments: its exit code, -1 if it did
 * not exit by itself. */
#define kv_cli(o_path, e_path, ...)                                            \
    exit_code(kl_run(NULL, (o_path), (e_path), 30000 * TH_SLOW, NULL,          \
                     "rdmx-kv", __VA_ARGS__))

/* The params of rdmx_kv_eval: @p nkeys @p keys and @p nargs @p args, both
 * given (the client's deadline). */
static rdmx_kv_eval_params_t kv_eval_params(const char *const *keys,
                                            unsigned nkeys,
                                            const char *const *args,
                                            unsigned nargs)
{
    rdmx_kv_eval_params_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask =
        RDMX_KV_EVAL_PARAM_FIELD_KEYS | RDMX_KV_EVAL_PARAM_FIELD_ARGS;
    p.keys = keys;
    p.nkeys = nkeys;
    p.args = args;
    p.nargs = nargs;
    return p;
}

static int exit_code(int ws)
{
    return ws >= 0 && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void part_kvd(void)
{
    static const char put_get[] =
        "kv.put(KEYS[1], ARGV[1])\n"
        "return kv.get(KEYS[1]) .. ':' .. tostring(kv.exists(KEYS[1]))";
    static const char too_big[] = "kv.put(KEYS[1], string.rep('x', 2000))";
    static const char too_big_caught[] =
        "local ok, e = pcall(kv.put, KEYS[1], string.rep('x', 2000))\n"
        "return tostring(ok) .. ' ' .. e";
    rdmx_kv_params_t p;
    rdmx_kv_t *kv = NULL;
    rdmx_channel_t *ch_k = NULL;
    char buf[4096], o_path[128], e_path[128], f_path[128], g_path[128];
    const char *keys[1], *args[1];
    rdmx_kv_eval_params_t ep;
    rdmx_kv_meta_t meta;
    uint64_t calls0;
    int rc;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_KV_PARAM_FIELD_TIMEOUT;
    p.timeout_ms = CALL_MS;
    CHECK_OK(rdmx_kv_create(worker, kvd.addr, &p, &kv));
    CHECK_OK(rdmx_kv_wait_ready(kv, 20000 * TH_SLOW));
    EXPECT_OK(rdmx_kv_stats(kv, 0, buf, sizeof(buf)));
    calls0 = stat_of(buf, "lambda_calls");
    EXPECT_EQ(stat_of(buf, "lambda_natives"), 2);

    /* kv.put / kv.get inside the function, then a plain GET */
    keys[0] = "lam:k1";
    args[0] = "value-from-lua";
    ep = kv_eval_params(keys, 1, args, 1);
    EXPECT_OK(rdmx_kv_eval(kv, put_get, strlen(put_get), &ep, out, OUT_CAP - 1,
                           &out_len));
    out[out_len] = '\0';
    EXPECT(strcmp(out, "value-from-lua:true") == 0, "put/get: '%s'", out);
    EXPECT_OK(rdmx_kv_get(kv, "lam:k1", 6, buf, sizeof(buf), NULL, &meta));
    EXPECT(meta.length == 14 && memcmp(buf, "value-from-lua", 14) == 0,
           "rdmx_kv_get after the function: %.*s",
           (int)(meta.length < 64 ? meta.length : 64), buf);

    /* a value over --max-value 1k */
    keys[0] = "lam:big";
    {
        rdmx_status_t st;

        ep = kv_eval_params(keys, 1, NULL, 0);
        st = rdmx_kv_eval(kv, too_big, strlen(too_big), &ep, out, OUT_CAP - 1,
                          &out_len);
        keep_detail(st);
        EXPECT(st == RDMX_ERR_INVALID, "oversized kv.put: %s",
               rdmx_status_name(st));
        EXPECT(strstr(detail, "exceeds max_value 1024") != NULL &&
                   strstr(detail, "kv.put") != NULL,
               "oversized kv.put: '%s'", detail);
        th_log("  kv.put of 2000 bytes: %s", detail);
    }
    ep = kv_eval_params(keys, 1, NULL, 0);
    EXPECT_OK(rdmx_kv_eval(kv, too_big_caught, strlen(too_big_caught), &ep, out,
                           OUT_CAP - 1, &out_len));
    out[out_len] = '\0';
    EXPECT(strncmp(out, "false ", 6) == 0 &&
               strstr(out, "exceeds max_value 1024") != NULL,
           "pcall(kv.put, oversized): '%s'", out);
    EXPECT_ST(rdmx_kv_get(kv, "lam:big", 7, buf, sizeof(buf), NULL, &meta),
              RDMX_ERR_NOT_FOUND);

    /* budgets and the plugin on the kvd */
    {
        rdmx_status_t st;

        ep = kv_eval_params(NULL, 0, NULL, 0);
        st = rdmx_kv_eval(kv, loop_src, strlen(loop_src), &ep, out, OUT_CAP - 1,
                          &out_len);
        keep_detail(st);
        EXPECT(st == RDMX_ERR_NO_RESOURCE &&
                   strstr(detail, "instruction budget of 2000000 exceeded"),
               "endless loop on the kvd: %s: '%s'", rdmx_status_name(st),
               detail);
    }
    ch_k = channel_on(worker, kvd.addr);
    EXPECT_OK(native_on(ch_k, "upper", "kvd"));
    EXPECT(strcmp(out, "KVD") == 0, "upper on the kvd: '%s'", out);

    /* the CLI */
    snprintf(o_path, sizeof(o_path), "%s/kv.out", tmpdir);
    snprintf(e_path, sizeof(e_path), "%s/kv.err", tmpdir);
    snprintf(f_path, sizeof(f_path), "%s/incr.lua", tmpdir);
    snprintf(g_path, sizeof(g_path), "%s/big.lua", tmpdir);
    write_file(f_path, "local n = tonumber(kv.get(KEYS[1]) or '0') + "
                       "tonumber(ARGV[1])\n"
                       "kv.put(KEYS[1], tostring(n))\n"
                       "return n\n");
    write_file(g_path, too_big);
    rc = kv_cli(o_path, e_path, "--servers", kvd.addr, "eval", f_path,
                "lam:counter", "--", "5", NULL);
    read_file(o_path, buf, sizeof(buf));
    EXPECT(rc == 0 && strcmp(buf, "5") == 0, "rdmx-kv eval: exit %d, '%s'", rc,
           buf);
    rc = kv_cli(o_path, e_path, "--servers", kvd.addr, "eval", f_path,
                "lam:counter", "--", "-3", NULL);
    read_file(o_path, buf, sizeof(buf));
    EXPECT(rc == 0 && strcmp(buf, "2") == 0, "rdmx-kv eval -3: exit %d, '%s'",
           rc, buf);
    EXPECT_OK(
        rdmx_kv_get(kv, "lam:counter", 11, buf, sizeof(buf), NULL, &meta));
    EXPECT(meta.length == 1 && buf[0] == '2', "counter after the CLI: %.*s",
           (int)(meta.length < 32 ? meta.length : 32), buf);
    rc = kv_cli(o_path, e_path, "--servers", kvd.addr, "eval", g_path,
                "lam:big2", NULL);
    read_file(e_path, buf, sizeof(buf));
    EXPECT(rc == 2 && strstr(buf, "exceeds max_value 1024") != NULL,
           "rdmx-kv eval of an oversized put: exit %d, stderr '%s'", rc, buf);

    EXPECT_OK(rdmx_kv_stats(kv, 0, buf, sizeof(buf)));
    EXPECT(stat_of(buf, "lambda_calls") >= calls0 + 6,
           "lambda_calls %" PRIu64 " (was %" PRIu64 ")",
           stat_of(buf, "lambda_calls"), calls0);
    EXPECT(stat_of(buf, "lambda_budget_instructions") == 1,
           "lambda_budget_instructions %" PRIu64,
           stat_of(buf, "lambda_budget_instructions"));
    EXPECT(kvd_alive(&kvd), "rdmx-kvd died");
    rdmx_channel_destroy(ch_k);
    rdmx_kv_destroy(kv);
}

/* ------------------------------------------------------------------------ */

/* build/bin/test_lambda_rpc -> build/lambda-plugins (tests/plugins). */
static void find_plugins(void)
{
    char exe[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    struct stat sb;

    CHECKF(n > 0, "readlink: %s", strerror(errno));
    exe[n] = '\0';
    snprintf(plugin_dir, sizeof(plugin_dir), "%s/lambda-plugins",
             dirname(dirname(exe)));
    snprintf(path, sizeof(path), "%s/upper.so", plugin_dir);
    CHECKF(stat(path, &sb) == 0, "%s: %s (built with the tests: tests/plugins)",
           path, strerror(errno));
}

static void stop_server(kvd_t *k, const char *name)
{
    char text[4096];
    int ws;

    if (k->pid <= 0)
        return;
    kvd_kill(k, SIGTERM);
    ws = kvd_wait(k, 10000 * TH_SLOW, text, sizeof(text), NULL);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        th_log("FAIL: %s: wait status 0x%x after SIGTERM:\n%s", name, ws, text);
        parts_add_failure();
    }
}

int main(void)
{
    double t0;

    th_init("lambda_rpc", 170);
    t0 = th_now_ms();
    srand((unsigned)getpid());
    find_plugins();
    kl_start();
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rdmx_lambda_rpc.XXXXXX");
    CHECKF(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
    kl_server_start(&srv_a, "rdmx-demo", "lambda", "--listen", "0", "--host",
                    "127.0.0.1", "--serve", "--workers", "2", "--plugin-dir",
                    plugin_dir, "--max-instructions", "5000000", "--max-memory",
                    "16m", "--max-time-ms", "5000", NULL);
    kl_server_start(&srv_b, "rdmx-demo", "lambda", "--listen", "0", "--host",
                    "127.0.0.1", "--serve", "--workers", "1",
                    "--max-instructions", "1T", "--max-memory", "1m",
                    "--max-time-ms", "150", "--cache", "1", NULL);
    kvd_start(&kvd, NULL, "--workers", "1", "--memory", "16m", "--max-value",
              "1k", "--plugin-dir", plugin_dir, "--lambda-max-instructions",
              "2000000", NULL);
    th_log("servers: a %s, b %s, rdmx-kvd %s (transport %s, plugins %s)",
           srv_a.addr, srv_b.addr, kvd.addr, th_transport_env(), plugin_dir);

    ctx = th_context();
    worker = th_worker(ctx, 0);
    out = th_alloc(OUT_CAP);
    ch_a = channel_on(worker, srv_a.addr);
    ch_b = channel_on(worker, srv_b.addr);

    run_part("budgets", part_budgets);
    run_part("errors", part_errors);
    run_part("cache", part_cache);
    run_part("sandbox", part_sandbox);
    run_part("plugin", part_plugin);
    run_part("malformed", part_malformed);
    run_part("concurrent", part_concurrent);
    run_part("demo", part_demo);
    run_part("kvd", part_kvd);

    rdmx_channel_destroy(ch_a);
    rdmx_channel_destroy(ch_b);
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    free(out);
    stop_server(&srv_a, "rdmx-demo lambda a");
    stop_server(&srv_b, "rdmx-demo lambda b");
    stop_server(&kvd, "rdmx-kvd");
    {
        const char *names[] = {"demo.out", "demo.err", "rev.lua",  "bad.lua",
                               "kv.out",   "kv.err",   "incr.lua", "big.lua"};
        char p[160];

        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            snprintf(p, sizeof(p), "%s/%s", tmpdir, names[i]);
            unlink(p);
        }
        rmdir(tmpdir);
    }
    if (parts_failed()) {
        th_log("FAILED: %d part(s) failed (%.1f s)", parts_failed(),
               (th_now_ms() - t0) / 1000);
        return 1;
    }
    th_log("ok (%.1f s)", (th_now_ms() - t0) / 1000);
    return 0;
}
