"""The C++ library's log lines in a Python process go through Python's logging (croupier.logs):
to the logger croupier.native.<component> at their level once logging is configured, and to
stderr as before when it is not."""
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import logging, sys, threading
    if sys.argv[1] == "configured":
        logging.basicConfig(stream=sys.stdout, level=logging.INFO,
                            format="%(name)s|%(levelname)s|%(message)s")
    import croupier
    with croupier.local_cluster(producers=0) as cluster:
        stop = threading.Event()
        records = [{"x": i} for i in range(8)]
        t = threading.Thread(target=croupier.produce, args=(records, cluster.address, "m"),
                             kwargs=dict(batch_size=2, consumers=1, workers=0, stop=stop))
        t.start()
        with croupier.Consumer(cluster.address, "m", 0, 1) as feed:
            assert sum(1 for _ in feed) == 4
        stop.set()
        t.join(30)
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("logging_is", ["configured", "not-configured"])
def test_native_log_lines_reach_python_logging(tmp_path, logging_is):
    run = subprocess.run([sys.executable, "-c", SCRIPT, logging_is], capture_output=True,
                         text=True, timeout=100, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    if logging_is == "configured":
        # "producer 1 serving on 127.0.0.1:PORT for dispatcher ...", an INFO line of the C++
        # producer node, as a record of its logger; nothing of it on stderr.
        assert "croupier.native.producer|INFO|producer " in run.stdout, run.stdout
        assert "[producer]" not in run.stderr, run.stderr
    else:
        assert " I [producer] producer " in run.stderr, run.stderr
        assert "croupier.native" not in run.stdout + run.stderr
