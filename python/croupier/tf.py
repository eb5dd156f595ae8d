"""TensorFlow adapter: a croupier job as a tf.data.Dataset (docs/tensorflow.md).

The native op (built where TensorFlow was installed at build time):

    import croupier.tf
    ds = croupier.tf.dataset("HOST:5050", "train")   # rank and world from TF_CONFIG
    model.fit(ds, epochs=3)                            # each iteration of ds reads the next epoch

The from_generator fallback, through a croupier.Consumer:

    feed = croupier.Consumer("HOST:5050", "train")
    for epoch in range(epochs):
        for batch in croupier.tf.generator_dataset(feed, epoch):   # {name: tf.Tensor}
            ...

Elements are dicts {feature: tensor} after the job's feature spec: fixed shapes are dense tensors
[batch, *shape], each of its feature's dtype (bool, int8 ... uint64, float16, bfloat16, float32,
float64; bytes are tf.string), and variable lengths are tf.RaggedTensor. The op hands
TensorFlow the numeric arrays of the received buffer without a copy; from_generator copies them.
"""
import ctypes
import os
import pathlib
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from croupier import _croupier, client, errors
from croupier.job import Job
from croupier.launcher import detect_rank_world

if TYPE_CHECKING:
    from croupier.consumer import Consumer

# Each dtype of a feature spec as the tf dtype of the same bytes.
_DTYPES = {"bytes": tf.string, "bool": tf.bool, "int8": tf.int8, "int16": tf.int16,
           "int32": tf.int32, "int64": tf.int64, "uint8": tf.uint8, "uint16": tf.uint16,
           "uint32": tf.uint32, "uint64": tf.uint64, "float16": tf.float16,
           "bfloat16": tf.bfloat16, "float32": tf.float32, "float64": tf.float64}


def output_signature(features: str) -> Dict[str, Any]:
    """{name: TensorSpec or RaggedTensorSpec} for a feature spec text such as
    "image:bytes,label:int64,emb:float32[16],tokens:int64[*],mask:bool[*],x:bfloat16[8]": each
    dtype as its tf dtype (bytes: tf.string, float16: tf.float16, bfloat16: tf.bfloat16, ...)."""
    signature = {}
    for name, dtype, shape in _croupier.parse_feature_spec(features):
        if shape is None:
            signature[name] = tf.RaggedTensorSpec([None, None], _DTYPES[dtype], ragged_rank=1,
                                                  row_splits_dtype=tf.int64)
        else:
            signature[name] = tf.TensorSpec([None, *shape], _DTYPES[dtype])
    return signature


