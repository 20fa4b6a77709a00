#!/usr/bin/env bash
# vs-memcached.sh — rdmx-kvd against memcached and Redis on this machine,
# the same workload, interleaved, in one run.
#
# Systems (all servers on 127.0.0.1, started here, stopped at exit):
#   memcached  memcached -t 2 -m 2048 -I 2m (text protocol over tcp; -I
#              twice the largest size when --sizes goes above 1m)
#   redis      redis-server --save "" --appendonly no (one thread, tcp)
#   rdmx shm   rdmx-kvd --workers 2 --memory 1g (--max-value: the largest
#              size, at least 1m), RDMX_TRANSPORT=shm for the
#              server and the client (shared memory; tcp only for setup)
#   rdmx tcp   the same with RDMX_TRANSPORT=tcp
# UCX_NET_DEVICES=lo for rdmx. No address but 127.0.0.1 is ever used.
#
# Workload, the same for every system: `rdmx-kv bench` for rdmx;
# bench/kv_peer_driver.c (compiled here with $CC, libmemcached and hiredis)
# for memcached and Redis, which is rdmx-kv bench's loop: N client threads,
# each with its own connection and ONE request in flight (blocking calls),
# keys "bench:K" uniform over the key space, values of SIZE bytes; for GET
# one thread first stores every key (not timed), then every thread reads
# every key once (not timed; --warm-up of both drivers: a client measured
# after it has run a while; over shm that gives rdmx's client its mapping
# of the store's pages, which it otherwise faults in on first use, docs/KV.md;
# --cold: no such pass), then all threads run for
# --seconds; every operation is timed (clock_gettime). Reported: ops/s, MB/s
# (10^6 B/s of values) and p50/p99 latency over all operations.
# Cells: GET and SET x 100 B, 4 KiB, 1 MiB x 1 and 8 clients (--sizes takes
# any up to 64m). Key space: 10,000 keys below 96 KiB, 1,000 from 96 KiB,
# 100 from 1 MiB, 4 from 16 MiB: at most ~640 MiB of values, so every value
# fits every server (rdmx-kvd has 1 GiB). rdmx-kv runs with
# --zero-copy for 4 KiB and 1 MiB (registered client buffers: a 1 MiB SET
# is RDMA-read from it; a GET over shm copies values above 512 B out of
# rdmx-kvd's store, which the client maps, into any buffer: docs/KV.md,
# "Mapped GETs over shared memory"; over tcp GETs are answered inline);
# --zero-copy on|off changes that.
#
# The machine has 2 CPUs: client threads and server threads share them, for
# every system alike (memcached 2 worker threads, rdmx-kvd 2 workers, Redis
# 1 thread). rdmx's clients and server workers poll before they sleep
# (client: 50 us, server: 100 us), memcached's and Redis's block in the
# kernel at once.
#
# Each round runs every cell once; within a cell the systems run back to
# back, their order rotated from cell to cell and round to round. A ratio is
# the median over rounds of the per-round ratio rdmx/peer (throughput:
# > 1 = rdmx faster; p99: < 1 = rdmx lower). Throughput ratios are the same
# for ops/s and MB/s (every operation moves SIZE bytes; a run with errors or
# misses stops the script). At the end: met/MISSED per target, against
# memcached (same run, same client count):
#   GET 100 B and 4 KiB, 1 client: ops/s >= 10x over shm, >= 1.5x over tcp;
#     p99 below memcached's (shm and tcp)
#   GET 4 KiB, 8 clients: ops/s >= 4x over shm
#   GET and SET from 64 KiB to 64 MiB, every size run (1 and 8 clients):
#     MB/s >= 4x over shm, >= 1x over tcp
# Redis is reported beside memcached (no targets).
#
# Peers are Debian packages: memcached, redis-server, libmemcached-dev,
# libhiredis-dev (and redis-tools, libmemcached-tools for manual checks);
# missing ones are installed with apt-get (sudo when not root; apt-get
# update only if an install fails) unless --no-install.
#
# Usage: bench/vs-memcached.sh [--quick] [--rounds N] [--seconds S]
#          [--peers memcached,redis] [--transport shm|tcp|all]
#          [--ops get,set] [--sizes 100,4k,1m] [--clients 1,8]
#          [--zero-copy auto|on|off] [--cold] [--keep] [--no-install]
#   --quick: 1 round of 1 s runs (default: 3 rounds of 3 s)
#   --cold: GET cells without the warm-up pass
#   bench/vs-redis.sh is this script with --peers redis (Redis only).
# Environment: RDMX_KV, RDMX_KVD (default build/bin/), CC, MEMCACHED,
#   REDIS_SERVER.
set -euo pipefail

