"""croupier.local_cluster(producers="auto") on real processes: the producers follow the
dispatcher's recommendation up when the trainer is input-bound, and down when it slows, while
the trainer gets exactly the plan's records every epoch (scaling changes no byte). Producers are
made slow (--test-make-delay-ms: each batch takes 40 ms more, a fixed cost that sleeps, so that
they scale on 2 cores), and the dispatcher's damping is shortened so that it settles in seconds.

A map job's producers (`croupier produce` processes, each record read in a fixed 10 ms of sleep)
follow that job's own target the same way, and every rank gets the bytes of a run with a fixed
producer."""
import hashlib
import json
import os
import pathlib
import sys
import time

import pytest

import croupier
from croupier.autoscale import Autoscaler

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from service_cluster import synth_dataset  # noqa: E402

FEATURES = "id:int64,label:int64,image:bytes"
RECORDS, BATCH, SEED = 1600, 16, 3
DAMPING = ["--advice-smoothing-ms", "2000", "--advice-hold-ms", "1500"]


def read_epoch(feed, epoch, pause):
    ids = []
    for batch in feed.epoch(epoch):
        ids.append(batch["id"].tolist())
        time.sleep(pause)
    return ids


def planned(epoch):
    plan = croupier.EpochPlan(RECORDS, BATCH, 1, seed=SEED, epoch=epoch, shuffle="global")
    return [plan.batch(s).tolist() for s in range(plan.steps_per_consumer)]


@pytest.mark.long
@pytest.mark.timeout(180)
def test_local_cluster_auto_scales_out_when_input_bound_and_in_when_the_trainer_slows(tmp_path):
    files = synth_dataset(tmp_path / "data", RECORDS, files=2, image_bytes=32)
    with croupier.local_cluster(producers="auto", max_producers=3, autoscale_interval=0.5,
                                work_dir=tmp_path / "c", dispatcher_args=DAMPING,
                                producer_args=["--threads", "1", "--test-make-delay-ms", "40"]) \
            as cluster:
        cluster.create_job("train", [str(f) for f in files], FEATURES, BATCH, consumers=1,
                           seed=SEED, epochs=50)
        feed = cluster.consumer("train", 0, 1, timeout=60)
        epoch, most = 0, 1
        deadline = time.monotonic() + 60
        while len(cluster.live_producers) < 2:  # a fast trainer: input-bound
            assert time.monotonic() < deadline, f"no scale-out: {cluster.status()['producer_advice']}"
            assert read_epoch(feed, epoch, 0.0) == planned(epoch), f"epoch {epoch}"
            epoch += 1
        most = len(cluster.live_producers)
        deadline = time.monotonic() + 60
        while len(cluster.live_producers) > 1:  # a slow trainer: one producer is enough
            assert time.monotonic() < deadline, f"no scale-in: {cluster.status()['producer_advice']}"
            assert read_epoch(feed, epoch, 0.2) == planned(epoch), f"epoch {epoch}"
            epoch += 1
        feed.close()
        # The autoscaler records a change once scale() has returned, which waits for the stopped
        # producer: that producer may be gone a moment before.
        deadline = time.monotonic() + 15
        while cluster.autoscaler.changes[-1][1] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        changes = list(cluster.autoscaler.changes)
    assert most >= 2 and changes[0][1] >= 2 and changes[-1][1] == 1, changes
    logs = "".join(p.read_text() for p in (tmp_path / "c").glob("producer*.log"))
    assert "leaving (serving what it has made, handing the rest back)" in logs


def test_the_autoscaler_follows_the_figure_within_its_bounds():
    figures = iter([0, 3, 3, 9, 1, 0])
    running = [1]
    scaled = []

    def scale(n):
        scaled.append(n)
        running[0] = n

    auto = Autoscaler(lambda: {"producer_advice": {"recommended": next(figures)}},
                      lambda: running[0], scale, min_producers=1, max_producers=4)
    assert [auto.step() for _ in range(6)] == [None, 3, 3, 4, 1, None]
    assert scaled == [3, 4, 1]
    assert auto.changes == [(1, 3), (3, 4), (4, 1)]
    with pytest.raises(croupier.errors.InvalidArgumentError):
        Autoscaler(dict, int, print, min_producers=3, max_producers=2)


