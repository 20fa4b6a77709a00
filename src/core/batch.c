/*
 * Batched messages (docs/CORE.md, "Batched messages").
 *
 * A server answers the requests of one progress pass from inside that
 * pass. The first small message of a pass toward an endpoint leaves at
 * once; the next ones toward the same endpoint are copied into the
 * endpoint's batch, which leaves as one RDMX_AM_BATCH message when the
 * transport's progress returns (rdmx_worker_progress). Between passes the
 * same holds: the first message toward an endpoint since the last pass
 * began leaves at once, the next ones (calls made back to back) wait in
 * the batch until the worker's next progress or arm. A caller that
 * knows more messages follow says so (@more): its messages wait in the
 * batch until one without @more, any other operation on the endpoint, or
 * the worker's next progress or arm. The receiver delivers the batch's
 * messages one by one, in order, as if each had come alone. So n answers
 * to one peer cost two sends and deliveries by the transport instead of
 * n, and a lone answer still costs nothing more.
 *
 * Order: a batch holds only messages that rdmx__msg_send_now would have
 * sent, and any other operation on the endpoint sends the batch first
 * (rdmx__ep_usable, and the core's own sends), so nothing overtakes what
 * was sent before it.
 *
 * Wire (docs/PROTOCOL.md): records of 8 bytes (id, header length, 0, 0,
 * data length as little-endian u32), the header, the data, zeros up to a
 * multiple of 8.
 */
#include "core/internal.h"
#include "util/endian.h"
#include "util/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC_HEAD 8u

static size_t rec_size(size_t hlen, size_t len)
{
    return (REC_HEAD + hlen + len + 7u) & ~(size_t)7u;
}

int rdmx__batch_late(const rdmx_worker_t *w, uint64_t now)
{
    return rdmx_since(now, w->batch_open_ns) > RDMX_BATCH_HOLD_NS ||
           rdmx_since(now, w->deliver_ns) > RDMX_BATCH_HOLD_NS;
}

int rdmx__batch_add(rdmx_ep_t *ep, unsigned id, const void *hdr, size_t hlen,
                    const void *data, size_t len, rdmx_send_how_t how)
{
    rdmx_worker_t *w = ep->worker;
    size_t need = rec_size(hlen, len);
    int more = how == RDMX_SEND_MORE;
    int ends_run = how == RDMX_SEND_NOW || (!more && ep->batch_more);
    unsigned char *p;

    if (need > RDMX_BATCH_MAX / 2)
        return 0;
    if (ep->batch_len + need > RDMX_BATCH_MAX) {
        rdmx__batch_send(ep);
        if (ep->status != RDMX_OK)
            return 0; /* (the batch failed its endpoint) */
    }
    if (ep->batch == NULL && (ep->batch = malloc(RDMX_BATCH_MAX)) == NULL)
        return 0;
    p = ep->batch + ep->batch_len;
    p[0] = (unsigned char)id;
    p[1] = (unsigned char)hlen;
    p[2] = p[3] = 0;
    rdmx_put_le32(p + 4, (uint32_t)len);
    if (hlen != 0)
        memcpy(p + REC_HEAD, hdr, hlen);
    if (len != 0)
        memcpy(p + REC_HEAD + hlen, data, len);
    memset(p + REC_HEAD + hlen + len, 0, need - (REC_HEAD + hlen + len));
    if (ep->batch_n++ == 0) {
        if (rdmx_list_empty(&w->batched))
            w->batch_open_ns = rdmx_now_ns();
        rdmx_list_insert_tail(&w->batched, &ep->batch_link);
        /* Outside a pass, wake whoever may sleep on the worker's fd (a
         * progress thread, or an armed event loop): its next progress
         * sends the batch if no other call does. */
        if ((w->mt || w->armed) && !w->in_pass)
            w->tp->signal(w->tw);
    }
    ep->batch_len += need;
    ep->batch_more = more;
    if (ends_run && !w->in_pass) /* the end of a run announced with more */
        rdmx__batch_send(ep);
    return 1;
}

