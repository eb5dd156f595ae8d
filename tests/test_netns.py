"""A network fault across hosts: the dispatcher, two producers and the consumers each run in their
own network namespace, joined by veth pairs to a bridge (in a namespace of its own) on a private
/24. One producer's link is taken down mid-epoch, which must look like a crashed producer to the
rest (exactly once, bit-identical to a fault-free run), then brought back up, after which the
producer rejoins under a new id and nothing is delivered twice.

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's `ip`; without them the test skips and
says why. Namespace and interface names carry a per-run tag, nothing is created in the host's own
network namespace, and every namespace (with the veths inside it) is deleted at the end, whatever
happened.
"""
import os
import re
import secrets
import shutil
import subprocess
import time

import pytest

from fault_job import (BATCH, FEATURES, RECORDS, SEED, STEPS, WORLD,  # noqa: F401 (fixtures)
                       dataset, reference)
from service_cluster import Cluster, OutputWatch, check_exactly_once

TIMEOUT_MS = 1500  # --producer-timeout-ms
DOWN_S = 5.0  # how long the link stays down: well past the timeout


def ip(*args, check=True, timeout=10):
    proc = subprocess.run(["ip", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(map(str, args))} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()}")
    return proc


class Network:
    """Hosts, each a network namespace with one veth (`ethN` inside) plugged into a bridge that
    lives in its own switch namespace, on the /24 `subnet`. Deleting a namespace deletes the veth
    ends inside it, so close() only has to delete the namespaces."""

    def __init__(self):
        self.tag = f"{os.getpid() % 100000:05d}{secrets.token_hex(2)}"  # unique per run
        self.subnet = f"10.{secrets.randbelow(200) + 50}.{secrets.randbelow(250) + 1}"
        self.namespaces = []
        self.hosts = {}  # name: (namespace, device, address)
        self.switch = None

    def start(self):
        self.switch = self._add_namespace("sw")
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")

    def _add_namespace(self, role):
        name = f"croupier-{self.tag}-{role}"
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")
        return name

    def add_host(self, role, last_octet):
        """A namespace with address subnet.last_octet/24 on a veth to the bridge."""
        ns = self._add_namespace(role)
        n = len(self.hosts)
        # Both ends are created straight in their namespaces: nothing appears in the host's.
        # Names are at most 15 bytes.
        dev, peer = f"cr{self.tag}h{n}", f"cr{self.tag}s{n}"
        ip("link", "add", dev, "netns", ns, "type", "veth", "peer", "name", peer, "netns",
           self.switch)
        ip("-n", self.switch, "link", "set", peer, "master", "br0")
        ip("-n", self.switch, "link", "set", peer, "up")
        address = f"{self.subnet}.{last_octet}"
        ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
        ip("-n", ns, "link", "set", dev, "up")
        self.hosts[role] = (ns, dev, address)
        return address

    def exec_prefix(self, role):
        return ["ip", "netns", "exec", self.hosts[role][0]]

    def address(self, role):
        return self.hosts[role][2]

    def set_link(self, role, state):
        ns, dev, _ = self.hosts[role]
        ip("-n", ns, "link", "set", dev, state)

    def close(self):
        errors = []
        for ns in reversed(self.namespaces):
            proc = ip("netns", "del", ns, check=False)
            if proc.returncode != 0:
                errors.append(f"{ns}: {proc.stderr.strip()}")
        self.namespaces = []
        left = [n for n in ip("netns", "list").stdout.split() if self.tag in n]
        left += [line for line in ip("-o", "link").stdout.splitlines() if self.tag in line]
        if errors or left:
            raise RuntimeError(f"network cleanup failed: {errors} {left}")


