"""croupier.map.pool: a producer's worker pool, the supervisor of its worker processes.

WorkerPool starts the worker processes (forks of croupier.map.zygote's zygote) under their C++
supervisor (src/producer/worker_pool.h), which hands a batch to an idle worker, replaces a worker
that dies, makes its batch again, and says when a batch fails instead and when replacing stops. in_process() makes batches in the producer's own threads instead (workers=0).
"""
import os
import socket
from typing import Any, Callable, List, Optional, Tuple, Union

from croupier import _croupier, errors
from croupier.errors import BatchError
from croupier.map.pipeline import Pipeline, log
from croupier.runtime.processes import describe, how_it_ended
from croupier.map.zygote import Result, Zygote, ZygoteError

__all__ = ["WorkerPool", "in_process", "default_workers", "max_worker_deaths", "DEATH_WINDOW",
           "WORKER_TIMEOUT"]

# Makes batch g of an epoch from record indexes: a Batch, or (numeric error code, message).
MakeBatch = Callable[[int, int, Any], Result]


def default_workers() -> int:
    """The worker processes a producer starts by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


DEATH_WINDOW = 60.0  # seconds: the window of the replacement limit (see WorkerPool)
WORKER_TIMEOUT = 600.0  # seconds a worker has to make a batch before it is killed and replaced


def max_worker_deaths(workers: int) -> int:
    """How many worker deaths within DEATH_WINDOW seconds a pool of `workers` replaces."""
    return max(10, 2 * workers)


class WorkerPool:
    """`count` worker processes, forked by a zygote process forked now (so before any thread of
    croupier's starts), and supervised by C++ (_croupier._WorkerPool, src/producer/worker_pool.h,
    whose header says what it does when a worker dies). make() is called by the producer's
    threads; `native` is what the producer node calls instead, without Python.

    A worker that dies (its channel closes: OOM-killed, a crash in a decoder, a signal) is
    replaced by a new fork of the zygote, and the batch it was making is made again by the
    replacement. If the replacement dies making it too, the batch fails with an error naming both
    deaths (pid, signal or exit status) and that it was tried twice, and the dead worker is
    replaced again: the pool stays at `count` workers. Such a batch is remembered: asked for
    again, it fails at once with the same error, without killing more workers. Each death is
    logged as one line (logger croupier.pipeline, level WARNING). A worker stuck on a batch (no
    answer within `batch_timeout` seconds; None: no limit) is SIGKILLed and counts as a death.

    Replacing stops for good once more than `max_deaths` workers (default
    max_worker_deaths(count)) have died within `window` seconds, or once a replacement cannot be
    made (the zygote is gone, a fork failed): from then on a dead worker is not replaced, the batch
    it was making fails naming the reason, and once no worker is left every batch fails so, as
    UNAVAILABLE: the producer's trouble, not the batch's (`broken` says why; produce() then leaves
    the job, and its tasks go to the other producers at once)."""

    def __init__(self, pipeline: Pipeline, count: int, max_deaths: Optional[int] = None,
                 window: float = DEATH_WINDOW,
                 batch_timeout: Optional[float] = WORKER_TIMEOUT) -> None:
        if batch_timeout is not None and not batch_timeout > 0:
            raise errors.InvalidArgumentError(
                f"batch_timeout must be a number of seconds more than 0, or None, not "
                f"{batch_timeout!r}")
        self._zygote = Zygote(pipeline)
        try:
            self.native = _croupier._WorkerPool(
                count, max_worker_deaths(count) if max_deaths is None else int(max_deaths),
                float(window), self._spawn, self._bury, self._on_death, self._zygote.gone,
                None if batch_timeout is None else float(batch_timeout))
        except errors.Error as e:
            self._zygote.close()
            raise errors.InternalError(
                f"the producer's worker processes could not be started: {e}") from None
        except BaseException:
            self._zygote.close()
            raise

    def _spawn(self, index: int) -> Union[Tuple[int, int], str]:
        """A new worker: (its pid, this side of its channel), or why none can be made."""
        ours, theirs = socket.socketpair()
        try:
            pid = self._zygote.spawn(theirs.fileno())
        except ZygoteError as e:
            ours.close()
            return str(e)
        except OSError as e:
            ours.close()
            return f"a worker could not be replaced: {describe(e)}"
        finally:
            theirs.close()
        return pid, ours.detach()

    def _bury(self, pid: int) -> str:
        try:
            return how_it_ended(self._zygote.reap(pid))
        except ZygoteError:
            return "how is unknown: the pool's zygote is gone"

    @staticmethod
    def _on_death(line: str) -> None:
        log.warning("%s", line)

    @property
    def pids(self) -> List[int]:
        """The pids of the zygote and of the live workers (for tests and diagnostics)."""
        return [self._zygote.pid] + self.native.pids

    def make(self, epoch: int, g: int, ids: Any) -> Result:
        """Batch g of `epoch`, of records `ids`: a Batch, or (code, message)."""
        return self.native.make(epoch, g, ids)

    @property
    def broken(self) -> Optional[str]:
        """Why the pool can make no batch any more (no worker is left and none will be
        replaced, or the zygote is gone), or None while it can."""
        return self.native.broken

    def close(self) -> None:
        """Ends every worker and the zygote, and waits for them."""
        self.native.close()  # each live worker exits when it reads the end of its channel
        self._zygote.close()  # which waits for them


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
