/*
 * rdmx core — private structures shared by the files of src/core.
 *
 * Ownership and threads: a worker and everything hanging off it (endpoints,
 * listeners, operations, unpacked descriptors) is touched only by the thread
 * that progresses it, or, with a progress thread, under worker->lock.
 * The context's region registry has its own lock (regions are registered
 * from any thread). Lock order: worker->lock before context->mr_lock.
 */
#ifndef RDMX_CORE_INTERNAL_H
#define RDMX_CORE_INTERNAL_H

#include <rdmx/core.h>

#include "core/transport.h"
#include "core/upper.h"
#include "util/error.h"
#include "util/list.h"
#include "util/log.h"
#include "util/ptrmap.h"
#include "util/time.h"

#include <pthread.h>
#include <stdarg.h>

/* Active-message ids. Core uses 0..15; the RPC layer takes 16 and up. */
enum {
    RDMX_AM_BIND = 0,     /* client -> server: the token from WELCOME */
    RDMX_AM_BIND_ACK = 1, /* server -> client: status */
    RDMX_AM_MSG = 2,      /* two-sided message, payload only */
    RDMX_AM_NOTIFY = 3,   /* put-with-notify: imm, region, offset, length */
    RDMX_AM_BYE = 4,      /* orderly close: "I sent everything" */
    RDMX_AM_BYE_ACK = 5,  /* "I have received everything before BYE" */
    RDMX_AM_ACCESS = 6,   /* one-sided access carried by rdmx (access.c) */
    RDMX_AM_ACCESS_REPLY = 7,
    RDMX_AM_BATCH = 8, /* messages of upper layers, joined (batch.c) */
    RDMX_AM_CORE_LAST = 16
};

#define RDMX_WIRE_MAGIC   0x58444d52u /* "RMDX" little-endian */
/* Wire version: 3 authentication in the bootstrap; 4 batched messages; 5
 * tcp segments of 260 KiB (a peer must take the segments this one sends:
 * src/core/ucx/ucx.c); 6 shared-memory FIFO elements of 1 KiB (a sender
 * writes into the receiver's FIFO with its own element size: the same); 7
 * the connection's names: BIND carries the client's, and a message may
 * name its receiver by them (docs/CORE.md, "Who sent a message"); 8 RPC
 * request rings (HELLO's RINGS feature, RING: docs/RPC_RINGS.md) */
#define RDMX_WIRE_VERSION 8u
#define RDMX_BIND_SIZE    24 /* magic, status, token, the client's name */
#define RDMX_NOTIFY_SIZE  32
#define RDMX_OP_HDR_MAX   96 /* largest AM header an op carries (access) */
#define RDMX_GRANT_MAC    16 /* bytes of a descriptor's MAC (mem.c) */
#define RDMX_DESC_MAGIC   0x444d4452u /* "RDMD": a descriptor (mem.c) */
#define RDMX_DESC_VERSION 4           /* its version (mem.c) */
#define RDMX_GRANT_CACHE  256

/* Batched messages (batch.c): bytes of one batch (room for two 4 KiB KV
 * answers, below the libfabric backend's largest eager message, ~16 KiB);
 * longest a batch waits for the handlers after it */
#define RDMX_BATCH_MAX     12288u
#define RDMX_BATCH_HOLD_NS 50000u

/* What a descriptor grants, as its issuer verified it. */
typedef struct rdmx_grant {
    uint64_t region_id, offset, length;
    unsigned access;
    int valid;
    unsigned char mac[RDMX_GRANT_MAC];
} rdmx_grant_t;

typedef enum {
    RDMX_EP_CONNECTING, /* client: bootstrap, then waiting for BIND_ACK */
    RDMX_EP_ACCEPTING,  /* server: WELCOME sent, waiting for BIND */
    RDMX_EP_CONNECTED,
    RDMX_EP_FAILED,     /* transport gone; waiting for rdmx_ep_close */
    RDMX_EP_CLOSING     /* user closed; struct lives until UCX is done */
} rdmx_ep_state_t;

/* Endpoint events, handled in progress (never inside a UCX callback). */
enum {
    RDMX_EPEV_ACCEPTED = 1u << 0,  /* BIND arrived: run accept_cb */
    RDMX_EPEV_CONNECTED = 1u << 1, /* BIND_ACK arrived: run connect_cb */
    RDMX_EPEV_FAILED = 1u << 2,    /* tear down, then report */
    RDMX_EPEV_PEER_CLOSED = 1u << 3, /* BYE arrived: end once receives
                                        in flight are done */
};

/* --- sockets of the bootstrap (bootstrap.c) -------------------------------
 *
 * Every socket rdmx owns (listening sockets, connections in their
 * handshake, and each connection's control socket afterwards) sits in its
 * worker's epoll set with a pointer to one of these. The worker checks them
 * when it is about to sleep, after it woke, and every 64th progress pass;
 * on_event runs on the worker's thread. */
typedef struct rdmx_sock rdmx_sock_t;
struct rdmx_sock {
    int fd;                 /* -1: none */
    rdmx_worker_t *worker;  /* whose epoll set holds it */
    void (*on_event)(rdmx_sock_t *s, uint32_t events);
    uint32_t events;        /* EPOLL* bits registered */
    unsigned char *in;      /* bytes read, not yet consumed */
    size_t in_len, in_cap;
    unsigned char *out;     /* bytes still to write */
    size_t out_len, out_off;
};

/* --- keyed hashes and randomness (auth.c) -------------------------------- */

#define RDMX_MAC_SIZE    32   /* HMAC-SHA256 */
#define RDMX_NONCE_SIZE  16
#define RDMX_SECRET_MAX  4096 /* bytes of a shared secret */

typedef struct {
    const void *base;
    size_t len;
} rdmx_iov_t;

