"""Attacks by another local user and by clients without the token, with real processes.

- A process of another user (uid 65534, no token) binds a producer's shared-memory name
  `@croupier-shm/127.0.0.1:PORT` before the producer (started on a fixed --port) can: consumers
  must not give it the token nor take a batch from it; in auto mode they get every real batch over
  TCP, with `--shm on` they fail naming the address.
- A client without the token reconnecting in a loop to a producer's data port: the consumers with
  the token still get their batches, and the producer's log stays small.
- 1,100 idle connections to a dispatcher started under a soft limit of 1,024 descriptors: it has
  raised the limit, and status works during and after the flood.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from service_cluster import Cluster, read_batches, run, synth_dataset

FEATURES = "id:int64,label:int64,image:bytes"
RECORDS = 1200
BATCH = 16
TOKEN = "security-token"
NOBODY = 65534

# The squatter, run by /usr/bin/python3 as uid 65534 (the standard library only; it reads no
# file). It binds the abstract name, then, for each connection, plays a croupier server that has
# no token: to a HELLO of a version before the challenge (payload: the token) it answers HELLO_OK
# and takes requests; to a challenge HELLO (payload: a 32-byte nonce) it answers CHALLENGE with
# no proof, and HELLO_OK to an AUTH. It prints one line per event: what it saw, so that the test
# can tell whether a consumer gave it the token or asked it for a batch.
SQUATTER = r'''
import os, socket, struct, sys, threading
name = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + name)
s.listen(64)
print("bound", os.getuid(), flush=True)

def recv_exactly(c, n):
    data = b""
    while len(data) < n:
        got = c.recv(n - len(data))
        if not got:
            raise EOFError
        data += got
    return data

def frame(kind, body):
    return struct.pack("<IIQ", kind, 0, len(body)) + body

def serve(c):
    try:
        magic, version, length, _ = struct.unpack("<4sIII", recv_exactly(c, 16))
        payload = recv_exactly(c, length)
        print("hello", version, payload.hex(), flush=True)
        if length == 32 and version >= 1004:
            c.sendall(frame(22, os.urandom(32)))  # CHALLENGE, no proof: it has no token
            kind, _, n = struct.unpack("<IIQ", recv_exactly(c, 16))
            print("auth", kind, recv_exactly(c, n).hex(), flush=True)
        c.sendall(frame(16, struct.pack("<II", version, 0)))  # HELLO_OK
        while True:
            kind, _, n = struct.unpack("<IIQ", recv_exactly(c, 16))
            recv_exactly(c, n)
            print("request", kind, flush=True)
            c.sendall(frame(17, struct.pack("<II", 5, 9) + b"forged!!!"))  # ERROR NOT_FOUND
    except (EOFError, OSError):
        print("closed", flush=True)
    finally:
        c.close()

while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_squatter(name):
    """The squatter as uid 65534, once it has bound `name`."""
    proc = subprocess.Popen(["/usr/bin/python3", "-c", SQUATTER, name], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, user=NOBODY, group=NOBODY,
                            cwd="/", env={"PATH": "/usr/bin:/bin"}, start_new_session=True)
    line = proc.stdout.readline()
    assert line.strip() == f"bound {NOBODY}", line + proc.stdout.read()
    return proc


@pytest.fixture
def dataset(tmp_path):
    return synth_dataset(tmp_path / "data", RECORDS, files=2, image_bytes=128)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as uid 65534")
@pytest.mark.timeout(180)
def test_a_squatter_of_another_user_gets_no_token_and_serves_no_batch(tmp_path, dataset):
    port = free_port()
    name = f"croupier-shm/127.0.0.1:{port}"
    squatter = start_squatter(name)
    try:
        with Cluster(tmp_path / "cluster", auth_token=TOKEN) as cluster:
            producer = cluster.add_producer("--port", port)
            cluster.create_job("train", dataset, FEATURES, BATCH, 1, seed=5)
            # on: the consumer fails, naming the address and why.
            forced = cluster.start_consumer("train", 0, 1, tmp_path / "forced.jsonl", 1,
                                            "--shm", "on", "--timeout-ms", "5000")
            forced.wait(timeout=60)
            forced_log = forced.log_path.read_text()
            # auto: the consumer refuses the squatter and gets every batch over TCP.
            auto_out = tmp_path / "auto.jsonl"
            auto = cluster.start_consumer("train", 0, 1, auto_out, 1, "--shm", "auto",
                                          "--no-resume")
            cluster.wait([auto], timeout=90)
            auto_log = auto.log_path.read_text()
            producer_log = producer.log_path.read_text()
    finally:
        squatter.kill()
        seen = squatter.communicate(timeout=10)[0]
    assert "serving over TCP only, no shared memory" in producer_log, producer_log
    # The squatter never saw the token (not in a HELLO, not anywhere) nor a request.
    assert TOKEN.encode().hex() not in seen, "a consumer sent the squatter the token:\n" + seen
    assert "request" not in seen, "a consumer asked the squatter for batches:\n" + seen
    assert "auth" not in seen, "a consumer answered a squatter that proved nothing:\n" + seen
    assert re.search(r"^hello \d+ [0-9a-f]{64}$", seen, re.M), seen  # it was tried, with a nonce
    assert "not using shared memory for producer" in auto_log, auto_log
    assert f"data server @{name} has no auth token" in auto_log, auto_log
    ids = [i for b in read_batches(auto_out) for i in b["ids"]]
    assert len(ids) == len(set(ids)) == RECORDS // BATCH * BATCH
    assert forced.returncode != 0
    assert "shared memory is required" in forced_log, forced_log
    assert f"@{name} has no auth token" in forced_log, forced_log


def data_hello_v3():
    return b"CRDP" + (3).to_bytes(4, "little") + (32).to_bytes(4, "little") + bytes(4) + \
        os.urandom(32)


@pytest.mark.long
@pytest.mark.timeout(180)
def test_a_client_without_the_token_in_a_loop_holds_no_slot_and_floods_no_log(tmp_path, dataset):
    """A client that reconnects in a loop with no proof, and others that stay silent in their
    handshake, from the consumers' own address: the consumers still get every batch, and the
    producer's log grows by a few kilobytes, not by one line per refusal."""
    with Cluster(tmp_path / "cluster", auth_token=TOKEN, env={"CROUPIER_SHM": "off"}) as cluster:
        producer = cluster.add_producer()
        cluster.create_job("train", dataset, FEATURES, BATCH, 2, seed=7)
        deadline = time.monotonic() + 20
        while not cluster.status().get("producers") and time.monotonic() < deadline:
            time.sleep(0.1)
        host, port = cluster.status()["producers"][0]["dataAddress"].rsplit(":", 1)
        log_before = producer.log_path.stat().st_size
        attempts = 0
        silent = []
        outs = [tmp_path / f"rank{r}.jsonl" for r in range(2)]
        procs = []
        start = time.monotonic()
        try:
            # Some hold handshake slots until the producer's handshake timeout drops them.
            for _ in range(8):
                silent.append(socket.create_connection((host, int(port)), timeout=5))
            while time.monotonic() - start < 15:
                if not procs and time.monotonic() - start > 2:
                    procs = [cluster.start_consumer("train", r, 2, outs[r]) for r in range(2)]
                try:
                    with socket.create_connection((host, int(port)), timeout=5) as s:
                        s.sendall(data_hello_v3())
                        s.recv(4096)  # CHALLENGE (or a refusal)
                        s.sendall(b"\x17\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0")  # AUTH, no proof
                        s.recv(4096)
                except OSError:
                    pass
                attempts += 1
            cluster.wait(procs, timeout=90)
        finally:
            for s in silent:
                s.close()
        grown = producer.log_path.stat().st_size - log_before
        log = producer.log_path.read_text()
    print(f"\n{attempts} connections without the token in 15 s; the producer's log grew by "
          f"{grown} bytes")
    assert attempts > 500
    assert grown < 64 << 10, log[-3000:]
    assert "are only counted" in log and "more connections from 127.0.0.1" in log, log[-3000:]
    ids = [i for o in outs for b in read_batches(o) for i in b["ids"]]
    assert len(ids) == len(set(ids)) == RECORDS // BATCH // 2 * 2 * BATCH  # equal steps


