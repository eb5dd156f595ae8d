"""Running croupier's processes from Python: local_cluster.

local_cluster() starts a dispatcher and producers as child processes of the `croupier` command on
free loopback ports, waits until they are ready, and always stops them: on leaving the `with`
block, on an exception, on Ctrl-C, and (through the kernel's parent-death signal) when the Python
process itself dies. The dispatcher calls (create_job, status, ...) are croupier.client's,
re-exported here.
"""
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union

from croupier import errors
# The dispatcher calls, re-exported: croupier.cluster is where they were first.
from croupier.client import (Status, auth_token_or_env, create_job, delete_job, get_job, status,
                             submit_job)
from croupier.consumer import Consumer
from croupier.job import Job, JobSpec
from croupier.runtime.processes import die_with_parent, stop_child, wait_for_file

if TYPE_CHECKING:
    from croupier.autoscale import Autoscaler

__all__ = ["ClusterCalls", "LocalCluster", "local_cluster", "croupier_binary",
           # croupier.client's, re-exported
           "Status", "auth_token_or_env", "create_job", "delete_job", "get_job", "status",
           "submit_job"]

# A command-line argument of a child process.
_Arg = Union[str, "os.PathLike[str]"]


def croupier_binary() -> str:
    """The `croupier` command: $CROUPIER_BIN, else the source tree's build (development mode),
    else the one installed beside this Python, else the one on PATH."""
    candidates = []
    if os.environ.get("CROUPIER_BIN"):
        candidates.append(pathlib.Path(os.environ["CROUPIER_BIN"]))
    here = pathlib.Path(__file__).resolve().parent
    candidates.append(here.parent.parent / "build" / "bin" / "croupier")
    candidates.append(pathlib.Path(sys.prefix) / "bin" / "croupier")
    on_path = shutil.which("croupier")
    if on_path:
        candidates.append(pathlib.Path(on_path))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    raise errors.NotFoundError("the croupier command was not found (looked at "
                               + ", ".join(map(str, candidates))
                               + "); set CROUPIER_BIN or install the package")


class ClusterCalls:
    """The dispatcher calls of a cluster at `self.address` with `self.auth_token`: those of
    croupier.client, and a Consumer of its jobs. LocalCluster's and
    croupier.testing.InProcessCluster's."""

    address: str
    auth_token: Optional[str]

    def create_job(self, name: str, files: Any, features: str, batch_size: int, *,
                   consumers: int, **options: Any) -> Job:
        """create_job() on this cluster's dispatcher."""
        options.setdefault("auth_token", self.auth_token)
        return create_job(self.address, name, files, features, batch_size, consumers=consumers,
                          **options)

    def submit_job(self, spec: JobSpec, **options: Any) -> Job:
        """submit_job() on this cluster's dispatcher."""
        options.setdefault("auth_token", self.auth_token)
        return submit_job(self.address, spec, **options)

    def status(self, job_info: bool = False, clients: bool = True) -> Dict[str, Any]:
        return status(self.address, auth_token=self.auth_token, job_info=job_info,
                      clients=clients)

    def get_job(self, name: str) -> Job:
        return get_job(self.address, name, auth_token=self.auth_token)

    def consumer(self, job: str, rank: Optional[int] = None, world: Optional[int] = None,
                 **options: Any) -> Consumer:
        """A croupier.Consumer of this cluster's job."""
        options.setdefault("auth_token", self.auth_token)
        return Consumer(self.address, job, rank, world, **options)


