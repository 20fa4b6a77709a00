/*
 * TLSF allocator over a caller-owned range; see alloc.h for the layout.
 *
 * Header word `info`: span (a multiple of the granule, at least 16) | flags:
 *   bit 0  this block is free
 *   bit 1  the physically previous block is free (its footer is valid)
 *   bits 56-63 a constant magic, so that freeing an address that is not a
 *   block start is (almost always) refused instead of corrupting the lists.
 * The sentinel at the end has span 0 and is never free.
 */
#include "kv/alloc.h"

#include "core/upper.h"

#include <string.h>

#define BLK_FREE       1ull
#define BLK_PREV_FREE  2ull
#define BLK_MAGIC      (0xa5ull << 56)
#define BLK_MAGIC_MASK (0xffull << 56)
#define BLK_FLAGS      (3ull | BLK_MAGIC_MASK)
#define HDR            ((uint64_t)RDMX_KV_ALLOC_HDR)
#define SCAN_FALLBACK  16 /* blocks of the exact class tried on a miss */

struct rdmx__kv_blk {
    uint64_t info; /* span | flags */
    /* free blocks only, in the payload: */
    rdmx__kv_blk_t *next_free;
    rdmx__kv_blk_t *prev_free;
};

/* The smallest span: a free block's header, links and footer. */
#define MIN_FREE_SPAN (sizeof(rdmx__kv_blk_t) + sizeof(uint64_t))

static inline uint64_t granule(const rdmx_kv_alloc_t *a)
{
    return 1ull << a->shift;
}

static inline uint64_t min_span(const rdmx_kv_alloc_t *a)
{
    return granule(a) < MIN_FREE_SPAN ? MIN_FREE_SPAN : granule(a);
}

static inline uint64_t small_span(const rdmx_kv_alloc_t *a)
{
    return (uint64_t)RDMX__KV_SL_COUNT << a->shift;
}

static inline uint64_t blk_span(const rdmx__kv_blk_t *b)
{
    return b->info & ~BLK_FLAGS;
}

static inline int blk_is_free(const rdmx__kv_blk_t *b)
{
    return (b->info & BLK_FREE) != 0;
}

static inline rdmx__kv_blk_t *blk_next(const rdmx__kv_blk_t *b)
{
    return (rdmx__kv_blk_t *)((char *)b + blk_span(b));
}

/* The previous block, through its footer; only when BLK_PREV_FREE. */
static inline rdmx__kv_blk_t *blk_prev_free(const rdmx__kv_blk_t *b)
{
    uint64_t span;
    memcpy(&span, (const char *)b - sizeof(span), sizeof(span));
    return (rdmx__kv_blk_t *)((char *)b - span);
}

static inline void blk_set_footer(rdmx__kv_blk_t *b)
{
    uint64_t span = blk_span(b);
    memcpy((char *)b + span - sizeof(span), &span, sizeof(span));
}

static inline uint64_t blk_offset(const rdmx_kv_alloc_t *a,
                                  const rdmx__kv_blk_t *b)
{
    return (uint64_t)((const char *)b - a->base) + HDR;
}

static inline unsigned fls64(uint64_t x) /* x != 0 */
{
    return 63u - (unsigned)__builtin_clzll(x);
}

/* Span needed for @size usable bytes, or 0 if it cannot be represented. */
static uint64_t span_for(const rdmx_kv_alloc_t *a, size_t size)
{
    uint64_t s = (uint64_t)size;
    if (s > (UINT64_MAX >> 9))
        return 0;
    s = (s + HDR + granule(a) - 1) & ~(granule(a) - 1);
    return s < min_span(a) ? min_span(a) : s;
}

/* The class a block of @span belongs to. */
static void mapping_insert(const rdmx_kv_alloc_t *a, uint64_t span,
                           unsigned *fl, unsigned *sl)
{
    if (span < small_span(a)) {
        *fl = 0;
        *sl = (unsigned)(span >> a->shift);
    } else {
        unsigned f = fls64(span);
        *sl = (unsigned)(span >> (f - RDMX__KV_SL_LOG2)) ^ RDMX__KV_SL_COUNT;
        *fl = f - (RDMX__KV_SL_LOG2 + a->shift) + 1;
    }
}

/* The first class whose every block holds @span: round up to the next
 * class boundary (exact below 32 granules). */
static void mapping_search(const rdmx_kv_alloc_t *a, uint64_t span,
                           unsigned *fl, unsigned *sl)
{
    if (span >= small_span(a))
        span += (1ull << (fls64(span) - RDMX__KV_SL_LOG2)) - 1;
    mapping_insert(a, span, fl, sl);
}

