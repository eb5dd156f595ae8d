"""croupier.map.pool: a producer's worker pool, the supervisor of its worker processes.

WorkerPool hands a batch to an idle worker (croupier.map.zygote's Worker, a fork of the zygote),
replaces a worker that dies, makes its batch again, and says when a batch fails instead and when
replacing stops. in_process() makes batches in the producer's own threads instead (workers=0).
"""
import collections
import os
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple


from croupier import errors
from croupier.errors import BatchError
from croupier.map.pipeline import Pipeline, log
from croupier.runtime.processes import describe, how_it_ended
from croupier.map.zygote import Result, Worker, WorkerDied, Zygote, ZygoteError

__all__ = ["WorkerPool", "in_process", "default_workers", "max_worker_deaths", "DEATH_WINDOW"]

# Makes batch g of an epoch from record indexes: a Batch, or (numeric error code, message).
MakeBatch = Callable[[int, int, Any], Result]


def default_workers() -> int:
    """The worker processes a producer starts by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


DEATH_WINDOW = 60.0  # seconds: the window of the replacement limit (see WorkerPool)


def max_worker_deaths(workers: int) -> int:
    """How many worker deaths within DEATH_WINDOW seconds a pool of `workers` replaces."""
    return max(10, 2 * workers)


class WorkerPool:
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

    def __init__(self, pipeline: Pipeline, count: int, max_deaths: Optional[int] = None,
                 window: float = DEATH_WINDOW) -> None:
        self._max_deaths = max_worker_deaths(count) if max_deaths is None else int(max_deaths)
        self._window = float(window)
        # The monotonic times of the deaths within the window.
        self._deaths: Deque[float] = collections.deque()
        # (epoch, batch): the error of a batch that killed two workers.
        self._poisoned: Dict[Tuple[int, int], str] = {}
        self._stopped: Optional[str] = None  # why no dead worker is replaced any more
        self._closed = False
        self._cond = threading.Condition()
        self._workers = set()  # the live workers
        self._replacing = 0  # dead workers being replaced now
        # First in, first out: each worker takes its turn.
        self._idle: Deque[Worker] = collections.deque()
        self._zygote = Zygote(pipeline)
        try:
            for k in range(count):
                worker = Worker(self._zygote, k)
                self._workers.add(worker)
                self._idle.append(worker)
        except BaseException as e:
            self.close()
            if isinstance(e, ZygoteError):
                raise errors.InternalError(f"the producer's worker processes could not be "
                                           f"started: {e}") from None
            raise

    @property
    def pids(self) -> List[int]:
        """The pids of the zygote and of the live workers (for tests and diagnostics)."""
        with self._cond:
            return [self._zygote.pid] + sorted(w.pid for w in self._workers)

    def make(self, epoch: int, g: int, ids: Any) -> Result:
        """Batch g of `epoch`, of records `ids`: a Batch, or (code, message)."""
        with self._cond:
            poisoned = self._poisoned.get((int(epoch), int(g)))
        if poisoned is not None:
            return (errors.INTERNAL, f"{poisoned} (not tried again)")
        deaths = []  # the workers that died making this batch, in words
        worker = self._take()
        while worker is not None:
            try:
                result = worker.make(epoch, g, ids)
            except WorkerDied as died:
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
                    return (errors.INTERNAL, message)
                continue
            self._give_back(worker)
            return result
        if deaths:
            return (errors.UNAVAILABLE,
                    f"{deaths[0]} died making batch {g} of epoch {epoch}, which this producer "
                    f"does not make again: {self._stopped}")
        return (errors.UNAVAILABLE, f"this producer has no worker left to make batch {g} of epoch "
                                    f"{epoch}: {self._stopped}")

    @property
    def broken(self) -> Optional[str]:
        """Why the pool can make no batch any more (no worker is left and none will be
        replaced), or None while it can."""
        with self._cond:
            if self._closed:
                return None
            if self._stopped is not None and not self._workers and not self._replacing:
                return self._stopped
        return self._zygote.gone()  # its workers die with it, whether asked for a batch or not

    def _take(self) -> Optional[Worker]:
        """An idle worker, waiting for one; None once no worker is left."""
        with self._cond:
            while not self._idle and (self._workers or self._replacing):
                self._cond.wait()
            return self._idle.popleft() if self._idle else None

    def _give_back(self, worker: Worker) -> None:
        with self._cond:
            if worker in self._workers:
                self._idle.append(worker)
                self._cond.notify()

    def _bury(self, worker: Worker) -> str:
        """Reaps a dead worker, frees what the producer held of it and counts its death; how it
        died, in words."""
        try:
            how = how_it_ended(self._zygote.reap(worker.pid))
        except ZygoteError:
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

    def _replace(self, index: int) -> Optional[Worker]:
        """A new worker in place of dead worker `index` (buried), or None if replacing has
        stopped."""
        worker = None
        with self._cond:
            stopped = self._stopped is not None
        if not stopped:
            try:
                worker = Worker(self._zygote, index)
            except (ZygoteError, OSError) as e:
                why = str(e) if isinstance(e, ZygoteError) else \
                    f"a worker could not be replaced: {describe(e)}"
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

    def _log_death(self, dead: Worker, how: str, before: bool, epoch: int, g: int,
                   new: Optional[Worker], attempts: int) -> None:
        when = "before it got" if before else "while making"
        if new is None:
            then = f"not replaced: {self._stopped}"
        elif attempts == 2:
            then = f"replaced by pid {new.pid}; the batch fails, having killed 2 workers"
        elif attempts == 1:
            then = f"replaced by pid {new.pid}, which makes the batch again"
        else:
            then = f"replaced by pid {new.pid}, which makes the batch"
        log.warning("croupier produce: worker %d (pid %d) died (%s) %s batch %d of epoch %d; %s",
                     dead.index, dead.pid, how, when, g, epoch, then)

    def close(self) -> None:
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


def in_process(pipeline: Pipeline) -> MakeBatch:
    """make(epoch, g, ids) in the calling thread, as WorkerPool.make answers."""
    def make(epoch: int, g: int, ids: Any) -> Result:
        try:
            return pipeline.make(epoch, g, ids)
        except BatchError as e:
            return (e.code, str(e))
        except Exception as e:
            return (errors.INTERNAL, describe(e))
    return make
