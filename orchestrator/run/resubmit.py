"""Submit again only the cells of a campaign that have no successful result: one array per framework.

A cell is run again when it ended without a readable result file (failed, timed out, cancelled, no result,
or a bad result: empty, truncated or foreign, which is first moved aside as `<name>.bad-<UTC time>`, never
deleted) or was never submitted. Cells with a result, and cells whose latest task is still pending or running,
are left alone; with rerun_completed the completed ones run again too, and each new result replaces the old
one when it is written. When squeue or sacct cannot be read, nothing is submitted: a cell that may still be
queued is never taken for a finished one. Slurm gets only the missing indices (`sbatch --array=3,7-9 SCRIPT`),
so a task keeps its array index, its spec line and its result path, and the campaign's manifest records every
job id.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_contract.atomic import flush_to_disk
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan.manifest import (
    Manifest,
    ResubmissionRecord,
    ScriptSubmission,
    load_manifest,
    now_utc,
    save_manifest,
)
from orchestrator.plan.profile import ClusterProfile
from orchestrator.plan.settings import check_output_folder
from orchestrator.run.executors import Executor, ScriptJob, Submission, Submitting, executor
from orchestrator.run.executors.base import failure_lines
from orchestrator.run.executors.slurm import Slurm, array_expression
from orchestrator.run.reconcile import reconcile
from orchestrator.run.record import record_failed, recorder, submitting
from orchestrator.run.status import ACTIVE, NOT_NEEDED, SUCCESS, CellStatus, campaign_status, unknown_note
from orchestrator.run.wait import OutputsWritten, task_outputs


@dataclass
class Resubmission:
    framework: str
    indices: list[int]
    job_ids: list[str]
    failed: dict[int, str] = field(default_factory=dict)  # array index -> why, once waited for
    submission: Submission | None = field(default=None, repr=False)  # what the executor made of it, to wait for


def chosen_cells(folder: Path, rerun_completed: bool = False) -> list[CellStatus]:
    """The cells to run again. Refuses (OrchestratorError, nothing submitted) when the queue cannot be read."""
    if rerun_completed and any(entry.pack for entry in load_manifest(folder).scripts.values()):
        # A pack's driver does not run again a run whose result is there (that is what keeps a resubmitted pack
        # from running anything twice), so a pack would leave them as they are.
        raise UsageError(f"campaign {folder.name} runs in packs (--pack), which never run a cell with a result "
                         "again; plan it as a new campaign (--new-campaign) to measure its cells again")
    cells = campaign_status(folder)
    note = unknown_note(cells)
    if note:
        raise OrchestratorError(f"campaign {folder.name}: nothing was submitted, since {note}; run it again once "
                                "the queue can be read")
    leave = ACTIVE + (NOT_NEEDED,) + (() if rerun_completed else (SUCCESS,))
    return [cell for cell in cells if cell.state not in leave]


def by_script(cells: list[CellStatus]) -> dict[str, list[int]]:
    """Script key (the framework, or "paired") -> the array indices of these cells, in order. Each trial is its
    own task; a paired task runs both frameworks' cells, so it goes again when either lacks a result."""
    todo: dict[str, set[int]] = {}
    for cell in cells:
        todo.setdefault(cell.script or cell.framework, set()).add(cell.array_index)
    return {script: sorted(indices) for script, indices in todo.items()}


