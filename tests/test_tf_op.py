"""The native TensorFlow dataset op (croupier.tf.dataset, src/tf_op) with real TensorFlow: eager,
tf.function, model.fit, errors as tf.errors, tf.train.Checkpoint of the iterator, and TensorFlow's
own protobuf and gRPC in one process with croupier's, imported in either order."""
import gc
import hashlib
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import croupier

tf = pytest.importorskip("tensorflow")
import croupier.tf as ctf  # noqa: E402
from tf_records import (MIXED, check_first_mixed_batch, mixed_total,  # noqa: E402
                        mixed_total_in_tf_function, write_mixed_examples)

if not ctf.op_available():
    pytest.skip("the TensorFlow op was not built", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def digest(batch):
    """A content hash of a batch as TensorFlow sees it (every feature's values)."""
    h = hashlib.sha256()
    for name in sorted(batch):
        v = batch[name]
        if isinstance(v, tf.RaggedTensor):
            h.update(v.flat_values.numpy().tobytes() + v.row_splits.numpy().tobytes())
        else:
            h.update(np.asarray(v.numpy()).tobytes() if v.dtype != tf.string
                     else b"\0".join(v.numpy().ravel().tolist()))
    return h.hexdigest()


@pytest.mark.timeout(180)
def test_op_reads_dense_ragged_and_bytes_eagerly_and_in_tf_function(tmp_path):
    path = tmp_path / "mixed.tfrecord"
    write_mixed_examples(tf, path, 40)
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("mixed", str(path), MIXED, 8, consumers=1, shuffle="none", epochs=3)
        ds = ctf.dataset(cluster.address, "mixed", 0, 1)
        assert ds.element_spec["emb"] == tf.TensorSpec([None, 3], tf.float32)
        assert ds.element_spec["name"] == tf.TensorSpec([None], tf.string)
        assert isinstance(ds.element_spec["tokens"], tf.RaggedTensorSpec)
        batches = list(ds)  # eager: epoch 0
        assert len(batches) == 5
        check_first_mixed_batch(batches[0])
        assert [i for b in batches for i in b["id"].numpy().tolist()] == list(range(40))
        # epoch 1, inside a tf.function
        assert mixed_total_in_tf_function(tf, ds) == mixed_total(40)
        assert len(list(ds)) == 5  # epoch 2
        assert list(ds) == []  # past the bounded job's last epoch
        del ds
        gc.collect()
        # A fixed epoch reads that epoch on every iteration (resume=False: from its start, not from
        # the rank's acknowledged position).
        fixed = ctf.dataset(cluster.address, "mixed", 0, 1, epoch=1, resume=False)
        assert [digest(b) for b in fixed] == [digest(b) for b in batches]  # shuffle "none"
        assert [digest(b) for b in fixed] == [digest(b) for b in batches]
        del fixed
        gc.collect()


def fit_on_regression_file(tmp_path, path):
    """model.fit on TensorFlow-written data (x, y floats), two Keras epochs = two croupier
    epochs."""
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("reg", str(path), "x:float32,y:float32", 32, consumers=1, seed=1,
                           epochs=2)
        raw = ctf.dataset(cluster.address, "reg", 0, 1)
        ds = raw.map(lambda b: (b["x"] / 1000, b["y"] / 1000))
        model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.5), loss="mse")
        history = model.fit(ds, epochs=2, verbose=0)
        assert len(history.history["loss"]) == 2
        assert history.history["loss"][1] < 0.5
        assert list(raw) == []  # the two Keras epochs read croupier epochs 0 and 1: none is left
        del ds, raw
        gc.collect()


@pytest.mark.timeout(180)
def test_op_in_fit_on_a_file_tensorflow_writes_now(tmp_path, tf_written_tfrecord):
    fit_on_regression_file(tmp_path, tf_written_tfrecord / "regression.tfrecord")


@pytest.mark.timeout(180)
def test_op_in_fit_on_the_shared_regression_file(tmp_path, shared_tfrecord):
    fit_on_regression_file(tmp_path, shared_tfrecord / "regression-train.tfrecord")


@pytest.mark.timeout(120)
def test_wrong_arguments_and_a_lost_dispatcher_raise_tf_errors_with_croupiers_message(tmp_path):
    path = tmp_path / "mixed.tfrecord"
    write_mixed_examples(tf, path, 40)
    cluster = croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster")
    try:
        cluster.create_job("mixed", str(path), MIXED, 2, consumers=1, shuffle="none", epochs=1)
        with pytest.raises(tf.errors.InvalidArgumentError, match="world"):
            ctf.dataset(cluster.address, "mixed", 0, 2, timeout=10)
        with pytest.raises(tf.errors.InvalidArgumentError, match="rank 3 is not in"):
            ctf.dataset(cluster.address, "mixed", 3, 2, timeout=10)
        with pytest.raises(tf.errors.NotFoundError, match="nosuchjob"):
            ctf.dataset(cluster.address, "nosuchjob", 0, 1, timeout=1)
        ds = ctf.dataset(cluster.address, "mixed", 0, 1, epoch=0, timeout=3, prefetch=1)
        old = iter(ds)
        assert next(old)["id"].numpy().tolist() == [0, 1]
        it = iter(ds)  # takes the rank over, from the start of epoch 0
        assert next(it)["id"].numpy().tolist() == [0, 1]
        with pytest.raises(tf.errors.FailedPreconditionError, match="newer iterator"):
            for _ in range(20):  # after what its pipeline had prefetched
                next(old)
        del old
        cluster.close()  # the dispatcher and the producer are gone
        with pytest.raises(tf.errors.OpError) as raised:
            for _ in range(20):
                next(it)
        assert not isinstance(raised.value, tf.errors.OutOfRangeError)
        assert "mixed" in str(raised.value) or "127.0.0.1" in str(raised.value), raised.value
        del it, ds, raised  # the traceback holds the iterator, which holds the rank
        gc.collect()
    finally:
        cluster.close()
    with pytest.raises((tf.errors.DeadlineExceededError, tf.errors.UnavailableError),
                       match="127.0.0.1"):
        ctf.dataset(cluster.address, "mixed", 0, 1, timeout=2)


