/*
 * Seed corpora for the wire-decoder fuzz targets, written with the encoders
 * of src/rpc/wire.c (the bulk table has no encoder there; it is written
 * here from docs/PROTOCOL.md).
 *
 *   gen_seeds DIR    writes DIR/hdr/, DIR/bulk/, DIR/welcome/
 *
 * Each seed is in its target's input layout (see fuzz_*.c): a control byte
 * (3 = full @why buffer), then the target's parameters, then the bytes the
 * decoder sees. Valid messages of every kind plus one of each kind of
 * defect, so every check starts covered.
 */
#include "fuzz.h"
#include "util/hash.h"

#include <errno.h>
#include <sys/stat.h>

static const char *outdir;
static unsigned nwritten;

static void mkdir_p(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
}

static void seed(const char *target, const char *name, const void *pre,
                 size_t pre_len, const void *body, size_t body_len)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s/%s", outdir, target, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(pre, 1, pre_len, f) != pre_len ||
        (body_len && fwrite(body, 1, body_len, f) != body_len) ||
        fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    nwritten++;
}

static uint32_t name_id(const char *name)
{
    return (uint32_t)rdmx_fnv1a64(name, strlen(name));
}

/* --- header: u8 ctl, u64 data_len, header bytes --------------------------- */

/* A seed of header bytes @buf (@len) that came with @data_len bytes. */
static void hdr_raw(const char *name, unsigned ctl, uint64_t data_len,
                    const unsigned char *buf, size_t len)
{
    unsigned char pre[9];

    pre[0] = (unsigned char)ctl;
    rdmx_put_le64(pre + 1, data_len);
    seed("hdr", name, pre, sizeof(pre), buf, len);
}

/* Encode @h, then cut it to @cut bytes (0: keep the length encoded) or
 * append @extra zero bytes. */
static void hdr_seed(const char *name, const rdmx_rpc_hdr_t *h,
                     uint64_t data_len, size_t cut, size_t extra)
{
    unsigned char buf[FZ_HDR_MAX + 8] = {0};
    size_t len = rdmx_rpc_hdr_encode(h, buf);

    if (cut)
        len = cut;
    len += extra;
    hdr_raw(name, 3, data_len, buf, len);
}

static void hdr_init(rdmx_rpc_hdr_t *h, unsigned kind, uint64_t id)
{
    memset(h, 0, sizeof(*h));
    h->version = FZ_VERSION;
    h->kind = (uint8_t)kind;
    h->id = id;
    if (kind == FZ_REQUEST || kind == FZ_ONEWAY)
        h->handler = name_id("rdmx.ping");
    if (kind == FZ_ERROR)
        h->status = RDMX_ERR_PROTO;
}

