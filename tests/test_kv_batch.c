/*
 * kv_batch: zero-copy batch GET and PUT (rdmx_kv_batch_get,
 * rdmx_kv_batch_put; docs/KV.md, "Zero-copy batches") against three real
 * rdmx-kvd servers (--memory 96m --max-value 5m).
 *
 * Two registered regions of the client: values are put from slots of one
 * and read back into slots of the other, which is filled with a sentinel
 * byte first; every slot has 64 sentinel bytes before and after it.
 *
 * - sizes: 1, 64 and 1,024 keys x 4 KiB, 64 x 256 KiB, 4 x 4 MiB: a batch
 *   PUT then a batch GET, byte for byte, every item OK with its length,
 *   every guard intact; the keys of the larger batches span all three
 *   servers (rdmx_kv_server_of), and each server's curr_items grew by
 *   exactly its keys.
 * - mixed: 256 keys, every other one absent: NOT_FOUND with the slot
 *   untouched, the others OK.
 * - too_small: in one batch, a 10,000-byte value for a 4 KiB slot
 *   (TOO_BIG, length 10,000, the slot and its guards untouched), an exact
 *   fit, a 0-byte value, a 0-byte slot for a present key (TOO_BIG).
 * - args: a slot passing its region's end, a NULL region, an empty key,
 *   a PUT mode other than SET: RDMX_ERR_INVALID for the call, the bad
 *   item INVALID, the others CANCELED, nothing sent (the servers' cmd_get
 *   unchanged).
 * - replicas: with replicas = 2, a batch PUT stores every key on two
 *   servers (curr_items), and a batch GET reads them back.
 * - split: on one server, 5,000 keys (over 4096 per request), slots in 9
 *   regions (over 8 descriptors) and 17 slots of 4 MiB (over 64 MiB) each
 *   go as exactly two requests (the server's rpc_requests), byte for byte.
 * - hostile: hand-made kv.batch_get / kv.batch_put requests on a raw
 *   channel (batch count 0, a truncated entry, a set reserved locator
 *   byte, a mode, a descriptor index past the lent ones, a slot passing
 *   its descriptor, a lent buffer without the right access, slots over
 *   64 MiB in all, trailing bytes, an empty key): each refused with
 *   RDMX_ERR_PROTO and a message, counted once in bad_requests, the lent
 *   buffer untouched; then ordinary batches still work.
 * - stalled: one server SIGSTOPped; a batch GET with a 300 ms deadline
 *   returns RDMX_OK within the deadline plus the lent-buffer grace (and
 *   slack), an error for every key of that server, the others OK; after
 *   SIGCONT nothing lands in the slots given back; it serves again.
 * - dead: one server SIGKILLed; a batch GET over all three returns
 *   RDMX_OK with an error (not NOT_FOUND) for every key of the dead
 *   server within the timeout plus slack, the others' keys OK.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "kvd_launcher.h"

#include <rdmx/kv.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS      3
#define GUARD   64
#define SENT    0xa5
#define REGION  (20 * TH_MIB)
#define PATIENT (30000 * TH_SLOW)
#define QUICK   (TH_SANITIZED ? 3000 : 1500)

static kvd_t srv[NS];
static rdmx_context_t *ctx;
static rdmx_worker_t *worker;
static rdmx_mr_t *src_mr, *dst_mr;
static unsigned char *src, *dst;

static void key_of(char *key, size_t size, const char *prefix, size_t i)
{
    snprintf(key, size, "%s:%zu", prefix, i);
}

static uint64_t seed_of(const char *prefix, size_t i)
{
    return th_seed((uint64_t)prefix[0] << 8 | (uint64_t)prefix[1], i, 77);
}

static rdmx_kv_t *client(const char *servers, unsigned replicas,
                         int timeout_ms)
{
    rdmx_kv_params_t p;
    rdmx_kv_t *kv = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_KV_PARAM_FIELD_TIMEOUT | RDMX_KV_PARAM_FIELD_REPLICAS;
    p.timeout_ms = timeout_ms;
    p.replicas = replicas;
    CHECK_OK(rdmx_kv_create(worker, servers, &p, &kv));
    CHECK_OK(rdmx_kv_wait_ready(kv, 20000 * TH_SLOW));
    CHECK(rdmx_kv_servers(kv) == NS);
    return kv;
}

static uint64_t stat_on(rdmx_kv_t *kv, unsigned s, const char *name)
{
    char st[4096];

    CHECK_OK(rdmx_kv_stats(kv, s, st, sizeof(st)));
    return stat_of(st, name);
}

/* Slot @i of @n slots of @size bytes in @base: GUARD bytes on each side. */
static unsigned char *slot(unsigned char *base, size_t size, size_t i)
{
    return base + GUARD + i * (size + 2 * GUARD);
}

