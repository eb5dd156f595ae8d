"""JAX adapter: a croupier job as global jax.Arrays, data-parallel over every process's devices.

    jax.distributed.initialize(...)                  # one process per host (or per rank)
    import croupier.jax
    feed = croupier.jax.Feed("HOST:5050", "train")   # rank = jax.process_index(), world = count
    for epoch in range(epochs):
        for batch in feed.epoch(epoch):              # {name: jax.Array}, global, split on "data"
            params = train_step(params, batch)       # a jit over the global batch

Conventions (docs/integrations.md#jax):
- One croupier rank per JAX process: rank jax.process_index() of jax.process_count(), so the
  processes' batches, concatenated in process order, are the step's global batch. A process's
  batch is split over its local devices (the local batch size must divide by their number).
- The default sharding is data_sharding(): a 1-D mesh "data" over jax.devices(), the batch axis
  split on it. Give Feed(sharding=...) a NamedSharding of your own mesh to change that.
- Numeric fixed-shape features become jax.Arrays of their dtype (bfloat16 included; without
  jax_enable_x64, JAX itself narrows 64-bit ones to 32 bits); bytes and variable-length features
  cannot, and are left out unless named in `features`, which is then an error naming the feature.
"""
from typing import Any, Dict, Iterator, Optional, Tuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from croupier import errors
from croupier.consumer import Consumer


def process_rank_world(rank: Optional[int] = None,
                       world: Optional[int] = None) -> Tuple[int, int]:
    """(rank, world) for this JAX process: jax.process_index() and jax.process_count() under
    jax.distributed; explicit values must agree with them. Without jax.distributed (one process)
    the launcher's variables decide, as for croupier.Consumer."""
    if jax.process_count() == 1:
        from croupier.launcher import detect_rank_world
        return detect_rank_world(rank, world)
    mine = (jax.process_index(), jax.process_count())
    if (rank is not None and int(rank) != mine[0]) or (world is not None and int(world) != mine[1]):
        raise errors.InvalidArgumentError(
            f"rank {rank} of {world} given, but this is JAX process {mine[0]} of {mine[1]}: "
            "a global array needs the croupier rank of each process to be its process index")
    return mine


def data_sharding(axis: str = "data") -> Any:
    """A NamedSharding that splits the batch axis over every device of every process (a 1-D mesh
    named `axis`, the devices in process order) and replicates the other axes."""
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return NamedSharding(Mesh(np.array(devices), (axis,)), PartitionSpec(axis))


def global_batch(batch: Dict[str, Any], sharding: Any = None,
                 features: Optional[Any] = None) -> Dict[str, Any]:
    """{name: jax.Array} from this process's batch {name: numpy array}: each array the global
    batch of every process's part (jax.make_array_from_process_local_data).

    features: the names to convert (default: every fixed-shape numeric feature)."""
    sharding = sharding or data_sharding()
    names = list(batch) if features is None else list(features)
    out = {}
    for name in names:
        if name not in batch:
            raise errors.InvalidArgumentError(f"the batch has no feature {name!r}")
        value = batch[name]
        if not isinstance(value, np.ndarray):
            if features is None:
                continue  # bytes or variable length: no jax.Array for it
            raise errors.InvalidArgumentError(
                f"feature {name!r} is bytes or of variable length: it has no jax.Array form")
        local_devices = len(sharding.addressable_devices)
        if value.shape[0] % local_devices:
            raise errors.InvalidArgumentError(
                f"feature {name!r}: a local batch of {value.shape[0]} does not split over this "
                f"process's {local_devices} devices; choose a batch size that divides by it")
        out[name] = jax.make_array_from_process_local_data(sharding, value)
    return out


class Feed:
    """This process's rank of a croupier job, each batch as global jax.Arrays.

    Arguments after `job` are those of croupier.Consumer (rank and world: process_rank_world),
    plus `sharding` (default data_sharding()) and `features` (global_batch). Not thread-safe."""

    def __init__(self, dispatcher: str, job: str, rank: Optional[int] = None,
                 world: Optional[int] = None, *, sharding: Any = None,
                 features: Optional[Any] = None, **consumer_options: Any) -> None:
        rank, world = process_rank_world(rank, world)
        self.sharding = sharding or data_sharding()
        self.features = features
        self.consumer = Consumer(dispatcher, job, rank, world, **consumer_options)

    def __len__(self) -> int:
        return len(self.consumer)

    def epoch(self, epoch: int) -> Iterator[Dict[str, Any]]:
        """Yields this rank's steps of `epoch`, each {name: jax.Array} (global_batch)."""
        for batch in self.consumer.epoch(epoch):
            yield global_batch(batch, self.sharding, self.features)

    def local_epoch(self, epoch: int) -> Iterator[Tuple[Dict[str, Any], Dict[str, Any]]]:
        """Yields (global batch, this process's numpy batch) per step: the numpy batch keeps the
        features that have no jax.Array form, and the record ids as this process read them."""
        for batch in self.consumer.epoch(epoch):
            yield global_batch(batch, self.sharding, self.features), batch

    def state_dict(self) -> Dict[str, Any]:
        return self.consumer.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.consumer.load_state_dict(state)

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> "Feed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
