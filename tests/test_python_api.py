"""The Python package: Consumer, zero-copy views, checkpoints, rank detection, several ranks in
one process, resumes, over the in-process cluster (croupier.testing); the dispatcher's metrics and
the clean-up of child processes over a real local_cluster. Each test bounds its time (pytest-timeout) and the
cluster stops everything it started."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import croupier
from croupier import errors
from croupier.launcher import detect_rank_world
from croupier.testing import in_process_cluster
from service_cluster import synth_glob
from tf_records import DETECTION, MIXED, REGRESSION, TF_WRITTEN_COUNTS

FEATURES = "id:int64,label:int64,image:bytes"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """1,200 records over 3 files; each record's `id` is its global record id."""
    return synth_glob(tmp_path_factory.mktemp("data"), 1200, image_bytes=128)


@pytest.fixture
def cluster():
    # One cluster per test: a job whose consumers stop reading keeps the producers' task slots
    # (see docs/python.md), so tests do not share producers. In this process: what these tests
    # check is the service's logic and the package's API, which no process boundary changes
    # (croupier.testing).
    with in_process_cluster(producers=2, threads=1) as c:
        yield c


def plan_ids(rank, world, batch, seed, epoch, num_records=1200, shuffle="global"):
    plan = croupier.EpochPlan(num_records, batch, world, seed=seed, epoch=epoch, shuffle=shuffle)
    return [plan.batch(plan.global_batch(rank, s)).tolist()
            for s in range(plan.steps_per_consumer)]


@pytest.mark.timeout(60)
def test_each_rank_gets_the_plans_batches_as_numpy_views(cluster, dataset):
    cluster.create_job("views", dataset, FEATURES, 20, consumers=2, seed=5, epochs=1)
    feeds = [cluster.consumer("views", r, 2) for r in range(2)]
    try:
        assert len(feeds[0]) == len(feeds[1]) == 30
        got = [[], []]
        raw = [[], []]
        for b0, b1 in zip(feeds[0].batches(0), feeds[1].batches(0)):
            for r, b in enumerate((b0, b1)):
                d = b.to_dict()
                # No copy: the array's memory lies inside the batch buffer received from the
                # producer, and the array keeps that buffer alive.
                start = b.buffer_address
                assert start <= d["id"].ctypes.data < start + b.nbytes
                assert d["id"].base is not None and not d["id"].flags.owndata
                got[r].append(d["id"].tolist())
                raw[r].append(d)
        assert got[0] == plan_ids(0, 2, 20, 5, 0)
        assert got[1] == plan_ids(1, 2, 20, 5, 0)
        # Buffer lifetime: the first batch's arrays are still valid after the epoch has ended.
        assert raw[0][0]["id"].tolist() == plan_ids(0, 2, 20, 5, 0)[0]
        assert raw[0][0]["label"].tolist() == [i % 10 for i in got[0][0]]
    finally:
        for f in feeds:
            f.close()


@pytest.mark.timeout(60)
def test_the_in_process_cluster_deals_on_past_a_stopped_producer_and_refuses_calls_once_closed(
        dataset):
    with in_process_cluster(producers=2, threads=1) as cluster:
        assert cluster.address.startswith("127.0.0.1:") and cluster.num_producers == 2
        assert cluster.producer_address(0) != cluster.producer_address(1)
        cluster.create_job("stop", dataset, FEATURES, 20, consumers=2, seed=5, epochs=1)
        feeds = [cluster.consumer("stop", r, 2, timeout=30) for r in range(2)]
        got = [[], []]
        for step, batches in enumerate(zip(*(f.epoch(0) for f in feeds))):
            for r, b in enumerate(batches):
                got[r].append(b["id"].tolist())
            if step == 3:
                cluster.stop_producer(0)  # as killed: its tasks go to producer 1 after 1 s
        for f in feeds:
            f.close()
        assert got == [plan_ids(0, 2, 20, 5, 0), plan_ids(1, 2, 20, 5, 0)]
        with pytest.raises(errors.OutOfRangeError, match="producer 2 of an in-process cluster"):
            cluster.stop_producer(2)
    cluster.close()  # again: nothing
    with pytest.raises(errors.FailedPreconditionError, match="closed"):
        cluster.add_producer()
    with pytest.raises(errors.InvalidArgumentError, match="producers=-1"):
        in_process_cluster(producers=-1)


