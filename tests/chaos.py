#!/usr/bin/env python3
"""Chaos run: a multi-epoch job with 3 producers and 4 consumers on loopback while, on a seeded
schedule, producers are SIGKILLed and restarted, frozen (SIGSTOP) and thawed (SIGCONT), the
dispatcher is SIGKILLed and restarted on the same port with the same work directory (its journal),
and consumers are SIGKILLed and restarted with their rank from an exact checkpoint (the position
after the last complete line of their --output file). At the end every rank's batches (the lines
of all its successive processes, in one file) are compared with a fault-free run of the same job
by (epoch, step, content hash) and record ids: exactly once (G1), equal steps (G2),
bit-identical (G3).

    .venv/bin/python tests/chaos.py --seconds 300 --seed 7

prints the schedule as it is applied, then a summary: faults injected by kind, batches verified,
and the longest stall (the longest time a consumer went between two consecutive batches, sampled
every 20 ms from its --output file; it includes the consumers' --slow-ms pacing). It exits 1 if a
check fails. tests/test_chaos.py runs a short version inside `make test`.

The schedule is a pure function of (seed, seconds): a list of events (start, kind, target,
duration). Each fault kind is a Fault subclass in FAULTS with its targets, how it is injected and
how it is undone.
"""
import argparse
import collections
import dataclasses
import json
import os
import pathlib
import random
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from service_cluster import (Cluster, OutputWatch, batch_hashes, check_exactly_once,  # noqa: E402
                             kill, read_batches, run)

FEATURES = "id:int64,label:int64,image:bytes"
BATCH, WORLD, PRODUCERS, SEED_JOB = 16, 4, 3, 11
# Not lower: after a dispatcher restart a healthy producer's first heartbeat can take up to ~3 s
# to land (gRPC reconnect backoff plus the client's retry backoff), and a shorter timeout expires
# every producer at each restart, which only adds stalls.
PRODUCER_TIMEOUT_MS = 3000
SLOW_MS = 60  # consumers' pacing per batch, so that the faults land mid-epoch


@dataclasses.dataclass(frozen=True)
class Event:
    start: float  # seconds after the consumers start
    kind: str
    target: str
    duration: float  # how long the fault lasts before it is undone


class Fault:
    """One kind of fault. targets() names what it can hit; inject() and recover() act on the
    running Chaos. `weight` is its share of the schedule; `durations` the (min, max) seconds."""
    kind = ""
    weight = 1.0
    durations = (0.5, 2.0)
    keeps_one_producer = False  # the schedule always leaves at least one producer untouched

    def targets(self):
        raise NotImplementedError

    def inject(self, chaos, target):
        """Applies the fault. Returns False if there was nothing to hit (then it is not undone)."""
        raise NotImplementedError

    def recover(self, chaos, target):
        raise NotImplementedError


class ProducerKill(Fault):
    """SIGKILL a producer; start a new one in its slot after the duration (a new port, so a new
    producer to the dispatcher; the dead one's work is reassigned after its timeout)."""
    kind, weight, durations, keeps_one_producer = "producer_kill", 2.0, (0.5, 3.0), True

    def targets(self):
        return [f"producer{i}" for i in range(PRODUCERS)]

    def inject(self, chaos, target):
        proc = chaos.slots[target]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def recover(self, chaos, target):
        chaos.slots[target] = chaos.cluster.add_producer()


class ProducerFreeze(Fault):
    """SIGSTOP a producer, SIGCONT it after the duration: shorter than --producer-timeout-ms it
    is a pause, longer it is presumed dead and rejoins as a new producer."""
    kind, weight, durations, keeps_one_producer = "producer_freeze", 2.0, (0.5, 5.5), True

    def targets(self):
        return [f"producer{i}" for i in range(PRODUCERS)]

    def inject(self, chaos, target):
        chaos.slots[target].send_signal(signal.SIGSTOP)
        chaos.frozen.add(target)

    def recover(self, chaos, target):
        chaos.slots[target].send_signal(signal.SIGCONT)
        chaos.frozen.discard(target)


