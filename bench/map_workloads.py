"""The workloads of bench/bench_map.py: the JPEG images (made with PIL, kept in a cache folder),
the map-style dataset every system reads, and the transform, in numpy and as TensorFlow ops.

A workload is a row of WORKLOADS: the images' side, the crop (None: decode and collate only), the
batch size, and where the transform runs. Every system of bench_map.py runs the same dataset
(JpegFolder) and the same transform on a workload:

  small         64x64 JPEGs -> random crop 56 + flip -> normalise to float32 (--uint8: kept
                uint8), batches of 32. The dataset decodes; the transform is the system's own
                per-record hook where it has one (croupier's transform=, Grain's random_map, the
                map function of SPDL and Ray Data), in __getitem__ where it has none (DataLoader).
  large         256x256 JPEGs -> random crop 224 + flip -> normalise, batches of 64, the WHOLE
                transform in the dataset's __getitem__ for every system (no croupier transform=:
                the source does it all, as many users write).
  decode        the 64x64 JPEGs decoded and collated, batches of 32: no crop, no flip, no
                normalise (uint8 images), in __getitem__.
  decode_large  the same on the 256x256 JPEGs, batches of 64.

Nothing here is a croupier API; bench/bench_cache.py imports write_images, JpegBytes and
transform too (the small workload's).
"""
import dataclasses
import io
import os
import pathlib
import shutil
import tempfile
from typing import Optional

import numpy as np

MEAN, STD = 127.5, 64.0
WORLD = 4  # trainer processes, in every system
CACHE_VERSION = 1  # of the images written by write_images: a new version makes them again


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    size: int  # the JPEGs' side, in pixels
    crop: Optional[int]  # the random crop's side; None: decode and collate only
    batch: int  # records per batch
    in_getitem: bool  # the whole transform in the dataset's __getitem__, for every system
    images: int  # records per system (one epoch), by default
    quick_images: int  # with --quick

    @property
    def transforms(self):
        return self.crop is not None

    def describe(self, images, uint8):
        kind = self.kind(uint8)
        what = (f"crop {self.crop} + flip -> {kind}" if self.transforms
                else "decode + collate only (uint8)")
        where = "in __getitem__" if self.in_getitem else "the system's per-record transform"
        return (f"{images} JPEGs {self.size}x{self.size} -> {what} ({where}), batches of "
                f"{self.batch}")

    def kind(self, uint8):
        return "uint8" if uint8 or not self.transforms else "float32"


WORKLOADS = {
    "small": Workload("small", 64, 56, 32, False, 32768, 512),
    "large": Workload("large", 256, 224, 64, True, 16384, 256),
    "decode": Workload("decode", 64, None, 32, True, 32768, 512),
    "decode_large": Workload("decode_large", 256, None, 64, True, 16384, 256),
}
DEFAULT_WORKLOADS = ("small", "large", "decode")

# The small workload's figures, for the callers of the older single-workload program.
SIZE, CROP, BATCH = 64, 56, 32


# --- The images ------------------------------------------------------------------------------

def write_images(folder, count, size=SIZE):
    """count JPEGs of size x size (quality 90) into folder, as 000000.jpg ...: one smooth base
    image (upsampled coarse noise: some structure for the encoder) plus per-image noise."""
    from PIL import Image
    rng = np.random.default_rng(0)
    if size <= 64:  # the images of the first version of the benchmark, byte for byte
        base = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        amplitude = 32
    else:
        coarse = rng.integers(0, 224, (max(1, size // 16),) * 2 + (3,), dtype=np.uint8)
        base = np.asarray(Image.fromarray(coarse).resize((size, size), Image.BILINEAR))
        amplitude = 12
    for i in range(count):
        noise = rng.integers(0, amplitude, (size, size, 3), dtype=np.uint8)
        Image.fromarray(base + noise).save(pathlib.Path(folder) / f"{i:06d}.jpg", quality=90)


def cached_images(workload, count, cache_dir=None):
    """The folder of `count` JPEGs of the workload's size, made once under cache_dir (default:
    the temp folder's croupier-bench-map/) and reused by later runs."""
    root = pathlib.Path(cache_dir or pathlib.Path(tempfile.gettempdir()) / "croupier-bench-map")
    folder = root / f"v{CACHE_VERSION}-{workload.size}px-{count}"
    if folder.is_dir():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=root))
    try:
        write_images(tmp, count, workload.size)
        os.rename(tmp, folder)  # another run may have made it meanwhile: keep that one
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


# --- The dataset and the transform -----------------------------------------------------------

def decode(path):
    """A JPEG file as a uint8 array (height, width, 3), with PIL."""
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(pathlib.Path(path).read_bytes())).convert("RGB"))


def transform(record, rng, uint8=False, crop=CROP):
    """A random crop x crop crop, flipped left-right half the time, normalised to float32 (or,
    with uint8, kept uint8)."""
    size = record["image"].shape[0]
    y, x = rng.integers(0, size - crop + 1, size=2)
    image = record["image"][y:y + crop, x:x + crop]
    if rng.random() < 0.5:
        image = image[:, ::-1]
    if uint8:
        image = np.ascontiguousarray(image)
    else:
        image = (image.astype(np.float32) - MEAN) / STD
    return dict(record, image=image)


