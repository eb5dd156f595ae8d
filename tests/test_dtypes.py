"""Every dtype end to end, without widening: croupier.serve() carries bool, int8/16/32/64,
uint8/16/32/64, float16, bfloat16, float32, float64 and bytes, in fixed shapes and as
variable-length lists of each, through a local cluster to every consumer as themselves; the torch
and TensorFlow adapters and the TensorFlow op give each its framework's dtype and the same bytes.
A TFRecord job, whose records are tf.train.Examples, refuses the dtypes an Example cannot hold."""
import subprocess
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import croupier
from croupier import errors
from croupier.columns import features_of, make_batch

NUMERIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "bfloat16", "float32", "float64"]
ROWS = 4
LENGTHS = [1, 0, 3, 2]  # values per record of the variable-length features


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def sample(name, n, seed):
    """n values of dtype `name`, different for each seed; integers include their extremes."""
    rng = np.random.default_rng(seed)
    dtype = np_dtype(name)
    if name == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        v[:2] = [info.min, info.max][:n]
        return v
    v = (rng.standard_normal(n) * 1000).astype(dtype)
    v[:2] = np.array([-0.0, np.inf][:n]).astype(dtype)
    return v


def batch_of(g):
    """Source batch g: every numeric dtype as a [ROWS, 2] array ("<dtype>") and as a
    variable-length list ("<dtype>_list": (values, row_splits)), bytes both ways, and g."""
    splits = np.concatenate([[0], np.cumsum(LENGTHS)]).astype(np.uint64)
    batch = {"g": np.full(ROWS, g, np.int64)}
    for k, name in enumerate(NUMERIC):
        batch[name] = sample(name, ROWS * 2, 100 * g + k).reshape(ROWS, 2)
        batch[name + "_list"] = (sample(name, int(splits[-1]), 100 * g + k + 50), splits)
    batch["bytes"] = [b"r%d-%d" % (g, r) for r in range(ROWS)]
    batch["bytes_list"] = ([b"t%d" % i for i in range(int(splits[-1]))], splits)
    return batch


def check_same(got, want):
    """A received batch {name: array, or (values, row_splits)} holds exactly `want`'s dtypes and
    bytes."""
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        g = got[name]
        if isinstance(w, tuple):
            (g, g_splits), (w, w_splits) = g, w
            assert g_splits.dtype == np.uint64 and g_splits.tolist() == w_splits.tolist(), name
        if isinstance(w, list):
            assert list(g) == w, name
            continue
        assert g.dtype == w.dtype, f"{name}: {g.dtype}, sent {w.dtype}"
        assert g.shape == w.shape, name
        assert g.tobytes() == w.tobytes(), name


