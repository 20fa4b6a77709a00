/*
 * Polling slots: how many rdmx threads on this host may poll at once
 * (docs/CORE.md, "Waiting: poll, then sleep").
 *
 * A thread that waits polls its worker for a while before it sleeps, which
 * is what makes a round trip over shared memory or loopback fast, as long
 * as every polling thread has a CPU. When more threads poll than there are
 * CPUs, a polling thread holds a CPU that the thread it waits for needs. So
 * a thread polls only while it holds one of a fixed number of slots (one
 * per online CPU) shared by every rdmx process of the user on the host;
 * a thread that finds them all taken sleeps on its worker's fd at once, as
 * memcached's threads do.
 *
 * The slots are a small POSIX shared-memory object, "/rdmx-spin-UID"
 * (mode 0600), one cache line each, holding the owning process's id (0:
 * free). Claiming is a compare-and-swap on a free slot's line, releasing a
 * store; a thread keeps its own slot's line in its cache, so a claim and
 * a release per wait cost a few nanoseconds when nobody contends. A slot
 * whose process is gone (killed while it held one) is taken over by the
 * next thread that finds every slot taken, at most every 100 ms per
 * thread. Without the object (no /dev/shm, or RDMX_SPIN_SLOTS=0) every
 * thread polls, as before.
 */
#include "core/internal.h"

#include "util/time.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOTS_MAX 256

typedef struct {
    uint32_t owner; /* process id of the holder; 0: free */
    char pad[60];
} __attribute__((aligned(64))) slot_t;

static struct {
    pthread_once_t once;
    slot_t *slots; /* NULL: no limit */
    unsigned n;
    uint32_t pid;
} sp = {.once = PTHREAD_ONCE_INIT};

/* The last time this thread looked for slots of processes that are gone. */
static __thread uint64_t last_sweep_ns
    __attribute__((tls_model("initial-exec")));

static void after_fork(void)
{
    sp.pid = (uint32_t)getpid();
}

/* Map the slots object @name (made if absent), or NULL. */
static slot_t *open_slots(const char *name)
{
    struct stat st;
    void *p;
    int fd;

    fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        rdmx_debug("polling slots: shm_open %s: %s; no limit", name,
                   strerror(errno));
        return NULL;
    }
    /* Only an object of this user's, closed to others: another user could
     * have made one under this name first. */
    if (fstat(fd, &st) != 0 || st.st_uid != getuid() ||
        (st.st_mode & 077) != 0) {
        rdmx_debug("polling slots: %s is not this user's alone; no limit",
                   name);
        close(fd);
        return NULL;
    }
    /* Every process sizes it alike; the first one's zeros are free slots. */
    if (ftruncate(fd, SLOTS_MAX * sizeof(slot_t)) != 0) {
        rdmx_debug("polling slots: ftruncate %s: %s; no limit", name,
                   strerror(errno));
        close(fd);
        return NULL;
    }
    p = mmap(NULL, SLOTS_MAX * sizeof(slot_t), PROT_READ | PROT_WRITE,
             MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        rdmx_debug("polling slots: mmap %s: %s; no limit", name,
                   strerror(errno));
        return NULL;
    }
    return p;
}

static void spin_init(void)
{
    const char *env = getenv("RDMX_SPIN_SLOTS");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    char name[64];

    sp.pid = (uint32_t)getpid();
    pthread_atfork(NULL, NULL, after_fork);
    sp.n = ncpu > 0 ? (unsigned)ncpu : 1;
    if (env != NULL && *env != '\0') {
        char *end;
        unsigned long v = strtoul(env, &end, 10);
        if (*end != '\0' || v > SLOTS_MAX) {
            rdmx_warn("RDMX_SPIN_SLOTS='%s' ignored: 0 (no limit) .. %d", env,
                      SLOTS_MAX);
        } else if (v == 0) {
            return;
        } else {
            sp.n = (unsigned)v;
        }
    }
    if (sp.n > SLOTS_MAX)
        sp.n = SLOTS_MAX;
    snprintf(name, sizeof(name), "/rdmx-spin-%u", (unsigned)getuid());
    sp.slots = open_slots(name);
}

int rdmx__spin_setup(const char *name, unsigned n)
{
    slot_t *slots;

    pthread_once(&sp.once, spin_init);
    if (n == 0 || n > SLOTS_MAX || (slots = open_slots(name)) == NULL)
        return -1;
    if (sp.slots != NULL)
        munmap(sp.slots, SLOTS_MAX * sizeof(slot_t));
    sp.slots = slots;
    sp.n = n;
    return 0;
}

/* Take over slots whose processes are gone. */
static void sweep(void)
{
    for (unsigned i = 0; i < sp.n; i++) {
        uint32_t owner = __atomic_load_n(&sp.slots[i].owner, __ATOMIC_RELAXED);
        if (owner != 0 && owner != sp.pid && kill((pid_t)owner, 0) != 0 &&
            errno == ESRCH)
            __atomic_compare_exchange_n(&sp.slots[i].owner, &owner, 0, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
}

int rdmx__spin_claim(unsigned hint)
{
    unsigned i, k;

    pthread_once(&sp.once, spin_init);
    if (sp.slots == NULL)
        return RDMX_SPIN_UNLIMITED;
    for (int round = 0; round < 2; round++) {
        for (k = 0; k < sp.n; k++) {
            uint32_t free_v = 0;
            i = (hint + k) % sp.n;
            if (__atomic_load_n(&sp.slots[i].owner, __ATOMIC_RELAXED) == 0 &&
                __atomic_compare_exchange_n(&sp.slots[i].owner, &free_v, sp.pid,
                                            0, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED))
                return (int)i;
        }
        if (round == 0) {
            uint64_t now = rdmx_now_ns();
            if (now - last_sweep_ns < 100000000ull)
                break;
            last_sweep_ns = now;
            sweep();
        }
    }
    return RDMX_SPIN_NONE;
}

void rdmx__spin_release(int slot)
{
    if (slot >= 0)
        __atomic_store_n(&sp.slots[slot].owner, 0, __ATOMIC_RELEASE);
}
