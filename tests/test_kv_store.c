/*
 * kv_store: the storage engine of rdmx-kvd (src/kv/store.c, alloc.c), no
 * network. The "region" is malloc'd memory; the clock is the test's.
 *
 * - SipHash-2-4 gives the reference vectors.
 * - Allocator: 16-byte granules (payloads at 8 modulo 16), usable >= asked,
 *   double free and garbage offsets refused, alloc_from, neighbours; a
 *   randomized run (sizes 1 B - 1 MiB) that keeps patterns in every live
 *   block and checks them and that no two live blocks overlap, then frees
 *   everything and finds one free block of the full capacity again (also
 *   with an unaligned base).
 * - A range past 64 GiB (reserved with MAP_NORESERVE, barely touched):
 *   32-byte granules, and a store over it.
 * - Store round trips: binary keys with NULs, 0-byte values, max-size keys
 *   (250 by default, 65535 with max_key 65535), limits (TOO_BIG, INVALID).
 * - A randomized model run (SET/ADD/REPLACE/CAS, GET, DELETE with and
 *   without CAS, TOUCH, EXISTS, INCR/DECR, TTLs, a moving clock, reclaim)
 *   against a shadow model: every result, value, flags, version, and every
 *   counter at the end (hits + misses == cmd_get, curr_items, bytes).
 * - TTL: lazy expiry on get (get_expired, expired_unfetched), reclaim (only
 *   what is due, bounded per call), touch extending and clearing a TTL.
 * - LRU: the least recently used are evicted, recently read ones stay;
 *   eviction NONE fails with NO_MEMORY and keeps everything; a referenced
 *   item is never evicted. An item moves to the recent end at most once
 *   per ~1 s epoch.
 * - References: an item replaced, deleted, flushed or expired while held
 *   keeps its bytes and its memory (more writes wrap memory several times)
 *   until released; then everything is freed.
 * - reservations held while the index grows commit into the right chain.
 * - reserve/commit/abort: failed commits free the reservation; a reserved
 *   item is invisible until commit.
 * - incr/decr: wrap at 2^64, floor at 0, non-numbers INVALID, flags and TTL
 *   kept, new version; a referenced counter is not rewritten in place.
 * - prefix_hits, flush.
 * - Fill-then-shift: 64 MiB filled with 100 B values until evictions start,
 *   then 64 KiB values: the share of the region holding live 64 KiB values
 *   is printed and must be >= 85 % (once with the LRU in address order, once
 *   shuffled by reads).
 * - 4 threads of get/set/delete on 64 keys over 4 MiB (constant eviction),
 *   values self-checksummed and verified while the reference is held.
 */
#define _GNU_SOURCE
#include "harness.h"

#include "kv/alloc.h"
#include "kv/store.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return n == 0 ? 0 : rng_next(s) % n;
}

static rdmx_kv_store_t *store_new(void *mem, size_t size, size_t max_key,
                                  rdmx_kv_eviction_t ev)
{
    rdmx_kv_store_params_t p = {.field_mask =
                                    RDMX_KV_STORE_FIELD_EVICTION |
                                    (max_key ? RDMX_KV_STORE_FIELD_MAX_KEY : 0),
                                .max_key = max_key,
                                .eviction = ev};
    rdmx_kv_store_t *s = NULL;
    CHECK_OK(rdmx__kv_store_create(mem, size, &p, &s));
    return s;
}

static void stats(rdmx_kv_store_t *s, rdmx_kv_store_stats_t *st)
{
    rdmx__kv_store_stats(s, st);
}

static rdmx_status_t put(rdmx_kv_store_t *s, const char *key, const void *v,
                         size_t vlen, uint64_t now)
{
    return rdmx__kv_store_set(s, key, strlen(key), v, vlen, RDMX_KV_STORE_SET,
                              0, 0, 0, now, NULL);
}

static void put_pattern(rdmx_kv_store_t *s, const char *key, size_t vlen,
                        uint64_t seed, uint64_t now)
{
    rdmx_kv_item_t *it;
    CHECK_OK(rdmx__kv_store_reserve(s, key, strlen(key), vlen, now, &it));
    th_fill(rdmx__kv_item_value(s, it), vlen, seed);
    CHECK_OK(
        rdmx__kv_store_commit(s, it, RDMX_KV_STORE_SET, 0, 0, 0, now, NULL));
}

static int present(rdmx_kv_store_t *s, const char *key, uint64_t now)
{
    return rdmx__kv_store_exists(s, key, strlen(key), now) == RDMX_OK;
}

/* The value of @key must be the pattern of @seed, @vlen bytes. */
static void expect_pattern(rdmx_kv_store_t *s, const char *key, size_t vlen,
                           uint64_t seed, uint64_t now)
{
    rdmx_kv_item_t *it;
    CHECK_OK(rdmx__kv_store_get(s, key, strlen(key), now, &it));
    CHECK_EQ_U64(rdmx__kv_item_length(it), vlen);
    CHECK_PATTERN(rdmx__kv_item_value(s, it), vlen, seed, 0);
    rdmx__kv_store_release(s, it);
}

static void store_ok(rdmx_kv_store_t *s)
{
    CHECK_OK(rdmx__kv_store_check(s));
}

/* A reserved item keeps 32 bits of its key's hash for its commit (item_new):
 * reservations held while the index grows (more than doubles, its rehash
 * run to the end) still commit into the right chain, replacing the item of
 * their key; a commit into the wrong one would leave two items of a key,
 * and the older one found after a delete. */
static void test_reserve_across_growth(void)
{
    size_t size = 16 * TH_MIB;
    char *mem = th_alloc(size), key[16];
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_NONE);
    rdmx_kv_store_stats_t st;
    rdmx_kv_item_t *held[100];
    uint64_t now = 1000, power;
    unsigned i;

    for (i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "g%u", i);
        put_pattern(s, key, 24, th_seed(21, i, 0), now);
    }
    for (i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "g%u", i);
        CHECK_OK(
            rdmx__kv_store_reserve(s, key, strlen(key), 24, now, &held[i]));
        th_fill(rdmx__kv_item_value(s, held[i]), 24, th_seed(22, i, 0));
    }
    stats(s, &st);
    power = st.hash_power_level;
    for (i = 0; i < 40000; i++) {
        snprintf(key, sizeof(key), "f%u", i);
        CHECK_OK(put(s, key, "x", 1, now));
    }
    stats(s, &st);
    CHECKF(st.hash_power_level >= power + 2 && !st.hash_is_expanding,
           "the index went from 2^%llu to 2^%llu buckets (expanding: %llu)",
           (unsigned long long)power, (unsigned long long)st.hash_power_level,
           (unsigned long long)st.hash_is_expanding);
    for (i = 0; i < 100; i++)
        CHECK_OK(rdmx__kv_store_commit(s, held[i], RDMX_KV_STORE_SET, 0, 0, 0,
                                       now, NULL));
    stats(s, &st);
    CHECK_EQ_U64(st.curr_items, 40100);
    store_ok(s);
    for (i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "g%u", i);
        expect_pattern(s, key, 24, th_seed(22, i, 0), now);
        CHECK_OK(rdmx__kv_store_delete(s, key, strlen(key), 0, now));
        CHECK(!present(s, key, now));
    }
    store_ok(s);
    rdmx__kv_store_destroy(s);
    free(mem);
    th_log("reservations held while the index grew 2^%llu -> 2^%llu: each "
           "commit replaced its key's item: ok",
           (unsigned long long)power, (unsigned long long)st.hash_power_level);
}

/* ------------------------------------------------------------------------ */
/* SipHash                                                                  */
/* ------------------------------------------------------------------------ */

/* SipHash-2-4 as its paper states it, a byte at a time: the reference
 * the store's form is checked against. */
