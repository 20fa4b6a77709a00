/*
 * RPC channel: the client side of one server address. It owns the
 * connection — connects, handshakes (and authenticates), pings when idle,
 * declares the server down when it goes silent, reconnects with exponential
 * backoff and jitter — and the calls on it: credits, a queue, deadlines,
 * cancellation, retries of idempotent calls and a circuit breaker.
 * See docs/RPC.md.
 *
 * A call that lent the server a buffer to write into (a bulk descriptor
 * with RDMX_ACCESS_WRITE) and ends before the answer (deadline, cancel)
 * completes only once the server can no longer write into the buffer: when
 * the server's answer arrives (a server checks rdmx_rpc_req_expired()
 * right before it writes), or, if none comes within LENT_GRACE_MS, after
 * the connection was closed. The caller's status is the call's own
 * (TIMEOUT, CANCELED) either way (docs/RPC.md, "Lent buffers").
 *
 * A call that ends before the server answered (deadline, cancel) stays as
 * a "ghost" holding its credit until the server's answer arrives or the
 * connection ends: the server answers every request exactly once, so the
 * caller's count of requests in flight always matches the server's.
 */
#include "rpc/internal.h"
#include "rpc/ring.h"
#include "util/bufcache.h"
#include "util/log.h"

#include "util/time.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CH_INLINE 192     /* request bytes kept inside the call record */
/* A body that follows other request bytes is sent from the caller's memory
 * (gathered) from this size on, and copied after them below it: over tcp
 * UCX sends gathered pieces through a request and a copy into its segment
 * (5,000 instructions), a contiguous message straight from memory (630),
 * so two copies of 4 KiB cost less and of 8 KiB more (docs/PERFORMANCE.md,
 * "Requests sent from the caller's buffer"). Below it too when the
 * transport does not take a request of that size at once (shared memory
 * above ~960 B): then both ways go through a request, and gathering saves
 * the copy. A body alone is sent from the caller's memory from CH_INLINE
 * on. */
#define CH_GATHER_MIN  8192
#define CH_METHODS_MAX 256
#define CH_SPARE_MAX 64   /* ended call records kept for the next calls */
#define CH_SLOTS_MIN   32   /* first size of the call slot table */
#define CH_SLOT_NONE   UINT32_MAX
/* How long a call that lent a buffer waits, after it ended, for the
 * server's answer before the connection is closed under it; and one whose
 * request is still being sent from the caller's memory, for the send's
 * end. */
#define LENT_GRACE_MS 200

typedef enum { CALL_QUEUED, CALL_SENT } call_state_t;

typedef struct call {
    rdmx_list_t link;     /* ch->queue or ch->sent */
    rdmx_channel_t *ch;   /* NULL once the channel is gone (zombie) */
    uint64_t id;
    uint32_t method;
    int midx;             /* ch->methods index */
    unsigned flags;       /* RDMX_RPC_F_* on the wire */
    int more;             /* RDMX_RPC_MORE: may wait for the next call */
    call_state_t state;
    int done;             /* the user's callback ran */
    int probe;            /* the breaker's half-open probe */
    int holds;            /* sends / receives UCX still has of it */
    int sending;          /* its request is still being sent */
    int linked;           /* holds its slot in ch->slots */
    unsigned attempts;
    uint64_t start_ns, deadline_ns;
    int lent;             /* carries a buffer the server may write into */
    uint64_t lent_until;  /* ended, waiting for the server's word until */
    rdmx_status_t lent_status; /* ... then completes with this */
    rdmx_call_cb_t cb;
    void *arg;
    uint32_t aux_len, len; /* len: the payload's bytes, body included */
    unsigned char *buf;    /* aux || payload (without the body) */
    void *resp;           /* rendezvous response buffer */
    /* The caller's own memory, used where it is (rdmx__call_direct):
     * the payload's last body_len bytes are sent from body, and a
     * response that comes by rendezvous lands in into[], if it fits. */
    const void *body;
    uint32_t body_len;
    unsigned body_sends; /* sends not yet reported done (an answer means
                            none reads the body any more) */
    int answered;        /* the server's answer (or error) arrived */
    uint64_t body_until; /* ended with body_sends: the fence's time */
    rdmx_msg_piece_t into[2];
    unsigned ninto;
    size_t into_cap;  /* their bytes in all */
    int rx_busy;      /* a receive into them is in flight */
    int end_deferred; /* ended while the transport still used the caller's
                         memory: the callback waits (end_status,
                         end_msg) */
    rdmx_status_t end_status;
    uint32_t ring_slot;      /* 1 + the server ring's slot its request was
                                written into, 0: sent as a message */
    struct call *next_spare; /* in ch->spare */
    /* not cleared for a new call (call_new clears what comes before): */
    char lent_msg[96]; /* set with lent_until */
    char end_msg[96];  /* set with end_deferred */
    unsigned char inl[CH_INLINE];
} call_t;

/* A slot of a channel's call table. A call's id is its slot's index in
 * the low 32 bits and the slot's generation in the high 32: a lookup is an
 * index and a compare, and an answer to an ended call (an older
 * generation) finds nothing. */
typedef struct {
    call_t *call;       /* NULL: free */
    uint32_t gen;       /* bumped each time the slot is freed; never 0 */
    uint32_t next_free; /* next free slot, or CH_SLOT_NONE */
} call_slot_t;

typedef struct {
    uint32_t id;
    char name[RDMX_RPC_NAME_MAX + 1];
    rdmx_rpc_counters_t c;
} method_t;

struct rdmx_channel {
    rdmx_rpc_link_t link; /* role CHANNEL; first */
    rdmx_worker_t *w;
    call_t *spare;        /* ended call records, for the next calls */
    unsigned nspare;
    char address[256];
    /* options */
    int timeout_ms, connect_timeout_ms, hb_ms, hb_timeout_ms;
    int backoff_min_ms, backoff_max_ms, breaker_open_ms;
    unsigned retries, breaker_threshold, credits_opt, queue_max;
    unsigned char *secret;
    size_t secret_len;
    rdmx_channel_state_cb_t state_cb;
    void *state_arg;
    /* connection */
    rdmx_channel_state_t state;
    rdmx_ep_t *ep;
    int welcomed;         /* at least one WELCOME ever (for reconnects) */
    int handshaking;      /* HELLO sent, waiting for WELCOME */
    uint64_t handshake_deadline;
    unsigned credits;
    int rings_wanted; /* ask for the server's rings (rpc.h) */
    uint64_t max_message;
    uint32_t nhandlers;
    uint32_t *h_ids, *h_flags;
    int backoff_ms;
    uint64_t reconnect_at;
    volatile int rx_seen; /* something arrived since the last timer */
    int hb_idle;          /* no call in flight at the last timer: no pings */
    unsigned sends;       /* requests UCX is still sending (the server may
                             be pulling them: it is alive) */
    uint64_t last_rx, last_ping;
    uint64_t last_tick; /* when the timer last ran, or a call made the
                           channel busy (hb_window) */
    /* calls */
    call_slot_t *slots; /* id -> call_t (queued, sent, ghosts) */
    uint32_t nslots;
    uint32_t free_slot;   /* first free slot, or CH_SLOT_NONE */
    rdmx_list_t queue;    /* waiting for credits or the connection */
    rdmx_list_t sent;     /* on the wire, answer not yet here */
    unsigned nqueued;
    unsigned inflight;    /* sent + ghosts */
    /* breaker */
    rdmx_breaker_state_t breaker;
    unsigned consecutive_failures;
    uint64_t open_until;
    int probe_inflight;
    rdmx_status_t last_error;
    char last_message[256];
    int wait_for_ready;         /* calls wait through DOWN (rpc.h) */
    rdmx_status_t conn_error;   /* why the last connection ended or failed */
    char conn_message[384];
    rdmx_hook_t hook;
    rdmx_list_t ctl_rndv; /* ctl_pend_t: large control messages arriving */
    method_t *methods;
    unsigned nmethods;
    int last_midx;
    /* the connection's rings in the server's memory, mapped here
     * (docs/RPC_RINGS.md; ring_rmem NULL: none): requests we write, and
     * their answers, which the worker's poller reads; the id of the call
     * each request slot belongs to until its answer (0: free) */
    rdmx_rmem_t *ring_rmem;
    rdmx_ring_t ring;
    rdmx_ring_t ans;
    rdmx_poller_t poller;
    uint64_t ring_owner[RDMX_RING_SLOTS];
    uint32_t msgs_out; /* REQUEST and ONEWAY messages sent on the
                          connection: a record's `after` */
    unsigned char ans_rec[RDMX_RING_STRIDE]; /* an answer copied out */
    rdmx_channel_stats_t stats;
};

static void start_connect(rdmx_channel_t *ch);
static void pump(rdmx_channel_t *ch);

/* --- helpers ------------------------------------------------------------- */

static void report(rdmx_channel_t *ch, rdmx_status_t status)
{
    if (ch->state_cb != NULL)
        ch->state_cb(ch, ch->state, ch->breaker, status, ch->state_arg);
}

static void set_state(rdmx_channel_t *ch, rdmx_channel_state_t state,
                      rdmx_status_t status)
{
    if (ch->state == state)
        return;
    /* (rdmx_channel_state() reads it from any thread) */
    __atomic_store_n(&ch->state, state, __ATOMIC_RELAXED);
    report(ch, status);
}

static void set_breaker(rdmx_channel_t *ch, rdmx_breaker_state_t b,
                        rdmx_status_t status)
{
    if (ch->breaker == b)
        return;
    ch->breaker = b;
    report(ch, status);
}

static void arm(rdmx_channel_t *ch, uint64_t at)
{
    if (at < ch->hook.next_ns)
        ch->hook.next_ns = at;
}

static int method_index(rdmx_channel_t *ch, uint32_t id, const char *name)
{
    if (ch->last_midx >= 0 && ch->methods[ch->last_midx].id == id)
        return ch->last_midx;
    for (unsigned i = 0; i < ch->nmethods; i++)
        if (ch->methods[i].id == id)
            return ch->last_midx = (int)i;
    if (ch->nmethods == CH_METHODS_MAX)
        return -1;
    if (ch->methods == NULL) {
        ch->methods = calloc(CH_METHODS_MAX, sizeof(*ch->methods));
        if (ch->methods == NULL)
            return -1;
    }
    ch->methods[ch->nmethods].id = id;
    snprintf(ch->methods[ch->nmethods].name, RDMX_RPC_NAME_MAX + 1, "%s",
             name);
    return ch->last_midx = (int)ch->nmethods++;
}

