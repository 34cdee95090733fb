"""The executors, found by name: `slurm` (sbatch), `submitit` and `local` (run here), each a small class in its own
module behind one interface (base.Executor): what it needs checked before planning, how it submits a campaign's
scripts and some of their tasks again, how it is waited for, whether Slurm's limits apply to it, and how status and
resubmit reach its tasks. Nothing outside these modules branches on an executor's name."""

from __future__ import annotations

from orchestrator.errors import UsageError
from orchestrator.run.executors.base import Executor, ScriptJob, Submission, Submitting
from orchestrator.run.executors.local import Local
from orchestrator.run.executors.slurm import Slurm
from orchestrator.run.executors.submitit import Submitit

# By name, in the order the help and the refusals list them.
EXECUTORS: dict[str, Executor] = {executor.name: executor for executor in (Slurm(), Submitit(), Local())}

__all__ = ["EXECUTORS", "Executor", "ScriptJob", "Submission", "Submitting", "executor"]


def executor(name: str) -> Executor:
    """The executor of that name; bad input (UsageError, one sentence) for a name none has."""
    if name not in EXECUTORS:
        raise UsageError(f"unknown executor {name!r}; choose from: {', '.join(EXECUTORS)}")
    return EXECUTORS[name]
