/*
 * What core offers the layers above it (src/rpc, src/kv, src/lambda): the
 * only core header they include. No transport type appears here; the
 * public API (include/rdmx/core.h) and these functions are all they use.
 *
 * Messages: a layer registers a handler for a message id (16 and up) on a
 * worker, and sends with a header (copied) and data. A handler runs on the
 * worker's thread, inside progress; info->ep is the sending endpoint (a
 * live one: messages of unknown or failed endpoints are counted and
 * dropped before any handler sees them).
 */
#ifndef RDMX_CORE_UPPER_H
#define RDMX_CORE_UPPER_H

#include <rdmx/core.h>

#include "util/error.h"
#include "util/list.h"
#include "util/log.h"

#include <stddef.h>
#include <stdint.h>

/* --- messages -------------------------------------------------------------- */

#define RDMX_MSG_ID_UPPER 16 /* first id for the layers above core */
#define RDMX_MSG_ID_MAX   32

enum {
    /* The data has not arrived: @data is a descriptor for rdmx__msg_recv
     * (a large message). */
    RDMX_MSG_RNDV = 1u << 0,
    /* The handler may keep @data past its return by returning
     * RDMX_INPROGRESS, and later give it back with rdmx__msg_release. */
    RDMX_MSG_HOLDABLE = 1u << 1,
};

/* A piece of a gathered send (rdmx__msg_sendv). */
typedef struct {
    const void *base;
    size_t length;
} rdmx_msg_iov_t;

#define RDMX_MSG_IOV_MAX 4 /* most pieces of one message */

typedef struct {
    rdmx_ep_t *ep;  /* the sender's endpoint, on this worker */
    unsigned flags; /* RDMX_MSG_* */
} rdmx_msg_info_t;

/* A message arrived. The return says who owns @data from now on:
 * RDMX_INPROGRESS when the handler keeps it (HOLDABLE eager data, given
 * back later with rdmx__msg_release) or passed a rendezvous descriptor to
 * rdmx__msg_recv (then its callback always runs, and the transport frees
 * the descriptor when the receive is done); RDMX_OK otherwise, and the
 * transport takes @data back as the handler returns. Eager data is never
 * passed to rdmx__msg_recv. */
typedef rdmx_status_t (*rdmx_msg_handler_t)(rdmx_worker_t *w,
                                            const void *hdr, size_t hlen,
                                            void *data, size_t len,
                                            const rdmx_msg_info_t *info);

/* Install @fn for message @id (RDMX_MSG_ID_UPPER..RDMX_MSG_ID_MAX-1). */
rdmx_status_t rdmx__worker_set_handler(rdmx_worker_t *w, unsigned id,
                                       rdmx_msg_handler_t fn);
/* Give back data a handler kept (it returned RDMX_INPROGRESS), once. */
void rdmx__msg_release(rdmx_worker_t *w, void *data);
/* Receive the data of a rendezvous message (@desc from the handler) into
 * @buf. RDMX_INPROGRESS: @cb runs later, from progress; an error (out of
 * memory): @cb never runs. Either way @desc is the transport's again. */
rdmx_status_t rdmx__msg_recv(rdmx_ep_t *ep, void *desc, void *buf,
                             size_t length, rdmx_cb_t cb, void *arg);
/* A piece of a scattered receive (rdmx__msg_recvv). */
typedef struct {
    void *base;
    size_t length;
} rdmx_msg_piece_t;

/* rdmx__msg_recv with the @length bytes scattered over @n pieces (at most
 * RDMX_MSG_IOV_MAX, at least @length bytes in all), in order, straight
 * into them: more than one piece only where rdmx__msg_scatters. @pieces
 * itself is copied; the pieces stay valid until @cb runs, which is only
 * once the transport writes into them no more (if the endpoint fails
 * first, that may be later than the failure). */
rdmx_status_t rdmx__msg_recvv(rdmx_ep_t *ep, void *desc,
                              const rdmx_msg_piece_t *pieces, unsigned n,
                              size_t length, rdmx_cb_t cb, void *arg);
/* Whether @w's transport receives into several pieces (else one). */
int rdmx__msg_scatters(const rdmx_worker_t *w);
/* Send message @id with header @hdr (copied, at most 48 bytes) and @length
 * bytes of @data (valid until completion). RDMX_OK: done at once, @cb does
 * not run; RDMX_INPROGRESS: @cb runs; or an error. */
rdmx_status_t rdmx__msg_send(rdmx_ep_t *ep, unsigned id, const void *hdr,
                             size_t hlen, const void *data, size_t length,
                             rdmx_cb_t cb, void *arg);
