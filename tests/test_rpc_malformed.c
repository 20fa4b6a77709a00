/*
 * rpc_malformed: malformed RPC messages sent straight through UCX to the RPC
 * test server (--max-message 65536). The test speaks the wire protocol
 * itself (docs/PROTOCOL.md) on a core endpoint: it sends RPC active messages
 * with rdmx__msg_send (or ucp_am_send_nbx for forced rendezvous) and
 * receives the server's answers with its own handler for AM 16 on the
 * worker's UCX handle, decoding each one. Headers are built byte by byte
 * from the protocol document; rdmx_rpc_hdr_encode must build the same.
 *
 * For every message it sends, the test knows from the protocol document
 * what the server must do: which answer (ERROR with which status, PONG,
 * WELCOME, RESPONSE) with which id, or none; which counters grow. Checked:
 *  - phase 0, before HELLO: a REQUEST (ERROR PROTO), a ONEWAY (no answer),
 *    PING (PONG), kind 10 (once AUTH; authentication is in the bootstrap
 *    now: ERROR PROTO), HELLOs with an unknown feature, a short body or a
 * payload (ERROR PROTO); then a proper HELLO gets a WELCOME that decodes
 *    (credits, max_message 65536, the 13 handlers with their flags, the
 *    reserved word 0); a second HELLO is refused.
 *  - phase 1, after the handshake: truncated headers (0, 1, 8, 15 bytes:
 *    ERROR with id 0); version 1's 40-byte header and its first 16 bytes
 *    (ERROR with id 0 naming version 1, also for a version-1 ONEWAY);
 *    headers longer than their flags say (17, 20, 24, 40 bytes); DEADLINE,
 *    AUX and both announced with the wrong length; versions 0/1/3/15 (the
 *    message names the version), kinds 0/12/15, unknown flag bits;
 *    DEADLINE on kinds that carry none, DEADLINE with 0; AUX with 0 and
 *    with more aux than data (also 2^32 - 1); reserved bytes set; a word
 *    at offset 4 of PING, CANCEL and HELLO; malformed ERROR/RESPONSE/ONEWAY
 *    messages (never answered); well-formed kinds a server does not take;
 *    unknown handlers (REQUEST: NOT_FOUND, ONEWAY: nothing); payloads over
 *    max_message (REQUEST: TOO_BIG, ONEWAY: nothing); control kinds sent by
 *    rendezvous (ERROR PROTO); bulk tables that fail to decode (ERROR PROTO,
 *    also on a handler that takes no bulk, nothing for ONEWAY); descriptors
 *    that fail rdmx_rmem_unpack (garbage, a flipped byte, one byte short:
 *    the handler gets RDMX_ERR_BAD_DESCRIPTOR); a CANCEL for an unknown id
 *    (ignored); kinds 9 and 10 (ERROR PROTO). Good messages in
 *    between are served: echo by eager and by rendezvous, with a deadline
 *    and the call flags (20-byte header), bulk_pull with a real descriptor
 *    and a deadline (24 bytes), one-way messages with and without a
 *    deadline (count grows by exactly those).
 *  - phase 2: 3000 seeded random messages (random bytes of random lengths
 *    0..24, some with version 2 or version 1's magic, and valid headers of
 *    every kind and length with 0-2 random bytes or the length changed);
 *    the expected outcome of each is computed by an independent reading of
 *    the protocol's validation rules; every answer must match by id, kind
 *    and status (and an ERROR with id 0 its message, where one is named).
 *  - phase 3: two more raw connections send garbage before any HELLO and
 *    vanish without an orderly close.
 *  - batches (docs/PROTOCOL.md, "Batched messages"): five PINGs sent with
 *    "more" leave as one batch and are answered with a batch among the
 *    PONGs; malformed batches are served up to their first bad record;
 *    three PINGs held with "more" when the connection is closed leave
 *    before its BYE (counted by the server).
 * Afterwards: the server process is alive; a normal channel works; the
 * counters in "rdmx.stats" (requests, responses, errors, malformed,
 * unknown_handler, too_big, auth_failed, pings, no_credit, busy,
 * canceled) grew by exactly the computed amounts; the server exits cleanly
 * on SIGTERM.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "rpc_server.h"

#include "core/internal.h"
#include "core/ucx/ucx.h" /* raw UCX messages */
#include "raw_rpc.h"
#include "rpc/wire.h"
#include "util/endian.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGE 65536
#define NRANDOM     3000
#define DEADLINE_US 60000000u /* a deadline that does not pass in the test */

static rdmx_context_t *ctx;
static rdmx_worker_t *rw; /* raw worker: our own AM 16 handler */

/* ------------------------------------------------------------------------ */
/* Answers from the server                                                  */
/* ------------------------------------------------------------------------ */

typedef struct {
    rdmx_rpc_hdr_t h;
    int bad;           /* the server's header did not decode */
    int rndv;
    int data_done;
    size_t len;        /* aux + payload */
    unsigned char *data;
} answer_t;

static answer_t *answers;
static size_t nanswers, cap_answers;
static rdmx_ep_t *rndv_ep; /* endpoint for fetching rendezvous answers */

static void answer_data_done(rdmx_status_t st, size_t length, void *arg)
{
    answer_t *a = &answers[(size_t)(uintptr_t)arg];

    CHECKF(st == RDMX_OK, "fetching a rendezvous answer: %s",
           rdmx_status_name(st));
    CHECK(length == a->len);
    a->data_done = 1;
}

/* One answer: its header, and its data, copied (or, by rendezvous, being
 * received into the copy). */
static ucs_status_t take_answer(const void *header, size_t hlen, void *data,
                                size_t len, int rndv)
{
    answer_t *a;
    char why[160];

    if (nanswers == cap_answers) {
        cap_answers = cap_answers ? cap_answers * 2 : 1024;
        answers = realloc(answers, cap_answers * sizeof(*answers));
        CHECK(answers != NULL);
    }
    a = &answers[nanswers++];
    memset(a, 0, sizeof(*a));
    a->bad = rdmx_rpc_hdr_decode(header, hlen, len, &a->h, why,
                                 sizeof(why)) != RDMX_OK;
    CHECKF(!a->bad, "the server sent a malformed header: %s", why);
    a->len = len;
    a->data = th_alloc(len);
    if (rndv) {
        a->rndv = 1;
        CHECK(rndv_ep != NULL);
        rdmx__msg_recv(rndv_ep, data, a->data, len, answer_data_done,
                       (void *)(uintptr_t)(nanswers - 1));
        return UCS_INPROGRESS;
    }
    if (len)
        memcpy(a->data, data, len);
    a->data_done = 1;
    return UCS_OK;
}

static unsigned batches_in; /* batches the server sent */

/* ------------------------------------------------------------------------ */
/* Expectations                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint64_t id;
    uint8_t kind;        /* expected answer kind */
    int32_t status;      /* for ERROR */
    const char *msg_has; /* ERROR message must contain this, or NULL */
    int matched;
} expect_t;

static expect_t *exps;
static size_t nexps, cap_exps;
static unsigned exp_id0;   /* ERROR PROTO with id 0 (short, version 1) */
/* The messages some of those ERRORs must contain (NULL: any). */
static const char *id0_has[512];
static unsigned nid0_has;
static unsigned sent_msgs, sent_silent;

/* Server counters we predict (deltas). */
typedef struct {
    uint64_t requests, responses, errors, malformed, unknown_handler, too_big,
        auth_failed, pings, no_credit, busy, expired, canceled;
} counters_t;

static counters_t want;

static void expect(uint64_t id, uint8_t kind, int32_t status,
                   const char *msg_has)
{
    if (kind == 0) {
        sent_silent++;
        return;
    }
    if (kind == RDMX_RPC_MSG_ERROR) {
        want.errors++;
        want.responses++;
    } else if (kind == RDMX_RPC_MSG_RESPONSE) {
        want.responses++;
    }
    if (id == 0) {
        CHECK(kind == RDMX_RPC_MSG_ERROR && status == RDMX_ERR_PROTO);
        exp_id0++;
        if (msg_has != NULL) {
            CHECK(nid0_has < sizeof(id0_has) / sizeof(id0_has[0]));
            id0_has[nid0_has++] = msg_has;
        }
        return;
    }
    if (nexps == cap_exps) {
        cap_exps = cap_exps ? cap_exps * 2 : 1024;
        exps = realloc(exps, cap_exps * sizeof(*exps));
        CHECK(exps != NULL);
    }
    for (size_t i = 0; i < nexps; i++)
        CHECKF(exps[i].id != id, "test bug: id %llu used twice",
               (unsigned long long)id);
    exps[nexps].id = id;
    exps[nexps].kind = kind;
    exps[nexps].status = status;
    exps[nexps].msg_has = msg_has;
    exps[nexps].matched = 0;
    nexps++;
}

