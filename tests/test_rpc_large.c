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

static void echo(size_t len, uint64_t seed)
{
    size_t got = 0;

    th_fill(req, len, seed);
    CHECK_OK(rdmx_call(ch, "echo", req, len, resp, 64 * MiB, NULL, &got));
    CHECKF(got == len, "echo of %zu bytes answered %zu", len, got);
    CHECK_PATTERN(resp, len, seed, 0);
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
