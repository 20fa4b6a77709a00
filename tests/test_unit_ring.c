/*
 * A request ring's records written and read back in one process
 * (src/rpc/ring.c, docs/RPC_RINGS.md): every data length that fits a
 * slot, as data alone and split into data and body, requests with and
 * without a deadline and aux bytes, and answers, three times round the 64
 * slots. Each record reads back with the header and the bytes written;
 * the slot's bytes past the record stay as they were (the writer stores
 * its lines out of order, from a staged copy: none may spill); a record
 * is not seen before its sequence word is written; the reader's sleeping
 * word is what the writer reports, and a written record is pending for a
 * sleeper. The other side of a ring is another process in every other
 * test; here both ends are this one, so what is checked is the bytes.
 *
 * Then the sleeping handshake raced (docs/RPC_RINGS.md, "Sleeping"): a
 * writer thread writes a record whenever the reader took the last one; a
 * reader thread goes to sleep whenever its ring is empty (marks it, makes
 * the heavy fence, looks once more, then waits on a futex for the
 * writer's wake, at most 200 ms). A wait that ends by its timeout with a
 * record in the ring is a lost wake-up: none in 200,000 records with the
 * writer publishing by a release store and the reader's heavy fence (where
 * this kernel has membarrier), nor with both sides fenced as without it.
 * (The reader waits a varying few hundred nanoseconds before it marks its
 * ring, so that the writer's store and load fall across its mark and look:
 * with the release store and no heavy fence, a wake-up was lost within
 * 60,000-150,000 records.) A third writer writes bursts of one to four
 * records, a varying pause between them, with the fence deferred to the
 * burst's end (rdmx__ring_settle), as a server writes the answers of one
 * pass: none lost either. (The window is a store's drain, so a broken
 * fence shows rarely here; what the settle must answer is checked first,
 * in one thread: a reader asleep before a deferred record is reported at
 * once, one that falls asleep after it at the burst's end.)
 */
#include "harness.h"
#include "rpc/ring.h"

#include "util/peer_fence.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define UNTOUCHED 0xee

static unsigned char *slot_at(unsigned char *base, uint64_t seq)
{
    return base + RDMX_RING_HEAD + (seq % RDMX_RING_SLOTS) * RDMX_RING_STRIDE;
}

/* Write one record of @dlen data bytes (@split of them as data, the rest
 * as body) and read it back. */
static void round_trip(rdmx_ring_t *wr, rdmx_ring_t *rd, unsigned kind,
                       size_t dlen, size_t split, uint32_t deadline_us,
                       uint32_t aux)
{
    unsigned char data[RDMX_RING_STRIDE], rec[RDMX_RING_STRIDE];
    unsigned char *s = slot_at(wr->base, wr->next);
    rdmx_rpc_hdr_t h;
    rdmx_rpc_msg_t m;
    uint32_t after = 0;
    char why[160];
    size_t end;
    int r;

    CHECK(dlen >= aux && split <= dlen);
    rdmx__rpc_hdr(&h, (rdmx_rpc_kind_t)kind,
                  kind == RDMX_RPC_MSG_REQUEST ? 0x1234u : 0x99u,
                  0x5000000000ull + wr->next);
    h.payload = (uint32_t)(dlen - aux);
    h.aux = aux;
    h.deadline_us = deadline_us;
    for (size_t i = 0; i < dlen; i++)
        data[i] = (unsigned char)(wr->next * 31 + i * 7 + 1);
    /* the slot as a reader finds it before the write: old bytes, and a
     * sequence word that is not the next one */
    memset(s, UNTOUCHED, RDMX_RING_STRIDE);
    CHECK(rdmx__ring_read(rd, kind, &m, rec, &after, why, sizeof(why)) == 0);

    CHECK(rdmx__ring_write(wr, &h, 7, data, split, data + split,
                           dlen - split) == 0);
    /* the record's end: sequence, fixed part, header, data */
    end =
        8 + RDMX_RPC_RING_REC_FIXED + (size_t)s[8] + (size_t)s[9] * 256 + dlen;
    CHECKF(end <= RDMX_RING_STRIDE, "record of %zu bytes", end);
    for (size_t i = end; i < RDMX_RING_STRIDE; i++)
        CHECKF(s[i] == UNTOUCHED,
               "%zu data bytes (%zu as data): slot byte %zu written past "
               "the record's end %zu",
               dlen, split, i, end);

    r = rdmx__ring_read(rd, kind, &m, rec, &after, why, sizeof(why));
    CHECKF(r == 1, "%zu data bytes: read gave %d (%s)", dlen, r,
           r < 0 ? why : "not written");
    CHECK(m.h.kind == kind && m.h.id == h.id);
    CHECK(m.h.handler == (kind == RDMX_RPC_MSG_REQUEST ? h.handler : 0));
    CHECK(m.h.payload == h.payload && m.h.aux == aux);
    CHECK(m.h.deadline_us == (kind == RDMX_RPC_MSG_REQUEST ? deadline_us : 0));
    CHECK(after == 7 && m.ring == 1);
    CHECKF(m.length == dlen, "%zu data bytes read as %zu", dlen, m.length);
    CHECKF(memcmp(m.data, data, dlen) == 0,
           "%zu data bytes (%zu as data): not the bytes written", dlen, split);
    rdmx__ring_consume(rd);
    /* (the next slot: nothing written there yet) */
    CHECK(rdmx__ring_read(rd, kind, &m, rec, &after, why, sizeof(why)) == 0);
}

