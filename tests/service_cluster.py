"""Runs real croupier processes on loopback for the multi-process tests.

A Cluster starts a dispatcher and producers as child processes of the `croupier` command, on free
ports, and always stops them: every process is killed and waited for when the cluster closes,
whatever happened. Consumers run as `croupier consume` processes that write one JSON line per
batch (epoch, step, content hash, record ids), which the tests compare.
"""
import json
import os
import pathlib
import signal
import subprocess
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(os.environ.get("CROUPIER_BIN", ROOT / "build" / "bin" / "croupier"))


def run(*args, timeout=60, env=None, check=True, prefix=()):
    """Runs a croupier command to completion and returns the CompletedProcess. `prefix` is put
    before the command (e.g. `ip netns exec NS` to run it in a network namespace)."""
    proc = subprocess.run([*map(str, prefix), str(BIN), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"croupier {' '.join(map(str, args))} failed ({proc.returncode}):\n"
                             f"{proc.stderr}")
    return proc


def wait_for_file(path, timeout, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before writing {path}")
        time.sleep(0.02)
    raise AssertionError(f"{path} did not appear within {timeout} s")


class Cluster:
    """A dispatcher and producers on loopback. Use as a context manager."""

    def __init__(self, work_dir, auth_token=None, producer_timeout_ms=None, env=None,
                 dispatcher_args=(), host="127.0.0.1", dispatcher_prefix=(), client_prefix=()):
        """`host` is the address the dispatcher binds (--bind, when it is not 127.0.0.1) and
        everyone reaches it at. `dispatcher_prefix` goes before the dispatcher's command and
        `client_prefix` before the short commands (job create, status): e.g. `ip netns exec NS`."""
        self.work_dir = pathlib.Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.auth_token = auth_token
        self.env = dict(os.environ, **(env or {}))
        self.env["CROUPIER_INDEX_DIR"] = str(self.work_dir / "index")
        self.procs = []
        self.producers = []
        self.dispatcher_args = list(dispatcher_args)
        self.host = host
        self.dispatcher_prefix = list(dispatcher_prefix)
        self.client_prefix = list(client_prefix)
        if host != "127.0.0.1":
            self.dispatcher_args += ["--bind", host]
        if auth_token:
            self.dispatcher_args += ["--auth-token", auth_token]
        if producer_timeout_ms:
            self.dispatcher_args += ["--producer-timeout-ms", producer_timeout_ms]
        self.dispatcher_starts = 0
        self.port = 0
        self._start_dispatcher()
        self.address = f"{host}:{self.port}"

    @property
    def dispatcher_dir(self):
        """The dispatcher's work directory: its journal and index cache."""
        return self.work_dir / "dispatcher"

    @property
    def journal(self):
        return self.dispatcher_dir / "journal"

    def _start_dispatcher(self):
        """Starts the dispatcher on self.port (0 the first time: any free port) and waits until
        it listens. Its log is dispatcher.log, then dispatcher-1.log, ... for restarts."""
        port_file = self.work_dir / "dispatcher.port"
        port_file.unlink(missing_ok=True)
        name = "dispatcher" if self.dispatcher_starts == 0 else \
            f"dispatcher-{self.dispatcher_starts}"
        self.dispatcher_starts += 1
        args = ["dispatcher", "--port", self.port, "--port-file", port_file,
                "--work-dir", self.dispatcher_dir, *self.dispatcher_args]
        self.dispatcher = self._spawn(args, name, prefix=self.dispatcher_prefix)
        try:
            self.port = int(wait_for_file(port_file, 20, self.dispatcher))
        except BaseException:
            self.close()
            raise

    def kill_dispatcher(self, sig=signal.SIGKILL):
        """Sends `sig` to the dispatcher and waits (10 s at most) until it is gone."""
        kill(self.dispatcher, sig)

    def restart_dispatcher(self):
        """Starts a new dispatcher with the same work directory (so its journal) and the same
        port, after the old one is gone (kill_dispatcher). Returns its process."""
        assert self.dispatcher.poll() is not None, "the dispatcher is still running"
        self._start_dispatcher()
        return self.dispatcher

    def _spawn(self, args, name, prefix=()):
        log = open(self.work_dir / f"{name}.log", "w")
        # `ip netns exec` execs the command, so the Popen's pid is croupier's own.
        proc = subprocess.Popen([*map(str, prefix), str(BIN), *map(str, args)], stdout=log,
                                stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        proc.log_path = self.work_dir / f"{name}.log"
        self.procs.append(proc)
        return proc

    def token_args(self):
        return ["--auth-token", self.auth_token] if self.auth_token else []

    def add_producer(self, *extra, prefix=()):
        n = len(self.producers)
        proc = self._spawn(["producer", "--dispatcher", self.address, "--threads", "2",
                            *self.token_args(), *extra], f"producer{n}", prefix=prefix)
        self.producers.append(proc)
        return proc

    def create_job(self, name, files, features, batch_size, consumers, **options):
        args = ["job", "create", "--dispatcher", self.address, "--name", name,
                "--files", ",".join(map(str, files)), "--features", features,
                "--batch-size", batch_size, "--consumers", consumers, "--json",
                *self.token_args()]
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", value]
        return json.loads(run(*args, env=self.env, prefix=self.client_prefix).stdout)

    def status(self):
        """`croupier status --json`, parsed."""
        return json.loads(run("status", self.address, "--json", *self.token_args(), env=self.env,
                              prefix=self.client_prefix).stdout)

    def start_consumer(self, job, rank, world, output, epochs=1, *extra, prefix=()):
        return self._spawn(["consume", "--dispatcher", self.address, "--job", job,
                            "--rank", rank, "--world", world, "--epochs", epochs,
                            "--output", output, "--timeout-ms", "30000",
                            *self.token_args(), *extra], f"consumer-{job}-{rank}", prefix=prefix)

    def start_ranks(self, job, world, out_dir, epochs=1, *extra):
        """A consumer of each rank of `job`, rank r writing out_dir/rank{r}.jsonl; returns
        (outs, procs), both in rank order."""
        outs = [pathlib.Path(out_dir) / f"rank{r}.jsonl" for r in range(world)]
        procs = [self.start_consumer(job, r, world, outs[r], epochs, *extra) for r in range(world)]
        return outs, procs

    def producer_ids(self):
        """{data address: producer id} of the producers the dispatcher knows."""
        return {p["dataAddress"]: p["producerId"] for p in self.status().get("producers", [])}

    def producer_address(self, timeout=20):
        """The data address of the first producer, once it has registered."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            producers = self.status().get("producers", [])
            if producers:
                return producers[0]["dataAddress"]
            time.sleep(0.1)
        raise AssertionError(f"no producer registered within {timeout} s")

    def wait(self, procs, timeout):
        deadline = time.monotonic() + timeout
        for proc in procs:
            left = max(0.1, deadline - time.monotonic())
            try:
                proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{proc.args[1]} did not finish within {timeout} s; "
                                     f"log:\n{proc.log_path.read_text()[-3000:]}")
            if proc.returncode != 0:
                raise AssertionError(f"{' '.join(proc.args[1:3])} exited {proc.returncode}; "
                                     f"log:\n{proc.log_path.read_text()[-3000:]}")

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def kill(proc, sig=signal.SIGKILL, timeout=10):
    """Sends `sig` to a process started by a Cluster and waits until it has exited."""
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout=timeout)


def read_batches(path):
    """The JSON lines a `croupier consume` wrote."""
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]


def _status_kib(pid, *fields):
    total = 0
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in fields:
            total += int(value.split()[0])
    return total * 1024


def rss_bytes(pid):
    """The memory a process holds: its RSS less the pages of files it maps (RssAnon + RssShmem,
    shared-memory segments included). A producer reads its records out of a mapping of the
    files, so the file pages it has read show in its RSS; they are the page cache, which holds
    them whether read through a mapping or not, and which the kernel reclaims."""
    return _status_kib(pid, "RssAnon", "RssShmem")


def file_rss_bytes(pid):
    """The pages of mapped files (the program, its libraries, a producer's input) in the RSS."""
    return _status_kib(pid, "RssFile")


class OutputWatch:
    """Follows the consumers' --output files while they run: the batches each has written, and
    the longest time a consumer went between two consecutive batches (its longest stall). Files
    are sampled at every poll() (every 20 ms in wait_for and follow), so a stall is measured to
    about that precision, and includes any --slow-ms the consumer sleeps per batch."""

    def __init__(self, outs):
        self.outs = [pathlib.Path(o) for o in outs]
        self.offsets = [0] * len(self.outs)
        self.counts = [0] * len(self.outs)
        self.last = [None] * len(self.outs)
        self.longest = 0.0
        self.longest_at = None  # (consumer index, batches it had written before the stall)
        self.longest_span = None  # (start, end) of that stall, in time.monotonic() seconds

    def poll(self):
        now = time.monotonic()
        for i, out in enumerate(self.outs):
            try:
                with open(out, "rb") as f:
                    f.seek(self.offsets[i])
                    data = f.read()
            except FileNotFoundError:
                continue
            n = data.count(b"\n")
            if not n:
                continue
            self.offsets[i] += data.rfind(b"\n") + 1
            if self.last[i] is not None and now - self.last[i] > self.longest:
                self.longest, self.longest_at = now - self.last[i], (i, self.counts[i])
                self.longest_span = (self.last[i], now)
            self.counts[i] += n
            self.last[i] = now
        return self.counts

    def wait_for(self, batches, procs, timeout):
        """Waits until every consumer has written at least `batches` batches; fails if one exits
        with an error first, or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while min(self.poll()) < batches:
            for p in procs:
                assert p.poll() is None or p.returncode == 0, \
                    f"{' '.join(p.args[1:3])} exited {p.returncode}; log:\n" \
                    f"{p.log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, \
                f"consumers did not reach {batches} batches in {timeout} s: {self.counts}"
            time.sleep(0.02)

    def follow(self, cluster, procs, timeout):
        """Polls until every consumer process has exited, then checks them like Cluster.wait.
        Returns the longest stall seen."""
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.02)
        self.poll()
        cluster.wait(procs, timeout=max(0.1, deadline - time.monotonic()))
        return self.longest


def batch_hashes(batches):
    """[(epoch, step, hash)] of a consumer's JSON lines: what a fault-free run is compared on."""
    return [(b["epoch"], b["step"], b["hash"]) for b in batches]


def synth_dataset(out_dir, records, files=3, image_bytes=256):
    """`croupier synth` into out_dir; each record's `id` feature is its global record id."""
    run("synth", "--out", out_dir, "--files", files, "--records", records, "--image-bytes",
        image_bytes, "--quiet")
    return sorted(pathlib.Path(out_dir).glob("*.tfrecord"))


def synth_glob(out_dir, records, files=3, image_bytes=256):
    """synth_dataset, as the glob of its files (what the Python API's create_job takes)."""
    synth_dataset(out_dir, records, files, image_bytes)
    return str(pathlib.Path(out_dir) / "*.tfrecord")


def fault_free_run(work_dir, files, features, batch_size, world, seed, epochs=1, env=None):
    """A run with one producer and no fault: each rank's [(epoch, step, hash)], what the fault
    tests compare against. `env`: extra environment of the cluster's processes."""
    work_dir = pathlib.Path(work_dir)
    with Cluster(work_dir / "cluster", env=env) as cluster:
        cluster.add_producer()
        cluster.create_job("train", files, features, batch_size, world, seed=seed, epochs=epochs)
        outs, procs = cluster.start_ranks("train", world, work_dir, epochs)
        cluster.wait(procs, timeout=90)
    return [batch_hashes(read_batches(o)) for o in outs]


def check_exactly_once(outs, reference, records, batch_size, seed, epochs=(0,),
                       shuffle="global"):
    """Checks the consumers' outputs (one per rank) against `reference`, the per-rank
    [(epoch, step, hash)] of a fault-free run of the same job: every rank got every planned step
    of every epoch once, in order, with bit-identical content (G1, G2, G3); and the record ids,
    across ranks, are exactly the plan's, none twice. Returns the number of batches checked."""
    per_rank = [read_batches(o) for o in outs]
    for rank, batches in enumerate(per_rank):
        got = batch_hashes(batches)
        assert len(got) == len(set(got)), f"rank {rank}: a batch delivered twice"
        assert got == reference[rank], \
            f"rank {rank}: {len(got)} batches differ from the fault-free run's " \
            f"{len(reference[rank])}; first difference at " \
            f"{next((i for i, (a, b) in enumerate(zip(got, reference[rank])) if a != b), None)}"
    check_plan_ids(per_rank, records, batch_size, seed, epochs, shuffle)
    return sum(len(b) for b in per_rank)


def check_plan_ids(per_rank, records, batch_size, seed, epochs=(0,), shuffle="global"):
    """Checks each rank's consumer output lines (read_batches) against the epoch plan: every
    rank took every step of each epoch in `epochs`, in order (G2), each batch holds the plan's
    record ids, and across ranks every planned record came once (G1)."""
    import croupier  # the Python package; only the checks need it
    world = len(per_rank)
    for epoch in epochs:
        plan = croupier.EpochPlan(records, batch_size, world, seed=seed, epoch=epoch,
                                  shuffle=shuffle)
        ids = []
        for rank, batches in enumerate(per_rank):
            mine = [b for b in batches if b["epoch"] == epoch]
            assert [b["step"] for b in mine] == list(range(plan.steps_per_consumer)), \
                f"rank {rank} epoch {epoch}"
            for b in mine:
                assert b["ids"] == plan.batch(plan.global_batch(rank, b["step"])).tolist()
                ids += b["ids"]
        assert len(ids) == len(set(ids)) == plan.steps_per_consumer * world * batch_size, \
            f"epoch {epoch}: records repeated or missing"


def processes_naming(text):
    """Pids of live processes (not this one) whose command line contains `text`."""
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(proc.name))
    return found


class RankReaders:
    """read(rank) on a thread of its own for each of `world` ranks, started at once. An exception
    in one is kept in `errors` ("rank R: Type: message"), not lost with its thread."""

    def __init__(self, read, world):
        self.errors = []

        def guarded(rank):
            try:
                read(rank)
            except Exception as e:  # noqa: BLE001 (reported through errors)
                self.errors.append(f"rank {rank}: {type(e).__name__}: {e}")

        self._threads = [threading.Thread(target=guarded, args=(r,)) for r in range(world)]
        for t in self._threads:
            t.start()

    def join(self, timeout):
        """Waits for every reader (at most `timeout` each); the errors."""
        for t in self._threads:
            t.join(timeout)
        return self.errors
