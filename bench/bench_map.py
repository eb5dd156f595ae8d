#!/usr/bin/env python3
"""A user's own pipeline: JPEG images (made here with PIL) -> decode -> random crop and flip ->
normalise to float32 (or, with --uint8, kept uint8) -> batches of 32 -> 4 trainer processes, in
records/s, for each system with the same total number of worker processes (--workers, 4):

  croupier     croupier.produce(dataset, transform=...) in one producer process with --workers
               worker processes (a map job: global shuffle, every guarantee of a TFRecord job);
               4 croupier.Consumer processes;
  croupier_batch  the same map job with the crop, flip and normalise vectorised on the collated
               batch (batch_transform: each record's crop and flip drawn from the batch's
               generator), the records only decoded in the workers;
  dataloader   what a user writes instead: 4 trainer processes, each a torch DataLoader over the
               same map-style dataset with a DistributedSampler (shuffle on) and --workers / 4
               workers;
  serve        croupier.serve(DataLoader(dataset, shuffle=True, num_workers=--workers)) in one
               process (a stream: no failover, no exact resume), 4 croupier.Consumer processes;
  grain        Grain (grain.MapDataset): 4 trainer processes, each over its part of one seeded
               global shuffle (dataset[rank::4]), the same dataset and transform as random_map
               (seeded per record by Grain), batch, to_iter_dataset(ReadOptions(num_threads=
               --grain-threads)), mp_prefetch with --workers / 4 worker processes (spawned);
  ray          Ray Data in one driver process, ray.init(num_cpus=--workers): the image paths in
               one seeded order, from_items -> map_batches(decode + the same transform, batches
               of 32) -> streaming_split(4, equal=True), read by 4 trainer actors (num_cpus=0)
               with iter_batches(32);
  spdl         SPDL's pipeline (spdl.pipeline, Meta's thread-pool engine): 4 trainer processes,
               each over its part of one seeded global shuffle (as DistributedSampler), the same
               decode and transform (seeded per record) in a pipe stage of --spdl-threads
               concurrent calls on a thread pool (PIL's decode and numpy release the GIL), then
               batches of 32 collated with numpy.

and the TensorFlow systems (--systems tf,tfshard,tfservice), the same images and transform as a
tf.data pipeline (tf.io.decode_jpeg, tf.image.stateless_random_crop and _flip_left_right,
normalise):

  tf           croupier.produce(JPEG bytes, tf_transform=pipeline) in one producer process (no
               worker processes: TensorFlow's parallel map in the producer), 4 croupier.Consumer
               processes;
  tfshard      what a TensorFlow user writes instead: 4 trainer processes, each running the
               pipeline on its own shard (file list shuffled with one seed, ds.shard(4, rank),
               read_file, map with AUTOTUNE, batch, prefetch);
  tfservice    tf.data service: a dispatcher and --service-workers (1) workers in one process
               run the whole pipeline (no shard), distributed to 4 trainer processes with
               distribute(processing_mode="distributed_epoch", one job name per run: each batch
               to one trainer; compression --service-compression, TensorFlow's AUTO by default).

Every process imports and builds what it needs, then waits for one start signal; a system's
figure is the records its 4 trainers received over the time from that signal to the last
trainer's end (worker start-up included, for every system: croupier's and DataLoader's forked
workers, Grain's spawned ones, Ray's tasks, the tf.data service's job). Each system line also
gives, per round, the time from the signal to the last trainer's first batch and the longest time
from a trainer's last batch to the end of its loop. The systems run in --rounds rounds (2), in the
order given and then reversed; a figure is the median of its rounds. A system whose framework is
not installed is left out with a line saying so.

Also: the croupier producer's CPU time (its own and its workers') per record, against the same
decode and transform run alone in a loop in one process, and the bytes per record on the wire.

JSON lines on stdout: {"bench": "map", "case", "unit", "value", "baseline", "baseline_value",
"ratio", "goal", "met", "note"} (croupier against dataloader, serve, grain and spdl, goal >= 1; against
ray, goal >= 2; tf against tfshard, goal >= 1, and against tfservice, goal >= 3), and
{"bench": "map", "system", "records_per_s", "samples", "first_batch_s", "after_last_batch_s"}.

usage: .venv/bin/python bench/bench_map.py [--images 2048] [--workers 4] [--rounds 2] [--uint8]
       [--systems croupier,croupier_batch,dataloader,serve,grain,ray,spdl | tf,tfshard,tfservice]
       [--grain-threads 16] [--spdl-threads 4] [--service-workers 1] [--service-compression AUTO|none]
"""
import argparse
import importlib.util
import io
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

