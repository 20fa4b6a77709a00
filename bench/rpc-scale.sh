#!/usr/bin/env bash
# rpc-scale.sh — rdmx-perf rpc_rate with several client threads (or client
# processes) against RPC servers with one or more workers.
#
# Every cell is a fresh server and client on 127.0.0.1 with
# UCX_NET_DEVICES=lo: `rdmx-perf --listen 127.0.0.1:0 --once
# --server-workers W` and `rdmx-perf ... -t rpc_rate -T T -W 32`; each client
# thread has its own worker and channel, the server busy-polls. Rounds
# rotate the order of the cells; the table shows the median calls/s over
# rounds and every round's value.
#
# With --procs P (P > 1) each cell instead runs an RPC server alone
# (`rdmx-perf --listen 127.0.0.1:0 --rpc-only --once --server-workers W`) and
# P client processes at once (`rdmx-perf 127.0.0.1:PORT --rpc-only -t
# rpc_rate -T T ...`), and adds up their calls/s. The processes start
# within a few milliseconds of each other; use enough iterations (-n) that
# this does not matter.
#
# Every busy-polling thread wants a CPU of its own: a cell with more busy
# threads (client threads + server workers) than CPUs measures the
# scheduler's time slices as much as rdmx. The script says so per cell.
#
# Usage: bench/rpc-scale.sh [--rounds N] [--transport shm|tcp]
#          [--threads "1 2 4"] [--workers "1 2"] [--procs P] [-n ITERS]
#          [-s SIZE] [-W WINDOW]
# Environment: RDMX_PERF (default build/bin/rdmx-perf).
set -euo pipefail

NAME=rpc-scale
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

ROUNDS=3
TR=shm
THREADS="1 2 4"
WORKERS="1 2"
PROCS=1
ITERS=""
SIZE=64
WINDOW=32

while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) need_value "$@"; ROUNDS="$2"; shift ;;
    --transport)
        case "${2:-}" in shm | tcp) TR="$2" ;; *) bad_arg "--transport shm|tcp" ;; esac
        shift ;;
    --threads) need_value "$@"; THREADS="$2"; shift ;;
    --workers) need_value "$@"; WORKERS="$2"; shift ;;
    --procs) need_value "$@"; PROCS="$2"; shift ;;
    -n) need_value "$@"; ITERS="$2"; shift ;;
    -s) need_value "$@"; SIZE="$2"; shift ;;
    -W) need_value "$@"; WINDOW="$2"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "unknown argument '$1' (try --help)" ;;
    esac
    shift
done
for v in "$ROUNDS" "$PROCS" "$WINDOW" $THREADS $WORKERS; do
    is_count "$v" || bad_arg "bad number '$v'"
done
if [ -z "$ITERS" ]; then
    ITERS=$([ "$TR" = shm ] && echo 300000 || echo 50000)
fi

RDMX_PERF=${RDMX_PERF:-$RDMX_BUILD/bin/rdmx-perf}
[ -x "$RDMX_PERF" ] || die "$RDMX_PERF not found; run make"

make_work_dir
loopback_ucx

start_server() { # workers extra-args... -> PORT, SERVER_PID
    local w=$1
    shift
    start_listener s 's/^listening on .*:\([0-9]*\)$/\1/p' \
        "$RDMX_PERF" --listen 127.0.0.1:0 --once --transport "$TR" \
        --server-workers "$w" "$@"
    [ -n "$PORT" ] || die "server did not start: $(cat "$WORK/s.err")"
}

run_cell() { # workers threads -> VAL (calls/s)
    local w=$1 t=$2 line sum p
    if [ "$PROCS" = 1 ]; then
        start_server "$w"
        if ! "$RDMX_PERF" "127.0.0.1:$PORT" --transport "$TR" -t rpc_rate \
            -s "$SIZE" -n "$ITERS" -W "$WINDOW" -T "$t" --json \
            >"$WORK/c.out" 2>"$WORK/c.err"; then
            die "client failed (W=$w T=$t): $(cat "$WORK/c.err")"
        fi
        wait "$SERVER_PID" || die "server failed: $(cat "$WORK/s.err")"
        SERVER_PID=""
        line=$(grep '^{' "$WORK/c.out" | tail -1)
        VAL=$(json_field calls_per_s "$line")
        return
    fi
    start_server "$w" --rpc-only
    CPIDS=()
    for ((p = 0; p < PROCS; p++)); do
        "$RDMX_PERF" "127.0.0.1:$PORT" --rpc-only --transport "$TR" \
            -t rpc_rate -s "$SIZE" -n "$ITERS" -W "$WINDOW" -T "$t" --json \
            >"$WORK/c$p.out" 2>"$WORK/c$p.err" &
        CPIDS+=($!)
    done
    for ((p = 0; p < PROCS; p++)); do
        wait "${CPIDS[$p]}" ||
            die "client $p failed (W=$w T=$t): $(cat "$WORK/c$p.err")"
    done
    CPIDS=()
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
    sum=0
    for ((p = 0; p < PROCS; p++)); do
        line=$(grep '^{' "$WORK/c$p.out" | tail -1)
        sum=$(awk -v a="$sum" -v b="$(json_field calls_per_s "$line")" \
            'BEGIN { printf "%.1f", a + b }')
    done
    VAL=$sum
}

echo "# rpc-scale: rdmx-perf rpc_rate, $SIZE B, $WINDOW calls in flight per" \
    "client thread, transport $TR, $ITERS calls per thread, $PROCS client" \
    "process(es), $ROUNDS round(s), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# $(nproc) CPUs; CPU use by other processes before: $(cpu_busy)%;" \
    "CPU pressure (PSI some avg60) $(psi)%"
cells=()
for w in $WORKERS; do
    for t in $THREADS; do
        cells+=("$w:$t")
    done
done
start=$(date +%s)
for ((r = 0; r < ROUNDS; r++)); do
    n=${#cells[@]}
    for ((k = 0; k < n; k++)); do
        cell=${cells[$(((k + r) % n))]}
        w=${cell%%:*}
        t=${cell##*:}
        run_cell "$w" "$t"
        echo "$VAL" >>"$WORK/res.$w.$t"
    done
    echo "# round $((r + 1))/$ROUNDS done ($(($(date +%s) - start)) s)" >&2
done
echo "# CPU use by other processes after: $(cpu_busy)%; CPU pressure over" \
    "the last minute of the run (PSI some avg60): $(psi)%"
printf "%-14s %-16s %12s  %s\n" "server workers" "client threads" "calls/s" \
    "per round; busy threads vs $(nproc) CPUs"
for w in $WORKERS; do
    for t in $THREADS; do
        m=$(median <"$WORK/res.$w.$t")
        busy=$((w + t * PROCS))
        note=""
        [ "$busy" -gt "$(nproc)" ] && note=" (oversubscribed: $busy busy threads)"
        printf "%-14s %-16s %12.0f  %s%s\n" "$w" "$((t * PROCS))" "$m" \
            "$(tr '\n' ' ' <"$WORK/res.$w.$t")" "$note"
    done
done
