/*
 * kv_peer_driver: the `rdmx-kv bench` loop against memcached (libmemcached)
 * or Redis (hiredis), for bench/vs-memcached.sh and bench/vs-redis.sh.
 *
 *   kv_peer_driver --system memcached|redis --server HOST:PORT|/unix/socket
 *                  [--op get|set] [--size S] [--keys N] [--threads T]
 *                  [--seconds S | --ops N] [--warm-up] [--json]
 *
 * The workload is tools/rdmx_kv.c's bench, line for line where it matters:
 * T threads, each with its own connection and ONE request in flight (a
 * blocking call), keys "bench:K" with K uniform over --keys (xorshift,
 * seeded per thread as rdmx-kv seeds it), values of --size bytes of 'x';
 * for get, thread 0 first stores every key, then (--warm-up) each thread
 * reads every key once, in order, not timed, then all threads start together;
 * every operation is timed with clock_gettime(CLOCK_MONOTONIC); a run ends
 * after --seconds (checked every 16 operations) or --ops per thread.
 * Output: the same line, or the same JSON object (--json), as
 * `rdmx-kv bench`, plus "system". MB/s are 10^6 bytes/s of values moved.
 *
 * memcached: text protocol (libmemcached's default), TCP_NODELAY, blocking
 * socket, replies waited for (no noreply, no buffering); GET is
 * memcached_mget of the one key and memcached_fetch_result into the
 * connection's one result, whose value buffer is reused from GET to GET (as
 * rdmx-kv bench reads into one buffer; memcached_get would malloc and free
 * each value), SET is memcached_set. Redis: hiredis redisCommand "GET %b" /
 * "SET %b %b". A GET must return exactly --size bytes, otherwise it counts as
 * an error.
 *
 * Build (after make; -DNO_MEMCACHED / -DNO_HIREDIS to omit a library):
 *   cc -O2 -I tools/common -o kv_peer_driver bench/kv_peer_driver.c \
 *      build/lib/librdmx_tools_common.a -lmemcached -lhiredis -lpthread
 */
#define _GNU_SOURCE
#include "bench.h"
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef NO_MEMCACHED
#include <libmemcached/memcached.h>
#endif
#ifndef NO_HIREDIS
#include <hiredis/hiredis.h>
#endif

enum { SYS_MEMCACHED, SYS_REDIS };
enum { OP_GET, OP_SET };

typedef struct {
    int system;
    const char *server;
    char host[256];
    int port;            /* 0: host is a unix socket path */
    int op;
    const char *op_name;
    size_t size;
    uint64_t keys;
    unsigned threads;
    double seconds;
    uint64_t ops;
    int warm_up;
    int json;
} opts_t;

typedef struct {
    const opts_t *o;
    unsigned index;
    uint64_t done, errors, misses, bytes;
    uint64_t *lat; /* ns per op */
    size_t nlat, caplat;
    double start, end;
    char err[256];
} thread_t;

static volatile int go;
static volatile int loaded; /* thread 0 has stored every key */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void fatal(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "kv_peer_driver: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    exit(2);
}

/* --- one connection --------------------------------------------------------- */

typedef struct {
#ifndef NO_MEMCACHED
    memcached_st *mc;
    /* every GET's value, its buffer reused; in this struct, not allocated
     * by the library, which frees an allocated result at a GET's end */
    memcached_result_st res;
#endif
#ifndef NO_HIREDIS
    redisContext *rc;
#endif
    int dummy;
} conn_t;

/* result of one operation */
enum { OP_OK, OP_MISS, OP_ERR };

