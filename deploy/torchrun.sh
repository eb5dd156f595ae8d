#!/usr/bin/env bash
# Trainers under torchrun (torch.distributed.run), fed by a croupier service started on this host.
#
#   CROUPIER_FILES='/data/train/*.tfrecord' CROUPIER_FEATURES=image:bytes,label:int64 \
#     deploy/torchrun.sh 4 [TRAINER SCRIPT AND ARGS...]
#
# Starts a dispatcher and producers here (deploy/service.sh; or uses CROUPIER_DISPATCHER), creates
# the job for N trainers, runs `torchrun --nproc-per-node N SCRIPT` (default: deploy/trainer.py),
# and stops the service when torchrun ends. torchrun gives each process RANK and WORLD_SIZE, which
# croupier reads; CROUPIER_DISPATCHER and CROUPIER_JOB pass through the environment.
#
# On several nodes, start the service once (e.g. on the first node, with this script's
# service.sh, or by hand), export CROUPIER_DISPATCHER=HOST:PORT on every node, set
# CROUPIER_NODES to the node count and CROUPIER_TORCHRUN_ARGS to the rendezvous options
# ("--rdzv-backend c10d --rdzv-endpoint HOST:29400 --rdzv-id JOB"); N is then the total.
# CROUPIER_TORCHRUN defaults to "$CROUPIER_PYTHON -m torch.distributed.run" (the torchrun command).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
n=${1:?usage: deploy/torchrun.sh N [TRAINER SCRIPT AND ARGS...]}
shift
[[ $# -gt 0 ]] || set -- "$here/trainer.py"
nodes=${CROUPIER_NODES:-1}
if (( n % nodes != 0 )); then
  echo "torchrun.sh: $n trainers do not split evenly over $nodes nodes" >&2
  exit 2
fi
source "$here/service.sh"
croupier_start_service
croupier_create_job "$n"
# On one node without rendezvous options, --standalone picks a free local rendezvous port.
args=${CROUPIER_TORCHRUN_ARGS:-}
if [[ $nodes -eq 1 && -z $args ]]; then args=--standalone; fi
# shellcheck disable=SC2086  # the launcher command and its options are lists of words
${CROUPIER_TORCHRUN:-$CROUPIER_PYTHON -m torch.distributed.run} --nnodes "$nodes" \
  --nproc-per-node "$((n / nodes))" $args "$@"
