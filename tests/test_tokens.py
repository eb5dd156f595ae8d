"""Tokens jobs from Python and the command line (croupier.tokens; docs/python.md, "Language-model
data"): packed sequences of Megatron-LM indexed datasets written here, dealt by the in-process
cluster (croupier.testing), and by real dispatcher and producer processes where a producer is
killed or the command line is the subject."""
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import croupier
from croupier import errors, tokens
from croupier.testing import in_process_cluster

L, B = 16, 12
COLUMNS = ("input_ids", "labels", "position_ids", "segment_ids", "loss_mask")


def documents(source, count):
    """Document d of source s: tokens s * 30000 + d * 100 + position (at most 99 tokens)."""
    return [[source * 30000 + d * 100 + p for p in range(1 + (d * 37 + source * 13) % 40)]
            for d in range(count)]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokens")
    tokens.write_indexed_dataset(str(root / "web"), documents(0, 200), dtype="uint16")
    tokens.write_indexed_dataset(str(root / "code"), documents(1, 120), dtype="int32")
    return [str(root / "web"), str(root / "code")]


def sequence_digests(batch):
    """One digest per sequence of a batch, over its five rows."""
    rows = [np.ascontiguousarray(batch[c]) for c in COLUMNS]
    return [hashlib.sha256(b"".join(r[i].tobytes() for r in rows)).hexdigest()
            for i in range(rows[0].shape[0])]