_RESTORE = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import croupier.tf as ctf
    sys.path.insert(0, sys.argv[1])
    from test_tf_op import digest
    address, ckpt = sys.argv[2], sys.argv[3]
    ds = ctf.dataset(address, "ck", 0, 1, resume=False)
    it = iter(ds)
    tf.train.Checkpoint(iterator=it).restore(ckpt).assert_consumed()
    rest = [digest(b) for b in it]
    nxt = [digest(b) for b in ds]  # the next iteration: the next epoch
    print(json.dumps({"rest": rest, "next": nxt}))
""")


@pytest.mark.long
@pytest.mark.timeout(180)
def test_checkpointed_iterator_resumes_the_data_exactly_in_a_new_process(tmp_path):
    path = tmp_path / "mixed.tfrecord"
    write_mixed_examples(tf, path, 80)
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("ck", str(path), MIXED, 8, consumers=1, seed=7, epochs=2)
        ref = ctf.dataset(cluster.address, "ck", 0, 1, resume=False)
        want = [[digest(b) for b in ref] for _ in range(2)]  # epochs 0 and 1, fault-free
        assert len(want[0]) == 10 and want[0] != want[1]
        del ref
        gc.collect()

        ds = ctf.dataset(cluster.address, "ck", 0, 1, resume=False)
        it = iter(ds)
        seen = [digest(next(it)) for _ in range(4)]
        saved = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "ckpt" / "it"))
        seen += [digest(next(it)) for _ in range(3)]  # read past the checkpoint, then "crash"
        assert seen == want[0][:7]
        del it, ds
        gc.collect()

        script = tmp_path / "restore.py"
        script.write_text(_RESTORE)
        proc = subprocess.run([sys.executable, str(script), str(ROOT / "tests"), cluster.address,
                               saved], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
        assert got["rest"] == want[0][4:]
        assert got["next"] == want[1]


@pytest.mark.timeout(120)
def test_a_start_position_begins_the_first_iteration_there(tmp_path):
    """start=(epoch, step), as from a trainer's own checkpoint: the first iteration reads that
    epoch from that step, the next iteration the epoch after it."""
    path = tmp_path / "mixed.tfrecord"
    write_mixed_examples(tf, path, 80)
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("st", str(path), MIXED, 8, consumers=1, seed=7, epochs=3)
        ref = ctf.dataset(cluster.address, "st", 0, 1, resume=False)
        want = [[digest(b) for b in ref] for _ in range(3)]
        del ref
        gc.collect()
        ds = ctf.dataset(cluster.address, "st", 0, 1, start=(1, 3))
        assert [digest(b) for b in ds] == want[1][3:]
        assert [digest(b) for b in ds] == want[2]
        del ds
        gc.collect()
        with pytest.raises(tf.errors.InvalidArgumentError, match="start"):
            ctf.dataset(cluster.address, "st", 0, 1, start=(1, -2))


_ORDER = textwrap.dedent("""
    import sys
    if sys.argv[1] == "tensorflow-first":
        import tensorflow as tf
        import croupier
    else:
        import croupier
        import tensorflow as tf
    import croupier.tf as ctf
    path, work = sys.argv[2], sys.argv[3]
    # TensorFlow's protobuf (Python and C++) at work before croupier's gRPC and protobuf run.
    with tf.io.TFRecordWriter(path) as w:
        for i in range(30):
            f = {"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
    with croupier.local_cluster(producers=1, work_dir=work) as cluster:
        cluster.create_job("o", path, "id:int64", 5, consumers=1, shuffle="none", epochs=2)
        assert [j["name"] for j in croupier.status(cluster.address)["job_summaries"]] == ["o"]
        ds = ctf.dataset(cluster.address, "o", 0, 1)
        ids = [i for b in ds for i in b["id"].numpy().tolist()]
        assert ids == list(range(30)), ids
        del ds
        with cluster.consumer("o", 0, 1) as feed:
            gen = [i for b in ctf.generator_dataset(feed, 1) for i in b["id"].numpy().tolist()]
        assert gen == list(range(30)), gen
    print("order ok")
""")


@pytest.mark.long
@pytest.mark.timeout(180)
@pytest.mark.parametrize("order", ["tensorflow-first", "croupier-first"])
def test_tensorflow_and_croupier_protobuf_and_grpc_in_one_process(tmp_path, order):
    """TensorFlow exports its own protobuf from libraries loaded RTLD_GLOBAL; croupier's module
    binds its own first (RTLD_DEEPBIND, croupier/__init__.py). Without that, importing
    tensorflow first crashed the first gRPC call of croupier with SIGSEGV."""
    script = tmp_path / "order.py"
    script.write_text(_ORDER)
    proc = subprocess.run([sys.executable, str(script), order, str(tmp_path / "o.tfrecord"),
                           str(tmp_path / "cluster")], capture_output=True, text=True,
                          timeout=150)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    assert "order ok" in proc.stdout
