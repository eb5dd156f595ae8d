"""croupier.serve: any Python iterable of batches, served as a producer of a job.

    croupier.serve(loader, "HOST:5050", "train", consumers=4, epochs=3)

Batch g of epoch e is the g-th batch the iterable yields in epoch e, dealt like any job's batch g:
to consumer g % N as its step g // N. Each epoch iterates the source anew (`iter(source)`), or
calls it with the epoch number when it is a function (`source(epoch)` returns that epoch's
iterable).

Several processes can serve one job for throughput (source_count=K, each with its own
source_index k): the job's tasks (runs of T = job.batches_per_task batches) go to the sources
in turn, so global batch g comes from source (g // T) % K as the
((g // T) // K * T + g % T)-th batch that source yields in the epoch (the job's own arithmetic,
src/job/job.h, answers it: _croupier.JobSources of the croupier.Job). Each source yields its own share; with
deterministic sources the deal is deterministic.

What holds depends on the source (docs/python.md):
  - exactly once and equal steps hold always: every planned batch goes to one consumer, and every
    consumer gets len(source) // N batches per epoch (the last len(source) % N are not dealt);
  - determinism holds when the source yields the same batches in the same order each time it is
    iterated for an epoch (a seeded pipeline);
  - resuming from a checkpoint, or going back for a dead serving process's tasks, skips the
    batches before the position by iterating past them; with state_dir, a source that has
    state_dict()/load_state_dict() (torchdata's StatefulDataLoader, say) has its state saved
    at every task boundary and is loaded from the last saved point at or before the position
    instead (_SavedStates);
  - a crash of the serving process loses its buffered batches: nothing can make them again.
"""
import os
import pathlib
import pickle
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from croupier import _croupier, errors
from croupier.client import auth_token_or_env, create_job
from croupier.columns import columns_of, features_of
from croupier.runtime import at_exit
from croupier.runtime.serving import serve_until_the_end

__all__ = ["serve"]

class _CannotGoBack(errors.DataLossError):
    """A batch a stream cannot make again."""


class _SavedStates:
    """A source's state_dict() at points of each epoch, in files of a folder, so that a serving
    process can start an epoch at a saved point instead of iterating from its start: file
    JOB-sourceK-epochE-batchN.pkl holds the state after the source yielded its first N batches
    of epoch E (load_state_dict(state), then iter(source), yields batch N on). States of epochs
    before the one before the newest are removed."""

    def __init__(self, folder: str, job: str, source_index: int, every: int) -> None:
        self.folder = pathlib.Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.prefix = f"{job}-source{int(source_index)}-"
        self.every = max(1, int(every))
        self._pattern = re.compile(re.escape(self.prefix) + r"epoch(\d+)-batch(\d+)\.pkl")

    def _saved(self) -> Dict[Tuple[int, int], pathlib.Path]:
        """{(epoch, batch): path} of the states in the folder."""
        out = {}
        for path in self.folder.glob(self.prefix + "*.pkl"):
            m = self._pattern.fullmatch(path.name)
            if m:
                out[(int(m.group(1)), int(m.group(2)))] = path
        return out

    def save(self, source: Any, epoch: int, n: int) -> None:
        """Saves the state of `source`, which has yielded `n` batches of `epoch`, if n is a
        saving point."""
        if n % self.every:
            return
        path = self.folder / f"{self.prefix}epoch{epoch}-batch{n}.pkl"
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        with open(tmp, "wb") as f:
            pickle.dump(source.state_dict(), f)
        os.replace(tmp, path)
        for (e, _), old in self._saved().items():
            if e + 1 < epoch:
                old.unlink(missing_ok=True)

    def points(self, epoch: int, wanted: int) -> List[int]:
        """The saved points n of `epoch` with 0 < n <= wanted, latest first."""
        return sorted((n for (e, n) in self._saved() if e == epoch and 0 < n <= wanted),
                      reverse=True)

    def best(self, epoch: int, wanted: int) -> Optional[Tuple[int, Any]]:
        """(n, state) of the latest saved point n <= wanted of `epoch` (n > 0), or None. A file
        that cannot be read is passed over."""
        for n in self.points(epoch, wanted):
            try:
                with open(self.folder / f"{self.prefix}epoch{epoch}-batch{n}.pkl", "rb") as f:
                    return n, pickle.load(f)
            except (OSError, EOFError, pickle.UnpicklingError):
                continue
        return None