/* Check that @len bytes at @p are all SENT. */
static void check_sentinel(const unsigned char *p, size_t len,
                           const char *what, size_t i)
{
    for (size_t k = 0; k < len; k++)
        CHECKF(p[k] == SENT, "%s of slot %zu: byte %zu is 0x%02x, not the "
                             "sentinel",
               what, i, k, p[k]);
}

/* Batch PUT @n values of @size bytes under PREFIX:i, then batch GET them
 * into sentinel-filled slots and compare byte for byte. */
static void round_trip(rdmx_kv_t *kv, const char *prefix, size_t n,
                       size_t size)
{
    rdmx_kv_batch_item_t *it = calloc(n, sizeof(*it));
    char (*keys)[32] = calloc(n, sizeof(*keys));
    uint64_t before[NS], per[NS] = {0};
    unsigned used = 0;
    double t0;

    CHECK(it != NULL && keys != NULL);
    CHECK(n * (size + 2 * GUARD) <= REGION);
    for (unsigned s = 0; s < NS; s++)
        before[s] = stat_on(kv, s, "curr_items");
    for (size_t i = 0; i < n; i++) {
        key_of(keys[i], sizeof(keys[i]), prefix, i);
        per[rdmx_kv_server_of(kv, keys[i], strlen(keys[i]))]++;
        it[i] = (rdmx_kv_batch_item_t){.key = keys[i],
                                       .klen = strlen(keys[i]),
                                       .mr = src_mr,
                                       .buf = slot(src, size, i),
                                       .size = size};
        th_fill(it[i].buf, size, seed_of(prefix, i));
    }
    t0 = th_now_ms();
    CHECK_OK(rdmx_kv_batch_put(kv, it, n, NULL));
    for (size_t i = 0; i < n; i++)
        CHECKF(it[i].status == RDMX_OK, "put %s: %s", keys[i],
               rdmx_status_name(it[i].status));
    for (unsigned s = 0; s < NS; s++) {
        CHECK_EQ_U64(stat_on(kv, s, "curr_items") - before[s], per[s]);
        used += per[s] != 0;
    }
    if (n >= 64)
        CHECKF(used == NS, "%zu keys on %u of %d servers", n, used, NS);

    memset(dst, SENT, n * (size + 2 * GUARD));
    for (size_t i = 0; i < n; i++) {
        it[i].mr = dst_mr;
        it[i].buf = slot(dst, size, i);
        it[i].status = RDMX_ERR_INTERNAL;
        it[i].length = 0;
    }
    CHECK_OK(rdmx_kv_batch_get(kv, it, n, NULL));
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = it[i].buf;
        CHECKF(it[i].status == RDMX_OK, "get %s: %s", keys[i],
               rdmx_status_name(it[i].status));
        CHECK_EQ_U64(it[i].length, size);
        CHECK_PATTERN(p, size, seed_of(prefix, i), 0);
        check_sentinel(p - GUARD, GUARD, "guard before", i);
        check_sentinel(p + size, GUARD, "guard after", i);
    }
    th_log("%zu x %zu B over %u servers: put + get ok (%.0f ms)", n, size,
           used, th_now_ms() - t0);
    free(keys);
    free(it);
}

static void part_mixed(rdmx_kv_t *kv)
{
    enum { N = 256, SZ = 4096 };
    static rdmx_kv_batch_item_t it[N];
    static char keys[N][32];

    /* "s4:i" holds 1,024 values of 4 KiB (round_trip); odd keys are
     * asked under a prefix never stored */
    memset(dst, SENT, N * (SZ + 2 * GUARD));
    for (size_t i = 0; i < N; i++) {
        key_of(keys[i], sizeof(keys[i]), i % 2 ? "absent" : "s4", i);
        it[i] = (rdmx_kv_batch_item_t){.key = keys[i],
                                       .klen = strlen(keys[i]),
                                       .mr = dst_mr,
                                       .buf = slot(dst, SZ, i),
                                       .size = SZ};
    }
    CHECK_OK(rdmx_kv_batch_get(kv, it, N, NULL));
    for (size_t i = 0; i < N; i++) {
        unsigned char *p = it[i].buf;
        if (i % 2) {
            CHECKF(it[i].status == RDMX_ERR_NOT_FOUND, "%s: %s", keys[i],
                   rdmx_status_name(it[i].status));
            check_sentinel(p, SZ, "missed", i);
        } else {
            CHECKF(it[i].status == RDMX_OK, "%s: %s", keys[i],
                   rdmx_status_name(it[i].status));
            CHECK_EQ_U64(it[i].length, SZ);
            CHECK_PATTERN(p, SZ, seed_of("s4", i), 0);
        }
        check_sentinel(p - GUARD, GUARD, "guard before", i);
        check_sentinel(p + SZ, GUARD, "guard after", i);
    }
    th_log("mixed: 128 hits, 128 misses untouched: ok");
}

