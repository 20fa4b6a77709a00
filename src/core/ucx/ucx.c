/*
 * The UCX backend (src/core/transport.h): the only code in rdmx that
 * includes UCX's headers. It maps the operations table onto ucp: one
 * ucp_context per rdmx context, one ucp_worker per rdmx worker, endpoints
 * made from worker addresses in peer error mode, active messages for
 * messages, ucp_put_nbx/ucp_get_nbx/ucp_ep_flush_nbx for one-sided access,
 * ucp_mem_map and packed rkeys for registration.
 *
 * Facts of UCX this code lives by (../docs/CORE.md, "UCX versions"):
 * - An AM header must stay valid until the send completes (1.13 does not
 *   copy it); the core keeps headers in its operation records.
 * - Peer error mode on shared memory needs UCX_MM_ERROR_HANDLING=y in 1.13,
 *   read only from the environment.
 * - Requests are freed by the core through req_forget, exactly once: at
 *   completion, or earlier when it stops waiting (UCX then still runs the
 *   callback, which finds the record orphaned).
 */
#include "core/internal.h"
#include "util/endian.h"

#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include "core/ucx/rkey_guard.h"
#include "core/ucx/ucx.h"

/* The tcp send and receive segment of every tcp context: 256 KiB of data
 * and room for the headers (ucx_ctx_create). Part of the wire protocol. */
#define RDMX_UCX_TCP_SEG "260k"
/* The shared-memory FIFO element of every context that uses shared memory:
 * messages of up to ~960 bytes go at once, in the element (ucx_ctx_create).
 * Part of the wire protocol. */
#define RDMX_UCX_MM_FIFO_ELEM "1024"

/* A message sent at once on a bound connection names its receiver by the
 * connection's token (rdmx_tep_t.tx_token), in front of its header,
 * instead of by UCX's reply endpoint (docs/CORE.md, "Who sent a
 * message"). Part of the wire protocol. */
#define TOKEN_SIZE 8

typedef struct ucx_worker ucx_worker_t;

typedef struct {
    ucp_context_h ucp;
    int amo; /* UCX's atomics usable under peer error mode (before 1.16) */
    int lazy_arm;            /* tcp alone: see ucx_arm */
    rdmx_rkey_guard_t guard; /* peers' keys on UCX before 1.19 */
} ucx_ctx_t;

typedef struct {
    rdmx_tep_t tep; /* first: the core's view */
    ucp_ep_h ucp;
    ucx_worker_t *worker;
} ucx_ep_t;

typedef struct {
    ucx_worker_t *worker;
    unsigned id;
    int hold; /* set_handler's @hold: the core may keep eager data */
} ucx_handler_t;

struct ucx_worker {
    ucp_worker_h ucp;
    rdmx_worker_t *w;
    ucp_address_t *addr;
    size_t addr_len;
    rdmx_ptrmap_t eps; /* ucp_ep_h -> ucx_ep_t, for the sender of a message */
    ucp_ep_h last_ucp; /* the sender of the last message found in eps ... */
    ucx_ep_t *last_ep; /* ... and its endpoint; NULL once it is closed */
    ucx_handler_t handlers[RDMX_MSG_ID_MAX];
    int lazy_arm;                   /* the context's */
    const rdmx_rkey_guard_t *guard; /* the context's */
    int worked; /* a pass found work since the last ucp_worker_arm */
};

/* UCX status codes in rdmx's terms: connection-level failures keep their
 * meaning; anything unexpected is an I/O error. */
static rdmx_status_t from_ucs(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:
        return RDMX_OK;
    case UCS_INPROGRESS:
        return RDMX_INPROGRESS;
    case UCS_ERR_NO_MEMORY:
        return RDMX_ERR_NO_MEMORY;
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
        return RDMX_ERR_NO_RESOURCE;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
        return RDMX_ERR_TIMEOUT;
    case UCS_ERR_CANCELED:
        return RDMX_ERR_CANCELED;
    case UCS_ERR_NO_ELEM:
        return RDMX_ERR_NOT_FOUND;
    case UCS_ERR_MESSAGE_TRUNCATED:
        return RDMX_ERR_TOO_BIG;
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
        return RDMX_ERR_CONN_REFUSED;
    case UCS_ERR_CONNECTION_RESET:
        return RDMX_ERR_CONN_RESET;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_INVALID_ADDR:
        return RDMX_ERR_UNREACHABLE;
    case UCS_ERR_BUSY:
        return RDMX_ERR_BUSY;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
        return RDMX_ERR_UNSUPPORTED;
    case UCS_ERR_INVALID_PARAM:
        return RDMX_ERR_INVALID;
    default:
        return RDMX_ERR_IO;
    }
}

/* An immediate answer of a ucp call that returns a request: RDMX_OK,
 * RDMX_INPROGRESS (*@req_p) or an error with its detail. */
static rdmx_status_t issued(ucs_status_ptr_t r, void **req_p,
                            const char *what)
{
    if (r == NULL)
        return RDMX_OK;
    if (UCS_PTR_IS_PTR(r)) {
        *req_p = r;
        return RDMX_INPROGRESS;
    }
    return rdmx__error(from_ucs(UCS_PTR_STATUS(r)), "%s: %s", what,
                       ucs_status_string(UCS_PTR_STATUS(r)));
}

/* --- context and memory --------------------------------------------------- */

/* Can this process make System V shared memory segments (a container may
 * forbid them)? One probe of 1 MiB, made and removed at once. */
