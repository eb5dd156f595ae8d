"""croupier.ray on a real local Ray cluster (ray.init on this machine): the dispatcher and the
producers as Ray actors, trainers under Ray Train's TorchTrainer reading their ranks, and
producers scaled up and down while they read, a map job's producer actors following that
job's own target, scale() and leaving the service ending in seconds when a scale-up races the
job's end or cannot be placed, and a producer's process killed under its live actor. Checked on
content: every rank gets exactly the plan's record ids, every record once per epoch."""
import datetime
import json
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import threading
import time

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.train.torch")

import croupier  # noqa: E402
import croupier.ray  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from service_cluster import RankReaders, synth_dataset  # noqa: E402

FEATURES = "id:int64,label:int64,image:bytes"
RECORDS, BATCH, WORLD, SEED, EPOCHS = 480, 8, 2, 4, 2


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A Ray cluster of this machine, for the module; every Ray process is gone at the end."""
    tmp = tmp_path_factory.mktemp("ray")
    here = pathlib.Path(__file__).resolve().parent
    path = os.pathsep.join([str(here), str(here.parent / "python"), os.environ.get("PYTHONPATH", "")])
    # Loopback only: Ray would otherwise use this machine's interface address. No token file in
    # the home folder: the cluster is this test's, on loopback.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Ray's own folder is short: its socket paths must fit AF_UNIX's 107 bytes, which pytest's
    # folders under pytest-xdist (.../popen-gw1/...) do not leave room for.
    ray_dir = tempfile.mkdtemp(prefix="croupier-ray-")
    try:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1", _temp_dir=ray_dir,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
        yield tmp
        ray.shutdown()
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


def planned(epoch):
    plan = croupier.EpochPlan(RECORDS, BATCH, WORLD, seed=SEED, epoch=epoch, shuffle="global")
    return [[plan.batch(s * WORLD + r).tolist() for s in range(plan.steps_per_consumer)]
            for r in range(WORLD)]


def train_loop(config):
    """A Ray Train worker: reads every epoch through croupier and writes the ids it got."""
    import croupier.ray
    import ray.train
    feed = croupier.ray.consumer(config["address"], "train", timeout=60)
    rank = ray.train.get_context().get_world_rank()
    got = []
    for epoch in range(config["epochs"]):
        ids = []
        for batch in feed.epoch(epoch):
            ids.append(batch["id"].tolist())
            time.sleep(config["pause"])  # a training step
        got.append(ids)
    feed.close()
    pathlib.Path(config["out"], f"rank{rank}.json").write_text(json.dumps(got))


@pytest.mark.timeout(300)
def test_ray_train_workers_read_the_plan_while_producers_are_scaled(ray_cluster, tmp_path):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    files = synth_dataset(tmp_path / "data", RECORDS, files=2, image_bytes=32)
    out = tmp_path / "out"
    out.mkdir()
    with croupier.ray.Service(producers=1, work_dir=tmp_path / "service",
                              bind="127.0.0.1") as service:
        service.create_job("train", [str(f) for f in files], FEATURES, BATCH, consumers=WORLD,
                           seed=SEED, epochs=EPOCHS)
        scaled = []

        def scale():
            for n in (3, 1, 2):  # producers join and leave while the trainers read
                time.sleep(1.5)
                service.scale(n)
                scaled.append(n)

        scaler = threading.Thread(target=scale)
        scaler.start()
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={"address": service.address, "epochs": EPOCHS, "out": str(out),
                               "pause": 0.05},
            scaling_config=ScalingConfig(num_workers=WORLD, use_gpu=False,
                                         resources_per_worker={"CPU": 0.5}),
            run_config=RunConfig(storage_path=str(tmp_path / "train"), name="croupier"))
        trainer.fit()
        scaler.join()
        assert scaled == [3, 1, 2]
        assert service.producers == 2
    for r in range(WORLD):
        got = json.loads((out / f"rank{r}.json").read_text())
        assert got == [planned(e)[r] for e in range(EPOCHS)], f"rank {r}"


def test_a_service_needs_a_ray_cluster_first(monkeypatch):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(croupier.errors.FailedPreconditionError, match="ray.init"):
        croupier.ray.Service()


@pytest.mark.timeout(120)
def test_shutdown_leaves_no_croupier_process(ray_cluster, tmp_path):
    service = croupier.ray.Service(producers=2, work_dir=tmp_path / "s", bind="127.0.0.1")
    pids = ray.get([p.pid.remote() for p in service._producers]) + \
        [ray.get(service._dispatcher.pid.remote())]
    assert len(service.status()["producers"]) == 2
    service.shutdown()
    deadline = time.monotonic() + 10
    while any(pathlib.Path(f"/proc/{p}").exists() for p in pids):
        assert time.monotonic() < deadline, "a croupier process outlived its service"
        time.sleep(0.05)
    logs = "".join(p.read_text() for p in (tmp_path / "s").glob("producer*.log"))
    assert logs.count("leaving (serving what it has made, handing the rest back)") == 2, logs


@pytest.mark.timeout(180)
def test_a_killed_producer_actor_is_restarted_and_registers_anew(ray_cluster, tmp_path):
    """A producer actor's process killed (SIGKILL, as a lost node's would be): its croupier
    process dies with it, Ray restarts the actor (max_restarts), and the new croupier producer
    registers under a new id; the trainers reading meanwhile get the plan's batches."""
    files = synth_dataset(tmp_path / "data", RECORDS, files=2, image_bytes=32)
    with croupier.ray.Service(producers=2, work_dir=tmp_path / "service",
                              bind="127.0.0.1") as service:
        service.create_job("train", [str(f) for f in files], FEATURES, BATCH, consumers=WORLD,
                           seed=SEED, epochs=EPOCHS)
        before = {p["producer_id"] for p in service.status()["producers"]}
        assert len(before) == 2
        victim = service._producers[1]
        actor_pid = ray.get(victim.actor_pid.remote())
        croupier_pid = ray.get(victim.pid.remote())
        got = [[] for _ in range(WORLD)]

        def read(rank):
            feed = croupier.Consumer(service.address, "train", rank, WORLD, timeout=60)
            for epoch in range(EPOCHS):
                ids = []
                for batch in feed.epoch(epoch):
                    ids.append(batch["id"].tolist())
                    time.sleep(0.05)
                got[rank].append(ids)
            feed.close()

        readers = RankReaders(read, WORLD)
        time.sleep(1.0)
        os.kill(actor_pid, signal.SIGKILL)
        # The croupier process dies with its actor's process.
        deadline = time.monotonic() + 10
        while pathlib.Path(f"/proc/{croupier_pid}").exists():
            assert time.monotonic() < deadline, "the croupier producer outlived its actor"
            time.sleep(0.05)
        # Ray restarts the actor; its new producer registers: two producers, one of them new.
        deadline = time.monotonic() + 60
        while True:
            now = {p["producer_id"] for p in service.status()["producers"]}
            if len(now) == 2 and len(now - before) == 1:
                break
            assert time.monotonic() < deadline, f"no new producer registered: {now}, {before}"
            time.sleep(0.2)
        assert ray.get(victim.actor_pid.remote()) != actor_pid
        assert ray.get(victim.running.remote())
        errors = readers.join(120)
        assert not errors, errors
    for r in range(WORLD):
        assert got[r] == [planned(e)[r] for e in range(EPOCHS)], f"rank {r}"



