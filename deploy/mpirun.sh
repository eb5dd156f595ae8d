#!/usr/bin/env bash
# Trainers under OpenMPI's mpirun, fed by a croupier service started on this host.
#
#   CROUPIER_FILES='/data/train/*.tfrecord' CROUPIER_FEATURES=image:bytes,label:int64 \
#     deploy/mpirun.sh 4 [TRAINER COMMAND...]
#
# Starts a dispatcher and producers here (deploy/service.sh; or uses CROUPIER_DISPATCHER), creates
# the job for N trainers, runs `mpirun -n N TRAINER COMMAND` (default: $CROUPIER_PYTHON deploy/trainer.py),
# and stops the service when mpirun ends. Each rank's rank and world come from OpenMPI's
# OMPI_COMM_WORLD_RANK/SIZE; the dispatcher's address and the job reach the ranks as
# CROUPIER_DISPATCHER and CROUPIER_JOB, exported to every host with mpirun's -x.
# CROUPIER_MPIRUN_ARGS adds options to mpirun, e.g. "--hostfile hosts --map-by node"; unset, it is
# --oversubscribe, so that N ranks start on a machine with fewer cores (OpenMPI refuses otherwise).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
n=${1:?usage: deploy/mpirun.sh N [TRAINER COMMAND...]}
shift
source "$here/service.sh"
[[ $# -gt 0 ]] || set -- "$CROUPIER_PYTHON" "$here/trainer.py"
croupier_start_service
croupier_create_job "$n"
exports=(-x CROUPIER_DISPATCHER -x CROUPIER_JOB -x CROUPIER_EPOCHS)
for var in CROUPIER_AUTH_TOKEN CROUPIER_REPORT_DIR CROUPIER_TIMEOUT; do
  if [[ -n ${!var:-} ]]; then exports+=(-x "$var"); fi
done
# shellcheck disable=SC2086  # CROUPIER_MPIRUN_ARGS is a list of options
mpirun -n "$n" ${CROUPIER_MPIRUN_ARGS---oversubscribe} "${exports[@]}" "$@"
