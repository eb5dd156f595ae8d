"""The Horovod pattern without Horovod: trainers started by mpirun, gradients averaged with an MPI
all-reduce (mpi4py), each rank fed its own batches by croupier. Rank and world come from
OpenMPI's OMPI_COMM_WORLD_RANK/SIZE, as under horovodrun.

    mpirun -n 4 python examples/mpi_allreduce.py --dispatcher HOST:5050 --job train

The model is a linear softmax classifier in numpy over the 64 `pixels` of the handwritten digits
that scripts/demo_data.py writes. With --report FILE (rank r writes FILE.r) each rank records what
it received, in the same format as examples/pytorch_ddp.py, so scripts/demo_train.py can check it.
"""
import argparse
import os
import json
import time

import numpy as np
from mpi4py import MPI

import croupier


def features(batch):
    return batch["pixels"].astype(np.float64), batch["label"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The launch recipes (deploy/mpirun.sh) pass the service and the job in the environment.
    parser.add_argument("--dispatcher", default=os.environ.get("CROUPIER_DISPATCHER"),
                        required="CROUPIER_DISPATCHER" not in os.environ,
                        help="host:port [$CROUPIER_DISPATCHER]")
    parser.add_argument("--job", default=os.environ.get("CROUPIER_JOB"),
                        required="CROUPIER_JOB" not in os.environ, help="[$CROUPIER_JOB]")
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("CROUPIER_EPOCHS", 2)),
                        help="[$CROUPIER_EPOCHS, else 2]: the job's epochs")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--report")
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    weights = np.zeros((64, 10))
    feed = croupier.Consumer(args.dispatcher, args.job, timeout=120)  # rank/world from OpenMPI
    assert (feed.rank, feed.world) == (rank, world)
    report = {"rank": rank, "world": world, "epochs": []}
    for epoch in range(args.epochs):
        comm.Barrier()
        start = time.monotonic()
        ids, losses = [], []
        for batch in feed.epoch(epoch):
            x, y = features(batch)
            logits = x @ weights
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            losses.append(float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean()))
            p[np.arange(len(y)), y] -= 1
            grad = x.T @ p / len(y)
            comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)  # the all-reduce Horovod would do
            weights -= args.lr * grad / world
            ids.append(batch["id"].tolist())
        comm.Barrier()
        seconds = time.monotonic() - start
        loss = comm.allreduce(float(np.mean(losses)) if losses else 0.0) / world
        report["epochs"].append({"epoch": epoch, "steps": len(ids), "ids": ids, "loss": loss,
                                 "seconds": seconds})
        if rank == 0:
            print(f"[rank 0] epoch {epoch}: {len(ids)} steps, mean loss {loss:.3f}", flush=True)
    feed.close()
    if args.report:
        with open(f"{args.report}.{rank}", "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
