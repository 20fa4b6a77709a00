#!/usr/bin/env bash
# vs-ucx.sh — rdmx-perf against ucx_perftest on this machine, interleaved.
#
# Both tools run as a server and a client process on 127.0.0.1 with
# UCX_NET_DEVICES=lo, over the same UCX transports:
#   shm: UCX_TLS=sm,self  (rdmx's --transport shm selects sysv,cma,self: the
#        same message transport, sysv, that ucx_perftest's endpoints use,
#        without posix's second FIFO; both tools exchange worker addresses
#        over a TCP socket of their own)
#   tcp: UCX_TLS=tcp,self (rdmx's --transport tcp)
# rdmx always runs with peer error handling (UCP_ERR_HANDLING_MODE_PEER, and
# UCX_MM_ERROR_HANDLING=y so that shared memory stays enabled), so
# ucx_perftest runs twice: with -e and UCX_MM_ERROR_HANDLING=y (the same
# mode, the fair comparison) and without (UCX's best case). (rdmx also turns
# UCX's adaptive progress off for tcp; with one endpoint and one transport
# it changes nothing on the measured path.)
#
# Pairs, with the same size, iterations, warm-up and window (-O):
#   send_lat   8 B    ucp_am_lat         p50 one-way latency (us)
#   put_lat    8 B    ucp_put_lat        p50 one-way latency (us)
#   atomic_lat 8 B    ucp_fadd -O 1      p50 latency per fetch-add (us)
#   send_bw    1 MiB  ucp_am_bw -O 16    bandwidth (MB/s, 10^6 B/s)
#   put_bw     1 MiB  ucp_put_bw -O 16   bandwidth
#   get_bw     1 MiB  ucp_get -O 16      bandwidth
# RPC pairs (rdmx-perf's RPC server with 1 worker, busy polling; one client
# thread):
#   rpc_lat    64 B   ucp_am_lat         p50 round trip (us) of a blocking
#                     call to an echo handler, against 2 x ucp_am_lat's p50
#                     (ucx_perftest reports one-way latency = RTT / 2)
#   rpc_rate   64 B   ucp_am_bw -O 32    calls/s with 32 calls in flight
#                     against ucp_am_bw's overall message rate (one-way
#                     messages/s; a call is a request and a response)
#   rpc_rate_more     the same with rdmx-perf --batch: each call of a burst
#                     but its last says RDMX_RPC_MORE, so a burst leaves as
#                     one message (docs/RPC.md, "Batched calls"); UCX's tools
#                     have no such mode, so no target is judged on it
#   rpc_bulk   64 MiB ucp_get -O 1       MB/s: a call carrying a descriptor
#                     of 64 MiB that the handler pulls with a get, then
#                     answers; one call in flight
#   rpc_bulk_push 64 MiB ucp_put_bw -O 1 the same, pushed with a put + flush
# --only also takes "rpc" (the RPC pairs) and "core" (the others).
# For rpc_lat and rpc_rate a fourth variant runs: bench/ucx_am_rpc.c, the
# smallest RPC on UCX active messages (the server's AM callback answers each
# request at once; same payload, no header, peer error handling), compiled
# here with $CC. It shows what is left for any RPC layer on this machine.
# Shared memory only: over tcp its round trip came out ~2x ucp_am_lat's (and
# rdmx's) for a reason not traced, so it is no bound there. A fifth variant,
# ucx_am_rpc -m put, makes the same calls by one-sided writes into slots the
# other side polls (docs/RPC_RINGS.md); it is printed below the table.
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
# reported is the median over rounds of the per-round ratio rdmx/ucx. On a
# virtual machine whose host moves its CPUs (docs/PERFORMANCE.md, "The
# host's regimes") two runs seconds apart can differ 3x over shared memory,
# so the report also gives the median ratio over the rounds in which both
# sides came within 0.6 of their own best ("both fast": both in a fast
# regime), each side's best round and their ratio, and the round trip of
# a cache line between the two CPUs at each round's start
# (bench/line_rtt.c).
# Latency: lower is better (ratio < 1: rdmx faster). Bandwidth and rates:
# higher is better (ratio > 1: rdmx faster). memcpy bandwidth (bench/memcpy_bw.c) is
# printed beside the shared-memory figures as the physical limit. Other
# UCX_* variables in the environment reach both tools and are printed.
#
# Usage: bench/vs-ucx.sh [--quick] [--rounds N] [--transport shm|tcp|all]
#                        [--only TEST[,TEST...]] [--flush end|window] [--keep]
# Environment: RDMX_PERF (default build/bin/rdmx-perf), UCX_PERFTEST, CC.
set -euo pipefail

