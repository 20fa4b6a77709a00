/*
 * rdmx lambda — a fixed-address arena for one Lua state, and images of it.
 * See arena.h and docs/LAMBDA.md, "Fresh states from an image".
 *
 * Two regions share the arena's address space and meet in its middle:
 * - Small blocks (up to 512 B: most Lua objects) grow up from the header,
 *   in 32 classes of 16-byte steps, without headers (Lua passes a block's
 *   size back); a freed block goes on its class's list.
 * - Large blocks grow down from the end. Each has a 16-byte header (its
 *   size with an in-use bit, and the size of the block below it); a freed
 *   block merges with free neighbours, goes on a list by the power of two
 *   of its size, or back to the free space between the regions when it is
 *   the lowest. So freed memory of any size serves later requests of any
 *   size, and a call can use about its whole budget whatever the pattern
 *   of its sizes (a string grown piece by piece, a table rehashed).
 * The whole state is the bytes [0, small_top) and [large_low, size).
 */
#include "lambda/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SMALL_MAX 512u
#define NSMALL    (SMALL_MAX / 16u)
#define NBINS     64u
#define LHDR      16u   /* a large block's header */
#define MIN_FREE  64u   /* a free large block at least (header and links) */
#define SPLIT_MIN 4096u /* a shrink in place gives back at least this */

/* Pages kept resident beyond an image at each region's edge, touched once
 * when the state is built, so that no call finds them warm or cold
 * because of what an earlier call did; beyond them, what a call touched
 * is given back when it ends. */
#define SLACK ((size_t)256 << 10)

typedef struct lblock {
    size_t size;                /* the whole block; bit 0: in use */
    size_t prev_size;           /* the block just below; 0 for the lowest */
    struct lblock *next, *prev; /* a free block's list (its payload) */
} lblock_t;

/* At the base of the arena, inside every image. */
typedef struct {
    size_t small_top;            /* small blocks: [HDR_SIZE, small_top) */
    size_t large_low;            /* large blocks: [large_low, size) */
    void *small_free[NSMALL];    /* by class, linked through the blocks */
    lblock_t *large_free[NBINS]; /* by floor(log2(size)) */
    uint64_t nonempty;           /* bit b: large_free[b] has a block */
} arena_hdr_t;

struct rdmx__arena {
    unsigned char *base;
    size_t size;
    size_t page;
    size_t small_touched; /* highest small_top since the last trim */
    size_t large_touched; /* lowest large_low since the last trim */
    size_t kept_high;     /* [0, kept_high) resident since the last trim */
    size_t kept_low;      /* [kept_low, size) resident since the last trim */
    arena_hdr_t *h;
};

#define HDR_SIZE ((sizeof(arena_hdr_t) + 15) & ~(size_t)15)

static size_t page_up(const rdmx__arena_t *a, size_t x)
{
    return (x + a->page - 1) & ~(a->page - 1);
}

static size_t page_down(const rdmx__arena_t *a, size_t x)
{
    return x & ~(a->page - 1);
}

/* --- small blocks ----------------------------------------------------------
 */

static void *small_alloc(rdmx__arena_t *a, size_t n)
{
    arena_hdr_t *h = a->h;
    unsigned c = (unsigned)((n + 15) >> 4) - 1;
    size_t csize = ((size_t)c + 1) << 4;
    void *p;

    if ((p = h->small_free[c]) != NULL) {
        memcpy(&h->small_free[c], p, sizeof(void *));
        return p;
    }
    if (csize > h->large_low - h->small_top)
        return NULL;
    p = a->base + h->small_top;
    h->small_top += csize;
    if (h->small_top > a->small_touched)
        a->small_touched = h->small_top;
    return p;
}

/* @p n: the size the block was asked for last (it may be larger: a shrink
 * that found no room kept it, so its class may be too small, never too
 * large). Lua never names a small block with more than SMALL_MAX bytes;
 * such a block is dropped rather than listed in a class it may not fill. */
static void small_free(rdmx__arena_t *a, void *p, size_t n)
{
    unsigned c = n > 16 ? (unsigned)((n + 15) >> 4) - 1 : 0;

    if (n > SMALL_MAX)
        return;
    memcpy(p, &a->h->small_free[c], sizeof(void *));
    a->h->small_free[c] = p;
}

