/*
 * Worker timers and posted functions, the transport reported by the
 * context and the endpoint, and the limits of blocking operations.
 *
 *  A. Timers fire in due order, not before their time, on a worker that
 *     sleeps in rdmx_worker_wait; a canceled one runs at once with
 *     RDMX_ERR_CANCELED and a second cancel is RDMX_ERR_NOT_FOUND.
 *  B. Functions posted from another thread run on the worker's thread in
 *     order, and wake a worker asleep in rdmx_worker_wait(-1).
 *  C. Destroying a worker runs its pending timers and posts with
 *     RDMX_ERR_CANCELED, each exactly once.
 *  D. A progress-thread worker fires timers started from another thread.
 *  E. Against a server process: the context and the endpoint name the
 *     transport; a blocking receive past its limit is withdrawn and the
 *     connection stays up (the server answers after it); a blocking send
 *     a stopped server cannot complete returns RDMX_ERR_TIMEOUT near its
 *     limit and fails the connection.
 *  F. A worker created with RDMX_WORKER_FLAG_BUSY_POLL, against the same
 *     server: blocking calls complete (they poll instead of sleeping), a
 *     blocking receive past its limit still ends near it, and
 *     rdmx_worker_wait on it sleeps for its timeout and no longer than a
 *     few timer periods beyond.
 */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- A: timers ------------------------------------------------------------ */

typedef struct {
    int order[8];
    rdmx_status_t status[8];
    double at_ms[8];
    int n;
} fired_t;

typedef struct {
    fired_t *f;
    int id;
} tag_t;

static void on_timer(rdmx_status_t status, void *arg)
{
    tag_t *t = arg;
    fired_t *f = t->f;

    f->order[f->n] = t->id;
    f->status[f->n] = status;
    f->at_ms[f->n] = th_now_ms();
    f->n++;
}

static void test_timers(rdmx_context_t *ctx)
{
    rdmx_worker_t *w = th_worker(ctx, 0);
    fired_t f = {0};
    tag_t t[5] = {{&f, 0}, {&f, 1}, {&f, 2}, {&f, 3}, {&f, 4}};
    uint64_t id2s, id;
    double t0 = th_now_ms();

    CHECK_OK(rdmx_worker_timer_start(w, 2000, on_timer, &t[3], &id2s));
    CHECK_OK(rdmx_worker_timer_start(w, 20, on_timer, &t[1], NULL));
    CHECK_OK(rdmx_worker_timer_start(w, 40, on_timer, &t[2], NULL));
    CHECK_OK(rdmx_worker_timer_start(w, 0, on_timer, &t[0], NULL));
    CHECK_OK(rdmx_worker_timer_start(w, 5000, on_timer, &t[4], &id));
    CHECK_ST(rdmx_worker_timer_start(w, -1, on_timer, &t[4], NULL),
             RDMX_ERR_INVALID);
    CHECK_ST(rdmx_worker_timer_start(w, 1, NULL, NULL, NULL),
             RDMX_ERR_INVALID);

    /* The worker sleeps between timers: each wait returns once one fired. */
    while (f.n < 3)
        CHECK_OK(rdmx_worker_wait(w, RDMX_TIMEOUT_INFINITE));
    CHECK(f.order[0] == 0 && f.order[1] == 1 && f.order[2] == 2);
    CHECKF(f.at_ms[1] - t0 >= 19.5, "20 ms timer fired after %.1f ms",
           f.at_ms[1] - t0);
    CHECKF(f.at_ms[2] - t0 >= 39.5, "40 ms timer fired after %.1f ms",
           f.at_ms[2] - t0);
    for (int i = 0; i < 3; i++)
        CHECK_ST(f.status[i], RDMX_OK);

    /* Cancel the 2 s one before it is due (a loaded machine may stall the
     * test for a while after the 40 ms one): it runs now, canceled. */
    CHECK_OK(rdmx_worker_timer_cancel(w, id2s));
    CHECK(f.n == 4 && f.order[3] == 3);
    CHECK_ST(f.status[3], RDMX_ERR_CANCELED);
    CHECK_ST(rdmx_worker_timer_cancel(w, id2s), RDMX_ERR_NOT_FOUND);
    CHECK(strstr(rdmx_error_detail(), "no pending timer") != NULL);

    /* Nothing fires late: 100 ms of waiting leaves the 5 s timer alone. */
    th_progress_for(w, 100);
    CHECK(f.n == 4);
    CHECK_OK(rdmx_worker_timer_cancel(w, id));
    CHECK(f.n == 5 && f.status[4] == RDMX_ERR_CANCELED);
    rdmx_worker_destroy(w);
    th_log("A: timers fire in order, not early; cancel runs them canceled");
}

