#!/usr/bin/env bash
# conn-setup.sh — the server's CPU time per connection setup: rdmx-kvd
# (over tcp and over shared memory) against memcached, interleaved, in one
# run. Target: rdmx-kvd's server CPU per connection <= 10x memcached's.
#
# A "connection" is: connect, one small request and its answer, close,
# done one after another by bench/conn_setup_client.c (compiled here with
# $CC against the static librdmx of the build directory):
#   rdmx       one rdmx context and worker for the whole run (as a real
#              client keeps them); per connection rdmx_kv_create() on the
#              one server + rdmx_kv_wait_ready() (connection and RPC
#              channel handshake), rdmx_kv_exists() of a key never stored
#              (answer: not found), rdmx_kv_destroy() (orderly close).
#   memcached  a TCP socket: connect(), "version\r\n", read the reply line,
#              close().
#
# Servers (all on 127.0.0.1, started here once, stopped at exit; the same
# processes serve every round, so growth of RSS or fds shows leaks):
#   memcached  memcached -t 2 -c 20000 -U 0 (64 MB default memory)
#   rdmx tcp   rdmx-kvd --workers 2 --memory 64m --max-connections 20000
#              --transport tcp (client: RDMX_TRANSPORT=tcp)
#   rdmx shm   the same with --transport shm (shared memory; rdmx's own
#              TCP bootstrap socket per connection), client
#              RDMX_TRANSPORT=shm
# UCX_NET_DEVICES=lo for rdmx. No address but 127.0.0.1 is ever used.
#
# Measured, per round and server: the server process's CPU time, utime +
# stime from /proc/PID/stat (fields 14 and 15, clock ticks of 1/CLK_TCK s,
# all threads, also exited ones), read before the clients start and again
# SETTLE s (default 0.5) after the last one exited, so that the server's
# share of the closes is in; divided by the connections that worked. Ticks
# are 10 ms coarse (CLK_TCK 100), so the table also gives the same from
# the threads' /proc/PID/task/*/schedstat run time (ns; live threads
# only). Each server's idle CPU over 1 s before the first round is printed
# beside it (it is inside every figure for SETTLE s). Also: wall time and
# connections/s of the clients, the client's open (connect + handshake)
# p50/p99/max, the server's VmRSS, open fds (/proc/PID/fd) and threads at
# start and after every round.
# Ratios rdmx/memcached: total server CPU over all rounds / total
# connections, for each (stat and schedstat), and the median of the
# per-round ratios (stat); met/MISSED against the 10x target on the total
# from /proc/PID/stat.
#
# Each round runs every server once with N connections (--conns), split
# over P client processes started together (--procs; P > 1 shows
# concurrency: the connections of one server then overlap); the server
# order rotates from round to round. Clients and servers share the
# machine's CPUs; CPU time, unlike wall time, does not count waiting for a
# CPU, but a busy machine still shows (other processes' load is printed).
#
# --perf records the rdmx-kvd processes with `perf record --call-graph
# dwarf` (199 Hz) through all rounds and prints each one's top symbols by
# self and by inclusive time at the end (perf's sampling adds a little to
# the measured CPU time; --keep keeps the perf.*.data files).
#
# memcached (Debian package) is installed with apt-get if missing (sudo
# when not root; apt-get update only if the install fails) unless
# --no-install.
#
# Usage: bench/conn-setup.sh [--rounds R] [--conns N] [--procs P]
#          [--transport shm|tcp|all] [--settle S] [--perf] [--keep]
#          [--no-install]
#   defaults: 3 rounds, 2000 connections per round and server, 1 process
# Environment: RDMX_BUILD (build directory, default build/: bin/rdmx-kvd
#   and lib/librdmx.a), RDMX_KVD, RDMX_LIB, CC, MEMCACHED.
set -euo pipefail

NAME=conn-setup
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

ROUNDS=3
CONNS=2000
PROCS=1
TRANSPORTS="tcp shm"
SETTLE=0.5
PERF=0
KEEP=0
INSTALL=1

