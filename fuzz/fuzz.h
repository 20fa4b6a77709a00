/*
 * Shared helpers of the wire-decoder fuzz targets (fuzz_*.c).
 *
 * Every target checks properties of what a decoder accepts, not only that it
 * does not crash; a violated property prints what was expected and aborts,
 * which libFuzzer reports as a crash and saves as an artifact.
 *
 * Inputs start with a control byte (see fuzz_why) that picks how the
 * decoder's optional @why buffer is passed; the targets' own layouts are
 * described at the top of each file and produced by gen_seeds.c.
 */
#ifndef RDMX_FUZZ_H
#define RDMX_FUZZ_H

#include "rpc/wire.h"
#include "util/endian.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: property violated: %s: ", __FILE__,        \
                    __LINE__, #cond);                                          \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            abort();                                                           \
        }                                                                      \
    } while (0)

/*
 * Wire values from docs/PROTOCOL.md, spelled here so the targets check the
 * protocol itself and do not follow renames in wire.h.
 */
enum {
    FZ_HDR_MIN = 16,     /* header without optional words */
    FZ_HDR_MAX = 24,     /* with a deadline and an aux word */
    FZ_VERSION = 2,      /* high nibble of byte 0 */
    FZ_V1_HDR_SIZE = 40, /* version 1's fixed header, refused by name */
    FZ_REQUEST = 1,
    FZ_RESPONSE = 2,
    FZ_ERROR = 3,
    FZ_ONEWAY = 4,
    FZ_CANCEL = 5,
    FZ_PING = 6,
    FZ_PONG = 7,
    FZ_HELLO = 8,
    FZ_UNUSED9 = 9,   /* (CHALLENGE and AUTH until authentication moved */
    FZ_UNUSED10 = 10, /* into the bootstrap: still valid header kinds) */
    FZ_WELCOME = 11,
    FZ_RING = 12,
    FZ_WAKE = 13,
    FZ_KIND_MAX = 13,
    FZ_F_IDEMPOTENT = 0x01,
    FZ_F_RETRY = 0x02,
    FZ_F_CALL = 0x03,     /* the two above: kept in the decoded flags */
    FZ_F_DEADLINE = 0x40, /* u32 deadline_us follows the 16 bytes */
    FZ_F_AUX = 0x80,      /* u32 aux follows (after the deadline) */
    FZ_F_KNOWN = 0xc3,
    FZ_BULK_MAX = 8, /* RDMX_RPC_BULK_MAX, what the server passes */
    FZ_BULK_DESC_MAX = 1024,
    FZ_HELLO_SIZE = 4,
    FZ_WELCOME_FIXED = 24,
    FZ_HANDLERS_MAX = 4096,
};

/* The first 4 bytes of a version-1 header, "RXRP" (le32 0x50525852). */
#define FZ_V1_MAGIC "RXRP"

#define FUZZ_WHY_SIZE 160

/*
 * The @why argument a decoder gets, chosen by the low 2 bits of @ctl:
 * NULL, a buffer with size 0, a 1-byte buffer, or a full buffer. The buffer
 * is heap-allocated at exactly its size so ASan sees any overflow; it is
 * pre-filled with 0x5a so an unwritten buffer is recognised.
 */
typedef struct {
    char *buf;
    size_t size;
    size_t alloc;
} fuzz_why_t;

static inline void fuzz_why_init(fuzz_why_t *w, unsigned ctl)
{
    static const size_t sizes[4] = {0, 0, 1, FUZZ_WHY_SIZE};
    ctl &= 3;
    w->size = sizes[ctl];
    w->alloc = ctl == 0 ? 0 : (w->size ? w->size : 1);
    w->buf = ctl == 0 ? NULL : malloc(w->alloc);
    if (w->buf != NULL)
        memset(w->buf, 0x5a, w->alloc);
}

/* After a decoder failed: with room for it, it must have said why. */
static inline void fuzz_why_check_error(const fuzz_why_t *w)
{
    size_t n;
    if (w->buf == NULL)
        return;
    if (w->size == 0) {
        FUZZ_CHECK(w->buf[0] == 0x5a, "why_size 0 but the buffer was written");
        return;
    }
    n = strnlen(w->buf, w->size);
    FUZZ_CHECK(n < w->size, "why is not NUL-terminated within %zu bytes",
               w->size);
    if (w->size > 1)
        FUZZ_CHECK(n > 0, "decoder failed without saying why");
}

static inline void fuzz_why_free(fuzz_why_t *w)
{
    free(w->buf);
    w->buf = NULL;
}

#endif /* RDMX_FUZZ_H */
