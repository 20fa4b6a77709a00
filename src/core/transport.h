/*
 * The transport interface: what the transport-neutral core (endpoints,
 * operations, matching, descriptors, waiting, the bootstrap) asks of a
 * backend, and what a backend reports back. A backend is an operations
 * table; UCX's is src/core/ucx/ (the only code that includes UCX headers),
 * libfabric's src/core/ofi/ (the only code that includes libfabric's).
 *
 * Objects: a backend context per rdmx context (memory registration lives
 * there), a backend worker per rdmx worker (progress, a wake-up fd, its own
 * transport address), a backend endpoint per connection (rdmx_tep_t, made
 * from the peer worker's address), a backend registration per region and a
 * backend remote key per unpacked descriptor.
 *
 * Requests: an operation that cannot finish at once returns RDMX_INPROGRESS
 * and stores a request handle; the backend later calls rdmx__tp_done() with
 * the operation record (rdmx_op_t) the core gave it, exactly once. The core
 * may stop waiting for a request (rdmx_tp_ops_t.req_forget) when an
 * endpoint fails; rdmx__tp_done still comes for it later (or never, if the
 * worker is destroyed first).
 *
 * Threads: everything on a worker runs on the thread that progresses it;
 * memory registration on any thread.
 */
#ifndef RDMX_CORE_TRANSPORT_H
#define RDMX_CORE_TRANSPORT_H

#include <rdmx/core.h>

#include "util/list.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rdmx_op rdmx_op_t;

/* A backend endpoint: the backend's struct begins with this. */
typedef struct {
    rdmx_list_t link;      /* worker->spares while it has no owner */
    rdmx_ep_t *owner;      /* NULL: a spare, waiting for its pair */
    uint64_t peer_worker;  /* the remote worker's id */
    uint64_t expire_ns;    /* a spare is closed after this */
    int failed;            /* the transport reported an error on it */
    /* Nonzero while its connection is bound: the peer's name for the
     * connection (set by the core). A backend may send it with a message
     * instead of its own way of naming the sender; the receiver's backend
     * finds the endpoint with rdmx__tp_token. */
    uint64_t tx_token;
} rdmx_tep_t;

/* A piece of a gathered send (sendv): an address and a length, in the
 * layout of UCX's own iov pieces (the UCX backend checks that at build
 * time and passes the array on as it is). */
typedef struct {
    const void *base;
    size_t length;
} rdmx_tp_iov_t;

#define RDMX_TP_IOV_MAX 4  /* most pieces of a sendv or recvv */
#define RDMX_TP_HDR_MAX 48 /* longest header of a send or sendv */

/* A piece of a scattered receive (recvv): the same layout, writable. */
typedef struct {
    void *base;
    size_t length;
} rdmx_tp_piece_t;

/* Flags of a send. */
enum {
    /* Only if the transport takes it at once from the caller's buffers:
     * RDMX_OK or RDMX_ERR_NO_RESOURCE, never a request. */
    RDMX_TP_SEND_NOW = 1u << 0,
    /* Deliver the data with the message, whatever its size (never as a
     * large message the receiver must fetch). */
    RDMX_TP_SEND_EAGER = 1u << 1,
};

/* Flags of worker_create. */
enum {
    /* Calls come from several threads, serialized by the core's lock. */
    RDMX_TP_WORKER_THREADED = 1u << 0,
    /* RDMX_WORKER_FLAG_BUSY_POLL: the owner rarely sleeps on the fd, and
     * a wake-up may then come a timer's period (1 ms) late. */
    RDMX_TP_WORKER_BUSY = 1u << 1,
};

/* What kind of remote key a backend packs into descriptors (mem.c
 * writes it into each descriptor and refuses another kind at unpack). */
enum {
    RDMX_KEY_KIND_UCX = 1, /* UCX's packed rkeys */
    RDMX_KEY_KIND_OFI = 2, /* src/core/ofi/ofi_mem.c's */
};

