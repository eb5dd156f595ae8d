"""croupier.produce(tf_transform=...): a tf.data pipeline (decode JPEG, stateless random crop and
flip, normalise) as a map job's transform, with every guarantee of a map job, checked over real
processes: producers started as `python -m croupier produce map_sources_tf:pipeline`
(tests/map_sources_tf.py), consumers and dispatcher from tests/service_cluster.py, through the
helpers of tests/test_produce.py."""
import gc
import pathlib
import sys
import time

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import croupier  # noqa: E402
from croupier import errors  # noqa: E402
from croupier.errors import BatchError  # noqa: E402
from croupier.map.pipeline import Pipeline  # noqa: E402
from croupier.map.tf_pipeline import record_seed, record_seeds  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import map_sources_tf  # noqa: E402
from service_cluster import Cluster, batch_hashes  # noqa: E402
from test_produce import (check_against_plan, check_resume, error_of_rank_1,  # noqa: E402
                          planned_hashes, run_job, start_producer, wait_for_job)

PIPELINE = "map_sources_tf:pipeline"


def run_tf_job(work_dir, **opts):
    """run_job with the tf.data pipeline: no worker processes (tf_transform refuses them)."""
    return run_job(work_dir, workers=0, pipeline=PIPELINE, **opts)


def planned(**opts):
    """What each rank of run_tf_job(**opts) must read, made in this process by the same pipeline
    from (seed, epoch, batch, the plan's record ids): [(epoch, step, hash)] per rank."""
    return planned_hashes(pipeline=PIPELINE, **opts)


def test_a_record_is_a_function_of_seed_epoch_and_index():
    """Each record of a batch is the pipeline run on that record alone with its croupier_seed;
    the epoch changes it; dtypes travel (uint8 stays uint8)."""
    pipe = Pipeline(map_sources_tf.JpegRecords(40), tf_transform=map_sources_tf.augment, seed=5)
    ids = np.array([7, 3, 30, 12], dtype=np.uint64)
    a = pipe.make(1, 9, ids).to_dict()
    assert a["pixels"].dtype == np.uint8 and a["pixels"].shape == (4, 24, 24, 3)
    assert a["image"].dtype == np.float32 and a["id"].tolist() == ids.tolist()
    for k, i in enumerate(ids):
        record = map_sources_tf.JpegRecords(40)[int(i)]
        record["croupier_seed"] = tf.constant(record_seed(5, 1, int(i)))
        alone = map_sources_tf.augment_one({n: tf.constant(v) for n, v in record.items()})
        np.testing.assert_array_equal(a["pixels"][k], alone["pixels"].numpy())
        np.testing.assert_array_equal(a["image"][k], alone["image"].numpy())
    assert pipe.make(1, 9, ids).to_dict()["image"].tobytes() == a["image"].tobytes()
    assert pipe.make(2, 9, ids).to_dict()["image"].tobytes() != a["image"].tobytes()
    tf.random.set_seed(123)  # global state plays no part
    assert pipe.make(1, 9, ids).to_dict()["image"].tobytes() == a["image"].tobytes()


@pytest.mark.timeout(150)
def test_each_rank_gets_the_plans_records_made_by_the_pipeline(tmp_path):
    per_rank = run_tf_job(tmp_path / "run", records=96, batch_size=4)
    check_against_plan(per_rank, 96, 4, seed=5, epochs=2)
    assert [batch_hashes(r) for r in per_rank] == planned(records=96, batch_size=4)


@pytest.mark.timeout(240)
def test_two_producers_make_the_bytes_the_pipeline_makes_here(tmp_path):
    """Two producer processes, each its own TensorFlow: every batch has the bytes this process's
    pipeline makes of the plan's records (one producer: the test above)."""
    two = run_tf_job(tmp_path / "two", producers=2, records=96, batch_size=4)
    assert len(two[0]) == 2 * 12
    assert [batch_hashes(r) for r in two] == planned(records=96, batch_size=4)


@pytest.mark.long
@pytest.mark.timeout(240)
def test_a_producer_killed_mid_epoch_changes_no_byte(tmp_path):
    """The producer SIGKILLed mid-epoch, a new one started: the batches it had not served are made
    again, with the bytes this process's pipeline makes of the plan's records."""
    killed = run_tf_job(tmp_path / "killed", records=96, batch_size=4, kill_after=5)
    check_against_plan(killed, 96, 4, seed=5, epochs=2)
    assert [batch_hashes(r) for r in killed] == planned(records=96, batch_size=4)


