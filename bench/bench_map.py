#!/usr/bin/env python3
"""A user's own pipeline: JPEG images (made here with PIL) -> decode -> random crop and flip ->
normalise to float32 (or, with --uint8, kept uint8) -> batches of 32 -> 4 trainer processes, in
records/s, for each system with the same total number of worker processes (--workers, 4):

  croupier     croupier.produce(dataset, transform=...) in one producer process with --workers
               worker processes (a map job: global shuffle, every guarantee of a TFRecord job);
               4 croupier.Consumer processes;
  dataloader   what a user writes instead: 4 trainer processes, each a torch DataLoader over the
               same map-style dataset with a DistributedSampler (shuffle on) and --workers / 4
               workers;
  serve        croupier.serve(DataLoader(dataset, shuffle=True, num_workers=--workers)) in one
               process (a stream: no failover, no exact resume), 4 croupier.Consumer processes.

and the TensorFlow pair (--systems tf,tfshard), the same images and transform as a tf.data
pipeline (tf.io.decode_jpeg, tf.image.stateless_random_crop and _flip_left_right, normalise):

  tf           croupier.produce(JPEG bytes, tf_transform=pipeline) in one producer process (no
               worker processes: TensorFlow's parallel map in the producer), 4 croupier.Consumer
               processes;
  tfshard      what a TensorFlow user writes instead: 4 trainer processes, each running the
               pipeline on its own shard (file list shuffled with one seed, ds.shard(4, rank),
               read_file, map with AUTOTUNE, batch, prefetch).

Every process imports and builds what it needs, then waits for one start signal; a system's
figure is the records its 4 trainers received over the time from that signal to the last
trainer's end (worker start-up included, for every system). The systems run in --rounds rounds
(2), in the order given and then reversed; a figure is the median of its rounds.

Also: the croupier producer's CPU time (its own and its workers') per record, against the same
decode and transform run alone in a loop in one process, and the bytes per record on the wire.

JSON lines on stdout: {"bench": "map", "case", "unit", "value", "baseline", "baseline_value",
"ratio", "goal", "met", "note"}, and {"bench": "map", "system", "records_per_s", "samples"}.

usage: .venv/bin/python bench/bench_map.py [--images 2048] [--workers 4] [--rounds 2] [--uint8]
       [--systems croupier,dataloader,serve | tf,tfshard]
"""
import argparse
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
        from PIL import Image
        image = np.asarray(Image.open(io.BytesIO(self.paths[i].read_bytes())).convert("RGB"))
        record = {"image": image, "label": np.int64(i % 10), "id": np.int64(i)}
        if self.with_transform:
            record = transform(record, np.random.default_rng(), self.uint8)
        return record


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
    """Says this process is set up (TensorFlow imported, its pipeline built), then waits for the
    start signal: TensorFlow's import takes seconds of CPU in each process."""
    pathlib.Path(f"{args.go}.ready-{name}").touch()
    wait_for(pathlib.Path(args.go))


def wait_ready(go, count, timeout=120):
    deadline = time.monotonic() + timeout
    while len(list(go.parent.glob(go.name + ".ready-*"))) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{count} processes were not ready within {timeout} s")
        time.sleep(0.05)


def role_dataloader(args):
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    data = JpegFolder(args.images_dir, args.uint8, with_transform=True)
    sampler = DistributedSampler(data, num_replicas=WORLD, rank=args.rank, shuffle=True, seed=1,
                                 drop_last=True)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler, num_workers=args.loader_workers,
                        drop_last=True)
    wait_for(pathlib.Path(args.go))
    records = 0
    for batch in loader:
        records += len(batch["id"])
    torch.set_num_threads(1)
    print(json.dumps({"records": records, "end": time.time()}), flush=True)


def role_consumer(args):
    import croupier
    feed = croupier.Consumer(args.address, "bench", args.rank, WORLD, timeout=120)
    wait_for(pathlib.Path(args.go))
    records, nbytes = 0, 0
    for batch in feed.batches(0):
        records += batch.num_records
        nbytes += batch.nbytes
    if records == 0:
        print(f"rank {args.rank}: no batch; job {feed.job}, position {feed.state_dict()}",
              file=sys.stderr, flush=True)
    print(json.dumps({"records": records, "bytes": nbytes, "end": time.time()}), flush=True)
    feed.close()


def role_producer(args):
    import croupier
    data = JpegFolder(args.images_dir)
    uint8 = args.uint8
    wait_for(pathlib.Path(args.go))
    # From the start signal on (the interpreter's start-up and imports are not the producer's
    # work): this process's CPU time, and all of its worker processes' (forked after the signal,
    # and waited for when produce() returns).
    before = resource.getrusage(resource.RUSAGE_SELF)
    croupier.produce(data, args.address, "bench", batch_size=BATCH, consumers=WORLD, epochs=1,
                     seed=1, transform=lambda r, rng: transform(r, rng, uint8),
                     workers=args.workers)
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


