"""croupier.produce: the producers of a job whose records come from a Python source (this module,
croupier.pipeline, holds produce() and what it is made of).

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
0 for a record, 1 for a batch), never global state. So what a batch holds is a function of the
plan, as for TFRecord jobs: any producer can make any batch, a producer killed mid-epoch has its
batches made again bit-identically by another (or by itself after a restart), and a checkpoint
resumes exactly. Several processes may call produce() for one job (on one machine or several):
each is a producer of the job, and the dispatcher spreads the tasks over them.

decode is deterministic (a function of the record, no generator), so what it makes can be kept:
with cache_bytes, a record cache on /dev/shm shared by the producer's processes
(croupier.record_cache) holds decode's outputs by record index, and the epochs after the first
run only the random part (transform, batch_transform).

The transforms run in `workers` worker processes, each making whole batches; a batch comes back
to the producer through shared memory in croupier's batch format, nothing pickled. The workers are
forks of a "zygote" process that the producer forks at start (before any thread of croupier's
starts), so that a worker that dies (OOM-killed, a crash in a decoder) can be replaced by a new
fork at any time; the replacement makes the dead worker's batch again (_WorkerPool says when a
batch fails instead, and when replacing stops). workers=0 makes batches in the producer's own
threads (for code that releases the GIL).

tf_transform (a tf.data pipeline, croupier.tf_pipeline) replaces transform and collate: it runs
in TensorFlow's runtime from the producer's own threads, with no worker process (forking once
TensorFlow runs is unsafe).
"""
import collections
import inspect
import logging
import mmap
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

import numpy as np

from croupier import _croupier, _exit, errors
from croupier.cluster import _die_with_parent, _token, create_job, get_job
from croupier.record_cache import RecordCache, summary
from croupier.source import _columns, _tensor_to_numpy, features_of

__all__ = ["produce", "Pipeline", "record_rng", "batch_rng", "default_workers",
           "max_worker_deaths"]

# Status codes passed back to C++ (absl::StatusCode).
_INVALID_ARGUMENT = 3
_INTERNAL = 13
# The producer's own trouble (its pool can make no batch), not the batch's: a consumer asks the
# dispatcher again, and gets the batch from another producer once this one has left.
_UNAVAILABLE = 14
_CODES = {cls.code: code for code, cls in errors.BY_CODE.items()}
_log = logging.getLogger(__name__)


def default_workers():
    """The worker processes a producer starts by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def record_rng(seed, epoch, index):
    """The random generator of record `index` (global record index) in `epoch`."""
    return np.random.default_rng([int(seed), int(epoch), int(index), 0])


def batch_rng(seed, epoch, batch):
    """The random generator of global batch `batch` of `epoch`."""
    return np.random.default_rng([int(seed), int(epoch), int(batch), 1])


def _takes_rng(fn):
    """Whether `fn` takes a second positional argument (the random generator)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _describe(e):
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class _RecordError(Exception):
    """A record's read or transform failed: names the record and the exception."""

    def __init__(self, message, code=_INVALID_ARGUMENT):
        super().__init__(message)
        self.code = code


