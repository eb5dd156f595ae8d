"""croupier.produce: map jobs (records read by index from a Python source, transformed by the
producers) with every guarantee of a TFRecord job, checked on content over real processes: a
dispatcher and `croupier consume` processes from tests/service_cluster.py, and producers started
as `python -m croupier produce map_sources:pipeline` (tests/map_sources.py); produce() called on
a thread of the test runs over the in-process cluster (croupier.testing)."""
import collections
import contextlib
import errno
import _imp
import gc
import importlib
import inspect
import json
import mmap
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref

import numpy as np
import pytest

import croupier
from croupier import errors
from croupier.testing import in_process_cluster
from croupier.map.pipeline import Pipeline, record_rng
from croupier.map import zygote
from croupier.map.pool import WorkerPool
from croupier.map.record_threads import RecordThreads
from croupier.runtime import processes
from croupier.map.record_cache import RecordCache, _pid_namespace, default_root, summary

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import map_sources  # noqa: E402
from service_cluster import (Cluster, batch_hashes, check_plan_ids, kill,  # noqa: E402
                             read_batches)

TESTS = pathlib.Path(__file__).resolve().parent
PYTHON_PATH = os.pathsep.join([str(TESTS), str(TESTS.parent / "python")])


def start_producer(cluster, job, name, pipeline="map_sources:pipeline", **opts):
    """A `python -m croupier produce PIPELINE` process serving map job `job` with
    $MAP_TEST = opts."""
    env = dict(cluster.env, MAP_TEST=json.dumps(opts),
               PYTHONPATH=os.pathsep.join([PYTHON_PATH, cluster.env.get("PYTHONPATH", "")]))
    log = open(cluster.work_dir / f"{name}.log", "w")
    workers = opts.get("workers", 1)
    proc = subprocess.Popen([sys.executable, "-m", "croupier", "produce", pipeline,
                             "--dispatcher", cluster.address, "--job", job,
                             "--workers", str(workers)],
                            stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    proc.log_path = cluster.work_dir / f"{name}.log"
    cluster.procs.append(proc)
    return proc


def wait_for_job(cluster, job, timeout=90):
    """Waits until the producers have created `job`. Generous: a producer of a tf.data pipeline
    imports TensorFlow first (8 s alone on a slow VM, and over 30 s there beside the other tests);
    a producer that exits fails the wait at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(j["name"] == job for j in cluster.status().get("jobSummaries", [])):
            return
        for p in cluster.procs:
            if p.poll() not in (None, 0) and hasattr(p, "log_path"):
                raise AssertionError(f"a process exited {p.returncode}:\n"
                                     f"{p.log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"job {job} was not created within {timeout} s")


def run_job(work_dir, producers=1, workers=1, world=2, epochs=2, kill_after=None,
            pipeline="map_sources:pipeline", **opts):
    """Runs map job "m" with `producers` producer processes of `workers` workers each and `world`
    consumer processes; `kill_after` (a number of batches) SIGKILLs producer 0 once rank 0 has
    read that many, and starts a new one. Returns each rank's consumer output lines."""
    opts = dict(opts, consumers=world, epochs=epochs, pipeline=pipeline)
    with Cluster(work_dir, producer_timeout_ms=1500) as cluster:
        procs = [start_producer(cluster, "m", f"producer{k}", workers=workers, **opts)
                 for k in range(producers)]
        wait_for_job(cluster, "m")
        outs = [work_dir / f"rank{r}.jsonl" for r in range(world)]
        # With a kill, the ranks wait for the new producer, which may take long to start (a
        # tf.data pipeline's imports TensorFlow: over 30 s beside the other tests on a slow VM).
        extra = (["--prefetch", "1", "--slow-ms", "40", "--timeout-ms", "120000"] if kill_after
                 else [])
        consumers = [cluster.start_consumer("m", r, world, outs[r], epochs, *extra)
                     for r in range(world)]
        if kill_after:
            deadline = time.monotonic() + 60
            while not outs[0].exists() or len(read_batches(outs[0])) < kill_after:
                assert time.monotonic() < deadline, "the consumers did not start"
                time.sleep(0.05)
            kill(procs[0], signal.SIGKILL)
            start_producer(cluster, "m", "producer-restarted", workers=workers, **opts)
        cluster.wait(consumers, timeout=180 if kill_after else 120)
    return [read_batches(o) for o in outs]


def planned_batches(world=2, epochs=2, pipeline="map_sources:pipeline", **opts):
    """What the ranks of run_job(world=world, epochs=epochs, pipeline=pipeline, **opts) read, made
    here from the plan and the pipeline alone, with no cluster: per rank, a line per batch as
    `croupier consume` writes it (epoch, step, hash, ids). What a batch holds is a function of the
    plan, so these are a fault-free run's bytes."""
    module, _, name = pipeline.partition(":")
    args = getattr(importlib.import_module(module), name)(
        dict(opts, consumers=world, epochs=epochs))
    maker = Pipeline(args["source"], transform=args.get("transform"),
                     tf_transform=args.get("tf_transform"), decode=args.get("decode"),
                     features=args.get("features"), seed=args["seed"])
    out = [[] for _ in range(world)]
    for epoch in range(epochs):
        plan = croupier.EpochPlan(len(args["source"]), args["batch_size"], world,
                                  seed=args["seed"], epoch=epoch, shuffle=args["shuffle"])
        for rank in range(world):
            for step in range(plan.steps_per_consumer):
                g = plan.global_batch(rank, step)
                ids = plan.batch(g)
                content = maker.make(epoch, g, ids).content_hash
                out[rank].append({"epoch": epoch, "step": step, "hash": f"{content:016x}",
                                  "ids": ids.tolist()})
    return out


def planned_hashes(**opts):
    """planned_batches(**opts) as batch_hashes gives a run's: [(epoch, step, hash)] per rank."""
    return [batch_hashes(r) for r in planned_batches(**opts)]


def check_against_plan(per_rank, records, batch_size, seed, epochs, shuffle="global"):
    """Every rank got the plan's batches in order (equal steps), every record once per epoch."""
    check_plan_ids(per_rank, records, batch_size, seed, range(epochs), shuffle)


def error_of_rank_1(cluster, job, error=errors.InvalidArgumentError):
    """Reads epoch 0 of a 2-rank `job` whose global batch 7 (rank 1's step 3) fails with `error`:
    rank 0 reads all of its 6 batches on a thread, rank 1 reads until the error. The error's
    message."""
    feeds = [croupier.Consumer(cluster.address, job, r, 2, timeout=30) for r in range(2)]
    got = []
    reader = threading.Thread(target=lambda: got.extend(feeds[0].batches(0)), daemon=True)
    reader.start()
    steps = 0
    try:
        with pytest.raises(error) as raised:
            for _ in feeds[1].batches(0):
                steps += 1
        reader.join(30)
        assert steps == 3 and len(got) == 6
        return str(raised.value)
    finally:
        for f in feeds:
            f.close()


def descendants(pid):
    """The pids of the processes below `pid` (children, their children, ...), from /proc."""
    children = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it exited meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def left_behind(pids, timeout=10):
    """Those of `pids` still present (running, or a zombie nobody reaped) after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if pathlib.Path(f"/proc/{p}").exists()]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def wait_dead(pids, timeout=10):
    """Waits until every process of `pids` has exited (gone, or a zombie not reaped yet)."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while True:
            try:
                state = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            except FileNotFoundError:
                break
            if state == "Z":
                break
            assert time.monotonic() < deadline, f"process {pid} is still running"
            time.sleep(0.01)


def death_lines(log_path):
    """The lines a producer logged about its dead workers."""
    return [line for line in pathlib.Path(log_path).read_text().splitlines()
            if "croupier produce: worker" in line and " died " in line]


def records_not_in_the_first_batch(records, batch_size, world, seed, wanted):
    """The records of `wanted` that batch 0 of epoch 0 does not hold: produce() makes that batch
    in the producer process itself (to read the features), where a Killing record would kill the
    producer rather than a worker."""
    first = set(croupier.EpochPlan(records, batch_size, world, seed=seed, epoch=0,
                                   shuffle="global").batch(0).tolist())
    return [i for i in wanted if i not in first]


@pytest.mark.timeout(120)
def test_a_map_source_with_a_random_transform_is_dealt_as_planned(tmp_path):
    per_rank = run_job(tmp_path / "run", records=96, batch_size=4)
    check_against_plan(per_rank, 96, 4, seed=5, epochs=2)


@pytest.mark.long
@pytest.mark.timeout(240)
def test_same_bytes_with_one_or_three_producers_one_or_four_workers_and_threads(tmp_path):
    one = run_job(tmp_path / "one", producers=1, workers=1, records=96, batch_size=4)
    many = run_job(tmp_path / "many", producers=3, workers=4, records=96, batch_size=4,
                   transform_threads=4)
    assert [batch_hashes(r) for r in one] == [batch_hashes(r) for r in many]
    assert len(one[0]) == 2 * 12
    # Threads only: no worker process, the producer's own threads and "auto" record threads.
    threads = run_job(tmp_path / "threads", producers=1, workers=0, records=96, batch_size=4,
                      transform_threads="auto")
    assert [batch_hashes(r) for r in threads] == [batch_hashes(r) for r in one]


def test_record_threads_give_the_same_batches_and_the_same_first_error():
    """A batch's records on 1, 4 or "auto" threads: the same bytes, and, when records fail, the
    error the serial order meets first (a failing read before a failing transform)."""
    ids = np.array([9, 2, 31, 4, 17, 5, 22, 8], dtype=np.uint64)
    made = {}
    for threads in (1, 4, "auto"):
        pipeline = Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5,
                            transform_threads=threads)
        made[threads] = [pipeline.make(e, g, ids).content_hash for e in range(2) for g in range(5)]
        assert pipeline.transform_threads in (1, 4)  # "auto" chose after 3 batches of each
    assert made[1] == made[4] == made["auto"]

    def failing_transform(record):
        if int(record["id"]) == 2:
            raise ValueError("transform of 2")
        return record

    for threads in (1, 4):
        pipeline = Pipeline(map_sources.Records(40, fail_at=17), transform=failing_transform,
                            transform_threads=threads)
        with pytest.raises(croupier.errors.BatchError, match=r"^record 17: "):
            pipeline.make(0, 0, ids)  # record 2's transform fails first in time, not in order


