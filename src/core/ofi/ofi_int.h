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

#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

/* libfabric's exported functions, from the library loaded by the first
 * ofi context (ofi_lib.c). The names below make the backend's calls go
 * through them; fi_allocinfo() is the header's inline fi_dupinfo(NULL). */
typedef struct {
    int (*getinfo)(uint32_t version, const char *node, const char *service,
                   uint64_t flags, const struct fi_info *hints,
                   struct fi_info **info);
    void (*freeinfo)(struct fi_info *info);
    struct fi_info *(*dupinfo)(const struct fi_info *info);
    int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
                  void *context);
    const char *(*strerror)(int errnum);
    uint32_t (*version)(void);
} rdmx_ofi_lib_t;

extern rdmx_ofi_lib_t rdmx__ofi_lib;

/* Load libfabric once per process; RDMX_ERR_UNSUPPORTED saying why not. */
rdmx_status_t rdmx__ofi_lib_load(void);

#define fi_getinfo     rdmx__ofi_lib.getinfo
#define fi_freeinfo    rdmx__ofi_lib.freeinfo
#define fi_dupinfo     rdmx__ofi_lib.dupinfo
#define fi_fabric      rdmx__ofi_lib.fabric
#define fi_strerror    rdmx__ofi_lib.strerror
#define fi_version     rdmx__ofi_lib.version
#define fi_allocinfo() rdmx__ofi_lib.dupinfo(NULL)

#define OFI_NAME_MAX   256 /* fi_getname() bytes we accept */
#define OFI_PROV_MAX   32  /* prov_name bytes in the address, NUL padded */
#define OFI_ADDR_MAGIC 0x49464f52u /* "ROFI" little-endian */
#define OFI_ADDR_HDR   48          /* address blob header (ofi.c, ofi_ep.c) */
#define OFI_ADDR_BELL  0x01        /* address flags (byte 5): has a doorbell */
#define OFI_RX_BUFS    64          /* receive buffers per worker (at most) */
#define OFI_RX_RESERVE 8           /* posted buffers never lent to a handler */
#define OFI_REQ_CHUNK  64 /* requests allocated (and registered) at once */
#define OFI_EAGER_MAX  (16384 - RDMX_OFI_FRAME_SIZE - RDMX_OFI_FRAME_HDR_MAX)
#define OFI_INJECT_MAX 4096 /* frame bytes sent by fi_inject, at most */

typedef struct ofi_worker ofi_worker_t;

/* The shared page of a doorbell (ofi_bell.c). */
struct ofi_bell {
    uint32_t sleeping; /* set by its worker, taken down by a ringer */
};

/* Kinds of completion contexts and request handles: each starts with
 * this. */
enum {
    OFI_CTX_RX = 1,    /* ofi_rxbuf_t */
    OFI_CTX_REQ = 2,   /* ofi_req_t: a frame sent */
    OFI_CTX_RTS = 3,   /* ofi_rts_t: a large message sent (handle only) */
    OFI_CTX_RDESC = 4, /* ofi_rdesc_t: a large message to pull (handle) */
    OFI_CTX_READ = 5,  /* ofi_read_t: one fi_read of a pull */
    OFI_CTX_RMA = 6,   /* ofi_rma_t: a put, get, atomic or flush (handle) */
    OFI_CTX_PIECE = 7  /* ofi_piece_t: one fi_write/fi_read/atomic of it */
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
    size_t inject_max;       /* frame bytes fi_inject takes (0: none) */
    size_t chunk;            /* bytes of one fi_read of a pull */
    size_t key_size;         /* mr_key_size: bytes of a requested key */
    size_t frame_max;        /* bytes of a receive buffer */
    int wait_fd;             /* CQs get an FI_WAIT_FD wait object */
    char describe[192];      /* rdmx_context_backend() */
    /* Memory registration (ofi_mem.c). mr_mode above is what the code
     * honours: the provider's bits plus those RDMX_OFI_MR_MODE_EXTRA
     * pretends; calls that only a provider asking for a bit implements
     * (fi_mr_bind, fi_mr_raw_attr) depend on mr_granted. */
    uint64_t mr_granted;  /* info->domain_attr->mr_mode */
    uint32_t prov_id;     /* FNV-1a 32 of prov, in packed keys */
    int one_sided;        /* regions get remote access (tp_rma) */
    int amo_ok;           /* fi_query_atomic: FI_SUM and FI_CSWAP */
    int amo_forced;       /* RDMX_ATOMICS=transport */
    char amo_why[160];    /* why not, for RDMX_ERR_UNSUPPORTED */
    size_t rma_max;       /* bytes of one fi_write/fi_read (one-sided) */
    uint64_t write_flags; /* FI_DELIVERY_COMPLETE where honoured */
    int cq_data;          /* cq_data_size >= 8: fi_writedata notifies */
    pthread_mutex_t lock; /* the two lists below (FI_MR_ENDPOINT) */
    rdmx_list_t workers;  /* ofi_worker_t.clink */
    rdmx_list_t regions;  /* ofi_mr_t.link */
} ofi_ctx_t;