static const char *kind_name(unsigned k)
{
    static const char *n[] = {"0",     "REQUEST", "RESPONSE", "ERROR",
                              "ONEWAY", "CANCEL", "PING",     "PONG",
                              "HELLO", "CHALLENGE", "AUTH",   "WELCOME"};
    return k < 12 ? n[k] : "?";
}

static answer_t *find_answer(uint64_t id)
{
    for (size_t i = 0; i < nanswers; i++)
        if (answers[i].h.id == id)
            return &answers[i];
    return NULL;
}

/* Progress until every expected answer is here, then a little longer for
 * answers that should not come; check them all; forget them. */
static void settle(const char *phase)
{
    double deadline = th_now_ms() + 15000.0 * TH_SLOW;
    size_t i, matched_id0 = 0;
    unsigned char id0_taken[sizeof(id0_has) / sizeof(id0_has[0])] = {0};

    for (;;) {
        size_t got = 0, id0 = 0;
        for (i = 0; i < nanswers; i++) {
            if (!answers[i].data_done)
                continue;
            if (answers[i].h.id == 0)
                id0++;
            got++;
        }
        if (got >= nexps + exp_id0 && id0 >= exp_id0) {
            int all = 1;
            for (i = 0; i < nexps && all; i++)
                all = find_answer(exps[i].id) != NULL;
            if (all)
                break;
        }
        if (th_now_ms() > deadline) {
            for (i = 0; i < nexps; i++)
                if (find_answer(exps[i].id) == NULL)
                    th_log("%s: no answer to id %llu (want %s %s)", phase,
                           (unsigned long long)exps[i].id,
                           kind_name(exps[i].kind),
                           rdmx_status_name((rdmx_status_t)exps[i].status));
            th_fail(__FILE__, __LINE__,
                    "%s: %zu answers after 15 s, expected %zu (+%u with id 0)",
                    phase, nanswers, nexps, exp_id0);
        }
        rdmx_worker_wait(rw, 5);
    }
    th_progress_for(rw, 100); /* anything unexpected shows up now */

    for (i = 0; i < nanswers; i++) {
        answer_t *a = &answers[i];
        expect_t *e = NULL;
        char msg[300];
        size_t n = a->h.payload < sizeof(msg) - 1 ? a->h.payload
                                                   : sizeof(msg) - 1;

        CHECK(a->data_done);
        memcpy(msg, a->data + a->h.aux, n);
        msg[n] = '\0';
        if (a->h.id == 0 && a->h.kind == RDMX_RPC_MSG_ERROR) {
            unsigned j;

            CHECKF(a->h.status == RDMX_ERR_PROTO,
                   "%s: ERROR id 0 with %s (%s)", phase,
                   rdmx_status_name((rdmx_status_t)a->h.status), msg);
            /* Each message named for an ERROR with id 0 must be in an
             * answer of its own; the others may say anything. */
            for (j = 0; j < nid0_has; j++)
                if (!id0_taken[j] && strstr(msg, id0_has[j]) != NULL)
                    break;
            if (j < nid0_has)
                id0_taken[j] = 1;
            matched_id0++;
            continue;
        }
        for (size_t j = 0; j < nexps; j++)
            if (exps[j].id == a->h.id && !exps[j].matched) {
                e = &exps[j];
                break;
            }
        CHECKF(e != NULL,
               "%s: unexpected answer %s id %llu status %s \"%s\"", phase,
               kind_name(a->h.kind), (unsigned long long)a->h.id,
               rdmx_status_name((rdmx_status_t)a->h.status), msg);
        e->matched = 1;
        CHECKF(a->h.kind == e->kind,
               "%s: id %llu answered with %s (%s \"%s\"), expected %s %s",
               phase, (unsigned long long)a->h.id, kind_name(a->h.kind),
               rdmx_status_name((rdmx_status_t)a->h.status), msg,
               kind_name(e->kind), rdmx_status_name((rdmx_status_t)e->status));
        if (e->kind == RDMX_RPC_MSG_ERROR) {
            CHECKF(a->h.status == e->status,
                   "%s: id %llu: ERROR %s (\"%s\"), expected %s", phase,
                   (unsigned long long)a->h.id,
                   rdmx_status_name((rdmx_status_t)a->h.status), msg,
                   rdmx_status_name((rdmx_status_t)e->status));
            CHECKF(a->h.aux == 0 && a->h.payload > 0 && a->h.payload <= 255,
                   "%s: id %llu: ERROR with aux %u, message of %u bytes",
                   phase, (unsigned long long)a->h.id, a->h.aux,
                   a->h.payload);
            if (e->msg_has != NULL)
                CHECKF(strstr(msg, e->msg_has) != NULL,
                       "%s: id %llu: message \"%s\" lacks \"%s\"", phase,
                       (unsigned long long)a->h.id, msg, e->msg_has);
        }
    }
    CHECKF(matched_id0 == exp_id0, "%s: %zu ERRORs with id 0, expected %u",
           phase, matched_id0, exp_id0);
    for (i = 0; i < nid0_has; i++)
        CHECKF(id0_taken[i], "%s: no ERROR with id 0 says \"%s\"", phase,
               id0_has[i]);
    for (i = 0; i < nexps; i++)
        CHECKF(exps[i].matched, "%s: id %llu never answered", phase,
               (unsigned long long)exps[i].id);
    th_log("%s: %u messages sent, %zu answers all as expected (%u ERROR id "
           "0), %u rightly unanswered",
           phase, sent_msgs, nanswers, exp_id0, sent_silent);
}

/* Release the answers of a phase (keep the expectations' counters). */
static void forget_answers(void)
{
    for (size_t i = 0; i < nanswers; i++)
        free(answers[i].data);
    nanswers = 0;
    nexps = 0;
    exp_id0 = 0;
    nid0_has = 0;
    sent_msgs = sent_silent = 0;
}

/* ------------------------------------------------------------------------ */
/* Sending                                                                  */
/* ------------------------------------------------------------------------ */

static int sends_pending;

static void send_done(rdmx_status_t st, size_t length, void *arg)
{
    (void)st;
    (void)length;
    free(arg);
    sends_pending--;
}

/* Send an RPC active message with any header; the data is copied. */
static void raw_send(rdmx_ep_t *ep, const void *hdr, size_t hlen,
                     const void *data, size_t len)
{
    void *copy = th_alloc(len);
    rdmx_status_t st;

    if (len)
        memcpy(copy, data, len);
    st = rdmx__msg_send(ep, RDMX_AM_RPC, hdr, hlen, copy, len, send_done, copy);
    if (st == RDMX_OK) {
        free(copy);
    } else {
        CHECKF(st == RDMX_INPROGRESS, "rdmx__am_send: %s",
               rdmx_status_name(st));
        sends_pending++;
    }
    sent_msgs++;
}

/* Send through UCX directly (headers over RDMX_OP_HDR_MAX bytes, forced
 * rendezvous) and wait for the send to complete. */
static void raw_send_ucp(rdmx_ep_t *ep, const void *hdr, size_t hlen,
                         const void *data, size_t len, int rndv)
{
    ucp_request_param_t p;
    ucs_status_ptr_t r;
    double deadline = th_now_ms() + 10000.0 * TH_SLOW;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY | (rndv ? UCP_AM_SEND_FLAG_RNDV : 0);
    r = ucp_am_send_nbx(rdmx__ucx_ep(ep), RDMX_AM_RPC, hdr, hlen, data, len, &p);
    CHECKF(!UCS_PTR_IS_ERR(r), "ucp_am_send_nbx: %s",
           ucs_status_string(UCS_PTR_STATUS(r)));
    if (r != NULL) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) {
            CHECKF(th_now_ms() < deadline,
                   "a %s send of %zu bytes (header %zu) never completed",
                   rndv ? "rendezvous" : "direct", len, hlen);
            rdmx_worker_progress(rw);
        }
        CHECKF(ucp_request_check_status(r) == UCS_OK, "direct send: %s",
               ucs_status_string(ucp_request_check_status(r)));
        ucp_request_free(r);
    }
    sent_msgs++;
}

