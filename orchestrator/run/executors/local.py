"""The `local` executor: every array task of a script runs here, one after another, with bash as Slurm would run
it; a failed task does not stop the rest. Its task ids (local_0, local_1, ...) name no Slurm task, so status never
asks Slurm about them. It needs no cluster: Slurm is not asked what it has, and no array limit applies."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.errors import OrchestratorError
from orchestrator.run.executors.base import Executor, ScriptJob, Submission, Submitting, run_array_task
from orchestrator.run.wait import OutputsWritten

LOCAL_TASK_PREFIX = "local_"  # the local executor's task ids (local_0, local_1, ...): Slurm never knew them
JOB_ID = "local"  # the job id its submissions record


class Local(Executor):
    name = "local"
    on_slurm = False
    runs_here = True

    def submit(self, job: ScriptJob, how: Submitting) -> Submission:
        """Run every array index of the script here, its lines shown as they come."""
        sub = Submission(job.key, JOB_ID, [local_task_id(i) for i in range(job.tasks)])
        for index in range(job.tasks):
            log = job.logs / self.log_name(job.job_name, local_task_id(index), index)
            how.report(f"{job.key}: running array task {index + 1} of {job.tasks} here (log {log})")
            try:
                run_array_task(str(job.script), index, str(log), show=lambda line: how.report(f"  | {line}"))
            except OrchestratorError as exc:
                sub.failed[index] = str(exc)
                how.report(str(exc))
        return sub

    def resubmit(self, job: ScriptJob, indices: list[int], attempt: int, how: Submitting) -> Submission:
        """The tasks' ids: they run in run_resubmitted, once the manifest has recorded them."""
        return Submission(job.key, JOB_ID, [local_task_id(i) for i in indices])

    def run_resubmitted(self, job: ScriptJob, indices: list[int], how: Submitting) -> dict[int, str]:
        failed = {}
        for i in indices:
            log = job.logs / self.log_name(job.job_name, local_task_id(i), i)
            try:
                run_array_task(str(job.script), i, str(log))
            except OrchestratorError as exc:
                failed[i] = str(exc)
                how.report(str(exc).splitlines()[0])
        return failed

    def wait(self, submissions: list[Submission], outputs: OutputsWritten, report: Callable[[str], None]) -> None:
        """Nothing to wait for: the tasks ran before submit returned."""


def local_task_id(index: int) -> str:
    return f"{LOCAL_TASK_PREFIX}{index}"


def is_slurm_task(task_id: str) -> bool:
    """Whether a campaign's task id names a Slurm task: not empty (never submitted), not the local executor's."""
    return bool(task_id) and not task_id.startswith(LOCAL_TASK_PREFIX)
