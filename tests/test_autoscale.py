"""croupier.local_cluster(producers="auto") on real processes: the producers follow the
dispatcher's recommendation up when the trainer is input-bound, and down when it slows, while
the trainer gets exactly the plan's records every epoch (scaling changes no byte). Producers are
made slow (--test-make-delay-ms: each batch takes 40 ms more, a fixed cost that sleeps, so that
they scale on 2 cores), and the dispatcher's damping is shortened so that it settles in seconds."""
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