/* HMAC-SHA256(key, parts[0] || parts[1] || ...). */
rdmx_status_t rdmx__hmac(const void *key, size_t key_len,
                         const rdmx_iov_t *parts, unsigned nparts,
                         unsigned char out[RDMX_MAC_SIZE]);
/* Constant-time comparison of two MACs: 1 when equal. */
int rdmx__mac_equal(const unsigned char *a, const unsigned char *b);
/* A private copy of a user's secret (NULL/0 stays NULL/0); wiped on free. */
rdmx_status_t rdmx__secret_copy(const void *secret, size_t len,
                                unsigned char **out_p, size_t *len_p);
void rdmx__secret_free(unsigned char **secret_p, size_t *len_p);

/* Bootstrap frames: u32 body length, u8 type, 3 zero bytes, body. */
enum {
    RDMX_BS_HELLO = 1,     /* client: magic, version, flags, worker id,
                              nonce, addr */
    RDMX_BS_WELCOME = 2,   /* server: magic, version, flags, worker id,
                              token, [proof], addr */
    RDMX_BS_REFUSE = 3,    /* server: status, message */
    RDMX_BS_CHALLENGE = 4, /* server: nonce (authenticate first) */
    RDMX_BS_AUTH = 5,      /* client: proof */
};
#define RDMX_BS_F_PROOF 1u /* WELCOME flags: a server proof follows */
#define RDMX_BS_HDR_SIZE  8
#define RDMX_BS_BODY_MAX  (64u * 1024) /* a transport address fits */

typedef struct {
    uint32_t version;
    uint32_t flags;
    uint64_t worker_id;  /* the sender's worker (random, per process run) */
    uint64_t token;      /* WELCOME: names the connection in BIND */
    int32_t status;      /* REFUSE */
    unsigned char nonce[RDMX_NONCE_SIZE]; /* HELLO, CHALLENGE */
    unsigned char proof[RDMX_MAC_SIZE];   /* AUTH; WELCOME if F_PROOF */
    const unsigned char *addr; /* transport address of the sender's worker
                                  (points into the frame) */
    size_t addr_len;
    char message[160];   /* REFUSE */
} rdmx_bs_msg_t;

/* 1: a whole frame is in s->in (type and body written); 0: need more;
 * negative: the socket is closed or broken (an error detail is set), or
 * the frame is malformed (RDMX_ERR_PROTO). */
int rdmx__sock_read_frame(rdmx_sock_t *s, unsigned *type_p,
                          const unsigned char **body_p, size_t *len_p);
/* Drop the frame rdmx__sock_read_frame returned. */
void rdmx__sock_consume(rdmx_sock_t *s);
/* Queue a frame and write what the socket takes now. */
rdmx_status_t rdmx__sock_send(rdmx_sock_t *s, unsigned type,
                              const rdmx_bs_msg_t *m);
/* Flush queued bytes (on EPOLLOUT); negative when the socket broke. */
int rdmx__sock_flush(rdmx_sock_t *s);
rdmx_status_t rdmx__bs_decode(unsigned type, const unsigned char *body,
                              size_t len, rdmx_bs_msg_t *m);
/* The handshake's proofs of the shared secret (bootstrap.c). */
rdmx_status_t rdmx__bs_client_proof(const void *secret, size_t secret_len,
                                    const unsigned char *snonce,
                                    const rdmx_bs_msg_t *hello,
                                    unsigned char out[RDMX_MAC_SIZE]);
rdmx_status_t rdmx__bs_server_proof(const void *secret, size_t secret_len,
                                    const unsigned char *cnonce,
                                    const unsigned char *snonce,
                                    const rdmx_bs_msg_t *welcome,
                                    unsigned char out[RDMX_MAC_SIZE]);
/* Add @fd to @w's epoll set for @events. */
rdmx_status_t rdmx__sock_attach(rdmx_worker_t *w, rdmx_sock_t *s, int fd,
                                uint32_t events,
                                void (*on_event)(rdmx_sock_t *, uint32_t));
void rdmx__sock_set_events(rdmx_sock_t *s, uint32_t events);
/* Remove from the epoll set, close, free buffers. */
void rdmx__sock_close(rdmx_sock_t *s);
/* Move the socket to worker @w's epoll set (on @w's thread). */
rdmx_status_t rdmx__sock_move(rdmx_sock_t *s, rdmx_worker_t *w,
                              void (*on_event)(rdmx_sock_t *, uint32_t));
/* "host:port" of the socket's peer. */
void rdmx__sock_peer_name(int fd, char *buf, size_t size);

/* A connection limit shared by a listener and the endpoints it accepted
 * (it outlives the listener while they live). */
typedef struct {
    unsigned max;      /* 0: no limit */
    unsigned now;      /* atomic: connections accepted and not yet freed */
    unsigned refs;     /* atomic: the listener + its endpoints */
    uint64_t refused;  /* atomic: connections refused at the limit */
    uint64_t last_log_ns;
} rdmx_limit_t;

void rdmx__limit_put(rdmx_limit_t *lim);

typedef enum {
    RDMX_OP_SEND,
    RDMX_OP_RECV,
    RDMX_OP_RMA,      /* put, get, flush: one transport request */
    RDMX_OP_NOTIFY,   /* put -> flush -> notify message (op->stage) */
    RDMX_OP_ACCESS,
    RDMX_OP_INTERNAL  /* holds the header of an internal send; arg: the
                         worker */
} rdmx_op_kind_t;

/* One operation in flight. Taken from the worker's free list, returned when
 * its callback has run. Owned by the worker's thread. */
