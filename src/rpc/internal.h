/*
 * rdmx RPC — private structures shared by the files of src/rpc.
 *
 * Every RPC message is one UCX active message (id RDMX_AM_RPC) on a core
 * endpoint; ep->upper points at the rdmx_rpc_link_t that owns it: a server
 * connection or a client channel. Everything here is touched only by the
 * thread that progresses the endpoint's worker (see include/rdmx/rpc.h).
 */
#ifndef RDMX_RPC_INTERNAL_H
#define RDMX_RPC_INTERNAL_H

#include <rdmx/rpc.h>

#include "core/upper.h"
#include "rpc/respond.h"
#include "rpc/wire.h"
#include "util/ptrmap.h"

/* --- latency histogram (metrics.c) ------------------------------------------
 * Log-linear buckets over nanoseconds: 16 sub-buckets per power of two, so a
 * percentile is within 1/16 (6 %) of the true value. */
#define RDMX_HIST_SUB     16
#define RDMX_HIST_BUCKETS (48 * RDMX_HIST_SUB)

typedef struct {
    uint64_t count;
    uint64_t max;
    uint32_t bucket[RDMX_HIST_BUCKETS];
} rdmx_hist_t;

/* A counter that one thread writes and others read racily: the writer adds
 * with a relaxed atomic store, readers take relaxed atomic loads, so that a
 * reader sees a recent value, never a torn one (plain accesses would be a
 * data race in C11). */
#define RDMX_COUNT_ADD(field, n)                                               \
    __atomic_store_n(&(field), (field) + (n), __ATOMIC_RELAXED)
#define RDMX_COUNT_READ(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

void rdmx__hist_add(rdmx_hist_t *h, uint64_t ns);
void rdmx__hist_merge(rdmx_hist_t *into, const rdmx_hist_t *from);
/* The value at quantile @q (0..1), 0 for an empty histogram. */
uint64_t rdmx__hist_quantile(const rdmx_hist_t *h, double q);

/* Counters of one handler or method; written by one thread, read racily. */
typedef struct {
    uint64_t calls, errors, timeouts, bytes_in, bytes_out;
    rdmx_hist_t hist;
} rdmx_rpc_counters_t;

void rdmx__counters_merge(rdmx_rpc_counters_t *into,
                          const rdmx_rpc_counters_t *from);
void rdmx__counters_export(const rdmx_rpc_counters_t *c, const char *name,
                           rdmx_rpc_metrics_t *out);

/* Handler @k's counters summed over the workers (racy reads, as
 * rdmx.stats makes) into @out, its name in @name_p; any thread. 0 once @k
 * is past the last handler or before start, 1 otherwise. */
int rdmx__rpc_server_counters(rdmx_rpc_server_t *s, unsigned k,
                              rdmx_rpc_counters_t *out, const char **name_p);
/* The context a server was created on. */
rdmx_context_t *rdmx__rpc_server_context(const rdmx_rpc_server_t *s);

/* --- links ------------------------------------------------------------------ */

typedef enum { RDMX_RPC_LINK_SERVER = 1, RDMX_RPC_LINK_CHANNEL = 2 } rdmx_rpc_role_t;

/* First member of a server connection and of a channel. */
typedef struct {
    rdmx_rpc_role_t role;
} rdmx_rpc_link_t;

/* The message handler for RDMX_AM_RPC (dispatch.c). */
rdmx_status_t rdmx__rpc_am(rdmx_worker_t *w, const void *header, size_t hlen,
                           void *data, size_t len,
                           const rdmx_msg_info_t *info);
/* Install it on @w once. */
rdmx_status_t rdmx__rpc_attach(rdmx_worker_t *w);

/* A received message, header decoded. @data is aux || payload; when @rndv,
 * @data is UCX's rendezvous descriptor and nothing has arrived yet. */
typedef struct {
    rdmx_rpc_hdr_t h;
    void *data;
    size_t length;
    int rndv;
    int can_hold; /* eager data may be kept by returning RDMX_INPROGRESS */
    int ring;     /* read from a ring (docs/RPC_RINGS.md), not a message */
    uint64_t at_ns; /* when it arrived (monotonic; the core's one read) */
} rdmx_rpc_msg_t;

/* Called by the dispatcher; return RDMX_INPROGRESS to keep the data or a
 * rendezvous descriptor (then the callee owns it), RDMX_OK otherwise. */
rdmx_status_t rdmx__server_on_msg(rdmx_rpc_link_t *link, rdmx_ep_t *ep,
                                  rdmx_rpc_msg_t *m);
rdmx_status_t rdmx__channel_on_msg(rdmx_rpc_link_t *link, rdmx_ep_t *ep,
                                   rdmx_rpc_msg_t *m);
/* A message that failed to decode: @why says what. */
void rdmx__server_on_bad(rdmx_rpc_link_t *link, rdmx_ep_t *ep,
                         const rdmx_rpc_hdr_t *h, const char *why);
