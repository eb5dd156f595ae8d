"""TFRecord files of tf.train.Example records with features of every kind croupier reads (a scalar,
a ragged list, a fixed-shape float list, bytes), written by TensorFlow itself, for the tests of
croupier's TensorFlow side."""

# The feature spec of the records write_mixed_examples writes.
MIXED = "id:int64,tokens:int64[*],emb:float32[3],name:bytes"


def write_mixed_examples(tf, path, n):
    """Writes records 0..n-1 to `path`: id i, tokens [0, i % 4), emb [i, i/2, -i], name b"r<i>"."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            f = {
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=list(range(i % 4)))),
                "emb": tf.train.Feature(float_list=tf.train.FloatList(value=[i, i / 2, -i])),
                "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"r%d" % i])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


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