@pytest.mark.long
@pytest.mark.timeout(240)
def test_a_checkpoint_resumes_exactly_and_with_another_world_size(tmp_path):
    check_resume(tmp_path, pipeline=PIPELINE, workers=0)


@pytest.mark.timeout(150)
def test_a_corrupt_jpeg_reaches_the_trainer_that_needs_it(tmp_path):
    with Cluster(tmp_path / "c") as cluster:
        # Record 30 is no JPEG; batch 0 (records 0-3, shuffle none) is fine.
        start_producer(cluster, "m", "producer0", pipeline=PIPELINE, workers=0, records=48,
                       corrupt_at=30, shuffle="none", consumers=2, epochs=1, batch_size=4)
        wait_for_job(cluster, "m", timeout=90)
        # Global batch 7 holds records 28-31.
        message = error_of_rank_1(cluster, "m")
        assert "job 'm' epoch 0 batch 7: record 30: the tf_transform failed: " \
               "InvalidArgumentError: " in message and "JPEG" in message, message


@pytest.mark.timeout(60)
def test_a_pipeline_that_filters_records_is_refused(tmp_path):
    with Cluster(tmp_path / "c") as cluster:
        with pytest.raises(errors.InvalidArgumentError) as raised:
            croupier.produce(map_sources_tf.JpegRecords(16), cluster.address, "j", batch_size=4,
                             consumers=1, shuffle="none", tf_transform=map_sources_tf.drop_some)
        message = str(raised.value)
        assert "job 'j' epoch 0 batch 0: tf_transform made 3 outputs of the batch's 4 records" \
            in message and "one output per record" in message, message
        assert not cluster.status().get("jobSummaries"), "no job is created for a pipeline that fails"


def test_skip_failing_records_finds_the_record_the_pipeline_fails_on_and_leaves_it_out():
    pipe = Pipeline(map_sources_tf.JpegRecords(16, corrupt_at=5),
                    tf_transform=map_sources_tf.augment, seed=5, skip_failing_records=True)
    ids = np.array([4, 5, 6, 7], dtype=np.uint64)
    made = pipe.make(0, 1, ids)
    assert made.to_dict()["id"].tolist() == [4, 6, 7]
    whole = Pipeline(map_sources_tf.JpegRecords(16), tf_transform=map_sources_tf.augment, seed=5)
    want = whole.make(0, 1, ids).to_dict()["image"]
    np.testing.assert_array_equal(made.to_dict()["image"], want[[0, 2, 3]])
    with pytest.raises(Exception, match="record 5: the tf_transform failed"):
        pipe.make(0, 2, np.array([5], dtype=np.uint64))


@pytest.mark.parametrize("fn, made", [
    (lambda ds: map_sources_tf.augment(ds).repeat(2), "made more than 4 outputs"),
    (lambda ds: map_sources_tf.augment(ds).take(0), "made 0 outputs"),
    (lambda ds: map_sources_tf.augment(ds).batch(2), "made 2 outputs"),
])
def test_a_pipeline_that_changes_the_count_is_an_error(fn, made):
    pipe = Pipeline(map_sources_tf.JpegRecords(16), tf_transform=fn, seed=5)
    with pytest.raises(Exception, match=f"tf_transform {made} of the batch's 4 records"):
        pipe.make(0, 1, np.arange(4, 8, dtype=np.uint64))


def test_tf_transform_refuses_worker_processes():
    with pytest.raises(errors.InvalidArgumentError, match="workers must be 0"):
        croupier.produce(map_sources_tf.JpegRecords(16), "127.0.0.1:1", "j", batch_size=4,
                         consumers=1, tf_transform=map_sources_tf.augment, workers=2)