def read_steps(cluster, name, world, steps=None, each=None):
    """What `each(batch)` gives for every batch of epoch 0 (default: its sequences' digests,
    checking the columns' shapes), in global order (step by step, rank by rank), and the state
    after the last step read (None if read to the end)."""
    def digests(batch):
        assert all(batch[c].shape == (B // world, L) and batch[c].dtype == np.int32
                   for c in COLUMNS)
        return sequence_digests(batch)
    each = each or digests
    feeds = [cluster.consumer(name, r, world) for r in range(world)]
    out, state = [], None
    try:
        for step, batches in enumerate(zip(*(f.epoch(0) for f in feeds))):
            for b in batches:
                out += each(b)
            if steps is not None and step + 1 == steps:
                state = feeds[0].state_dict()
                break
    finally:
        for f in feeds:
            f.close()
    return out, state


def segments(batch):
    """Each document piece of each sequence (its input tokens of one segment id), without
    padding."""
    out = []
    for ids, seg in zip(batch["input_ids"], batch["segment_ids"]):
        for s in sorted(set(seg.tolist()) - {0}):
            out.append([int(t) for t in ids[seg == s]])
    return out


@pytest.mark.timeout(180)
def test_a_tokens_job_resumed_at_other_world_sizes_deals_the_same_sequences(tmp_path, sources):
    """An uninterrupted run at 1 rank against 2 -> 3 -> 4 ranks, each resume from the last job's
    checkpoint (resume_from): the same sequences, bit for bit, in the same order."""
    settings = dict(sequence_length=L, global_batch=B, steps_per_epoch=10, epochs=1, seed=5,
                    packing="best_fit", weights=[(0, [3, 1]), (6, [1, 1])], pad_id=-1)
    with in_process_cluster(producers=1, threads=1) as cluster:
        job = tokens.create_token_job(cluster.address, "whole", sources, consumers=1, **settings)
        assert job.source == "tokens" and job.batch_size == B and job.steps_per_epoch == 10
        assert job.tokens["packing"] == "best_fit" and job.tokens["global_batch"] == B
        assert [s["num_documents"] for s in job.tokens["source_info"]] == [200, 120]
        assert [s["dtype"] for s in job.tokens["source_info"]] == ["uint16", "int32"]
        whole, _ = read_steps(cluster, "whole", 1)
        assert len(whole) == 10 * B and len(set(whole)) == len(whole)

        resumed, state = [], None
        for name, world, steps in (("r2", 2, 3), ("r3", 3, 4), ("r4", 4, None)):
            tokens.create_token_job(cluster.address, name, sources, consumers=world,
                                    resume_from=state, **settings)
            got, state = read_steps(cluster, name, world, steps)
            resumed += got
    assert resumed == whole


@pytest.mark.timeout(120)
def test_bad_token_settings_and_sources_are_named(tmp_path, sources):
    with in_process_cluster(producers=1, threads=1) as cluster:
        def create(**changes):
            settings = dict(sequence_length=L, global_batch=B, steps_per_epoch=4, consumers=5)
            settings.update(changes)
            srcs = settings.pop("sources", sources)
            return tokens.create_token_job(cluster.address, "bad", srcs, **settings)
        with pytest.raises(errors.InvalidArgumentError,
                           match="tokens.global_batch is 12; it must be a multiple of "
                                 "num_consumers \\(5\\)"):
            create()
        with pytest.raises(errors.InvalidArgumentError, match="3 weights for 2 sources"):
            create(consumers=4, weights=[1, 1, 1])
        with pytest.raises(errors.InvalidArgumentError, match="packing 'first_fit' is not one"):
            create(consumers=4, packing="first_fit")
        with pytest.raises(errors.NotFoundError, match=str(tmp_path / "nowhere.bin")):
            create(consumers=4, sources=[str(tmp_path / "nowhere")])
        (tmp_path / "bad.idx").write_bytes(b"MMIDIDX\x00\x00" + b"\x07" * 20)
        (tmp_path / "bad.bin").write_bytes(b"")
        with pytest.raises(errors.DataLossError, match="bad.idx"):
            create(consumers=4, sources=[str(tmp_path / "bad")])


@pytest.mark.timeout(120)
def test_the_command_line_creates_and_shows_a_tokens_job(tmp_path, sources):
    with in_process_cluster(producers=1, threads=1) as cluster:
        binary = croupier.croupier_binary()
        out = subprocess.run(
            [binary, "job", "create", "--dispatcher", cluster.address, "--name", "cli",
             "--tokens", ",".join(sources), "--sequence-length", str(L), "--global-batch",
             str(B), "--steps-per-epoch", "5", "--consumers", "3", "--packing", "best_fit",
             "--weights", "0:3,1;2:1,1", "--json"],
            capture_output=True, text=True, timeout=60, check=True).stdout
        job = json.loads(out)
        assert job["spec"]["source"] == "tokens" and job["spec"]["batchSize"] == B // 3
        assert [w["weights"] for w in job["spec"]["tokens"]["weights"]] == [[3, 1], [1, 1]]
        shown = subprocess.run([binary, "job", "show", "--dispatcher", cluster.address,
                                "--name", "cli"], capture_output=True, text=True, timeout=60,
                               check=True).stdout
        assert "tokens, 5 global steps of 12 sequences of 16 tokens per epoch (best_fit)" in shown
        assert "% padding under the first weights" in shown
        summary = next(j for j in cluster.status()["job_summaries"] if j["name"] == "cli")
        padding = job["tokenSources"]
        assert 0 <= summary["padding_fraction"] < 1 and len(padding) == 2
        assert summary["padding_fraction"] == pytest.approx(
            (3 * padding[0]["paddingFraction"] + padding[1]["paddingFraction"]) / 4)
        bad = subprocess.run(
            [binary, "job", "create", "--dispatcher", cluster.address, "--name", "cli2",
             "--tokens", sources[0], "--sequence-length", str(L), "--global-batch", str(B),
             "--steps-per-epoch", "5", "--consumers", "3", "--weights", "3;x"],
            capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and "weights entry 'x'" in bad.stderr


def test_cu_seqlens_and_attention_mask_follow_the_segments():
    segments = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1]], dtype=np.int32)
    assert tokens.cu_seqlens(segments).tolist() == [0, 2, 5, 6, 12]
    mask = tokens.attention_mask(segments)
    assert mask.shape == (2, 6, 6)
    assert mask[0, 1].tolist() == [True, True, False, False, False, False]
    assert mask[0, 4].tolist() == [False, False, True, True, True, False]
    assert not mask[0, 5].any()  # padding attends nowhere
    assert mask[1].sum() == 21    # one causal segment of 6
    with pytest.raises(errors.InvalidArgumentError, match="expected \\[rows, sequence_length\\]"):
        tokens.cu_seqlens(np.zeros(4))