class DispatcherKill(Fault):
    """SIGKILL the dispatcher; restart it after the duration, same port and work directory."""
    kind, weight, durations = "dispatcher_kill", 1.0, (0.3, 2.0)

    def targets(self):
        return ["dispatcher"]

    def inject(self, chaos, target):
        chaos.cluster.kill_dispatcher()

    def recover(self, chaos, target):
        chaos.cluster.restart_dispatcher()


class ConsumerKill(Fault):
    """SIGKILL a rank's `croupier consume`; after the duration start a new one for the rank at an
    exact checkpoint: the position after the last complete line of its --output file (a partial
    last line is cut first; the new process appends). The new process takes the rank over once
    the dispatcher has given up on the dead one (~3 s). A rank that had already finished is left
    alone (the event is counted as skipped)."""
    kind, weight, durations = "consumer_kill", 1.5, (0.2, 2.0)

    def targets(self):
        return [f"consumer{r}" for r in range(WORLD)]

    def inject(self, chaos, target):
        rank = int(target[len("consumer"):])
        proc = chaos.consumers[rank]
        if proc is None or proc.poll() is not None:
            return False
        kill(proc, signal.SIGKILL)
        chaos.consumers[rank] = None
        chaos.killed_at[rank] = time.monotonic()
        return True

    def recover(self, chaos, target):
        chaos.restart_consumer(int(target[len("consumer"):]))


FAULTS = {f.kind: f for f in (ProducerKill(), ProducerFreeze(), DispatcherKill(),
                              ConsumerKill())}


def schedule(seed, seconds, kinds=None):
    """The seeded list of events over [0, seconds). A target has one fault at a time, and at least
    one producer is always untouched, so that the job can always make progress."""
    rng = random.Random(seed)
    faults = [FAULTS[k] for k in (kinds or sorted(FAULTS))]
    busy = collections.defaultdict(list)  # target: [(start, end)]
    events = []
    t = rng.uniform(0.5, 1.5)
    while t < seconds:
        fault = rng.choices(faults, weights=[f.weight for f in faults])[0]
        duration = round(rng.uniform(*fault.durations), 2)
        end = t + duration

        def free(target, start=t, stop=end):
            return all(stop <= a or start >= b for a, b in busy[target])
        candidates = [x for x in fault.targets() if free(x)]
        if fault.keeps_one_producer:
            producers = FAULTS["producer_kill"].targets()
            candidates = [x for x in candidates
                          if sum(free(p) for p in producers if p != x) >= 1]
        if candidates:
            target = rng.choice(candidates)
            busy[target].append((t, end + 0.3))  # a little room to recover
            events.append(Event(round(t, 2), fault.kind, target, duration))
        t += rng.uniform(0.4, 2.0)
    return events