/* --- the sleeping handshake, raced -----------------------------------------
 */

#define RACE_RECORDS 200000u
#define RACE_JITTER  2048u

enum { RACE_FENCED, RACE_HEAVY, RACE_DEFERRED };
static const char *const race_name[] = {
    "both fenced", "release store, heavy fence", "bursts, one fence each"};

typedef struct {
    rdmx_ring_t wr, rd;
    int mode;       /* RACE_* */
    int heavy;      /* the reader makes the heavy fence */
    uint32_t wake;  /* the reader's futex: the writer sets it to 1 */
    uint64_t taken; /* records the reader has consumed */
    unsigned sleeps, woken, lost, found;
} race_t;

static void futex_wake(uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* 0 when woken (or the word was no longer 0), -1 at the timeout. */
static int futex_wait(uint32_t *w, long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    long rc = syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, 0u, &ts, NULL, 0);

    return rc != 0 && errno == ETIMEDOUT ? -1 : 0;
}

static void race_wake(race_t *x)
{
    __atomic_store_n(&x->wake, 1u, __ATOMIC_RELEASE);
    futex_wake(&x->wake);
}

/* Bursts of 1-4 records with the fence deferred to each burst's end, a
 * pause of a varying few hundred nanoseconds before each record, so that
 * the reader, which goes to sleep whenever the ring is empty, falls
 * asleep within bursts. */
static void race_write_bursts(race_t *x)
{
    unsigned char b[8] = {7};
    unsigned jitter = 7;
    rdmx_rpc_hdr_t h;
    uint64_t i = 1;

    while (i <= RACE_RECORDS) {
        uint64_t end = i + (i % 4);

        if (end > RACE_RECORDS)
            end = RACE_RECORDS;
        x->wr.defer = 1;
        for (; i <= end; i++) {
            jitter = jitter * 1103515245u + 12345u;
            for (volatile unsigned k = (jitter >> 16) % RACE_JITTER; k > 0; k--)
                ;
            rdmx__rpc_hdr(&h, RDMX_RPC_MSG_RESPONSE, 0, i);
            h.payload = sizeof(b);
            if (rdmx__ring_write(&x->wr, &h, 0, b, sizeof(b), NULL, 0))
                race_wake(x);
        }
        x->wr.defer = 0;
        if (rdmx__ring_settle(&x->wr))
            race_wake(x);
        while (__atomic_load_n(&x->taken, __ATOMIC_ACQUIRE) < end &&
               __atomic_load_n(&x->lost, __ATOMIC_RELAXED) == 0)
            ;
        if (x->lost != 0)
            return;
    }
}

static void *race_writer(void *arg)
{
    race_t *x = arg;
    unsigned char b[8] = {7};
    rdmx_rpc_hdr_t h;

    if (x->mode == RACE_DEFERRED) {
        race_write_bursts(x);
        return NULL;
    }
    for (uint64_t i = 1; i <= RACE_RECORDS; i++) {
        rdmx__rpc_hdr(&h, RDMX_RPC_MSG_RESPONSE, 0, i);
        h.payload = sizeof(b);
        if (rdmx__ring_write(&x->wr, &h, 0, b, sizeof(b), NULL, 0))
            race_wake(x);
        while (__atomic_load_n(&x->taken, __ATOMIC_ACQUIRE) < i)
            ;
    }
    return NULL;
}

