"""How long the command line waits on Slurm before it says so or gives up: sbatch's answer, a queue that cannot be
read, accounting's record of a task that left the queue. Each has a default and an environment variable that
changes it (docs/usage.md).

Each is read from the environment when it is used; check_all reads them all before a launch writes anything
(orchestrator.run.launch), so that a bad value is refused first."""

from __future__ import annotations

import math
import os

from orchestrator.errors import UsageError


def seconds(variable: str, default: float) -> float:
    """The environment variable `variable` as a number of seconds, `default` where it is unset or empty; a value
    that is not a positive finite number is refused in one sentence."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"{variable} must be a positive number of seconds, not {raw!r}")
    return value


def sbatch_timeout_s() -> float:
    """After this long without sbatch's answer, whether Slurm accepted the array is unknown."""
    return seconds("ORCHESTRATOR_SBATCH_TIMEOUT_S", 120.0)


def sbatch_slow_s() -> float:
    """After this long without sbatch's answer, a line on stderr says that sbatch waits."""
    return seconds("ORCHESTRATOR_SBATCH_SLOW_S", 10.0)


def watch_unreadable_s() -> float:
    """How long the queue may stay unreadable before watch gives up (StateUnknown): a controller restart or a
    failover takes minutes, and watch goes on through it; a squeue that never answers is said within this."""
    return seconds("ORCHESTRATOR_WATCH_UNREADABLE_S", 600.0)


def watch_accounting_lag_s() -> float:
    """How long watch polls on while a Slurm task is neither in the queue nor in accounting, before it names it.

    Slurm's accounting records a task's end a moment after squeue stops listing it (slurmctld hands the record to
    slurmdbd in the background: seconds on a loaded controller). A fresh-clone test run saw watch name a task
    cancelled while it ran "no result" for want of that record, where the next poll would have said CANCELLED."""
    return seconds("ORCHESTRATOR_WATCH_ACCOUNTING_LAG_S", 30.0)


def check_all() -> None:
    """Read every waiting time once, so that a bad value is refused before a command writes anything."""
    for read in (sbatch_timeout_s, sbatch_slow_s, watch_unreadable_s, watch_accounting_lag_s):
        read()