static void list_insert(rdmx_kv_alloc_t *a, rdmx__kv_blk_t *b)
{
    unsigned fl, sl;
    rdmx__kv_blk_t *head;

    mapping_insert(a, blk_span(b), &fl, &sl);
    head = a->heads[fl][sl];
    b->next_free = head;
    b->prev_free = NULL;
    if (head != NULL)
        head->prev_free = b;
    a->heads[fl][sl] = b;
    a->fl_bitmap |= 1ull << fl;
    a->sl_bitmap[fl] |= 1u << sl;
}

static void list_remove(rdmx_kv_alloc_t *a, rdmx__kv_blk_t *b)
{
    unsigned fl, sl;

    mapping_insert(a, blk_span(b), &fl, &sl);
    if (b->prev_free != NULL)
        b->prev_free->next_free = b->next_free;
    else
        a->heads[fl][sl] = b->next_free;
    if (b->next_free != NULL)
        b->next_free->prev_free = b->prev_free;
    if (a->heads[fl][sl] == NULL) {
        a->sl_bitmap[fl] &= ~(1u << sl);
        if (a->sl_bitmap[fl] == 0)
            a->fl_bitmap &= ~(1ull << fl);
    }
}

/* Make @b (span and BLK_PREV_FREE already right) a free block: flags,
 * footer, the next block's PREV_FREE, its class list, the counters. */
static void make_free(rdmx_kv_alloc_t *a, rdmx__kv_blk_t *b)
{
    b->info |= BLK_FREE;
    blk_set_footer(b);
    blk_next(b)->info |= BLK_PREV_FREE;
    list_insert(a, b);
    a->free_bytes += blk_span(b);
    a->free_blocks++;
}

/* Take the free block @b out of its list and the free counters. */
static void take_free(rdmx_kv_alloc_t *a, rdmx__kv_blk_t *b)
{
    list_remove(a, b);
    a->free_bytes -= blk_span(b);
    a->free_blocks--;
}

/* Allocate @span bytes from the start of the free block @b: split off the
 * remainder as a new free block when it is at least one granule. */
static uint64_t use_block(rdmx_kv_alloc_t *a, rdmx__kv_blk_t *b, uint64_t span)
{
    uint64_t have = blk_span(b);

    take_free(a, b);
    if (have - span >= min_span(a)) {
        rdmx__kv_blk_t *rest = (rdmx__kv_blk_t *)((char *)b + span);
        rest->info = (have - span) | BLK_MAGIC; /* prev (b) is used */
        b->info = span | (b->info & BLK_PREV_FREE) | BLK_MAGIC;
        make_free(a, rest);
    } else {
        b->info &= ~BLK_FREE;
        blk_next(b)->info &= ~BLK_PREV_FREE;
        span = have;
    }
    a->used_bytes += span;
    a->used_blocks++;
    return blk_offset(a, b);
}

rdmx_status_t rdmx__kv_alloc_init(rdmx_kv_alloc_t *a, void *base, size_t size)
{
    uintptr_t lo, hi, first, end;
    rdmx__kv_blk_t *b, *sentinel;

    if (base == NULL || size > UINTPTR_MAX - (uintptr_t)base)
        return rdmx__error(RDMX_ERR_INVALID, "kv alloc: bad range %p + %zu",
                           base, size);
    if (size < 256)
        return rdmx__error(RDMX_ERR_INVALID,
                           "kv alloc: range of %zu bytes is too small", size);
    memset(a, 0, sizeof(*a));
    /* the smallest granule that numbers every block start in 32 bits */
    a->shift = RDMX_KV_ALLOC_MIN_SHIFT;
    while ((size >> a->shift) >= RDMX_KV_ALLOC_MAX_REF)
        a->shift++;
    lo = (uintptr_t)base;
    hi = lo + size;
    /* block headers start on granule boundaries */
    first = (lo + granule(a) - 1) & ~(uintptr_t)(granule(a) - 1);
    end = (hi - HDR) & ~(uintptr_t)(granule(a) - 1); /* sentinel header */
    a->base = base;
    a->size = size;
    a->first = (char *)first;
    a->end = (char *)end;
    sentinel = (rdmx__kv_blk_t *)a->end;
    sentinel->info = BLK_MAGIC; /* span 0, used */
    b = (rdmx__kv_blk_t *)a->first;
    b->info = (uint64_t)(end - first) | BLK_MAGIC;
    make_free(a, b);
    return RDMX_OK;
}

