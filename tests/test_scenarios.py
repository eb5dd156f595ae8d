"""One scenario suite for the three supplies of a job, on the in-process cluster
(croupier.testing): TFRecord files served by the cluster's producers, a map job made by
croupier.produce() on threads of this process with real worker processes, and a stream fed by
croupier.serve(). Each runs over shared memory and over TCP (CROUPIER_SHM on and off, as the
consumers read it); the control plane is the dispatcher's real gRPC server. Every scenario
compares what each rank receives, record ids and content hashes, with the plan's deal or with a
fault-free run. The same scenarios in C++, with fakes for the Python supplies and the in-process
control plane besides: src/testing/scenario_test.cc."""
import threading
import time

import numpy as np
import pytest

import croupier
import map_sources
from croupier.testing import in_process_cluster
from service_cluster import synth_glob

WORLD, BATCH, RECORDS, SEED = 3, 4, 120, 7
STEPS = RECORDS // BATCH // WORLD  # 10 steps an epoch for each rank
TFRECORD_FEATURES = "id:int64,label:int64,image:bytes"
SUPPLIES = ["tfrecord", "map", "stream"]
TRANSPORTS = ["shm", "tcp"]


def stream_source(epoch):
    """Batch g of `epoch` of the stream: the ids g * BATCH ... + BATCH - 1, distinct across
    epochs."""
    for g in range(RECORDS // BATCH):
        yield {"id": np.arange(g * BATCH, (g + 1) * BATCH, dtype=np.int64) + epoch * 100000}


class Supply:
    """Job "j" (WORLD ranks, batches of BATCH, 2 epochs) on a new in-process cluster, made by
    `producers` producers of `kind`. Use as a context manager."""

    def __init__(self, kind, tmp_path, producers=1):
        self.kind = kind
        self.cluster = in_process_cluster(producers=producers if kind == "tfrecord" else 0,
                                          threads=2)
        self.threads = []
        self.stops = []
        if kind == "tfrecord":
            files = synth_glob(tmp_path / "data", RECORDS, image_bytes=32)
            self.cluster.create_job("j", files, TFRECORD_FEATURES, BATCH, consumers=WORLD,
                                    seed=SEED, epochs=2, shuffle="global")
        self.errors = []
        for k in range(producers if kind != "tfrecord" else 0):
            self._start(k, producers)
        if kind != "tfrecord":
            self._wait_for_job()

    def _wait_for_job(self, timeout=30):
        """Until the job a map or stream producer creates is there."""
        deadline = time.monotonic() + timeout
        while not any(j["name"] == "j" for j in self.cluster.status()["job_summaries"]):
            assert not self.errors, f"a producer failed: {self.errors[0]!r}"
            assert time.monotonic() < deadline, f"job j was not created within {timeout} s"
            time.sleep(0.02)

    def _start(self, k, producers):
        stop = threading.Event()
        if self.kind == "map":
            def run():
                croupier.produce(map_sources.Records(RECORDS), self.cluster.address, "j",
                                 batch_size=BATCH, consumers=WORLD, epochs=2, seed=SEED,
                                 transform=map_sources.augment, workers=2, threads=2, stop=stop,
                                 drain_timeout=0, leave_now=stop)
        else:
            def run():
                croupier.serve(stream_source, self.cluster.address, "j", consumers=WORLD,
                               epochs=2, batches_per_epoch=RECORDS // BATCH, stop=stop,
                               source_index=k, source_count=producers)
        thread = threading.Thread(target=self._guarded, args=(run,), daemon=True)
        thread.start()
        self.threads.append(thread)
        self.stops.append(stop)

    def _guarded(self, run):
        try:
            run()
        except BaseException as e:  # reported by close()
            self.errors.append(e)

    def stop_producer(self, k):
        """Producer k stops mid-epoch: a TFRecord producer at once, as a killed one; a map
        producer leaves at once, its tasks going to the others."""
        if self.kind == "tfrecord":
            self.cluster.stop_producer(k)
        else:
            self.stops[k].set()

    def expected_ids(self, epoch):
        """[rank][step] -> the record ids the job deals."""
        if self.kind == "stream":
            return [[[g * BATCH + i + epoch * 100000 for i in range(BATCH)]
                     for g in range(r, STEPS * WORLD, WORLD)] for r in range(WORLD)]
        plan = croupier.EpochPlan(RECORDS, BATCH, WORLD, seed=SEED, epoch=epoch)
        return [[plan.batch(plan.global_batch(r, s)).tolist() for s in range(STEPS)]
                for r in range(WORLD)]

    def read(self, epoch, start=None, prefetch=0, meanwhile=None):
        """Every rank reads `epoch`, each on a thread (from the checkpoint `start`, a step, if
        given); `meanwhile(step)` is called as rank 0 receives each step. [rank] -> [(ids,
        content hash)] in step order."""
        got = [[] for _ in range(WORLD)]
        failed = []

        def read(rank):
            try:
                with self.cluster.consumer("j", rank, WORLD, timeout=30,
                                           prefetch=prefetch) as feed:
                    if start is not None:
                        feed.load_state_dict({"format": 1, "job": "j", "world": WORLD,
                                              "epoch": epoch, "step": start})
                    for step, batch in enumerate(feed.batches(epoch)):
                        got[rank].append((batch.to_dict()["id"].tolist(), batch.content_hash))
                        if rank == 0 and meanwhile is not None:
                            meanwhile(step)
            except BaseException as e:  # the test fails with it below
                failed.append((rank, e))
        readers = [threading.Thread(target=read, args=(r,), daemon=True) for r in range(WORLD)]
        for t in readers:
            t.start()
        for t in readers:
            t.join(60)
            assert not t.is_alive(), "a rank did not finish its epoch within 60 s"
        assert not failed, f"rank {failed[0][0]} failed: {failed[0][1]!r}"
        assert [len(g) for g in got] == [STEPS - (start or 0)] * WORLD, "unequal steps"
        return got

    def close(self):
        for stop in self.stops:
            stop.set()
        for t in self.threads:
            t.join(30)
        self.cluster.close()
        assert not [t for t in self.threads if t.is_alive()], "a producer did not return"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture(params=TRANSPORTS)
def transport(request, monkeypatch):
    """The consumers' transport: shared memory (a producer they cannot reach so is an error) or
    TCP."""
    monkeypatch.setenv("CROUPIER_SHM", "on" if request.param == "shm" else "off")
    return request.param


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", SUPPLIES)
def test_every_rank_gets_its_batches_exactly_once_in_equal_steps(kind, transport, tmp_path):
    # Two producers; a stream's one source (several sources each deal a sequence of their own:
    # test_serve.py).
    with Supply(kind, tmp_path, producers=1 if kind == "stream" else 2) as supply:
        for epoch in range(2):
            got = supply.read(epoch)
            want = supply.expected_ids(epoch)
            seen = []
            for rank in range(WORLD):
                assert [ids for ids, _ in got[rank]] == want[rank], f"rank {rank} epoch {epoch}"
                seen += [i for ids, _ in got[rank] for i in ids]
            # 120 records in batches of 4 over 3 ranks: every one dealt, none twice.
            assert len(seen) == len(set(seen)) == RECORDS


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", SUPPLIES)
def test_a_resumed_epoch_deals_the_rest_of_the_fault_free_run(kind, transport, tmp_path):
    with Supply(kind, tmp_path / "reference") as supply:
        reference = supply.read(0)
    with Supply(kind, tmp_path / "resumed") as supply:
        got = supply.read(0, start=4)  # every rank checkpointed after 4 steps
    for rank in range(WORLD):
        assert got[rank] == reference[rank][4:], f"rank {rank}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["tfrecord", "map"])
def test_a_producer_stopped_mid_epoch_changes_no_byte(kind, transport, tmp_path):
    # A stream's batches are made only by the source that holds them: a stopped one is replaced
    # by a new serve() of the same source_index (test_serve.py).
    with Supply(kind, tmp_path / "reference", producers=2) as supply:
        reference = supply.read(0)
    with Supply(kind, tmp_path / "stopped", producers=2) as supply:
        def stop_at_step_3(step):
            if step == 3:
                supply.stop_producer(0)
        got = supply.read(0, prefetch=1, meanwhile=stop_at_step_3)
    for rank in range(WORLD):
        assert len(got[rank]) == STEPS
        for step in range(STEPS):
            assert got[rank][step] == reference[rank][step], f"rank {rank} step {step}"
