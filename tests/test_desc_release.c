/*
 * desc_release: every buffer UCX lends rdmx on arrival goes back to UCX.
 * A message's data may stay in UCX's buffer past its handler (eager data
 * kept, a rendezvous descriptor waiting for its receive); the one who keeps
 * it gives it back exactly once (src/core/ucx/ucx.c, am_cb). One that never
 * comes back stays out of UCX's pools until the process ends, when UCX
 * prints "object ... was not returned to mpool ..." for each (docs/CORE.md,
 * "Kept data and descriptors").
 *
 * Three processes, each with its output in a file the test reads after it
 * exited (UCX logs to stdout):
 *  - an RPC server ("hold-server", 1 worker) with handlers "push" (put the
 *    pattern of a seed into the caller's lent buffer, flush, answer: as
 *    rdmx-perf's rpc_bulk_push does), "hold" (answer nothing yet) and
 *    "answer_held" (answer every held request with the checksum of its
 *    data as it is now, then itself with their count);
 *  - the generic command server (test_server.c);
 *  - a client, forked, that drives both:
 *      - 16 pushes each of 4 KiB, 64 KiB and 1 MiB into a lent (fenced)
 *        buffer, each verified byte for byte (over shared memory the large
 *        ones are read by the client's worker from the server's memory, the
 *        request's data being the server's descriptor);
 *      - 16 "hold" calls of 200 B, 5,000 B, 40,000 B and 300,000 B in
 *        flight at once, then "answer_held": every held request's data is
 *        intact when it is answered (checksum), so the server kept UCX's
 *        buffer while its handler deferred;
 *      - messages of 1,000 B, 300,000 B and 3 MiB that the command server
 *        sends before any receive is posted (the worker counts each as
 *        unexpected: a large one waits as UCX's descriptor), then
 *        rdmx_recv: each verified; then one 3 MiB message never received,
 *        the connection closed over it (the descriptor goes back then; the
 *        command server, blocked in that send, sees the close and exits 3,
 *        "went away without TS_QUIT").
 * Proven: the client and the RPC server exit 0, the command server 3;
 * none of the three logs says "was not returned to mpool" (counted and
 * printed per process) or "can't hold data" (UCX's word for a handler that
 * claimed data it could not keep).
 */
#define _GNU_SOURCE
#include "conn_util.h"
#include "harness.h"
#include "rpc_server.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEAK_TEXT "was not returned to mpool"
#define HOLD_TEXT "can't hold data"
#define NPUSH     16
#define HOLD_EACH 4
#define HELD_MAX  64
#define LEFT_LEN  (3 * TH_MIB)
#define LOG_MAX   (1u << 20)

/* ------------------------------------------------------------------------ */
/* The RPC server                                                           */
/* ------------------------------------------------------------------------ */

static volatile sig_atomic_t hs_stop;
static rdmx_context_t *hs_ctx;
/* Requests "hold" kept; only the server's one worker touches these. */
static rdmx_rpc_req_t *hs_held[HELD_MAX];
static unsigned hs_nheld;

static void hs_on_term(int sig)
{
    (void)sig;
    hs_stop = 1;
}

typedef struct {
    rdmx_rpc_req_t *req;
    rdmx_ep_t *ep;
    rdmx_mr_t *mr;
    void *buf;
} push_t;

static void push_flushed(rdmx_status_t st, size_t length, void *arg)
{
    push_t *p = arg;

    (void)length;
    if (st == RDMX_OK)
        rdmx_rpc_respond(p->req, NULL, 0);
    else
        rdmx_rpc_respond_error(p->req, st, "push: %s", rdmx_strerror(st));
    rdmx_mem_deregister(p->mr);
    free(p->buf);
    free(p);
}

