"""One machine: a dispatcher, producers and N trainer processes, all started from Python.

    python deploy/local_cluster.py --files '/data/train/*.tfrecord' \\
        --features image:bytes,label:int64 --trainers 4 [--producers 2|auto] [--epochs 1] \\
        [--batch-size 64] [--seed 0] [--report-dir DIR] [-- TRAINER COMMAND...]

croupier.local_cluster starts the dispatcher and the producers as child processes on free loopback
ports and stops them on leaving the block, whatever happens. The job is created for N trainers,
then N trainer processes (default: deploy/trainer.py with this Python) get RANK, WORLD_SIZE,
CROUPIER_DISPATCHER and CROUPIER_JOB in their environment, as a launcher would give them. Exits
with the first failing trainer's code, or 0.
"""
import argparse
import os
import pathlib
import subprocess
import sys
import time

import croupier

HERE = pathlib.Path(__file__).resolve().parent


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", required=True, help="the job's TFRecord files (a glob)")
    parser.add_argument("--features", required=True, help="e.g. image:bytes,label:int64")
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--producers", default="2",
                        help="how many producers, or 'auto': the dispatcher's recommendation")
    parser.add_argument("--job", default="train")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", help="the cluster's journal and logs (default: a temporary "
                        "directory, removed at the end)")
    parser.add_argument("--report-dir", help="passed to the trainers as CROUPIER_REPORT_DIR")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds the trainers may take in all before they are stopped")
    parser.add_argument("trainer", nargs=argparse.REMAINDER,
                        help="the trainer command after --, run once per rank")
    args = parser.parse_args()
    command = [a for a in args.trainer if a != "--"] or [sys.executable, str(HERE / "trainer.py")]

    producers = args.producers if args.producers == "auto" else int(args.producers)
    with croupier.local_cluster(producers=producers, work_dir=args.work_dir) as cluster:
        job = cluster.create_job(args.job, args.files, args.features, args.batch_size,
                                 consumers=args.trainers, seed=args.seed, epochs=args.epochs,
                                 exist_ok=True)
        print(f"dispatcher {cluster.address}; job {args.job!r}: {job['num_records']} records, "
              f"{job['steps_per_epoch']} steps per epoch for each of {args.trainers} trainers",
              flush=True)
        procs = []
        for rank in range(args.trainers):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.trainers),
                       CROUPIER_DISPATCHER=cluster.address, CROUPIER_JOB=args.job,
                       CROUPIER_EPOCHS=str(args.epochs))
            if args.report_dir:
                env["CROUPIER_REPORT_DIR"] = args.report_dir
            procs.append(subprocess.Popen(command, env=env))
        deadline = time.monotonic() + args.timeout
        code = 0
        try:
            for rank, proc in enumerate(procs):
                got = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                if got != 0 and code == 0:
                    print(f"local_cluster.py: trainer rank {rank} exited with {got}",
                          file=sys.stderr)
                    code = got
        except subprocess.TimeoutExpired:
            print(f"local_cluster.py: the trainers did not finish within {args.timeout:.0f} s",
                  file=sys.stderr)
            code = 1
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return code


if __name__ == "__main__":
    sys.exit(main())
