"""Floods on loopback, bounded in count and time: many idle and garbage connections and slow readers
(HTTP/2 streams whose flow-control window is 0, data-plane requests whose answers are never read)
against the dispatcher and a producer, while a normal job runs. The dispatcher must stay
responsive (status RPC latency), the memory of both must stay bounded, and the consumers must
still get every batch once.
"""
import socket
import struct
import time

import pytest

import data_wire
from service_cluster import Cluster, read_batches, rss_bytes, run

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
            # address, each held until the handshake timeout),
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
