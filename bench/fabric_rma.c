/*
 * fabric_rma — the provider's own figures for what rdmx-perf measures over
 * the ofi backend: put (fi_write) and get (fi_read) bandwidth with a window
 * of operations in flight, and the latency of small sends, between two
 * processes on one FI_EP_RDM provider. bench/vs-fabric.sh sets its figures
 * next to rdmx-perf's.
 *
 *   fabric_rma -p PROV -l PORT                    server on 127.0.0.1
 *   fabric_rma -p PROV HOST:PORT -t put|get|lat [-s SIZE] [-n N]
 *              [-w WARMUP] [-W WINDOW]            client
 *
 * PROV is a prov_name ("tcp;ofi_rxm", "shm"); "tcp" means "tcp;ofi_rxm",
 * as in rdmx's --transport ofi:tcp. The fi_getinfo hints are the ofi
 * backend's (src/core/ofi/ofi.c) with one-sided access on: FI_EP_RDM, caps
 * MSG SOURCE RMA READ WRITE REMOTE_READ REMOTE_WRITE, mode FI_CONTEXT |
 * FI_CONTEXT2, every mr_mode bit offered and the granted ones honoured,
 * FI_THREAD_COMPLETION, manual data progress, FI_RM_ENABLED, FI_ORDER_SAS;
 * tcp's domain "lo" when offered (set FI_TCP_IFACE=lo as well). Both sides
 * busy-poll their CQ (FI_WAIT_NONE), as rdmx-perf's do.
 *
 * The two exchange their fi_getname() addresses, the server's buffer
 * address and key over a TCP socket (the bootstrap); the client's last
 * byte on it ends the server. Each side has one buffer of SIZE bytes,
 * page-aligned, registered once, reused by every operation (rdmx-perf's
 * buffers, one send and one receive of SIZE).
 *
 * put, get: up to WINDOW operations in flight (counted by local
 * completion), N of them after WARMUP, MB/s (10^6 B/s) from the first post
 * to the last completion. lat: ping-pong of SIZE-byte sends, receives
 * posted before the message can come; p50 and mean one-way latency =
 * round trip / 2, one clock read per iteration. Output: one line
 *   fabric_rma test=put prov=tcp;ofi_rxm size=N window=W iters=N
 *   mb_per_s=.. [p50_us=.. avg_us=..]
 *
 * Built by CMake with the ofi backend (build/bin/fabric_rma), or:
 *   cc -O2 -I tools/common -o fabric_rma bench/fabric_rma.c \
 *      build/lib/librdmx_tools_common.a -lfabric
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "bench.h"
#include "options.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NAME_MAX_ 256
#define BATCH     16

static struct fi_info *g_info;
static struct fid_fabric *g_fabric;
static struct fid_domain *g_domain;
static struct fid_ep *g_ep;
static struct fid_cq *g_cq;
static struct fid_av *g_av;
static struct fid_mr *g_mr;
static void *g_desc;
static fi_addr_t g_peer;
static unsigned char *g_buf;
static size_t g_size;
static struct fi_context2 g_rx_ctx, g_tx_ctx; /* receives; the rest */
static uint64_t g_recvs, g_others;            /* completions of each */

/* What the bootstrap carries each way. */
typedef struct {
    uint64_t addr, key; /* the buffer (remote access: server only) */
    uint64_t name_len;
    unsigned char name[NAME_MAX_];
} boot_t;

static void die(const char *what, int ret)
{
    fprintf(stderr, "fabric_rma: %s: %s\n", what, fi_strerror(-ret));
    exit(1);
}

/* Open fabric, domain, CQ, AV and endpoint of @prov with the backend's
 * hints; register the buffer. */
