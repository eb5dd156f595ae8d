"""A real Slurm on this host for tests/test_slurm.py: munged, slurmctld and two slurmd.

SlurmCluster starts, as root, in a folder of its own:
- munged with a key it makes and its own socket (nothing in /etc/munge or /run/munge is used);
- slurmctld, with a slurm.conf in that folder: SlurmctldPort and each node's slurmd Port on free
  ports, two nodes node0 and node1 on this host (NodeAddr=127.0.0.1), proctrack/linuxproc,
  task/none, no cgroups, select/cons_tres, no accounting;
- one slurmd per node (`slurmd -N node0`, `-N node1`), each with its own spool folder.
Clients find it through SLURM_CONF, which `env` holds. Every wait is bounded; stop() (or leaving
the `with` block, whatever happened) cancels the jobs and stops every daemon it started, SIGKILL
after a bounded wait, and waits for them.
"""
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

DAEMONS = ("munged", "slurmctld", "slurmd")
NODES = ("node0", "node1")


def missing_reason():
    """Why a real Slurm cannot run here, or None."""
    if os.geteuid() != 0:
        return "a real Slurm needs root (munged, slurmctld and slurmd run as root here)"
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel",
                           "scontrol", "sinfo") if shutil.which(b) is None
               and not os.path.exists(f"/usr/sbin/{b}")]
    if missing:
        return (f"Slurm or munge is not installed (missing {', '.join(missing)}; "
                "scripts/debian-packages.txt names slurmctld, slurmd and munge)")
    return None


def _which(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_ports(n):
    """n distinct free TCP ports on this host (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SlurmCluster:
    """munged, slurmctld and a slurmd per node. Use as a context manager."""

    def __init__(self, base, cpus=None, kill_wait=5):
        self.base = pathlib.Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o700)  # munged refuses folders others can write
        self.cpus = cpus or os.cpu_count() or 1
        self.kill_wait = kill_wait
        self.procs = {}
        self.conf = self.base / "slurm.conf"
        self.munge_socket = self.base / "munge" / "munge.socket"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        for name in list(self.env):
            if name.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and name != "SLURM_CONF":
                del self.env[name]

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    # --- start ------------------------------------------------------------------------------------

    def start(self, timeout=60):
        self._start_munge()
        ctld_port, *node_ports = _free_ports(1 + len(NODES))
        self._write_conf(ctld_port, node_ports)
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        for node in NODES:
            (self.base / f"spool-{node}").mkdir(exist_ok=True)
            self._spawn(f"slurmd-{node}", [_which("slurmd"), "-D", "-N", node, "-f",
                                           str(self.conf)])
        deadline = time.monotonic() + timeout
        states = ""
        while time.monotonic() < deadline:
            self._check_alive()
            proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env,
                                  capture_output=True, text=True, timeout=30)
            states = proc.stdout.strip()
            idle = {line.split()[0] for line in states.splitlines() if line.split()[1:] == ["idle"]}
            if idle >= set(NODES):
                return
            time.sleep(0.5)
        raise AssertionError(f"the Slurm nodes were not idle within {timeout} s: {states!r}\n"
                             f"{self.logs()}")

    def _start_munge(self):
        munge_dir = self.munge_socket.parent
        munge_dir.mkdir(mode=0o700, exist_ok=True)
        key = munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._spawn("munged", [_which("munged"), "-F", "--force", f"--key-file={key}",
                               f"--socket={self.munge_socket}",
                               f"--pid-file={munge_dir / 'munged.pid'}",
                               f"--log-file={self.base / 'munged.log'}",
                               f"--seed-file={munge_dir / 'munged.seed'}"])
        deadline = time.monotonic() + 20
        while not self.munge_socket.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"munged made no socket within 20 s\n{self.logs()}")
            time.sleep(0.05)

    def _write_conf(self, ctld_port, node_ports):
        b = self.base
        nodes = "\n".join(f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} "
                          f"Port={p} CPUs={self.cpus} State=UNKNOWN"
                          for n, p in zip(NODES, node_ports))
        self.conf.write_text(f"""\
ClusterName=croupiertest
SlurmctldHost={socket.gethostname()}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={node_ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool-%n
SlurmctldPidFile={b}/slurmctld.pid
SlurmdPidFile={b}/slurmd-%n.pid
SlurmctldLogFile={b}/slurmctld.log
SlurmdLogFile={b}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
KillWait={self.kill_wait}
MinJobAge=300
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
{nodes}
PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP
""")
        (b / "state").mkdir(exist_ok=True)

    def _spawn(self, name, argv):
        log = open(self.base / f"{name}.out", "wb")
        try:
            self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                env=self.env, start_new_session=True)
        finally:
            log.close()

    def _check_alive(self):
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}\n{self.logs()}")

    # --- use --------------------------------------------------------------------------------------

    def run(self, argv, timeout=30, check=True, **kwargs):
        proc = subprocess.run(argv, env=kwargs.pop("env", self.env), capture_output=True,
                              text=True, timeout=timeout, **kwargs)
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} exited {proc.returncode}: {proc.stderr}")
        return proc

    def job_state(self, job_id):
        """The job's state as scontrol reports it (e.g. PENDING, RUNNING, COMPLETED), or ''."""
        out = self.run(["scontrol", "show", "job", str(job_id)], check=False).stdout
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return ""

    def jobs(self):
        """The ids of the jobs squeue still lists."""
        out = self.run(["squeue", "-h", "-o", "%i"], check=False).stdout
        return out.split()

    def logs(self, tail=3000):
        parts = []
        for path in sorted(self.base.glob("*.log")) + sorted(self.base.glob("*.out")):
            text = path.read_text(errors="replace")
            if text.strip():
                parts.append(f"--- {path.name}\n{text[-tail:]}")
        return "\n".join(parts)

    # --- stop -------------------------------------------------------------------------------------

    def stop(self, timeout=20):
        """Cancels every job, then stops the daemons (SIGTERM, SIGKILL after `timeout` s)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            try:
                subprocess.run(["scancel", "--full", "--user=root"], env=self.env,
                               capture_output=True, timeout=15)
                deadline = time.monotonic() + self.kill_wait + 10
                while self.jobs_running() and time.monotonic() < deadline:
                    time.sleep(0.3)
            except (subprocess.SubprocessError, OSError):
                pass
        order = [n for n in self.procs if n.startswith("slurmd")] + \
            [n for n in ("slurmctld", "munged") if n in self.procs]
        for name in order:
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # anything left in its session
            except (ProcessLookupError, PermissionError):
                pass
        self.procs.clear()

    def jobs_running(self):
        try:
            out = subprocess.run(["squeue", "-h", "-o", "%i %T"], env=self.env,
                                 capture_output=True, text=True, timeout=10).stdout
        except (subprocess.SubprocessError, OSError):
            return []
        return [line for line in out.splitlines() if line.strip()]


def daemon_pids():
    """Pids of live processes named munged, slurmctld, slurmd or slurmstepd (zombies aside)."""
    found = set()
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        state = stat[stat.rindex(")") + 2:].split()[0]
        if name in (*DAEMONS, "slurmstepd") and state != "Z":
            found.add(int(proc.name))
    return found
