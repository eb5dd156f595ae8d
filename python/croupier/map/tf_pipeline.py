"""A tf.data pipeline as a map job's per-record transform: croupier.produce(tf_transform=fn).

For batch g of epoch e, of records ids = plan(e).batch_records(g), a producer makes

    records = [source[i] for i in ids]                      # Python: the source's own reads
    columns = {field: column of records..., "croupier_seed": record_seeds(seed, e, ids)}
    batch   = fn(the records of columns, one element each)  # the user's: one output per input
              collated                                      # dict of numpy columns

The records of many batches flow through one long-lived tf.data pipeline, a "feed"
(croupier.map.tf_feed): make() calls (the producer's threads, concurrently) submit their columns and
wait, and get back their own batch's outputs. TensorFlow's runtime runs the user's map with no
Python per record, its parallelism and prefetch reaching across batches.

Where the feed cannot be used, a batch is made alone, as one tf.function call (the "per-batch
path": Dataset.from_tensor_slices(columns) -> fn -> ragged_batch -> get_single_element):
  - fn is checked once, on a dataset of known length: if it does not keep that length (a
    filter, batch, take, skip or repeat), every batch takes the per-batch path, which raises the
    error naming the rule (its count of outputs against the batch's records);
  - a batch whose count or columns' types differ from its feed's (skip_failing_records left a
    record out; a field dense in one batch and ragged in another) is made alone;
  - when the pipeline raises (a record fails), every batch in flight is made again alone (which
    finds the failing record by halving and names it) and the next batch starts a new feed.
A pipeline that may reorder records (a shuffle, deterministic=False, tf.data.Options
deterministic=False) is refused, on either path: outputs must stay aligned with their records.
Both paths make the same bytes (the same graph on the same records and seeds).

The only randomness is the stateless ops' seeds (tf.random.stateless_*, tf.image.stateless_*):
record i of epoch e has croupier_seed = record_seed(seed, e, i), so what a batch holds is a
function of (seed, epoch, batch, record indexes), like every map job's batch.

This module imports TensorFlow; croupier.map.pipeline imports it only when tf_transform is given.
"""

import collections
import threading
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np

from croupier import _croupier
from croupier.map.tf_feed import Feed, FeedClosed, specs_of, stop_feeds, types_of

SEED_FIELD = "croupier_seed"
_SEED_KIND = 2  # record_rng uses 0, batch_rng 1
_MAX_FEEDS = 2  # live feeds, one per record count (a full batch's, and one short)
_JOIN_SECONDS = 30.0  # close(): how long a puller may take to end



def record_seed(seed: int, epoch: int, index: int) -> np.ndarray:
    """The croupier_seed of record `index` (global record index) in `epoch`: an int64 [2],
    the two 64-bit words numpy's SeedSequence([seed, epoch, index, 2]) generates."""
    words = np.random.SeedSequence([int(seed), int(epoch), int(index), _SEED_KIND]) \
        .generate_state(2, dtype=np.uint64)
    return words.view(np.int64)


def record_seeds(seed: int, epoch: int, ids: Any) -> np.ndarray:
    """record_seed of every index of `ids`, as an int64 [len(ids), 2] array, computed in C++
    (src/plan/seed_sequence.h, SeedSequence's mixing) where seed and epoch fit in 64 bits;
    otherwise one SeedSequence per record."""
    ids = np.asarray(ids, dtype=np.uint64).reshape(-1)
    if 0 <= int(seed) < 1 << 64 and 0 <= int(epoch) < 1 << 64:
        return _croupier.record_seeds(int(seed), int(epoch), ids, _SEED_KIND)
    out = np.empty((len(ids), 2), dtype=np.int64)
    for k, i in enumerate(ids):
        out[k] = record_seed(seed, epoch, int(i))
    return out


class TfTransformError(Exception):
    """The tf_transform failed on a batch; `record` is the failing record's index, if known."""

    def __init__(self, message: str, record: Optional[int] = None) -> None:
        super().__init__(message)
        self.record = record


def _tf_message(e: BaseException) -> str:
    """The message of a TensorFlow error: the op's own words, without the graph trace TF puts
    around them ("Graph execution error: Detected at node ...", "[[{{node ...}}]]", "Error in
    user-defined function passed to MapDataset ... with iterator: ...")."""
    text = getattr(e, "message", None) or str(e)
    lines = text.splitlines()
    ends = [k for k, line in enumerate(lines) if line.strip().startswith("[[")]
    words = (lines[ends[0] - 1] if ends and ends[0] > 0 else lines[-1] if lines else "").strip()
    marker = "transformation with iterator: "
    if marker in words:  # "...with iterator: Iterator::Map: the op's message"
        words = words.split(marker, 1)[1].split(": ", 1)[-1]
    return f"{type(e).__name__}: {words}" if words else type(e).__name__


