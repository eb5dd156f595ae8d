"""The Slurm scripts of deploy/slurm/ under a real Slurm (docs/deploy.md, "Slurm").

A real Slurm runs on this host for the module (slurm_cluster.py): Debian's munged, slurmctld and two
slurmd (node0, node1, both 127.0.0.1), as root; the module skips when it is not root or Slurm is
not installed. Each test of the service scripts submits one as docs/deploy.md shows it (`sbatch`,
from the repository's root, with the settings in the environment), waits for it to leave the
queue, and checks:
- the trainers (deploy/trainer.py, 2 ranks, 2 epochs) got exactly the plan's batches: every rank
  every step of each epoch, the plan's record ids, each record once;
- the end is clean: no `error:` line in the job's output or the service's logs, and the dispatcher
  and the producer stopped on SIGTERM ("signal 15: ..."), the producer leaving;
- nothing is left: no process of the job's, after the normal end or after `scancel` mid-run.
The block of docs/deploy.md as written: test_the_slurm_block_of_the_doc_runs_as_written. The
autoscaled producer jobs (deploy/slurm/autoscale.py, croupier-producer.sbatch): with a figure the
test sets, test_autoscaled_producers_are_slurm_jobs; with the dispatcher's own advice while
trainers read, test_the_autoscaler_follows_the_dispatchers_advice_while_trainers_read.
Not run here: a cluster of several hosts, GPUs, cgroups, accounting.
"""
import json
import os
import pathlib
import re
import sys
import time

import pytest

from doc_blocks import checkout_folder, doc_block, run_block, user_env
from service_cluster import BIN, ROOT, check_plan_ids, processes_naming, synth_dataset
from slurm_cluster import SlurmCluster, daemon_pids, missing_reason

SLURM = ROOT / "deploy" / "slurm"
FEATURES = "id:int64,label:int64,image:bytes"
RECORDS, BATCH, WORLD, SEED, EPOCHS = 600, 16, 2, 3, 2

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    base = tmp_path_factory.mktemp("slurm")
    before = daemon_pids()
    with SlurmCluster(base / "cluster") as cluster:
        yield cluster
    # Every daemon was stopped and waited for; nothing of theirs (a slurmstepd) is left. On a
    # loaded machine (make test-engines runs Ray beside this file) a last job's slurmstepd has
    # taken more than 15 s to end.
    deadline = time.monotonic() + 60
    while (processes_naming(str(base)) or daemon_pids() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = set(processes_naming(str(base))) | (daemon_pids() - before)
    assert not left, f"Slurm processes outlived the module: {left}"


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(request):
    """Whatever a test left in the queue (it failed before its end) is cancelled and waited for,
    so that the next tests find the nodes free: a failure stays that test's. A test that does
    not use the cluster neither starts it nor waits on its queue (a squeue under load has taken
    most of such a test's 30 s)."""
    if "slurm" not in request.fixturenames:
        yield
        return
    slurm = request.getfixturevalue("slurm")
    yield
    if slurm.jobs():
        slurm.run(["scancel", "--user=root"], check=False)
        deadline = time.monotonic() + 30
        while slurm.jobs() and time.monotonic() < deadline:
            time.sleep(0.3)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("slurm-data")
    synth_dataset(out, RECORDS, files=2, image_bytes=32)
    return out


def _env(slurm, tmp_path, data, **extra):
    """The settings of docs/deploy.md. The croupier command and the trainers' Python: the build's
    (build/bin/croupier, which the scripts find by themselves when it is there) and this Python
    with the worktree's package."""
    env = dict(slurm.env, CROUPIER_FILES=f"{data}/*.tfrecord", CROUPIER_FEATURES=FEATURES,
               CROUPIER_BATCH_SIZE=str(BATCH), CROUPIER_EPOCHS=str(EPOCHS),
               CROUPIER_SEED=str(SEED), CROUPIER_SHARED=str(tmp_path / "shared"),
               CROUPIER_REPORT_DIR=str(tmp_path / "reports"), CROUPIER_TIMEOUT="60",
               CROUPIER_PYTHON=sys.executable, CROUPIER_STOP_TIMEOUT="20",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "python"),
                                                        os.environ.get("PYTHONPATH")])))
    for name in ("CROUPIER", "CROUPIER_DISPATCHER", "CROUPIER_PORT", "CROUPIER_TRAINER"):
        env.pop(name, None)
    if BIN != ROOT / "build" / "bin" / "croupier":
        env["CROUPIER"] = str(BIN)
    env.update(extra)
    return env


