"""croupier.map.pipeline: the transform chain of a map job, what makes a batch from record indexes.

croupier.produce() (croupier.map.producer) runs the producers of a job whose records come from a
Python source; each makes its batches with a Pipeline (this module):

    dataset = MyDataset()              # anything with __len__ and __getitem__(i)
    croupier.produce(dataset, "HOST:5050", "train", batch_size=64, consumers=4, epochs=3,
                     seed=1, transform=augment, workers=4)

A "map" job is planned like a TFRecord job: the epoch plan (shuffle none, global or blocks, the
remainder policy, the deal, resuming with another number of consumers) names the records of
every batch by index, and a producer makes batch g of epoch e as:

    records  = [source[i] for i in plan(e).batch_records(g)]     # or source.get_many(ids)
    record_k = decode(record_k)                                   # per record, optional
    record_k = transform(record_k, rng(seed, e, i_k))             # per record, optional
    batch    = collate(records)                                   # croupier's, or the user's
    batch    = batch_transform(batch, rng(seed, e, g))            # per batch, optional

Each random generator is numpy's default_rng over SeedSequence([seed, epoch, index, kind]) (kind
0 for a record, 1 for a batch; croupier.map.rng), never global state. So what a batch holds is a function of the
plan, as for TFRecord jobs: any producer can make any batch, a producer killed mid-epoch has its
batches made again bit-identically by another (or by itself after a restart), and a checkpoint
resumes exactly. Several processes may call produce() for one job (on one machine or several):
each is a producer of the job, and the dispatcher spreads the tasks over them.

decode is deterministic (a function of the record, no generator), so what it makes can be kept:
with cache_bytes, a record cache on /dev/shm shared by the producer's processes
(croupier.map.record_cache) holds decode's outputs by record index, and the epochs after the first
run only the random part (transform, batch_transform).

The transforms run in `workers` worker processes, each making whole batches, each batch laid
out in a shared-memory slot that the producer serves from as it is (croupier.map.zygote), nothing
pickled; within a process, a batch's records are read, decoded and transformed on
`transform_threads` threads (croupier.map.record_threads). The workers are forks of a "zygote"
process that the producer forks at start (before any thread of croupier's starts), so that a
worker that dies (OOM-killed, a crash in a decoder) can be replaced by a new fork at any time;
the replacement makes the dead worker's batch again (croupier.map.pool says when a batch fails
instead, and when replacing stops; croupier.map.zygote holds the processes). workers=0 makes batches
in the producer's own threads (for code that releases the GIL).

tf_transform (a tf.data pipeline, croupier.map.tf_pipeline) replaces transform and collate: the
records of the batches the producer's threads ask for flow through one long-lived tf.data
pipeline in TensorFlow's runtime, with no worker process (forking once TensorFlow runs is
unsafe).
"""
import inspect
import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, \
    Tuple, Union

import numpy as np

from croupier import _croupier, errors
from croupier.columns import columns_of, default_collate
from croupier.errors import BatchError
from croupier.runtime.processes import describe
from croupier.map.record_cache import open_cache
from croupier.map.record_threads import RecordThreads
# The generators given to the transforms: croupier.map.rng's, importable from here as before.
from croupier.map.rng import batch_rng, record_rng
from croupier.map.spec import Spec, check_spec, spec_of, vary_as_spec

if TYPE_CHECKING:
    from croupier.map.tf_pipeline import TfTransform
    from typing_extensions import Buffer

__all__ = ["Pipeline", "default_collate", "record_rng", "batch_rng", "log"]

# The producer's logger, for the Pipeline, the worker pool and produce() alike: skipped records,
# worker deaths, the record cache's counts. Its name is the one docs/python.md gives users, from
# before the module moved into croupier.map.
log = logging.getLogger("croupier.pipeline")


