#!/bin/bash
# Runs two commands side by side, for `make demo` and `make test`:
#
#   scripts/beside.sh LOG WHAT -- BACKGROUND-COMMAND... -- FOREGROUND-COMMAND...
#
# starts BACKGROUND-COMMAND with its output in LOG, runs FOREGROUND-COMMAND meanwhile with its
# output where it goes, then waits for the background and prints LOG after the foreground's output.
# A failed background command fails the script naming WHAT and LOG; otherwise the script returns
# the foreground's status. Uses: a tier's install while croupier compiles (the compile needs only
# the build tier, installed first), and the C++ tests and the type check while pytest runs (the
# tests wait much of their time; the cores are idle meanwhile).
set -u
usage() {
  echo "usage: $0 LOG WHAT -- BACKGROUND-COMMAND... -- FOREGROUND-COMMAND..." >&2
  exit 2
}
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
"${background[@]}" > "$log" 2>&1 &
pid=$!
"$@"
foreground=$?
if ! wait "$pid"; then
  cat "$log"
  echo "$what failed (${background[*]}; its output above and in $log)" >&2
  exit 1
fi
cat "$log" >&2
exit "$foreground"
