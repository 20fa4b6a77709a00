/*
 * rdmx KV — value-memory allocator.
 *
 * A TLSF allocator (two-level segregated fit, Masmano et al. 2004) over a
 * memory range [base, base + size) that the caller owns — in rdmx-kvd, the
 * registered region that holds the cache's values. alloc and free are O(1):
 * free blocks sit in 54 x 32 size classes found with two bitmap scans, and a
 * freed block is merged at once with free physical neighbours (boundary
 * tags), so memory returns to large blocks whenever neighbours die — sizes
 * may shift without the memory calcifying in classes the way memcached's
 * slabs do.
 *
 * Blocks and metadata (in-band, inside the range):
 *
 *     ... | hdr 8 B | payload (usable) ................ | hdr | ...
 *         ^ granule-aligned address
 *
 * Blocks start on granule boundaries and span a multiple of the granule,
 * header included: the granule is 16 bytes for ranges below 64 GiB (twice
 * that for every further doubling, so that block starts counted in granules
 * fit in 32 bits: rdmx_kv_alloc_t.shift), the smallest block 32 bytes. The
 * usable size of a block is span - 8 (24, 40, 56, ... bytes); payloads are
 * 8-byte aligned. The header holds the span, two flags and a magic. A free
 * block also keeps its free-list links at the start of its payload and its
 * span in its last 8 bytes (the footer the next block uses to find it).
 * Nothing else lives in the range but what the caller writes into payloads.
 *
 * Offsets returned and taken are relative to the base given to init (not to
 * the first aligned block), so base + offset is the payload's address in the
 * caller's region.
 *
 * Not thread-safe: the store serializes calls with its lock.
 */
#ifndef RDMX_KV_ALLOC_H
#define RDMX_KV_ALLOC_H

#include <rdmx/status.h>

#include <stddef.h>
#include <stdint.h>

/* "No block": returned by the allocation functions on failure. */
#define RDMX_KV_ALLOC_NONE ((uint64_t)-1)

/* log2 of the smallest granule of block spans (16 bytes). */
#define RDMX_KV_ALLOC_MIN_SHIFT 4u

/* Block starts, counted in granules from the first block, stay below this
 * (the granule grows with the range to keep them there). */
#define RDMX_KV_ALLOC_MAX_REF 0xfffffffeull

/* Bytes of in-band header in front of every payload. */
#define RDMX_KV_ALLOC_HDR 8u

/* TLSF geometry: 2^5 second-level classes per power of two; spans below 32
 * granules (512 bytes with 16-byte granules) are classed exactly. */
#define RDMX__KV_SL_LOG2  5
#define RDMX__KV_SL_COUNT (1u << RDMX__KV_SL_LOG2)
#define RDMX__KV_FL_COUNT                                                      \
    (64 - (RDMX__KV_SL_LOG2 + RDMX_KV_ALLOC_MIN_SHIFT) + 1)

typedef struct rdmx__kv_blk rdmx__kv_blk_t;

/* An allocator. Plain struct, owned and serialized by its user. */
typedef struct {
    char *base; /* the range given to init */
    size_t size;
    unsigned shift;     /* log2 of the granule */
    char *first;        /* header of the first block */
    char *end;          /* header of the sentinel (span 0, always used) */
    uint64_t fl_bitmap; /* bit f: some class of first level f is non-empty */
    uint32_t sl_bitmap[RDMX__KV_FL_COUNT]; /* bit s: class (f, s) non-empty */
    rdmx__kv_blk_t *heads[RDMX__KV_FL_COUNT][RDMX__KV_SL_COUNT];
    uint64_t used_bytes; /* sum of the spans of allocated blocks */
    uint64_t used_blocks;
    uint64_t free_bytes; /* sum of the spans of free blocks */
    uint64_t free_blocks;
} rdmx_kv_alloc_t;

