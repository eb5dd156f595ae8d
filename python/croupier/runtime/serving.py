"""serve_until_the_end(): the life of a producer of one job once it has started, for produce(),
tokens.produce() and serve() alike.

The life itself is C++'s (ProducerNode::Serve, src/node/producer_node.h, through
_croupier._Producer.run): the job's end, the dispatcher's silence, draining and leaving. This
module only says what the Python side owns: whether it was asked to stop (`stop`, set by a signal
handler or the caller) or the interpreter is exiting, whether the supply still works (`check`),
and whether a second signal cut a drain short (`leave_now`).
"""
import logging
import os
import threading
from typing import Any, Callable, Dict, Optional

from croupier import errors
from croupier.runtime import at_exit

__all__ = ["serve_until_the_end", "metrics_port_of", "write_port_file"]

log = logging.getLogger("croupier.pipeline")

# What owner() answers _Producer.run (OwnerSays in producer_node.h).
_SERVE, _DRAIN, _LEAVE = 0, 1, 2


def serve_until_the_end(node: Any, job: str, *, stop: Optional[threading.Event],
                        dispatcher_timeout: float, drain_timeout: float = 0.0,
                        leave_now: Optional[threading.Event] = None,
                        check: Optional[Callable[[], None]] = None,
                        on_serving: Optional[Callable[[], None]] = None,
                        early_end_grace: float = 10.0) -> Dict[str, Any]:
    """Runs `node` (a _croupier._Producer) until its job ends, `stop` is set (it then drains for
    up to drain_timeout seconds, or until `leave_now` is set) or the interpreter exits (it leaves
    at once). check() raises once the supply can make no batch any more: the producer leaves, and
    the exception is raised here. UnavailableError once the dispatcher has not
    answered for dispatcher_timeout seconds. The producer has left the job when this returns
    node.run()'s answer, whose "drained" is {"kept", "served"} or None."""
    if on_serving is not None:
        on_serving()

    def owner() -> int:
        if check is not None:
            check()
        if at_exit.exiting.is_set():
            return _LEAVE
        if stop is not None and stop.is_set():
            return _DRAIN
        return _SERVE

    ended = node.run(owner, leave_now.is_set if leave_now is not None else None,
                     float(dispatcher_timeout), float(drain_timeout), float(early_end_grace))
    drained = ended["drained"]
    if drained is not None:
        kept, served = drained
        ended["drained"] = {"kept": int(kept), "served": int(served)}
    if drained is not None and drain_timeout > 0:
        log.info("croupier produce: job '%s': drained: served %d of the %d tasks it had made, "
                 "and left the job", job, served, kept)
    return dict(ended)


def write_port_file(path: str, port: int) -> None:
    """Writes `port` to `path` whole (a reader sees no file or the port): where a producer's
    metrics are, as `croupier producer --metrics-port-file` writes it."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


def metrics_port_of(port: Optional[int], port_file: Optional[str]) -> int:
    """The metrics_port a _croupier._Producer takes for a producer's `metrics_port` (None: -1,
    none; 0: a free port) and `metrics_port_file`, checked."""
    if port is not None and not 0 <= port <= 65535:
        raise errors.InvalidArgumentError(
            f"metrics_port must be a port (0 for a free one), or None, not {port!r}")
    if port_file is not None and port is None:
        raise errors.InvalidArgumentError("metrics_port_file needs a metrics_port (0: a free one)")
    return -1 if port is None else int(port)
