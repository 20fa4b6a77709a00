/*
 * A raw RPC peer's receiving side (raw_rpc.h).
 */
#include "raw_rpc.h"

#include "core/ucx/ucx.h"
#include "harness.h"
#include "rpc/wire.h"
#include "util/endian.h"

#include <string.h>

static rdmx_worker_t *raw_w;
static raw_rpc_take_t raw_take;
static unsigned *raw_batches;

/* A message the server sent at once names this side's connection in front
 * of its header, in place of UCX's reply endpoint: check that it names one
 * of the raw worker's connections, and step over it. */
static void unname(const void **header, size_t *hlen,
                   const ucp_am_recv_param_t *param)
{
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
        return;
    CHECKF(*hlen >= 8 && rdmx__tp_token(raw_w, rdmx_get_le64(*header)) != NULL,
           "a message of %zu header bytes names no connection of ours", *hlen);
    *header = (const unsigned char *)*header + 8;
    *hlen -= 8;
}

static ucs_status_t raw_am(void *arg, const void *header, size_t hlen,
                           void *data, size_t len,
                           const ucp_am_recv_param_t *param)
{
    (void)arg;
    unname(&header, &hlen, param);
    return raw_take(header, hlen, data, len,
                    (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
}

/* A batch: records of id, header length, two zero bytes, data length (LE
 * u32), header, data, padding to 8. */
static ucs_status_t raw_batch(void *arg, const void *header, size_t hlen,
                              void *data, size_t len,
                              const ucp_am_recv_param_t *param)
{
    const unsigned char *p = data, *end = p + len;

    (void)arg;
    if (raw_batches != NULL)
        (*raw_batches)++;
    unname(&header, &hlen, param);
    CHECK(hlen == 0 && !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV));
    CHECKF(len > 0 && len % 8 == 0, "batch of %zu bytes", len);
    while (p < end) {
        size_t rh, rl;

        CHECK(end - p >= 8 && p[0] == RDMX_AM_RPC && p[2] == 0 && p[3] == 0);
        rh = p[1];
        rl = rdmx_get_le32(p + 4);
        CHECK(rh + rl <= (size_t)(end - p) - 8);
        raw_take(p + 8, rh, (void *)(p + 8 + rh), rl, 0);
        p += (8 + rh + rl + 7) & ~(size_t)7;
    }
    CHECK(p == end);
    return UCS_OK;
}

void raw_rpc_install(rdmx_worker_t *w, raw_rpc_take_t take, unsigned *batches)
{
    ucp_am_handler_param_t p;

    raw_w = w;
    raw_take = take;
    raw_batches = batches;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                   UCP_AM_HANDLER_PARAM_FIELD_CB |
                   UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    p.id = RDMX_AM_RPC;
    p.cb = raw_am;
    p.flags = UCP_AM_FLAG_WHOLE_MSG;
    CHECK(ucp_worker_set_am_recv_handler(rdmx__ucx_worker(w), &p) == UCS_OK);
    p.id = RDMX_AM_BATCH;
    p.cb = raw_batch;
    CHECK(ucp_worker_set_am_recv_handler(rdmx__ucx_worker(w), &p) == UCS_OK);
}
