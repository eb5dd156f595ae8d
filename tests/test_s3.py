"""TFRecord jobs read from an object store (s3:// paths) through the producers' and dispatcher's
S3 client, against moto's S3 server on loopback (tests/moto_store.py): the same deal and the same
bytes as from local files; each kind of misconfiguration failing at once with its cause; faults
injected between croupier and the store (tests/fault_proxy.py) survived with the same bytes; the
producers' reads merged into fewer requests than records, and no more bytes fetched than
delivered but the shared record indexes (a few percent).
Every test bounds its time and stops every process it started."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

import croupier
from croupier import errors
from fault_proxy import FaultProxy
from moto_store import free_port, moto_store
from service_cluster import synth_dataset, wait_for_file

FEATURES = "id:int64,label:int64,image:bytes"
BUCKET = "croupier-data"
RECORDS = 600
BATCH = 10
WORLD = 2


@pytest.fixture(scope="module")
def local_files(tmp_path_factory):
    return synth_dataset(tmp_path_factory.mktemp("data"), RECORDS, files=3, image_bytes=512)


@pytest.fixture(scope="module")
def store(tmp_path_factory, local_files):
    with moto_store(tmp_path_factory.mktemp("moto") / "moto.log") as s:
        s3 = s.s3()
        s3.create_bucket(Bucket=BUCKET)
        for f in local_files:
            s3.upload_file(str(f), BUCKET, f"train/{f.name}")
        # A file beside them that the glob must not take.
        s3.put_object(Bucket=BUCKET, Key="train/sub/other.tfrecord", Body=b"not a record")
        yield s


def s3_counters(port_file):
    """The croupier_s3_* counters of a producer's /metrics."""
    port = int(wait_for_file(port_file, 10))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {line.split()[0][len("croupier_s3_"):]: float(line.split()[1])
            for line in text.splitlines() if line.startswith("croupier_s3_")}


