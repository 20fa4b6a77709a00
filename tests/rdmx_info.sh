#!/bin/sh
# rdmx-info (docs/OPERATIONS.md) against a real rdmx-kvd over the
# transport RDMX_TRANSPORT names: the path lines, the WARNING lines and the
# exit status agree (tcp and ofi:tcp: RMA emulated, warning, exit 1; shm:
# one-sided RMA, no warning, exit 0; auto on one host: messages over shm,
# RMA mapped, no warning, exit 0) and the backend line names the server
# connection's backend; a UCX client of an ofi server is refused with the
# reason; the local report names this build, its backends
# and its transports; --version prints the version; an unreachable server
# exits 3, a bad option 2. libfabric is mapped only by processes that use
# it, and a libfabric that cannot be loaded is named.
# Usage: rdmx_info.sh BINDIR
set -eu
bin=$1
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
. "$(dirname "$0")/lib.sh"

# Local: version, build, transports, devices; exit 0 or 1 as it warns.
rc=0
"$bin/rdmx-info" >"$tmp/local" 2>&1 || rc=$?
cat "$tmp/local"
grep -q "^rdmx [0-9]" "$tmp/local" || die "no version line"
grep -q "^build: .*UCX" "$tmp/local" || die "no build line"
grep -q "^backends: ucx" "$tmp/local" || die "no backends line"
grep -q "^  tcp  *available (ucx)" "$tmp/local" || die "tcp not listed as available"
grep -q "^  rdma  " "$tmp/local" || die "rdma not listed"
grep -q "^clock: \(tsc at [0-9]* MHz\|CLOCK_MONOTONIC\)$" "$tmp/local" ||
    die "no clock line"
[ "$(RDMX_CLOCK=monotonic "$bin/rdmx-info" 2>&1 | grep '^clock:')" = \
    "clock: CLOCK_MONOTONIC" ] || die "RDMX_CLOCK=monotonic not obeyed"
if grep -q "^backends: ucx, ofi" "$tmp/local"; then
    grep -q "^  ofi:tcp  *available (ofi [0-9.]* tcp;ofi_rxm, domain lo)" \
        "$tmp/local" || die "ofi:tcp not listed on lo"
fi
if grep -q "unused env variable" "$tmp/local"; then
    die "UCX warned about the environment rdmx set"
fi
"$bin/rdmx-info" --version | grep -q "^rdmx-info (rdmx [0-9]" ||
    die "--version"
if grep -q "^WARNING:" "$tmp/local"; then want=1; else want=0; fi
[ $rc -eq $want ] || die "local: exit $rc with warnings=$want"

# Against a server.
start_server rdmx-kvd "$bin/rdmx-kvd" -l 127.0.0.1:0 -w 1 -m 4m
rc=0
"$bin/rdmx-info" --server "$addr" >"$tmp/srv" 2>&1 || rc=$?
cat "$tmp/srv"
grep -q "^server: $addr (rdmx.ping answered" "$tmp/srv" || die "no server line"
msg=$(sed -n 's/^path: messages  *//p' "$tmp/srv")
backend=$(sed -n 's/^backend: //p' "$tmp/srv")
grep -q "^path: rma " "$tmp/srv" || die "no rma path"
grep -q "^path: atomics " "$tmp/srv" || die "no atomics path"
case "${RDMX_TRANSPORT:-auto}" in
ofi:*) [ "${backend%% *}" = ofi ] || die "backend '$backend', not ofi" ;;
*) [ "$backend" = ucx ] || die "backend '$backend', not ucx" ;;
esac
case "${RDMX_TRANSPORT:-auto}" in
tcp | ofi:tcp)
    [ "$msg" = tcp ] || die "messages over $msg, not tcp"
    grep -q "^path: rma  *emulated" "$tmp/srv" || die "rma not emulated on tcp"
    grep -q "^WARNING: RMA emulated" "$tmp/srv" || die "no RMA warning on tcp"
    [ $rc -eq 1 ] || die "tcp: exit $rc, not 1"
    ;;
shm)
    [ "$msg" = shm ] || die "messages over $msg, not shm"
    grep -q "^path: rma  *one-sided (shared memory)" "$tmp/srv" ||
        die "rma not one-sided on shm"
    if grep -q "^WARNING" "$tmp/srv"; then die "a warning on shm"; fi
    [ $rc -eq 0 ] || die "shm: exit $rc, not 0"
    ;;
auto)
    # one host: shared memory, the peer's allocated memory mapped
    [ "$msg" = shm ] || die "messages over $msg, not shm (auto, one host)"
    grep -q "^path: rma  *mapped" "$tmp/srv" || die "rma not mapped on auto"
    if grep -q "^WARNING" "$tmp/srv"; then die "a warning on auto"; fi
    [ $rc -eq 0 ] || die "auto: exit $rc, not 0"
    ;;
esac
# A client of the other backend is refused, and told why.
case "${RDMX_TRANSPORT:-auto}" in
ofi:*)
    rc=0
    "$bin/rdmx-info" --server "$addr" --transport tcp --timeout 1500 \
        >"$tmp/cross" 2>&1 || rc=$?
    cat "$tmp/cross"
    [ $rc -eq 3 ] || die "a UCX client of an ofi server: exit $rc, not 3"
    grep -q "not a libfabric one.*same --transport family" "$tmp/cross" ||
        die "the refusal does not say why"
    ;;
esac
# libfabric is loaded by the first ofi context only: a server over UCX
# never maps it (nor the provider libraries it pulls in).
case "${RDMX_TRANSPORT:-auto}" in
ofi:*)
    grep -q "libfabric" /proc/$srv/maps || die "an ofi server without libfabric?"
    ;;
*)
    if grep -q -e "libfabric" -e "infinipath" /proc/$srv/maps; then
        die "a UCX server loaded libfabric"
    fi
    ;;
esac
stop_server
[ $server_rc -eq 0 ] || die "rdmx-kvd did not stop cleanly: $server_rc"

# A libfabric that cannot be loaded: the ofi transports say so.
if grep -q "^backends: ucx, ofi" "$tmp/local"; then
    RDMX_OFI_LIBRARY=/nonexistent/libfabric.so.1 "$bin/rdmx-info" \
        >"$tmp/nolib" 2>&1 || true
    grep -q "^  ofi:tcp  *not available (.*cannot load /nonexistent/libfabric.so.1" \
        "$tmp/nolib" || die "no word of the library it could not load: $(cat "$tmp/nolib")"
fi

# The server is gone: exit 3. A bad option: exit 2.
rc=0
"$bin/rdmx-info" --server "$addr" --timeout 500 >/dev/null 2>&1 || rc=$?
[ $rc -eq 3 ] || die "unreachable server: exit $rc, not 3"
rc=0
"$bin/rdmx-info" --no-such-option >/dev/null 2>&1 || rc=$?
[ $rc -eq 2 ] || die "bad option: exit $rc, not 2"
echo "rdmx_info: ok"
