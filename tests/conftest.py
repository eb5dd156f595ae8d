import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The croupier processes the tests start keep abseil's mutex deadlock detector, which the command
# turns off for users (src/common/mutex_checks.h): a lock-order inversion aborts them here.
os.environ.setdefault("CROUPIER_MUTEX_DEADLOCK_CHECK", "1")
# TFRecord files that TensorFlow wrote in public projects (their README describes them), beside the
# repository; CROUPIER_SHARED_TFRECORD may name another folder. A plain clone has none.
SHARED_TFRECORD = pathlib.Path(os.environ.get("CROUPIER_SHARED_TFRECORD")
                               or ROOT.parent / "shared" / "data" / "tfrecord")


@pytest.fixture
def shared_tfrecord():
    """The folder of TFRecord files written by TensorFlow, beside the repository; the test skips,
    naming the folder, when it is absent (tf_written_tfrecord covers the same ground)."""
    if not SHARED_TFRECORD.is_dir():
        pytest.skip(f"{SHARED_TFRECORD} is missing (the TFRecord files of ../shared/data/tfrecord "
                    "beside the repository; CROUPIER_SHARED_TFRECORD may name another folder)")
    return SHARED_TFRECORD


@pytest.fixture(scope="session")
def tf_written_tfrecord(tmp_path_factory):
    """A folder of TFRecord files that the installed TensorFlow writes now (tf_records.py,
    write_tf_written_set: mixed, regression and detection records, and detection.jpg); the test
    skips with the reason when TensorFlow is not importable."""
    try:
        import tensorflow as tf
    except Exception as e:  # noqa: BLE001 (a broken install is as much a reason as a missing one)
        pytest.skip(f"tensorflow is not importable: {type(e).__name__}: {e}")
    from tf_records import write_tf_written_set
    out = tmp_path_factory.mktemp("tf_written")
    write_tf_written_set(tf, out)
    return out


# The tests that run croupier under the engines, launchers and installers users have: a Ray
# cluster, a real Slurm, horovodrun, the deploy recipes (torchrun, mpirun, Kubernetes manifests)
# and `pip install` into a new environment. They take about half of the Python tests' time, so
# `make test` leaves them out (pytest -m "not engines") and `make test-engines` runs them; CI runs
# both (.ci/run). croupier's own guarantees and its framework adapters (PyTorch, TensorFlow, JAX,
# MPI) are tested by `make test`.
ENGINE_TEST_FILES = frozenset({
    "test_deploy.py", "test_horovod.py", "test_install.py", "test_ray.py", "test_ray_autoscale.py", "test_recipes.py",
    "test_slurm.py",
})


# `make test-engines` runs them in two processes with pytest-xdist's `--dist loadgroup`: each
# file is one group, which one process runs whole (a file's tests share its cluster: one Ray or
# Slurm at a time per file), and the two Ray files are one group, since two Ray clusters at once do
# not fit on two cores.
ENGINE_GROUPS = {"test_ray.py": "ray", "test_ray_autoscale.py": "ray"}


# The tests marked `long` (15 s or more in `make test`'s --durations list) run first: `make test`
# hands the tests to its pytest processes one at a time (--maxschedchunk 1), so the long ones are
# spread over the processes at the start, and the short ones fill in around them. In collection
# order a 50-s test could start in the last minute and keep the run going after the others ended.
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    for item in items:
        if item.path.name in ENGINE_TEST_FILES:
            item.add_marker(pytest.mark.engines)
            item.add_marker(pytest.mark.xdist_group(
                ENGINE_GROUPS.get(item.path.name, item.path.stem)))