/* One registration of a region: the domain's, or (FI_MR_ENDPOINT) one
 * bound to a worker's endpoint. */
typedef struct {
    ofi_worker_t *worker; /* NULL: the domain's */
    uint64_t instance;    /* worker's instance id (0: the domain's) */
    struct fid_mr *mr;
    void *desc; /* fi_mr_desc: for local use (FI_MR_LOCAL) */
    uint64_t key;
} ofi_mrent_t;

/* A region (the core's tmr). Entries change under ctx->lock. */
typedef struct {
    rdmx_list_t link; /* ctx->regions (FI_MR_ENDPOINT) */
    void *base;
    size_t len;
    void *alloc;     /* what mem_map allocated, or NULL */
    uint64_t access; /* FI_* access bits of its registrations */
    unsigned n, cap;
    ofi_mrent_t *ents; /* n registrations (0 when carried) */
} ofi_mr_t;

/* A peer's region as a descriptor names it (rkey_unpack). */
typedef struct {
    ofi_ctx_t *ctx;
    uint64_t key;   /* what RMA calls take (mapped, with FI_MR_RAW) */
    uint64_t base;  /* the owner's address of the registration */
    uint64_t len;   /* its length */
    int virt;       /* addresses are virtual (else offsets from base) */
    int raw_mapped; /* fi_mr_unmap_key at destroy */
} ofi_rkey_t;

/* A peer worker: one AV entry, shared by every endpoint toward it. */
typedef struct {
    rdmx_list_t link; /* worker->peers */
    fi_addr_t fi_addr;
    uint64_t instance;     /* the peer worker's, from its address */
    unsigned refs;         /* endpoints toward it */
    unsigned inflight;     /* sends and reads the provider holds */
    struct ofi_bell *bell; /* its doorbell's page, mapped; or NULL */
    int bell_tried;        /* its address was looked at (ofi_bell.c) */
    int bell_always;       /* a doorbell without its page: ring every post */
    socklen_t bell_alen;
    struct sockaddr_un bell_addr; /* its doorbell's socket */
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
    uint32_t id;              /* ours, in frames' src */
    uint32_t remote;          /* the peer endpoint's id; 0 until known */
    int sent_bind;            /* a client endpoint: never a BIND target */
    uint64_t seq;             /* creation order (oldest unpaired first) */
    rdmx_list_t link;         /* worker->eps */
    rdmx_list_t reqs;         /* requests not yet completed */
    rdmx_list_t rts;          /* ofi_rts_t waiting for their FIN */
    rdmx_list_t rdescs;       /* ofi_rdesc_t of messages from the peer */
    rdmx_list_t rmas;         /* ofi_rma_t not yet completed, in issue order */
    rdmx_list_t flushes;      /* ofi_rma_t flushes, in issue order */
    uint64_t rma_seq;         /* one-sided operations issued (flush order) */
    uint32_t notify_seq;      /* put-with-notify tokens toward the peer */
    rdmx_status_t rma_status; /* first failure of a one-sided operation:
                                 every later flush fails with it */
} ofi_ep_t;

/* Put-with-notify at the target: its NOTIFY message and the write's
 * remote CQ data, joined by their 64-bit token (the target endpoint's id
 * above, a sequence below); delivered to the core once both came. */
typedef struct {
    rdmx_list_t link; /* worker->joins or ->join_free */
    uint64_t token;
    int have_meta, have_data;
    unsigned char hdr[RDMX_NOTIFY_SIZE];
} ofi_join_t;

#define OFI_JOIN_MAX 4096 /* tokens waiting per worker */

#define OFI_RMA_WINDOW 4 /* pieces in flight per one-sided operation */

typedef struct ofi_rma ofi_rma_t;

/* One provider call of a one-sided operation. */
typedef struct {
    ofi_opctx_t c; /* first */
    ofi_rma_t *r;
    size_t len; /* bytes it moves; 0: free */
    int busy;
} ofi_piece_t;

enum {
    OFI_RMA_PUT,
    OFI_RMA_GET,
    OFI_RMA_FADD,
    OFI_RMA_CSWAP,
    OFI_RMA_FLUSH,
    OFI_RMA_PUTN /* put-with-notify */
};

