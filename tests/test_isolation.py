"""A rank's trouble costs only that rank (docs/protocol.md, "Slots, done tasks and eviction"),
over real processes: a dispatcher, a `python -m croupier produce` process of a map job
(tests/test_produce.py's helpers), and trainers reading through croupier.Consumer on threads.

Before a producer's slot meant making capacity, both cases below stalled the healthy ranks after
the two tasks their producer held until their deadline (DEADLINE_EXCEEDED: '... is not assigned to
a producer yet'); each test bounds the healthy ranks' time well under their 30 s deadline."""
import pathlib
import sys
import threading
import time

import pytest

import croupier
from croupier import errors

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from service_cluster import Cluster  # noqa: E402
from test_produce import start_producer, wait_for_job  # noqa: E402

WORLD = 4
RECORDS = 480  # batches of 4, shuffle none: 120 batches, 30 steps per rank


def planned_ids(rank, step):
    """The record ids rank `rank` gets at `step` (shuffle none, batch 4)."""
    g = step * WORLD + rank
    return list(range(4 * g, 4 * g + 4))


def read_all(feed, out, errors_out, rank):
    """Reads epoch 0 of `feed` into out[rank] (ids per step); its error into errors_out[rank]."""
    try:
        for batch in feed.epoch(0):
            out[rank].append([int(i) for i in batch["id"]])
    except errors.Error as e:
        errors_out[rank] = e


def read_together(feeds, got, failed):
    """Reads epoch 0 of every feed of {rank: feed} at once, one thread each; the seconds it took."""
    began = time.monotonic()
    threads = [threading.Thread(target=read_all, args=(feed, got, failed, rank), daemon=True)
               for rank, feed in feeds.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for feed in feeds.values():
        feed.close()
    return time.monotonic() - began


def start(cluster, **opts):
    start_producer(cluster, "m", "producer0", records=RECORDS, shuffle="none", consumers=WORLD,
                   epochs=1, batch_size=4, workers=1, transform="none", **opts)
    wait_for_job(cluster, "m")


@pytest.mark.timeout(120)
def test_a_failing_record_fails_only_the_rank_that_needs_it(tmp_path):
    """Record 17 raises when read: batch 4 (records 16-19) is rank 0's step 1. Rank 0 gets that
    error, naming the record; ranks 1-3 read all 30 steps, each the plan's records."""
    with Cluster(tmp_path / "c") as cluster:
        start(cluster, fail_at=17)
        feeds = {r: croupier.Consumer(cluster.address, "m", r, WORLD, timeout=30)
                 for r in range(WORLD)}
        got = [[] for _ in range(WORLD)]
        failed = [None] * WORLD
        took = read_together(feeds, got, failed)
    assert failed[0] is not None and "record 17" in str(failed[0]) and \
        "ValueError: record 17 is unreadable" in str(failed[0]), failed[0]
    assert got[0] == [planned_ids(0, 0)]
    for r in range(1, WORLD):
        assert failed[r] is None, f"rank {r}: {failed[r]}"
        assert got[r] == [planned_ids(r, s) for s in range(30)], f"rank {r}"
    assert took < 20, f"the healthy ranks took {took:.1f} s"
    print(f"healthy ranks read their epoch in {took:.2f} s")


@pytest.mark.timeout(120)
def test_a_rank_that_never_reads_stalls_nobody_and_gets_its_batches_later(tmp_path):
    """Rank 3 registers and reads nothing while ranks 0-2 read their whole epoch; then rank 3
    reads at last and gets the plan's batches: every record of the epoch exactly once."""
    with Cluster(tmp_path / "c") as cluster:
        start(cluster)
        stuck = croupier.Consumer(cluster.address, "m", 3, WORLD, timeout=30)
        feeds = {r: croupier.Consumer(cluster.address, "m", r, WORLD, timeout=30)
                 for r in range(3)}
        got = [[] for _ in range(WORLD)]
        failed = [None] * WORLD
        took = read_together(feeds, got, failed)
        read_together({3: stuck}, got, failed)
    assert failed == [None] * WORLD, failed
    for r in range(WORLD):
        assert got[r] == [planned_ids(r, s) for s in range(30)], f"rank {r}"
    ids = [i for rank in got for batch in rank for i in batch]
    assert sorted(ids) == list(range(RECORDS))
    assert took < 20, f"the reading ranks took {took:.1f} s"
    print(f"ranks 0-2 read their epoch in {took:.2f} s")