static void push_put(rdmx_status_t st, size_t length, void *arg)
{
    push_t *p = arg;
    rdmx_op_params_t op = {
        .field_mask = RDMX_OP_PARAM_FIELD_CB, .cb = push_flushed, .arg = p};

    (void)length;
    if (st == RDMX_OK)
        st = rdmx_ep_flush_nb(p->ep, &op);
    if (st != RDMX_INPROGRESS)
        push_flushed(st, 0, p);
}

/* push: payload u64 seed; puts the pattern of the seed into descriptor 0,
 * flushes, answers. */
static void h_push(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_op_params_t op = {.field_mask =
                               RDMX_OP_PARAM_FIELD_CB | RDMX_OP_PARAM_FIELD_MR,
                           .cb = push_put};
    uint64_t seed = 0;
    rdmx_rmem_t *rmem;
    rdmx_status_t st;
    size_t plen, len;
    const void *pl = rdmx_rpc_req_data(req, &plen);
    push_t *p;

    (void)arg;
    if ((st = rdmx_rpc_req_bulk(req, 0, &rmem)) != RDMX_OK) {
        rdmx_rpc_respond_error(req, st, "%s", rdmx_error_detail());
        return;
    }
    if (plen >= 8)
        memcpy(&seed, pl, 8);
    len = (size_t)rdmx_rmem_length(rmem);
    p = th_alloc(sizeof(*p));
    p->req = req;
    p->ep = rdmx_rpc_req_ep(req);
    p->buf = th_alloc(len);
    th_fill(p->buf, len, seed);
    CHECK_OK(rdmx_mem_register(hs_ctx, p->buf, len ? len : 1, RDMX_ACCESS_ALL,
                               &p->mr));
    op.mr = p->mr;
    op.arg = p;
    st = rdmx_put_nb(p->ep, rmem, 0, p->buf, len, &op);
    if (st != RDMX_INPROGRESS)
        push_put(st, 0, p);
}

/* hold: keep the request (and its data) unanswered. */
static void h_hold(rdmx_rpc_req_t *req, void *arg)
{
    (void)arg;
    if (hs_nheld == HELD_MAX) {
        rdmx_rpc_respond_error(req, RDMX_ERR_BUSY, "holding %u already",
                               hs_nheld);
        return;
    }
    hs_held[hs_nheld++] = req;
}

/* answer_held: answer each held request with the checksum of its data,
 * then this one with their count (u32). */
static void h_answer_held(rdmx_rpc_req_t *req, void *arg)
{
    uint32_t n = hs_nheld;

    (void)arg;
    for (unsigned i = 0; i < hs_nheld; i++) {
        size_t len;
        const void *data = rdmx_rpc_req_data(hs_held[i], &len);
        uint64_t sum = trs_checksum(data, len);

        rdmx_rpc_respond(hs_held[i], &sum, sizeof(sum));
    }
    hs_nheld = 0;
    rdmx_rpc_respond(req, &n, sizeof(n));
}

static int hs_main(void)
{
    rdmx_rpc_server_params_t sp;
    rdmx_rpc_server_t *srv;

    th_init("desc_release-rpc-server", 600);
    memset(&sp, 0, sizeof(sp));
    sp.field_mask = RDMX_RPC_SERVER_PARAM_FIELD_ADDRESS |
                    RDMX_RPC_SERVER_PARAM_FIELD_WORKERS;
    sp.address = "127.0.0.1:0";
    sp.workers = 1;
    signal(SIGTERM, hs_on_term);
    signal(SIGINT, hs_on_term);
    hs_ctx = th_context();
    CHECK_OK(rdmx_rpc_server_create(hs_ctx, &sp, &srv));
    CHECK_OK(rdmx_rpc_server_register(srv, "push", h_push, NULL, 0));
    CHECK_OK(rdmx_rpc_server_register(srv, "hold", h_hold, NULL, 0));
    CHECK_OK(
        rdmx_rpc_server_register(srv, "answer_held", h_answer_held, NULL, 0));
    CHECK_OK(rdmx_rpc_server_start(srv));
    th_announce_port(rdmx_rpc_server_port(srv));
    while (!hs_stop)
        usleep(10000);
    CHECKF(hs_nheld == 0, "%u requests still held", hs_nheld);
    rdmx_rpc_server_destroy(srv);
    rdmx_context_destroy(hs_ctx);
    th_log("server done");
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The client                                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *log; /* where its stdout and stderr go */
    th_proc_t rpc;   /* the RPC server */
    th_proc_t cmd;   /* the command server */
} client_args_t;