static int sysv_usable(void)
{
    int id = shmget(IPC_PRIVATE, 1u << 20, IPC_CREAT | 0600);

    if (id < 0)
        return 0;
    shmctl(id, IPC_RMID, NULL);
    return 1;
}

/* UCX_TLS for each transport. rdmx's own bootstrap exchanges worker
 * addresses, so shared memory needs no tcp beside it. Shared memory is
 * sysv alone where it works ("sm" would add posix): UCX polls the message
 * FIFO of every shared-memory transport an endpoint has a lane on, and
 * with both, every endpoint has RMA lanes on both, so every progress pass
 * polled two FIFOs (~55 instructions more per pass). sysv is also where
 * UCX allocates first, and what ucx_perftest's endpoints use. */
static const char *transport_tls(rdmx_transport_t t)
{
    switch (t) {
    case RDMX_TRANSPORT_SHM:
        return sysv_usable() ? "sysv,cma,self" : "sm,self";
    case RDMX_TRANSPORT_TCP:
        return "tcp,self";
    case RDMX_TRANSPORT_RDMA:
        return "ib,sm,self";
    default:
        return NULL;
    }
}

static rdmx_status_t ucx_ctx_create(rdmx_context_t *ctx, rdmx_transport_t t,
                                    const char *net_devices, int one_sided,
                                    void **tctx_p)
{
    ucp_config_t *config;
    ucp_params_t up = {0};
    ucx_ctx_t *uc;
    ucs_status_t us;
    const char *tls;

    /* UCX 1.13 disables shared memory under peer failure detection unless
     * this is set (UCX_NOTES gotcha 3); it is a transport-level setting
     * that ucp_config_modify cannot reach, so it goes in the environment
     * before ucp_config_read. A value the user set wins. */
    if (t != RDMX_TRANSPORT_TCP)
        setenv("UCX_MM_ERROR_HANDLING", "y", 0);
    uc = calloc(1, sizeof(*uc));
    if (uc == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "context: out of memory");
    us = ucp_config_read(NULL, NULL, &config);
    if (us != UCS_OK) {
        free(uc);
        return rdmx__error(RDMX_ERR_IO, "UCX configuration: %s",
                           ucs_status_string(us));
    }
    tls = transport_tls(t);
    if (tls != NULL && ucp_config_modify(config, "TLS", tls) != UCS_OK) {
        ucp_config_release(config);
        free(uc);
        return rdmx__error(RDMX_ERR_IO, "UCX: cannot set TLS=%s", tls);
    }
    /* Adaptive progress turns a transport's polling on when a worker gets
     * its first endpoint on it and off with the last. On tcp each switch
     * re-installs the handlers and re-queries the interface (a socket, an
     * ioctl and a read of /proc/net/route): half of a server's CPU per
     * connection when clients come and go one at a time. With tcp alone
     * there is nothing to save by switching. (Shared memory keeps it:
     * there, polling every interface on every pass costs the fast path,
     * and its switches are cheap.) A value the user set wins. */
    if (t == RDMX_TRANSPORT_TCP && getenv("UCX_ADAPTIVE_PROGRESS") == NULL &&
        ucp_config_modify(config, "ADAPTIVE_PROGRESS", "n") != UCS_OK)
        rdmx_debug("UCX: cannot set ADAPTIVE_PROGRESS=n");
    /* UCX 1.13's tcp transport can complete a zero-copy send of a request
     * UCX already finished when the peer dies with such sends in flight
     * ("uct_iface.h:884 Assertion `comp->count > 0'": the process aborts;
     * seen in 1 of 7 runs of tests/test_kill_server.c). Over tcp a copy
     * costs little beside the socket's own: copy always there, also in an
     * auto context without an RDMA device (it reaches other hosts over
     * tcp; its shared-memory lanes have no zero-copy eager sends, and 1 MiB
     * send_bw, put_bw, rpc_bulk and KV GETs over them did not move with
     * it). A value the user set wins. */
    if ((t == RDMX_TRANSPORT_TCP ||
         (t == RDMX_TRANSPORT_AUTO &&
          ctx->transport_used == RDMX_TRANSPORT_TCP)) &&
        getenv("UCX_ZCOPY_THRESH") == NULL &&
        ucp_config_modify(config, "ZCOPY_THRESH", "inf") != UCS_OK)
        rdmx_debug("UCX: cannot set ZCOPY_THRESH=inf");
    /* Those copies go out in send segments of TCP_TX_SEG_SIZE, 8 KiB by
     * default: a large message then moves at ~1 GB/s here, a third of
     * UCX's zero-copy. And a message that does not fit one segment goes as
     * several fragments that the receiver joins in a buffer of its own
     * (one more copy) or, past ~90 KiB, by rendezvous (one more round
     * trip); with the default 64 KiB receive segment a 64 KiB value and
     * its headers are already two fragments. Segments of 256 KiB + 4 KiB
     * both ways carry every value up to 256 KiB, headers included, in one
     * fragment: with 8 clients on 2 CPUs, GETs of 64 and 128 KiB run 1.4x
     * and 1.9x faster than with 64 KiB segments (docs/PERFORMANCE.md,
     * "Large messages over tcp"). A peer must receive what this one sends:
     * the setting is part of the wire protocol (RDMX_WIRE_VERSION 5). A
     * send or receive segment size the user set wins, and then neither is
     * set here. ucp_config_modify passes a transport's setting on to the
     * transport by its name in the transport's table before UCX 1.17
     * ("TX_SEG_SIZE") and by its full name from 1.17 on
     * ("TCP_TX_SEG_SIZE"). */
    /* An auto context reaches tcp peers too, tcp contexts among them: the
     * same segments (with UCX's 64 KiB receive segment, the first 260 KiB
     * answer a tcp peer sent it aborted the process in UCX's assertion
     * "hdr->length <= rx_seg_size - sizeof(*hdr)", and an auto server the
     * same from a tcp client). */
    if ((t == RDMX_TRANSPORT_TCP || t == RDMX_TRANSPORT_AUTO) &&
        getenv("UCX_TCP_TX_SEG_SIZE") == NULL &&
        getenv("UCX_TCP_RX_SEG_SIZE") == NULL) {
        unsigned major, minor, release;
        int old = 0;
        ucp_get_version(&major, &minor, &release);
        old = major == 1 && minor < 17;
        /* (the receive segment first: never send more than it takes) */
        if (ucp_config_modify(config, old ? "RX_SEG_SIZE" : "TCP_RX_SEG_SIZE",
                              RDMX_UCX_TCP_SEG) != UCS_OK ||
            ucp_config_modify(config, old ? "TX_SEG_SIZE" : "TCP_TX_SEG_SIZE",
                              RDMX_UCX_TCP_SEG) != UCS_OK)
            rdmx_debug("UCX: cannot set the tcp segment sizes to %s",
                       RDMX_UCX_TCP_SEG);
    }
    /* Over shared memory UCX sends a message at once (no request, no
     * copy kept) only if it fits one element of the receiver's FIFO: 128
     * bytes by default, ~85 for the message. Elements of 1 KiB take ~960
     * (docs/CORE.md, "Small messages at once"). A sender writes into the
     * receiver's FIFO with its own element size, so peers must agree: part
     * of the wire protocol (RDMX_WIRE_VERSION 6). A size the user set
     * wins. UCX 1.13 and 1.22 take it under its "MM_" name only. */
    if (t != RDMX_TRANSPORT_TCP && getenv("UCX_MM_FIFO_ELEM_SIZE") == NULL &&
        getenv("UCX_SYSV_FIFO_ELEM_SIZE") == NULL &&
        getenv("UCX_POSIX_FIFO_ELEM_SIZE") == NULL &&
        ucp_config_modify(config, "MM_FIFO_ELEM_SIZE", RDMX_UCX_MM_FIFO_ELEM) !=
            UCS_OK)
        rdmx_debug("UCX: cannot set MM_FIFO_ELEM_SIZE=%s",
                   RDMX_UCX_MM_FIFO_ELEM);
    if (net_devices != NULL &&
        ucp_config_modify(config, "NET_DEVICES", net_devices) != UCS_OK) {
        ucp_config_release(config);
        free(uc);
        return rdmx__error(RDMX_ERR_INVALID, "UCX: bad net_devices '%s'",
                           net_devices);
    }
    up.field_mask = UCP_PARAM_FIELD_FEATURES |
                    UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
    up.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    /* Without RMA (and AMO) UCX installs no handlers for its software
     * put/get/atomics, which over tcp would write wherever a peer says,
     * unchecked: rdmx carries those itself then (docs/SECURITY.md). */
    if (one_sided)
        up.features |= UCP_FEATURE_RMA;
    /* UCX from 1.16 (protocols v2) has no atomic protocol for an endpoint
     * with peer failure detection: there rdmx carries atomics itself
     * (atomic.c). Before, UCX's own are one-sided on shared memory (and
     * offloaded on RDMA NICs). */
    {
        unsigned major, minor, release;
        ucp_get_version(&major, &minor, &release);
        uc->amo = one_sided && major == 1 && minor < 16;
    }
    if (uc->amo)
        up.features |= UCP_FEATURE_AMO64;
    uc->lazy_arm = t == RDMX_TRANSPORT_TCP;
    up.mt_workers_shared = 1; /* workers of one context on many threads */
    up.name = ctx->name;
    us = ucp_init(&up, config, &uc->ucp);
    ucp_config_release(config);
    if (us != UCS_OK) {
        free(uc);
        return rdmx__error(RDMX_ERR_IO, "UCX init (transport %s): %s",
                           rdmx_transport_name(t), ucs_status_string(us));
    }
    rdmx__rkey_guard_init(&uc->guard, uc->ucp);
    *tctx_p = uc;
    return RDMX_OK;
}