class _Epochs:
    """The source's batches, epoch by epoch, with a peeked first batch put back; with `states`
    (a _SavedStates), the source's state saved at its points and loaded to go to a batch."""

    def __init__(self, source: Any, states: Optional[_SavedStates] = None) -> None:
        self._source = source
        self._states = states
        self._epoch: Optional[int] = None
        self._it: Any = None
        self._next = 0  # the index the iterator yields next
        self._pushed: Any = None  # a batch peeked and put back

    def _open(self, epoch: int, wanted: int = 0) -> None:
        iterable = self._source(epoch) if callable(self._source) and not hasattr(
            self._source, "__iter__") else self._source
        saved = self._states.best(epoch, wanted) if self._states is not None else None
        if saved is not None:
            self._source.load_state_dict(saved[1])
            self._it = iter(self._source)
            self._epoch, self._next = epoch, saved[0]
            return
        it = iter(iterable)
        if iterable is self._source and it is iterable and self._it is not None:
            # An iterator (a generator object, say) is its own iterator: iterating it again goes
            # on where it was, so it cannot give an epoch again, nor go back in one.
            raise _CannotGoBack(
                f"batch {wanted} of epoch {epoch} cannot be made: the source is a "
                f"one-shot {type(iterable).__name__}; give serve() a function of the epoch or "
                "an object that can be iterated again (a list, a DataLoader), or make the job a "
                "map job (croupier.produce)")
        self._it = it
        self._epoch, self._next = epoch, 0

    def peek(self, epoch: int) -> Any:
        self._open(epoch)
        try:
            self._pushed = next(self._it)
        except StopIteration:
            raise errors.InvalidArgumentError(f"the source yields no batch in epoch {epoch}")
        return self._pushed

    def _worth_a_jump(self, epoch: int, index: int) -> bool:
        """Whether a saved point lies between the next batch and `index`, at least a saving
        interval ahead: loading it skips iterating up to it."""
        if self._states is None or index - self._next < self._states.every:
            return False
        points = self._states.points(epoch, index)
        return bool(points) and points[0] > self._next

    def get(self, epoch: int, index: int) -> Any:
        """Batch `index` of `epoch`; StopIteration if the source ends before it. Going back (a
        task a dead serving process left unfinished, taken over by this one) iterates the
        epoch anew from its start, or from a saved state at or before it; _CannotGoBack if the
        source cannot be iterated anew."""
        if epoch != self._epoch or index < self._next or self._worth_a_jump(epoch, index):
            self._open(epoch, index)
            self._pushed = None
        while True:
            if self._pushed is not None:
                value, self._pushed = self._pushed, None
            else:
                value = next(self._it)
            self._next += 1
            if self._states is not None:
                self._states.save(self._source, epoch, self._next)
            if self._next - 1 == index:
                return value