@pytest.mark.timeout(60)
def test_state_dict_resumes_at_the_saved_step(cluster, dataset):
    cluster.create_job("resume", dataset, FEATURES, 16, consumers=1, seed=9, epochs=3)
    with cluster.consumer("resume", 0, 1) as feed:
        seen = []
        for e in range(3):
            for batch in feed.epoch(e):
                seen.append(batch["id"].tolist())
                if len(seen) == 10:
                    saved = json.loads(json.dumps(feed.state_dict()))  # survives serialization
    assert saved["epoch"] == 0 and saved["step"] == 10
    assert seen == [b for e in range(3) for b in plan_ids(0, 1, 16, 9, e)]
    # A new consumer of the same rank (the rank is taken again once the old one is gone or
    # silent; here a second job name avoids waiting for its heartbeat timeout).
    cluster.create_job("resume2", dataset, FEATURES, 16, consumers=1, seed=9, epochs=3)
    with cluster.consumer("resume2", 0, 1) as feed:
        saved["job"] = "resume2"
        feed.load_state_dict(saved)
        rest = [b["id"].tolist() for e in range(3) for b in feed.epoch(e)]
        after = feed.state_dict()
    assert rest == seen[10:]
    assert (after["epoch"], after["step"]) == (3, 0)


@pytest.mark.timeout(60)
def test_a_finished_epoch_can_be_read_again_after_a_rewind(cluster, dataset):
    # The whole epoch of a one-epoch job, then load_state_dict back to its start. The producer may
    # not have reported the last tasks finished yet when the dispatcher learns of the rewind; they
    # must be made again all the same, and the same batches come in the same order.
    cluster.create_job("rewind", dataset, FEATURES, 16, consumers=1, seed=4, epochs=1)
    with cluster.consumer("rewind", 0, 1, timeout=30) as feed:
        first = [b["id"].tolist() for b in feed.epoch(0)]
        feed.load_state_dict({**feed.state_dict(), "epoch": 0, "step": 0})
        again = [b["id"].tolist() for b in feed.epoch(0)]
    assert first == plan_ids(0, 1, 16, 4, 0)
    assert again == first


@pytest.mark.timeout(60)
def test_a_feed_is_iterable_with_set_epoch_as_a_distributed_sampler(cluster, dataset):
    # for batch in feed, after feed.set_epoch(e): the epoch's batches, as feed.epoch(e) gives
    # them; without set_epoch, the epoch after the last one read.
    cluster.create_job("iterable", dataset, FEATURES, 40, consumers=1, seed=3, epochs=3)
    with cluster.consumer("iterable", 0, 1) as feed:
        feed.set_epoch(0)
        first = [b["id"].tolist() for b in feed]
        second = [b["id"].tolist() for b in feed]
        feed.set_epoch(2)
        third = [b["id"].tolist() for b in feed]
        with pytest.raises(errors.InvalidArgumentError, match="epochs count from 0"):
            feed.set_epoch(-1)
    assert first == plan_ids(0, 1, 40, 3, 0)
    assert second == plan_ids(0, 1, 40, 3, 1)
    assert third == plan_ids(0, 1, 40, 3, 2)


@pytest.mark.timeout(60)
def test_counts_are_numbers_and_consumers_is_required(cluster, dataset):
    # The dicts the API returns hold 64-bit counts as ints, not protobuf JSON's strings; a job's
    # world size is never a silent default.
    with pytest.raises(TypeError, match="consumers"):
        cluster.create_job("nworld", dataset, FEATURES, 40)
    job = cluster.create_job("numbers", dataset, FEATURES, 40, consumers=1, seed=3, epochs=1)
    assert job["num_records"] == 1200 and job["steps_per_epoch"] == 30
    assert job["spec"]["seed"] == 3 and job["spec"]["num_epochs"] == 1
    with cluster.consumer("numbers", 0, 1) as feed:
        assert sum(1 for _ in feed.epoch(0)) == 30
    summary = next(j for j in cluster.status()["job_summaries"] if j["name"] == "numbers")
    assert summary["num_records"] == 1200 and summary["steps_per_epoch"] == 30, summary
    assert isinstance(summary["batches_finished"], int), summary


