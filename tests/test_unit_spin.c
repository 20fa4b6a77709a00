/*
 * Polling slots (src/core/spin.c), on a private set of slots: no more
 * claims succeed than there are slots, a released slot is claimed again,
 * slots held by a live process stay its own while those of a process that
 * died holding them are taken over, a stopped process's are taken over
 * once unconfirmed for 2 s (its late release and confirm then touch the
 * new holder's claim not at all), threads claiming and releasing at
 * once never share a slot nor hold more than there are, and many claims
 * that find every slot taken put the host under pressure for a while, in
 * which yielding claims get no slot and yielding holders stop polling
 * while the others go on; holders that do not yield take turns for 10 ms
 * after a claim found no slot free; claims repeated in one idle spell
 * (RDMX_SPIN_AGAIN) are one denial, not a crowd, and those of an idle
 * server worker (RDMX_SPIN_IDLE) none.
 */
#include "harness.h"
#include "core/internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NSLOTS  3
#define THREADS 6
#define ROUNDS  200000

static int holders;         /* slots held now, by the threads below */
static int most;            /* the most held at once */
static int in_slot[NSLOTS]; /* threads inside each slot */
static int shared_seen;     /* a slot held by two threads at once */

static void *claimer(void *arg)
{
    unsigned hint = (unsigned)(uintptr_t)arg;
    rdmx_spin_slot_t s;

    for (int i = 0; i < ROUNDS; i++) {
        if (!rdmx__spin_claim(hint, 0, &s))
            continue;
        CHECKF(s.index >= 0 && s.index < NSLOTS, "claimed %d", s.index);
        int h = __atomic_add_fetch(&holders, 1, __ATOMIC_SEQ_CST);
        int m = __atomic_load_n(&most, __ATOMIC_RELAXED);
        while (h > m &&
               !__atomic_compare_exchange_n(&most, &m, h, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED))
            ;
        if (__atomic_add_fetch(&in_slot[s.index], 1, __ATOMIC_SEQ_CST) != 1)
            __atomic_store_n(&shared_seen, 1, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&in_slot[s.index], 1, __ATOMIC_SEQ_CST);
        __atomic_sub_fetch(&holders, 1, __ATOMIC_SEQ_CST);
        rdmx__spin_release(&s);
    }
    return NULL;
}

/* A child process that claims every slot, says so, then confirms them until
 * it is killed (@stay) or exits without giving them back. */
static pid_t child_claiming_all(int stay)
{
    int pfd[2];
    char c = 0;
    pid_t pid;

    CHECK(pipe(pfd) == 0);
    pid = fork();
    if (pid == 0) {
        rdmx_spin_slot_t s[NSLOTS];
        int n = 0;
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
        for (int i = 0; i < NSLOTS; i++)
            n += rdmx__spin_claim((unsigned)i, 0, &s[i]) && s[i].index >= 0;
        c = (char)n;
        if (write(pfd[1], &c, 1) != 1)
            _exit(2);
        /* A staying child confirms its slots as a live poller does, so
         * that they stay its own however long the parent is held up
         * (unconfirmed ones may be taken over after 2 s). */
        while (stay) {
            for (int i = 0; i < NSLOTS; i++)
                rdmx__spin_confirm(&s[i]);
            usleep(100 * 1000);
        }
        _exit(0);
    }
    CHECK(pid > 0);
    CHECK(read(pfd[0], &c, 1) == 1);
    CHECKF(c == NSLOTS, "the child claimed %d of %d free slots", c, NSLOTS);
    close(pfd[0]);
    close(pfd[1]);
    return pid;
}

/* Wait (up to 3 s) until the host is not under pressure; the time it
 * took, in ms. */
static uint64_t coarse_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Milliseconds from @since (coarse_ms, taken right before the claims that
 * set the pressure) until the pressure ends, by the clock the slots use:
 * counting naps instead would miss what a loaded machine oversleeps. */
static int pressure_ends(uint64_t since)
{
    while (rdmx__spin_pressure() && coarse_ms() - since < 3000)
        usleep(2 * 1000);
    CHECKF(!rdmx__spin_pressure(), "still under pressure after 3 s");
    return (int)(coarse_ms() - since);
}