struct rdmx_op {
    rdmx_list_t link;     /* ep->recvs, ep->inflight, worker->done,
                             worker->orphans or the free list */
    int orphaned;         /* completed by rdmx; the transport still owns the
                             request */
    void *req;            /* the outstanding transport request */
    rdmx_ep_t *ep;        /* the endpoint; holds a reference (ep->ops) */
    rdmx_op_kind_t kind;
    rdmx_cb_t cb;
    void *arg;
    rdmx_status_t status; /* final status, for deferred completion */
    size_t length;        /* bytes moved / message length */
    void *buf;            /* recv: destination */
    size_t capacity;      /* recv: size of buf */
    rdmx_mr_t *mr;        /* recv: region of buf, or NULL */
    uint64_t *old_p;      /* atomic: where the old value goes */
    uint64_t result;      /* atomic: reply buffer */
    uint64_t operand;     /* atomic: value / compare */
    uint64_t amo_tag;     /* atomic: names it in the reply */
    unsigned amo_wait;    /* atomic: halves left (send, reply) */
    unsigned stage;       /* put-with-notify: 0 flushing, 1 notifying;
                             carried access: its opcode */
    unsigned char *aux;   /* memory the record owns (rdmx__buf_alloc),
                             freed with it: a carried PUT's descriptor of
                             its bytes; a receive's bounce buffer (the
                             bytes land there and are copied to buf when
                             it completes, never once it was orphaned; a
                             large one comes warm from the buffer cache) */
    int issuing;          /* inside the backend call that starts it */
    int early;            /* ... which already reported its end: */
    rdmx_status_t early_st;
    size_t early_len;
    unsigned char hdr[RDMX_OP_HDR_MAX]; /* AM header: lives as long as the
                                           send (UCX 1.13 does not copy) */
    union {
        rdmx_tp_iov_t iov[RDMX_TP_IOV_MAX];     /* a gathered send's pieces
                                                   (the backend reads them
                                                   until done) */
        rdmx_tp_piece_t piece[RDMX_TP_IOV_MAX]; /* a scattered receive's
                                                   (written until done) */
    };
    int cb_at_end; /* the callback gives back memory the transport
                      reads or writes (a gathered send's pieces, a
                      receive's into the caller's memory): if the
                      record is orphaned, it runs only once the
                      transport is done with the request or gone,
                      with the status kept in `status` */
};

/* A message that arrived before a receive was posted. */
typedef struct {
    rdmx_list_t link; /* ep->unexpected */
    size_t length;
    void *rndv_desc;  /* rendezvous: UCX's descriptor, data not yet moved */
    unsigned char data[]; /* eager: the copied payload */
} rdmx_unexp_t;

/* Use the polling slots of shared-memory object @name, @n of them, from
 * now on (tests: a private set of slots). 0, or -1 if it cannot. */
int rdmx__spin_setup(const char *name, unsigned n);

/* Default of rdmx_context.spin_ns. */
#define RDMX_SPIN_NS 50000ull

struct rdmx_context {
    const rdmx_tp_ops_t *tp; /* the backend */
    void *tctx;              /* its context */
    int tp_atomics;          /* the backend's atomics work (access.c) */
    int tp_rma;              /* put/get by the transport (hardware that
                                enforces registrations); 0: carried by
                                rdmx and checked by the target (access.c) */
    int map_peers;           /* a same-host peer's rdmx_mem_alloc memory
                                is mapped where the endpoint runs over
                                UCX's shared memory, whatever tp_rma says
                                (put/get are then copies: mem.c, rma.c);
                                0 with RDMX_RMA=rdmx and on libfabric */
    int rndv_safe;           /* the transport moves a large message only
                                by messages the receiver copies (tcp): a
                                carried access may go by rendezvous (auto:
                                per connection, access.c rndv_safe) */
    unsigned char grant_key[32]; /* keys descriptors' MACs (mem.c) */
    rdmx_transport_t transport;      /* as requested (AUTO stays AUTO) */
    rdmx_transport_t transport_used; /* AUTO resolved: rdmx_context_transport */
    char backend_spec[64]; /* "ucx", or the ofi spec ("ofi", "ofi:shm") the
                              ofi backend reads in ctx_create */
    uint64_t spin_ns; /* blocking waits poll this long before they sleep,
                         RPC server workers twice as long (RDMX_SPIN_US) */
    char name[32];
    pthread_mutex_t mr_lock; /* guards regions, next_region_id */
    rdmx_ptrmap_t regions;   /* region id (as pointer key) -> rdmx_mr_t */
    uint64_t next_region_id;
};

struct rdmx_mr {
    rdmx_context_t *ctx;
    void *tmr;        /* the backend's registration */
    void *addr;
    size_t length;
    unsigned access;
    uint64_t id;      /* context-unique, carried in descriptors */
    void *rkey_buf;   /* packed UCX rkey, made once at registration */
    size_t rkey_size;
    int allocated; /* rdmx_mem_alloc'd: a peer over shared memory maps it */
};

struct rdmx_rmem {
    rdmx_list_t link;   /* ep->rmems */
    rdmx_ep_t *ep;      /* NULL once the endpoint went away */
    void *trkey;        /* the backend's key; NULL once the endpoint went
                           away */
    uint64_t addr;      /* remote virtual address of the range start */
    uint64_t length;    /* length of the range */
    uint64_t region_id; /* the owner's region id */
    uint64_t region_offset; /* range start, from the region's start */
    unsigned access;
    unsigned char mac[RDMX_GRANT_MAC]; /* the issuer's MAC over the grant
                                          (region, range, rights) */
    /* Where the transport maps the range into this process (a peer's
     * shared-memory segment: rma.c), looked up at the first access:
     * map_known 0 not yet, 1 done (map NULL: not mapped). Gone with
     * trkey. */
    unsigned char *map;
    int map_known;
};

/* The range of @rm mapped into this process (over UCX's shared memory: a
 * peer's rdmx_mem_alloc segment, attached by its unpack), or NULL; looked
 * up once (docs/CORE.md, "Mapped one-sided access"). The worker's lock is
 * held. */
unsigned char *rdmx__rmem_here(rdmx_rmem_t *rm);

