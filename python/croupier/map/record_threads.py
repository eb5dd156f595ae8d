"""croupier.map.record_threads: a batch's per-record work on a pool of threads.

A map job's records are read, decoded and transformed one by one (croupier.map.pipeline). Work that
releases the GIL (PIL's decode, numpy, OpenCV, TensorFlow ops) runs faster on several threads, in
each worker process as in the producer itself (workers=0). RecordThreads runs that per-record
work on `count` threads and gives the results in record order, so a batch holds the same bytes
whatever the count: each record's work depends on the record alone (its own generator).

count "auto" measures instead of guessing: the first batches alternate between 1 thread and
AUTO_THREADS threads, and once each has made TRIALS batches the faster (the lower median time
per record) is kept for the rest of the process's life, and logged once.

A pool's threads never cross a fork: every pool shuts its threads down before this process
forks (os.register_at_fork), and a pool used in a forked child starts its own. A map that another
thread runs while a fork shuts its pool down goes on in a new pool, and the child starts with
every pool's lock free: a thread of the parent may have taken one after the pools were shut down
and before the fork, and the child (the map producer's zygote, which forks its workers) must not
wait for a thread it does not have.
"""
import logging
import os
import statistics
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

from croupier import errors
from croupier.runtime.thread_signals import block_async_signals

__all__ = ["RecordThreads", "parse_threads", "AUTO_THREADS", "TRIALS"]

AUTO_THREADS = 4  # the pool "auto" tries against one thread
TRIALS = 3  # batches per candidate before "auto" chooses

log = logging.getLogger("croupier.pipeline")

_pools: "weakref.WeakSet[RecordThreads]" = weakref.WeakSet()


def _before_fork() -> None:
    for pool in list(_pools):
        pool.shutdown()


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forget_the_parents_threads()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def parse_threads(value: Union[int, str, None]) -> Union[int, str]:
    """The record threads a setting asks for: a count >= 1, or "auto". None is 1."""
    if value is None:
        return 1
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return "auto"
        try:
            value = int(value)
        except ValueError:
            raise errors.InvalidArgumentError(
                f"transform_threads must be a number of threads or 'auto', not '{value}'") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise errors.InvalidArgumentError(
            f"transform_threads must be 1 or more, or 'auto', not {value!r}")
    return value


class RecordThreads:
    """map(fn, items): [fn(item) for item in items], on `count` threads (1: in the calling
    thread), in order. Thread-safe: several batches may be mapped at once."""

    def __init__(self, count: Union[int, str]) -> None:
        self.setting = parse_threads(count)
        self._lock = threading.Lock()
        self._executor: Optional[ThreadPoolExecutor] = None
        self._pid = 0  # the process the executor's threads run in
        # "auto": seconds per record of each candidate's trial batches, then the choice.
        self._trials: Dict[int, List[float]] = {1: [], AUTO_THREADS: []}
        self._chosen: Optional[int] = None if self.setting == "auto" else int(self.setting)
        _pools.add(self)

    @property
    def chosen(self) -> Optional[int]:
        """The threads in use: the setting, or what "auto" chose (None while it measures)."""
        return self._chosen

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> List[Any]:
        items = list(items)
        count = self._chosen if self._chosen is not None else self._next_trial()
        start = time.perf_counter()
        if count <= 1 or len(items) <= 1:
            out = [fn(item) for item in items]
        else:
            out = self._map_on_threads(count, fn, items)
        if self._chosen is None and items:
            self._record_trial(count, (time.perf_counter() - start) / len(items))
        return out

    def _next_trial(self) -> int:
        with self._lock:
            ones, many = len(self._trials[1]), len(self._trials[AUTO_THREADS])
        return 1 if ones <= many else AUTO_THREADS

    def _record_trial(self, count: int, per_record: float) -> None:
        with self._lock:
            if self._chosen is not None:
                return
            self._trials[count].append(per_record)
            if min(len(t) for t in self._trials.values()) < TRIALS:
                return
            medians = {c: statistics.median(t) for c, t in self._trials.items()}
            self._chosen = min(medians, key=lambda c: (medians[c], c))
        log.info("croupier produce: transform_threads='auto' chose %d thread%s in process %d "
                 "(%.3f ms a record with 1, %.3f ms with %d)", self._chosen,
                 "" if self._chosen == 1 else "s", os.getpid(), medians[1] * 1e3,
                 medians[AUTO_THREADS] * 1e3, AUTO_THREADS)

    def _map_on_threads(self, count: int, fn: Callable[[Any], Any], items: List[Any]) -> List[Any]:
        futures: List["Future[Any]"] = []
        while len(futures) < len(items):
            pool = self._pool(count)
            try:
                for item in items[len(futures):]:
                    futures.append(pool.submit(fn, item))
            except RuntimeError:
                with self._lock:
                    if self._executor is pool:  # not a fork's shutdown: the interpreter's
                        raise
                # A fork shut the pool down (_before_fork) after the futures so far were given,
                # which it waited for: the rest go to a new pool.
        return [f.result() for f in futures]

    def _pool(self, count: int) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(max_workers=count,
                                                    thread_name_prefix="croupier-record",
                                                    initializer=block_async_signals)
                self._pid = os.getpid()
            return self._executor

    def shutdown(self) -> None:
        """Ends the threads (they are started again on the next map)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None and self._pid == os.getpid():
            executor.shutdown(wait=True)

    def _forget_the_parents_threads(self) -> None:
        """In a forked child: the parent's threads and whatever lock they held are not here."""
        self._lock = threading.Lock()
        self._executor, self._pid = None, 0