/* --- B: posts from another thread ------------------------------------------ */

#define NPOSTS 2000

typedef struct {
    rdmx_worker_t *w;
    pthread_t worker_thread;
    int next;        /* the sequence number expected next */
    int out_of_order;
    int wrong_thread;
    volatile int ran;
    int delay_ms;
} posts_t;

static void on_post(rdmx_status_t status, void *arg)
{
    posts_t *p = *(posts_t **)arg;
    int seq = (int)(intptr_t)((void **)arg)[1];

    if (status != RDMX_OK || seq != p->next)
        p->out_of_order++;
    if (!pthread_equal(pthread_self(), p->worker_thread))
        p->wrong_thread++;
    p->next++;
    free(arg);
    __atomic_add_fetch(&p->ran, 1, __ATOMIC_RELEASE);
}

static void *poster(void *arg)
{
    posts_t *p = arg;

    if (p->delay_ms > 0)
        th_sleep_ms((unsigned)p->delay_ms);
    for (int i = 0; i < NPOSTS; i++) {
        void **a = th_alloc(2 * sizeof(void *));
        a[0] = p;
        a[1] = (void *)(intptr_t)i;
        CHECK_OK(rdmx_worker_post(p->w, on_post, a));
    }
    return NULL;
}

static void test_posts(rdmx_context_t *ctx)
{
    posts_t p = {0};
    pthread_t th;
    double t0;

    p.w = th_worker(ctx, 0);
    p.worker_thread = pthread_self();
    p.delay_ms = 200;
    CHECK(pthread_create(&th, NULL, poster, &p) == 0);
    /* Asleep with no limit: only the posts can wake this wait. */
    t0 = th_now_ms();
    CHECK_OK(rdmx_worker_wait(p.w, RDMX_TIMEOUT_INFINITE));
    CHECKF(th_now_ms() - t0 >= 150, "woke after %.0f ms, before the post",
           th_now_ms() - t0);
    while (__atomic_load_n(&p.ran, __ATOMIC_ACQUIRE) < NPOSTS)
        rdmx_worker_wait(p.w, 1000);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(p.ran == NPOSTS);
    CHECKF(p.out_of_order == 0, "%d posts out of order", p.out_of_order);
    CHECKF(p.wrong_thread == 0, "%d posts on another thread", p.wrong_thread);
    CHECK_ST(rdmx_worker_post(p.w, NULL, NULL), RDMX_ERR_INVALID);
    rdmx_worker_destroy(p.w);
    th_log("B: %d posts from another thread ran in order on the worker's "
           "thread; the first woke a sleeping worker after %.0f ms",
           NPOSTS, 200.0);
}

/* --- C: destroy cancels -------------------------------------------------- */

typedef struct {
    int ok, canceled;
} counts_t;

static void count_cb(rdmx_status_t status, void *arg)
{
    counts_t *c = arg;
    if (status == RDMX_OK)
        c->ok++;
    else if (status == RDMX_ERR_CANCELED)
        c->canceled++;
}

static void test_destroy(rdmx_context_t *ctx)
{
    rdmx_worker_t *w = th_worker(ctx, 0);
    counts_t c = {0};

    CHECK_OK(rdmx_worker_timer_start(w, 10000, count_cb, &c, NULL));
    CHECK_OK(rdmx_worker_timer_start(w, 20000, count_cb, &c, NULL));
    CHECK_OK(rdmx_worker_post(w, count_cb, &c));
    rdmx_worker_destroy(w);
    CHECKF(c.ok == 0 && c.canceled == 3, "ok %d canceled %d", c.ok,
           c.canceled);
    th_log("C: destroy ran 2 timers and 1 post with RDMX_ERR_CANCELED");
}

