/*
 * The libfabric backend (src/core/transport.h): its operations table,
 * the context (one fabric and domain per rdmx context) and workers (one
 * FI_EP_RDM endpoint with its CQ and address vector per rdmx worker, and
 * the wake-up fd) (docs/FABRIC.md). Endpoints live in ofi_ep.c, messages
 * in ofi_msg.c, large messages in ofi_rndv.c.
 *
 * Facts of libfabric 1.17 this code lives by (docs/FABRIC.md, "Providers"):
 * - shm's CQ has no wait object, and fi_trywait on a CQ without one
 *   crashes: only a CQ opened with FI_WAIT_FD is ever passed to it; the
 *   others wake their worker with a timer, and shm's also by a doorbell
 *   its peers ring (ofi_bell.c).
 * - rxm connects lazily: sends return -FI_EAGAIN until the connection is
 *   up (ofi_msg.c queues them), and it handles connection requests every
 *   FI_OFI_RXM_CM_PROGRESS_INTERVAL microseconds (1000 unless set).
 * - rxm over tcp posts FI_OFI_RXM_MSG_RX_SIZE bounce buffers of 16 KiB
 *   per endpoint, all touched when it is enabled (1024 unless set).
 * - An AV entry removed with FI_AV_REMOVE_CLEANUP=1 closes rxm's
 *   connection and cancels what is queued on it (ofi_ep.c says when
 *   entries go: rarely).
 */
#include "core/ofi/ofi_int.h"

#include "util/endian.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define OFI_API_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)
#define OFI_POLL_NS     1000000 /* wake-up period without a CQ fd */

/* libfabric's error numbers in rdmx's terms: connection-level failures
 * keep their meaning; anything unexpected is an I/O error. */
rdmx_status_t rdmx__ofi_status(int fi_err)
{
    switch (fi_err < 0 ? -fi_err : fi_err) {
    case 0:
        return RDMX_OK;
    case FI_ECANCELED:
        return RDMX_ERR_CANCELED;
    case FI_ETRUNC:
    case FI_ETOOSMALL:
    case FI_EMSGSIZE:
        return RDMX_ERR_TOO_BIG;
    case FI_EACCES:
    case FI_EPERM:
        return RDMX_ERR_DENIED;
    case FI_EAGAIN:
        return RDMX_ERR_NO_RESOURCE;
    case FI_ENOMEM:
        return RDMX_ERR_NO_MEMORY;
    case FI_ETIMEDOUT:
        return RDMX_ERR_TIMEOUT;
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EIO:
        return RDMX_ERR_CONN_RESET;
    case FI_ECONNREFUSED:
        return RDMX_ERR_CONN_REFUSED;
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_EADDRNOTAVAIL:
        return RDMX_ERR_UNREACHABLE;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
        return RDMX_ERR_UNSUPPORTED;
    default:
        return RDMX_ERR_IO;
    }
}

/* --- context
 * ------------------------------------------------------------------ */

/* The provider a spec names: "ofi" (NULL: the first answer), "ofi:tcp"
 * (rxm over tcp in 1.17), "ofi:shm", "ofi:NAME" (a prov_name as is). */
static const char *spec_provider(const char *spec)
{
    if (spec == NULL || strncmp(spec, "ofi", 3) != 0 || spec[3] != ':' ||
        spec[4] == '\0')
        return NULL;
    if (!strcmp(spec + 4, "tcp"))
        return "tcp;ofi_rxm";
    return spec + 4;
}

static rdmx_transport_t prov_medium(const char *prov)
{
    if (!strncmp(prov, "shm", 3))
        return RDMX_TRANSPORT_SHM;
    if (strstr(prov, "tcp") != NULL || strstr(prov, "sockets") != NULL ||
        strstr(prov, "net") != NULL)
        return RDMX_TRANSPORT_TCP;
    if (strstr(prov, "verbs") != NULL || strstr(prov, "efa") != NULL ||
        strstr(prov, "cxi") != NULL || strstr(prov, "psm") != NULL ||
        strstr(prov, "opx") != NULL)
        return RDMX_TRANSPORT_RDMA;
    return RDMX_TRANSPORT_AUTO;
}

