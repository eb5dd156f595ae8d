"""Producers as Slurm jobs, sized to the dispatcher's recommendation.

    CROUPIER_DISPATCHER=HOST:PORT python deploy/slurm/autoscale.py [--job NAME] [--min 1] \\
        [--max 8] [--interval 5] [-- SBATCH OPTIONS...]

Each producer is one job of deploy/slurm/croupier-producer.sbatch, submitted with sbatch and ended
with `scancel --signal=TERM --batch` (the SIGTERM makes the producer leave the dispatcher cleanly
and exit; the job ends COMPLETED). `SlurmProducers` is the `current` and `scale` of
croupier.autoscale.Autoscaler, whose loop reads the dispatcher's recommendation every `interval`
seconds: the cluster's (`producer_advice.recommended`, for the `croupier producer` processes of
the TFRecord jobs), or with --job NAME that job's own target (its summary's producer_advice). The jobs are found by their name (`--name`, default
croupier-producer-<dispatcher port>) among the user's pending and running jobs; scaling down ends
the newest first. Each change is printed as a line ("croupier autoscale: 1 -> 3 producer jobs,
submitted 12 13"). On exit (Ctrl-C, SIGTERM) it ends every producer job it finds by that name and
waits for them (--stop-timeout, then scancel), unless --keep.

A map job's producers (CROUPIER_PRODUCE=MODULE:FUNCTION, CROUPIER_JOB=NAME in the environment the
jobs inherit) follow that job's target: give --job NAME. Without it the loop follows the cluster's
figure, which counts no map job. A croupier.serve() stream job has no target (its producers cannot
change): the script prints why and exits 2.
"""
import argparse
import os
import pathlib
import signal
import subprocess
import sys
import time

import croupier
from croupier import errors
from croupier.autoscale import Autoscaler

SCRIPT = pathlib.Path(__file__).resolve().parent / "croupier-producer.sbatch"


