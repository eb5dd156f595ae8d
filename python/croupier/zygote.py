"""croupier.zygote: the processes of a producer's worker pool, and the messages between them.

The producer's C++ threads start once the pool exists, and forking a process that runs them is
unsafe. So the pool forks one single-threaded process at its creation, the zygote, which holds
the pipeline (it is a fork of the producer at that time), and every worker, the first ones and
the replacements of dead ones, is a fork of the zygote. The producer asks the zygote over a
SOCK_SEQPACKET socket pair, one small pickled message a request, passing a new worker's file
descriptors along (SCM_RIGHTS): its shared memory and its end of a socket pair, over which the
producer sends it record indexes and it answers with the size of the batch it wrote. The zygote
is the workers' parent: it reaps them and says how they died.

croupier.pool (WorkerPool) decides when a worker is replaced and when a batch fails.
"""
import mmap
import os
import pickle
import signal
import socket
import struct
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from croupier import _croupier, errors
from croupier.errors import BatchError
from croupier.processes import describe, fork, how_it_ended, reap

__all__ = ["REQUEST", "Zygote", "ZygoteError", "Worker", "WorkerDied"]

# What a worker answers: a Batch, or (numeric error code, message).
Result = Union[Any, Tuple[int, str]]


INITIAL_SHM = 16 << 20
REQUEST = struct.Struct("<QQ")  # epoch, batch; the record indexes follow, as uint64
CONTROL_BYTES = 1 << 16  # the largest message on the zygote's socket
REAP_GRACE = 2.0  # seconds a worker whose channel closed has to exit before it is SIGKILLed
CLOSE_GRACE = 5.0  # seconds the workers have to exit once the pool closes


def _worker_main(pipeline: Any, channel: int, fd: int, capacity: int) -> None:
    """A worker: makes the batches it is asked for, each into its shared memory `fd`, until its
    channel (a socket's file descriptor) closes. A request is REQUEST's epoch and batch and the
    record indexes (uint64); the answer ("ok", size, capacity) says the batch's bytes are in the
    first `size` bytes of the memory, now `capacity` bytes long, and ("error", code, message)
    why there is no batch."""
    conn = Connection(channel)
    view = mmap.mmap(fd, capacity)
    while True:
        try:
            request = conn.recv_bytes()
        except (EOFError, OSError):
            return
        epoch, g = REQUEST.unpack_from(request)
        ids = np.frombuffer(request, dtype=np.uint64, offset=REQUEST.size).copy()
        try:
            batch = pipeline.make(epoch, g, ids)
            size = batch.nbytes
            if size > capacity:
                capacity = max(size, capacity * 2)
                view.close()
                os.ftruncate(fd, capacity)
                view = mmap.mmap(fd, capacity)
            _croupier.batch_copy_into(batch, view)
            reply: Tuple[Any, ...] = ("ok", size, capacity)
        except BatchError as e:
            reply = ("error", e.code, str(e))
        except Exception as e:  # a bug of croupier's or an unexpected failure: say where
            reply = ("error", errors.INTERNAL,
                     f"{describe(e)}\n{''.join(traceback.format_exc(limit=4))}")
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return