int rdmx__ofi_env_off(const char *name)
{
    const char *s = getenv(name);

    return s != NULL && strcmp(s, "0") == 0;
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static pthread_once_t sweep_once = PTHREAD_ONCE_INIT;

/* libfabric reads its parameters from the environment when first used;
 * values the user set win. */
static void env_defaults(void)
{
    setenv("FI_AV_REMOVE_CLEANUP", "1", 0);
    setenv("FI_OFI_RXM_CM_PROGRESS_INTERVAL", "1000", 0);
    /* rxm over tcp shares one receive queue per endpoint and posts 4096
     * bounce buffers of 16 KiB into it, in pools of 1024 that it fills
     * when the endpoint is enabled: 80 MiB per worker, and 0.2 s of every
     * process's start. One pool's worth keeps what a worker can have
     * unread (rdmx posts 64 receives; tcp holds the rest in the socket)
     * at the same rate (docs/FABRIC.md, "Providers measured here"). */
    setenv("FI_OFI_RXM_MSG_RX_SIZE", "1024", 0);
}

/* The providers fi_getinfo offers for FI_EP_RDM, for an error message. */
static void list_providers(char *out, size_t size)
{
    struct fi_info *hints = fi_allocinfo(), *list = NULL, *i;
    size_t n = 0;

    out[0] = '\0';
    if (hints == NULL)
        return;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG;
    if (fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list) == 0) {
        for (i = list; i != NULL && n + 2 < size; i = i->next) {
            const char *p = i->fabric_attr->prov_name;
            if (strstr(out, p) != NULL)
                continue;
            n += (size_t)snprintf(out + n, size - n, "%s%s", n ? ", " : "", p);
        }
        fi_freeinfo(list);
    }
    fi_freeinfo(hints);
}

