#!/usr/bin/env python3
"""End to end: TFRecord files in the page cache -> tf.train.Example decode -> batches of 256 with
a global shuffle -> 4 Python consumer processes, in records/s, for every system on the same files:

  raw read         one process reading the files' bytes (the ceiling: no decode, no delivery);
  croupier         a dispatcher and 2 producers (croupier.local_cluster) dealing the job
                   (global shuffle, guarantees G1-G3 on) to 4 croupier.Consumer processes, each
                   iterating epoch(0, bytes_as="buffer"): dicts of numpy views, the image column
                   a croupier.BytesColumn (one values buffer plus offsets, no Python object per
                   image); "croupier (bytes as lists)" is the same with epoch(0), the image
                   column a list of 256 Python bytes; "croupier (--rounds-per-task 16)" is
                   the first with tasks of 16 rounds (64 batches) instead of the dispatcher's
                   automatic choice (12 rounds for this job; bench/notes.md);
  pytorch          the "every rank loads and shards" pipeline a user writes instead: 4 rank
                   processes, each a DataLoader (num_workers=0: the machine has 2 cores) over a
                   map-style dataset with a DistributedSampler (shuffle on), reading and decoding
                   its share with the pure-Python TFRecord/Example reader below;
  tf.data service  (full run) a dispatcher and 2 workers reading TFRecordDataset -> parse ->
                   shuffle -> batch(256), distributed_epoch, one shared job_name, 4 consumer
                   processes;
  ray data         (full run) read_binary_files of the same files, flat_map to records, Example
                   decode, random_shuffle, streaming_split(4, equal=True) to 4 consumer tasks
                   iterating iter_batches(256).
and croupier-python-small: one Python consumer iterating batches of 1 small record (the
batches/s a Python loop can take).

Each system's consumers connect, wait on one barrier, then iterate one epoch; its figure is the
records delivered over the time from the barrier to the last consumer's end. Every system delivers
the same content per batch: 256 ids and labels (int64) and the 256 images' bytes, each in its own
container (croupier: numpy views and a BytesColumn or list; PyTorch: tensors and a list of bytes;
tf.data: tf.int64 and tf.string tensors; Ray: numpy arrays, the images an object array of bytes);
every consumer checks its first batch (256 records, 1,024-byte images). The machine's load moves
the figures, so the systems run in --rounds rounds (3; 1 with --quick), one sample of each system
per round, in the order given and then reversed, alternately; a system's figure is its median
sample, and its note gives the range.
JSON lines on stdout:
  {"bench": "e2e", "system", "setup", "records_per_s", "bytes_per_s", "batches_per_s", "note",
   "samples"}
bytes_per_s counts the TFRecord file bytes the records came from; samples are every round's
records/s.

usage: .venv/bin/python bench/bench_e2e.py [--quick] [--rounds K] [--systems raw,croupier,...]
"""
import argparse
import json
import multiprocessing as mp
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

FEATURES = "id:int64,label:int64,image:bytes"
BATCH = 256
WORLD = 4
IMAGE_BYTES = 1024


def check_first(ids, labels, images):
    """Every system's consumer checks its first batch: the same content everywhere."""
    if not (len(ids) == len(labels) == len(images) == BATCH and len(images[0]) == IMAGE_BYTES):
        raise RuntimeError(f"a batch of {len(ids)} ids, {len(labels)} labels, {len(images)} "
                           f"images of {len(images[0])} bytes; expected {BATCH} of each and "
                           f"{IMAGE_BYTES}-byte images")


def emit(**fields):
    print(json.dumps({"bench": "e2e", **fields}), flush=True)


# --- a pure-Python TFRecord and tf.train.Example reader (the baseline's; written here) --------

