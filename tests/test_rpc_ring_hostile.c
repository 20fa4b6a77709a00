/*
 * rpc_ring_hostile: a client that writes what it likes into the request
 * ring its server gave it (docs/RPC_RINGS.md, docs/SECURITY.md "Request
 * rings") gets errors and stalls only itself; the server lives, counts
 * every bad record, and serves everyone else.
 *
 * The test speaks the RPC protocol itself on a core endpoint (its own
 * handlers for RPC messages, tests/raw_rpc.c, as rpc_malformed),
 * asks for rings in HELLO, maps the region the RING message describes and
 * writes records byte by byte. An honest channel on another worker checks
 * the server between steps. Over shared memory, proven:
 *  - a well-formed record (echo, 5 bytes) is answered in the answers ring,
 *    byte-exact: the raw writer is a real one.
 *  - bad records, each published by its sequence word: a header length
 *    past the slot, a data length past the slot, header bytes of version
 *    0, a RESPONSE where a REQUEST belongs, and 16 seeded random records
 *    (their first header byte forced to an unknown version): each is
 *    taken off the ring, the server's malformed counter grows by exactly
 *    their number (20), and every one that is not a RESPONSE gets an
 *    ERROR with RDMX_ERR_PROTO by message; after them a well-formed record
 *    is served again.
 *  - a record whose `after` says 1,000,000 messages came before it is
 *    never run: the raw connection's ring stalls (its PING by message is
 *    still answered), and the honest channel's calls go on.
 *  - a record rewritten byte by byte by another thread while the server
 *    reads it: whatever the server copied, it answered or refused; it
 *    lives.
 *  - the server's worker serves the honest channel throughout and exits
 *    cleanly on SIGTERM.
 * Over tcp the server offers no ring to the same HELLO: WELCOME comes
 * alone.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "rpc_server.h"

#include "core/internal.h" /* a raw peer: rdmx__msg_send */
#include "raw_rpc.h"       /* its own handlers for RPC messages */
#include "rpc/ring.h"
#include "rpc/wire.h"
#include "util/endian.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MSGS 4096

typedef struct {
    rdmx_rpc_hdr_t h;
    size_t len;
    unsigned char data[512];
} msg_t;

static msg_t msgs[MAX_MSGS];
static unsigned nmsgs;
static rdmx_worker_t *rw; /* the raw worker */

/* What the server sent: its header and up to 512 bytes of its data. */
static void take(const void *header, size_t hlen, const void *data, size_t len)
{
    msg_t *m;
    char why[160];

    CHECK(nmsgs < MAX_MSGS);
    m = &msgs[nmsgs++];
    CHECKF(rdmx_rpc_hdr_decode(header, hlen, len, &m->h, why, sizeof(why)) ==
               RDMX_OK,
           "the server sent a malformed header: %s", why);
    m->len = len;
    memcpy(m->data, data, len < sizeof(m->data) ? len : sizeof(m->data));
}

/* What the server sent (raw_rpc.h): never by rendezvous here. */
static ucs_status_t take_msg(const void *header, size_t hlen, void *data,
                             size_t len, int rndv)
{
    CHECK(!rndv);
    take(header, hlen, data, len);
    return UCS_OK;
}

static void send_done(rdmx_status_t st, size_t length, void *arg)
{
    (void)st;
    (void)length;
    free(arg);
}

/* An RPC message of @kind, id @id, with @len bytes of aux. */
static void raw_send(rdmx_ep_t *ep, unsigned kind, uint64_t id, const void *aux,
                     size_t len)
{
    unsigned char hdr[RDMX_RPC_HDR_MAX];
    rdmx_rpc_hdr_t h = {0};
    void *copy = th_alloc(len);
    size_t hlen;
    rdmx_status_t st;

    h.kind = (uint8_t)kind;
    h.id = id;
    h.aux = (uint32_t)len;
    hlen = rdmx_rpc_hdr_encode(&h, hdr);
    if (len != 0)
        memcpy(copy, aux, len);
    st = rdmx__msg_send(ep, RDMX_AM_RPC, hdr, hlen, copy, len, send_done, copy);
    if (st == RDMX_OK)
        free(copy);
    else
        CHECKF(st == RDMX_INPROGRESS, "send: %s", rdmx_status_name(st));
}

/* The first message from the server of @kind with @id at or after @from,
 * waiting up to 5 s for it (NULL: none came). */
