/*
 * The arena a lambda state lives in (src/lambda/arena.c), under Lua's
 * allocator contract, without Lua:
 * - random allocations, reallocations and frees of small and large sizes:
 *   every live block keeps its bytes (a block that overlaps another, or
 *   is handed out twice, shows as a wrong byte), reallocation keeps the
 *   prefix;
 * - an image saved in the middle and restored after more work brings back
 *   every block of then, byte for byte, and the allocator with them: the
 *   work goes on from there;
 * - freed large blocks merge: after the large blocks of a full arena are
 *   freed, one block of nearly the whole free space fits; with the arena
 *   full, a shrink still succeeds, and so does a reallocation to a size
 *   the block already holds.
 */
#include "harness.h"
#include "lambda/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MiB   ((size_t)1 << 20)
#define SLOTS 2048

typedef struct {
    unsigned char *p;
    size_t n;
    unsigned char tag;
} slot_t;

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static size_t rand_size(void)
{
    unsigned k = (unsigned)(next() % 100);
    if (k < 70)
        return 1 + next() % 512;
    if (k < 95)
        return 513 + next() % (64 * 1024);
    return 64 * 1024 + next() % (2 * MiB);
}

static void fill(slot_t *s)
{
    size_t i;
    for (i = 0; i + 1 < s->n; i += 61)
        s->p[i] = (unsigned char)(s->tag + i);
    s->p[s->n - 1] = s->tag;
}

static void check(const slot_t *s, size_t upto, const char *when)
{
    size_t n = upto < s->n ? upto : s->n, i;
    for (i = 0; i + 1 < n; i += 61) /* the last byte: below */
        CHECKF(s->p[i] == (unsigned char)(s->tag + i),
               "%s: block %p of %zu B changed at %zu", when, (void *)s->p, s->n,
               i);
    if (upto >= s->n)
        CHECKF(s->p[s->n - 1] == s->tag, "%s: block %p of %zu B: last byte",
               when, (void *)s->p, s->n);
}

static void check_all(const slot_t *slots, const char *when)
{
    for (int i = 0; i < SLOTS; i++)
        if (slots[i].p != NULL)
            check(&slots[i], SIZE_MAX, when);
}

/* One random operation on a random slot; 0 when the arena was full. */
static int step(rdmx__arena_t *a, slot_t *slots)
{
    slot_t *s = &slots[next() % SLOTS];
    size_t n;
    unsigned char *q;

    if (s->p == NULL) {
        n = rand_size();
        if ((q = rdmx__arena_realloc(a, NULL, 4, n)) == NULL)
            return 0;
        s->p = q;
        s->n = n;
        s->tag = (unsigned char)next();
        fill(s);
    } else if (next() % 3 == 0) {
        check(s, SIZE_MAX, "before free");
        CHECK(rdmx__arena_realloc(a, s->p, s->n, 0) == NULL);
        s->p = NULL;
    } else {
        check(s, SIZE_MAX, "before realloc");
        n = rand_size();
        q = rdmx__arena_realloc(a, s->p, s->n, n);
        if (q == NULL) {
            CHECKF(n > s->n, "a shrink %zu -> %zu failed", s->n, n);
            return 0;
        }
        s->p = q;
        check(s, n, "after realloc");
        s->n = n;
        fill(s);
    }
    return 1;
}