def deal(tmp_path, files, env, monkeypatch, name="s3job", metrics=None, **job):
    """Runs one epoch of the job for WORLD ranks on 2 producers: per rank [(content_hash, ids)],
    seconds, and the work directory. `metrics`: a list that receives each producer's S3
    counters. `job`: more settings of create_job (shuffle, ...)."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with croupier.local_cluster(producers=0, work_dir=tmp_path / name, threads=2) as c:
        port_files = [tmp_path / f"{name}-metrics{n}.port" for n in range(2)]
        for f in port_files:
            c.add_producer("--metrics-port", "0", "--metrics-port-file", f)
        c.create_job(name, files, FEATURES, BATCH, consumers=WORLD, seed=7, epochs=1, **job)
        feeds = [c.consumer(name, r, WORLD) for r in range(WORLD)]
        start = time.monotonic()
        try:
            got = [[], []]
            for batches in zip(*(f.batches(0) for f in feeds)):
                for r, b in enumerate(batches):
                    got[r].append((b.content_hash, b.to_dict()["id"].tolist()))
        finally:
            for f in feeds:
                f.close()
        seconds = time.monotonic() - start
        if metrics is not None:
            metrics.extend(s3_counters(f) for f in port_files)
        return got, seconds, c.work_dir


def check_exactly_once(got):
    steps = RECORDS // (BATCH * WORLD)
    assert [len(r) for r in got] == [steps] * WORLD
    ids = [i for rank in got for _, batch in rank for i in batch]
    assert sorted(ids) == list(range(RECORDS))


def producer_logs(work_dir):
    return "".join(p.read_text() for p in pathlib.Path(work_dir).glob("producer*.log"))


@pytest.mark.timeout(180)
def test_s3_job_deals_the_same_bytes_as_local_files(tmp_path, store, local_files, monkeypatch):
    local, local_s, _ = deal(tmp_path, [str(f) for f in local_files], {}, monkeypatch, "local")
    remote, remote_s, _ = deal(tmp_path, f"s3://{BUCKET}/train/*.tfrecord", store.env(),
                               monkeypatch)
    check_exactly_once(remote)
    assert remote == local
    nbytes = sum(f.stat().st_size for f in local_files)
    print(f"\none epoch of {nbytes} bytes: local {local_s:.2f} s, moto {remote_s:.2f} s "
          f"({nbytes / remote_s / 1e6:.2f} MB/s from moto)")


@pytest.mark.timeout(180)
def test_faults_between_producers_and_store_change_no_byte(tmp_path, store, local_files,
                                                           monkeypatch):
    reference, _, _ = deal(tmp_path, [str(f) for f in local_files], {}, monkeypatch, "local")
    upstream = int(store.endpoint.rsplit(":", 1)[1])
    with FaultProxy(upstream, slow_down=0.08, reset=0.04, stall=0.01, stall_seconds=3,
                    seed=3) as proxy:
        env = store.env(endpoint=proxy.endpoint, CROUPIER_S3_READ_TIMEOUT_SECONDS="1",
                        CROUPIER_S3_MAX_ATTEMPTS="8")
        metrics = []
        got, seconds, work_dir = deal(tmp_path, f"s3://{BUCKET}/train/*.tfrecord", env,
                                      monkeypatch, "faulty", metrics)
        injected = dict(proxy.injected)
    check_exactly_once(got)
    assert got == reference
    assert injected["slow_down"] > 0 and injected["reset"] > 0 and injected["stall"] > 0
    # The producers' /metrics count what they asked of the store (the dispatcher's index reads
    # are not theirs): retries and throttles seen, nothing failed for good.
    total = {k: sum(m[k] for m in metrics) for k in metrics[0]}
    assert total["retries_total"] > 0 and total["throttles_total"] > 0
    assert total["throttles_total"] <= injected["slow_down"]
    assert total["failures_total"] == 0
    assert total["bytes_total"] >= sum(f.stat().st_size for f in local_files) * 0.9
    logs = producer_logs(work_dir)
    assert "[s3] retrying GET s3://" in logs
    assert "503 SlowDown: Please reduce your request rate." in logs
    assert "connection reset, closed or stalled" in logs
    print(f"\ninjected {injected}; {logs.count('[s3] retrying')} retries logged; producers' "
          f"counters {total}; {seconds:.2f} s")


def total(metrics):
    return {k: sum(m[k] for m in metrics) for k in metrics[0]}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("shuffle,most_requests", [("none", 0.1), ("blocks", 0.75)])
def test_records_are_fetched_in_merged_ranges_and_once(tmp_path, store, local_files, monkeypatch,
                                                       shuffle, most_requests):
    # shuffle none reads runs of records: a batch's, and the batches' a producer fetches ahead
    # together, merge into few requests. blocks (windows of 2 blocks of 20 records) deals a
    # window's records over 4 batches, fetched ahead together: their neighbours merge too.
    job = dict(shuffle=shuffle)
    if shuffle == "blocks":
        job.update(block_size=20, window_blocks=2)
    reference, _, _ = deal(tmp_path, [str(f) for f in local_files], {}, monkeypatch,
                           f"local-{shuffle}", **job)
    metrics = []
    got, _, work_dir = deal(tmp_path, f"s3://{BUCKET}/train/*.tfrecord", store.env(),
                            monkeypatch, f"merged-{shuffle}", metrics, **job)
    check_exactly_once(got)
    assert got == reference
    counts = total(metrics)
    # Every record was asked for as a range, and served by fewer requests than records.
    assert counts["ranges_total"] == RECORDS
    assert counts["requests_total"] <= most_requests * RECORDS, counts
    # Bytes fetched: the records delivered, and each producer's read of the shared indexes
    # (8 bytes a record, one GET an object), never a whole object scanned.
    delivered = sum(f.stat().st_size for f in local_files)
    assert delivered <= counts["bytes_total"] <= 1.05 * delivered, counts
    assert "could not share the index" not in producer_logs(work_dir)
    print(f"\n{shuffle}: producers' counters {counts}; "
          f"{counts['bytes_total'] / delivered:.3f} bytes fetched per byte delivered")


@pytest.mark.timeout(60)
def test_the_dispatcher_keeps_each_objects_index_in_the_store(tmp_path, store, monkeypatch):
    # The job's creation indexes the objects and stores their indexes beside them, where the
    # producers find them; a glob's wildcards do not reach them (a leading dot). The dispatcher's
    # /metrics counts what it asked of the store.
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    port_file = tmp_path / "metrics.port"
    with croupier.local_cluster(producers=0, work_dir=tmp_path / "c", dispatcher_args=[
            "--metrics-port", "0", "--metrics-port-file", str(port_file)]) as c:
        c.create_job("indexed", f"s3://{BUCKET}/train/*.tfrecord", FEATURES, BATCH,
                     consumers=WORLD, epochs=1)
        port = int(wait_for_file(port_file, 10))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    counters = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                if line.startswith("croupier_s3_")}
    # At least the listing and each object's index asked for (stored by an earlier test, or not
    # there yet: an answer, not a failure, and the object is scanned and its index stored).
    assert counters["croupier_s3_requests_total"] >= 1 + 3, counters
    assert counters["croupier_s3_failures_total"] == 0, counters
    assert not any(name.startswith("croupier_s3_batches") for name in counters), counters
    keys = [o["Key"] for o in store.s3().list_objects_v2(
        Bucket=BUCKET, Prefix=".croupier-index/")["Contents"]]
    assert sorted(k for k in keys if k.endswith(".crindex")) == sorted(
        f".croupier-index/{BUCKET}/train/{name}.crindex"
        for name in ("part-00000-of-00003.tfrecord", "part-00001-of-00003.tfrecord",
                     "part-00002-of-00003.tfrecord"))
    # And the pattern's record counts, beside them (docs/formats.md).
    counts = [k for k in keys if not k.endswith(".crindex")]
    assert len(counts) == 1 and re.fullmatch(
        rf"\.croupier-index/{BUCKET}/train/pattern-[0-9a-f]{{8}}\.crcounts", counts[0]), keys


@pytest.mark.timeout(180)
def test_faults_under_merged_reads_and_read_ahead_change_no_byte(tmp_path, store, local_files,
                                                                 monkeypatch):
    job = dict(shuffle="blocks", block_size=20, window_blocks=2)
    reference, _, _ = deal(tmp_path, [str(f) for f in local_files], {}, monkeypatch, "local",
                           **job)
    upstream = int(store.endpoint.rsplit(":", 1)[1])
    with FaultProxy(upstream, slow_down=0.15, reset=0.1, stall=0.03, stall_seconds=3,
                    seed=5) as proxy:
        env = store.env(endpoint=proxy.endpoint, CROUPIER_S3_READ_TIMEOUT_SECONDS="1",
                        CROUPIER_S3_MAX_ATTEMPTS="10")
        metrics = []
        got, _, work_dir = deal(tmp_path, f"s3://{BUCKET}/train/*.tfrecord", env, monkeypatch,
                                "faulty-merged", metrics, **job)
        injected = dict(proxy.injected)
    check_exactly_once(got)
    assert got == reference
    counts = total(metrics)
    assert counts["retries_total"] > 0 and counts["failures_total"] == 0
    assert counts["requests_total"] - counts["retries_total"] < RECORDS
    print(f"\ninjected {injected}; producers' counters {counts}")


@pytest.mark.timeout(180)
def test_the_request_benchmark_runs_as_documented_and_a_producer_asks_no_head():
    # bench/bench_s3_requests.py, as docs/benchmarks.md runs it, on fewer objects: a producer
    # that opens a job asks the store no HEAD of its objects, only one GET of each index.
    root = pathlib.Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, str(root / "bench" / "bench_s3_requests.py"), "--files", "3",
         "--records", "300"], capture_output=True, text=True, timeout=150, check=True).stdout
    rows = {(r["job"], r["phase"]): r["requests"]
            for r in map(json.loads, (line for line in out.splitlines() if line.startswith("{")))}
    # A producer asks for the index of the object its first batch needs (and, meanwhile, of
    # those of the other tasks it holds): at least one, at most each object's once.
    for job in ("first", "second"):
        producer = rows[(job, "producer, to the first batch")]
        assert producer["HEAD data"] == 0 and 1 <= producer["GET index"] <= 3, out
        assert producer["PUT index"] == 0 and producer["GET list"] == 0, out
        assert producer["GET counts"] == 0 and producer["PUT counts"] == 0, out
    # The first job's creation lists the objects (each one's size, Last-Modified and ETag come
    # with the listing), looks for the pattern's kept counts (a GET, none there) and for the
    # objects' indexes (3 GETs, none there), scans each object in one GET and asks its size
    # after (3 HEADs: did it change meanwhile?), stores its index (3 PUTs), reads one record to
    # check the features (a 4th GET), and keeps the pattern's counts (a PUT).
    assert rows[("first", "create_job")] == {
        "HEAD data": 3, "GET data": 4, "GET index": 3, "PUT index": 3, "GET counts": 1,
        "PUT counts": 1, "GET list": 1}, out
    # The second finds the counts kept: the listing, their GET, the index of the object whose
    # record it checks and that record. No HEAD, no other index.
    assert rows[("second", "create_job")] == {
        "HEAD data": 0, "GET data": 1, "GET index": 1, "PUT index": 0, "GET counts": 1,
        "PUT counts": 0, "GET list": 1}, out


@pytest.mark.timeout(150)
def test_the_parquet_benchmark_runs_as_documented_and_reads_a_row_group_a_request():
    # bench/bench_s3_parquet.py, as docs/benchmarks.md runs it, on fewer rows: every system reads
    # the rows; croupier's client asks one GET a row group a batch touches, the footers and the
    # listing, and fetches about the files' bytes.
    root = pathlib.Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, str(root / "bench" / "bench_s3_parquet.py"), "--files", "2",
         "--rows", "5120", "--row-group", "1000", "--rounds", "1"],
        capture_output=True, text=True, timeout=120, check=True).stdout
    result = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert set(result["runs"]) == {"local", "s3", "s3_pyarrow"}, out
    s3 = result["runs"]["s3"][0]
    # 6 row groups (2 files of 2,560 rows in groups of 1,000), 2 footers (read once, when the
    # source is made: each file's last 64 KiB), 1 listing.
    assert s3["requests"] == 6 + 2 + 1, out
    assert 1.0 <= s3["bytes"] / result["file_bytes"] <= 1.1, out
    assert "| s3 |" in out and "/ s3_pyarrow" in out, out


@pytest.mark.long
@pytest.mark.timeout(240)
def test_the_parquet_job_benchmark_runs_as_documented_and_fetches_each_row_group_once():
    # bench/bench_s3_parquet_job.py, as docs/benchmarks.md runs it, on fewer rows: the three
    # jobs read every row; with the copies the producer asks one GET a row group and fetches the
    # files' row groups once, where alone its 4 workers asked more.
    root = pathlib.Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, str(root / "bench" / "bench_s3_parquet_job.py"), "--files", "2",
         "--rows", "8000", "--row-group", "1000", "--batch", "64", "--rounds", "1"],
        capture_output=True, text=True, timeout=220, check=True).stdout
    result = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert set(result["runs"]) == {"local", "s3", "s3_alone"}, out
    shared, alone = result["runs"]["s3"][0], result["runs"]["s3_alone"][0]
    assert shared["requests"] == 8 and shared["copies"] > 0, out  # 8 row groups
    assert shared["bytes"] <= result["file_bytes"], out
    assert alone["requests"] > shared["requests"] and alone["copies"] == 0, out
    assert "| s3_alone |" in out and "ranges read from copies" in out, out


def read_until_it_fails(cluster, job, change):
    """Reads job's one rank until a batch fails; `change()` runs after the first batch. Returns
    the ids delivered, the error, and the seconds from change() to the error."""
    ids = []
    with cluster.consumer(job, 0, 1) as feed:
        batches = iter(feed.batches(0))
        ids += next(batches).to_dict()["id"].tolist()
        change()
        changed = time.monotonic()
        with pytest.raises(errors.DataLossError) as e:
            for b in batches:
                ids += b.to_dict()["id"].tolist()
    return ids, str(e.value), time.monotonic() - changed


@pytest.mark.timeout(120)
def test_an_object_deleted_or_replaced_under_a_job_fails_the_batches_that_need_it(
        tmp_path, store, local_files, monkeypatch):
    # In a bucket of its own: the other tests list theirs. Records are in file order (shuffle
    # none), 200 to a file, so batches 0-39 need only the first two objects and batch 40 is the
    # first one of the third. Each batch takes 50 ms more to make, so that the producer is still
    # far from the third object when it is changed, after the first batch came.
    bucket = "croupier-gone"
    s3 = store.s3()
    s3.create_bucket(Bucket=bucket)
    third = f"gone/{local_files[2].name}"
    gone = f"s3://{bucket}/{third}"

    def upload():
        for f in local_files:
            s3.upload_file(str(f), bucket, f"gone/{f.name}")

    for k, v in store.env().items():
        monkeypatch.setenv(k, v)

    def job(name, change, before_producer=lambda: None):
        upload()
        with croupier.local_cluster(producers=0, work_dir=tmp_path / name) as c:
            c.create_job(name, f"s3://{bucket}/gone/*.tfrecord", FEATURES, BATCH, consumers=1,
                         epochs=1, shuffle="none")
            before_producer()
            c.add_producer("--threads", "1", "--test-make-delay-ms", "50")
            return read_until_it_fails(c, name, change)

    # Deleted while the job reads it: every batch before the third object's comes whole and in
    # order; the first that needs it fails, naming the batch, the record, the object, the byte
    # range and the store's answer.
    ids, message, waited = job("mid", lambda: s3.delete_object(Bucket=bucket, Key=third))
    assert ids == list(range(400))
    assert f"job 'mid' epoch 0 batch 40: record 0 of {gone} (byte 0): {gone} bytes [0, " in message
    assert "404 NoSuchKey: The specified key does not exist." in message
    assert waited < 30

    # Deleted after the job was created, before a producer opened it: the same. The producer
    # takes each object as the job's creation found it, without asking the store about it.
    ids, message, _ = job("before", lambda: None,
                          before_producer=lambda: s3.delete_object(Bucket=bucket, Key=third))
    assert ids == list(range(400))
    assert f"job 'before' epoch 0 batch 40: record 0 of {gone} (byte 0)" in message
    assert "404 NoSuchKey" in message

    # Replaced by an object of the very same size and record layout (the second file's records):
    # read as the job's index says, it would deal records 200-399 twice. Every read asks for the
    # object the job was created on (If-Match its ETag), and the store refuses.
    assert local_files[1].stat().st_size == local_files[2].stat().st_size
    ids, message, waited = job("replaced", lambda: s3.upload_file(str(local_files[1]), bucket,
                                                                 third))
    assert ids == list(range(400))
    assert (f"job 'replaced' epoch 0 batch 40: record 0 of {gone} (byte 0): {gone} changed "
            f"since it was indexed (it is no longer the object of ETag ") in message
    assert "412 PreconditionFailed" in message
    assert waited < 30


def create_fails(tmp_path, env, files, monkeypatch, name):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with croupier.local_cluster(producers=0, work_dir=tmp_path / name) as c:
        start = time.monotonic()
        with pytest.raises(errors.Error) as e:
            c.create_job(name, files, FEATURES, BATCH, consumers=WORLD, epochs=1)
        return str(e.value), time.monotonic() - start


@pytest.mark.timeout(60)
def test_missing_objects_are_named(tmp_path, store, monkeypatch):
    message, seconds = create_fails(tmp_path, store.env(), f"s3://{BUCKET}/nothing/*.tfrecord",
                                    monkeypatch, "nokey")
    assert f"no file matches 's3://{BUCKET}/nothing/*.tfrecord'" in message
    message, _ = create_fails(tmp_path, store.env(), f"s3://{BUCKET}/train/absent.tfrecord",
                              monkeypatch, "nokey2")
    assert f"no file matches 's3://{BUCKET}/train/absent.tfrecord'" in message
    message, _ = create_fails(tmp_path, store.env(), "s3://no-such-bucket/train/*.tfrecord",
                              monkeypatch, "nobucket")
    assert "listing s3://no-such-bucket/train/*: 404 NoSuchBucket" in message
    assert seconds < 10


@pytest.mark.timeout(60)
def test_wrong_credentials_are_named(tmp_path, store, monkeypatch):
    files = f"s3://{BUCKET}/train/*.tfrecord"
    message, seconds = create_fails(tmp_path, store.env(AWS_ACCESS_KEY_ID="AKIANOSUCHKEY"),
                                    files, monkeypatch, "badkey")
    assert "403 InvalidAccessKeyId: The AWS Access Key Id you provided does not exist" in message
    assert seconds < 10
    message, _ = create_fails(tmp_path, store.env(AWS_SECRET_ACCESS_KEY="wrong"), files,
                              monkeypatch, "badsecret")
    assert "403 SignatureDoesNotMatch" in message


@pytest.mark.timeout(60)
def test_unreachable_endpoint_is_named(tmp_path, store, monkeypatch):
    endpoint = f"http://127.0.0.1:{free_port()}"
    message, seconds = create_fails(tmp_path, store.env(endpoint=endpoint),
                                    f"s3://{BUCKET}/train/*.tfrecord", monkeypatch, "unreachable")
    assert f"could not connect (endpoint {endpoint})" in message
    assert seconds < 10


@pytest.mark.timeout(60)
def test_no_credentials_at_all_is_named(tmp_path, store, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", store.endpoint)
    message, _ = create_fails(tmp_path, {}, f"s3://{BUCKET}/train/*.tfrecord", monkeypatch,
                              "nocreds")
    assert "no S3 credentials" in message and str(tmp_path / "none") in message


# --- Parquet from objects: a map job's ParquetSource (croupier.object_store, pyarrow's S3) ------

PARQUET_ROWS = 80


@pytest.fixture(scope="module")
def parquet_files(tmp_path_factory, store):
    """Two Parquet files of 40 rows (row groups of 16), on local disk and in the store under
    parquet/, with an object beside them in parquet/sub/ that the glob must not take."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import numpy as np
    folder = tmp_path_factory.mktemp("parquet")
    s3 = store.s3()
    files = []
    for k in range(2):
        ids = np.arange(k * 40, (k + 1) * 40, dtype=np.int64)
        table = pa.table({"id": ids, "label": (ids % 10).astype(np.int32),
                          "text": [f"row {i}" for i in ids],
                          "tokens": pa.array([list(range(int(i) % 5)) for i in ids],
                                             type=pa.list_(pa.int32()))})
        path = folder / f"part{k}.parquet"
        pq.write_table(table, path, row_group_size=16)
        s3.upload_file(str(path), BUCKET, f"parquet/{path.name}")
        files.append(str(path))
    s3.put_object(Bucket=BUCKET, Key="parquet/sub/other.parquet", Body=b"not parquet")
    return files


