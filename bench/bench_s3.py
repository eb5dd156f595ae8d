#!/usr/bin/env python3
"""TFRecord jobs from an object store against the same job from local files (issue 35), in one
run: records/s, time to the first batch, bytes fetched per byte delivered and requests per batch.

The store: moto's S3 server (moto[server], pinned in scripts/requirements-dev.txt) started on
127.0.0.1 by this program, as the tests start it (tests/moto_store.py). The data: `croupier synth`
records (id, label and an image of --image-bytes random bytes), --records records in --files
files, written to a temp folder and uploaded to the store; both removed at the end.

Each system is one job read for one epoch by one consumer (world 1) from one producer
(`local_cluster(producers=0)` and one `croupier producer --threads --threads`), everything fresh:
a new dispatcher work dir and a new, empty producer index cache ($CROUPIER_INDEX_DIR), so a
producer pays what a new producer pays. Systems, for each shuffle (none; blocks of
--block-size records, --window-blocks blocks a window; global):

  local      the files on local disk (the baseline)
  s3         the objects, s3://BUCKET/train/*.tfrecord
  s3_gap4k   (blocks, global) the objects with CROUPIER_S3_MERGE_GAP_BYTES=4096: ranges up to
             4 KiB apart merged into one request, the bytes between them fetched and dropped
and once, shuffle none:
  s3_indexed the objects again, right after s3: a new dispatcher and producer, and the index
             object the s3 row's dispatcher stored in the store, so create_job scans nothing
             (every job after the first on the same objects)
  s3_noshare the objects with CROUPIER_S3_INDEX_PREFIX=off: each producer scans every object
             whole to index it (what stage 1 of issue 35 did), against the shared index object
             the dispatcher writes as it creates the job
  s3_kept    the objects, read by a producer started again on the on-disk record cache a first
             one kept (--cache-bytes, --cache-dir, --cache-keep): the first producer reads a job
             of the same objects for one epoch and is SIGKILLed, a second starts with the same
             flags, and the job measured is read through the second (a pod restarted on its
             node). Its figures are the second producer's.

and, shuffle none, the peers (bench/s3_peers.py, run with --peers-python, default
.venv-peers/bin/python from `make bench-peers`; skipped, saying why, when it is not there):

  mosaicml_streaming, litdata   the same records (decoded from the TFRecord files), written in
             each peer's format with its default shard size, uploaded to the same store, read in
             order by a torch DataLoader with --peer-workers workers (litdata: 0, as it hung
             here with workers; s3_peers.py says more) and an empty cache

And first, the store's ceiling: boto3 GETs every object whole, 4 at once (records/s as if each
byte were a record's): no reader of this store on this machine does better.

Figures per system: create_s (create_job: the dispatcher lists and indexes the files; for s3 it
scans each object whole once and stores its index in the store), first_batch_s (create_job's
start to the first batch in the consumer's hands), epoch_s and records/s (create_job's start to
the last batch in the consumer's hands: the producer starts making batches as the job is
created, so time from the first batch alone would count batches made before it), and from the producer's /metrics (croupier_s3_*): requests, ranges asked,
bytes fetched; fetched_per_delivered = bytes fetched / bytes of the records delivered (their
TFRecord framing included); requests_per_batch; the batches whose records were ready when made,
read ahead, and fetched when made (croupier_s3_batches_*); and the store's share of making
(croupier_s3_wait_seconds_total over croupier_producer_make_seconds_total: the time the producer's
threads waited for the store, of the time they spent making batches). Ratios s3 / local from the
same run.

--max-tasks sets the producer's --max-tasks (the tasks it holds with batches to make, and so
the tasks it can fetch ahead). --shuffles picks the shuffles run (default all three; s3_noshare runs with none), for repeated runs
of one of them. $CROUPIER_BIN, if set, is the croupier command every process runs (another build,
to compare).

--store-latency-ms L makes moto start every answer L ms late (tests/moto_store.py: its WSGI app
sleeps first, so requests in flight at once wait together): a store that answers tens of
milliseconds after each request, as one across a network does, where on loopback moto's own CPU
is all the wait. (This machine's kernel has no netem to delay the link itself.)

Usage: .venv/bin/python bench/bench_s3.py [--records 6000] [--files 4]
       [--shuffles none,blocks,global] [--store-latency-ms 0] [--json out.json]
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))
import croupier  # noqa: E402
from moto_store import moto_store  # noqa: E402
from service_cluster import synth_dataset, wait_for_file  # noqa: E402

FEATURES = "id:int64,label:int64,image:bytes"
BUCKET = "croupier-bench"


def s3_counters(port_file):
    port = int(wait_for_file(port_file, 10))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {line.split()[0][len("croupier_s3_"):]: float(line.split()[1])
           for line in text.splitlines() if line.startswith("croupier_s3_")}
    out["make_seconds"] = sum(float(line.split()[1]) for line in text.splitlines()
                              if line.startswith("croupier_producer_make_seconds_total"))
    return out


def read_epoch(c, name):
    """Reads epoch 0 of job `name` with one consumer: (first batch time, batches, records)."""
    feed = c.consumer(name, 0, 1)
    batches = records = 0
    first = None
    try:
        for b in feed.batches(0):
            if first is None:
                first = time.monotonic()
            batches += 1
            records += len(b.to_dict()["id"])
    finally:
        feed.close()
    return first, batches, records


def run_job(args, work, name, files, shuffle, env, kept_cache=False):
    """One epoch of a fresh job; its figures. kept_cache: through a producer started again on the
    record cache a first one kept after reading the same files (s3_kept)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    os.environ["CROUPIER_INDEX_DIR"] = str(work / f"{name}-index")
    try:
        with croupier.local_cluster(producers=0, work_dir=work / name,
                                    threads=args.threads) as c:
            port_file = work / f"{name}-metrics.port"
            more = ["--max-tasks", str(args.max_tasks)] if args.max_tasks else []
            extra = {}
            if shuffle == "blocks":
                extra = dict(block_size=args.block_size, window_blocks=args.window_blocks)
            if kept_cache:
                more += ["--cache-bytes", str(1 << 30), "--cache-dir", str(work / f"{name}-cache"),
                         "--cache-keep"]
                first_producer = c.add_producer(*more)
                c.create_job(f"{name}-first", files, FEATURES, args.batch, consumers=1, seed=3,
                             epochs=1, shuffle=shuffle, **extra)
                read_epoch(c, f"{name}-first")
                first_producer.kill()
                first_producer.wait(timeout=30)
            # Registered once its metrics port is written (the cluster's own wait would take the
            # producer killed on purpose for a failure).
            c.add_producer("--metrics-port", "0", "--metrics-port-file", port_file, *more,
                           wait=not kept_cache)
            wait_for_file(port_file, 30)
            start = time.monotonic()
            c.create_job(name, files, FEATURES, args.batch, consumers=1, seed=3, epochs=1,
                         shuffle=shuffle, **extra)
            created = time.monotonic()
            first, batches, records = read_epoch(c, name)
            end = time.monotonic()
            counters = s3_counters(port_file)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {"create_s": created - start, "first_batch_s": first - start,
            "epoch_s": end - start, "batches": batches, "records": records,
            "records_per_s": records / (end - start),
            "requests": counters.get("requests_total", 0.0),
            "ranges": counters.get("ranges_total", 0.0),
            "bytes": counters.get("bytes_total", 0.0),
            "read_ahead": counters.get("batches_read_ahead_total", 0.0),
            "ready": counters.get("batches_ready_total", 0.0),
            "by_maker": counters.get("batches_fetched_by_maker_total", 0.0),
            "fetched_now": counters.get("batches_fetched_now_total", 0.0),
            "wait_s": counters.get("wait_seconds_total", 0.0),
            "make_s": counters.get("make_seconds", 0.0)}


