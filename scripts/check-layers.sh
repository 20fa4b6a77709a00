#!/usr/bin/env bash
# Layering rules, checked by `make test` (docs/CORE.md, "Layers"):
#  1. UCX's names (ucp_, ucs_, uct_ and their upper-case forms) appear only
#     in the UCX backend, src/core/ucx/; the rest of core speaks to it
#     through the operations table in src/core/transport.h. Comments count
#     too.
#  2. Only src/core/ includes core/internal.h; the layers above (src/rpc,
#     src/kv, src/lambda) and the tools use core/upper.h and the public
#     headers; only the backend includes core/ucx/ucx.h.
# tests/ and bench/ are exempt: raw-transport peers and baselines need UCX.
# Prints each offending line; exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
while IFS= read -r f; do
  case "$f" in src/core/ucx/*) continue ;; esac
  if hits=$(grep -nE '\b(ucp|ucs|uct|UCP|UCS|UCT)_[A-Za-z0-9_]+' "$f"); then
    echo "check-layers: $f uses UCX names outside src/core/ucx:" >&2
    echo "$hits" | sed 's/^/  /' >&2
    status=1
  fi
  if grep -n '#include "core/ucx/' "$f" >/dev/null; then
    echo "check-layers: $f includes the UCX backend's header" >&2
    status=1
  fi
  case "$f" in src/core/*) continue ;; esac
  if grep -n '#include "core/internal.h"' "$f" >/dev/null; then
    echo "check-layers: $f includes core/internal.h (use core/upper.h)" >&2
    status=1
  fi
done < <(find src tools -name '*.[ch]' | sort)
[ "$status" -eq 0 ] && echo "check-layers: ok (UCX only in src/core/ucx)"
exit "$status"