static void wait_sends(void)
{
    double deadline = th_now_ms() + 10000.0 * TH_SLOW;

    while (sends_pending > 0) {
        CHECKF(th_now_ms() < deadline, "%d raw sends never completed",
               sends_pending);
        rdmx_worker_wait(rw, 5);
    }
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void put_le64(unsigned char *p, uint64_t v)
{
    put_le32(p, (uint32_t)v);
    put_le32(p + 4, (uint32_t)(v >> 32));
}

/* Header values from docs/PROTOCOL.md ("Header", "Versioning"), spelled
 * here so the test reads the protocol, not wire.h. */
enum {
    SPEC_HDR_MIN = 16,      /* version/kind, flags, reserved, word, id */
    SPEC_VERSION = 2,       /* high nibble of byte 0; kind is the low one */
    SPEC_F_CALL = 0x03,     /* IDEMPOTENT, RETRY */
    SPEC_F_DEADLINE = 0x40, /* u32 deadline_us follows the 16 bytes */
    SPEC_F_AUX = 0x80,      /* u32 aux follows (after the deadline) */
    SPEC_F_KNOWN = 0xc3,
    SPEC_V1_SIZE = 40 /* version 1's header, which began "RXRP" */
};

static int spec_is_call(unsigned kind)
{
    return kind == RDMX_RPC_MSG_REQUEST || kind == RDMX_RPC_MSG_ONEWAY;
}

/* A version-1 header: its first 4 bytes are "RXRP". */
static int spec_is_v1(const unsigned char *p, size_t hlen)
{
    return hlen >= 4 && memcmp(p, "RXRP", 4) == 0;
}

/* What a header that fails still yields for the answer: its kind and id
 * from 16 bytes on, unless it is a version-1 header; else 0 and 0. */
static void spec_kind_id(const unsigned char *p, size_t hlen, unsigned *kind_p,
                         uint64_t *id_p)
{
    *kind_p = 0;
    *id_p = 0;
    if (hlen >= SPEC_HDR_MIN && !spec_is_v1(p, hlen)) {
        *kind_p = p[0] & 0x0f;
        *id_p = get64(p + 8);
    }
}

/*
 * A version-2 header of @kind (0..15) as docs/PROTOCOL.md lays it out, in
 * @out (room for 24 bytes); @return its length. @flags are the call's
 * (bits 0-1); DEADLINE is set when @deadline_us is non-zero on a REQUEST or
 * ONEWAY (other kinds carry none), AUX when @aux is non-zero. The word at
 * offset 4 is @handler for REQUEST and ONEWAY, @status for ERROR, else 0.
 * rdmx_rpc_hdr_encode of the same fields must give the same bytes.
 */
static size_t mkhdr(unsigned char *out, unsigned kind, unsigned flags,
                    uint32_t handler, int32_t status, uint64_t id, uint32_t aux,
                    uint32_t deadline_us)
{
    const int call = spec_is_call(kind);
    uint32_t word = call                         ? handler
                    : kind == RDMX_RPC_MSG_ERROR ? (uint32_t)status
                                                 : 0;
    unsigned char enc[RDMX_RPC_HDR_MAX];
    rdmx_rpc_hdr_t h;
    size_t n = SPEC_HDR_MIN, elen;

    CHECK(kind <= 15 && (flags & ~SPEC_F_CALL) == 0);
    out[0] = (unsigned char)(SPEC_VERSION << 4 | kind);
    out[1] =
        (unsigned char)(flags | (call && deadline_us ? SPEC_F_DEADLINE : 0) |
                        (aux ? SPEC_F_AUX : 0));
    out[2] = 0;
    out[3] = 0;
    put_le32(out + 4, word);
    put_le64(out + 8, id);
    if (call && deadline_us != 0) {
        put_le32(out + n, deadline_us);
        n += 4;
    }
    if (aux != 0) {
        put_le32(out + n, aux);
        n += 4;
    }

    memset(&h, 0, sizeof(h));
    h.version = RDMX_RPC_VERSION;
    h.kind = (uint8_t)kind;
    h.flags = (uint8_t)flags;
    h.handler = handler;
    h.status = status;
    h.id = id;
    h.aux = aux;
    h.deadline_us = deadline_us;
    memset(enc, 0x5a, sizeof(enc));
    elen = rdmx_rpc_hdr_encode(&h, enc);
    CHECKF(elen == n && memcmp(enc, out, n) == 0,
           "rdmx_rpc_hdr_encode gave %zu bytes, docs/PROTOCOL.md %zu (kind "
           "%u, flags 0x%x, aux %u, deadline %u)",
           elen, n, kind, flags, aux, deadline_us);
    return n;
}

/* Version 1's 40-byte header (magic "RXRP", version 1, kind, flags 0,
 * handler, status 0, id, payload, aux 0, deadline 0, reserved 0). */
static void mkhdr_v1(unsigned char out[SPEC_V1_SIZE], unsigned kind,
                     uint32_t handler, uint64_t id, uint32_t payload)
{
    memset(out, 0, SPEC_V1_SIZE);
    memcpy(out, "RXRP", 4);
    out[4] = 1;
    out[5] = (unsigned char)kind;
    put_le32(out + 8, handler);
    put_le64(out + 16, id);
    put_le32(out + 24, payload);
}

/* A well-formed message of @kind with @aux bytes of aux then @plen bytes of
 * payload (both from @data), no deadline. */
static void send_msg(rdmx_ep_t *ep, unsigned kind, uint32_t handler,
                     uint64_t id, const void *data, uint32_t aux,
                     uint32_t plen)
{
    unsigned char h[RDMX_RPC_HDR_MAX];
    size_t hlen;

    hlen = mkhdr(h, kind, 0, handler, kind == RDMX_RPC_MSG_ERROR ? -1 : 0, id,
                 aux, 0);
    raw_send(ep, h, hlen, data, (size_t)aux + plen);
}

static uint64_t next_id = 1000;

static uint64_t nid(void)
{
    return next_id++;
}

/* ------------------------------------------------------------------------ */
/* Normal channel: rdmx.stats                                               */
/* ------------------------------------------------------------------------ */

static const char *server_text(rdmx_channel_t *ch)
{
    static char text[65536];
    size_t len = 0;

    CHECK_OK(rdmx_call(ch, "rdmx.stats", NULL, 0, text, sizeof(text) - 1, NULL,
                       &len));
    text[len] = '\0';
    return text;
}

static uint64_t text_stat(const char *text, const char *key)
{
    size_t klen = strlen(key);
    const char *p = text;

    while (p != NULL && *p) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ' ') {
            unsigned long long v;
            CHECK(sscanf(p + klen + 1, "%llu", &v) == 1);
            return v;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    th_fail(__FILE__, __LINE__, "no '%s' in rdmx.stats:\n%s", key, text);
}

static counters_t read_counters(rdmx_channel_t *ch)
{
    const char *t = server_text(ch);
    counters_t c;

#define R(f) c.f = text_stat(t, #f)
    R(requests); R(responses); R(errors); R(malformed); R(unknown_handler);
    R(too_big); R(auth_failed); R(pings); R(no_credit); R(busy);
    R(expired); R(canceled);
#undef R
    return c;
}

static uint64_t oneway_count(rdmx_channel_t *ch)
{
    uint64_t n = 0;
    size_t len = 0;

    CHECK_OK(rdmx_call(ch, "count", NULL, 0, &n, sizeof(n), NULL, &len));
    CHECK_EQ_U64(len, 8);
    return n;
}

/* ------------------------------------------------------------------------ */
/* Phase 0: before and at the handshake                                     */
/* ------------------------------------------------------------------------ */

static uint32_t id_echo, id_oneway, id_bulk_pull, id_spin;

static void phase0(rdmx_ep_t *ep)
{
    unsigned char hello[RDMX_RPC_HELLO_SIZE + 1], proof[32];
    uint64_t id;
    answer_t *a;
    rdmx_rpc_welcome_t wl;
    char why[160];

    memset(hello, 0, sizeof(hello));
    memset(proof, 7, sizeof(proof));

    /* Calls before HELLO: PROTO (a server without a secret). */
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_REQUEST, id_echo, id, "hi", 0, 2);
    expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, NULL);
    want.requests++;
    want.malformed++;
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_ONEWAY, id_oneway, id, "hi", 0, 2);
    expect(id, 0, 0, NULL);
    want.requests++;
    want.malformed++;
    /* PING is served at any stage. */
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_PING, 0, id, NULL, 0, 0);
    expect(id, RDMX_RPC_MSG_PONG, 0, NULL);
    want.pings++;
    /* Kind 10 (AUTH in protocol version 2): no longer an RPC message. */
    id = nid();
    send_msg(ep, 10, 0, id, proof, sizeof(proof), 0);
    expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, NULL);
    want.malformed++;
    /* Bad HELLOs: a feature nobody defined, short body, a payload. */
    hello[0] = 2;
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_HELLO, 0, id, hello, RDMX_RPC_HELLO_SIZE, 0);
    expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, NULL);
    want.malformed++;
    hello[0] = 0;
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_HELLO, 0, id, hello, RDMX_RPC_HELLO_SIZE - 1, 0);
    expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, NULL);
    want.malformed++;
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_HELLO, 0, id, hello, RDMX_RPC_HELLO_SIZE, 1);
    expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, NULL);
    want.malformed++;
    /* The real one. */
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_HELLO, 0, id, hello, RDMX_RPC_HELLO_SIZE, 0);
    expect(id, RDMX_RPC_MSG_WELCOME, 0, NULL);
    /* A second HELLO. */
    {
        uint64_t id2 = nid();
        send_msg(ep, RDMX_RPC_MSG_HELLO, 0, id2, hello, RDMX_RPC_HELLO_SIZE, 0);
        expect(id2, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, NULL);
        want.malformed++;
    }
    wait_sends();
    settle("phase 0 (handshake)");

    a = find_answer(id);
    CHECK(a != NULL && a->h.kind == RDMX_RPC_MSG_WELCOME);
    CHECK(a->h.payload == 0);
    CHECKF(rdmx_rpc_welcome_decode(a->data, a->h.aux, &wl, why,
                                   sizeof(why)) == RDMX_OK,
           "WELCOME does not decode: %s", why);
    CHECK_EQ_U64(wl.credits, 256);
    CHECK_EQ_U64(wl.max_message, MAX_MESSAGE);
    CHECK_EQ_U64(wl.nhandlers, 13);
    CHECK(wl.worker < 2);
    CHECK_EQ_U64(rdmx_rpc_welcome_flags(&wl, id_echo), RDMX_RPC_IDEMPOTENT);
    CHECK_EQ_U64(rdmx_rpc_welcome_flags(&wl, id_oneway), RDMX_RPC_ONEWAY);
    CHECK_EQ_U64(rdmx_rpc_welcome_flags(&wl, id_spin), 0);
    CHECK_EQ_U64(rdmx_rpc_welcome_flags(&wl, rdmx_rpc_id("rdmx.stats")),
                 RDMX_RPC_IDEMPOTENT);
    CHECK(rdmx_rpc_welcome_flags(&wl, rdmx_rpc_id("nope")) == -1);
    forget_answers();
}

