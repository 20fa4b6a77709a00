#!/usr/bin/env bash
# vs-fabric.sh — rdmx over its libfabric backend against the same provider's
# own figures, and against rdmx over UCX on the same wire, interleaved.
#
# Everything runs as a server and a client process on 127.0.0.1;
# FI_TCP_IFACE=lo and UCX_NET_DEVICES=lo keep all traffic on loopback.
# Providers (libfabric 1.17): tcp = "tcp;ofi_rxm" (rdmx --transport
# ofi:tcp), shm (--transport ofi:shm).
#
# Rows, with the same size, iterations and window on both sides:
#   send_lat  8 B    rdmx-perf send_lat        p50 and mean one-way latency
#                    fi_pingpong -e rdm -S 8   mean one-way (usec/xfer)
#                    fabric_rma -t lat -s 8    p50 one-way, the backend's
#                                              hints, busy polling
#   send_bw   1 MiB  rdmx-perf send_bw -W 16   MB/s
#                    fi_pingpong -S 1048576    MB/s of its ping-pong (one
#                                              message at a time each way)
#                    fabric_rma -t lat -s 1m   the same ping-pong, p50 based
#   put_bw    1 MiB  rdmx-perf put_bw -W 16 --flush end   MB/s
#                    fabric_rma -t put -W 16   fi_write, 16 in flight
#   get_bw    1 MiB  rdmx-perf get_bw -W 16 --flush end   MB/s
#                    fabric_rma -t get -W 16   fi_read, 16 in flight
#   rpc_lat   64 B   rdmx-perf rpc_lat         p50 round trip of a blocking
#                    call, against 2 x fi_pingpong -S 64 (mean one-way) and
#                    2 x fabric_rma -t lat -s 64 (p50 one-way)
#   wire_rtt  64 B   the two raw transports rdmx runs over, no rdmx:
#                    2 x fi_pingpong -S 64 (mean one-way) against
#                    ucx_perftest ucp_am_lat -s 64 -e (2 x mean one-way),
#                    UCX_TLS as rdmx's --transport tcp|shm selects. The
#                    ratio UCX/libfabric is the best the KV rows can reach
#                    if rdmx added nothing on either (printed with them)
#   kv_get_4k, kv_get_1m   rdmx-kv bench --op get (1 thread, --zero-copy,
#                    keys as in vs-memcached.sh) against rdmx-kvd over
#                    ofi:PROV and against rdmx-kvd over UCX on the same wire
#                    (--transport tcp, or shm): ops/s
# rdmx's one-sided operations are carried over messages by the ofi backend
# (docs/FABRIC.md): put_bw/get_bw compare that against the provider's own
# fi_write/fi_read. fabric_rma (bench/fabric_rma.c, built by make with the
# ofi backend) uses the backend's fi_getinfo hints and one buffer of SIZE
# per side, like rdmx-perf.
#
# Each round runs the variants of a row back to back, rotating which goes
# first; the ratio printed is the median over rounds of the per-round
# ratio rdmx/peer. Latency: lower is better; bandwidth and ops/s: higher
# is better. Targets: send_lat <= 1.2 x fi_pingpong (rdmx's mean against
# its mean); put_bw, get_bw >= 0.9 x fabric_rma; KV GET over ofi within
# 1.2x of KV over UCX (ops/s ratio >= 0.83).
#
# Usage: bench/vs-fabric.sh [--rounds N] [--provider tcp|shm|all]
#                           [--only TEST[,TEST...]] [--quick] [--keep]
# --only takes row names, "kv" (both KV rows) or "raw" (the others).
# Environment: RDMX_PERF, RDMX_KV, RDMX_KVD, FABRIC_RMA (default build/bin/),
# FI_PINGPONG, UCX_PERFTEST.
set -euo pipefail

NAME=vs-fabric
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

ROUNDS=""
QUICK=0
PROVIDERS="tcp shm"
ONLY=""
KEEP=0