@pytest.mark.timeout(60)
def test_state_of_another_job_or_world_is_refused(cluster, dataset):
    cluster.create_job("refuse", dataset, FEATURES, 16, consumers=1, seed=1, epochs=1)
    with cluster.consumer("refuse", 0, 1) as feed:
        with pytest.raises(errors.InvalidArgumentError, match="job 'other'"):
            feed.load_state_dict({"format": 1, "job": "other", "world": 1, "epoch": 0, "step": 1})
        with pytest.raises(errors.InvalidArgumentError, match="world 4"):
            feed.load_state_dict({"format": 1, "job": "refuse", "world": 4, "epoch": 0,
                                  "step": 1})
        with pytest.raises(errors.InvalidArgumentError, match="not a croupier consumer state"):
            feed.load_state_dict({"epoch": 0})


@pytest.mark.timeout(60)
def test_one_process_can_hold_several_ranks(cluster, dataset):
    cluster.create_job("multi", dataset, FEATURES, 10, consumers=4, seed=2, epochs=1)
    with cluster.consumer("multi", ranks=[1, 3], world=4) as a, \
            cluster.consumer("multi", ranks=[0, 2], world=4) as b:
        steps = list(zip(a.epoch(0), b.epoch(0)))
    assert len(steps) == 30
    for s, ((r1, r3), (r0, r2)) in enumerate(steps):
        for rank, batch in ((0, r0), (1, r1), (2, r2), (3, r3)):
            assert batch["id"].tolist() == plan_ids(rank, 4, 10, 2, 0)[s]


@pytest.mark.timeout(60)
def test_errors_are_exceptions_of_their_code(cluster, dataset):
    with pytest.raises(errors.NotFoundError, match="nope"):
        cluster.consumer("nope", 0, 1, timeout=1)
    with pytest.raises(errors.InvalidArgumentError, match="no file matches"):
        cluster.create_job("bad", "/nonexistent/*.tfrecord", FEATURES, 8, consumers=1)
    with pytest.raises(errors.InvalidArgumentError, match="batch_size"):
        cluster.create_job("bad", dataset, FEATURES, 0, consumers=1)
    cluster.create_job("worlds", dataset, FEATURES, 8, consumers=2)
    with pytest.raises(errors.InvalidArgumentError):
        cluster.consumer("worlds", 0, 3)
    start = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError, match="127.0.0.1:1"):
        croupier.Consumer("127.0.0.1:1", "x", 0, 1, timeout=1.5)
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("env,expected", [
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, (2, 4)),
    ({"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1"}, (3, 4)),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8"}, (5, 8)),
    ({"RANK": "1", "WORLD_SIZE": "2"}, (1, 2)),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1", "c:1"]},
                               "task": {"type": "worker", "index": 2}})}, (2, 3)),
    ({"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
                               "task": {"type": "worker", "index": 0}})}, (1, 3)),
    # Two launchers that agree are fine (torchrun under Slurm; horovodrun's MPI mode sets
    # OpenMPI's variables, its Gloo mode Horovod's).
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "HOROVOD_RANK": "1",
      "HOROVOD_SIZE": "2"}, (1, 2)),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "RANK": "1", "WORLD_SIZE": "2"}, (1, 2)),
])
def test_rank_and_world_come_from_each_launcher(env, expected):
    assert detect_rank_world(env=env) == expected


