#!/usr/bin/env bash
# vs-ucx.sh — rdmx-perf against ucx_perftest on this machine, interleaved.
#
# Both tools run as a server and a client process on 127.0.0.1 with
# UCX_NET_DEVICES=lo, over the same UCX transports:
#   shm: UCX_TLS=sm,self,tcp (what rdmx's --transport shm selects; tcp is
#        there for the sockaddr connection setup)
#   tcp: UCX_TLS=tcp,self    (rdmx's --transport tcp)
# rdmx always runs with peer error handling (UCP_ERR_HANDLING_MODE_PEER, and
# UCX_MM_ERROR_HANDLING=y so that shared memory stays enabled), so
# ucx_perftest runs twice: with -e and UCX_MM_ERROR_HANDLING=y (the same
# mode, the fair comparison) and without (UCX's best case). For shm both
# tools also get UCX_TCP_PUT_ENABLE=n, which rdmx sets itself (it keeps tcp
# out of the data path; ucx_perftest never put tcp there anyway).
#
# Pairs, with the same size, iterations, warm-up and window (-O):
#   send_lat   8 B    ucp_am_lat         p50 one-way latency (us)
#   put_lat    8 B    ucp_put_lat        p50 one-way latency (us)
#   atomic_lat 8 B    ucp_fadd -O 1      p50 latency per fetch-add (us)
#   send_bw    1 MiB  ucp_am_bw -O 16    bandwidth (MB/s, 10^6 B/s)
#   put_bw     1 MiB  ucp_put_bw -O 16   bandwidth
#   get_bw     1 MiB  ucp_get -O 16      bandwidth
# put_bw/get_bw: rdmx-perf runs with --flush end, ucx_perftest's method (up to
# W operations in flight, one flush at the end); --flush window makes it
# flush after every window instead (rdmx-perf's default).
# Memory: rdmx-perf allocates every buffer with rdmx_mem_alloc (ucp_mem_map
# with UCP_MEM_MAP_ALLOCATE) and passes the registration to each operation;
# ucx_perftest -m host allocates the same way, and -z makes it pass its
# registration too. ucx_perftest reports MiB/s; it is converted to MB/s.
#
# The machine's speed drifts (see the UCX notes), so each round runs every
# variant of a pair back to back, rotating which goes first, and the ratio
# reported is the median over rounds of the per-round ratio rdmx/ucx.
# Latency: lower is better (ratio < 1: rdmx faster). Bandwidth: higher is
# better (ratio > 1: rdmx faster). memcpy bandwidth (bench/memcpy_bw.c) is
# printed beside the shared-memory figures as the physical limit. Other
# UCX_* variables in the environment reach both tools and are printed.
#
# Usage: bench/vs-ucx.sh [--quick] [--rounds N] [--transport shm|tcp|all]
#                        [--only TEST[,TEST...]] [--flush end|window] [--keep]
# Environment: RDMX_PERF (default build/bin/rdmx-perf), UCX_PERFTEST, CC.
set -euo pipefail

ROUNDS=""
QUICK=0
TRANSPORTS="shm tcp"
ONLY=""
KEEP=0
FLUSH=end

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

die() {
    echo "vs-ucx: $*" >&2
    exit 1
}

bad_arg() {
    echo "vs-ucx: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --rounds) ROUNDS="${2:-}"; shift ;;
    --transport)
        case "${2:-}" in
        shm | tcp) TRANSPORTS="$2" ;;
        all) TRANSPORTS="shm tcp" ;;
        *) bad_arg "--transport shm|tcp|all" ;;
        esac
        shift ;;
    --only) ONLY="${2:-}"; shift ;;
    --flush)
        case "${2:-}" in
        end | window) FLUSH="$2" ;;
        *) bad_arg "--flush end|window" ;;
        esac
        shift ;;
    --keep) KEEP=1 ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "unknown argument '$1' (try --help)" ;;
    esac
    shift
done
if [ -z "$ROUNDS" ]; then
    ROUNDS=$([ "$QUICK" = 1 ] && echo 2 || echo 5)
fi
case "$ROUNDS" in
'' | *[!0-9]* | 0) bad_arg "bad --rounds" ;;
esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RDMX_PERF=${RDMX_PERF:-$ROOT/build/bin/rdmx-perf}
UCX_PERFTEST=${UCX_PERFTEST:-$(command -v ucx_perftest || true)}
CC=${CC:-cc}
[ -x "$RDMX_PERF" ] || die "$RDMX_PERF not found; run make"
[ -n "$UCX_PERFTEST" ] || die "ucx_perftest not found (package ucx-utils)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vs-ucx.XXXXXX")
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [ "$KEEP" = 1 ]; then
        echo "raw results kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A clean, loopback-only UCX environment for every process.