/* rdmx__msg_send with the data gathered from @n pieces (at most
 * RDMX_MSG_IOV_MAX; @iov itself is copied, the pieces stay valid until
 * @cb runs). A transport that cannot gather gets one joined copy. @cb
 * runs only once the transport no longer reads the pieces: if the
 * endpoint fails first, that may be later than the failure (from inside
 * progress, when the transport gives the request back, or when the
 * worker is destroyed). */
rdmx_status_t rdmx__msg_sendv(rdmx_ep_t *ep, unsigned id, const void *hdr,
                              size_t hlen, const rdmx_msg_iov_t *iov,
                              unsigned n, rdmx_cb_t cb, void *arg);
/* How rdmx__msg_send_now may hold a small message in @ep's batch
 * (docs/CORE.md, "Batched messages"). */
typedef enum {
    /* The first toward @ep since the worker's current pass began leaves at
     * once, later ones wait for the end of the pass, or outside a pass for
     * the worker's next progress or arm: for senders that progress to see
     * their answers. */
    RDMX_SEND_BURST = 0,
    /* More messages to @ep follow at once: wait for them, until a send
     * that is not RDMX_SEND_MORE, any other operation on @ep, or the next
     * progress or arm. */
    RDMX_SEND_MORE = 1,
    /* Leave now outside a pass (with what the batch holds before it): for
     * messages nobody progresses for, such as one-way calls. */
    RDMX_SEND_NOW = 2,
} rdmx_send_how_t;

/* Send only if the transport takes it at once from the caller's buffers:
 * RDMX_OK (sent, or held in the endpoint's batch as @how says, nothing to
 * wait for), RDMX_ERR_NO_RESOURCE (it could not; nothing was sent), or
 * another error. */
rdmx_status_t rdmx__msg_send_now(rdmx_ep_t *ep, unsigned id, const void *hdr,
                                 size_t hlen, const void *data, size_t length,
                                 rdmx_send_how_t how);

/* --- endpoints ------------------------------------------------------------- */

/* The layer object riding on an endpoint (an RPC connection), or NULL. */
void *rdmx__ep_upper(const rdmx_ep_t *ep);
/* The largest message (headers and data) rdmx__msg_send_now offers the
 * transport toward @ep: SIZE_MAX until the transport refused a size above
 * all it took (docs/CORE.md, "Small messages at once"). */
size_t rdmx__ep_at_once_max(const rdmx_ep_t *ep);
void rdmx__ep_set_upper(rdmx_ep_t *ep, void *upper);
/* "host:port" of the peer. */
const char *rdmx__ep_peer(const rdmx_ep_t *ep);
/* What ended or refused the connection, in words (first cause; "" while
 * healthy). Unlike rdmx_error_detail(), valid in any thread, any time. */
const char *rdmx__ep_why(const rdmx_ep_t *ep);
/* Is the peer still there, checked now (one peek at the control socket,
 * whose end the kernel reports even while this process was stopped)?
 * For the last moment before writing into a peer's lent buffer. */
int rdmx__ep_peer_alive(rdmx_ep_t *ep);
/* Close @ep at once, without the orderly BYE: its control socket first,
 * so that the peer sees the end even if it is stopped now (and
 * rdmx__ep_peer_alive there says so), then the transport by force. */
void rdmx__ep_abort(rdmx_ep_t *ep);
/* A message arrived on an endpoint accepted with @accept_cb whose callback
 * has not run yet: take it now (the callback will find it taken). 1 and
 * the listener's argument in @arg_p, or 0 if @ep is not such an endpoint. */
int rdmx__ep_adopt(rdmx_ep_t *ep, rdmx_accept_cb_t accept_cb, void **arg_p);

/* --- workers ----------------------------------------------------------------- */

rdmx_context_t *rdmx__worker_context(const rdmx_worker_t *w);
/* The transport the context was created for (RDMX_TRANSPORT_AUTO stays
 * AUTO here, unlike rdmx_context_transport). */
rdmx_transport_t rdmx__context_requested(const rdmx_context_t *ctx);
/* Whether the context's put/get (@rma_p) and atomics (@atomics_p) go by
 * the transport, one-sided (1), or are carried by rdmx over messages to
 * the target's worker (0), as decided at its creation. */
void rdmx__context_one_sided(const rdmx_context_t *ctx, int *rma_p,
                             int *atomics_p);
/* How long waits poll before they sleep, in ns (RDMX_SPIN_US). */
uint64_t rdmx__context_spin_ns(const rdmx_context_t *ctx);
/* Whether the context's waiters stop polling under pressure (spin.c):
 * where a poll pass is a system call and the data's arrival itself wakes
 * a sleeper (tcp), not where a pass is a memory read and waking a sleeper
 * costs its peer a system call (shared memory, RDMA). */