def test_transform_threads_are_checked():
    for bad in (0, -1, "many", 1.5):
        with pytest.raises(errors.InvalidArgumentError, match="transform_threads"):
            Pipeline(map_sources.Records(4), transform_threads=bad)


@pytest.mark.timeout(60)
def test_a_pool_forked_after_record_threads_ran_makes_batches_on_its_own_threads():
    """The producer makes batch 0 in its own process (its record threads start) and then forks
    the zygote: the threads are shut down before the fork and each worker starts its own."""
    pipeline = Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5,
                        transform_threads=4)
    ids = np.arange(8, dtype=np.uint64)
    want = pipeline.make(0, 0, ids).content_hash
    pool = WorkerPool(pipeline, 2)
    try:
        assert [pool.make(0, 0, ids).content_hash for _ in range(4)] == [want] * 4
    finally:
        pool.close()


class ShutDownAsItIsHandedOut(RecordThreads):
    """Record threads whose pool a fork shuts down (the before-fork hook, from the forking
    thread) just after map() took it and before it gave the pool its records."""

    def _pool(self, count):
        pool = super()._pool(count)
        if not getattr(self, "raced", False):
            self.raced = True
            self.shutdown()
        return pool


@pytest.mark.timeout(60)
def test_a_map_whose_pool_a_fork_shuts_down_goes_on_in_a_new_pool():
    threads = ShutDownAsItIsHandedOut(2)
    assert threads.map(lambda k: k * k, range(6)) == [k * k for k in range(6)]
    assert threads.raced


@pytest.mark.timeout(180)
@pytest.mark.parametrize("second_signal", [False, True], ids=["drained", "second_signal"])
def test_a_map_producer_stopped_mid_epoch_serves_what_it_made_then_leaves(tmp_path,
                                                                          second_signal):
    """SIGTERM to one of two map producers (`croupier produce`) while the ranks read slowly: it
    drains. It says so, keeps the tasks it has made whole and serves them, its other tasks go
    to the other producer at once, and it exits 0 well within its bound. Every rank gets the
    bytes of a run without a stop. A second SIGTERM while it drains (the ranks paused) makes it
    leave at once: what it kept and did not serve goes to the other producer."""
    opts = dict(records=960, batch_size=4, drain_timeout=30)
    reference = planned_hashes(world=2, epochs=1, **opts)
    opts.update(consumers=2, epochs=1)
    with Cluster(tmp_path / "run", producer_timeout_ms=60000,
                 dispatcher_args=["--rounds-per-task", "1"]) as cluster:
        procs = [start_producer(cluster, "m", f"producer{k}", workers=1, **opts)
                 for k in range(2)]
        wait_for_job(cluster, "m")
        outs = [tmp_path / f"rank{r}.jsonl" for r in range(2)]
        consumers = [cluster.start_consumer("m", r, 2, outs[r], 1, "--slow-ms", "60")
                     for r in range(2)]
        deadline = time.monotonic() + 60
        while not outs[0].exists() or len(read_batches(outs[0])) < 8:
            assert time.monotonic() < deadline, "the consumers did not start"
            time.sleep(0.05)
        # Stopped once it has made two tasks' batches (4) more than it served: then it holds a
        # task it has made whole.
        address = re.search(r"serving on (\S+) ", procs[0].log_path.read_text())[1]
        deadline = time.monotonic() + 30
        while not any(p["dataAddress"] == address and
                      int(p["stats"].get("batchesMade", 0)) -
                      int(p["stats"].get("batchesServed", 0)) >= 4
                      for p in cluster.status()["producers"]):
            assert time.monotonic() < deadline, "the producer made no 4 batches ahead"
            time.sleep(0.05)
        stopped = time.monotonic()
        for c in consumers:  # paused: else a loaded machine may serve them before the drain
            c.send_signal(signal.SIGSTOP)
        try:
            procs[0].terminate()
            deadline = time.monotonic() + 20
            while "drains: it serves the" not in procs[0].log_path.read_text():
                assert time.monotonic() < deadline, "the producer did not drain"
                time.sleep(0.05)
            if second_signal:  # while the ranks are paused: nothing it kept can be served
                procs[0].terminate()
                assert procs[0].wait(timeout=10) == 0
        finally:
            for c in consumers:
                c.send_signal(signal.SIGCONT)
        assert procs[0].wait(timeout=40) == 0
        took = time.monotonic() - stopped
        cluster.wait(consumers, timeout=120)
        log = procs[0].log_path.read_text()
    assert "signal 15: leaving (serving what it has made, handing the rest back)" in log, log
    drained = re.search(r"drained: served (\d+) of the (\d+) tasks it had made", log)
    assert drained and int(drained[2]) > 0, log[-3000:]
    if second_signal:
        assert "signal 15: leaving now" in log, log[-3000:]
        assert int(drained[1]) < int(drained[2]), log[-3000:]
    else:
        assert drained[1] == drained[2], log[-3000:]
    assert took < 25, f"it took {took:.1f} s to leave"
    print(f"map producer drained: kept {drained[2]} tasks, served {drained[1]}, left in "
          f"{took:.2f} s")
    got = [read_batches(o) for o in outs]
    assert [batch_hashes(r) for r in got] == reference


@pytest.mark.timeout(200)
def test_a_producer_killed_mid_epoch_changes_no_byte(tmp_path):
    killed = run_job(tmp_path / "killed", records=96, batch_size=4, kill_after=5)
    assert [batch_hashes(r) for r in killed] == planned_hashes(records=96, batch_size=4)


@pytest.mark.timeout(200)
def test_a_producer_whose_zygote_dies_leaves_and_the_other_makes_its_batches(tmp_path):
    """SIGKILL of producer 0's zygote (and so of its workers) mid-epoch, with a second, healthy
    producer. Before, every consumer exited within 2 s with INTERNAL ('no worker is left') and
    most records were never delivered. Now producer 0 leaves the job at once (its batches were
    UNAVAILABLE meanwhile, which consumers retry) and exits 1 naming its zygote; producer 1 makes
    its tasks, and every rank gets the plan's batches, each record once. The producer timeout
    (60 s) is beyond the consumers' deadline (30 s): only the leaving can hand the tasks over."""
    world, epochs, records = 2, 2, 960  # 120 steps an epoch at 30 ms: the kill lands early
    opts = dict(consumers=world, epochs=epochs, records=records, batch_size=4, workers=2)
    with Cluster(tmp_path, producer_timeout_ms=60000) as cluster:
        procs = [start_producer(cluster, "m", f"producer{k}", **opts) for k in range(2)]
        wait_for_job(cluster, "m")
        outs = [tmp_path / f"rank{r}.jsonl" for r in range(world)]
        consumers = [cluster.start_consumer("m", r, world, outs[r], epochs, "--prefetch", "1",
                                            "--slow-ms", "30") for r in range(world)]
        deadline = time.monotonic() + 60
        while not outs[0].exists() or len(read_batches(outs[0])) < 5:
            assert time.monotonic() < deadline, "the consumers did not start"
            time.sleep(0.05)
        zygote = next(pid for pid in descendants(procs[0].pid)
                      if pathlib.Path(f"/proc/{pid}/stat").read_text()
                      .rpartition(")")[2].split()[1] == str(procs[0].pid))
        os.kill(zygote, signal.SIGKILL)
        assert procs[0].wait(timeout=30) == 1
        log = procs[0].log_path.read_text()
        assert "left it: its worker pool can make no batch any more" in log, log[-3000:]
        assert f"zygote process (pid {zygote}) is gone" in log, log[-3000:]
        cluster.wait(consumers, timeout=120)
    per_rank = [read_batches(o) for o in outs]
    check_against_plan(per_rank, records, 4, seed=5, epochs=epochs)


