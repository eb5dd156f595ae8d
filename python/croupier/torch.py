"""PyTorch adapter: a croupier feed as a torch.utils.data.IterableDataset.

    from croupier.torch import CroupierIterableDataset
    data = CroupierIterableDataset("HOST:5050", "train")   # rank and world from torchrun's env
    for epoch in range(epochs):
        data.set_epoch(epoch)
        for batch in data:          # {name: torch.Tensor}, writable copies of the batch
            ...

The dataset yields whole batches (croupier batches them), so give it to a DataLoader with
batch_size=None and num_workers=0, or iterate it directly: one consumer per rank lives in the
process that iterates. Each numeric feature is a tensor of its own dtype (torch.bool,
torch.int8 ... torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64). Bytes
features stay lists of bytes; variable-length features are (values, row_splits) tensors.
"""
from typing import Any, Dict, Iterator, Optional

import numpy as np
import torch
import torch.utils.data

from croupier.consumer import Consumer


def _tensor(array: np.ndarray) -> torch.Tensor:
    # The batch's arrays are read-only views of its buffer (over shared memory, of a read-only
    # mapping, where a write kills the process). PyTorch has no read-only tensors and training code
    # writes into its inputs, so a read-only array is copied into a tensor of its own.
    if not array.flags.writeable:
        array = array.copy()
    if array.dtype.name == "bfloat16":  # ml_dtypes.bfloat16, which torch.from_numpy does not take
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def to_tensors(batch: Dict[str, Any]) -> Dict[str, Any]:
    """{name: numpy array} -> {name: torch.Tensor}, each a writable copy of a read-only view."""
    out: Dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, np.ndarray):
            out[name] = _tensor(value)
        elif isinstance(value, tuple):  # (values, row_splits); bytes values stay a list
            out[name] = tuple(_tensor(v) if isinstance(v, np.ndarray) else v for v in value)
        else:
            out[name] = value
    return out


class CroupierIterableDataset(torch.utils.data.IterableDataset[Dict[str, Any]]):
    """One rank's batches of a croupier job, epoch by epoch (set_epoch chooses which).

    Arguments are those of croupier.Consumer; the consumer connects on the first iteration, in
    the process that iterates, and is reused for later epochs."""

    def __init__(self, dispatcher: str, job: str, rank: Optional[int] = None,
                 world: Optional[int] = None, **consumer_options: Any) -> None:
        super().__init__()
        self._args = (dispatcher, job, rank, world)
        self._options = consumer_options
        self._consumer: Optional[Consumer] = None
        self._epoch = 0

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            worker = torch.utils.data.get_worker_info()
            if worker is not None and worker.num_workers > 1:
                raise RuntimeError("a croupier dataset is one rank's feed: use num_workers=0 or 1")
            self._consumer = Consumer(*self._args, **self._options)
        return self._consumer

    def set_epoch(self, epoch: int) -> None:
        self._epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.consumer)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for batch in self.consumer.epoch(self._epoch):
            yield to_tensors(batch)

    def state_dict(self) -> Dict[str, Any]:
        return self.consumer.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.consumer.load_state_dict(state)
        self._epoch = int(state["epoch"])

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
