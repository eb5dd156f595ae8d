#!/bin/bash
# Runs two commands side by side, for `make demo` and `make test`:
#
#   scripts/beside.sh [--stop-if-interrupted] LOG WHAT -- BACKGROUND-COMMAND... -- \
#                     FOREGROUND-COMMAND...
#
# starts BACKGROUND-COMMAND with its output in LOG, runs FOREGROUND-COMMAND meanwhile with its
# output where it goes, then waits for the background and prints LOG after the foreground's output.
# A failed background command fails the script naming WHAT and LOG; otherwise the script returns
# the foreground's status. Uses: a tier's install while croupier compiles (the compile needs only
# the build tier, installed first), and the C++ tests and the type check while pytest runs (the
# tests wait much of their time; the cores are idle meanwhile).
# An interrupt (Ctrl-C, which reaches both) stops the foreground. With --stop-if-interrupted it
# stops the background command and every process it started too (the tests); without, the
# background runs to its end (an install: apt or pip stopped halfway leaves more to repair than it
# saves).
set -u
usage() {
  echo "usage: $0 [--stop-if-interrupted] LOG WHAT -- BACKGROUND-COMMAND... --" \
    "FOREGROUND-COMMAND..." >&2
  exit 2
}
stop_if_interrupted=0
if [[ ${1:-} == --stop-if-interrupted ]]; then
  stop_if_interrupted=1
  shift
fi
(( $# >= 6 )) && [[ $3 == -- ]] || usage
log=$1 what=$2
shift 3
background=()
while (( $# > 0 )) && [[ $1 != -- ]]; do
  background+=("$1")
  shift
done
(( ${#background[@]} > 0 && $# >= 2 )) || usage
shift
if (( stop_if_interrupted )); then
  # Its own process group, so that one signal reaches everything it started.
  setsid "${background[@]}" > "$log" 2>&1 &
  pid=$!
  trap 'kill -TERM -- -"$pid" 2>/dev/null; wait "$pid"; echo "$what: stopped" >&2; exit 130' \
    INT TERM
else
  "${background[@]}" > "$log" 2>&1 &
  pid=$!
fi
"$@"
foreground=$?
if ! wait "$pid"; then
  cat "$log"
  echo "$what failed (${background[*]}; its output above and in $log)" >&2
  exit 1
fi
cat "$log" >&2
exit "$foreground"
