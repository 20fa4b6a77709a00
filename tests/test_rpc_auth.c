/*
 * rpc_auth: shared-secret authentication (docs/PROTOCOL.md, "Handshake").
 *
 * Servers: A with --secret, B without. Proven:
 *  - channels: the right secret gets READY and calls work; a wrong secret,
 *    a secret that is a prefix of the right one, and no secret end in
 *    RDMX_CHANNEL_CLOSED with RDMX_ERR_DENIED from rdmx_channel_wait_ready
 *    within 2 s (x4 under ASan), the state callback reports CLOSED with
 *    RDMX_ERR_DENIED, a call queued before the refusal completes with
 *    RDMX_ERR_DENIED and later calls fail at once (no hang); a client with
 *    a secret refuses server B, which cannot prove it knows the secret.
 *  - raw peers speaking the protocol on a core endpoint (as rpc_malformed):
 *    before HELLO and after HELLO but before AUTH, every REQUEST (echo, and
 *    the built-in rdmx.stats and rdmx.ping) gets ERROR DENIED, a ONEWAY is
 *    dropped, a PING is answered; no RESPONSE ever comes before a good
 *    AUTH. HELLO gets a CHALLENGE with a 16-byte nonce; a correct AUTH
 *    (HMAC-SHA256 over both nonces) gets a WELCOME whose server proof the
 *    test verifies; after it, calls are served. A wrong proof gets DENIED
 *    and the connection is refused for good (calls DENIED, even a correct
 *    AUTH afterwards DENIED). AUTH of the wrong size or with a payload is
 *    DENIED. A proof recorded on one connection is refused on another. A
 *    second AUTH after success is DENIED.
 *  - server A's counters: auth_failed and denied grew by exactly the
 *    refusals above, "count" by exactly the one authenticated one-way; the
 *    server stays alive and exits cleanly on SIGTERM.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "rpc_server.h"

#include "core/internal.h"
#include "core/ucx/ucx.h" /* a raw UCX handler of its own */
#include "rpc/internal.h" /* wire format, rdmx__rpc_mac */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECRET "correct horse battery staple"

static rdmx_context_t *ctx;
static rdmx_worker_t *rw; /* raw peers' worker, our own AM 16 handler */
static uint32_t id_echo, id_oneway, id_stats, id_ping;

/* ------------------------------------------------------------------------ */
/* Raw peer                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    rdmx_rpc_hdr_t h;
    size_t len;
    unsigned char data[512];
} ans_t;

#define MAX_ANS 256
static ans_t ans[MAX_ANS];
static unsigned nans;

static ucs_status_t raw_am(void *arg, const void *header, size_t hlen,
                           void *data, size_t len,
                           const ucp_am_recv_param_t *param)
{
    ans_t *a;
    char why[160];

    (void)arg;
    CHECK(nans < MAX_ANS);
    CHECKF(!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV),
           "unexpected rendezvous answer of %zu bytes", len);
    a = &ans[nans++];
    CHECKF(rdmx_rpc_hdr_decode(header, hlen, len, &a->h, why, sizeof(why)) ==
               RDMX_OK,
           "the server sent a malformed header: %s", why);
    CHECK(len <= sizeof(a->data));
    a->len = len;
    if (len)
        memcpy(a->data, data, len);
    return UCS_OK;
}

static void install_raw_handler(rdmx_worker_t *w)
{
    ucp_am_handler_param_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                   UCP_AM_HANDLER_PARAM_FIELD_CB |
                   UCP_AM_HANDLER_PARAM_FIELD_ARG |
                   UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    p.id = RDMX_AM_RPC;
    p.cb = raw_am;
    p.flags = UCP_AM_FLAG_WHOLE_MSG;
    CHECK(ucp_worker_set_am_recv_handler(rdmx__ucx_worker(w), &p) == UCS_OK);
}

static int sends_pending;

static void send_done(rdmx_status_t st, size_t length, void *arg)
{
    (void)st;
    (void)length;
    free(arg);
    sends_pending--;
}

static uint64_t next_id = 100;

/* Send a well-formed message; returns its id. */
static uint64_t raw_msg(rdmx_ep_t *ep, unsigned kind, uint32_t handler,
                        const void *aux, uint32_t alen, const void *payload,
                        uint32_t plen)
{
    unsigned char hdr[RDMX_RPC_HDR_SIZE];
    unsigned char *buf = th_alloc((size_t)alen + plen);
    rdmx_rpc_hdr_t h;
    rdmx_status_t st;

    memset(&h, 0, sizeof(h));
    h.version = RDMX_RPC_VERSION;
    h.kind = (uint8_t)kind;
    h.handler = handler;
    h.id = next_id++;
    h.aux = alen;
    h.payload = plen;
    rdmx_rpc_hdr_encode(&h, hdr);
    if (alen)
        memcpy(buf, aux, alen);
    if (plen)
        memcpy(buf + alen, payload, plen);
    st = rdmx__msg_send(ep, RDMX_AM_RPC, hdr, sizeof(hdr), buf,
                       (size_t)alen + plen, send_done, buf);
    if (st == RDMX_OK)
        free(buf);
    else {
        CHECKF(st == RDMX_INPROGRESS, "raw send: %s", rdmx_status_name(st));
        sends_pending++;
    }
    return h.id;
}