int rdmx__context_poll_yields(const rdmx_context_t *ctx);

/* Polling slots (src/core/spin.c): a thread polls while it waits only if
 * it holds one. rdmx__spin_claim returns 1 when the caller may poll (it
 * holds a slot, or there is no limit: @slot->index RDMX_SPIN_UNLIMITED),
 * 0 when every slot is taken (sleep, or take turns), or when @flags has
 * RDMX_SPIN_YIELDS and the host is under pressure. RDMX_SPIN_AGAIN: the
 * caller claimed and was denied before in this same idle spell (it took
 * a turn since): a denial is not counted again. RDMX_SPIN_IDLE: the
 * caller has nothing to wait for (a server worker that woke on its timer):
 * its denial makes neither pressure nor turns. A holder confirms its
 * slot now and then with rdmx__spin_confirm (0: it was taken over, as a
 * stopped process's is after 2 s, or it yields and the host came under
 * pressure: sleep) and gives it back with rdmx__spin_release (any state;
 * idempotent). A holder that does not yield takes turns while others
 * wait (a claim found no slot free within the last 10 ms): @slot->turns,
 * set by the claim and each confirm, asks it to give its CPU away
 * (sched_yield) after each empty pass. @hint spreads threads over the
 * slots (any value that differs between threads). */
#define RDMX_SPIN_NONE      (-1)
#define RDMX_SPIN_UNLIMITED (-2)
/* rdmx__spin_claim's @flags: a yielding waiter's claim (tcp); the same
 * idle spell's claim after a turn; a server worker's that had no work
 * since it last slept (its denial is no crowd). */
#define RDMX_SPIN_YIELDS 1
#define RDMX_SPIN_AGAIN  2
#define RDMX_SPIN_IDLE   4
typedef struct {
    int index;  /* >= 0: held; RDMX_SPIN_NONE or RDMX_SPIN_UNLIMITED */
    int yields; /* the claim's RDMX_SPIN_YIELDS */
    int turns;  /* held while others wait: yield the CPU after each
                   empty pass */
    uint64_t token;
} rdmx_spin_slot_t;
int rdmx__spin_claim(unsigned hint, int flags, rdmx_spin_slot_t *slot);
int rdmx__spin_confirm(rdmx_spin_slot_t *slot);
void rdmx__spin_release(rdmx_spin_slot_t *slot);
/* Non-zero while the host is under pressure (many claims found no slot
 * free, lately): then yielding claims and confirms answer 0, and other
 * holders take turns. */
int rdmx__spin_pressure(void);
/* Non-zero when the worker has a progress thread of its own. */
int rdmx__worker_threaded(const rdmx_worker_t *w);
/* Count a malformed or unexpected message in the worker's proto_errors. */
void rdmx__worker_proto_error(rdmx_worker_t *w);
/* With a progress thread, every call on the worker is made under its lock
 * (recursive); without one these do nothing. */
void rdmx__worker_lock(rdmx_worker_t *w);
void rdmx__worker_unlock(rdmx_worker_t *w);

/* The monotonic clock when the message an upper layer's handler is now
 * handling was delivered: read once for it by the core, so a layer need
 * not read the clock again for its arrival. Only valid in the handler. */
uint64_t rdmx__worker_deliver_ns(const rdmx_worker_t *w);
/* A poller (below) is about to hand something it found to upper-layer code,
 * as the worker does before each message: batches held too long leave
 * first. Returns the arrival time: @pass_ns, the time an earlier record
 * of the same pass got (0: the first), unless sends wait in the worker's
 * batch (their bound needs the time now); else a clock read (~10 ns here,
 * a tenth of a shared-memory call, so one per pass). */
uint64_t rdmx__worker_enter(rdmx_worker_t *w, uint64_t pass_ns);
/* Sleep on the worker once, after a progress pass that found nothing: arm
 * it, then wait for an event on its fd, its next timer or @deadline
 * (monotonic ns). Its own sockets' events are handled before it returns;
 * the transport's are left to the next pass. RDMX_OK (woke up, or slept
 * until the timer or deadline), RDMX_ERR_BUSY (arming found work: make a
 * pass), RDMX_ERR_TIMEOUT (@deadline passed before it slept), or an
 * error. The lean form of rdmx_worker_wait: no pass of its own, no look at
 * the sockets before arming nor a second one after waking. */
