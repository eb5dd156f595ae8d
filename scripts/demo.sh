#!/usr/bin/env bash
# make demo: N training processes that all-reduce their gradients, fed by one croupier pipeline.
# Writes a sample dataset, shows a record and the deal, then runs 4 torch.distributed trainers
# against a local cluster (a dispatcher and 2 producers) and checks exactly-once and equal steps on
# what the trainers received. Everything lands in demo-out/. Exits non-zero if a check fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${CROUPIER_BIN:-build/bin/croupier}
out=demo-out
rm -rf "$out"
step() { printf '\n== %s\n' "$*"; }
export CROUPIER_INDEX_DIR="$out/index"

step "1/4 writing a synthetic dataset: 20,000 records of id, label and a 2 KB image, in 8 files"
"$bin" synth --out "$out/data" --files 8 --records 20000 --image-bytes 2048

step "2/4 the first record"
"$bin" inspect "$out/data/part-00000-of-00008.tfrecord" --limit 1

step "3/4 the deal of epoch 0: batches of 64, 4 trainers, global shuffle, seed 1"
"$bin" plan --files "$out/data/*.tfrecord" --batch-size 64 --consumers 4 --seed 1 --steps 2 \
  --show-records 6

launcher=${DEMO_LAUNCHER:-torch}  # torch: torch.distributed over gloo; mpi: mpirun + mpi4py
step "4/4 training: 4 ranks ($launcher all-reduce) fed by 2 producers, 2 epochs"
.venv/bin/python scripts/demo_train.py "$out/data" --trainers 4 --producers 2 --epochs 2 \
  --work-dir "$out/train" --launcher "$launcher"