NAME=vs-ucx
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

ROUNDS=""
QUICK=0
TRANSPORTS="shm tcp"
ONLY=""
KEEP=0
FLUSH=end

while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --rounds) need_value "$@"; ROUNDS="$2"; shift ;;
    --transport) need_value "$@"; set_transports "$2" "shm tcp"; shift ;;
    --only) need_value "$@"; ONLY="$2"; shift ;;
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
set_rounds 2 5

RDMX_PERF=${RDMX_PERF:-$RDMX_BUILD/bin/rdmx-perf}
UCX_PERFTEST=${UCX_PERFTEST:-$(command -v ucx_perftest || true)}
[ -x "$RDMX_PERF" ] || die "$RDMX_PERF not found; run make"
[ -n "$UCX_PERFTEST" ] || die "ucx_perftest not found (package ucx-utils)"

make_work_dir
loopback_ucx

# --- what runs ---------------------------------------------------------------
# rdmx test : size : ucx_perftest test : outstanding (-O, -W) : kind
# kinds: lat (p50 one-way us), rtt (p50 round trip us; ucx: 2 x one-way),
#        rate (rdmx calls/s; ucx messages/s), bw and bulk (MB/s)
PAIRS="send_lat:8:ucp_am_lat:1:lat
put_lat:8:ucp_put_lat:1:lat
atomic_lat:8:ucp_fadd:1:lat
send_bw:1048576:ucp_am_bw:16:bw
put_bw:1048576:ucp_put_bw:16:bw
get_bw:1048576:ucp_get:16:bw
rpc_lat:64:ucp_am_lat:1:rtt
rpc_rate:64:ucp_am_bw:32:rate
rpc_rate_more:64:ucp_am_bw:32:rate
rpc_bulk:67108864:ucp_get:1:bulk
rpc_bulk_push:67108864:ucp_put_bw:1:bulk"

# Iterations and warm-up per transport and kind, the same for both tools.
iters_for() { # transport kind -> "N W"
    local n w
    case "$1:$2" in
    shm:lat | shm:rtt) n=100000 w=10000 ;;
    shm:bw) n=4000 w=400 ;;
    shm:rate) n=500000 w=50000 ;;
    shm:bulk) n=50 w=5 ;;
    tcp:lat | tcp:rtt) n=10000 w=1000 ;;
    tcp:bw) n=400 w=40 ;;
    tcp:rate) n=100000 w=10000 ;;
    tcp:bulk) n=20 w=2 ;;
    esac
    if [ "$QUICK" = 1 ]; then
        n=$((n / 4)) w=$((w / 4))
    fi
    echo "$n $w"
}

tls_for() {
    case "$1" in
    shm) echo "sm,self" ;;
    tcp) echo "tcp,self" ;;
    esac
}

# test -> 0 if --only takes it (groups: rpc, the rpc_ tests; core, the others)
selected() { only_selects "$1" rpc_ rpc core; }

