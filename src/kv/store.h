/*
 * rdmx KV — the storage engine of rdmx-kvd: items in a hash index, kept in
 * one caller-owned memory range (the registered region), no networking.
 * docs/KV.md ("Store") explains the design.
 *
 * - Each item is one block of the range, carved by the TLSF allocator of
 *   alloc.h: its header, its key, then its value (offsets from the range
 *   start; values are not aligned). Only the index's buckets and the expiry
 *   heap live in ordinary heap memory.
 * - Items carry key, value length, 32-bit client flags, an
 *   absolute expiry (ms on the caller's monotonic clock, 0 = never), a 64-bit
 *   CAS version (a store-wide counter, new on every change) and a reference
 *   count. Every call takes the caller's clock as `now_ms`.
 * - Reading: rdmx__kv_store_get() returns a referenced item; its value stays
 * intact and its memory is not reused until rdmx__kv_store_release(), even if
 * the item is replaced, deleted, flushed or expires meanwhile — an RDMA write
 * of the value runs without the store's lock and can never see it change.
 * - Writing in two steps: rdmx__kv_store_reserve() allocates an unlinked item
 * with value space (evicting least-recently-used items when memory is full);
 *   the caller fills the value (an RDMA read into rdmx__kv_item_value()),
 *   then rdmx__kv_store_commit() links it, replacing the old item atomically,
 * or rdmx__kv_store_abort() drops it. rdmx__kv_store_set() does both for a
 * value in hand.
 *
 * Threads: every function may be called from any thread; each takes the
 * store's one mutex for its (short, bounded) duration. The item accessors
 * take no lock; they read fields that do not change while the caller holds
 * the item (a reference from get, or a reservation). The store's mutex is a
 * leaf: no other lock is taken while it is held.
 *
 * Results: RDMX_OK; RDMX_ERR_NOT_FOUND (absent or expired) and
 * RDMX_ERR_EXISTS (condition failed) are ordinary outcomes without a detail;
 * RDMX_ERR_INVALID, RDMX_ERR_TOO_BIG and RDMX_ERR_NO_MEMORY also set
 * rdmx_error_detail().
 *
 * Example (a GET, then a PUT whose value arrives by RDMA read):
 * @code
 * rdmx_kv_item_t *it;
 * if (rdmx__kv_store_get(s, key, klen, now, &it) == RDMX_OK) {
 *     // RDMA write from rdmx__kv_item_offset(it), rdmx__kv_item_length(it)
 *     // ... once it completed:
 *     rdmx__kv_store_release(s, it);
 * }
 * if (rdmx__kv_store_reserve(s, key, klen, vlen, now, &it) == RDMX_OK) {
 *     // RDMA read into rdmx__kv_item_offset(it), vlen bytes
 *     // ... once it completed (if it failed: rdmx__kv_store_abort(s, it)):
 *     st = rdmx__kv_store_commit(s, it, RDMX_KV_STORE_SET, 0, flags,
 *                                ttl_ms, now, &cas);
 * }
 * @endcode
 */
#ifndef RDMX_KV_STORE_H
#define RDMX_KV_STORE_H

#include <rdmx/status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct rdmx_kv_store rdmx_kv_store_t;
typedef struct rdmx_kv_item rdmx_kv_item_t;

#define RDMX_KV_STORE_DEFAULT_MAX_KEY   250u
#define RDMX_KV_STORE_MAX_KEY_LIMIT     65535u
#define RDMX_KV_STORE_DEFAULT_MAX_VALUE ((size_t)1 << 20)

typedef enum {
    RDMX_KV_EVICT_LRU = 0, /* memory full: evict least recently used */
    RDMX_KV_EVICT_NONE = 1 /* memory full: writes fail, NO_MEMORY */
} rdmx_kv_eviction_t;

enum {
    RDMX_KV_STORE_FIELD_MAX_KEY = 1u << 0,
    RDMX_KV_STORE_FIELD_MAX_VALUE = 1u << 1,
    RDMX_KV_STORE_FIELD_EVICTION = 1u << 2,
};

typedef struct {
    uint64_t field_mask;         /* RDMX_KV_STORE_FIELD_* set below */
    size_t max_key;              /* 1 .. 65535; default 250 */
    size_t max_value;            /* default 1 MiB; larger values: TOO_BIG */
    rdmx_kv_eviction_t eviction; /* default RDMX_KV_EVICT_LRU */
} rdmx_kv_store_params_t;

