/*
 * Messages of the libfabric backend: frames out (copied into registered
 * requests, queued while the provider says -FI_EAGAIN), receive buffers,
 * the completion queue, and delivery to the core with the sender's
 * endpoint found from the provider's source address and the frame's ids
 * (docs/FABRIC.md, "Frames" and "Pairing").
 *
 * Who owns what: a request belongs to the worker's free list, the pending
 * queue (not yet taken by the provider), the provider (posted), or the
 * done list (finished outside progress: its endpoint closed while it was
 * queued). A request with an operation is freed once both its completion
 * came and the core forgot it (req_forget); one without, at completion.
 * A receive buffer is the provider's while posted, the core's while a
 * handler holds its data (release gives it back), else waits for repost.
 */
#include "core/ofi/ofi_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OFI_POLL_BATCH 16
#define OFI_POLL_MAX   64 /* completions handled per progress call */

/* --- buffers
 * -------------------------------------------------------------------- */

/* Register @len bytes at @buf for local sends and receives, only when
 * the provider asks for FI_MR_LOCAL (else nothing: *@mr_p NULL). */
static rdmx_status_t local_mr(ofi_worker_t *ow, void *buf, size_t len,
                              struct fid_mr **mr_p, void **desc_p)
{
    rdmx_status_t st;

    *mr_p = NULL;
    *desc_p = NULL;
    if (!(ow->ctx->mr_mode & FI_MR_LOCAL))
        return RDMX_OK;
    st = rdmx__ofi_mr_reg(ow->ctx, ow, buf, len, FI_SEND | FI_RECV, mr_p, NULL);
    if (st != RDMX_OK)
        return st;
    *desc_p = fi_mr_desc(*mr_p);
    return RDMX_OK;
}

static void rx_post(ofi_worker_t *ow, unsigned i)
{
    ofi_rxbuf_t *rx = &ow->rx[i];
    ssize_t ret;

    ret = fi_recv(ow->ep, ow->rx_slab + (size_t)i * ow->ctx->frame_max,
                  ow->ctx->frame_max, ow->rx_desc, FI_ADDR_UNSPEC, &rx->c.fctx);
    if (ret == 0) {
        rx->posted = 1;
        ow->rx_posted++;
    }
}

/* Post every receive buffer that is neither posted nor held. */
void rdmx__ofi_rx_repost(ofi_worker_t *ow)
{
    for (unsigned i = 0; i < ow->rx_count; i++)
        if (!ow->rx[i].posted && !ow->rx[i].held)
            rx_post(ow, i);
}

rdmx_status_t rdmx__ofi_rx_init(ofi_worker_t *ow)
{
    size_t n = ow->ctx->info->rx_attr->size;
    rdmx_status_t st;

    ow->rx_count = n < OFI_RX_BUFS ? (unsigned)n : OFI_RX_BUFS;
    if (ow->rx_count < 2 * OFI_RX_RESERVE)
        ow->rx_count = 2 * OFI_RX_RESERVE;
    if (posix_memalign((void **)&ow->rx_slab, 4096,
                       (size_t)ow->rx_count * ow->ctx->frame_max) != 0) {
        ow->rx_slab = NULL;
        return rdmx__error(RDMX_ERR_NO_MEMORY, "worker: out of memory");
    }
    st = local_mr(ow, ow->rx_slab, (size_t)ow->rx_count * ow->ctx->frame_max,
                  &ow->rx_mr, &ow->rx_desc);
    if (st != RDMX_OK)
        return st;
    for (unsigned i = 0; i < ow->rx_count; i++)
        ow->rx[i].c.kind = OFI_CTX_RX;
    rdmx__ofi_rx_repost(ow);
    if (ow->rx_posted == 0)
        return rdmx__error(RDMX_ERR_IO, "ofi %s: cannot post receives",
                           ow->ctx->prov);
    return RDMX_OK;
}

/* Free the buffers and every request (the provider let go of them: the
 * endpoint is closed, or was never enabled). */
