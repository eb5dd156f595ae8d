"""Acting on the dispatcher's recommended number of producers: one loop, whatever starts and stops
the producers (local_cluster's child processes, croupier.ray's actors).

The figure is the dispatcher's (docs/operations.md, "How many producers": quick rises while the
trainers wait, falls only after a sustained margin, a cooldown between changes), so this loop adds
no damping of its own: every `interval` seconds it reads the figure and, when it differs from the
number running, asks `scale` for it, within [min_producers, max_producers]. Without a job the
figure is the cluster's (status producer_advice.recommended: the `croupier producer` processes,
for every TFRecord job); with job=NAME it is that job's (its summary's producer_advice: the
producers bound to a map job, or the shared ones for a TFRecord job). While the dispatcher is still
measuring (recommended 0) nothing changes. A producer stopped this way leaves the cluster (its
tasks go to the others at once); one started registers and takes work at once. Neither changes a
byte any trainer gets.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from croupier import errors
from croupier.runtime.thread_signals import block_async_signals

__all__ = ["Autoscaler"]


class Autoscaler:
    """Runs `scale(n)` whenever the dispatcher's recommendation, bounded, differs from
    `current()`. `status()` returns the dispatcher's status (a dict). `job`: follow that job's
    target rather than the cluster's. Thread-safe; start() runs the loop on a daemon thread until
    stop()."""

    def __init__(self, status: Callable[[], dict[str, Any]], current: Callable[[], int],
                 scale: Callable[[int], Any], *, job: str | None = None,
                 min_producers: int = 1, max_producers: int = 8,
                 interval: float = 5.0) -> None:
        if not 0 <= int(min_producers) <= int(max_producers):
            raise errors.InvalidArgumentError(
                f"min_producers {min_producers} and max_producers {max_producers} are not a range")
        if float(interval) <= 0:
            raise errors.InvalidArgumentError(f"interval must be positive, not {interval}")
        self._status, self._current, self._scale = status, current, scale
        self.job = None if job is None else str(job)
        # Why the loop's last round did nothing (a job not created yet, the dispatcher
        # restarting); None after a round that read the figure.
        self.last_error: errors.Error | None = None
        self.min_producers, self.max_producers = int(min_producers), int(max_producers)
        self.interval = float(interval)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changes: list[tuple[int, int]] = []  # (before, after) of each change made, in order

    def advice(self) -> dict[str, Any]:
        """The figure followed: the cluster's producer_advice, or the job's. NotFoundError for a
        job the dispatcher does not hold; FailedPreconditionError for a job without a target (a
        croupier.serve() stream job, whose producers cannot change)."""
        status = self._status()
        if self.job is None:
            cluster: dict[str, Any] = status.get("producer_advice", {})
            return cluster
        for summary in status.get("job_summaries", []):
            if summary.get("name") == self.job:
                advice: dict[str, Any] = summary.get("producer_advice", {})
                if advice.get("fixed"):
                    raise errors.FailedPreconditionError(
                        f"job '{self.job}' has no producer target to follow: "
                        f"{advice.get('reason', '')}")
                return advice
        raise errors.NotFoundError(f"no job '{self.job}' on the dispatcher: no target to follow")

    def wanted(self) -> int | None:
        """The number of producers to run now, or None while the dispatcher is measuring."""
        recommended = int(self.advice().get("recommended", 0))
        if recommended <= 0:
            return None
        return max(self.min_producers, min(self.max_producers, recommended))

    def step(self) -> int | None:
        """One round: scales if needed; returns the number wanted (None: nothing to do)."""
        wanted = self.wanted()
        if wanted is not None:
            before = self._current()
            if wanted != before:
                self._scale(wanted)
                self.changes.append((before, wanted))
        return wanted

    def start(self) -> Autoscaler:
        self.stop()
        self._stop.clear()

        def run() -> None:
            block_async_signals()
            while not self._stop.wait(self.interval):
                try:
                    self.step()
                    self.last_error = None
                except errors.Error as e:
                    # The dispatcher is busy or restarting, or the job is not created yet: the
                    # next round tries again.
                    self.last_error = e

        self._thread = threading.Thread(target=run, name="croupier-autoscale", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Ends the loop, waiting for a round under way (scale() included): at most `timeout`
        seconds if given, then DeadlineExceededError (the daemon thread ends after that
        round)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise errors.DeadlineExceededError(
                    f"the autoscaler's round (a scale() under way) did not end within "
                    f"{timeout:g} s of stop()")
