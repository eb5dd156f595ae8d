"""`pip install .` into a fresh virtual environment, then a small job run with the installed copy
only: its extension module, its `croupier` command, no source tree on the path."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

_SCRIPT = textwrap.dedent("""
    import pathlib, subprocess, sys
    import croupier
    assert "site-packages" in croupier.__file__, croupier.__file__
    binary = croupier.croupier_binary()
    assert binary.startswith(sys.prefix), binary
    data = pathlib.Path(sys.argv[1])
    subprocess.run([binary, "synth", "--out", str(data), "--files", "2", "--records", "300",
                    "--image-bytes", "32", "--quiet"], check=True)
    with croupier.local_cluster(producers=1) as cluster:
        cluster.create_job("t", str(data / "*.tfrecord"), "id:int64,label:int64,image:bytes", 10,
                           consumers=2, seed=1, epochs=1)
        feeds = [cluster.consumer("t", r, 2) for r in range(2)]
        ids = sorted(i for pair in zip(*(f.epoch(0) for f in feeds)) for b in pair
                     for i in b["id"].tolist())
        for f in feeds:
            f.close()
    assert ids == list(range(300)), ids[:20]
    print("installed copy ok")
""")


@pytest.mark.timeout(1200)
def test_pip_install_into_a_fresh_venv_runs_a_job(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("CROUPIER_BIN", "PYTHONPATH")}
    # The build tools first, so that the build needs no isolated environment of its own.
    subprocess.run([py, "-m", "pip", "install", "-q", "scikit-build-core==1.1.2",
                    "pybind11==3.1.0", "numpy==2.4.6"], check=True, timeout=600, env=env)
    proc = subprocess.run([py, "-m", "pip", "install", "-q", "--no-build-isolation", str(ROOT)],
                          capture_output=True, text=True, timeout=1000,
                          env=dict(env, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = subprocess.run([py, "-c", _SCRIPT, str(tmp_path / "data")], capture_output=True,
                         text=True, timeout=120, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "installed copy ok" in run.stdout
