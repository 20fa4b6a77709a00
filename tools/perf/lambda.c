/*
 * rdmx-perf: what lambda_lat adds to the RPC tests (main.c describes it):
 * the four requests it compares, encoded once per client thread, the phase
 * that interleaves them, and the server's perf.lambda_nocache handler. The
 * client threads and the RPC server are rpc_client.c's and rpc_server.c's;
 * the table is printed by report.c.
 */
#include "perf.h"

#include <stdlib.h>

/* perf.lambda_nocache: a lambda.eval request without args (u8 version 1,
 * u8 nkeys 0, u16 nargs 0, u32 source_len, u32 input_len, source, input),
 * run exactly as the library's lambda.eval handler runs it, by the engine
 * without a cache (@p arg): every call compiles the source. */
void perf_lambda_nocache(rdmx_rpc_req_t *req, void *arg)
{
    rdmx_lambda_engine_t *nocache = arg;
    size_t len;
    const unsigned char *b = rdmx_rpc_req_data(req, &len);
    rdmx_lambda_call_params_t call = {0};
    rdmx_lambda_result_t res;
    uint32_t slen, ilen;
    rdmx_status_t st;

    if (len < 12 || b[0] != 1 || b[1] != 0 || b[2] != 0 || b[3] != 0) {
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO,
                               "perf.lambda_nocache: not a lambda.eval "
                               "request without args");
        return;
    }
    slen = get_le32(b + 4);
    ilen = get_le32(b + 8);
    if ((uint64_t)12 + slen + ilen != len) {
        rdmx_rpc_respond_error(req, RDMX_ERR_PROTO,
                               "perf.lambda_nocache: lengths do not add up");
        return;
    }
    call.field_mask = RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT |
                      RDMX_LAMBDA_CALL_PARAM_FIELD_DEADLINE;
    call.input = b + 12 + slen;
    call.input_len = ilen;
    call.deadline_ns = rdmx_rpc_req_deadline(req);
    st = rdmx_lambda_engine_eval(nocache, (const char *)b + 12, slen, &call,
                                 &res);
    if (st == RDMX_OK) {
        rdmx_rpc_respond(req, res.output, res.output_len);
    } else {
        rdmx_rpc_respond_error(req, st, "%s", res.message);
    }
    rdmx_lambda_result_free(&res);
}

/* lambda_lat: encode the four requests once (docs/LAMBDA.md, "Wire
 * format"); the input is SIZE bytes of t->req. */
static int lambda_requests(rpc_thread_t *t)
{
    const opts_t *o = t->run->o;
    const char *src = o->function_src ? o->function_src : LAMBDA_SOURCE;
    const size_t size = t->run->size,
                 sl = o->function_src ? o->function_len : strlen(src);
    uint8_t id[RDMX_LAMBDA_ID_LEN];
    unsigned char *b;

    rdmx_lambda_id(src, sl, id);
    t->lreq[LK_RPC] = malloc(size ? size : 1);
    t->lreq[LK_HASH] = b = malloc(40 + size);
    if (t->lreq[LK_RPC] == NULL || b == NULL) {
        return -1;
    }
    memcpy(t->lreq[LK_RPC], t->req, size);
    t->lreq_len[LK_RPC] = size;
    b[0] = 1;        /* version */
    b[1] = 0;        /* nkeys */
    b[2] = b[3] = 0; /* nargs */
    memcpy(b + 4, id, sizeof(id));
    put_le32(b + 36, (uint32_t)size);
    memcpy(b + 40, t->req, size);
    t->lreq_len[LK_HASH] = 40 + size;
    t->lreq[LK_SOURCE] = b = malloc(12 + sl + size);
    if (b == NULL) {
        return -1;
    }
    b[0] = 1;
    b[1] = b[2] = b[3] = 0;
    put_le32(b + 4, (uint32_t)sl);
    put_le32(b + 8, (uint32_t)size);
    memcpy(b + 12, src, sl);
    memcpy(b + 12 + sl, t->req, size);
    t->lreq_len[LK_SOURCE] = 12 + sl + size;
    t->lreq[LK_NOCACHE] = malloc(t->lreq_len[LK_SOURCE]);
    if (t->lreq[LK_NOCACHE] == NULL) {
        return -1;
    }
    memcpy(t->lreq[LK_NOCACHE], b, t->lreq_len[LK_SOURCE]);
    t->lreq_len[LK_NOCACHE] = t->lreq_len[LK_SOURCE];
    return 0;
}

