# bench/lib.sh — what the bench scripts share. Each script sets NAME (its
# name in messages and in its work directory's name) and sources this file
# right after `set -euo pipefail`:
#
#   NAME=vs-ucx
#   . "$(dirname "$0")/lib.sh"
#
# Then, in order of use:
#   usage                   the script's header comment, as --help prints it
#   die, bad_arg            "NAME: message" on stderr, exit 1 (failure) or
#                           2 (bad command line)
#   need_value, is_count, set_transports, set_rounds, size_bytes,
#   size_list               checks of option values
#   only_selects            --only ROW,GROUP,...
#   ROOT, RDMX_BUILD, CC    the tree, the build directory (environment
#                           RDMX_BUILD, default build/), the C compiler
#   bench_cc SRC FLAG...    compile bench/SRC.c with the tools' option
#                           parsers (build/lib/librdmx_tools_common.a)
#   line_rtt_build, line_rtt_now   the round trip of a cache line between
#                           the two CPUs now (bench/line_rtt.c), in ns
#   install_missing PKG...  Debian packages, with apt-get (INSTALL=0: only
#                           check)
#   make_work_dir           WORK, and the exit trap that stops every
#                           process this script started and removes WORK
#                           (KEEP=1: keeps it)
#   loopback_ucx            a clean, loopback-only UCX environment
#   free_port, wait_listen, start_listener, start_on_free_port,
#   start_memcached, start_kvd
#                           servers on 127.0.0.1
#   perf_pair               an rdmx-perf server and client on 127.0.0.1
#   ucx_perftest_pair       a ucx_perftest server and client on 127.0.0.1
#   median, cpu_busy, psi, cpu_ticks, others_pct, json_field
#                           figures
#   ucx_version, extra_env, tree_at   what the report's header says
#
# Processes: the exit trap stops the clients in CPIDS, the perf recorders
# in PERF_PIDS (SIGINT), then the servers in SERVER_PID (the one being
# started, or a script's only server) and SERVER_PIDS (servers kept for
# the whole run). A script removes a pid from these once it has waited for
# that process, so that no pid is signalled after it was reaped.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RDMX_BUILD=${RDMX_BUILD:-$ROOT/build}
CC=${CC:-cc}

# --- messages and options -----------------------------------------------------
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

die() {
    echo "$NAME: $*" >&2
    exit 1
}

bad_arg() {
    echo "$NAME: $*" >&2
    exit 2
}

need_value() { # "$@" of the option loop: exit 2 unless $1 has a value
    [ $# -ge 2 ] || bad_arg "$1 needs a value (try --help)"
}

is_count() { # value -> 0 if a whole number above 0
    case "${1:-}" in '' | *[!0-9]* | 0) return 1 ;; esac
    return 0
}

set_transports() { # value "transports for all" -> TRANSPORTS
    case "${1:-}" in
    shm | tcp) TRANSPORTS=$1 ;;
    all) TRANSPORTS=$2 ;;
    *) bad_arg "--transport shm|tcp|all" ;;
    esac
}

# ROUNDS as given (--rounds), else QUICK_N with --quick (QUICK=1), else N;
# exit 2 unless a whole number above 0.
set_rounds() { # quick_n n
    [ -n "$ROUNDS" ] || ROUNDS=$([ "$QUICK" = 1 ] && echo "$1" || echo "$2")
    is_count "$ROUNDS" || bad_arg "bad --rounds"
}

size_bytes() { # 100 | 4k | 1m -> bytes (k: KiB, m: MiB); exit 2 if not one
    local s=$1 n m=1
    case "$s" in
    *[kK]) n=${s%?}; m=1024 ;;
    *[mM]) n=${s%?}; m=1048576 ;;
    *) n=$s ;;
    esac
    case "$n" in '' | *[!0-9]*) bad_arg "bad size '$s'" ;; esac
    echo $((n * m))
}

# SIZE_LIST: the sizes of the comma list SIZES in bytes, in its order;
# exit 2 with "NAME: MESSAGE" if one is above MAX bytes.
size_list() { # sizes max message
    local s b
    SIZE_LIST=""
    for s in ${1//,/ }; do
        b=$(size_bytes "$s")
        [ "$b" -le "$2" ] || bad_arg "$3"
        SIZE_LIST="$SIZE_LIST $b"
    done
}

# 0 if --only (ONLY: a comma list of rows and groups; empty: every row)
# takes ROW: by its name, by GROUP if ROW begins with PREFIX, by REST if
# it does not.
only_selects() { # row prefix group rest
    [ -z "$ONLY" ] && return 0
    case ",$ONLY," in *",$1,"*) return 0 ;; esac
    case "$1" in
    "$2"*) case ",$ONLY," in *",$3,"*) return 0 ;; esac ;;
    *) case ",$ONLY," in *",$4,"*) return 0 ;; esac ;;
    esac
    return 1
}