/* Wait for the answer to @id (fail after 10 s) and return it. */
static ans_t *answer_to(uint64_t id)
{
    double deadline = th_now_ms() + 10000.0 * TH_SLOW;

    for (;;) {
        for (unsigned i = 0; i < nans; i++)
            if (ans[i].h.id == id)
                return &ans[i];
        CHECKF(th_now_ms() < deadline, "no answer to message %llu",
               (unsigned long long)id);
        rdmx_worker_wait(rw, 5);
    }
}

/* Expect ERROR @status as the answer to @id. */
static void expect_error(uint64_t id, rdmx_status_t status, const char *what)
{
    ans_t *a = answer_to(id);
    char msg[300];
    size_t n = a->h.payload < sizeof(msg) - 1 ? a->h.payload : sizeof(msg) - 1;

    memcpy(msg, a->data + a->h.aux, n);
    msg[n] = '\0';
    CHECKF(a->h.kind == RDMX_RPC_MSG_ERROR && a->h.status == status,
           "%s: answered kind %u status %s (\"%s\"), expected ERROR %s", what,
           a->h.kind, rdmx_status_name((rdmx_status_t)a->h.status), msg,
           rdmx_status_name(status));
}

/* After a PING barrier: no answer at all to @id, and never a RESPONSE
 * before authentication (all answers so far checked). */
static void barrier(rdmx_ep_t *ep)
{
    uint64_t id = raw_msg(ep, RDMX_RPC_MSG_PING, 0, NULL, 0, NULL, 0);
    ans_t *a = answer_to(id);

    CHECK(a->h.kind == RDMX_RPC_MSG_PONG);
    th_progress_for(rw, 30);
}

static int answered(uint64_t id)
{
    for (unsigned i = 0; i < nans; i++)
        if (ans[i].h.id == id)
            return 1;
    return 0;
}

static void no_response_before_auth(unsigned from, unsigned to,
                                    const char *what)
{
    for (unsigned i = from; i < to; i++)
        CHECKF(ans[i].h.kind != RDMX_RPC_MSG_RESPONSE &&
                   ans[i].h.kind != RDMX_RPC_MSG_WELCOME,
               "%s: the server answered %s to id %llu before "
               "authentication",
               what, ans[i].h.kind == RDMX_RPC_MSG_RESPONSE ? "RESPONSE"
                                                            : "WELCOME",
               (unsigned long long)ans[i].h.id);
}

/* HELLO with @cnonce; returns the server nonce from the CHALLENGE. */
static void hello(rdmx_ep_t *ep, const unsigned char *cnonce,
                  unsigned char *snonce)
{
    unsigned char body[RDMX_RPC_HELLO_SIZE] = {0};
    ans_t *a;
    uint64_t id;

    memcpy(body + 4, cnonce, RDMX_RPC_NONCE_SIZE);
    id = raw_msg(ep, RDMX_RPC_MSG_HELLO, 0, body, sizeof(body), NULL, 0);
    a = answer_to(id);
    CHECKF(a->h.kind == RDMX_RPC_MSG_CHALLENGE,
           "HELLO to a server with a secret answered with kind %u",
           a->h.kind);
    CHECK_EQ_U64(a->h.aux, RDMX_RPC_NONCE_SIZE);
    CHECK_EQ_U64(a->h.payload, 0);
    memcpy(snonce, a->data, RDMX_RPC_NONCE_SIZE);
}