/* --- D: progress thread ---------------------------------------------------- */

typedef struct {
    volatile int done;
    pthread_t thread;
} ptt_t;

static void on_pt_timer(rdmx_status_t status, void *arg)
{
    ptt_t *t = arg;
    t->thread = pthread_self();
    __atomic_store_n(&t->done, status == RDMX_OK ? 1 : -1, __ATOMIC_RELEASE);
}

static void test_progress_thread(rdmx_context_t *ctx)
{
    rdmx_worker_t *w = th_worker(ctx, RDMX_WORKER_FLAG_PROGRESS_THREAD);
    ptt_t t = {0};
    double t0 = th_now_ms();

    CHECK_OK(rdmx_worker_timer_start(w, 50, on_pt_timer, &t, NULL));
    while (__atomic_load_n(&t.done, __ATOMIC_ACQUIRE) == 0 &&
           th_now_ms() - t0 < 5000 * TH_SLOW)
        th_sleep_ms(1);
    CHECK(t.done == 1);
    CHECK(!pthread_equal(t.thread, pthread_self()));
    CHECK(th_now_ms() - t0 >= 49.5);
    rdmx_worker_destroy(w);
    th_log("D: the progress thread fired a timer started from another "
           "thread after %.0f ms",
           th_now_ms() - t0);
}

/* --- E: transports and limits against a server process ------------------ */

static void test_server(rdmx_context_t *ctx, th_proc_t *srv,
                        th_proc_t *victim)
{
    rdmx_worker_t *w = th_worker(ctx, 0);
    const char *tr = th_transport_env();
    rdmx_transport_t want = !strcmp(tr, "shm")   ? RDMX_TRANSPORT_SHM
                            : !strcmp(tr, "tcp") ? RDMX_TRANSPORT_TCP
                                                 : RDMX_TRANSPORT_AUTO;
    rdmx_op_params_t lim = {.field_mask = RDMX_OP_PARAM_FIELD_TIMEOUT,
                            .timeout_ms = 300 * TH_SLOW};
    rdmx_ep_t *ep = th_connect(w, srv, NULL);
    char buf[64];
    size_t len = 0;
    double t0, took;
    rdmx_status_t st;

    if (want != RDMX_TRANSPORT_AUTO) {
        CHECK(rdmx_context_transport(ctx) == want);
        CHECKF(rdmx_ep_transport(ep) == want, "endpoint transport %s, want %s",
               rdmx_transport_name(rdmx_ep_transport(ep)), tr);
    }

    /* A receive with nothing to receive: withdrawn, the connection stays. */
    t0 = th_now_ms();
    CHECK_ST(rdmx_recv(ep, buf, sizeof(buf), &lim, &len), RDMX_ERR_TIMEOUT);
    took = th_now_ms() - t0;
    CHECKF(took >= 290 * TH_SLOW && took < 3000 * TH_SLOW,
           "recv limit 300 ms took %.0f ms", took);
    CHECK_OK(rdmx_ep_status(ep));
    {
        ts_region_t r;
        ts_alloc(ep, &r, 4096, RDMX_ACCESS_ALL, 0, 7);
        ts_free(ep, &r);
    }

    /* Contradicting params are refused before anything starts. */
    {
        rdmx_op_params_t cb = {.field_mask = RDMX_OP_PARAM_FIELD_CB,
                               .cb = th_req_cb};
        CHECK_ST(rdmx_send(ep, buf, 8, &cb), RDMX_ERR_INVALID);
        CHECK_ST(rdmx_send_nb(ep, buf, 8, &lim), RDMX_ERR_INVALID);
        CHECK_ST(rdmx_send_nb(ep, buf, 8, NULL), RDMX_ERR_INVALID);
        CHECK(strstr(rdmx_error_detail(), "params->cb is required") != NULL);
    }

    ts_quit(ep);

    /* A send a stopped server cannot take: 64 MiB, more than any socket
     * or shared-memory FIFO holds. (That server is killed afterwards: its
     * receive fails when it wakes.) */
    ep = th_connect(w, victim, NULL);
    {
        size_t big = 64 * TH_MIB;
        char *data = th_alloc(big);
        memset(data, 0x5a, big);
        th_kill(victim, SIGSTOP);
        t0 = th_now_ms();
        st = rdmx_send(ep, data, big, &lim);
        took = th_now_ms() - t0;
        th_kill(victim, SIGKILL);
        CHECK_ST(st, RDMX_ERR_TIMEOUT);
        CHECK(strstr(rdmx_error_detail(), "not complete within") != NULL);
        CHECKF(took >= 290 * TH_SLOW && took < 5000 * TH_SLOW,
               "send limit 300 ms took %.0f ms", took);
        CHECK_ST(rdmx_ep_status(ep), RDMX_ERR_TIMEOUT);
        free(data);
        th_log("E: blocking send past its limit: RDMX_ERR_TIMEOUT after %.0f "
               "ms, connection failed",
               took);
    }
    rdmx_ep_close(ep);
    rdmx_worker_destroy(w);
}