def status_works(cluster, timeout_ms=10000):
    proc = run("status", cluster.address, "--auth-token", TOKEN, "--timeout-ms", timeout_ms,
               env=cluster.env, timeout=60, check=False)
    return proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not shutil.which("prlimit"), reason="needs prlimit (util-linux)")
@pytest.mark.timeout(180)
def test_the_dispatcher_takes_its_hard_descriptor_limit_and_outlives_a_flood(tmp_path):
    """A dispatcher started under the common soft limit of 1,024 descriptors (hard 4,096) raises
    it, so that 1,100 idle connections leave status working during and after the flood."""
    opened = []
    with Cluster(tmp_path / "cluster", auth_token=TOKEN,
                 dispatcher_prefix=["prlimit", "--nofile=1024:4096"]) as cluster:
        log = cluster.dispatcher.log_path.read_text()
        assert "raised the limit of open descriptors from 1024 to 4096" in log, log
        try:
            for _ in range(1100):
                opened.append(socket.create_connection(("127.0.0.1", cluster.port), timeout=5))
            ok, err = status_works(cluster)
            assert ok, f"status failed during the flood: {err}"
        finally:
            for s in opened:
                s.close()
        ok, err = status_works(cluster)
        assert ok, f"status failed after the flood: {err}"
        assert cluster.dispatcher.poll() is None