class TfTransform:
    """The user's tf.data function run on the records of the batches make() is called for:
    through one long-lived pipeline (a Feed) when `continuous`, else one tf.function call per
    batch (the per-batch path; also the fallback, see the module's docstring). Thread-safe:
    __call__ is called by the producer's threads concurrently. close() ends the feeds and their
    puller threads; calls after it take the per-batch path."""

    def __init__(self, fn: Callable[[Any], Any], seed: int, continuous: bool = True) -> None:
        import tensorflow as tf
        self._tf = tf
        self.fn = fn
        self.seed = int(seed)
        self.continuous = bool(continuous)  # False: every batch alone (tests compare the two)
        self._run = tf.function(self._graph, reduce_retracing=True, autograph=False)
        self._lock = threading.Lock()
        self._feeds: Dict[int, "Feed"] = {}  # record count -> the live feed of that count
        self._closed = False
        self._spans: Optional[bool] = None  # whether fn keeps a dataset's length; None: unchecked
        self.made: "collections.Counter[str]" = collections.Counter()  # "by_feed", "alone"
        # A TfTransform dropped without close() stops its feeds (their threads hold no reference
        # to it), so that no puller thread outlives it.
        weakref.finalize(self, stop_feeds, self._feeds)

    # -- inputs --------------------------------------------------------------------------------

    def columns(self, records: List[Any], epoch: int, ids: Any) -> Dict[str, Any]:
        """The records as a dict of per-field columns (plus croupier_seed) for from_tensor_slices.
        A record is a dict of numpy values, numbers or bytes."""
        tf = self._tf
        if not records:
            raise TfTransformError("a batch has no records")
        if not all(isinstance(r, dict) for r in records):
            bad = next(r for r in records if not isinstance(r, dict))
            raise TfTransformError(
                f"a record is a {type(bad).__name__}; tf_transform needs the source's records as "
                "dicts of field name -> value")
        names = list(records[0])
        if SEED_FIELD in names:
            raise TfTransformError(f"a record has a field '{SEED_FIELD}', the name croupier "
                                   "gives the record's seed")
        cols = {}
        for name in names:
            values = []
            for k, r in enumerate(records):
                if name not in r:
                    raise TfTransformError(f"field '{name}': missing from record {int(ids[k])}")
                v = r[name]
                if hasattr(v, "numpy") and not isinstance(v, np.ndarray):
                    v = v.numpy()
                values.append(v)
            v0 = values[0]
            if isinstance(v0, (bytes, str)):
                cols[name] = tf.constant(np.array(
                    [v if isinstance(v, bytes) else str(v).encode() for v in values],
                    dtype=object), dtype=tf.string)
                continue
            if isinstance(v0, (np.generic, int, float)):  # one number a record: at once
                try:
                    column = np.array(values)
                except ValueError:  # a later record holds an array: the general path says why
                    column = None
                if column is not None and column.ndim == 1 and column.dtype != object:
                    cols[name] = column
                    continue
            arrays = [np.asarray(v) for v in values]
            if all(a.shape == arrays[0].shape for a in arrays):
                cols[name] = np.stack(arrays)
            elif all(a.ndim == arrays[0].ndim >= 1 and a.shape[1:] == arrays[0].shape[1:]
                     for a in arrays):  # a variable first dimension: one ragged row per record
                lengths = np.array([a.shape[0] for a in arrays], dtype=np.int64)
                cols[name] = tf.RaggedTensor.from_row_lengths(np.concatenate(arrays), lengths)
            else:
                raise TfTransformError(
                    f"field '{name}': records of shapes {arrays[0].shape} and "
                    f"{next(a.shape for a in arrays if a.shape != arrays[0].shape)}; only the "
                    "first dimension may vary")
        cols[SEED_FIELD] = record_seeds(self.seed, epoch, ids)
        return cols

    # -- the per-batch graph -------------------------------------------------------------------

    def _graph(self, cols: Dict[str, Any], limit: Any) -> Tuple[Any, Any]:
        """The user's pipeline over `cols`, its outputs batched: (count, outputs); count is
        min(outputs, limit) where limit is one more than the records."""
        tf = self._tf
        ds = tf.data.Dataset.from_tensor_slices(cols)
        out = self.fn(ds)
        if not isinstance(out, tf.data.Dataset):
            raise TfTransformError(f"tf_transform returned a {type(out).__name__}, not a "
                                   "tf.data.Dataset")
        outputs = out.ragged_batch(limit).take(1).get_single_element()
        return _count(outputs), outputs

    def __call__(self, records: List[Any], epoch: int, ids: Any,
                 per_batch: bool = False) -> Dict[str, Any]:
        """The batch dict {name: numpy column or (values, row_splits)} of records `ids`; through
        the feed unless `per_batch` (or the feed cannot take the batch)."""
        cols = self.columns(records, epoch, ids)
        if self._spans is None:
            self._check(cols)
        if self.continuous and self._spans and not per_batch:
            outputs = self._through_feed(cols, len(ids))
            if outputs is not None:
                self._count_made("by_feed")
                return _to_numpy(outputs)
        batch = self._per_batch(cols, records, epoch, ids)
        self._count_made("alone")
        return batch

    def _count_made(self, how: str) -> None:
        with self._lock:
            self.made[how] += 1

    def _per_batch(self, cols: Dict[str, Any], records: List[Any], epoch: int,
                   ids: Any) -> Dict[str, Any]:
        tf = self._tf
        n = len(ids)
        try:
            count, outputs = self._run(cols, tf.constant(n + 1, tf.int64))
        except TfTransformError:
            raise
        except tf.errors.OpError as e:
            if "Dataset was empty" in str(e):
                raise TfTransformError(self._count_message(0, n)) from None
            record = self._failing_record(records, epoch, ids)
            who = "" if record is None else f"record {record}: "
            raise TfTransformError(f"{who}the tf_transform failed: {_tf_message(e)}",
                                   record) from None
        count = int(count)
        if count != n:
            raise TfTransformError(self._count_message(count, n))
        return _to_numpy(outputs)

    @staticmethod
    def _count_message(count: int, n: int) -> str:
        more = "more than " if count > n else ""
        return (f"tf_transform made {more}{min(count, n)} outputs of the batch's {n} records; it "
                "must keep one output per record, in order (a map: no filter, batch, shuffle, "
                "take, skip or repeat; croupier batches)")

    def _failing_record(self, records: List[Any], epoch: int, ids: Any) -> Optional[int]:
        """The index of the first record whose pipeline fails alone, or None if none does (a
        record's output is a function of the record: run halves until one is left)."""
        tf = self._tf

        def fails(lo: int, hi: int) -> bool:
            try:
                self._run(self.columns(records[lo:hi], epoch, ids[lo:hi]),
                          tf.constant(hi - lo + 1, tf.int64))
                return False
            except Exception:
                return True

        lo, hi = 0, len(ids)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fails(lo, mid):
                hi = mid
            else:
                lo = mid
        return int(ids[lo]) if fails(lo, lo + 1) else None

    # -- the checks of fn, once ----------------------------------------------------------------

    def _check(self, cols: Dict[str, Any]) -> None:
        """Checks fn once on datasets of these columns (building them runs nothing): it must keep
        records in order (TfTransformError otherwise), and it may span batches (self._spans)
        only if it keeps a dataset's length, for two lengths (so that take(n) is caught too).
        An exception of fn's own, raised while TensorFlow traces it, propagates."""
        tf = self._tf
        base = tf.data.Dataset.from_tensor_slices(cols)
        n = int(base.cardinality())
        out = self.fn(base)
        if not isinstance(out, tf.data.Dataset):
            raise TfTransformError(f"tf_transform returned a {type(out).__name__}, not a "
                                   "tf.data.Dataset")
        reorders = _reordering(out)
        if reorders:
            raise TfTransformError(
                f"tf_transform's pipeline may reorder records ({reorders}); it must keep one "
                "output per record, in order (a map with deterministic=True or unset: no "
                "shuffle, no tf.data.Options(deterministic=False)), so that a batch is a "
                "function of its records")
        spans = int(out.cardinality()) == n and \
            int(self.fn(base.repeat(3)).cardinality()) == 3 * n
        with self._lock:
            self._spans = spans

    # -- the feeds -----------------------------------------------------------------------------

    def _through_feed(self, cols: Dict[str, Any], n: int) -> Any:
        """The batch's outputs (tensors, from the feed of n-record batches), or None: the feed
        cannot take the batch, or it stopped before making it (make it alone)."""
        types = types_of(self._tf, cols)
        with self._lock:
            if self._closed:
                return None
            feed = self._feeds.get(n)
            if feed is not None and feed.stopped():
                del self._feeds[n]
                feed = None
            if feed is None:
                specs = specs_of(self._tf, cols)
                if specs is None or len(self._feeds) >= _MAX_FEEDS:
                    return None
                feed = Feed(self._tf, self.fn, specs, types, n)
                self._feeds[n] = feed
            if types != feed.types:
                return None
            slot = feed.submit(cols)
        if slot is None:
            return None
        try:
            return slot.wait(feed)
        except FeedClosed as e:
            raise TfTransformError(str(e)) from None

    def close(self) -> None:
        """Ends the feeds: a call waiting on one raises TfTransformError; the puller threads are
        joined (for at most _JOIN_SECONDS each). Later calls make their batches alone."""
        with self._lock:
            self._closed = True
            feeds = list(self._feeds.values())
            self._feeds.clear()
        for feed in feeds:
            feed.stop(closing=True)
        for feed in feeds:
            feed.join(_JOIN_SECONDS)