/* Every slot can be claimed (into @s, or given back at once if NULL). */
static void claim_all(const char *whose, rdmx_spin_slot_t *s)
{
    rdmx_spin_slot_t mine[NSLOTS];

    if (s == NULL)
        s = mine;
    for (int i = 0; i < NSLOTS; i++)
        CHECKF(rdmx__spin_claim(0, 0, &s[i]) && s[i].index >= 0,
               "slot %d %s not taken over", i, whose);
    if (s == mine)
        for (int i = 0; i < NSLOTS; i++)
            rdmx__spin_release(&s[i]);
}

int main(void)
{
    char name[64];
    rdmx_spin_slot_t s[NSLOTS], extra, again[NSLOTS];
    pthread_t t[THREADS];
    int st;
    pid_t pid;

    th_init("unit_spin", 60);
    snprintf(name, sizeof(name), "/rdmx-spin-test-%d", (int)getpid());
    shm_unlink(name);
    CHECK(rdmx__spin_setup(name, NSLOTS) == 0);
    shm_unlink(name); /* (mapped here and in children: nothing left over) */

    /* As many claims as slots, each a different slot; then none. */
    for (int i = 0; i < NSLOTS; i++) {
        CHECKF(rdmx__spin_claim(0, 0, &s[i]) && s[i].index >= 0 &&
                   s[i].index < NSLOTS,
               "claim %d: %d", i, s[i].index);
        for (int j = 0; j < i; j++)
            CHECKF(s[i].index != s[j].index, "claims %d and %d share slot %d",
                   j, i, s[i].index);
    }
    CHECKF(!rdmx__spin_claim(0, 0, &extra) && extra.index == RDMX_SPIN_NONE,
           "a claim beyond %d slots: %d", NSLOTS, extra.index);
    CHECK(rdmx__spin_confirm(&s[0]));
    /* A released slot is the one the next claim gets. */
    int freed = s[1].index;
    rdmx__spin_release(&s[1]);
    CHECK(rdmx__spin_claim(0, 0, &s[1]) && s[1].index == freed);
    for (int i = 0; i < NSLOTS; i++)
        rdmx__spin_release(&s[i]);

    /* A live process's slots stay its own, even past the sweep's pause. */
    pid = child_claiming_all(1);
    usleep(150 * 1000);
    CHECKF(!rdmx__spin_claim(0, 0, &extra), "took a slot of a live process");
    kill(pid, SIGKILL);
    CHECK(waitpid(pid, &st, 0) == pid);
    /* ... and are taken over once it is gone (the sweep runs at most
     * every 100 ms per thread). */
    usleep(150 * 1000);
    claim_all("of a killed process", NULL);

    /* A child that exits holding them: the same. */
    pid = child_claiming_all(0);
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    usleep(150 * 1000);
    claim_all("of an exited process", NULL);

    /* Slots this process holds but does not confirm for 2 s (as a stopped
     * process's): taken over by the next claim that finds none free. */
    claim_all("", s);
    CHECK(!rdmx__spin_claim(0, 0, &extra));
    usleep(2300 * 1000);
    claim_all("unconfirmed for 2.3 s", again);
    /* The old claims learn they lost their slots; giving them back now
     * leaves the new holders' alone. */
    for (int i = 0; i < NSLOTS; i++) {
        if (i % 2 == 0) /* (a release without a confirm first, too) */
            CHECKF(!rdmx__spin_confirm(&s[i]), "old claim %d still confirmed",
                   i);
        rdmx__spin_release(&s[i]);
    }
    CHECKF(!rdmx__spin_claim(0, 0, &extra),
           "an old claim's release freed a new holder's slot");
    for (int i = 0; i < NSLOTS; i++) {
        CHECK(rdmx__spin_confirm(&again[i]));
        rdmx__spin_release(&again[i]);
    }

    /* Threads claiming and releasing at once. */
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, claimer, (void *)(uintptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECKF(most <= NSLOTS && most >= 1, "%d slots held at once (of %d)", most,
           NSLOTS);
    CHECK(!shared_seen);
    CHECK(holders == 0);
    pressure_ends(coarse_ms()); /* (the threads' denied claims made some) */
    usleep(100 * 1000);         /* (and the next one is a new crowd's) */
    claim_all("after the threads", NULL); /* all free again */

    /* Pressure: 8 claims within 10 ms that find every slot taken. */
    rdmx_spin_slot_t y;
    CHECK(rdmx__spin_claim(0, 1, &y) && y.index >= 0); /* a yielding holder */
    for (int i = 0; i < NSLOTS - 1; i++)
        CHECK(rdmx__spin_claim(0, 0, &s[i]) && s[i].index >= 0);
    usleep(20 * 1000); /* (a fresh window) */
    /* Holders that do not yield take turns from a claim that found no
     * slot free until 10 ms after the last such claim. */
    CHECKF(rdmx__spin_confirm(&s[0]) && !s[0].turns,
           "a holder takes turns though no claim was denied for 20 ms");
    /* A server worker that woke on its timer with nothing to do. */
    for (int i = 0; i < 20; i++)
        CHECK(!rdmx__spin_claim(0, RDMX_SPIN_IDLE, &extra));
    CHECKF(rdmx__spin_confirm(&s[0]) && !s[0].turns,
           "an idle worker's denied claim makes holders take turns");
    CHECKF(!rdmx__spin_pressure(), "idle workers' claims made pressure");
    /* A waiter taking turns asks after each turn: not a crowd. */
    CHECK(!rdmx__spin_claim(0, 0, &extra));
    CHECKF(rdmx__spin_confirm(&s[0]) && s[0].turns,
           "a holder does not take turns after a denied claim");
    for (int i = 0; i < 50; i++)
        CHECK(!rdmx__spin_claim(0, RDMX_SPIN_AGAIN, &extra));
    CHECKF(!rdmx__spin_pressure(), "pressure after one idle spell's 51 claims");
    for (int i = 0; i < 6; i++)
        CHECK(!rdmx__spin_claim(0, 1, &extra));
    CHECKF(!rdmx__spin_pressure(), "pressure after 7 denied claims");
    CHECK(rdmx__spin_confirm(&y) && !y.turns); /* (it yields instead) */
    uint64_t t0 = coarse_ms();
    for (int i = 0; i < 16; i++) /* (at most one new window among them) */
        CHECK(!rdmx__spin_claim(0, i % 2, &extra));
    CHECKF(rdmx__spin_pressure(), "no pressure after 23 denied claims");
    /* A yielding holder stops polling; its slot stays held until it gives
     * it back; the others poll on. */
    CHECKF(!rdmx__spin_confirm(&y), "a yielding holder polls under pressure");
    CHECK(rdmx__spin_confirm(&s[0]));
    CHECKF(s[0].turns, "a holder that does not yield does not take turns "
                       "while claims are denied");
    CHECK(!rdmx__spin_claim(0, 0, &extra));
    freed = y.index;
    rdmx__spin_release(&y);
    /* A free slot: a yielding claim does not take it, another does. */
    CHECKF(!rdmx__spin_claim(0, 1, &extra) && extra.index == RDMX_SPIN_NONE,
           "a yielding claim took slot %d under pressure", extra.index);
    CHECK(rdmx__spin_claim(0, 0, &extra) && extra.index == freed &&
          extra.turns);
    rdmx__spin_release(&extra);
    /* It ends 100 ms after it was set; the holders poll without turns
     * (no claim was denied since). */
    int ms = pressure_ends(t0);
    CHECKF(ms >= 80 && ms <= 200, "it lasted %d ms (100 expected)", ms);
    CHECKF(rdmx__spin_confirm(&s[0]) && !s[0].turns,
           "a holder still takes turns after the pressure");
    CHECK(rdmx__spin_claim(0, 1, &y) && y.index == freed);
    CHECK(rdmx__spin_confirm(&y));
    /* Back at once (within 50 ms of its end): twice as long. */
    t0 = coarse_ms();
    for (int i = 0; i < 16; i++)
        CHECK(!rdmx__spin_claim(0, 0, &extra));
    CHECKF(rdmx__spin_pressure(), "no pressure after 16 more denials");
    ms = pressure_ends(t0);
    CHECKF(ms >= 170 && ms <= 400,
           "it came back at once and lasted %d ms "
           "(200 expected)",
           ms);
    /* A crowd that comes back later is a new one: 100 ms again. */
    usleep(100 * 1000);
    t0 = coarse_ms();
    for (int i = 0; i < 16; i++)
        CHECK(!rdmx__spin_claim(0, 0, &extra));
    CHECK(rdmx__spin_pressure());
    ms = pressure_ends(t0);
    CHECKF(ms >= 80 && ms <= 175,
           "a new crowd's lasted %d ms (100 "
           "expected)",
           ms);
    rdmx__spin_release(&y);
    for (int i = 0; i < NSLOTS - 1; i++)
        rdmx__spin_release(&s[i]);

    th_log("ok: %d slots, at most %d held at once by %d threads", NSLOTS, most,
           THREADS);
    return 0;
}
