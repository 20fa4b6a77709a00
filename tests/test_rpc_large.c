/*
 * rpc_large: RPC calls whose request and answer are tens of MiB, inline
 * (no bulk descriptor), against the RPC test server's "echo".
 *
 * Proven:
 *  - 48 MiB, 40 MiB, 48 MiB + 1 and 300 KiB echoes, each a different
 *    pattern, come back byte for byte with their exact length: a buffer
 *    reused from an earlier, larger message never lends its stale bytes
 *    or its size to a later one.
 *  - Large messages do not fault in fresh memory for each call, on either
 *    side: after a warm-up, six more 48 MiB round trips cost the client and
 *    the server fewer than 1,000 page faults each per call (a fresh 48 MiB
 *    buffer is 12,288 faults; transparent huge pages are turned off for
 *    both processes here, so none hides behind a 2 MiB page).
 *  - Large answers land in rdmx_call's response buffer itself: every
 *    48 MiB echo counts in the channel's responses_in_place. An answer
 *    larger than the buffer does not (RDMX_ERR_TOO_BIG, its length
 *    reported), and writes nothing into the buffer or past it.
 *  - A call that times out while its answer is landing in the buffer
 *    returns only once the transport writes there no more: after each
 *    return (OK or TIMEOUT, timeouts spread over the answer's transfer
 *    time) the buffer is filled with a marker, the worker progressed for
 *    longer than a transfer takes, and the marker is still whole.
 *  - Large requests are sent from rdmx_call's request buffer itself: each
 *    48 MiB echo counts in the channel's requests_in_place, a 64-byte
 *    call does not.
 *  - A call whose request the server does not take (its only worker busy
 *    in a handler for 3 s) returns RDMX_ERR_TIMEOUT only once the send
 *    ended: the connection is closed 200 ms after the 100 ms deadline
 *    (lent_teardowns counts it; the call returns between 300 ms and 2 s),
 *    the busy call fails with the connection, and the channel reconnects
 *    and echoes again. Both for a request sent alone and for one gathered
 *    after a bulk descriptor (each counts in requests_in_place).
 */
#define _GNU_SOURCE
#include "harness.h"
#include "rpc_server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#define MiB ((size_t)1 << 20)

static rdmx_channel_t *ch;
static unsigned char *req, *resp;

/* Minor page faults of process @pid so far (field 10 of its stat). */
static unsigned long long minflt_of(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long v = 0;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    CHECKF(f != NULL, "open %s", path);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* the name may hold spaces */
    CHECK(p != NULL);
    /* after ") ": state ppid pgrp session tty tpgid flags minflt */
    CHECK(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %llu", &v) == 1);
    return v;
}

static uint64_t in_place(void)
{
    rdmx_channel_stats_t st;

    rdmx_channel_stats(ch, &st);
    return st.responses_in_place;
}

static rdmx_channel_stats_t stats(void)
{
    rdmx_channel_stats_t st;

    rdmx_channel_stats(ch, &st);
    return st;
}

static void note_end(const rdmx_call_result_t *r, void *arg)
{
    *(rdmx_status_t *)arg = r->status;
}

/* Offset of the first byte of @p[0..@n) that is not @b, or -1. */
static long not_byte(const unsigned char *p, size_t n, unsigned char b)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != b)
            return (long)i;
    return -1;
}

static void echo(size_t len, uint64_t seed)
{
    size_t got = 0;

    th_fill(req, len, seed);
    CHECK_OK(rdmx_call(ch, "echo", req, len, resp, 64 * MiB, NULL, &got));
    CHECKF(got == len, "echo of %zu bytes answered %zu", len, got);
    CHECK_PATTERN(resp, len, seed, 0);
}

/* A 48 MiB call with a 100 ms deadline while the server's only worker
 * spins for 3 s: RDMX_ERR_TIMEOUT once the fence closed the connection.
 * @gather: with a bulk descriptor before the request (a gathered send). */
