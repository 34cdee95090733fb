"""The interface every executor implements (Executor), what a submission of one script becomes (Submission), and
what the executors share: an array task run by bash as Slurm would run it, and the end of a task's log.

An executor hands a campaign's rendered array scripts to something that runs them: Slurm through sbatch
(`slurm`), Slurm through submitit (`submitit`), or this machine (`local`). All of them run the same script, so
what a person reads in slurm_scripts/ is what runs. Each lives in its own module and is found by its name in the
registry (`orchestrator.run.executors`); this module holds their common part apart from that registry, so that
the executors' modules and the registry import it without an import circle.
"""

from __future__ import annotations

import os
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan.manifest import ArrayRecord
from orchestrator.plan.profile import ClusterProfile
from orchestrator.run.limits import array_limit
from orchestrator.run.progress import run_streaming
from orchestrator.run.wait import OutputsWritten


@dataclass
class Submission:
    """What one script's tasks became: an array job id, and one task id per array index submitted (every index of
    the script, or a resubmission's indices in their order).

    An array larger than the cluster allows goes in several parts (`arrays`), each its own Slurm array job;
    `job_id` is then the first part's, and task_ids name each cell's task in whichever part holds it.
    """

    framework: str  # the script's key: its framework, "paired", or either with a system
    job_id: str
    task_ids: list[str]
    failed: dict[int, str] = field(default_factory=dict)  # position in task_ids -> reason, where known
    arrays: list[dict] = field(default_factory=list)  # [{"job_id", "offset", "count"}], one per sbatch call
    jobs: list = field(default_factory=list, repr=False)  # submitit's jobs, to wait for; none for the others

    @property
    def job_ids(self) -> list[str]:
        return [a["job_id"] for a in self.arrays] or [self.job_id]


@dataclass(frozen=True)
class ScriptJob:
    """One of a campaign's scripts as an executor submits it: its key, the campaign's copy of the script, its
    array tasks, the name its task logs start with, and the campaign it belongs to."""

    key: str
    script: Path
    tasks: int
    job_name: str  # the script's name without .sh: its logs are logs/<job_name>_<task>.out
    system: str
    campaign_dir: Path

    @property
    def logs(self) -> Path:
        return self.campaign_dir / "logs"


@dataclass(frozen=True)
class Submitting:
    """What every submission of one command shares: the campaign's profile, the most tasks one array may hold
    where the executor submits to Slurm (None: no limit), `record`, which writes each array's outcome into the
    manifest as soon as it is known (orchestrator.run.record.recorder), and `report`, where progress is said."""

    profile: ClusterProfile
    max_array: int | None
    record: Callable[[ArrayRecord], None] | None
    report: Callable[[str], None] = print