static void hdr_seeds(void)
{
    static const char *kinds[] = {"",       "request",   "response", "error",
                                  "oneway", "cancel",    "ping",     "pong",
                                  "hello",  "unused9",   "unused10", "welcome"};
    rdmx_rpc_hdr_t h;
    unsigned char buf[FZ_V1_HDR_SIZE];
    char name[64];
    size_t len;

    /* Every kind as it is sent. */
    for (unsigned k = FZ_REQUEST; k <= FZ_KIND_MAX; k++) {
        hdr_init(&h, k, 0x0102030405060708ull + k);
        switch (k) {
        case FZ_REQUEST:
            h.flags = FZ_F_IDEMPOTENT;
            h.handler = name_id("kv.get");
            h.payload = 16;
            h.aux = 4 + 4 + 64;
            h.deadline_us = 5000000;
            break;
        case FZ_RESPONSE:
            h.payload = 100;
            break;
        case FZ_ERROR:
            h.payload = 20;
            break;
        case FZ_ONEWAY:
            h.handler = name_id("log.append");
            h.payload = 7;
            h.deadline_us = 1;
            break;
        case FZ_HELLO:
            h.aux = FZ_HELLO_SIZE;
            break;
        case FZ_UNUSED9:
            h.aux = 16;
            break;
        case FZ_UNUSED10:
            h.aux = 32;
            break;
        case FZ_WELCOME:
            h.aux = (uint32_t)rdmx_rpc_welcome_size(2);
            break;
        }
        snprintf(name, sizeof(name), "ok-%02u-%s", k, kinds[k]);
        hdr_seed(name, &h, (uint64_t)h.payload + h.aux, 0, 0);
    }

    /* Every length and flag combination: a REQUEST with each of the call
     * flags, with and without a deadline and aux (16, 20, 24 bytes); a
     * PONG (no deadline allowed) with and without aux. */
    for (unsigned f = 0; f < 16; f++) {
        hdr_init(&h, FZ_REQUEST, 100 + f);
        h.flags = (uint8_t)(f & FZ_F_CALL);
        h.deadline_us = (f & 4) ? 0xffffffffu : 0;
        h.aux = (f & 8) ? 3 : 0;
        snprintf(name, sizeof(name), "ok-request-flags%u%s%s", f & 3,
                 (f & 4) ? "-deadline" : "", (f & 8) ? "-aux" : "");
        hdr_seed(name, &h, 10, 0, 0);
    }
    hdr_init(&h, FZ_PONG, 200);
    hdr_seed("ok-pong", &h, 0, 0, 0);
    h.aux = 1;
    hdr_seed("ok-pong-aux", &h, 1, 0, 0);

    /* Largest lengths: aux and payload both 2^32 - 1. */
    hdr_init(&h, FZ_REQUEST, 42);
    h.aux = 0xffffffffu;
    hdr_seed("ok-max-lengths", &h, 0x1fffffffeull, 0, 0);
    hdr_seed("bad-payload-2^32", &h, 0x200000000ull, 0, 0);

    /* Each check that can fail. */
    hdr_init(&h, FZ_REQUEST, 43);
    hdr_seed("bad-short", &h, 0, FZ_HDR_MIN - 1, 0);
    hdr_seed("bad-long", &h, 0, 0, 1);
    hdr_seed("bad-long-word", &h, 0, 0, 4);
    hdr_raw("bad-null", 3 | 4, 0, NULL, 0);
    h.deadline_us = 7;
    hdr_seed("bad-deadline-cut", &h, 0, FZ_HDR_MIN, 0);
    h.aux = 2;
    hdr_seed("bad-both-cut", &h, 2, FZ_HDR_MIN + 4, 0);
    h.deadline_us = 0;
    hdr_seed("bad-aux-cut", &h, 2, FZ_HDR_MIN, 0);
    hdr_seed("bad-aux-over-data", &h, 1, 0, 0);
    len = rdmx_rpc_hdr_encode(&h, buf);
    rdmx_put_le32(buf + len - 4, 0);
    hdr_raw("bad-aux-zero", 3, 2, buf, len);
    hdr_init(&h, FZ_REQUEST, 44);
    h.deadline_us = 9;
    len = rdmx_rpc_hdr_encode(&h, buf);
    rdmx_put_le32(buf + FZ_HDR_MIN, 0);
    hdr_raw("bad-deadline-zero", 3, 0, buf, len);
    hdr_init(&h, FZ_REQUEST, 45);
    len = rdmx_rpc_hdr_encode(&h, buf);
    buf[0] = (unsigned char)(1 << 4 | FZ_REQUEST);
    hdr_raw("bad-version-1", 3, 0, buf, len);
    buf[0] = (unsigned char)(3 << 4 | FZ_REQUEST);
    hdr_raw("bad-version-3", 3, 0, buf, len);
    buf[0] = (unsigned char)(FZ_VERSION << 4);
    hdr_raw("bad-kind-0", 3, 0, buf, len);
    buf[0] = (unsigned char)(FZ_VERSION << 4 | (FZ_KIND_MAX + 1));
    hdr_raw("bad-kind-12", 3, 0, buf, len);
    buf[0] = (unsigned char)(FZ_VERSION << 4 | FZ_REQUEST);
    buf[1] = 0x04;
    hdr_raw("bad-flags", 3, 0, buf, len);
    buf[1] = 0;
    buf[3] = 1;
    hdr_raw("bad-reserved", 3, 0, buf, len);

    /* A deadline on a kind that carries none: PING with its word. */
    hdr_init(&h, FZ_PING, 46);
    len = rdmx_rpc_hdr_encode(&h, buf);
    buf[1] |= FZ_F_DEADLINE;
    rdmx_put_le32(buf + len, 1000);
    hdr_raw("bad-deadline-kind", 3, 0, buf, len + 4);
    /* Offset 4 of a kind with neither handler nor status. */
    buf[1] = 0;
    rdmx_put_le32(buf + 4, name_id("rdmx.ping"));
    hdr_raw("bad-word", 3, 0, buf, len);
    /* ERROR with a status that is not negative. */
    hdr_init(&h, FZ_ERROR, 47);
    h.status = 0;
    hdr_seed("bad-error-status", &h, 0, 0, 0);
    h.status = 1;
    hdr_seed("bad-error-positive", &h, 0, 0, 0);

    /* Version 1's 40-byte header (a REQUEST of "rdmx.ping", id 48, two
     * payload bytes), and its first 16 bytes. */
    memset(buf, 0, sizeof(buf));
    memcpy(buf, FZ_V1_MAGIC, 4);
    buf[4] = 1;          /* version */
    buf[5] = FZ_REQUEST; /* kind */
    rdmx_put_le32(buf + 8, name_id("rdmx.ping"));
    rdmx_put_le64(buf + 16, 48);
    rdmx_put_le32(buf + 24, 2);
    hdr_raw("bad-v1", 3, 2, buf, FZ_V1_HDR_SIZE);
    hdr_raw("bad-v1-16", 3, 2, buf, FZ_HDR_MIN);
}