static void open_fabric(const char *prov, size_t size)
{
    struct fi_info *hints = fi_allocinfo(), *list = NULL, *pick;
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT,
                             .wait_obj = FI_WAIT_NONE};
    struct fi_av_attr ava = {.type = FI_AV_TABLE, .count = 4};
    uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                      FI_REMOTE_WRITE;
    int ret;

    if (hints == NULL)
        die("fi_allocinfo", -FI_ENOMEM);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_SOURCE | FI_RMA | FI_READ | FI_WRITE |
                  FI_REMOTE_READ | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_COMPLETION;
    hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->fabric_attr->prov_name =
        strdup(strcmp(prov, "tcp") == 0 ? "tcp;ofi_rxm" : prov);
    ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &list);
    if (ret != 0)
        die("fi_getinfo", ret);
    pick = list;
    for (struct fi_info *i = list; i != NULL; i = i->next)
        if (i->domain_attr->name != NULL &&
            strcmp(i->domain_attr->name, "lo") == 0) {
            pick = i;
            break;
        }
    g_info = fi_dupinfo(pick);
    fi_freeinfo(list);
    fi_freeinfo(hints);
    /* shm names its region after the process id: one a killed process
     * left in /dev/shm fails a later process with that id. A random part,
     * as rdmx's backend adds. */
    if (g_info->addr_format == FI_ADDR_STR &&
        strcmp(g_info->fabric_attr->prov_name, "shm") == 0) {
        char *name = malloc(64);
        if (name == NULL)
            die("malloc", -FI_ENOMEM);
        snprintf(name, 64, "fi_shm://%d-rma%08lx", (int)getpid(),
                 (unsigned long)(now_ns() & 0xffffffffu));
        free(g_info->src_addr);
        g_info->src_addr = name;
        g_info->src_addrlen = strlen(name) + 1;
    }
    if ((ret = fi_fabric(g_info->fabric_attr, &g_fabric, NULL)) != 0)
        die("fi_fabric", ret);
    if ((ret = fi_domain(g_fabric, g_info, &g_domain, NULL)) != 0)
        die("fi_domain", ret);
    cqa.size = g_info->tx_attr->size + g_info->rx_attr->size;
    if ((ret = fi_cq_open(g_domain, &cqa, &g_cq, NULL)) != 0)
        die("fi_cq_open", ret);
    if ((ret = fi_av_open(g_domain, &ava, &g_av, NULL)) != 0)
        die("fi_av_open", ret);
    if ((ret = fi_endpoint(g_domain, g_info, &g_ep, NULL)) != 0 ||
        (ret = fi_ep_bind(g_ep, &g_av->fid, 0)) != 0 ||
        (ret = fi_ep_bind(g_ep, &g_cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
        (ret = fi_enable(g_ep)) != 0)
        die("endpoint", ret);
    g_size = size;
    if (posix_memalign((void **)&g_buf, 4096, size ? size : 1) != 0)
        die("buffer", -FI_ENOMEM);
    memset(g_buf, 0x5a, size);
    ret = fi_mr_reg(g_domain, g_buf, size ? size : 1, access, 0, 0x5eed, 0,
                    &g_mr, NULL);
    if (ret == 0 && (g_info->domain_attr->mr_mode & FI_MR_ENDPOINT)) {
        if ((ret = fi_mr_bind(g_mr, &g_ep->fid, 0)) == 0)
            ret = fi_mr_enable(g_mr);
    }
    if (ret != 0)
        die("fi_mr_reg", ret);
    g_desc = fi_mr_desc(g_mr);
}

static void close_fabric(void)
{
    fi_close(&g_ep->fid);
    fi_close(&g_mr->fid);
    fi_close(&g_av->fid);
    fi_close(&g_cq->fid);
    fi_close(&g_domain->fid);
    fi_close(&g_fabric->fid);
    fi_freeinfo(g_info);
    free(g_buf);
}

static void xfer(int fd, void *buf, size_t len, int out)
{
    unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n <= 0) {
            fprintf(stderr, "fabric_rma: bootstrap socket closed\n");
            exit(1);
        }
        p += n;
        len -= (size_t)n;
    }
}

/* Trade boot_t with the peer over @fd and insert its address. Returns
 * the peer's. */