static void *race_reader(void *arg)
{
    race_t *x = arg;
    unsigned char rec[RDMX_RING_STRIDE];
    rdmx_rpc_msg_t m;
    uint32_t after;
    char why[160];
    unsigned jitter = 1;

    while (x->taken < RACE_RECORDS && x->lost == 0) {
        int r = rdmx__ring_read(&x->rd, RDMX_RPC_MSG_RESPONSE, &m, rec, &after,
                                why, sizeof(why));
        CHECKF(r >= 0, "race: record unreadable: %s", why);
        if (r == 1) {
            rdmx__ring_consume(&x->rd);
            __atomic_store_n(&x->taken, x->taken + 1, __ATOMIC_RELEASE);
            continue;
        }
        /* empty: to sleep, as a worker does (core/worker.c, pollers_doze),
         * after from none to a few hundred nanoseconds, so that the
         * writer, which writes as soon as it sees the last record taken,
         * writes anywhere in the way to sleep, or in the sleep */
        jitter = jitter * 1103515245u + 12345u;
        for (volatile unsigned k = (jitter >> 16) % RACE_JITTER; k > 0; k--)
            ;
        __atomic_store_n(&x->wake, 0u, __ATOMIC_RELAXED);
        rdmx__ring_sleeping(&x->rd, 1);
        if (x->heavy)
            CHECK(rdmx__peer_fence_heavy() == 0);
        if (rdmx__ring_pending(&x->rd, 0)) {
            x->found++;
        } else {
            x->sleeps++;
            if (futex_wait(&x->wake, 200L * TH_SLOW) != 0 &&
                rdmx__ring_pending(&x->rd, 0))
                __atomic_store_n(&x->lost, x->lost + 1, __ATOMIC_RELAXED);
            else
                x->woken++;
        }
        rdmx__ring_sleeping(&x->rd, 0);
    }
    return NULL;
}

/* RACE_HEAVY: the writer publishes by a release store and the reader
 * makes the heavy fence (where this process is ready for it); else both
 * sides use sequentially consistent operations, the writer's fence once
 * per record (RACE_FENCED) or once per burst (RACE_DEFERRED). */
static void race(int mode)
{
    const int heavy = mode == RACE_HEAVY;
    unsigned char *base = aligned_alloc(64, RDMX_RING_BYTES);
    race_t *x = calloc(1, sizeof(*x));
    pthread_t tw, tr;

    CHECK(base != NULL && x != NULL);
    memset(base, 0, RDMX_RING_BYTES);
    x->mode = mode;
    x->heavy = heavy;
    x->wr = (rdmx_ring_t){.base = base, .next = 1, .lean = heavy};
    x->rd = x->wr;
    /* (the reader's word: it fences, so the writer may not) */
    __atomic_store_n((uint32_t *)(base + RDMX_RING_FENCES), (uint32_t)heavy,
                     __ATOMIC_RELAXED);
    CHECK(pthread_create(&tr, NULL, race_reader, x) == 0);
    CHECK(pthread_create(&tw, NULL, race_writer, x) == 0);
    CHECK(pthread_join(tr, NULL) == 0);
    if (x->lost != 0) { /* (the writer waits for a record no one takes) */
        th_log("race (%s): a lost wake-up after %llu records", race_name[mode],
               (unsigned long long)x->taken);
        CHECKF(0, "a sleeping reader missed a record and its wake-up");
    }
    CHECK(pthread_join(tw, NULL) == 0);
    th_log("race (%s): %u records, %u found at the last look, %u sleeps "
           "woken by the writer, 0 lost",
           race_name[mode], RACE_RECORDS, x->found, x->woken);
    /* (the race happened: the reader went to sleep often; with the heavy
     * fence, which takes microseconds, the record is mostly there at the
     * last look) */
    CHECKF(x->found + x->sleeps > RACE_RECORDS / 4,
           "race: %u records found at the last look, %u sleeps: the "
           "handshake was hardly raced",
           x->found, x->sleeps);
    free(x);
    free(base);
}

