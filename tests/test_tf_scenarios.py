"""The seed scenarios with real TensorFlow, read through the native op (croupier.tf.dataset):

1. between-graph replication: 4 TensorFlow processes with MultiWorkerMirroredStrategy (TF_CONFIG
   on loopback) train one Keras model, each reading its own rank (from TF_CONFIG) of one job;
2. in-graph replication: MirroredStrategy over 2 logical CPU devices, each replica reading its own
   rank through distribute_datasets_from_function;
3. a user's tf.data pipeline (map, shuffle, batch, prefetch) as the producer, served with
   croupier.serve(ds.as_numpy_iterator()) and consumed through the op.

Horovod (scenario 4) does not build here: docs/integrations.md records the error, and
docs/tensorflow.md says so. Every check is on record ids, i.e. on content, not on counts."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import croupier

tf = pytest.importorskip("tensorflow")
import croupier.tf as ctf  # noqa: E402
from tf_records import write_regression_file  # noqa: E402
from workers import free_ports, read_outputs, run_all, write_script  # noqa: E402

if not ctf.op_available():
    pytest.skip("the TensorFlow op was not built", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parent.parent
FEATURES = "id:int64,x:float32[4],y:float32"


_MWMS_WORKER = textwrap.dedent("""
    import json, os, sys
    import croupier
    import tensorflow as tf
    import croupier.tf as ctf
    address, out = sys.argv[1], sys.argv[2]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def dataset_fn(context):
        # rank and world from TF_CONFIG (croupier.launcher); one rank per worker.
        return ctf.dataset(address, "train")

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(0.02)

    @tf.function
    def train_step(batch):
        def replica_step(b):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(b["x"])[:, 0] - b["y"]) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduced
            return loss, b["id"]
        loss, ids = strategy.run(replica_step, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None), ids

    batches, losses = [], []
    for epoch in range(2):
        total, steps = 0.0, 0
        for batch in dist:  # each iteration of the dataset: the next croupier epoch
            loss, ids = train_step(batch)
            batches.append(strategy.experimental_local_results(ids)[0].numpy().tolist())
            total, steps = total + float(loss), steps + 1
        losses.append(total / max(steps, 1))
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    with open(out, "w") as f:
        json.dump({"index": task["index"], "batches": batches, "loss": losses,
                   "kernel": model.get_weights()[0].ravel().tolist()}, f)
""")



@pytest.mark.long
@pytest.mark.timeout(300)
def test_multi_worker_mirrored_strategy_4_processes_each_read_their_rank_exactly_once(tmp_path):
    workers = 4
    path = write_regression_file(tf, tmp_path, 640)  # per epoch: 4 ranks x 10 steps x 16 records
    script = write_script(tmp_path, "worker.py", _MWMS_WORKER)
    with croupier.local_cluster(producers=2, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("train", path, FEATURES, 16, consumers=workers, seed=3, epochs=2)
        procs = start_workers(
            tmp_path, script, lambda i: [cluster.address, str(tmp_path / f"out{i}.json")], workers)
        run_all(procs, 240)
    outs = read_outputs(tmp_path / f"out{i}.json" for i in range(workers))
    steps = 640 // 16 // workers  # per worker per epoch
    for o in outs:
        assert len(o["batches"]) == 2 * steps, (o["index"], len(o["batches"]))
        assert all(len(b) == 16 for b in o["batches"])
    for epoch in range(2):
        ids = sorted(i for o in outs for b in o["batches"][epoch * steps:(epoch + 1) * steps]
                     for i in b)
        assert ids == list(range(640)), f"epoch {epoch}: not every record exactly once"
    # The workers read different data, yet their weights agree: the gradients were averaged.
    kernels = [o["kernel"] for o in outs]
    assert all(k == kernels[0] for k in kernels), kernels
    assert any(v != 0 for v in kernels[0])
    assert outs[0]["loss"][1] < outs[0]["loss"][0]


_MIRRORED = textwrap.dedent("""
    import json, sys
    import croupier
    import tensorflow as tf
    import croupier.tf as ctf
    address, out, replicas = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)])
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices)
    assert strategy.num_replicas_in_sync == replicas

    def dataset_fn(context):
        # One process holds every rank: replica r reads rank r. The datasets are taken in turn,
        # and the strategy hands consecutive elements to consecutive replicas.
        ranks = [ctf.dataset(address, "train", rank=r, world=replicas) for r in range(replicas)]
        return tf.data.Dataset.choose_from_datasets(ranks, tf.data.Dataset.range(replicas).repeat())

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def train_step(batch):
        def replica_step(b):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(b["x"])[:, 0] - b["y"]) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return b["id"]
        return strategy.run(replica_step, args=(batch,))

    steps = []
    for batch in dist:
        ids = strategy.experimental_local_results(train_step(batch))
        steps.append([t.numpy().tolist() for t in ids])
    with open(out, "w") as f:
        json.dump(steps, f)
