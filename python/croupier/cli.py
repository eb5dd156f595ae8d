"""croupier.cli: `python -m croupier produce module:function --dispatcher HOST:PORT --job NAME`,
a producer of a map job from a shell (croupier.producer.produce() with the function's arguments).
"""
import argparse
import importlib
import signal
import threading
from typing import Any, List, Optional

from croupier import errors
from croupier.pool import default_workers
from croupier.processes import describe
from croupier.producer import produce
from croupier.record_cache import summary

__all__ = ["main"]


def load(spec: str) -> Any:
    """The object `module:attribute` names."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise errors.InvalidArgumentError(f"'{spec}' is not module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise errors.InvalidArgumentError(f"cannot import {module_name} (for {spec}): "
                                          f"{describe(e)}") from None
    obj = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise errors.InvalidArgumentError(f"{module_name} has no {attribute} (for {spec})") \
                from None
    return obj


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m croupier produce module:function --dispatcher HOST:PORT --job NAME`: a producer
    of a map job, on any machine that can import `module`. function() returns produce()'s keyword
    arguments as a dict (source, batch_size, transform, epochs, ...); the flags here set where it
    serves, with how many workers and how large a record cache. Prints the record cache's counts
    when it ends, if it had one."""
    parser = argparse.ArgumentParser(prog="python -m croupier produce", description=main.__doc__)
    parser.add_argument("pipeline", help="module:function returning produce()'s arguments")
    parser.add_argument("--dispatcher", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--workers", type=int, default=None,
                        help=f"worker processes (default {default_workers()}: the cores here; 0 "
                             "with tf_transform, which forks none)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cache-bytes", type=int, default=None,
                        help="the record cache's size on /dev/shm, in bytes (default: what the "
                             "function returns, or 0: none)")
    parser.add_argument("--auth-token", default=None)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--advertise-host", default="")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    try:
        options = load(args.pipeline)()
        if not isinstance(options, dict) or "source" not in options:
            raise errors.InvalidArgumentError(
                f"{args.pipeline}() must return a dict of produce() arguments with 'source'")
        options = dict(options)
        source = options.pop("source")
        for key in ("workers", "threads", "cache_bytes", "auth_token", "timeout"):
            if getattr(args, key) is not None:
                options[key] = getattr(args, key)
        stop = threading.Event()

        def graceful():
            # Once serving: a signal stops the producer cleanly (it leaves the job, handing its
            # tasks back). Until then the default action ends the process at once: a Python handler
            # would run only after the wait for the dispatcher (up to --timeout) returned.
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            signal.signal(signal.SIGINT, lambda *_: stop.set())

        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        done = produce(source, args.dispatcher, args.job, bind=args.bind,
                       advertise_host=args.advertise_host, stop=stop, on_serving=graceful,
                       **options)
        if done["record_cache"] is not None:
            print(f"croupier produce: job '{args.job}': {summary(done['record_cache'])}",
                  flush=True)
    except errors.Error as e:
        print(f"croupier produce: {type(e).__name__}: {e}", flush=True)
        return 1
    return 0
