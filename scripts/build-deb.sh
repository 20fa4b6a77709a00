#!/usr/bin/env bash
# Build the Debian packages (debian/) into OUT_DIR (default build-deb/):
# copy the tree's files (tracked and new, not ignored) to OUT_DIR/src, run
# dpkg-buildpackage there (binary only, unsigned), and leave the .deb files
# and the .buildinfo/.changes in OUT_DIR. Nothing is written into the tree
# outside OUT_DIR. Called by `make deb`.
#   scripts/build-deb.sh [OUT_DIR]
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "${1:-$top/build-deb}" && cd "${1:-$top/build-deb}" && pwd)"
cd "$top"

if ! command -v dpkg-buildpackage >/dev/null || ! command -v dh >/dev/null; then
    echo "build-deb: needs dpkg-dev and debhelper (apt-get install dpkg-dev debhelper)" >&2
    exit 2
fi

rm -rf "$out/src" "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
mkdir -p "$out/src"
git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$out/src"

cd "$out/src"
dpkg-buildpackage -b -us -uc -j"${JOBS:-$(nproc)}"
ls -1 "$out"/*.deb