@pytest.mark.timeout(200)
def test_workers_killed_mid_batch_change_no_byte(tmp_path):
    """Three records SIGKILL the worker that makes them, the first time only: each batch in
    flight is made again by a replacement worker, and the trainers get exactly the batches, and
    the bytes, of the fault-free run."""
    markers = tmp_path / "markers"
    markers.mkdir()
    doomed = records_not_in_the_first_batch(96, 4, 2, 5, [10, 41, 77, 90])[:3]
    killed = run_job(tmp_path / "killed", workers=2, records=96, batch_size=4,
                     kill={"records": doomed, "marker_dir": str(markers)})
    assert sorted(p.name for p in markers.iterdir()) == sorted(f"killed-{i}" for i in doomed)
    check_against_plan(killed, 96, 4, seed=5, epochs=2)
    assert [batch_hashes(r) for r in killed] == planned_hashes(records=96, batch_size=4)
    lines = death_lines(tmp_path / "killed" / "producer0.log")
    assert len(lines) == len(doomed), lines
    assert all("killed by signal 9, SIGKILL" in line and "makes the batch again" in line
               for line in lines), lines


@pytest.mark.timeout(120)
def test_a_record_that_kills_every_worker_fails_its_batch_only(tmp_path):
    with Cluster(tmp_path / "c") as cluster:
        # Record 30 kills the worker that makes it, every time; batch 0 (records 0-3, shuffle
        # none) is fine. Global batch 7 holds records 28-31: rank 1's step 3.
        producer = start_producer(cluster, "m", "producer0", records=48, shuffle="none",
                                  consumers=2, epochs=1, batch_size=4, workers=2,
                                  kill={"records": [30]})
        wait_for_job(cluster, "m")
        message = error_of_rank_1(cluster, "m", errors.InternalError)
        assert "epoch 0 batch 7" in message and "tried twice" in message and \
            message.count("killed by signal 9, SIGKILL") == 2, message
        # The producer may have made the batch more than once (ahead, then when asked): each
        # death is one line, and the two the error names are among them.
        lines = death_lines(producer.log_path)
        assert all("batch 7 of epoch 0" in line for line in lines), lines
        pids = re.findall(r"worker pid (\d+) \(killed by signal 9, SIGKILL\)", message)
        assert len(pids) == 2, message
        for pid in pids:
            assert any(f"(pid {pid}) died (killed by signal 9, SIGKILL) while making batch 7 of "
                       "epoch 0" in line for line in lines), (pid, lines)
        # Rank 1's later steps still come, and the pool is still the zygote and 2 workers.
        feed = croupier.Consumer(cluster.address, "m", 1, 2, timeout=30)
        feed.load_state_dict({"format": 1, "job": "m", "world": 2, "ranks": [1], "epoch": 0,
                              "step": 4})
        assert [b.num_records for b in feed.batches(0)] == [4, 4]
        feed.close()
        processes = descendants(producer.pid)
        assert len(processes) == 3, processes
        kill(producer, signal.SIGTERM, timeout=30)
        assert producer.returncode == 0, producer.log_path.read_text()[-3000:]
        assert not left_behind(processes), "the producer left processes behind"


@pytest.mark.timeout(60)
def test_a_worker_killed_between_batches_is_replaced(caplog):
    pipe = Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5)
    ids = np.array([7, 3, 30, 12], dtype=np.uint64)
    want = pipe.make(1, 9, ids).content_hash
    pool = WorkerPool(pipe, 2)
    first = pool.pids
    try:
        victim = first[1]
        os.kill(victim, signal.SIGKILL)
        wait_dead([victim])  # a zombie until the pool notices and the zygote reaps it
        for _ in range(4):  # each worker's turn comes
            assert pool.make(1, 9, ids).content_hash == want
        now = pool.pids
        assert len(now) == 3 and now[0] == first[0] and victim not in now
        assert not left_behind([victim]), "the zygote reaped the dead worker"
    finally:
        pool.close()
    assert not left_behind(first + now), "closing the pool ends the zygote and the workers"
    lines = [r.getMessage() for r in caplog.records if r.name == "croupier.pipeline"]
    assert len(lines) == 1 and f"(pid {victim}) died (killed by signal 9, SIGKILL) before it " \
        "got batch 9 of epoch 1" in lines[0], lines


def mapping_of(address):
    """The name and inode of the mapping of this process holding `address` (/proc/self/maps)."""
    with open("/proc/self/maps") as f:
        for line in f:
            span, _, _, _, inode, *name = line.split()
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                return (name[0] if name else ""), int(inode)
    return "", 0


@pytest.mark.timeout(60)
def test_a_workers_batch_is_served_from_the_slot_it_was_laid_out_in():
    """One copy: the worker lays the batch out in a shared-memory slot and the producer's Batch
    is that memory (not a copy on the heap); a slot is reused once its batch is dropped, and grows
    for a larger batch; the bytes equal the batch made in this process."""
    def widen(record):  # 256 KiB a record
        return {**record, "wide": np.full(1 << 16, record["id"], dtype=np.float32)}

    pipeline = Pipeline(map_sources.Records(40), transform=widen)
    pool = WorkerPool(Pipeline(map_sources.Records(40), transform=widen), 1)
    try:
        small = np.array([3], dtype=np.uint64)
        batch = pool.make(0, 1, small)
        assert batch.content_hash == pipeline.make(0, 1, small).content_hash
        assert "croupier-batch-slot" in mapping_of(batch.buffer_address)[0]
        address = batch.buffer_address
        held = pool.make(0, 2, small)  # the first slot is still held by `batch`
        assert mapping_of(held.buffer_address) != mapping_of(address)
        del batch, held
        again = pool.make(0, 3, small)
        assert mapping_of(again.buffer_address) == mapping_of(address)
        del again
        large = np.arange(8, dtype=np.uint64)  # 2 MiB: the worker grows its 1 MiB slot
        big = pool.make(1, 0, large)
        assert big.nbytes > 2 << 20
        assert big.content_hash == pipeline.make(1, 0, large).content_hash
        assert "croupier-batch-slot" in mapping_of(big.buffer_address)[0]
    finally:
        pool.close()
    assert big.to_dict()["wide"].shape == (8, 1 << 16)  # a batch outlives its pool


def minor_faults(pid):
    """The minor page faults of process `pid` so far (/proc/PID/stat, field 10)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


@pytest.mark.timeout(60)
def test_a_worker_makes_its_next_batch_in_the_memory_of_the_last():
    """A worker holds a batch's records at once, then frees them: it keeps that memory for the
    next batch (src/common/memory.h, KeepFreedMemoryForReuse) instead of giving it back and
    faulting every page in again. 32 records of 600 KB: without it each batch costs about 4,700
    page faults in the worker; with it, after the first batches, a few dozen."""
    def widen(record):  # 600 KB a record, made in the worker and freed once stacked
        return {**record, "wide": np.full(150_000, record["id"], dtype=np.float32)}

    pool = WorkerPool(Pipeline(map_sources.Records(64), transform=widen), 1)
    try:
        ids = np.arange(32, dtype=np.uint64)
        for g in range(2):  # the memory and the slot, made once
            pool.make(0, g, ids)
        _, pid = pool.pids  # the zygote, the worker
        before = minor_faults(pid)
        for g in range(2, 6):
            batch = pool.make(0, g, ids)
            assert batch.to_dict()["wide"].shape == (32, 150_000)
            del batch  # its slot is reused for the next
        per_batch = (minor_faults(pid) - before) / 4
    finally:
        pool.close()
    assert per_batch < 500, f"{per_batch:.0f} page faults a batch in the worker"


@pytest.mark.timeout(120)
def test_a_trainer_on_the_same_host_reads_the_workers_slot_and_a_slot_it_still_holds_is_kept(
        tmp_path):
    """End to end, one copy: a trainer on the producer's host (shared memory) maps the very
    memfd the worker laid the batch out in. A trainer whose connection closes while it still
    holds batches keeps their bytes: their slots are retired, never written again, while the
    worker goes on making the other rank's batches."""
    opts = dict(records=400, batch_size=4, consumers=2, epochs=1, pipeline="map_sources:pipeline")
    with Cluster(tmp_path / "run") as cluster:
        start_producer(cluster, "m", "producer0", workers=1, **opts)
        wait_for_job(cluster, "m")
        held, hashes = [], []
        rank0 = croupier.Consumer(cluster.address, "m", 0, 2, timeout=30)
        try:
            for batch in rank0.batches(0):
                assert "croupier-batch-slot" in mapping_of(batch.buffer_address)[0]
                held.append(batch)
                hashes.append(batch.content_hash)
                if len(held) == 6:
                    break
        finally:
            rank0.close()  # its connection closes while it holds 6 batches
        rank1 = croupier.Consumer(cluster.address, "m", 1, 2, timeout=30)
        try:
            read = sum(1 for _ in rank1.batches(0))  # the worker makes 50 more batches meanwhile
        finally:
            rank1.close()
        assert read == 50
        assert [b.content_hash for b in held] == hashes


