/*
 * RPC message plumbing shared by servers and channels: the active-message
 * handler that decodes the header and hands the message to the endpoint's
 * owner, and the send path.
 *
 * Sending: the first attempt asks UCX to complete at once from the caller's
 * buffer (no copy, no request). When UCX cannot (rendezvous, full send
 * queue), the caller's buffer is kept if the caller promises it outlives the
 * send, else copied into a send record freed at completion. A message in
 * two parts (a short head, then a body the caller keeps until told) is
 * gathered by the transport: the body is never copied by rdmx.
 */
#include "rpc/internal.h"
#include "util/bufcache.h"

#include "util/hash.h"

#include <stdlib.h>
#include <string.h>

uint32_t rdmx_rpc_id(const char *name)
{
    return name == NULL ? 0 : (uint32_t)rdmx_fnv1a64(name, strlen(name));
}

rdmx_status_t rdmx__rpc_attach(rdmx_worker_t *w)
{
    return rdmx__worker_set_handler(w, RDMX_AM_RPC, rdmx__rpc_am);
}

/* A message whose header does not decode: decode it again for the reason
 * and tell the link's owner (out of the receive path). */
static void __attribute__((noinline, cold))
bad_msg(rdmx_rpc_link_t *link, rdmx_ep_t *ep, const void *header, size_t hlen,
        size_t len)
{
    rdmx_rpc_hdr_t h;
    char why[160];

    rdmx_rpc_hdr_decode(header, hlen, len, &h, why, sizeof(why));
    if (link->role == RDMX_RPC_LINK_SERVER)
        rdmx__server_on_bad(link, ep, &h, why);
    else
        rdmx__channel_on_bad(link, ep, &h, why);
}

rdmx_status_t rdmx__rpc_am(rdmx_worker_t *w, const void *header, size_t hlen,
                           void *data, size_t len,
                           const rdmx_msg_info_t *info)
{
    rdmx_ep_t *ep = info->ep;
    rdmx_rpc_link_t *link;
    rdmx_rpc_msg_t m;

    link = rdmx__ep_upper(ep);
    if (link == NULL)
        link = rdmx__server_link_for(ep);
    if (link == NULL) {
        rdmx__worker_proto_error(w);
        return RDMX_OK;
    }
    if (rdmx_rpc_hdr_decode(header, hlen, len, &m.h, NULL, 0) != RDMX_OK) {
        bad_msg(link, ep, header, hlen, len);
        return RDMX_OK;
    }
    m.data = data;
    m.length = len;
    m.rndv = !!(info->flags & RDMX_MSG_RNDV);
    m.can_hold = !!(info->flags & RDMX_MSG_HOLDABLE);
    m.ring = 0;
    m.at_ns = rdmx__worker_deliver_ns(w);
    if (link->role == RDMX_RPC_LINK_SERVER)
        return rdmx__server_on_msg(link, ep, &m);
    return rdmx__channel_on_msg(link, ep, &m);
}

static void tx_done(rdmx_status_t status, size_t length, void *arg)
{
    (void)status;
    (void)length;
    rdmx__buf_free(arg);
}

rdmx_status_t rdmx__rpc_send_keep(rdmx_ep_t *ep, const rdmx_rpc_hdr_t *h,
                                  const void *data, size_t len,
                                  rdmx_send_how_t how, rdmx_cb_t keep_cb,
                                  void *keep_arg)
{
    unsigned char hdr[RDMX_RPC_HDR_MAX];
    size_t hlen = rdmx_rpc_hdr_encode(h, hdr);
    rdmx_status_t st;
    void *copy;

    st = rdmx__msg_send_now(ep, RDMX_AM_RPC, hdr, hlen, data, len, how);
    if (st != RDMX_ERR_NO_RESOURCE)
        return st;
    if (keep_cb != NULL) {
        return rdmx__msg_send(ep, RDMX_AM_RPC, hdr, hlen, data, len,
                             keep_cb, keep_arg);
    }
    copy = rdmx__buf_alloc(len);
    if (copy == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "send: out of memory for %zu "
                                               "bytes",
                           len);
    if (len != 0)
        memcpy(copy, data, len);
    st = rdmx__msg_send(ep, RDMX_AM_RPC, hdr, hlen, copy, len, tx_done,
                       copy);
    if (st != RDMX_INPROGRESS)
        rdmx__buf_free(copy);
    return st == RDMX_INPROGRESS ? RDMX_OK : st;
}

/* A gathered send in flight: the head's copy and whom to tell. */
typedef struct {
    void (*done)(void *arg);
    void *arg;
    unsigned char head[RDMX_RPC_RESPOND_HEAD_MAX];
} parts_t;

static void parts_sent(rdmx_status_t status, size_t length, void *arg)
{
    parts_t *p = arg;

    (void)status;
    (void)length;
    p->done(p->arg);
    free(p);
}

rdmx_status_t rdmx__rpc_send_gather(rdmx_ep_t *ep, const rdmx_rpc_hdr_t *h,
                                    const void *head, size_t hlen,
                                    const void *body, size_t blen,
                                    rdmx_cb_t keep_cb, void *keep_arg)
{
    unsigned char hdr[RDMX_RPC_HDR_MAX];
    size_t hl = rdmx_rpc_hdr_encode(h, hdr);
    rdmx_msg_iov_t iov[2] = {{head, hlen}, {body, blen}};

    /* (No attempt to complete at once: UCX takes gathered data only
     * through a request.) */
    return rdmx__msg_sendv(ep, RDMX_AM_RPC, hdr, hl, iov, 2, keep_cb, keep_arg);
}

rdmx_status_t rdmx__rpc_send_parts(rdmx_ep_t *ep, const rdmx_rpc_hdr_t *h,
                                   const void *head, size_t hlen,
                                   const void *body, size_t blen,
                                   void (*done)(void *arg), void *arg)
{
    rdmx_status_t st;
    parts_t *p;

    if (hlen > sizeof(p->head) || (p = malloc(sizeof(*p))) == NULL) {
        done(arg);
        return rdmx__error(hlen > RDMX_RPC_RESPOND_HEAD_MAX
                               ? RDMX_ERR_INVALID
                               : RDMX_ERR_NO_MEMORY,
                           "send: a head of %zu bytes", hlen);
    }
    memcpy(p->head, head, hlen);
    p->done = done;
    p->arg = arg;
    st = rdmx__rpc_send_gather(ep, h, p->head, hlen, body, blen, parts_sent, p);
    if (st == RDMX_INPROGRESS)
        return RDMX_OK;
    free(p);
    done(arg);
    return st;
}

rdmx_status_t rdmx__rpc_send(rdmx_ep_t *ep, const rdmx_rpc_hdr_t *h,
                             const void *data, size_t len)
{
    return rdmx__rpc_send_keep(ep, h, data, len, RDMX_SEND_BURST, NULL, NULL);
}

rdmx_status_t rdmx__rpc_send_ctl(rdmx_ep_t *ep, rdmx_rpc_kind_t kind,
                                 uint64_t id, int32_t status)
{
    rdmx_rpc_hdr_t h;

    rdmx__rpc_hdr(&h, kind, 0, id);
    h.status = status;
    /* (leaves now outside a pass: a cancel's sender has no reason to
     * progress again soon) */
    return rdmx__rpc_send_keep(ep, &h, NULL, 0, RDMX_SEND_NOW, NULL, NULL);
}
