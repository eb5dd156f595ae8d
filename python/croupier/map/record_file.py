"""The file of one record of a record cache (croupier.map.record_cache), as a producer's processes
write and read it on /dev/shm:

    _HEADER (magic, record index, file size, pickle length, number of buffers, CRC-32 of the
    rest), the lengths of the out-of-band buffers, a pickle (protocol 5) of the record, then each
    buffer (the arrays' bytes) at a 64-byte boundary.

A file that does not check (decode raises ValueError) is not data: the cache removes it and makes
the record again. The format lives in the directory of one producer only, so it has no version.
"""
import errno
import mmap
import os
import pickle
import struct
import zlib
from typing import Any, List, Sequence, Tuple

__all__ = ["PAGE", "pages", "encode", "decode", "read_file", "write_file"]

PAGE = mmap.PAGESIZE  # what tmpfs takes of memory for a file is counted in these
_ALIGN = 64  # each out-of-band buffer starts at a multiple of this in the file
_MAGIC = b"CRPCACHE"
# magic, record index, file size, pickle length, number of buffers, CRC-32 of the rest
_HEADER = struct.Struct("<8sQQQQI4x")
_LENGTH = struct.Struct("<Q")


def pages(size: int) -> int:
    return -(-int(size) // PAGE) * PAGE


def encode(index: int, record: Any) -> Tuple[List[Any], int]:
    """The file of record `index`: (the parts to write in order, their total size). Arrays
    (and whatever supports pickle's protocol 5 buffers) are written out of band, as raw bytes."""
    buffers: List[Any] = []
    data = pickle.dumps(record, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    parts = [b"".join(_LENGTH.pack(r.nbytes) for r in raws), data]
    size = _HEADER.size + len(parts[0]) + len(data)
    for raw in raws:
        pad = -size % _ALIGN
        if pad:
            parts.append(bytes(pad))
        parts.append(raw)
        size += pad + raw.nbytes
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    return [_HEADER.pack(_MAGIC, index, size, len(data), len(raws), crc)] + parts, size


def decode(index: int, data: bytearray) -> Any:
    """Record `index` from its file's bytes `data` (a bytearray: the arrays are views of it,
    aligned and writable). Raises ValueError if the file is not record `index`'s, whole."""
    if len(data) < _HEADER.size:
        raise ValueError(f"{len(data)} bytes, shorter than a header")
    magic, got, size, length, count, crc = _HEADER.unpack_from(data)
    if magic != _MAGIC or got != index or size != len(data):
        raise ValueError("not a record file of this record, or not whole")
    view = memoryview(data)
    if zlib.crc32(view[_HEADER.size:]) != crc:
        raise ValueError("its CRC-32 does not match")
    offset = _HEADER.size + count * _LENGTH.size
    lengths = [_LENGTH.unpack_from(data, _HEADER.size + k * _LENGTH.size)[0] for k in range(count)]
    pickled = view[offset:offset + length]
    offset += length
    buffers = []
    for n in lengths:
        offset += -offset % _ALIGN
        buffers.append(view[offset:offset + n])
        offset += n
    if offset != size:
        raise ValueError("its parts do not add up to its size")
    return pickle.loads(pickled, buffers=buffers)


def read_file(path: str) -> bytearray:
    """The whole file as a bytearray (os calls: a file object costs more than the read)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = bytearray(os.fstat(fd).st_size)
        view = memoryview(data)
        done = 0
        while done < len(data):
            n = os.readv(fd, [view[done:]])
            if not n:
                raise OSError(errno.EIO, "the file ended early")
            done += n
    finally:
        os.close(fd)
    return data


def write_file(path: str, parts: Sequence[Any]) -> None:
    """A new file of the bytes of `parts`, in order."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        views = [memoryview(p).cast("B") for p in parts]
        while views:
            n = os.writev(fd, views)
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if views:
                views[0] = views[0][n:]
    finally:
        os.close(fd)
