/*
 * progress_thread: a worker with its own progress thread can be used from
 * several application threads at once.
 *
 * The client's worker is created with RDMX_WORKER_FLAG_PROGRESS_THREAD; the
 * client never calls rdmx_worker_progress. Four application threads share
 * one endpoint and, concurrently, use the blocking wrappers: each puts a
 * pattern into its own slice of a server region, flushes and gets it back
 * (verified), gets from a region the server filled (verified at random
 * offsets), sends self-describing data messages (the server verifies each
 * and counts them) and fetch-adds a shared counter. Sizes vary from 64 B to
 * 1 MiB; half the threads use registered local buffers. Proven: every
 * operation succeeded with the right data, the server received exactly
 * 4 x N intact messages, the counter ends at 4 x N and the fetch-add old
 * values are exactly 0 .. 4N-1, and the last data of each slice is in the
 * server's memory.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS    4
#define ITERS      40
#define SLICE      (2 * TH_MIB)
#define GET_REGION (4 * TH_MIB)
#define MAX_SIZE   TH_MIB

static const size_t sizes[] = {64, 4096, 65536 + 5, 262144, MAX_SIZE};

static rdmx_context_t *ctx;
static rdmx_ep_t *ep;
static ts_region_t rput, rget, rctr;
static uint64_t get_seed;

typedef struct {
    int id;
    pthread_t tid;
    uint8_t *src, *dst, *msg;
    rdmx_mr_t *smr, *dmr, *mmr;
    uint64_t olds[ITERS];
    uint64_t last_seed;
    size_t last_size;
    uint64_t rng;
} worker_thread_t;

static uint64_t next_rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *thread_main(void *arg)
{
    worker_thread_t *t = arg;
    rdmx_op_params_t sp = {.field_mask = RDMX_OP_PARAM_FIELD_MR, .mr = t->smr};
    rdmx_op_params_t dp = {.field_mask = RDMX_OP_PARAM_FIELD_MR, .mr = t->dmr};
    rdmx_op_params_t mp = {.field_mask = RDMX_OP_PARAM_FIELD_MR, .mr = t->mmr};
    int i;

    for (i = 0; i < ITERS; i++) {
        size_t size = sizes[(size_t)(i + t->id) % 5];
        uint64_t seed = th_seed(100 + (uint64_t)t->id, (uint64_t)i, size);
        uint64_t off = (uint64_t)t->id * SLICE;
        uint64_t goff;
        ts_msg_t *hdr = (ts_msg_t *)(void *)t->msg;

        /* put, flush, get back */
        th_fill(t->src, size, seed);
        CHECK_OK(rdmx_put(ep, rput.rmem, off, t->src, size, &sp));
        CHECK_OK(rdmx_ep_flush(ep, NULL));
        memset(t->dst, 0, size);
        CHECK_OK(rdmx_get(ep, rput.rmem, off, t->dst, size, &dp));
        CHECK_PATTERN(t->dst, size, seed, 0);
        t->last_seed = seed;
        t->last_size = size;

        /* get from the server-filled region */
        goff = next_rnd(&t->rng) % (GET_REGION - size);
        CHECK_OK(rdmx_get(ep, rget.rmem, goff, t->dst, size, &dp));
        CHECK_PATTERN(t->dst, size, get_seed, goff);

        /* a self-describing message */
        ts_msg_init(hdr, TS_DATA, seed ^ 1, size, 0, 0);
        th_fill(t->msg + sizeof(*hdr), size, seed ^ 1);
        CHECK_OK(rdmx_send(ep, t->msg, sizeof(*hdr) + size, &mp));

        /* the shared counter */
        CHECK_OK(rdmx_atomic_fadd(ep, rctr.rmem, 0, 1, &t->olds[i], NULL));
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    th_proc_t server;
    rdmx_worker_t *worker;
    worker_thread_t threads[THREADS];
    uint64_t all[THREADS * ITERS];
    ts_reply_t rep;
    double t0;
    int i, j;

    if (argc > 1 && strcmp(argv[1], "--server") == 0)
        return ts_server_main(argc, argv);

    th_init("progress_thread", 110);
    th_spawn_self(&server, "--server", 30000, NULL);
    ctx = th_context();
    worker = th_worker(ctx, RDMX_WORKER_FLAG_PROGRESS_THREAD);
    ep = th_connect(worker, &server, NULL);

    get_seed = th_seed(9, 9, 9);
    ts_alloc(ep, &rput, THREADS * SLICE, RDMX_ACCESS_ALL, TS_KIND_ALLOC, 0);
    ts_alloc(ep, &rget, GET_REGION, RDMX_ACCESS_READ, TS_KIND_REGISTER,
             get_seed);
    ts_alloc(ep, &rctr, 64, RDMX_ACCESS_ATOMIC | RDMX_ACCESS_READ,
             TS_KIND_ALLOC, 0);

    for (i = 0; i < THREADS; i++) {
        worker_thread_t *t = &threads[i];

        memset(t, 0, sizeof(*t));
        t->id = i;
        t->rng = th_seed(1, 2, (uint64_t)i);
        t->src = th_alloc(MAX_SIZE);
        t->dst = th_alloc(MAX_SIZE);
        t->msg = th_alloc(sizeof(ts_msg_t) + MAX_SIZE);
        if (i % 2) {
            CHECK_OK(rdmx_mem_register(ctx, t->src, MAX_SIZE, RDMX_ACCESS_READ,
                                       &t->smr));
            CHECK_OK(rdmx_mem_register(ctx, t->dst, MAX_SIZE, RDMX_ACCESS_WRITE,
                                       &t->dmr));
            CHECK_OK(rdmx_mem_register(ctx, t->msg, sizeof(ts_msg_t) + MAX_SIZE,
                                       RDMX_ACCESS_READ, &t->mmr));
        }
    }
    t0 = th_now_ms();
    for (i = 0; i < THREADS; i++)
        CHECK(pthread_create(&threads[i].tid, NULL, thread_main, &threads[i]) ==
              0);
    for (i = 0; i < THREADS; i++)
        CHECK(pthread_join(threads[i].tid, NULL) == 0);
    th_log("%d threads x %d iterations in %.0f ms", THREADS, ITERS,
           th_now_ms() - t0);

    /* The server got every message intact. */
    ts_call(ep, TS_STATS, 0, 0, 0, 0, &rep);
    CHECKF(rep.v[0] == THREADS * ITERS && rep.v[1] == 0,
           "server: %llu data messages ok, %llu bad, expected %d ok",
           (unsigned long long)rep.v[0], (unsigned long long)rep.v[1],
           THREADS * ITERS);

    /* Fetch-adds were atomic. */
    CHECK_EQ_U64(ts_read64(ep, &rctr, 0), THREADS * ITERS);
    for (i = 0; i < THREADS; i++)
        for (j = 0; j < ITERS; j++)
            all[i * ITERS + j] = threads[i].olds[j];
    qsort(all, THREADS * ITERS, sizeof(all[0]), cmp_u64);
    for (i = 0; i < THREADS * ITERS; i++)
        CHECKF(all[i] == (uint64_t)i, "fetch-add old values: #%d is %llu", i,
               (unsigned long long)all[i]);

    /* Each slice holds its thread's last put. */
    for (i = 0; i < THREADS; i++)
        TS_VERIFY_REMOTE(ep, &rput, (uint64_t)i * SLICE, threads[i].last_size,
                         threads[i].last_seed);

    ts_free(ep, &rput);
    ts_free(ep, &rget);
    ts_free(ep, &rctr);
    ts_quit(ep);
    th_check_exit_ok("server", th_wait_exit(&server, 20000));

    for (i = 0; i < THREADS; i++) {
        worker_thread_t *t = &threads[i];

        if (t->smr) {
            rdmx_mem_deregister(t->smr);
            rdmx_mem_deregister(t->dmr);
            rdmx_mem_deregister(t->mmr);
        }
        free(t->src);
        free(t->dst);
        free(t->msg);
    }
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    th_log("ok");
    return 0;
}
