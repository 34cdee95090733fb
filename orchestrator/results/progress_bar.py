"""The progress bar collect shows on stderr while it reads task files."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from bench_contract.run.progress import duration
from orchestrator.run.progress import text_bar

# The progress bar while reading task files (Progress): shown by default on a terminal when at least this many
# files are read, redrawn at most this often there, and every PROGRESS_LOG_S where forced on into a file or pipe.
PROGRESS_MIN_FILES = 1000
PROGRESS_REDRAW_S = 0.2
PROGRESS_LOG_S = 5.0


class Progress:
    """`collect: [#######.......] 5,120/10,000 task files read, 2,310 files/s, about 2s left` on `stream` (stderr).

    Redrawn in place (a carriage return) on a terminal, at most every PROGRESS_REDRAW_S; one line every
    PROGRESS_LOG_S elsewhere (forced on, e.g. into a batch job's log). Collect advances it once per batch of
    files read, so it costs a clock reading per batch. `clock` is for tests."""

    def __init__(self, total: int, stream=None, enabled: bool = True, clock: Callable[[], float] = time.monotonic):
        self.total, self.stream, self.clock = total, stream, clock
        self.enabled = enabled and stream is not None and total > 0
        self.terminal = self.enabled and stream.isatty()
        self.every = PROGRESS_REDRAW_S if self.terminal else PROGRESS_LOG_S
        self.read, self.width = 0, 0
        self.start = self.last = clock()

    def advance(self, files: int) -> None:
        self.read += files
        now = self.clock()
        if self.enabled and now - self.last >= self.every:
            self.last = now
            self.draw(now, end="")

    def done(self) -> None:
        """The last state, always drawn (on a terminal, its line ends here)."""
        if self.enabled:
            self.draw(self.clock(), end="\n")

    def draw(self, now: float, end: str) -> None:
        line = self.line(now)
        self.width = max(self.width, len(line))
        if self.terminal:  # padded: a shorter line leaves nothing of the longer one it overwrites
            self.stream.write("\r" + line.ljust(self.width) + end)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def line(self, now: float) -> str:
        elapsed = now - self.start
        rate = self.read / elapsed if elapsed > 0 else 0.0
        left = f", about {duration((self.total - self.read) / rate)} left" if rate and self.read < self.total else ""
        return (f"collect: {text_bar(self.read, self.total)} {self.read:,}/{self.total:,} task files read, "
                f"{rate:,.0f} files/s{left}")


def progress_for(total: int, forced: bool | None, stream=None) -> Progress:
    """The bar for reading `total` files: `forced` True or False says so; None (the default) shows it when
    `stream` (stderr) is a terminal and there are at least PROGRESS_MIN_FILES, so tests and pipes stay quiet."""
    stream = sys.stderr if stream is None else stream
    shown = forced if forced is not None else stream.isatty() and total >= PROGRESS_MIN_FILES
    return Progress(total, stream, enabled=shown)