static void part_too_small(rdmx_kv_t *kv)
{
    enum { SZ = 4096 };
    rdmx_kv_batch_item_t it[4];
    const char *keys[4] = {"big:10000", "fit:4096", "empty:0", "big:10000"};
    const size_t vlen[3] = {10000, 4096, 0};
    const size_t cap[4] = {SZ, SZ, SZ, 0};

    /* the values, from plain slots of the source region */
    for (int i = 0; i < 3; i++) {
        it[i] = (rdmx_kv_batch_item_t){.key = keys[i],
                                       .klen = strlen(keys[i]),
                                       .mr = src_mr,
                                       .buf = src + (size_t)i * 16384,
                                       .size = vlen[i]};
        th_fill(it[i].buf, vlen[i], seed_of("ts", (size_t)i));
    }
    CHECK_OK(rdmx_kv_batch_put(kv, it, 3, NULL));
    for (int i = 0; i < 3; i++)
        CHECKF(it[i].status == RDMX_OK, "put %s: %s", keys[i],
               rdmx_status_name(it[i].status));

    memset(dst, SENT, 4 * (SZ + 2 * GUARD));
    for (int i = 0; i < 4; i++)
        it[i] = (rdmx_kv_batch_item_t){.key = keys[i],
                                       .klen = strlen(keys[i]),
                                       .mr = dst_mr,
                                       .buf = slot(dst, SZ, (size_t)i),
                                       .size = cap[i]};
    CHECK_OK(rdmx_kv_batch_get(kv, it, 4, NULL));
    CHECKF(it[0].status == RDMX_ERR_TOO_BIG, "10000 B into 4 KiB: %s",
           rdmx_status_name(it[0].status));
    CHECK_EQ_U64(it[0].length, 10000);
    CHECKF(it[1].status == RDMX_OK, "exact fit: %s",
           rdmx_status_name(it[1].status));
    CHECK_EQ_U64(it[1].length, 4096);
    CHECK_PATTERN(it[1].buf, 4096, seed_of("ts", 1), 0);
    CHECKF(it[2].status == RDMX_OK, "0 B value: %s",
           rdmx_status_name(it[2].status));
    CHECK_EQ_U64(it[2].length, 0);
    CHECKF(it[3].status == RDMX_ERR_TOO_BIG, "0-byte slot: %s",
           rdmx_status_name(it[3].status));
    CHECK_EQ_U64(it[3].length, 10000);
    /* nothing written into the too-small slots, the 0-byte value's, or
     * any guard: only slot 1 changed */
    for (size_t i = 0; i < 4; i++) {
        unsigned char *p = slot(dst, SZ, i);
        check_sentinel(p - GUARD, GUARD, "guard before", i);
        check_sentinel(p + SZ, GUARD, "guard after", i);
        if (i != 1)
            check_sentinel(p, SZ, "too small / empty", i);
    }
    th_log("too_small: TOO_BIG with length 10000, slot untouched; exact fit, "
           "0 B value, 0-byte slot: ok");
}

static uint64_t cmd_get_all(rdmx_kv_t *kv)
{
    uint64_t sum = 0;

    for (unsigned s = 0; s < NS; s++)
        sum += stat_on(kv, s, "cmd_get");
    return sum;
}

static void part_args(rdmx_kv_t *kv)
{
    rdmx_kv_batch_item_t it[3];
    rdmx_kv_op_params_t p = {.field_mask = RDMX_KV_OP_PARAM_FIELD_MODE,
                             .mode = RDMX_KV_PUT_ADD};
    uint64_t gets = cmd_get_all(kv);
    unsigned char *end = dst + rdmx_mr_length(dst_mr);

    for (int i = 0; i < 3; i++)
        it[i] = (rdmx_kv_batch_item_t){.key = "s4:0", .klen = 4,
                                       .mr = dst_mr, .buf = dst,
                                       .size = 4096};
    /* a slot one byte past the region's end */
    it[1].buf = end - 4095;
    memset(end - 4095, SENT, 4095);
    CHECK_ST(rdmx_kv_batch_get(kv, it, 3, NULL), RDMX_ERR_INVALID);
    CHECKF(strstr(rdmx_error_detail(), "item 1") != NULL, "detail: %s",
           rdmx_error_detail());
    CHECK(it[0].status == RDMX_ERR_CANCELED);
    CHECK(it[1].status == RDMX_ERR_INVALID);
    CHECK(it[2].status == RDMX_ERR_CANCELED);
    check_sentinel(end - 4095, 4095, "outside", 1);
    it[1].buf = dst;
    it[1].mr = NULL;
    CHECK_ST(rdmx_kv_batch_get(kv, it, 3, NULL), RDMX_ERR_INVALID);
    CHECK(it[1].status == RDMX_ERR_INVALID);
    it[1].mr = dst_mr;
    it[2].klen = 0;
    CHECK_ST(rdmx_kv_batch_get(kv, it, 3, NULL), RDMX_ERR_INVALID);
    CHECK(it[2].status == RDMX_ERR_INVALID);
    it[2].klen = 4;
    CHECK_ST(rdmx_kv_batch_put(kv, it, 3, &p), RDMX_ERR_INVALID);
    CHECK_ST(rdmx_kv_batch_get(kv, NULL, 3, NULL), RDMX_ERR_INVALID);
    CHECK_OK(rdmx_kv_batch_get(kv, it, 0, NULL));
    CHECK_EQ_U64(cmd_get_all(kv), gets);
    th_log("args: bad slot, no region, empty key, mode ADD refused, nothing "
           "sent: ok");
}

