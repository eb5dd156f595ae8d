#!/usr/bin/env bash
# Runs every fuzz target built in BUILD_DIR (default build-asan) for FUZZ_SECONDS each (default
# 20), from its seed corpus fuzz/corpus/<target>, FUZZ_JOBS targets at a time (default: the
# machine's cores; each libFuzzer run is one process on one core). New inputs go to
# BUILD_DIR/corpus/<target>; crash, leak and timeout inputs to BUILD_DIR/artifacts/<target>/, the
# run's log to BUILD_DIR/artifacts/<target>.log. Exits non-zero if any target fails, after
# showing the end of each failed target's log. FUZZ_TARGETS="a b" runs only those.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build-asan}" && pwd)"
seconds="${FUZZ_SECONDS:-20}"
jobs="${FUZZ_JOBS:-$(nproc)}"
targets="${FUZZ_TARGETS:-tfrecord_reader example record_index batch_view frame journal token_index record_cache kept_counts}"
for t in $targets; do
  [[ -x "$build/fuzz/${t}_fuzzer" ]] || { echo "fuzz: $build/fuzz/${t}_fuzzer is not built" >&2; exit 1; }
done

# One target: its verdict is its exit status, its output a short summary on stderr.
fuzz_one() {
  local t=$1 start=$SECONDS
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  # The target's scratch file (fuzz_util.h) goes in a directory of its own, removed after the run:
  # libFuzzer ends some runs (a timeout, -max_total_time) without the exit handler that removes it.
  local scratch="$build/scratch/$t"
  rm -rf "$scratch" && mkdir -p "$scratch"
  echo "fuzz: $t for ${seconds}s" >&2
  # -rss_limit_mb and -malloc_limit_mb: an input that makes the code allocate more than this is a
  # bug (a length field trusted before it is checked). -timeout: one input taking seconds is one.
  if ! TMPDIR="$scratch" nice "$build/fuzz/${t}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$t/" "$build/corpus/$t" "$root/fuzz/corpus/$t" \
      >"$build/artifacts/$t.log" 2>&1; then
    rm -rf "$scratch"
    tail -60 "$build/artifacts/$t.log" >&2
    echo "fuzz: $t FAILED; the input is in $build/artifacts/$t/" >&2
    return 1
  fi
  rm -rf "$scratch"
  echo "fuzz: $t passed in $((SECONDS - start))s ($(grep -E '^stat::number_of_executed_units' \
    "$build/artifacts/$t.log" | tail -1 | tr -s ' '))" >&2
}

failed=0
running=0
for t in $targets; do
  if (( running >= jobs )); then
    wait -n || failed=1
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
while (( running > 0 )); do
  wait -n || failed=1
  running=$((running - 1))
done
if (( failed )); then
  echo "fuzz: at least one target failed (above)" >&2
fi
exit "$failed"
