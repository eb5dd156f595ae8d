# Types of the extension module croupier._croupier (pybind11, python/src/*.cc), for type
# checkers: every name the module defines, with the argument names and defaults of its bindings.
#
# Integer arguments are SupportsIndex, as pybind11 takes them: an int or a numpy integer, never a
# float. The dicts the module builds from the protobuf messages' JSON (Job.tokens, JobSpec
# fields) are TypedDicts of their keys; those and the aliases are the stub's
# own (their names begin with _: the module has no such name at runtime). Nothing here is Any: a value the
# binding takes whatever its type (a JobSpec's tokens, parsed and checked in C++) is object.
from typing import (Callable, Iterable, Iterator, Literal, Protocol, Sequence, SupportsIndex,
                    TypedDict, overload)

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer, NotRequired, Self, Unpack

# ---- py_io.cc: TFRecord files, record indexes, Megatron-LM indexed datasets

class TFRecordReader:
    """Iterates the records of a TFRecord file as bytes, checking both CRCs."""
    def __init__(self, path: str) -> None: ...
    def __iter__(self) -> TFRecordReader: ...
    def __next__(self) -> bytes: ...
    @property
    def record_offset(self) -> int: ...

def write_tfrecord(path: str, records: Iterable[bytes]) -> None: ...
def index_records(path: str, cache_dir: str = "") -> npt.NDArray[np.uint64]: ...

class IndexedDataset:
    def __init__(self, prefix: str) -> None: ...
    @property
    def prefix(self) -> str: ...
    @property
    def dtype(self) -> str: ...  # "uint16" or "int32"
    @property
    def num_documents(self) -> int: ...
    @property
    def num_tokens(self) -> int: ...
    @property
    def lengths(self) -> npt.NDArray[np.uint32]: ...
    def read(self, document: SupportsIndex, offset: SupportsIndex = 0,
             count: SupportsIndex = -1) -> npt.NDArray[np.int32]: ...

class IndexedDatasetWriter:
    def __init__(self, prefix: str, dtype: str = "int32") -> None: ...
    # One document: anything numpy makes a 1-d integer array of (a list, a numpy array).
    def add(self, tokens: npt.ArrayLike) -> None: ...
    def finish(self) -> None: ...
    @property
    def num_documents(self) -> int: ...
    @property
    def num_tokens(self) -> int: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, arg0: object, arg1: object, arg2: object) -> Literal[False]: ...

def write_indexed_dataset(prefix: str, documents: Iterable[npt.ArrayLike],
                          dtype: str = "int32") -> None: ...
def write_token_lengths(prefix: str, lengths: npt.ArrayLike) -> None: ...

# A feature of a parsed tf.train.Example: float32 or int64 values, or a bytes list.
_ExampleFeature = npt.NDArray[np.float32] | npt.NDArray[np.int64] | list[bytes]

def parse_example(serialized: bytes) -> dict[str, _ExampleFeature]: ...

# ---- py_plan.cc: epoch plans and the seed sequences of record_rng/batch_rng

def seed_sequence_words(entropy: Sequence[SupportsIndex],
                        n: SupportsIndex) -> npt.NDArray[np.uint32]: ...
def record_seeds(seed: SupportsIndex, epoch: SupportsIndex, ids: npt.ArrayLike,
                 kind: SupportsIndex) -> npt.NDArray[np.int64]: ...

class EpochPlan:
    def __init__(self, num_records: SupportsIndex, batch_size: SupportsIndex,
                 num_consumers: SupportsIndex, *, seed: SupportsIndex = 0,
                 epoch: SupportsIndex = 0, shuffle: str = "global", remainder: str = "drop",
                 block_size: SupportsIndex = 0, window_blocks: SupportsIndex = 0) -> None: ...
    @property
    def num_batches(self) -> int: ...
    @property
    def steps_per_consumer(self) -> int: ...
    @property
    def num_consumers(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    def record_at(self, position: SupportsIndex) -> int: ...
    def batch(self, g: SupportsIndex) -> npt.NDArray[np.uint64]: ...
    def consumer_of(self, g: SupportsIndex) -> int: ...
    def step_of(self, g: SupportsIndex) -> int: ...
    def global_batch(self, consumer: SupportsIndex, step: SupportsIndex) -> int: ...

# ---- py_batch.cc: batches and their columns

class BytesColumn:
    """One bytes column of a batch: `values` end to end, string i at
    values[offsets[i]:offsets[i + 1]]; both views of the batch buffer."""
    @property
    def values(self) -> npt.NDArray[np.uint8]: ...
    @property
    def offsets(self) -> npt.NDArray[np.int64]: ...
    @property
    def nbytes(self) -> int: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: SupportsIndex) -> bytes: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def tolist(self) -> list[bytes]: ...