static msg_t *wait_msg(unsigned from, unsigned kind, uint64_t id)
{
    double deadline = th_now_ms() + 5000.0 * TH_SLOW;

    for (;;) {
        for (unsigned i = from; i < nmsgs; i++)
            if (msgs[i].h.kind == kind && msgs[i].h.id == id)
                return &msgs[i];
        if (th_now_ms() > deadline)
            return NULL;
        rdmx_worker_progress(rw);
    }
}

/* --- the ring, written by hand ------------------------------------------- */

static rdmx_ring_t req_ring, ans_ring;

static unsigned char *next_slot(void)
{
    return req_ring.base + RDMX_RING_HEAD +
           (req_ring.next % RDMX_RING_SLOTS) * RDMX_RING_STRIDE;
}

/* Whether the server answers the bad record @rec with an ERROR: as it
 * reads it (docs/PROTOCOL.md, "Request rings": what the record's data
 * length says, within the slot), a record that does not decode is
 * answered unless its header names a kind that never is. */
static unsigned wants_error(const unsigned char *rec)
{
    size_t size =
        RDMX_RPC_RING_REC_FIXED + RDMX_RPC_HDR_MAX + rdmx_get_le16(rec + 2);
    size_t off, len;
    uint32_t after;
    rdmx_rpc_hdr_t h;
    char why[160];

    if (size > RDMX_RING_STRIDE - 8)
        size = RDMX_RING_STRIDE - 8;
    CHECK(rdmx_rpc_ring_record_decode(rec, size, RDMX_RPC_MSG_REQUEST, &h,
                                      &after, &off, &len, why,
                                      sizeof(why)) != RDMX_OK);
    return h.kind != RDMX_RPC_MSG_ONEWAY && h.kind != RDMX_RPC_MSG_ERROR &&
           h.kind != RDMX_RPC_MSG_RESPONSE;
}

/* Publish @n bytes as the next record (after its sequence word). */
static void publish(const unsigned char *rec, size_t n)
{
    unsigned char *s = next_slot();

    CHECK(n <= RDMX_RING_STRIDE - 8);
    memcpy(s + 8, rec, n);
    __atomic_store_n((uint64_t *)s, req_ring.next, __ATOMIC_RELEASE);
    req_ring.next++;
}

/* A well-formed REQUEST record for "echo" with @len bytes; @after as the
 * record says. @return its length. */
static size_t echo_record(unsigned char *rec, uint64_t id, const void *data,
                          size_t len, uint32_t after)
{
    rdmx_rpc_hdr_t h = {0};
    size_t off;

    h.kind = RDMX_RPC_MSG_REQUEST;
    h.handler = rdmx_rpc_id("echo");
    h.id = id;
    h.payload = (uint32_t)len;
    off = rdmx_rpc_ring_record_encode(&h, len, after, rec);
    memcpy(rec + off, data, len);
    return off + len;
}

/* The echo's answer in the answers ring: @return 1 when it came, byte-
 * exact, within @ms. */
static int echo_answered(uint64_t id, const void *data, size_t len, double ms)
{
    static unsigned char rec[RDMX_RING_STRIDE];
    double deadline = th_now_ms() + ms;
    char why[160];

    for (;;) {
        rdmx_rpc_msg_t m;
        uint32_t after;
        int r = rdmx__ring_read(&ans_ring, RDMX_RPC_MSG_RESPONSE, &m, rec,
                                &after, why, sizeof(why));

        if (r != 0) {
            rdmx__ring_consume(&ans_ring);
            CHECKF(r > 0, "the server wrote a bad answer record: %s", why);
            CHECKF(m.h.id == id, "answer %llu where %llu was due",
                   (unsigned long long)m.h.id, (unsigned long long)id);
            return m.length == len && memcmp(m.data, data, len) == 0;
        }
        if (th_now_ms() > deadline)
            return 0;
        rdmx_worker_progress(rw);
    }
}

/* --- the honest side ------------------------------------------------------ */

static rdmx_channel_t *honest;

static void honest_echo(unsigned seed)
{
    unsigned char req[64], resp[64];
    size_t got = 0;

    for (unsigned i = 0; i < sizeof(req); i++)
        req[i] = (unsigned char)(seed * 13 + i);
    CHECK_OK(rdmx_call(honest, "echo", req, sizeof(req), resp, sizeof(resp),
                       NULL, &got));
    CHECK(got == sizeof(req) && memcmp(req, resp, got) == 0);
}