def test_explicit_rank_wins_and_conflicts_or_absence_are_clear():
    env = {"RANK": "1", "WORLD_SIZE": "2"}
    assert detect_rank_world(0, 2, env=env) == (0, 2)
    with pytest.raises(errors.InvalidArgumentError, match="disagree.*SLURM_PROCID"):
        detect_rank_world(env={"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0",
                               "SLURM_NTASKS": "2"})
    with pytest.raises(errors.InvalidArgumentError,
                       match="disagree.*HOROVOD_RANK/HOROVOD_SIZE.*rank 2 of 4.*RANK/WORLD_SIZE"):
        detect_rank_world(env={"HOROVOD_RANK": "2", "HOROVOD_SIZE": "4", "RANK": "0",
                               "WORLD_SIZE": "4"})
    with pytest.raises(errors.InvalidArgumentError, match="HOROVOD_SIZE='two'"):
        detect_rank_world(env={"HOROVOD_RANK": "0", "HOROVOD_SIZE": "two"})
    with pytest.raises(errors.InvalidArgumentError, match="no rank and world size"):
        detect_rank_world(env={})
    with pytest.raises(errors.InvalidArgumentError, match="RANK='x'"):
        detect_rank_world(env={"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(errors.InvalidArgumentError, match=r"rank 4 is not in \[0, world=4\)"):
        detect_rank_world(4, 4, env={})
    with pytest.raises(errors.InvalidArgumentError, match="'ps'"):
        detect_rank_world(env={"TF_CONFIG": json.dumps(
            {"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}})})


_CHILD = textwrap.dedent("""
    import os, signal, sys, time, croupier
    # Ctrl-C as in a terminal: a process started in the background by a shell without job
    # control inherits SIGINT ignored (a CI runner launched that way), and Python keeps it so.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with croupier.local_cluster(producers=2, work_dir=sys.argv[1]) as c:
        pids = [p.pid for p in c.processes]
        open(sys.argv[2], "w").write(" ".join(map(str, pids)))
        if sys.argv[3] == "raise":
            sys.stdin.readline()  # the test has seen the processes alive
            raise RuntimeError("a failure inside the with block")
        time.sleep(60)
""")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose; its parent is gone or will reap it.
    state = pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return state != "Z"


def _blocked_signals(native_id):
    """The signal numbers thread `native_id` of this process blocks (/proc, SigBlk)."""
    with open(f"/proc/self/task/{native_id}/status") as f:
        mask = int(next(line for line in f if line.startswith("SigBlk:")).split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


@pytest.mark.timeout(60)
def test_croupiers_threads_leave_signals_to_the_main_thread():
    """Every thread croupier starts in a process blocks the signals that come from outside, so
    that the kernel delivers a Ctrl-C to the main thread, whose blocking call (a sleep) it then
    interrupts: Python runs handlers in the main thread only, and a signal the kernel gives
    another thread does not interrupt the main thread's sleep."""
    from croupier.map.record_threads import RecordThreads
    threads = RecordThreads(2)
    threads.map(lambda k: k, range(4))
    ours = [t for t in threading.enumerate() if t.name.startswith(("croupier-logs",
                                                                    "croupier-record"))]
    assert {t.name.split("_")[0] for t in ours} == {"croupier-logs", "croupier-record"}
    for thread in ours:
        blocked = _blocked_signals(thread.native_id)
        assert {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} <= blocked, thread.name
    assert signal.SIGINT not in _blocked_signals(threading.main_thread().native_id)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["raise", "sigint", "sigkill"])
def test_local_cluster_leaves_no_process_behind(tmp_path, how):
    pid_file = tmp_path / "pids"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path / "c"), str(pid_file),
                             how], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pids = [int(p) for p in pid_file.read_text().split()]
    assert len(pids) == 3 and all(_alive(p) for p in pids)
    if how == "raise":
        proc.stdin.write("go\n")
        proc.stdin.flush()
    elif how == "sigint":
        proc.send_signal(signal.SIGINT)  # Ctrl-C
    elif how == "sigkill":
        proc.kill()  # no clean-up code runs: the kernel's parent-death signal stops the children
    proc.wait(timeout=20)
    if how == "raise":
        assert "a failure inside the with block" in proc.stderr.read()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)]


INTEROP = {
    "titanic-train": "cabin_id:int64,cabin_type:int64,embarked:int64,gender:int64,label:int64,"
                     "parch:int64,pass_id:int64,pclass:int64,sibsp:int64,ticket:int64,"
                     "fare:float32",
    "titanic-test": "cabin_id:int64,cabin_type:int64,embarked:int64,gender:int64,parch:int64,"
                    "pass_id:int64,pclass:int64,sibsp:int64,ticket:int64,fare:float32",
    "regression-train": "x:float32,y:float32",
    "regression-eval": "x:float32,y:float32",
    "detection-test": "image/encoded:bytes,image/filename:bytes,image/format:bytes,"
                      "image/source_id:bytes,image/object/class/text:bytes,image/width:int64,"
                      "image/height:int64,image/object/class/label:int64,"
                      "image/object/bbox/xmin:float32,image/object/bbox/xmax:float32,"
                      "image/object/bbox/ymin:float32,image/object/bbox/ymax:float32",
}
COUNTS = {"titanic-train": 891, "titanic-test": 418, "regression-train": 804,
          "regression-eval": 99, "detection-test": 1}
# The files tests/tf_records.py writes with TensorFlow at test time, and their feature specs.
TF_WRITTEN = {"mixed": MIXED, "regression": REGRESSION, "detection": DETECTION}


def come_back_through_the_service(cluster, job, path, spec, count):
    """Deals the file's records one per batch, in order, and checks that each batch holds every
    feature of its record as TensorFlow wrote it. Returns the batches."""
    created = cluster.create_job(job, str(path), spec, 1, consumers=1, shuffle="none", epochs=1)
    assert int(created["num_records"]) == count
    expected = [croupier.parse_example(r) for r in croupier.TFRecordReader(str(path))]
    with cluster.consumer(job, 0, 1) as feed:
        got = list(feed.epoch(0))
    assert len(got) == count
    for want, batch in zip(expected, got):
        assert set(batch) == set(want)
        for feature, value in want.items():
            have = batch[feature]
            if isinstance(have, tuple):  # a variable-length feature: (values, row_splits)
                have, splits = have
                assert splits.tolist() == [0, len(value)], feature
            if isinstance(value, list):
                assert have == value, feature  # bytes, byte for byte
            else:
                np.testing.assert_array_equal(have.reshape(-1), value, feature)
    return got


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(INTEROP))
def test_tensorflow_written_files_come_back_through_the_service(shared_tfrecord, cluster, name):
    got = come_back_through_the_service(cluster, f"interop-{name}",
                                        shared_tfrecord / f"{name}.tfrecord", INTEROP[name],
                                        COUNTS[name])
    if name == "detection-test":
        jpeg = got[0]["image/encoded"][0]
        assert len(jpeg) == 708684 and jpeg[:2] == b"\xff\xd8"  # a JPEG, byte-identical above


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(TF_WRITTEN))
def test_files_tensorflow_writes_now_come_back_through_the_service(tf_written_tfrecord, cluster,
                                                                   name):
    # The same ground without ../shared: files the installed TensorFlow writes at test time.
    got = come_back_through_the_service(cluster, f"tf-written-{name}",
                                        tf_written_tfrecord / f"{name}.tfrecord", TF_WRITTEN[name],
                                        TF_WRITTEN_COUNTS[f"{name}.tfrecord"])
    if name == "detection":
        jpeg = (tf_written_tfrecord / "detection.jpg").read_bytes()
        assert [b["image/encoded"] for b in got] == [[jpeg], [jpeg]]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("new_world", [2, 8])
