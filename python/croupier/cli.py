"""croupier.cli: `python -m croupier produce module:function --dispatcher HOST:PORT --job NAME`,
a producer of a map job from a shell (croupier.produce() with the function's arguments);
without module:function, a producer of a tokens job with text sources (croupier.tokens.produce).
"""
import argparse
import importlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, Dict, List, Optional

from croupier import errors, object_store, tokens
from croupier.map.pool import default_workers
from croupier.runtime.processes import describe
from croupier.map.producer import produce
from croupier.map.record_cache import summary

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


class _HelpWithDefaults(argparse.HelpFormatter):
    """A flag's help ends with its default, where it has one (as the croupier command's help)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, "", argparse.SUPPRESS) and not action.required:
            text += f" (default: {action.default})"
        return text


# Where Debian's libjemalloc2 puts the library (and other distributions' names for it).
JEMALLOC = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
            "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2", "/usr/lib64/libjemalloc.so.2",
            "/usr/lib/libjemalloc.so.2")


def _with_jemalloc(argv: List[str]) -> None:
    """Runs this command again (exec, the same process) with jemalloc preloaded, if it is
    installed and not loaded yet: the producer of a tokens job spends most of its CPU in the
    tokenizer, which allocates for every word, and about 30% less of it on jemalloc than on
    glibc's malloc (bench/bench_tokens.py). CROUPIER_MALLOC=system keeps the system's."""
    if os.environ.get("CROUPIER_MALLOC", "") == "jemalloc":
        # Run again with it: the processes this one starts get the environment as it was.
        rest = [p for p in os.environ.get("LD_PRELOAD", "").split() if p not in JEMALLOC]
        if rest:
            os.environ["LD_PRELOAD"] = " ".join(rest)
        else:
            os.environ.pop("LD_PRELOAD", None)
        del os.environ["CROUPIER_MALLOC"]
        return
    if os.environ.get("CROUPIER_MALLOC", "") == "system":
        return
    library = next((p for p in JEMALLOC if os.path.exists(p)), None)
    if library is None:
        print("croupier produce: jemalloc is not installed (Debian: libjemalloc2); tokenizing "
              "on the system's malloc costs about 30% more CPU", file=sys.stderr, flush=True)
        return
    preload = " ".join(filter(None, [library, os.environ.get("LD_PRELOAD", "")]))
    env = dict(os.environ, LD_PRELOAD=preload, CROUPIER_MALLOC="jemalloc")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "croupier", "produce", *argv], env)


def main(argv: Optional[List[str]] = None) -> int:
    """`croupier produce module:function --dispatcher HOST:PORT --job NAME` (or `python -m
    croupier produce ...`): a producer of a map job, on any machine that can import `module`.
    function() returns produce()'s keyword arguments as a dict (source, batch_size, transform,
    epochs, ...); the flags here set where it serves, with how many workers and how large a record
    cache. Prints the record cache's counts when it ends, if it had one. Without module:function:
    a producer of tokens job NAME, which tokenizes its text sources (croupier.tokens.produce)."""
    parser = argparse.ArgumentParser(prog="croupier produce", description=main.__doc__,
                                     formatter_class=_HelpWithDefaults)
    parser.add_argument("pipeline", metavar="MODULE:FUNCTION", nargs="?", default=None,
                        help="the function returning produce()'s arguments; none: the job is a "
                             "tokens job with text sources, which this producer tokenizes")
    parser.add_argument("--dispatcher", required=True, metavar="HOST:PORT",
                        help="the dispatcher's address (required)")
    parser.add_argument("--job", required=True, metavar="NAME",
                        help="the job to produce: a map job, or a tokens job with text sources "
                             "(required)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help=f"worker processes; none: {default_workers()}, the cores here (0 "
                             "with tf_transform, which forks none)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="the producer's threads; none: produce()'s default")
    parser.add_argument("--transform-threads", default=None, metavar="N|auto",
                        help="threads per worker process for the records' read, decode and "
                             "transform (work that releases the GIL); 'auto' measures; none: "
                             "what the function returns, or 1")
    parser.add_argument("--cache-bytes", type=int, default=None, metavar="B",
                        help="the record cache's size on /dev/shm, in bytes; none: what the "
                             "function returns, or 0 (no cache)")
    parser.add_argument("--auth-token", default=None, metavar="TOKEN",
                        help="the cluster's token; none: $CROUPIER_AUTH_TOKEN")
    parser.add_argument("--bind", default="127.0.0.1", metavar="ADDR",
                        help="the address the data server listens on")
    parser.add_argument("--advertise-host", default="", metavar="HOST",
                        help="the host consumers reach it at; empty: the bind address")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="seconds to wait for the dispatcher")
    parser.add_argument("--drain-timeout", type=float, default=None, metavar="S",
                        help="on SIGTERM or SIGINT, seconds to serve the batches it has made "
                             "before leaving (a second signal leaves at once); none: 5")
    parser.add_argument("--worker-timeout", type=float, default=None, metavar="S",
                        help="seconds a worker process has to make a batch before it is killed "
                             "and replaced (the batch made again); none: 600")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="P",
                        help="serve Prometheus metrics on the bind address at this port (0: a "
                             "free one); none: no metrics")
    parser.add_argument("--metrics-port-file", default=None, metavar="FILE",
                        help="write the metrics port to this file once serving")
    args = parser.parse_args(argv)
    if args.pipeline is None:
        _with_jemalloc(sys.argv[1:] if argv is None else list(argv))
    try:
        source: Any = None
        options: Dict[str, Any] = {}
        if args.pipeline is not None:
            options = load(args.pipeline)()
            if not isinstance(options, dict) or "source" not in options:
                raise errors.InvalidArgumentError(
                    f"{args.pipeline}() must return a dict of produce() arguments with 'source'")
            options = dict(options)
            source = options.pop("source")
        for key in ("workers", "threads", "transform_threads", "cache_bytes", "auth_token",
                    "timeout", "drain_timeout", "worker_timeout", "metrics_port",
                    "metrics_port_file"):
            if getattr(args, key) is not None:
                options[key] = getattr(args, key)
        stop = threading.Event()

        leave_now = threading.Event()

        def on_signal(signum: int, _frame: Optional[FrameType]) -> None:
            if not stop.is_set():
                print(f"croupier produce: signal {signum}: leaving (serving what it has made, "
                      "handing the rest back) and stopping", flush=True)
                stop.set()
            elif not leave_now.is_set():
                print(f"croupier produce: signal {signum}: leaving now", flush=True)
                leave_now.set()

        def graceful() -> None:
            # Once serving: a signal stops the producer cleanly (it drains: serves what it has
            # made, hands the rest back; a second signal leaves at once). Until then the default
            # action ends the process at once: a Python handler would run only after the wait for
            # the dispatcher (up to --timeout) returned.
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)

        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if args.pipeline is None:
            unused = sorted(set(options) - {"threads", "auth_token", "timeout", "drain_timeout",
                                            "metrics_port", "metrics_port_file"})
            if unused:
                raise errors.InvalidArgumentError(
                    "a tokens job's producer takes no " +
                    ", ".join("--" + k.replace("_", "-") for k in unused))
            done = tokens.produce(args.dispatcher, args.job, bind=args.bind,
                                  advertise_host=args.advertise_host, stop=stop,
                                  on_serving=graceful, leave_now=leave_now, **options)
            done["record_cache"] = None
        else:
            done = produce(source, args.dispatcher, args.job, bind=args.bind,
                           advertise_host=args.advertise_host, stop=stop, on_serving=graceful,
                           leave_now=leave_now, **options)
        if done["drained"] is not None:
            print(f"croupier produce: job '{args.job}': drained: served "
                  f"{done['drained']['served']} of the {done['drained']['kept']} tasks it had "
                  "made, and left the job", flush=True)
        if done["record_cache"] is not None:
            print(f"croupier produce: job '{args.job}': {summary(done['record_cache'])}",
                  flush=True)
        if done.get("object_store") is not None:
            print(f"croupier produce: job '{args.job}': "
                  f"{object_store.summary(done['object_store'])}", flush=True)
    except errors.Error as e:
        print(f"croupier produce: {type(e).__name__}: {e}", flush=True)
        return 1
    return 0
