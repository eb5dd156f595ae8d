"""The processes of bench/bench_map.py, one role each (bench_map.py --role NAME runs ROLES[NAME]):
the trainers, producers and servers of every system, the decode limit's processes and the
work-alone loop, and the croupier map jobs' set-ups (MAP_JOBS).

Every role pins itself to the run's cores (--cpus), builds what it needs, says it is ready
(GO.ready-NAME), waits for the start signal (the file GO), works, prints one JSON line, and a
process whose end closes the run says its work is done (GO.done-NAME) and waits for GO.exit, so
that the run's CPU time is read before it exits (bench/cpu_budget.py).
"""
import json
import os
import pathlib
import resource
import sys
import time

import numpy as np

import cpu_budget
from map_workloads import (WORKLOADS, WORLD, JpegBytes, JpegFolder, JpegPaths, batch_transform,
                           collate, dataset, record_transform, tf_augment, tf_read_and_augment)

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALONE_RECORDS = 2048  # records of the work-alone loop


def share(args):
    """A trainer's share of the --workers workers (at least 1)."""
    return max(1, args.workers // WORLD)


# --- The croupier map jobs ----------------------------------------------------------------------

def map_job(args, wl):
    """The croupier map job: the workload's dataset, its per-record transform (small) or none,
    --workers worker processes."""
    fn = record_transform(wl, args.uint8)
    return dict(source=dataset(wl, args.images_dir, args.uint8, inside=False),
                workers=args.workers, **({"transform": fn} if fn else {}))


def map_job_vectorised(args, wl):
    """The map job with the records only decoded in the workers; crop, flip and normalise on the
    collated batch."""
    uint8, crop = args.uint8, wl.crop
    return dict(source=JpegFolder(args.images_dir), workers=args.workers,
                batch_transform=lambda b, rng: batch_transform(b, rng, uint8, crop))


def map_job_threads(args, wl):
    """The map job with half the worker processes, each reading, decoding and transforming its
    batches' records on 2 threads (transform_threads: PIL's decode and numpy release the GIL):
    --workers workers in all."""
    job = map_job(args, wl)
    job.update(workers=max(1, args.workers // 2), transform_threads=2)
    return job


# Each croupier map-job system of bench_map.SYSTEMS (role "producer"): (args, workload) ->
# produce()'s source and keywords, each with the same budget of --workers workers.
MAP_JOBS = {"croupier": map_job, "croupier_batch": map_job_vectorised,
            "croupier_threads": map_job_threads}


# --- Roles (each a process) ---------------------------------------------------------------------

def wait_for(go):
    while not go.exists():
        time.sleep(0.002)


def ready_then_wait(args, name):
    """Says this process is set up (its imports done, its pipeline built), then waits for the
    start signal: importing TensorFlow or PyTorch takes seconds of CPU in each process, more on a
    loaded machine."""
    pathlib.Path(f"{args.go}.ready-{name}").touch()
    wait_for(pathlib.Path(args.go))


def finished(args, name):
    """Says this process's work is done, then waits until the parent has read the run's CPU
    time (GO.exit): its exit is not the run's work."""
    pathlib.Path(f"{args.go}.done-{name}").touch()
    wait_for(pathlib.Path(f"{args.go}.exit"))


def count_records(batches, name, args):
    """Iterates a trainer's batches; prints its records, the times of its first and last batch
    and of its end (the loop's: the iterator said it was done), then finished()."""
    records, first, last = 0, None, None
    for batch in batches:
        records += len(batch["id"])
        last = time.time()
        first = first or last
    if records == 0:
        print(f"{name}: no batch", file=sys.stderr, flush=True)
    print(json.dumps({"records": records, "first": first, "last": last, "end": time.time()}),
          flush=True)
    finished(args, name.replace(" ", ""))


def own_cpu(before=None):
    """This process's CPU seconds and its reaped children's (less `before`)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    parent, children = own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime
    if before is not None:
        parent, children = parent - before[0], children - before[1]
    return parent, children


def role_dataloader(args, wl):
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    data = dataset(wl, args.images_dir, args.uint8, inside=True)
    sampler = DistributedSampler(data, num_replicas=WORLD, rank=args.rank, shuffle=True, seed=1,
                                 drop_last=True)
    loader = DataLoader(data, batch_size=wl.batch, sampler=sampler,
                        num_workers=args.loader_workers, drop_last=True)
    torch.set_num_threads(1)
    ready_then_wait(args, f"rank{args.rank}")
    count_records(loader, f"rank {args.rank}", args)


def role_consumer(args, wl):
    import croupier
    # Ready once imported: Consumer() waits for the job, which the producer makes after the
    # start signal.
    pathlib.Path(f"{args.go}.ready-consumer{args.rank}").touch()
    feed = croupier.Consumer(args.address, "bench", args.rank, WORLD, timeout=120)
    wait_for(pathlib.Path(args.go))
    records, nbytes, first, last = 0, 0, None, None
    for batch in feed.batches(0):
        records += batch.num_records
        nbytes += batch.nbytes
        last = time.time()
        first = first or last
    if records == 0:
        print(f"rank {args.rank}: no batch; job {feed.job}, position {feed.state_dict()}",
              file=sys.stderr, flush=True)
    print(json.dumps({"records": records, "bytes": nbytes, "first": first, "last": last,
                      "end": time.time()}), flush=True)
    finished(args, f"consumer{args.rank}")
    feed.close()


def role_producer(args, wl):
    """A croupier map job's producer, set up by MAP_JOBS[--system]."""
    import croupier
    job = MAP_JOBS[args.system](args, wl)
    source = job.pop("source")
    ready_then_wait(args, "producer")
    # From the start signal on (the interpreter's start-up and imports are not the producer's
    # work): this process's CPU time, and all of its worker processes' (forked after the signal,
    # and waited for when produce() returns).
    before = own_cpu()
    faults_before = [resource.getrusage(who).ru_minflt
                     for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    croupier.produce(source, args.address, "bench", batch_size=wl.batch, consumers=WORLD,
                     epochs=1, seed=1, **job)
    parent, workers = own_cpu(before)
    faults = [resource.getrusage(who).ru_minflt - before_faults for who, before_faults in
              zip((resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN), faults_before)]
    print(json.dumps({"cpu": parent + workers, "parent_cpu": parent, "workers_cpu": workers,
                      "parent_page_faults": faults[0], "workers_page_faults": faults[1]}),
          flush=True)


def tf_threads(ds, threads):
    """ds with its tf.data work on a private thread pool of `threads` threads (the budget)."""
    import tensorflow as tf
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    return ds.with_options(options)


def role_tf_producer(args, wl):
    import croupier
    import tensorflow as tf
    # tf: the source gives the paths and the pipeline reads the files, as the other TensorFlow
    # systems' pipelines do; tf_bytes: the source reads each file's bytes in Python.
    uint8, crop, threads = args.uint8, wl.crop, args.workers
    if args.system == "tf_bytes":
        data, augment = JpegBytes(args.images_dir), tf_augment
    else:
        data, augment = JpegPaths(args.images_dir), tf_read_and_augment

    def pipeline(ds):
        return tf_threads(ds.map(lambda r: augment(r, uint8, crop),
                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True),
                          threads)
    ready_then_wait(args, "producer")
    before = own_cpu()
    croupier.produce(data, args.address, "bench", batch_size=wl.batch, consumers=WORLD,
                     epochs=1, seed=1, tf_transform=pipeline, workers=0)
    parent, _ = own_cpu(before)
    print(json.dumps({"cpu": parent}), flush=True)  # from the start signal: not the import


def tf_pipeline(args, wl, shard=None, threads=None):
    """The tf.data pipeline a TensorFlow user writes: the file list shuffled with one seed (the
    same order on every rank), its shard (shard=rank) or all of it, read_file, the transform in
    a parallel map, batch, prefetch; on a private pool of `threads` threads."""
    import tensorflow as tf
    paths = [str(p) for p in sorted(pathlib.Path(args.images_dir).glob("*.jpg"))]
    order = np.random.default_rng(1).permutation(len(paths))
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(order, tf.int64))
    if shard is not None:
        ds = ds.shard(WORLD, shard)
    uint8, crop = args.uint8, wl.crop

    def load(i):
        record = {"image": tf.io.read_file(tf.gather(paths, i)), "label": i % 10, "id": i,
                  "croupier_seed": tf.stack([tf.constant(1, tf.int64), i])}
        return tf_augment(record, uint8, crop)
    ds = (ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(wl.batch, drop_remainder=True).prefetch(2))
    return tf_threads(ds, threads) if threads else ds


def role_tf_shard(args, wl):
    ds = tf_pipeline(args, wl, shard=args.rank, threads=share(args))
    ready_then_wait(args, f"rank{args.rank}")
    count_records(ds, f"rank {args.rank}", args)


def role_tf_service(args, wl):
    """A tf.data service dispatcher and --service-workers workers, in this process: writes the
    dispatcher's address to GO.address, and once the trainers are done (GO.done), prints its CPU
    time from the start signal."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # not the servers' configurations
    import tensorflow as tf
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    host_port = dispatcher.target.split("://", 1)[1]
    workers = [service.WorkerServer(service.WorkerConfig(dispatcher_address=host_port))
               for _ in range(args.service_workers)]
    tmp = pathlib.Path(f"{args.go}.address.tmp")
    tmp.write_text(dispatcher.target)
    tmp.rename(f"{args.go}.address")
    ready_then_wait(args, "service")
    before = own_cpu()
    wait_for(pathlib.Path(f"{args.go}.done"))
    parent, _ = own_cpu(before)
    print(json.dumps({"cpu": parent, "workers": len(workers)}), flush=True)


def role_tf_service_trainer(args, wl):
    """A trainer reading the tf.data service job: the whole pipeline (not a shard) runs on the
    service's workers (on --workers tf.data threads), each batch goes to one of the 4 trainers
    (distributed_epoch, one shared job name: each record once)."""
    import tensorflow as tf
    ds = tf_pipeline(args, wl, threads=args.workers).apply(
        tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=args.address,
            job_name=pathlib.Path(args.go).name,
            compression=None if args.service_compression == "none" else "AUTO"))
    ready_then_wait(args, f"rank{args.rank}")
    count_records(ds, f"rank {args.rank}", args)  # the job starts here, at the first request


def role_grain(args, wl):
    """A trainer with its own Grain pipeline over its part of one global shuffle: the dataset
    (on small, the transform as random_map: a generator per record from the seed and the
    record's position), batched, in --loader-workers processes (mp_prefetch) of
    --grain-threads threads."""
    import grain
    from absl import flags
    # Grain 0.2.18 reads an absl flag when it starts its worker processes, which fails in a
    # program that has not parsed absl's flags (google/grain issue 1355, fixed after 0.2.18):
    # parse none, leaving every flag at its default.
    flags.FLAGS(sys.argv[:1])
    ds = grain.MapDataset.source(dataset(wl, args.images_dir, args.uint8, inside=False))
    ds = ds.shuffle(seed=1)[args.rank::WORLD]
    fn = record_transform(wl, args.uint8)
    if fn is not None:
        ds = ds.random_map(fn, seed=1)
    ds = (ds.batch(wl.batch, drop_remainder=True)
          .to_iter_dataset(grain.ReadOptions(num_threads=args.grain_threads))
          .mp_prefetch(grain.MultiprocessingOptions(num_workers=args.loader_workers)))
    ready_then_wait(args, f"rank{args.rank}")
    batches = iter(ds)  # the worker processes start here (spawned)
    count_records(batches, f"rank {args.rank}", args)
    batches.close()


def role_spdl(args, wl):
    """A trainer with its own SPDL pipeline over its part of one global shuffle (the
    DistributedSampler's split of a seeded permutation): each record (on small, then the
    transform, its generator seeded by (1, 0, id)) on --spdl-threads threads, batches collated
    with numpy, a sink of 3 batches."""
    from spdl.pipeline import PipelineBuilder
    data = dataset(wl, args.images_dir, args.uint8, inside=False)
    fn = record_transform(wl, args.uint8)
    order = np.random.default_rng(1).permutation(len(data))
    mine = order[:len(data) // WORLD * WORLD][args.rank::WORLD].tolist()

    def load(i):
        record = data[i]
        return fn(record, np.random.default_rng([1, 0, i])) if fn else record

    pipeline = (PipelineBuilder()
                .add_source(mine)
                .pipe(load, concurrency=args.spdl_threads, output_order="input")
                .aggregate(wl.batch, drop_last=True)
                .pipe(collate)
                .add_sink(3)
                .build(num_threads=args.spdl_threads))
    ready_then_wait(args, f"rank{args.rank}")
    with pipeline.auto_stop():
        count_records(pipeline.get_iterator(timeout=600), f"rank {args.rank}", args)


def ray_map(batch, workload, uint8):
    """Ray Data's map_batches function: the dataset's record of each path of the batch (on
    small, then the transform, seeded by (1, id)), collated."""
    wl = WORKLOADS[workload]
    data = dataset(wl, None, uint8, inside=False, paths=())
    fn = record_transform(wl, uint8)
    records = []
    for path, i in zip(batch["path"], batch["id"]):
        record = data.record(path, int(i))
        records.append(fn(record, np.random.default_rng([1, int(i)])) if fn else record)
    return collate(records)


def role_ray(args, wl):
    """Ray Data, in one driver process: ray.init(num_cpus=--workers), 4 trainer actors (no CPU
    reserved: they only read), the paths in one seeded order -> map_batches(the records,
    collated) -> streaming_split(4, equal=True), one split per trainer."""
    # Ray's worker processes import map_workloads (ray_map's functions) from this folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "bench"), str(ROOT / "python")] + os.environ.get("PYTHONPATH", "").split(
            os.pathsep)).rstrip(os.pathsep)
    import ray
    import ray.data
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", _temp_dir=str(pathlib.Path(args.go).parent / "ray"))
    ray.data.DataContext.get_current().enable_progress_bars = False
    batch_size = wl.batch

    @ray.remote(num_cpus=0)
    class Trainer:
        def ready(self):
            return True

        def run(self, split):
            records, first, last = 0, None, None
            for batch in split.iter_batches(batch_size=batch_size, batch_format="numpy"):
                records += len(batch["id"])
                last = time.time()
                first = first or last
            return {"records": records, "first": first, "last": last, "end": time.time()}

    try:
        paths = sorted(pathlib.Path(args.images_dir).glob("*.jpg"))
        order = np.random.default_rng(1).permutation(len(paths))
        items = [{"path": str(paths[i]), "id": int(i)} for i in order]
        trainers = [Trainer.remote() for _ in range(WORLD)]
        ray.get([t.ready.remote() for t in trainers], timeout=300)
        ds = ray.data.from_items(items).map_batches(
            ray_map, batch_size=wl.batch, fn_kwargs={"workload": wl.name, "uint8": args.uint8})
        ready_then_wait(args, "ray")
        splits = ds.streaming_split(WORLD, equal=True)
        got = ray.get([t.run.remote(s) for t, s in zip(trainers, splits)], timeout=600)
        print(json.dumps({"trainers": got}), flush=True)
        finished(args, "ray")
    finally:
        ray.shutdown()


def role_serve(args, wl):
    import croupier
    import torch
    from torch.utils.data import DataLoader
    data = dataset(wl, args.images_dir, args.uint8, inside=True)
    loader = DataLoader(data, batch_size=wl.batch, shuffle=True, num_workers=args.workers,
                        drop_last=True)
    torch.set_num_threads(1)
    ready_then_wait(args, "serve")
    croupier.serve(loader, args.address, "bench", consumers=WORLD, epochs=1)


def role_tf_serve(args, wl):
    """croupier.serve() of the tf.data pipeline a TensorFlow user writes, whole (no shard), on a
    private pool of --workers threads: the continuous pipeline, without the map job's
    guarantees."""
    import croupier
    ds = tf_pipeline(args, wl, threads=args.workers)
    ready_then_wait(args, "serve")
    croupier.serve(ds, args.address, "bench", consumers=WORLD, epochs=1)


def role_decode_limit(args, wl):
    """One of the decode limit's processes, pinned to one core of the budget: its share of the
    batches (in one seeded order of the records) decoded by the dataset and collated, nothing
    sent anywhere; prints its records and seconds from the start signal."""
    cpus = cpu_budget.parse_cpus(args.cpus)
    cpu_budget.pin([cpus[args.rank % len(cpus)]])
    data = JpegFolder(args.images_dir)  # decode only
    order = np.random.default_rng(1).permutation(len(data))
    batches = range(args.rank, len(data) // wl.batch, args.procs)
    collate([data[int(i)] for i in order[:2]])  # warm up: PIL's first decode loads its plugins
    ready_then_wait(args, f"limit{args.rank}")
    start = time.time()
    records = 0
    for b in batches:
        batch = collate([data[i] for i in order[b * wl.batch:(b + 1) * wl.batch]])
        records += len(batch["id"])
    print(json.dumps({"records": records, "seconds": time.time() - start}), flush=True)
    finished(args, f"limit{args.rank}")


def role_alone(args, wl):
    """One of the work-alone processes, pinned to one core of the budget, all started together
    (so that every core is busy, as during a system's run): the croupier map job's per-record
    work (the source's record, then its transform with the record's generator) in a loop over
    its share of the records; prints its CPU seconds per record."""
    from croupier.map.pipeline import record_rng
    cpus = cpu_budget.parse_cpus(args.cpus)
    cpu_budget.pin([cpus[args.rank % len(cpus)]])
    job = map_job(args, wl)
    source, fn = job["source"], job.get("transform")
    ids = range(args.rank, min(len(source), ALONE_RECORDS * args.procs), args.procs)
    for i in range(16):  # warm up: the first calls import and allocate
        source[i]
    ready_then_wait(args, f"alone{args.rank}")
    start = time.process_time()
    for i in ids:
        record = source[i]
        if fn is not None:
            fn(record, record_rng(1, 0, i))
    print(json.dumps({"cpu_per_record": (time.process_time() - start) / len(ids),
                      "records": len(ids)}), flush=True)


ROLES = {"dataloader": role_dataloader, "consumer": role_consumer, "producer": role_producer,
         "serve": role_serve, "tf_producer": role_tf_producer, "tf_shard": role_tf_shard,
         "tf_serve": role_tf_serve,
         "tf_service": role_tf_service, "tf_service_trainer": role_tf_service_trainer,
         "grain": role_grain, "ray": role_ray, "spdl": role_spdl,
         "decode_limit": role_decode_limit, "alone": role_alone}
