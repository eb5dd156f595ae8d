"""Floods on loopback, bounded in count and time: many idle and garbage connections and slow readers
(HTTP/2 streams whose flow-control window is 0, data-plane requests whose answers are never read)
against the dispatcher and a producer, while a normal job runs. The dispatcher must stay
responsive (status RPC latency), the memory of both must stay bounded, and the consumers must
still get every batch once. And clients without the token reconnecting in a loop from the
trainers' own address must not keep a consumer that starts meanwhile from its first batch.
"""
import json
import os
import pathlib
import socket
import struct
import subprocess
import sys
import time

import pytest

import data_wire
from service_cluster import Cluster, OutputWatch, read_batches, rss_bytes, run

FEATURES = "id:int64,label:int64,image:bytes"
TOKEN = "flood-token"


def http2_frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    """A header as an HPACK literal without indexing, no Huffman coding (names and values under
    127 bytes)."""
    name, value = name.encode(), value.encode()
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def slow_grpc_reader(address, streams):
    """A socket that asks the dispatcher for its status `streams` times on one HTTP/2 connection
    with a flow-control window of 0, so that no answer can be sent, and never reads."""
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    out += http2_frame(4, 0, 0, struct.pack(">HI", 4, 0))  # SETTINGS_INITIAL_WINDOW_SIZE = 0
    headers = b"".join(hpack_literal(n, v) for n, v in (
        (":method", "POST"), (":scheme", "http"),
        (":path", "/croupier.v1.Dispatcher/GetStatus"), (":authority", address),
        ("content-type", "application/grpc"), ("te", "trailers"), ("croupier-protocol", "2"),
        ("authorization", f"Bearer {TOKEN}")))
    for i in range(streams):
        stream = 2 * i + 1
        out += http2_frame(1, 0x4, stream, headers)  # HEADERS, END_HEADERS
        out += http2_frame(0, 0x1, stream, b"\x00\x00\x00\x00\x00")  # an empty message, END_STREAM
    s.sendall(out)
    return s


def data_request(job, epoch, batch):
    body = struct.pack("<QQQII", epoch, batch, 60000, len(job), 0) + job.encode()
    return struct.pack("<IIQ", 1, 0, len(body)) + body  # GET_BATCH


def slow_data_reader(address, source_ip, job, batches):
    """A data-plane client from `source_ip` that asks for `batches` batches and reads nothing."""
    host, port = address.rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.bind((source_ip, 0))
    s.settimeout(5)
    s.connect((host, int(port)))
    data_wire.handshake(s, TOKEN)
    s.sendall(b"".join(data_request(job, 0, b) for b in range(batches)))
    return s


def status_latency(cluster):
    start = time.monotonic()
    run("status", cluster.address, "--auth-token", TOKEN, "--timeout-ms", 10000, env=cluster.env,
        timeout=30)
    return time.monotonic() - start


