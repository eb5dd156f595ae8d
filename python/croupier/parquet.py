"""Parquet files as an addressable source of a map job (croupier.produce).

    source = croupier.parquet.ParquetSource("data/*.parquet", columns=["image", "label"])
    croupier.produce(source, "HOST:5050", "train", batch_size=64, consumers=4, epochs=3)

Files may be objects: `s3://bucket/key` paths and globs, read through croupier's own S3 client
(croupier.object_store: the producers' environment, retries, errors and croupier_s3_* counters): a
file's footer and then each row group it reads come by ranged GETs (a row group's column chunks in
one GET where they lie together), never the whole object.

Record i is row i of the files taken in sorted path order. A row is found through the files'
row groups (their row counts are read from the footers at start), and get_many reads each row
group a batch touches once, keeping the last few decoded row groups: a plan that reads in order
(shuffle "none", or "blocks" with blocks of about a row group) decodes each row group about once
an epoch; "global" may decode a row group per record when the files hold many row groups. The
row groups of objects that one batch needs are fetched side by side (up to FETCHES_AT_ONCE), so
that a batch touching several waits for about one round trip to the store, not one each. In a
map producer with worker processes, a row group one worker fetched is read by the others from
the producer's copy on /dev/shm, not fetched again (croupier.map.cache_dirs.shared_reads).

Per column: numbers come as numpy scalars of the column's own type (int8 ... uint64, float16,
float32, float64, bool); binary and string as bytes; a list column as a Python list of numpy
scalars (a variable-length feature); a fixed-size list as a numpy array (a fixed shape).
"""
import bisect
import collections
import concurrent.futures
import glob
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from croupier import errors, object_store

__all__ = ["ParquetSource"]

# The row groups of one batch read at once from an object store, each on a thread of its own: a
# batch of a "blocks" or "global" shuffle touches several, each a round trip to the store.
FETCHES_AT_ONCE = 8