static void part_replicas(const char *servers)
{
    enum { N = 64, SZ = 8192 };
    rdmx_kv_t *kv = client(servers, 2, PATIENT);
    static rdmx_kv_batch_item_t it[N];
    static char keys[N][32];
    uint64_t before = 0, after = 0;
    rdmx_kv_op_params_t p = {.field_mask = RDMX_KV_OP_PARAM_FIELD_FLAGS |
                                           RDMX_KV_OP_PARAM_FIELD_TTL,
                             .flags = 7, .ttl_ms = 600000};

    for (unsigned s = 0; s < NS; s++)
        before += stat_on(kv, s, "curr_items");
    for (size_t i = 0; i < N; i++) {
        key_of(keys[i], sizeof(keys[i]), "rep", i);
        it[i] = (rdmx_kv_batch_item_t){.key = keys[i],
                                       .klen = strlen(keys[i]),
                                       .mr = src_mr,
                                       .buf = slot(src, SZ, i),
                                       .size = SZ};
        th_fill(it[i].buf, SZ, seed_of("rep", i));
    }
    CHECK_OK(rdmx_kv_batch_put(kv, it, N, &p));
    for (size_t i = 0; i < N; i++)
        CHECKF(it[i].status == RDMX_OK, "put %s: %s", keys[i],
               rdmx_status_name(it[i].status));
    for (unsigned s = 0; s < NS; s++)
        after += stat_on(kv, s, "curr_items");
    CHECK_EQ_U64(after - before, 2 * N);
    memset(dst, SENT, N * (SZ + 2 * GUARD));
    for (size_t i = 0; i < N; i++) {
        it[i].mr = dst_mr;
        it[i].buf = slot(dst, SZ, i);
    }
    CHECK_OK(rdmx_kv_batch_get(kv, it, N, NULL));
    for (size_t i = 0; i < N; i++) {
        CHECKF(it[i].status == RDMX_OK, "get %s: %s", keys[i],
               rdmx_status_name(it[i].status));
        CHECK_PATTERN(it[i].buf, SZ, seed_of("rep", i), 0);
    }
    {
        rdmx_kv_meta_t m;
        char v[SZ];
        CHECK_OK(rdmx_kv_get(kv, keys[0], strlen(keys[0]), v, sizeof(v),
                             NULL, &m));
        CHECK_EQ_U64(m.flags, 7);
    }
    rdmx_kv_destroy(kv);
    th_log("replicas: 64 keys stored twice, read back, flags kept: ok");
}

/* --- requests cut at the limits ------------------------------------------ */

/* Requests server @s has received so far (this stats call not counted). */
static uint64_t requests_on(rdmx_kv_t *kv, unsigned s)
{
    return stat_on(kv, s, "rpc_requests");
}

/* Run @get or put of @items on the one-server client @kv: it must take
 * exactly @want requests. */
static void expect_requests(rdmx_kv_t *kv, int get, rdmx_kv_batch_item_t *it,
                            size_t n, uint64_t want, const char *what)
{
    uint64_t r0 = requests_on(kv, 0), r1;

    if (get)
        CHECK_OK(rdmx_kv_batch_get(kv, it, n, NULL));
    else
        CHECK_OK(rdmx_kv_batch_put(kv, it, n, NULL));
    /* (the second stats call counts itself once) */
    r1 = requests_on(kv, 0);
    CHECKF(r1 - r0 - 1 == want, "%s: %" PRIu64 " requests, want %" PRIu64,
           what, r1 - r0 - 1, want);
}