static rdmx_status_t ofi_ctx_create(rdmx_context_t *ctx, rdmx_transport_t t,
                                    const char *net_devices, int one_sided,
                                    void **tctx_p)
{
    const char *prov = spec_provider(ctx->backend_spec);
    struct fi_info *hints, *info = NULL, *list = NULL;
    rdmx_status_t st;
    ofi_ctx_t *oc;
    int ret;

    (void)t;
    if ((st = rdmx__ofi_lib_load()) != RDMX_OK)
        return st;
    pthread_once(&env_once, env_defaults);
    oc = calloc(1, sizeof(*oc));
    hints = fi_allocinfo();
    if (oc == NULL || hints == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "context: out of memory");
        goto err_free;
    }
    hints->ep_attr->type = FI_EP_RDM;
    /* FI_SOURCE: the receiver learns the sending worker from the provider,
     * not from anything the peer writes. No FI_TAGGED: rdmx matches. */
    /* FI_READ/FI_REMOTE_READ: large messages are pulled by the receiver
     * from a registration of exactly their bytes. */
    hints->caps = FI_MSG | FI_SOURCE | FI_RMA | FI_READ | FI_REMOTE_READ;
    if (one_sided)
        hints->caps |= FI_WRITE | FI_REMOTE_WRITE | FI_ATOMIC;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT | FI_MR_RAW;
    hints->domain_attr->threading = FI_THREAD_COMPLETION;
    hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    if (prov != NULL &&
        (hints->fabric_attr->prov_name = strdup(prov)) == NULL) {
        st = rdmx__error(RDMX_ERR_NO_MEMORY, "context: out of memory");
        goto err_free;
    }
    ret = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
    if (ret != 0 && (hints->caps & FI_ATOMIC)) {
        /* (a provider without atomics: rdmx carries them) */
        hints->caps &= ~FI_ATOMIC;
        ret = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
    }
    /* tcp's domains are interfaces: net_devices "lo" picks loopback's
     * answer (rxm does not filter by a domain name in the hints); without
     * a match, or without net_devices, the first answer. */
    if (ret == 0 && list != NULL) {
        struct fi_info *pick = list;
        for (struct fi_info *i = list; net_devices != NULL && i != NULL;
             i = i->next) {
            if (i->domain_attr->name != NULL &&
                !strcmp(i->domain_attr->name, net_devices)) {
                pick = i;
                break;
            }
        }
        info = fi_dupinfo(pick);
        fi_freeinfo(list);
    }
    if (ret != 0 || info == NULL) {
        char provs[256];
        list_providers(provs, sizeof(provs));
        st = rdmx__error(RDMX_ERR_UNSUPPORTED,
                         "transport %s: no libfabric provider%s%s offers "
                         "reliable datagram endpoints with FI_MSG, "
                         "FI_READ%s and FI_SOURCE (fi_getinfo: %s); "
                         "providers here: %s",
                         ctx->backend_spec, prov ? " " : "", prov ? prov : "",
                         one_sided ? ", FI_WRITE" : "", fi_strerror(-ret),
                         provs[0] ? provs : "none");
        goto err_free;
    }
    oc->info = info;
    snprintf(oc->prov, sizeof(oc->prov), "%s", info->fabric_attr->prov_name);
    /* shm names its regions after the process id ("fi_shm://PID", then
     * ":UID:EP" per endpoint): a region a killed process left in /dev/shm
     * makes a later process with the same id fail fi_endpoint with EBUSY.
     * A random part keeps each context's names its own; the first shm
     * context of a process removes those of dead processes (ofi_bell.c). */
    if (info->addr_format == FI_ADDR_STR && !strcmp(oc->prov, "shm")) {
        uint64_t r = 0;
        char *name = malloc(64);
        pthread_once(&sweep_once, rdmx__ofi_shm_sweep);
        if (name == NULL || rdmx__random(&r, sizeof(r)) != RDMX_OK) {
            free(name);
            st = rdmx__error(RDMX_ERR_NO_MEMORY, "context: out of memory");
            goto err_info;
        }
        snprintf(name, 64, "fi_shm://%d-%016llx", (int)getpid(),
                 (unsigned long long)r);
        free(info->src_addr);
        info->src_addr = name;
        info->src_addrlen = strlen(name) + 1;
    }
    oc->medium = prov_medium(oc->prov);
    oc->mr_mode = (uint64_t)info->domain_attr->mr_mode;
    /* A frame fits a receive buffer; shared memory sends up to its inject
     * size complete locally (larger ones wait for the receiver). */
    oc->eager_max = OFI_EAGER_MAX;
    if (info->ep_attr->max_msg_size <
        oc->eager_max + RDMX_OFI_FRAME_SIZE + RDMX_OFI_FRAME_HDR_MAX)
        oc->eager_max = info->ep_attr->max_msg_size - RDMX_OFI_FRAME_SIZE -
                        RDMX_OFI_FRAME_HDR_MAX;
    oc->frame_max =
        oc->eager_max + RDMX_OFI_FRAME_SIZE + RDMX_OFI_FRAME_HDR_MAX;
    /* Frames up to the inject size go by fi_inject: no request and no
     * completion (rxm over tcp wakes its progress once per completion:
     * a write and a read of a signal). RDMX_OFI_INJECT=0: never. */
    oc->inject_max = info->tx_attr->inject_size;
    if (oc->inject_max > OFI_INJECT_MAX)
        oc->inject_max = OFI_INJECT_MAX;
    if (rdmx__ofi_env_off("RDMX_OFI_INJECT"))
        oc->inject_max = 0;
    oc->chunk = 4u << 20;
    if (info->ep_attr->max_msg_size < oc->chunk)
        oc->chunk = info->ep_attr->max_msg_size;
    oc->key_size = info->domain_attr->mr_key_size;
    if (oc->key_size == 0 || oc->key_size > 8)
        oc->key_size = 8;
    oc->wait_fd = 1; /* until a CQ says otherwise (worker_create) */
    oc->one_sided = one_sided;
    rdmx__ofi_mem_init(oc);
    ret = fi_fabric(info->fabric_attr, &oc->fabric, NULL);
    if (ret != 0) {
        st = rdmx__error(RDMX_ERR_IO, "ofi %s: fi_fabric: %s", oc->prov,
                         fi_strerror(-ret));
        goto err_info;
    }
    ret = fi_domain(oc->fabric, info, &oc->domain, NULL);
    if (ret != 0) {
        st = rdmx__error(RDMX_ERR_IO, "ofi %s: fi_domain %s: %s", oc->prov,
                         info->domain_attr->name, fi_strerror(-ret));
        goto err_fabric;
    }
    rdmx__ofi_rma_init(oc);
    {
        uint32_t v = fi_version();
        snprintf(oc->describe, sizeof(oc->describe), "ofi %u.%u %s, domain %s",
                 FI_MAJOR(v), FI_MINOR(v), oc->prov, info->domain_attr->name);
    }
    fi_freeinfo(hints);
    *tctx_p = oc;
    return RDMX_OK;