unset UCX_TLS UCX_MM_ERROR_HANDLING RDMX_TRANSPORT
export UCX_NET_DEVICES=lo
export UCX_WARN_UNUSED_ENV_VARS=n

# --- what runs ---------------------------------------------------------------
# rdmx test : size : ucx_perftest test : outstanding (-O, -W) : kind
PAIRS="send_lat:8:ucp_am_lat:1:lat
put_lat:8:ucp_put_lat:1:lat
atomic_lat:8:ucp_fadd:1:lat
send_bw:1048576:ucp_am_bw:16:bw
put_bw:1048576:ucp_put_bw:16:bw
get_bw:1048576:ucp_get:16:bw"

# Iterations and warm-up per transport and kind, the same for both tools.
iters_for() { # transport kind -> "N W"
    local n w
    case "$1:$2" in
    shm:lat) n=100000 w=10000 ;;
    shm:bw) n=4000 w=400 ;;
    tcp:lat) n=10000 w=1000 ;;
    tcp:bw) n=400 w=40 ;;
    esac
    if [ "$QUICK" = 1 ]; then
        n=$((n / 4)) w=$((w / 4))
    fi
    echo "$n $w"
}

tls_for() {
    case "$1" in
    shm) echo "sm,self,tcp" ;;
    tcp) echo "tcp,self" ;;
    esac
}

selected() { # test -> 0 if selected by --only
    [ -z "$ONLY" ] && return 0
    case ",$ONLY," in *",$1,"*) return 0 ;; esac
    return 1
}

# --- helpers -----------------------------------------------------------------
free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 40000))
        if [ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ]; then
            echo "$p"
            return
        fi
    done
    die "no free port found"
}

