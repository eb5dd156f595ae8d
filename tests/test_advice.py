"""The recommended number of producers on a real cluster: a producer slowed down (each batch takes
60 ms more to make) cannot keep up with a consumer that would take about twice what it gets, and
the dispatcher asks for one more producer within seconds; a producer that makes batches easily
but serves each one late (60 ms of latency) leaves the consumer waiting too, but more producers
would not help, and the dispatcher says 1 and why; a fast producer feeding a slow consumer is enough. The damping is
shortened (--advice-smoothing-ms 3000, --advice-hold-ms 2000) so that each case settles in
seconds; src/dispatcher/producer_advice_test.cc checks the logic itself against exact loads.
Each job's own figure is served at /api/scale?job=NAME (a 404 for an unknown job, a 409 for a
stream job, which has none).
"""
import json
import math
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from croupier.testing import in_process_cluster
from service_cluster import Cluster, run

FEATURES = "id:int64,label:int64,image:bytes"
DAMPING = ["--advice-smoothing-ms", "3000", "--advice-hold-ms", "2000"]


@pytest.fixture
def dataset(tmp_path):
    data = tmp_path / "data"
    run("synth", "--out", data, "--files", 3, "--records", 3000, "--image-bytes", 256, "--quiet")
    return sorted(data.glob("*.tfrecord"))


def advice_when(cluster, done, timeout):
    """Polls the status until done(status) holds; returns the last status."""
    deadline = time.monotonic() + timeout
    while True:
        status = cluster.status()
        if done(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"not settled within {timeout} s: {status['producerAdvice']}, "
                                 f"consumers {status['consumers']}")
        time.sleep(0.5)


