#!/usr/bin/env bash
# Horovod trainers under horovodrun, fed by a croupier service started on this host.
#
#   CROUPIER_FILES='/data/train/*.tfrecord' CROUPIER_FEATURES=image:bytes,label:int64 \
#     CROUPIER_HOROVOD_HOSTS=node1:4,node2:4 deploy/horovodrun.sh 8 [TRAINER COMMAND...]
#
# Starts a dispatcher and producers here (deploy/service.sh; or uses CROUPIER_DISPATCHER), creates
# the job for N trainers, runs `horovodrun -np N -H HOSTS TRAINER COMMAND` (default: $CROUPIER_PYTHON
# deploy/trainer.py, which reads its rank from OMPI_COMM_WORLD_RANK/SIZE under horovodrun's MPI
# mode and from HOROVOD_RANK/SIZE under its Gloo mode), and stops the service when it ends.
# CROUPIER_HOROVOD_HOSTS defaults to localhost:N. CROUPIER_HOROVODRUN_ARGS adds options
# (e.g. --gloo or --mpi). docs/deploy.md's one-host block (--gloo, localhost:3) runs in
# tests/test_recipes.py; the Horovod examples run under horovodrun --gloo in tests/test_horovod.py
# (Horovod built by scripts/build_horovod.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
n=${1:?usage: deploy/horovodrun.sh N [TRAINER COMMAND...]}
shift
source "$here/service.sh"
[[ $# -gt 0 ]] || set -- "$CROUPIER_PYTHON" "$here/trainer.py"
croupier_start_service
croupier_create_job "$n"
# horovodrun passes this environment (CROUPIER_DISPATCHER, CROUPIER_JOB, ...) on to the workers.
# shellcheck disable=SC2086  # CROUPIER_HOROVODRUN_ARGS is a list of options
if [[ -z ${CROUPIER_HOROVODRUN:-} ]]; then  # horovodrun on PATH, else beside CROUPIER_PYTHON
  CROUPIER_HOROVODRUN=horovodrun
  if ! command -v horovodrun >/dev/null 2>&1 && [[ -x $(dirname "$CROUPIER_PYTHON")/horovodrun ]]; then
    CROUPIER_HOROVODRUN=$(dirname "$CROUPIER_PYTHON")/horovodrun
  fi
fi
"$CROUPIER_HOROVODRUN" -np "$n" -H "${CROUPIER_HOROVOD_HOSTS:-localhost:$n}" ${CROUPIER_HOROVODRUN_ARGS:-} "$@"
