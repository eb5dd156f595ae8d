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

With --hollow it runs instead the dispatcher's scaling table (issue 36): build/bench/bench_hollow
(hollow consumers and producers in several client processes against one real dispatcher, the
dispatcher pinned to CPU 0 and the clients to CPU 1) at 100, 1,000, 10,000 and 30,000 consumers
(producers at a tenth), one run each, and prints the table in Markdown with the load average before
and after each run and the issue's goals at 10,000 consumers, met or not.

With --hollow --kill-after A it measures recovery instead (issue 36, item 3): each run SIGKILLs the
dispatcher A seconds into its window and starts it again on the same work directory and port
(bench_hollow --kill-after), and the table gives the time until it listens and answers again,
until every consumer and producer has had a heartbeat answered by the new one, and what the check
of the positions found; by default at 1,000 and 10,000 consumers with 60-s windows.

With --hollow --autoscale it runs the autoscaler's policy on the hollow producers instead (issue
36, item 4; bench/hollow_autoscale.h): the consumers' demand needs a tenth as many producers as
there are consumers, a pool of 1.2 times that is there to start, one runs at first, and the
dispatcher's recommended number is followed every 5 s as croupier.autoscale does. The table gives
when the figure reached 90% and 100% of what is needed, the highest number run, the changes, and
the share of the demand delivered over the window (the best fixed count, all needed from the
start, delivers 1.0) and over its last 60 s; by default at 1,000 and 10,000 consumers with 240-s
windows.

usage: .venv/bin/python bench/bench_scale.py [--quick]
       .venv/bin/python bench/bench_scale.py --hollow [--sizes 100,1000,10000,30000]
                                             [--seconds 30] [--build build]
       .venv/bin/python bench/bench_scale.py --hollow --kill-after 10 [--sizes 1000,10000]
                                             [--seconds 60] [--build build]
       .venv/bin/python bench/bench_scale.py --hollow --autoscale [--sizes 1000,10000]
                                             [--seconds 240] [--heartbeat-interval-ms 2000]
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
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