NAME=${VS_NAME:-vs-memcached}
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

ROUNDS=""
SECONDS_RUN=""
QUICK=0
PEERS="memcached,redis"
TRANSPORTS="shm tcp"
OPS="get,set"
SIZES="100,4k,1m"
CLIENTS="1,8"
ZC=auto
WARM=1
KEEP=0
INSTALL=1

while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --rounds) need_value "$@"; ROUNDS="$2"; shift ;;
    --seconds) need_value "$@"; SECONDS_RUN="$2"; shift ;;
    --peers) need_value "$@"; PEERS="$2"; shift ;;
    --transport) need_value "$@"; set_transports "$2" "shm tcp"; shift ;;
    --ops) need_value "$@"; OPS="$2"; shift ;;
    --sizes) need_value "$@"; SIZES="$2"; shift ;;
    --clients) need_value "$@"; CLIENTS="$2"; shift ;;
    --zero-copy)
        case "${2:-}" in auto | on | off) ZC="$2" ;;
        *) bad_arg "--zero-copy auto|on|off" ;; esac
        shift ;;
    --cold) WARM=0 ;;
    --keep) KEEP=1 ;;
    --no-install) INSTALL=0 ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "unknown argument '$1' (try --help)" ;;
    esac
    shift
done
set_rounds 1 3
[ -n "$SECONDS_RUN" ] || SECONDS_RUN=$([ "$QUICK" = 1 ] && echo 1 || echo 3)
awk -v s="$SECONDS_RUN" 'BEGIN { exit !(s + 0 > 0) }' ||
    bad_arg "bad --seconds"
HAVE_MC=0
HAVE_REDIS=0
for p in ${PEERS//,/ }; do
    case "$p" in
    memcached) HAVE_MC=1 ;;
    redis) HAVE_REDIS=1 ;;
    *) bad_arg "--peers: memcached and/or redis" ;;
    esac
done
for o in ${OPS//,/ }; do
    case "$o" in get | set) ;; *) bad_arg "--ops: get and/or set" ;; esac
