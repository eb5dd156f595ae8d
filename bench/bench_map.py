#!/usr/bin/env python3
"""A user's own pipeline, JPEG images decoded with PIL into batches for 4 trainer processes, in
records/s, for each system on the same workloads, the same cores and the same number of workers
doing the decode and transform; beside each, its CPU time per record and its fraction of the
machine's decode limit, measured in the same run.

Workloads (--workload, a comma list; default small,large,decode; bench/map_workloads.py):

  small         64x64 JPEGs -> random crop 56 + flip -> normalise to float32 (--uint8: uint8),
                batches of 32; the dataset decodes and the transform is the system's per-record
                hook where it has one (in __getitem__ for DataLoader and serve); 32,768 records.
  large         256x256 JPEGs -> random crop 224 + flip -> normalise, batches of 64, the WHOLE
                transform in the dataset's __getitem__ for every system (croupier gets no
                transform=: the source does it all); 16,384 records.
  decode        the 64x64 JPEGs decoded and collated, nothing else (uint8), batches of 32;
                32,768 records: the workload of the decode-limit goal.
  decode_large  the same on the 256x256 JPEGs, batches of 64; 16,384 records (by name only).

The images are made once with PIL and kept in the temp folder (croupier-bench-map/, by size and
count; --cache-dir). Each system reads one epoch of them (--images N: N records on every
workload).

The CPU budget. Every process of a run is pinned (os.sched_setaffinity) to the same cores
(--cpus, default all of this process's: both cores of the 2-core machine), and every system has
--workers (W = 4) workers doing the decode and transform (processes or threads, as below), and
4 trainer processes; some also have a serving process and a dispatcher, whose CPU time counts:

  croupier        croupier.produce(dataset, ...) in one producer process with W worker
                  processes (a map job: global shuffle, every guarantee of a TFRecord job), a
                  dispatcher process, 4 croupier.Consumer processes;
  croupier_batch  the same map job with crop, flip and normalise vectorised on the collated
                  batch (batch_transform), the W workers only decoding (small and large only);
  croupier_threads  the same map job with W / 2 worker processes, each reading, decoding and
                  transforming a batch's records on 2 threads (transform_threads=2);
  dataloader      4 trainer processes, each a torch DataLoader over the dataset with a
                  DistributedSampler (shuffle on) and W / 4 worker processes;
  serve           croupier.serve(DataLoader(dataset, shuffle=True, num_workers=W)) in one
                  process (a stream: no failover, no exact resume), a dispatcher process, 4
                  croupier.Consumer processes;
  grain           4 trainer processes, each a Grain pipeline (grain.MapDataset) over its part of
                  one seeded global shuffle (dataset[rank::4]; on small, the transform as
                  random_map), batch, to_iter_dataset(ReadOptions(num_threads=--grain-threads,
                  default 1)), mp_prefetch with W / 4 worker processes (spawned): W processes of
                  one thread each;
  ray             Ray Data in one driver process, ray.init(num_cpus=W) (W map tasks at once),
                  the image paths in one seeded order, from_items -> map_batches(the dataset's
                  records, collated) -> streaming_split(4, equal=True), read by 4 trainer
                  actors (num_cpus=0) with iter_batches;
  spdl            4 trainer processes, each an SPDL pipeline (spdl.pipeline, Meta's thread-pool
                  engine) over its part of one seeded global shuffle, the dataset's records in a
                  pipe stage of --spdl-threads (default W / 4) threads, batches collated with
                  numpy: W threads in all.

and the TensorFlow systems (--systems tf,tfshard,tfservice), the same images and transform as a
tf.data pipeline (tf.io.decode_jpeg, tf.image.stateless_random_crop and _flip_left_right,
normalise; on the decode workloads the decode only), each process's tf.data work on a private
thread pool of its share of W threads:

  tf           croupier.produce(JPEG paths, tf_transform=pipeline) in one producer process (no
               worker processes: W tf.data threads in the producer), the pipeline reading each
               file (tf.io.read_file) as the other systems' pipelines do, 4 croupier.Consumer
               processes;
  tf_bytes     the same with a source that reads each file's bytes in Python (by name only);
  tfshard      4 trainer processes, each running the pipeline on its own shard (file list
               shuffled with one seed, ds.shard(4, rank), read_file, map, batch, prefetch), W / 4
               tf.data threads each;
  tfserve      croupier.serve() of the whole pipeline (no shard) in one process, W tf.data
               threads (the continuous pipeline, without the map job's guarantees), 4
               croupier.Consumer processes;
  tfservice    tf.data service: a dispatcher and --service-workers (1) workers in one process
               run the whole pipeline (W tf.data threads), distributed to 4 trainer processes
               with distribute(processing_mode="distributed_epoch": each batch to one trainer;
               compression --service-compression, TensorFlow's AUTO by default).

Another croupier system (a producer set up otherwise) is one more row of SYSTEMS below and of
MAP_JOBS (bench/map_roles.py, where every process's role is).

The CPU: each system's line gives the CPU seconds of all the processes of its run (trainers,
producers, workers, dispatchers, Ray's and the tf.data service's processes) from the start
signal to the end of the work (the last trainer's loop; the processes' exit left out), per
record (cpu_ms_per_record), in all (cpu_s, per round) and per second of the run (cpu_cores: 2.0
is both cores busy all the time) (bench/cpu_budget.py: the program is the processes' child
subreaper, so that every one of them is counted); and other_cores, per round, the CPU that the
machine's other processes used meanwhile, per second of the run (about 0 on a quiet machine).

The decode limit, in the same run (system "decode_limit"): the workload's images decoded (the
same PIL decode) and collated into batches without random transforms, by one process per core
(each pinned to its core), each over its share of the records, no IPC of the images: the sum
of their records/s. Each system's line gives its fraction of it (decode_limit_fraction); on
small and large the systems also transform, on decode they do exactly what the limit does plus
the hand-off to the trainers. The TensorFlow systems decode with TensorFlow's own decoder, not
PIL's, and can pass it.

Also: the croupier producer's CPU time (its own and its workers') per record, against the same
per-record work (the dataset's record and the transform) run alone in a loop, one process per
core of the budget, each pinned to its core, all at once (a core's speed here depends on
whether the other is busy: alone on an idle machine the loop measured up to 1.6x less CPU a
record than with both cores busy, as they are during every system's run), and the bytes per
record on the wire.

Every process imports and builds what it needs, then waits for one start signal; a system's
figure is the records its 4 trainers received over the time from that signal to the last
trainer's end (worker start-up included, for every system). Each system line also gives, per
round, the time from the signal to the last trainer's first batch and the longest time from a
trainer's last batch to the end of its loop. The systems and the decode limit run in --rounds
rounds (2), in the order given and then reversed; a figure is the median of its rounds. A
system whose framework is not installed is left out with a line saying so; one that fails is
reported so, and the others go on.

JSON lines on stdout, each with "workload": {"bench": "map", "system", "records_per_s",
"samples", "setup", "budget", "cpus", "cpu_ms_per_record", "cpu_s", "cpu_cores", "other_cores",
"decode_limit_fraction", "first_batch_s", "after_last_batch_s"} per system and for
"decode_limit" (records_per_s null, with a note, for a system not run); {"bench": "map",
"case", "unit", "value", "baseline", "baseline_value", "ratio", "goal", "met", "note"} for the
goals: croupier against dataloader >= 1.3 (each workload), spdl, serve and grain >= 1.0, ray
>= 2.0; croupier's fraction of the decode limit >= 0.5 (decode workloads); producer CPU per
record <= 1.10x the work alone (met is null below 16,384 records); tf against tfshard >= 0.95,
tfserve >= 1.0 and tfservice >= 3. On workloads other than small, a case's name ends with
"(NAME workload)".

How long, here (2 cores, 27 November, with other work running): --quick (512 and 256 images, 1
round) about 4 minutes for the default systems and workloads, about 8 with --systems
tf,tfshard,tfservice; the full default run 18 minutes (small about 10, large 7, decode 5), plus
about 40 s the first time, to make the images (514 MB in the temp folder).

usage: .venv/bin/python bench/bench_map.py [--workload small,large,decode | all] [--quick]
       [--images N] [--workers 4] [--rounds 2] [--uint8] [--cpus 0-1] [--cache-dir DIR]
       [--systems croupier,croupier_threads,croupier_batch,dataloader,serve,grain,ray,spdl |
                  tf,tfshard,tfserve,tfservice]
       [--grain-threads 1] [--spdl-threads 1] [--service-workers 1]
       [--service-compression AUTO|none]
"""
import argparse
import dataclasses
import importlib.util
import json
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Callable, Tuple

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
import cpu_budget  # noqa: E402
import map_roles  # noqa: E402
from map_roles import ALONE_RECORDS, share  # noqa: E402
from map_workloads import (  # noqa: E402,F401 (BATCH, JpegBytes, ...: for bench_cache.py)
    BATCH, CROP, DEFAULT_WORKLOADS, SIZE, WORKLOADS, WORLD, JpegBytes, cached_images, transform,
    write_images)