static int handler_idempotent(rdmx_channel_t *ch, uint32_t id)
{
    for (uint32_t i = 0; i < ch->nhandlers; i++)
        if (ch->h_ids[i] == id)
            return !!(ch->h_flags[i] & RDMX_RPC_IDEMPOTENT);
    return 0;
}

/* Does @st say the server or the path failed (breaker, retries)? */
static int is_failure(rdmx_status_t st)
{
    switch (st) {
    case RDMX_ERR_TIMEOUT:
    case RDMX_ERR_CONN_RESET:
    case RDMX_ERR_CONN_CLOSED:
    case RDMX_ERR_CONN_REFUSED:
    case RDMX_ERR_UNREACHABLE:
    case RDMX_ERR_IO:
        return 1;
    default:
        return 0;
    }
}

/* --- calls ----------------------------------------------------------------- */

static void call_free(call_t *c)
{
    if (c->holds > 0) {
        c->ch = NULL; /* freed by the last completion that holds it */
        return;
    }
    /* (a call is freed once, after it left ch->sent or ch->calls; the
     * analyzer loses track of the intrusive lists and sees it freed twice) */
    if (c->buf != c->inl)
        rdmx__buf_free(c->buf);
    rdmx__buf_free(c->resp);
    if (c->ch != NULL && c->ch->nspare < CH_SPARE_MAX) {
        c->next_spare = c->ch->spare;
        c->ch->spare = c;
        c->ch->nspare++;
        return;
    }
    free(c);
}

/* Give @c a slot and so its id; RDMX_OK or RDMX_ERR_NO_MEMORY (the
 * table doubles when full, up to 2^31 slots). */
static rdmx_status_t slot_take(rdmx_channel_t *ch, call_t *c)
{
    uint32_t i = ch->free_slot;

    if (i == CH_SLOT_NONE) {
        uint32_t n = ch->nslots ? ch->nslots * 2 : CH_SLOTS_MIN;
        call_slot_t *t;
        if (ch->nslots >= (1u << 31) ||
            (t = realloc(ch->slots, n * sizeof(*t))) == NULL)
            return rdmx__error(RDMX_ERR_NO_MEMORY,
                               "call: out of memory for %u calls", n);
        for (uint32_t k = ch->nslots; k < n; k++) {
            t[k].call = NULL;
            t[k].gen = 1;
            t[k].next_free = k + 1 < n ? k + 1 : CH_SLOT_NONE;
        }
        ch->slots = t;
        i = ch->nslots;
        ch->nslots = n;
    }
    ch->free_slot = ch->slots[i].next_free;
    ch->slots[i].call = c;
    c->id = (uint64_t)ch->slots[i].gen << 32 | i;
    c->linked = 1;
    return RDMX_OK;
}

/* The live call of id @id, or NULL. */
static call_t *slot_find(const rdmx_channel_t *ch, uint64_t id)
{
    uint32_t i = (uint32_t)id;

    if (i >= ch->nslots || ch->slots[i].gen != (uint32_t)(id >> 32))
        return NULL;
    return ch->slots[i].call;
}

static void call_unlink(rdmx_channel_t *ch, call_t *c)
{
    if (c->linked) {
        call_slot_t *sl = &ch->slots[(uint32_t)c->id];
        sl->call = NULL;
        if (++sl->gen == 0)
            sl->gen = 1;
        sl->next_free = ch->free_slot;
        ch->free_slot = (uint32_t)c->id;
        c->linked = 0;
    }
    rdmx_list_del(&c->link);
}

/* Run @c's callback. */
static void tell(call_t *c, rdmx_status_t status, const void *data, size_t len,
                 const char *msg)
{
    rdmx_call_result_t r;

    r.status = status;
    r.data = status == RDMX_OK ? data : NULL;
    r.length = status == RDMX_OK ? len : 0;
    r.message = msg ? msg : (status == RDMX_OK ? "" : rdmx_strerror(status));
    r.call_id = c->id;
    if (c->cb != NULL)
        c->cb(&r, c->arg);
}

/* Tell the user how @c ended. The record lives on while the server still
 * owes an answer (state SENT): it holds the credit. */
static void complete_at(rdmx_channel_t *ch, call_t *c, rdmx_status_t status,
                        const void *data, size_t len, const char *msg,
                        uint64_t now)
{
    method_t *m;

    if (c->done)
        return;
    c->done = 1;
    if (c->midx >= 0) {
        m = &ch->methods[c->midx];
        m->c.calls++;
        m->c.bytes_out += c->len;
        rdmx__hist_add(&m->c.hist, rdmx_since(now, c->start_ns));
        if (status == RDMX_OK)
            m->c.bytes_in += len;
        else
            m->c.errors++;
        if (status == RDMX_ERR_TIMEOUT)
            m->c.timeouts++;
    }
    if (status == RDMX_OK)
        ch->stats.completed++;
    else
        ch->stats.failed++;
    if (status == RDMX_ERR_TIMEOUT)
        ch->stats.timeouts++;

    /* Breaker: failures of the path count, answers (even errors) reset. */
    if (ch->breaker_threshold > 0 && status != RDMX_ERR_CANCELED) {
        if (is_failure(status)) {
            ch->consecutive_failures++;
            if ((c->probe && ch->breaker == RDMX_BREAKER_HALF_OPEN) ||
                (ch->breaker == RDMX_BREAKER_CLOSED &&
                 ch->consecutive_failures >= ch->breaker_threshold)) {
                ch->open_until = now + (uint64_t)ch->breaker_open_ms * 1000000;
                arm(ch, ch->open_until);
                set_breaker(ch, RDMX_BREAKER_OPEN, status);
            }
        } else {
            ch->consecutive_failures = 0;
            if (ch->breaker != RDMX_BREAKER_CLOSED)
                set_breaker(ch, RDMX_BREAKER_CLOSED, RDMX_OK);
        }
    }
    if (c->probe)
        ch->probe_inflight = 0;
    if (status != RDMX_OK) {
        ch->last_error = status;
        snprintf(ch->last_message, sizeof(ch->last_message), "%s",
                 msg ? msg : rdmx_strerror(status));
    }

    if (c->rx_busy || (c->body_sends > 0 && !c->answered)) {
        /* The answer is landing in the caller's memory, or the request is
         * being sent from it: the caller may have it back only once the
         * transport uses it no more (mem_released). An answer says the
         * server has the whole request, even if the send's end is still
         * to be reported. A send that does not end in time is ended by
         * closing the connection (expire_calls). */
        c->end_deferred = 1;
        c->end_status = status;
        snprintf(c->end_msg, sizeof(c->end_msg), "%s",
                 msg ? msg : rdmx_strerror(status));
        if (c->body_sends > 0) {
            c->body_until = now + LENT_GRACE_MS * 1000000ull;
            arm(ch, c->body_until);
        }
        return;
    }
    tell(c, status, data, len, msg);
}

/* The transport let go of some of @c's use of the caller's memory: a call
 * that ended meanwhile tells its caller once it uses none. */
static void mem_released(call_t *c)
{
    if (c->end_deferred && !c->rx_busy && (c->body_sends == 0 || c->answered)) {
        c->end_deferred = 0;
        c->body_until = 0;
        tell(c, c->end_status, NULL, 0, c->end_msg);
    }
}

static void complete(rdmx_channel_t *ch, call_t *c, rdmx_status_t status,
                     const void *data, size_t len, const char *msg)
{
    complete_at(ch, c, status, data, len, msg, rdmx_now_ns());
}

/* Drop a call record that no longer waits for anything. */
/* A buffer lent for writing is fenced: the server's writes into it go
 * through this process's worker, which applies none once the connection
 * is closed (core.h, RDMX_ACCESS_FENCED). */
static unsigned bulk_access(const rdmx_rpc_bulk_t *b)
{
    return b->access | (b->access & RDMX_ACCESS_WRITE ? RDMX_ACCESS_FENCED
                                                       : 0u);
}

/* A sent call ends before its answer: tell the server; one that lent a
 * buffer completes later (see the top of this file). */
static void end_sent(rdmx_channel_t *ch, call_t *c, rdmx_status_t status,
                     const char *msg)
{
    if (c->lent_until != 0)
        return; /* already ending */
    if (ch->ep != NULL)
        rdmx__rpc_send_ctl(ch->ep, RDMX_RPC_MSG_CANCEL, c->id, 0);
    if (!c->lent) {
        complete(ch, c, status, NULL, 0, msg); /* the ghost keeps the credit */
        return;
    }
    c->lent_status = status;
    snprintf(c->lent_msg, sizeof(c->lent_msg), "%s", msg);
    c->lent_until = rdmx_now_ns() + LENT_GRACE_MS * 1000000ull;
    arm(ch, c->lent_until);
}

static void retire(rdmx_channel_t *ch, call_t *c)
{
    if (c->state == CALL_QUEUED)
        ch->nqueued--;
    call_unlink(ch, c);
    call_free(c);
}

static void send_done(rdmx_status_t status, size_t length, void *arg)
{
    call_t *c = arg;

    (void)status;
    (void)length;
    if (c->sending && c->ch != NULL) {
        c->ch->sends--;
        c->ch->rx_seen = 1; /* the peer took the request: it is alive */
    }
    c->sending = 0;
    if (c->body_len > 0) {
        c->body_sends--;
        mem_released(c);
    }
    c->holds--;
    if (c->ch == NULL)
        call_free(c);
}

/* Start a fresh heartbeat window at @now unless silence since the last one
 * already says something: not when the channel was just idle, answers came
 * since, or nobody progressed the worker for a heartbeat (no ping could go
 * out). */
static void hb_window(rdmx_channel_t *ch, uint64_t now, uint64_t hb)
{
    if (ch->hb_idle || ch->rx_seen || rdmx_since(now, ch->last_tick) > hb) {
        ch->hb_idle = 0;
        ch->rx_seen = 0;
        ch->last_rx = now;
    }
    ch->last_tick = now;
}

