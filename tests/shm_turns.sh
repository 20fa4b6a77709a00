#!/bin/sh
# Waiters without a polling slot take turns over shared memory
# (docs/CORE.md, "Taking turns"), between real processes: rdmx-kvd's two
# workers and four KV client threads share one slot (RDMX_SPIN_SLOTS=1),
# so all but one of them wait without one at any time. They yield their
# CPU between passes instead of sleeping, so client and server make few
# voluntary context switches (a sleep each): fewer than 0.05 per GET on
# each side (0.001 and 0.0001 here), where waiters that slept at once
# made 0.32 (client) and 1.0 (server workers). RDMX_SPIN_US gives each
# wait 2 ms of turns (a server worker 4 ms) before it would sleep, so a
# loaded machine does not turn slow answers into sleeps. Also checks
# that every GET of the run succeeded.
# Usage: shm_turns.sh BINDIR
set -eu
bin=$1
export UCX_NET_DEVICES=lo
. "$(dirname "$0")/lib.sh"

start_server rdmx-kvd env RDMX_SPIN_SLOTS=1 RDMX_SPIN_US=2000 \
    "$bin/rdmx-kvd" -l 127.0.0.1:0 -w 2 -m 16m --transport shm

# voluntary context switches of every thread of the server
switches() {
    awk '/^voluntary_ctxt_switches/ { s += $2 } END { print s + 0 }' \
        /proc/"$srv"/task/*/status
}
before=$(switches)

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
srv_nvcsw=$(($(switches) - before))
field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" "$tmp/out"; }
ops=$(field ops)
errors=$(field errors)
nvcsw=$(sed -n 's/^nvcsw //p' "$tmp/out")
[ -n "$ops" ] && [ -n "$nvcsw" ] || die "unexpected output: $(cat "$tmp/out")"
echo "4 threads, 1 slot, shm: $ops GETs, $errors errors;" \
    "voluntary context switches: client $nvcsw, server $srv_nvcsw"
[ "$errors" = 0 ] || die "$errors GETs failed"
[ "$ops" -gt 1000 ] || die "only $ops GETs in 1 s"
awk -v c="$nvcsw" -v n="$ops" 'BEGIN { exit !(c < 0.05 * n) }' ||
    die "$nvcsw voluntary switches in $ops GETs: waiters without a slot sleep"
awk -v c="$srv_nvcsw" -v n="$ops" 'BEGIN { exit !(c < 0.05 * n) }' ||
    die "the server's workers: $srv_nvcsw voluntary switches in $ops GETs"
echo "ok"
