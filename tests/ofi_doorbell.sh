#!/bin/sh
# The doorbell of ofi:shm workers (docs/FABRIC.md, "Wake-up"), between
# real processes: with both sides sleeping (server --poll sleep, client
# RDMX_SPIN_US=0) an RPC round trip takes well under the 1 ms timer
# (p50 below 500 us), while with the doorbell off (RDMX_OFI_DOORBELL=0)
# it waits for the timer (p50 at least 500 us: the test can tell them
# apart); an idle rdmx-kvd with a client connected wakes fewer than 200
# times a second (on the 1 ms timer: about 1000 per worker); the files a
# SIGKILLed process leaves in /dev/shm go when the next process starts.
# Usage: ofi_doorbell.sh BINDIR
set -eu
bin=$1
export FI_TCP_IFACE=lo UCX_NET_DEVICES=lo
. "$(dirname "$0")/lib.sh"

# p50 of rpc_lat in microseconds, both sides sleeping, in $p50;
# $1: RDMX_OFI_DOORBELL
rpc_p50() {
    start_server rdmx-perf env RDMX_OFI_DOORBELL="$1" "$bin/rdmx-perf" \
        --listen 127.0.0.1:0 --transport ofi:shm --poll sleep
    RDMX_OFI_DOORBELL=$1 RDMX_SPIN_US=0 "$bin/rdmx-perf" "$addr" \
        --transport ofi:shm -t rpc_lat -n 300 -w 30 --json >"$tmp/lat.json" \
        2>"$tmp/lat.err" || die "rdmx-perf: $(cat "$tmp/lat.err")"
    stop_server
    p50=$(sed -n 's/.*"p50_us": *\([0-9.]*\).*/\1/p' "$tmp/lat.json" |
        head -n 1)
}

rpc_p50 1
with=$p50
rpc_p50 0
without=$p50
echo "rpc_lat p50, both sides sleeping: doorbell ${with} us, timer ${without} us"
[ -n "$with" ] && [ -n "$without" ] || die "no p50 in rdmx-perf's output"
awk -v a="$with" 'BEGIN { exit !(a < 500) }' ||
    die "with the doorbell, p50 ${with} us (want < 500)"
awk -v a="$without" 'BEGIN { exit !(a >= 500) }' ||
    die "with the doorbell off, p50 ${without} us: the timer should show"

# Idle: voluntary context switches of every thread of rdmx-kvd over 2 s.
start_server rdmx-kvd "$bin/rdmx-kvd" -l 127.0.0.1:0 -w 2 -m 4m \
    --transport ofi:shm
"$bin/rdmx-kv" -s "$addr" --transport ofi:shm put k v >/dev/null ||
    die "rdmx-kv put"
sleep 0.5
switches() {
    awk '/^voluntary_ctxt_switches/ { s += $2 } END { print s }' \
        /proc/"$srv"/task/*/status
}
a=$(switches)
sleep 2
b=$(switches)
rate=$(((b - a) / 2))
echo "idle rdmx-kvd (2 workers): $rate wake-ups a second"
[ "$rate" -lt 200 ] || die "idle rdmx-kvd wakes $rate times a second"
"$bin/rdmx-kv" -s "$addr" --transport ofi:shm get k >"$tmp/v" ||
    die "rdmx-kv get after idling"
[ "$(cat "$tmp/v")" = v ] || die "got '$(cat "$tmp/v")' after idling"
stop_server

# A process killed by SIGKILL leaves its shm region and doorbell page in
# /dev/shm; the next process's first ofi:shm context removes them.
start_server rdmx-kvd "$bin/rdmx-kvd" -l 127.0.0.1:0 -w 1 -m 4m \
    --transport ofi:shm
dead=$srv
ls /dev/shm | grep -q "^rdmx-bell-$dead-" || die "no doorbell page of $dead"
ls /dev/shm | grep -q "^$dead-[0-9a-f]*:" || die "no shm region of $dead"
kill -KILL "$dead"
stop_server "$dead"
ls /dev/shm | grep -q "^rdmx-bell-$dead-" || die "the page went with SIGKILL?"
start_server rdmx-kvd "$bin/rdmx-kvd" -l 127.0.0.1:0 -w 1 -m 4m \
    --transport ofi:shm
if ls /dev/shm | grep -q -e "^rdmx-bell-$dead-" -e "^$dead-[0-9a-f]*:"; then
    die "files of the killed process $dead stayed: $(ls /dev/shm | grep "$dead")"
fi
stop_server
echo "ok"