@pytest.mark.timeout(240)
def test_floods_leave_the_dispatcher_responsive_and_memory_bounded(tmp_path):
    data = tmp_path / "data"
    run("synth", "--out", data, "--files", 2, "--records", 4000, "--image-bytes", 2048, "--quiet")
    files = sorted(data.glob("*.tfrecord"))
    opened = []
    with Cluster(tmp_path / "cluster", auth_token=TOKEN, env={"CROUPIER_SHM": "off"}) as cluster:
        producer = cluster.add_producer("--max-connections", 128, "--max-connections-per-peer", 32,
                                        "--buffer-bytes", 32 << 20)
        cluster.create_job("train", files, FEATURES, 32, 2, seed=3, epochs=2)
        deadline = time.monotonic() + 20
        while not cluster.status().get("producers") and time.monotonic() < deadline:
            time.sleep(0.1)
        data_address = cluster.status()["producers"][0]["dataAddress"]
        base_latency = max(status_latency(cluster) for _ in range(3))
        base_rss = {"dispatcher": rss_bytes(cluster.dispatcher.pid),
                    "producer": rss_bytes(producer.pid)}
        try:
            # The dispatcher: 200 idle connections, 100 that send garbage, 40 slow readers of
            # 64 streams each (its limit of concurrent streams per connection).
            for i in range(200):
                opened.append(socket.create_connection(("127.0.0.1", cluster.port), timeout=5))
            for i in range(100):
                s = socket.create_connection(("127.0.0.1", cluster.port), timeout=5)
                s.sendall(bytes((i * 7 + j) % 256 for j in range(4096)))
                opened.append(s)
            for _ in range(40):
                opened.append(slow_grpc_reader(cluster.address, 64))
            # The producer: 150 silent connections from 127.0.0.2 (past its 16 handshake slots per
            # address: each new one evicts the oldest in its handshake, which the producer closes),
            # and 12 slow readers from 127.0.0.3 asking for 8 batches each and reading none.
            refused = 0
            for _ in range(150):
                s = socket.socket()
                s.bind(("127.0.0.2", 0))
                s.settimeout(5)
                try:
                    host, port = data_address.rsplit(":", 1)
                    s.connect((host, int(port)))
                    opened.append(s)
                except OSError:
                    refused += 1
                    s.close()
            for _ in range(12):
                opened.append(slow_data_reader(data_address, "127.0.0.3", "train", 8))
            # Meanwhile a normal job runs: two consumers over two epochs.
            outs = [tmp_path / f"rank{r}.jsonl" for r in range(2)]
            procs = [cluster.start_consumer("train", r, 2, outs[r], 2) for r in range(2)]
            latencies = []
            rss = {"dispatcher": 0, "producer": 0}
            while any(p.poll() is None for p in procs) and len(latencies) < 200:
                latencies.append(status_latency(cluster))
                rss["dispatcher"] = max(rss["dispatcher"], rss_bytes(cluster.dispatcher.pid))
                rss["producer"] = max(rss["producer"], rss_bytes(producer.pid))
            cluster.wait(procs, timeout=120)
            threads = int(next(line.split()[1] for line in
                               open(f"/proc/{cluster.dispatcher.pid}/status")
                               if line.startswith("Threads:")))
            producer_log = producer.log_path.read_text()
        finally:
            for s in opened:
                s.close()
        print(f"status latency: before {base_latency:.3f}s, during the flood max "
              f"{max(latencies):.3f}s over {len(latencies)} calls; RSS before {base_rss}, "
              f"peak during {rss}; dispatcher threads {threads}")
        assert max(latencies) < 2.0
        # No thread per unanswerable stream (the synchronous gRPC API had 2,571 here).
        assert threads < 200
        assert rss["dispatcher"] < base_rss["dispatcher"] + (128 << 20)
        assert rss["producer"] < base_rss["producer"] + (256 << 20)
        assert "connections from 127.0.0.2" in producer_log
        assert cluster.dispatcher.poll() is None and producer.poll() is None
    # The consumers got every batch of both epochs, once each (ids are the global record ids).
    for epoch in (0, 1):
        ids = [i for o in outs for b in read_batches(o) if b["epoch"] == epoch for i in b["ids"]]
        assert len(ids) == len(set(ids)) == 4000 // 64 * 64


def first_line_after(path, start, proc, timeout):
    """Seconds from `start` (time.monotonic()) until `path` holds its first line; fails when
    `proc` exits first or after `timeout` s."""
    while time.monotonic() - start < timeout:
        if path.exists() and b"\n" in path.read_bytes():
            return time.monotonic() - start
        assert proc.poll() is None, f"the consumer exited {proc.returncode}:\n" \
            f"{proc.log_path.read_text()[-3000:]}"
        time.sleep(0.01)
    raise AssertionError(f"no batch within {timeout} s:\n{proc.log_path.read_text()[-3000:]}")


def count_of(pid, what):
    if what == "fds":
        return len(os.listdir(f"/proc/{pid}/fd"))
    return int(next(line.split()[1] for line in open(f"/proc/{pid}/status")
                    if line.startswith("Threads:")))