static void client_push(rdmx_context_t *ctx, rdmx_channel_t *ch)
{
    static const size_t sizes[] = {4 * TH_KIB, 64 * TH_KIB, TH_MIB};
    unsigned char *buf = th_alloc(TH_MIB);
    rdmx_mr_t *mr;

    CHECK_OK(rdmx_mem_register(ctx, buf, TH_MIB, RDMX_ACCESS_ALL, &mr));
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (unsigned i = 0; i < NPUSH; i++) {
            uint64_t seed = th_seed(sizes[s], i, 1);
            rdmx_rpc_bulk_t b = {.mr = mr,
                                 .offset = 0,
                                 .length = sizes[s],
                                 .access = RDMX_ACCESS_WRITE};
            rdmx_call_params_t p = {.field_mask = RDMX_CALL_PARAM_FIELD_BULK |
                                                  RDMX_CALL_PARAM_FIELD_TIMEOUT,
                                    .timeout_ms = 30000 * TH_SLOW,
                                    .bulk = &b,
                                    .nbulk = 1};
            size_t rlen = 99;

            memset(buf, 0, sizes[s]);
            CHECK_OK(
                rdmx_call(ch, "push", &seed, sizeof(seed), NULL, 0, &p, &rlen));
            CHECK_EQ_U64(rlen, 0);
            CHECK_PATTERN(buf, sizes[s], seed, 0);
        }
    }
    th_log("%u pushes each of 4 KiB, 64 KiB, 1 MiB verified", NPUSH);
    rdmx_mem_deregister(mr);
    free(buf);
}

typedef struct {
    volatile int done;
    rdmx_status_t status;
    size_t length;
    uint64_t sum;
} held_call_t;

static void held_cb(const rdmx_call_result_t *r, void *arg)
{
    held_call_t *c = arg;

    c->status = r->status;
    c->length = r->length;
    if (r->status == RDMX_OK && r->length == sizeof(c->sum))
        memcpy(&c->sum, r->data, sizeof(c->sum));
    c->done = 1;
}

static void client_hold(rdmx_worker_t *w, rdmx_channel_t *ch)
{
    static const size_t sizes[] = {200, 5000, 40000, 300000};
    enum { N = HOLD_EACH * sizeof(sizes) / sizeof(sizes[0]) };
    held_call_t calls[N];
    unsigned char *data[N];
    size_t len[N];
    unsigned answered = 0, left = N;
    double deadline = th_now_ms() + 30000.0 * TH_SLOW;

    memset(calls, 0, sizeof(calls));
    for (unsigned i = 0; i < N; i++) {
        rdmx_call_params_t p = {.field_mask = RDMX_CALL_PARAM_FIELD_CB |
                                              RDMX_CALL_PARAM_FIELD_TIMEOUT,
                                .timeout_ms = 30000 * TH_SLOW,
                                .cb = held_cb,
                                .arg = &calls[i]};

        len[i] = sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
        data[i] = th_alloc(len[i]);
        th_fill(data[i], len[i], th_seed(len[i], i, 2));
        CHECK_ST(rdmx_call_nb(ch, "hold", data[i], len[i], &p, NULL),
                 RDMX_INPROGRESS);
    }
    /* A large request is handled once its data is in, maybe after an
     * answer_held sent later: ask again until every one was answered. */
    while (left > 0) {
        uint32_t n = 0;
        size_t rlen = 0;

        CHECKF(th_now_ms() < deadline, "%u held calls never answered", left);
        CHECK_OK(
            rdmx_call(ch, "answer_held", NULL, 0, &n, sizeof(n), NULL, &rlen));
        CHECK_EQ_U64(rlen, sizeof(n));
        answered += n;
        for (unsigned i = 0; i < 200; i++)
            rdmx_worker_progress(w);
        left = 0;
        for (unsigned i = 0; i < N; i++)
            left += !calls[i].done;
        if (left > 0)
            th_sleep_ms(2);
    }
    CHECK_EQ_U64(answered, N);
    for (unsigned i = 0; i < N; i++) {
        CHECK_OK(calls[i].status);
        CHECK_EQ_U64(calls[i].length, 8);
        CHECKF(calls[i].sum == trs_checksum(data[i], len[i]),
               "held request %u (%zu bytes): server saw other data", i, len[i]);
        free(data[i]);
    }
    th_log("%u held requests answered with their data intact", (unsigned)N);
}