wait_listen() { # port pid
    for _ in $(seq 200); do
        [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.02
    done
    return 1
}

median() { # values on stdin -> median
    sort -g | awk '{v[NR] = $1} END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2];
        else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Share of CPU time other processes used over one second (percent). Both
# tools busy-poll on both of the machine's CPUs; anything else running
# turns microseconds into scheduler time slices.
cpu_busy() {
    local a b
    a=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
    sleep 1
    b=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
    awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ");
        busy = y[1] - x[1]; idle = y[2] - x[2];
        printf "%.0f\n", (busy + idle > 0) ? 100 * busy / (busy + idle) : 0 }'
}

load_note() { # when -> a line on the machine's load
    local busy
    busy=$(cpu_busy)
    if [ "$busy" -gt 10 ]; then
        echo "# WARNING ($1): other processes use ${busy}% of the CPUs;" \
            "latencies will show scheduler time slices. Top users:"
        ps -eo pcpu=,comm= --sort=-pcpu | head -3 | sed 's/^/#   /'
    else
        echo "# CPU load from other processes ($1): ${busy}%"
    fi
}

json_field() { # name json-line -> value
    sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" <<<"$2"
}

# rdmx-perf pair half: leaves the metric (p50 us or MB/s) in VAL. No
# command substitution: the server's pid must stay visible to cleanup.
run_rdmx() { # transport test size iters warmup window kind
    local tr=$1 test=$2 size=$3 n=$4 w=$5 win=$6 kind=$7 port line
    : >"$WORK/rs.out"
    "$RDMX_PERF" --listen 127.0.0.1:0 --once --transport "$tr" \
        >"$WORK/rs.out" 2>"$WORK/rs.err" &
    SERVER_PID=$!
    for _ in $(seq 500); do
        grep -q '^listening on' "$WORK/rs.out" 2>/dev/null && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.02
    done
    port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$WORK/rs.out")
    [ -n "$port" ] ||
        die "rdmx-perf server did not start: $(cat "$WORK/rs.err")"
    if ! "$RDMX_PERF" "127.0.0.1:$port" -t "$test" -s "$size" -n "$n" \
        -w "$w" -W "$win" --flush "$FLUSH" --transport "$tr" --json \
        >"$WORK/rc.out" 2>"$WORK/rc.err"; then
        die "rdmx-perf $test ($tr) failed: $(cat "$WORK/rc.err")"
    fi
    wait "$SERVER_PID" || die "rdmx-perf server failed: $(cat "$WORK/rs.err")"
    SERVER_PID=""
    line=$(grep '^{' "$WORK/rc.out" | tail -1 || true)
    if [ "$kind" = lat ]; then
        VAL=$(json_field p50_us "$line")
    else
        VAL=$(json_field mb_per_s "$line")
    fi
}

# ucx_perftest pair half: leaves the metric (p50 us or MB/s) in VAL.
run_ucx() { # transport errmode(0|1) test size iters warmup outstanding kind
    local tr=$1 err=$2 test=$3 size=$4 n=$5 w=$6 o=$7 kind=$8 port line
    local -a env=(UCX_TLS="$(tls_for "$tr")") flags=(-z)
    local attempt
    if [ "$tr" = shm ]; then
        env+=(UCX_TCP_PUT_ENABLE=n) # as rdmx sets for shm
    fi
    if [ "$err" = 1 ]; then
        env+=(UCX_MM_ERROR_HANDLING=y)
        flags+=(-e)
    fi
    for attempt in 1 2 3; do
        port=$(free_port)
        env "${env[@]}" "$UCX_PERFTEST" -p "$port" \
            >"$WORK/us.out" 2>"$WORK/us.err" &
        SERVER_PID=$!
        wait_listen "$port" "$SERVER_PID" && break
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
        if [ "$attempt" = 3 ]; then
            die "ucx_perftest server did not start: $(cat "$WORK/us.err")"
        fi
    done
    if ! env "${env[@]}" "$UCX_PERFTEST" 127.0.0.1 -p "$port" -t "$test" \
        -s "$size" -n "$n" -w "$w" -O "$o" -m host "${flags[@]}" -f -v \
        >"$WORK/uc.out" 2>"$WORK/uc.err"; then
        die "ucx_perftest $test ($tr) failed:" \
            "$(cat "$WORK/uc.err" "$WORK/uc.out")"
    fi
    wait "$SERVER_PID" || true
    SERVER_PID=""
    # CSV: iters,p50_lat,avg_lat,overall_lat,avg_bw,overall_bw(MiB/s),...
    line=$(grep -E '^ *[0-9]+,' "$WORK/uc.out" | tail -1 || true)
    [ -n "$line" ] || die "ucx_perftest $test: no result: $(cat "$WORK/uc.out")"
    if [ "$kind" = lat ]; then
        VAL=$(awk -F, '{print $2}' <<<"$line")
    else
        VAL=$(awk -F, '{printf "%.2f\n", $6 * 1.048576}' <<<"$line")
    fi
}

# --- run ---------------------------------------------------------------------
"$CC" -O2 -std=c11 -o "$WORK/memcpy_bw" "$ROOT/bench/memcpy_bw.c" ||
    die "cannot compile bench/memcpy_bw.c"

ucx_version=$(ucx_info -v 2>/dev/null | sed -n 's/^# Version /UCX /p' |
    head -1)
extra_env=$(env | grep -E '^(UCX|RDMX)_' |
    grep -v -E '^(UCX_NET_DEVICES|UCX_WARN_UNUSED_ENV_VARS|RDMX_PERF)=' |
    sort | tr '\n' ' ' || true)
echo "# vs-ucx: rdmx-perf vs ucx_perftest, $ROUNDS round(s)" \
    "$([ "$QUICK" = 1 ] && echo "(quick) ")at $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# $(nproc) CPUs, $ucx_version"
echo "# extra environment (passed to both tools): ${extra_env:-none}"
echo "# rdmx-perf put_bw/get_bw: --flush $FLUSH"
load_note before
"$WORK/memcpy_bw" 1m 64m >"$WORK/memcpy.before"
start=$(date +%s)

for ((r = 0; r < ROUNDS; r++)); do
    for tr in $TRANSPORTS; do
        while IFS=: read -r test size utest outst kind; do
            selected "$test" || continue
            read -r n w < <(iters_for "$tr" "$kind")
            win=$([ "$kind" = bw ] && echo "$outst" || echo 16)
            # rotate the order of the three variants from round to round
            for k in 0 1 2; do
                v=$(((k + r) % 3))
                VAL=""
                case $v in
                0) run_rdmx "$tr" "$test" "$size" "$n" "$w" "$win" "$kind" ;;
                1) run_ucx "$tr" 1 "$utest" "$size" "$n" "$w" "$outst" \
                    "$kind" ;;
                2) run_ucx "$tr" 0 "$utest" "$size" "$n" "$w" "$outst" \
                    "$kind" ;;
                esac
                [ -n "$VAL" ] || die "no value for $test ($tr, variant $v)"
                # zero-padded round: join(1) needs the keys sorted as text
                printf "%03d %s\n" "$r" "$VAL" >>"$WORK/$tr.$test.$v"
            done
        done <<<"$PAIRS"
        echo "# round $((r + 1))/$ROUNDS $tr done" \
            "($(($(date +%s) - start)) s)" >&2
    done