err_fabric:
    fi_close(&oc->fabric->fid);
    pthread_mutex_destroy(&oc->lock);
err_info:
    fi_freeinfo(info);
err_free:
    if (hints != NULL)
        fi_freeinfo(hints);
    free(oc);
    return st;
}

static void ofi_ctx_destroy(void *tctx)
{
    ofi_ctx_t *oc = tctx;

    fi_close(&oc->domain->fid);
    fi_close(&oc->fabric->fid);
    pthread_mutex_destroy(&oc->lock);
    fi_freeinfo(oc->info);
    free(oc);
}

static const char *ofi_ctx_describe(void *tctx)
{
    return ((ofi_ctx_t *)tctx)->describe;
}

static rdmx_transport_t ofi_ctx_transport(void *tctx)
{
    return ((ofi_ctx_t *)tctx)->medium;
}

/* --- workers
 * -------------------------------------------------------------------- */

/* Into the core's set: level-triggered, data.ptr NULL (the core leaves
 * the backend's fds to its progress). */
static int epoll_add(int epfd, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};

    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* The address peers get through the bootstrap (docs/FABRIC.md):
 *  0 u32 magic "ROFI"  4 u8 version 1  5 u8 0  6 u16 n
 *  8 u64 worker instance (random)  16 char[32] prov_name, NUL padded
 * 48 n bytes: fi_getname(). */
static rdmx_status_t make_address(ofi_worker_t *ow)
{
    size_t n = OFI_NAME_MAX;
    int ret;

    ret = fi_getname(&ow->ep->fid, ow->addr + OFI_ADDR_HDR, &n);
    if (ret != 0 || n == 0 || n > OFI_NAME_MAX)
        return rdmx__error(RDMX_ERR_IO, "ofi %s: fi_getname: %s", ow->ctx->prov,
                           ret ? fi_strerror(-ret) : "bad length");
    rdmx_put_le32(ow->addr, OFI_ADDR_MAGIC);
    ow->addr[4] = 1;
    ow->addr[5] = 0;
    rdmx_put_le16(ow->addr + 6, (uint16_t)n);
    rdmx_put_le64(ow->addr + 8, ow->instance);
    memset(ow->addr + 16, 0, OFI_PROV_MAX);
    memcpy(ow->addr + 16, ow->ctx->prov, strlen(ow->ctx->prov));
    ow->addr_len = OFI_ADDR_HDR + n;
    return RDMX_OK;
}