def move_aside(cells: list[CellStatus], report: Callable[[str], None] = print) -> list[Path]:
    """Rename each bad result file (empty, truncated, foreign) to `<name>.bad-<UTC time>` beside it, so that the
    cell runs again and the file stays for a look; returns the new paths."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for cell in cells:
        if not cell.bad_result:
            continue
        path = Path(cell.results)
        target, n = path.with_name(f"{path.name}.bad-{stamp}"), 1
        while target.exists():
            n += 1
            target = path.with_name(f"{path.name}.bad-{stamp}-{n}")
        path.rename(target)
        flush_to_disk(path.parent)  # the move is durable before the cell runs again and writes a new result there
        report(f"{cell.framework} {cell.array_index} ({cell.cell_id}): its result file is {cell.bad_result}; "
               f"moved aside to {target.name}")
        moved.append(target)
    return moved


def resubmit(folder: Path, *, executor: str | None = None, rerun_completed: bool = False, wait: bool = False,
             todo: dict[str, list[int]] | None = None,
             report: Callable[[str], None] = print) -> list[Resubmission]:
    """Submit the tasks of the campaign in `folder` whose cells have no result (or `todo`): one array per script,
    that is per framework, or one for the paired script. `Resubmission.framework` is that script's key.

    Choosing and submitting hold the results folder's submission lock, so that two resubmits, or a resubmit and
    the same command again, never submit the same cells twice; the manifest is read once the lock is held.
    Waiting for the jobs (`wait`) comes after, without it; their failures are then recorded under it again."""
    doing = f"`resubmit {folder.name}`"
    # The lock goes into the results folder and the record into the campaign's manifest: a folder that cannot be
    # written (a read-only mount, another user's) is refused in one sentence, as launch refuses it.
    check_output_folder(folder.parent, "results folder")
    check_output_folder(folder, "campaign folder")
    with submitting(folder.parent, doing):
        run, done = submit_missing(folder, executor, rerun_completed, todo, report)
        if done and run.executor.runs_here:  # ran here, under the lock
            run.record_failures(done)
    if not done or not wait or run.executor.runs_here:
        return done
    run.wait_for_jobs(done)
    record_failed(folder, run.failed_tasks(done), doing)
    return done


def submit_missing(folder: Path, name: str | None, rerun_completed: bool, todo: dict[str, list[int]] | None,
                   report: Callable[[str], None]) -> tuple[Rerun | None, list[Resubmission]]:
    """Settle unknown arrays, choose the cells (unless `todo`), move bad results aside and submit the tasks with the
    executor `name`: by default the campaign's, and for a dry run's campaign, which none ran, sbatch's."""
    manifest = load_manifest(folder)
    reconcile_unknown(folder, manifest, report)
    chosen_executor = executor(name or (Slurm.name if manifest.dry_run else manifest.executor))
    if todo is None:
        chosen = chosen_cells(folder, rerun_completed)
        todo = by_script(chosen)
        move_aside(chosen, report)
    if not todo:
        report(f"campaign {folder.name}: every cell has a result or is still queued; nothing to submit")
        return None, []
    run = Rerun(folder, manifest, chosen_executor, rerun_completed, report)
    return run, [run.resubmit_script(key, indices) for key, indices in todo.items()]


def reconcile_unknown(folder: Path, manifest: Manifest, report: Callable[[str], None]) -> None:
    """Arrays whose sbatch gave no answer: look them up in Slurm by their job names (one squeue and one sacct call)
    and record what was found, before anything is submitted again."""
    settled = reconcile(manifest)
    if not settled:
        return
    save_manifest(folder, manifest)
    for entry in settled:
        what = f"found as job {entry.job_id}" if entry.job_id else "not in Slurm: it was never accepted"
        if entry.state == "cancelled":  # by its executor (Executor.cancelled_when_found): its cells go again
            what += f"; {entry.reason}"
        report(f"{entry.script}: the array at offset {entry.offset} whose submission was unknown is {what}")


def resubmit_and_report(folder: Path, *, executor: str | None, rerun_completed: bool, wait: bool,
                        report: Callable[[str], None] = print, warn: Callable[[str], None] = print) -> int:
    """Resubmit (above), then warn of each array task that failed. Returns the exit code: 1 if any failed."""
    done = resubmit(folder, executor=executor, rerun_completed=rerun_completed, wait=wait, report=report)
    failed = failure_lines(done, first_line_only=True)
    for line in failed:
        warn(line)
    return 1 if failed else 0


def next_attempt(manifest: Manifest) -> int:
    """The number of the next resubmission (`:rerunN` in its arrays' job names): one more than any before, answered
    or not, so that no two arrays of a campaign share a name and reconcile finds the right one."""
    named = [int(found.group(1)) for a in manifest.arrays if (found := re.search(r":rerun(\d+)$", a.job_name))]
    return max([len(manifest.resubmissions), *named]) + 1


