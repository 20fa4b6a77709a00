/*
 * One-sided operations of the libfabric backend (docs/FABRIC.md,
 * "One-sided access"): put and get as fi_writemsg/fi_read in pieces of at
 * most rma_max bytes (OFI_RMA_WINDOW in flight per operation), 64-bit
 * fetch-add and compare-and-swap as fi_fetch_atomic/fi_compare_atomic,
 * flush, and put-with-notify (a write with remote CQ data joined at the
 * target with its NOTIFY message).
 *
 * Flush makes no provider call: every operation on an endpoint gets a
 * sequence number at issue, and a flush completes once every operation
 * issued before it has completed; it fails with the first failure of a
 * one-sided operation on that endpoint, if any. That is enough because
 * writes carry FI_DELIVERY_COMPLETE where the provider honours it (the
 * completion says the data is at the target), reads and atomics complete
 * only with their answer, and shm's plain writes take its one-sided path
 * (the initiator's process_vm_writev), which completes after the copy.
 *
 * Ownership: an ofi_rma_t comes from the worker's pool at issue and goes
 * back once it is done and the core forgot it (req_forget), or at once
 * when nobody waits (op NULL). It sits on its endpoint's list while not
 * done; closing the endpoint cancels what is not yet issued and lets the
 * pieces in flight come back.
 */
#include "core/ofi/ofi_int.h"

#include "util/endian.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which atomics the provider applies, and whether they are coherent with
 * the owner's CPU atomics (core.h's promise): rxm, shm and efa's
 * emulation apply them in the target's progress with __atomic; NIC
 * atomics (verbs, cxi) are not, so they need RDMX_ATOMICS=transport. */
void rdmx__ofi_rma_init(ofi_ctx_t *oc)
{
    struct fi_atomic_attr aa;
    const char *env = getenv("RDMX_ATOMICS");
    int r1 = -FI_ENOSYS, r2 = -FI_ENOSYS;

    oc->rma_max = oc->chunk;
    /* A write's completion must mean the data is at the target (flush).
     * shm's one-sided path (the initiator's process_vm_writev, taken
     * without FI_DELIVERY_COMPLETE) completes after the copy; with the
     * flag shm takes its slow path through the target's progress, where
     * a window of writes never completed here. Elsewhere: the flag. */
    oc->write_flags = strcmp(oc->prov, "shm") ? FI_DELIVERY_COMPLETE : 0;
    oc->amo_forced = env != NULL && !strcmp(env, "transport");
    /* put-with-notify's token rides as remote CQ data (8 bytes) */
    oc->cq_data = oc->info->domain_attr->cq_data_size >= 8 &&
                  getenv("RDMX_OFI_NO_CQ_DATA") == NULL;
    oc->amo_why[0] = '\0';
    if (oc->one_sided && (oc->info->caps & FI_ATOMIC)) {
        r1 = fi_query_atomic(oc->domain, FI_UINT64, FI_SUM, &aa,
                             FI_FETCH_ATOMIC);
        if (r1 == 0)
            r2 = fi_query_atomic(oc->domain, FI_UINT64, FI_CSWAP, &aa,
                                 FI_COMPARE_ATOMIC);
    }
    if (!oc->one_sided) {
        snprintf(oc->amo_why, sizeof(oc->amo_why),
                 "ofi %s: one-sided access is carried by rdmx", oc->prov);
    } else if (!(oc->info->caps & FI_ATOMIC)) {
        snprintf(oc->amo_why, sizeof(oc->amo_why),
                 "ofi %s: no FI_ATOMIC capability", oc->prov);
    } else if (r1 != 0 || r2 != 0) {
        snprintf(oc->amo_why, sizeof(oc->amo_why),
                 "ofi %s: no FI_ATOMIC %s on FI_UINT64 (fi_query_atomic: %s)",
                 oc->prov, r1 != 0 ? "FI_SUM" : "FI_CSWAP",
                 fi_strerror(r1 != 0 ? -r1 : -r2));
    } else {
        oc->amo_ok = 1;
    }
}

int rdmx__ofi_has_atomics(void *tctx)
{
    ofi_ctx_t *oc = tctx;
    int cpu = strstr(oc->prov, "rxm") != NULL ||
              strstr(oc->prov, "shm") != NULL ||
              strstr(oc->prov, "efa") != NULL;

    if (!oc->one_sided)
        return 0;
    return oc->amo_forced || (oc->amo_ok && cpu);
}

