"""No silent waits: a process that waits for an unreachable dispatcher says so, naming the
address, within a few seconds, and SIGTERM stops it within a second, not at the end of its
timeout. Real processes: `croupier producer`, `python -m croupier produce` and `croupier consume`
against a port where nothing listens."""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from service_cluster import BIN  # noqa: E402

TESTS = pathlib.Path(__file__).resolve().parent


def dead_address():
    """127.0.0.1:PORT where nothing listens (a port the system gave and took back)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def commands(address):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent / "python")]),
               MAP_TEST="{}")
    return {
        "croupier producer": ([str(BIN), "producer", "--dispatcher", address], env),
        "python -m croupier produce": ([sys.executable, "-m", "croupier", "produce",
                                        "map_sources:pipeline", "--dispatcher", address,
                                        "--job", "m", "--workers", "1"], env),
        "croupier consume": ([str(BIN), "consume", "--dispatcher", address, "--job", "m",
                              "--rank", "0", "--world", "1"], env),
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("which", ["croupier producer", "python -m croupier produce",
                                   "croupier consume"])
def test_a_wait_for_the_dispatcher_says_so_and_sigterm_ends_it(tmp_path, which):
    address = dead_address()
    argv, env = commands(address)[which]
    log = tmp_path / "log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while f"dispatcher {address}" not in log.read_text() or "no answer for" not in \
                log.read_text():
            assert proc.poll() is None, f"{which} exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{which} said nothing in 15 s:\n{log.read_text()}"
            time.sleep(0.1)
        said = time.monotonic() - (deadline - 15)
        assert said < 8, f"{which} took {said:.1f} s to say what it waits for"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
        took = time.monotonic() - sent
        assert took < 1.5, f"{which} took {took:.2f} s to stop after SIGTERM"
        # Nothing of it is left (a producer's zygote and workers die with it).
        deadline = time.monotonic() + 5
        while True:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, f"{which} left processes behind"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
