#!/usr/bin/env bash
# Run libFuzzer targets one after another, each for SECONDS.
#   fuzz/run.sh DIR SECONDS TARGET...
# DIR holds fuzz_TARGET and seeds/TARGET (make -f fuzz/fuzz.mk fuzz). New
# inputs go to DIR/corpus/TARGET, which persists; a crash (sanitizer report
# or violated property) is saved under DIR/artifacts/ and fails the run.
set -euo pipefail
dir=$1 seconds=$2
shift 2

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

mkdir -p "$dir/artifacts"
for t in "$@"; do
  bin="$dir/fuzz_$t" log="$dir/$t.log"
  mkdir -p "$dir/corpus/$t"
  start=$(date +%s)
  if ! "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" \
       "$dir/corpus/$t" "$dir/seeds/$t" >"$log" 2>&1; then
    echo "fuzz: fuzz_$t FAILED; last lines of $log:" >&2
    tail -n 40 "$log" >&2
    echo "fuzz: reproduce with $bin $dir/artifacts/$t-<file>" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)
  corpus=$(find "$dir/corpus/$t" -type f | wc -l)
  echo "fuzz: fuzz_$t ok: $(( $(date +%s) - start )) s, ${runs:-?} runs," \
       "cov ${cov:-?}, corpus $corpus"
done
