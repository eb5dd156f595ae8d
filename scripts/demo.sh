#!/usr/bin/env bash
# make demo: N training processes that all-reduce their gradients, fed by one croupier pipeline.
# Writes scikit-learn's handwritten digits as TFRecord files, shows a record and the deal, then runs
# 4 torch.distributed trainers against a local cluster (a dispatcher and 2 producers), checks
# exactly-once and equal steps on what the trainers received and the accuracy on held-out digits,
# and plots the loss per epoch. Everything lands in demo-out/. Exits non-zero if a check fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${CROUPIER_BIN:-build/bin/croupier}
out=demo-out
rm -rf "$out"
step() { printf '\n== %s\n' "$*"; }
export CROUPIER_INDEX_DIR="$out/index"

step "1/4 writing real data: the handwritten digits that scikit-learn ships, in 4 TFRecord files"
.venv/bin/python scripts/demo_data.py "$out/data" --files 4

step "2/4 the first record"
"$bin" inspect "$out/data/digits-00000-of-00004.tfrecord" --limit 1

step "3/4 the deal of epoch 0: batches of 16, 4 trainers, global shuffle, seed 1"
"$bin" plan --files "$out/data/*.tfrecord" --batch-size 16 --consumers 4 --seed 1 --steps 2 \
  --show-records 6

launcher=${DEMO_LAUNCHER:-torch}  # torch: torch.distributed over gloo; mpi: mpirun + mpi4py
step "4/4 training: 4 ranks ($launcher all-reduce) fed by 2 producers, 15 epochs"
.venv/bin/python scripts/demo_train.py "$out/data" --trainers 4 --producers 2 --epochs 15 \
  --batch-size 16 --work-dir "$out/train" --launcher "$launcher"