static boot_t bootstrap(int fd)
{
    boot_t mine = {0}, theirs;
    size_t n = sizeof(mine.name);
    int ret;

    if ((ret = fi_getname(&g_ep->fid, mine.name, &n)) != 0)
        die("fi_getname", ret);
    mine.name_len = n;
    mine.addr = (g_info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
                    ? (uint64_t)(uintptr_t)g_buf
                    : 0;
    mine.key = fi_mr_key(g_mr);
    xfer(fd, &mine, sizeof(mine), 1);
    xfer(fd, &theirs, sizeof(theirs), 0);
    if (theirs.name_len > sizeof(theirs.name) ||
        fi_av_insert(g_av, theirs.name, 1, &g_peer, 0, NULL) != 1) {
        fprintf(stderr, "fabric_rma: cannot insert the peer's address\n");
        exit(1);
    }
    return theirs;
}

/* Read up to BATCH completions into g_recvs and g_others. */
static void poll_cq(void)
{
    struct fi_cq_entry e[BATCH];
    ssize_t n = fi_cq_read(g_cq, e, BATCH);

    if (n == -FI_EAGAIN)
        return;
    if (n < 0) {
        struct fi_cq_err_entry err = {0};
        if (fi_cq_readerr(g_cq, &err, 0) == 1)
            die("completion", -err.err);
        die("fi_cq_read", (int)n);
    }
    for (ssize_t i = 0; i < n; i++) {
        if (e[i].op_context == &g_rx_ctx)
            g_recvs++;
        else
            g_others++;
    }
}

static void post_recv(void)
{
    ssize_t ret;

    while ((ret = fi_recv(g_ep, g_buf, g_size, g_desc, FI_ADDR_UNSPEC,
                          &g_rx_ctx)) == -FI_EAGAIN)
        poll_cq();
    if (ret != 0)
        die("fi_recv", (int)ret);
}

static void post_send(void)
{
    ssize_t ret;

    while ((ret = fi_send(g_ep, g_buf, g_size, g_desc, g_peer, &g_tx_ctx)) ==
           -FI_EAGAIN)
        poll_cq();
    if (ret != 0)
        die("fi_send", (int)ret);
}

/* The client's ping-pong: send, wait for the answer (and the send's
 * completion), post the next receive. */
static void pingpong(uint64_t rounds, uint64_t *samples)
{
    uint64_t last = now_ns();

    for (uint64_t i = 0; i < rounds; i++) {
        uint64_t r = g_recvs + 1, o = g_others + 1;
        post_send();
        while (g_recvs < r || g_others < o)
            poll_cq();
        post_recv();
        if (samples != NULL) {
            uint64_t t = now_ns();
            samples[i] = t - last;
            last = t;
        }
    }
}

static int run_server(int port, const char *prov)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0), fd;
    uint64_t hdr[3]; /* test (0 rma, 1 lat), size, rounds */
    unsigned char end;

    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(lfd, 1) != 0) {
        perror("fabric_rma: listen");
        return 1;
    }
    printf("listening on 127.0.0.1:%d\n", port);
    fflush(stdout);
    fd = accept(lfd, NULL, NULL);
    close(lfd);
    if (fd < 0) {
        perror("fabric_rma: accept");
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    xfer(fd, hdr, sizeof(hdr), 0);
    open_fabric(prov, hdr[1]);
    bootstrap(fd);
    if (hdr[0] == 1) {
        /* the client sends first: answer each message */
        post_recv();
        for (uint64_t i = 0; i < hdr[2]; i++) {
            uint64_t o = g_others + 1;
            while (g_recvs < i + 1)
                poll_cq();
            post_recv();
            post_send();
            while (g_others < o)
                poll_cq();
        }
    }
    /* RMA targets need the target's progress on rxm: poll until the
     * client's last byte. */
    for (;;) {
        ssize_t n;
        for (int i = 0; i < 4096; i++)
            poll_cq();
        n = recv(fd, &end, 1, MSG_DONTWAIT);
        if (n == 1 || n == 0)
            break;
    }
    close(fd);
    close_fabric();
    return 0;
}

/* Up to @window RMA operations in flight, @count of them. */
static void rma_phase(int put, const boot_t *peer, uint64_t count,
                      uint64_t window)
{
    uint64_t posted = 0, base = g_others;

    while (g_others - base < count) {
        while (posted < count && posted - (g_others - base) < window) {
            ssize_t ret = put ? fi_write(g_ep, g_buf, g_size, g_desc, g_peer,
                                         peer->addr, peer->key, &g_tx_ctx)
                              : fi_read(g_ep, g_buf, g_size, g_desc, g_peer,
                                        peer->addr, peer->key, &g_tx_ctx);
            if (ret == -FI_EAGAIN)
                break;
            if (ret != 0)
                die(put ? "fi_write" : "fi_read", (int)ret);
            posted++;
        }
        poll_cq();
    }
}

