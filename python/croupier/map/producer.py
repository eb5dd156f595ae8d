"""croupier.map.producer: produce(), the producer of a map job (a Python source read by index).

produce() checks its arguments, builds the job's Pipeline (croupier.map.pipeline), creates the job,
starts the worker pool (croupier.map.pool) and the C++ producer node that serves the batches, and
waits for the end of the job. `python -m croupier produce` (croupier.cli) runs it from a shell.
"""
import contextlib
import dataclasses
import json
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from croupier import _croupier, errors, object_store
from croupier.runtime import at_exit
from croupier.client import auth_token_or_env, create_job, submit_job
from croupier.errors import BatchError
from croupier.job import JobSpec
from croupier.map.pipeline import Pipeline, log
from croupier.map.pool import WORKER_TIMEOUT, WorkerPool, default_workers, in_process
from croupier.runtime.serving import metrics_port_of, serve_until_the_end, write_port_file
from croupier.map.cache_dirs import shared_reads
from croupier.map.record_cache import summary
from croupier.columns import features_of

__all__ = ["produce", "ProduceOptions"]


@dataclasses.dataclass
class ProduceOptions:
    """A map job's settings and its producer's, in one object: produce(source, dispatcher, job,
    ProduceOptions(batch_size=64, consumers=4, epochs=3, transform=augment)). Each field is the
    produce() keyword argument of the same name (the older form, which still works), documented
    there; batch_size is required."""

    # The job (every producer of the job gives the same).
    batch_size: int
    consumers: Optional[int] = None  # None: the launcher's world size
    epochs: int = 1
    seed: int = 0
    shuffle: str = "global"
    remainder: str = "drop"
    block_size: int = 0
    window_blocks: int = 0
    mode: str = "dealt"
    resume_from: Optional[Dict[str, Any]] = None
    skip_failing_records: bool = False
    # What makes a batch (croupier.map.pipeline).
    transform: Optional[Callable[..., Any]] = None
    batch_transform: Optional[Callable[..., Any]] = None
    collate: Optional[Callable[[List[Any]], Dict[str, Any]]] = None
    names: Optional[Sequence[str]] = None
    features: Optional[str] = None
    tf_transform: Optional[Callable[[Any], Any]] = None
    decode: Optional[Callable[[Any], Any]] = None
    cache_bytes: int = 0
    # This producer.
    workers: Optional[int] = None
    transform_threads: Any = 1  # a count, or "auto"
    threads: Optional[int] = None
    auth_token: Optional[str] = None
    buffer_bytes: int = 256 << 20
    max_tasks: int = 2
    bind: str = "127.0.0.1"
    advertise_host: str = ""
    timeout: float = 60.0
    dispatcher_timeout: float = 120.0
    stop: Optional[threading.Event] = None
    drain_timeout: float = 5.0
    worker_timeout: Optional[float] = WORKER_TIMEOUT
    metrics_port: Optional[int] = None
    metrics_port_file: Optional[str] = None


# The ProduceOptions fields that are the job's settings: a JobSpec holds them instead.
_JOB_SETTINGS = ("batch_size", "consumers", "epochs", "seed", "shuffle", "remainder", "block_size",
                 "window_blocks", "mode", "resume_from", "skip_failing_records", "features")


def _options_of_spec(spec: JobSpec, options: Optional[ProduceOptions],
                     keywords: Dict[str, Any]) -> ProduceOptions:
    """produce(source, dispatcher, spec)'s options: the job's settings from `spec` (its unset ones
    are the plan's defaults, which the C++ library fills), this producer's from the keywords. A
    job setting given beside the spec, a ProduceOptions, files or another source kind are
    refused, naming them."""
    name = spec.name
    if options is not None:
        raise errors.InvalidArgumentError(
            f"produce() of job '{name}': the job's settings come from its JobSpec, so no "
            "ProduceOptions goes with it; give this producer's settings as keywords")
    clash = sorted(k for k in keywords if k in _JOB_SETTINGS)
    if clash:
        raise errors.InvalidArgumentError(
            f"produce() of job '{name}': {', '.join(clash)} are the job's settings: set them in "
            "its JobSpec (consumers: num_consumers, epochs: num_epochs, resume_from: start_epoch "
            "and start_batch)")
    if spec.source not in ("", "map") or spec.files:
        raise errors.InvalidArgumentError(
            f"produce() of job '{name}': a map job's JobSpec names no files and its source is "
            f"'map' (or unset), not {spec.source!r}")
    return _settled(None, dict(
        keywords, batch_size=spec.batch_size, consumers=spec.num_consumers or None,
        epochs=spec.num_epochs, seed=spec.seed, shuffle=spec.shuffle, remainder=spec.remainder,
        block_size=spec.block_size, window_blocks=spec.window_blocks, mode=spec.mode,
        skip_failing_records=spec.skip_failing_records, features=spec.features or None))