@pytest.mark.skipif(not shutil.which("prlimit"), reason="needs prlimit (util-linux)")
@pytest.mark.timeout(150)
def test_more_connections_than_descriptors_leave_the_dispatcher_serving(tmp_path):
    """More connections than descriptors: the reconnection storm of a restart under thousands of
    clients, at the scale of a test. A dispatcher under a hard limit of 256 descriptors takes 600
    idle connections. Before src/rpc/grpc_listener.h, gRPC's own listener (1.51) failed accept4
    with "Too many open files" and never accepted again. Now the dispatcher keeps a reserve of
    descriptors, closes at once the connections that would take it, says so in its log, and
    serves during the flood (once its 1 s handshake bound has closed the idle ones) and after."""
    opened = []
    with Cluster(tmp_path / "cluster", auth_token=TOKEN,
                 dispatcher_prefix=["prlimit", "--nofile=256:256"]) as cluster:
        try:
            for _ in range(600):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(5)
                try:
                    s.connect(("127.0.0.1", cluster.port))
                except OSError:
                    s.close()  # the accept queue full: the kernel drops the SYN
                    continue
                opened.append(s)
            # Some were closed by the dispatcher at once: it keeps descriptors in reserve.
            time.sleep(0.5)
            closed = 0
            for s in opened:
                s.setblocking(False)
                try:
                    closed += s.recv(1) == b""
                except (BlockingIOError, ConnectionResetError) as e:
                    closed += isinstance(e, ConnectionResetError)
            # During the flood: the idle ones are closed by the handshake timeout (1 s), so a
            # status call retrying for 30 s gets through.
            started = time.monotonic()
            ok, err = status_works(cluster, timeout_ms=30000)
            assert ok, f"status failed during the flood: {err}"
            print(f"status during the flood of {len(opened)} connections ({closed} closed at "
                  f"once): {time.monotonic() - started:.2f} s")
        finally:
            for s in opened:
                s.close()
        ok, err = status_works(cluster)
        assert ok, f"status failed after the flood: {err}"
        assert cluster.dispatcher.poll() is None
        assert closed > 0, "no connection was closed at once"
        log = cluster.dispatcher.log_path.read_text()
        assert "new connections at once to keep 64 of its 256 descriptors free" in log, log[-3000:]
