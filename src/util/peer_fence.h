/*
 * Asymmetric fences between processes that share memory
 * (docs/RPC_RINGS.md, "Sleeping").
 *
 * A handshake in which each side stores a word and then loads the other's
 * (a writer publishes a record, then looks whether its reader sleeps; the
 * reader says it sleeps, then looks for a record) needs a full fence on
 * both sides between the store and the load. When one side runs it on
 * every operation and the other rarely, the frequent side may skip its
 * fence if the rare side makes every running thread of the other
 * processes execute one: membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED),
 * which reaches the processes that registered for it.
 *
 * rdmx__peer_fence_ready() registers this process, once; it says whether
 * both halves work here: this process's light side is then covered by
 * any peer's heavy fence, and its heavy fence can be made. Where it is 0
 * (a kernel before 4.16, a seccomp filter), both sides must fence as
 * usual, and the peer has to be told (the rings' `fences` word).
 */
#ifndef RDMX_UTIL_PEER_FENCE_H
#define RDMX_UTIL_PEER_FENCE_H

/* 1 when this process is registered for peers' heavy fences and can make
 * its own; registers on the first call (thread-safe). */
int rdmx__peer_fence_ready(void);

/* The heavy side: when it returns 0, every thread of every registered
 * process has executed a full memory barrier since the call began (a
 * thread that was not running passes one when it runs again). 0 at once
 * when this process is not ready (its peers then fence for themselves);
 * -1 when the call failed: the caller must not rely on it. */
int rdmx__peer_fence_heavy(void);

#endif /* RDMX_UTIL_PEER_FENCE_H */
