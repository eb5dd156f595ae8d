#!/bin/bash
# Installs a tier's packages while croupier compiles, for `make demo` and `make test`:
#
#   scripts/install_while_building.sh TIER LOG WHAT -- BUILD-COMMAND...
#
# runs `scripts/bootstrap.sh TIER` in the background, its output in LOG, while BUILD-COMMAND runs
# (the compile needs only the build tier, which the caller installed first), and waits for both. A
# failed install prints LOG and fails naming WHAT; a failed build returns the build's status;
# otherwise LOG is printed and the script succeeds.
set -u
if (( $# < 5 )) || [[ $4 != -- ]]; then
  echo "usage: $0 TIER LOG WHAT -- BUILD-COMMAND..." >&2
  exit 2
fi
tier=$1 log=$2 what=$3
shift 4
bash "$(dirname "$0")/bootstrap.sh" "$tier" > "$log" 2>&1 &
installer=$!
"$@"
built=$?
if ! wait "$installer"; then
  cat "$log"
  echo "$what failed to install (scripts/bootstrap.sh $tier; its output above and in $log)" >&2
  exit 1
fi
cat "$log" >&2
exit "$built"