/* --- requests
 * ------------------------------------------------------------------- */

static ofi_rma_t *rma_get(ofi_worker_t *ow)
{
    rdmx_list_t *e = rdmx_list_pop(&ow->rma_free);
    ofi_rma_t *r;

    if (e != NULL) {
        r = rdmx_container_of(e, ofi_rma_t, qlink);
    } else {
        r = calloc(1, sizeof(*r));
        if (r == NULL)
            return NULL;
        r->c.kind = OFI_CTX_RMA;
        r->worker = ow;
        for (unsigned i = 0; i < OFI_RMA_WINDOW; i++) {
            r->pieces[i].c.kind = OFI_CTX_PIECE;
            r->pieces[i].r = r;
        }
        /* (FI_MR_LOCAL: the atomic words are registered once) */
        if ((ow->ctx->mr_mode & FI_MR_LOCAL) &&
            rdmx__ofi_mr_reg(ow->ctx, ow, r->words, sizeof(r->words),
                             FI_READ | FI_WRITE, &r->wmr, NULL) != RDMX_OK) {
            free(r);
            return NULL;
        }
        r->wdesc = r->wmr != NULL ? fi_mr_desc(r->wmr) : NULL;
        rdmx_list_insert_tail(&ow->rma_all, &r->wlink);
    }
    rdmx_list_init(&r->link);
    rdmx_list_init(&r->qlink);
    r->ep = NULL;
    r->peer = NULL;
    r->op = NULL;
    r->buf = NULL;
    r->want = r->issued = r->got = 0;
    r->desc = NULL;
    r->lmr = NULL;
    r->result = NULL;
    r->inflight = 0;
    r->status = RDMX_OK;
    r->done = r->forgotten = r->issuing = r->last_done = 0;
    return r;
}

static void rma_put(ofi_rma_t *r)
{
    if (r->lmr != NULL) {
        fi_close(&r->lmr->fid);
        r->lmr = NULL;
    }
    rdmx_list_del(&r->link);
    rdmx_list_del(&r->qlink);
    rdmx_list_insert_tail(&r->worker->rma_free, &r->qlink);
}

/* Flushes of @ep whose earlier operations all completed are done. */
static void flush_check(ofi_ep_t *ep)
{
    uint64_t lowest = UINT64_MAX;
    rdmx_list_t *e;

    if (!rdmx_list_empty(&ep->rmas))
        lowest = rdmx_container_of(ep->rmas.next, ofi_rma_t, link)->seq;
    while ((e = ep->flushes.next) != &ep->flushes) {
        ofi_rma_t *f = rdmx_container_of(e, ofi_rma_t, link);
        if (f->seq >= lowest)
            break;
        rdmx_list_del(&f->link);
        f->done = 1;
        rdmx__tp_done(f->op, f, ep->rma_status, 0);
        if (f->forgotten)
            rma_put(f);
    }
}

/* @r is over (every piece back): tell the core, free it when nobody
 * waits or the core already forgot it. */
static void rma_finish(ofi_rma_t *r)
{
    ofi_ep_t *ep = r->ep;
    rdmx_op_t *op = r->op;
    rdmx_status_t st = r->status;

    if (r->lmr != NULL) {
        fi_close(&r->lmr->fid);
        r->lmr = NULL;
    }
    rdmx_list_del(&r->link);
    rdmx_list_del(&r->qlink);
    r->done = 1;
    if (ep != NULL && st != RDMX_OK && ep->rma_status == RDMX_OK)
        ep->rma_status = st;
    if (st == RDMX_OK && r->result != NULL)
        *r->result = r->words[2];
    if (r->issuing) {
        /* (inside the call that started it: its return tells) */
    } else if (op == NULL || r->forgotten) {
        if (op != NULL)
            rdmx__tp_done(op, r, st, st == RDMX_OK ? r->want : 0);
        rma_put(r);
    } else {
        rdmx__tp_done(op, r, st, st == RDMX_OK ? r->want : 0);
    }
    if (ep != NULL)
        flush_check(ep);
}

/* Post one piece of @r into @p (@last: a put-with-notify's final piece,
 * which carries its token as remote CQ data); the provider's return. */