while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) need_value "$@"; ROUNDS="$2"; shift ;;
    --conns) need_value "$@"; CONNS="$2"; shift ;;
    --procs) need_value "$@"; PROCS="$2"; shift ;;
    --transport) need_value "$@"; set_transports "$2" "tcp shm"; shift ;;
    --settle) need_value "$@"; SETTLE="$2"; shift ;;
    --perf) PERF=1 ;;
    --keep) KEEP=1 ;;
    --no-install) INSTALL=0 ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "unknown argument '$1' (try --help)" ;;
    esac
    shift
done
for v in "$ROUNDS" "$CONNS" "$PROCS"; do
    is_count "$v" || bad_arg "bad number '$v'"
done
[ "$PROCS" -le "$CONNS" ] || bad_arg "--procs larger than --conns"
awk -v s="$SETTLE" 'BEGIN { exit !(s + 0 >= 0 && s ~ /^[0-9.]+$/) }' ||
    bad_arg "bad --settle"

RDMX_KVD=${RDMX_KVD:-$RDMX_BUILD/bin/rdmx-kvd}
RDMX_LIB=${RDMX_LIB:-$RDMX_BUILD/lib/librdmx.a}
[ -x "$RDMX_KVD" ] || die "$RDMX_KVD not found; run make (or set RDMX_BUILD)"
[ -f "$RDMX_LIB" ] || die "$RDMX_LIB not found; run make (or set RDMX_BUILD)"
if [ "$PERF" = 1 ]; then
    command -v perf >/dev/null || die "--perf: perf not found (linux-perf)"
fi

# --- install memcached (Debian package) ----------------------------------------
if [ -z "${MEMCACHED:-}" ] && ! command -v memcached >/dev/null; then
    install_missing memcached
fi
MEMCACHED=${MEMCACHED:-$(command -v memcached || true)}
[ -n "$MEMCACHED" ] || die "memcached not found"

# --- work dir, processes, cleanup ----------------------------------------------
make_work_dir
loopback_ucx

# Open files: both servers are told 20000 connections (memcached refuses
# to start if it cannot raise its limit that far).
MAXCONN=20000
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$MAXCONN" ]; then
    ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
fi
nofile=$(ulimit -n)
if [ "$nofile" != unlimited ] && [ "$nofile" -lt "$MAXCONN" ]; then
    MAXCONN=$((nofile - 64))
    echo "# open-file limit $nofile: servers get -c/--max-connections" \
        "$MAXCONN" >&2
fi
CLK_TCK=$(getconf CLK_TCK)

# --- helpers -------------------------------------------------------------------
load_note() { # when -> a line on the machine's load
    local busy la
    busy=$(cpu_busy)
    la=$(cut -d' ' -f1-3 /proc/loadavg)
    if [ "$busy" -gt 10 ]; then
        echo "# WARNING ($1): other processes use ${busy}% of the CPUs" \
            "(load average $la); wall times will show it. Top users" \
            "(ps %CPU, average over each one's life; not this script's):"
        ps -eo pid=,pcpu=,comm= --sort=-pcpu |
            awk -v mine=" ${SERVER_PIDS[*]} $$ " \
                'index(mine, " " $1 " ") == 0 { print $2, $3 }' |
            head -3 | sed 's/^/#   /' || true
    else
        echo "# CPU use by other processes ($1): ${busy}%; load average $la"
    fi
}

