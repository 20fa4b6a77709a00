/*
 * Asymmetric fences between processes that share memory (peer_fence.h,
 * docs/RPC_RINGS.md "Sleeping").
 *
 * Why the handshake holds. The light side (a writer) runs, in program
 * order, S: store its word (the record's sequence) and L: load the other
 * word (`sleeping`), with only a compiler barrier between them, so the
 * CPU may make L before S is visible. The heavy side (a reader about to
 * sleep) stores `sleeping` (a sequentially consistent exchange, so
 * visible before the system call starts), calls membarrier (which itself
 * begins and ends with a full barrier on the caller), then loads the
 * sequence. The call makes each registered thread run a full barrier B
 * at some point inside it (an interrupt, or a switch into the thread).
 * Where B falls in the writer's order:
 *  - before S: L comes after B in program order and B orders it, and B
 *    is after `sleeping` was visible: L sees the reader asleep, and the
 *    writer wakes it;
 *  - after L, or between S and L: S is visible at B, before the call
 *    returns, so the reader's load after it sees the record.
 * Either way one side sees the other. A writer not registered is not
 * reached by the call: it must fence for itself (ready() is 0 for it, and
 * it fences whatever its reader says).
 */
#define _GNU_SOURCE
#include "util/peer_fence.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ready;

static long membarrier(int cmd)
{
    return syscall(SYS_membarrier, cmd, 0, 0);
}

static void setup(void)
{
    const char *e = getenv("RDMX_PEER_FENCE");
    long have;

    /* (RDMX_PEER_FENCE=0: fence both sides, as where the call is missing;
     * for measurements and tests of that path) */
    if (e != NULL && strcmp(e, "0") == 0)
        return;
    have = membarrier(MEMBARRIER_CMD_QUERY);
    if (have < 0 || !(have & MEMBARRIER_CMD_GLOBAL_EXPEDITED) ||
        !(have & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED))
        return;
    if (membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0)
        return;
    ready = 1;
}

int rdmx__peer_fence_ready(void)
{
    pthread_once(&once, setup);
    return ready;
}

int rdmx__peer_fence_heavy(void)
{
    if (!rdmx__peer_fence_ready())
        return 0;
    return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ? 0 : -1;
}
