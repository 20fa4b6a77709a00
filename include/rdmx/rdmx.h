/*
 * rdmx — RDMA communication stack over UCX.
 *
 * One include for the whole public API (docs/API.md: conventions, and a
 * table of every function).
 *
 * @code
 *   rdmx_context_t *ctx;  rdmx_worker_t *w;  rdmx_ep_t *ep;
 *   rdmx_context_create(NULL, &ctx);
 *   rdmx_worker_create(ctx, NULL, &w);
 *   if (rdmx_connect(w, "10.0.0.2:13337", NULL, &ep) == RDMX_OK)
 *       rdmx_send(ep, "hello", 5, NULL);
 * @endcode
 */
#ifndef RDMX_H
#define RDMX_H

#include <rdmx/status.h>
#include <rdmx/core.h>
#include <rdmx/rpc.h>
#include <rdmx/kv.h>
#include <rdmx/lambda.h>
#include <rdmx/metrics.h>

#endif /* RDMX_H */
