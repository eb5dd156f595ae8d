"""croupier.serve: a Python iterable as the producer of a job, over the in-process cluster
(croupier.testing: a dispatcher in this process, behind its gRPC server). The
serving side runs in a thread of the test process; consumers are croupier.Consumers. Checks are
on content: each batch carries the index of the yield it came from."""
import os
import pathlib
import threading
import time

import numpy as np
import pytest

import croupier
from croupier import errors
from croupier.testing import in_process_cluster


def numbered(batches, epoch_offset=1000, rows=4):
    """A source function: epoch e yields `batches` batches; batch g holds g + e * epoch_offset."""
    def source(epoch):
        for g in range(batches):
            yield {"g": np.full(rows, g + epoch * epoch_offset, dtype=np.int64),
                   "x": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) + g,
                   "name": [b"b%d-%d" % (g, r) for r in range(rows)]}
    return source


class Server:
    """Runs croupier.serve in a thread; join() returns what it returned or raises what it
    raised."""

    def __init__(self, *args, **kwargs):
        self.result, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=args, kwargs=kwargs, daemon=True)
        self.thread.start()

    def _run(self, *args, **kwargs):
        try:
            self.result = croupier.serve(*args, **kwargs)
        except BaseException as e:  # handed to join()
            self.error = e

    def join(self, timeout=30):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "serve() did not return"
        if self.error is not None:
            raise self.error
        return self.result


def connect(cluster, job, rank, world, **options):
    """A consumer of a job that serve() is about to create."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return cluster.consumer(job, rank, world, timeout=20, **options)
        except errors.NotFoundError:
            assert time.monotonic() < deadline, f"job {job} was not created"
            time.sleep(0.05)


def served(cluster):
    """The batches the cluster's producers have served, as the dispatcher last heard."""
    return sum(p["stats"]["batches_served"] for p in cluster.status()["producers"])


@pytest.fixture
def cluster():
    with in_process_cluster(producers=0) as c:
        yield c


@pytest.mark.timeout(60)
def test_a_generator_is_dealt_exactly_once_in_yield_order(cluster):
    server = Server(numbered(11), cluster.address, "gen", consumers=3, epochs=2,
                    batches_per_epoch=11)
    feeds = [connect(cluster, "gen", r, 3) for r in range(3)]
    for epoch in range(2):
        steps = list(zip(*(f.epoch(epoch) for f in feeds)))
        # 11 batches, 3 ranks: 3 whole rounds are dealt, the last 2 batches are not.
        assert len(steps) == 3 and all(len(f) == 3 for f in feeds)
        for step, batches in enumerate(steps):
            for rank, batch in enumerate(batches):
                g = step * 3 + rank
                assert batch["g"].tolist() == [g + 1000 * epoch] * 4
                np.testing.assert_array_equal(batch["x"][0], [g, g + 1, g + 2])
                assert batch["name"][3] == b"b%d-3" % g
    for f in feeds:
        f.close()
    assert server.join() == 18
    job = cluster.status(job_info=True)["jobs"][0]
    assert job["spec"]["source"] == "python" and int(job["steps_per_epoch"]) == 3


@pytest.mark.timeout(60)
def test_a_consumer_resuming_mid_epoch_gets_the_rest_and_the_source_skips_ahead(cluster):
    server = Server(numbered(12), cluster.address, "resume", consumers=1, epochs=1,
                    batches_per_epoch=12)
    feed = connect(cluster, "resume", 0, 1)
    feed.load_state_dict({"format": 1, "job": "resume", "world": 1, "epoch": 0, "step": 7})
    got = [b["g"][0] for b in feed.epoch(0)]
    feed.close()
    assert got == list(range(7, 12))
    server.join()


class Stateful:
    """An iterable source with state_dict()/load_state_dict(): batch g of an epoch holds g (as
    numbered() makes it); `made` lists the batches it made, in order."""

    def __init__(self, batches):
        self.batches, self.start, self.made = batches, 0, []
        self._yielded = 0

    def __iter__(self):
        start, self.start = self.start, 0
        for g in range(start, self.batches):
            self.made.append(g)
            self._yielded = g + 1
            yield {"g": np.full(4, g, dtype=np.int64)}

    def state_dict(self):
        return {"next": self._yielded}

    def load_state_dict(self, state):
        self.start = state["next"]


