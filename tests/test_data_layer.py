"""The data layer through the Python module: TFRecord files, Example parsing, record indexes."""
import math

import numpy as np
import pytest

import croupier
from croupier import errors
from tf_records import TF_WRITTEN_COUNTS, regression_row


def read_all(path):
    return list(croupier.TFRecordReader(str(path)))


def test_shared_files_have_the_counts_and_features_of_their_readme(shared_tfrecord):
    expected = {
        "titanic-train.tfrecord": (891, {"cabin_id", "cabin_type", "embarked", "gender", "label",
                                         "parch", "pass_id", "pclass", "sibsp", "ticket", "fare"}),
        "titanic-test.tfrecord": (418, {"cabin_id", "cabin_type", "embarked", "gender", "parch",
                                        "pass_id", "pclass", "sibsp", "ticket", "fare"}),
        "regression-train.tfrecord": (804, {"x", "y"}),
        "regression-eval.tfrecord": (99, {"x", "y"}),
        "detection-test.tfrecord": (1, {
            "image/encoded", "image/filename", "image/format", "image/source_id",
            "image/object/class/text", "image/width", "image/height", "image/object/class/label",
            "image/object/bbox/xmin", "image/object/bbox/xmax", "image/object/bbox/ymin",
            "image/object/bbox/ymax"}),
    }
    for name, (count, features) in expected.items():
        records = read_all(shared_tfrecord / name)
        assert len(records) == count, name
        for record in records:
            assert set(croupier.parse_example(record)) == features, name


def test_titanic_values_make_sense(shared_tfrecord):
    rows = [croupier.parse_example(r) for r in read_all(shared_tfrecord / "titanic-train.tfrecord")]
    labels = [int(r["label"][0]) for r in rows]
    assert set(labels) == {0, 1}
    assert 0.3 < sum(labels) / len(labels) < 0.45  # about 38% of the passengers survived
    assert {int(r["pclass"][0]) for r in rows} <= {0, 1, 2, 3}
    assert all(r["fare"].dtype == np.float32 and r["fare"][0] >= 0 for r in rows)
    assert sorted(int(r["pass_id"][0]) for r in rows) == list(range(rows[0]["pass_id"][0],
                                                                    rows[0]["pass_id"][0] + 891))


def test_regression_values_are_finite_floats(shared_tfrecord):
    for r in read_all(shared_tfrecord / "regression-train.tfrecord"):
        ex = croupier.parse_example(r)
        assert ex["x"].shape == (1,) and ex["y"].shape == (1,)
        assert math.isfinite(ex["x"][0]) and math.isfinite(ex["y"][0])


def test_detection_record_holds_the_jpeg(shared_tfrecord):
    (record,) = read_all(shared_tfrecord / "detection-test.tfrecord")
    ex = croupier.parse_example(record)
    (jpeg,) = ex["image/encoded"]
    assert len(jpeg) == 708684
    assert jpeg[:3] == b"\xff\xd8\xff" and jpeg[-2:] == b"\xff\xd9"
    assert ex["image/format"] == [b"jpeg"] or ex["image/format"] == [b"jpg"]
    assert ex["image/width"][0] > 0 and ex["image/height"][0] > 0
    for edge in ("xmin", "xmax", "ymin", "ymax"):
        values = ex[f"image/object/bbox/{edge}"]
        assert values.dtype == np.float32 and np.all((values >= 0) & (values <= 1))
    assert len(ex["image/object/class/label"]) == len(ex["image/object/bbox/xmin"])


# The same ground on files that TensorFlow writes at test time (tests/tf_records.py), whose every
# value is known: these run on a plain clone too.
def test_tf_written_files_have_their_counts_and_features(tf_written_tfrecord):
    features = {"mixed.tfrecord": {"id", "tokens", "emb", "name"},
                "regression.tfrecord": {"x", "y"},
                "detection.tfrecord": {
                    "image/encoded", "image/format", "image/width", "image/height",
                    "image/object/bbox/xmin", "image/object/bbox/ymin",
                    "image/object/class/label", "image/object/class/text"}}
    assert set(features) == set(TF_WRITTEN_COUNTS)
    for name, count in TF_WRITTEN_COUNTS.items():
        records = read_all(tf_written_tfrecord / name)
        assert len(records) == count, name
        for record in records:
            assert set(croupier.parse_example(record)) == features[name], name