/* How rdmx__kv_store_commit() stores. */
typedef enum {
    RDMX_KV_STORE_SET = 0,     /* always */
    RDMX_KV_STORE_ADD = 1,     /* only if absent, else RDMX_ERR_EXISTS */
    RDMX_KV_STORE_REPLACE = 2, /* only if present, else RDMX_ERR_NOT_FOUND */
    RDMX_KV_STORE_CAS = 3      /* only if present (else NOT_FOUND) with the
                                  CAS version given (else RDMX_ERR_EXISTS) */
} rdmx_kv_store_mode_t;

/*
 * The store's counters as X(field, name): `field` of rdmx_kv_store_stats_t
 * and `name`, its line in the KV server's stats answer ("name value", see
 * server.h), memcached's name where memcached has one; "" for the ones that
 * answer does not report. The reported ones come first, in its order.
 */
#define RDMX_KV_STORE_STATS(X)                                                 \
    X(curr_items, "curr_items")   /* items linked in the index */              \
    X(total_items, "total_items") /* items ever linked (commits, incr          \
                                     copies) */                                \
    X(bytes, "bytes")             /* value bytes of the linked items */        \
    X(limit_maxbytes,                                                          \
      "limit_maxbytes")   /* size of the range given at create */              \
    X(cmd_get, "cmd_get") /* == get_hits + get_misses */                       \
    X(cmd_set, "cmd_set") /* reserve / set calls */                            \
    X(cmd_touch, "cmd_touch")                                                  \
    X(cmd_flush, "cmd_flush")                                                  \
    X(get_hits, "get_hits")                                                    \
    X(get_misses, "get_misses")   /* includes get_expired */                   \
    X(get_expired, "get_expired") /* gets that found the item expired */       \
    X(delete_hits, "delete_hits")                                              \
    X(delete_misses, "delete_misses")                                          \
    X(incr_hits, "incr_hits")                                                  \
    X(incr_misses, "incr_misses")                                              \
    X(decr_hits, "decr_hits")                                                  \
    X(decr_misses, "decr_misses")                                              \
    X(cas_hits, "cas_hits")                                                    \
    X(cas_misses, "cas_misses")                                                \
    X(cas_badval, "cas_badval")                                                \
    X(touch_hits, "touch_hits")                                                \
    X(touch_misses, "touch_misses")                                            \
    X(evictions, "evictions") /* live items removed to make room */            \
    X(evicted_unfetched, "evicted_unfetched") /* ... that had never been       \
                                                 read */                       \
    X(expired_unfetched, "expired_unfetched") /* expired items removed never   \
                                                 read */                       \
    X(reclaimed, "reclaimed")         /* expired items removed other than by   \
                                         a get: reclaim sweep, eviction,       \
                                         other commands */                     \
    X(alloc_free_bytes, "free_bytes") /* allocator: spans of free blocks */    \
    X(alloc_largest_free, "largest_free_block") /* usable bytes of the largest \
                                                   free block */               \
    X(reserved_items, "reserved_items") /* reserved, not yet committed or      \
                                           aborted (PUTs being read) */        \
    X(pending_items, "pending_items")   /* replaced/deleted, freed at their    \
                                           last release (GETs being sent) */   \
    X(pending_bytes, "pending_bytes")   /* their value bytes */                \
    X(hash_power_level, "")             /* log2 of the index's buckets */      \
    X(hash_is_expanding, "")                                                   \
    X(alloc_capacity, "")    /* allocator: bytes managed (range minus          \
                                alignment) */                                  \
    X(alloc_used_bytes, "")  /* spans of allocated blocks */                   \
    X(alloc_blocks, "")      /* allocated blocks */                            \
    X(alloc_free_blocks, "") /* free blocks */

/* The counters, one uint64_t per entry of RDMX_KV_STORE_STATS. The
 * store's mutex guards its copy; rdmx__kv_store_stats() gives a snapshot. */
typedef struct {
#define RDMX_KV_STORE_STATS_FIELD(field, name) uint64_t field;
    RDMX_KV_STORE_STATS(RDMX_KV_STORE_STATS_FIELD)
#undef RDMX_KV_STORE_STATS_FIELD
} rdmx_kv_store_stats_t;

/*
 * A store over [mem, mem + size), which the caller keeps alive (and
 * registered) until rdmx__kv_store_destroy(). @params may be NULL (defaults).
 * RDMX_ERR_INVALID for a bad range or parameter, RDMX_ERR_NO_MEMORY when the
 * index cannot be allocated.
 */
