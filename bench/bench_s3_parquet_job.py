#!/usr/bin/env python3
"""A map job of a ParquetSource on W worker processes, from an object store with the producer's
shared copies of what its workers fetch, from the store without them, and from local files
(issue 35: bytes fetched per byte delivered).

A map job's worker processes each make the batches they are handed; a batch reads whole row
groups. Without the copies (CROUPIER_S3_SHARED_READ_BYTES=0, what every map job did before them),
each worker fetched every row group its batches touched, however many other workers had fetched
it; with them (the default), the first fetch of a range is the only one, and the other workers
read its copy on /dev/shm (src/s3/shared_reads.h).

The store: moto's S3 server on 127.0.0.1 (tests/moto_store.py), optionally answering late. The
data: `--files` Parquet files of `--rows` rows in all, in row groups of `--row-group` rows
(bench_s3_parquet.py writes them). The job: `croupier produce` of tests/map_sources.py's Parquet
pipeline with `--workers` workers, `--world` consumer processes reading one epoch of batches of
`--batch`, shuffled as `--shuffle` says, on a dispatcher of its own (tests/service_cluster.py).
The systems alternate their order round by round:

  local      the local files
  s3         s3://BUCKET/*.parquet with the copies (the default)
  s3_alone   the same, CROUPIER_S3_SHARED_READ_BYTES=0

Each run's time is from the producer's start to the last rank's exit (the producer reads the
footers and makes batch 0 in it). The requests and bytes are those of the producer's summary
line (its workers' included). Prints a table of the rounds' medians, then the runs as JSON.

    .venv/bin/python bench/bench_s3_parquet_job.py --rows 200000 --workers 4 --rounds 2
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from bench_s3_parquet import add_data_arguments, staged  # noqa: E402
from service_cluster import Cluster, read_batches  # noqa: E402
from test_produce import start_producer, wait_for_job  # noqa: E402

BUCKET = "croupier-parquet-job"
SYSTEMS = ("local", "s3", "s3_alone")
SUMMARY = re.compile(r"object store: (\d+) requests, (\d+) bytes, (\d+) retries \((\d+) "
                     r"throttled\), (\d+) failed(?:; (\d+) ranges \((\d+) bytes\) read from the "
                     r"producer's copies)?")


def run_job(work, files, args):
    """(seconds, rows read by the ranks, the producer's summary counts or None)."""
    start = time.perf_counter()
    with Cluster(work, producer_timeout_ms=3000) as cluster:
        producer = start_producer(cluster, "m", "producer0", kind="parquet", files=files,
                                  records=args.rows, batch_size=args.batch, epochs=1,
                                  consumers=args.world, workers=args.workers,
                                  shuffle=args.shuffle)
        wait_for_job(cluster, "m")
        outs, ranks = cluster.start_ranks("m", args.world, work, 1)
        cluster.wait(ranks, timeout=600)
        seconds = time.perf_counter() - start
        if producer.wait(timeout=120) != 0:
            raise SystemExit(producer.log_path.read_text()[-3000:])
        log = producer.log_path.read_text()
    rows = sum(len(b["ids"]) for o in outs for b in read_batches(o))
    m = SUMMARY.search(log)
    counts = [int(n or 0) for n in m.groups()] if m else None
    return seconds, rows, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_arguments(ap, rows=200000)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--shuffle", default="none", choices=("none", "global"))
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with staged(args, BUCKET) as (paths, nbytes, _):
        tmp = paths[0].parent
        runs = {s: [] for s in SYSTEMS}
        for r in range(args.rounds):
            for system in (SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]):
                os.environ["CROUPIER_S3_SHARED_READ_BYTES"] = \
                    "0" if system == "s3_alone" else str(256 << 20)
                files = [str(p) for p in paths] if system == "local" else \
                    f"s3://{BUCKET}/*.parquet"
                seconds, rows, counts = run_job(tmp / f"{system}{r}", files, args)
                run = {"seconds": seconds, "rows_per_s": rows / seconds}
                if system != "local":
                    run.update(requests=counts[0], bytes=counts[1], copies=counts[5])
                runs[system].append(run)
    median = {s: {k: statistics.median(run[k] for run in runs[s]) for k in runs[s][0]}
              for s in SYSTEMS}
    print(f"{args.rows} rows in {args.files} files ({nbytes / 1e6:.1f} MB), row groups of "
          f"{args.row_group}; a map job on {args.workers} workers, {args.world} ranks, batches "
          f"of {args.batch}, shuffle {args.shuffle}; moto on loopback"
          + (f" answering {args.store_latency_ms:g} ms late" if args.store_latency_ms else "")
          + f"; medians of {args.rounds} rounds")
    print("| system | rows/s | / local | / s3_alone | requests | bytes fetched / file bytes | "
          "ranges read from copies |")
    print("|---|---|---|---|---|---|---|")
    for s in SYSTEMS:
        m = median[s]
        local, alone = median["local"]["rows_per_s"], median["s3_alone"]["rows_per_s"]
        print(f"| {s} | {m['rows_per_s']:,.0f} | {m['rows_per_s'] / local:.2f}x"
              f" | {m['rows_per_s'] / alone:.2f}x | "
              + (f"{m['requests']:.0f} | {m['bytes'] / nbytes:.2f} | {m['copies']:.0f}"
                 if s != "local" else "- | - | -") + " |")
    print(json.dumps({"args": vars(args), "file_bytes": nbytes, "runs": runs}))


if __name__ == "__main__":
    main()