static void ucx_ctx_destroy(void *tctx)
{
    ucx_ctx_t *uc = tctx;

    ucp_cleanup(uc->ucp);
    free(uc);
}

static int ucx_has_atomics(void *tctx)
{
    return ((ucx_ctx_t *)tctx)->amo;
}

static rdmx_status_t ucx_mem_map(void *tctx, void *addr, size_t length,
                                 int allocate, unsigned access, void **tmr_p,
                                 void **addr_p, void **rkey_p,
                                 size_t *rkey_len_p)
{
    ucp_mem_map_params_t mp = {0};
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ucp_mem_h memh;
    ucs_status_t us;

    /* The key grants remote access with the region's rights only: RDMA
     * NICs enforce these (atomics ride on remote write, as in verbs);
     * shared memory and tcp ignore them (docs/SECURITY.md). */
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                    UCP_MEM_MAP_PARAM_FIELD_PROT;
    mp.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE;
    if (access & RDMX_ACCESS_READ)
        mp.prot |= UCP_MEM_MAP_PROT_REMOTE_READ;
    if (access & (RDMX_ACCESS_WRITE | RDMX_ACCESS_ATOMIC))
        mp.prot |= UCP_MEM_MAP_PROT_REMOTE_WRITE;
    mp.address = allocate ? NULL : addr;
    mp.length = length;
    mp.flags = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
    us = ucp_mem_map(((ucx_ctx_t *)tctx)->ucp, &mp, &memh);
    if (us != UCS_OK)
        return rdmx__error(us == UCS_ERR_NO_MEMORY ? RDMX_ERR_NO_MEMORY
                                                   : RDMX_ERR_IO,
                           "mem: cannot register %zu bytes: %s", length,
                           ucs_status_string(us));
    us = ucp_mem_query(memh, &attr);
    if (us == UCS_OK)
        us = ucp_rkey_pack(((ucx_ctx_t *)tctx)->ucp, memh, rkey_p,
                           rkey_len_p);
    if (us != UCS_OK) {
        ucp_mem_unmap(((ucx_ctx_t *)tctx)->ucp, memh);
        return rdmx__error(RDMX_ERR_IO, "mem: %s", ucs_status_string(us));
    }
    *tmr_p = memh;
    *addr_p = attr.address;
    return RDMX_OK;
}

