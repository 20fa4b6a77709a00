/*
 * kv_client.h — the KV client of the bench programs that drive rdmx-kvd
 * through librdmx (kv_fill.c, kv_batch_get.c): one context, one worker
 * without a progress thread (the calls progress it) and one KV client,
 * all with their defaults. Header only, like bench.h.
 */
#ifndef RDMX_BENCH_KV_CLIENT_H
#define RDMX_BENCH_KV_CLIENT_H

#include <rdmx/rdmx.h>

#include <stddef.h>

typedef struct {
    rdmx_context_t *ctx; /* NULL until created */
    rdmx_worker_t *w;    /* of ctx; NULL until created */
    rdmx_kv_t *kv;       /* on w; NULL until created */
} kv_client_t;

/* Create @p c's context, worker and KV client of @p servers, then wait up
 * to 10 s until the client is ready. Returns RDMX_OK, or the status of the
 * first call that failed; either way what was created is in @p c, for
 * kv_client_close. */
static inline rdmx_status_t kv_client_open(kv_client_t *c, const char *servers)
{
    rdmx_status_t st;

    c->ctx = NULL;
    c->w = NULL;
    c->kv = NULL;
    if ((st = rdmx_context_create(NULL, &c->ctx)) != RDMX_OK ||
        (st = rdmx_worker_create(c->ctx, NULL, &c->w)) != RDMX_OK ||
        (st = rdmx_kv_create(c->w, servers, NULL, &c->kv)) != RDMX_OK)
        return st;
    return rdmx_kv_wait_ready(c->kv, 10000);
}

/* Destroy what @p c holds, newest first; fields left NULL are skipped. */
static inline void kv_client_close(kv_client_t *c)
{
    if (c->kv != NULL)
        rdmx_kv_destroy(c->kv);
    if (c->w != NULL)
        rdmx_worker_destroy(c->w);
    if (c->ctx != NULL)
        rdmx_context_destroy(c->ctx);
}

#endif /* RDMX_BENCH_KV_CLIENT_H */