while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --rounds) need_value "$@"; ROUNDS="$2"; shift ;;
    --provider)
        need_value "$@"
        case "$2" in
        tcp | shm) PROVIDERS=$2 ;;
        all) PROVIDERS="tcp shm" ;;
        *) bad_arg "--provider tcp|shm|all" ;;
        esac
        shift ;;
    --only) need_value "$@"; ONLY="$2"; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "unknown argument '$1' (try --help)" ;;
    esac
    shift
done
set_rounds 2 3

RDMX_PERF=${RDMX_PERF:-$RDMX_BUILD/bin/rdmx-perf}
RDMX_KV=${RDMX_KV:-$RDMX_BUILD/bin/rdmx-kv}
RDMX_KVD=${RDMX_KVD:-$RDMX_BUILD/bin/rdmx-kvd}
FABRIC_RMA=${FABRIC_RMA:-$RDMX_BUILD/bin/fabric_rma}
FI_PINGPONG=${FI_PINGPONG:-$(command -v fi_pingpong || true)}
for b in "$RDMX_PERF" "$RDMX_KV" "$RDMX_KVD"; do
    [ -x "$b" ] || die "$b not found; run make"
done
[ -x "$FABRIC_RMA" ] ||
    die "$FABRIC_RMA not found; run make (built with the ofi backend only)"
[ -n "$FI_PINGPONG" ] || die "fi_pingpong not found (package libfabric-bin)"
UCX_PERFTEST=${UCX_PERFTEST:-$(command -v ucx_perftest || true)}
[ -n "$UCX_PERFTEST" ] || die "ucx_perftest not found (package ucx-utils)"

make_work_dir
loopback_ucx
unset FI_PROVIDER
export FI_TCP_IFACE=lo

# --- what runs -----------------------------------------------------------------
# row : size : kind (lat, bw, rma, rtt, wire, kv) : variants
ROWS="send_lat:8:lat:3
send_bw:1048576:bw:3
put_bw:1048576:rma:2
get_bw:1048576:rma:2
rpc_lat:64:rtt:3
wire_rtt:64:wire:2
kv_get_4k:4096:kv:2
kv_get_1m:1048576:kv:2"

iters_for() { # provider kind size -> "N W"
    local n w
    case "$1:$2" in
    shm:lat | shm:rtt | shm:wire) n=100000 w=10000 ;;
    tcp:lat | tcp:rtt | tcp:wire) n=10000 w=1000 ;;
    shm:bw | shm:rma) n=4000 w=400 ;;
    tcp:bw | tcp:rma) n=400 w=40 ;;
    *) n=0 w=0 ;;
    esac
    if [ "$2" = bw ] && [ "$1" = shm ]; then
        n=2000 w=200 # (the ping-pong references move 1 MiB each way)
    fi
    if [ "$QUICK" = 1 ]; then
        n=$((n / 4)) w=$((w / 4))
    fi
    echo "$n $w"
}
KV_SECONDS=$([ "$QUICK" = 1 ] && echo 1 || echo 3)

# row -> 0 if --only takes it (groups: kv, the kv_ rows; raw, the others)
# (wire_rtt also whenever a KV row runs: it gives their bound)
selected() {
    only_selects "$1" kv_ kv raw && return 0
    [ "$1" = wire_rtt ] || return 1
    only_selects kv_get_4k kv_ kv raw || only_selects kv_get_1m kv_ kv raw
}

load_note() { # when -> a line on the machine's load
    echo "# CPU load from other processes ($1): $(cpu_busy)%," \
        "PSI some avg60 $(psi)%"
}

# --- the halves -------------------------------------------------------------------
# rdmx-perf over ofi:PROV: VAL (p50 us, RTT us or MB/s), VAL2 (mean us).
run_rdmx() { # prov test size iters warmup kind
    local prov=$1 test=$2 size=$3 n=$4 w=$5 kind=$6
    perf_pair "ofi:$prov" "$test" -s "$size" -n "$n" -w "$w" -W 16 \
        --flush end
    case "$kind" in
    lat | rtt) VAL=$(json_field p50_us "$PERF_LINE") ;;
    *) VAL=$(json_field mb_per_s "$PERF_LINE") ;;
    esac
    VAL2=$(json_field avg_us "$PERF_LINE")
}