static void conn_open(const opts_t *o, conn_t *c)
{
    memset(c, 0, sizeof(*c));
    if (o->system == SYS_MEMCACHED) {
#ifndef NO_MEMCACHED
        memcached_return_t r;
        c->mc = memcached_create(NULL);
        if (c->mc == NULL)
            fatal("memcached_create failed%s%s", "", "");
        memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
        memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_NO_BLOCK, 0);
        memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_BUFFER_REQUESTS, 0);
        memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_NOREPLY, 0);
        /* generous timeouts: 1 MiB values on a loaded 2-CPU machine */
        memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, 10000);
        memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT,
                               5000);
        memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_RCV_TIMEOUT,
                               10000000);
        memcached_behavior_set(c->mc, MEMCACHED_BEHAVIOR_SND_TIMEOUT,
                               10000000);
        if (o->port)
            r = memcached_server_add(c->mc, o->host, (in_port_t)o->port);
        else
            r = memcached_server_add_unix_socket(c->mc, o->host);
        if (r != MEMCACHED_SUCCESS)
            fatal("memcached_server_add %s: %s", o->server,
                  memcached_strerror(c->mc, r));
        if (memcached_result_create(c->mc, &c->res) == NULL)
            fatal("memcached_result_create failed%s%s", "", "");
#else
        fatal("built without libmemcached%s%s", "", "");
#endif
    } else {
#ifndef NO_HIREDIS
        struct timeval tv = {10, 0};
        c->rc = o->port ? redisConnectWithTimeout(o->host, o->port, tv)
                        : redisConnectUnixWithTimeout(o->host, tv);
        if (c->rc == NULL || c->rc->err)
            fatal("redis connect %s: %s", o->server,
                  c->rc ? c->rc->errstr : "out of memory");
        redisSetTimeout(c->rc, tv);
#else
        fatal("built without hiredis%s%s", "", "");
#endif
    }
}

static void conn_close(const opts_t *o, conn_t *c)
{
#ifndef NO_MEMCACHED
    if (o->system == SYS_MEMCACHED) {
        memcached_result_free(&c->res);
        memcached_free(c->mc);
    }
#endif
#ifndef NO_HIREDIS
    if (o->system == SYS_REDIS)
        redisFree(c->rc);
#endif
    (void)o;
    (void)c;
}

static int do_set(const opts_t *o, conn_t *c, const char *key, size_t klen,
                  const char *val, char *err, size_t errlen)
{
#ifndef NO_MEMCACHED
    if (o->system == SYS_MEMCACHED) {
        memcached_return_t r =
            memcached_set(c->mc, key, klen, val, o->size, 0, 0);
        if (r == MEMCACHED_SUCCESS)
            return OP_OK;
        snprintf(err, errlen, "set: %s", memcached_last_error_message(c->mc));
        return OP_ERR;
    }
#endif
#ifndef NO_HIREDIS
    if (o->system == SYS_REDIS) {
        redisReply *rep = redisCommand(c->rc, "SET %b %b", key, klen, val,
                                       o->size);
        int res = rep != NULL && rep->type == REDIS_REPLY_STATUS ? OP_OK
                                                                 : OP_ERR;
        if (res != OP_OK)
            snprintf(err, errlen, "SET: %s",
                     rep ? (rep->str ? rep->str : "bad reply") : c->rc->errstr);
        freeReplyObject(rep);
        return res;
    }
#endif
    (void)key; (void)klen; (void)val; (void)c; (void)err; (void)errlen;
    return OP_ERR;
}