static ssize_t piece_post(ofi_rma_t *r, ofi_piece_t *p, size_t off, size_t n,
                          int last)
{
    ofi_worker_t *ow = r->worker;
    fi_addr_t dest = r->peer->fi_addr;

    switch (r->kind) {
    case OFI_RMA_PUT:
    case OFI_RMA_PUTN: {
        struct iovec iov = {.iov_base = r->buf + off, .iov_len = n};
        struct fi_rma_iov riov = {
            .addr = r->raddr + off, .len = n, .key = r->key};
        void *desc = r->desc;
        struct fi_msg_rma msg = {.msg_iov = &iov,
                                 .desc = &desc,
                                 .iov_count = 1,
                                 .addr = dest,
                                 .rma_iov = &riov,
                                 .rma_iov_count = 1,
                                 .context = &p->c.fctx,
                                 .data = r->token};
        uint64_t flags = FI_COMPLETION | ow->ctx->write_flags;
        if (last)
            flags |= FI_REMOTE_CQ_DATA;
        return fi_writemsg(ow->ep, &msg, flags);
    }
    case OFI_RMA_GET:
        return fi_read(ow->ep, r->buf + off, n, r->desc, dest, r->raddr + off,
                       r->key, &p->c.fctx);
    case OFI_RMA_FADD:
        return fi_fetch_atomic(ow->ep, &r->words[0], 1, r->wdesc, &r->words[2],
                               r->wdesc, dest, r->raddr, r->key, FI_UINT64,
                               FI_SUM, &p->c.fctx);
    default: /* OFI_RMA_CSWAP */
        return fi_compare_atomic(ow->ep, &r->words[0], 1, r->wdesc,
                                 &r->words[1], r->wdesc, &r->words[2], r->wdesc,
                                 dest, r->raddr, r->key, FI_UINT64, FI_CSWAP,
                                 &p->c.fctx);
    }
}

/* A put-with-notify's last step, once every other piece is back: the
 * final piece with the token as remote CQ data (the target joins it with
 * the NOTIFY sent at issue), or without cq data the NOTIFY message
 * itself, behind the data. 0, -FI_EAGAIN, or another error. */
static ssize_t putn_last(ofi_rma_t *r, ofi_piece_t *p, size_t off)
{
    ofi_ep_t *ep = r->ep;

    if (ep->worker->ctx->cq_data)
        return piece_post(r, p, off, r->want - off, 1);
    if (rdmx__ofi_frame_send(ep, RDMX_OFI_FRAME_EAGER, RDMX_AM_NOTIFY, r->nhdr,
                             sizeof(r->nhdr), NULL, 0, 0, NULL,
                             NULL) != RDMX_OK)
        return -FI_EIO;
    return 1; /* (nothing in flight for it) */
}

/* Issue pieces while the window has room; -FI_EAGAIN parks @r on
 * worker->rma_wait for the next progress. Finishes @r when nothing is
 * left in flight and nothing more will be issued. A put-with-notify keeps
 * its last step (putn_last) until every other piece is back. */
static void rma_issue(ofi_rma_t *r)
{
    ofi_worker_t *ow = r->worker;
    size_t limit = r->want; /* (bytes of plain pieces) */

    rdmx_list_del(&r->qlink);
    rdmx_list_init(&r->qlink);
    if (r->kind == OFI_RMA_PUTN && ow->ctx->cq_data && r->want != 0)
        limit = r->want - ((r->want - 1) % ow->ctx->rma_max + 1);
    while (r->status == RDMX_OK) {
        ofi_piece_t *p = NULL;
        size_t n = limit - r->issued;
        int last = 0;
        ssize_t ret;

        if (r->issued < limit && r->inflight < OFI_RMA_WINDOW)
            last = 0;
        else if (r->kind == OFI_RMA_PUTN && !r->last_done &&
                 r->issued == limit && r->inflight == 0)
            last = 1;
        else
            break;
        if (r->ep == NULL) {
            r->status = RDMX_ERR_CANCELED;
            break;
        }
        for (unsigned i = 0; i < OFI_RMA_WINDOW && p == NULL; i++)
            if (!r->pieces[i].busy)
                p = &r->pieces[i];
        if (last) {
            n = r->want - limit;
            ret = putn_last(r, p, limit);
        } else {
            if (n > ow->ctx->rma_max)
                n = ow->ctx->rma_max;
            ret = piece_post(r, p, r->issued, n, 0);
        }
        if (ret == -FI_EAGAIN) {
            rdmx_list_insert_tail(&ow->rma_wait, &r->qlink);
            return;
        }
        if (ret < 0) {
            r->status = rdmx__error(rdmx__ofi_status((int)ret),
                                    "ofi %s: one-sided operation: %s",
                                    ow->ctx->prov, fi_strerror((int)-ret));
            break;
        }
        r->issued += n;
        r->last_done |= last;
        if (ret == 1)
            continue; /* (the NOTIFY message: nothing in flight) */
        p->busy = 1;
        p->len = n;
        r->inflight++;
        rdmx__ofi_posted(ow, r->peer);
    }
    if (r->inflight == 0 &&
        (r->status != RDMX_OK ||
         (r->issued == r->want && (r->kind != OFI_RMA_PUTN || r->last_done))))
        rma_finish(r);
}