GOAL_RECORDS = 16384  # the producer CPU goal is judged on runs of at least this many records


# --- The systems ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class System:
    needs: Tuple[str, ...]  # modules beyond numpy and PIL
    runner: str  # "map_job" (a producer role and 4 consumers on a local cluster), "trainers"
    #             (4 trainer processes, each its own loader), "ray", "tfservice"
    role: str  # the role of its producer or trainer processes
    budget: Callable  # args -> who does the decode and transform, in words
    workloads: Tuple[str, ...] = tuple(WORKLOADS)


SYSTEMS = {
    "croupier": System((), "map_job", "producer",
                       lambda a: f"{a.workers} worker processes of the producer"),
    "croupier_batch": System((), "map_job", "producer",
                             lambda a: f"{a.workers} worker processes of the producer",
                             workloads=("small", "large")),
    "croupier_threads": System((), "map_job", "producer",
                               lambda a: f"{max(1, a.workers // 2)} worker processes of the "
                                         "producer x 2 record threads"),
    # Another croupier map job is a row here (runner "map_job", role "producer") and its
    # produce() set-up in map_roles.MAP_JOBS.
    "dataloader": System(("torch",), "trainers", "dataloader",
                         lambda a: f"{WORLD} trainers x {share(a)} DataLoader worker process(es)"),
    "serve": System(("torch",), "map_job", "serve",
                    lambda a: f"{a.workers} DataLoader worker processes in the serving process"),
    "grain": System(("grain",), "trainers", "grain",
                    lambda a: f"{WORLD} trainers x {share(a)} worker process(es) x "
                              f"{a.grain_threads} thread(s)"),
    "ray": System(("ray",), "ray", "ray", lambda a: f"Ray num_cpus={a.workers}: {a.workers} "
                                                    f"map tasks at once"),
    "spdl": System(("spdl",), "trainers", "spdl",
                   lambda a: f"{WORLD} trainers x {a.spdl_threads} SPDL thread(s)"),
    "tf": System(("tensorflow",), "map_job", "tf_producer",
                 lambda a: f"{a.workers} tf.data threads in the producer process"),
    "tf_bytes": System(("tensorflow",), "map_job", "tf_producer",
                       lambda a: f"{a.workers} tf.data threads in the producer process"),
    "tfshard": System(("tensorflow",), "trainers", "tf_shard",
                      lambda a: f"{WORLD} trainers x {share(a)} tf.data thread(s)"),
    "tfserve": System(("tensorflow",), "map_job", "tf_serve",
                      lambda a: f"{a.workers} tf.data threads in the serving process"),
    "tfservice": System(("tensorflow",), "tfservice", "tf_service",
                        lambda a: f"{a.workers} tf.data threads in the service's process"),
}


