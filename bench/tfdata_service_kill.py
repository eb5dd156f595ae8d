#!/usr/bin/env python3
"""What a worker crash costs: tf.data service against croupier, on the same job.

tf.data service: a DispatchServer (in this process) and two WorkerServers, each in its own
subprocess so that one can be SIGKILLed, serve `range(N).batch(B)` in `distributed_epoch` mode
under one shared `job_name` to 4 consumers (threads of this process, each pacing itself at
--pace-ms per batch like a training step). Once a quarter of the epoch is consumed, one worker is
SIGKILLed. Every element carries its own number, so the consumers' elements say which were lost
and which came twice.

croupier: the same job (N records whose `id` is their number, batch B, 4 consumers at the same
pace, 2 producers, tests/service_cluster.py's Cluster), with one producer SIGKILLed at the same
point. Both sides declare a worker dead after the same silence (--worker-timeout-ms: tf.data's
worker_timeout_ms with a 250 ms worker heartbeat; croupier's --producer-timeout-ms).

The longest stall is the longest time a consumer waited between two consecutive batches
(including the pacing). tf.data's is timed in the consumer thread; croupier's from the consumers'
--output files, sampled every 20 ms.

    .venv/bin/python bench/tfdata_service_kill.py [--records 3072] [--trials 3]

prints a table per trial and the totals. Every process it starts is killed and waited for.
"""
import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH, CONSUMERS, WORKERS = 16, 4, 2


# --- tf.data service --------------------------------------------------------------------------

def worker_main(dispatcher_address, heartbeat_ms):
    """A tf.data service worker in its own process: prints its port, then serves until killed."""
    import tensorflow as tf
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=dispatcher_address,
                                                  heartbeat_interval_ms=heartbeat_ms))
    print(f"worker ready on port {worker._address}", flush=True)
    worker.join()


def start_worker(dispatcher_address, heartbeat_ms, log_path):
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, __file__, "--worker", dispatcher_address,
                             "--heartbeat-ms", str(heartbeat_ms)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    proc.log_path = log_path
    return proc


def wait_ready(proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "worker ready" in pathlib.Path(proc.log_path).read_text():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"a worker exited: {pathlib.Path(proc.log_path).read_text()}")
        time.sleep(0.1)
    raise RuntimeError(f"a worker did not start within {timeout} s")


def tfdata_trial(records, pace_ms, worker_timeout_ms, work_dir, kill_fraction=0.25,
                 timeout=60):
    import tensorflow as tf
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(
        port=0, worker_timeout_ms=worker_timeout_ms))
    address = dispatcher.target.split("://")[-1]
    workers = []
    try:
        workers = [start_worker(address, 250, work_dir / f"tf-worker{i}.log")
                   for i in range(WORKERS)]
        for w in workers:
            wait_ready(w, 60)
        planned = list(range(records - records % BATCH))  # whole batches, like croupier's drop
        received = [[] for _ in range(CONSUMERS)]  # per consumer: [(time, ids)]
        errors = []
        total = len(planned) // BATCH
        progress = [0]
        lock = threading.Lock()

        def consume(c):
            try:
                ds = tf.data.Dataset.range(records).batch(BATCH, drop_remainder=False)
                ds = ds.apply(service.distribute(processing_mode="distributed_epoch",
                                                 service=dispatcher.target, job_name="kill"))
                for batch in ds:
                    received[c].append((time.monotonic(), batch.numpy().tolist()))
                    with lock:
                        progress[0] += 1
                    time.sleep(pace_ms / 1000)
            except Exception as e:  # noqa: BLE001 - reported in the table
                errors.append(f"consumer {c}: {type(e).__name__}: {e}")

        start = time.monotonic()
        threads = [threading.Thread(target=consume, args=(c,), daemon=True)
                   for c in range(CONSUMERS)]
        for t in threads:
            t.start()
        deadline = start + timeout
        while progress[0] < total * kill_fraction and time.monotonic() < deadline:
            if not any(t.is_alive() for t in threads):
                break
            time.sleep(0.01)
        killed_at = progress[0]
        workers[1].send_signal(signal.SIGKILL)
        workers[1].wait(timeout=10)
        for t in threads:
            t.join(timeout=max(0.1, deadline - time.monotonic()))
        hung = sum(t.is_alive() for t in threads)
        elapsed = time.monotonic() - start
        got = [i for per in received for _, ids in per for i in ids]
        stall = 0.0
        for per in received:
            for (a, _), (b, _) in zip(per, per[1:]):
                stall = max(stall, b - a)
        gap = stall  # between batches received, leaving out a wait for an end that never came
        # A consumer still waiting at the deadline stalled at least that long.
        for per, t in zip(received, threads):
            if t.is_alive() and per:
                stall = max(stall, time.monotonic() - per[-1][0])
        lost = len(set(planned) - set(got))
        return {
            "system": "tf.data service", "planned": len(planned), "received": len(got),
            "lost": lost, "duplicated": len(got) - len(set(got)),
            "stall_s": stall, "gap_s": gap, "elapsed_s": elapsed,
            "killed_after_batches": killed_at, "hung_consumers": hung, "errors": errors,
            "per_consumer_batches": [len(p) for p in received],
        }
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGKILL)
            w.wait(timeout=10)
        dispatcher._stop()


