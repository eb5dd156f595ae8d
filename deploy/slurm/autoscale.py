"""Producers as Slurm jobs, sized to the dispatcher's recommendation.

    CROUPIER_DISPATCHER=HOST:PORT python deploy/slurm/autoscale.py [--min 1] [--max 8] \\
        [--interval 5] [-- SBATCH OPTIONS...]

Each producer is one job of deploy/slurm/croupier-producer.sbatch, submitted with sbatch and ended
with scancel (its SIGTERM makes the producer leave the dispatcher cleanly). `SlurmProducers` is the
`current` and `scale` of croupier.autoscale.Autoscaler, whose loop reads the dispatcher's
`producer_advice.recommended` every `interval` seconds. The jobs are found by their name
(`--name`, default croupier-producer-<dispatcher port>) among the user's pending and running jobs;
scaling down cancels the newest first. On exit (Ctrl-C, SIGTERM) it cancels every producer job
it finds by that name, unless --keep.
"""
import argparse
import os
import pathlib
import signal
import subprocess
import sys

import croupier
from croupier.autoscale import Autoscaler

SCRIPT = pathlib.Path(__file__).resolve().parent / "croupier-producer.sbatch"


class SlurmProducers:
    """The producer jobs of one name. `env` is sbatch's environment (the job inherits it, with
    CROUPIER_DISPATCHER set); `sbatch_args` are more sbatch options (partition, CPUs, output)."""

    def __init__(self, dispatcher, name, sbatch_args=(), env=None, script=SCRIPT, timeout=30):
        self.dispatcher, self.name, self.script = dispatcher, name, str(script)
        self.sbatch_args = list(sbatch_args)
        self.env = dict(os.environ if env is None else env, CROUPIER_DISPATCHER=dispatcher)
        self.timeout = timeout

    def _run(self, argv):
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=True,
                              timeout=self.timeout).stdout

    def jobs(self):
        """The ids of this name's pending and running jobs, oldest first."""
        out = self._run(["squeue", "-h", "--name", self.name, "--states=PENDING,RUNNING,CONFIGURING",
                         "-o", "%i"])
        return sorted(int(j) for j in out.split())

    def current(self):
        return len(self.jobs())

    def scale(self, n):
        """Submits or cancels jobs until `n` are pending or running."""
        jobs = self.jobs()
        for _ in range(n - len(jobs)):
            self._run(["sbatch", "--parsable", f"--job-name={self.name}", *self.sbatch_args,
                       self.script])
        for job in reversed(jobs[n:] if n < len(jobs) else []):
            self._run(["scancel", str(job)])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dispatcher", default=os.environ.get("CROUPIER_DISPATCHER"),
                        help="HOST:PORT [$CROUPIER_DISPATCHER]")
    parser.add_argument("--min", type=int, default=1)
    parser.add_argument("--max", type=int, default=8)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--name", help="the producer jobs' name [croupier-producer-PORT]")
    parser.add_argument("--keep", action="store_true", help="leave the producers on exit")
    parser.add_argument("sbatch_args", nargs=argparse.REMAINDER, help="-- SBATCH OPTIONS")
    args = parser.parse_args(argv)
    if not args.dispatcher:
        parser.error("give --dispatcher or set CROUPIER_DISPATCHER")
    name = args.name or f"croupier-producer-{args.dispatcher.rsplit(':', 1)[-1]}"
    producers = SlurmProducers(args.dispatcher, name,
                               [a for a in args.sbatch_args if a != "--"])
    scaler = Autoscaler(lambda: croupier.status(args.dispatcher), producers.current,
                        producers.scale, min_producers=args.min, max_producers=args.max,
                        interval=args.interval)
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
            producers.scale(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
