"""Horovod for real (0.28.1, built from PyPI's sdist by scripts/build_horovod.sh, which
scripts/bootstrap.sh runs): 4 Horovod processes fed by one croupier job, each batch dealt to one.

- examples/horovod_pytorch.py under `horovodrun -np 4 --gloo` and under `mpirun -np 4`
  (hvd.DistributedOptimizer, hvd.broadcast_parameters);
- examples/horovod_tensorflow.py under `horovodrun -np 4 --gloo`, each process reading its rank
  through croupier's TensorFlow dataset op: a custom loop with hvd.DistributedGradientTape, and
  Keras model.fit with hvd.DistributedOptimizer.

croupier takes each process's rank from the launcher (HOROVOD_RANK/SIZE under horovodrun --gloo,
OMPI_COMM_WORLD_RANK/SIZE under mpirun) and the examples exit non-zero if it is not Horovod's.
The checks are on content: the record ids each rank received are the plan's batches for that rank,
in order (so every record once per epoch and equal steps), and every rank ends with the same
weights, which differ from the initial ones (each rank starts from different weights, so the
broadcast and the all-reduce are both needed for that)."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest

import croupier
from service_cluster import run

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
WORLD = 4
EPOCHS = 2
SEED = 5


@pytest.fixture(scope="module", autouse=True)
def horovod_built():
    """Horovod must be importable: the bootstrap builds it; a missing build fails, never skips."""
    proc = subprocess.run([sys.executable, "-c", "import horovod.torch, horovod.tensorflow"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, (
        "Horovod is not importable in this environment (scripts/build_horovod.sh builds it):\n"
        + proc.stderr[-2000:])
    assert (BIN / "horovodrun").exists(), f"no horovodrun beside {sys.executable}"


def launch(command, work_dir, timeout):
    """Runs a launcher (horovodrun or mpirun) in its own process group, with its output in
    work_dir/launcher.log, and kills the whole group at the end, whatever happened."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2",
               CUDA_VISIBLE_DEVICES="", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,tcp",
               OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo")
    # Not the launcher variables of the process running the tests, if any.
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "TF_CONFIG",
                 "HOROVOD_RANK", "HOROVOD_SIZE"):
        env.pop(name, None)
    log = work_dir / "launcher.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(c) for c in command], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank it started
            except ProcessLookupError:
                pass
            proc.wait()
    text = log.read_text()
    assert code is not None, f"{command[0]} still running after {timeout} s:\n{text[-4000:]}"
    assert code == 0, f"{command[0]} exited with {code}:\n{text[-6000:]}"
    return text


def horovodrun(script, *args):
    return [BIN / "horovodrun", "-np", WORLD, "-H", f"localhost:{WORLD}", "--gloo",
            "--network-interface", "lo", sys.executable, ROOT / "examples" / script, *args]


def check_reports(report, num_records, batch_size):
    """The deal, on the ids each rank received, and the same final weights on every rank."""
    reports = [json.loads(pathlib.Path(f"{report}.{r}").read_text()) for r in range(WORLD)]
    assert [r["rank"] for r in reports] == list(range(WORLD))
    for epoch in range(EPOCHS):
        plan = croupier.EpochPlan(num_records, batch_size, WORLD, seed=SEED, epoch=epoch)
        assert plan.steps_per_consumer > 2
        for rank, r in enumerate(reports):
            got = r["epochs"][epoch]["ids"]
            assert len(got) == plan.steps_per_consumer, (epoch, rank, len(got))
            want = [plan.batch(plan.global_batch(rank, s)).tolist() for s in range(len(got))]
            assert got == want, f"epoch {epoch}: rank {rank}'s batches are not the plan's"
        ids = sorted(i for r in reports for batch in r["epochs"][epoch]["ids"] for i in batch)
        planned = sorted(int(i) for b in range(plan.num_batches) for i in plan.batch(b))
        assert ids == planned and len(set(ids)) == len(ids), f"epoch {epoch}: not exactly once"
    weights = [r["weights"] for r in reports]
    assert all(w == weights[0] for w in weights), "the ranks' final weights differ"
    losses = [e["loss"] for e in reports[0]["epochs"]]
    assert losses[-1] < losses[0], losses
    return reports


def synth(tmp_path, records):
    data = tmp_path / "data"
    run("synth", "--out", data, "--files", 2, "--records", records, "--image-bytes", 16, "--quiet")
    return f"{data}/*.tfrecord", "id:int64,label:int64,image:bytes"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("launcher", ["horovodrun-gloo", "mpirun"])
def test_horovod_pytorch_4_ranks_fed_exactly_once_with_identical_weights(tmp_path, launcher):
    files, features = synth(tmp_path, 1024)
    report = tmp_path / "report"
    with croupier.local_cluster(producers=2, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("train", files, features, 16, consumers=WORLD, seed=SEED,
                           epochs=EPOCHS)
        args = ["--dispatcher", cluster.address, "--job", "train", "--epochs", EPOCHS,
                "--report", report]
        if launcher == "mpirun":
            mpirun = shutil.which("mpirun")
            assert mpirun, "mpirun not found (Debian's openmpi-bin)"
            command = [mpirun, "-np", WORLD, "--oversubscribe", sys.executable,
                       ROOT / "examples" / "horovod_pytorch.py", *args]
        else:
            command = horovodrun("horovod_pytorch.py", *args)
        launch(command, tmp_path, timeout=120)
    check_reports(report, 1024, 16)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["gradient-tape", "keras-fit"])
def test_horovod_tensorflow_4_ranks_read_through_the_op_exactly_once(tmp_path, mode):
    import croupier.tf as ctf
    assert ctf.op_available(), "the TensorFlow op was not built"
    path = tmp_path / "reg.tfrecord"
    # The example writes its own data, as a user runs it.
    subprocess.run([sys.executable, ROOT / "examples" / "horovod_tensorflow.py", "--write-data",
                    path, "--records", "512"], check=True, timeout=120)
    report = tmp_path / "report"
    with croupier.local_cluster(producers=2, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("train", str(path), "id:int64,x:float32[4],y:float32", 16,
                           consumers=WORLD, seed=SEED, epochs=EPOCHS)
        args = ["--dispatcher", cluster.address, "--job", "train", "--epochs", EPOCHS,
                "--report", report] + (["--keras"] if mode == "keras-fit" else [])
        launch(horovodrun("horovod_tensorflow.py", *args), tmp_path, timeout=120)
    check_reports(report, 512, 16)
