/*
 * kv_shards: one client over three rdmx-kvd servers (include/rdmx/kv.h:
 * jump consistent hashing, replicas, channels that reconnect).
 *
 * - 3,000 keys spread over the servers: each holds 20-47 % of them
 *   (curr_items), exactly the keys rdmx_kv_server_of() names; every key
 *   reads back.
 * - One server is SIGKILLed: every kind of operation on its keys (get, put,
 *   exists, delete, touch, incr, and its part of an mget) fails with an
 *   error that is not NOT_FOUND, each within the client's 1 s timeout plus
 *   slack (no hang); the keys of the other two still read back and take
 *   writes. (Calls that must fail go through clients with a 1 s timeout,
 *   everything else through clients with a 15 s one, so that a busy host
 *   does not fail ordinary calls.)
 * - It is restarted on the same port: the client's channel reconnects by
 *   itself (reconnects counted), the keys it held are gone (NOT_FOUND),
 *   writes and reads on it work, its curr_items counts exactly them; the
 *   other servers' keys are intact.
 * - replicas = 2 (a second client): 1,500 keys, each on its server and the
 *   next (curr_items per server adds up to that); another server is
 *   SIGKILLed; once the client has noticed (its channel is no longer ready),
 *   every key still reads back (from the replica), one by one and by mget;
 *   a write to a key whose first server is dead fails but reaches the
 *   replica, which serves the new value; an mput with the server dead
 *   reports an error for every item with a copy there (first or second)
 *   and stores the others.
 * - Conditional writes with two copies (before that kill): a CAS put with
 *   a stale version is EXISTS, with the version read OK, and the second
 *   copy follows (read from it once the first copy's server is dead); the
 *   same for a delete with a version; rdmx_kv_put_nb refuses CAS with
 *   replicas > 1 (RDMX_ERR_UNSUPPORTED, no callback).
 * - The surviving servers exit 0 on SIGTERM.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "kvd_launcher.h"

#include <rdmx/kv.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS    3
#define NKEYS 3000
#define NREP  1500
/* the timeout of the clients that call dead servers */
#define TIMEOUT (TH_SANITIZED ? 2000 : 1000)
/* the timeout of the clients for everything else (a busy host may stall a
 * single call for a while) */
#define PATIENT (15000 * TH_SLOW)
/* an operation on a dead server must end within this */
#define BOUND (TIMEOUT + 2000.0 * TH_SLOW)

static kvd_t srv[NS];
static int soft_failures; /* checks that let the test go on */
static int nb_calls;

static void nb_cb(rdmx_status_t st, const rdmx_kv_meta_t *meta, void *arg)
{
    (void)st;
    (void)meta;
    (*(int *)arg)++;
}
static rdmx_worker_t *worker;

static size_t make_value(char *buf, const char *prefix, int i, int gen)
{
    size_t len = 16 + (size_t)(th_seed((uint64_t)i, (uint64_t)gen, 5) % 48);

    th_fill(buf, len, th_seed((uint64_t)i, (uint64_t)gen, (uint64_t)prefix[0]));
    return len;
}

static void key_of(char *key, size_t size, const char *prefix, int i)
{
    snprintf(key, size, "%s:%d", prefix, i);
}

static rdmx_kv_t *client(const char *servers, unsigned replicas, int timeout_ms)
{
    rdmx_kv_params_t p;
    rdmx_kv_t *kv = NULL;

    memset(&p, 0, sizeof(p));
    p.field_mask = RDMX_KV_PARAM_FIELD_TIMEOUT | RDMX_KV_PARAM_FIELD_REPLICAS;
    p.timeout_ms = timeout_ms;
    p.replicas = replicas;
    CHECK_OK(rdmx_kv_create(worker, servers, &p, &kv));
    CHECK_OK(rdmx_kv_wait_ready(kv, 20000 * TH_SLOW));
    CHECK(rdmx_kv_servers(kv) == NS);
    return kv;
}

static uint64_t items_on(rdmx_kv_t *kv, unsigned s)
{
    char st[4096];

    CHECK_OK(rdmx_kv_stats(kv, s, st, sizeof(st)));
    return stat_of(st, "curr_items");
}