static rdmx_status_t ofi_worker_create(void *tctx, rdmx_worker_t *w,
                                       unsigned flags, int core_epfd,
                                       void **tw_p, int *efd_p,
                                       const void **addr_p, size_t *addr_len_p)
{
    ofi_ctx_t *oc = tctx;
    struct fi_cq_attr cqa = {0};
    struct fi_av_attr ava = {0};
    ofi_worker_t *ow;
    rdmx_status_t st;
    int ret, cqfd = -1;

    /* (RDMX_TP_WORKER_THREADED: the core serializes calls,
     * FI_THREAD_COMPLETION) */
    ow = calloc(1, sizeof(*ow));
    if (ow == NULL)
        return rdmx__error(RDMX_ERR_NO_MEMORY, "worker: out of memory");
    ow->ctx = oc;
    ow->w = w;
    ow->evfd = ow->tfd = ow->bell_fd = ow->cqfd = -1;
    /* Its fds go straight into the core's set, not into a set of its own
     * inside it: a wake-up passes one epoll callback fewer (the provider's
     * CQ fd is already a set of sockets over tcp). */
    ow->epfd = core_epfd;
    rdmx_list_init(&ow->peers);
    rdmx_list_init(&ow->eps);
    rdmx_list_init(&ow->chunks);
    rdmx_list_init(&ow->free);
    rdmx_list_init(&ow->pending);
    rdmx_list_init(&ow->done);
    rdmx_list_init(&ow->rts_done);
    rdmx_list_init(&ow->pulls);
    rdmx_list_init(&ow->rts_all);
    rdmx_list_init(&ow->rdesc_all);
    rdmx_list_init(&ow->clink);
    rdmx_list_init(&ow->rma_free);
    rdmx_list_init(&ow->rma_wait);
    rdmx_list_init(&ow->rma_done);
    rdmx_list_init(&ow->rma_all);
    rdmx_list_init(&ow->joins);
    rdmx_list_init(&ow->join_free);
    if ((st = rdmx__random(&ow->instance, sizeof(ow->instance))) != RDMX_OK)
        goto err_free;
    cqa.format = FI_CQ_FORMAT_DATA;
    cqa.size = oc->info->tx_attr->size + oc->info->rx_attr->size + 64;
    /* A busy-polled worker's CQ has no wait object (the timer wakes it):
     * rxm over tcp then polls its sockets with poll(), not through the
     * wait set's epoll, and a round trip is 15-20 % shorter. */
    cqa.wait_obj = oc->wait_fd && !(flags & RDMX_TP_WORKER_BUSY) ? FI_WAIT_FD
                                                                 : FI_WAIT_NONE;
    ret = fi_cq_open(oc->domain, &cqa, &ow->cq, NULL);
    if (ret == -FI_ENOSYS || ret == -FI_EINVAL || ret == -FI_EOPNOTSUPP) {
        /* (shm in 1.17: no wait objects; the doorbell and the timer
         * below wake us) */
        cqa.wait_obj = FI_WAIT_NONE;
        ret = fi_cq_open(oc->domain, &cqa, &ow->cq, NULL);
    }
    if (ret != 0) {
        st = rdmx__error(RDMX_ERR_IO, "ofi %s: fi_cq_open: %s", oc->prov,
                         fi_strerror(-ret));
        goto err_free;
    }
    if (cqa.wait_obj == FI_WAIT_FD &&
        fi_control(&ow->cq->fid, FI_GETWAIT, &cqfd) != 0)
        cqfd = -1;
    ava.type = FI_AV_TABLE;
    ava.count = 64;
    ret = fi_av_open(oc->domain, &ava, &ow->av, NULL);
    if (ret != 0) {
        st = rdmx__error(RDMX_ERR_IO, "ofi %s: fi_av_open: %s", oc->prov,
                         fi_strerror(-ret));
        goto err_cq;
    }
    ret = fi_endpoint(oc->domain, oc->info, &ow->ep, NULL);
    if (ret == 0)
        ret = fi_ep_bind(ow->ep, &ow->av->fid, 0);
    if (ret == 0)
        ret = fi_ep_bind(ow->ep, &ow->cq->fid, FI_TRANSMIT | FI_RECV);
    if (ret == 0)
        ret = fi_enable(ow->ep);
    if (ret != 0) {
        st = rdmx__error(RDMX_ERR_IO, "ofi %s: endpoint: %s", oc->prov,
                         fi_strerror(-ret));
        goto err_ep;
    }
    if ((st = make_address(ow)) != RDMX_OK)
        goto err_ep;
    ow->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (cqfd < 0)
        ow->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ow->evfd < 0 || (cqfd < 0 && ow->tfd < 0) ||
        epoll_add(ow->epfd, ow->evfd) != 0 ||
        epoll_add(ow->epfd, cqfd >= 0 ? cqfd : ow->tfd) != 0) {
        st = rdmx__error(RDMX_ERR_NO_RESOURCE, "worker: wake-up fds: %s",
                         strerror(errno));
        goto err_fds;
    }
    rdmx__ofi_bell_init(ow);
    if ((st = rdmx__ofi_rx_init(ow)) != RDMX_OK)
        goto err_fds;
    if ((st = rdmx__ofi_mem_worker_add(ow)) != RDMX_OK)
        goto err_fds;
    ow->cqfd = cqfd;
    *tw_p = ow;
    *efd_p = -1;
    *addr_p = ow->addr;
    *addr_len_p = ow->addr_len;
    return RDMX_OK;

