#!/bin/sh
# The settings a tcp (or auto) context gives UCX reach UCX's tcp transport
# (src/core/ucx/ucx.c, docs/CORE.md "UCX versions"): messages are sent and
# received in 260 KiB segments (TCP_TX_SEG_SIZE and TCP_RX_SEG_SIZE, passed
# under the names the running UCX version takes), UCX says it applied both,
# and warns about nothing rdmx set; a send or receive segment size the user
# set wins, and then rdmx sets neither. Read from UCX's own debug log of a real
# rdmx-perf server over tcp. Exits 77 (skipped) if this UCX was built
# without debug logging.
# Usage: ucx_tcp_settings.sh BINDIR
set -eu
bin=$1
export UCX_NET_DEVICES=lo
unset UCX_TCP_TX_SEG_SIZE UCX_TCP_RX_SEG_SIZE UCX_ZCOPY_THRESH || true
. "$(dirname "$0")/lib.sh"

# A server for a second: its workers open UCX's tcp interface at start.
serve() { # out env...
    out=$1
    shift
    env "$@" UCX_LOG_LEVEL=debug timeout -s TERM 2 "$bin/rdmx-perf" \
        --listen 127.0.0.1:0 --transport tcp >"$out" 2>&1 || true
    grep -q "^listening on" "$out" || die "rdmx-perf did not listen: $(tail -5 "$out")"
}

serve "$tmp/default" RDMX_TRANSPORT=tcp
grep -q "UCX  DEBUG" "$tmp/default" || {
    echo "SKIP: this UCX logs no debug lines"
    exit 77
}
grep "_SEG_SIZE" "$tmp/default" || true
for dir in TX RX; do
    grep -Eq "apply UCT configuration (TCP_)?${dir}_SEG_SIZE=260k" \
        "$tmp/default" || die "UCX did not apply the 260 KiB $dir segment"
done
if grep -Eq "UCX  WARN  invalid configuration|unused env" "$tmp/default"; then
    grep -E "UCX  WARN" "$tmp/default" >&2
    die "UCX warned about a setting rdmx made"
fi

# auto reaches tcp peers as well: the same segments
env UCX_LOG_LEVEL=debug timeout -s TERM 2 "$bin/rdmx-perf" \
    --listen 127.0.0.1:0 --transport auto >"$tmp/auto" 2>&1 || true
for dir in TX RX; do
    grep -Eq "apply UCT configuration (TCP_)?${dir}_SEG_SIZE=260k" \
        "$tmp/auto" || die "UCX did not apply the 260 KiB $dir segment (auto)"
done

for user in UCX_TCP_TX_SEG_SIZE=16k UCX_TCP_RX_SEG_SIZE=128k; do
    serve "$tmp/user" "$user"
    if grep -Eq "apply UCT configuration (TCP_)?(TX|RX)_SEG_SIZE=260k" \
        "$tmp/user"; then
        die "rdmx set a segment size although the user set $user"
    fi
done
echo "ok: tcp messages go in 260 KiB segments; the user's setting wins"