@pytest.mark.timeout(90)
def test_a_resumed_source_starts_from_its_saved_state_not_from_the_epochs_start(tmp_path):
    states = tmp_path / "states"
    # A first run of the job saves the source's state at every task boundary.
    with in_process_cluster(producers=0) as first:
        server = Server(Stateful(24), first.address, "r", consumers=1, epochs=1,
                        batches_per_epoch=24, state_dir=states)
        feed = connect(first, "r", 0, 1)
        assert [int(b["g"][0]) for b in feed.epoch(0)] == list(range(24))
        feed.close()
        server.join()
        every = int(first.status(job_info=True)["jobs"][0]["batches_per_task"])
    saved = sorted(int(p.stem.split("batch")[1]) for p in states.glob("r-source0-epoch0-*.pkl"))
    assert saved == list(range(every, 25, every))
    # The whole job restarted from a checkpoint at step 13: the new serving process loads the
    # last state at or before batch 13 and makes no batch before it. The consumer is at its
    # position before the source starts (else the source may be given batch 0 first).
    with in_process_cluster(producers=0) as second:
        croupier.create_job(second.address, "r", [], "g:int64", 4, consumers=1, epochs=1,
                            shuffle="none", source="python", batches_per_epoch=24)
        feed = connect(second, "r", 0, 1)
        feed.load_state_dict({"format": 1, "job": "r", "world": 1, "epoch": 0, "step": 13})
        got = []
        reader = threading.Thread(target=lambda: got.extend(int(b["g"][0])
                                                            for b in feed.epoch(0)), daemon=True)
        reader.start()
        deadline = time.monotonic() + 20
        while not any(int(p.get("step", 0)) == 13 for p in
                      croupier.status(second.address).get("rank_positions", [])):
            assert time.monotonic() < deadline, "the consumer did not register at step 13"
            time.sleep(0.05)
        source = Stateful(24)
        server = Server(source, second.address, "r", consumers=1, epochs=1,
                        batches_per_epoch=24, state_dir=states)
        reader.join(30)
        assert got == list(range(13, 24))
        feed.close()
        server.join()
    point = max(n for n in saved if n <= 13)
    assert source.made[0] == 0 and source.made[1] == point, source.made[:4]  # batch 0: peeked
    assert source.made[1:] == list(range(point, 24))
    with pytest.raises(errors.InvalidArgumentError, match="state_dir is for a source with"):
        croupier.serve(numbered(4), "127.0.0.1:1", "x", consumers=1, batches_per_epoch=4,
                       state_dir=states)


@pytest.mark.timeout(60)
def test_a_source_that_ends_early_is_a_clear_error_at_the_consumer(cluster):
    server = Server(numbered(5), cluster.address, "short", consumers=1, epochs=1,
                    batches_per_epoch=8)
    feed = connect(cluster, "short", 0, 1)
    got = []
    with pytest.raises(errors.OutOfRangeError, match="ended after 5 batches of epoch 0"):
        for batch in feed.epoch(0):
            got.append(batch["g"][0])
    assert got == list(range(5))
    feed.close()
    # serve() raises the same error once its consumers have had the time to see it.
    with pytest.raises(errors.OutOfRangeError, match="ended after 5 batches"):
        server.join(timeout=30)


@pytest.mark.timeout(60)
def test_a_source_that_raises_fails_its_batch_and_serve_raises_its_exception(cluster):
    class Broken(Exception):
        pass

    def source(epoch):
        yield from numbered(2)(epoch)
        raise Broken("the loader broke at its third batch")

    server = Server(source, cluster.address, "broken", consumers=1, epochs=1,
                    batches_per_epoch=4, timeout=3)  # the ranks have 3 s to see the error
    feed = connect(cluster, "broken", 0, 1)
    got = []
    with pytest.raises(errors.InternalError, match="the source raised Broken"):
        for batch in feed.epoch(0):
            got.append(batch["g"][0])
    assert got == [0, 1]
    feed.close()
    with pytest.raises(Broken, match="the loader broke at its third batch"):
        server.join(timeout=20)


