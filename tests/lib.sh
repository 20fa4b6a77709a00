# tests/lib.sh: what the shell tests share. A test sources it right after
# `set -eu`:
#
#   . "$(dirname "$0")/lib.sh"
#
# It makes the work directory $tmp and an exit trap that ends every
# server started with start_server (or named to track) and removes $tmp.
# The trap runs when the script dies of a signal too: dash runs no EXIT
# trap for a death by signal, so INT, TERM, HUP and PIPE (a test piped to
# `head`, ctest's kill at its timeout) exit through it; otherwise the
# server would be left running.
#
#   die MESSAGE...             "FAIL: MESSAGE" on stderr, exit 1
#   wait_line LOG PATTERN [PID]
#                              the first match of `sed -n PATTERN` in LOG,
#                              within 10 s and while PID runs (else LOG on
#                              stderr, status 1)
#   start_server NAME CMD...   CMD in the background, its output in
#                              $tmp/NAME.out; its pid in $srv and its
#                              address (from "listening on ADDR") in
#                              $addr once it listens, or die
#   stop_server [PID]          SIGTERM to PID (default $srv), wait for it;
#                              its exit status in $server_rc
#   track PID                  end PID at exit too (a server started
#                              without start_server)

tmp=$(mktemp -d)
tracked=""
srv=""
addr=""
server_rc=0
end_tracked() {
    for p in $tracked; do
        kill "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap end_tracked EXIT
trap 'exit 1' INT TERM HUP PIPE

die() {
    echo "FAIL: $*" >&2
    exit 1
}

# running PID: PID has not exited (a child not yet waited for is a zombie,
# which `kill -0` still finds)
running() {
    s=$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$s" ] && [ "$s" != Z ]
}

wait_line() {
    for _ in $(seq 100); do
        v=$(sed -n "$2" "$1" 2>/dev/null | head -n 1)
        [ -n "$v" ] && { echo "$v"; return 0; }
        [ -z "${3:-}" ] || running "$3" || break
        sleep 0.1
    done
    cat "$1" >&2
    return 1
}

track() {
    tracked="$tracked $1"
}

untrack() {
    t=""
    for p in $tracked; do
        [ "$p" = "$1" ] || t="$t $p"
    done
    tracked=$t
}

start_server() {
    name=$1
    shift
    "$@" >"$tmp/$name.out" 2>&1 &
    srv=$!
    track "$srv"
    addr=$(wait_line "$tmp/$name.out" \
        's/.*listening on \([^ ]*\).*/\1/p' "$srv") ||
        die "$name did not start"
}

stop_server() {
    p=${1:-$srv}
    kill "$p" 2>/dev/null || true
    server_rc=0
    wait "$p" 2>/dev/null || server_rc=$?
    untrack "$p"
    [ "$p" != "$srv" ] || srv=""
}
