/*
 * Answering from a buffer the RPC layer takes over (internal: the KV
 * server's large inline values).
 */
#ifndef RDMX_RPC_RESPOND_H
#define RDMX_RPC_RESPOND_H

#include <rdmx/rpc.h>

#include <stddef.h>

/*
 * rdmx_rpc_respond with @length bytes at @buf, a buffer from
 * rdmx__buf_alloc (util/bufcache.h) that the call takes over: the
 * transport sends from it without the copy rdmx_rpc_respond makes, and it
 * is freed once sent (or at once, if nothing is sent), whatever the
 * status.
 */
rdmx_status_t rdmx__rpc_respond_owned(rdmx_rpc_req_t *req, void *buf,
                                      size_t length);

#endif /* RDMX_RPC_RESPOND_H */