""")


@pytest.mark.long
@pytest.mark.timeout(240)
def test_mirrored_strategy_gives_each_replica_its_own_ranks_batch_each_step(tmp_path):
    replicas = 2
    path = write_regression_file(tf, tmp_path, 320)
    script = write_script(tmp_path, "mirrored.py", _MIRRORED)
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("train", path, FEATURES, 16, consumers=replicas, seed=5, epochs=1)
        out = tmp_path / "steps.json"
        proc = subprocess.Popen([sys.executable, str(script), cluster.address, str(out),
                                 str(replicas)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        run_all([proc], 200)
        steps = json.loads(out.read_text())
        # What each rank's batches are: the same epoch read again (identical, by the plan).
        want = []
        for r in range(replicas):
            with cluster.consumer("train", r, replicas, resume=False) as feed:
                want.append([b["id"].tolist() for b in feed.epoch(0)])
    assert len(steps) == 320 // 16 // replicas
    for s, per_replica in enumerate(steps):
        assert per_replica == [want[r][s] for r in range(replicas)], f"step {s}"
    assert sorted(i for step in steps for b in step for i in b) == list(range(320))


@pytest.mark.timeout(180)
def test_a_tf_data_pipeline_served_as_the_producer_and_read_through_the_op(tmp_path):
    """The question that started the project: a user's tf.data pipeline feeds N trainers."""
    pipeline = (tf.data.Dataset.range(96)
                .map(lambda i: {"id": i, "x": tf.cast(tf.fill([4], i), tf.float32) / 96.0,
                                "word": tf.strings.as_string(i)})
                .shuffle(32, seed=11, reshuffle_each_iteration=True)
                .batch(8, drop_remainder=True)
                .prefetch(2))
    ranks = 2
    with croupier.local_cluster(producers=0, work_dir=tmp_path / "cluster") as cluster:
        served = {}
        stop = threading.Event()
        thread = threading.Thread(target=lambda: served.setdefault("n", croupier.serve(
            lambda epoch: pipeline.as_numpy_iterator(), cluster.address, "tfdata",
            consumers=ranks, epochs=2, batches_per_epoch=12, stop=stop, timeout=30)))
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    datasets = [ctf.dataset(cluster.address, "tfdata", r, ranks, timeout=30)
                                for r in range(ranks)]
                    break
                except tf.errors.NotFoundError:
                    assert time.monotonic() < deadline, "the job did not appear"
                    time.sleep(0.05)
            assert datasets[0].element_spec["word"] == tf.TensorSpec([None], tf.string)
            epochs = []
            for _ in range(2):
                got = [list(ds) for ds in datasets]  # each iteration: the next epoch
                assert [len(g) for g in got] == [6, 6]
                ids = []
                for batches in got:
                    for b in batches:
                        i = b["id"].numpy()
                        assert (abs(b["x"].numpy() - i[:, None] / 96.0) < 1e-6).all()
                        assert b["x"].shape == (8, 4)
                        assert b["word"].numpy().tolist() == [str(v).encode() for v in i]
                        ids += i.tolist()
                assert sorted(ids) == list(range(96))  # every record once per epoch
                epochs.append([b["id"].numpy().tolist() for g in got for b in g])
            assert epochs[0] != epochs[1]  # the pipeline reshuffled for the second epoch
            del datasets, got
        finally:
            thread.join(60)
            stop.set()
            thread.join(10)
        assert served.get("n") == 24


