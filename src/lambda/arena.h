/*
 * rdmx lambda — a fixed-address arena for one Lua state, and images of it
 * (docs/LAMBDA.md, "Fresh states from an image").
 *
 * The arena is one private mapping that never moves. Its allocator keeps
 * all of its bookkeeping inside the arena (a header at the base), so the
 * bytes the allocator uses are the whole state: saving them is an image,
 * and copying an image back makes the state, allocator included, byte for
 * byte what it was when the image was saved. Every pointer in it stays
 * valid because the arena is at the same address.
 *
 * Small blocks (Lua's objects, up to 512 B) grow up from the base in size
 * classes without headers (Lua passes a block's size back on every realloc
 * and free); large ones grow down from the end with boundary tags, and
 * freed ones merge (arena.c).
 *
 * Owned by one thread at a time; no locking.
 */
#ifndef RDMX_LAMBDA_ARENA_H
#define RDMX_LAMBDA_ARENA_H

#include <stddef.h>

typedef struct rdmx__arena rdmx__arena_t;

/* A saved image: the bytes from the base to the bump offset then. */
typedef struct {
    unsigned char *bytes; /* malloc'd */
    size_t len;
} rdmx__arena_image_t;

/* Reserve @p size bytes of address space (rounded up to pages; no memory
 * is committed until used). NULL when the mapping fails. */
rdmx__arena_t *rdmx__arena_create(size_t size);
void rdmx__arena_destroy(rdmx__arena_t *a);

/* Lua's allocator contract: @p osize is the block's size as allocated (or
 * asked for by the last realloc); @p nsize 0 frees. NULL when the arena is
 * full (a shrink that finds no room keeps the block). */
void *rdmx__arena_realloc(rdmx__arena_t *a, void *p, size_t osize,
                          size_t nsize);

/* Bytes the allocator uses: the size an image would have. */
size_t rdmx__arena_used(const rdmx__arena_t *a);

/* Save the arena into @p img (its bytes malloc'd; free with
 * rdmx__arena_image_free). -1 when out of memory. The pages just beyond
 * the image (256 KiB at each region's edge) are touched, to stay resident:
 * a call never finds them warm or cold because of an earlier call. */
int rdmx__arena_save(rdmx__arena_t *a, rdmx__arena_image_t *img);

/* Make the arena what it was when @p img was saved (and its resident
 * edges resident again, if a trim for another image gave them back). */
void rdmx__arena_restore(rdmx__arena_t *a, const rdmx__arena_image_t *img);

/* Give back to the system what the arena touched beyond @p img and its
 * resident edges (a call is over; its state began from @p img). What lay
 * there reads as zeros afterwards: the state is not to be used again
 * until an image is restored. */
void rdmx__arena_trim(rdmx__arena_t *a, const rdmx__arena_image_t *img);

void rdmx__arena_image_free(rdmx__arena_image_t *img);

#endif /* RDMX_LAMBDA_ARENA_H */