static void untaken(rdmx_context_t *ctx, rdmx_worker_t *wk, int gather)
{
    rdmx_channel_stats_t t0s = stats(), t1s;
    rdmx_call_params_t sp = {0}, cp = {0};
    rdmx_status_t busy = RDMX_INPROGRESS, st;
    const char *what = gather ? "gathered" : "alone";
    static unsigned char lent[4096];
    rdmx_rpc_bulk_t b = {0};
    rdmx_mr_t *mr = NULL;
    uint32_t ms = 3000;
    double t0, took;
    size_t got = 0;

    sp.field_mask = RDMX_CALL_PARAM_FIELD_CB;
    sp.cb = note_end;
    sp.arg = &busy;
    CHECK_ST(rdmx_call_nb(ch, "spin", &ms, sizeof(ms), &sp, NULL),
             RDMX_INPROGRESS);
    th_progress_for(wk, 100); /* the server's worker is in it */
    cp.field_mask = RDMX_CALL_PARAM_FIELD_TIMEOUT;
    cp.timeout_ms = 100;
    if (gather) {
        CHECK_OK(
            rdmx_mem_register(ctx, lent, sizeof(lent), RDMX_ACCESS_ALL, &mr));
        b.mr = mr;
        b.length = sizeof(lent);
        b.access = RDMX_ACCESS_READ;
        cp.field_mask |= RDMX_CALL_PARAM_FIELD_BULK;
        cp.bulk = &b;
        cp.nbulk = 1;
    }
    th_fill(req, 48 * MiB, 50);
    t0 = th_now_ms();
    st = rdmx_call(ch, "echo", req, 48 * MiB, resp, 64 * MiB, &cp, &got);
    took = th_now_ms() - t0;
    CHECKF(st == RDMX_ERR_TIMEOUT, "untaken request (%s): %s: %s", what,
           rdmx_strerror(st), rdmx_error_detail());
    th_log("untaken 48 MiB request (%s): the call returned after %.0f ms", what,
           took);
    CHECKF(took >= 290 && took < 2000,
           "untaken request (%s): returned after %.0f ms (deadline 100 ms, "
           "fence 200 ms more, server busy 3 s)",
           what, took);
    t1s = stats();
    CHECKF(t1s.lent_teardowns - t0s.lent_teardowns == 1,
           "untaken request (%s): %llu teardowns", what,
           (unsigned long long)(t1s.lent_teardowns - t0s.lent_teardowns));
    CHECKF(t1s.requests_in_place - t0s.requests_in_place == 1,
           "untaken request (%s): %llu sent in place", what,
           (unsigned long long)(t1s.requests_in_place - t0s.requests_in_place));
    while (busy == RDMX_INPROGRESS)
        rdmx_worker_progress(wk);
    CHECKF(busy != RDMX_OK, "the busy call survived the teardown");
    CHECK_OK(rdmx_channel_wait_ready(ch, 10000 * TH_SLOW));
    echo(48 * MiB, 51);
    if (mr != NULL)
        rdmx_mem_deregister(mr);
}