def batch_transform(batch, rng, uint8=False, crop=CROP):
    """transform, vectorised over a collated batch (the fast path of docs/python.md): each
    record's crop and flip drawn from the batch's generator, gathered from a strided view of the
    batch, normalised in one numpy operation."""
    images = batch["image"]  # (n, size, size, 3) uint8
    n, size = len(images), images.shape[1]
    ys, xs = rng.integers(0, size - crop + 1, size=(2, n))
    flips = rng.random(n) < 0.5
    windows = np.lib.stride_tricks.sliding_window_view(images, (crop, crop), axis=(1, 2))
    crops = windows[np.arange(n), ys, xs].transpose(0, 2, 3, 1)  # (n, crop, crop, 3)
    crops = np.where(flips[:, None, None, None], crops[:, :, ::-1], crops)
    if uint8:
        return dict(batch, image=np.ascontiguousarray(crops))
    return dict(batch, image=(crops.astype(np.float32) - MEAN) / STD)


def collate(records):
    """Records (dicts of arrays) into a batch: each field stacked with numpy."""
    return {k: np.stack([r[k] for r in records]) for k in records[0]}


class JpegFolder:
    """A map-style dataset: record i is the i-th JPEG of a folder, decoded (torch's Dataset
    protocol: __len__ and __getitem__). With with_transform, __getitem__ also runs transform
    (crop `crop`), with a generator of its own per process, as a user's dataset does that draws
    from numpy's random functions; `paths` gives the files instead of a folder's."""

    def __init__(self, folder, uint8=False, with_transform=False, crop=CROP, paths=None):
        self.paths = (list(paths) if paths is not None
                      else sorted(pathlib.Path(folder).glob("*.jpg")))
        self.uint8 = uint8
        self.with_transform = with_transform
        self.crop = crop
        self._rng, self._pid = None, None

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.record(self.paths[i], i)

    def record(self, path, i):
        record = {"image": decode(path), "label": np.int64(i % 10), "id": np.int64(i)}
        if self.with_transform:
            if self._pid != os.getpid():  # a forked or spawned worker: a generator of its own
                self._rng, self._pid = np.random.default_rng(), os.getpid()
            record = transform(record, self._rng, self.uint8, self.crop)
        return record

    def __getstate__(self):  # a spawned worker (Grain's) makes its own generator
        return dict(self.__dict__, _rng=None, _pid=None)


def dataset(workload, images_dir, uint8, inside, paths=None):
    """The workload's dataset. On small, inside=True puts the transform in __getitem__ (for the
    systems without a per-record hook) and inside=False leaves it to record_transform(); on the
    other workloads __getitem__ does the whole transform (if any) whatever `inside` says."""
    with_transform = workload.transforms and (workload.in_getitem or inside)
    return JpegFolder(images_dir, uint8, with_transform, workload.crop or CROP, paths=paths)


def record_transform(workload, uint8):
    """The transform(record, rng) a system with a per-record hook runs after the dataset, or None
    (the dataset does it all)."""
    if not workload.transforms or workload.in_getitem:
        return None
    return RecordTransform(uint8, workload.crop)


class RecordTransform:
    """transform with its settings bound, a function of (record, rng) (picklable, for the
    systems that spawn their workers)."""

    def __init__(self, uint8, crop):
        self.uint8, self.crop = uint8, crop

    def __call__(self, record, rng):
        return transform(record, rng, self.uint8, self.crop)


class JpegPaths:
    """A map-style source of the folder's JPEG files' paths, for a tf.data pipeline that reads
    them itself (tf.io.read_file), as the TensorFlow systems' pipelines do."""

    def __init__(self, folder):
        self.paths = [str(p) for p in sorted(pathlib.Path(folder).glob("*.jpg"))]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return {"path": self.paths[i], "label": np.int64(i % 10), "id": np.int64(i)}


class JpegBytes:
    """A map-style source of the folder's JPEGs, not decoded: for the tf.data pipelines."""

    def __init__(self, folder):
        self.paths = sorted(pathlib.Path(folder).glob("*.jpg"))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return {"image": self.paths[i].read_bytes(), "label": np.int64(i % 10), "id": np.int64(i)}


def tf_read_and_augment(record, uint8=False, crop=CROP):
    """tf_augment of the record whose "path" is read with tf.io.read_file."""
    import tensorflow as tf
    record = dict(record)
    record["image"] = tf.io.read_file(record.pop("path"))
    return tf_augment(record, uint8, crop)


def tf_augment(record, uint8=False, crop=CROP):
    """The transform as TensorFlow ops, seeded by the record's int64 [2] seed (crop None: the
    decode only)."""
    import tensorflow as tf
    image = tf.io.decode_jpeg(record["image"], channels=3)
    if crop is not None:
        seed = record["croupier_seed"]
        image = tf.image.stateless_random_crop(image, [crop, crop, 3], seed=seed)
        image = tf.image.stateless_random_flip_left_right(
            image, seed=tf.random.experimental.stateless_fold_in(seed, 1))
        if not uint8:
            image = (tf.cast(image, tf.float32) - MEAN) / STD
    return {"image": image, "label": record["label"], "id": record["id"]}