/* A call in flight again on an idle channel, at @now: the timer's
 * heartbeat step, done here (its window starts now: an idle channel went
 * idle on an answer or a new connection), so that the timer need not run
 * at once; it looks again within half a heartbeat, as after each run. */
static void hb_busy(rdmx_channel_t *ch, uint64_t now)
{
    uint64_t hb = (uint64_t)ch->hb_ms * 1000000;

    hb_window(ch, now, hb);
    arm(ch, now + hb / 2);
}

/* --- the server's ring (docs/RPC_RINGS.md) ---------------------------------
 */

/* The server's rings go with the connection they came on. */
static void ring_detach(rdmx_channel_t *ch)
{
    if (ch->ring_rmem == NULL)
        return;
    rdmx__poller_del(ch->w, &ch->poller);
    rdmx_rmem_destroy(ch->ring_rmem);
    ch->ring_rmem = NULL;
    ch->ring.base = ch->ans.base = NULL;
    memset(ch->ring_owner, 0, sizeof(ch->ring_owner));
}

/* The answers the server wrote into this channel's ring since the last
 * look, up to 16 (the worker's poller: a progress pass), each handled as
 * the same answer by message would be. */
static unsigned ans_poll(rdmx_poller_t *p)
{
    rdmx_channel_t *ch = rdmx_container_of(p, rdmx_channel_t, poller);
    unsigned n = 0;
    uint64_t now = 0;
    char why[160];

    /* (the mapping goes with the endpoint, maybe before we hear of it) */
    while (n < 16 && rdmx__rmem_mapped(ch->ring_rmem)) {
        rdmx_rpc_msg_t m;
        uint32_t after;
        int r = rdmx__ring_read(&ch->ans, RDMX_RPC_MSG_RESPONSE, &m,
                                ch->ans_rec, &after, why, sizeof(why));

        if (r == 0)
            break;
        rdmx__ring_consume(&ch->ans);
        n++;
        if (r < 0) {
            rdmx__worker_proto_error(ch->w);
            rdmx_warn("rpc channel %s: malformed answer in its ring: %s",
                      ch->address, why);
            continue;
        }
        m.at_ns = now = rdmx__worker_enter(ch->w, now);
        ch->stats.ring_responses++;
        rdmx__channel_on_msg(&ch->link, ch->ep, &m);
    }
    return n;
}

/* The worker is about to sleep (@on) or polls again: the ring's sleeping
 * word (a server that writes an answer then wakes it). */
static void ans_doze(rdmx_poller_t *p, int on)
{
    rdmx_channel_t *ch = rdmx_container_of(p, rdmx_channel_t, poller);

    if (rdmx__rmem_mapped(ch->ring_rmem)) /* (else the endpoint is going:
                                           * its error wakes the worker) */
        rdmx__ring_sleeping(&ch->ans, on);
}

/* After the mark and the heavy fence: 1 when an answer already waits. */
static int ans_waiting(rdmx_poller_t *p)
{
    rdmx_channel_t *ch = rdmx_container_of(p, rdmx_channel_t, poller);

    return rdmx__rmem_mapped(ch->ring_rmem) && rdmx__ring_pending(&ch->ans, 0);
}

/* RING: the server's rings for this connection. Mapped where the
 * transport maps them; else (or on any failure) calls keep going as
 * messages. */
static void on_ring(rdmx_channel_t *ch, rdmx_rpc_msg_t *m)
{
    rdmx_status_t st;

    if (ch->ring_rmem != NULL || m->h.payload != 0 ||
        m->h.aux > RDMX_RING_DESC_MAX) {
        rdmx__worker_proto_error(ch->w);
        rdmx_warn("rpc channel %s: unexpected RING (%u bytes)", ch->address,
                  m->h.aux);
        return;
    }
    st = rdmx__rings_attach(ch->ep, m->data, m->h.aux, &ch->ring_rmem,
                            &ch->ring, &ch->ans);
    if (st != RDMX_OK) {
        rdmx_debug("rpc channel %s: server's rings not used: %s", ch->address,
                   st == RDMX_ERR_UNSUPPORTED ? "not mapped here"
                                              : rdmx_error_detail());
        return;
    }
    memset(ch->ring_owner, 0, sizeof(ch->ring_owner));
    ch->msgs_out = 0; /* (RING comes before WELCOME: no call sent yet) */
    ch->poller.poll = ans_poll;
    ch->poller.doze = ans_doze;
    ch->poller.waiting = ans_waiting;
    ch->poller.fenced = 0; /* (the server fences its answers: ring.c) */
    rdmx__poller_add(ch->w, &ch->poller);
}

/* Write @c's request (header @h) into the server's ring if it has one, the
 * request fits a slot and the slot is free (the call written there a
 * ring's length before was answered): else it goes as a message, and
 * messages made in one pass batch (docs/RPC_RINGS.md, "Rings or
 * batches"); 1 if it did. */
static int ring_send(rdmx_channel_t *ch, call_t *c, const rdmx_rpc_hdr_t *h)
{
    uint32_t s = (uint32_t)(ch->ring.next % RDMX_RING_SLOTS);
    size_t head = (size_t)c->aux_len + c->len - c->body_len;

    if (ch->ring.base == NULL || ch->ring_owner[s] != 0 ||
        !rdmx__ring_fits((size_t)c->aux_len + c->len) ||
        !rdmx__rmem_mapped(ch->ring_rmem))
        return 0;
    if (rdmx__ring_write(&ch->ring, h, ch->msgs_out, c->buf, head, c->body,
                         c->body_len))
        /* the server may sleep: a message wakes it */
        rdmx__rpc_send_ctl(ch->ep, RDMX_RPC_MSG_WAKE, 0, 0);
    ch->ring_owner[s] = c->id;
    c->ring_slot = s + 1;
    ch->stats.ring_calls++;
    return 1;
}

/* @c's answer came: the server read its ring slot long before. */
static void ring_release(rdmx_channel_t *ch, call_t *c)
{
    if (c->ring_slot != 0 && ch->ring_owner[c->ring_slot - 1] == c->id)
        ch->ring_owner[c->ring_slot - 1] = 0;
    c->ring_slot = 0;
}

/* Put @c on the wire; 0 on success, -1 to keep it queued. @now is the
 * time if the caller just read it, else 0. @more: more calls follow at
 * once (the request may wait for them in the endpoint's batch). */
static int call_send(rdmx_channel_t *ch, call_t *c, uint64_t now, int more)
{
    rdmx_rpc_hdr_t h;
    rdmx_status_t st;

    rdmx__rpc_hdr(&h, RDMX_RPC_MSG_REQUEST, c->method, c->id);
    h.flags = (uint16_t)c->flags;
    if (c->attempts > 0)
        h.flags |= RDMX_RPC_F_RETRY;
    h.aux = c->aux_len;
    h.payload = c->len;
    if (c->deadline_ns != 0) {
        if (now == 0)
            now = rdmx_now_ns();
        uint64_t left = c->deadline_ns > now ? (c->deadline_ns - now) / 1000 : 1;
        h.deadline_us = left == 0 ? 1 : left > UINT32_MAX ? UINT32_MAX
                                                         : (uint32_t)left;
    }
    c->ring_slot = 0;
    if (ring_send(ch, c, &h)) {
        st = RDMX_OK;
    } else if (c->body_len == 0) {
        st = rdmx__rpc_send_keep(
            ch->ep, &h, c->buf, (size_t)c->aux_len + c->len,
            more ? RDMX_SEND_MORE : RDMX_SEND_BURST, send_done, c);
    } else if (c->aux_len + c->len == c->body_len) { /* the body alone */
        st = rdmx__rpc_send_keep(ch->ep, &h, c->body, c->body_len,
                                 more ? RDMX_SEND_MORE : RDMX_SEND_BURST,
                                 send_done, c);
    } else {
        st = rdmx__rpc_send_gather(ch->ep, &h, c->buf,
                                   (size_t)c->aux_len + c->len - c->body_len,
                                   c->body, c->body_len, send_done, c);
    }
    if (st != RDMX_OK && st != RDMX_INPROGRESS)
        return -1;
    if (c->ring_slot == 0)
        ch->msgs_out++; /* (a ring record after it runs after it) */
    if (st == RDMX_INPROGRESS) {
        c->holds++;
        c->sending = 1;
        ch->sends++;
        if (c->body_len > 0)
            c->body_sends++;
    }
    c->attempts++;
    c->state = CALL_SENT;
    rdmx_list_insert_tail(&ch->sent, &c->link);
    if (ch->inflight++ == 0 && ch->hb_ms > 0)
        hb_busy(ch, now != 0 ? now : rdmx_now_ns());
    return 0;
}

/* Send queued calls while credits last. */
static void pump(rdmx_channel_t *ch)
{
    uint64_t now = 0;

    while (ch->state == RDMX_CHANNEL_READY && ch->inflight < ch->credits &&
           !rdmx_list_empty(&ch->queue)) {
        call_t *c = rdmx_container_of(ch->queue.next, call_t, link);
        if (c->deadline_ns != 0) {
            if (now == 0)
                now = rdmx_now_ns();
            if (now >= c->deadline_ns) {
                /* expired while queued: it must not reach the server */
                complete(ch, c, RDMX_ERR_TIMEOUT, NULL, 0,
                         "deadline passed before the call was sent");
                retire(ch, c);
                continue;
            }
        }
        rdmx_list_del(&c->link);
        ch->nqueued--;
        /* queued calls that the credits let go leave as batches (after a
         * reconnect, or when credits come back outside a progress pass) */
        if (call_send(ch, c, now,
                      c->more || (!rdmx_list_empty(&ch->queue) &&
                                  ch->inflight + 1 < ch->credits)) != 0) {
            rdmx_list_t *head = &ch->queue;
            /* back to the front; the endpoint's error will follow */
            c->link.next = head->next;
            c->link.prev = head;
            head->next->prev = &c->link;
            head->next = &c->link;
            ch->nqueued++;
            return;
        }
    }
}

/* --- connection --------------------------------------------------------------- */

