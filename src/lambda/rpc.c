/*
 * rdmx lambda — RPC glue: the request format (little-endian, every length
 * validated), the "lambda.eval" / "lambda.call" / "lambda.native" handlers,
 * and the client helpers. docs/LAMBDA.md, "Wire format".
 *
 *   eval:   u8 version(1) u8 nkeys u16 nargs u32 source_len u32 input_len
 *           u32 arg_len[nargs] | source | input | arg 0 | arg 1 ...
 *   call:   u8 version(1) u8 nkeys u16 nargs u8 id[32] u32 input_len
 *           u32 arg_len[nargs] | input | arg 0 | arg 1 ...
 *   native: u8 version(1) u8 name_len u16 0 u32 input_len | name | input
 *
 * The lengths must add up to the payload exactly. A response is the output
 * bytes; an error is an RPC error with the status and the message.
 */
#include "lambda/lambda_int.h"

#include "core/upper.h"
#include "util/endian.h"

#include <stdlib.h>
#include <string.h>

rdmx_status_t rdmx__lambda_decode(rdmx__lambda_kind_t kind, const void *p,
                                  size_t len, rdmx__lambda_req_t *req)
{
    const unsigned char *b = p;
    size_t hdr, off;
    uint64_t total;
    unsigned i;

    memset(req, 0, offsetof(rdmx__lambda_req_t, args));
    hdr = kind == RDMX__LAMBDA_EVAL   ? RDMX__LAMBDA_EVAL_HDR
          : kind == RDMX__LAMBDA_CALL ? RDMX__LAMBDA_CALL_HDR
                                      : RDMX__LAMBDA_NATIVE_HDR;
    if (b == NULL || len < hdr)
        return rdmx__error(RDMX_ERR_PROTO,
                           "lambda: request of %zu bytes, header needs %zu",
                           len, hdr);
    if (b[0] != RDMX__LAMBDA_WIRE_VERSION)
        return rdmx__error(RDMX_ERR_PROTO,
                           "lambda: request version %u, expected %u", b[0],
                           RDMX__LAMBDA_WIRE_VERSION);

    if (kind == RDMX__LAMBDA_NATIVE) {
        size_t nl = b[1];
        if (rdmx_get_le16(b + 2) != 0)
            return rdmx__error(RDMX_ERR_PROTO,
                               "lambda: reserved bytes are not zero");
        if (nl == 0 || nl > RDMX_LAMBDA_NAME_MAX)
            return rdmx__error(RDMX_ERR_PROTO,
                               "lambda: native name of %zu bytes (1..%d)", nl,
                               RDMX_LAMBDA_NAME_MAX);
        req->input_len = rdmx_get_le32(b + 4);
        if ((uint64_t)hdr + nl + req->input_len != len)
            return rdmx__error(RDMX_ERR_PROTO,
                               "lambda: lengths (%zu + %zu + %zu) do not add "
                               "up to the request's %zu bytes",
                               hdr, nl, req->input_len, len);
        req->name = (const char *)b + hdr;
        req->name_len = nl;
        if (memchr(req->name, '\0', nl) != NULL)
            return rdmx__error(RDMX_ERR_PROTO,
                               "lambda: NUL inside the native name");
        req->input = b + hdr + nl;
        return RDMX_OK;
    }

    req->nkeys = b[1];
    req->nargs = rdmx_get_le16(b + 2);
    if (req->nargs > RDMX_LAMBDA_ARGS_MAX)
        return rdmx__error(RDMX_ERR_PROTO, "lambda: %u args, at most %d",
                           req->nargs, RDMX_LAMBDA_ARGS_MAX);
    if (req->nkeys > req->nargs)
        return rdmx__error(RDMX_ERR_PROTO,
                           "lambda: %u keys among %u args", req->nkeys,
                           req->nargs);
    if (kind == RDMX__LAMBDA_EVAL) {
        req->source_len = rdmx_get_le32(b + 4);
        req->input_len = rdmx_get_le32(b + 8);
    } else {
        req->id = b + 4;
        req->input_len = rdmx_get_le32(b + 36);
    }
    if (len - hdr < 4 * (size_t)req->nargs)
        return rdmx__error(RDMX_ERR_PROTO,
                           "lambda: %u arg lengths do not fit in %zu bytes",
                           req->nargs, len);
    off = hdr + 4 * (size_t)req->nargs;
    total = (uint64_t)req->source_len + req->input_len;
    for (i = 0; i < req->nargs; i++) {
        req->args[i].len = rdmx_get_le32(b + hdr + 4 * (size_t)i);
        total += req->args[i].len;
    }
    if (total != len - off)
        return rdmx__error(RDMX_ERR_PROTO,
                           "lambda: lengths add up to %llu bytes, the "
                           "request carries %zu",
                           (unsigned long long)total, len - off);
    if (kind == RDMX__LAMBDA_EVAL) {
        req->source = (const char *)b + off;
        off += req->source_len;
    }
    req->input = b + off;
    off += req->input_len;
    for (i = 0; i < req->nargs; i++) {
        req->args[i].data = b + off;
        off += req->args[i].len;
    }
    return RDMX_OK;
}

