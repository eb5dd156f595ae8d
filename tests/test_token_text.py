"""Tokens jobs over text that their producers tokenize (croupier.tokens.TextSource,
croupier.tokens.produce, `croupier produce --job`; docs/language-models.md): a text job deals the
same bytes as the job over the indexed dataset `croupier tokenize` makes of the same text, a
killed producer changes nothing, and text changed since the job was created is named."""
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import croupier
from croupier import errors, tokens
from croupier.lm import corpus
from croupier.testing import in_process_cluster
from test_tokens import read_steps, segments, sequence_digests, train_tokenizer  # noqa: F401

pytest.importorskip("tokenizers")

L, B = 16, 12
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def write_corpus(root):
    """A JSON-lines file (with a blank line, which is no document) and a Parquet file of small
    row groups; a word-level tokenizer trained on them; returns (files, tokenizer path)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    texts = [" ".join(f"w{(d * 7 + i) % 50}" for i in range(3 + (d * 5) % 23)) for d in range(160)]
    lines = [json.dumps({"text": t, "id": i}) for i, t in enumerate(texts[:100])]
    lines.insert(37, "   ")
    (root / "a.jsonl").write_text("\n".join(lines) + "\n")
    pq.write_table(pa.table({"text": texts[100:]}), root / "b.parquet", row_group_size=16)
    train_tokenizer(root / "tokenizer.json", texts)
    return [str(root / "a.jsonl"), str(root / "b.parquet")], str(root / "tokenizer.json")


class Producer:
    """croupier.tokens.produce() on a thread of this process, stopped on leaving the block."""

    def __init__(self, address, job):
        self.stop = threading.Event()
        self.error = None

        def run():
            try:
                tokens.produce(address, job, stop=self.stop, drain_timeout=0)
            except BaseException as e:  # reported by __exit__
                self.error = e
        self.thread = threading.Thread(target=run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the producer did not stop"
        if exc[0] is None and self.error is not None:
            raise self.error


def spec(**extra):
    settings = dict(sequence_length=L, global_batch=B, steps_per_epoch=30, epochs=1,
                    packing="best_fit", weights=[2, 1])
    settings.update(extra)
    return settings


@pytest.mark.timeout(180)
def test_a_text_job_deals_the_bytes_of_the_job_over_its_tokenized_corpus(tmp_path):
    files, tokenizer = write_corpus(tmp_path)
    corpus.tokenize_corpus(files, tokenizer, str(tmp_path / "text"), eod_token="</s>")
    other = [[1000 + d * 10 + p for p in range(1 + d % 9)] for d in range(80)]
    tokens.write_indexed_dataset(str(tmp_path / "other"), other)
    text = tokens.TextSource(files, tokenizer, eod_token="</s>")
    with in_process_cluster(producers=1, threads=1) as cluster:
        tokens.create_token_job(cluster.address, "indexed",
                                [str(tmp_path / "text"), str(tmp_path / "other")],
                                consumers=3, **spec())
        job = tokens.create_token_job(cluster.address, "from-text",
                                      [text, str(tmp_path / "other")], consumers=2, **spec())
        info = job.tokens["source_info"][0]
        assert info["dtype"] == "text" and info["num_documents"] == 160
        assert job.tokens["text"][0]["files"] == files
        reference, _ = read_steps(cluster, "indexed", 3)
        # The text job is made only by its own producer: croupier producer cannot tokenize.
        with Producer(cluster.address, "from-text"):
            dealt, state = read_steps(cluster, "from-text", 2, steps=10)
            assert dealt == reference[:10 * B]
            # Resumed at 4 ranks: the rest of the same sequences.
            tokens.create_token_job(cluster.address, "from-text-4", [text, str(tmp_path / "other")],
                                    consumers=4, resume_from=state, **spec())
        with Producer(cluster.address, "from-text-4"):
            rest, _ = read_steps(cluster, "from-text-4", 4)
        assert dealt + rest == reference
    # The lengths were counted once and kept beside the text; a second job finds them there.
    kept = sorted(os.listdir(tmp_path / ".croupier"))
    assert len(kept) == 1 and kept[0].endswith(".lengths.idx"), kept


@pytest.mark.timeout(240)
def test_a_killed_text_producer_changes_no_sequence(tmp_path):
    """Two `croupier produce --job` processes tokenizing; one SIGKILLed a quarter into the epoch
    while two ranks read slowly: every rank's batches hash as with no kill."""
    from service_cluster import Cluster, batch_hashes, kill, read_batches, wait_for_file
    files, tokenizer = write_corpus(tmp_path)
    text = tokens.TextSource(files, tokenizer, eod_token="</s>")
    env = dict(os.environ, CROUPIER_PYTHON=sys.executable)

    def run(name, kill_one):
        with Cluster(tmp_path / name, producer_timeout_ms=1500,
                     dispatcher_args=["--rounds-per-task", "1"]) as cluster:
            tokens.create_token_job(cluster.address, "lm", [text], consumers=2,
                                    **spec(steps_per_epoch=40, weights=None))
            port_file = tmp_path / f"{name}-metrics.port"
            producers = [subprocess.Popen(
                [croupier.croupier_binary(), "produce", "--dispatcher", cluster.address,
                 "--job", "lm"] + (["--metrics-port", "0", "--metrics-port-file", str(port_file)]
                                   if i == 0 else []), env=env, stdout=subprocess.DEVNULL,
                stderr=open(tmp_path / f"{name}-producer{i}.log", "w"), start_new_session=True)
                for i in range(2)]
            try:
                # A window of 2 batches, so that the dead producer holds tasks the other one must
                # make again (the automatic window takes the whole epoch at once).
                outs, procs = cluster.start_ranks("lm", 2, tmp_path / name, 1, "--slow-ms", "100",
                                                  "--prefetch", "2")
                # Rank 0 reads 10 steps (1 of 40 without a kill) while both producers serve.
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and (
                        not outs[0].exists() or
                        len(outs[0].read_text().splitlines()) < (10 if kill_one else 1)):
                    time.sleep(0.05)
                if os.path.exists(JEMALLOC):  # the tokens producer runs itself on jemalloc
                    # Looked at while it serves: it leaves once every rank has read the job.
                    assert producers[0].poll() is None, "the producer left before the job ended"
                    maps = pathlib.Path(f"/proc/{producers[0].pid}/maps").read_text()
                    assert "libjemalloc" in maps
                # Producer 0's own metrics, while it serves: its families, and the object-store
                # counters (all 0: the text is on local disk).
                port = int(wait_for_file(port_file, 30))
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    metrics = r.read().decode()
                assert "croupier_producer_batches_made_total" in metrics, metrics
                assert "croupier_s3_requests_total 0" in metrics, metrics
                if kill_one:
                    kill(producers[1])
                for proc in procs:
                    assert proc.wait(timeout=150) == 0
                if kill_one:
                    assert "expired" in cluster.dispatcher.log_path.read_text()
                return [batch_hashes(read_batches(out)) for out in outs]
            finally:
                for p in producers:
                    kill(p)

    reference = run("reference", False)
    assert [len(r) for r in reference] == [40, 40]
    assert run("killed", True) == reference