void rdmx__channel_on_bad(rdmx_rpc_link_t *link, rdmx_ep_t *ep,
                          const rdmx_rpc_hdr_t *h, const char *why);
/* The largest request the channel's server takes (its max_message), or 0
 * while the channel is not READY. */
uint64_t rdmx__channel_max_message(const rdmx_channel_t *ch);
/* The caller's memory a call uses where it is, with no copy: for callers
 * that wait for the callback (the blocking forms). */
typedef struct {
    /* Request bytes that follow the call's data, sent from here when that
     * pays (channel.c, CH_GATHER_MIN), else copied as the data is. */
    const void *body;
    size_t body_len;
    /* A response that comes by rendezvous, is RDMX_RPC_MSG_RESPONSE and
     * fits these pieces (at most 2) is received straight into them, in
     * order: the callback's data then points at into[0] and its length
     * counts every piece's bytes (the rest are in into[1]). Other
     * responses come as from rdmx_call_nb. */
    rdmx_msg_piece_t into[2];
    unsigned ninto;
} rdmx_call_direct_t;

/* rdmx_call_nb with @d's memory used where it is. That memory is the
 * caller's again only once the callback ran: a call that ends (timeout,
 * cancel, lost connection) while the transport still reads its body or
 * writes its answer pieces runs its callback once it does no more. A body
 * still being sent when the grace of lent buffers (channel.c) has passed
 * since its call ended (a server that does not take a large request)
 * closes the connection, which ends the send; the stat lent_teardowns
 * counts it. */
rdmx_status_t rdmx__call_direct(rdmx_channel_t *ch, const char *method,
                                const void *data, size_t length,
                                const rdmx_call_params_t *params,
                                const rdmx_call_direct_t *d,
                                uint64_t *call_id_p);

/* A message on an endpoint the server accepted but has not set up yet. */
rdmx_rpc_link_t *rdmx__server_link_for(rdmx_ep_t *ep);

/* Send a message of header @h (h->aux + h->payload == @len bytes at @data).
 * Tries to complete at once from @data; otherwise keeps @data if @keep_cb
 * is given, or sends a copy. @how: whether it may wait in @ep's batch
 * (rdmx__msg_send_now). @return RDMX_OK (done, or on its way with a
 * copy), RDMX_INPROGRESS (@data in use until @keep_cb runs) or an error. */
rdmx_status_t rdmx__rpc_send_keep(rdmx_ep_t *ep, const rdmx_rpc_hdr_t *h,
                                  const void *data, size_t len,
                                  rdmx_send_how_t how, rdmx_cb_t keep_cb,
                                  void *keep_arg);
/* Send a message of header @h whose data is @head (@hlen bytes, at most
 * RDMX_RPC_RESPOND_HEAD_MAX, copied) then @body (@blen bytes, sent from where
 * it is: it stays valid until @done(@arg), which runs exactly once, whatever
 * happens; at once if nothing is in flight). @return RDMX_OK (done, or on
 * its way) or an error. */
rdmx_status_t rdmx__rpc_send_parts(rdmx_ep_t *ep, const rdmx_rpc_hdr_t *h,
                                   const void *head, size_t hlen,
                                   const void *body, size_t blen,
                                   void (*done)(void *arg), void *arg);
/* Send a message of header @h whose data is @head (@hlen bytes) then
 * @body (@blen bytes), both sent from where they are: they stay valid
 * until @keep_cb(@keep_arg) runs. @return RDMX_INPROGRESS (@keep_cb will
 * run) or an error (it will not). */
rdmx_status_t rdmx__rpc_send_gather(rdmx_ep_t *ep, const rdmx_rpc_hdr_t *h,
                                    const void *head, size_t hlen,
                                    const void *body, size_t blen,
                                    rdmx_cb_t keep_cb, void *keep_arg);
rdmx_status_t rdmx__rpc_send(rdmx_ep_t *ep, const rdmx_rpc_hdr_t *h,
                             const void *data, size_t len);
/* Send a control message (no data): PING, PONG, CANCEL, ERROR w/o text. */
rdmx_status_t rdmx__rpc_send_ctl(rdmx_ep_t *ep, rdmx_rpc_kind_t kind,
                                 uint64_t id, int32_t status);

/* Initialise a header of @kind. */
static inline void rdmx__rpc_hdr(rdmx_rpc_hdr_t *h, rdmx_rpc_kind_t kind,
                                 uint32_t handler, uint64_t id)
{
    h->version = RDMX_RPC_VERSION;
    h->kind = (uint8_t)kind;
    h->flags = 0;
    h->handler = handler;
    h->status = 0;
    h->id = id;
    h->payload = 0;
    h->aux = 0;
    h->deadline_us = 0;
}

#endif /* RDMX_RPC_INTERNAL_H */