@pytest.mark.timeout(60)
def test_a_batch_whose_worker_dies_is_made_again_identically(tmp_path, caplog):
    ids = np.array([7, 3, 30, 12], dtype=np.uint64)
    want = Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5) \
        .make(1, 9, ids).content_hash
    pool = WorkerPool(Pipeline(map_sources.Records(40), seed=5,
                                transform=map_sources.Killing([30], str(tmp_path))), 2)
    try:
        assert pool.make(1, 9, ids).content_hash == want
        assert pool.make(1, 9, ids).content_hash == want
        pids = pool.pids
        assert len(pids) == 3
    finally:
        pool.close()
    assert not left_behind(pids)
    lines = [r.getMessage() for r in caplog.records if r.name == "croupier.pipeline"]
    assert len(lines) == 1 and "while making batch 9 of epoch 1" in lines[0] and \
        "which makes the batch again" in lines[0], lines


@pytest.mark.timeout(90)
def test_a_stuck_worker_is_killed_and_its_batch_made_again_identically(tmp_path, caplog):
    """A worker that gives no answer within the batch timeout (its transform sleeps) is SIGKILLed
    and replaced, and the replacement makes the batch: the same bytes. A batch that is stuck
    every time fails naming the timeout, tried twice, and the other batches go on."""
    ids = np.array([7, 3, 30, 12], dtype=np.uint64)
    plain = Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5)
    pool = WorkerPool(Pipeline(map_sources.Records(40), seed=5,
                                transform=map_sources.Hanging([30], str(tmp_path))), 1,
                      batch_timeout=2)
    started = pool.pids
    try:
        start = time.monotonic()
        assert pool.make(1, 9, ids).content_hash == plain.make(1, 9, ids).content_hash
        assert 2 <= time.monotonic() - start < 30
        pids = pool.pids
        assert len(pids) == 2 and pids[1] != started[1]
    finally:
        pool.close()
    assert not left_behind(started + pids)
    lines = [r.getMessage() for r in caplog.records if r.name == "croupier.pipeline"]
    assert len(lines) == 1 and f"(pid {started[1]}) died (stuck: no answer within 2 s, so " \
        "killed; killed by signal 9, SIGKILL) while making batch 9 of epoch 1" in lines[0] and \
        "which makes the batch again" in lines[0], lines

    good, bad = np.array([1, 2], dtype=np.uint64), np.array([12, 13], dtype=np.uint64)
    pool = WorkerPool(Pipeline(map_sources.Records(40), seed=5,
                                transform=map_sources.Hanging([12])), 1, batch_timeout=1)
    try:
        code, message = pool.make(0, 2, bad)
        assert code == 13 and "batch 2 of epoch 0 was tried twice" in message, message
        assert message.count("stuck: no answer within 1 s, so killed") == 2, message
        assert pool.make(0, 1, good).content_hash == plain.make(0, 1, good).content_hash
        pids = pool.pids
    finally:
        pool.close()
    assert not left_behind(pids)


def test_a_worker_timeout_or_metrics_port_that_is_no_such_thing_is_refused():
    for bad in (0, -1.0):
        with pytest.raises(errors.InvalidArgumentError, match="worker_timeout must be"):
            croupier.produce(map_sources.Records(8), "127.0.0.1:1", "m", batch_size=2,
                             consumers=1, worker_timeout=bad)
    with pytest.raises(errors.InvalidArgumentError, match="metrics_port must be a port"):
        croupier.produce(map_sources.Records(8), "127.0.0.1:1", "m", batch_size=2, consumers=1,
                         metrics_port=70000)
    with pytest.raises(errors.InvalidArgumentError, match="metrics_port_file needs"):
        croupier.produce(map_sources.Records(8), "127.0.0.1:1", "m", batch_size=2, consumers=1,
                         metrics_port_file="port")
    for bad in (0, -1.0):
        # The pool itself, made directly, names its own argument (it was INTERNAL).
        with pytest.raises(errors.InvalidArgumentError, match="batch_timeout must be"):
            WorkerPool(Pipeline(map_sources.Records(8)), 1, batch_timeout=bad)


@pytest.mark.timeout(60)
def test_a_batch_that_kills_every_worker_fails_and_replacing_stops_past_the_limit():
    good = np.array([1, 2], dtype=np.uint64)
    bad = np.array([12, 13], dtype=np.uint64)
    want = Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5) \
        .make(0, 1, good).content_hash
    pool = WorkerPool(Pipeline(map_sources.Records(40), seed=5,
                                transform=map_sources.Killing([12])), 1, max_deaths=2)
    try:
        zygote = pool.pids[0]
        code, message = pool.make(0, 2, bad)  # deaths 1 and 2: replaced both times
        assert code == 13 and "batch 2 of epoch 0 was tried twice" in message, message
        assert message.count("(killed by signal 9, SIGKILL)") == 2, message
        assert len(pool.pids) == 2 and pool.make(0, 1, good).content_hash == want
        pids = pool.pids
        code, again = pool.make(0, 2, bad)  # remembered: fails at once, no worker dies
        assert code == 13 and again == f"{message} (not tried again)", again
        assert pool.pids == pids
        code, message = pool.make(0, 3, bad)  # death 3: past the limit, not replaced
        assert code == 14 and "batch 3 of epoch 0, which this producer does not make again" \
            in message and \
            "3 workers of this producer died within 60 s, more than the 2" in message, message
        assert pool.pids == [zygote]
        code, message = pool.make(0, 1, good)
        assert code == 14 and "has no worker left to make batch 1 of epoch 0" in message
        assert pool.broken is not None and "more than the 2" in pool.broken
    finally:
        pool.close()
    assert not left_behind([zygote])


@pytest.mark.timeout(60)
def test_batches_fail_naming_the_zygote_once_it_is_gone():
    pool = WorkerPool(Pipeline(map_sources.Records(40), seed=5), 2)
    try:
        zygote = pool.pids[0]
        os.kill(zygote, signal.SIGKILL)
        wait_dead(pool.pids)  # its workers die with it
        for _ in range(3):
            code, message = pool.make(0, 1, np.array([1, 2], dtype=np.uint64))
            assert code == 14 and f"the pool's zygote process (pid {zygote}) is gone (killed " \
                "by signal 9, SIGKILL)" in message and "batch 1 of epoch 0" in message, message
        assert pool.pids == [zygote]
        assert "zygote" in pool.broken  # produce() then leaves the job
    finally:
        pool.close()
    assert pool.broken is None  # closed: nothing to leave
    assert not left_behind([zygote]), "the producer reaps its zygote"


def test_what_a_record_holds_is_a_function_of_seed_epoch_and_index():
    pipe = Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5)
    ids = np.array([7, 3, 30, 12], dtype=np.uint64)
    a = pipe.make(1, 9, ids).to_dict()
    b = pipe.make(1, 9, ids).to_dict()
    assert a["noise"].tobytes() == b["noise"].tobytes()
    for k, i in enumerate(ids):
        want = map_sources.expected_record(5, 1, int(i))
        np.testing.assert_array_equal(a["noise"][k], want["noise"])
        np.testing.assert_array_equal(a["pixels"][k], want["pixels"])
        assert a["id"][k] == i and a["name"][k] == b"record-%d" % i
    other_epoch = pipe.make(2, 9, ids).to_dict()
    assert other_epoch["noise"].tobytes() != a["noise"].tobytes()
    # The generator is never global state.
    np.random.seed(0)
    assert pipe.make(1, 9, ids).to_dict()["noise"].tobytes() == a["noise"].tobytes()


def test_a_transform_that_raises_names_the_record_and_the_exception():
    pipe = Pipeline(map_sources.Records(40, fail_at=12), transform=map_sources.augment, seed=5)
    with pytest.raises(Exception) as raised:
        pipe.make(0, 3, np.array([1, 12, 5, 6], dtype=np.uint64))
    assert "record 12: ValueError: record 12 is unreadable" in str(raised.value)


def test_inconsistent_shapes_across_records_name_the_feature():
    pipe = Pipeline(map_sources.Records(40), transform=map_sources.ragged, seed=5)
    with pytest.raises(Exception) as raised:
        pipe.make(0, 0, np.array([2, 3], dtype=np.uint64))
    assert "feature 'noise'" in str(raised.value)


