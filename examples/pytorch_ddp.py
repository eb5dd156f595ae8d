"""A torch.distributed trainer fed by croupier: one process per rank, gradients all-reduced by
DistributedDataParallel over gloo. Run it under torchrun (or any launcher that sets RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT), against a running croupier job:

    torchrun --nproc-per-node 4 examples/pytorch_ddp.py --dispatcher HOST:5050 --job train

The job's records need an int64 `id`, an int64 `label` (0-9) and `pixels` (float32[64]): the
handwritten digits of 8x8 pixels that scripts/demo_data.py writes from scikit-learn's copy. The
model is a small perceptron (64-64-10).

Rank 0 prints one line per epoch (its steps, the mean loss over the ranks, the held-out accuracy,
the time), and each rank says where its report went at the end.

With --heldout FILE (an .npz of `pixels` and `labels`, never dealt), rank 0 measures the model's
accuracy on it after each epoch. With --report FILE, each rank writes what it saw as JSON: per
epoch, its steps, the record ids of its batches in order, its mean loss, the held-out accuracy and
the epoch's wall time. FILE may name the rank as {rank} (report-{rank}.json); without it, rank r
writes FILE.r (so that the ranks of one torchrun never write one file).
scripts/demo_train.py checks those reports against the plan.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from croupier.torch import CroupierIterableDataset

PIXELS = 64


def accuracy(model, heldout):
    """The fraction of the held-out images whose digit the model names."""
    with torch.no_grad():
        logits = model(torch.from_numpy(heldout["pixels"]))
    return float((logits.argmax(dim=1).numpy() == heldout["labels"]).mean())


def report_path(template, rank):
    """Where rank `rank` writes its report: the template with {rank} filled in, else FILE.rank."""
    return template.format(rank=rank) if "{rank}" in template else f"{template}.{rank}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dispatcher", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--heldout")
    parser.add_argument("--report")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(PIXELS, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # The learning rate falls to 0 over the run, so that the last epochs settle.
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    heldout = dict(np.load(args.heldout)) if args.heldout and rank == 0 else None
    # Rank and world come from the launcher's RANK and WORLD_SIZE.
    data = CroupierIterableDataset(args.dispatcher, args.job, timeout=120)
    report = {"rank": rank, "world": world, "epochs": []}
    for epoch in range(args.epochs):
        data.set_epoch(epoch)
        dist.barrier()
        start = time.monotonic()
        ids, losses = [], []
        for batch in data:
            loss = torch.nn.functional.cross_entropy(model(batch["pixels"]), batch["label"])
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients across ranks here
            optimizer.step()
            ids.append(batch["id"].tolist())
            losses.append(loss.item())
        schedule.step()
        dist.barrier()
        seconds = time.monotonic() - start
        mean = torch.tensor([float(np.mean(losses)) if losses else 0.0])
        dist.all_reduce(mean)
        report["epochs"].append({"epoch": epoch, "steps": len(ids), "ids": ids,
                                 "loss": mean.item() / world, "seconds": seconds})
        line = (f"epoch {epoch + 1}/{args.epochs}: {len(ids)} steps per rank, loss "
                f"{mean.item() / world:.4f}")
        if heldout is not None:
            report["epochs"][-1]["accuracy"] = accuracy(model.module, heldout)
            line += f", held-out accuracy {100 * report['epochs'][-1]['accuracy']:.1f}%"
        if rank == 0:
            print(f"{line}, {seconds:.1f} s", flush=True)
    data.close()
    if args.report:
        path = report_path(args.report, rank)
        with open(path, "w") as f:
            json.dump(report, f)
        print(f"rank {rank} of {world}: report in {path}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