class Tokens:
    """Records of a variable length: record i holds int32 tokens [0, i % 4) and a word."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return {"tokens": np.arange(i % 4, dtype=np.int32), "word": f"w{i}"}


def test_variable_lengths_in_and_out():
    def fn(ds):
        return ds.map(lambda r: {"doubled": r["tokens"] * 2, "n": tf.size(r["tokens"]),
                                 "word": r["word"]})
    pipe = Pipeline(Tokens(), tf_transform=fn, seed=5)
    got = pipe.make(0, 0, np.array([1, 2, 3, 4], dtype=np.uint64)).to_dict()
    values, splits = got["doubled"]
    assert values.dtype == np.int32 and values.tolist() == [0, 0, 2, 0, 2, 4]
    assert splits.tolist() == [0, 1, 3, 6, 6]
    assert got["n"].tolist() == [1, 2, 3, 0]
    assert [bytes(w) for w in got["word"]] == [b"w1", b"w2", b"w3", b"w4"]


def test_a_record_cache_before_a_tf_transform():
    """decode (PIL's JPEG decode, in Python) and a record cache before a tf_transform (random
    crop and flip): the second epoch decodes nothing, and the bytes are the uncached pipeline's."""
    import collections
    import io

    from PIL import Image
    calls = collections.Counter()

    def decode(record):
        calls[int(record["id"])] += 1
        image = np.asarray(Image.open(io.BytesIO(record["image"])).convert("RGB"))
        return dict(record, image=image)

    def crop_and_flip(ds):
        def one(r):
            image = tf.image.stateless_random_crop(r["image"], [24, 24, 3], seed=r["croupier_seed"])
            return {"pixels": tf.image.stateless_random_flip_left_right(
                image, seed=tf.random.experimental.stateless_fold_in(r["croupier_seed"], 1)),
                "id": r["id"]}
        return ds.map(one, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    ids = np.array([7, 3, 30, 12], dtype=np.uint64)
    plain = Pipeline(map_sources_tf.JpegRecords(40), decode=decode, tf_transform=crop_and_flip,
                     seed=5)
    want = [plain.make(epoch, 1, ids).content_hash for epoch in (0, 1)]
    calls.clear()
    with Pipeline(map_sources_tf.JpegRecords(40), decode=decode, tf_transform=crop_and_flip,
                  seed=5, cache_bytes=1 << 20) as cached:
        assert [cached.make(epoch, 1, ids).content_hash for epoch in (0, 1)] == want
        assert dict(calls) == {int(i): 1 for i in ids}
        assert cached.make(0, 1, ids).to_dict()["pixels"].dtype == np.uint8


# -- the continuous pipeline (one long-lived tf.data pipeline per producer) ---------------------

def make_many(pipe, jobs, threads):
    """{(epoch, batch): content hash} of pipe.make for each (epoch, batch, ids) of `jobs`, made by
    `threads` threads at once (as the producer's threads call it)."""
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        made = pool.map(lambda job: ((job[0], job[1]), pipe.make(*job).content_hash), jobs)
        return dict(made)


def plan_jobs(records, batch_size, epochs, seed=5, world=2):
    jobs = []
    for epoch in range(epochs):
        plan = croupier.EpochPlan(records, batch_size, world, seed=seed, epoch=epoch)
        jobs += [(epoch, g, plan.batch(g)) for g in range(plan.num_batches)]
    return jobs


def feed_threads(pipe):
    """The puller threads of pipe's live feeds."""
    return [feed._thread for feed in pipe._tf._feeds.values()]


def ended(threads, timeout=30):
    """Whether every thread of `threads` ends within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("threads", [1, 4])
def test_the_continuous_pipeline_makes_the_bytes_of_the_per_batch_path(threads):
    """Every batch of two epochs, made through the continuous pipeline by 1 or 4 threads at once,
    has the content hash of the same batch made alone (one tf.function call per batch); and the
    batches did go through the feed. close() ends its thread."""
    jobs = plan_jobs(96, 4, epochs=2)
    alone = Pipeline(map_sources_tf.JpegRecords(96), tf_transform=map_sources_tf.augment, seed=5)
    alone._tf.continuous = False
    want = make_many(alone, jobs, 1)
    assert alone._tf.made == {"alone": len(jobs)}
    with Pipeline(map_sources_tf.JpegRecords(96), tf_transform=map_sources_tf.augment,
                  seed=5) as fed:
        assert make_many(fed, jobs, threads) == want
        assert fed._tf.made == {"by_feed": len(jobs)}
        threads = feed_threads(fed)
        assert len(threads) == 1 and threads[0].is_alive()
    assert ended(threads, timeout=0)  # close() joined it
    fed = Pipeline(map_sources_tf.JpegRecords(96), tf_transform=map_sources_tf.augment, seed=5)
    fed.make(*jobs[0])
    threads = feed_threads(fed)
    del fed  # dropped without close(): its feed stops too
    gc.collect()
    assert ended(threads)


@pytest.mark.timeout(120)
def test_a_failing_record_in_the_pipeline_is_named_and_the_pipeline_restarts():
    """Record 30 is no JPEG: its batch fails naming it (the batches in flight made again alone),
    every other batch has the per-batch path's bytes, and later batches go through a new feed."""
    jobs = [(0, g, np.arange(4 * g, 4 * g + 4, dtype=np.uint64)) for g in range(12)]
    alone = Pipeline(map_sources_tf.JpegRecords(48), tf_transform=map_sources_tf.augment, seed=5)
    alone._tf.continuous = False
    want = {(0, g): alone.make(0, g, ids).content_hash for _, g, ids in jobs if g != 7}
    with Pipeline(map_sources_tf.JpegRecords(48, corrupt_at=30),
                  tf_transform=map_sources_tf.augment, seed=5) as fed:
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = {(0, g): pool.submit(fed.make, 0, g, ids) for _, g, ids in jobs}
            with pytest.raises(BatchError) as raised:
                futures.pop((0, 7)).result()
            got = {key: f.result().content_hash for key, f in futures.items()}
        assert "record 30: the tf_transform failed: InvalidArgumentError: " in \
            str(raised.value) and "JPEG" in str(raised.value), str(raised.value)
        assert got == want
        before = fed._tf.made["by_feed"]
        assert fed.make(0, 1, jobs[1][2]).content_hash == want[(0, 1)]
        assert fed._tf.made["by_feed"] == before + 1, "a new feed after the failure"
        threads = feed_threads(fed)
    assert ended(threads, timeout=0)


@pytest.mark.timeout(120)
def test_skip_failing_records_through_the_continuous_pipeline():
    """With skip_failing_records, the batch holding the corrupt record is made without it, with
    the per-batch path's bytes; the other batches are whole and the same too."""
    jobs = [(0, g, np.arange(4 * g, 4 * g + 4, dtype=np.uint64)) for g in range(6)]

    def all_of(continuous, threads):
        pipe = Pipeline(map_sources_tf.JpegRecords(24, corrupt_at=9),
                        tf_transform=map_sources_tf.augment, seed=5, skip_failing_records=True)
        pipe._tf.continuous = continuous
        with pipe:
            made = make_many(pipe, jobs, threads)
            return made, pipe._tf.made
    want, _ = all_of(False, 1)
    got, made = all_of(True, 3)
    assert got == want and made["by_feed"] >= 1
    short = Pipeline(map_sources_tf.JpegRecords(24), tf_transform=map_sources_tf.augment, seed=5)
    assert want[(0, 2)] == short.make(0, 2, np.array([8, 10, 11], dtype=np.uint64)).content_hash


@pytest.mark.timeout(120)
def test_fields_whose_type_changes_between_batches_are_made_alone_with_the_same_bytes():
    """Tokens' lengths vary: a batch of equal lengths is a dense column, else a ragged one; a
    batch the feed's input signature does not fit is made alone, every batch as the per-batch
    path makes it."""
    def fn(ds):
        return ds.map(lambda r: {"doubled": r["tokens"] * 2, "word": r["word"]},
                      num_parallel_calls=tf.data.AUTOTUNE)
    jobs = [(0, g, np.array(ids, dtype=np.uint64)) for g, ids in
            enumerate([[1, 2, 3, 4], [1, 5, 9, 13], [0, 1, 2, 3], [2, 6, 10, 14], [3, 2, 1, 0]])]
    alone = Pipeline(Tokens(), tf_transform=fn, seed=5)
    alone._tf.continuous = False
    want = make_many(alone, jobs, 1)
    with Pipeline(Tokens(), tf_transform=fn, seed=5) as fed:
        assert make_many(fed, jobs, 1) == want
        assert fed._tf.made["by_feed"] >= 3 and fed._tf.made["alone"] >= 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fn, cause", [
    (lambda ds: map_sources_tf.augment(ds).shuffle(4, seed=1), "ShuffleDataset"),
    (lambda ds: ds.map(map_sources_tf.augment_one, num_parallel_calls=2, deterministic=False),
     "deterministic=False"),
    (lambda ds: map_sources_tf.augment(ds.with_options(_nondeterministic())),
     "tf.data.Options deterministic=False"),
])
@pytest.mark.parametrize("continuous", [True, False])
def test_a_pipeline_that_may_reorder_records_is_refused(fn, cause, continuous):
    pipe = Pipeline(map_sources_tf.JpegRecords(16), tf_transform=fn, seed=5)
    pipe._tf.continuous = continuous
    with pytest.raises(Exception, match="tf_transform's pipeline may reorder records") as raised:
        pipe.make(0, 1, np.arange(4, 8, dtype=np.uint64))
    assert cause in str(raised.value) and "one output per record, in order" in str(raised.value)