done
for c in ${CLIENTS//,/ }; do
    is_count "$c" || bad_arg "bad --clients '$c'"
done

size_label() { # bytes -> 100B | 4KiB | 1MiB
    local b=$1
    if [ $((b % 1048576)) = 0 ]; then echo "$((b / 1048576))MiB"
    elif [ $((b % 1024)) = 0 ]; then echo "$((b / 1024))KiB"
    else echo "${b}B"; fi
}
size_list "$SIZES" 67108864 "sizes up to 64m"
MAX_SIZE=0
for b in $SIZE_LIST; do [ "$b" -gt "$MAX_SIZE" ] && MAX_SIZE=$b; done
# the servers' largest value: 1m unless a size is larger; memcached's -I
# (its item: key and header too) twice that
MAX_VALUE=$((MAX_SIZE > 1048576 ? MAX_SIZE : 1048576))
MC_ITEM="$((MAX_VALUE * 2 / 1048576))m"
# Memory: 2 GiB for memcached, 1 GiB for rdmx-kvd; 4 GiB each with values
# above 1 MiB (every cell's items stay stored: the smaller cells' values
# would otherwise crowd out the 64 MiB ones, and GETs would miss)
if [ "$MAX_VALUE" -gt 1048576 ]; then MC_MEM=4096 KVD_MEM=4g
else MC_MEM=2048 KVD_MEM=1g; fi

RDMX_KV=${RDMX_KV:-$RDMX_BUILD/bin/rdmx-kv}
RDMX_KVD=${RDMX_KVD:-$RDMX_BUILD/bin/rdmx-kvd}
[ -x "$RDMX_KV" ] || die "$RDMX_KV not found; run make"
[ -x "$RDMX_KVD" ] || die "$RDMX_KVD not found; run make"

# --- install the peers (Debian packages) -------------------------------------
pkgs=()
[ "$HAVE_MC" = 1 ] && pkgs+=(memcached libmemcached-dev libmemcached-tools)
[ "$HAVE_REDIS" = 1 ] && pkgs+=(redis-server redis-tools libhiredis-dev)
install_missing "${pkgs[@]}"
MEMCACHED=${MEMCACHED:-$(command -v memcached || true)}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
[ "$HAVE_MC" = 0 ] || [ -n "$MEMCACHED" ] || die "memcached not found"
[ "$HAVE_REDIS" = 0 ] || [ -n "$REDIS_SERVER" ] || die "redis-server not found"

# --- work dir, processes, cleanup --------------------------------------------
make_work_dir
loopback_ucx

# --- helpers -----------------------------------------------------------------
load_note() { # when -> a line on the machine's load
    local busy la
    busy=$(cpu_busy)
    la=$(cut -d' ' -f1-3 /proc/loadavg)
    if [ "$busy" -gt 10 ]; then
        echo "# WARNING ($1): other processes use ${busy}% of the CPUs" \
            "(load average $la); figures will show it. Top users:"
        ps -eo pcpu=,comm= --sort=-pcpu | head -3 | sed 's/^/#   /'
    else
        echo "# CPU use by other processes ($1): ${busy}%; load average $la"
    fi
}

# --- servers -----------------------------------------------------------------
start_redis() {
    for _ in 1 2 3; do
        REDIS_PORT=$(free_port)
        "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" \
            --protected-mode yes --save "" --appendonly no \
            --daemonize no --dir "$WORK" --logfile "$WORK/redis.log" \
            --maxmemory 0 >/dev/null 2>&1 &
        SERVER_PID=$!
        if wait_listen "$REDIS_PORT" "$SERVER_PID"; then
            SERVER_PIDS+=("$SERVER_PID")
            SERVER_PID=""
            return 0
        fi
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    done
    die "redis-server did not start: $(cat "$WORK/redis.log")"
}

# --- one run: leaves "ops_per_s mb_per_s p50_us p99_us" in RES ----------------
keys_for() { # bytes -> key space
    if [ "$1" -ge 16777216 ]; then echo 4
    elif [ "$1" -ge 1048576 ]; then echo 100
    elif [ "$1" -ge 98304 ]; then echo 1000
    else echo 10000; fi
}

check_line() { # system line err-file
    local ops errors misses
    [ -n "$2" ] || die "$1: no result: $(tail -5 "$3")"
    ops=$(json_field ops "$2")
    errors=$(json_field errors "$2")
    misses=$(json_field misses "$2")
    [ "${ops:-0}" -gt 0 ] || die "$1: no operation done: $2"
    [ "${errors:-1}" = 0 ] && [ "${misses:-1}" = 0 ] ||
        die "$1: errors or misses: $2 $(tail -3 "$3")"
}

run_one() { # system op bytes clients
    local sys=$1 op=$2 bytes=$3 n=$4 keys line tmo
    local -a zc=() warm=()
    keys=$(keys_for "$bytes")
    [ "$WARM" = 1 ] && [ "$op" = get ] && warm=(--warm-up)
    tmo=$(awk -v s="$SECONDS_RUN" 'BEGIN { printf "%d", s + 120 }')
    case "$sys" in
    memcached | redis)
        local srv
        if [ "$sys" = memcached ]; then srv=127.0.0.1:$MC_PORT
        else srv=127.0.0.1:$REDIS_PORT; fi
        timeout "$tmo" "$WORK/kv_peer_driver" --system "$sys" --server "$srv" \
            --op "$op" --size "$bytes" --keys "$keys" --threads "$n" \
            --seconds "$SECONDS_RUN" "${warm[@]}" --json \
            >"$WORK/run.out" 2>"$WORK/run.err" ||
            die "$sys $op $bytes x $n failed: $(tail -5 "$WORK/run.err")"
        ;;
    shm | tcp)
        local port_var="KVD_PORT_$sys"
        case "$ZC" in
        on) zc=(--zero-copy) ;;
        auto) [ "$bytes" -ge 4096 ] && zc=(--zero-copy) ;;
        esac
        RDMX_TRANSPORT=$sys timeout "$tmo" "$RDMX_KV" \
            --servers "127.0.0.1:${!port_var}" --timeout 30000 bench \
            --op "$op" --size "$bytes" --keys "$keys" --threads "$n" \
            --seconds "$SECONDS_RUN" "${zc[@]}" "${warm[@]}" --json \
            >"$WORK/run.out" 2>"$WORK/run.err" ||
            die "rdmx $sys $op $bytes x $n failed: $(tail -5 "$WORK/run.err")"
        ;;
    esac
    line=$(grep '^{' "$WORK/run.out" | tail -1 || true)
    check_line "$sys" "$line" "$WORK/run.err"
    RES="$(json_field ops_per_s "$line") $(json_field mb_per_s "$line")"
    RES="$RES $(json_field p50_us "$line") $(json_field p99_us "$line")"
}