rdmx_status_t rdmx__lambda_encode(rdmx__lambda_kind_t kind,
                                  const char *source, size_t source_len,
                                  const uint8_t *id, const char *name,
                                  const void *input, size_t input_len,
                                  const char *const *args, unsigned nargs,
                                  unsigned nkeys, void **buf_p, size_t *len_p)
{
    size_t hdr, total, nl = 0, off;
    size_t alen[RDMX_LAMBDA_ARGS_MAX];
    unsigned char *b;
    unsigned i;

    *buf_p = NULL;
    *len_p = 0;
    if (input == NULL && input_len > 0)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL input");
    if (input_len > UINT32_MAX)
        return rdmx__error(RDMX_ERR_TOO_BIG,
                           "lambda: input of %zu bytes (at most 4 GiB - 1)",
                           input_len);
    if (kind == RDMX__LAMBDA_NATIVE) {
        nl = name != NULL ? strlen(name) : 0;
        if (nl == 0 || nl > RDMX_LAMBDA_NAME_MAX)
            return rdmx__error(RDMX_ERR_INVALID,
                               "lambda: native name must be 1..%d bytes",
                               RDMX_LAMBDA_NAME_MAX);
        total = RDMX__LAMBDA_NATIVE_HDR + nl + input_len;
        b = malloc(total ? total : 1);
        if (b == NULL)
            return rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
        b[0] = RDMX__LAMBDA_WIRE_VERSION;
        b[1] = (unsigned char)nl;
        rdmx_put_le16(b + 2, 0);
        rdmx_put_le32(b + 4, (uint32_t)input_len);
        memcpy(b + RDMX__LAMBDA_NATIVE_HDR, name, nl);
        if (input_len > 0)
            memcpy(b + RDMX__LAMBDA_NATIVE_HDR + nl, input, input_len);
        *buf_p = b;
        *len_p = total;
        return RDMX_OK;
    }

    if (nargs > RDMX_LAMBDA_ARGS_MAX || (nargs > 0 && args == NULL) ||
        nkeys > nargs)
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: %u args (at most %d, args not NULL), "
                           "%u of them keys",
                           nargs, RDMX_LAMBDA_ARGS_MAX, nkeys);
    if (kind == RDMX__LAMBDA_EVAL) {
        if (source == NULL && source_len > 0)
            return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL source");
        if (source_len > UINT32_MAX)
            return rdmx__error(RDMX_ERR_TOO_BIG, "lambda: source too big");
        hdr = RDMX__LAMBDA_EVAL_HDR;
    } else {
        if (id == NULL)
            return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL id");
        hdr = RDMX__LAMBDA_CALL_HDR;
        source_len = 0;
    }
    total = hdr + 4 * (size_t)nargs + source_len + input_len;
    for (i = 0; i < nargs; i++) {
        if (args[i] == NULL)
            return rdmx__error(RDMX_ERR_INVALID, "lambda: arg %u is NULL", i);
        alen[i] = strlen(args[i]);
        if (alen[i] > UINT32_MAX)
            return rdmx__error(RDMX_ERR_TOO_BIG, "lambda: arg %u too big", i);
        total += alen[i];
    }
    b = malloc(total);
    if (b == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
    b[0] = RDMX__LAMBDA_WIRE_VERSION;
    b[1] = (unsigned char)nkeys;
    rdmx_put_le16(b + 2, (uint16_t)nargs);
    if (kind == RDMX__LAMBDA_EVAL) {
        rdmx_put_le32(b + 4, (uint32_t)source_len);
        rdmx_put_le32(b + 8, (uint32_t)input_len);
    } else {
        memcpy(b + 4, id, RDMX_LAMBDA_ID_LEN);
        rdmx_put_le32(b + 36, (uint32_t)input_len);
    }
    for (i = 0; i < nargs; i++)
        rdmx_put_le32(b + hdr + 4 * (size_t)i, (uint32_t)alen[i]);
    off = hdr + 4 * (size_t)nargs;
    if (source_len > 0) {
        memcpy(b + off, source, source_len);
        off += source_len;
    }
    if (input_len > 0) {
        memcpy(b + off, input, input_len);
        off += input_len;
    }
    for (i = 0; i < nargs; i++) {
        memcpy(b + off, args[i], alen[i]);
        off += alen[i];
    }
    *buf_p = b;
    *len_p = total;
    return RDMX_OK;
}

