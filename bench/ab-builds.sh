#!/usr/bin/env bash
# bench/ab-builds.sh — two builds of rdmx timed against each other on one
# rdmx-perf test, in a way that holds on a host whose speed changes within
# seconds (docs/PERFORMANCE.md, "The host's regimes"). Each build keeps one
# rdmx-perf server for the whole run; short client runs alternate A, B, A,
# B, ... so that both meet the same regimes about as often. The report
# gives each build's runs, best first, the mean of its best quarter, the
# median of its fast runs (within 0.6 of its best: the slow regime is
# 2.5-4x slower, so these ran in a fast one), and B against A on both. A change worth a few percent needs
# 30-40 rounds here; run it twice, the second time with A and B swapped.
#
#   bench/ab-builds.sh A_BUILD B_BUILD [--test T] [--size S]
#                      [--transport shm|tcp] [--rounds N] [--iters N]
#
#   A_BUILD, B_BUILD  build directories (bin/rdmx-perf, lib/librdmx.so*),
#                     e.g. build/ and the build of a second worktree
#   --test T          an rdmx-perf test (rpc_rate); *_lat tests are
#                     compared by their p50 (lower is better), the others
#                     by messages/s (higher is better)
#   --size S          bytes per message (64)
#   --transport T     shm (default) or tcp
#   --rounds N        client runs per build (30)
#   --iters N         operations per client run (1000000; ~0.1-0.3 s for
#                     rpc_rate over shm)
#
# Traffic stays on 127.0.0.1 (UCX_NET_DEVICES=lo).
set -euo pipefail
NAME=ab-builds
. "$(dirname "$0")/lib.sh"

TEST=rpc_rate SIZE=64 TR=shm ROUNDS=30 ITERS=1000000
A="" B=""
while [ $# -gt 0 ]; do
    case $1 in
    --test) need_value "$@"; TEST=$2; shift ;;
    --size) need_value "$@"; SIZE=$(size_bytes "$2"); shift ;;
    --transport)
        need_value "$@"
        case $2 in shm | tcp) TR=$2 ;; *) bad_arg "--transport: shm or tcp" ;; esac
        shift ;;
    --rounds) need_value "$@"; is_count "$2" || bad_arg "--rounds: a count"; ROUNDS=$2; shift ;;
    --iters) need_value "$@"; is_count "$2" || bad_arg "--iters: a count"; ITERS=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) bad_arg "unknown option $1 (--help)" ;;
    *)
        if [ -z "$A" ]; then A=$1; elif [ -z "$B" ]; then B=$1; else
            bad_arg "more than two builds"
        fi ;;
    esac
    shift
done
[ -n "$B" ] || bad_arg "two build directories are needed (--help)"
for d in "$A" "$B"; do
    [ -x "$d/bin/rdmx-perf" ] || die "$d/bin/rdmx-perf: not built"
done
A=$(cd "$A" && pwd) B=$(cd "$B" && pwd)
case $TEST in *_lat) LOWER=1 SORT="sort -g" ;; *) LOWER=0 SORT="sort -gr" ;; esac

make_work_dir
loopback_ucx
unset LD_LIBRARY_PATH
declare -A PORTS
for lab in A B; do
    d=${!lab}
    start_on_free_port "server-$lab" "rdmx-perf ($lab)" \
        env LD_LIBRARY_PATH="$d/lib" "$d/bin/rdmx-perf" \
        --listen 127.0.0.1:@PORT@ --transport "$TR"
    PORTS[$lab]=$PORT
    SERVER_PIDS+=("$SERVER_PID")
    SERVER_PID=""
done

# one client run of build $1: its figure, or "-" if the run failed
run_one() {
    local lab=$1 d=${!1} line
    line=$(LD_LIBRARY_PATH="$d/lib" timeout 120 "$d/bin/rdmx-perf" \
        "127.0.0.1:${PORTS[$lab]}" -t "$TEST" -s "$SIZE" -n "$ITERS" \
        --transport "$TR" 2>>"$WORK/client-$lab.err" |
        awk -v t="$TEST" '$1 == t { l = $0 } END { print l }')
    if [ -z "$line" ]; then
        echo "-"
    elif [ "$LOWER" = 1 ]; then
        echo "$line" | awk '{ print $4 }'
    else
        echo "$line" | awk '{ print $NF }'
    fi
}

# a build's source tree and its commit, from the build's CMake cache
tree_at_dir() { # build dir
    local src
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt" \
        2>/dev/null)
    [ -n "$src" ] || { echo "source tree unknown"; return; }
    echo "$src at $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')$(
        git -C "$src" diff --quiet HEAD -- src include tools 2>/dev/null ||
            echo ' + local changes')"
}

echo "# $NAME: $TEST, $SIZE B, $TR, $ROUNDS runs of $ITERS each, alternating"
echo "# A = $A ($(tree_at_dir "$A"))"
echo "# B = $B ($(tree_at_dir "$B"))"
for _ in $(seq "$ROUNDS"); do
    for lab in A B; do
        echo "$lab $(run_one "$lab")" >>"$WORK/runs"
    done
    printf '.' >&2
done
echo >&2

# best first; "best quarter": the mean of the best ceil(n/4) runs
summary() { # label -> "best-quarter median n"
    awk -v l="$1" '$1 == l && $2 != "-" { print $2 }' "$WORK/runs" |
        $SORT |
        awk -v low="$LOWER" '{ v[NR] = $1 } END {
            if (NR == 0) { print "- - 0"; exit }
            q = int((NR + 3) / 4); s = 0
            for (i = 1; i <= q; i++) s += v[i]
            for (k = 1; k < NR; k++) # the runs within 0.6 of the best
                if (low ? v[k + 1] * 0.6 > v[1] : v[k + 1] < 0.6 * v[1])
                    break
            f = low ? "%.3f %.3f %d\n" : "%.0f %.0f %d\n"
            printf f, s / q, v[int((k + 1) / 2)], NR }'
}
unit=$([ "$LOWER" = 1 ] && echo "p50 us" || echo "msg/s")
for lab in A B; do
    printf '%s runs (%s, best first): ' "$lab" "$unit"
    awk -v l="$lab" '$1 == l { print $2 }' "$WORK/runs" |
        $SORT | tr '\n' ' '
    echo
done
read -r aq am an < <(summary A)
read -r bq bm bn < <(summary B)
[ "$an" -gt 0 ] && [ "$bn" -gt 0 ] ||
    die "no run completed: $(cat "$WORK"/client-*.err 2>/dev/null | tail -3)"
printf '%-12s %14s %14s\n' "" "best quarter" "fast median"
printf '%-12s %14s %14s\n' "A" "$aq" "$am"
printf '%-12s %14s %14s\n' "B" "$bq" "$bm"
awk -v aq="$aq" -v am="$am" -v bq="$bq" -v bm="$bm" -v low="$LOWER" 'BEGIN {
    # as a speed-up of B over A: above 1 is B faster, whichever the unit
    if (low) printf "%-12s %14.3f %14.3f\n", "B vs A", aq / bq, am / bm
    else printf "%-12s %14.3f %14.3f\n", "B vs A", bq / aq, bm / am }'
