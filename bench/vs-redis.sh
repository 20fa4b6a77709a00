#!/usr/bin/env bash
# vs-redis.sh — rdmx-kvd against Redis on this machine, the same workload,
# interleaved, in one run: bench/vs-memcached.sh with --peers redis.
#
# Redis (redis-server from Debian, one thread, --save "" --appendonly no,
# on 127.0.0.1) is driven by bench/kv_peer_driver.c with hiredis, the loop
# of `rdmx-kv bench` (N client threads, one connection and one request in
# flight each, keys preloaded for GET, same value size and duration); not
# redis-benchmark, whose single event loop serves all its connections and
# whose key pattern differs. rdmx-kvd runs over shared memory and tcp.
# GET and SET x 100 B, 4 KiB, 1 MiB x 1 and 8 clients; each figure and the
# ratios rdmx/redis. Every option of bench/vs-memcached.sh applies
# (--quick, --rounds N, --seconds S, --transport, --ops, --sizes,
# --clients, --zero-copy, --keep, --no-install); a later --peers overrides
# this one (--peers redis,memcached puts memcached beside it and adds the
# targets, which are stated against memcached).
#
# Usage: bench/vs-redis.sh [options of bench/vs-memcached.sh]
set -euo pipefail

NAME=vs-redis
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    usage
    exit 0
fi
VS_NAME=vs-redis exec "$(dirname "$0")/vs-memcached.sh" --peers redis "$@"