@pytest.mark.timeout(180)
def test_a_parquet_map_job_from_objects_deals_the_same_batches_as_from_local_files(
        tmp_path, store, parquet_files, monkeypatch):
    """`croupier produce` of a ParquetSource over s3://BUCKET/parquet/*.parquet, 2 ranks: the
    plan's records, each once with equal steps, in the same batch bytes as from the local files."""
    from test_produce import check_against_plan, run_job
    local = run_job(tmp_path / "local", kind="parquet", files=parquet_files,
                    records=PARQUET_ROWS, batch_size=4, epochs=1)
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    remote = run_job(tmp_path / "s3", kind="parquet", files=f"s3://{BUCKET}/parquet/*.parquet",
                     records=PARQUET_ROWS, batch_size=4, epochs=1)
    check_against_plan(remote, PARQUET_ROWS, 4, seed=5, epochs=1)
    assert remote == local


@pytest.mark.timeout(60)
def test_a_parquet_source_names_a_missing_object_a_wrong_key_and_an_unreachable_store(
        store, parquet_files, monkeypatch):
    from croupier.parquet import ParquetSource
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    source = ParquetSource(f"s3://{BUCKET}/parquet/part*.parquet")
    assert source.paths == [f"s3://{BUCKET}/parquet/part{k}.parquet" for k in range(2)]
    assert len(source) == PARQUET_ROWS
    assert source.get_many([41])[0]["text"] == b"row 41"
    with pytest.raises(errors.NotFoundError, match=f"s3://{BUCKET}/parquet/absent.parquet"):
        ParquetSource(f"s3://{BUCKET}/parquet/absent.parquet")
    with pytest.raises(errors.NotFoundError, match="no object matches"):
        ParquetSource(f"s3://{BUCKET}/nothing/*.parquet")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    # croupier's S3 client's errors, as for a TFRecord job's objects: the object and the answer.
    with pytest.raises(errors.PermissionDeniedError,
                       match=f"s3://{BUCKET}/parquet/part0.parquet: 403 Forbidden: refused "
                             "without a reason .*check the access key and secret"):
        ParquetSource(f"s3://{BUCKET}/parquet/part0.parquet")
    with pytest.raises(errors.PermissionDeniedError, match="403 SignatureDoesNotMatch"):
        ParquetSource(f"s3://{BUCKET}/parquet/*.parquet")
    endpoint = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("CROUPIER_S3_MAX_ATTEMPTS", "2")
    start = time.monotonic()
    with pytest.raises(errors.UnavailableError, match=f"could not connect \\(endpoint {endpoint}"):
        ParquetSource(f"s3://{BUCKET}/parquet/part0.parquet")
    assert time.monotonic() - start < 10