SIZE, CROP, BATCH, WORLD = 64, 56, 32, 4
GRAIN_THREADS = 16  # Grain's default ReadOptions(num_threads)
SPDL_THREADS = 4  # per trainer; 4 trainers x 4 threads
# Every system, with the modules it needs beyond numpy and PIL.
SYSTEMS = {"croupier": (), "croupier_batch": (), "dataloader": ("torch",), "serve": ("torch",), "grain": ("grain",),
           "ray": ("ray",), "spdl": ("spdl",), "tf": ("tensorflow",), "tfshard": ("tensorflow",),
           "tfservice": ("tensorflow",)}
MEAN, STD = 127.5, 64.0


# --- The pipeline, the same for every system --------------------------------------------------

class JpegFolder:
    """A map-style dataset: record i is the i-th JPEG of a folder, decoded (torch's Dataset
    protocol: __len__ and __getitem__)."""

    def __init__(self, folder, uint8=False, with_transform=False):
        self.paths = sorted(pathlib.Path(folder).glob("*.jpg"))
        self.uint8 = uint8
        self.with_transform = with_transform  # for DataLoader: transform in __getitem__

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        record = {"image": decode(self.paths[i]), "label": np.int64(i % 10), "id": np.int64(i)}
        if self.with_transform:
            record = transform(record, np.random.default_rng(), self.uint8)
        return record


def decode(path):
    """A JPEG file as a uint8 array (height, width, 3), with PIL."""
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(pathlib.Path(path).read_bytes())).convert("RGB"))


def transform(record, rng, uint8=False):
    """A random CROP x CROP crop, flipped left-right half the time, normalised to float32."""
    y, x = rng.integers(0, SIZE - CROP + 1, size=2)
    image = record["image"][y:y + CROP, x:x + CROP]
    if rng.random() < 0.5:
        image = image[:, ::-1]
    if uint8:
        image = np.ascontiguousarray(image)
    else:
        image = (image.astype(np.float32) - MEAN) / STD
    return dict(record, image=image)


def batch_transform(batch, rng, uint8=False):
    """transform, vectorised over a collated batch (the fast path of docs/python.md): each
    record's crop and flip drawn from the batch's generator, gathered from a strided view of the
    batch, normalised in one numpy operation."""
    images = batch["image"]  # (n, SIZE, SIZE, 3) uint8
    n = len(images)
    ys, xs = rng.integers(0, SIZE - CROP + 1, size=(2, n))
    flips = rng.random(n) < 0.5
    windows = np.lib.stride_tricks.sliding_window_view(images, (CROP, CROP), axis=(1, 2))
    crops = windows[np.arange(n), ys, xs].transpose(0, 2, 3, 1)  # (n, CROP, CROP, 3)
    crops = np.where(flips[:, None, None, None], crops[:, :, ::-1], crops)
    if uint8:
        return dict(batch, image=np.ascontiguousarray(crops))
    return dict(batch, image=(crops.astype(np.float32) - MEAN) / STD)


def write_images(folder, count):
    from PIL import Image
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    for i in range(count):
        noise = rng.integers(0, 32, (SIZE, SIZE, 3), dtype=np.uint8)
        Image.fromarray(base + noise).save(folder / f"{i:06d}.jpg", quality=90)


class JpegBytes:
    """A map-style source of the folder's JPEGs, not decoded: for the tf.data pipeline."""

    def __init__(self, folder):
        self.paths = sorted(pathlib.Path(folder).glob("*.jpg"))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return {"image": self.paths[i].read_bytes(), "label": np.int64(i % 10), "id": np.int64(i)}


