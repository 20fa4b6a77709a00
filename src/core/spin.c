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
 * (mode 0600, only ever used if it is this user's alone), one cache line
 * each, holding the holder's claim (its process id and a claim number; 0:
 * free) and when the holder last confirmed it. Claiming is a
 * compare-and-swap on a free slot's line, releasing a compare-and-swap
 * back to free (only of the same claim); a polling holder confirms its
 * slot every 64 idle passes (a coarse clock read and a store). A thread
 * keeps its own slot's line in its cache, so a claim and a release per
 * wait cost a few nanoseconds when nobody contends. A thread that finds
 * every slot taken (at most every 100 ms per thread) takes over the slots
 * of processes that are gone and those not confirmed for 2 s (a stopped
 * process's); a holder whose slot was taken over learns it at its next
 * confirm and sleeps. Without the object (no /dev/shm, /dev/shm full, or
 * RDMX_SPIN_SLOTS=0) every thread polls, as before.
 *
 * Turns: a waiter that finds every slot taken over shared memory or RDMA
 * takes turns (yields its CPU after each empty pass) instead of sleeping,
 * and asks again after each turn (RDMX_SPIN_AGAIN: not counted as another
 * denial). A claim that finds no slot free also stamps the object's last
 * line ("wanted", at most once per millisecond); for WANTED_NS after it,
 * holders that do not yield take turns too (@slot->turns, set at the
 * claim and each confirm). Before, a holder polled on for its whole
 * polling time while the waiter it served had no CPU: two KV clients and
 * rdmx-kvd's two workers on two CPUs made 17-83 k GETs/s instead of
 * 337-534 k. A server worker that woke on its timer with nothing to do
 * (RDMX_SPIN_IDLE) neither counts nor stamps: a lone client's idle second
 * worker would otherwise make the client and its worker take turns for
 * 10 ms of every 100.
 *
 * Pressure: the slots bound how many threads poll, not whether polling
 * pays. When many more threads want to poll than there are slots (eight
 * clients and two server workers on two CPUs), the holders poll on CPUs
 * that the woken threads they serve are waiting for. So the object's last
 * line also counts claims that found every slot taken: PRESSURE_DENIALS
 * of them within PRESSURE_WINDOW_NS put the host "under pressure" for
 * PRESSURE_HOLD_NS (twice the last time when it comes back within
 * PRESSURE_AGAIN_NS of its end, up to PRESSURE_HOLD_MAX_NS), during which
 * no yielding waiter (a tcp context's: rdmx__context_poll_yields) polls:
 * its claims fail at once, a holder gives its slot back at its next
 * confirm, and it sleeps on its fd, as memcached's threads do. A server
 * worker that only wakes on its timer now and then never gets there.
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
#include <time.h>
#include <unistd.h>

/* Lines in the object: up to SLOTS_MAX - 1 slots, then the pressure. */
#define SLOTS_MAX 256

/* Pressure (see above): this many denied claims within the window... */
#define PRESSURE_DENIALS   8
#define PRESSURE_WINDOW_NS (10 * 1000000ull)
/* ... stop polling on the host for this long; twice as long (up to
 * PRESSURE_HOLD_MAX_NS) each time it comes back within
 * PRESSURE_AGAIN_NS of its end: the crowd is still there. */
#define PRESSURE_HOLD_NS     (100 * 1000000ull)
#define PRESSURE_HOLD_MAX_NS (400 * 1000000ull)
#define PRESSURE_AGAIN_NS    (50 * 1000000ull)

typedef struct {
    uint64_t owner; /* the holder's claim: its process id << 32 | a number
                       of the claim; 0: free */
    uint64_t stamp; /* when the holder last said it still polls (coarse
                       monotonic ns) */
    char pad[48];
} __attribute__((aligned(64))) slot_t;

/* The object's last line. */
typedef struct {
    uint64_t window;  /* when the current window of denials began */
    uint64_t denials; /* in it */
    uint64_t until;   /* no polling before this time (coarse ns) */
    uint64_t hold;    /* the last pressure's length (0: none yet) */
    uint64_t wanted;  /* when a claim last found no slot free (coarse ns;
                         a waiter taking turns renews it as it asks) */
    char pad[24];
} __attribute__((aligned(64))) pressure_t;

_Static_assert(sizeof(pressure_t) == sizeof(slot_t), "one line each");

static struct {
    pthread_once_t once;
    slot_t *slots; /* NULL: no limit */
    unsigned n;
    uint32_t pid;
    uint32_t claims; /* numbers claims (atomic) */
} sp = {.once = PTHREAD_ONCE_INIT};

/* Holders that do not yield take turns (yield their CPU after each empty
 * pass) while a claim found no slot free within this time: two ticks of
 * the coarse clock. */
#define WANTED_NS (10 * 1000000ull)

/* A slot not confirmed for this long is taken over (a stopped process's). */
#define STALE_NS (2000000000ull)

static uint64_t coarse_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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
    /* Every process sizes it alike; the first one's zeros are free slots.
     * Its pages are allocated now: a full /dev/shm must mean no limit,
     * not SIGBUS at the first claim. */
    if ((errno = posix_fallocate(fd, 0, SLOTS_MAX * sizeof(slot_t))) != 0) {
        rdmx_debug("polling slots: posix_fallocate %s: %s; no limit", name,
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
        if (*end != '\0' || v > SLOTS_MAX - 1) {
            rdmx_warn("RDMX_SPIN_SLOTS='%s' ignored: 0 (no limit) .. %d", env,
                      SLOTS_MAX - 1);
        } else if (v == 0) {
            return;
        } else {
            sp.n = (unsigned)v;
        }
    }
    if (sp.n > SLOTS_MAX - 1)
        sp.n = SLOTS_MAX - 1;
    snprintf(name, sizeof(name), "/rdmx-spin-%u", (unsigned)getuid());
    sp.slots = open_slots(name);
}

int rdmx__spin_setup(const char *name, unsigned n)
{
    slot_t *slots;

    pthread_once(&sp.once, spin_init);
    if (n == 0 || n > SLOTS_MAX - 1 || (slots = open_slots(name)) == NULL)
        return -1;
    if (sp.slots != NULL)
        munmap(sp.slots, SLOTS_MAX * sizeof(slot_t));
    sp.slots = slots;
    sp.n = n;
    return 0;
}

/* Take over slots whose processes are gone, or whose holders have not
 * confirmed them for STALE_NS (a stopped process). */
static void sweep(void)
{
    uint64_t now = coarse_ns();

    for (unsigned i = 0; i < sp.n; i++) {
        uint64_t owner = __atomic_load_n(&sp.slots[i].owner, __ATOMIC_ACQUIRE);
        uint64_t stamp = __atomic_load_n(&sp.slots[i].stamp, __ATOMIC_RELAXED);
        pid_t pid = (pid_t)(owner >> 32);
        if (owner == 0)
            continue;
        if ((now > stamp && now - stamp > STALE_NS) ||
            (pid != (pid_t)sp.pid && kill(pid, 0) != 0 && errno == ESRCH))
            __atomic_compare_exchange_n(&sp.slots[i].owner, &owner, 0, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
}

static pressure_t *pressure(void)
{
    return (pressure_t *)&sp.slots[SLOTS_MAX - 1];
}

static int under_pressure(uint64_t now)
{
    return now < __atomic_load_n(&pressure()->until, __ATOMIC_RELAXED);
}

/* Does a holder that does not yield take turns now: did a claim find no
 * slot free within WANTED_NS? */
static int wanted(uint64_t now)
{
    uint64_t t = __atomic_load_n(&pressure()->wanted, __ATOMIC_RELAXED);
    return now - t < WANTED_NS;
}

/* A claim found no slot free: say so to the holders (at most once per
 * millisecond: the line is read by every holder). */
static void want(uint64_t now)
{
    pressure_t *p = pressure();

    if (now - __atomic_load_n(&p->wanted, __ATOMIC_RELAXED) >= 1000000ull)
        __atomic_store_n(&p->wanted, now, __ATOMIC_RELAXED);
}

/* A claim found every slot taken, at @now (coarse ns). */
static void denied(uint64_t now)
{
    pressure_t *p = pressure();
    uint64_t start = __atomic_load_n(&p->window, __ATOMIC_RELAXED);

    if (now - start >= PRESSURE_WINDOW_NS) {
        /* a new window (one of the racing threads opens it) */
        if (__atomic_compare_exchange_n(&p->window, &start, now, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            __atomic_store_n(&p->denials, 1, __ATOMIC_RELAXED);
        return;
    }
    if (__atomic_add_fetch(&p->denials, 1, __ATOMIC_RELAXED) ==
        PRESSURE_DENIALS) {
        uint64_t until = __atomic_load_n(&p->until, __ATOMIC_RELAXED);
        uint64_t hold = __atomic_load_n(&p->hold, __ATOMIC_RELAXED);
        if (now < until)
            return; /* (still on: non-yielding claims are denied too) */
        if (hold == 0 || now - until > PRESSURE_AGAIN_NS)
            hold = PRESSURE_HOLD_NS; /* (a new crowd) */
        else /* (back soon after the last one ended: longer) */
            hold = hold * 2 > PRESSURE_HOLD_MAX_NS ? PRESSURE_HOLD_MAX_NS
                                                   : hold * 2;
        __atomic_store_n(&p->hold, hold, __ATOMIC_RELAXED);
        __atomic_store_n(&p->until, now + hold, __ATOMIC_RELAXED);
    }
}

int rdmx__spin_pressure(void)
{
    pthread_once(&sp.once, spin_init);
    return sp.slots != NULL && under_pressure(coarse_ns());
}

int rdmx__spin_claim(unsigned hint, int flags, rdmx_spin_slot_t *slot)
{
    unsigned i, k;
    uint64_t token;

    slot->index = RDMX_SPIN_NONE;
    slot->yields = flags & RDMX_SPIN_YIELDS;
    slot->turns = 0;
    pthread_once(&sp.once, spin_init);
    if (sp.slots == NULL) {
        slot->index = RDMX_SPIN_UNLIMITED;
        return 1;
    }
    if (slot->yields && under_pressure(coarse_ns()))
        return 0;
    token = (uint64_t)sp.pid << 32 |
            (__atomic_add_fetch(&sp.claims, 1, __ATOMIC_RELAXED) | 1u);
    for (int round = 0; round < 2; round++) {
        for (k = 0; k < sp.n; k++) {
            uint64_t free_v = 0;
            i = (hint + k) % sp.n;
            if (__atomic_load_n(&sp.slots[i].owner, __ATOMIC_RELAXED) == 0 &&
                __atomic_compare_exchange_n(&sp.slots[i].owner, &free_v, token,
                                            0, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED)) {
                uint64_t now = coarse_ns();
                __atomic_store_n(&sp.slots[i].stamp, now, __ATOMIC_RELAXED);
                slot->index = (int)i;
                slot->token = token;
                slot->turns = !slot->yields && wanted(now);
                return 1;
            }
        }
        if (round == 0) {
            uint64_t now = rdmx_now_ns();
            if (rdmx_since(now, last_sweep_ns) < 100000000ull)
                break;
            last_sweep_ns = now;
            sweep();
        }
    }
    /* A waiter taking turns asks again after each turn: one denial per
     * idle spell, so that one idle server worker looking for a slot
     * for its polling time is one denial, not a crowd. */
    if (!(flags & RDMX_SPIN_IDLE)) {
        uint64_t now = coarse_ns();
        if (!(flags & RDMX_SPIN_AGAIN))
            denied(now);
        want(now);
    }
    return 0;
}

int rdmx__spin_confirm(rdmx_spin_slot_t *slot)
{
    uint64_t now;

    if (slot->index < 0)
        return slot->index == RDMX_SPIN_UNLIMITED;
    if (__atomic_load_n(&sp.slots[slot->index].owner, __ATOMIC_RELAXED) !=
        slot->token) {
        slot->index = RDMX_SPIN_NONE; /* taken over: a stale holder */
        return 0;
    }
    now = coarse_ns();
    if (slot->yields && under_pressure(now))
        return 0; /* (still held: the caller's release gives it back) */
    slot->turns = !slot->yields && wanted(now);
    __atomic_store_n(&sp.slots[slot->index].stamp, now, __ATOMIC_RELAXED);
    return 1;
}

void rdmx__spin_release(rdmx_spin_slot_t *slot)
{
    uint64_t token = slot->token;

    /* Only this claim's: a slot taken over meanwhile is someone else's. */
    if (slot->index >= 0)
        __atomic_compare_exchange_n(&sp.slots[slot->index].owner, &token, 0, 0,
                                    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    slot->index = RDMX_SPIN_NONE;
}