def run_to_the_end(work_dir, world=2, epochs=1, **opts):
    """The map job of run_job (test_produce.py) on one producer, which is left to end by itself
    once the ranks have read the job: each rank's batches, and the producer's output (its
    summary lines last)."""
    from service_cluster import Cluster, read_batches
    from test_produce import start_producer, wait_for_job
    with Cluster(work_dir, producer_timeout_ms=1500) as cluster:
        producer = start_producer(cluster, "m", "producer0", consumers=world, epochs=epochs,
                                  **opts)
        wait_for_job(cluster, "m")
        outs, ranks = cluster.start_ranks("m", world, work_dir, epochs)
        cluster.wait(ranks, timeout=120)
        assert producer.wait(timeout=60) == 0, producer.log_path.read_text()[-3000:]
        return [read_batches(o) for o in outs], producer.log_path.read_text()


@pytest.mark.long
@pytest.mark.timeout(180)
def test_faults_between_a_parquet_source_and_the_store_change_no_byte(
        tmp_path, store, parquet_files, monkeypatch):
    """The map job of the test above through the fault proxy (503 SlowDown, resets mid-body and
    stalls on the ranged GETs): croupier's client retries, and every batch is the same."""
    from test_produce import run_job
    local = run_job(tmp_path / "local", kind="parquet", files=parquet_files,
                    records=PARQUET_ROWS, batch_size=4, epochs=1)
    upstream = int(store.endpoint.rsplit(":", 1)[1])
    with FaultProxy(upstream, slow_down=0.1, reset=0.05, stall=0.02, stall_seconds=3,
                    seed=4) as proxy:
        env = store.env(endpoint=proxy.endpoint, CROUPIER_S3_READ_TIMEOUT_SECONDS="1",
                        CROUPIER_S3_MAX_ATTEMPTS="10")
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        remote, log = run_to_the_end(tmp_path / "s3", kind="parquet",
                                     files=f"s3://{BUCKET}/parquet/*.parquet",
                                     records=PARQUET_ROWS, batch_size=4, epochs=1, workers=2)
        injected = dict(proxy.injected)
    assert remote == local
    assert injected["slow_down"] > 0 and injected["reset"] > 0, injected
    # croupier's S3 client retried (in the producer and its two worker processes), and the
    # producer's summary counts every process's requests: retries and throttles, none failed.
    assert "[s3] retrying GET s3://" in log, log[-3000:]
    assert "503 SlowDown" in log, log[-3000:]
    requests, nbytes, retries, throttles, failed, _, _ = object_store_counts(log)
    assert retries > 0 and 0 < throttles <= injected["slow_down"] and failed == 0, \
        (requests, nbytes, retries, throttles, failed)
    # The row groups, at most the files' bytes (the footers were read before produce() began).
    assert 0 < nbytes <= sum(pathlib.Path(f).stat().st_size for f in parquet_files)
    print(f"\ninjected {injected}; producer: {requests} requests, {nbytes} bytes, {retries} "
          f"retries ({throttles} throttled)")


