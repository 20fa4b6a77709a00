/*
 * rdmx-kv: command-line client of rdmx-kvd.
 *
 *   rdmx-kv [--servers A:P,B:P] COMMAND [ARGS]
 *
 * Commands: get put delete touch incr decr exists mget stats flush eval
 * repl bench (rdmx-kv --help lists their arguments). Exit status: 0 done/found,
 * 1 not found (get, exists, delete, touch, incr), 2 error (message on
 * stderr).
 */
#define _GNU_SOURCE
#include <rdmx/kv.h>
#include <rdmx/rdmx.h>

#include "options.h"

#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KV_DEFAULT_SERVERS "127.0.0.1:11311"

typedef struct {
    const char *servers;
    unsigned replicas;
    int timeout_ms;
    char secret[4096];
    size_t secret_len;
    rdmx_context_params_t cp;
    /* put */
    const char *file;
    uint32_t ttl_ms, flags;
    rdmx_kv_put_mode_t mode;
    uint64_t cas;
    int server;
    /* bench */
    const char *op;
    size_t size;
    uint64_t keys;
    unsigned threads, procs, window;
    double read_ratio;
    double seconds;
    uint64_t ops;
    int json;
    int zero_copy;
    int batch;   /* bench --batch: a window's operations with "more" */
    int warm_up; /* bench --warm-up: each thread reads every key first */
    /* after "--" (eval: ARGV; other commands: more arguments) */
    char **tail;
    int ntail;
} opts_t;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what, rdmx_status_t st)
{
    fprintf(stderr, "rdmx-kv: %s: %s: %s\n", what, rdmx_strerror(st),
            rdmx_error_detail());
    fflush(NULL);
    /* Leave without tearing down what is open (connections, UCX): exit
     * status 2 must not be replaced by a leak checker's. */
    _exit(2);
}

/* "rdmx-kv: OPT 'ARG': why" after an opt_* parser failed; returns the exit
 * status of a bad command line, 2. */
static int bad_option(const char *opt, const char *arg)
{
    fprintf(stderr, "rdmx-kv: %s '%s': %s\n", opt, arg, opt_error());
    return 2;
}

typedef struct {
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    rdmx_kv_t *kv;
} client_t;

static void client_open(const opts_t *o, rdmx_context_t *ctx, client_t *c)
{
    rdmx_kv_params_t p = {0};
    rdmx_status_t st;

    c->ctx = ctx;
    p.field_mask = RDMX_KV_PARAM_FIELD_REPLICAS | RDMX_KV_PARAM_FIELD_TIMEOUT;
    p.replicas = o->replicas;
    p.timeout_ms = o->timeout_ms;
    if (o->secret_len > 0) {
        p.field_mask |= RDMX_KV_PARAM_FIELD_AUTH_SECRET;
        p.auth_secret = o->secret;
        p.auth_secret_len = o->secret_len;
    }
    if ((st = rdmx_worker_create(ctx, NULL, &c->w)) != RDMX_OK)
        die("worker", st);
    if ((st = rdmx_kv_create(c->w, o->servers, &p, &c->kv)) != RDMX_OK)
        die("connect", st);
    if ((st = rdmx_kv_wait_ready(c->kv, o->timeout_ms)) != RDMX_OK)
        die(o->servers, st);
}

static void client_close(client_t *c)
{
    rdmx_kv_destroy(c->kv);
    rdmx_worker_destroy(c->w);
}

/* Read all of @f into a malloc'd buffer. */
static char *slurp(FILE *f, size_t *len_p)
{
    size_t cap = 65536, len = 0, n;
    char *buf = malloc(cap);

    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    *len_p = len;
    return buf;
}

/* Exit code of a keyed command's status. */
static int code(const char *what, rdmx_status_t st)
{
    if (st == RDMX_OK)
        return 0;
    if (st == RDMX_ERR_NOT_FOUND) {
        fprintf(stderr, "%s: not found\n", what);
        return 1;
    }
    fprintf(stderr, "rdmx-kv: %s: %s: %s\n", what, rdmx_strerror(st),
            rdmx_error_detail());
    return 2;
}

static int cmd_get(client_t *c, const char *key)
{
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    rdmx_kv_meta_t m;
    rdmx_status_t st = rdmx_kv_get(c->kv, key, strlen(key), buf, cap, NULL,
                                   &m);

    if (st == RDMX_ERR_TOO_BIG) {
        cap = m.length;
        free(buf);
        buf = malloc(cap ? cap : 1);
        st = rdmx_kv_get(c->kv, key, strlen(key), buf, cap, NULL, &m);
    }
    if (st == RDMX_OK && fwrite(buf, 1, m.length, stdout) != m.length)
        st = RDMX_ERR_IO;
    free(buf);
    return code(key, st);
}