int main(int argc, char **argv)
{
    th_proc_t srv;
    rdmx_context_t *ctx;
    rdmx_worker_t *wk;
    unsigned long long c0, s0, c1, s1;
    const unsigned calls = 6;

    if (argc > 1 && strcmp(argv[1], "rpc-server") == 0)
        return trs_main(argc - 2, argv + 2);

    th_init("rpc_large", 170);
    /* Inherited by the server: every fault is a 4 KiB page. */
    CHECK(prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0);
    th_spawn_self(&srv, "rpc-server", 30000, "--workers", "1", "--max-message",
                  "134217728", NULL);
    ctx = th_context();
    wk = th_worker(ctx, 0);
    CHECK_OK(rdmx_channel_create(wk, srv.addr, NULL, &ch));
    CHECK_OK(rdmx_channel_wait_ready(ch, 10000 * TH_SLOW));
    req = th_alloc(64 * MiB);
    resp = th_alloc(64 * MiB);
    memset(req, 0, 64 * MiB); /* fault the caller's own buffers in now */
    memset(resp, 0, 64 * MiB);

    /* Sizes up and down: exact lengths, exact bytes. */
    echo(48 * MiB, 1);
    echo(40 * MiB, 2);
    echo(48 * MiB + 1, 3);
    echo(300 * 1024, 4);
    echo(48 * MiB, 5);

    /* Large answers land in the caller's buffer; a too-small one is
     * refused without a byte written. */
    {
        uint64_t p0 = in_place();
        size_t got = 0;
        long bad;

        echo(48 * MiB, 6);
        echo(40 * MiB, 7);
        CHECKF(in_place() - p0 == 2,
               "2 answers of 40-48 MiB: %llu received in place",
               (unsigned long long)(in_place() - p0));
        p0 = in_place();
        th_fill(req, 8 * MiB, 8);
        memset(resp, 0x5a, 8 * MiB);
        CHECK_ST(rdmx_call(ch, "echo", req, 8 * MiB, resp, 4 * MiB, NULL, &got),
                 RDMX_ERR_TOO_BIG);
        CHECKF(got == 8 * MiB, "too small: length %zu reported", got);
        CHECKF(in_place() == p0, "an answer over the buffer landed in place");
        bad = not_byte(resp, 8 * MiB, 0x5a);
        CHECKF(bad < 0, "too small: byte %ld of the buffer written", bad);
    }

    /* Large requests go from the caller's buffer; small ones are copied. */
    {
        rdmx_channel_stats_t t0s = stats(), t1s;
        size_t got = 0;

        echo(48 * MiB, 40);
        echo(48 * MiB, 41);
        CHECK_OK(rdmx_call(ch, "echo", req, 64, resp, 64, NULL, &got));
        t1s = stats();
        CHECKF(t1s.requests_in_place - t0s.requests_in_place == 2,
               "2 requests of 48 MiB and one of 64 B: %llu sent in place",
               (unsigned long long)(t1s.requests_in_place -
                                    t0s.requests_in_place));
    }

    /* A request the server does not take: the call ends at its deadline
     * plus the fence, not before the send ended; sent alone and gathered
     * after a bulk descriptor. */
    untaken(ctx, wk, 0);
    untaken(ctx, wk, 1);

    /* Timeouts while the answer lands: nothing written after the return. */
    {
        double t0 = th_now_ms(), t_echo;
        unsigned timeouts = 0, ok = 0;

        echo(48 * MiB, 9);
        t_echo = th_now_ms() - t0;
        for (unsigned i = 0; i < 16; i++) {
            rdmx_call_params_t cp = {0};
            size_t got = 0;
            rdmx_status_t st;
            double until;
            long bad;

            cp.field_mask = RDMX_CALL_PARAM_FIELD_TIMEOUT;
            /* from a fifth of a transfer to all of it */
            cp.timeout_ms = (int)(t_echo * (0.2 + 0.05 * i)) + 1;
            th_fill(req, 48 * MiB, 20 + i);
            st =
                rdmx_call(ch, "echo", req, 48 * MiB, resp, 64 * MiB, &cp, &got);
            CHECKF(st == RDMX_OK || st == RDMX_ERR_TIMEOUT, "timeout %d ms: %s",
                   cp.timeout_ms, rdmx_strerror(st));
            if (st == RDMX_OK) {
                ok++;
                CHECK_PATTERN(resp, 48 * MiB, 20 + i, 0);
            } else {
                timeouts++;
            }
            memset(resp, 0xa5, 48 * MiB);
            until = th_now_ms() + 2 * t_echo + 20;
            while (th_now_ms() < until)
                rdmx_worker_progress(wk);
            bad = not_byte(resp, 48 * MiB, 0xa5);
            CHECKF(bad < 0,
                   "timeout %d ms (%s): byte %ld written after the call "
                   "returned",
                   cp.timeout_ms, rdmx_strerror(st), bad);
        }
        th_log("48 MiB echo %.1f ms; 16 calls with shorter timeouts: %u "
               "answered, %u timed out",
               t_echo, ok, timeouts);
    }

    /* Warm: no fresh pages per call. */
    c0 = minflt_of(getpid());
    s0 = minflt_of(srv.pid);
    for (unsigned i = 0; i < calls; i++)
        echo(48 * MiB, 10 + i);
    c1 = minflt_of(getpid());
    s1 = minflt_of(srv.pid);
    th_log("page faults per 48 MiB round trip: client %.0f, server %.0f",
           (double)(c1 - c0) / calls, (double)(s1 - s0) / calls);
    CHECKF((c1 - c0) / calls < 1000, "client: %llu faults per call",
           (c1 - c0) / calls);
    CHECKF((s1 - s0) / calls < 1000, "server: %llu faults per call",
           (s1 - s0) / calls);

    rdmx_channel_destroy(ch);
    rdmx_worker_destroy(wk);
    rdmx_context_destroy(ctx);
    free(req);
    free(resp);
    th_kill(&srv, SIGTERM);
    th_check_exit_ok("rpc server", th_wait_exit(&srv, 20000));
    th_log("ok");
    return 0;
}
