/*
 * rdmx-perf: the client half of the RPC tests (main.c describes them): T
 * threads, each with its own worker and a channel to the test's RPC
 * server, issuing calls blocking (rpc_lat, lambda_lat) or with W in flight
 * (rpc_rate, rpc_bulk*). The threads share only their rpc_run_t; the main
 * thread waits for them, then merges their samples (report.c).
 */
#include "perf.h"

#include <inttypes.h>
#include <stdlib.h>

/* Report what failed in client thread @p t (unless another thread did
 * first) and make every thread stop. */
void perf_rpc_thread_fail(rpc_thread_t *t, const char *what, rdmx_status_t st,
                          const char *detail)
{
    if (!t->run->abort) {
        fprintf(stderr, "rdmx-perf: %s thread %u: %s: %s (%s)%s%s\n",
                g_tests[t->run->test].name, t->index, what, rdmx_strerror(st),
                rdmx_status_name(st), detail && detail[0] ? ": " : "",
                detail ? detail : "");
    }
    t->run->abort = 1;
}

/* A non-blocking call completed: note an error, check a bulk call's token
 * (one call in flight), count it, and every sample_every calls take a
 * sample. Runs on the thread's own worker. */
static void rpc_cb(const rdmx_call_result_t *r, void *arg)
{
    rpc_thread_t *t = arg;

    if (r->status != RDMX_OK) {
        if (t->err == RDMX_OK) {
            t->err = r->status;
            snprintf(t->errmsg, sizeof(t->errmsg), "%s", r->message);
        }
    } else if (t->validate) {
        const unsigned char *b = rdmx_mr_addr(t->mr);
        uint64_t first, last;

        if (t->run->test == TEST_RPC_BULK) { /* the server's view */
            if (r->length != 16) {
                t->bad++;
            } else {
                memcpy(&first, r->data, 8);
                memcpy(&last, (const unsigned char *)r->data + 8, 8);
                t->bad += first != t->token || last != t->token;
            }
        } else { /* what the server wrote into our memory */
            memcpy(&first, b, 8);
            memcpy(&last, b + t->run->size - 8, 8);
            t->bad += first != t->token || last != t->token;
        }
    }
    t->done++;
    if (t->measuring && ++t->sample_count == t->sample_every) {
        uint64_t now = now_ns();

        t->sample_count = 0;
        if (t->nsamples < t->cap) {
            t->samples[t->nsamples++] = now - t->t_last;
        }
        t->t_last = now;
    }
}

/* Start one non-blocking call of the thread's test; RDMX_INPROGRESS, or
 * RDMX_ERR_NO_RESOURCE when over the channel's credits. */
static rdmx_status_t rpc_issue(rpc_thread_t *t, bool more)
{
    rpc_run_t *run = t->run;
    rdmx_call_params_t p;

    switch (run->test) {
    case TEST_RPC_RATE:
        if (more) { /* a call of a burst, not its last (--batch) */
            p = t->params;
            p.field_mask |= RDMX_CALL_PARAM_FIELD_FLAGS;
            p.flags |= RDMX_RPC_MORE;
            return rdmx_call_nb(t->ch, RPC_ECHO, t->req, run->size, &p, NULL);
        }
        return rdmx_call_nb(t->ch, RPC_ECHO, t->req, run->size, &t->params,
                            NULL);
    case TEST_RPC_BULK:
        if (t->validate) {
            unsigned char *b = rdmx_mr_addr(t->mr);

            t->token++;
            memcpy(b, &t->token, 8);
            memcpy(b + run->size - 8, &t->token, 8);
        }
        return rdmx_call_nb(t->ch, RPC_PULL, NULL, 0, &t->params, NULL);
    default: /* TEST_RPC_BULK_PUSH */
        t->token++;
        return rdmx_call_nb(t->ch, RPC_PUSH, &t->token, sizeof(t->token),
                            &t->params, NULL);
    }
}