# fi_pingpong: VAL (mean one-way us, or MB/s for kind bw).
run_pingpong() { # prov size iters kind
    local prov=$1 size=$2 n=$3 kind=$4 line
    start_on_free_port ps "$FI_PINGPONG" "$FI_PINGPONG" -p "$prov" -e rdm \
        -B @PORT@ -S "$size" -I "$n"
    if ! "$FI_PINGPONG" -p "$prov" -e rdm -P "$PORT" -S "$size" -I "$n" \
        127.0.0.1 >"$WORK/pc.out" 2>"$WORK/pc.err"; then
        die "fi_pingpong -p $prov -S $size failed:" \
            "$(cat "$WORK/pc.err" "$WORK/pc.out")"
    fi
    wait "$SERVER_PID" || true
    SERVER_PID=""
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    line=$(awk 'NR > 1 && $1 ~ /^[0-9]/' "$WORK/pc.out" | tail -1)
    [ -n "$line" ] || die "fi_pingpong: no result: $(cat "$WORK/pc.out")"
    if [ "$kind" = bw ]; then
        VAL=$(awk '{print $6}' <<<"$line")
    else
        VAL=$(awk '{print $7}' <<<"$line")
    fi
}

# ucx_perftest ucp_am_lat with peer error handling (rdmx's mode), UCX_TLS
# as rdmx's --transport PROV: VAL (2 x mean one-way = mean RTT, us).
run_ucx_am_lat() { # prov size iters warmup
    ucx_perftest_pair UCX_TLS="$([ "$1" = shm ] && echo sm,self ||
        echo tcp,self)" UCX_MM_ERROR_HANDLING=y -- -t ucp_am_lat -s "$2" \
        -n "$3" -w "$4" -m host -e
    VAL=$(awk -F, '{printf "%.4f\n", 2 * $3}' <<<"$UCX_LINE")
}

