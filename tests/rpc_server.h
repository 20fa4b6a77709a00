/*
 * The RPC test server, run by RPC tests as a child process (th_spawn_self
 * with role "rpc-server", then trs_main(argc - 2, argv + 2)).
 *
 * Options (pairs): --address HOST:PORT (default 127.0.0.1:0), --workers N
 * (2), --credits N, --max-message BYTES, --max-connections N, --secret S,
 * --poll 0|1|2, --rings N. Prints "PORT n"; SIGTERM/SIGINT stop it cleanly.
 *
 * Handlers:
 *   echo       (idempotent) answers its request
 *   echo_once  (not idempotent) answers its request
 *   fail       answers RDMX_ERR_INVALID, message "fail: <request>"
 *   spin       request u32 ms: busy-waits that long on the worker, "done"
 *   worker     answers the u32 index of the worker running it
 *   oneway     (one-way) counts; count answers the u64 count
 *   bulk_pull  descriptor 0 (READ): answers trs_checksum of its bytes
 *   bulk_push  request u64 seed: writes th_fill(seed) into descriptor 0
 */
#ifndef RDMX_TEST_RPC_SERVER_H
#define RDMX_TEST_RPC_SERVER_H

#include <stddef.h>
#include <stdint.h>

int trs_main(int argc, char **argv);

/* FNV-1a 64 of the bytes, as bulk_pull answers it. */
uint64_t trs_checksum(const void *data, size_t len);

#endif