class Chaos:
    """Runs the job under the schedule. Use as a context manager: leaving it thaws anything
    frozen and closes the cluster (every process killed and waited for)."""

    def __init__(self, work_dir, dataset, records, epochs, events, log=print):
        self.work_dir = pathlib.Path(work_dir)
        self.dataset, self.records, self.epochs = dataset, records, epochs
        self.events = events
        self.log = log
        self.cluster = None
        self.slots = {}
        self.frozen = set()
        self.injected = collections.Counter()
        self.skipped = collections.Counter()
        self.consumers = {}  # rank: its running `croupier consume`; None while it is killed
        self.finished = set()  # ranks killed after their last batch: not restarted
        self.restarts = []  # one dict per consumer restart: rank, position, how long it took
        self.killed_at = {}  # rank: when its consumer was last SIGKILLed
        self.awaiting = {}  # rank: (restart dict, lines kept) until its new process writes

    def __enter__(self):
        self.cluster = Cluster(self.work_dir / "cluster", producer_timeout_ms=PRODUCER_TIMEOUT_MS)
        for i in range(PRODUCERS):
            self.slots[f"producer{i}"] = self.cluster.add_producer()
        return self

    def __exit__(self, *exc):
        for target in list(self.frozen):
            self.slots[target].send_signal(signal.SIGCONT)
        self.frozen.clear()
        self.cluster.close()

    def run(self, timeout):
        """Creates the job, starts the consumers, applies the schedule until it is over and the
        consumers have finished (or `timeout` seconds), and returns (outs, watch)."""
        job = self.cluster.create_job("train", self.dataset, FEATURES, BATCH, WORLD,
                                      seed=SEED_JOB, epochs=self.epochs)
        self.steps_per_epoch = int(job.get("stepsPerEpoch", job.get("steps_per_epoch", 0)))
        assert self.steps_per_epoch == self.records // (WORLD * BATCH), job
        self.outs = outs = [self.work_dir / f"rank{r}.jsonl" for r in range(WORLD)]
        for r in range(WORLD):
            self.consumers[r] = self.cluster.start_consumer("train", r, WORLD, outs[r],
                                                            self.epochs, "--slow-ms", SLOW_MS)
        watch = OutputWatch(outs)
        start = time.monotonic()
        deadline = start + timeout
        pending = sorted(self.events, key=lambda e: e.start)
        active = []  # (undo time, event)
        applied = []  # (time, what, event)
        while True:
            now = time.monotonic() - start
            watch.poll()
            for rank, (restart, kept) in list(self.awaiting.items()):
                if watch.counts[rank] > kept:  # the new process's first batch
                    t = time.monotonic()
                    restart["kill_to_batch_s"] = round(t - restart["killed"], 2)
                    restart["restart_to_batch_s"] = round(t - restart["restarted"], 2)
                    del self.awaiting[rank]
            for undo_at, event in sorted(active, key=lambda a: a[0]):
                if undo_at <= now:
                    self.log(f"{now:7.2f} s  undo   {event.kind:16} {event.target}")
                    FAULTS[event.kind].recover(self, event.target)
                    active.remove((undo_at, event))
                    applied.append((now, "undo", event))
            consumers_done = self.consumers_done()
            while pending and pending[0].start <= now and not consumers_done:
                event = pending.pop(0)
                if FAULTS[event.kind].inject(self, event.target) is False:
                    self.skipped[event.kind] += 1
                    self.log(f"{now:7.2f} s  skip   {event.kind:16} {event.target} "
                             f"(already finished)")
                    continue
                self.injected[event.kind] += 1
                active.append((now + event.duration, event))
                applied.append((now, "inject", event))
                self.log(f"{now:7.2f} s  inject {event.kind:16} {event.target} "
                         f"for {event.duration:.2f} s")
            failed = [p for p in self.consumers.values()
                      if p is not None and p.poll() not in (None, 0)]
            if failed or (consumers_done and not active):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the consumers did not finish within {timeout} s: "
                                     f"{watch.counts} batches written")
            time.sleep(0.02)
        self.cluster.wait([p for p in self.consumers.values() if p is not None],
                          timeout=max(0.1, deadline - time.monotonic()))
        watch.poll()
        self.timeline = [(t, what, e) for t, what, e in applied]
        self.start = start
        return outs, watch


    def consumers_done(self):
        return all(r in self.finished or (p is not None and p.poll() is not None)
                   for r, p in self.consumers.items())

    def restart_consumer(self, rank):
        """Starts a new `croupier consume` for `rank` at the position after the last complete
        line of its output (cutting a partial last line first), with --first-epoch and
        --start-step: an exact checkpoint, so the file goes on as if nothing had happened."""
        out = self.outs[rank]
        epoch, step, lines, cut = checkpoint_position(out, self.steps_per_epoch)
        restart = {"rank": rank, "epoch": epoch, "step": step,
                   "partial_bytes_cut": cut, "killed": self.killed_at[rank],
                   "restarted": time.monotonic()}
        self.restarts.append(restart)
        # Keep the killed process's log: the new one writes consumer-train-R.log afresh.
        old = self.work_dir / "cluster" / f"consumer-train-{rank}.log"
        if old.exists():
            old.rename(old.with_name(f"consumer-train-{rank}-killed{len(self.restarts)}.log"))
        if epoch >= self.epochs:
            self.finished.add(rank)  # killed after its last batch: nothing left to take
            self.log(f"{'':7}    rank {rank} had every batch: not restarted")
            return
        self.log(f"{'':7}    rank {rank} restarts at epoch {epoch} step {step} "
                 f"({lines} lines kept, {cut} partial bytes cut)")
        self.consumers[rank] = self.cluster.start_consumer(
            "train", rank, WORLD, out, self.epochs - epoch, "--slow-ms", SLOW_MS,
            "--first-epoch", epoch, "--start-step", step)
        self.awaiting[rank] = (restart, lines)