def tf_augment(record, uint8=False):
    """The transform as TensorFlow ops, seeded by the record's int64 [2] seed."""
    import tensorflow as tf
    seed = record["croupier_seed"]
    image = tf.io.decode_jpeg(record["image"], channels=3)
    image = tf.image.stateless_random_crop(image, [CROP, CROP, 3], seed=seed)
    image = tf.image.stateless_random_flip_left_right(
        image, seed=tf.random.experimental.stateless_fold_in(seed, 1))
    if not uint8:
        image = (tf.cast(image, tf.float32) - MEAN) / STD
    return {"image": image, "label": record["label"], "id": record["id"]}


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


def wait_ready(go, procs, timeout=120):
    """Waits until each of procs has said it is ready; kills them all if one has not in time."""
    deadline = time.monotonic() + timeout
    while len(list(go.parent.glob(go.name + ".ready-*"))) < len(procs):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
                p.wait()
            raise SystemExit(f"{len(procs)} processes were not all ready within {timeout} s "
                             f"(exit codes {[p.returncode for p in procs]})")
        time.sleep(0.05)


def role_dataloader(args):
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    data = JpegFolder(args.images_dir, args.uint8, with_transform=True)
    sampler = DistributedSampler(data, num_replicas=WORLD, rank=args.rank, shuffle=True, seed=1,
                                 drop_last=True)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler, num_workers=args.loader_workers,
                        drop_last=True)
    ready_then_wait(args, f"rank{args.rank}")
    count_records(loader, f"rank {args.rank}")
    torch.set_num_threads(1)


def role_consumer(args):
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
    feed.close()


def role_producer(args, vectorised=False):
    import croupier
    data = JpegFolder(args.images_dir)
    uint8 = args.uint8
    if vectorised:  # the records only decoded; crop, flip and normalise on the collated batch
        transforms = dict(batch_transform=lambda b, rng: batch_transform(b, rng, uint8))
    else:
        transforms = dict(transform=lambda r, rng: transform(r, rng, uint8))
    ready_then_wait(args, "producer")
    # From the start signal on (the interpreter's start-up and imports are not the producer's
    # work): this process's CPU time, and all of its worker processes' (forked after the signal,
    # and waited for when produce() returns).
    before = resource.getrusage(resource.RUSAGE_SELF)
    croupier.produce(data, args.address, "bench", batch_size=BATCH, consumers=WORLD, epochs=1,
                     seed=1, workers=args.workers, **transforms)
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    parent = own.ru_utime + own.ru_stime - before.ru_utime - before.ru_stime
    workers = kids.ru_utime + kids.ru_stime
    print(json.dumps({"cpu": parent + workers, "parent_cpu": parent, "workers_cpu": workers}),
          flush=True)


def role_tf_producer(args):
    import croupier
    import tensorflow as tf
    data = JpegBytes(args.images_dir)
    uint8 = args.uint8

    def pipeline(ds):
        return ds.map(lambda r: tf_augment(r, uint8), num_parallel_calls=tf.data.AUTOTUNE,
                      deterministic=True)
    ready_then_wait(args, "producer")
    before = resource.getrusage(resource.RUSAGE_SELF)
    croupier.produce(data, args.address, "bench", batch_size=BATCH, consumers=WORLD, epochs=1,
                     seed=1, tf_transform=pipeline, workers=0)
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu = own.ru_utime + own.ru_stime - before.ru_utime - before.ru_stime
    print(json.dumps({"cpu": cpu}), flush=True)  # from the start signal: not the import


def tf_pipeline(images_dir, uint8, shard=None):
    """The tf.data pipeline a TensorFlow user writes: the file list shuffled with one seed (the
    same order on every rank), its shard (shard=rank) or all of it, read_file, the transform in
    a parallel map, batch, prefetch."""
    import tensorflow as tf
    paths = [str(p) for p in sorted(pathlib.Path(images_dir).glob("*.jpg"))]
    order = np.random.default_rng(1).permutation(len(paths))
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(order, tf.int64))
    if shard is not None:
        ds = ds.shard(WORLD, shard)

    def load(i):
        record = {"image": tf.io.read_file(tf.gather(paths, i)), "label": i % 10, "id": i,
                  "croupier_seed": tf.stack([tf.constant(1, tf.int64), i])}
        return tf_augment(record, uint8)
    return (ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(BATCH, drop_remainder=True).prefetch(2))