def serve(source: Any, dispatcher: str, job: str, *, consumers: Optional[int] = None,
          epochs: int = 1, batches_per_epoch: Optional[int] = None,
          features: Optional[str] = None, mode: str = "dealt", auth_token: Optional[str] = None,
          buffer_bytes: int = 256 << 20, bind: str = "127.0.0.1", advertise_host: str = "",
          timeout: float = 60.0, stop: Any = None, source_index: int = 0,
          source_count: int = 1, dispatcher_timeout: float = 120.0,
          state_dir: Optional[str] = None) -> int:
    """Serves `source` as the producer of Python job `job` until every rank has read the job's
    last epoch (or forever, with epochs=0), or until `stop` (a threading.Event) is set, then
    returns the number of batches it served. A source that runs out before batches_per_epoch is an
    error: the consumers asking for the missing batches get it (OutOfRangeError), and serve()
    raises it too, `timeout` seconds later at most.

    The job is created (or, if it exists with the same spec, reused): `consumers` ranks (default
    from the launcher's world size), `epochs` (0: without end), `batches_per_epoch` (default
    len(source)), `features` (default: read off the first batch), `mode` dealt or first_come.
    Each batch is a dict {name: array}: numeric arrays, each carried in its own dtype (bool,
    int8/16/32/64, uint8/16/32/64, float16, bfloat16 as ml_dtypes.bfloat16, float32, float64;
    torch and TensorFlow tensors are converted, torch.bfloat16 without a float32 round trip),
    lists of bytes (or croupier.BytesColumn objects, as to_dict(bytes_as="buffer") gives), or
    (values, row_splits) for a variable length; the leading dimension is the batch. With source_count K > 1, K
    processes call serve() for the job, each with its source_index in [0, K), and
    batches_per_epoch is the job's total over all sources.

    If the dispatcher does not answer for `dispatcher_timeout` seconds (it is gone, or
    unreachable), serve() stops and raises UnavailableError naming it and how long it has been
    silent.

    state_dir: for a source with state_dict() and load_state_dict() (torchdata's
    StatefulDataLoader, or a class of a user's): serve() saves source.state_dict() in this
    folder (pickled, one file per point) after every job.batches_per_task batches the source
    yields in an epoch, and a serving process that must start an epoch past its beginning (a
    consumer resumed from a checkpoint, the tasks of a dead serving process) loads the last
    saved point at or before it, load_state_dict(state) then iter(source), instead of iterating
    from the start. The contract: after load_state_dict of a state taken once n batches of an
    epoch were yielded, iter(source) yields batch n of that epoch on. A folder every serving
    process of the job can reach (one machine, or a shared file system)."""
    if consumers is None:
        from croupier.launcher import detect_rank_world
        _, consumers = detect_rank_world(0, None)
    if batches_per_epoch is None:
        try:
            batches_per_epoch = len(source)
        except TypeError:
            raise errors.InvalidArgumentError(
                "the source has no len(): pass batches_per_epoch") from None
    if state_dir is not None and not (hasattr(source, "state_dict") and
                                      hasattr(source, "load_state_dict")):
        raise errors.InvalidArgumentError(
            f"state_dir is for a source with state_dict() and load_state_dict(); a "
            f"{type(source).__name__} has not both")
    epochs_source = _Epochs(source)
    first = epochs_source.peek(0)
    if features is None:
        features = features_of(first)
    num_records, _ = columns_of(first)
    created = create_job(dispatcher, job, [], features, num_records, consumers=consumers,
                         epochs=epochs, mode=mode, shuffle="none", source="python",
                         batches_per_epoch=batches_per_epoch, source_count=source_count,
                         exist_ok=True, auth_token=auth_token, timeout=timeout)
    sources = _croupier.JobSources(created)  # which batches are this source's
    if state_dir is not None:
        epochs_source._states = _SavedStates(state_dir, job, source_index,
                                             created.batches_per_task)
    last = sources.last_task_end(int(source_index))
    if epochs > 0 and last is None:
        return 0  # more sources than tasks: this one has nothing to serve
    grace = min(timeout, 10.0)  # how long the ranks have to see a source's error
    feeder = _Feeder(sources, epochs_source, job, batches_per_epoch, grace)
    node = at_exit.track(_croupier._Producer.stream(
        dispatcher, job, auth_token_or_env(auth_token), int(buffer_bytes), bind, advertise_host,
        float(timeout), int(source_index), feeder.feed))
    # The node is closed inside running(): a thread in close() when the interpreter exits is
    # waited for (croupier/runtime/at_exit.py).
    with at_exit.running():
        try:
            ended = serve_until_the_end(node, job, stop=stop,
                                        dispatcher_timeout=dispatcher_timeout,
                                        check=feeder.check, early_end_grace=grace)
            return int(ended["batches_served"])
        except errors.Error:
            if at_exit.exiting.is_set():
                return 0  # closed by the exit: nothing went wrong
            raise
        finally:
            node.close()


class _Feeder:
    """serve()'s supply: the batch the producer asks for, from the source (feed, called by the
    C++ producer, ProducerNode::Serve). An exception the source raises fails that batch at the
    ranks that ask for it (INTERNAL, naming it), and `grace` seconds later ends serve() with
    the exception itself (check), as a source that runs out early does with OutOfRangeError."""

    def __init__(self, sources: _croupier.JobSources, epochs_source: _Epochs, job: str,
                 batches_per_epoch: int, grace: float) -> None:
        self._sources, self._epochs, self._job = sources, epochs_source, job
        self._batches_per_epoch, self._grace = batches_per_epoch, grace
        self._raised: Optional[Tuple[float, BaseException]] = None

    def feed(self, epoch: int, g: int) -> Tuple[int, Any]:
        # This source's own numbering: it yields only the batches of its tasks.
        index = self._sources.ordinal(epoch, g)
        try:
            batch = self._epochs.get(epoch, index)
        except _CannotGoBack as e:
            return errors.DATA_LOSS, f"job '{self._job}': {e}"
        except StopIteration:
            return errors.OUT_OF_RANGE, (
                f"the Python source of job '{self._job}' ended after {self._epochs._next} "
                f"batches of epoch {epoch}; the job deals {self._batches_per_epoch} an epoch")
        except (KeyboardInterrupt, SystemExit) as e:
            self._raised = (-float("inf"), e)  # at once: not the source's failure
            return errors.CANCELLED, f"batch {index} of epoch {epoch}: the producer stops"
        except BaseException as e:
            if self._raised is None:
                self._raised = (time.monotonic(), e)
            return errors.INTERNAL, f"batch {index} of epoch {epoch}: the source raised {e!r}"
        try:
            return columns_of(batch)
        except errors.Error as e:
            return errors.code_of(e), f"batch {index} of epoch {epoch}: {e}"

    def check(self) -> None:
        if self._raised is not None and time.monotonic() - self._raised[0] > self._grace:
            raise self._raised[1]
