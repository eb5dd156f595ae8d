"""Running croupier's processes from Python: local_cluster, create_job and status.

local_cluster() starts a dispatcher and producers as child processes of the `croupier` command on
free loopback ports, waits until they are ready, and always stops them: on leaving the `with`
block, on an exception, on Ctrl-C, and (through the kernel's parent-death signal) when the Python
process itself dies.
"""
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union

from croupier import _croupier, errors
from croupier.job import Job, JobSpec
# The name croupier.ray imports from here.
from croupier.processes import die_with_parent, stop_child, wait_for_file

if TYPE_CHECKING:
    from croupier.autoscale import Autoscaler

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


def auth_token_or_env(auth_token: Optional[str]) -> str:
    """The token to send: `auth_token`, else $CROUPIER_AUTH_TOKEN, else none ("")."""
    return auth_token if auth_token is not None else os.environ.get("CROUPIER_AUTH_TOKEN", "")


def submit_job(dispatcher: str, spec: JobSpec, *, exist_ok: bool = False,
               auth_token: Optional[str] = None, timeout: float = 60.0) -> Job:
    """Creates the job `spec` (a croupier.JobSpec) on the dispatcher and returns it as the
    dispatcher holds it: the typed way in, every setting a JobSpec field, checked and completed
    by the dispatcher (spec.normalized() shows what it will hold without a dispatcher). A bad spec
    raises InvalidArgumentError naming the problem; with exist_ok, an identical existing job is
    returned instead of AlreadyExistsError."""
    if not isinstance(spec, JobSpec):
        raise TypeError(f"submit_job takes a croupier.JobSpec, not {type(spec).__name__}")
    return _croupier.create_job(dispatcher, spec.to_json(), bool(exist_ok),
                                auth_token_or_env(auth_token), float(timeout))