def count_records(batches, name):
    """Iterates a trainer's batches; prints its records, the times of its first and last batch
    and of its end (the loop's: the iterator said it was done)."""
    records, first, last = 0, None, None
    for batch in batches:
        records += len(batch["id"])
        last = time.time()
        first = first or last
    if records == 0:
        print(f"{name}: no batch", file=sys.stderr, flush=True)
    print(json.dumps({"records": records, "first": first, "last": last, "end": time.time()}),
          flush=True)


def role_tf_shard(args):
    ds = tf_pipeline(args.images_dir, args.uint8, shard=args.rank)
    ready_then_wait(args, f"rank{args.rank}")
    count_records(ds, f"rank {args.rank}")


def role_tf_service(args):
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
    before = resource.getrusage(resource.RUSAGE_SELF)
    wait_for(pathlib.Path(f"{args.go}.done"))
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu = own.ru_utime + own.ru_stime - before.ru_utime - before.ru_stime
    print(json.dumps({"cpu": cpu, "workers": len(workers)}), flush=True)


def role_tf_service_trainer(args):
    """A trainer reading the tf.data service job: the whole pipeline (not a shard) runs on the
    service's workers, each batch goes to one of the 4 trainers (distributed_epoch, one shared
    job name: each record once)."""
    import tensorflow as tf
    ds = tf_pipeline(args.images_dir, args.uint8).apply(
        tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=args.address,
            job_name=pathlib.Path(args.go).name,
            compression=None if args.service_compression == "none" else "AUTO"))
    ready_then_wait(args, f"rank{args.rank}")
    count_records(ds, f"rank {args.rank}")  # the job starts here, at the first request


def role_grain(args):
    """A trainer with its own Grain pipeline over its part of one global shuffle: the same
    dataset and transform (Grain's random_map: a generator per record from the seed and the
    record's position), batched, in --loader-workers processes (mp_prefetch)."""
    import functools
    import grain
    from absl import flags
    # Grain 0.2.18 reads an absl flag when it starts its worker processes, which fails in a
    # program that has not parsed absl's flags (google/grain issue 1355, fixed after 0.2.18):
    # parse none, leaving every flag at its default.
    flags.FLAGS(sys.argv[:1])
    ds = (grain.MapDataset.source(JpegFolder(args.images_dir))
          .shuffle(seed=1)[args.rank::WORLD]
          .random_map(functools.partial(transform, uint8=args.uint8), seed=1)
          .batch(BATCH, drop_remainder=True)
          .to_iter_dataset(grain.ReadOptions(num_threads=args.grain_threads))
          .mp_prefetch(grain.MultiprocessingOptions(num_workers=args.loader_workers)))
    ready_then_wait(args, f"rank{args.rank}")
    batches = iter(ds)  # the worker processes start here (spawned)
    count_records(batches, f"rank {args.rank}")
    batches.close()


