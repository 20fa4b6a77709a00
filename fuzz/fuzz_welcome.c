/*
 * Fuzz target: rdmx_rpc_welcome_decode and rdmx_rpc_welcome_flags.
 *
 * Input: u8 ctl, u32 id (LE) to look up, then the WELCOME aux bytes.
 *   ctl bits 0-1: how @why is passed (fuzz.h); bit 2: pass aux = NULL.
 *
 * Properties:
 *  - the verdict equals an independent reading of docs/PROTOCOL.md
 *    (welcome_valid below); errors are RDMX_ERR_PROTO and say why;
 *  - a welcome that decodes has size == rdmx_rpc_welcome_size(nhandlers),
 *    credits != 0, the reserved word 0, the handler table inside the input
 *    right after the fixed part, and rdmx_rpc_welcome_encode of the
 *    decoded fields gives back the same bytes;
 *  - rdmx_rpc_welcome_flags gives the flags of the first entry with the id,
 *    or -1 when no entry has it.
 */
#include "fuzz.h"

/* docs/PROTOCOL.md, "WELCOME", independent of wire.c. */
static int welcome_valid(const unsigned char *p, size_t len)
{
    uint64_t n;

    if (p == NULL || len < FZ_WELCOME_FIXED)
        return 0;
    n = rdmx_get_le32(p + 16);
    if (rdmx_get_le32(p) == 0 || rdmx_get_le32(p + 20) != 0 ||
        n > FZ_HANDLERS_MAX)
        return 0;
    return len == FZ_WELCOME_FIXED + 8 * n;
}

/* The first entry with @id, read from the raw bytes; -1 if none. */
static int64_t ref_flags(const unsigned char *tbl, uint32_t n, uint32_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (rdmx_get_le32(tbl + 8 * (size_t)i) == id)
            return (int32_t)rdmx_get_le32(tbl + 8 * (size_t)i + 4);
    return -1;
}

static void check_lookup(const rdmx_rpc_welcome_t *wl, const unsigned char *tbl,
                         uint32_t id)
{
    int got = rdmx_rpc_welcome_flags(wl, id);
    int64_t want = ref_flags(tbl, wl->nhandlers, id);
    FUZZ_CHECK(got == want, "flags of 0x%08x: %d, table says %lld", id, got,
               (long long)want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const unsigned char *aux, *tbl;
    size_t len, i;
    unsigned ctl;
    uint32_t id, n, *ids, *flags;
    unsigned char *again;
    rdmx_rpc_welcome_t wl;
    fuzz_why_t why;
    rdmx_status_t st;
    int valid;

    if (size < 5)
        return 0;
    ctl = data[0];
    id = rdmx_get_le32(data + 1);
    aux = (ctl & 4) ? NULL : data + 5;
    len = size - 5;

    fuzz_why_init(&why, ctl);
    memset(&wl, 0xa5, sizeof(wl));
    st = rdmx_rpc_welcome_decode(aux, len, &wl, why.buf, why.size);
    valid = welcome_valid(aux, len);

    if (st != RDMX_OK) {
        FUZZ_CHECK(st == RDMX_ERR_PROTO, "status %d", st);
        FUZZ_CHECK(!valid, "a valid welcome was refused: %s",
                   why.buf && why.size > 1 ? why.buf : "?");
        fuzz_why_check_error(&why);
        fuzz_why_free(&why);
        return 0;
    }

    FUZZ_CHECK(valid, "an invalid welcome was accepted");
    n = wl.nhandlers;
    tbl = aux + FZ_WELCOME_FIXED;
    FUZZ_CHECK(len == rdmx_rpc_welcome_size(n),
               "%zu bytes, welcome_size(%u) = %zu", len, n,
               rdmx_rpc_welcome_size(n));
    FUZZ_CHECK(n <= FZ_HANDLERS_MAX, "%u handlers", n);
    FUZZ_CHECK(wl.credits != 0, "zero credits accepted");
    FUZZ_CHECK(wl.credits == rdmx_get_le32(aux) &&
                   wl.worker == rdmx_get_le32(aux + 4) &&
                   wl.max_message == rdmx_get_le64(aux + 8) &&
                   n == rdmx_get_le32(aux + 16),
               "fixed fields differ from the bytes");
    FUZZ_CHECK(wl.handlers == tbl, "handler table at %td, expected %d",
               wl.handlers - aux, FZ_WELCOME_FIXED);
    FUZZ_CHECK(FZ_WELCOME_FIXED + 8 * (size_t)n <= len,
               "handler table past the input");

    ids = malloc(n ? n * sizeof(*ids) : 1);
    flags = malloc(n ? n * sizeof(*flags) : 1);
    again = malloc(len);
    for (i = 0; i < n; i++) {
        ids[i] = rdmx_get_le32(tbl + 8 * i);
        flags[i] = rdmx_get_le32(tbl + 8 * i + 4);
    }
    memset(again, 0, len);
    rdmx_rpc_welcome_encode(&wl, ids, flags, again);
    FUZZ_CHECK(memcmp(again, aux, len) == 0,
               "re-encoding differs from the decoded bytes");

    check_lookup(&wl, tbl, id);
    for (i = 0; i < n && i < 8; i++)
        check_lookup(&wl, tbl, ids[i]);
    for (i = n > 8 ? n - 8 : n; i < n; i++)
        check_lookup(&wl, tbl, ids[i]);

    free(again);
    free(flags);
    free(ids);
    fuzz_why_free(&why);
    return 0;
}