static int do_get(const opts_t *o, conn_t *c, const char *key, size_t klen,
                  char *err, size_t errlen)
{
#ifndef NO_MEMCACHED
    if (o->system == SYS_MEMCACHED) {
        const char *keys[1] = {key};
        size_t lens[1] = {klen}, vlen = 0;
        memcached_return_t r = memcached_mget(c->mc, keys, lens, 1), end;
        memcached_result_st *got = NULL;
        int res;
        if (r == MEMCACHED_SUCCESS)
            got = memcached_fetch_result(c->mc, &c->res, &r);
        if (got != NULL) {
            vlen = memcached_result_length(got);
            /* read the END that closes the answer */
            if (memcached_fetch_result(c->mc, &c->res, &end) != NULL ||
                end != MEMCACHED_END)
                r = end == MEMCACHED_SUCCESS ? MEMCACHED_FAILURE : end;
        }
        if (got != NULL && r == MEMCACHED_SUCCESS)
            res = vlen == o->size ? OP_OK : OP_ERR;
        else if (r == MEMCACHED_END || r == MEMCACHED_NOTFOUND)
            res = OP_MISS;
        else
            res = OP_ERR;
        if (res == OP_ERR)
            snprintf(err, errlen, "get: %s (%zu bytes)",
                     memcached_strerror(c->mc, r), vlen);
        return res;
    }
#endif
#ifndef NO_HIREDIS
    if (o->system == SYS_REDIS) {
        redisReply *rep = redisCommand(c->rc, "GET %b", key, klen);
        int res;
        if (rep != NULL && rep->type == REDIS_REPLY_STRING)
            res = (size_t)rep->len == o->size ? OP_OK : OP_ERR;
        else if (rep != NULL && rep->type == REDIS_REPLY_NIL)
            res = OP_MISS;
        else
            res = OP_ERR;
        if (res == OP_ERR)
            snprintf(err, errlen, "GET: %s",
                     rep ? (rep->str ? rep->str : "bad reply") : c->rc->errstr);
        freeReplyObject(rep);
        return res;
    }
#endif
    (void)key; (void)klen; (void)c; (void)err; (void)errlen;
    return OP_ERR;
}

/* --- the bench loop (as tools/rdmx_kv.c bench_main) ------------------------- */

static void *bench_main(void *arg)
{
    thread_t *t = arg;
    const opts_t *o = t->o;
    conn_t c;
    char *buf;
    char key[64];
    uint64_t rng = 0x9e3779b97f4a7c15ull * (t->index + 1);
    double deadline;

    conn_open(o, &c);
    buf = malloc(o->size ? o->size : 1);
    if (buf == NULL)
        fatal("out of memory%s%s", "", "");
    memset(buf, 'x', o->size);
    /* load: every key this thread may read exists */
    if (o->op == OP_GET && t->index == 0) {
        for (uint64_t k = 0; k < o->keys; k++) {
            int n = snprintf(key, sizeof(key), "bench:%" PRIu64, k);
            if (do_set(o, &c, key, (size_t)n, buf, t->err, sizeof(t->err)) !=
                OP_OK)
                fatal("bench load: %s%s", t->err, "");
        }
    }
    if (t->index == 0)
        __atomic_store_n(&loaded, 1, __ATOMIC_SEQ_CST);
    /* --warm-up: as rdmx-kv bench --warm-up, every key once */
    if (o->warm_up && o->op == OP_GET) {
        while (!__atomic_load_n(&loaded, __ATOMIC_SEQ_CST))
            usleep(100);
        for (uint64_t k = 0; k < o->keys; k++) {
            int n = snprintf(key, sizeof(key), "bench:%" PRIu64, k);
            if (do_get(o, &c, key, (size_t)n, t->err, sizeof(t->err)) != OP_OK)
                fatal("bench warm-up: %s%s", t->err, "");
        }
    }
    __atomic_add_fetch(&go, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&go, __ATOMIC_SEQ_CST) <= (int)o->threads)
        usleep(100);
    t->start = now_s();
    deadline = t->start + o->seconds;
    for (uint64_t i = 0;; i++) {
        uint64_t k = xorshift(&rng) % o->keys;
        int n = snprintf(key, sizeof(key), "bench:%" PRIu64, k);
        struct timespec a, b;
        int r;

        if (o->ops ? i >= o->ops : ((i & 15) == 0 && now_s() >= deadline))
            break;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (o->op == OP_GET)
            r = do_get(o, &c, key, (size_t)n, t->err, sizeof(t->err));
        else
            r = do_set(o, &c, key, (size_t)n, buf, t->err, sizeof(t->err));
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (r == OP_OK)
            t->bytes += o->size;
        else if (r == OP_MISS)
            t->misses++;
        else
            t->errors++;
        t->done++;
        if (t->nlat == t->caplat) {
            t->caplat = t->caplat ? t->caplat * 2 : 65536;
            t->lat = realloc(t->lat, t->caplat * sizeof(*t->lat));
            if (t->lat == NULL)
                fatal("out of memory%s%s", "", "");
        }
        t->lat[t->nlat++] = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull +
                            (uint64_t)(b.tv_nsec - a.tv_nsec);
    }
    t->end = now_s();
    free(buf);
    conn_close(o, &c);
    return NULL;
}