typedef struct {
    const char *name; /* "ucx" */

    /* --- context: configuration, memory registration ------------------ */
    /* @one_sided: the core will use put/get/atomics of the transport;
     * without it the backend must not let a peer reach memory through the
     * transport at all (UCX: no RMA or AMO features, so its worker installs
     * no software handlers for them). */
    rdmx_status_t (*ctx_create)(rdmx_context_t *ctx, rdmx_transport_t t,
                                const char *net_devices, int one_sided,
                                void **tctx_p);
    void (*ctx_destroy)(void *tctx);
    /* Optional (NULL: the backend's name): what rdmx_context_backend()
     * says, e.g. "ofi 1.17 tcp;ofi_rxm, domain lo". */
    const char *(*ctx_describe)(void *tctx);
    /* Optional (NULL: the transport asked for): the medium the backend
     * chose, for rdmx_context_transport(). */
    rdmx_transport_t (*ctx_transport)(void *tctx);
    /* Register (or, with @allocate, allocate and register) memory for
     * local use and remote access with @access (RDMX_ACCESS_*). Writes the
     * registration, the address (allocated memory's), and a packed remote
     * key for descriptors (released by mem_unmap). */
    rdmx_status_t (*mem_map)(void *tctx, void *addr, size_t length,
                             int allocate, unsigned access, void **tmr_p,
                             void **addr_p, void **rkey_p,
                             size_t *rkey_len_p);
    void (*mem_unmap)(void *tctx, void *tmr, void *rkey);

    /* --- worker ------------------------------------------------------- */
    /* Create; @flags: RDMX_TP_WORKER_*. @epfd is the core's epoll set,
     * which a sleeping worker waits on: the backend either puts its own fds
     * in it (level-triggered, data.ptr NULL: its progress handles them;
     * removed by worker_destroy, before the core closes the set) and writes
     * -1 to *efd_p, or writes one fd that becomes readable on its events,
     * which the core adds. Also writes the worker's transport address
     * (valid until worker_destroy). */
    rdmx_status_t (*worker_create)(void *tctx, rdmx_worker_t *w, unsigned flags,
                                   int epfd, void **tw_p, int *efd_p,
                                   const void **addr_p, size_t *addr_len_p);
    void (*worker_destroy)(void *tw);
    unsigned (*progress)(void *tw);
    /* RDMX_OK: safe to sleep on the fd; RDMX_ERR_BUSY: progress first. */
    rdmx_status_t (*arm)(void *tw);
    void (*signal)(void *tw); /* any thread: wake a sleeper */
    /* Deliver messages of @id to rdmx__tp_deliver from now on; @hold: the
     * receiver may keep eager data (RDMX_MSG_HOLDABLE, never set without
     * it). */
    rdmx_status_t (*set_handler)(void *tw, unsigned id, int hold);

    /* --- endpoints ---------------------------------------------------- */
    /* An endpoint toward the worker whose address is @addr (@len bytes,
     * from the peer: the backend must not read past it). Failures come
     * later through rdmx__tp_ep_failed. */
    rdmx_status_t (*ep_create)(void *tw, const void *addr, size_t len,
                               rdmx_tep_t **tep_p);
    /* Which transport carries @tep's messages: RDMX_TRANSPORT_SHM, _TCP,
     * _RDMA, or _AUTO when the backend cannot tell. */
    rdmx_transport_t (*ep_transport)(rdmx_tep_t *tep);
    /* Close and free @tep; @force: drop what is in flight. RDMX_OK: done;
     * RDMX_INPROGRESS: rdmx__tp_closed(@closer) follows (unless the
     * worker goes first). */
    rdmx_status_t (*ep_close)(void *tw, rdmx_tep_t *tep, int force,
                              void *closer, void **req_p);

    /* --- two-sided ---------------------------------------------------- */
    /* Send message @id: header @hdr (at most RDMX_TP_HDR_MAX bytes; must stay
     * valid until completion), @length bytes of @data (registered in @tmr, or
     * NULL). RDMX_OK (done), RDMX_INPROGRESS (*@req_p; rdmx__tp_done(@op)
     * follows), or an error. */
    rdmx_status_t (*send)(rdmx_tep_t *tep, unsigned id, const void *hdr,
                          size_t hlen, const void *data, size_t length,
                          void *tmr, unsigned flags, rdmx_op_t *op,
                          void **req_p);
    /* Optional (NULL: the core joins the pieces into one buffer and uses
     * send): send as send does, with the data gathered from @n pieces
     * (1 <= @n <= RDMX_TP_IOV_MAX) at @iov, none registered; @iov and the
     * pieces stay valid until completion (the core keeps @iov in the
     * operation record). The core always passes an @op and no flags. */
    rdmx_status_t (*sendv)(rdmx_tep_t *tep, unsigned id, const void *hdr,
                           size_t hlen, const rdmx_tp_iov_t *iov, unsigned n,
                           unsigned flags, rdmx_op_t *op, void **req_p);
    /* Move a large message (@desc from delivery, RDMX_MSG_RNDV) into
     * @buf; the descriptor is the backend's again from here. */
    rdmx_status_t (*recv)(void *tw, void *desc, void *buf, size_t length,
                          void *tmr, rdmx_op_t *op, void **req_p);
    /* Optional (NULL: one piece only, through recv): recv, with the
     * @length bytes scattered over @n pieces (2 <= @n <= RDMX_TP_IOV_MAX)
     * at @pieces, in order, none registered; @pieces stays valid until
     * completion (the core keeps it in the operation record). */
    rdmx_status_t (*recvv)(void *tw, void *desc, const rdmx_tp_piece_t *pieces,
                           unsigned n, size_t length, rdmx_op_t *op,
                           void **req_p);
    /* Give back eager data kept, or a large message's descriptor left. */
    void (*release)(void *tw, void *data);

    /* --- one-sided ---------------------------------------------------- */
    /* Unpack a peer's packed remote key for use on @tep. */
    rdmx_status_t (*rkey_unpack)(rdmx_tep_t *tep, const void *rkey,
                                 size_t len, void **trkey_p);
    void (*rkey_destroy)(void *trkey);
    /* Optional (NULL: never): where remote address @raddr of @trkey is
     * mapped in this process (shared memory the peer's transport made), so
     * that the core can copy from it itself; RDMX_ERR_UNSUPPORTED when it
     * is not mapped. */
    rdmx_status_t (*rkey_ptr)(void *trkey, uint64_t raddr, void **ptr_p);
    rdmx_status_t (*put)(rdmx_tep_t *tep, const void *buf, size_t length,
                         void *tmr, uint64_t raddr, void *trkey,
                         rdmx_op_t *op, void **req_p);
    rdmx_status_t (*get)(rdmx_tep_t *tep, void *buf, size_t length,
                         void *tmr, uint64_t raddr, void *trkey,
                         rdmx_op_t *op, void **req_p);
    /* Done when every put and get issued on @tep is done at the peer. */
    rdmx_status_t (*flush)(rdmx_tep_t *tep, rdmx_op_t *op, void **req_p);
    /* Whether the transport's own 64-bit atomics work on these endpoints
     * (NULL or 0: the core carries atomics itself, access.c). */
    int (*has_atomics)(void *tctx);
    /* Fetch-add (@cswap 0: *@operand is added) or compare-and-swap
     * (@cswap 1: *@operand is the value compared, *@result holds the value
     * swapped in); the old value lands in *@result. Both stay valid until
     * completion. */
    rdmx_status_t (*atomic)(rdmx_tep_t *tep, int cswap, uint64_t *operand,
                            uint64_t *result, uint64_t raddr, void *trkey,
                            rdmx_op_t *op, void **req_p);

    /* Optional (NULL: the core sends put, flush, then the NOTIFY
     * message): put @length bytes of @buf and have the peer's core get
     * the NOTIFY header @nhdr (@nhlen bytes, RDMX_AM_NOTIFY) only once
     * the data is visible there. Both stay valid until completion. */
    rdmx_status_t (*put_notify)(rdmx_tep_t *tep, const void *buf, size_t length,
                                void *tmr, uint64_t raddr, void *trkey,
                                const void *nhdr, size_t nhlen, rdmx_op_t *op,
                                void **req_p);

    /* Stop waiting for @req: its rdmx__tp_done still comes later. */
    void (*req_forget)(void *req);

    uint32_t key_kind; /* RDMX_KEY_KIND_* of its packed remote keys */
} rdmx_tp_ops_t;