/* @p count calls with up to W in flight (rpc_rate, rpc_bulk*). */
static int rpc_phase_window(rpc_thread_t *t, uint64_t count, bool measure)
{
    rpc_run_t *run = t->run;
    const uint64_t base = t->done, window = run->window;
    uint64_t posted = 0;

    t->measuring = measure;
    t->sample_count = 0;
    if (measure) {
        t->t_last = t->t_start = now_ns();
    }
    while (t->done - base < count) {
        while (posted < count && posted - (t->done - base) < window) {
            bool more = run->o->batch && posted + 1 < count &&
                        posted + 1 - (t->done - base) < window;
            rdmx_status_t st = rpc_issue(t, more);

            if (st == RDMX_INPROGRESS) {
                posted++;
                continue;
            }
            if (st == RDMX_ERR_NO_RESOURCE) {
                break; /* over the credits: progress, then retry */
            }
            perf_rpc_thread_fail(t, "call", st, rdmx_error_detail());
            return -1;
        }
        rdmx_worker_progress(t->w);
        if (__builtin_expect(t->err != RDMX_OK, 0)) {
            perf_rpc_thread_fail(t, "call failed", t->err, t->errmsg);
            return -1;
        }
        if (__builtin_expect(run->abort, 0)) {
            return -1;
        }
    }
    if (measure) {
        t->t_end = now_ns();
        t->measuring = false;
    }
    return 0;
}

/* @p count blocking round trips (rpc_lat). */
static int rpc_phase_lat(rpc_thread_t *t, uint64_t count, bool measure)
{
    rpc_run_t *run = t->run;
    uint64_t t_last = 0;

    if (measure) {
        t_last = t->t_start = now_ns();
    }
    for (uint64_t i = 0; i < count; i++) {
        size_t got = 0;
        rdmx_status_t st = rdmx_call(t->ch, RPC_ECHO, t->req, run->size,
                                     t->resp, run->size, NULL, &got);

        if (st != RDMX_OK) {
            perf_rpc_thread_fail(t, "call", st, rdmx_error_detail());
            return -1;
        }
        if (got != run->size || (i == 0 && memcmp(t->resp, t->req, got) != 0)) {
            perf_rpc_thread_fail(t, "echo", RDMX_ERR_PROTO,
                                 "the answer differs from the request");
            return -1;
        }
        if (measure) {
            uint64_t now = now_ns();

            t->samples[t->nsamples++] = now - t_last;
            t_last = now;
        }
        if (__builtin_expect(run->abort, 0)) {
            return -1;
        }
    }
    if (measure) {
        t->t_end = t_last;
    }
    t->done += count;
    return 0;
}

/* One phase (warm-up or measured) of @p count calls per thread. */
static int rpc_phase(rpc_thread_t *t, uint64_t count, bool measure)
{
    switch (t->run->test) {
    case TEST_RPC_LAT:
        return rpc_phase_lat(t, count, measure);
    case TEST_LAMBDA_LAT:
        return perf_lambda_phase(t, count, measure);
    default:
        return rpc_phase_window(t, count, measure);
    }
}

/* A client thread's worker, channel (connected), buffers and sample
 * array; thread 0 also asks the server what it runs (perf.info). */
