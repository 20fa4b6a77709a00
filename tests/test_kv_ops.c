/*
 * kv_ops: the operations of the KV cache against a real rdmx-kvd.
 *
 * Three rdmx-kvd servers (tools/rdmx_kvd.c) run as child processes: "big"
 * (--workers 2 --memory 256m --max-value 64m --max-key 512
 * --inline-threshold 4k: both GET paths at small sizes), "lru"
 * (--memory 4m) and "none" (--memory 2m --eviction none). The client
 * (include/rdmx/kv.h) checks, part by part:
 *
 * - sizes: values of 0, 1, 100, 4 KiB, 4 KiB+1, 16 KiB+13, 1 MiB and 64 MiB
 *   round-trip exactly under binary keys (one holding all 256 byte values, one
 * of the maximum length 512, one single NUL byte), put from plain memory
 * (inline) and from a registered region (RDMA read by the server above
 * inline_max 4096), each read back into plain memory (inline) and into a
 * registered region at an unaligned offset (RDMA write above the server's 4 KiB
 *   threshold); flags and CAS come back; bytes past the value untouched.
 *   Over shm both reads of a value above 512 B are mapped GETs (the
 *   server's get_mapped counts each; none over tcp).
 *   Plain reads of 1 MiB and more land in the buffer itself over UCX (the
 *   channel's responses_in_place counts each), not over libfabric; plain
 *   writes of 8 KiB and more (here 1 and 64 MiB) are sent from the
 *   caller's buffer itself on every transport (requests_in_place counts
 *   each), smaller ones (up to 4 KiB + 1) not.
 * - too_small: a buffer one byte too small (values of 3000 B, 4 KiB,
 *   10000 B, 2 MiB; plain and registered, so inline and RDMA paths), a
 *   zero-capacity and a NULL buffer give RDMX_ERR_TOO_BIG with meta.length
 *   the size needed and the buffer untouched (canary); the exact size fits.
 * - lend: a registered GET lends its buffer over shm (never over tcp);
 *   once the server answered a value inline to a lent buffer, a GET into a
 *   buffer no larger lends nothing (the server's get_buffers_lent stays)
 *   and still gets its value, or TOO_BIG with the size and nothing
 *   written; a larger buffer is lent again and a value above the server's
 *   4 KiB threshold written into it (get_buffers_written). A fresh client
 *   of a fourth server, "plain" (--no-mapped-gets: its GETs are never
 *   mapped).
 * - mapped: over shm, a GET answered with the value's place whose item is
 *   rewritten or deleted before the client copies it (the client's worker
 *   is held back until then) comes back with the new value or NOT_FOUND,
 *   asked again without the map (the server counts 2 gets, 1 mapped);
 *   1 s of blocking GETs of 256 KiB while another thread rewrites the key:
 *   every value whole and of one version, some GETs asked again over shm,
 *   none mapped over tcp.
 * - auto_mixed (transport auto only): a client of transport auto whose
 *   server was started with --transport tcp reaches it over tcp and uses
 *   the tcp rules there, while its connection to a server of this run goes
 *   over shared memory: a registered GET lends nothing and is not mapped, a
 *   registered PUT of 5000 B (above inline_max) goes inline (the server
 *   pulls nothing), both values whole. Values of 200 KiB go both ways
 *   between that client and the tcp server, and between a client of a
 *   tcp context and this run's (auto) server: one 260 KiB tcp segment
 *   each, which both sides' UCX must take (it aborted an auto process).
 *   And a server of transport shm without mapped GETs writes a 64 KiB
 *   value into the auto client's lent buffer (the client's worker pulls
 *   it from the server's memory it maps; it refused that as PROTO).
 * - ttl: present at once, gone after twice the TTL (200 ms, 800 ms under
 *   sanitizers); touch extends a TTL, touch 0 removes it (version kept);
 *   touch of an absent or expired key is NOT_FOUND. A pass in which the
 *   machine stalled past a TTL is repeated, not failed.
 * - cas: versions change on every write; PUT_CAS with a stale version is
 *   EXISTS (value unchanged), with the current one OK, on an absent key
 *   NOT_FOUND; ADD and REPLACE; delete with a stale/current version.
 * - incr/decr: wrap at 2^64, floor at 0, leading zeros, non-numbers, 20
 *   digits over 2^64 and 21 digits INVALID, absent NOT_FOUND; the result is
 *   stored as decimal text with the flags kept, a new version and `bytes`
 *   following the number of digits.
 * - batches: mput (per-item status, ADD/REPLACE inside a batch), mget
 *   (hits, misses, a too-small buffer untouched, exact fits), exists,
 *   prefix_hits, 5000-key mput and mget (more than one 4096-key wire batch),
 *   flush (curr_items and bytes back to 0).
 * - more: 64 PUTs and 64 GETs of 1-3000 bytes issued with
 *   RDMX_KV_OP_PARAM_FIELD_MORE all complete once with their values, and
 *   the client's worker sent them in batches.
 * - stats: get_hits + get_misses == cmd_get; the deltas of hits, misses,
 *   sets, items, deletes match what the test did; curr_items and bytes match
 *   what is stored (an overwrite with another size included).
 * - limits: key over --max-key for every operation, value over --max-value
 *   (inline and RDMA read), a request over the message limit: TOO_BIG with a
 *   detail (for the last, naming the server's max_value); empty and 64 KiB
 * keys: INVALID; a buffer outside the region passed: refused; an ordinary miss
 * afterwards carries no stale detail.
 * - channel_options: rdmx_kv_params_t.channel reaches every server's
 *   channel (credits 1 and queue 0 refuse a second GET with NO_RESOURCE,
 *   the state callback reports READY) while the client's timeout wins over
 *   the channel's; the default client queues the second GET.
 * - malformed: hand-made kv.* requests through rdmx_call on a raw channel
 *   (empty or truncated header, key beyond the data, trailing bytes,
 *   reserved bytes, unknown put mode, inline value beyond the data, empty
 *   keys, batch counts 0 and 5000, a short batch header, missing or empty or
 *   trailing batch entries, a bulk PUT or GET without a descriptor or with a
 *   too-short one, unknown handler, an mput item with an unknown mode): each
 *   answered with an error (RDMX_ERR_PROTO where the wire format is broken)
 *   and a message, each counted once in `bad_requests`; buffers lent without
 *   the write (GET) or read (PUT) right are refused and not written; the
 *   server stays up and the stored data is intact.
 * - cli: rdmx-kv put from an argument, from -f FILE and from stdin; get
 *   writes the raw value (binary; 2 MiB, more than its first 1 MiB buffer;
 *   empty) to stdout; exists, incr, delete, stats, --add/--replace; exit
 *   codes 0 found, 1 not found, 2 error (unreachable server, unknown
 *   command, missing key, ADD of a present key, a delta or TTL that is not
 *   a number). The CLI runs from the
 *   launcher child.
 * - eviction (lru): 40 x 64 KiB, read the first 10, 40 more: exactly the
 *   least recently used (the early unread keys, oldest first) are gone,
 *   `evictions` and `evicted_unfetched` count them, the recently read and
 *   the new keys survive intact.
 * - eviction (none): writes fail with RDMX_ERR_NO_MEMORY (and a detail) when
 *   full, nothing is evicted, a delete makes room again.
 * - sigterm: each server exits 0 within 3 s of SIGTERM (6 s under
 *   sanitizers; the client keeps progressing meanwhile, as the server closes
 *   connections in order) and says "shutting down"; the client's next call
 *   fails with an error within its 1 s timeout (plus slack). With
 *   RDMX_TEST_CHURN=1, 10 more servers (one worker) get SIGTERM while 12
 *   connections at a time are opened and closed against them; each exits 0
 *   (opt-in: see part_sigterm).
 *
 * Failed checks inside a part are reported and the test continues with the
 * next part (exit status 1 at the end), so one bug does not hide others.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "kvd_launcher.h"
#include "parts.h"

#include <rdmx/kv.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Shared state                                                             */
/* ------------------------------------------------------------------------ */

#define BIG_VALUE  (64 * TH_MIB)
#define MAX_KEY    512
#define BUF_SIZE   (BIG_VALUE + 128 * TH_KIB)
#define REG_OFFSET 77 /* values in the registered regions start here */
#define CANARY     0xA5

static kvd_t big, lru, none, plain;
static rdmx_context_t *ctx;
static rdmx_worker_t *worker;
static rdmx_kv_t *kv;              /* to "big", inline_max 4096 */
static rdmx_mr_t *src_mr, *dst_mr; /* registered put source / get target */
static uint8_t *src, *dst;         /* plain put source / get target */
static char tmpdir[64];

static uint8_t key_all[256];     /* every byte value once */
static uint8_t key_max[MAX_KEY]; /* the longest key, binary */
static const uint8_t key_nul[1] = {0};

/* The params of a GET or PUT whose buffer lies in the region @p mr_. */
#define KV_MR(mr_)                                                             \
    (&(rdmx_kv_op_params_t){.field_mask = RDMX_KV_OP_PARAM_FIELD_MR,           \
                            .mr = (mr_)})

/* The params of a PUT with its mode, flags, TTL and version, each given. */
static rdmx_kv_op_params_t put_opts(rdmx_kv_put_mode_t mode, uint32_t flags,
                                    uint32_t ttl_ms, uint64_t cas)
{
    rdmx_kv_op_params_t o;

    memset(&o, 0, sizeof(o));
    o.field_mask = RDMX_KV_OP_PARAM_FIELD_MODE | RDMX_KV_OP_PARAM_FIELD_FLAGS |
                   RDMX_KV_OP_PARAM_FIELD_TTL | RDMX_KV_OP_PARAM_FIELD_CAS;
    o.mode = mode;
    o.flags = flags;
    o.ttl_ms = ttl_ms;
    o.cas = cas;
    return o;
}

static rdmx_kv_t *client(const char *servers, size_t inline_max, int timeout)
{
    rdmx_kv_params_t p;
    rdmx_kv_t *c = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_KV_PARAM_FIELD_INLINE_MAX | RDMX_KV_PARAM_FIELD_TIMEOUT;
    p.inline_max = inline_max;
    p.timeout_ms = timeout;
    CHECK_OK(rdmx_kv_create(worker, servers, &p, &c));
    CHECK_OK(rdmx_kv_wait_ready(c, 20000 * TH_SLOW));
    return c;
}

static void stats_of(rdmx_kv_t *c, char *buf, size_t size)
{
    EXPECT_OK(rdmx_kv_stats(c, 0, buf, size));
}

/* Values above this size may be answered with their place in the store
 * (src/kv/proto.h, RDMX_KV_MAP_ABOVE). */
#define MAP_ABOVE 512

/* The server's count of GETs answered with the value's place in its
 * store (docs/KV.md, "Mapped GETs over shared memory"). */
static uint64_t mapped_gets(rdmx_kv_t *c)
{
    char s[4096];

    stats_of(c, s, sizeof(s));
    return stat_of(s, "get_mapped");
}

