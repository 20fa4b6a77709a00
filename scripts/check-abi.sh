#!/usr/bin/env bash
# The ABI of librdmx.so is exactly the public API:
#   - every function declared in include/rdmx/*.h (not static inline) is
#     marked RDMX_API (default visibility);
#   - src/librdmx.map lists exactly those functions;
#   - the built library exports exactly those functions, each under a
#     version node of the map (RDMX_0.1, ...), and nothing else.
# Usage: scripts/check-abi.sh LIBRDMX_SO GENERATED_INCLUDE_DIR
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
lib=${1:?usage: check-abi.sh LIBRDMX_SO GENERATED_INCLUDE_DIR}
gen=${2:?usage: check-abi.sh LIBRDMX_SO GENERATED_INCLUDE_DIR}
map="$top/src/librdmx.map"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0

# Functions the headers declare, from the compiler's own parse: NAME and
# whether it carries default visibility (RDMX_API).
clang -Xclang -ast-dump -fsyntax-only -I "$top/include" -I "$gen" -x c \
    "$top/include/rdmx/rdmx.h" | awk '
    function flush() { if (name != "") print name, vis; name = "" }
    /^[|`]-/ {
        flush()
        if ($0 ~ /^[|`]-FunctionDecl / && $0 !~ / static( inline)?$/) {
            for (i = 1; i <= NF; i++)
                if ($i ~ /^rdmx_[a-z0-9_]+$/) { name = $i; break }
            vis = "hidden"
        }
        next
    }
    name != "" && /VisibilityAttr.* Default/ { vis = "default" }
    END { flush() }' | sort -u >"$tmp/decl"
[ -s "$tmp/decl" ] || { echo "FAIL: no function found in the headers"; exit 1; }
awk '$2 != "default" { print "FAIL: " $1 " is declared without RDMX_API" }' \
    "$tmp/decl" | tee "$tmp/novis"
[ -s "$tmp/novis" ] && fail=1
awk '{ print $1 }' "$tmp/decl" >"$tmp/headers"

# The map's global names.
sed -n 's/^ *\(rdmx_[a-z0-9_]*\);$/\1/p' "$map" | sort >"$tmp/map"

# What the library exports: defined dynamic symbols, with their versions.
nm -D --defined-only --with-symbol-versions "$lib" |
    awk '{ print $3 }' | grep -v '^RDMX_[0-9.]*$' |
    sort >"$tmp/exported_v" || true
sed 's/@.*//' "$tmp/exported_v" | sort >"$tmp/exported"
if grep -qv '@@\?RDMX_[0-9][0-9.]*$' "$tmp/exported_v"; then
    echo "FAIL: exported without a version node of the map:"
    grep -v '@@\?RDMX_[0-9][0-9.]*$' "$tmp/exported_v" | sed 's/^/  /'
    fail=1
fi

compare() { # a b what
    if ! diff -q "$tmp/$1" "$tmp/$2" >/dev/null; then
        echo "FAIL: $3"
        comm -23 "$tmp/$1" "$tmp/$2" | sed "s/^/  only in $1: /"
        comm -13 "$tmp/$1" "$tmp/$2" | sed "s/^/  only in $2: /"
        fail=1
    fi
}
compare headers map "src/librdmx.map differs from the headers' functions"
compare headers exported "librdmx.so exports other functions than the headers declare"

echo "$(wc -l <"$tmp/headers") public functions; $(wc -l <"$tmp/exported") exported"
[ "$fail" -eq 0 ] && echo "abi: ok"
exit "$fail"
