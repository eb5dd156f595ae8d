"""The examples run as written: examples/pytorch_ddp.py under torchrun shows its progress and
writes one report per rank; examples/horovod_tensorflow.py writes its own data
(--write-data; tests/test_horovod.py trains on it under horovodrun); examples/gpt_tokens.py learns
from a tokens job and resumes from 4 ranks to 2 on the same batches."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import croupier

ROOT = pathlib.Path(__file__).resolve().parent.parent
FEATURES = "id:int64,label:int64,pixels:float32[64]"


@pytest.mark.timeout(240)
def test_pytorch_ddp_under_torchrun_shows_progress_and_writes_a_report_per_rank(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    data = tmp_path / "digits"
    subprocess.run([sys.executable, ROOT / "scripts" / "demo_data.py", data],
                   check=True, timeout=120, capture_output=True)
    torchrun = pathlib.Path(sys.executable).parent / "torchrun"
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("train", f"{data}/*.tfrecord", FEATURES, 64, consumers=2, seed=1,
                           epochs=2)
        run = subprocess.run(
            [torchrun, "--standalone", "--nproc-per-node", "2",
             ROOT / "examples" / "pytorch_ddp.py", "--dispatcher", cluster.address,
             "--job", "train", "--epochs", "2", "--report", tmp_path / "report.json"],
            capture_output=True, text=True, timeout=200,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "epoch 1/2:" in run.stdout and "epoch 2/2:" in run.stdout, run.stdout
    reports = [json.loads((tmp_path / f"report.json.{r}").read_text()) for r in range(2)]
    assert [r["rank"] for r in reports] == [0, 1]
    for e in range(2):
        ids = [i for r in reports for batch in r["epochs"][e]["ids"] for i in batch]
        assert len(ids) == len(set(ids)) and len(ids) > 0
        assert reports[0]["epochs"][e]["steps"] == reports[1]["epochs"][e]["steps"]


@pytest.mark.timeout(120)
def test_horovod_tensorflow_writes_its_own_data(tmp_path):
    pytest.importorskip("tensorflow")
    path = tmp_path / "reg.tfrecord"
    run = subprocess.run([sys.executable, ROOT / "examples" / "horovod_tensorflow.py",
                          "--write-data", path, "--records", "40"],
                         capture_output=True, text=True, timeout=110)
    assert run.returncode == 0, run.stdout + run.stderr
    records = list(croupier.TFRecordReader(str(path)))
    batch = croupier.decode_batch(records, "id:int64,x:float32[4],y:float32")
    assert batch["id"].tolist() == list(range(40))
    assert batch["x"][2].tolist() == pytest.approx([2 / 40, 4 / 40, 6 / 40, 8 / 40])
    assert batch["y"][2] == pytest.approx(sum(batch["x"][2]) / 2 - 0.25, abs=1e-6)


@pytest.mark.long
@pytest.mark.timeout(600)
def test_the_gpt_example_learns_and_a_resume_from_4_to_2_ranks_continues_its_curve(tmp_path):
    """examples/gpt_tokens.py demo: a tokens job over the standard library feeds a small GPT on 4
    ranks; a run checkpointed at step 10 and resumed on 2 ranks gets the same global batches,
    step by step (digests of their sequences), and the same losses but for the reduction order
    of floating-point sums."""
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    run = subprocess.run([sys.executable, ROOT / "examples" / "gpt_tokens.py", "demo", "--out",
                          tmp_path, "--steps", "20"],
                         capture_output=True, text=True, timeout=580,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == summary["resumed_steps"] == 20
    assert summary["same_batches"]
    assert summary["largest_loss_difference"] < 1e-3
    assert summary["last_loss"] < summary["first_loss"] - 0.5