# fabric_rma: VAL (p50 one-way us for lat, MB/s otherwise).
run_fabric() { # prov test size iters warmup kind
    local prov=$1 test=$2 size=$3 n=$4 w=$5 kind=$6 line
    start_on_free_port fs "$FABRIC_RMA" "$FABRIC_RMA" -p "$prov" -l @PORT@
    if ! "$FABRIC_RMA" -p "$prov" "127.0.0.1:$PORT" -t "$test" -s "$size" \
        -n "$n" -w "$w" -W 16 >"$WORK/fc.out" 2>"$WORK/fc.err"; then
        die "fabric_rma -t $test -p $prov failed: $(cat "$WORK/fc.err")"
    fi
    wait "$SERVER_PID" || die "fabric_rma server failed: $(cat "$WORK/fs.err")"
    SERVER_PID=""
    line=$(grep '^fabric_rma ' "$WORK/fc.out" | tail -1 || true)
    if [ "$kind" = bw ] || [ "$kind" = rma ]; then
        VAL=$(sed -n 's/.* mb_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
    else
        VAL=$(sed -n 's/.* p50_us=\([0-9.]*\).*/\1/p' <<<"$line")
    fi
}

# rdmx-kv bench GET against the kvd of transport TR: VAL (ops/s).
run_kv() { # tr port size
    local tr=$1 port=$2 size=$3 keys line
    keys=$([ "$size" -ge 1048576 ] && echo 100 || echo 10000)
    RDMX_TRANSPORT=$tr timeout $((KV_SECONDS + 120)) "$RDMX_KV" \
        --servers "127.0.0.1:$port" --timeout 30000 bench --op get \
        --size "$size" --keys "$keys" --threads 1 --seconds "$KV_SECONDS" \
        --zero-copy --json >"$WORK/kv.out" 2>"$WORK/kv.err" ||
        die "rdmx-kv bench ($tr, $size) failed: $(tail -5 "$WORK/kv.err")"
    line=$(grep '^{' "$WORK/kv.out" | tail -1 || true)
    [ "$(json_field errors "$line")" = 0 ] &&
        [ "$(json_field misses "$line")" = 0 ] ||
        die "rdmx-kv bench ($tr, $size): errors or misses: $line"
    VAL=$(json_field ops_per_s "$line")
}

# --- run ---------------------------------------------------------------------
BIN_TIME=$(date -u -r "$RDMX_PERF" '+%Y-%m-%d %H:%M UTC')
for b in rdmx-perf rdmx-kv rdmx-kvd fabric_rma; do
    cp "$RDMX_BUILD/bin/$b" "$WORK/$b" 2>/dev/null || true
done
# (private copies: a make during the run must not replace them)
[ "$RDMX_PERF" = "$RDMX_BUILD/bin/rdmx-perf" ] && RDMX_PERF=$WORK/rdmx-perf
[ "$RDMX_KV" = "$RDMX_BUILD/bin/rdmx-kv" ] && RDMX_KV=$WORK/rdmx-kv
[ "$RDMX_KVD" = "$RDMX_BUILD/bin/rdmx-kvd" ] && RDMX_KVD=$WORK/rdmx-kvd
[ "$FABRIC_RMA" = "$RDMX_BUILD/bin/fabric_rma" ] && FABRIC_RMA=$WORK/fabric_rma

KV=0
while IFS=: read -r row _ kind _; do
    [ "$kind" = kv ] && selected "$row" && KV=1
done <<<"$ROWS"
if [ "$KV" = 1 ]; then
    for prov in $PROVIDERS; do
        for tr in "ofi:$prov" "$prov"; do
            RDMX_TRANSPORT=$tr start_kvd "${tr/:/-}" --workers 2 \
                --memory 256m --max-value 1m
            printf -v "KVD_PORT_${tr/:/_}" '%s' "$KVD_PORT"
        done
    done
fi

echo "# vs-fabric: rdmx over ofi vs the provider's own figures and vs rdmx" \
    "over UCX, $ROUNDS round(s)$([ "$QUICK" = 1 ] && echo " (quick)")" \
    "at $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# $(nproc) CPUs, libfabric $(fi_info --version 2>/dev/null |
    sed -n 's/^libfabric: *//p' | head -1), $(ucx_version);" \
    "tree $(tree_at), binaries of $BIN_TIME"
echo "# extra environment: $(extra_env RDMX_PERF RDMX_KV RDMX_KVD)" \
    "$(env | grep -E '^FI_' | sort | tr '\n' ' ')"
load_note before
start=$(date +%s)

