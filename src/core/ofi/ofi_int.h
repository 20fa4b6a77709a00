/*
 * The libfabric backend's private structures, shared by the files of
 * src/core/ofi/ (the only code in rdmx that includes libfabric's
 * headers). docs/FABRIC.md describes the design.
 *
 * Threads: a worker and everything under it (endpoint, CQ, AV, peers,
 * endpoint ids, requests, receive buffers) is touched by the thread that
 * progresses it, or under the core's worker lock (FI_THREAD_COMPLETION).
 * The context (fabric, domain, the chosen fi_info) is read-only after
 * ctx_create.
 */
#ifndef RDMX_CORE_OFI_INT_H
#define RDMX_CORE_OFI_INT_H

#include "core/internal.h"
#include "core/ofi/frame.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define OFI_NAME_MAX   256 /* fi_getname() bytes we accept */
#define OFI_PROV_MAX   32  /* prov_name bytes in the address, NUL padded */
#define OFI_ADDR_MAGIC 0x49464f52u /* "ROFI" little-endian */
#define OFI_ADDR_HDR   48          /* address blob header (ofi.c, ofi_ep.c) */
#define OFI_RX_BUFS    64          /* receive buffers per worker (at most) */
#define OFI_RX_RESERVE 8           /* posted buffers never lent to a handler */
#define OFI_REQ_CHUNK  64 /* requests allocated (and registered) at once */
#define OFI_EAGER_MAX  (16384 - RDMX_OFI_FRAME_SIZE - RDMX_OFI_FRAME_HDR_MAX)

typedef struct ofi_worker ofi_worker_t;

/* Kinds of completion contexts and request handles: each starts with
 * this. */
enum {
    OFI_CTX_RX = 1,    /* ofi_rxbuf_t */
    OFI_CTX_REQ = 2,   /* ofi_req_t: a frame sent */
    OFI_CTX_RTS = 3,   /* ofi_rts_t: a large message sent (handle only) */
    OFI_CTX_RDESC = 4, /* ofi_rdesc_t: a large message to pull (handle) */
    OFI_CTX_READ = 5   /* ofi_read_t: one fi_read of a pull */
};

typedef struct {
    struct fi_context2 fctx; /* first: libfabric's (FI_CONTEXT, FI_CONTEXT2) */
    int kind;                /* OFI_CTX_* */
} ofi_opctx_t;

typedef struct {
    struct fi_info *info; /* the chosen answer of fi_getinfo */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    char prov[OFI_PROV_MAX]; /* info->fabric_attr->prov_name */
    rdmx_transport_t medium; /* what ep_transport reports */
    uint64_t mr_mode;        /* as granted */
    size_t eager_max;        /* data bytes in one frame */
    size_t chunk;            /* bytes of one fi_read of a pull */
    size_t key_size;         /* mr_key_size: bytes of a requested key */
    size_t frame_max;        /* bytes of a receive buffer */
    int wait_fd;             /* CQs get an FI_WAIT_FD wait object */
    char describe[192];      /* rdmx_context_backend() */
} ofi_ctx_t;

/* A peer worker: one AV entry, shared by every endpoint toward it. */
typedef struct {
    rdmx_list_t link; /* worker->peers */
    fi_addr_t fi_addr;
    unsigned refs;     /* endpoints toward it */
    unsigned inflight; /* sends and reads the provider holds */
    size_t name_len;
    unsigned char name[OFI_NAME_MAX];
} ofi_peer_t;

/* A backend endpoint. Ids name it in frames: slot + 1 in the low 20 bits,
 * the slot's generation above (a closed endpoint's id is never reused at
 * once). */
typedef struct {
    rdmx_tep_t tep; /* first: the core's view */
    ofi_worker_t *worker;
    ofi_peer_t *peer;
    uint32_t id;        /* ours, in frames' src */
    uint32_t remote;    /* the peer endpoint's id; 0 until known */
    int sent_bind;      /* a client endpoint: never a BIND target */
    uint64_t seq;       /* creation order (oldest unpaired first) */
    rdmx_list_t link;   /* worker->eps */
    rdmx_list_t reqs;   /* requests not yet completed */
    rdmx_list_t rts;    /* ofi_rts_t waiting for their FIN */
    rdmx_list_t rdescs; /* ofi_rdesc_t of messages from the peer */
} ofi_ep_t;

/* A large message sent: its bytes registered for the receiver's reads
 * (exactly their range, a fresh key) until its FIN. */