@pytest.mark.long
@pytest.mark.timeout(180)
def test_a_consumer_started_during_a_flood_from_its_own_address_gets_its_first_batch_at_once(
        tmp_path):
    """300 clients without the token reconnect in a loop to a producer's data port from the
    trainers' own address (half silent in their handshake, half refused for the token), past its
    16 handshake slots for that address: a consumer with the token that starts meanwhile gets its
    first batch within 3 s (the oldest connection in its handshake makes room for a new one), the
    running consumers carry on, and the producer's threads and descriptors stay bounded."""
    data = tmp_path / "data"
    run("synth", "--out", data, "--files", 2, "--records", 4000, "--image-bytes", 256, "--quiet")
    files = sorted(data.glob("*.tfrecord"))
    with Cluster(tmp_path / "cluster", auth_token=TOKEN, env={"CROUPIER_SHM": "off"}) as cluster:
        producer = cluster.add_producer()
        cluster.create_job("train", files, FEATURES, 32, 2, seed=3, epochs=20)
        cluster.create_job("before", files, FEATURES, 32, 1, seed=4)
        cluster.create_job("during", files, FEATURES, 32, 1, seed=5)
        host, port = cluster.producer_address().rsplit(":", 1)
        # Without a flood: how long a consumer takes to its first batch.
        out = tmp_path / "before.jsonl"
        start = time.monotonic()
        proc = cluster.start_consumer("before", 0, 1, out)
        unflooded = first_line_after(out, start, proc, 30)
        cluster.wait([proc], timeout=60)
        outs = [tmp_path / f"rank{r}.jsonl" for r in range(2)]
        running = [cluster.start_consumer("train", r, 2, outs[r], 20, "--slow-ms", 10)
                   for r in range(2)]
        watch = OutputWatch(outs)
        watch.wait_for(5, running, timeout=60)
        base = {w: count_of(producer.pid, w) for w in ("threads", "fds")}
        flood = subprocess.Popen(
            [sys.executable, pathlib.Path(__file__).parent / "data_wire.py", "flood", host, port,
             "300", "90", "127.0.0.1"], stdout=subprocess.PIPE, text=True)
        try:
            peak = dict(base)
            flood_start = time.monotonic()
            watch.longest = 0.0  # the running consumers' longest stall during the flood
            while time.monotonic() - flood_start < 3:  # the flood takes every handshake slot
                watch.poll()
                for w in peak:
                    peak[w] = max(peak[w], count_of(producer.pid, w))
                time.sleep(0.02)
            out = tmp_path / "during.jsonl"
            start = time.monotonic()
            proc = cluster.start_consumer("during", 0, 1, out)
            flooded = None
            while flooded is None and time.monotonic() - start < 60 and proc.poll() is None:
                if out.exists() and b"\n" in out.read_bytes():
                    flooded = time.monotonic() - start
                watch.poll()
                for w in peak:
                    peak[w] = max(peak[w], count_of(producer.pid, w))
                time.sleep(0.01)
            waited = time.monotonic() - start
            assert flood.poll() is None, "the flood ended before the measure did"
            stall = watch.longest
            flood.terminate()
            counts = json.loads(flood.communicate(timeout=30)[0])
            counts["seconds"] = round(time.monotonic() - flood_start, 1)
        finally:
            if flood.poll() is None:
                flood.kill()
                flood.wait()
        log = producer.log_path.read_text()
        print(f"\nfirst batch: {unflooded:.2f} s without a flood, "
              f"{f'none in {waited:.1f} s' if flooded is None else f'{flooded:.2f} s'} during it "
              f"(the consumer's exit code {proc.poll()}); running "
              f"consumers' longest stall during the flood {stall:.2f} s; flood {counts}; producer "
              f"threads and descriptors {base} before, {peak} at the peak")
        assert flooded is not None and flooded < 3.0, proc.log_path.read_text()[-3000:]
        assert stall < 1.0
        assert counts["connections"] > 1000
        # A thread per connection in its handshake (64 at most) or evicted and ending (64 at most),
        # and two descriptors (its socket and its wake event), besides the consumers' own.
        assert peak["threads"] < base["threads"] + 2 * 64 + 16
        assert peak["fds"] < base["fds"] + 4 * 64 + 32
        assert "evicted from its handshake for a newer connection (the data server has 16 " \
            "connections from 127.0.0.1 in their handshake)" in log, log[-3000:]
        cluster.wait([proc], timeout=60)
        cluster.wait(running, timeout=120)
        assert producer.poll() is None
    for epoch in (0, 19):
        ids = [i for o in outs for b in read_batches(o) if b["epoch"] == epoch for i in b["ids"]]
        assert len(ids) == len(set(ids)) == 4000 // 64 * 64