/* Close the channel's connection. With a lent buffer out (a call that
 * lent one and has no answer yet), abort it: the server must see the end
 * before it could act on anything still queued for it (docs/RPC.md,
 * "Lent buffers"). With a request still being sent from its caller's
 * memory, abort too: that ends the send now, where an orderly close would
 * wait for a server that may never take it. Else close in order. */
static void close_ep(rdmx_channel_t *ch)
{
    rdmx_list_t *pos;
    int lent = 0;

    if (ch->ep == NULL)
        return;
    ring_detach(ch);
    rdmx_list_for_each(pos, &ch->sent)
    {
        call_t *c = rdmx_container_of(pos, call_t, link);
        if ((c->lent && (!c->done || c->lent_until != 0)) || c->body_sends > 0)
            lent = 1;
    }
    rdmx__ep_set_upper(ch->ep, NULL);
    if (lent)
        rdmx__ep_abort(ch->ep);
    else
        rdmx_ep_close(ch->ep);
    ch->ep = NULL;
}

/* The connection is gone: fail or requeue what was on it, then reconnect. */
static void conn_lost(rdmx_channel_t *ch, rdmx_status_t status,
                      const char *msg, int permanent)
{
    rdmx_list_t *e, retry;
    uint64_t now = rdmx_now_ns();
    int was_ready = ch->state == RDMX_CHANNEL_READY;

    rdmx_info("rpc: channel to %s lost its connection (%s): %s", ch->address,
              rdmx_status_name(status), msg);
    ch->conn_error = status;
    snprintf(ch->conn_message, sizeof(ch->conn_message), "%s", msg);
    close_ep(ch);
    ch->handshaking = 0;
    ch->inflight = 0;
    rdmx_list_init(&retry);
    while ((e = rdmx_list_pop(&ch->sent)) != NULL) {
        call_t *c = rdmx_container_of(e, call_t, link);
        if (c->done) { /* ghost: its credit went with the connection */
            call_unlink(ch, c);
            call_free(c);
            continue;
        }
        if (c->lent_until != 0) { /* ended; the connection is gone now */
            c->state = CALL_QUEUED;
            complete(ch, c, c->lent_status, NULL, 0, c->lent_msg);
            call_unlink(ch, c);
            call_free(c);
            continue;
        }
        /* (not one whose answer is landing in, or whose request is still
         * being sent from, the caller's memory: the old connection's
         * transfer may go on until the transport lets go of it) */
        if (!permanent && !c->rx_busy && c->body_sends == 0 &&
            c->attempts <= ch->retries &&
            ((c->flags & RDMX_RPC_F_IDEMPOTENT) ||
             handler_idempotent(ch, c->method)) &&
            (c->deadline_ns == 0 || now < c->deadline_ns)) {
            c->state = CALL_QUEUED;
            rdmx_list_insert_tail(&retry, &c->link);
            ch->stats.retries++;
            continue;
        }
        c->state = CALL_QUEUED; /* not on the wire any more */
        complete(ch, c, status, NULL, 0, msg);
        call_unlink(ch, c);
        call_free(c);
    }
    /* Retries go first, in their original order: splice the retry list in
     * front of the queue. */
    if (!rdmx_list_empty(&retry)) {
        rdmx_list_t *first = retry.next, *last = retry.prev;
        for (e = first; e != &retry; e = e->next)
            ch->nqueued++;
        last->next = ch->queue.next;
        ch->queue.next->prev = last;
        ch->queue.next = first;
        first->prev = &ch->queue;
    }
    if (permanent || (!ch->wait_for_ready && !was_ready)) {
        /* Fail fast: an attempt to connect failed (or the failure is for
         * good): what waited for it fails now, with its reason. */
        rdmx_status_t qst = permanent ? status : RDMX_ERR_UNREACHABLE;
        while ((e = rdmx_list_pop(&ch->queue)) != NULL) {
            call_t *c = rdmx_container_of(e, call_t, link);
            ch->nqueued--;
            complete(ch, c, qst, NULL, 0, msg);
            call_unlink(ch, c);
            call_free(c);
        }
        if (permanent) {
            set_state(ch, RDMX_CHANNEL_CLOSED, status);
            return;
        }
    }
    {
        /* exponential backoff with +-25 % jitter */
        int b = ch->backoff_ms;
        int jitter = b / 2 > 0 ? (int)(rdmx_now_ns() % (uint64_t)(b / 2 + 1))
                               : 0;
        ch->reconnect_at = now + (uint64_t)(b - b / 4 + jitter) * 1000000;
        ch->backoff_ms = b * 2 > ch->backoff_max_ms ? ch->backoff_max_ms
                                                    : b * 2;
        arm(ch, ch->reconnect_at);
    }
    rdmx_debug("rpc channel %s: down (%s); reconnecting", ch->address, msg);
    set_state(ch, RDMX_CHANNEL_DOWN, status);
}

static void ch_ep_error(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    rdmx_channel_t *ch = arg;
    char msg[400];

    if (ch->ep != ep) {
        rdmx_ep_close(ep);
        return;
    }
    snprintf(msg, sizeof(msg), "connection to %s lost: %s", ch->address,
             rdmx_strerror(status));
    conn_lost(ch, status == RDMX_ERR_CONN_CLOSED ? RDMX_ERR_CONN_RESET
                                                  : status,
              msg, 0);
}

static void ch_connected(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    rdmx_channel_t *ch = arg;
    unsigned char hello[RDMX_RPC_HELLO_SIZE] = {0};
    rdmx_rpc_hdr_t h;
    char msg[400];

    if (ch->ep != ep) {
        rdmx_ep_close(ep);
        return;
    }
    if (status != RDMX_OK) {
        /* (the endpoint's own record of what ended it, not the thread's
         * last detail: "refused: server at its connection limit (N)") */
        snprintf(msg, sizeof(msg), "connection to %s: %s", ch->address,
                 rdmx__ep_why(ep));
        /* A wrong or missing secret does not get better by retrying. */
        conn_lost(ch, status, msg, status == RDMX_ERR_DENIED);
        return;
    }
    rdmx__ep_set_upper(ep, ch);
    rdmx__rpc_hdr(&h, RDMX_RPC_MSG_HELLO, 0, 0);
    h.aux = RDMX_RPC_HELLO_SIZE;
    if (ch->rings_wanted && rdmx_ep_transport(ep) == RDMX_TRANSPORT_SHM)
        hello[0] = RDMX_RPC_HELLO_F_RINGS; /* (u32, little-endian) */
    ch->handshaking = 1;
    ch->handshake_deadline =
        ch->connect_timeout_ms < 0
            ? UINT64_MAX
            : rdmx_now_ns() + (uint64_t)ch->connect_timeout_ms * 1000000;
    arm(ch, ch->handshake_deadline);
    if (rdmx__rpc_send(ep, &h, hello, sizeof(hello)) != RDMX_OK)
        conn_lost(ch, RDMX_ERR_CONN_RESET, "HELLO could not be sent", 0);
}

static void start_connect(rdmx_channel_t *ch)
{
    rdmx_ep_params_t ep = {
        .field_mask = RDMX_EP_PARAM_FIELD_ERROR_CB |
                      RDMX_EP_PARAM_FIELD_USER_DATA |
                      RDMX_EP_PARAM_FIELD_AUTH_SECRET |
                      RDMX_EP_PARAM_FIELD_CONNECT_CB |
                      RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT,
        .error_cb = ch_ep_error,
        .user_data = ch,
        .auth_secret = ch->secret,
        .auth_secret_len = ch->secret_len,
        .connect_cb = ch_connected,
        .connect_timeout_ms = ch->connect_timeout_ms,
    };
    rdmx_status_t st;

    ch->reconnect_at = UINT64_MAX;
    set_state(ch, RDMX_CHANNEL_CONNECTING, RDMX_OK);
    st = rdmx_connect_nb(ch->w, ch->address, &ep, &ch->ep);
    if (st != RDMX_OK && st != RDMX_INPROGRESS) {
        char msg[400];
        snprintf(msg, sizeof(msg), "connect to %s: %s", ch->address,
                 rdmx_error_detail());
        ch->ep = NULL;
        conn_lost(ch, st, msg, st == RDMX_ERR_INVALID);
    }
}