for ((r = 0; r < ROUNDS; r++)); do
    for prov in $PROVIDERS; do
        while IFS=: read -r row size kind nv; do
            selected "$row" || continue
            read -r n w < <(iters_for "$prov" "$kind" "$size")
            for ((k = 0; k < nv; k++)); do
                v=$(((k + r) % nv))
                VAL="" VAL2=""
                case "$kind:$v" in
                kv:0)
                    p="KVD_PORT_ofi_$prov"
                    run_kv "ofi:$prov" "${!p}" "$size" ;;
                kv:1)
                    p="KVD_PORT_$prov"
                    run_kv "$prov" "${!p}" "$size" ;;
                wire:0)
                    run_pingpong "$prov" "$size" "$n" rtt
                    VAL=$(awk -v x="$VAL" 'BEGIN { printf "%.4f", 2 * x }') ;;
                wire:1)
                    run_ucx_am_lat "$prov" "$size" "$n" "$w" ;;
                *:0)
                    test=$row
                    run_rdmx "$prov" "$test" "$size" "$n" "$w" "$kind"
                    printf "%03d %s\n" "$r" "${VAL2:-nan}" \
                        >>"$WORK/$prov.$row.mean" ;;
                lat:1 | rtt:1 | bw:1)
                    run_pingpong "$prov" "$size" "$n" "$kind" ;;
                lat:2 | rtt:2 | bw:2)
                    run_fabric "$prov" lat "$size" "$n" "$w" lat ;;
                rma:1)
                    run_fabric "$prov" "${row%_bw}" "$size" "$n" "$w" rma ;;
                esac
                [ -n "$VAL" ] || die "no value for $row ($prov, variant $v)"
                if [ "$kind" = rtt ] && [ "$v" != 0 ]; then
                    VAL=$(awk -v x="$VAL" 'BEGIN { printf "%.4f", 2 * x }')
                elif [ "$kind" = bw ] && [ "$v" = 2 ]; then
                    # p50 one-way time of 1 MiB -> MB/s
                    VAL=$(awk -v s="$size" -v x="$VAL" \
                        'BEGIN { printf "%.2f", s / x }')
                fi
                printf "%03d %s\n" "$r" "$VAL" >>"$WORK/$prov.$row.$v"
            done
        done <<<"$ROWS"
        echo "# round $((r + 1))/$ROUNDS $prov done" \
            "($(($(date +%s) - start)) s)" >&2
    done
done
load_note after

# --- report ------------------------------------------------------------------
ratio_median() { # file-a file-b -> median over rounds of a/b
    join "$1" "$2" | awk '$3 > 0 {printf "%.6g\n", $2 / $3}' | median
}
col_median() { awk '{print $2}' "$1" | median; }
verdict() { # row ratio -> target status
    awk -v t="$1" -v q="$2" 'BEGIN {
        if (t == "send_lat")
            print (q <= 1.2 ? "met (<=1.2)" : "MISSED (<=1.2)");
        else if (t == "put_bw" || t == "get_bw")
            print (q >= 0.9 ? "met (>=0.9)" : "MISSED (>=0.9)");
        else if (t ~ /^kv_/)
            print (q >= 1 / 1.2 ? "met (>=0.83)" : "MISSED (>=0.83)");
        else print "-" }'
}

