"""TensorFlow consumers, records/s with N consumer processes (docs/tensorflow.md):

  op         croupier.tf.dataset: the native dataset op reading its rank of a croupier job
  generator  croupier.tf.generator_dataset: tf.data.Dataset.from_generator over croupier.Consumer
  consumer   croupier.Consumer.batches() without TensorFlow: the ceiling of the two above
  tfrecord   each worker reads its shard of the same files itself:
             TFRecordDataset (interleaved over its files) -> batch -> parse_example -> prefetch

Every mode reads the same TFRecord files (written by `croupier synth`: id:int64, label:int64,
image:bytes) with the same batch size, for one epoch, in N processes that start together after
importing TensorFlow, building their datasets and taking their first batch (untimed). The modes run in turn for --rounds rounds (each
round starting with another mode, as the first run also warms the page cache and the producers);
the figure of a mode is its best round. The first batch of each process is not counted. Each
line also gives the CPU time the 4 consumer processes spent per record (what reading costs the
trainer, apart from the producers). Each process touches every batch (a reduce_sum
of the labels and the image byte lengths); the figure is all records / (last end - first start).

    .venv/bin/python bench/tf_bench.py [--records 40000] [--image-bytes 1024] [--consumers 4]
                                       [--rounds 2]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

_WORKER = r"""
import json, os, sys, time
import croupier
import tensorflow as tf
import croupier.tf as ctf
mode, address, rank, world, files, batch, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5].split(","), int(sys.argv[6]), sys.argv[7]
feed = None
if mode == "op":
    ds = ctf.dataset(address, "bench", rank, world, epoch=0, resume=False)
elif mode == "consumer":  # no TensorFlow in the loop: the croupier data path's own ceiling
    feed = croupier.Consumer(address, "bench", rank, world, resume=False)
    ds = feed.batches(0)
elif mode == "generator":
    feed = croupier.Consumer(address, "bench", rank, world, resume=False)
    ds = ctf.generator_dataset(feed, 0)
else:
    spec = {"id": tf.io.FixedLenFeature([], tf.int64), "label": tf.io.FixedLenFeature([], tf.int64),
            "image": tf.io.FixedLenFeature([], tf.string)}
    ds = (tf.data.Dataset.from_tensor_slices(files).shard(world, rank)
          .interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(batch)
          .map(lambda r: tf.io.parse_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))

@tf.function
def touch(b):
    return tf.reduce_sum(b["label"]) + tf.cast(tf.reduce_sum(tf.strings.length(b["image"])), tf.int64)

# The first batch comes before the clock starts: the figure is the steady rate, not the start of
# an epoch (about a second here for the croupier modes: registering the epoch start and the
# producers' first batches).
it = iter(ds)
first = next(it)
if mode != "consumer":
    touch(first)
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
start = time.time()
cpu = time.process_time()
records = 0
for b in it:
    if mode == "consumer":
        records += b.num_records
        continue
    touch(b)
    records += int(b["label"].shape[0])
end = time.time()
cpu = time.process_time() - cpu
print(json.dumps({"records": records, "start": start, "end": end, "cpu": cpu}), flush=True)
if feed is not None:
    feed.close()
"""


def run_mode(mode, cluster, files, args, work):
    import croupier
    job_name = "bench"
    if mode != "tfrecord":
        croupier.create_job(cluster.address, job_name, files,
                            "id:int64,label:int64,image:bytes", args.batch_size,
                            consumers=args.consumers, seed=1, epochs=0, exist_ok=True)
    go = work / f"go-{mode}"
    script = work / "worker.py"
    script.write_text(_WORKER)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT / "python"))
    procs = [subprocess.Popen([sys.executable, str(script), mode, cluster.address, str(r),
                               str(args.consumers), ",".join(files), str(args.batch_size), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(args.consumers)]
    try:
        for p in procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"{mode} worker: {line}{p.stderr.read()[-3000:]}")
        time.sleep(1.0)  # let prefetching settle the same way for every mode
        go.write_text("go")
        results = []
        for p in procs:
            out, err = p.communicate(timeout=args.timeout)
            if p.returncode != 0 or not out.strip():
                raise RuntimeError(f"{mode} worker failed ({p.returncode}): {out[-500:]}"
                                   f"{err[-3000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    records = sum(r["records"] for r in results)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return records, seconds, sum(r["cpu"] for r in results)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=40000)
    parser.add_argument("--image-bytes", type=int, default=1024)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--modes", default="op,generator,tfrecord,consumer")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()

    import croupier
    with tempfile.TemporaryDirectory(prefix="croupier-tfbench-") as tmp:
        work = pathlib.Path(tmp)
        data = work / "data"
        subprocess.run([croupier.croupier_binary(), "synth", "--out", str(data), "--files",
                        str(args.files), "--records", str(args.records), "--image-bytes",
                        str(args.image_bytes), "--quiet"], check=True)
        files = sorted(str(p) for p in data.glob("*.tfrecord"))
        print(f"{args.records} records of {args.image_bytes}-byte images in {len(files)} files, "
              f"batch {args.batch_size}, {args.consumers} consumer processes, "
              f"{args.producers} producers, {os.cpu_count()} cores")
        figures = {}
        with croupier.local_cluster(producers=args.producers, work_dir=work / "cluster") as cluster:
            for round_ in range(args.rounds):  # the modes in turn, each round in another order
                modes = args.modes.split(",")
                modes = modes[round_ % len(modes):] + modes[:round_ % len(modes)]
                for mode in modes:
                    records, seconds, cpu = run_mode(mode, cluster, files, args, work)
                    figures[mode] = max(figures.get(mode, 0), records / seconds)
                    print(f"round {round_ + 1} {mode:10s} {records:8d} records in {seconds:7.2f} s:"
                          f" {records / seconds:10.0f} records/s; the consumer processes' CPU:"
                          f" {cpu / records * 1e6:6.2f} us per record", flush=True)
        print("best of each: " + ", ".join(f"{m} {v:.0f}" for m, v in figures.items()) +
              " records/s")
        if "op" in figures:
            for other in ("generator", "tfrecord"):
                if other in figures:
                    print(f"op / {other}: {figures['op'] / figures[other]:.2f}x")


if __name__ == "__main__":
    main()
