#!/bin/sh
# Sleeping workers over UCX (docs/CORE.md, "Waiting"), between real
# processes: rdmx-kvd and a KV client that both sleep at once when idle
# (RDMX_SPIN_US=0). A GET is woken by the transport, not by a timer: p50
# well under 1 ms (a worker whose transport fds were not in its epoll set
# would sleep until its next timer, tens of ms). Over tcp the client's
# sleeping round trip is 4 system calls (sendmsg, epoll_wait on the
# worker's set, UCX's epoll_wait and recvfrom), counted with strace over a
# 1 s run less a run of one GET: at most 4.5 per GET, and fewer than 0.5
# reads per GET (a real arm reads UCX's eventfd and keepalive timerfd: 2
# per GET, 6 calls in all, before a tcp worker was armed only after a
# sleep that woke for nothing; 0.02 per GET on UCX 1.13, 0.2 on 1.22).
# Usage: sleep_wake.sh BINDIR TRANSPORT   (TRANSPORT: tcp or shm)
set -eu
bin=$1
tr=$2
export UCX_NET_DEVICES=lo RDMX_SPIN_US=0
. "$(dirname "$0")/lib.sh"

start_server rdmx-kvd "$bin/rdmx-kvd" -l 127.0.0.1:0 -w 1 -m 16m \
    --transport "$tr"

# One client thread, one GET at a time, for 1 s (or $bench_args); extra
# arguments go before the command (strace ...). Its JSON line in
# $tmp/bench.json.
bench() {
    "$@" "$bin/rdmx-kv" -s "$addr" --transport "$tr" bench --op get \
        --size 100 --keys 10 $bench_args --json >"$tmp/bench.out" \
        2>"$tmp/bench.err" || die "rdmx-kv bench: $(cat "$tmp/bench.err")"
    grep '^{' "$tmp/bench.out" | tail -n 1 >"$tmp/bench.json"
}
bench_args="--seconds 1"
field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" "$tmp/bench.json"; }

bench
p50=$(field p50_us)
[ -n "$p50" ] || die "no p50 in rdmx-kv's output: $(cat "$tmp/bench.out")"
echo "$tr GET p50, both sides sleeping: $p50 us"
awk -v a="$p50" 'BEGIN { exit !(a < 1000) }' ||
    die "p50 $p50 us with both sides sleeping (want < 1000: woken by a timer?)"

if [ "$tr" = tcp ]; then
    command -v strace >/dev/null || die "strace is needed (scripts/bootstrap.sh)"
    if ! strace -f -o /dev/null true 2>"$tmp/strace.err"; then
        echo "SKIP: strace cannot trace here: $(cat "$tmp/strace.err")"
        exit 77
    fi
    # (LeakSanitizer cannot stop a traced process's threads: no leak
    # check in an ASan build for this run.) Two traced runs: one of a
    # single GET, whose calls are the client's start and end (loading,
    # connecting: 150-600 reads by UCX version), and one of 1 s; the GETs' own calls are
    # the difference, so a slow start under load does not count as GETs.
    # calls of each system call: the 4th column of strace -c's table
    calls() { awk -v s="$1" '$NF == s { c = $4 } END { print c + 0 }' \
        "$tmp/strace.txt"; }
    traced() { # bench arguments... -> $ops, $reads, $total
        bench env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
            strace -f -c -o "$tmp/strace.txt"
        ops=$(field ops)
        reads=$(calls read)
        total=$((reads + $(calls sendmsg) + $(calls epoll_wait) + $(calls recvfrom)))
    }
    bench_args="--ops 1"
    traced
    [ "$ops" = 1 ] || die "the one-GET run made '$ops' GETs"
    reads0=$reads total0=$total
    bench_args="--seconds 1"
    traced
    [ -n "$ops" ] && [ "$ops" -gt 500 ] || die "only '$ops' GETs under strace"
    n=$((ops - 1)) reads=$((reads - reads0)) total=$((total - total0))
    echo "tcp client, $n sleeping GETs beyond one: $total more calls of" \
        "sendmsg, epoll_wait, recvfrom and read ($reads reads);" \
        "the one-GET run: $total0 ($reads0 reads)"
    awk -v r="$reads" -v n="$n" 'BEGIN { exit !(r < 0.5 * n) }' ||
        die "$reads reads in $n GETs: the worker is armed for real each time"
    awk -v t="$total" -v n="$n" 'BEGIN { exit !(t <= 4.5 * n) }' ||
        die "$total system calls in $n sleeping GETs (want at most 4.5 each)"
fi
echo "ok"