# --- The parent -----------------------------------------------------------------------------

def spawn(role, args, **extra):
    cmd = [sys.executable, __file__, "--role", role, "--images-dir", str(args.images_dir),
           "--workload", args.wl.name, "--workers", str(args.workers), "--cpus", args.cpus,
           "--go", str(extra.pop("go"))]
    if args.uint8:
        cmd.append("--uint8")
    for key, value in extra.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def wait_ready(go, procs, timeout=120):
    """Waits until each of procs has said it is ready; kills them all if one has not in time."""
    deadline = time.monotonic() + timeout
    while len(list(go.parent.glob(go.name + ".ready-*"))) < len(procs):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
                p.wait()
            raise SystemExit(f"{len(procs)} processes were not all ready within {timeout} s "
                             f"(exit codes {[p.returncode for p in procs]})")
        time.sleep(0.05)


def finish(procs, timeout=600):
    out = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.wait()
            raise SystemExit(f"{p.args[3]} did not finish within {timeout} s")
        if p.returncode != 0:
            for q in procs:
                q.kill()
                q.wait()
            raise SystemExit(f"{p.args[3]} failed ({p.returncode})")
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        out.append(lines[-1] if lines else {})
    return out


def start_signal(go, meter):
    """Every process is set up and waiting: the CPU meter starts, then the signal."""
    time.sleep(3.0)  # imports and set-up, before the start
    meter.start()
    start = time.time()
    go.touch()
    return start