# --- building ------------------------------------------------------------------
# bench/SRC.c into $WORK/SRC with $CC -O2 and FLAG... (more flags and
# libraries), linked with the tools' option parsers (tools/common); the
# compiler's messages in $WORK/SRC.cc. Needs make first.
bench_cc() { # src flag...
    local src=$1 lib=$RDMX_BUILD/lib/librdmx_tools_common.a
    shift
    [ -f "$lib" ] || die "$lib not found; run make (or set RDMX_BUILD)"
    "$CC" -O2 -I "$ROOT/include" -I "$RDMX_BUILD/include" \
        -I "$ROOT/tools/common" -o "$WORK/$src" \
        "$ROOT/bench/$src.c" "$lib" "$@" 2>"$WORK/$src.cc"
}

# The host's regime: the round trip of a cache line between the two CPUs
# (bench/line_rtt.c; docs/PERFORMANCE.md, "The host's regimes").
# line_rtt_build once, then line_rtt_now prints it in ns ("?" if it could
# not be measured).
line_rtt_build() {
    bench_cc line_rtt -pthread ||
        die "cannot compile bench/line_rtt.c: $(cat "$WORK/line_rtt.cc")"
}
line_rtt_now() {
    local v
    v=$("$WORK/line_rtt" 2>/dev/null |
        sed -n 's/^line_rtt_ns=\([0-9]*\).*/\1/p')
    echo "${v:-?}"
}

# --- Debian packages -------------------------------------------------------------
install_missing() {
    local missing=() p sudo=""
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
            grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$INSTALL" = 1 ] || die "missing packages: ${missing[*]} (--no-install)"
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null ||
            die "need root or sudo to install: ${missing[*]}"
        sudo=sudo
    fi
    echo "# installing ${missing[*]}" >&2
    if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >&2; then
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing[@]}" >&2 ||
            die "cannot install ${missing[*]}"
    fi
}

# --- work dir, processes, cleanup ----------------------------------------------
make_work_dir() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$NAME.XXXXXX")
    SERVER_PID=""
    SERVER_PIDS=()
    CPIDS=()
    PERF_PIDS=()
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}