static void ucx_mem_unmap(void *tctx, void *tmr, void *rkey)
{
    ucp_rkey_buffer_release(rkey);
    ucp_mem_unmap(((ucx_ctx_t *)tctx)->ucp, tmr);
}

/* --- workers and message delivery ------------------------------------------ */

/* A message for the core. Who gives UCX's buffer (@data) back, and when:
 * - UCX, as soon as this returns UCS_OK: eager data (the core read or
 *   copied it during the call), and a rendezvous descriptor the core did
 *   not take (UCX then answers the sender itself).
 * - The core, exactly once, when this returns UCS_INPROGRESS: a
 *   rendezvous descriptor (RDMX_MSG_RNDV) through ucx_recv, after which
 *   UCX frees it when the receive completes, or through ucx_release; eager
 *   data it kept (RDMX_MSG_HOLDABLE) through ucx_release only, never
 *   ucx_recv (UCX 1.13's ucp_am_recv_data_nbx frees no eager descriptor
 *   once this callback has returned).
 * UCX holds eager data whenever its transport handed over a buffer of its
 * own (UCP_AM_RECV_ATTR_FLAG_DATA: shared memory's receive descriptors),
 * registered with UCP_AM_FLAG_PERSISTENT_DATA or not. Handlers are
 * registered without it: with it, UCX copies every message that arrives
 * inline (in shared memory's FIFO element, in tcp's receive segment) into
 * a descriptor of its pool before the callback, and frees it after, ~85
 * instructions and a copy per message, although most are read and
 * dropped; a layer that keeps an inline message copies it itself.
 * So the core's RDMX_INPROGRESS turns into UCS_INPROGRESS only for what
 * the core may own: a rendezvous descriptor, or eager data under a
 * handler registered with @hold. Any other data goes back to UCX here,
 * whatever the handler answered: UCX would otherwise keep it for a
 * release that never comes. */
static ucs_status_t am_cb(void *arg, const void *header, size_t hlen,
                          void *data, size_t len,
                          const ucp_am_recv_param_t *param)
{
    ucx_handler_t *h = arg;
    ucx_worker_t *uw = h->worker;
    rdmx_tep_t *tep = NULL;
    unsigned flags = 0;

    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
        /* Named by the connection's token (am_send): no name, no
         * connection (rdmx__tp_deliver counts it). */
        if (hlen >= TOKEN_SIZE) {
            tep = rdmx__tp_token(uw->w, rdmx_get_le64(header));
            header = (const unsigned char *)header + TOKEN_SIZE;
            hlen -= TOKEN_SIZE;
        }
    } else if (param->reply_ep != NULL) {
        ucx_ep_t *ep = NULL;
        /* (a connection's messages come in runs: one lookup per run) */
        if (param->reply_ep == uw->last_ucp && uw->last_ep != NULL) {
            ep = uw->last_ep;
        } else if ((ep = rdmx_ptrmap_get(&uw->eps, param->reply_ep)) != NULL) {
            uw->last_ucp = param->reply_ep;
            uw->last_ep = ep;
        }
        tep = ep != NULL ? &ep->tep : NULL;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
        flags |= RDMX_MSG_RNDV;
    if (h->hold && (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA))
        flags |= RDMX_MSG_HOLDABLE;
    if (rdmx__tp_deliver(uw->w, h->id, tep, header, hlen, data, len, flags) ==
            RDMX_INPROGRESS &&
        (flags & (RDMX_MSG_RNDV | RDMX_MSG_HOLDABLE)))
        return UCS_INPROGRESS;
    return UCS_OK;
}

static rdmx_status_t ucx_set_handler(void *tw, unsigned id, int hold)
{
    ucx_worker_t *uw = tw;
    ucp_am_handler_param_t p = {
        .field_mask =
            UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
            UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id = id,
        .cb = am_cb,
        .arg = &uw->handlers[id],
        .flags = UCP_AM_FLAG_WHOLE_MSG,
    };
    ucs_status_t us;

    if (id >= RDMX_MSG_ID_MAX)
        return rdmx__error(RDMX_ERR_INVALID, "message id %u", id);
    uw->handlers[id].worker = uw;
    uw->handlers[id].id = id;
    uw->handlers[id].hold = hold;
    us = ucp_worker_set_am_recv_handler(uw->ucp, &p);
    if (us != UCS_OK)
        return rdmx__error(RDMX_ERR_IO, "UCX: AM handler %u: %s", id,
                           ucs_status_string(us));
    return RDMX_OK;
}

