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

Each croupier process (`croupier dispatcher`, `croupier producer`) is the child of one actor
(croupier.ray_process.ProcessActor), which starts it, waits until it is ready, and stops it with SIGTERM (a producer then leaves the
cluster and its tasks go to the other producers at once; docs/protocol.md, "Shutdown and
leaving"). The process dies with its actor, and the actor with its process: a process killed by
a signal the actor did not send (SIGKILL, the OOM killer, a crash) ends the actor's process too.
A producer actor that dies (its node lost, or its process killed) is restarted by Ray
(max_restarts), and its new producer registers anew: a batch's bytes do not depend on which
producer made it, so adding, removing or restarting producers changes no byte a trainer gets. A
process that exits by itself (a map job's producer whose job has ended, or an error) is not
restarted; its actor no longer counts (Service.producers). The dispatcher actor is not restarted:
its journal is in `work_dir` on the node it runs on (give that node durable disk, e.g. with
`dispatcher_options={"resources": ...}`).

No wait here outlives the service or its job: scale() waits for the producers it started until
they register, until they leave by themselves (their map job ended), until shutdown(), or until
its timeout; shutdown() bounds each of its waits (STOP_GRACE), and ends at once the producer
actors Ray has not placed.

Producers here serve TFRecord jobs (`croupier producer`), or, with pipeline= and job=, one map
job (`python -m croupier produce PIPELINE --job JOB`, run by the actor's own Python: the package
and the pipeline's module importable on every node). autoscale() follows the cluster's target, or
that map job's own. Needs the `ray` package (pinned in scripts/requirements-dev.txt) and the
`croupier` command on every node (croupier_binary()).
"""
from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import ray

from croupier import errors
from croupier.autoscale import Autoscaler
from croupier.client import create_job, status
from croupier.consumer import Consumer
from croupier.job import Job
# The actor of one croupier process, and its settings (importable from here as before).
from croupier.ray_process import NODE_IP, PROBE_TIMEOUT, STOP_GRACE, ProcessActor, probe

__all__ = ["Service", "consumer"]

log = logging.getLogger("croupier.ray")

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
    process. ready_timeout: the longest wait for the dispatcher to start, and scale()'s default
    for new producers to register. A producer actor may restart without limit by default
    (producer_options' max_restarts, -1); the dispatcher's does not restart (0)."""

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
        self._names: dict[Any, str] = {}  # actor: its process's name (its log's)
        self._count = 0  # producers started so far: their names
        self._autoscaler: Autoscaler | None = None
        self._closing = threading.Event()  # set by shutdown(): every wait here ends
        self._job_ended = False  # the map job has ended: no more producers for it
        self.address = ""
        port_file = pathlib.Path(self.work_dir) / "dispatcher.port"
        with contextlib.suppress(FileNotFoundError):
            port_file.unlink()
        options = dict({"max_restarts": 0}, **(dispatcher_options or {}))
        self._dispatcher = ProcessActor.options(**options).remote(  # type: ignore[attr-defined]
            "dispatcher", ["dispatcher", "--bind", bind, "--port", "0", "--port-file",
                           str(port_file), "--work-dir", str(pathlib.Path(self.work_dir) /
                                                             "dispatcher"),
                           *[str(a) for a in dispatcher_args]],
            self.work_dir, self._env)
        try:
            try:
                # The actor's own wait is bounded; this one too, in case Ray cannot place it.
                port = ray.get(self._dispatcher.wait_for_file.remote(str(port_file),
                                                                     self._ready_timeout),
                               timeout=self._ready_timeout + 5)
                host = "127.0.0.1" if bind == "127.0.0.1" else ray.get(
                    self._dispatcher.node_ip.remote(), timeout=self._ready_timeout)
            except ray.exceptions.GetTimeoutError:
                raise errors.DeadlineExceededError(
                    f"the dispatcher actor was not ready within {self._ready_timeout:g} s "
                    "(did Ray place it? dispatcher_options)") from None
            self.address = f"{host}:{port}"
            self.scale(producers)
        except BaseException:
            self.shutdown()
            raise

    # --- producers ------------------------------------------------------------------------------

    @property
    def producers(self) -> int:
        """How many live producers this service runs now: its producer actors whose process
        runs, or that Ray is still placing or restarting (they do not answer within
        PROBE_TIMEOUT). An actor whose process has ended by itself (its map job ended, or an
        error), or that died for good (no restart left), is dropped, and no longer counts."""
        return len(self._live_producers())

    def _live_producers(self) -> list[Any]:
        """The producer actors that still count (see producers); drops the others."""
        with self._lock:
            actors = list(self._producers)
        states = probe(actors, PROBE_TIMEOUT)
        self._drop([(a, s) for a, s in zip(actors, states) if s is not None and s != "silent"])
        return [a for a, s in zip(actors, states) if s is None or s == "silent"]

    def _drop(self, ended: list[tuple[Any, int | str | None]]) -> None:
        """Forgets the producer actors whose process ended by itself (an exit status) or that
        died for good ("dead"), and ends the live ones among them. A map job's producer that
        exited with status 0 left because its job ended (or was stopped from outside): if the
        dispatcher says the job is done (or gone), this service starts no more producers."""
        if not ended:
            return
        left = False
        with self._lock:
            for actor, state in ended:
                if actor in self._producers:
                    self._producers.remove(actor)
                    log.info("croupier.ray: %s is no longer counted: %s", self._names.get(actor),
                             "its actor died for good" if state == "dead"
                             else f"its process exited with status {state}")
                left = left or state == 0
        for actor, _ in ended:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        if left and self.job is not None and not self._job_ended:
            with contextlib.suppress(errors.Error):
                jobs = {j.get("name"): j for j in self._status(5.0).get("job_summaries", [])}
                if jobs.get(self.job, {}).get("state", "done") == "done":
                    self._job_ended = True
                    log.info("croupier.ray: map job '%s' has ended (its producers left by "
                             "themselves): scale() starts no more producers", self.job)

    def scale(self, count: int, timeout: float | None = None) -> int:
        """Runs `count` producers: starts new ones (and waits until they have registered), or
        stops the newest ones (each drains, serving the batches it made, then leaves). Returns the
        number of live producers before (see producers).

        The wait for new producers ends, at the latest after `timeout` seconds (default:
        ready_timeout; DeadlineExceededError naming the ones missing), when they have registered;
        when those it started have exited by themselves with status 0 (a map job's producers
        whose job ended meanwhile: no error); with UnavailableError when one exited with an error
        or its actor died for good; with CancelledError when the service is shut down meanwhile.
        Once a map job has ended, scale() starts no more producers for it. A service shut down
        runs none: CancelledError."""
        count = int(count)
        if count < 0:
            raise errors.InvalidArgumentError(f"a service runs 0 or more producers, not {count}")
        if self._closing.is_set():
            raise errors.CancelledError(
                f"the croupier service of {self.address} is shut down: it runs no producers")
        timeout = self._ready_timeout if timeout is None else float(timeout)
        self._live_producers()  # forgets the producers that ended
        started = []
        with self._lock:
            before = len(self._producers)
            if count > before and self._job_ended:
                log.info("croupier.ray: map job '%s' has ended: no producer started (%d asked, "
                         "%d running)", self.job, count, before)
                count = before
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
                name = f"producer{self._count}"
                actor = ProcessActor.options(  # type: ignore[attr-defined]
                    **self._producer_options).remote(
                    name, args, self.work_dir, self._env, self.pipeline is not None)
                self._names[actor] = name
                self._producers.append(actor)
                started.append(actor)
            leaving = []
            while len(self._producers) > count:
                leaving.append(self._producers.pop())
        self._stop_actors(leaving)
        if started:
            self._wait_for_producers(started, count, timeout)
        return before

    def _stop_actors(self, actors: list[Any], grace: float = STOP_GRACE) -> None:
        """Stops the processes of `actors`, all at once (SIGTERM: each producer drains, serving
        the batches it made, and leaves; SIGKILL after `grace` seconds), then ends the actors.
        An actor that does not answer within PROBE_TIMEOUT (Ray is still placing or restarting
        it: no process of it serves) is ended at once. Waits at most PROBE_TIMEOUT + grace + 5
        seconds."""
        if not actors:
            return
        states = probe(actors, PROBE_TIMEOUT)
        refs = [a.stop.remote(grace) for a, s in zip(actors, states) if s is None]
        if refs:
            _, late = ray.wait(refs, num_returns=len(refs), timeout=grace + 5)
            if late:
                log.warning("croupier.ray: %d of %d processes did not stop within %g s; their "
                            "actors are ended", len(late), len(refs), grace + 5)
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)

    def _wait_for_producers(self, started: list[Any], count: int, timeout: float) -> None:
        """Waits until `count` producers of this service's kind have registered with the
        dispatcher, for the producers `started`: see scale()."""
        deadline = time.monotonic() + timeout
        waiting = list(started)
        live = 0
        while True:
            if self._closing.is_set():
                raise errors.CancelledError(
                    f"the croupier service of {self.address} was shut down while scale() "
                    f"waited for {self._named(waiting)} to register ({live} of {count} "
                    "producers registered)")
            remaining = deadline - time.monotonic()
            # This service's kind of producer: the map job's, or the generic ones.
            live = sum(1 for p in self._status(max(1.0, min(10.0, remaining)))
                       .get("producers", []) if p.get("source_job", "") == (self.job or ""))
            if live >= count:
                return
            states = probe(waiting, min(0.5, max(0.1, remaining)))  # none: not yet
            for actor, state in zip(list(waiting), states):
                if state == "dead":
                    raise errors.UnavailableError(
                        f"the actor of {self._names.get(actor)} died before its producer "
                        f"registered with {self.address} (no restart left); its log is "
                        f"{pathlib.Path(self.work_dir) / (str(self._names.get(actor)) + '.log')}"
                        " on its node")
                if isinstance(state, int):
                    tail = self._log_tail(actor)
                    self._drop([(actor, state)])
                    if state != 0:
                        raise errors.UnavailableError(
                            f"{self._names.get(actor)} exited with status {state} before it "
                            f"registered with {self.address}: {tail}")
                    # It left by itself: a map job's producer whose job has ended (the others
                    # started with it leave too), or one stopped from outside.
                    waiting.remove(actor)
                    count -= 1
                    if self.job is not None:
                        return
            if not waiting:
                return
            if remaining <= 0:
                raise errors.DeadlineExceededError(
                    f"{live} of {count} producers registered with {self.address} within "
                    f"{timeout:g} s; not yet registered: {self._named(waiting)}, of which Ray "
                    f"had not yet started (placed or restarted) "
                    f"{self._named([a for a, s in zip(waiting, states) if s == 'silent'])}; "
                    f"their logs end: {[self._log_tail(a) for a in waiting]}")
            self._closing.wait(0.1)

    def _named(self, actors: list[Any]) -> str:
        return ", ".join(str(self._names.get(a)) for a in actors) or "none"

    def _log_tail(self, actor: Any, chars: int = 500) -> str:
        """The end of the actor's process's log, if the actor answers within PROBE_TIMEOUT."""
        ref = actor.log_tail.remote(chars)
        ready, _ = ray.wait([ref], timeout=PROBE_TIMEOUT)
        if not ready:
            return "(its actor did not answer)"
        try:
            return str(ray.get(ref))
        except ray.exceptions.RayError as e:
            return f"(its actor did not answer: {type(e).__name__})"

    def autoscale(self, min_producers: int = 1, max_producers: int = 8,
                  interval: float = 5.0) -> Autoscaler:
        """Sets the number of producers to the dispatcher's recommendation (the cluster's, or
        the map job's own with pipeline= and job=), within [min_producers, max_producers], every
        `interval` seconds, on a thread, until stop_autoscaling() or shutdown()
        (croupier.autoscale.Autoscaler). Returns the Autoscaler."""
        if self._closing.is_set():
            raise errors.CancelledError(
                f"the croupier service of {self.address} is shut down: nothing to scale")
        self.stop_autoscaling()
        # It reads the advice only: the status without the client lists.
        self._autoscaler = Autoscaler(lambda: self.status(clients=False), lambda: self.producers,
                                      self.scale, job=self.job, min_producers=min_producers,
                                      max_producers=max_producers, interval=interval).start()
        return self._autoscaler

    def stop_autoscaling(self, timeout: float = 2 * STOP_GRACE) -> None:
        """Stops the autoscaler's loop, waiting at most `timeout` seconds for a round under way
        (DeadlineExceededError after: the loop's daemon thread ends with that round)."""
        autoscaler, self._autoscaler = self._autoscaler, None
        if autoscaler is not None:
            autoscaler.stop(timeout)

    # --- jobs and status ------------------------------------------------------------------------

    def create_job(self, name: str, files: Any, features: str, batch_size: int,
                   **options: Any) -> Job:
        """croupier.create_job() on this service's dispatcher."""
        options.setdefault("auth_token", self.auth_token)
        return create_job(self.address, name, files, features, batch_size, **options)

    def status(self, clients: bool = True) -> dict[str, Any]:
        """croupier.status() of this service's dispatcher (clients=False: without the lists of
        producers, consumers and rank positions)."""
        return self._status(10.0, clients)

    def _status(self, timeout: float, clients: bool = True) -> dict[str, Any]:
        return status(self.address, auth_token=self.auth_token, timeout=timeout, clients=clients)

    def shutdown(self) -> None:
        """Stops the autoscaler, the producers (each leaves, all at once) and the dispatcher, in
        seconds whatever is under way: a scale() waiting for new producers (the autoscaler's, or
        a caller's on another thread) ends with CancelledError, producer actors Ray has not
        placed are ended at once, and each wait is bounded (STOP_GRACE). Idempotent."""
        self._closing.set()
        try:
            self.stop_autoscaling()
        except errors.Error as e:
            log.warning("croupier.ray: %s", e)
        with self._lock:
            leaving, self._producers = self._producers[::-1], []
        self._stop_actors(leaving)
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None:
            self._stop_actors([dispatcher])
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def consumer(dispatcher: str, job: str, **options: Any) -> Consumer:
    """A croupier.Consumer of `job` for this Ray Train worker: its rank and world size are the
    worker's (ray.train.get_context()). Call it inside train_loop_per_worker."""
    import ray.train
    context = ray.train.get_context()
    return Consumer(dispatcher, job, context.get_world_rank(), context.get_world_size(), **options)