cleanup() {
    local p
    for p in "${CPIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${PERF_PIDS[@]}"; do
        kill -INT "$p" 2>/dev/null || true
    done
    for p in "${CPIDS[@]}" "${PERF_PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    for p in $SERVER_PID "${SERVER_PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in $SERVER_PID "${SERVER_PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    if [ "${KEEP:-0}" = 1 ]; then
        echo "raw results kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}

# A clean, loopback-only UCX environment for every process.
loopback_ucx() {
    unset UCX_TLS UCX_MM_ERROR_HANDLING RDMX_TRANSPORT
    export UCX_NET_DEVICES=lo
    export UCX_WARN_UNUSED_ENV_VARS=n
}

# --- servers ---------------------------------------------------------------------
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

# 0 once something listens on 127.0.0.1:PORT ("any": on any address of
# this machine), 1 if PID exits first or after 10 s.
wait_listen() { # port pid [any]
    local filter="src 127.0.0.1 and sport = :$1"
    [ "${3:-}" = any ] && filter="sport = :$1"
    for _ in $(seq 500); do
        [ -n "$(ss -Htln "$filter" 2>/dev/null)" ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.02
    done
    return 1
}

# Start CMD... in the background, its stdout in $WORK/OUT.out and stderr in
# $WORK/OUT.err, and wait until the sed script PORT_SED (run with -n) finds
# the port it listens on in its stdout: PORT, empty if CMD exited first or
# said nothing within 30 s (registering memory takes seconds on a busy
# machine). The process is SERVER_PID. No command substitution: the pid
# must stay visible to the exit trap.
start_listener() { # out port_sed cmd...
    local out=$1 port_sed=$2
    shift 2
    : >"$WORK/$out.out"
    "$@" >"$WORK/$out.out" 2>"$WORK/$out.err" &
    SERVER_PID=$!
    PORT=""
    for _ in $(seq 1500); do
        PORT=$(sed -n "$port_sed" "$WORK/$out.out" 2>/dev/null)
        [ -n "$PORT" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.02
    done
    PORT=$(sed -n "$port_sed" "$WORK/$out.out" 2>/dev/null)
}

# CMD... on a free port (the word @PORT@ in it replaced by the port),
# started in the background until it listens on any address: SERVER_PID,
# PORT; its stdout in $WORK/OUT.out and stderr in $WORK/OUT.err. Three
# tries (a port taken meanwhile), then exit 1 saying that WHAT's server
# did not start.
start_on_free_port() { # out what cmd...
    local out=$1 what=$2 a
    local -a cmd
    shift 2
    for _ in 1 2 3; do
        PORT=$(free_port)
        cmd=()
        for a in "$@"; do cmd+=("${a//@PORT@/$PORT}"); done
        "${cmd[@]}" >"$WORK/$out.out" 2>"$WORK/$out.err" &
        SERVER_PID=$!
        wait_listen "$PORT" "$SERVER_PID" any && return 0
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    done
    die "$what server did not start: $(cat "$WORK/$out.err")"
}

# memcached on 127.0.0.1 and a free port, with ARG... after "-U 0 -t 2",
# kept for the whole run (SERVER_PIDS): MC_PORT, MC_PID. Three tries.
start_memcached() { # arg...
    local user
    user=$(id -un)
    for _ in 1 2 3; do
        MC_PORT=$(free_port)
        "$MEMCACHED" -l 127.0.0.1 -p "$MC_PORT" -U 0 -t 2 "$@" \
            -u "$user" >"$WORK/memcached.log" 2>&1 &
        SERVER_PID=$!
        if wait_listen "$MC_PORT" "$SERVER_PID"; then
            MC_PID=$SERVER_PID
            SERVER_PIDS+=("$MC_PID")
            SERVER_PID=""
            return 0
        fi
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    done
    die "memcached did not start: $(cat "$WORK/memcached.log")"
}

# rdmx-kvd ($RDMX_KVD) on 127.0.0.1, a free port, with ARG..., kept for the
# whole run (SERVER_PIDS); its output in $WORK/kvd.TR.out and .err. Leaves
# KVD_PORT and KVD_PID.
start_kvd() { # tr arg...
    local tr=$1
    shift
    start_listener "kvd.$tr" \
        's/^rdmx-kvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' \
        "$RDMX_KVD" --listen 127.0.0.1:0 "$@"
    KVD_PID=$SERVER_PID
    SERVER_PIDS+=("$KVD_PID")
    SERVER_PID=""
    KVD_PORT=$PORT
    [ -n "$KVD_PORT" ] || die "rdmx-kvd ($tr) did not start:" \
        "$(cat "$WORK/kvd.$tr.err" "$WORK/kvd.$tr.out")"
}

# One rdmx-perf ($RDMX_PERF) test over transport TR: a server (--once) on
# 127.0.0.1, then the client with -t TEST ARG... --json; the client's last
# JSON line in PERF_LINE. Exit 1 if either fails; the outputs in
# $WORK/rs.* (server) and $WORK/rc.* (client).
perf_pair() { # tr test arg...
    local tr=$1 test=$2
    shift 2
    start_listener rs 's/^listening on .*:\([0-9]*\)$/\1/p' \
        "$RDMX_PERF" --listen 127.0.0.1:0 --once --transport "$tr"
    [ -n "$PORT" ] ||
        die "rdmx-perf server did not start: $(cat "$WORK/rs.err")"
    if ! "$RDMX_PERF" "127.0.0.1:$PORT" -t "$test" "$@" --transport "$tr" \
        --json >"$WORK/rc.out" 2>"$WORK/rc.err"; then
        die "rdmx-perf $test ($tr) failed: $(cat "$WORK/rc.err")"
    fi
    wait "$SERVER_PID" || die "rdmx-perf server failed: $(cat "$WORK/rs.err")"
    SERVER_PID=""
    PERF_LINE=$(grep '^{' "$WORK/rc.out" | tail -1 || true)
}

# A ucx_perftest server and client on 127.0.0.1, both with the environment
# ENV (NAME=VALUE words), the client with ARG... and -f -v; its last CSV line
# in UCX_LINE: iters,p50_lat,avg_lat,overall_lat,avg_bw,overall_bw(MiB/s),
# avg_mr,overall_mr. Latencies are one-way: the round trips halved
# (libperf.c, ucx_perf_calc_result: factor 2 for ping-pong tests).
ucx_perftest_pair() { # ENV... -- ARG...
    local -a env=()
    while [ "$1" != -- ]; do env+=("$1"); shift; done
    shift
    start_on_free_port us ucx_perftest env "${env[@]}" "$UCX_PERFTEST" \
        -p @PORT@
    if ! env "${env[@]}" "$UCX_PERFTEST" 127.0.0.1 -p "$PORT" "$@" -f -v \
        >"$WORK/uc.out" 2>"$WORK/uc.err"; then
        die "ucx_perftest $* failed: $(cat "$WORK/uc.err" "$WORK/uc.out")"
    fi
    wait "$SERVER_PID" || true
    SERVER_PID=""
    UCX_LINE=$(grep -E '^ *[0-9]+,' "$WORK/uc.out" | tail -1 || true)
    [ -n "$UCX_LINE" ] ||
        die "ucx_perftest $*: no result: $(cat "$WORK/uc.out")"
}

# --- figures -------------------------------------------------------------------
median() { # values on stdin -> median
    sort -g | awk '{v[NR] = $1} END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2];
        else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

cpu_busy() { # share of CPU time used over one second (percent)
    local a b
    a=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
    sleep 1
    b=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat)
    awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ");
        busy = y[1] - x[1]; idle = y[2] - x[2];
        printf "%.0f\n", (busy + idle > 0) ? 100 * busy / (busy + idle) : 0 }'
}

psi() { # CPU pressure over the last 60 s (PSI "some"), or "?"
    sed -n 's/^some avg10=[0-9.]* avg60=\([0-9.]*\).*/\1/p' \
        /proc/pressure/cpu 2>/dev/null || echo "?"
}

# CPU ticks: "total busy ours" — all CPUs from /proc/stat, and what this
# script's processes used (reaped children: clients; plus the live servers
# of SERVER_PIDS).
cpu_ticks() {
    local ours p
    ours=$(awk '{print $16 + $17}' "/proc/$$/stat")
    for p in "${SERVER_PIDS[@]}"; do
        [ -r "/proc/$p/stat" ] || continue
        ours=$((ours + $(sed 's/^.*) //' "/proc/$p/stat" |
            awk '{print $12 + $13}')))
    done
    awk -v o="$ours" '/^cpu /{ b = $2+$3+$4+$7+$8+$9;
        print b + $5 + $6, b, o }' /proc/stat
}
others_pct() { # "total busy ours" before, after -> % of CPU others used
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
        t = y[1] - x[1]; o = (y[2] - x[2]) - (y[3] - x[3]);
        if (o < 0) o = 0;
        printf "%.0f\n", (t > 0 ? 100 * o / t : 0) }'
}

json_field() { # name json-line -> value
    sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" <<<"$2"
}

# --- the report's header ---------------------------------------------------------
ucx_version() { # "UCX x.y.z", or nothing
    # (the ucx_info beside UCX_PERFTEST when that names a UCX of its own)
    local info=ucx_info
    if [[ "${UCX_PERFTEST:-}" == */* && -x "${UCX_PERFTEST%/*}/ucx_info" ]]; then
        info=${UCX_PERFTEST%/*}/ucx_info
    fi
    "$info" -v 2>/dev/null |
        sed -n 's/^# Version /UCX /p; s/^# Library version: /UCX /p' | head -1 || true
}

# The UCX_* and RDMX_* variables of the environment but the loopback ones,
# RDMX_BUILD and NAME...: what reaches the processes besides the script's
# own settings.
extra_env() { # name...
    local skip="UCX_NET_DEVICES|UCX_WARN_UNUSED_ENV_VARS|RDMX_BUILD" n
    for n in "$@"; do
        skip="$skip|$n"
    done
    env | grep -E '^(UCX|RDMX)_' | grep -v -E "^($skip)=" |
        sort | tr '\n' ' ' || true
}

tree_at() { # the tree's commit, "(+ local changes)" if src/include/tools differ
    echo "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(
        git -C "$ROOT" diff --quiet HEAD -- src include tools 2>/dev/null ||
            echo ' (+ local changes)')"
}
