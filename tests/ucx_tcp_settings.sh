#!/bin/sh
# The settings a tcp context gives UCX reach UCX's tcp transport
# (src/core/ucx/ucx.c, docs/CORE.md "UCX versions"): copied sends go in
# 64 KiB segments (TCP_TX_SEG_SIZE, passed under the name the running UCX
# version takes), UCX says it applied it, and warns about nothing rdmx set;
# a segment size the user set wins. Read from UCX's own debug log of a real
# rdmx-perf server over tcp. Exits 77 (skipped) if this UCX was built
# without debug logging.
# Usage: ucx_tcp_settings.sh BINDIR
set -eu
bin=$1
export UCX_NET_DEVICES=lo
unset UCX_TCP_TX_SEG_SIZE UCX_TCP_RX_SEG_SIZE UCX_ZCOPY_THRESH || true
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
die() { echo "FAIL: $*" >&2; exit 1; }

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
grep "TX_SEG_SIZE" "$tmp/default" || true
grep -Eq "apply UCT configuration (TCP_)?TX_SEG_SIZE=64k" "$tmp/default" ||
    die "UCX did not apply the 64 KiB send segment"
if grep -Eq "UCX  WARN  invalid configuration|unused env" "$tmp/default"; then
    grep -E "UCX  WARN" "$tmp/default" >&2
    die "UCX warned about a setting rdmx made"
fi

serve "$tmp/user" UCX_TCP_TX_SEG_SIZE=16k
if grep -Eq "apply UCT configuration (TCP_)?TX_SEG_SIZE=64k" "$tmp/user"; then
    die "rdmx overrode the send segment the user set"
fi
echo "ok: copied tcp sends go in 64 KiB segments; the user's setting wins"
