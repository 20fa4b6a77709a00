#!/usr/bin/env bash
# Test the Debian packages `make deb` built (scripts/build-deb.sh): unpack
# them into a scratch root and run the installed programs and Python module
# from it, against the librdmx.so.0 inside that root.
#   scripts/test-deb.sh [DEB_DIR]      (default build-deb/)
#
# The packages are unpacked with `dpkg -x`, not installed with
# `dpkg --root`: --root needs a base system in the root (a dpkg database
# listing libc6, libucx0, python3, ... to satisfy the dependencies, and a
# shell for the maintainer scripts), which a scratch directory lacks. The
# dependencies are those of the build host, where the packages were built.
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
debs="$(cd "${1:-$top/build-deb}" && pwd)"
root="$(mktemp -d "${TMPDIR:-/tmp}/rdmx-deb.XXXXXX")"
trap 'rm -rf "$root"' EXIT
fail=0
check() { # check DESCRIPTION COMMAND...: run COMMAND, report, count failures
    local what=$1; shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

version="$(dpkg-parsechangelog -l "$top/debian/changelog" -S Version)"
arch="$(dpkg --print-architecture)"
multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH)"
for p in librdmx0 librdmx-dev rdmx-tools python3-rdmx; do
    deb="$debs/${p}_${version}_${arch}.deb"
    [ -f "$deb" ] || { echo "FAIL: $deb missing (make deb)"; exit 1; }
    dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|' >"$root/$p.list"
    dpkg -x "$deb" "$root/fs"
done
fs="$root/fs"
libdir="$fs/usr/lib/$multiarch"

# Each file in the package it belongs to.
in_pkg() { grep -qx -- "$2" "$root/$1.list"; }
check "librdmx0 has librdmx.so.0" in_pkg librdmx0 "/usr/lib/$multiarch/librdmx.so.0"
check "librdmx-dev has librdmx.so, rdmx.h, rdmx.pc, librdmx.7.gz" \
    bash -c "grep -qx /usr/lib/$multiarch/librdmx.so '$root/librdmx-dev.list' &&
             grep -qx /usr/include/rdmx/rdmx.h '$root/librdmx-dev.list' &&
             grep -qx /usr/lib/$multiarch/pkgconfig/rdmx.pc '$root/librdmx-dev.list' &&
             grep -qx /usr/share/man/man7/librdmx.7.gz '$root/librdmx-dev.list'"
for f in /usr/bin/rdmx-kvd /usr/bin/rdmx-kv /usr/bin/rdmx-perf \
    /usr/bin/rdmx-demo /usr/bin/rdmx-info /usr/share/man/man8/rdmx-kvd.8.gz \
    /usr/share/man/man1/rdmx-demo.1.gz /etc/rdmx/kvd.conf \
    /usr/share/doc/rdmx-tools/examples/kvd.conf; do
    check "rdmx-tools has $f" in_pkg rdmx-tools "$f"
done
check "rdmx-tools has rdmx-kvd.service and rdmx-kvd@.service" \
    bash -c "grep -q '/systemd/system/rdmx-kvd.service\$' '$root/rdmx-tools.list' &&
             grep -q '/systemd/system/rdmx-kvd@.service\$' '$root/rdmx-tools.list'"
check "python3-rdmx has the module" \
    grep -q '^/usr/lib/python3/dist-packages/rdmx\..*\.so$' "$root/python3-rdmx.list"
check "rdmx.pc leads pkg-config to the root's headers and library" \
    bash -c "inc=\$(PKG_CONFIG_PATH='$libdir/pkgconfig' pkg-config --variable=includedir rdmx) &&
             lib=\$(PKG_CONFIG_PATH='$libdir/pkgconfig' pkg-config --variable=libdir rdmx) &&
             [ -f \"\$inc/rdmx/rdmx.h\" ] && [ -e \"\$lib/librdmx.so\" ] &&
             [ \"\$(realpath \"\$lib\")\" = \"\$(realpath '$libdir')\" ]"
check "debian/librdmx0.symbols is scripts/gen-symbols.sh's output" \
    bash -c "'$top/scripts/gen-symbols.sh' | cmp -s - '$top/debian/librdmx0.symbols'"
check "the systemd unit runs /usr/bin/rdmx-kvd --config /etc/rdmx/kvd.conf" \
    grep -q '^ExecStart=/usr/bin/rdmx-kvd --config /etc/rdmx/kvd.conf$' \
    "$(find "$fs" -name rdmx-kvd.service)"

# Programs from the root, with the root's library first on the path.
export LD_LIBRARY_PATH="$libdir"
export UCX_NET_DEVICES=lo
resolved() { # resolved PROGRAM: the root's librdmx.so.0 is what it loads
    local deps
    deps="$(ldd "$1")" && grep -q "librdmx.so.0 => $libdir/librdmx.so.0 " <<<"$deps"
}
check "rdmx-demo loads the root's librdmx.so.0" resolved "$fs/usr/bin/rdmx-demo"
check "rdmx-info prints rdmx $version" \
    bash -c "'$fs/usr/bin/rdmx-info' --version | grep -qx 'rdmx-info (rdmx $version)'"
check "rdmx-demo's modes between two processes" \
    env DEMO_TIMEOUT="${DEMO_TIMEOUT:-30}" "$top/scripts/demo.sh" "$fs/usr/bin"
check "python3 imports rdmx from the root" \
    env -u PYTHONHOME PYTHONPATH="$fs/usr/lib/python3/dist-packages" \
    PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c "
import rdmx, sys
sys.exit(0 if rdmx.__file__.startswith('$fs/') else 1)"

[ "$fail" -eq 0 ] && echo "test-deb: all checks passed"
exit "$fail"