# A map job of tests/map_sources.py whose records each take 10 ms of sleep to read, so that its one
# producer is the bottleneck of two ranks reading flat out.
MAP = {"records": 400, "batch_size": 4, "consumers": 2, "epochs": 4, "seed": 5, "delay": 0.01}


def map_planned(epoch):
    plan = croupier.EpochPlan(MAP["records"], MAP["batch_size"], 2, seed=MAP["seed"], epoch=epoch,
                              shuffle="global")
    return [[plan.batch(s * 2 + r).tolist() for s in range(plan.steps_per_consumer)]
            for r in range(2)]


@pytest.mark.timeout(90)
def test_a_map_jobs_producer_actors_follow_its_own_target(ray_cluster, tmp_path):
    """croupier.ray.Service(pipeline=..., job=...): the map job's `croupier produce` processes as
    actors, scaled by autoscale() on that job's own target, while two ranks read the plan."""
    started = time.monotonic()
    with croupier.ray.Service(producers=1, work_dir=tmp_path, bind="127.0.0.1",
                              pipeline="map_sources:pipeline", job="m",
                              producer_args=["--workers", "1"],
                              dispatcher_args=["--advice-smoothing-ms", "2000",
                                               "--advice-hold-ms", "1500"],
                              env={"MAP_TEST": json.dumps(MAP)}) as service:
        autoscaler = service.autoscale(1, 3, interval=0.5)
        feed = croupier.Consumer(service.address, "m", ranks=[0, 1], world=2, timeout=60)
        for epoch in range(MAP["epochs"]):
            got = [[], []]
            for step in feed.epoch(epoch):
                for rank, batch in enumerate(step):
                    got[rank].append(batch["id"].tolist())
            assert got == map_planned(epoch), f"epoch {epoch}"
        service.stop_autoscaling()  # before the producers end with the job
        feed.close()
        status = service.status()
    changes = autoscaler.changes
    assert changes and changes[0][0] == 1 and changes[0][1] >= 2, (changes, status)
    assert status["producer_advice"]["producers"] == 0, status["producer_advice"]
    print(f"map job under Ray: {time.monotonic() - started:.1f} s, changes {changes}")