class SlurmProducers:
    """The producer jobs of one name. `env` is sbatch's environment (the job inherits it, with
    CROUPIER_DISPATCHER set); `sbatch_args` are more sbatch options (partition, CPUs, output).

    Scaling down tells the newest running jobs' producers to leave: `scancel --signal=TERM
    --batch` sends SIGTERM to the batch script, which is the producer (croupier-producer.sbatch
    execs it); it leaves the dispatcher and exits 0, and the job ends COMPLETED, or FAILED if the
    producer failed. (A plain scancel would end it too, but always as CANCELLED. Either way
    slurmstepd writes its notice "error: *** JOB N ON NODE CANCELLED AT ... ***" into the job's
    output.) A job not yet running is cancelled. A job told to leave no longer counts in
    current(); stop() waits for them and cancels any that has not ended within its timeout. Not
    thread-safe: one caller (the Autoscaler's loop)."""

    def __init__(self, dispatcher, name, sbatch_args=(), env=None, script=SCRIPT, timeout=30):
        self.dispatcher, self.name, self.script = dispatcher, name, str(script)
        self.sbatch_args = list(sbatch_args)
        self.env = dict(os.environ if env is None else env, CROUPIER_DISPATCHER=dispatcher)
        self.timeout = timeout
        self.leaving = set()  # the jobs told to leave (SIGTERM) that may not have ended yet

    def _run(self, argv):
        """Runs a Slurm command; its failure (or no answer within `timeout` s) is an
        UnavailableError naming it, which the Autoscaler's loop survives (it tries again next
        round)."""
        try:
            return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=True,
                                  timeout=self.timeout).stdout
        except subprocess.CalledProcessError as e:
            why = f"exited {e.returncode}: {(e.stderr or '').strip()}"
        except (subprocess.TimeoutExpired, OSError) as e:
            why = str(e)
        print(f"croupier autoscale: {' '.join(argv)} {why}", flush=True)
        raise errors.UnavailableError(f"{argv[0]} failed ({why})")

    def _queue(self):
        """{job id: state} of this name's pending and running jobs."""
        out = self._run(["squeue", "-h", "--name", self.name,
                         "--states=PENDING,RUNNING,CONFIGURING,COMPLETING", "-o", "%i %T"])
        return {int(job): state for job, state in (line.split() for line in out.splitlines())}

    def jobs(self):
        """The ids of this name's pending and running jobs not told to leave, oldest first."""
        queue = self._queue()
        self.leaving &= set(queue)
        return sorted(job for job, state in queue.items()
                      if job not in self.leaving and state != "COMPLETING")

    def current(self):
        return len(self.jobs())

    def scale(self, n):
        """Submits jobs, or tells the newest to leave, until `n` are pending or running."""
        queue = self._queue()
        jobs = self.jobs()
        submitted = [self._run(["sbatch", "--parsable", f"--job-name={self.name}",
                                *self.sbatch_args, self.script]).strip().split(";")[0]
                     for _ in range(n - len(jobs))]
        told = list(reversed(jobs[n:] if n < len(jobs) else []))
        for job in told:
            if queue.get(job) != "RUNNING":
                self._run(["scancel", str(job)])
            else:
                self._run(["scancel", "--signal=TERM", "--batch", str(job)])
                self.leaving.add(job)
        if submitted or told:
            print(f"croupier autoscale: {len(jobs)} -> {n} producer jobs"
                  + (f", submitted {' '.join(submitted)}" if submitted else "")
                  + (f", told to leave {' '.join(map(str, told))}" if told else ""),
                  flush=True)

    def stop(self, timeout=60):
        """scale(0), then waits until every job of the name has ended; cancels (scancel) those
        that have not within `timeout` seconds. Returns the ids it had to cancel."""
        self.scale(0)
        deadline = time.monotonic() + timeout
        while self._queue() and time.monotonic() < deadline:
            time.sleep(0.5)
        left = sorted(self._queue())
        for job in left:
            self._run(["scancel", str(job)])
        if left:
            print(f"croupier autoscale: cancelled {' '.join(map(str, left))}, still running "
                  f"{timeout} s after SIGTERM", flush=True)
        return left


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dispatcher", default=os.environ.get("CROUPIER_DISPATCHER"),
                        help="HOST:PORT [$CROUPIER_DISPATCHER]")
    parser.add_argument("--job", default=None,
                        help="follow this job's target (a map job's own producers) rather than "
                             "the cluster's")
    parser.add_argument("--min", type=int, default=1)
    parser.add_argument("--max", type=int, default=8)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--name", help="the producer jobs' name [croupier-producer-PORT]")
    parser.add_argument("--keep", action="store_true", help="leave the producers on exit")
    parser.add_argument("--stop-timeout", type=float, default=60.0,
                        help="seconds the producers have to leave on exit before scancel [60]")
    parser.add_argument("sbatch_args", nargs=argparse.REMAINDER, help="-- SBATCH OPTIONS")
    args = parser.parse_args(argv)
    if not args.dispatcher:
        parser.error("give --dispatcher or set CROUPIER_DISPATCHER")
    name = args.name or f"croupier-producer-{args.dispatcher.rsplit(':', 1)[-1]}"
    producers = SlurmProducers(args.dispatcher, name,
                               [a for a in args.sbatch_args if a != "--"])
    scaler = Autoscaler(lambda: croupier.status(args.dispatcher), producers.current,
                        producers.scale, job=args.job, min_producers=args.min,
                        max_producers=args.max, interval=args.interval)
    if args.job is not None:
        try:
            scaler.advice()
        except errors.FailedPreconditionError as e:  # a stream job: nothing to follow
            print(f"croupier autoscale: {e}", flush=True)
            return 2
        except errors.Error as e:  # not created yet (its first producer may create it)
            print(f"croupier autoscale: {e}; waiting for it", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    producers.scale(args.min)
    scaler.start()
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        scaler.stop()
    if not args.keep:
        try:
            producers.stop(args.stop_timeout)
        except errors.Error as e:  # Slurm did not answer: the jobs may still run
            print(f"croupier autoscale: could not end the producer jobs named {name}: {e}",
                  flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
