#!/bin/sh
# The metrics endpoint (docs/OPERATIONS.md) against real servers: rdmx-kvd
# --metrics-listen, and an RPC server of the public API (metrics_peer). For
# each: scrape, drive real traffic from another process, scrape again; every
# page passes `promtool check metrics`, the counters moved by exactly the
# traffic sent, /health is the documented JSON, and bad requests (unknown
# path, wrong method, huge headers) get 404, 405, 431 and are counted; a
# client stuck in its headers holds up neither KV traffic nor scrapes.
# rdmx-perf --rpc-only --metrics-listen is scraped around an rdmx-info ping.
# Usage: metrics_http.sh BINDIR PEER
set -eu
bin=$1
peer=$2
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
. "$(dirname "$0")/lib.sh"

for tool in curl promtool; do
    command -v $tool >/dev/null || die "$tool is not installed (scripts/bootstrap.sh)"
done

# scrape URL FILE: GET /metrics into FILE, checked by promtool.
scrape() {
    curl -sf -m 10 "$1/metrics" -o "$2" || die "GET $1/metrics"
    promtool check metrics <"$2" || die "promtool check metrics: $2"
}

# val FILE SAMPLE: the value of SAMPLE (name with its labels) in FILE.
val() {
    v=$(awk -v s="$2" '$1 == s { print $2 }' "$1")
    [ -n "$v" ] || die "no sample $2 in $1"
    echo "$v"
}

# moved BEFORE AFTER SAMPLE N: SAMPLE grew by exactly N.
moved() {
    a=$(val "$1" "$3")
    b=$(val "$2" "$3")
    [ $((b - a)) -eq "$4" ] || die "$3: $a -> $b, expected +$4"
    echo "ok: $3 +$4"
}

# bad_requests URL: 404, 405 and 431 answers, each counted.
bad_requests() {
    scrape "$1" "$tmp/bad0"
    code=$(curl -s -o /dev/null -w '%{http_code}' "$1/nope")
    [ "$code" = 404 ] || die "unknown path: $code"
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x "$1/metrics")
    [ "$code" = 405 ] || die "POST: $code"
    big=$(head -c 40000 /dev/zero | tr '\0' a)
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $big" \
        "$1/metrics")
    [ "$code" = 431 ] || die "huge header: $code"
    scrape "$1" "$tmp/bad1"
    moved "$tmp/bad0" "$tmp/bad1" rdmx_http_bad_requests_total 3
    moved "$tmp/bad0" "$tmp/bad1" 'rdmx_http_requests_total{path="other"}' 1
}

