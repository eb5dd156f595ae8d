"""Many trainers on one machine: 64 real `croupier consume` processes of one job, each a rank of
64, through an epoch against a real dispatcher and two producers on loopback. Every rank takes
every step of its plan in order (equal steps), each batch holds the plan's record ids, and across
ranks every planned record comes once (exactly once), within a bound the test states. The
control plane's scale beyond what one machine can run as processes is measured by the dispatcher
benchmark (bench/bench_dispatcher.cc), not here.
"""
import time

import pytest

from service_cluster import Cluster, check_plan_ids, read_batches, run, synth_dataset

FEATURES = "id:int64,label:int64,image:bytes"
WORLD, BATCH, STEPS, SEED = 64, 4, 12, 5
RECORDS = WORLD * BATCH * STEPS
# The whole epoch, from the first consumer's start to the last one's exit, on this 2-core
# machine (measured: 9-12 s, most of it 64 processes starting and registering at once).
BOUND_S = 60


@pytest.mark.timeout(180)
def test_64_consumer_processes_read_an_epoch_exactly_once_with_equal_steps(tmp_path):
    dataset = synth_dataset(tmp_path / "data", RECORDS, files=4, image_bytes=64)
    with Cluster(tmp_path / "cluster") as cluster:
        cluster.add_producer()
        cluster.add_producer()
        cluster.create_job("wide", dataset, FEATURES, BATCH, WORLD, seed=SEED, epochs=1)
        start = time.monotonic()
        outs, procs = cluster.start_ranks("wide", WORLD, tmp_path, 1)
        cluster.wait(procs, timeout=BOUND_S)
        took = time.monotonic() - start
        status = cluster.status()
    print(f"64 consumer processes: the epoch in {took:.1f} s")
    assert took <= BOUND_S
    check_plan_ids([read_batches(o) for o in outs], RECORDS, BATCH, SEED)
    (job,) = status["jobSummaries"]
    assert job["name"] == "wide"


@pytest.mark.timeout(120)
def test_a_longer_heartbeat_interval_reaches_every_client(tmp_path):
    """`croupier dispatcher --heartbeat-interval-ms` (longer for many ranks, docs/operations.md):
    refused when longer than a timeout; at 2 s, the rank a consumer holds is taken over only
    after 3 intervals (6 s, which a second consumer of the rank is told), and 8 consumer processes
    beating at that interval read an epoch exactly once with equal steps."""
    bad = run("dispatcher", "--work-dir", tmp_path / "bad", "--heartbeat-interval-ms", 20000,
              check=False, timeout=20)
    assert bad.returncode == 2
    assert "--heartbeat-interval-ms 20000 is longer than --producer-timeout-ms (10000)" in bad.stderr
    world, batch, steps = 8, 4, 24
    records = world * batch * steps
    dataset = synth_dataset(tmp_path / "data", records, files=2, image_bytes=16)
    outs = [tmp_path / f"rank{r}.jsonl" for r in range(world)]
    with Cluster(tmp_path / "cluster",
                 dispatcher_args=("--heartbeat-interval-ms", 2000)) as cluster:
        cluster.add_producer()
        cluster.create_job("slow", dataset, FEATURES, batch, world, seed=SEED, epochs=1)
        # Rank 0 paced (24 steps at 250 ms) so that it holds its rank while the twin is refused.
        first = cluster.start_consumer("slow", 0, world, outs[0], 1, "--slow-ms", 250)
        deadline = time.monotonic() + 20
        while not cluster.status().get("consumers") and time.monotonic() < deadline:
            time.sleep(0.05)
        twin = run("consume", "--dispatcher", cluster.address, "--job", "slow", "--rank", 0,
                   "--world", world, "--timeout-ms", 1000, "--output", tmp_path / "twin.jsonl",
                   check=False, timeout=60)
        assert twin.returncode != 0 and "ALREADY_EXISTS" in twin.stderr
        assert "a rank is taken over after 6 s without a heartbeat" in twin.stderr, twin.stderr
        others = [cluster.start_consumer("slow", r, world, outs[r], 1) for r in range(1, world)]
        cluster.wait([first, *others], timeout=90)
    check_plan_ids([read_batches(o) for o in outs], records, batch, SEED)
