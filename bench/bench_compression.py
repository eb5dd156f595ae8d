#!/usr/bin/env python3
"""When per-job compression (JobSpec.compression) pays: delivered records/s of text-like,
compressible records over a throttled link, for none, lz4 and zstd at two link rates.

The whole cluster (dispatcher, one producer with --shm off, one `croupier consume`) runs in a
network namespace of its own whose loopback is throttled with `tc qdisc ... tbf` to the link rate;
each case is one epoch of its own job over the same files, timed from the consumer's start to its
exit (connection set-up included, which is small against the transfer). JSON lines on stdout:
  {"bench": "compression", "link_mbit", "codec", "records_per_s", "mb_per_s", "seconds",
   "records", "dataset_bytes"}
mb_per_s counts the TFRecord bytes delivered per second (MB = 1e6 bytes).

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), `ip` and `tc`; without them it prints why on stderr
and exits 0 with no results. The namespace is deleted at the end, whatever happened.

usage: .venv/bin/python bench/bench_compression.py [--quick]
"""
import argparse
import json
import os
import pathlib
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

FEATURES = "id:int64,text:bytes"
BATCH = 256
WORDS = [w.encode() for w in (
    "the batch of records is dealt to every trainer once in a seeded order per epoch while the "
    "producer reads its files and the consumer takes what the dispatcher assigns it with no "
    "record twice and none missing across ranks after a crash or a restart of any process").split()]


def _varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _field(number, payload):
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _example(i, text):
    """tf.train.Example {id: int64_list [i], text: bytes_list [text]}."""
    ident = _field(1, _field(1, b"id") + _field(2, _field(3, _field(1, _varint(i)))))
    body = _field(1, _field(1, b"text") + _field(2, _field(1, _field(1, text))))
    return _field(1, ident + body)


def make_dataset(out_dir, records):
    import croupier
    rng = random.Random(1)
    paths = []
    per_file = records // 2
    for f in range(2):
        path = out_dir / f"text-{f}.tfrecord"
        croupier.write_tfrecord(str(path), [
            _example(i, b" ".join(rng.choice(WORDS) for _ in range(rng.randrange(300, 700))))
            for i in range(f * per_file, (f + 1) * per_file)])
        paths.append(path)
    return paths


def sh(*args):
    proc = subprocess.run([*map(str, args)], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))}: {proc.stderr.strip()}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print("bench_compression: skipped (needs root, ip and tc to throttle a network "
              "namespace's loopback)", file=sys.stderr)
        return
    from service_cluster import Cluster
    records = 8000 if args.quick else 24000
    links = [100, 1000]  # Mbit/s
    ns = f"croupier-bench-{os.getpid() % 100000}{secrets.token_hex(2)}"
    netns = ["ip", "netns", "exec", ns]
    with tempfile.TemporaryDirectory(prefix="croupier-bench-compression-") as tmp:
        tmp = pathlib.Path(tmp)
        files = make_dataset(tmp, records)
        dataset_bytes = sum(p.stat().st_size for p in files)
        try:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            with Cluster(tmp / "cluster", dispatcher_prefix=netns, client_prefix=netns) as cluster:
                cluster.add_producer("--shm", "off", prefix=netns)
                job = 0
                for mbit in links:
                    # burst: at least one 64 KiB loopback segment; a small queue (latency).
                    sh("tc", "-n", ns, "qdisc", "replace", "dev", "lo", "root", "tbf", "rate",
                       f"{mbit}mbit", "burst", "256kb", "latency", "50ms")
                    for codec in ("none", "lz4", "zstd"):
                        job += 1
                        name = f"j{job}-{codec}-{mbit}"
                        cluster.create_job(name, files, FEATURES, BATCH, 1, seed=3,
                                           compression=codec)
                        out = tmp / f"{name}.jsonl"
                        start = time.monotonic()
                        proc = cluster.start_consumer(name, 0, 1, out, 1, "--quiet",
                                                      "--shm", "off", prefix=netns)
                        cluster.wait([proc], timeout=600)
                        seconds = time.monotonic() - start
                        got = sum(json.loads(line)["records"]
                                  for line in out.read_text().splitlines() if line)
                        delivered_bytes = dataset_bytes * got / records
                        print(json.dumps({
                            "bench": "compression", "link_mbit": mbit, "codec": codec,
                            "records_per_s": round(got / seconds, 1),
                            "mb_per_s": round(delivered_bytes / seconds / 1e6, 2),
                            "seconds": round(seconds, 3), "records": got,
                            "dataset_bytes": dataset_bytes}), flush=True)
        finally:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)


if __name__ == "__main__":
    main()