_SHUFFLES = ("ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3",
             "ShuffleAndRepeatDataset", "ShuffleAndRepeatDatasetV2")


def _reordering(ds: Any) -> str:
    """What in the dataset's graph may reorder its elements ('' if nothing): a shuffle, an op
    with deterministic=False (or sloppy), or tf.data.Options deterministic=False."""
    import tensorflow as tf
    found = []
    if ds.options().deterministic is False:
        found.append("tf.data.Options deterministic=False")
    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString(ds._as_serialized_graph().numpy())  # pylint: disable=protected-access
    nodes = list(graph.node)
    for function in graph.library.function:
        nodes.extend(function.node_def)
    for node in nodes:
        if node.op in _SHUFFLES:
            found.append(f"{node.op}")
        deterministic = node.attr.get("deterministic")
        if deterministic is not None and deterministic.s == b"false":
            found.append(f"{node.op} with deterministic=False")
        sloppy = node.attr.get("sloppy")
        if sloppy is not None and sloppy.b:
            found.append(f"{node.op} sloppy")
    return ", ".join(dict.fromkeys(found))


def _count(outputs: Any) -> Any:
    import tensorflow as tf
    first = tf.nest.flatten(outputs, expand_composites=False)[0]
    if isinstance(first, tf.RaggedTensor):
        return tf.cast(first.nrows(), tf.int64)
    return tf.cast(tf.shape(first, out_type=tf.int64)[0], tf.int64)


