"""A Horovod + PyTorch trainer fed by croupier: N Horovod processes, one croupier job, each batch
dealt to one of them. Run here under `horovodrun --gloo` and `mpirun`, and tested
(tests/test_horovod.py), with Horovod 0.28.1 built by scripts/build_horovod.sh:

    horovodrun -np 4 --gloo python examples/horovod_pytorch.py --dispatcher HOST:5050 --job train
    mpirun -np 4 python examples/horovod_pytorch.py --dispatcher HOST:5050 --job train

croupier reads the rank and world from the launcher (HOROVOD_RANK/SIZE under horovodrun --gloo,
OMPI_COMM_WORLD_RANK/SIZE under mpirun) and checks that they are Horovod's. The job's records are
those of `croupier synth` (id, label, image); the label is id % 10, learnt from a one-hot of the
id's last digit. The gradients are averaged by hvd.DistributedOptimizer, the initial weights
broadcast from rank 0 by hvd.broadcast_parameters.

With --report FILE, rank r writes FILE.r: per epoch its steps, the record ids of its batches in
order, the mean loss and the wall time (the format of examples/pytorch_ddp.py), and the final
weights, so that a test can check the deal and that every rank ends with the same model.
"""
import argparse
import json
import time

import torch
import horovod.torch as hvd

from croupier.torch import CroupierIterableDataset


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dispatcher", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--report")
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    data = CroupierIterableDataset(args.dispatcher, args.job, timeout=120)  # rank from launcher
    rank, world = data.consumer.rank, data.consumer.world
    if (rank, world) != (hvd.rank(), hvd.size()):
        raise SystemExit(f"croupier reads rank {rank} of {world} from the launcher, Horovod says "
                         f"{hvd.rank()} of {hvd.size()}")
    torch.manual_seed(rank)  # different initial weights per rank: the broadcast must fix them
    model = torch.nn.Linear(10, 10)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    report = {"rank": rank, "world": world, "epochs": []}
    for epoch in range(args.epochs):
        data.set_epoch(epoch)
        start = time.monotonic()
        ids, losses = [], []
        for batch in data:  # the same number of steps on every rank: no hang at the epoch's end
            x = torch.nn.functional.one_hot(batch["id"] % 10, 10).float()
            loss = torch.nn.functional.cross_entropy(model(x), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()  # Horovod has all-reduced the gradients by now
            ids.append(batch["id"].tolist())
            losses.append(loss.item())
        mean = hvd.allreduce(torch.tensor(sum(losses) / max(len(losses), 1)), name=f"loss{epoch}")
        report["epochs"].append({"epoch": epoch, "steps": len(ids), "ids": ids,
                                 "loss": mean.item(), "seconds": time.monotonic() - start})
        if rank == 0:
            print(f"[rank 0] epoch {epoch}: {len(ids)} steps, mean loss {mean.item():.3f}",
                  flush=True)
    data.close()
    report["weights"] = [p.detach().flatten().tolist() for p in model.parameters()]
    if args.report:
        with open(f"{args.report}.{rank}", "w") as f:
            json.dump(report, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
