"""The same-host shared-memory data path with real processes: exactly once by content over shared
memory, the automatic fallback to TCP, forcing it on or off, and no segment left anywhere after
producer and consumer are killed with SIGKILL.
"""
import os
import pathlib
import re
import signal
import time

import pytest

from service_cluster import (Cluster, OutputWatch, check_exactly_once, fault_free_run, kill,
                             read_batches, synth_dataset)

FEATURES = "id:int64,label:int64,image:bytes"
RECORDS = 3000
BATCH = 16


@pytest.fixture
def dataset(tmp_path):
    return synth_dataset(tmp_path / "data", RECORDS, files=3, image_bytes=256)


def shm_listeners():
    """The abstract socket names of shared-memory data servers in this network namespace."""
    names = set()
    for line in pathlib.Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and parts[7].startswith("@croupier-shm/"):
            names.add(parts[7])
    return names


def segment_mappings(pid):
    """How many batch segments process `pid` has mapped."""
    try:
        return pathlib.Path(f"/proc/{pid}/maps").read_text().count("memfd:croupier-batch")
    except (FileNotFoundError, ProcessLookupError):
        return 0


def test_exactly_once_over_shared_memory_matches_tcp(tmp_path, dataset):
    # Reference: every rank's (epoch, step, hash) over TCP only.
    reference = fault_free_run(tmp_path / "tcp", dataset, FEATURES, BATCH, 4, seed=11,
                               env={"CROUPIER_SHM": "off"})
    with Cluster(tmp_path / "shm", env={"CROUPIER_SHM": "on"}) as cluster:
        cluster.add_producer()
        cluster.add_producer()
        cluster.create_job("train", dataset, FEATURES, BATCH, 4, seed=11)
        # The shared-memory names of this cluster's producers (other tests' producers may listen
        # on this machine at the same time).
        deadline = time.monotonic() + 10
        wanted = set()
        while time.monotonic() < deadline:
            wanted = {f"@croupier-shm/{p['dataAddress']}" for p in cluster.status()["producers"]}
            if len(wanted) == 2 and wanted <= shm_listeners():
                break
            time.sleep(0.05)
        assert len(wanted) == 2 and wanted <= shm_listeners(), "each producer offers shared memory"
        outs = [tmp_path / f"rank{r}.jsonl" for r in range(4)]
        # CROUPIER_SHM=on: a consumer that could not use shared memory would fail, not fall back.
        procs = [cluster.start_consumer("train", r, 4, outs[r]) for r in range(4)]
        cluster.wait(procs, timeout=90)
    # Same content, bit for bit, as over TCP; every record once.
    n = check_exactly_once(outs, reference, RECORDS, BATCH, seed=11)
    assert n == sum(len(r) for r in reference) > 0


def test_forced_on_fails_without_it_and_auto_falls_back_to_tcp(tmp_path, dataset):
    with Cluster(tmp_path / "cluster") as cluster:
        cluster.add_producer("--shm", "off")
        cluster.create_job("train", dataset, FEATURES, BATCH, 1, seed=3)
        forced = cluster.start_consumer("train", 0, 1, tmp_path / "forced.jsonl", 1,
                                        "--shm", "on", "--timeout-ms", "3000")
        forced.wait(timeout=60)
        assert forced.returncode != 0
        log = forced.log_path.read_text()
        assert "shared memory is required" in log and "cannot connect to data server" in log, log
        auto = cluster.start_consumer("train", 0, 1, tmp_path / "auto.jsonl", 1, "--shm", "auto",
                                      "--no-resume")
        cluster.wait([auto], timeout=60)
    # Over TCP: every record of the epoch once.
    ids = [i for b in read_batches(tmp_path / "auto.jsonl") for i in b["ids"]]
    assert len(ids) == len(set(ids)) == RECORDS // BATCH * BATCH


def segment_inodes():
    """{inode: pids} of the batch segments any process we can see maps or holds open."""
    held = {}
    for pid_dir in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            for line in (pid_dir / "maps").read_text().splitlines():
                if "memfd:croupier-batch" in line:
                    held.setdefault(int(line.split()[4]), set()).add(int(pid_dir.name))
            for fd in (pid_dir / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/memfd:croupier-batch"):
                    held.setdefault(os.stat(fd).st_ino, set()).add(int(pid_dir.name))
        except OSError:
            continue
    return held


def test_sigkill_of_producer_and_consumer_leaves_no_segment(tmp_path):
    # Large batches held by a slow consumer: segments are mapped when the processes die.
    files = synth_dataset(tmp_path / "data", 2000, files=2, image_bytes=60000)
    shm_before = set(os.listdir("/dev/shm"))
    with Cluster(tmp_path / "cluster", env={"CROUPIER_SHM": "on"}) as cluster:
        producer = cluster.add_producer()
        cluster.create_job("train", files, FEATURES, 64, 1, seed=5)
        out = tmp_path / "rank0.jsonl"
        consumer = cluster.start_consumer("train", 0, 1, out, 1, "--slow-ms", "200",
                                          "--prefetch", "8")
        OutputWatch([out]).wait_for(2, [consumer], timeout=60)
        deadline = time.monotonic() + 10
        while segment_mappings(consumer.pid) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert segment_mappings(consumer.pid) >= 2, "the consumer holds prefetched segments"
        ours = {ino for ino, pids in segment_inodes().items()
                if pids & {producer.pid, consumer.pid}}
        assert ours
        # The producer's own socket name (other tests' producers may listen beside it).
        address = re.search(r"serving on (\S+) ", producer.log_path.read_text())[1]
        name = f"@croupier-shm/{address}"
        assert name in shm_listeners()
        kill(producer, signal.SIGKILL)
        kill(consumer, signal.SIGKILL)
        # No process holds any of their segments any more: the kernel freed them with the
        # processes; and the producer's socket name went with it.
        left = {ino: pids for ino, pids in segment_inodes().items() if ino in ours}
        assert left == {}, f"segments outlived their processes: {left}"
        assert name not in shm_listeners()
    assert set(os.listdir("/dev/shm")) - shm_before == set(), "nothing is ever put in /dev/shm"
