"""NOT RUN HERE: Horovod 0.28.1 does not build on this machine. Its PyTorch extension is compiled
as C++14 and PyTorch 2.13's headers require C++17 (`#error C++17 or later compatible compiler is
required to use PyTorch.`); docs/integrations.md has the whole attempt. examples/mpi_allreduce.py
runs the same pattern with mpi4py, and is tested.

A Horovod + PyTorch trainer fed by croupier, for a Horovod build that works:

    horovodrun -np 4 python examples/horovod_pytorch.py --dispatcher HOST:5050 --job train

Rank and world come from the launcher (OMPI_COMM_WORLD_RANK/SIZE under horovodrun). The job's
records are those of `croupier synth` (id, label, image).
"""
import argparse

import torch
import horovod.torch as hvd

from croupier.torch import CroupierIterableDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dispatcher", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    hvd.init()
    data = CroupierIterableDataset(args.dispatcher, args.job, rank=hvd.rank(), world=hvd.size())
    model = torch.nn.Sequential(torch.nn.Linear(10, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for epoch in range(args.epochs):
        data.set_epoch(epoch)
        for batch in data:  # the same number of steps on every rank: no hang at the epoch's end
            x = torch.nn.functional.one_hot(batch["id"] % 10, 10).float()
            loss = torch.nn.functional.cross_entropy(model(x), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()  # Horovod all-reduces the gradients
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
