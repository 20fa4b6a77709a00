/*
 * Large messages of the libfabric backend: a receiver-pull rendezvous
 * (docs/FABRIC.md, "Large messages").
 *
 *   sender:   register exactly the message's bytes for remote reads (a
 *             fresh key) -> RTS {core header, length, id, address, key}
 *   receiver: deliver the RTS to the core as a descriptor (RDMX_MSG_RNDV);
 *             recv() pulls with fi_read chunks straight into the receive
 *             buffer, at most OFI_READ_WINDOW in flight -> FIN {id, status}
 *   sender:   FIN -> close the registration, the send completes
 * A descriptor the core does not take, or gives back through release,
 * is answered with FIN(RDMX_ERR_CANCELED) at once. Nothing the sender does
 * writes into the receiver's memory: the core may carry one-sided access
 * by rendezvous (rndv_safe).
 *
 * Ownership: an ofi_rts_t lives from the send until both its FIN (or its
 * endpoint's close) and the core's req_forget; an ofi_rdesc_t from the RTS
 * until the core released it, or its pull ended and the core forgot it.
 * They sit on worker->rts_all and ->rdesc_all meanwhile (freed with the
 * worker).
 */
#include "core/ofi/ofi_int.h"

#include <stdlib.h>
#include <string.h>

/* --- sender
 * -------------------------------------------------------------------- */

static void rts_free(ofi_rts_t *r)
{
    /* (the analyzer loses track of the intrusive lists: rts_free unlinks
     * r, so rdmx__ofi_rndv_cleanup's loop never meets it again) */
    /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
    if (r->mr != NULL)
        fi_close(&r->mr->fid);
    rdmx_list_del(&r->link);
    rdmx_list_del(&r->wlink);
    free(r);
}

/* Register [@data, @data + @length) for remote reads only, under a key
 * of our choosing unless the provider chooses (FI_MR_PROV_KEY). */
static rdmx_status_t rts_register(ofi_worker_t *ow, const void *data,
                                  size_t length, struct fid_mr **mr_p,
                                  uint64_t *key_p)
{
    ofi_ctx_t *oc = ow->ctx;

    if (oc->mr_mode & FI_MR_RAW)
        return rdmx__error(RDMX_ERR_UNSUPPORTED,
                           "ofi %s: raw memory keys (FI_MR_RAW) are not "
                           "supported for large messages",
                           oc->prov);
    /* (an error names the provider and the size) */
    return rdmx__ofi_mr_reg(oc, ow, data, length, FI_REMOTE_READ, mr_p, key_p);
}

rdmx_status_t rdmx__ofi_rts_send(ofi_ep_t *ep, unsigned id, const void *hdr,
                                 size_t hlen, const void *data, size_t length,
                                 rdmx_op_t *op, void **req_p)
{
    ofi_worker_t *ow = ep->worker;
    unsigned char body[RDMX_OFI_RTS_SIZE];
    rdmx_status_t st;
    uint64_t key = 0;
    ofi_rts_t *r;

    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "send: out of memory");
    r->c.kind = OFI_CTX_RTS;
    r->worker = ow;
    r->ep = ep;
    r->op = op;
    r->id = ++ow->next_rndv;
    rdmx_list_init(&r->link);
    rdmx_list_init(&r->wlink);
    if ((st = rts_register(ow, data, length, &r->mr, &key)) != RDMX_OK) {
        free(r);
        return st;
    }
    rdmx__ofi_rts_pack(
        body, length, r->id,
        (ow->ctx->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)data : 0,
        key);
    st = rdmx__ofi_frame_send(ep, RDMX_OFI_FRAME_RTS, id, hdr, hlen, body,
                              sizeof(body), 0, NULL, NULL);
    if (st != RDMX_OK) {
        rts_free(r);
        return st;
    }
    rdmx_list_insert_tail(&ep->rts, &r->link);
    rdmx_list_insert_tail(&ow->rts_all, &r->wlink);
    if (op == NULL) {
        r->forgotten = 1; /* nobody waits: freed at its FIN */
        return RDMX_OK;
    }
    *req_p = r;
    return RDMX_INPROGRESS;
}

