"""croupier.Batch in Python: bytes columns as one values buffer plus offsets (BytesColumn, no Python
object per string), against the list-of-bytes form, in a batch made here and in batches received
from the in-process cluster (croupier.testing). Each test bounds its time (pytest-timeout)."""

import numpy as np
import pytest

import croupier
from croupier import errors
from croupier.columns import make_batch
from croupier.testing import in_process_cluster
from service_cluster import run

STRINGS = [b"ab", b"", b"cde", bytes(range(256)), b"\x00"]


def inside(batch, array):
    """The array's memory lies inside the batch buffer: a view, not a copy."""
    start = batch.buffer_address
    return start <= array.ctypes.data and array.ctypes.data + array.nbytes <= start + batch.nbytes


@pytest.mark.timeout(30)
def test_a_bytes_column_is_a_view_of_values_and_offsets():
    batch = make_batch({"s": list(STRINGS), "id": np.arange(len(STRINGS))})
    col = batch.to_dict(bytes_as="buffer")["s"]
    assert isinstance(col, croupier.BytesColumn)
    assert col.values.dtype == np.uint8 and col.values.ndim == 1
    assert col.offsets.dtype == np.int64 and col.offsets.tolist() == [0, 2, 2, 5, 261, 262]
    assert col.values.tobytes() == b"".join(STRINGS)
    assert inside(batch, col.values) and inside(batch, col.offsets)
    assert not col.values.flags.owndata and not col.offsets.flags.owndata
    # The sequence protocol of the list form: len, indexing (also from the end), iteration.
    assert len(col) == len(STRINGS) and col.nbytes == 262
    assert [col[i] for i in range(len(col))] == STRINGS
    assert col[-1] == b"\x00" and col[-5] == b"ab"
    assert list(col) == col.tolist() == STRINGS == batch.to_dict()["s"]
    assert batch.to_dict(bytes_as="list")["s"] == STRINGS
    for i in (len(STRINGS), -len(STRINGS) - 1):
        with pytest.raises(IndexError, match="5 strings"):
            col[i]
    assert repr(col) == "BytesColumn(5 strings, 262 bytes)"


@pytest.mark.timeout(30)
def test_the_column_keeps_the_batch_buffer_alive():
    batch = make_batch({"s": list(STRINGS)})
    col = batch.to_dict("buffer")["s"]
    values, offsets = col.values, col.offsets
    # del frees both at once (reference counts: neither is in a cycle). No gc.collect(): in a
    # pytest process where TensorFlow ran before, a collection runs TensorFlow's finalizers, and
    # one (AtomicFunction.__del__) has held it past this test's 30 s bound.
    del batch, col
    make_batch({"s": [b"x" * 262] * 5}).to_dict()  # reuses freed memory, if any was freed
    assert values.tobytes() == b"".join(STRINGS)
    assert [values[offsets[i]:offsets[i + 1]].tobytes() for i in range(5)] == STRINGS


@pytest.mark.timeout(30)
def test_variable_length_and_empty_bytes_columns():
    splits = np.array([0, 2, 2, 3], dtype=np.uint64)
    batch = make_batch({"v": ([b"x", b"yz", b"w"], splits), "e": [b"", b"", b""]})
    d = batch.to_dict("buffer")
    col, got_splits = d["v"]
    assert col.tolist() == [b"x", b"yz", b"w"] and got_splits.tolist() == [0, 2, 2, 3]
    assert d["e"].tolist() == [b"", b"", b""] and d["e"].nbytes == 0
    assert d["e"].values.size == 0 and d["e"].offsets.tolist() == [0, 0, 0, 0]
    assert batch.to_dict()["v"][0] == [b"x", b"yz", b"w"]