/* A batch the transport took with a request: its buffer, freed when the
 * send is done. */
static void batch_sent(rdmx_status_t status, size_t length, void *arg)
{
    (void)status;
    (void)length;
    free(arg);
}

/* Send a message of id @id: header @hdr (@hlen bytes) and @len bytes at
 * @data, which lies in @buf. @return RDMX_OK (sent), RDMX_INPROGRESS (the
 * transport took it with a request, which owns @buf until it is done), or
 * an error. */
static rdmx_status_t send_msg(rdmx_ep_t *ep, unsigned id, const void *hdr,
                              size_t hlen, const void *data, size_t len,
                              unsigned char *buf)
{
    rdmx_worker_t *w = ep->worker;
    /* (a batch is never a large message the receiver fetches; a message
     * alone goes as it would have gone) */
    unsigned eager = id == RDMX_AM_BATCH ? RDMX_TP_SEND_EAGER : 0;
    rdmx_status_t st;
    rdmx_op_t *op;
    void *req = NULL;

    st = rdmx__msg_try_now(ep, id, hdr, hlen, data, len, eager);
    if (st != RDMX_ERR_NO_RESOURCE)
        return st;
    /* The transport takes it only with a request (over shared memory,
     * anything above its short messages): the request gets the buffer;
     * the header goes in the op. */
    op = rdmx__op_get(w, ep, RDMX_OP_SEND, batch_sent, buf);
    if (op == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "send: out of memory");
    op->length = len;
    op->cb_at_end = 1; /* the buffer is the transport's until it is done */
    if (hlen != 0)
        memcpy(op->hdr, hdr, hlen);
    st = w->tp->send(ep->tep, id, op->hdr, hlen, data, len, NULL, eager, op,
                     &req);
    if (st == RDMX_INPROGRESS) {
        rdmx__op_issued(op, req);
        return RDMX_INPROGRESS;
    }
    rdmx__op_put(w, op);
    return st;
}

/* Send the record at @p alone, from a copy of its own. */
static rdmx_status_t send_record(rdmx_ep_t *ep, const unsigned char *p)
{
    size_t hlen = p[1], len = rdmx_get_le32(p + 4);
    size_t n = rec_size(hlen, len);
    unsigned char *copy = malloc(n);
    rdmx_status_t st;

    if (copy == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "send: out of memory");
    memcpy(copy, p, n);
    st = send_msg(ep, copy[0], copy + REC_HEAD, hlen, copy + REC_HEAD + hlen,
                  len, copy);
    if (st != RDMX_INPROGRESS)
        free(copy);
    return st;
}

/* Send the batch @b of @n messages in @len bytes: as one message, or its
 * one record's message alone when @n is 1, or record by record where the
 * transport's messages are smaller than the batch. @return as send_msg. */
static rdmx_status_t send_batch(rdmx_ep_t *ep, unsigned char *b, size_t len,
                                unsigned n)
{
    rdmx_worker_t *w = ep->worker;
    rdmx_status_t st;
    size_t off;

    if (n == 1)
        return send_msg(ep, b[0], b + REC_HEAD, b[1], b + REC_HEAD + b[1],
                        rdmx_get_le32(b + 4), b);
    st = send_msg(ep, RDMX_AM_BATCH, NULL, 0, b, len, b);
    if (st >= RDMX_OK) {
        w->stats.batches_sent++;
        w->stats.msgs_batched += n;
    }
    if (st != RDMX_ERR_TOO_BIG)
        return st;
    for (off = 0; off < len;
         off += rec_size(b[off + 1], rdmx_get_le32(b + off + 4)))
        if ((st = send_record(ep, b + off)) < 0)
            return st;
    return RDMX_OK;
}

