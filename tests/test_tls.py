"""TLS on both planes with real processes: a whole run over mutual TLS checked by content, and every
refusal (wrong CA, expired certificate, no client certificate, plaintext to a TLS port and TLS to a
plaintext one) as a clear error naming the address and the cause. Certificates are made at test
time by tests/tls_certs.sh with the openssl command-line tool.
"""
import socket
import ssl
import struct
import subprocess
import time

import pytest

from service_cluster import ROOT, Cluster, read_batches, run, synth_dataset

FEATURES = "id:int64,label:int64,image:bytes"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(["sh", str(ROOT / "tests" / "tls_certs.sh"), str(out)], check=True,
                   timeout=60)
    return out


def tls_env(certs, cert="server", ca="ca"):
    """The environment that gives every croupier process its TLS files."""
    env = {"CROUPIER_SHM": "off"}  # batches over TCP (so over TLS), not shared memory
    if cert:
        env["CROUPIER_TLS_CERT"] = str(certs / f"{cert}.pem")
        env["CROUPIER_TLS_KEY"] = str(certs / f"{cert}.key")
    if ca:
        env["CROUPIER_TLS_CA"] = str(certs / f"{ca}.pem")
    return env


def tls_flags(certs, cert="client", ca="ca"):
    flags = []
    if cert:
        flags += ["--tls-cert", certs / f"{cert}.pem", "--tls-key", certs / f"{cert}.key"]
    if ca:
        flags += ["--tls-ca", certs / f"{ca}.pem"]
    return flags


def no_tls(env):
    return {k: v for k, v in env.items() if not k.startswith("CROUPIER_TLS_")}


@pytest.fixture
def dataset(tmp_path):
    return synth_dataset(tmp_path / "data", 1200, files=2)


def test_a_whole_run_over_mutual_tls_delivers_every_record_once(tmp_path, dataset, certs):
    import croupier
    with Cluster(tmp_path / "cluster", env=tls_env(certs)) as cluster:
        for _ in range(2):
            cluster.add_producer()
        cluster.create_job("train", dataset, FEATURES, 16, 3, seed=5, epochs=1)
        outs = [tmp_path / f"rank{r}.jsonl" for r in range(3)]
        procs = [cluster.start_consumer("train", r, 3, outs[r], 1) for r in range(3)]
        cluster.wait(procs, timeout=90)
        dispatcher_log = cluster.dispatcher.log_path.read_text()
        producer_logs = [p.log_path.read_text() for p in cluster.producers]
    assert "mutual TLS" in dispatcher_log
    assert all("(mutual TLS)" in log for log in producer_logs)
    plan = croupier.EpochPlan(1200, 16, 3, seed=5, epoch=0, shuffle="global")
    got = []
    for rank, out in enumerate(outs):
        batches = read_batches(out)
        assert [b["step"] for b in batches] == list(range(plan.steps_per_consumer))
        for b in batches:
            assert b["ids"] == plan.batch(plan.global_batch(rank, b["step"])).tolist()
            got += b["ids"]
    assert sorted(got) == sorted(int(i) for g in range(plan.num_batches) for i in plan.batch(g))
    assert len(got) == len(set(got))