def _submit(slurm, script, env, out, *options):
    """sbatch from the repository's root; returns the job id."""
    proc = slurm.run(["sbatch", "--parsable", f"--output={out}", *options, str(script)],
                     env=env, cwd=ROOT)
    return proc.stdout.strip().split(";")[0]


def _wait_job(slurm, job_id, timeout):
    """Waits for the job to leave the queue; returns its final state."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = slurm.job_state(job_id)
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(0.3)
    slurm.run(["scancel", job_id], check=False)
    raise AssertionError(f"job {job_id} still {state} after {timeout} s\n{slurm.logs()}")


def _node_lists(slurm, job_id):
    """The NodeList of each of the job's components (one for a plain job)."""
    out = slurm.run(["scontrol", "show", "job", job_id]).stdout
    return re.findall(r"^\s+NodeList=(\S+)", out, re.MULTILINE)


def _check_reports(report_dir):
    """Every rank got every planned step of each epoch, the plan's record ids, each record once;
    returns each rank's batch content hashes."""
    reports = [json.loads((report_dir / f"rank-{r}.json").read_text()) for r in range(WORLD)]
    assert [(r["rank"], r["world"]) for r in reports] == [(r, WORLD) for r in range(WORLD)]
    per_rank = [[{"epoch": e["epoch"], "step": step, "ids": ids}
                 for e in report["epochs"] for step, ids in enumerate(e["ids"])]
                for report in reports]
    check_plan_ids(per_rank, RECORDS, BATCH, SEED, epochs=range(EPOCHS))
    return [[h for e in report["epochs"] for h in e["hashes"]] for report in reports]


def _check_clean_end(job_out, shared):
    texts = {"the job's output": job_out.read_text(),
             "dispatcher.log": (shared / "dispatcher.log").read_text(),
             "producers.log": (shared / "producers.log").read_text()}
    for name, text in texts.items():
        errors = [line for line in text.splitlines() if "error:" in line.lower()]
        assert not errors, f"{name}: {errors}\n{text[-3000:]}"
        assert "Killed" not in text and "CANCELLED" not in text, f"{name}:\n{text[-3000:]}"
    assert "[dispatcher] signal 15: shutting down" in texts["dispatcher.log"]
    assert "[dispatcher] stopped" in texts["dispatcher.log"]
    assert "[producer] signal 15: leaving" in texts["producers.log"]
    assert re.search(r"producer \d+ at \S+ removed \(it left\)", texts["dispatcher.log"])
    return texts


def _pids_left(shared):
    """The service's processes (from its pid files) that are still croupier processes, and any
    process that names the job's folder."""
    left = set(processes_naming(str(shared)))
    for pid_file in (shared / "pids").glob("*.pid"):
        pid = int(pid_file.read_text())
        try:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"croupier" in cmdline:
            left.add(pid)
    return left


def _wait_nothing_left(shared, timeout=20):
    deadline = time.monotonic() + timeout
    while _pids_left(shared) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pids_left(shared), f"processes left behind: {_pids_left(shared)}"


@pytest.mark.timeout(120)
def test_single_allocation_runs_on_one_node(slurm, data, tmp_path):
    env = _env(slurm, tmp_path, data)
    job_out = tmp_path / "job.out"
    job_id = _submit(slurm, SLURM / "croupier-single.sbatch", env, job_out)
    assert _wait_job(slurm, job_id, 90) == "COMPLETED", job_out.read_text()
    shared = tmp_path / "shared"
    (nodes,) = _node_lists(slurm, job_id)
    assert nodes in ("node0", "node1")
    _check_reports(tmp_path / "reports")
    texts = _check_clean_end(job_out, shared)
    address = (shared / "dispatcher.address").read_text().strip()
    assert f"croupier: dispatcher at {address}, {WORLD} trainers" in texts["the job's output"]
    assert len(re.findall(r"producer \d+ registered", texts["dispatcher.log"])) == 1
    _wait_nothing_left(shared)