static int cmd_put(const opts_t *o, client_t *c, const char *key,
                   const char *value)
{
    rdmx_kv_op_params_t po = {
        .field_mask = RDMX_KV_OP_PARAM_FIELD_MODE | RDMX_KV_OP_PARAM_FIELD_FLAGS |
                      RDMX_KV_OP_PARAM_FIELD_TTL | RDMX_KV_OP_PARAM_FIELD_CAS,
        .mode = o->mode,
        .flags = o->flags,
        .ttl_ms = o->ttl_ms,
        .cas = o->cas};
    char *data;
    size_t len;
    uint64_t cas = 0;
    rdmx_status_t st;

    if (value != NULL) {
        data = strdup(value);
        len = strlen(value);
    } else {
        FILE *f =
            o->file && strcmp(o->file, "-") != 0 ? fopen(o->file, "rb") : stdin;
        if (f == NULL) {
            fprintf(stderr, "rdmx-kv: %s: %s\n", o->file, strerror(errno));
            return 2;
        }
        data = slurp(f, &len);
        if (f != stdin)
            fclose(f);
    }
    if (data == NULL) {
        fprintf(stderr, "rdmx-kv: out of memory\n");
        return 2;
    }
    st = rdmx_kv_put(c->kv, key, strlen(key), data, len, &po, &cas);
    free(data);
    if (st == RDMX_OK)
        fprintf(stderr, "stored %zu bytes, cas %" PRIu64 "\n", len, cas);
    return code(key, st);
}

/* eval FILE.lua [KEY...] [-- ARG...]: run the function on the server that
 * owns the keys; its result to stdout. */