static int run(const opts_t *o)
{
    thread_t *t = calloc(o->threads, sizeof(*t));
    pthread_t *th = calloc(o->threads, sizeof(*th));
    uint64_t done = 0, errors = 0, misses = 0, bytes = 0, *all;
    size_t nall = 0, k = 0;
    double secs = 0;
    const char *sys = o->system == SYS_MEMCACHED ? "memcached" : "redis";

    for (unsigned i = 0; i < o->threads; i++) {
        t[i].o = o;
        t[i].index = i;
        pthread_create(&th[i], NULL, bench_main, &t[i]);
    }
    while (__atomic_load_n(&go, __ATOMIC_SEQ_CST) < (int)o->threads)
        usleep(1000);
    __atomic_add_fetch(&go, 1, __ATOMIC_SEQ_CST);
    for (unsigned i = 0; i < o->threads; i++) {
        pthread_join(th[i], NULL);
        done += t[i].done;
        errors += t[i].errors;
        misses += t[i].misses;
        bytes += t[i].bytes;
        nall += t[i].nlat;
        if (t[i].end - t[i].start > secs)
            secs = t[i].end - t[i].start;
        if (t[i].errors)
            fprintf(stderr, "kv_peer_driver: thread %u: %" PRIu64
                    " errors, last: %s\n", i, t[i].errors, t[i].err);
    }
    all = malloc((nall ? nall : 1) * sizeof(*all));
    for (unsigned i = 0; i < o->threads; i++) {
        memcpy(all + k, t[i].lat, t[i].nlat * sizeof(*all));
        k += t[i].nlat;
        free(t[i].lat);
    }
    qsort(all, nall, sizeof(*all), cmp_u64);
#define PCT(q) (nall ? all[(size_t)((double)(nall - 1) * (q))] / 1e3 : 0.0)
    if (o->json)
        printf("{\"system\":\"%s\",\"op\":\"%s\",\"size\":%zu,\"threads\":%u,"
               "\"warm_up\":%d,\"ops\":%" PRIu64 ",\"errors\":%" PRIu64
               ",\"misses\":%" PRIu64
               ",\"seconds\":%.3f,\"ops_per_s\":%.0f,\"mb_per_s\":%.1f,"
               "\"p50_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f}\n",
               sys, o->op_name, o->size, o->threads, o->warm_up, done, errors,
               misses, secs, done / secs, bytes / secs / 1e6, PCT(0.5),
               PCT(0.99), PCT(0.999));
    else
        printf("%s: %s %zu B x %u threads: %" PRIu64 " ops in %.2f s = %.0f "
               "ops/s, %.1f MB/s; latency p50 %.2f us, p99 %.2f us, "
               "p99.9 %.2f us; %" PRIu64 " misses, %" PRIu64 " errors\n",
               sys, o->op_name, o->size, o->threads, done, secs, done / secs,
               bytes / secs / 1e6, PCT(0.5), PCT(0.99), PCT(0.999), misses,
               errors);
#undef PCT
    free(all);
    free(t);
    free(th);
    return errors ? 2 : 0;
}