extern const rdmx_tp_ops_t rdmx_tp_ucx;
#ifdef RDMX_HAVE_OFI
extern const rdmx_tp_ops_t rdmx_tp_ofi; /* src/core/ofi/ (docs/FABRIC.md) */
#endif

/* --- what a backend reports to the core ------------------------------------ */

/* A request of @op finished with @status (@length: bytes received). */
void rdmx__tp_done(rdmx_op_t *op, void *req, rdmx_status_t status,
                   size_t length);
/* A message arrived on @tep (NULL: from no endpoint the backend knows).
 * @flags: RDMX_MSG_*. Returns RDMX_INPROGRESS when the core kept @data
 * (only if RDMX_MSG_HOLDABLE) or took the descriptor (RDMX_MSG_RNDV): the
 * core then gives it back exactly once, through recv (a descriptor) or
 * release. RDMX_OK otherwise: the backend takes @data back. A backend
 * keeps nothing for a release that cannot come: RDMX_INPROGRESS about
 * data that was neither holdable nor a descriptor means RDMX_OK. */
rdmx_status_t rdmx__tp_deliver(rdmx_worker_t *w, unsigned id,
                               rdmx_tep_t *tep, const void *hdr, size_t hlen,
                               void *data, size_t len, unsigned flags);
/* The endpoint of @w whose connection the peer names @token (its
 * rdmx_tep_t.tx_token), while it is bound; NULL for any other value. */
rdmx_tep_t *rdmx__tp_token(rdmx_worker_t *w, uint64_t token);
/* The transport says @tep is broken (@why: its words). */
void rdmx__tp_ep_failed(rdmx_tep_t *tep, rdmx_status_t status,
                        const char *why);
/* An ep_close that returned RDMX_INPROGRESS finished. */
void rdmx__tp_closed(void *closer);

#endif /* RDMX_CORE_TRANSPORT_H */
