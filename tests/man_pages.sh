#!/bin/sh
# The man pages (man/): `groff -man -ww -z` prints no warning for any of
# them, each tool has its page, and every long option a tool's --help shows
# is in its page.  Usage: man_pages.sh SRCDIR BINDIR
set -eu
src=$1
bin=$2
fail=0
command -v groff >/dev/null || { echo "FAIL: groff is not installed (scripts/bootstrap.sh)"; exit 1; }
for page in "$src"/man/*.[178]; do
    out=$(groff -man -ww -z "$page" 2>&1) || true
    if [ -n "$out" ]; then
        echo "FAIL: $page:"
        echo "$out"
        fail=1
    fi
done
for tp in rdmx-kvd.8 rdmx-kv.1 rdmx-perf.1 rdmx-demo.1 rdmx-info.1 librdmx.7; do
    [ -f "$src/man/$tp" ] || { echo "FAIL: no man/$tp"; fail=1; }
done
for tp in rdmx-kvd.8 rdmx-kv.1 rdmx-perf.1 rdmx-demo.1 rdmx-info.1; do
    tool=${tp%.*}
    page="$src/man/$tp"
    [ -f "$page" ] || continue
    opts=$("$bin/$tool" --help 2>&1 | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u)
    [ -n "$opts" ] || { echo "FAIL: $tool --help shows no option"; fail=1; }
    for o in $opts; do
        roff=$(printf '%s' "$o" | sed 's/-/\\-/g')
        if ! grep -qF -- "$roff" "$page"; then
            echo "FAIL: $tool: $o is not in man/$tp"
            fail=1
        fi
    done
    echo "$tool: $(echo "$opts" | wc -l) options in man/$tp"
done
exit $fail