static rdmx_status_t ucx_worker_create(void *tctx, rdmx_worker_t *w,
                                       unsigned flags, int epfd, void **tw_p,
                                       int *efd_p, const void **addr_p,
                                       size_t *addr_len_p)
{
    ucp_worker_params_t wp = {0};
    ucx_worker_t *uw;
    rdmx_status_t st;
    ucs_status_t us;

    uw = calloc(1, sizeof(*uw));
    if (uw == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "worker: out of memory");
    uw->w = w;
    uw->lazy_arm = ((ucx_ctx_t *)tctx)->lazy_arm;
    uw->guard = &((ucx_ctx_t *)tctx)->guard;
    if (rdmx_ptrmap_init(&uw->eps) != 0) {
        free(uw);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "worker: out of memory");
    }
    /* UCX puts its fds (an eventfd, a keepalive timerfd, each interface's
     * fd) straight into the core's epoll set instead of into a set of its
     * own that the core's would hold: a wake-up then passes one epoll
     * callback fewer (tcp: the socket's own set inside UCX, then the
     * core's). Level-triggered, data.ptr NULL (user_data). */
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE |
                    UCP_WORKER_PARAM_FIELD_EVENT_FD |
                    UCP_WORKER_PARAM_FIELD_USER_DATA;
    wp.event_fd = epfd;
    wp.user_data = NULL;
    /* With a progress thread rdmx serializes every call under its lock. */
    /* (RDMX_TP_WORKER_BUSY: UCX's wake-up costs nothing per completion) */
    wp.thread_mode = (flags & RDMX_TP_WORKER_THREADED)
                         ? UCS_THREAD_MODE_SERIALIZED
                         : UCS_THREAD_MODE_SINGLE;
    us = ucp_worker_create(((ucx_ctx_t *)tctx)->ucp, &wp, &uw->ucp);
    if (us != UCS_OK) {
        st = rdmx__error(RDMX_ERR_IO, "UCX worker: %s",
                         ucs_status_string(us));
        goto err_map;
    }
    *efd_p = -1;
    us = ucp_worker_get_address(uw->ucp, &uw->addr, &uw->addr_len);
    if (us != UCS_OK) {
        st = rdmx__error(RDMX_ERR_IO, "UCX worker: %s",
                         ucs_status_string(us));
        goto err_worker;
    }
    *tw_p = uw;
    *addr_p = uw->addr;
    *addr_len_p = uw->addr_len;
    return RDMX_OK;

err_worker:
    ucp_worker_destroy(uw->ucp);
err_map:
    rdmx_ptrmap_cleanup(&uw->eps);
    free(uw);
    return st;
}

static void ucx_worker_destroy(void *tw)
{
    ucx_worker_t *uw = tw;

    ucp_worker_release_address(uw->ucp, uw->addr);
    ucp_worker_destroy(uw->ucp);
    rdmx_ptrmap_cleanup(&uw->eps);
    free(uw);
}

static unsigned ucx_progress(void *tw)
{
    ucx_worker_t *uw = tw;
    unsigned n = ucp_worker_progress(uw->ucp);

    uw->worked |= n != 0;
    return n;
}

/*
 * Over tcp alone an arm is two reads that find nothing. ucp_worker_arm
 * reads UCP's internal eventfd and its keepalive timerfd (to clear them:
 * they are level-triggered members of the worker's fd) and arms each
 * interface that has events, which for tcp is nothing (its sockets are
 * level-triggered too; "self" has no events). So the fd of an unarmed tcp
 * worker never misses an event; it can only stay readable for one that a
 * pass already handled, and wake a sleep early. rdmx arms for real only
 * when no pass found work since the last arm: after a sleep that woke for
 * nothing. A client's sleeping round trip is then sendmsg, epoll_wait and
 * UCX's epoll_wait and recvfrom (docs/CORE.md, "Waiting").
 */
static rdmx_status_t ucx_arm(void *tw)
{
    ucx_worker_t *uw = tw;
    ucs_status_t us;

    if (uw->lazy_arm && uw->worked) {
        uw->worked = 0;
        return RDMX_OK;
    }
    uw->worked = 0;
    us = ucp_worker_arm(uw->ucp);
    if (us == UCS_ERR_BUSY)
        return RDMX_ERR_BUSY;
    if (us != UCS_OK)
        return rdmx__error(RDMX_ERR_IO, "UCX arm: %s", ucs_status_string(us));
    return RDMX_OK;
}

static void ucx_signal(void *tw)
{
    ucp_worker_signal(((ucx_worker_t *)tw)->ucp);
}

/* --- endpoints ---------------------------------------------------------------- */

static void ep_error_cb(void *arg, ucp_ep_h ucp_ep, ucs_status_t us)
{
    ucx_ep_t *ep = arg;

    (void)ucp_ep;
    rdmx__tp_ep_failed(&ep->tep, from_ucs(us), ucs_status_string(us));
}