def role_spdl(args):
    """A trainer with its own SPDL pipeline over its part of one global shuffle (the
    DistributedSampler's split of a seeded permutation): decode and transform of each record on
    --spdl-threads threads (the record's generator seeded by (1, 0, id)), batches of BATCH
    collated with numpy, a sink of 3 batches."""
    from spdl.pipeline import PipelineBuilder
    data = JpegFolder(args.images_dir)
    order = np.random.default_rng(1).permutation(len(data))
    mine = order[:len(data) // WORLD * WORLD][args.rank::WORLD].tolist()

    def load(i):
        return transform(data[i], np.random.default_rng([1, 0, i]), args.uint8)

    def collate(records):
        return {k: np.stack([r[k] for r in records]) for k in records[0]}

    pipeline = (PipelineBuilder()
                .add_source(mine)
                .pipe(load, concurrency=args.spdl_threads, output_order="input")
                .aggregate(BATCH, drop_last=True)
                .pipe(collate)
                .add_sink(3)
                .build(num_threads=args.spdl_threads))
    ready_then_wait(args, f"rank{args.rank}")
    with pipeline.auto_stop():
        count_records(pipeline.get_iterator(timeout=600), f"rank {args.rank}")


def ray_transform(batch, uint8=False):
    """Ray Data's map_batches function: decode each path of the batch, then the same transform,
    seeded by (1, id)."""
    images = [transform({"image": decode(path)}, np.random.default_rng([1, int(i)]),
                        uint8)["image"] for path, i in zip(batch["path"], batch["id"])]
    return {"image": np.stack(images), "label": batch["id"] % 10, "id": batch["id"]}


def role_ray(args):
    """Ray Data, in one driver process: ray.init(num_cpus=--workers), 4 trainer actors (no CPU
    reserved: they only read), the paths in one seeded order -> map_batches(decode + transform)
    -> streaming_split(4, equal=True), one split per trainer."""
    import ray
    import ray.data
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", _temp_dir=str(pathlib.Path(args.go).parent / "ray"))
    ray.data.DataContext.get_current().enable_progress_bars = False

    @ray.remote(num_cpus=0)
    class Trainer:
        def ready(self):
            return True

        def run(self, split):
            records, first, last = 0, None, None
            for batch in split.iter_batches(batch_size=BATCH, batch_format="numpy"):
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
        ds = ray.data.from_items(items).map_batches(ray_transform, batch_size=BATCH,
                                                    fn_kwargs={"uint8": args.uint8})
        ready_then_wait(args, "ray")
        splits = ds.streaming_split(WORLD, equal=True)
        got = ray.get([t.run.remote(s) for t, s in zip(trainers, splits)], timeout=600)
    finally:
        ray.shutdown()
    print(json.dumps({"trainers": got}), flush=True)


def role_serve(args):
    import croupier
    import torch
    from torch.utils.data import DataLoader
    data = JpegFolder(args.images_dir, args.uint8, with_transform=True)
    loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=args.workers,
                        drop_last=True)
    ready_then_wait(args, "serve")
    torch.set_num_threads(1)
    croupier.serve(loader, args.address, "bench", consumers=WORLD, epochs=1)


# --- The parent -----------------------------------------------------------------------------

def spawn(role, args, **extra):
    cmd = [sys.executable, __file__, "--role", role, "--images-dir", str(args.images_dir),
           "--workers", str(args.workers), "--go", str(extra.pop("go"))]
    if args.uint8:
        cmd.append("--uint8")
    for key, value in extra.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def finish(procs, timeout=600):
    out = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f"{p.args[3]} did not finish within {timeout} s")
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise SystemExit(f"{p.args[3]} failed ({p.returncode})")
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        out.append(lines[-1] if lines else {})
    return out


def trainers_figure(got, start):
    """A system's records/s from the start signal to the last trainer's end, and what the
    trainers saw: their records, the time from the signal to the last trainer's first batch,
    and the longest time from a trainer's last batch to the end of its loop."""
    if not all(g["records"] for g in got):
        raise SystemExit(f"a trainer received nothing: {got}")
    records = sum(g["records"] for g in got)
    extra = {"records": records, "per_trainer": [g["records"] for g in got],
             "first_batch_s": max(g["first"] for g in got) - start,
             "after_last_batch_s": max(g["end"] - g["last"] for g in got)}
    return records / (max(g["end"] for g in got) - start), extra


