#!/usr/bin/env python3
"""The record cache of a map job (croupier.produce(..., decode=fn, cache_bytes=N)) on the JPEG
pipeline of bench_map.py: --images JPEGs of 64x64 (made with PIL), read as bytes, decoded by
`decode` (PIL: the deterministic part, which the cache keeps), then cropped at random to 56x56,
flipped half the time and normalised to float32 (or, with --uint8, kept uint8) by `transform`
(the random part, which runs every epoch), over --epochs epochs (3), with and without the cache:

  pipeline   croupier.map.pipeline.Pipeline.make() in this process, every batch of each epoch's plan
             (batches of 32, 4 ranks): the pipeline alone, no service, no worker process;
  produce    croupier.produce() in one producer process with --workers worker processes (4)
             and a buffer of --buffer-bytes (8 MiB: it cannot work far into the next epoch), and
             4 croupier.Consumer processes reading every epoch: records/s of an epoch from the
             end of the one before (the start signal, for epoch 0: worker start-up included) to
             the last consumer's end of it.

Each figure is the median of --rounds rounds (2), the cases interleaved (the order reversed in
every other round). Epoch 0 with the cache reads, decodes and writes every record into the cache;
the epochs after it read the decoded records from /dev/shm instead, which is where it pays.

JSON lines on stdout: {"bench": "cache", "path", "cache", "epoch", "records_per_s", "samples"}
per case and epoch; {"bench": "cache", "case", "unit", "value", "baseline", "baseline_value",
"ratio", "goal", "met"} for each epoch with the cache against the same epoch without it (the
same run); {"bench": "cache", "path": "produce", "record_cache": {...}} the producer's counts.

usage: .venv/bin/python bench/bench_cache.py [--images 2048] [--epochs 3] [--workers 4]
       [--rounds 2] [--uint8] [--paths pipeline,produce] [--cache-bytes 1073741824]
       [--buffer-bytes 8388608]
"""
import argparse
import io
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
from bench_map import BATCH, WORLD, JpegBytes, transform, write_images  # noqa: E402


def decode(record):
    """The deterministic part: the JPEG bytes to a uint8 [64, 64, 3] array (as bench_map's
    JpegFolder does in __getitem__)."""
    from PIL import Image
    image = np.asarray(Image.open(io.BytesIO(record["image"])).convert("RGB"))
    return dict(record, image=image)


class RandomPart:
    """The random part: bench_map's crop, flip and normalise (a class, so that it is a function
    of (record, rng) whatever --uint8 says)."""

    def __init__(self, uint8):
        self.uint8 = uint8

    def __call__(self, record, rng):
        return transform(record, rng, self.uint8)


# --- In this process: the pipeline alone ------------------------------------------------------

def pipeline_epochs(args, cached):
    """Records/s of each epoch, making every batch of its plan with Pipeline.make()."""
    import croupier
    from croupier.map.pipeline import Pipeline
    source = JpegBytes(args.images_dir)
    rates = []
    with Pipeline(source, decode=decode, transform=RandomPart(args.uint8), seed=1,
                  cache_bytes=args.cache_bytes if cached else 0) as pipe:
        for epoch in range(args.epochs):
            plan = croupier.EpochPlan(len(source), BATCH, WORLD, seed=1, epoch=epoch)
            start = time.perf_counter()
            records = 0
            for g in range(plan.num_batches):
                records += pipe.make(epoch, g, plan.batch(g)).num_records
            rates.append(records / (time.perf_counter() - start))
    return rates


# --- Through the service: one producer, 4 consumers ------------------------------------------

def role_producer(args):
    import croupier
    source = JpegBytes(args.images_dir)
    wait_for(pathlib.Path(args.go))
    done = croupier.produce(source, args.address, "bench", batch_size=BATCH, consumers=WORLD,
                            epochs=args.epochs, seed=1, decode=decode,
                            transform=RandomPart(args.uint8), workers=args.workers,
                            features=args.features, buffer_bytes=args.buffer_bytes,
                            cache_bytes=args.cache_bytes if args.cached else 0)
    print(json.dumps({"record_cache": done["record_cache"]}), flush=True)


def role_consumer(args):
    import croupier
    feed = croupier.Consumer(args.address, "bench", args.rank, WORLD, timeout=120)
    wait_for(pathlib.Path(args.go))
    epochs = []
    for epoch in range(args.epochs):
        records = sum(batch.num_records for batch in feed.batches(epoch))
        epochs.append({"records": records, "end": time.time()})
    feed.close()
    print(json.dumps({"epochs": epochs}), flush=True)


def wait_for(go):
    while not go.exists():
        time.sleep(0.002)