/* "kv_peer_driver: OPT 'ARG': why" after an opt_* parser failed; 2. */
static int bad_option(const char *opt, const char *arg)
{
    fprintf(stderr, "kv_peer_driver: %s '%s': %s\n", opt, arg, opt_error());
    return 2;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kv_peer_driver --system memcached|redis --server "
            "HOST:PORT|/unix/socket\n"
            "       [--op get|set] [--size S] [--keys N] [--threads T]\n"
            "       [--seconds S | --ops N] [--warm-up] [--json]\n"
            "The loop of `rdmx-kv bench`: T threads, one connection and one\n"
            "request in flight each; get preloads every key first;\n"
            "--warm-up: each thread then reads every key once, not timed.\n");
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"system", required_argument, NULL, 'S'},
        {"server", required_argument, NULL, 's'},
        {"op", required_argument, NULL, 'o'},
        {"size", required_argument, NULL, 'z'},
        {"keys", required_argument, NULL, 'k'},
        {"threads", required_argument, NULL, 'n'},
        {"seconds", required_argument, NULL, 'd'},
        {"ops", required_argument, NULL, 'N'},
        {"warm-up", no_argument, NULL, 'U'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    opts_t o = {.system = -1, .op = OP_GET, .op_name = "get", .size = 100,
                .keys = 1000, .threads = 1, .seconds = 5};
    int ch;

    while ((ch = getopt_long(argc, argv, "s:h", lo, NULL)) != -1) {
        uint64_t v;

        switch (ch) {
        case 'S':
            if (strcmp(optarg, "memcached") == 0)
                o.system = SYS_MEMCACHED;
            else if (strcmp(optarg, "redis") == 0)
                o.system = SYS_REDIS;
            else {
                usage(stderr);
                return 2;
            }
            break;
        case 's': o.server = optarg; break;
        case 'o':
            if (strcmp(optarg, "get") == 0)
                o.op = OP_GET;
            else if (strcmp(optarg, "set") == 0)
                o.op = OP_SET;
            else {
                fprintf(stderr, "kv_peer_driver: --op get|set\n");
                return 2;
            }
            o.op_name = optarg;
            break;
        case 'z':
            if (opt_size(optarg, &o.size) < 0)
                return bad_option("--size", optarg);
            break;
        case 'k':
            if (opt_uint(optarg, 0, UINT64_MAX, &o.keys) < 0)
                return bad_option("--keys", optarg);
            break;
        case 'n':
            if (opt_uint(optarg, 0, UINT_MAX, &v) < 0)
                return bad_option("--threads", optarg);
            o.threads = (unsigned)v;
            break;
        case 'd':
            if (opt_duration(optarg, OPT_S, &v) < 0)
                return bad_option("--seconds", optarg);
            o.seconds = (double)v / 1e9;
            break;
        case 'N':
            if (opt_uint(optarg, 0, UINT64_MAX, &o.ops) < 0)
                return bad_option("--ops", optarg);
            break;
        case 'U':
            o.warm_up = 1;
            break;
        case 'j': o.json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (o.system < 0 || o.server == NULL || o.keys == 0 || o.threads == 0 ||
        optind != argc) {
        usage(stderr);
        return 2;
    }
    if (o.server[0] == '/') {
        snprintf(o.host, sizeof(o.host), "%s", o.server);
        o.port = 0;
    } else {
        const char *colon = strrchr(o.server, ':');
        uint64_t port;

        if (colon == NULL || colon == o.server ||
            (size_t)(colon - o.server) >= sizeof(o.host)) {
            fprintf(stderr, "kv_peer_driver: --server HOST:PORT\n");
            return 2;
        }
        memcpy(o.host, o.server, (size_t)(colon - o.server));
        o.host[colon - o.server] = '\0';
        if (opt_uint(colon + 1, 1, 65535, &port) < 0) {
            fprintf(stderr, "kv_peer_driver: bad port in '%s': %s\n",
                    o.server, opt_error());
            return 2;
        }
        o.port = (int)port;
    }
    return run(&o);
}