/* ------------------------------------------------------------------------ */
/* Phase 1: structured garbage on a ready connection                        */
/* ------------------------------------------------------------------------ */

/* What the server does with a header that fails to decode (@kind and @id
 * as spec_kind_id reads them): malformed, answered with ERROR PROTO (whose
 * message has @msg_has, if not NULL) unless it claims to be ONEWAY,
 * RESPONSE or ERROR. */
static void expect_bad(unsigned kind, uint64_t id, const char *msg_has)
{
    want.malformed++;
    if (kind == RDMX_RPC_MSG_ONEWAY || kind == RDMX_RPC_MSG_RESPONSE ||
        kind == RDMX_RPC_MSG_ERROR)
        expect(id, 0, 0, NULL);
    else
        expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, msg_has);
}

/* Send a header that fails to decode. */
static void bad(rdmx_ep_t *ep, const unsigned char *h, size_t hlen,
                const void *data, size_t len, const char *msg_has)
{
    uint64_t id;
    unsigned kind;

    spec_kind_id(h, hlen, &kind, &id);
    if (hlen <= RDMX_OP_HDR_MAX)
        raw_send(ep, h, hlen, data, len);
    else
        raw_send_ucp(ep, h, hlen, data, len, 0);
    expect_bad(kind, id, msg_has);
}

/* A REQUEST (or ONEWAY) of "bulk_pull"/"echo"/"oneway" with bulk table
 * @aux (@alen bytes) that fails to decode. */
static void bad_bulk(rdmx_ep_t *ep, unsigned kind, uint32_t handler,
                     const unsigned char *aux, uint32_t alen)
{
    uint64_t id = nid();
    unsigned char buf[2048];

    CHECK(alen + 3 <= sizeof(buf));
    memcpy(buf, aux, alen);
    memcpy(buf + alen, "abc", 3);
    send_msg(ep, kind, handler, id, buf, alen, 3);
    want.requests++;
    want.malformed++;
    expect(id, kind == RDMX_RPC_MSG_ONEWAY ? 0 : RDMX_RPC_MSG_ERROR,
           RDMX_ERR_PROTO, "bulk");
}

/* A REQUEST to bulk_pull with one descriptor of @dlen bytes and
 * @deadline_us (0: none). */
static uint64_t bulk_req(rdmx_ep_t *ep, const unsigned char *desc,
                         uint32_t dlen, uint32_t deadline_us)
{
    unsigned char aux[2048], h[RDMX_RPC_HDR_MAX];
    uint64_t id = nid();
    size_t hlen;

    CHECK(8 + dlen <= sizeof(aux));
    memset(aux, 0, 8);
    aux[0] = 1;
    put_le32(aux + 4, dlen);
    memcpy(aux + 8, desc, dlen);
    hlen = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_bulk_pull, 0, id, 8 + dlen,
                 deadline_us);
    raw_send(ep, h, hlen, aux, 8 + dlen);
    want.requests++;
    return id;
}