def hollow_run(build, consumers, seconds, kill_after=None, autoscale=False, interval_ms=None,
               connection_per_consumer=False):
    """One bench_hollow run; its summary line and its per-RPC lines. With `autoscale`, the
    consumers' demand needs consumers / 10 producers and 1.2 times that are there to start. With
    `connection_per_consumer`, each hollow consumer has a connection of its own, as a real
    trainer does (else about 25 share one)."""
    processes = 2 if consumers <= 1000 else 4
    cmd = [str(build / "bench" / "bench_hollow"), "--consumers", str(consumers), "--processes",
           str(processes), "--seconds", str(seconds), "--warmup", "5", "--pin"]
    if kill_after is not None:
        cmd += ["--kill-after", str(kill_after)]
    if autoscale:
        needed = max(1, consumers // 10)
        cmd += ["--autoscale", str(needed), "--producers", str(needed * 6 // 5)]
    if interval_ms is not None:
        cmd += ["--heartbeat-interval-ms", str(interval_ms)]
    if connection_per_consumer:
        cmd += ["--connection-per-consumer"]
    env = dict(os.environ)
    env.setdefault("CROUPIER_BIN", str(build / "bin" / "croupier"))
    load = os.getloadavg()[0]
    print(f"[hollow] {' '.join(cmd)} (load {load:.2f})", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          timeout=600 + consumers / 50 + seconds)
    if proc.returncode != 0:
        sys.exit(f"bench_hollow at {consumers} consumers failed:\n{proc.stderr[-3000:]}")
    if proc.stderr.strip():
        print(proc.stderr.strip(), file=sys.stderr)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    summary = next(x for x in lines if x.get("case") == "hollow")
    summary["load_before"], summary["load_after"] = load, os.getloadavg()[0]
    return summary, [x for x in lines if x.get("case") == "rpc"]


def ms(v):
    return f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def hollow_table(runs):
    """The scaling table in Markdown: a row per size."""
    head = ("consumers / producers", "registered in", "heartbeats/s, consumers (due) + producers",
            "Locate/s", "heartbeat p50 / p99 / max", "Locate p99", "dispatcher CPU", "peak RSS",
            "syncs/s", "disk writes", "status size, time", "missed their period", "clients' CPU, beats sent late (p99)",
            "load")
    rows = []
    for s, rpcs in runs:
        by = {r["rpc"]: r for r in rpcs}
        loc = by.get("Locate", {})
        missed = s["consumers_missed"] + s["producers_missed"]
        rows.append((
            f'{s["consumers"]:,} / {s["producers"]:,}', f'{s["register_s"]:.1f} s',
            f'{s["consumer_heartbeats_per_s"]:,.0f} ({s["consumers"]:,}) + '
            f'{s["producer_heartbeats_per_s"]:,.0f}',
            f'{s["locates_per_s"]:,.0f}',
            f'{ms(s["heartbeat_p50_ms"])} / {ms(s["heartbeat_p99_ms"])} / '
            f'{ms(s["heartbeat_max_ms"])} ms',
            f'{ms(loc.get("p99_ms", 0))} ms', f'{s["cpu_cores"]:.2f} cores',
            f'{s["peak_rss_mib"]:.0f} MiB',
            "—" if s["syncs_per_s"] < 0 else f'{s["syncs_per_s"]:,.0f}',
            f'{s["disk_write_bytes_per_s"] / 1e6:.1f} MB/s',
            f'{s["status_bytes"] / 1024:,.0f} KiB, {ms(s["status_max_ms"])} ms max',
            ("none" if missed == 0 and s["late_answers"] == 0 and s["errors"] == 0 else
             f'{s["consumers_missed"]:,} consumers, {s["producers_missed"]:,} producers '
             f'(longest silence {s["max_consumer_gap_s"]:.1f} s / '
             f'{s["max_producer_gap_s"]:.1f} s; {s["late_answers"]:,} answers later than the '
             f'interval, {s["skipped_beats"]:,} beats the clients could not send within an '
             f'interval, {s["errors"]:,} errors)'),
            f'{s["client_cpu_cores"]:.2f} cores, {ms(s["send_late_p99_ms"])} ms',
            f'{s["load_before"]:.1f} → {s["load_after"]:.1f}'))
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def hollow_goals(runs, at=10000):
    """The issue's goals at `at` consumers, each met or not."""
    s = next((s for s, _ in runs if s["consumers"] == at), None)
    if s is None:
        return f"(no run at {at:,} consumers)"
    def mark(ok):
        return "met" if ok else "**not met**"
    every = (s["consumers_missed"] == 0 and s["producers_missed"] == 0 and s["late_answers"] == 0
             and s["errors"] == 0)
    syncs = s["syncs_per_s"]
    goals = [
        ("every heartbeat answered within its period", every,
         f'{s["consumers_missed"]} consumers and {s["producers_missed"]} producers silent past the '
         f'{s["takeover_s"]:g}-s takeover, {s["late_answers"]} answers later than '
         f'{s["heartbeat_interval_s"]:g} s, {s["errors"]} errors'),
        ("heartbeat p99 at most 50 ms", s["heartbeat_p99_ms"] <= 50,
         f'{s["heartbeat_p99_ms"]:.1f} ms'),
        ("the dispatcher under one core", s["cpu_cores"] < 1, f'{s["cpu_cores"]:.2f} cores'),
        ("the dispatcher under 1 GiB", s["peak_rss_mib"] < 1024, f'{s["peak_rss_mib"]:.0f} MiB'),
        ("at most 200 fdatasyncs a second", syncs >= 0 and syncs <= 200,
         "not counted" if syncs < 0 else f"{syncs:,.0f} syncs/s"),
        ("status at most 1 MiB", s["status_bytes"] <= 1 << 20,
         f'{s["status_bytes"] / 1024:,.0f} KiB'),
        ("status within 100 ms", s["status_max_ms"] <= 100, f'{s["status_max_ms"]:.1f} ms max'),
    ]
    out = [f"| goal at {at:,} consumers and {s['producers']:,} producers | measured | |",
           "|---|---|---|"]
    out += [f"| {g} | {v} | {mark(ok)} |" for g, ok, v in goals]
    return "\n".join(out)


def secs(v):
    return "—" if v < 0 else f"{v:.2f} s"


def recovery_table(runs):
    """The recovery table in Markdown: a row per size (bench_hollow --kill-after)."""
    head = ("consumers / producers", "listening again (replay, compaction)",
            "serving again (a Locate answered)", "every client back: consumers p50 / max, "
            "producers max", "longest silence of a consumer before the kill",
            "positions checked: lost / never sent / journaled, answer cut off",
            "errors the clients saw",
            "new dispatcher's descriptors: peak (old one's), failed accepts, connections closed "
            "at once", "load")
    rows = []
    for s, _ in runs:
        back = (secs(s["recovery_all_back_s"]) if s["recovery_all_back_s"] >= 0 else
                f'not reached: {s["consumers_not_back"]:,} consumers, '
                f'{s["producers_not_back"]:,} producers not back by the window\'s end')
        errors = ", ".join(f"{n:,} {code}" for code, n in s["errors_by_code"].items()) or "none"
        if s["consumers_stopped"] or s["producers_registered_again"]:
            errors += (f'; {s["consumers_stopped"]:,} consumers stopped (NOT_FOUND), '
                       f'{s["producers_registered_again"]:,} producers registered again')
        rows.append((
            f'{s["consumers"]:,} / {s["producers"]:,}',
            f'{secs(s["recovery_listen_s"])} ({s["recovery_replay_s"] * 1000:,.0f} ms for '
            f'{s["replayed"]}, {s["recovery_compact_s"] * 1000:,.0f} ms)',
            secs(s["recovery_serving_s"]),
            f'{back} ({secs(s["recovery_consumers_back_p50_s"])} / '
            f'{secs(s["recovery_consumers_back_max_s"])}, '
            f'{secs(s["recovery_producers_back_max_s"])})',
            f'{s["max_consumer_gap_before_kill_s"]:.1f} s',
            f'{s["positions_checked"]:,}: {s["positions_lost"]} / {s["positions_never_sent"]} / '
            f'{s["positions_unanswered_kept"]}'
            + ("" if s["replay_checked_same"] else " (the check replayed other entries)"),
            errors,
            f'{s["restarted_fds_max"]:,} ({s["dispatcher_fds_before_kill"]:,}), '
            f'{s["restarted_accept_failures"]:,}, {s.get("restarted_connections_shed", 0):,}',
            f'{s["load_before"]:.1f} → {s["load_after"]:.1f}'))
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def recovery_goal(runs, at=10000):
    """The issue's recovery goal at `at` consumers, met or not."""
    s = next((s for s, _ in runs if s["consumers"] == at), None)
    if s is None:
        return f"(no run at {at:,} consumers)"
    positions = (s["positions_lost"] == 0 and s["positions_never_sent"] == 0
                 and s["positions_missing"] == 0 and s["positions_went_back"] == 0
                 and s["replay_checked_same"])
    parts = [("serving again within 10 s", 0 <= s["recovery_serving_s"] <= 10,
              secs(s["recovery_serving_s"])),
             ("every client back within 30 s", 0 <= s["recovery_all_back_s"] <= 30,
              secs(s["recovery_all_back_s"])),
             ("no position lost or never sent", positions,
              f'{s["positions_checked"]:,} checked, {s["positions_lost"]} lost, '
              f'{s["positions_never_sent"]} never sent')]
    return "\n".join(f'- {g} at {at:,} consumers: {v}, {"met" if ok else "**not met**"}'
                     for g, ok, v in parts)


def autoscale_table(runs):
    """The autoscaler's table in Markdown: a row per size (bench_hollow --autoscale)."""
    head = ("consumers, heartbeat interval", "producers needed / pool", "first figure",
            "90% / 100% of needed running", "highest run, last figure, changes",
            "demand delivered: window (best fixed 1.0) / last 60 s",
            "dispatcher CPU, peak RSS", "heartbeat p99, every client in its period", "load")
    rows = []
    for s, _ in runs:
        a = s["autoscale"]
        rows.append((
            f'{s["consumers"]:,}, {s["heartbeat_interval_s"]:g} s',
            f'{a["needed"]:,} / {a["pool"]:,}',
            secs(a["first_figure_s"]),
            f'{secs(a["reached_90_s"])} / {secs(a["reached_s"])}',
            f'{a["max_live"]:,}, {a["final_wanted"]:,}, {a["changes"]}',
            f'{a["delivered_mean"]:.3f} / {a["delivered_last_60s"]:.3f}',
            f'{s["cpu_cores"]:.2f} cores, {s["peak_rss_mib"]:.0f} MiB',
            f'{ms(s["heartbeat_p99_ms"])} ms, {"yes" if s["met_period"] else "no"}',
            f'{s["load_before"]:.1f} → {s["load_after"]:.1f}'))
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def hollow_main(args):
    build = pathlib.Path(args.build).resolve()
    if not (build / "bench" / "bench_hollow").exists():
        sys.exit(f"{build / 'bench' / 'bench_hollow'} is not built: make build (or cmake --build "
                 f"{build} --target bench_hollow)")
    recovery = args.kill_after is not None
    sizes = [int(x) for x in (args.sizes or ("1000,10000" if recovery or args.autoscale else
                                             "100,1000,10000,30000")).split(",")]
    seconds = args.seconds or (60 if recovery else 240 if args.autoscale else 30)
    started = datetime.datetime.now(datetime.timezone.utc)
    runs = []
    for n in sizes:
        summary, rpcs = hollow_run(build, n, seconds, args.kill_after, args.autoscale,
                                   args.heartbeat_interval_ms, args.connection_per_consumer)
        for line in rpcs + [summary]:
            print(json.dumps(line), flush=True)
        runs.append((summary, rpcs))
    flags = (f"{' --kill-after ' + str(args.kill_after) if recovery else ''}"
             f"{' --autoscale' if args.autoscale else ''}"
             f"{' --heartbeat-interval-ms ' + str(args.heartbeat_interval_ms) if args.heartbeat_interval_ms else ''}"
             f"{' --connection-per-consumer' if args.connection_per_consumer else ''}")
    print(f"\nbench/bench_scale.py --hollow{flags}"
          f", {started:%Y-%m-%d %H:%M} UTC, {seconds} s windows\n", flush=True)
    if recovery:
        print(recovery_table(runs) + "\n\n" + recovery_goal(runs), flush=True)
    elif args.autoscale:
        print(autoscale_table(runs), flush=True)
    else:
        print(hollow_table(runs) + "\n\n" + hollow_goals(runs), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--hollow", action="store_true",
                        help="the dispatcher's scaling table with hollow clients")
    parser.add_argument("--sizes", default=None,
                        help="100,1000,10000,30000; with --kill-after 1000,10000")
    parser.add_argument("--seconds", type=int, default=None, help="30; with --kill-after 60")
    parser.add_argument("--kill-after", type=float, default=None,
                        help="with --hollow: SIGKILL and restart the dispatcher this many "
                             "seconds into each window, and measure its recovery")
    parser.add_argument("--autoscale", action="store_true",
                        help="with --hollow: the autoscaler's policy on the hollow producers")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=None,
                        help="with --hollow: the dispatcher's heartbeat interval (default 1000)")
    parser.add_argument("--connection-per-consumer", action="store_true",
                        help="with --hollow: each hollow consumer has a connection of its own")
    parser.add_argument("--build", default=str(ROOT / "build"))
    args = parser.parse_args()
    if (args.autoscale or args.heartbeat_interval_ms or args.connection_per_consumer) and \
            not args.hollow:
        parser.error("--autoscale, --heartbeat-interval-ms and --connection-per-consumer go with "
                     "--hollow")
    if args.autoscale and args.kill_after is not None:
        parser.error("--autoscale and --kill-after are separate runs")
    if args.hollow:
        hollow_main(args)
        return
    with tempfile.TemporaryDirectory(prefix="croupier-scale-") as tmp:
        work = pathlib.Path(tmp)
        for shm in ("on", "off"):
            stall(work, 15 if args.quick else 60, shm)
        scale(work, 8 if args.quick else 32)


if __name__ == "__main__":
    main()
