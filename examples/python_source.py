"""An arbitrary Python generator served with croupier.serve() and read by 2 consumers, all on
this machine. Run it as it is:

    .venv/bin/python examples/python_source.py

The generator stands for any pipeline written in Python (augmentation, tokenization, a tf.data
pipeline's as_numpy_iterator(), a PyTorch DataLoader): one process runs it, and croupier deals its
batches to the trainers, each batch to exactly one, the same number to each.
"""
import threading

import numpy as np

import croupier

BATCHES, RANKS = 20, 2


def pipeline(epoch):
    """Epoch `epoch`'s batches: seeded by the epoch, so every run yields the same ones."""
    rng = np.random.default_rng(epoch)
    for step in range(BATCHES):
        tokens = rng.integers(0, 1000, size=(8, 16))
        yield {"tokens": tokens, "label": tokens.sum(axis=1) % 2, "step": np.full(8, step)}


def main():
    with croupier.local_cluster(producers=0) as cluster:
        served = {}
        server = threading.Thread(target=lambda: served.setdefault("batches", croupier.serve(
            pipeline, cluster.address, "python-job", consumers=RANKS, epochs=2,
            batches_per_epoch=BATCHES)))
        server.start()
        # In a real job each trainer is its own process; two feeds in one loop show the deal.
        feeds = []
        while len(feeds) < RANKS:
            try:
                feeds.append(cluster.consumer("python-job", len(feeds), RANKS))
            except croupier.errors.NotFoundError:  # serve() has not created the job yet
                threading.Event().wait(0.05)
        for epoch in range(2):
            for steps in zip(*(f.epoch(epoch) for f in feeds)):
                print(f"epoch {epoch}: " + ", ".join(
                    f"rank {r} got batch {int(b['step'][0])}" for r, b in enumerate(steps)))
        for f in feeds:
            f.close()
        server.join()
        print(f"served {served['batches']} batches")


if __name__ == "__main__":
    main()