static uint64_t siphash_ref(const uint64_t k[2], const unsigned char *p,
                            size_t len)
{
    uint64_t v[4] = {0x736f6d6570736575ull ^ k[0], 0x646f72616e646f6dull ^ k[1],
                     0x6c7967656e657261ull ^ k[0],
                     0x7465646279746573ull ^ k[1]};
    uint64_t m = 0;
    size_t i;

#define REF_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define REF_ROUND()                                                            \
    do {                                                                       \
        v[0] += v[1];                                                          \
        v[1] = REF_ROTL(v[1], 13) ^ v[0];                                      \
        v[0] = REF_ROTL(v[0], 32);                                             \
        v[2] += v[3];                                                          \
        v[3] = REF_ROTL(v[3], 16) ^ v[2];                                      \
        v[0] += v[3];                                                          \
        v[3] = REF_ROTL(v[3], 21) ^ v[0];                                      \
        v[2] += v[1];                                                          \
        v[1] = REF_ROTL(v[1], 17) ^ v[2];                                      \
        v[2] = REF_ROTL(v[2], 32);                                             \
    } while (0)
    for (i = 0; i <= len; i++) {
        if (i == len) /* the last block: the length in its top byte */
            m |= (uint64_t)(len & 0xff) << 56;
        else
            m |= (uint64_t)p[i] << (8 * (i % 8));
        if (i % 8 == 7 || i == len) {
            v[3] ^= m;
            REF_ROUND();
            REF_ROUND();
            v[0] ^= m;
            m = 0;
        }
    }
    v[2] ^= 0xff;
    REF_ROUND();
    REF_ROUND();
    REF_ROUND();
    REF_ROUND();
#undef REF_ROUND
#undef REF_ROTL
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

static void test_siphash(void)
{
    /* Reference vectors of SipHash-2-4 (key 00..0f, message 00..len-1),
     * from the authors' vectors.h, as little-endian 64-bit values. */
    static const struct {
        size_t len;
        uint64_t h;
    } v[] = {
        {0, 0x726fdb47dd0e0e31ull},  {1, 0x74f839c593dc67fdull},
        {7, 0xab0200f58b01d137ull},  {8, 0x93f5f5799a932462ull},
        {15, 0xa129ca6149be45e5ull}, {63, 0x958a324ceb064572ull},
    };
    uint64_t k[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    unsigned char msg[64];

    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (unsigned char)i;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        CHECKF(rdmx__kv_siphash(k, msg, v[i].len) == v[i].h,
               "siphash of %zu bytes: %016llx", v[i].len,
               (unsigned long long)rdmx__kv_siphash(k, msg, v[i].len));
        CHECK(siphash_ref(k, msg, v[i].len) == v[i].h);
    }
    /* Every length, at every alignment, against the byte-at-a-time form
     * (the store's reads its last block without a loop; a key is mostly
     * that block), with bytes past the message that must not count. */
    {
        unsigned char buf[64 + 16];
        uint64_t rk[2] = {th_seed(11, 0, 0), th_seed(12, 0, 0)};

        th_fill(buf, sizeof(buf), th_seed(13, 0, 0));
        for (size_t off = 0; off < 8; off++)
            for (size_t len = 0; len + off <= 64; len++) {
                uint64_t want = siphash_ref(rk, buf + off, len);
                buf[off + len] ^= 0x5a; /* (the byte after: not read) */
                CHECKF(rdmx__kv_siphash(rk, buf + off, len) == want,
                       "siphash of %zu bytes at offset %zu", len, off);
                buf[off + len] ^= 0x5a;
            }
    }
    th_log("siphash: reference vectors ok, every length and alignment");
}

/* ------------------------------------------------------------------------ */
/* Allocator                                                                */
/* ------------------------------------------------------------------------ */

static void test_alloc_basic(void)
{
    size_t size = 1 * TH_MIB;
    char *mem = th_alloc(size + 64);
    rdmx_kv_alloc_t a;
    rdmx_kv_alloc_stats_t st;
    rdmx_kv_alloc_block_t b;
    uint64_t o1, o2, o3, h;

    CHECK_ST(rdmx__kv_alloc_init(&a, mem, 100), RDMX_ERR_INVALID);
    CHECK_OK(rdmx__kv_alloc_init(&a, mem + 5, size)); /* unaligned base */
    rdmx__kv_alloc_stats(&a, &st);
    CHECK(st.free_blocks == 1 && st.used_blocks == 0);
    CHECK(st.capacity >= size - 40 && st.capacity % 16 == 0);
    CHECK_EQ_U64(st.largest_free, st.capacity - RDMX_KV_ALLOC_HDR);

    o1 = rdmx__kv_alloc(&a, 0);
    o2 = rdmx__kv_alloc(&a, 100);
    o3 = rdmx__kv_alloc(&a, 5000);
    CHECK(o1 != RDMX_KV_ALLOC_NONE && o2 != RDMX_KV_ALLOC_NONE &&
          o3 != RDMX_KV_ALLOC_NONE);
    /* 16-byte granules, 8-byte headers: payloads at 8 modulo 16 */
    CHECK((uintptr_t)(mem + 5 + o1) % 16 == 8);
    CHECK((uintptr_t)(mem + 5 + o2) % 16 == 8);
    CHECK((uintptr_t)(mem + 5 + o3) % 16 == 8);
    CHECK_EQ_U64(rdmx__kv_alloc_usable_size(&a, o1), 24);
    CHECK_EQ_U64(rdmx__kv_alloc_usable_size(&a, o2), 104);
    CHECK(rdmx__kv_alloc_usable_size(&a, o3) >= 5000);
    CHECK(o2 >= o1 + 24 && o3 >= o2 + 104);
    /* the whole capacity cannot be had twice; too large fails */
    CHECK(rdmx__kv_alloc(&a, size) == RDMX_KV_ALLOC_NONE);
    CHECK(rdmx__kv_alloc(&a, SIZE_MAX) == RDMX_KV_ALLOC_NONE);

    /* neighbours */
    rdmx__kv_alloc_block(&a, o2, &b);
    CHECK(!b.is_free && b.next == o3 && b.usable == 104);
    CHECK(b.prev == RDMX_KV_ALLOC_NONE); /* o1 is allocated: no footer */

    /* free merges: o2 alone, then o1 joins it, then o3 and the rest */
    h = rdmx__kv_free(&a, o2);
    CHECK_EQ_U64(h, o2);
    CHECK(rdmx__kv_free(&a, o2) == RDMX_KV_ALLOC_NONE);      /* double free */
    CHECK(rdmx__kv_free(&a, o2 + 64) == RDMX_KV_ALLOC_NONE); /* not a block */
    CHECK(rdmx__kv_free(&a, o2 + 8) == RDMX_KV_ALLOC_NONE);  /* misaligned */
    CHECK(rdmx__kv_free(&a, 1) == RDMX_KV_ALLOC_NONE);
    CHECK(rdmx__kv_free(&a, (uint64_t)size * 4) == RDMX_KV_ALLOC_NONE);
    rdmx__kv_alloc_block(&a, o3, &b);
    CHECK(b.prev == o2); /* a free predecessor is found */
    CHECK_OK(rdmx__kv_alloc_check(&a));
    h = rdmx__kv_free(&a, o1);
    CHECK_EQ_U64(h, o1);
    rdmx__kv_alloc_block(&a, o1, &b); /* spans 32 + 112, merged */
    CHECK(b.is_free && b.next == o3);
    CHECK_EQ_U64(b.usable, (32 + 112) - RDMX_KV_ALLOC_HDR);
    /* alloc_from: exactly into that hole */
    CHECK(rdmx__kv_alloc_from(&a, o1, 137) == RDMX_KV_ALLOC_NONE);
    CHECK_EQ_U64(rdmx__kv_alloc_from(&a, o1, 136), o1);
    CHECK(rdmx__kv_alloc_from(&a, o1, 10) == RDMX_KV_ALLOC_NONE); /* used */
    CHECK(rdmx__kv_free(&a, o1) == o1);
    CHECK(rdmx__kv_free(&a, o3) == o1); /* merges into everything */
    rdmx__kv_alloc_stats(&a, &st);
    CHECK(st.free_blocks == 1 && st.used_blocks == 0 && st.used_bytes == 0);
    CHECK_EQ_U64(st.largest_free, st.capacity - RDMX_KV_ALLOC_HDR);
    /* and the full capacity can be allocated in one piece */
    CHECK_EQ_U64(rdmx__kv_alloc(&a, st.largest_free), o1);
    CHECK_OK(rdmx__kv_alloc_check(&a));
    free(mem);
    th_log("alloc basic: ok");
}

typedef struct {
    uint64_t off;
    size_t size;
    uint64_t seed;
} live_blk_t;

static int cmp_live(const void *x, const void *y)
{
    const live_blk_t *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

/* Pattern in the first and last 4 KiB of a block (all of a smaller one):
 * where in-band metadata of a neighbour would land. */
static void blk_fill(char *p, size_t n, uint64_t seed)
{
    if (n <= 8192) {
        th_fill(p, n, seed);
    } else {
        th_fill_at(p, 4096, seed, 0);
        th_fill_at(p + n - 4096, 4096, seed, n - 4096);
    }
}

static void blk_verify(const char *p, size_t n, uint64_t seed)
{
    if (n <= 8192) {
        CHECK_PATTERN(p, n, seed, 0);
    } else {
        CHECK_PATTERN(p, 4096, seed, 0);
        CHECK_PATTERN(p + n - 4096, 4096, seed, n - 4096);
    }
}

static void verify_live(rdmx_kv_alloc_t *a, char *base, live_blk_t *live,
                        size_t n)
{
    qsort(live, n, sizeof(*live), cmp_live);
    for (size_t i = 0; i < n; i++) {
        size_t usable = rdmx__kv_alloc_usable_size(a, live[i].off);
        CHECK(usable >= live[i].size);
        if (i + 1 < n)
            CHECKF(live[i].off + usable + RDMX_KV_ALLOC_HDR <= live[i + 1].off,
                   "blocks at %llu (+%zu) and %llu overlap",
                   (unsigned long long)live[i].off, usable,
                   (unsigned long long)live[i + 1].off);
        blk_verify(base + live[i].off, live[i].size, live[i].seed);
    }
    CHECK_OK(rdmx__kv_alloc_check(a));
}

static void test_alloc_random(size_t region, size_t misalign, unsigned ops)
{
    char *mem = th_alloc(region + misalign), *base = mem + misalign;
    size_t cap = 4096, n = 0;
    live_blk_t *live = th_alloc(cap * sizeof(*live));
    uint64_t rng = 42 + misalign, fails = 0, allocs = 0;
    rdmx_kv_alloc_t a;
    rdmx_kv_alloc_stats_t st;
    double t0 = th_now_ms();

    CHECK_OK(rdmx__kv_alloc_init(&a, base, region));
    for (unsigned op = 0; op < ops; op++) {
        int do_alloc = n == 0 || rng_below(&rng, 100) < 55;
        if (do_alloc) {
            /* log-uniform 1 B .. 1 MiB */
            size_t sz = (size_t)1 << rng_below(&rng, 21);
            sz = 1 + rng_below(&rng, sz);
            uint64_t off = rdmx__kv_alloc(&a, sz);
            if (off == RDMX_KV_ALLOC_NONE) {
                fails++;
                continue;
            }
            allocs++;
            CHECK((uintptr_t)(base + off) % 16 == 8);
            CHECK(off + sz <= region);
            CHECK(rdmx__kv_alloc_usable_size(&a, off) >= sz);
            if (n == cap) {
                cap *= 2;
                live = realloc(live, cap * sizeof(*live));
                CHECK(live != NULL);
            }
            live[n].off = off;
            live[n].size = sz;
            live[n].seed = th_seed(op, sz, 7);
            blk_fill(base + off, sz, live[n].seed);
            n++;
        } else {
            size_t i = rng_below(&rng, n);
            blk_verify(base + live[i].off, live[i].size, live[i].seed);
            CHECK(rdmx__kv_free(&a, live[i].off) != RDMX_KV_ALLOC_NONE);
            live[i] = live[--n];
        }
        if (op % 2000 == 0)
            verify_live(&a, base, live, n);
    }
    verify_live(&a, base, live, n);
    rdmx__kv_alloc_stats(&a, &st);
    th_log("alloc random (base+%zu): %u ops, %llu allocs, %llu failed, "
           "%zu live, %llu free blocks, largest free %llu KiB, %.0f ms",
           misalign, ops, (unsigned long long)allocs, (unsigned long long)fails,
           n, (unsigned long long)st.free_blocks,
           (unsigned long long)st.largest_free / 1024, th_now_ms() - t0);
    CHECK(fails > 0); /* it did run full */
    while (n > 0) {
        size_t i = rng_below(&rng, n);
        blk_verify(base + live[i].off, live[i].size, live[i].seed);
        CHECK(rdmx__kv_free(&a, live[i].off) != RDMX_KV_ALLOC_NONE);
        live[i] = live[--n];
    }
    rdmx__kv_alloc_stats(&a, &st);
    CHECK(st.free_blocks == 1 && st.used_blocks == 0 && st.used_bytes == 0);
    CHECK_EQ_U64(st.largest_free, st.capacity - RDMX_KV_ALLOC_HDR);
    CHECK(st.capacity >= region - 40);
    CHECK(rdmx__kv_alloc(&a, st.largest_free) != RDMX_KV_ALLOC_NONE);
    CHECK_OK(rdmx__kv_alloc_check(&a));
    free(live);
    free(mem);
}

/* ------------------------------------------------------------------------ */
/* Store basics                                                             */
/* ------------------------------------------------------------------------ */

/* A range past 64 GiB gets 32-byte granules (block starts stay 32-bit in
 * granules), and a store over it works. The range is reserved, not touched
 * but for a few pages; skipped when the mapping is refused. */
static void test_alloc_large(void)
{
    size_t size = ((size_t)64 << 30) + TH_MIB;
    char *mem = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    rdmx_kv_alloc_t a;
    rdmx_kv_store_t *s;
    char key[32];
    uint64_t o;

    if (mem == MAP_FAILED) {
        th_log("alloc large: no 64 GiB mapping here, skipped");
        return;
    }
    CHECK_OK(rdmx__kv_alloc_init(&a, mem, size));
    CHECK_EQ_U64(a.shift, RDMX_KV_ALLOC_MIN_SHIFT + 1);
    o = rdmx__kv_alloc(&a, 100);
    CHECK(o != RDMX_KV_ALLOC_NONE && (uintptr_t)(mem + o) % 32 == 8);
    CHECK_EQ_U64(rdmx__kv_alloc_usable_size(&a, o), 120);
    CHECK_OK(rdmx__kv_alloc_check(&a));
    s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    for (unsigned i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "large-%u", i);
        put_pattern(s, key, 100 + i, th_seed(i, 5, 0), 1);
    }
    for (unsigned i = 0; i < 100; i += 7) {
        snprintf(key, sizeof(key), "large-%u", i);
        expect_pattern(s, key, 100 + i, th_seed(i, 5, 0), 1);
        CHECK_OK(rdmx__kv_store_delete(s, key, strlen(key), 0, 1));
    }
    store_ok(s);
    rdmx__kv_store_destroy(s);
    munmap(mem, size);
    th_log("alloc large: 32-byte granules past 64 GiB, store ok");
}

static void test_round_trips(void)
{
    size_t size = 4 * TH_MIB;
    char *mem = th_alloc(size);
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    unsigned char key[RDMX_KV_STORE_MAX_KEY_LIMIT + 1];
    unsigned char val[300];
    rdmx_kv_item_t *it;
    uint64_t cas1, cas2, now = 1000;
    size_t klen;
    const void *k;

    for (size_t i = 0; i < sizeof(key); i++)
        key[i] = (unsigned char)(i * 7);
    key[0] = 0;
    key[1] = 0; /* binary: NULs */
    for (size_t i = 0; i < sizeof(val); i++)
        val[i] = (unsigned char)(255 - i);

    /* 0-byte value under a 1-byte NUL key */
    CHECK_OK(rdmx__kv_store_set(s, key, 1, NULL, 0, RDMX_KV_STORE_SET, 0, 7, 0,
                                now, &cas1));
    CHECK_OK(rdmx__kv_store_get(s, key, 1, now, &it));
    CHECK_EQ_U64(rdmx__kv_item_length(it), 0);
    CHECK_EQ_U64(rdmx__kv_item_flags(it), 7);
    CHECK_EQ_U64(rdmx__kv_item_cas(it), cas1);
    CHECK_EQ_U64(rdmx__kv_item_expiry(it), 0);
    /* the value sits in the range, right after the item's key */
    CHECK((char *)rdmx__kv_item_value(s, it) > mem &&
          (char *)rdmx__kv_item_value(s, it) < mem + size);
    CHECK((char *)rdmx__kv_item_value(s, it) ==
          mem + rdmx__kv_item_offset(s, it));
    CHECK((const char *)rdmx__kv_item_key(it, &klen) + klen ==
          (char *)rdmx__kv_item_value(s, it));
    k = rdmx__kv_item_key(it, &klen);
    CHECK(klen == 1 && memcmp(k, key, 1) == 0);
    rdmx__kv_store_release(s, it);
    /* a 2-byte key sharing the prefix is another key */
    CHECK_ST(rdmx__kv_store_get(s, key, 2, now, &it), RDMX_ERR_NOT_FOUND);

    /* max-size key (250), binary value; then overwrite: new version */
    CHECK_OK(rdmx__kv_store_set(s, key, 250, val, sizeof(val),
                                RDMX_KV_STORE_SET, 0, 0xffffffffu, 0, now,
                                &cas2));
    CHECK(cas2 > cas1);
    CHECK_OK(rdmx__kv_store_get(s, key, 250, now, &it));
    CHECK(rdmx__kv_item_length(it) == sizeof(val));
    CHECK(memcmp(rdmx__kv_item_value(s, it), val, sizeof(val)) == 0);
    CHECK_EQ_U64(rdmx__kv_item_flags(it), 0xffffffffu);
    k = rdmx__kv_item_key(it, &klen);
    CHECK(klen == 250 && memcmp(k, key, 250) == 0);
    rdmx__kv_store_release(s, it);
    CHECK_OK(rdmx__kv_store_set(s, key, 250, val, 10, RDMX_KV_STORE_SET, 0, 1,
                                0, now, &cas1));
    CHECK(cas1 > cas2);
    CHECK_OK(rdmx__kv_store_get(s, key, 250, now, &it));
    CHECK(rdmx__kv_item_length(it) == 10 && rdmx__kv_item_cas(it) == cas1);
    rdmx__kv_store_release(s, it);

    /* limits */
    CHECK_ST(rdmx__kv_store_set(s, key, 251, val, 1, RDMX_KV_STORE_SET, 0, 0, 0,
                                now, NULL),
             RDMX_ERR_TOO_BIG);
    CHECK_ST(rdmx__kv_store_get(s, key, 251, now, &it), RDMX_ERR_TOO_BIG);
    CHECK_ST(rdmx__kv_store_get(s, key, 0, now, &it), RDMX_ERR_INVALID);
    CHECK_ST(rdmx__kv_store_get(s, NULL, 5, now, &it), RDMX_ERR_INVALID);
    CHECK_ST(rdmx__kv_store_set(s, key, 5, NULL, 5, RDMX_KV_STORE_SET, 0, 0, 0,
                                now, NULL),
             RDMX_ERR_INVALID);
    CHECK_ST(rdmx__kv_store_reserve(
                 s, key, 5, RDMX_KV_STORE_DEFAULT_MAX_VALUE + 1, now, &it),
             RDMX_ERR_TOO_BIG);
    CHECK(strlen(rdmx_error_detail()) > 0);
    CHECK_OK(rdmx__kv_store_reserve(s, key, 5, RDMX_KV_STORE_DEFAULT_MAX_VALUE,
                                    now, &it));
    rdmx__kv_store_abort(s, it);
    store_ok(s);
    rdmx__kv_store_destroy(s);

    /* max_key 65535: the largest key there is; a bad max_key is refused */
    {
        rdmx_kv_store_params_t p = {.field_mask = RDMX_KV_STORE_FIELD_MAX_KEY,
                                    .max_key = 65536};
        CHECK_ST(rdmx__kv_store_create(mem, size, &p, &s), RDMX_ERR_INVALID);
        p.max_key = 0;
        CHECK_ST(rdmx__kv_store_create(mem, size, &p, &s), RDMX_ERR_INVALID);
        CHECK_ST(rdmx__kv_store_create(mem, 64, NULL, &s), RDMX_ERR_INVALID);
    }
    s = store_new(mem, size, RDMX_KV_STORE_MAX_KEY_LIMIT, RDMX_KV_EVICT_LRU);
    CHECK_OK(rdmx__kv_store_set(s, key, 65535, val, 100, RDMX_KV_STORE_SET, 0,
                                0, 0, now, NULL));
    key[65534] ^= 1; /* differs in the last byte only */
    CHECK_ST(rdmx__kv_store_exists(s, key, 65535, now), RDMX_ERR_NOT_FOUND);
    key[65534] ^= 1;
    CHECK_OK(rdmx__kv_store_get(s, key, 65535, now, &it));
    CHECK(memcmp(rdmx__kv_item_value(s, it), val, 100) == 0);
    rdmx__kv_store_release(s, it);
    CHECK_ST(rdmx__kv_store_exists(s, key, 65536, now), RDMX_ERR_TOO_BIG);
    store_ok(s);
    rdmx__kv_store_destroy(s);
    free(mem);
    th_log("round trips: ok");
}

static void test_modes(void)
{
    size_t size = TH_MIB;
    char *mem = th_alloc(size);
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    rdmx_kv_store_stats_t st;
    rdmx_kv_item_t *it, *r;
    uint64_t cas, cas2, now = 5;

    /* ADD: absent -> stored; present -> EXISTS, value unchanged */
    CHECK_OK(rdmx__kv_store_set(s, "a", 1, "1", 1, RDMX_KV_STORE_ADD, 0, 0, 0,
                                now, &cas));
    CHECK_ST(rdmx__kv_store_set(s, "a", 1, "2", 1, RDMX_KV_STORE_ADD, 0, 0, 0,
                                now, NULL),
             RDMX_ERR_EXISTS);
    CHECK_OK(rdmx__kv_store_get(s, "a", 1, now, &it));
    CHECK(rdmx__kv_item_cas(it) == cas &&
          memcmp(rdmx__kv_item_value(s, it), "1", 1) == 0);
    rdmx__kv_store_release(s, it);
    /* REPLACE: absent -> NOT_FOUND; present -> stored */
    CHECK_ST(rdmx__kv_store_set(s, "b", 1, "x", 1, RDMX_KV_STORE_REPLACE, 0, 0,
                                0, now, NULL),
             RDMX_ERR_NOT_FOUND);
    CHECK_ST(rdmx__kv_store_exists(s, "b", 1, now), RDMX_ERR_NOT_FOUND);
    CHECK_OK(rdmx__kv_store_set(s, "a", 1, "3", 1, RDMX_KV_STORE_REPLACE, 0, 0,
                                0, now, &cas2));
    CHECK(cas2 > cas);
    /* CAS: absent -> NOT_FOUND; wrong version -> EXISTS; right -> stored */
    CHECK_ST(rdmx__kv_store_set(s, "b", 1, "x", 1, RDMX_KV_STORE_CAS, 1, 0, 0,
                                now, NULL),
             RDMX_ERR_NOT_FOUND);
    CHECK_ST(rdmx__kv_store_set(s, "a", 1, "4", 1, RDMX_KV_STORE_CAS, cas, 0, 0,
                                now, NULL),
             RDMX_ERR_EXISTS);
    CHECK_OK(rdmx__kv_store_set(s, "a", 1, "5", 1, RDMX_KV_STORE_CAS, cas2, 0,
                                0, now, &cas));
    CHECK_OK(rdmx__kv_store_get(s, "a", 1, now, &it));
    CHECK(rdmx__kv_item_cas(it) == cas &&
          memcmp(rdmx__kv_item_value(s, it), "5", 1) == 0);
    rdmx__kv_store_release(s, it);
    /* an unknown mode is refused and its reservation freed */
    CHECK_ST(rdmx__kv_store_set(s, "a", 1, "6", 1, (rdmx_kv_store_mode_t)9, 0,
                                0, 0, now, NULL),
             RDMX_ERR_INVALID);
    /* DELETE with a version */
    CHECK_ST(rdmx__kv_store_delete(s, "a", 1, cas + 100, now), RDMX_ERR_EXISTS);
    CHECK_OK(rdmx__kv_store_delete(s, "a", 1, cas, now));
    CHECK_ST(rdmx__kv_store_delete(s, "a", 1, 0, now), RDMX_ERR_NOT_FOUND);
    stats(s, &st);
    CHECK_EQ_U64(st.cas_misses, 1);
    CHECK_EQ_U64(st.cas_badval, 1);
    CHECK_EQ_U64(st.cas_hits, 1);
    CHECK_EQ_U64(st.delete_hits, 1);
    CHECK_EQ_U64(st.delete_misses, 1);
    CHECK_EQ_U64(st.curr_items, 0);
    CHECK_EQ_U64(st.alloc_blocks, 0); /* failed commits freed everything */
    CHECK_EQ_U64(st.reserved_items, 0);

    /* a reserved item is invisible until commit; the commit replaces
     * atomically; a reader holding the old one keeps it */
    CHECK_OK(rdmx__kv_store_set(s, "k", 1, "old", 3, RDMX_KV_STORE_SET, 0, 0, 0,
                                now, NULL));
    CHECK_OK(rdmx__kv_store_reserve(s, "k", 1, 3, now, &it));
    CHECK_EQ_U64(rdmx__kv_item_cas(it), 0);
    memcpy(rdmx__kv_item_value(s, it), "new", 3);
    CHECK_OK(rdmx__kv_store_get(s, "k", 1, now, &r));
    CHECK(memcmp(rdmx__kv_item_value(s, r), "old", 3) == 0);
    CHECK_OK(
        rdmx__kv_store_commit(s, it, RDMX_KV_STORE_SET, 0, 0, 0, now, NULL));
    CHECK(memcmp(rdmx__kv_item_value(s, r), "old", 3) == 0);
    rdmx__kv_store_release(s, r);
    CHECK_OK(rdmx__kv_store_get(s, "k", 1, now, &r));
    CHECK(memcmp(rdmx__kv_item_value(s, r), "new", 3) == 0);
    rdmx__kv_store_release(s, r);
    /* abort: nothing linked, memory back */
    CHECK_OK(rdmx__kv_store_reserve(s, "z", 1, 1000, now, &it));
    stats(s, &st);
    CHECK_EQ_U64(st.reserved_items, 1);
    rdmx__kv_store_abort(s, it);
    CHECK_ST(rdmx__kv_store_exists(s, "z", 1, now), RDMX_ERR_NOT_FOUND);
    /* ADD racing with a SET: the later commit decides */
    CHECK_OK(rdmx__kv_store_reserve(s, "r", 1, 1, now, &it));
    CHECK_OK(rdmx__kv_store_set(s, "r", 1, "s", 1, RDMX_KV_STORE_SET, 0, 0, 0,
                                now, NULL));
    memcpy(rdmx__kv_item_value(s, it), "a", 1);
    CHECK_ST(
        rdmx__kv_store_commit(s, it, RDMX_KV_STORE_ADD, 0, 0, 0, now, NULL),
        RDMX_ERR_EXISTS);
    stats(s, &st);
    CHECK_EQ_U64(st.reserved_items, 0);
    CHECK_EQ_U64(st.alloc_blocks, st.curr_items);
    store_ok(s);
    rdmx__kv_store_destroy(s);
    free(mem);
    th_log("add/replace/cas/delete/reserve/abort: ok");
}

/* ------------------------------------------------------------------------ */
/* Randomized run against a model                                           */
/* ------------------------------------------------------------------------ */

#define MODEL_KEYS 100

typedef struct {
    int present;
    size_t vlen;
    uint64_t seed; /* 0: the value is the decimal number `num` */
    uint64_t num;
    uint32_t flags;
    uint64_t cas;
    uint64_t exp; /* 0 never */
    unsigned char key[48];
    size_t klen;
} model_t;

static int model_live(const model_t *m, uint64_t now)
{
    return m->present && (m->exp == 0 || now < m->exp);
}

static size_t fmt_u64(uint64_t v, char *buf)
{
    return (size_t)sprintf(buf, "%llu", (unsigned long long)v);
}

/* The number the value of @m holds, if it is one by memcached's rule (a
 * random pattern of up to 20 bytes can be all digits by accident). */
static int model_number(const model_t *m, uint64_t *v_p)
{
    unsigned char buf[20];
    uint64_t v = 0;

    if (m->seed == 0) {
        *v_p = m->num;
        return 1;
    }
    if (m->vlen == 0 || m->vlen > 20)
        return 0;
    th_fill(buf, m->vlen, m->seed);
    for (size_t i = 0; i < m->vlen; i++) {
        unsigned d = (unsigned)buf[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *v_p = v;
    return 1;
}

static void model_check_value(rdmx_kv_store_t *s, const model_t *m,
                              rdmx_kv_item_t *it)
{
    const char *v = rdmx__kv_item_value(s, it);
    CHECK_EQ_U64(rdmx__kv_item_length(it), m->vlen);
    CHECK_EQ_U64(rdmx__kv_item_flags(it), m->flags);
    CHECK_EQ_U64(rdmx__kv_item_cas(it), m->cas);
    CHECK_EQ_U64(rdmx__kv_item_expiry(it), m->exp);
    if (m->seed != 0) {
        CHECK_PATTERN(v, m->vlen, m->seed, 0);
    } else {
        char buf[24];
        size_t n = fmt_u64(m->num, buf);
        CHECK(n == m->vlen && memcmp(v, buf, n) == 0);
    }
}

static void test_model(void)
{
    size_t size = 8 * TH_MIB;
    char *mem = th_alloc(size);
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    static model_t m[MODEL_KEYS];
    rdmx_kv_store_stats_t st, want;
    uint64_t rng = 7, now = 100000;
    unsigned ops = 60000;

    memset(&want, 0, sizeof(want));
    for (unsigned i = 0; i < MODEL_KEYS; i++) {
        memset(&m[i], 0, sizeof(m[i]));
        m[i].klen = 3 + i % 40;
        for (size_t j = 0; j < m[i].klen; j++)
            m[i].key[j] = (unsigned char)(j == 1 ? 0 : i * 31 + j);
        m[i].key[0] = (unsigned char)i;
    }
    for (unsigned op = 0; op < ops; op++) {
        model_t *k = &m[rng_below(&rng, MODEL_KEYS)];
        int live = model_live(k, now), r = (int)rng_below(&rng, 100);
        rdmx_kv_item_t *it;
        rdmx_status_t st_got;

        if (k->present && !live) { /* the store drops it on access */
            k->present = 0;
        }
        if (r < 35) { /* a write */
            rdmx_kv_store_mode_t mode =
                (rdmx_kv_store_mode_t)rng_below(&rng, 4);
            int numeric = rng_below(&rng, 4) == 0;
            uint64_t num = rng_below(&rng, 3) == 0
                               ? UINT64_MAX - rng_below(&rng, 3)
                               : rng_below(&rng, 1000);
            size_t vlen = rng_below(&rng, 8) == 0 ? 0 : rng_below(&rng, 3000);
            uint64_t seed = th_seed(op, 1, 2), cas_exp = 0, cas_out = 0;
            uint32_t flags = (uint32_t)rng_next(&rng);
            uint64_t ttl =
                rng_below(&rng, 3) == 0 ? 1 + rng_below(&rng, 400) : 0;
            rdmx_status_t want_st = RDMX_OK;
            char buf[24];

            if (mode == RDMX_KV_STORE_CAS) {
                int c = (int)rng_below(&rng, 3);
                cas_exp = c == 0 ? k->cas : c == 1 ? k->cas + 1 : 0;
            }
            if (numeric)
                vlen = fmt_u64(num, buf);
            CHECK_OK(
                rdmx__kv_store_reserve(s, k->key, k->klen, vlen, now, &it));
            want.cmd_set++;
            if (numeric)
                memcpy(rdmx__kv_item_value(s, it), buf, vlen);
            else
                th_fill(rdmx__kv_item_value(s, it), vlen, seed);
            switch (mode) {
            case RDMX_KV_STORE_ADD:
                want_st = live ? RDMX_ERR_EXISTS : RDMX_OK;
                break;
            case RDMX_KV_STORE_REPLACE:
                want_st = live ? RDMX_OK : RDMX_ERR_NOT_FOUND;
                break;
            case RDMX_KV_STORE_CAS:
                if (!live) {
                    want_st = RDMX_ERR_NOT_FOUND;
                    want.cas_misses++;
                } else if (cas_exp != k->cas) {
                    want_st = RDMX_ERR_EXISTS;
                    want.cas_badval++;
                } else {
                    want.cas_hits++;
                }
                break;
            default:
                break;
            }
            CHECK_ST(rdmx__kv_store_commit(s, it, mode, cas_exp, flags, ttl,
                                           now, &cas_out),
                     want_st);
            if (want_st == RDMX_OK) {
                CHECK(cas_out > k->cas);
                k->present = 1;
                k->vlen = vlen;
                k->seed = numeric ? 0 : seed;
                k->num = num;
                k->flags = flags;
                k->cas = cas_out;
                k->exp = ttl ? now + ttl : 0;
                want.total_items++;
            }
        } else if (r < 60) { /* get */
            want.cmd_get++;
            st_got = rdmx__kv_store_get(s, k->key, k->klen, now, &it);
            if (live) {
                CHECK_OK(st_got);
                want.get_hits++;
                model_check_value(s, k, it);
                rdmx__kv_store_release(s, it);
            } else {
                CHECK_ST(st_got, RDMX_ERR_NOT_FOUND);
                want.get_misses++;
            }
        } else if (r < 68) { /* delete, maybe with a version */
            int c = (int)rng_below(&rng, 3);
            uint64_t cas = c == 0 ? 0 : c == 1 ? k->cas : k->cas + 7;
            st_got = rdmx__kv_store_delete(s, k->key, k->klen, cas, now);
            if (!live) {
                CHECK_ST(st_got, RDMX_ERR_NOT_FOUND);
                want.delete_misses++;
            } else if (cas != 0 && cas != k->cas) {
                CHECK_ST(st_got, RDMX_ERR_EXISTS);
            } else {
                CHECK_OK(st_got);
                want.delete_hits++;
                k->present = 0;
            }
        } else if (r < 74) { /* touch */
            uint64_t ttl = rng_below(&rng, 2) ? 1 + rng_below(&rng, 400) : 0;
            want.cmd_touch++;
            st_got = rdmx__kv_store_touch(s, k->key, k->klen, ttl, now);
            if (live) {
                CHECK_OK(st_got);
                want.touch_hits++;
                k->exp = ttl ? now + ttl : 0;
            } else {
                CHECK_ST(st_got, RDMX_ERR_NOT_FOUND);
                want.touch_misses++;
            }
        } else if (r < 80) { /* exists */
            CHECK_ST(rdmx__kv_store_exists(s, k->key, k->klen, now),
                     live ? RDMX_OK : RDMX_ERR_NOT_FOUND);
        } else if (r < 90) { /* incr / decr */
            int decr = (int)rng_below(&rng, 2);
            uint64_t delta =
                rng_below(&rng, 4) == 0 ? UINT64_MAX - 5 : rng_below(&rng, 50);
            uint64_t v = 0, cur;
            st_got =
                rdmx__kv_store_incr(s, k->key, k->klen, delta, decr, now, &v);
            if (!live) {
                CHECK_ST(st_got, RDMX_ERR_NOT_FOUND);
                if (decr)
                    want.decr_misses++;
                else
                    want.incr_misses++;
            } else if (!model_number(k, &cur)) {
                CHECK_ST(st_got, RDMX_ERR_INVALID);
            } else {
                CHECK_OK(st_got);
                k->seed = 0;
                k->num = cur;
                if (decr) {
                    k->num = k->num < delta ? 0 : k->num - delta;
                    want.decr_hits++;
                } else {
                    k->num += delta;
                    want.incr_hits++;
                }
                CHECK_EQ_U64(v, k->num);
                {
                    char buf[24];
                    k->vlen = fmt_u64(k->num, buf);
                }
                /* learn the new version */
                want.cmd_get++;
                want.get_hits++;
                CHECK_OK(rdmx__kv_store_get(s, k->key, k->klen, now, &it));
                CHECK(rdmx__kv_item_cas(it) > k->cas);
                k->cas = rdmx__kv_item_cas(it);
                model_check_value(s, k, it);
                rdmx__kv_store_release(s, it);
            }
        } else if (r < 97) {
            now += rng_below(&rng, 20);
        } else {
            rdmx__kv_store_reclaim(s, now, rng_below(&rng, 10));
        }
        if (op % 5000 == 0)
            store_ok(s);
    }
    /* drop whatever expired, then every counter must match */
    rdmx__kv_store_reclaim(s, now, SIZE_MAX);
    for (unsigned i = 0; i < MODEL_KEYS; i++) {
        if (model_live(&m[i], now)) {
            want.curr_items++;
            want.bytes += m[i].vlen;
        }
    }
    stats(s, &st);
    store_ok(s);
#define SAME(f) CHECK_EQ_U64(st.f, want.f)
    SAME(curr_items);
    SAME(bytes);
    SAME(cmd_get);
    SAME(get_hits);
    SAME(get_misses);
    SAME(cmd_set);
    SAME(cmd_touch);
    SAME(touch_hits);
    SAME(touch_misses);
    SAME(delete_hits);
    SAME(delete_misses);
    SAME(incr_hits);
    SAME(incr_misses);
    SAME(decr_hits);
    SAME(decr_misses);
    SAME(cas_hits);
    SAME(cas_misses);
    SAME(cas_badval);
#undef SAME
    CHECK_EQ_U64(st.get_hits + st.get_misses, st.cmd_get);
    CHECK_EQ_U64(st.evictions, 0);
    CHECK_EQ_U64(st.alloc_blocks, st.curr_items);
    /* items linked = commits + incr copies */
    CHECK(st.total_items >= want.total_items);
    th_log("model: %u ops, %llu items live, %llu gets (%llu hits), %llu "
           "expired on get, %llu reclaimed, %llu expired unfetched",
           ops, (unsigned long long)st.curr_items,
           (unsigned long long)st.cmd_get, (unsigned long long)st.get_hits,
           (unsigned long long)st.get_expired, (unsigned long long)st.reclaimed,
           (unsigned long long)st.expired_unfetched);
    CHECK(st.get_expired > 0 && st.reclaimed > 0);
    rdmx__kv_store_destroy(s);
    free(mem);
}

/* ------------------------------------------------------------------------ */
/* TTL                                                                      */
/* ------------------------------------------------------------------------ */

static void test_ttl(void)
{
    size_t size = TH_MIB;
    char *mem = th_alloc(size);
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    rdmx_kv_store_stats_t st;
    rdmx_kv_item_t *it;
    char key[32];
    uint64_t now = 1000;

    /* lazy expiry on get: present until the instant, gone at it */
    CHECK_OK(rdmx__kv_store_set(s, "t", 1, "v", 1, RDMX_KV_STORE_SET, 0, 0, 100,
                                now, NULL));
    CHECK_OK(rdmx__kv_store_get(s, "t", 1, 1099, &it));
    CHECK_EQ_U64(rdmx__kv_item_expiry(it), 1100);
    rdmx__kv_store_release(s, it);
    CHECK_ST(rdmx__kv_store_get(s, "t", 1, 1100, &it), RDMX_ERR_NOT_FOUND);
    stats(s, &st);
    CHECK_EQ_U64(st.get_expired, 1);
    CHECK_EQ_U64(st.get_misses, 1);
    CHECK_EQ_U64(st.expired_unfetched, 0); /* it had been read */
    CHECK_EQ_U64(st.curr_items, 0);
    CHECK_EQ_U64(st.alloc_blocks, 0);
    /* never read, expired on get: expired_unfetched */
    CHECK_OK(rdmx__kv_store_set(s, "u", 1, "v", 1, RDMX_KV_STORE_SET, 0, 0, 5,
                                now, NULL));
    CHECK_ST(rdmx__kv_store_get(s, "u", 1, now + 5, &it), RDMX_ERR_NOT_FOUND);
    stats(s, &st);
    CHECK_EQ_U64(st.expired_unfetched, 1);

    /* touch: extend, then clear */
    CHECK_OK(rdmx__kv_store_set(s, "w", 1, "v", 1, RDMX_KV_STORE_SET, 0, 0, 10,
                                now, NULL));
    CHECK_OK(rdmx__kv_store_touch(s, "w", 1, 1000, now + 5));
    CHECK_OK(rdmx__kv_store_exists(s, "w", 1, now + 500));
    CHECK_OK(rdmx__kv_store_touch(s, "w", 1, 0, now + 500));
    CHECK_OK(rdmx__kv_store_exists(s, "w", 1, UINT64_MAX));
    CHECK_ST(rdmx__kv_store_touch(s, "nope", 4, 0, now), RDMX_ERR_NOT_FOUND);

    /* reclaim: 100 items expiring at now+1..now+100, 50 without TTL */
    for (int i = 0; i < 150; i++) {
        snprintf(key, sizeof(key), "r%d", i);
        CHECK_OK(rdmx__kv_store_set(
            s, key, strlen(key), "x", 1, RDMX_KV_STORE_SET, 0, 0,
            i < 100 ? (uint64_t)(i + 1) : 0, now, NULL));
    }
    CHECK_EQ_U64(rdmx__kv_store_reclaim(s, now, 1000), 0);
    CHECK_EQ_U64(rdmx__kv_store_reclaim(s, now + 30, 1000), 30);
    CHECK_EQ_U64(rdmx__kv_store_reclaim(s, now + 100, 20), 20); /* bounded */
    CHECK_EQ_U64(rdmx__kv_store_reclaim(s, now + 100, 1000), 50);
    CHECK_EQ_U64(rdmx__kv_store_reclaim(s, UINT64_MAX, 1000), 0);
    stats(s, &st);
    CHECK_EQ_U64(st.curr_items, 51); /* 50 + "w" */
    CHECK_EQ_U64(st.reclaimed, 100);
    CHECK_EQ_U64(st.expired_unfetched, 101);
    for (int i = 0; i < 150; i++) {
        snprintf(key, sizeof(key), "r%d", i);
        CHECK(present(s, key, now + 1000) == (i >= 100));
    }
    /* a TTL so large it would overflow the clock: never expires early */
    CHECK_OK(rdmx__kv_store_set(s, "big", 3, "v", 1, RDMX_KV_STORE_SET, 0, 0,
                                UINT64_MAX, now, NULL));
    CHECK_OK(rdmx__kv_store_exists(s, "big", 3, UINT64_MAX - 1));
    store_ok(s);
    rdmx__kv_store_destroy(s);
    free(mem);
    th_log("ttl: lazy expiry, touch, bounded reclaim: ok");
}

/* ------------------------------------------------------------------------ */
/* LRU, eviction off, references                                            */
/* ------------------------------------------------------------------------ */

/* Put k0000, k0001, ... (values of @vlen bytes, th_seed(i, 0, 0)) until
 * the first eviction; returns how many were put. */
static unsigned fill_until_eviction(rdmx_kv_store_t *s, size_t vlen,
                                    uint64_t now)
{
    rdmx_kv_store_stats_t st;
    char key[32];
    unsigned n = 0;

    do {
        snprintf(key, sizeof(key), "k%04u", n);
        put_pattern(s, key, vlen, th_seed(n, 0, 0), now);
        n++;
        stats(s, &st);
    } while (st.evictions == 0);
    return n;
}

static void test_lru(void)
{
    size_t size = TH_MIB, vlen = 1000;
    char *mem = th_alloc(size), key[32], big[1000];
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    rdmx_kv_store_stats_t st;
    rdmx_kv_item_t *it;
    unsigned n, i;
    uint64_t now = 1;

    /* keys of one length: every item spans the same block, so each
     * victim's hole fits the next item exactly (pure LRU order).
     * Fill until the first eviction: the first key goes */
    n = fill_until_eviction(s, vlen, now);
    stats(s, &st);
    CHECK_EQ_U64(st.evictions, 1);
    CHECK(!present(s, "k0000", now));
    CHECK(n > 900);
    /* read k1..k10 a second later (an item moves at most once a second):
     * they become the most recent */
    now += 2000;
    for (i = 1; i <= 10; i++) {
        snprintf(key, sizeof(key), "k%04u", i);
        expect_pattern(s, key, vlen, th_seed(i, 0, 0), now);
    }
    /* 20 more: k11..k30 are evicted, in that order; k1..k10 stay */
    for (i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "n%04u", i);
        put_pattern(s, key, vlen, th_seed(i, 1, 0), now);
    }
    for (i = 1; i < n; i++) {
        snprintf(key, sizeof(key), "k%04u", i);
        CHECKF(present(s, key, now) == (i <= 10 || i > 30), "%s present %d",
               key, present(s, key, now));
    }
    stats(s, &st);
    CHECK_EQ_U64(st.evictions, 21);
    CHECK_EQ_U64(st.evicted_unfetched, 21);
    /* a referenced item at the LRU end is not evicted */
    CHECK_OK(rdmx__kv_store_get(s, "k0031", 5, now, &it));
    for (i = 0; i < 2 * n; i++) {
        snprintf(key, sizeof(key), "m%04u", i);
        put_pattern(s, key, vlen, th_seed(i, 2, 0), now);
    }
    CHECK(present(s, "k0031", now));
    CHECK_PATTERN(rdmx__kv_item_value(s, it), vlen, th_seed(31, 0, 0), 0);
    rdmx__kv_store_release(s, it);
    CHECK(!present(s, "k0032", now));
    store_ok(s);
    rdmx__kv_store_destroy(s);

    /* eviction off: NO_MEMORY once full, nothing lost */
    memset(big, 'b', sizeof(big));
    s = store_new(mem, size, 0, RDMX_KV_EVICT_NONE);
    for (i = 0;; i++) {
        rdmx_status_t r;
        snprintf(key, sizeof(key), "e%04u", i);
        r = rdmx__kv_store_reserve(s, key, strlen(key), vlen, now, &it);
        if (r == RDMX_ERR_NO_MEMORY)
            break;
        CHECK_OK(r);
        th_fill(rdmx__kv_item_value(s, it), vlen, th_seed(i, 3, 0));
        CHECK_OK(rdmx__kv_store_commit(s, it, RDMX_KV_STORE_SET, 0, 0, 0, now,
                                       NULL));
    }
    CHECK(i > 900);
    stats(s, &st);
    CHECK_EQ_U64(st.evictions, 0);
    CHECK_EQ_U64(st.curr_items, i);
    for (unsigned j = 0; j < i; j++) {
        snprintf(key, sizeof(key), "e%04u", j);
        expect_pattern(s, key, vlen, th_seed(j, 3, 0), now);
    }
    CHECK_ST(put(s, "o0001", big, vlen, now), RDMX_ERR_NO_MEMORY);
    CHECK_OK(rdmx__kv_store_delete(s, "e0005", 5, 0, now));
    put_pattern(s, "o0001", vlen, 99, now);
    /* expired items make room even with eviction off (not an eviction) */
    CHECK_OK(rdmx__kv_store_touch(s, "e0006", 5, 10, now));
    CHECK_ST(put(s, "t0001", big, vlen, now + 9), RDMX_ERR_NO_MEMORY);
    CHECK_OK(put(s, "t0001", big, vlen, now + 10));
    CHECK_ST(put(s, "h0001", big, vlen, now + 10), RDMX_ERR_NO_MEMORY);
    stats(s, &st);
    CHECK_EQ_U64(st.evictions, 0);
    CHECK_EQ_U64(st.reclaimed, 1);
    store_ok(s);
    rdmx__kv_store_destroy(s);
    free(mem);
    th_log("lru: least recently used evicted, read ones kept, referenced "
           "kept; eviction off: NO_MEMORY: ok");
}

/*
 * An item moves to the LRU's recent end at most once per epoch of 1,024 ms
 * (its header keeps the epoch's low 8 bits): reads in the epoch it was
 * written or last moved leave it where it is.
 */
static void test_lru_epochs(void)
{
    size_t size = TH_MIB, vlen = 1000;
    char *mem = th_alloc(size), key[32];
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    rdmx_kv_store_stats_t st;
    unsigned n, i;
    uint64_t now = 4096; /* epoch 4: 4096-5119 ms */

    n = fill_until_eviction(s, vlen, now);
    CHECK(n > 900);
    /* the same epoch: reading k1..k5 does not move them */
    for (i = 1; i <= 5; i++) {
        snprintf(key, sizeof(key), "k%04u", i);
        expect_pattern(s, key, vlen, th_seed(i, 0, 0), 5119);
    }
    /* a later epoch (6): k6..k10 move, and so do k11 (touch) and k12 (a
     * failed ADD) */
    now = 6144;
    for (i = 6; i <= 10; i++) {
        snprintf(key, sizeof(key), "k%04u", i);
        expect_pattern(s, key, vlen, th_seed(i, 0, 0), now);
    }
    CHECK_OK(rdmx__kv_store_touch(s, "k0011", 5, 0, now));
    {
        rdmx_kv_item_t *it;
        CHECK_OK(rdmx__kv_store_reserve(s, "k0012", 5, vlen, now, &it));
        CHECK_ST(
            rdmx__kv_store_commit(s, it, RDMX_KV_STORE_ADD, 0, 0, 0, now, NULL),
            RDMX_ERR_EXISTS);
    }
    /* that reserve evicted k0001 to make room, and its block is free
     * again; twenty more: the first takes that block, the others evict
     * k0002..k0005 and k0013..k0027; the moved k0006..k0012 stay */
    for (i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "n%04u", i);
        put_pattern(s, key, vlen, th_seed(i, 1, 0), now);
    }
    stats(s, &st);
    CHECK_EQ_U64(st.evictions, 21);
    for (i = 1; i < n; i++) {
        snprintf(key, sizeof(key), "k%04u", i);
        CHECKF(present(s, key, now) == ((i >= 6 && i <= 12) || i > 27),
               "%s present %d", key, present(s, key, now));
    }
    /* 256 epochs on, the 8 bits wrap: a read of k0028, the LRU end, last
     * moved (written) in epoch 4, does not move it, and it goes next (the
     * documented approximation; moved, k0029 would go) */
    expect_pattern(s, "k0028", vlen, th_seed(28, 0, 0), 4096 + 256 * 1024);
    put_pattern(s, "n0020", vlen, th_seed(20, 1, 0), now);
    CHECK(!present(s, "k0028", now));
    CHECK(present(s, "k0029", now));
    store_ok(s);
    rdmx__kv_store_destroy(s);
    free(mem);
    th_log("lru epochs: reads in an item's epoch leave it, a later epoch's "
           "read, touch or failed ADD moves it: ok");
}

/* Every way an item can leave the index while a reader holds it. */
static void test_references(void)
{
    size_t size = 2 * TH_MIB, vlen = 20000;
    char *mem = th_alloc(size), key[32];
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    rdmx_kv_store_stats_t st;
    rdmx_kv_item_t *held[4];
    uint64_t now = 1, off[4];
    const char *names[4] = {"replaced", "deleted", "flushed", "expired"};

    for (int i = 0; i < 4; i++) {
        put_pattern(s, names[i], vlen, th_seed(i, 9, 9), now);
        CHECK_OK(
            rdmx__kv_store_get(s, names[i], strlen(names[i]), now, &held[i]));
        off[i] = rdmx__kv_item_offset(s, held[i]);
    }
    put_pattern(s, "replaced", vlen, 1, now);
    CHECK_OK(rdmx__kv_store_delete(s, "deleted", 7, 0, now));
    CHECK_OK(rdmx__kv_store_touch(s, "expired", 7, 1, now));
    CHECK_ST(rdmx__kv_store_get(s, "expired", 7, now + 1, &held[3]),
             RDMX_ERR_NOT_FOUND);
    /* (held[3] still holds the item: the failed get did not touch it) */
    {
        rdmx_kv_item_t *again;
        CHECK_OK(rdmx__kv_store_get(s, "flushed", 7, now, &again));
        CHECK(again == held[2]);
        rdmx__kv_store_release(s, again);
    }
    rdmx__kv_store_flush(s);
    stats(s, &st);
    CHECK_EQ_U64(st.curr_items, 0);
    CHECK_EQ_U64(st.pending_items, 4);
    CHECK_EQ_U64(st.pending_bytes, 4 * vlen);
    /* write far more than the memory holds, with sizes that would love to
     * reuse those blocks */
    for (int i = 0; i < 400; i++) {
        snprintf(key, sizeof(key), "fill%d", i);
        put_pattern(s, key, vlen - 64 + (size_t)(i % 128), th_seed(i, 8, 8),
                    now);
    }
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_U64(rdmx__kv_item_offset(s, held[i]), off[i]);
        CHECK_PATTERN(rdmx__kv_item_value(s, held[i]), vlen, th_seed(i, 9, 9),
                      0);
    }
    store_ok(s); /* includes: allocated blocks == live + pending items */
    for (int i = 0; i < 4; i++)
        rdmx__kv_store_release(s, held[i]);
    stats(s, &st);
    CHECK_EQ_U64(st.pending_items, 0);
    CHECK_EQ_U64(st.pending_bytes, 0);
    rdmx__kv_store_flush(s);
    stats(s, &st);
    CHECK_EQ_U64(st.alloc_blocks, 0);
    CHECK_EQ_U64(st.alloc_free_blocks, 1);
    CHECK_EQ_U64(st.alloc_largest_free, st.alloc_capacity - RDMX_KV_ALLOC_HDR);
    store_ok(s);
    rdmx__kv_store_destroy(s);
    free(mem);
    th_log("references: replaced/deleted/flushed/expired items kept intact "
           "until released: ok");
}