/* --- large blocks ----------------------------------------------------------
 */

static unsigned bin_of(size_t size)
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)size);
}

static lblock_t *blk_at(const rdmx__arena_t *a, size_t off)
{
    return (lblock_t *)(void *)(a->base + off);
}

static size_t blk_off(const rdmx__arena_t *a, const lblock_t *b)
{
    return (size_t)((const unsigned char *)b - a->base);
}

static void bin_insert(arena_hdr_t *h, lblock_t *b)
{
    unsigned i = bin_of(b->size);

    b->prev = NULL;
    b->next = h->large_free[i];
    if (b->next != NULL)
        b->next->prev = b;
    h->large_free[i] = b;
    h->nonempty |= (uint64_t)1 << i;
}

static void bin_remove(arena_hdr_t *h, lblock_t *b)
{
    unsigned i = bin_of(b->size);

    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        h->large_free[i] = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    if (h->large_free[i] == NULL)
        h->nonempty &= ~((uint64_t)1 << i);
}

/* Tell the block above @p b (if any) that @p b is @p size bytes. */
static void set_above(rdmx__arena_t *a, lblock_t *b, size_t size)
{
    size_t up = blk_off(a, b) + size;

    if (up < a->size)
        blk_at(a, up)->prev_size = size;
}

/* Free block @p b (in use or not, on no list) of @p size bytes: merge it
 * with free neighbours, then list it, or give it to the free space when it
 * is the lowest. */
static void large_release(rdmx__arena_t *a, lblock_t *b, size_t size)
{
    arena_hdr_t *h = a->h;
    size_t off = blk_off(a, b);

    if (off + size < a->size) {
        lblock_t *up = blk_at(a, off + size);
        if (!(up->size & 1)) {
            bin_remove(h, up);
            size += up->size;
        }
    }
    if (off != h->large_low) {
        lblock_t *low = blk_at(a, off - b->prev_size);
        if (!(low->size & 1)) {
            bin_remove(h, low);
            size += low->size;
            b = low;
            off = blk_off(a, b);
        }
    }
    if (off == h->large_low) {
        h->large_low += size;
        if (h->large_low < a->size)
            blk_at(a, h->large_low)->prev_size = 0;
        return;
    }
    b->size = size;
    set_above(a, b, size);
    bin_insert(h, b);
}

/* Make block @p b (in use, @p have bytes) @p need bytes, the rest free. */
static void large_trim(rdmx__arena_t *a, lblock_t *b, size_t have, size_t need)
{
    lblock_t *rest;

    if (have - need < MIN_FREE)
        return;
    b->size = need | 1;
    rest = (lblock_t *)(void *)((unsigned char *)b + need);
    rest->prev_size = need;
    rest->size = (have - need) | 1;
    set_above(a, rest, have - need);
    large_release(a, rest, have - need);
}

static lblock_t *large_find(arena_hdr_t *h, size_t need)
{
    unsigned i = bin_of(need);
    uint64_t more;
    lblock_t *b;

    for (b = h->large_free[i]; b != NULL; b = b->next)
        if (b->size >= need)
            return b;
    more = i + 1 < 64 ? h->nonempty & ~(((uint64_t)2 << i) - 1) : 0;
    return more != 0 ? h->large_free[__builtin_ctzll(more)] : NULL;
}

static void *large_alloc(rdmx__arena_t *a, size_t n)
{
    arena_hdr_t *h = a->h;
    size_t need = ((n + 15) & ~(size_t)15) + LHDR;
    lblock_t *b = large_find(h, need);

    if (b != NULL) {
        size_t have = b->size;
        bin_remove(h, b);
        b->size = have | 1;
        large_trim(a, b, have, need);
        return (unsigned char *)b + LHDR;
    }
    if (need > h->large_low - h->small_top)
        return NULL;
    h->large_low -= need;
    if (h->large_low < a->large_touched)
        a->large_touched = h->large_low;
    b = blk_at(a, h->large_low);
    b->size = need | 1;
    b->prev_size = 0;
    set_above(a, b, need);
    return (unsigned char *)b + LHDR;
}