def run_serve(source, address, job, consumers, batches):
    """croupier.serve(source) in a thread; returns (thread, result dict)."""
    result = {}

    def run():
        try:
            result["n"] = croupier.serve(source, address, job, consumers=consumers, epochs=1,
                                         batches_per_epoch=batches, timeout=30)
        except BaseException as e:  # handed to the test
            result["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def wait_for_job(make):
    """make(), again until serve() has created the job (croupier's or TensorFlow's NotFound)."""
    not_found = (errors.NotFoundError,)
    try:
        import tensorflow as tf
        not_found += (tf.errors.NotFoundError,)
    except ImportError:
        pass
    deadline = time.monotonic() + 30
    while True:
        try:
            return make()
        except not_found:
            assert time.monotonic() < deadline, "serve() did not create the job"
            time.sleep(0.05)


def finish(thread, result, batches):
    thread.join(30)
    assert not thread.is_alive(), "serve() did not return"
    if "error" in result:
        raise result["error"]
    assert result["n"] == batches


@pytest.fixture
def cluster(tmp_path):
    with croupier.local_cluster(producers=0, work_dir=tmp_path / "cluster") as c:
        yield c


def test_a_batch_keeps_every_dtype_and_its_bytes():
    want = batch_of(3)
    batch = make_batch(want)
    check_same(batch.to_dict(), want)
    spec = features_of(want)
    for name in NUMERIC:
        assert f"{name}:{name}[2]" in spec and f"{name}_list:{name}[*]" in spec
    assert croupier._croupier.parse_feature_spec("x:bfloat16[8]") == [("x", "bfloat16", [8])]
    # What a consumer sends on (to_dict(bytes_as="buffer")) makes the same bytes again.
    assert make_batch(batch.to_dict("buffer")).content_hash == batch.content_hash


def test_a_uint8_image_batch_costs_uint8_bytes():
    images = np.arange(16 * 32 * 32 * 3, dtype=np.uint32).astype(np.uint8).reshape(16, 32, 32, 3)
    batch = make_batch({"img": images})
    # 32 header + 88 descriptor + "img" padded to 8 + 4 dims of 8 = 160; values from 192.
    assert batch.nbytes == 192 + images.nbytes
    assert batch.to_dict()["img"].dtype == np.uint8
    widened = make_batch({"img": images.astype(np.int64)})
    assert widened.nbytes == 192 + 8 * images.nbytes


def test_what_no_dtype_carries_is_refused_naming_the_feature():
    with pytest.raises(errors.InvalidArgumentError, match="feature 'z' has dtype complex128"):
        make_batch({"z": np.zeros(2, np.complex128)})
    with pytest.raises(errors.InvalidArgumentError, match="bool value 1 is 2"):
        make_batch({"b": np.array([0, 2], np.uint8).view(bool)})
    # Big-endian arrays travel as the same numbers, little-endian.
    got = make_batch({"x": np.array([1, -2], ">i4")}).to_dict()["x"]
    assert got.dtype == np.int32 and got.tolist() == [1, -2]


@pytest.mark.timeout(90)
def test_serve_deals_every_dtype_to_each_consumer_as_itself(cluster):
    thread, result = run_serve(lambda epoch: (batch_of(g) for g in range(4)), cluster.address,
                               "every", consumers=2, batches=4)
    feeds = wait_for_job(lambda: [cluster.consumer("every", r, 2, timeout=30) for r in range(2)])
    assert feeds[0].job["features"] == features_of(batch_of(0))
    received = 0
    for step, pair in enumerate(zip(*(f.batches(0) for f in feeds))):
        for rank, batch in enumerate(pair):
            g = step * 2 + rank
            want = batch_of(g)
            check_same(batch.to_dict(), want)
            # The bytes on the wire are those a local make_batch lays out: nothing was widened.
            assert batch.content_hash == make_batch(want).content_hash
            assert batch.nbytes == make_batch(want).nbytes
            received += 1
    assert received == 4
    for f in feeds:
        f.close()
    finish(thread, result, 4)


@pytest.mark.timeout(90)
def test_a_served_uint8_image_batch_arrives_in_uint8_bytes(cluster):
    images = np.random.default_rng(1).integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)
    thread, result = run_serve([{"img": images}], cluster.address, "img", consumers=1, batches=1)
    feed = wait_for_job(lambda: cluster.consumer("img", 0, 1, timeout=30))
    assert feed.job["features"] == "img:uint8[32,32,3]"
    (batch,) = list(feed.batches(0))
    assert batch.nbytes == 192 + images.nbytes  # one byte a pixel, as sent
    got = batch.to_dict()["img"]
    assert got.dtype == np.uint8 and np.array_equal(got, images)
    feed.close()
    finish(thread, result, 1)


TORCH_DTYPES = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32",
                "int64": "int64", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
                "uint64": "uint64", "float16": "float16", "bfloat16": "bfloat16",
                "float32": "float32", "float64": "float64"}


@pytest.mark.timeout(120)
def test_torch_tensors_are_served_and_received_in_their_own_dtypes(cluster):
    torch = pytest.importorskip("torch")
    import croupier.torch as ctorch

    def to_torch(array):
        if array.dtype == np.dtype(ml_dtypes.bfloat16):
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(array))

    def torch_batch(g):  # the source yields torch tensors, bfloat16 included
        out = {}
        for name, v in batch_of(g).items():
            if isinstance(v, tuple):
                out[name] = (v[0] if isinstance(v[0], list) else to_torch(v[0]), v[1])
            else:
                out[name] = v if isinstance(v, list) else to_torch(v)
        return out

    thread, result = run_serve(lambda epoch: (torch_batch(g) for g in range(2)), cluster.address,
                               "torch", consumers=1, batches=2)
    data = ctorch.CroupierIterableDataset(cluster.address, "torch", 0, 1, timeout=30)
    try:
        wait_for_job(lambda: data.consumer)  # connects once serve() has created the job
        batches = list(data)
    finally:
        data.close()
    assert len(batches) == 2
    for g, got in enumerate(batches):
        want = batch_of(g)
        for name in NUMERIC:
            for key in (name, name + "_list"):
                t = got[key][0] if key.endswith("_list") else got[key]
                w = want[key][0] if key.endswith("_list") else want[key]
                assert t.dtype == getattr(torch, TORCH_DTYPES[name]), key
                assert tuple(t.shape) == w.shape, key
                assert t.view(torch.uint8).numpy().tobytes() == w.tobytes(), key
        assert got["bytes"] == want["bytes"]
        assert got["bytes_list"][0] == want["bytes_list"][0]
        t = got["float32"]
        t += 1  # writable: the adapter's tensors are copies of the read-only batch
    finish(thread, result, 2)


