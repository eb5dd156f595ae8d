"""croupier on a Ray cluster: the dispatcher and the producers as Ray actors, placed by Ray, and
the producers' number set by the caller or by the dispatcher's advice.

    import croupier.ray
    service = croupier.ray.Service(producers=2)          # on the Ray cluster ray.init() joined
    service.create_job("train", "/data/*.tfrecord", "image:bytes,label:int64", batch_size=64,
                       consumers=4, seed=1, epochs=2)
    # In each Ray Train worker (TorchTrainer's train_loop_per_worker):
    feed = croupier.ray.consumer(service.address, "train")   # rank and world from Ray Train
    service.scale(4)                                      # producers join and leave at any time
    service.shutdown()

Each croupier process (`croupier dispatcher`, `croupier producer`) is the child of one actor,
which starts it, waits until it is ready, and stops it with SIGTERM (a producer then leaves the
cluster and its tasks go to the other producers at once; docs/protocol.md, "Shutdown and
leaving"); the process dies with its actor. A producer actor that dies (its node lost) is
restarted by Ray (max_restarts), and its new producer registers anew: a batch's bytes do not
depend on which producer made it, so adding, removing or restarting producers changes no byte a
trainer gets. The dispatcher actor is not restarted: its journal is in `work_dir` on the node it
runs on (give that node durable disk, e.g. with `dispatcher_options={"resources": ...}`).

Producers here serve TFRecord jobs (`croupier producer`), or, with pipeline= and job=, one map
job (`python -m croupier produce PIPELINE --job JOB`, run by the actor's own Python: the package
and the pipeline's module importable on every node). autoscale() follows the cluster's target, or
that map job's own. Needs the `ray` package (pinned in scripts/requirements-dev.txt) and the
`croupier` command on every node (croupier_binary()).
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import ray

from croupier import errors
from croupier.autoscale import Autoscaler
from croupier.cluster import create_job, croupier_binary, status
from croupier.job import Job
from croupier.processes import die_with_parent, stop_child, wait_for_file

__all__ = ["Service", "consumer"]

NODE_IP = "{node_ip}"  # in a _Process's args: the address of the node it runs on


@ray.remote(num_cpus=0)
class _Process:
    """One croupier command, run as this actor's child process."""

    def __init__(self, name: str, args: list[str], work_dir: str | os.PathLike[str],
                 env: Mapping[str, str] | None = None, python: bool = False) -> None:
        self.name = name
        self.work_dir = pathlib.Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.work_dir / f"{name}.log"
        self.host = ray.util.get_node_ip_address()
        # python: `python -m croupier ARGS` (a map job's producer) rather than the croupier
        # command; NODE_IP in ARGS is this node's address.
        command = [sys.executable, "-m", "croupier"] if python else [croupier_binary()]
        args = [self.host if a == NODE_IP else a for a in args]
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen([*command, *args], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=dict(os.environ, **(env or {})),
                                         start_new_session=True, preexec_fn=die_with_parent)

    def wait_for_file(self, path: str, timeout: float) -> str:
        """The contents of `path` once the process has written it."""
        return wait_for_file(path, timeout, self.proc, f"croupier {self.name}", self.log_tail)

    def node_ip(self) -> str:
        return self.host

    def pid(self) -> int:
        """The croupier process's id."""
        return self.proc.pid

    def actor_pid(self) -> int:
        """The id of this actor's own process (the croupier process's parent)."""
        return os.getpid()

    def running(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text()[-chars:]
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; the exit status."""
        return stop_child(self.proc, grace)


class Service:
    """A croupier dispatcher and `producers` producers as Ray actors.

    work_dir: where the dispatcher keeps its journal and every process its log (default: a new
    temporary folder; it must exist on the nodes that run them). bind: the interface the processes
    listen on ("0.0.0.0", the default, for a multi-node cluster; "127.0.0.1" on one machine); they
    advertise their node's IP. producer_args: extra `croupier producer` flags (e.g. ["--threads",
    "4"]); dispatcher_args: extra `croupier dispatcher` flags (e.g. the advice's damping,
    ["--advice-hold-ms", "6000"]). producer_options / dispatcher_options: Ray actor options
    (num_cpus, resources, scheduling_strategy); a producer asks for 1 CPU by default, so that
    Ray places it (and, with an autoscaler, adds nodes for it). auth_token: the token every process presents.
    pipeline ("module:function") with job: the producers are that map job's, `python -m croupier
    produce` processes (producer_args are then its flags, e.g. ["--workers", "2"]), and
    autoscale() follows that job's own target. env: more environment variables for every
    process."""

    def __init__(self, producers: int = 1, *, work_dir: str | os.PathLike[str] | None = None,
                 bind: str = "0.0.0.0", producer_args: Iterable[Any] = (),
                 dispatcher_args: Iterable[Any] = (),
                 producer_options: Mapping[str, Any] | None = None,
                 dispatcher_options: Mapping[str, Any] | None = None,
                 auth_token: str | None = None, ready_timeout: float = 60.0,
                 pipeline: str | None = None, job: str | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        if not ray.is_initialized():
            raise errors.FailedPreconditionError(
                "croupier.ray.Service needs a Ray cluster: call ray.init() first")
        if (pipeline is None) != (job is None):
            raise errors.InvalidArgumentError(
                "pipeline (module:function) and job (the map job's name) go together: "
                f"pipeline={pipeline!r}, job={job!r}")
        self.pipeline = None if pipeline is None else str(pipeline)
        self.job = None if job is None else str(job)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="croupier-ray-")
            work_dir = self._tmp.name
        self.work_dir = str(work_dir)
        self.auth_token = auth_token
        self._bind = bind
        self._producer_args = [str(a) for a in producer_args]
        self._producer_options = dict({"num_cpus": 1, "max_restarts": -1},
                                      **(producer_options or {}))
        self._ready_timeout = float(ready_timeout)
        self._env = dict(env or {})
        if auth_token:
            self._env["CROUPIER_AUTH_TOKEN"] = auth_token
        self._lock = threading.Lock()
        self._producers: list[Any] = []  # actors, oldest first
        self._count = 0  # producers started so far: their names
        self._autoscaler: Autoscaler | None = None
        port_file = pathlib.Path(self.work_dir) / "dispatcher.port"
        with contextlib.suppress(FileNotFoundError):
            port_file.unlink()
        options = dict({"max_restarts": 0}, **(dispatcher_options or {}))
        self._dispatcher = _Process.options(**options).remote(  # type: ignore[attr-defined]
            "dispatcher", ["dispatcher", "--bind", bind, "--port", "0", "--port-file",
                           str(port_file), "--work-dir", str(pathlib.Path(self.work_dir) /
                                                             "dispatcher"),
                           *[str(a) for a in dispatcher_args]],
            self.work_dir, self._env)
        try:
            port = ray.get(self._dispatcher.wait_for_file.remote(str(port_file),
                                                                 self._ready_timeout))
            host = "127.0.0.1" if bind == "127.0.0.1" else ray.get(
                self._dispatcher.node_ip.remote())
            self.address = f"{host}:{port}"
            self.scale(producers)
        except BaseException:
            self.shutdown()
            raise

    # --- producers ------------------------------------------------------------------------------

    @property
    def producers(self) -> int:
        """How many producer actors this service runs now."""
        with self._lock:
            return len(self._producers)

    def scale(self, count: int, timeout: float | None = None) -> int:
        """Runs `count` producers: starts new ones (and waits until they have registered), or
        stops the newest ones (each drains, serving the batches it made, then leaves). Returns the
        number before."""
        count = int(count)
        if count < 0:
            raise errors.InvalidArgumentError(f"a service runs 0 or more producers, not {count}")
        timeout = self._ready_timeout if timeout is None else float(timeout)
        with self._lock:
            before = len(self._producers)
            while len(self._producers) < count:
                self._count += 1
                if self.pipeline is not None:
                    args = ["produce", self.pipeline, "--dispatcher", self.address, "--job",
                            str(self.job), "--bind", self._bind, "--advertise-host",
                            "127.0.0.1" if self._bind == "127.0.0.1" else NODE_IP,
                            *self._producer_args]
                else:
                    args = ["producer", "--dispatcher", self.address, "--bind", self._bind,
                            *self._producer_args]
                actor = _Process.options(  # type: ignore[attr-defined]
                    **self._producer_options).remote(
                    f"producer{self._count}", args, self.work_dir, self._env,
                    self.pipeline is not None)
                self._producers.append(actor)
            leaving = []
            while len(self._producers) > count:
                leaving.append(self._producers.pop())
        for actor in leaving:
            with contextlib.suppress(Exception):
                ray.get(actor.stop.remote(), timeout=30)
            ray.kill(actor, no_restart=True)
        if count > before:
            self._wait_for_producers(count, timeout)
        return before

    def _wait_for_producers(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            # This service's kind of producer: the map job's, or the generic ones.
            live = sum(1 for p in self.status().get("producers", [])
                       if p.get("source_job", "") == (self.job or ""))
            if live >= count:
                return
            if time.monotonic() > deadline:
                tails = ray.get([a.log_tail.remote(500) for a in self._producers])
                raise errors.DeadlineExceededError(
                    f"{live} of {count} producers registered with {self.address} within "
                    f"{timeout:g} s; their logs end: {tails}")
            time.sleep(0.1)

    def autoscale(self, min_producers: int = 1, max_producers: int = 8,
                  interval: float = 5.0) -> Autoscaler:
        """Sets the number of producers to the dispatcher's recommendation (the cluster's, or
        the map job's own with pipeline= and job=), within [min_producers, max_producers], every
        `interval` seconds, on a thread, until stop_autoscaling() or shutdown()
        (croupier.autoscale.Autoscaler). Returns the Autoscaler."""
        self.stop_autoscaling()
        self._autoscaler = Autoscaler(self.status, lambda: self.producers, self.scale,
                                      job=self.job, min_producers=min_producers,
                                      max_producers=max_producers, interval=interval).start()
        return self._autoscaler

    def stop_autoscaling(self) -> None:
        if self._autoscaler is not None:
            self._autoscaler.stop()
            self._autoscaler = None

    # --- jobs and status ------------------------------------------------------------------------

    def create_job(self, name: str, files: Any, features: str, batch_size: int,
                   **options: Any) -> Job:
        """croupier.create_job() on this service's dispatcher."""
        options.setdefault("auth_token", self.auth_token)
        return create_job(self.address, name, files, features, batch_size, **options)

    def status(self) -> dict[str, Any]:
        return status(self.address, auth_token=self.auth_token)

    def shutdown(self) -> None:
        """Stops the autoscaler, the producers (each leaves) and the dispatcher. Idempotent."""
        self.stop_autoscaling()
        with contextlib.suppress(Exception):
            if getattr(self, "address", None):
                self.scale(0)
        dispatcher, self._dispatcher = getattr(self, "_dispatcher", None), None
        if dispatcher is not None:
            with contextlib.suppress(Exception):
                ray.get(dispatcher.stop.remote(), timeout=30)
            ray.kill(dispatcher, no_restart=True)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def consumer(dispatcher: str, job: str, **options: Any) -> Any:
    """A croupier.Consumer of `job` for this Ray Train worker: its rank and world size are the
    worker's (ray.train.get_context()). Call it inside train_loop_per_worker."""
    import ray.train
    from croupier.consumer import Consumer
    context = ray.train.get_context()
    return Consumer(dispatcher, job, context.get_world_rank(), context.get_world_size(), **options)