void rdmx__ofi_piece_done(ofi_piece_t *p, rdmx_status_t st)
{
    ofi_rma_t *r = p->r;

    r->inflight--;
    rdmx__ofi_peer_io_done(r->worker, r->peer);
    r->got += p->len;
    p->busy = 0;
    p->len = 0;
    if (st != RDMX_OK && r->status == RDMX_OK)
        r->status = st;
    rma_issue(r);
}

/* Issue @r from the call that starts it: RDMX_INPROGRESS (the core
 * hears of the end through rdmx__tp_done; *@req_p), or, when it ended at
 * once, its status (the request is freed; the core is not called). */
static rdmx_status_t rma_start_issue(ofi_rma_t *r, void **req_p)
{
    rdmx_status_t st;

    r->issuing = 1;
    rma_issue(r);
    r->issuing = 0;
    if (!r->done) {
        if (r->op == NULL)
            return RDMX_OK; /* (freed when it ends) */
        *req_p = r;
        return RDMX_INPROGRESS;
    }
    st = r->status;
    rma_put(r);
    return st;
}

/* A new operation of @kind on @ep, registered in issue order. */
static ofi_rma_t *rma_start(ofi_ep_t *ep, int kind, rdmx_op_t *op)
{
    ofi_rma_t *r = rma_get(ep->worker);

    if (r == NULL)
        return NULL;
    r->kind = kind;
    r->ep = ep;
    r->peer = ep->peer;
    r->op = op;
    r->seq = ++ep->rma_seq;
    rdmx_list_insert_tail(&ep->rmas, &r->link);
    return r;
}

/* The transport address of [@raddr, @raddr + @length) in @rk's region;
 * RDMX_ERR_OUT_OF_RANGE when it does not lie inside. */
static rdmx_status_t rma_addr(const ofi_rkey_t *rk, uint64_t raddr,
                              size_t length, uint64_t *addr_p)
{
    if (raddr < rk->base || raddr - rk->base > rk->len ||
        length > rk->len - (raddr - rk->base))
        return rdmx__error(RDMX_ERR_OUT_OF_RANGE,
                           "one-sided access outside the remote "
                           "registration");
    *addr_p = rk->virt ? raddr : raddr - rk->base;
    return RDMX_OK;
}

static rdmx_status_t rw(rdmx_tep_t *tep, int kind, void *buf, size_t length,
                        void *tmr, uint64_t raddr, void *trkey, rdmx_op_t *op,
                        void **req_p)
{
    ofi_ep_t *ep = (ofi_ep_t *)tep;
    ofi_worker_t *ow = ep->worker;
    ofi_rkey_t *rk = trkey;
    rdmx_status_t st;
    uint64_t addr = 0;
    ofi_rma_t *r;

    if ((st = rma_addr(rk, raddr, length, &addr)) != RDMX_OK)
        return st;
    r = rma_start(ep, kind, op);
    if (r == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "%s: out of memory",
                           kind == OFI_RMA_PUT ? "put" : "get");
    r->buf = buf;
    r->want = length;
    r->raddr = addr;
    r->key = rk->key;
    r->desc = rdmx__ofi_mr_desc(ow, tmr);
    if (r->desc == NULL && length != 0 && (ow->ctx->mr_mode & FI_MR_LOCAL)) {
        /* (a buffer outside any region: registered for this operation) */
        uint64_t key;
        st = rdmx__ofi_mr_reg(ow->ctx, ow, buf, length,
                              kind == OFI_RMA_PUT ? FI_WRITE : FI_READ, &r->lmr,
                              &key);
        if (st != RDMX_OK) {
            r->op = NULL;
            rma_put(r);
            return st;
        }
        r->desc = fi_mr_desc(r->lmr);
    }
    return rma_start_issue(r, req_p);
}