/* @r's message is done with @st: tell the core, free it once forgotten. */
static void rts_finish(ofi_rts_t *r, rdmx_status_t st)
{
    rdmx_op_t *op = r->op;

    if (r->mr != NULL) {
        fi_close(&r->mr->fid);
        r->mr = NULL;
    }
    rdmx_list_del(&r->link);
    r->done = 1;
    if (r->forgotten) {
        if (op != NULL)
            rdmx__tp_done(op, r, st, 0);
        rts_free(r);
        return;
    }
    rdmx__tp_done(op, r, st, 0); /* (calls req_forget, now or later) */
}

void rdmx__ofi_on_fin(ofi_worker_t *ow, ofi_ep_t *ep, const rdmx_ofi_frame_t *f)
{
    rdmx_list_t *e;

    rdmx_list_for_each(e, &ep->rts)
    {
        ofi_rts_t *r = rdmx_container_of(e, ofi_rts_t, link);
        if (r->id == f->rndv_id) {
            /* Dropped unread by the receiver (CANCELED) still frees the
             * sender's buffer: the send is done. */
            rts_finish(r, f->status == RDMX_ERR_CANCELED
                              ? RDMX_OK
                              : (rdmx_status_t)f->status);
            return;
        }
    }
    ow->w->stats.proto_errors++; /* a FIN for nothing we sent */
}

/* --- receiver
 * ------------------------------------------------------------------ */

static void rdesc_free(ofi_rdesc_t *d)
{
    /* (as rts_free: the lists it unlinks d from end the cleanup loop) */
    /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
    if (d->lmr != NULL)
        fi_close(&d->lmr->fid);
    rdmx_list_del(&d->link);
    rdmx_list_del(&d->qlink);
    rdmx_list_del(&d->wlink);
    free(d);
}

/* FIN(@st) for @d, unless its endpoint is gone. @flags: 0 (queued when
 * the provider pushes back) or RDMX_TP_SEND_NOW (then
 * RDMX_ERR_NO_RESOURCE, nothing sent). */
static rdmx_status_t send_fin(ofi_rdesc_t *d, rdmx_status_t st, unsigned flags)
{
    unsigned char body[RDMX_OFI_FIN_SIZE];
    rdmx_status_t fst;

    if (d->ep == NULL)
        return RDMX_OK;
    rdmx__ofi_fin_pack(body, d->id, (int32_t)st);
    fst = rdmx__ofi_frame_send(d->ep, RDMX_OFI_FRAME_FIN, 0, NULL, 0, body,
                               sizeof(body), flags, NULL, NULL);
    if (fst == RDMX_ERR_NO_RESOURCE && (flags & RDMX_TP_SEND_NOW))
        return fst;
    if (fst != RDMX_OK)
        rdmx_debug("ofi: FIN of a large message not sent: %s",
                   rdmx_error_detail());
    return RDMX_OK;
}

void rdmx__ofi_on_rts(ofi_worker_t *ow, ofi_ep_t *ep, const rdmx_ofi_frame_t *f)
{
    ofi_rdesc_t *d = calloc(1, sizeof(*d));

    if (d == NULL) {
        unsigned char body[RDMX_OFI_FIN_SIZE];
        rdmx__ofi_fin_pack(body, f->rndv_id, RDMX_ERR_NO_MEMORY);
        rdmx__ofi_frame_send(ep, RDMX_OFI_FRAME_FIN, 0, NULL, 0, body,
                             sizeof(body), 0, NULL, NULL);
        return;
    }
    d->c.kind = OFI_CTX_RDESC;
    d->worker = ow;
    d->ep = ep;
    d->peer = ep->peer;
    d->id = f->rndv_id;
    d->raddr = f->raddr;
    d->key = f->key;
    d->length = f->length;
    rdmx_list_init(&d->qlink);
    for (unsigned i = 0; i < OFI_READ_WINDOW; i++) {
        d->reads[i].c.kind = OFI_CTX_READ;
        d->reads[i].d = d;
    }
    rdmx_list_insert_tail(&ep->rdescs, &d->link);
    rdmx_list_insert_tail(&ow->rdesc_all, &d->wlink);
    if (rdmx__tp_deliver(ow->w, f->id, &ep->tep, f->hdr, f->hlen, d,
                         (size_t)f->length, RDMX_MSG_RNDV) == RDMX_INPROGRESS)
        return; /* the core took it: recv or release follows */
    send_fin(d, RDMX_ERR_CANCELED, 0);
    rdesc_free(d);
}