static int rpc_thread_setup(rpc_thread_t *t)
{
    rpc_run_t *run = t->run;
    const size_t size = run->size;
    rdmx_channel_params_t cp = {
        .field_mask = RDMX_CHANNEL_PARAM_FIELD_TIMEOUT |
                      RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT,
        /* a call may take as long as a test may */
        .timeout_ms = run->o->timeout_s ? (int)run->o->timeout_s * 1000
                                        : RDMX_TIMEOUT_INFINITE,
        .connect_timeout_ms = CONNECT_TIMEOUT,
    };
    rdmx_status_t st;

    if (run->test == TEST_RPC_BULK || run->test == TEST_RPC_BULK_PUSH) {
        /* A server worker moving a large bulk buffer inside a handler
         * answers nothing else meanwhile, heartbeats included: with the
         * default 1 s timeout a slow transfer makes the channel declare the
         * server dead. Keep the default ping interval, allow 30 s. */
        cp.field_mask |= RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                         RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT;
        cp.heartbeat_ms = 250;
        cp.heartbeat_timeout_ms = 30000;
    }
    if (run->o->no_rings) {
        cp.field_mask |= RDMX_CHANNEL_PARAM_FIELD_RINGS;
        cp.rings = 0;
    }

    /* every non-blocking call of this thread completes in rpc_cb */
    t->params.field_mask = RDMX_CALL_PARAM_FIELD_CB;
    t->params.cb = rpc_cb;
    t->params.arg = t;
    rdmx_worker_params_t wp = {.field_mask = RDMX_WORKER_PARAM_FIELD_FLAGS,
                               .flags = RDMX_WORKER_FLAG_BUSY_POLL};
    st = rdmx_worker_create(run->ctx, &wp, &t->w);
    if (st != RDMX_OK) {
        perf_rpc_thread_fail(t, "create worker", st, rdmx_error_detail());
        return -1;
    }
    st = rdmx_channel_create(t->w, run->address, &cp, &t->ch);
    if (st != RDMX_OK) {
        perf_rpc_thread_fail(t, "create channel", st, rdmx_error_detail());
        return -1;
    }
    st = rdmx_channel_wait_ready(t->ch, CONNECT_TIMEOUT);
    if (st != RDMX_OK) {
        perf_rpc_thread_fail(t, "connect", st, rdmx_error_detail());
        return -1;
    }
    if (t->index == 0) {
        size_t got = 0;

        st = rdmx_call(t->ch, RPC_INFO, NULL, 0, run->server_info,
                       sizeof(run->server_info) - 1, NULL, &got);
        if (st != RDMX_OK) {
            perf_rpc_thread_fail(t, "ask the server what it runs", st,
                                 rdmx_error_detail());
            return -1;
        }
        run->server_info[got] = '\0';
    }
    if (run->test == TEST_LAMBDA_LAT) {
        if (perf_lambda_setup(t) < 0) {
            return -1;
        }
    } else if (run->test == TEST_RPC_LAT || run->test == TEST_RPC_RATE) {
        t->req = malloc(size);
        t->resp = malloc(size);
        if (t->req == NULL || t->resp == NULL) {
            perf_rpc_thread_fail(t, "allocate buffers", RDMX_ERR_NO_MEMORY,
                                 NULL);
            return -1;
        }
        for (size_t i = 0; i < size; i++) {
            t->req[i] = (unsigned char)(i * 7 + t->index);
        }
    } else {
        st = rdmx_mem_alloc(run->ctx, size,
                            RDMX_ACCESS_READ | RDMX_ACCESS_WRITE, &t->mr);
        if (st != RDMX_OK) {
            perf_rpc_thread_fail(t, "allocate the bulk buffer", st,
                                 rdmx_error_detail());
            return -1;
        }
        t->bulk.mr = t->mr;
        t->bulk.offset = 0;
        t->bulk.length = size;
        t->bulk.access =
            run->test == TEST_RPC_BULK ? RDMX_ACCESS_READ : RDMX_ACCESS_WRITE;
        t->params.field_mask |= RDMX_CALL_PARAM_FIELD_BULK;
        t->params.bulk = &t->bulk;
        t->params.nbulk = 1;
        t->validate = run->threads == 1 && run->window == 1 && size >= 8;
    }
    t->sample_every = run->test == TEST_RPC_RATE ? run->window : 1;
    t->cap = run->iters / t->sample_every + 1;
    t->samples = calloc(t->cap, sizeof(*t->samples));
    if (t->samples == NULL) {
        perf_rpc_thread_fail(t, "allocate samples", RDMX_ERR_NO_MEMORY, NULL);
        return -1;
    }
    return 0;
}