struct rdmx_ep {
    rdmx_list_t link;       /* worker->eps or worker->closing */
    rdmx_worker_t *worker;
    rdmx_tep_t *tep;        /* the backend's endpoint; NULL until the peer's
                               address is known, and once closed. Two
                               pending server endpoints toward the same
                               client worker may trade theirs (ep.c,
                               "Pairing") */
    rdmx_ep_state_t state;
    rdmx_status_t status;   /* RDMX_OK while healthy */
    int maps_peer;          /* rdmx__ep_maps_peer once connected: 0 not
                               known yet, 1 no, 2 yes */
    rdmx_transport_t transport; /* rdmx__ep_transport once connected (the
                                   backend's answer is slow: UCX prints
                                   the endpoint's lanes); AUTO until then */
    rdmx_ep_params_t params;
    int user_closed;        /* rdmx_ep_close was called */
    unsigned events;        /* RDMX_EPEV_* waiting in worker->ep_events */
    rdmx_list_t event_link; /* worker->ep_events */
    int torn_down;          /* UCX ep closed, rkeys gone, receives failed */
    uint64_t fail_ns;       /* when the failure was noticed */
    unsigned ops;           /* operations in flight that point here */
    void *closer;           /* rdmx_closer_t of a UCX close in flight */
    int reported;           /* connect_cb/accept_cb ran with success */
    int error_done;         /* the failure was reported (or never will be) */
    rdmx_accept_cb_t accept_cb; /* server side: the listener's callback */
    void *accept_arg;
    uint64_t close_deadline_ns;
    uint64_t connect_deadline_ns; /* 0: none */
    rdmx_connect_cb_t connect_cb;
    void *connect_arg;
    rdmx_list_t recvs;      /* posted receives, in order (rdmx_op_t) */
    rdmx_list_t unexpected; /* messages waiting for a receive */
    rdmx_list_t rmems;      /* descriptors unpacked on this endpoint */
    rdmx_list_t inflight;   /* ops whose UCX request is outstanding */
    rdmx_list_t amo_pending; /* atomics sent, waiting for their reply */
    int bye_sent;           /* closing: BYE sent, waiting for BYE_ACK */
    int bye_acked;          /* closing: the peer acknowledged the BYE */
    int peer_closed;        /* the peer sent BYE: its disconnect is orderly */
    int dead;               /* UCX reported the transport failed */
    int aborted;            /* rdmx__ep_abort: closed without BYE */
    /* Small messages since the start of a progress pass after its first,
     * sent as one at the pass's end or the next pass's start (batch.c) */
    unsigned char *batch; /* RDMX_BATCH_MAX bytes once used */
    size_t batch_len;
    unsigned batch_n;       /* messages in it; nonzero: on worker->batched */
    int batch_more;         /* its last message came with RDMX_SEND_MORE */
    uint64_t batch_pass;    /* the pass whose first message went alone */
    rdmx_list_t batch_link; /* on worker->batched while batch_n != 0 */
    /* What the transport sends at once (msg.c, rdmx__msg_try_now): the
     * largest message it took so, and the size above which it is not
     * asked, learned from its refusals (SIZE_MAX: none yet), but for a
     * probe after every now_every (1 .. 256) skipped */
    size_t now_ok, now_max;
    unsigned now_skipped, now_every;
    struct {                /* the peer's regions this side pulls fenced
                               PUTs from (access.c): unpacked once */
        uint64_t region, key_hash;
        rdmx_rmem_t *rm;
    } pull_keys[4];
    unsigned pull_next;
    unsigned acc_fetching;  /* carried PUTs whose bytes are being fetched */
    uint64_t *flush_tags;   /* FLUSHes answered once those are in */
    unsigned nflush, capflush;
    /* Bootstrap and control connection (bootstrap.c, ep.c). */
    rdmx_sock_t ctl;        /* the TCP connection; stays open while the
                               endpoint lives: its end means the peer
                               process is gone */
    int tcp_connected;      /* client: the TCP connect completed */
    int bound;              /* BIND / BIND_ACK done: the UCX pair is ours */
    unsigned char bind_hdr[RDMX_BIND_SIZE]; /* BIND's header (UCX 1.13
                               keeps a pointer until the send completes) */
    uint64_t token;         /* the server's name for the connection (in
                               WELCOME and BIND; the client's messages
                               carry it) */
    uint64_t client_token;  /* the client's (in BIND; the server's messages
                               carry it). Each side keeps its own in
                               worker->tokens (ep.c, own_token) */
    uint64_t peer_worker;   /* the peer worker's id */
    rdmx_limit_t *limit;    /* server side: the listener's limit, or NULL */
    unsigned char *secret;  /* client: a copy of the secret until WELCOME */
    size_t secret_len;
    unsigned char nonce[RDMX_NONCE_SIZE];  /* client: the HELLO's */
    unsigned char snonce[RDMX_NONCE_SIZE]; /* client: the CHALLENGE's */
    int challenged;         /* client: a CHALLENGE came */
    char peer[64];          /* "host:port" */
    char why[160];          /* what ended the connection, first cause */
    void *upper;            /* the RPC connection riding on this endpoint */
};

/* A connection the listener accepted and read the HELLO of. It sits on the
 * target worker's conn_reqs or handoff list until that worker sets it up;
 * whoever takes it off must accept or reject it. */
typedef struct {
    rdmx_list_t link;
    rdmx_listener_t *origin;     /* the listener it came from */
    rdmx_sock_t sock;            /* the client's socket (HELLO consumed) */
    uint64_t peer_worker;        /* from HELLO */
    void *peer_addr;             /* transport address, from HELLO */
    size_t peer_addr_len;
    char peer[64];
    rdmx_limit_t *limit;         /* counted in, reference held */
    rdmx_ep_params_t ep_params;  /* copied from the listener */
    rdmx_accept_cb_t accept_cb;
    void *accept_arg;
    /* Authenticated: the secret (a copy) and both nonces, for the WELCOME's
     * server proof. NULL: no authentication. */
    unsigned char *secret;
    size_t secret_len;
    unsigned char cnonce[RDMX_NONCE_SIZE], snonce[RDMX_NONCE_SIZE];
} rdmx_conn_req_t;

