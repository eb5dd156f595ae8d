"""One croupier process as a Ray actor's child, for croupier.ray: ProcessActor starts a croupier
command (`croupier dispatcher`, `croupier producer`, or `python -m croupier produce`), dies with
it, and reports its exit; probe() asks actors what became of their processes.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import Any

import ray

from croupier.cluster import croupier_binary
from croupier.runtime.processes import die_with_parent, stop_child, wait_for_file
from croupier.runtime.thread_signals import block_async_signals

__all__ = ["ProcessActor", "probe", "NODE_IP", "STOP_GRACE", "PROBE_TIMEOUT"]

NODE_IP = "{node_ip}"  # in a ProcessActor's args: the address of the node it runs on
STOP_GRACE = 10.0  # seconds a stopped process has between SIGTERM and SIGKILL
PROBE_TIMEOUT = 2.0  # seconds an actor has to answer whether its process runs


@ray.remote(num_cpus=0)
class ProcessActor:
    """One croupier command, run as this actor's child process. The actor dies with its process:
    a process killed by a signal that stop() did not send (SIGKILL, the OOM killer, a crash) ends
    the actor's own process too (os._exit), so that Ray restarts the actor, and with it the
    command, if its max_restarts allows. A process that exits by itself (status 0: a map job's
    producer whose job ended; another status: an error its log names) leaves the actor alive,
    reporting it (exit_status()): restarting it would not help."""

    def __init__(self, name: str, args: list[str], work_dir: str | os.PathLike[str],
                 env: Mapping[str, str] | None = None, python: bool = False) -> None:
        self.name = name
        self.work_dir = pathlib.Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.work_dir / f"{name}.log"
        self.host = ray.util.get_node_ip_address()
        self._stopping = False  # set by stop() before it signals the process
        # python: `python -m croupier ARGS` (a map job's producer) rather than the croupier
        # command; NODE_IP in ARGS is this node's address.
        command = [sys.executable, "-m", "croupier"] if python else [croupier_binary()]
        args = [self.host if a == NODE_IP else a for a in args]
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen([*command, *args], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=dict(os.environ, **(env or {})),
                                         start_new_session=True, preexec_fn=die_with_parent)
        threading.Thread(target=self._watch, name=f"croupier-{name}-watch", daemon=True).start()

    def _watch(self) -> None:
        """Waits for the process to end; if a signal stop() did not send killed it, this actor's
        process dies too (Ray sees an actor that died, and restarts it if it may)."""
        block_async_signals()
        code = self.proc.wait()
        if self._stopping or code >= 0:
            return
        with contextlib.suppress(OSError), open(self.log_path, "a") as out:
            out.write(f"croupier.ray: the {self.name} process {self.proc.pid} was killed by "
                      f"signal {-code}; its actor (pid {os.getpid()}) dies with it, and Ray "
                      "restarts it if its max_restarts allows\n")
        os._exit(1)

    def wait_for_file(self, path: str, timeout: float) -> str:
        """The contents of `path` once the process has written it."""
        return wait_for_file(path, timeout, self.proc, f"croupier {self.name}", self.log_tail)

    def node_ip(self) -> str:
        return str(self.host)

    def pid(self) -> int:
        """The croupier process's id."""
        return self.proc.pid

    def actor_pid(self) -> int:
        """The id of this actor's own process (the croupier process's parent)."""
        return os.getpid()

    def running(self) -> bool:
        return self.proc.poll() is None

    def exit_status(self) -> int | None:
        """None while the process runs, else its exit status (negative: killed by that
        signal)."""
        return self.proc.poll()

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text()[-chars:]
        except OSError:
            return ""

    def stop(self, grace: float = STOP_GRACE) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; the exit status."""
        self._stopping = True
        return stop_child(self.proc, grace)


def probe(actors: list[Any], timeout: float) -> list[int | str | None]:
    """What each actor says of its process within `timeout` seconds: None (it runs), its
    exit status, "dead" (the actor died for good) or "silent" (no answer: Ray is placing or
    restarting the actor)."""
    states = _probe_once(actors, timeout)
    dead = [i for i, state in enumerate(states) if state == "dead"]
    if dead:
        # A call in flight when its actor died fails even if Ray restarts the actor; one sent
        # now waits for the restart, and fails at once only if the actor is dead for good.
        again = _probe_once([actors[i] for i in dead], timeout)
        for i, state in zip(dead, again):
            states[i] = state
    return states

def _probe_once(actors: list[Any], timeout: float) -> list[int | str | None]:
    if not actors:
        return []
    refs = [a.exit_status.remote() for a in actors]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, timeout))
    answered = set(ready)
    states: list[int | str | None] = []
    for ref in refs:
        if ref not in answered:
            states.append("silent")
            continue
        try:
            states.append(ray.get(ref))
        except ray.exceptions.ActorUnavailableError:  # a restart under way
            states.append("silent")
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError):
            states.append("dead")
    return states
