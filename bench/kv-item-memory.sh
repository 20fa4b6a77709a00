#!/usr/bin/env bash
# kv-item-memory.sh — memory per item: rdmx-kvd against memcached, the same
# items stored into each, in one run.
#
# For each value size (default 100 B, then 10 B and 1 KiB as extra rows):
# start the server, take its figures, store N items (default 1,000,000)
# with KEY-byte keys (default 32: "k" and the item's number, zero-padded)
# and values of that size, check that every item is there and none was
# evicted, take the figures again, stop the server. One server runs at a
# time.
#
# Bytes per item is the memory a server must have to hold the N items
# without eviction, divided by N:
#   memcached  growth of its resident memory (Rss in /proc/PID/smaps) over
#              the fill, once its hash table stopped growing: slab pages,
#              the hash table and every other heap byte are malloc'd on
#              demand. Its own view (stats slabs total_malloced + stats
#              hash_bytes growth) is printed beside it.
#   rdmx-kvd   the value region in use, as its stats report it
#              (limit_maxbytes - free_bytes: every block spanned by an item,
#              headers included) plus the growth of its resident memory
#              outside the region (index, heap items, anything else). The
#              region is registered and pre-faulted at start, so Rss alone
#              would count all of it: the region's own mapping (the
#              process's largest) is left out of the Rss figures.
# The ratio is rdmx / memcached (<= 1: rdmx needs no more).
#
# Servers (127.0.0.1, started here, stopped at exit):
#   memcached  memcached -t 2 -m MB (MB: enough for the N items, no
#              eviction); filled over its text protocol, "set ... noreply"
#              pipelined from python3, then "mn" waits for the last one
#   rdmx-kvd   rdmx-kvd --workers 2 --memory SIZE (enough for the N items);
#              filled by bench/kv_fill.c (compiled here): rdmx_kv_mput
#              batches of 1024 items, values inline
# UCX_NET_DEVICES=lo for rdmx. No address but 127.0.0.1 is ever used.
#
# The figures are sizes, not timings: the machine's load does not change
# them. memcached is Debian's package, installed with apt-get when missing
# (sudo when not root) unless --no-install.
#
# Usage: bench/kv-item-memory.sh [--items N] [--key BYTES]
#          [--sizes 100,10,1k] [--keep] [--no-install]
# Environment: RDMX_KVD (default build/bin/), CC, MEMCACHED, PYTHON.
set -euo pipefail

NAME=kv-item-memory
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

ITEMS=1000000
KEY=32
SIZES="100,10,1k"
KEEP=0
INSTALL=1

while [ $# -gt 0 ]; do
    case "$1" in
    --items) need_value "$@"; ITEMS="$2"; shift ;;
    --key) need_value "$@"; KEY="$2"; shift ;;
    --sizes) need_value "$@"; SIZES="$2"; shift ;;
    --keep) KEEP=1 ;;
    --no-install) INSTALL=0 ;;
    -h | --help) usage; exit 0 ;;
    *) bad_arg "unknown argument '$1' (try --help)" ;;
    esac
    shift
done
is_count "$ITEMS" || bad_arg "bad --items"
is_count "$KEY" || bad_arg "bad --key"
[ "$KEY" -ge 8 ] && [ "$KEY" -le 250 ] || bad_arg "--key: 8..250 bytes"
[ "${#ITEMS}" -lt "$KEY" ] || bad_arg "--key too short for --items"

size_list "$SIZES" 65536 "sizes up to 64k"

RDMX_KVD=${RDMX_KVD:-$RDMX_BUILD/bin/rdmx-kvd}
PYTHON=${PYTHON:-python3}
[ -x "$RDMX_KVD" ] || die "$RDMX_KVD not found; run make"
[ -f "$RDMX_BUILD/lib/librdmx.so" ] || die "librdmx.so not found; run make"
command -v "$PYTHON" >/dev/null || die "$PYTHON not found"
install_missing memcached
MEMCACHED=${MEMCACHED:-$(command -v memcached || true)}
[ -n "$MEMCACHED" ] || die "memcached not found"

