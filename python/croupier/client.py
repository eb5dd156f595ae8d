"""The control-plane client: the dispatcher calls of the Python API (create_job, submit_job,
status, get_job, delete_job) and the token they send.

Each is one call of the extension module (croupier._croupier), which speaks gRPC to the dispatcher
and returns a typed croupier.Job or the answer's JSON. croupier.cluster re-exports these names,
where they were first; the consumer, the producers and the adapters import them from here.
"""
import json
import os
from typing import Any, Dict, Optional, Sequence, Union

from croupier import _croupier, errors
from croupier.job import Job, JobSpec

__all__ = ["auth_token_or_env", "submit_job", "create_job", "Status", "status", "get_job",
           "delete_job"]


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
    """status()'s dict. "jobs" is there only when asked for (job_info=True), and "producers",
    "consumers" and "rank_positions" only when not left out (clients=False): reading an absent
    one, with status()[key] or status().get(key, ...), raises a KeyError that says how to ask
    for it, rather than finding an empty list (or the default), which code that waited for its
    job or its producers there took for "not there yet" and waited forever."""

    _NO_JOBS = ("'jobs': status() holds every job's whole Job only with job_info=True; "
                "'job_summaries' has each job's name, state and counts, and get_job() gives one "
                "job")
    _NO_CLIENTS = ("'{}': status(clients=False) lists no producer, consumer or rank position; "
                   "'num_producers', 'num_consumers' and each job summary's 'consumers' count "
                   "them, and status() lists them")
    CLIENT_KEYS = ("producers", "consumers", "rank_positions")

    def __init__(self, fields: Dict[str, Any], clients: bool = True) -> None:
        super().__init__(fields)
        self._clients = clients

    def _absent(self, key: str) -> Optional[str]:
        if key == "jobs":
            return self._NO_JOBS
        if key in self.CLIENT_KEYS and not self._clients:
            return self._NO_CLIENTS.format(key)
        return None

    def __missing__(self, key: str) -> Any:
        raise KeyError(self._absent(key) or key)

    def get(self, key: str, default: Any = None) -> Any:
        why = None if key in self else self._absent(key)
        if why is not None:
            raise KeyError(why)
        return super().get(key, default)


def status(dispatcher: str, *, auth_token: Optional[str] = None, timeout: float = 10.0,
           job_info: bool = False, clients: bool = True) -> Dict[str, Any]:
    """The dispatcher's view: {"job_summaries": [...], "producers": [...], "consumers": [...],
    "rank_positions": [...], "num_producers": n, "num_consumers": n, ...}. Each job's summary
    holds its name, its "state" ("idle", "running", "done") and counts, not its file list;
    job_info=True adds "jobs", every job's whole Job (croupier.Job; large for many jobs of many
    files). clients=False leaves out "producers", "consumers" and "rank_positions" (about 58
    bytes a client: 634 KB at 11,000), for a process that polls jobs, counts or advice. A key
    left out is absent: reading it raises a KeyError naming the argument. get_job() gives one
    job."""
    text, jobs = _croupier.dispatcher_status(dispatcher, auth_token_or_env(auth_token),
                                             float(timeout), bool(job_info), not clients)
    out = Status(json.loads(text), clients=clients)  # summaries and counts: the jobs come typed
    out.pop("jobs", None)  # the JSON's own (empty) list: the jobs are the typed ones, if asked
    if job_info:
        out["jobs"] = list(jobs)
    if not clients:
        for key in Status.CLIENT_KEYS:
            out.pop(key, None)
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
    out: Dict[str, Any] = json.loads(_croupier.delete_job(
        dispatcher, str(name), bool(force), auth_token_or_env(auth_token), float(timeout)))
    return out