void rdmx__ofi_bufs_cleanup(ofi_worker_t *ow)
{
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ow->chunks)) != NULL) {
        ofi_chunk_t *c = rdmx_container_of(e, ofi_chunk_t, link);
        if (c->mr != NULL)
            fi_close(&c->mr->fid);
        free(c->bytes);
        free(c);
    }
    if (ow->rx_mr != NULL)
        fi_close(&ow->rx_mr->fid);
    free(ow->rx_slab);
    ow->rx_mr = NULL;
    ow->rx_slab = NULL;
}

/* A free request; allocates (and registers) a chunk when none is left.
 * NULL when memory or registration fails. */
static ofi_req_t *req_get(ofi_worker_t *ow)
{
    rdmx_list_t *e = rdmx_list_pop(&ow->free);
    ofi_chunk_t *c;
    void *desc;

    if (e == NULL) {
        c = calloc(1, sizeof(*c));
        if (c == NULL)
            return NULL;
        if (posix_memalign((void **)&c->bytes, 64,
                           OFI_REQ_CHUNK * ow->ctx->frame_max) != 0) {
            free(c);
            return NULL;
        }
        if (local_mr(ow, c->bytes, OFI_REQ_CHUNK * ow->ctx->frame_max, &c->mr,
                     &desc) != RDMX_OK) {
            free(c->bytes);
            free(c);
            return NULL;
        }
        for (unsigned i = 0; i < OFI_REQ_CHUNK; i++) {
            ofi_req_t *r = &c->reqs[i];
            r->c.kind = OFI_CTX_REQ;
            r->worker = ow;
            r->desc = desc;
            r->buf = c->bytes + (size_t)i * ow->ctx->frame_max;
            rdmx_list_init(&r->link);
            rdmx_list_insert_tail(&ow->free, &r->qlink);
        }
        rdmx_list_insert_tail(&ow->chunks, &c->link);
        e = rdmx_list_pop(&ow->free);
    }
    return rdmx_container_of(e, ofi_req_t, qlink);
}

static void req_put(ofi_req_t *r)
{
    rdmx_list_del(&r->link);
    r->state = OFI_REQ_FREE;
    r->ep = NULL;
    r->peer = NULL;
    r->op = NULL;
    r->forgotten = 0;
    rdmx_list_insert_tail(&r->worker->free, &r->qlink);
}

/* @r is finished with @st: tell the core (if an operation waits), then
 * free it unless the core still has to forget it. Touches nothing of @r
 * after the core was told, unless it had already been forgotten. */
static void req_finish(ofi_req_t *r, rdmx_status_t st)
{
    rdmx_op_t *op = r->op;

    rdmx_list_del(&r->link);
    if (r->state == OFI_REQ_POSTED)
        rdmx__ofi_peer_io_done(r->worker, r->peer);
    r->state = OFI_REQ_DONE;
    if (op == NULL || r->forgotten) {
        if (op != NULL)
            rdmx__tp_done(op, r, st, 0);
        req_put(r);
        return;
    }
    rdmx__tp_done(op, r, st, 0); /* (calls req_forget, now or later) */
}

void rdmx__ofi_req_forget(void *req)
{
    ofi_req_t *r = req;

    if (rdmx__ofi_rndv_forget(req) || rdmx__ofi_rma_forget(req))
        return;
    if (r->state == OFI_REQ_DONE)
        req_put(r);
    else
        r->forgotten = 1;
}

/* @ep closes: its queued requests finish as canceled on the next
 * progress; those the provider holds forget their endpoint. */
void rdmx__ofi_ep_drop_reqs(ofi_ep_t *ep)
{
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ep->reqs)) != NULL) {
        ofi_req_t *r = rdmx_container_of(e, ofi_req_t, link);
        r->ep = NULL;
        if (r->state == OFI_REQ_PENDING) {
            rdmx_list_del(&r->qlink);
            r->status = RDMX_ERR_CANCELED;
            rdmx_list_insert_tail(&ep->worker->done, &r->qlink);
        }
    }
}

/* --- sending
 * -------------------------------------------------------------------- */

static ssize_t req_post(ofi_req_t *r)
{
    return fi_send(r->worker->ep, r->buf, r->len, r->desc, r->dest, &r->c.fctx);
}