@pytest.mark.timeout(60)
def test_serve_returns_once_every_rank_has_read_the_last_epoch_not_when_all_is_served(cluster):
    # Every batch of the job is served (the consumer's window prefetches them all) while the rank
    # has still to read its last step: serve() goes on until the rank has acknowledged the end,
    # as a restarted rank may still ask for a batch of it.
    server = Server(numbered(4), cluster.address, "end", consumers=1, epochs=1,
                    batches_per_epoch=4)
    feed = connect(cluster, "end", 0, 1)
    batches = iter(feed.epoch(0))
    got = [next(batches)["g"][0] for _ in range(3)]
    deadline = time.monotonic() + 10
    while served(cluster) < 4:  # the last batch is served meanwhile; the rank has read 3 of 4
        assert time.monotonic() < deadline, "the consumer did not prefetch the last batch"
        time.sleep(0.05)
    time.sleep(1.0)  # several of the producer's heartbeats and job-end checks
    assert server.thread.is_alive(), "serve() returned before the rank read its last step"
    got += [b["g"][0] for b in batches]
    feed.close()
    assert got == [0, 1, 2, 3]
    assert server.join(timeout=20) == 4


@pytest.mark.timeout(60)
def test_stop_ends_an_unbounded_serve(cluster):
    import threading
    stop = threading.Event()
    server = Server(numbered(4), cluster.address, "forever", consumers=1, epochs=0,
                    batches_per_epoch=4, stop=stop)
    feed = connect(cluster, "forever", 0, 1)
    got = [b["g"][0] for e in range(3) for b in feed.epoch(e)]
    feed.close()
    assert got == [g + 1000 * e for e in range(3) for g in range(4)]
    stop.set()
    assert server.join(timeout=10) >= 12


def test_what_cannot_be_served_is_refused_before_anything_starts(cluster):
    with pytest.raises(errors.InvalidArgumentError, match="feature 'x' has dtype complex128"):
        croupier.serve([{"x": np.zeros((2, 3), np.complex128)}], cluster.address, "c128",
                       consumers=1)
    with pytest.raises(errors.InvalidArgumentError, match="must be a dict"):
        croupier.serve([(np.zeros(2), np.zeros(2))], cluster.address, "tuple", consumers=1)
    with pytest.raises(errors.InvalidArgumentError, match="pass batches_per_epoch"):
        croupier.serve(iter([{"x": np.zeros(2, np.float32)}]), cluster.address, "nolen",
                       consumers=1)
    with pytest.raises(errors.InvalidArgumentError, match="at least num_consumers"):
        croupier.serve([{"x": np.zeros(2, np.float32)}], cluster.address, "few", consumers=2)
    # A TFRecord producer never takes a Python job's work, and a Python job takes no files.
    with pytest.raises(errors.InvalidArgumentError, match="reads no files"):
        croupier.create_job(cluster.address, "mixed", "/tmp/*.tfrecord", "x:int64", 2,
                            consumers=1, source="python", batches_per_epoch=4)