/* A socket accepted by a listener whose handshake has not got far enough to
 * hand it to a worker: no HELLO yet, or (with a secret) no good AUTH yet.
 * Until then nothing from the peer reaches the transport. */
typedef struct {
    rdmx_list_t link; /* listener->pending */
    rdmx_sock_t sock;
    rdmx_listener_t *listener;
    uint64_t deadline_ns;
    unsigned char *hello;  /* the HELLO's body, once CHALLENGE was sent */
    size_t hello_len;
    unsigned char snonce[RDMX_NONCE_SIZE];
    char peer[64];
} rdmx_pending_t;

struct rdmx_listener {
    rdmx_list_t link; /* worker->listeners */
    rdmx_worker_t *worker;
    rdmx_sock_t sock;         /* the listening socket */
    rdmx_listener_params_t params;
    uint16_t port;
    rdmx_worker_t **targets;  /* workers accepted connections go to */
    unsigned ntargets;
    unsigned next_target;
    rdmx_limit_t *limit;
    unsigned char *secret;    /* authentication: a copy of the secret */
    size_t secret_len;
    uint64_t auth_failed;     /* wrong or missing proofs (atomic) */
    uint64_t auth_log_ns;     /* last log line about one */
    rdmx_list_t pending;      /* rdmx_pending_t: HELLO not read yet */
    int spare_fd;             /* reserved, to refuse at the fd limit */
    unsigned npending;
    /* Paused (shutting down): new connections are refused. */
    int paused;
};

struct rdmx_worker {
    rdmx_context_t *ctx;
    const rdmx_tp_ops_t *tp;  /* ctx->tp */
    void *tw;                 /* the backend's worker */
    int efd;                  /* the backend's event fd (in epfd), or -1 */
    int epfd;                 /* epoll: the backend's fds, every rdmx socket */
    uint64_t id;              /* random; names the worker in bootstraps */
    const void *addr;         /* transport address, sent in HELLO/WELCOME */
    size_t addr_len;
    rdmx_ptrmap_t tokens;     /* own token -> rdmx_ep_t: accepting ones
                                 (BIND names them) and bound ones
                                 (rdmx__tp_token) */
    uint64_t tok_last;        /* the last name rdmx__tp_token found ... */
    rdmx_ep_t *tok_last_ep;   /* ... and its endpoint (NULL: none) */
    rdmx_ptrmap_t amo_ops;    /* access tag -> rdmx_op_t waiting for reply */
    uint64_t amo_seq;         /* last access tag */
    struct rdmx_grant *grants; /* [RDMX_GRANT_CACHE] verified descriptors
                                  (mem.c), by the MAC's first byte */
    rdmx_list_t eps;          /* live endpoints (any state but CLOSING) */
    rdmx_list_t closing;      /* endpoints the user closed, not yet freed */
    rdmx_list_t spares;       /* rdmx_tep_t without owner */
    rdmx_list_t listeners;
    rdmx_list_t conn_reqs;    /* rdmx_conn_req_t waiting to be accepted */
    rdmx_list_t done;         /* ops whose callback runs at next progress */
    rdmx_list_t free_ops;     /* op free list */
    rdmx_list_t orphans;      /* ops rdmx completed while UCX holds them */
    unsigned nfree_ops;
    rdmx_list_t ep_events;    /* endpoints with RDMX_EPEV_* to handle */
    unsigned connecting;      /* endpoints with a connect deadline */
    unsigned nsocks;          /* sockets in epfd */
    uint64_t next_sweep_ns;   /* listeners' handshake deadlines */
    uint64_t next_sock_ns;    /* a busy worker's next look at its sockets */
    rdmx_worker_stats_t stats;
    rdmx_list_t hooks;        /* rdmx_hook_t timers of upper layers */
    rdmx_list_t pollers;      /* rdmx_poller_t: memory upper layers poll */
    int dozing;               /* the pollers were told the worker sleeps */
    rdmx_msg_handler_t handlers[RDMX_MSG_ID_MAX]; /* of the layers above
                                                     (ids 16..) */
    unsigned hook_tick;
    int hooks_due;            /* run the timers at the next progress */
    unsigned arm_busy;        /* arms refused in a row (rdmx__worker_sleep) */
    uint64_t pass;            /* progress passes so far (batch.c) */
    unsigned in_pass;         /* inside the transport's progress */
    int armed;                /* armed since the last pass: a batch opened
                                 now must wake the fd's sleeper */
    rdmx_list_t batched;      /* endpoints holding a batch (batch_link) */
    uint64_t batch_open_ns;   /* when the oldest of them opened */
    uint64_t deliver_ns;      /* the clock when the upper-layer message now
                                 being handled (or the last one) arrived */
    /* connection requests handed over by another worker's listener */
    pthread_mutex_t handoff_lock;
    rdmx_list_t handoff;
    volatile int handoff_pending;
    /* timers and posted functions (timer.c) */
    rdmx_hook_t timer_hook;    /* on hooks while a timer is pending */
    struct rdmx_timer **timers; /* min-heap by due time */
    size_t ntimers, timers_cap;
    uint64_t next_timer_id;
    rdmx_ptrmap_t timer_ids;   /* id -> pending timer */
    pthread_mutex_t post_lock;
    struct rdmx_post *post_head, *post_tail;
    volatile int post_pending;
    /* progress thread mode */
    int mt;
    int busy; /* RDMX_WORKER_FLAG_BUSY_POLL: blocking calls never sleep */
    pthread_mutex_t lock;     /* recursive; held around every call in mt */
    pthread_cond_t cond;      /* signalled when an op completes (mt) */
    pthread_t thread;
    volatile int stop;
    int destroying; /* rdmx_worker_destroy: queued requests stay queued */
};

