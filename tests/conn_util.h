/*
 * Helpers for the connection tests (conn_storm, conn_limit, raw_clients,
 * conn_scale): an RPC server role whose output goes to a log file the test
 * reads, client processes forked before the test process creates its rdmx
 * context, worker counters read through the server, and small utilities.
 *
 * The server role ("conn-rpc-server", cu_server_main) is an rdmx RPC
 * server with these handlers:
 *   echo    (idempotent) answers its request
 *   echo_once  the same, not idempotent (a channel does not resend it
 *           after a lost connection: the call fails at once)
 *   worker  answers the u32 index of the worker running it
 *   wstats  answers cu_wstats_t: that worker's index and its core counters
 *           (rdmx_worker_stats of the connection's worker, read on the
 *           worker's own thread)
 * Options (pairs): --workers N (2), --max-connections N, --max-message
 * BYTES, --max-receiving BYTES (RPC defaults), --poll 0|1|2. It prints
 * "PORT n"; on SIGTERM it logs "shutting down", destroys the server and
 * the context and logs "shut down after N ms" before it exits 0.
 */
#ifndef RDMX_TEST_CONN_UTIL_H
#define RDMX_TEST_CONN_UTIL_H

#include "harness.h"

#include <rdmx/rpc.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CU_SERVER_ROLE "conn-rpc-server"

/* Answer of the "wstats" handler. */
typedef struct {
    uint32_t index;
    uint32_t pad;
    rdmx_worker_stats_t st;
} cu_wstats_t;

int cu_server_main(int argc, char **argv);

/* th_spawn_self for a server whose stderr (and stdout after its PORT line)
 * goes to @p log_path (created or truncated), so the test can read what it
 * said. Must be called before th_context(). */
void cu_spawn_logged(th_proc_t *proc, const char *log_path, const char *role,
                     int timeout_ms, ...);

/* A fresh log file name for this process ("/tmp/rdmx-TAG-PID-N.log"). */
void cu_log_path(char *buf, size_t size, const char *tag);

/* Up to @p size - 1 bytes of the file, NUL-terminated; "" if missing. */
size_t cu_read_file(const char *path, char *buf, size_t size);

/* How often @p needle occurs in @p text. */
unsigned cu_count(const char *text, const char *needle);

/* Fork a child that runs fn(arg) and _exits with its result; it dies with
 * the parent (PR_SET_PDEATHSIG) and times out (th_init's alarm handler)
 * after @p alarm_s seconds (stretched under sanitizers). Only while this
 * process has no rdmx context. Returns the child's pid. */
pid_t cu_fork(int (*fn)(void *), void *arg, unsigned alarm_s);

/* Wait for @p pid; kill it (SIGKILL) and return -1 after @p timeout_ms
 * (stretched under sanitizers). Returns the wait status. */
int cu_wait_pid(pid_t pid, int timeout_ms);

/* Describe a wait status ("exit 0", "signal 11 (core)"). */
const char *cu_wstatus_str(int ws, char *buf, size_t size);

/* Integer from the environment, or @p def when unset or not a number. */
long cu_env_long(const char *name, long def);

/* Open a channel and wait until it is READY (fails the test otherwise).
 * @p heartbeat_ms < 0 keeps the default, 0 turns heartbeats off. */
rdmx_channel_t *cu_channel(rdmx_worker_t *w, const char *addr,
                           int connect_timeout_ms, int heartbeat_ms);

/* The server's "rdmx.stats" text into @p buf; value of its "key N" line
 * (fails the test if missing). */
void cu_stats_text(rdmx_channel_t *ch, char *buf, size_t size);
uint64_t cu_text_stat(const char *text, const char *key);
uint64_t cu_server_stat(rdmx_channel_t *ch, const char *key);

/* The core counters of every worker of the server at @p addr, summed:
 * opens channels until "wstats" answered from each of the @p nworkers
 * workers (connections go round-robin), then closes them. Listener
 * counters (conns_refused, proto_errors, handshakes_failed) live on
 * worker 0; *w0 (may be NULL) gets worker 0's alone. */
void cu_worker_stats(rdmx_worker_t *w, const char *addr, unsigned nworkers,
                     rdmx_worker_stats_t *sum, rdmx_worker_stats_t *w0);

/* Percentile @p p (0..100) of @p n values (sorts them). */
double cu_percentile(double *v, size_t n, double p);

#endif /* RDMX_TEST_CONN_UTIL_H */