static void part_split(const char *addr)
{
    enum { N = 5000, SZ = 256, NR = 9, BIG = 17 };
    static rdmx_kv_batch_item_t it[N];
    static char keys[N][32];
    rdmx_mr_t *mr[NR];
    rdmx_kv_params_t p = {.field_mask = RDMX_KV_PARAM_FIELD_TIMEOUT,
                          .timeout_ms = PATIENT};
    rdmx_kv_t *kv;

    CHECK_OK(rdmx_kv_create(worker, addr, &p, &kv));
    CHECK_OK(rdmx_kv_wait_ready(kv, 20000 * TH_SLOW));
    /* 5,000 keys: over RDMX_KV_BATCH_MAX (4096), two requests */
    for (size_t i = 0; i < N; i++) {
        key_of(keys[i], sizeof(keys[i]), "sp", i);
        it[i] = (rdmx_kv_batch_item_t){.key = keys[i],
                                       .klen = strlen(keys[i]),
                                       .mr = src_mr,
                                       .buf = slot(src, SZ, i),
                                       .size = SZ};
        th_fill(it[i].buf, SZ, seed_of("sp", i));
    }
    expect_requests(kv, 0, it, N, 2, "5000-key put");
    memset(dst, SENT, N * (SZ + 2 * GUARD));
    for (size_t i = 0; i < N; i++) {
        CHECKF(it[i].status == RDMX_OK, "put %s: %s", keys[i],
               rdmx_status_name(it[i].status));
        it[i].mr = dst_mr;
        it[i].buf = slot(dst, SZ, i);
    }
    expect_requests(kv, 1, it, N, 2, "5000-key get");
    for (size_t i = 0; i < N; i++) {
        unsigned char *q = it[i].buf;
        CHECKF(it[i].status == RDMX_OK, "get %s: %s", keys[i],
               rdmx_status_name(it[i].status));
        CHECK_PATTERN(q, SZ, seed_of("sp", i), 0);
        check_sentinel(q - GUARD, GUARD, "guard before", i);
        check_sentinel(q + SZ, GUARD, "guard after", i);
    }

    /* slots in 9 regions: over RDMX_RPC_BULK_MAX (8), two requests */
    for (int r = 0; r < NR; r++) {
        CHECK_OK(rdmx_mem_alloc(ctx, 8192,
                                RDMX_ACCESS_READ | RDMX_ACCESS_WRITE,
                                &mr[r]));
        memset(rdmx_mr_addr(mr[r]), SENT, 8192);
        it[r].mr = mr[r];
        it[r].buf = (char *)rdmx_mr_addr(mr[r]) + 1000;
        it[r].size = SZ;
    }
    expect_requests(kv, 1, it, NR, 2, "9 regions");
    for (int r = 0; r < NR; r++) {
        unsigned char *base = rdmx_mr_addr(mr[r]);
        CHECKF(it[r].status == RDMX_OK, "region %d: %s", r,
               rdmx_status_name(it[r].status));
        CHECK_PATTERN(base + 1000, SZ, seed_of("sp", (size_t)r), 0);
        check_sentinel(base, 1000, "region before", (size_t)r);
        check_sentinel(base + 1000 + SZ, 8192 - 1000 - SZ, "region after",
                       (size_t)r);
        rdmx_mem_deregister(mr[r]);
    }

    /* 17 slots of 4 MiB (68 MiB, over RDMX_KV_ZBATCH_BYTES) for absent
     * keys, all over the same bytes: two requests, nothing written */
    memset(dst, SENT, 4 * TH_MIB);
    for (size_t i = 0; i < BIG; i++) {
        key_of(keys[i], sizeof(keys[i]), "nowhere", i);
        it[i] = (rdmx_kv_batch_item_t){.key = keys[i],
                                       .klen = strlen(keys[i]),
                                       .mr = dst_mr,
                                       .buf = dst,
                                       .size = 4 * TH_MIB};
    }
    expect_requests(kv, 1, it, BIG, 2, "68 MiB of slots");
    for (size_t i = 0; i < BIG; i++)
        CHECKF(it[i].status == RDMX_ERR_NOT_FOUND, "%s: %s", keys[i],
               rdmx_status_name(it[i].status));
    check_sentinel(dst, 4 * TH_MIB, "absent", 0);
    rdmx_kv_destroy(kv);
    th_log("split: 5000 keys, 9 regions, 68 MiB of slots: 2 requests each, "
           "byte for byte: ok");
}

/* --- hostile requests ----------------------------------------------------- */

static void le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Append a key entry at @p: header (mode, size), @key, locator (offset,
 * bulk). Returns its bytes. */