static int run_client(const char *address, const char *prov, const char *test,
                      size_t size, uint64_t iters, uint64_t warmup,
                      uint64_t window)
{
    char host[256];
    const char *colon = strrchr(address, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    int lat = strcmp(test, "lat") == 0, put = strcmp(test, "put") == 0;
    uint64_t hdr[3] = {(uint64_t)lat, size, warmup + iters}, t0, t1;
    uint64_t *samples = NULL;
    unsigned char end = 1;
    boot_t peer;

    if (colon == NULL || (size_t)(colon - address) >= sizeof(host)) {
        fprintf(stderr, "fabric_rma: bad address '%s'\n", address);
        return 2;
    }
    memcpy(host, address, (size_t)(colon - address));
    host[colon - address] = '\0';
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("fabric_rma: connect");
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    xfer(fd, hdr, sizeof(hdr), 1);
    open_fabric(prov, size);
    peer = bootstrap(fd);
    if (lat) {
        samples = calloc(iters ? iters : 1, sizeof(*samples));
        if (samples == NULL)
            die("samples", -FI_ENOMEM);
        post_recv();
        pingpong(warmup, NULL);
        t0 = now_ns();
        pingpong(iters, samples);
        t1 = now_ns();
    } else {
        rma_phase(put, &peer, warmup, window);
        t0 = now_ns();
        rma_phase(put, &peer, iters, window);
        t1 = now_ns();
    }
    printf("fabric_rma test=%s prov=%s size=%zu window=%llu iters=%llu "
           "mb_per_s=%.2f",
           test, g_info->fabric_attr->prov_name, size,
           (unsigned long long)(lat ? 1 : window), (unsigned long long)iters,
           (double)size * (double)iters * (lat ? 2 : 1) * 1e3 /
               (double)(t1 - t0));
    if (lat) {
        qsort(samples, iters, sizeof(*samples), cmp_u64);
        printf(" p50_us=%.4f avg_us=%.4f",
               (double)samples[(iters - 1) / 2] / 2e3,
               (double)(t1 - t0) / (double)iters / 2e3);
    }
    printf("\n");
    xfer(fd, &end, 1, 1);
    close(fd);
    free(samples);
    close_fabric();
    return 0;
}

int main(int argc, char **argv)
{
    const char *test = "put", *prov = NULL;
    size_t size = 1 << 20;
    uint64_t iters = 1000, warmup = 100, window = 16;
    uint16_t lport = 0;
    int port = -1, c, bad = 0;

    while ((c = getopt(argc, argv, "p:l:t:s:n:w:W:h")) != -1) {
        switch (c) {
        case 'p':
            prov = optarg;
            break;
        case 'l':
            bad = opt_port(optarg, &lport) < 0;
            port = lport;
            break;
        case 't':
            test = optarg;
            break;
        case 's':
            bad = opt_size(optarg, &size) < 0;
            break;
        case 'n':
            bad = opt_uint(optarg, 1, UINT64_MAX / 2, &iters) < 0;
            break;
        case 'w':
            bad = opt_uint(optarg, 0, UINT64_MAX / 2, &warmup) < 0;
            break;
        case 'W':
            bad = opt_uint(optarg, 1, 1 << 16, &window) < 0;
            break;
        default:
            fprintf(stderr,
                    "usage: fabric_rma -p PROV -l PORT | -p PROV HOST:PORT "
                    "-t put|get|lat [-s SIZE] [-n N] [-w WARMUP] "
                    "[-W WINDOW]\n");
            return 2;
        }
        if (bad) {
            fprintf(stderr, "fabric_rma: -%c '%s': %s\n", c, optarg,
                    opt_error());
            return 2;
        }
    }
    if (prov == NULL || (port < 0 && optind + 1 != argc) ||
        (strcmp(test, "put") != 0 && strcmp(test, "get") != 0 &&
         strcmp(test, "lat") != 0)) {
        fprintf(stderr, "fabric_rma: -p PROV and a server address or "
                        "-l PORT; -t put, get or lat\n");
        return 2;
    }
    return port >= 0 ? run_server(port, prov)
                     : run_client(argv[optind], prov, test, size, iters, warmup,
                                  window);
}