/* Retry queued requests in order until the provider pushes back. */
static unsigned retry_pending(ofi_worker_t *ow)
{
    unsigned n = 0;
    rdmx_list_t *e;

    while ((e = ow->pending.next) != &ow->pending) {
        ofi_req_t *r = rdmx_container_of(e, ofi_req_t, qlink);
        ssize_t ret = req_post(r);
        if (ret == -FI_EAGAIN)
            break;
        rdmx_list_del(&r->qlink);
        n++;
        if (ret == 0) {
            r->state = OFI_REQ_POSTED;
            rdmx__ofi_posted(ow, r->peer);
            continue;
        }
        rdmx__error(rdmx__ofi_status((int)ret), "ofi %s: send: %s",
                    ow->ctx->prov, fi_strerror((int)-ret));
        req_finish(r, rdmx__ofi_status((int)ret));
    }
    return n;
}

/* Send one frame of @kind: the frame header, @hlen bytes of @hdr and
 * @length bytes of @data copied into a request. RDMX_TP_SEND_NOW: only if
 * the provider takes it at once. */
rdmx_status_t rdmx__ofi_frame_send(ofi_ep_t *ep, unsigned kind, unsigned id,
                                   const void *hdr, size_t hlen,
                                   const void *data, size_t length,
                                   unsigned flags, rdmx_op_t *op, void **req_p)
{
    ofi_worker_t *ow = ep->worker;
    ofi_req_t *r;
    ssize_t ret;

    if (!rdmx_list_empty(&ow->pending)) {
        if (flags & RDMX_TP_SEND_NOW)
            return RDMX_ERR_NO_RESOURCE;
    } else if (RDMX_OFI_FRAME_SIZE + hlen + length <= ow->ctx->inject_max) {
        /* Small: copied by the provider at once, no completion. */
        unsigned char b[OFI_INJECT_MAX];
        size_t n = RDMX_OFI_FRAME_SIZE + hlen + length;
        rdmx__ofi_frame_pack(b, kind, id, hlen, ep->id, ep->remote);
        if (hlen != 0)
            memcpy(b + RDMX_OFI_FRAME_SIZE, hdr, hlen);
        if (length != 0)
            memcpy(b + RDMX_OFI_FRAME_SIZE + hlen, data, length);
        ret = fi_inject(ow->ep, b, n, ep->peer->fi_addr);
        if (ret == 0) {
            rdmx__ofi_injected(ow, ep->peer);
            return RDMX_OK;
        }
        if (ret != -FI_EAGAIN)
            return rdmx__error(rdmx__ofi_status((int)ret), "ofi %s: send: %s",
                               ow->ctx->prov, fi_strerror((int)-ret));
        /* (-FI_EAGAIN: queued as a request below) */
    }
    r = req_get(ow);
    if (r == NULL)
        return (flags & RDMX_TP_SEND_NOW)
                   ? RDMX_ERR_NO_RESOURCE
                   : rdmx__error(RDMX_ERR_NO_MEMORY, "send: out of memory");
    rdmx__ofi_frame_pack(r->buf, kind, id, hlen, ep->id, ep->remote);
    if (hlen != 0)
        memcpy(r->buf + RDMX_OFI_FRAME_SIZE, hdr, hlen);
    if (length != 0)
        memcpy(r->buf + RDMX_OFI_FRAME_SIZE + hlen, data, length);
    r->len = RDMX_OFI_FRAME_SIZE + hlen + length;
    r->dest = ep->peer->fi_addr;
    r->ep = ep;
    r->peer = ep->peer;
    r->op = (flags & RDMX_TP_SEND_NOW) ? NULL : op;
    rdmx_list_insert_tail(&ep->reqs, &r->link);
    if (!rdmx_list_empty(&ow->pending)) {
        ret = -FI_EAGAIN; /* behind the queue: messages keep their order */
    } else {
        ret = req_post(r);
        if (ret == -FI_EAGAIN && (flags & RDMX_TP_SEND_NOW)) {
            req_put(r);
            return RDMX_ERR_NO_RESOURCE;
        }
    }
    if (ret == -FI_EAGAIN) {
        r->state = OFI_REQ_PENDING;
        rdmx_list_insert_tail(&ow->pending, &r->qlink);
    } else if (ret != 0) {
        req_put(r);
        return rdmx__error(rdmx__ofi_status((int)ret), "ofi %s: send: %s",
                           ow->ctx->prov, fi_strerror((int)-ret));
    } else {
        r->state = OFI_REQ_POSTED;
        rdmx__ofi_posted(ow, r->peer);
    }
    if (r->op == NULL)
        return RDMX_OK; /* freed when it completes */
    *req_p = r;
    return RDMX_INPROGRESS;
}