# --- run ---------------------------------------------------------------------
# Private copies of the binaries (statically linked with librdmx): a `make`
# in the same tree during the run must not replace them under it.
BIN_TIME=$(date -u -r "$RDMX_KV" '+%Y-%m-%d %H:%M UTC')
cp "$RDMX_KV" "$WORK/rdmx-kv" && cp "$RDMX_KVD" "$WORK/rdmx-kvd" ||
    die "cannot copy the rdmx binaries"
RDMX_KV=$WORK/rdmx-kv
RDMX_KVD=$WORK/rdmx-kvd
libs=()
defs=()
if [ "$HAVE_MC" = 1 ]; then libs+=(-lmemcached); else defs+=(-DNO_MEMCACHED); fi
if [ "$HAVE_REDIS" = 1 ]; then libs+=(-lhiredis); else defs+=(-DNO_HIREDIS); fi
bench_cc kv_peer_driver "${defs[@]}" "${libs[@]}" -lpthread ||
    die "cannot compile bench/kv_peer_driver.c:" \
        "$(cat "$WORK/kv_peer_driver.cc")"

SYSTEMS=()
if [ "$HAVE_MC" = 1 ]; then
    start_memcached -m "$MC_MEM" -I "$MC_ITEM" -c 1024
    SYSTEMS+=(memcached)
fi
[ "$HAVE_REDIS" = 1 ] && { start_redis; SYSTEMS+=(redis); }
for tr in $TRANSPORTS; do
    # registering 1 GiB takes seconds when busy
    RDMX_TRANSPORT=$tr start_kvd "$tr" --workers 2 --memory "$KVD_MEM" \
        --max-value "$MAX_VALUE"
    printf -v "KVD_PORT_$tr" '%s' "$KVD_PORT"
    SYSTEMS+=("$tr")
done

