#!/usr/bin/env bash
# Run rdmx-demo's five modes (send, write, read, atomic, lambda) between two
# processes on 127.0.0.1 and print a summary. Exits non-zero if any mode
# fails. Called by `make demo` and by the demo.* tests.
#
#   scripts/demo.sh BIN_DIR [extra rdmx-demo options, e.g. --size 64M]
#
# Environment: RDMX_TRANSPORT (auto|shm|tcp|rdma) picks the transport;
# DEMO_TIMEOUT is the limit in seconds for each run (default 30).
# Traffic stays on loopback: UCX_NET_DEVICES is forced to "lo".
set -u

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  echo "usage: $0 BIN_DIR [rdmx-demo options]" >&2
  exit 2
fi
bin_dir=$1
shift
demo="$bin_dir/rdmx-demo"
if [ ! -x "$demo" ]; then
  echo "demo: $demo not found or not executable (build first: make)" >&2
  exit 2
fi

export UCX_NET_DEVICES=lo
limit=${DEMO_TIMEOUT:-30}
host=127.0.0.1
logdir=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-demo.XXXXXX")
server_pid=""

cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  rm -rf "$logdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

show_logs() {
  local f
  for f in "$@"; do
    [ -s "$f" ] || continue
    echo "  --- $(basename "$f")"
    sed 's/^/  | /' "$f"
  done
}

# run_mode MODE: 0 on success.
run_mode() {
  local mode=$1 slog="$logdir/$1.server.log" clog="$logdir/$1.client.log"
  local port="" i rc_s rc_c
  local -a opts=("${extra[@]}")

  # lambda's SIZE is the input of a Lua function: keep its default (64K)
  # rather than, say, the 64M given for the transfers.
  [ "$mode" = lambda ] && opts=("${extra_lambda[@]}")
  timeout -k 5 "$limit" "$demo" "$mode" --listen 0 --host "$host" \
    "${opts[@]}" >"$slog" 2>&1 &
  server_pid=$!

  # Wait (up to 10 s) for "listening on HOST:PORT".
  for ((i = 0; i < 200; i++)); do
    port=$(sed -n 's/^listening on .*:\([0-9][0-9]*\)$/\1/p' "$slog" | head -n1)
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  if [ -z "$port" ]; then
    echo "demo: $mode: the server did not start listening"
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
    show_logs "$slog"
    return 1
  fi

  timeout -k 5 "$limit" "$demo" "$mode" "$host:$port" "${opts[@]}" \
    >"$clog" 2>&1
  rc_c=$?
  wait "$server_pid"
  rc_s=$?
  server_pid=""

  if [ $rc_c -eq 0 ] && [ $rc_s -eq 0 ]; then
    # The client's last line says what was verified.
    printf '  %-7s ok    %s\n' "$mode" \
      "$(tail -n1 "$clog" | sed "s/^$mode: ok, //")"
    return 0
  fi
  printf '  %-7s FAIL  client exit %d, server exit %d%s\n' "$mode" $rc_c $rc_s \
    "$([ $rc_c -eq 124 ] || [ $rc_s -eq 124 ] && echo " (timeout ${limit}s)")"
  show_logs "$slog" "$clog"
  return 1
}

extra=("$@")
extra_lambda=()
for ((i = 0; i < ${#extra[@]}; i++)); do
  case ${extra[i]} in
    --size) i=$((i + 1)) ;;
    --size=*) ;;
    *) extra_lambda+=("${extra[i]}") ;;
  esac
done
echo "rdmx-demo on $host, transport ${RDMX_TRANSPORT:-auto}, UCX_NET_DEVICES=lo"
modes=(send write read atomic lambda)
failed=0
for mode in "${modes[@]}"; do
  run_mode "$mode" || failed=$((failed + 1))
done
if [ $failed -ne 0 ]; then
  echo "demo: $failed of ${#modes[@]} modes FAILED"
  exit 1
fi
echo "demo: all ${#modes[@]} modes passed"
exit 0