def _spec_to_submit(spec: JobSpec, num_records: int, features: str, consumers: int) -> JobSpec:
    """`spec` as the job produce() creates: a map job of the source's records and features, with
    the ranks it was given or found."""
    fields: Dict[str, Any] = dict(spec.to_dict())
    fields.update(source="map", num_records=num_records, features=features,
                  num_consumers=consumers)
    return JobSpec.from_json(json.dumps(fields))


def _settled(options: Optional[ProduceOptions], keywords: Dict[str, Any]) -> ProduceOptions:
    """The options produce() runs with: `options` with `keywords` over it, or the keywords."""
    try:
        if options is None:
            return ProduceOptions(**keywords)
        if not isinstance(options, ProduceOptions):
            raise errors.InvalidArgumentError(
                f"produce()'s options are a ProduceOptions, not a {type(options).__name__}")
        return dataclasses.replace(options, **keywords)
    except TypeError as e:  # an unknown keyword, or no batch_size
        raise TypeError(f"produce(): {e}") from None


def produce(source: Any, dispatcher: str, job: Union[str, JobSpec],
            options: Optional[ProduceOptions] = None, *,
            on_serving: Optional[Callable[[], None]] = None,
            leave_now: Optional[threading.Event] = None, **keywords: Any) -> Dict[str, Any]:
    """Runs a producer of map job `job`, whose records are `source[i]` (any object with
    __len__ and __getitem__; a `get_many(indexes)` method, if it has one, reads a batch's
    records at once), until every rank has read the job's last epoch (epochs > 0) or `stop`
    (a threading.Event) is set.

    The job is created if it does not exist (or reused if it exists with the same spec):
    `consumers` ranks (default: the launcher's world size), batches of `batch_size` records,
    `epochs` (0: without end), the plan's `seed`, `shuffle` ("none", "global", "blocks"),
    `remainder` ("drop", "pad"), `mode` ("dealt", "first_come"), `resume_from` (a consumer's
    state_dict, to continue with another number of consumers). Several processes may call
    produce() with the same arguments: each is one more producer of the job.

    transform(record, rng) runs on every record (rng: record_rng(seed, epoch, index)); a
    transform of one argument is called without it. collate(records) makes the batch dict
    (default: default_collate, with `names` for tuple records). batch_transform(batch, rng)
    runs on the collated batch (rng: batch_rng(seed, epoch, batch)). `features`: the job's
    feature spec text ("image:uint8[32,32,3],label:int64,tokens:int32[*]"); default: read off
    batch 0 of epoch 0, made at start, which also checks the source and transforms before any
    consumer waits. A batch that fails reaches the consumer that needs it as the error, naming
    the epoch, the batch, the record index and the exception.

    decode(record) -> record runs on every record read from the source, before transform. The
    caller promises that it is deterministic: a function of the record alone (no generator, no
    global state, no clock), as a JPEG decode is. With cache_bytes > 0, what decode makes (without
    decode: the source's records themselves) is kept by global record index in a record cache
    (croupier.map.record_cache) that all the workers of this producer share: a directory on /dev/shm
    (shared memory) made before the workers are forked and removed when produce() returns, on
    error too. A record found there is neither read from the source nor decoded again, so the
    epochs after the first run only transform and batch_transform, and every batch holds the same
    bytes as without the cache. It holds at most cache_bytes bytes (counted in whole pages);
    once a record does not fit it is full and adds no more (nothing is evicted; the other
    records are read and decoded each time). A record is decoded once per producer even when
    workers need it at once (they wait for the one making it). A cache file that is corrupt or
    unreadable is a miss: removed, made again. Each producer has its own cache.

    Returns {"record_cache": counts, "drained": {"kept", "served"}, "object_store": counts}
    (drained: None unless it was stopped and drained, see below; record_cache: None without a
    cache): hits, misses (records made), bytes and records held, not_added (made while it was
    full), corrupt, full, capacity, path (RecordCache.stats()); the same counts are logged as one
    line on the logger croupier.pipeline (INFO): "record cache: H hits, M misses, B bytes in F
    records". object_store (None when it read no s3:// object): what this producer and its worker
    processes asked of object stores meanwhile (requests, bytes, retries, throttles, failures,
    ranges; shared and shared_bytes: the ranges read from the copies of what one of them fetched
    before, croupier.map.cache_dirs.shared_reads), logged too: "object store: R requests, B
    bytes, T retries (S throttled), F failed[; N ranges (B bytes) read from the producer's
    copies]".

    skip_failing_records=True (a setting of the job, so every producer skips alike): a record
    whose read, decode or transform raises is left out of its batch, which then holds fewer records,
    instead of failing the batch; each is logged (logger "croupier.pipeline") and counted in the
    producers' status (stats.records_skipped) and metrics (croupier_producer_records_skipped_total).
    A batch all of whose records fail is still an error. With tf_transform, a record the function
    fails on is found (the batch's records run again in halves) and left out.

    `workers` worker processes (default: default_workers(); 0: none) make the batches; the
    producer's own threads (`threads`, default max(workers, 1)) hand them out. A worker that dies
    (OOM-killed, a crash in native code, a signal) is replaced, and the batch it was making is
    made again by the replacement, identical; a batch that kills that worker too fails (INTERNAL)
    with an error naming the epoch, the batch, both workers' pids and how they died, and says it
    was tried twice, while the other batches go on. Each death is logged as one line (logger
    croupier.pipeline, WARNING). Replacing stops for good once more than
    max_worker_deaths(workers) = max(10, 2 * workers) workers have died within DEATH_WINDOW (60)
    seconds, or once no worker can be forked: dead workers are then not replaced, their batches
    fail naming why, and once none is left every batch fails so (restart the producer). A worker
    stuck on a batch (no answer within `worker_timeout` seconds, default 600; None: no limit: a
    loop, a deadlock, a read that never returns) is SIGKILLed and counts as a death: its
    replacement makes the batch again, and a batch that is stuck twice fails so, naming the
    timeout.

    metrics_port (default None: none; 0: a free port): the producer's Prometheus metrics on
    `bind`:port (GET /metrics), as `croupier producer --metrics-port` serves them: its
    croupier_producer_* families, and croupier_s3_* counting what it and its worker processes
    asked of object stores (a ParquetSource's s3:// objects). metrics_port_file: a file the port
    is written to once it serves.

    transform_threads (default 1): the threads on which each worker process (with workers=0,
    the producer) reads, decodes and transforms a batch's records, for work that releases the
    GIL (PIL's decode, numpy, OpenCV); "auto" measures 1 against
    croupier.map.record_threads.AUTO_THREADS (4) threads on the first batches of each process and
    keeps the faster (logged once). The records keep their order, and each its own generator, so
    a batch holds the same bytes with any number of threads. With get_many or a record cache the
    records are loaded at once and only the transforms are spread.

    tf_transform(ds) -> ds is a tf.data pipeline run on each batch's records instead of
    transform and collate (croupier.map.tf_pipeline): `ds` has one element per record of the batch,
    in plan order, holding the record's fields and "croupier_seed" (int64 [2], the record's seed
    for tf.random.stateless_* ops: tf_pipeline.record_seed(seed, epoch, index)); it must return
    one element per record, in order (a map), a dict of tensors that croupier collates. It runs
    in TensorFlow's runtime as one continuous tf.data pipeline per producer: the records of the
    batches the producer's threads (`threads`, default max(8, 2 * default_workers())) ask for flow
    through it, fn's parallel map and prefetch spanning batch boundaries, one puller thread
    handing each batch its outputs; a batch whose record count or field types differ from the
    pipeline's is made alone (one tf.function call), with the same bytes. fn is checked at the
    first batch: one that may reorder records (shuffle, deterministic=False) is refused, one
    that does not keep a dataset's length (filter, batch, take) makes each batch alone and its
    count of outputs is checked. When the pipeline raises, the batches in it are made again
    alone, which names the failing record, and a new pipeline starts. No worker process is
    forked once TensorFlow runs, so `workers` must be 0 or None. decode and the record cache
    work with it too: the records that go into the tf.data pipeline are decode's outputs, from
    the cache when it holds them.

    Once `stop` is set the producer leaves gracefully (drains): it takes no more work, the
    dispatcher hands its unfinished tasks to the other producers at once and keeps with it the
    tasks whose every batch it has made, which it serves to the ranks that ask for them, for up
    to `drain_timeout` seconds (default 5; 0: it leaves at once), or until `leave_now` (a
    threading.Event) is set; what it still holds then goes to the others. `croupier produce`
    does this on SIGTERM or SIGINT, and leaves at once on a second signal. The batches are the same
    bytes whoever serves them.

    If the dispatcher does not answer for `dispatcher_timeout` seconds, produce() stops and
    raises UnavailableError naming it.

    The settings come as one ProduceOptions (`options`), or as keyword arguments of the same
    names (the older form); keywords given with `options` replace its fields. Or `job` is a
    croupier.JobSpec, typed as submit_job() takes it: the job's settings are the spec's (its
    unset ones the plan's defaults; num_consumers 0: the launcher's world size; features empty:
    read off batch 0), and only this producer's settings come as keywords (a job setting beside
    the spec is refused, naming it). on_serving() is called once the producer serves (the
    command line's graceful stop)."""
    spec: Optional[JobSpec] = None
    if isinstance(job, JobSpec):
        spec, job = job, job.name
        o = _options_of_spec(spec, options, keywords)
    else:
        o = _settled(options, keywords)
    consumers, workers, threads, features = o.consumers, o.workers, o.threads, o.features
    if consumers is None:
        from croupier.launcher import detect_rank_world
        _, consumers = detect_rank_world(0, None)
    if workers is None:
        workers = default_workers() if o.tf_transform is None else 0
    workers = int(workers)
    if workers < 0:
        raise errors.InvalidArgumentError(f"workers must be 0 or more, not {workers}")
    if o.worker_timeout is not None and not o.worker_timeout > 0:
        raise errors.InvalidArgumentError(
            f"worker_timeout must be a number of seconds more than 0, or None, not "
            f"{o.worker_timeout!r}")
    metrics_port = metrics_port_of(o.metrics_port, o.metrics_port_file)
    if o.tf_transform is not None and workers > 0:
        # Forking a process once TensorFlow has started its thread pools is unsafe, and it is
        # started here (batch 0 is made before the workers would be forked).
        raise errors.InvalidArgumentError(
            f"job '{job}': tf_transform runs in the producer's own threads, TensorFlow's runtime "
            f"doing the parallel work; workers must be 0 (not {workers}): no process is forked "
            "once TensorFlow runs")
    if o.tf_transform is not None and threads is None:
        threads = max(8, 2 * default_workers())  # batches in flight: the pipeline's lookahead
    drained: Optional[Dict[str, int]] = None
    store_before = object_store.process_stats()
    pipeline = Pipeline(source, transform=o.transform, batch_transform=o.batch_transform,
                        collate=o.collate, names=o.names, features=features, seed=o.seed,
                        tf_transform=o.tf_transform, skip_failing_records=o.skip_failing_records,
                        decode=o.decode, cache_bytes=o.cache_bytes,
                        transform_threads=o.transform_threads)
    reads = contextlib.ExitStack()
    try:
        # Every range of an object is fetched once for all the processes of this producer: batch
        # 0's reads here, then the workers' (cache_dirs.shared_reads).
        reads.enter_context(shared_reads(workers))
        num_records = len(pipeline)
        if num_records == 0:
            raise errors.InvalidArgumentError(f"the source of job '{job}' is empty")
        plan = _croupier.EpochPlan(num_records, int(o.batch_size), int(consumers),
                                   seed=int(o.seed), epoch=0, shuffle=o.shuffle,
                                   remainder=o.remainder,
                                   block_size=int(o.block_size),
                                   window_blocks=int(o.window_blocks))
        if plan.num_batches == 0:
            raise errors.InvalidArgumentError(
                f"job '{job}': {num_records} records make no whole round of {consumers} batches of "
                f"{o.batch_size}")
        if features is None:
            # Batch 0 of epoch 0, made here before anything starts: the job's features, and an
            # early check of the source and the transforms (an error here is the caller's, not a
            # trainer's). With a record cache, its records are the cache's first.
            try:
                first = pipeline.make(0, 0, plan.batch(0))
            except BatchError as e:
                raise errors.BY_CODE.get(e.code, errors.InternalError)(
                    f"job '{job}' epoch 0 batch 0: {e}") from None
            features = features_of(first.to_dict())
            pipeline.set_features(features)
        # The workers are forked before croupier starts a thread of its own in this process. Every
        # close is inside running(): a thread in one when the interpreter exits is waited for.
        with at_exit.running():
            pool = WorkerPool(pipeline, workers, batch_timeout=o.worker_timeout) if workers > 0 \
                else None
            make = pool.native if pool is not None else in_process(pipeline)
            node = None
            try:
                if spec is not None:
                    submit_job(dispatcher,
                               _spec_to_submit(spec, num_records, features, int(consumers)),
                               exist_ok=True, auth_token=o.auth_token, timeout=o.timeout)
                else:
                    create_job(dispatcher, job, [], features, o.batch_size,
                               consumers=consumers, seed=o.seed, epochs=o.epochs,
                               shuffle=o.shuffle, remainder=o.remainder, mode=o.mode,
                               block_size=o.block_size, window_blocks=o.window_blocks,
                               source="map", num_records=num_records,
                               resume_from=o.resume_from,
                               skip_failing_records=o.skip_failing_records, exist_ok=True,
                               auth_token=o.auth_token, timeout=o.timeout)
                threads = int(threads) if threads is not None else max(workers, 1)
                node = at_exit.track(_croupier._Producer.records(
                    dispatcher, job, auth_token_or_env(o.auth_token), threads,
                    int(o.buffer_bytes), int(o.max_tasks), o.bind, o.advertise_host,
                    float(o.timeout), make, metrics_port))
                if o.metrics_port_file is not None:
                    write_port_file(o.metrics_port_file, node.metrics_port)
                drained = serve_until_the_end(
                    node, job, stop=o.stop, dispatcher_timeout=o.dispatcher_timeout,
                    drain_timeout=o.drain_timeout, leave_now=leave_now,
                    check=_check_of(pool, job), on_serving=on_serving)["drained"]
            except errors.Error:
                if not at_exit.exiting.is_set():
                    raise
            finally:
                if node is not None:
                    node.close()
                if pool is not None:
                    pool.close()
    finally:
        reads.close()  # after the workers have exited
        cache = pipeline.cache_stats()
        pipeline.close()  # after the workers have exited: removes the record cache
        if cache is not None:
            log.info("croupier produce: job '%s': %s", job, summary(cache))
        asked = {k: v - store_before.get(k, 0) for k, v in object_store.process_stats().items()}
        store = asked if asked["requests"] else None
        if store is not None:
            log.info("croupier produce: job '%s': %s", job, object_store.summary(store))
    return {"record_cache": cache, "drained": drained, "object_store": store}


def _check_of(pool: Optional[WorkerPool], job: str) -> Optional[Callable[[], None]]:
    """The check serve_until_the_end() runs on a worker pool: UnavailableError (logged) once the
    pool can make no batch any more (its producer then leaves the job: its tasks go to the
    other producers at once)."""
    if pool is None:
        return None

    def check() -> None:
        broken = pool.broken
        if broken is None:
            return
        log.error("croupier produce: job '%s': this producer leaves the job, its worker pool "
                  "can make no batch any more: %s", job, broken)
        raise errors.UnavailableError(
            f"the producer of job '{job}' left it: its worker pool can make no batch any "
            f"more: {broken}")
    return check
