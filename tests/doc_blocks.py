"""Runs the shell blocks of docs/deploy.md as written, as a user copies them into a shell.

    block = doc_block("One machine")                   # the first ```sh block under that heading
    done = run_block(block, tmp_path, env)             # bash -euo pipefail, bounded, cleaned up

`doc_block` finds a heading of the page (any level, its exact text) and returns its first fenced
shell block, or the part of it from the line that starts with `from_line`. `checkout_folder` makes
a folder that looks like this checkout after `make build` (.venv, build, deploy, examples, python,
scripts as symlinks), so that a block's relative paths resolve and what it writes stays in the
folder. `run_block` runs the text with `bash -euo pipefail -c` in that folder, in a process group
of its own with TMPDIR inside the folder, kills the group if it outlives `timeout`, and fails if a
process naming the folder outlives the block.
"""
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

from service_cluster import ROOT, processes_naming

DOC = ROOT / "docs" / "deploy.md"
CHECKOUT = (".venv", "build", "deploy", "examples", "python", "scripts")


def doc_block(heading, from_line=None, doc=DOC):
    """The first ```sh (or ```bash, or unlabelled) block under `heading` in `doc`, before the next
    heading; from the line that starts with `from_line` if given."""
    blocks, inside, fenced, current, lang = None, False, False, [], ""
    for line in pathlib.Path(doc).read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            if fenced:
                current, lang = [], line[3:].strip()
            elif inside and lang in ("", "sh", "bash"):
                blocks.append("\n".join(current) + "\n")
        elif fenced:
            current.append(line)
        elif re.match(r"#+ ", line):  # a heading (a `#` inside a block is a comment)
            inside = line.split(" ", 1)[1].strip() == heading
            if inside:
                blocks = []
    assert blocks is not None, f"no heading {heading!r} in {doc}"
    assert blocks, f"no shell block under {heading!r}"
    block = blocks[0]
    if from_line is not None:
        start = block.find("\n" + from_line)
        assert start >= 0 or block.startswith(from_line), \
            f"no line {from_line!r} in the block under {heading!r}"
        block = block[start + 1:] if start >= 0 else block
    return block


def checkout_folder(path):
    """Makes `path` look like this checkout's root after `make build`: its .venv (or, where the
    checkout has none, the venv this Python runs in), build, deploy, examples, python and scripts,
    as symlinks. Returns `path`."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for name in CHECKOUT:
        target = ROOT / name
        if name == ".venv" and not target.exists():  # a worktree: the venv this test runs in
            target = pathlib.Path(sys.prefix)
        (path / name).symlink_to(target)
    return path


def user_env(**extra):
    """This environment without any CROUPIER_* variable, launcher rank variable, or directory that
    holds a `croupier` command on PATH (a user who ran `make build` has none there); then
    `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CROUPIER", "OMPI_COMM_WORLD", "SLURM_", "HOROVOD_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TF_CONFIG", "PYTEST_CURRENT_TEST")}
    env["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                  if p and not (pathlib.Path(p) / "croupier").exists())
    env.update(extra)
    return env


def run_in_group(argv, cwd, env, timeout, check_left=True, merge_stderr=False):
    """Runs `argv` in `cwd` in its own process group and returns the CompletedProcess (text;
    stderr in stdout if merge_stderr). Kills the group if it outlives `timeout`, then fails;
    fails too if a process naming `cwd` is still alive 5 s after it ended (they are killed
    first), unless check_left is False."""
    cwd = pathlib.Path(cwd)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{argv} did not finish within {timeout} s:\n"
                             f"{out[-3000:]}{(err or '')[-3000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5
        while check_left and processes_naming(str(cwd)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = processes_naming(str(cwd)) if check_left else []
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert not left, f"{argv} left processes behind: {left}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_block(block, folder, env, timeout=60, check_left=True):
    """Runs `block` with `bash -euo pipefail -c` in `folder` (run_in_group) and returns the
    CompletedProcess (stdout and stderr as text). check_left False is for a block that submits
    work which outlives it, such as sbatch's: the caller waits for that work and checks what is
    left. TMPDIR is a folder inside `folder`, so that temporary work dirs are named by the
    processes that use them."""
    folder = pathlib.Path(folder)
    tmp = folder / "tmp"
    tmp.mkdir(exist_ok=True)
    return run_in_group(["bash", "-euo", "pipefail", "-c", block], folder,
                        dict(env, TMPDIR=str(tmp)), timeout, check_left)
