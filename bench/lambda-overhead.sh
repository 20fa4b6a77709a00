#!/usr/bin/env bash
# lambda-overhead.sh — what a lambda call costs over a plain RPC round trip.
#
# Each cell is one `rdmx-perf -t lambda_lat` run against a fresh
# `rdmx-perf --listen 127.0.0.1:0 --once` (one server worker, busy
# polling), UCX_NET_DEVICES=lo: 10,000 blocking calls per kind, the kinds
# interleaved in blocks of 100, so that the plain RPC it is compared with
# (perf.echo, empty payload, same server and connection) meets the same
# phases of the machine. Kinds: hash (lambda.call by id, the compiled code
# cached: what rdmx_lambda_eval does after its first call), source
# (lambda.eval with the source each time), nocache (an engine that compiles
# every call).
#
# Functions: the empty one (`return`) and bench/lambda-60fns.lua (7.5 KB,
# 60 local functions). Rounds rotate the order of the cells; the table
# shows medians over rounds of each round's p50 and of its ratio to the
# plain RPC, and the targets:
#   - shm, empty function by hash: at most 2x the plain RPC;
#   - shm, the 7.5 KB function by hash: at most 10 us more than the empty.
#
# Usage: bench/lambda-overhead.sh [--rounds N (5)] [--transports "shm tcp"]
#          [--function FILE]   (instead of lambda-60fns.lua)
# Environment: RDMX_PERF (default build/bin/rdmx-perf).
set -euo pipefail

NAME=lambda-overhead
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

ROUNDS=5
TRS="shm tcp"
BIG="$(dirname "$0")/lambda-60fns.lua"

while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) need_value "$@"; ROUNDS="$2"; shift ;;
    --transports)
        need_value "$@"
        for t in $2; do
            case "$t" in shm | tcp) ;; *) bad_arg "--transports: shm, tcp" ;; esac
        done
        TRS="$2"; shift ;;
    --function) need_value "$@"; BIG="$2"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "unknown argument '$1' (try --help)" ;;
    esac
    shift
done
is_count "$ROUNDS" || bad_arg "bad number '$ROUNDS'"
[ -r "$BIG" ] || die "no function file $BIG"

RDMX_PERF=${RDMX_PERF:-$RDMX_BUILD/bin/rdmx-perf}
[ -x "$RDMX_PERF" ] || die "$RDMX_PERF not found; run make"

make_work_dir
loopback_ucx

KINDS="rpc hash source nocache"

run_cell() { # tr fn(empty|big) -> one line per kind in $WORK/res.TR.FN.KIND
    local tr=$1 fn=$2 k line
    local -a farg=()
    [ "$fn" = big ] && farg=(--function "$BIG")
    start_listener s 's/^listening on .*:\([0-9]*\)$/\1/p' \
        "$RDMX_PERF" --listen 127.0.0.1:0 --once --transport "$tr"
    [ -n "$PORT" ] || die "server did not start: $(cat "$WORK/s.err")"
    if ! "$RDMX_PERF" "127.0.0.1:$PORT" --transport "$tr" -t lambda_lat \
        "${farg[@]}" --json >"$WORK/c.out" 2>"$WORK/c.err"; then
        die "lambda_lat ($tr, $fn) failed: $(cat "$WORK/c.err")"
    fi
    wait "$SERVER_PID" || die "server failed: $(cat "$WORK/s.err")"
    SERVER_PID=""
    for k in $KINDS; do
        line=$(grep "\"kind\":\"$k\"" "$WORK/c.out" | tail -1)
        [ -n "$line" ] || die "lambda_lat ($tr, $fn): no $k line"
        echo "$(json_field p50_us "$line") $(json_field p50_vs_rpc "$line")" \
            >>"$WORK/res.$tr.$fn.$k"
    done
}

echo "# lambda-overhead: rdmx-perf -t lambda_lat, 1 client thread, 1 server" \
    "worker; $ROUNDS round(s); $(date -u '+%Y-%m-%d %H:%M UTC'); tree" \
    "$(tree_at)"
echo "# $(nproc) CPUs; CPU use by other processes before: $(cpu_busy)%;" \
    "CPU pressure (PSI some avg60) $(psi)%; 7.5 KB function: $BIG" \
    "($(wc -c <"$BIG") B)"
cells=()
for tr in $TRS; do
    cells+=("$tr:empty" "$tr:big")
done
for ((r = 0; r < ROUNDS; r++)); do
    n=${#cells[@]}
    for ((k = 0; k < n; k++)); do
        cell=${cells[$(((k + r) % n))]}
        run_cell "${cell%%:*}" "${cell##*:}"
    done
done

col() { # file column -> median
    awk -v c="$2" '{print $c}' "$1" | median
}
printf '\n%-5s %-6s' transport function
for k in $KINDS; do printf ' %9s' "$k"; done
printf '   %s\n' "hash/rpc per round"
for tr in $TRS; do
    for fn in empty big; do
        printf '%-9s %-6s' "$tr" "$fn"
        for k in $KINDS; do
            printf ' %9.3f' "$(col "$WORK/res.$tr.$fn.$k" 1)"
        done
        printf '   %s\n' "$(awk '{ s = s (NR > 1 ? ", " : "") \
            sprintf("%.2f", $2) } END { print s }' "$WORK/res.$tr.$fn.hash")"
    done
done
echo "(p50 us per round trip, medians over rounds)"

if [[ " $TRS " == *" shm "* ]]; then
    ratio=$(col "$WORK/res.shm.empty.hash" 2)
    extra=$(awk -v b="$(col "$WORK/res.shm.big.hash" 1)" \
        -v e="$(col "$WORK/res.shm.empty.hash" 1)" \
        'BEGIN { printf "%.2f", b - e }')
    echo
    echo "target shm empty by hash <= 2x rpc: $ratio x ->" \
        "$(awk -v v="$ratio" 'BEGIN { print (v <= 2) ? "met" : "missed" }')"
    echo "target shm 7.5 KB by hash <= empty + 10 us: +$extra us ->" \
        "$(awk -v v="$extra" 'BEGIN { print (v <= 10) ? "met" : "missed" }')"
fi
echo "# CPU use by other processes after: $(cpu_busy)%"
