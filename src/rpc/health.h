/*
 * Slow-path warnings: the one place that decides, from what is known of a
 * context or a connection, whether rdmx runs off its fast path. rdmx-kvd
 * prints them at start, the metrics endpoint's /health lists them, and
 * rdmx-info prints them against a server (docs/OPERATIONS.md, "Slow-path
 * warnings").
 *
 * Internal (rdmx__): the tools reach it through the static library.
 */
#ifndef RDMX_RPC_HEALTH_H
#define RDMX_RPC_HEALTH_H

#include <rdmx/core.h>
#include <rdmx/rpc.h>

#include <stdint.h>

/* Longest warning, with its NUL; most warnings a call gives. */
#define RDMX_HEALTH_WARNING_LEN  256
#define RDMX_HEALTH_WARNINGS_MAX 4

/* What the warnings are decided from. */
typedef struct {
    rdmx_transport_t requested; /* asked for; AUTO: nothing in particular */
    rdmx_transport_t chosen;    /* in use: a context's, or a connection's */
    uint64_t memory;            /* bytes to register; 0: none */
    uint64_t memlock_limit;     /* RLIMIT_MEMLOCK; UINT64_MAX: unlimited */
} rdmx_health_facts_t;

/*
 * Write the warnings @facts call for into @out (at most @max of them, each
 * one line without a newline) and return how many there are (may exceed
 * @max). Pure: reads nothing but @facts.
 */
unsigned rdmx__health_warnings(const rdmx_health_facts_t *facts,
                               char (*out)[RDMX_HEALTH_WARNING_LEN],
                               unsigned max);

/* The facts of a started RPC server: what its context was asked for and
 * uses, @memory, and this process's memlock limit. rdmx-kvd's start-up
 * warnings and /health both take them from here. */
void rdmx__health_facts_of_server(rdmx_rpc_server_t *server, uint64_t memory,
                                  rdmx_health_facts_t *facts_p);

/* This process's RLIMIT_MEMLOCK soft limit in bytes; UINT64_MAX when
 * unlimited or unknown. */
uint64_t rdmx__health_memlock_limit(void);

#endif /* RDMX_RPC_HEALTH_H */