void rdmx__batch_send(rdmx_ep_t *ep)
{
    rdmx_worker_t *w = ep->worker;
    unsigned char *b = ep->batch;
    size_t len = ep->batch_len;
    unsigned n = ep->batch_n;
    rdmx_status_t st;

    if (n == 0)
        return;
    rdmx_list_del(&ep->batch_link);
    ep->batch_n = 0;
    ep->batch_len = 0;
    ep->batch_more = 0;
    if (ep->status != RDMX_OK || ep->tep == NULL) {
        w->stats.msgs_dropped += n;
        return;
    }
    /* The buffer leaves the endpoint while it is sent: a message made
     * meanwhile (the transport may progress) opens a new one. */
    ep->batch = NULL;
    st = send_batch(ep, b, len, n);
    if (st != RDMX_INPROGRESS) { /* (the buffer is still ours) */
        if (ep->batch == NULL)
            ep->batch = b;
        else
            free(b);
    }
    if (st >= RDMX_OK) /* (RDMX_OK or RDMX_INPROGRESS) */
        return;
    /* Its senders were told their messages left: the connection cannot go
     * on without them (its calls fail or are retried). */
    w->stats.msgs_dropped += n;
    if (ep->status == RDMX_OK) {
        char why[200];

        snprintf(why, sizeof(why), "%s", rdmx_error_detail());
        rdmx__ep_fail(ep, st);
        rdmx_debug("ep %p (%s): a batch of %u messages lost: %s", (void *)ep,
                   ep->peer, n, why);
    }
}

void rdmx__batch_send_all(rdmx_worker_t *w)
{
    rdmx_list_t *e;

    while ((e = w->batched.next) != &w->batched)
        rdmx__batch_send(rdmx_container_of(e, rdmx_ep_t, batch_link));
}

void rdmx__batch_free(rdmx_ep_t *ep)
{
    if (ep->batch_n != 0) {
        rdmx_list_del(&ep->batch_link);
        ep->worker->stats.msgs_dropped += ep->batch_n;
        ep->batch_n = 0;
        ep->batch_more = 0;
        ep->batch_len = 0;
    }
    free(ep->batch);
    ep->batch = NULL;
}

rdmx_status_t rdmx__am_batch(rdmx_worker_t *w, rdmx_tep_t *tep,
                             const void *header, size_t hlen, void *data,
                             size_t len, unsigned flags)
{
    const unsigned char *p = data, *end = p + len;
    rdmx_ep_t *ep = tep != NULL ? tep->owner : NULL;

    (void)header;
    if (hlen != 0 || (flags & RDMX_MSG_RNDV) || len == 0 || (len & 7u)) {
        w->stats.proto_errors++;
        return RDMX_OK;
    }
    while (p < end) {
        size_t left = (size_t)(end - p), rh, rl;
        unsigned id;

        /* A record's handler may close the endpoint (and free @tep): the
         * rest goes with it. (Endpoints are freed only between passes.) */
        if (ep != NULL && ep->tep != tep) {
            w->stats.msgs_dropped++;
            return RDMX_OK;
        }
        if (left < REC_HEAD)
            break;
        id = p[0];
        rh = p[1];
        rl = rdmx_get_le32(p + 4);
        if (id < RDMX_MSG_ID_UPPER || id >= RDMX_MSG_ID_MAX || p[2] != 0 ||
            p[3] != 0 || rh > RDMX_OP_HDR_MAX || rh > left - REC_HEAD ||
            rl > left - REC_HEAD - rh || rec_size(rh, rl) > left)
            break;
        /* the data is the batch's: a layer that keeps it copies it */
        (void)rdmx__tp_deliver(w, id, tep, p + REC_HEAD, rh,
                               (void *)(p + REC_HEAD + rh), rl, 0);
        p += rec_size(rh, rl);
    }
    if (p != end)
        w->stats.proto_errors++; /* the rest of a malformed batch */
    return RDMX_OK;
}
