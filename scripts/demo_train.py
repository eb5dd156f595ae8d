"""Part of `make demo`: N torch.distributed trainers fed by one croupier pipeline.

With --launcher torch (the default) the trainers are examples/pytorch_ddp.py, one process per rank
with torch.distributed (gloo all-reduce), started the way torchrun would; with --launcher mpi they
are examples/mpi_allreduce.py under OpenMPI's mpirun, with an mpi4py all-reduce (the Horovod
pattern).

The data is what scripts/demo_data.py writes: handwritten digits in TFRecord files, and a held-out
set (DATA_DIR/heldout.npz) that croupier never deals. Starts a local_cluster (a dispatcher and 2
producers), creates a dealt job over the TFRecord files, launches the trainers, then checks what
croupier guarantees, on the record ids the trainers actually received:
  - every record of each epoch's plan was seen exactly once across the ranks;
  - every rank took the same number of steps;
  - each rank's batches are exactly the plan's, in order (the deal is deterministic);
and that the model learnt: its accuracy on the held-out digits (measured by rank 0 of the torch
trainers) reaches --min-accuracy. Prints per epoch the loss, the held-out accuracy, records/s and
each rank's batch count, and writes the loss and accuracy per epoch to WORK_DIR/../loss.png.
Exits non-zero if a check fails.

usage: .venv/bin/python scripts/demo_train.py DATA_DIR [--trainers 4] [--producers 2]
       [--epochs 15] [--batch-size 16] [--seed 1] [--work-dir DIR] [--launcher torch|mpi]
       [--min-accuracy 0.95] [--plot FILE]
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


FEATURES = "id:int64,label:int64,pixels:float32[64]"


def launch_trainers(address, job, n, epochs, work_dir, timeout, heldout):
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
             "--epochs", str(epochs), "--report", str(work_dir / "rank{rank}.json"),
             "--heldout", str(heldout)],
            env=env))
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
    accuracy = got[0].get("accuracy")
    held = f", held-out accuracy {accuracy:.1%}" if accuracy is not None else ""
    exactly_once = len(seen) == sum(seen.values()) and seen == planned
    yes = lambda ok: "yes" if ok else "NO"  # noqa: E731
    print(f"epoch {epoch:2d}: loss {got[0]['loss']:.3f}{held}; {records} records in "
          f"{seconds:.2f} s, steps per rank {steps}; exactly once: {yes(exactly_once)}, "
          f"equal steps: {yes(len(set(steps)) == 1)}, the plan's batches: "
          f"{yes(not any('plan' in f for f in failures))}")
    return failures


def plot_curves(report, path, launcher):
    """Writes a PNG of the mean training loss (and the held-out accuracy, where measured) per
    epoch."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    epochs = [e["epoch"] + 1 for e in report["epochs"]]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    ax.plot(epochs, [e["loss"] for e in report["epochs"]], "o-", color="tab:blue")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean training loss (cross-entropy)", color="tab:blue")
    ax.set_ylim(bottom=0)
    if all("accuracy" in e for e in report["epochs"]):
        acc = ax.twinx()
        acc.plot(epochs, [100 * e["accuracy"] for e in report["epochs"]], "s-", color="tab:green")
        acc.set_ylabel("held-out accuracy (%)", color="tab:green")
        acc.set_ylim(0, 100)
    ax.set_title(f"make demo: {report['world']} ranks ({launcher}) fed by croupier, "
                 "handwritten digits", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir")
    parser.add_argument("--trainers", type=int, default=4)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", default=str(ROOT / "demo-out" / "train"))
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--launcher", choices=("torch", "mpi"), default="torch")
    parser.add_argument("--min-accuracy", type=float, default=0.95,
                        help="the held-out accuracy the torch trainers must reach")
    parser.add_argument("--plot", help="the PNG of loss and accuracy per epoch "
                        "(default: loss.png beside the work directory)")
    args = parser.parse_args()
    work_dir = pathlib.Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)

    print(f"starting a local cluster: 1 dispatcher, {args.producers} producers", flush=True)
    with croupier.local_cluster(producers=args.producers, work_dir=work_dir / "cluster") as cluster:
        job = cluster.create_job("train", f"{args.data_dir}/*.tfrecord", FEATURES,
                                 args.batch_size,
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
                                          work_dir, args.timeout,
                                          pathlib.Path(args.data_dir) / "heldout.npz")
        finally:
            stop.set()
            progress.join()
    failures = []
    for epoch in range(args.epochs):
        failures += check_epoch(reports, job, epoch, args.seed, args.batch_size)
    plot = pathlib.Path(args.plot) if args.plot else work_dir.parent / "loss.png"
    plot_curves(reports[0], plot, args.launcher)
    print(f"loss per epoch plotted in {plot}")
    accuracy = reports[0]["epochs"][-1].get("accuracy")
    if accuracy is not None:
        print(f"held-out accuracy after {args.epochs} epochs: {accuracy:.1%} "
              f"(required: {args.min_accuracy:.0%})")
        if accuracy < args.min_accuracy:
            failures.append(f"the model reached {accuracy:.1%} on the held-out digits, below "
                            f"{args.min_accuracy:.0%}")
    if failures:
        print("demo FAILED:\n  " + "\n  ".join(failures))
        return 1
    learnt = "; the model learnt" if accuracy is not None else ""
    print(f"demo passed: exactly once, equal steps, the planned deal{learnt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