def test_the_same_run_in_plaintext_gives_the_same_content_hashes(tmp_path, dataset, certs):
    hashes = {}
    for name, env in (("tls", tls_env(certs)), ("plain", {"CROUPIER_SHM": "off"})):
        with Cluster(tmp_path / name, env=env) as cluster:
            cluster.add_producer()
            cluster.create_job(name, dataset, FEATURES, 32, 2, seed=9, epochs=1)
            outs = [tmp_path / f"{name}{r}.jsonl" for r in range(2)]
            cluster.wait([cluster.start_consumer(name, r, 2, outs[r], 1) for r in range(2)], 90)
        hashes[name] = [[(b["step"], b["hash"]) for b in read_batches(o)] for o in outs]
    assert hashes["tls"] == hashes["plain"]
    assert all(len(h) == 1200 // 64 for h in hashes["tls"])


@pytest.mark.parametrize("flags,code,message", [
    ([], "FAILED_PRECONDITION", "speaks TLS and this client does not"),
    (("client", "other_ca"), "UNAUTHENTICATED", "its certificate does not verify"),
    (("expired", "ca"), "UNAUTHENTICATED", "expired.pem has expired"),
    ((None, "ca"), "UNAUTHENTICATED", "presented no certificate"),
    (("other", "ca"), "UNAUTHENTICATED", "may have refused this client's certificate"),
])
def test_control_plane_refusals_name_the_address_and_the_cause(tmp_path, certs, flags, code,
                                                               message):
    with Cluster(tmp_path / "cluster", env=tls_env(certs)) as cluster:
        args = tls_flags(certs, *flags) if flags else []
        env = no_tls(cluster.env)
        bad = run("status", cluster.address, "--timeout-ms", 20000, *args, check=False,
                  env=env, timeout=60)
        assert bad.returncode != 0
        assert code in bad.stderr and message in bad.stderr, bad.stderr
        assert f"dispatcher {cluster.address}" in bad.stderr
        # Refused at once, not after the 20 s of retries an unreachable dispatcher gets.
        good = run("status", cluster.address, *tls_flags(certs), env=env)
        assert "dispatcher" in good.stdout
        assert cluster.dispatcher.poll() is None


def test_expired_dispatcher_certificate_and_tls_to_a_plaintext_dispatcher(tmp_path, certs):
    with Cluster(tmp_path / "expired", env=tls_env(certs, cert="expired", ca=None)) as cluster:
        bad = run("status", cluster.address, "--tls-ca", certs / "ca.pem", check=False,
                  env=no_tls(cluster.env))
        assert bad.returncode != 0 and "UNAUTHENTICATED" in bad.stderr
        assert "certificate has expired" in bad.stderr and cluster.address in bad.stderr
    with Cluster(tmp_path / "plain", env={"CROUPIER_SHM": "off"}) as cluster:
        bad = run("status", cluster.address, *tls_flags(certs), check=False, env=cluster.env)
        assert bad.returncode != 0 and "FAILED_PRECONDITION" in bad.stderr
        assert "does not speak TLS" in bad.stderr and cluster.address in bad.stderr
        # A consumer too: it fails at once with the same cause.
        consumer = run("consume", "--dispatcher", cluster.address, "--job", "x", "--rank", 0,
                       "--world", 1, "--timeout-ms", 20000, *tls_flags(certs), check=False,
                       env=cluster.env, timeout=60)
        assert consumer.returncode != 0 and "does not speak TLS" in consumer.stderr


def hello(token=b""):
    """A croupier data-plane HELLO (src/transport/frame.h), protocol version 1."""
    return b"CRDP" + struct.pack("<III", 1, len(token), 0) + token


def test_data_plane_refusals_from_a_tls_producer(tmp_path, certs):
    with Cluster(tmp_path / "cluster", env=tls_env(certs)) as cluster:
        cluster.add_producer()
        host, port = cluster.producer_address().rsplit(":", 1)
        port = int(port)
        # A plaintext croupier client is told, in a plaintext ERROR frame, that TLS is required.
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(hello())
            header = s.recv(16)
            kind, _, length = struct.unpack("<IIQ", header)
            body = b""
            while len(body) < length:
                chunk = s.recv(length - len(body))
                if not chunk:
                    break
                body += chunk
        assert kind == 17  # ERROR
        code, _ = struct.unpack("<II", body[:8])
        assert code == 9  # FAILED_PRECONDITION
        assert b"requires TLS" in body[8:]
        # A TLS client that does not trust the producer's CA refuses it.
        context = ssl.create_default_context(cafile=str(certs / "other_ca.pem"))
        with socket.create_connection((host, port), timeout=5) as raw:
            with pytest.raises(ssl.SSLCertVerificationError):
                context.wrap_socket(raw, server_hostname=host)
        # A client with the right CA but no certificate is refused by the producer (mutual TLS).
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        with socket.create_connection((host, port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                tls.sendall(hello())
                with pytest.raises((ssl.SSLError, ConnectionError)):
                    if not tls.recv(16):
                        raise ConnectionError("closed")
        # The producer logs a refusal after it has sent its alert: wait for the lines.
        producer = cluster.producers[0]
        wait_for_log(producer, "a plaintext croupier client on a TLS port")
        wait_for_log(producer, "presented no certificate")
        wait_for_log(producer, "refused this side's certificate")  # the client without our CA
        assert producer.poll() is None


def test_a_tls_client_on_a_plaintext_producer_is_refused_and_logged(tmp_path, certs):
    with Cluster(tmp_path / "cluster", env={"CROUPIER_SHM": "off"}) as cluster:
        cluster.add_producer()
        host, port = cluster.producer_address().rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                context.wrap_socket(raw, server_hostname=host)
        wait_for_log(cluster.producers[0], "it speaks TLS and this data server does not")
        assert cluster.producers[0].poll() is None


def test_a_producer_without_a_certificate_cannot_serve_tls(tmp_path, certs):
    with Cluster(tmp_path / "cluster", env=tls_env(certs)) as cluster:
        proc = run("producer", "--dispatcher", cluster.address, "--tls-ca", certs / "ca.pem",
                   "--connect-timeout-ms", 3000, check=False, timeout=30,
                   env=no_tls(cluster.env))
    assert proc.returncode != 0 and "INVALID_ARGUMENT" in proc.stderr
    assert "--tls-cert" in proc.stderr


def wait_for_log(proc, text, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in proc.log_path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in {proc.log_path}:\n{proc.log_path.read_text()[-2000:]}")


@pytest.mark.parametrize("mode", ["dealt", "first_come"])
def test_a_consumer_whose_certificate_a_producer_refuses_fails_at_once_naming_it(
        tmp_path, dataset, certs, mode):
    # The dispatcher does not ask for client certificates; the producer does (mutual TLS).
    with Cluster(tmp_path / "cluster", env=tls_env(certs, cert=None, ca="ca"),
                 dispatcher_args=tls_flags(certs, "server", None)) as cluster:
        cluster.add_producer(*tls_flags(certs, "server", "ca"))
        cluster.create_job("train", dataset, FEATURES, 16, 1, seed=5, epochs=1, mode=mode)
        address = cluster.producer_address()
        start = time.monotonic()
        proc = run("consume", "--dispatcher", cluster.address, "--job", "train", "--rank", 0,
                   "--world", 1, "--timeout-ms", 30000, check=False, env=cluster.env,
                   timeout=90)
        took = time.monotonic() - start
        wait_for_log(cluster.producers[0], "presented no certificate")
    assert proc.returncode != 0 and "UNAUTHENTICATED" in proc.stderr, proc.stderr
    assert f"data server {address}" in proc.stderr
    assert took < 20, f"took {took:.1f} s: retried instead of failing"