make_work_dir
loopback_ucx

"$CC" -O2 -I "$ROOT/include" -I "$RDMX_BUILD/include" -o "$WORK/kv_fill" \
    "$ROOT/bench/kv_fill.c" -L "$RDMX_BUILD/lib" \
    -Wl,-rpath,"$RDMX_BUILD/lib" -lrdmx 2>"$WORK/kv_fill.cc" ||
    die "kv_fill did not compile: $(cat "$WORK/kv_fill.cc")"

# --- figures -------------------------------------------------------------------
# "rss region_rss" of PID in bytes: its resident memory, and that of its
# largest mapping (rdmx-kvd's registered region).
rss_of() { # pid
    awk '/^[0-9a-f]+-[0-9a-f]+ / { m++ }
         /^Size:/ { size[m] = $2 }
         /^Rss:/ { rss[m] = $2; total += $2 }
         END { best = 0
               for (i in size) if (size[i] > size[best]) best = i
               printf "%d %d\n", total * 1024, rss[best] * 1024 }' \
        "/proc/$1/smaps"
}

stat_of() { # file name -> value of "name value" (also memcached's STAT)
    awk -v n="$2" '($1 == n) { print $2; f = 1 }
                   ($1 == "STAT" && $2 == n) { print $3; f = 1 }
                   END { if (!f) print "nan" }' "$1" | tr -d '\r'
}

mc_cmd() { # port command -> memcached's answer up to END
    "$PYTHON" - "$1" "$2" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(sys.argv[2].encode() + b"\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    d = s.recv(65536)
    if not d:
        break
    buf += d
sys.stdout.write(buf.decode())
EOF
}

mc_fill() { # port count key_bytes value_bytes
    "$PYTHON" - "$@" <<'EOF'
import socket, sys
port, n, klen, vlen = (int(a) for a in sys.argv[1:5])
s = socket.create_connection(("127.0.0.1", port))
val = b"v" * vlen
batch = []
for i in range(n):
    key = b"k%0*d" % (klen - 1, i)
    batch.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (key, vlen, val))
    if len(batch) == 1024:
        s.sendall(b"".join(batch))
        batch = []
s.sendall(b"".join(batch) + b"mn\r\n")
buf = b""
while not buf.endswith(b"MN\r\n"):
    d = s.recv(65536)
    if not d:
        sys.exit("memcached closed the connection: " + buf[-200:].decode())
    buf += d
if buf != b"MN\r\n":
    sys.exit("memcached answered: " + buf[:200].decode())
EOF
}

mc_stats() { # port file: memcached's "stats" and "stats slabs" into FILE
    { mc_cmd "$1" stats; mc_cmd "$1" "stats slabs"; } >"$2"
}

kvd_stats() { # port file: rdmx-kvd's stats into FILE
    "$RDMX_BUILD/bin/rdmx-kv" -s "127.0.0.1:$1" stats >"$2" 2>&1 ||
        die "rdmx-kv stats failed"
}

# Exit 1 unless the stats in FILE count ITEMS items and no eviction.
check_held() { # server file
    local it ev
    it=$(stat_of "$2" curr_items)
    ev=$(stat_of "$2" evictions)
    [ "$it" = "$ITEMS" ] && [ "$ev" = 0 ] ||
        die "$1 holds $it items ($ev evictions), not $ITEMS"
}

stop_server() { # pid
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    SERVER_PIDS=()
}