err_fds:
    rdmx__ofi_bell_fini(ow);
    if (cqfd >= 0) /* (the provider's: out of the core's set by hand) */
        epoll_ctl(ow->epfd, EPOLL_CTL_DEL, cqfd, NULL);
    if (ow->tfd >= 0)
        close(ow->tfd);
    if (ow->evfd >= 0)
        close(ow->evfd);
err_ep:
    if (ow->ep != NULL)
        fi_close(&ow->ep->fid);
    fi_close(&ow->av->fid);
err_cq:
    fi_close(&ow->cq->fid);
err_free:
    rdmx__ofi_bufs_cleanup(ow);
    free(ow);
    return st;
}

static void ofi_worker_destroy(void *tw)
{
    ofi_worker_t *ow = tw;
    rdmx_list_t *e;

    if (ow->cqfd >= 0) /* (the provider's: out of the core's set by hand) */
        epoll_ctl(ow->epfd, EPOLL_CTL_DEL, ow->cqfd, NULL);
    /* The endpoint first: the provider lets go of every buffer. */
    fi_close(&ow->ep->fid);
    fi_close(&ow->av->fid);
    fi_close(&ow->cq->fid);
    rdmx__ofi_mem_worker_remove(ow);
    rdmx__ofi_rndv_cleanup(ow);
    rdmx__ofi_rma_cleanup(ow);
    rdmx__ofi_joins_cleanup(ow);
    while ((e = rdmx_list_pop(&ow->eps)) != NULL)
        free(rdmx_container_of(e, ofi_ep_t, link));
    while ((e = rdmx_list_pop(&ow->peers)) != NULL) {
        ofi_peer_t *p = rdmx_container_of(e, ofi_peer_t, link);
        rdmx__ofi_bell_peer_close(ow, p);
        free(p);
    }
    rdmx__ofi_bell_fini(ow);
    free(ow->peer_tab);
    rdmx__ofi_bufs_cleanup(ow);
    free(ow->slots);
    if (ow->tfd >= 0)
        close(ow->tfd);
    close(ow->evfd); /* (closed fds leave the core's set by themselves) */
    free(ow);
}

static unsigned ofi_progress(void *tw)
{
    return rdmx__ofi_poll(tw);
}

