"""The data layer through the Python module: TFRecord files, Example parsing, record indexes."""
import math

import numpy as np
import pytest

import croupier
from croupier import errors


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