/* ------------------------------------------------------------------------ */
/* incr / decr, prefix_hits, flush                                          */
/* ------------------------------------------------------------------------ */

static void expect_value(rdmx_kv_store_t *s, const char *key, const char *v,
                         uint64_t now)
{
    rdmx_kv_item_t *it;
    CHECK_OK(rdmx__kv_store_get(s, key, strlen(key), now, &it));
    CHECKF(rdmx__kv_item_length(it) == strlen(v) &&
               memcmp(rdmx__kv_item_value(s, it), v, strlen(v)) == 0,
           "%s: got \"%.*s\", want \"%s\"", key, (int)rdmx__kv_item_length(it),
           (const char *)rdmx__kv_item_value(s, it), v);
    rdmx__kv_store_release(s, it);
}

/*
 * Stamps (docs/KV.md, "Mapped GETs over shared memory"): a reader of the
 * mapped store finds an item's stamp at its stamp offset; the stamp is
 * not the bare version (it is salted), differs between items, and the
 * word at that offset changes when the item is freed (deleted, replaced,
 * evicted) or rewritten in place by incr, before the bytes change.
 */
static uint64_t word_at(const char *mem, uint64_t off)
{
    uint64_t w;

    memcpy(&w, mem + off, sizeof(w));
    return w;
}

