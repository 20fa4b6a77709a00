#!/usr/bin/env bash
# Regenerate changes.patch: the diff from Lua 5.4.4's pristine
# src/lstrlib.c and src/ltablib.c to the files in this folder.
#
#   third_party/lua-5.4-safelib/update-patch.sh LUA_SRC_DIR
#
# LUA_SRC_DIR is the src/ folder of an unpacked lua-5.4.4 source release;
# its two files are checked against the SHA-256 sums in README.md first.
# The patch applies with `patch -p1` inside the lua-5.4.4 folder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: $0 LUA_SRC_DIR" >&2; exit 2; }
src=$1

sums="a5a411ea67ab4523d6c710b838e934e127bd64464faaa3f7553bb10a4e96ac78  lstrlib.c
420bd58cc503793022c2f77e8b8f995d210c09861544820952cb358233b729d2  ltablib.c"
(cd "$src" && sha256sum --quiet -c - <<<"$sums") || {
    echo "$0: $src does not hold Lua 5.4.4's lstrlib.c and ltablib.c" >&2
    exit 1
}

{
    echo "Changes to Lua 5.4.4 (src/lstrlib.c, src/ltablib.c) for rdmx's"
    echo "lambda sandbox; README.md says why. Made by update-patch.sh;"
    echo "applies with 'patch -p1' in the lua-5.4.4 folder."
    echo
    for f in lstrlib.c ltablib.c; do
        diff -u --label "a/src/$f" --label "b/src/$f" \
            "$src/$f" "$here/$f" || [ $? -eq 1 ]
    done
} >"$here/changes.patch"
echo "wrote $here/changes.patch"
