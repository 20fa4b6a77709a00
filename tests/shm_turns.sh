#!/bin/sh
# Waiters on a crowded host take turns over shared memory (docs/CORE.md,
# "Taking turns"), between real processes, in two cases:
#
# 1. Without a slot: rdmx-kvd's two workers and four KV client threads
#    share one slot (RDMX_SPIN_SLOTS=1), so all but one of them wait
#    without one at any time. They yield their CPU between passes instead
#    of sleeping. RDMX_SPIN_US gives each wait 2 ms of turns (a server
#    worker 4 ms) before it would sleep, so a loaded machine does not turn
#    slow answers into sleeps.
# 2. Holding one: the server and two client threads pinned to two CPUs
#    (one if only one is allowed), with as many slots, and the default
#    polling time. The slots go to any two of the four waiters; the
#    holders take turns too because the others' claims were denied. When
#    holders polled on instead, the waiters without a slot ran only once
#    a holder's 50 us (a worker's 100 us) were over and it slept: 17-83 k
#    GETs/s instead of 337-534 k, a sleep in 0.08-0.91 of the client's
#    GETs.
#
# In each, client and server make few voluntary context switches (a sleep
# each): fewer than 0.05 per GET on each side, in one of at most three
# runs (run_thrice). Also checks that every GET of every run succeeded.
# Under a sanitizer (RDMX_TEST_SLOW > 1) every pass is several times
# longer, so a worker's turns run out sooner: the limit is 0.05 times
# RDMX_TEST_SLOW there (an ASan build on a loaded host: 0.05-0.08 per GET
# in three runs of three, with the code that passes at 0.00-0.02 plainly).
# Usage: shm_turns.sh BINDIR
set -eu
bin=$1
limit=$(awk -v s="${RDMX_TEST_SLOW:-1}" 'BEGIN { print 0.05 * s }')
export UCX_NET_DEVICES=lo
. "$(dirname "$0")/lib.sh"

# voluntary context switches of every thread of the server
switches() {
    awk '/^voluntary_ctxt_switches/ { s += $2 } END { print s + 0 }' \
        /proc/"$srv"/task/*/status
}

field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" "$tmp/out"; }

# The bench as a child of python3, which reports the child's voluntary
# context switches (all its threads) after its JSON line.
# Usage: python3 - ADDR THREADS [PREFIX...] RDMX_KV
cat >"$tmp/bench.py" <<'EOF'
import resource, subprocess, sys
r = subprocess.run(sys.argv[3:] + [
                    "-s", sys.argv[1], "--transport", "shm",
                    "bench", "--op", "get", "--size", "100", "--keys", "10",
                    "--threads", sys.argv[2], "--seconds", "1", "--json"],
                   stdout=subprocess.PIPE, text=True)
if r.returncode != 0:
    sys.exit("rdmx-kv bench exited with %d" % r.returncode)
lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
print(lines[-1])
print("nvcsw", resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw)
EOF

# run_case NAME SLOTS SPIN_US THREADS [PREFIX...]: rdmx-kvd and the bench,
# both run by PREFIX (if any), with these settings (SPIN_US empty: the
# default)
run_case() {
    what=$1 slots=$2 spin=$3 threads=$4
    shift 4
    start_server "kvd-$slots" env RDMX_SPIN_SLOTS="$slots" \
        ${spin:+RDMX_SPIN_US=$spin} "$@" \
        "$bin/rdmx-kvd" -l 127.0.0.1:0 -w 2 -m 16m --transport shm
    before=$(switches)
    env RDMX_SPIN_SLOTS="$slots" ${spin:+RDMX_SPIN_US=$spin} \
        python3 "$tmp/bench.py" "$addr" "$threads" "$@" "$bin/rdmx-kv" \
        >"$tmp/out" 2>"$tmp/err" || die "$what: bench: $(cat "$tmp/err")"
    srv_nvcsw=$(($(switches) - before))
    stop_server
    ops=$(field ops)
    errors=$(field errors)
    nvcsw=$(sed -n 's/^nvcsw //p' "$tmp/out")
    [ -n "$ops" ] && [ -n "$nvcsw" ] ||
        die "$what: unexpected output: $(cat "$tmp/out")"
    echo "$what: $ops GETs, $errors errors;" \
        "voluntary context switches: client $nvcsw, server $srv_nvcsw"
    [ "$errors" = 0 ] || die "$what: $errors GETs failed"
    [ "$ops" -gt 1000 ] || die "$what: only $ops GETs in 1 s"
    if ! awk -v c="$nvcsw" -v n="$ops" -v l="$limit" \
        'BEGIN { exit !(c < l * n) }'; then
        slept="$nvcsw voluntary switches in $ops GETs: waiters sleep"
        return 1
    fi
    if ! awk -v c="$srv_nvcsw" -v n="$ops" -v l="$limit" \
        'BEGIN { exit !(c < l * n) }'; then
        slept="the server's workers: $srv_nvcsw voluntary switches in $ops GETs"
        return 1
    fi
}

# run_thrice NAME ARGS...: run_case NAME ARGS until a run does not sleep,
# at most 3 runs. Sleeping is what a waiter that polls past its turn does
# (every run: 0.08-0.91 sleeps per GET); a host that takes the CPUs away
# for a moment makes one run sleep too (seen in CI right after conn_scale:
# 0.17 per GET once, the next runs under 0.02).
run_thrice() {
    for try in 1 2 3; do
        run_case "$@" && return 0
        echo "$1: try $try of 3: $slept"
    done
    die "$1: $slept, in 3 runs of 3"
}

run_thrice "4 threads, 1 slot" 1 2000 4

# The first two CPUs this process may use (one if that is all).
cpus=$(python3 -c 'import os
print(",".join(map(str, sorted(os.sched_getaffinity(0))[:2])))')
n=$(echo "$cpus" | tr ',' '\n' | wc -l)
run_thrice "2 threads, $n slot(s), pinned to CPUs $cpus" "$n" "" 2 \
    taskset -c "$cpus"
echo "ok"
