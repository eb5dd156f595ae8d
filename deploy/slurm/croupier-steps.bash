# The steps both Slurm scripts share (croupier.sbatch, croupier-single.sbatch source this file):
# the settings and their defaults, the service's steps, the job, and the service's clean stop.
# Not a job script of its own. See docs/deploy.md, "Slurm".
#
# The service runs as two steps:
#   croupier-dispatcher  the dispatcher, one task on the batch script's node; it writes its host
#                        name and its port (--port 0 picks a free one, so two jobs on one node do
#                        not collide) to CROUPIER_SHARED
#   croupier-producers   one producer on each node of the service, each telling consumers its host
#                        name
# Each task writes its pid to CROUPIER_SHARED/pids. At the end (the trainers done, or an error)
# croupier_stop_service sends SIGTERM to the producers (a short step on their nodes runs `kill`),
# waits for them, then to the dispatcher, and waits for it: each stops cleanly and logs it. (Signals
# from srun or scancel would not do: srun turns SIGTERM into SIGKILL, and slurmstepd reports a
# SIGTERM from scancel as the step's cancellation.) A step that outlives CROUPIER_STOP_TIMEOUT is
# cancelled. A job cancelled with scancel is ended by Slurm itself: SIGTERM to every task, SIGKILL
# after the cluster's KillWait.

: "${SLURM_SUBMIT_DIR:?run this under sbatch}"
# The croupier command and the trainers' Python, on every node: the repository's build and virtual
# environment when the job is submitted from a checkout that has them, else the PATH's.
if [[ -z ${CROUPIER:-} ]]; then
  CROUPIER=croupier
  if [[ -x $SLURM_SUBMIT_DIR/build/bin/croupier ]]; then
    CROUPIER=$SLURM_SUBMIT_DIR/build/bin/croupier
  fi
fi
if [[ -z ${CROUPIER_PYTHON:-} ]]; then
  CROUPIER_PYTHON=python3
  if [[ -x $SLURM_SUBMIT_DIR/.venv/bin/python ]]; then
    CROUPIER_PYTHON=$SLURM_SUBMIT_DIR/.venv/bin/python
  fi
fi
: "${CROUPIER_TRAINER:=$CROUPIER_PYTHON $SLURM_SUBMIT_DIR/deploy/trainer.py}"  # once per task
: "${CROUPIER_SHARED:=$SLURM_SUBMIT_DIR/croupier-$SLURM_JOB_ID}"  # a folder every node sees
: "${CROUPIER_PORT:=0}"                           # the dispatcher's port; 0 picks a free one
: "${CROUPIER_JOB:=train}"
: "${CROUPIER_FILES:?set CROUPIER_FILES to the TFRecord files of the job, on a shared file system}"
: "${CROUPIER_FEATURES:?set CROUPIER_FEATURES, e.g. image:bytes,label:int64}"
: "${CROUPIER_BATCH_SIZE:=64}"
: "${CROUPIER_EPOCHS:=1}"
: "${CROUPIER_SEED:=0}"
: "${CROUPIER_STOP_TIMEOUT:=60}"                  # seconds a service step has to stop on SIGTERM
: "${CROUPIER_TRAINER_SRUN_ARGS:=}"               # more srun options for the trainers' step
# Exported for the steps; CROUPIER_AUTH_TOKEN, when set, reaches every process too.
export CROUPIER CROUPIER_SHARED CROUPIER_JOB CROUPIER_EPOCHS

croupier_steps=()      # the pids of the service's srun commands
croupier_service_srun=()  # the srun options that place one task on each node of the service

