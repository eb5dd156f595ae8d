"""A tf.data pipeline as a map job's per-record transform: croupier.produce(tf_transform=fn).

For batch g of epoch e, of records ids = plan(e).batch_records(g), a producer makes

    records = [source[i] for i in ids]                      # Python: the source's own reads
    ds      = tf.data.Dataset.from_tensor_slices({field: column of records...,
                                                  "croupier_seed": record_seeds(seed, e, ids)})
    ds      = fn(ds)                                        # the user's: one output per input
    batch   = every element of ds, collated                 # dict of numpy columns

and the whole of it (the slices, the user's map, the collation into one batch) runs as one
tf.function: TensorFlow's runtime runs the user's map over the batch's records in its own threads
(num_parallel_calls), with no Python per record, and the graph is traced once, not per batch.

The only randomness is the stateless ops' seeds (tf.random.stateless_*, tf.image.stateless_*):
record i of epoch e has croupier_seed = record_seed(seed, e, i), so what a batch holds is a
function of (seed, epoch, batch, record indexes), like every map job's batch.

This module imports TensorFlow; croupier.pipeline imports it only when tf_transform is given.
"""

from typing import Any, Dict, Iterable, Tuple

import numpy as np

SEED_FIELD = "croupier_seed"
_SEED_KIND = 2  # record_rng uses 0, batch_rng 1


def record_seed(seed, epoch, index):
    """The croupier_seed of record `index` (global record index) in `epoch`: an int64 [2],
    the two 64-bit words numpy's SeedSequence([seed, epoch, index, 2]) generates."""
    words = np.random.SeedSequence([int(seed), int(epoch), int(index), _SEED_KIND]) \
        .generate_state(2, dtype=np.uint64)
    return words.view(np.int64)


def record_seeds(seed, epoch, ids):
    """record_seed of every index of `ids`, as an int64 [len(ids), 2] array."""
    out = np.empty((len(ids), 2), dtype=np.int64)
    for k, i in enumerate(ids):
        out[k] = record_seed(seed, epoch, i)
    return out


class TfTransformError(Exception):
    """The tf_transform failed on a batch; `record` is the failing record's index, if known."""

    def __init__(self, message, record=None):
        super().__init__(message)
        self.record = record


def _tf_message(e):
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
    """The user's tf.data function, run on the records of one batch at a time."""

    def __init__(self, fn, seed):
        import tensorflow as tf
        self._tf = tf
        self.fn = fn
        self.seed = int(seed)
        self._run = tf.function(self._graph, reduce_retracing=True, autograph=False)

    # -- inputs --------------------------------------------------------------------------------

    def columns(self, records, epoch, ids):
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

    # -- the graph -----------------------------------------------------------------------------

    def _graph(self, cols, limit):
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

    def __call__(self, records, epoch, ids):
        """The batch dict {name: numpy column or (values, row_splits)} of records `ids`."""
        tf = self._tf
        n = len(ids)
        cols = self.columns(records, epoch, ids)
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
    def _count_message(count, n):
        more = "more than " if count > n else ""
        return (f"tf_transform made {more}{min(count, n)} outputs of the batch's {n} records; it "
                "must keep one output per record, in order (a map: no filter, batch, shuffle, "
                "take, skip or repeat; croupier batches)")

    def _failing_record(self, records, epoch, ids):
        """The index of the first record whose pipeline fails alone, or None if none does (a
        record's output is a function of the record: run halves until one is left)."""
        tf = self._tf

        def fails(lo, hi):
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


def _count(outputs):
    import tensorflow as tf
    first = tf.nest.flatten(outputs, expand_composites=False)[0]
    if isinstance(first, tf.RaggedTensor):
        return tf.cast(first.nrows(), tf.int64)
    return tf.cast(tf.shape(first, out_type=tf.int64)[0], tf.int64)


def _to_numpy(outputs):
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
            values = value.flat_values.numpy()
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
            batch[str(name)] = value.numpy()
    return batch