def _nondeterministic():
    options = tf.data.Options()
    options.deterministic = False
    return options


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fn", [
    lambda ds: map_sources_tf.augment(ds).take(4),
    lambda ds: map_sources_tf.augment(ds).batch(2).unbatch(),
])
def test_a_pipeline_that_does_not_keep_a_datasets_length_never_spans_batches(fn):
    """take(4) on batches of 4, batch(2).unbatch(): one output per record in each batch, but not
    a map of a longer stream: every batch is made alone, as before the continuous pipeline."""
    pipe = Pipeline(map_sources_tf.JpegRecords(16), tf_transform=fn, seed=5)
    for g in range(3):
        pipe.make(0, g, np.arange(4 * g, 4 * g + 4, dtype=np.uint64))
    assert pipe._tf.made == {"alone": 3} and not feed_threads(pipe)


@pytest.mark.timeout(60)
def test_close_ends_a_make_waiting_on_the_pipeline_and_its_thread():
    """A make() waiting for its batch from a slow pipeline ends with an error naming the close;
    the puller thread ends; a make() after close makes its batch alone."""
    import threading
    started = threading.Event()

    def slow(ds):
        def wait(x):
            started.set()
            time.sleep(0.5)
            return x
        return map_sources_tf.augment(ds).map(
            lambda r: dict(r, id=tf.numpy_function(wait, [r["id"]], tf.int64, stateful=False)))
    pipe = Pipeline(map_sources_tf.JpegRecords(16), tf_transform=slow, seed=5)
    pipe._tf._check(pipe._tf.columns(pipe.load([0]), 0, [0]))  # no make() traced by the check
    outcome = {}

    def make():
        try:
            outcome["batch"] = pipe.make(0, 1, np.arange(4, 8, dtype=np.uint64))
        except Exception as e:  # noqa: BLE001
            outcome["error"] = e
    thread = threading.Thread(target=make)
    thread.start()
    assert started.wait(30)
    pullers = feed_threads(pipe)
    t0 = time.monotonic()
    pipe.close()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - t0 < 20
    assert "pipeline was closed" in str(outcome.get("error")), outcome
    assert len(pullers) == 1 and ended(pullers, timeout=0)
    started.clear()
    assert pipe.make(0, 1, np.arange(4, 8, dtype=np.uint64)).to_dict()["id"].tolist() == \
        [4, 5, 6, 7]
    assert pipe._tf.made == {"alone": 1}