static uint64_t server_stat(const char *name)
{
    static char text[65536];
    char key[64];
    size_t len = 0;
    unsigned long long v;
    const char *p;

    CHECK_OK(rdmx_call(honest, "rdmx.stats", NULL, 0, text, sizeof(text) - 1,
                       NULL, &len));
    text[len] = '\0';
    snprintf(key, sizeof(key), "\n%s ", name);
    p = strstr(text, key);
    CHECKF(p != NULL && sscanf(p + strlen(key), "%llu", &v) == 1,
           "no %s line in rdmx.stats", name);
    return v;
}

/* --- the racer -------------------------------------------------------------
 */

static volatile int race_stop;

static void *racer(void *arg)
{
    unsigned char *s = arg;
    unsigned x = 12345;

    while (!race_stop) {
        x = x * 1103515245u + 12345u;
        s[8 + (x >> 8) % (RDMX_RING_STRIDE - 8)] = (unsigned char)(x >> 24);
    }
    return NULL;
}

static void test_rings(rdmx_ep_t *ep)
{
    unsigned char rec[RDMX_RING_STRIDE];
    rdmx_rpc_hdr_t h = {0};
    uint64_t bad0, bad1;
    unsigned from, errors = 0, nbad = 0, want = 0, i;
    size_t n;
    pthread_t th;

    /* A well-formed record first. */
    n = echo_record(rec, 100, "hello", 5, 0);
    publish(rec, n);
    CHECKF(echo_answered(100, "hello", 5, 5000.0 * TH_SLOW),
           "the well-formed record got no byte-exact answer");

    bad0 = server_stat("malformed");
    from = nmsgs;
    /* A header length past the slot. */
    n = echo_record(rec, 101, "x", 1, 0);
    rdmx_put_le16(rec + 0, 0xffff);
    want += wants_error(rec);
    publish(rec, n);
    nbad++;
    /* A data length past the slot. */
    n = echo_record(rec, 102, "x", 1, 0);
    rdmx_put_le16(rec + 2, 300);
    want += wants_error(rec);
    publish(rec, n);
    nbad++;
    /* Header bytes of version 0. */
    n = echo_record(rec, 103, "x", 1, 0);
    rec[RDMX_RPC_RING_REC_FIXED] &= 0x0f;
    want += wants_error(rec);
    publish(rec, n);
    nbad++;
    /* A RESPONSE where a REQUEST belongs (never answered). */
    h.kind = RDMX_RPC_MSG_RESPONSE;
    h.id = 104;
    h.payload = 1;
    n = rdmx_rpc_ring_record_encode(&h, 1, 0, rec);
    rec[n] = 'x';
    CHECK(!wants_error(rec));
    publish(rec, n + 1);
    nbad++;
    /* Seeded garbage, its header's version byte unknown. */
    srand(7);
    for (i = 0; i < 16; i++) {
        for (size_t k = 0; k < sizeof(rec); k++)
            rec[k] = (unsigned char)rand();
        rec[RDMX_RPC_RING_REC_FIXED] = 0xf0; /* (version 15) */
        want += wants_error(rec);
        publish(rec, RDMX_RING_STRIDE - 8);
        nbad++;
    }
    CHECK(want >= 3);
    /* ... and a good one after them. */
    n = echo_record(rec, 105, "again", 5, 0);
    publish(rec, n);
    CHECKF(echo_answered(105, "again", 5, 5000.0 * TH_SLOW),
           "a well-formed record after %u bad ones was not served", nbad);
    bad1 = server_stat("malformed");
    CHECKF(bad1 - bad0 == nbad, "malformed grew by %llu for %u bad records",
           (unsigned long long)(bad1 - bad0), nbad);
    /* (the ERRORs left before the answer: they are all here by now, but a
     * last batch may still be on its way) */
    for (double t = th_now_ms();; rdmx_worker_progress(rw)) {
        errors = 0;
        for (i = from; i < nmsgs; i++) {
            if (msgs[i].h.kind != RDMX_RPC_MSG_ERROR)
                continue;
            CHECKF(msgs[i].h.status == RDMX_ERR_PROTO,
                   "an ERROR with status %d", msgs[i].h.status);
            errors++;
        }
        if (errors >= want || th_now_ms() - t > 2000.0 * TH_SLOW)
            break;
    }
    CHECKF(errors == want, "%u ERROR PROTO answers where %u are due", errors,
           want);
    th_log("%u bad records: malformed +%u, %u ERROR PROTO; served after", nbad,
           nbad, errors);
    honest_echo(1);

    /* The racer: a record rewritten while the server may be reading it. */
    n = echo_record(rec, 106, "racing", 6, 0);
    {
        unsigned char *s = next_slot();
        race_stop = 0;
        CHECK(pthread_create(&th, NULL, racer, s) == 0);
        publish(rec, n);
        for (double t = th_now_ms(); th_now_ms() - t < 50;)
            rdmx_worker_progress(rw);
        race_stop = 1;
        pthread_join(th, NULL);
    }
    honest_echo(2);
    /* (its answer, if any, is not checked: whatever was copied decided) */
    while (rdmx__ring_pending(&ans_ring, 0))
        rdmx__ring_consume(&ans_ring);
    th_log("a record rewritten while read: the server lives");

    /* A record that says a million messages came before it. */
    n = echo_record(rec, 107, "later", 5, 1000000);
    publish(rec, n);
    from = nmsgs;
    raw_send(ep, RDMX_RPC_MSG_PING, 108, NULL, 0);
    CHECKF(wait_msg(from, RDMX_RPC_MSG_PONG, 108) != NULL,
           "a PING by message went unanswered after a stalled record");
    CHECKF(!echo_answered(107, "later", 5, 300.0),
           "a record that waits for a million messages was run");
    honest_echo(3);
    th_log("a record that waits for 1,000,000 messages stalls only its ring");
}