# croupier_start_service NODES [SRUN_OPTIONS...]
# Starts the dispatcher on this node and a producer on each of NODES nodes (with the srun options
# given, e.g. --het-group=0), waits until the dispatcher listens, and exports
# CROUPIER_DISPATCHER=HOST:PORT.
croupier_start_service() {
  local nodes=$1
  shift
  croupier_service_srun=("$@" --nodes="$nodes" --ntasks="$nodes" --ntasks-per-node=1 --overlap)
  mkdir -p "$CROUPIER_SHARED/pids"
  local port_file=$CROUPIER_SHARED/dispatcher.port host_file=$CROUPIER_SHARED/dispatcher.host
  rm -f "$port_file" "$host_file" "$CROUPIER_SHARED/dispatcher.address" "$CROUPIER_SHARED"/pids/*
  trap croupier_stop_service EXIT

  srun --job-name=croupier-dispatcher "$@" --nodes=1 --ntasks=1 \
    --nodelist="${SLURMD_NODENAME:?not set: run this under sbatch}" --overlap bash -c \
    'echo $$ >"$CROUPIER_SHARED/pids/dispatcher.pid"
     hostname >"$CROUPIER_SHARED/dispatcher.host.tmp" &&
     mv "$CROUPIER_SHARED/dispatcher.host.tmp" "$CROUPIER_SHARED/dispatcher.host" &&
     exec "$CROUPIER" dispatcher --work-dir "$CROUPIER_SHARED/dispatcher" --port "$0" \
       --bind 0.0.0.0 --port-file "$CROUPIER_SHARED/dispatcher.port"' "$CROUPIER_PORT" \
    >"$CROUPIER_SHARED/dispatcher.log" 2>&1 &
  croupier_steps+=($!)
  local i
  for ((i = 0; i < 600; i++)); do
    [[ -s $port_file && -s $host_file ]] && break
    if ! kill -0 "${croupier_steps[0]}" 2>/dev/null; then
      echo "croupier: the dispatcher exited: see $CROUPIER_SHARED/dispatcher.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  if [[ ! -s $port_file || ! -s $host_file ]]; then
    echo "croupier: the dispatcher did not start within 60 s: see $CROUPIER_SHARED/dispatcher.log" >&2
    exit 1
  fi
  export CROUPIER_DISPATCHER=$(<"$host_file"):$(<"$port_file")
  echo "$CROUPIER_DISPATCHER" >"$CROUPIER_SHARED/dispatcher.address"

  srun --job-name=croupier-producers "${croupier_service_srun[@]}" bash -c \
    'echo $$ >"$CROUPIER_SHARED/pids/producer-$SLURMD_NODENAME.pid"
     exec "$CROUPIER" producer --dispatcher "$CROUPIER_DISPATCHER" --bind 0.0.0.0 \
       --advertise-host "$(hostname)"' >"$CROUPIER_SHARED/producers.log" 2>&1 &
  croupier_steps+=($!)
}

# croupier_create_job CONSUMERS: the job, for that many trainers (the same job again on a resubmit).
croupier_create_job() {
  "$CROUPIER" job create --dispatcher "$CROUPIER_DISPATCHER" --name "$CROUPIER_JOB" \
    --files "$CROUPIER_FILES" --features "$CROUPIER_FEATURES" --batch-size "$CROUPIER_BATCH_SIZE" \
    --consumers "$1" --seed "$CROUPIER_SEED" --epochs "$CROUPIER_EPOCHS" --exist-ok
}

# croupier_wait_step NAME PID: waits, at most CROUPIER_STOP_TIMEOUT s, for the srun command PID
# to end; cancels the steps named NAME if it has not.
croupier_wait_step() {
  local name=$1 pid=$2 i ids
  for ((i = 0; i < CROUPIER_STOP_TIMEOUT * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "croupier: $name did not stop within $CROUPIER_STOP_TIMEOUT s of SIGTERM; cancelling it" >&2
    ids=$(squeue --noheader --steps --jobs "$SLURM_JOB_ID" --format '%i %j' 2>/dev/null |
      awk -v name="$name" '$2 == name { print $1 }')
    # shellcheck disable=SC2086  # one word per step id
    if [[ -n $ids ]]; then scancel $ids || true; fi
  fi
  wait "$pid" 2>/dev/null || true
}

# The EXIT trap: stops the producers (each hands its tasks back and leaves), then the dispatcher.
croupier_stop_service() {
  trap - EXIT
  if [[ ${#croupier_steps[@]} -gt 1 ]] && kill -0 "${croupier_steps[1]}" 2>/dev/null; then
    srun --job-name=croupier-stop "${croupier_service_srun[@]}" bash -c \
      'pid_file=$CROUPIER_SHARED/pids/producer-$SLURMD_NODENAME.pid
       if [[ -s $pid_file ]]; then kill -TERM "$(<"$pid_file")" 2>/dev/null; fi; true' || true
    croupier_wait_step croupier-producers "${croupier_steps[1]}"
  fi
  if [[ ${#croupier_steps[@]} -gt 0 ]] && kill -0 "${croupier_steps[0]}" 2>/dev/null; then
    if [[ -s $CROUPIER_SHARED/pids/dispatcher.pid ]]; then
      kill -TERM "$(<"$CROUPIER_SHARED/pids/dispatcher.pid")" 2>/dev/null || true
    fi
    croupier_wait_step croupier-dispatcher "${croupier_steps[0]}"
  fi
}