# Server figures: "ticks sched_ns rss_kb fds threads" of process $1.
# ticks: utime + stime (fields 14, 15 of /proc/PID/stat; the command name
# in field 2 may hold spaces, so count from after its ')').
proc_snap() {
    local pid=$1 ticks ns rss fds thr
    ticks=$(sed 's/^.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')
    ns=$(cat /proc/"$pid"/task/*/schedstat 2>/dev/null |
        awk '{s += $1} END {printf "%.0f", s}')
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    thr=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
    fds=$(ls "/proc/$pid/fd" | wc -l)
    echo "$ticks $ns $rss $fds $thr"
}

kv_field() { # name line -> value of name=value
    sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"
}

# --- servers -------------------------------------------------------------------
pid_of() { # system -> server pid
    case "$1" in memcached) echo "$MC_PID" ;; *) local v="PID_$1"; echo "${!v}" ;; esac
}
label_of() {
    case "$1" in shm) echo "rdmx shm" ;; tcp) echo "rdmx tcp" ;; *) echo "$1" ;; esac
}

# --- one run: N connections to one server, over P processes --------------------
# Appends "round conns errors wall_s conns_per_s open_p50 open_p99 open_max
# dticks dns rss fds threads" to $WORK/res.<system>.
run_one() { # system round
    local sys=$1 r=$2 pid addr mode before after n p per extra tmo
    local line rc=0
    local -a envs=()
    pid=$(pid_of "$sys")
    if [ "$sys" = memcached ]; then
        mode=memcached
        addr=127.0.0.1:$MC_PORT
    else
        mode=rdmx
        local v="PORT_$sys"
        addr=127.0.0.1:${!v}
        envs=("RDMX_TRANSPORT=$sys")
    fi
    per=$((CONNS / PROCS))
    extra=$((CONNS % PROCS))
    tmo=$((120 + CONNS / 10))
    before=$(proc_snap "$pid")
    CPIDS=()
    for ((p = 0; p < PROCS; p++)); do
        n=$((per + (p < extra ? 1 : 0)))
        env "${envs[@]}" timeout "$tmo" "$WORK/conn_setup_client" "$mode" \
            "$addr" "$n" >"$WORK/client.$p.out" 2>"$WORK/client.$p.err" &
        CPIDS+=($!)
    done
    for ((p = 0; p < PROCS; p++)); do
        wait "${CPIDS[$p]}" || rc=$?
    done
    CPIDS=()
    sleep "$SETTLE"
    kill -0 "$pid" 2>/dev/null || die "$(label_of "$sys") server died:" \
        "$(tail -5 "$WORK/kvd.$sys.err" "$WORK/memcached.log" 2>/dev/null)"
    after=$(proc_snap "$pid")
    : >"$WORK/lines"
    for ((p = 0; p < PROCS; p++)); do
        line=$(grep '^conn_setup_client ' "$WORK/client.$p.out" || true)
        if [ -z "$line" ]; then
            die "$(label_of "$sys") client $p failed (exit $rc):" \
                "$(tail -5 "$WORK/client.$p.err")"
        fi
        echo "$line" >>"$WORK/lines"
        if [ -s "$WORK/client.$p.err" ]; then
            sed "s/^/$(label_of "$sys") round $((r + 1)) client $p: /" \
                "$WORK/client.$p.err" >>"$WORK/problems"
        fi
    done
    # sums over the processes; wall = the slowest process; open p50: the
    # median of the processes' p50, p99/max: the largest
    awk -v r="$r" -v b="$before" -v a="$after" -v tck="$CLK_TCK" '
        function f(name,   i, kv) {
            for (i = 2; i <= NF; i++) {
                split($i, kv, "=");
                if (kv[1] == name) return kv[2] + 0;
            }
            return 0;
        }
        { conns += f("conns"); errors += f("errors");
          if (f("wall_s") > wall) wall = f("wall_s");
          p50[NR] = f("open_us_p50");
          if (f("open_us_p99") > p99) p99 = f("open_us_p99");
          if (f("open_us_max") > mx) mx = f("open_us_max"); }
        END {
            n = NR;
            for (i = 2; i <= n; i++)       # insertion sort, any awk
                for (j = i; j > 1 && p50[j - 1] > p50[j]; j--) {
                    t = p50[j]; p50[j] = p50[j - 1]; p50[j - 1] = t;
                }
            med = (n % 2) ? p50[(n + 1) / 2] : (p50[n / 2] + p50[n / 2 + 1]) / 2;
            split(b, x, " "); split(a, y, " ");
            printf "%d %d %d %.4f %.1f %.1f %.1f %.1f %d %.0f %d %d %d\n",
                r, conns, errors, wall, (wall > 0 ? conns / wall : 0),
                med, p99, mx, y[1] - x[1], y[2] - x[2], y[3], y[4], y[5]
        }' "$WORK/lines" >>"$WORK/res.$sys"
}

# --- build the client, start the servers ---------------------------------------
cp "$RDMX_KVD" "$WORK/rdmx-kvd" || die "cannot copy $RDMX_KVD"
BIN_TIME=$(date -u -r "$RDMX_KVD" '+%Y-%m-%d %H:%M UTC')
RDMX_KVD=$WORK/rdmx-kvd
if pkg-config --exists ucx libcrypto lua5.4 libmicrohttpd libfabric 2>/dev/null; then
    read -r -a deplibs <<<"$(pkg-config --libs ucx libcrypto lua5.4 libmicrohttpd libfabric)"
else
    deplibs=(-lucp -luct -lucs -lucm -lcrypto -llua5.4 -lmicrohttpd -lfabric)
fi
bench_cc conn_setup_client "$RDMX_LIB" "${deplibs[@]}" -lpthread -ldl -lm ||
    die "cannot compile bench/conn_setup_client.c:" \
        "$(cat "$WORK/conn_setup_client.cc")"

SYSTEMS=(memcached)
start_memcached -c "$MAXCONN"
for tr in $TRANSPORTS; do
    start_kvd "$tr" --workers 2 --memory 64m --max-connections "$MAXCONN" \
        --transport "$tr"
    printf -v "PORT_$tr" '%s' "$KVD_PORT"
    printf -v "PID_$tr" '%s' "$KVD_PID"
    SYSTEMS+=("$tr")
done
nsys=${#SYSTEMS[@]}

if [ "$PERF" = 1 ]; then
    for tr in $TRANSPORTS; do
        v="PID_$tr"
        perf record -q --call-graph dwarf,8192 -F 199 -p "${!v}" \
            -o "$WORK/perf.$tr.data" \
            >"$WORK/perf.$tr.log" 2>&1 &
        PERF_PIDS+=($!)
    done
    sleep 1 # perf attaches
fi

# --- header --------------------------------------------------------------------
mc_version=$("$MEMCACHED" -V 2>/dev/null || true)
ucx_version=$(ucx_version)
extra_env=$(extra_env RDMX_KVD RDMX_LIB)
echo "# $NAME: server CPU per connection (connect, 1 request, close)," \
    "rdmx-kvd vs memcached; $ROUNDS round(s) x $CONNS connections per" \
    "server over $PROCS client process(es); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# $(nproc) CPUs shared by clients and servers; ${mc_version:-memcached ?}," \
    "${ucx_version:-UCX ?}; rdmx-kvd built $BIN_TIME, tree at $(tree_at)"
servers="memcached -t 2 -c $MAXCONN -U 0 on :$MC_PORT"
for tr in $TRANSPORTS; do
    v="PORT_$tr"
    servers="$servers; rdmx-kvd --workers 2 --memory 64m --max-connections $MAXCONN --transport $tr on :${!v}"
done
echo "# servers: $servers"
echo "# server CPU read ${SETTLE} s after the clients exit; CLK_TCK $CLK_TCK;" \
    "extra environment: ${extra_env:-none}$([ "$PERF" = 1 ] &&
        echo "; perf record running on rdmx-kvd")"

# idle CPU and start figures of every server
declare -A START IDLE
for sys in "${SYSTEMS[@]}"; do
    START[$sys]=$(proc_snap "$(pid_of "$sys")")
done
sleep 1
idle_line="# idle server CPU over 1 s (ms/s, schedstat):"
for sys in "${SYSTEMS[@]}"; do
    now=$(proc_snap "$(pid_of "$sys")")
    IDLE[$sys]=$(awk -v b="${START[$sys]}" -v a="$now" 'BEGIN {
        split(b, x, " "); split(a, y, " "); printf "%.2f", (y[2] - x[2]) / 1e6 }')
    idle_line="$idle_line $(label_of "$sys") ${IDLE[$sys]};"
    START[$sys]=$now
done
echo "${idle_line%;}"
load_note before

# --- rounds --------------------------------------------------------------------
start=$(date +%s)
for ((r = 0; r < ROUNDS; r++)); do
    t0=$(cpu_ticks)
    order=""
    for ((k = 0; k < nsys; k++)); do
        sys=${SYSTEMS[$(((k + r) % nsys))]}
        run_one "$sys" "$r"
        order="$order $(label_of "$sys" | tr ' ' '-')"
    done
    others=$(others_pct "$t0" "$(cpu_ticks)")
    echo "$others" >>"$WORK/others"
    echo "# round $((r + 1))/$ROUNDS done ($(($(date +%s) - start)) s; order" \
        "${order# }; other processes used ${others}% of the CPUs)" >&2
done
run_time=$(($(date +%s) - start))
load_note after
echo "# CPU used by other processes during each round: $(tr '\n' ' ' \
    <"$WORK/others" | sed 's/ $//; s/ /%, /g')%"

if [ "$PERF" = 1 ]; then
    for p in "${PERF_PIDS[@]}"; do
        kill -INT "$p" 2>/dev/null || true
    done
    for p in "${PERF_PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    PERF_PIDS=()
fi

# --- report --------------------------------------------------------------------
us_stat() { # ticks conns -> us per connection
    awk -v t="$1" -v n="$2" -v h="$CLK_TCK" \
        'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / h / n : 0) }'
}
us_ns() { # ns conns -> us per connection
    awk -v t="$1" -v n="$2" 'BEGIN { printf "%.1f", (n > 0 ? t / 1e3 / n : 0) }'
}

echo
echo "Per round (server CPU per connection: us; from /proc/PID/stat ticks and"
echo "from schedstat; open = connect + handshake at the client; RSS, fds and"
echo "threads of the server after the round):"
printf "%-5s %-9s %6s %4s %7s %8s %9s %9s %9s %8s %8s %9s %6s %4s %3s\n" \
    round system conns err wall_s conn/s open_p50 open_p99 open_max cpu_ms \
    us/conn us/c_sch RSS_kB fds thr
for ((r = 0; r < ROUNDS; r++)); do
    for sys in "${SYSTEMS[@]}"; do
        read -r _ conns errs wall cps p50 p99 mx dt dns rss fds thr \
            < <(awk -v r="$r" '$1 == r' "$WORK/res.$sys")
        printf "%-5s %-9s %6d %4d %7.3f %8.0f %9.1f %9.1f %9.1f %8.0f %8s %9s %6d %4d %3d\n" \
            "$((r + 1))" "$(label_of "$sys")" "$conns" "$errs" "$wall" "$cps" \
            "$p50" "$p99" "$mx" "$(awk -v t="$dt" -v h="$CLK_TCK" \
                'BEGIN { print t * 1000 / h }')" "$(us_stat "$dt" "$conns")" \
            "$(us_ns "$dns" "$conns")" "$rss" "$fds" "$thr"
    done
done

echo
echo "All rounds (server CPU over all rounds / connections that worked; RSS,"
echo "fds and threads: at start -> after the last round):"
printf "%-9s %7s %6s %9s %9s %9s %10s %20s %12s %9s\n" system conns errors \
    us/conn us/c_sch conn/s open_p50 "RSS kB" fds threads
declare -A TOT_T TOT_N TOT_C
for sys in "${SYSTEMS[@]}"; do
    read -r conns errs dt dns <<<"$(awk '{c += $2; e += $3; t += $9; n += $10}
        END {printf "%d %d %d %.0f\n", c, e, t, n}' "$WORK/res.$sys")"
    TOT_T[$sys]=$dt
    TOT_N[$sys]=$dns
    TOT_C[$sys]=$conns
    cps=$(awk '{print $5}' "$WORK/res.$sys" | median)
    p50=$(awk '{print $6}' "$WORK/res.$sys" | median)
    read -r _ _ rss0 fds0 thr0 <<<"${START[$sys]}"
    read -r rss1 fds1 thr1 <<<"$(tail -1 "$WORK/res.$sys" | awk '{print $11, $12, $13}')"
    printf "%-9s %7d %6d %9s %9s %9.0f %10.1f %20s %12s %9s\n" \
        "$(label_of "$sys")" "$conns" "$errs" "$(us_stat "$dt" "$conns")" \
        "$(us_ns "$dns" "$conns")" "$cps" "$p50" "$rss0 -> $rss1" \
        "$fds0 -> $fds1" "$thr0 -> $thr1"
done

echo
echo "Ratio rdmx/memcached of server CPU per connection (target <= 10):"
printf "%-9s %12s %12s %14s  %s\n" system "total(stat)" "total(sched)" \
    "median(round)" target
for tr in $TRANSPORTS; do
    q=$(awk -v a="${TOT_T[$tr]}" -v an="${TOT_C[$tr]}" \
        -v b="${TOT_T[memcached]}" -v bn="${TOT_C[memcached]}" 'BEGIN {
        if (an > 0 && bn > 0 && b > 0) printf "%.1f", (a / an) / (b / bn);
        else print "inf" }')
    qs=$(awk -v a="${TOT_N[$tr]}" -v an="${TOT_C[$tr]}" \
        -v b="${TOT_N[memcached]}" -v bn="${TOT_C[memcached]}" 'BEGIN {
        if (an > 0 && bn > 0 && b > 0) printf "%.1f", (a / an) / (b / bn);
        else print "inf" }')
    # joined by round: the rdmx run's fields at 2..13, memcached's at 14..25
    qm=$(join <(sort -k1,1 "$WORK/res.$tr") \
        <(sort -k1,1 "$WORK/res.memcached") | awk '{
        a = ($2 > 0) ? $9 / $2 : 0; b = ($14 > 0) ? $21 / $14 : 0;
        if (b > 0) printf "%.6g\n", a / b; else print "inf" }' | median)
    ok=$(awk -v q="$q" 'BEGIN { print (q != "inf" && q + 0 <= 10) }')
    printf "%-9s %12s %12s %14.1f  %s\n" "$(label_of "$tr")" "$q" "$qs" \
        "$qm" "$([ "$ok" = 1 ] && echo "met (<= 10)" || echo "MISSED (<= 10)")"
done
if awk '{ if ($9 < 3) f = 1 } END { exit !f }' "$WORK/res.memcached"; then
    echo "# note: memcached used < 3 ticks in some round; the stat figures are"
    echo "# coarse there (use the schedstat column or more --conns)"
fi

echo
echo "# sockets in TIME-WAIT now: $(ss -Htan state time-wait 2>/dev/null |
    wc -l); client runs: $run_time s in total"
if [ -s "$WORK/problems" ]; then
    echo "Client messages (stderr):"
    sort "$WORK/problems" | uniq -c | sort -rn | head -20 |
        sed 's/^/  /' || true
fi
for tr in $TRANSPORTS; do
    if [ -s "$WORK/kvd.$tr.err" ]; then
        echo "rdmx-kvd ($tr) stderr ($(wc -l <"$WORK/kvd.$tr.err") lines; most frequent):"
        sed 's/[0-9]\{2,\}/N/g' "$WORK/kvd.$tr.err" | sort | uniq -c |
            sort -rn | head -10 | sed 's/^/  /' || true
    fi
done
if [ -s "$WORK/memcached.log" ]; then
    echo "memcached output:"
    head -10 "$WORK/memcached.log" | sed 's/^/  /'
fi

if [ "$PERF" = 1 ]; then
    for tr in $TRANSPORTS; do
        echo
        if [ ! -s "$WORK/perf.$tr.data" ]; then
            echo "perf: nothing recorded for rdmx-kvd ($tr):" \
                "$(tail -2 "$WORK/perf.$tr.log")"
            continue
        fi
        echo "perf: rdmx-kvd ($tr), top symbols by self time:"
        perf report -i "$WORK/perf.$tr.data" --no-children --stdio \
            --sort dso,symbol -g none --percent-limit 0.5 2>/dev/null |
            grep -v -e '^#' -e '^$' | sed 's/ *- *- *$//' | head -15 |
            sed 's/^/  /' || true
        echo "perf: rdmx-kvd ($tr), inclusive time (children) >= 5%:"
        perf report -i "$WORK/perf.$tr.data" --children --stdio \
            --sort dso,symbol -g none --percent-limit 5 2>/dev/null |
            grep -v -e '^#' -e '^$' | sed 's/ *- *- *$//' | head -40 |
            sed 's/^/  /' || true
    done
fi