/* Every call is refused; returns how many the server counts as denied. */
static unsigned calls_refused(rdmx_ep_t *ep, const char *what)
{
    uint64_t a = raw_msg(ep, RDMX_RPC_MSG_REQUEST, id_echo, NULL, 0, "x", 1);
    uint64_t b = raw_msg(ep, RDMX_RPC_MSG_REQUEST, id_stats, NULL, 0, NULL, 0);
    uint64_t c = raw_msg(ep, RDMX_RPC_MSG_REQUEST, id_ping, NULL, 0, "p", 1);
    uint64_t d = raw_msg(ep, RDMX_RPC_MSG_ONEWAY, id_oneway, NULL, 0, "o", 1);

    expect_error(a, RDMX_ERR_DENIED, what);
    expect_error(b, RDMX_ERR_DENIED, what);
    expect_error(c, RDMX_ERR_DENIED, what);
    barrier(ep);
    CHECKF(!answered(d), "%s: a ONEWAY was answered", what);
    return 4;
}

/* ------------------------------------------------------------------------ */
/* Channels                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    int calls;
    rdmx_channel_state_t last;
    rdmx_status_t last_status;
    int closed_denied;
} state_log_t;

static void state_cb(rdmx_channel_t *ch, rdmx_channel_state_t state,
                     rdmx_breaker_state_t breaker, rdmx_status_t status,
                     void *arg)
{
    state_log_t *l = arg;

    (void)ch;
    (void)breaker;
    l->calls++;
    l->last = state;
    l->last_status = status;
    if (state == RDMX_CHANNEL_CLOSED && status == RDMX_ERR_DENIED)
        l->closed_denied++;
}

typedef struct {
    int calls;
    rdmx_status_t status;
    char msg[300];
} res_t;

static void res_cb(const rdmx_call_result_t *r, void *arg)
{
    res_t *res = arg;

    res->calls++;
    res->status = r->status;
    snprintf(res->msg, sizeof(res->msg), "%s", r->message);
}

static rdmx_channel_t *channel(rdmx_worker_t *w, const th_proc_t *srv,
                               const char *secret, state_log_t *log)
{
    rdmx_channel_params_t p;
    rdmx_channel_t *ch = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_CHANNEL_FIELD_STATE_CB;
    p.state_cb = state_cb;
    p.state_arg = log;
    if (secret != NULL) {
        p.field_mask |= RDMX_CHANNEL_FIELD_AUTH_SECRET;
        p.auth_secret = secret;
        p.auth_secret_len = strlen(secret);
    }
    CHECK_OK(rdmx_channel_create(w, srv->addr, &p, &ch));
    return ch;
}

/* A channel that must be refused for good. */
static void refused_channel(rdmx_worker_t *w, const th_proc_t *srv,
                            const char *secret, const char *what)
{
    state_log_t log;
    res_t res;
    rdmx_channel_t *ch;
    double t0 = th_now_ms(), took;
    char buf[16];
    size_t len;
    rdmx_status_t st;

    memset(&log, 0, sizeof(log));
    memset(&res, 0, sizeof(res));
    ch = channel(w, srv, secret, &log);
    /* queued while connecting */
    CHECK_ST(rdmx_call_nb(ch, "echo", "q", 1, NULL, res_cb, &res, NULL),
             RDMX_INPROGRESS);
    st = rdmx_channel_wait_ready(ch, 10000 * TH_SLOW);
    took = th_now_ms() - t0;
    CHECKF(st == RDMX_ERR_DENIED, "%s: wait_ready returned %s (%s)", what,
           rdmx_status_name(st), rdmx_error_detail());
    CHECKF(took < 2000.0 * TH_SLOW, "%s: refused only after %.0f ms", what,
           took);
    CHECK(rdmx_channel_state(ch) == RDMX_CHANNEL_CLOSED);
    CHECK(rdmx_channel_ep(ch) == NULL);
    CHECKF(log.closed_denied == 1 && log.last == RDMX_CHANNEL_CLOSED,
           "%s: state callback: %d CLOSED/DENIED reports, last state %d (%s)",
           what, log.closed_denied, (int)log.last,
           rdmx_status_name(log.last_status));
    CHECKF(res.calls == 1 && res.status == RDMX_ERR_DENIED,
           "%s: the queued call: %d callbacks, %s", what, res.calls,
           rdmx_status_name(res.status));
    /* Later calls fail at once. */
    t0 = th_now_ms();
    CHECK_ST(rdmx_call_nb(ch, "echo", "q", 1, NULL, res_cb, &res, NULL),
             RDMX_ERR_DENIED);
    CHECK_ST(rdmx_call(ch, "echo", "q", 1, NULL, buf, sizeof(buf), &len),
             RDMX_ERR_DENIED);
    CHECK(rdmx_call_oneway(ch, "oneway", "q", 1) < 0);
    CHECK_ST(rdmx_channel_wait_ready(ch, 1000), RDMX_ERR_DENIED);
    CHECK(th_now_ms() - t0 < 500.0 * TH_SLOW);
    /* It stays closed: no reconnect attempts. */
    th_progress_for(w, 200);
    CHECK(rdmx_channel_state(ch) == RDMX_CHANNEL_CLOSED);
    CHECK(res.calls == 1);
    rdmx_channel_destroy(ch);
    th_log("%s: refused after %.0f ms (RDMX_ERR_DENIED, CLOSED), queued call "
           "failed, later calls fail at once",
           what, took);
}

