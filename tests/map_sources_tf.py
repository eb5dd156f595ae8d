"""The tf.data pipeline of the tf_transform tests (tests/test_produce_tf.py), as `python -m croupier
produce map_sources_tf:pipeline` imports it in producer processes; $MAP_TEST (JSON) picks the
settings, as for tests/map_sources.py.

Record i of the source is {"image": JPEG bytes of a 32x32 RGB image (a function of i, encoded
with PIL), "label": int64 i % 10, "id": int64 i}. The tf_transform decodes the JPEG, crops a
random 24x24 window and flips it left-right at random (stateless ops seeded by the record's
croupier_seed), and normalises to float32; it keeps the uint8 crop as "pixels" too."""
import io
import json
import os

import numpy as np

SIZE, CROP = 32, 24
MEAN, STD = 127.5, 64.0


def jpeg(i):
    """The JPEG bytes of image i."""
    from PIL import Image
    rng = np.random.default_rng([7, int(i)])
    pixels = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


class JpegRecords:
    """A map-style source of `n` JPEG records; record `corrupt_at` holds bytes that are no JPEG."""

    def __init__(self, n, corrupt_at=-1):
        self.n, self.corrupt_at = n, corrupt_at
        self._cache = {}

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        if i not in self._cache:
            self._cache[i] = b"\xff\xd8 not a JPEG" if i == self.corrupt_at else jpeg(i)
        return {"image": self._cache[i], "label": np.int64(i % 10), "id": np.int64(i)}


def augment_one(record):
    """decode -> stateless random crop and flip -> normalise, for one record (a dict of tensors
    with croupier_seed)."""
    import tensorflow as tf
    seed = record["croupier_seed"]
    image = tf.io.decode_jpeg(record["image"], channels=3)
    image = tf.image.stateless_random_crop(image, [CROP, CROP, 3], seed=seed)
    flip_seed = tf.random.experimental.stateless_fold_in(seed, 1)
    image = tf.image.stateless_random_flip_left_right(image, seed=flip_seed)
    return {"image": (tf.cast(image, tf.float32) - MEAN) / STD, "pixels": image,
            "label": record["label"], "id": record["id"]}


def augment(ds):
    """The tf_transform: one output per record, in order, TensorFlow's parallel map."""
    import tensorflow as tf
    return ds.map(augment_one, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def drop_some(ds):
    """A tf_transform that filters records out: refused by croupier."""
    return augment(ds.filter(lambda r: r["id"] % 3 != 1))


def pipeline(opts=None):
    """produce()'s arguments, from `opts` or else $MAP_TEST."""
    if opts is None:
        opts = json.loads(os.environ.get("MAP_TEST", "{}"))
    source = JpegRecords(opts.get("records", 96), corrupt_at=opts.get("corrupt_at", -1))
    out = {"source": source,
           "tf_transform": {"augment": augment, "drop_some": drop_some}[
               opts.get("transform", "augment")],
           "batch_size": opts.get("batch_size", 4), "consumers": opts.get("consumers", 2),
           "epochs": opts.get("epochs", 2), "seed": opts.get("seed", 5),
           "shuffle": opts.get("shuffle", "global")}
    for key in ("workers", "threads", "max_tasks", "resume_from"):
        if key in opts:
            out[key] = opts[key]
    return out