@pytest.mark.timeout(120)
def test_text_changed_since_the_job_was_created_is_named(tmp_path):
    files, tokenizer = write_corpus(tmp_path)
    (tmp_path / "c.jsonl.gz").write_bytes(b"")
    with pytest.raises(errors.InvalidArgumentError, match="c.jsonl.gz: a compressed file"):
        from croupier.lm.text import to_spec
        to_spec(tokens.TextSource([str(tmp_path / "c.jsonl.gz")], tokenizer), 0)
    text = tokens.TextSource(files, tokenizer, eod_token="</s>")
    original = open(files[0]).read()
    with in_process_cluster(producers=0, threads=1) as cluster:
        tokens.create_token_job(cluster.address, "lm", [text], consumers=2, **spec(weights=None))
        # A file rewritten (another size) is refused before the producer serves.
        with open(files[0], "a") as f:
            f.write(json.dumps({"text": "w1 w2"}) + "\n")
        with pytest.raises(errors.FailedPreconditionError,
                           match=re.escape(files[0]) + " is [0-9]+ bytes, not [0-9]+"):
            tokens.produce(cluster.address, "lm", timeout=10)
        # The same size, another text: document 0 ("w0 w1 w2 ...") now has a token more, and the
        # batch holding it fails at the rank, naming the document and the file.
        changed = original.replace('"text": "w0 w1 w2', '"text": "a b c w2', 1)
        assert changed != original and len(changed) == len(original)
        with open(files[0], "w") as f:
            f.write(changed)
        with Producer(cluster.address, "lm"):
            with pytest.raises(errors.DataLossError,
                               match=r"document 0 tokenizes to [0-9]+ tokens, not [0-9]+"):
                read_steps(cluster, "lm", 2)