def test_arrays_of_different_lengths_make_a_variable_length_feature_the_spec_names():
    def tokens(rec):
        return dict(rec, tokens=np.arange(int(rec["id"]) % 3 + 1, dtype=np.int32))
    pipe = Pipeline(map_sources.Records(40), transform=tokens, seed=5,
                    features="id:int64,pixels:uint8[4,4],name:bytes,tokens:int32[*]")
    values, splits = pipe.make(0, 0, np.array([3, 4, 5], dtype=np.uint64)).to_dict()["tokens"]
    assert values.dtype == np.int32 and values.tolist() == [0, 0, 1, 0, 1, 2]
    assert splits.tolist() == [0, 1, 3, 6]


def test_a_source_without_getitem_fails_at_once(tmp_path):
    with pytest.raises(errors.InvalidArgumentError, match="__len__ and __getitem__"):
        croupier.produce(iter(range(10)), "127.0.0.1:1", "j", batch_size=2, consumers=1)


@pytest.mark.timeout(60)
def test_a_transform_failing_on_the_first_batch_fails_at_start():
    with in_process_cluster(producers=0) as cluster:
        with pytest.raises(errors.InvalidArgumentError, match="ValueError"):
            croupier.produce(map_sources.Records(8, fail_at=0), cluster.address, "j",
                             batch_size=2, consumers=1, shuffle="none", workers=0)
        assert not cluster.status()["job_summaries"], "no job is created for a source that fails"


@pytest.mark.timeout(120)
def test_a_failing_record_reaches_the_trainer_that_needs_it(tmp_path):
    with Cluster(tmp_path / "c") as cluster:
        # Record 30 is unreadable; batch 0 (records 0-3, shuffle none) is fine.
        start_producer(cluster, "m", "producer0", records=48, fail_at=30, shuffle="none",
                       consumers=2, epochs=1, batch_size=4)
        wait_for_job(cluster, "m")
        # Global batch 7 holds records 28-31.
        message = error_of_rank_1(cluster, "m")
        assert "epoch 0 batch 7" in message and "record 30" in message and \
            "ValueError: record 30 is unreadable" in message, message


class ManyAtOnce(map_sources.Records):
    """Records with get_many, which raises when any of the records does."""

    def get_many(self, ids):
        return [self[int(i)] for i in ids]


@pytest.mark.parametrize("source", [map_sources.Records, ManyAtOnce])
def test_skip_failing_records_leaves_them_out_of_their_batch(source):
    pipe = Pipeline(source(40, fail_every=4), transform=map_sources.augment, seed=5,
                    skip_failing_records=True)
    made = pipe.make(0, 3, np.array([1, 3, 5, 7, 6], dtype=np.uint64)).to_dict()
    assert made["id"].tolist() == [1, 5, 6]
    want = map_sources.expected_record(5, 0, 5)
    np.testing.assert_array_equal(made["noise"][1], want["noise"])
    with pytest.raises(Exception, match="every record of the batch failed; the first: record 3: "
                                        "ValueError: record 3 is unreadable"):
        pipe.make(0, 4, np.array([3, 7], dtype=np.uint64))
    # A failing transform is skipped alike; without the setting it fails the batch.
    def picky(rec):
        if int(rec["id"]) == 2:
            raise KeyError("no label")
        return rec
    skipping = Pipeline(source(40), transform=picky, skip_failing_records=True)
    assert skipping.make(0, 0, np.arange(4, dtype=np.uint64)).to_dict()["id"].tolist() == [0, 1, 3]
    with pytest.raises(Exception, match="record 2: the transform raised KeyError"):
        Pipeline(source(40), transform=picky).make(0, 0, np.arange(4, dtype=np.uint64))


@pytest.mark.timeout(120)
def test_a_job_that_skips_failing_records_deals_the_rest_once_and_counts_them(tmp_path):
    records, world = 48, 2
    failing = {i for i in range(records) if i % 7 == 6}
    with Cluster(tmp_path / "c") as cluster:
        producer = start_producer(cluster, "m", "producer0", workers=2, records=records,
                                  fail_every=7, skip_failing_records=True, consumers=world,
                                  epochs=1, batch_size=4)
        wait_for_job(cluster, "m")
        assert croupier.get_job(cluster.address, "m").skip_failing_records is True
        feeds = [croupier.Consumer(cluster.address, "m", r, world, timeout=30)
                 for r in range(world)]
        try:
            steps = 12 // world
            epochs = [f.batches(0) for f in feeds]
            got = [[b.to_dict()["id"].tolist() for _, b in zip(range(steps - (r == 1)),
                                                                 epochs[r])]
                   for r in range(world)]
            # Every batch made (rank 1's last waits in the buffer): the producer counted each
            # record it left out once.
            deadline = time.monotonic() + 30
            while True:
                skipped = sum(int(p["stats"]["records_skipped"])
                              for p in croupier.status(cluster.address)["producers"])
                if skipped == len(failing) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert skipped == len(failing)
            got[1] += [b.to_dict()["id"].tolist() for b in epochs[1]]
        finally:
            for f in feeds:
                f.close()
        plan = croupier.EpochPlan(records, 4, world, seed=5, epoch=0)
        for rank in range(world):
            assert len(got[rank]) == steps
            for step, ids in enumerate(got[rank]):
                planned = plan.batch(plan.global_batch(rank, step)).tolist()
                assert ids == [i for i in planned if i not in failing]
        dealt = [i for r in got for ids in r for i in ids]
        assert sorted(dealt) == sorted(set(range(records)) - failing)
        cluster.wait([producer], timeout=30)
        log = producer.log_path.read_text()
        assert "record 13: ValueError: record 13 is unreadable; the record is left out" in log, log


