"""The framework adapters with the real frameworks: PyTorch (torch.distributed over gloo, through
the demo's trainer) and TensorFlow (tensorflow-cpu: eager, tf.function and model.fit)."""
import pathlib
import subprocess
import sys
import time

import pytest

import croupier
from tf_records import (MIXED, check_first_mixed_batch, mixed_total, mixed_total_in_tf_function,
                        write_mixed_examples)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def write_digits(data):
    """scripts/demo_data.py: scikit-learn's handwritten digits as TFRecord files and heldout.npz."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo_data.py"), str(data)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.long
@pytest.mark.timeout(240)
def test_the_demo_4_ddp_ranks_learn_the_digits_exactly_once(tmp_path):
    """What `make demo` runs: examples/pytorch_ddp.py in 4 ranks with DDP all-reduce, 15 epochs of
    the handwritten digits. demo_train.py checks on the ids the trainers received that every record
    came exactly once, in the planned deal, with equal steps, and that the held-out accuracy
    reached 95%; it plots the loss per epoch."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    data = tmp_path / "data"
    write_digits(data)
    plot = tmp_path / "loss.png"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo_train.py"), str(data), "--trainers", "4",
         "--producers", "2", "--epochs", "15", "--batch-size", "16", "--work-dir",
         str(tmp_path / "train"), "--timeout", "180", "--plot", str(plot)],
        capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("demo passed: exactly once, equal steps, the planned deal; the model learnt"
            in proc.stdout)
    assert proc.stdout.count("exactly once: yes, equal steps: yes, the plan's batches: yes") == 15
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(180)
def test_tensorflow_generator_dataset_eager_and_in_tf_function(tmp_path):
    tf = pytest.importorskip("tensorflow")
    import croupier.tf as ctf

    path = tmp_path / "mixed.tfrecord"
    write_mixed_examples(tf, path, 40)
    with croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("mixed", str(path), MIXED, 8, consumers=1, shuffle="none", epochs=2)
        with cluster.consumer("mixed", 0, 1) as feed:
            ds = ctf.generator_dataset(feed, 0)
            assert ds.element_spec["emb"] == tf.TensorSpec([None, 3], tf.float32)
            assert isinstance(ds.element_spec["tokens"], tf.RaggedTensorSpec)
            batches = list(ds)  # eager
            assert len(batches) == 5
            check_first_mixed_batch(batches[0])
            assert mixed_total_in_tf_function(tf, ctf.generator_dataset(feed, 1)) == mixed_total(40)


def fit_on_regression_file(tf, tmp_path, path):
    """model.fit on TensorFlow-written data (x, y floats, 804 records), fed through the service."""
    import croupier.tf as ctf

    with croupier.local_cluster(producers=1, work_dir=tmp_path / "cluster") as cluster:
        cluster.create_job("reg", str(path), "x:float32,y:float32", 32, consumers=1, seed=1,
                           epochs=1)
        with cluster.consumer("reg", 0, 1) as feed:
            # x in [0, 1000), y about 2x: scaled so that plain SGD converges.
            ds = ctf.generator_dataset(feed, 0).map(lambda b: (b["x"] / 1000, b["y"] / 1000))
            model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
            model.compile(optimizer=tf.keras.optimizers.SGD(0.5), loss="mse")
            history = model.fit(ds, epochs=1, verbose=0)
            assert feed.state_dict()["epoch"] == 1  # fit read the whole epoch: 804 // 32 steps
            assert history.history["loss"][0] < 0.5


@pytest.mark.timeout(180)
def test_tensorflow_generator_dataset_in_fit_on_a_file_tensorflow_writes_now(
        tmp_path, tf_written_tfrecord):
    import tensorflow as tf
    fit_on_regression_file(tf, tmp_path, tf_written_tfrecord / "regression.tfrecord")


@pytest.mark.timeout(180)
def test_tensorflow_generator_dataset_in_fit_on_the_shared_regression_file(
        tmp_path, shared_tfrecord):
    tf = pytest.importorskip("tensorflow")
    fit_on_regression_file(tf, tmp_path, shared_tfrecord / "regression-train.tfrecord")


@pytest.mark.timeout(180)
def test_mpi_trainers_under_mpirun_are_fed_exactly_once(tmp_path):
    """examples/mpi_allreduce.py in 3 ranks under mpirun (rank and world from OpenMPI's
    variables), gradients averaged with an mpi4py all-reduce."""
    pytest.importorskip("sklearn")
    data = tmp_path / "data"
    write_digits(data)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo_train.py"), str(data), "--trainers", "3",
         "--producers", "2", "--epochs", "2", "--batch-size", "16", "--work-dir",
         str(tmp_path / "train"), "--timeout", "150", "--launcher", "mpi"],
        capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("exactly once: yes, equal steps: yes, the plan's batches: yes") == 2


@pytest.mark.timeout(180)
def test_serve_a_tf_data_pipeline_and_a_torch_dataloader(tmp_path):
    """croupier.serve() with a user's tf.data pipeline (map, batch, prefetch) through
    as_numpy_iterator(), and with a PyTorch DataLoader; two consumers read every batch once."""
    import threading
    tf = pytest.importorskip("tensorflow")
    torch = pytest.importorskip("torch")

    ds = (tf.data.Dataset.range(64)
          .map(lambda i: {"i": i, "x": tf.cast(tf.fill([3], i), tf.float32)})
          .batch(8).prefetch(2))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.arange(64)), batch_size=8,
        collate_fn=lambda rows: {"i": torch.stack([r[0] for r in rows])})
    sources = {"tfdata": lambda epoch: ds.as_numpy_iterator(), "torch": loader}
    with croupier.local_cluster(producers=0, work_dir=tmp_path / "cluster") as cluster:
        for name, source in sources.items():
            done = {}
            thread = threading.Thread(target=lambda: done.setdefault("n", croupier.serve(
                source, cluster.address, name, consumers=2, epochs=1, batches_per_epoch=8)))
            thread.start()
            deadline = time.monotonic() + 30
            while True:
                try:
                    feeds = [cluster.consumer(name, r, 2, timeout=30) for r in range(2)]
                    break
                except croupier.errors.NotFoundError:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            ids = [b["i"].tolist() for pair in zip(*(f.epoch(0) for f in feeds)) for b in pair]
            for f in feeds:
                f.close()
            thread.join(30)
            assert done.get("n") == 8
            assert ids == [list(range(8 * g, 8 * g + 8)) for g in range(8)]