@pytest.mark.timeout(30)
def test_a_slot_whose_puller_is_gone_ends_the_wait():
    """The guard of _Slot.wait: a batch whose feed's thread ended without setting it is made
    alone (wait returns None) instead of waiting forever."""
    from croupier.map.tf_feed import Slot as _Slot

    class Gone:
        def alive(self):
            return False
    assert _Slot().wait(Gone()) is None


@pytest.mark.timeout(60)
def test_record_seeds_are_numpys_seed_sequence_words():
    """record_seeds computes SeedSequence([seed, epoch, i, 2])'s words for many records at once
    (in C++, src/plan/seed_sequence.h); every one equals record_seed's, which asks SeedSequence
    itself, also where a value needs more than one 32-bit word; a seed past 64 bits takes the
    per-record path."""
    rng = np.random.default_rng(1)
    for seed, epoch in [(0, 0), (5, 1), (2**32 - 1, 7), (123456789, 2**32 - 1), (2**40, 3),
                        (2**64 - 1, 2**63), (2**70, 1)]:
        ids = np.concatenate([np.array([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1], np.uint64),
                              rng.integers(0, 2**32, 100, dtype=np.uint64)])
        assert int(ids[5]) == 2**64 - 1
        got = record_seeds(seed, epoch, ids)
        want = np.stack([record_seed(seed, epoch, int(i)) for i in ids])
        assert got.dtype == np.int64 and got.shape == (len(ids), 2)
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(record_seeds(5, 0, [9]), record_seed(5, 0, 9)[None])