uint64_t rdmx__kv_alloc(rdmx_kv_alloc_t *a, size_t size)
{
    uint64_t span = span_for(a, size);
    unsigned fl, sl;
    uint32_t sl_map;
    uint64_t fl_map;
    rdmx__kv_blk_t *b;
    int i;

    if (span == 0 || span > a->free_bytes)
        return RDMX_KV_ALLOC_NONE;
    mapping_search(a, span, &fl, &sl);
    if (fl < RDMX__KV_FL_COUNT) {
        sl_map = a->sl_bitmap[fl] & (~0u << sl);
        if (sl_map == 0) {
            fl_map = fl + 1 < 64 ? a->fl_bitmap & (~0ull << (fl + 1)) : 0;
            if (fl_map != 0) {
                fl = (unsigned)__builtin_ctzll(fl_map);
                sl_map = a->sl_bitmap[fl];
            }
        }
        if (sl_map != 0) {
            sl = (unsigned)__builtin_ctz(sl_map);
            return use_block(a, a->heads[fl][sl], span);
        }
    }
    /* Nothing in the rounded-up classes: blocks of the request's own class
     * may still be large enough. */
    mapping_insert(a, span, &fl, &sl);
    b = a->heads[fl][sl];
    for (i = 0; b != NULL && i < SCAN_FALLBACK; i++, b = b->next_free) {
        if (blk_span(b) >= span)
            return use_block(a, b, span);
    }
    return RDMX_KV_ALLOC_NONE;
}

/* The header of the block whose payload is at @offset, or NULL when the
 * offset is not one a block could have. */
static rdmx__kv_blk_t *blk_at(const rdmx_kv_alloc_t *a, uint64_t offset)
{
    char *p;
    if (offset < HDR || offset > a->size)
        return NULL;
    p = a->base + offset - HDR;
    if (p < a->first || p >= a->end || ((uintptr_t)p & (granule(a) - 1)) != 0)
        return NULL;
    if ((((rdmx__kv_blk_t *)p)->info & BLK_MAGIC_MASK) != BLK_MAGIC)
        return NULL;
    return (rdmx__kv_blk_t *)p;
}

uint64_t rdmx__kv_alloc_from(rdmx_kv_alloc_t *a, uint64_t offset, size_t size)
{
    rdmx__kv_blk_t *b = blk_at(a, offset);
    uint64_t span = span_for(a, size);

    if (b == NULL || !blk_is_free(b) || span == 0 || blk_span(b) < span)
        return RDMX_KV_ALLOC_NONE;
    return use_block(a, b, span);
}

uint64_t rdmx__kv_free(rdmx_kv_alloc_t *a, uint64_t offset)
{
    rdmx__kv_blk_t *b = blk_at(a, offset), *n;

    if (b == NULL || blk_is_free(b))
        return RDMX_KV_ALLOC_NONE;
    a->used_bytes -= blk_span(b);
    a->used_blocks--;
    if (b->info & BLK_PREV_FREE) {
        rdmx__kv_blk_t *p = blk_prev_free(b);
        take_free(a, p);
        p->info =
            (blk_span(p) + blk_span(b)) | (p->info & BLK_PREV_FREE) | BLK_MAGIC;
        b = p;
    }
    n = blk_next(b);
    if (blk_is_free(n)) {
        take_free(a, n);
        b->info =
            (blk_span(b) + blk_span(n)) | (b->info & BLK_PREV_FREE) | BLK_MAGIC;
    }
    b->info &= ~BLK_FREE; /* make_free sets it */
    make_free(a, b);
    return blk_offset(a, b);
}

size_t rdmx__kv_alloc_usable_size(const rdmx_kv_alloc_t *a, uint64_t offset)
{
    rdmx__kv_blk_t *b = blk_at(a, offset);
    return b == NULL ? 0 : (size_t)(blk_span(b) - HDR);
}

void rdmx__kv_alloc_block(const rdmx_kv_alloc_t *a, uint64_t offset,
                          rdmx_kv_alloc_block_t *blk_p)
{
    rdmx__kv_blk_t *b = blk_at(a, offset), *n;

    memset(blk_p, 0, sizeof(*blk_p));
    blk_p->offset = offset;
    blk_p->prev = blk_p->next = RDMX_KV_ALLOC_NONE;
    if (b == NULL)
        return;
    blk_p->usable = blk_span(b) - HDR;
    blk_p->is_free = blk_is_free(b);
    n = blk_next(b);
    if ((char *)n < a->end)
        blk_p->next = blk_offset(a, n);
    /* An allocated predecessor has no footer: only a free one can be found
     * backwards. Free blocks never neighbour free blocks, so callers that
     * walk outwards from a free block still see every used neighbour. */
    if (b->info & BLK_PREV_FREE)
        blk_p->prev = blk_offset(a, blk_prev_free(b));
}

