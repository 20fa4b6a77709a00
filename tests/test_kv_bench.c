/*
 * kv_bench: `rdmx-kv bench` against a real rdmx-kvd — processes, threads
 * and operations in flight add up to exactly the operations the server
 * counted, its JSON is complete, bad options and a dead server are errors.
 *
 * - mix: --procs 2 --threads 2 --window 4 --ops 100 (per thread) over 50
 *   keys: JSON says 400 operations, no error or miss; the server's
 *   cmd_get + cmd_set grew by 400 + the 50 loaded keys; every get hit.
 * - get 4 KiB --zero-copy, one blocking call at a time: 300 gets counted.
 * - get --warm-up from 2 threads: each read the 20 keys first (the server
 *   counted 2 x 20 more gets than the 2 x 50 the JSON reports), no miss.
 * - set with --window 8 from 3 processes: 3 x 64 sets counted, no gets.
 * - --window 0, --procs 0, --procs 300: exit 2 before connecting.
 * - a server that is gone: exit 2 within the timeout (with --procs 2 too).
 */
#include "kvd_launcher.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[64];
static kvd_t kvd;

/* The whole of file @p path, NUL-terminated (static buffer). */
static const char *slurp(const char *path)
{
    static char buf[65536];
    FILE *f = fopen(path, "r");
    size_t n = 0;

    buf[0] = '\0';
    if (f != NULL) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return buf;
}

/* The number after "NAME": in JSON text, or after "NAME " in stats text. */
static double field(const char *text, const char *name, int json)
{
    char pat[80];
    const char *p;

    snprintf(pat, sizeof(pat), json ? "\"%s\":" : "\n%s ", name);
    p = strstr(text, pat);
    if (p == NULL && !json) {
        /* the first line has no newline before it */
        snprintf(pat, sizeof(pat), "%s ", name);
        p = strncmp(text, pat, strlen(pat)) == 0 ? text - 1 : NULL;
    }
    CHECKF(p != NULL, "no %s in: %.400s", name, text);
    return strtod(p + strlen(pat), NULL);
}

/* Run rdmx-kv with the NULL-terminated arguments; stdout into *out_p. */
static int kv(const char **out_p, int timeout_ms, ...)
{
    char out[128], *args[40];
    va_list ap;
    int n = 0, ws;

    snprintf(out, sizeof(out), "%s/out", tmpdir);
    va_start(ap, timeout_ms);
    while (n < 39 && (args[n] = va_arg(ap, char *)) != NULL)
        n++;
    va_end(ap);
    args[n] = NULL;
#define A(i) (i < n ? args[i] : NULL)
    ws = kl_run(NULL, out, NULL, timeout_ms, NULL, "rdmx-kv", A(0), A(1),
                A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9), A(10), A(11),
                A(12), A(13), A(14), A(15), A(16), A(17), A(18), A(19), A(20),
                A(21), A(22), A(23), A(24), A(25), NULL);
#undef A
    *out_p = slurp(out);
    return ws;
}

static double kvd_stat(const char *name)
{
    const char *out;
    int ws = kv(&out, 10000, "-s", kvd.addr, "stats", NULL);

    CHECKF(ws == 0, "rdmx-kv stats: wait status 0x%x", ws);
    return field(out, name, 0);
}

static double ops_counted(void)
{
    return kvd_stat("cmd_get") + kvd_stat("cmd_set");
}