def create_job(dispatcher: str, name: str, files: Union[str, "os.PathLike[str]", Sequence[Any]],
               features: str, batch_size: int, *, consumers: int, seed: int = 0, epochs: int = 0,
               shuffle: str = "global", remainder: str = "drop", mode: str = "dealt",
               block_size: int = 0, window_blocks: int = 0, source: str = "tfrecord",
               batches_per_epoch: int = 0, source_count: int = 0, num_records: int = 0,
               resume_from: Optional[Dict[str, Any]] = None, compression: str = "none",
               skip_failing_records: bool = False, exist_ok: bool = False,
               auth_token: Optional[str] = None, timeout: float = 60.0) -> Job:
    """Creates a job on the dispatcher and returns it as the dispatcher holds it (a croupier.Job:
    name, files, num_records, batches_per_epoch, steps_per_epoch, ...). `files` is a glob, a path, or a
    list of them. `consumers` (required: the job's world size, every rank of which must read) is
    the number of trainer ranks. A bad spec raises InvalidArgumentError naming the problem. With
    exist_ok, an identical existing job is returned instead of AlreadyExistsError.
    source="python" makes a job that croupier.serve() feeds (no files; batches_per_epoch is what
    the source yields).
    source="map" makes a job of an addressable Python source read by index, that
    croupier.produce() makes (no files; num_records is how many records it holds; shuffle,
    remainder and resume_from as for files). The settings are text here ("global",
    "first_come", "zstd"); the module turns them into the wire's enums, and the returned Job
    names them the same way.
    compression="zstd" or "lz4" makes producers compress the batches they send over TCP (the
    consumers receive the same bytes; docs/operations.md says when it pays).
    skip_failing_records (map jobs): producers leave a record whose read or transform raises out
    of its batch instead of failing the batch (croupier.produce says more).

    resume_from=state (a Consumer.state_dict() of another job over the same data, seed and batch
    size) makes this job continue that one with its own number of consumers: it deals nothing
    before the state's epoch, and that epoch from the state's next global batch
    (state["global_batch"]: a resumed job's steps count from where it started) to the last whole
    round of `consumers`; later epochs are whole. Records are
    neither repeated nor skipped within that epoch, except that the dropped tail is the new
    job's."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    start_epoch = start_batch = 0
    if resume_from is not None:
        try:
            start_epoch = int(resume_from["epoch"])
            # A state of this version names the next global batch; an older one only the step,
            # which is the global batch's only in a job that was not itself resumed.
            start_batch = int(resume_from.get(
                "global_batch", int(resume_from["step"]) * int(resume_from["world"])))
        except (KeyError, TypeError, ValueError) as e:
            raise errors.InvalidArgumentError(
                f"resume_from is not a croupier consumer state: {e!r}") from None
    spec = {"name": name, "files": [str(f) for f in files], "features": features,
            "batch_size": int(batch_size), "num_consumers": int(consumers), "seed": str(int(seed)),
            "num_epochs": str(int(epochs)), "shuffle": shuffle, "remainder": remainder,
            "mode": mode, "block_size": int(block_size), "window_blocks": int(window_blocks),
            "source": source, "source_batches_per_epoch": str(int(batches_per_epoch)),
            "source_count": int(source_count), "start_epoch": str(start_epoch),
            "start_batch": str(start_batch), "num_records": str(int(num_records)),
            "compression": compression or "", "skip_failing_records": bool(skip_failing_records)}
    return _croupier.create_job(dispatcher, json.dumps(spec), bool(exist_ok),
                                auth_token_or_env(auth_token), float(timeout))


class Status(Dict[str, Any]):
    """status()'s dict. "jobs" is there only when asked for (job_info=True): reading it otherwise
    raises a KeyError that says so, rather than finding an empty list, which code that waited for
    its job there took for "not created yet" and waited forever."""

    def __missing__(self, key: str) -> Any:
        if key == "jobs":
            raise KeyError("'jobs': status() holds every job's whole Job only with job_info=True; "
                           "'job_summaries' has each job's name, state and counts, and get_job() "
                           "gives one job")
        raise KeyError(key)


def status(dispatcher: str, *, auth_token: Optional[str] = None, timeout: float = 10.0,
           job_info: bool = False) -> Dict[str, Any]:
    """The dispatcher's view: {"job_summaries": [...], "producers": [...], "consumers": [...],
    "rank_positions": [...], ...}. Each job's summary holds its name, its "state" ("idle",
    "running", "done") and counts, not its file list; job_info=True adds "jobs", every job's
    whole Job (croupier.Job; large for many jobs of many files). Without it there is no "jobs"
    key: reading it raises a KeyError naming job_info. get_job() gives one job."""
    text, jobs = _croupier.dispatcher_status(dispatcher, auth_token_or_env(auth_token),
                                             float(timeout), bool(job_info))
    out = Status(json.loads(text))  # summaries and counts: the jobs come typed
    out.pop("jobs", None)  # the JSON's own (empty) list: the jobs are the typed ones, if asked
    if job_info:
        out["jobs"] = list(jobs)
    return out


def get_job(dispatcher: str, name: str, *, auth_token: Optional[str] = None,
            timeout: float = 10.0) -> Job:
    """One job (a croupier.Job), with its state ("idle", "running", "done") and its ranks'
    last positions [(rank, epoch, step)]; status() has its counts. croupier.errors.NotFoundError
    for an unknown (or deleted) job."""
    return _croupier.get_job(dispatcher, str(name), auth_token_or_env(auth_token),
                             float(timeout))


def delete_job(dispatcher: str, name: str, *, force: bool = False,
               auth_token: Optional[str] = None, timeout: float = 10.0) -> Dict[str, Any]:
    """Deletes job `name` (as `croupier job delete`): FailedPreconditionError while consumers
    read it, unless force=True, which removes them. Returns {"job": its last summary,
    "consumers_removed": n, "tasks_revoked": n, "producers_removed": n}."""
    return json.loads(_croupier.delete_job(dispatcher, str(name), bool(force),
                                           auth_token_or_env(auth_token), float(timeout)))


class LocalCluster:
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
                self.autoscaler = Autoscaler(self.status, lambda: len(self.live_producers),
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
            return proc.log_path.read_text()[-chars:]
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

    def status(self, job_info: bool = False) -> Dict[str, Any]:
        return status(self.address, auth_token=self.auth_token, job_info=job_info)

    def get_job(self, name: str) -> Job:
        return get_job(self.address, name, auth_token=self.auth_token)

    def consumer(self, job: str, rank: Optional[int] = None, world: Optional[int] = None,
                 **options: Any) -> Any:
        """A croupier.Consumer of this cluster's job."""
        from croupier.consumer import Consumer
        options.setdefault("auth_token", self.auth_token)
        return Consumer(self.address, job, rank, world, **options)

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