rdmx_status_t rdmx__kv_store_create(void *mem, size_t size,
                                    const rdmx_kv_store_params_t *params,
                                    rdmx_kv_store_t **store_p);

/* Free every item and the store. No reference or reservation may still be
 * in use (their items are freed too). The range is not touched. */
void rdmx__kv_store_destroy(rdmx_kv_store_t *s);

/*
 * Look @key up. RDMX_OK: *item_p holds a reference (release it with
 * rdmx__kv_store_release), the item moves to the most-recently-used end
 * unless it moved there in this ~1 s epoch already, get_hits counts it.
 * RDMX_ERR_NOT_FOUND: absent, or expired (removed now, counted in get_expired).
 * Either way cmd_get counts it. RDMX_ERR_NO_RESOURCE: the item already holds
 * 2^21 - 1 references.
 */
rdmx_status_t rdmx__kv_store_get(rdmx_kv_store_t *s, const void *key,
                                 size_t klen, uint64_t now_ms,
                                 rdmx_kv_item_t **item_p);

/* Drop a reference from rdmx__kv_store_get. An item replaced or deleted
 * meanwhile is freed here, at its last release. */
void rdmx__kv_store_release(rdmx_kv_store_t *s, rdmx_kv_item_t *item);

/*
 * Values of this many bytes and more are written into the store around the
 * CPU caches (util/copy.h): by rdmx__kv_store_set, and by the server's pull
 * of a lent value into a reserved item (RDMX_OP_FLAG_STREAM). The server
 * does not read a value it stored; clients read it later, on other cores.
 * Below it, a value read right after it was written (a small hot set)
 * would come from memory instead of the cache, which cost 4 KiB values 6 %
 * (docs/KV.md, "Values written around the cache").
 */
#define RDMX_KV_STREAM_MIN ((size_t)16384)

/* Accessors of a referenced or reserved item (no lock taken). */
void *rdmx__kv_item_value(const rdmx_kv_store_t *s, const rdmx_kv_item_t *it);
/* the value's offset from mem */
uint64_t rdmx__kv_item_offset(const rdmx_kv_store_t *s,
                              const rdmx_kv_item_t *it);
size_t rdmx__kv_item_length(const rdmx_kv_item_t *it);
uint32_t rdmx__kv_item_flags(const rdmx_kv_item_t *it);
uint64_t rdmx__kv_item_cas(const rdmx_kv_item_t *it);    /* 0 while reserved */
uint64_t rdmx__kv_item_expiry(const rdmx_kv_item_t *it); /* absolute ms, 0 */
/* The item's stamp as it lies in memory, and its offset from mem: a
 * reader of the mapped store checks it after copying the value; it
 * changes before the value's bytes do (docs/KV.md, "Mapped GETs over
 * shared memory"). */
uint64_t rdmx__kv_item_stamp(const rdmx_kv_item_t *it);
uint64_t rdmx__kv_item_stamp_offset(const rdmx_kv_store_t *s,
                                    const rdmx_kv_item_t *it);
const void *rdmx__kv_item_key(const rdmx_kv_item_t *it, size_t *klen_p);

/*
 * Allocate an unlinked item for @key with @vlen value bytes (contents
 * undefined; below 4 GiB) for the caller to fill at rdmx__kv_item_value() /
 * rdmx__kv_item_offset(). Nobody else sees it until rdmx__kv_store_commit(); it
 * is never evicted. Memory full: expired items are removed (soonest first,
 * also with eviction off); then, with RDMX_KV_EVICT_LRU, least-recently-used
 * unreferenced items are evicted (with their unreferenced physical
 * successors when one hole has to grow to @vlen). With RDMX_KV_EVICT_NONE,
 * or when that finds no room, RDMX_ERR_NO_MEMORY. RDMX_ERR_TOO_BIG: @klen >
 * max_key or @vlen > max_value; RDMX_ERR_INVALID: empty key. Counts cmd_set.
 */
rdmx_status_t rdmx__kv_store_reserve(rdmx_kv_store_t *s, const void *key,
                                     size_t klen, size_t vlen, uint64_t now_ms,
                                     rdmx_kv_item_t **item_p);

/*
 * Link a reserved item under its key as @mode says, with client @flags and
 * a time to live of @ttl_ms (0: never expires). The old item, if any, leaves
 * the index in the same critical section the new one enters it (a reader
 * finds the old or the new, complete value); the old one is freed now or at
 * its last release. *cas_p (may be NULL) gets the new CAS version.
 * The item is consumed whatever the result: on failure it is freed.
 * RDMX_ERR_EXISTS: ADD found the key, or CAS found another version;
 * RDMX_ERR_NOT_FOUND: REPLACE/CAS found no item; RDMX_ERR_INVALID: not a
 * reserved item or an unknown mode; RDMX_ERR_NO_MEMORY: no heap for the
 * expiry index.
 */
