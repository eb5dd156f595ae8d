"""The CPU budget of bench/bench_map.py's systems: the cores every process of a run may use, and
the CPU time all of a run's processes spent from its start signal to their end.

The program that runs the systems pins itself (os.sched_setaffinity) to the budget's cores, so
every process it starts, and theirs, inherits them (each role pins itself again, in case), and
makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a process whose parent exits
before it (a Ray worker, once its raylet is gone) is handed to it rather than to init, and its
CPU time is counted when it is reaped here.

A run's CPU time from its start signal to the end of its work, CpuMeter: at each of the two
moments, the CPU time of every process reaped here (RUSAGE_CHILDREN counts a reaped child and
every descendant it reaped in turn) plus that of every descendant alive (/proc/PID/stat: its own
time and its reaped children's); the difference. Imports and set-up before the signal are left
out, as they are from the records/s, and so is the processes' exit after the work (the trainers
wait for the end to be read before they exit).

Linux only (sched_setaffinity, prctl, /proc). Not thread-safe: the one thread of the program
that runs the systems uses it.
"""
import ctypes
import os
import resource
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
TICK = os.sysconf("SC_CLK_TCK")


def parse_cpus(text):
    """'0,1' or '0-3' or '0-1,4' as a sorted list of core numbers; '' or None: this process's
    cores (its affinity)."""
    if not text:
        return sorted(os.sched_getaffinity(0))
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def pin(cpus):
    """This process (and what it starts from now on) on `cpus` only."""
    os.sched_setaffinity(0, cpus)


def become_subreaper():
    """Orphaned descendants are reparented to this process (and reaped by reap_descendants)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _stat(pid):
    """(ppid, CPU seconds of the process and of its reaped children) from /proc/PID/stat, or
    None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return ppid, (utime + stime + cutime + cstime) / TICK


def descendants(root=None):
    """{pid: CPU seconds (its own and its reaped children's)} of every live (or zombie)
    descendant of `root` (default: this process)."""
    root = root or os.getpid()
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                stats[int(name)] = st
    children = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found[pid] = stats[pid][1]
        todo.extend(children.get(pid, ()))
    return found


def reaped_cpu():
    """CPU seconds of this process's reaped descendants (RUSAGE_CHILDREN: user + system)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine_busy():
    """CPU seconds the whole machine has been busy since boot (/proc/stat: user, nice, system,
    irq and softirq time of every core)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    return (user + nice + system + irq + softirq) / TICK


def reap_descendants(timeout=60.0):
    """Waits until this process has no descendant left, reaping the orphans handed to it; kills
    (by pid) and reaps what is still alive after `timeout` seconds, saying so on stderr. Call it
    once every child started with subprocess has been waited for."""
    deadline = time.monotonic() + timeout
    killed = False
    while True:
        while True:  # every child that has ended
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
        left = descendants()
        if not left:
            return
        if time.monotonic() > deadline and not killed:
            print(f"cpu_budget: {len(left)} process(es) still alive {timeout:.0f} s after the "
                  f"run ({sorted(left)}); killing them", file=sys.stderr, flush=True)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed = True
        time.sleep(0.05)


class CpuMeter:
    """The CPU seconds of every process of one run from its start signal (start()) to the end of
    its work (end()): see the module's docstring."""

    def __init__(self):
        self._before = self._busy = None
        self.other = None  # after end(): the CPU seconds of every other process of the machine

    @staticmethod
    def _now():
        return reaped_cpu() + sum(descendants().values())

    def start(self):
        """Call right before the start signal, with every process of the run set up and
        waiting for it."""
        self._busy = machine_busy()
        self._before = self._now()

    def end(self):
        """Call once the run's work is done (its trainers' loops ended), before its processes
        exit (an interpreter's exit is not the run's work): the CPU seconds since start(). Sets
        `other`: what the rest of the machine used meanwhile (this program's own CPU included,
        which is small), to tell a quiet machine from a busy one."""
        cpu = self._now() - self._before
        self.other = max(0.0, machine_busy() - self._busy - cpu)
        return cpu
