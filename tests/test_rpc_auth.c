/*
 * rpc_auth: shared-secret authentication in the connection bootstrap
 * (docs/PROTOCOL.md, "Authentication"; docs/SECURITY.md).
 *
 * Servers: A with --secret, B without. Proven:
 *  - channels: the right secret gets READY and calls work; a wrong secret,
 *    a secret that is a prefix of the right one, and no secret end in
 *    RDMX_CHANNEL_CLOSED with RDMX_ERR_DENIED from rdmx_channel_wait_ready
 *    within 2 s (x4 under ASan), the state callback reports CLOSED with
 *    RDMX_ERR_DENIED, a call queued before the refusal completes with
 *    RDMX_ERR_DENIED and later calls fail at once (no hang, no retries); a
 *    client with a secret refuses server B, which cannot prove it knows it.
 *  - raw bootstrap peers on plain TCP sockets, written from the protocol
 *    document (frames, HMAC-SHA256 with OpenSSL directly, not rdmx's code):
 *    R1 sends a HELLO whose "transport address" is 4 KiB of random bytes:
 *    the server answers CHALLENGE (16-byte nonce), never WELCOME, so the
 *    address has not been handed to the transport (a server that did would
 *    answer "your transport address: ..." or worse); a wrong proof
 *    gets REFUSE DENIED "authentication failed" and the socket closes.
 *    R2 sends a real worker address and a correct proof: WELCOME with the
 *    proof flag, and the test verifies the server's proof (over both
 *    nonces, the server's worker, token and address). R3 replays R2's
 *    HELLO and proof on a new connection: DENIED (new server nonce). R4
 *    sends a 31-byte AUTH: DENIED. R5 sends AUTH before HELLO: REFUSE
 *    PROTO. R6 sends HELLO and leaves at the CHALLENGE (a missing proof).
 *  - server A's counter auth_failed grew by exactly the wrong, missing and
 *    malformed proofs above (channels and raw peers); the authenticated
 *    channel still works; the server stays alive and exits cleanly on
 *    SIGTERM.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "rpc_server.h"

#include "core/internal.h" /* a raw worker's transport address */
#include "util/endian.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define SECRET "correct horse battery staple"

/* ------------------------------------------------------------------------ */
/* Raw bootstrap peer (docs/PROTOCOL.md, "Connection bootstrap")            */
/* ------------------------------------------------------------------------ */

enum { F_HELLO = 1, F_WELCOME = 2, F_REFUSE = 3, F_CHALLENGE = 4, F_AUTH = 5 };
#define MAGIC   0x58444d52u
#define VERSION RDMX_WIRE_VERSION

static int raw_open(const th_proc_t *srv)
{
    const char *colon = strrchr(srv->addr, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET};
    struct timeval tv = {.tv_sec = 10 * TH_SLOW};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    CHECK(fd >= 0 && colon != NULL);
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    CHECKF(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
           "connect to %s", srv->addr);
    return fd;
}

static void send_frame(int fd, unsigned type, const void *body, size_t len)
{
    unsigned char *f = th_alloc(8 + len);

    memset(f, 0, 8);
    rdmx_put_le32(f, (uint32_t)len);
    f[4] = (unsigned char)type;
    memcpy(f + 8, body, len);
    CHECK(send(fd, f, 8 + len, MSG_NOSIGNAL) == (ssize_t)(8 + len));
    free(f);
}