def export_records(files, out):
    """The records of the TFRecord files, in file order, as an .npz (id, label, image): what the
    peers write in their own formats."""
    import tensorflow as tf
    spec = {"id": tf.io.FixedLenFeature([], tf.int64), "label": tf.io.FixedLenFeature([], tf.int64),
            "image": tf.io.FixedLenFeature([], tf.string)}
    ids, labels, images = [], [], []
    for raw in tf.data.TFRecordDataset([str(f) for f in files]):
        r = tf.io.parse_single_example(raw, spec)
        ids.append(int(r["id"]))
        labels.append(int(r["label"]))
        images.append(np.frombuffer(r["image"].numpy(), np.uint8))
    np.savez(out, id=np.array(ids), label=np.array(labels), image=np.stack(images))


def run_peers(args, tmp, store, local_files):
    """The peers' rows (s3_peers.py in their own venv), or a reason they did not run."""
    python = pathlib.Path(args.peers_python)
    if not python.exists():
        return [], f"{python} does not exist (make bench-peers makes it)"
    export_records(local_files, tmp / "records.npz")
    env = {**os.environ, **store.env()}
    env.pop("PYTHONPATH", None)
    out = subprocess.run(
        [str(python), str(ROOT / "bench" / "s3_peers.py"), "--records", str(tmp / "records.npz"),
         "--endpoint", store.endpoint, "--bucket", BUCKET, "--work", str(tmp / "peers"),
         "--batch", str(args.batch), "--workers", str(args.peer_workers)],
        env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return [], f"s3_peers.py failed ({out.returncode}): {out.stderr[-2000:]}"
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    for r in rows:
        r["shuffle"] = "none"
    return rows, ""


def store_ceiling(s3, keys, threads=4):
    """Seconds for boto3 to GET every object whole, `threads` at once: what the store serves at
    best, the bound of any reader of it on this machine."""
    from concurrent.futures import ThreadPoolExecutor
    start = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        sizes = list(pool.map(
            lambda k: len(s3.get_object(Bucket=BUCKET, Key=k)["Body"].read()), keys))
    return time.monotonic() - start, sum(sizes)


def print_peers(peers, by, bytes_per_record):
    """The peers' table: each against croupier's s3 row (a first job on the objects: create_job
    indexes them) and s3_indexed (a job whose index the store holds)."""
    ours = [by[(name, "none")] for name in ("s3", "s3_indexed") if (name, "none") in by]
    print("\npeers, shuffle none; croupier: " + "; ".join(
        f"{r['system']} {r['records_per_s']:,.0f} records/s, first batch "
        f"{r['first_batch_s']:.2f} s" for r in ours) + "\n")
    print("| system | DataLoader workers | shards | records/s | "
          + " | ".join(f"croupier {r['system']} / it" for r in ours)
          + " | first batch (s) | " + " | ".join(f"it / croupier {r['system']}" for r in ours)
          + " | bytes fetched / delivered |")
    print("|---" * (6 + 2 * len(ours)) + "|")
    for r in peers:
        r["fetched_per_delivered"] = r["fetched_bytes"] / (bytes_per_record * r["records"])
        print(f"| {r['system']} | {r['workers']} | {r['shards']} | {r['records_per_s']:,.0f} | "
              + " | ".join(f"{o['records_per_s'] / r['records_per_s']:.2f}x" for o in ours)
              + f" | {r['first_batch_s']:.2f} | "
              + " | ".join(f"{r['first_batch_s'] / o['first_batch_s']:.2f}x" for o in ours)
              + f" | {r['fetched_per_delivered']:.3f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=6000)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--image-bytes", type=int, default=512)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--window-blocks", type=int, default=4)
    p.add_argument("--max-tasks", type=int, default=0,
                   help="the producer's --max-tasks (0: its default)")
    p.add_argument("--shuffles", default="none,blocks,global",
                   help="comma-separated shuffles to run")
    p.add_argument("--store-latency-ms", type=float, default=0.0,
                   help="moto starts every answer this late, as a store across a network")
    p.add_argument("--peers-python", default=str(ROOT / ".venv-peers" / "bin" / "python"),
                   help="the Python of the peers' venv (make bench-peers)")
    p.add_argument("--peer-workers", type=int, default=2,
                   help="the peers' DataLoader workers")
    p.add_argument("--json", type=pathlib.Path)
    args = p.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_s3_"))
    results = []
    try:
        local_files = synth_dataset(tmp / "data", args.records, files=args.files,
                                    image_bytes=args.image_bytes)
        total_bytes = sum(f.stat().st_size for f in local_files)
        with moto_store(tmp / "moto.log", latency_ms=args.store_latency_ms) as store:
            s3 = store.s3()
            s3.create_bucket(Bucket=BUCKET)
            for f in local_files:
                s3.upload_file(str(f), BUCKET, f"train/{f.name}")
            remote = f"s3://{BUCKET}/train/*.tfrecord"
            seconds, nbytes = store_ceiling(s3, [f"train/{f.name}" for f in local_files])
            ceiling = {"system": "store_ceiling", "seconds": seconds, "bytes": nbytes,
                       "records_per_s": args.records / seconds}
            results.append(ceiling)
            print(json.dumps(ceiling), flush=True)
            systems = []
            shuffles = [x for x in ("none", "blocks", "global") if x in args.shuffles.split(",")]
            for shuffle in shuffles:
                systems.append(("local", shuffle, [str(f) for f in local_files], {}))
                systems.append(("s3", shuffle, remote, store.env()))
                if shuffle != "none":
                    systems.append(("s3_gap4k", shuffle, remote,
                                    store.env(CROUPIER_S3_MERGE_GAP_BYTES="4096")))
            if "none" in shuffles:
                systems.insert(2, ("s3_indexed", "none", remote, store.env()))
                systems.append(("s3_noshare", "none", remote,
                                store.env(CROUPIER_S3_INDEX_PREFIX="off")))
                systems.append(("s3_kept", "none", remote, store.env()))
            for n, (system, shuffle, files, env) in enumerate(systems):
                r = run_job(args, tmp, f"j{n}-{system}-{shuffle}", files, shuffle, env,
                            kept_cache=system == "s3_kept")
                delivered = total_bytes * r["records"] / args.records
                r.update(system=system, shuffle=shuffle,
                         fetched_per_delivered=r["bytes"] / delivered if r["bytes"] else 0.0,
                         requests_per_batch=r["requests"] / r["batches"] if r["batches"] else 0.0)
                results.append(r)
                print(json.dumps(r), flush=True)
            peers, why_not = run_peers(args, tmp, store, local_files) if "none" in shuffles \
                else ([], "they read in order only (shuffle none not run)")
            for r in peers:
                print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    ceiling = results.pop(0)
    by = {(r["system"], r["shuffle"]): r for r in results}
    print(f"\n{args.records} records ({total_bytes} bytes) in {args.files} files, batch "
          f"{args.batch}, 1 producer x {args.threads} threads, 1 consumer; moto on loopback"
          + (f", {args.store_latency_ms:g} ms added to each round trip to it"
             if args.store_latency_ms else "") + "\n")
    print(f"store ceiling: boto3 GETs every object whole, 4 at once, in {ceiling['seconds']:.2f} "
          f"s: {ceiling['bytes'] / ceiling['seconds'] / 1e6:.1f} MB/s, "
          f"{ceiling['records_per_s']:,.0f} records/s\n")
    print("| shuffle | system | records/s | s3 / local | first batch (s) | s3 / local | "
          "create_job (s) | after create_job: s3 / local | "
          "bytes fetched / delivered | requests / batch | ranges / request | "
          "batches ready / read ahead (of them fetched by the maker) / fetched when made | "
          "store's share of making |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        base = by[("local", r["shuffle"])]
        ratio = "" if r["system"] == "local" else f"{r['records_per_s'] / base['records_per_s']:.2f}x"
        fb = "" if r["system"] == "local" else f"{r['first_batch_s'] / base['first_batch_s']:.1f}x"
        per_req = f"{r['ranges'] / r['requests']:.1f}" if r["requests"] else ""
        fetched = f"{r['fetched_per_delivered']:.3f}" if r["system"] != "local" else ""
        rpb = f"{r['requests_per_batch']:.1f}" if r["system"] != "local" else ""
        # The time from create_job's end to the last batch: what the producer's reads cost,
        # without the dispatcher's scan of the objects as it creates the job.
        after = ("" if r["system"] == "local" else
                 f"{(base['epoch_s'] - base['create_s']) / (r['epoch_s'] - r['create_s']):.2f}x")
        reads = ("" if r["system"] == "local" else
                 f"{r['ready']:.0f} / {r['read_ahead']:.0f} ({r['by_maker']:.0f}) / "
                 f"{r['fetched_now']:.0f}")
        share = (f"{r['wait_s'] / r['make_s']:.2f}"
                 if r["system"] != "local" and r["make_s"] else "")
        print(f"| {r['shuffle']} | {r['system']} | {r['records_per_s']:,.0f} | {ratio} | "
              f"{r['first_batch_s']:.2f} | {fb} | {r['create_s']:.2f} | {after} | {fetched} | "
              f"{rpb} | {per_req} | {reads} | {share} |")
    if peers:
        print_peers(peers, by, total_bytes / args.records)
    else:
        print(f"\npeers not run: {why_not}")
    if args.json:
        args.json.write_text(json.dumps(results + peers, indent=1))


if __name__ == "__main__":
    main()
