/*
 * The KV store: index, items, LRU, expiry, eviction (see store.h and
 * docs/KV.md).
 *
 * Item life cycle:
 *
 *   reserve ──▶ RESERVED ──commit──▶ LINKED ──unlink──▶ UNLINKED ──▶ freed
 *                  │ abort / failed commit              (refs == 0)
 *                  └──────────────────────────────────────────────▶ freed
 *
 * An item is one block of the range (as memcached's items are in its slabs):
 * the allocator's 8-byte header, the item's 46-byte header (struct
 * rdmx_kv_item), the key, the value. Items name each other by 32-bit
 * references (kv_ref_t: the block's start in granules), not pointers: the
 * LRU and pending lists, the index chains and buckets, the expiry heap.
 *
 * LINKED items are in the index, the LRU list and (with an expiry) the
 * expiry heap. RESERVED and UNLINKED items sit on s->pending; an UNLINKED
 * item lives there only while references remain. A LINKED item is unlinked
 * by a replace, delete, flush, expiry or eviction; if nobody holds it, its
 * block is freed at once.
 *
 * Every field of the store and of its items is guarded by s->lock, except
 * the ones the accessors read: key, klen, vlen, flags, stamp (written only
 * while nobody else holds the item) and exptime (an atomic: touch changes
 * it under the lock while a holder may read it).
 */
#include "kv/store.h"

#include "core/upper.h"
#include "kv/alloc.h"
#include "util/copy.h"
#include "util/endian.h"
#include "util/fence.h"
#include "util/hash.h"
#include "util/time.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

enum {
    ITEM_RESERVED = 1,
    ITEM_LINKED = 2,
    ITEM_UNLINKED = 3,
};

#define NO_HEAP          UINT32_MAX
#define NO_REHASH        ((size_t)-1)
#define HT_MIN_LOG2      10
#define HT_MAX_LOG2      32   /* (a reserved item keeps 32 bits of its hash) */
#define HT_MAX_LOAD      2    /* items per bucket before the index grows */
#define REHASH_STEP      4    /* non-empty buckets moved per operation */
#define REHASH_RECLAIM   256  /* ... per rdmx__kv_store_reclaim call */
#define EVICT_VICTIMS    64   /* LRU victims tried per allocation */
#define EVICT_BUSY_SKIPS 1024 /* referenced tail items moved aside */
/* An item moves to the LRU's recent end at most once per epoch of
 * 2^LRU_EPOCH_SHIFT ms (~1 s); its header keeps the epoch's low 8 bits. */
#define LRU_EPOCH_SHIFT 10
#define ITEM_REFS_MAX   ((1u << 21) - 1)
#define ITEM_MAX_VALUE  UINT32_MAX

/* An item: 1 + the start of its block in granules from the allocator's
 * first block (rdmx_kv_alloc_t.shift); 0: none. */
typedef uint32_t kv_ref_t;

/* 46 bytes in front of the key; the value follows the key. */
struct rdmx_kv_item {
    uint64_t stamp;           /* version (0 while RESERVED) ^ salt */
    _Atomic uint64_t exptime; /* absolute ms; 0: never */
    kv_ref_t lru_prev;        /* neighbours on s->lru while LINKED, */
    kv_ref_t lru_next;        /* ... else on s->pending */
    kv_ref_t hnext;           /* next in the index bucket, while LINKED;
                                 the key's hash while RESERVED (item_new) */
    uint32_t vlen;            /* value length */
    uint32_t flags;           /* client flags */
    uint32_t heap_idx;        /* position in s->heap, or NO_HEAP */
    unsigned refs : 21;       /* references from rdmx__kv_store_get / pins */
    unsigned state : 2;       /* ITEM_* */
    unsigned fetched : 1;     /* read by a get or incr since linked */
    unsigned moved : 8;       /* LRU epoch of its last move (LRU_EPOCH_SHIFT) */
    uint16_t klen;
    unsigned char key[]; /* klen bytes, then the value */
};

#define ITEM_HDR offsetof(rdmx_kv_item_t, key)

_Static_assert(offsetof(rdmx_kv_item_t, key) == 46, "item header size");

/*
 * The stamp: an item's version XOR a random salt drawn once per process,
 * in the header's first 8 bytes. A client that copies a value out of the
 * mapped store checks the stamp after its copy (docs/KV.md, "Mapped GETs
 * over shared memory"), so whatever changes bytes a reader may be copying
 * changes the stamp first: item_free and an in-place incr (stamp_void).
 * The salt makes stamps random words rather than small numbers a value
 * could hold.
 */
static uint64_t stamp_salt;
static pthread_once_t stamp_once = PTHREAD_ONCE_INIT;

/* @n 64-bit random words into @w: the kernel's, or, if it has none yet,
 * the clock mixed with @w's address. */
static void random_words(uint64_t *w, size_t n)
{
    if (getrandom(w, n * sizeof(*w), GRND_NONBLOCK) !=
        (ssize_t)(n * sizeof(*w)))
        for (size_t i = 0; i < n; i++)
            w[i] = rdmx_mix64(rdmx_now_ns() ^ (uintptr_t)&w[i]);
}

static void stamp_init(void)
{
    random_words(&stamp_salt, 1);
}

static inline uint64_t cas_of(const rdmx_kv_item_t *it)
{
    return __atomic_load_n(&it->stamp, __ATOMIC_RELAXED) ^ stamp_salt;
}

static inline void cas_set(rdmx_kv_item_t *it, uint64_t cas)
{
    __atomic_store_n(&it->stamp, cas ^ stamp_salt, __ATOMIC_RELAXED);
}

/* Before bytes of @it a reader may copy change: its stamp becomes that of
 * version 0, which no linked item has, and is seen before what follows. */
static inline void stamp_void(rdmx_kv_item_t *it)
{
    cas_set(it, 0);
    rdmx_fence_release();
}

/* A list of items, linked through lru_prev / lru_next. */
typedef struct {
    kv_ref_t head; /* first (least recently used); 0: empty */
    kv_ref_t tail;
} kv_list_t;

typedef struct {
    kv_ref_t *b; /* buckets; NULL when the table is unused */
    size_t mask; /* buckets - 1 */
} kv_table_t;

struct rdmx_kv_store {
    pthread_mutex_t lock; /* guards everything below */
    char *base;           /* the caller's range */
    size_t size;
    size_t max_key;
    size_t max_value;
    rdmx_kv_eviction_t eviction;
    uint64_t seed[2]; /* SipHash key */
    rdmx_kv_alloc_t alloc;
    /* index: chained hash table, grown incrementally (Redis's dict): while
     * rehash != NO_REHASH, buckets [0, rehash) of ht[0] have moved to ht[1]
     * and new items go to ht[1]. */
    kv_table_t ht[2];
    size_t rehash;
    kv_list_t lru;     /* LINKED items, least recently used first */
    kv_list_t pending; /* RESERVED and referenced UNLINKED items */
    kv_ref_t *heap;    /* min-heap of LINKED items with an expiry */
    uint32_t heap_len;
    uint32_t heap_cap;
    uint64_t last_cas;        /* versions are 1, 2, ... */
    rdmx_kv_store_stats_t st; /* counters (allocator part filled on read) */
};