/* Read @key and compare with generation @gen of the value. */
static void expect_value(rdmx_kv_t *kv, const char *prefix, int i, int gen)
{
    char key[32], want[64], got[64];
    size_t len = make_value(want, prefix, i, gen);
    rdmx_kv_meta_t m;

    key_of(key, sizeof(key), prefix, i);
    memset(&m, 0, sizeof(m));
    CHECK_OK(rdmx_kv_get(kv, key, strlen(key), got, sizeof(got), NULL, &m));
    CHECKF(m.length == len && memcmp(got, want, len) == 0,
           "%s: %zu bytes, not the %zu bytes written", key, m.length, len);
}

static void put_value(rdmx_kv_t *kv, const char *prefix, int i, int gen)
{
    char key[32], v[64];
    size_t len = make_value(v, prefix, i, gen);

    key_of(key, sizeof(key), prefix, i);
    CHECK_OK(rdmx_kv_put(kv, key, strlen(key), v, len, NULL, NULL));
}

/* Run @st's operation, check it failed with a transport error in time. */
#define EXPECT_DEAD(what, expr)                                                \
    do {                                                                       \
        double t0_ = th_now_ms(), dt_;                                         \
        rdmx_status_t st_ = (expr);                                            \
        dt_ = th_now_ms() - t0_;                                               \
        th_log("  %-28s -> %s after %.0f ms (%s)", what,                       \
               rdmx_status_name(st_), dt_, rdmx_error_detail());               \
        CHECKF(st_ < 0 && st_ != RDMX_ERR_NOT_FOUND,                           \
               "%s on a dead server returned %s", what,                        \
               rdmx_status_name(st_));                                         \
        CHECKF(dt_ < BOUND, "%s on a dead server took %.0f ms", what, dt_);    \
    } while (0)

/* Progress until @ch's state is (or, with @not, is no longer) @state. */
static double wait_state(rdmx_channel_t *ch, rdmx_channel_state_t state,
                         int not, int timeout_ms, const char *what)
{
    double t0 = th_now_ms();

    while ((rdmx_channel_state(ch) == state) == not ) {
        CHECKF(th_now_ms() - t0 < timeout_ms * TH_SLOW,
               "%s: channel state %d after %d ms", what,
               (int)rdmx_channel_state(ch), timeout_ms * TH_SLOW);
        rdmx_worker_wait(worker, 10);
    }
    return th_now_ms() - t0;
}

static void kill_server(int s)
{
    int ws;

    kvd_kill(&srv[s], SIGKILL);
    ws = kvd_wait(&srv[s], 10000 * TH_SLOW, NULL, 0, NULL);
    CHECKF(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
           "server %d: wait status 0x%x", s, ws);
}

