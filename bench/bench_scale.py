#!/usr/bin/env python3
"""Two service-level goals, with real processes (tests/service_cluster.py's Cluster):

  stall: a producer with a 64 MiB buffer (and room for 64 tasks, so that the buffer is the
         bound) serving 2 consumers on this host, one of which stops reading for 60 s (15 s with
         --quick) at step 5; the producer's peak memory during the stall (its RSS less the
         pages of the files it maps: service_cluster.rss_bytes) against its buffer bound
         + 64 MiB, with shared memory on (the segments it maps count) and off; the peak of the
         file pages is reported beside it;
  scale: 1 producer -> 32 `croupier consume` processes, one epoch; every consumer must take the
         same number of steps, and every record must come once.

JSON lines on stdout ({"bench": "scale", ...}), read by bench/run.py.

usage: .venv/bin/python bench/bench_scale.py [--quick]
"""
import argparse
import json
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "python"))

from service_cluster import (Cluster, file_rss_bytes, read_batches, rss_bytes,  # noqa: E402
                             synth_dataset)

FEATURES = "id:int64,label:int64,image:bytes"


def stall(work, seconds, shm):
    files = sorted((work / "stall-data").glob("*.tfrecord")) or synth_dataset(
        work / "stall-data", 4000, files=2, image_bytes=32768)
    buffer_bytes = 64 << 20
    with Cluster(work / f"stall-{shm}") as cluster:
        # Enough tasks that the buffer, not the task limit, is what bounds the producer.
        producer = cluster.add_producer("--buffer-bytes", buffer_bytes, "--max-tasks", "64",
                                        "--shm", shm)
        cluster.create_job("stall", files, FEATURES, 16, 2, seed=1, epochs=1)
        outs = [work / f"stall-{shm}-{r}.jsonl" for r in range(2)]
        procs = [cluster.start_consumer("stall", r, 2, outs[r], 1,
                                        *(("--pause-at-step", "5", "--pause-seconds",
                                           str(seconds), "--timeout-ms", "120000")
                                          if r == 1 else ())) for r in range(2)]
        time.sleep(1)
        base = rss_bytes(producer.pid)
        peak, peak_file = base, file_rss_bytes(producer.pid)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            peak = max(peak, rss_bytes(producer.pid))
            peak_file = max(peak_file, file_rss_bytes(producer.pid))
            time.sleep(0.1)
        cluster.wait(procs, timeout=seconds + 120)
    counts = [len(read_batches(o)) for o in outs]
    bound = buffer_bytes + (64 << 20)
    print(json.dumps({"bench": "scale", "case": "stall", "shm": shm, "seconds": seconds,
                      "producer_peak_rss_mib": peak / 2**20,
                      "producer_rss_at_start_mib": base / 2**20,
                      "producer_peak_file_rss_mib": peak_file / 2**20,
                      "bound_mib": bound / 2**20, "met": peak <= bound,
                      "equal_counts": counts[0] == counts[1]}), flush=True)


def scale(work, consumers):
    files = synth_dataset(work / "scale-data", consumers * 16 * 20, files=4, image_bytes=256)
    records = consumers * 16 * 20
    with Cluster(work / "scale") as cluster:
        cluster.add_producer()
        cluster.create_job("scale", files, FEATURES, 16, consumers, seed=3, epochs=1)
        outs = [work / f"scale{r}.jsonl" for r in range(consumers)]
        start = time.monotonic()
        procs = [cluster.start_consumer("scale", r, consumers, outs[r]) for r in range(consumers)]
        cluster.wait(procs, timeout=600)
        took = time.monotonic() - start
    per_rank = [read_batches(o) for o in outs]
    steps = {len(b) for b in per_rank}
    ids = [i for b in per_rank for batch in b for i in batch["ids"]]
    print(json.dumps({"bench": "scale", "case": "consumers", "consumers": consumers,
                      "seconds": took, "steps_per_consumer": sorted(steps),
                      "equal_counts": len(steps) == 1,
                      "records_once": len(ids) == len(set(ids)) == records,
                      "met": len(steps) == 1 and len(ids) == len(set(ids)) == records}),
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="croupier-scale-") as tmp:
        work = pathlib.Path(tmp)
        for shm in ("on", "off"):
            stall(work, 15 if args.quick else 60, shm)
        scale(work, 8 if args.quick else 32)


if __name__ == "__main__":
    main()