rdmx_status_t rdmx__ofi_put(rdmx_tep_t *tep, const void *buf, size_t length,
                            void *tmr, uint64_t raddr, void *trkey,
                            rdmx_op_t *op, void **req_p)
{
    return rw(tep, OFI_RMA_PUT, (void *)buf, length, tmr, raddr, trkey, op,
              req_p);
}

rdmx_status_t rdmx__ofi_get(rdmx_tep_t *tep, void *buf, size_t length,
                            void *tmr, uint64_t raddr, void *trkey,
                            rdmx_op_t *op, void **req_p)
{
    return rw(tep, OFI_RMA_GET, buf, length, tmr, raddr, trkey, op, req_p);
}

rdmx_status_t rdmx__ofi_atomic(rdmx_tep_t *tep, int cswap, uint64_t *operand,
                               uint64_t *result, uint64_t raddr, void *trkey,
                               rdmx_op_t *op, void **req_p)
{
    ofi_ep_t *ep = (ofi_ep_t *)tep;
    ofi_ctx_t *oc = ep->worker->ctx;
    ofi_rkey_t *rk = trkey;
    rdmx_status_t st;
    uint64_t addr = 0;
    ofi_rma_t *r;

    if (!oc->amo_ok)
        return rdmx__error(RDMX_ERR_UNSUPPORTED, "%s", oc->amo_why);
    if ((st = rma_addr(rk, raddr, 8, &addr)) != RDMX_OK)
        return st;
    r = rma_start(ep, cswap ? OFI_RMA_CSWAP : OFI_RMA_FADD, op);
    if (r == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "atomic: out of memory");
    /* fetch-add: words[0] is added; compare-and-swap: words[1] is
     * compared, words[0] swapped in. The old value lands in words[2]. */
    if (cswap) {
        r->words[0] = *result;
        r->words[1] = *operand;
    } else {
        r->words[0] = *operand;
    }
    r->words[2] = 0;
    r->want = 8;
    r->raddr = addr;
    r->key = rk->key;
    r->result = result;
    return rma_start_issue(r, req_p);
}

/* Put-with-notify: the data in pieces, then the last one with the token
 * as remote CQ data where the provider carries 8 bytes of it; the
 * NOTIFY, with the token, goes at once as a message (in order behind
 * earlier messages) and the target delivers it to its core once the
 * token's CQ entry came too, which the provider writes after the data.
 * Without cq data: the NOTIFY message goes once every piece is back. */
rdmx_status_t rdmx__ofi_put_notify(rdmx_tep_t *tep, const void *buf,
                                   size_t length, void *tmr, uint64_t raddr,
                                   void *trkey, const void *nhdr, size_t nhlen,
                                   rdmx_op_t *op, void **req_p)
{
    ofi_ep_t *ep = (ofi_ep_t *)tep;
    ofi_worker_t *ow = ep->worker;
    ofi_rkey_t *rk = trkey;
    unsigned char tok[8];
    rdmx_status_t st;
    uint64_t addr = 0;
    ofi_rma_t *r;

    if (nhlen != RDMX_NOTIFY_SIZE)
        return rdmx__error(RDMX_ERR_INVALID, "put_notify: header of %zu bytes",
                           nhlen);
    if ((st = rma_addr(rk, raddr, length, &addr)) != RDMX_OK)
        return st;
    r = rma_start(ep, OFI_RMA_PUTN, op);
    if (r == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "put_notify: out of memory");
    r->buf = (void *)buf;
    r->want = length;
    r->raddr = addr;
    r->key = rk->key;
    memcpy(r->nhdr, nhdr, sizeof(r->nhdr));
    r->desc = rdmx__ofi_mr_desc(ow, tmr);
    if (r->desc == NULL && length != 0 && (ow->ctx->mr_mode & FI_MR_LOCAL)) {
        st =
            rdmx__ofi_mr_reg(ow->ctx, ow, buf, length, FI_WRITE, &r->lmr, NULL);
        if (st != RDMX_OK) {
            r->op = NULL;
            rma_put(r);
            return st;
        }
        r->desc = fi_mr_desc(r->lmr);
    }
    if (ow->ctx->cq_data) {
        r->token = (uint64_t)ep->remote << 32 | ++ep->notify_seq;
        rdmx_put_le64(tok, r->token);
        st = rdmx__ofi_frame_send(ep, RDMX_OFI_FRAME_EAGER, RDMX_AM_NOTIFY,
                                  nhdr, nhlen, tok, sizeof(tok), 0, NULL, NULL);
        if (st != RDMX_OK) {
            r->op = NULL;
            rma_put(r);
            return st;
        }
    }
    return rma_start_issue(r, req_p);
}