/* The pull of @d ended (every read back): FIN, then tell the core.
 * The receive completes only once the provider took the FIN: a caller
 * whose blocking receive returned may not progress its worker again for
 * long, and until the FIN leaves, the sender keeps its buffer (a KV
 * server, the value). When the provider pushes back (or sends queued
 * before it wait), @d waits on worker->pulls and this runs again at the
 * next progress. */
static void pull_finish(ofi_rdesc_t *d)
{
    rdmx_op_t *op = d->op;
    rdmx_status_t st = d->status;

    if (send_fin(d, st, RDMX_TP_SEND_NOW) == RDMX_ERR_NO_RESOURCE) {
        rdmx_list_del(&d->qlink);
        rdmx_list_insert_tail(&d->worker->pulls, &d->qlink);
        return;
    }
    if (d->lmr != NULL) {
        fi_close(&d->lmr->fid);
        d->lmr = NULL;
    }
    rdmx_list_del(&d->link);
    rdmx_list_del(&d->qlink);
    d->done = 1;
    if (d->forgotten) {
        rdmx__tp_done(op, d, st, d->want);
        rdesc_free(d);
        return;
    }
    rdmx__tp_done(op, d, st, d->want);
}

/* Issue reads while the window has room; -FI_EAGAIN parks @d on
 * worker->pulls for the next progress. */
static void pull_issue(ofi_rdesc_t *d)
{
    ofi_worker_t *ow = d->worker;

    rdmx_list_del(&d->qlink);
    while (d->status == RDMX_OK && d->issued < d->want &&
           d->inflight < OFI_READ_WINDOW) {
        ofi_read_t *rd = NULL;
        size_t n = d->want - d->issued;
        uint64_t raddr = d->raddr + d->issued;
        ssize_t ret;

        for (unsigned i = 0; i < OFI_READ_WINDOW && rd == NULL; i++)
            if (d->reads[i].len == 0)
                rd = &d->reads[i];
        if (n > ow->ctx->chunk)
            n = ow->ctx->chunk;
        if (d->ep == NULL) {
            d->status = RDMX_ERR_CANCELED;
            break;
        }
        ret = fi_read(ow->ep, d->buf + d->issued, n, d->ldesc, d->peer->fi_addr,
                      raddr, d->key, &rd->c.fctx);
        if (ret == -FI_EAGAIN) {
            rdmx_list_insert_tail(&ow->pulls, &d->qlink);
            return;
        }
        if (ret != 0) {
            d->status = rdmx__error(rdmx__ofi_status((int)ret),
                                    "ofi %s: read of a large message: %s",
                                    ow->ctx->prov, fi_strerror((int)-ret));
            break;
        }
        rd->len = n;
        d->issued += n;
        d->inflight++;
        rdmx__ofi_posted(ow, d->peer);
    }
    if (d->inflight == 0 && (d->status != RDMX_OK || d->issued == d->want))
        pull_finish(d);
}

void rdmx__ofi_read_done(ofi_read_t *rd, rdmx_status_t st)
{
    ofi_rdesc_t *d = rd->d;

    d->inflight--;
    rdmx__ofi_peer_io_done(d->worker, d->peer);
    d->got += rd->len;
    rd->len = 0;
    if (st != RDMX_OK && d->status == RDMX_OK)
        d->status = st;
    pull_issue(d);
}