def role_tf_shard(args):
    import tensorflow as tf
    paths = [str(p) for p in sorted(pathlib.Path(args.images_dir).glob("*.jpg"))]
    order = np.random.default_rng(1).permutation(len(paths))  # one seed: the same on every rank
    ids = tf.constant(order, tf.int64)
    uint8 = args.uint8

    def load(i):
        record = {"image": tf.io.read_file(tf.gather(paths, i)), "label": i % 10, "id": i,
                  "croupier_seed": tf.stack([tf.constant(1, tf.int64), i])}
        return tf_augment(record, uint8)
    ds = (tf.data.Dataset.from_tensor_slices(ids).shard(WORLD, args.rank)
          .map(load, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(BATCH, drop_remainder=True).prefetch(2))
    ready_then_wait(args, f"rank{args.rank}")
    records = 0
    for batch in ds:
        records += int(batch["id"].shape[0])
    print(json.dumps({"records": records, "end": time.time()}), flush=True)


def role_serve(args):
    import croupier
    import torch
    from torch.utils.data import DataLoader
    data = JpegFolder(args.images_dir, args.uint8, with_transform=True)
    loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=args.workers,
                        drop_last=True)
    wait_for(pathlib.Path(args.go))
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
            raise SystemExit(f"{p.args[3]} failed ({p.returncode})")
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        out.append(lines[-1] if lines else {})
    return out


def run_system(system, args, work):
    import croupier
    go = work / f"go-{system}-{time.monotonic_ns()}"
    if system in ("dataloader", "tfshard"):
        trainers = [spawn("dataloader" if system == "dataloader" else "tf_shard", args, go=go,
                          rank=r, loader_workers=max(1, args.workers // WORLD))
                    for r in range(WORLD)]
        if system == "tfshard":
            wait_ready(go, WORLD)
        time.sleep(3.0)  # imports and set-up, before the start
        start = time.time()
        go.touch()
        got = finish(trainers)
        return sum(g["records"] for g in got) / (max(g["end"] for g in got) - start), {}
    # A new work directory every run: a dispatcher replaying an earlier run's journal would hold
    # the job at its end already.
    cluster_dir = pathlib.Path(tempfile.mkdtemp(prefix=f"cluster-{system}-", dir=work))
    with croupier.local_cluster(producers=0, work_dir=cluster_dir) as cluster:
        role = {"croupier": "producer", "serve": "serve", "tf": "tf_producer"}[system]
        producer = spawn(role, args, go=go, address=cluster.address)
        trainers = [spawn("consumer", args, go=go, address=cluster.address, rank=r)
                    for r in range(WORLD)]
        if system == "tf":
            wait_ready(go, 1)
        time.sleep(3.0)
        start = time.time()
        go.touch()
        got = finish(trainers)
        if not all(g.get("records") for g in got):
            producer.kill()
            raise SystemExit(f"{system}: a trainer received nothing: {got}")
        rate = sum(g["records"] for g in got) / (max(g["end"] for g in got) - start)
        extra = {"bytes_per_record": sum(g["bytes"] for g in got) / sum(g["records"] for g in got),
                 "records": sum(g["records"] for g in got)}
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
    parser.add_argument("--systems", default="croupier,dataloader,serve")
    parser.add_argument("--quick", action="store_true", help="512 images, 1 round")
    parser.add_argument("--role")
    parser.add_argument("--images-dir")
    parser.add_argument("--go")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--address")
    parser.add_argument("--loader-workers", type=int, default=1)
    args = parser.parse_args()
    if args.role:
        {"dataloader": role_dataloader, "consumer": role_consumer, "producer": role_producer,
         "serve": role_serve, "tf_producer": role_tf_producer,
         "tf_shard": role_tf_shard}[args.role](args)
        return
    if args.quick:
        args.images, args.rounds = 512, 1
    systems = args.systems.split(",")
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
        emit(system=system, records_per_s=rate, samples=samples[system],
             setup=f"{args.images} JPEGs {SIZE}x{SIZE} -> crop {CROP} + flip -> {kind}, "
                   f"batches of {BATCH}, {WORLD} trainers, {args.workers} workers")
    if "croupier" in rates:
        cr = rates["croupier"]
        for base, goal in (("dataloader", 1.0), ("serve", 1.0)):
            if base in rates:
                emit(case=f"map job ({kind}) vs {base}", unit="records/s", value=cr,
                     baseline=base, baseline_value=rates[base], ratio=cr / rates[base],
                     goal=f">= {goal}", met=cr / rates[base] >= goal)
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
    if "tf" in rates and "tfshard" in rates:
        tf_rate = rates["tf"]
        runs = [e for e in extras["tf"] if "cpu" in e]
        cpu = float(np.median([e["cpu"] / e["records"] for e in runs])) * 1e3 if runs else None
        emit(case=f"map job with tf_transform ({kind}) vs tf.data on each trainer's shard",
             unit="records/s", value=tf_rate, baseline="tfshard",
             baseline_value=rates["tfshard"], ratio=tf_rate / rates["tfshard"], goal=">= 1.0",
             met=tf_rate / rates["tfshard"] >= 1.0,
             note=f"producer CPU {cpu:.3f} ms/record" if cpu is not None else "")


if __name__ == "__main__":
    main()
