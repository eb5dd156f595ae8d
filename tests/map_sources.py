"""The Python sources of the map-job tests (tests/test_produce.py), as `python -m croupier produce
map_sources:pipeline` imports them in producer processes. $MAP_TEST is a JSON object that picks
the source and its settings, so that every producer of a test makes the same pipeline.

Record i holds `id` (int64 i), `pixels` (uint8 [4, 4], a function of i) and `name` (bytes). The
random transform adds `noise` (float32 [3], drawn from the record's generator) and flips the
pixels when the generator says so: what a record holds after it is a function of (seed, epoch, i),
which the tests recompute. The Killing transform is augment in a process that SIGKILLs itself on
some records: a worker process dying mid-batch. Decoding is a deterministic decode (for the
record cache) that can leave a file per call, so that a test counts the calls of every process."""
import json
import os
import signal
import tempfile
import time

import numpy as np


def record(i):
    return {"id": np.int64(i),
            "pixels": (np.arange(16, dtype=np.uint8).reshape(4, 4) + np.uint8(i % 200)),
            "name": b"record-%d" % i}


class Records:
    """A map-style dataset of `n` records; record `fail_at`, and with fail_every = k the records
    i with i % k == k - 1, raise when read."""

    def __init__(self, n, fail_at=-1, delay=0.0, fail_every=0):
        self.n, self.fail_at, self.delay, self.fail_every = n, fail_at, delay, fail_every

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        if i == self.fail_at or (self.fail_every and i % self.fail_every == self.fail_every - 1):
            raise ValueError(f"record {i} is unreadable")
        if self.delay:
            time.sleep(self.delay)
        return record(i)


def augment(rec, rng):
    """The random per-record transform."""
    out = dict(rec)
    if rng.integers(0, 2):
        out["pixels"] = rec["pixels"][:, ::-1].copy()
    out["noise"] = rng.standard_normal(3).astype(np.float32)
    return out


def expected_record(seed, epoch, i):
    """What record i of `epoch` holds after augment, recomputed."""
    from croupier.map.pipeline import record_rng
    return augment(record(i), record_rng(seed, epoch, i))


class Killing:
    """augment, except that the process making a record in `records` SIGKILLs itself: the first
    time any process makes it, when `marker_dir` is given (a file there, made atomically, says
    it was done), else every time. A worker dying in the middle of a batch."""

    def __init__(self, records, marker_dir=None):
        self.records = {int(i) for i in records}
        self.marker_dir = marker_dir

    def __call__(self, rec, rng):
        i = int(rec["id"])
        if i in self.records and self._first_time(i):
            os.kill(os.getpid(), signal.SIGKILL)
        return augment(rec, rng)

    def _first_time(self, i):
        if self.marker_dir is None:
            return True
        try:
            os.close(os.open(os.path.join(self.marker_dir, f"killed-{i}"),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


class Hanging(Killing):
    """augment, except that the process making a record in `records` is stuck (it sleeps for an
    hour): the first time any process makes it with `marker_dir`, else every time (as Killing)."""

    def __call__(self, rec, rng):
        i = int(rec["id"])
        if i in self.records and self._first_time(i):
            time.sleep(3600)
        return augment(rec, rng)


class Decoding:
    """A deterministic decode: adds `level` (float32 [4, 4], the pixels over 255) to a record.
    With `marker_dir`, each call leaves a new file there, decoded-<record>-<unique>, in whatever
    process it runs."""

    def __init__(self, marker_dir=None):
        self.marker_dir = marker_dir

    def __call__(self, rec):
        if self.marker_dir is not None:
            fd, _ = tempfile.mkstemp(prefix=f"decoded-{int(rec['id'])}-", dir=self.marker_dir)
            os.close(fd)
        return dict(rec, level=rec["pixels"].astype(np.float32) / 255)


def decoded_records(marker_dir):
    """{record index: how many times Decoding decoded it}, from the files in `marker_dir`."""
    counts = {}
    for name in os.listdir(marker_dir):
        if name.startswith("decoded-"):
            i = int(name.split("-")[1])
            counts[i] = counts.get(i, 0) + 1
    return counts


def ragged(rec, rng):
    """A transform whose `noise` has a record-dependent length: inconsistent shapes."""
    out = dict(rec)
    out["noise"] = rng.standard_normal(3 + int(rec["id"]) % 2).astype(np.float32)
    return out


def pipeline(opts=None):
    """produce()'s arguments, from `opts` or else $MAP_TEST."""
    if opts is None:
        opts = json.loads(os.environ.get("MAP_TEST", "{}"))
    kind = opts.get("kind", "records")
    if kind == "parquet":
        from croupier.parquet import ParquetSource
        source = ParquetSource(opts["files"], columns=opts.get("columns"))
        transform = None
    else:
        source = Records(opts.get("records", 96), fail_at=opts.get("fail_at", -1),
                         delay=opts.get("delay", 0.0), fail_every=opts.get("fail_every", 0))
        transform = {"augment": augment, "ragged": ragged, "none": None}[
            opts.get("transform", "augment")]
        if "kill" in opts:  # {"records": [...], "marker_dir": a folder or None}
            transform = Killing(opts["kill"]["records"], opts["kill"].get("marker_dir"))
    out = {"source": source, "transform": transform, "batch_size": opts.get("batch_size", 4),
           "consumers": opts.get("consumers", 2), "epochs": opts.get("epochs", 2),
           "seed": opts.get("seed", 5), "shuffle": opts.get("shuffle", "global")}
    if "decode" in opts:  # {"marker_dir": a folder or None}
        out["decode"] = Decoding(opts["decode"].get("marker_dir"))
    for key in ("resume_from", "workers", "features", "max_tasks", "buffer_bytes",
                "skip_failing_records", "cache_bytes", "transform_threads",
                "drain_timeout", "metrics_port", "metrics_port_file"):
        if key in opts:
            out[key] = opts[key]
    return out