/* ------------------------------------------------------------------------ */
/* Hash                                                                     */
/* ------------------------------------------------------------------------ */

#define ROTL64(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
    do {                                                                       \
        v0 += v1;                                                              \
        v1 = ROTL64(v1, 13);                                                   \
        v1 ^= v0;                                                              \
        v0 = ROTL64(v0, 32);                                                   \
        v2 += v3;                                                              \
        v3 = ROTL64(v3, 16);                                                   \
        v3 ^= v2;                                                              \
        v0 += v3;                                                              \
        v3 = ROTL64(v3, 21);                                                   \
        v3 ^= v0;                                                              \
        v2 += v1;                                                              \
        v1 = ROTL64(v1, 17);                                                   \
        v1 ^= v2;                                                              \
        v2 = ROTL64(v2, 32);                                                   \
    } while (0)

/* The last len % 8 bytes of a message of @len bytes, which begin at @p,
 * as a little-endian value: SipHash's last block without a loop over
 * its bytes (most of a short key is that block). A message of 8 bytes or
 * more loads the 8 that end where it ends and shifts out those before
 * @p; a shorter one loads 4, 2 and 1. */
static inline uint64_t load_tail(const unsigned char *p, size_t len)
{
    size_t t = len & 7, off = 0;
    uint64_t v = 0;

    if (t == 0)
        return 0;
    if (len >= 8)
        return rdmx_get_le64(p + t - 8) >> (64 - 8 * t);
    if (t & 4) {
        v = rdmx_get_le32(p);
        off = 4;
    }
    if (t & 2) {
        v |= (uint64_t)rdmx_get_le16(p + off) << (8 * off);
        off += 2;
    }
    if (t & 1)
        v |= (uint64_t)p[off] << (8 * off);
    return v;
}

