"""A progress bar on stderr for long scripts (the demo, the benchmark suite), like the one of
`croupier index`: on a terminal it redraws one line in place; when stderr is a file or a pipe it
prints a plain line at each tenth, so logs stay readable.

    bar = Progress("epoch 0", total=1000, unit="steps")
    for i in range(1000):
        bar.update(i + 1)
    bar.close()
"""
import sys
import time
from typing import Optional, TextIO


class Progress:
    """Not thread-safe: update and close from one thread."""

    def __init__(self, label: str, total: int, unit: str = "items", stream: Optional[TextIO] = None,
                 width: int = 30) -> None:
        self.label = label
        self.total = max(int(total), 0)
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.done = 0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._last_tenth = -1
        self._closed = False

    def line(self) -> str:
        """The text of the bar now, e.g. 'epoch 0 [#####.....] 50% 500/1000 steps, 120.0/s'."""
        fraction = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(round(fraction * self.width))
        elapsed = max(time.monotonic() - self._start, 1e-9)
        return (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                f"{fraction * 100:3.0f}% {self.done}/{self.total} {self.unit}, "
                f"{self.done / elapsed:,.1f}/s")

    def update(self, done: int) -> None:
        """Sets how much is done (clamped to [0, total]) and redraws when it is time."""
        self.done = min(max(int(done), 0), self.total) if self.total else int(done)
        now = time.monotonic()
        if self._tty:
            if now - self._last_draw >= 0.1 or self.done == self.total:
                self.stream.write("\r" + self.line())
                self.stream.flush()
                self._last_draw = now
            return
        tenth = int(10 * self.done / self.total) if self.total else 10
        if tenth != self._last_tenth:
            self._last_tenth = tenth
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Ends the line. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._tty:
            self.stream.write("\r" + self.line() + "\n")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