static size_t entry(unsigned char *p, uint8_t mode, const char *key,
                    uint64_t size, uint64_t offset, uint8_t bulk)
{
    size_t klen = strlen(key);

    memset(p, 0, 32);
    p[0] = mode;
    p[2] = (unsigned char)klen;
    p[3] = (unsigned char)(klen >> 8);
    le64(p + 24, size);
    memcpy(p + 32, key, klen);
    memset(p + 32 + klen, 0, 16);
    le64(p + 32 + klen, offset);
    p[32 + klen + 8] = bulk;
    return 32 + klen + 16;
}

static uint64_t bad_requests(rdmx_channel_t *ch)
{
    char s[4096];
    size_t len = 0;

    CHECK_OK(rdmx_call(ch, "kv.stats", NULL, 0, s, sizeof(s) - 1, NULL, &len));
    s[len] = '\0';
    return stat_of(s, "bad_requests");
}

/* Send a hostile request: RDMX_ERR_PROTO with a message, counted once,
 * the lent buffer (if any) untouched. */
static void hostile(rdmx_channel_t *ch, const char *method,
                    const unsigned char *data, size_t len,
                    const rdmx_rpc_bulk_t *bulk, unsigned nbulk,
                    const char *what)
{
    unsigned char resp[512];
    size_t rl = 0;
    uint64_t before = bad_requests(ch);
    rdmx_call_params_t cp = {0};
    rdmx_status_t st;
    char d[512];

    if (nbulk > 0) {
        cp.field_mask = RDMX_CALL_PARAM_FIELD_BULK;
        cp.bulk = bulk;
        cp.nbulk = nbulk;
    }
    memset(dst, SENT, 8192);
    st = rdmx_call(ch, method, data, len, resp, sizeof(resp), &cp, &rl);
    snprintf(d, sizeof(d), "%s", rdmx_error_detail());
    th_log("  %-40s -> %s: %s", what, rdmx_status_name(st), d);
    CHECKF(st == RDMX_ERR_PROTO, "%s: %s, want PROTO", what,
           rdmx_status_name(st));
    CHECKF(strstr(d, method) != NULL, "%s: message '%s' names no handler",
           what, d);
    CHECK_EQ_U64(bad_requests(ch), before + 1);
    check_sentinel(dst, 8192, what, 0);
}

static void part_hostile(rdmx_kv_t *kv, const char *addr)
{
    static unsigned char req[8192];
    rdmx_rpc_bulk_t wr = {.mr = dst_mr, .offset = 0, .length = 4096,
                          .access = RDMX_ACCESS_WRITE};
    rdmx_rpc_bulk_t rd = {.mr = dst_mr, .offset = 0, .length = 4096,
                          .access = RDMX_ACCESS_READ};
    rdmx_rpc_bulk_t big = {.mr = dst_mr, .offset = 0,
                           .length = rdmx_mr_length(dst_mr),
                           .access = RDMX_ACCESS_WRITE};
    rdmx_channel_t *ch;
    size_t n;

    CHECK_OK(rdmx_channel_create(worker, addr, NULL, &ch));
    CHECK_OK(rdmx_channel_wait_ready(ch, 20000 * TH_SLOW));

    memset(req, 0, 8);
    hostile(ch, "kv.batch_get", req, 8, &wr, 1, "batch count 0");
    le32(req, 1);
    n = 8 + entry(req + 8, 0, "s4:0", 4096, 0, 0);
    hostile(ch, "kv.batch_get", req, n - 3, &wr, 1, "truncated locator");
    req[n - 2] = 1;
    hostile(ch, "kv.batch_get", req, n, &wr, 1, "reserved locator byte");
    n = 8 + entry(req + 8, 1, "s4:0", 4096, 0, 0);
    hostile(ch, "kv.batch_get", req, n, &wr, 1, "mode 1");
    n = 8 + entry(req + 8, 0, "s4:0", 4096, 0, 1);
    hostile(ch, "kv.batch_get", req, n, &wr, 1, "descriptor 1 of 1");
    hostile(ch, "kv.batch_get", req, n, NULL, 0, "no descriptor");
    n = 8 + entry(req + 8, 0, "s4:0", 4096, 1, 0);
    hostile(ch, "kv.batch_get", req, n, &wr, 1, "slot 1 byte past the end");
    n = 8 + entry(req + 8, 0, "s4:0", 4096, UINT64_MAX - 100, 0);
    hostile(ch, "kv.batch_get", req, n, &wr, 1, "offset near 2^64");
    n = 8 + entry(req + 8, 0, "s4:0", UINT64_MAX, 0, 0);
    hostile(ch, "kv.batch_get", req, n, &wr, 1, "size 2^64-1");
    n = 8 + entry(req + 8, 0, "s4:0", 4096, 0, 0);
    hostile(ch, "kv.batch_get", req, n, &rd, 1, "GET into a read-only lend");
    hostile(ch, "kv.batch_put", req, n, &wr, 1, "PUT from a write-only lend");
    hostile(ch, "kv.batch_get", req, n + 5, &wr, 1, "trailing bytes");
    n = 8 + entry(req + 8, 0, "", 4096, 0, 0);
    hostile(ch, "kv.batch_get", req, n, &wr, 1, "empty key");
    /* 5 slots of 16 MiB (over 64 MiB in all) in a 20 MiB lend: each fits
     * its descriptor, the sum does not fit the limit */
    le32(req, 5);
    n = 8;
    for (int i = 0; i < 5; i++)
        n += entry(req + n, 0, "s4:0", 16 * TH_MIB, 0, 0);
    hostile(ch, "kv.batch_get", req, n, &big, 1, "slots over 64 MiB in all");
    rdmx_channel_destroy(ch);

    /* the server keeps serving */
    part_mixed(kv);
    th_log("hostile: 14 requests refused, counted, nothing written; still "
           "serving: ok");
}