def run_system(system, args, work):
    import croupier
    go = work / f"go-{system}-{time.monotonic_ns()}"
    if system in ("dataloader", "tfshard", "grain", "spdl"):
        role = {"dataloader": "dataloader", "tfshard": "tf_shard", "grain": "grain",
                "spdl": "spdl"}[system]
        trainers = [spawn(role, args, go=go, rank=r, loader_workers=max(1, args.workers // WORLD),
                          grain_threads=args.grain_threads, spdl_threads=args.spdl_threads)
                    for r in range(WORLD)]
        wait_ready(go, trainers)
        time.sleep(3.0)  # imports and set-up, before the start
        start = time.time()
        go.touch()
        return trainers_figure(finish(trainers), start)
    if system == "tfservice":
        server = spawn("tf_service", args, go=go, service_workers=args.service_workers)
        address = pathlib.Path(f"{go}.address")
        deadline = time.monotonic() + 120
        while not address.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise SystemExit("the tf.data service did not start")
            time.sleep(0.05)
        trainers = [spawn("tf_service_trainer", args, go=go, rank=r, address=address.read_text(),
                          service_compression=args.service_compression)
                    for r in range(WORLD)]
        wait_ready(go, [server, *trainers])
        time.sleep(3.0)
        start = time.time()
        go.touch()
        try:
            got = finish(trainers)
        finally:
            pathlib.Path(f"{go}.done").touch()
        rate, extra = trainers_figure(got, start)
        return rate, dict(extra, **finish([server])[0])
    if system == "ray":
        driver = spawn("ray", args, go=go)
        wait_ready(go, [driver], timeout=300)  # ray.init and the trainer actors, before the start
        time.sleep(3.0)
        start = time.time()
        go.touch()
        return trainers_figure(finish([driver])[0]["trainers"], start)
    # A new work directory every run: a dispatcher replaying an earlier run's journal would hold
    # the job at its end already.
    cluster_dir = pathlib.Path(tempfile.mkdtemp(prefix=f"cluster-{system}-", dir=work))
    with croupier.local_cluster(producers=0, work_dir=cluster_dir) as cluster:
        role = {"croupier": "producer", "croupier_batch": "producer_batch", "serve": "serve",
                "tf": "tf_producer"}[system]
        producer = spawn(role, args, go=go, address=cluster.address)
        trainers = [spawn("consumer", args, go=go, address=cluster.address, rank=r)
                    for r in range(WORLD)]
        wait_ready(go, [producer, *trainers])
        time.sleep(3.0)
        start = time.time()
        go.touch()
        got = finish(trainers)
        if not all(g.get("records") for g in got):
            producer.kill()
            raise SystemExit(f"{system}: a trainer received nothing: {got}")
        rate, extra = trainers_figure(got, start)
        extra["bytes_per_record"] = sum(g["bytes"] for g in got) / extra["records"]
        made = finish([producer])[0]
        extra.update(made)
        return rate, extra


def alone_cpu_per_record(args):
    """The decode and transform alone, in a loop in this process: CPU seconds per record."""
    data = JpegFolder(args.images_dir)
    n = min(len(data), 1024)
    start = time.process_time()
    for i in range(n):
        transform(data[i], np.random.default_rng([1, 0, i]), args.uint8)
    return (time.process_time() - start) / n


def emit(**fields):
    print(json.dumps({"bench": "map", **fields}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--uint8", action="store_true")
    parser.add_argument("--systems",
                        default="croupier,croupier_batch,dataloader,serve,grain,ray,spdl")
    parser.add_argument("--quick", action="store_true", help="512 images, 1 round")
    parser.add_argument("--role")
    parser.add_argument("--images-dir")
    parser.add_argument("--go")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--address")
    parser.add_argument("--loader-workers", type=int, default=1)
    parser.add_argument("--grain-threads", type=int, default=GRAIN_THREADS,
                        help="grain: ReadOptions(num_threads) in each worker process")
    parser.add_argument("--spdl-threads", type=int, default=SPDL_THREADS,
                        help="spdl: the decode-and-transform stage's concurrent calls (and the "
                             "pipeline's threads) in each trainer")
    parser.add_argument("--service-workers", type=int, default=1,
                        help="tfservice: tf.data service workers (in the dispatcher's process)")
    parser.add_argument("--service-compression", choices=("AUTO", "none"), default="AUTO",
                        help="tfservice: distribute(compression=...) (AUTO: TensorFlow's default)")
    args = parser.parse_args()
    if args.role:
        {"dataloader": role_dataloader, "consumer": role_consumer, "producer": role_producer,
         "producer_batch": lambda a: role_producer(a, vectorised=True),
         "serve": role_serve, "tf_producer": role_tf_producer, "tf_shard": role_tf_shard,
         "tf_service": role_tf_service, "tf_service_trainer": role_tf_service_trainer,
         "grain": role_grain, "ray": role_ray, "spdl": role_spdl}[args.role](args)
        return
    if args.quick:
        args.images, args.rounds = 512, 1
    systems = []
    for system in args.systems.split(","):
        if system not in SYSTEMS:
            parser.error(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
        missing = [m for m in SYSTEMS[system] if importlib.util.find_spec(m) is None]
        if missing:  # the suite goes on without it, saying so
            emit(system=system, records_per_s=None, note=f"not measured: {missing[0]} is not "
                 f"installed (scripts/requirements-dev.txt pins it)")
        else:
            systems.append(system)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        args.images_dir = work / "images"
        args.images_dir.mkdir()
        write_images(args.images_dir, args.images)
        samples = {s: [] for s in systems}
        extras = {}
        for round_ in range(args.rounds):
            for system in (systems if round_ % 2 == 0 else systems[::-1]):
                rate, extra = run_system(system, args, work)
                samples[system].append(rate)
                extras.setdefault(system, []).append(extra)
        alone = alone_cpu_per_record(args) if "croupier" in systems else None
    rates = {s: float(np.median(v)) for s, v in samples.items()}
    kind = "uint8" if args.uint8 else "float32"
    for system, rate in rates.items():
        timing = {}
        for key in ("first_batch_s", "after_last_batch_s"):
            seen = [e[key] for e in extras[system] if key in e]
            if seen:
                timing[key] = seen
        emit(system=system, records_per_s=rate, samples=samples[system],
             setup=f"{args.images} JPEGs {SIZE}x{SIZE} -> crop {CROP} + flip -> {kind}, "
                   f"batches of {BATCH}, {WORLD} trainers, {args.workers} workers"
                   + (f", {args.grain_threads} Grain threads per worker" if system == "grain"
                      else "")
                   + (f", {args.spdl_threads} SPDL threads per trainer" if system == "spdl"
                      else "")
                   + (f", {args.service_workers} tf.data service worker(s)"
                      if system == "tfservice" else ""),
             **timing)
    if "croupier" in rates:
        cr = rates["croupier"]
        for base, goal in (("dataloader", 1.0), ("serve", 1.0), ("grain", 1.0), ("ray", 2.0),
                           ("spdl", 1.0)):
            if base in rates:
                emit(case=f"map job ({kind}) vs {base}", unit="records/s", value=cr,
                     baseline=base, baseline_value=rates[base], ratio=cr / rates[base],
                     goal=f">= {goal}", met=cr / rates[base] >= goal)
    if "croupier_batch" in rates:
        for base in ("croupier", "dataloader"):
            if base in rates:
                ratio = rates["croupier_batch"] / rates[base]
                emit(case=f"map job with batch_transform ({kind}) vs {base}", unit="records/s",
                     value=rates["croupier_batch"], baseline=base, baseline_value=rates[base],
                     ratio=ratio, goal=">= 1.0", met=ratio >= 1.0)
    if "croupier" in rates:
        runs = [e for e in extras["croupier"] if "cpu" in e]
        per_record = float(np.median([e["cpu"] / e["records"] for e in runs]))
        emit(case=f"producer CPU per record ({kind})", unit="ms CPU/record",
             value=per_record * 1e3, baseline="the transform alone in a loop",
             baseline_value=alone * 1e3, ratio=per_record / alone, goal="<= 1.15",
             met=per_record / alone <= 1.15,
             note=f"{extras['croupier'][0]['bytes_per_record']:.0f} bytes/record on the wire; "
                  f"of the CPU, the worker processes "
                  f"{np.median([e['workers_cpu'] / e['records'] for e in runs]) * 1e3:.3f} ms/record, "
                  f"the producer process "
                  f"{np.median([e['parent_cpu'] / e['records'] for e in runs]) * 1e3:.3f} ms/record")
    if "tf" in rates:
        tf_rate = rates["tf"]
        runs = [e for e in extras["tf"] if "cpu" in e]
        cpu = float(np.median([e["cpu"] / e["records"] for e in runs])) * 1e3 if runs else None
        for base, what, goal in (("tfshard", "tf.data on each trainer's shard", 0.95),
                                 ("tfservice", "tf.data service", 3.0)):
            if base not in rates:
                continue
            note = f"producer CPU {cpu:.3f} ms/record" if cpu is not None else ""
            served = [e for e in extras[base] if "cpu" in e]
            if served:
                count = served[0]["workers"]
                note += (f"; the service's process (dispatcher and {count} "
                         f"worker{'s' if count > 1 else ''}) CPU "
                         f"{np.median([e['cpu'] / e['records'] for e in served]) * 1e3:.3f} "
                         f"ms/record; records per trainer "
                         f"{[e['per_trainer'] for e in served]}")
            emit(case=f"map job with tf_transform ({kind}) vs {what}", unit="records/s",
                 value=tf_rate, baseline=base, baseline_value=rates[base],
                 ratio=tf_rate / rates[base], goal=f">= {goal}",
                 met=tf_rate / rates[base] >= goal, note=note.lstrip("; "))


if __name__ == "__main__":
    main()
