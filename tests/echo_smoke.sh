#!/bin/sh
# Smoke test of the RPC example: start examples/echo_server on a free
# loopback port, run echo_client against it (it checks its answers and exits
# non-zero on any mismatch), then stop the server with SIGTERM and require a
# clean exit.  Usage: echo_smoke.sh BINDIR
set -eu
bin=$1
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
log=$(mktemp)
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
"$bin/echo_server" 127.0.0.1:0 2 >"$log" 2>&1 &
pid=$!
port=""
for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "echo_server did not start:"; cat "$log"; exit 1; }
"$bin/echo_client" "127.0.0.1:$port" "smoke test message"
"$bin/bulk_client" "127.0.0.1:$port" 64
kill -TERM $pid
wait $pid
echo "echo_server exited cleanly"