def checkpoint_position(out, steps_per_epoch):
    """A killed consumer's exact checkpoint from its --output file: cuts a partial last line (a
    write the SIGKILL interrupted) and returns (epoch, step, complete lines, bytes cut), where
    (epoch, step) is the batch after the last complete line: its step + 1, or step 0 of the next
    epoch after an epoch's last step; (0, 0) for an empty or missing file."""
    out = pathlib.Path(out)
    data = out.read_bytes() if out.exists() else b""
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        os.truncate(out, keep)
    lines = data[:keep].splitlines()
    epoch, step = 0, 0
    if lines:
        last = json.loads(lines[-1])
        epoch, step = last["epoch"], last["step"] + 1
        if step >= steps_per_epoch:
            epoch, step = epoch + 1, 0
    return epoch, step, len(lines), len(data) - keep


def make_dataset(out_dir, records):
    run("synth", "--out", out_dir, "--files", 4, "--records", records, "--image-bytes", 128,
        "--quiet")
    return sorted(pathlib.Path(out_dir).glob("*.tfrecord"))


def reference_run(work_dir, dataset, epochs):
    """The same job without faults, one producer, no pacing: each rank's [(epoch, step, hash)]."""
    work_dir = pathlib.Path(work_dir)
    with Cluster(work_dir / "cluster") as cluster:
        cluster.add_producer()
        cluster.create_job("train", dataset, FEATURES, BATCH, WORLD, seed=SEED_JOB, epochs=epochs)
        outs = [work_dir / f"rank{r}.jsonl" for r in range(WORLD)]
        procs = [cluster.start_consumer("train", r, WORLD, outs[r], epochs) for r in range(WORLD)]
        cluster.wait(procs, timeout=120)
    return [batch_hashes(read_batches(o)) for o in outs]


def job_size(seconds, epochs):
    """Records for a job whose paced consumption lasts about 70% of `seconds` (faults stretch
    it), in whole rounds of WORLD x BATCH."""
    steps = max(10, int(0.7 * seconds * 1000 / SLOW_MS / epochs))
    return steps * WORLD * BATCH