def croupier_pids(service):
    """The croupier processes of the service's live actors (those answering)."""
    actors = [*service._producers, service._dispatcher]
    return ray.get([a.pid.remote() for a in actors], timeout=30)


def left_at(log_path):
    """The wall-clock time at which a producer's log says it stopped, or None."""
    for line in pathlib.Path(log_path).read_text(errors="replace").splitlines():
        if line.endswith(" stopped") and "[producer] producer" in line:
            stamp = line.split(" ", 1)[0].replace("Z", "+00:00")
            return datetime.datetime.fromisoformat(stamp).timestamp()
    return None


def wait_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while any(pathlib.Path(f"/proc/{p}").exists() for p in pids):
        assert time.monotonic() < deadline, f"croupier processes outlived their service: {pids}"
        time.sleep(0.05)


@pytest.mark.timeout(150)
def test_a_scale_up_racing_the_map_jobs_end_returns_and_the_service_leaves_in_seconds(
        ray_cluster, tmp_path):
    """A scale-up asked for just before a map job ends: the new producer actor starts its
    `croupier produce` only after the end, so it registers (if at all) and leaves at once, and
    the service's old producer has left too: scale() must not wait for a registration that
    cannot come (it waited ready_timeout, 90 s here). scale() returns seconds after the new
    producer's process has left; how long Ray takes to start that actor's process is Ray's (20 s
    on this machine with its 2 cores busy), so it is not counted. A scale-up asked for after the
    end starts nothing, and leaving the service's `with` block takes seconds."""
    job = {"records": 64, "batch_size": 4, "consumers": 2, "epochs": 1, "seed": 3}
    steps = job["records"] // job["batch_size"] // 2
    with croupier.ray.Service(producers=1, work_dir=tmp_path, bind="127.0.0.1",
                              pipeline="map_sources:pipeline", job="e", ready_timeout=90,
                              producer_args=["--workers", "0"],
                              env={"MAP_TEST": json.dumps(job)}) as service:
        feed = croupier.Consumer(service.address, "e", ranks=[0, 1], world=2, timeout=60)
        reading = iter(feed.epoch(0))
        for _ in range(steps):  # every batch, but the end of the epoch not yet acknowledged
            next(reading)
        scaled = {}

        def scale():
            try:
                scaled["before"] = service.scale(2)
            except Exception as e:  # noqa: BLE001 (the test reports it)
                scaled["error"] = f"{type(e).__name__}: {e}"
            scaled["at"] = time.monotonic()
            scaled["wall"] = time.time()

        scaler = threading.Thread(target=scale)
        scaler.start()
        deadline = time.monotonic() + 30
        while len(service._producers) < 2:  # the second producer actor is created
            assert time.monotonic() < deadline and scaler.is_alive(), scaled
            time.sleep(0.01)
        assert next(reading, None) is None  # the end of the last epoch: the job ends
        feed.close()
        ended = time.monotonic()
        scaler.join(60)
        assert not scaler.is_alive()
        assert "error" not in scaled and scaled["at"] - ended < 45, \
            (scaled, scaled.get("at", 0) - ended)
        # The new producer registered before the end (scale() returned then), or left at once.
        left = left_at(tmp_path / "producer2.log")
        assert left is None or scaled["wall"] - left < 8, (scaled, left)
        after = "-" if left is None else f"{scaled['wall'] - left:.1f} s"
        print(f"\nscale(2) returned {scaled['at'] - ended:.1f} s after the job's end, "
              f"{after} after the new producer left")
        # Both producers have left with the job: none counts, and none is started any more.
        deadline = time.monotonic() + 20
        while service.producers:
            assert time.monotonic() < deadline, "the producers did not leave with their job"
            time.sleep(0.2)
        began = time.monotonic()
        assert service.scale(2) == 0
        assert time.monotonic() - began < 10 and service.producers == 0
        pids = croupier_pids(service)
        leaving = time.monotonic()
    left_in = time.monotonic() - leaving
    print(f"left the service in {left_in:.1f} s")
    assert left_in < 10
    wait_gone(pids, 10)


