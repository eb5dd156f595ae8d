"""croupier in one process, for tests: in_process_cluster().

in_process_cluster() runs a dispatcher behind its real gRPC server on 127.0.0.1, and producers of
TFRecord jobs with their real data servers (TCP, and shared memory for consumers on this host), as
threads of this process: the C++ in-process cluster (src/testing/test_cluster.h). The rest is a
deployment's: create_job, croupier.Consumer and status make the same gRPC and data-plane calls as
against `croupier dispatcher` and `croupier producer` processes, and the producers of a Python map
or stream job (croupier.produce, croupier.serve) can serve it from a thread of the test. It starts
in a fraction of a second, leaves no process behind, and beats fast: heartbeats every 100 ms, a
producer given up after 1 s of silence, a rank after 5 s.

    with croupier.testing.in_process_cluster(producers=2) as cluster:
        cluster.create_job("train", files, "x:float32", batch_size=8, consumers=2, seed=1)
        with cluster.consumer("train", rank=0, world=2) as feed:
            ...

What only separate processes show (a SIGKILL, signals, TLS, network namespaces, memory limits)
needs croupier.local_cluster().
"""
from typing import Any, Optional

from croupier import _croupier
from croupier.cluster import ClusterCalls

__all__ = ["InProcessCluster", "in_process_cluster"]


class InProcessCluster(ClusterCalls):
    """A dispatcher and TFRecord producers in this process. Use in_process_cluster()."""

    def __init__(self, producers: int = 1, *, heartbeat_interval: float = 0.1,
                 producer_timeout: float = 1.0, consumer_timeout: float = 5.0,
                 rounds_per_task: int = 0, shm: bool = True, threads: int = 2,
                 job_retention: Optional[float] = None, metrics_port: Optional[int] = None) -> None:
        if job_retention is not None and not job_retention > 0:
            raise ValueError(f"job_retention takes a positive number of seconds, or None to keep "
                             f"done jobs: {job_retention!r}")
        self._native: Optional[_croupier.InProcessCluster] = _croupier.InProcessCluster(
            producers=producers, heartbeat_interval_ms=round(heartbeat_interval * 1000),
            producer_timeout_ms=round(producer_timeout * 1000),
            consumer_timeout_ms=round(consumer_timeout * 1000), rounds_per_task=rounds_per_task,
            shm=shm, threads=threads,
            job_retention_ms=0 if job_retention is None else max(1, round(job_retention * 1000)),
            metrics_port=-1 if metrics_port is None else metrics_port)
        self.address: str = self._native.address
        self.metrics_port: Optional[int] = self._native.metrics_port or None
        self.auth_token: Optional[str] = None
        self.work_dir: str = self._native.dir

    def _cluster(self) -> _croupier.InProcessCluster:
        if self._native is None:
            from croupier import errors
            raise errors.FailedPreconditionError("the in-process cluster is closed")
        return self._native

    @property
    def num_producers(self) -> int:
        """The producers started, those stopped included."""
        return self._cluster().num_producers

    def add_producer(self) -> int:
        """Starts one more producer and returns its index; it registers with the dispatcher
        before this returns."""
        return self._cluster().add_producer()

    def producer_address(self, index: int) -> str:
        """The data address (host:port) producer `index` serves on."""
        return self._cluster().producer_address(index)

    def stop_producer(self, index: int) -> None:
        """Stops producer `index` at once, as a killed one: its data server closes and its
        heartbeats stop; the dispatcher gives its tasks to the others once it has been silent for
        the producer timeout."""
        self._cluster().stop_producer(index)

    def close(self) -> None:
        """Stops every producer and the dispatcher, and removes the work directory.
        Idempotent."""
        if self._native is not None:
            self._native.close()
            self._native = None

    def __enter__(self) -> "InProcessCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def in_process_cluster(producers: int = 1, **options: Any) -> InProcessCluster:
    """A dispatcher and `producers` TFRecord producers in this process (InProcessCluster's
    arguments: heartbeat_interval, producer_timeout and consumer_timeout in seconds,
    rounds_per_task, shm, threads per producer; job_retention, the seconds a done job is kept
    before the dispatcher deletes it, None to keep it; metrics_port, the port of the dispatcher's
    HTTP server for metrics, the web page and /api/..., 0 for any free one, None for none: the
    port taken is the cluster's metrics_port)."""
    return InProcessCluster(producers, **options)