/* --- errors (status.c) --------------------------------------------------- */


/* --- worker.c ------------------------------------------------------------ */

static inline void rdmx__lock(rdmx_worker_t *w)
{
    if (w->mt)
        pthread_mutex_lock(&w->lock);
}

static inline void rdmx__unlock(rdmx_worker_t *w)
{
    if (w->mt)
        pthread_mutex_unlock(&w->lock);
}

rdmx_op_t *rdmx__op_get(rdmx_worker_t *w, rdmx_ep_t *ep, rdmx_op_kind_t kind,
                        rdmx_cb_t cb, void *arg);
void rdmx__op_put(rdmx_worker_t *w, rdmx_op_t *op);
/* Run the op's callback with @status and release it (and its ep ref). */
void rdmx__op_complete(rdmx_op_t *op, rdmx_status_t status, size_t length);
/* Queue the op to complete at the next progress (never calls back inline). */
void rdmx__op_defer(rdmx_op_t *op, rdmx_status_t status, size_t length);
/* Status for a transport completion on @ep: the ep's error if it failed. */
rdmx_status_t rdmx__op_status(rdmx_ep_t *ep, rdmx_status_t status);
/* The op's transport request is outstanding: track it on its endpoint. */
void rdmx__op_issued(rdmx_op_t *op, void *req);
/* The transport completed the op's request @req. Returns 0 if the op was
 * orphaned (then it is freed here and must not be touched), 1 otherwise
 * (the op is off the in-flight list; complete it). */
int rdmx__op_tp_done(rdmx_op_t *op, void *req);
/* Complete every op still in flight on @ep with the ep's status; the
 * transport keeps their requests (some never complete after a peer
 * died). */
void rdmx__op_orphan_all(rdmx_ep_t *ep);

/* Progress @w until *@done: spin while events come (latency), then sleep on
 * the worker's fd between events so a long wait does not burn a core. */
void rdmx__progress_until(rdmx_worker_t *w, volatile int *done);
/* Hand a connection request to worker @w (any thread). */
void rdmx__worker_handoff(rdmx_worker_t *w, rdmx_conn_req_t *cr);
/* Handle the events of rdmx's sockets (never blocks); the count. */
unsigned rdmx__worker_poll_sockets(rdmx_worker_t *w);

/* --- listener.c ---------------------------------------------------------- */

/* Refuse a queued connection request with @status and @why, free it. */
/* Free a connection request (its secret wiped). */
void rdmx__conn_req_free(rdmx_conn_req_t *cr);
void rdmx__conn_req_reject(rdmx_conn_req_t *cr, rdmx_status_t status,
                           const char *why);
/* Handshake deadlines of the listeners of @w. */
void rdmx__listener_sweep(rdmx_worker_t *w, uint64_t now);

/* A handler of one of core's own messages (ids below 16), run by
 * rdmx__tp_deliver: the sender's backend endpoint (NULL: unknown), the
 * header and data, RDMX_MSG_* flags. The return says who owns @data, not
 * whether work goes on: RDMX_INPROGRESS only when the handler took a
 * rendezvous descriptor (RDMX_MSG_RNDV: given to the transport's recv, or
 * kept and later received or released); RDMX_OK otherwise, and the
 * transport takes @data back when the handler returns. Core's handlers
 * never keep eager data (their ids are set without hold). */
typedef rdmx_status_t rdmx_core_handler_t(rdmx_worker_t *w, rdmx_tep_t *tep,
                                          const void *header, size_t hlen,
                                          void *data, size_t len,
                                          unsigned flags);

/* --- ep.c ---------------------------------------------------------------- */

/* Create the endpoint for an accepted connection request. */
void rdmx__ep_accept(rdmx_worker_t *w, rdmx_conn_req_t *cr);
/* Close spare UCX endpoints whose time is up (all of them if @all). */
void rdmx__spares_sweep(rdmx_worker_t *w, uint64_t now, int all);
/* Mark @ep failed with @status; the rest happens in rdmx__ep_progress. */
void rdmx__ep_fail(rdmx_ep_t *ep, rdmx_status_t status);
/* Fail @ep because a blocking @what did not complete within @timeout_ms. */
void rdmx__ep_fail_why(rdmx_ep_t *ep, rdmx_status_t status, const char *what,
                       int timeout_ms);
/* Deadlines, failures and closes; returns the number of events. */
unsigned rdmx__ep_progress(rdmx_worker_t *w);
void rdmx__ep_release(rdmx_ep_t *ep); /* an op let go of @ep */
void rdmx__ep_destroy_all(rdmx_worker_t *w);
rdmx_core_handler_t rdmx__am_bind;
rdmx_core_handler_t rdmx__am_bind_ack;
rdmx_core_handler_t rdmx__am_bye;
rdmx_core_handler_t rdmx__am_bye_ack;

/* --- timer.c ------------------------------------------------------------- */

typedef struct rdmx_timer rdmx_timer_t;
rdmx_status_t rdmx__timers_init(rdmx_worker_t *w);
/* Run what was posted (RDMX_OK); returns how many ran. */
unsigned rdmx__posts_run(rdmx_worker_t *w);
/* Run every pending timer and posted function with RDMX_ERR_CANCELED. */
void rdmx__timers_cancel_all(rdmx_worker_t *w);
void rdmx__timers_cleanup(rdmx_worker_t *w);

/* --- operations: positional forms (msg.c, rma.c, access.c) ---------------- */

/* An operation's params, checked and with their defaults. */
typedef struct {
    rdmx_cb_t cb;
    void *arg;
    rdmx_mr_t *mr;
    int timeout_ms; /* RDMX_TIMEOUT_INFINITE unless set */
    unsigned flags; /* RDMX_OP_FLAG_* */
} rdmx__op_args_t;

/* Check @p for a _nb form (@nb: cb required, no timeout) or a blocking
 * one (no cb); RDMX_ERR_INVALID naming @what otherwise (blocking.c). */