def _as_value(value, name):
    """A numpy array for tensors (torch, TensorFlow eager), else the value."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return _tensor_to_numpy(value, name)
    return value


def default_collate(records, names=None, variable=()):
    """croupier's collation of records into a batch dict {name: column}.

    A record is a dict {name: value} (or a tuple/list, named by `names`). Per feature:
    bytes or str values make a bytes column; numbers and numpy arrays (tensors are converted)
    are stacked as [num_records, *shape] in their own dtype, and every record must have the same
    shape and dtype; Python lists make a variable-length column ((values, row_splits)), as do
    the values of the features named in `variable` (those the job's spec says are [*]), whatever
    their lengths."""
    if not records:
        raise _RecordError("a batch has no records")
    first = records[0]
    if not isinstance(first, dict):
        if names is None or not isinstance(first, (tuple, list)):
            raise _RecordError(
                f"a record is a {type(first).__name__}; croupier collates dicts of feature name -> "
                "value (or tuples, with names=('image', 'label') given to produce())")
        records = [dict(zip(names, r)) for r in records]
        first = records[0]
    batch = {}
    for name in first:
        values = []
        for k, r in enumerate(records):
            if not isinstance(r, dict) or name not in r:
                raise _RecordError(f"feature '{name}': missing from the batch's record {k}")
            values.append(_as_value(r[name], name))
        v0 = values[0]
        if isinstance(v0, (bytes, str)):
            batch[name] = [v if isinstance(v, bytes) else str(v).encode() for v in values]
        elif isinstance(v0, list) or name in variable:
            # The dtype of the values (numpy scalars keep theirs), not float64 for an empty list.
            dtype = next((np.asarray(v).dtype for v in values if len(v)), None)
            arrays = [np.asarray(v, dtype=dtype) for v in values]
            lengths = np.array([a.size for a in arrays], dtype=np.uint64)
            splits = np.zeros(len(arrays) + 1, dtype=np.uint64)
            np.cumsum(lengths, out=splits[1:])
            batch[name] = (np.concatenate([a.reshape(-1) for a in arrays]) if arrays else
                           np.zeros(0), splits)
        else:
            arrays = [np.asarray(v) for v in values]
            a0 = arrays[0]
            for k, a in enumerate(arrays):
                if a.shape != a0.shape or a.dtype != a0.dtype:
                    raise _RecordError(
                        f"feature '{name}': the batch's record {k} is {a.dtype}{list(a.shape)}, "
                        f"its record 0 {a0.dtype}{list(a0.shape)}; every record of a feature "
                        "needs one dtype and shape (a Python list makes a variable length)")
            batch[name] = np.stack(arrays)
    return batch


class Pipeline:
    """What makes a map job's batches from record indexes: the source, the decode, the transforms
    and the collation. A pure function of (seed, epoch, batch, record indexes).

    decode(record) -> record (deterministic: a function of the record alone, no generator) runs
    on each record read from the source, before transform. With cache_bytes > 0, what it makes
    (the source's records themselves without decode) is kept in a RecordCache on /dev/shm of at
    most cache_bytes bytes, shared with the processes forked from this one, and a record found
    there is neither read nor decoded again. close() (or leaving a `with` block) removes the
    cache."""

    def __init__(self, source, *, transform=None, batch_transform=None, collate=None,
                 names=None, features=None, seed=0, tf_transform=None,
                 skip_failing_records=False, decode=None, cache_bytes=0):
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
        self._spec = None if features is None else _spec_of(features)
        self.tf_transform = tf_transform
        self._tf = None
        if tf_transform is not None:
            if transform is not None or collate is not None or names is not None:
                raise errors.InvalidArgumentError(
                    "tf_transform replaces transform, collate and names (its outputs are "
                    "collated by croupier); give batch_transform for the batch")
            from croupier.tf_pipeline import TfTransform
            self._tf = TfTransform(tf_transform, self.seed)
        # Last, once nothing can fail: the cache's directory is removed by close().
        self._cache = RecordCache(cache_bytes) if cache_bytes > 0 else None

    def __len__(self):
        return len(self.source)

    def cache_stats(self):
        """The record cache's counts (RecordCache.stats(): hits, misses, bytes, records, ...),
        or None without a cache."""
        return None if self._cache is None else self._cache.stats()

    def close(self):
        """Removes the record cache, if any (in the process that made the pipeline; a fork of it
        only lets go of its handles). The pipeline makes batches without a cache afterwards."""
        cache, self._cache = self._cache, None
        if cache is not None:
            cache.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def read(self, ids):
        """The records `ids` of the source, in order."""
        get_many = getattr(self.source, "get_many", None)
        if get_many is not None:
            try:
                records = list(get_many(ids))
            except Exception as e:
                raise _RecordError(f"records {_few(ids)}: {_describe(e)}") from e
            if len(records) != len(ids):
                raise _RecordError(f"get_many gave {len(records)} records for {len(ids)} indexes")
            return records
        return [self._read_one(i) for i in ids]

    def _read_one(self, i):
        try:
            return self.source[int(i)]
        except Exception as e:
            raise _RecordError(f"record {int(i)}: {_describe(e)}") from e

    def load(self, ids):
        """The records `ids` as the transform takes them: read from the source and decoded, or
        found in the record cache (then neither read nor decoded)."""
        return self._load(ids, self._read_and_decode)

    def _load_one(self, i):
        """Record i as load() gives it, read with source[i] (not get_many)."""
        return self._load([i], lambda ids: [self._decode_one(self._read_one(ids[0]), ids[0])])[0]

    def _load(self, ids, make):
        if self._cache is None:
            return make(ids)
        return self._cache.load(ids, make)

    def _read_and_decode(self, ids):
        records = self.read(ids)
        if self.decode is None:
            return records
        return [self._decode_one(r, i) for r, i in zip(records, ids)]

    def _decode_one(self, record, i):
        if self.decode is None:
            return record
        try:
            return self.decode(record)
        except Exception as e:
            raise _RecordError(f"record {int(i)}: the decode raised {_describe(e)}") from e

    def batch_dict(self, epoch, g, ids):
        """Batch g of `epoch`, of records `ids`, as a dict of columns (before the batch layout),
        and the indexes of the records it holds (`ids`, less those skipped)."""
        if self.skip_failing_records:
            records, ids = self._records_skipping(epoch, ids)
        else:
            records = self.load(ids)
            if self._tf is None:
                records = [self._transform_one(r, epoch, i) for r, i in zip(records, ids)]
        if self._tf is not None:
            batch, ids = self._tf_batch(records, epoch, ids)
        else:
            batch = self._collate(records)
        return self._batch_transform(batch, epoch, g), ids

    def _transform_one(self, record, epoch, i):
        if self.transform is None:
            return record
        try:
            if self._record_rng:
                return self.transform(record, record_rng(self.seed, epoch, i))
            return self.transform(record)
        except Exception as e:
            raise _RecordError(f"record {int(i)}: the transform raised {_describe(e)}") from e

    def _records_skipping(self, epoch, ids):
        """(records, ids): the records that read, decode (and, without tf_transform, transform)
        without an exception, and their indexes; each one left out is logged. Loads one record
        at a time when the batch's records fail together, to find the failing ones."""
        try:
            records = self.load(ids)
        except _RecordError:
            records = None  # get_many or a decode failed: load one by one below
        kept, kept_ids, first = [], [], None
        for k, i in enumerate(ids):
            try:
                record = records[k] if records is not None else self._load_one(i)
                if self._tf is None:
                    record = self._transform_one(record, epoch, i)
            except _RecordError as e:
                first = first or str(e)
                self._skipped(epoch, e)
                continue
            kept.append(record)
            kept_ids.append(i)
        if not kept:
            raise _RecordError(f"every record of the batch failed; the first: {first}")
        return kept, np.asarray(kept_ids, dtype=np.uint64)

    @staticmethod
    def _skipped(epoch, error):
        _log.warning("epoch %d: %s; the record is left out of its batch (skip_failing_records)",
                     epoch, error)

    def _tf_batch(self, records, epoch, ids):
        """(batch, ids): the records through the tf_transform, in TensorFlow's runtime, and
        collated. With skip_failing_records, a record the function fails on is left out and the
        rest run again."""
        from croupier.tf_pipeline import TfTransformError
        while True:
            try:
                batch = self._tf(records, epoch, ids)
                break
            except TfTransformError as e:
                if not self.skip_failing_records or e.record is None or len(ids) == 1:
                    raise _RecordError(str(e)) from None
                self._skipped(epoch, e)
                k = [int(i) for i in ids].index(e.record)
                records = records[:k] + records[k + 1:]
                ids = np.delete(np.asarray(ids, dtype=np.uint64), k)
            except Exception as e:  # raised by the user's function while TensorFlow traced it
                raise _RecordError(f"tf_transform raised {_describe(e)}") from e
        if self._spec is not None:
            _vary_as_spec(batch, self._spec)
        return batch, ids

    def _collate(self, records):
        try:
            if self.collate is not None:
                batch = self.collate(records)
            else:
                variable = () if self._spec is None else \
                    {name for name, (_, shape) in self._spec.items() if shape is None}
                batch = default_collate(records, self.names, variable)
        except _RecordError:
            raise
        except Exception as e:
            raise _RecordError(f"the collate function raised {_describe(e)}") from e
        return batch

    def _batch_transform(self, batch, epoch, g):
        if self.batch_transform is not None:
            try:
                if self._batch_rng:
                    batch = self.batch_transform(batch, batch_rng(self.seed, epoch, g))
                else:
                    batch = self.batch_transform(batch)
            except Exception as e:
                raise _RecordError(f"the batch transform raised {_describe(e)}") from e
        return batch

    def make(self, epoch, g, ids):
        """Batch g of `epoch` as a croupier Batch, checked against the job's features."""
        batch, ids = self.batch_dict(epoch, g, ids)
        try:
            num_records, columns = _columns(batch)
        except errors.Error as e:
            raise _RecordError(str(e), _CODES.get(e.code, _INVALID_ARGUMENT)) from e
        if num_records != len(ids):
            raise _RecordError(f"the batch holds {num_records} records; the plan names {len(ids)}")
        if self._spec is not None:
            _check_spec(columns, self._spec)
        return _croupier.batch_from_columns(num_records, columns)


def _few(ids):
    ids = [int(i) for i in ids]
    return ", ".join(map(str, ids[:4])) + (", ..." if len(ids) > 4 else "")


def _spec_of(features):
    """{name: (dtype, shape or None)} of a feature spec text."""
    return {name: (dtype, None if shape is None else list(shape))
            for name, dtype, shape in _croupier.parse_feature_spec(features)}


def _vary_as_spec(batch, spec):
    """Turns stacked arrays (a tf_transform's outputs of equal lengths) of features the spec
    says are variable ([*]) into (values, splits)."""
    for name, (_, shape) in spec.items():
        value = batch.get(name)
        if shape is None and isinstance(value, np.ndarray) and value.ndim >= 1:
            rows = value.reshape(value.shape[0], -1)
            splits = np.arange(rows.shape[0] + 1, dtype=np.uint64) * np.uint64(rows.shape[1])
            batch[name] = (rows.reshape(-1), splits)


def _check_spec(columns, spec):
    """An error naming the feature if the columns do not match the job's feature spec."""
    names = [c[0] for c in columns]
    if sorted(names) != sorted(spec):
        raise _RecordError(f"the batch's features {sorted(names)} are not the job's "
                           f"{sorted(spec)}")
    for name, dtype, variable, dims, *_ in columns:
        want_dtype, want_shape = spec[name]
        if dtype != want_dtype:
            raise _RecordError(f"feature '{name}': {dtype}, but the job's features say "
                               f"{want_dtype}")
        if variable != (want_shape is None) or (not variable and list(dims) != want_shape):
            have = "[*]" if variable else str(list(dims))
            want = "[*]" if want_shape is None else str(want_shape)
            raise _RecordError(f"feature '{name}': per-record shape {have}, but the job's "
                               f"features say {want}")


# --- Worker processes ---------------------------------------------------------------------------
#
# The producer's C++ threads start once the pool exists, and forking a process that runs them is
# unsafe. So the pool forks one single-threaded process at its creation, the zygote, which holds
# the pipeline (it is a fork of the producer at that time), and every worker, the first ones and
# the replacements of dead ones, is a fork of the zygote. The producer asks the zygote over a
# SOCK_SEQPACKET socket pair, one small pickled message a request, passing a new worker's file
# descriptors along (SCM_RIGHTS): its shared memory and its end of a socket pair, over which the
# producer sends it record indexes and it answers with the size of the batch it wrote. The zygote
# is the workers' parent: it reaps them and says how they died.

_INITIAL_SHM = 16 << 20
_REQUEST = struct.Struct("<QQ")  # epoch, batch; the record indexes follow, as uint64
_CONTROL_BYTES = 1 << 16  # the largest message on the zygote's socket
_REAP_GRACE = 2.0  # seconds a worker whose channel closed has to exit before it is SIGKILLed
_CLOSE_GRACE = 5.0  # seconds the workers have to exit once the pool closes
DEATH_WINDOW = 60.0  # seconds: the window of the replacement limit (see _WorkerPool)


def max_worker_deaths(workers):
    """How many worker deaths within DEATH_WINDOW seconds a pool of `workers` replaces."""
    return max(10, 2 * workers)


def _fork(main, *args, close=()):
    """Forks a child that closes the objects in `close`, runs main(*args) and exits (status 0, or
    1 if main raised), and returns its pid. The kernel kills the child when its parent dies; it
    ignores SIGINT (its parent decides when it stops) and dies of SIGTERM."""
    parent = os.getpid()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # else the child would write the parent's buffered output again
        except Exception:  # noqa: BLE001 (a closed or odd stream is no reason not to fork)
            pass
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _die_with_parent()
        if os.getppid() == parent:  # else the parent died before the kernel was told
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            for obj in close:
                obj.close()
            main(*args)
            code = 0
    except BaseException:  # noqa: BLE001 (the child must reach os._exit whatever happens)
        traceback.print_exc()
    finally:
        os._exit(code)


def _reap(pid, grace):
    """Waits for child `pid` to exit, SIGKILLing it after `grace` seconds, and returns its wait
    status (None if it is not a child of this process, or was reaped already)."""
    deadline = time.monotonic() + grace
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                return os.waitpid(pid, 0)[1]
            time.sleep(0.005)
    except ChildProcessError:
        return None


def _how(status):
    """How a process of wait status `status` ended, in words."""
    if status is None:
        return "how is unknown"
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return f"exit status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "unnamed"
    return f"killed by signal {-code}, {name}"


def _worker_main(pipeline, channel, fd, capacity):
    """A worker: makes the batches it is asked for, each into its shared memory `fd`, until its
    channel (a socket's file descriptor) closes. A request is _REQUEST's epoch and batch and the
    record indexes (uint64); the answer ("ok", size, capacity) says the batch's bytes are in the
    first `size` bytes of the memory, now `capacity` bytes long, and ("error", code, message)
    why there is no batch."""
    conn = Connection(channel)
    view = mmap.mmap(fd, capacity)
    while True:
        try:
            request = conn.recv_bytes()
        except (EOFError, OSError):
            return
        epoch, g = _REQUEST.unpack_from(request)
        ids = np.frombuffer(request, dtype=np.uint64, offset=_REQUEST.size).copy()
        try:
            batch = pipeline.make(epoch, g, ids)
            size = batch.nbytes
            if size > capacity:
                capacity = max(size, capacity * 2)
                view.close()
                os.ftruncate(fd, capacity)
                view = mmap.mmap(fd, capacity)
            _croupier.batch_copy_into(batch, view)
            reply = ("ok", size, capacity)
        except _RecordError as e:
            reply = ("error", e.code, str(e))
        except Exception as e:  # a bug of croupier's or an unexpected failure: say where
            reply = ("error", _INTERNAL,
                     f"{_describe(e)}\n{''.join(traceback.format_exc(limit=4))}")
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return


def _zygote_main(pipeline, control):
    """The zygote: answers the requests on `control` until the producer closes its end, then
    waits for its workers (they exit once the producer has closed their channels), SIGKILLing
    those still running after _CLOSE_GRACE seconds. Requests and answers:
      ("spawn", capacity) with the worker's memory and channel file descriptors: ("spawned", pid)
        of a new worker, or ("error", message) if none could be forked;
      ("reap", pid): ("reaped", wait status or None) once worker `pid` has exited (it is
        SIGKILLed if it has not within _REAP_GRACE seconds)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # reaping is its job, whatever the producer's
    workers = set()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, _CONTROL_BYTES, 2)
        except OSError:
            break
        if not data:
            break  # the producer closed its end
        request = pickle.loads(data)
        if request[0] == "spawn":
            reply = _spawn_worker(pipeline, control, fds, request[1], workers)
        else:
            workers.discard(request[1])
            reply = ("reaped", _reap(request[1], _REAP_GRACE))
        try:
            control.send(pickle.dumps(reply))
        except OSError:
            break
    deadline = time.monotonic() + _CLOSE_GRACE
    for pid in workers:
        _reap(pid, max(0.0, deadline - time.monotonic()))


def _spawn_worker(pipeline, control, fds, capacity, workers):
    """Forks a worker on the file descriptors `fds` (its memory, its channel), which the zygote
    closes then; adds its pid to `workers`. The answer to a "spawn" request."""
    try:
        if len(fds) != 2:
            return ("error", f"a spawn request came with {len(fds)} file descriptors, not 2")
        pid = _fork(_worker_main, pipeline, fds[1], fds[0], capacity, close=(control,))
    except OSError as e:
        return ("error", f"the zygote could not fork a worker: {_describe(e)}")
    finally:
        for fd in fds:
            os.close(fd)
    workers.add(pid)
    return ("spawned", pid)


class _ZygoteError(Exception):
    """No worker can be made: the zygote is gone, or could not fork one."""


class _Zygote:
    """The producer's handle on the zygote process, which it forks now. Thread-safe."""

    def __init__(self, pipeline):
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.pid = _fork(_zygote_main, pipeline, theirs, close=(self._control,))
        except BaseException:
            self._control.close()
            raise
        finally:
            theirs.close()
        self._lock = threading.Lock()
        self._gone = None  # why it answers no more

    def spawn(self, memfd, channel, capacity):
        """The pid of a new worker on those file descriptors (the zygote gets copies)."""
        reply = self._ask(("spawn", capacity), (memfd, channel))
        if reply[0] != "spawned":
            raise _ZygoteError(reply[1])
        return reply[1]

    def reap(self, pid):
        """The wait status of worker `pid` once it has exited (None if unknown)."""
        return self._ask(("reap", pid))[1]

    def _ask(self, request, fds=()):
        with self._lock:
            if self._gone is None:
                try:
                    if fds:
                        socket.send_fds(self._control, [pickle.dumps(request)], list(fds))
                    else:
                        self._control.send(pickle.dumps(request))
                    data = self._control.recv(_CONTROL_BYTES)
                except OSError:
                    data = b""
                if data:
                    return pickle.loads(data)
                self._gone = (f"the pool's zygote process (pid {self.pid}) is gone "
                              f"({_how(_reap(self.pid, _REAP_GRACE))}), and with it every "
                              "worker: none can be replaced")
            raise _ZygoteError(self._gone)

    def gone(self):
        """Why the zygote answers no more (it exited, and its workers with it), or None while it
        runs. Looks without asking it anything: a zombie is reaped here."""
        with self._lock:
            if self._gone is None:
                try:
                    done, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    done, status = self.pid, None
                if done:
                    self._gone = (f"the pool's zygote process (pid {self.pid}) is gone "
                                  f"({_how(status)}), and with it every worker: none can be "
                                  "replaced")
            return self._gone

    def close(self):
        """Ends the zygote, which waits for its workers first; SIGKILLs it if it takes longer."""
        with self._lock:
            self._control.close()
            if self._gone is None:
                self._gone = "the pool is closed"
                _reap(self.pid, _CLOSE_GRACE + 2.0)


class _WorkerDied(Exception):
    """A worker's channel closed: it died, before it got the request (`before`) or while it
    made the batch."""

    def __init__(self, before):
        super().__init__()
        self.before = before


class _Worker:
    """A worker process as the producer holds it: its pid, its channel, its shared memory."""

    def __init__(self, zygote, index):
        self.index = index
        self.capacity = _INITIAL_SHM
        self.fd = os.memfd_create(f"croupier-worker-{index}", 0)
        self.view = self.conn = None
        try:
            os.ftruncate(self.fd, self.capacity)
            self.view = mmap.mmap(self.fd, self.capacity)
            ours, theirs = socket.socketpair()
            try:
                self.pid = zygote.spawn(self.fd, theirs.fileno(), self.capacity)
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()
            self.conn = Connection(ours.detach())
        except BaseException:
            self.close()
            raise

    def make(self, request):
        """The batch `request` (_REQUEST and the record indexes) asks for: a Batch, or (code,
        message). Raises _WorkerDied if the worker's channel closes."""
        try:
            self.conn.send_bytes(request)
        except OSError:
            raise _WorkerDied(before=True) from None
        try:
            reply = self.conn.recv()
        except (EOFError, OSError):
            raise _WorkerDied(before=False) from None
        if reply[0] != "ok":
            return (reply[1], reply[2])
        _, size, capacity = reply
        if capacity != self.capacity:
            self.view.close()
            self.capacity = capacity
            self.view = mmap.mmap(self.fd, capacity)
        return _croupier.batch_from_buffer(memoryview(self.view)[:size])

    def close_channel(self):
        """Closes the channel: a live worker exits when it reads its end."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self):
        self.close_channel()
        if self.view is not None:
            try:
                self.view.close()
            except BufferError:
                pass
            self.view = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _WorkerPool:
    """`count` worker processes, forked by a zygote process forked now (so before any thread of
    croupier's starts). make() is called by the producer's threads.

    A worker that dies (its channel closes: OOM-killed, a crash in a decoder, a signal) is
    replaced by a new fork of the zygote, and the batch it was making is made again by the
    replacement. If the replacement dies making it too, the batch fails with an error naming both
    deaths (pid, signal or exit status) and that it was tried twice, and the dead worker is
    replaced again: the pool stays at `count` workers. Such a batch is remembered: asked for
    again, it fails at once with the same error, without killing more workers. Each death is
    logged as one line (logger croupier.pipeline, level WARNING).

    Replacing stops for good once more than `max_deaths` workers (default
    max_worker_deaths(count)) have died within `window` seconds, or once a replacement cannot be
    made (the zygote is gone, a fork failed): from then on a dead worker is not replaced, the batch
    it was making fails naming the reason, and once no worker is left every batch fails so, as
    UNAVAILABLE: the producer's trouble, not the batch's (`broken` says why; produce() then leaves
    the job, and its tasks go to the other producers at once)."""

    def __init__(self, pipeline, count, max_deaths=None, window=DEATH_WINDOW):
        self._max_deaths = max_worker_deaths(count) if max_deaths is None else int(max_deaths)
        self._window = float(window)
        self._deaths = collections.deque()  # monotonic times of the deaths within the window
        self._poisoned = {}  # (epoch, batch): the error of a batch that killed two workers
        self._stopped = None  # why no dead worker is replaced any more
        self._closed = False
        self._cond = threading.Condition()
        self._workers = set()  # the live workers
        self._replacing = 0  # dead workers being replaced now
        self._idle = collections.deque()  # first in, first out: each worker takes its turn
        self._zygote = _Zygote(pipeline)
        try:
            for k in range(count):
                worker = _Worker(self._zygote, k)
                self._workers.add(worker)
                self._idle.append(worker)
        except BaseException as e:
            self.close()
            if isinstance(e, _ZygoteError):
                raise errors.InternalError(f"the producer's worker processes could not be "
                                           f"started: {e}") from None
            raise

    @property
    def pids(self):
        """The pids of the zygote and of the live workers (for tests and diagnostics)."""
        with self._cond:
            return [self._zygote.pid] + sorted(w.pid for w in self._workers)

    def make(self, epoch, g, ids):
        """Batch g of `epoch`, of records `ids`: a Batch, or (code, message)."""
        with self._cond:
            poisoned = self._poisoned.get((int(epoch), int(g)))
        if poisoned is not None:
            return (_INTERNAL, f"{poisoned} (not tried again)")
        request = _REQUEST.pack(int(epoch), int(g)) + \
            np.ascontiguousarray(ids, dtype=np.uint64).tobytes()
        deaths = []  # the workers that died making this batch, in words
        worker = self._take()
        while worker is not None:
            try:
                result = worker.make(request)
            except _WorkerDied as died:
                dead = worker
                how = self._bury(dead)
                if not died.before:
                    deaths.append(f"worker pid {dead.pid} ({how})")
                worker = self._replace(dead.index)
                self._log_death(dead, how, died.before, epoch, g, worker, len(deaths))
                if len(deaths) == 2:
                    if worker is not None:
                        self._give_back(worker)
                    message = (f"batch {g} of epoch {epoch} was tried twice and killed its "
                               f"worker both times: {deaths[0]}, then {deaths[1]}; a record of "
                               "it may crash the source or the transform every time")
                    with self._cond:
                        self._poisoned[(int(epoch), int(g))] = message
                    return (_INTERNAL, message)
                continue
            self._give_back(worker)
            return result
        if deaths:
            return (_UNAVAILABLE, f"{deaths[0]} died making batch {g} of epoch {epoch}, which "
                                  f"this producer does not make again: {self._stopped}")
        return (_UNAVAILABLE, f"this producer has no worker left to make batch {g} of epoch "
                              f"{epoch}: {self._stopped}")

    @property
    def broken(self):
        """Why the pool can make no batch any more (no worker is left and none will be
        replaced), or None while it can."""
        with self._cond:
            if self._closed:
                return None
            if self._stopped is not None and not self._workers and not self._replacing:
                return self._stopped
        return self._zygote.gone()  # its workers die with it, whether asked for a batch or not

    def _take(self):
        """An idle worker, waiting for one; None once no worker is left."""
        with self._cond:
            while not self._idle and (self._workers or self._replacing):
                self._cond.wait()
            return self._idle.popleft() if self._idle else None

    def _give_back(self, worker):
        with self._cond:
            if worker in self._workers:
                self._idle.append(worker)
                self._cond.notify()

    def _bury(self, worker):
        """Reaps a dead worker, frees what the producer held of it and counts its death; how it
        died, in words."""
        try:
            how = _how(self._zygote.reap(worker.pid))
        except _ZygoteError:
            how = "how is unknown: the pool's zygote is gone"
        worker.close()
        now = time.monotonic()
        with self._cond:
            self._workers.discard(worker)
            self._replacing += 1  # until _replace has replaced it or not
            self._deaths.append(now)
            while now - self._deaths[0] > self._window:
                self._deaths.popleft()
            if self._stopped is None and len(self._deaths) > self._max_deaths:
                self._stopped = (f"{len(self._deaths)} workers of this producer died within "
                                 f"{self._window:g} s, more than the {self._max_deaths} it "
                                 "replaces: it replaces no more")
        return how

    def _replace(self, index):
        """A new worker in place of dead worker `index` (buried), or None if replacing has
        stopped."""
        worker = None
        with self._cond:
            stopped = self._stopped is not None
        if not stopped:
            try:
                worker = _Worker(self._zygote, index)
            except (_ZygoteError, OSError) as e:
                why = str(e) if isinstance(e, _ZygoteError) else \
                    f"a worker could not be replaced: {_describe(e)}"
                with self._cond:
                    if self._stopped is None:
                        self._stopped = why
        with self._cond:
            self._replacing -= 1
            if worker is not None and not self._closed:
                self._workers.add(worker)
            elif worker is not None:
                worker.close()  # the pool closed meanwhile
                worker = None
            self._cond.notify_all()  # make() calls waiting for a worker check if any is left
        return worker

    def _log_death(self, dead, how, before, epoch, g, new, attempts):
        when = "before it got" if before else "while making"
        if new is None:
            then = f"not replaced: {self._stopped}"
        elif attempts == 2:
            then = f"replaced by pid {new.pid}; the batch fails, having killed 2 workers"
        elif attempts == 1:
            then = f"replaced by pid {new.pid}, which makes the batch again"
        else:
            then = f"replaced by pid {new.pid}, which makes the batch"
        _log.warning("croupier produce: worker %d (pid %d) died (%s) %s batch %d of epoch %d; %s",
                     dead.index, dead.pid, how, when, g, epoch, then)

    def close(self):
        """Ends every worker and the zygote, and waits for them."""
        with self._cond:
            self._closed = True
            workers = list(self._workers)
            self._workers.clear()
            self._idle.clear()
            if self._stopped is None:
                self._stopped = "the producer is closing"
            self._cond.notify_all()
        for w in workers:
            w.close_channel()  # each live worker exits when it reads the end of its channel
        self._zygote.close()  # which waits for them
        for w in workers:
            w.close()


def _in_process(pipeline):
    def make(epoch, g, ids):
        try:
            return pipeline.make(epoch, g, ids)
        except _RecordError as e:
            return (e.code, str(e))
        except Exception as e:
            return (_INTERNAL, _describe(e))
    return make


# --- produce() ----------------------------------------------------------------------------------

def _job_done(dispatcher, job, info, auth_token):
    """Every rank of `job` has acknowledged the end of its last epoch (bounded jobs only), or the
    job was deleted. Asks about this job alone (GetJob), never the whole status. Not the job's
    state "done" alone: that is also every task served, when a consumer may still need a batch
    made again (a restarted rank), which this producer must then be there to make."""
    epochs = int(info["spec"].get("num_epochs", 0))
    if epochs == 0:
        return False
    steps = int(info["steps_per_epoch"])
    world = int(info["spec"]["num_consumers"])
    try:
        got = get_job(dispatcher, job, auth_token=auth_token)
    except errors.NotFoundError:
        return True  # deleted: nobody can read it any more
    positions = got.get("rank_positions", [])
    if len(positions) < world:
        return False
    return all((int(p.get("epoch", 0)), int(p.get("step", 0))) >= (epochs - 1, steps)
               for p in positions)


def produce(source, dispatcher, job, *, batch_size, consumers=None, epochs=1, seed=0,
            shuffle="global", remainder="drop", block_size=0, window_blocks=0, mode="dealt",
            transform=None, batch_transform=None, collate=None, names=None, features=None,
            tf_transform=None, skip_failing_records=False, decode=None, cache_bytes=0,
            workers=None, threads=None, auth_token=None, buffer_bytes=256 << 20, max_tasks=2,
            bind="127.0.0.1", advertise_host="", timeout=60.0, stop=None, resume_from=None,
            dispatcher_timeout=120.0, _on_serving=None):
    """Runs a producer of map job `job`, whose records are `source[i]` (any object with
    __len__ and __getitem__; a `get_many(indexes)` method, if it has one, reads a batch's
    records at once), until every rank has read the job's last epoch (epochs > 0) or `stop`
    (a threading.Event) is set.

    The job is created if it does not exist (or reused if it exists with the same spec):
    `consumers` ranks (default: the launcher's world size), batches of `batch_size` records,
    `epochs` (0: without end), the plan's `seed`, `shuffle` ("none", "global", "blocks"),
    `remainder` ("drop", "pad"), `mode` ("dealt", "first_come"), `resume_from` (a consumer's
    state_dict, to continue with another number of consumers). Several processes may call
    produce() with the same arguments: each is one more producer of the job.

    transform(record, rng) runs on every record (rng: record_rng(seed, epoch, index)); a
    transform of one argument is called without it. collate(records) makes the batch dict
    (default: default_collate, with `names` for tuple records). batch_transform(batch, rng)
    runs on the collated batch (rng: batch_rng(seed, epoch, batch)). `features`: the job's
    feature spec text ("image:uint8[32,32,3],label:int64,tokens:int32[*]"); default: read off
    batch 0 of epoch 0, made at start, which also checks the source and transforms before any
    consumer waits. A batch that fails reaches the consumer that needs it as the error, naming
    the epoch, the batch, the record index and the exception.

    decode(record) -> record runs on every record read from the source, before transform. The
    caller promises that it is deterministic: a function of the record alone (no generator, no
    global state, no clock), as a JPEG decode is. With cache_bytes > 0, what decode makes (without
    decode: the source's records themselves) is kept by global record index in a record cache
    (croupier.record_cache) that all the workers of this producer share: a directory on /dev/shm
    (shared memory) made before the workers are forked and removed when produce() returns, on
    error too. A record found there is neither read from the source nor decoded again, so the
    epochs after the first run only transform and batch_transform, and every batch holds the same
    bytes as without the cache. It holds at most cache_bytes bytes (counted in whole pages);
    once a record does not fit it is full and adds no more (nothing is evicted; the other
    records are read and decoded each time). A record is decoded once per producer even when
    workers need it at once (they wait for the one making it). A cache file that is corrupt or
    unreadable is a miss: removed, made again. Each producer has its own cache.

    Returns {"record_cache": counts} (None without a cache): hits, misses (records made),
    bytes and records held, not_added (made while it was full), corrupt, full, capacity, path
    (RecordCache.stats()); the same counts are logged as one line on the logger
    croupier.pipeline (INFO): "record cache: H hits, M misses, B bytes in F records".

    skip_failing_records=True (a setting of the job, so every producer skips alike): a record
    whose read, decode or transform raises is left out of its batch, which then holds fewer records,
    instead of failing the batch; each is logged (logger "croupier.pipeline") and counted in the
    producers' status (stats.records_skipped) and metrics (croupier_producer_records_skipped_total).
    A batch all of whose records fail is still an error. With tf_transform, a record the function
    fails on is found (the batch's records run again in halves) and left out.

    `workers` worker processes (default: default_workers(); 0: none) make the batches; the
    producer's own threads (`threads`, default max(workers, 1)) hand them out. A worker that dies
    (OOM-killed, a crash in native code, a signal) is replaced, and the batch it was making is
    made again by the replacement, identical; a batch that kills that worker too fails (INTERNAL)
    with an error naming the epoch, the batch, both workers' pids and how they died, and says it
    was tried twice, while the other batches go on. Each death is logged as one line (logger
    croupier.pipeline, WARNING). Replacing stops for good once more than
    max_worker_deaths(workers) = max(10, 2 * workers) workers have died within DEATH_WINDOW (60)
    seconds, or once no worker can be forked: dead workers are then not replaced, their batches
    fail naming why, and once none is left every batch fails so (restart the producer).

    tf_transform(ds) -> ds is a tf.data pipeline run on each batch's records instead of
    transform and collate (croupier.tf_pipeline): `ds` has one element per record of the batch,
    in plan order, holding the record's fields and "croupier_seed" (int64 [2], the record's seed
    for tf.random.stateless_* ops: tf_pipeline.record_seed(seed, epoch, index)); it must return
    one element per record, in order (a map), a dict of tensors that croupier collates. It runs
    in TensorFlow's runtime, called from the producer's own threads (`threads`, default
    max(2, default_workers())): no worker process is forked once TensorFlow runs, so `workers`
    must be 0 or None. decode and the record cache work with it too: the records that go into
    the tf.data pipeline are decode's outputs, from the cache when it holds them.

    If the dispatcher does not answer for `dispatcher_timeout` seconds, produce() stops and
    raises UnavailableError naming it."""
    if consumers is None:
        from croupier.launcher import detect_rank_world
        _, consumers = detect_rank_world(0, None)
    if workers is None:
        workers = default_workers() if tf_transform is None else 0
    workers = int(workers)
    if workers < 0:
        raise errors.InvalidArgumentError(f"workers must be 0 or more, not {workers}")
    if tf_transform is not None and workers > 0:
        # Forking a process once TensorFlow has started its thread pools is unsafe, and it is
        # started here (batch 0 is made before the workers would be forked).
        raise errors.InvalidArgumentError(
            f"job '{job}': tf_transform runs in the producer's own threads, TensorFlow's runtime "
            f"doing the parallel work; workers must be 0 (not {workers}): no process is forked "
            "once TensorFlow runs")
    if tf_transform is not None and threads is None:
        threads = max(2, default_workers())
    pipeline = Pipeline(source, transform=transform, batch_transform=batch_transform,
                        collate=collate, names=names, features=features, seed=seed,
                        tf_transform=tf_transform, skip_failing_records=skip_failing_records,
                        decode=decode, cache_bytes=cache_bytes)
    try:
        num_records = len(pipeline)
        if num_records == 0:
            raise errors.InvalidArgumentError(f"the source of job '{job}' is empty")
        plan = _croupier.EpochPlan(num_records, int(batch_size), int(consumers), seed=int(seed),
                                   epoch=0, shuffle=shuffle, remainder=remainder,
                                   block_size=int(block_size) or 1024,
                                   window_blocks=int(window_blocks) or 16)
        if plan.num_batches == 0:
            raise errors.InvalidArgumentError(
                f"job '{job}': {num_records} records make no whole round of {consumers} batches of "
                f"{batch_size}")
        if features is None:
            # Batch 0 of epoch 0, made here before anything starts: the job's features, and an
            # early check of the source and the transforms (an error here is the caller's, not a
            # trainer's). With a record cache, its records are the cache's first.
            try:
                first = pipeline.make(0, 0, plan.batch(0))
            except _RecordError as e:
                raise errors.BY_CODE.get(e.code, errors.InternalError)(
                    f"job '{job}' epoch 0 batch 0: {e}") from None
            features = features_of(first.to_dict())
            pipeline.features = features
            pipeline._spec = _spec_of(features)
        # The workers are forked before croupier starts a thread of its own in this process. Every
        # close is inside running(): a thread in one when the interpreter exits is waited for.
        with _exit.running():
            pool = _WorkerPool(pipeline, workers) if workers > 0 else None
            make = pool.make if pool is not None else _in_process(pipeline)
            node = None
            try:
                info = create_job(dispatcher, job, [], features, batch_size, consumers=consumers,
                                  seed=seed, epochs=epochs, shuffle=shuffle, remainder=remainder,
                                  mode=mode, block_size=block_size, window_blocks=window_blocks,
                                  source="map", num_records=num_records, resume_from=resume_from,
                                  skip_failing_records=skip_failing_records, exist_ok=True,
                                  auth_token=auth_token, timeout=timeout)
                threads = int(threads) if threads is not None else max(workers, 1)
                node = _exit.track(_croupier._MapProducer(
                    dispatcher, job, _token(auth_token), threads, int(buffer_bytes), int(max_tasks),
                    bind, advertise_host, float(timeout), make))
                if _on_serving is not None:
                    _on_serving()  # the command line's graceful stop (main)
                _wait_for_the_end(node, pool, dispatcher, job, info, auth_token, stop,
                                  dispatcher_timeout)
            except errors.Error:
                if not _exit.exiting.is_set():
                    raise
            finally:
                if node is not None:
                    node.close()
                if pool is not None:
                    pool.close()
    finally:
        cache = pipeline.cache_stats()
        pipeline.close()  # after the workers have exited: removes the record cache
        if cache is not None:
            _log.info("croupier produce: job '%s': %s", job, summary(cache))
    return {"record_cache": cache}


def _wait_for_the_end(node, pool, dispatcher, job, info, auth_token, stop, dispatcher_timeout):
    """Returns once every rank has read the job's last epoch, or `stop` is set. Raises
    UnavailableError once the worker pool can make no batch (the caller's node.close() then
    leaves the job: its tasks go to the other producers at once)."""
    while True:
        broken = pool.broken if pool is not None else None
        if broken is not None:
            _log.error("croupier produce: job '%s': this producer leaves the job, its worker pool "
                       "can make no batch any more: %s", job, broken)
            raise errors.UnavailableError(
                f"the producer of job '{job}' left it: its worker pool can make no batch any "
                f"more: {broken}")
        if stop is not None and stop.wait(1.0):
            return
        if stop is None:
            _exit.exiting.wait(1.0)
        if _exit.exiting.is_set():
            return  # the interpreter is exiting
        silent = node.since_dispatcher_contact()
        if silent > dispatcher_timeout:
            raise errors.UnavailableError(
                f"the dispatcher at {dispatcher} has not answered the producer of job "
                f"'{job}' for {silent:.0f} s (dispatcher_timeout {dispatcher_timeout:g} s)")
        try:
            if _job_done(dispatcher, job, info, auth_token):
                return
        except (errors.UnavailableError, errors.DeadlineExceededError):
            pass  # the dispatcher restarts; the producer keeps retrying it on its own


# --- python -m croupier produce -----------------------------------------------------------------

def _load(spec):
    """The object `module:attribute` names."""
    import importlib
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise errors.InvalidArgumentError(f"'{spec}' is not module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise errors.InvalidArgumentError(f"cannot import {module_name} (for {spec}): "
                                          f"{_describe(e)}") from None
    obj = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise errors.InvalidArgumentError(f"{module_name} has no {attribute} (for {spec})") \
                from None
    return obj


def main(argv=None):
    """`python -m croupier produce module:function --dispatcher HOST:PORT --job NAME`: a producer
    of a map job, on any machine that can import `module`. function() returns produce()'s keyword
    arguments as a dict (source, batch_size, transform, epochs, ...); the flags here set where it
    serves, with how many workers and how large a record cache. Prints the record cache's counts
    when it ends, if it had one."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m croupier produce", description=main.__doc__)
    parser.add_argument("pipeline", help="module:function returning produce()'s arguments")
    parser.add_argument("--dispatcher", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--workers", type=int, default=None,
                        help=f"worker processes (default {default_workers()}: the cores here; 0 "
                             "with tf_transform, which forks none)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cache-bytes", type=int, default=None,
                        help="the record cache's size on /dev/shm, in bytes (default: what the "
                             "function returns, or 0: none)")
    parser.add_argument("--auth-token", default=None)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--advertise-host", default="")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    try:
        options = _load(args.pipeline)()
        if not isinstance(options, dict) or "source" not in options:
            raise errors.InvalidArgumentError(
                f"{args.pipeline}() must return a dict of produce() arguments with 'source'")
        options = dict(options)
        source = options.pop("source")
        for key in ("workers", "threads", "cache_bytes", "auth_token", "timeout"):
            if getattr(args, key) is not None:
                options[key] = getattr(args, key)
        stop = threading.Event()

        def graceful():
            # Once serving: a signal stops the producer cleanly (it leaves the job, handing its
            # tasks back). Until then the default action ends the process at once: a Python handler
            # would run only after the wait for the dispatcher (up to --timeout) returned.
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            signal.signal(signal.SIGINT, lambda *_: stop.set())

        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        done = produce(source, args.dispatcher, args.job, bind=args.bind,
                       advertise_host=args.advertise_host, stop=stop, _on_serving=graceful,
                       **options)
        if done["record_cache"] is not None:
            print(f"croupier produce: job '{args.job}': {summary(done['record_cache'])}",
                  flush=True)
    except errors.Error as e:
        print(f"croupier produce: {type(e).__name__}: {e}", flush=True)
        return 1
    return 0