/* --- a server stalls ------------------------------------------------------ */

/* SIGSTOP @k and wait until the kernel says it is stopped. */
static void stop_server(kvd_t *k)
{
    char path[64], st[512];
    double t0 = th_now_ms();

    kvd_kill(k, SIGSTOP);
    snprintf(path, sizeof(path), "/proc/%d/stat", k->pid);
    for (;;) {
        FILE *f = fopen(path, "r");
        const char *paren;
        size_t n = 0;

        if (f != NULL) {
            n = fread(st, 1, sizeof(st) - 1, f);
            fclose(f);
        }
        st[n] = '\0';
        paren = strrchr(st, ')');
        if (paren != NULL && (paren[2] == 'T' || paren[2] == 't'))
            return;
        CHECKF(th_now_ms() - t0 < 2000, "rdmx-kvd did not stop");
        th_sleep_ms(1);
    }
}

static void part_stalled(const char *servers)
{
    enum { N = 96, SZ = 4096, DEADLINE = 300 };
    rdmx_kv_t *kv = client(servers, 1, QUICK);
    static rdmx_kv_batch_item_t it[N];
    static char keys[N][32];
    rdmx_kv_op_params_t p = {.field_mask = RDMX_KV_OP_PARAM_FIELD_TIMEOUT,
                             .timeout_ms = DEADLINE};
    const unsigned victim = 1;
    size_t stalled = 0;
    rdmx_status_t why = RDMX_OK;
    double t0, dt;

    memset(dst, SENT, N * (SZ + 2 * GUARD));
    for (size_t i = 0; i < N; i++) {
        key_of(keys[i], sizeof(keys[i]), "s4", i);
        it[i] = (rdmx_kv_batch_item_t){.key = keys[i],
                                       .klen = strlen(keys[i]),
                                       .mr = dst_mr,
                                       .buf = slot(dst, SZ, i),
                                       .size = SZ};
    }
    stop_server(&srv[victim]);
    t0 = th_now_ms();
    CHECK_OK(rdmx_kv_batch_get(kv, it, N, &p));
    dt = th_now_ms() - t0;
    kvd_kill(&srv[victim], SIGCONT);
    for (size_t i = 0; i < N; i++) {
        if (rdmx_kv_server_of(kv, keys[i], strlen(keys[i])) == victim) {
            stalled++;
            why = it[i].status;
            CHECKF(it[i].status < 0 && it[i].status != RDMX_ERR_NOT_FOUND,
                   "%s on the stopped server: %s", keys[i],
                   rdmx_status_name(it[i].status));
        } else {
            CHECKF(it[i].status == RDMX_OK, "%s: %s", keys[i],
                   rdmx_status_name(it[i].status));
            CHECK_PATTERN(it[i].buf, SZ, seed_of("s4", i), 0);
        }
    }
    CHECK(stalled > 0);
    /* a call that lent slots ends at most 200 ms after its deadline */
    CHECKF(dt < DEADLINE + 200 + 2000.0 * TH_SLOW, "took %.0f ms", dt);
    /* the server runs again and may still hold the request: nothing lands
     * in the slots the call gave back */
    th_sleep_ms(500);
    rdmx_worker_progress(worker);
    for (size_t i = 0; i < N; i++) {
        unsigned char *q = it[i].buf;
        if (rdmx_kv_server_of(kv, keys[i], strlen(keys[i])) == victim)
            check_sentinel(q, SZ, "slot given back", i);
        check_sentinel(q - GUARD, GUARD, "guard before", i);
        check_sentinel(q + SZ, GUARD, "guard after", i);
    }
    /* and it serves again once the channel is back */
    CHECK_OK(rdmx_kv_wait_ready(kv, 20000 * TH_SLOW));
    CHECK_OK(rdmx_kv_batch_get(kv, it, N, NULL));
    for (size_t i = 0; i < N; i++)
        CHECKF(it[i].status == RDMX_OK, "%s after SIGCONT: %s", keys[i],
               rdmx_status_name(it[i].status));
    rdmx_kv_destroy(kv);
    th_log("stalled: %zu keys of the stopped server failed (%s) in %.0f ms, "
           "their slots untouched after it resumed; served again: ok",
           stalled, rdmx_status_name(why), dt);
}