static void on_welcome(rdmx_channel_t *ch, rdmx_rpc_msg_t *m)
{
    rdmx_rpc_welcome_t wl;
    char why[160];
    uint32_t *ids, *flags;

    if (!ch->handshaking || m->h.payload != 0 ||
        rdmx_rpc_welcome_decode(m->data, m->h.aux, &wl, why, sizeof(why)) !=
            RDMX_OK) {
        conn_lost(ch, RDMX_ERR_PROTO, "bad WELCOME from the server", 0);
        return;
    }
    ids = malloc((wl.nhandlers + 1) * sizeof(*ids));
    flags = malloc((wl.nhandlers + 1) * sizeof(*flags));
    if (ids == NULL || flags == NULL) {
        free(ids);
        free(flags);
        conn_lost(ch, RDMX_ERR_NO_MEMORY, "out of memory", 0);
        return;
    }
    for (uint32_t i = 0; i < wl.nhandlers; i++) {
        const unsigned char *p = wl.handlers + (size_t)i * 8;
        ids[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
        flags[i] = (uint32_t)p[4] | (uint32_t)p[5] << 8 |
                   (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    }
    free(ch->h_ids);
    free(ch->h_flags);
    ch->h_ids = ids;
    ch->h_flags = flags;
    ch->nhandlers = wl.nhandlers;
    ch->credits = wl.credits;
    if (ch->credits_opt != 0 && ch->credits_opt < ch->credits)
        ch->credits = ch->credits_opt;
    ch->max_message = wl.max_message;
    ch->handshaking = 0;
    ch->backoff_ms = ch->backoff_min_ms;
    ch->last_rx = ch->last_ping = rdmx_now_ns();
    if (ch->welcomed)
        ch->stats.reconnects++;
    ch->welcomed = 1;
    if (ch->hb_ms > 0)
        arm(ch, ch->last_rx + (uint64_t)ch->hb_ms * 1000000);
    set_state(ch, RDMX_CHANNEL_READY, RDMX_OK);
    pump(ch);
}

/* --- receive ------------------------------------------------------------------- */

static void answer_arrived(rdmx_channel_t *ch, call_t *c, rdmx_status_t st,
                           const void *data, size_t len, uint64_t now)
{
    char msg[257];

    rdmx_list_del(&c->link);
    ring_release(ch, c);
    if (ch->inflight > 0)
        ch->inflight--;
    if (c->done) {
        ch->stats.late_responses++;
    } else if (c->lent_until != 0) {
        /* the server's word: it will not write into the buffer any more */
        ch->stats.late_responses++;
        complete_at(ch, c, c->lent_status, NULL, 0, c->lent_msg, now);
    } else if (st == RDMX_OK) {
        complete_at(ch, c, RDMX_OK, data, len, NULL, now);
    } else {
        size_t n = len < sizeof(msg) - 1 ? len : sizeof(msg) - 1;
        memcpy(msg, data, n);
        msg[n] = '\0';
        complete_at(ch, c, st, NULL, 0, msg, now);
    }
    call_unlink(ch, c);
    call_free(c);
    if (!rdmx_list_empty(&ch->queue)) /* (the common case: nothing waits) */
        pump(ch);
}

static void resp_rndv_done(rdmx_status_t status, size_t length, void *arg)
{
    call_t *c = arg;
    rdmx_channel_t *ch = c->ch;

    c->holds--;
    if (ch == NULL) {
        call_free(c);
        return;
    }
    if (status != RDMX_OK || c->state != CALL_SENT || !c->linked)
        return; /* the connection went; conn_lost handled the call */
    answer_arrived(ch, c, RDMX_OK, c->resp, length, rdmx_now_ns());
}

/* A response came by rendezvous into the caller's pieces (c->into). */
static void resp_into_done(rdmx_status_t status, size_t length, void *arg)
{
    call_t *c = arg;
    rdmx_channel_t *ch = c->ch;

    c->holds--;
    c->rx_busy = 0;
    mem_released(c); /* (tells a call that ended while the answer landed) */
    if (ch == NULL) {
        call_free(c);
        return;
    }
    if (status != RDMX_OK || c->state != CALL_SENT || !c->linked)
        return; /* the connection went; conn_lost handled the call */
    if (!c->done)
        ch->stats.responses_in_place++;
    answer_arrived(ch, c, RDMX_OK, c->into[0].base, length, rdmx_now_ns());
}

/* A control message (WELCOME of a server with many handlers) too large to
 * arrive eagerly: fetch it, then handle it as if it had. */
typedef struct {
    rdmx_list_t link;     /* ch->ctl_rndv */
    rdmx_channel_t *ch;   /* NULL once the channel is gone */
    rdmx_ep_t *ep;
    rdmx_rpc_msg_t m;
    unsigned char data[];
} ctl_pend_t;

static void ctl_rndv_done(rdmx_status_t status, size_t length, void *arg)
{
    ctl_pend_t *p = arg;
    rdmx_channel_t *ch = p->ch;

    (void)length;
    if (ch != NULL) {
        rdmx_list_del(&p->link);
        if (status == RDMX_OK && ch->ep == p->ep) {
            p->m.rndv = 0;
            p->m.data = p->data;
            p->m.at_ns = rdmx_now_ns();
            rdmx__channel_on_msg(&ch->link, p->ep, &p->m);
        }
    }
    free(p);
}

rdmx_status_t rdmx__channel_on_msg(rdmx_rpc_link_t *link, rdmx_ep_t *ep,
                                  rdmx_rpc_msg_t *m)
{
    rdmx_channel_t *ch = (rdmx_channel_t *)link;
    call_t *c;

    ch->rx_seen = 1;
    if (m->rndv && m->h.kind != RDMX_RPC_MSG_RESPONSE) {
        ctl_pend_t *p = m->length <= (1u << 20)
                            ? malloc(sizeof(*p) + m->length)
                            : NULL;
        if (p == NULL) {
            rdmx__msg_release(ch->w, m->data);
            conn_lost(ch, RDMX_ERR_PROTO, "oversized control message", 0);
            return RDMX_INPROGRESS; /* released above */
        }
        p->ch = ch;
        p->ep = ep;
        p->m = *m;
        rdmx_list_insert_tail(&ch->ctl_rndv, &p->link);
        if (rdmx__msg_recv(ep, m->data, p->data, m->length, ctl_rndv_done,
                           p) != RDMX_INPROGRESS) {
            rdmx_list_del(&p->link);
            free(p);
            conn_lost(ch, RDMX_ERR_NO_MEMORY, "out of memory", 0);
        }
        return RDMX_INPROGRESS; /* the descriptor is the receive's */
    }
    switch (m->h.kind) {
    case RDMX_RPC_MSG_RESPONSE:
    case RDMX_RPC_MSG_ERROR:
        if (m->h.id == 0 && m->h.kind == RDMX_RPC_MSG_ERROR) {
            /* about the connection itself (handshake) */
            char msg[257];
            size_t n = m->rndv ? 0
                       : m->length < sizeof(msg) - 1 ? m->length
                                                      : sizeof(msg) - 1;
            memcpy(msg, m->data, n);
            msg[n] = '\0';
            conn_lost(ch, m->h.status, msg, m->h.status == RDMX_ERR_DENIED);
            return RDMX_OK;
        }
        c = slot_find(ch, m->h.id);
        if (c == NULL || c->state != CALL_SENT) {
            ch->stats.late_responses++;
            return RDMX_OK;
        }
        /* The server had the whole request: a call that ended while it was
         * being sent may tell its caller (unless an answer is landing). */
        c->answered = 1;
        c->body_until = 0;
        mem_released(c);
        if (c->rx_busy) { /* a second answer while the first lands */
            ch->stats.late_responses++;
            if (!m->rndv)
                return RDMX_OK;
            rdmx__msg_release(ch->w, m->data);
            return RDMX_INPROGRESS; /* released above */
        }
        if (m->rndv && c->ninto > 0 && !c->done &&
            m->h.kind == RDMX_RPC_MSG_RESPONSE && m->h.aux == 0 &&
            m->length <= c->into_cap &&
            (c->ninto == 1 || rdmx__msg_scatters(ch->w))) {
            c->holds++;
            c->rx_busy = 1;
            if (rdmx__msg_recvv(ch->ep, m->data, c->into, c->ninto, m->length,
                                resp_into_done, c) != RDMX_INPROGRESS) {
                c->holds--;
                c->rx_busy = 0;
                answer_arrived(ch, c, RDMX_ERR_NO_MEMORY, "out of memory", 13,
                               m->at_ns);
            }
            return RDMX_INPROGRESS; /* the descriptor is the receive's */
        }
        if (m->rndv) {
            if ((c->resp = rdmx__buf_alloc(m->length)) == NULL) {
                answer_arrived(ch, c, RDMX_ERR_NO_MEMORY, "out of memory", 13,
                               m->at_ns);
                return RDMX_OK;
            }
            c->holds++;
            if (rdmx__msg_recv(ch->ep, m->data, c->resp, m->length,
                               resp_rndv_done, c) != RDMX_INPROGRESS) {
                c->holds--;
                answer_arrived(ch, c, RDMX_ERR_NO_MEMORY, "out of memory", 13,
                               m->at_ns);
            }
            return RDMX_INPROGRESS; /* the descriptor is the receive's */
        }
        answer_arrived(
            ch, c,
            m->h.kind == RDMX_RPC_MSG_RESPONSE ? RDMX_OK
                                               : (rdmx_status_t)m->h.status,
            (const unsigned char *)m->data + m->h.aux, m->h.payload, m->at_ns);
        return RDMX_OK;
    case RDMX_RPC_MSG_PONG:
        return RDMX_OK;
    case RDMX_RPC_MSG_PING:
        rdmx__rpc_send_ctl(ch->ep, RDMX_RPC_MSG_PONG, m->h.id, 0);
        return RDMX_OK;
    case RDMX_RPC_MSG_WELCOME:
        on_welcome(ch, m);
        return RDMX_OK;
    case RDMX_RPC_MSG_RING:
        on_ring(ch, m);
        return RDMX_OK;
    case RDMX_RPC_MSG_WAKE:
        return RDMX_OK; /* (it woke the worker: an answer is in the ring) */
    default:
        rdmx_debug("rpc channel %s: unexpected message kind %u", ch->address,
                   m->h.kind);
        rdmx__worker_proto_error(ch->w);
        return RDMX_OK;
    }
}

void rdmx__channel_on_bad(rdmx_rpc_link_t *link, rdmx_ep_t *ep,
                          const rdmx_rpc_hdr_t *h, const char *why)
{
    rdmx_channel_t *ch = (rdmx_channel_t *)link;

    (void)ep;
    (void)h;
    rdmx__worker_proto_error(ch->w);
    rdmx_warn("rpc channel %s: malformed message: %s", ch->address, why);
}

/* --- timers ------------------------------------------------------------------- */

/* Expire calls whose deadline passed; returns the earliest other deadline. */
static uint64_t expire_calls(rdmx_channel_t *ch, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    rdmx_list_t *lists[2] = {&ch->queue, &ch->sent};
    int teardown = 0;

    for (int i = 0; i < 2; i++) {
        rdmx_list_t *pos, *tmp;
        rdmx_list_for_each_safe(pos, tmp, lists[i])
        {
            call_t *c = rdmx_container_of(pos, call_t, link);
            char msg[96];
            if (c->body_until != 0) { /* ended; its request still sent */
                if (now >= c->body_until)
                    teardown = 2;
                else if (c->body_until < next)
                    next = c->body_until;
            }
            if (c->done)
                continue;
            if (c->lent_until != 0) {
                if (now >= c->lent_until)
                    teardown = 1;
                else if (c->lent_until < next)
                    next = c->lent_until;
                continue;
            }
            if (c->deadline_ns == 0)
                continue;
            if (now < c->deadline_ns) {
                if (c->deadline_ns < next)
                    next = c->deadline_ns;
                continue;
            }
            snprintf(msg, sizeof(msg), "deadline of %llu ms passed%s",
                     (unsigned long long)((c->deadline_ns - c->start_ns) /
                                          1000000),
                     c->state == CALL_QUEUED ? " before the call was sent"
                                             : "");
            if (c->state == CALL_SENT) {
                end_sent(ch, c, RDMX_ERR_TIMEOUT, msg);
                if (c->lent_until != 0 && c->lent_until < next)
                    next = c->lent_until;
            } else {
                complete(ch, c, RDMX_ERR_TIMEOUT, NULL, 0, msg);
                retire(ch, c);
            }
        }
    }
    if (teardown) {
        char why[200];
        ch->stats.lent_teardowns++;
        if (teardown == 2)
            snprintf(why, sizeof(why),
                     "the server did not take a call's request within %d ms "
                     "after the call ended: connection closed so that the "
                     "caller's buffer is not read any more",
                     LENT_GRACE_MS);
        else
            snprintf(why, sizeof(why),
                     "the server did not answer a call that lent it a "
                     "buffer within %d ms after the call ended: connection "
                     "closed so that it cannot write into the buffer",
                     LENT_GRACE_MS);
        conn_lost(ch, RDMX_ERR_CONN_RESET, why, 0);
        return UINT64_MAX; /* (conn_lost armed what it needs) */
    }
    return next;
}

static unsigned ch_timer(rdmx_hook_t *hook, uint64_t now)
{
    rdmx_channel_t *ch = rdmx_container_of(hook, rdmx_channel_t, hook);
    uint64_t next;

    ch->hook.next_ns = UINT64_MAX;
    next = expire_calls(ch, now);
    if (ch->breaker == RDMX_BREAKER_OPEN) {
        if (now >= ch->open_until)
            set_breaker(ch, RDMX_BREAKER_HALF_OPEN, RDMX_OK);
        else if (ch->open_until < next)
            next = ch->open_until;
    }
    if (ch->state == RDMX_CHANNEL_DOWN) {
        if (now >= ch->reconnect_at)
            start_connect(ch);
        else if (ch->reconnect_at < next)
            next = ch->reconnect_at;
    }
    if (ch->state == RDMX_CHANNEL_CONNECTING && ch->handshaking) {
        if (now >= ch->handshake_deadline)
            conn_lost(ch, RDMX_ERR_TIMEOUT,
                      "the server did not finish the handshake in time", 0);
        else if (ch->handshake_deadline < next)
            next = ch->handshake_deadline;
    }
    if (ch->state == RDMX_CHANNEL_READY && ch->hb_ms > 0 &&
        ch->inflight == 0) {
        /* Idle: nothing waits for the server, so nothing pings it. A dead
         * server process ends the connection's control socket at once; a
         * frozen or unreachable one is found by the next call's
         * heartbeats. 10,000 idle connections cost their server nothing. */
        ch->hb_idle = 1;
    } else if (ch->state == RDMX_CHANNEL_READY && ch->hb_ms > 0) {
        uint64_t hb = (uint64_t)ch->hb_ms * 1000000;
        uint64_t dead = (uint64_t)ch->hb_timeout_ms * 1000000;
        hb_window(ch, now, hb);
        if (rdmx_since(now, ch->last_rx) >= dead) {
            char msg[400];
            snprintf(msg, sizeof(msg), "no answer from %s for %d ms",
                     ch->address, ch->hb_timeout_ms);
            conn_lost(ch, RDMX_ERR_TIMEOUT, msg, 0);
        } else {
            if (rdmx_since(now, ch->last_rx) >= hb &&
                rdmx_since(now, ch->last_ping) >= hb) {
                ch->last_ping = now;
                ch->stats.pings++;
                rdmx__rpc_send_ctl(ch->ep, RDMX_RPC_MSG_PING, ch->stats.pings, 0);
            }
            /* check again within a heartbeat, and at the dead line */
            uint64_t at = now + hb / 2;
            if (ch->last_rx + dead < at)
                at = ch->last_rx + dead;
            if (at < next)
                next = at;
        }
    }
    ch->last_tick = now;
    arm(ch, next);
    return 0;
}

/* --- public API ------------------------------------------------------------- */

#define OPT(field, member, def)                                                \
    ((f & (field)) && p->member > 0 ? p->member : (def))

rdmx_status_t rdmx_channel_create(rdmx_worker_t *w, const char *address,
                                  const rdmx_channel_params_t *p,
                                  rdmx_channel_t **channel_p)
{
    uint64_t f = p ? p->field_mask : 0;
    rdmx_channel_t *ch;
    char host[256];
    uint16_t port;
    rdmx_status_t st;

    if (w == NULL || address == NULL || channel_p == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "channel: NULL argument");
    if ((st = rdmx_addr_parse(address, host, sizeof(host), &port)) != RDMX_OK)
        return st;
    ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        free(ch);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "channel: out of memory");
    }
    ch->link.role = RDMX_RPC_LINK_CHANNEL;
    ch->w = w;
    snprintf(ch->address, sizeof(ch->address), "%s", address);
    ch->timeout_ms = (f & RDMX_CHANNEL_PARAM_FIELD_TIMEOUT) ? p->timeout_ms : 5000;
    ch->connect_timeout_ms = (f & RDMX_CHANNEL_PARAM_FIELD_CONNECT_TIMEOUT)
                                 ? p->connect_timeout_ms
                                 : 2000;
    ch->hb_ms = (f & RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT) ? p->heartbeat_ms : 250;
    ch->hb_timeout_ms = OPT(RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT,
                            heartbeat_timeout_ms, 1000);
    if (ch->hb_timeout_ms < ch->hb_ms)
        ch->hb_timeout_ms = 2 * ch->hb_ms;
    ch->wait_for_ready = (f & RDMX_CHANNEL_PARAM_FIELD_WAIT_FOR_READY) &&
                         p->wait_for_ready;
    ch->rings_wanted = !(f & RDMX_CHANNEL_PARAM_FIELD_RINGS) || p->rings;
    ch->backoff_min_ms =
        OPT(RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MIN, backoff_min_ms, 50);
    ch->backoff_max_ms =
        OPT(RDMX_CHANNEL_PARAM_FIELD_BACKOFF_MAX, backoff_max_ms, 2000);
    if (ch->backoff_max_ms < ch->backoff_min_ms)
        ch->backoff_max_ms = ch->backoff_min_ms;
    ch->retries = (f & RDMX_CHANNEL_PARAM_FIELD_RETRIES) ? p->retries : 3;
    ch->breaker_threshold =
        (f & RDMX_CHANNEL_PARAM_FIELD_BREAKER_THRESHOLD) ? p->breaker_threshold
                                                         : 0;
    ch->breaker_open_ms =
        OPT(RDMX_CHANNEL_PARAM_FIELD_BREAKER_OPEN, breaker_open_ms, 1000);
    ch->credits_opt = (f & RDMX_CHANNEL_PARAM_FIELD_CREDITS) ? p->credits : 0;
    ch->queue_max = (f & RDMX_CHANNEL_PARAM_FIELD_QUEUE) ? p->queue : 4096;
    if ((f & RDMX_CHANNEL_PARAM_FIELD_AUTH_SECRET) && p->auth_secret != NULL &&
        p->auth_secret_len > 0) {
        ch->secret = malloc(p->auth_secret_len);
        if (ch->secret == NULL) {
            free(ch);
            return rdmx__error(RDMX_ERR_NO_MEMORY, "channel: out of memory");
        }
        memcpy(ch->secret, p->auth_secret, p->auth_secret_len);
        ch->secret_len = p->auth_secret_len;
    }
    if (f & RDMX_CHANNEL_PARAM_FIELD_STATE_CB) {
        ch->state_cb = p->state_cb;
        ch->state_arg = p->state_arg;
    }
    if (ch->hb_ms < 0) {
        int hb_ms = ch->hb_ms;
        free(ch->secret);
        free(ch);
        return rdmx__error(RDMX_ERR_INVALID,
                           "channel: negative heartbeat_ms %d (0 turns "
                           "heartbeats off)",
                           hb_ms);
    }
    ch->credits = 1;
    ch->max_message = 64ull << 20;
    ch->backoff_ms = ch->backoff_min_ms;
    ch->free_slot = CH_SLOT_NONE;
    ch->last_midx = -1;
    ch->state = RDMX_CHANNEL_CONNECTING;
    rdmx_list_init(&ch->queue);
    rdmx_list_init(&ch->sent);
    rdmx_list_init(&ch->ctl_rndv);
    ch->hook.fn = ch_timer;
    ch->hook.next_ns = UINT64_MAX;

    rdmx__worker_lock(w);
    if ((st = rdmx__rpc_attach(w)) != RDMX_OK) {
        rdmx__worker_unlock(w);
        free(ch->secret);
        free(ch);
        return st;
    }
    rdmx__hook_add(w, &ch->hook);
    start_connect(ch);
    rdmx__worker_unlock(w);
    *channel_p = ch;
    return RDMX_OK;
}

