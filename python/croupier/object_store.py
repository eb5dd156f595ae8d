"""`s3://bucket/key` paths for the Python sources (ParquetSource), read through croupier's own S3
client (src/s3), the one that reads the producers' and the dispatcher's s3:// paths: the same
environment (docs/operations.md, "Data in an object store": AWS_ENDPOINT_URL, AWS_REGION,
CROUPIER_S3_ADDRESSING, the credentials from the environment or the shared credentials file and
AWS_PROFILE, CROUPIER_S3_MAX_ATTEMPTS and the timeouts), the same retries of throttling, 5xx and
broken connections with jittered backoff, errors naming the object, the byte range and the
store's answer, and the same counters: a producer's croupier_s3_* metrics count these reads too,
those of its map job's worker processes included (s3::ProcessS3Counters). Every read is one
ranged GET, If-Match the ETag the object was listed with: an object written again under a job
fails its reads (DATA_LOSS, "changed since it was indexed").

A glob matches keys as a file system glob does: `*`, `?` and `[...]` never cross a `/`."""
import io
from typing import Dict, List, NamedTuple, Optional

from croupier import _croupier, errors

__all__ = ["is_s3", "Object", "ObjectStore", "ObjectFile", "process_stats", "share_reads",
           "summary"]


def is_s3(path: str) -> bool:
    return path.startswith("s3://")


class Object(NamedTuple):
    """One object, as a listing gave it."""
    path: str
    size: int
    etag: str


class ObjectStore:
    """The object store that the environment names, its client made on first use (so that an
    instance that only crossed a pickle costs nothing until it reads). Thread-safe; usable in a
    process forked from the one that made it (the client is made again there)."""

    def __init__(self) -> None:
        self._native: Optional[_croupier._ObjectStore] = None

    def _client(self) -> _croupier._ObjectStore:
        if self._native is None:
            self._native = _croupier._ObjectStore()
        return self._native

    def expand(self, pattern: str) -> List[Object]:
        """The objects `pattern` names, sorted by path: itself if it has no wildcard, else the
        keys under its prefix that match. NotFoundError, naming the pattern, when none does."""
        found = [Object(*o) for o in self._client().list(pattern)]
        if not found:
            wild = any(c in pattern for c in "*?[")
            raise errors.NotFoundError(f"no object matches {pattern}" if wild else
                                       f"{pattern}: no such object")
        return found

    def read(self, obj: Object, offset: int, length: int) -> bytes:
        """`length` bytes of `obj` at `offset` (fewer only past its end): one ranged GET."""
        return self._client().read(obj.path, obj.size, obj.etag, offset, length)

    def stats(self) -> Dict[str, int]:
        """What this store's client asked: requests, bytes, retries, throttles, failures."""
        return self._client().stats()

    def __getstate__(self) -> Dict[str, None]:
        return {"_native": None}


def process_stats() -> Dict[str, int]:
    """What every S3 client of this process and of the processes forked from it asked (the
    counters of a producer's croupier_s3_* metrics)."""
    return _croupier._s3_process_stats()


def share_reads(directory: Optional[str], most: Optional[int] = None) -> int:
    """From now on, the reads of every ObjectStore of this process and of the processes forked
    from it afterwards (a map job's workers) go through the directory `directory`: a range one of
    them fetched is read by the others from its copy there, not fetched again
    (src/s3/shared_reads.h), within CROUPIER_S3_SHARED_READ_BYTES bytes of copies (default 256
    MiB), and at most `most`. None turns it off. Returns that capacity (0: off). The directory
    is made by the first read; it is the caller's to name and to remove after
    (croupier.map.cache_dirs.shared_reads)."""
    return int(_croupier._s3_share_reads(directory or "", (1 << 64) - 1 if most is None
                                         else max(0, int(most))))


def summary(stats: Dict[str, int]) -> str:
    """process_stats()'s counts in one line: "object store: R requests, B bytes, T retries (S
    throttled), F failed", and "; N ranges (B bytes) read from the producer's copies" when
    ranges were read from copies that a process of the producer fetched before (share_reads)."""
    line = (f"object store: {stats['requests']} requests, {stats['bytes']} bytes, "
            f"{stats['retries']} retries ({stats['throttles']} throttled), "
            f"{stats['failures']} failed")
    if stats.get("shared"):
        line += (f"; {stats['shared']} ranges ({stats['shared_bytes']} bytes) read from the "
                 "producer's copies")
    return line


class ObjectFile(io.RawIOBase):
    """One object as a read-only, seekable binary file (what pyarrow reads a Parquet file from):
    each read is a ranged GET of what it asks, nothing more and nothing ahead."""

    def __init__(self, store: ObjectStore, obj: Object) -> None:
        super().__init__()
        self._store = store
        self._object = obj
        self._pos = 0

    @property
    def name(self) -> str:
        return self._object.path

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._object.size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._object.size}[whence]
        if base + offset < 0:
            raise errors.InvalidArgumentError(
                f"{self._object.path}: seek to {base + offset}, before the start")
        self._pos = base + offset
        return self._pos

    def read(self, size: Optional[int] = -1) -> bytes:
        if size is None or size < 0:
            size = self._object.size - self._pos
        data = self._store.read(self._object, self._pos, size) if size > 0 else b""
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: "bytearray | memoryview") -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer)[:len(data)] = data
        return len(data)