# stuck URL KVADDR: a client stuck in the middle of its headers holds no one
# up: KV traffic and other scrapes go on while it hangs there.
stuck() {
    port=${1##*:}
    python3 -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Half: ")
time.sleep(60)' "$port" &
    hold=$!
    track $hold
    sleep 0.5
    scrape "$1" "$tmp/stuck0"
    "$bin/rdmx-kv" -s "$2" put stuck v >/dev/null || die "put beside a stuck HTTP client"
    "$bin/rdmx-kv" -s "$2" get stuck >/dev/null || die "get beside a stuck HTTP client"
    scrape "$1" "$tmp/stuck1"
    moved "$tmp/stuck0" "$tmp/stuck1" rdmx_kv_cmd_set_total 1
    moved "$tmp/stuck0" "$tmp/stuck1" rdmx_kv_get_hits_total 1
    kill -0 $hold || die "the stuck client did not stay"
    stop_server $hold
}

# health URL WORKERS: /health is the documented object.
health() {
    curl -sf "$1/health" -o "$tmp/health" || die "GET $1/health"
    python3 - "$tmp/health" "$2" <<'PY' || die "/health: $(cat "$tmp/health")"
import json, sys
h = json.load(open(sys.argv[1]))
assert h["status"] in ("ok", "degraded"), h
assert (h["status"] == "ok") == (h["warnings"] == []), h
assert h["transport"] in ("shm", "tcp", "rdma"), h
assert h["workers"] == int(sys.argv[2]), h
assert h["connections"] >= 0, h
assert h["memory"]["resident_bytes"] > 0, h
if h["transport"] == "tcp":
    assert any("RMA emulated" in w for w in h["warnings"]), h
PY
    echo "ok: /health $(cat "$tmp/health")"
}

# --- rdmx-kvd ------------------------------------------------------------
start_server rdmx-kvd "$bin/rdmx-kvd" -l 127.0.0.1:0 -w 2 -m 8m \
    --metrics-listen 127.0.0.1:0
url=$(wait_line "$tmp/rdmx-kvd.out" 's/.*metrics on \(http:[^ ]*\)\/metrics.*/\1/p') ||
    die "rdmx-kvd did not serve metrics"
# The warnings printed at start are those /health lists.
if [ "$(curl -sf "$url/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["transport"])')" = tcp ]; then
    grep -q "rdmx-kvd: WARNING: RMA emulated" "$tmp/rdmx-kvd.out" ||
        die "rdmx-kvd printed no RMA warning on tcp"
fi

scrape "$url" "$tmp/kv0"
printf 'put k1 v1\nput k2 v2\nput k3 v3\nget k1\nget k2\nget k3\nget nokey\ndelete k1\n' |
    "$bin/rdmx-kv" -s "$addr" repl >"$tmp/repl.out" ||
    die "rdmx-kv repl: $(cat "$tmp/repl.out")"
echo 'return 42' | "$bin/rdmx-kv" -s "$addr" eval - >"$tmp/eval.out" ||
    die "rdmx-kv eval"
scrape "$url" "$tmp/kv1"
moved "$tmp/kv0" "$tmp/kv1" rdmx_kv_cmd_set_total 3
moved "$tmp/kv0" "$tmp/kv1" rdmx_kv_get_hits_total 3
moved "$tmp/kv0" "$tmp/kv1" rdmx_kv_get_misses_total 1
moved "$tmp/kv0" "$tmp/kv1" rdmx_kv_delete_hits_total 1
moved "$tmp/kv0" "$tmp/kv1" rdmx_kv_curr_items 2
moved "$tmp/kv0" "$tmp/kv1" rdmx_kv_evictions_total 0
moved "$tmp/kv0" "$tmp/kv1" rdmx_kv_lambda_calls_total 1
moved "$tmp/kv0" "$tmp/kv1" 'rdmx_rpc_handler_calls_total{handler="kv.put"}' 3
moved "$tmp/kv0" "$tmp/kv1" 'rdmx_rpc_handler_calls_total{handler="kv.get"}' 4
moved "$tmp/kv0" "$tmp/kv1" 'rdmx_rpc_handler_latency_seconds_count{handler="kv.get"}' 4
moved "$tmp/kv0" "$tmp/kv1" 'rdmx_rpc_handler_latency_seconds_bucket{handler="kv.get",le="+Inf"}' 4
moved "$tmp/kv0" "$tmp/kv1" rdmx_rpc_connections_total 2
moved "$tmp/kv0" "$tmp/kv1" 'rdmx_http_requests_total{path="/metrics"}' 1
[ "$(val "$tmp/kv1" rdmx_kv_limit_maxbytes)" -gt 0 ] || die "limit_maxbytes"
# free memory is a level: it went down by what two items hold
[ "$(val "$tmp/kv1" rdmx_kv_free_bytes)" -lt "$(val "$tmp/kv0" rdmx_kv_free_bytes)" ] ||
    die "rdmx_kv_free_bytes did not go down"
for g in free_bytes largest_free_block reserved_items pending_items; do
    grep -q "^# TYPE rdmx_kv_$g gauge" "$tmp/kv1" || die "rdmx_kv_$g: no gauge"
done
[ "$(val "$tmp/kv1" rdmx_kv_reserved_items)" -eq 0 ] || die "reserved_items"
[ "$(val "$tmp/kv1" rdmx_memory_registered_bytes)" -eq 8388608 ] ||
    die "registered bytes"
health "$url" 2
bad_requests "$url"
stuck "$url" "$addr"
stop_server
[ $server_rc -eq 0 ] || die "rdmx-kvd did not stop cleanly: $server_rc"

# --- an RPC server of the public API --------------------------------------
start_server metrics_peer "$peer" server 127.0.0.1:0 127.0.0.1:0
url=$(wait_line "$tmp/metrics_peer.out" 's/.*metrics on \(http:[^ ]*\)\/metrics.*/\1/p') ||
    die "metrics_peer did not serve metrics"
scrape "$url" "$tmp/rpc0"
"$peer" client "$addr" 25 || die "metrics_peer client"
scrape "$url" "$tmp/rpc1"
moved "$tmp/rpc0" "$tmp/rpc1" 'rdmx_rpc_handler_calls_total{handler="test.echo"}' 25
moved "$tmp/rpc0" "$tmp/rpc1" 'rdmx_rpc_handler_errors_total{handler="test.echo"}' 0
moved "$tmp/rpc0" "$tmp/rpc1" 'rdmx_rpc_handler_calls_total{handler="test.fail"}' 1
moved "$tmp/rpc0" "$tmp/rpc1" 'rdmx_rpc_handler_errors_total{handler="test.fail"}' 1
moved "$tmp/rpc0" "$tmp/rpc1" 'rdmx_rpc_handler_latency_seconds_count{handler="test.echo"}' 25
moved "$tmp/rpc0" "$tmp/rpc1" rdmx_rpc_errors_total 1
moved "$tmp/rpc0" "$tmp/rpc1" test_collects_total 1
health "$url" 2
bad_requests "$url"
stop_server
[ $server_rc -eq 0 ] || die "metrics_peer did not stop cleanly: $server_rc"

# --- rdmx-perf's RPC server; rdmx-info's rdmx.ping is the traffic ------------
start_server rdmx-perf "$bin/rdmx-perf" --listen 127.0.0.1:0 --rpc-only \
    --poll sleep --metrics-listen 127.0.0.1:0
url=$(wait_line "$tmp/rdmx-perf.out" 's/.*metrics on \(http:[^ ]*\)\/metrics.*/\1/p') ||
    die "rdmx-perf did not serve metrics"
scrape "$url" "$tmp/perf0"
"$bin/rdmx-info" --server "$addr" >/dev/null || [ $? -eq 1 ] ||
    die "rdmx-info --server $addr"
scrape "$url" "$tmp/perf1"
moved "$tmp/perf0" "$tmp/perf1" 'rdmx_rpc_handler_calls_total{handler="rdmx.ping"}' 1
moved "$tmp/perf0" "$tmp/perf1" 'rdmx_rpc_handler_calls_total{handler="perf.echo"}' 0
moved "$tmp/perf0" "$tmp/perf1" rdmx_rpc_connections_total 1
health "$url" 1
stop_server
[ $server_rc -eq 0 ] || die "rdmx-perf did not stop cleanly: $server_rc"
echo "metrics_http: ok"