static void phase1(rdmx_ep_t *ep, rdmx_channel_t *sch)
{
    static const unsigned char zero4[RDMX_RPC_HELLO_SIZE];
    unsigned char h[64], data[MAX_MESSAGE + 64], aux[2048];
    unsigned char desc[1024];
    size_t dlen = 0, n;
    uint64_t id, id_echo_ok, id_dl_ok, id_rndv_ok, id_bulk_ok;
    unsigned char *big = th_alloc(MAX_MESSAGE + 1);
    unsigned char *region = th_alloc(TH_MIB);
    rdmx_mr_t *mr;
    answer_t *a;
    uint64_t oneways0 = oneway_count(sch);
    int i;

    memset(data, 0x33, sizeof(data));

    /* Truncated headers: id 0. */
    {
        static const size_t lens[] = {0, 1, 8, 15};
        mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, 77, 0, 0);
        for (i = 0; i < 4; i++)
            bad(ep, h, lens[i], NULL, 0, NULL);
    }
    /* Version 1's header, whole and its first 16 bytes: refused by name
     * with id 0 (its id is not read), also as a ONEWAY (nor is its kind:
     * byte 0, 'R', would say RESPONSE, which is not answered). */
    mkhdr_v1(h, RDMX_RPC_MSG_REQUEST, id_echo, nid(), 2);
    bad(ep, h, SPEC_V1_SIZE, "ab", 2, "version-1 header");
    bad(ep, h, SPEC_HDR_MIN, "ab", 2, "version-1 header");
    mkhdr_v1(h, RDMX_RPC_MSG_ONEWAY, id_oneway, nid(), 2);
    bad(ep, h, SPEC_V1_SIZE, "ab", 2, "version-1 header");
    /* Headers longer than their flags say (no optional word announced). */
    {
        static const size_t lens[] = {17, 20, 24, 40};
        for (i = 0; i < 4; i++) {
            memset(h, 0, sizeof(h));
            mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 0, 0);
            bad(ep, h, lens[i], NULL, 0, "header of");
        }
    }
    /* Each optional word's flag with the wrong length: DEADLINE, AUX and
     * both announced, a word missing or one too many. */
    {
        static const struct {
            uint32_t aux, deadline;
            size_t len;
        } c[] = {{0, 5000, 16}, {0, 5000, 24}, {2, 0, 16},
                 {2, 0, 24},    {2, 5000, 20}, {2, 5000, 16}};
        for (i = 0; i < 6; i++) {
            memset(h, 0, sizeof(h));
            mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), c[i].aux,
                  c[i].deadline);
            bad(ep, h, c[i].len, "ab", c[i].aux, "header of");
        }
    }
    /* Versions other than 2: the message names the version. */
    {
        static const unsigned vers[] = {0, 1, 3, 15};
        static char msgs[4][32];
        for (i = 0; i < 4; i++) {
            n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 0, 0);
            h[0] = (unsigned char)(vers[i] << 4 | RDMX_RPC_MSG_REQUEST);
            snprintf(msgs[i], sizeof(msgs[i]), "version %u", vers[i]);
            bad(ep, h, n, "ab", 2, msgs[i]);
        }
    }
    /* Unknown kinds: low nibble 0, 12, 15. */
    {
        static const unsigned kinds[] = {0, 12, 15};
        for (i = 0; i < 3; i++) {
            n = mkhdr(h, kinds[i], 0, 0, 0, nid(), 0, 0);
            bad(ep, h, n, NULL, 0, "kind");
        }
    }
    /* Unknown flags: bits 2..5. */
    for (i = 2; i <= 5; i++) {
        n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 0, 0);
        h[1] |= (unsigned char)(1u << i);
        bad(ep, h, n, NULL, 0, "flags");
    }
    /* DEADLINE on kinds that carry none: PING and CANCEL (answered),
     * RESPONSE (not); a HELLO with its aux word after the deadline. */
    {
        static const unsigned kinds[] = {RDMX_RPC_MSG_PING, RDMX_RPC_MSG_CANCEL,
                                         RDMX_RPC_MSG_RESPONSE};
        for (i = 0; i < 3; i++) {
            n = mkhdr(h, kinds[i], 0, 0, 0, nid(), 0, 0);
            h[1] |= SPEC_F_DEADLINE;
            put_le32(h + n, DEADLINE_US);
            bad(ep, h, n + 4, NULL, 0, "deadline");
        }
        mkhdr(h, RDMX_RPC_MSG_HELLO, 0, 0, 0, nid(), RDMX_RPC_HELLO_SIZE, 0);
        h[1] |= SPEC_F_DEADLINE;
        put_le32(h + 16, DEADLINE_US);
        put_le32(h + 20, RDMX_RPC_HELLO_SIZE);
        bad(ep, h, 24, zero4, sizeof(zero4), "deadline");
    }
    /* DEADLINE with 0: REQUEST (answered), ONEWAY (not). */
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 0, 1);
    put_le32(h + 16, 0);
    bad(ep, h, n, "ab", 2, "deadline");
    n = mkhdr(h, RDMX_RPC_MSG_ONEWAY, 0, id_oneway, 0, nid(), 0, 1);
    put_le32(h + 16, 0);
    bad(ep, h, n, "ab", 2, NULL);
    /* AUX with 0; more aux than data (also 2^32 - 1 with one byte, and
     * after a deadline). */
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 2, 0);
    put_le32(h + 16, 0);
    bad(ep, h, n, "ab", 2, "aux");
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 3, 0);
    bad(ep, h, n, "ab", 2, "aux");
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 0xffffffffu, 0);
    bad(ep, h, n, "a", 1, "aux");
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 5, DEADLINE_US);
    bad(ep, h, n, data, 4, "aux");
    /* Reserved bytes 2 and 3. */
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 0, 0);
    h[2] = 1;
    bad(ep, h, n, NULL, 0, "reserved");
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, nid(), 0, 0);
    h[3] = 0x80;
    bad(ep, h, n, NULL, 0, "reserved");
    /* A word at offset 4 of kinds that carry neither handler nor status. */
    n = mkhdr(h, RDMX_RPC_MSG_PING, 0, 0, 0, nid(), 0, 0);
    put_le32(h + 4, 1);
    bad(ep, h, n, NULL, 0, "offset 4");
    n = mkhdr(h, RDMX_RPC_MSG_CANCEL, 0, 0, 0, nid(), 0, 0);
    put_le32(h + 4, 0x80000000u);
    bad(ep, h, n, NULL, 0, "offset 4");
    n = mkhdr(h, RDMX_RPC_MSG_HELLO, 0, 0, 0, nid(), RDMX_RPC_HELLO_SIZE, 0);
    put_le32(h + 4, id_echo);
    bad(ep, h, n, zero4, sizeof(zero4), "offset 4");
    /* Malformed messages claiming to be ERROR (status 0, status > 0),
     * RESPONSE (more aux than data; a handler at offset 4, as version 1
     * echoed it), ONEWAY (an unknown flag): no answer. */
    n = mkhdr(h, RDMX_RPC_MSG_ERROR, 0, 0, -1, nid(), 0, 0);
    put_le32(h + 4, 0);
    bad(ep, h, n, NULL, 0, NULL);
    n = mkhdr(h, RDMX_RPC_MSG_ERROR, 0, 0, -1, nid(), 0, 0);
    put_le32(h + 4, 7);
    bad(ep, h, n, NULL, 0, NULL);
    n = mkhdr(h, RDMX_RPC_MSG_RESPONSE, 0, 0, 0, nid(), 9, 0);
    bad(ep, h, n, data, 3, NULL);
    n = mkhdr(h, RDMX_RPC_MSG_RESPONSE, 0, 0, 0, nid(), 0, 0);
    put_le32(h + 4, id_echo);
    bad(ep, h, n, NULL, 0, NULL);
    n = mkhdr(h, RDMX_RPC_MSG_ONEWAY, 0, id_oneway, 0, nid(), 0, 0);
    h[1] |= 0x10;
    bad(ep, h, n, NULL, 0, NULL);

    /* Well-formed kinds a server does not take. */
    {
        static const unsigned kinds[] = {
            RDMX_RPC_MSG_RESPONSE, RDMX_RPC_MSG_ERROR, RDMX_RPC_MSG_PONG, 9, 10,
            RDMX_RPC_MSG_WELCOME,  RDMX_RPC_MSG_RING};
        for (i = 0; i < 7; i++) {
            id = nid();
            send_msg(ep, kinds[i], 0, id, data, kinds[i] == 9 ? 16 : 0, 0);
            want.malformed++;
            expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, "kind");
        }
    }

    /* Unknown handler. */
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_REQUEST, rdmx_rpc_id("no_such_handler"), id,
             "x", 0, 1);
    want.requests++;
    want.unknown_handler++;
    expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_NOT_FOUND, NULL);
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_ONEWAY, rdmx_rpc_id("no_such_oneway"), id, "x",
             0, 1);
    want.requests++;
    want.unknown_handler++;
    expect(id, 0, 0, NULL);

    /* Over max_message (eager path and rendezvous). */
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_REQUEST, id_echo, id, big, 0, MAX_MESSAGE + 1);
    want.requests++;
    want.too_big++;
    expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_TOO_BIG, NULL);
    id = nid();
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, id, 0, 0);
    raw_send_ucp(ep, h, n, big, MAX_MESSAGE + 1, 1);
    want.requests++;
    want.too_big++;
    expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_TOO_BIG, NULL);
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_ONEWAY, id_oneway, id, big, 0, MAX_MESSAGE + 1);
    want.requests++;
    want.too_big++;
    expect(id, 0, 0, NULL);

    /* Control kinds by rendezvous. */
    {
        static const unsigned kinds[] = {RDMX_RPC_MSG_CANCEL,
                                         RDMX_RPC_MSG_PING,
                                         RDMX_RPC_MSG_HELLO};
        for (i = 0; i < 3; i++) {
            id = nid();
            n = mkhdr(h, kinds[i], 0, 0, 0, id, 0, 0);
            raw_send_ucp(ep, h, n, data, 100, 1);
            want.malformed++;
            expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, NULL);
        }
    }

    /* Bulk tables that fail to decode. */
    memset(aux, 0, sizeof(aux));
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 2); /* < 4 bytes */
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 4); /* count 0 */
    aux[0] = 9;
    for (i = 0; i < 9; i++)
        put_le32(aux + 4 + 8 * i, 4);
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 4 + 9 * 8); /* 9 */
    memset(aux, 0, sizeof(aux));
    aux[0] = 1;
    aux[2] = 1; /* reserved */
    put_le32(aux + 4, 4);
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 12);
    aux[2] = 0;
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 6); /* length cut */
    put_le32(aux + 4, 0);
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 8); /* length 0 */
    put_le32(aux + 4, 1025);
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 8 + 1025);
    put_le32(aux + 4, 100);
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 8 + 50); /* short */
    put_le32(aux + 4, 4);
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 8 + 4 + 1);
    aux[0] = 2; /* second entry missing */
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_bulk_pull, aux, 8 + 4);
    aux[0] = 0; /* count 0 on a handler that takes no bulk, and on ONEWAY */
    bad_bulk(ep, RDMX_RPC_MSG_REQUEST, id_echo, aux, 4);
    bad_bulk(ep, RDMX_RPC_MSG_ONEWAY, id_oneway, aux, 4);

    /* Descriptors that decode as a table but not as a descriptor: the
     * handler's rdmx_rpc_req_bulk fails; it answers the error. */
    th_fill(region, TH_MIB, th_seed(11, 0, 0));
    CHECK_OK(rdmx_mem_register(ctx, region, TH_MIB, RDMX_ACCESS_READ, &mr));
    CHECK_OK(rdmx_mr_pack(mr, 0, TH_MIB, RDMX_ACCESS_READ, desc, sizeof(desc),
                          &dlen));
    {
        unsigned char junk[60];
        th_fill(junk, sizeof(junk), th_seed(11, 1, 0));
        id = bulk_req(ep, junk, sizeof(junk), 0);
        expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_BAD_DESCRIPTOR, NULL);
        desc[dlen / 2] ^= 0x40;
        id = bulk_req(ep, desc, (uint32_t)dlen, 0);
        expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_BAD_DESCRIPTOR, NULL);
        desc[dlen / 2] ^= 0x40;
        id = bulk_req(ep, desc, (uint32_t)dlen - 1, 0);
        expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_BAD_DESCRIPTOR, NULL);
    }
    /* ... and a good one is served, here with a deadline (a 24-byte
     * header). */
    id_bulk_ok = bulk_req(ep, desc, (uint32_t)dlen, DEADLINE_US);
    expect(id_bulk_ok, RDMX_RPC_MSG_RESPONSE, 0, NULL);

    /* CANCEL for an id not in flight: ignored. */
    send_msg(ep, RDMX_RPC_MSG_CANCEL, 0, 987654321ull, NULL, 0, 0);
    expect(0, 0, 0, NULL);

    /* Good messages are still served. */
    id_echo_ok = nid();
    send_msg(ep, RDMX_RPC_MSG_REQUEST, id_echo, id_echo_ok, "still here", 0,
             10);
    want.requests++;
    expect(id_echo_ok, RDMX_RPC_MSG_RESPONSE, 0, NULL);
    id_dl_ok = nid();
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, SPEC_F_CALL, id_echo, 0, id_dl_ok, 0,
              DEADLINE_US);
    CHECK_EQ_U64(n, 20);
    raw_send(ep, h, n, "deadline", 8);
    want.requests++;
    expect(id_dl_ok, RDMX_RPC_MSG_RESPONSE, 0, NULL);
    id_rndv_ok = nid();
    th_fill(big, 5000, th_seed(11, 2, 0));
    n = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0, id_rndv_ok, 0, 0);
    raw_send_ucp(ep, h, n, big, 5000, 1);
    want.requests++;
    expect(id_rndv_ok, RDMX_RPC_MSG_RESPONSE, 0, NULL);
    for (i = 0; i < 5; i++) {
        id = nid();
        n = mkhdr(h, RDMX_RPC_MSG_ONEWAY, 0, id_oneway, 0, id, 0,
                  i % 2 ? DEADLINE_US : 0);
        raw_send(ep, h, n, "1", 1);
        want.requests++;
        expect(id, 0, 0, NULL);
    }
    id = nid();
    send_msg(ep, RDMX_RPC_MSG_PING, 0, id, NULL, 0, 0);
    want.pings++;
    expect(id, RDMX_RPC_MSG_PONG, 0, NULL);

    wait_sends();
    settle("phase 1 (structured)");

    a = find_answer(id_echo_ok);
    CHECK(a->h.payload == 10 && memcmp(a->data, "still here", 10) == 0);
    a = find_answer(id_dl_ok);
    CHECK(a->h.payload == 8 && memcmp(a->data, "deadline", 8) == 0);
    a = find_answer(id_rndv_ok);
    CHECK(a->h.payload == 5000);
    CHECK_PATTERN(a->data, 5000, th_seed(11, 2, 0), 0);
    a = find_answer(id_bulk_ok);
    CHECK(a->h.payload == 8);
    {
        uint64_t sum;
        memcpy(&sum, a->data, 8);
        CHECKF(sum == trs_checksum(region, TH_MIB),
               "bulk_pull through a raw request: wrong checksum");
    }
    CHECK_EQ_U64(oneway_count(sch), oneways0 + 5);
    forget_answers();
    rdmx_mem_deregister(mr);
    free(region);
    free(big);
}