def _takes_rng(fn: Callable[..., Any]) -> bool:
    """Whether `fn` takes a second positional argument (the random generator)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


class Pipeline:
    """What makes a map job's batches from record indexes: the source, the decode, the transforms
    and the collation. A pure function of (seed, epoch, batch, record indexes).

    decode(record) -> record (deterministic: a function of the record alone, no generator) runs
    on each record read from the source, before transform. With cache_bytes > 0, what it makes
    (the source's records themselves without decode) is kept in a RecordCache on /dev/shm of at
    most cache_bytes bytes, shared with the processes forked from this one, and a record found
    there is neither read nor decoded again (a /dev/shm with no room for even the cache's state
    leaves the cache out, with a warning: record_cache.open_cache). close() (or leaving a `with`
    block) removes the cache."""

    def __init__(self, source: Any, *, transform: Optional[Callable[..., Any]] = None,
                 batch_transform: Optional[Callable[..., Any]] = None,
                 collate: Optional[Callable[[List[Any]], Any]] = None,
                 names: Optional[Iterable[str]] = None, features: Optional[str] = None,
                 seed: int = 0, tf_transform: Optional[Callable[..., Any]] = None,
                 skip_failing_records: bool = False, decode: Optional[Callable[[Any], Any]] = None,
                 cache_bytes: Optional[int] = 0, transform_threads: Union[int, str] = 1) -> None:
        if not hasattr(source, "__getitem__") or not hasattr(source, "__len__"):
            raise errors.InvalidArgumentError(
                f"a map source needs __len__ and __getitem__(i); a {type(source).__name__} has "
                "not both (croupier.serve() serves iterables)")
        for name, fn in (("transform", transform), ("batch_transform", batch_transform),
                         ("collate", collate), ("tf_transform", tf_transform),
                         ("decode", decode)):
            if fn is not None and not callable(fn):
                raise errors.InvalidArgumentError(f"{name} must be callable, not "
                                                  f"{type(fn).__name__}")
        cache_bytes = int(cache_bytes or 0)
        if cache_bytes < 0:
            raise errors.InvalidArgumentError(f"cache_bytes must be 0 (no cache) or more, not "
                                              f"{cache_bytes}")
        self.source = source
        self.decode = decode
        self.transform = transform
        self.batch_transform = batch_transform
        self.collate = collate
        self.names = tuple(names) if names is not None else None
        self.features = features
        self.seed = int(seed)
        self.skip_failing_records = bool(skip_failing_records)
        self._record_rng = transform is not None and _takes_rng(transform)
        self._batch_rng = batch_transform is not None and _takes_rng(batch_transform)
        self._spec: Optional[Spec] = None if features is None else spec_of(features)
        self._threads = RecordThreads(transform_threads)
        self.tf_transform = tf_transform
        self._tf: Optional[TfTransform] = None
        if tf_transform is not None:
            if transform is not None or collate is not None or names is not None:
                raise errors.InvalidArgumentError(
                    "tf_transform replaces transform, collate and names (its outputs are "
                    "collated by croupier); give batch_transform for the batch")
            from croupier.map.tf_pipeline import TfTransform
            self._tf = TfTransform(tf_transform, self.seed)
        # Last, once nothing can fail: the cache's directory is removed by close().
        self._cache = open_cache(cache_bytes) if cache_bytes > 0 else None

    def __len__(self) -> int:
        return len(self.source)

    def set_features(self, features: str) -> None:
        """Sets the job's feature spec text, which every batch made from now on is checked
        against (produce() reads it off batch 0 when the caller gives none)."""
        self.features = features
        self._spec = spec_of(features)

    def cache_stats(self) -> Optional[Dict[str, Any]]:
        """The record cache's counts (RecordCache.stats(): hits, misses, bytes, records, ...),
        or None without a cache."""
        return None if self._cache is None else self._cache.stats()

    def close(self) -> None:
        """Removes the record cache, if any (in the process that made the pipeline; a fork of it
        only lets go of its handles). The pipeline makes batches without a cache afterwards."""
        cache, self._cache = self._cache, None
        if cache is not None:
            cache.close()
        if self._tf is not None:
            self._tf.close()  # ends the tf_transform's pipeline and its thread

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def read(self, ids: Sequence[int]) -> List[Any]:
        """The records `ids` of the source, in order."""
        get_many = getattr(self.source, "get_many", None)
        if get_many is not None:
            try:
                records = list(get_many(ids))
            except Exception as e:
                raise BatchError(f"records {_few(ids)}: {describe(e)}") from e
            if len(records) != len(ids):
                raise BatchError(f"get_many gave {len(records)} records for {len(ids)} indexes")
            return records
        return [self._read_one(i) for i in ids]

    def _read_one(self, i: int) -> Any:
        try:
            return self.source[int(i)]
        except Exception as e:
            raise BatchError(f"record {int(i)}: {describe(e)}") from e

    def load(self, ids: Sequence[int]) -> List[Any]:
        """The records `ids` as the transform takes them: read from the source and decoded, or
        found in the record cache (then neither read nor decoded)."""
        return self._load(ids, self._read_and_decode)

    def _load_one(self, i: int) -> Any:
        """Record i as load() gives it, read with source[i] (not get_many)."""
        return self._load([i], lambda ids: [self._decode_one(self._read_one(ids[0]), ids[0])])[0]

    def _load(self, ids: Sequence[int],
              make: Callable[[Sequence[int]], List[Any]]) -> List[Any]:
        if self._cache is None:
            return make(ids)
        return self._cache.load(ids, make)

    def _read_and_decode(self, ids: Sequence[int]) -> List[Any]:
        records = self.read(ids)
        if self.decode is None:
            return records
        return [self._decode_one(r, i) for r, i in zip(records, ids)]

    def _decode_one(self, record: Any, i: int) -> Any:
        if self.decode is None:
            return record
        try:
            return self.decode(record)
        except Exception as e:
            raise BatchError(f"record {int(i)}: the decode raised {describe(e)}") from e

    def batch_dict(self, epoch: int, g: int, ids: Any) -> Tuple[Dict[str, Any], Any]:
        """Batch g of `epoch`, of records `ids`, as a dict of columns (before the batch layout),
        and the indexes of the records it holds (`ids`, less those skipped)."""
        if self.skip_failing_records:
            records, ids = self._records_skipping(epoch, ids)
        else:
            records = self._records(epoch, ids)
        if self._tf is not None:
            batch, ids = self._tf_batch(records, epoch, ids)
        else:
            batch = self._collate(records)
        return self._batch_transform(batch, epoch, g), ids

    def _records(self, epoch: int, ids: Any) -> List[Any]:
        """The batch's records, loaded and (without tf_transform) transformed, the per-record work
        on the pipeline's transform threads, in order. A failure raises the error the serial
        order meets first: the first record that fails to read, else to decode, else to
        transform. With get_many or a record cache the batch's records are loaded at once, and
        only the transforms are spread."""
        transform = self._tf is None and self.transform is not None
        if self._cache is not None or hasattr(self.source, "get_many"):
            records = self.load(ids)
            if not transform:
                return records
            return self._threads.map(lambda k: self._transform_one(records[k], epoch, ids[k]),
                                     range(len(ids)))

        def one(k: int) -> Any:
            i, stage = ids[k], 0
            try:
                record = self._read_one(i)
                stage = 1
                record = self._decode_one(record, i)
                stage = 2
                return self._transform_one(record, epoch, i) if transform else record
            except BatchError as e:
                return _Failed(e, stage)

        out = self._threads.map(one, range(len(ids)))
        failed = [r for r in out if isinstance(r, _Failed)]
        if failed:
            raise min(failed, key=lambda f: f.stage).error  # the first of the earliest stage
        return out

    @property
    def transform_threads(self) -> Optional[int]:
        """The threads each batch's per-record work runs on: the setting, or what "auto" chose
        in this process (None while it measures)."""
        return self._threads.chosen

    def _transform_one(self, record: Any, epoch: int, i: int) -> Any:
        if self.transform is None:
            return record
        try:
            if self._record_rng:
                return self.transform(record, record_rng(self.seed, epoch, i))
            return self.transform(record)
        except Exception as e:
            raise BatchError(f"record {int(i)}: the transform raised {describe(e)}") from e

    def _records_skipping(self, epoch: int, ids: Any) -> Tuple[List[Any], np.ndarray]:
        """(records, ids): the records that read, decode (and, without tf_transform, transform)
        without an exception, and their indexes; each one left out is logged. Loads one record
        at a time when the batch's records fail together, to find the failing ones."""
        try:
            records = self.load(ids)
        except BatchError:
            records = None  # get_many or a decode failed: load one by one below
        kept, kept_ids, first = [], [], None
        for k, i in enumerate(ids):
            try:
                record = records[k] if records is not None else self._load_one(i)
                if self._tf is None:
                    record = self._transform_one(record, epoch, i)
            except BatchError as e:
                first = first or str(e)
                self._skipped(epoch, e)
                continue
            kept.append(record)
            kept_ids.append(i)
        if not kept:
            raise BatchError(f"every record of the batch failed; the first: {first}")
        return kept, np.asarray(kept_ids, dtype=np.uint64)

    @staticmethod
    def _skipped(epoch: int, error: Exception) -> None:
        log.warning("epoch %d: %s; the record is left out of its batch (skip_failing_records)",
                     epoch, error)

    def _tf_batch(self, records: List[Any], epoch: int, ids: Any) -> Tuple[Dict[str, Any], Any]:
        """(batch, ids): the records through the tf_transform, in TensorFlow's runtime (its
        continuous pipeline, croupier.map.tf_pipeline), and collated. With skip_failing_records, a
        record the function fails on is left out and the rest run again, alone."""
        from croupier.map.tf_pipeline import TfTransformError
        per_batch = False
        while True:
            try:
                assert self._tf is not None
                batch = self._tf(records, epoch, ids, per_batch=per_batch)
                break
            except TfTransformError as e:
                if not self.skip_failing_records or e.record is None or len(ids) == 1:
                    raise BatchError(str(e)) from None
                self._skipped(epoch, e)
                per_batch = True
                k = [int(i) for i in ids].index(e.record)
                records = records[:k] + records[k + 1:]
                ids = np.delete(np.asarray(ids, dtype=np.uint64), k)
            except Exception as e:  # raised by the user's function while TensorFlow traced it
                raise BatchError(f"tf_transform raised {describe(e)}") from e
        if self._spec is not None:
            vary_as_spec(batch, self._spec)
        return batch, ids

    def _collate(self, records: List[Any]) -> Dict[str, Any]:
        try:
            if self.collate is not None:
                batch: Dict[str, Any] = self.collate(records)
            else:
                variable = () if self._spec is None else \
                    {name for name, (_, shape) in self._spec.items() if shape is None}
                # Without a batch transform, the records are stacked straight into the batch.
                batch = default_collate(records, self.names, variable,
                                        stack=self.batch_transform is not None)
        except BatchError:
            raise
        except Exception as e:
            raise BatchError(f"the collate function raised {describe(e)}") from e
        return batch

    def _batch_transform(self, batch: Dict[str, Any], epoch: int, g: int) -> Dict[str, Any]:
        if self.batch_transform is not None:
            try:
                if self._batch_rng:
                    batch = self.batch_transform(batch, batch_rng(self.seed, epoch, g))
                else:
                    batch = self.batch_transform(batch)
            except Exception as e:
                raise BatchError(f"the batch transform raised {describe(e)}") from e
        return batch

    def make(self, epoch: int, g: int, ids: Any,
             allocate: Optional[Callable[[int], "Buffer"]] = None) -> _croupier.Batch:
        """Batch g of `epoch` as a croupier Batch, checked against the job's features. With
        `allocate`, the batch is laid out in the writable buffer allocate(size) returns (a
        worker's shared-memory slot, croupier.map.zygote), which the Batch then views."""
        batch, ids = self.batch_dict(epoch, g, ids)
        try:
            num_records, columns = columns_of(batch)
        except errors.Error as e:
            raise BatchError(str(e), errors.code_of(e)) from e
        if num_records != len(ids):
            raise BatchError(f"the batch holds {num_records} records; the plan names {len(ids)}")
        if self._spec is not None:
            check_spec(columns, self._spec)
        return _croupier.batch_from_columns(num_records, columns, allocate)



class _Failed:
    """A record's failure on a transform thread, and the stage it failed at (0 read, 1 decode,
    2 transform)."""

    def __init__(self, error: BatchError, stage: int) -> None:
        self.error, self.stage = error, stage


def _few(ids: Iterable[int]) -> str:
    ids = [int(i) for i in ids]
    return ", ".join(map(str, ids[:4])) + (", ..." if len(ids) > 4 else "")