rdmx_status_t rdmx__op_args(const rdmx_op_params_t *p, int nb,
                            const char *what, rdmx__op_args_t *a);

/* rdmx__op_args for a _nb form, the usual params (a callback, no timeout)
 * taken inline; anything else through the full check. */
static inline rdmx_status_t rdmx__op_nb_args(const rdmx_op_params_t *p,
                                             const char *what,
                                             rdmx__op_args_t *a)
{
    if (__builtin_expect(p != NULL &&
                             (p->field_mask & (RDMX_OP_PARAM_FIELD_CB |
                                               RDMX_OP_PARAM_FIELD_TIMEOUT |
                                               RDMX_OP_PARAM_FIELD_FLAGS)) ==
                                 RDMX_OP_PARAM_FIELD_CB &&
                             p->cb != NULL,
                         1)) {
        a->cb = p->cb;
        a->arg = p->arg;
        a->mr = (p->field_mask & RDMX_OP_PARAM_FIELD_MR) ? p->mr : NULL;
        a->timeout_ms = RDMX_TIMEOUT_INFINITE;
        a->flags = 0;
        return RDMX_OK;
    }
    return rdmx__op_args(p, 1, what, a);
}

rdmx_status_t rdmx__send(rdmx_ep_t *ep, const void *buf, size_t length,
                         rdmx_mr_t *mr, rdmx_cb_t cb, void *arg);
/* @flags: RDMX_OP_FLAG_* */
rdmx_status_t rdmx__put(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                        const void *buf, size_t length, rdmx_mr_t *mr,
                        unsigned flags, rdmx_cb_t cb, void *arg);
rdmx_status_t rdmx__get(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                        void *buf, size_t length, rdmx_mr_t *mr, unsigned flags,
                        rdmx_cb_t cb, void *arg);
rdmx_status_t rdmx__put_notify(rdmx_ep_t *ep, rdmx_rmem_t *rmem,
                               uint64_t offset, const void *buf, size_t length,
                               uint64_t imm, rdmx_mr_t *mr, rdmx_cb_t cb,
                               void *arg);
rdmx_status_t rdmx__flush(rdmx_ep_t *ep, rdmx_cb_t cb, void *arg);
/* @opcode: RDMX_ACC_FADD (@a: the value) or RDMX_ACC_CSWAP (@a compare,
 * @b swap). */
rdmx_status_t rdmx__atomic(rdmx_ep_t *ep, rdmx_rmem_t *rmem, uint64_t offset,
                           unsigned opcode, uint64_t a, uint64_t b,
                           uint64_t *old_p, rdmx_cb_t cb, void *arg);

/* --- msg.c ---------------------------------------------------------------- */

rdmx_core_handler_t rdmx__am_msg;
/* Fail posted receives with @status and drop unexpected messages. */
void rdmx__msg_purge(rdmx_ep_t *ep, rdmx_status_t status);
/* Post a receive; returns the op so a blocking caller can cancel it. */
rdmx_status_t rdmx__recv_post(rdmx_ep_t *ep, void *buf, size_t capacity,
                              rdmx_mr_t *mr, rdmx_cb_t cb, void *arg,
                              rdmx_op_t **op_p);
/* Cancel a posted receive that has not matched a message yet. */
int rdmx__recv_cancel(rdmx_ep_t *ep, rdmx_op_t *op);


/* --- rma.c ---------------------------------------------------------------- */

rdmx_core_handler_t rdmx__am_notify;

/* --- access.c ------------------------------------------------------------ */

rdmx_core_handler_t rdmx__am_access;
rdmx_core_handler_t rdmx__am_access_reply;
/* Fail the carried accesses of @ep that wait for a reply (with its
 * status). */
void rdmx__amo_fail_all(rdmx_ep_t *ep);

/* Carried operations (opcodes of RDMX_AM_ACCESS). */
enum {
    RDMX_ACC_FADD = 1,
    RDMX_ACC_CSWAP = 2,
    RDMX_ACC_PUT = 3,
    RDMX_ACC_GET = 4,
    RDMX_ACC_FLUSH = 5, /* nothing: answered after every earlier access */
};
#define RDMX_ACC_F_NOTIFY 1u /* PUT: tell the target's notify_cb (imm) */
#define RDMX_ACC_F_PULL   2u /* PUT: the data is a descriptor of the bytes,
                                which the target reads itself */
/* Issue a carried access on @ep (locked, checked by rdmx__rma_check);
 * RDMX_INPROGRESS or an error. @rm is NULL for FLUSH. */
rdmx_status_t rdmx__access_issue(rdmx_ep_t *ep, rdmx_rmem_t *rm,
                                 unsigned opcode, unsigned flags,
                                 uint64_t offset, void *buf, size_t length,
                                 rdmx_mr_t *mr, uint64_t operand,
                                 uint64_t swap, uint64_t *old_p, rdmx_cb_t cb,
                                 void *arg);
/* Bounds, rights and endpoint checks of a one-sided operation (rma.c). */
rdmx_status_t rdmx__rma_check(rdmx_ep_t *ep, rdmx_rmem_t *rm, uint64_t offset,
                              uint64_t length, unsigned need,
                              const char *what, uint64_t *raddr_p);

/* --- mem.c ---------------------------------------------------------------- */

/* Find a region by id (takes the context's mr_lock); NULL if gone. */
rdmx_mr_t *rdmx__mr_find(rdmx_context_t *ctx, uint64_t id);
/* Did this context issue the grant (a descriptor's region, range, rights
 * and MAC)? Verified grants are remembered per worker. */
int rdmx__grant_valid(rdmx_worker_t *w, uint64_t region_id, uint64_t offset,
                      uint64_t length, unsigned access,
                      const unsigned char *mac);
/* Issue an operation through the backend: its immediate answer @st (with
 * @req) becomes ours; releases @op unless pending. */
