#!/bin/sh
# rdmx-kvd --config and its systemd readiness (rdmx-kvd(8), docs/OPERATIONS.md):
# options from the file apply, the command line wins over them, bad files
# are refused with FILE:LINE and exit 2; with NOTIFY_SOCKET set, READY=1
# arrives once the server answers and STOPPING=1 on SIGTERM, then a clean
# exit; the installed units pass `systemd-analyze verify`; its threads
# carry names.
# Usage: kvd_config.sh SRCDIR BUILDDIR
set -eu
src=$1
build=$2
bin=$build/bin
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
. "$(dirname "$0")/lib.sh"

# --- the file applies, the command line wins -------------------------------
cat >"$tmp/kvd.conf" <<'CONF'
# a comment, then a blank line

listen = 127.0.0.1:0
memory = 8m
workers=1
  no-lambda = yes
metrics-listen = "127.0.0.1:0"
max-key 100
CONF
start_server rdmx-kvd "$bin/rdmx-kvd" --config "$tmp/kvd.conf" --memory 16m
line=$(wait_line "$tmp/rdmx-kvd.out" '/listening on/p') || die "no address"
echo "$line"
case "$line" in
*"memory 16 MiB, 1 workers"*"lambda off"*) ;;
*) die "config or command line not applied: $line" ;;
esac
wait_line "$tmp/rdmx-kvd.out" '/metrics on http/p' >/dev/null ||
    die "metrics-listen from the file not applied"
long=$(head -c 150 /dev/zero | tr '\0' k)
rc=0
"$bin/rdmx-kv" -s "$addr" put "$long" v >/dev/null 2>&1 || rc=$?
[ $rc -eq 2 ] || die "max-key 100 from the file: a 150-byte key gave $rc"
"$bin/rdmx-kv" -s "$addr" put shortkey v >/dev/null || die "put"
# its threads carry names (docs/OPERATIONS.md, "Threads")
names=$(cat /proc/"$srv"/task/*/comm | sort | tr '\n' ' ')
for want in rdmx-rpc-0 rdmx-kv-reclaim; do
    case " $names" in
    *" $want "*) ;;
    *) die "no thread named $want among: $names" ;;
    esac
done
case " $names" in
*" rdmx-rpc-1 "*) die "workers=1, but a thread is named rdmx-rpc-1" ;;
esac
stop_server
[ $server_rc -eq 0 ] || die "rdmx-kvd did not stop cleanly: $server_rc"
echo "ok: config applied, command line wins"

# --- bad files -------------------------------------------------------------
bad() { # CONTENT EXPECTED-TEXT
    printf '%s\n' "$1" >"$tmp/bad.conf"
    rc=0
    "$bin/rdmx-kvd" --config "$tmp/bad.conf" >"$tmp/bad.out" 2>&1 || rc=$?
    [ $rc -eq 2 ] || die "'$1': exit $rc, not 2"
    grep -q "$2" "$tmp/bad.out" || die "'$1': $(cat "$tmp/bad.out")"
    echo "ok: '$1' refused: $(head -n 1 "$tmp/bad.out")"
}
bad "no-such-option = 1" "bad.conf:1: unknown option 'no-such-option'"
bad "listen = 127.0.0.1:0
memory = 10" "memory '10'"
bad "no-lambda = maybe" "bad.conf:1: no-lambda: yes or no"
bad "memory =" "bad.conf:1: memory needs a value"
bad "config = /etc/passwd" "unknown option 'config'"
rc=0
"$bin/rdmx-kvd" --config "$tmp/none.conf" >/dev/null 2>&1 || rc=$?
[ $rc -eq 2 ] || die "missing config file: exit $rc"

# --- readiness: sd_notify ---------------------------------------------------
if grep -q "sd_notify" "$bin/rdmx-kvd" 2>/dev/null ||
    nm -D "$bin/rdmx-kvd" 2>/dev/null | grep -q sd_notify; then
    python3 - "$bin" "$tmp" <<'PY' || die "sd_notify readiness"
import os, signal, socket, subprocess, sys, time
bin, tmp = sys.argv[1], sys.argv[2]
path = os.path.join(tmp, "notify")
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(20)
env = dict(os.environ, NOTIFY_SOCKET=path)
p = subprocess.Popen([bin + "/rdmx-kvd", "-l", "127.0.0.1:0", "-w", "1",
                      "-m", "4m"], env=env, stdout=subprocess.PIPE, text=True)
try:
    ready = msg = s.recv(4096).decode()
    assert "READY=1" in msg, msg
    # Ready means serving: the address was printed before, and answers.
    line = p.stdout.readline()
    assert "listening on" in line, line
    addr = line.split("listening on ")[1].split()[0]
    assert "STATUS=listening on " + addr in msg, (msg, addr)
    r = subprocess.run([bin + "/rdmx-kv", "-s", addr, "put", "k", "v"],
                       capture_output=True)
    assert r.returncode == 0, r
    p.send_signal(signal.SIGTERM)
    msg = s.recv(4096).decode()
    assert "STOPPING=1" in msg, msg
    assert p.wait(timeout=20) == 0
    print("ok: %s; then %s; exit 0" % (ready.replace("\n", " "),
                                       msg.strip()))
finally:
    if p.poll() is None:
        p.kill()
PY
else
    echo "rdmx-kvd built without libsystemd: readiness not checked" >&2
    skipped=1
fi

# --- the units ---------------------------------------------------------------
if command -v systemd-analyze >/dev/null; then
    for unit in rdmx-kvd.service rdmx-kvd@.service; do
        # The unit as installed, its rdmx-kvd this build's.
        sed "s|^ExecStart=[^ ]*/rdmx-kvd |ExecStart=$bin/rdmx-kvd |" \
            "$build/systemd/$unit" >"$tmp/$unit"
        grep -q "^Type=notify" "$tmp/$unit" || die "$unit: not Type=notify"
        verify=$unit
        [ "$unit" = rdmx-kvd@.service ] && {
            cp "$tmp/$unit" "$tmp/rdmx-kvd@test.service"
            verify=rdmx-kvd@test.service
        }
        out=$(cd "$tmp" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify \
            --man=no "./$verify" 2>&1) || die "$unit: $out"
        if echo "$out" | grep -i "rdmx-kvd"; then die "$unit: $out"; fi
        echo "ok: systemd-analyze verify $unit"
    done
fi
[ -z "${skipped:-}" ] || exit 77
echo "kvd_config: ok"