@pytest.mark.long
@pytest.mark.timeout(300)
def test_a_parquet_job_from_objects_on_three_producers_one_sigkilled_deals_the_planned_bytes(
        tmp_path, store, parquet_files, monkeypatch):
    """The Parquet job from the store on 3 producers of 2 workers each (each with its copies),
    producer 0 SIGKILLed mid-epoch and another started: every rank's batches, by content hash,
    are the plan's made from the local files, each record once per epoch, in 2 epochs."""
    from test_produce import batch_hashes, planned_hashes, run_job
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    killed = run_job(tmp_path / "killed", producers=3, workers=2, kill_after=3, kind="parquet",
                     files=f"s3://{BUCKET}/parquet/*.parquet", records=PARQUET_ROWS,
                     batch_size=4)
    assert [batch_hashes(r) for r in killed] == planned_hashes(
        kind="parquet", files=parquet_files, records=PARQUET_ROWS, batch_size=4)


def left_directories():
    """The producers' directories on /dev/shm whose producer process is gone."""
    left = []
    for d in pathlib.Path("/dev/shm").glob("croupier-cache-*-*-*"):
        try:
            os.kill(int(d.name.split("-")[3]), 0)
        except ProcessLookupError:
            left.append(d)
        except (ValueError, PermissionError):
            pass
    return left