int main(int argc, char **argv)
{
    rdmx_context_t *ctx;
    rdmx_worker_t *hw;
    rdmx_ep_t *ep;
    th_proc_t srv;
    unsigned char hello[RDMX_RPC_HELLO_SIZE];
    msg_t *ring, *welcome;
    int shm;

    if (argc > 1 && strcmp(argv[1], "rpc-server") == 0)
        return trs_main(argc - 2, argv + 2);

    th_init("rpc_ring_hostile", 120);
    shm = strcmp(th_transport_env(), "shm") == 0;
    th_spawn_self(&srv, "rpc-server", 30000, "--workers", "1", NULL);
    ctx = th_context();
    rw = th_worker(ctx, 0);
    hw = th_worker(ctx, 0);
    raw_rpc_install(rw, take_msg, NULL);
    CHECK_OK(rdmx_channel_create(hw, srv.addr, NULL, &honest));
    CHECK_OK(rdmx_channel_wait_ready(honest, 10000 * TH_SLOW));
    ep = th_connect(rw, &srv, NULL);

    rdmx_put_le32(hello, RDMX_RPC_HELLO_F_RINGS);
    raw_send(ep, RDMX_RPC_MSG_HELLO, 1, hello, sizeof(hello));
    welcome = wait_msg(0, RDMX_RPC_MSG_WELCOME, 1);
    CHECKF(welcome != NULL, "no WELCOME to a HELLO that asks for rings");
    /* (RING comes before WELCOME, or not at all) */
    ring = NULL;
    for (msg_t *m = msgs; m < welcome; m++)
        if (m->h.kind == RDMX_RPC_MSG_RING)
            ring = m;
    if (!shm) {
        CHECKF(ring == NULL, "a RING over %s", th_transport_env());
        th_log("over %s: WELCOME, no ring", th_transport_env());
    } else {
        rdmx_rmem_t *rm = NULL;

        CHECKF(ring != NULL, "no RING before the WELCOME");
        CHECK_OK(rdmx__rings_attach(ep, ring->data, ring->h.aux, &rm, &req_ring,
                                    &ans_ring));
        test_rings(ep);
        rdmx_rmem_destroy(rm);
    }
    rdmx_ep_close(ep);
    rdmx_worker_destroy(rw);
    th_sleep_ms(100);
    CHECKF(th_alive(&srv), "the server died");
    honest_echo(4);
    rdmx_channel_destroy(honest);
    rdmx_worker_destroy(hw);
    rdmx_context_destroy(ctx);
    th_kill(&srv, SIGTERM);
    th_check_exit_ok("server", th_wait_exit(&srv, 20000));
    th_log("ok");
    return 0;
}