/* --- bulk: u8 ctl, u8 max, table bytes ------------------------------------ */

/* A descriptor-shaped blob of @len bytes (an rdmx descriptor is 56 + rkey). */
static size_t fake_desc(unsigned char *p, size_t len, unsigned i)
{
    memset(p, 0, len);
    if (len >= 8) {
        rdmx_put_le32(p, 0x444d4452u); /* "RDMD" */
        rdmx_put_le16(p + 4, 1);
        rdmx_put_le16(p + 6, 3);
    }
    for (size_t j = 8; j < len; j++)
        p[j] = (unsigned char)(i * 31 + j);
    return len;
}

static void bulk_seed(const char *name, unsigned max, const unsigned *lens,
                      unsigned count, unsigned count_byte, size_t trailing)
{
    unsigned char pre[2] = {3, (unsigned char)max};
    unsigned char *buf;
    size_t len = 4, off;

    for (unsigned i = 0; i < count; i++)
        len += 4 + lens[i];
    len += trailing;
    buf = calloc(1, len);
    if (buf == NULL)
        exit(1);
    buf[0] = (unsigned char)count_byte;
    off = 4;
    for (unsigned i = 0; i < count; i++) {
        rdmx_put_le32(buf + off, lens[i]);
        off += 4 + fake_desc(buf + off + 4, lens[i], i);
    }
    seed("bulk", name, pre, sizeof(pre), buf, len);
    free(buf);
}

static void bulk_seeds(void)
{
    static const unsigned one[] = {72};
    static const unsigned eight[] = {72, 80, 1, 1024, 56, 64, 100, 200};
    static const unsigned zero[] = {0};
    static const unsigned big[] = {1025};
    static const unsigned longest[] = {1024, 1024, 1024, 1024,
                                       1024, 1024, 1024, 1024};
    unsigned char pre[2] = {3, 8};

    seed("bulk", "ok-empty", pre, sizeof(pre), NULL, 0);
    bulk_seed("ok-one", 8, one, 1, 1, 0);
    bulk_seed("ok-eight", 8, eight, 8, 8, 0);
    bulk_seed("ok-longest", 8, longest, 8, 8, 0);
    bulk_seed("bad-nine", 8, eight, 8, 9, 0);
    bulk_seed("bad-count-zero", 8, one, 0, 0, 0);
    bulk_seed("bad-trailing", 8, one, 1, 1, 3);
    bulk_seed("bad-truncated", 8, eight, 7, 8, 0);
    bulk_seed("bad-zero-length", 8, zero, 1, 1, 0);
    bulk_seed("bad-too-long", 8, big, 1, 1, 0);
    bulk_seed("bad-max-zero", 0, one, 1, 1, 0);
    {
        unsigned char t[4] = {1, 0, 1, 0};
        seed("bulk", "bad-reserved", pre, sizeof(pre), t, sizeof(t));
        seed("bulk", "bad-short", pre, sizeof(pre), t, 3);
    }
}

/* --- welcome: u8 ctl, u32 id, welcome bytes ------------------------------- */