def spawn(role, args, go, **extra):
    cmd = [sys.executable, __file__, "--role", role, "--images-dir", str(args.images_dir),
           "--workers", str(args.workers), "--epochs", str(args.epochs), "--go", str(go),
           "--cache-bytes", str(args.cache_bytes), "--buffer-bytes", str(args.buffer_bytes),
           "--features", args.features]
    if args.uint8:
        cmd.append("--uint8")
    for key, value in extra.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def last_line(proc, timeout):
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SystemExit(f"{proc.args[3]} did not finish within {timeout} s") from None
    if proc.returncode != 0:
        raise SystemExit(f"{proc.args[3]} failed ({proc.returncode})")
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return lines[-1] if lines else {}


def produce_epochs(args, cached, work):
    """Records/s of each epoch through produce() and 4 consumer processes, and the producer's
    record cache counts."""
    import croupier
    go = work / f"go-{time.monotonic_ns()}"
    cluster_dir = pathlib.Path(tempfile.mkdtemp(prefix="cluster-", dir=work))
    with croupier.local_cluster(producers=0, work_dir=cluster_dir) as cluster:
        # The job exists before the consumers start, so that they are there when the producer
        # begins (a consumer that finds no job polls again a second later); produce() then
        # finds it (the same spec) and makes no batch ahead of the start to read the features.
        croupier.create_job(cluster.address, "bench", [], args.features, BATCH, consumers=WORLD,
                            seed=1, epochs=args.epochs, source="map", num_records=args.images,
                            exist_ok=True)
        producer = spawn("producer", args, go, address=cluster.address, cached=int(cached))
        consumers = [spawn("consumer", args, go, address=cluster.address, rank=r)
                     for r in range(WORLD)]
        time.sleep(3.0)  # imports and set-up, before the start
        start = time.time()
        go.touch()
        got = [last_line(c, 600)["epochs"] for c in consumers]
        counts = last_line(producer, 120).get("record_cache")
    rates, before = [], start
    for epoch in range(args.epochs):
        end = max(g[epoch]["end"] for g in got)
        rates.append(sum(g[epoch]["records"] for g in got) / (end - before))
        before = end
    return rates, counts


# --- The parent -------------------------------------------------------------------------------

def features(args):
    """The job's feature spec, read off one batch of the pipeline."""
    import croupier
    from croupier.map.pipeline import Pipeline
    from croupier.columns import features_of
    plan = croupier.EpochPlan(args.images, BATCH, WORLD, seed=1, epoch=0)
    pipe = Pipeline(JpegBytes(args.images_dir), decode=decode, transform=RandomPart(args.uint8))
    return features_of(pipe.make(0, 0, plan.batch(0)).to_dict())


def emit(**fields):
    print(json.dumps({"bench": "cache", **fields}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--uint8", action="store_true")
    parser.add_argument("--paths", default="pipeline,produce")
    parser.add_argument("--cache-bytes", type=int, default=1 << 30)
    parser.add_argument("--buffer-bytes", type=int, default=8 << 20,
                        help="the producer's buffer: small, so that it cannot make the next "
                             "epoch's batches far ahead of the consumers")
    parser.add_argument("--features")
    parser.add_argument("--role")
    parser.add_argument("--images-dir")
    parser.add_argument("--go")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--address")
    parser.add_argument("--cached", type=int, default=0)
    args = parser.parse_args()
    if args.role:
        {"producer": role_producer, "consumer": role_consumer}[args.role](args)
        return
    paths = args.paths.split(",")
    cases = [(path, cached) for path in paths for cached in (False, True)]
    samples = {case: [] for case in cases}
    counts = []
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        args.images_dir = work / "images"
        args.images_dir.mkdir()
        write_images(args.images_dir, args.images)
        args.features = features(args)
        for round_ in range(args.rounds):
            for path, cached in (cases if round_ % 2 == 0 else cases[::-1]):
                if path == "pipeline":
                    rates = pipeline_epochs(args, cached)
                else:
                    rates, made = produce_epochs(args, cached, work)
                    if cached:
                        counts.append(made)
                samples[(path, cached)].append(rates)
    kind = "uint8" if args.uint8 else "float32"
    median = {case: [float(np.median([s[e] for s in samples[case]])) for e in range(args.epochs)]
              for case in cases}
    for (path, cached), rates in median.items():
        for epoch, rate in enumerate(rates):
            emit(path=path, cache=cached, epoch=epoch, records_per_s=rate,
                 samples=[s[epoch] for s in samples[(path, cached)]],
                 setup=f"{args.images} JPEGs -> decode (cached) -> crop + flip -> {kind}, "
                       f"batches of {BATCH}, {WORLD} ranks, {args.workers} workers")
    for path in paths:
        for epoch in range(args.epochs):
            with_cache, without = median[(path, True)][epoch], median[(path, False)][epoch]
            later = epoch > 0
            emit(case=f"{path}, epoch {epoch} ({kind}): with the record cache vs without",
                 unit="records/s", value=with_cache, baseline="no cache", baseline_value=without,
                 ratio=with_cache / without, goal=">= 1.0" if later else "none",
                 met=with_cache >= without if later else None)
    for made in counts:
        emit(path="produce", record_cache=made)


if __name__ == "__main__":
    main()