def _expand(files: Any, store: object_store.ObjectStore) -> List[Union[str, object_store.Object]]:
    """The files `files` names: local paths, and the objects of s3:// patterns."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    found: List[Union[str, object_store.Object]] = []
    for f in files:
        f = os.fspath(f)
        if object_store.is_s3(f):
            found.extend(store.expand(f))
            continue
        matches = sorted(glob.glob(f)) if any(c in f for c in "*?[") else [f]
        if not matches:
            raise errors.NotFoundError(f"no Parquet file matches {f}")
        found.extend(matches)
    if not found:
        raise errors.InvalidArgumentError("a ParquetSource needs at least one file")
    return found


class ParquetSource:
    """Rows of Parquet files, by index. Reads footers at creation; pyarrow is imported here."""

    def __init__(self, files: Any, columns: Optional[Sequence[str]] = None,
                 cached_row_groups: int = 8) -> None:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise errors.FailedPreconditionError(
                "ParquetSource needs pyarrow (pip install pyarrow)") from None
        self._pq = pq
        self._store = object_store.ObjectStore()
        found = _expand(files, self._store)
        self.paths = [f.path if isinstance(f, object_store.Object) else f for f in found]
        self._objects = {f.path: f for f in found if isinstance(f, object_store.Object)}
        self.columns = list(columns) if columns is not None else None
        self._groups = []  # (path, row group, first row)
        self._starts = []
        # Each file's footer, read once here: opened again to read rows (in a worker process,
        # say), a file is given it rather than reading it again (a GET per object and process).
        self._footers: Dict[str, Any] = {}
        total = 0
        for path in self.paths:
            try:
                meta = self._footers[path] = self._open(path).metadata
            except errors.Error:
                raise
            except Exception as e:
                raise errors.DataLossError(f"{path}: not a readable Parquet file: {e}") from None
            if self.columns is not None:
                names = set(meta.schema.to_arrow_schema().names)
                missing = [c for c in self.columns if c not in names]
                if missing:
                    raise errors.InvalidArgumentError(
                        f"{path} has no column {', '.join(missing)} (it has "
                        f"{', '.join(sorted(names))})")
            for rg in range(meta.num_row_groups):
                rows = meta.row_group(rg).num_rows
                if rows == 0:
                    continue
                self._groups.append((path, rg, total))
                self._starts.append(total)
                total += rows
        self._len = total
        self._cached = int(cached_row_groups)
        self._cache: "collections.OrderedDict[Any, Any]" = collections.OrderedDict()
        self._files: Dict[Any, Any] = {}
        self._lock = threading.Lock()

    def _open(self, path: str) -> Any:
        """pyarrow's ParquetFile of `path`, a local file or an object, with its footer if it was
        read before. An object's reads are pre-buffered: a row group's column chunks that lie
        together come in one GET."""
        footer = self._footers.get(path)
        obj = self._objects.get(path)
        if obj is not None:
            return self._pq.ParquetFile(object_store.ObjectFile(self._store, obj),
                                        metadata=footer, pre_buffer=True)
        return self._pq.ParquetFile(path, metadata=footer)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> Dict[str, Any]:
        return self.get_many([i])[0]

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_pq"] = None
        state["_cache"] = collections.OrderedDict()
        state["_files"] = {}
        state["_lock"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        import pyarrow.parquet as pq
        self.__dict__.update(state)
        self._pq = pq
        self._lock = threading.Lock()

    def _locate(self, i: int) -> Tuple[int, int]:
        i = int(i)
        if not 0 <= i < self._len:
            raise IndexError(f"row {i} of {self._len}")
        k = bisect.bisect_right(self._starts, i) - 1
        return k, i - self._starts[k]

    def _read(self, k: int, alone: bool = False) -> Dict[str, Any]:
        """Row group k (in the source's order) read and decoded as {column: numpy array of
        values}; `alone`: through a ParquetFile of its own (a thread reading beside others: one
        is not shared between threads; the footer is the one kept, so opening costs no read),
        else through the one kept for its file."""
        path, rg, _ = self._groups[k]
        if alone:
            f = self._open(path)
        else:
            f = self._files.get(path)
            if f is None:
                f = self._files[path] = self._open(path)
        try:
            table = f.read_row_group(rg, columns=self.columns)
        except errors.Error as e:
            # The store's error (a read that failed for good), naming the object and the range.
            raise type(e)(f"{path} row group {rg}: {e}") from None
        except Exception as e:
            raise errors.DataLossError(f"{path} row group {rg}: {e}") from None
        return {name: _column_values(table.column(name)) for name in table.column_names}

    def _read_many(self, ks: Sequence[int]) -> Dict[int, Dict[str, Any]]:
        """{k: row group k decoded} for the row groups ks, read now (those of objects at once, up
        to FETCHES_AT_ONCE, each a round trip to the store) and cached."""
        found: Dict[int, Dict[str, Any]] = {}
        remote = [k for k in ks if self._groups[k][0] in self._objects]
        if len(remote) > 1:
            # Threads of this call alone, gone when it returns: none is left for a fork to lose.
            with concurrent.futures.ThreadPoolExecutor(min(len(remote), FETCHES_AT_ONCE)) as pool:
                for k, decoded in zip(remote, pool.map(lambda k: self._read(k, alone=True),
                                                       remote)):
                    found[k] = decoded
        for k in ks:
            if k not in found:
                found[k] = self._read(k)
        with self._lock:
            for k in ks:
                self._cache[k] = found[k]
                while len(self._cache) > self._cached:
                    self._cache.popitem(last=False)
        return found

    def get_many(self, ids: Sequence[int]) -> List[Dict[str, Any]]:
        """The rows `ids`, in order, as dicts {column: value}. The row groups they lie in that
        are cached are taken first (before a read can evict them), then the others are read a
        few at a time (as many as are cached), those of objects side by side."""
        rows_of: Dict[int, List[Tuple[int, int]]] = collections.defaultdict(list)
        for n, i in enumerate(ids):
            k, row = self._locate(i)
            rows_of[k].append((n, row))
        out: List[Any] = [None] * len(ids)

        def fill(groups: Dict[int, Dict[str, Any]]) -> None:
            for k, columns in groups.items():
                for n, row in rows_of[k]:
                    out[n] = {name: values[row] for name, values in columns.items()}

        with self._lock:
            cached = {k: self._cache[k] for k in sorted(rows_of) if k in self._cache}
            for k in cached:
                self._cache.move_to_end(k)
        fill(cached)
        missing = [k for k in sorted(rows_of) if k not in cached]
        del cached
        step = max(self._cached, 1)
        for first in range(0, len(missing), step):
            fill(self._read_many(missing[first:first + step]))
        return out


def _column_values(column: Any) -> Union[List[Any], np.ndarray]:
    """A chunked arrow column as an indexable sequence of per-row values (see the module doc)."""
    import pyarrow as pa
    t = column.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t) or \
            pa.types.is_large_string(t):
        return [v if isinstance(v, bytes) else (v.encode() if v is not None else b"")
                for v in column.to_pylist()]
    if pa.types.is_fixed_size_list(t):
        flat = column.combine_chunks()
        values = flat.flatten().to_numpy(zero_copy_only=False)
        rows: np.ndarray = values.reshape(len(flat), t.list_size)
        return rows
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        flat = column.combine_chunks()
        values = flat.flatten().to_numpy(zero_copy_only=False)
        offsets = flat.offsets.to_numpy()
        return [list(values[offsets[r]:offsets[r + 1]]) for r in range(len(flat))]
    values = column.to_numpy()
    return [values[r] for r in range(len(values))] if values.dtype == object else values