void rdmx_channel_destroy(rdmx_channel_t *ch)
{
    rdmx_worker_t *w;
    rdmx_list_t *e;

    if (ch == NULL)
        return;
    w = ch->w;
    rdmx__worker_lock(w);
    rdmx__hook_del(&ch->hook);
    close_ep(ch);
    ch->state_cb = NULL;
    while ((e = rdmx_list_pop(&ch->ctl_rndv)) != NULL)
        rdmx_container_of(e, ctl_pend_t, link)->ch = NULL;
    while ((e = rdmx_list_pop(&ch->sent)) != NULL) {
        call_t *c = rdmx_container_of(e, call_t, link);
        c->state = CALL_QUEUED;
        complete(ch, c, RDMX_ERR_CANCELED, NULL, 0, "the channel was closed");
        call_unlink(ch, c);
        call_free(c);
    }
    while ((e = rdmx_list_pop(&ch->queue)) != NULL) {
        call_t *c = rdmx_container_of(e, call_t, link);
        complete(ch, c, RDMX_ERR_CANCELED, NULL, 0, "the channel was closed");
        call_unlink(ch, c);
        call_free(c);
    }
    rdmx__worker_unlock(w);
    free(ch->slots);
    free(ch->h_ids);
    free(ch->h_flags);
    free(ch->methods);
    if (ch->secret != NULL) {
        memset(ch->secret, 0, ch->secret_len);
        free(ch->secret);
    }
    while (ch->spare != NULL) {
        call_t *c = ch->spare;
        ch->spare = c->next_spare;
        free(c);
    }
    free(ch);
}

rdmx_channel_state_t rdmx_channel_state(const rdmx_channel_t *ch)
{
    return __atomic_load_n(&ch->state, __ATOMIC_RELAXED);
}