TESTS = pathlib.Path(__file__).resolve().parent
# The map job of tests/map_sources.py: 400 records in batches of 4, two ranks, 5 epochs.
MAP = {"records": 400, "batch_size": 4, "consumers": 2, "epochs": 5, "seed": 5}


def batch_digest(batch):
    """A batch's content: every feature's name, dtype, shape and bytes."""
    h = hashlib.sha256()
    for name in sorted(batch):
        value = batch[name]
        h.update(name.encode())
        if isinstance(value, list):  # a bytes feature
            for item in value:
                h.update(len(item).to_bytes(8, "little") + item)
        else:
            h.update(f"{value.dtype}{value.shape}".encode() + value.tobytes())
    return h.hexdigest()


def run_map_job(work_dir, monkeypatch, producers, delay, **options):
    """Map job "m" served by `producers` (a number, or "auto") `croupier produce` processes whose
    reads take `delay` s per record; both ranks read every epoch as fast as they can. Returns
    (each rank's batch digests, the autoscaler's changes, the cluster's advice at the end)."""
    monkeypatch.setenv("MAP_TEST", json.dumps(dict(MAP, delay=delay)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p))
    with croupier.local_cluster(producers=producers, pipeline="map_sources:pipeline", job="m",
                                work_dir=work_dir, dispatcher_args=DAMPING,
                                producer_args=["--workers", "1"], **options) as cluster:
        feed = cluster.consumer("m", ranks=[0, 1], world=2, timeout=30)
        digests = [[], []]
        for epoch in range(MAP["epochs"]):
            for step in feed.epoch(epoch):
                for rank, batch in enumerate(step):
                    digests[rank].append(batch_digest(batch))
        changes = []
        if cluster.autoscaler is not None:
            # Stopped before the producers end with the job, so that it starts none again.
            cluster.autoscaler.stop()
            changes = list(cluster.autoscaler.changes)
        status = cluster.status()
        feed.close()
    return digests, changes, status


@pytest.mark.long
@pytest.mark.timeout(60)
def test_a_map_jobs_producers_follow_its_own_target(tmp_path, monkeypatch):
    fixed, _, _ = run_map_job(tmp_path / "fixed", monkeypatch, 1, 0.0)
    steps = MAP["epochs"] * MAP["records"] // MAP["batch_size"] // 2
    assert [len(d) for d in fixed] == [steps, steps]
    started = time.monotonic()
    scaled, changes, status = run_map_job(tmp_path / "auto", monkeypatch, "auto", 0.01,
                                          max_producers=3, autoscale_interval=0.5)
    # The job's target rose from the one producer it started with, and the producers followed.
    assert changes and changes[0][0] == 1 and changes[0][1] >= 2, (changes, status)
    # The map job's producers count in its own figure only, not in the cluster's (which is for
    # the `croupier producer` processes of TFRecord jobs).
    assert status["producer_advice"]["producers"] == 0, status["producer_advice"]
    # Scaling changed no byte any rank got.
    assert scaled == fixed
    print(f"autoscaled map job: {time.monotonic() - started:.1f} s, changes {changes}")


def test_the_autoscaler_follows_a_jobs_figure_and_refuses_a_job_without_one():
    status = {"producer_advice": {"recommended": 5},
              "job_summaries": [{"name": "m", "producer_advice": {"recommended": 2}},
                                {"name": "s", "producer_advice": {"fixed": True,
                                                                  "reason": "a stream job"}}]}
    scaled = []
    auto = Autoscaler(lambda: status, lambda: 1, scaled.append, job="m")
    assert auto.step() == 2 and scaled == [2]
    assert Autoscaler(lambda: status, lambda: 1, scaled.append).wanted() == 5  # the cluster's
    with pytest.raises(croupier.errors.NotFoundError, match="no job 'x'"):
        Autoscaler(lambda: status, lambda: 1, scaled.append, job="x").step()
    with pytest.raises(croupier.errors.FailedPreconditionError, match="a stream job"):
        Autoscaler(lambda: status, lambda: 1, scaled.append, job="s").step()
