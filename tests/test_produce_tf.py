"""croupier.produce(tf_transform=...): a tf.data pipeline (decode JPEG, stateless random crop and
flip, normalise) as a map job's transform, with every guarantee of a map job, checked over real
processes: producers started as `python -m croupier produce map_sources_tf:pipeline`
(tests/map_sources_tf.py), consumers and dispatcher from tests/service_cluster.py, through the
helpers of tests/test_produce.py."""
import pathlib
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import croupier  # noqa: E402
from croupier import errors  # noqa: E402
from croupier.pipeline import Pipeline  # noqa: E402
from croupier.tf_pipeline import record_seed  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import map_sources_tf  # noqa: E402
from service_cluster import Cluster  # noqa: E402
from test_produce import (check_against_plan, check_resume, error_of_rank_1,  # noqa: E402
                          run_job, start_producer, wait_for_job)

PIPELINE = "map_sources_tf:pipeline"


def run_tf_job(work_dir, **opts):
    """run_job with the tf.data pipeline: no worker processes (tf_transform refuses them)."""
    return run_job(work_dir, workers=0, pipeline=PIPELINE, **opts)


def hashes(per_rank):
    """Each rank's batch hashes, in its order, as numbers."""
    return [[int(b["hash"], 16) for b in r] for r in per_rank]


def expected_hashes(per_rank, records, batch_size, seed):
    """What each batch the consumers got must hash to: the batch made here, in this process, by
    the same pipeline from (seed, epoch, batch, the plan's record ids)."""
    pipe = Pipeline(map_sources_tf.JpegRecords(records), tf_transform=map_sources_tf.augment,
                    seed=seed)
    world = len(per_rank)
    out = []
    for rank, batches in enumerate(per_rank):
        mine = []
        for b in batches:
            plan = croupier.EpochPlan(records, batch_size, world, seed=seed, epoch=b["epoch"])
            g = plan.global_batch(rank, b["step"])
            mine.append(pipe.make(b["epoch"], g, plan.batch(g)).content_hash)
        out.append(mine)
    return out


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
    assert hashes(per_rank) == expected_hashes(per_rank, 96, 4, seed=5)


@pytest.mark.timeout(240)
def test_two_producers_make_the_bytes_the_pipeline_makes_here(tmp_path):
    """Two producer processes, each its own TensorFlow: every batch has the bytes this process's
    pipeline makes of the plan's records (one producer: the test above)."""
    two = run_tf_job(tmp_path / "two", producers=2, records=96, batch_size=4)
    assert len(two[0]) == 2 * 12
    assert hashes(two) == expected_hashes(two, 96, 4, seed=5)


@pytest.mark.timeout(240)
def test_a_producer_killed_mid_epoch_changes_no_byte(tmp_path):
    """The producer SIGKILLed mid-epoch, a new one started: the batches it had not served are made
    again, with the bytes this process's pipeline makes of the plan's records."""
    killed = run_tf_job(tmp_path / "killed", records=96, batch_size=4, kill_after=5)
    check_against_plan(killed, 96, 4, seed=5, epochs=2)
    assert hashes(killed) == expected_hashes(killed, 96, 4, seed=5)


@pytest.mark.timeout(240)
def test_a_checkpoint_resumes_exactly_and_with_another_world_size(tmp_path):
    check_resume(tmp_path, pipeline=PIPELINE, workers=0)


@pytest.mark.timeout(150)
def test_a_corrupt_jpeg_reaches_the_trainer_that_needs_it(tmp_path):
    with Cluster(tmp_path / "c") as cluster:
        # Record 30 is no JPEG; batch 0 (records 0-3, shuffle none) is fine.
        start_producer(cluster, "m", "producer0", pipeline=PIPELINE, workers=0, records=48,
                       corrupt_at=30, shuffle="none", consumers=2, epochs=1, batch_size=4)
        wait_for_job(cluster, "m", timeout=60)
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