# --- helpers -----------------------------------------------------------------
# The machine's load: the share of CPU time other processes used over one
# second. Both tools busy-poll on both of the machine's CPUs; anything else
# running turns microseconds into scheduler time slices.
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
    # PSI: share of the last 60 s in which some task waited for a CPU. After
    # the run it covers the run's last minute: both tools busy-poll on the
    # two CPUs, so anything above a few percent is someone else's work
    # taking turns with them.
    if [ -r /proc/pressure/cpu ]; then
        echo "# CPU pressure ($1, PSI some avg60): $(psi)%"
    fi
}

# rdmx-perf pair half: leaves the metric (p50 us or MB/s) in VAL. No
# command substitution: the server's pid must stay visible to cleanup.
run_rdmx() { # transport test size iters warmup window kind
    local tr=$1 test=$2 size=$3 n=$4 w=$5 win=$6 kind=$7
    local -a more=()
    if [ "$test" = rpc_rate_more ]; then
        test=rpc_rate more=(--batch)
    fi
    perf_pair "$tr" "$test" -s "$size" -n "$n" -w "$w" -W "$win" \
        --flush "$FLUSH" "${more[@]}"
    case "$kind" in
    lat | rtt) VAL=$(json_field p50_us "$PERF_LINE") ;; # rpc_lat: a round trip
    rate) VAL=$(json_field calls_per_s "$PERF_LINE") ;;
    *) VAL=$(json_field mb_per_s "$PERF_LINE") ;;
    esac
}

# ucx_perftest pair half: leaves the metric (p50 us or MB/s) in VAL.
run_ucx() { # transport errmode(0|1) test size iters warmup outstanding kind
    local tr=$1 err=$2 test=$3 size=$4 n=$5 w=$6 o=$7 kind=$8 line
    local -a env=(UCX_TLS="$(tls_for "$tr")") flags=(-z)
    if [ "$err" = 1 ]; then
        env+=(UCX_MM_ERROR_HANDLING=y)
        flags+=(-e)
    fi
    ucx_perftest_pair "${env[@]}" -- -t "$test" -s "$size" -n "$n" -w "$w" \
        -O "$o" -m host "${flags[@]}"
    line=$UCX_LINE
    case "$kind" in
    lat) VAL=$(awk -F, '{print $2}' <<<"$line") ;;
    rtt) VAL=$(awk -F, '{printf "%.4f\n", 2 * $2}' <<<"$line") ;;
    rate) VAL=$(awk -F, '{print $8}' <<<"$line") ;;
    *) VAL=$(awk -F, '{printf "%.2f\n", $6 * 1.048576}' <<<"$line") ;;
    esac
}

