"""The record cache of a map job's producer: croupier.produce(..., decode=fn, cache_bytes=N).

What decode(record) made of record i (or, without decode, the source's record i itself) is kept in
shared memory, keyed by the global record index i, for every process of one producer: the
producer and all its worker processes (forks of its zygote) read and add to one cache. A record
found there is neither read from the source nor decoded again; so in the epochs after the first,
only the random part of the pipeline (transform, batch_transform) runs again. decode must be
deterministic (a function of the record alone), which is what makes the cache invisible: a batch
holds the same bytes with it and without it.

Layout: a directory on /dev/shm (tmpfs: its files are memory, not disk), private to the user (mode
0700), named croupier-cache-<pid namespace>-<pid>-<random> (croupier.map.cache_dirs), made by the
producer before it forks its workers and removed by it when it stops (RecordCache.close):

    state        the counters (_STATE, mmap'd by every process) and the locks: byte 0 of the file
                 locks the counters, byte _CLAIMS + i is the claim of record i (fcntl record locks,
                 which the kernel releases when the process holding them dies)
    <i>          record i (croupier.map.record_file): a header, the lengths of the out-of-band
                 buffers, a pickle (protocol 5) of the record, then each buffer (the arrays'
                 bytes) at a 64-byte boundary. The header holds a CRC-32 of everything after it: a file that does not check (or
                 cannot be read) is a miss, removed and made again, never data.
    .tmp-...     a record being written; hard-linked to <i> once whole (atomic, and never replaces
                 a file that is there), then unlinked.

The budget: a record's file counts in whole pages (what tmpfs takes of memory), and is added only
if it fits in what is left of `capacity`. The first record that does not fit makes the cache full:
from then on no record is added (nothing is evicted), and the records not added are counted.

Claims: a process (or thread) that misses records claims them (in increasing index order, so that
two claimants cannot deadlock), looks again, and makes only those still missing; another process
that needs one of them meanwhile waits for the claim and then finds it in the cache. So a record
is made once per producer, not once per worker, even when batches that share it are made at once
(the end of an epoch and the start of the next).
"""
import contextlib
import errno
import fcntl
import logging
import mmap
import os
import struct
import threading
import weakref
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import numpy as np

from croupier.map.cache_dirs import default_root, make_dir, remove_tree, warn_if_small
from croupier.map.record_file import decode, encode, pages, read_file
# By name into this module, not called as record_file.write_file: a test replaces it here to find
# /dev/shm full.
from croupier.map.record_file import write_file as _write_file
# The name tests/test_produce.py imports from here.
from croupier.map.cache_dirs import pid_namespace as _pid_namespace  # noqa: F401

__all__ = ["RecordCache", "default_root", "open_cache", "summary"]

# The name docs/python.md gives users (cache_dirs.py logs there too).
_log = logging.getLogger("croupier.record_cache")

_FIELDS = ("bytes", "records", "hits", "misses", "not_added", "corrupt", "uncacheable", "full")
_STATE = struct.Struct(f"<{len(_FIELDS)}Q")
_CLAIMS = 4096  # byte _CLAIMS + i of the state file is the claim of record i


_NO_ROOM = (errno.ENOSPC, errno.ENOMEM, errno.EDQUOT)


def open_cache(capacity: int, root: Optional[str] = None) -> Optional["RecordCache"]:
    """A RecordCache of `capacity` bytes in `root`, or None, with a warning naming the device,
    when the device has no room for even its state (a full /dev/shm): the producer then makes
    every record each epoch, as without a cache, rather than die or refuse to start. The cache
    changes no byte of a batch, so leaving it out changes only the speed."""
    try:
        return RecordCache(capacity, root)
    except OSError as e:
        if e.errno not in _NO_ROOM:
            raise
        _log.warning("%s; the producer runs without a record cache (every record is read and "
                     "decoded again each epoch): free space there, or give cache_bytes=0",
                     e.strerror)
        return None


