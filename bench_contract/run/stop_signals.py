"""Stop signals caught from a backend process's first moments, before its framework is imported.

Slurm sends SIGTERM on scancel, requeue, preemption and at the time limit (SIGKILL follows KillWait later),
and the profile's warning signal (`--signal=B:<sig>@<seconds>`) may come at any time. Importing jax takes
seconds and torch longer; a signal in that window would end the process with Python's default action, and
the cell would leave no failure row. A backend's entry point calls catch_early() before its imports: the
signal is remembered, and bench_contract.run.runner.main() acts on it once it has read the job spec.

Only the standard library here, so that this import costs nothing.
"""

from __future__ import annotations

import signal
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

received: list[int] = []


def _remember(signum: int, frame: Any) -> None:
    received.append(signum)


def catch_early() -> None:
    for signum in STOP_SIGNALS:
        signal.signal(signum, _remember)