def work_done(go, procs, meter, timeout=600):
    """Waits until each of procs has said its work is done (or one has exited), reads the CPU
    meter, then lets them exit (GO.exit): the run's CPU seconds."""
    deadline = time.monotonic() + timeout
    while (len(list(go.parent.glob(go.name + ".done-*"))) < len(procs)
           and time.monotonic() < deadline and all(p.poll() is None for p in procs)):
        time.sleep(0.01)
    cpu = meter.end()
    pathlib.Path(f"{go}.exit").touch()
    return cpu


def trainers_figure(got, start):
    """A system's records/s from the start signal to the last trainer's end, and what the
    trainers saw: their records, the time from the signal to the last trainer's first batch,
    and the longest time from a trainer's last batch to the end of its loop."""
    if not all(g["records"] for g in got):
        raise SystemExit(f"a trainer received nothing: {got}")
    records = sum(g["records"] for g in got)
    seconds = max(g["end"] for g in got) - start
    extra = {"records": records, "seconds": seconds, "per_trainer": [g["records"] for g in got],
             "first_batch_s": max(g["first"] for g in got) - start,
             "after_last_batch_s": max(g["end"] - g["last"] for g in got)}
    return records / seconds, extra


def run_alone(args, work):
    """The work alone: one alone process per core of the budget, started together; the median
    of their CPU seconds per record."""
    go = work / f"go-alone-{time.monotonic_ns()}"
    cpus = cpu_budget.parse_cpus(args.cpus)
    procs = [spawn("alone", args, go=go, rank=r, procs=len(cpus)) for r in range(len(cpus))]
    wait_ready(go, procs)
    go.touch()
    return float(np.median([g["cpu_per_record"] for g in finish(procs)]))


def run_decode_limit(args, work, meter):
    """The decode limit: one decode_limit process per core of the budget; the sum of their
    records/s."""
    go = work / f"go-limit-{time.monotonic_ns()}"
    cpus = cpu_budget.parse_cpus(args.cpus)
    procs = [spawn("decode_limit", args, go=go, rank=r, procs=len(cpus))
             for r in range(len(cpus))]
    wait_ready(go, procs)
    start_signal(go, meter)
    cpu = work_done(go, procs, meter)
    got = finish(procs)
    records = sum(g["records"] for g in got)
    return (sum(g["records"] / g["seconds"] for g in got),
            {"records": records, "seconds": max(g["seconds"] for g in got), "run_cpu": cpu})


def run_system(system, args, work, meter):
    import croupier
    spec = SYSTEMS[system]
    go = work / f"go-{system}-{time.monotonic_ns()}"
    if spec.runner == "trainers":
        trainers = [spawn(spec.role, args, go=go, rank=r, loader_workers=share(args),
                          grain_threads=args.grain_threads, spdl_threads=args.spdl_threads)
                    for r in range(WORLD)]
        wait_ready(go, trainers)
        start = start_signal(go, meter)
        cpu = work_done(go, trainers, meter)
        rate, extra = trainers_figure(finish(trainers), start)
        return rate, dict(extra, run_cpu=cpu)
    if spec.runner == "tfservice":
        server = spawn(spec.role, args, go=go, service_workers=args.service_workers)
        address = pathlib.Path(f"{go}.address")
        deadline = time.monotonic() + 120
        while not address.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                server.wait()
                raise SystemExit("the tf.data service did not start")
            time.sleep(0.05)
        trainers = [spawn("tf_service_trainer", args, go=go, rank=r, address=address.read_text(),
                          service_compression=args.service_compression)
                    for r in range(WORLD)]
        wait_ready(go, [server, *trainers])
        start = start_signal(go, meter)
        cpu = work_done(go, trainers, meter)
        try:
            got = finish(trainers)
        finally:
            pathlib.Path(f"{go}.done").touch()
        rate, extra = trainers_figure(got, start)
        return rate, dict(extra, run_cpu=cpu, **finish([server])[0])
    if spec.runner == "ray":
        driver = spawn(spec.role, args, go=go)
        wait_ready(go, [driver], timeout=300)  # ray.init and the trainer actors, before the start
        start = start_signal(go, meter)
        cpu = work_done(go, [driver], meter)
        rate, extra = trainers_figure(finish([driver])[0]["trainers"], start)
        return rate, dict(extra, run_cpu=cpu)
    # A map job. A new work directory every run: a dispatcher replaying an earlier run's journal
    # would hold the job at its end already.
    cluster_dir = pathlib.Path(tempfile.mkdtemp(prefix=f"cluster-{system}-", dir=work))
    with croupier.local_cluster(producers=0, work_dir=cluster_dir) as cluster:
        producer = spawn(spec.role, args, go=go, address=cluster.address, system=system)
        trainers = [spawn("consumer", args, go=go, address=cluster.address, rank=r)
                    for r in range(WORLD)]
        wait_ready(go, [producer, *trainers])
        start = start_signal(go, meter)
        cpu = work_done(go, trainers, meter)
        got = finish(trainers)
        if not all(g.get("records") for g in got):
            producer.kill()
            producer.wait()
            raise SystemExit(f"{system}: a trainer received nothing: {got}")
        rate, extra = trainers_figure(got, start)
        extra["bytes_per_record"] = sum(g["bytes"] for g in got) / extra["records"]
        extra.update(finish([producer])[0], run_cpu=cpu)
        return rate, extra