/* Index of the first byte in [from, to) of @p that is not @v, or -1. */
static long not_byte(const uint8_t *p, size_t from, size_t to, uint8_t v)
{
    for (size_t i = from; i < to; i++)
        if (p[i] != v)
            return (long)i;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* lend: a GET lends its buffer only when the answer may need it            */
/* ------------------------------------------------------------------------ */

/* The server's lent and written GET buffers since @s0, into *@lent, *@wr. */
static void lend_deltas(rdmx_kv_t *c, const char *s0, uint64_t *lent,
                        uint64_t *wr)
{
    char s1[4096];

    stats_of(c, s1, sizeof(s1));
    *lent = stat_of(s1, "get_buffers_lent") - stat_of(s0, "get_buffers_lent");
    *wr =
        stat_of(s1, "get_buffers_written") - stat_of(s0, "get_buffers_written");
}

static void part_lend(void)
{
    enum { SMALL = 100, LARGE = 5000 }; /* below and above 4 KiB */
    uint8_t *rbuf = (uint8_t *)rdmx_mr_addr(dst_mr) + REG_OFFSET;
    const char *tr = th_transport_env();
    /* Over UCX's shared memory a registered GET lends its buffer; over
     * tcp it never does (an inline answer is faster); libfabric's
     * providers either way */
    int must = th_maps_local() ? 1 : strcmp(tr, "tcp") == 0 ? 0 : -1;
    /* (a server without mapped GETs: over shm "big" answers a GET of
     * more than 512 B with the value's place in its store) */
    rdmx_kv_t *c = client(plain.addr, 4096, 60000 * TH_SLOW);
    char s0[4096];
    uint64_t lent, wr;
    rdmx_kv_meta_t m;

    th_fill(src, LARGE, th_seed(41, 0, 0));
    EXPECT_OK(rdmx_kv_put(c, "lend:small", 10, src, SMALL, NULL, NULL));
    EXPECT_OK(rdmx_kv_put(c, "lend:large", 10, src, LARGE, NULL, NULL));

    /* the first small GET lends its buffer; the server answers inline */
    stats_of(c, s0, sizeof(s0));
    memset(rbuf, CANARY, LARGE);
    EXPECT_OK(rdmx_kv_get(c, "lend:small", 10, rbuf, SMALL, KV_MR(dst_mr), &m));
    EXPECT(m.length == SMALL && th_check(rbuf, SMALL, th_seed(41, 0, 0)) < 0,
           "lend: first small get: %zu bytes, or wrong ones", m.length);
    lend_deltas(c, s0, &lent, &wr);
    EXPECT(wr == 0,
           "lend: a %d-byte value was written into the buffer "
           "(%" PRIu64 " writes): the server's threshold is 4 KiB",
           SMALL, wr);
    EXPECT(must < 0 || lent == (uint64_t)must,
           "lend: the first registered get over %s lent %" PRIu64
           " buffers (want %d)",
           tr, lent, must);
    if (lent == 0)
        goto out; /* (this transport never lends a GET's buffer) */

    /* Now the client knows: a buffer no larger than a value the server
     * answered inline is not lent again, and the answer is the same */
    stats_of(c, s0, sizeof(s0));
    for (int i = 0; i < 3; i++) {
        memset(rbuf, CANARY, LARGE);
        EXPECT_OK(
            rdmx_kv_get(c, "lend:small", 10, rbuf, SMALL, KV_MR(dst_mr), &m));
        EXPECT(m.length == SMALL &&
                   th_check(rbuf, SMALL, th_seed(41, 0, 0)) < 0 &&
                   rbuf[SMALL] == CANARY,
               "lend: small get %d: %zu bytes, or wrong ones", i, m.length);
    }
    /* too small a buffer, not lent: TOO_BIG with the size, nothing written */
    memset(rbuf, CANARY, LARGE);
    EXPECT(rdmx_kv_get(c, "lend:small", 10, rbuf, SMALL - 1, KV_MR(dst_mr),
                       &m) == RDMX_ERR_TOO_BIG &&
               m.length == SMALL,
           "lend: a %d-byte buffer for %d bytes: want TOO_BIG and the size",
           SMALL - 1, SMALL);
    EXPECT(not_byte(rbuf, 0, LARGE, CANARY) < 0,
           "lend: a too-small buffer was written at byte %ld",
           not_byte(rbuf, 0, LARGE, CANARY));
    lend_deltas(c, s0, &lent, &wr);
    EXPECT(lent == 0,
           "lend: %" PRIu64 " of 4 small gets lent their buffer "
           "after the server had answered one inline (want 0)",
           lent);

    /* a larger buffer is lent again, and a value above the server's
     * threshold is written into it */
    stats_of(c, s0, sizeof(s0));
    memset(rbuf, CANARY, LARGE + 1);
    EXPECT_OK(rdmx_kv_get(c, "lend:large", 10, rbuf, LARGE, KV_MR(dst_mr), &m));
    EXPECT(m.length == LARGE && th_check(rbuf, LARGE, th_seed(41, 0, 0)) < 0 &&
               rbuf[LARGE] == CANARY,
           "lend: large get: %zu bytes, or wrong ones", m.length);
    lend_deltas(c, s0, &lent, &wr);
    EXPECT(lent == 1 && wr == 1,
           "lend: a %d-byte get lent %" PRIu64 " and wrote %" PRIu64
           " buffers (want 1 and 1)",
           LARGE, lent, wr);
out:
    rdmx_kv_destroy(c);
}

/* ------------------------------------------------------------------------ */
/* put_lend: which PUTs lend their value                                    */
/* ------------------------------------------------------------------------ */

/* The server's count of PUT values it read from a lent buffer. */
static uint64_t pulled(rdmx_kv_t *c)
{
    char s[4096];

    stats_of(c, s, sizeof(s));
    return stat_of(s, "put_pulled");
}

static void put_nb_done(rdmx_status_t st, const rdmx_kv_meta_t *meta, void *arg)
{
    (void)meta;
    *(volatile int *)arg = st == RDMX_OK ? 1 : -1;
}

/* PUT @len bytes with @c, of registered memory (@reg) or plain memory
 * (blocking, or non-blocking with @nb), and say how many times the server
 * pulled the value; it must read back whole. */
static int put_from(rdmx_kv_t *c, size_t len, int reg, int nb, const char *what)
{
    uint8_t *buf = reg ? (uint8_t *)rdmx_mr_addr(src_mr) + REG_OFFSET : src;
    uint64_t seed = th_seed(47, len, (uint64_t)reg), p0 = pulled(c);
    rdmx_kv_meta_t m;
    int lent;

    th_fill(buf, len, seed);
    if (nb) {
        volatile int done = 0;
        rdmx_kv_op_params_t o = {.field_mask = RDMX_KV_OP_PARAM_FIELD_CB,
                                 .cb = put_nb_done,
                                 .arg = (void *)&done};
        double t0 = th_now_ms();

        EXPECT(rdmx_kv_put_nb(c, "put_lend", 8, buf, len, &o) ==
                   RDMX_INPROGRESS,
               "put_lend: %s: put_nb did not start", what);
        while (done == 0 && th_now_ms() - t0 < 60000.0 * TH_SLOW)
            rdmx_worker_wait(worker, 10);
        EXPECT(done == 1, "put_lend: %s: put_nb %s", what,
               done == 0 ? "did not end" : "failed");
    } else {
        EXPECT_OK(rdmx_kv_put(c, "put_lend", 8, buf, len,
                              reg ? KV_MR(src_mr) : NULL, NULL));
    }
    lent = (int)(pulled(c) - p0);
    memset(dst, CANARY, len + 1);
    EXPECT_OK(rdmx_kv_get(c, "put_lend", 8, dst, len + 1, NULL, &m));
    EXPECT(m.length == len && th_check(dst, len, seed) < 0,
           "put_lend: %s, %zu bytes: read back %zu bytes, or wrong ones", what,
           len, m.length);
    return lent;
}

static int put_lent(rdmx_kv_t *c, size_t len, const char *what)
{
    return put_from(c, len, 1, 0, what);
}

/*
 * With the default params, over UCX's shared memory, a registered
 * (rdmx_mem_alloc) value of more than 128 bytes is lent: the server's pull
 * is its own copy out of the client's buffer, and the request fits a ring
 * record. Up to 128 bytes, over tcp (up to 256 KiB), and with an
 * inline_max the caller set, values go inline. A blocking PUT of plain
 * memory of 64 KiB to 16 MiB is lent from the client's own copy.
 */
static void part_put_lend(void)
{
    const char *tr = th_transport_env();
    int shm = th_maps_local(), tcp = strcmp(tr, "tcp") == 0;
    rdmx_kv_params_t p = {.field_mask = RDMX_KV_PARAM_FIELD_TIMEOUT,
                          .timeout_ms = 60000 * TH_SLOW};
    rdmx_kv_t *dflt = NULL, *set = client(big.addr, 8192, 60000 * TH_SLOW);
    int lent;

    CHECK_OK(rdmx_kv_create(worker, big.addr, &p, &dflt));
    CHECK_OK(rdmx_kv_wait_ready(dflt, 20000 * TH_SLOW));
    EXPECT(put_lent(dflt, 128, "default params") == 0,
           "put_lend: a 128-byte value was lent over %s (want inline)", tr);
    lent = put_lent(dflt, 129, "default params");
    EXPECT((shm && lent == 1) || (tcp && lent == 0) || (!shm && !tcp),
           "put_lend: a 129-byte value with the default params over %s: "
           "%d pulls (want %d)",
           tr, lent, shm);
    lent = put_lent(dflt, 4096, "default params");
    EXPECT((shm && lent == 1) || (tcp && lent == 0) || (!shm && !tcp),
           "put_lend: a 4 KiB value with the default params over %s: %d "
           "pulls (want %d)",
           tr, lent, shm);
    /* A blocking PUT of plain memory from 64 KiB is copied into the
     * client's own registered buffer and lent from there over shm (one
     * copy by each side: faster than the value inline through UCX's
     * rendezvous); smaller and non-blocking ones go inline */
    lent = put_from(dflt, 64 * 1024, 0, 0, "plain, blocking");
    EXPECT((shm && lent == 1) || (tcp && lent == 0) || (!shm && !tcp),
           "put_lend: a blocking 64 KiB PUT of plain memory over %s: %d "
           "pulls (want %d)",
           tr, lent, shm);
    lent = put_from(dflt, 3 * 1024 * 1024 + 5, 0, 0, "plain, blocking");
    EXPECT((shm && lent == 1) || (tcp && lent == 0) || (!shm && !tcp),
           "put_lend: a blocking 3 MiB PUT of plain memory over %s: %d "
           "pulls (want %d)",
           tr, lent, shm);
    EXPECT(put_from(dflt, 64 * 1024 - 1, 0, 0, "plain, blocking") == 0,
           "put_lend: a blocking PUT of 64 KiB - 1 of plain memory was lent "
           "over %s",
           tr);
    EXPECT(put_from(dflt, 64 * 1024, 0, 1, "plain, non-blocking") == 0,
           "put_lend: a non-blocking 64 KiB PUT of plain memory was lent "
           "over %s",
           tr);
    /* the caller's inline_max stands */
    EXPECT(put_lent(set, 4096, "inline_max 8192") == 0,
           "put_lend: a 4 KiB value lent over %s with inline_max 8192", tr);
    lent = put_lent(set, 8193, "inline_max 8192");
    EXPECT(lent == (tcp ? 0 : 1) || (!shm && !tcp),
           "put_lend: an 8193-byte value with inline_max 8192 over %s: %d "
           "pulls (want %d)",
           tr, lent, tcp ? 0 : 1);
    EXPECT_OK(rdmx_kv_delete(dflt, "put_lend", 8, 0));
    rdmx_kv_destroy(set);
    rdmx_kv_destroy(dflt);
}

/* ------------------------------------------------------------------------ */
/* sizes                                                                    */
/* ------------------------------------------------------------------------ */

/* Read @key back both ways and verify @len bytes of @seed, @flags, @cas. */
static void read_back(const void *key, size_t klen, size_t len, uint64_t seed,
                      uint32_t flags, uint64_t cas, const char *what)
{
    size_t slack = 64, cap = len + slack;
    rdmx_kv_meta_t m;
    uint8_t *rbuf = (uint8_t *)rdmx_mr_addr(dst_mr) + REG_OFFSET;
    int64_t bad;
    long c;
    /* Over UCX's shared memory a value above 512 B is copied by the client
     * out of the server's store, which it maps (mapped GETs) */
    int mapped = th_maps_local() && len > MAP_ABOVE;
    uint64_t maps0 = mapped_gets(kv);

    /* plain memory: the value travels in the response; from 1 MiB (by
     * rendezvous) straight into the buffer where the transport scatters
     * (UCX's iov receive; libfabric: through rdmx's copy) */
    rdmx_channel_stats_t st0, st1;
    rdmx_channel_stats(rdmx_kv_channel(kv, 0), &st0);
    memset(dst, CANARY, cap);
    memset(&m, 0, sizeof(m));
    EXPECT_OK(rdmx_kv_get(kv, key, klen, dst, cap, NULL, &m));
    rdmx_channel_stats(rdmx_kv_channel(kv, 0), &st1);
    if (len >= TH_MIB) {
        uint64_t want =
            strncmp(th_transport_env(), "ofi", 3) == 0 || mapped ? 0 : 1;
        EXPECT(st1.responses_in_place - st0.responses_in_place == want,
               "%s: plain get of %zu bytes: %" PRIu64 " answers in place "
               "(want %" PRIu64 ")",
               what, len, st1.responses_in_place - st0.responses_in_place,
               want);
    }
    EXPECT(m.length == len && m.flags == flags && m.cas == cas,
           "%s: plain get of %zu bytes: meta length %zu flags %u cas %" PRIu64
           " (want %u, %" PRIu64 ")",
           what, len, m.length, m.flags, m.cas, flags, cas);
    bad = th_check(dst, len, seed);
    EXPECT(bad < 0, "%s: plain get of %zu bytes differs at byte %lld", what,
           len, (long long)bad);
    c = not_byte(dst, len, cap, CANARY);
    EXPECT(c < 0, "%s: plain get of %zu bytes wrote byte %ld", what, len, c);

    /* registered memory at an unaligned offset: RDMA write above 4 KiB */
    memset(rbuf - 1, CANARY, cap + 1);
    memset(&m, 0, sizeof(m));
    EXPECT_OK(rdmx_kv_get(kv, key, klen, rbuf, cap, KV_MR(dst_mr), &m));
    EXPECT(m.length == len && m.flags == flags && m.cas == cas,
           "%s: registered get of %zu bytes: meta length %zu flags %u cas "
           "%" PRIu64 " (want %u, %" PRIu64 ")",
           what, len, m.length, m.flags, m.cas, flags, cas);
    bad = th_check(rbuf, len, seed);
    EXPECT(bad < 0, "%s: registered get of %zu bytes differs at byte %lld",
           what, len, (long long)bad);
    c = not_byte(rbuf, len, cap, CANARY);
    EXPECT(c < 0 && rbuf[-1] == CANARY,
           "%s: registered get of %zu bytes wrote outside the value (byte "
           "%ld)",
           what, len, c);
    EXPECT(mapped_gets(kv) - maps0 == (mapped ? 2u : 0u),
           "%s: %" PRIu64 " of 2 gets of %zu bytes over %s were mapped "
           "(want %d)",
           what, mapped_gets(kv) - maps0, len, th_transport_env(),
           mapped ? 2 : 0);
}

static void part_sizes(void)
{
    /* 16 KiB + 13: just above RDMX_KV_STREAM_MIN, written into the store
     * around the cache (store.h) whether inline or pulled */
    static const size_t sizes[] = {0,    1,     100,        4096,
                                   4097, 16397, 1 * TH_MIB, BIG_VALUE};
    const struct {
        const uint8_t *key;
        size_t klen;
    } keys[] = {{key_all, sizeof(key_all)},
                {key_max, sizeof(key_max)},
                {key_nul, sizeof(key_nul)}};
    uint8_t *rsrc = (uint8_t *)rdmx_mr_addr(src_mr) + REG_OFFSET;

    for (int reg = 0; reg < 2; reg++) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            size_t len = sizes[i];
            /* the 64 MiB value under one key only, deleted afterwards */
            size_t nkeys = len == BIG_VALUE ? 1 : 3;

            for (size_t k = 0; k < nkeys; k++) {
                uint64_t seed = th_seed((uint64_t)reg, len, k);
                uint32_t flags = (uint32_t)(seed >> 7);
                uint64_t cas = 0;
                char what[96];
                double t0 = th_now_ms();

                snprintf(what, sizeof(what), "%s put, key %zu (%zu B)",
                         reg ? "registered" : "plain", k, keys[k].klen);
                rdmx_kv_op_params_t o = put_opts(RDMX_KV_PUT_SET, flags, 0, 0);
                if (reg) {
                    th_fill(rsrc, len, seed);
                    o.field_mask |= RDMX_KV_OP_PARAM_FIELD_MR;
                    o.mr = src_mr;
                    EXPECT_OK(rdmx_kv_put(kv, keys[k].key, keys[k].klen, rsrc,
                                          len, &o, &cas));
                } else {
                    /* an inline value from 8 KiB on goes from src itself;
                     * above 192 B too once the transport refused to take
                     * such a size at once (shared memory above ~960 B:
                     * docs/CORE.md, "Small messages at once"), never up
                     * to 192 B, nor while it refused nothing */
                    rdmx_channel_stats_t st0, st1;
                    rdmx_worker_stats_t ws;
                    uint64_t want = len >= 8192 ? 1 : 0, got;
                    int either;
                    th_fill(src, len, seed);
                    rdmx_worker_stats(worker, &ws);
                    either = len > 192 && len < 8192 && ws.msgs_not_at_once > 0;
                    rdmx_channel_stats(rdmx_kv_channel(kv, 0), &st0);
                    EXPECT_OK(rdmx_kv_put(kv, keys[k].key, keys[k].klen, src,
                                          len, &o, &cas));
                    rdmx_channel_stats(rdmx_kv_channel(kv, 0), &st1);
                    got = st1.requests_in_place - st0.requests_in_place;
                    EXPECT(got == want || (either && got == 1),
                           "%s: %" PRIu64 " requests sent in place (want "
                           "%" PRIu64 "%s)",
                           what, got, want, either ? " or 1" : "");
                }
                EXPECT(cas != 0, "%s: put returned cas 0", what);
                read_back(keys[k].key, keys[k].klen, len, seed, flags, cas,
                          what);
                if (len >= TH_MIB)
                    th_log("  %s: %zu bytes put and read back twice in "
                           "%.0f ms",
                           what, len, th_now_ms() - t0);
            }
            if (len == BIG_VALUE)
                EXPECT_OK(rdmx_kv_delete(kv, key_all, sizeof(key_all), 0));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* too_small                                                                */
/* ------------------------------------------------------------------------ */

static void too_small_one(const char *key, size_t len)
{
    uint64_t seed = th_seed(11, len, 0), cas = 0;
    uint8_t *rbuf = (uint8_t *)rdmx_mr_addr(dst_mr) + REG_OFFSET;
    rdmx_kv_meta_t m;
    long c;

    th_fill(src, len, seed);
    EXPECT_OK(rdmx_kv_put(kv, key, strlen(key), src, len, NULL, &cas));

    /* plain buffer one byte short */
    memset(dst, CANARY, len + 64);
    memset(&m, 0, sizeof(m));
    EXPECT_ST(rdmx_kv_get(kv, key, strlen(key), dst, len - 1, NULL, &m),
              RDMX_ERR_TOO_BIG);
    EXPECT(m.length == len, "plain, %zu-byte value: meta.length %zu", len,
           m.length);
    EXPECT(m.cas == cas,
           "plain, %zu-byte value: meta.cas %" PRIu64 " (want %" PRIu64 ")",
           len, m.cas, cas);
    c = not_byte(dst, 0, len + 64, CANARY);
    EXPECT(c < 0, "plain, %zu-byte value: too small buffer written at %ld", len,
           c);

    /* registered buffer one byte short */
    memset(rbuf, CANARY, len + 64);
    memset(&m, 0, sizeof(m));
    EXPECT_ST(
        rdmx_kv_get(kv, key, strlen(key), rbuf, len - 1, KV_MR(dst_mr), &m),
        RDMX_ERR_TOO_BIG);
    EXPECT(m.length == len, "registered, %zu-byte value: meta.length %zu", len,
           m.length);
    c = not_byte(rbuf, 0, len + 64, CANARY);
    EXPECT(c < 0, "registered, %zu-byte value: too small buffer written at %ld",
           len, c);

    /* the exact size works both ways */
    EXPECT_OK(rdmx_kv_get(kv, key, strlen(key), dst, len, NULL, &m));
    EXPECT(th_check(dst, len, seed) < 0, "plain exact-size get differs");
    EXPECT_OK(rdmx_kv_get(kv, key, strlen(key), rbuf, len, KV_MR(dst_mr), &m));
    EXPECT(th_check(rbuf, len, seed) < 0, "registered exact-size get differs");
}

typedef struct {
    volatile int done;
    rdmx_status_t status;
    size_t length;
    char message[256];
} nb_seen_t;

static void nb_seen_cb(rdmx_status_t st, const rdmx_kv_meta_t *meta,
                       void *arg)
{
    nb_seen_t *s = arg;

    s->status = st;
    s->length = meta->length;
    snprintf(s->message, sizeof(s->message), "%s",
             meta->message != NULL ? meta->message : "");
    s->done = 1;
}

static void part_too_small(void)
{
    rdmx_kv_meta_t m;
    uint8_t one = CANARY;

    too_small_one("small:3000", 3000);   /* inline answer */
    too_small_one("small:4096", 4096);   /* the threshold itself */
    too_small_one("small:10000", 10000); /* RDMA path refused */
    too_small_one("small:2m", 2 * TH_MIB);

    /* capacity 0: the size is still reported, nothing written */
    EXPECT_OK(rdmx_kv_put(kv, "small:100", 9, src, 100, NULL, NULL));
    memset(&m, 0, sizeof(m));
    EXPECT_ST(rdmx_kv_get(kv, "small:100", 9, &one, 0, NULL, &m),
              RDMX_ERR_TOO_BIG);
    EXPECT(m.length == 100 && one == CANARY,
           "capacity 0: meta.length %zu, byte %02x", m.length, one);
    memset(&m, 0, sizeof(m));
    EXPECT_ST(rdmx_kv_get(kv, "small:100", 9, NULL, 0, NULL, &m),
              RDMX_ERR_TOO_BIG);
    EXPECT(m.length == 100, "NULL buffer: meta.length %zu", m.length);

    /* the non-blocking form: the callback gets the needed size and the
     * message in meta (the thread's detail is not the callback's) */
    {
        nb_seen_t seen = {0};
        rdmx_kv_op_params_t o = {.field_mask = RDMX_KV_OP_PARAM_FIELD_CB,
                                 .cb = nb_seen_cb,
                                 .arg = &seen};
        EXPECT_ST(rdmx_kv_get_nb(kv, "small:100", 9, &one, 1, &o),
                  RDMX_INPROGRESS);
        while (!seen.done)
            rdmx_worker_wait(worker, 10);
        EXPECT(seen.status == RDMX_ERR_TOO_BIG && seen.length == 100 &&
                   one == CANARY,
               "get_nb into 1 byte: %s, meta.length %zu, byte %02x",
               rdmx_status_name(seen.status), seen.length, one);
        EXPECT(seen.message[0] != '\0',
               "get_nb TOO_BIG: empty meta->message in the callback");
        th_log("  get_nb TOO_BIG message: %s", seen.message);
    }

    /* a 0-byte value fits a 0-byte buffer */
    EXPECT_OK(rdmx_kv_put(kv, "small:0", 7, NULL, 0, NULL, NULL));
    memset(&m, 0xff, sizeof(m));
    EXPECT_OK(rdmx_kv_get(kv, "small:0", 7, NULL, 0, NULL, &m));
    EXPECT(m.length == 0, "0-byte value: meta.length %zu", m.length);
}

/* ------------------------------------------------------------------------ */
/* mapped: GETs that copy the value out of the server's store               */
/* ------------------------------------------------------------------------ */

/* A value of version @v: its first 8 bytes say v, the rest is v's
 * pattern. */
static void ver_fill(uint8_t *p, size_t len, uint64_t v)
{
    memcpy(p, &v, 8);
    th_fill(p + 8, len - 8, th_seed(71, v, 0));
}

/* -1 if @p holds a whole value of one version (into *v_p), else the first
 * byte that belongs to none. */
static int64_t ver_check(const uint8_t *p, size_t len, uint64_t *v_p)
{
    int64_t bad;

    memcpy(v_p, p, 8);
    bad = th_check(p + 8, len - 8, th_seed(71, *v_p, 0));
    return bad < 0 ? -1 : bad + 8;
}

typedef struct {
    rdmx_kv_t *c;
    size_t len;
    uint8_t *buf;
    int stop; /* atomic */
    uint64_t puts;
    rdmx_status_t st;
} rewriter_t;

/* Rewrite "map:churn" with new versions until told to stop. */
static void *rewriter_main(void *arg)
{
    rewriter_t *r = arg;

    for (uint64_t v = 1; !__atomic_load_n(&r->stop, __ATOMIC_RELAXED); v++) {
        ver_fill(r->buf, r->len, v);
        r->st = rdmx_kv_put(r->c, "map:churn", 9, r->buf, r->len, NULL, NULL);
        if (r->st != RDMX_OK)
            break;
        r->puts++;
    }
    return NULL;
}

static uint64_t stat_now(rdmx_kv_t *c, const char *name)
{
    char s[4096];

    stats_of(c, s, sizeof(s));
    return stat_of(s, name);
}

/*
 * A GET by @c1 answered with the value's place whose item changes before
 * the client copies it (@variant 0: rewritten, 1: deleted, 2: rewritten,
 * under the first GET of a fresh client, which also lends its registered
 * buffer and asks for the store's descriptor) is asked again without the
 * map: the new value (or NOT_FOUND), never the freed bytes. The client's
 * worker is not progressed between the GET and the change (made by @c2),
 * so its copy comes after the change.
 */
static void mapped_race(rdmx_kv_t *c2, int variant, size_t len)
{
    static const char *names[] = {"rewritten", "deleted",
                                  "rewritten (first GET)"};
    int tries;

    for (tries = 0; tries < 5; tries++) {
        nb_seen_t seen;
        rdmx_kv_op_params_t o = {.field_mask = RDMX_KV_OP_PARAM_FIELD_CB,
                                 .cb = nb_seen_cb,
                                 .arg = &seen};
        rdmx_kv_meta_t m;
        uint64_t v = 0, g0, c0, a0, old = 1000 + (uint64_t)tries,
                 now = old + 1000;

        rdmx_kv_t *c1 =
            variant == 2 ? client(big.addr, 4096, 60000 * TH_SLOW) : kv;
        uint8_t *into =
            variant == 2 ? (uint8_t *)rdmx_mr_addr(dst_mr) + REG_OFFSET : dst;

        memset(&seen, 0, sizeof(seen));
        ver_fill(src, len, old);
        EXPECT_OK(rdmx_kv_put(c2, "map:race", 8, src, len, NULL, NULL));
        if (variant != 2)
            EXPECT_OK(rdmx_kv_get(c1, "map:race", 8, dst, len, NULL, &m));
        else
            o = (rdmx_kv_op_params_t){.field_mask = RDMX_KV_OP_PARAM_FIELD_CB |
                                                    RDMX_KV_OP_PARAM_FIELD_MR,
                                      .cb = nb_seen_cb,
                                      .arg = &seen,
                                      .mr = dst_mr};
        g0 = stat_now(c2, "get_mapped");
        c0 = stat_now(c2, "cmd_get");
        a0 = stat_now(c2, "get_again");
        EXPECT_ST(rdmx_kv_get_nb(c1, "map:race", 8, into, len, &o),
                  RDMX_INPROGRESS);
        if (seen.done) {
            if (c1 != kv)
                rdmx_kv_destroy(c1);
            continue; /* answered within the call: once more */
        }
        for (int i = 0; i < 20000 && stat_now(c2, "get_mapped") == g0; i++)
            usleep(100); /* until the server answered with the place */
        if (variant != 1) {
            ver_fill(src, len, now);
            EXPECT_OK(rdmx_kv_put(c2, "map:race", 8, src, len, NULL, NULL));
        } else {
            EXPECT_OK(rdmx_kv_delete(c2, "map:race", 8, 0));
        }
        while (!seen.done)
            rdmx_worker_wait(worker, 10);
        if (c1 != kv)
            rdmx_kv_destroy(c1);
        if (variant != 1)
            EXPECT(seen.status == RDMX_OK && seen.length == len &&
                       ver_check(into, len, &v) < 0 && v == now,
                   "mapped: a GET whose item was %s under it: %s, %zu bytes, "
                   "version %" PRIu64 " (want OK, %zu, %" PRIu64 "): %s",
                   names[variant], rdmx_status_name(seen.status), seen.length,
                   v, len, now, seen.message);
        else
            EXPECT(seen.status == RDMX_ERR_NOT_FOUND,
                   "mapped: a GET whose item was %s under it: %s (want "
                   "NOT_FOUND)",
                   names[variant], rdmx_status_name(seen.status));
        EXPECT(stat_now(c2, "cmd_get") - c0 == 2 &&
                   stat_now(c2, "get_mapped") - g0 == 1 &&
                   stat_now(c2, "get_again") - a0 == 1,
               "mapped: a GET whose item was %s under it made %" PRIu64
               " gets, %" PRIu64 " mapped, %" PRIu64 " again (want 2, 1 "
               "and 1: asked again without the map)",
               names[variant], stat_now(c2, "cmd_get") - c0,
               stat_now(c2, "get_mapped") - g0, stat_now(c2, "get_again") - a0);
        break;
    }
    EXPECT(tries < 5, "mapped: each of 5 GETs was answered within its call");
}

static void part_mapped(void)
{
    enum { LEN = 256 * 1024 };
    int shm = th_maps_local();
    rdmx_worker_t *w2 = th_worker(ctx, 0);
    rdmx_kv_params_t p = {.field_mask = RDMX_KV_PARAM_FIELD_TIMEOUT,
                          .timeout_ms = 60000 * TH_SLOW};
    rewriter_t r = {.len = LEN};
    rdmx_kv_meta_t m;
    rdmx_status_t st;
    uint64_t v = 0, c0, g0, a0, gets = 0, misses = 0, torn = 0, again;
    pthread_t t;
    double end, cap;

    CHECK_OK(rdmx_kv_create(w2, big.addr, &p, &r.c));
    CHECK_OK(rdmx_kv_wait_ready(r.c, 20000 * TH_SLOW));
    if (shm) {
        mapped_race(r.c, 0, LEN);
        mapped_race(r.c, 1, LEN);
        mapped_race(r.c, 2, LEN);
    }

    /* blocking GETs while another thread rewrites the key: every value
     * is one version, whole; over shm some copies met a rewrite and were
     * asked again */
    r.buf = th_alloc(LEN);
    c0 = stat_now(kv, "cmd_get");
    g0 = stat_now(kv, "get_mapped");
    a0 = stat_now(kv, "get_again");
    CHECK(pthread_create(&t, NULL, rewriter_main, &r) == 0);
    /* a second at least; over shm until a copy met a rewrite, for at
     * most 20 s (under TSan a second can pass with the copies and the
     * rewrites taking turns) */
    end = th_now_ms() + 1000;
    cap = end + 19000;
    for (;;) {
        if (th_now_ms() >= end) {
            if (!shm || end >= cap || stat_now(kv, "get_again") != a0)
                break;
            end += 1000;
        }
        st = rdmx_kv_get(kv, "map:churn", 9, dst, LEN, NULL, &m);
        if (st == RDMX_ERR_NOT_FOUND) {
            misses++; /* (before the first PUT) */
            continue;
        }
        EXPECT_OK(st);
        if (st != RDMX_OK)
            break;
        gets++;
        if (m.length != LEN || ver_check(dst, LEN, &v) >= 0)
            torn++;
    }
    __atomic_store_n(&r.stop, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    EXPECT_OK(r.st);
    again = stat_now(kv, "cmd_get") - c0 - gets - misses;
    EXPECT(again == stat_now(kv, "get_again") - a0,
           "mapped: %" PRIu64 " GETs more than asked, %" PRIu64
           " counted in get_again",
           again, stat_now(kv, "get_again") - a0);
    th_log("  mapped: %" PRIu64 " GETs of %d KiB during %" PRIu64
           " rewrites: %" PRIu64 " mapped, %" PRIu64 " asked again",
           gets, LEN / 1024, r.puts, stat_now(kv, "get_mapped") - g0, again);
    EXPECT(torn == 0, "mapped: %" PRIu64 " of %" PRIu64 " GETs torn", torn,
           gets);
    EXPECT(gets > 0 && r.puts > 0, "mapped: %" PRIu64 " GETs, %" PRIu64 " PUTs",
           gets, r.puts);
    if (shm)
        EXPECT(again > 0 && again < gets,
               "mapped: %" PRIu64 " of %" PRIu64 " GETs during rewrites "
               "were asked again (want some, not all)",
               again, gets);
    else
        EXPECT(again == 0 && stat_now(kv, "get_mapped") == g0,
               "mapped over %s: %" PRIu64 " asked again, %" PRIu64
               " mapped (want none)",
               th_transport_env(), again, stat_now(kv, "get_mapped") - g0);
    free(r.buf);
    rdmx_kv_destroy(r.c);
    rdmx_worker_destroy(w2);
}

/* ------------------------------------------------------------------------ */
/* ttl                                                                      */
/* ------------------------------------------------------------------------ */

/* One pass of the TTL checks. Returns 1 if the machine stalled so long that
 * a timing precondition did not hold (the caller tries again), 0 if every
 * check ran. Expiry is absolute on the server's clock from the moment it
 * handles the request, so: a value read back within the TTL of the start
 * of its PUT must be there; one looked for 2 x TTL after its PUT (or
 * TOUCH) returned must be gone. */
static int ttl_pass(int pass)
{
    const unsigned ttl = 200 * TH_SLOW;
    rdmx_kv_op_params_t o = put_opts(RDMX_KV_PUT_SET, 0, ttl, 0);
    rdmx_kv_meta_t m;
    char buf[16], k[4][16];
    rdmx_status_t st;
    double t0, t1;

    for (int i = 0; i < 4; i++)
        snprintf(k[i], sizeof(k[i]), "ttl:%c%d", 'a' + i, pass);

    /* expires */
    t0 = th_now_ms();
    EXPECT_OK(rdmx_kv_put(kv, k[0], strlen(k[0]), "abc", 3, &o, NULL));
    st = rdmx_kv_get(kv, k[0], strlen(k[0]), buf, sizeof(buf), NULL, &m);
    if (th_now_ms() - t0 >= ttl)
        return 1;
    EXPECT(st == RDMX_OK, "get right after a put with TTL %u ms: %s", ttl,
           rdmx_status_name(st));
    th_sleep_ms(2 * ttl);
    EXPECT_ST(rdmx_kv_get(kv, k[0], strlen(k[0]), buf, sizeof(buf), NULL, &m),
              RDMX_ERR_NOT_FOUND);
    EXPECT_ST(rdmx_kv_exists(kv, k[0], strlen(k[0])), RDMX_ERR_NOT_FOUND);
    EXPECT_ST(rdmx_kv_touch(kv, k[0], strlen(k[0]), 0), RDMX_ERR_NOT_FOUND);

    /* touch 0 removes the TTL; the version stays */
    {
        uint64_t cas = 0;
        t0 = th_now_ms();
        EXPECT_OK(rdmx_kv_put(kv, k[1], strlen(k[1]), "abc", 3, &o, &cas));
        st = rdmx_kv_touch(kv, k[1], strlen(k[1]), 0);
        if (th_now_ms() - t0 >= ttl)
            return 1;
        EXPECT(st == RDMX_OK, "touch right after the put: %s",
               rdmx_status_name(st));
        th_sleep_ms(2 * ttl);
        EXPECT_OK(
            rdmx_kv_get(kv, k[1], strlen(k[1]), buf, sizeof(buf), NULL, &m));
        EXPECT(m.length == 3 && memcmp(buf, "abc", 3) == 0,
               "touched value changed");
        EXPECT(m.cas == cas,
               "touch changed the version %" PRIu64 " -> %" PRIu64, cas, m.cas);
    }

    /* touch extends: TTL -> 5 x TTL */
    t0 = th_now_ms();
    EXPECT_OK(rdmx_kv_put(kv, k[2], strlen(k[2]), "abc", 3, &o, NULL));
    t1 = th_now_ms();
    st = rdmx_kv_touch(kv, k[2], strlen(k[2]), 5 * ttl);
    if (th_now_ms() - t0 >= ttl)
        return 1;
    EXPECT(st == RDMX_OK, "touch right after the put: %s",
           rdmx_status_name(st));
    th_sleep_ms(2 * ttl);
    st = rdmx_kv_exists(kv, k[2], strlen(k[2]));
    if (th_now_ms() - t1 >= 5 * ttl)
        return 1;
    EXPECT(st == RDMX_OK, "2 x TTL after a touch to 5 x TTL: %s",
           rdmx_status_name(st));
    t1 = th_now_ms();
    th_sleep_ms((unsigned)(5 * ttl + ttl - (t1 - t0)));
    EXPECT_ST(rdmx_kv_exists(kv, k[2], strlen(k[2])), RDMX_ERR_NOT_FOUND);

    /* touch sets a TTL on a key that had none */
    EXPECT_OK(rdmx_kv_put(kv, k[3], strlen(k[3]), "abc", 3, NULL, NULL));
    EXPECT_OK(rdmx_kv_touch(kv, k[3], strlen(k[3]), ttl));
    th_sleep_ms(2 * ttl);
    EXPECT_ST(rdmx_kv_get(kv, k[3], strlen(k[3]), buf, sizeof(buf), NULL, &m),
              RDMX_ERR_NOT_FOUND);

    EXPECT_ST(rdmx_kv_touch(kv, "ttl:none", 8, 100), RDMX_ERR_NOT_FOUND);
    return 0;
}

static void part_ttl(void)
{
    for (int pass = 0;; pass++) {
        if (ttl_pass(pass) == 0)
            return;
        th_log("  ttl: the machine stalled past a TTL, pass %d again",
               pass + 1);
        EXPECT(pass < 4, "5 passes stalled");
    }
}

/* ------------------------------------------------------------------------ */
/* cas, add, replace, delete                                                */
/* ------------------------------------------------------------------------ */

static void part_cas(void)
{
    rdmx_kv_op_params_t o;
    uint64_t c1 = 0, c2 = 0, c3 = 0;
    rdmx_kv_meta_t m;
    char buf[16];

    EXPECT_OK(rdmx_kv_put(kv, "cas:k", 5, "one", 3, NULL, &c1));
    EXPECT_OK(rdmx_kv_put(kv, "cas:k", 5, "two", 3, NULL, &c2));
    EXPECT(c1 != 0 && c2 != 0 && c1 != c2, "versions %" PRIu64 ", %" PRIu64, c1,
           c2);
    EXPECT_OK(rdmx_kv_get(kv, "cas:k", 5, buf, sizeof(buf), NULL, &m));
    EXPECT_EQ(m.cas, c2);

    o = put_opts(RDMX_KV_PUT_CAS, 0, 0, c1);
    EXPECT_ST(rdmx_kv_put(kv, "cas:k", 5, "three", 5, &o, NULL),
              RDMX_ERR_EXISTS);
    EXPECT_OK(rdmx_kv_get(kv, "cas:k", 5, buf, sizeof(buf), NULL, &m));
    EXPECT(m.length == 3 && memcmp(buf, "two", 3) == 0 && m.cas == c2,
           "a refused CAS write changed the value");
    o.cas = c2;
    EXPECT_OK(rdmx_kv_put(kv, "cas:k", 5, "three", 5, &o, &c3));
    EXPECT(c3 != c2 && c3 != 0, "CAS write returned version %" PRIu64, c3);
    EXPECT_OK(rdmx_kv_get(kv, "cas:k", 5, buf, sizeof(buf), NULL, &m));
    EXPECT(m.length == 5 && memcmp(buf, "three", 5) == 0 && m.cas == c3,
           "CAS write not stored");
    o.cas = c3;
    EXPECT_ST(rdmx_kv_put(kv, "cas:absent", 10, "x", 1, &o, NULL),
              RDMX_ERR_NOT_FOUND);
    EXPECT_ST(rdmx_kv_exists(kv, "cas:absent", 10), RDMX_ERR_NOT_FOUND);

    /* ADD: only if absent */
    o = put_opts(RDMX_KV_PUT_ADD, 7, 0, 0);
    EXPECT_ST(rdmx_kv_put(kv, "cas:k", 5, "add", 3, &o, NULL), RDMX_ERR_EXISTS);
    EXPECT_OK(rdmx_kv_put(kv, "cas:add", 7, "add", 3, &o, NULL));
    EXPECT_OK(rdmx_kv_get(kv, "cas:add", 7, buf, sizeof(buf), NULL, &m));
    EXPECT(m.length == 3 && memcmp(buf, "add", 3) == 0 && m.flags == 7,
           "ADD not stored");

    /* REPLACE: only if present */
    o = put_opts(RDMX_KV_PUT_REPLACE, 0, 0, 0);
    EXPECT_ST(rdmx_kv_put(kv, "cas:rep", 7, "rep", 3, &o, NULL),
              RDMX_ERR_NOT_FOUND);
    EXPECT_ST(rdmx_kv_exists(kv, "cas:rep", 7), RDMX_ERR_NOT_FOUND);
    EXPECT_OK(rdmx_kv_put(kv, "cas:add", 7, "rep", 3, &o, NULL));
    EXPECT_OK(rdmx_kv_get(kv, "cas:add", 7, buf, sizeof(buf), NULL, &m));
    EXPECT(memcmp(buf, "rep", 3) == 0 && m.flags == 0, "REPLACE not stored");

    /* delete with a version */
    EXPECT_ST(rdmx_kv_delete(kv, "cas:k", 5, c2), RDMX_ERR_EXISTS);
    EXPECT_OK(rdmx_kv_exists(kv, "cas:k", 5));
    EXPECT_OK(rdmx_kv_delete(kv, "cas:k", 5, c3));
    EXPECT_ST(rdmx_kv_exists(kv, "cas:k", 5), RDMX_ERR_NOT_FOUND);
    EXPECT_ST(rdmx_kv_delete(kv, "cas:k", 5, 0), RDMX_ERR_NOT_FOUND);
    EXPECT_OK(rdmx_kv_delete(kv, "cas:add", 7, 0));
    EXPECT_ST(rdmx_kv_get(kv, "cas:add", 7, buf, sizeof(buf), NULL, &m),
              RDMX_ERR_NOT_FOUND);
}

/* ------------------------------------------------------------------------ */
/* incr, exists, mget, mput, prefix, flush                                  */
/* ------------------------------------------------------------------------ */

static void expect_text(const char *key, const char *want)
{
    char buf[64];
    rdmx_kv_meta_t m;

    EXPECT_OK(rdmx_kv_get(kv, key, strlen(key), buf, sizeof(buf), NULL, &m));
    EXPECT(m.length == strlen(want) && memcmp(buf, want, m.length) == 0,
           "%s holds '%.*s', want '%s'", key, (int)m.length, buf, want);
}

static void part_incr(void)
{
    uint64_t v = 0;

    EXPECT_OK(rdmx_kv_put(kv, "n", 1, "10", 2, NULL, NULL));
    EXPECT_OK(rdmx_kv_incr(kv, "n", 1, 5, 0, &v));
    EXPECT_EQ(v, 15);
    expect_text("n", "15");
    EXPECT_OK(rdmx_kv_incr(kv, "n", 1, 100, 0, &v));
    EXPECT_EQ(v, 115);
    expect_text("n", "115");
    EXPECT_OK(rdmx_kv_incr(kv, "n", 1, 15, 1, &v));
    EXPECT_EQ(v, 100);
    EXPECT_OK(rdmx_kv_incr(kv, "n", 1, 1000, 1, &v));
    EXPECT_EQ(v, 0);
    expect_text("n", "0");
    EXPECT_OK(rdmx_kv_put(kv, "n", 1, "18446744073709551615", 20, NULL, NULL));
    EXPECT_OK(rdmx_kv_incr(kv, "n", 1, 2, 0, &v));
    EXPECT_EQ(v, 1);
    expect_text("n", "1");
    EXPECT_OK(rdmx_kv_put(kv, "n", 1, "18446744073709551610", 20, NULL, NULL));
    EXPECT_OK(rdmx_kv_incr(kv, "n", 1, 5, 0, &v));
    EXPECT_EQ(v, UINT64_MAX);
    expect_text("n", "18446744073709551615");
    EXPECT_OK(rdmx_kv_incr(kv, "n", 1, UINT64_MAX, 1, &v));
    EXPECT_EQ(v, 0);

    EXPECT_OK(rdmx_kv_put(kv, "s", 1, "abc", 3, NULL, NULL));
    EXPECT_ST(rdmx_kv_incr(kv, "s", 1, 1, 0, &v), RDMX_ERR_INVALID);
    EXPECT_ST(rdmx_kv_incr(kv, "s", 1, 1, 1, &v), RDMX_ERR_INVALID);
    expect_text("s", "abc");
    EXPECT_OK(rdmx_kv_put(kv, "s", 1, "12a", 3, NULL, NULL));
    EXPECT_ST(rdmx_kv_incr(kv, "s", 1, 1, 0, &v), RDMX_ERR_INVALID);
    EXPECT_OK(rdmx_kv_put(kv, "s", 1, "", 0, NULL, NULL));
    EXPECT_ST(rdmx_kv_incr(kv, "s", 1, 1, 0, &v), RDMX_ERR_INVALID);
    EXPECT_OK(rdmx_kv_put(kv, "s", 1, "99999999999999999999", 20, NULL, NULL));
    EXPECT_ST(rdmx_kv_incr(kv, "s", 1, 1, 0, &v), RDMX_ERR_INVALID);
    EXPECT_OK(rdmx_kv_put(kv, "s", 1, "000000000000000000001", 21, NULL, NULL));
    EXPECT_ST(rdmx_kv_incr(kv, "s", 1, 1, 0, &v), RDMX_ERR_INVALID);
    EXPECT_OK(rdmx_kv_put(kv, "s", 1, "007", 3, NULL, NULL));
    EXPECT_OK(rdmx_kv_incr(kv, "s", 1, 1, 0, &v));
    EXPECT_EQ(v, 8);
    expect_text("s", "8");
    EXPECT_ST(rdmx_kv_incr(kv, "incr:absent", 11, 1, 0, &v),
              RDMX_ERR_NOT_FOUND);
    EXPECT_ST(rdmx_kv_exists(kv, "incr:absent", 11), RDMX_ERR_NOT_FOUND);

    /* flags and version: flags kept, a new version; bytes follow the
     * number of digits */
    {
        char s0[4096], s1[4096];
        uint64_t c0 = 0;
        rdmx_kv_op_params_t o = put_opts(RDMX_KV_PUT_SET, 77, 0, 0);
        rdmx_kv_meta_t m;
        char buf[32];

        stats_of(kv, s0, sizeof(s0));
        EXPECT_OK(rdmx_kv_put(kv, "incr:b", 6, "10", 2, &o, &c0));
        EXPECT_OK(rdmx_kv_incr(kv, "incr:b", 6, 90, 0, &v));
        EXPECT_EQ(v, 100);
        EXPECT_OK(rdmx_kv_get(kv, "incr:b", 6, buf, sizeof(buf), NULL, &m));
        EXPECT(m.flags == 77 && m.cas != c0 && m.length == 3,
               "after incr: flags %u, cas %" PRIu64 " (was %" PRIu64
               "), length %zu",
               m.flags, m.cas, c0, m.length);
        stats_of(kv, s1, sizeof(s1));
        EXPECT_EQ(stat_of(s1, "bytes") - stat_of(s0, "bytes"), 3);
        EXPECT_EQ(stat_of(s1, "curr_items") - stat_of(s0, "curr_items"), 1);
        EXPECT_OK(rdmx_kv_incr(kv, "incr:b", 6, 1000, 1, &v));
        EXPECT_EQ(v, 0);
        stats_of(kv, s1, sizeof(s1));
        EXPECT_EQ(stat_of(s1, "bytes") - stat_of(s0, "bytes"), 1);
        EXPECT_EQ(stat_of(s1, "curr_items") - stat_of(s0, "curr_items"), 1);
    }
}

static void part_batches(void)
{
    enum { N = 8 };
    static char keys[N][16];
    static uint8_t bufs[N][20000];
    rdmx_kv_mget_t g[N];
    rdmx_kv_mput_t p[N];
    const size_t vlen[N] = {10, 0, 3000, 5000, 7, 16000, 1, 100};
    const void *kp[N];
    size_t kl[N], hits = 0;

    /* mput: 6 new keys and an ADD on one of them that must fail */
    memset(p, 0, sizeof(p));
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "batch:%d", i);
        th_fill(bufs[i], vlen[i], th_seed(21, (uint64_t)i, 0));
    }
    for (int i = 0; i < 6; i++) {
        p[i].key = keys[i];
        p[i].klen = strlen(keys[i]);
        p[i].value = bufs[i];
        p[i].vlen = vlen[i];
        p[i].flags = (uint32_t)i + 100;
    }
    EXPECT_OK(rdmx_kv_mput(kv, p, 6));
    for (int i = 0; i < 6; i++)
        EXPECT(p[i].status == RDMX_OK && p[i].cas != 0,
               "mput item %d: %s, cas %" PRIu64, i,
               rdmx_status_name(p[i].status), p[i].cas);
    p[0].mode = RDMX_KV_PUT_ADD;
    p[1].mode = RDMX_KV_PUT_REPLACE;
    p[0].cas = p[1].cas = 0; /* an input too (as before: none) */
    p[1].value = "r";
    p[1].vlen = 1;
    EXPECT_ST(rdmx_kv_mput(kv, p, 2), RDMX_ERR_EXISTS);
    EXPECT(p[0].status == RDMX_ERR_EXISTS && p[1].status == RDMX_OK,
           "mput ADD/REPLACE: %s, %s", rdmx_status_name(p[0].status),
           rdmx_status_name(p[1].status));

    /* mget: hits, misses, a too-small buffer, an exact one */
    memset(g, 0, sizeof(g));
    static uint8_t out[N][20000];
    const size_t cap[N] = {10, 5, 2999, 5000, 64, 16000, 1, 100};
    for (int i = 0; i < N; i++) {
        g[i].key = keys[i];
        g[i].klen = strlen(keys[i]);
        g[i].buf = out[i];
        g[i].capacity = cap[i];
        memset(out[i], CANARY, sizeof(out[i]));
    }
    rdmx_status_t st = rdmx_kv_mget(kv, g, N);
    EXPECT(st == RDMX_OK || st == RDMX_ERR_NOT_FOUND || st == RDMX_ERR_TOO_BIG,
           "mget returned %s", rdmx_status_name(st));
    for (int i = 0; i < N; i++) {
        size_t want_len = i == 1 ? 1 : vlen[i];
        if (i >= 6) {
            EXPECT(g[i].status == RDMX_ERR_NOT_FOUND, "mget %d: %s", i,
                   rdmx_status_name(g[i].status));
            EXPECT(not_byte(out[i], 0, sizeof(out[i]), CANARY) < 0,
                   "mget %d: a miss wrote the buffer", i);
        } else if (i == 2) {
            EXPECT(g[i].status == RDMX_ERR_TOO_BIG && g[i].meta.length == 3000,
                   "mget %d: %s, length %zu", i, rdmx_status_name(g[i].status),
                   g[i].meta.length);
            EXPECT(not_byte(out[i], 0, sizeof(out[i]), CANARY) < 0,
                   "mget %d: a too-small buffer was written", i);
        } else {
            EXPECT(g[i].status == RDMX_OK && g[i].meta.length == want_len &&
                       g[i].meta.flags == (uint32_t)(i + 100),
                   "mget %d: %s, length %zu, flags %u", i,
                   rdmx_status_name(g[i].status), g[i].meta.length,
                   g[i].meta.flags);
            if (i == 1)
                EXPECT(out[i][0] == 'r', "mget 1: replaced value");
            else
                EXPECT(th_check(out[i], want_len, th_seed(21, (uint64_t)i, 0)) <
                           0,
                       "mget %d: value differs", i);
            EXPECT(not_byte(out[i], want_len, sizeof(out[i]), CANARY) < 0,
                   "mget %d: wrote past the value", i);
        }
    }

    /* exists */
    EXPECT_OK(rdmx_kv_exists(kv, keys[0], strlen(keys[0])));
    EXPECT_ST(rdmx_kv_exists(kv, keys[7], strlen(keys[7])), RDMX_ERR_NOT_FOUND);

    /* prefix: batch:0..5 present, 6 absent, then 0 again */
    for (int i = 0; i < N; i++) {
        kp[i] = keys[i < 7 ? i : 0];
        kl[i] = strlen(kp[i]);
    }
    EXPECT_OK(rdmx_kv_prefix_hits(kv, kp, kl, N, &hits));
    EXPECT_EQ(hits, 6);
    EXPECT_OK(rdmx_kv_prefix_hits(kv, kp, kl, 4, &hits));
    EXPECT_EQ(hits, 4);
    EXPECT_OK(rdmx_kv_prefix_hits(kv, kp + 6, kl + 6, 2, &hits));
    EXPECT_EQ(hits, 0);

    /* batches larger than one wire batch (4096 keys per server) */
    {
        enum { L = 5000 };
        rdmx_kv_mput_t *lp = th_alloc(L * sizeof(*lp));
        rdmx_kv_mget_t *lg = th_alloc(L * sizeof(*lg));
        static char lk[L][16];
        static uint64_t lv[L], lo[L];
        int unsent = 0, first = -1;

        memset(lp, 0, L * sizeof(*lp));
        memset(lg, 0, L * sizeof(*lg));
        for (int i = 0; i < L; i++) {
            snprintf(lk[i], sizeof(lk[i]), "lb:%d", i);
            lv[i] = th_seed(22, (uint64_t)i, 0);
            lp[i].key = lk[i];
            lp[i].klen = strlen(lk[i]);
            lp[i].value = &lv[i];
            lp[i].vlen = sizeof(lv[i]);
            lp[i].status = RDMX_ERR_INTERNAL; /* must be overwritten */
        }
        rdmx_status_t st1 = rdmx_kv_mput(kv, lp, L);
        for (int i = 0; i < L; i++)
            if (lp[i].status != RDMX_OK ||
                rdmx_kv_exists(kv, lk[i], strlen(lk[i])) != RDMX_OK) {
                unsent++;
                if (first < 0)
                    first = i;
            }
        th_log("  mput of %d keys: %s, %d not stored (first: %d, status %s)", L,
               rdmx_status_name(st1), unsent, first,
               first >= 0 ? rdmx_status_name(lp[first].status) : "-");
        /* (reported below; store what is missing so mget can be tried) */
        int mput_unsent = unsent, mput_first = first;
        rdmx_status_t mput_st = st1,
                      mput_item = first >= 0 ? lp[first].status : RDMX_OK;
        for (int i = 0; i < L; i++)
            if (rdmx_kv_exists(kv, lk[i], strlen(lk[i])) != RDMX_OK)
                EXPECT_OK(rdmx_kv_put(kv, lk[i], strlen(lk[i]), &lv[i],
                                      sizeof(lv[i]), NULL, NULL));
        for (int i = 0; i < L; i++) {
            lg[i].key = lk[i];
            lg[i].klen = strlen(lk[i]);
            lg[i].buf = &lo[i];
            lg[i].capacity = sizeof(lo[i]);
        }
        st1 = rdmx_kv_mget(kv, lg, L);
        unsent = 0;
        first = -1;
        for (int i = 0; i < L; i++)
            if (lg[i].status != RDMX_OK || lo[i] != lv[i]) {
                unsent++;
                if (first < 0)
                    first = i;
            }
        th_log("  mget of %d keys: %s, %d wrong (first: %d, status %s)", L,
               rdmx_status_name(st1), unsent, first,
               first >= 0 ? rdmx_status_name(lg[first].status) : "-");
        rdmx_status_t fst = first >= 0 ? lg[first].status : RDMX_OK;
        free(lp);
        free(lg);
        EXPECT(mput_unsent == 0 && mput_st == RDMX_OK,
               "mput of %d keys: returned %s, %d keys not stored (first "
               "%d: status %s)",
               L, rdmx_status_name(mput_st), mput_unsent, mput_first,
               rdmx_status_name(mput_item));
        EXPECT(unsent == 0 && st1 == RDMX_OK,
               "mget of %d keys: returned %s, %d keys wrong (first %d: "
               "status %s)",
               L, rdmx_status_name(st1), unsent, first, rdmx_status_name(fst));
    }

    /* flush */
    EXPECT_OK(rdmx_kv_flush(kv));
    for (int i = 0; i < 6; i++)
        EXPECT_ST(rdmx_kv_exists(kv, keys[i], strlen(keys[i])),
                  RDMX_ERR_NOT_FOUND);
    EXPECT_OK(rdmx_kv_prefix_hits(kv, kp, kl, N, &hits));
    EXPECT_EQ(hits, 0);
    {
        char s[4096];
        stats_of(kv, s, sizeof(s));
        EXPECT_EQ(stat_of(s, "curr_items"), 0);
        EXPECT_EQ(stat_of(s, "bytes"), 0);
    }
}

/* ------------------------------------------------------------------------ */
/* stats                                                                    */
/* ------------------------------------------------------------------------ */

static void part_stats(void)
{
    enum { N = 50, GETS = 30, MISSES = 20, DELS = 5 };
    char s0[4096], s1[4096], key[32];
    uint64_t total = 0, hits = 0, misses = 0;
    uint8_t *rbuf = (uint8_t *)rdmx_mr_addr(dst_mr) + REG_OFFSET;
    rdmx_kv_meta_t m;

    EXPECT_OK(rdmx_kv_flush(kv));
    stats_of(kv, s0, sizeof(s0));
    EXPECT_EQ(stat_of(s0, "curr_items"), 0);
    EXPECT_EQ(stat_of(s0, "bytes"), 0);
    EXPECT_EQ(stat_of(s0, "cmd_get"),
              stat_of(s0, "get_hits") + stat_of(s0, "get_misses"));
    for (int i = 0; i < N; i++) {
        size_t len = (size_t)i * 211 + 1;
        snprintf(key, sizeof(key), "stat:%d", i);
        th_fill(src, len, th_seed(31, (uint64_t)i, 0));
        EXPECT_OK(rdmx_kv_put(kv, key, strlen(key), src, len, NULL, NULL));
        total += len;
    }
    for (int i = 0; i < GETS; i++, hits++) {
        size_t len = (size_t)i * 211 + 1;
        snprintf(key, sizeof(key), "stat:%d", i);
        if (i % 2)
            EXPECT_OK(rdmx_kv_get(kv, key, strlen(key), rbuf, len,
                                  KV_MR(dst_mr), &m));
        else
            EXPECT_OK(rdmx_kv_get(kv, key, strlen(key), dst, len, NULL, &m));
    }
    for (int i = 0; i < MISSES; i++, misses++) {
        snprintf(key, sizeof(key), "stat:miss:%d", i);
        EXPECT_ST(rdmx_kv_get(kv, key, strlen(key), dst, 10, NULL, &m),
                  RDMX_ERR_NOT_FOUND);
    }
    {
        static char mk[10][32];
        rdmx_kv_mget_t g[10];
        memset(g, 0, sizeof(g));
        for (int i = 0; i < 10; i++) {
            snprintf(mk[i], sizeof(mk[i]), i < 5 ? "stat:%d" : "stat:no:%d", i);
            g[i].key = mk[i];
            g[i].klen = strlen(mk[i]);
            g[i].buf = dst + (size_t)i * 2048;
            g[i].capacity = 2048;
        }
        (void)rdmx_kv_mget(kv, g, 10);
        for (int i = 0; i < 10; i++)
            EXPECT(g[i].status == (i < 5 ? RDMX_OK : RDMX_ERR_NOT_FOUND),
                   "mget %d: %s", i, rdmx_status_name(g[i].status));
        hits += 5;
        misses += 5;
    }
    EXPECT_OK(rdmx_kv_exists(kv, "stat:1", 6)); /* counts nothing */
    /* an overwrite with another size */
    EXPECT_OK(rdmx_kv_put(kv, "stat:0", 6, src, 5000, NULL, NULL));
    total += 5000 - 1;
    for (int i = N - DELS; i < N; i++) {
        snprintf(key, sizeof(key), "stat:%d", i);
        EXPECT_OK(rdmx_kv_delete(kv, key, strlen(key), 0));
        total -= (size_t)i * 211 + 1;
    }
    EXPECT_ST(rdmx_kv_delete(kv, "stat:no", 7, 0), RDMX_ERR_NOT_FOUND);
    EXPECT_ST(rdmx_kv_delete(kv, "stat:no", 7, 0), RDMX_ERR_NOT_FOUND);

    stats_of(kv, s1, sizeof(s1));
#define D(name) (stat_of(s1, name) - stat_of(s0, name))
    th_log("  stats: cmd_get %" PRIu64 " = hits %" PRIu64 " + misses %" PRIu64
           ", curr_items %" PRIu64 ", bytes %" PRIu64,
           stat_of(s1, "cmd_get"), stat_of(s1, "get_hits"),
           stat_of(s1, "get_misses"), stat_of(s1, "curr_items"),
           stat_of(s1, "bytes"));
    EXPECT_EQ(stat_of(s1, "cmd_get"),
              stat_of(s1, "get_hits") + stat_of(s1, "get_misses"));
    EXPECT_EQ(D("get_hits"), hits);
    EXPECT_EQ(D("get_misses"), misses);
    EXPECT_EQ(D("cmd_get"), hits + misses);
    EXPECT_EQ(D("cmd_set"), N + 1);
    EXPECT_EQ(D("total_items"), N + 1);
    EXPECT_EQ(D("delete_hits"), DELS);
    EXPECT_EQ(D("delete_misses"), 2);
    EXPECT_EQ(stat_of(s1, "curr_items"), N - DELS);
    EXPECT_EQ(stat_of(s1, "bytes"), total);
    EXPECT_EQ(stat_of(s1, "limit_maxbytes"), 256 * TH_MIB);
    EXPECT_EQ(stat_of(s1, "bad_requests"), stat_of(s0, "bad_requests"));
#undef D
}

/* ------------------------------------------------------------------------ */
/* limits                                                                   */
/* ------------------------------------------------------------------------ */

static void expect_refused(rdmx_status_t st, const char *what)
{
    const char *d = rdmx_error_detail();

    EXPECT(st == RDMX_ERR_TOO_BIG || st == RDMX_ERR_INVALID,
           "%s: %s (want TOO_BIG or INVALID); detail: %s", what,
           rdmx_status_name(st), d);
    EXPECT(d[0] != '\0', "%s: %s without a detail", what, rdmx_status_name(st));
    th_log("  %s: %s: %s", what, rdmx_status_name(st), d);
}

static void part_limits(void)
{
    static uint8_t k[65536 + 1];
    uint8_t *rsrc = (uint8_t *)rdmx_mr_addr(src_mr) + REG_OFFSET;
    char buf[64], detail[512], stale[512];
    rdmx_kv_meta_t m;
    uint64_t v;
    rdmx_status_t st;

    th_fill(k, sizeof(k), 41);
    /* key one byte over --max-key */
    expect_refused(rdmx_kv_put(kv, k, MAX_KEY + 1, "v", 1, NULL, NULL),
                   "put, key over --max-key");
    snprintf(detail, sizeof(detail), "%s", rdmx_error_detail());
    expect_refused(rdmx_kv_get(kv, k, MAX_KEY + 1, buf, sizeof(buf), NULL, &m),
                   "get, key over --max-key");
    expect_refused(rdmx_kv_exists(kv, k, MAX_KEY + 1),
                   "exists, key over --max-key");
    expect_refused(rdmx_kv_delete(kv, k, MAX_KEY + 1, 0),
                   "delete, key over --max-key");
    expect_refused(rdmx_kv_touch(kv, k, MAX_KEY + 1, 0),
                   "touch, key over --max-key");
    expect_refused(rdmx_kv_incr(kv, k, MAX_KEY + 1, 1, 0, &v),
                   "incr, key over --max-key");
    /* the next ordinary miss on the same connection must not repeat the
     * old error's message */
    EXPECT_ST(rdmx_kv_get(kv, "limits:absent", 13, buf, sizeof(buf), NULL, &m),
              RDMX_ERR_NOT_FOUND);
    /* (checked at the end of the part) */
    snprintf(stale, sizeof(stale), "%s", rdmx_error_detail());
    EXPECT_OK(rdmx_kv_put(kv, k, MAX_KEY, "v", 1, NULL, NULL));
    EXPECT_OK(rdmx_kv_get(kv, k, MAX_KEY, buf, sizeof(buf), NULL, &m));

    /* keys the client refuses */
    expect_refused(rdmx_kv_put(kv, k, 0, "v", 1, NULL, NULL), "put, empty key");
    expect_refused(rdmx_kv_get(kv, k, 0, buf, sizeof(buf), NULL, &m),
                   "get, empty key");
    expect_refused(rdmx_kv_put(kv, k, 65536, "v", 1, NULL, NULL),
                   "put, 64 KiB key");
    expect_refused(rdmx_kv_exists(kv, k, 65536), "exists, 64 KiB key");

    /* value one byte over --max-value: inline and by RDMA read */
    th_fill(src, BIG_VALUE + 1, 42);
    st = rdmx_kv_put(kv, "limits:v", 8, src, BIG_VALUE + 1, NULL, NULL);
    EXPECT(st == RDMX_ERR_TOO_BIG && rdmx_error_detail()[0],
           "inline value over --max-value: %s (%s)", rdmx_status_name(st),
           rdmx_error_detail());
    th_log("  inline put over --max-value: %s", rdmx_error_detail());
    th_fill(rsrc, BIG_VALUE + 1, 42);
    st = rdmx_kv_put(kv, "limits:v", 8, rsrc, BIG_VALUE + 1, KV_MR(src_mr),
                     NULL);
    EXPECT(st == RDMX_ERR_TOO_BIG && rdmx_error_detail()[0],
           "registered value over --max-value: %s (%s)", rdmx_status_name(st),
           rdmx_error_detail());
    th_log("  registered put over --max-value: %s", rdmx_error_detail());
    /* a request over the server's message limit: the message names the
     * server's max_value, not its raw message limit */
    st = rdmx_kv_put(kv, "limits:v", 8, src, BIG_VALUE + 96 * TH_KIB, NULL,
                     NULL);
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)BIG_VALUE);
    EXPECT(st == RDMX_ERR_TOO_BIG && strstr(rdmx_error_detail(), buf) &&
               strstr(rdmx_error_detail(), "max_value"),
           "request over the message limit: %s (%s; want the max_value %s)",
           rdmx_status_name(st), rdmx_error_detail(), buf);
    th_log("  put over the message limit: %s", rdmx_error_detail());
    EXPECT_ST(rdmx_kv_exists(kv, "limits:v", 8), RDMX_ERR_NOT_FOUND);

    /* a buffer that is not inside the region given */
    th_fill(src, 10000, 43);
    EXPECT_OK(rdmx_kv_put(kv, "limits:r", 8, src, 10000, NULL, NULL));
    memset(dst, CANARY, 10000);
    st = rdmx_kv_get(kv, "limits:r", 8, dst, 10000, KV_MR(dst_mr), &m);
    th_log("  get into memory outside the region given: %s (%s)",
           rdmx_status_name(st), rdmx_error_detail());
    EXPECT(st == RDMX_ERR_INVALID || st == RDMX_ERR_OUT_OF_RANGE ||
               (st == RDMX_OK && th_check(dst, 10000, 43) < 0),
           "get into memory outside the region given: %s",
           rdmx_status_name(st));
    st = rdmx_kv_put(kv, "limits:r", 8, src, 10000, KV_MR(dst_mr), NULL);
    th_log("  put from memory outside the region given: %s (%s)",
           rdmx_status_name(st), rdmx_error_detail());
    EXPECT(
        st == RDMX_ERR_INVALID || st == RDMX_ERR_OUT_OF_RANGE || st == RDMX_OK,
        "put from memory outside the region given: %s", rdmx_status_name(st));
    EXPECT_OK(rdmx_kv_get(kv, "limits:r", 8, dst, 10000, NULL, &m));
    EXPECT(m.length == 10000 && th_check(dst, 10000, 43) < 0,
           "limits:r changed");

    /* and the server still works */
    EXPECT(kvd_alive(&big), "rdmx-kvd died");
    EXPECT_OK(rdmx_kv_put(kv, "limits:ok", 9, "fine", 4, NULL, NULL));
    expect_text("limits:ok", "fine");

    EXPECT(strstr(stale, "max_key") == NULL,
           "a NOT_FOUND get carries the detail of an earlier error: '%s' "
           "(earlier: '%s')",
           stale, detail);
}