void rdmx__kv_alloc_stats(const rdmx_kv_alloc_t *a,
                          rdmx_kv_alloc_stats_t *stats_p)
{
    rdmx__kv_blk_t *b;
    uint64_t largest = 0;

    stats_p->capacity = a->used_bytes + a->free_bytes;
    stats_p->used_bytes = a->used_bytes;
    stats_p->used_blocks = a->used_blocks;
    stats_p->free_bytes = a->free_bytes;
    stats_p->free_blocks = a->free_blocks;
    if (a->fl_bitmap != 0) {
        unsigned fl = fls64(a->fl_bitmap);
        unsigned sl = 31u - (unsigned)__builtin_clz(a->sl_bitmap[fl]);
        for (b = a->heads[fl][sl]; b != NULL; b = b->next_free) {
            if (blk_span(b) > largest)
                largest = blk_span(b);
        }
    }
    stats_p->largest_free = largest == 0 ? 0 : largest - HDR;
}

#define CHECK_FAIL(...)                                                        \
    return rdmx__error(RDMX_ERR_INTERNAL, "kv alloc check: " __VA_ARGS__)

rdmx_status_t rdmx__kv_alloc_check(const rdmx_kv_alloc_t *a)
{
    const rdmx__kv_blk_t *b, *p;
    uint64_t used = 0, used_n = 0, fr = 0, fr_n = 0, listed = 0;
    int prev_free = 0;
    unsigned fl, sl, f, s;

    for (b = (const rdmx__kv_blk_t *)a->first; (const char *)b < a->end;
         b = blk_next(b)) {
        uint64_t span = blk_span(b);
        if ((b->info & BLK_MAGIC_MASK) != BLK_MAGIC)
            CHECK_FAIL("bad magic at offset %llu",
                       (unsigned long long)blk_offset(a, b));
        if (span < min_span(a) || (span & (granule(a) - 1)) != 0 ||
            (const char *)b + span > a->end)
            CHECK_FAIL("bad span %llu at offset %llu", (unsigned long long)span,
                       (unsigned long long)blk_offset(a, b));
        if (!!(b->info & BLK_PREV_FREE) != prev_free)
            CHECK_FAIL("PREV_FREE wrong at offset %llu",
                       (unsigned long long)blk_offset(a, b));
        if (blk_is_free(b)) {
            if (prev_free)
                CHECK_FAIL("two adjacent free blocks at offset %llu",
                           (unsigned long long)blk_offset(a, b));
            if (blk_prev_free(blk_next(b)) != b)
                CHECK_FAIL("bad footer at offset %llu",
                           (unsigned long long)blk_offset(a, b));
            fr += span;
            fr_n++;
        } else {
            used += span;
            used_n++;
        }
        prev_free = blk_is_free(b);
    }
    if ((const char *)b != a->end || blk_span(b) != 0 || blk_is_free(b))
        CHECK_FAIL("blocks do not end at the sentinel");
    if (!!(b->info & BLK_PREV_FREE) != prev_free)
        CHECK_FAIL("sentinel PREV_FREE wrong");
    if (used != a->used_bytes || used_n != a->used_blocks ||
        fr != a->free_bytes || fr_n != a->free_blocks)
        CHECK_FAIL("counters: used %llu/%llu blocks %llu/%llu free "
                   "%llu/%llu blocks %llu/%llu",
                   (unsigned long long)used, (unsigned long long)a->used_bytes,
                   (unsigned long long)used_n,
                   (unsigned long long)a->used_blocks, (unsigned long long)fr,
                   (unsigned long long)a->free_bytes, (unsigned long long)fr_n,
                   (unsigned long long)a->free_blocks);
    for (f = 0; f < RDMX__KV_FL_COUNT; f++) {
        if (!!(a->fl_bitmap & (1ull << f)) != (a->sl_bitmap[f] != 0))
            CHECK_FAIL("first-level bitmap wrong for %u", f);
        for (s = 0; s < RDMX__KV_SL_COUNT; s++) {
            if (!!(a->sl_bitmap[f] & (1u << s)) != (a->heads[f][s] != NULL))
                CHECK_FAIL("second-level bitmap wrong for %u/%u", f, s);
            for (p = NULL, b = a->heads[f][s]; b != NULL;
                 p = b, b = b->next_free) {
                if (!blk_is_free(b) || b->prev_free != p)
                    CHECK_FAIL("free list %u/%u broken", f, s);
                mapping_insert(a, blk_span(b), &fl, &sl);
                if (fl != f || sl != s)
                    CHECK_FAIL("block of span %llu in class %u/%u",
                               (unsigned long long)blk_span(b), f, s);
                if (++listed > fr_n)
                    CHECK_FAIL("free lists hold more blocks than exist");
            }
        }
    }
    if (listed != fr_n)
        CHECK_FAIL("%llu free blocks, %llu listed", (unsigned long long)fr_n,
                   (unsigned long long)listed);
    return RDMX_OK;
}
