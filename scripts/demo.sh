#!/usr/bin/env bash
# make demo: writes a sample dataset, indexes it, shows a record, prints the deal of an epoch and
# checks the deal's guarantees over two epochs. Everything lands in demo-out/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${CROUPIER_BIN:-build/bin/croupier}
out=demo-out
rm -rf "$out"
step() { printf '\n== %s\n' "$*"; }

step "1/5 writing a synthetic dataset: 20,000 records of id, label and a 3 KB image, in 4 files"
"$bin" synth --out "$out/data" --files 4 --records 20000 --image-bytes 3072

step "2/5 indexing the files (the index cache is $out/index)"
"$bin" index --cache-dir "$out/index" "$out"/data/*.tfrecord

step "3/5 the first record"
"$bin" inspect "$out/data/part-00000-of-00004.tfrecord" --limit 1

step "4/5 the deal of epoch 0: batches of 64, 4 consumers, global shuffle, seed 1"
"$bin" plan --files "$out/data/*.tfrecord" --cache-dir "$out/index" --batch-size 64 \
  --consumers 4 --seed 1 --steps 2 --show-records 6

step "5/5 decoding each consumer's batches of epochs 0 and 1, and checking the deal"
CROUPIER_INDEX_DIR="$out/index" .venv/bin/python scripts/demo_check.py "$out/data"
