"""Stopping a command cleanly: SIGINT (Ctrl-C), SIGTERM and SIGHUP (a `kill`, Slurm at a job's time limit, a
dropped ssh session) end a command by an exception, so that every `finally` runs: locks are released, temporary files
removed, and a submission in flight is recorded as unknown rather than lost. A second such signal ends the
process at once, for a user who does not want to wait for that."""

from __future__ import annotations

import signal
import sys
from typing import Any, NoReturn

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A command stopped by a signal. A BaseException, as KeyboardInterrupt is: `except Exception` must not
    swallow it on its way out (and a KeyboardInterrupt typer would turn into a silent exit 130)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process ended by that signal


def _stop(signum: int, frame: Any) -> None:
    for handled in HANDLED:
        signal.signal(handled, signal.SIG_DFL)
    raise Stopped(signum)


def stop_on_signals() -> None:
    """From here on, SIGINT, SIGTERM and SIGHUP raise Stopped in the main thread; one that this process was
    started ignoring (SIGINT of a job started in the background, SIGHUP under nohup) stays ignored."""
    for signum in HANDLED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _stop)


def stopped_cause(exc: BaseException | None) -> Stopped | None:
    """The Stopped that `exc` is, or came from: a signal that lands while Python creates a class (a module imported
    on demand, a dataclass's fields set up) reaches the command as the RuntimeError "Error calling __set_name__"
    raised from it (Python 3.11), and an error raised while a stop unwinds has it as its context."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Stopped):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def stop_with(exc: BaseException) -> NoReturn:
    """A command stopped by a signal ends in one sentence on stderr and exit 128 + the signal's number, however the
    stop reached it (stopped_cause); any other exception is raised again."""
    stopped = stopped_cause(exc)
    if stopped is None:
        raise exc
    print(f"error: {stopped}", file=sys.stderr)
    sys.exit(stopped.exit_code)
