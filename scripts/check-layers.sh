#!/usr/bin/env bash
# Layering rules, checked by `make test` (docs/CORE.md, "Layers"):
#  1. UCX's names (ucp_, ucs_, uct_ and their upper-case forms) appear only
#     in the UCX backend, src/core/ucx/; the rest of core speaks to it
#     through the operations table in src/core/transport.h. Comments count
#     too.
#  2. Only src/core/ includes core/internal.h; the layers above (src/rpc,
#     src/kv, src/lambda) and the tools use core/upper.h and the public
#     headers; only the backend includes core/ucx/ucx.h.
#  3. third_party/ (code derived from other projects) sits beside the
#     layers: rule 1 applies to it; of rdmx's private headers it includes
#     only the one its embedding layer declares for it (lua-5.4-safelib:
#     lambda/lambda_int.h); nothing in src/ or tools/ includes a file from
#     third_party/; every folder there has a README.md (upstream, version,
#     changes) and a LICENSE.
#  4. libfabric's names (fi_, FI_, fid_) and headers (<rdma/...>) appear only
#     in the libfabric backend, src/core/ofi/; only it includes its headers
#     (core/ofi/...).
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
  if hits=$(grep -n '#include.*third_party/' "$f"); then
    echo "check-layers: $f includes a file from third_party/:" >&2
    echo "$hits" | sed 's/^/  /' >&2
    status=1
  fi
  if grep -n '#include "core/ucx/' "$f" >/dev/null; then
    echo "check-layers: $f includes the UCX backend's header" >&2
    status=1
  fi
  case "$f" in src/core/ofi/*) ;; *)
    # (comment lines may name libfabric's tools: fi_info, fi_pingpong)
    if hits=$(grep -nE '\b(fi|FI|fid)_[A-Za-z0-9_]+|#include *<rdma/|#include "core/ofi/' "$f" |
        grep -vE '^[0-9]+:[[:space:]]*(\*|/\*|//)'); then
      echo "check-layers: $f uses libfabric outside src/core/ofi:" >&2
      echo "$hits" | sed 's/^/  /' >&2
      status=1
    fi ;;
  esac
  case "$f" in src/core/*) continue ;; esac
  if grep -n '#include "core/internal.h"' "$f" >/dev/null; then
    echo "check-layers: $f includes core/internal.h (use core/upper.h)" >&2
    status=1
  fi
done < <(find src tools -name '*.[ch]' | sort)

# Private headers each third_party folder may include (rule 3).
tp_allowed() {
  case "$1" in
    third_party/lua-5.4-safelib) echo 'lambda/lambda_int.h' ;;
  esac
}
for d in third_party/*/; do
  d=${d%/}
  [ -d "$d" ] || continue
  for doc in README.md LICENSE; do
    if [ ! -f "$d/$doc" ]; then
      echo "check-layers: $d has no $doc" >&2
      status=1
    fi
  done
  allowed=$(tp_allowed "$d")
  while IFS= read -r f; do
    if hits=$(grep -nE '\b(ucp|ucs|uct|UCP|UCS|UCT)_[A-Za-z0-9_]+' "$f"); then
      echo "check-layers: $f uses UCX names:" >&2
      echo "$hits" | sed 's/^/  /' >&2
      status=1
    fi
    while IFS= read -r inc; do
      [ -n "$inc" ] || continue
      if [ "$inc" != "$allowed" ]; then
        echo "check-layers: $f includes rdmx's $inc (allowed: ${allowed:-none})" >&2
        status=1
      fi
    done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]((util|core|rpc|kv|lambda)\/[^">]+)[">].*/\1/p' "$f")
  done < <(find "$d" -name '*.[ch]' | sort)
done
[ "$status" -eq 0 ] && echo "check-layers: ok (UCX only in src/core/ucx, libfabric only in src/core/ofi; third_party/ apart)"
exit "$status"