@pytest.mark.timeout(120)
def test_a_parquet_source_is_dealt_as_planned(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    files = []
    for k in range(2):
        ids = np.arange(k * 40, (k + 1) * 40, dtype=np.int64)
        table = pa.table({"id": ids, "label": (ids % 10).astype(np.int32),
                          "score": ids.astype(np.float32) / 2,
                          "text": [f"row {i}" for i in ids],
                          "tokens": pa.array([list(range(int(i) % 5)) for i in ids],
                                             type=pa.list_(pa.int32()))})
        path = tmp_path / f"part{k}.parquet"
        pq.write_table(table, path, row_group_size=16)
        files.append(str(path))
    per_rank = run_job(tmp_path / "run", kind="parquet", files=files, records=80, batch_size=4,
                       epochs=1)
    check_against_plan(per_rank, 80, 4, seed=5, epochs=1)


def test_a_parquet_source_takes_the_cached_row_groups_of_a_batch_before_it_reads_others(
        tmp_path, monkeypatch):
    """A batch that touches more row groups than are cached: those cached are taken before any
    read can evict them, so asking for the same batch again reads one row group, not every one
    (a sequential pass over more groups than an LRU cache holds missed every time)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from croupier.parquet import ParquetSource
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": np.arange(100, dtype=np.int64)}), path, row_group_size=10)
    source = ParquetSource(str(path), cached_row_groups=3)
    reads = []
    read = source._read
    monkeypatch.setattr(source, "_read", lambda k, alone=False: reads.append(k) or read(k, alone))
    batch = [35, 5, 25, 15, 6]  # row groups 3, 0, 2, 1, 0
    assert [int(r["id"]) for r in source.get_many(batch)] == batch
    assert sorted(reads) == [0, 1, 2, 3]  # each once: groups 0-2, then 3 (3 are cached)
    reads.clear()
    assert [int(r["id"]) for r in source.get_many(batch)] == batch
    assert reads == [0], reads  # 1, 2 and 3 were cached


@pytest.mark.timeout(150)
def test_a_checkpoint_resumes_a_map_job_exactly_and_with_another_world_size(tmp_path):
    check_resume(tmp_path)


def check_resume(tmp_path, pipeline="map_sources:pipeline", workers=1):
    """A checkpoint of map job "m" (2 ranks, 5 steps read) resumes it exactly in new consumers,
    and with 3 ranks in job "m3" (resume_from): checked against the
    plan's batches made here (planned_batches)."""
    reference = planned_batches(records=96, batch_size=4, epochs=1, pipeline=pipeline)
    with Cluster(tmp_path / "c") as cluster:
        start_producer(cluster, "m", "producer0", pipeline=pipeline, workers=workers, records=96,
                       batch_size=4, consumers=2, epochs=1)
        wait_for_job(cluster, "m", timeout=60)
        feeds = [croupier.Consumer(cluster.address, "m", r, 2, timeout=30) for r in range(2)]
        got = [[], []]
        for rank, feed in enumerate(feeds):
            for _, batch in zip(range(5), feed.batches(0)):
                got[rank].append(batch.content_hash)
        states = [f.state_dict() for f in feeds]
        for f in feeds:
            f.close()
        # Exact: new consumers from the checkpoint carry on where it was.
        for rank in range(2):
            feed = croupier.Consumer(cluster.address, "m", rank, 2, timeout=30)
            feed.load_state_dict(states[rank])
            got[rank] += [b.content_hash for b in feed.batches(0)]
            feed.close()
        assert [[int(h["hash"], 16) for h in r] for r in reference] == got
        # Another world size: job "m3" over the same records, 3 ranks, from the checkpoint.
        start_producer(cluster, "m3", "producer1", pipeline=pipeline, workers=workers, records=96,
                       batch_size=4, consumers=3, epochs=1, resume_from=states[0])
        wait_for_job(cluster, "m3", timeout=60)
        ids = [int(i) for r in reference for h in r[:5] for i in h["ids"]]
        outs = [tmp_path / f"m3-{r}.jsonl" for r in range(3)]
        procs = [cluster.start_consumer("m3", r, 3, outs[r], 1) for r in range(3)]
        cluster.wait(procs, timeout=60)
        later = [read_batches(o) for o in outs]
        assert len({len(r) for r in later}) == 1, "unequal steps"
        for r in later:
            ids += [i for b in r for i in b["ids"]]
        assert len(ids) == len(set(ids)), "a record repeated across the checkpoint"
        # 24 batches an epoch: 10 read by 2 ranks, then whole rounds of 3 from batch 10 (12):
        # only the new job's dropped tail (2 batches) is not dealt.
        assert len(ids) == (10 + 12) * 4 and set(ids) <= set(range(96))


@pytest.mark.timeout(120)
def test_the_map_dataset_example_runs():
    done = subprocess.run([sys.executable, str(TESTS.parent / "examples" / "map_dataset.py"),
                           "--images", "256"], capture_output=True, text=True, timeout=100,
                          env=dict(os.environ, PYTHONPATH=PYTHON_PATH))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "epoch 1: 256 images, 4 steps on each of 4 trainers, each image once" in done.stdout


# --- The record cache (decode=, cache_bytes=) ---------------------------------------------------

CACHE_ROOT = pathlib.Path(default_root())


class CountingRecords(map_sources.Records):
    """Records that count their reads, per record index."""

    def __init__(self, n, **options):
        super().__init__(n, **options)
        self.reads = collections.Counter()

    def __getitem__(self, i):
        self.reads[int(i)] += 1
        return super().__getitem__(i)


class CountingRecordsMany(CountingRecords):
    """CountingRecords with get_many."""

    def get_many(self, ids):
        return [self[int(i)] for i in ids]


class CountingDecode(map_sources.Decoding):
    """map_sources.Decoding that counts its calls, per record index (in this process)."""

    def __init__(self, fail_at=-1):
        super().__init__()
        self.calls = collections.Counter()
        self.fail_at = fail_at

    def __call__(self, rec):
        self.calls[int(rec["id"])] += 1
        if int(rec["id"]) == self.fail_at:
            raise KeyError("no label")
        return super().__call__(rec)


def uncached(records=40):
    """The pipeline of the record cache tests, without a cache."""
    return Pipeline(map_sources.Records(records), decode=map_sources.Decoding(),
                    transform=map_sources.augment, seed=5)


def record_files(path):
    return sorted((p.name for p in pathlib.Path(path).iterdir() if p.name.isdigit()), key=int)


def caches_of(pid):
    """The record caches on /dev/shm that process `pid` made."""
    return list(CACHE_ROOT.glob(f"croupier-cache-*-{pid}-*"))


@pytest.mark.parametrize("source", [CountingRecords, CountingRecordsMany])
def test_a_record_cache_reads_and_decodes_each_record_once_and_changes_no_byte(source):
    data, decode, plain = source(40), CountingDecode(), uncached()
    batches = [np.array(ids, dtype=np.uint64) for ids in ([7, 3, 30, 12], [0, 1, 2, 39], [5, 6])]
    with Pipeline(data, decode=decode, transform=map_sources.augment, seed=5,
                  cache_bytes=1 << 20) as cached:
        path = pathlib.Path(cached.cache_stats()["path"])
        assert path.parent == CACHE_ROOT and path.is_dir()
        for epoch in (0, 1):
            for g, ids in enumerate(batches):
                assert cached.make(epoch, g, ids).content_hash == \
                    plain.make(epoch, g, ids).content_hash
            # Epoch 0 read and decoded each record once; epoch 1 read and decoded none.
            everyone = {int(i): 1 for ids in batches for i in ids}
            assert dict(data.reads) == everyone and dict(decode.calls) == everyone
        stats = cached.cache_stats()
        assert (stats["hits"], stats["misses"], stats["records"]) == (10, 10, 10)
        assert stats["bytes"] == 10 * mmap.PAGESIZE and not stats["full"]
        assert record_files(path) == sorted(map(str, everyone), key=int)
    assert not path.exists(), "closing the pipeline removes its cache"
    # Without a cache, the pipeline reads and decodes every time.
    again = Pipeline(source(40), decode=CountingDecode(), transform=map_sources.augment, seed=5)
    again.make(0, 0, batches[0])
    again.make(1, 0, batches[0])
    assert set(again.source.reads.values()) == set(again.decode.calls.values()) == {2}


def test_a_record_cache_of_the_sources_records_without_decode():
    data = CountingRecords(40)
    plain = Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5)
    ids = np.array([4, 9, 2], dtype=np.uint64)
    with Pipeline(data, transform=map_sources.augment, seed=5, cache_bytes=1 << 20) as cached:
        for epoch in (0, 1):
            assert cached.make(epoch, 0, ids).content_hash == plain.make(epoch, 0, ids).content_hash
        assert dict(data.reads) == {4: 1, 9: 1, 2: 1}