@pytest.mark.timeout(150)
def test_leaving_the_service_ends_the_autoscalers_scale_up_at_once(ray_cluster, tmp_path):
    """The autoscaler inside scale(), waiting for a producer that cannot come (an actor Ray cannot
    place: 64 CPUs asked for on a cluster of 4), when the service's `with` block is left: leaving
    takes seconds, not ready_timeout (30 s here) plus a stop of the unplaced actor (30 s)."""
    with croupier.ray.Service(producers=0, work_dir=tmp_path, bind="127.0.0.1",
                              ready_timeout=30, producer_options={"num_cpus": 64}) as service:
        # The dispatcher's advice, as it would be for a job that wants a producer.
        service.status = lambda clients=True: {"producer_advice": {"recommended": 1}}
        autoscaler = service.autoscale(min_producers=0, max_producers=1, interval=0.2)
        deadline = time.monotonic() + 30
        while len(service._producers) < 1:  # the autoscaler's scale(1) has started an actor
            assert time.monotonic() < deadline, autoscaler.last_error
            time.sleep(0.01)
        time.sleep(1.0)  # inside the wait for its registration
        pids = [ray.get(service._dispatcher.pid.remote(), timeout=30)]
        leaving = time.monotonic()
    left_in = time.monotonic() - leaving
    print(f"\nleft the service in {left_in:.1f} s")
    assert left_in < 8
    assert autoscaler._thread is None and not autoscaler.changes
    wait_gone(pids, 10)