@pytest.mark.timeout(60)
def test_two_sources_serve_one_job_interleaved_by_task(cluster):
    """Source k yields only its own batches, numbered from 0; the job interleaves the sources by
    task, deterministically."""
    def source(k):
        def epoch_batches(epoch):
            for i in range(100):
                yield {"src": np.full(2, k, dtype=np.int64), "i": np.full(2, i, dtype=np.int64)}
        return epoch_batches

    servers = [Server(source(k), cluster.address, "two", consumers=2, epochs=1,
                      batches_per_epoch=40, source_count=2, source_index=k) for k in range(2)]
    feeds = [connect(cluster, "two", r, 2) for r in range(2)]
    per_task = int(cluster.status(job_info=True)["jobs"][0]["batches_per_task"])
    got = {}
    for step, pair in enumerate(zip(*(f.epoch(0) for f in feeds))):
        for rank, batch in enumerate(pair):
            got[step * 2 + rank] = (int(batch["src"][0]), int(batch["i"][0]))
    for f in feeds:
        f.close()
    assert sorted(got) == list(range(40))
    for g, (src, i) in got.items():
        t = g // per_task
        assert src == t % 2 and i == t // 2 * per_task + g % per_task, (g, src, i)
    # Each source served exactly the batches of its own tasks.
    want = [sum(1 for g in range(40) if g // per_task % 2 == k) for k in range(2)]
    assert [s.join() for s in servers] == want


@pytest.mark.timeout(60)
def test_serve_stops_with_an_error_once_the_dispatcher_is_gone(tmp_path):
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from service_cluster import Cluster, kill
    with Cluster(tmp_path / "c") as c:
        server = Server(numbered(6), c.address, "gone", consumers=1, epochs=0,
                        batches_per_epoch=6, dispatcher_timeout=3.0)
        feed = connect_to(c.address, "gone")
        assert len(list(feed.epoch(0))) == 6
        feed.close()
        kill(c.dispatcher)
        started = time.monotonic()
        with pytest.raises(errors.UnavailableError, match="has not answered the producer of job"):
            server.join(timeout=30)
        assert time.monotonic() - started < 20


def connect_to(address, job):
    deadline = time.monotonic() + 20
    while True:
        try:
            return croupier.Consumer(address, job, 0, 1, timeout=20)
        except errors.NotFoundError:
            assert time.monotonic() < deadline, f"job {job} was not created"
            time.sleep(0.05)


@pytest.mark.timeout(60)
def test_the_interpreter_exits_cleanly_while_serve_runs_in_a_daemon_thread(cluster):
    import subprocess
    import sys
    script = (
        "import threading, time, numpy as np, croupier\n"
        "def source(epoch):\n"
        "    for g in range(4):\n"
        "        yield {'g': np.full(2, g, dtype=np.int64)}\n"
        f"t = threading.Thread(target=croupier.serve, args=(source, {cluster.address!r}, 'd'),\n"
        "                     kwargs=dict(consumers=1, epochs=0, batches_per_epoch=4),\n"
        "                     daemon=True)\n"
        "t.start()\n"
        "time.sleep(2)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=40)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr


@pytest.mark.timeout(120)
def test_a_new_serving_process_takes_over_the_tasks_of_a_killed_one(tmp_path):
    import subprocess
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from service_cluster import Cluster, check_plan_ids, kill, read_batches
    script = pathlib.Path(__file__).resolve().parent / "stream_source.py"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(pathlib.Path(croupier.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]))

    def start(cluster, name):
        log = open(tmp_path / f"{name}.log", "w")
        proc = subprocess.Popen([sys.executable, str(script), cluster.address, "s", "40"],
                                stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        cluster.procs.append(proc)
        return proc

    with Cluster(tmp_path / "c", producer_timeout_ms=1500) as cluster:
        first = start(cluster, "serve0")
        outs = [tmp_path / f"rank{r}.jsonl" for r in range(2)]
        consumers = [cluster.start_consumer("s", r, 2, outs[r], 1, "--prefetch", "1",
                                            "--slow-ms", "50") for r in range(2)]
        deadline = time.monotonic() + 60
        while not outs[0].exists() or len(read_batches(outs[0])) < 4:
            assert time.monotonic() < deadline, "the consumers did not start"
            time.sleep(0.05)
        kill(first)  # SIGKILL, mid-epoch: its buffered batches are lost with it
        start(cluster, "serve1")  # at once, before the dispatcher gives up on the dead one
        cluster.wait(consumers, timeout=90)
        per_rank = [read_batches(o) for o in outs]
    # Every batch once, in plan order (shuffle none: batch g holds ids 4g..4g+3), equal steps.
    check_plan_ids(per_rank, 160, 4, seed=0, shuffle="none")
