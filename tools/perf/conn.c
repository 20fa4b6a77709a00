/*
 * rdmx-perf: the connection between the two processes — counting
 * completions, noticing that the peer is gone, reporting failures, closing
 * down, and the watchdog that ends a test that takes too long.
 */
#include "perf.h"

#include <signal.h>
#include <unistd.h>

void perf_ops_cb(rdmx_status_t status, size_t length, void *arg)
{
    ops_t *o = arg;

    if (status != RDMX_OK && o->err == RDMX_OK) {
        o->err = status;
    }
    o->last_length = length;
    o->done++;
}

void perf_ep_error_cb(rdmx_ep_t *ep, rdmx_status_t status, void *arg)
{
    perf_t *p = arg;

    if (ep == p->ep) {
        p->conn_status = status;
    } else if (ep == p->pending) {
        p->pending_status = status;
    }
}

int perf_fail(const char *what, rdmx_status_t status)
{
    const char *detail = rdmx_error_detail();

    fprintf(stderr, "rdmx-perf: %s: %s (%s)%s%s\n", what, rdmx_strerror(status),
            rdmx_status_name(status), detail[0] ? ": " : "", detail);
    return -1;
}

int perf_fail_status(const char *what, rdmx_status_t status)
{
    fprintf(stderr, "rdmx-perf: %s: %s (%s)\n", what, rdmx_strerror(status),
            rdmx_status_name(status));
    return -1;
}

int perf_fail_msg(const char *what)
{
    fprintf(stderr, "rdmx-perf: %s\n", what);
    return -1;
}

int perf_conn_failed(perf_t *p, const char *what)
{
    if (p->quiet_close) {
        return -1; /* the caller expects that the peer may leave */
    }
    fprintf(stderr, "rdmx-perf: %s: connection lost: %s (%s)\n", what,
            rdmx_strerror(p->conn_status), rdmx_status_name(p->conn_status));
    return -1;
}

static volatile sig_atomic_t g_watchdog_armed;

void perf_watchdog(int sig)
{
    static const char msg[] =
        "rdmx-perf: timed out (no test finished within --timeout seconds)\n";
    (void)sig;
    if (g_watchdog_armed) {
        ssize_t r = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)r;
        _exit(3);
    }
}

void perf_watchdog_arm(unsigned seconds)
{
    g_watchdog_armed = seconds != 0;
    alarm(seconds);
}

static bool ops_idle(const ops_t *o)
{
    return o->done >= o->posted;
}

/* Waits at most 2 s for the operations. */
void perf_teardown_conn(perf_t *p)
{
    const ops_t *all[] = {&p->ctrl_rx_ops, &p->ctrl_tx_ops, &p->tx,
                          &p->rx,          &p->rma,         &p->flush,
                          &p->ack_tx,      &p->ack_rx};
    uint64_t deadline = now_ns() + 2000000000ull;

    if (p->ep != NULL) {
        rdmx_ep_close(p->ep);
        p->ep = NULL;
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
            while (!ops_idle(all[i]) && now_ns() < deadline) {
                rdmx_worker_progress(p->worker);
            }
        }
    }
    perf_test_cleanup(p);
}