def _to_tf(batch: Dict[str, Any], signature: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    for name, spec in signature.items():
        value = batch[name]
        if isinstance(spec, tf.RaggedTensorSpec):
            values, splits = value
            if spec.dtype == tf.string:
                values = np.array(values, dtype=object)
            out[name] = tf.RaggedTensor.from_row_splits(values, splits.astype(np.int64),
                                                        validate=False)
        elif spec.dtype == tf.string:
            arr = np.array(value, dtype=object)
            out[name] = arr.reshape([-1, *spec.shape[1:]])
        else:
            out[name] = value
    return out


def generator_dataset(consumer: "Consumer", epoch: int) -> Any:
    """The batches of `epoch` from a croupier.Consumer (one rank) as a tf.data.Dataset of dicts.

    The dataset reads the consumer when it is iterated; iterate it once per epoch."""
    signature = output_signature(consumer.job.features)

    def generate() -> Iterator[Dict[str, Any]]:
        for batch in consumer.epoch(epoch):
            yield _to_tf(batch, signature)

    return tf.data.Dataset.from_generator(generate, output_signature=signature)


# --- the native op ------------------------------------------------------------------------------
_OP_PATH = pathlib.Path(__file__).resolve().parent / "_croupier_tf_op.so"
_op_lock = threading.Lock()
_op_module = None

_TF_ERRORS = {
    "CANCELLED": tf.errors.CancelledError, "UNKNOWN": tf.errors.UnknownError,
    "INVALID_ARGUMENT": tf.errors.InvalidArgumentError,
    "DEADLINE_EXCEEDED": tf.errors.DeadlineExceededError, "NOT_FOUND": tf.errors.NotFoundError,
    "ALREADY_EXISTS": tf.errors.AlreadyExistsError,
    "PERMISSION_DENIED": tf.errors.PermissionDeniedError,
    "RESOURCE_EXHAUSTED": tf.errors.ResourceExhaustedError,
    "FAILED_PRECONDITION": tf.errors.FailedPreconditionError, "ABORTED": tf.errors.AbortedError,
    "OUT_OF_RANGE": tf.errors.InvalidArgumentError,  # OUT_OF_RANGE reads as "end" in tf.data
    "UNIMPLEMENTED": tf.errors.UnimplementedError, "INTERNAL": tf.errors.InternalError,
    "UNAVAILABLE": tf.errors.UnavailableError, "DATA_LOSS": tf.errors.DataLossError,
    "UNAUTHENTICATED": tf.errors.UnauthenticatedError,
}


def _tf_error(e: Exception) -> Exception:
    """The tf.errors exception for a croupier.errors.Error, with croupier's message."""
    cls = _TF_ERRORS.get(getattr(e, "code", "UNKNOWN"), tf.errors.UnknownError)
    error: Exception = cls(None, None, str(e))
    return error


def op_available() -> bool:
    """Whether the native op was built (croupier/_croupier_tf_op.so beside this file)."""
    return _OP_PATH.exists()


def _load_op() -> Any:
    """Loads the op library once and hands it croupier._croupier's consumer table."""
    global _op_module
    with _op_lock:
        if _op_module is None:
            if not _OP_PATH.exists():
                raise tf.errors.NotFoundError(
                    None, None,
                    f"the croupier TensorFlow op was not built ({_OP_PATH} is missing): build "
                    "croupier where TensorFlow is installed (docs/tensorflow.md), or use "
                    "croupier.tf.generator_dataset")
            try:
                module = tf.load_op_library(str(_OP_PATH))
            except (tf.errors.NotFoundError, OSError) as e:
                raise tf.errors.FailedPreconditionError(
                    None, None,
                    f"{_OP_PATH} does not load into TensorFlow {tf.__version__} ({e}): it is "
                    "built for the TensorFlow installed at build time; rebuild croupier "
                    "(docs/tensorflow.md)") from None
            api = ctypes.CDLL(_croupier.__file__).croupier_consumer_api
            api.restype = ctypes.c_void_p
            setter = ctypes.CDLL(str(_OP_PATH)).croupier_tf_set_consumer_api
            setter.argtypes = [ctypes.c_void_p]
            if setter(api()) != 0:
                raise tf.errors.FailedPreconditionError(
                    None, None, f"{_OP_PATH} and {_croupier.__file__} are of different builds")
            _op_module = module
        return _op_module


def _job_info(dispatcher: str, job: str, auth_token: Optional[str], timeout: float) -> Job:
    """The job, asked of the dispatcher for this job alone (GetJob)."""
    try:
        return client.get_job(dispatcher, job, auth_token=auth_token, timeout=timeout)
    except errors.NotFoundError:
        raise tf.errors.NotFoundError(
            None, None, f"no job {job!r} at the dispatcher {dispatcher}") from None
    except errors.Error as e:
        raise _tf_error(e) from None


def _job_features(dispatcher: str, job: str, auth_token: Optional[str], timeout: float) -> str:
    return _job_info(dispatcher, job, auth_token, timeout).features


def _job_steps(dispatcher: str, job: str, auth_token: Optional[str], timeout: float) -> int:
    """A dealt job's steps per epoch for each rank (0: not dealt)."""
    return _job_info(dispatcher, job, auth_token, timeout).steps_per_epoch


class _CroupierDataset(tf.data.Dataset):
    """The op's dataset: {feature: tensor, or (values, row_splits) for a variable length}."""

    def __init__(self, variant: Any, element_spec: Any) -> None:
        self._spec = element_spec
        self._variant_tensor_attr = variant
        super().__init__(variant)

    def _inputs(self) -> List[Any]:
        return []

    @property
    def element_spec(self) -> Any:
        return self._spec


def dataset(dispatcher: str, job: str, rank: Optional[int] = None, world: Optional[int] = None,
            *, epoch: Optional[int] = None, auth_token: Optional[str] = None,
            timeout: float = 60.0, prefetch: int = 0, prefetch_bytes: int = 256 << 20,
            resume: bool = True, start: Optional[Tuple[int, int]] = None) -> Any:
    """Rank `rank` of `world` of croupier job `job` as a tf.data.Dataset of {feature: tensor},
    read by the native op (a C++ dataset kernel over croupier's consumer library).

    rank and world come from the launcher's environment when not given (TF_CONFIG,
    OMPI_COMM_WORLD_*, ...; croupier.launcher). The dataset holds the rank from its creation until
    it (and every iterator of it) is gone.

    epoch=None: each iteration of the dataset (each iter(), each Keras epoch, each repetition of
    .repeat()) reads the next epoch, the first one starting where the dispatcher registered the
    rank (its last acknowledged position: (0, 0) for a new job). epoch=E: every iteration reads
    epoch E. With resume=True (as croupier.Consumer) the first iteration starts at the rank's
    registered position and an epoch before it is empty; resume=False starts at (0, 0). A newer
    iterator takes the rank over from older ones, which then fail with FailedPreconditionError.
    start=(epoch, step) starts the first iteration there instead: the position of a trainer's own
    checkpoint (keras_backup_position reads it from Keras's BackupAndRestore), exact where the
    dispatcher's registered position may be up to a second of batches behind.
    A bounded job's iteration past its last epoch is empty (epoch=None) or an
    InvalidArgumentError (epoch=E). A dealt job's cardinality is its steps per epoch.

    The iterator saves and restores the position (epoch, step) with tf.train.Checkpoint.
    Errors are tf.errors exceptions carrying croupier's message. Auto-sharding is off: each
    worker's dataset already holds only its own batches.
    """
    try:
        rank, world = detect_rank_world(rank, world)
    except errors.Error as e:
        raise _tf_error(e) from None
    op = _load_op()
    features = _job_features(dispatcher, job, auth_token, timeout)
    signature = output_signature(features)
    names = sorted(signature)  # the order tf.nest flattens a dict in
    raw_spec, ragged, types, shapes = {}, [], [], []
    for name in names:
        spec = signature[name]
        if isinstance(spec, tf.RaggedTensorSpec):
            values = tf.TensorSpec([None], spec.dtype)
            splits = tf.TensorSpec([None], tf.int64)
            raw_spec[name] = (values, splits)
            ragged.append(True)
            types += [values.dtype, splits.dtype]
            shapes += [values.shape, splits.shape]
        else:
            raw_spec[name] = spec
            ragged.append(False)
            types.append(spec.dtype)
            shapes.append(spec.shape)
    variant = op.croupier_dataset(
        dispatcher=dispatcher, job=job, rank=rank, world=world,
        epoch=-1 if epoch is None else int(epoch), auth_token=auth_token or "",
        timeout_seconds=float(timeout), prefetch_batches=int(prefetch),
        prefetch_bytes=int(prefetch_bytes), resume=bool(resume), state_id=0,
        start_epoch=-1 if start is None else int(start[0]),
        start_step=-1 if start is None else int(start[1]), features=names, ragged=ragged,
        output_types=types, output_shapes=shapes)
    ds = _CroupierDataset(variant, raw_spec)
    if any(ragged):
        ragged_names = [n for n, r in zip(names, ragged) if r]

        def assemble(element: Dict[str, Any]) -> Dict[str, Any]:
            out = dict(element)
            for n in ragged_names:
                values, splits = element[n]
                out[n] = tf.RaggedTensor.from_row_splits(values, splits, validate=False)
            return out

        ds = ds.map(assemble)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options)