/* A one-sided operation (ofi_rma.c): put/get in pieces of rma_max bytes,
 * a 64-bit atomic, or a flush waiting for every earlier one. Pooled per
 * worker (worker->rma_free); the 64-bit words sit in the request so that
 * one registration (FI_MR_LOCAL) covers them for its lifetime. */
struct ofi_rma {
    ofi_opctx_t c; /* first (the core's request handle) */
    ofi_worker_t *worker;
    ofi_ep_t *ep;       /* NULL once its endpoint closed */
    ofi_peer_t *peer;   /* held while pieces are out */
    rdmx_op_t *op;      /* NULL: nobody waits (put of a put-with-notify) */
    rdmx_list_t link;   /* ep->rmas or ep->flushes */
    rdmx_list_t qlink;  /* worker->rma_wait / ->rma_done / ->rma_free */
    rdmx_list_t wlink;  /* worker->rma_all while allocated */
    int kind;           /* OFI_RMA_* */
    uint64_t seq;       /* ep->rma_seq at issue (flush: what it waits for) */
    unsigned char *buf; /* the local bytes (put/get) */
    size_t want, issued, got; /* bytes to move, posted, come back */
    uint64_t raddr, key;      /* the first byte's transport address, its key */
    void *desc;               /* local buffer's desc (FI_MR_LOCAL), or NULL */
    struct fid_mr *lmr;       /* a registration made for this operation */
    uint64_t *result;         /* atomics: where the old value goes */
    uint64_t token;           /* put-with-notify: the last piece's CQ data */
    unsigned char nhdr[RDMX_NOTIFY_SIZE]; /* put-with-notify's NOTIFY */
    unsigned inflight;                    /* pieces the provider holds */
    rdmx_status_t status; /* the first failure of a piece, or RDMX_OK */
    int done, forgotten;  /* over; the core forgot it (req_forget) */
    int issuing;   /* inside the call that starts it (no rdmx__tp_done) */
    int last_done; /* put-with-notify: its last step was taken */
    ofi_piece_t pieces[OFI_RMA_WINDOW];
    uint64_t words[3];  /* atomics: operand, compare, result */
    struct fid_mr *wmr; /* FI_MR_LOCAL: covers words (pool lifetime) */
    void *wdesc;        /* its desc, or NULL */
};

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
    int epfd;                  /* the core's set (not ours): the CQ's fd or
                                  tfd, evfd and the doorbell go in it */
    int cqfd;                  /* the CQ's wait fd (the provider's), or -1 */
    int evfd;                  /* signal() */
    int tfd;                   /* timerfd: wake-up without a CQ fd */
    int hold[RDMX_MSG_ID_MAX]; /* set_handler's @hold */
    unsigned char addr[OFI_ADDR_HDR + OFI_NAME_MAX];
    size_t addr_len;
    uint64_t instance;     /* random, in the address */
    rdmx_list_t peers;     /* ofi_peer_t, in the AV (idle ones too) */
    ofi_peer_t **peer_tab; /* by AV index (FI_AV_TABLE), peer_tab_len */
    size_t peer_tab_len;
    rdmx_list_t eps; /* ofi_ep_t, oldest first */
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
    uint64_t tp_errors;    /* completion errors tied to no request */
    rdmx_list_t clink;     /* ctx->workers (under ctx->lock) */
    rdmx_list_t rma_free;  /* ofi_rma_t ready for reuse */
    rdmx_list_t rma_wait;  /* ofi_rma_t whose next piece met -FI_EAGAIN */
    rdmx_list_t rma_done;  /* ofi_rma_t finished outside progress */
    rdmx_list_t rma_all;   /* every allocated ofi_rma_t */
    rdmx_list_t joins;     /* ofi_join_t waiting for their other half */
    rdmx_list_t join_free; /* ofi_join_t for reuse */
    unsigned njoins;       /* on joins */
    unsigned inflight;     /* sends, reads and pieces the provider holds */
    /* The doorbell (ofi_bell.c): only without a CQ wait fd. */
    struct ofi_bell *bell; /* our page; NULL: none (the timer alone) */
    int bell_fd;           /* our socket, or one to ring peers; or -1 */
    char bell_name[64];    /* our page's name */
    unsigned bell_barrier; /* a word to order a post before a flag's load */
    unsigned bell_peers;   /* peers we may ring */
    uint64_t bell_rings, bell_wakes, bell_errors;
};

/* ofi_bell.c */
void rdmx__ofi_bell_init(ofi_worker_t *ow);
void rdmx__ofi_bell_fini(ofi_worker_t *ow);
void rdmx__ofi_bell_peer_open(ofi_worker_t *ow, ofi_peer_t *p,
                              const unsigned char *addr);
