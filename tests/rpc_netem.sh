#!/bin/sh
# rpc_netem: RPC between two network namespaces joined by a veth pair, with
# tc netem delay and loss on both ends (see tests/test_rpc_netem.c for what
# the client checks).
#
#   tests/rpc_netem.sh PATH/TO/test_rpc_netem
#
# Needs root (CAP_NET_ADMIN) and working `ip netns add`; otherwise it says why
# and exits 77 (CTest: skipped). Traffic stays inside the two namespaces it
# creates (a private /24 that exists only there); everything is removed on
# exit, whatever happens.
#
# Without the kernel's netem qdisc (CONFIG_NET_SCH_NETEM), delay cannot be
# emulated: the test then still runs over the veth, drops 1 % of the packets
# with nftables or iptables when one of them is installed, and skips only
# the minimum round-trip check (the client still proves with the interface
# counters that the bytes crossed the veth). It says so in its output. Set
# RDMX_NETEM_REQUIRE=1 to skip (77) instead in that case.

set -u

BIN=${1:-}
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
    echo "usage: $0 PATH/TO/test_rpc_netem" >&2
    exit 2
fi

log() { echo "rpc_netem.sh: $*" >&2; }
skip() {
    log "SKIP: $*"
    exit 77
}

[ "$(id -u)" = 0 ] || skip "not root (needs CAP_NET_ADMIN for namespaces)"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2)"

ID=$$
NS_S=rdmx-srv-$ID
NS_C=rdmx-cli-$ID
V_S=rdxs$ID              # interface names: at most 15 characters
V_C=rdxc$ID
NET=10.213.77            # exists only inside the two namespaces
ADDR_S=$NET.1
ADDR_C=$NET.2
PORT=13370
TMP=$(mktemp -d /tmp/rpc_netem.XXXXXX) || exit 1
SERVER_PID=
CREATED=

cleanup() {
    rc=$?
    trap - EXIT INT TERM
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -KILL "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    for ns in $CREATED; do
        ip netns del "$ns" 2>/dev/null || log "could not delete namespace $ns"
    done
    rm -rf "$TMP"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! ip netns add "$NS_S" 2>"$TMP/err"; then
    skip "ip netns add failed: $(cat "$TMP/err")"
fi
CREATED=$NS_S
ip netns add "$NS_C" || exit 1
CREATED="$NS_S $NS_C"

set -e
ip link add "$V_S" type veth peer name "$V_C" 2>"$TMP/err" ||
    { set +e; skip "cannot create a veth pair: $(cat "$TMP/err")"; }
ip link set "$V_S" netns "$NS_S"
ip link set "$V_C" netns "$NS_C"
ip -n "$NS_S" addr add "$ADDR_S/24" dev "$V_S"
ip -n "$NS_C" addr add "$ADDR_C/24" dev "$V_C"
for ns in "$NS_S" "$NS_C"; do
    ip -n "$ns" link set lo up
done
ip -n "$NS_S" link set "$V_S" up
ip -n "$NS_C" link set "$V_C" up
set +e

# Delay and loss on both ends.
MIN_RTT=10
EMULATION="netem delay 5ms loss 1% on both ends"
netem_ok=1
for pair in "$NS_S $V_S" "$NS_C $V_C"; do
    set -- $pair
    if ! ip netns exec "$1" tc qdisc add dev "$2" root netem delay 5ms \
        loss 1% 2>"$TMP/err"; then
        netem_ok=0
        break
    fi
done
if [ $netem_ok = 0 ]; then
    why=$(cat "$TMP/err")
    [ -n "$why" ] || why="no tc command"
    [ "${RDMX_NETEM_REQUIRE:-0}" = 1 ] && skip "tc netem unavailable: $why"
    log "WARNING: tc netem unavailable ($why): no delay emulated, round-trip" \
        "check off"
    MIN_RTT=0
    EMULATION="no netem (no delay)"
    loss=0
    if command -v nft >/dev/null 2>&1; then
        loss=1
        for pair in "$NS_S $V_S" "$NS_C $V_C"; do
            set -- $pair
            ip netns exec "$1" nft -f - <<EOF || loss=0
table inet rdmx_netem {
    chain out {
        type filter hook output priority 0;
        oifname "$2" numgen random mod 100 == 0 drop
    }
}
EOF
        done
        [ $loss = 1 ] && EMULATION="$EMULATION, 1% loss by nftables"
    elif command -v iptables >/dev/null 2>&1; then
        loss=1
        for pair in "$NS_S $V_S" "$NS_C $V_C"; do
            set -- $pair
            ip netns exec "$1" iptables -A OUTPUT -o "$2" -m statistic \
                --mode random --probability 0.01 -j DROP || loss=0
        done
        [ $loss = 1 ] && EMULATION="$EMULATION, 1% loss by iptables"
    fi
    [ $loss = 1 ] || {
        log "WARNING: neither nft nor iptables works: no loss emulated"
        EMULATION="$EMULATION, no loss"
    }
fi
log "namespaces $NS_S ($ADDR_S on $V_S) and $NS_C ($ADDR_C on $V_C);" \
    "$EMULATION"

# The link works (the kernel's own check, before rdmx is involved).
if command -v ping >/dev/null 2>&1; then
    ip netns exec "$NS_C" ping -c 2 -i 0.2 -W 2 "$ADDR_S" >/dev/null 2>&1 ||
        log "note: ping $ADDR_S from $NS_C failed (loss?)"
fi

# Server.
ip netns exec "$NS_S" env RDMX_TRANSPORT=tcp UCX_NET_DEVICES="$V_S" \
    "$BIN" server --address "$ADDR_S:$PORT" >"$TMP/server.out" &
SERVER_PID=$!
i=0
while ! grep -q '^PORT ' "$TMP/server.out" 2>/dev/null; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        wait "$SERVER_PID"
        log "FAIL: server exited ($?) before listening"
        exit 1
    fi
    i=$((i + 1))
    if [ $i -gt 600 ]; then
        log "FAIL: server did not listen within 60 s"
        exit 1
    fi
    sleep 0.1
done
log "server (pid $SERVER_PID) listening on $ADDR_S:$PORT"

# Client.
start=$(date +%s)
ip netns exec "$NS_C" env RDMX_TRANSPORT=tcp UCX_NET_DEVICES="$V_C" \
    "$BIN" client --address "$ADDR_S:$PORT" --dev "$V_C" \
    --min-rtt-ms "$MIN_RTT" --calls 500
client_rc=$?
log "client exited $client_rc after $(($(date +%s) - start)) s"

# The server stops cleanly on SIGTERM.
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
server_rc=$?
SERVER_PID=
if [ $server_rc != 0 ]; then
    log "FAIL: server exited $server_rc after SIGTERM"
    [ $client_rc != 0 ] || client_rc=1
fi
if [ $client_rc = 0 ]; then
    log "ok ($EMULATION)"
fi
exit $client_rc