@pytest.mark.timeout(150)
def test_heterogeneous_job_service_and_trainers_on_two_nodes(slurm, data, tmp_path):
    env = _env(slurm, tmp_path, data)
    job_out = tmp_path / "job.out"
    job_id = _submit(slurm, SLURM / "croupier.sbatch", env, job_out)
    assert _wait_job(slurm, job_id, 120) == "COMPLETED", job_out.read_text()
    service_nodes, trainer_nodes = _node_lists(slurm, job_id)
    assert {service_nodes, trainer_nodes} == {"node0", "node1"}
    _check_reports(tmp_path / "reports")
    shared = tmp_path / "shared"
    texts = _check_clean_end(job_out, shared)
    assert f"{WORLD} trainers" in texts["the job's output"]
    assert len(re.findall(r"producer \d+ registered", texts["dispatcher.log"])) == 1
    _wait_nothing_left(shared)


@pytest.mark.timeout(120)
def test_two_jobs_on_one_node_each_pick_their_port(slurm, data, tmp_path):
    """Two single-allocation jobs at once on node0, one trainer each: each dispatcher picks its
    own free port, and both jobs deal their plan."""
    runs = [tmp_path / "a", tmp_path / "b"]
    jobs = []
    for run in runs:
        run.mkdir()
        env = _env(slurm, run, data)
        jobs.append(_submit(slurm, SLURM / "croupier-single.sbatch", env, run / "job.out",
                            "--ntasks=1", "--nodelist=node0"))
    for run, job_id in zip(runs, jobs):
        assert _wait_job(slurm, job_id, 90) == "COMPLETED", (run / "job.out").read_text()
    ports = [(run / "shared" / "dispatcher.port").read_text().strip() for run in runs]
    assert ports[0] != ports[1] and "5050" not in ports, ports
    for run in runs:
        report = json.loads((run / "reports" / "rank-0.json").read_text())
        assert report["world"] == 1 and len(report["epochs"]) == EPOCHS
        plan_steps = (RECORDS // BATCH)
        assert [e["steps"] for e in report["epochs"]] == [plan_steps] * EPOCHS
        _check_clean_end(run / "job.out", run / "shared")
        _wait_nothing_left(run / "shared")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", ["croupier-single.sbatch", "croupier.sbatch"])
def test_scancel_mid_run_leaves_no_process(slurm, data, tmp_path, script):
    trainer = tmp_path / "slow_trainer.py"  # a trainer that is still running when cancelled
    trainer.write_text("import time\ntime.sleep(300)\n")
    env = _env(slurm, tmp_path, data, CROUPIER_TRAINER=f"{sys.executable} {trainer}")
    job_out = tmp_path / "job.out"
    shared = tmp_path / "shared"
    job_id = _submit(slurm, SLURM / script, env, job_out)
    deadline = time.monotonic() + 60
    while len(processes_naming(str(trainer))) < WORLD:  # the trainers run: all steps are up
        assert time.monotonic() < deadline, f"the trainers did not start\n{job_out.read_text()}"
        time.sleep(0.2)
    while len(list((shared / "pids").glob("*.pid"))) < 2:  # the dispatcher and a producer
        assert time.monotonic() < deadline, f"the service did not start\n{job_out.read_text()}"
        time.sleep(0.2)
    assert len(list((shared / "pids").glob("*.pid"))) == 2
    slurm.run(["scancel", job_id])
    assert _wait_job(slurm, job_id, 60) == "CANCELLED"
    _wait_nothing_left(shared, timeout=30)
    assert not processes_naming(str(trainer))


@pytest.mark.timeout(150)
def test_the_slurm_block_of_the_doc_runs_as_written(slurm, tmp_path):
    """docs/deploy.md "Slurm", the block as written (tests/doc_blocks.py), in a folder that looks
    like the checkout after `make build`: `build/bin/croupier synth`, then both sbatch lines with
    the scripts' defaults (2 trainers, 1 epoch, batch 64; build/bin/croupier and .venv/bin/python
    of the submit folder; CROUPIER_SHARED under it). Added to the environment: the test Slurm's
    SLURM_CONF, and PYTHONPATH naming this checkout's package. Both jobs complete with a clean
    end, each rank took the same steps in its epoch, and nothing of either job is left. The record
    ids of these scripts' runs are checked against the plan by the tests above."""
    block = doc_block("Slurm")
    assert block.count("sbatch deploy/slurm/") == 2 and "croupier synth" in block, block
    folder = checkout_folder(tmp_path / "checkout")
    env = user_env(SLURM_CONF=slurm.env["SLURM_CONF"],
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "python"),
                                                            os.environ.get("PYTHONPATH")])))
    done = run_block(block, folder, env, timeout=60, check_left=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    jobs = re.findall(r"^Submitted batch job (\d+)$", done.stdout, re.MULTILINE)
    assert len(jobs) == 2, done.stdout
    for job_id in jobs:
        job_out = folder / f"slurm-{job_id}.out"
        assert _wait_job(slurm, job_id, 100) == "COMPLETED", job_out.read_text()
        shared = folder / f"croupier-{job_id}"
        texts = _check_clean_end(job_out, shared)
        steps = re.findall(r"\[rank (\d)/2\] epoch 0: (\d+) steps", texts["the job's output"])
        assert sorted(r for r, _ in steps) == ["0", "1"], texts["the job's output"]
        assert len({s for _, s in steps}) == 1 and int(steps[0][1]) > 0, steps
        _wait_nothing_left(shared)
    assert not processes_naming(str(folder))


def _autoscale_module():
    """deploy/slurm/autoscale.py, imported."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("slurm_autoscale", SLURM / "autoscale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(30)
def test_the_autoscaler_survives_a_slurm_command_that_fails(tmp_path, capsys):
    """A Slurm command that fails or does not answer (here squeue with a missing slurm.conf,
    which retries for a minute, against a timeout of 1 s) is an UnavailableError naming it,
    printed; the Autoscaler's loop goes on to the next round instead of dying with it."""
    import croupier
    from croupier.autoscale import Autoscaler
    producers = _autoscale_module().SlurmProducers(
        "127.0.0.1:1", "croupier-producer-none", timeout=1,
        env=dict(os.environ, SLURM_CONF=str(tmp_path / "missing.conf")))
    scaler = Autoscaler(lambda: {"producer_advice": {"recommended": 2}}, producers.current,
                        producers.scale, interval=0.2)
    with pytest.raises(croupier.errors.UnavailableError, match="squeue failed"):
        scaler.step()
    scaler.start()
    try:
        time.sleep(2.5)
        assert scaler._thread.is_alive()
    finally:
        scaler.stop()
    printed = capsys.readouterr().out
    assert printed.count("croupier autoscale: squeue -h --name croupier-producer-none") >= 2, \
        printed
    assert scaler.changes == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["tfrecord", "map"])
