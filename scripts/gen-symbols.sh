#!/usr/bin/env bash
# Print debian/librdmx0.symbols from src/librdmx.map: each version node and
# each of its functions, with the first package version that has it (the
# node's name: RDMX_0.1 -> 0.1.0).
#   scripts/gen-symbols.sh > debian/librdmx0.symbols
# scripts/test-deb.sh fails when the file in the tree differs from this.
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
echo "librdmx.so.0 librdmx0 #MINVER#"
awk '
    /^RDMX_[0-9.]+ *\{/ {
        node = $1; sub(/ *\{.*/, "", node)
        ver = node; sub(/^RDMX_/, "", ver); ver = ver ".0"
        print " " node "@" node " " ver
        next
    }
    node != "" && /^ *rdmx_[a-z0-9_]+;$/ {
        name = $1; sub(/;$/, "", name)
        print " " name "@" node " " ver
    }
    /^}/ { node = "" }' "$top/src/librdmx.map" | LC_ALL=C sort -s -k1,1
