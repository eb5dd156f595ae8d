#!/usr/bin/env python3
"""End to end: TFRecord files in the page cache -> tf.train.Example decode -> batches of 256 with
a global shuffle -> 4 Python consumer processes, in records/s, for every system on the same files:

  raw read         one process reading the files' bytes (the ceiling: no decode, no delivery);
  croupier         a dispatcher and 2 producers (croupier.local_cluster) dealing the job
                   (global shuffle, guarantees G1-G3 on) to 4 croupier.Consumer processes, each
                   iterating epoch() (dicts of numpy views);
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
records delivered over the time from the barrier to the last consumer's end. JSON lines on stdout:
  {"bench": "e2e", "system", "setup", "records_per_s", "bytes_per_s", "batches_per_s", "note"}
bytes_per_s counts the TFRecord file bytes the records came from.

usage: .venv/bin/python bench/bench_e2e.py [--quick]
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

def croupier_rank(address, job, rank, barrier, queue):
    import croupier
    c = croupier.Consumer(address, job, rank, WORLD, timeout=120)
    barrier.wait()
    t0, n, batches = time.time(), 0, 0
    for batch in c.epoch(0):
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
        n += len(batch["id"])
        batches += 1
    queue.put((n, batches, t0, time.time()))
    del np


def tfdata_rank(dispatcher, files, rank, barrier, queue):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    spec = {"id": tf.io.FixedLenFeature([], tf.int64),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "image": tf.io.FixedLenFeature([], tf.string)}
    ds = tf.data.TFRecordDataset([str(f) for f in files])
    ds = ds.shuffle(10000, seed=1).batch(BATCH, drop_remainder=True)
    ds = ds.map(lambda x: tf.io.parse_example(x, spec))
    ds = ds.apply(tf.data.experimental.service.distribute(
        processing_mode="distributed_epoch", service=dispatcher, job_name="bench"))
    it = iter(ds)
    barrier.wait()
    t0, n, batches = time.time(), 0, 0
    for batch in it:
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
    emit(system="raw read", setup="1 process, 1 MiB reads of the files", records_per_s=records / dt,
         bytes_per_s=total / dt, note="no decode, no delivery")


def bench_croupier(files, records, file_bytes, work):
    import croupier
    with croupier.local_cluster(producers=2, work_dir=work / "croupier") as cluster:
        cluster.create_job("e2e", [str(f) for f in files], FEATURES, BATCH, consumers=WORLD,
                           seed=1, epochs=1, shuffle="global")
        n, batches, dt = run_ranks(croupier_rank, lambda r: (cluster.address, "e2e"), 300)
    emit(system="croupier", setup="dispatcher + 2 producers, global shuffle, 4 consumers, "
         f"CROUPIER_SHM={os.environ['CROUPIER_SHM']}",
         records_per_s=n / dt, bytes_per_s=file_bytes * n / records / dt,
         batches_per_s=batches / dt, note="G1-G3 on")


def bench_croupier_small(work, quick):
    import croupier
    data = work / "small"
    subprocess.run([croupier.croupier_binary(), "synth", "--out", str(data), "--files", "2",
                    "--records", str(20000 if quick else 100000), "--image-bytes", "8",
                    "--quiet"], check=True)
    # Tasks of 4,096 rounds: with the default 4 a task holds 4 one-record batches, and the
    # producer takes about one task per heartbeat (see bench/notes.md).
    with croupier.local_cluster(producers=1, work_dir=work / "croupier-small",
                                dispatcher_args=["--rounds-per-task", "4096"]) as cluster:
        cluster.create_job("small", str(data / "*.tfrecord"), "id:int64", 1, consumers=1,
                           seed=1, epochs=1, shuffle="none")
        c = croupier.Consumer(cluster.address, "small", 0, 1, prefetch=256, timeout=120)
        it = c.batches(0)
        next(it)
        t0, n = time.time(), 1
        for _ in it:
            n += 1
        dt = time.time() - t0
        c.close()
    emit(system="croupier-python-small", setup="1 producer, 1 Python consumer, batches of 1 "
         f"record (id:int64), --rounds-per-task 4096, "
         f"CROUPIER_SHM={os.environ['CROUPIER_SHM']}", batches_per_s=(n - 1) / dt, records_per_s=(n - 1) / dt)


def bench_torch(files, records, file_bytes):
    n, batches, dt = run_ranks(torch_rank, lambda r: ([str(f) for f in files],), 600)
    emit(system="pytorch", setup="4 ranks: DataLoader + DistributedSampler, pure-Python reader",
         records_per_s=n / dt, bytes_per_s=file_bytes * n / records / dt,
         batches_per_s=batches / dt, note="no guarantee across ranks beyond the sampler's")


def bench_tfdata(files, records, file_bytes):
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
                                       lambda r: (dispatcher.target, [str(f) for f in files]), 600)
    finally:
        for w in workers:
            w.kill()
            w.join()
    emit(system="tf.data service", setup="dispatcher + 2 workers, distributed_epoch, shared "
         "job_name, shuffle buffer 10,000, 4 consumers", records_per_s=n / dt,
         bytes_per_s=file_bytes * n / records / dt, batches_per_s=batches / dt,
         note="no G2 (unequal counts per consumer), no global shuffle")


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
        emit(system="ray data", note=f"not installed: {e}")
        return
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
                n += len(batch["id"])
                b += 1
            return n, b, t0, time.time()

        got = ray.get([consume.remote(s) for s in splits], timeout=900)
    finally:
        ray.shutdown()
    n = sum(g[0] for g in got)
    dt = max(g[3] for g in got) - min(g[2] for g in got)
    emit(system="ray data", setup="read_binary_files -> records -> random_shuffle -> "
         "streaming_split(4, equal=True), 2 CPUs", records_per_s=n / dt,
         bytes_per_s=file_bytes * n / records / dt, batches_per_s=sum(g[1] for g in got) / dt,
         note="decode with the same pure-Python reader")
    del np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--systems", default="")
    parser.add_argument("--records", type=int, default=0, help="records in the files (0: 40,000 "
                        "with --quick, else 200,000)")
    parser.add_argument("--shm", default=os.environ.get("CROUPIER_SHM", "auto"),
                        help="the croupier consumers' shared-memory mode (auto, on, off)")
    args = parser.parse_args()
    os.environ["CROUPIER_SHM"] = args.shm
    records = args.records or (40000 if args.quick else 200000)
    wanted = set(args.systems.split(",")) if args.systems else None

    def want(name):
        return wanted is None or name in wanted

    import croupier
    with tempfile.TemporaryDirectory(prefix="croupier-e2e-") as tmp:
        work = pathlib.Path(tmp)
        subprocess.run([croupier.croupier_binary(), "synth", "--out", str(work / "data"),
                        "--files", "8", "--records", str(records), "--image-bytes", "1024",
                        "--quiet"], check=True)
        files = sorted((work / "data").glob("*.tfrecord"))
        file_bytes = sum(f.stat().st_size for f in files)
        for f in files:  # into the page cache
            f.read_bytes()
        if want("raw"):
            bench_raw(files, records, file_bytes)
        if want("croupier"):
            bench_croupier(files, records, file_bytes, work)
        if want("small"):
            bench_croupier_small(work, args.quick)
        if want("pytorch"):
            bench_torch(files, records, file_bytes)
        if not args.quick and want("tfdata"):
            bench_tfdata(files, records, file_bytes)
        if not args.quick and want("ray"):
            bench_ray(files, records, file_bytes, work)


if __name__ == "__main__":
    main()