def test_resuming_with_another_world_size_repeats_and_skips_nothing(tmp_path, dataset,
                                                                    new_world):
    """4 ranks read 10 steps of epoch 0 and checkpoint; a new job with 2 or 8 ranks resumes from
    that checkpoint. Within epoch 0 no record comes twice and none is skipped but the new job's
    dropped tail; epoch 1 is the new job's whole epoch."""
    records, batch = 1200, 10
    with in_process_cluster(producers=2, threads=1) as cluster:
        cluster.create_job("n4", dataset, FEATURES, batch, consumers=4, seed=3, epochs=2)
        before, state = [], None
        feeds = [cluster.consumer("n4", r, 4) for r in range(4)]
        for step, got in enumerate(zip(*(f.epoch(0) for f in feeds))):
            before += [i for b in got for i in b["id"].tolist()]
            if step == 9:
                state = feeds[0].state_dict()
                break
        for f in feeds:
            f.close()
        assert (state["epoch"], state["step"], state["world"]) == (0, 10, 4)
        with pytest.raises(errors.InvalidArgumentError, match="resume_from=state"):
            with cluster.consumer("n4", 0, 4) as f:
                f.load_state_dict(dict(state, world=2))
        job = cluster.create_job(f"n{new_world}", dataset, FEATURES, batch, consumers=new_world,
                                 seed=3, epochs=2, resume_from=state)
        feeds = [cluster.consumer(f"n{new_world}", r, new_world) for r in range(new_world)]
        after = {0: [], 1: []}
        steps = {0: 0, 1: 0}
        for epoch in (0, 1):
            for got in zip(*(f.epoch(epoch) for f in feeds)):
                steps[epoch] += 1
                after[epoch] += [i for b in got for i in b["id"].tolist()]
        for f in feeds:
            f.close()
    plan = croupier.EpochPlan(records, batch, new_world, seed=3, epoch=0)
    want = [int(i) for g in range(plan.num_batches) for i in plan.batch(g)]
    got = before + after[0]
    assert len(got) == len(set(got))            # nothing repeated
    assert sorted(got) == sorted(want)          # nothing skipped but the new job's tail
    assert got == want                          # and in the plan's order of global batches
    assert steps[0] == (plan.num_batches - 40) // new_world
    plan1 = croupier.EpochPlan(records, batch, new_world, seed=3, epoch=1)
    assert sorted(after[1]) == sorted(int(i) for g in range(plan1.num_batches)
                                      for i in plan1.batch(g))
    assert steps[1] == int(job["steps_per_epoch"])