def object_store_counts(log):
    """The counts of the producer's summary line: requests, bytes, retries, throttles, failures,
    and the ranges and bytes read from its copies (0 when it shared none)."""
    counts = re.search(r"object store: (\d+) requests, (\d+) bytes, (\d+) retries \((\d+) "
                       r"throttled\), (\d+) failed(?:; (\d+) ranges \((\d+) bytes\) read from "
                       r"the producer's copies)?", log)
    assert counts, log[-3000:]
    return [int(n or 0) for n in counts.groups()]


@pytest.mark.long
@pytest.mark.timeout(240)
def test_a_parquet_map_jobs_workers_fetch_each_row_group_once_for_all(
        tmp_path, store, parquet_files, monkeypatch):
    """The Parquet job on 4 worker processes, in order (shuffle none: the 4 batches of a row
    group go to different workers): each row group is fetched once for all of them (the bytes
    fetched at most the files'; the other workers read the producer's copies on /dev/shm), where
    with the copies turned off (CROUPIER_S3_SHARED_READ_BYTES=0) each worker fetches the row
    groups it needs, as all did before the copies. The batches are the same three ways: from
    local files, and from the store with and without the copies."""
    opts = dict(kind="parquet", records=PARQUET_ROWS, batch_size=4, epochs=1, workers=4,
                shuffle="none")
    local, _ = run_to_the_end(tmp_path / "local", files=parquet_files, **opts)
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    files = sum(pathlib.Path(f).stat().st_size for f in parquet_files)
    before = left_directories()
    shared, log = run_to_the_end(tmp_path / "shared", files=f"s3://{BUCKET}/parquet/*.parquet",
                                 **opts)
    requests, nbytes, _, _, failed, copies, copy_bytes = object_store_counts(log)
    assert shared == local
    # The 6 row groups of the 2 files (16, 16 and 8 rows each), one GET each (the footers were
    # read before produce() began).
    assert requests == 6 and 0 < nbytes <= files and failed == 0, (requests, nbytes, files)
    assert copies > 0 and copy_bytes > 0, log[-3000:]
    # The producer removed its copies as it ended: no directory left by a process that is gone.
    assert not [d for d in left_directories() if d not in before], left_directories()
    monkeypatch.setenv("CROUPIER_S3_SHARED_READ_BYTES", "0")
    alone, log = run_to_the_end(tmp_path / "alone", files=f"s3://{BUCKET}/parquet/*.parquet",
                                **opts)
    requests_alone, nbytes_alone, _, _, _, copies_alone, _ = object_store_counts(log)
    assert alone == local
    # (How many more depends on which workers made which batches: 14 to 17 GETs in three runs.)
    assert copies_alone == 0 and requests_alone > requests, (requests_alone, nbytes_alone)
    print(f"\nfile bytes {files}; shared: {requests} requests, {nbytes} bytes, {copies} ranges "
          f"from copies; alone: {requests_alone} requests, {nbytes_alone} bytes")