rdmx_status_t rdmx__ofi_recv(void *tw, void *desc, void *buf, size_t length,
                             void *tmr, rdmx_op_t *op, void **req_p)
{
    ofi_worker_t *ow = tw;
    ofi_rdesc_t *d = desc;

    d->op = op;
    d->buf = buf;
    d->want = length < d->length ? length : (size_t)d->length;
    d->pulling = 1;
    if (d->want != 0 && (ow->ctx->mr_mode & FI_MR_LOCAL)) {
        d->ldesc = rdmx__ofi_mr_desc(ow, tmr); /* (a region's, if any) */
        if (d->ldesc == NULL &&
            rdmx__ofi_mr_reg(ow->ctx, ow, buf, d->want, FI_READ, &d->lmr,
                             NULL) != RDMX_OK) {
            send_fin(d, RDMX_ERR_NO_MEMORY, 0);
            rdesc_free(d);
            return rdmx__error(RDMX_ERR_NO_MEMORY,
                               "ofi %s: cannot register %zu bytes to "
                               "receive",
                               ow->ctx->prov, length);
        }
        if (d->lmr != NULL)
            d->ldesc = fi_mr_desc(d->lmr);
    }
    if (d->want == 0 || d->ep == NULL) {
        rdmx_status_t st = d->ep == NULL ? RDMX_ERR_CANCELED : RDMX_OK;
        send_fin(d, st, 0);
        rdesc_free(d);
        return st == RDMX_OK ? RDMX_OK
                             : rdmx__error(st, "receive: connection closed");
    }
    d->forgotten = 0;
    *req_p = d;
    pull_issue(d);
    return RDMX_INPROGRESS;
}

void rdmx__ofi_rdesc_release(ofi_rdesc_t *d)
{
    send_fin(d, RDMX_ERR_CANCELED, 0);
    rdesc_free(d);
}

/* req_forget of a large message's request: 1 when @req was one. */
int rdmx__ofi_rndv_forget(void *req)
{
    ofi_opctx_t *c = req;

    if (c->kind == OFI_CTX_RTS) {
        ofi_rts_t *r = req;
        if (r->done)
            rts_free(r);
        else
            r->forgotten = 1;
        return 1;
    }
    if (c->kind == OFI_CTX_RDESC) {
        ofi_rdesc_t *d = req;
        if (d->done)
            rdesc_free(d);
        else
            d->forgotten = 1;
        return 1;
    }
    return 0;
}

/* Retry parked pulls; finish sends whose endpoint closed. */
unsigned rdmx__ofi_rndv_poll(ofi_worker_t *ow)
{
    unsigned n = 0;
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ow->rts_done)) != NULL) {
        ofi_rts_t *r = rdmx_container_of(e, ofi_rts_t, link);
        rts_finish(r, r->status);
        n++;
    }
    if (!rdmx_list_empty(&ow->pulls)) {
        rdmx_list_t *t;
        rdmx_list_for_each_safe(e, t, &ow->pulls)
        {
            pull_issue(rdmx_container_of(e, ofi_rdesc_t, qlink));
            n++;
        }
    }
    return n;
}

/* @ep closes: its sends end as canceled on the next progress (their
 * registrations close now: the peer reads no more); descriptors forget
 * it (pulls in flight end when their reads come back). */
void rdmx__ofi_ep_drop_rndv(ofi_ep_t *ep)
{
    ofi_worker_t *ow = ep->worker;
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ep->rts)) != NULL) {
        ofi_rts_t *r = rdmx_container_of(e, ofi_rts_t, link);
        if (r->mr != NULL) {
            fi_close(&r->mr->fid);
            r->mr = NULL;
        }
        r->ep = NULL;
        r->status = RDMX_ERR_CANCELED;
        rdmx_list_insert_tail(&ow->rts_done, &r->link);
    }
    while ((e = rdmx_list_pop(&ep->rdescs)) != NULL)
        rdmx_container_of(e, ofi_rdesc_t, link)->ep = NULL;
}

/* The worker goes (its endpoint closed first): free everything left. */
void rdmx__ofi_rndv_cleanup(ofi_worker_t *ow)
{
    rdmx_list_t *e;

    while ((e = ow->rts_all.next) != &ow->rts_all)
        rts_free(rdmx_container_of(e, ofi_rts_t, wlink));
    while ((e = ow->rdesc_all.next) != &ow->rdesc_all)
        rdesc_free(rdmx_container_of(e, ofi_rdesc_t, wlink));
}
