"""croupier.ray under Ray's own autoscaler, on a fake multi-node cluster of this machine: producer
actors that do not fit make the autoscaler add worker nodes, and once they are stopped the idle
nodes go; the trainers' batches are the epoch plan's throughout.

Ray's `ray.cluster_utils.AutoscalingCluster` is not used as such, for two reasons seen with the
installed ray 2.60.0: its constructor reads `autoscaler/_private/fake_multi_node/example.yaml`,
which the wheel does not ship (FileNotFoundError), and its start() and shutdown() run
`ray stop --force`, which ends every Ray process of this user on the machine, other tests' too.
This test starts the same thing itself: `ray start --head --autoscaling-config` with
RAY_FAKE_CLUSTER=1 and the fake multi-node provider (the real autoscaler, which adds a node by
starting a raylet on this machine), in a temp dir of its own on a port of its own, and at the end
ends exactly the processes whose command line, or an open file, names that temp dir.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import pytest

ray = pytest.importorskip("ray")

import croupier  # noqa: E402
import croupier.ray  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from service_cluster import RankReaders, synth_dataset  # noqa: E402

FEATURES = "id:int64,label:int64,image:bytes"
RECORDS, BATCH, WORLD, SEED, EPOCHS = 480, 8, 2, 5, 2
NODE_TYPE = "croupier.producer.node"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def autoscaling_config(port: int) -> dict:
    """A fake multi-node cluster: a head with 1 CPU, and up to 2 worker nodes of 1 CPU each that
    the autoscaler adds when actors wait for a CPU and removes after 6 s idle."""
    return {
        "cluster_name": "croupier-test",
        "max_workers": 2,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 0.1,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True,
                     "disable_node_updaters": True, "disable_launch_config_check": True,
                     "gcs_address": f"127.0.0.1:{port}"},
        "auth": {"ssh_user": "ubuntu"},
        "docker": {},
        "head_node_type": "ray.head.default",
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 1}, "node_config": {}, "max_workers": 0},
            NODE_TYPE: {"resources": {"CPU": 1}, "node_config": {}, "min_workers": 0,
                        "max_workers": 2},
        },
        "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [],
        "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [],
        "head_start_ray_commands": [], "worker_start_ray_commands": [],
    }


def processes_naming(text: str) -> list[int]:
    """The pids of this user's processes whose command line contains `text`, or that hold a file
    open whose path does (Ray's agents rename themselves, ray::DashboardAgent, but keep their logs
    in the session dir open)."""
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            named = text in cmdline
            if not named:
                for fd in (entry / "fd").iterdir():
                    with contextlib.suppress(OSError):
                        if text in os.readlink(fd):
                            named = True
                            break
        except OSError:
            continue
        if named:
            pids.append(int(entry.name))
    return pids


def end_processes(text: str, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace`, to the processes whose command line names `text`."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        pids = processes_naming(text)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while processes_naming(text) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not processes_naming(text):
            return


@contextlib.contextmanager
def ray_head(cpus: int, autoscaling: Callable[[int], dict] | None = None
             ) -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray head on this machine (`ray start --head`, loopback, a port and a temp dir of its
    own), with the fake multi-node autoscaler if `autoscaling` is given (its config, from the
    head's port). Yields its address and the environment its processes got; at the end, every
    process naming its temp dir is ended (SIGTERM, then SIGKILL)."""
    # Every Ray process of this cluster names this folder (--session-dir ...); a short path, as
    # Ray's socket paths under it must fit in 107 bytes.
    temp = pathlib.Path(tempfile.mkdtemp(prefix="crr-", dir="/tmp"))
    port = free_port()
    here = pathlib.Path(__file__).resolve().parent
    env = dict(os.environ, RAY_AUTH_MODE="disabled",
               PYTHONPATH=os.pathsep.join([str(here), str(here.parent / "python"),
                                           os.environ.get("PYTHONPATH", "")]))
    args = [str(pathlib.Path(sys.executable).parent / "ray"), "start", "--head",
            f"--port={port}", "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}",
            "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"]
    if autoscaling is not None:
        (temp / "autoscaling.json").write_text(json.dumps(autoscaling(port)))
        args.append(f"--autoscaling-config={temp / 'autoscaling.json'}")
        env.update(RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1")
    try:
        started = subprocess.run(args, env=env, timeout=120, capture_output=True, text=True)
        assert started.returncode == 0, \
            f"ray start: {started.stdout[-2000:]}{started.stderr[-2000:]}"
        yield f"127.0.0.1:{port}", env
    finally:
        end_processes(str(temp))
        left = processes_naming(str(temp))
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"Ray processes of the test outlived it: {left}"


@pytest.fixture
def autoscaling_cluster(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """The fake multi-node cluster, the driver connected; no process of it left at the end."""
    with ray_head(1, autoscaling_config) as (address, env):
        yield from _connected(address, env, tmp_path)


def _connected(address: str, env: dict[str, str],
               tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(address=address, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": env["PYTHONPATH"]}})
    try:
        yield tmp_path
    finally:
        ray.shutdown()


def planned(epoch: int) -> list[list[list[int]]]:
    plan = croupier.EpochPlan(RECORDS, BATCH, WORLD, seed=SEED, epoch=epoch, shuffle="global")
    return [[plan.batch(s * WORLD + r).tolist() for s in range(plan.steps_per_consumer)]
            for r in range(WORLD)]


def alive_nodes() -> int:
    return sum(1 for n in ray.nodes() if n["Alive"])


def wait_for(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.5)


def read_epoch(address: str, epoch: int, pause: float) -> list[list[list[int]]]:
    """WORLD trainers on threads read `epoch`; each rank's batches' record ids."""
    got: list[list[list[int]]] = [[] for _ in range(WORLD)]

    def read(rank: int) -> None:
        feed = croupier.Consumer(address, "train", rank, WORLD, timeout=60)
        for batch in feed.epoch(epoch):
            got[rank].append(batch["id"].tolist())
            time.sleep(pause)
        feed.close()

    errors = RankReaders(read, WORLD).join(120)
    assert not errors, errors
    return got


@pytest.mark.timeout(420)
def test_ray_adds_nodes_for_producers_and_lets_them_go(autoscaling_cluster: pathlib.Path) -> None:
    tmp = autoscaling_cluster
    files = synth_dataset(tmp / "data", RECORDS, files=2, image_bytes=32)
    assert alive_nodes() == 1
    with croupier.ray.Service(producers=1, work_dir=tmp / "service", bind="127.0.0.1",
                              ready_timeout=180) as service:
        service.create_job("train", [str(f) for f in files], FEATURES, BATCH, consumers=WORLD,
                           seed=SEED, epochs=EPOCHS)
        # Three producers of 1 CPU each on a head of 1 CPU: two wait until the autoscaler has
        # added a node for each, then register.
        began = time.monotonic()
        service.scale(3, timeout=180)
        added_in = time.monotonic() - began
        assert alive_nodes() == 3
        assert len(service.status()["producers"]) == 3
        epoch0 = read_epoch(service.address, 0, pause=0.01)
        # Back to one producer: the two added nodes are idle, and the autoscaler removes them
        # while the trainers read the next epoch.
        service.scale(1)
        epoch1 = read_epoch(service.address, 1, pause=0.05)
        wait_for("the idle nodes removed", lambda: alive_nodes() == 1, 120)
        assert len(service.status()["producers"]) == 1
    print(f"\nnodes added and producers registered in {added_in:.1f} s")
    assert [epoch0[r] for r in range(WORLD)] == planned(0)
    assert [epoch1[r] for r in range(WORLD)] == planned(1)


@pytest.mark.timeout(420)
def test_service_autoscale_makes_ray_add_and_remove_nodes(autoscaling_cluster: pathlib.Path
                                                          ) -> None:
    """service.autoscale() follows the dispatcher's advice on a producer-bound job (each producer
    one thread and 40 ms more per batch, the trainers a 30 ms step: 3 producers' worth); the
    producer actors that do not fit on the head make Ray's autoscaler add nodes. The trainers then
    slow down (150 ms a step): the advice falls to 1 and the added nodes go. Every epoch the
    trainers completed is the plan's."""
    tmp = autoscaling_cluster
    records, batch = 2048, 16
    files = synth_dataset(tmp / "data", records, files=2, image_bytes=32)
    step = {"seconds": 0.03}
    stop = threading.Event()
    got: list[list[list[list[int]]]] = [[] for _ in range(WORLD)]  # rank, epoch, step, ids
    errors: list[str] = []
    with croupier.ray.Service(producers=1, work_dir=tmp / "service", bind="127.0.0.1",
                              ready_timeout=180,
                              producer_args=["--threads", "1", "--test-make-delay-ms", "40"],
                              dispatcher_args=["--advice-smoothing-ms", "5000",
                                               "--advice-hold-ms", "6000"]) as service:
        service.create_job("load", [str(f) for f in files], FEATURES, batch, consumers=WORLD,
                           seed=SEED, epochs=0)

        def read(rank: int) -> None:
            feed = croupier.Consumer(service.address, "load", rank, WORLD, timeout=120)
            epoch = 0
            while not stop.is_set():
                ids = []
                for b in feed.epoch(epoch):
                    ids.append(b["id"].tolist())
                    time.sleep(step["seconds"])
                    if stop.is_set():
                        break
                else:
                    got[rank].append(ids)
                epoch += 1
            feed.close()

        readers = RankReaders(read, WORLD)
        autoscaler = service.autoscale(min_producers=1, max_producers=3, interval=1.0)
        try:
            began = time.monotonic()
            wait_for("more producers, on added nodes",
                     lambda: service.producers >= 2 and alive_nodes() >= 2, 150)
            rose_in = time.monotonic() - began
            step["seconds"] = 0.15
            began = time.monotonic()
            wait_for("back to 1 producer and the head alone",
                     lambda: service.producers == 1 and alive_nodes() == 1, 180)
            fell_in = time.monotonic() - began
            changes = list(autoscaler.changes)
        finally:
            stop.set()
            errors = readers.join(60)
            service.stop_autoscaling()
    assert not errors, errors
    print(f"\nautoscaler changes {changes}; more producers and nodes in {rose_in:.1f} s, "
          f"back to one in {fell_in:.1f} s after the slowdown")
    assert max(after for _, after in changes) >= 2 and changes[-1][1] == 1, changes
    assert all(len(got[r]) >= 1 for r in range(WORLD)), [len(g) for g in got]
    for r in range(WORLD):
        for e, ids in enumerate(got[r]):
            plan = croupier.EpochPlan(records, batch, WORLD, seed=SEED, epoch=e, shuffle="global")
            assert ids == [plan.batch(s * WORLD + r).tolist()
                           for s in range(plan.steps_per_consumer)], f"rank {r} epoch {e}"


def ray_block_of_the_doc() -> str:
    """The Python block of docs/deploy.md's "Ray" section, as written."""
    doc = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "deploy.md").read_text()
    section = doc[doc.index("\n## Ray\n"):]
    section = section[:section.index("\n## ", 1)]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("\n```", start)]


@pytest.mark.timeout(420)
def test_the_ray_block_of_the_doc_runs_as_written(tmp_path: pathlib.Path) -> None:
    """The block runs, unchanged but for one substitution: its data path, "/data/train/*.tfrecord",
    becomes this test's synthetic files. Its `ray.init()` joins a Ray head this test started (the
    RAY_ADDRESS variable), of 8 logical CPUs: the block's 2 producers and 4 Ray Train workers ask
    for 6, more than Ray would find on this 2-core machine. HOME is a temp dir, where Ray Train
    keeps its results by default."""
    block = ray_block_of_the_doc()
    assert block.count('"/data/train/*.tfrecord"') == 1, block
    files = synth_dataset(tmp_path / "data", 1024, files=2, image_bytes=32)
    block = block.replace('"/data/train/*.tfrecord"', repr(str(files[0].parent / "*.tfrecord")))
    (tmp_path / "home").mkdir()
    with ray_head(8) as (address, env):
        ran = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, timeout=360,
                             capture_output=True, text=True,
                             env=dict(env, RAY_ADDRESS=address, HOME=str(tmp_path / "home")))
    assert ran.returncode == 0, f"{ran.stdout[-3000:]}\n{ran.stderr[-5000:]}"