def chaos_run(work_dir, seconds, seed, epochs=3, log=print):
    """The whole run: dataset, fault-free reference, chaos, checks. Returns the summary dict;
    raises AssertionError if a check fails."""
    work_dir = pathlib.Path(work_dir)
    records = job_size(seconds, epochs)
    dataset = make_dataset(work_dir / "data", records)
    reference = reference_run(work_dir / "reference", dataset, epochs)
    events = schedule(seed, seconds)
    log(f"chaos: seed {seed}, {seconds} s of faults, {records} records, {epochs} epochs, "
        f"{PRODUCERS} producers, {WORLD} consumers, batch {BATCH}, "
        f"--producer-timeout-ms {PRODUCER_TIMEOUT_MS}, consumers paced at {SLOW_MS} ms/batch; "
        f"{len(events)} events scheduled")
    t0 = time.monotonic()
    with Chaos(work_dir / "chaos", dataset, records, epochs, events, log=log) as chaos:
        outs, watch = chaos.run(timeout=seconds * 2 + 120)
        elapsed = time.monotonic() - t0
    verified = check_exactly_once(outs, reference, records, BATCH, SEED_JOB,
                                  epochs=range(epochs))
    stall_faults = []
    if watch.longest_span:
        a, b = (x - chaos.start for x in watch.longest_span)
        # Faults active during the stall, or undone at most 1 s before it began.
        active = {}
        for t, what, e in chaos.timeline:
            if what == "inject":
                active[e] = (t, None)
            else:
                active[e] = (active[e][0], t)
        stall_faults = [f"{e.kind} {e.target} [{s:.1f}-{u if u is None else round(u, 1)} s]"
                        for e, (s, u) in active.items() if s <= b and (u is None or u >= a - 1)]
    return {
        "seed": seed, "seconds": seconds, "records": records, "epochs": epochs,
        "faults": dict(sorted(chaos.injected.items())),
        "skipped": dict(sorted(chaos.skipped.items())),
        # Per restart: the position it resumed at, and the time from the SIGKILL (or from the new
        # process's start) to the rank's next batch in its output.
        "consumer_restarts": [{k: v for k, v in r.items() if k not in ("killed", "restarted")}
                              for r in chaos.restarts],
        "batches_verified": verified,
        "longest_stall_s": round(watch.longest, 2),
        "longest_stall_at": None if not watch.longest_span else
        {"rank": watch.longest_at[0], "after_batch": watch.longest_at[1],
         "from_s": round(watch.longest_span[0] - chaos.start, 2),
         "to_s": round(watch.longest_span[1] - chaos.start, 2),
         "faults_near": stall_faults},
        "elapsed_s": round(elapsed, 1),
    }


def print_summary(summary):
    print("\nchaos summary")
    print(f"  seed {summary['seed']}, {summary['seconds']} s schedule, "
          f"{summary['records']} records x {summary['epochs']} epochs, run took "
          f"{summary['elapsed_s']} s")
    print("  faults injected by kind:")
    for kind in sorted(FAULTS):
        skipped = summary["skipped"].get(kind, 0)
        print(f"    {kind:16} {summary['faults'].get(kind, 0)}"
              + (f" ({skipped} more skipped: the target had finished)" if skipped else ""))
    if summary["consumer_restarts"]:
        print("  consumer restarts (rank at epoch/step: SIGKILL to its next batch, of which "
              "restart to next batch):")
        for c in summary["consumer_restarts"]:
            took = (f"{c['kill_to_batch_s']:.2f} s, {c['restart_to_batch_s']:.2f} s"
                    if "kill_to_batch_s" in c else "no batch after it")
            cut = f"; cut {c['partial_bytes_cut']} partial bytes" if c["partial_bytes_cut"] else ""
            print(f"    rank {c['rank']} at {c['epoch']}/{c['step']}: {took}{cut}")
    print(f"  batches verified:  {summary['batches_verified']} (exactly once, in order, "
          f"bit-identical to the fault-free run)")
    at = summary["longest_stall_at"]
    print(f"  longest stall:     {summary['longest_stall_s']:.2f} s (consumer rank {at['rank']} "
          f"after batch {at['after_batch']}, {at['from_s']}-{at['to_s']} s into the run; "
          f"includes {SLOW_MS} ms pacing)" if at else "  longest stall: none")
    if at and at["faults_near"]:
        print(f"    faults around it: {'; '.join(at['faults_near'])}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60, help="length of the fault schedule")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    work_dir = pathlib.Path(tempfile.mkdtemp(prefix="croupier-chaos-"))
    ok = False
    try:
        summary = chaos_run(work_dir, args.seconds, args.seed, args.epochs)
        print_summary(summary)
        ok = True
    except AssertionError as e:
        print(f"\nCHAOS CHECK FAILED (seed {args.seed}): {e}", file=sys.stderr)
    finally:
        if args.keep or not ok:
            print(f"work directory kept: {work_dir}", file=sys.stderr)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