static rdmx_status_t ucx_ep_create(void *tw, const void *addr, size_t len,
                                   rdmx_tep_t **tep_p)
{
    ucx_worker_t *uw = tw;
    ucp_ep_params_t p = {0};
    ucs_status_t us;
    ucx_ep_t *ep;
    void *copy;

    /* A libfabric backend's address (docs/FABRIC.md, "Address": it starts
     * with "ROFI") would make UCX abort in its address parser: refuse it
     * in words. (A UCX address's first byte holds its format version in
     * the high bits: 0x20 from UCX 1.13, never 'R'.) */
    if (len >= 4 && memcmp(addr, "ROFI", 4) == 0)
        return rdmx__error(RDMX_ERR_UNREACHABLE,
                           "the peer's transport address is a libfabric "
                           "one (this worker uses backend ucx: both sides "
                           "need the same --transport family)");
    /* UCX reads the address without a length: give it a zero tail so a
     * short one cannot make it read past the buffer. */
    copy = calloc(1, len + 4096);
    ep = calloc(1, sizeof(*ep));
    if (copy == NULL || ep == NULL) {
        free(copy);
        free(ep);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "endpoint: out of memory");
    }
    memcpy(copy, addr, len);
    rdmx_list_init(&ep->tep.link);
    ep->worker = uw;
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.address = copy;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = ep_error_cb;
    p.err_handler.arg = ep;
    us = ucp_ep_create(uw->ucp, &p, &ep->ucp);
    free(copy);
    if (us != UCS_OK) {
        free(ep);
        return rdmx__error(RDMX_ERR_UNREACHABLE,
                           "no transport reaches the peer: %s",
                           ucs_status_string(us));
    }
    if (rdmx_ptrmap_put(&uw->eps, ep->ucp, ep) != 0) {
        ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t r = ucp_ep_close_nbx(ep->ucp, &cp);
        if (UCS_PTR_IS_PTR(r))
            ucp_request_free(r);
        free(ep);
        return rdmx__error(RDMX_ERR_NO_MEMORY, "endpoint: out of memory");
    }
    *tep_p = &ep->tep;
    return RDMX_OK;
}

static void close_cb(void *req, ucs_status_t us, void *user_data)
{
    (void)us;
    if (user_data == NULL)
        ucp_request_free(req); /* nobody waits for it */
    else
        rdmx__tp_closed(user_data);
}

static rdmx_status_t ucx_ep_close(void *tw, rdmx_tep_t *tep, int force,
                                  void *closer, void **req_p)
{
    ucx_worker_t *uw = tw;
    ucx_ep_t *ep = (ucx_ep_t *)tep;
    ucp_request_param_t p = {0};
    ucs_status_ptr_t r;

    rdmx_ptrmap_del(&uw->eps, ep->ucp);
    if (uw->last_ep == ep) {
        uw->last_ucp = NULL;
        uw->last_ep = NULL;
    }
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                     UCP_OP_ATTR_FIELD_USER_DATA;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    p.cb.send = close_cb;
    p.user_data = closer;
    r = ucp_ep_close_nbx(ep->ucp, &p);
    free(ep);
    if (UCS_PTR_IS_PTR(r)) {
        if (closer == NULL)
            return RDMX_OK; /* close_cb frees it */
        *req_p = r;
        return RDMX_INPROGRESS;
    }
    return RDMX_OK;
}

/* --- messages ------------------------------------------------------------------ */

static void send_cb(void *req, ucs_status_t us, void *user_data)
{
    if (user_data == NULL)
        ucp_request_free(req); /* fire and forget */
    else
        rdmx__tp_done(user_data, req, from_ucs(us), 0);
}

static void recv_cb(void *req, ucs_status_t us, size_t length,
                    void *user_data)
{
    rdmx__tp_done(user_data, req, from_ucs(us), length);
}

static void memh_param(ucp_request_param_t *p, void *tmr)
{
    if (tmr != NULL) {
        p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p->memh = tmr;
    }
}

/* An active message: @count bytes of contiguous @data, or (@iov) @count
 * pieces at @data. */
static rdmx_status_t am_send(ucx_ep_t *ep, unsigned id, const void *hdr,
                             size_t hlen, const void *data, size_t count,
                             int iov, void *tmr, unsigned flags, rdmx_op_t *op,
                             void **req_p)
{
    ucp_request_param_t p;
    ucs_status_ptr_t r;

    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    if (iov) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        p.datatype = ucp_dt_make_iov();
    }
    if (flags & RDMX_TP_SEND_NOW) {
        /* The header is needed only until the call returns: it can take
         * the connection's token in front, which names the receiver's
         * endpoint instead of UCX's reply endpoint. */
        unsigned char named[TOKEN_SIZE + RDMX_TP_HDR_MAX];
        if (ep->tep.tx_token != 0 && hlen <= RDMX_TP_HDR_MAX) {
            rdmx_put_le64(named, ep->tep.tx_token);
            if (hlen != 0)
                memcpy(named + TOKEN_SIZE, hdr, hlen);
            hdr = named;
            hlen += TOKEN_SIZE;
            p.flags = 0;
        }
        p.op_attr_mask |= UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
        r = ucp_am_send_nbx(ep->ucp, id, hdr, hlen, data, count, &p);
        if (r == NULL)
            return RDMX_OK;
        if (UCS_PTR_IS_PTR(r)) { /* not expected with FORCE_IMM_CMPL */
            while (ucp_request_check_status(r) == UCS_INPROGRESS)
                ucp_worker_progress(ep->worker->ucp);
            ucp_request_free(r);
            return RDMX_OK;
        }
        if (UCS_PTR_STATUS(r) == UCS_ERR_NO_RESOURCE)
            return RDMX_ERR_NO_RESOURCE;
        return rdmx__error(from_ucs(UCS_PTR_STATUS(r)), "send: %s",
                           ucs_status_string(UCS_PTR_STATUS(r)));
    }
    if (flags & RDMX_TP_SEND_EAGER)
        p.flags |= UCP_AM_SEND_FLAG_EAGER;
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = send_cb;
    p.user_data = op;
    memh_param(&p, tmr);
    r = ucp_am_send_nbx(ep->ucp, id, hdr, hlen, data, count, &p);
    if (op == NULL && UCS_PTR_IS_PTR(r))
        return RDMX_OK; /* send_cb frees it */
    return issued(r, req_p, "send");
}