/* --- a server dies -------------------------------------------------------- */

static void part_dead(const char *servers)
{
    enum { N = 96, SZ = 4096 };
    rdmx_kv_t *kv = client(servers, 1, QUICK);
    static rdmx_kv_batch_item_t it[N];
    static char keys[N][32];
    const unsigned victim = 1;
    size_t dead = 0;
    rdmx_status_t why = RDMX_OK;
    double t0, dt;

    kvd_kill(&srv[victim], SIGKILL);
    kvd_wait(&srv[victim], 10000, NULL, 0, NULL);
    memset(dst, SENT, N * (SZ + 2 * GUARD));
    for (size_t i = 0; i < N; i++) {
        key_of(keys[i], sizeof(keys[i]), "s4", i);
        it[i] = (rdmx_kv_batch_item_t){.key = keys[i],
                                       .klen = strlen(keys[i]),
                                       .mr = dst_mr,
                                       .buf = slot(dst, SZ, i),
                                       .size = SZ};
    }
    t0 = th_now_ms();
    CHECK_OK(rdmx_kv_batch_get(kv, it, N, NULL));
    dt = th_now_ms() - t0;
    for (size_t i = 0; i < N; i++) {
        if (rdmx_kv_server_of(kv, keys[i], strlen(keys[i])) == victim) {
            dead++;
            why = it[i].status;
            CHECKF(it[i].status < 0 && it[i].status != RDMX_ERR_NOT_FOUND,
                   "%s on the dead server: %s", keys[i],
                   rdmx_status_name(it[i].status));
        } else {
            CHECKF(it[i].status == RDMX_OK, "%s: %s", keys[i],
                   rdmx_status_name(it[i].status));
            CHECK_PATTERN(it[i].buf, SZ, seed_of("s4", i), 0);
        }
        check_sentinel((unsigned char *)it[i].buf - GUARD, GUARD, "guard before", i);
        check_sentinel((unsigned char *)it[i].buf + SZ, GUARD, "guard after",
                       i);
    }
    CHECK(dead > 0);
    CHECKF(dt < QUICK + 3000.0 * TH_SLOW, "took %.0f ms", dt);
    rdmx_kv_destroy(kv);
    th_log("dead: %zu keys of the killed server failed (%s), %zu read, in "
           "%.0f ms: ok",
           dead, rdmx_status_name(why), N - dead, dt);
}

int main(void)
{
    char servers[256];
    rdmx_kv_t *kv;

    th_init("kv_batch", 220);
    kl_start();
    for (int s = 0; s < NS; s++)
        kvd_start(&srv[s], NULL, "--workers", "1", "--memory", "96m",
                  "--max-value", "5m", NULL);
    snprintf(servers, sizeof(servers), "%s,%s,%s", srv[0].addr, srv[1].addr,
             srv[2].addr);
    th_log("servers %s (transport %s)", servers, th_transport_env());
    ctx = th_context();
    worker = th_worker(ctx, 0);
    CHECK_OK(rdmx_mem_alloc(ctx, REGION, RDMX_ACCESS_READ | RDMX_ACCESS_WRITE,
                            &src_mr));
    CHECK_OK(rdmx_mem_alloc(ctx, REGION, RDMX_ACCESS_READ | RDMX_ACCESS_WRITE,
                            &dst_mr));
    src = rdmx_mr_addr(src_mr);
    dst = rdmx_mr_addr(dst_mr);
    kv = client(servers, 1, PATIENT);

    round_trip(kv, "s1", 1, 4 * TH_KIB);
    round_trip(kv, "s6", 64, 4 * TH_KIB);
    round_trip(kv, "s4", 1024, 4 * TH_KIB);
    round_trip(kv, "m2", 64, 256 * TH_KIB);
    round_trip(kv, "l4", 4, 4 * TH_MIB);
    part_mixed(kv);
    part_too_small(kv);
    part_args(kv);
    part_replicas(servers);
    part_split(srv[2].addr);
    part_hostile(kv, srv[0].addr);
    part_stalled(servers);
    part_dead(servers);

    rdmx_kv_destroy(kv);
    rdmx_mem_deregister(src_mr);
    rdmx_mem_deregister(dst_mr);
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    kvd_stop(&srv[0]);
    kvd_stop(&srv[2]);
    th_log("ok");
    return 0;
}
