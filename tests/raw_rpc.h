/*
 * A raw RPC peer's receiving side, shared by the tests that speak the RPC
 * protocol themselves on a core endpoint (rpc_malformed, rpc_ring_hostile):
 * their own handlers for RPC messages and batches on a worker's UCX handle.
 */
#ifndef RDMX_TEST_RAW_RPC_H
#define RDMX_TEST_RAW_RPC_H

#include "core/internal.h"

#include <stddef.h>
#include <ucp/api/ucp.h>

/* One RPC message from the server: its header and data. @rndv: @data is
 * UCX's descriptor of a message still to be fetched (rdmx__msg_recv). */
typedef ucs_status_t (*raw_rpc_take_t)(const void *header, size_t hlen,
                                       void *data, size_t len, int rndv);

/* Take every RPC message that arrives on @w's UCX worker, and every
 * record of a batch (docs/PROTOCOL.md, "Batched messages"; each must be a
 * well-formed RPC record), to @take, after stepping over the name of the
 * connection the sender puts in front of the header where UCX gives no
 * reply endpoint (checked to be one of @w's: docs/CORE.md, "Who sent a
 * message"). Counts the batches in *@batches if not NULL. */
void raw_rpc_install(rdmx_worker_t *w, raw_rpc_take_t take, unsigned *batches);

#endif /* RDMX_TEST_RAW_RPC_H */