rdmx_status_t rdmx__kv_store_commit(rdmx_kv_store_t *s, rdmx_kv_item_t *item,
                                    rdmx_kv_store_mode_t mode,
                                    uint64_t cas_expected, uint32_t flags,
                                    uint64_t ttl_ms, uint64_t now_ms,
                                    uint64_t *cas_p);

/* Free a reserved item without linking it. */
void rdmx__kv_store_abort(rdmx_kv_store_t *s, rdmx_kv_item_t *item);

/* reserve + copy @value + commit, under one lock. */
rdmx_status_t rdmx__kv_store_set(rdmx_kv_store_t *s, const void *key,
                                 size_t klen, const void *value, size_t vlen,
                                 rdmx_kv_store_mode_t mode,
                                 uint64_t cas_expected, uint32_t flags,
                                 uint64_t ttl_ms, uint64_t now_ms,
                                 uint64_t *cas_p);

/* Remove @key; with @cas_expected != 0 only at that version (else
 * RDMX_ERR_EXISTS). RDMX_ERR_NOT_FOUND when absent. */
rdmx_status_t rdmx__kv_store_delete(rdmx_kv_store_t *s, const void *key,
                                    size_t klen, uint64_t cas_expected,
                                    uint64_t now_ms);

/* Give @key a new time to live (0: never expires) and move it in the LRU;
 * the CAS version stays. RDMX_ERR_NOT_FOUND when absent. */
rdmx_status_t rdmx__kv_store_touch(rdmx_kv_store_t *s, const void *key,
                                   size_t klen, uint64_t ttl_ms,
                                   uint64_t now_ms);

/* RDMX_OK if @key is present, RDMX_ERR_NOT_FOUND if not. No LRU bump, no
 * counter. */
rdmx_status_t rdmx__kv_store_exists(rdmx_kv_store_t *s, const void *key,
                                    size_t klen, uint64_t now_ms);

/*
 * memcached incr/decr: the value must be 1..20 ASCII digits holding an
 * unsigned 64-bit number (else RDMX_ERR_INVALID); incr adds @delta modulo
 * 2^64, decr (@decr != 0) subtracts it and stops at 0. The result is stored
 * as decimal digits with a new CAS version, flags and expiry kept: in place
 * when nobody holds a reference and it fits the block, else as a new item
 * (which may evict, or fail with RDMX_ERR_NO_MEMORY). *value_p (may be NULL)
 * gets the new number. RDMX_ERR_NOT_FOUND when absent.
 */
rdmx_status_t rdmx__kv_store_incr(rdmx_kv_store_t *s, const void *key,
                                  size_t klen, uint64_t delta, int decr,
                                  uint64_t now_ms, uint64_t *value_p);

/* Remove every item (referenced ones are freed at their last release;
 * reservations are not affected). O(items). */
void rdmx__kv_store_flush(rdmx_kv_store_t *s);

/* Remove up to @max_items items whose expiry has passed, soonest first
 * (O(log n) each, from the expiry heap); returns how many. Call it
 * periodically; also advances a growing index by some buckets. */
size_t rdmx__kv_store_reclaim(rdmx_kv_store_t *s, uint64_t now_ms,
                              size_t max_items);

/* How many of @keys[0..n) in order, from the first, are present (stops at
 * the first absent one). No LRU bump, no counter. */
size_t rdmx__kv_store_prefix_hits(rdmx_kv_store_t *s, const void *const *keys,
                                  const size_t *klens, size_t n,
                                  uint64_t now_ms);

void rdmx__kv_store_stats(rdmx_kv_store_t *s, rdmx_kv_store_stats_t *stats_p);

/* Verify the index, LRU, expiry heap, counters and allocator against each
 * other. O(n); for tests. RDMX_OK or RDMX_ERR_INTERNAL with a detail. */
rdmx_status_t rdmx__kv_store_check(rdmx_kv_store_t *s);

/* SipHash-2-4 (Aumasson & Bernstein) with the 128-bit key @k: the keyed
 * hash of the index, randomly keyed per store so clients cannot aim keys at
 * one bucket. Exposed for its test vectors. */
uint64_t rdmx__kv_siphash(const uint64_t k[2], const void *data, size_t len);

#endif /* RDMX_KV_STORE_H */
