#!/usr/bin/env python3
"""Tokens jobs whose indexed datasets are objects (issue 35 with issue 34's sources), against the
same job over the same files on local disk, in one run: sequences per second and tokens per
second from create_job to the last batch.

The store: moto's S3 server started on 127.0.0.1 by this program (tests/moto_store.py), with
every answer --store-latency-ms late (0: moto on loopback, whose own CPU is then all the wait).
The data: two Megatron indexed datasets written by croupier.tokens.write_indexed_dataset, one of
uint16 tokens (--documents documents) and one of int32 (two thirds as many), documents of 50 to
2,000 tokens drawn from a seeded generator, uploaded to the store under lm/. Each system is one
job of --steps global batches of --global-batch sequences of --sequence-length tokens, read by
one consumer from one producer of --threads threads, for each packing (concat, best_fit); a fresh
local_cluster each. Systems: local (the files), s3 (s3://BUCKET/lm/web and .../code). The
producer's croupier_s3_requests_total and _ranges_total are shown per batch. $CROUPIER_BIN, if
set, is the croupier command every process runs (another build, to compare).

Usage: .venv/bin/python bench/bench_s3_tokens.py [--documents 3000] [--steps 100]
       [--store-latency-ms 0] [--json out.json]
"""
import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))
import numpy as np  # noqa: E402

import croupier  # noqa: E402
from croupier import tokens  # noqa: E402
from moto_store import moto_store  # noqa: E402
from service_cluster import wait_for_file  # noqa: E402

BUCKET = "croupier-tokens"


def write_sources(folder, documents, seed=1):
    rng = np.random.default_rng(seed)
    def docs(n, base, mod):
        return [[(base + t) % mod for t in range(int(rng.integers(50, 2000)))]
                for _ in range(n)]
    tokens.write_indexed_dataset(str(folder / "web"), docs(documents, 0, 60000), dtype="uint16")
    tokens.write_indexed_dataset(str(folder / "code"), docs(documents * 2 // 3, 100000, 1 << 30),
                                 dtype="int32")
    return [folder / "web", folder / "code"]


def s3_counters(port_file):
    import urllib.request
    port = int(wait_for_file(port_file, 10))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("croupier_s3_")}


def run_job(args, work, name, sources, packing, env):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with croupier.local_cluster(producers=0, work_dir=work / name, threads=args.threads) as c:
            port_file = work / f"{name}-metrics.port"
            c.add_producer("--metrics-port", "0", "--metrics-port-file", port_file)
            start = time.monotonic()
            tokens.create_token_job(c.address, name, sources, consumers=1,
                                    sequence_length=args.sequence_length,
                                    global_batch=args.global_batch, steps_per_epoch=args.steps,
                                    epochs=1, seed=5, packing=packing)
            feed = c.consumer(name, 0, 1)
            sequences = 0
            try:
                for batch in feed.epoch(0):
                    sequences += batch["input_ids"].shape[0]
            finally:
                feed.close()
            seconds = time.monotonic() - start
            counters = s3_counters(port_file)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {"sequences": sequences, "seconds": seconds,
            "tokens_per_s": sequences * args.sequence_length / seconds,
            "requests_per_batch": counters.get("croupier_s3_requests_total", 0) / args.steps,
            "ranges_per_batch": counters.get("croupier_s3_ranges_total", 0) / args.steps}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--documents", type=int, default=3000)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--sequence-length", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--store-latency-ms", type=float, default=0.0)
    p.add_argument("--json", type=pathlib.Path)
    args = p.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-s3-tokens-"))
    results = []
    try:
        files = tmp / "data"
        files.mkdir()
        local = write_sources(files, args.documents)
        with moto_store(tmp / "moto.log", latency_ms=args.store_latency_ms) as store:
            s3 = store.s3()
            s3.create_bucket(Bucket=BUCKET)
            for prefix in local:
                for ext in (".bin", ".idx"):
                    s3.upload_file(f"{prefix}{ext}", BUCKET, f"lm/{prefix.name}{ext}")
            remote = [f"s3://{BUCKET}/lm/{prefix.name}" for prefix in local]
            for packing in ("concat", "best_fit"):
                for system, sources, env in (("local", [str(x) for x in local], {}),
                                             ("s3", remote, store.env())):
                    r = run_job(args, tmp, f"{system}-{packing}", sources, packing, env)
                    r.update(system=system, packing=packing)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    by = {(r["system"], r["packing"]): r for r in results}
    print(f"\n{args.steps} batches of {args.global_batch} sequences of {args.sequence_length} "
          f"tokens, 1 producer x {args.threads} threads, 1 consumer; moto on loopback"
          + (f", each of its answers {args.store_latency_ms:g} ms late"
             if args.store_latency_ms else "") + "\n")
    print("| packing | system | seconds | M tokens/s | s3 / local | requests / batch | "
          "ranges / batch |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        base = by[("local", r["packing"])]
        ratio = "" if r["system"] == "local" else \
            f"{r['tokens_per_s'] / base['tokens_per_s']:.3f}x"
        print(f"| {r['packing']} | {r['system']} | {r['seconds']:.2f} | "
              f"{r['tokens_per_s'] / 1e6:.2f} | {ratio} | {r['requests_per_batch']:.1f} | "
              f"{r['ranges_per_batch']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