/* A message: one EAGER frame when it fits, else a large message the
 * receiver pulls (ofi_rndv.c). */
rdmx_status_t rdmx__ofi_send(rdmx_tep_t *tep, unsigned id, const void *hdr,
                             size_t hlen, const void *data, size_t length,
                             void *tmr, unsigned flags, rdmx_op_t *op,
                             void **req_p)
{
    ofi_ep_t *ep = (ofi_ep_t *)tep;
    ofi_worker_t *ow = ep->worker;

    (void)tmr;
    if (hlen > RDMX_OFI_FRAME_HDR_MAX || id >= RDMX_MSG_ID_MAX)
        return rdmx__error(RDMX_ERR_INVALID, "send: header of %zu bytes", hlen);
    if (id == RDMX_AM_BIND)
        ep->sent_bind = 1;
    if (length <= ow->ctx->eager_max)
        return rdmx__ofi_frame_send(ep, RDMX_OFI_FRAME_EAGER, id, hdr, hlen,
                                    data, length, flags, op, req_p);
    if (flags & RDMX_TP_SEND_NOW)
        return RDMX_ERR_NO_RESOURCE; /* (not at once: the caller queues) */
    if (flags & RDMX_TP_SEND_EAGER)
        return rdmx__error(RDMX_ERR_TOO_BIG,
                           "ofi %s: %zu bytes cannot go with the message "
                           "(at most %zu)",
                           ow->ctx->prov, length, ow->ctx->eager_max);
    return rdmx__ofi_rts_send(ep, id, hdr, hlen, data, length, op, req_p);
}

/* --- receiving
 * ------------------------------------------------------------------- */

/* Which of our endpoints a frame from @src is for (docs/FABRIC.md,
 * "Pairing"); NULL to drop it, counting why. */
static ofi_ep_t *frame_ep(ofi_worker_t *ow, const rdmx_ofi_frame_t *f,
                          fi_addr_t src)
{
    ofi_peer_t *peer = rdmx__ofi_peer_by_addr(ow, src);
    ofi_ep_t *ep, *best = NULL;
    rdmx_list_t *e;

    if (peer == NULL) {
        ow->w->stats.proto_errors++; /* from no worker we know */
        return NULL;
    }
    if (f->dst != 0) {
        ep = rdmx__ofi_ep_lookup(ow, f->dst);
        if (ep == NULL || ep->peer != peer) {
            ow->w->stats.msgs_dropped++; /* (closed already) */
            return NULL;
        }
        if (ep->remote == 0) {
            ep->remote = f->src; /* the answer to our first message */
        } else if (ep->remote != f->src) {
            ow->w->stats.proto_errors++;
            return NULL;
        }
        return ep;
    }
    /* A connection's first message: only BIND, to the oldest endpoint
     * toward that worker still unpaired (the core trades endpoints by the
     * token inside, as for UCX's pairing). An endpoint that sent a BIND
     * itself is a client's: never the target, even toward this very
     * worker. */
    if (f->id != RDMX_AM_BIND || f->kind != RDMX_OFI_FRAME_EAGER) {
        ow->w->stats.proto_errors++;
        return NULL;
    }
    rdmx_list_for_each(e, &ow->eps)
    {
        ep = rdmx_container_of(e, ofi_ep_t, link);
        if (ep->peer == peer && ep->remote == 0 && !ep->sent_bind) {
            best = ep;
            break;
        }
    }
    if (best == NULL) {
        ow->w->stats.proto_errors++;
        return NULL;
    }
    best->remote = f->src;
    return best;
}

/* A BIND paired endpoint @id with its sender (frame_ep) before the core
 * read the token inside. If the core refused it (a wrong magic or token),
 * the endpoint is unpaired again, so that the connection's own BIND still
 * finds it: a forged BIND costs a counter, not the connection. */
static void bind_settled(ofi_worker_t *ow, uint32_t id)
{
    ofi_ep_t *ep = rdmx__ofi_ep_lookup(ow, id);

    if (ep != NULL && (ep->tep.owner == NULL || !ep->tep.owner->bound))
        ep->remote = 0;
}

