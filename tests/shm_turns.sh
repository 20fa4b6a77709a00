#!/bin/sh
# Waiters without a polling slot take turns over shared memory
# (docs/CORE.md, "Taking turns"), between real processes: four KV client
# threads share one slot (RDMX_SPIN_SLOTS=1), so at least three of them
# wait without one at any time. They yield their CPU between passes
# instead of sleeping, so the client process makes few voluntary context
# switches (a sleep each): fewer than 0.05 per GET (0.003 here), where
# waiters that sleep at once made 0.32. RDMX_SPIN_US
# gives each wait 2 ms of turns before it would sleep, so a loaded
# machine does not turn slow answers into sleeps. Also checks that every
# GET of the run succeeded.
# Usage: shm_turns.sh BINDIR
set -eu
bin=$1
export UCX_NET_DEVICES=lo
tmp=$(mktemp -d)
srv=""
trap '[ -z "$srv" ] || kill $srv 2>/dev/null || true; rm -rf "$tmp"' EXIT
die() { echo "FAIL: $*" >&2; exit 1; }

"$bin/rdmx-kvd" -l 127.0.0.1:0 -w 1 -m 16m --transport shm \
    >"$tmp/srv.out" 2>&1 &
srv=$!
addr=""
for _ in $(seq 100); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$tmp/srv.out")
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || die "server did not start: $(cat "$tmp/srv.out")"

# The bench as a child of python3, which reports the child's voluntary
# context switches (all its threads) after its JSON line.
RDMX_SPIN_SLOTS=1 RDMX_SPIN_US=2000 python3 - "$bin/rdmx-kv" "$addr" \
    >"$tmp/out" 2>"$tmp/err" <<'EOF' || die "bench: $(cat "$tmp/err")"
import resource, subprocess, sys
r = subprocess.run([sys.argv[1], "-s", sys.argv[2], "--transport", "shm",
                    "bench", "--op", "get", "--size", "100", "--keys", "10",
                    "--threads", "4", "--seconds", "1", "--json"],
                   stdout=subprocess.PIPE, text=True)
if r.returncode != 0:
    sys.exit("rdmx-kv bench exited with %d" % r.returncode)
lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
print(lines[-1])
print("nvcsw", resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw)
EOF
field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" "$tmp/out"; }
ops=$(field ops)
errors=$(field errors)
nvcsw=$(sed -n 's/^nvcsw //p' "$tmp/out")
[ -n "$ops" ] && [ -n "$nvcsw" ] || die "unexpected output: $(cat "$tmp/out")"
echo "4 threads, 1 slot, shm: $ops GETs, $errors errors," \
    "$nvcsw voluntary context switches"
[ "$errors" = 0 ] || die "$errors GETs failed"
[ "$ops" -gt 1000 ] || die "only $ops GETs in 1 s"
awk -v c="$nvcsw" -v n="$ops" 'BEGIN { exit !(c < 0.05 * n) }' ||
    die "$nvcsw voluntary switches in $ops GETs: waiters without a slot sleep"
echo "ok"