/* Grow or shrink the large block of @p p to hold @p n bytes where it is;
 * 0 if it cannot grow there. */
static int large_resize(rdmx__arena_t *a, void *p, size_t n)
{
    lblock_t *b = (lblock_t *)(void *)((unsigned char *)p - LHDR);
    size_t have = b->size & ~(size_t)1;
    size_t need = ((n + 15) & ~(size_t)15) + LHDR;
    size_t up = blk_off(a, b) + have;

    if (need <= have) {
        if (have - need >= SPLIT_MIN)
            large_trim(a, b, have, need);
        return 1;
    }
    if (up < a->size && !(blk_at(a, up)->size & 1) &&
        have + blk_at(a, up)->size >= need) {
        size_t joined = have + blk_at(a, up)->size;
        bin_remove(a->h, blk_at(a, up));
        b->size = joined | 1;
        set_above(a, b, joined);
        large_trim(a, b, joined, need);
        return 1;
    }
    return 0;
}

/* --- the allocator ---------------------------------------------------------
 */

static int is_large(const rdmx__arena_t *a, const void *p)
{
    return (const unsigned char *)p >= a->base + a->h->large_low;
}

static void *arena_alloc(rdmx__arena_t *a, size_t n)
{
    if (n > a->size)
        return NULL;
    return n <= SMALL_MAX ? small_alloc(a, n) : large_alloc(a, n);
}

static void arena_free(rdmx__arena_t *a, void *p, size_t n)
{
    if (is_large(a, p)) {
        lblock_t *b = (lblock_t *)(void *)((unsigned char *)p - LHDR);
        large_release(a, b, b->size & ~(size_t)1);
    } else {
        small_free(a, p, n);
    }
}

void *rdmx__arena_realloc(rdmx__arena_t *a, void *p, size_t osize, size_t nsize)
{
    void *q;

    if (nsize == 0) {
        if (p != NULL)
            arena_free(a, p, osize);
        return NULL;
    }
    if (p == NULL) /* osize tells Lua's object type here, not a size */
        return arena_alloc(a, nsize);
    if (nsize > a->size)
        return NULL;
    if (is_large(a, p)) {
        if (nsize > SMALL_MAX && large_resize(a, p, nsize))
            return p;
    } else if (nsize <= SMALL_MAX && (osize + 15) >> 4 == (nsize + 15) >> 4) {
        return p;
    }
    q = arena_alloc(a, nsize);
    if (q == NULL) {
        /* a shrink (or a same size) keeps its block, and so does any size
         * a large block kept by an earlier failed shrink still holds */
        if (nsize <= osize)
            return p;
        if (is_large(a, p) &&
            nsize <= (((lblock_t *)(void *)((unsigned char *)p - LHDR))->size &
                      ~(size_t)1) -
                         LHDR)
            return p;
        return NULL;
    }
    memcpy(q, p, osize < nsize ? osize : nsize);
    arena_free(a, p, osize);
    return q;
}

/* --- the arena and its images ----------------------------------------------
 */

rdmx__arena_t *rdmx__arena_create(size_t size)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    rdmx__arena_t *a;
    void *base;

    if (size < HDR_SIZE + 4 * SLACK || size > SIZE_MAX - page)
        return NULL;
    size = (size + page - 1) & ~(page - 1);
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        free(a);
        return NULL;
    }
    a->base = base;
    a->size = size;
    a->page = page;
    a->h = base;
    a->h->small_top = HDR_SIZE;
    a->h->large_low = size;
    a->small_touched = HDR_SIZE;
    a->large_touched = size;
    a->kept_high = 0;
    a->kept_low = size;
    return a;
}

void rdmx__arena_destroy(rdmx__arena_t *a)
{
    if (a == NULL)
        return;
    munmap(a->base, a->size);
    free(a);
}

size_t rdmx__arena_used(const rdmx__arena_t *a)
{
    return a->h->small_top + (a->size - a->h->large_low);
}

/* Make the slack of an image with these edges resident again where the
 * last trim (of another image) may have given it back. */
