"""The continuous tf.data pipeline of a map job's tf_transform (croupier.map.tf_pipeline): a "feed".

The records of many batches flow through one long-lived tf.data pipeline:

    a tf.queue.FIFOQueue of the batches' columns, in the order they were submitted
        -> dequeue, .unbatch()     # one element per record, as from_tensor_slices gives them
        -> fn                      # the user's map: num_parallel_calls spans batch boundaries
        .ragged_batch(n)           # regrouped into the batches they came in (n records each)
        .prefetch(AUTOTUNE)

The producer's threads submit their batches' columns and wait on a Slot; one puller thread
iterates the pipeline (TensorFlow releases the GIL while it works) and sets each batch's outputs
in the Slot of the call that put its records in: a map keeps one output per record, in order, so
batch k's outputs are the pipeline's k-th group of n. A feed that stops (the pipeline raised, or
made a group of another size, or it was closed) sets every Slot it holds to None (make the
batch alone, croupier.map.tf_pipeline's per-batch path) or, when closing, to FeedClosed.
"""

import collections
import logging
import threading
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from croupier.runtime.thread_signals import block_async_signals

_MAX_DRAIN_ERRORS = 1000  # errors a stopped feed's iterator may give while it is drained
_QUEUE_CAPACITY = 1 << 20  # batches; never reached (each waits in a make() call)

log = logging.getLogger("croupier.pipeline")


class FeedClosed(Exception):
    """The feed was closed (the producer is stopping) before it made the batch."""


def stop_feeds(feeds: Dict[int, "Feed"]) -> None:
    """A dropped TfTransform's finalizer: stops its feeds from a thread of its own (the garbage
    collector may run it in any thread, one holding a feed's lock too)."""
    live = list(feeds.values())
    if live:
        def stop_all() -> None:
            block_async_signals()
            for feed in live:
                feed.stop(closing=True)

        threading.Thread(target=stop_all,
                         name="croupier-tf-stop", daemon=True).start()


class Slot:
    """A batch handed to a feed: set once, with its outputs, with None (make it alone), or with
    an error."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.outputs: Any = None
        self.error: Optional[Exception] = None

    def set(self, outputs: Any = None, error: Optional[Exception] = None) -> None:
        if not self._done.is_set():
            self.outputs, self.error = outputs, error
            self._done.set()

    def wait(self, feed: "Feed") -> Any:
        """The outputs (None: make the batch alone); raises the slot's error. Ends once the
        slot is set or the feed's puller thread has ended (it sets every slot it holds when it
        ends; the check is a guard)."""
        while not self._done.wait(1.0):
            if not feed.alive():
                self.set()
        if self.error is not None:
            raise self.error
        return self.outputs


class Feed:
    """One long-lived tf.data pipeline over batches of n records: the batches' columns in, the
    user's fn over their records, the outputs regrouped by n; one puller thread. Every method is
    thread-safe. Once stopped (the pipeline raised or ended, or close()), it takes no batch, and
    the batches it held are set to be made alone (or, when closing, to an error)."""

    def __init__(self, tf: ModuleType, fn: Callable[[Any], Any], specs: Dict[str, Any],
                 types: Tuple[Tuple[Any, ...], ...], n: int) -> None:
        self.n = n
        self.types = types  # types_of the batches it takes
        self._tf = tf
        self._specs = specs
        self._lock = threading.Lock()
        self._pending: "collections.deque[Slot]" = collections.deque()  # in feed order
        self._stopped = False
        self._closing = False
        signature = {name: _unsized(tf, spec) for name, spec in specs.items()}
        # The input: a TensorFlow queue of the batches' column tensors (a ragged column as its
        # values and row splits), which make() fills and the pipeline empties in C++ (no Python,
        # no GIL, in TensorFlow's threads); closing it ends the pipeline.
        dtypes = []
        for spec in signature.values():
            dtypes += [spec.dtype, spec.row_splits_dtype] \
                if isinstance(spec, tf.RaggedTensorSpec) else [spec.dtype]
        self._queue = tf.queue.FIFOQueue(_QUEUE_CAPACITY, dtypes)
        self._dataset = _continuous(tf, fn, self._queue, signature, n)
        self._thread = threading.Thread(target=self._pull, name="croupier-tf-feed", daemon=True)
        self._thread.start()

    def submit(self, cols: Dict[str, Any]) -> Optional[Slot]:
        """A Slot the batch's outputs will be set in, or None once the feed is stopped."""
        slot = Slot()
        with self._lock:
            if self._stopped:
                return None
            try:
                self._queue.enqueue(_components(self._tf, cols))
            except self._tf.errors.OpError:
                return None  # closed
            self._pending.append(slot)
        return slot

    def stopped(self) -> bool:
        with self._lock:
            return self._stopped

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, closing: bool = False) -> None:
        """Takes no more batches; the batches held are made alone (or fail, when closing); the
        pipeline's input ends, so that the puller's iteration ends."""
        with self._lock:
            first = not self._stopped
            self._stopped = True
            self._closing = self._closing or closing
            slots, self._pending = list(self._pending), collections.deque()
            if first:  # the pipeline takes what the queue holds, then ends
                self._queue.close(cancel_pending_enqueues=True)
        error = FeedClosed("the tf_transform's pipeline was closed (the producer is stopping) "
                           "before it made the batch") if self._closing else None
        for slot in slots:
            slot.set(error=error)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("tf_transform: the pipeline's puller thread did not end within %.0f s",
                        timeout)

    def _pull(self) -> None:
        """Iterates the pipeline, handing each group of outputs to the batch it belongs to, until
        the input ends (stop()). After an error the feed is stopped and the iterator is drained
        to its end rather than dropped mid-flight."""
        block_async_signals()
        tf = self._tf
        iterator = None
        try:
            iterator = iter(self._dataset)
            failures = 0
            while True:
                try:
                    outputs = next(iterator)
                except StopIteration:
                    break
                except tf.errors.OpError:
                    # A record failed: the batches in flight are made alone, which names it.
                    self.stop()
                    failures += 1
                    if failures > _MAX_DRAIN_ERRORS:
                        raise
                    continue
                with self._lock:
                    slot = self._pending.popleft() if self._pending else None
                if slot is None:
                    continue  # stopped: the batches it held are made alone; drain
                count = rows(tf, outputs)
                if count != self.n:  # never for a map: stop, the batches are made alone
                    log.warning("tf_transform: the pipeline made a group of %d outputs for a "
                                "batch of %d records; making the batches alone", count, self.n)
                    slot.set()
                    self.stop()
                    continue
                slot.set(outputs)
        except Exception as e:  # noqa: BLE001 -- whatever it is, the batches are made alone
            log.warning("tf_transform: the pipeline's puller raised %s: %s; making the batches "
                        "alone", type(e).__name__, e)
        finally:
            self.stop()
            del iterator