static void welcome_seed(const char *name, uint32_t credits, unsigned n,
                         uint32_t lookup)
{
    static const char *names[] = {"rdmx.stats", "rdmx.ping", "kv.get", "kv.put",
                                  "log.append"};
    unsigned char pre[5] = {3};
    uint32_t *ids, *flags;
    rdmx_rpc_welcome_t wl;
    unsigned char *buf;
    size_t len = rdmx_rpc_welcome_size(n);
    char hname[32];

    memset(&wl, 0, sizeof(wl));
    wl.credits = credits;
    wl.worker = 1;
    wl.max_message = 64ull << 20;
    wl.nhandlers = n;
    ids = calloc(n + 1, sizeof(*ids));
    flags = calloc(n + 1, sizeof(*flags));
    buf = malloc(len);
    if (ids == NULL || flags == NULL || buf == NULL)
        exit(1);
    for (unsigned i = 0; i < n; i++) {
        snprintf(hname, sizeof(hname), "handler.%u", i);
        ids[i] = name_id(i < 5 ? names[i] : hname);
        flags[i] = i % 4; /* 0, ONEWAY, IDEMPOTENT, both */
    }
    rdmx_rpc_welcome_encode(&wl, ids, flags, buf);
    rdmx_put_le32(pre + 1, lookup);
    seed("welcome", name, pre, sizeof(pre), buf, len);
    free(buf);
    free(flags);
    free(ids);
}

static void welcome_seeds(void)
{
    uint32_t ping = name_id("rdmx.ping");

    welcome_seed("ok-empty", 256, 0, ping);
    welcome_seed("ok-handlers", 256, 5, ping);
    welcome_seed("ok-one-credit", 1, 5, name_id("kv.put"));
    welcome_seed("ok-missing-id", 16, 2, 0xdeadbeef);
    welcome_seed("ok-max-handlers", 256, FZ_HANDLERS_MAX, ping);
    welcome_seed("bad-zero-credits", 0, 2, ping);
    {
        unsigned char pre[5] = {3}, buf[24 + 8] = {0};
        rdmx_put_le32(buf, 1);
        rdmx_put_le32(buf + 16, 1);
        rdmx_put_le32(buf + 20, 2);
        seed("welcome", "bad-reserved", pre, sizeof(pre), buf, 32);
        rdmx_put_le32(buf + 20, 0);
        seed("welcome", "bad-short", pre, sizeof(pre), buf, 31);
        seed("welcome", "bad-fixed", pre, sizeof(pre), buf, 23);
    }
    {
        /* One handler too many, at the size it would need. */
        unsigned char pre[5] = {3};
        size_t len = 24 + 8 * (size_t)(FZ_HANDLERS_MAX + 1);
        unsigned char *buf = calloc(1, len);
        if (buf == NULL)
            exit(1);
        rdmx_put_le32(buf, 1);
        rdmx_put_le32(buf + 16, FZ_HANDLERS_MAX + 1);
        seed("welcome", "bad-too-many", pre, sizeof(pre), buf, len);
        free(buf);
    }
}

/* Ring records (docs/RPC_RINGS.md) from the encoder: a REQUEST with and
 * without a deadline and aux, and a record whose kind a ring refuses. */
static void ring_seed(const char *name, unsigned kind, uint32_t deadline,
                      uint32_t aux, size_t payload)
{
    unsigned char pre[1] = {kind == FZ_RESPONSE ? 7 : 3},
                  rec[8 + RDMX_RPC_HDR_MAX + 300];
    rdmx_rpc_hdr_t h;
    size_t off;

    memset(&h, 0, sizeof(h));
    h.version = FZ_VERSION;
    h.kind = (uint8_t)kind;
    h.handler = kind == FZ_RESPONSE ? 0 : name_id("echo");
    h.id = 0x100000007ull;
    h.deadline_us = kind == FZ_RESPONSE ? 0 : deadline;
    h.aux = aux;
    h.payload = (uint32_t)payload;
    off = rdmx_rpc_ring_record_encode(&h, aux + payload, 3, rec);
    memset(rec + off, 0x61, aux + payload);
    seed("ring", name, pre, sizeof(pre), rec, off + aux + payload);
}

static void ring_seeds(void)
{
    ring_seed("ok-request", FZ_REQUEST, 0, 0, 64);
    ring_seed("ok-deadline-aux", FZ_REQUEST, 5000, 12, 100);
    ring_seed("ok-empty", FZ_REQUEST, 0, 0, 0);
    ring_seed("bad-oneway", FZ_ONEWAY, 0, 0, 8);
    ring_seed("ok-response", FZ_RESPONSE, 0, 0, 64);
}

int main(int argc, char **argv)
{
    char path[512];
    static const char *targets[] = {"hdr", "bulk", "welcome", "ring"};

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    mkdir_p(outdir);
    for (unsigned i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", outdir, targets[i]);
        mkdir_p(path);
    }
    hdr_seeds();
    bulk_seeds();
    welcome_seeds();
    ring_seeds();
    printf("gen_seeds: %u seeds in %s\n", nwritten, outdir);
    return 0;
}