/* ------------------------------------------------------------------------ */
/* channel options                                                          */
/* ------------------------------------------------------------------------ */

static int kv_states_ready;

static void kv_state_cb(rdmx_channel_t *ch, rdmx_channel_state_t state,
                        rdmx_breaker_state_t breaker, rdmx_status_t status,
                        void *arg)
{
    (void)ch, (void)breaker, (void)status;
    if (state == RDMX_CHANNEL_READY && arg == &kv_states_ready)
        kv_states_ready++;
}

/* rdmx_kv_params_t.channel reaches the channels: one call in flight and no
 * queue refuse a second GET at once; the state callback runs; the client's
 * own members win over the channel's. */
static void part_channel_options(void)
{
    rdmx_channel_params_t chp = {
        .field_mask = RDMX_CHANNEL_PARAM_FIELD_CREDITS |
                      RDMX_CHANNEL_PARAM_FIELD_QUEUE |
                      RDMX_CHANNEL_PARAM_FIELD_STATE_CB |
                      RDMX_CHANNEL_PARAM_FIELD_TIMEOUT,
        .credits = 1,
        .queue = 0,
        .state_cb = kv_state_cb,
        .state_arg = &kv_states_ready,
        .timeout_ms = 1, /* replaced by the client's timeout_ms */
    };
    rdmx_kv_params_t p = {
        .field_mask = RDMX_KV_PARAM_FIELD_CHANNEL | RDMX_KV_PARAM_FIELD_TIMEOUT,
        .channel = &chp,
        .timeout_ms = 60000 * TH_SLOW,
    };
    nb_seen_t a = {0}, b = {0};
    rdmx_kv_op_params_t oa = {.field_mask = RDMX_KV_OP_PARAM_FIELD_CB,
                              .cb = nb_seen_cb,
                              .arg = &a},
                        ob = {.field_mask = RDMX_KV_OP_PARAM_FIELD_CB,
                              .cb = nb_seen_cb,
                              .arg = &b};
    rdmx_kv_t *c = NULL;
    char buf[16];
    rdmx_kv_meta_t m;
    rdmx_status_t st;

    CHECK_OK(rdmx_kv_create(worker, big.addr, &p, &c));
    CHECK_OK(rdmx_kv_wait_ready(c, 20000 * TH_SLOW));
    EXPECT(kv_states_ready >= 1, "state_cb: %d READY reports",
           kv_states_ready);
    /* a 32 MiB PUT (copied at least three times on its way) takes far
     * longer than the channel's 1 ms: the client's 60 s applies */
    th_fill(src, 32 * TH_MIB, 7);
    EXPECT_OK(rdmx_kv_put(c, "chopt:big", 9, src, 32 * TH_MIB, NULL, NULL));
    EXPECT_OK(rdmx_kv_delete(c, "chopt:big", 9, 0));
    EXPECT_OK(rdmx_kv_put(c, "chopt:a", 7, "1", 1, NULL, NULL));
    EXPECT_ST(rdmx_kv_get_nb(c, "chopt:a", 7, buf, sizeof(buf), &oa),
              RDMX_INPROGRESS);
    st = rdmx_kv_get_nb(c, "chopt:a", 7, buf, sizeof(buf), &ob);
    EXPECT(st == RDMX_ERR_NO_RESOURCE,
           "second get_nb with credits 1, queue 0: %s (want NO_RESOURCE; "
           "%s)",
           rdmx_status_name(st), rdmx_error_detail());
    while (!a.done || (st == RDMX_INPROGRESS && !b.done))
        rdmx_worker_wait(worker, 10);
    EXPECT(a.status == RDMX_OK && a.length == 1, "first get_nb: %s",
           rdmx_status_name(a.status));
    /* free again */
    EXPECT_OK(rdmx_kv_get(c, "chopt:a", 7, buf, sizeof(buf), NULL, &m));
    rdmx_kv_destroy(c);

    /* the default client takes the second call too */
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    EXPECT_ST(rdmx_kv_get_nb(kv, "chopt:a", 7, buf, sizeof(buf), &oa),
              RDMX_INPROGRESS);
    EXPECT_ST(rdmx_kv_get_nb(kv, "chopt:a", 7, buf + 8, 8, &ob),
              RDMX_INPROGRESS);
    while (!a.done || !b.done)
        rdmx_worker_wait(worker, 10);
    EXPECT(a.status == RDMX_OK && b.status == RDMX_OK,
           "default client, two get_nb: %s, %s", rdmx_status_name(a.status),
           rdmx_status_name(b.status));
}

