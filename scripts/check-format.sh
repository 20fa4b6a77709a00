#!/usr/bin/env bash
# Fail when a line changed since the commit in .ci/format-base (committed or
# not) is not as clang-format (.clang-format) would write it; print the diff
# that would fix it (apply with: git clang-format $(cat .ci/format-base)).
# The tree as a whole is not formatted: only changed lines are held to it.
# Called by `make format-check` and .ci/run.
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
cd "$top"
base="$(cat .ci/format-base)"
git cat-file -e "$base^{commit}" 2>/dev/null || {
    echo "check-format: .ci/format-base names $base, not a commit here" >&2
    exit 2
}
# git clang-format --diff exits 0 with or without a diff in some releases:
# judge by its output.
rc=0
out="$(git clang-format --diff "$base" -- include src tools tests python)" || rc=$?
[ "$rc" -le 1 ] || { echo "check-format: git clang-format failed ($rc)" >&2; exit 2; }
case "$out" in
"" | "no modified files to format" | "clang-format did not modify any files")
    echo "check-format: changed lines are formatted" ;;
*)
    printf '%s\n' "$out"
    echo "check-format: the lines above are not clang-format'ed" >&2
    exit 1 ;;
esac