CELLS=()
for op in ${OPS//,/ }; do
    for b in $SIZE_LIST; do
        for n in ${CLIENTS//,/ }; do
            CELLS+=("$op:$b:$n")
        done
    done
done

mc_version=$([ "$HAVE_MC" = 1 ] && "$MEMCACHED" -V 2>/dev/null || true)
redis_version=""
[ "$HAVE_REDIS" = 1 ] && redis_version=$("$REDIS_SERVER" --version \
    2>/dev/null | sed -n 's/.* v=\([^ ]*\).*/Redis \1/p' || true)
ucx_version=$(ucx_version)
extra_env=$(extra_env RDMX_KV RDMX_KVD)
echo "# $NAME: rdmx-kvd vs ${PEERS//,/ and }, $ROUNDS round(s) of" \
    "${SECONDS_RUN} s runs$([ "$QUICK" = 1 ] && echo " (quick)")," \
    "$(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# $(nproc) CPUs shared by clients and servers;" \
    "${mc_version:+$mc_version, }${redis_version:+$redis_version, }${ucx_version:-UCX ?};" \
    "rdmx binaries built $BIN_TIME, tree at $(tree_at)"
servers=""
[ "$HAVE_MC" = 1 ] &&
    servers="memcached -t 2 -m $MC_MEM -I $MC_ITEM on :$MC_PORT; "
[ "$HAVE_REDIS" = 1 ] &&
    servers="${servers}redis-server (1 thread, no persistence) on :$REDIS_PORT; "
for tr in $TRANSPORTS; do
    v="KVD_PORT_$tr"
    servers="${servers}rdmx-kvd --workers 2 --memory $KVD_MEM --max-value $MAX_VALUE ($tr) on :${!v}; "
done
echo "# servers: ${servers%; }"
echo "# clients: rdmx-kv bench ($( [ "$ZC" = auto ] &&
    echo "--zero-copy for >= 4 KiB" || echo "--zero-copy $ZC"));" \
    "bench/kv_peer_driver.c (libmemcached text protocol / hiredis) for the" \
    "peers; 1 request in flight per client thread"
echo "# GET cells: $( [ "$WARM" = 1 ] &&
    echo "every client thread first reads every key once, not timed (--warm-up)" ||
    echo "timed from each client's first request (--cold)")"
echo "# extra environment: ${extra_env:-none}"
line_rtt_build
load_note before
start=$(date +%s)
nsys=${#SYSTEMS[@]}
ncell=${#CELLS[@]}
for ((r = 0; r < ROUNDS; r++)); do
    line_rtt_now >>"$WORK/line"
    t0=$(cpu_ticks)
    for ((c = 0; c < ncell; c++)); do
        IFS=: read -r op b n <<<"${CELLS[$c]}"
        for ((k = 0; k < nsys; k++)); do
            sys=${SYSTEMS[$(((k + c + r) % nsys))]}
            run_one "$sys" "$op" "$b" "$n"
            printf "%03d %s\n" "$r" "$RES" >>"$WORK/res.$op.$b.$n.$sys"
        done
    done
    others=$(others_pct "$t0" "$(cpu_ticks)")
    echo "$others" >>"$WORK/others"
    echo "# round $((r + 1))/$ROUNDS done ($(($(date +%s) - start)) s;" \
        "other processes used ${others}% of the CPUs)" >&2
done
load_note after
echo "# CPU used by other processes during each round: $(tr '\n' ' ' \
    <"$WORK/others" | sed 's/ $//; s/ /%, /g')%"
echo "# cache-line round trip between the CPUs at each round's start:" \
    "$(tr '\n' ' ' <"$WORK/line" | sed 's/ $//; s/ /, /g') ns" \
    "(docs/PERFORMANCE.md, \"The host's regimes\")"

# --- report ------------------------------------------------------------------
col() { # file column(2=ops 3=MB/s 4=p50 5=p99) -> median
    awk -v c="$1" '{print $c}' "$2" | median
}
# median over rounds of per-round ratio: rdmx/peer in column c
ratio() { # rdmx-file peer-file column
    join "$1" "$2" | awk -v c="$3" '{ k = NF / 2; a = $(c); b = $(c + 4);
        if (b > 0) printf "%.6g\n", a / b }' | median
}
label_of() {
    case "$1" in shm) echo "rdmx shm" ;; tcp) echo "rdmx tcp" ;; *) echo "$1" ;; esac
}