static void touch_slack(rdmx__arena_t *a, size_t small_top, size_t large_low)
{
    size_t i, to = page_up(a, small_top + SLACK);
    size_t from = large_low > SLACK ? page_down(a, large_low - SLACK) : 0;

    if (to > a->kept_high) {
        for (i = page_up(a, small_top) > a->kept_high ? page_up(a, small_top)
                                                      : a->kept_high;
             i < to && i < large_low; i += a->page)
            a->base[i] = 0;
        a->kept_high = to;
        if (to > a->small_touched)
            a->small_touched = to;
    }
    if (from < a->kept_low) {
        size_t end = page_down(a, large_low) < a->kept_low
                         ? page_down(a, large_low)
                         : a->kept_low;
        for (i = from; i < end; i += a->page)
            if (i >= small_top)
                a->base[i] = 0;
        a->kept_low = from;
        if (from < a->large_touched)
            a->large_touched = from;
    }
}

int rdmx__arena_save(rdmx__arena_t *a, rdmx__arena_image_t *img)
{
    const arena_hdr_t *h = a->h;
    size_t low = h->small_top, high = a->size - h->large_low;
    size_t i, from, to;

    img->len = low + high;
    img->bytes = malloc(img->len);
    if (img->bytes == NULL) {
        img->len = 0;
        return -1;
    }
    memcpy(img->bytes, a->base, low);
    memcpy(img->bytes + low, a->base + h->large_low, high);
    /* the slack at both edges, resident from now on (SLACK) */
    from = page_up(a, h->small_top);
    to = page_up(a, h->small_top + SLACK);
    for (i = from; i < to && i < h->large_low; i += a->page)
        a->base[i] = 0;
    if (to > a->small_touched)
        a->small_touched = to;
    from = h->large_low > SLACK ? page_down(a, h->large_low - SLACK) : 0;
    for (i = from; i < page_down(a, h->large_low); i += a->page)
        if (i >= h->small_top)
            a->base[i] = 0;
    if (from < a->large_touched)
        a->large_touched = from;
    if (to > a->kept_high)
        a->kept_high = to;
    if (from < a->kept_low)
        a->kept_low = from;
    return 0;
}

void rdmx__arena_restore(rdmx__arena_t *a, const rdmx__arena_image_t *img)
{
    const arena_hdr_t *ih = (const arena_hdr_t *)(const void *)img->bytes;
    size_t low = ih->small_top, high = a->size - ih->large_low;

    memcpy(a->base, img->bytes, low);
    memcpy(a->base + ih->large_low, img->bytes + low, high);
    if (low > a->small_touched)
        a->small_touched = low;
    if (ih->large_low < a->large_touched)
        a->large_touched = ih->large_low;
    touch_slack(a, ih->small_top, ih->large_low);
}

void rdmx__arena_trim(rdmx__arena_t *a, const rdmx__arena_image_t *img)
{
    const arena_hdr_t *ih = (const arena_hdr_t *)(const void *)img->bytes;
    size_t keep_high = page_up(a, ih->small_top + SLACK);
    size_t keep_low =
        ih->large_low > SLACK ? page_down(a, ih->large_low - SLACK) : 0;

    if (a->small_touched > keep_high && keep_high < keep_low) {
        size_t to = page_up(a, a->small_touched);
        if (to > keep_low)
            to = keep_low;
        if (to > keep_high)
            (void)madvise(a->base + keep_high, to - keep_high, MADV_DONTNEED);
        a->small_touched = keep_high;
    }
    if (a->large_touched < keep_low && keep_high < keep_low) {
        size_t from = page_down(a, a->large_touched);
        if (from < keep_high)
            from = keep_high;
        if (keep_low > from)
            (void)madvise(a->base + from, keep_low - from, MADV_DONTNEED);
        a->large_touched = keep_low;
    }
    if (keep_high < keep_low) {
        if (a->kept_high > keep_high)
            a->kept_high = keep_high;
        if (a->kept_low < keep_low)
            a->kept_low = keep_low;
    }
}

void rdmx__arena_image_free(rdmx__arena_image_t *img)
{
    free(img->bytes);
    img->bytes = NULL;
    img->len = 0;
}