/* Undo rpc_thread_setup() but for the samples (the report needs them). */
static void rpc_thread_teardown(rpc_thread_t *t)
{
    if (t->ch != NULL) {
        rdmx_channel_destroy(t->ch);
        t->ch = NULL;
    }
    if (t->w != NULL) {
        rdmx_worker_destroy(t->w);
        t->w = NULL;
    }
    if (t->mr != NULL) {
        rdmx_mem_deregister(t->mr);
        t->mr = NULL;
    }
    free(t->req);
    free(t->resp);
    t->req = t->resp = NULL;
    for (int k = 0; k < LK_COUNT; k++) {
        free(t->lreq[k]);
        t->lreq[k] = NULL;
    }
}

/* A client thread: set up, warm up, measure, in step with the others (the
 * barrier); its result in t->rc. */
static void *rpc_thread_main(void *arg)
{
    rpc_thread_t *t = arg;
    rpc_run_t *run = t->run;
    bool ok;

    ok = rpc_thread_setup(t) == 0;
    pthread_barrier_wait(&run->barrier); /* every channel is ready */
    ok = ok && !run->abort && rpc_phase(t, run->warmup, false) == 0;
    pthread_barrier_wait(&run->barrier); /* every warm-up is over */
    ok = ok && !run->abort && rpc_phase(t, run->iters, true) == 0;
    pthread_barrier_wait(&run->barrier); /* nobody measures any more */
    if (ok && t->bad != 0) {
        fprintf(stderr,
                "rdmx-perf: %s thread %u: %" PRIu64 " answers carried the "
                "wrong data\n",
                g_tests[run->test].name, t->index, t->bad);
        ok = false;
    }
    rpc_thread_teardown(t);
    t->rc = ok ? 0 : -1;
    __atomic_add_fetch(&run->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Parse perf.info's "transport=T workers=N poll=P". */
static void parse_info(const char *info, const char **transport,
                       unsigned *workers, int *poll)
{
    static char tr[32];
    char pl[32] = "";

    if (sscanf(info, "transport=%31s workers=%u poll=%31s", tr, workers, pl) ==
        3) {
        *transport = tr;
        *poll = strcmp(pl, "busy") == 0       ? RDMX_RPC_POLL_BUSY
                : strcmp(pl, "adaptive") == 0 ? RDMX_RPC_POLL_ADAPTIVE
                : strcmp(pl, "sleep") == 0    ? RDMX_RPC_POLL_SLEEP
                                              : -1;
    }
}

/*
 * The client half of an RPC test (rpc_*, lambda_lat) of @p size bytes:
 * with the control connection, ask the server to start an RPC server and
 * learn its port; start the client threads and wait for them (asleep, so
 * that the CPU is theirs); DONE; print the result. With --rpc-only the
 * channels go straight to o->address.
 */
int perf_client_rpc_test(perf_t *p, const opts_t *o, test_id_t test,
                         size_t size, const char **server_transport)
{
    rpc_run_t *run = calloc(1, sizeof(*run));
    result_t r = {.test = test, .size = size};
    ctrl_t req = {.op = OP_TEST, .test = test}, reply, ack;
    bool barrier = false, have_ctrl = !o->rpc_only;
    unsigned started = 0;
    int rc = -1;

    if (run == NULL) {
        return perf_fail_msg("out of memory");
    }
    r.iters = o->iters                ? o->iters
              : test == TEST_RPC_RATE ? 10 * perf_default_iters(size)
                                      : perf_default_iters(size);
    r.window = o->window_set ? o->window : g_tests[test].window;
    if (test == TEST_RPC_LAT || test == TEST_LAMBDA_LAT) {
        r.window = 1; /* blocking calls */
    }
    r.threads = o->threads;
    r.workers = o->server_workers;
    r.poll = o->poll;
    if ((test == TEST_RPC_BULK || test == TEST_RPC_BULK_PUSH) && size < 16) {
        free(run);
        return perf_fail_msg("rpc_bulk: -s must be at least 16 bytes");
    }
    run->o = o;
    run->ctx = p->ctx;
    run->test = test;
    run->size = size;
    run->iters = r.iters;
    run->window = r.window;
    run->threads = r.threads;
    run->warmup = o->warmup != UINT64_MAX              ? o->warmup
                  : r.iters / 10 < DEFAULT_WARMUP * 10 ? r.iters / 10
                                                       : DEFAULT_WARMUP * 10;
    perf_watchdog_arm(o->timeout_s);

    if (have_ctrl) {
        char host[256];
        uint16_t port;

        req.size = size;
        req.iters = r.iters;
        req.warmup = run->warmup;
        req.window = r.window;
        req.transport = (uint32_t)o->transport;
        req.workers = o->server_workers;
        req.poll = o->poll < 0 ? UINT32_MAX : (uint32_t)o->poll;
        req.threads = o->threads;
        if (perf_ctrl_request(p, &req, NULL, &reply) < 0) {
            goto out;
        }
        r.workers = reply.workers;
        r.poll = (int)reply.poll;
        perf_server_transport(o, reply.transport, server_transport);
        if (rdmx_addr_parse(o->address, host, sizeof(host), &port) != RDMX_OK) {
            perf_fail_msg("bad server address");
            goto out;
        }
        perf_format_address(run->address, sizeof(run->address), host,
                            reply.rpc_port);
    } else {
        snprintf(run->address, sizeof(run->address), "%s", o->address);
    }

    run->th = calloc(run->threads, sizeof(*run->th));
    if (run->th == NULL ||
        pthread_barrier_init(&run->barrier, NULL, run->threads) != 0) {
        perf_fail_msg("out of memory for threads");
        goto out;
    }
    barrier = true;
    for (unsigned i = 0; i < run->threads; i++) {
        run->th[i].run = run;
        run->th[i].index = i;
        if (pthread_create(&run->th[i].tid, NULL, rpc_thread_main,
                           &run->th[i]) != 0) {
            /* the barrier counts every thread: cannot go on without it */
            fprintf(stderr, "rdmx-perf: cannot start thread %u\n", i);
            exit(1);
        }
        run->th[i].started = true;
        started++;
    }
    /* Keep the control connection progressed, sleeping on its fd. */
    while (__atomic_load_n(&run->finished, __ATOMIC_ACQUIRE) < started) {
        if (have_ctrl) {
            rdmx_worker_wait(p->worker, 20);
        } else {
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
    }
    rc = 0;
    for (unsigned i = 0; i < started; i++) {
        pthread_join(run->th[i].tid, NULL);
        rc = run->th[i].rc < 0 ? -1 : rc;
    }
    if (have_ctrl) {
        if (perf_ctrl_done(p, test, &ack) < 0) {
            rc = -1;
            goto out;
        }
        r.server_responses = ack.stat;
        r.server_errors = ack.stat2;
    }
    if (rc < 0) {
        goto out;
    }
    if (!have_ctrl && *server_transport == NULL) {
        const char *tr = NULL;
        unsigned workers = 0;
        int poll = -1;

        parse_info(run->server_info, &tr, &workers, &poll);
        *server_transport = tr ? tr : "?";
        perf_print_header(o, *server_transport);
        r.workers = workers;
        r.poll = poll;
    } else if (!have_ctrl) {
        const char *tr = NULL;

        parse_info(run->server_info, &tr, &r.workers, &r.poll);
    }
    if (have_ctrl && r.server_errors != 0) {
        fprintf(stderr,
                "rdmx-perf: warning: the server sent %" PRIu64
                " error responses\n",
                r.server_errors);
    }
    if (test == TEST_LAMBDA_LAT) {
        perf_lambda_print(o, run, &r, *server_transport);
        goto out;
    }
    perf_rpc_compute(run, &r);
    perf_print_rpc_note(o, &r, *server_transport);
    perf_print_result(o, &r);
out:
    if (barrier) {
        pthread_barrier_destroy(&run->barrier);
    }
    for (unsigned i = 0; run->th != NULL && i < run->threads; i++) {
        free(run->th[i].samples);
        for (int k = 0; k < LK_COUNT; k++) {
            free(run->th[i].lsamples[k]);
        }
    }
    free(run->th);
    free(run);
    return rc;
}