rdmx_breaker_state_t rdmx_channel_breaker(const rdmx_channel_t *ch)
{
    return ch->breaker;
}

uint64_t rdmx__channel_max_message(const rdmx_channel_t *ch)
{
    return ch->state == RDMX_CHANNEL_READY ? ch->max_message : 0;
}

rdmx_ep_t *rdmx_channel_ep(const rdmx_channel_t *ch)
{
    return ch->state == RDMX_CHANNEL_READY ? ch->ep : NULL;
}

rdmx_status_t rdmx_channel_wait_ready(rdmx_channel_t *ch, int timeout_ms)
{
    uint64_t deadline =
        timeout_ms < 0 ? UINT64_MAX
                       : rdmx_now_ns() + (uint64_t)timeout_ms * 1000000;

    for (;;) {
        rdmx_status_t st = RDMX_INPROGRESS;

        /* (a progress thread changes the channel under the worker's lock) */
        rdmx__worker_lock(ch->w);
        if (ch->state == RDMX_CHANNEL_READY)
            st = RDMX_OK;
        else if (ch->state == RDMX_CHANNEL_CLOSED)
            st = rdmx__error(ch->last_error ? ch->last_error
                                            : RDMX_ERR_CONN_CLOSED,
                             "channel %s: %s", ch->address, ch->last_message);
        /* The server said no (at its connection limit): say so now rather
         * than after the timeout; the channel keeps trying. */
        else if (ch->state == RDMX_CHANNEL_DOWN &&
                 ch->conn_error == RDMX_ERR_BUSY)
            st = rdmx__error(RDMX_ERR_BUSY, "channel %s: %s", ch->address,
                             ch->conn_message);
        else if (rdmx_now_ns() >= deadline)
            /* (with the last attempt's failure: what the user can fix) */
            st = rdmx__error(RDMX_ERR_TIMEOUT,
                             "channel %s: not ready after %d ms%s%s%s",
                             ch->address, timeout_ms,
                             ch->conn_error ? " (last attempt: " : "",
                             ch->conn_error ? ch->conn_message : "",
                             ch->conn_error ? ")" : "");
        rdmx__worker_unlock(ch->w);
        if (st != RDMX_INPROGRESS)
            return st;
        if (rdmx__worker_threaded(ch->w)) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        } else {
            rdmx_worker_wait(ch->w, 10);
        }
    }
}

void rdmx_channel_stats(rdmx_channel_t *ch, rdmx_channel_stats_t *stats_p)
{
    rdmx__worker_lock(ch->w);
    *stats_p = ch->stats;
    rdmx__worker_unlock(ch->w);
}

unsigned rdmx_channel_metrics(rdmx_channel_t *ch, rdmx_rpc_metrics_t *out,
                              unsigned max)
{
    rdmx__worker_lock(ch->w);
    for (unsigned i = 0; i < ch->nmethods && i < max; i++)
        rdmx__counters_export(&ch->methods[i].c, ch->methods[i].name, &out[i]);
    rdmx__worker_unlock(ch->w);
    return ch->nmethods;
}

/* Build a call record; NULL with the error recorded. */
static call_t *call_new(rdmx_channel_t *ch, const char *method,
                        const void *data, size_t length,
                        const rdmx_call_direct_t *d,
                        const rdmx_call_params_t *p, rdmx_status_t *st_p)
{
    size_t body_len = d != NULL ? d->body_len : 0, copied;
    uint64_t f = p ? p->field_mask : 0;
    unsigned nbulk = (f & RDMX_CALL_PARAM_FIELD_BULK) ? p->nbulk : 0;
    size_t dsize[RDMX_RPC_BULK_MAX], aux = 0, name_len;
    int timeout = (f & RDMX_CALL_PARAM_FIELD_TIMEOUT) ? p->timeout_ms
                                                 : ch->timeout_ms;
    call_t *c;
    /* the method of the last call (a name known to fit): its id is known */
    int same = method != NULL && ch->last_midx >= 0 &&
               strcmp(ch->methods[ch->last_midx].name, method) == 0;

    name_len = same ? 1 : method ? strnlen(method, RDMX_RPC_NAME_MAX + 1) : 0;
    if (name_len == 0 || name_len > RDMX_RPC_NAME_MAX) {
        *st_p = name_len == 0
                    ? rdmx__error(RDMX_ERR_INVALID, "call: no method name")
                    : rdmx__error(RDMX_ERR_INVALID,
                                  "call: method name longer than %d bytes",
                                  RDMX_RPC_NAME_MAX);
        return NULL;
    }
    if ((data == NULL && length != 0) || (body_len != 0 && d->body == NULL)) {
        *st_p = rdmx__error(RDMX_ERR_INVALID, "call '%s': NULL data", method);
        return NULL;
    }
    if (length > ch->max_message || body_len > ch->max_message - length) {
        *st_p = rdmx__error(RDMX_ERR_TOO_BIG,
                            "call '%s': %zu bytes exceed "
                            "the server's limit of %llu",
                            method, length + body_len,
                            (unsigned long long)ch->max_message);
        return NULL;
    }
    if (nbulk > RDMX_RPC_BULK_MAX || (nbulk > 0 && p->bulk == NULL)) {
        *st_p = rdmx__error(RDMX_ERR_INVALID, "call '%s': %u bulk "
                                              "descriptors, at most %d",
                            method, nbulk, RDMX_RPC_BULK_MAX);
        return NULL;
    }
    for (unsigned i = 0; i < nbulk; i++) {
        const rdmx_rpc_bulk_t *b = &p->bulk[i];
        rdmx_status_t st;
        if (b->mr == NULL) {
            *st_p = rdmx__error(RDMX_ERR_INVALID, "call '%s': bulk %u has no "
                                                  "region",
                                method, i);
            return NULL;
        }
        st = rdmx_mr_pack(b->mr, b->offset, b->length, bulk_access(b), NULL, 0,
                          &dsize[i]);
        if (st != RDMX_OK && st != RDMX_ERR_TOO_BIG) {
            *st_p = st;
            return NULL;
        }
        aux += 4 + dsize[i];
    }
    if (nbulk > 0)
        aux += 4;
    if ((c = ch->spare) != NULL) {
        ch->spare = c->next_spare;
        ch->nspare--;
    } else if ((c = malloc(sizeof(*c))) == NULL) {
        *st_p = rdmx__error(RDMX_ERR_NO_MEMORY, "call: out of memory");
        return NULL;
    }
    memset(c, 0, offsetof(call_t, lent_msg));
    /* the body's bytes copied into the record: all, unless it pays to send
     * it from where it is (CH_GATHER_MIN), or the request could not leave
     * at once anyway (it goes through a request either way, and the copy
     * is then the only difference) */
    if (body_len >
            (aux + length == 0 ? (size_t)CH_INLINE : CH_GATHER_MIN - 1) ||
        (body_len > CH_INLINE && ch->ep != NULL &&
         aux + length + body_len + RDMX_RPC_HDR_MAX >
             rdmx__ep_at_once_max(ch->ep)))
        copied = 0;
    else
        copied = body_len;
    c->buf = aux + length + copied <= CH_INLINE
                 ? c->inl
                 : rdmx__buf_alloc(aux + length + copied);
    if (c->buf == NULL) {
        free(c);
        *st_p = rdmx__error(RDMX_ERR_NO_MEMORY,
                            "call: out of memory for "
                            "%zu bytes",
                            length + body_len);
        return NULL;
    }
    if (nbulk > 0) {
        unsigned char *q = c->buf + 4;
        c->buf[0] = (unsigned char)nbulk;
        c->buf[1] = c->buf[2] = c->buf[3] = 0;
        for (unsigned i = 0; i < nbulk; i++) {
            const rdmx_rpc_bulk_t *b = &p->bulk[i];
            size_t got = 0;
            if (b->access & RDMX_ACCESS_WRITE)
                c->lent = 1;
            rdmx_status_t st;
            q[0] = (unsigned char)dsize[i];
            q[1] = (unsigned char)(dsize[i] >> 8);
            q[2] = q[3] = 0;
            st = rdmx_mr_pack(b->mr, b->offset, b->length, bulk_access(b), q + 4,
                              dsize[i], &got);
            if (st != RDMX_OK) {
                if (c->buf != c->inl)
                    rdmx__buf_free(c->buf);
                free(c);
                *st_p = st;
                return NULL;
            }
            q += 4 + dsize[i];
        }
    }
    if (length != 0)
        memcpy(c->buf + aux, data, length);
    if (copied != 0)
        memcpy(c->buf + aux + length, d->body, copied);
    c->aux_len = (uint32_t)aux;
    c->len = (uint32_t)(length + body_len);
    if (body_len != copied) {
        c->body = d->body;
        c->body_len = (uint32_t)body_len;
    }
    if (same) {
        c->midx = ch->last_midx;
        c->method = ch->methods[c->midx].id;
    } else {
        c->method = rdmx_rpc_id(method);
        c->midx = method_index(ch, c->method, method);
    }
    c->flags = (f & RDMX_CALL_PARAM_FIELD_FLAGS) && (p->flags & RDMX_RPC_IDEMPOTENT)
                   ? RDMX_RPC_F_IDEMPOTENT
                   : 0;
    c->more = (f & RDMX_CALL_PARAM_FIELD_FLAGS) && (p->flags & RDMX_RPC_MORE);
    c->start_ns = rdmx_now_ns();
    if (timeout >= 0) /* (negative: none) */
        c->deadline_ns = c->start_ns + (uint64_t)timeout * 1000000;
    c->ch = ch;
    c->state = CALL_QUEUED;
    rdmx_list_init(&c->link);
    return c;
}