int main(void)
{
    size_t size = 128 * MiB;
    rdmx__arena_t *a;
    rdmx__arena_image_t img;
    static slot_t slots[SLOTS], saved[SLOTS];
    unsigned long ops = TH_SANITIZED ? 60000 : 400000, i, full = 0;
    size_t gap;
    unsigned char *big, *kept;

    th_init("unit_arena", 60);
    a = rdmx__arena_create(size);
    CHECK(a != NULL);

    th_log("random work: %lu operations over %d blocks", ops, SLOTS);
    for (i = 0; i < ops; i++)
        full += !step(a, slots);
    check_all(slots, "after the work");
    th_log("  %lu found the arena full; %zu B in use", full,
           rdmx__arena_used(a));

    th_log("an image saved, more work, the image restored");
    CHECK(rdmx__arena_save(a, &img) == 0);
    CHECK(img.len == rdmx__arena_used(a));
    memcpy(saved, slots, sizeof(slots));
    for (i = 0; i < ops / 4; i++)
        step(a, slots);
    rdmx__arena_restore(a, &img);
    rdmx__arena_trim(a, &img);
    memcpy(slots, saved, sizeof(slots));
    CHECK(rdmx__arena_used(a) == img.len);
    check_all(slots, "after the restore");
    for (i = 0; i < ops / 4; i++)
        step(a, slots);
    check_all(slots, "work after the restore");

    th_log("freed large blocks merge");
    for (i = 0; i < SLOTS; i++)
        if (slots[i].p != NULL && slots[i].n > 512) {
            check(&slots[i], SIZE_MAX, "free");
            rdmx__arena_realloc(a, slots[i].p, slots[i].n, 0);
            slots[i].p = NULL;
        }
    /* fill what is left with large blocks, then free them all */
    for (i = 0; i < SLOTS; i++)
        if (slots[i].p == NULL) {
            size_t n = 513 + next() % (4 * MiB);
            unsigned char *q = rdmx__arena_realloc(a, NULL, 4, n);
            if (q == NULL)
                continue;
            slots[i].p = q;
            slots[i].n = n;
            slots[i].tag = (unsigned char)i;
            fill(&slots[i]);
        }
    check_all(slots, "the arena filled with large blocks");
    for (i = 0; i < SLOTS; i++)
        if (slots[i].p != NULL && slots[i].n > 512) {
            rdmx__arena_realloc(a, slots[i].p, slots[i].n, 0);
            slots[i].p = NULL;
        }
    gap = size - rdmx__arena_used(a);
    th_log("  free space after freeing every large block: %zu MiB of %zu",
           gap / MiB, size / MiB);
    kept = rdmx__arena_realloc(a, NULL, 4, 600);
    CHECK(kept != NULL);
    memset(kept, 0x33, 600);
    gap -= 608 + 16;
    big = rdmx__arena_realloc(a, NULL, 4, gap - 64);
    CHECKF(big != NULL, "one block of %zu B did not fit", gap - 64);
    memset(big, 0x5a, gap - 64);
    check_all(slots, "the small blocks beside one big one");
    /* nothing is left, and a shrink that finds no room keeps its block */
    CHECK(rdmx__arena_realloc(a, NULL, 4, 4096) == NULL);
    for (i = 0; i < SLOTS; i++)
        if (slots[i].p != NULL && slots[i].n > 256) {
            unsigned char *q =
                rdmx__arena_realloc(a, slots[i].p, slots[i].n, 100);
            CHECK(q != NULL);
            slots[i].p = q;
            check(&slots[i], 100, "a shrink");
            slots[i].n = 100;
            fill(&slots[i]);
            break;
        }
    /* the 600 B large block, shrunk to 100 B with no room for a small
     * one, stays where it is; asked again for 100 or 200 B (it holds 608),
     * it still does (Lua makes such reallocations and cannot fail them) */
    for (i = 0; rdmx__arena_realloc(a, NULL, 4, 16) != NULL; i++)
        ; /* the gap used up, then the lists of the classes asked below */
    while (rdmx__arena_realloc(a, NULL, 4, 100) != NULL)
        ;
    while (rdmx__arena_realloc(a, NULL, 4, 200) != NULL)
        ;
    CHECK(rdmx__arena_realloc(a, kept, 600, 100) == kept);
    CHECK(rdmx__arena_realloc(a, kept, 100, 100) == kept);
    CHECK(rdmx__arena_realloc(a, kept, 100, 200) == kept);
    CHECK(kept[0] == 0x33 && kept[199] == 0x33);
    CHECK(rdmx__arena_realloc(a, kept, 200, 0) == NULL);
    CHECK(rdmx__arena_realloc(a, big, gap - 64, 0) == NULL);
    check_all(slots, "at the end");

    rdmx__arena_image_free(&img);
    rdmx__arena_destroy(a);
    th_log("PASS");
    return 0;
}