# The values of one column of Batch.to_dict(): a numeric array of the feature's dtype
# [num_records, *shape] (its dtype is the job's, known only when the batch is read), bytes as a
# list (bytes_as="list") or a BytesColumn (bytes_as="buffer").
_ColumnValues = npt.NDArray[np.generic] | list[bytes] | BytesColumn
# A column: its values, or (values, row_splits) for a variable length.
_Column = _ColumnValues | tuple[_ColumnValues, npt.NDArray[np.uint64]]

class Batch:
    @property
    def num_records(self) -> int: ...
    @property
    def content_hash(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def buffer_address(self) -> int: ...
    def to_dict(self, bytes_as: str = "list") -> dict[str, _Column]: ...

class _Deferred(Protocol):
    """Values that batch_from_columns lets write themselves into the batch buffer
    (croupier.columns.Stacked)."""
    @property
    def nbytes(self) -> int: ...
    def fill_into(self, view: memoryview) -> None: ...

# A column handed to batch_from_columns and returned by a stream's feed: (name, dtype, variable length,
# dims, values, offsets (bytes), row_splits (variable length)); croupier.columns makes them.
_ColumnData = tuple[str, str, bool, Sequence[SupportsIndex], Buffer | _Deferred,
                   npt.ArrayLike | None, npt.ArrayLike | None]

def batch_from_columns(num_records: SupportsIndex, columns: list[_ColumnData],
                       allocate: Callable[[int], Buffer] | None = None) -> Batch: ...
def build_batch(records: Sequence[bytes], features: str) -> Batch: ...

# ---- py_job.cc: the job as the dispatcher holds it

class _WeightChange(TypedDict):
    first_step: int
    weights: list[float]

class _TextSourceSpec(TypedDict):
    source: int
    files: list[str]
    text_key: str
    tokenizer: str
    eod_id: int
    add_special_tokens: bool

class _TokenSpec(TypedDict):
    """proto/croupier.proto's TokenSpec, by its field names."""
    sources: list[str]
    sequence_length: int
    packing: str
    packing_window: int
    global_batch: int
    steps_per_epoch: int
    weights: list[_WeightChange]
    pad_id: int
    text: list[_TextSourceSpec]

class _TokenSourceInfo(TypedDict):
    prefix: str
    dtype: str
    num_documents: int
    num_tokens: int
    idx_bytes: int
    bin_bytes: int
    idx_crc32c: int
    padding_fraction: float
    text_bytes: list[int]
    tokenizer_crc32c: int

class _JobTokens(_TokenSpec):
    """Job.tokens: the job's TokenSpec and, per source, what the dispatcher found."""
    source_info: list[_TokenSourceInfo]

class _JobSpecDict(TypedDict):
    """job["spec"]: the settings by their JobSpec names, files as the user gave them."""
    name: str
    features: str
    batch_size: int
    seed: int
    shuffle: str
    block_size: int
    window_blocks: int
    remainder: str
    num_consumers: int
    num_epochs: int
    mode: str
    source: str
    source_batches_per_epoch: int
    source_count: int
    start_epoch: int
    start_batch: int
    compression: str
    num_records: int
    skip_failing_records: bool
    files: list[str]

class _JobDict(TypedDict):
    """Job.to_dict(): every attribute of a Job."""
    name: str
    source: str
    mode: str
    features: str
    batch_size: int
    num_consumers: int
    num_epochs: int
    seed: int
    shuffle: str
    remainder: str
    block_size: int
    window_blocks: int
    compression: str
    source_count: int
    source_batches_per_epoch: int
    start_epoch: int
    start_batch: int
    skip_failing_records: bool
    tokens: _JobTokens | None
    files: list[str]
    num_records: int
    batches_per_epoch: int
    steps_per_epoch: int
    batches_per_task: int
    state: str | None
    rank_positions: list[tuple[int, int, int]]

_StrKey = Literal["name", "source", "mode", "features", "shuffle", "remainder", "compression"]
_IntKey = Literal["batch_size", "num_consumers", "num_epochs", "seed", "block_size",
                  "window_blocks", "source_count", "source_batches_per_epoch", "start_epoch",
                  "start_batch", "num_records", "batches_per_epoch", "steps_per_epoch",
                  "batches_per_task"]

class Job:
    @staticmethod
    def from_json(info_json: str) -> Job: ...
    def to_json(self) -> str: ...
    def to_dict(self) -> _JobDict: ...
    def check_token_sources(self) -> None: ...
    # job[key]: the attribute `key`, job["spec"] the settings (for code written for the dicts).
    @overload
    def __getitem__(self, key: _StrKey) -> str: ...
    @overload
    def __getitem__(self, key: _IntKey) -> int: ...
    @overload
    def __getitem__(self, key: Literal["skip_failing_records"]) -> bool: ...
    @overload
    def __getitem__(self, key: Literal["tokens"]) -> _JobTokens | None: ...
    @overload
    def __getitem__(self, key: Literal["files"]) -> list[str]: ...
    @overload
    def __getitem__(self, key: Literal["state"]) -> str | None: ...
    @overload
    def __getitem__(self, key: Literal["rank_positions"]) -> list[tuple[int, int, int]]: ...
    @overload
    def __getitem__(self, key: Literal["spec"]) -> _JobSpecDict: ...
    def __eq__(self, other: object) -> bool: ...
    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def features(self) -> str: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def num_consumers(self) -> int: ...
    @property
    def num_epochs(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def shuffle(self) -> str: ...
    @property
    def remainder(self) -> str: ...
    @property
    def block_size(self) -> int: ...
    @property
    def window_blocks(self) -> int: ...
    @property
    def compression(self) -> str: ...
    @property
    def source_count(self) -> int: ...
    @property
    def source_batches_per_epoch(self) -> int: ...
    @property
    def start_epoch(self) -> int: ...
    @property
    def start_batch(self) -> int: ...
    @property
    def skip_failing_records(self) -> bool: ...
    @property
    def tokens(self) -> _JobTokens | None: ...
    @property
    def files(self) -> list[str]: ...
    @property
    def num_records(self) -> int: ...
    @property
    def batches_per_epoch(self) -> int: ...
    @property
    def steps_per_epoch(self) -> int: ...
    @property
    def batches_per_task(self) -> int: ...
    @property
    def state(self) -> str | None: ...
    @property
    def rank_positions(self) -> list[tuple[int, int, int]]: ...

# ---- py_job_spec.cc: a job's settings going in

class _JobSpecFields(TypedDict, total=False):
    """The keywords of JobSpec(...): proto/croupier.proto's JobSpec fields, the enums by name."""
    name: str
    files: Sequence[str]  # a str alone is taken as a list of one
    features: str
    batch_size: int
    seed: int
    shuffle: str
    block_size: int
    window_blocks: int
    remainder: str
    num_consumers: int
    num_epochs: int
    mode: str
    source: str
    source_batches_per_epoch: int
    source_count: int
    start_epoch: int
    start_batch: int
    compression: str
    num_records: int
    skip_failing_records: bool
    # A TokenSpec's fields (as _TokenSpec below; weights and text as lists of dicts), of any
    # type: the binding parses and checks them, naming a wrong one.
    tokens: dict[str, object]

class _JobSpecValues(TypedDict):
    """JobSpec.to_dict(): every field (64-bit values past 2**53 come as str, as JSON gives
    them); tokens only for a tokens job."""
    name: str
    files: list[str]
    features: str
    batch_size: int
    seed: int
    shuffle: str
    block_size: int
    window_blocks: int
    remainder: str
    num_consumers: int
    num_epochs: int
    mode: str
    source: str
    source_batches_per_epoch: int
    source_count: int
    start_epoch: int
    start_batch: int
    compression: str
    num_records: int
    skip_failing_records: bool
    tokens: NotRequired[_TokenSpec]

class JobSpec:
    def __init__(self, **kwargs: Unpack[_JobSpecFields]) -> None: ...
    @staticmethod
    def from_json(json: str) -> JobSpec: ...
    def normalized(self) -> JobSpec: ...
    def to_json(self) -> str: ...
    def to_dict(self) -> _JobSpecValues: ...
    def __eq__(self, other: object) -> bool: ...
    # The fields read back as attributes (through the spec's JSON, as to_dict() gives them).
    name: str
    files: list[str]
    features: str
    batch_size: int
    seed: int
    shuffle: str
    block_size: int
    window_blocks: int
    remainder: str
    num_consumers: int
    num_epochs: int
    mode: str
    source: str
    source_batches_per_epoch: int
    source_count: int
    start_epoch: int
    start_batch: int
    compression: str
    num_records: int
    skip_failing_records: bool
    tokens: _TokenSpec  # AttributeError when the spec has no tokens

# ---- py_service.cc: consumer, stream producer, control-plane calls, feature specs

def set_log_fd(fd: SupportsIndex) -> None: ...

class _Consumer:
    def __init__(self, dispatcher: str, job: str, rank: SupportsIndex, world: SupportsIndex,
                 auth_token: str, prefetch_batches: SupportsIndex, prefetch_bytes: SupportsIndex,
                 timeout: float, resume: bool) -> None: ...
    def start_epoch(self, epoch: SupportsIndex, step: SupportsIndex = 0) -> None: ...
    def next(self) -> Batch | None: ...
    @property
    def position(self) -> tuple[int, int]: ...  # (epoch, step)
    @property
    def registered_position(self) -> tuple[int, int]: ...
    @property
    def done_at_registration(self) -> bool: ...
    def close(self) -> None: ...

class JobSources:
    def __init__(self, job: Job) -> None: ...
    def source_of(self, epoch: SupportsIndex, batch: SupportsIndex) -> int: ...
    def ordinal(self, epoch: SupportsIndex, batch: SupportsIndex) -> int: ...
    def last_task_end(self, source: SupportsIndex) -> tuple[int, int] | None: ...

def create_job(dispatcher: str, spec_json: str, exist_ok: bool, auth_token: str,
               timeout: float) -> Job: ...
# (the status as JSON without its jobs, and without its producers, consumers and rank positions
# with omit_clients; [each job] with include_job_info, else []).
def dispatcher_status(dispatcher: str, auth_token: str, timeout: float,
                      include_job_info: bool = False,
                      omit_clients: bool = False) -> tuple[str, list[Job]]: ...
def get_job(dispatcher: str, name: str, auth_token: str, timeout: float) -> Job: ...
def delete_job(dispatcher: str, name: str, force: bool, auth_token: str,
               timeout: float) -> str: ...  # DeleteJobResponse as JSON

# A feature as [(name, dtype, shape)]; shape None for a variable length.
def parse_feature_spec(text: str) -> list[tuple[str, str, list[int] | None]]: ...
def format_feature_spec(
        features: Sequence[tuple[str, str, Sequence[SupportsIndex] | None]]) -> str: ...

NUMERIC_DTYPES: tuple[str, ...]

# ---- py_producer.cc: the producer of one job

# make(epoch, batch, record ids): the Batch, or (code, message) for an error of that code.
_MakeBatch = Callable[[int, int, npt.NDArray[np.uint64]], Batch | tuple[int, str]]
# tokenize(source, documents): (tokens int32, each document's length), or (code, message).
_Tokenize = Callable[[int, npt.NDArray[np.uint64]],
                    tuple[npt.ArrayLike, npt.ArrayLike] | tuple[int, str]]
# feed(epoch, batch): (num_records, columns), or (code, message).
_Feed = Callable[[int, int], tuple[int, list[_ColumnData]] | tuple[int, str]]

class _Served(TypedDict):
    job_ended: bool
    drained: tuple[int, int] | None  # (tasks kept, tasks served)
    batches_served: int

class _Producer:
    @staticmethod
    def records(dispatcher: str, job: str, auth_token: str, threads: SupportsIndex,
                buffer_bytes: SupportsIndex, max_tasks: SupportsIndex, bind: str,
                advertise_host: str, timeout: float,
                make: _MakeBatch | _WorkerPool, metrics_port: SupportsIndex = -1) -> _Producer: ...
    @staticmethod
    def tokens(dispatcher: str, job: str, auth_token: str, threads: SupportsIndex,
               buffer_bytes: SupportsIndex, max_tasks: SupportsIndex, bind: str,
               advertise_host: str, timeout: float, tokenize: _Tokenize,
               metrics_port: SupportsIndex = -1) -> _Producer: ...
    @staticmethod
    def stream(dispatcher: str, job: str, auth_token: str, buffer_bytes: SupportsIndex,
               bind: str, advertise_host: str, timeout: float, source_index: SupportsIndex,
               feed: _Feed) -> _Producer: ...
    @property
    def data_address(self) -> str: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def metrics_port(self) -> int: ...  # 0 without metrics
    # owner(): 0 serve, 1 drain, 2 leave at once.
    def run(self, owner: Callable[[], int], leave_now: Callable[[], bool] | None = None,
            dispatcher_timeout: float = 120.0, drain_timeout: float = 5.0,
            early_end_grace: float = 10.0) -> _Served: ...
    def close(self) -> None: ...

# ---- py_worker_pool.cc: a map job's worker processes

class _WorkerPool:
    # spawn(index): (pid, fd) of a new worker, or why none can be made; bury(pid): how it ended;
    # on_death(line); gone(): why the workers are gone, or None; batch_timeout: seconds a worker
    # has to answer a batch before it is killed and replaced (None: no limit).
    def __init__(self, workers: SupportsIndex, max_deaths: SupportsIndex, window: float,
                 spawn: Callable[[int], tuple[int, int] | str], bury: Callable[[int], str],
                 on_death: Callable[[str], None], gone: Callable[[], str | None],
                 batch_timeout: float | None = None) -> None: ...
    def make(self, epoch: SupportsIndex, batch: SupportsIndex,
             ids: npt.ArrayLike) -> Batch | tuple[int, str]: ...
    @property
    def broken(self) -> str | None: ...
    @property
    def pids(self) -> list[int]: ...
    def close(self) -> None: ...

def keep_freed_memory_for_reuse() -> None: ...

# ---- py_test_cluster.cc: the in-process cluster (croupier.testing)

class InProcessCluster:
    def __init__(self, *, producers: SupportsIndex = 1, heartbeat_interval_ms: SupportsIndex = 100,
                 producer_timeout_ms: SupportsIndex = 1000,
                 consumer_timeout_ms: SupportsIndex = 5000, rounds_per_task: SupportsIndex = 0,
                 shm: bool = True, threads: SupportsIndex = 2,
                 job_retention_ms: SupportsIndex = 0, metrics_port: SupportsIndex = -1) -> None: ...
    @property
    def address(self) -> str: ...  # the dispatcher's gRPC server, 127.0.0.1:port
    @property
    def metrics_port(self) -> int: ...  # its HTTP server's port, 0 without one
    @property
    def dir(self) -> str: ...
    @property
    def num_producers(self) -> int: ...
    def add_producer(self) -> int: ...
    def producer_address(self, index: SupportsIndex) -> str: ...
    def stop_producer(self, index: SupportsIndex) -> None: ...
    def close(self) -> None: ...

# ---- py_object_store.cc: S3 reads for the Python sources (croupier.object_store)

class _ObjectStore:
    def __init__(self) -> None: ...
    # (path, size, etag) of every object the pattern names, sorted; empty when none.
    def list(self, pattern: str) -> list[tuple[str, int, str]]: ...
    def read(self, path: str, size: SupportsIndex, etag: str, offset: SupportsIndex,
             length: SupportsIndex) -> bytes: ...
    def stats(self) -> dict[str, int]: ...

def _s3_process_stats() -> dict[str, int]: ...
# The reads of this process and its later forks through copies in `directory` ("": off); the
# capacity in bytes (CROUPIER_S3_SHARED_READ_BYTES, at most `most`), 0 when off.
def _s3_share_reads(directory: str, most: SupportsIndex) -> int: ...
