/*
 * The slow-path warnings (src/rpc/health.h) that rdmx-kvd, /health and
 * rdmx-info share: each condition of docs/OPERATIONS.md ("Slow-path
 * warnings") gives its warning and nothing else does; the count is right
 * past the caller's room and nothing is written beyond it.
 */
#include "harness.h"
#include "rpc/health.h"

#include <string.h>

static char w[RDMX_HEALTH_WARNINGS_MAX + 1][RDMX_HEALTH_WARNING_LEN];

/* The warnings of these facts, each checked to be one non-empty line. */
static unsigned warnings(rdmx_transport_t requested, rdmx_transport_t chosen,
                         uint64_t memory, uint64_t memlock)
{
    rdmx_health_facts_t f = {requested, chosen, memory, memlock};
    unsigned n;

    memset(w, 0, sizeof(w));
    n = rdmx__health_warnings(&f, w, RDMX_HEALTH_WARNINGS_MAX);
    for (unsigned i = 0; i < n && i < RDMX_HEALTH_WARNINGS_MAX; i++)
        CHECK(w[i][0] != '\0' && strchr(w[i], '\n') == NULL);
    return n;
}

static int has(unsigned n, const char *text)
{
    for (unsigned i = 0; i < n; i++)
        if (strstr(w[i], text) != NULL)
            return 1;
    return 0;
}

int main(void)
{
    const rdmx_transport_t A = RDMX_TRANSPORT_AUTO, S = RDMX_TRANSPORT_SHM,
                           T = RDMX_TRANSPORT_TCP, R = RDMX_TRANSPORT_RDMA;
    const uint64_t GB = 1ull << 30, unlimited = UINT64_MAX;
    unsigned n;

    th_init("unit_health", 30);
    /* The fast paths: nothing. */
    CHECK(warnings(A, S, GB, 0) == 0); /* shm: nothing is pinned */
    CHECK(warnings(R, R, GB, unlimited) == 0);
    CHECK(warnings(A, R, GB, 2 * GB) == 0);
    CHECK(warnings(R, R, 0, 0) == 0); /* nothing to register */
    CHECK(warnings(S, S, 0, 0) == 0);

    /* tcp: RMA emulated, and only that unless rdma was asked for. */
    n = warnings(A, T, 0, unlimited);
    CHECK(n == 1 && has(n, "RMA emulated toward other hosts") &&
          has(n, "this host reached over shared memory are mapped"));
    n = warnings(T, T, GB, 0);
    CHECK(n == 1 && has(n, "RMA emulated") &&
          !has(n, "RMA emulated toward other hosts"));

    /* rdma asked for, tcp chosen: both. */
    n = warnings(R, T, 0, unlimited);
    CHECK(n == 2 && has(n, "rdma was asked for and tcp was chosen") &&
          has(n, "RMA emulated"));

    /* memlock below the memory to register, with rdma asked for or used. */
    n = warnings(A, R, GB, 64 << 20);
    CHECK(n == 1 && has(n, "memlock limit too low") && has(n, "67108864") &&
          has(n, "1073741824"));
    n = warnings(R, R, GB, GB - 1);
    CHECK(n == 1 && has(n, "memlock limit too low"));
    CHECK(warnings(R, R, GB, GB) == 0); /* exactly enough */

    /* All three; room for one: the count is still 3, one slot written. */
    {
        rdmx_health_facts_t f = {R, T, GB, 1};
        memset(w, 0, sizeof(w));
        CHECK(rdmx__health_warnings(&f, w, 1) == 3);
        CHECK(w[0][0] != '\0' && w[1][0] == '\0');
        CHECK(rdmx__health_warnings(&f, w, 0) == 3);
    }

    /* The process's own limit reads as a number or unlimited. */
    CHECK(rdmx__health_memlock_limit() > 0);
    th_log("ok");
    return 0;
}
