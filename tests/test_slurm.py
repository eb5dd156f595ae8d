"""The Slurm scripts of deploy/slurm/ under a real Slurm (docs/deploy.md, "Slurm").

A real Slurm runs on this host for the module (slurm_cluster.py): Debian's munged, slurmctld and two
slurmd (node0, node1, both 127.0.0.1), as root; the module skips when it is not root or Slurm is
not installed. Each test submits a script as docs/deploy.md shows it (`sbatch --wait`, from the
repository's root, with the settings in the environment) and checks:
- the trainers (deploy/trainer.py, 2 ranks, 2 epochs) got exactly the plan's batches: every rank
  every step of each epoch, the plan's record ids, each record once;
- the end is clean: no `error:` line in the job's output or the service's logs, and the dispatcher
  and the producer stopped on SIGTERM ("signal 15: ..."), the producer leaving;
- nothing is left: no process of the job's, after the normal end or after `scancel` mid-run.
The block of docs/deploy.md as written: test_the_slurm_block_of_the_doc_runs_as_written.
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
    # Every daemon was stopped and waited for; nothing of theirs (a slurmstepd) is left.
    deadline = time.monotonic() + 15
    while (processes_naming(str(base)) or daemon_pids() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = set(processes_naming(str(base))) | (daemon_pids() - before)
    assert not left, f"Slurm processes outlived the module: {left}"


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
    assert len(list((shared / "pids").glob("*.pid"))) == 2  # the dispatcher and a producer
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


@pytest.mark.timeout(120)
def test_autoscaled_producers_are_slurm_jobs(slurm, tmp_path):
    """deploy/slurm/autoscale.py's SlurmProducers under croupier.autoscale.Autoscaler: a
    dispatcher on loopback (outside Slurm), and a recommendation that goes 2, 3, 1, given by a
    status callable (the dispatcher's own figure is tested in test_autoscale.py): each step
    submits or cancels croupier-producer.sbatch jobs, as many producers register, and the
    cancelled ones leave the dispatcher (SIGTERM, "signal 15: leaving"). At the end, scale(0)
    leaves no job and no process."""
    import importlib.util
    from service_cluster import Cluster
    from croupier.autoscale import Autoscaler
    spec = importlib.util.spec_from_file_location("slurm_autoscale", SLURM / "autoscale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    logs = tmp_path / "logs"
    logs.mkdir()
    with Cluster(tmp_path / "service") as cluster:
        env = dict(slurm.env, CROUPIER=str(BIN), CROUPIER_BIND="127.0.0.1",
                   CROUPIER_HOST="127.0.0.1", CROUPIER_PRODUCER_THREADS="1")
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
            left = [p.read_text() for p in logs.glob("*.out")]
            assert sum("signal 15: leaving" in text for text in left) == 2, left
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