static void test_stamps(void)
{
    size_t size = TH_MIB;
    char *mem = th_alloc(size);
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    rdmx_kv_item_t *it;
    uint64_t cas, st1, st2, off1, off2, v;
    char val[600];

    memset(val, 'x', sizeof(val));
    CHECK_OK(rdmx__kv_store_set(s, "a", 1, val, sizeof(val), RDMX_KV_STORE_SET,
                                0, 0, 0, 1, &cas));
    CHECK_OK(rdmx__kv_store_get(s, "a", 1, 1, &it));
    st1 = rdmx__kv_item_stamp(it);
    off1 = rdmx__kv_item_stamp_offset(s, it);
    CHECK(off1 % 8 == 0 && off1 + 8 <= rdmx__kv_item_offset(s, it));
    CHECK_EQ_U64(word_at(mem, off1), st1);
    CHECK(st1 != cas); /* salted */
    rdmx__kv_store_release(s, it);
    /* replaced: the old item's word changes, the new one has its own */
    CHECK_OK(rdmx__kv_store_set(s, "a", 1, val, sizeof(val), RDMX_KV_STORE_SET,
                                0, 0, 0, 1, &cas));
    CHECK(word_at(mem, off1) != st1);
    CHECK_OK(rdmx__kv_store_get(s, "a", 1, 1, &it));
    st2 = rdmx__kv_item_stamp(it);
    off2 = rdmx__kv_item_stamp_offset(s, it);
    CHECK(st2 != st1 && word_at(mem, off2) == st2);
    CHECK_EQ_U64(rdmx__kv_item_cas(it), cas);
    /* deleted while referenced: the stamp stays until the last release */
    CHECK_OK(rdmx__kv_store_delete(s, "a", 1, 0, 1));
    CHECK_EQ_U64(word_at(mem, off2), st2);
    rdmx__kv_store_release(s, it);
    CHECK(word_at(mem, off2) != st2);
    /* incr in place (nobody holds it): a new stamp at the same place */
    CHECK_OK(rdmx__kv_store_set(s, "n", 1, "41", 2, RDMX_KV_STORE_SET, 0, 0, 0,
                                1, &cas));
    CHECK_OK(rdmx__kv_store_get(s, "n", 1, 1, &it));
    st1 = rdmx__kv_item_stamp(it);
    off1 = rdmx__kv_item_stamp_offset(s, it);
    rdmx__kv_store_release(s, it);
    CHECK_OK(rdmx__kv_store_incr(s, "n", 1, 1, 0, 1, &v));
    CHECK_EQ_U64(v, 42);
    CHECK_OK(rdmx__kv_store_get(s, "n", 1, 1, &it));
    CHECK_EQ_U64(rdmx__kv_item_stamp_offset(s, it), off1); /* in place */
    CHECK(rdmx__kv_item_stamp(it) != st1 &&
          word_at(mem, off1) == rdmx__kv_item_stamp(it));
    rdmx__kv_store_release(s, it);
    rdmx__kv_store_destroy(s);
    free(mem);
    th_log("stamps ok");
}