# Keras model.fit under MultiWorkerMirroredStrategy. tf.keras is tf_keras (Keras 2) here, through
# TF_USE_LEGACY_KERAS=1: Keras 3.15.1's fit does not run under this strategy (docs/tensorflow.md).
_FIT_WORKER = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import croupier
    import tensorflow as tf
    import croupier.tf as ctf
    address, job, out, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    backup = sys.argv[5] if len(sys.argv) > 5 else None    # BackupAndRestore's directory
    die_at = int(sys.argv[6]) if len(sys.argv) > 6 else -1  # exit after this many steps
    tf.keras.utils.set_random_seed(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    seen = {}  # Keras epoch -> the record ids of each step this worker trained on

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = tf.keras.layers.Dense(1)

        def call(self, inputs):
            return self.dense(inputs["x"])[:, 0]

        def train_step(self, data):
            # What the step trains on, recorded as it runs (in the strategy's replica context).
            tf.py_function(lambda ids: seen[current[0]].append(ids.numpy().tolist()),
                           [data[0]["id"]], [])
            return super().train_step(data)

    current = [0]

    class Epochs(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            current[0] = epoch
            seen.setdefault(epoch, [])

    def report():
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        with open(out, "w") as f:
            json.dump({"index": task["index"], "seen": {str(k): v for k, v in seen.items()},
                       "loss": history.history["loss"] if history else None,
                       "weights": [w.ravel().tolist() for w in model.get_weights()]}, f)

    class Die(tf.keras.callbacks.Callback):
        # A failure of every worker at once, after `die_at` steps (the backup is older).
        steps = 0

        def on_train_batch_end(self, batch, logs=None):
            Die.steps += 1
            if Die.steps == die_at:
                report()
                os._exit(17)

    history = None
    with strategy.scope():
        model = Net()
        model.compile(tf.keras.optimizers.SGD(0.02), "mse")
    callbacks = [Epochs(), Die()]
    if backup:
        callbacks.insert(0, tf.keras.callbacks.BackupAndRestore(backup, save_freq=3))
    # One rank per worker (TF_CONFIG), each worker's batch whole on its replica; Keras epoch e is
    # croupier epoch e, and its steps are the job's (croupier.tf.keras_fit_inputs).
    # With backup_dir, a restarted worker's dataset starts where Keras resumes from the backup.
    inputs = ctf.keras_fit_inputs(
        strategy, address, job, map_fn=lambda b: ({"x": b["x"], "id": b["id"]}, b["y"]),
        backup_dir=backup)
    history = model.fit(**inputs, epochs=epochs, verbose=0, callbacks=callbacks)
    report()
""")


def start_workers(tmp_path, script, args, workers):
    """`workers` TensorFlow processes on loopback with one TF_CONFIG cluster; rank i = worker i."""
    ports = free_ports(workers)
    cluster_spec = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for i in range(workers):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
                   TF_CONFIG=json.dumps({"cluster": cluster_spec,
                                         "task": {"type": "worker", "index": i}}))
        procs.append(subprocess.Popen(
            [sys.executable, str(script), *args(i)], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True))
    return procs


def wait_for_exit(procs, code, timeout):
    """Waits for every process to exit with `code`; kills them all at the deadline."""
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1, deadline - time.monotonic()))
            assert p.returncode == code, (
                f"exit {p.returncode}, not {code}:\n{p.stderr.read()[-4000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.mark.long
@pytest.mark.timeout(300)
def test_keras_fit_under_multi_worker_mirrored_strategy_and_its_resume_from_backup_and_restore(
        tmp_path):
    """Keras fit under MultiWorkerMirroredStrategy, 4 processes, no steps_per_epoch: each worker
    trains on exactly its rank's batches of the plan, in order, every record once an epoch, with
    the gradients averaged. The same run is the reference of a resume: 4 workers train 2 epochs
    with BackupAndRestore(save_freq=3) and all die after 17 steps (epoch 1, step 6); the backup
    holds 15 (epoch 1 after step 4). Restarted, they resume at epoch 1 step 5 with exactly the
    plan's batches from there, and end with the weights of the uninterrupted run: every batch of
    the trajectory trained once, in order."""
    workers, records, batch, epochs, steps = 4, 640, 16, 2, 10
    path = write_regression_file(tf, tmp_path, records)
    script = write_script(tmp_path, "fit.py", _FIT_WORKER)
    backup = tmp_path / "backup"
    out = lambda run, i: str(tmp_path / f"{run}{i}.json")  # noqa: E731
    with croupier.local_cluster(producers=2, work_dir=tmp_path / "cluster") as cluster:
        for job in ("reference", "train"):
            cluster.create_job(job, path, FEATURES, batch, consumers=workers, seed=3,
                               epochs=epochs)
        run_all(start_workers(tmp_path, script, lambda i: [
            cluster.address, "reference", out("ref", i), str(epochs)], workers), 240)
        wait_for_exit(start_workers(tmp_path, script, lambda i: [
            cluster.address, "train", out("died", i), str(epochs), str(backup), "17"], workers),
            17, 240)
        run_all(start_workers(tmp_path, script, lambda i: [
            cluster.address, "train", out("resumed", i), str(epochs), str(backup)], workers),
            240)
    ref, died, resumed = (read_outputs((out(run, i) for i in range(workers)), key="index")
                          for run in ("ref", "died", "resumed"))
    assert steps == records // batch // workers
    plans = [croupier.EpochPlan(records, batch, workers, seed=3, epoch=e) for e in range(epochs)]
    wants = [[[plan.batch(plan.global_batch(rank, s)).tolist() for s in range(steps)]
              for rank in range(workers)] for plan in plans]
    # The uninterrupted run: the plan's batches, in order, each record once an epoch.
    for epoch in range(epochs):
        for rank, o in enumerate(ref):
            got = o["seen"][str(epoch)]
            assert len(got) == steps, f"epoch {epoch} rank {rank}: {len(got)} steps, want {steps}"
            assert got == wants[epoch][rank], (
                f"epoch {epoch} rank {rank}: not the plan's batches, in order")
        ids = sorted(i for o in ref for b in o["seen"][str(epoch)] for i in b)
        assert ids == list(range(records)), f"epoch {epoch}: not every record exactly once"
    assert all(o["weights"] == ref[0]["weights"] for o in ref)  # the gradients were averaged
    assert ref[0]["loss"][1] < ref[0]["loss"][0]
    # The run that died and its resume.
    for rank in range(workers):
        want = wants[1][rank]
        assert len(died[rank]["seen"]["0"]) == steps
        assert died[rank]["seen"]["1"] == want[:7], f"rank {rank}: before the failure"
        assert "0" not in resumed[rank]["seen"], f"rank {rank}: epoch 0 trained again"
        assert resumed[rank]["seen"]["1"] == want[5:], f"rank {rank}: not resumed at step 5"
    # Epoch 1 in the trajectory kept (the backup's 5 steps, then the resumed 5): exactly once.
    kept = sorted(i for r in range(workers)
                  for b in died[r]["seen"]["1"][:5] + resumed[r]["seen"]["1"] for i in b)
    assert kept == list(range(records))
    assert all(o["weights"] == resumed[0]["weights"] for o in resumed)
    np.testing.assert_allclose(np.concatenate([np.array(w) for w in resumed[0]["weights"]]),
                               np.concatenate([np.array(w) for w in ref[0]["weights"]]),
                               rtol=1e-6, atol=1e-7)