/* Progress until the worker counted @want unexpected messages. */
static void wait_unexpected(rdmx_worker_t *w, uint64_t want)
{
    double deadline = th_now_ms() + 10000.0 * TH_SLOW;
    rdmx_worker_stats_t st;

    for (;;) {
        rdmx_worker_progress(w);
        rdmx_worker_stats(w, &st);
        if (st.msgs_unexpected >= want)
            return;
        CHECKF(th_now_ms() < deadline, "no unexpected message (%llu of %llu)",
               (unsigned long long)st.msgs_unexpected,
               (unsigned long long)want);
    }
}

static void client_unexpected(rdmx_worker_t *w, const th_proc_t *cmd)
{
    static const size_t sizes[] = {1000, 300000, LEFT_LEN};
    unsigned char *buf = th_alloc(LEFT_LEN);
    rdmx_ep_t *ep = th_connect(w, cmd, NULL);
    rdmx_worker_stats_t st;

    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        uint64_t seed = th_seed(sizes[s], 3, 3);
        rdmx_op_params_t p = {.field_mask = RDMX_OP_PARAM_FIELD_TIMEOUT,
                              .timeout_ms = 30000 * TH_SLOW};
        size_t got = 0;

        rdmx_worker_stats(w, &st);
        ts_post(ep, TS_SEND, sizes[s], seed, 0, 0);
        wait_unexpected(w, st.msgs_unexpected + 1);
        memset(buf, 0, sizes[s]);
        CHECK_OK(rdmx_recv(ep, buf, LEFT_LEN, &p, &got));
        CHECK_EQ_U64(got, sizes[s]);
        CHECK_PATTERN(buf, sizes[s], seed, 0);
    }
    th_log("unexpected messages of 1000, 300000 and %zu bytes received",
           (size_t)LEFT_LEN);
    /* One never received: its descriptor goes back at the close. */
    rdmx_worker_stats(w, &st);
    ts_post(ep, TS_SEND, LEFT_LEN, th_seed(4, 4, 4), 0, 0);
    wait_unexpected(w, st.msgs_unexpected + 1);
    rdmx_ep_close(ep);
    free(buf);
}