static void test_incr(void)
{
    size_t size = TH_MIB;
    char *mem = th_alloc(size);
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    rdmx_kv_store_stats_t st;
    rdmx_kv_item_t *it, *held;
    uint64_t v, cas, now = 1;
    const char *bad[] = {"",
                         "abc",
                         "-1",
                         "1.5",
                         " 1",
                         "1 ",
                         "0x10",
                         "18446744073709551616",
                         "000000000000000000001"};

    CHECK_OK(rdmx__kv_store_set(s, "c", 1, "10", 2, RDMX_KV_STORE_SET, 0, 42,
                                1000, now, &cas));
    CHECK_OK(rdmx__kv_store_incr(s, "c", 1, 5, 0, now, &v));
    CHECK_EQ_U64(v, 15);
    expect_value(s, "c", "15", now);
    CHECK_OK(rdmx__kv_store_get(s, "c", 1, now, &it));
    CHECK(rdmx__kv_item_cas(it) > cas);
    CHECK_EQ_U64(rdmx__kv_item_flags(it), 42);    /* kept */
    CHECK_EQ_U64(rdmx__kv_item_expiry(it), 1001); /* kept */
    rdmx__kv_store_release(s, it);
    CHECK_OK(rdmx__kv_store_incr(s, "c", 1, 20, 1, now, &v)); /* floor */
    CHECK_EQ_U64(v, 0);
    expect_value(s, "c", "0", now);
    CHECK_OK(rdmx__kv_store_incr(s, "c", 1, 0, 1, now, &v));
    CHECK_EQ_U64(v, 0);
    put(s, "w", "18446744073709551615", 20, now);
    CHECK_OK(rdmx__kv_store_incr(s, "w", 1, 1, 0, now, &v)); /* wrap */
    CHECK_EQ_U64(v, 0);
    CHECK_OK(rdmx__kv_store_incr(s, "w", 1, UINT64_MAX, 0, now, &v));
    CHECK_EQ_U64(v, UINT64_MAX);
    expect_value(s, "w", "18446744073709551615", now);
    CHECK_OK(rdmx__kv_store_incr(s, "w", 1, 2, 0, now, &v));
    CHECK_EQ_U64(v, 1);
    put(s, "z", "0007", 4, now); /* leading zeros are a number */
    CHECK_OK(rdmx__kv_store_incr(s, "z", 1, 1, 0, now, &v));
    CHECK_EQ_U64(v, 8);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put(s, "b", bad[i], strlen(bad[i]), now);
        CHECK_ST(rdmx__kv_store_incr(s, "b", 1, 1, 0, now, &v),
                 RDMX_ERR_INVALID);
        expect_value(s, "b", bad[i], now); /* untouched */
    }
    CHECK_ST(rdmx__kv_store_incr(s, "missing", 7, 1, 0, now, &v),
             RDMX_ERR_NOT_FOUND);
    CHECK_ST(rdmx__kv_store_incr(s, "missing", 7, 1, 1, now, &v),
             RDMX_ERR_NOT_FOUND);
    /* a reader holds "99": incr writes a new item, the reader keeps 99 */
    put(s, "h", "99", 2, now);
    CHECK_OK(rdmx__kv_store_get(s, "h", 1, now, &held));
    CHECK_OK(rdmx__kv_store_incr(s, "h", 1, 1, 0, now, &v));
    CHECK_EQ_U64(v, 100);
    CHECK(rdmx__kv_item_length(held) == 2 &&
          memcmp(rdmx__kv_item_value(s, held), "99", 2) == 0);
    expect_value(s, "h", "100", now);
    stats(s, &st);
    CHECK_EQ_U64(st.pending_items, 1);
    rdmx__kv_store_release(s, held);
    stats(s, &st);
    CHECK_EQ_U64(st.pending_items, 0);
    CHECK_EQ_U64(st.incr_hits, 6);
    CHECK_EQ_U64(st.decr_hits, 2);
    CHECK_EQ_U64(st.incr_misses, 1);
    CHECK_EQ_U64(st.decr_misses, 1);
    store_ok(s);

    /* prefix_hits */
    {
        const void *keys[6] = {"p0", "p1", "p2", "p3", "p4", "p5"};
        size_t klens[6] = {2, 2, 2, 2, 2, 2};
        put(s, "p0", "x", 1, now);
        put(s, "p1", "x", 1, now);
        put(s, "p2", "x", 1, now);
        put(s, "p4", "x", 1, now);
        CHECK_EQ_U64(rdmx__kv_store_prefix_hits(s, keys, klens, 6, now), 3);
        CHECK_EQ_U64(rdmx__kv_store_prefix_hits(s, keys, klens, 2, now), 2);
        CHECK_EQ_U64(rdmx__kv_store_prefix_hits(s, keys, klens, 0, now), 0);
        CHECK_EQ_U64(rdmx__kv_store_prefix_hits(s, keys + 3, klens, 3, now), 0);
        CHECK_OK(rdmx__kv_store_set(s, "p1", 2, "x", 1, RDMX_KV_STORE_SET, 0, 0,
                                    10, now, NULL));
        CHECK_EQ_U64(rdmx__kv_store_prefix_hits(s, keys, klens, 6, now + 9), 3);
        CHECK_EQ_U64(rdmx__kv_store_prefix_hits(s, keys, klens, 6, now + 10),
                     1);
    }

    /* flush */
    rdmx__kv_store_flush(s);
    stats(s, &st);
    CHECK_EQ_U64(st.curr_items, 0);
    CHECK_EQ_U64(st.bytes, 0);
    CHECK_EQ_U64(st.alloc_blocks, 0);
    CHECK_EQ_U64(st.cmd_flush, 1);
    CHECK_ST(rdmx__kv_store_exists(s, "p0", 2, now), RDMX_ERR_NOT_FOUND);
    put(s, "after", "1", 1, now);
    expect_value(s, "after", "1", now);
    store_ok(s);
    rdmx__kv_store_destroy(s);
    free(mem);
    th_log("incr/decr, prefix_hits, flush: ok");
}

