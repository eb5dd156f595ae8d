"""Where a producer's shared directories live: its record cache (croupier.map.record_cache) and
the reads its worker processes share (shared_reads). Each is a directory named
croupier-cache-<pid namespace>-<pid>-<random> in a root (/dev/shm when there is one), made by the
producer and removed by it; sweep() removes those of producers that died before they could.
"""
import contextlib
import logging
import os
import re
import secrets
import shutil
import tempfile
from typing import Iterator, Optional

from croupier import object_store

__all__ = ["PREFIX", "default_root", "make_dir", "remove_tree", "pid_namespace", "shared_reads",
           "sweep", "warn_if_small"]

_log = logging.getLogger("croupier.record_cache")

PREFIX = "croupier-cache-"


def default_root() -> str:
    """Where caches are made: /dev/shm (shared memory) if there is one, else the temp folder."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def make_dir(root: str) -> str:
    """A new cache directory in `root` (mode 0700), after sweeping the dead producers' ones."""
    sweep(root)
    return tempfile.mkdtemp(prefix=f"{PREFIX}{pid_namespace()}-{os.getpid()}-", dir=root)


def remove_tree(path: str, owner: int) -> None:
    if os.getpid() == owner:  # never from a fork
        shutil.rmtree(path, ignore_errors=True)


def pid_namespace() -> int:
    """An id of this process's pid namespace (0 if unknown): pids are compared only within one."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(root: str) -> None:
    """Removes the caches in `root` that producers left when they were killed (SIGKILL, a crash)
    before they could remove them: those of this pid namespace whose process is gone."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    namespace = pid_namespace()
    for name in names:
        m = re.fullmatch(rf"{PREFIX}(\d+)-(\d+)-\w+", name)
        if m and int(m.group(1)) == namespace and not _alive(int(m.group(2))):
            _log.info("record cache: removing %s, left by process %s, which is gone",
                      os.path.join(root, name), m.group(2))
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def warn_if_small(root: str, capacity: int) -> None:
    try:
        st = os.statvfs(root)
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if free < capacity:
        _log.warning("record cache: %s has %d bytes free, less than the cache's %d: the cache "
                     "will be full when %s is", root, free, capacity, root)


@contextlib.contextmanager
def shared_reads(workers: int) -> Iterator[Optional[str]]:
    """While it is open, the objects that this producer's `workers` worker processes read
    (ParquetSource's row groups) are fetched once for all of them, not once by each worker whose
    batches need them (croupier.object_store.share_reads): copies in a directory of default_root()
    named here, made by the first process that keeps one (a producer that reads no object makes
    none) and removed when this closes. The copies take at most CROUPIER_S3_SHARED_READ_BYTES
    (256 MiB by default), and at most half of what the device has free as this opens. Yields
    its path, or None: no workers, or the capacity 0 (CROUPIER_S3_SHARED_READ_BYTES=0, or
    nothing free)."""
    if workers <= 0:
        yield None
        return
    root = default_root()
    sweep(root)
    path = os.path.join(root, f"{PREFIX}{pid_namespace()}-{os.getpid()}-{secrets.token_hex(8)}")
    owner = os.getpid()
    try:
        st = os.statvfs(root)
        free: Optional[int] = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    try:
        # Never more than half of what the device has free: the copies must not fill it.
        capacity = object_store.share_reads(path, most=None if free is None else free // 2)
        if free is not None and 0 < capacity == free // 2:
            _log.info("shared reads: %s has %d bytes free; the workers' copies of what they "
                      "fetch take at most half of them", root, free)
        yield path if capacity > 0 else None
    finally:
        object_store.share_reads(None)
        remove_tree(path, owner)