@pytest.mark.timeout(30)
def test_decoded_examples_give_the_same_strings_either_way(shared_tfrecord):
    record = next(iter(croupier.TFRecordReader(str(shared_tfrecord / "detection-test.tfrecord"))))
    spec = "image/encoded:bytes,image/format:bytes,image/object/class/text:bytes[*],image/width:int64"
    batch = croupier.build_batch([record, record], spec)
    as_list, as_buffer = batch.to_dict(), batch.to_dict("buffer")
    example = croupier.parse_example(record)
    jpeg = example["image/encoded"][0]
    assert len(jpeg) > 100_000 and as_list["image/encoded"] == [jpeg, jpeg]
    assert as_buffer["image/encoded"].tolist() == [jpeg, jpeg]
    assert inside(batch, as_buffer["image/encoded"].values)
    assert as_buffer["image/format"].tolist() == [b"jpg", b"jpg"]
    text, splits = as_buffer["image/object/class/text"]
    assert text.tolist() == [b"waldo", b"waldo"] and splits.tolist() == [0, 1, 2]
    assert as_buffer["image/width"].tolist() == as_list["image/width"].tolist() == [1590, 1590]


@pytest.mark.timeout(60)
def test_decoded_tf_written_examples_give_the_same_strings_either_way(tf_written_tfrecord):
    # The same on records that TensorFlow writes at test time (runs without ../shared too).
    records = list(croupier.TFRecordReader(str(tf_written_tfrecord / "detection.tfrecord")))
    spec = "image/encoded:bytes,image/format:bytes,image/object/class/text:bytes[*],image/width:int64"
    batch = croupier.build_batch(records, spec)
    as_list, as_buffer = batch.to_dict(), batch.to_dict("buffer")
    jpeg = (tf_written_tfrecord / "detection.jpg").read_bytes()
    assert as_list["image/encoded"] == [jpeg, jpeg]
    assert as_buffer["image/encoded"].tolist() == [jpeg, jpeg]
    assert inside(batch, as_buffer["image/encoded"].values)
    assert as_buffer["image/format"].tolist() == [b"jpeg", b"jpeg"]
    text, splits = as_buffer["image/object/class/text"]
    assert text.tolist() == [b"a", b"", b"ccc"] and splits.tolist() == [0, 3, 3]
    assert inside(batch, text.values)
    assert as_list["image/object/class/text"][0] == [b"a", b"", b"ccc"]
    assert as_buffer["image/width"].tolist() == as_list["image/width"].tolist() == [512, 512]


@pytest.mark.timeout(30)
def test_a_bytes_column_serves_again_unchanged_and_bad_modes_are_refused():
    batch = make_batch({"s": list(STRINGS), "id": np.arange(5)})
    again = make_batch(batch.to_dict("buffer"))  # what croupier.serve does with a batch
    assert again.content_hash == batch.content_hash
    with pytest.raises(errors.InvalidArgumentError, match="'list' or 'buffer'"):
        batch.to_dict("bytes")
    with pytest.raises(errors.InvalidArgumentError, match="records"):
        make_batch({"s": batch.to_dict("buffer")["s"], "id": np.arange(4)})


@pytest.mark.timeout(90)
def test_consumer_epochs_give_bytes_as_buffers_equal_to_the_lists(tmp_path):
    data = tmp_path / "data"
    run("synth", "--out", data, "--files", 2, "--records", 600, "--image-bytes", 96, "--quiet")
    with in_process_cluster(producers=1, threads=1) as cl:
        # Two jobs of the same spec deal the same batches (G3): one read with buffers, then one
        # with lists (created once the first is read: an unread job would hold task slots).
        def job(name):
            cl.create_job(name, str(data / "*.tfrecord"), "id:int64,image:bytes", 25,
                          consumers=1, seed=3, epochs=1)
            return cl.consumer(name, 0, 1)

        feed = job("buffers")
        try:
            buffers = []
            for b in feed.batches(0):  # the Batch, to check the view is of its buffer
                d = b.to_dict("buffer")
                assert inside(b, d["image"].values) and inside(b, d["id"])
                buffers.append(d)
        finally:
            feed.close()
        feed = job("lists")
        try:
            lists = list(feed.epoch(0))
            with pytest.raises(errors.InvalidArgumentError, match="'list' or 'buffer'"):
                next(feed.epoch(0, bytes_as="bytes"))
        finally:
            feed.close()
        # Several ranks in one process: a tuple of dicts per step, bytes as buffers too.
        cl.create_job("two", str(data / "*.tfrecord"), "id:int64,image:bytes", 25, consumers=2,
                      seed=3, epochs=1)
        with croupier.Consumer(cl.address, "two", ranks=[0, 1], world=2) as both:
            steps = list(both.epoch(0, bytes_as="buffer"))
        assert len(steps) == 12
        two_ids = set()
        for d0, d1 in steps:
            for d in (d0, d1):
                assert isinstance(d["image"], croupier.BytesColumn) and len(d["image"]) == 25
                two_ids.update(d["id"].tolist())
        assert two_ids == set(range(600))
    assert len(buffers) == 24
    assert len(lists) == 24
    ids = set()
    for buf, lst in zip(buffers, lists):
        assert buf["id"].tolist() == lst["id"].tolist()
        assert buf["image"].tolist() == lst["image"]
        assert all(len(s) == 96 for s in lst["image"])
        assert buf["image"].offsets.tolist() == list(range(0, 96 * 26, 96))
        ids.update(lst["id"].tolist())
    assert ids == set(range(600))


