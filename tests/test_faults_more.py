"""More fault tests: a producer frozen (SIGSTOP) for longer than --producer-timeout-ms, then thawed
(SIGCONT); a trainer frozen past its rank's takeover, then thawed. Real dispatcher, producer and consumer processes on loopback. Each consumer's batches are
compared with a fault-free run of the same job by (epoch, step, content hash) and record ids:
exactly once (G1), equal steps (G2), bit-identical (G3). Every test bounds its time, thaws what it
froze (in a finally), and the Cluster kills every process it started.
"""
import re
import signal
import time

import pytest

from fault_job import (BATCH, FEATURES, RECORDS, SEED, STEPS, WORLD,  # noqa: F401 (fixtures)
                       dataset, reference)
from service_cluster import Cluster, OutputWatch, batch_hashes, check_exactly_once, read_batches

TIMEOUT_MS = 1500  # --producer-timeout-ms
FROZEN_S = 4.0  # well past the timeout, and past the dispatcher's 1 s expiry tick


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)


@pytest.mark.long
@pytest.mark.timeout(120)
def test_frozen_producer_loses_its_work_and_rejoins_as_a_new_producer(tmp_path, dataset,
                                                                       reference):
    with Cluster(tmp_path / "cluster", producer_timeout_ms=TIMEOUT_MS) as cluster:
        for _ in range(3):
            cluster.add_producer()
        cluster.create_job("train", dataset, FEATURES, BATCH, WORLD, seed=SEED, epochs=1)
        # Slow consumers, so that the epoch outlasts the freeze and the thaw; with a window of 4,
        # so that the frozen producer still holds work they have not fetched (the automatic
        # window, 64 batches this small, can have fetched all of it before the freeze).
        outs, procs = cluster.start_ranks("train", WORLD, tmp_path, 1, "--slow-ms", "150",
                                          "--prefetch", "4")
        watch = OutputWatch(outs)
        watch.wait_for(STEPS // 5, procs, timeout=60)

        before = cluster.producer_ids()
        assert len(before) == 3, before
        # A producer that holds tasks now (which one depends on whose heartbeats took them: one
        # may hold none by now), with its id and address from its log ("producer 2 serving on
        # 127.0.0.1:PORT for ...").
        producers = cluster.status()["producers"]
        holding = {p["dataAddress"] for p in producers if p.get("tasks")}
        for frozen in cluster.producers:
            old_id, address = re.search(r"producer (\d+) serving on (\S+) ",
                                        frozen.log_path.read_text()).groups()
            if address in holding:
                break
        else:
            raise AssertionError(f"no producer holds a task: {producers}")
        assert before[address] == old_id
        frozen.send_signal(signal.SIGSTOP)
        try:
            deadline = time.monotonic() + FROZEN_S
            while time.monotonic() < deadline:  # keep measuring stalls meanwhile
                watch.poll()
                time.sleep(0.02)
            # Presumed dead: removed, and its tasks orphaned for the others.
            gone = cluster.producer_ids()
            assert address not in gone, gone
            # ... with work in hand that had to move to the others.
            assert re.search(f"producer {old_id} at {address} removed \\(expired .*\\); "
                             "its [1-9][0-9]* unfinished tasks will be assigned again",
                             cluster.dispatcher.log_path.read_text())
        finally:
            frozen.send_signal(signal.SIGCONT)
        thawed_at = watch.counts[:]

        # It learns it was expired on its next heartbeat, drops its tasks and registers anew, at
        # the same data address under a new id.
        def rejoined():
            now = cluster.producer_ids()
            return now.get(address) not in (None, old_id) and now
        after = wait_until(rejoined, 15, f"producer {address} did not register again")
        new_id = after[address]
        assert int(new_id) > 3 and new_id not in before.values(), after
        assert "dropping its tasks and registering again" in frozen.log_path.read_text()
        assert f"producer {new_id} registered with data address {address}" in \
            cluster.dispatcher.log_path.read_text()

        stall = watch.follow(cluster, procs, timeout=90)
        assert min(thawed_at) < STEPS, "the epoch ended before the thaw: make consumers slower"
        print(f"producer frozen {FROZEN_S:.1f} s (timeout {TIMEOUT_MS} ms): "
              f"longest consumer stall {stall:.2f} s (includes 0.15 s --slow-ms)")
        # The thawed producer is still alive and heartbeating under its new id.
        assert frozen.poll() is None
        assert cluster.producer_ids()[address] == new_id
        # Each consumer handed exactly the epoch's steps to its trainer, no more.
        for p in procs:
            assert f"': {STEPS} batches" in p.log_path.read_text()
    assert check_exactly_once(outs, reference, RECORDS, BATCH, SEED) == STEPS * WORLD


@pytest.mark.timeout(120)
def test_producer_frozen_and_thawed_before_the_timeout_keeps_its_id(tmp_path, dataset,
                                                                     reference):
    """The control case: a pause shorter than --producer-timeout-ms is not a failure."""
    with Cluster(tmp_path / "cluster", producer_timeout_ms=4000) as cluster:
        for _ in range(2):
            cluster.add_producer()
        cluster.create_job("train", dataset, FEATURES, BATCH, WORLD, seed=SEED, epochs=1)
        outs, procs = cluster.start_ranks("train", WORLD, tmp_path, 1, "--slow-ms", "60")
        watch = OutputWatch(outs)
        watch.wait_for(STEPS // 5, procs, timeout=60)
        paused = cluster.producers[0]
        before = cluster.producer_ids()
        paused.send_signal(signal.SIGSTOP)
        try:
            time.sleep(1.0)
        finally:
            paused.send_signal(signal.SIGCONT)
        watch.follow(cluster, procs, timeout=90)
        assert cluster.producer_ids() == before
        assert "registered again" not in paused.log_path.read_text()
        assert not re.search("producer [0-9]+ at .* removed",
                             cluster.dispatcher.log_path.read_text())
    check_exactly_once(outs, reference, RECORDS, BATCH, SEED)


@pytest.mark.timeout(120)
def test_a_frozen_trainer_whose_rank_is_taken_over_delivers_nothing_more(tmp_path, dataset,
                                                                         reference):
    """A trainer frozen (SIGSTOP) past its rank's takeover time (3 heartbeats, 3 s), its rank
    taken over by a new process of the rank: woken, the old process hands its trainer no batch
    more and fails with ABORTED. It had the next steps prefetched; before the consumer confirmed
    its rank ahead of each hand-over, it delivered one of them, which the new process delivered
    too (6 of 7 probes). The new process starts where the rank was last acknowledged; between the
    two, every step of the rank comes with the fault-free bytes, and the other ranks are
    untouched."""
    with Cluster(tmp_path / "cluster") as cluster:
        cluster.add_producer()
        cluster.create_job("train", dataset, FEATURES, BATCH, WORLD, seed=SEED, epochs=1)
        outs, procs = cluster.start_ranks("train", WORLD, tmp_path, 1, "--slow-ms", "40")
        OutputWatch(outs).wait_for(STEPS // 4, procs, timeout=60)
        old = procs[1]
        new_out = tmp_path / "rank1-new.jsonl"
        old.send_signal(signal.SIGSTOP)
        try:
            frozen_at = len(read_batches(outs[1]))
            # The rank is free for it once the old process has been silent for 3 s.
            new = cluster._spawn(["consume", "--dispatcher", cluster.address, "--job", "train",
                                  "--rank", 1, "--world", WORLD, "--epochs", 1,
                                  "--output", new_out, "--timeout-ms", "30000",
                                  "--slow-ms", "40"], "consumer-train-1-new")
            wait_until(lambda: new_out.exists() and read_batches(new_out), 30,
                       "the new process of rank 1 read a batch")
        finally:
            old.send_signal(signal.SIGCONT)
        old.wait(timeout=30)
        log = old.log_path.read_text()
        assert old.returncode != 0 and "lost its rank" in log, log[-2000:]
        old_batches = batch_hashes(read_batches(outs[1]))
        assert len(old_batches) == frozen_at, \
            f"woken, the old process delivered {len(old_batches) - frozen_at} more batches"
        cluster.wait([p for p in procs if p is not old] + [new], timeout=90)
    new_batches = batch_hashes(read_batches(new_out))
    # The new process starts at the rank's last acknowledged step (at most a second behind).
    first_new = new_batches[0][1]
    assert first_new <= frozen_at, (first_new, frozen_at)
    assert old_batches == reference[1][:frozen_at]
    assert new_batches == reference[1][first_new:]
    for rank in (0, 2, 3):
        assert batch_hashes(read_batches(outs[rank])) == reference[rank]
