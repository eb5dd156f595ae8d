"""The recipes of docs/deploy.md, run as written: each test takes the shell block under a heading
of the page (tests/doc_blocks.py) and runs it with bash in a folder that looks like this checkout
after `make build` (.venv, build, deploy, ... as symlinks), as a user copies it into a shell.
Nothing is edited in the block. The environment is this one without any CROUPIER_* variable and
without a `croupier` on PATH; what a test adds to it is said in the test (the trainers' report
folder, so that their record ids can be checked against the epoch plan, and the settings the doc
gives for root or a loopback-only host). The mpirun block is test_deploy.py's
test_the_mpirun_block_of_the_doc_runs_as_written; the Ray block is test_ray_autoscale.py's.
"""
import json
import re

import pytest

from doc_blocks import checkout_folder, doc_block, run_block, user_env
from test_deploy import check_plan


def _reports(folder, world):
    return [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(world)]


def _synth_records(block):
    """The --records of the block's `croupier synth` line."""
    (records,) = re.findall(r"croupier synth .*--records (\d+)", block)
    return int(records)


def _run_as_written(block, tmp_path):
    """Runs `block` in a checkout-like folder with CROUPIER_REPORT_DIR added (deploy/trainer.py
    writes each rank's record ids there); fails unless it exits 0. What it printed."""
    folder = checkout_folder(tmp_path / "checkout")
    env = user_env(CROUPIER_REPORT_DIR=str(tmp_path / "reports"))
    done = run_block(block, folder, env, timeout=80)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.timeout(90)
def test_the_one_machine_block_runs_as_written(tmp_path):
    """docs/deploy.md "One machine": `build/bin/croupier synth` then `.venv/bin/python
    deploy/local_cluster.py` with 4 trainers and 2 producers over 2 epochs. Added to the
    environment: CROUPIER_REPORT_DIR, which deploy/trainer.py reads (each rank writes its record
    ids). The ids of every step of every rank are the epoch plan's (batch 64, seed 0: the
    script's defaults)."""
    block = doc_block("One machine")
    assert "build/bin/croupier synth --out demo" in block, block
    assert "--trainers 4" in block and "--epochs 2" in block, block
    _run_as_written(block, tmp_path)
    check_plan(_reports(tmp_path / "reports", 4), _synth_records(block), 64, 4, 0, 2)


@pytest.mark.timeout(90)
def test_the_torchrun_block_runs_as_written(tmp_path):
    """docs/deploy.md "torchrun": `build/bin/croupier synth`, then deploy/torchrun.sh 4 with the
    script's defaults (the checkout's .venv/bin/python runs torch.distributed.run and
    deploy/trainer.py; batch 64, seed 0, 1 epoch; the service on 0.0.0.0, reached at the host's
    name). Added to the environment: CROUPIER_REPORT_DIR only."""
    pytest.importorskip("torch")
    block = doc_block("torchrun")
    assert "croupier synth --out demo" in block and "deploy/torchrun.sh 4" in block, block
    assert "croupier: dispatcher at " in _run_as_written(block, tmp_path)
    check_plan(_reports(tmp_path / "reports", 4), _synth_records(block), 64, 4, 0, 1)


@pytest.mark.timeout(90)
def test_the_horovodrun_block_runs_as_written(tmp_path):
    """docs/deploy.md "horovodrun", its first block: `build/bin/croupier synth`, then
    deploy/horovodrun.sh 3 with CROUPIER_HOROVOD_HOSTS=localhost:3 and --gloo, as written: the
    checkout's .venv/bin/horovodrun starts 3 ranks of deploy/trainer.py, which read their rank
    from HOROVOD_RANK/SIZE (batch 64, seed 0, 1 epoch). Added to the environment:
    CROUPIER_REPORT_DIR only."""
    pytest.importorskip("horovod")
    block = doc_block("horovodrun")
    assert "CROUPIER_HOROVODRUN_ARGS=--gloo" in block and "deploy/horovodrun.sh 3" in block, block
    _run_as_written(block, tmp_path)
    check_plan(_reports(tmp_path / "reports", 3), _synth_records(block), 64, 3, 0, 1)


def test_the_doc_names_a_test_for_each_block_it_says_was_run():
    """docs/deploy.md "What was run here": each block's row names a test that exists, and the
    recipes that start something each have a row."""
    from doc_blocks import DOC, ROOT
    text = DOC.read_text()
    table = text[text.index("| block | run as written by |"):text.index("Not run as written:")]
    for heading in ("One machine", "torchrun", "mpirun", "horovodrun", "Slurm", "Ray"):
        assert f"| [{heading}](#" in table, heading
    sources = "".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    names = re.findall(r"(?<![\w/])test_\w+(?!\.py)", table)
    assert len(names) >= 5, names
    for name in names:
        assert f"def {name}(" in sources, name
