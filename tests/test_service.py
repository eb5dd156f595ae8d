"""Multi-process tests of the service: real dispatcher, producer and consumer processes on
loopback. Guarantees are checked on content (record ids decoded from the batches, content hashes),
never by counting calls. Every test bounds its time and the Cluster kills every process it started.
"""
import os
import signal
import socket
import subprocess
import time

import pytest

import croupier
from service_cluster import BIN, Cluster, read_batches, rss_bytes, run

FEATURES = "id:int64,label:int64,image:bytes"


@pytest.fixture
def dataset(tmp_path):
    """3,000 records over 3 files; each record's `id` feature is its global record id."""
    data = tmp_path / "data"
    run("synth", "--out", data, "--files", 3, "--records", 3000, "--image-bytes", 256, "--quiet")
    return sorted(data.glob("*.tfrecord"))


@pytest.mark.long
def test_a_stalled_consumer_causes_backpressure_not_growth(tmp_path):
    data = tmp_path / "big"
    # 2,000 records of 32 KiB: 64 MB of batches per epoch, against a 4 MiB producer buffer.
    run("synth", "--out", data, "--files", 2, "--records", 2000, "--image-bytes", 32768, "--quiet")
    files = sorted(data.glob("*.tfrecord"))
    buffer_bytes = 4 << 20
    with Cluster(tmp_path / "cluster") as cluster:
        producer = cluster.add_producer("--buffer-bytes", buffer_bytes)
        cluster.create_job("bp", files, FEATURES, 16, 2, seed=1, epochs=1)
        outs = [tmp_path / f"bp{r}.jsonl" for r in range(2)]
        procs = [cluster.start_consumer("bp", r, 2, outs[r], 1, "--prefetch", "2",
                                        *(("--pause-at-step", "5", "--pause-seconds", "10")
                                          if r == 1 else ())) for r in range(2)]
        time.sleep(2)  # both consumers running; rank 1 soon stops reading
        baseline = rss_bytes(producer.pid)
        peak = baseline
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            peak = max(peak, rss_bytes(producer.pid))
            time.sleep(0.1)
        status = run("status", cluster.address, "--json", env=cluster.env).stdout
        cluster.wait(procs, timeout=60)
    # G5: while a consumer stalls, the producer holds at most its buffer (plus one batch in
    # flight), so its memory grows by no more than that.
    batch_bytes = 16 * (32768 + 100)
    assert peak - baseline <= buffer_bytes + 2 * batch_bytes + (8 << 20), (baseline, peak)
    assert '"bufferedBytes"' in status
    per_rank = [read_batches(o) for o in outs]
    assert len(per_rank[0]) == len(per_rank[1]) == 2000 // 32


def test_unreachable_dispatcher_is_a_clear_error_after_its_deadline(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    proc = run("consume", "--dispatcher", f"127.0.0.1:{port}", "--job", "x", "--rank", 0,
               "--world", 1, "--timeout-ms", 1500, check=False, timeout=30)
    took = time.monotonic() - start
    assert proc.returncode != 0
    assert "DEADLINE_EXCEEDED" in proc.stderr and f"127.0.0.1:{port}" in proc.stderr
    assert took < 10


def test_wrong_token_and_protocol_mismatch_are_refused(tmp_path, dataset):
    with Cluster(tmp_path / "cluster", auth_token="s3cret") as cluster:
        ok = run("status", cluster.address, "--auth-token", "s3cret", env=cluster.env)
        assert "dispatcher" in ok.stdout
        wrong = run("status", cluster.address, "--auth-token", "guess", check=False,
                    env=cluster.env)
        assert wrong.returncode != 0 and "UNAUTHENTICATED" in wrong.stderr
        assert "wrong auth token" in wrong.stderr
        missing = run("status", cluster.address, "--timeout-ms", 3000, check=False,
                      env={k: v for k, v in cluster.env.items() if k != "CROUPIER_AUTH_TOKEN"})
        assert missing.returncode != 0 and "UNAUTHENTICATED" in missing.stderr
        old = run("status", cluster.address, "--auth-token", "s3cret", check=False,
                  env=dict(cluster.env, CROUPIER_TEST_PROTOCOL_VERSION="99"))
        assert old.returncode != 0 and "FAILED_PRECONDITION" in old.stderr
        assert "protocol version mismatch" in old.stderr and "'99'" in old.stderr
        producer = run("producer", "--dispatcher", cluster.address, "--auth-token", "guess",
                       "--connect-timeout-ms", 3000, check=False, timeout=30, env=cluster.env)
        assert producer.returncode != 0 and "UNAUTHENTICATED" in producer.stderr
        dispatcher_log = cluster.dispatcher.log_path.read_text()
    assert "wrong auth token" in dispatcher_log


@pytest.mark.parametrize("change,message", [
    ({"files": "/nonexistent/*.tfrecord"}, "no file matches"),
    ({"features": "id:int64,nope:float32"}, "nope"),
    ({"features": "id:float32"}, "id"),
    ({"features": "image:bytes[3]"}, "image"),
    ({"batch_size": 0}, "batch_size"),
    ({"shuffle": "sideways"}, "sideways"),
    ({"mode": "random"}, "random"),
])
def test_bad_job_specs_are_refused_with_the_reason(tmp_path, dataset, change, message):
    with Cluster(tmp_path / "cluster") as cluster:
        spec = {"files": ",".join(map(str, dataset)), "features": FEATURES, "batch_size": 8,
                "consumers": 2}
        spec.update(change)
        args = ["job", "create", "--dispatcher", cluster.address, "--name", "bad"]
        for key, value in spec.items():
            args += [f"--{key.replace('_', '-')}", value]
        proc = run(*args, check=False, env=cluster.env)
    assert proc.returncode != 0
    assert "INVALID_ARGUMENT" in proc.stderr, proc.stderr
    assert message in proc.stderr


def test_sigterm_stops_dispatcher_and_producer_promptly_and_frees_the_port(tmp_path):
    with Cluster(tmp_path / "cluster") as cluster:
        producer = cluster.add_producer()
        time.sleep(1)
        for proc in (producer, cluster.dispatcher):
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=5) == 0
            assert time.monotonic() - start < 3
        with socket.socket() as s:  # the dispatcher's port can be bound again at once
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", cluster.port))