/* ------------------------------------------------------------------------ */
/* Phase 2: random messages, judged by an independent reading of the rules  */
/* ------------------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static uint32_t known_ids[16];
static unsigned nknown;

static int known_handler(uint32_t id)
{
    for (unsigned i = 0; i < nknown; i++)
        if (known_ids[i] == id)
            return 1;
    return 0;
}

/* docs/PROTOCOL.md, "Header" and "What the decoders check" (header). */
static int spec_header_ok(const unsigned char *p, size_t hlen, size_t dlen)
{
    unsigned kind, flags;
    size_t want_len = SPEC_HDR_MIN, off = SPEC_HDR_MIN;
    uint32_t aux = 0, word;

    if (spec_is_v1(p, hlen) || hlen < SPEC_HDR_MIN)
        return 0;
    kind = p[0] & 0x0f;
    flags = p[1];
    if (p[0] >> 4 != SPEC_VERSION || kind < 1 || kind > 13)
        return 0;
    if (flags & ~SPEC_F_KNOWN)
        return 0;
    want_len +=
        (flags & SPEC_F_DEADLINE ? 4 : 0) + (flags & SPEC_F_AUX ? 4 : 0);
    if (hlen != want_len || p[2] != 0 || p[3] != 0)
        return 0;
    if (flags & SPEC_F_DEADLINE) {
        if (!spec_is_call(kind) || get32(p + off) == 0)
            return 0;
        off += 4;
    }
    if (flags & SPEC_F_AUX) {
        aux = get32(p + off);
        if (aux == 0 || aux > dlen)
            return 0;
    }
    if ((uint64_t)(dlen - aux) > UINT32_MAX)
        return 0;
    word = get32(p + 4);
    if (kind == RDMX_RPC_MSG_ERROR)
        return (int32_t)word < 0;
    return spec_is_call(kind) || word == 0;
}

/* What a ready connection of a server without a secret does with it
 * (docs/PROTOCOL.md, "What the server does"); also updates @want.
 * Returns 0 to re-roll (a valid REQUEST/ONEWAY of a registered handler). */