rdmx_status_t
rdmx__lambda_serve(rdmx_lambda_engine_t *engine, rdmx__lambda_kind_t kind,
                   const rdmx__lambda_req_t *req, uint64_t deadline_ns,
                   const rdmx_lambda_env_t *env, rdmx_lambda_result_t *result,
                   rdmx__lambda_state_t **held_p)
{
    rdmx_lambda_call_params_t call = {
        .field_mask = RDMX_LAMBDA_CALL_PARAM_FIELD_INPUT |
                      RDMX_LAMBDA_CALL_PARAM_FIELD_ARGS |
                      RDMX_LAMBDA_CALL_PARAM_FIELD_NKEYS |
                      RDMX_LAMBDA_CALL_PARAM_FIELD_DEADLINE |
                      RDMX_LAMBDA_CALL_PARAM_FIELD_ENV,
        .input = req->input,
        .input_len = req->input_len,
        .args = req->args,
        .nargs = req->nargs,
        .nkeys = req->nkeys,
        .deadline_ns = deadline_ns,
        .env = env,
    };
    char name[RDMX_LAMBDA_NAME_MAX + 1];

    if (held_p != NULL)
        *held_p = NULL;
    switch (kind) {
    case RDMX__LAMBDA_EVAL:
        return rdmx__lambda_engine_eval(engine, req->source, req->source_len,
                                        &call, result, held_p);
    case RDMX__LAMBDA_CALL:
        return rdmx__lambda_engine_call(engine, req->id, &call, result, held_p);
    default:
        memcpy(name, req->name, req->name_len);
        name[req->name_len] = '\0';
        return rdmx_lambda_engine_native(engine, name, req->input,
                                         req->input_len, result);
    }
}

static void handle(rdmx_rpc_req_t *rq, void *arg, rdmx__lambda_kind_t kind)
{
    rdmx__lambda_binding_t *b = arg;
    rdmx__lambda_req_t req;
    rdmx__lambda_state_t *held;
    rdmx_lambda_result_t res;
    const void *p;
    size_t len;
    rdmx_status_t st;

    p = rdmx_rpc_req_data(rq, &len);
    st = rdmx__lambda_decode(kind, p, len, &req);
    if (st != RDMX_OK) {
        rdmx_rpc_respond_error(rq, st, "%s", rdmx_error_detail());
        return;
    }
    st = rdmx__lambda_serve(b->engine, kind, &req, rdmx_rpc_req_deadline(rq),
                            b->env, &res, &held);
    if (st == RDMX_OK)
        rdmx_rpc_respond(rq, res.output, res.output_len);
    else
        rdmx_rpc_respond_error(rq, st, "%s", res.message);
    rdmx_lambda_result_free(&res);
    /* the answer is on its way: the state's copy back to its image runs
     * while the client reads it, not before the next call */
    rdmx__lambda_engine_tidy(b->engine, held);
}

static void h_eval(rdmx_rpc_req_t *rq, void *arg)
{
    handle(rq, arg, RDMX__LAMBDA_EVAL);
}

static void h_call(rdmx_rpc_req_t *rq, void *arg)
{
    handle(rq, arg, RDMX__LAMBDA_CALL);
}

static void h_native(rdmx_rpc_req_t *rq, void *arg)
{
    handle(rq, arg, RDMX__LAMBDA_NATIVE);
}

