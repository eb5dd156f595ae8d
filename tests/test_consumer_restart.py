"""Consumer restarts and checkpoint restores, with real processes on loopback: a consumer SIGKILLed
and restarted with its rank (with and without a checkpoint), and a whole job (dispatcher,
producers, consumers) killed and restarted from a checkpoint. Every batch is compared by
(epoch, step, content hash) with a fault-free run of the same job."""
import time

import pytest

from service_cluster import (Cluster, batch_hashes, fault_free_run, kill, read_batches,
                             synth_dataset)

FEATURES = "id:int64,label:int64,image:bytes"
RECORDS, BATCH, WORLD, SEED = 2400, 16, 3, 5
STEPS = RECORDS // (BATCH * WORLD)  # 50 per rank per epoch


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return synth_dataset(tmp_path_factory.mktemp("restart") / "data", RECORDS, files=2,
                         image_bytes=128)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, dataset):
    """A fault-free run over 2 epochs: each rank's [(epoch, step, hash)]."""
    return fault_free_run(tmp_path_factory.mktemp("reference"), dataset, FEATURES, BATCH, WORLD,
                          SEED, epochs=2)


def lines(path):
    return path.read_text().count("\n") if path.exists() else 0


def wait_for_lines(path, n, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while lines(path) < n:
        assert proc.poll() is None, f"consumer exited {proc.returncode}"
        assert time.monotonic() < deadline, f"{path} did not reach {n} batches"
        time.sleep(0.01)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_killed_consumer_restarts_with_its_rank(tmp_path, dataset, reference, checkpoint):
    with Cluster(tmp_path / "cluster") as cluster:
        for _ in range(2):
            cluster.add_producer()
        cluster.create_job("train", dataset, FEATURES, BATCH, WORLD, seed=SEED, epochs=2)
        outs, procs = cluster.start_ranks("train", WORLD, tmp_path, 2, "--slow-ms", "20")
        victim = 1
        wait_for_lines(outs[victim], 30, procs[victim])
        kill(procs[victim])
        first = read_batches(outs[victim])
        outs[victim].rename(tmp_path / "first.jsonl")
        extra = ()
        if checkpoint:
            # The trainer's own checkpoint: a few steps before the last batch it received.
            saved = first[-4]["step"]
            extra = ("--first-epoch", "0", "--start-step", str(saved))
            first = first[:-4]
        start = time.monotonic()
        procs[victim] = cluster.start_consumer("train", victim, WORLD, outs[victim], 2,
                                               "--slow-ms", "20", *extra)
        cluster.wait(procs, timeout=90)
        second = read_batches(outs[victim])
        took = time.monotonic() - start
    for rank in range(WORLD):
        if rank != victim:
            assert batch_hashes(read_batches(outs[rank])) == reference[rank], f"rank {rank}"
    want = reference[victim]
    got_first, got_second = batch_hashes(first), batch_hashes(second)
    if checkpoint:
        # Exact: the checkpointed run and the restored one join with nothing missing or repeated.
        assert got_first + got_second == want
    else:
        # From the last acknowledged step (about a second of batches may come again): no gap, and
        # every batch identical to the fault-free run's.
        resumed = want.index(got_second[0])
        assert resumed <= len(got_first), "a gap: batches were skipped"
        assert got_first == want[:len(got_first)]
        assert got_second == want[resumed:]
        assert len(got_first) - resumed <= 80, "resumed much earlier than the last ack"
    assert took < 60


@pytest.mark.timeout(150)
def test_the_whole_job_restarts_from_a_checkpoint_bit_identically(tmp_path, dataset, reference):
    outs = [tmp_path / f"r{r}.jsonl" for r in range(WORLD)]
    with Cluster(tmp_path / "cluster", producer_timeout_ms=1500) as cluster:
        for _ in range(2):
            cluster.add_producer()
        cluster.create_job("train", dataset, FEATURES, BATCH, WORLD, seed=SEED, epochs=2)
        procs = [cluster.start_consumer("train", r, WORLD, outs[r], 2, "--slow-ms", "20")
                 for r in range(WORLD)]
        for r in range(WORLD):
            wait_for_lines(outs[r], 20, procs[r])
        # Everything dies at once.
        for p in procs + cluster.producers:
            kill(p)
        cluster.kill_dispatcher()
        # The trainers' checkpoint: a step every rank had reached (in a real job they save it
        # together, at the same step).
        saved = min(lines(o) for o in outs) - 3
        firsts = [read_batches(o)[:saved] for o in outs]
        for o in outs:
            o.unlink()
        cluster.restart_dispatcher()
        for _ in range(2):
            cluster.add_producer()
        procs = [cluster.start_consumer("train", r, WORLD, outs[r], 2, "--first-epoch", "0",
                                        "--start-step", str(saved)) for r in range(WORLD)]
        cluster.wait(procs, timeout=90)
    for rank in range(WORLD):
        # The rest of epoch 0 and all of epoch 1, as if nothing had happened.
        resumed = batch_hashes(read_batches(outs[rank]))
        assert batch_hashes(firsts[rank]) + resumed == reference[rank], rank
