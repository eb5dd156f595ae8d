"""A batch as columns: a dict {feature name: array} checked and laid out for the C++ library.

columns_of() is the one reading of a batch given by Python code (a served batch, croupier.serve;
a map job's transformed records, croupier.map.pipeline): numeric arrays of a dtype croupier carries,
torch and TensorFlow tensors converted, bytes as lists or croupier.BytesColumn, (values,
row_splits) for a variable length. features_of() names a batch's feature spec, make_batch() makes
a croupier.Batch of it, and default_collate() stacks a map job's records into such a dict.
"""
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from croupier import _croupier, errors
from croupier.errors import BatchError

# The numeric dtypes a batch carries, by the names that numpy and croupier both give them, as the
# C++ library lists them (bfloat16 is ml_dtypes.bfloat16, the type TensorFlow and JAX use too).
_NUMERIC: Tuple[str, ...] = tuple(_croupier.NUMERIC_DTYPES)


def tensor_to_numpy(value: Any, name: str) -> np.ndarray:
    """A torch or TensorFlow (eager) tensor as a numpy array of its own dtype."""
    if type(value).__module__.startswith("torch"):
        import torch
        value = value.detach()
        if value.dtype == torch.bfloat16:  # numpy has no bfloat16: reinterpret the bits
            import ml_dtypes
            bits: np.ndarray = value.view(torch.int16).numpy()
            return bits.view(ml_dtypes.bfloat16)
    try:
        if type(value).__name__ == "EagerTensor":  # dense TensorFlow: a view, not numpy()'s copy
            return np.asarray(value)
        array: np.ndarray = value.numpy()
        return array
    except TypeError as e:
        raise errors.InvalidArgumentError(
            f"feature '{name}' is a tensor of dtype {value.dtype}, which croupier cannot carry "
            f"({e})") from None


def _as_array(value: Any, name: str) -> np.ndarray:
    """A numpy array (torch and TensorFlow tensors are converted), numeric of a dtype in _NUMERIC,
    or of strings or objects (bytes)."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = tensor_to_numpy(value, name)  # torch.Tensor, tf.Tensor (eager)
    arr = np.asarray(value)
    if arr.dtype.kind in "SOU":
        return arr
    if not arr.dtype.isnative:  # the batch is little-endian, like every machine croupier runs on
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype.name not in _NUMERIC:
        raise errors.InvalidArgumentError(
            f"feature '{name}' has dtype {arr.dtype}, which croupier cannot carry (bytes, "
            f"{', '.join(_NUMERIC)})")
    return np.ascontiguousarray(arr)


def _bytes_list(arr: np.ndarray, name: str) -> List[bytes]:
    out = []
    for v in arr.reshape(-1):
        if isinstance(v, bytes):
            out.append(v)
        elif isinstance(v, str):
            out.append(v.encode())
        else:
            raise errors.InvalidArgumentError(f"feature '{name}' mixes bytes with {type(v)}")
    return out


def _agreed(num_records: Any, n: int, name: Any) -> int:
    """The batch's record count once feature `name` says it holds `n` records: the same as the
    features before it (num_records, or None for the first)."""
    if num_records is not None and n != num_records:
        raise errors.InvalidArgumentError(
            f"feature '{name}' has {n} records, another feature {num_records}")
    return n


def columns_of(batch: Dict[str, Any]) -> Tuple[int, List[Tuple[Any, ...]]]:
    """(num_records, [(name, dtype, variable, dims, values, offsets, splits)]) for one batch."""
    if not isinstance(batch, dict):
        raise errors.InvalidArgumentError(
            f"a served batch must be a dict of feature name -> array, not {type(batch).__name__}"
            " (for a tuple, map it to a dict, e.g. lambda x, y: {'x': x, 'y': y})")
    if not batch:
        raise errors.InvalidArgumentError("a served batch has no features")
    columns: List[Tuple[Any, ...]] = []
    num_records = None
    for name, value in batch.items():
        splits = None
        if isinstance(value, tuple) and len(value) == 2:  # (values, row_splits): variable length
            value, splits = value
            splits = np.ascontiguousarray(np.asarray(splits), dtype=np.uint64)
            n = len(splits) - 1
        if isinstance(value, _croupier.BytesColumn):  # one string per record, as received
            if splits is None:
                n = len(value)
            num_records = _agreed(num_records, n, name)
            columns.append((str(name), "bytes", splits is not None, [], value.values,
                            value.offsets.astype(np.uint64), splits))
            continue
        if isinstance(value, Stacked) and splits is None and value.dtype.name in _NUMERIC:
            n = value.shape[0]
            num_records = _agreed(num_records, n, name)
            columns.append((str(name), value.dtype.name, False, list(value.shape[1:]), value,
                            None, None))
            continue
        if isinstance(value, list) and value and isinstance(value[0], (bytes, str)):
            value = np.array(value, dtype=object)
        arr = _as_array(value, name)
        if splits is None:
            if arr.ndim == 0:
                raise errors.InvalidArgumentError(
                    f"feature '{name}' is a scalar; every feature needs a leading batch dimension")
            n = arr.shape[0]
        num_records = _agreed(num_records, n, name)
        dims = [] if splits is not None else list(arr.shape[1:])
        if arr.dtype.kind in "SOU":
            strings = _bytes_list(arr, name)
            offsets = np.zeros(len(strings) + 1, dtype=np.uint64)
            np.cumsum([len(s) for s in strings], out=offsets[1:])
            columns.append((str(name), "bytes", splits is not None, dims, b"".join(strings),
                            offsets, splits))
        else:
            values = arr.reshape(-1)
            if arr.dtype.name == "bfloat16":  # no buffer protocol for it: hand over its bits
                values = values.view(np.uint16)
            columns.append((str(name), arr.dtype.name, splits is not None, dims, values, None,
                            splits))
    if num_records is None:  # unreachable: a batch has features (checked above)
        raise errors.InvalidArgumentError("a served batch has no features")
    return num_records, columns


def features_of(batch: Dict[str, Any]) -> str:
    """The feature spec text that describes `batch` (a dict of arrays)."""
    _, columns = columns_of(batch)
    return str(_croupier.format_feature_spec(
        [(name, dtype, None if variable else list(dims))
         for name, dtype, variable, dims, *_ in columns]))


def make_batch(batch: Dict[str, Any]) -> _croupier.Batch:
    """A croupier.Batch holding a copy of `batch` (a dict of arrays)."""
    num_records, columns = columns_of(batch)
    return _croupier.batch_from_columns(num_records, columns)


def _as_value(value: Any, name: str) -> Any:
    """A numpy array for tensors (torch, TensorFlow eager), else the value."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return tensor_to_numpy(value, name)
    return value