def test_a_full_record_cache_adds_no_more_records():
    page = mmap.PAGESIZE  # each record's file takes one page
    decode, plain = CountingDecode(), uncached()
    ids = np.arange(6, dtype=np.uint64)
    with Pipeline(map_sources.Records(40), decode=decode, transform=map_sources.augment,
                  seed=5, cache_bytes=3 * page + page // 2) as cached:
        assert cached.make(0, 0, ids).content_hash == plain.make(0, 0, ids).content_hash
        stats = cached.cache_stats()
        assert stats["full"] and (stats["records"], stats["bytes"]) == (3, 3 * page)
        assert stats["not_added"] == 3 and record_files(stats["path"]) == ["0", "1", "2"]
        decode.calls.clear()
        assert cached.make(1, 0, ids).content_hash == plain.make(1, 0, ids).content_hash
        assert dict(decode.calls) == {3: 1, 4: 1, 5: 1}, "the records kept are not decoded again"
        stats = cached.cache_stats()
        assert (stats["records"], stats["hits"], stats["misses"], stats["not_added"]) == \
            (3, 3, 9, 6)
        assert "; full (14336 bytes): 6 records made while it was full were not added" in \
            summary(stats)


@pytest.mark.parametrize("damage", ["a flipped bit", "truncated", "empty", "another record's"])
def test_a_corrupt_record_cache_file_is_a_miss_and_made_again(damage, caplog):
    decode, plain = CountingDecode(), uncached()
    ids = np.arange(4, dtype=np.uint64)
    with Pipeline(map_sources.Records(40), decode=decode, transform=map_sources.augment,
                  seed=5, cache_bytes=1 << 20) as cached:
        cached.make(0, 0, ids)
        path = pathlib.Path(cached.cache_stats()["path"])
        data = bytearray((path / "2").read_bytes())
        if damage == "a flipped bit":
            data[-3] ^= 0x10  # in the bytes of an array: pickle alone would not see it
        elif damage == "truncated":
            data = data[:len(data) // 2]
        elif damage == "empty":
            data = b""
        else:
            data = (path / "1").read_bytes()
        (path / "2").write_bytes(data)
        decode.calls.clear()
        assert cached.make(1, 0, ids).content_hash == plain.make(1, 0, ids).content_hash
        assert dict(decode.calls) == {2: 1}
        stats = cached.cache_stats()
        assert stats["corrupt"] == 1 and stats["records"] == 4 and record_files(path) == \
            ["0", "1", "2", "3"]
        decode.calls.clear()
        assert cached.make(2, 0, ids).content_hash == plain.make(2, 0, ids).content_hash
        assert not decode.calls, "the file made again is whole"
    lines = [r.getMessage() for r in caplog.records if "the file of record 2 is corrupt" in
             r.getMessage()]
    assert len(lines) == 1 and "the record is made again" in lines[0], lines


def test_records_pickle_refuses_or_dev_shm_cannot_hold_are_made_each_time(monkeypatch, caplog):
    """A record that pickle cannot take is not kept (counted, logged once); a write that finds
    /dev/shm full makes the cache full (logged)."""
    import croupier.map.record_cache as record_cache

    def with_a_lock(rec):
        return dict(rec, lock=threading.Lock())

    def without_it(rec):
        return {k: v for k, v in rec.items() if k != "lock"}
    ids = np.arange(3, dtype=np.uint64)
    want = Pipeline(map_sources.Records(40), seed=5).make(0, 0, ids).content_hash
    with Pipeline(map_sources.Records(40), decode=with_a_lock, transform=without_it,
                  cache_bytes=1 << 20, seed=5) as cached:
        for epoch in (0, 1):
            assert cached.make(epoch, 0, ids).content_hash == want
        stats = cached.cache_stats()
        assert (stats["uncacheable"], stats["records"], stats["misses"]) == (6, 0, 6)
        assert "; 6 records could not be serialized" in summary(stats)
    assert sum("cannot be kept (TypeError" in r.getMessage() for r in caplog.records) == 1

    def no_space(path, parts):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(record_cache, "_write_file", no_space)
    with Pipeline(map_sources.Records(40), cache_bytes=1 << 20, seed=5) as cached:
        assert cached.make(0, 0, ids).content_hash == want
        stats = cached.cache_stats()
        assert stats["full"] and (stats["records"], stats["bytes"], stats["not_added"]) == \
            (0, 0, 3)
    assert any("is out of space (No space left on device) at 0 bytes in 0 records" in
               r.getMessage() for r in caplog.records)


def test_a_decode_that_raises_names_the_record_and_is_skipped_like_a_read():
    ids = np.arange(4, dtype=np.uint64)
    with pytest.raises(Exception, match="record 2: the decode raised KeyError"):
        Pipeline(map_sources.Records(40), decode=CountingDecode(fail_at=2)).make(0, 0, ids)
    decode = CountingDecode(fail_at=2)
    with Pipeline(map_sources.Records(40), decode=decode, skip_failing_records=True,
                  cache_bytes=1 << 20) as cached:
        for epoch in (0, 1):
            assert cached.make(epoch, 0, ids).to_dict()["id"].tolist() == [0, 1, 3]
        assert cached.cache_stats()["records"] == 3, "a record that failed is not kept"
        # Epoch 0: records 0-2 as a batch, which fails at 2, then one by one (and each kept);
        # epoch 1: record 2 alone, twice: as the batch's only miss, then one by one.
        assert dict(decode.calls) == {0: 2, 1: 2, 2: 4, 3: 1}


def test_decode_and_cache_bytes_are_checked():
    with pytest.raises(errors.InvalidArgumentError, match="decode must be callable"):
        Pipeline(map_sources.Records(4), decode="yes")
    with pytest.raises(errors.InvalidArgumentError, match="cache_bytes must be 0"):
        Pipeline(map_sources.Records(4), cache_bytes=-1)


def test_a_cache_left_by_a_killed_producer_is_removed_by_the_next():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    prefix = f"croupier-cache-{_pid_namespace()}-"
    stale = pathlib.Path(tempfile.mkdtemp(prefix=f"{prefix}{gone.pid}-", dir=CACHE_ROOT))
    live = pathlib.Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=CACHE_ROOT))
    (stale / "7").write_bytes(b"a record")
    try:
        with RecordCache(1 << 20) as cache:
            assert pathlib.Path(cache.path).is_dir()
            assert not stale.exists() and live.exists()
        assert not pathlib.Path(cache.path).exists()
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)


def collecting(rec, rng):
    """A transform that runs the garbage collector, as any allocating pipeline does now and then."""
    gc.collect()
    return map_sources.augment(rec, rng)


@contextlib.contextmanager
def a_thread_holding(lock):
    """A thread of this process holds `lock` (as a library's thread may at a fork) until the
    block ends."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with lock:
            held.set()
            release.wait(30)

    threading.Thread(target=holder, daemon=True).start()
    held.wait(10)
    try:
        yield
    finally:
        release.set()


def made_within(pool, seconds):
    """Batch 0 of epoch 0 (records 0-3) from `pool`, or None if it took longer than `seconds`."""
    got = []
    maker = threading.Thread(target=lambda: got.append(
        pool.make(0, 0, np.arange(4, dtype=np.uint64))), daemon=True)
    maker.start()
    maker.join(seconds)
    return got[0] if got else None


@pytest.mark.timeout(60)
def test_a_parents_gc_callback_waiting_on_a_lock_held_at_the_fork_does_not_hang_a_worker():
    """A library of the producer's process hooks the garbage collector (JAX calls into XLA at
    every collection), and a thread of that process holds the lock the hook takes when the zygote
    is forked. The hook must not run in the zygote nor its workers, where nobody releases the
    lock: a worker's collection would wait for ever, and with it the batch."""
    lock = threading.Lock()

    def hook(phase, info):
        if os.getpid() != parent:
            with lock:
                pass

    parent = os.getpid()
    with a_thread_holding(lock):
        gc.callbacks.append(hook)
        try:
            pool = WorkerPool(Pipeline(map_sources.Records(8), transform=collecting, seed=5), 1)
            try:
                assert made_within(pool, 20) is not None, \
                    "the worker hung in the parent's gc callback"
                pids = pool.pids
            finally:
                pool.close()
        finally:
            gc.callbacks.remove(hook)
    assert not left_behind(pids)


class WaitsForTheParentsLock:
    """Garbage (a cycle) whose finalizer, run in a fork's child, takes a lock that a thread of the
    parent held at the fork: as a gRPC channel's destructor waits for gRPC's timer thread."""

    def __init__(self, lock, parent):
        self.lock, self.parent, self.cycle = lock, parent, self

    def __del__(self):
        if os.getpid() != self.parent:
            with self.lock:
                pass


@pytest.mark.timeout(60)
def test_the_parents_garbage_is_not_collected_in_a_worker():
    """The producer's process has garbage whose finalizer would wait for a lock that one of its
    threads holds at the fork. A worker's collection (the transform calls gc.collect()) must not
    run it: the worker would wait for ever, and with it the batch."""
    lock = threading.Lock()
    with a_thread_holding(lock):
        gc.disable()  # so that the garbage is still there at the fork
        try:
            garbage = WaitsForTheParentsLock(lock, os.getpid())
            still_there = weakref.ref(garbage)
            del garbage
            pool = WorkerPool(Pipeline(map_sources.Records(8), transform=collecting, seed=5), 1)
            assert still_there() is not None
        finally:
            gc.enable()
        try:
            assert made_within(pool, 20) is not None, \
                "the worker hung in a finalizer of the parent's garbage"
            pids = pool.pids
        finally:
            pool.close()
    gc.collect()
    assert still_there() is None, "collected in the parent"
    assert not left_behind(pids)


def _in_os_fork_past_its_hooks(thread_id):
    """Whether thread `thread_id` is inside os.fork() in croupier.runtime.processes.fork, past
    the at-fork hooks (Python frames): waiting for the import lock, which os.fork takes next."""
    frame = sys._current_frames().get(thread_id)
    if frame is None or frame.f_code is not processes.fork.__code__:
        return False
    line = next(n for n, text in enumerate(inspect.getsourcelines(processes.fork)[0],
                                           processes.fork.__code__.co_firstlineno)
                if "os.fork()" in text)
    return frame.f_lineno == line


@pytest.mark.timeout(90)
def test_a_record_pool_lock_taken_between_the_fork_hooks_and_the_fork_does_not_hang_the_zygote():
    """Before a fork, every record-thread pool of the process is shut down, each under its lock;
    a thread of the producer's process may take a pool's lock again after that and hold it at the
    fork. The zygote, which forks the workers (running the same hooks), must not wait for it.
    Made to happen: a thread holds the import lock, which os.fork takes after its hooks, until
    another thread has taken the pool's lock."""
    pool_threads = RecordThreads(2)
    pool_threads.map(lambda k: k, range(4))
    held, release, forking = threading.Event(), threading.Event(), []

    def hold_the_pools_lock():
        with pool_threads._lock:
            held.set()
            release.wait(60)

    def hold_the_import_lock_until_the_pools_lock_is_taken():
        _imp.acquire_lock()
        try:
            deadline = time.monotonic() + 30
            while not (forking and _in_os_fork_past_its_hooks(forking[0])):
                assert time.monotonic() < deadline, "the pool was not forked"
                time.sleep(0.01)
            threading.Thread(target=hold_the_pools_lock, daemon=True).start()
            held.wait(10)
        finally:
            _imp.release_lock()

    forking.append(threading.get_ident())  # this thread: the zygote dies with the thread that
    racer = threading.Thread(target=hold_the_import_lock_until_the_pools_lock_is_taken,
                             daemon=True)  # forked it (PR_SET_PDEATHSIG)
    racer.start()
    try:
        pool = WorkerPool(Pipeline(map_sources.Records(8), seed=5), 1)
        try:
            assert held.is_set(), "the pool's lock was not taken between the hooks and the fork"
            assert pool.make(0, 0, np.arange(4, dtype=np.uint64)).content_hash == \
                Pipeline(map_sources.Records(8), seed=5).make(0, 0, np.arange(4)).content_hash
            pids = pool.pids
        finally:
            pool.close()
    finally:
        release.set()
        racer.join(10)
    assert not left_behind(pids)


