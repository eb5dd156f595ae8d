"""Per-job compression of batches on the data plane (JobSpec.compression): the same job with
none, zstd and lz4 delivers bit-identical batches over TCP, also over shared memory (where it is
skipped), and an unknown codec is refused naming it. That compressed frames are really sent (and
only when they shrink) is checked at the wire by src/transport/tcp_transport_test.cc."""
import random

import pytest

from service_cluster import Cluster, batch_hashes, read_batches, run

FEATURES = "id:int64,text:bytes,tokens:int64[*]"
RECORDS = 1200
BATCH = 32
WORDS = [b"the", b"batch", b"of", b"records", b"is", b"dealt", b"to", b"every", b"trainer",
         b"once", b"seeded", b"order", b"epoch", b"shuffle", b"producer", b"consumer"]


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _example(features):
    """A serialized tf.train.Example of {name: bytes | [int]}."""
    entries = b""
    for name, value in features.items():
        if isinstance(value, bytes):
            feature = _field(1, _field(1, value))  # bytes_list { value }
        else:
            feature = _field(3, _field(1, b"".join(_varint(v) for v in value)))  # int64_list
        entries += _field(1, _field(1, name.encode()) + _field(2, feature))
    return _field(1, entries)


@pytest.fixture
def text_dataset(tmp_path):
    """TFRecords of text-like, compressible records."""
    import croupier  # the Python package, for its TFRecord writer
    rng = random.Random(5)
    files = []
    for f in range(2):
        records = []
        for i in range(f * RECORDS // 2, (f + 1) * RECORDS // 2):
            text = b" ".join(rng.choice(WORDS) for _ in range(rng.randrange(100, 300)))
            tokens = [rng.randrange(16) for _ in range(rng.randrange(20, 60))]
            records.append(_example({"id": [i], "text": text, "tokens": tokens}))
        path = tmp_path / f"text-{f}.tfrecord"
        croupier.write_tfrecord(str(path), records)
        files.append(path)
    return files


def _run_jobs(cluster, tmp_path, dataset, codecs, world, consumer_args=()):
    """Each codec's job run to the end by `world` consumers: {codec: [per-rank hashes]}."""
    results = {}
    for codec in codecs:
        job = cluster.create_job(f"train-{codec}", dataset, FEATURES, BATCH, world, seed=9,
                                 compression=codec)
        assert job["spec"]["compression"] == codec
        outs = [tmp_path / f"{codec}-{r}.jsonl" for r in range(world)]
        procs = [cluster.start_consumer(f"train-{codec}", r, world, outs[r], 1, *consumer_args)
                 for r in range(world)]
        cluster.wait(procs, timeout=90)
        results[codec] = [batch_hashes(read_batches(o)) for o in outs]
    return results


def test_every_codec_delivers_the_same_batches_over_tcp(tmp_path, text_dataset):
    world = 2
    with Cluster(tmp_path / "tcp") as cluster:
        cluster.add_producer("--shm", "off")
        results = _run_jobs(cluster, tmp_path, text_dataset, ["none", "zstd", "lz4"], world,
                            ("--shm", "off"))
    per_rank = RECORDS // BATCH // world
    assert [len(r) for r in results["none"]] == [per_rank] * world
    # Bit-identical content, batch by batch, whatever the codec.
    assert results["zstd"] == results["none"]
    assert results["lz4"] == results["none"]
    hashes = [h for rank in results["none"] for (_, _, h) in rank]
    assert len(set(hashes)) == len(hashes), "every batch differs from the others"


def test_compression_is_skipped_over_shared_memory(tmp_path, text_dataset):
    with Cluster(tmp_path / "shm", env={"CROUPIER_SHM": "on"}) as cluster:
        cluster.add_producer()
        # CROUPIER_SHM=on: a consumer that could not use shared memory fails instead of falling
        # back to TCP.
        results = _run_jobs(cluster, tmp_path, text_dataset, ["none", "zstd"], 1)
    assert len(results["none"][0]) == RECORDS // BATCH
    assert results["zstd"] == results["none"]


def test_an_unknown_codec_is_refused_naming_it(tmp_path, text_dataset):
    with Cluster(tmp_path / "bad") as cluster:
        proc = run("job", "create", "--dispatcher", cluster.address, "--name", "bad", "--files",
                   str(text_dataset[0]), "--features", FEATURES, "--batch-size", BATCH,
                   "--consumers", 1, "--compression", "gzip", check=False, env=cluster.env)
    assert proc.returncode != 0
    assert "unknown compression 'gzip'; expected one of none, zstd, lz4" in proc.stderr, \
        proc.stderr
    assert "INVALID_ARGUMENT" in proc.stderr or "invalid" in proc.stderr.lower(), proc.stderr