def _zygote_main(pipeline: Any, control: socket.socket) -> None:
    """The zygote: answers the requests on `control` until the producer closes its end, then
    waits for its workers (they exit once the producer has closed their channels), SIGKILLing
    those still running after CLOSE_GRACE seconds. Requests and answers:
      ("spawn", capacity) with the worker's memory and channel file descriptors: ("spawned", pid)
        of a new worker, or ("error", message) if none could be forked;
      ("reap", pid): ("reaped", wait status or None) once worker `pid` has exited (it is
        SIGKILLed if it has not within REAP_GRACE seconds)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # reaping is its job, whatever the producer's
    workers: Set[int] = set()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, CONTROL_BYTES, 2)
        except OSError:
            break
        if not data:
            break  # the producer closed its end
        request = pickle.loads(data)
        if request[0] == "spawn":
            reply = _spawn_worker(pipeline, control, fds, request[1], workers)
        else:
            workers.discard(request[1])
            reply = ("reaped", reap(request[1], REAP_GRACE))
        try:
            control.send(pickle.dumps(reply))
        except OSError:
            break
    deadline = time.monotonic() + CLOSE_GRACE
    for pid in workers:
        reap(pid, max(0.0, deadline - time.monotonic()))


def _spawn_worker(pipeline: Any, control: socket.socket, fds: List[int], capacity: int,
                  workers: Set[int]) -> Tuple[str, Any]:
    """Forks a worker on the file descriptors `fds` (its memory, its channel), which the zygote
    closes then; adds its pid to `workers`. The answer to a "spawn" request."""
    try:
        if len(fds) != 2:
            return ("error", f"a spawn request came with {len(fds)} file descriptors, not 2")
        pid = fork(_worker_main, pipeline, fds[1], fds[0], capacity, close=(control,))
    except OSError as e:
        return ("error", f"the zygote could not fork a worker: {describe(e)}")
    finally:
        for fd in fds:
            os.close(fd)
    workers.add(pid)
    return ("spawned", pid)


class ZygoteError(Exception):
    """No worker can be made: the zygote is gone, or could not fork one."""


class Zygote:
    """The producer's handle on the zygote process, which it forks now. Thread-safe."""

    def __init__(self, pipeline: Any) -> None:
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.pid = fork(_zygote_main, pipeline, theirs, close=(self._control,))
        except BaseException:
            self._control.close()
            raise
        finally:
            theirs.close()
        self._lock = threading.Lock()
        self._gone: Optional[str] = None  # why it answers no more

    def spawn(self, memfd: int, channel: int, capacity: int) -> int:
        """The pid of a new worker on those file descriptors (the zygote gets copies)."""
        reply = self._ask(("spawn", capacity), (memfd, channel))
        if reply[0] != "spawned":
            raise ZygoteError(reply[1])
        return reply[1]

    def reap(self, pid: int) -> Optional[int]:
        """The wait status of worker `pid` once it has exited (None if unknown)."""
        return self._ask(("reap", pid))[1]

    def _ask(self, request: Tuple[Any, ...], fds: Sequence[int] = ()) -> Any:
        with self._lock:
            if self._gone is None:
                try:
                    if fds:
                        socket.send_fds(self._control, [pickle.dumps(request)], list(fds))
                    else:
                        self._control.send(pickle.dumps(request))
                    data = self._control.recv(CONTROL_BYTES)
                except OSError:
                    data = b""
                if data:
                    return pickle.loads(data)
                ended = how_it_ended(reap(self.pid, REAP_GRACE))
                self._gone = (f"the pool's zygote process (pid {self.pid}) is gone ({ended}), "
                              "and with it every worker: none can be replaced")
            raise ZygoteError(self._gone)

    def gone(self) -> Optional[str]:
        """Why the zygote answers no more (it exited, and its workers with it), or None while it
        runs. Looks without asking it anything: a zombie is reaped here."""
        with self._lock:
            if self._gone is None:
                try:
                    done, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    done, status = self.pid, None
                if done:
                    self._gone = (f"the pool's zygote process (pid {self.pid}) is gone "
                                  f"({how_it_ended(status)}), and with it every worker: none can "
                                  "be replaced")
            return self._gone

    def close(self) -> None:
        """Ends the zygote, which waits for its workers first; SIGKILLs it if it takes longer."""
        with self._lock:
            self._control.close()
            if self._gone is None:
                self._gone = "the pool is closed"
                reap(self.pid, CLOSE_GRACE + 2.0)


class WorkerDied(Exception):
    """A worker's channel closed: it died, before it got the request (`before`) or while it
    made the batch."""

    def __init__(self, before: bool) -> None:
        super().__init__()
        self.before = before


class Worker:
    """A worker process as the producer holds it: its pid, its channel, its shared memory."""

    def __init__(self, zygote: Zygote, index: int) -> None:
        self.index = index
        self.capacity = INITIAL_SHM
        self.fd: Any = os.memfd_create(f"croupier-worker-{index}", 0)
        # None once closed (close()); set below, before the worker is used.
        self.view: Any = None
        self.conn: Any = None
        try:
            os.ftruncate(self.fd, self.capacity)
            self.view = mmap.mmap(self.fd, self.capacity)
            ours, theirs = socket.socketpair()
            try:
                self.pid = zygote.spawn(self.fd, theirs.fileno(), self.capacity)
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()
            self.conn = Connection(ours.detach())
        except BaseException:
            self.close()
            raise

    def make(self, request: bytes) -> Result:
        """The batch `request` (REQUEST and the record indexes) asks for: a Batch, or (code,
        message). Raises WorkerDied if the worker's channel closes."""
        try:
            self.conn.send_bytes(request)
        except OSError:
            raise WorkerDied(before=True) from None
        try:
            reply = self.conn.recv()
        except (EOFError, OSError):
            raise WorkerDied(before=False) from None
        if reply[0] != "ok":
            return (reply[1], reply[2])
        _, size, capacity = reply
        if capacity != self.capacity:
            self.view.close()
            self.capacity = capacity
            self.view = mmap.mmap(self.fd, capacity)
        return _croupier.batch_from_buffer(memoryview(self.view)[:size])

    def close_channel(self) -> None:
        """Closes the channel: a live worker exits when it reads its end."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        self.close_channel()
        if self.view is not None:
            try:
                self.view.close()
            except BufferError:
                pass
            self.view = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