/* 64 PUTs, then 64 GETs of 1-3000 bytes, each but the last of a run with
 * RDMX_KV_OP_PARAM_FIELD_MORE: every callback once, every value back byte
 * for byte, and the worker sent batches (of every request sent as a
 * message). */
static void part_more(void)
{
    enum { N = 64 };
    static nb_seen_t seen[N];
    static char keys[N][16];
    static uint8_t vals[N][3000], got[N][3000];
    rdmx_worker_stats_t w0, w1;
    uint64_t want;
    int i;

    rdmx_worker_stats(worker, &w0);
    for (int round = 0; round < 2; round++) {
        memset(seen, 0, sizeof(seen));
        for (i = 0; i < N; i++) {
            rdmx_kv_op_params_t o = {.field_mask = RDMX_KV_OP_PARAM_FIELD_CB |
                                                   RDMX_KV_OP_PARAM_FIELD_MORE,
                                     .cb = nb_seen_cb,
                                     .arg = &seen[i],
                                     .more = i + 1 < N};
            size_t len = 1 + (size_t)i * 47 % 3000;

            snprintf(keys[i], sizeof(keys[i]), "more:%d", i);
            if (round == 0) {
                th_fill(vals[i], len, th_seed(17, (uint64_t)i, 0));
                EXPECT_ST(rdmx_kv_put_nb(kv, keys[i], strlen(keys[i]), vals[i],
                                         len, &o),
                          RDMX_INPROGRESS);
            } else {
                memset(got[i], 0, sizeof(got[i]));
                EXPECT_ST(rdmx_kv_get_nb(kv, keys[i], strlen(keys[i]), got[i],
                                         sizeof(got[i]), &o),
                          RDMX_INPROGRESS);
            }
        }
        for (i = 0; i < N; i++)
            while (!seen[i].done)
                rdmx_worker_wait(worker, 10);
        for (i = 0; i < N; i++) {
            size_t len = 1 + (size_t)i * 47 % 3000;

            EXPECT(seen[i].status == RDMX_OK, "%s %s: %s",
                   round ? "get" : "put", keys[i],
                   rdmx_status_name(seen[i].status));
            if (round == 1)
                EXPECT(
                    seen[i].length == len && memcmp(got[i], vals[i], len) == 0,
                    "get %s: %zu bytes, want %zu, %s", keys[i], seen[i].length,
                    len, memcmp(got[i], vals[i], len) ? "different" : "same");
        }
    }
    rdmx_worker_stats(worker, &w1);
    /* (over UCX's shared memory the GETs and the PUTs of values up to
     * ~200 bytes, the first 5, go by the server's ring instead:
     * docs/RPC_RINGS.md) */
    want = th_maps_local() ? N - 8 : N;
    EXPECT(w1.batches_sent > w0.batches_sent &&
               w1.msgs_batched - w0.msgs_batched >= want,
           "operations with more: %llu batches, %llu messages in them",
           (unsigned long long)(w1.batches_sent - w0.batches_sent),
           (unsigned long long)(w1.msgs_batched - w0.msgs_batched));
    th_log("  %d PUTs and %d GETs with more: %llu messages in %llu batches", N,
           N, (unsigned long long)(w1.msgs_batched - w0.msgs_batched),
           (unsigned long long)(w1.batches_sent - w0.batches_sent));
}