typedef struct {
    ofi_opctx_t c; /* first (the core's request handle) */
    ofi_worker_t *worker;
    ofi_ep_t *ep;      /* NULL once its endpoint closed */
    rdmx_list_t link;  /* ep->rts, then worker->rts_done */
    rdmx_list_t wlink; /* worker->rts_all until freed */
    rdmx_op_t *op;
    uint64_t id;          /* in the RTS and the FIN */
    struct fid_mr *mr;    /* NULL once closed */
    rdmx_status_t status; /* of a completion in worker->rts_done */
    int done, forgotten;
} ofi_rts_t;

#define OFI_READ_WINDOW 8 /* fi_reads in flight per pull */

typedef struct ofi_rdesc ofi_rdesc_t;

typedef struct {
    ofi_opctx_t c; /* first */
    ofi_rdesc_t *d;
    size_t len; /* 0: free */
} ofi_read_t;

/* A large message announced by an RTS: the core's descriptor
 * (RDMX_MSG_RNDV), then the request of its pull. */
struct ofi_rdesc {
    ofi_opctx_t c; /* first (descriptor and request handle) */
    ofi_worker_t *worker;
    ofi_ep_t *ep;      /* NULL once its endpoint closed */
    ofi_peer_t *peer;  /* the sender, held while reads are out */
    rdmx_list_t link;  /* ep->rdescs */
    rdmx_list_t qlink; /* worker->pulls while reads wait */
    rdmx_list_t wlink; /* worker->rdesc_all until freed */
    uint64_t id, raddr, key, length;
    rdmx_op_t *op; /* the receive, once pulling */
    unsigned char *buf;
    size_t want, issued, got; /* bytes to pull, asked, arrived */
    unsigned inflight;
    rdmx_status_t status;
    struct fid_mr *lmr; /* FI_MR_LOCAL: the receive buffer */
    void *ldesc;
    int pulling, done, forgotten;
    ofi_read_t reads[OFI_READ_WINDOW];
};

enum { OFI_REQ_FREE, OFI_REQ_PENDING, OFI_REQ_POSTED, OFI_REQ_DONE };

/* A send: the frame (header, core header, data) copied into the request's
 * buffer, which lives in a registered chunk. */
typedef struct {
    ofi_opctx_t c; /* first */
    ofi_worker_t *worker;
    ofi_ep_t *ep;         /* NULL once its endpoint closed */
    ofi_peer_t *peer;     /* its destination, held while posted */
    rdmx_op_t *op;        /* NULL: nobody waits (fire and forget) */
    rdmx_list_t link;     /* ep->reqs while not completed */
    rdmx_list_t qlink;    /* worker->pending, ->done or ->free */
    int state;            /* OFI_REQ_* */
    int forgotten;        /* req_forget came: free once done */
    rdmx_status_t status; /* of a completion waiting in ->done */
    void *desc;           /* fi_mr_desc of its chunk (FI_MR_LOCAL) */
    fi_addr_t dest;
    size_t len;         /* bytes of @buf to send */
    unsigned char *buf; /* frame_max bytes */
} ofi_req_t;

typedef struct {
    rdmx_list_t link;  /* worker->chunks */
    struct fid_mr *mr; /* NULL without FI_MR_LOCAL */
    ofi_req_t reqs[OFI_REQ_CHUNK];
    unsigned char *bytes; /* OFI_REQ_CHUNK x frame_max */
} ofi_chunk_t;

typedef struct {
    ofi_opctx_t c; /* first */
    int posted;    /* the provider owns it */
    int held;      /* the core kept its data (release) */
} ofi_rxbuf_t;

typedef struct {
    ofi_ep_t *ep; /* NULL while the slot is free */
    uint32_t gen;
    uint32_t next_free; /* free: slot + 1 of the next free one, or 0 */
} ofi_slot_t;