/* --- put-with-notify at the target
 * ------------------------------------- */

static ofi_join_t *join_find(ofi_worker_t *ow, uint64_t token)
{
    rdmx_list_t *e;

    rdmx_list_for_each(e, &ow->joins)
    {
        ofi_join_t *j = rdmx_container_of(e, ofi_join_t, link);
        if (j->token == token)
            return j;
    }
    return NULL;
}

static ofi_join_t *join_new(ofi_worker_t *ow, uint64_t token)
{
    rdmx_list_t *e;
    ofi_join_t *j;

    if (ow->njoins >= OFI_JOIN_MAX)
        return NULL;
    if ((e = rdmx_list_pop(&ow->join_free)) != NULL)
        j = rdmx_container_of(e, ofi_join_t, link);
    else if ((j = malloc(sizeof(*j))) == NULL)
        return NULL;
    memset(j, 0, sizeof(*j));
    j->token = token;
    rdmx_list_insert_tail(&ow->joins, &j->link);
    ow->njoins++;
    return j;
}

static void join_free(ofi_worker_t *ow, ofi_join_t *j)
{
    rdmx_list_del(&j->link);
    ow->njoins--;
    rdmx_list_insert_tail(&ow->join_free, &j->link);
}

/* Both halves of @j came: the core gets its NOTIFY on @ep. */
static void join_deliver(ofi_worker_t *ow, ofi_ep_t *ep, ofi_join_t *j)
{
    unsigned char hdr[RDMX_NOTIFY_SIZE];

    memcpy(hdr, j->hdr, sizeof(hdr));
    join_free(ow, j);
    rdmx__tp_deliver(ow->w, RDMX_AM_NOTIFY, &ep->tep, hdr, sizeof(hdr), NULL, 0,
                     0);
}

/* A NOTIFY message with a token (8 bytes of data) from @ep's peer. */
void rdmx__ofi_on_notify(ofi_worker_t *ow, ofi_ep_t *ep,
                         const rdmx_ofi_frame_t *f)
{
    uint64_t token = rdmx_get_le64(f->data);
    ofi_join_t *j;

    if ((uint32_t)(token >> 32) != ep->id || f->hlen != RDMX_NOTIFY_SIZE) {
        ow->w->stats.proto_errors++; /* (a token for another endpoint) */
        return;
    }
    j = join_find(ow, token);
    if (j != NULL && j->have_data && !j->have_meta) {
        memcpy(j->hdr, f->hdr, RDMX_NOTIFY_SIZE);
        join_deliver(ow, ep, j);
        return;
    }
    if (j != NULL || (j = join_new(ow, token)) == NULL) {
        ow->w->stats.proto_errors++; /* (a token twice, or too many) */
        return;
    }
    j->have_meta = 1;
    memcpy(j->hdr, f->hdr, RDMX_NOTIFY_SIZE);
}

/* A remote write's CQ data: the token of a put-with-notify whose data is
 * in place now. */
void rdmx__ofi_on_cq_data(ofi_worker_t *ow, uint64_t token)
{
    ofi_ep_t *ep = rdmx__ofi_ep_lookup(ow, (uint32_t)(token >> 32));
    ofi_join_t *j;

    if (ep == NULL) {
        ow->w->stats.msgs_dropped++; /* (its endpoint closed) */
        return;
    }
    j = join_find(ow, token);
    if (j != NULL && j->have_meta && !j->have_data) {
        join_deliver(ow, ep, j);
        return;
    }
    if (j != NULL || (j = join_new(ow, token)) == NULL) {
        ow->w->stats.proto_errors++;
        return;
    }
    j->have_data = 1;
}