rdmx_status_t rdmx_lambda_register_handlers(rdmx_rpc_server_t *server,
                                            rdmx_lambda_engine_t *engine,
                                            const rdmx_lambda_env_t *env)
{
    rdmx__lambda_binding_t *b;
    rdmx_status_t st;

    if (server == NULL || engine == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL server or engine");
    b = rdmx__lambda_binding(engine, env);
    if (b == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "lambda: out of memory");
    st = rdmx_rpc_server_register(server, "lambda.eval", h_eval, b, 0);
    if (st == RDMX_OK)
        st = rdmx_rpc_server_register(server, "lambda.call", h_call, b, 0);
    if (st == RDMX_OK)
        st = rdmx_rpc_server_register(server, "lambda.native", h_native, b,
                                      0);
    return st;
}

rdmx_status_t rdmx__lambda_eval(rdmx_channel_t *channel, const char *source,
                                size_t length, const void *input,
                                size_t input_len, const char *const *args,
                                unsigned nargs, unsigned nkeys,
                                const rdmx_call_params_t *cparams, void *out,
                                size_t capacity, size_t *out_len_p)
{
    uint8_t id[RDMX_LAMBDA_ID_LEN];
    void *buf;
    size_t len;
    rdmx_status_t st;

    if (channel == NULL || (source == NULL && length > 0))
        return rdmx__error(RDMX_ERR_INVALID,
                           "lambda: NULL channel or source");
    rdmx_lambda_id(source, length, id);
    st = rdmx__lambda_encode(RDMX__LAMBDA_CALL, NULL, 0, id, NULL, input,
                             input_len, args, nargs, nkeys, &buf, &len);
    if (st != RDMX_OK)
        return st;
    st = rdmx_call(channel, "lambda.call", buf, len, out, capacity, cparams,
                   out_len_p);
    free(buf);
    if (st != RDMX_ERR_NOT_FOUND)
        return st;
    /* not cached on the server (or evicted): send the source */
    st = rdmx__lambda_encode(RDMX__LAMBDA_EVAL, source, length, NULL, NULL,
                             input, input_len, args, nargs, nkeys, &buf,
                             &len);
    if (st != RDMX_OK)
        return st;
    st = rdmx_call(channel, "lambda.eval", buf, len, out, capacity, cparams,
                   out_len_p);
    free(buf);
    return st;
}

rdmx_status_t rdmx_lambda_eval(rdmx_channel_t *channel, const char *source,
                               size_t length,
                               const rdmx_lambda_eval_params_t *params,
                               void *out, size_t capacity, size_t *out_len_p)
{
    uint64_t m = params != NULL ? params->field_mask : 0;
    rdmx_call_params_t cp = {0};

    if (m & RDMX_LAMBDA_EVAL_PARAM_FIELD_TIMEOUT) {
        cp.field_mask = RDMX_CALL_PARAM_FIELD_TIMEOUT;
        cp.timeout_ms = params->timeout_ms;
    }
    return rdmx__lambda_eval(
        channel, source, length,
        (m & RDMX_LAMBDA_EVAL_PARAM_FIELD_INPUT) ? params->input : NULL,
        (m & RDMX_LAMBDA_EVAL_PARAM_FIELD_INPUT) ? params->input_len : 0,
        (m & RDMX_LAMBDA_EVAL_PARAM_FIELD_ARGS) ? params->args : NULL,
        (m & RDMX_LAMBDA_EVAL_PARAM_FIELD_ARGS) ? params->nargs : 0, 0, &cp,
        out, capacity, out_len_p);
}

rdmx_status_t rdmx_lambda_native(rdmx_channel_t *channel, const char *name,
                                 const void *input, size_t input_len,
                                 void *out, size_t capacity,
                                 size_t *out_len_p)
{
    void *buf;
    size_t len;
    rdmx_status_t st;

    if (channel == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "lambda: NULL channel");
    st = rdmx__lambda_encode(RDMX__LAMBDA_NATIVE, NULL, 0, NULL, name, input,
                             input_len, NULL, 0, 0, &buf, &len);
    if (st != RDMX_OK)
        return st;
    st = rdmx_call(channel, "lambda.native", buf, len, out, capacity, NULL,
                   out_len_p);
    free(buf);
    return st;
}