def test_autoscaled_producers_are_slurm_jobs(slurm, tmp_path, kind):
    """deploy/slurm/autoscale.py's SlurmProducers under croupier.autoscale.Autoscaler: a
    dispatcher on loopback (outside Slurm), and a recommendation that goes 2, 3, 1, given by a
    status callable (the dispatcher's own figure is the next test's): each step submits
    croupier-producer.sbatch jobs or tells the newest to leave, as many producers register, and
    the ones told leave the dispatcher on SIGTERM. Both kinds of producer the script runs: a
    TFRecord producer (`croupier producer`, which logs "signal 15: leaving"), and a map job's
    (CROUPIER_PRODUCE=map_sources:pipeline: `croupier produce`, whose first producer creates the
    job and which logs "producer N left"). At the end, scale(0) leaves no job and no process."""
    import json
    from service_cluster import Cluster
    from croupier.autoscale import Autoscaler
    module = _autoscale_module()
    logs = tmp_path / "logs"
    logs.mkdir()
    with Cluster(tmp_path / "service") as cluster:
        env = dict(slurm.env, CROUPIER=str(BIN), CROUPIER_BIND="127.0.0.1",
                   CROUPIER_HOST="127.0.0.1", CROUPIER_PRODUCER_THREADS="1")
        left = "signal 15: leaving"
        if kind == "map":
            env.update(CROUPIER_PRODUCE="map_sources:pipeline", CROUPIER_JOB="m",
                       CROUPIER_PRODUCE_WORKERS="0", CROUPIER_PYTHON=sys.executable,
                       MAP_TEST=json.dumps({"records": 96, "batch_size": 4, "consumers": 2,
                                            "epochs": 1}),
                       PYTHONPATH=os.pathsep.join(filter(None, [
                           str(ROOT / "tests"), str(ROOT / "python"),
                           os.environ.get("PYTHONPATH")])))
            left = "left: its unfinished tasks go to the other producers"
        producers = module.SlurmProducers(cluster.address, "croupier-producer-test",
                                          [f"--output={logs}/%j.out"], env=env)
        figures = iter([2, 3, 1])
        scaler = Autoscaler(lambda: {"producer_advice": {"recommended": next(figures)}},
                            producers.current, producers.scale, min_producers=1,
                            max_producers=4, interval=1)

        def registered():
            return len(cluster.status()["producers"])

        def wait_for(n, timeout=40):
            deadline = time.monotonic() + timeout
            while (registered() != n or producers.current() != n) and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
            assert (registered(), producers.current()) == (n, n), \
                f"wanted {n} producers\n{slurm.logs()}"

        try:
            for n in (2, 3, 1):
                assert scaler.step() == n
                wait_for(n)
            assert scaler.changes == [(0, 2), (2, 3), (3, 1)]
            if kind == "map":
                assert [j["name"] for j in cluster.status()["jobSummaries"]] == ["m"]
            outputs = [p.read_text() for p in logs.glob("*.out")]
            assert sum(left in text for text in outputs) == 2, outputs
        finally:
            producers.scale(0)
            deadline = time.monotonic() + 30
            while producers.current() and time.monotonic() < deadline:
                time.sleep(0.2)
        assert producers.current() == 0
        deadline = time.monotonic() + 20
        while registered() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert registered() == 0


