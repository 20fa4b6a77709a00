/*
 * The UCX backend's own header: for the backend and for tests that speak
 * raw UCX on rdmx's objects (hostile and malformed peers). Nothing else in
 * rdmx includes it (scripts/check-layers.sh).
 */
#ifndef RDMX_CORE_UCX_H
#define RDMX_CORE_UCX_H

#include <rdmx/core.h>
#include <ucp/api/ucp.h>

/* The UCX worker under @w, the UCX endpoint under @ep (NULL once closed). */
ucp_worker_h rdmx__ucx_worker(rdmx_worker_t *w);
ucp_ep_h rdmx__ucx_ep(rdmx_ep_t *ep);

#endif /* RDMX_CORE_UCX_H */