static int model(const unsigned char *p, size_t hlen, size_t dlen)
{
    uint64_t id;
    unsigned kind;

    spec_kind_id(p, hlen, &kind, &id);
    if (!spec_header_ok(p, hlen, dlen)) {
        expect_bad(kind, id, spec_is_v1(p, hlen) ? "version-1 header" : NULL);
        return 1;
    }
    switch (kind) {
    case RDMX_RPC_MSG_REQUEST:
    case RDMX_RPC_MSG_ONEWAY:
        if (known_handler(get32(p + 4)))
            return 0;
        want.requests++;
        want.unknown_handler++;
        expect(id, kind == RDMX_RPC_MSG_REQUEST ? RDMX_RPC_MSG_ERROR : 0,
               RDMX_ERR_NOT_FOUND, NULL);
        return 1;
    case RDMX_RPC_MSG_CANCEL:
        expect(id, 0, 0, NULL);
        return 1;
    case RDMX_RPC_MSG_PING:
        want.pings++;
        expect(id, RDMX_RPC_MSG_PONG, 0, NULL);
        return 1;
    case RDMX_RPC_MSG_HELLO: /* a second one */
        want.malformed++;
        expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, NULL);
        return 1;
    case RDMX_RPC_MSG_WAKE: /* nothing to do, nothing to answer */
        expect(id, 0, 0, NULL);
        return 1;
    default: /* RESPONSE, ERROR, PONG, 9, 10, WELCOME, RING */
        want.malformed++;
        expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, NULL);
        return 1;
    }
}

/* The same for a connection that has not sent HELLO: every call is
 * refused with PROTO (a server without a secret). */
static void model_prehello(const unsigned char *p, size_t hlen, size_t dlen)
{
    uint64_t id;
    unsigned kind;

    spec_kind_id(p, hlen, &kind, &id);
    if (spec_header_ok(p, hlen, dlen)) {
        CHECK(kind == RDMX_RPC_MSG_REQUEST);
        want.requests++;
        want.malformed++;
        expect(id, RDMX_RPC_MSG_ERROR, RDMX_ERR_PROTO, "HELLO");
        return;
    }
    expect_bad(kind, id, NULL);
}

/* A batch record (docs/PROTOCOL.md, "Batched messages") at @b + *@off. */
static void rec(unsigned char *b, size_t *off, unsigned id, const void *hdr,
                size_t hlen, const void *data, size_t len)
{
    unsigned char *p = b + *off;
    size_t n = (8 + hlen + len + 7) & ~(size_t)7;

    memset(p, 0, n);
    p[0] = (unsigned char)id;
    p[1] = (unsigned char)hlen;
    put_le32(p + 4, (uint32_t)len);
    memcpy(p + 8, hdr, hlen);
    if (len)
        memcpy(p + 8 + hlen, data, len);
    *off += n;
}

/* Send @len bytes at @b as one message of core id @id with @hlen bytes of
 * header @hdr. */
static void raw_send_id(rdmx_ep_t *ep, unsigned id, const void *hdr,
                        size_t hlen, const void *b, size_t len)
{
    void *copy = th_alloc(len);
    rdmx_status_t st;

    memcpy(copy, b, len);
    st = rdmx__msg_send(ep, id, hdr, hlen, copy, len, send_done, copy);
    if (st == RDMX_OK) {
        free(copy);
    } else {
        CHECKF(st == RDMX_INPROGRESS, "send: %s", rdmx_status_name(st));
        sends_pending++;
    }
}

/* Batches: five PINGs announced with "more" leave as one batch, and the
 * server's five PONGs, made in one pass, come back with a batch among
 * them; a batch is read up to its first bad record (a core id, a length
 * past its end, reserved bytes set), and one of a bad length or with a
 * header is dropped whole; the good records before a bad one are served. */
static void phase_batch(rdmx_ep_t *ep)
{
    unsigned char h[RDMX_RPC_HDR_MAX], b[512];
    unsigned before = batches_in;
    size_t hlen, off;
    uint64_t id;
    int i;

    for (i = 0; i < 5; i++) {
        id = nid();
        hlen = mkhdr(h, RDMX_RPC_MSG_PING, 0, 0, 0, id, 0, 0);
        CHECK_OK(rdmx__msg_send_now(ep, RDMX_AM_RPC, h, hlen, NULL, 0, i < 4));
        want.pings++;
        expect(id, RDMX_RPC_MSG_PONG, 0, NULL);
    }
    settle("batch (five PINGs as one)");
    CHECKF(batches_in > before, "five PINGs in one batch: no batch of PONGs");
    forget_answers();

    /* a good PING, then a record of a core id: the PING is served */
    off = 0;
    id = nid();
    hlen = mkhdr(h, RDMX_RPC_MSG_PING, 0, 0, 0, id, 0, 0);
    rec(b, &off, RDMX_AM_RPC, h, hlen, NULL, 0);
    want.pings++;
    expect(id, RDMX_RPC_MSG_PONG, 0, NULL);
    rec(b, &off, RDMX_AM_MSG, h, hlen, "x", 1);
    raw_send_id(ep, RDMX_AM_BATCH, NULL, 0, b, off);
    /* a good PING, then a record whose length runs past the batch */
    off = 0;
    id = nid();
    hlen = mkhdr(h, RDMX_RPC_MSG_PING, 0, 0, 0, id, 0, 0);
    rec(b, &off, RDMX_AM_RPC, h, hlen, NULL, 0);
    want.pings++;
    expect(id, RDMX_RPC_MSG_PONG, 0, NULL);
    rec(b, &off, RDMX_AM_RPC, h, hlen, NULL, 0);
    put_le32(b + off - 24 + 4, 1000); /* (the last record: 8 + 16 bytes) */
    raw_send_id(ep, RDMX_AM_BATCH, NULL, 0, b, off);
    /* reserved bytes set in the first record: nothing is served */
    off = 0;
    id = nid();
    hlen = mkhdr(h, RDMX_RPC_MSG_PING, 0, 0, 0, id, 0, 0);
    rec(b, &off, RDMX_AM_RPC, h, hlen, NULL, 0);
    b[2] = 1;
    expect(id, 0, 0, NULL);
    raw_send_id(ep, RDMX_AM_BATCH, NULL, 0, b, off);
    /* a length that is not a multiple of 8: dropped whole */
    off = 0;
    id = nid();
    hlen = mkhdr(h, RDMX_RPC_MSG_PING, 0, 0, 0, id, 0, 0);
    rec(b, &off, RDMX_AM_RPC, h, hlen, NULL, 0);
    expect(id, 0, 0, NULL);
    raw_send_id(ep, RDMX_AM_BATCH, NULL, 0, b, off + 4);
    /* a batch with a header: dropped whole */
    off = 0;
    id = nid();
    hlen = mkhdr(h, RDMX_RPC_MSG_PING, 0, 0, 0, id, 0, 0);
    rec(b, &off, RDMX_AM_RPC, h, hlen, NULL, 0);
    expect(id, 0, 0, NULL);
    raw_send_id(ep, RDMX_AM_BATCH, "hdr", 3, b, off);
    /* and an empty one */
    raw_send_id(ep, RDMX_AM_BATCH, NULL, 0, b, 0);
    wait_sends();
    settle("batch (malformed)");
    forget_answers();
    th_log("batches: five PINGs as one batch answered (%u batch(es) of "
           "PONGs); good records before a bad one served, bad batches "
           "dropped",
           batches_in - before);
}