/* Safe to sleep when nothing waits for a retry or a repost, and the CQ
 * says so (fi_trywait) — or, without a CQ fd, with the doorbell's flag
 * raised (ofi_bell.c), else the timer armed. */
static rdmx_status_t ofi_arm(void *tw)
{
    ofi_worker_t *ow = tw;
    uint64_t v;
    int ret;

    if (!rdmx_list_empty(&ow->pending) || !rdmx_list_empty(&ow->done) ||
        !rdmx_list_empty(&ow->rts_done) || !rdmx_list_empty(&ow->pulls) ||
        !rdmx_list_empty(&ow->rma_wait) || !rdmx_list_empty(&ow->rma_done))
        return RDMX_ERR_BUSY;
    if (ow->rx_posted + OFI_RX_RESERVE < ow->rx_count) {
        rdmx__ofi_rx_repost(ow);
        if (ow->rx_posted == 0)
            return RDMX_ERR_BUSY;
    }
    while (read(ow->evfd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
    }
    if (ow->bell != NULL)
        return rdmx__ofi_bell_arm(ow);
    if (ow->tfd >= 0) {
        struct itimerspec its = {.it_value = {0, OFI_POLL_NS}};
        while (read(ow->tfd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
        }
        if (timerfd_settime(ow->tfd, 0, &its, NULL) != 0)
            return RDMX_ERR_BUSY;
        return RDMX_OK;
    }
    {
        struct fid *fids[1] = {&ow->cq->fid};
        ret = fi_trywait(ow->ctx->fabric, fids, 1);
    }
    if (ret == FI_SUCCESS)
        return RDMX_OK;
    if (ret == -FI_EAGAIN)
        return RDMX_ERR_BUSY;
    return rdmx__error(RDMX_ERR_IO, "ofi %s: fi_trywait: %s", ow->ctx->prov,
                       fi_strerror(-ret));
}

static void ofi_signal(void *tw)
{
    uint64_t one = 1;

    if (write(((ofi_worker_t *)tw)->evfd, &one, sizeof(one)) < 0) {
        /* (full: a wake-up is pending anyway) */
    }
}

static rdmx_status_t ofi_set_handler(void *tw, unsigned id, int hold)
{
    if (id >= RDMX_MSG_ID_MAX)
        return rdmx__error(RDMX_ERR_INVALID, "message id %u", id);
    ((ofi_worker_t *)tw)->hold[id] = hold;
    return RDMX_OK;
}

const rdmx_tp_ops_t rdmx_tp_ofi = {
    .name = "ofi",
    .ctx_create = ofi_ctx_create,
    .ctx_destroy = ofi_ctx_destroy,
    .ctx_describe = ofi_ctx_describe,
    .ctx_transport = ofi_ctx_transport,
    .mem_map = rdmx__ofi_mem_map,
    .mem_unmap = rdmx__ofi_mem_unmap,
    .worker_create = ofi_worker_create,
    .worker_destroy = ofi_worker_destroy,
    .progress = ofi_progress,
    .arm = ofi_arm,
    .signal = ofi_signal,
    .set_handler = ofi_set_handler,
    .ep_create = rdmx__ofi_ep_create,
    .ep_transport = rdmx__ofi_ep_transport,
    .ep_close = rdmx__ofi_ep_close,
    .send = rdmx__ofi_send,
    .recv = rdmx__ofi_recv,
    .release = rdmx__ofi_release,
    .rkey_unpack = rdmx__ofi_rkey_unpack,
    .rkey_destroy = rdmx__ofi_rkey_destroy,
    .put = rdmx__ofi_put,
    .get = rdmx__ofi_get,
    .flush = rdmx__ofi_flush,
    .has_atomics = rdmx__ofi_has_atomics,
    .atomic = rdmx__ofi_atomic,
    .put_notify = rdmx__ofi_put_notify,
    .req_forget = rdmx__ofi_req_forget,
    .key_kind = RDMX_KEY_KIND_OFI,
};