def tfrecord_offsets(path):
    """[(offset of the data, length)] of every record of a TFRecord file. CRCs are not checked
    (a pure-Python CRC-32C would dominate; croupier checks both)."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    pos, n = 0, len(data)
    while pos < n:
        (length,) = struct.unpack_from("<Q", data, pos)
        out.append((pos + 12, length))
        pos += 12 + length + 4
    return out


def _varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf, pos, end):
    """(field number, wire type, value or (start, end)) of a protobuf message."""
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _varint(buf, pos)
            yield field, wire, (pos, pos + length)
            pos += length
        elif wire == 0:
            value, pos = _varint(buf, pos)
            yield field, wire, value
        elif wire == 5:
            yield field, wire, buf[pos:pos + 4]
            pos += 4
        elif wire == 1:
            yield field, wire, buf[pos:pos + 8]
            pos += 8
        else:
            raise ValueError(f"wire type {wire} at byte {pos}")


def parse_example(buf):
    """tf.train.Example -> {name: list of int | float | bytes}."""
    out = {}
    for field, _, (s, e) in _fields(buf, 0, len(buf)):  # Example.features
        if field != 1:
            continue
        for f2, _, (s2, e2) in _fields(buf, s, e):  # Features.feature map entries
            if f2 != 1:
                continue
            name, values = None, []
            for f3, _, v3 in _fields(buf, s2, e2):
                if f3 == 1:
                    name = bytes(buf[v3[0]:v3[1]]).decode()
                elif f3 == 2:  # Feature
                    for kind, _, (s4, e4) in _fields(buf, v3[0], v3[1]):
                        for f5, w5, v5 in _fields(buf, s4, e4):
                            if kind == 1:  # BytesList
                                values.append(bytes(buf[v5[0]:v5[1]]))
                            elif kind == 3:  # Int64List, packed or not
                                if w5 == 2:
                                    p = v5[0]
                                    while p < v5[1]:
                                        x, p = _varint(buf, p)
                                        values.append(x - (1 << 64) if x >= 1 << 63 else x)
                                else:
                                    values.append(v5 - (1 << 64) if v5 >= 1 << 63 else v5)
                            elif kind == 2:  # FloatList, packed
                                values.extend(struct.unpack(f"<{(v5[1] - v5[0]) // 4}f",
                                                            buf[v5[0]:v5[1]]))
            out[name] = values
    return out


class TFRecordExamples:
    """A map-style dataset of the records of some TFRecord files, decoded with parse_example."""

    def __init__(self, files):
        self.index = []
        self.data = []
        for i, path in enumerate(files):
            self.index += [(i, off, n) for off, n in tfrecord_offsets(path)]
            self.data.append(None)
        self.files = files

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        f, off, n = self.index[i]
        if self.data[f] is None:
            with open(self.files[f], "rb") as fh:
                self.data[f] = memoryview(fh.read())  # the page cache, as read() would
        ex = parse_example(self.data[f][off:off + n])
        return ex["id"][0], ex["label"][0], ex["image"][0]


# --- consumers, one process each ---------------------------------------------------------------

def croupier_rank(address, job, bytes_as, rank, barrier, queue):
    import croupier
    c = croupier.Consumer(address, job, rank, WORLD, timeout=120)
    barrier.wait()
    t0, n, batches = time.time(), 0, 0
    for batch in c.epoch(0, bytes_as=bytes_as):
        if batches == 0:
            check_first(batch["id"], batch["label"], batch["image"])
        n += len(batch["id"])
        batches += 1
    queue.put((n, batches, t0, time.time()))
    c.close()


def torch_rank(files, rank, barrier, queue):
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    ds = TFRecordExamples(files)
    sampler = DistributedSampler(ds, num_replicas=WORLD, rank=rank, shuffle=True, seed=1,
                                 drop_last=True)

    def collate(items):
        ids, labels, images = zip(*items)
        return {"id": torch.tensor(ids), "label": torch.tensor(labels), "image": list(images)}

    loader = DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=0, collate_fn=collate,
                        drop_last=True)
    sampler.set_epoch(0)
    barrier.wait()
    t0, n, batches = time.time(), 0, 0
    for batch in loader:
        if batches == 0:
            check_first(batch["id"], batch["label"], batch["image"])
        n += len(batch["id"])
        batches += 1
    queue.put((n, batches, t0, time.time()))
    del np


def tfdata_rank(dispatcher, files, job_name, rank, barrier, queue):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    spec = {"id": tf.io.FixedLenFeature([], tf.int64),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "image": tf.io.FixedLenFeature([], tf.string)}
    ds = tf.data.TFRecordDataset([str(f) for f in files])
    ds = ds.shuffle(10000, seed=1).batch(BATCH, drop_remainder=True)
    ds = ds.map(lambda x: tf.io.parse_example(x, spec))
    ds = ds.apply(tf.data.experimental.service.distribute(
        processing_mode="distributed_epoch", service=dispatcher, job_name=job_name))
    it = iter(ds)
    barrier.wait()
    t0, n, batches = time.time(), 0, 0
    for batch in it:
        if batches == 0:
            check_first(batch["id"], batch["label"], batch["image"].numpy())
        n += int(batch["id"].shape[0])
        batches += 1
    queue.put((n, batches, t0, time.time()))


def tfdata_worker(dispatcher_address, ready):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    service = tf.data.experimental.service
    worker = service.WorkerServer(service.WorkerConfig(dispatcher_address=dispatcher_address))
    ready.set()
    worker.join()


def collect(procs, queue, n_consumers, timeout):
    import queue as queue_module
    got, deadline = [], time.monotonic() + timeout
    while len(got) < n_consumers:
        try:
            got.append(queue.get(timeout=1))
        except queue_module.Empty:
            failed = [p for p in procs if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(f"a consumer process failed ({[p.exitcode for p in failed]}) "
                                   f"or the run took over {timeout} s")
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()
    records = sum(g[0] for g in got)
    batches = sum(g[1] for g in got)
    start = min(g[2] for g in got)
    end = max(g[3] for g in got)
    return records, batches, end - start


def run_ranks(target, args_of_rank, timeout):
    # spawn: the parent holds gRPC channels and threads, which a fork would not carry over.
    return run_ranks_ctx(mp.get_context("spawn"), target, args_of_rank, timeout)


# --- the systems -------------------------------------------------------------------------------

def bench_raw(files, records, file_bytes):
    t0 = time.time()
    total = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while chunk := fh.read(1 << 20):
                total += len(chunk)
    dt = time.time() - t0
    return dict(system="raw read", setup="1 process, 1 MiB reads of the files",
                records_per_s=records / dt, bytes_per_s=total / dt, note="no decode, no delivery")


def bench_croupier(files, records, file_bytes, work, bytes_as="buffer", dispatcher_args=()):
    import croupier
    with croupier.local_cluster(producers=2, work_dir=work,
                                dispatcher_args=list(dispatcher_args)) as cluster:
        cluster.create_job("e2e", [str(f) for f in files], FEATURES, BATCH, consumers=WORLD,
                           seed=1, epochs=1, shuffle="global")
        n, batches, dt = run_ranks(croupier_rank, lambda r: (cluster.address, "e2e", bytes_as),
                                   300)
    lists = bytes_as == "list"
    call = "epoch(0)" if lists else 'epoch(0, bytes_as="buffer")'
    system = "croupier (bytes as lists)" if lists else "croupier"
    if dispatcher_args:
        system += " (" + " ".join(dispatcher_args) + ")"
    return dict(system=system,
                setup="dispatcher + 2 producers, global shuffle, 4 consumers, "
                f"CROUPIER_SHM={os.environ['CROUPIER_SHM']}, {call}"
                + "".join(" " + a for a in dispatcher_args),
                records_per_s=n / dt, bytes_per_s=file_bytes * n / records / dt,
                batches_per_s=batches / dt,
                note="G1-G3 on; images as " + ("256 Python bytes per batch" if lists else
                                                "a BytesColumn (values + offsets, no copy)"))


def synth_small(work, quick):
    import croupier
    data = work / "small"
    subprocess.run([croupier.croupier_binary(), "synth", "--out", str(data), "--files", "2",
                    "--records", str(20000 if quick else 100000), "--image-bytes", "8",
                    "--quiet"], check=True)
    return data


def bench_croupier_small(data, work, prefetch):
    import croupier
    # The dispatcher's automatic task size: 1,024 rounds for these one-record batches (with 4, a
    # task held 4 batches, and this case ran near 1,000 batches/s; bench/notes.md).
    with croupier.local_cluster(producers=1, work_dir=work) as cluster:
        cluster.create_job("small", str(data / "*.tfrecord"), "id:int64", 1, consumers=1,
                           seed=1, epochs=1, shuffle="none")
        # A window of 64 batches: the consumer library fetches small batches in groups of up to
        # half the window per request, and 64 measured best of 1-256 on 2026-11-23 (the
        # default 4 about 30% slower; bench/notes.md).
        c = croupier.Consumer(cluster.address, "small", 0, 1, prefetch=prefetch, timeout=120)
        it = c.batches(0)
        next(it)
        t0, n = time.time(), 1
        for _ in it:
            n += 1
        dt = time.time() - t0
        c.close()
    return dict(system="croupier-python-small", setup="1 producer, 1 Python consumer, batches of "
                f"1 record (id:int64), automatic task size, prefetch {prefetch}, "
                f"CROUPIER_SHM={os.environ['CROUPIER_SHM']}", batches_per_s=(n - 1) / dt,
                records_per_s=(n - 1) / dt, note="batches(0): Batch objects, no to_dict()")


def bench_torch(files, records, file_bytes):
    n, batches, dt = run_ranks(torch_rank, lambda r: ([str(f) for f in files],), 600)
    return dict(system="pytorch", setup="4 ranks: DataLoader + DistributedSampler, pure-Python "
                "reader", records_per_s=n / dt, bytes_per_s=file_bytes * n / records / dt,
                batches_per_s=batches / dt, note="no guarantee across ranks beyond the sampler's; "
                "images as 256 Python bytes per batch")


def bench_tfdata(files, records, file_bytes, round_):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    address = dispatcher.target.split("://")[1]
    ctx = mp.get_context("spawn")
    workers = []
    try:
        for _ in range(2):
            ready = ctx.Event()
            w = ctx.Process(target=tfdata_worker, args=(address, ready))
            w.start()
            ready.wait(120)
            workers.append(w)
        n, batches, dt = run_ranks_ctx(ctx, tfdata_rank,
                                       lambda r: (dispatcher.target, [str(f) for f in files],
                                                 f"bench-{round_}"), 600)
    finally:
        for w in workers:
            w.kill()
            w.join()
    return dict(system="tf.data service", setup="dispatcher + 2 workers, distributed_epoch, "
                "shared job_name, shuffle buffer 10,000, 4 consumers", records_per_s=n / dt,
                bytes_per_s=file_bytes * n / records / dt, batches_per_s=batches / dt,
                note="no G2 (unequal counts per consumer), no global shuffle; images as a "
                "tf.string tensor")


def run_ranks_ctx(ctx, target, args_of_rank, timeout):
    barrier, queue = ctx.Barrier(WORLD), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args_of_rank(r), r, barrier, queue))
             for r in range(WORLD)]
    for p in procs:
        p.start()
    try:
        return collect(procs, queue, WORLD, timeout)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


def bench_ray(files, records, file_bytes, work):
    try:
        import ray
    except ImportError as e:
        return dict(system="ray data", note=f"not installed: {e}")
    import numpy as np
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             _temp_dir=str(work / "ray"))  # removed with the run's directory
    try:
        def to_records(row):
            data, out, pos = row["bytes"], [], 0
            while pos < len(data):
                (length,) = struct.unpack_from("<Q", data, pos)
                ex = parse_example(memoryview(data)[pos + 12:pos + 12 + length])
                out.append({"id": ex["id"][0], "label": ex["label"][0], "image": ex["image"][0]})
                pos += 16 + length
            return out

        ds = ray.data.read_binary_files([str(f) for f in files]).flat_map(to_records)
        ds = ds.random_shuffle(seed=1)
        splits = ds.streaming_split(WORLD, equal=True)

        @ray.remote(num_cpus=0)
        def consume(split):
            t0, n, b = time.time(), 0, 0
            for batch in split.iter_batches(batch_size=BATCH, batch_format="numpy"):
                if b == 0:
                    check_first(batch["id"], batch["label"], batch["image"])
                n += len(batch["id"])
                b += 1
            return n, b, t0, time.time()

        got = ray.get([consume.remote(s) for s in splits], timeout=900)
    finally:
        ray.shutdown()
    n = sum(g[0] for g in got)
    dt = max(g[3] for g in got) - min(g[2] for g in got)
    del np
    return dict(system="ray data", setup="read_binary_files -> records -> random_shuffle -> "
                "streaming_split(4, equal=True), 2 CPUs", records_per_s=n / dt,
                bytes_per_s=file_bytes * n / records / dt,
                batches_per_s=sum(g[1] for g in got) / dt,
                note="decode with the same pure-Python reader; images as an object array of "
                "bytes")


def median_sample(samples):
    """The sample of median records/s (the lower middle one of an even count), with the range
    and every round's figure."""
    measured = sorted((r for r in samples if r.get("records_per_s")),
                      key=lambda r: r["records_per_s"])
    if not measured:
        return samples[-1]
    out = dict(measured[(len(measured) - 1) // 2])
    rates = [r["records_per_s"] for r in samples if r.get("records_per_s")]
    out["samples"] = rates
    if len(rates) > 1:
        per = "batches" if out["system"] == "croupier-python-small" else "rec"
        out["note"] = (out.get("note", "") + f"; median of {len(rates)} rounds, "
                       f"{min(rates):,.0f}-{max(rates):,.0f} {per}/s").lstrip("; ")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--systems", default="", help="comma-separated, of raw, croupier, "
                        "croupier-lists, croupier-rpt16, small, pytorch, tfdata, ray (default: all; tfdata and "
                        "ray not with --quick)")
    parser.add_argument("--rounds", type=int, default=0, help="samples of each system, "
                        "interleaved (0: 1 with --quick, else 3)")
    parser.add_argument("--records", type=int, default=0, help="records in the files (0: 40,000 "
                        "with --quick, else 200,000)")
    parser.add_argument("--small-prefetch", type=int, default=64, help="the prefetch window "
                        "of croupier-python-small's consumer")
    parser.add_argument("--rounds-per-task", type=int, default=0, help="the croupier "
                        "dispatcher's --rounds-per-task for the end-to-end job (0: its default)")
    parser.add_argument("--shm", default=os.environ.get("CROUPIER_SHM", "auto"),
                        help="the croupier consumers' shared-memory mode (auto, on, off)")
    args = parser.parse_args()
    os.environ["CROUPIER_SHM"] = args.shm
    # numpy's OpenBLAS starts a thread per core in every process that imports it, and they spin:
    # 7% of all samples of a croupier run (perf). No system here multiplies matrices, so every
    # process (the consumers of all systems, Ray's and tf.data's workers) gets one thread.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    records = args.records or (40000 if args.quick else 200000)
    rounds = args.rounds or (1 if args.quick else 3)
    wanted = set(args.systems.split(",")) if args.systems else None
    extra = ["--rounds-per-task", str(args.rounds_per_task)] if args.rounds_per_task else []

    def want(name):
        return wanted is None or name in wanted

    import croupier
    with tempfile.TemporaryDirectory(prefix="croupier-e2e-") as tmp:
        work = pathlib.Path(tmp)
        subprocess.run([croupier.croupier_binary(), "synth", "--out", str(work / "data"),
                        "--files", "8", "--records", str(records), "--image-bytes",
                        str(IMAGE_BYTES), "--quiet"], check=True)
        files = sorted((work / "data").glob("*.tfrecord"))
        file_bytes = sum(f.stat().st_size for f in files)
        for f in files:  # into the page cache
            f.read_bytes()
        small = synth_small(work, args.quick) if want("small") else None
        # (name, run(round) -> result dict), in the order of the first round.
        systems = []
        if want("raw"):
            systems.append(("raw", lambda k: bench_raw(files, records, file_bytes)))
        if want("croupier"):
            systems.append(("croupier", lambda k: bench_croupier(
                files, records, file_bytes, work / f"croupier-{k}", dispatcher_args=extra)))
        if want("croupier-lists"):
            systems.append(("croupier-lists", lambda k: bench_croupier(
                files, records, file_bytes, work / f"croupier-lists-{k}", bytes_as="list",
                dispatcher_args=extra)))
        if want("croupier-rpt16"):
            systems.append(("croupier-rpt16", lambda k: bench_croupier(
                files, records, file_bytes, work / f"croupier-rpt16-{k}",
                dispatcher_args=["--rounds-per-task", "16"])))
        if want("small"):
            systems.append(("small", lambda k: bench_croupier_small(small, work / f"small-{k}",
                                                                  args.small_prefetch)))
        if want("pytorch"):
            systems.append(("pytorch", lambda k: bench_torch(files, records, file_bytes)))
        if not args.quick and want("tfdata"):
            systems.append(("tfdata", lambda k: bench_tfdata(files, records, file_bytes, k)))
        if not args.quick and want("ray"):
            systems.append(("ray", lambda k: bench_ray(files, records, file_bytes,
                                                       work / f"ray-{k}")))
        samples = {name: [] for name, _ in systems}
        for k in range(rounds):
            for name, run in (systems if k % 2 == 0 else systems[::-1]):
                if samples[name] and not samples[name][-1].get("records_per_s"):
                    continue  # not installed: one try is enough
                result = run(k)
                samples[name].append(result)
                print(json.dumps({"bench": "e2e-sample", "round": k, **result}), file=sys.stderr,
                      flush=True)
        for name, _ in systems:
            emit(**median_sample(samples[name]))


if __name__ == "__main__":
    main()
