"""croupier.map.zygote: the processes of a producer's worker pool, and the messages between them.

The producer's C++ threads start once the pool exists, and forking a process that runs them is
unsafe. So the pool forks one single-threaded process at its creation, the zygote, which holds
the pipeline (it is a fork of the producer at that time), and every worker, the first ones and
the replacements of dead ones, is a fork of the zygote. The producer asks the zygote over a
SOCK_SEQPACKET socket pair, one small pickled message a request, passing a new worker's end of a
socket pair along (SCM_RIGHTS). Over that channel the producer sends the worker the record indexes
of a batch and a shared-memory slot (src/producer/batch_slots.h: a memfd whose descriptor goes
along with the first request that names it), the worker lays the batch out in the slot, straight
from its columns, and answers with its size, and the producer holds and serves those bytes as
they are: the one copy of a batch between the worker's columns and the data plane. The zygote is
the workers' parent: it reaps them and says how they died.

The producer's side of a worker's channel is C++ (src/producer/worker_channel.h, which gives the
messages' layout), and so is the supervisor of the workers (src/producer/worker_pool.h, started by
croupier.map.pool): in the producer's process a batch touches no Python, only here in the worker.

croupier.map.pool (WorkerPool) starts the workers' supervisor, which decides when a worker is
replaced and when a batch fails.

Nothing waits for the zygote for ever: a request it has not answered within ANSWER_TIMEOUT seconds
(a fork of a process with threads can inherit a lock that nobody will release) has it SIGKILLed,
its workers with it, and the pool's error says where its Python code was stuck (faulthandler).
"""
import faulthandler
import mmap
import os
import pickle
import signal
import socket
import struct
import tempfile
import threading
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from croupier import _croupier, errors
from croupier.errors import BatchError
from croupier.runtime.processes import describe, fork, how_it_ended, reap

__all__ = ["Zygote", "ZygoteError"]

# What a worker answers: a Batch, or (numeric error code, message).
Result = Union[_croupier.Batch, Tuple[int, str]]


# A request on a worker's channel: epoch, batch, the slot's id and capacity, and the number of
# slots to forget; then those slots' ids and the record indexes, as uint64. Every number is in
# the machine's own byte order (src/producer/worker_channel.h).
REQUEST = struct.Struct("=QQQQQ")
# The answer: a code (0: the batch is the slot's first `size` bytes; else the absl::StatusCode of
# the error) and the size, then the error's message (UTF-8).
ANSWER = struct.Struct("=QQ")
LENGTH = struct.Struct("=Q")  # before each message on a worker's channel: its length
CONTROL_BYTES = 1 << 16  # the largest message on the zygote's socket
REAP_GRACE = 2.0  # seconds a worker whose channel closed has to exit before it is SIGKILLed
CLOSE_GRACE = 5.0  # seconds the workers have to exit once the pool closes
ANSWER_TIMEOUT = 30.0  # seconds the zygote has to answer a request (a fork; a reap: REAP_GRACE)
STACK_WAIT = 2.0  # seconds a stuck zygote has to write its stack before it is SIGKILLed


def send_message(sock: socket.socket, payload: bytes, fds: Sequence[int] = ()) -> None:
    """Sends one message (its length, then `payload`) on a worker's channel, with `fds` passed
    along (SCM_RIGHTS) on its first byte."""
    data = LENGTH.pack(len(payload)) + payload
    sent = socket.send_fds(sock, [data], list(fds)) if fds else 0
    if sent < len(data):  # (a send of nothing would fail once a quick worker has died)
        sock.sendall(memoryview(data)[sent:])


def receive_message(sock: socket.socket) -> Tuple[bytes, List[int]]:
    """The next message on a worker's channel and the descriptors that came with it. Raises
    EOFError once the other end has closed. Requests and answers alternate, so a message's
    descriptors come with its first byte and no read spans two messages."""
    head, fds, _, _ = socket.recv_fds(sock, LENGTH.size, 4)
    if not head:
        raise EOFError
    while len(head) < LENGTH.size:
        more = sock.recv(LENGTH.size - len(head))
        if not more:
            raise EOFError
        head += more
    (size,) = LENGTH.unpack(head)
    payload = bytearray(size)
    view, got = memoryview(payload), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError
        got += n
    return bytes(payload), fds


class _WorkerSlot:
    """A worker's read-write mapping of one of its shared-memory slots (src/producer/
    batch_slots.h), grown when a batch needs more."""

    def __init__(self, fd: int, capacity: int) -> None:
        self.fd, self.capacity = fd, capacity
        self.view = mmap.mmap(fd, capacity)

    def allocate(self, size: int) -> mmap.mmap:
        """The mapping, of at least `size` bytes (the memfd is grown first if needed)."""
        if size > self.capacity:
            page = mmap.PAGESIZE
            capacity = max(size, 2 * self.capacity)
            capacity = (capacity + page - 1) // page * page
            self.view.close()  # no batch views it: each is dropped before the next request
            os.ftruncate(self.fd, capacity)
            self.capacity = capacity
            self.view = mmap.mmap(self.fd, capacity)
        return self.view

    def close(self) -> None:
        self.view.close()
        os.close(self.fd)