def why_namespaces_cannot_run():
    """None if network namespaces and veths can be made here, else the exact reason."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (Debian package iproute2)"
    probe = f"croupier-probe-{os.getpid()}-{secrets.token_hex(2)}"
    proc = ip("netns", "add", probe, check=False)
    if proc.returncode != 0:
        return f"cannot create a network namespace: `ip netns add` said: {proc.stderr.strip()}"
    try:
        dev = f"crp{secrets.token_hex(3)}"
        proc = ip("link", "add", dev, "netns", probe, "type", "veth", "peer", "name", dev + "b",
                  "netns", probe, check=False)
        if proc.returncode != 0:
            return f"cannot create a veth pair: `ip link add` said: {proc.stderr.strip()}"
    finally:
        ip("netns", "del", probe, check=False)
    return None


@pytest.fixture
def network():
    reason = why_namespaces_cannot_run()
    if reason:
        pytest.skip(reason)
    net = Network()
    try:
        net.start()
        yield net
    finally:
        net.close()


@pytest.mark.timeout(150)
def test_producer_link_down_is_a_crash_and_link_up_duplicates_nothing(tmp_path, network,
                                                                        dataset, reference):
    dispatcher_ip = network.add_host("dispatcher", 1)
    producer_ips = [network.add_host(f"producer{i}", 11 + i) for i in range(2)]
    network.add_host("consumers", 21)
    # Reachability across namespaces before anything runs (bounded: 2 pings, 1 s each).
    ping = subprocess.run([*network.exec_prefix("consumers"), "ping", "-c", "1", "-W", "1",
                           producer_ips[1]], capture_output=True, text=True, timeout=10) \
        if shutil.which("ping") else None
    assert ping is None or ping.returncode == 0, ping.stdout + ping.stderr

    with Cluster(tmp_path / "cluster", producer_timeout_ms=TIMEOUT_MS, host=dispatcher_ip,
                 dispatcher_prefix=network.exec_prefix("dispatcher"),
                 client_prefix=network.exec_prefix("consumers")) as cluster:
        for i, address in enumerate(producer_ips):
            cluster.add_producer("--bind", address, "--advertise-host", address,
                                 prefix=network.exec_prefix(f"producer{i}"))
        cluster.create_job("train", dataset, FEATURES, BATCH, WORLD, seed=SEED, epochs=1)
        ids = {}
        deadline = time.monotonic() + 20
        while len(ids) < 2 and time.monotonic() < deadline:
            ids = cluster.producer_ids()
            time.sleep(0.1)
        assert sorted(a.rsplit(":", 1)[0] for a in ids) == sorted(producer_ips), ids
        cut = next(a for a in ids if a.startswith(producer_ips[1] + ":"))

        outs = [tmp_path / f"rank{r}.jsonl" for r in range(WORLD)]
        procs = [cluster.start_consumer("train", r, WORLD, outs[r], 1, "--slow-ms", "200",
                                        prefix=network.exec_prefix("consumers"))
                 for r in range(WORLD)]
        watch = OutputWatch(outs)
        watch.wait_for(STEPS // 5, procs, timeout=60)

        network.set_link("producer1", "down")
        try:
            deadline = time.monotonic() + DOWN_S
            while time.monotonic() < deadline:
                watch.poll()
                time.sleep(0.02)
            # The dispatcher took it for dead and orphaned its work, as for a crash.
            log = cluster.dispatcher.log_path.read_text()
            assert re.search(f"producer {ids[cut]} at {cut} removed \\(expired", log), log
            assert cut not in cluster.producer_ids()
        finally:
            network.set_link("producer1", "up")
        up_at = watch.poll()[:]

        # Back on the network, it finds it was expired, drops its tasks and rejoins anew.
        deadline = time.monotonic() + 20
        while cluster.producer_ids().get(cut) in (None, ids[cut]):
            assert time.monotonic() < deadline, "the producer did not register again in 20 s"
            time.sleep(0.2)
        new_id = cluster.producer_ids()[cut]
        assert int(new_id) > int(ids[cut])
        assert "registering again" in cluster.producers[1].log_path.read_text()

        stall = watch.follow(cluster, procs, timeout=100)
        assert min(up_at) < STEPS, "the epoch ended before the link came back: slow it down"
        print(f"link down {DOWN_S:.1f} s (timeout {TIMEOUT_MS} ms): longest consumer stall "
              f"{stall:.2f} s (includes 0.2 s --slow-ms)")
        # Each consumer handed exactly the epoch's steps to its trainer, no more.
        for p in procs:
            assert f"': {STEPS} batches" in p.log_path.read_text()
        assert all(p.poll() is None for p in cluster.producers)
    assert check_exactly_once(outs, reference, RECORDS, BATCH, SEED) == STEPS * WORLD
