"""A torch.distributed trainer fed by croupier: one process per rank, gradients all-reduced by
DistributedDataParallel over gloo. Run it under torchrun (or any launcher that sets RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT), against a running croupier job:

    torchrun --nproc-per-node 4 examples/pytorch_ddp.py --dispatcher HOST:5050 --job train

The job's records need an int64 `id`, an int64 `label` (0-9) and a bytes `image`, as written by
`croupier synth`. The synthetic label is id % 10; the model sees the image's first bytes and a
one-hot of the id's last digit, so its loss falls as it learns that digit.

With --report FILE, each rank writes what it saw as JSON: per epoch, its steps, the record ids of
its batches in order, its mean loss and the epoch's wall time. scripts/demo_train.py checks those
reports against the plan.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from croupier.torch import CroupierIterableDataset

IMAGE_BYTES = 32


def features(batch):
    """The model's input: the image's first bytes scaled to [0, 1] and a one-hot of id % 10."""
    images = np.stack([np.frombuffer(b[:IMAGE_BYTES], dtype=np.uint8) for b in batch["image"]])
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    digit = torch.nn.functional.one_hot(batch["id"] % 10, 10).float()
    return torch.cat([x, digit], dim=1), batch["label"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dispatcher", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--report")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(IMAGE_BYTES + 10, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    # Rank and world come from the launcher's RANK and WORLD_SIZE.
    data = CroupierIterableDataset(args.dispatcher, args.job, timeout=120)
    report = {"rank": rank, "world": world, "epochs": []}
    for epoch in range(args.epochs):
        data.set_epoch(epoch)
        dist.barrier()
        start = time.monotonic()
        ids, losses = [], []
        for batch in data:
            x, y = features(batch)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients across ranks here
            optimizer.step()
            ids.append(batch["id"].tolist())
            losses.append(loss.item())
        dist.barrier()
        seconds = time.monotonic() - start
        mean = torch.tensor([float(np.mean(losses)) if losses else 0.0])
        dist.all_reduce(mean)
        report["epochs"].append({"epoch": epoch, "steps": len(ids), "ids": ids,
                                 "loss": mean.item() / world, "seconds": seconds})
        if rank == 0:
            print(f"[rank 0] epoch {epoch}: {len(ids)} steps, mean loss {mean.item() / world:.3f}",
                  flush=True)
    data.close()
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