int main(void)
{
    unsigned char *base = aligned_alloc(64, RDMX_RING_BYTES);
    rdmx_ring_t wr, rd;
    unsigned records = 0;

    CHECK(base != NULL);
    memset(base, 0, RDMX_RING_BYTES);
    wr = (rdmx_ring_t){.base = base, .next = 1};
    rd = wr;

    /* Requests: every length that fits (deadline and aux make the header
     * 20 and 24 bytes, the longest), then answers, until three times
     * round the ring. */
    while (records < 3 * RDMX_RING_SLOTS) {
        for (size_t dlen = 0; rdmx__ring_fits(dlen); dlen++) {
            uint32_t aux = dlen >= 40 && dlen % 3 == 0 ? 40 : 0;
            round_trip(&wr, &rd, RDMX_RPC_MSG_REQUEST, dlen, dlen, 0, 0);
            round_trip(&wr, &rd, RDMX_RPC_MSG_REQUEST, dlen, dlen / 3,
                       1000 + (uint32_t)dlen, aux);
            round_trip(&wr, &rd, RDMX_RPC_MSG_RESPONSE, dlen, dlen - dlen / 4,
                       0, 0);
            records += 3;
        }
    }

    /* A sleeping reader: the writer says so, and the record waits for it. */
    rdmx__ring_sleeping(&rd, 1);
    CHECK(rdmx__ring_pending(&rd, 0) == 0);
    {
        rdmx_rpc_hdr_t h;
        unsigned char b[64] = {1, 2, 3};

        rdmx__rpc_hdr(&h, RDMX_RPC_MSG_RESPONSE, 0, 1);
        h.payload = sizeof(b);
        CHECK(rdmx__ring_write(&wr, &h, 0, b, sizeof(b), NULL, 0) == 1);
    }
    CHECK(rdmx__ring_pending(&rd, 0) == 1);
    rdmx__ring_sleeping(&rd, 0);
    CHECK(rdmx__ring_read(&rd, RDMX_RPC_MSG_RESPONSE, &(rdmx_rpc_msg_t){0},
                          (unsigned char[RDMX_RING_STRIDE]){0}, &(uint32_t){0},
                          NULL, 0) == 1);
    rdmx__ring_consume(&rd);

    /* A burst with its fence deferred (rdmx__ring_settle): a reader asleep
     * before a record is reported by the write; one awake then and asleep
     * before the burst's end, by the settle; nothing owed, nothing said. */
    {
        rdmx_rpc_hdr_t h;
        unsigned char b[8] = {4};

        rdmx__rpc_hdr(&h, RDMX_RPC_MSG_RESPONSE, 0, 2);
        h.payload = sizeof(b);
        wr.defer = 1;
        CHECK(rdmx__ring_write(&wr, &h, 0, b, sizeof(b), NULL, 0) == 0);
        CHECK(wr.owed == 1);
        rdmx__ring_sleeping(&rd, 1); /* asleep after the write's look */
        wr.defer = 0;
        CHECK(rdmx__ring_settle(&wr) == 1);
        CHECK(rdmx__ring_settle(&wr) == 0); /* (said once) */
        wr.defer = 1;
        CHECK(rdmx__ring_write(&wr, &h, 0, b, sizeof(b), NULL, 0) == 1);
        CHECK(wr.owed == 0);
        wr.defer = 0;
        CHECK(rdmx__ring_settle(&wr) == 0);
        rdmx__ring_sleeping(&rd, 0);
        wr.defer = 1;
        CHECK(rdmx__ring_write(&wr, &h, 0, b, sizeof(b), NULL, 0) == 0);
        wr.defer = 0;
        CHECK(rdmx__ring_settle(&wr) == 0); /* (awake all along) */
        CHECK(rdmx__ring_pending(&rd, 0) == 1);
    }
    free(base);
    th_log("ok: %u records, data of 0-%zu bytes", records,
           (size_t)(RDMX_RING_RECORD_MAX - RDMX_RPC_HDR_MAX));

    if (rdmx__peer_fence_ready())
        race(RACE_HEAVY);
    else
        th_log("race: no membarrier here; the fenced handshake only");
    race(RACE_FENCED);
    race(RACE_DEFERRED);
    return 0;
}