# A map job whose records each take 10 ms of sleep, read by two ranks for 2 epochs.
KILL = {"records": 320, "batch_size": 4, "consumers": 2, "epochs": 2, "seed": 7, "delay": 0.01}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("replaced_by", ["ray", "scale"])
def test_a_producer_process_killed_under_its_live_actor_is_replaced(ray_cluster, tmp_path,
                                                                    replaced_by):
    """SIGKILL of the `croupier produce` process of one of two producer actors (the actor itself
    untouched): the actor dies with it. With max_restarts (the default), Ray restarts it and its
    new producer registers; with max_restarts=0, service.producers falls to 1 and scale(2) starts
    another. The two ranks, held between their epochs until then, get every batch of the plan
    once, with the bytes of the batches made here."""
    from croupier.map.pipeline import Pipeline
    import map_sources
    options = {"max_restarts": 0} if replaced_by == "scale" else {}
    with croupier.ray.Service(producers=2, work_dir=tmp_path, bind="127.0.0.1",
                              pipeline="map_sources:pipeline", job="k",
                              producer_args=["--workers", "1"], producer_options=options,
                              dispatcher_args=["--producer-timeout-ms", "4000"],
                              env={"MAP_TEST": json.dumps(KILL)}) as service:
        def registered():
            return {p["producer_id"] for p in service.status()["producers"]
                    if p.get("source_job") == "k"}

        before = registered()
        assert len(before) == 2
        victim = service._producers[1]
        actor_pid = ray.get(victim.actor_pid.remote(), timeout=30)
        croupier_pid = ray.get(victim.pid.remote(), timeout=30)
        got = [[] for _ in range(WORLD)]  # rank: [(epoch, ids, content hash)]
        replaced = threading.Event()

        def read(rank):
            feed = croupier.Consumer(service.address, "k", rank, WORLD, timeout=60)
            for epoch in range(KILL["epochs"]):
                if epoch == 1:
                    assert replaced.wait(90), "the killed producer was not replaced"
                for batch in feed.batches(epoch):
                    got[rank].append((epoch, batch.to_dict()["id"].tolist(),
                                      batch.content_hash))
                    time.sleep(0.02)
            feed.close()

        readers = RankReaders(read, WORLD)
        try:
            deadline = time.monotonic() + 60
            while min(len(g) for g in got) < 3:  # both ranks are reading
                assert time.monotonic() < deadline and not readers.errors, readers.errors
                time.sleep(0.05)
            os.kill(croupier_pid, signal.SIGKILL)
            killed = time.monotonic()
            # The actor dies with its process.
            deadline = time.monotonic() + 10
            while pathlib.Path(f"/proc/{actor_pid}").exists():
                assert time.monotonic() < deadline, "the actor outlived its croupier process"
                time.sleep(0.05)
            if replaced_by == "scale":
                deadline = time.monotonic() + 20
                while service.producers != 1:
                    assert time.monotonic() < deadline, "service.producers counts a dead producer"
                    time.sleep(0.2)
                assert service.scale(2, timeout=60) == 1
            # Two producers registered again, one of them new, the killed one expired.
            deadline = time.monotonic() + 60
            while True:
                now = registered()
                if len(now) == 2 and len(now - before) == 1:
                    break
                assert time.monotonic() < deadline, f"no new producer registered: {now}, {before}"
                time.sleep(0.2)
            back_in = time.monotonic() - killed
            assert service.producers == 2
            if replaced_by == "ray":
                assert ray.get(victim.actor_pid.remote(), timeout=30) != actor_pid
        finally:
            replaced.set()  # the readers go on, or end with the job
            errors = readers.join(120)
        assert not errors, errors
    print(f"\n2 producers registered again {back_in:.1f} s after the kill ({replaced_by})")
    pipeline = Pipeline(map_sources.Records(KILL["records"], delay=0.0),
                        transform=map_sources.augment, seed=KILL["seed"])
    for r in range(WORLD):
        want = []
        for epoch in range(KILL["epochs"]):
            plan = croupier.EpochPlan(KILL["records"], KILL["batch_size"], WORLD,
                                      seed=KILL["seed"], epoch=epoch, shuffle="global")
            for s in range(plan.steps_per_consumer):
                ids = plan.batch(s * WORLD + r)
                want.append((epoch, ids.tolist(),
                             pipeline.make(epoch, s * WORLD + r, ids).content_hash))
        assert got[r] == want, f"rank {r}"