def measured(run):
    """run() -> (records/s, extra: with run_cpu, the CPU seconds of all its processes from the
    start signal to the end of the work), or (None, {"error": ...}) if it failed; then every
    process it left is reaped."""
    try:
        rate, extra = run()
    except SystemExit as e:
        rate, extra = None, {"error": str(e)}
    cpu_budget.reap_descendants()
    return rate, extra


def emit(**fields):
    print(json.dumps({"bench": "map", **fields}), flush=True)


def run_workload(wl, systems, args, work):
    """Every system and the decode limit on workload wl, in --rounds rounds; emits its lines."""
    n = args.images or (wl.quick_images if args.quick else wl.images)
    args.wl = wl
    args.images_dir = cached_images(wl, n, args.cache_dir)
    here = [s for s in systems if wl.name in SYSTEMS[s].workloads]
    for system in systems:
        if system not in here:
            emit(workload=wl.name, system=system, records_per_s=None,
                 note=f"not run on the {wl.name} workload (only on "
                      f"{', '.join(SYSTEMS[system].workloads)})")
    entries = ["decode_limit", *here]
    samples = {e: [] for e in entries}
    extras = {e: [] for e in entries}
    failed = {}
    alone = []
    meter = cpu_budget.CpuMeter()
    for round_ in range(args.rounds):
        for entry in (entries if round_ % 2 == 0 else entries[::-1]):
            if entry in failed:
                continue
            if entry == "decode_limit":
                rate, extra = measured(lambda: run_decode_limit(args, work, meter))
            else:
                rate, extra = measured(lambda: run_system(entry, args, work, meter))
            if rate is None:
                failed[entry] = extra["error"]
                print(f"{entry} on {wl.name}: {extra['error']}", file=sys.stderr, flush=True)
                continue
            extra["other_cpu"] = meter.other
            samples[entry].append(rate)
            extras[entry].append(extra)
        if any(SYSTEMS[s].role == "producer" for s in here):
            alone.append(run_alone(args, work))
    report(wl, n, args, samples, extras, failed, float(np.median(alone)) if alone else None)


def cpu_fields(extras):
    """The medians of a system's rounds: CPU ms per record and cores busy, from run_cpu."""
    runs = [e for e in extras if "run_cpu" in e]
    if not runs:
        return {}
    return {"cpu_ms_per_record": float(np.median([e["run_cpu"] / e["records"] * 1e3
                                                  for e in runs])),
            "cpu_cores": float(np.median([e["run_cpu"] / e["seconds"] for e in runs])),
            "cpu_s": [round(e["run_cpu"], 2) for e in runs],
            "other_cores": [round(e["other_cpu"] / e["seconds"], 2) for e in runs]}


