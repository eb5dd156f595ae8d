#!/usr/bin/env bash
# Runs every fuzz target built in BUILD_DIR (default build-fuzz) for FUZZ_SECONDS each (default
# 20), one after the other, from its seed corpus fuzz/corpus/<target>. New inputs go to
# BUILD_DIR/corpus/<target>; crash, leak and timeout inputs to BUILD_DIR/artifacts/<target>/.
# Exits non-zero on the first target that fails. FUZZ_TARGETS="a b" runs only those.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build-fuzz}" && pwd)"
seconds="${FUZZ_SECONDS:-20}"
targets="${FUZZ_TARGETS:-tfrecord_reader example record_index batch_view frame journal}"
for t in $targets; do
  bin="$build/fuzz/${t}_fuzzer"
  [[ -x "$bin" ]] || { echo "fuzz: $bin is not built" >&2; exit 1; }
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  echo "fuzz: $t for ${seconds}s" >&2
  start=$SECONDS
  # -rss_limit_mb and -malloc_limit_mb: an input that makes the code allocate more than this is a
  # bug (a length field trusted before it is checked). -timeout: one input taking seconds is one.
  if ! nice "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t/" \
      "$build/corpus/$t" "$root/fuzz/corpus/$t" >"$build/artifacts/$t.log" 2>&1; then
    tail -60 "$build/artifacts/$t.log" >&2
    echo "fuzz: $t FAILED; the input is in $build/artifacts/$t/" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$build/artifacts/$t.log" | tail -2 >&2 || true
  echo "fuzz: $t passed in $((SECONDS - start))s" >&2
done
