#!/usr/bin/env python3
"""A ParquetSource read from an object store against the same files on local disk (issue 35):
rows/s over every full batch of the plan's order, with its requests and bytes.

The store: moto's S3 server on 127.0.0.1 (tests/moto_store.py), optionally answering late. The
data: `--files` Parquet files of `--rows` rows in all, in row groups of `--row-group` rows
(columns id int64, label int32, image binary of `--image-bytes`), written here and uploaded. The
systems, one after another in each round, the rounds alternating their order:

  local        ParquetSource over the local files
  s3           ParquetSource over s3://BUCKET/*.parquet: croupier's own S3 client
               (croupier.object_store), one ranged GET a row group
  s3_pyarrow   the same source with each object opened through pyarrow's S3 file system
               (pyarrow.fs.S3FileSystem), as ParquetSource read objects before croupier's client:
               the baseline of the same run

Each system makes a new ParquetSource (its listing and footers are in its time), then reads
`--batch` rows at a time in plan order (shuffle none), in blocks of a row group shuffled in
windows of `--window-blocks` (`--shuffle blocks`: what docs/python.md advises for Parquet) or in
a global shuffle (`--shuffle global`), one thread: what one map worker does. The first batch's
time is from the source's creation. Prints a table of the rounds' medians, then the figures as JSON.

    .venv/bin/python bench/bench_s3_parquet.py --rows 200000 --rounds 3
"""
import argparse
import contextlib
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import croupier  # noqa: E402
from croupier import object_store  # noqa: E402
from croupier.parquet import ParquetSource  # noqa: E402
from moto_store import moto_store  # noqa: E402

BUCKET = "croupier-parquet"
SYSTEMS = ("local", "s3", "s3_pyarrow")


def add_data_arguments(ap, rows):
    """The data's and the store's arguments, shared with bench_s3_parquet_job.py."""
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--rows", type=int, default=rows)
    ap.add_argument("--row-group", type=int, default=5000)
    ap.add_argument("--image-bytes", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--store-latency-ms", type=float, default=0.0,
                    help="moto starts every answer this late, as a store across a network")


@contextlib.contextmanager
def staged(args, bucket):
    """The files of add_data_arguments' arguments written in a temporary folder and uploaded to
    `bucket` of a moto server (its settings in os.environ): (paths, their bytes, the store)."""
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        paths = write_files(tmp, args.files, args.rows, args.row_group, args.image_bytes)
        with moto_store(tmp / "moto.log", latency_ms=args.store_latency_ms) as store:
            s3 = store.s3()
            s3.create_bucket(Bucket=bucket)
            for p in paths:
                s3.upload_file(str(p), bucket, p.name)
            os.environ.update(store.env())
            yield paths, sum(p.stat().st_size for p in paths), store


def write_files(folder, files, rows, row_group, image_bytes):
    rng = np.random.default_rng(1)
    paths, per = [], rows // files
    for k in range(files):
        ids = np.arange(k * per, (k + 1) * per, dtype=np.int64)
        images = [rng.integers(0, 256, image_bytes, dtype=np.uint8).tobytes() for _ in ids]
        table = pa.table({"id": ids, "label": (ids % 10).astype(np.int32),
                          "image": pa.array(images, type=pa.binary())})
        path = folder / f"part-{k:03d}.parquet"
        pq.write_table(table, path, row_group_size=row_group)
        paths.append(path)
    return paths


class PyarrowS3Source(ParquetSource):
    """ParquetSource with each object opened through pyarrow's S3 file system."""

    def __init__(self, files, fs):
        self._fs = fs
        super().__init__(files)

    def _open(self, path):
        if path.startswith("s3://"):
            return self._pq.ParquetFile(self._fs.open_input_file(path[len("s3://"):]))
        return super()._open(path)


def pyarrow_fs(store):
    return pafs.S3FileSystem(endpoint_override=store.endpoint, region="us-east-1",
                             access_key=store.access_key, secret_key=store.secret_key,
                             scheme="http")


def read_all(make_source, batch, shuffle, block_size=0, window_blocks=0, seed=5):
    """(seconds to the first batch, seconds in all, rows) of reading every row."""
    start = time.perf_counter()
    source = make_source()
    n = len(source)
    plan = croupier.EpochPlan(n, batch, 1, seed=seed, epoch=0, shuffle=shuffle,
                              block_size=block_size, window_blocks=window_blocks)
    first, rows = None, 0
    for g in range(plan.num_batches):
        got = source.get_many(plan.batch(g).tolist())
        rows += len(got)
        if first is None:
            first = time.perf_counter() - start
    return first, time.perf_counter() - start, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_arguments(ap, rows=204800)
    ap.add_argument("--shuffle", default="none", choices=("none", "blocks", "global"))
    ap.add_argument("--window-blocks", type=int, default=4,
                    help="with --shuffle blocks: blocks of a row group, shuffled in windows of "
                         "this many")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with staged(args, BUCKET) as (paths, nbytes, store):
        fs = pyarrow_fs(store)
        pattern = f"s3://{BUCKET}/*.parquet"
        makers = {"local": lambda: ParquetSource([str(p) for p in paths]),
                  "s3": lambda: ParquetSource(pattern),
                  "s3_pyarrow": lambda: PyarrowS3Source(pattern, fs)}
        runs = {s: [] for s in SYSTEMS}
        for r in range(args.rounds):
            order = SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]
            for system in order:
                before = object_store.process_stats()
                first, seconds, rows = read_all(
                    makers[system], args.batch, args.shuffle,
                    block_size=args.row_group if args.shuffle == "blocks" else 0,
                    window_blocks=args.window_blocks if args.shuffle == "blocks" else 0)
                after = object_store.process_stats()
                assert rows == args.rows // args.batch * args.batch, rows
                runs[system].append({
                    "first": first, "seconds": seconds, "rows_per_s": rows / seconds,
                    "requests": after["requests"] - before["requests"],
                    "bytes": after["bytes"] - before["bytes"]})
    median = {s: {k: statistics.median(run[k] for run in runs[s]) for k in runs[s][0]}
              for s in SYSTEMS}
    local = median["local"]["rows_per_s"]
    print(f"{args.rows} rows in {args.files} files ({nbytes / 1e6:.1f} MB), row groups of "
          f"{args.row_group}, batches of {args.batch}, shuffle {args.shuffle}, moto on loopback"
          + (f" answering {args.store_latency_ms:g} ms late" if args.store_latency_ms else "")
          + f"; medians of {args.rounds} rounds")
    print("| system | rows/s | / local | / s3_pyarrow | first batch (s) | requests | "
          "bytes fetched / file bytes |")
    print("|---|---|---|---|---|---|---|")
    for s in SYSTEMS:
        m = median[s]
        ratio_pa = m["rows_per_s"] / median["s3_pyarrow"]["rows_per_s"]
        counted = s == "s3"  # pyarrow's own client is not croupier's: nothing counted
        print(f"| {s} | {m['rows_per_s']:,.0f} | {m['rows_per_s'] / local:.2f}x | "
              f"{ratio_pa:.2f}x | {m['first']:.3f} | "
              + (f"{m['requests']:.0f} | {m['bytes'] / nbytes:.3f}" if counted else "- | -")
              + " |")
    print(json.dumps({"args": vars(args), "file_bytes": nbytes, "runs": runs}))


if __name__ == "__main__":
    main()
