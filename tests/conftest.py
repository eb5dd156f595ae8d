import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED_TFRECORD = ROOT.parent / "shared" / "data" / "tfrecord"


@pytest.fixture
def shared_tfrecord():
    """The folder of TFRecord files written by TensorFlow, beside the repository."""
    if not SHARED_TFRECORD.is_dir():
        pytest.fail(f"{SHARED_TFRECORD} is missing: the tests read TensorFlow-written files there")
    return SHARED_TFRECORD