static int read_all(int fd, void *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

/* The next frame: its type, body in @body (up to @cap); -1 at EOF. */
static long read_frame(int fd, unsigned *type, unsigned char *body,
                       size_t cap)
{
    unsigned char h[8];
    uint32_t len;

    if (read_all(fd, h, 8) < 0)
        return -1;
    len = rdmx_get_le32(h);
    CHECKF(len <= cap, "frame of %u bytes", len);
    CHECK(read_all(fd, body, len) == 0);
    *type = h[4];
    return (long)len;
}

/* The connection's end: EOF, nothing more. */
static void expect_eof(int fd, const char *what)
{
    unsigned char body[256];
    unsigned type;

    CHECKF(read_frame(fd, &type, body, sizeof(body)) < 0,
           "%s: the server sent frame type %u instead of closing", what,
           type);
    close(fd);
}

static void expect_refuse(int fd, rdmx_status_t status, const char *needle,
                          const char *what)
{
    unsigned char body[256];
    unsigned type;
    long n = read_frame(fd, &type, body, sizeof(body) - 1);

    CHECKF(n >= 4 && type == F_REFUSE, "%s: got frame type %u (%ld bytes), "
           "expected REFUSE", what, n < 0 ? 0 : type, n);
    body[n] = '\0';
    CHECKF((int32_t)rdmx_get_le32(body) == status,
           "%s: REFUSE with status %d (\"%s\"), expected %s", what,
           (int32_t)rdmx_get_le32(body), body + 4, rdmx_status_name(status));
    CHECKF(needle == NULL || strstr((char *)body + 4, needle) != NULL,
           "%s: REFUSE says \"%s\", expected \"%s\"", what, body + 4,
           needle);
    expect_eof(fd, what);
}

typedef struct {
    unsigned char body[8192];
    size_t len;
    unsigned char nonce[16];
    uint64_t worker;
    const unsigned char *addr;
    size_t addr_len;
} hello_t;

static void make_hello(hello_t *h, uint64_t worker, const void *addr,
                       size_t addr_len, unsigned char nonce_byte)
{
    CHECK(32 + addr_len <= sizeof(h->body));
    memset(h->nonce, nonce_byte, sizeof(h->nonce));
    h->worker = worker;
    rdmx_put_le32(h->body, MAGIC);
    rdmx_put_le16(h->body + 4, VERSION);
    rdmx_put_le16(h->body + 6, 0);
    rdmx_put_le64(h->body + 8, worker);
    memcpy(h->body + 16, h->nonce, 16);
    memcpy(h->body + 32, addr, addr_len);
    h->len = 32 + addr_len;
    h->addr = h->body + 32;
    h->addr_len = addr_len;
}

static void hmac(const char *key, const unsigned char *msg, size_t len,
                 unsigned char out[32])
{
    unsigned int olen = 32;

    CHECK(HMAC(EVP_sha256(), key, (int)strlen(key), msg, len, out, &olen) !=
              NULL &&
          olen == 32);
}

/* "rdmx-client" || server nonce || client nonce || le64 worker || addr */
static void client_proof(const char *key, const hello_t *h,
                         const unsigned char *snonce, unsigned char out[32])
{
    unsigned char *m = th_alloc(11 + 16 + 16 + 8 + h->addr_len);

    memcpy(m, "rdmx-client", 11);
    memcpy(m + 11, snonce, 16);
    memcpy(m + 27, h->nonce, 16);
    rdmx_put_le64(m + 43, h->worker);
    memcpy(m + 51, h->addr, h->addr_len);
    hmac(key, m, 51 + h->addr_len, out);
    free(m);
}

/* HELLO; returns the CHALLENGE's nonce. */
static void hello_challenged(int fd, const hello_t *h, unsigned char *snonce,
                             const char *what)
{
    unsigned char body[256];
    unsigned type;
    long n;

    send_frame(fd, F_HELLO, h->body, h->len);
    n = read_frame(fd, &type, body, sizeof(body));
    CHECKF(n == 16 && type == F_CHALLENGE,
           "%s: HELLO to a server with a secret answered with frame type %u "
           "(%ld bytes), not a 16-byte CHALLENGE",
           what, n < 0 ? 0 : type, n);
    memcpy(snonce, body, 16);
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
    p.field_mask = RDMX_CHANNEL_PARAM_FIELD_STATE_CB;
    p.state_cb = state_cb;
    p.state_arg = log;
    if (secret != NULL) {
        p.field_mask |= RDMX_CHANNEL_PARAM_FIELD_AUTH_SECRET;
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
    rdmx_call_params_t cp = {
        .field_mask = RDMX_CALL_PARAM_FIELD_CB, .cb = res_cb, .arg = &res};
    rdmx_channel_t *ch;
    double t0 = th_now_ms(), took;
    char buf[16];
    size_t len;
    rdmx_status_t st;

    memset(&log, 0, sizeof(log));
    memset(&res, 0, sizeof(res));
    ch = channel(w, srv, secret, &log);
    /* queued while connecting */
    CHECK_ST(rdmx_call_nb(ch, "echo", "q", 1, &cp, NULL), RDMX_INPROGRESS);
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
    CHECK_ST(rdmx_call_nb(ch, "echo", "q", 1, &cp, NULL), RDMX_ERR_DENIED);
    CHECK_ST(rdmx_call(ch, "echo", "q", 1, buf, sizeof(buf), NULL, &len),
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

    CHECK_OK(rdmx_call(ch, "rdmx.stats", NULL, 0, text, sizeof(text) - 1, NULL,
                       &len));
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

int main(int argc, char **argv)
{
    th_proc_t a, b;
    rdmx_context_t *ctx;
    rdmx_worker_t *w, *rw;
    rdmx_channel_t *good;
    state_log_t glog;
    uint64_t auth_failed0;
    unsigned want_auth_failed = 0;
    unsigned char r2_proof[32];
    hello_t r2_hello;
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

    /* The right secret. */
    memset(&glog, 0, sizeof(glog));
    good = channel(w, &a, SECRET, &glog);
    CHECK_OK(rdmx_channel_wait_ready(good, 10000 * TH_SLOW));
    CHECK(glog.last == RDMX_CHANNEL_READY);
    CHECK_OK(rdmx_call(good, "echo", "authenticated", 13, buf, sizeof(buf),
                       NULL, &len));
    CHECK(len == 13 && memcmp(buf, "authenticated", 13) == 0);
    auth_failed0 = stat_of(good, "auth_failed");
    th_log("right secret: READY, echo served");

    /* Channels that must be refused. */
    refused_channel(w, &a, "wrong secret", "wrong secret");
    want_auth_failed++;
    refused_channel(w, &a, "correct horse", "secret prefix");
    want_auth_failed++;
    refused_channel(w, &a, NULL, "no secret");
    want_auth_failed++; /* it left at the CHALLENGE: a missing proof */
    refused_channel(w, &b, SECRET, "secret vs a server without one");

    /* Raw bootstrap peers. */
    rw = th_worker(ctx, 0);
    {
        unsigned char junk[4096], sn[16], proof[32];
        hello_t h;
        int fd = raw_open(&a);

        /* R1: garbage as the transport address, then a wrong proof. */
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (unsigned char)(i * 131 + 7);
        make_hello(&h, 0x1111, junk, sizeof(junk), 0x11);
        hello_challenged(fd, &h, sn, "R1");
        client_proof("not it", &h, sn, proof);
        send_frame(fd, F_AUTH, proof, sizeof(proof));
        expect_refuse(fd, RDMX_ERR_DENIED, "authentication failed", "R1");
        want_auth_failed++;
        th_log("raw R1: HELLO with a 4 KiB garbage address -> CHALLENGE (the "
               "address not used); wrong proof -> REFUSE DENIED, closed");
    }
    {
        unsigned char sn[16], body[8192], want[32];
        unsigned char *m;
        unsigned type;
        long n;
        size_t alen, mlen;
        uint64_t sworker, token;
        int fd = raw_open(&a);

        /* R2: a real worker's address and the right proof: WELCOME. */
        make_hello(&r2_hello, rw->id, rw->addr, rw->addr_len, 0x22);
        hello_challenged(fd, &r2_hello, sn, "R2");
        client_proof(SECRET, &r2_hello, sn, r2_proof);
        send_frame(fd, F_AUTH, r2_proof, sizeof(r2_proof));
        n = read_frame(fd, &type, body, sizeof(body));
        CHECKF(type == F_WELCOME && n > 24 + 32,
               "R2: a correct AUTH answered with frame type %u (%ld bytes)",
               type, n);
        CHECK(rdmx_get_le32(body) == MAGIC);
        CHECK(rdmx_get_le16(body + 4) == VERSION);
        CHECKF(rdmx_get_le16(body + 6) == 1, "WELCOME flags 0x%x: no proof",
               rdmx_get_le16(body + 6));
        sworker = rdmx_get_le64(body + 8);
        token = rdmx_get_le64(body + 16);
        alen = (size_t)n - 24 - 32;
        /* "rdmx-server" || client nonce || server nonce || le64 worker ||
         * le64 token || addr */
        mlen = 11 + 16 + 16 + 16 + alen;
        m = th_alloc(mlen);
        memcpy(m, "rdmx-server", 11);
        memcpy(m + 11, r2_hello.nonce, 16);
        memcpy(m + 27, sn, 16);
        rdmx_put_le64(m + 43, sworker);
        rdmx_put_le64(m + 51, token);
        memcpy(m + 59, body + 24 + 32, alen);
        hmac(SECRET, m, mlen, want);
        free(m);
        CHECKF(memcmp(want, body + 24, 32) == 0,
               "R2: the server's proof in WELCOME is wrong");
        close(fd); /* (the server drops it: no BIND) */
        th_log("raw R2: right proof -> WELCOME whose server proof checks out");
    }
    {
        unsigned char sn[16], proof[32];
        int fd = raw_open(&a);

        /* R3: R2's HELLO and proof replayed. */
        hello_challenged(fd, &r2_hello, sn, "R3");
        send_frame(fd, F_AUTH, r2_proof, sizeof(r2_proof));
        expect_refuse(fd, RDMX_ERR_DENIED, "authentication failed", "R3");
        want_auth_failed++;

        /* R4: an AUTH of 31 bytes. */
        fd = raw_open(&a);
        hello_challenged(fd, &r2_hello, sn, "R4");
        client_proof(SECRET, &r2_hello, sn, proof);
        send_frame(fd, F_AUTH, proof, 31);
        expect_refuse(fd, RDMX_ERR_DENIED, "AUTH", "R4");
        want_auth_failed++;

        /* R5: AUTH before HELLO. */
        fd = raw_open(&a);
        send_frame(fd, F_AUTH, proof, sizeof(proof));
        expect_refuse(fd, RDMX_ERR_PROTO, "expected HELLO", "R5");

        /* R6: HELLO, then gone at the CHALLENGE. */
        fd = raw_open(&a);
        hello_challenged(fd, &r2_hello, sn, "R6");
        close(fd);
        want_auth_failed++;
        th_log("raw R3-R6: a replayed proof, a 31-byte AUTH: DENIED; AUTH "
               "before HELLO: PROTO; a client gone at the CHALLENGE: counted");
    }

    /* Counters on server A, read over the authenticated channel. */
    CHECKF(th_alive(&a), "server A died");
    {
        double deadline = th_now_ms() + 5000.0 * TH_SLOW;
        uint64_t af;

        /* (R6's end reaches the server a moment later) */
        while ((af = stat_of(good, "auth_failed") - auth_failed0) <
                   want_auth_failed &&
               th_now_ms() < deadline)
            th_progress_for(w, 10);
        CHECKF(af == want_auth_failed, "auth_failed grew by %llu, expected %u",
               (unsigned long long)af, want_auth_failed);
        th_log("server A: auth_failed +%llu, as predicted",
               (unsigned long long)af);
    }
    CHECK_OK(rdmx_call(good, "echo", "still", 5, buf, sizeof(buf), NULL, &len));
    CHECK(len == 5);

    rdmx_worker_destroy(rw); /* (after the server dropped R2's endpoint) */
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
