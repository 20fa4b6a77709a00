#!/bin/sh
# Smoke test of the RPC example: start examples/echo_server on a free
# loopback port, run echo_client against it (it checks its answers and exits
# non-zero on any mismatch), then stop the server with SIGTERM and require a
# clean exit.  Usage: echo_smoke.sh BINDIR
set -eu
bin=$1
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
. "$(dirname "$0")/lib.sh"

"$bin/echo_server" 127.0.0.1:0 2 >"$tmp/srv.out" 2>&1 &
srv=$!
track $srv
port=$(wait_line "$tmp/srv.out" 's/.*listening on port \([0-9]*\).*/\1/p') ||
    die "echo_server did not start"
"$bin/echo_client" "127.0.0.1:$port" "smoke test message"
"$bin/bulk_client" "127.0.0.1:$port" 64
stop_server
[ $server_rc -eq 0 ] || die "echo_server exited with $server_rc on SIGTERM"
echo "echo_server exited cleanly"
