"""TFRecord files of tf.train.Example records with features of every kind croupier reads (a scalar,
a ragged list, a fixed-shape float list, bytes), written by TensorFlow itself, for the tests of
croupier's TensorFlow side and for the tests that check croupier reads what TensorFlow writes.

Run as a script, `python tests/tf_records.py OUT_DIR` writes the set of files that the C++ tests
read (ctest's fixture tf_written_tfrecord, src/io/CMakeLists.txt) and the Python tests read through
the fixture tf_written_tfrecord (tests/conftest.py): see write_tf_written_set. When TensorFlow is
not importable it leaves OUT_DIR holding only SKIPPED (the reason) and exits with SKIP_EXIT_CODE."""
import pathlib
import shutil
import sys

# The feature spec of the records write_mixed_examples writes.
MIXED = "id:int64,tokens:int64[*],emb:float32[3],name:bytes"
# The feature spec of the records write_regression_examples writes.
REGRESSION = "x:float32,y:float32"
# The features of the records write_detection_examples writes (TF Object Detection's layout).
DETECTION = ("image/encoded:bytes,image/format:bytes,image/width:int64,image/height:int64,"
             "image/object/bbox/xmin:float32[*],image/object/bbox/ymin:float32[*],"
             "image/object/class/label:int64[*],image/object/class/text:bytes[*]")

# What write_tf_written_set writes: file name -> number of records.
TF_WRITTEN_COUNTS = {"mixed.tfrecord": 300, "regression.tfrecord": 804, "detection.tfrecord": 2}
SKIP_EXIT_CODE = 77


def write_mixed_examples(tf, path, n):
    """Writes records 0..n-1 to `path`: id i, tokens [0, i % 4) (empty when i % 4 == 0), emb
    [i, i/2, -i], name b"r<i>"."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            f = {
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=list(range(i % 4)))),
                "emb": tf.train.Feature(float_list=tf.train.FloatList(value=[i, i / 2, -i])),
                "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"r%d" % i])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


def check_first_mixed_batch(first):
    """Checks the first batch of 8 unshuffled mixed records as TensorFlow gives it: the dense,
    ragged, bytes and fixed-shape float features."""
    assert first["id"].numpy().tolist() == list(range(8))
    assert first["tokens"].to_list() == [list(range(i % 4)) for i in range(8)]
    assert first["name"].numpy().tolist() == [b"r%d" % i for i in range(8)]
    assert first["emb"].numpy()[3].tolist() == [3, 1.5, -3]  # exact in float32


def mixed_total_in_tf_function(tf, dataset):
    """The sum of every id and token of a dataset of mixed records, iterated inside a
    tf.function (graph mode)."""
    @tf.function
    def total(ds):
        s = tf.constant(0, tf.int64)
        for b in ds:
            s += tf.reduce_sum(b["id"]) + tf.reduce_sum(b["tokens"].flat_values)
        return s

    return int(total(dataset))


def mixed_total(n):
    """What mixed_total_in_tf_function gives for records 0..n-1."""
    return sum(range(n)) + sum(sum(range(i % 4)) for i in range(n))


def write_regression(tf, path, n):
    """n records: id i, x = (i, 2i, 3i, 4i) / n, y = a fixed linear function of x (FEATURES
    "id:int64,x:float32[4],y:float32")."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            x = [(k + 1) * i / n for k in range(4)]
            f = {
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                "y": tf.train.Feature(float_list=tf.train.FloatList(value=[sum(x) / 2 - 0.25])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


def write_regression_file(tf, out_dir, n):
    """write_regression's n records in out_dir/reg.tfrecord; returns its path, as a string."""
    path = pathlib.Path(out_dir) / "reg.tfrecord"
    write_regression(tf, path, n)
    return str(path)


def regression_row(i):
    """Record i of write_regression_examples: x in [0, 1000), y = 2x plus a little noise (as
    doubles; the file holds them rounded to float32)."""
    x = float((i * 37) % 1000)
    return x, 2 * x + ((i * 7) % 11 - 5) / 10


def write_regression_examples(tf, path, n):
    """Writes n records of float features x and y (regression_row(i))."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            x, y = regression_row(i)
            f = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=[x])),
                 "y": tf.train.Feature(float_list=tf.train.FloatList(value=[y]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


def detection_jpeg(tf):
    """A JPEG of 512x512 pixels of noise (about 0.7 MB), encoded by TensorFlow; always the same."""
    pixels = tf.random.stateless_uniform([512, 512, 3], seed=[1, 2], maxval=256, dtype=tf.int32)
    return tf.io.encode_jpeg(tf.cast(pixels, tf.uint8), quality=100).numpy()


def write_detection_examples(tf, path, jpeg):
    """Writes 2 records in TF Object Detection's layout, both holding `jpeg`: record 0 with 3
    objects (bbox xmin [0.1, 0.2, 0.3], ymin [0.5, 0.6, 0.7], labels [1, 2, 3], texts
    [b"a", b"", b"ccc"]), record 1 with none (every object list empty)."""
    objects = [([0.1, 0.2, 0.3], [0.5, 0.6, 0.7], [1, 2, 3], [b"a", b"", b"ccc"]), ([], [], [], [])]
    with tf.io.TFRecordWriter(str(path)) as w:
        for xmin, ymin, labels, texts in objects:
            f = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"jpeg"])),
                "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[512])),
                "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[512])),
                "image/object/bbox/xmin": tf.train.Feature(
                    float_list=tf.train.FloatList(value=xmin)),
                "image/object/bbox/ymin": tf.train.Feature(
                    float_list=tf.train.FloatList(value=ymin)),
                "image/object/class/label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=labels)),
                "image/object/class/text": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=texts)),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


def write_tf_written_set(tf, out):
    """Writes into the folder `out` (plain TFRecord files, no compression): mixed.tfrecord,
    regression.tfrecord and detection.tfrecord (TF_WRITTEN_COUNTS records), detection.jpg (the
    JPEG both detection records hold, to compare byte for byte)."""
    out = pathlib.Path(out)
    write_mixed_examples(tf, out / "mixed.tfrecord", TF_WRITTEN_COUNTS["mixed.tfrecord"])
    write_regression_examples(tf, out / "regression.tfrecord",
                              TF_WRITTEN_COUNTS["regression.tfrecord"])
    jpeg = detection_jpeg(tf)
    (out / "detection.jpg").write_bytes(jpeg)
    write_detection_examples(tf, out / "detection.tfrecord", jpeg)


def main(argv):
    if len(argv) != 2:
        sys.exit(f"usage: {argv[0]} OUT_DIR")
    out = pathlib.Path(argv[1])
    shutil.rmtree(out, ignore_errors=True)  # no file of an earlier run passes for this one's
    out.mkdir(parents=True)
    try:
        import tensorflow as tf
    except Exception as e:  # noqa: BLE001 (a broken install is as much a reason as a missing one)
        reason = f"tensorflow is not importable by {sys.executable}: {type(e).__name__}: {e}"
        (out / "SKIPPED").write_text(reason + "\n")
        print(f"SKIPPED: {reason}")
        return SKIP_EXIT_CODE
    write_tf_written_set(tf, out)
    print(f"wrote {', '.join(sorted(TF_WRITTEN_COUNTS))} with TensorFlow {tf.__version__} to {out}")
    return 0


if __name__ == "__main__":
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.exit(main(sys.argv))