uint64_t rdmx__kv_siphash(const uint64_t k[2], const void *data, size_t len)
{
    const unsigned char *p = data, *end = p + (len & ~(size_t)7);
    uint64_t v0 = 0x736f6d6570736575ull ^ k[0];
    uint64_t v1 = 0x646f72616e646f6dull ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ull ^ k[0];
    uint64_t v3 = 0x7465646279746573ull ^ k[1];
    uint64_t m, b = (uint64_t)len << 56;

    for (; p != end; p += 8) {
        m = rdmx_get_le64(p);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    b |= load_tail(p, len);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ------------------------------------------------------------------------ */
/* Item references and lists                                                */
/* ------------------------------------------------------------------------ */

static inline rdmx_kv_item_t *item_at(const rdmx_kv_store_t *s, kv_ref_t r)
{
    return (rdmx_kv_item_t *)(s->alloc.first +
                              ((uint64_t)(r - 1) << s->alloc.shift) +
                              RDMX_KV_ALLOC_HDR);
}

static inline kv_ref_t ref_of(const rdmx_kv_store_t *s,
                              const rdmx_kv_item_t *it)
{
    return (kv_ref_t)((uint64_t)((const char *)it - s->alloc.first) >>
                      s->alloc.shift) +
           1;
}

/* The item whose block's payload is at @off. */
static inline rdmx_kv_item_t *item_of_offset(const rdmx_kv_store_t *s,
                                             uint64_t off)
{
    return (rdmx_kv_item_t *)(s->base + off);
}

static inline uint64_t item_offset(const rdmx_kv_store_t *s,
                                   const rdmx_kv_item_t *it)
{
    return (uint64_t)((const char *)it - s->base);
}

static inline unsigned char *item_value(const rdmx_kv_item_t *it)
{
    return (unsigned char *)it->key + it->klen;
}

static inline uint64_t item_hash(const rdmx_kv_store_t *s,
                                 const rdmx_kv_item_t *it)
{
    return rdmx__kv_siphash(s->seed, it->key, it->klen);
}

static void list_insert_tail(rdmx_kv_store_t *s, kv_list_t *l,
                             rdmx_kv_item_t *it)
{
    kv_ref_t r = ref_of(s, it);

    it->lru_prev = l->tail;
    it->lru_next = 0;
    if (l->tail != 0)
        item_at(s, l->tail)->lru_next = r;
    else
        l->head = r;
    l->tail = r;
}

static void list_del(rdmx_kv_store_t *s, kv_list_t *l, rdmx_kv_item_t *it)
{
    if (it->lru_prev != 0)
        item_at(s, it->lru_prev)->lru_next = it->lru_next;
    else
        l->head = it->lru_next;
    if (it->lru_next != 0)
        item_at(s, it->lru_next)->lru_prev = it->lru_prev;
    else
        l->tail = it->lru_prev;
    it->lru_prev = it->lru_next = 0;
}

/* ------------------------------------------------------------------------ */
/* Index                                                                    */
/* ------------------------------------------------------------------------ */

static inline int item_is(const rdmx_kv_item_t *it, const void *key,
                          size_t klen)
{
    return it->klen == klen && memcmp(it->key, key, klen) == 0;
}

static rdmx_kv_item_t *ht_find(const rdmx_kv_store_t *s, uint64_t hash,
                               const void *key, size_t klen)
{
    for (int t = 0; t < 2; t++) {
        const kv_table_t *ht = &s->ht[t];
        kv_ref_t r;
        if (ht->b == NULL)
            break;
        /* buckets below s->rehash of ht[0] are empty */
        for (r = ht->b[hash & ht->mask]; r != 0;) {
            rdmx_kv_item_t *it = item_at(s, r);
            if (item_is(it, key, klen))
                return it;
            r = it->hnext;
        }
    }
    return NULL;
}

/* Start loading the first item of @hash's buckets, which the commit of a
 * SET will look up and unlink: the miss then overlaps the value's copy
 * instead of following it. (The commit finds the hash in the reserved
 * item: see item_new.) Always inlined: as a function of its own GCC 12
 * counts it as free of side effects (a prefetch is not one to GCC) and
 * drops the call, prefetch and all. */
static inline __attribute__((always_inline)) void
ht_prefetch(const rdmx_kv_store_t *s, uint64_t hash)
{
    for (int t = 0; t < 2; t++) {
        const kv_table_t *ht = &s->ht[t];
        kv_ref_t r;
        if (ht->b == NULL)
            break;
        r = ht->b[hash & ht->mask];
        /* (for writing: prefetchw where -march has it, else prefetcht0) */
        if (r != 0)
            __builtin_prefetch(item_at(s, r), 1);
    }
}

static void ht_insert(rdmx_kv_store_t *s, rdmx_kv_item_t *it, uint64_t hash)
{
    kv_table_t *ht = &s->ht[s->rehash == NO_REHASH ? 0 : 1];
    kv_ref_t *slot = &ht->b[hash & ht->mask];

    it->hnext = *slot;
    *slot = ref_of(s, it);
}

static void ht_remove(rdmx_kv_store_t *s, rdmx_kv_item_t *it, uint64_t hash)
{
    kv_ref_t r = ref_of(s, it);

    for (int t = 0; t < 2; t++) {
        kv_table_t *ht = &s->ht[t];
        kv_ref_t *pp;
        if (ht->b == NULL)
            break;
        for (pp = &ht->b[hash & ht->mask]; *pp != 0;
             pp = &item_at(s, *pp)->hnext) {
            if (*pp == r) {
                *pp = it->hnext;
                it->hnext = 0;
                return;
            }
        }
    }
}

/* Move up to @n non-empty buckets (visiting at most 16 n) of a growing
 * index to the new table, hashing each item's key again; finish the growth
 * when none are left. */
static void rehash_step(rdmx_kv_store_t *s, size_t n)
{
    kv_table_t *from = &s->ht[0], *to = &s->ht[1];
    size_t visits = 16 * n;

    if (s->rehash == NO_REHASH)
        return;
    while (n > 0 && visits-- > 0 && s->rehash <= from->mask) {
        kv_ref_t r = from->b[s->rehash], next;
        from->b[s->rehash++] = 0;
        if (r != 0)
            n--;
        for (; r != 0; r = next) {
            rdmx_kv_item_t *it = item_at(s, r);
            kv_ref_t *slot = &to->b[item_hash(s, it) & to->mask];
            next = it->hnext;
            it->hnext = *slot;
            *slot = r;
        }
    }
    if (s->rehash > from->mask) {
        free(from->b);
        *from = *to;
        to->b = NULL;
        to->mask = 0;
        s->rehash = NO_REHASH;
    }
}

/* Start growing the index once it holds more than HT_MAX_LOAD items per
 * bucket. Out of memory is not an error: chains just get longer. */
static void ht_maybe_grow(rdmx_kv_store_t *s)
{
    size_t buckets = s->ht[0].mask + 1;
    kv_ref_t *b;

    if (s->rehash != NO_REHASH || s->st.curr_items <= HT_MAX_LOAD * buckets ||
        buckets >= ((size_t)1 << HT_MAX_LOG2))
        return;
    b = calloc(2 * buckets, sizeof(*b));
    if (b == NULL)
        return;
    s->ht[1].b = b;
    s->ht[1].mask = 2 * buckets - 1;
    s->rehash = 0;
}

/* ------------------------------------------------------------------------ */
/* Expiry heap                                                              */
/* ------------------------------------------------------------------------ */

static inline uint64_t exp_of(const rdmx_kv_item_t *it)
{
    return atomic_load_explicit(&it->exptime, memory_order_relaxed);
}

static inline int is_expired(const rdmx_kv_item_t *it, uint64_t now)
{
    uint64_t e = exp_of(it);
    return e != 0 && e <= now;
}

static inline rdmx_kv_item_t *heap_item(const rdmx_kv_store_t *s, uint32_t i)
{
    return item_at(s, s->heap[i]);
}

static inline void heap_put(rdmx_kv_store_t *s, uint32_t i, rdmx_kv_item_t *it)
{
    s->heap[i] = ref_of(s, it);
    it->heap_idx = i;
}

static void heap_sift_up(rdmx_kv_store_t *s, uint32_t i)
{
    rdmx_kv_item_t *it = heap_item(s, i);
    uint64_t e = exp_of(it);

    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (exp_of(heap_item(s, parent)) <= e)
            break;
        heap_put(s, i, heap_item(s, parent));
        i = parent;
    }
    heap_put(s, i, it);
}

static void heap_sift_down(rdmx_kv_store_t *s, uint32_t i)
{
    rdmx_kv_item_t *it = heap_item(s, i);
    uint64_t e = exp_of(it);

    for (;;) {
        uint64_t c = 2 * (uint64_t)i + 1;
        if (c >= s->heap_len)
            break;
        if (c + 1 < s->heap_len && exp_of(heap_item(s, (uint32_t)c + 1)) <
                                       exp_of(heap_item(s, (uint32_t)c)))
            c++;
        if (e <= exp_of(heap_item(s, (uint32_t)c)))
            break;
        heap_put(s, i, heap_item(s, (uint32_t)c));
        i = (uint32_t)c;
    }
    heap_put(s, i, it);
}

/* Room for one more heap entry; -1 when out of memory (or at 2^31
 * entries). */
static int heap_reserve(rdmx_kv_store_t *s)
{
    kv_ref_t *h;
    uint32_t cap;

    if (s->heap_len < s->heap_cap)
        return 0;
    if (s->heap_cap >= (1u << 31))
        return -1;
    cap = s->heap_cap == 0 ? 1024 : 2 * s->heap_cap;
    h = realloc(s->heap, (size_t)cap * sizeof(*h));
    if (h == NULL)
        return -1;
    s->heap = h;
    s->heap_cap = cap;
    return 0;
}

static void heap_add(rdmx_kv_store_t *s, rdmx_kv_item_t *it) /* reserved */
{
    heap_put(s, s->heap_len++, it);
    heap_sift_up(s, it->heap_idx);
}

static void heap_del(rdmx_kv_store_t *s, rdmx_kv_item_t *it)
{
    uint32_t i = it->heap_idx;
    rdmx_kv_item_t *last = heap_item(s, --s->heap_len);

    it->heap_idx = NO_HEAP;
    if (last == it)
        return;
    heap_put(s, i, last);
    heap_sift_up(s, i);
    heap_sift_down(s, last->heap_idx);
}

/* Change the expiry of a LINKED item (heap room reserved by the caller when
 * it may be needed). */
static void set_expiry(rdmx_kv_store_t *s, rdmx_kv_item_t *it, uint64_t e)
{
    atomic_store_explicit(&it->exptime, e, memory_order_relaxed);
    if (it->heap_idx != NO_HEAP && e == 0) {
        heap_del(s, it);
    } else if (it->heap_idx != NO_HEAP) {
        heap_sift_up(s, it->heap_idx);
        heap_sift_down(s, it->heap_idx);
    } else if (e != 0) {
        heap_add(s, it);
    }
}

static uint64_t expiry_for(uint64_t ttl_ms, uint64_t now)
{
    if (ttl_ms == 0)
        return 0;
    return ttl_ms > UINT64_MAX - now ? UINT64_MAX : now + ttl_ms;
}

/* ------------------------------------------------------------------------ */
/* Items                                                                    */
/* ------------------------------------------------------------------------ */

static void item_free(rdmx_kv_store_t *s, rdmx_kv_item_t *it, uint64_t *hole_p)
{
    uint64_t hole;

    stamp_void(it);
    hole = rdmx__kv_free(&s->alloc, item_offset(s, it));
    if (hole_p != NULL)
        *hole_p = hole;
}

static void link_item(rdmx_kv_store_t *s, rdmx_kv_item_t *it, uint64_t hash)
{
    it->state = ITEM_LINKED;
    ht_insert(s, it, hash);
    list_insert_tail(s, &s->lru, it);
    if (exp_of(it) != 0)
        heap_add(s, it);
    s->st.curr_items++;
    s->st.total_items++;
    s->st.bytes += it->vlen;
    ht_maybe_grow(s);
}

/* Take a LINKED item (whose key hashes to @hash) out of the index, LRU and
 * heap; free it unless it is referenced. Returns the offset of the free
 * block it went into, or RDMX_KV_ALLOC_NONE while references remain. */
static uint64_t unlink_item(rdmx_kv_store_t *s, rdmx_kv_item_t *it,
                            uint64_t hash)
{
    uint64_t hole = RDMX_KV_ALLOC_NONE;

    ht_remove(s, it, hash);
    list_del(s, &s->lru, it);
    if (it->heap_idx != NO_HEAP)
        heap_del(s, it);
    s->st.curr_items--;
    s->st.bytes -= it->vlen;
    it->state = ITEM_UNLINKED;
    if (it->refs == 0) {
        item_free(s, it, &hole);
    } else {
        list_insert_tail(s, &s->pending, it);
        s->st.pending_items++;
        s->st.pending_bytes += it->vlen;
    }
    return hole;
}

/* Remove an expired item (key hash @hash); a get counts it itself
 * (get_expired). */
static uint64_t expire_item(rdmx_kv_store_t *s, rdmx_kv_item_t *it,
                            uint64_t hash, int by_get)
{
    if (!it->fetched)
        s->st.expired_unfetched++;
    if (!by_get)
        s->st.reclaimed++;
    return unlink_item(s, it, hash);
}

/* Remove an item to make room (an expired one counts as reclaimed). */
static uint64_t evict_item(rdmx_kv_store_t *s, rdmx_kv_item_t *it, uint64_t now)
{
    if (is_expired(it, now))
        return expire_item(s, it, item_hash(s, it), 0);
    s->st.evictions++;
    if (!it->fetched)
        s->st.evicted_unfetched++;
    return unlink_item(s, it, item_hash(s, it));
}

static inline int evictable(const rdmx_kv_item_t *it)
{
    return it->state == ITEM_LINKED && it->refs == 0;
}

/* The live item of @key, or NULL; an expired one is removed on the way
 * (counted as reclaimed). */
static rdmx_kv_item_t *lookup(rdmx_kv_store_t *s, uint64_t hash,
                              const void *key, size_t klen, uint64_t now)
{
    rdmx_kv_item_t *it;

    rehash_step(s, REHASH_STEP);
    it = ht_find(s, hash, key, klen);
    if (it != NULL && is_expired(it, now)) {
        expire_item(s, it, hash, 0);
        return NULL;
    }
    return it;
}

static inline void lru_bump(rdmx_kv_store_t *s, rdmx_kv_item_t *it)
{
    list_del(s, &s->lru, it);
    list_insert_tail(s, &s->lru, it);
}

static inline unsigned lru_epoch(uint64_t now)
{
    return (unsigned)(now >> LRU_EPOCH_SHIFT) & 0xffu;
}

/* A get, touch, incr or failed ADD used @it at @now: move it to the recent
 * end, unless it moved there in this epoch already (docs/KV.md, "LRU and
 * eviction"). A move writes its two LRU neighbours, two random items: two
 * cache misses, which a key read many times a second now pays once. */
static inline void lru_use(rdmx_kv_store_t *s, rdmx_kv_item_t *it, uint64_t now)
{
    unsigned e = lru_epoch(now);

    if (it->moved != e) {
        it->moved = e;
        lru_bump(s, it);
    }
}

/*
 * Grow the free block at @hole forwards, evicting the unreferenced items
 * that physically follow it, until it holds @size bytes; allocate them
 * there. Stops at a block it may not evict (referenced, reserved) or at the
 * end of the range. Bounded by @size / 32 evictions.
 */
static uint64_t grow_hole(rdmx_kv_store_t *s, uint64_t hole, size_t size,
                          uint64_t now)
{
    rdmx_kv_alloc_block_t b, nb;

    for (;;) {
        rdmx__kv_alloc_block(&s->alloc, hole, &b);
        if (!b.is_free)
            return RDMX_KV_ALLOC_NONE;
        if (b.usable >= size)
            return rdmx__kv_alloc_from(&s->alloc, hole, size);
        if (b.next == RDMX_KV_ALLOC_NONE)
            return RDMX_KV_ALLOC_NONE;
        rdmx__kv_alloc_block(&s->alloc, b.next, &nb);
        if (nb.is_free || !evictable(item_of_offset(s, nb.offset)))
            return RDMX_KV_ALLOC_NONE;
        evict_item(s, item_of_offset(s, nb.offset), now);
        /* it merged into our block, which keeps its offset */
    }
}

/*
 * A block of @size bytes for an item. When the allocator has none: remove
 * expired items (soonest first; also with eviction off: they are dead, not
 * evicted), then, with eviction on, evict from the LRU end —
 * each victim's hole is offered to the request, then the whole allocator,
 * then the hole is grown over its unreferenced successors. Referenced items
 * found at the LRU end are moved to the other end (they are in use). The
 * work is bounded by EVICT_VICTIMS victims, each with at most size / 32
 * successors, and EVICT_BUSY_SKIPS moves.
 */
static uint64_t block_alloc(rdmx_kv_store_t *s, size_t size, uint64_t now)
{
    uint64_t off = rdmx__kv_alloc(&s->alloc, size), hole;
    unsigned victims = 0, skips = 0;

    if (off != RDMX_KV_ALLOC_NONE)
        return off;
    while (s->heap_len > 0 && is_expired(heap_item(s, 0), now) &&
           victims < EVICT_VICTIMS) {
        rdmx_kv_item_t *it = heap_item(s, 0);
        hole = expire_item(s, it, item_hash(s, it), 0);
        victims++;
        if (hole == RDMX_KV_ALLOC_NONE) /* referenced: freed at release */
            continue;
        off = rdmx__kv_alloc_from(&s->alloc, hole, size);
        if (off == RDMX_KV_ALLOC_NONE)
            off = rdmx__kv_alloc(&s->alloc, size);
        if (off != RDMX_KV_ALLOC_NONE)
            return off;
    }
    if (s->eviction == RDMX_KV_EVICT_NONE)
        return RDMX_KV_ALLOC_NONE;
    victims = 0;
    while (s->lru.head != 0 && victims < EVICT_VICTIMS) {
        rdmx_kv_item_t *it = item_at(s, s->lru.head);
        if (it->refs > 0) {
            if (++skips > EVICT_BUSY_SKIPS)
                break;
            lru_bump(s, it);
            continue;
        }
        hole = evict_item(s, it, now);
        victims++;
        off = rdmx__kv_alloc_from(&s->alloc, hole, size);
        if (off == RDMX_KV_ALLOC_NONE)
            off = rdmx__kv_alloc(&s->alloc, size);
        if (off == RDMX_KV_ALLOC_NONE)
            off = grow_hole(s, hole, size, now);
        if (off != RDMX_KV_ALLOC_NONE)
            return off;
    }
    return RDMX_KV_ALLOC_NONE;
}

static rdmx_status_t check_key(const rdmx_kv_store_t *s, const void *key,
                               size_t klen, const char *what)
{
    if (key == NULL || klen == 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv %s: empty key", what);
    if (klen > s->max_key)
        return rdmx__error(RDMX_ERR_TOO_BIG,
                           "kv %s: key of %zu bytes exceeds max_key %zu", what,
                           klen, s->max_key);
    return RDMX_OK;
}

/* A new RESERVED item on s->pending with @vlen bytes of value space, for
 * @key, whose hash is @hash. */
static rdmx_status_t item_new(rdmx_kv_store_t *s, const void *key, size_t klen,
                              uint64_t hash, size_t vlen, uint64_t now,
                              rdmx_kv_item_t **item_p)
{
    uint64_t off = block_alloc(s, ITEM_HDR + klen + vlen, now);
    rdmx_kv_item_t *it;

    if (off == RDMX_KV_ALLOC_NONE)
        return rdmx__error(
            RDMX_ERR_NO_MEMORY, "kv: no room for a %zu-byte value (%s)", vlen,
            s->eviction == RDMX_KV_EVICT_NONE ? "eviction off"
                                              : "nothing evictable fits");
    it = item_of_offset(s, off);
    cas_set(it, 0);
    atomic_init(&it->exptime, 0);
    /* Until it is linked (which sets hnext), the field keeps what the
     * commit needs first: the key's hash, so that a SET hashes its key once
     * (SipHash: ~165 instructions for a short key). Its low 32 bits are enough:
     * every use masks the hash with an index's mask, and an index has at most
     * 2^HT_MAX_LOG2 buckets. */
    it->hnext = (kv_ref_t)hash;
    it->vlen = (uint32_t)vlen;
    it->flags = 0;
    it->heap_idx = NO_HEAP;
    it->refs = 0;
    it->state = ITEM_RESERVED;
    it->fetched = 0;
    it->moved = lru_epoch(now); /* (linked at the recent end) */
    it->klen = (uint16_t)klen;
    memcpy(it->key, key, klen);
    list_insert_tail(s, &s->pending, it);
    s->st.reserved_items++;
    *item_p = it;
    return RDMX_OK;
}

/* Free a RESERVED item. */
static void drop_reserved(rdmx_kv_store_t *s, rdmx_kv_item_t *it)
{
    list_del(s, &s->pending, it);
    s->st.reserved_items--;
    item_free(s, it, NULL);
}

/* ------------------------------------------------------------------------ */
/* API                                                                      */
/* ------------------------------------------------------------------------ */

rdmx_status_t rdmx__kv_store_create(void *mem, size_t size,
                                    const rdmx_kv_store_params_t *params,
                                    rdmx_kv_store_t **store_p)
{
    rdmx_kv_store_t *s;
    rdmx_status_t status;
    size_t buckets;
    unsigned log2;
    int rc;

    (void)pthread_once(&stamp_once, stamp_init);
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        status = rdmx__error(RDMX_ERR_NO_MEMORY, "kv store: out of memory");
        goto err;
    }
    s->max_key = RDMX_KV_STORE_DEFAULT_MAX_KEY;
    s->max_value = RDMX_KV_STORE_DEFAULT_MAX_VALUE;
    s->eviction = RDMX_KV_EVICT_LRU;
    if (params != NULL) {
        if (params->field_mask & RDMX_KV_STORE_FIELD_MAX_KEY)
            s->max_key = params->max_key;
        if (params->field_mask & RDMX_KV_STORE_FIELD_MAX_VALUE)
            s->max_value = params->max_value;
        if (params->field_mask & RDMX_KV_STORE_FIELD_EVICTION)
            s->eviction = params->eviction;
    }
    if (s->max_key == 0 || s->max_key > RDMX_KV_STORE_MAX_KEY_LIMIT ||
        (s->eviction != RDMX_KV_EVICT_LRU &&
         s->eviction != RDMX_KV_EVICT_NONE)) {
        status = rdmx__error(
            RDMX_ERR_INVALID, "kv store: max_key %zu (1..%u) or eviction %d",
            s->max_key, RDMX_KV_STORE_MAX_KEY_LIMIT, (int)s->eviction);
        goto err_free_store;
    }
    status = rdmx__kv_alloc_init(&s->alloc, mem, size);
    if (status != RDMX_OK)
        goto err_free_store;
    s->base = mem;
    s->size = size;
    /* a bucket per 4 KiB of range, within [2^10, 2^20]: growth does the
     * rest, incrementally */
    for (log2 = HT_MIN_LOG2; log2 < 20 && ((size_t)4096 << log2) < size; log2++)
        ;
    buckets = (size_t)1 << log2;
    s->ht[0].b = calloc(buckets, sizeof(*s->ht[0].b));
    if (s->ht[0].b == NULL) {
        status = rdmx__error(RDMX_ERR_NO_MEMORY, "kv store: no index");
        goto err_free_store;
    }
    s->ht[0].mask = buckets - 1;
    s->rehash = NO_REHASH;
    random_words(s->seed, 2);
    s->st.limit_maxbytes = size;
    /* Adaptive: the lock is held for a lookup and a few list updates
     * (well under a microsecond), so a worker that finds it taken spins a
     * little before it sleeps; a plain mutex slept at once, and the holder
     * then woke it with a system call (docs/KV.md, "Locking"). */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    rc = pthread_mutex_init(&s->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    if (rc != 0) {
        status = rdmx__error(RDMX_ERR_NO_RESOURCE, "kv store: mutex");
        goto err_free_index;
    }
    *store_p = s;
    return RDMX_OK;

err_free_index:
    free(s->ht[0].b);
err_free_store:
    free(s);
err:
    return status;
}

void rdmx__kv_store_destroy(rdmx_kv_store_t *s)
{
    if (s == NULL)
        return;
    /* the items live in the caller's range: nothing to free per item */
    free(s->ht[0].b);
    free(s->ht[1].b);
    free(s->heap);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

rdmx_status_t rdmx__kv_store_get(rdmx_kv_store_t *s, const void *key,
                                 size_t klen, uint64_t now_ms,
                                 rdmx_kv_item_t **item_p)
{
    rdmx_status_t status = check_key(s, key, klen, "get");
    uint64_t hash;
    rdmx_kv_item_t *it;

    if (status != RDMX_OK)
        return status;
    hash = rdmx__kv_siphash(s->seed, key, klen);
    pthread_mutex_lock(&s->lock);
    s->st.cmd_get++;
    it = ht_find(s, hash, key, klen);
    rehash_step(s, REHASH_STEP);
    if (it != NULL && is_expired(it, now_ms)) {
        s->st.get_expired++;
        expire_item(s, it, hash, 1);
        it = NULL;
    }
    if (it == NULL) {
        s->st.get_misses++;
        pthread_mutex_unlock(&s->lock);
        return RDMX_ERR_NOT_FOUND;
    }
    if (it->refs == ITEM_REFS_MAX) {
        pthread_mutex_unlock(&s->lock);
        return rdmx__error(RDMX_ERR_NO_RESOURCE,
                           "kv get: %u references held on one item",
                           ITEM_REFS_MAX);
    }
    s->st.get_hits++;
    it->refs++;
    it->fetched = 1;
    lru_use(s, it, now_ms);
    pthread_mutex_unlock(&s->lock);
    *item_p = it;
    return RDMX_OK;
}

void rdmx__kv_store_release(rdmx_kv_store_t *s, rdmx_kv_item_t *it)
{
    pthread_mutex_lock(&s->lock);
    if (it->refs == 0 || it->state == ITEM_RESERVED) { /* not from a get */
        pthread_mutex_unlock(&s->lock);
        rdmx_warn("kv: release of an item that holds no reference");
        return;
    }
    it->refs--;
    if (it->refs == 0 && it->state == ITEM_UNLINKED) {
        list_del(s, &s->pending, it);
        s->st.pending_items--;
        s->st.pending_bytes -= it->vlen;
        item_free(s, it, NULL);
    }
    pthread_mutex_unlock(&s->lock);
}

void *rdmx__kv_item_value(const rdmx_kv_store_t *s, const rdmx_kv_item_t *it)
{
    (void)s;
    return item_value(it);
}

uint64_t rdmx__kv_item_offset(const rdmx_kv_store_t *s,
                              const rdmx_kv_item_t *it)
{
    return (uint64_t)((const char *)item_value(it) - s->base);
}

size_t rdmx__kv_item_length(const rdmx_kv_item_t *it)
{
    return it->vlen;
}

uint32_t rdmx__kv_item_flags(const rdmx_kv_item_t *it)
{
    return it->flags;
}

uint64_t rdmx__kv_item_cas(const rdmx_kv_item_t *it)
{
    return cas_of(it);
}

uint64_t rdmx__kv_item_stamp(const rdmx_kv_item_t *it)
{
    return __atomic_load_n(&it->stamp, __ATOMIC_RELAXED);
}

uint64_t rdmx__kv_item_stamp_offset(const rdmx_kv_store_t *s,
                                    const rdmx_kv_item_t *it)
{
    return (uint64_t)((const char *)&it->stamp - s->base);
}

uint64_t rdmx__kv_item_expiry(const rdmx_kv_item_t *it)
{
    return exp_of(it);
}

const void *rdmx__kv_item_key(const rdmx_kv_item_t *it, size_t *klen_p)
{
    *klen_p = it->klen;
    return it->key;
}

static rdmx_status_t reserve_locked(rdmx_kv_store_t *s, const void *key,
                                    size_t klen, uint64_t hash, size_t vlen,
                                    uint64_t now, rdmx_kv_item_t **item_p)
{
    s->st.cmd_set++;
    rehash_step(s, REHASH_STEP);
    if (vlen > s->max_value)
        return rdmx__error(RDMX_ERR_TOO_BIG,
                           "kv reserve: value of %zu bytes exceeds "
                           "max_value %zu",
                           vlen, s->max_value);
    if (vlen > ITEM_MAX_VALUE || vlen + RDMX_KV_ALLOC_HDR + ITEM_HDR + klen >
                                     s->alloc.used_bytes + s->alloc.free_bytes)
        return rdmx__error(RDMX_ERR_TOO_BIG,
                           "kv reserve: value of %zu bytes exceeds the "
                           "memory (%zu bytes)",
                           vlen, s->size);
    return item_new(s, key, klen, hash, vlen, now, item_p);
}

rdmx_status_t rdmx__kv_store_reserve(rdmx_kv_store_t *s, const void *key,
                                     size_t klen, size_t vlen, uint64_t now_ms,
                                     rdmx_kv_item_t **item_p)
{
    rdmx_status_t status = check_key(s, key, klen, "reserve");
    uint64_t hash;

    if (status != RDMX_OK)
        return status;
    hash = rdmx__kv_siphash(s->seed, key, klen);
    pthread_mutex_lock(&s->lock);
    status = reserve_locked(s, key, klen, hash, vlen, now_ms, item_p);
    if (status == RDMX_OK)
        ht_prefetch(s, hash);
    pthread_mutex_unlock(&s->lock);
    return status;
}

static rdmx_status_t commit_locked(rdmx_kv_store_t *s, rdmx_kv_item_t *it,
                                   rdmx_kv_store_mode_t mode,
                                   uint64_t cas_expected, uint32_t flags,
                                   uint64_t ttl_ms, uint64_t now,
                                   uint64_t *cas_p)
{
    rdmx_kv_item_t *old;
    rdmx_status_t status = RDMX_OK;
    uint64_t exptime = expiry_for(ttl_ms, now), hash;

    if (it == NULL || it->state != ITEM_RESERVED)
        return rdmx__error(RDMX_ERR_INVALID, "kv commit: not a reserved item");
    hash = it->hnext; /* (its key's, since item_new) */
    old = lookup(s, hash, it->key, it->klen, now);
    switch (mode) {
    case RDMX_KV_STORE_SET:
        break;
    case RDMX_KV_STORE_ADD:
        if (old != NULL) {
            lru_use(s, old, now); /* as memcached: a failed add bumps */
            status = RDMX_ERR_EXISTS;
        }
        break;
    case RDMX_KV_STORE_REPLACE:
        if (old == NULL)
            status = RDMX_ERR_NOT_FOUND;
        break;
    case RDMX_KV_STORE_CAS:
        if (old == NULL) {
            s->st.cas_misses++;
            status = RDMX_ERR_NOT_FOUND;
        } else if (cas_of(old) != cas_expected) {
            s->st.cas_badval++;
            status = RDMX_ERR_EXISTS;
        } else {
            s->st.cas_hits++;
        }
        break;
    default:
        status = rdmx__error(RDMX_ERR_INVALID, "kv commit: mode %d", (int)mode);
        break;
    }
    if (status == RDMX_OK && exptime != 0 && heap_reserve(s) != 0)
        status = rdmx__error(RDMX_ERR_NO_MEMORY,
                             "kv commit: no heap for the expiry index");
    if (status != RDMX_OK) {
        drop_reserved(s, it);
        return status;
    }
    list_del(s, &s->pending, it);
    s->st.reserved_items--;
    it->flags = flags;
    cas_set(it, ++s->last_cas);
    atomic_store_explicit(&it->exptime, exptime, memory_order_relaxed);
    if (old != NULL)
        unlink_item(s, old, hash); /* same key */
    link_item(s, it, hash);
    if (cas_p != NULL)
        *cas_p = cas_of(it);
    return RDMX_OK;
}

rdmx_status_t rdmx__kv_store_commit(rdmx_kv_store_t *s, rdmx_kv_item_t *item,
                                    rdmx_kv_store_mode_t mode,
                                    uint64_t cas_expected, uint32_t flags,
                                    uint64_t ttl_ms, uint64_t now_ms,
                                    uint64_t *cas_p)
{
    rdmx_status_t status;

    pthread_mutex_lock(&s->lock);
    status = commit_locked(s, item, mode, cas_expected, flags, ttl_ms, now_ms,
                           cas_p);
    pthread_mutex_unlock(&s->lock);
    return status;
}

void rdmx__kv_store_abort(rdmx_kv_store_t *s, rdmx_kv_item_t *item)
{
    pthread_mutex_lock(&s->lock);
    if (item != NULL && item->state == ITEM_RESERVED)
        drop_reserved(s, item);
    pthread_mutex_unlock(&s->lock);
}

rdmx_status_t rdmx__kv_store_set(rdmx_kv_store_t *s, const void *key,
                                 size_t klen, const void *value, size_t vlen,
                                 rdmx_kv_store_mode_t mode,
                                 uint64_t cas_expected, uint32_t flags,
                                 uint64_t ttl_ms, uint64_t now_ms,
                                 uint64_t *cas_p)
{
    rdmx_status_t status = check_key(s, key, klen, "set");
    rdmx_kv_item_t *it = NULL; /* (set on RDMX_OK; GCC -O3 cannot see it) */
    uint64_t hash;

    if (status != RDMX_OK)
        return status;
    if (value == NULL && vlen != 0)
        return rdmx__error(RDMX_ERR_INVALID, "kv set: no value");
    hash = rdmx__kv_siphash(s->seed, key, klen);
    pthread_mutex_lock(&s->lock);
    status = reserve_locked(s, key, klen, hash, vlen, now_ms, &it);
    if (status == RDMX_OK) {
        if (vlen >= RDMX_KV_STREAM_MIN)
            rdmx__copy_stream(item_value(it), value, vlen);
        else if (vlen != 0)
            memcpy(item_value(it), value, vlen);
        status = commit_locked(s, it, mode, cas_expected, flags, ttl_ms, now_ms,
                               cas_p);
    }
    pthread_mutex_unlock(&s->lock);
    return status;
}

rdmx_status_t rdmx__kv_store_delete(rdmx_kv_store_t *s, const void *key,
                                    size_t klen, uint64_t cas_expected,
                                    uint64_t now_ms)
{
    rdmx_status_t status = check_key(s, key, klen, "delete");
    uint64_t hash;
    rdmx_kv_item_t *it;

    if (status != RDMX_OK)
        return status;
    hash = rdmx__kv_siphash(s->seed, key, klen);
    pthread_mutex_lock(&s->lock);
    it = lookup(s, hash, key, klen, now_ms);
    if (it == NULL) {
        s->st.delete_misses++;
        status = RDMX_ERR_NOT_FOUND;
    } else if (cas_expected != 0 && cas_of(it) != cas_expected) {
        status = RDMX_ERR_EXISTS;
    } else {
        s->st.delete_hits++;
        unlink_item(s, it, hash);
    }
    pthread_mutex_unlock(&s->lock);
    return status;
}

rdmx_status_t rdmx__kv_store_touch(rdmx_kv_store_t *s, const void *key,
                                   size_t klen, uint64_t ttl_ms,
                                   uint64_t now_ms)
{
    rdmx_status_t status = check_key(s, key, klen, "touch");
    uint64_t hash;
    uint64_t exptime = expiry_for(ttl_ms, now_ms);
    rdmx_kv_item_t *it;

    if (status != RDMX_OK)
        return status;
    hash = rdmx__kv_siphash(s->seed, key, klen);
    pthread_mutex_lock(&s->lock);
    s->st.cmd_touch++;
    it = lookup(s, hash, key, klen, now_ms);
    if (it == NULL) {
        s->st.touch_misses++;
        status = RDMX_ERR_NOT_FOUND;
    } else if (exptime != 0 && it->heap_idx == NO_HEAP &&
               heap_reserve(s) != 0) {
        status = rdmx__error(RDMX_ERR_NO_MEMORY,
                             "kv touch: no heap for the expiry index");
    } else {
        s->st.touch_hits++;
        set_expiry(s, it, exptime);
        lru_use(s, it, now_ms);
    }
    pthread_mutex_unlock(&s->lock);
    return status;
}

rdmx_status_t rdmx__kv_store_exists(rdmx_kv_store_t *s, const void *key,
                                    size_t klen, uint64_t now_ms)
{
    rdmx_status_t status = check_key(s, key, klen, "exists");
    uint64_t hash;

    if (status != RDMX_OK)
        return status;
    hash = rdmx__kv_siphash(s->seed, key, klen);
    pthread_mutex_lock(&s->lock);
    if (lookup(s, hash, key, klen, now_ms) == NULL)
        status = RDMX_ERR_NOT_FOUND;
    pthread_mutex_unlock(&s->lock);
    return status;
}

/* memcached's rule: 1..20 decimal digits, at most 2^64 - 1. */
static int parse_u64(const unsigned char *p, size_t len, uint64_t *v_p)
{
    uint64_t v = 0;

    if (len == 0 || len > 20)
        return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned)p[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *v_p = v;
    return 0;
}

static size_t format_u64(uint64_t v, char buf[20])
{
    char tmp[20];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

rdmx_status_t rdmx__kv_store_incr(rdmx_kv_store_t *s, const void *key,
                                  size_t klen, uint64_t delta, int decr,
                                  uint64_t now_ms, uint64_t *value_p)
{
    rdmx_status_t status = check_key(s, key, klen, decr ? "decr" : "incr");
    uint64_t hash, v;
    rdmx_kv_item_t *it, *nit;
    char digits[20];
    size_t n;

    if (status != RDMX_OK)
        return status;
    hash = rdmx__kv_siphash(s->seed, key, klen);
    pthread_mutex_lock(&s->lock);
    it = lookup(s, hash, key, klen, now_ms);
    if (it == NULL) {
        if (decr)
            s->st.decr_misses++;
        else
            s->st.incr_misses++;
        status = RDMX_ERR_NOT_FOUND;
        goto out_unlock;
    }
    if (parse_u64(item_value(it), it->vlen, &v) != 0) {
        status = rdmx__error(RDMX_ERR_INVALID,
                             "kv %s: value is not a decimal unsigned 64-bit "
                             "number",
                             decr ? "decr" : "incr");
        goto out_unlock;
    }
    if (decr) {
        v = v < delta ? 0 : v - delta;
        s->st.decr_hits++;
    } else {
        v += delta; /* wraps at 2^64 */
        s->st.incr_hits++;
    }
    n = format_u64(v, digits);
    it->fetched = 1;
    if (it->refs == 0 &&
        ITEM_HDR + it->klen + n <=
            rdmx__kv_alloc_usable_size(&s->alloc, item_offset(s, it))) {
        /* nobody reads it: rewrite in place */
        stamp_void(it); /* a mapped reader may be copying it */
        memcpy(item_value(it), digits, n);
        rdmx_fence_release();
        s->st.bytes += n;
        s->st.bytes -= it->vlen;
        it->vlen = (uint32_t)n;
        cas_set(it, ++s->last_cas);
        lru_use(s, it, now_ms);
    } else {
        /* a reader holds the old value: write a new item. Pin the old one
         * so that making room cannot evict it. */
        it->refs++;
        status = item_new(s, key, klen, hash, n, now_ms, &nit);
        it->refs--;
        if (status != RDMX_OK)
            goto out_unlock;
        memcpy(item_value(nit), digits, n);
        list_del(s, &s->pending, nit);
        s->st.reserved_items--;
        nit->flags = it->flags;
        cas_set(nit, ++s->last_cas);
        nit->fetched = 1;
        atomic_store_explicit(&nit->exptime, exp_of(it), memory_order_relaxed);
        unlink_item(s, it, hash); /* its heap slot is reused */
        link_item(s, nit, hash);
    }
    if (value_p != NULL)
        *value_p = v;
out_unlock:
    pthread_mutex_unlock(&s->lock);
    return status;
}

void rdmx__kv_store_flush(rdmx_kv_store_t *s)
{
    pthread_mutex_lock(&s->lock);
    s->st.cmd_flush++;
    while (s->lru.head != 0) {
        rdmx_kv_item_t *it = item_at(s, s->lru.head);
        unlink_item(s, it, item_hash(s, it));
    }
    pthread_mutex_unlock(&s->lock);
}

size_t rdmx__kv_store_reclaim(rdmx_kv_store_t *s, uint64_t now_ms,
                              size_t max_items)
{
    size_t n = 0;

    pthread_mutex_lock(&s->lock);
    rehash_step(s, REHASH_RECLAIM);
    while (n < max_items && s->heap_len > 0 &&
           is_expired(heap_item(s, 0), now_ms)) {
        rdmx_kv_item_t *it = heap_item(s, 0);
        expire_item(s, it, item_hash(s, it), 0);
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

size_t rdmx__kv_store_prefix_hits(rdmx_kv_store_t *s, const void *const *keys,
                                  const size_t *klens, size_t n,
                                  uint64_t now_ms)
{
    size_t i;

    pthread_mutex_lock(&s->lock);
    for (i = 0; i < n; i++) {
        uint64_t hash;
        if (keys[i] == NULL || klens[i] == 0 || klens[i] > s->max_key)
            break;
        hash = rdmx__kv_siphash(s->seed, keys[i], klens[i]);
        if (lookup(s, hash, keys[i], klens[i], now_ms) == NULL)
            break;
    }
    pthread_mutex_unlock(&s->lock);
    return i;
}

void rdmx__kv_store_stats(rdmx_kv_store_t *s, rdmx_kv_store_stats_t *stats_p)
{
    rdmx_kv_alloc_stats_t as;

    pthread_mutex_lock(&s->lock);
    *stats_p = s->st;
    rdmx__kv_alloc_stats(&s->alloc, &as);
    stats_p->hash_power_level =
        (uint64_t)__builtin_ctzll((unsigned long long)s->ht[0].mask + 1);
    stats_p->hash_is_expanding = s->rehash != NO_REHASH;
    pthread_mutex_unlock(&s->lock);
    stats_p->alloc_capacity = as.capacity;
    stats_p->alloc_used_bytes = as.used_bytes;
    stats_p->alloc_free_bytes = as.free_bytes;
    stats_p->alloc_largest_free = as.largest_free;
    stats_p->alloc_blocks = as.used_blocks;
    stats_p->alloc_free_blocks = as.free_blocks;
}

#define STORE_FAIL(...)                                                        \
    do {                                                                       \
        status =                                                               \
            rdmx__error(RDMX_ERR_INTERNAL, "kv store check: " __VA_ARGS__);    \
        goto out_unlock;                                                       \
    } while (0)

rdmx_status_t rdmx__kv_store_check(rdmx_kv_store_t *s)
{
    rdmx_status_t status;
    uint64_t n = 0, bytes = 0, reserved = 0, pending = 0, pbytes = 0;
    uint64_t ttl = 0, blocks = 0, limit;
    kv_ref_t r, prev;
    size_t i;

    pthread_mutex_lock(&s->lock);
    status = rdmx__kv_alloc_check(&s->alloc);
    if (status != RDMX_OK)
        goto out_unlock;
    /* every list walk is bounded by the blocks that exist */
    limit = s->alloc.used_blocks + 1;
    for (prev = 0, r = s->lru.head; r != 0;
         prev = r, r = item_at(s, r)->lru_next) {
        rdmx_kv_item_t *it = item_at(s, r);
        rdmx_kv_alloc_block_t b;
        if (n + 1 >= limit)
            STORE_FAIL("LRU longer than the blocks allocated");
        if (it->lru_prev != prev)
            STORE_FAIL("LRU links broken");
        if (it->state != ITEM_LINKED)
            STORE_FAIL("item in the LRU in state %d", it->state);
        if (ht_find(s, item_hash(s, it), it->key, it->klen) != it)
            STORE_FAIL("LRU item not found in the index");
        rdmx__kv_alloc_block(&s->alloc, item_offset(s, it), &b);
        if (b.is_free || b.usable < ITEM_HDR + it->klen + it->vlen)
            STORE_FAIL("block of an item is wrong");
        if ((exp_of(it) != 0) != (it->heap_idx != NO_HEAP))
            STORE_FAIL("expiry and heap membership disagree");
        if (it->heap_idx != NO_HEAP)
            ttl++;
        n++;
        bytes += it->vlen;
    }
    if (s->lru.tail != prev)
        STORE_FAIL("LRU tail wrong");
    for (prev = 0, r = s->pending.head; r != 0;
         prev = r, r = item_at(s, r)->lru_next) {
        rdmx_kv_item_t *it = item_at(s, r);
        if (reserved + pending + 1 >= limit)
            STORE_FAIL("pending list longer than the blocks allocated");
        if (it->lru_prev != prev)
            STORE_FAIL("pending links broken");
        if (it->state == ITEM_RESERVED) {
            reserved++;
        } else if (it->state == ITEM_UNLINKED && it->refs > 0) {
            pending++;
            pbytes += it->vlen;
        } else {
            STORE_FAIL("pending item in state %d refs %u", it->state,
                       (unsigned)it->refs);
        }
        if (it->heap_idx != NO_HEAP)
            STORE_FAIL("pending item in the expiry heap");
    }
    if (s->pending.tail != prev)
        STORE_FAIL("pending tail wrong");
    if (n != s->st.curr_items || bytes != s->st.bytes ||
        reserved != s->st.reserved_items || pending != s->st.pending_items ||
        pbytes != s->st.pending_bytes)
        STORE_FAIL("counters: items %llu/%llu bytes %llu/%llu",
                   (unsigned long long)n, (unsigned long long)s->st.curr_items,
                   (unsigned long long)bytes, (unsigned long long)s->st.bytes);
    /* every index entry is on the LRU (counted above) */
    for (int t = 0; t < 2; t++) {
        if (s->ht[t].b == NULL)
            continue;
        for (i = 0; i <= s->ht[t].mask; i++) {
            for (r = s->ht[t].b[i]; r != 0; r = item_at(s, r)->hnext) {
                if (item_at(s, r)->state != ITEM_LINKED)
                    STORE_FAIL("unlinked item in the index");
                if (++blocks > n)
                    STORE_FAIL("index holds more items than the LRU");
            }
        }
    }
    if (blocks != n)
        STORE_FAIL("index holds %llu items, LRU %llu",
                   (unsigned long long)blocks, (unsigned long long)n);
    if (ttl != s->heap_len)
        STORE_FAIL("heap holds %u, %llu items have an expiry", s->heap_len,
                   (unsigned long long)ttl);
    for (i = 0; i < s->heap_len; i++) {
        if (heap_item(s, (uint32_t)i)->heap_idx != i ||
            (i > 0 && exp_of(heap_item(s, (uint32_t)(i - 1) / 2)) >
                          exp_of(heap_item(s, (uint32_t)i))))
            STORE_FAIL("heap order broken at %zu", i);
    }
    if (s->alloc.used_blocks != n + reserved + pending)
        STORE_FAIL("%llu blocks allocated for %llu items",
                   (unsigned long long)s->alloc.used_blocks,
                   (unsigned long long)(n + reserved + pending));
    status = RDMX_OK;
out_unlock:
    pthread_mutex_unlock(&s->lock);
    return status;
}