def test_the_copies_take_the_settings_bytes_and_at_most_half_the_free_space(tmp_path,
                                                                          monkeypatch):
    """The capacity of a map producer's copies: CROUPIER_S3_SHARED_READ_BYTES (256 MiB unset, 0
    none), never more than half of what /dev/shm has free when the producer starts."""
    from croupier import object_store
    from croupier.map import cache_dirs
    monkeypatch.delenv("CROUPIER_S3_SHARED_READ_BYTES", raising=False)
    try:
        assert object_store.share_reads(str(tmp_path / "r")) == 256 << 20
        assert object_store.share_reads(str(tmp_path / "r"), most=1000) == 1000
        monkeypatch.setenv("CROUPIER_S3_SHARED_READ_BYTES", "4096")
        assert object_store.share_reads(str(tmp_path / "r"), most=1 << 30) == 4096
        monkeypatch.setenv("CROUPIER_S3_SHARED_READ_BYTES", "0")
        assert object_store.share_reads(str(tmp_path / "r")) == 0
    finally:
        object_store.share_reads(None)
    monkeypatch.delenv("CROUPIER_S3_SHARED_READ_BYTES")
    asked = []
    real = object_store.share_reads

    def recording(directory, most=None):
        asked.append((directory, most))
        return real(directory, most)

    class Free:  # 10 pages free
        f_bavail, f_frsize = 10, 4096
    monkeypatch.setattr(object_store, "share_reads", recording)
    monkeypatch.setattr(cache_dirs.os, "statvfs", lambda root: Free())
    with cache_dirs.shared_reads(2) as path:
        assert path is not None and not os.path.exists(path)  # made by the first read
    assert asked[0] == (path, 5 * 4096) and asked[-1] == (None, None)
    with cache_dirs.shared_reads(0) as none:
        assert none is None


@pytest.mark.timeout(60)
def test_a_malformed_shared_read_capacity_is_named(tmp_path, store, parquet_files, monkeypatch):
    """CROUPIER_S3_SHARED_READ_BYTES that is not a count fails the producer at once, naming it."""
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("CROUPIER_S3_SHARED_READ_BYTES", "lots")
    from service_cluster import Cluster
    from test_produce import start_producer
    with Cluster(tmp_path / "c", producer_timeout_ms=1500) as cluster:
        producer = start_producer(cluster, "m", "producer0", kind="parquet",
                                  files=f"s3://{BUCKET}/parquet/*.parquet", records=PARQUET_ROWS,
                                  batch_size=4, epochs=1, consumers=2, workers=2)
        assert producer.wait(timeout=45) != 0
        log = producer.log_path.read_text()
    assert "CROUPIER_S3_SHARED_READ_BYTES='lots' is not a whole number" in log, log[-2000:]