echo
echo "Figures: median over rounds. ops/s and MB/s (10^6 B/s): higher is"
echo "better; p50/p99 latency of one operation in us: lower is better."
printf "%-4s %-6s %3s  %-9s %10s %9s %9s %9s\n" op size cl system ops/s \
    MB/s p50_us p99_us
for cell in "${CELLS[@]}"; do
    IFS=: read -r op b n <<<"$cell"
    for sys in "${SYSTEMS[@]}"; do
        f="$WORK/res.$op.$b.$n.$sys"
        printf "%-4s %-6s %3s  %-9s %10.0f %9.1f %9.2f %9.2f\n" "$op" \
            "$(size_label "$b")" "$n" "$(label_of "$sys")" "$(col 2 "$f")" \
            "$(col 3 "$f")" "$(col 4 "$f")" "$(col 5 "$f")"
    done
done

PEER_LIST=()
[ "$HAVE_MC" = 1 ] && PEER_LIST+=(memcached)
[ "$HAVE_REDIS" = 1 ] && PEER_LIST+=(redis)
short() { case "$1" in memcached) echo mc ;; redis) echo redis ;; esac; }
echo
echo "Ratios rdmx/peer: median over rounds of the per-round ratio."
echo "thr = ops/s (= MB/s) ratio, > 1: rdmx faster; p99 = p99 ratio, < 1:"
echo "rdmx's tail lower."
hdr=$(printf "%-4s %-6s %3s " op size cl)
for tr in $TRANSPORTS; do
    for p in "${PEER_LIST[@]}"; do
        hdr="$hdr$(printf " %14s %14s" "thr $tr/$(short "$p")" \
            "p99 $tr/$(short "$p")")"
    done
done
echo "$hdr"
for cell in "${CELLS[@]}"; do
    IFS=: read -r op b n <<<"$cell"
    line=$(printf "%-4s %-6s %3s " "$op" "$(size_label "$b")" "$n")
    for tr in $TRANSPORTS; do
        for p in "${PEER_LIST[@]}"; do
            fr="$WORK/res.$op.$b.$n.$tr"
            fp="$WORK/res.$op.$b.$n.$p"
            line="$line$(printf " %14.2f %14.2f" "$(ratio "$fr" "$fp" 2)" \
                "$(ratio "$fr" "$fp" 5)")"
        done
    done
    echo "$line"
done

echo
echo "Per round (ops/s; p99 us), in run order of systems:"
for cell in "${CELLS[@]}"; do
    IFS=: read -r op b n <<<"$cell"
    printf "  %-4s %-6s %3s" "$op" "$(size_label "$b")" "$n"
    for sys in "${SYSTEMS[@]}"; do
        printf "  %s:" "$(label_of "$sys" | tr ' ' '-')"
        awk '{printf " %.0f;%.0f", $2, $5}' "$WORK/res.$op.$b.$n.$sys"
    done
    echo
done