static void on_recv(ofi_worker_t *ow, ofi_rxbuf_t *rx, size_t len,
                    fi_addr_t src)
{
    unsigned i = (unsigned)(rx - ow->rx);
    unsigned char *buf = ow->rx_slab + (size_t)i * ow->ctx->frame_max;
    rdmx_ofi_frame_t f;
    unsigned flags = 0;
    ofi_ep_t *ep;

    rx->posted = 0;
    ow->rx_posted--;
    if (len > ow->ctx->frame_max || rdmx__ofi_frame_parse(buf, len, &f) != 0) {
        ow->w->stats.proto_errors++;
        rx_post(ow, i);
        return;
    }
    ep = frame_ep(ow, &f, src);
    if (ep == NULL || f.kind != RDMX_OFI_FRAME_EAGER) {
        /* (the RTS's header and the FIN's body are read in the call) */
        if (ep != NULL && f.kind == RDMX_OFI_FRAME_RTS)
            rdmx__ofi_on_rts(ow, ep, &f);
        else if (ep != NULL)
            rdmx__ofi_on_fin(ow, ep, &f);
        rx_post(ow, i);
        return;
    }
    if (f.id == RDMX_AM_NOTIFY && f.len == 8) {
        rdmx__ofi_on_notify(ow, ep, &f); /* (joined with its write) */
        rx_post(ow, i);
        return;
    }
    if (f.dst == 0) { /* (a BIND: the only frame frame_ep pairs by) */
        uint32_t id = ep->id;

        rdmx__tp_deliver(ow->w, f.id, &ep->tep, f.hdr, f.hlen, (void *)f.data,
                         f.len, 0);
        bind_settled(ow, id);
        rx_post(ow, i);
        return;
    }
    /* Lend the buffer only while enough others stay posted. */
    if (ow->hold[f.id] && ow->rx_posted >= OFI_RX_RESERVE)
        flags |= RDMX_MSG_HOLDABLE;
    if (rdmx__tp_deliver(ow->w, f.id, &ep->tep, f.hdr, f.hlen, (void *)f.data,
                         f.len, flags) == RDMX_INPROGRESS &&
        (flags & RDMX_MSG_HOLDABLE)) {
        rx->held = 1;
        return;
    }
    rx_post(ow, i);
}

void rdmx__ofi_release(void *tw, void *data)
{
    ofi_worker_t *ow = tw;
    unsigned char *p = data;
    size_t span = (size_t)ow->rx_count * ow->ctx->frame_max;
    unsigned i;

    /* (data starts after a frame header: p - 1 lies in its own buffer) */
    if (p <= ow->rx_slab || p > ow->rx_slab + span) {
        if (p != NULL && ((ofi_opctx_t *)data)->kind == OFI_CTX_RDESC)
            rdmx__ofi_rdesc_release(data); /* a large message not pulled */
        return;
    }
    i = (unsigned)((size_t)(p - 1 - ow->rx_slab) / ow->ctx->frame_max);
    if (!ow->rx[i].held)
        return;
    ow->rx[i].held = 0;
    rx_post(ow, i);
}

/* A completion error: tied to its request when it names one (the
 * operation fails with the provider's words); a connection-level error
 * fails every endpoint toward that peer. */