rdmx_status_t rdmx__op_issue(rdmx_op_t *op, rdmx_status_t st, void *req,
                             const char *what);
/* The error @st of @what ("send") toward @ep, with the detail the backend
 * recorded: "what to peer: detail". */
rdmx_status_t rdmx__op_error(rdmx_ep_t *ep, rdmx_status_t st, const char *what);
/* Call after the backend call that started @op's request returned @st
 * (and @req), with op->issuing set before it: an end the backend reported
 * inside the call (it may, on a failing endpoint) is taken here; else the
 * op is in flight, or done with @len_ok or an error. */
void rdmx__op_started(rdmx_op_t *op, rdmx_status_t st, void *req,
                      size_t len_ok);
/* Put-with-notify's and atomics' steps when their request completes. */
void rdmx__notify_step(rdmx_op_t *op, void *req, rdmx_status_t status);
void rdmx__amo_sent(rdmx_op_t *op, void *req, rdmx_status_t status);

/* Unmap and free a region already removed from the registry. */
void rdmx__mr_release(rdmx_mr_t *mr);
/* Destroy the rkeys of descriptors unpacked on @ep (before the UCX close). */
void rdmx__rmem_detach_all(rdmx_ep_t *ep);

/* msg.c, for rdmx__msg_try_now: may a message above @ep's limit be
 * offered (a probe)? Counts it as not at once if not. */
int rdmx__now_probe(rdmx_ep_t *ep);
/* msg.c: the transport took @n bytes at once, more than ever before. */
void rdmx__now_took(rdmx_ep_t *ep, size_t n);
/* msg.c: the transport did not take @n bytes at once (@st): learn. */
rdmx_status_t rdmx__now_refused(rdmx_ep_t *ep, size_t n, rdmx_status_t st);

/* Send @hlen bytes of @hdr and @len of @data to @ep only if the transport
 * takes them at once (RDMX_TP_SEND_NOW | @flags): RDMX_OK,
 * RDMX_ERR_NO_RESOURCE (not sent), or another error. A size the transport
 * refused above every size it took is not offered again but for probes
 * (docs/CORE.md, "Small messages at once"). */
static inline rdmx_status_t rdmx__msg_try_now(rdmx_ep_t *ep, unsigned id,
                                              const void *hdr, size_t hlen,
                                              const void *data, size_t len,
                                              unsigned flags)
{
    rdmx_worker_t *w = ep->worker;
    size_t n = hlen + len;
    rdmx_status_t st;

    if (n > ep->now_max && !rdmx__now_probe(ep))
        return RDMX_ERR_NO_RESOURCE;
    st = w->tp->send(ep->tep, id, hdr, hlen, data, len, NULL,
                     RDMX_TP_SEND_NOW | flags, NULL, NULL);
    if (st != RDMX_OK)
        return rdmx__now_refused(ep, n, st);
    w->stats.msgs_at_once++;
    if (n > ep->now_ok) /* (then also above now_max, if a probe) */
        rdmx__now_took(ep, n);
    return RDMX_OK;
}

/* Does a small message of an upper layer to @ep go into its batch? Yes
 * when @how announces more messages to @ep, when a batch is open (it
 * joins it, keeping order; RDMX_SEND_NOW then sends it), or, unless
 * RDMX_SEND_NOW outside a pass, toward an endpoint that already got a
 * message since the current progress pass began (in the pass or after
 * it); the first goes alone (docs/CORE.md, "Batched messages"). */
static inline int rdmx__batch_holds(rdmx_ep_t *ep, rdmx_send_how_t how)
{
    rdmx_worker_t *w = ep->worker;

    if (how == RDMX_SEND_MORE || ep->batch_n != 0)
        return 1;
    if (how == RDMX_SEND_NOW && !w->in_pass)
        return 0;
    if (ep->batch_pass != w->pass) {
        ep->batch_pass = w->pass;
        return 0;
    }
    return 1;
}
/* batch.c: may the worker's open batches wait no longer, at @now? Not
 * once the oldest is RDMX_BATCH_HOLD_NS old, nor once the handler that
 * ran since the last delivery took that long (the next may be as slow).
 * Asked before each upper-layer handler and completion callback. */
int rdmx__batch_late(const rdmx_worker_t *w, uint64_t now);
/* batch.c: take a message that rdmx__batch_holds into @ep's batch (1;
 * sent at once when it ends a run outside a pass), or leave it to be sent
 * alone (0: too large for a batch, or out of memory). @ep is usable. */
int rdmx__batch_add(rdmx_ep_t *ep, unsigned id, const void *hdr, size_t hlen,
                    const void *data, size_t len, rdmx_send_how_t how);
/* Send @ep's batch now (one message alone as itself). */
void rdmx__batch_send(rdmx_ep_t *ep);
/* Send every batch of @w: the end of a pass. */
void rdmx__batch_send_all(rdmx_worker_t *w);
/* An endpoint freed: what its batch still holds (only if it failed or was
 * aborted: a close sends it) is dropped and counted in msgs_dropped. */
void rdmx__batch_free(rdmx_ep_t *ep);
rdmx_core_handler_t rdmx__am_batch;

/* May operations start on @ep? An error (with its detail) if not. What its
 * batch holds leaves first: nothing started now overtakes it. */
static inline rdmx_status_t rdmx__ep_usable(rdmx_ep_t *ep)
{
    if (__builtin_expect(ep->batch_n != 0, 0))
        rdmx__batch_send(ep);
    if (ep->status != RDMX_OK)
        return rdmx__error(ep->status, "endpoint %s: %s", ep->peer,
                           rdmx_strerror(ep->status));
    if (ep->state != RDMX_EP_CONNECTED)
        return rdmx__error(RDMX_ERR_BUSY, "endpoint %s: still connecting",
                           ep->peer);
    return RDMX_OK;
}

#endif /* RDMX_CORE_INTERNAL_H */