# ucx_am_rpc half (rpc_lat, rpc_rate): leaves p50 RTT us or calls/s in VAL.
# mode am: request/response by active messages; put: by one-sided writes
# into slots the other side polls (docs/RPC_RINGS.md).
run_amrpc() { # transport size iters warmup window kind mode
    local tr=$1 size=$2 n=$3 w=$4 win=$5 kind=$6 mode=$7 line
    local -a env=(UCX_TLS="$(tls_for "$tr")" UCX_MM_ERROR_HANDLING=y)
    if [ "$tr" = shm ]; then
        # (it connects through UCX's sockaddr manager, which needs tcp;
        # tcp kept out of the data path)
        env=(UCX_TLS="sm,self,tcp" UCX_MM_ERROR_HANDLING=y
             UCX_TCP_PUT_ENABLE=n)
    fi
    start_on_free_port as ucx_am_rpc env "${env[@]}" "$WORK/ucx_am_rpc" \
        -l @PORT@ -e -m "$mode"
    if ! env "${env[@]}" "$WORK/ucx_am_rpc" "127.0.0.1:$PORT" -e -m "$mode" \
        -t "$([ "$kind" = rtt ] && echo lat || echo rate)" -s "$size" \
        -n "$n" -w "$w" -W "$win" >"$WORK/ac.out" 2>"$WORK/ac.err"; then
        die "ucx_am_rpc -m $mode ($tr) failed: $(cat "$WORK/ac.err")"
    fi
    wait "$SERVER_PID" || true
    SERVER_PID=""
    line=$(grep '^ucx_am_rpc ' "$WORK/ac.out" | tail -1 || true)
    if [ "$kind" = rtt ]; then
        VAL=$(sed -n 's/.* p50_us=\([0-9.]*\).*/\1/p' <<<"$line")
    else
        VAL=$(sed -n 's/.* calls_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
    fi
}

# --- run ---------------------------------------------------------------------
bench_cc memcpy_bw -std=c11 ||
    die "cannot compile bench/memcpy_bw.c: $(cat "$WORK/memcpy_bw.cc")"
line_rtt_build
AMRPC=0
if bench_cc ucx_am_rpc -lucp -lucs; then
    AMRPC=1
else
    echo "# note: cannot compile bench/ucx_am_rpc.c (libucx-dev?); no am-rpc" \
        "reference" >&2
fi

ucx_version=$(ucx_version)
extra_env=$(extra_env RDMX_PERF)
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
        line_rtt_now >>"$WORK/line.$tr"
        while IFS=: read -r test size utest outst kind; do
            selected "$test" || continue
            read -r n w < <(iters_for "$tr" "$kind")
            win=$([ "$kind" = lat ] && echo 16 || echo "$outst")
            # rotate the order of the variants from round to round
            nv=3
            if [ "$AMRPC" = 1 ] && [ "$tr" = shm ] &&
                { [ "$kind" = rtt ] || [ "$kind" = rate ]; }; then
                nv=5
            fi
            for ((k = 0; k < nv; k++)); do
                v=$(((k + r) % nv))
                VAL=""
                case $v in
                0) run_rdmx "$tr" "$test" "$size" "$n" "$w" "$win" "$kind" ;;
                1) run_ucx "$tr" 1 "$utest" "$size" "$n" "$w" "$outst" \
                    "$kind" ;;
                2) run_ucx "$tr" 0 "$utest" "$size" "$n" "$w" "$outst" \
                    "$kind" ;;
                3) run_amrpc "$tr" "$size" "$n" "$w" "$outst" "$kind" am ;;
                4) run_amrpc "$tr" "$size" "$n" "$w" "$outst" "$kind" put ;;
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
best_of() { # kind file -> the best value over rounds: the lowest latency,
    # the highest rate or bandwidth
    case "$1" in
    lat | rtt) awk '{print $2}' "$2" | sort -g | head -1 ;;
    *) awk '{print $2}' "$2" | sort -g | tail -1 ;;
    esac
}
ratio_median() { # tr test variant -> median over rounds of rdmx/variant
    join "$WORK/$1.$2.0" "$WORK/$1.$2.$3" |
        awk '{printf "%.6g\n", $2 / $3}' | median
}
verdict() { # transport test ratio -> target status
    # The RPC targets: over shm rpc_lat <= 1.3 and rpc_rate >= 0.7; over
    # tcp both "within 1.1x": rpc_lat <= 1.1 and rpc_rate >= 1/1.1 = 0.91.
    awk -v tr="$1" -v t="$2" -v q="$3" 'BEGIN {
        if (t == "send_lat")
            print (q <= 1.2 ? "met (<=1.2)" : "MISSED (<=1.2)");
        else if (t == "rpc_lat" && tr == "tcp")
            print (q <= 1.1 ? "met (<=1.1)" : "MISSED (<=1.1)");
        else if (t == "rpc_lat")
            print (q <= 1.3 ? "met (<=1.3)" : "MISSED (<=1.3)");
        else if (t == "rpc_rate" && tr == "tcp")
            print (q >= 0.91 ? "met (>=0.91)" : "MISSED (>=0.91)");
        else if (t == "rpc_rate")
            print (q >= 0.7 ? "met (>=0.7)" : "MISSED (>=0.7)");
        else if (t == "put_bw" || t == "get_bw" || t == "rpc_bulk")
            print (q >= 0.9 ? "met (>=0.9)" : "MISSED (>=0.9)");
        else print "-" }'
}
metric_of() { # kind -> label
    case "$1" in
    lat) echo "p50 us" ;;
    rtt) echo "RTT us" ;;
    rate) echo "1/s" ;;
    *) echo "MB/s" ;;
    esac
}