def _worker_main(pipeline: Any, channel: int) -> None:
    """A worker: makes the batches it is asked for, each laid out straight into the shared-memory
    slot the request names (its descriptor comes with the first request that names it), until
    its channel (a socket's file descriptor) closes. The answer (0, size) says the batch's bytes
    are the slot's first `size` bytes; (code, 0) and a message why there is no batch."""
    sock = socket.socket(fileno=channel)
    slots: Dict[int, Any] = {}
    try:  # a batch's records are held at once, then freed: keep that memory for the next batch
        _croupier.keep_freed_memory_for_reuse()
    except errors.Error:
        pass  # not glibc's allocator: its own policy
    while True:
        try:
            request, fds = receive_message(sock)
        except (EOFError, OSError):
            return
        epoch, g, slot_id, capacity, forget = REQUEST.unpack_from(request)
        tail = np.frombuffer(request, dtype=np.uint64, offset=REQUEST.size)
        for old in tail[:forget]:
            gone = slots.pop(int(old), None)
            if gone is not None:
                gone.close()
        ids = tail[forget:].copy()
        if fds:
            slots[slot_id] = _WorkerSlot(fds[0], capacity)
            for extra in fds[1:]:
                os.close(extra)
        try:
            batch = pipeline.make(epoch, g, ids, allocate=slots[slot_id].allocate)
            reply = ANSWER.pack(0, batch.nbytes)
            del batch  # it views the slot, which may be remapped for the next batch
        except BatchError as e:
            reply = ANSWER.pack(e.code, 0) + str(e).encode("utf-8", "replace")
        except Exception as e:  # a bug of croupier's or an unexpected failure: say where
            reply = ANSWER.pack(errors.INTERNAL, 0) + (
                f"{describe(e)}\n{''.join(traceback.format_exc(limit=4))}").encode(
                    "utf-8", "replace")
        try:
            send_message(sock, reply)
        except OSError:
            return


def _zygote_main(pipeline: Any, control: socket.socket, stacks: Any) -> None:
    """The zygote: writes its stack to the file `stacks` on SIGUSR1; answers the requests on
    `control` until the producer closes its end, then waits for its workers (they exit once the
    producer has closed their channels), SIGKILLing those still running after CLOSE_GRACE
    seconds. Requests and answers:
      ("spawn",) with the worker's channel's file descriptor: ("spawned", pid) of a new worker,
        or ("error", message) if none could be forked;
      ("reap", pid): ("reaped", wait status or None) once worker `pid` has exited (it is
        SIGKILLed if it has not within REAP_GRACE seconds)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # reaping is its job, whatever the producer's
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
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
            reply = _spawn_worker(pipeline, control, fds, workers)
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


def _spawn_worker(pipeline: Any, control: socket.socket, fds: List[int],
                  workers: Set[int]) -> Tuple[str, Any]:
    """Forks a worker on the file descriptor in `fds` (its channel), which the zygote closes
    then; adds its pid to `workers`. The answer to a "spawn" request."""
    try:
        if len(fds) != 1:
            return ("error", f"a spawn request came with {len(fds)} file descriptors, not 1")
        pid = fork(_worker_main, pipeline, fds[0], close=(control,))
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
        self._stacks = tempfile.TemporaryFile()  # where it writes its stack when it is stuck
        try:
            self.pid = fork(_zygote_main, pipeline, theirs, self._stacks, close=(self._control,))
        except BaseException:
            self._control.close()
            self._stacks.close()
            raise
        finally:
            theirs.close()
        self._control.settimeout(ANSWER_TIMEOUT)
        self._lock = threading.Lock()
        self._gone: Optional[str] = None  # why it answers no more

    def spawn(self, channel: int) -> int:
        """The pid of a new worker on that channel's file descriptor (the zygote gets a copy)."""
        reply = self._ask(("spawn",), (channel,))
        if reply[0] != "spawned":
            raise ZygoteError(reply[1])
        pid: int = reply[1]
        return pid

    def reap(self, pid: int) -> Optional[int]:
        """The wait status of worker `pid` once it has exited (None if unknown)."""
        status: Optional[int] = self._ask(("reap", pid))[1]
        return status

    def _ask(self, request: Tuple[Any, ...], fds: Sequence[int] = ()) -> Any:
        with self._lock:
            if self._gone is None:
                try:
                    if fds:
                        socket.send_fds(self._control, [pickle.dumps(request)], list(fds))
                    else:
                        self._control.send(pickle.dumps(request))
                    data = self._control.recv(CONTROL_BYTES)
                except TimeoutError:
                    self._gone = (f"the pool's zygote process (pid {self.pid}) did not answer a "
                                  f"{request[0]} request within {ANSWER_TIMEOUT:g} s and was "
                                  "killed, and with it every worker: none can be replaced. "
                                  f"Where it was stuck:\n{self._stack_then_kill()}")
                    raise ZygoteError(self._gone) from None
                except OSError:
                    data = b""
                if data:
                    return pickle.loads(data)
                ended = how_it_ended(reap(self.pid, REAP_GRACE))
                self._gone = (f"the pool's zygote process (pid {self.pid}) is gone ({ended}), "
                              "and with it every worker: none can be replaced")
            raise ZygoteError(self._gone)

    def _stack_then_kill(self) -> str:
        """The stack the stuck zygote writes on SIGUSR1 (waited for up to STACK_WAIT seconds);
        SIGKILLs and reaps it then."""
        deadline = time.monotonic() + STACK_WAIT
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except ProcessLookupError:
            deadline = 0.0
        written = -1
        while time.monotonic() < deadline:
            time.sleep(0.1)
            size = os.fstat(self._stacks.fileno()).st_size
            if size and size == written:
                break  # it has stopped writing
            written = size
        reap(self.pid, 0.0)
        self._stacks.seek(0)
        stack = self._stacks.read().decode("utf-8", "replace").strip()
        return stack or "(it wrote no stack)"

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
            self._stacks.close()
            if self._gone is None:
                self._gone = "the pool is closed"
                reap(self.pid, CLOSE_GRACE + 2.0)
