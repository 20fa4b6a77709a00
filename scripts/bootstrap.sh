#!/usr/bin/env bash
# Install the Debian packages rdmx needs to build, test and benchmark.
# Idempotent: installs only what is missing. Uses sudo when not root.
#   scripts/bootstrap.sh          install what is missing
#   scripts/bootstrap.sh --check  exit 0 if nothing is missing, 1 otherwise
set -euo pipefail

# libclang-rt-14-dev: libFuzzer and sanitizer runtimes for `make fuzz` (clang
# only recommends it, and recommends are not installed). libmicrohttpd-dev:
# the metrics endpoint; curl and prometheus (promtool) test it; groff-base
# checks the man pages; libsystemd-dev: rdmx-kvd's readiness under systemd.
# strace: tests/sleep_wake.sh counts a sleeping client's system calls.
# python3-*: the Python module and its tests (docs/PYTHON.md), and the ops
# tests' JSON and notify-socket checks.
packages=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libucx-dev ucx-utils libssl-dev liblua5.4-dev libmicrohttpd-dev
  libfabric-dev libfabric-bin
  iproute2 procps strace
  libsystemd-dev curl prometheus groff-base
  python3 python3-dev python3-numpy python3-pytest python3-torch
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if [ "${1:-}" = "--check" ]; then
  [ ${#missing[@]} -eq 0 ]
  exit
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then sudo="sudo"; else
    echo "bootstrap: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "bootstrap: installing ${missing[*]}"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