static int cmd_eval(const opts_t *o, client_t *c, int argc, char **argv)
{
    size_t slen, cap = (size_t)16 << 20, olen = 0; /* the server's max_output */
    char *src, *out;
    FILE *f;
    rdmx_status_t st;

    f = strcmp(argv[1], "-") == 0 ? stdin : fopen(argv[1], "rb");
    if (f == NULL) {
        fprintf(stderr, "rdmx-kv: %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    src = slurp(f, &slen);
    if (f != stdin)
        fclose(f);
    out = malloc(cap);
    if (src == NULL || out == NULL) {
        fprintf(stderr, "rdmx-kv: out of memory\n");
        free(src);
        free(out);
        return 2;
    }
    st = rdmx_kv_eval(c->kv, src, slen,
                      &(rdmx_kv_eval_params_t){
                          .field_mask = RDMX_KV_EVAL_PARAM_FIELD_KEYS |
                                        RDMX_KV_EVAL_PARAM_FIELD_ARGS,
                          .keys = (const char *const *)argv + 2,
                          .nkeys = (unsigned)(argc - 2),
                          .args = (const char *const *)o->tail,
                          .nargs = (unsigned)o->ntail},
                      out, cap, &olen);
    if (st == RDMX_OK && fwrite(out, 1, olen, stdout) != olen)
        st = RDMX_ERR_IO;
    free(src);
    free(out);
    if (st == RDMX_OK)
        return 0;
    /* a miss inside the function is the function's business: NOT_FOUND
     * here only means the server could not run it */
    fprintf(stderr, "rdmx-kv: eval %s: %s: %s\n", argv[1], rdmx_strerror(st),
            rdmx_error_detail());
    return 2;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: rdmx-kv [options] COMMAND [ARGS]\n"
        "commands:\n"
        "  get KEY                 value to stdout\n"
        "  put KEY [VALUE]         value from VALUE, -f FILE, or stdin\n"
        "      [--ttl MS] [--flags N] [--add|--replace|--cas VERSION]\n"
        "  delete KEY [--cas V]    touch KEY TTL_MS    exists KEY\n"
        "  incr KEY [DELTA]        decr KEY [DELTA]    (new value to stdout)\n"
        "  mget KEY...             one line per key: KEY LENGTH VALUE|-\n"
        "  stats [--server I]      flush\n"
        "  eval FILE.lua [KEY...] [-- ARG...]\n"
        "                          run a Lua function on the server owning "
        "the\n"
        "                          keys (FILE - = stdin); it sees KEYS, ARGV\n"
        "                          and kv.get/put/delete/exists; its result\n"
        "                          to stdout (docs/LAMBDA.md)\n"
        "  repl                    commands from stdin, one per line\n"
        "  bench [--op get|set|mix] [--size S] [--keys N] [--read-ratio R]\n"
        "        [--procs P] [--threads T] [--window W]\n"
        "        [--seconds S | --ops N] [--zero-copy] [--batch]\n"
        "        [--warm-up] [--json]\n"
        "                          P processes x T threads, each its own\n"
        "                          client with W operations in flight\n"
        "                          (--ops: per thread); ops/s, MB/s and\n"
        "                          p50/p99/p99.9 from issue to completion;\n"
        "                          --batch: the operations that refill the\n"
        "                          window leave together (all but the last\n"
        "                          with RDMX_KV_OP_PARAM_FIELD_MORE);\n"
        "                          --warm-up: each thread first reads every\n"
        "                          key once, not timed\n"
        "options:\n"
        "  -s, --servers A:P,B:P   servers (default " KV_DEFAULT_SERVERS ")\n"
        "  -r, --replicas R        copies of each key (default 1)\n"
        "  -t, --timeout MS        per operation (default 5000)\n"
        "      --auth-secret-file F\n"
        "      --transport auto|shm|tcp|rdma|ofi[:PROVIDER]\n"
        "exit: 0 ok/found, 1 not found, 2 error\n");
}

/* --- bench ---------------------------------------------------------------- */

/*
 * P processes (--procs) x T threads (--threads), each thread with its own
 * worker and client and W operations in flight (--window; 1: blocking
 * calls, which sleep on the worker's fd after 50 us like any blocking
 * caller; more: non-blocking calls and a busy progress loop). The keys are
 * loaded first, by one client. Latency is from issue to completion.
 */

typedef struct {
    uint64_t done, errors, misses, bytes;
    double rate; /* ops/s: done / the slowest thread's seconds, summed
                    over processes */
    double secs;
} bench_sum_t;

typedef struct bench_thread bench_thread_t;

typedef struct {
    bench_thread_t *t;
    char key[64];
    size_t klen;
    char *buf;
    struct timespec start;
    int get;
    int busy; /* issued, its callback has not run */
} bench_slot_t;

struct bench_thread {
    const opts_t *o;
    rdmx_context_t *ctx;
    unsigned index;
    uint64_t done, errors, misses, bytes;
    uint64_t *lat;   /* ns per op */
    size_t nlat, caplat;
    double start, end;
    uint64_t rng;
    rdmx_mr_t *mr;
    unsigned inflight;
};

static volatile int bench_go;

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void bench_key(const opts_t *o, uint64_t k, char *key, size_t *klen)
{
    int n = snprintf(key, 64, "bench:%" PRIu64, k % o->keys);
    *klen = (size_t)n;
}

/* Every key a reader may ask for exists. */
static void bench_load(const opts_t *o, rdmx_context_t *ctx)
{
    client_t c;
    char *buf = malloc(o->size ? o->size : 1), key[64];
    size_t klen;
    rdmx_status_t st;

    memset(buf, 'x', o->size);
    client_open(o, ctx, &c);
    for (uint64_t k = 0; k < o->keys; k++) {
        bench_key(o, k, key, &klen);
        if ((st = rdmx_kv_put(c.kv, key, klen, buf, o->size, NULL, NULL)) !=
            RDMX_OK)
            die("bench load", st);
    }
    client_close(&c);
    free(buf);
}

static void bench_record(bench_thread_t *t, rdmx_status_t st,
                         const struct timespec *a)
{
    struct timespec b;

    clock_gettime(CLOCK_MONOTONIC, &b);
    if (st == RDMX_OK)
        t->bytes += t->o->size;
    else if (st == RDMX_ERR_NOT_FOUND)
        t->misses++;
    else
        t->errors++;
    t->done++;
    if (t->nlat == t->caplat) {
        t->caplat = t->caplat ? t->caplat * 2 : 65536;
        t->lat = realloc(t->lat, t->caplat * sizeof(*t->lat));
        if (t->lat == NULL)
            die("bench", RDMX_ERR_NO_MEMORY);
    }
    t->lat[t->nlat++] = (uint64_t)(b.tv_sec - a->tv_sec) * 1000000000ull +
                        (uint64_t)(b.tv_nsec - a->tv_nsec);
}

static int bench_pick_get(bench_thread_t *t)
{
    const opts_t *o = t->o;
    return strcmp(o->op, "get") == 0 ||
           (strcmp(o->op, "mix") == 0 &&
            (double)(xorshift(&t->rng) % 10000) < o->read_ratio * 10000);
}

static void bench_slot_done(rdmx_status_t st, const rdmx_kv_meta_t *meta,
                            void *arg)
{
    bench_slot_t *s = arg;
    (void)meta;
    bench_record(s->t, st, &s->start);
    s->busy = 0;
    s->t->inflight--;
}

/* Issue the next operation of slot @s (@more: others follow at once); 0
 * if it could not start. */
static int bench_issue(bench_thread_t *t, client_t *c, bench_slot_t *s,
                       int more)
{
    const opts_t *o = t->o;
    rdmx_kv_op_params_t kp;
    rdmx_status_t st;

    bench_key(o, xorshift(&t->rng), s->key, &s->klen);
    s->get = bench_pick_get(t);
    clock_gettime(CLOCK_MONOTONIC, &s->start);
    t->inflight++;
    s->busy = 1;
    kp.field_mask = RDMX_KV_OP_PARAM_FIELD_MR | RDMX_KV_OP_PARAM_FIELD_CB;
    kp.mr = t->mr;
    kp.cb = bench_slot_done;
    kp.arg = s;
    if (more) {
        kp.field_mask |= RDMX_KV_OP_PARAM_FIELD_MORE;
        kp.more = 1;
    }
    if (s->get)
        st = rdmx_kv_get_nb(c->kv, s->key, s->klen, s->buf, o->size, &kp);
    else
        st = rdmx_kv_put_nb(c->kv, s->key, s->klen, s->buf, o->size, &kp);
    if (st != RDMX_INPROGRESS) {
        t->inflight--;
        s->busy = 0;
        bench_record(t, st, &s->start);
        return 0;
    }
    return 1;
}

/*
 * --warm-up: this thread reads every key once, in order, before the clock
 * starts, so that the timed part measures a client that has run a while: its
 * connection's one-time work is done (over shared memory, the client's
 * mapping of the server's store has its pages; docs/KV.md, "Mapped GETs
 * over shared memory"). bench/kv_peer_driver.c does the same for the peers.
 */
static void bench_warm_up(const opts_t *o, client_t *c, char *buf,
                          rdmx_mr_t *mr)
{
    rdmx_kv_op_params_t kp = {.field_mask = RDMX_KV_OP_PARAM_FIELD_MR,
                              .mr = mr};
    rdmx_kv_meta_t m;
    rdmx_status_t st;
    char key[64];
    size_t klen;

    for (uint64_t k = 0; k < o->keys; k++) {
        bench_key(o, k, key, &klen);
        st = rdmx_kv_get(c->kv, key, klen, buf, o->size, &kp, &m);
        if (st != RDMX_OK && st != RDMX_ERR_NOT_FOUND) /* mix: not loaded */
            die("bench warm-up", st);
    }
}

static void *bench_main(void *arg)
{
    bench_thread_t *t = arg;
    const opts_t *o = t->o;
    size_t slot_size = o->size ? (o->size + 63) & ~(size_t)63 : 64;
    bench_slot_t *slots = calloc(o->window, sizeof(*slots));
    client_t c;
    char *mem;
    double deadline;
    rdmx_status_t st;

    t->rng = 0x9e3779b97f4a7c15ull * (t->index + 1) + (uint64_t)getpid();
    client_open(o, t->ctx, &c);
    if (o->zero_copy) {
        if ((st = rdmx_mem_alloc(t->ctx, slot_size * o->window,
                                 RDMX_ACCESS_READ | RDMX_ACCESS_WRITE,
                                 &t->mr)) != RDMX_OK)
            die("register", st);
        mem = rdmx_mr_addr(t->mr);
    } else {
        mem = malloc(slot_size * o->window);
    }
    if (slots == NULL || mem == NULL)
        die("bench", RDMX_ERR_NO_MEMORY);
    memset(mem, 'x', slot_size * o->window);
    for (unsigned i = 0; i < o->window; i++) {
        slots[i].t = t;
        slots[i].buf = mem + slot_size * i;
    }
    if (o->warm_up)
        bench_warm_up(o, &c, slots[0].buf, t->mr);
    __atomic_add_fetch(&bench_go, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&bench_go, __ATOMIC_SEQ_CST) <= (int)o->threads)
        usleep(100);
    t->start = now_s();
    deadline = t->start + o->seconds;
    if (o->window == 1) {
        bench_slot_t *s = &slots[0];
        rdmx_kv_op_params_t kp = {.field_mask = RDMX_KV_OP_PARAM_FIELD_MR,
                                  .mr = t->mr};
        for (uint64_t i = 0;; i++) {
            rdmx_kv_meta_t m;
            if (o->ops ? i >= o->ops : ((i & 15) == 0 && now_s() >= deadline))
                break;
            bench_key(o, xorshift(&t->rng), s->key, &s->klen);
            s->get = bench_pick_get(t);
            clock_gettime(CLOCK_MONOTONIC, &s->start);
            if (s->get)
                st = rdmx_kv_get(c.kv, s->key, s->klen, s->buf, o->size, &kp,
                                 &m);
            else
                st = rdmx_kv_put(c.kv, s->key, s->klen, s->buf, o->size, &kp,
                                 NULL);
            bench_record(t, st, &s->start);
        }
    } else {
        uint64_t issued = 0;
        unsigned spins = 0;
        int more = 1;
        while (more || t->inflight > 0) {
            if (more && (o->ops ? issued >= o->ops
                                : (++spins & 63) == 0 && now_s() >= deadline))
                more = 0;
            unsigned last = 0; /* the last free slot: it sends the batch */
            for (unsigned i = 0; o->batch && i < o->window; i++)
                if (!slots[i].busy)
                    last = i;
            for (unsigned i = 0; more && i < o->window; i++) {
                if (slots[i].busy)
                    continue;
                issued++;
                bench_issue(t, &c, &slots[i], o->batch && i != last);
                if (o->ops && issued >= o->ops)
                    more = 0;
            }
            rdmx_worker_progress(c.w);
        }
    }
    t->end = now_s();
    client_close(&c);
    if (t->mr != NULL)
        rdmx_mem_deregister(t->mr);
    else
        free(mem);
    free(slots);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* This process's threads; their latencies appended to *lat_p. */
static void bench_threads(const opts_t *o, rdmx_context_t *ctx,
                          bench_sum_t *sum, uint64_t **lat_p, size_t *nlat_p)
{
    bench_thread_t *t = calloc(o->threads, sizeof(*t));
    pthread_t *th = calloc(o->threads, sizeof(*th));
    size_t nall = 0, k = 0;
    double secs = 0;

    if (t == NULL || th == NULL)
        die("bench", RDMX_ERR_NO_MEMORY);
    for (unsigned i = 0; i < o->threads; i++) {
        t[i].o = o;
        t[i].ctx = ctx;
        t[i].index = i;
        pthread_create(&th[i], NULL, bench_main, &t[i]);
    }
    while (__atomic_load_n(&bench_go, __ATOMIC_SEQ_CST) < (int)o->threads)
        usleep(1000);
    __atomic_add_fetch(&bench_go, 1, __ATOMIC_SEQ_CST);
    memset(sum, 0, sizeof(*sum));
    for (unsigned i = 0; i < o->threads; i++) {
        pthread_join(th[i], NULL);
        sum->done += t[i].done;
        sum->errors += t[i].errors;
        sum->misses += t[i].misses;
        sum->bytes += t[i].bytes;
        nall += t[i].nlat;
        if (t[i].end - t[i].start > secs)
            secs = t[i].end - t[i].start;
    }
    sum->secs = secs;
    sum->rate = secs > 0 ? (double)sum->done / secs : 0;
    *lat_p = realloc(*lat_p, (*nlat_p + nall + 1) * sizeof(**lat_p));
    if (*lat_p == NULL)
        die("bench", RDMX_ERR_NO_MEMORY);
    for (unsigned i = 0; i < o->threads; i++) {
        memcpy(*lat_p + *nlat_p + k, t[i].lat, t[i].nlat * sizeof(**lat_p));
        k += t[i].nlat;
        free(t[i].lat);
    }
    *nlat_p += nall;
    free(t);
    free(th);
}

static rdmx_context_t *bench_context(const opts_t *o)
{
    rdmx_context_t *ctx;
    rdmx_status_t st = rdmx_context_create(&o->cp, &ctx);
    if (st != RDMX_OK)
        die("context", st);
    return ctx;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* --procs P: P child processes (each its own UCX context, created after
 * fork), results back over pipes. */
static int bench_procs(const opts_t *o, bench_sum_t *sum, uint64_t **lat_p,
                       size_t *nlat_p)
{
    pid_t *pid = calloc(o->procs, sizeof(*pid));
    int *fd = calloc(o->procs, sizeof(*fd)), failed = 0, ws;

    if (pid == NULL || fd == NULL)
        die("bench", RDMX_ERR_NO_MEMORY);
    for (unsigned p = 0; p < o->procs; p++) {
        int pfd[2];
        if (pipe(pfd) != 0) {
            perror("rdmx-kv: pipe");
            free(pid);
            free(fd);
            return 2;
        }
        fflush(NULL);
        pid[p] = fork();
        if (pid[p] < 0) {
            perror("rdmx-kv: fork");
            free(pid);
            free(fd);
            return 2;
        }
        if (pid[p] == 0) {
            rdmx_context_t *ctx;
            bench_sum_t s;
            uint64_t *lat = NULL;
            size_t nlat = 0;
            close(pfd[0]);
            ctx = bench_context(o);
            bench_threads(o, ctx, &s, &lat, &nlat);
            if (write_all(pfd[1], &s, sizeof(s)) != 0 ||
                write_all(pfd[1], &nlat, sizeof(nlat)) != 0 ||
                write_all(pfd[1], lat, nlat * sizeof(*lat)) != 0)
                _exit(2);
            rdmx_context_destroy(ctx);
            _exit(0);
        }
        close(pfd[1]);
        fd[p] = pfd[0];
    }
    memset(sum, 0, sizeof(*sum));
    for (unsigned p = 0; p < o->procs; p++) {
        bench_sum_t s;
        size_t n;
        if (read_all(fd[p], &s, sizeof(s)) != 0 ||
            read_all(fd[p], &n, sizeof(n)) != 0 ||
            (*lat_p = realloc(*lat_p, (*nlat_p + n + 1) * sizeof(**lat_p))) ==
                NULL ||
            read_all(fd[p], *lat_p + *nlat_p, n * sizeof(**lat_p)) != 0) {
            failed = 1;
        } else {
            *nlat_p += n;
            sum->done += s.done;
            sum->errors += s.errors;
            sum->misses += s.misses;
            sum->bytes += s.bytes;
            sum->rate += s.rate;
            if (s.secs > sum->secs)
                sum->secs = s.secs;
        }
        close(fd[p]);
    }
    for (unsigned p = 0; p < o->procs; p++)
        if (waitpid(pid[p], &ws, 0) != pid[p] || !WIFEXITED(ws) ||
            WEXITSTATUS(ws) != 0)
            failed = 1;
    free(pid);
    free(fd);
    if (failed)
        fprintf(stderr, "rdmx-kv: bench: a client process failed\n");
    return failed ? 2 : 0;
}

static int cmd_bench(const opts_t *o)
{
    bench_sum_t sum;
    uint64_t *all = NULL;
    size_t nall = 0;
    double mbps;
    int rc = 0;

    if (strcmp(o->op, "set") != 0) {
        /* load in a child when more processes follow: UCX must not be
         * initialised in a process that forks */
        if (o->procs > 1) {
            pid_t p;
            int ws;
            fflush(NULL);
            if ((p = fork()) == 0) {
                rdmx_context_t *ctx = bench_context(o);
                bench_load(o, ctx);
                rdmx_context_destroy(ctx);
                _exit(0);
            }
            if (p < 0 || waitpid(p, &ws, 0) != p || !WIFEXITED(ws) ||
                WEXITSTATUS(ws) != 0) {
                fprintf(stderr, "rdmx-kv: bench: loading the keys failed\n");
                return 2;
            }
        }
    }
    if (o->procs > 1) {
        rc = bench_procs(o, &sum, &all, &nall);
    } else {
        rdmx_context_t *ctx = bench_context(o);
        if (strcmp(o->op, "set") != 0)
            bench_load(o, ctx);
        bench_threads(o, ctx, &sum, &all, &nall);
        rdmx_context_destroy(ctx);
    }
    if (rc != 0) {
        free(all);
        return rc;
    }
    qsort(all, nall, sizeof(*all), cmp_u64);
    mbps = sum.done ? sum.rate * ((double)sum.bytes / (double)sum.done) / 1e6
                    : 0;
#define PCT(q) (nall ? all[(size_t)((double)(nall - 1) * (q))] / 1e3 : 0.0)
    if (o->json)
        printf("{\"op\":\"%s\",\"size\":%zu,\"procs\":%u,\"threads\":%u,"
               "\"window\":%u,\"warm_up\":%d,\"ops\":%" PRIu64
               ",\"errors\":%" PRIu64 ",\"misses\":%" PRIu64
               ",\"seconds\":%.3f,\"ops_per_s\":%.0f,"
               "\"mb_per_s\":%.1f,\"p50_us\":%.2f,\"p99_us\":%.2f,"
               "\"p999_us\":%.2f}\n",
               o->op, o->size, o->procs, o->threads, o->window, o->warm_up,
               sum.done, sum.errors, sum.misses, sum.secs, sum.rate, mbps,
               PCT(0.5), PCT(0.99), PCT(0.999));
    else
        printf("%s %zu B x %u procs x %u threads x %u in flight: %" PRIu64
               " ops in %.2f s = %.0f ops/s, %.1f MB/s; latency p50 %.2f "
               "us, p99 %.2f us, p99.9 %.2f us; %" PRIu64 " misses, %" PRIu64
               " errors\n",
               o->op, o->size, o->procs, o->threads, o->window, sum.done,
               sum.secs, sum.rate, mbps, PCT(0.5), PCT(0.99), PCT(0.999),
               sum.misses, sum.errors);
#undef PCT
    free(all);
    return sum.errors ? 2 : 0;
}

/* --- commands ------------------------------------------------------------- */

static int run(const opts_t *o, client_t *c, int argc, char **argv);

static int cmd_repl(const opts_t *o, client_t *c)
{
    char line[65536];

    while (fgets(line, sizeof(line), stdin) != NULL) {
        char *args[64];
        int n = 0;
        for (char *tok = strtok(line, " \t\r\n"); tok && n < 64;
             tok = strtok(NULL, " \t\r\n"))
            args[n++] = tok;
        if (n == 0)
            continue;
        if (strcmp(args[0], "quit") == 0 || strcmp(args[0], "exit") == 0)
            break;
        int rc = run(o, c, n, args);
        if (strcmp(args[0], "get") == 0 && rc == 0)
            putchar('\n');
        printf("%s\n", rc == 0 ? "OK" : rc == 1 ? "NOT_FOUND" : "ERROR");
        fflush(stdout);
    }
    return 0;
}

static int run(const opts_t *o, client_t *c, int argc, char **argv)
{
    const char *cmd = argv[0];
    rdmx_status_t st;

#define NEED(n)                                                                \
    if (argc < (n) + 1) {                                                      \
        fprintf(stderr, "rdmx-kv %s: missing argument\n", cmd);                \
        return 2;                                                              \
    }
    if (strcmp(cmd, "get") == 0) {
        NEED(1);
        return cmd_get(c, argv[1]);
    }
    if (strcmp(cmd, "put") == 0 || strcmp(cmd, "set") == 0) {
        NEED(1);
        return cmd_put(o, c, argv[1], argc > 2 ? argv[2] : NULL);
    }
    if (strcmp(cmd, "delete") == 0) {
        NEED(1);
        return code(argv[1], rdmx_kv_delete(c->kv, argv[1], strlen(argv[1]),
                                            o->cas));
    }
    if (strcmp(cmd, "touch") == 0) {
        uint64_t ttl;
        NEED(2);
        if (opt_uint(argv[2], 0, UINT32_MAX, &ttl) < 0)
            return bad_option("touch TTL_MS", argv[2]);
        return code(argv[1], rdmx_kv_touch(c->kv, argv[1], strlen(argv[1]),
                                           (uint32_t)ttl));
    }
    if (strcmp(cmd, "exists") == 0) {
        NEED(1);
        return code(argv[1], rdmx_kv_exists(c->kv, argv[1], strlen(argv[1])));
    }
    if (strcmp(cmd, "incr") == 0 || strcmp(cmd, "decr") == 0) {
        uint64_t v = 0, delta = 1;
        NEED(1);
        if (argc > 2 && opt_uint(argv[2], 0, UINT64_MAX, &delta) < 0)
            return bad_option(cmd[0] == 'd' ? "decr DELTA" : "incr DELTA",
                              argv[2]);
        st = rdmx_kv_incr(c->kv, argv[1], strlen(argv[1]), delta,
                          cmd[0] == 'd', &v);
        if (st == RDMX_OK)
            printf("%" PRIu64 "\n", v);
        return code(argv[1], st);
    }
    if (strcmp(cmd, "mget") == 0) {
        size_t n = (size_t)argc - 1;
        rdmx_kv_mget_t *items;
        int rc = 0;
        NEED(1);
        items = calloc(n, sizeof(*items));
        if (items == NULL)
            die("mget", RDMX_ERR_NO_MEMORY);
        for (size_t i = 0; i < n; i++) {
            items[i].key = argv[i + 1];
            items[i].klen = strlen(argv[i + 1]);
            items[i].capacity = 65536;
            items[i].buf = malloc(items[i].capacity);
        }
        st = rdmx_kv_mget(c->kv, items, n);
        for (size_t i = 0; i < n; i++) {
            if (items[i].status == RDMX_OK)
                printf("%s %zu %.*s\n", argv[i + 1], items[i].meta.length,
                       (int)items[i].meta.length, (char *)items[i].buf);
            else
                printf("%s - %s\n", argv[i + 1],
                       rdmx_status_name(items[i].status));
            if (items[i].status != RDMX_OK && rc == 0)
                rc = items[i].status == RDMX_ERR_NOT_FOUND ? 1 : 2;
            free(items[i].buf);
        }
        free(items);
        if (st != RDMX_OK && st != RDMX_ERR_NOT_FOUND)
            return code("mget", st);
        return rc;
    }
    if (strcmp(cmd, "stats") == 0) {
        char buf[8192];
        unsigned from = o->server >= 0 ? (unsigned)o->server : 0;
        unsigned to = o->server >= 0 ? from + 1 : rdmx_kv_servers(c->kv);
        for (unsigned i = from; i < to; i++) {
            st = rdmx_kv_stats(c->kv, i, buf, sizeof(buf));
            if (st != RDMX_OK)
                return code("stats", st);
            if (to - from > 1)
                printf("# server %u\n", i);
            fputs(buf, stdout);
        }
        return 0;
    }
    if (strcmp(cmd, "flush") == 0)
        return code("flush", rdmx_kv_flush(c->kv));
    if (strcmp(cmd, "eval") == 0) {
        NEED(1);
        return cmd_eval(o, c, argc, argv);
    }
    fprintf(stderr, "rdmx-kv: unknown command '%s'\n", cmd);
    return 2;
#undef NEED
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"servers", required_argument, NULL, 's'},
        {"replicas", required_argument, NULL, 'r'},
        {"timeout", required_argument, NULL, 't'},
        {"file", required_argument, NULL, 'f'},
        {"ttl", required_argument, NULL, 'T'},
        {"flags", required_argument, NULL, 'F'},
        {"add", no_argument, NULL, 'a'},
        {"replace", no_argument, NULL, 'R'},
        {"cas", required_argument, NULL, 'c'},
        {"server", required_argument, NULL, 'S'},
        {"op", required_argument, NULL, 'o'},
        {"size", required_argument, NULL, 'z'},
        {"keys", required_argument, NULL, 'k'},
        {"threads", required_argument, NULL, 'n'},
        {"procs", required_argument, NULL, 'P'},
        {"window", required_argument, NULL, 'W'},
        {"read-ratio", required_argument, NULL, 'x'},
        {"seconds", required_argument, NULL, 'd'},
        {"ops", required_argument, NULL, 'N'},
        {"json", no_argument, NULL, 'j'},
        {"zero-copy", no_argument, NULL, 'Z'},
        {"batch", no_argument, NULL, 'B'},
        {"warm-up", no_argument, NULL, 'U'},
        {"auth-secret-file", required_argument, NULL, 'A'},
        {"transport", required_argument, NULL, 'X'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    opts_t o = {.servers = KV_DEFAULT_SERVERS, .replicas = 1,
                .timeout_ms = 5000, .server = -1, .op = "get", .size = 100,
                .keys = 1000, .threads = 1, .procs = 1, .window = 1, .read_ratio = 0.9,
                .seconds = 5};
    rdmx_context_t *ctx;
    client_t c;
    rdmx_status_t st;
    int ch, rc;

    /* Everything after the first "--" is an argument, never an option: eval
     * passes it as ARGV; other commands take it as more arguments. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            o.tail = argv + i + 1;
            o.ntail = argc - i - 1;
            argc = i;
            break;
        }
    }
    while ((ch = getopt_long(argc, argv, "s:r:t:f:h", lo, NULL)) != -1) {
        uint64_t v;

        switch (ch) {
        case 's': o.servers = optarg; break;
        case 'r':
            if (opt_uint(optarg, 0, UINT_MAX, &v) < 0)
                return bad_option("--replicas", optarg);
            o.replicas = (unsigned)v;
            break;
        case 't':
            if (opt_duration(optarg, OPT_MS, &v) < 0)
                return bad_option("--timeout", optarg);
            if (opt_ns_to_ms(v) > INT_MAX) {
                fprintf(stderr, "rdmx-kv: --timeout '%s': too long\n", optarg);
                return 2;
            }
            o.timeout_ms = (int)opt_ns_to_ms(v);
            break;
        case 'f': o.file = optarg; break;
        case 'T':
            if (opt_duration(optarg, OPT_MS, &v) < 0)
                return bad_option("--ttl", optarg);
            if (opt_ns_to_ms(v) > UINT32_MAX) {
                fprintf(stderr, "rdmx-kv: --ttl '%s': too long\n", optarg);
                return 2;
            }
            o.ttl_ms = (uint32_t)opt_ns_to_ms(v);
            break;
        case 'F': o.flags = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'a': o.mode = RDMX_KV_PUT_ADD; break;
        case 'R': o.mode = RDMX_KV_PUT_REPLACE; break;
        case 'c':
            if (opt_uint(optarg, 0, UINT64_MAX, &o.cas) < 0)
                return bad_option("--cas", optarg);
            o.mode = RDMX_KV_PUT_CAS;
            break;
        case 'S':
            if (opt_uint(optarg, 0, INT_MAX, &v) < 0)
                return bad_option("--server", optarg);
            o.server = (int)v;
            break;
        case 'o': o.op = optarg; break;
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
        case 'P':
            if (opt_uint(optarg, 0, UINT_MAX, &v) < 0)
                return bad_option("--procs", optarg);
            o.procs = (unsigned)v;
            break;
        case 'W':
            if (opt_uint(optarg, 0, UINT_MAX, &v) < 0)
                return bad_option("--window", optarg);
            o.window = (unsigned)v;
            break;
        case 'x': o.read_ratio = atof(optarg); break;
        case 'd':
            if (opt_duration(optarg, OPT_S, &v) < 0)
                return bad_option("--seconds", optarg);
            o.seconds = (double)v / 1e9;
            break;
        case 'N':
            if (opt_uint(optarg, 0, UINT64_MAX, &o.ops) < 0)
                return bad_option("--ops", optarg);
            break;
        case 'j': o.json = 1; break;
        case 'Z': o.zero_copy = 1; break;
        case 'B':
            o.batch = 1;
            break;
        case 'U':
            o.warm_up = 1;
            break;
        case 'A': {
            FILE *f = fopen(optarg, "r");
            if (f == NULL) {
                fprintf(stderr, "rdmx-kv: %s: %s\n", optarg, strerror(errno));
                return 2;
            }
            o.secret_len = fread(o.secret, 1, sizeof(o.secret), f);
            fclose(f);
            while (o.secret_len > 0 && (o.secret[o.secret_len - 1] == '\n' ||
                                        o.secret[o.secret_len - 1] == '\r'))
                o.secret_len--;
            break;
        }
        case 'X':
            o.cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_TRANSPORT |
                               RDMX_CONTEXT_PARAM_FIELD_TRANSPORT_NAME;
            o.cp.transport_name = optarg;
            if (rdmx_transport_parse(optarg, &o.cp.transport) != RDMX_OK) {
                fprintf(stderr, "rdmx-kv: --transport "
                                "auto|shm|tcp|rdma|ofi[:PROVIDER]\n");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    /* GNU getopt moved the options; the command and its arguments remain */
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    argc -= optind;
    argv += optind;
    if (o.ntail > 0 && strcmp(argv[0], "eval") != 0) {
        /* the options are parsed: append the tail to the arguments (kept
         * under a static root: they live until exit) */
        static char **all;
        all = calloc((size_t)argc + (size_t)o.ntail + 1, sizeof(*all));
        if (all == NULL)
            die("arguments", RDMX_ERR_NO_MEMORY);
        memcpy(all, argv, (size_t)argc * sizeof(*all));
        memcpy(all + argc, o.tail, (size_t)o.ntail * sizeof(*all));
        argv = all;
        argc += o.ntail;
        o.ntail = 0;
    }
    if (o.keys == 0 || o.threads == 0 || o.procs == 0 || o.procs > 256 ||
        o.window == 0 || o.window > 4096) {
        fprintf(stderr, "rdmx-kv: --keys, --threads, --procs (<= 256) and "
                        "--window (<= 4096) must be positive\n");
        return 2;
    }
    {
        /* all servers on loopback: keep UCX's tcp on lo */
        int all_lo = 1;
        char *list = strdup(o.servers), *save = NULL;
        for (char *s = strtok_r(list, ",", &save); s;
             s = strtok_r(NULL, ",", &save)) {
            char host[256];
            uint16_t port;
            if (rdmx_addr_parse(s, host, sizeof(host), &port) != RDMX_OK ||
                !rdmx_host_is_loopback(host))
                all_lo = 0;
        }
        free(list);
        if (all_lo && getenv("UCX_NET_DEVICES") == NULL) {
            o.cp.field_mask |= RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
            o.cp.net_devices = "lo";
        }
    }
    if (strcmp(argv[0], "bench") == 0)
        return cmd_bench(&o);
    if ((st = rdmx_context_create(&o.cp, &ctx)) != RDMX_OK)
        die("context", st);
    client_open(&o, ctx, &c);
    rc = strcmp(argv[0], "repl") == 0 ? cmd_repl(&o, &c)
                                      : run(&o, &c, argc, argv);
    client_close(&c);
    rdmx_context_destroy(ctx);
    return rc;
}