/* ------------------------------------------------------------------------ */
/* Fill, then shift the value size                                          */
/* ------------------------------------------------------------------------ */

static void fill_then_shift(int shuffle)
{
    const size_t size = 64 * TH_MIB, small = 100, large = 64 * TH_KIB;
    char *mem = th_alloc(size), key[32];
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    rdmx_kv_store_stats_t st;
    unsigned char sval[100];
    unsigned char *lval = th_alloc(large);
    uint64_t rng = 99, now = 1, ev0, ev_transition = 0, small_left;
    unsigned n_small = 0, n_large = 0, transition = 0, i, live_large = 0;
    double t0, t_small, t_large;

    memset(sval, 's', sizeof(sval));
    memset(lval, 'L', large);
    t0 = th_now_ms();
    /* 100 B values until evictions start, then 10 % more */
    for (;;) {
        snprintf(key, sizeof(key), "s%08u", n_small++);
        CHECK_OK(put(s, key, sval, small, now));
        if ((n_small & 1023) == 0) {
            stats(s, &st);
            if (st.evictions > 0)
                break;
        }
    }
    for (i = n_small / 10; i > 0; i--) {
        snprintf(key, sizeof(key), "s%08u", n_small++);
        CHECK_OK(put(s, key, sval, small, now));
    }
    t_small = th_now_ms() - t0;
    stats(s, &st);
    th_log("shift%s: %u x 100 B written, %llu live (%.1f MiB of values in "
           "%.1f MiB of blocks), %.0f ns per set",
           shuffle ? " (shuffled)" : "", n_small,
           (unsigned long long)st.curr_items, st.bytes / 1048576.0,
           st.alloc_used_bytes / 1048576.0, t_small * 1e6 / n_small);
    if (shuffle) {
        /* read every live key in random order, a second later (an item
         * moves at most once a second): the LRU order no longer follows
         * the addresses */
        now += 2048;
        for (i = 0; i < n_small; i++) {
            unsigned j = (unsigned)rng_below(&rng, n_small);
            rdmx_kv_item_t *it;
            snprintf(key, sizeof(key), "s%08u", j);
            if (rdmx__kv_store_get(s, key, strlen(key), now, &it) == RDMX_OK)
                rdmx__kv_store_release(s, it);
        }
    }
    /* 64 KiB values, new keys: three times the memory */
    ev0 = st.evictions;
    t0 = th_now_ms();
    for (i = 0; i < 3 * size / large; i++) {
        snprintf(key, sizeof(key), "L%08u", n_large++);
        CHECK_OK(put(s, key, lval, large, now));
        if (transition == 0) {
            /* items = small + large, bytes = 100 small + 64 Ki large */
            stats(s, &st);
            small_left = (st.curr_items * large - st.bytes) / (large - small);
            if (small_left == 0) {
                transition = n_large;
                ev_transition = st.evictions - ev0;
            }
        }
    }
    t_large = th_now_ms() - t0;
    stats(s, &st);
    store_ok(s);
    for (i = 0; i < n_large; i++) {
        snprintf(key, sizeof(key), "L%08u", i);
        live_large += present(s, key, now);
    }
    small_left = st.curr_items - live_large;
    CHECK_EQ_U64(st.bytes, small_left * small + (uint64_t)live_large * large);
    th_log("shift%s: %u x 64 KiB written (%.1f us per set); the 100 B "
           "items were gone after %u of them, %.0f items evicted per 64 KiB "
           "value on the way; now %u x 64 KiB + %llu x 100 B live",
           shuffle ? " (shuffled)" : "", n_large, t_large * 1e3 / n_large,
           transition, transition ? (double)ev_transition / transition : 0.0,
           live_large, (unsigned long long)small_left);
    CHECK(transition > 0);
    th_log("FILL-THEN-SHIFT%s: live 64 KiB values hold %.2f %% of the %zu "
           "MiB region (%llu evictions; largest free block %llu KiB)",
           shuffle ? " (shuffled LRU)" : "", 100.0 * live_large * large / size,
           size / TH_MIB, (unsigned long long)(st.evictions - ev0),
           (unsigned long long)st.alloc_largest_free / 1024);
    CHECKF((double)live_large * large >= 0.85 * size, "only %u x 64 KiB live",
           live_large);
    rdmx__kv_store_destroy(s);
    free(lval);
    free(mem);
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                  */
/* ------------------------------------------------------------------------ */

#define MT_KEYS    64
#define MT_THREADS 4

typedef struct {
    rdmx_kv_store_t *s;
    unsigned id;
    double until;
    uint64_t ops, hits, verified_bytes;
} mt_arg_t;

/* Value layout: u64 seed, u32 key index, u32 length, then the pattern of
 * seed from position 16. */
static void mt_fill(unsigned char *v, size_t len, uint64_t seed, unsigned k)
{
    uint32_t k32 = k, l32 = (uint32_t)len;
    memcpy(v, &seed, 8);
    memcpy(v + 8, &k32, 4);
    memcpy(v + 12, &l32, 4);
    th_fill_at(v + 16, len - 16, seed, 16);
}

static void mt_verify(const unsigned char *v, size_t len, unsigned k)
{
    uint64_t seed;
    uint32_t k32, l32;
    CHECK(len >= 16);
    memcpy(&seed, v, 8);
    memcpy(&k32, v + 8, 4);
    memcpy(&l32, v + 12, 4);
    CHECKF(k32 == k && l32 == len, "value of key %u claims key %u len %u/%zu",
           k, k32, l32, len);
    CHECK_PATTERN(v + 16, len - 16, seed, 16);
}

static void *mt_main(void *p)
{
    mt_arg_t *a = p;
    uint64_t rng = 1000 + a->id, now = 1;
    char key[16];

    while (th_now_ms() < a->until) {
        for (int burst = 0; burst < 64; burst++) {
            unsigned k = (unsigned)rng_below(&rng, MT_KEYS);
            int r = (int)rng_below(&rng, 100);
            rdmx_kv_item_t *it;
            rdmx_status_t st;
            size_t klen = (size_t)snprintf(key, sizeof(key), "key%u", k);

            a->ops++;
            if (r < 50) {
                st = rdmx__kv_store_get(a->s, key, klen, now, &it);
                if (st == RDMX_OK) {
                    a->hits++;
                    if (rng_below(&rng, 8) == 0)
                        sched_yield(); /* let others replace/evict */
                    mt_verify(rdmx__kv_item_value(a->s, it),
                              rdmx__kv_item_length(it), k);
                    a->verified_bytes += rdmx__kv_item_length(it);
                    if (rng_below(&rng, 4) == 0) { /* CAS on what we saw */
                        uint64_t cas = rdmx__kv_item_cas(it);
                        unsigned char v[64];
                        mt_fill(v, sizeof(v), rng_next(&rng) | 1, k);
                        st = rdmx__kv_store_set(a->s, key, klen, v, sizeof(v),
                                                RDMX_KV_STORE_CAS, cas, 0, 0,
                                                now, NULL);
                        CHECK(st == RDMX_OK || st == RDMX_ERR_EXISTS ||
                              st == RDMX_ERR_NOT_FOUND);
                    }
                    rdmx__kv_store_release(a->s, it);
                } else {
                    CHECK_ST(st, RDMX_ERR_NOT_FOUND);
                }
            } else if (r < 90) {
                /* the PUT path: reserve, fill without the lock, commit */
                size_t len = 16 + (size_t)rng_below(&rng, 16 * 1024);
                rdmx_kv_store_mode_t mode = rng_below(&rng, 4) == 0
                                                ? RDMX_KV_STORE_ADD
                                                : RDMX_KV_STORE_SET;
                st = rdmx__kv_store_reserve(a->s, key, klen, len, now, &it);
                if (st == RDMX_ERR_NO_MEMORY)
                    continue; /* everything evictable is held right now */
                CHECK_OK(st);
                mt_fill(rdmx__kv_item_value(a->s, it), len, rng_next(&rng) | 1,
                        k);
                if (rng_below(&rng, 8) == 0)
                    sched_yield();
                if (rng_below(&rng, 32) == 0) {
                    rdmx__kv_store_abort(a->s, it);
                    continue;
                }
                st = rdmx__kv_store_commit(a->s, it, mode, 0, 0, 0, now, NULL);
                CHECK(st == RDMX_OK ||
                      (mode == RDMX_KV_STORE_ADD && st == RDMX_ERR_EXISTS));
            } else {
                st = rdmx__kv_store_delete(a->s, key, klen, 0, now);
                CHECK(st == RDMX_OK || st == RDMX_ERR_NOT_FOUND);
            }
        }
    }
    return NULL;
}

static void test_threads(void)
{
    size_t size = 4 * TH_MIB;
    char *mem = th_alloc(size);
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    pthread_t t[MT_THREADS];
    mt_arg_t a[MT_THREADS];
    rdmx_kv_store_stats_t st;
    uint64_t ops = 0, hits = 0, bytes = 0;
    double t0 = th_now_ms();

    /* fill the memory with other keys first, so that the run evicts */
    for (unsigned i = 0; i < 2000; i++) {
        char key[32];
        snprintf(key, sizeof(key), "pre%u", i);
        put_pattern(s, key, 4000, i + 1, 1);
    }
    for (int i = 0; i < MT_THREADS; i++) {
        a[i] = (mt_arg_t){.s = s, .id = (unsigned)i, .until = t0 + 1500};
        CHECK(pthread_create(&t[i], NULL, mt_main, &a[i]) == 0);
    }
    for (int i = 0; i < MT_THREADS; i++) {
        CHECK(pthread_join(t[i], NULL) == 0);
        ops += a[i].ops;
        hits += a[i].hits;
        bytes += a[i].verified_bytes;
    }
    stats(s, &st);
    store_ok(s);
    CHECK_EQ_U64(st.pending_items, 0);
    CHECK_EQ_U64(st.reserved_items, 0);
    CHECK_EQ_U64(st.get_hits, hits);
    th_log("threads: %d threads, %llu ops in %.0f ms (%.2f Mops/s), %llu "
           "hits verified (%.1f MiB), %llu evictions",
           MT_THREADS, (unsigned long long)ops, th_now_ms() - t0,
           ops / (th_now_ms() - t0) / 1000.0, (unsigned long long)hits,
           bytes / 1048576.0, (unsigned long long)st.evictions);
    CHECK(st.evictions > 0 && hits > 0);
    for (unsigned k = 0; k < MT_KEYS; k++) {
        char key[16];
        rdmx_kv_item_t *it;
        size_t klen = (size_t)snprintf(key, sizeof(key), "key%u", k);
        if (rdmx__kv_store_get(s, key, klen, 1, &it) == RDMX_OK) {
            mt_verify(rdmx__kv_item_value(s, it), rdmx__kv_item_length(it), k);
            rdmx__kv_store_release(s, it);
        }
    }
    rdmx__kv_store_flush(s);
    stats(s, &st);
    CHECK_EQ_U64(st.alloc_blocks, 0);
    CHECK_EQ_U64(st.alloc_free_blocks, 1);
    rdmx__kv_store_destroy(s);
    free(mem);
}

/* Cost of the single lock: small GETs (get + release) from one thread and
 * from MT_THREADS threads at once; small SETs from one thread. */
typedef struct {
    rdmx_kv_store_t *s;
    unsigned id, n;
} speed_arg_t;

#define SPEED_KEYS 10000

static void *speed_main(void *p)
{
    speed_arg_t *a = p;
    uint64_t rng = a->id + 1;
    char key[16];
    rdmx_kv_item_t *it;

    for (unsigned i = 0; i < a->n; i++) {
        size_t klen = (size_t)snprintf(key, sizeof(key), "sp%u",
                                       (unsigned)rng_below(&rng, SPEED_KEYS));
        CHECK_OK(rdmx__kv_store_get(a->s, key, klen, 1, &it));
        rdmx__kv_store_release(a->s, it);
    }
    return NULL;
}

static void test_speed(void)
{
    size_t size = 16 * TH_MIB;
    char *mem = th_alloc(size), key[16], val[32];
    rdmx_kv_store_t *s = store_new(mem, size, 0, RDMX_KV_EVICT_LRU);
    unsigned n = 400000 / TH_SLOW;
    speed_arg_t a[MT_THREADS];
    pthread_t t[MT_THREADS];
    double t0, one, many, set;

    memset(val, 'v', sizeof(val));
    t0 = th_now_ms();
    for (unsigned i = 0; i < n; i++) {
        size_t klen =
            (size_t)snprintf(key, sizeof(key), "sp%u", i % SPEED_KEYS);
        CHECK_OK(rdmx__kv_store_set(s, key, klen, val, sizeof(val),
                                    RDMX_KV_STORE_SET, 0, 0, 0, 1, NULL));
    }
    set = (th_now_ms() - t0) * 1e6 / n;
    a[0] = (speed_arg_t){.s = s, .id = 0, .n = n};
    t0 = th_now_ms();
    speed_main(&a[0]);
    one = (th_now_ms() - t0) * 1e6 / n;
    t0 = th_now_ms();
    for (int i = 0; i < MT_THREADS; i++) {
        a[i] = (speed_arg_t){.s = s, .id = (unsigned)i + 1, .n = n / 4};
        CHECK(pthread_create(&t[i], NULL, speed_main, &a[i]) == 0);
    }
    for (int i = 0; i < MT_THREADS; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    many = (th_now_ms() - t0) * 1e6 / n;
    th_log("speed: 32 B set %.0f ns; get+release %.0f ns from 1 thread, "
           "%.0f ns per op (%.2f Mops/s) from %d threads on %ld cpus",
           set, one, many, 1e3 / many, MT_THREADS,
           sysconf(_SC_NPROCESSORS_ONLN));
    rdmx__kv_store_destroy(s);
    free(mem);
}

int main(void)
{
    th_init("kv_store", 120);
    printf("%-24s %4zu bytes\n", "rdmx_kv_alloc_t", sizeof(rdmx_kv_alloc_t));
    printf("%-24s %4zu bytes\n", "rdmx_kv_store_stats_t",
           sizeof(rdmx_kv_store_stats_t));
    test_siphash();
    test_alloc_basic();
    test_alloc_random(64 * TH_MIB, 0, 200000);
    test_alloc_random(8 * TH_MIB + 1000, 13, 50000);
    test_round_trips();
    test_alloc_large();
    test_modes();
    test_reserve_across_growth();
    test_model();
    test_ttl();
    test_lru();
    test_lru_epochs();
    test_references();
    test_incr();
    test_stamps();
    fill_then_shift(0);
    fill_then_shift(1);
    test_threads();
    test_speed();
    th_log("all ok");
    return 0;
}
