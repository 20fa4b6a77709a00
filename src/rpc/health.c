/*
 * Slow-path warnings (health.h), shared by rdmx-kvd, the metrics
 * endpoint's /health and rdmx-info.
 */
#include "rpc/health.h"

#include "core/upper.h"
#include "rpc/internal.h"

#include <stdio.h>
#include <sys/resource.h>

/* Write one warning into the next slot of @out, if there is one. */
static void warn(char (*out)[RDMX_HEALTH_WARNING_LEN], unsigned max,
                 unsigned *n, const char *text)
{
    if (*n < max)
        snprintf(out[*n], RDMX_HEALTH_WARNING_LEN, "%s", text);
    (*n)++;
}

unsigned rdmx__health_warnings(const rdmx_health_facts_t *f,
                               char (*out)[RDMX_HEALTH_WARNING_LEN],
                               unsigned max)
{
    unsigned n = 0;
    int rdma_wanted =
        f->requested == RDMX_TRANSPORT_RDMA || f->chosen == RDMX_TRANSPORT_RDMA;

    if (f->requested == RDMX_TRANSPORT_RDMA && f->chosen == RDMX_TRANSPORT_TCP)
        warn(out, max, &n, "rdma was asked for and tcp was chosen");
    if (f->chosen == RDMX_TRANSPORT_TCP && f->requested == RDMX_TRANSPORT_AUTO)
        warn(out, max, &n,
             "RMA emulated toward other hosts: on tcp, rdmx carries put, "
             "get and atomics as messages to the target's worker (peers on "
             "this host reached over shared memory are mapped: "
             "rdmx_mem_alloc memory is copied directly)");
    else if (f->chosen == RDMX_TRANSPORT_TCP)
        warn(out, max, &n,
             "RMA emulated: on tcp, rdmx carries put, get and atomics as "
             "messages to the target's worker (no one-sided access)");
    if (rdma_wanted && f->memory > 0 && f->memlock_limit < f->memory) {
        char text[RDMX_HEALTH_WARNING_LEN];
        snprintf(text, sizeof(text),
                 "memlock limit too low: RLIMIT_MEMLOCK is %llu bytes, "
                 "%llu bytes are to be registered (raise ulimit -l or "
                 "LimitMEMLOCK=)",
                 (unsigned long long)f->memlock_limit,
                 (unsigned long long)f->memory);
        warn(out, max, &n, text);
    }
    return n;
}

uint64_t rdmx__health_memlock_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return UINT64_MAX;
    return (uint64_t)rl.rlim_cur;
}

void rdmx__health_facts_of_server(rdmx_rpc_server_t *server, uint64_t memory,
                                  rdmx_health_facts_t *facts_p)
{
    rdmx_context_t *ctx = rdmx__rpc_server_context(server);

    facts_p->requested = rdmx__context_requested(ctx);
    facts_p->chosen = rdmx_context_transport(ctx);
    facts_p->memory = memory;
    facts_p->memlock_limit = rdmx__health_memlock_limit();
}