def stuck_forking_a_worker(*args):
    time.sleep(120)


@pytest.mark.timeout(60)
def test_a_zygote_that_does_not_answer_is_killed_and_the_error_says_where_it_was(monkeypatch):
    """A zygote that does not answer a request in time (here: its fork of a worker never
    returns) is SIGKILLed, and the pool's error names the request, the time waited and the
    Python stack the zygote was stuck in: nothing waits for it for ever."""
    monkeypatch.setattr(zygote, "ANSWER_TIMEOUT", 2.0)
    monkeypatch.setattr(zygote, "_spawn_worker", stuck_forking_a_worker)  # in the zygote's copy
    start = time.monotonic()
    with pytest.raises(errors.InternalError) as failed:
        WorkerPool(Pipeline(map_sources.Records(8), seed=5), 1)
    message = str(failed.value)
    assert time.monotonic() - start < 15, message
    assert "did not answer a spawn request within 2 s and was killed" in message, message
    assert "stuck_forking_a_worker" in message and "_zygote_main" in message, message
    pid = int(re.search(r"zygote process \(pid (\d+)\)", message).group(1))
    assert not left_behind([pid])


@pytest.mark.timeout(60)
def test_workers_needing_the_same_records_at_once_decode_each_once(tmp_path):
    """Two workers make batches of the same 8 records at the same time (reads are slow): one
    claims and decodes them, the other waits for its claims and finds them in the cache."""
    ids = np.arange(8, dtype=np.uint64)
    want = [uncached().make(0, g, ids).content_hash for g in range(2)]
    pipe = Pipeline(map_sources.Records(40, delay=0.05), transform=map_sources.augment, seed=5,
                    decode=map_sources.Decoding(str(tmp_path)), cache_bytes=1 << 20)
    with pipe:
        pool = WorkerPool(pipe, 2)
        try:
            got = [None, None]
            makers = [threading.Thread(target=lambda g=g: got.__setitem__(
                g, pool.make(0, g, ids).content_hash)) for g in range(2)]
            for t in makers:
                t.start()
            for t in makers:
                t.join(30)
            assert got == want
            pids = pool.pids
        finally:
            pool.close()
        assert map_sources.decoded_records(tmp_path) == {i: 1 for i in range(8)}
        stats = pipe.cache_stats()
        assert (stats["hits"], stats["misses"]) == (8, 8)
        path = pathlib.Path(stats["path"])
        assert path.is_dir(), "the workers leave the cache to the process that made it"
    assert not path.exists() and not left_behind(pids)


@pytest.mark.timeout(120)
def test_a_record_cache_with_workers_0_decodes_each_record_once(tmp_path):
    """produce() with workers=0 (the producer's own threads) and a record cache, read by 2
    ranks for 2 epochs: each batch is the pipeline's without a cache, each record decoded once,
    and produce() returns the counts and removes the cache."""
    records, world, epochs = 48, 2, 2
    decode = CountingDecode()
    plain = uncached(records)
    with in_process_cluster(producers=0) as cluster:
        done = {}

        def producer():
            done.update(croupier.produce(
                map_sources.Records(records), cluster.address, "m", batch_size=4,
                consumers=world, epochs=epochs, seed=5, transform=map_sources.augment,
                decode=decode, cache_bytes=1 << 20, workers=0, threads=2))
        running = threading.Thread(target=producer, daemon=True)
        running.start()
        got = [[] for _ in range(world)]

        def read(rank):
            feed = croupier.Consumer(cluster.address, "m", rank, world, timeout=30)
            for epoch in range(epochs):
                got[rank] += [(epoch, step, b.content_hash)
                              for step, b in enumerate(feed.batches(epoch))]
            feed.close()
        readers = [threading.Thread(target=read, args=(r,), daemon=True) for r in range(world)]
        for t in readers:
            t.start()
        for t in readers:
            t.join(60)
        running.join(60)
        assert not running.is_alive(), "produce() did not return"
    for rank in range(world):
        assert len(got[rank]) == epochs * records // 4 // world
        for epoch, step, content in got[rank]:
            plan = croupier.EpochPlan(records, 4, world, seed=5, epoch=epoch)
            g = plan.global_batch(rank, step)
            assert content == plain.make(epoch, g, plan.batch(g)).content_hash
    assert dict(decode.calls) == {i: 1 for i in range(records)}
    stats = done["record_cache"]
    assert stats["misses"] == records and stats["hits"] >= records + 4  # batch 0 made twice
    assert stats["records"] == records and not pathlib.Path(stats["path"]).exists()


@pytest.mark.timeout(200)
def test_a_record_cache_shared_by_two_workers_changes_no_byte_over_two_epochs(tmp_path):
    """A map job of 2 epochs whose producer has 2 workers, decode and a record cache: the same
    bytes as the job without the cache, each record decoded once in all, the counts printed,
    and the cache on /dev/shm gone once the producer has returned."""
    options = dict(workers=2, records=96, batch_size=4)
    reference = planned_hashes(records=96, batch_size=4, decode={"marker_dir": None})
    markers = tmp_path / "markers"
    markers.mkdir()
    with Cluster(tmp_path / "cached", producer_timeout_ms=1500) as cluster:
        producer = start_producer(cluster, "m", "producer0", consumers=2, epochs=2,
                                  decode={"marker_dir": str(markers)}, cache_bytes=16 << 20,
                                  **options)
        wait_for_job(cluster, "m")
        assert len(caches_of(producer.pid)) == 1
        outs = [tmp_path / f"rank{r}.jsonl" for r in range(2)]
        consumers = [cluster.start_consumer("m", r, 2, outs[r], 2) for r in range(2)]
        cluster.wait(consumers, timeout=120)
        cluster.wait([producer], timeout=60)
        cached = [read_batches(o) for o in outs]
    log = producer.log_path.read_text()
    assert producer.returncode == 0, log[-3000:]
    check_against_plan(cached, 96, 4, seed=5, epochs=2)
    assert [batch_hashes(r) for r in cached] == reference
    assert map_sources.decoded_records(markers) == {i: 1 for i in range(96)}
    counts = re.search(r"job 'm': record cache: (\d+) hits, (\d+) misses, (\d+) bytes in (\d+) "
                       r"records$", log, re.M)
    assert counts, log[-3000:]
    hits, misses, nbytes, held = map(int, counts.groups())
    assert misses == 96 and hits >= 96 + 4 and held == 96 and nbytes == 96 * mmap.PAGESIZE
    assert not caches_of(producer.pid), "the producer removed its cache"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare(1) to mount a full /dev/shm in a mount "
                           "namespace of its own")
def test_a_full_dev_shm_leaves_the_record_cache_out_with_a_warning(tmp_path):
    """/dev/shm with no room left (a tmpfs of 64 KiB, filled, mounted over /dev/shm in a mount
    namespace of the test's own): a map producer's pipeline with a record cache makes the same
    batch as without one, warning that it runs without the cache and naming /dev/shm. Before,
    the cache's state file was sized with ftruncate (a hole) and mapped: the first touch of the
    page killed the process with SIGBUS, before `croupier produce` had created its job."""
    script = tmp_path / "full_shm.py"
    script.write_text(
        "import json, sys\n"
        "import numpy as np\n"
        f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
        "import map_sources\n"
        "from croupier.map.pipeline import Pipeline\n"
        "ids = np.arange(6, dtype=np.uint64)\n"
        "with Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5,\n"
        "              cache_bytes=1 << 20) as p:\n"
        "    print(json.dumps({'hash': p.make(0, 0, ids).content_hash,\n"
        "                      'stats': p.cache_stats()}))\n")
    fill = "head -c 1048576 /dev/zero > /dev/shm/fill 2>/dev/null; "
    got = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs -o size=64k tmpfs /dev/shm && " + fill +
         f"exec {sys.executable} {script}"],
        capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, f"exit {got.returncode}: {got.stderr[-2000:]}"
    out = json.loads(got.stdout)
    want = Pipeline(map_sources.Records(40), transform=map_sources.augment, seed=5).make(
        0, 0, np.arange(6, dtype=np.uint64)).content_hash
    assert out == {"hash": want, "stats": None}
    assert "no room on /dev/shm for the cache's state" in got.stderr, got.stderr
    assert "runs without a record cache" in got.stderr, got.stderr
