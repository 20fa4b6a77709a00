/*
 * Answering from memory the RPC layer does not own (internal: the KV
 * server's values, sent from the store's items).
 */
#ifndef RDMX_RPC_RESPOND_H
#define RDMX_RPC_RESPOND_H

#include <rdmx/rpc.h>

#include <stddef.h>

#define RDMX_RPC_RESPOND_HEAD_MAX 64 /* longest @head */

/*
 * rdmx_rpc_respond with the response in two parts: @head (@hlen bytes, at
 * most RDMX_RPC_RESPOND_HEAD_MAX, copied) then @body (@blen bytes), which
 * the transport sends from where it is, without a copy by rdmx. @body must
 * stay unchanged until @done(@arg) runs; it runs exactly once, whatever the
 * status (at once when nothing is in flight, else when the send is over or
 * the connection failed), on the thread that progresses the server's
 * worker or in this call.
 */
rdmx_status_t rdmx__rpc_respond_parts(rdmx_rpc_req_t *req, const void *head,
                                      size_t hlen, const void *body,
                                      size_t blen, void (*done)(void *arg),
                                      void *arg);

#endif /* RDMX_RPC_RESPOND_H */