def train_tokenizer(path, texts):
    """A small word-level tokenizer with an end-of-document token, trained here (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["<unk>", "</s>"]))
    tokenizer.save(str(path))
    return tokenizer


@pytest.mark.timeout(120)
def test_croupier_tokenize_writes_what_the_tokenizer_gives_and_a_tokens_job_deals_it(tmp_path):
    pytest.importorskip("tokenizers")
    import pyarrow as pa
    import pyarrow.parquet as pq
    texts = [" ".join(f"w{(d * 7 + i) % 50}" for i in range(3 + d % 11)) for d in range(60)]
    tokenizer = train_tokenizer(tmp_path / "tokenizer.json", texts)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n"
                                              for i, t in enumerate(texts[:40])))
    pq.write_table(pa.table({"text": texts[40:]}), tmp_path / "b.parquet")
    binary = croupier.croupier_binary()

    env = dict(os.environ, CROUPIER_PYTHON=sys.executable)

    def run(*args):
        return subprocess.run([binary, "tokenize", *map(str, args)], capture_output=True,
                              text=True, timeout=60, env=env)
    for out in ("one", "two"):
        done = run(tmp_path / "a.jsonl", tmp_path / "b.parquet", "--tokenizer",
                   tmp_path / "tokenizer.json", "--output", tmp_path / out, "--eod-token", "</s>")
        assert done.returncode == 0, done.stderr
        assert "60 documents" in done.stdout
    # The same files and tokenizer give the same bytes.
    for ext in (".bin", ".idx"):
        assert (tmp_path / ("one" + ext)).read_bytes() == (tmp_path / ("two" + ext)).read_bytes()
    data = tokens.IndexedDataset(str(tmp_path / "one"))
    eod = tokenizer.token_to_id("</s>")
    assert data.dtype == "uint16" and data.num_documents == 60
    for d, text in enumerate(texts):
        assert data.read(d).tolist() == tokenizer.encode(text).ids + [eod]

    with in_process_cluster(producers=1, threads=1) as cluster:
        tokens.create_token_job(cluster.address, "text", [str(tmp_path / "one")], consumers=2,
                                sequence_length=8, global_batch=4, steps_per_epoch=3, epochs=1)
        pieces, _ = read_steps(cluster, "text", 2, each=segments)
    # Every piece the job dealt is a run of consecutive tokens of one tokenized document.
    docs = [data.read(d).tolist() for d in range(60)]
    assert pieces
    for piece in pieces:
        assert any(doc[i:i + len(piece)] == piece for doc in docs
                   for i in range(len(doc) - len(piece) + 1)), piece

    # Bad input is named.
    (tmp_path / "bad.jsonl").write_text('{"text": "w1"}\n{"text": \n')
    bad = run(tmp_path / "bad.jsonl", "--tokenizer", tmp_path / "tokenizer.json", "--output",
              tmp_path / "bad")
    assert bad.returncode == 1 and "bad.jsonl line 2: not JSON" in bad.stderr
    (tmp_path / "nokey.jsonl").write_text('{"body": "w1"}\n')
    bad = run(tmp_path / "nokey.jsonl", "--tokenizer", tmp_path / "tokenizer.json", "--output",
              tmp_path / "bad")
    assert bad.returncode == 1 and "line 1: no string 'text' (keys: body)" in bad.stderr
    bad = run(tmp_path / "b.parquet", "--tokenizer", tmp_path / "tokenizer.json", "--output",
              tmp_path / "bad", "--text-key", "body")
    assert bad.returncode == 1 and "no column 'body' (columns: text)" in bad.stderr
    bad = run(tmp_path / "a.jsonl", "--tokenizer", tmp_path / "tokenizer.json", "--output",
              tmp_path / "bad", "--eod-token", "<eos>")
    assert bad.returncode == 1 and "the tokenizer has no token '<eos>'" in bad.stderr
    bad = run(tmp_path / "none*.jsonl", "--tokenizer", tmp_path / "tokenizer.json", "--output",
              tmp_path / "bad")
    assert bad.returncode == 1 and "no file matches" in bad.stderr


@pytest.mark.long
@pytest.mark.timeout(180)
def test_a_producer_killed_mid_epoch_changes_no_sequence(tmp_path, sources):
    """Two `croupier producer` processes, two `croupier consume` ranks reading slowly; one
    producer SIGKILLed a quarter into the epoch: every rank's batches hash as in a run without
    the kill (the other producer makes the dead one's tasks again, the same bytes)."""
    from service_cluster import Cluster, batch_hashes, kill, read_batches

    def run(name, kill_one):
        with Cluster(tmp_path / name, producer_timeout_ms=1500,
                     dispatcher_args=["--rounds-per-task", "1"]) as cluster:
            for _ in range(2):
                cluster.add_producer()
            tokens.create_token_job(cluster.address, "lm", sources, consumers=2,
                                    sequence_length=L, global_batch=B, steps_per_epoch=40,
                                    epochs=1, packing="best_fit", weights=[3, 1])
            # A window of 2 batches: the automatic one (64 for batches this small) would take the
            # whole epoch from the producers before the kill, and the ranks would finish before
            # the dead producer expires, its tasks never made again.
            outs, procs = cluster.start_ranks("lm", 2, tmp_path / name, 1, "--slow-ms", "40",
                                              "--prefetch", "2")
            if kill_one:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and (
                        not outs[0].exists() or len(outs[0].read_text().splitlines()) < 10):
                    time.sleep(0.05)
                kill(cluster.producers[1])
            for proc in procs:
                assert proc.wait(timeout=120) == 0
            if kill_one:
                assert "expired" in cluster.dispatcher.log_path.read_text()
            return [batch_hashes(read_batches(out)) for out in outs]

    reference = run("reference", False)
    assert [len(r) for r in reference] == [40, 40]
    assert run("killed", True) == reference


def test_a_job_spec_is_checked_and_completed_by_the_dispatchers_own_code():
    """croupier.JobSpec: the fields of JobSpec, settings by name; normalized() is C++'s
    NormalizeJobSpec, offline."""
    spec = croupier.JobSpec(name="lm", source="tokens", num_consumers=4,
                            tokens={"sources": ["/data/web", "/data/code"], "sequence_length": 128,
                                    "global_batch": 16, "steps_per_epoch": 10})
    assert spec.name == "lm" and spec.batch_size == 0 and spec.tokens["packing"] == ""
    normal = spec.normalized()
    assert normal.batch_size == 4 and normal.shuffle == "none" and normal.remainder == "drop"
    assert normal.tokens["packing"] == "concat" and normal.tokens["packing_window"] == 4096
    assert normal.tokens["weights"] == [{"first_step": 0, "weights": [1.0, 1.0]}]
    assert normal == croupier.JobSpec.from_json(normal.to_json()) and normal != spec
    assert normal.normalized() == normal
    with pytest.raises(errors.InvalidArgumentError, match="bogus"):
        croupier.JobSpec(name="x", bogus=1)
    with pytest.raises(errors.InvalidArgumentError, match="unknown shuffle mode 'sideways'"):
        croupier.JobSpec(name="x", shuffle="sideways")
    with pytest.raises(errors.InvalidArgumentError,
                       match="tokens.global_batch is 16; it must be a multiple of num_consumers"):
        croupier.JobSpec(name="lm", source="tokens", num_consumers=3,
                         tokens=spec.tokens).normalized()
    with pytest.raises(AttributeError, match="no field 'nope'"):
        spec.nope


@pytest.mark.timeout(180)
def test_the_framework_adapters_give_a_tokens_jobs_columns_as_their_tensors(tmp_path, sources):
    """PyTorch (CroupierIterableDataset), JAX (croupier.jax.Feed, one process) and TensorFlow (the
    native op) each give the five int32 [B/N, L] columns, with the bytes Consumer gives."""
    with in_process_cluster(producers=1, threads=1) as cluster:
        tokens.create_token_job(cluster.address, "lm", sources, consumers=1, sequence_length=L,
                                global_batch=B, steps_per_epoch=3, epochs=1, seed=2)
        with cluster.consumer("lm", 0, 1) as feed:
            want = [{c: np.array(b[c]) for c in COLUMNS} for b in feed.epoch(0)]
        assert len(want) == 3
        got = {}
        try:
            import torch  # noqa: F401
            from croupier.torch import CroupierIterableDataset
            data = CroupierIterableDataset(cluster.address, "lm", 0, 1, resume=False)
            got["torch"] = [{c: b[c].numpy() for c in COLUMNS} for b in data]
            assert all(b["input_ids"].dtype == np.int32 for b in got["torch"])
            data.close()
        except ImportError:
            pass
        try:
            import jax  # noqa: F401
            from croupier.jax import Feed
            with Feed(cluster.address, "lm", 0, 1, resume=False) as jfeed:
                got["jax"] = [{c: np.asarray(b[c]) for c in COLUMNS} for b in jfeed.epoch(0)]
        except ImportError:
            pass
        try:
            import croupier.tf as ctf
            ds = ctf.dataset(cluster.address, "lm", 0, 1, epoch=0, resume=False)
            got["tf"] = [{c: b[c].numpy() for c in COLUMNS} for b in ds]
        except ImportError:
            pass
    assert got, "no framework is installed"
    for name, batches in got.items():
        assert len(batches) == 3, name
        for a, b in zip(batches, want):
            for c in COLUMNS:
                assert a[c].shape == (B, L) and a[c].dtype == np.int32, (name, c)
                assert np.array_equal(a[c], b[c]), (name, c)


@pytest.mark.timeout(120)
def test_megatron_and_croupier_write_the_same_indexed_dataset_and_read_each_others(tmp_path):
    """Megatron-LM's own writer and reader (megatron-core) against croupier's, for uint16 and
    int32 tokens: the same documents give byte-identical .bin and .idx files, and each reads
    what the other wrote."""
    megatron = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    docs = documents(0, 40) + [[]] + documents(1, 10)
    for dtype, np_dtype in (("uint16", np.uint16), ("int32", np.int32)):
        theirs_prefix, ours_prefix = tmp_path / f"megatron-{dtype}", tmp_path / f"ours-{dtype}"
        builder = megatron.IndexedDatasetBuilder(f"{theirs_prefix}.bin", dtype=np_dtype)
        for doc in docs:
            builder.add_document(np.array(doc, dtype=np.int64), [len(doc)])
        builder.finalize(f"{theirs_prefix}.idx")
        tokens.write_indexed_dataset(str(ours_prefix), docs, dtype=dtype)
        for ext in (".bin", ".idx"):
            assert (pathlib.Path(f"{theirs_prefix}{ext}").read_bytes()
                    == pathlib.Path(f"{ours_prefix}{ext}").read_bytes()), (dtype, ext)
        ours = tokens.IndexedDataset(str(theirs_prefix))
        assert ours.dtype == dtype and ours.lengths.tolist() == [len(d) for d in docs]
        assert [ours.read(d).tolist() for d in range(len(docs))] == docs
        theirs = megatron.IndexedDataset(str(ours_prefix))
        assert [theirs[d].tolist() for d in range(len(theirs))] == docs


@pytest.mark.long
@pytest.mark.timeout(240)
def test_a_tokens_job_autoscaled_or_made_by_three_producers_deals_the_same_sequences(tmp_path,
                                                                                     sources):
    """The same tokens job made by one producer, by three, and by producers that the autoscaler
    adds while the trainer is input-bound and takes away once it slows (croupier.local_cluster
    (producers="auto"), each batch made 40 ms slower so that they scale on 2 cores): every
    sequence read is the one-producer run's, in the same order."""
    settings = dict(sequence_length=L, global_batch=B, steps_per_epoch=3000, epochs=1,
                    packing="best_fit", weights=[3, 1], seed=9)
    damping = ["--advice-smoothing-ms", "2000", "--advice-hold-ms", "1500"]
    slow = ["--threads", "1", "--test-make-delay-ms", "40"]

    def read(cluster, steps=None, until=None):
        """Sequence digests of the first `steps` steps, or of steps read (fast while until() is
        False, then slowly until it is True) and the step count."""
        feed = cluster.consumer("lm", 0, 1, timeout=60)
        out = []
        try:
            for step, batch in enumerate(feed.epoch(0)):
                out += sequence_digests(batch)
                if until is not None:
                    phase = until(step)
                    if phase == "done":
                        break
                    if phase == "slow":
                        time.sleep(0.15)
                if steps is not None and step + 1 == steps:
                    break
        finally:
            feed.close()
        return out

    with croupier.local_cluster(producers="auto", max_producers=3, autoscale_interval=0.5,
                                work_dir=tmp_path / "auto", dispatcher_args=damping,
                                producer_args=slow) as cluster:
        tokens.create_token_job(cluster.address, "lm", sources, consumers=1, **settings)
        most = [1]
        deadline = time.monotonic() + 150

        def phase(step):
            assert time.monotonic() < deadline, cluster.status()["producer_advice"]
            live = len(cluster.live_producers)
            most[0] = max(most[0], live)
            if most[0] < 2:
                return "fast"  # input-bound: the autoscaler adds producers
            return "slow" if live > 1 else "done"  # the trainer slows: they go
        scaled = read(cluster, until=phase)
        changes = list(cluster.autoscaler.changes)
    assert most[0] >= 2 and changes, changes
    steps = len(scaled) // B
    assert 0 < steps < 3000
    for producers, name in ((1, "one"), (3, "three")):
        with croupier.local_cluster(producers=producers, work_dir=tmp_path / name,
                                    producer_args=["--threads", "1"]) as cluster:
            tokens.create_token_job(cluster.address, "lm", sources, consumers=1, **settings)
            fixed = read(cluster, steps=steps)
        assert fixed == scaled, f"{producers} producers"