int main(void)
{
    char servers[256], key[32], why[2200], port[32];
    rdmx_context_t *ctx;
    rdmx_kv_t *kv, *kv2, *kvq, *kv2q; /* patient and quick clients */
    unsigned owner[NKEYS], rep_owner[NREP];
    uint64_t count[NS] = {0}, items[NS];
    const int victim = 1, victim2 = 0;
    int vkeys[3], nv = 0, nputs = 0, kcas = -1, kdel = -1;
    double t0, dt;

    th_init("kv_shards", 170);
    t0 = th_now_ms();
    kl_start();
    for (int s = 0; s < NS; s++)
        kvd_start(&srv[s], NULL, "--workers", "1", "--memory", "16m", NULL);
    snprintf(servers, sizeof(servers), "%s,%s,%s", srv[0].addr, srv[1].addr,
             srv[2].addr);
    th_log("servers %s (transport %s)", servers, th_transport_env());
    ctx = th_context();
    worker = th_worker(ctx, 0);
    kv = client(servers, 1, PATIENT);
    kvq = client(servers, 1, TIMEOUT);

    /* --- spread ---------------------------------------------------------- */
    for (int i = 0; i < NKEYS; i++) {
        key_of(key, sizeof(key), "k", i);
        owner[i] = rdmx_kv_server_of(kv, key, strlen(key));
        CHECK(owner[i] < NS);
        count[owner[i]]++;
        put_value(kv, "k", i, 0);
    }
    for (int s = 0; s < NS; s++) {
        items[s] = items_on(kv, (unsigned)s);
        th_log("server %d: %" PRIu64 " items (%.1f %%), %" PRIu64
               " keys mapped to it",
               s, items[s], 100.0 * (double)items[s] / NKEYS, count[s]);
        CHECK_EQ_U64(items[s], count[s]);
        CHECKF(items[s] >= NKEYS * 20 / 100 && items[s] <= NKEYS * 47 / 100,
               "server %d holds %" PRIu64 " of %d keys", s, items[s], NKEYS);
    }
    for (int i = 0; i < NKEYS; i++)
        expect_value(kv, "k", i, 0);
    th_log("spread: ok (%.1f s)", (th_now_ms() - t0) / 1000);

    /* --- kill one -------------------------------------------------------- */
    for (int i = 0; i < NKEYS && nv < 3; i++)
        if (owner[i] == (unsigned)victim)
            vkeys[nv++] = i;
    CHECK(nv == 3);
    kill_server(victim);
    {
        char k0[32], v[64], buf[64];
        rdmx_kv_meta_t m;
        uint64_t n;

        key_of(k0, sizeof(k0), "k", vkeys[0]);
        EXPECT_DEAD("get", rdmx_kv_get(kvq, k0, strlen(k0), buf, sizeof(buf),
                                       NULL, &m));
        EXPECT_DEAD("put",
                    rdmx_kv_put(kvq, k0, strlen(k0), v,
                                make_value(v, "k", vkeys[0], 1), NULL, NULL));
        key_of(k0, sizeof(k0), "k", vkeys[1]);
        EXPECT_DEAD("exists", rdmx_kv_exists(kvq, k0, strlen(k0)));
        EXPECT_DEAD("delete", rdmx_kv_delete(kvq, k0, strlen(k0), 0));
        key_of(k0, sizeof(k0), "k", vkeys[2]);
        EXPECT_DEAD("touch", rdmx_kv_touch(kvq, k0, strlen(k0), 1000));
        EXPECT_DEAD("incr", rdmx_kv_incr(kvq, k0, strlen(k0), 1, 0, &n));
        dt = wait_state(rdmx_kv_channel(kvq, victim), RDMX_CHANNEL_READY, 1,
                        5000, "dead server");
        th_log("  channel to the dead server: state %d",
               (int)rdmx_channel_state(rdmx_kv_channel(kvq, victim)));
        (void)dt;
    }
    /* the others: every key reads back, writes work */
    {
        double t1 = th_now_ms();
        int n = 0;
        for (int i = 0; i < NKEYS; i++)
            if (owner[i] != (unsigned)victim) {
                expect_value(kv, "k", i, 0);
                n++;
            }
        for (int i = 0; i < NKEYS; i += 10)
            if (owner[i] != (unsigned)victim) {
                put_value(kv, "k", i, 2);
                expect_value(kv, "k", i, 2);
                put_value(kv, "k", i, 0);
            }
        th_log("  %d keys on the live servers read back in %.0f ms", n,
               th_now_ms() - t1);
    }
    /* an mget over all three: the dead server's part fails */
    {
        enum { M = 30 };
        static char mk[M][32], out[M][64];
        rdmx_kv_mget_t g[M];
        int idx[M], n = 0;
        double t1 = th_now_ms();
        rdmx_status_t st;

        memset(g, 0, sizeof(g));
        for (int i = 0; i < NKEYS && n < M; i++)
            if ((int)owner[i] == n % NS) {
                idx[n] = i;
                key_of(mk[n], sizeof(mk[n]), "k", i);
                g[n].key = mk[n];
                g[n].klen = strlen(mk[n]);
                g[n].buf = out[n];
                g[n].capacity = sizeof(out[n]);
                n++;
            }
        st = rdmx_kv_mget(kvq, g, M);
        th_log("  mget over all servers: %s after %.0f ms",
               rdmx_status_name(st), th_now_ms() - t1);
        CHECKF(st < 0 && st != RDMX_ERR_NOT_FOUND,
               "mget with a dead server returned %s", rdmx_status_name(st));
        CHECKF(th_now_ms() - t1 < BOUND, "mget took %.0f ms", th_now_ms() - t1);
        for (int k = 0; k < M; k++) {
            if (owner[idx[k]] == (unsigned)victim) {
                CHECKF(g[k].status < 0 && g[k].status != RDMX_ERR_NOT_FOUND,
                       "mget item on the dead server: %s",
                       rdmx_status_name(g[k].status));
            } else {
                char want[64];
                size_t len = make_value(want, "k", idx[k], 0);
                CHECKF(g[k].status == RDMX_OK && g[k].meta.length == len &&
                           memcmp(out[k], want, len) == 0,
                       "mget item %d on a live server: %s", k,
                       rdmx_status_name(g[k].status));
            }
        }
    }
    th_log("kill: ok (%.1f s)", (th_now_ms() - t0) / 1000);

    /* --- restart on the same port --------------------------------------- */
    snprintf(port, sizeof(port), "127.0.0.1:%u", (unsigned)srv[victim].port);
    {
        double t1 = th_now_ms();
        while (kvd_try_start(&srv[victim], port, why, sizeof(why), "--workers",
                             "1", "--memory", "16m", NULL) != 0) {
            CHECKF(th_now_ms() - t1 < 15000.0 * TH_SLOW, "restart on %s: %s",
                   port, why);
            th_log("  restart on %s failed, retrying: %s", port, why);
            th_progress_for(worker, 200);
        }
    }
    CHECK(strcmp(srv[victim].addr, port) == 0);
    dt = wait_state(rdmx_kv_channel(kv, victim), RDMX_CHANNEL_READY, 0, 15000,
                    "restarted server");
    th_log("  channel ready %.0f ms after the restart", dt);
    {
        rdmx_channel_stats_t cs;
        char buf[64];
        rdmx_kv_meta_t m;

        rdmx_channel_stats(rdmx_kv_channel(kv, victim), &cs);
        CHECKF(cs.reconnects >= 1, "reconnects %" PRIu64, cs.reconnects);
        for (int i = 0; i < NKEYS; i++) {
            if (owner[i] != (unsigned)victim)
                continue;
            key_of(key, sizeof(key), "k", i);
            CHECK_ST(
                rdmx_kv_get(kv, key, strlen(key), buf, sizeof(buf), NULL, &m),
                RDMX_ERR_NOT_FOUND);
            if (i % 3 == 0) {
                put_value(kv, "k", i, 3);
                expect_value(kv, "k", i, 3);
                nputs++;
            }
        }
        CHECK_EQ_U64(items_on(kv, victim), nputs);
        for (int i = 0; i < NKEYS; i++)
            if (owner[i] != (unsigned)victim)
                expect_value(kv, "k", i, 0);
        th_log("restart: ok: %d keys written to the restarted server "
               "(%.1f s)",
               nputs, (th_now_ms() - t0) / 1000);
    }

    /* --- replicas = 2 --------------------------------------------------- */
    CHECK_OK(rdmx_kv_flush(kv));
    kv2 = client(servers, 2, PATIENT);
    kv2q = client(servers, 2, TIMEOUT);
    memset(count, 0, sizeof(count));
    for (int i = 0; i < NREP; i++) {
        key_of(key, sizeof(key), "r", i);
        rep_owner[i] = rdmx_kv_server_of(kv2, key, strlen(key));
        count[rep_owner[i]]++;
        count[(rep_owner[i] + 1) % NS]++;
        put_value(kv2, "r", i, 0);
    }
    for (int s = 0; s < NS; s++) {
        items[s] = items_on(kv2, (unsigned)s);
        th_log("replicas: server %d holds %" PRIu64 " items", s, items[s]);
        CHECK_EQ_U64(items[s], count[s]);
    }
    /* conditional writes with two copies: the first copy decides, both
     * follow (checked on the second copy once the first is dead) */
    for (int i = 0; i < NREP; i++) {
        if (rep_owner[i] != (unsigned)victim2)
            continue;
        if (kcas < 0) {
            kcas = i;
        } else {
            kdel = i;
            break;
        }
    }
    CHECK(kcas >= 0 && kdel >= 0);
    {
        char buf[64], v[64];
        rdmx_kv_meta_t m;
        rdmx_kv_op_params_t o = {.field_mask = RDMX_KV_OP_PARAM_FIELD_MODE |
                                               RDMX_KV_OP_PARAM_FIELD_FLAGS |
                                               RDMX_KV_OP_PARAM_FIELD_TTL |
                                               RDMX_KV_OP_PARAM_FIELD_CAS,
                                 .mode = RDMX_KV_PUT_CAS,
                                 .flags = 0,
                                 .ttl_ms = 0,
                                 .cas = 0};
        rdmx_kv_op_params_t onb;
        rdmx_status_t st;
        size_t len = make_value(v, "r", kcas, 1);
        uint64_t cas = 0;

        key_of(key, sizeof(key), "r", kcas);
        CHECK_OK(
            rdmx_kv_get(kv2, key, strlen(key), buf, sizeof(buf), NULL, &m));
        o.cas = m.cas + 1000; /* stale: refused, nothing changes */
        CHECK_ST(rdmx_kv_put(kv2, key, strlen(key), v, len, &o, NULL),
                 RDMX_ERR_EXISTS);
        o.cas = m.cas;
        st = rdmx_kv_put(kv2, key, strlen(key), v, len, &o, &cas);
        th_log("  CAS put with the version read (%" PRIu64 "), replicas 2: "
               "%s",
               m.cas, rdmx_status_name(st));
        if (st != RDMX_OK) {
            th_log("FAIL %s:%d (continuing): a CAS put with the current "
                   "version, replicas 2, returned %s (%s)",
                   __FILE__, __LINE__, rdmx_status_name(st),
                   rdmx_error_detail());
            soft_failures++;
        }
        expect_value(kv2, "r", kcas, 1);
        /* the non-blocking form refuses conditional writes with copies */
        onb = o;
        onb.field_mask |= RDMX_KV_OP_PARAM_FIELD_CB;
        onb.cb = nb_cb;
        onb.arg = &nb_calls;
        st = rdmx_kv_put_nb(kv2, key, strlen(key), v, len, &onb);
        CHECKF(st == RDMX_ERR_UNSUPPORTED,
               "rdmx_kv_put_nb CAS with replicas 2: %s", rdmx_status_name(st));
        /* a delete with the version read */
        key_of(key, sizeof(key), "r", kdel);
        CHECK_OK(
            rdmx_kv_get(kv2, key, strlen(key), buf, sizeof(buf), NULL, &m));
        CHECK_ST(rdmx_kv_delete(kv2, key, strlen(key), m.cas + 1000),
                 RDMX_ERR_EXISTS);
        st = rdmx_kv_delete(kv2, key, strlen(key), m.cas);
        if (st != RDMX_OK) {
            th_log("FAIL %s:%d (continuing): a delete with the current "
                   "version, replicas 2, returned %s (%s)",
                   __FILE__, __LINE__, rdmx_status_name(st),
                   rdmx_error_detail());
            soft_failures++;
        }
        CHECK_ST(rdmx_kv_exists(kv2, key, strlen(key)), RDMX_ERR_NOT_FOUND);
        th_progress_for(worker, 20);
        CHECKF(nb_calls == 0, "a refused put_nb ran its callback");
    }
    kill_server(victim2);
    /* (the patient client's heartbeat allows 15 s of silence; a killed
     * server is normally found at once through its closed connection) */
    dt = wait_state(rdmx_kv_channel(kv2, victim2), RDMX_CHANNEL_READY, 1, 20000,
                    "dead server (replicas)");
    dt += wait_state(rdmx_kv_channel(kv2q, victim2), RDMX_CHANNEL_READY, 1,
                     5000, "dead server (replicas, quick client)");
    th_log("  the clients noticed the dead server after %.0f ms", dt);
    {
        double t1 = th_now_ms();
        char buf[64];
        rdmx_kv_meta_t m;
        for (int i = 0; i < NREP; i++)
            if (i != kdel)
                expect_value(kv2, "r", i, i == kcas ? 1 : 0);
        /* the second copies followed the conditional write and delete */
        key_of(key, sizeof(key), "r", kdel);
        if (rdmx_kv_get(kv2, key, strlen(key), buf, sizeof(buf), NULL, &m) !=
            RDMX_ERR_NOT_FOUND) {
            th_log("FAIL %s:%d (continuing): r:%d, deleted with its version, "
                   "is still on its second copy",
                   __FILE__, __LINE__, kdel);
            soft_failures++;
        }
        th_log("  all %d keys read back in %.0f ms", NREP, th_now_ms() - t1);
        CHECKF(th_now_ms() - t1 < 20000.0 * TH_SLOW, "reads took %.0f ms",
               th_now_ms() - t1);
    }
    {
        rdmx_kv_mget_t *g = th_alloc(NREP * sizeof(*g));
        static char mk[NREP][32], out[NREP][64];
        rdmx_status_t st;

        memset(g, 0, NREP * sizeof(*g));
        for (int i = 0; i < NREP; i++) {
            key_of(mk[i], sizeof(mk[i]), "r", i);
            g[i].key = mk[i];
            g[i].klen = strlen(mk[i]);
            g[i].buf = out[i];
            g[i].capacity = sizeof(out[i]);
        }
        st = rdmx_kv_mget(kv2, g, NREP);
        for (int i = 0; i < NREP; i++) {
            char want[64];
            size_t len = make_value(want, "r", i, i == kcas ? 1 : 0);
            if (i == kdel) {
                CHECKF(g[i].status == RDMX_ERR_NOT_FOUND,
                       "mget of the deleted r:%d: %s", i,
                       rdmx_status_name(g[i].status));
                continue;
            }
            CHECKF(g[i].status == RDMX_OK && g[i].meta.length == len &&
                       memcmp(out[i], want, len) == 0,
                   "mget r:%d with one replica dead: %s", i,
                   rdmx_status_name(g[i].status));
        }
        CHECK(st == RDMX_OK || st == RDMX_ERR_NOT_FOUND);
        free(g);
    }
    /* a write to a key whose first server is dead: fails, reaches the
     * replica */
    for (int i = 0; i < NREP; i++) {
        if (rep_owner[i] != (unsigned)victim2 || i == kcas || i == kdel)
            continue;
        char v[64];
        size_t len = make_value(v, "r", i, 1);
        key_of(key, sizeof(key), "r", i);
        EXPECT_DEAD("put, first replica dead",
                    rdmx_kv_put(kv2q, key, strlen(key), v, len, NULL, NULL));
        expect_value(kv2, "r", i, 1);
        break;
    }
    /* mput with a dead server: the items it should hold (as first or
     * second copy) report an error, the others are stored */
    {
        enum { M = 60 };
        static char mk[M][32], mv[M][64];
        rdmx_kv_mput_t p[M];
        int bad_ok = 0, good_bad = 0;
        double t1 = th_now_ms();
        rdmx_status_t st;

        memset(p, 0, sizeof(p));
        for (int i = 0; i < M; i++) {
            key_of(mk[i], sizeof(mk[i]), "r", i);
            p[i].key = mk[i];
            p[i].klen = strlen(mk[i]);
            p[i].value = mv[i];
            p[i].vlen = make_value(mv[i], "r", i, 2);
        }
        st = rdmx_kv_mput(kv2q, p, M);
        th_log("  mput of %d keys with a server dead: %s after %.0f ms", M,
               rdmx_status_name(st), th_now_ms() - t1);
        CHECKF(th_now_ms() - t1 < 2 * BOUND, "mput took %.0f ms",
               th_now_ms() - t1);
        CHECKF(st < 0, "mput with a dead replica returned %s",
               rdmx_status_name(st));
        for (int i = 0; i < M; i++) {
            int dead = rep_owner[i] == (unsigned)victim2 ||
                       (rep_owner[i] + 1) % NS == (unsigned)victim2;
            if (dead && p[i].status == RDMX_OK) {
                if (bad_ok++ == 0)
                    th_log("  r:%d (servers %u, %u) reported OK", i,
                           rep_owner[i], (rep_owner[i] + 1) % NS);
            }
            if (!dead && p[i].status != RDMX_OK)
                good_bad++;
            if (!dead || rep_owner[i] != (unsigned)victim2)
                expect_value(kv2, "r", i, 2); /* a live copy has it */
        }
        CHECKF(good_bad == 0, "%d mput items on live servers failed", good_bad);
        if (bad_ok) {
            th_log("FAIL %s:%d (continuing): %d mput items whose second "
                   "copy went to the dead server reported RDMX_OK",
                   __FILE__, __LINE__, bad_ok);
            soft_failures++;
        }
    }
    th_log("replicas: ok (%.1f s)", (th_now_ms() - t0) / 1000);

    rdmx_kv_destroy(kv2q);
    rdmx_kv_destroy(kv2);
    rdmx_kv_destroy(kvq);
    rdmx_kv_destroy(kv);
    rdmx_worker_destroy(worker);
    rdmx_context_destroy(ctx);
    for (int s = 0; s < NS; s++)
        kvd_stop(&srv[s]);
    if (soft_failures) {
        th_log("FAILED: %d check(s) failed (%.1f s)", soft_failures,
               (th_now_ms() - t0) / 1000);
        return 1;
    }
    th_log("ok (%.1f s)", (th_now_ms() - t0) / 1000);
    return 0;
}
