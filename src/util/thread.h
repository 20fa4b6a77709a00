/*
 * Names for the threads librdmx starts, as `top -H`, `ps -L`, `perf` and
 * /proc/PID/task/TID/comm show them: an RPC server's workers
 * "rdmx-rpc-N", a worker's progress thread "rdmx-progress", the KV
 * server's reclaimer "rdmx-kv-reclaim" (docs/OPERATIONS.md, "Threads").
 */
#ifndef RDMX_UTIL_THREAD_H
#define RDMX_UTIL_THREAD_H

#include <stdio.h>
#include <sys/prctl.h>

/* Name the calling thread @prefix, or @prefix-@n when @n >= 0 (Linux
 * keeps 15 bytes; longer names are cut). A failure changes nothing that
 * matters and is ignored. */
static inline void rdmx__thread_name(const char *prefix, int n)
{
    char name[64];

    if (n >= 0)
        snprintf(name, sizeof(name), "%s-%d", prefix, n);
    else
        snprintf(name, sizeof(name), "%s", prefix);
    name[15] = '\0';
    (void)prctl(PR_SET_NAME, name, 0, 0, 0);
}

#endif /* RDMX_UTIL_THREAD_H */