int main(void)
{
    const char *out;
    double before, after;
    int ws;

    th_init("kv_bench", 170);
    kl_start();
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rdmx_kv_bench.XXXXXX");
    CHECKF(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
    kvd_start(&kvd, NULL, "--workers", "2", "--memory", "64m", NULL);
    th_log("rdmx-kvd %s, transport %s", kvd.addr, th_transport_env());

    /* mix from 2 processes x 2 threads x 4 in flight */
    before = ops_counted();
    ws = kv(&out, 60000, "-s", kvd.addr, "bench", "--op", "mix",
            "--read-ratio", "0.5", "--keys", "50", "--size", "100", "--ops",
            "100", "--procs", "2", "--threads", "2", "--window", "4",
            "--json", NULL);
    th_log("mix: %s", out);
    CHECKF(ws == 0, "bench mix: wait status 0x%x", ws);
    CHECK(field(out, "ops", 1) == 400);
    CHECK(field(out, "errors", 1) == 0 && field(out, "misses", 1) == 0);
    CHECK(field(out, "procs", 1) == 2 && field(out, "threads", 1) == 2 &&
          field(out, "window", 1) == 4);
    CHECK(field(out, "ops_per_s", 1) > 0 && field(out, "p50_us", 1) > 0 &&
          field(out, "p99_us", 1) >= field(out, "p50_us", 1) &&
          field(out, "p999_us", 1) >= field(out, "p99_us", 1));
    after = ops_counted();
    CHECKF(after - before == 400 + 50, "server counted %.0f operations, "
           "want 400 + 50 loaded", after - before);
    CHECK(kvd_stat("get_misses") == 0);

    /* get 4 KiB into registered buffers, one call at a time */
    before = kvd_stat("cmd_get");
    ws = kv(&out, 60000, "-s", kvd.addr, "bench", "--op", "get", "--keys",
            "20", "--size", "4k", "--ops", "300", "--zero-copy", "--json",
            NULL);
    th_log("get: %s", out);
    CHECKF(ws == 0, "bench get: wait status 0x%x", ws);
    CHECK(field(out, "ops", 1) == 300 && field(out, "errors", 1) == 0 &&
          field(out, "misses", 1) == 0);
    CHECK(field(out, "mb_per_s", 1) > 0);
    CHECK_EQ_U64((uint64_t)(kvd_stat("cmd_get") - before), 300);

    /* --warm-up: every thread reads every key once, not in the figures */
    before = kvd_stat("cmd_get");
    ws = kv(&out, 60000, "-s", kvd.addr, "bench", "--op", "get", "--keys", "20",
            "--size", "4k", "--ops", "50", "--threads", "2", "--zero-copy",
            "--warm-up", "--json", NULL);
    th_log("get --warm-up: %s", out);
    CHECKF(ws == 0, "bench get --warm-up: wait status 0x%x", ws);
    CHECK(field(out, "ops", 1) == 100 && field(out, "errors", 1) == 0 &&
          field(out, "misses", 1) == 0 && field(out, "warm_up", 1) == 1);
    CHECK_EQ_U64((uint64_t)(kvd_stat("cmd_get") - before), 2 * 20 + 100);
    CHECK(kvd_stat("get_misses") == 0);

    /* set from 3 processes, 8 in flight: no load, no gets */
    before = kvd_stat("cmd_get");
    after = kvd_stat("cmd_set");
    ws = kv(&out, 60000, "-s", kvd.addr, "bench", "--op", "set", "--keys",
            "1000", "--size", "1k", "--ops", "64", "--procs", "3",
            "--window", "8", "--json", NULL);
    th_log("set: %s", out);
    CHECKF(ws == 0, "bench set: wait status 0x%x", ws);
    CHECK(field(out, "ops", 1) == 192 && field(out, "errors", 1) == 0);
    CHECK_EQ_U64((uint64_t)(kvd_stat("cmd_set") - after), 192);
    CHECK_EQ_U64((uint64_t)(kvd_stat("cmd_get") - before), 0);

    /* bad options: exit 2 */
    ws = kv(&out, 10000, "-s", kvd.addr, "bench", "--window", "0", NULL);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 2, "--window 0: 0x%x", ws);
    ws = kv(&out, 10000, "-s", kvd.addr, "bench", "--procs", "0", NULL);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 2, "--procs 0: 0x%x", ws);
    ws = kv(&out, 10000, "-s", kvd.addr, "bench", "--procs", "300", NULL);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 2, "--procs 300: 0x%x", ws);

    /* a server that is gone: an error, not a hang */
    kvd_stop(&kvd);
    ws = kv(&out, 30000 * TH_SLOW, "-s", kvd.addr, "-t", "1000", "bench",
            "--ops", "10", NULL);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 2, "dead server: 0x%x", ws);
    ws = kv(&out, 30000 * TH_SLOW, "-s", kvd.addr, "-t", "1000", "bench",
            "--ops", "10", "--procs", "2", NULL);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 2,
           "dead server, 2 procs: 0x%x", ws);

    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
        if (system(cmd) != 0)
            th_log("could not remove %s", tmpdir);
    }
    th_log("PASS");
    return 0;
}
