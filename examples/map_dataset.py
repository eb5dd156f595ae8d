"""A PyTorch map-style Dataset with a random transform, dealt to 4 trainers by croupier.

    .venv/bin/python examples/map_dataset.py [--images 512] [--workers 2]

It writes small JPEG images (made here with PIL), defines a `Dataset` whose __getitem__ decodes
one, and a transform that crops and flips it at random with the generator croupier gives it. A
local cluster (a dispatcher) runs; `croupier.produce` makes the job's batches in worker
processes; 4 trainers (threads here, processes or hosts in a real run: torchrun, srun, mpirun)
each read their rank's batches through `croupier.torch.CroupierIterableDataset`. At the end it
checks that every image came exactly once per epoch and that every trainer took the same number
of steps, and prints what each epoch dealt.
"""
import argparse
import io
import pathlib
import tempfile
import threading

import numpy as np
import torch
from PIL import Image

import croupier
from croupier.torch import CroupierIterableDataset

SIZE, CROP = 40, 32


def write_images(folder, count):
    """`count` JPEG images of SIZE x SIZE pixels, each a function of its index."""
    rng = np.random.default_rng(0)
    for i in range(count):
        pixels = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:05d}.jpg", quality=90)


class JpegFolder(torch.utils.data.Dataset):
    """Record i: the i-th image of a folder, decoded, with its index and a label."""

    def __init__(self, folder):
        self.paths = sorted(pathlib.Path(folder).glob("*.jpg"))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        image = np.asarray(Image.open(io.BytesIO(self.paths[i].read_bytes())).convert("RGB"))
        return {"image": image, "label": np.int64(i % 10), "id": np.int64(i)}


def crop_and_flip(record, rng):
    """A random CROP x CROP crop, flipped left-right half the time: uint8 stays uint8."""
    y, x = rng.integers(0, SIZE - CROP + 1, size=2)
    image = record["image"][y:y + CROP, x:x + CROP]
    if rng.random() < 0.5:
        image = image[:, ::-1]
    return dict(record, image=np.ascontiguousarray(image))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    world, batch_size = 4, 16
    with tempfile.TemporaryDirectory() as tmp, croupier.local_cluster(producers=0) as cluster:
        folder = pathlib.Path(tmp)
        write_images(folder, args.images)
        producer = threading.Thread(target=croupier.produce, args=(
            JpegFolder(folder), cluster.address, "images"), kwargs=dict(
            batch_size=batch_size, consumers=world, epochs=args.epochs, seed=1,
            transform=crop_and_flip, workers=args.workers), daemon=True)
        producer.start()

        seen = [[[] for _ in range(world)] for _ in range(args.epochs)]

        def train(rank):
            data = CroupierIterableDataset(cluster.address, "images", rank=rank, world=world,
                                           timeout=60)
            for epoch in range(args.epochs):
                data.set_epoch(epoch)
                for batch in data:  # {name: torch.Tensor}; the images stay uint8
                    assert batch["image"].dtype == torch.uint8
                    assert tuple(batch["image"].shape) == (batch_size, CROP, CROP, 3)
                    seen[epoch][rank].append(batch["id"].tolist())

        trainers = [threading.Thread(target=train, args=(r,)) for r in range(world)]
        for t in trainers:
            t.start()
        for t in trainers:
            t.join()
        producer.join(60)
        for epoch, ranks in enumerate(seen):
            ids = [i for rank in ranks for batch in rank for i in batch]
            steps = [len(rank) for rank in ranks]
            assert len(set(steps)) == 1, f"epoch {epoch}: unequal steps {steps}"
            assert len(ids) == len(set(ids)) == steps[0] * world * batch_size, \
                f"epoch {epoch}: an image twice or missing"
            print(f"epoch {epoch}: {len(ids)} images, {steps[0]} steps on each of {world} "
                  "trainers, each image once")


if __name__ == "__main__":
    main()