static int client_main(void *arg)
{
    const client_args_t *a = arg;
    rdmx_context_t *ctx;
    rdmx_worker_t *w;
    rdmx_channel_t *ch;
    int fd = open(a->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    CHECKF(fd >= 0, "open %s", a->log);
    fflush(NULL);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    th_init("desc_release-client", 240);
    ctx = th_context();
    w = th_worker(ctx, 0);
    ch = cu_channel(w, a->rpc.addr, 5000, -1);
    client_push(ctx, ch);
    client_hold(w, ch);
    rdmx_channel_destroy(ch);
    client_unexpected(w, &a->cmd);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    th_log("client done");
    fflush(NULL);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The test                                                                 */
/* ------------------------------------------------------------------------ */

/* Count UCX's complaints in one process's log; print the first of them. */
static unsigned check_log(const char *who, const char *path, char *text,
                          unsigned *cant_hold_p)
{
    unsigned leaks;
    const char *first;

    cu_read_file(path, text, LOG_MAX);
    leaks = cu_count(text, LEAK_TEXT);
    *cant_hold_p = cu_count(text, HOLD_TEXT);
    th_log("%s: %u \"%s\", %u \"%s\"", who, leaks, LEAK_TEXT, *cant_hold_p,
           HOLD_TEXT);
    first = strstr(text, LEAK_TEXT);
    if (first == NULL)
        first = strstr(text, HOLD_TEXT);
    if (first != NULL) {
        const char *line = first;
        while (line > text && line[-1] != '\n')
            line--;
        th_log("%s: first: %.*s", who, (int)strcspn(line, "\n"), line);
    }
    return leaks;
}

int main(int argc, char **argv)
{
    char rpc_log[128], cmd_log[128], client_log[128], how[64];
    client_args_t a;
    unsigned leaks[3], cant_hold[3];
    int ws_client, ws_rpc, ws_cmd;
    char *text;
    pid_t pid;

    if (argc > 1 && strcmp(argv[1], "--server") == 0)
        return ts_server_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "hold-server") == 0)
        return hs_main();
    th_init("desc_release", 300);
    th_log("transport %s", th_transport_env());

    cu_log_path(rpc_log, sizeof(rpc_log), "desc-rpc");
    cu_log_path(cmd_log, sizeof(cmd_log), "desc-cmd");
    cu_log_path(client_log, sizeof(client_log), "desc-client");
    memset(&a, 0, sizeof(a));
    a.log = client_log;
    cu_spawn_logged(&a.rpc, rpc_log, "hold-server", 30000, NULL);
    cu_spawn_logged(&a.cmd, cmd_log, "--server", 30000, NULL);
    pid = cu_fork(client_main, &a, 240);
    ws_client = cu_wait_pid(pid, 240000);
    th_kill(&a.rpc, SIGTERM);
    ws_rpc = th_wait_exit(&a.rpc, 30000);
    ws_cmd = th_wait_exit(&a.cmd, 30000);

    text = th_alloc(LOG_MAX);
    leaks[0] = check_log("client", client_log, text, &cant_hold[0]);
    CHECKF(strstr(text, "client done") != NULL,
           "the client did not finish (%s); its log:\n%s",
           cu_wstatus_str(ws_client, how, sizeof(how)), text);
    leaks[1] = check_log("rpc server", rpc_log, text, &cant_hold[1]);
    leaks[2] = check_log("command server", cmd_log, text, &cant_hold[2]);

    CHECKF(WIFEXITED(ws_client) && WEXITSTATUS(ws_client) == 0, "client: %s",
           cu_wstatus_str(ws_client, how, sizeof(how)));
    th_check_exit_ok("rpc server", ws_rpc);
    CHECKF(WIFEXITED(ws_cmd) && WEXITSTATUS(ws_cmd) == 3,
           "command server: %s, expected exit 3 (the client closed without "
           "TS_QUIT)",
           cu_wstatus_str(ws_cmd, how, sizeof(how)));
    for (unsigned i = 0; i < 3; i++) {
        CHECKF(leaks[i] == 0, "%s: %u buffers UCX lent were never given back",
               i == 0   ? "client"
               : i == 1 ? "rpc server"
                        : "command server",
               leaks[i]);
        CHECKF(cant_hold[i] == 0,
               "%s: a handler claimed data it could not "
               "keep (%u times)",
               i == 0   ? "client"
               : i == 1 ? "rpc server"
                        : "command server",
               cant_hold[i]);
    }
    free(text);
    unlink(rpc_log);
    unlink(cmd_log);
    unlink(client_log);
    th_log("PASS");
    return 0;
}