struct ofi_worker {
    ofi_ctx_t *ctx;
    rdmx_worker_t *w;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    int epfd;                  /* the core's efd: CQ fd, evfd, timerfd */
    int evfd;                  /* signal() */
    int tfd;                   /* timerfd: wake-up without a CQ fd */
    int hold[RDMX_MSG_ID_MAX]; /* set_handler's @hold */
    unsigned char addr[OFI_ADDR_HDR + OFI_NAME_MAX];
    size_t addr_len;
    uint64_t instance; /* random, in the address */
    rdmx_list_t peers; /* ofi_peer_t, in the AV (idle ones too) */
    rdmx_list_t eps;   /* ofi_ep_t, oldest first */
    uint64_t ep_seq;
    ofi_slot_t *slots; /* endpoint ids */
    size_t nslots, slot_cap;
    uint32_t free_slot;     /* head of free slots + 1 (0: none) */
    rdmx_list_t chunks;     /* ofi_chunk_t */
    rdmx_list_t free;       /* ofi_req_t */
    rdmx_list_t pending;    /* ofi_req_t the provider said EAGAIN to */
    rdmx_list_t done;       /* ofi_req_t completed outside progress */
    rdmx_list_t rts_done;   /* ofi_rts_t ended by their endpoint's close */
    rdmx_list_t pulls;      /* ofi_rdesc_t whose next fi_read waits */
    rdmx_list_t rts_all;    /* every ofi_rts_t */
    rdmx_list_t rdesc_all;  /* every ofi_rdesc_t */
    uint64_t next_rndv;     /* rendezvous ids */
    unsigned char *rx_slab; /* rx_count x frame_max */
    struct fid_mr *rx_mr;
    void *rx_desc;
    ofi_rxbuf_t rx[OFI_RX_BUFS];
    unsigned rx_count, rx_posted;
    uint64_t stale;     /* frames for endpoints already closed */
    uint64_t tp_errors; /* completion errors tied to no request */
};

/* ofi_rndv.c */
rdmx_status_t rdmx__ofi_rts_send(ofi_ep_t *ep, unsigned id, const void *hdr,
                                 size_t hlen, const void *data, size_t length,
                                 rdmx_op_t *op, void **req_p);
void rdmx__ofi_on_rts(ofi_worker_t *ow, ofi_ep_t *ep,
                      const rdmx_ofi_frame_t *f);
void rdmx__ofi_on_fin(ofi_worker_t *ow, ofi_ep_t *ep,
                      const rdmx_ofi_frame_t *f);
void rdmx__ofi_read_done(ofi_read_t *rd, rdmx_status_t st);
unsigned rdmx__ofi_rndv_poll(ofi_worker_t *ow);
void rdmx__ofi_ep_drop_rndv(ofi_ep_t *ep);
rdmx_status_t rdmx__ofi_recv(void *tw, void *desc, void *buf, size_t length,
                             void *tmr, rdmx_op_t *op, void **req_p);
void rdmx__ofi_rdesc_release(ofi_rdesc_t *d);
int rdmx__ofi_rndv_forget(void *req);
void rdmx__ofi_rndv_cleanup(ofi_worker_t *ow);

/* ofi_msg.c */
rdmx_status_t rdmx__ofi_frame_send(ofi_ep_t *ep, unsigned kind, unsigned id,
                                   const void *hdr, size_t hlen,
                                   const void *data, size_t length,
                                   unsigned flags, rdmx_op_t *op, void **req_p);
rdmx_status_t rdmx__ofi_rx_init(ofi_worker_t *ow);
void rdmx__ofi_rx_repost(ofi_worker_t *ow);
void rdmx__ofi_bufs_cleanup(ofi_worker_t *ow);
unsigned rdmx__ofi_poll(ofi_worker_t *ow);
void rdmx__ofi_ep_drop_reqs(ofi_ep_t *ep);
rdmx_status_t rdmx__ofi_send(rdmx_tep_t *tep, unsigned id, const void *hdr,
                             size_t hlen, const void *data, size_t length,
                             void *tmr, unsigned flags, rdmx_op_t *op,
                             void **req_p);
void rdmx__ofi_release(void *tw, void *data);
void rdmx__ofi_req_forget(void *req);

/* ofi.c */
rdmx_status_t rdmx__ofi_status(int fi_err);

/* ofi_ep.c */
rdmx_status_t rdmx__ofi_ep_create(void *tw, const void *addr, size_t len,
                                  rdmx_tep_t **tep_p);
rdmx_transport_t rdmx__ofi_ep_transport(rdmx_tep_t *tep);
rdmx_status_t rdmx__ofi_ep_close(void *tw, rdmx_tep_t *tep, int force,
                                 void *closer, void **req_p);
ofi_ep_t *rdmx__ofi_ep_lookup(ofi_worker_t *ow, uint32_t id);
ofi_peer_t *rdmx__ofi_peer_by_addr(ofi_worker_t *ow, fi_addr_t a);
void rdmx__ofi_peer_failed(ofi_worker_t *ow, ofi_peer_t *peer, rdmx_status_t st,
                           const char *why);
void rdmx__ofi_peer_io_done(ofi_worker_t *ow, ofi_peer_t *peer);

#endif /* RDMX_CORE_OFI_INT_H */
