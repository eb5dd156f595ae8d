# Sourced by the launch scripts of deploy/ (mpirun.sh, torchrun.sh, horovodrun.sh): starts a
# croupier dispatcher and producers on this host, creates the job, and stops what it started when
# the script exits. With CROUPIER_DISPATCHER already set it starts nothing and uses that service.
#
# Settings (environment; defaults in brackets):
#   CROUPIER            the croupier command [croupier on PATH, else this checkout's build/bin/croupier]
#   CROUPIER_PYTHON     the Python of the default trainer (and of torchrun) [this checkout's
#                       .venv/bin/python if it exists (make build), else python3]
#   CROUPIER_WORK_DIR   the dispatcher's work directory: its journal, and the logs [./croupier-work]
#   CROUPIER_PORT       the dispatcher's port [0: a free one, so that two services on one host
#                       do not collide; set one for a firewall]
#   CROUPIER_BIND       the interface the dispatcher and producers listen on [0.0.0.0]
#   CROUPIER_HOST       the name or address the trainers reach this host at [$(hostname)]
#   CROUPIER_PRODUCERS  producers to start [2]
#   CROUPIER_PRODUCER_THREADS  decoding threads per producer [0: the machine's cores]
#   CROUPIER_AUTH_TOKEN the token every process presents (read by croupier itself) [none]
# The job (created with --exist-ok, so a rerun reuses it; a rerun that finds it done, every epoch
# delivered, stops with an error instead of training 0 steps: use a new CROUPIER_JOB, delete the
# job, or start from an empty CROUPIER_WORK_DIR):
#   CROUPIER_JOB [train], CROUPIER_FILES (a glob; required), CROUPIER_FEATURES (required),
#   CROUPIER_BATCH_SIZE [64], CROUPIER_EPOCHS [1], CROUPIER_SEED [0], CROUPIER_SHUFFLE [global]
# The world size is the launch script's number of trainers.

if [[ -z ${CROUPIER:-} ]]; then
  if command -v croupier >/dev/null 2>&1; then
    CROUPIER=croupier
  else  # a checkout built with `make build`, whose command is not on PATH
    CROUPIER="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/bin/croupier"
  fi
fi
if [[ -z ${CROUPIER_PYTHON:-} ]]; then  # the checkout's venv (make build), else python3
  CROUPIER_PYTHON=python3
  croupier_venv="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin"
  if [[ -x $croupier_venv/python ]]; then CROUPIER_PYTHON=$croupier_venv/python; fi
fi
: "${CROUPIER_WORK_DIR:=$PWD/croupier-work}"
: "${CROUPIER_PORT:=0}"
: "${CROUPIER_BIND:=0.0.0.0}"
: "${CROUPIER_HOST:=$(hostname)}"
: "${CROUPIER_PRODUCERS:=2}"
: "${CROUPIER_PRODUCER_THREADS:=0}"
: "${CROUPIER_JOB:=train}"
: "${CROUPIER_BATCH_SIZE:=64}"
: "${CROUPIER_EPOCHS:=1}"
: "${CROUPIER_SEED:=0}"
: "${CROUPIER_SHUFFLE:=global}"
export CROUPIER_JOB CROUPIER_EPOCHS

croupier_pids=()

croupier_stop_service() {
  local pid
  for pid in "${croupier_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${croupier_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  croupier_pids=()
}

# Waits until FILE has contents, failing if process PID exits first or after 30 s.
croupier_wait_file() {
  local file=$1 pid=$2 i
  for ((i = 0; i < 300; i++)); do
    [[ -s $file ]] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "croupier: the process writing $file exited; see the logs in $CROUPIER_WORK_DIR" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "croupier: $file did not appear within 30 s" >&2
  return 1
}

# Starts the dispatcher and CROUPIER_PRODUCERS producers, and exports CROUPIER_DISPATCHER.
croupier_start_service() {
  if [[ -n ${CROUPIER_DISPATCHER:-} ]]; then
    echo "croupier: using the running dispatcher $CROUPIER_DISPATCHER"
    return 0
  fi
  trap croupier_stop_service EXIT
  trap "exit 130" INT
  trap "exit 143" TERM
  mkdir -p "$CROUPIER_WORK_DIR"
  local port_file=$CROUPIER_WORK_DIR/dispatcher.port i
  rm -f "$port_file"
  "$CROUPIER" dispatcher --work-dir "$CROUPIER_WORK_DIR/dispatcher" --port "$CROUPIER_PORT" \
    --bind "$CROUPIER_BIND" --port-file "$port_file" \
    >"$CROUPIER_WORK_DIR/dispatcher.log" 2>&1 &
  croupier_pids+=($!)
  croupier_wait_file "$port_file" "$!" || return 1
  export CROUPIER_DISPATCHER=$CROUPIER_HOST:$(<"$port_file")
  for ((i = 0; i < CROUPIER_PRODUCERS; i++)); do
    "$CROUPIER" producer --dispatcher "$CROUPIER_DISPATCHER" --bind "$CROUPIER_BIND" \
      --advertise-host "$CROUPIER_HOST" --threads "$CROUPIER_PRODUCER_THREADS" \
      >"$CROUPIER_WORK_DIR/producer$i.log" 2>&1 &
    croupier_pids+=($!)
  done
  echo "croupier: dispatcher at $CROUPIER_DISPATCHER, $CROUPIER_PRODUCERS producers," \
    "logs in $CROUPIER_WORK_DIR"
}

# Creates the job for WORLD trainers (or finds the identical one); fails, saying why, when the job
# found is done already (the saved state of an earlier run in the same work directory).
croupier_create_job() {
  local world=$1
  : "${CROUPIER_FILES:?set CROUPIER_FILES to the TFRecord files of the job (a glob)}"
  : "${CROUPIER_FEATURES:?set CROUPIER_FEATURES, e.g. image:bytes,label:int64}"
  "$CROUPIER" job create --dispatcher "$CROUPIER_DISPATCHER" --name "$CROUPIER_JOB" \
    --files "$CROUPIER_FILES" --features "$CROUPIER_FEATURES" \
    --batch-size "$CROUPIER_BATCH_SIZE" --consumers "$world" --seed "$CROUPIER_SEED" \
    --epochs "$CROUPIER_EPOCHS" --shuffle "$CROUPIER_SHUFFLE" --exist-ok
  local described
  described=$("$CROUPIER" job describe "$CROUPIER_JOB" --dispatcher "$CROUPIER_DISPATCHER" --json)
  if [[ $described == *'"state":"done"'* ]]; then
    echo "croupier: job '$CROUPIER_JOB' is done already: every epoch was delivered (an earlier" \
      "run's saved state, in $CROUPIER_WORK_DIR), so the trainers would take 0 steps. To train" \
      "again, set CROUPIER_JOB to a new name, delete the job (croupier job delete" \
      "$CROUPIER_JOB --dispatcher $CROUPIER_DISPATCHER), or start from an empty" \
      "CROUPIER_WORK_DIR" >&2
    return 3
  fi
}