def _continuous(tf: ModuleType, fn: Callable[[Any], Any], columns: Any, signature: Dict[str, Any],
                n: int) -> Any:
    """The feed's dataset: the batches' columns dequeued from `columns` (until it is closed),
    one element per record (as from_tensor_slices gives them), fn, regrouped by n, prefetched."""
    names = list(signature)

    def dequeue(_: Any) -> Dict[str, Any]:
        parts = columns.dequeue()
        parts = list(parts) if isinstance(parts, (list, tuple)) else [parts]
        cols = {}
        for name in names:
            spec = signature[name]
            if isinstance(spec, tf.RaggedTensorSpec):
                values, splits = parts.pop(0), parts.pop(0)
                values.set_shape(tf.TensorShape([None]).concatenate(spec.shape[2:]))
                splits.set_shape([None])
                cols[name] = tf.RaggedTensor.from_row_splits(values, splits, validate=False)
            else:
                column = parts.pop(0)
                column.set_shape(spec.shape)
                cols[name] = column
        return cols

    def open_or_not_empty(_: Any) -> Any:
        return tf.logical_or(tf.logical_not(columns.is_closed()), columns.size() > 0)

    # The input ends once the queue is closed and empty (a dequeue that was already waiting
    # then fails once, with OutOfRangeError, and the next element ends it).
    records = tf.data.Dataset.from_tensors(0).repeat().take_while(open_or_not_empty) \
        .map(dequeue).unbatch()
    return fn(records).ragged_batch(n).prefetch(tf.data.AUTOTUNE)


def _components(tf: ModuleType, cols: Dict[str, Any]) -> List[Any]:
    """A batch's columns as the feed's queue takes them: a ragged column as values, splits."""
    parts = []
    for col in cols.values():
        if isinstance(col, tf.RaggedTensor):
            parts += [col.values, col.row_splits]
        else:
            parts.append(col)
    return parts


def types_of(tf: ModuleType, cols: Dict[str, Any]) -> Tuple[Tuple[Any, ...], ...]:
    """What the feed's input signature says of a batch's columns, as a comparable tuple: per
    column its name, kind, dtype and the shape past the first dimension."""
    types: List[Tuple[Any, ...]] = []
    for name, col in cols.items():
        if isinstance(col, tf.RaggedTensor):
            types.append((name, "ragged", col.dtype, col.row_splits.dtype, col.ragged_rank,
                          tuple(col.flat_values.shape[1:])))
        else:
            types.append((name, "dense", str(col.dtype), tuple(col.shape[1:])))
    return tuple(types)


def rows(tf: ModuleType, outputs: Any) -> int:
    """The number of records in a group of outputs (their first output's first dimension)."""
    first = tf.nest.flatten(outputs, expand_composites=False)[0]
    if isinstance(first, tf.RaggedTensor):
        return int(first.nrows())
    return int(first.shape[0])


def specs_of(tf: ModuleType, cols: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """{name: TypeSpec} of a batch's columns, or None if one has none (made alone)."""
    specs = {}
    try:
        for name, col in cols.items():
            if isinstance(col, np.ndarray):
                specs[name] = tf.TensorSpec(col.shape, tf.as_dtype(col.dtype))
            else:
                specs[name] = tf.type_spec_from_value(col)
    except (TypeError, ValueError):
        return None
    return specs


def _unsized(tf: ModuleType, spec: Any) -> Any:
    """The spec with its first (the batch's) dimension unknown."""
    shape = tf.TensorShape([None]).concatenate(spec.shape[1:])
    if isinstance(spec, tf.RaggedTensorSpec):
        return tf.RaggedTensorSpec(shape, spec.dtype, spec.ragged_rank, spec.row_splits_dtype)
    return tf.TensorSpec(shape, spec.dtype)
