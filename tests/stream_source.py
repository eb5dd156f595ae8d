"""A croupier.serve() process of the stream tests (tests/test_serve.py): serves job JOB on
ADDRESS from a function of the epoch that yields `batches` batches, batch g holding the ids
4g..4g+3 and a value derived from (epoch, g), so that what a batch holds can be checked.

usage: python tests/stream_source.py ADDRESS JOB BATCHES"""
import sys

import numpy as np

import croupier


def source(epoch, batches):
    for g in range(batches):
        ids = np.arange(4 * g, 4 * g + 4, dtype=np.int64)
        yield {"id": ids, "value": (ids * 10 + epoch).astype(np.float32)}


if __name__ == "__main__":
    address, job, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    croupier.serve(lambda epoch: source(epoch, batches), address, job, consumers=2, epochs=1,
                   batches_per_epoch=batches, timeout=30)
