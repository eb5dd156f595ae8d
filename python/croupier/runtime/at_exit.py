"""Leaving the interpreter cleanly while croupier's producers run in daemon threads.

A producer (croupier.serve, croupier.produce) may run in a daemon thread that is blocked in
croupier's C++ code, with the GIL released, when the interpreter exits. Once the interpreter
finalizes, such a thread is ended the moment it takes the GIL back, from inside a C++ destructor:
the process aborts ("terminate called without an active exception"). So an atexit handler, which
runs before finalization, closes every live producer (each blocked call then returns at once)
and waits, with the GIL free, for the threads that run one to leave croupier's code."""
import atexit
import threading
import time
import weakref
from typing import Any, Set, TypeVar

_live: "weakref.WeakSet[Any]" = weakref.WeakSet()
_running: Set[threading.Thread] = set()  # threads inside serve() or produce()
_lock = threading.Lock()
_GRACE = 5.0  # seconds the exit waits for those threads
# Set when the exit begins: the loops of serve() and produce() then end.
exiting = threading.Event()

_Node = TypeVar("_Node")


def track(node: _Node) -> _Node:
    """Closes `node` (an object with close()) at exit if it is still alive then."""
    _live.add(node)
    return node


class running:
    """`with running():` around the body of serve() and produce(): the exit waits for it."""

    def __enter__(self) -> None:
        with _lock:
            _running.add(threading.current_thread())

    def __exit__(self, *exc: object) -> None:
        with _lock:
            _running.discard(threading.current_thread())


@atexit.register
def _close_all() -> None:
    exiting.set()
    for node in list(_live):
        try:
            node.close()
        except Exception:  # exiting anyway: a node that fails to close must not stop the others
            pass
    me = threading.current_thread()
    deadline = time.monotonic() + _GRACE
    while time.monotonic() < deadline:
        with _lock:
            others = [t for t in _running if t is not me and t.is_alive()]
        if not others:
            return
        time.sleep(0.01)