/* The breaker's word on a new call: RDMX_OK, or fail fast. */
static rdmx_status_t breaker_admit(rdmx_channel_t *ch, call_t *c)
{
    if (ch->breaker_threshold == 0 || ch->breaker == RDMX_BREAKER_CLOSED)
        return RDMX_OK;
    if (ch->breaker == RDMX_BREAKER_OPEN) {
        uint64_t now = rdmx_now_ns();
        if (now < ch->open_until) {
            ch->stats.fast_failed++;
            return rdmx__error(RDMX_ERR_BUSY,
                               "circuit breaker open after %u failures "
                               "(last: %s); next probe in %llu ms",
                               ch->consecutive_failures, ch->last_message,
                               (unsigned long long)((ch->open_until - now) /
                                                    1000000));
        }
        set_breaker(ch, RDMX_BREAKER_HALF_OPEN, RDMX_OK);
    }
    if (ch->probe_inflight) {
        ch->stats.fast_failed++;
        return rdmx__error(RDMX_ERR_BUSY, "circuit breaker half-open: a "
                                          "probe call is in flight");
    }
    ch->probe_inflight = 1;
    c->probe = 1;
    return RDMX_OK;
}

static rdmx_status_t
call_start(rdmx_channel_t *ch, const char *method, const void *data,
           size_t length, const rdmx_call_params_t *params, rdmx_call_cb_t cb,
           void *arg, const rdmx_call_direct_t *d, uint64_t *call_id_p);

rdmx_status_t rdmx_call_nb(rdmx_channel_t *ch, const char *method,
                           const void *data, size_t length,
                           const rdmx_call_params_t *params,
                           uint64_t *call_id_p)
{
    if (params == NULL || !(params->field_mask & RDMX_CALL_PARAM_FIELD_CB) ||
        params->cb == NULL)
        return rdmx__error(RDMX_ERR_INVALID,
                           "call_nb: params->cb is required (set "
                           "RDMX_CALL_PARAM_FIELD_CB)");
    return call_start(ch, method, data, length, params, params->cb, params->arg,
                      NULL, call_id_p);
}

rdmx_status_t rdmx__call_direct(rdmx_channel_t *ch, const char *method,
                                const void *data, size_t length,
                                const rdmx_call_params_t *params,
                                const rdmx_call_direct_t *d,
                                uint64_t *call_id_p)
{
    if (params == NULL || !(params->field_mask & RDMX_CALL_PARAM_FIELD_CB) ||
        params->cb == NULL || d == NULL || d->ninto > 2)
        return rdmx__error(RDMX_ERR_INVALID, "call_direct: bad argument");
    return call_start(ch, method, data, length, params, params->cb, params->arg,
                      d, call_id_p);
}

static rdmx_status_t
call_start(rdmx_channel_t *ch, const char *method, const void *data,
           size_t length, const rdmx_call_params_t *params, rdmx_call_cb_t cb,
           void *arg, const rdmx_call_direct_t *d, uint64_t *call_id_p)
{
    rdmx_status_t st = RDMX_OK;
    call_t *c;

    if (ch == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "call: NULL channel");
    rdmx__worker_lock(ch->w);
    if (ch->state == RDMX_CHANNEL_CLOSED) {
        st = rdmx__error(ch->last_error ? ch->last_error
                                        : RDMX_ERR_CONN_CLOSED,
                         "channel %s is closed: %s", ch->address,
                         ch->last_message);
        goto out;
    }
    if (ch->state == RDMX_CHANNEL_DOWN && !ch->wait_for_ready) {
        st = rdmx__error(RDMX_ERR_UNREACHABLE,
                         "call '%s': channel %s is down (%s); it reconnects "
                         "in the background",
                         method ? method : "", ch->address, ch->conn_message);
        goto out;
    }
    c = call_new(ch, method, data, length, d, params, &st);
    if (c == NULL)
        goto out;
    if ((st = breaker_admit(ch, c)) != RDMX_OK) {
        call_free(c);
        goto out;
    }
    if ((st = slot_take(ch, c)) != RDMX_OK) {
        if (c->probe)
            ch->probe_inflight = 0;
        call_free(c);
        goto out;
    }
    c->cb = cb;
    c->arg = arg;
    for (unsigned i = 0; d != NULL && i < d->ninto; i++) {
        c->into[i] = d->into[i];
        c->into_cap += d->into[i].length;
    }
    c->ninto = c->into_cap > 0 ? d->ninto : 0;
    if (ch->state == RDMX_CHANNEL_READY && ch->inflight < ch->credits &&
        rdmx_list_empty(&ch->queue) &&
        call_send(ch, c, c->start_ns, c->more) == 0) {
        /* on the wire */
    } else if (ch->nqueued < ch->queue_max) {
        rdmx_list_insert_tail(&ch->queue, &c->link);
        ch->nqueued++;
        ch->stats.queued++;
    } else {
        if (c->probe)
            ch->probe_inflight = 0;
        st = ch->state == RDMX_CHANNEL_READY
                 ? rdmx__error(RDMX_ERR_NO_RESOURCE,
                               "call '%s': %u calls in flight (the credits)"
                               " and the queue is full",
                               method, ch->inflight)
                 : rdmx__error(RDMX_ERR_BUSY, "call '%s': channel %s is not "
                                              "ready (%s)",
                               method, ch->address, ch->last_message);
        call_unlink(ch, c);
        call_free(c);
        goto out;
    }
    ch->stats.calls++;
    if (c->body_len > 0)
        ch->stats.requests_in_place++;
    if (c->deadline_ns != 0)
        arm(ch, c->deadline_ns);
    if (call_id_p != NULL)
        *call_id_p = c->id;
    st = RDMX_INPROGRESS;
out:
    rdmx__worker_unlock(ch->w);
    return st;
}

rdmx_status_t rdmx_call_oneway(rdmx_channel_t *ch, const char *method,
                               const void *data, size_t length)
{
    rdmx_rpc_hdr_t h;
    rdmx_status_t st;
    size_t name_len = method ? strlen(method) : 0;

    if (ch == NULL || name_len == 0 || name_len > RDMX_RPC_NAME_MAX ||
        (data == NULL && length != 0))
        return rdmx__error(RDMX_ERR_INVALID, "oneway: bad argument");
    rdmx__worker_lock(ch->w);
    if (ch->state != RDMX_CHANNEL_READY) {
        st = rdmx__error(RDMX_ERR_BUSY, "oneway '%s': channel %s is not "
                                        "ready",
                         method, ch->address);
    } else if (length > ch->max_message) {
        st = rdmx__error(RDMX_ERR_TOO_BIG, "oneway '%s': %zu bytes exceed the "
                                           "server's limit",
                         method, length);
    } else {
        rdmx__rpc_hdr(&h, RDMX_RPC_MSG_ONEWAY, rdmx_rpc_id(method), 0);
        h.payload = (uint32_t)length;
        /* (leaves now: nothing makes its sender progress soon) */
        st = rdmx__rpc_send_keep(ch->ep, &h, data, length, RDMX_SEND_NOW, NULL,
                                 NULL);
        if (st == RDMX_OK) {
            ch->stats.calls++;
            ch->msgs_out++; /* (a ring record after it runs after it) */
        }
    }
    rdmx__worker_unlock(ch->w);
    return st;
}

rdmx_status_t rdmx_call_cancel(rdmx_channel_t *ch, uint64_t call_id)
{
    rdmx_status_t st = RDMX_OK;
    call_t *c;

    if (ch == NULL)
        return rdmx__error(RDMX_ERR_INVALID, "cancel: NULL channel");
    rdmx__worker_lock(ch->w);
    c = slot_find(ch, call_id);
    if (c == NULL || c->done) {
        st = rdmx__error(RDMX_ERR_NOT_FOUND, "cancel: call %llu is not "
                                             "pending",
                         (unsigned long long)call_id);
        goto out;
    }
    ch->stats.canceled++;
    if (c->state == CALL_SENT) {
        end_sent(ch, c, RDMX_ERR_CANCELED, "canceled by the caller");
    } else {
        complete(ch, c, RDMX_ERR_CANCELED, NULL, 0, "canceled by the caller");
        retire(ch, c);
    }
out:
    rdmx__worker_unlock(ch->w);
    return st;
}

/* --- blocking call ------------------------------------------------------------- */

typedef struct {
    volatile int done;
    rdmx_status_t status;
    void *resp;
    size_t capacity, length;
    char message[256];
} waiter_t;

static void waiter_cb(const rdmx_call_result_t *r, void *arg)
{
    waiter_t *wt = arg;

    wt->status = r->status;
    wt->length = r->length;
    if (r->status == RDMX_OK) {
        if (r->length > wt->capacity) {
            wt->status = RDMX_ERR_TOO_BIG;
            snprintf(wt->message, sizeof(wt->message),
                     "response of %zu bytes, buffer of %zu", r->length,
                     wt->capacity);
        } else if (r->length != 0 && r->data != wt->resp) {
            memcpy(wt->resp, r->data, r->length); /* (else it landed there) */
        }
    } else {
        snprintf(wt->message, sizeof(wt->message), "%s", r->message);
    }
    wt->done = 1;
}

rdmx_status_t rdmx_call(rdmx_channel_t *ch, const char *method,
                        const void *data, size_t length, void *resp,
                        size_t capacity, const rdmx_call_params_t *params,
                        size_t *resp_len_p)
{
    waiter_t wt; /* (not zeroed whole: its message is written on error) */
    rdmx_status_t st;

    if (resp == NULL && capacity != 0)
        return rdmx__error(RDMX_ERR_INVALID, "call: NULL response buffer");
    if (params != NULL && (params->field_mask & RDMX_CALL_PARAM_FIELD_CB))
        return rdmx__error(RDMX_ERR_INVALID,
                           "call: params->cb is for rdmx_call_nb");
    wt.done = 0;
    wt.status = RDMX_OK;
    wt.length = 0;
    wt.message[0] = '\0';
    wt.resp = resp;
    wt.capacity = capacity;
    {
        /* The caller waits: a large request is sent from @data itself, a
         * large answer lands in @resp itself. */
        rdmx_call_direct_t d = {.body = data, .body_len = length};
        d.into[0] = (rdmx_msg_piece_t){resp, capacity};
        d.ninto = capacity > 0 ? 1 : 0;
        st = call_start(ch, method, NULL, 0, params, waiter_cb, &wt, &d, NULL);
    }
    if (st != RDMX_INPROGRESS)
        return st;
    rdmx__wait_until(ch->w, &wt.done);
    if (resp_len_p != NULL)
        *resp_len_p = wt.length;
    if (wt.status != RDMX_OK)
        return rdmx__error(wt.status, "%s: %s", method, wt.message);
    return RDMX_OK;
}