def test_tf_written_mixed_values_are_what_tensorflow_wrote(tf_written_tfrecord):
    rows = [croupier.parse_example(r) for r in read_all(tf_written_tfrecord / "mixed.tfrecord")]
    for i, r in enumerate(rows):
        assert r["id"].dtype == np.int64 and r["id"].tolist() == [i]
        assert r["tokens"].tolist() == list(range(i % 4))  # empty for every fourth record
        assert r["emb"].dtype == np.float32 and r["emb"].tolist() == [i, i / 2, -i]
        assert r["name"] == [b"r%d" % i]


def test_tf_written_regression_values_are_the_float32_of_what_was_written(tf_written_tfrecord):
    for i, r in enumerate(read_all(tf_written_tfrecord / "regression.tfrecord")):
        ex = croupier.parse_example(r)
        x, y = regression_row(i)
        assert ex["x"].dtype == np.float32 and ex["x"].tolist() == [np.float32(x)]
        assert ex["y"].tolist() == [np.float32(y)]


def test_tf_written_detection_records_hold_the_jpeg_and_their_objects(tf_written_tfrecord):
    first, second = read_all(tf_written_tfrecord / "detection.tfrecord")
    jpeg = (tf_written_tfrecord / "detection.jpg").read_bytes()
    assert len(jpeg) > 100_000 and jpeg[:3] == b"\xff\xd8\xff" and jpeg[-2:] == b"\xff\xd9"
    for record in (first, second):
        ex = croupier.parse_example(record)
        assert ex["image/encoded"] == [jpeg] and ex["image/format"] == [b"jpeg"]
        assert ex["image/width"].tolist() == ex["image/height"].tolist() == [512]
    ex = croupier.parse_example(first)
    np.testing.assert_array_equal(ex["image/object/bbox/xmin"],
                                  np.array([0.1, 0.2, 0.3], np.float32))
    np.testing.assert_array_equal(ex["image/object/bbox/ymin"],
                                  np.array([0.5, 0.6, 0.7], np.float32))
    assert ex["image/object/class/label"].tolist() == [1, 2, 3]
    assert ex["image/object/class/text"] == [b"a", b"", b"ccc"]
    ex = croupier.parse_example(second)  # no object: every list empty
    assert len(ex["image/object/bbox/xmin"]) == len(ex["image/object/class/label"]) == 0
    assert ex["image/object/class/text"] == []


def test_round_trip_and_index(tmp_path):
    records = [b"", b"a", bytes(range(256)) * 100] + [str(i).encode() for i in range(100)]
    path = tmp_path / "r.tfrecord"
    croupier.write_tfrecord(str(path), records)
    assert read_all(path) == records
    offsets = croupier.index_records(str(path), cache_dir=str(tmp_path / "cache"))
    assert offsets.dtype == np.uint64 and len(offsets) == len(records)
    assert offsets[0] == 0 and offsets[1] == 16 and offsets[2] == 33


def test_corrupt_file_raises_data_loss_naming_file_and_offset(tmp_path):
    path = tmp_path / "bad.tfrecord"
    croupier.write_tfrecord(str(path), [b"first", b"second"])
    data = bytearray(path.read_bytes())
    data[21 + 12 + 2] ^= 0xFF  # a data byte of the second record, which starts at byte 21
    path.write_bytes(bytes(data))
    with pytest.raises(errors.DataLossError, match=f"corrupt record data at byte 21 of {path}"):
        read_all(path)


def test_missing_file_is_not_found(tmp_path):
    with pytest.raises(errors.NotFoundError, match="absent.tfrecord"):
        croupier.TFRecordReader(str(tmp_path / "absent.tfrecord"))


def test_malformed_example_is_data_loss():
    with pytest.raises(errors.DataLossError):
        croupier.parse_example(b"\x0a\xff\xff\xff")
