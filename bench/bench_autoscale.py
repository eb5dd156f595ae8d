#!/usr/bin/env python3
"""The autoscaler against fixed numbers of producers, on a job whose producers are the bottleneck.

Each producer has one thread and every batch costs it a fixed 40 ms more to make
(`--test-make-delay-ms`: a cost that sleeps, so that producers scale on 2 cores): one producer
makes about 25 batches/s. Two trainers (croupier.Consumer on threads) each take a fixed step time
per batch (`--step-ms`, default 30 ms, a sleep): fed fully, they take about 66 batches/s, so some
fixed count of producers keeps them from waiting and the input-bound goal is fair. Runs, one after
the other, each `--seconds` long:
  - fixed: 1, 2, 3 and 4 producers (croupier.local_cluster(producers=k));
  - auto: croupier.local_cluster(producers="auto", max_producers=4), starting from 1, with the
    dispatcher's fall damping shortened (--advice-smoothing-ms 5000, --advice-hold-ms 6000; rises
    wait 2 s and changes are 8 s apart, the advisor's defaults) and the loop checking every
    second; after the run's first part the trainers slow down (150 ms a step) for
    `--slow-seconds`, to see it scale in.
Figures, each against a baseline measured in this run (JSON lines for bench/run.py):
  - throughput (batches/s over the run, after `--warmup` s) of auto / of the best fixed count
    (goal >= 0.9);
  - producer-seconds (live producers integrated over the same window) of auto / of that fixed run
    (goal <= 1.1);
  - the trainers' input-bound share (time waiting in next()) once auto has settled (goal <= 0.10;
    each fixed run's share over its window is printed too, to show which counts feed them);
  - the time until auto reached the count it kept (goal <= 30 s);
  - the producers left once the trainers slowed (goal: fewer than at the peak);
  - the batches' content: each rank's hashes of auto equal those of the fixed runs (goal: equal).

usage: .venv/bin/python bench/bench_autoscale.py [--seconds 40] [--warmup 5] [--step-ms 30]
       [--quick] [--auto-only --trace]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))
import croupier  # noqa: E402
from service_cluster import synth_dataset  # noqa: E402

FEATURES = "id:int64,label:int64,image:bytes"
RECORDS, BATCH, WORLD, SEED = 4096, 16, 2, 7
DELAY_MS = 40
DAMPING = ["--advice-smoothing-ms", "5000", "--advice-hold-ms", "6000"]
SLOW_STEP_S = 0.15


class Trainers:
    """WORLD consumers on threads, each reading the job's epochs; records per-step timestamps,
    content hashes and time spent waiting."""

    def __init__(self, cluster: Any, pause: Callable[[], float]) -> None:
        self.pause = pause
        self.stop = threading.Event()
        self.times: list[list[float]] = [[] for _ in range(WORLD)]
        self.hashes: list[list[Any]] = [[] for _ in range(WORLD)]
        # (time, seconds waited for that batch)
        self.waits: list[list[tuple[float, float]]] = [[] for _ in range(WORLD)]
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self.read, args=(cluster, r), daemon=True)
                        for r in range(WORLD)]
        for t in self.threads:
            t.start()

    def read(self, cluster: Any, rank: int) -> None:
        try:
            feed = cluster.consumer("bench", rank, WORLD, timeout=120)
            epoch = 0
            while not self.stop.is_set():
                it = iter(feed.batches(epoch))
                while not self.stop.is_set():
                    began = time.monotonic()
                    batch = next(it, None)
                    if batch is None:
                        break
                    now = time.monotonic()
                    self.waits[rank].append((now, now - began))
                    self.times[rank].append(now)
                    self.hashes[rank].append(batch.content_hash)
                    if self.pause():
                        time.sleep(self.pause())
                epoch += 1
            feed.close()
        except Exception as e:  # reported by the run
            self.errors.append(f"rank {rank}: {type(e).__name__}: {e}")

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
        if self.errors:
            raise RuntimeError("; ".join(self.errors))


def run(files: list[pathlib.Path], workdir: pathlib.Path, producers: int | str, seconds: float,
        warmup: float, step: float, slow_seconds: float = 0.0,
        trace: bool = False) -> dict[str, Any]:
    """One run; returns its figures."""
    auto = producers == "auto"
    slow = {"on": False}
    with croupier.local_cluster(producers=producers, max_producers=4, autoscale_interval=1.0,
                                work_dir=workdir, dispatcher_args=DAMPING,
                                producer_args=["--threads", "1", "--test-make-delay-ms",
                                               str(DELAY_MS)]) as cluster:
        cluster.create_job("bench", [str(f) for f in files], FEATURES, BATCH, consumers=WORLD,
                           seed=SEED, epochs=0)
        start = time.monotonic()
        counts: list[tuple[float, int]] = []  # (time, live producers), sampled
        trainers = Trainers(cluster, pause=lambda: SLOW_STEP_S if slow["on"] else step)
        end = start + seconds
        traced = start
        while time.monotonic() < end + slow_seconds:
            now = time.monotonic()
            if now >= end and not slow["on"]:
                slow["on"] = True
            counts.append((now, len(cluster.live_producers)))
            if trace and now - traced >= 1.0:
                traced = now
                advice = cluster.status().get("producer_advice", {})
                print(f"{now - start:5.1f} s  {counts[-1][1]} producers, recommended "
                      f"{advice.get('recommended', 0)}: {advice.get('reason', '')}",
                      file=sys.stderr, flush=True)
            time.sleep(0.1)
        trainers.join()
        changes = list(cluster.autoscaler.changes) if auto else []
    window = (start + warmup, end)
    batches = sum(1 for ts in trainers.times for t in ts if window[0] <= t < window[1])
    span = window[1] - window[0]
    producer_seconds = sum(c * 0.1 for t, c in counts if window[0] <= t < window[1])
    # When the count last changed during the fast part, and what it settled at.
    fast = [(t, c) for t, c in counts if t < end]
    settled_at, final = start, fast[-1][1]
    for (t0, c0), (t1, c1) in zip(fast, fast[1:]):
        if c1 != c0:
            settled_at = t1
    # Each wait counts for its part after settling and before the slowdown (a wait that began
    # earlier counts only from settled_at).
    waited = sum(min(w, t - settled_at) for ws in trainers.waits for t, w in ws
                 if settled_at <= t < end)
    wall = WORLD * max(1e-9, end - settled_at)
    waited_window = sum(min(w, t - window[0]) for ws in trainers.waits for t, w in ws
                        if window[0] <= t < window[1])
    return {
        "producers": producers,
        "batches_per_s": batches / span,
        "producer_seconds": producer_seconds,
        "input_bound_after_settling": waited / wall,
        "input_bound": waited_window / (WORLD * span),
        "settle_s": settled_at - start,
        "settled_count": final,
        "peak": max(c for _, c in counts),
        "after_slowdown": counts[-1][1],
        "changes": changes,
        "hashes": trainers.hashes,
    }


def line(case: str, unit: str, value: float, baseline: str, baseline_value: float, goal: str,
         met: bool) -> None:
    ratio = value / baseline_value if baseline_value else None
    print(json.dumps({"bench": "autoscale", "case": case, "unit": unit, "value": value,
                      "baseline": baseline, "baseline_value": baseline_value, "ratio": ratio,
                      "goal": goal, "met": bool(met)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    # Long enough for a fall from 2 producers to 1, which needs the smoothed target at 0.8 or
    # less: about 25 s after the slowdown with this run's damping (a 29 November run fell at
    # 24.5 s, past the 25 s this was).
    parser.add_argument("--slow-seconds", type=float, default=40.0)
    parser.add_argument("--step-ms", type=float, default=30.0,
                        help="each trainer's step time (a sleep per batch)")
    parser.add_argument("--quick", action="store_true", help="shorter runs (20 s, 2 s warm-up)")
    parser.add_argument("--trace", action="store_true",
                        help="print the dispatcher's advice every second of the auto run")
    parser.add_argument("--auto-only", action="store_true",
                        help="only the auto run, its figures not compared (with --trace)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.slow_seconds = 20.0, 2.0, 15.0
    with tempfile.TemporaryDirectory(prefix="croupier-bench-autoscale-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        files = synth_dataset(tmp / "data", RECORDS, files=2, image_bytes=64)
        step = args.step_ms / 1000
        if args.auto_only:
            auto = run(files, tmp / "auto", "auto", args.seconds, args.warmup, step,
                       args.slow_seconds, args.trace)
            print(json.dumps({k: v for k, v in auto.items() if k != "hashes"}), flush=True)
            return
        fixed = [run(files, tmp / f"fixed{k}", k, args.seconds, args.warmup, step)
                 for k in (1, 2, 3, 4)]
        auto = run(files, tmp / "auto", "auto", args.seconds, args.warmup, step, args.slow_seconds,
                   args.trace)
    for f in fixed:
        print(json.dumps({"bench": "autoscale", "run": f"fixed {f['producers']}",
                          "batches_per_s": round(f["batches_per_s"], 1),
                          "producer_seconds": round(f["producer_seconds"], 1),
                          "input_bound": round(f["input_bound"], 3)}), flush=True)
    print(json.dumps({"bench": "autoscale", "run": "auto", "changes": auto["changes"],
                      "batches_per_s": round(auto["batches_per_s"], 1),
                      "producer_seconds": round(auto["producer_seconds"], 1),
                      "settle_s": round(auto["settle_s"], 1), "peak": auto["peak"],
                      "input_bound": round(auto["input_bound"], 3),
                      "after_slowdown": auto["after_slowdown"]}), flush=True)
    best = max(fixed, key=lambda f: f["batches_per_s"])
    # The fewest producers within 5% of the best throughput: what a user would pick.
    best = min((f for f in fixed if f["batches_per_s"] >= 0.95 * best["batches_per_s"]),
               key=lambda f: f["producers"])
    name = f"{best['producers']} fixed producers"
    line("throughput, auto / best fixed", "batches/s", auto["batches_per_s"], name,
         best["batches_per_s"], ">= 0.9", auto["batches_per_s"] >= 0.9 * best["batches_per_s"])
    line("producer-seconds, auto / best fixed", "producer-s", auto["producer_seconds"], name,
         best["producer_seconds"], "<= 1.1",
         auto["producer_seconds"] <= 1.1 * best["producer_seconds"])
    # Two figures have a bound rather than a baseline: the ratio is to the bound.
    line("input-bound share once settled (auto)", "share", auto["input_bound_after_settling"],
         "the bound", 0.10, "<= 1.0", auto["input_bound_after_settling"] <= 0.10)
    line("time to settle (auto)", "s", auto["settle_s"], "the bound", 30.0, "<= 1.0",
         auto["settle_s"] <= 30)
    line("producers after the trainers slowed (auto)", "producers", auto["after_slowdown"],
         "the peak", auto["peak"], "< peak", auto["after_slowdown"] < auto["peak"])
    steps = min(min(len(h) for h in r["hashes"]) for r in [*fixed, auto])
    same = all(r["hashes"][k][:steps] == fixed[0]["hashes"][k][:steps]
               for r in [*fixed, auto] for k in range(WORLD))
    line(f"same bytes as the fixed runs (first {steps} steps of each rank)", "equal",
         1.0 if same else 0.0, "1 fixed producer", 1.0, "equal", same)


if __name__ == "__main__":
    main()
