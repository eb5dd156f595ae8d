"""croupier: deals the batches of one input pipeline to N distributed trainers.

Each batch goes to exactly one trainer, every trainer gets the same number per epoch, and the
order is a seeded, deterministic function of the job. See README.md and docs/.

Consumer feeds a trainer; local_cluster runs a dispatcher and producers on this machine;
create_job defines what they deal. The data layer (TFRecord files, tf.train.Example parsing,
record indexes, epoch plans, batches) is here too. Framework adapters: croupier.torch,
croupier.tf and croupier.jax.
"""
import os as _os
from typing import Any as _Any, Dict as _Dict
import sys as _sys

from croupier import errors

# TensorFlow loads its libraries with RTLD_GLOBAL, and they export a protobuf of their own: a
# module loaded after them would bind its protobuf calls to TensorFlow's and crash. The extension
# module therefore binds its own libraries (the system's protobuf and gRPC) first, with
# RTLD_DEEPBIND, so that croupier and tensorflow import in either order (tests/test_tf_op.py).
_flags = _sys.getdlopenflags()
_sys.setdlopenflags(_flags | getattr(_os, "RTLD_DEEPBIND", 0))
try:
    from croupier import _croupier  # noqa: F401
finally:
    _sys.setdlopenflags(_flags)

# The C++ library's log lines go through Python's logging from here on (croupier.logs).
from croupier import logs as _logs  # noqa: E402

_logs.install()

from croupier._croupier import (
    Batch,
    BytesColumn,
    EpochPlan,
    TFRecordReader,
    build_batch,
    index_records,
    parse_example,
    write_tfrecord,
)
from croupier.client import create_job, delete_job, get_job, status, submit_job
from croupier.cluster import LocalCluster, croupier_binary, local_cluster
from croupier.consumer import Consumer
from croupier.job import Job, JobSpec
from croupier.launcher import detect_rank_world
from croupier.map.rng import batch_rng, record_rng
from croupier.map.producer import ProduceOptions, produce
from croupier.stream.source import serve

__version__ = "0.1.0"


def decode_batch(records: _Any, features: str) -> _Dict[str, _Any]:
    """Decodes serialized tf.train.Examples into {feature name: array}.

    `features` is a spec string such as "image:bytes,label:int64,emb:float32[16],ids:int64[*]".
    Fixed-shape numeric features come back as arrays of shape [len(records), *shape] that are views
    of one contiguous batch buffer (no copy); bytes features as lists of bytes; variable-length
    features as a tuple (values, row_splits). build_batch(records, features).to_dict("buffer")
    gives bytes features as croupier.BytesColumn views instead.
    """
    return build_batch(list(records), features).to_dict()

__all__ = [
    "Batch",
    "BytesColumn",
    "Consumer",
    "Job",
    "JobSpec",
    "LocalCluster",
    "create_job",
    "croupier_binary",
    "delete_job",
    "get_job",
    "detect_rank_world",
    "local_cluster",
    "batch_rng",
    "produce",
    "ProduceOptions",
    "record_rng",
    "serve",
    "status",
    "submit_job",
    "EpochPlan",
    "TFRecordReader",
    "build_batch",
    "decode_batch",
    "errors",
    "index_records",
    "parse_example",
    "write_tfrecord",
]