@pytest.mark.timeout(60)
def test_a_parquet_source_forked_counts_its_reads_in_the_parents_counters(
        store, parquet_files, monkeypatch):
    """A ParquetSource made in one process and read in a child forked from it (as a map job's
    workers are): the child makes a client of its own (the parent's threads and connections are
    not its), reads the rows, and its requests show in the parent's process counters, which a
    producer's croupier_s3_* metrics and its summary report."""
    from croupier import object_store
    from croupier.parquet import ParquetSource
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    source = ParquetSource(f"s3://{BUCKET}/parquet/*.parquet")
    assert source.get_many([3])[0]["id"] == 3  # the parent's client has read and is pooled
    before = object_store.process_stats()
    pid = os.fork()
    if pid == 0:  # the child: every row, then out without Python's teardown
        try:
            rows = source.get_many(list(range(PARQUET_ROWS)))
            os._exit(0 if [int(r["id"]) for r in rows] == list(range(PARQUET_ROWS)) else 3)
        except BaseException:
            os._exit(4)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child did not read the rows within 30 s")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0
    after = object_store.process_stats()
    # Rows 16 to 79 lie in row groups the parent never read: at least those 5 GETs.
    assert after["requests"] - before["requests"] >= 5, (before, after)
    assert after["bytes"] > before["bytes"]


@pytest.mark.timeout(120)
def test_a_map_producer_serves_its_metrics_with_the_object_store_counters(
        tmp_path, store, parquet_files, monkeypatch):
    """`croupier produce --metrics-port 0 --metrics-port-file F` of the Parquet job on two worker
    processes: its /metrics has the croupier_producer_* families and the croupier_s3_* counters
    (rank 0 of 2 reads its epoch; the job has not ended, so the producer still serves). That they
    count the workers' reads is shown by the test above, on the same counters."""
    from service_cluster import Cluster, read_batches
    from test_produce import start_producer, wait_for_job
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    port_file = tmp_path / "metrics.port"
    with Cluster(tmp_path / "c", producer_timeout_ms=1500) as cluster:
        start_producer(cluster, "m", "producer0", kind="parquet",
                       files=f"s3://{BUCKET}/parquet/*.parquet", records=PARQUET_ROWS,
                       batch_size=4, epochs=1, consumers=2, workers=2, metrics_port=0,
                       metrics_port_file=str(port_file))
        wait_for_job(cluster, "m")
        out = tmp_path / "rank0.jsonl"
        cluster.wait([cluster.start_consumer("m", 0, 2, out, 1)], timeout=60)
        assert len(read_batches(out)) == PARQUET_ROWS // 4 // 2
        counters = s3_counters(port_file)
        port = int(port_file.read_text())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    assert "croupier_producer_batches_served_total" in text
    assert counters["requests_total"] >= 6 and counters["failures_total"] == 0, counters
    assert counters["bytes_total"] > 0, counters
    assert "shared_reads_total" in counters and "shared_read_bytes_total" in counters, counters


# --- Tokens jobs from objects: Megatron indexed datasets in the store ------------------------


@pytest.mark.timeout(180)
def test_a_tokens_job_from_objects_deals_the_same_sequences_as_from_local_files(
        tmp_path, store, monkeypatch):
    """Two indexed datasets (uint16 and int32) on local disk and in the store under lm/: a
    best_fit tokens job over s3://BUCKET/lm/web and .../code deals, for 2 ranks, the sequences
    of the job over the local files, bit for bit; its producer reads each source's tokens of a
    batch together (a few merged GETs a batch, not one per document piece)."""
    from croupier import tokens
    from test_tokens import B, L, documents, read_steps
    folder = tmp_path / "tokens"
    folder.mkdir()
    tokens.write_indexed_dataset(str(folder / "web"), documents(0, 200), dtype="uint16")
    tokens.write_indexed_dataset(str(folder / "code"), documents(1, 120), dtype="int32")
    s3 = store.s3()
    for name in ("web", "code"):
        for ext in (".bin", ".idx"):
            s3.upload_file(str(folder / (name + ext)), BUCKET, f"lm/{name}{ext}")
    settings = dict(sequence_length=L, global_batch=B, steps_per_epoch=10, epochs=1, seed=5,
                    packing="best_fit", weights=[(0, [3, 1]), (6, [1, 1])], pad_id=-1)
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "local", threads=1) as c:
        tokens.create_token_job(c.address, "lm", [str(folder / "web"), str(folder / "code")],
                                consumers=2, **settings)
        local, _ = read_steps(c, "lm", 2)
    for k, v in store.env().items():
        monkeypatch.setenv(k, v)
    with croupier.local_cluster(producers=0, work_dir=tmp_path / "s3", threads=1) as c:
        port_file = tmp_path / "metrics.port"
        c.add_producer("--metrics-port", "0", "--metrics-port-file", port_file)
        tokens.create_token_job(c.address, "lm", [f"s3://{BUCKET}/lm/web",
                                                  f"s3://{BUCKET}/lm/code"],
                                consumers=2, **settings)
        remote, _ = read_steps(c, "lm", 2)
        counters = s3_counters(port_file)
    assert remote == local and len(remote) == 10 * B
    # A batch's tokens of each source are asked for in one batched read (ReadRanges: ranges
    # counted), its documents' spans run at once; a read per piece (Read) counts no range. The
    # documents of a batch are scattered by the plan's permutations, so the spans are about as
    # many as the documents: one GET each, at most (beside opening the two sources).
    print(f"\n{counters}")
    assert counters["ranges_total"] > 0, counters
    assert counters["requests_total"] <= counters["ranges_total"] + 8, counters