@dataclass
class Rerun:
    """One resubmission of a campaign's tasks, script after script, with the manifest updated as it goes."""

    folder: Path
    manifest: Manifest
    executor: Executor
    rerun_completed: bool
    report: Callable[[str], None]
    how: Submitting = field(init=False)

    def __post_init__(self) -> None:
        profile = ClusterProfile.from_dict(self.manifest.profile)  # the profile the campaign's jobs got
        # Each array's outcome is recorded as soon as it is known.
        self.how = Submitting(profile, self.executor.array_limit(profile), recorder(self.folder, self.manifest),
                              self.report)

    def job(self, key: str) -> ScriptJob:
        script = self.manifest.scripts[key]
        return ScriptJob(key, Path(script.campaign_copy), script.array_tasks, script.job_name, script.system,
                         self.folder)

    def resubmit_script(self, key: str, indices: list[int]) -> Resubmission:
        """Submit (or run) the script's tasks at these array indices, and record them before anything is waited for."""
        job = self.job(key)
        sub = self.manifest.submissions.setdefault(key, ScriptSubmission("", [""] * job.tasks))
        submission = self.executor.resubmit(job, indices, next_attempt(self.manifest), self.how)
        job_ids = self.record_tasks(key, indices, dict(zip(indices, submission.task_ids)), sub)
        how = "run here" if self.executor.runs_here else f"submitted as job {', '.join(job_ids)}"
        self.report(f"{key}: {len(indices)} of {job.tasks} array tasks (indices {array_expression(indices)}) {how}")
        result = Resubmission(key, indices, job_ids, submission=submission)
        result.failed = self.executor.run_resubmitted(job, indices, self.how)
        return result

    def record_tasks(self, key: str, indices: list[int], task_ids: dict[int, str], sub: ScriptSubmission) -> list[str]:
        """Write the new task ids into the manifest and save it; returns the job ids."""
        for i, task_id in task_ids.items():
            sub.task_ids[i] = task_id
            if sub.failed:
                sub.failed.pop(i, None)
        if not sub.job_id:
            sub.job_id = next(iter(task_ids.values())).split("_")[0]
        job_ids = sorted({t.rsplit("_", 1)[0] for t in task_ids.values()})
        self.manifest.resubmissions.append(ResubmissionRecord(key, indices, job_ids, self.executor.name,
                                                              self.rerun_completed, now_utc()))
        self.manifest.submission_error = ""
        # Recorded before anything runs or is waited for: a later failure does not lose these job ids.
        save_manifest(self.folder, self.manifest)
        return job_ids

    def task_id(self, r: Resubmission, index: int) -> str:
        """The task this resubmission submitted for the cell at `index`."""
        return self.manifest.submissions[r.framework].task_ids[index]

    def wait_for_jobs(self, done: list[Resubmission]) -> None:
        """Until every resubmitted task has ended (the executor's wait); each failure goes into `failed`."""
        waited = [Submission(r.framework, r.job_ids[0], [self.task_id(r, i) for i in r.indices],
                             arrays=[{"job_id": j} for j in r.job_ids], jobs=r.submission.jobs) for r in done]
        again = {(r.framework, index) for r in done for index in r.indices}
        cells = [c for c in self.manifest.cells if (c.script, c.array_index) in again]
        self.executor.wait(waited, OutputsWritten(task_outputs(c.results for c in cells)), self.report)
        for r, w in zip(done, waited):
            r.failed = {r.indices[k]: why for k, why in w.failed.items()}

    def failed_tasks(self, done: list[Resubmission]) -> dict[str, dict[int, tuple[str, str]]]:
        """For record.record_failed: script key -> array index -> (task id, why)."""
        return {r.framework: {i: (self.task_id(r, i), why) for i, why in r.failed.items()} for r in done}

    def record_failures(self, done: list[Resubmission]) -> None:
        for r in done:
            sub = self.manifest.submissions[r.framework]
            sub.failed = {**(sub.failed or {}), **r.failed}
        save_manifest(self.folder, self.manifest)
