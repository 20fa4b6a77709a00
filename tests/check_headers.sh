#!/usr/bin/env bash
# Every public header compiles on its own as C99 and as C++11 (-pedantic,
# warnings as errors), and every parameter struct starts with its
# uint64_t field_mask (docs/API.md).
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
inc="$top/include"
gen="${1:?usage: check_headers.sh GENERATED_INCLUDE_DIR, the include dir of a build}"
cc="${CC:-cc}"
cxx="${CXX:-c++}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0

for h in "$inc"/rdmx/*.h; do
    name="rdmx/$(basename "$h")"
    printf '#include <%s>\nint main(void) { return 0; }\n' "$name" >"$tmp/c.c"
    if ! "$cc" -std=c99 -pedantic -Wall -Wextra -Werror -I"$inc" -I"$gen" \
        -fsyntax-only "$tmp/c.c"; then
        echo "FAIL: $name does not compile alone as C99"
        fail=1
    fi
    printf '#include <%s>\nint main() { return 0; }\n' "$name" >"$tmp/c.cc"
    if ! "$cxx" -std=c++11 -pedantic -Wall -Wextra -Werror -I"$inc" -I"$gen" \
        -fsyntax-only "$tmp/c.cc"; then
        echo "FAIL: $name does not compile alone as C++11"
        fail=1
    fi
done

# Every "} rdmx_..._params_t;" in the headers, and every struct holding a
# field_mask, must be a params struct whose first member is the mask.
types=$(sed -n 's/^} *\(rdmx_[a-z0-9_]*_params_t\);.*/\1/p' "$inc"/rdmx/*.h)
[ -n "$types" ] || { echo "FAIL: no params structs found"; exit 1; }
n=$(grep -c 'uint64_t field_mask;' "$inc"/rdmx/*.h | awk -F: '{s+=$2} END {print s}')
m=$(echo "$types" | wc -l)
if [ "$n" -ne "$m" ]; then
    echo "FAIL: $n structs have a field_mask but $m are named *_params_t"
    fail=1
fi
{
    echo '#include <rdmx/rdmx.h>'
    echo '#include <stddef.h>'
    for t in $types; do
        echo "_Static_assert(offsetof($t, field_mask) == 0 &&"
        echo "               sizeof(((const $t *)0)->field_mask) == 8,"
        echo "               \"$t: field_mask first, 64 bits\");"
    done
    echo 'int main(void) { return 0; }'
} >"$tmp/mask.c"
if ! "$cc" -std=c11 -Wall -Werror -I"$inc" -I"$gen" -fsyntax-only "$tmp/mask.c"; then
    echo "FAIL: a params struct does not start with uint64_t field_mask"
    fail=1
fi
echo "$m params structs checked: $(echo $types)"
[ "$fail" -eq 0 ] && echo "headers: ok"
exit "$fail"