done
"$WORK/memcpy_bw" 1m 64m >"$WORK/memcpy.after"
load_note after

# --- report ------------------------------------------------------------------
memcpy_of() { # bytes -> "before/after" median MB/s
    local b a
    b=$(sed -n "s/^bytes=$1 median_mb_s=\([0-9.]*\).*/\1/p" \
        "$WORK/memcpy.before")
    a=$(sed -n "s/^bytes=$1 median_mb_s=\([0-9.]*\).*/\1/p" \
        "$WORK/memcpy.after")
    echo "$b/$a"
}
ratio_median() { # tr test variant -> median over rounds of rdmx/variant
    join "$WORK/$1.$2.0" "$WORK/$1.$2.$3" |
        awk '{printf "%.6g\n", $2 / $3}' | median
}
verdict() { # test ratio -> target status
    awk -v t="$1" -v q="$2" 'BEGIN {
        if (t == "send_lat")
            print (q <= 1.2 ? "met (<=1.2)" : "MISSED (<=1.2)");
        else if (t == "put_bw" || t == "get_bw")
            print (q >= 0.9 ? "met (>=0.9)" : "MISSED (>=0.9)");
        else print "-" }'
}

echo
echo "ratio = median over rounds of rdmx/ucx_perftest in the same round."
echo "latency: p50 in us (one-way for the *_lat ping-pongs); lower is better,"
echo "  ratio < 1 = rdmx faster."
echo "bandwidth: MB/s (10^6 B/s); higher is better, ratio > 1 = rdmx faster."
echo "ucx -e: ucx_perftest with peer error handling, the mode rdmx uses;"
echo "ucx: ucx_perftest without it. Targets are judged against ucx -e."
for tr in $TRANSPORTS; do
    echo
    if [ "$tr" = shm ]; then
        echo "== shared memory (UCX_TLS=$(tls_for shm)); memcpy limit" \
            "(before/after): 1 MiB $(memcpy_of 1048576) MB/s," \
            "64 MiB $(memcpy_of 67108864) MB/s"
    else
        echo "== tcp loopback (UCX_TLS=$(tls_for tcp))"
    fi
    printf "%-10s %8s %-7s %10s %10s %7s %10s %7s  %s\n" test size metric \
        rdmx "ucx -e" ratio ucx ratio "target (vs ucx -e)"
    while IFS=: read -r test size utest outst kind; do
        selected "$test" || continue
        [ -f "$WORK/$tr.$test.0" ] || continue
        m0=$(awk '{print $2}' "$WORK/$tr.$test.0" | median)
        m1=$(awk '{print $2}' "$WORK/$tr.$test.1" | median)
        m2=$(awk '{print $2}' "$WORK/$tr.$test.2" | median)
        q1=$(ratio_median "$tr" "$test" 1)
        q2=$(ratio_median "$tr" "$test" 2)
        metric=$([ "$kind" = lat ] && echo "p50 us" || echo "MB/s")
        printf "%-10s %8s %-7s %10.3f %10.3f %7.3f %10.3f %7.3f  %s\n" \
            "$test" "$size" "$metric" "$m0" "$m1" "$q1" "$m2" "$q2" \
            "$(verdict "$test" "$q1")"
    done <<<"$PAIRS"
    echo "per round (rdmx/ucx -e/ucx):"
    while IFS=: read -r test size utest outst kind; do
        selected "$test" || continue
        [ -f "$WORK/$tr.$test.0" ] || continue
        printf "  %-10s" "$test"
        join "$WORK/$tr.$test.0" "$WORK/$tr.$test.1" |
            join - "$WORK/$tr.$test.2" |
            awk '{printf " %s/%s/%s", $2, $3, $4} END {print ""}'
    done <<<"$PAIRS"
done
echo
echo "# total $(($(date +%s) - start)) s"