@pytest.mark.timeout(120)
def test_a_resumed_job_resumed_again_goes_on_where_it_stopped(tmp_path, dataset):
    """4 ranks read 10 steps; a job of 2 ranks resumes there and reads 5 steps; a job of 5 ranks
    resumes from that one's checkpoint and reads the rest of the epoch. The second resume starts
    at the second job's next global batch (its steps count from where it began: state
    ["global_batch"]), so the three read the 5-rank plan's batches in order, none twice."""
    batch = 10
    with in_process_cluster(producers=2, threads=1) as cluster:
        got, state = [], None
        for name, world, steps in (("c4", 4, 10), ("c2", 2, 5), ("c5", 5, None)):
            cluster.create_job(name, dataset, FEATURES, batch, consumers=world, seed=3,
                               epochs=1, resume_from=state)
            feeds = [cluster.consumer(name, r, world) for r in range(world)]
            for step, batches in enumerate(zip(*(f.epoch(0) for f in feeds))):
                got += [i for b in batches for i in b["id"].tolist()]
                if step + 1 == steps:
                    state = feeds[0].state_dict()
                    break
            for f in feeds:
                f.close()
        assert state is not None and state["global_batch"] == 50  # 40 + 5 steps of 2
    plan = croupier.EpochPlan(1200, batch, 5, seed=3, epoch=0)
    want = [int(i) for g in range(plan.num_batches) for i in plan.batch(g)]
    assert len(got) == len(set(got))
    assert got == want


@pytest.mark.timeout(60)
def test_the_dispatcher_serves_prometheus_metrics(tmp_path, dataset):
    import urllib.request
    port_file = tmp_path / "metrics.port"
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "c", threads=1,
                                dispatcher_args=("--metrics-port", "0", "--metrics-port-file",
                                                 str(port_file))) as cluster:
        cluster.create_job("m", dataset, FEATURES, 10, consumers=1, seed=1, epochs=1)
        with cluster.consumer("m", 0, 1) as feed:
            it = feed.epoch(0)
            for _ in range(7):
                next(it)
            time.sleep(1.5)  # a heartbeat reports the figures
            port = int(port_file.read_text())
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = r.read().decode()
    assert "# TYPE croupier_consumer_batches_received_total counter" in text
    assert 'croupier_consumer_batches_received_total{job="m",rank="0"} 7' in text
    assert 'croupier_job_steps_per_epoch{job="m"} 120' in text
    assert 'croupier_rank_step{job="m",rank="0"} 7' in text
    assert "croupier_producer_buffer_capacity_bytes{producer=" in text
