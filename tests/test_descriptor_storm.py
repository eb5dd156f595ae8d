"""A dispatcher with more connections coming than it has descriptors: the reconnection storm of a
restart under thousands of clients, at the scale of a test (issue 36, "Recovery at scale").

A `croupier dispatcher` under a hard limit of 256 descriptors takes 600 idle connections. Before
src/rpc/grpc_listener.h, gRPC's own listener (1.51) failed accept4 with "Too many open files" and
never accepted again: `status` failed after the flood too. Now the dispatcher keeps a reserve of
descriptors free, closes at once the connections that would take it, says so in its log, and
serves again as soon as the flood's connections end (and during the flood, once its handshake
timeout has closed the idle ones)."""

import shutil
import socket
import time

import pytest

from service_cluster import Cluster, run

TOKEN = "storm-token"


def status_works(cluster, timeout_ms=10000):
    proc = run("status", cluster.address, "--auth-token", TOKEN, "--timeout-ms", timeout_ms,
               env=cluster.env, timeout=60, check=False)
    return proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not shutil.which("prlimit"), reason="needs prlimit (util-linux)")
@pytest.mark.timeout(150)
def test_more_connections_than_descriptors_leave_the_dispatcher_serving(tmp_path):
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
