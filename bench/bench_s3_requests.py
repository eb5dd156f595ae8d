#!/usr/bin/env python3
"""What a TFRecord job on objects asks of the store, phase by phase (issue 35): the requests in
moto's request log while `create_job` runs, while the producer opens the job and makes the
first batch, and for the rest of the epoch, by kind (HEAD or GET of a data object, GET or PUT of
an index object or of the pattern's kept record counts, listings), with each phase's time; then
each phase again as a JSON object.

Two jobs run on the same objects, each with a new dispatcher, producer and empty local index
cache ($CROUPIER_INDEX_DIR): `first` finds no index anywhere (the dispatcher scans every object
and stores its index and the pattern's record counts in the store), `second` finds what the first
stored (every job after the first on the same objects). One consumer (world 1), shuffle none, one epoch.

    .venv/bin/python bench/bench_s3_requests.py --files 64 --records 20000
"""
import argparse
import collections
import json
import os
import pathlib
import re
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))
import croupier  # noqa: E402
from moto_store import moto_store  # noqa: E402
from service_cluster import synth_dataset  # noqa: E402

FEATURES = "id:int64,label:int64,image:bytes"
BUCKET = "croupier-requests"
KINDS = [("HEAD", "data"), ("GET", "data"), ("GET", "index"), ("PUT", "index"), ("GET", "counts"),
         ("PUT", "counts"), ("GET", "list")]
REQUEST = re.compile(r'"(GET|HEAD|PUT|POST) (\S+)')
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def count(lines):
    """Requests in moto's log lines, by (method, data | index | list)."""
    out = collections.Counter()
    for line in lines:
        m = REQUEST.search(COLOUR.sub("", line))
        if not m:
            continue
        path = m.group(2)
        kind = ("counts" if path.endswith(".crcounts")
                else "index" if ".croupier-index" in path
                else "list" if "list-type" in path else "data")
        out[(m.group(1), kind)] += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--image-bytes", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_s3_requests_") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        files = synth_dataset(tmp / "data", args.records, files=args.files,
                              image_bytes=args.image_bytes)
        log = tmp / "moto.log"

        def lines():
            return log.read_text().splitlines()

        with moto_store(log) as store:
            s3 = store.s3()
            s3.create_bucket(Bucket=BUCKET)
            for f in files:
                s3.upload_file(str(f), BUCKET, f"train/{f.name}")
            os.environ.update(store.env())
            size = sum(f.stat().st_size for f in files)
            print(f"{args.files} objects, {args.records} records, {size / 1e6:.1f} MB; "
                  f"requests by kind: " + ", ".join(f"{m} {k}" for m, k in KINDS))
            rows = []
            for job in ("first", "second"):
                os.environ["CROUPIER_INDEX_DIR"] = str(tmp / f"{job}-index")
                with croupier.local_cluster(producers=0, work_dir=tmp / job, threads=2) as c:
                    c.add_producer()
                    n0 = len(lines())
                    t0 = time.monotonic()
                    c.create_job(job, f"s3://{BUCKET}/train/*.tfrecord", FEATURES,
                                 args.batch_size, consumers=1, seed=3, epochs=1, shuffle="none")
                    t1, n1 = time.monotonic(), len(lines())
                    with c.consumer(job, 0, 1) as feed:
                        batches = iter(feed.batches(0))
                        next(batches)
                        t2, n2 = time.monotonic(), len(lines())
                        for _ in batches:
                            pass
                    t3, n3 = time.monotonic(), len(lines())
                    log_lines = lines()
                    for phase, (a, b), seconds in (
                            ("create_job", (n0, n1), t1 - t0),
                            ("producer, to the first batch", (n1, n2), t2 - t1),
                            ("the rest of the epoch", (n2, n3), t3 - t2)):
                        got = count(log_lines[a:b])
                        counts = ", ".join(f"{got[k]}" for k in KINDS)
                        print(f"{job:6} {phase:30} {seconds:5.2f} s  "
                              f"{sum(got.values()):4} requests: {counts}")
                        rows.append({"job": job, "phase": phase, "seconds": round(seconds, 3),
                                     "requests": {f"{m} {k}": got[(m, k)] for m, k in KINDS}})
            for row in rows:  # the same, one JSON object a line, for scripts and tests
                print(json.dumps(row))


if __name__ == "__main__":
    main()
