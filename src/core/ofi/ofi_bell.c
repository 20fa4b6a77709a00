/*
 * The doorbell of a shared-memory worker, whose completion queue has no
 * wait fd (shm in libfabric 1.17) (docs/FABRIC.md, "Wake-up"). Such a worker
 * sleeps on a datagram socket of its own; a peer rings it, one datagram, only
 * when the worker said it sleeps, in a flag both map.
 *
 * Names: the flag is the first word of a page /rdmx-bell-PID-INSTANCE
 * (shm_open, mode 0600), the socket is bound to the same name in Linux's
 * abstract namespace; INSTANCE is the worker's random instance id, which
 * its address carries, with OFI_ADDR_BELL set in the address's flags,
 * and PID the process id its shm name starts with ("fi_shm://PID-...").
 * rdmx__ofi_shm_sweep removes pages and shm regions whose process is
 * gone.
 *
 * Sleeping: arm() sets the flag and answers busy once, so one more
 * progress pass runs after the flag is up; only if that pass found
 * nothing does the worker sleep. A pass that finds work takes the flag
 * down. Ringing: after posting toward a peer (a send, a read, a piece of
 * a one-sided operation) and after every pass that handled a completion
 * or has operations in flight (the provider may have moved the peer's
 * data, or answered it, inside that pass), the ringer fences and reads
 * each peer's flag; whoever takes a raised flag down (an exchange) sends
 * the datagram. The sleeper stores then loads, the ringer stores (its
 * post) then loads: one of them sees the other, so no post is missed.
 *
 * Safety net: a sleeping worker still arms its timer, 1 ms while the
 * provider holds operations of it (it may need the peer's progress in a
 * way no post or completion shows), else OFI_BELL_IDLE_NS. A peer whose
 * page cannot be mapped is rung on every post; a peer that cannot be
 * rung at all is logged once and left to that timer.
 */
#include "core/ofi/ofi_int.h"

#include "util/endian.h"
#include "util/log.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#define OFI_BELL_PAGE    4096
#define OFI_BELL_BUSY_NS 1000000ull   /* timer while operations are out */
#define OFI_BELL_IDLE_NS 100000000ull /* timer with nothing out */

static void bell_name(char *out, size_t size, long pid, uint64_t instance)
{
    snprintf(out, size, "/rdmx-bell-%ld-%016llx", pid,
             (unsigned long long)instance);
}

/* A process's own files in /dev/shm: those of shm endpoints rdmx named
 * ("PID-HEX16:..." for "fi_shm://PID-HEX16", ofi.c) and doorbell pages
 * ("rdmx-bell-PID-HEX16"). Returns the process id, or 0. */
static long shm_file_pid(const char *n)
{
    long pid = 0;
    int digits = 0, hex = 0;

    if (!strncmp(n, "rdmx-bell-", 10))
        n += 10;
    while (*n >= '0' && *n <= '9' && pid < 1L << 30) {
        pid = pid * 10 + (*n++ - '0');
        digits++;
    }
    if (digits == 0 || *n++ != '-')
        return 0;
    while ((*n >= '0' && *n <= '9') || (*n >= 'a' && *n <= 'f')) {
        n++;
        hex++;
    }
    return hex == 16 && (*n == '\0' || *n == ':') ? pid : 0;
}

/* The process id of a peer's shm name ("fi_shm://PID-HEX16", as ofi.c
 * names them), or 0. (parse_address checked the prefix and the NUL.) */
static long name_pid(const unsigned char *addr)
{
    return shm_file_pid((const char *)addr + OFI_ADDR_HDR + 9);
}

/* @name ("/rdmx-bell-...") as an abstract socket address. */
static socklen_t bell_sockaddr(struct sockaddr_un *sa, const char *name)
{
    size_t n = strlen(name + 1);

    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path + 1, name + 1, n); /* sun_path[0] = 0: abstract */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