/* @ep closes: its tokens are dropped. */
void rdmx__ofi_ep_drop_joins(ofi_ep_t *ep)
{
    ofi_worker_t *ow = ep->worker;
    rdmx_list_t *e, *t;

    rdmx_list_for_each_safe(e, t, &ow->joins)
    {
        ofi_join_t *j = rdmx_container_of(e, ofi_join_t, link);
        if ((uint32_t)(j->token >> 32) == ep->id)
            join_free(ow, j);
    }
}

void rdmx__ofi_joins_cleanup(ofi_worker_t *ow)
{
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ow->joins)) != NULL)
        free(rdmx_container_of(e, ofi_join_t, link));
    while ((e = rdmx_list_pop(&ow->join_free)) != NULL)
        free(rdmx_container_of(e, ofi_join_t, link));
    ow->njoins = 0;
}

rdmx_status_t rdmx__ofi_flush(rdmx_tep_t *tep, rdmx_op_t *op, void **req_p)
{
    ofi_ep_t *ep = (ofi_ep_t *)tep;
    ofi_rma_t *f;

    if (rdmx_list_empty(&ep->rmas))
        return ep->rma_status == RDMX_OK
                   ? RDMX_OK
                   : rdmx__error(ep->rma_status,
                                 "flush: an earlier one-sided operation "
                                 "failed");
    f = rma_get(ep->worker);
    if (f == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "flush: out of memory");
    f->kind = OFI_RMA_FLUSH;
    f->ep = ep;
    f->op = op;
    f->seq = ep->rma_seq; /* (waits for every operation up to this one) */
    rdmx_list_insert_tail(&ep->flushes, &f->link);
    *req_p = f;
    return RDMX_INPROGRESS;
}

/* req_forget of a one-sided request: 1 when @req was one. */
int rdmx__ofi_rma_forget(void *req)
{
    ofi_rma_t *r = req;

    if (r->c.kind != OFI_CTX_RMA)
        return 0;
    if (r->done)
        rma_put(r);
    else
        r->forgotten = 1;
    return 1;
}

/* Retry operations the provider pushed back; finish flushes whose
 * endpoint closed. */
unsigned rdmx__ofi_rma_poll(ofi_worker_t *ow)
{
    unsigned n = 0;
    rdmx_list_t *e, *t;

    while ((e = rdmx_list_pop(&ow->rma_done)) != NULL) {
        ofi_rma_t *f = rdmx_container_of(e, ofi_rma_t, qlink);
        rdmx_list_init(&f->qlink);
        f->done = 1;
        rdmx__tp_done(f->op, f, f->status, 0);
        if (f->forgotten)
            rma_put(f);
        n++;
    }
    rdmx_list_for_each_safe(e, t, &ow->rma_wait)
    {
        rma_issue(rdmx_container_of(e, ofi_rma_t, qlink));
        n++;
    }
    return n;
}

/* @ep closes: operations not yet fully issued end as canceled once their
 * pieces in flight come back (or on the next progress); its flushes end
 * as canceled on the next progress. */
void rdmx__ofi_ep_drop_rma(ofi_ep_t *ep)
{
    ofi_worker_t *ow = ep->worker;
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ep->rmas)) != NULL) {
        ofi_rma_t *r = rdmx_container_of(e, ofi_rma_t, link);
        rdmx_list_init(&r->link);
        r->ep = NULL;
        if (r->inflight == 0 && rdmx_list_empty(&r->qlink))
            rdmx_list_insert_tail(&ow->rma_wait, &r->qlink);
    }
    while ((e = rdmx_list_pop(&ep->flushes)) != NULL) {
        ofi_rma_t *f = rdmx_container_of(e, ofi_rma_t, link);
        rdmx_list_init(&f->link);
        f->ep = NULL;
        f->status = RDMX_ERR_CANCELED;
        rdmx_list_insert_tail(&ow->rma_done, &f->qlink);
    }
}

/* The worker goes (its endpoint closed first): free every request. */
void rdmx__ofi_rma_cleanup(ofi_worker_t *ow)
{
    rdmx_list_t *e;

    while ((e = rdmx_list_pop(&ow->rma_all)) != NULL) {
        ofi_rma_t *r = rdmx_container_of(e, ofi_rma_t, wlink);
        /* (the analyzer loses track of the intrusive lists: each request
         * is on rma_all once) */
        if (r->lmr != NULL)
            fi_close(&r->lmr->fid);
        if (r->wmr != NULL)
            fi_close(&r->wmr->fid);
        free(r); /* NOLINT(clang-analyzer-unix.Malloc) */
    }
}