class Stacked:
    """A fixed-shape column whose records are not stacked yet: columns_of() hands it to the batch
    layout as deferred values, and fill_into() stacks the records straight into the batch buffer,
    so that no stacked array is made in between (one copy of the records, not two)."""

    def __init__(self, arrays: List[np.ndarray]) -> None:
        self.arrays = arrays
        a0 = arrays[0]
        self.dtype = a0.dtype if a0.dtype.isnative else a0.dtype.newbyteorder("=")
        self.shape = (len(arrays),) + a0.shape
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def fill_into(self, view: memoryview) -> None:
        out = np.frombuffer(view, dtype=self.dtype).reshape(self.shape)
        np.stack(self.arrays, out=out)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        stacked = np.stack(self.arrays)
        return stacked if dtype is None else stacked.astype(dtype)


def default_collate(records: Sequence[Any], names: Optional[Sequence[str]] = None,
                    variable: Iterable[str] = (), stack: bool = True) -> Dict[str, Any]:
    """croupier's collation of records into a batch dict {name: column}.

    A record is a dict {name: value} (or a tuple/list, named by `names`). Per feature:
    bytes or str values make a bytes column; numbers and numpy arrays (tensors are converted)
    are stacked as [num_records, *shape] in their own dtype, and every record must have the same
    shape and dtype; Python lists make a variable-length column ((values, row_splits)), as do
    the values of the features named in `variable` (those the job's spec says are [*]), whatever
    their lengths. With stack=False, a fixed-shape numeric column is a Stacked, whose records
    are stacked straight into the batch buffer when the batch is laid out."""
    if not records:
        raise BatchError("a batch has no records")
    first = records[0]
    if not isinstance(first, dict):
        if names is None or not isinstance(first, (tuple, list)):
            raise BatchError(
                f"a record is a {type(first).__name__}; croupier collates dicts of feature name -> "
                "value (or tuples, with names=('image', 'label') given to produce())")
        records = [dict(zip(names, r)) for r in records]
        first = records[0]
    batch: Dict[str, Any] = {}
    for name in first:
        values = []
        for k, r in enumerate(records):
            if not isinstance(r, dict) or name not in r:
                raise BatchError(f"feature '{name}': missing from the batch's record {k}")
            values.append(_as_value(r[name], name))
        v0 = values[0]
        if isinstance(v0, (bytes, str)):
            batch[name] = [v if isinstance(v, bytes) else str(v).encode() for v in values]
        elif isinstance(v0, list) or name in variable:
            # The dtype of the values (numpy scalars keep theirs), not float64 for an empty list.
            dtype = next((np.asarray(v).dtype for v in values if len(v)), None)
            arrays = [np.asarray(v, dtype=dtype) for v in values]
            lengths = np.array([a.size for a in arrays], dtype=np.uint64)
            splits = np.zeros(len(arrays) + 1, dtype=np.uint64)
            np.cumsum(lengths, out=splits[1:])
            batch[name] = (np.concatenate([a.reshape(-1) for a in arrays]) if arrays else
                           np.zeros(0), splits)
        else:
            arrays = [np.asarray(v) for v in values]
            a0 = arrays[0]
            for k, a in enumerate(arrays):
                if a.shape != a0.shape or a.dtype != a0.dtype:
                    raise BatchError(
                        f"feature '{name}': the batch's record {k} is {a.dtype}{list(a.shape)}, "
                        f"its record 0 {a0.dtype}{list(a0.shape)}; every record of a feature "
                        "needs one dtype and shape (a Python list makes a variable length)")
            batch[name] = np.stack(arrays) if stack else Stacked(arrays)
    return batch
