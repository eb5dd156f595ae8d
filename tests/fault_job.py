"""The job the fault tests share (test_faults.py, test_faults_more.py, test_netns.py): its
settings, its dataset and its fault-free reference run. A test module imports the constants it
uses and both fixtures, which pytest then runs once per module."""
import pytest

from service_cluster import fault_free_run, synth_dataset

FEATURES = "id:int64,label:int64,image:bytes"
RECORDS, BATCH, WORLD, SEED = 3000, 16, 4, 7
STEPS = RECORDS // (BATCH * WORLD)  # per consumer per epoch


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """The records over 3 files; each record's `id` feature is its global record id."""
    return synth_dataset(tmp_path_factory.mktemp("fault-job") / "data", RECORDS)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, dataset):
    """A fault-free run: each rank's [(epoch, step, hash)]."""
    return fault_free_run(tmp_path_factory.mktemp("reference"), dataset, FEATURES, BATCH, WORLD,
                          SEED)
