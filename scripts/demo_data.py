"""Part of `make demo`: real data for the trainers to learn from.

Writes the handwritten digits that scikit-learn ships (1,797 images of 8x8 pixels, labels 0-9) as
tf.train.Example records {id: int64, label: int64, pixels: float32[64] in [0, 1]}: a training set
in TFRecord files for croupier to deal, and a held-out set (a fifth of each digit, never dealt) in
heldout.npz for the trainers to measure their accuracy on.

usage: .venv/bin/python scripts/demo_data.py OUT_DIR [--files 4] [--heldout 0.2] [--seed 0]
"""
import argparse
import pathlib
import struct
import sys

import numpy as np
from sklearn.datasets import load_digits

import croupier

FEATURES = "id:int64,label:int64,pixels:float32[64]"


def _varint(v):
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def example(i, label, pixels):
    """A serialized tf.train.Example {id, label, pixels} (protobuf wire format: Features is field 1
    of Example, each entry a map entry of name and Feature; int64_list is Feature's field 3 and
    float_list its field 2, both packed)."""
    def entry(name, feature):
        return _field(1, _field(1, name.encode()) + _field(2, feature))

    ints = lambda values: _field(3, _field(1, b"".join(_varint(v) for v in values)))  # noqa: E731
    floats = _field(2, _field(1, struct.pack(f"<{len(pixels)}f", *pixels)))
    return _field(1, entry("id", ints([i])) + entry("label", ints([label]))
                  + entry("pixels", floats))


def split(labels, fraction, seed):
    """Indices (train, heldout): `fraction` of each label held out, chosen by `seed`."""
    rng = np.random.default_rng(seed)
    train, heldout = [], []
    for label in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == label))
        n = int(round(len(idx) * fraction))
        heldout += idx[:n].tolist()
        train += idx[n:].tolist()
    return np.sort(train), np.sort(heldout)


def write(out_dir, files=4, heldout=0.2, seed=0):
    """Writes the files; returns (training records, held-out records)."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    digits = load_digits()
    pixels = (digits.data / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    train, held = split(labels, heldout, seed)
    # Record ids 0..n-1 in file order, as croupier numbers the records of a job.
    start = 0
    for f, part in enumerate(np.array_split(train, files)):
        records = [example(start + k, int(labels[i]), pixels[i].tolist())
                   for k, i in enumerate(part)]
        croupier.write_tfrecord(str(out_dir / f"digits-{f:05d}-of-{files:05d}.tfrecord"), records)
        start += len(part)
    np.savez(out_dir / "heldout.npz", pixels=pixels[held], labels=labels[held])
    return len(train), len(held)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--heldout", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n_train, n_held = write(args.out_dir, args.files, args.heldout, args.seed)
    print(f"scikit-learn's handwritten digits (8x8 pixels, labels 0-9): {n_train} training "
          f"records in {args.files} TFRecord files ({FEATURES}), {n_held} held out in "
          f"{args.out_dir}/heldout.npz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