static rdmx_status_t ucx_send(rdmx_tep_t *tep, unsigned id, const void *hdr,
                              size_t hlen, const void *data, size_t length,
                              void *tmr, unsigned flags, rdmx_op_t *op,
                              void **req_p)
{
    return am_send((ucx_ep_t *)tep, id, hdr, hlen, data, length, 0, tmr, flags,
                   op, req_p);
}

/* The core's pieces, sent (rdmx_tp_iov_t) or received into
 * (rdmx_tp_piece_t), are UCX's: the same two fields at the same places. */
#define SAME_AS_UCP_IOV(T)                                                     \
    (sizeof(T) == sizeof(ucp_dt_iov_t) &&                                      \
     offsetof(T, base) == offsetof(ucp_dt_iov_t, buffer) &&                    \
     offsetof(T, length) == offsetof(ucp_dt_iov_t, length))
_Static_assert(SAME_AS_UCP_IOV(rdmx_tp_iov_t) &&
                   SAME_AS_UCP_IOV(rdmx_tp_piece_t),
               "rdmx_tp_iov_t and rdmx_tp_piece_t must match ucp_dt_iov_t");

static rdmx_status_t ucx_sendv(rdmx_tep_t *tep, unsigned id, const void *hdr,
                               size_t hlen, const rdmx_tp_iov_t *iov,
                               unsigned n, unsigned flags, rdmx_op_t *op,
                               void **req_p)
{
    return am_send((ucx_ep_t *)tep, id, hdr, hlen, iov, n, 1, NULL, flags, op,
                   req_p);
}

/* Receive a rendezvous descriptor the core took (am_cb): UCX owns it from
 * here and frees it when the receive completes, failed or not. */
static rdmx_status_t ucx_recv(void *tw, void *desc, void *buf, size_t length,
                              void *tmr, rdmx_op_t *op, void **req_p)
{
    ucp_request_param_t p;

    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = recv_cb;
    p.user_data = op;
    memh_param(&p, tmr);
    return issued(ucp_am_recv_data_nbx(((ucx_worker_t *)tw)->ucp, desc, buf,
                                       length, &p),
                  req_p, "receive");
}

/* ucx_recv into @n pieces: UCX's iov datatype, unpacked (tcp) or pulled
 * (shared memory, RDMA) straight into them. */
static rdmx_status_t ucx_recvv(void *tw, void *desc,
                               const rdmx_tp_piece_t *pieces, unsigned n,
                               size_t length, rdmx_op_t *op, void **req_p)
{
    ucp_request_param_t p;

    (void)length;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_DATATYPE;
    p.cb.recv_am = recv_cb;
    p.user_data = op;
    p.datatype = ucp_dt_make_iov();
    return issued(ucp_am_recv_data_nbx(((ucx_worker_t *)tw)->ucp, desc,
                                       (void *)pieces, n, &p),
                  req_p, "receive");
}

/* Give back what the core took and will not receive (am_cb): eager data
 * it kept, or a rendezvous descriptor (UCX answers its sender then). */
static void ucx_release(void *tw, void *data)
{
    ucp_am_data_release(((ucx_worker_t *)tw)->ucp, data);
}

/* --- one-sided ----------------------------------------------------------------- */

static rdmx_status_t ucx_rkey_unpack(rdmx_tep_t *tep, const void *rkey,
                                     size_t len, void **trkey_p)
{
    ucx_ep_t *ep = (ucx_ep_t *)tep;
    rdmx_rkey_pins_t pins;
    rdmx_status_t st;
    ucp_rkey_h rk;
    ucs_status_t us;
    void *copy = malloc(len);

    if (copy == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "rmem_unpack: out of memory");
    memcpy(copy, rkey, len); /* aligned, as UCX reads it */
    /* (UCX before 1.19 dies of a key whose segment is gone: rkey_guard.c) */
    st = rdmx__rkey_guard_check(ep->worker->guard, copy, len, &pins);
    if (st != RDMX_OK) {
        free(copy);
        return st;
    }
    us = ucp_ep_rkey_unpack(ep->ucp, copy, &rk);
    rdmx__rkey_guard_done(&pins);
    free(copy);
    if (us != UCS_OK)
        return rdmx__error(RDMX_ERR_BAD_DESCRIPTOR,
                           "descriptor: remote key refused by UCX: %s",
                           ucs_status_string(us));
    *trkey_p = rk;
    return RDMX_OK;
}

static rdmx_status_t ucx_rkey_ptr(void *trkey, uint64_t raddr, void **ptr_p)
{
    /* (UCX maps a peer's segment only for memory its shared-memory
     * transports allocated: rdmx_mem_alloc's, not registered user memory) */
    return ucp_rkey_ptr(trkey, raddr, ptr_p) == UCS_OK ? RDMX_OK
                                                       : RDMX_ERR_UNSUPPORTED;
}

static void ucx_rkey_destroy(void *trkey)
{
    ucp_rkey_destroy(trkey);
}

static void rma_param(ucp_request_param_t *p, rdmx_op_t *op, void *tmr)
{
    p->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p->cb.send = send_cb;
    p->user_data = op;
    memh_param(p, tmr);
}