def _to_numpy(outputs: Any) -> Dict[str, Any]:
    """croupier's columns of the batched outputs: a dict {name: array or (values, row_splits)}
    (a tuple of outputs is named '0', '1', ...)."""
    import tensorflow as tf
    items: Iterable[Tuple[Any, Any]]
    if isinstance(outputs, dict):
        items = outputs.items()
    elif isinstance(outputs, (tuple, list)):
        items = ((str(k), v) for k, v in enumerate(outputs))
    else:
        items = [("0", outputs)]
    batch: Dict[str, Any] = {}
    for name, value in items:
        if isinstance(value, (dict, tuple, list)):
            raise TfTransformError(f"output '{name}' is nested; tf_transform's outputs must be a "
                                   "flat dict of tensors")
        if isinstance(value, tf.RaggedTensor):
            dense = value.to_tensor()
            if int(tf.size(dense)) == int(tf.size(value.flat_values)):
                value = dense  # every record of one shape, unknown to the graph: dense
        if isinstance(value, tf.RaggedTensor):
            if value.ragged_rank != 1:
                raise TfTransformError(f"output '{name}' varies in more than its first dimension "
                                       "per record; only one variable dimension travels")
            values: Any = np.asarray(value.flat_values)  # a view; numpy() would copy
            if value.dtype == tf.string:
                values = list(values)
            batch[str(name)] = (values, value.row_splits.numpy().astype(np.uint64))
        elif value.dtype == tf.string:
            if value.shape.rank != 1:
                raise TfTransformError(f"output '{name}': a string tensor of shape "
                                       f"{value.shape[1:]} per record; one string per record "
                                       "travels")
            batch[str(name)] = list(value.numpy())
        else:
            batch[str(name)] = np.asarray(value)  # a view of the tensor; numpy() would copy
    return batch