static const char *server_text(rdmx_channel_t *ch)
{
    static char text[65536];
    size_t len = 0;

    CHECK_OK(rdmx_call(ch, "rdmx.stats", NULL, 0, NULL, text,
                       sizeof(text) - 1, &len));
    text[len] = '\0';
    return text;
}

static uint64_t stat_of(rdmx_channel_t *ch, const char *key)
{
    const char *text = server_text(ch), *p = text;
    size_t klen = strlen(key);

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

static uint64_t oneway_count(rdmx_channel_t *ch)
{
    uint64_t n = 0;
    size_t len = 0;

    CHECK_OK(rdmx_call(ch, "count", NULL, 0, NULL, &n, sizeof(n), &len));
    CHECK_EQ_U64(len, 8);
    return n;
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    th_proc_t a, b;
    rdmx_worker_t *w;
    rdmx_channel_t *good;
    state_log_t glog;
    uint64_t auth_failed0, denied0, count0, pings0;
    unsigned want_auth_failed = 0, want_denied = 0;
    unsigned char r1_proof[RDMX_RPC_MAC_SIZE];
    char buf[256];
    size_t len;

    if (argc > 1 && strcmp(argv[1], "rpc-server") == 0)
        return trs_main(argc - 2, argv + 2);

    th_init("rpc_auth", 85);
    th_spawn_self(&a, "rpc-server", 30000, "--workers", "2", "--secret",
                  SECRET, NULL);
    th_spawn_self(&b, "rpc-server", 30000, "--workers", "2", NULL);
    ctx = th_context();
    w = th_worker(ctx, 0);
    id_echo = rdmx_rpc_id("echo");
    id_oneway = rdmx_rpc_id("oneway");
    id_stats = rdmx_rpc_id("rdmx.stats");
    id_ping = rdmx_rpc_id("rdmx.ping");

    /* The right secret. */
    memset(&glog, 0, sizeof(glog));
    good = channel(w, &a, SECRET, &glog);
    CHECK_OK(rdmx_channel_wait_ready(good, 10000 * TH_SLOW));
    CHECK(glog.last == RDMX_CHANNEL_READY);
    CHECK_OK(rdmx_call(good, "echo", "authenticated", 13, NULL, buf,
                       sizeof(buf), &len));
    CHECK(len == 13 && memcmp(buf, "authenticated", 13) == 0);
    CHECK_OK(rdmx_call(good, "rdmx.ping", "p", 1, NULL, buf, sizeof(buf),
                       &len));
    auth_failed0 = stat_of(good, "auth_failed");
    denied0 = stat_of(good, "denied");
    pings0 = stat_of(good, "pings");
    count0 = oneway_count(good);
    (void)pings0;
    th_log("right secret: READY, echo and rdmx.ping served");

    /* Channels that must be refused. */
    refused_channel(w, &a, "wrong secret", "wrong secret");
    want_auth_failed++;
    refused_channel(w, &a, "correct horse", "secret prefix");
    want_auth_failed++;
    refused_channel(w, &a, NULL, "no secret");
    refused_channel(w, &b, SECRET, "secret vs a server without one");

    /* Raw peers. */
    rw = th_worker(ctx, 0);
    install_raw_handler(rw);
    {
        rdmx_ep_t *r1 = th_connect(rw, &a, NULL);
        unsigned char cn[RDMX_RPC_NONCE_SIZE], sn[RDMX_RPC_NONCE_SIZE];
        unsigned char proof[RDMX_RPC_MAC_SIZE], sproof[RDMX_RPC_MAC_SIZE];
        rdmx_rpc_welcome_t wl;
        char why[160];
        ans_t *an;
        uint64_t id;
        unsigned mark = nans;

        /* R1: before HELLO, after HELLO, then a good AUTH. */
        want_denied += calls_refused(r1, "R1 before HELLO");
        for (int i = 0; i < RDMX_RPC_NONCE_SIZE; i++)
            cn[i] = (unsigned char)(0xa0 + i);
        hello(r1, cn, sn);
        want_denied += calls_refused(r1, "R1 after HELLO");
        no_response_before_auth(mark, nans, "R1");
        CHECK_OK(rdmx__rpc_mac(SECRET, strlen(SECRET), "rdmx-client", sn, cn,
                               proof));
        memcpy(r1_proof, proof, sizeof(proof));
        id = raw_msg(r1, RDMX_RPC_MSG_AUTH, 0, proof, sizeof(proof), NULL, 0);
        an = answer_to(id);
        CHECKF(an->h.kind == RDMX_RPC_MSG_WELCOME,
               "a correct AUTH answered with kind %u status %s", an->h.kind,
               rdmx_status_name((rdmx_status_t)an->h.status));
        CHECKF(rdmx_rpc_welcome_decode(an->data, an->h.aux, &wl, why,
                                       sizeof(why)) == RDMX_OK,
               "WELCOME: %s", why);
        CHECK(wl.has_proof);
        CHECK_OK(rdmx__rpc_mac(SECRET, strlen(SECRET), "rdmx-server", cn, sn,
                               sproof));
        CHECKF(memcmp(wl.proof, sproof, RDMX_RPC_MAC_SIZE) == 0,
               "the server's proof in WELCOME is wrong");
        /* Now calls are served. */
        id = raw_msg(r1, RDMX_RPC_MSG_REQUEST, id_echo, NULL, 0, "hello", 5);
        an = answer_to(id);
        CHECK(an->h.kind == RDMX_RPC_MSG_RESPONSE && an->h.payload == 5 &&
              memcmp(an->data, "hello", 5) == 0);
        raw_msg(r1, RDMX_RPC_MSG_ONEWAY, id_oneway, NULL, 0, "1", 1);
        /* A second AUTH is unexpected. */
        id = raw_msg(r1, RDMX_RPC_MSG_AUTH, 0, proof, sizeof(proof), NULL, 0);
        expect_error(id, RDMX_ERR_DENIED, "R1 second AUTH");
        want_auth_failed++;
        barrier(r1);
        th_log("raw R1: calls before HELLO and before AUTH DENIED (echo, "
               "rdmx.stats, rdmx.ping; ONEWAY dropped; PING answered); good "
               "AUTH -> WELCOME with a valid server proof; then served");
    }
    {
        rdmx_ep_t *r2 = th_connect(rw, &a, NULL);
        unsigned char cn[RDMX_RPC_NONCE_SIZE], sn[RDMX_RPC_NONCE_SIZE];
        unsigned char proof[RDMX_RPC_MAC_SIZE];
        uint64_t id;
        unsigned mark = nans;

        /* R2: a wrong proof, then everything is refused. */
        memset(cn, 0x11, sizeof(cn));
        hello(r2, cn, sn);
        CHECK_OK(rdmx__rpc_mac("not it", 6, "rdmx-client", sn, cn, proof));
        id = raw_msg(r2, RDMX_RPC_MSG_AUTH, 0, proof, sizeof(proof), NULL, 0);
        expect_error(id, RDMX_ERR_DENIED, "R2 wrong proof");
        want_auth_failed++;
        want_denied += calls_refused(r2, "R2 after a wrong proof");
        CHECK_OK(rdmx__rpc_mac(SECRET, strlen(SECRET), "rdmx-client", sn, cn,
                               proof));
        id = raw_msg(r2, RDMX_RPC_MSG_AUTH, 0, proof, sizeof(proof), NULL, 0);
        expect_error(id, RDMX_ERR_DENIED, "R2 correct AUTH after a wrong one");
        want_auth_failed++;
        want_denied += calls_refused(r2, "R2 after the late correct AUTH");
        no_response_before_auth(mark, nans, "R2");
        th_log("raw R2: wrong proof -> DENIED, then calls and even a correct "
               "AUTH refused");
    }
    {
        rdmx_ep_t *r3 = th_connect(rw, &a, NULL);
        unsigned char cn[RDMX_RPC_NONCE_SIZE], sn[RDMX_RPC_NONCE_SIZE];
        unsigned char proof[RDMX_RPC_MAC_SIZE];
        uint64_t id;
        unsigned mark = nans;

        /* R3: AUTH of the wrong size, AUTH with a payload. */
        memset(cn, 0x22, sizeof(cn));
        hello(r3, cn, sn);
        CHECK_OK(rdmx__rpc_mac(SECRET, strlen(SECRET), "rdmx-client", sn, cn,
                               proof));
        id = raw_msg(r3, RDMX_RPC_MSG_AUTH, 0, proof, sizeof(proof) - 1, NULL,
                     0);
        expect_error(id, RDMX_ERR_DENIED, "R3 31-byte AUTH");
        want_auth_failed++;
        id = raw_msg(r3, RDMX_RPC_MSG_AUTH, 0, proof, sizeof(proof), "x", 1);
        expect_error(id, RDMX_ERR_DENIED, "R3 AUTH with a payload");
        want_auth_failed++;
        want_denied += calls_refused(r3, "R3");
        no_response_before_auth(mark, nans, "R3");

        /* R4: R1's proof replayed on a new connection (same client nonce,
         * new server nonce). */
        {
            rdmx_ep_t *r4 = th_connect(rw, &a, NULL);
            for (int i = 0; i < RDMX_RPC_NONCE_SIZE; i++)
                cn[i] = (unsigned char)(0xa0 + i);
            mark = nans;
            hello(r4, cn, sn);
            id = raw_msg(r4, RDMX_RPC_MSG_AUTH, 0, r1_proof, sizeof(r1_proof),
                         NULL, 0);
            expect_error(id, RDMX_ERR_DENIED, "R4 replayed proof");
            want_auth_failed++;
            want_denied += calls_refused(r4, "R4");
            no_response_before_auth(mark, nans, "R4");
        }
        th_log("raw R3/R4: AUTH of 31 bytes, AUTH with a payload, a replayed "
               "proof: DENIED; calls stay refused");
    }
    while (sends_pending > 0)
        rdmx_worker_wait(rw, 5);
    rdmx_worker_destroy(rw); /* closes the raw connections */

    /* Counters on server A, read over the authenticated channel. */
    CHECKF(th_alive(&a), "server A died");
    {
        uint64_t af = stat_of(good, "auth_failed") - auth_failed0;
        uint64_t dn = stat_of(good, "denied") - denied0;
        double deadline = th_now_ms() + 5000.0 * TH_SLOW;
        uint64_t cnt;

        CHECKF(af == want_auth_failed, "auth_failed grew by %llu, expected %u",
               (unsigned long long)af, want_auth_failed);
        CHECKF(dn == want_denied, "denied grew by %llu, expected %u",
               (unsigned long long)dn, want_denied);
        while ((cnt = oneway_count(good)) < count0 + 1 &&
               th_now_ms() < deadline)
            th_progress_for(w, 5);
        CHECKF(cnt == count0 + 1,
               "one-way count grew by %llu, expected 1 (only the "
               "authenticated one)",
               (unsigned long long)(cnt - count0));
        th_log("server A: auth_failed +%llu, denied +%llu, one-way count +1, "
               "as predicted",
               (unsigned long long)af, (unsigned long long)dn);
    }
    CHECK_OK(rdmx_call(good, "echo", "still", 5, NULL, buf, sizeof(buf),
                       &len));
    CHECK(len == 5);

    rdmx_channel_destroy(good);
    rdmx_worker_destroy(w);
    rdmx_context_destroy(ctx);
    th_kill(&a, SIGTERM);
    th_kill(&b, SIGTERM);
    th_check_exit_ok("server A", th_wait_exit(&a, 20000));
    th_check_exit_ok("server B", th_wait_exit(&b, 20000));
    th_log("ok");
    return 0;
}