def keras_backup_position(backup_dir: Union[str, "os.PathLike[str]"],
                          steps_per_epoch: int) -> Optional[Tuple[int, int]]:
    """(epoch, step) at which Keras 2's fit resumes from tf.keras.callbacks.BackupAndRestore(
    backup_dir), or None when there is no backup yet: the step after the last saved batch (the
    next epoch after its last step, or after an epoch-end backup), as tf_keras computes it."""
    path = tf.train.latest_checkpoint(os.path.join(backup_dir, "chief"))
    if path is None:
        return None
    reader = tf.train.load_checkpoint(path)
    try:
        epoch = int(reader.get_tensor("ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"))
        batch = int(reader.get_tensor("ckpt_saved_batch/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.NotFoundError, ValueError) as e:
        raise tf.errors.InvalidArgumentError(
            None, None, f"{path} is not a Keras BackupAndRestore checkpoint: {e}") from None
    if epoch < 0:
        return None
    if batch < 0 or batch >= steps_per_epoch - 1:
        return epoch + 1, 0
    return epoch, batch + 1


def keras_fit_inputs(strategy: Any, dispatcher: str, job: str,
                     map_fn: Optional[Callable[..., Any]] = None,
                     backup_dir: Union[str, "os.PathLike[str]", None] = None,
                     **dataset_options: Any) -> Dict[str, Any]:
    """The arguments of Keras's model.fit for `strategy` (MultiWorkerMirroredStrategy, one rank
    per worker): {"x": a distributed dataset of this worker's rank, "steps_per_epoch": the job's
    steps per epoch}, so that Keras epoch e reads croupier epoch e whole, and each step trains on
    each worker's own batch. Use model.fit(**keras_fit_inputs(...), epochs=E, callbacks=...).

    map_fn maps each element {feature: tensor} to what the model takes, e.g. (x, y). With
    backup_dir (that of the fit's tf.keras.callbacks.BackupAndRestore), a restarted trainer's
    dataset starts exactly where Keras resumes (keras_backup_position), mid-epoch included. Other
    arguments are those of dataset(). tf.keras must be Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1):
    Keras 3's fit does not run under MultiWorkerMirroredStrategy (docs/tensorflow.md).

    Why not model.fit(dataset(...)): Keras hands a plain dataset to
    strategy.experimental_distribute_dataset, which takes each worker's batch for a global one
    and rebatches it (a worker trained on 4 of its 16 records a step, in a test of 4 workers);
    a distributed dataset keeps the batches whole,
    but Keras then wants steps_per_epoch and keeps one iterator for every epoch. This gives both:
    the dataset repeats (each repetition the next croupier epoch) and the steps are the job's."""
    steps: List[int] = []

    def dataset_fn(context: Any) -> Any:
        options = dict(dataset_options)
        if backup_dir is not None:
            start = keras_backup_position(backup_dir, _job_steps(
                dispatcher, job, options.get("auth_token"), options.get("timeout", 60.0)))
            if start is not None:
                options["start"] = start
        ds = dataset(dispatcher, job, **options)
        steps.append(int(ds.cardinality()))
        if map_fn is not None:
            ds = ds.map(map_fn)
        return ds.repeat()

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    if not steps or steps[0] < 0:
        raise tf.errors.FailedPreconditionError(
            None, None, f"croupier job {job!r} has no fixed steps per epoch (not a dealt job): "
            "Keras needs them for a distributed dataset")
    return {"x": dist, "steps_per_epoch": steps[0]}