@pytest.mark.timeout(30)
def test_views_are_read_only_and_torch_tensors_are_writable_copies():
    # A batch's bytes are const (over shared memory a read-only mapping, where a write through a
    # writable view would kill the process): numpy refuses writes with a clear error.
    batch = make_batch({"s": list(STRINGS), "id": np.arange(len(STRINGS)),
                        "x": np.ones((len(STRINGS), 3), dtype=np.float32)})
    d = batch.to_dict("buffer")
    for array in (d["id"], d["x"], d["s"].values, d["s"].offsets):
        assert not array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 7
    torch = pytest.importorskip("torch")
    from croupier.torch import to_tensors
    tensors = to_tensors(batch.to_dict())
    tensors["id"] += 100  # in place, as training code does
    tensors["x"].mul_(2)
    assert tensors["id"].tolist() == [100, 101, 102, 103, 104]
    assert isinstance(tensors["x"], torch.Tensor) and float(tensors["x"].sum()) == 30.0
    again = batch.to_dict()
    assert again["id"].tolist() == [0, 1, 2, 3, 4] and float(again["x"].sum()) == 15.0


@pytest.mark.timeout(60)
def test_close_from_another_thread_wakes_a_blocked_iteration(tmp_path):
    # Close may come from any thread (the C++ contract): a next() waiting for a batch that no
    # producer will make ends at once with CancelledError, and nothing is used after it is freed.
    import threading
    import time
    data = tmp_path / "data"
    run("synth", "--out", data, "--files", 1, "--records", 100, "--quiet")
    with in_process_cluster(producers=0) as cl:
        cl.create_job("j", str(data / "*.tfrecord"), "id:int64", 10, consumers=1, epochs=1)
        feed = cl.consumer("j", 0, 1, timeout=50)
        it = feed.epoch(0)
        outcome = {}

        def read():
            try:
                next(it)
                outcome["got"] = "a batch"
            except Exception as e:  # noqa: BLE001 - the test looks at which
                outcome["got"] = e

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(1.0)
        assert reader.is_alive(), outcome
        start = time.monotonic()
        feed.close()
        reader.join(10)
        took = time.monotonic() - start
    assert not reader.is_alive()
    assert isinstance(outcome["got"], errors.CancelledError), outcome
    assert took < 5, f"close took {took:.1f} s to wake the reader"


def test_a_dense_tensorflow_tensor_is_viewed_and_a_ragged_one_converted_as_before():
    """tensor_to_numpy views a dense eager tensor's buffer (numpy() would copy it first, and the
    batch copies it anyway); a RaggedTensor still goes through its numpy() (rows as arrays)."""
    tf = pytest.importorskip("tensorflow")
    from croupier.columns import tensor_to_numpy
    dense = tf.constant([[1.5, 2.0], [3.0, 4.0]])
    array = tensor_to_numpy(dense, "x")
    assert not array.flags["OWNDATA"] and array.dtype == np.float32
    np.testing.assert_array_equal(array, dense.numpy())
    rows = tensor_to_numpy(tf.ragged.constant([[1, 2], [3]]), "r")
    assert [list(r) for r in rows] == [[1, 2], [3]]
    assert list(tensor_to_numpy(tf.constant([b"ab", b"c"]), "s")) == [b"ab", b"c"]