# --- targets -----------------------------------------------------------------
if [ "$HAVE_MC" = 1 ]; then
    # What a value that crosses shared memory in one memcpy can reach: the
    # machine's memcpy bandwidth for the cell's copies (bench/memcpy_bw.c:
    # as many threads as the cell's clients, taking turns when they
    # outnumber the CPUs, each copy from a random value of a source as
    # large as the cell's key space) over memcached's MB/s.
    have_bounds=0
    if [[ " $TRANSPORTS " == *" shm "* ]]; then
        for b in $SIZE_LIST; do [ "$b" -ge 65536 ] && have_bounds=1; done
    fi
    if [ "$have_bounds" = 1 ]; then
        bench_cc memcpy_bw -std=c11 -pthread ||
            die "cannot compile bench/memcpy_bw.c: $(cat "$WORK/memcpy_bw.cc")"
        for b in $SIZE_LIST; do
            [ "$b" -ge 65536 ] || continue
            for n in ${CLIENTS//,/ }; do
                turns=()
                [ "$n" -gt "$(nproc)" ] && turns=(--turns)
                "$WORK/memcpy_bw" --threads "$n" \
                    --span "$(($(keys_for "$b") * b))" "${turns[@]}" "$b" \
                    >"$WORK/memcpy.$b.$n"
            done
        done
    fi
    memcpy_bound() { # bytes clients memcached-file -> memcpy / memcached
        local m p
        m=$(sed -n "s/^bytes=$1 .*median_mb_s=\([0-9.]*\).*/\1/p" \
            "$WORK/memcpy.$1.$2" 2>/dev/null)
        p=$(awk '{print $3}' "$3" | median)
        [ -n "$m" ] && awk -v m="$m" -v p="$p" \
            'BEGIN { if (p > 0) printf "%.2f", m / p }'
    }
    echo
    echo "Targets (against memcached, same run, same client count; for shm"
    echo "GET MB/s, bound: the machine's memcpy MB/s for the cell's copies (as"
    echo "many threads as clients, taking turns beyond the CPUs, from random"
    echo "values of the key space) over memcached's, the most a one-copy"
    echo "transfer can reach):"
    target() { # op bytes clients tr column(2 thr, 3 MB/s, 5 p99) bound what
        local op=$1 b=$2 n=$3 tr=$4 c=$5 bound=$6 what=$7 fr fp q ok cmp mb
        local extra=""
        fr="$WORK/res.$op.$b.$n.$tr"
        fp="$WORK/res.$op.$b.$n.memcached"
        # cells left out by --ops/--sizes/--clients/--transport: no line
        [ -f "$fr" ] && [ -f "$fp" ] || return 0
        q=$(ratio "$fr" "$fp" "$c")
        # (GETs only: a SET's value goes into rdmx-kvd's store around the
        # cache from 16 KiB, which memcpy's plain stores do not bound)
        if [ "$tr" = shm ] && [ "$c" = 3 ] && [ "$op" = get ]; then
            mb=$(memcpy_bound "$b" "$n" "$fp")
            [ -n "$mb" ] && extra=" bound $mb"
        fi
        if [ "$c" = 5 ]; then # p99: lower is better
            cmp="<"
            ok=$(awk -v q="$q" -v t="$bound" 'BEGIN { print (q < t) }')
        else
            cmp=">="
            ok=$(awk -v q="$q" -v t="$bound" 'BEGIN { print (q >= t) }')
        fi
        printf "  %-52s %6.2f  %s (%s %s)%s\n" "$what" "$q" \
            "$([ "$ok" = 1 ] && echo met || echo MISSED)" "$cmp" "$bound" \
            "$extra"
    }
    for b in 100 4096; do
        l=$(size_label "$b")
        target get "$b" 1 shm 2 10 "GET $l, 1 client, ops/s shm/mc"
        target get "$b" 1 tcp 2 1.5 "GET $l, 1 client, ops/s tcp/mc"
        target get "$b" 1 shm 5 1 "GET $l, 1 client, p99 shm/mc"
        target get "$b" 1 tcp 5 1 "GET $l, 1 client, p99 tcp/mc"
    done
    target get 4096 8 shm 2 4 "GET 4KiB, 8 clients, ops/s shm/mc"
    for op in get set; do
        OP=$(tr a-z A-Z <<<"$op")
        for b in $SIZE_LIST; do
            [ "$b" -ge 65536 ] || continue
            l=$(size_label "$b")
            for n in 1 8; do
                target "$op" "$b" "$n" shm 3 4 \
                    "$OP $l, $n client(s), MB/s shm/mc"
                target "$op" "$b" "$n" tcp 3 1 \
                    "$OP $l, $n client(s), MB/s tcp/mc"
            done
        done
    done
fi
echo
echo "# total $(($(date +%s) - start)) s"