class LocalCluster(ClusterCalls):
    """A dispatcher and producers on this machine, as child processes. Use local_cluster()."""

    def __init__(self, producers: Union[int, str] = 1, *, work_dir: Optional[_Arg] = None,
                 auth_token: Optional[str] = None, threads: Optional[int] = None,
                 buffer_bytes: Optional[int] = None, producer_args: Sequence[_Arg] = (),
                 dispatcher_args: Sequence[_Arg] = (), ready_timeout: float = 30.0,
                 max_producers: Optional[int] = None, autoscale_interval: float = 5.0,
                 pipeline: Optional[str] = None, job: Optional[str] = None) -> None:
        self._tmp: Optional[tempfile.TemporaryDirectory[str]] = None
        self.autoscaler: Optional[Autoscaler] = None
        self.processes: List[Any] = []  # Popen objects with a name and a log_path (_spawn)
        # With a pipeline, the producers are `croupier produce PIPELINE --job JOB` processes, the
        # producers of one map job, and "auto" follows that job's target.
        if (pipeline is None) != (job is None):
            raise errors.InvalidArgumentError(
                "pipeline (module:function) and job (the map job's name) go together: "
                f"pipeline={pipeline!r}, job={job!r}")
        if pipeline is not None and buffer_bytes is not None:
            raise errors.InvalidArgumentError(
                "buffer_bytes sizes a `croupier producer`'s buffer; a map job's producers "
                "(pipeline) take theirs from the pipeline's arguments")
        self.pipeline = None if pipeline is None else str(pipeline)
        self.job = None if job is None else str(job)
        auto = producers == "auto"
        if auto:
            producers = 1
        elif not isinstance(producers, int) or producers < 0:
            raise errors.InvalidArgumentError(
                f"producers is a number of producers or 'auto', not {producers!r}")
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="croupier-")
            work_dir = self._tmp.name
        self.work_dir = pathlib.Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.auth_token = auth_token
        self.binary = croupier_binary()
        self._producer_args = list(producer_args)
        if threads is not None:
            self._producer_args += ["--threads", str(threads)]
        if buffer_bytes is not None:
            self._producer_args += ["--buffer-bytes", str(buffer_bytes)]
        self._env = dict(os.environ)
        self._env.setdefault("CROUPIER_INDEX_DIR", str(self.work_dir / "index"))
        if auth_token:
            self._env["CROUPIER_AUTH_TOKEN"] = auth_token
        if self.pipeline is not None:
            # `python -m croupier produce` imports this very package.
            package_root = str(pathlib.Path(__file__).resolve().parent.parent)
            self._env["PYTHONPATH"] = os.pathsep.join(
                p for p in (package_root, self._env.get("PYTHONPATH", "")) if p)
        try:
            port_file = self.work_dir / "dispatcher.port"
            port_file.unlink(missing_ok=True)
            self.dispatcher = self._spawn("dispatcher", ["dispatcher", "--port", "0",
                                                         "--port-file", str(port_file),
                                                         "--work-dir",
                                                         str(self.work_dir / "dispatcher"),
                                                         *dispatcher_args])
            self.port = int(self._wait_for_file(port_file, ready_timeout, self.dispatcher))
            self.address = f"127.0.0.1:{self.port}"
            for _ in range(producers):
                self.add_producer(wait=False)
            self.wait_for_producers(producers, ready_timeout)
            if auto:
                from croupier.autoscale import Autoscaler
                high = max_producers if max_producers is not None else max(1, os.cpu_count() or 1)
                # It reads the advice only: the status without the client lists.
                self.autoscaler = Autoscaler(lambda: self.status(clients=False),
                                             lambda: len(self.live_producers),
                                             self.scale, job=self.job, min_producers=1,
                                             max_producers=high,
                                             interval=autoscale_interval).start()
        except BaseException:
            self.close()
            raise

    def _spawn(self, name: str, args: Sequence[_Arg], command: Optional[List[str]] = None) -> Any:
        log = open(self.work_dir / f"{name}.log", "w")
        try:
            proc = subprocess.Popen([*(command or [self.binary]), *args], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self._env,
                                    start_new_session=True, preexec_fn=die_with_parent)
        finally:
            log.close()
        proc.name = name  # type: ignore[attr-defined]
        proc.log_path = self.work_dir / f"{name}.log"  # type: ignore[attr-defined]
        self.processes.append(proc)
        return proc

    def _wait_for_file(self, path: pathlib.Path, timeout: float, proc: Any) -> str:
        return wait_for_file(path, timeout, proc, proc.name, lambda: self.log_tail(proc))

    def log_tail(self, proc: Any, chars: int = 2000) -> str:
        try:
            text: str = proc.log_path.read_text()
            return text[-chars:]
        except OSError:
            return ""

    @property
    def producers(self) -> List[Any]:
        return [p for p in self.processes if p.name.startswith("producer")]

    def add_producer(self, *extra_args: object, wait: bool = True, timeout: float = 30.0) -> Any:
        """Starts one more producer (for throughput) and returns its process."""
        n = len(self.producers)
        if self.pipeline is not None:
            # self.job is not None with a pipeline: __init__ checks that they go together.
            proc = self._spawn(f"producer{n}",
                               ["produce", self.pipeline, "--dispatcher", self.address, "--job",
                                self.job,  # type: ignore[list-item]
                                *self._producer_args, *map(str, extra_args)],
                               command=[sys.executable, "-m", "croupier"])
        else:
            proc = self._spawn(f"producer{n}", ["producer", "--dispatcher", self.address,
                                                *self._producer_args, *map(str, extra_args)])
        if wait:
            self.wait_for_producers(n + 1, timeout)
        return proc

    @property
    def live_producers(self) -> List[Any]:
        return [p for p in self.producers if p.poll() is None]

    def scale(self, count: int, timeout: float = 30.0) -> None:
        """Runs `count` producers: starts new ones and waits until they have registered, or stops
        the newest ones (SIGTERM: each drains, serving the batches it made, then leaves)."""
        live = self.live_producers
        for proc in reversed(live[count:]):
            stop_child(proc, 10.0)
        for _ in range(len(live), count):
            self.add_producer(wait=False)
        if count > len(live):
            self.wait_for_producers(count, timeout)

    def wait_for_producers(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for p in self.producers:
                if p.poll() is not None and p.returncode != 0:
                    raise errors.UnavailableError(
                        f"{p.name} exited with {p.returncode}: {self.log_tail(p)}")
            # This cluster's kind of producer: the map job's, or the generic ones.
            live = sum(1 for p in self.status()["producers"]
                       if p.get("source_job", "") == (self.job or ""))
            if live >= count:
                return
            if time.monotonic() > deadline:
                raise errors.DeadlineExceededError(
                    f"{live} of {count} producers registered within {timeout} s")
            time.sleep(0.05)

    def close(self, grace: float = 5.0) -> None:
        """Stops every process (SIGTERM, then SIGKILL after `grace` seconds) and waits for it.
        Idempotent."""
        if self.autoscaler is not None:
            self.autoscaler.stop()
            self.autoscaler = None
        for proc in self.processes:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace  # all were told at once: one grace for them all
        for proc in self.processes:
            stop_child(proc, deadline - time.monotonic())
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close(grace=1.0)


def local_cluster(producers: int = 1, **options: Any) -> LocalCluster:
    """A dispatcher and `producers` producers on this machine, on free loopback ports:

        with croupier.local_cluster(producers=2) as cluster:
            cluster.create_job("train", "data/*.tfrecord", "image:bytes,label:int64",
                               batch_size=64, consumers=4, seed=1)
            ...  # trainers: croupier.Consumer(cluster.address, "train", rank, 4)

    producers="auto" starts one and then follows the dispatcher's recommended number of producers
    (docs/operations.md, "How many producers"), between 1 and max_producers (default: the cores
    here), checked every autoscale_interval seconds (croupier.autoscale.Autoscaler); a producer
    scaled away drains (serves what it made) and leaves, and no trainer sees a byte change.

    pipeline="module:function" with job="name": the producers are those of map job `name`,
    `python -m croupier produce module:function --job name` processes (croupier.cli; `module`
    importable here, the job created by the first of them), and "auto" follows that job's own
    target; producer_args are then `croupier produce` flags (--workers, --threads, ...).

    Options: work_dir (default: a temporary directory, removed at the end), auth_token, threads
    and buffer_bytes (per producer), producer_args and dispatcher_args (extra command-line flags),
    ready_timeout (seconds)."""
    return LocalCluster(producers, **options)