/* lambda_lat's part of a client thread's set-up: the request and answer
 * buffers, the four requests, one lambda.eval so that lambda.call finds the
 * function cached, and room for each kind's samples. */
int perf_lambda_setup(rpc_thread_t *t)
{
    rpc_run_t *run = t->run;
    const size_t size = run->size;
    rdmx_status_t st;

    t->req = malloc(size + 1);
    t->resp = malloc(size + LAMBDA_OUT_MAX);
    if (t->req == NULL || t->resp == NULL) {
        perf_rpc_thread_fail(t, "allocate buffers", RDMX_ERR_NO_MEMORY, NULL);
        return -1;
    }
    for (size_t i = 0; i < size; i++) {
        t->req[i] = (unsigned char)(i * 7 + t->index);
    }
    if (lambda_requests(t) < 0) {
        perf_rpc_thread_fail(t, "allocate requests", RDMX_ERR_NO_MEMORY, NULL);
        return -1;
    }
    /* lambda.eval once, so that lambda.call finds it cached */
    {
        size_t got = 0;

        st = rdmx_call(t->ch, "lambda.eval", t->lreq[LK_SOURCE],
                       t->lreq_len[LK_SOURCE], t->resp,
                       size + LAMBDA_OUT_MAX, NULL, &got);
        if (st != RDMX_OK) {
            perf_rpc_thread_fail(t, "lambda.eval", st, rdmx_error_detail());
            return -1;
        }
        t->lout_len = got;
    }
    for (int k = 0; k < LK_COUNT; k++) {
        t->lsamples[k] = calloc(run->iters + 1, sizeof(uint64_t));
        if (t->lsamples[k] == NULL) {
            perf_rpc_thread_fail(t, "allocate samples", RDMX_ERR_NO_MEMORY,
                                 NULL);
            return -1;
        }
    }
    return 0;
}

/* @p count blocking calls of each lambda_lat kind, interleaved in blocks
 * of LAMBDA_BLOCK. */
int perf_lambda_phase(rpc_thread_t *t, uint64_t count, bool measure)
{
    static const char *const method[LK_COUNT] = {
        RPC_ECHO, "lambda.call", "lambda.eval", RPC_LAMBDA_NOCACHE};
    rpc_run_t *run = t->run;

    for (uint64_t done = 0; done < count; done += LAMBDA_BLOCK) {
        uint64_t n = count - done < LAMBDA_BLOCK ? count - done : LAMBDA_BLOCK;

        for (int k = 0; k < LK_COUNT; k++) {
            uint64_t t_last = now_ns();

            for (uint64_t i = 0; i < n; i++) {
                size_t got = 0;
                rdmx_status_t st =
                    rdmx_call(t->ch, method[k], t->lreq[k], t->lreq_len[k],
                              t->resp, run->size + LAMBDA_OUT_MAX, NULL, &got);

                if (st != RDMX_OK) {
                    perf_rpc_thread_fail(t, method[k], st, rdmx_error_detail());
                    return -1;
                }
                /* echo: the request back; the function: what it gave the
                 * first time */
                if (got != (k == LK_RPC ? run->size : t->lout_len)) {
                    perf_rpc_thread_fail(t, method[k], RDMX_ERR_PROTO,
                                         "unexpected answer length");
                    return -1;
                }
                if (measure) {
                    uint64_t now = now_ns();

                    t->lsamples[k][t->lnsamples[k]++] = now - t_last;
                    t_last = now;
                }
            }
            if (__builtin_expect(run->abort, 0)) {
                return -1;
            }
        }
    }
    t->done += count * LK_COUNT;
    return 0;
}