static void phase2(rdmx_ep_t *ep, uint64_t seed)
{
    unsigned char h[RDMX_RPC_HDR_MAX], data[64];
    unsigned counts[3] = {0, 0, 0}, lens[RDMX_RPC_HDR_MAX + 1] = {0};
    unsigned valid = 0;

    rng_state = seed;
    for (int n = 0; n < NRANDOM;) {
        unsigned mode = (unsigned)(rnd() % 3);
        size_t hlen, dlen = (size_t)(rnd() % 48);
        uint64_t saved = rng_state;

        for (size_t i = 0; i < sizeof(data); i++)
            data[i] = (unsigned char)rnd();
        for (size_t i = 0; i < sizeof(h); i++)
            h[i] = (unsigned char)rnd();
        if (mode == 0) {
            /* random bytes of a random length, half of them with version
             * 2, a few starting as a version-1 header */
            hlen = (size_t)(rnd() % (RDMX_RPC_HDR_MAX + 1));
            if (rnd() % 2)
                h[0] = (unsigned char)(SPEC_VERSION << 4 | (h[0] & 0x0f));
            if (rnd() % 16 == 0)
                memcpy(h, "RXRP", 4);
        } else {
            /* a valid header of a random kind and length (a deadline on
             * half the calls, aux on half the messages with data) with
             * 0..2 bytes, or its length, changed; every kind is given a
             * handler, a status and maybe a deadline, which mkhdr (and
             * rdmx_rpc_hdr_encode) write only where the kind has them */
            unsigned kind = 1 + (unsigned)(rnd() % 13);
            uint32_t aux = dlen && rnd() % 2 ? 1 + (uint32_t)(rnd() % dlen) : 0;
            uint32_t deadline =
                rnd() % 2 ? 1 + (uint32_t)(rnd() % 0xfffffffeu) : 0;
            hlen = mkhdr(h, kind, (unsigned)(rnd() % 4), (uint32_t)rnd(),
                         -1 - (int32_t)(rnd() % 20), rnd(), aux, deadline);
            if (mode == 2) {
                unsigned nmut = 1 + (unsigned)(rnd() % 2);
                for (unsigned k = 0; k < nmut; k++) {
                    if (rnd() % 8 == 0)
                        hlen = (size_t)(rnd() % (RDMX_RPC_HDR_MAX + 1));
                    else if (hlen > 0)
                        h[rnd() % hlen] = (unsigned char)rnd();
                }
            }
        }
        /* ids must not repeat within the phase (an answer is matched by
         * id): give every message a fresh one unless it is cut short */
        if (hlen >= SPEC_HDR_MIN)
            put_le64(h + 8, 0x7000000000000000ull + (uint64_t)n);
        if (!model(h, hlen, dlen)) {
            rng_state = saved ^ 0x9e3779b97f4a7c15ull;
            continue;
        }
        valid += spec_header_ok(h, hlen, dlen);
        counts[mode]++;
        lens[hlen]++;
        raw_send(ep, h, hlen, data, dlen);
        if (n % 256 == 0)
            rdmx_worker_progress(rw);
        n++;
    }
    wait_sends();
    settle("phase 2 (random)");
    th_log("phase 2: %u random, %u valid as built, %u changed messages; %u "
           "had a valid header; headers of 16/20/24 bytes: %u/%u/%u (seed "
           "%llx)",
           counts[0], counts[1], counts[2], valid, lens[16], lens[20], lens[24],
           (unsigned long long)seed);
    forget_answers();
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    th_proc_t srv;
    rdmx_worker_t *cw;
    rdmx_channel_t *sch;
    rdmx_channel_params_t cp;
    rdmx_ep_t *ep;
    counters_t c0, c1;
    uint64_t seed;
    double t0;

    if (argc > 1 && strcmp(argv[1], "rpc-server") == 0)
        return trs_main(argc - 2, argv + 2);

    th_init("rpc_malformed", 85);
    t0 = th_now_ms();
    th_spawn_self(&srv, "rpc-server", 30000, "--workers", "2",
                  "--max-message", "65536", NULL);
    ctx = th_context();
    /* The stats channel: its own worker, no heartbeats (it idles while the
     * raw connection is driven). */
    cw = th_worker(ctx, 0);
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT |
                    RDMX_CHANNEL_PARAM_FIELD_HEARTBEAT_TIMEOUT;
    cp.heartbeat_ms = 0;
    CHECK_OK(rdmx_channel_create(cw, srv.addr, &cp, &sch));
    CHECK_OK(rdmx_channel_wait_ready(sch, 10000 * TH_SLOW));

    {
        static const char *names[] = {"echo",      "echo_once", "fail",
                                      "spin",      "worker",    "oneway",
                                      "count",     "bulk_pull", "bulk_push",
                                      "rdmx.stats", "rdmx.ping"};
        for (unsigned i = 0; i < 11; i++)
            known_ids[nknown++] = rdmx_rpc_id(names[i]);
    }
    id_echo = rdmx_rpc_id("echo");
    id_oneway = rdmx_rpc_id("oneway");
    id_bulk_pull = rdmx_rpc_id("bulk_pull");
    id_spin = rdmx_rpc_id("spin");

    c0 = read_counters(sch);

    rw = th_worker(ctx, 0);
    raw_rpc_install(rw, take_answer, &batches_in);
    ep = th_connect(rw, &srv, NULL);
    rndv_ep = ep;

    phase0(ep);
    phase1(ep, sch);
    phase_batch(ep);
    seed = th_seed((uint64_t)getpid(), (uint64_t)th_now_ms(), 3);
    if (getenv("RPC_MALFORMED_SEED"))
        seed = strtoull(getenv("RPC_MALFORMED_SEED"), NULL, 0);
    phase2(ep, seed);

    /* Phase 3: garbage before any HELLO on fresh connections, closed by
     * destroying their worker. */
    {
        rdmx_ep_t *e2 = th_connect(rw, &srv, NULL);
        unsigned char h[RDMX_RPC_HDR_MAX];

        rndv_ep = e2;
        for (int i = 0; i < 50; i++) {
            size_t hlen = mkhdr(h, RDMX_RPC_MSG_REQUEST, 0, id_echo, 0,
                                0x3000000000000000ull + ((uint64_t)i << 16), 0,
                                i % 2 ? DEADLINE_US : 0);
            h[(size_t)i % hlen] ^= 0x5a;
            model_prehello(h, hlen, 0);
            raw_send(e2, h, hlen, NULL, 0);
        }
        wait_sends();
        settle("phase 3 (garbage before HELLO)");
        forget_answers();
        (void)th_connect(rw, &srv, NULL); /* a connection that says nothing */
    }
    /* Three PINGs announced with "more", then an orderly close: the batch
     * leaves before BYE (the server counts the PINGs). */
    for (int i = 0; i < 3; i++) {
        unsigned char h[RDMX_RPC_HDR_MAX];
        size_t hlen = mkhdr(h, RDMX_RPC_MSG_PING, 0, 0, 0, nid(), 0, 0);

        CHECK_OK(rdmx__msg_send_now(ep, RDMX_AM_RPC, h, hlen, NULL, 0, 1));
        want.pings++;
    }
    rdmx_ep_close(ep);
    rdmx_worker_destroy(rw);
    th_sleep_ms(100);

    c1 = read_counters(sch);
    CHECKF(th_alive(&srv), "the server died");
    {
        unsigned char buf[300], back[300];
        size_t len = 0;
        th_fill(buf, sizeof(buf), 5);
        CHECK_OK(rdmx_call(sch, "echo", buf, sizeof(buf), back, sizeof(back),
                           NULL, &len));
        CHECK(len == sizeof(buf) && memcmp(buf, back, len) == 0);
    }

    /* The stats calls themselves: one request between the readings (the
     * second), one response (the first's; a response is counted after its
     * text was made). */
#define CHECK_DELTA(f, extra)                                                  \
    CHECKF(c1.f - c0.f == want.f + (extra),                                    \
           "server counter %s grew by %llu, expected %llu", #f,                \
           (unsigned long long)(c1.f - c0.f),                                  \
           (unsigned long long)(want.f + (extra)))
    CHECK_DELTA(requests, 1 + 2); /* + the 2 "count" calls of phase 1 */
    CHECK_DELTA(responses, 1 + 2);
    CHECK_DELTA(errors, 0);
    CHECK_DELTA(malformed, 0);
    CHECK_DELTA(unknown_handler, 0);
    CHECK_DELTA(too_big, 0);
    CHECK_DELTA(auth_failed, 0);
    CHECK_DELTA(pings, 0);
    CHECK_DELTA(no_credit, 0);
    CHECK_DELTA(busy, 0);
    CHECK_DELTA(expired, 0);
    CHECK_DELTA(canceled, 0);
    th_log("server counters grew exactly as predicted: malformed +%llu, "
           "unknown_handler +%llu, too_big +%llu, auth_failed +%llu, "
           "requests +%llu, errors +%llu, pings +%llu; server alive",
           (unsigned long long)(c1.malformed - c0.malformed),
           (unsigned long long)(c1.unknown_handler - c0.unknown_handler),
           (unsigned long long)(c1.too_big - c0.too_big),
           (unsigned long long)(c1.auth_failed - c0.auth_failed),
           (unsigned long long)(c1.requests - c0.requests),
           (unsigned long long)(c1.errors - c0.errors),
           (unsigned long long)(c1.pings - c0.pings));

    rdmx_channel_destroy(sch);
    rdmx_worker_destroy(cw);
    rdmx_context_destroy(ctx);
    th_kill(&srv, SIGTERM);
    th_check_exit_ok("rpc server", th_wait_exit(&srv, 20000));
    th_log("ok (%.0f ms)", th_now_ms() - t0);
    return 0;
}
