/*
 * The launcher: child processes for tests that run servers (rdmx-kvd,
 * rdmx-demo lambda --listen) and one-shot commands (rdmx-kv, rdmx-demo's
 * client) at any point of a test.
 *
 * A child forked before the test creates its rdmx context ("launcher") runs
 * every other process on request over a socketpair: servers (their
 * "listening on HOST:PORT" line read from a pipe) and one-shot commands. It
 * reaps them and reports wait statuses. So servers can be started, killed
 * and restarted, and a CLI run, at any point of a test without the test
 * process forking once UCX is up. Everything dies with the test
 * (PR_SET_PDEATHSIG on the launcher and on its children). Binaries are taken
 * from the test binary's directory (build/bin or build-asan/bin).
 *
 * Used by kv_ops, kv_torture, kv_shards and lambda_rpc. A server's stdout
 * goes to a pipe that is read only when it exits: a server that prints more
 * than a pipe holds (64 KiB) while it runs would block.
 */
#ifndef RDMX_TEST_KVD_LAUNCHER_H
#define RDMX_TEST_KVD_LAUNCHER_H

#include "harness.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Requests to the launcher (kl_call). */
enum { KL_KVD = 1, KL_WAIT, KL_RUN, KL_ALIVE };

typedef struct {
    int op;
    int pid;
    int timeout_ms;
    char in_path[256];  /* KL_RUN: stdin ("" = /dev/null) */
    char out_path[256]; /* KL_RUN: stdout ("" = /dev/null) */
    char err_path[256]; /* KL_RUN: stderr ("" = the test's stderr) */
    size_t args_len;
    char args[3072]; /* NUL-terminated arguments back to back */
} kl_req_t;

typedef struct {
    int ok; /* 0: failed, text says why */
    int pid;
    int port;
    int wstatus;
    int alive;
    double ms; /* KL_WAIT, KL_RUN: time until it exited */
    char text[2048];
} kl_rep_t;

/* A server the launcher started (rdmx-kvd or any other). */
typedef struct {
    int pid; /* 0 once reaped */
    uint16_t port;
    char addr[64]; /* "127.0.0.1:port" */
} kvd_t;

/* Fork the launcher; call before th_context(). */
void kl_start(void);

/* Send @p q to the launcher and wait for its answer (fails the test if the
 * launcher does not answer within q->timeout_ms + 30 s). */
void kl_call(kl_req_t *q, kl_rep_t *r);

/* Put the NULL-terminated arguments @p first, ... into q->args. */
void kl_args(kl_req_t *q, const char *first, va_list ap);

/* Start rdmx-kvd listening on @p listen (NULL: 127.0.0.1:0, a free port)
 * with the NULL-terminated options that follow. Returns 0, or -1 (with
 * @p why) if it exited or printed no address in time. */
int kvd_try_start(kvd_t *k, const char *listen, char *why, size_t why_size,
                  ...);

#define kvd_start(k, listen, ...)                                              \
    do {                                                                       \
        char kvd_why_[2200];                                                   \
        if (kvd_try_start((k), (listen), kvd_why_, sizeof(kvd_why_),           \
                          __VA_ARGS__) != 0)                                   \
            th_fail(__FILE__, __LINE__, "%s", kvd_why_);                       \
    } while (0)

/* Start the server @p prog (a binary of the test's directory) with exactly
 * the NULL-terminated arguments that follow; it must print "listening on
 * HOST:PORT" (k->addr is then 127.0.0.1:PORT). Returns 0, or -1 (with
 * @p why) as kvd_try_start. */
int kl_server_try_start(kvd_t *k, char *why, size_t why_size, const char *prog,
                        ...);

#define kl_server_start(k, prog, ...)                                          \
    do {                                                                       \
        char kl_why_[2200];                                                    \
        if (kl_server_try_start((k), kl_why_, sizeof(kl_why_), (prog),         \
                                __VA_ARGS__) != 0)                             \
            th_fail(__FILE__, __LINE__, "%s", kl_why_);                        \
    } while (0)

/* Run @p prog (a binary of the test's directory) with the NULL-terminated
 * arguments that follow, stdin from @p in, stdout to @p out, stderr to
 * @p err (NULL: /dev/null, /dev/null, the test's stderr); kill it after
 * @p timeout_ms. Returns its wait status, or -1 if it could not run or ran
 * over (logged). *ms_p (may be NULL) gets how long it ran. */
int kl_run(const char *in, const char *out, const char *err, int timeout_ms,
           double *ms_p, const char *prog, ...);

/* Wait up to @p timeout_ms for @p k to exit: its wait status; its
 * remaining stdout into @p out (may be NULL); how long it took into *ms_p
 * (may be NULL). Fails the test if it does not exit. */
int kvd_wait(kvd_t *k, int timeout_ms, char *out, size_t out_size,
             double *ms_p);

/* Has @p k exited? If so (reaped now): 1, its wait status in *ws_p and the
 * rest of its stdout in @p out (both may be NULL). */
int kvd_exited(kvd_t *k, int *ws_p, char *out, size_t out_size);

/* 1 while @p k runs; logs its wait status once it exited. */
int kvd_alive(kvd_t *k);

void kvd_kill(kvd_t *k, int sig);

/* SIGTERM @p k and check it exits 0 within 10 s. */
void kvd_stop(kvd_t *k);

/* The value of the "name value" line of a stats text (fails the test if
 * there is none). */
uint64_t stat_of(const char *text, const char *name);

#endif /* RDMX_TEST_KVD_LAUNCHER_H */
