"""Part of `make demo`: N torch.distributed trainers fed by one croupier pipeline.

With --launcher torch (the default) the trainers are examples/pytorch_ddp.py, one process per rank
with torch.distributed (gloo all-reduce), started the way torchrun would; with --launcher mpi they
are examples/mpi_allreduce.py under OpenMPI's mpirun, with an mpi4py all-reduce (the Horovod
pattern).

Starts a local_cluster (a dispatcher and 2 producers), creates a dealt job over the dataset,
launches the trainers, then
checks what croupier guarantees, on the record ids the trainers actually received:
  - every record of each epoch's plan was seen exactly once across the ranks;
  - every rank took the same number of steps;
  - each rank's batches are exactly the plan's, in order (the deal is deterministic).
Prints per epoch the loss, records/s and each rank's batch count. Exits non-zero if a check fails.

usage: .venv/bin/python scripts/demo_train.py DATA_DIR [--trainers 4] [--producers 2]
       [--epochs 2] [--batch-size 64] [--seed 1] [--work-dir DIR] [--launcher torch|mpi]
"""
import argparse
import collections
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import threading
import time

import croupier
from croupier.progress import Progress

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRAINER = ROOT / "examples" / "pytorch_ddp.py"
MPI_TRAINER = ROOT / "examples" / "mpi_allreduce.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_trainers(address, job, n, epochs, work_dir, timeout):
    """Starts n trainer processes the way torchrun would, waits for them, returns their reports."""
    port = free_port()
    procs, reports = [], []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        report = work_dir / f"rank{rank}.json"
        report.unlink(missing_ok=True)
        reports.append(report)
        procs.append(subprocess.Popen(
            [sys.executable, str(TRAINER), "--dispatcher", address, "--job", job,
             "--epochs", str(epochs), "--report", str(report)], env=env))
    deadline = time.monotonic() + timeout
    try:
        for rank, proc in enumerate(procs):
            code = proc.wait(timeout=max(1, deadline - time.monotonic()))
            if code != 0:
                raise SystemExit(f"demo: trainer rank {rank} exited with {code}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [json.loads(r.read_text()) for r in reports]


def launch_mpi_trainers(address, job, n, epochs, work_dir, timeout):
    """Runs n trainers under mpirun (loopback only) and returns their reports."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("demo: mpirun not found (Debian's openmpi-bin)")
    report = work_dir / "mpi-rank"
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,tcp",
               OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo")
    try:
        code = subprocess.run([mpirun, "-n", str(n), "--oversubscribe", sys.executable,
                               str(MPI_TRAINER), "--dispatcher", address, "--job", job,
                               "--epochs", str(epochs), "--report", str(report)], env=env,
                              timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        raise SystemExit(f"demo: mpirun did not finish within {timeout} s")
    if code != 0:
        raise SystemExit(f"demo: mpirun exited with {code}")
    return [json.loads(pathlib.Path(f"{report}.{r}").read_text()) for r in range(n)]


def show_progress(cluster, job_name, steps, total, stop):
    """Until `stop` is set: a progress bar of the steps the ranks acknowledged to the dispatcher."""
    bar = Progress("training", total, unit="steps")
    while not stop.wait(0.5):
        try:
            positions = cluster.status().get("rank_positions", [])
        except croupier.errors.Error:
            continue  # the bar only shows progress; the trainers report errors themselves
        bar.update(sum(int(p.get("epoch", 0)) * steps + int(p.get("step", 0))
                       for p in positions if p.get("job") == job_name))
    bar.close()


def check_epoch(reports, job, epoch, seed, batch_size):
    """Prints one epoch's figures and returns the list of failed checks."""
    n = len(reports)
    plan = croupier.EpochPlan(int(job["num_records"]), batch_size, n, seed=seed, epoch=epoch)
    got = [r["epochs"][epoch] for r in reports]
    steps = [g["steps"] for g in got]
    failures = []
    if len(set(steps)) != 1 or steps[0] != plan.steps_per_consumer:
        failures.append(f"epoch {epoch}: steps per rank {steps}, plan says "
                        f"{plan.steps_per_consumer} each")
    seen = collections.Counter(i for g in got for batch in g["ids"] for i in batch)
    planned = collections.Counter(int(i) for b in range(plan.num_batches) for i in plan.batch(b))
    if seen != planned:
        missing = sum((planned - seen).values())
        extra = sum((seen - planned).values())
        failures.append(f"epoch {epoch}: {missing} planned records not seen, {extra} seen "
                        "too often or not planned")
    for rank, g in enumerate(got):
        for step, batch in enumerate(g["ids"]):
            if batch != plan.batch(plan.global_batch(rank, step)).tolist():
                failures.append(f"epoch {epoch}: rank {rank} step {step} is not the plan's batch")
                break
    records = sum(len(b) for g in got for b in g["ids"])
    seconds = max(g["seconds"] for g in got)
    print(f"epoch {epoch}: loss {got[0]['loss']:.3f}, {records} records in {seconds:.1f} s "
          f"({records / seconds:,.0f} records/s), batches per rank {steps}")
    exactly_once = len(seen) == sum(seen.values()) and seen == planned
    print(f"  every planned record seen exactly once: {'yes' if exactly_once else 'NO'}; "
          f"same steps on every rank: {'yes' if len(set(steps)) == 1 else 'NO'}; "
          f"batches match the plan: {'yes' if not any('plan' in f for f in failures) else 'NO'}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir")
    parser.add_argument("--trainers", type=int, default=4)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", default=str(ROOT / "demo-out" / "train"))
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--launcher", choices=("torch", "mpi"), default="torch")
    args = parser.parse_args()
    work_dir = pathlib.Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)

    print(f"starting a local cluster: 1 dispatcher, {args.producers} producers", flush=True)
    with croupier.local_cluster(producers=args.producers, work_dir=work_dir / "cluster") as cluster:
        job = cluster.create_job("train", f"{args.data_dir}/*.tfrecord",
                                 "id:int64,label:int64,image:bytes", args.batch_size,
                                 consumers=args.trainers, seed=args.seed, epochs=args.epochs,
                                 shuffle="global")
        print(f"job 'train': {job['num_records']} records, batches of {args.batch_size}, "
              f"{job['steps_per_epoch']} steps per epoch for each of {args.trainers} ranks "
              f"(dispatcher {cluster.address})", flush=True)
        stop = threading.Event()
        progress = threading.Thread(target=show_progress, daemon=True, args=(
            cluster, "train", int(job["steps_per_epoch"]),
            int(job["steps_per_epoch"]) * args.trainers * args.epochs, stop))
        progress.start()
        try:
            if args.launcher == "mpi":
                print(f"launching {args.trainers} trainers (mpirun, mpi4py all-reduce)",
                      flush=True)
                reports = launch_mpi_trainers(cluster.address, "train", args.trainers,
                                              args.epochs, work_dir, args.timeout)
            else:
                print(f"launching {args.trainers} trainers (torch.distributed, gloo)", flush=True)
                reports = launch_trainers(cluster.address, "train", args.trainers, args.epochs,
                                          work_dir, args.timeout)
        finally:
            stop.set()
            progress.join()
    failures = []
    for epoch in range(args.epochs):
        failures += check_epoch(reports, job, epoch, args.seed, args.batch_size)
    if failures:
        print("demo FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("demo passed: exactly once, equal steps, the planned deal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