/* ------------------------------------------------------------------------ */
/* malformed                                                                */
/* ------------------------------------------------------------------------ */

static void le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A 32-byte request header (src/kv/proto.h), then @klen key bytes. */
static size_t hdr(uint8_t *p, uint8_t mode, uint16_t klen, uint64_t vlen)
{
    memset(p, 0, 32);
    p[0] = mode;
    le(p + 2, klen, 2);
    le(p + 24, vlen, 8);
    for (unsigned i = 0; i < klen; i++)
        p[32 + i] = (uint8_t)('a' + i % 26);
    return 32 + (size_t)klen;
}

static size_t batch_hdr(uint8_t *p, uint32_t count)
{
    memset(p, 0, 8);
    le(p, count, 4);
    return 8;
}

static uint64_t bad_requests(rdmx_channel_t *ch)
{
    char s[4096];
    size_t len = 0;

    EXPECT_OK(rdmx_call(ch, "kv.stats", NULL, 0, s, sizeof(s) - 1, NULL, &len));
    s[len] = '\0';
    return stat_of(s, "bad_requests");
}

static int n_bad, n_uncounted;
static char uncounted[1024];

/* Send a malformed request: it must fail with @want (0: any error) and a
 * message, and count in bad_requests. */
static void bad(rdmx_channel_t *ch, const char *method, const void *data,
                size_t len, const rdmx_call_params_t *cp, rdmx_status_t want,
                const char *what)
{
    uint8_t resp[512];
    size_t rl = 0;
    uint64_t before = bad_requests(ch), after;
    rdmx_status_t st =
        rdmx_call(ch, method, data, len, resp, sizeof(resp), cp, &rl);
    char d[512];

    snprintf(d, sizeof(d), "%s", rdmx_error_detail());
    if (want != 0)
        EXPECT(st == want, "%s: %s, want %s; detail: %s", what,
               rdmx_status_name(st), rdmx_status_name(want), d);
    else
        EXPECT(st < 0, "%s: %s, want an error; detail: %s", what,
               rdmx_status_name(st), d);
    EXPECT(d[0] != '\0', "%s: %s without a message", what,
           rdmx_status_name(st));
    after = bad_requests(ch);
    n_bad++;
    if (after != before + 1) {
        n_uncounted++;
        snprintf(uncounted + strlen(uncounted),
                 sizeof(uncounted) - strlen(uncounted), "%s'%s' (+%" PRIu64 ")",
                 uncounted[0] ? ", " : "", what, after - before);
    }
    th_log("  %-44s -> %s: %s", what, rdmx_status_name(st), d);
}

