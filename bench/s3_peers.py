#!/usr/bin/env python3
"""The peers of bench_s3.py: MosaicML Streaming and litdata reading the same records from the
same S3 server, each in its own format, written by its own writer and uploaded to the store.

Run by bench_s3.py with the peers' own Python (.venv-peers, made by `make bench-peers`): both
peers need torchvision, whose PyPI build does not load beside the CPU torch 2.13.0 that the
project pins, so they live in a venv of their own (torch 2.14.1 and torchvision 0.29.1; see
scripts/requirements-peers.txt).

Input: --records, an .npz of the records bench_s3.py decoded from its TFRecord files (id, label,
image: the same records the croupier jobs read). The store: --endpoint and --bucket, the
credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Each system writes its shards to a
local folder with its default shard size, uploads them under its own prefix, then reads one
epoch in order (no shuffle) through a torch DataLoader with a fresh, empty local cache and
--workers workers (litdata: --litdata-workers, default 0, as it hung here with workers; see
main), timed from the dataset's construction: time to the first batch, and records/s to the last.
fetched_bytes: the bytes its cache holds at the end (what it downloaded: both fetch whole
shards). One JSON object per system on stdout.

Usage: s3_peers.py --records r.npz --endpoint URL --bucket B --work DIR [--batch 32]
       [--workers 2] [--litdata-workers 0] [--systems mosaicml_streaming,litdata]
"""
import argparse
import json
import os
import pathlib
import shutil
import time

import boto3
import numpy as np


# litdata downloads with obstore, which refuses an http:// endpoint (moto's) unless its client
# is told, and litdata passes its own client options, which the environment cannot change. Its
# DataLoader workers start by spawn and import this file again as their main module: hence the
# flag in the environment, read at import.
_ALLOW_HTTP = "S3_PEERS_LITDATA_ALLOW_HTTP"


def _litdata_allows_http():
    from litdata.streaming import downloader
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"


if os.environ.get(_ALLOW_HTTP) == "1":
    _litdata_allows_http()


def folder_bytes(path):
    return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file())


def upload(s3, bucket, folder, prefix):
    for f in sorted(pathlib.Path(folder).rglob("*")):
        if f.is_file():
            s3.upload_file(str(f), bucket, f"{prefix}/{f.relative_to(folder)}")


def collate(rows):
    """A batch as croupier's consumer hands it: the numbers as arrays, each image its bytes.
    (torch's default collate would make a tensor of every byte of a bytes field: 2 ms a record.)"""
    return {"id": np.array([r["id"] for r in rows]), "label": np.array([r["label"] for r in rows]),
            "image": [r["image"] for r in rows]}


def read_epoch(loader, started):
    """Iterates the loader: (first batch time, batches, records, last batch time)."""
    first = None
    batches = records = 0
    for b in loader:
        if first is None:
            first = time.monotonic()
        batches += 1
        records += len(b["id"])
    return first - started, batches, records, time.monotonic() - started


def mosaicml_streaming(recs, args, s3):
    from streaming import MDSWriter, StreamingDataset
    from torch.utils.data import DataLoader
    out = args.work / "mds"
    with MDSWriter(out=str(out), columns={"id": "int64", "label": "int64", "image": "bytes"},
                   compression=None) as w:
        for i, label, image in zip(recs["id"], recs["label"], recs["image"]):
            w.write({"id": int(i), "label": int(label), "image": image.tobytes()})
    shards = len(list(out.glob("*.mds")))
    upload(s3, args.bucket, out, "mds")
    os.environ["S3_ENDPOINT_URL"] = args.endpoint
    cache = args.work / "mds-cache"
    started = time.monotonic()
    ds = StreamingDataset(remote=f"s3://{args.bucket}/mds", local=str(cache), shuffle=False,
                          batch_size=args.batch)
    loader = DataLoader(ds, batch_size=args.batch, num_workers=args.workers, collate_fn=collate)
    first, batches, records, total = read_epoch(loader, started)
    return {"shards": shards, "first_batch_s": first, "epoch_s": total, "batches": batches,
            "records": records, "fetched_bytes": folder_bytes(cache)}


def _lit_item(row):
    return row


def litdata(recs, args, s3):
    import litdata as ld
    out = args.work / "lit"
    rows = [{"id": int(i), "label": int(label), "image": image.tobytes()}
            for i, label, image in zip(recs["id"], recs["label"], recs["image"])]
    ld.optimize(fn=_lit_item, inputs=rows, output_dir=str(out), chunk_bytes="64MB",
                num_workers=1)
    shards = len(list(out.glob("*.bin")))
    upload(s3, args.bucket, out, "lit")
    os.environ[_ALLOW_HTTP] = "1"
    _litdata_allows_http()
    cache = args.work / "lit-cache"
    options = {"endpoint_url": args.endpoint,
               "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
               "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"]}
    started = time.monotonic()
    ds = ld.StreamingDataset(f"s3://{args.bucket}/lit", cache_dir=str(cache), shuffle=False,
                             storage_options=options)
    loader = ld.StreamingDataLoader(ds, batch_size=args.batch, num_workers=args.litdata_workers,
                                    collate_fn=collate)
    first, batches, records, total = read_epoch(loader, started)
    return {"shards": shards, "first_batch_s": first, "epoch_s": total, "batches": batches,
            "records": records, "fetched_bytes": folder_bytes(cache)}


SYSTEMS = {"mosaicml_streaming": mosaicml_streaming, "litdata": litdata}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=pathlib.Path, required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--work", type=pathlib.Path, required=True)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    # litdata's StreamingDataLoader with 1 or 2 workers reading from moto hung here: its workers
    # idle, the loader waiting for a batch, with every chunk in its cache (seen three times, 40,000
    # records in 2 chunks). With 0 workers it reads in the main process.
    p.add_argument("--litdata-workers", type=int, default=0)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    args = p.parse_args()
    recs = dict(np.load(args.records))
    s3 = boto3.client("s3", endpoint_url=args.endpoint, region_name="us-east-1")
    for name in args.systems.split(","):
        work = args.work / name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        r = SYSTEMS[name](recs, argparse.Namespace(**{**vars(args), "work": work}), s3)
        workers = args.litdata_workers if name == "litdata" else args.workers
        r.update(system=name, workers=workers, records_per_s=r["records"] / r["epoch_s"])
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