static void on_error(ofi_worker_t *ow)
{
    char data[256], detail[256];
    struct fi_cq_err_entry e = {.err_data = data,
                                .err_data_size = sizeof(data)};
    ofi_opctx_t *c;
    rdmx_status_t st;

    if (fi_cq_readerr(ow->cq, &e, 0) != 1)
        return;
    st = rdmx__ofi_status(e.err);
    c = e.op_context;
    detail[0] = '\0';
    fi_cq_strerror(ow->cq, e.prov_errno, e.err_data, detail, sizeof(detail));
    if (c == NULL) {
        ow->tp_errors++;
        rdmx_debug("ofi %s: completion error of no request: %s (%s)",
                   ow->ctx->prov, fi_strerror(e.err), detail);
        return;
    }
    if (c->kind == OFI_CTX_RX) {
        ofi_rxbuf_t *rx = (ofi_rxbuf_t *)c;
        rx->posted = 0;
        ow->rx_posted--;
        if (e.err != FI_ECANCELED)
            ow->w->stats.proto_errors++; /* (a frame too long: dropped) */
        return;
    }
    if (c->kind == OFI_CTX_READ) {
        ofi_read_t *rd = (ofi_read_t *)c;
        rdmx__error(st,
                    "ofi %s: read of a large message failed: %s (%s, "
                    "prov_errno %d)",
                    ow->ctx->prov, fi_strerror(e.err), detail, e.prov_errno);
        rdmx__ofi_read_done(rd, st);
        return;
    }
    if (c->kind == OFI_CTX_PIECE) {
        ofi_piece_t *p = (ofi_piece_t *)c;
        char why[640];
        snprintf(why, sizeof(why),
                 "ofi %s: one-sided operation failed: %s (%s, prov_errno %d)",
                 ow->ctx->prov, fi_strerror(e.err), detail, e.prov_errno);
        rdmx__error(st, "%s", why);
        if (p->r->ep != NULL && st != RDMX_ERR_CANCELED &&
            st != RDMX_ERR_DENIED && st != RDMX_ERR_TOO_BIG)
            rdmx__ofi_peer_failed(ow, p->r->ep->peer, st, why);
        rdmx__ofi_piece_done(p, st);
        return;
    }
    {
        ofi_req_t *r = (ofi_req_t *)c;
        char why[640];
        snprintf(why, sizeof(why),
                 "ofi %s: send failed: %s (%s, prov_errno %d)", ow->ctx->prov,
                 fi_strerror(e.err), detail, e.prov_errno);
        rdmx__error(st, "%s", why);
        if (r->ep != NULL && st != RDMX_ERR_CANCELED && st != RDMX_ERR_TOO_BIG)
            rdmx__ofi_peer_failed(ow, r->ep->peer, st, why);
        req_finish(r, st);
    }
}

unsigned rdmx__ofi_poll(ofi_worker_t *ow)
{
    struct fi_cq_data_entry ent[OFI_POLL_BATCH];
    fi_addr_t src[OFI_POLL_BATCH];
    unsigned n = 0;
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ow->done)) != NULL) {
        ofi_req_t *r = rdmx_container_of(e, ofi_req_t, qlink);
        req_finish(r, r->status);
        n++;
    }
    if (!rdmx_list_empty(&ow->pending))
        n += retry_pending(ow);
    n += rdmx__ofi_rndv_poll(ow); /* (after: a parked FIN may go now) */
    n += rdmx__ofi_rma_poll(ow);
    while (n < OFI_POLL_MAX) {
        ssize_t ret = fi_cq_readfrom(ow->cq, ent, OFI_POLL_BATCH, src);
        if (ret == -FI_EAVAIL) {
            on_error(ow);
            n++;
            continue;
        }
        if (ret <= 0)
            break;
        for (ssize_t i = 0; i < ret; i++) {
            ofi_opctx_t *c = ent[i].op_context;
            if ((ent[i].flags & FI_REMOTE_CQ_DATA) &&
                (ent[i].flags & FI_REMOTE_WRITE)) {
                rdmx__ofi_on_cq_data(ow, ent[i].data); /* (put-with-notify) */
                continue;
            }
            if (c == NULL)
                continue;
            if (c->kind == OFI_CTX_RX)
                on_recv(ow, (ofi_rxbuf_t *)c, ent[i].len, src[i]);
            else if (c->kind == OFI_CTX_READ)
                rdmx__ofi_read_done((ofi_read_t *)c, RDMX_OK);
            else if (c->kind == OFI_CTX_PIECE)
                rdmx__ofi_piece_done((ofi_piece_t *)c, RDMX_OK);
            else
                req_finish((ofi_req_t *)c, RDMX_OK);
        }
        n += (unsigned)ret;
    }
    if (ow->rx_posted < ow->rx_count)
        rdmx__ofi_rx_repost(ow);
    if (n != 0 && ow->bell != NULL)
        rdmx__ofi_bell_awake(ow);
    if (ow->bell_peers != 0 && (n != 0 || ow->inflight != 0))
        rdmx__ofi_bell_ring_all(ow);
    return n;
}