# The job of the test below: its producers are the bottleneck. Each producer has one thread and
# every batch costs it 40 ms more (--test-make-delay-ms, a sleep, so that producers scale on 2
# cores): one makes about 25 batches/s. Two trainers of 30 ms a step take about 66 batches/s;
# slowed to 150 ms, about 13 (bench/bench_autoscale.py's settings). The dispatcher's fall damping
# is shortened as in tests/test_autoscale.py; a rise waits 2 s and changes are 8 s apart (the
# policy's own timing).
AUTO_RECORDS, AUTO_BATCH, DELAY_MS, FAST_STEP, SLOW_STEP = 2048, 16, 40, 0.03, 0.15
FAST_SECONDS = 12  # the trainers read fast at least this long (a cooldown and more)
DAMPING = ["--advice-smoothing-ms", "2000", "--advice-hold-ms", "1500"]


class EpochReaders:
    """A croupier.Consumer per rank on a thread (service_cluster.RankReaders), each taking
    `pace["step"]` seconds a batch, reading whole epochs until stop(): the ranks then all end
    after the same epoch. `got[rank]` holds each batch as the lines check_plan_ids reads, with
    its content hash."""

    def __init__(self, address, job, pace):
        import threading
        from service_cluster import RankReaders
        self.got = [[] for _ in range(WORLD)]
        self.epochs = [0] * WORLD
        self.end = None  # the number of epochs every rank reads, once stop() was called
        self.lock = threading.Lock()
        self.readers = RankReaders(lambda rank: self._read(address, job, pace, rank), WORLD)

    def _read(self, address, job, pace, rank):
        import croupier
        feed = croupier.Consumer(address, job, rank, WORLD, timeout=60)
        try:
            while True:
                with self.lock:
                    epoch = self.epochs[rank]
                    if self.end is not None and epoch >= self.end:
                        return
                for step, batch in enumerate(feed.batches(epoch)):
                    self.got[rank].append({"epoch": epoch, "step": step,
                                           "ids": batch.to_dict()["id"].tolist(),
                                           "hash": f"{batch.content_hash:016x}"})
                    time.sleep(pace["step"])
                with self.lock:
                    self.epochs[rank] += 1
        finally:
            feed.close()

    def stop(self, timeout):
        """Every rank ends after the epoch the furthest one is in; returns that number."""
        with self.lock:
            self.end = max(self.epochs) + 1
        errors = self.readers.join(timeout)
        assert not errors, errors
        return self.end


