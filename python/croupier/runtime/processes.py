"""The process machinery shared by the package: children that die with their parent, forks that
run a function and exit, reaping with a grace period, and the `croupier` commands started as
children: waiting until one is ready, and stopping it.

Used by croupier.cluster and croupier.ray (the `croupier` commands they start) and by the
producer's worker supervisor (croupier.map.zygote, croupier.map.pool).
"""
import contextlib
import ctypes
import gc
import os
import pathlib
import signal
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Iterable, Optional

from croupier import errors

_PR_SET_PDEATHSIG = 1


def _find_prctl() -> Optional[Callable[..., int]]:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up here, in the parent: a child forked from a process with threads must not call the
# dynamic loader (dlopen, dlsym), whose lock such a thread may have held at the fork.
_prctl = _find_prctl()


def die_with_parent() -> None:
    """Runs in a child (before exec, or after a fork): the kernel kills it when its parent dies."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _forget_parents_gc_callbacks() -> None:
    """In a forked child: drops the garbage collector's callbacks, which the parent's libraries
    installed for their own runtimes (JAX's calls into XLA at every collection). In a fork of a
    process with threads, such a call may wait for a lock that a thread of the parent held at
    the fork and that nobody will release here: the child would hang at its next collection."""
    gc.callbacks.clear()


def fork(main: Callable[..., Any], *args: Any, close: Iterable[Any] = ()) -> int:
    """Forks a child that closes the objects in `close`, runs main(*args) and exits (status 0, or
    1 if main raised), and returns its pid. The kernel kills the child when its parent dies; it
    ignores SIGINT (its parent decides when it stops) and dies of SIGTERM.

    The child's garbage collector never collects an object this process had at the fork
    (gc.freeze): such an object's finalizer is the parent's business, and may wait for a thread
    that the child does not have (a gRPC channel's destructor waits for gRPC's timer thread, and
    a client of an earlier call left as garbage hung a worker so). This process unfreezes them
    again at once, unless some objects were frozen before: a zygote's, frozen when it was forked
    itself, so that its workers do not collect them either (or a caller's own gc.freeze(), which
    an unfreeze would undo: then what this process had at the fork stays frozen here too)."""
    parent = os.getpid()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # else the child would write the parent's buffered output again
        except Exception:  # noqa: BLE001 (a closed or odd stream is no reason not to fork)
            pass
    inherited = gc.get_freeze_count()  # a fork's child: its parent's objects are frozen already
    gc.freeze()  # the child collects none of this process's objects (see the docstring)
    try:
        pid = os.fork()
    except BaseException:
        if not inherited:
            gc.unfreeze()
        raise
    if pid:
        if not inherited:
            gc.unfreeze()
        return pid
    code = 1
    try:
        _forget_parents_gc_callbacks()
        die_with_parent()
        if os.getppid() == parent:  # else the parent died before the kernel was told
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            for obj in close:
                obj.close()
            main(*args)
            code = 0
    except BaseException:  # noqa: BLE001 (the child must reach os._exit whatever happens)
        traceback.print_exc()
    finally:
        os._exit(code)


def reap(pid: int, grace: float) -> Optional[int]:
    """Waits for child `pid` to exit, SIGKILLing it after `grace` seconds, and returns its wait
    status (None if it is not a child of this process, or was reaped already)."""
    deadline = time.monotonic() + grace
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                return os.waitpid(pid, 0)[1]
            time.sleep(0.005)
    except ChildProcessError:
        return None


def how_it_ended(status: Optional[int]) -> str:
    """How a process of wait status `status` ended, in words."""
    if status is None:
        return "how is unknown"
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return f"exit status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "unnamed"
    return f"killed by signal {-code}, {name}"


def describe(e: BaseException) -> str:
    """An exception in one line: its type and its message."""
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def stop_child(proc: "subprocess.Popen[Any]", grace: float) -> int:
    """SIGTERM to `proc` (a croupier command: a producer then drains and leaves),
    then SIGKILL to its process group after `grace` seconds; waits for it. Its exit status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=max(0.05, grace))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.returncode


def wait_for_file(path: "os.PathLike[str] | str", timeout: float, proc: "subprocess.Popen[Any]",
                  what: str, log_tail: Callable[[], str]) -> str:
    """The contents of `path` once `proc` (the croupier `what`) has written it; an error with
    log_tail() if the process exits first, or at the timeout."""
    path = pathlib.Path(path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if proc.poll() is not None:
            raise errors.UnavailableError(
                f"the {what} exited with {proc.returncode} before it was ready: {log_tail()}")
        time.sleep(0.02)
    raise errors.DeadlineExceededError(f"the {what} was not ready within {timeout} s: {log_tail()}")