echo
echo "ratio = median over rounds of rdmx/ucx_perftest in the same round."
echo "latency: p50 in us (one-way for the *_lat ping-pongs); lower is better,"
echo "  ratio < 1 = rdmx faster."
echo "bandwidth: MB/s (10^6 B/s); higher is better, ratio > 1 = rdmx faster."
echo "rpc_lat: p50 round trip of a blocking call (us) against 2 x ucp_am_lat's"
echo "  p50 one-way latency (ucx_perftest halves its round trips); lower is"
echo "  better."
echo "rpc_rate: calls/s (each a request and a response) against ucp_am_bw's"
echo "  one-way messages/s (its overall msgrate column); higher is better."
echo "rpc_rate_more: the same calls, each of a burst but its last with"
echo "  RDMX_RPC_MORE (a burst leaves as one message); no target is judged."
echo "rpc_bulk(_push): MB/s of one 64 MiB call at a time against ucp_get"
echo "  (ucp_put_bw) -O 1; higher is better."
echo "ucx -e: ucx_perftest with peer error handling, the mode rdmx uses;"
echo "ucx: ucx_perftest without it. Targets are judged against ucx -e."
echo "am-rpc: bench/ucx_am_rpc.c (request/response on bare UCX AM, -e) for"
echo "  rpc_lat (p50 RTT) and rpc_rate (calls/s), and rdmx's ratio to it."
echo "put-rpc (below the table, shm): the same by one-sided writes into"
echo "  polled slots (ucx_am_rpc -m put, docs/RPC_RINGS.md) against ucx -e."
for tr in $TRANSPORTS; do
    echo
    if [ "$tr" = shm ]; then
        echo "== shared memory (UCX_TLS=$(tls_for shm)); memcpy limit" \
            "(before/after): 1 MiB $(memcpy_of 1048576) MB/s," \
            "64 MiB $(memcpy_of 67108864) MB/s"
    else
        echo "== tcp loopback (UCX_TLS=$(tls_for tcp))"
    fi
    printf "%-13s %8s %-7s %10s %10s %7s %10s %7s %10s %7s  %s\n" test \
        size metric rdmx "ucx -e" ratio ucx ratio am-rpc ratio \
        "target (vs ucx -e)"
    while IFS=: read -r test size utest outst kind; do
        selected "$test" || continue
        [ -f "$WORK/$tr.$test.0" ] || continue
        m0=$(awk '{print $2}' "$WORK/$tr.$test.0" | median)
        m1=$(awk '{print $2}' "$WORK/$tr.$test.1" | median)
        m2=$(awk '{print $2}' "$WORK/$tr.$test.2" | median)
        q1=$(ratio_median "$tr" "$test" 1)
        q2=$(ratio_median "$tr" "$test" 2)
        metric=$(metric_of "$kind")
        if [ "$kind" = rate ]; then fmt="%10.0f"; else fmt="%10.3f"; fi
        if [ -f "$WORK/$tr.$test.3" ]; then
            m3=$(awk '{print $2}' "$WORK/$tr.$test.3" | median)
            q3=$(ratio_median "$tr" "$test" 3)
            ref=$(printf "$fmt %7.3f" "$m3" "$q3")
        else
            ref=$(printf "%10s %7s" - -)
        fi
        printf "%-13s %8s %-7s $fmt $fmt %7.3f $fmt %7.3f %s  %s\n" \
            "$test" "$size" "$metric" "$m0" "$m1" "$q1" "$m2" "$q2" "$ref" \
            "$(verdict "$tr" "$test" "$q1")"
    done <<<"$PAIRS"
    while IFS=: read -r test size utest outst kind; do
        selected "$test" || continue
        [ -f "$WORK/$tr.$test.4" ] || continue
        m4=$(awk '{print $2}' "$WORK/$tr.$test.4" | median)
        q4=$(join "$WORK/$tr.$test.4" "$WORK/$tr.$test.1" |
            awk '{printf "%.6g\n", $2 / $3}' | median)
        printf "put-rpc %-13s %s %s: %s, %.3f x ucx -e\n" "$test" "$size" \
            "$(metric_of "$kind")" "$m4" "$q4"
    done <<<"$PAIRS"
    # The host's fast regime on both sides (docs/PERFORMANCE.md, "The
    # host's regimes"): each side's best round, and the median of the
    # per-round ratios over the rounds in which both sides came within
    # 0.6 of their own best (the slow regime is 2.5-4x slower).
    # (shared memory only: over tcp a round trip moves ~1.4x with the
    # regime, within that margin, and the median over all rounds stands)
    if [ "$tr" = shm ]; then
        echo "fast regime, rdmx against ucx -e: best of $ROUNDS rounds each" \
            "(lowest latency, highest rate); median ratio of the rounds where" \
            "both were within 0.6 of their best:"
        while IFS=: read -r test size utest outst kind; do
            selected "$test" || continue
            [ -f "$WORK/$tr.$test.0" ] || continue
            b0=$(best_of "$kind" "$WORK/$tr.$test.0")
            b1=$(best_of "$kind" "$WORK/$tr.$test.1")
            qb=$(awk -v a="$b0" -v b="$b1" 'BEGIN {printf "%.3f", a / b}')
            both=$(join "$WORK/$tr.$test.0" "$WORK/$tr.$test.1" |
                awk -v b0="$b0" -v b1="$b1" -v k="$kind" '{
                    if (k == "lat" || k == "rtt")
                        fast = $2 * 0.6 <= b0 && $3 * 0.6 <= b1;
                    else
                        fast = $2 >= 0.6 * b0 && $3 >= 0.6 * b1;
                    if (fast) printf "%.6g\n", $2 / $3 }')
            nf=$(grep -c . <<<"$both" || true)
            if [ "$nf" -gt 0 ]; then
                qf=$(median <<<"$both")
                qf=$(printf "%.3f" "$qf")
                fv=$(verdict "$tr" "$test" "$qf")
            else
                qf=- fv="(no round fast on both sides)"
            fi
            printf "  %-13s %8s %-7s best %s / %s = %s  %s; both fast in %s" \
                "$test" "$size" "$(metric_of "$kind")" "$b0" "$b1" "$qb" \
                "$(verdict "$tr" "$test" "$qb")" "$nf"
            printf " rounds: %s  %s\n" "$qf" "$fv"
        done <<<"$PAIRS"
    fi
    echo "cache-line round trip between the CPUs at each round's start (ns):" \
        "$(tr '\n' ' ' <"$WORK/line.$tr")"
    echo "per round (rdmx/ucx -e/ucx[/am-rpc/put-rpc]):"
    while IFS=: read -r test size utest outst kind; do
        selected "$test" || continue
        [ -f "$WORK/$tr.$test.0" ] || continue
        printf "  %-13s" "$test"
        if [ -f "$WORK/$tr.$test.4" ]; then
            join "$WORK/$tr.$test.0" "$WORK/$tr.$test.1" |
                join - "$WORK/$tr.$test.2" | join - "$WORK/$tr.$test.3" |
                join - "$WORK/$tr.$test.4" |
                awk '{printf " %s/%s/%s/%s/%s", $2, $3, $4, $5, $6}
                     END {print ""}'
        else
            join "$WORK/$tr.$test.0" "$WORK/$tr.$test.1" |
                join - "$WORK/$tr.$test.2" |
                awk '{printf " %s/%s/%s", $2, $3, $4} END {print ""}'
        fi
    done <<<"$PAIRS"
done
echo
echo "# total $(($(date +%s) - start)) s"