def tf_bytes(tf, tensor):
    """The bytes of a tf tensor's values (bitcast keeps bfloat16 and bool bits as they are)."""
    if tensor.dtype == tf.bool:
        tensor = tf.cast(tensor, tf.uint8)
    return tensor.numpy().tobytes()


@pytest.mark.timeout(120)
def test_tf_tensors_are_served_and_the_tf_adapters_give_each_dtype_its_tf_dtype(cluster):
    tf = pytest.importorskip("tensorflow")
    import croupier.tf as ctf

    def tf_batch(g):  # the source yields tf tensors
        out = {}
        for name, v in batch_of(g).items():
            if isinstance(v, tuple):
                out[name] = (v[0] if isinstance(v[0], list) else tf.constant(v[0]), v[1])
            else:
                out[name] = v if isinstance(v, list) else tf.constant(v)
        return out

    thread, result = run_serve(lambda epoch: (tf_batch(g) for g in range(2)), cluster.address,
                               "tf", consumers=1, batches=2)
    feed = wait_for_job(lambda: cluster.consumer("tf", 0, 1, timeout=30))
    signature = ctf.output_signature(feed.job["features"])
    for name in NUMERIC:
        assert signature[name] == tf.TensorSpec([None, 2], tf.as_dtype(name)), name
        assert signature[name + "_list"].dtype == tf.as_dtype(name)
    assert tf.as_dtype("bfloat16") == tf.bfloat16 and tf.as_dtype("float16") == tf.float16

    def check(batches):
        assert len(batches) == 2
        for g, got in enumerate(batches):
            want = batch_of(g)
            for name in NUMERIC:
                assert got[name].dtype == tf.as_dtype(name), name
                assert tf_bytes(tf, got[name]) == want[name].tobytes(), name
                ragged = got[name + "_list"]
                assert ragged.dtype == tf.as_dtype(name), name
                assert tf_bytes(tf, ragged.flat_values) == want[name + "_list"][0].tobytes()
                assert ragged.row_lengths().numpy().tolist() == LENGTHS
            assert got["bytes"].numpy().tolist() == want["bytes"]
            assert got["bytes_list"].flat_values.numpy().tolist() == want["bytes_list"][0]

    try:
        check(list(ctf.generator_dataset(feed, 0)))
    finally:
        feed.close()
    finish(thread, result, 2)
    # The native op, on a second job of the same batches.
    if not ctf.op_available():
        pytest.skip("the TensorFlow op was not built")
    thread, result = run_serve(lambda epoch: (batch_of(g) for g in range(2)), cluster.address,
                               "tf_op", consumers=1, batches=2)
    ds = wait_for_job(lambda: ctf.dataset(cluster.address, "tf_op", 0, 1, timeout=30))
    for name in NUMERIC:
        assert ds.element_spec[name] == tf.TensorSpec([None, 2], tf.as_dtype(name)), name
    check(list(ds))
    del ds
    finish(thread, result, 2)


@pytest.mark.timeout(60)
def test_a_tfrecord_job_refuses_dtypes_an_example_cannot_hold(cluster, tmp_path):
    subprocess.run([croupier.croupier_binary(), "synth", "--out", str(tmp_path / "data"),
                    "--files", "1", "--records", "20", "--image-bytes", "16", "--quiet"],
                   check=True, timeout=60)
    files = str(tmp_path / "data" / "*.tfrecord")
    with pytest.raises(errors.InvalidArgumentError,
                       match="feature 'label' is int32; a tf.train.Example holds bytes, float32 "
                             "and int64 only"):
        cluster.create_job("narrow", files, "id:int64,label:int32,image:bytes", 4, consumers=1)
    # The same, as held.
    cluster.create_job("ok", files, "id:int64,label:int64,image:bytes", 4, consumers=1)
    records = list(croupier.TFRecordReader(str(next((tmp_path / "data").glob("*.tfrecord")))))
    with pytest.raises(errors.InvalidArgumentError, match="feature 'image' is uint8"):
        croupier.decode_batch(records[:2], "image:uint8[*]")