/* --- F: a busy-polled worker -------------------------------------------- */

static void test_busy_poll(rdmx_context_t *ctx, th_proc_t *srv)
{
    rdmx_worker_t *w = th_worker(ctx, RDMX_WORKER_FLAG_BUSY_POLL);
    rdmx_op_params_t lim = {.field_mask = RDMX_OP_PARAM_FIELD_TIMEOUT,
                            .timeout_ms = 300 * TH_SLOW};
    rdmx_ep_t *ep = th_connect(w, srv, NULL);
    ts_region_t r;
    char buf[64];
    size_t len = 0;
    double t0, took, recv_took;

    for (int i = 0; i < 20; i++) { /* requests and replies, RMA, descriptors */
        ts_alloc(ep, &r, 64 * 1024, RDMX_ACCESS_ALL, 0, 11 + (uint64_t)i);
        ts_fill(ep, &r, 0, 64 * 1024, 21 + (uint64_t)i);
        TS_VERIFY_REMOTE(ep, &r, 0, 64 * 1024, 21 + (uint64_t)i);
        ts_free(ep, &r);
    }
    t0 = th_now_ms();
    CHECK_ST(rdmx_recv(ep, buf, sizeof(buf), &lim, &len), RDMX_ERR_TIMEOUT);
    recv_took = took = th_now_ms() - t0;
    CHECKF(took >= 290 * TH_SLOW && took < 3000 * TH_SLOW,
           "busy worker: recv limit 300 ms took %.0f ms", took);
    CHECK_OK(rdmx_ep_status(ep));
    t0 = th_now_ms();
    CHECK_ST(rdmx_worker_wait(w, 50), RDMX_ERR_TIMEOUT);
    took = th_now_ms() - t0;
    CHECKF(took >= 49 && took < 1000 * TH_SLOW,
           "busy worker: wait of 50 ms took %.0f ms", took);
    ts_quit(ep);
    rdmx_worker_destroy(w);
    th_log("F: busy-polled worker: 20 rounds of region, fill, verify; "
           "recv limit after %.0f ms, a 50 ms wait after %.0f ms",
           recv_took, took);
}

int main(int argc, char **argv)
{
    th_proc_t srv, victim, busy_srv;
    rdmx_context_t *ctx;

    if (argc > 1 && strcmp(argv[1], "--server") == 0)
        return ts_server_main(argc, argv);
    th_init("worker_tasks", 120);
    th_spawn_self(&srv, "--server", 30000, NULL);
    th_spawn_self(&busy_srv, "--server", 30000, NULL);
    th_spawn_self(&victim, "--server", 30000, NULL);
    ctx = th_context();
    test_timers(ctx);
    test_posts(ctx);
    test_destroy(ctx);
    test_progress_thread(ctx);
    test_busy_poll(ctx, &busy_srv);
    th_check_exit_ok("server (F)", th_wait_exit(&busy_srv, 10000));
    test_server(ctx, &srv, &victim);
    th_check_exit_ok("server", th_wait_exit(&srv, 10000));
    th_wait_exit(&victim, 10000);
    rdmx_context_destroy(ctx);
    th_log("ok");
    return 0;
}
