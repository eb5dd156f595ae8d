"""croupier.logs: the C++ library's log lines through Python's logging.

The C++ library writes each event as one line, "2026-11-22T07:30:00.123Z W [consumer] message"
(src/common/logging.h). Once croupier is imported (install() runs then), it writes them into a
pipe instead of stderr, and a thread of this module reads each line and hands it to the logger
`croupier.native.<component>` ("croupier.native.consumer", "croupier.native.producer", ...) at its
level (D, I, W, E: DEBUG, INFO, WARNING, ERROR), the message with its line breaks back.

Where no handler would take the event (logging not configured: no handler on that logger or
above it, the root's included), the line goes to stderr as the C++ library wrote it, so nothing
changes for a program that does not use logging. The C++ library's own threshold
($CROUPIER_LOG_LEVEL, default info) still drops events before they reach Python.

At exit the C++ library writes to stderr again, and the lines still in the pipe are handed on
first (for up to a second). A line the pipe cannot take (full) goes to stderr at once.
"""
import atexit
import logging
import os
import re
import sys
import threading
from typing import Optional

from croupier import _croupier
from croupier.runtime.thread_signals import block_async_signals

__all__ = ["install", "forward", "LOGGER_PREFIX"]

LOGGER_PREFIX = "croupier.native"
_LINE = re.compile(r"^\S+ ([DIWE]) \[([^\]]*)\] (.*)$")
_LEVELS = {"D": logging.DEBUG, "I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR}
_DRAIN_SECONDS = 1.0

_lock = threading.Lock()
_reader: Optional[threading.Thread] = None
_write_fd = -1


def forward(line: str) -> None:
    """Hands one C++ log line (without its newline) to its logger, or to stderr as it is when no
    handler would take it (or it is not a log line)."""
    match = _LINE.match(line)
    if match is not None:
        letter, component, message = match.groups()
        logger = logging.getLogger(f"{LOGGER_PREFIX}.{component or 'croupier'}")
        if logger.hasHandlers():
            logger.log(_LEVELS[letter], message.replace("\\n", "\n"))
            return
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed stderr: nowhere left to write
        pass


def _read(fd: int) -> None:
    """The reader thread: forwards every line of the pipe until its writers have closed it."""
    block_async_signals()
    pending = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            forward(line.decode("utf-8", "replace"))
    if pending:
        forward(pending.decode("utf-8", "replace"))
    os.close(fd)


def _uninstall() -> None:
    """At exit: the C++ library writes to stderr again, and the lines in the pipe are handed on
    (the reader ends when the pipe's last writer has closed it; a forked child may keep it open,
    so the wait is bounded)."""
    global _reader, _write_fd
    with _lock:
        reader, fd = _reader, _write_fd
        _reader, _write_fd = None, -1
    if reader is None:
        return
    _croupier.set_log_fd(-1)
    os.close(fd)
    reader.join(_DRAIN_SECONDS)


def install() -> None:
    """Routes the C++ library's log lines of this process through Python's logging (the module
    docstring says how). Idempotent; croupier's __init__ calls it."""
    global _reader, _write_fd
    with _lock:
        if _reader is not None:
            return
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(write_fd, False)  # a full pipe sends the line to stderr, never blocks
        _reader = threading.Thread(target=_read, args=(read_fd,), name="croupier-logs",
                                   daemon=True)
        _reader.start()
        _write_fd = write_fd
        _croupier.set_log_fd(write_fd)
    atexit.register(_uninstall)