# --- one row per server: leaves bytes per item in RES ------------------------
run_memcached() { # value_bytes
    local v=$1 mb rb ra mal0 mal1 hb0 hb1
    mb=$(((ITEMS * (v + KEY + 160) * 13 / 10) / 1048576 + 64))
    start_memcached -m "$mb"
    sleep 0.5
    mc_stats "$MC_PORT" "$WORK/mc.before"
    read -r rb _ < <(rss_of "$MC_PID")
    mc_fill "$MC_PORT" "$ITEMS" "$KEY" "$v" ||
        die "memcached: the fill failed"
    # memcached grows its hash table in a thread of its own: wait for it
    sleep 1
    for _ in $(seq 120); do
        mc_cmd "$MC_PORT" stats >"$WORK/mc.after"
        [ "$(stat_of "$WORK/mc.after" hash_is_expanding)" = 0 ] && break
        sleep 0.5
    done
    mc_stats "$MC_PORT" "$WORK/mc.after"
    read -r ra _ < <(rss_of "$MC_PID")
    stop_server "$MC_PID"
    check_held memcached "$WORK/mc.after"
    mal0=$(stat_of "$WORK/mc.before" total_malloced)
    mal1=$(stat_of "$WORK/mc.after" total_malloced)
    hb0=$(stat_of "$WORK/mc.before" hash_bytes)
    hb1=$(stat_of "$WORK/mc.after" hash_bytes)
    RES=$(awk -v a="$ra" -v b="$rb" -v n="$ITEMS" \
        'BEGIN { printf "%.1f", (a - b) / n }')
    RES_NOTE=$(awk -v m0="$mal0" -v m1="$mal1" -v h0="$hb0" -v h1="$hb1" \
        -v n="$ITEMS" 'BEGIN { printf "stats: slabs %.1f + hash %.1f",
                               (m1 - m0) / n, (h1 - h0) / n }')
}

run_rdmx() { # value_bytes
    local v=$1 mem rb rrb ra rra lim fr0 fr1 heap region
    mem=$(((ITEMS * (v + KEY + 256)) / 1048576 + 64))
    start_kvd tcp --workers 2 --memory "${mem}m"
    sleep 0.5
    kvd_stats "$KVD_PORT" "$WORK/kvd.before"
    read -r rb rrb < <(rss_of "$KVD_PID")
    "$WORK/kv_fill" "127.0.0.1:$KVD_PORT" "$ITEMS" "$KEY" "$v" \
        >"$WORK/kv_fill.out" 2>&1 ||
        die "rdmx-kvd: the fill failed: $(cat "$WORK/kv_fill.out")"
    kvd_stats "$KVD_PORT" "$WORK/kvd.after"
    read -r ra rra < <(rss_of "$KVD_PID")
    stop_server "$KVD_PID"
    check_held rdmx-kvd "$WORK/kvd.after"
    lim=$(stat_of "$WORK/kvd.after" limit_maxbytes)
    fr0=$(stat_of "$WORK/kvd.before" free_bytes)
    fr1=$(stat_of "$WORK/kvd.after" free_bytes)
    region=$((fr0 - fr1))
    heap=$(((ra - rra) - (rb - rrb)))
    RES=$(awk -v r="$region" -v h="$heap" -v n="$ITEMS" \
        'BEGIN { printf "%.1f", (r + h) / n }')
    RES_NOTE=$(awk -v r="$region" -v h="$heap" -v n="$ITEMS" -v l="$lim" \
        'BEGIN { printf "region %.1f + heap %.1f (region %d MiB)",
                 r / n, h / n, l / 1048576 }')
}

echo "# kv-item-memory: $ITEMS items, ${KEY} B keys; bytes per item = the"
echo "# memory a server needs to hold them (see the header of this script)"
echo "# rdmx $(tree_at "$ROOT") (rdmx-kvd: $RDMX_KVD);" \
    "memcached $("$MEMCACHED" -V | cut -d' ' -f2)"
printf "%-8s %12s %12s %7s   %s\n" value memcached rdmx-kvd ratio detail
for v in $SIZE_LIST; do
    run_memcached "$v"
    mc=$RES
    mc_note=$RES_NOTE
    run_rdmx "$v"
    rd=$RES
    rd_note=$RES_NOTE
    printf "%-8s %12s %12s %7s   memcached %s; rdmx %s\n" "${v}B" "$mc" \
        "$rd" "$(awk -v a="$rd" -v b="$mc" 'BEGIN { printf "%.2f", a / b }')" \
        "$mc_note" "$rd_note"
done