typedef struct {
    uint64_t capacity;   /* bytes managed: used_bytes + free_bytes */
    uint64_t used_bytes; /* spans (headers included) of allocated blocks */
    uint64_t used_blocks;
    uint64_t free_bytes; /* spans of free blocks */
    uint64_t free_blocks;
    uint64_t largest_free; /* usable bytes of the largest free block */
} rdmx_kv_alloc_stats_t;

/* What rdmx__kv_alloc_block() reports about one block. */
typedef struct {
    uint64_t offset; /* payload offset (from base) */
    uint64_t usable; /* payload bytes */
    int is_free;
    uint64_t prev; /* payload offset of the physically previous block,
                      RDMX_KV_ALLOC_NONE at the start of the range */
    uint64_t next; /* same for the next block, NONE at the end */
} rdmx_kv_alloc_block_t;

/*
 * Manage [base, base + size) in granules of 16 bytes (32 from 64 GiB on,
 * and so on). The start is rounded up and the end down to the granule; up
 * to two granules are lost that way (alignment and the 8-byte end
 * sentinel). Returns RDMX_ERR_INVALID for a range smaller than 256 bytes.
 */
rdmx_status_t rdmx__kv_alloc_init(rdmx_kv_alloc_t *a, void *base, size_t size);

/*
 * A block with at least @size usable bytes (0 is allowed: the smallest block,
 * 24 usable bytes with 16-byte granules). Returns its payload's offset from
 * base (base + offset is 8-byte aligned), or RDMX_KV_ALLOC_NONE when no free
 * block is large enough.
 *
 * Good fit in O(1): a request is rounded up to the next class boundary so
 * that any block of the class found fits (waste below 1/32 of the size); only
 * when that finds nothing, the first 16 blocks of the request's own class are
 * tried.
 */
uint64_t rdmx__kv_alloc(rdmx_kv_alloc_t *a, size_t size);

/*
 * Allocate @size bytes from the start of the free block whose payload is at
 * @offset (as rdmx__kv_free or rdmx__kv_alloc_block report it): the caller
 * knows the block fits even where the class rounding of rdmx__kv_alloc would
 * not look. Returns @offset, or RDMX_KV_ALLOC_NONE if that block is not free
 * or too small.
 */
uint64_t rdmx__kv_alloc_from(rdmx_kv_alloc_t *a, uint64_t offset, size_t size);

/*
 * Free the block at @offset, merging it with free neighbours. Returns the
 * payload offset of the resulting free block (which starts earlier when it
 * merged with its predecessor), or RDMX_KV_ALLOC_NONE when @offset is not an
 * allocated block (outside the range, not a block start, already free —
 * checked through an 8-bit magic, so garbage is refused with 255/256
 * probability): nothing is changed then.
 */
uint64_t rdmx__kv_free(rdmx_kv_alloc_t *a, uint64_t offset);

/* Usable bytes of the allocated block at @offset (>= the size asked for). */
size_t rdmx__kv_alloc_usable_size(const rdmx_kv_alloc_t *a, uint64_t offset);

/*
 * Describe the block (free or not) whose payload is at @offset. Only a free
 * predecessor can be found (through its footer): allocated blocks have no
 * footer, so `prev` is NONE behind an allocated block. Walk forwards.
 */
void rdmx__kv_alloc_block(const rdmx_kv_alloc_t *a, uint64_t offset,
                          rdmx_kv_alloc_block_t *blk_p);

/* Counters, and the largest free block (its class's list is scanned). */
void rdmx__kv_alloc_stats(const rdmx_kv_alloc_t *a,
                          rdmx_kv_alloc_stats_t *stats_p);

/*
 * Walk every block and free list and verify the invariants (spans, flags,
 * footers, no two adjacent free blocks, class membership, counters). O(n);
 * for tests. Returns RDMX_OK or RDMX_ERR_INTERNAL with a detail.
 */
rdmx_status_t rdmx__kv_alloc_check(const rdmx_kv_alloc_t *a);

#endif /* RDMX_KV_ALLOC_H */