class RecordCache:
    """A cache of records by global record index, shared by this process and its forks (made
    before they are forked), holding at most `capacity` bytes (counted in whole pages).

    load(ids, make) is the whole interface of a pipeline: the records `ids`, from the cache where
    it holds them, the others from make(). stats() gives the counts; close() removes the
    directory (in the process that made the cache only). Thread-safe, and safe across the
    processes that share it."""

    def __init__(self, capacity: int, root: Optional[str] = None) -> None:
        """OSError (ENOSPC) naming `root` when it has no room for even the cache's state: see
        open_cache() for a cache that is then left out."""
        capacity = int(capacity)
        if capacity <= 0:
            raise ValueError(f"a record cache needs a capacity above 0 bytes, not {capacity}")
        root = root or default_root()
        self.capacity = capacity
        self.path = make_dir(root)
        self._owner = os.getpid()
        self._remove = weakref.finalize(self, remove_tree, self.path, self._owner)
        # Closed (None) by close(); open from here on while the cache is used.
        self._fd: Any = None
        self._state: Any = None
        try:
            self._fd = os.open(os.path.join(self.path, "state"),
                               os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            # Reserved, not only sized: a page of a full tmpfs that is mapped but not allocated
            # kills the process that touches it with SIGBUS (ftruncate makes a hole).
            try:
                os.posix_fallocate(self._fd, 0, _STATE.size)
            except OSError as e:
                raise OSError(e.errno, f"record cache: no room on {root} for the cache's state "
                              f"({_STATE.size} bytes): {e.strerror}") from None
            self._state = mmap.mmap(self._fd, _STATE.size)
        except BaseException:
            self.close()
            raise
        self._pid: Optional[int] = None
        self._in_this_process()
        warn_if_small(root, capacity)

    # -- the interface -------------------------------------------------------------------------

    def load(self, ids: Sequence[int],
             make: Callable[[Sequence[int]], List[Any]]) -> List[Any]:
        """The records `ids` (global record indexes), in order. Each one the cache holds is read
        from it (a new object each time); the others are made by make(indexes) -> records (the
        same count, in order), called at most once, with the missing indexes in the order of
        `ids` (a numpy array if `ids` is one, as a source's get_many would get them without a
        cache), and added while there is room. Whatever make raises goes through (nothing is
        added then). Counts hits (records found) and misses (records made)."""
        self._in_this_process()
        given, ids = ids, [int(i) for i in ids]
        out = [self._get(i) for i in ids]
        missing = [k for k, r in enumerate(out) if r is None]
        made = not_added = 0
        try:
            if missing:
                with self._claims(sorted({ids[k] for k in missing})):
                    for k in missing:  # made by another process or thread while we waited?
                        out[k] = self._get(ids[k], claimed=True)
                    still = [k for k in missing if out[k] is None]
                    if still:
                        records = make(given[still] if isinstance(given, np.ndarray) else
                                       [given[k] for k in still])
                        made = len(still)
                        kept = set()
                        for k, record in zip(still, records):
                            out[k] = record
                            if ids[k] not in kept:  # an index twice in `ids`: added once
                                kept.add(ids[k])
                                not_added += self._put(ids[k], record) is False
        finally:
            found = len(ids) - sum(r is None for r in out) - made
            self._add(hits=found, misses=made, not_added=not_added)
        return out

    def stats(self) -> Dict[str, Any]:
        """The counts, as a dict: hits, misses (records made), bytes and records held,
        not_added (records made while the cache was full), corrupt (files found corrupt, made
        again), uncacheable (records that could not be serialized), full (bool), capacity,
        path."""
        with self._counters() as values:
            got: Dict[str, Any] = dict(zip(_FIELDS, values))
        got["full"] = bool(got["full"])
        got["capacity"] = self.capacity
        got["path"] = self.path
        return got

    def close(self) -> None:
        """Lets go of the shared memory and, in the process that made the cache, removes its
        directory. Safe to call more than once."""
        if self._state is not None:
            self._state.close()
            self._state = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if os.getpid() == self._owner:
            self._remove()

    def __enter__(self) -> "RecordCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- records -------------------------------------------------------------------------------

    def _file(self, i: int) -> str:
        return os.path.join(self.path, str(i))

    def _get(self, i: int, claimed: bool = False) -> Any:
        """Record i from its file, or None if there is none or it is corrupt or unreadable. With
        `claimed` (the caller holds record i's claim, so no one else writes it), a bad file is
        removed and counted."""
        path = self._file(i)
        try:
            data = read_file(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            if claimed:
                self._drop(i, path, f"unreadable: {e}")
            return None
        try:
            return decode(i, data)
        except Exception as e:  # noqa: BLE001 (whatever is wrong with the file, it is a miss)
            if claimed:
                self._drop(i, path, f"corrupt: {type(e).__name__}: {e}")
            return None

    def _drop(self, i: int, path: str, why: str) -> None:
        """Removes record i's bad file, gives its pages back to the budget and counts it."""
        try:
            size = os.stat(path).st_size
            os.unlink(path)
        except OSError:
            return
        _log.warning("record cache %s: the file of record %d is %s; the record is made again",
                     self.path, i, why)
        self._add(bytes=-pages(size), records=-1, corrupt=1)

    def _put(self, i: int, record: Any) -> Optional[bool]:
        """Adds record i if there is room. True if it is in the cache now, False if there was no
        room for it (the cache is full), None if it could not be kept (pickle refused it, a
        write failed)."""
        if self._is_full():
            return False
        try:
            parts, size = encode(i, record)
        except Exception as e:  # noqa: BLE001 (an object pickle cannot take is not cached)
            self._add(uncacheable=1)
            self._warn_once("uncacheable", "record cache %s: record %d cannot be kept "
                            "(%s: %s); such records are made again each time",
                            self.path, i, type(e).__name__, e)
            return None
        taken = pages(size)
        if not self._reserve(taken):
            return False
        tmp = os.path.join(self.path, f".tmp-{os.getpid()}-{threading.get_ident()}-{i}")
        try:
            _write_file(tmp, parts)
            os.link(tmp, self._file(i))  # atomic; fails if the file is there
            return True
        except FileExistsError:
            self._add(bytes=-taken, records=-1)  # another process added it meanwhile
            return True
        except OSError as e:
            self._add(bytes=-taken, records=-1)
            if e.errno in _NO_ROOM:
                self._set_full()
                held = self.stats()
                self._warn_once("space", "record cache %s: %s is out of space (%s) at %d bytes "
                                "in %d records: the cache adds no more records",
                                self.path, os.path.dirname(self.path), e.strerror,
                                held["bytes"], held["records"])
                return False
            self._warn_once("write", "record cache %s: record %d could not be written (%s); it "
                            "is not kept", self.path, i, e)
            return None
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    # -- the shared counters -------------------------------------------------------------------

    @contextlib.contextmanager
    def _counters(self) -> Iterator[List[int]]:
        """The counters as a list (in _FIELDS order), under the lock of every process and
        thread; written back when the block ends without an exception."""
        self._in_this_process()
        with self._lock:
            fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, 0)
            try:
                values = list(_STATE.unpack_from(self._state))
                yield values
                _STATE.pack_into(self._state, 0, *values)
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)

    def _add(self, **deltas: int) -> None:
        if not any(deltas.values()):
            return
        with self._counters() as values:
            for name, delta in deltas.items():
                k = _FIELDS.index(name)
                values[k] = max(0, values[k] + int(delta))

    def _reserve(self, size: int) -> bool:
        """Takes `size` bytes of the budget for one record; False (and the cache is full from
        now on) if they do not fit."""
        with self._counters() as values:
            bytes_held, records = values[0], values[1]
            if values[-1] or bytes_held + size > self.capacity:
                values[-1] = 1
                return False
            values[0], values[1] = bytes_held + size, records + 1
            return True

    def _is_full(self) -> bool:
        return bool(_STATE.unpack_from(self._state)[-1])  # a word: no lock needed to read it

    def _set_full(self) -> None:
        with self._counters() as values:
            values[-1] = 1

    # -- claims --------------------------------------------------------------------------------

    def _in_this_process(self) -> None:
        """Makes this process's thread locks: in a fork, anew (the parent's copies could be
        held by threads that do not exist here)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.Lock()  # the counters, with byte 0's fcntl lock
            self._guard = threading.Lock()  # self._claimed
            # record index -> [threading.Lock, threads using it]
            self._claimed: Dict[int, List[Any]] = {}
            self._warned: Set[str] = set()

    @contextlib.contextmanager
    def _claims(self, ids: Iterable[int]) -> Iterator[None]:
        """Holds the claims of records `ids` (distinct, in increasing order: every claimant
        takes them in that order, so none waits for another that waits for it) for the block:
        no other thread or process of the producer makes those records meanwhile. A claim the
        kernel refuses (EDEADLK, ENOLCK) is not held: the record may then be made twice, never
        wrongly."""
        held = []
        try:
            for i in ids:
                held.append(self._claim(i))
            yield
        finally:
            for i, locked in reversed(held):
                self._release(i, locked)

    def _claim(self, i: int) -> Tuple[int, bool]:
        """Waits for record i's claim: this process's thread lock of it, then the fcntl lock of
        byte _CLAIMS + i (fcntl locks belong to a process, not a thread). (i, whether the fcntl
        lock is held)."""
        with self._guard:
            entry = self._claimed.setdefault(i, [threading.Lock(), 0])
            entry[1] += 1
        entry[0].acquire()
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, _CLAIMS + i)
            return i, True
        except OSError:
            return i, False

    def _release(self, i: int, locked: bool) -> None:
        if locked:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, _CLAIMS + i)
        with self._guard:
            entry = self._claimed[i]
            entry[0].release()
            entry[1] -= 1
            if entry[1] == 0:
                del self._claimed[i]

    def _warn_once(self, kind: str, *args: Any) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            _log.warning(*args)


def summary(stats: Dict[str, Any]) -> str:
    """The counts of stats() in one line: "record cache: H hits, M misses, B bytes in F
    records", and what went wrong, if anything."""
    text = (f"record cache: {stats['hits']} hits, {stats['misses']} misses, {stats['bytes']} "
            f"bytes in {stats['records']} records")
    if stats["full"]:
        text += (f"; full ({stats['capacity']} bytes): {stats['not_added']} records made while "
                 "it was full were not added")
    if stats["corrupt"]:
        text += f"; {stats['corrupt']} corrupt files made again"
    if stats["uncacheable"]:
        text += f"; {stats['uncacheable']} records could not be serialized"
    return text
