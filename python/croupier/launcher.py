"""Rank and world size from the launcher that started this process.

Launchers and the variables they set, in the order they are read:

  OpenMPI (mpirun, horovodrun)   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
  Horovod (horovodrun --gloo)    HOROVOD_RANK, HOROVOD_SIZE
  Slurm (srun)                   SLURM_PROCID, SLURM_NTASKS
  torchrun, torch.distributed    RANK, WORLD_SIZE
  TensorFlow (TF_CONFIG)         task.index among the cluster's worker (and chief) tasks

Explicit arguments win over the environment. Two launchers that disagree, a value that is not a
number, a rank outside [0, world), or no value at all raise InvalidArgumentError naming the
variables.
"""
import json
import os
from typing import Mapping, Optional, Tuple

from croupier import errors

_PAIRS = (
    ("OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("Horovod", "HOROVOD_RANK", "HOROVOD_SIZE"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS"),
    ("torchrun", "RANK", "WORLD_SIZE"),
)


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise errors.InvalidArgumentError(f"{name}={env[name]!r} is not a whole number") from None


def _from_tf_config(env: Mapping[str, str]) -> Optional[Tuple[int, int]]:
    """(rank, world) from TF_CONFIG, or None. The chief, when there is one, is rank 0 and the
    workers follow it, as in MultiWorkerMirroredStrategy."""
    text = env.get("TF_CONFIG")
    if not text:
        return None
    try:
        config = json.loads(text)
        cluster = config["cluster"]
        task = config["task"]
        kind, index = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise errors.InvalidArgumentError(
            f"TF_CONFIG is not a cluster spec with a task type and index: {e}") from None
    chiefs = len(cluster.get("chief", []))
    workers = len(cluster.get("worker", []))
    if kind == "chief":
        return index, chiefs + workers
    if kind == "worker":
        return chiefs + index, chiefs + workers
    raise errors.InvalidArgumentError(
        f"TF_CONFIG task type {kind!r} takes no data; only 'chief' and 'worker' tasks are ranks")


def detect_rank_world(rank: Optional[int] = None, world: Optional[int] = None,
                      env: Optional[Mapping[str, str]] = None) -> Tuple[int, int]:
    """Returns (rank, world): the arguments where given, else the launcher's variables."""
    env = os.environ if env is None else env
    found = []  # (launcher, rank, world)
    for launcher, rank_var, world_var in _PAIRS:
        if rank_var in env and world_var in env:
            found.append((f"{launcher} ({rank_var}/{world_var})", _int(env, rank_var),
                          _int(env, world_var)))
    tf = _from_tf_config(env)
    if tf is not None:
        found.append(("TF_CONFIG", *tf))
    if rank is None or world is None:
        distinct = {(r, w) for _, r, w in found}
        if len(distinct) > 1:
            said = "; ".join(f"{name} says rank {r} of {w}" for name, r, w in found)
            raise errors.InvalidArgumentError(
                f"launchers disagree on this process's rank: {said}; pass rank= and world=")
        if not found:
            raise errors.InvalidArgumentError(
                "no rank and world size: pass rank= and world=, or run under a launcher that "
                "sets them (OMPI_COMM_WORLD_RANK/SIZE, HOROVOD_RANK/SIZE, SLURM_PROCID/NTASKS, "
                "RANK/WORLD_SIZE, TF_CONFIG)")
        _, env_rank, env_world = found[0]
        rank = env_rank if rank is None else rank
        world = env_world if world is None else world
    rank, world = int(rank), int(world)
    if world < 1 or not 0 <= rank < world:
        raise errors.InvalidArgumentError(f"rank {rank} is not in [0, world={world})")
    return rank, world
