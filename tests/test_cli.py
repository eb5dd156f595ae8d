"""One command-line tool: `croupier produce ...` runs the Python producer of map and stream jobs
(`python -m croupier produce`, croupier.map) by exec, with its flags, its exit codes and its
output, and says so clearly when Python or the croupier package is missing. The parsing of every
other subcommand is tested in C++ (tools/command_line_test.cc)."""
import os
import subprocess
import sys

import pytest

from service_cluster import BIN, ROOT


def produce(*args, env=None, cwd=None):
    return subprocess.run([str(BIN), "produce", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


def python_env(**extra):
    """The environment that makes `croupier produce` run this interpreter with this checkout's
    package."""
    env = dict(os.environ, CROUPIER_PYTHON=sys.executable, PYTHONPATH=str(ROOT / "python"))
    env.update(extra)
    return env


@pytest.mark.timeout(120)
def test_produce_help_is_the_python_producers_own():
    proc = produce("-h", env=python_env())
    assert proc.returncode == 0, proc.stderr
    for flag in ("--dispatcher", "--job", "--workers", "--cache-bytes"):
        assert flag in proc.stdout, proc.stdout
    # The same text as the Python module prints.
    module = subprocess.run([sys.executable, "-m", "croupier", "produce", "-h"], text=True,
                            capture_output=True, timeout=60, env=python_env())
    assert proc.stdout == module.stdout


@pytest.mark.timeout(120)
def test_produce_passes_arguments_and_exit_codes_through():
    # argparse's own error and exit code for a missing required flag.
    proc = produce("map_sources:pipeline", "--job", "m", env=python_env())
    assert proc.returncode == 2, proc
    assert "--dispatcher" in proc.stderr, proc.stderr


@pytest.mark.timeout(60)
def test_a_missing_interpreter_is_named(tmp_path):
    missing = tmp_path / "no-such-python"
    proc = produce("-h", env=python_env(CROUPIER_PYTHON=str(missing)))
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"cannot run the Python interpreter '{missing}' (from $CROUPIER_PYTHON)" in lines[0]
    assert "CROUPIER_PYTHON" in lines[0]


@pytest.mark.timeout(60)
def test_an_interpreter_without_the_package_is_named(tmp_path):
    # This interpreter without its site-packages (-S) and without PYTHONPATH: no croupier.
    bare = tmp_path / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    env = python_env(CROUPIER_PYTHON=str(bare))
    del env["PYTHONPATH"]
    proc = produce("-h", env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "cannot import the croupier package" in lines[0]
    assert "CROUPIER_PYTHON" in lines[0]


@pytest.mark.timeout(60)
def test_the_interpreter_of_the_active_virtual_environment(tmp_path):
    # Without CROUPIER_PYTHON, $VIRTUAL_ENV/bin/python runs (here a stand-in that says so).
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\necho \"venv python: $*\" | head -c 40\n")
    python.chmod(0o755)
    env = python_env(VIRTUAL_ENV=str(venv))
    del env["CROUPIER_PYTHON"]
    proc = produce("-h", env=env)
    assert proc.returncode == 0, proc
    assert proc.stdout.startswith("venv python: -c import sys"), proc.stdout
