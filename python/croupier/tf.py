"""TensorFlow adapter: a croupier feed as a tf.data.Dataset.

    import croupier.tf
    feed = croupier.Consumer("HOST:5050", "train")            # rank and world from TF_CONFIG
    for epoch in range(epochs):
        for batch in croupier.tf.generator_dataset(feed, epoch):   # {name: tf.Tensor}
            ...

The dataset is built with tf.data.Dataset.from_generator; its output_signature comes from the
job's feature spec: fixed shapes are dense tensors [batch, *shape], bytes are tf.string, and
variable lengths are tf.RaggedTensor. Numbers pass from the received buffer to TensorFlow as numpy
views; TensorFlow copies them into its own tensors.
"""
import numpy as np
import tensorflow as tf

from croupier import _croupier

_DTYPES = {"int64": tf.int64, "float32": tf.float32, "bytes": tf.string}


def output_signature(features):
    """{name: TensorSpec or RaggedTensorSpec} for a feature spec text such as
    "image:bytes,label:int64,emb:float32[16],tokens:int64[*]"."""
    signature = {}
    for name, dtype, shape in _croupier.parse_feature_spec(features):
        if shape is None:
            signature[name] = tf.RaggedTensorSpec([None, None], _DTYPES[dtype], ragged_rank=1,
                                                  row_splits_dtype=tf.int64)
        else:
            signature[name] = tf.TensorSpec([None, *shape], _DTYPES[dtype])
    return signature


def _to_tf(batch, signature):
    out = {}
    for name, spec in signature.items():
        value = batch[name]
        if isinstance(spec, tf.RaggedTensorSpec):
            values, splits = value
            if spec.dtype == tf.string:
                values = np.array(values, dtype=object)
            out[name] = tf.RaggedTensor.from_row_splits(values, splits.astype(np.int64),
                                                        validate=False)
        elif spec.dtype == tf.string:
            arr = np.array(value, dtype=object)
            out[name] = arr.reshape([-1, *spec.shape[1:]])
        else:
            out[name] = value
    return out


def generator_dataset(consumer, epoch):
    """The batches of `epoch` from a croupier.Consumer (one rank) as a tf.data.Dataset of dicts.

    The dataset reads the consumer when it is iterated; iterate it once per epoch."""
    signature = output_signature(consumer.job["features"])

    def generate():
        for batch in consumer.epoch(epoch):
            yield _to_tf(batch, signature)

    return tf.data.Dataset.from_generator(generate, output_signature=signature)