/* A request the server must refuse (with an error and a message) without
 * harm; whether it counts as a bad request is not checked. */
static void refused(rdmx_channel_t *ch, const char *method, const void *data,
                    size_t len, const rdmx_call_params_t *cp, const char *what)
{
    uint8_t resp[512];
    size_t rl = 0;
    rdmx_status_t st;
    char d[512];
    int32_t item = 0;

    memset(resp, 0, sizeof(resp));
    st = rdmx_call(ch, method, data, len, resp, sizeof(resp) - 1, cp, &rl);

    snprintf(d, sizeof(d), "%s", rdmx_error_detail());
    if (st == RDMX_OK && rl >= 4) /* an answer carrying a kv status */
        item = (int32_t)((uint32_t)resp[0] | (uint32_t)resp[1] << 8 |
                         (uint32_t)resp[2] << 16 | (uint32_t)resp[3] << 24);
    th_log("  %-44s -> %s%s%s: %s", what, rdmx_status_name(st),
           st == RDMX_OK ? ", kv status " : "",
           st == RDMX_OK ? rdmx_status_name((rdmx_status_t)item) : "",
           st == RDMX_OK ? (char *)resp + 32 : d);
    EXPECT(st < 0 || item < 0, "%s: succeeded", what);
    EXPECT(st == RDMX_OK || d[0] != '\0', "%s: %s without a message", what,
           rdmx_status_name(st));
}

static void part_malformed(void)
{
    static uint8_t p[4096];
    rdmx_channel_t *ch = NULL;
    rdmx_call_params_t cp;
    rdmx_rpc_bulk_t b;
    char key[32];
    size_t n;

    /* data that must survive */
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "intact:%d", i);
        th_fill(src, (size_t)i * 500, th_seed(51, (uint64_t)i, 0));
        EXPECT_OK(rdmx_kv_put(kv, key, strlen(key), src, (size_t)i * 500, NULL,
                              NULL));
    }
    CHECK_OK(rdmx_channel_create(worker, big.addr, NULL, &ch));
    CHECK_OK(rdmx_channel_wait_ready(ch, 20000 * TH_SLOW));
    n_bad = n_uncounted = 0;
    uncounted[0] = '\0';

    bad(ch, "kv.get", p, 0, NULL, RDMX_ERR_PROTO, "get: empty payload");
    n = hdr(p, 0, 3, 0);
    bad(ch, "kv.get", p, 10, NULL, RDMX_ERR_PROTO, "get: 10-byte header");
    n = hdr(p, 0, 100, 0);
    bad(ch, "kv.get", p, 32 + 5, NULL, RDMX_ERR_PROTO,
        "get: key of 100 bytes, 5 present");
    n = hdr(p, 0, 3, 0);
    bad(ch, "kv.get", p, n + 5, NULL, RDMX_ERR_PROTO, "get: trailing bytes");
    p[1] = 1;
    bad(ch, "kv.get", p, n, NULL, RDMX_ERR_PROTO, "get: reserved byte 1");
    n = hdr(p, 0, 3, 0);
    p[12] = 1;
    bad(ch, "kv.get", p, n, NULL, RDMX_ERR_PROTO, "get: reserved word 12");
    n = hdr(p, 0, 0, 0);
    bad(ch, "kv.get", p, n, NULL, 0, "get: empty key");
    n = hdr(p, 0, 3, 1000);
    bad(ch, "kv.put", p, n + 10, NULL, RDMX_ERR_PROTO,
        "put: value of 1000 bytes, 10 present");
    n = hdr(p, 5, 3, 1);
    bad(ch, "kv.put", p, n + 1, NULL, RDMX_ERR_PROTO, "put: mode 5");
    n = hdr(p, 0x80 | 9, 3, 100);
    bad(ch, "kv.put", p, n, NULL, RDMX_ERR_PROTO, "put: bulk, mode 9");
    n = hdr(p, 0, 0, 1);
    bad(ch, "kv.put", p, n + 1, NULL, 0, "put: empty key");
    n = hdr(p, 0, 3, 0);
    bad(ch, "kv.delete", p, 31, NULL, RDMX_ERR_PROTO, "delete: 31 bytes");
    n = hdr(p, 0, 0, 0);
    bad(ch, "kv.incr", p, n, NULL, 0, "incr: empty key");
    n = hdr(p, 0x80, 3, 100);
    bad(ch, "kv.put", p, n, NULL, RDMX_ERR_PROTO,
        "put: bulk without a descriptor");
    memset(&cp, 0, sizeof(cp));
    b.mr = src_mr;
    b.offset = REG_OFFSET;
    b.length = 50;
    b.access = RDMX_ACCESS_READ;
    cp.field_mask = RDMX_CALL_PARAM_FIELD_BULK;
    cp.bulk = &b;
    cp.nbulk = 1;
    bad(ch, "kv.put", p, n, &cp, 0, "put: bulk, descriptor 50 < value 100");

    n = batch_hdr(p, 0);
    bad(ch, "kv.mget", p, n, NULL, RDMX_ERR_PROTO, "mget: count 0");
    n = batch_hdr(p, 5000);
    n += hdr(p + n, 0, 3, 10);
    bad(ch, "kv.mget", p, n, NULL, RDMX_ERR_PROTO, "mget: count 5000");
    n = batch_hdr(p, 2);
    n += hdr(p + n, 0, 3, 10);
    bad(ch, "kv.mget", p, n, NULL, RDMX_ERR_PROTO, "mget: count 2, one key");
    n = batch_hdr(p, 1);
    n += hdr(p + n, 0, 3, 10);
    bad(ch, "kv.mget", p, n + 3, NULL, RDMX_ERR_PROTO, "mget: trailing bytes");
    n = batch_hdr(p, 1);
    p[5] = 1;
    n += hdr(p + n, 0, 3, 10);
    bad(ch, "kv.mget", p, n, NULL, RDMX_ERR_PROTO, "mget: reserved header");
    n = batch_hdr(p, 1);
    bad(ch, "kv.mget", p, 6, NULL, RDMX_ERR_PROTO, "mget: 6-byte header");
    n = batch_hdr(p, 2);
    n += hdr(p + n, 0, 3, 10);
    n += hdr(p + n, 0, 0, 10);
    bad(ch, "kv.mget", p, n, NULL, RDMX_ERR_PROTO, "mget: empty second key");
    n = batch_hdr(p, 1);
    n += hdr(p + n, 0, 3, 100);
    bad(ch, "kv.mput", p, n + 10, NULL, RDMX_ERR_PROTO,
        "mput: value of 100 bytes, 10 present");
    n = batch_hdr(p, 0);
    bad(ch, "kv.prefix", p, n, NULL, RDMX_ERR_PROTO, "prefix: count 0");
    n = batch_hdr(p, 1);
    n += hdr(p + n, 0, 40, 0);
    bad(ch, "kv.prefix", p, n - 20, NULL, RDMX_ERR_PROTO,
        "prefix: key beyond the data");
    bad(ch, "kv.nope", p, 8, NULL, 0, "unknown handler kv.nope");

    /* mput with an unknown mode: the batch is answered, that item PROTO */
    {
        uint8_t resp[256];
        size_t rl = 0;
        uint64_t before = bad_requests(ch);
        rdmx_status_t st;
        int32_t item;

        n = batch_hdr(p, 1);
        n += hdr(p + n, 9, 3, 1);
        p[n++] = 'x';
        st = rdmx_call(ch, "kv.mput", p, n, resp, sizeof(resp), NULL, &rl);
        n_bad++;
        if (st == RDMX_OK) {
            EXPECT(rl == 32, "mput answer of %zu bytes", rl);
            item = (int32_t)((uint32_t)resp[0] | (uint32_t)resp[1] << 8 |
                             (uint32_t)resp[2] << 16 | (uint32_t)resp[3] << 24);
            EXPECT(item == RDMX_ERR_PROTO, "mput mode 9: item status %d", item);
        } else {
            EXPECT(st == RDMX_ERR_PROTO, "mput mode 9: %s",
                   rdmx_status_name(st));
        }
        if (bad_requests(ch) != before + 1) {
            n_uncounted++;
            snprintf(uncounted + strlen(uncounted),
                     sizeof(uncounted) - strlen(uncounted), "%s'%s'",
                     uncounted[0] ? ", " : "", "mput: mode 9");
        }
        th_log("  %-44s -> %s", "mput: mode 9", rdmx_status_name(st));
    }

    /* buffers lent with the wrong rights, or not at all */
    {
        uint8_t *rb = (uint8_t *)rdmx_mr_addr(dst_mr) + REG_OFFSET;
        memset(rb, CANARY, 20000);
        memset(&cp, 0, sizeof(cp));
        cp.field_mask = RDMX_CALL_PARAM_FIELD_BULK;
        cp.bulk = &b;
        cp.nbulk = 1;
        n = hdr(p, 0x01, 9, 20000);     /* GET into a lent buffer */
        memcpy(p + 32, "intact:19", 9); /* 9500 bytes: RDMA write path */
        b.mr = dst_mr;
        b.offset = REG_OFFSET;
        b.length = 20000;
        b.access = RDMX_ACCESS_READ;
        refused(ch, "kv.get", p, n, &cp,
                "get: lent buffer without write right");
        EXPECT(not_byte(rb, 0, 20000, CANARY) < 0,
               "a buffer lent without the write right was written");
        bad(ch, "kv.get", p, n, NULL, RDMX_ERR_PROTO,
            "get: buffer flag, no descriptor");
        n = hdr(p, 0x80, 9, 5000); /* PUT pulled from a lent buffer */
        memcpy(p + 32, "intact:19", 9);
        b.mr = src_mr;
        b.length = 5000;
        b.access = RDMX_ACCESS_WRITE;
        refused(ch, "kv.put", p, n, &cp, "put: lent value without read right");
    }

    /* the server is up and the data intact */
    EXPECT(kvd_alive(&big), "rdmx-kvd died");
    for (int i = 0; i < 20; i++) {
        rdmx_kv_meta_t m;
        snprintf(key, sizeof(key), "intact:%d", i);
        EXPECT_OK(rdmx_kv_get(kv, key, strlen(key), dst, 10000, NULL, &m));
        EXPECT(m.length == (size_t)i * 500 &&
                   th_check(dst, m.length, th_seed(51, (uint64_t)i, 0)) < 0,
               "%s changed", key);
    }
    EXPECT(rdmx_channel_state(ch) == RDMX_CHANNEL_READY,
           "the raw channel is no longer ready");
    {
        uint8_t resp[1024];
        size_t rl = 0;
        n = hdr(p, 0, 8, 0);
        memcpy(p + 32, "intact:1", 8);
        EXPECT_OK(rdmx_call(ch, "kv.get", p, n, resp, sizeof(resp), NULL, &rl));
        EXPECT(rl == 32 + 500, "raw get answer of %zu bytes", rl);
    }
    rdmx_channel_destroy(ch);
    th_log("  %d malformed requests, %d not counted in bad_requests", n_bad,
           n_uncounted);
    EXPECT(n_uncounted == 0, "not counted in bad_requests: %s", uncounted);
}