# --- croupier ---------------------------------------------------------------------------------

def croupier_trial(records, pace_ms, producer_timeout_ms, work_dir, kill_fraction=0.25,
                   timeout=60):
    from service_cluster import Cluster, OutputWatch, read_batches, run
    features = "id:int64,label:int64,image:bytes"
    data = work_dir / "data"
    if not data.exists():
        run("synth", "--out", data, "--files", 3, "--records", records, "--image-bytes", 16,
            "--quiet")
    files = sorted(data.glob("*.tfrecord"))
    steps = records // (BATCH * CONSUMERS)
    with Cluster(work_dir / "cluster", producer_timeout_ms=producer_timeout_ms) as cluster:
        for _ in range(WORKERS):
            cluster.add_producer()
        cluster.create_job("kill", files, features, BATCH, CONSUMERS, seed=1, epochs=1,
                           shuffle="none")
        outs = [work_dir / f"rank{r}.jsonl" for r in range(CONSUMERS)]
        start = time.monotonic()
        procs = [cluster.start_consumer("kill", r, CONSUMERS, outs[r], 1, "--slow-ms", pace_ms)
                 for r in range(CONSUMERS)]
        watch = OutputWatch(outs)
        watch.wait_for(int(steps * kill_fraction), procs, timeout=60)
        killed_at = sum(watch.counts)
        cluster.producers[1].send_signal(signal.SIGKILL)
        cluster.producers[1].wait(timeout=10)
        errors = []
        try:
            watch.follow(cluster, procs, timeout=timeout)
        except AssertionError as e:
            errors.append(str(e)[:300])
        elapsed = time.monotonic() - start
    got = [i for o in outs if o.exists() for b in read_batches(o) for i in b["ids"]]
    planned = steps * CONSUMERS * BATCH
    return {
        "system": "croupier", "planned": planned, "received": len(got),
        "lost": len(set(range(records)) - set(got)) - (records - planned),
        "duplicated": len(got) - len(set(got)),
        "stall_s": watch.longest, "gap_s": watch.longest, "elapsed_s": elapsed,
        "killed_after_batches": killed_at,
        "hung_consumers": 0, "errors": errors,
        "per_consumer_batches": watch.counts[:],
    }


# --- the comparison ---------------------------------------------------------------------------

def table(rows):
    head = ("system", "trial", "planned", "received", "lost", "duplicated", "longest stall",
            "longest gap between batches", "epoch time", "batches per consumer")
    lines = [head]
    for r in rows:
        lines.append((r["system"], str(r["trial"]), str(r["planned"]), str(r["received"]),
                      str(r["lost"]), str(r["duplicated"]),
                      (">= " if r["hung_consumers"] else "") + f"{r['stall_s']:.2f} s",
                      f"{r['gap_s']:.2f} s",
                      f"{r['elapsed_s']:.1f} s" + (f" ({r['hung_consumers']} never ended)"
                                                   if r["hung_consumers"] else ""),
                      "/".join(map(str, r["per_consumer_batches"]))))
    widths = [max(len(x[i]) for x in lines) for i in range(len(head))]
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(x.ljust(w) for x, w in zip(line, widths)))
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--heartbeat-ms", type=int, default=250, help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=3072,
                        help="elements (records), a multiple of 64 for equal comparisons")
    parser.add_argument("--pace-ms", type=int, default=60, help="each consumer's time per batch")
    parser.add_argument("--worker-timeout-ms", type=int, default=1500)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=60,
                        help="seconds an epoch may take before its consumers are given up on")
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker, args.heartbeat_ms)
        return 0
    work = pathlib.Path(tempfile.mkdtemp(prefix="croupier-tfdata-kill-"))
    rows = []
    try:
        for trial in range(1, args.trials + 1):
            for fn in (tfdata_trial, croupier_trial):
                d = work / f"{fn.__name__}-{trial}"
                d.mkdir()
                r = fn(args.records, args.pace_ms, args.worker_timeout_ms, d,
                       timeout=args.deadline)
                r["trial"] = trial
                rows.append(r)
                print(f"trial {trial} {r['system']}: lost {r['lost']}, duplicated "
                      f"{r['duplicated']}, longest stall {r['stall_s']:.2f} s"
                      + (f", errors: {r['errors']}" if r["errors"] else "")
                      + (f", {r['hung_consumers']} consumers still waiting at the deadline"
                         if r["hung_consumers"] else ""), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"One of 2 workers/producers SIGKILLed after a quarter of a {args.records}-element epoch "
          f"(batch {BATCH}, {CONSUMERS} consumers at {args.pace_ms} ms/batch, worker timeout "
          f"{args.worker_timeout_ms} ms):")
    print(table(rows))
    for system in ("tf.data service", "croupier"):
        mine = [r for r in rows if r["system"] == system]
        print(f"{system}: over {len(mine)} trials, lost {sum(r['lost'] for r in mine)} and "
              f"duplicated {sum(r['duplicated'] for r in mine)} of "
              f"{sum(r['planned'] for r in mine)} elements; longest stall "
              f"{max(r['stall_s'] for r in mine):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