void rdmx__ofi_bell_peer_close(ofi_worker_t *ow, ofi_peer_t *p);
void rdmx__ofi_bell_ring_slow(ofi_worker_t *ow, ofi_peer_t *p);
void rdmx__ofi_bell_ring_all(ofi_worker_t *ow);
void rdmx__ofi_bell_awake(ofi_worker_t *ow);
rdmx_status_t rdmx__ofi_bell_arm(ofi_worker_t *ow);
void rdmx__ofi_shm_sweep(void);

/* The provider took a send, read or piece toward @p: count it, and ring
 * @p if it sleeps. */
static inline void rdmx__ofi_posted(ofi_worker_t *ow, ofi_peer_t *p)
{
    p->inflight++;
    ow->inflight++;
    if (p->bell != NULL || p->bell_always)
        rdmx__ofi_bell_ring_slow(ow, p);
}

/* The provider took a frame by fi_inject toward @p (nothing to count):
 * ring @p if it sleeps. */
static inline void rdmx__ofi_injected(ofi_worker_t *ow, ofi_peer_t *p)
{
    if (p->bell != NULL || p->bell_always)
        rdmx__ofi_bell_ring_slow(ow, p);
}

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
/* The environment variable @name is "0" (a feature turned off). */
int rdmx__ofi_env_off(const char *name);

/* ofi_mem.c */
rdmx_status_t rdmx__ofi_mr_reg(ofi_ctx_t *oc, ofi_worker_t *ow, const void *buf,
                               size_t len, uint64_t access,
                               struct fid_mr **mr_p, uint64_t *key_p);
void rdmx__ofi_mem_init(ofi_ctx_t *oc);
rdmx_status_t rdmx__ofi_mem_map(void *tctx, void *addr, size_t length,
                                int allocate, unsigned access, void **tmr_p,
                                void **addr_p, void **rkey_p,
                                size_t *rkey_len_p);
void rdmx__ofi_mem_unmap(void *tctx, void *tmr, void *rkey);
rdmx_status_t rdmx__ofi_mem_worker_add(ofi_worker_t *ow);
void rdmx__ofi_mem_worker_remove(ofi_worker_t *ow);
void *rdmx__ofi_mr_desc(ofi_worker_t *ow, void *tmr);
rdmx_status_t rdmx__ofi_rkey_unpack(rdmx_tep_t *tep, const void *rkey,
                                    size_t len, void **trkey_p);
void rdmx__ofi_rkey_destroy(void *trkey);

/* ofi_rma.c */
void rdmx__ofi_rma_init(ofi_ctx_t *oc);
int rdmx__ofi_has_atomics(void *tctx);
rdmx_status_t rdmx__ofi_put(rdmx_tep_t *tep, const void *buf, size_t length,
                            void *tmr, uint64_t raddr, void *trkey,
                            rdmx_op_t *op, void **req_p);
rdmx_status_t rdmx__ofi_get(rdmx_tep_t *tep, void *buf, size_t length,
                            void *tmr, uint64_t raddr, void *trkey,
                            rdmx_op_t *op, void **req_p);
rdmx_status_t rdmx__ofi_flush(rdmx_tep_t *tep, rdmx_op_t *op, void **req_p);
rdmx_status_t rdmx__ofi_put_notify(rdmx_tep_t *tep, const void *buf,
                                   size_t length, void *tmr, uint64_t raddr,
                                   void *trkey, const void *nhdr, size_t nhlen,
                                   rdmx_op_t *op, void **req_p);
void rdmx__ofi_on_notify(ofi_worker_t *ow, ofi_ep_t *ep,
                         const rdmx_ofi_frame_t *f);
void rdmx__ofi_on_cq_data(ofi_worker_t *ow, uint64_t token);
void rdmx__ofi_ep_drop_joins(ofi_ep_t *ep);
void rdmx__ofi_joins_cleanup(ofi_worker_t *ow);
rdmx_status_t rdmx__ofi_atomic(rdmx_tep_t *tep, int cswap, uint64_t *operand,
                               uint64_t *result, uint64_t raddr, void *trkey,
                               rdmx_op_t *op, void **req_p);
void rdmx__ofi_piece_done(ofi_piece_t *p, rdmx_status_t st);
unsigned rdmx__ofi_rma_poll(ofi_worker_t *ow);
int rdmx__ofi_rma_forget(void *req);
void rdmx__ofi_ep_drop_rma(ofi_ep_t *ep);
void rdmx__ofi_rma_cleanup(ofi_worker_t *ow);

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
