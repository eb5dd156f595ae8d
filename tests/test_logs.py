"""Logs: one line per event with its level, naming its subject, and --log-level on any command."""
import re
import time

from service_cluster import Cluster, run

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [DIWE] \[\w+\] .+$")


def test_each_line_is_one_event_naming_its_subject(tmp_path):
    with Cluster(tmp_path / "c", producer_timeout_ms=1000) as cluster:
        producer = cluster.add_producer()
        deadline = time.monotonic() + 20
        while not cluster.status()["producers"]:
            assert time.monotonic() < deadline, "the producer did not register"
            time.sleep(0.1)
        producer.kill()  # silent from now on: the dispatcher expires it
        producer.wait(timeout=10)
        deadline = time.monotonic() + 20
        while cluster.status()["producers"]:
            assert time.monotonic() < deadline, "the producer did not expire"
            time.sleep(0.2)
    lines = cluster.dispatcher.log_path.read_text().splitlines()
    assert lines and all(LINE.match(line) for line in lines), lines
    registered = [l for l in lines if " I [dispatcher] producer 1 registered with data address "
                  "127.0.0.1:" in l]
    assert len(registered) == 1, lines
    removed = [l for l in lines if " W [dispatcher] producer 1 at 127.0.0.1:" in l]
    assert len(removed) == 1 and "removed (expired after 1 s without a heartbeat)" in removed[0], \
        lines


def test_log_level_drops_what_is_below_it(tmp_path):
    quiet = Cluster(tmp_path / "quiet", dispatcher_args=["--log-level", "warning"])
    quiet.close()
    text = quiet.dispatcher.log_path.read_text()
    assert "listening on" not in text, text
    loud = Cluster(tmp_path / "loud", dispatcher_args=["--log-level=debug"])
    loud.close()
    assert " I [dispatcher] listening on 127.0.0.1:" in loud.dispatcher.log_path.read_text()
    bad = run("status", "127.0.0.1:1", "--log-level", "loud", check=False)
    assert bad.returncode == 2
    assert "--log-level takes debug, info, warning or error, not 'loud'" in bad.stderr