void rdmx__ofi_bell_init(ofi_worker_t *ow)
{
    struct sockaddr_un sa;
    struct epoll_event ev = {.events = EPOLLIN};
    const char *name;
    void *page;
    int fd;

    ow->bell_fd = -1;
    if (ow->tfd < 0 || ow->ctx->medium != RDMX_TRANSPORT_SHM ||
        rdmx__ofi_env_off("RDMX_OFI_DOORBELL"))
        return;
    bell_name(ow->bell_name, sizeof(ow->bell_name), (long)getpid(),
              ow->instance);
    name = ow->bell_name;
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rdmx_debug("ofi %s: no doorbell (shm_open %s: %s): the worker wakes "
                   "on a timer",
                   ow->ctx->prov, name, strerror(errno));
        return;
    }
    page = ftruncate(fd, OFI_BELL_PAGE) == 0
               ? mmap(NULL, OFI_BELL_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED,
                      fd, 0)
               : MAP_FAILED;
    close(fd);
    if (page == MAP_FAILED)
        goto err_unlink;
    ow->bell_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ow->bell_fd < 0 ||
        bind(ow->bell_fd, (struct sockaddr *)&sa, bell_sockaddr(&sa, name)) ||
        epoll_ctl(ow->epfd, EPOLL_CTL_ADD, ow->bell_fd, &ev) != 0)
        goto err_unmap;
    ow->bell = page;
    ow->addr[5] |= OFI_ADDR_BELL;
    return;

err_unmap:
    rdmx_debug("ofi %s: no doorbell (socket %s: %s): the worker wakes on a "
               "timer",
               ow->ctx->prov, name, strerror(errno));
    if (ow->bell_fd >= 0)
        close(ow->bell_fd);
    ow->bell_fd = -1;
    munmap(page, OFI_BELL_PAGE);
err_unlink:
    shm_unlink(name);
}

void rdmx__ofi_bell_fini(ofi_worker_t *ow)
{
    if (ow->bell != NULL) {
        shm_unlink(ow->bell_name);
        munmap(ow->bell, OFI_BELL_PAGE);
        ow->bell = NULL;
    }
    if (ow->bell_fd >= 0)
        close(ow->bell_fd);
    ow->bell_fd = -1;
}

/* Map the page of a peer whose address says it has a doorbell. Without
 * its page, the peer is rung on every post. */
void rdmx__ofi_bell_peer_open(ofi_worker_t *ow, ofi_peer_t *p,
                              const unsigned char *addr)
{
    char name[64];
    void *page = MAP_FAILED;
    int fd;

    /* (only shm names are strings parse_address checked: a flag on any
     * other address is ignored) */
    if (p->bell_tried || ow->ctx->medium != RDMX_TRANSPORT_SHM ||
        !(addr[5] & OFI_ADDR_BELL) || name_pid(addr) == 0)
        return;
    p->bell_tried = 1;
    if (ow->bell_fd < 0) { /* (ours failed or is off: a socket to ring) */
        ow->bell_fd =
            socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (ow->bell_fd < 0) {
            rdmx_warn("ofi %s: cannot ring peers' doorbells (socket: %s): "
                      "they wake on their timers",
                      ow->ctx->prov, strerror(errno));
            return;
        }
    }
    bell_name(name, sizeof(name), name_pid(addr), rdmx_get_le64(addr + 8));
    p->bell_alen = bell_sockaddr(&p->bell_addr, name);
    fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd >= 0) {
        page = mmap(NULL, OFI_BELL_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                    0);
        close(fd);
    }
    if (page == MAP_FAILED) {
        rdmx_debug("ofi %s: peer's doorbell page %s: %s: rung on every post",
                   ow->ctx->prov, name, strerror(errno));
        p->bell_always = 1;
    } else {
        p->bell = page;
    }
    ow->bell_peers++;
}

void rdmx__ofi_bell_peer_close(ofi_worker_t *ow, ofi_peer_t *p)
{
    if (p->bell != NULL)
        munmap(p->bell, OFI_BELL_PAGE);
    if (p->bell != NULL || p->bell_always)
        ow->bell_peers--;
    p->bell = NULL;
    p->bell_always = 0;
}