@pytest.mark.timeout(120)
def test_the_autoscaler_follows_the_dispatchers_advice_while_trainers_read(slurm, tmp_path):
    """deploy/slurm/autoscale.py run as a user runs it (its command line, a process of its own),
    against a dispatcher on loopback and a TFRecord job whose producers are the bottleneck, with
    two trainers reading it: the dispatcher's own producer_advice rises, the autoscaler submits
    croupier-producer.sbatch jobs beyond its minimum and they register; once the trainers slow
    down the advice falls and it cancels some, which leave cleanly (the producer logs "signal 15:
    leaving", the dispatcher "removed (it left)", no `error:` line). Each rank got the plan's
    records for every epoch it read, the same steps as the other, and the same bytes as a run
    with one fixed producer. Stopped with SIGTERM, the autoscaler cancels its jobs: no Slurm job
    and no process is left."""
    import signal
    import subprocess
    import croupier
    from service_cluster import Cluster, batch_hashes, fault_free_run, synth_dataset
    files = synth_dataset(tmp_path / "data", AUTO_RECORDS, files=2, image_bytes=32)
    logs = tmp_path / "logs"
    logs.mkdir()
    name = "croupier-producer-advice"
    began = time.monotonic()
    seen = []  # (seconds, recommended, Slurm jobs, registered producers, reason)

    def sample():
        status = croupier.status(cluster.address)
        advice = status.get("producer_advice", {})
        jobs = slurm.run(["squeue", "-h", "--name", name, "-o", "%i"]).stdout.split()
        seen.append((round(time.monotonic() - began, 1), int(advice.get("recommended", 0)),
                     len(jobs), len(status["producers"]), advice.get("reason", "")))
        return seen[-1]

    def until(condition, timeout, what):
        deadline = time.monotonic() + timeout
        while not condition(sample()):
            assert scaler.poll() is None, scaler_log.read_text()
            assert time.monotonic() < deadline, \
                f"{what} within {timeout} s; seen: {seen}\n{scaler_log.read_text()}"
            time.sleep(0.5)

    with Cluster(tmp_path / "service", dispatcher_args=DAMPING) as cluster:
        cluster.create_job("train", files, FEATURES, AUTO_BATCH, WORLD, seed=SEED, epochs=0)
        env = dict(slurm.env, CROUPIER=str(BIN), CROUPIER_BIND="127.0.0.1",
                   CROUPIER_HOST="127.0.0.1", CROUPIER_PRODUCER_THREADS="1",
                   CROUPIER_PRODUCER_ARGS=f"--test-make-delay-ms {DELAY_MS}",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "python"),
                                                            os.environ.get("PYTHONPATH")])))
        scaler_log = tmp_path / "autoscale.log"
        with open(scaler_log, "w") as out:
            scaler = subprocess.Popen(
                [sys.executable, str(SLURM / "autoscale.py"), "--dispatcher", cluster.address,
                 "--min", "1", "--max", "4", "--interval", "1", "--name", name, "--",
                 f"--output={logs}/%j.out"], stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        pace = {"step": FAST_STEP}
        readers, epochs = None, None
        try:
            until(lambda s: s[3] >= 1, 20, "no producer registered")
            readers = EpochReaders(cluster.address, "train", pace)
            fast_until = time.monotonic() + FAST_SECONDS  # time for a second rise, if any
            until(lambda s: s[2] >= 2 and s[3] >= 2 and time.monotonic() >= fast_until, 35,
                  "no scale-out")
            pace["step"] = SLOW_STEP

            def fell(s):  # fewer jobs and registered producers than the most seen so far
                return s[2] < max(x[2] for x in seen) and s[3] < max(x[3] for x in seen)
            until(fell, 35, "no scale-in")
            # Within the advice's cooldown (8 s), the trainers finish their epoch at full speed.
            pace["step"] = 0
            epochs = readers.stop(timeout=30)
        finally:
            try:
                if readers is not None and epochs is None:
                    pace["step"] = 0
                    readers.stop(timeout=30)
            finally:  # the autoscaler is stopped whatever happened to the readers
                if scaler.poll() is None:
                    scaler.send_signal(signal.SIGTERM)  # it ends every producer job it started
                try:
                    scaler.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    scaler.kill()
                    scaler.wait(10)
                    raise
        assert scaler.returncode == 0, scaler_log.read_text()
        until(lambda s: s[2] == 0 and s[3] == 0, 20, "producers left over")
        dispatcher_log = (tmp_path / "service" / "dispatcher.log").read_text()
        address = cluster.address
    print("\n".join(map(str, seen)))
    print(scaler_log.read_text())
    print(f"{epochs} epochs, {[len(g) for g in readers.got]} steps per rank")
    # The advice rose beyond the minimum and the Slurm jobs followed it, then fell.
    recommended = [s[1] for s in seen]
    assert max(recommended) >= 2 and max(s[2] for s in seen) >= 2, seen
    assert max(s[3] for s in seen) >= 2, seen
    # Every producer job: submitted by the autoscaler, left on scancel's SIGTERM, no error.
    submitted = re.findall(r"submitted ([\d ]+)", scaler_log.read_text())
    jobs = sorted(int(j) for line in submitted for j in line.split())
    outputs = {int(p.stem): p.read_text() for p in logs.glob("*.out")}
    assert sorted(outputs) == jobs and len(jobs) >= 2, (jobs, sorted(outputs))
    for job, text in outputs.items():
        # The producer left on SIGTERM and exited 0: the job COMPLETED. Slurm's slurmstepd
        # writes its own notice of any SIGTERM it delivers ("error: *** JOB N ON node0
        # CANCELLED AT ... ***", even with --batch); no other `error:` line.
        assert _wait_job(slurm, job, 30) == "COMPLETED", text
        assert "signal 15: leaving" in text, f"job {job}:\n{text}"
        errors = [line for line in text.splitlines() if "error:" in line.lower()
                  and not re.fullmatch(rf"slurmstepd-node\d: error: \*\*\* JOB {job} ON node\d "
                                       r"CANCELLED AT \S+ \*\*\*", line)]
        assert not errors, text
    assert len(re.findall(r"producer \d+ at \S+ removed \(it left\)", dispatcher_log)) == \
        len(jobs), dispatcher_log[-3000:]
    # The trainers' batches: the plan's, equal steps per rank, and the bytes of a fixed run.
    check_plan_ids(readers.got, AUTO_RECORDS, AUTO_BATCH, SEED, range(epochs))
    assert all(len(g) == len(readers.got[0]) for g in readers.got)
    fixed = fault_free_run(tmp_path / "fixed", files, FEATURES, AUTO_BATCH, WORLD, SEED,
                           epochs=epochs)
    for rank in range(WORLD):
        assert batch_hashes(readers.got[rank]) == fixed[rank], f"rank {rank}"
    assert not processes_naming(f"--dispatcher {address}"), processes_naming(address)