def scale_json(port, query=""):
    """The dispatcher's /api/scale on `port` (with `query`, e.g. "?job=train": one job's), what an
    engine's autoscaler (KEDA's metrics-api) reads."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/scale{query}",
                                timeout=10) as answer:
        return json.loads(answer.read())


def test_a_slowed_producer_makes_the_dispatcher_ask_for_more(tmp_path, dataset):
    port_file = tmp_path / "metrics.port"
    with Cluster(tmp_path / "c", dispatcher_args=DAMPING + [
            "--metrics-port", "0", "--metrics-port-file", str(port_file)]) as cluster:
        cluster.add_producer("--test-make-delay-ms", "60")
        cluster.create_job("slow", dataset, FEATURES, 16, 1, seed=1, epochs=0)
        cluster.start_consumer("slow", 0, 1, tmp_path / "r0.jsonl", 1000, "--slow-ms", "10",
                               "--quiet")
        status = advice_when(cluster, lambda s: s["producerAdvice"]["recommended"] >= 2, 40)
        port = int(port_file.read_text())
        scale = scale_json(port)["producers"]
        assert scale["measured"] is True and scale["recommended"] >= 2, scale
        assert scale["registered"] == 1 and scale["reason"], scale
        # The job's own figure: its consumer, and the generic producer that serves it.
        (job,) = status["jobSummaries"]
        assert job["producerAdvice"]["recommended"] >= 2, job
        mine = scale_json(port, "?job=slow")["producers"]
        assert mine["job"] == "slow" and mine["registered"] == 1, mine
        assert mine["measured"] is True and mine["recommended"] >= 2, mine
        # An unknown job: a 404 whose JSON names it.
        with pytest.raises(urllib.error.HTTPError) as missing:
            scale_json(port, "?job=nope")
        assert missing.value.code == 404
        error = json.loads(missing.value.read())
        assert error["error"] == "NOT_FOUND" and "'nope'" in error["message"], error
    advice = status["producerAdvice"]
    consumer = status["consumers"][0]
    producer = status["producers"][0]
    # The consumer waits for data a good share of its time, and the producer is busy making.
    assert consumer["inputBound"] > 0.2, consumer
    assert producer["busyShare"] > 0.8, producer
    # So it rises: to the model's figure (the consumer's demand over one producer's capacity:
    # 10 ms a step against 60 ms a batch on 2 threads, about 2.8), or, a consumer waiting on a
    # saturated producer, to one more than the one running (the early figures of the model may
    # still say less). Since a consumer takes each batch as it lands (not a whole group at once),
    # its demand is measured at about its real 90-100 batches a second, and the figure reaches 3.
    assert advice["producers"] == 1
    model = math.ceil(advice["demandBatchesPerSecond"] / advice["capacityBatchesPerSecond"])
    assert 2 <= advice["recommended"] <= max(2, model), advice
    assert "the limit is not the producers" not in advice["reason"], advice


def test_a_latency_limit_is_not_blamed_on_the_producers(tmp_path, dataset):
    with Cluster(tmp_path / "c", dispatcher_args=DAMPING) as cluster:
        cluster.add_producer("--test-delay-ms", "60")
        cluster.create_job("late", dataset, FEATURES, 16, 1, seed=1, epochs=0)
        # A window of 4 batches over 60 ms answers: at most about 66 batches/s, less than the
        # consumer would take (the automatic window would grow past the latency).
        cluster.start_consumer("late", 0, 1, tmp_path / "r0.jsonl", 1000, "--slow-ms", "10",
                               "--prefetch", "4", "--quiet")
        status = advice_when(
            cluster, lambda s: s["producerAdvice"]["recommended"] > 0 and
            s["consumers"][0]["inputBound"] > 0.25, 40)
    advice = status["producerAdvice"]
    assert status["producers"][0]["busyShare"] < 0.5, status["producers"]
    assert advice["recommended"] == 1, advice
    assert "the limit is not the producers" in advice["reason"], advice


def test_a_fast_producer_for_a_slow_consumer_is_enough(tmp_path, dataset):
    with Cluster(tmp_path / "c", dispatcher_args=DAMPING) as cluster:
        cluster.add_producer()
        # Batches of 8: an epoch lasts about 20 s, so no epoch boundary falls in the check.
        cluster.create_job("fast", dataset, FEATURES, 8, 1, seed=1, epochs=0)
        cluster.start_consumer("fast", 0, 1, tmp_path / "r0.jsonl", 1000, "--slow-ms", "50",
                               "--quiet")
        status = advice_when(cluster, lambda s: s["producerAdvice"]["recommended"] > 0, 40)
        # It stays at 1 while the load does.
        seen = set()
        for _ in range(8):
            seen.add(cluster.status()["producerAdvice"]["recommended"])
            time.sleep(0.5)
    assert status["producerAdvice"]["recommended"] == 1, status["producerAdvice"]
    assert seen == {1}, seen


def test_a_stream_job_has_no_target_for_an_engine_to_follow():
    """A croupier.serve() stream job's producers are its streams: /api/scale?job= answers 409
    with the reason, and deploy/slurm/autoscale.py --job NAME says so and exits 2 (before it
    runs any Slurm command). The dispatcher is the in-process cluster's, with its HTTP server."""
    root = pathlib.Path(__file__).resolve().parent.parent
    with in_process_cluster(producers=0, metrics_port=0) as cluster:
        assert cluster.metrics_port
        cluster.create_job("py", [], "x:int64", 1, consumers=1, source="python",
                           batches_per_epoch=10, shuffle="none")
        with pytest.raises(urllib.error.HTTPError) as fixed:
            scale_json(cluster.metrics_port, "?job=py")
        assert fixed.value.code == 409
        error = json.loads(fixed.value.read())
        assert error["error"] == "FAILED_PRECONDITION", error
        assert "has no producer target" in error["message"], error
        (job,) = cluster.status()["job_summaries"]
        assert job["producer_advice"]["fixed"] is True, job
        proc = subprocess.run(
            [sys.executable, str(root / "deploy" / "slurm" / "autoscale.py"), "--dispatcher",
             cluster.address, "--job", "py"], capture_output=True, text=True, timeout=60,
            env=dict(os.environ, PYTHONPATH=str(root / "python"), PATH="/nonexistent"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "job 'py' has no producer target to follow" in proc.stdout, proc.stdout