class Executor(ABC):
    """How a campaign's scripts run: checked before anything is planned (`check`), submitted (`submit`, and
    `resubmit` for some tasks again), waited for (`wait`), and reached again by status and resubmit (`log_name`,
    `cancelled_when_found`). One instance per executor, in the registry by its `name`."""

    name: ClassVar[str]
    # Whether it hands arrays to Slurm: Slurm is asked what it has, sbatch must be here, the cluster's
    # MaxArraySize and submit limits apply, and a job can be chained after the arrays (--collect-after).
    on_slurm: ClassVar[bool]
    # Whether it runs the tasks here, before submit returns: nothing is left to wait for.
    runs_here: ClassVar[bool] = False
    # Whether it can start several processes per cell (srun inside an sbatch allocation).
    starts_several_processes: ClassVar[bool] = False

    def check(self, results_dir: Path, world_size: int, collect_after: bool, follow_up: str) -> None:
        """Refuse, before anything is written, what this executor cannot do for the request (UsageError).
        `follow_up`: the collect command that a refusal of --collect-after suggests instead."""
        if collect_after and not self.on_slurm:
            raise UsageError(f"--collect-after chains a Slurm job after the arrays; the {self.name} executor runs the "
                             f"cells here, so run `{follow_up}` when it returns")
        if world_size > 1 and not self.starts_several_processes:
            raise UsageError(
                f"{world_size} processes per cell are started by srun inside an sbatch allocation; "
                f"the {self.name} executor cannot do that: use --executor slurm (or --dry-run to only write the "
                "scripts)")

    def array_limit(self, profile: ClusterProfile) -> int | None:
        """The most tasks one array job may hold where this executor submits to Slurm; None (no limit) otherwise."""
        return array_limit(profile) if self.on_slurm else None

    @abstractmethod
    def submit(self, job: ScriptJob, how: Submitting) -> Submission:
        """Submit (or run) every array task of the script; each array's outcome is recorded as it is known."""

    @abstractmethod
    def resubmit(self, job: ScriptJob, indices: list[int], attempt: int, how: Submitting) -> Submission:
        """Submit the script's tasks at these array indices again (resubmission `attempt`); the Submission's
        task_ids follow `indices`. An executor that runs tasks here runs them in `run_resubmitted`, once the
        manifest has recorded them."""

    def run_resubmitted(self, job: ScriptJob, indices: list[int], how: Submitting) -> dict[int, str]:
        """Run resubmitted tasks here, where this executor does; array index -> why, for each that failed."""
        return {}

    @abstractmethod
    def wait(self, submissions: list[Submission], outputs: OutputsWritten, report: Callable[[str], None]) -> None:
        """Until every task of the submissions has ended; each failure goes into its Submission's `failed`.
        `outputs` wakes a polling wait once every task has written its result (or failure row)."""

    def log_name(self, job_name: str, task_id: str, index: int) -> str:
        """The name of a task's log in the campaign's logs/ folder: <job name>_<task id>.out, as sbatch's %A_%a."""
        return f"{job_name}_{task_id}.out"

    def cancelled_when_found(self, job_id: str) -> str | None:
        """For an array whose submission's answer was lost, found in Slurm as `job_id` (orchestrator.run.reconcile):
        why it was cancelled, where it cannot run its tasks and its cells go again; None where it runs them."""
        return None


def failure_lines(submissions, first_line_only: bool = False) -> list[str]:
    """One line per array task that failed, for each Submission (or Resubmission): its script key, index and why."""
    return [f"FAILED {sub.framework} array task {index}: {why.splitlines()[0] if first_line_only else why}"
            for sub in submissions for index, why in sub.failed.items()]


def run_array_task(script: str, index: int, log: str, show: Callable[[str], None] | None = None) -> None:
    """Run array task `index` of a rendered script with bash, as Slurm would; raise if it fails.

    Used by the local executor, which passes `show` to see the task's lines (its progress) live as they are
    written to the log, and by submitit on the node (where it runs inside a real Slurm task, whose log is
    submitit's: showing the lines there too would write each twice).
    """
    env = dict(os.environ)
    env["SLURM_ARRAY_TASK_ID"] = str(index)
    # The orchestrator's own virtualenv must not leak into the framework's environment.
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONHOME", None)
    if show is not None:
        code = run_streaming(["bash", script], log, show=show, env=env)
    else:
        with open(log, "w") as out:
            code = subprocess.run(["bash", script], check=False, env=env, stdout=out,
                                  stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise OrchestratorError(f"array task {index} of {script} exited with code {code}; its log {log} ends with:\n"
                                f"{log_end(log)}")


LOG_LINES = 20  # the end of a failed task's log that status and collect show


def log_tail(path: str | Path, lines: int = LOG_LINES) -> list[str]:
    """The last lines of a log (read from its end, so a huge log costs no more than a small one); [] without one."""
    if not path:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def log_end(path: str | Path, lines: int = 15) -> str:
    """The end of a log as text for an error message, or a note that there is no log."""
    return "\n".join(log_tail(path, lines)) if os.path.isfile(path) else f"(no log at {path})"