def test_status_watch_shows_rates_and_input_bound_share(tmp_path, dataset):
    with Cluster(tmp_path / "cluster") as cluster:
        cluster.add_producer()
        cluster.create_job("watched", dataset, FEATURES, 8, 1, seed=1, epochs=1)
        out_file = tmp_path / "w.jsonl"
        consumer = cluster.start_consumer("watched", 0, 1, out_file, 1, "--slow-ms", "30")
        deadline = time.monotonic() + 30
        while not (out_file.exists() and len(out_file.read_text().splitlines()) >= 5):
            assert time.monotonic() < deadline and consumer.poll() is None
            time.sleep(0.05)
        watch = subprocess.Popen([str(BIN), "status", cluster.address, "--watch", "0.3"],
                                 stdout=subprocess.PIPE, text=True, env=cluster.env)
        time.sleep(3)
        watch.kill()
        out = watch.communicate(timeout=10)[0]
        cluster.wait([consumer], timeout=60)
    assert out.count("dispatcher 127.0.0.1") >= 5  # refreshed in place
    assert "batches/s, input-bound" in out and "epoch ends in" in out, out[-1500:]


@pytest.mark.timeout(120)
def test_a_file_cut_short_under_a_running_job_is_a_clear_error_and_the_producer_lives(tmp_path):
    # The producer reads records out of a mapping of the files. A file cut short under that
    # mapping must give the consumer the error that names it, never a SIGBUS that kills the
    # producer. Records of 4 KiB, so that the cut leaves whole mapped pages past the new end.
    from croupier import errors
    data = tmp_path / "data"
    run("synth", "--out", data, "--files", 2, "--records", 400, "--image-bytes", 4096, "--quiet")
    files = sorted(data.glob("*.tfrecord"))
    # A buffer of about 3 batches (of 64 KiB): the producer cannot make epoch 1 ahead, before the
    # cut, while the consumer still reads epoch 0 (it did on a loaded machine).
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster", threads=1,
                                buffer_bytes=200_000) as cluster:
        cluster.create_job("cut", [str(f) for f in files], FEATURES, 16, consumers=1, seed=3,
                           epochs=2)
        consumer = cluster.consumer("cut", 0, 1, timeout=60)
        try:
            first = sum(len(b["id"]) for b in consumer.epoch(0))
            assert first == 400 // 16 * 16  # epoch 0 read every record: the files are mapped
            import time; time.sleep(3)
            size = files[0].stat().st_size
            os.truncate(files[0], size // 3 + 5)
            with pytest.raises(errors.DataLossError) as error:
                for _ in consumer.epoch(1):
                    pass
        finally:
            consumer.close()
        message = str(error.value)
        assert str(files[0]) in message and "cut short" in message, message
        assert "the file changed since it was indexed" in message, message
        producer = cluster.producers[0]
        assert producer.poll() is None, cluster.log_tail(producer)
        assert "SIGBUS" not in cluster.log_tail(producer)