echo
echo "ratio = median over rounds of rdmx/peer in the same round."
echo "send_lat: us one-way; rdmx p50 (mean) against fi_pingpong's mean"
echo "  (usec/xfer; its ratio: rdmx mean / fi_pingpong) and fabric_rma's p50"
echo "  (ratio: rdmx p50 / fabric_rma); lower is better."
echo "rpc_lat: p50 round trip (us) against 2 x the 64 B one-way figures."
echo "send_bw: MB/s, rdmx with 16 in flight against the ping-pongs'"
echo "  bandwidth (one message at a time); put_bw/get_bw: MB/s, 16 in"
echo "  flight on both sides; higher is better."
echo "wire_rtt: mean RTT (us) of the raw transports, 64 B, no rdmx: the"
echo "  rdmx column holds ucx_perftest ucp_am_lat's, the fi_pingpong column"
echo "  libfabric's; ratio libfabric/UCX (above 1: libfabric is slower)."
echo "kv_get_*: ops/s, rdmx-kvd over ofi against over UCX; higher is better."
echo "  bound: the wire_rtt rounds' median UCX/libfabric RTT ratio, what a"
echo "  2-message GET could reach if rdmx cost nothing on either transport."
for prov in $PROVIDERS; do
    echo
    echo "== provider $prov ($([ "$prov" = tcp ] && echo "tcp;ofi_rxm, lo" ||
        echo shm)); KV peer: rdmx over UCX --transport $prov"
    printf "%-10s %8s %-7s %14s %12s %7s %12s %7s  %s\n" row size metric \
        rdmx fi_pingpong ratio fabric_rma ratio target
    while IFS=: read -r row size kind nv; do
        selected "$row" || continue
        [ -f "$WORK/$prov.$row.0" ] || continue
        m0=$(col_median "$WORK/$prov.$row.0")
        case "$kind" in
        lat)
            mm=$(col_median "$WORK/$prov.$row.mean")
            m1=$(col_median "$WORK/$prov.$row.1")
            q1=$(ratio_median "$WORK/$prov.$row.mean" "$WORK/$prov.$row.1")
            m2=$(col_median "$WORK/$prov.$row.2")
            q2=$(ratio_median "$WORK/$prov.$row.0" "$WORK/$prov.$row.2")
            printf "%-10s %8s %-7s %6.3f (%5.3f) %12.3f %7.3f %12.3f %7.3f  %s\n" \
                "$row" "$size" "us" "$m0" "$mm" "$m1" "$q1" "$m2" "$q2" \
                "$(verdict "$row" "$q1")"
            ;;
        rtt | bw)
            m1=$(col_median "$WORK/$prov.$row.1")
            q1=$(ratio_median "$WORK/$prov.$row.0" "$WORK/$prov.$row.1")
            m2=$(col_median "$WORK/$prov.$row.2")
            q2=$(ratio_median "$WORK/$prov.$row.0" "$WORK/$prov.$row.2")
            printf "%-10s %8s %-7s %14.3f %12.3f %7.3f %12.3f %7.3f  %s\n" \
                "$row" "$size" "$([ "$kind" = bw ] && echo MB/s || echo "RTT us")" \
                "$m0" "$m1" "$q1" "$m2" "$q2" "$(verdict "$row" "$q1")"
            ;;
        rma)
            m1=$(col_median "$WORK/$prov.$row.1")
            q1=$(ratio_median "$WORK/$prov.$row.0" "$WORK/$prov.$row.1")
            printf "%-10s %8s %-7s %14.3f %12s %7s %12.3f %7.3f  %s\n" \
                "$row" "$size" MB/s "$m0" - - "$m1" "$q1" \
                "$(verdict "$row" "$q1")"
            ;;
        wire)
            m1=$(col_median "$WORK/$prov.$row.1")
            q1=$(ratio_median "$WORK/$prov.$row.0" "$WORK/$prov.$row.1")
            printf "%-10s %8s %-7s %14s %12.3f %7.3f %12s %7s  %s\n" \
                "$row" "$size" "RTT us" "ucx $(printf %.3f "$m1")" "$m0" \
                "$q1" - - -
            ;;
        kv)
            m1=$(col_median "$WORK/$prov.$row.1")
            q1=$(ratio_median "$WORK/$prov.$row.0" "$WORK/$prov.$row.1")
            bound=""
            [ -f "$WORK/$prov.wire_rtt.0" ] &&
                bound=" bound $(ratio_median "$WORK/$prov.wire_rtt.1" \
                    "$WORK/$prov.wire_rtt.0" | xargs printf %.3f)"
            printf "%-10s %8s %-7s %14.0f %12s %7s %12s %7s  %s\n" \
                "$row" "$size" ops/s "$m0" "ucx $(printf %.0f "$m1")" \
                "$(printf %.3f "$q1")" - - "$(verdict "$row" "$q1")$bound"
            ;;
        esac
    done <<<"$ROWS"
    echo "per round (rdmx/peers):"
    while IFS=: read -r row size kind nv; do
        selected "$row" || continue
        [ -f "$WORK/$prov.$row.0" ] || continue
        printf "  %-10s" "$row"
        files=("$WORK/$prov.$row.0")
        for ((v = 1; v < nv; v++)); do files+=("$WORK/$prov.$row.$v"); done
        j=$(cat "${files[0]}")
        for f in "${files[@]:1}"; do j=$(join <(echo "$j") "$f"); done
        awk '{ s = " "; for (i = 2; i <= NF; i++) s = s (i > 2 ? "/" : "") $i;
               printf "%s", s } END { print "" }' <<<"$j"
    done <<<"$ROWS"
done
echo
echo "# total $(($(date +%s) - start)) s"
