/*
 * The copy around the cache (src/util/copy.h): rdmx__copy_stream copies
 * exactly what memcpy does, for every length from 0 to 1,100 bytes and
 * some large ones (up to 1 MiB + 77), at every alignment of source and
 * destination within 16 bytes (its streamed stores need a 16-byte-aligned
 * destination: a head copied before them, a tail after), and writes no
 * byte outside the destination. Another thread that sees a flag the
 * copying thread stored after the copy (release; acquire) sees every
 * copied byte, as a reader of rdmx-kvd's store does after a commit. (That
 * takes the fence after the streamed stores; taking it out did not make
 * this part fail on the x86 machines here, whose write-combining buffers
 * drain long before the other thread looks: the fence is there because
 * the architecture does not promise that.)
 */
#include "harness.h"
#include "util/copy.h"

#include <pthread.h>
#include <sys/types.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GUARD     64
#define UNTOUCHED 0xee

static unsigned char *src_buf, *dst_buf;

/* Copy @n bytes from src offset @so to dst offset @doff and check. */
static void one(size_t n, size_t so, size_t doff, uint64_t seed)
{
    unsigned char *s = src_buf + GUARD + so;
    unsigned char *d = dst_buf + GUARD + doff;

    th_fill(s, n, seed);
    memset(dst_buf, UNTOUCHED, GUARD + doff + n + GUARD);
    rdmx__copy_stream(d, s, n);
    CHECKF(memcmp(d, s, n) == 0,
           "%zu bytes from offset %zu to %zu: the copy differs", n, so, doff);
    for (size_t i = 0; i < GUARD + doff; i++)
        CHECKF(dst_buf[i] == UNTOUCHED,
               "%zu bytes to offset %zu: byte %zd before the destination "
               "written",
               n, doff, (ssize_t)i - (ssize_t)(GUARD + doff));
    for (size_t i = 0; i < GUARD; i++)
        CHECKF(d[n + i] == UNTOUCHED,
               "%zu bytes to offset %zu: byte %zu after the destination "
               "written",
               n, doff, i);
}

/* --- the fence: a reader on another thread ------------------------------ */

#define ROUNDS 2000
#define LEN    (64 * 1024 + 13)

static unsigned char *shared;
static int flag; /* the round the copy of which is complete */

static void *reader(void *arg)
{
    long *bad = arg;

    for (int r = 1; r <= ROUNDS; r++) {
        while (__atomic_load_n(&flag, __ATOMIC_ACQUIRE) < r)
            ;
        /* every byte of round r, in a pattern of its own */
        if (th_check(shared, LEN, (uint64_t)r) >= 0)
            (*bad)++;
        __atomic_store_n(&flag, -r, __ATOMIC_RELEASE); /* seen */
    }
    return NULL;
}

int main(void)
{
    static const size_t big[] = {4096,  4096 + 1,   16384,   16384 + 13,
                                 65536, 65536 + 63, 1 << 20, (1 << 20) + 77};
    size_t cap = (1 << 20) + 256 + 2 * GUARD;
    unsigned checked = 0;
    pthread_t th;
    long bad = 0;
    unsigned char *from;

    th_init("unit_copy", 60);
    src_buf = malloc(cap);
    dst_buf = malloc(cap);
    CHECK(src_buf != NULL && dst_buf != NULL);

    for (size_t n = 0; n <= 1100; n++)
        for (size_t so = 0; so < 16; so += 5)
            for (size_t doff = 0; doff < 16; doff++, checked++)
                one(n, so, doff, th_seed(n, so, doff));
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
        for (size_t so = 0; so < 16; so += 3)
            for (size_t doff = 0; doff < 16; doff += 3, checked++)
                one(big[i], so, doff, th_seed(big[i], so, doff));

    /* Another thread sees what was copied before the flag. */
    shared = malloc(LEN);
    from = malloc(LEN);
    CHECK(shared != NULL && from != NULL);
    CHECK(pthread_create(&th, NULL, reader, &bad) == 0);
    for (int r = 1; r <= ROUNDS; r++) {
        th_fill(from, LEN, (uint64_t)r);
        if (r > 1)
            while (__atomic_load_n(&flag, __ATOMIC_ACQUIRE) != -(r - 1))
                ;
        rdmx__copy_stream(shared, from, LEN);
        __atomic_store_n(&flag, r, __ATOMIC_RELEASE);
    }
    CHECK(pthread_join(th, NULL) == 0);
    CHECKF(bad == 0, "%ld of %d rounds: the reader saw bytes of an older copy",
           bad, ROUNDS);

    free(shared);
    free(from);
    free(src_buf);
    free(dst_buf);
    th_log("ok: %u copies compared with memcpy, %d handed to another thread",
           checked, ROUNDS);
    return 0;
}
