"""The signals a croupier thread leaves to the main thread (imports nothing of croupier's, so
that every module, the log reader's too, can use it)."""
import signal

__all__ = ["block_async_signals"]

# The signals a process gets from outside: Ctrl-C, kill, a terminal, a timer, a child's end.
_ASYNC_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                            signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGCHLD})


def block_async_signals() -> None:
    """Runs first in each thread croupier starts: blocks the signals a process gets from outside,
    so that the kernel delivers them to the main thread. Python runs signal handlers there only,
    and a signal the kernel gives another thread does not interrupt the main thread's blocking
    call (a sleep, a read): a Ctrl-C would wait until that call returns."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNC_SIGNALS)