static rdmx_status_t ucx_put(rdmx_tep_t *tep, const void *buf, size_t length,
                             void *tmr, uint64_t raddr, void *trkey,
                             rdmx_op_t *op, void **req_p)
{
    ucp_request_param_t p;
    ucs_status_ptr_t r;

    rma_param(&p, op, tmr);
    r = ucp_put_nbx(((ucx_ep_t *)tep)->ucp, buf, length, raddr, trkey, &p);
    if (op == NULL && UCS_PTR_IS_PTR(r))
        return RDMX_OK; /* send_cb frees it */
    return issued(r, req_p, "put");
}

static rdmx_status_t ucx_get(rdmx_tep_t *tep, void *buf, size_t length,
                             void *tmr, uint64_t raddr, void *trkey,
                             rdmx_op_t *op, void **req_p)
{
    ucp_request_param_t p;

    rma_param(&p, op, tmr);
    return issued(ucp_get_nbx(((ucx_ep_t *)tep)->ucp, buf, length, raddr,
                              trkey, &p),
                  req_p, "get");
}

static rdmx_status_t ucx_flush(rdmx_tep_t *tep, rdmx_op_t *op, void **req_p)
{
    ucp_request_param_t p;

    rma_param(&p, op, NULL);
    return issued(ucp_ep_flush_nbx(((ucx_ep_t *)tep)->ucp, &p), req_p,
                  "flush");
}

static rdmx_status_t ucx_atomic(rdmx_tep_t *tep, int cswap, uint64_t *operand,
                                uint64_t *result, uint64_t raddr, void *trkey,
                                rdmx_op_t *op, void **req_p)
{
    ucp_request_param_t p;

    rma_param(&p, op, NULL);
    p.op_attr_mask |=
        UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    p.datatype = ucp_dt_make_contig(8);
    p.reply_buffer = result;
    return issued(ucp_atomic_op_nbx(((ucx_ep_t *)tep)->ucp,
                                    cswap ? UCP_ATOMIC_OP_CSWAP
                                          : UCP_ATOMIC_OP_ADD,
                                    operand, 1, raddr, trkey, &p),
                  req_p, "atomic");
}

static void ucx_req_forget(void *req)
{
    ucp_request_free(req);
}

/* UCX names the transport of each lane in ucp_ep_print_info's text only
 * (ucp_ep_query has no such field before 1.19): read the first lane's
 * ("lane[0]:  1:tcp/lo.0 md[1] ..."). */
static rdmx_transport_t ucx_ep_transport(rdmx_tep_t *tep)
{
    static const struct {
        const char *prefix;
        rdmx_transport_t t;
    } names[] = {{"tcp", RDMX_TRANSPORT_TCP},    {"posix", RDMX_TRANSPORT_SHM},
                 {"sysv", RDMX_TRANSPORT_SHM},   {"xpmem", RDMX_TRANSPORT_SHM},
                 {"cma", RDMX_TRANSPORT_SHM},    {"knem", RDMX_TRANSPORT_SHM},
                 {"self", RDMX_TRANSPORT_SHM},   {"rc", RDMX_TRANSPORT_RDMA},
                 {"ud", RDMX_TRANSPORT_RDMA},    {"dc", RDMX_TRANSPORT_RDMA}};
    rdmx_transport_t t = RDMX_TRANSPORT_AUTO;
    char *text = NULL, *p;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    if (f == NULL)
        return t;
    ucp_ep_print_info(((ucx_ep_t *)tep)->ucp, f);
    fclose(f);
    if (text != NULL && (p = strstr(text, "lane[0]:")) != NULL) {
        p += strlen("lane[0]:");
        p += strspn(p, " ");
        p += strspn(p, "0123456789");
        if (*p == ':')
            p++;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            if (!strncmp(p, names[i].prefix, strlen(names[i].prefix))) {
                t = names[i].t;
                break;
            }
        }
    }
    free(text);
    return t;
}

const rdmx_tp_ops_t rdmx_tp_ucx = {
    .name = "ucx",
    .ctx_create = ucx_ctx_create,
    .ctx_destroy = ucx_ctx_destroy,
    .mem_map = ucx_mem_map,
    .mem_unmap = ucx_mem_unmap,
    .worker_create = ucx_worker_create,
    .worker_destroy = ucx_worker_destroy,
    .progress = ucx_progress,
    .arm = ucx_arm,
    .signal = ucx_signal,
    .set_handler = ucx_set_handler,
    .ep_create = ucx_ep_create,
    .ep_transport = ucx_ep_transport,
    .ep_close = ucx_ep_close,
    .send = ucx_send,
    .sendv = ucx_sendv,
    .recv = ucx_recv,
    .recvv = ucx_recvv,
    .release = ucx_release,
    .rkey_unpack = ucx_rkey_unpack,
    .rkey_destroy = ucx_rkey_destroy,
    .rkey_ptr = ucx_rkey_ptr,
    .put = ucx_put,
    .get = ucx_get,
    .flush = ucx_flush,
    .has_atomics = ucx_has_atomics,
    .atomic = ucx_atomic,
    .key_kind = RDMX_KEY_KIND_UCX,
    .req_forget = ucx_req_forget,
};

ucp_worker_h rdmx__ucx_worker(rdmx_worker_t *w)
{
    return ((ucx_worker_t *)w->tw)->ucp;
}

ucp_ep_h rdmx__ucx_ep(rdmx_ep_t *ep)
{
    return ep->tep != NULL ? ((ucx_ep_t *)ep->tep)->ucp : NULL;
}