def report(wl, n, args, samples, extras, failed, alone):
    kind = wl.kind(args.uint8)
    tail = "" if wl.name == "small" else f" ({wl.name} workload)"
    common = {"workload": wl.name, "cpus": cpu_budget.parse_cpus(args.cpus)}
    rates = {e: float(np.median(v)) for e, v in samples.items() if v}
    limit = rates.get("decode_limit")
    for entry, error in failed.items():
        emit(**common, system=entry, records_per_s=None, note=f"failed: {error}")
    if limit is not None:
        count = len(common["cpus"])
        emit(**common, system="decode_limit", records_per_s=limit, samples=samples["decode_limit"],
             setup=f"{n} JPEGs {wl.size}x{wl.size} decoded (PIL) and collated in batches of "
                   f"{wl.batch} by {count} process(es), one per core, each over its share, no "
                   f"IPC of the images: the sum of their records/s",
             **cpu_fields(extras["decode_limit"]))
    for system, rate in rates.items():
        if system == "decode_limit":
            continue
        timing = {}
        for key in ("first_batch_s", "after_last_batch_s"):
            seen = [e[key] for e in extras[system] if key in e]
            if seen:
                timing[key] = seen
        setup = (f"{wl.describe(n, args.uint8)}, {WORLD} trainers, {args.workers} workers"
                 + (f", {args.service_workers} tf.data service worker(s)"
                    if system == "tfservice" else ""))
        emit(**common, system=system, records_per_s=rate, samples=samples[system], setup=setup,
             budget=SYSTEMS[system].budget(args), **cpu_fields(extras[system]),
             decode_limit_fraction=rate / limit if limit else None, **timing)
    if "croupier" in rates:
        cr = rates["croupier"]
        for base, goal in (("dataloader", 1.3), ("serve", 1.0), ("grain", 1.0), ("ray", 2.0),
                           ("spdl", 1.0)):
            if base in rates:
                emit(**common, case=f"map job ({kind}) vs {base}{tail}", unit="records/s",
                     value=cr, baseline=base, baseline_value=rates[base], ratio=cr / rates[base],
                     goal=f">= {goal}", met=cr / rates[base] >= goal)
        if limit and not wl.transforms:
            emit(**common, case=f"map job ({kind}) fraction of the decode limit{tail}",
                 unit="records/s", value=cr, baseline="decode_limit", baseline_value=limit,
                 ratio=cr / limit, goal=">= 0.5", met=cr / limit >= 0.5,
                 note="the limit: the same decode and collate in one process per core, no IPC")
    if "croupier_batch" in rates:
        for base in ("croupier", "dataloader"):
            if base in rates:
                ratio = rates["croupier_batch"] / rates[base]
                emit(**common, case=f"map job with batch_transform ({kind}) vs {base}{tail}",
                     unit="records/s", value=rates["croupier_batch"], baseline=base,
                     baseline_value=rates[base], ratio=ratio, goal=">= 1.0", met=ratio >= 1.0)
    runs = [e for e in extras.get("croupier", []) if "cpu" in e]
    if runs and alone:
        per_record = float(np.median([e["cpu"] / e["records"] for e in runs]))
        records = min(e["records"] for e in runs)
        ratio = per_record / alone
        judged = records >= GOAL_RECORDS
        emit(**common, case=f"producer CPU per record ({kind}){tail}", unit="ms CPU/record",
             value=per_record * 1e3, baseline="the work alone in a loop",
             baseline_value=alone * 1e3, ratio=ratio, goal="<= 1.10",
             met=(ratio <= 1.10) if judged else None,
             note=(f"{extras['croupier'][0]['bytes_per_record']:.0f} bytes/record on the wire; "
                   f"of the CPU, the worker processes "
                   f"{np.median([e['workers_cpu'] / e['records'] for e in runs]) * 1e3:.3f} "
                   f"ms/record, the producer process "
                   f"{np.median([e['parent_cpu'] / e['records'] for e in runs]) * 1e3:.3f} "
                   f"ms/record; page faults a record: the workers "
                   f"{np.median([e['workers_page_faults'] / e['records'] for e in runs]):.0f}, "
                   f"the producer process "
                   f"{np.median([e['parent_page_faults'] / e['records'] for e in runs]):.0f}; "
                   f"the work alone: the source's record and the transform, one process per "
                   f"core at once, "
                   f"{ALONE_RECORDS} records each"
                   + ("" if judged else f"; not judged: {records} records, the goal is on "
                                        f"{GOAL_RECORDS} or more")))
    if "tf" in rates:
        tf_rate = rates["tf"]
        runs = [e for e in extras["tf"] if "cpu" in e]
        cpu = float(np.median([e["cpu"] / e["records"] for e in runs])) * 1e3 if runs else None
        for base, what, goal in (("tfshard", "tf.data on each trainer's shard", 0.95),
                                 ("tfserve", "croupier.serve() of the same tf.data pipeline", 1.0),
                                 ("tfservice", "tf.data service", 3.0)):
            if base not in rates:
                continue
            note = f"producer CPU {cpu:.3f} ms/record" if cpu is not None else ""
            served = [e for e in extras[base] if "cpu" in e]
            if served:
                count = served[0]["workers"]
                note += (f"; the service's process (dispatcher and {count} "
                         f"worker{'s' if count > 1 else ''}) CPU "
                         f"{np.median([e['cpu'] / e['records'] for e in served]) * 1e3:.3f} "
                         f"ms/record; records per trainer "
                         f"{[e['per_trainer'] for e in served]}")
            emit(**common, case=f"map job with tf_transform ({kind}) vs {what}{tail}",
                 unit="records/s", value=tf_rate, baseline=base, baseline_value=rates[base],
                 ratio=tf_rate / rates[base], goal=f">= {goal}",
                 met=tf_rate / rates[base] >= goal, note=note.lstrip("; "))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default=",".join(DEFAULT_WORKLOADS),
                        help=f"a comma list of {', '.join(WORKLOADS)}, or all")
    parser.add_argument("--images", type=int, default=None,
                        help="records per system on every workload (default: the workload's)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--uint8", action="store_true")
    parser.add_argument("--cpus", default="",
                        help="the cores of every process of a run, as 0-1 or 0,2 (default: all "
                             "of this process's)")
    parser.add_argument("--cache-dir", default=None,
                        help="where the images are kept (default: TMP/croupier-bench-map)")
    parser.add_argument("--systems",
                        default="croupier,croupier_threads,croupier_batch,dataloader,serve,grain,ray,spdl")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 512 images (256 on the large images), 1 round")
    parser.add_argument("--grain-threads", type=int, default=1,
                        help="grain: ReadOptions(num_threads) in each worker process")
    parser.add_argument("--spdl-threads", type=int, default=None,
                        help="spdl: the record stage's concurrent calls (and the pipeline's "
                             "threads) in each trainer (default: --workers / 4)")
    parser.add_argument("--service-workers", type=int, default=1,
                        help="tfservice: tf.data service workers (in the dispatcher's process)")
    parser.add_argument("--service-compression", choices=("AUTO", "none"), default="AUTO",
                        help="tfservice: distribute(compression=...) (AUTO: TensorFlow's default)")
    for name in ("--role", "--images-dir", "--go", "--address", "--system"):  # a role's
        parser.add_argument(name, help=argparse.SUPPRESS)
    for name in ("--rank", "--loader-workers", "--procs"):
        parser.add_argument(name, type=int, default=1 if name != "--rank" else 0,
                            help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.spdl_threads is None:
        args.spdl_threads = share(args)
    if args.role:
        cpu_budget.pin(cpu_budget.parse_cpus(args.cpus))
        map_roles.ROLES[args.role](args, WORKLOADS[args.workload])
        return
    cpus = cpu_budget.parse_cpus(args.cpus)
    args.cpus = ",".join(map(str, cpus))
    cpu_budget.pin(cpus)  # every process of every run inherits it
    cpu_budget.become_subreaper()
    if args.quick:
        args.rounds = 1
    names = list(WORKLOADS) if args.workload == "all" else args.workload.split(",")
    for name in names:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}: one of {', '.join(WORKLOADS)}, or all")
    systems = []
    for system in args.systems.split(","):
        if system not in SYSTEMS:
            parser.error(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
        missing = [m for m in SYSTEMS[system].needs if importlib.util.find_spec(m) is None]
        if missing:  # the suite goes on without it, saying so
            emit(system=system, records_per_s=None, note=f"not measured: {missing[0]} is not "
                 f"installed (scripts/requirements-dev.txt pins it)")
        else:
            systems.append(system)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            run_workload(WORKLOADS[name], systems, args, pathlib.Path(tmp))


if __name__ == "__main__":
    main()