/* ------------------------------------------------------------------------ */
/* the CLI                                                                  */
/* ------------------------------------------------------------------------ */

static char out_path[128], err_path[128];

/* Run rdmx-kv with the NULL-terminated arguments, stdin from @in (NULL:
 * /dev/null), stdout to out_path; its exit code (-1 if it did not exit). */
static int cli(const char *in, ...)
{
    static kl_req_t q;
    static kl_rep_t r;
    va_list ap;

    memset(&q, 0, sizeof(q));
    q.op = KL_RUN;
    q.timeout_ms = 30000 * TH_SLOW;
    snprintf(q.in_path, sizeof(q.in_path), "%s", in ? in : "");
    snprintf(q.out_path, sizeof(q.out_path), "%s", out_path);
    snprintf(q.err_path, sizeof(q.err_path), "%s", err_path);
    va_start(ap, in);
    kl_args(&q, "rdmx-kv", ap);
    va_end(ap);
    kl_call(&q, &r);
    if (!r.ok || !WIFEXITED(r.wstatus)) {
        th_log("rdmx-kv: %s (wait status 0x%x)", r.text, r.wstatus);
        return -1;
    }
    if (WEXITSTATUS(r.wstatus) > 2) { /* show what it said */
        FILE *f = fopen(err_path, "r");
        char line[512];
        while (f != NULL && fgets(line, sizeof(line), f) != NULL)
            th_log("  rdmx-kv stderr: %s", line);
        if (f != NULL)
            fclose(f);
    }
    return WEXITSTATUS(r.wstatus);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *p;
    long n;

    CHECKF(f != NULL, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = th_alloc((size_t)n + 1);
    CHECK(fread(p, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void spit(const char *path, const void *p, size_t len)
{
    FILE *f = fopen(path, "wb");

    CHECKF(f != NULL, "%s: %s", path, strerror(errno));
    CHECK(fwrite(p, 1, len, f) == len);
    fclose(f);
}

static void expect_stdout(const void *want, size_t len, const char *what)
{
    size_t n;
    uint8_t *got = slurp(out_path, &n);
    int same = n == len && memcmp(got, want, len) == 0;

    free(got);
    EXPECT(same, "%s: stdout of %zu bytes, want %zu", what, n, len);
}

static void expect_value(const char *key, const void *want, size_t len)
{
    rdmx_kv_meta_t m;

    EXPECT_OK(rdmx_kv_get(kv, key, strlen(key), dst, BUF_SIZE, NULL, &m));
    EXPECT(m.length == len && memcmp(dst, want, len) == 0,
           "%s: %zu bytes, want %zu", key, m.length, len);
}

static void part_cli(void)
{
    char file[128], in[128];
    const char *A = big.addr;
    size_t big_len = 2 * TH_MIB + 3;
    int rc;

    snprintf(out_path, sizeof(out_path), "%s/stdout", tmpdir);
    snprintf(err_path, sizeof(err_path), "%s/stderr", tmpdir);
    snprintf(file, sizeof(file), "%s/value.bin", tmpdir);
    snprintf(in, sizeof(in), "%s/stdin.bin", tmpdir);
    th_fill(src, 100000, 61); /* binary, with NULs and newlines */
    spit(file, src, 100000);
    th_fill(src + 100000, 3000, 62);
    spit(in, src + 100000, 3000);

    rc = cli(NULL, "-s", A, "put", "cli:arg", "hello world", NULL);
    EXPECT(rc == 0, "put from an argument: exit %d", rc);
    expect_value("cli:arg", "hello world", 11);
    rc = cli(NULL, "-s", A, "-f", file, "put", "cli:file", NULL);
    EXPECT(rc == 0, "put -f FILE: exit %d", rc);
    expect_value("cli:file", src, 100000);
    rc = cli(in, "-s", A, "put", "cli:stdin", NULL);
    EXPECT(rc == 0, "put from stdin: exit %d", rc);
    expect_value("cli:stdin", src + 100000, 3000);

    rc = cli(NULL, "-s", A, "get", "cli:file", NULL);
    EXPECT(rc == 0, "get: exit %d", rc);
    expect_stdout(src, 100000, "get cli:file");
    rc = cli(NULL, "-s", A, "get", "cli:arg", NULL);
    EXPECT(rc == 0, "get: exit %d", rc);
    expect_stdout("hello world", 11, "get cli:arg");
    th_fill(src, big_len, 63);
    EXPECT_OK(rdmx_kv_put(kv, "cli:big", 7, src, big_len, NULL, NULL));
    rc = cli(NULL, "-s", A, "get", "cli:big", NULL);
    EXPECT(rc == 0, "get of a 2 MiB value: exit %d", rc);
    expect_stdout(src, big_len, "get cli:big");
    EXPECT_OK(rdmx_kv_put(kv, "cli:empty", 9, NULL, 0, NULL, NULL));
    rc = cli(NULL, "-s", A, "get", "cli:empty", NULL);
    EXPECT(rc == 0, "get of an empty value: exit %d", rc);
    expect_stdout("", 0, "get cli:empty");

    rc = cli(NULL, "-s", A, "get", "cli:absent", NULL);
    EXPECT(rc == 1, "get of an absent key: exit %d", rc);
    expect_stdout("", 0, "get cli:absent");
    rc = cli(NULL, "-s", A, "exists", "cli:arg", NULL);
    EXPECT(rc == 0, "exists: exit %d", rc);
    rc = cli(NULL, "-s", A, "exists", "cli:absent", NULL);
    EXPECT(rc == 1, "exists of an absent key: exit %d", rc);
    EXPECT_OK(rdmx_kv_put(kv, "cli:n", 5, "41", 2, NULL, NULL));
    rc = cli(NULL, "-s", A, "incr", "cli:n", NULL);
    EXPECT(rc == 0, "incr: exit %d", rc);
    expect_stdout("42\n", 3, "incr cli:n");
    /* a delta or TTL that is not a number: refused, nothing changed */
    rc = cli(NULL, "-s", A, "incr", "cli:n", "5x", NULL);
    EXPECT(rc == 2, "incr by '5x': exit %d", rc);
    rc = cli(NULL, "-s", A, "touch", "cli:n", "-1", NULL);
    EXPECT(rc == 2, "touch for '-1' ms: exit %d", rc);
    expect_text("cli:n", "42");
    rc = cli(NULL, "-s", A, "delete", "cli:arg", NULL);
    EXPECT(rc == 0, "delete: exit %d", rc);
    EXPECT_ST(rdmx_kv_exists(kv, "cli:arg", 7), RDMX_ERR_NOT_FOUND);
    rc = cli(NULL, "-s", A, "delete", "cli:arg", NULL);
    EXPECT(rc == 1, "delete of an absent key: exit %d", rc);

    rc = cli(NULL, "-s", A, "--add", "put", "cli:file", "x", NULL);
    EXPECT(rc == 2, "put --add of a present key: exit %d", rc);
    th_fill(src, 100000, 61);
    expect_value("cli:file", src, 100000);
    rc = cli(NULL, "-s", A, "--replace", "put", "cli:absent", "x", NULL);
    EXPECT(rc == 1, "put --replace of an absent key: exit %d", rc);
    EXPECT_ST(rdmx_kv_exists(kv, "cli:absent", 10), RDMX_ERR_NOT_FOUND);
    rc = cli(NULL, "-s", A, "stats", NULL);
    EXPECT(rc == 0, "stats: exit %d", rc);
    {
        size_t n;
        uint8_t *s = slurp(out_path, &n);
        s[n] = '\0';
        int has = strstr((char *)s, "\ncurr_items ") != NULL;
        free(s);
        EXPECT(has, "stats printed no curr_items");
    }

    rc = cli(NULL, "-s", "127.0.0.1:1", "-t", "1000", "get", "x", NULL);
    EXPECT(rc == 2, "get from an unreachable server: exit %d", rc);
    rc = cli(NULL, "-s", A, "frobnicate", NULL);
    EXPECT(rc == 2, "unknown command: exit %d", rc);
    rc = cli(NULL, "-s", A, "get", NULL);
    EXPECT(rc == 2, "get without a key: exit %d", rc);
}

/* ------------------------------------------------------------------------ */
/* eviction                                                                 */
/* ------------------------------------------------------------------------ */

#define EV_VALUE (64 * TH_KIB)

static void ev_put(rdmx_kv_t *c, const char *fmt, int i, rdmx_status_t want)
{
    char key[32];

    snprintf(key, sizeof(key), fmt, i);
    th_fill(src, EV_VALUE, th_seed(71, (uint64_t)key[0], (uint64_t)i));
    EXPECT_ST(rdmx_kv_put(c, key, strlen(key), src, EV_VALUE, NULL, NULL),
              want);
}

static int ev_present(rdmx_kv_t *c, const char *fmt, int i)
{
    char key[32];
    rdmx_status_t st;

    snprintf(key, sizeof(key), fmt, i);
    st = rdmx_kv_exists(c, key, strlen(key));
    EXPECT(st == RDMX_OK || st == RDMX_ERR_NOT_FOUND, "exists %s: %s", key,
           rdmx_status_name(st));
    return st == RDMX_OK;
}

static void ev_check(rdmx_kv_t *c, const char *fmt, int i)
{
    char key[32];
    rdmx_kv_meta_t m;

    snprintf(key, sizeof(key), fmt, i);
    EXPECT_OK(rdmx_kv_get(c, key, strlen(key), dst, EV_VALUE, NULL, &m));
    EXPECT(th_check(dst, EV_VALUE, th_seed(71, (uint64_t)key[0], (uint64_t)i)) <
               0,
           "%s differs", key);
}

static void part_lru(void)
{
    enum { N = 40, READ = 10 };
    rdmx_kv_t *c = client(lru.addr, 8192, 10000 * TH_SLOW);
    char s0[4096], s1[4096];
    int absent = 0, first_absent = -1, last_absent = -1;
    uint64_t ev;

    stats_of(c, s0, sizeof(s0));
    for (int i = 0; i < N; i++)
        ev_put(c, "e:%d", i, RDMX_OK);
    stats_of(c, s1, sizeof(s1));
    EXPECT_EQ(stat_of(s1, "evictions"), stat_of(s0, "evictions"));
    EXPECT_EQ(stat_of(s1, "curr_items"), N);
    /* an item moves to the LRU's recent end at most once per ~1 s epoch
     * (docs/KV.md, "LRU and eviction"): read in a later one */
    th_sleep_ms(1100);
    for (int i = 0; i < READ; i++)
        ev_check(c, "e:%d", i); /* now the most recently used */
    for (int i = 0; i < N; i++)
        ev_put(c, "f:%d", i, RDMX_OK);
    stats_of(c, s1, sizeof(s1));
    ev = stat_of(s1, "evictions") - stat_of(s0, "evictions");
    for (int i = 0; i < N; i++) {
        if (!ev_present(c, "e:%d", i)) {
            absent++;
            if (first_absent < 0)
                first_absent = i;
            last_absent = i;
        }
    }
    th_log("  lru: %" PRIu64 " evictions, e:%d..e:%d gone, %" PRIu64
           " items left",
           ev, first_absent, last_absent, stat_of(s1, "curr_items"));
    EXPECT(ev >= READ, "only %" PRIu64 " evictions for %d x 64 KiB in 4 MiB",
           ev, 2 * N);
    EXPECT_EQ(absent, ev);
    EXPECT(first_absent == READ && last_absent == READ + absent - 1,
           "evicted e:%d..e:%d (%d keys), want the least recently used "
           "e:%d..e:%d",
           first_absent, last_absent, absent, READ, READ + absent - 1);
    for (int i = 0; i < READ; i++)
        EXPECT(ev_present(c, "e:%d", i), "recently read e:%d evicted", i);
    for (int i = 0; i < N; i++)
        EXPECT(ev_present(c, "f:%d", i), "new f:%d evicted", i);
    EXPECT_EQ(stat_of(s1, "evicted_unfetched") -
                  stat_of(s0, "evicted_unfetched"),
              ev);
    EXPECT_EQ(stat_of(s1, "curr_items"), 2 * N - ev);
    for (int i = 0; i < READ; i++)
        ev_check(c, "e:%d", i);
    for (int i = 0; i < N; i++)
        ev_check(c, "f:%d", i);
    rdmx_kv_destroy(c);
}

static void part_no_eviction(void)
{
    rdmx_kv_t *c = client(none.addr, 8192, 10000 * TH_SLOW);
    char s[4096], key[32];
    rdmx_status_t st = RDMX_OK;
    int n;

    for (n = 0; n < 64; n++) {
        snprintf(key, sizeof(key), "n:%d", n);
        th_fill(src, EV_VALUE, th_seed(71, 'n', (uint64_t)n));
        st = rdmx_kv_put(c, key, strlen(key), src, EV_VALUE, NULL, NULL);
        if (st != RDMX_OK)
            break;
    }
    th_log("  none: %d x 64 KiB stored in 2 MiB, then %s: %s", n,
           rdmx_status_name(st), rdmx_error_detail());
    EXPECT(st == RDMX_ERR_NO_MEMORY && rdmx_error_detail()[0],
           "write into a full server: %s", rdmx_status_name(st));
    EXPECT(n >= 16 && n <= 32, "%d x 64 KiB fit into 2 MiB", n);
    for (int i = 0; i < n; i++)
        ev_check(c, "n:%d", i);
    stats_of(c, s, sizeof(s));
    EXPECT_EQ(stat_of(s, "evictions"), 0);
    EXPECT_EQ(stat_of(s, "curr_items"), n);
    /* still full; a delete makes room */
    ev_put(c, "n:%d", n, RDMX_ERR_NO_MEMORY);
    EXPECT_OK(rdmx_kv_delete(c, "n:0", 3, 0));
    ev_put(c, "n:%d", n, RDMX_OK);
    ev_check(c, "n:%d", n);
    rdmx_kv_destroy(c);
}

/* ------------------------------------------------------------------------ */
/* SIGTERM                                                                  */
/* ------------------------------------------------------------------------ */

static rdmx_kv_t *kv_short; /* to "big", 1 s timeout */

static void stop_one(kvd_t *k, const char *name)
{
    char out[2048];
    double t0 = th_now_ms(), dt;
    int ws;

    kvd_kill(k, SIGTERM);
    /* keep the client progressing: the server closes its connections in
     * order and waits (up to 2 s) for the peers to answer */
    out[0] = '\0';
    ws = -1;
    while (!kvd_exited(k, &ws, out, sizeof(out))) {
        if (th_now_ms() - t0 > 10000.0 * TH_SLOW)
            ws = kvd_wait(k, 1000, out, sizeof(out), NULL);
        else
            th_progress_for(worker, 2);
    }
    dt = th_now_ms() - t0;
    th_log("  %s exited %.0f ms after SIGTERM (wait status 0x%x)", name, dt,
           ws);
    EXPECT(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
           "%s: wait status 0x%x after SIGTERM (exit %d, signal %d)", name, ws,
           WIFEXITED(ws) ? WEXITSTATUS(ws) : -1,
           WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    EXPECT(strstr(out, "shutting down") != NULL,
           "%s printed no 'shutting down': '%s'", name, out);
    EXPECT(dt < 3000.0 * (TH_SANITIZED ? 2 : 1),
           "%s took %.0f ms to exit after SIGTERM", name, dt);
}

/*
 * Clients connecting while a server stops: UCX 1.13 crashed the server (SEGV
 * in its async thread, a connection request for a destroyed listener) or
 * rdmx leaked a connection request nobody rejected (LeakSanitizer: exit
 * status 1). CHURN_SLOTS connections at a time, each
 * closed as soon as its handshake completed or failed and replaced by a new
 * one, from before the SIGTERM until the server exited; CHURN_ROUNDS servers,
 * each must exit 0 and say "shutting down". One worker each: with two, this
 * churn also hits a UCX 1.13 bug of the running server ("async.c:643
 * Assertion `handler->async == async'" in __ucs_async_poll_missed, after a
 * connection's socket moved to another worker), about once in 50 rounds. The connections come from a tcp context
 * of their own whatever RDMX_TRANSPORT says: over shm, a client whose
 * wire-up reaches a server that just exited fails to attach its FIFO
 * ("mm ep failed to connect to remote FIFO"), and UCX 1.13 leaks that
 * endpoint's segment table (uct_mm_ep_t's init error path), which
 * LeakSanitizer reports in this process. The race is in the connection
 * manager, which is tcp for both transports.
 */
#define CHURN_ROUNDS 10
#define CHURN_SLOTS  12

typedef struct {
    rdmx_ep_t *ep;
    int done;
    rdmx_status_t st;
} churn_slot_t;

static churn_slot_t churn[CHURN_SLOTS];
static unsigned churn_started, churn_ok;
static rdmx_worker_t *churn_w; /* of churn_ctx, tcp */

static void churn_cb(rdmx_ep_t *ep, rdmx_status_t st, void *arg)
{
    churn_slot_t *c = arg;

    if (c->ep == ep) {
        c->st = st;
        c->done = 1;
    }
}

/* Close the connections that completed or failed (all of them if @addr is
 * NULL) and, if @addr is not NULL, start new ones in their place. */
static void churn_step(const char *addr)
{
    for (int i = 0; i < CHURN_SLOTS; i++) {
        churn_slot_t *c = &churn[i];
        rdmx_ep_params_t ep_params = {.field_mask =
                                          RDMX_EP_PARAM_FIELD_CONNECT_CB |
                                          RDMX_EP_PARAM_FIELD_USER_DATA |
                                          RDMX_EP_PARAM_FIELD_CONNECT_TIMEOUT,
                                      .connect_cb = churn_cb,
                                      .user_data = c,
                                      .connect_timeout_ms = 2000};

        if (c->ep != NULL && !c->done && addr != NULL)
            continue;
        if (c->ep != NULL) {
            churn_ok += c->done && c->st == RDMX_OK;
            rdmx_ep_close(c->ep);
            c->ep = NULL;
        }
        c->done = 0;
        if (addr != NULL &&
            rdmx_connect_nb(churn_w, addr, &ep_params, &c->ep) >= 0)
            churn_started++;
        else
            c->ep = NULL;
    }
    rdmx_worker_progress(churn_w);
}

static void part_auto_mixed(void)
{
    enum { LEN = 5000 };
    kvd_t t = {0};
    rdmx_kv_t *c, *local;
    rdmx_kv_meta_t m;
    char s0[4096], s1[4096];
    uint8_t *sbuf = rdmx_mr_addr(src_mr), *rbuf = rdmx_mr_addr(dst_mr);

    if (strcmp(th_transport_env(), "auto") != 0)
        return;
    kvd_start(&t, NULL, "--workers", "1", "--memory", "16m", "--transport",
              "tcp", "--no-lambda", NULL);
    c = client(t.addr, 4096, 60000 * TH_SLOW);
    local = client(big.addr, 4096, 60000 * TH_SLOW);
    EXPECT(rdmx_ep_transport(rdmx_channel_ep(rdmx_kv_channel(c, 0))) ==
               RDMX_TRANSPORT_TCP,
           "auto_mixed: the tcp server's connection runs over %s",
           rdmx_transport_name(
               rdmx_ep_transport(rdmx_channel_ep(rdmx_kv_channel(c, 0)))));
    EXPECT(rdmx_ep_transport(rdmx_channel_ep(rdmx_kv_channel(local, 0))) ==
               RDMX_TRANSPORT_SHM,
           "auto_mixed: the local server's connection runs over %s",
           rdmx_transport_name(
               rdmx_ep_transport(rdmx_channel_ep(rdmx_kv_channel(local, 0)))));
    th_fill(sbuf, LEN, th_seed(47, 0, 0));
    stats_of(c, s0, sizeof(s0));
    EXPECT_OK(rdmx_kv_put(c, "auto:tcp", 8, sbuf, LEN, KV_MR(src_mr), NULL));
    memset(rbuf, CANARY, LEN + 1);
    memset(&m, 0, sizeof(m));
    EXPECT_OK(rdmx_kv_get(c, "auto:tcp", 8, rbuf, LEN, KV_MR(dst_mr), &m));
    EXPECT(m.length == LEN && th_check(rbuf, LEN, th_seed(47, 0, 0)) < 0 &&
               rbuf[LEN] == CANARY,
           "auto_mixed: got %zu bytes, or wrong ones", m.length);
    stats_of(c, s1, sizeof(s1));
    EXPECT(stat_of(s1, "put_pulled") == stat_of(s0, "put_pulled") &&
               stat_of(s1, "get_buffers_lent") ==
                   stat_of(s0, "get_buffers_lent") &&
               stat_of(s1, "get_mapped") == stat_of(s0, "get_mapped"),
           "auto_mixed: over tcp the server pulled %" PRIu64
           " values, was lent %" PRIu64 " buffers, mapped %" PRIu64
           " GETs (want none)",
           stat_of(s1, "put_pulled") - stat_of(s0, "put_pulled"),
           stat_of(s1, "get_buffers_lent") - stat_of(s0, "get_buffers_lent"),
           stat_of(s1, "get_mapped") - stat_of(s0, "get_mapped"));
    /* the same client code over shared memory lends the PUT's value */
    stats_of(local, s0, sizeof(s0));
    EXPECT_OK(
        rdmx_kv_put(local, "auto:tcp", 8, sbuf, LEN, KV_MR(src_mr), NULL));
    stats_of(local, s1, sizeof(s1));
    EXPECT(stat_of(s1, "put_pulled") == stat_of(s0, "put_pulled") + 1,
           "auto_mixed: over shared memory the server pulled %" PRIu64
           " values (want 1)",
           stat_of(s1, "put_pulled") - stat_of(s0, "put_pulled"));
    /* 200 KiB each way: auto <-> tcp server, tcp client <-> auto server */
    {
        enum { BIG = 200 * 1024 };
        rdmx_context_params_t tp = {.field_mask =
                                        RDMX_CONTEXT_PARAM_FIELD_TRANSPORT |
                                        RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES,
                                    .transport = RDMX_TRANSPORT_TCP,
                                    .net_devices = "lo"};
        rdmx_kv_params_t kp = {.field_mask = RDMX_KV_PARAM_FIELD_TIMEOUT,
                               .timeout_ms = 60000 * TH_SLOW};
        rdmx_context_t *tctx = NULL;
        rdmx_worker_t *tw = NULL;
        rdmx_kv_t *tc = NULL, *pair[2];

        CHECK_OK(rdmx_context_create(&tp, &tctx));
        CHECK_OK(rdmx_worker_create(tctx, NULL, &tw));
        CHECK_OK(rdmx_kv_create(tw, big.addr, &kp, &tc));
        CHECK_OK(rdmx_kv_wait_ready(tc, 20000 * TH_SLOW));
        pair[0] = c;
        pair[1] = tc;
        for (int i = 0; i < 2; i++) {
            const char *who =
                i == 0 ? "auto client, tcp server" : "tcp client, auto server";
            th_fill(src, BIG, th_seed(48, (uint64_t)i, 0));
            EXPECT_OK(
                rdmx_kv_put(pair[i], "auto:big", 8, src, BIG, NULL, NULL));
            memset(dst, CANARY, BIG + 1);
            memset(&m, 0, sizeof(m));
            EXPECT_OK(
                rdmx_kv_get(pair[i], "auto:big", 8, dst, BIG + 1, NULL, &m));
            EXPECT(m.length == BIG &&
                       th_check(dst, BIG, th_seed(48, (uint64_t)i, 0)) < 0,
                   "auto_mixed (%s): got %zu bytes, or wrong ones", who,
                   m.length);
        }
        rdmx_kv_destroy(tc);
        rdmx_worker_destroy(tw);
        rdmx_context_destroy(tctx);
    }
    /* an shm server writes into this auto client's lent buffer */
    {
        enum { MID = 64 * 1024 };
        kvd_t sh = {0};
        rdmx_kv_t *sc;

        kvd_start(&sh, NULL, "--workers", "1", "--memory", "16m", "--transport",
                  "shm", "--no-mapped-gets", "--no-lambda", NULL);
        sc = client(sh.addr, 4096, 60000 * TH_SLOW);
        th_fill(sbuf, MID, th_seed(49, 0, 0));
        EXPECT_OK(
            rdmx_kv_put(sc, "auto:shm", 8, sbuf, MID, KV_MR(src_mr), NULL));
        stats_of(sc, s0, sizeof(s0));
        memset(rbuf, CANARY, MID + 1);
        memset(&m, 0, sizeof(m));
        EXPECT_OK(
            rdmx_kv_get(sc, "auto:shm", 8, rbuf, MID + 1, KV_MR(dst_mr), &m));
        stats_of(sc, s1, sizeof(s1));
        EXPECT(m.length == MID && th_check(rbuf, MID, th_seed(49, 0, 0)) < 0 &&
                   rbuf[MID] == CANARY,
               "auto_mixed (shm server): got %zu bytes, or wrong ones",
               m.length);
        EXPECT(stat_of(s1, "get_buffers_written") ==
                   stat_of(s0, "get_buffers_written") + 1,
               "auto_mixed (shm server): %" PRIu64
               " values written into the lent buffer (want 1)",
               stat_of(s1, "get_buffers_written") -
                   stat_of(s0, "get_buffers_written"));
        rdmx_kv_destroy(sc);
        kvd_stop(&sh);
    }
    rdmx_kv_destroy(c);
    rdmx_kv_destroy(local);
    kvd_stop(&t);
}

static void churn_round(int round)
{
    char out[2048];
    kvd_t k = {0};
    double t0;
    int ws = -1;
    unsigned ok0 = churn_ok;

    kvd_start(&k, NULL, "--workers", "1", "--memory", "16m", "--no-lambda",
              NULL);
    t0 = th_now_ms();
    while (th_now_ms() - t0 < 100.0 * TH_SLOW)
        churn_step(k.addr);
    kvd_kill(&k, SIGTERM);
    t0 = th_now_ms();
    out[0] = '\0';
    while (!kvd_exited(&k, &ws, out, sizeof(out))) {
        if (th_now_ms() - t0 > 10000.0 * TH_SLOW) {
            ws = kvd_wait(&k, 1000, out, sizeof(out), NULL);
            break;
        }
        for (int i = 0; i < 20; i++)
            churn_step(k.addr);
    }
    churn_step(NULL);
    th_log("  round %d: exited %.0f ms after SIGTERM (wait status 0x%x), "
           "%u connections completed",
           round, th_now_ms() - t0, ws, churn_ok - ok0);
    EXPECT(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
           "churn round %d: wait status 0x%x after SIGTERM (exit %d, "
           "signal %d)",
           round, ws, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1,
           WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    EXPECT(strstr(out, "shutting down") != NULL,
           "churn round %d printed no 'shutting down': '%s'", round, out);
}

static void part_sigterm_churn(void)
{
    rdmx_context_params_t cp;
    rdmx_context_t *churn_ctx;

    memset(&cp, 0, sizeof(cp));
    cp.field_mask = RDMX_CONTEXT_PARAM_FIELD_TRANSPORT |
                    RDMX_CONTEXT_PARAM_FIELD_NET_DEVICES;
    cp.transport = RDMX_TRANSPORT_TCP;
    cp.net_devices = "lo";
    EXPECT_OK(rdmx_context_create(&cp, &churn_ctx));
    EXPECT_OK(rdmx_worker_create(churn_ctx, NULL, &churn_w));
    for (int round = 0; round < CHURN_ROUNDS; round++)
        churn_round(round);
    th_progress_for(churn_w, 50); /* let the last closes finish */
    rdmx_worker_destroy(churn_w);
    rdmx_context_destroy(churn_ctx);
    th_log("  %u connections started, %u completed", churn_started,
           churn_ok);
    EXPECT(churn_ok > 0, "no connection completed");
}

static void part_sigterm(void)
{
    char buf[16];
    rdmx_kv_meta_t m;
    rdmx_status_t st;
    double t0;

    EXPECT_OK(rdmx_kv_put(kv, "term", 4, "x", 1, NULL, NULL));
    stop_one(&big, "big");
    t0 = th_now_ms();
    st = rdmx_kv_get(kv_short, "term", 4, buf, sizeof(buf), NULL, &m);
    th_log("  get after the server stopped: %s after %.0f ms (%s)",
           rdmx_status_name(st), th_now_ms() - t0, rdmx_error_detail());
    EXPECT(st < 0 && st != RDMX_ERR_NOT_FOUND, "get from a stopped server: %s",
           rdmx_status_name(st));
    EXPECT(th_now_ms() - t0 < 1000 + 3000.0 * TH_SLOW,
           "get from a stopped server took %.0f ms (timeout 1000)",
           th_now_ms() - t0);
    stop_one(&lru, "lru");
    stop_one(&none, "none");
    /* The churn is opt-in (RDMX_TEST_CHURN=1): its clients reconnect to a
     * server whose tcp port has just closed, and UCX 1.13's tcp transport
     * then aborts the CLIENT now and then ("tcp_ep.c:478 Assertion
     * !(ep->flags & UCT_TCP_EP_FLAG_CTX_TYPE_TX)", once in a sanitizer
     * run), which would take this whole test down. The servers it checks
     * have not failed with the fix in place. */
    if (getenv("RDMX_TEST_CHURN") != NULL &&
        strcmp(getenv("RDMX_TEST_CHURN"), "1") == 0)
        part_sigterm_churn();
    else
        th_log("  churn through SIGTERM: skipped (RDMX_TEST_CHURN=1 runs "
               "it)");
}

/* ------------------------------------------------------------------------ */

int main(void)
{
    double t0;

    th_init("kv_ops", 170);
    t0 = th_now_ms();
    for (int i = 0; i < 256; i++)
        key_all[i] = (uint8_t)(i * 167 + 13); /* a permutation of 0..255 */
    th_fill(key_max, sizeof(key_max), 5);
    key_max[0] = 0;
    key_max[MAX_KEY - 1] = 0xff;

    kl_start();
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rdmx_kv_ops.XXXXXX");
    CHECKF(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
    kvd_start(&big, NULL, "--workers", "2", "--memory", "256m", "--max-value",
              "64m", "--max-key", "512", "--inline-threshold", "4k", NULL);
    kvd_start(&lru, NULL, "--workers", "1", "--memory", "4m", NULL);
    kvd_start(&none, NULL, "--workers", "1", "--memory", "2m", "--eviction",
              "none", NULL);
    kvd_start(&plain, NULL, "--workers", "1", "--memory", "16m",
              "--inline-threshold", "4k", "--no-mapped-gets", NULL);
    th_log("rdmx-kvd big %s, lru %s, none %s (transport %s)", big.addr,
           lru.addr, none.addr, th_transport_env());

    ctx = th_context();
    worker = th_worker(ctx, 0);
    kv = client(big.addr, 4096, 60000 * TH_SLOW);
    kv_short = client(big.addr, 4096, 1000);
    CHECK_OK(rdmx_mem_alloc(ctx, BUF_SIZE, RDMX_ACCESS_READ | RDMX_ACCESS_WRITE,
                            &src_mr));
    CHECK_OK(rdmx_mem_alloc(ctx, BUF_SIZE, RDMX_ACCESS_READ | RDMX_ACCESS_WRITE,
                            &dst_mr));
    src = th_alloc(BUF_SIZE);
    dst = th_alloc(BUF_SIZE);

    run_part("sizes", part_sizes);
    run_part("too_small", part_too_small);
    run_part("lend", part_lend);
    run_part("put_lend", part_put_lend);
    run_part("mapped", part_mapped);
    run_part("auto_mixed", part_auto_mixed);
    run_part("ttl", part_ttl);
    run_part("cas", part_cas);
    run_part("incr", part_incr);
    run_part("batches", part_batches);
    run_part("stats", part_stats);
    run_part("limits", part_limits);
    run_part("channel_options", part_channel_options);
    run_part("more", part_more);
    run_part("malformed", part_malformed);
    run_part("cli", part_cli);
    run_part("lru", part_lru);
    run_part("no_eviction", part_no_eviction);
    run_part("sigterm", part_sigterm);

    rdmx_kv_destroy(kv);
    rdmx_kv_destroy(kv_short);
    rdmx_mem_deregister(src_mr);
    rdmx_mem_deregister(dst_mr);
    free(src);
    free(dst);
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    {
        char p[128];
        const char *names[] = {"stdout", "stderr", "value.bin", "stdin.bin"};
        for (size_t i = 0; i < 4; i++) {
            snprintf(p, sizeof(p), "%s/%s", tmpdir, names[i]);
            unlink(p);
        }
        rmdir(tmpdir);
    }
    /* servers a failed part left running */
    kvd_stop(&big);
    kvd_stop(&lru);
    kvd_stop(&none);
    kvd_stop(&plain);
    if (parts_failed()) {
        th_log("FAILED: %d part(s) failed (%.1f s)", parts_failed(),
               (th_now_ms() - t0) / 1000);
        return 1;
    }
    th_log("ok (%.1f s)", (th_now_ms() - t0) / 1000);
    return 0;
}