/* Ring @p if it sleeps (or always, without its page). */
void rdmx__ofi_bell_ring_slow(ofi_worker_t *ow, ofi_peer_t *p)
{
    if (p->bell != NULL) {
        /* A full barrier between the post and the load: a locked
         * read-modify-write of our own word (ThreadSanitizer knows no
         * fences) */
        __atomic_fetch_or(&ow->bell_barrier, 0u, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&p->bell->sleeping, __ATOMIC_SEQ_CST) == 0 ||
            __atomic_exchange_n(&p->bell->sleeping, 0, __ATOMIC_SEQ_CST) == 0)
            return;
    } else if (!p->bell_always) {
        return;
    }
    if (sendto(ow->bell_fd, "", 1, MSG_DONTWAIT,
               (struct sockaddr *)&p->bell_addr, p->bell_alen) == 1 ||
        errno == EAGAIN) { /* (a full queue: it wakes anyway) */
        ow->bell_rings++;
        return;
    }
    if (ow->bell_errors++ == 0)
        rdmx_warn("ofi %s: cannot ring a peer's doorbell (%s): it wakes on "
                  "its timer",
                  ow->ctx->prov, strerror(errno));
}

void rdmx__ofi_bell_ring_all(ofi_worker_t *ow)
{
    rdmx_list_t *e;

    rdmx_list_for_each(e, &ow->peers)
    {
        ofi_peer_t *p = rdmx_container_of(e, ofi_peer_t, link);
        if (p->bell != NULL || p->bell_always)
            rdmx__ofi_bell_ring_slow(ow, p);
    }
}

/* A pass found work: take our flag down, if up (peers stop ringing). */
void rdmx__ofi_bell_awake(ofi_worker_t *ow)
{
    if (__atomic_load_n(&ow->bell->sleeping, __ATOMIC_RELAXED) != 0)
        __atomic_store_n(&ow->bell->sleeping, 0, __ATOMIC_RELAXED);
}

/* arm() of a worker with a doorbell: a call that finds the flag down
 * raises it and asks for one more pass; the next (that pass found
 * nothing) sleeps if the flag is still up. */
rdmx_status_t rdmx__ofi_bell_arm(ofi_worker_t *ow)
{
    struct itimerspec its = {{0, 0}, {0, 0}};
    unsigned char junk[64];
    uint64_t v, ns;

    while (recv(ow->bell_fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
        ow->bell_wakes++;
    /* Sleep only with the flag still up. Down, it was never raised (or a
     * pass found work since), or a peer took it down: that peer posted
     * after the last pass looked (its datagram maybe drained just now).
     * Either way, raise it and look once more. */
    if (__atomic_load_n(&ow->bell->sleeping, __ATOMIC_SEQ_CST) == 0) {
        __atomic_store_n(&ow->bell->sleeping, 1, __ATOMIC_SEQ_CST);
        return RDMX_ERR_BUSY;
    }
    while (read(ow->tfd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
    }
    ns = ow->inflight != 0 ? OFI_BELL_BUSY_NS : OFI_BELL_IDLE_NS;
    its.it_value.tv_sec = (time_t)(ns / 1000000000ull);
    its.it_value.tv_nsec = (long)(ns % 1000000000ull);
    if (timerfd_settime(ow->tfd, 0, &its, NULL) != 0)
        return RDMX_ERR_BUSY;
    return RDMX_OK;
}

/* Remove this user's files of rdmx shm workers whose process is gone: a
 * process killed by a signal it cannot handle leaves its provider region
 * (16 MiB of memory in libfabric 1.17) and its doorbell page behind. */
void rdmx__ofi_shm_sweep(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    unsigned n = 0;
    struct stat st;

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        long pid = shm_file_pid(e->d_name);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 ||
            errno != ESRCH)
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            n++;
    }
    closedir(d);
    if (n != 0)
        rdmx_info("ofi shm: removed %u files of dead processes from /dev/shm",
                  n);
}