rdmx_status_t rdmx__worker_sleep(rdmx_worker_t *w, uint64_t deadline);
/* The one blocking primitive: return once *@done is set. Without a
 * progress thread: progress, polling for the context's spin time after
 * the last event (RDMX_SPIN_US, default 50 us), then sleeping on the
 * worker's fd between events. With one: sleep until its callbacks set
 * *@done. Not from inside a callback. */
void rdmx__wait_until(rdmx_worker_t *w, volatile int *done);
/* The same, giving up at @deadline_ns (monotonic): 0 when *@done was set,
 * -1 when the deadline passed first. */
int rdmx__wait_deadline(rdmx_worker_t *w, volatile int *done,
                        uint64_t deadline_ns);

/* A timer the layers above core run from progress (RPC channels, servers).
 * @fn runs when the monotonic clock reaches @next_ns and sets the next time
 * itself (UINT64_MAX: not armed). Checked every 64th progress pass and
 * after a sleep that reached it. */
typedef struct rdmx_hook {
    rdmx_list_t link; /* worker->hooks */
    unsigned (*fn)(struct rdmx_hook *hook, uint64_t now_ns);
    uint64_t next_ns;
} rdmx_hook_t;

void rdmx__hook_add(rdmx_worker_t *w, rdmx_hook_t *hook);
void rdmx__hook_del(rdmx_hook_t *hook);

/* Memory that a layer above core polls, written by a peer instead of sent
 * (RPC request rings: docs/RPC_RINGS.md). @poll runs in every progress
 * pass, inside it (what it sends batches as the pass's messages do), and
 * returns how much it found. When the worker is armed to sleep, every
 * poller's @doze(p, 1) marks its memory so that writers wake the worker
 * with a message; then, if a poller's writers may publish without a fence
 * of their own (@fenced), the worker makes the heavy peer fence once
 * (util/peer_fence.h); then every poller's @waiting(p) says whether
 * something was written meanwhile (nonzero: the arm fails with
 * RDMX_ERR_BUSY, as for a pending event, and the next pass takes it).
 * @doze(p, 0) at the next pass after. */
typedef struct rdmx_poller {
    rdmx_list_t link; /* worker->pollers */
    unsigned (*poll)(struct rdmx_poller *p);
    void (*doze)(struct rdmx_poller *p, int on);
    int (*waiting)(struct rdmx_poller *p);
    int fenced; /* its writers rely on the heavy fence before a sleep */
} rdmx_poller_t;

void rdmx__poller_add(rdmx_worker_t *w, rdmx_poller_t *p);
void rdmx__poller_del(rdmx_worker_t *w, rdmx_poller_t *p);

/* Where the remote range of @rmem starts in this process, when the
 * transport maps the peer's memory here (shared memory, for memory the
 * peer allocated with rdmx_mem_alloc): its bytes can then be read and
 * written with plain loads and stores, until the descriptor is destroyed
 * or its endpoint goes away. RDMX_ERR_UNSUPPORTED otherwise (no error
 * detail is set). */
rdmx_status_t rdmx__rmem_map(rdmx_rmem_t *rmem, void **ptr_p);
/* Whether what rdmx__rmem_map gave is still mapped: not once the
 * descriptor's endpoint went away (the core then releases the transport's
 * key, and with it the mapping, before the endpoint's owner hears of it). */
int rdmx__rmem_mapped(const rdmx_rmem_t *rmem);
/* Whether rdmx__rmem_map may work for the peer of @ep: its transport maps
 * a peer's rdmx_mem_alloc memory here (UCX's shared memory, in a context
 * of any transport setting but RDMX_RMA=rdmx). Worker's lock held. */
int rdmx__ep_maps_peer(rdmx_ep_t *ep);
/* rdmx_ep_transport with the worker's lock held. */
rdmx_transport_t rdmx__ep_transport(rdmx_ep_t *ep);
/* Whether @mr is rdmx_mem_alloc memory (which such a peer maps; memory of
 * rdmx_mem_register it reads with a system call). */
int rdmx__mr_allocated(const rdmx_mr_t *mr);

/* @len bytes from the kernel's random source (getrandom). */
rdmx_status_t rdmx__random(void *buf, size_t len);

/* Connections the listener refused at its limit so far. */
uint64_t rdmx__listener_refused(const rdmx_listener_t *l);
/* Connections it refused for a wrong or missing proof of its secret. */
uint64_t rdmx__listener_auth_failed(const rdmx_listener_t *l);

/* From now on the listener refuses new connections ("server is shutting
 * down"); the port stays bound until rdmx_listener_destroy. Any thread. */
void rdmx__listener_pause(rdmx_listener_t *l);

#endif /* RDMX_CORE_UPPER_H */
