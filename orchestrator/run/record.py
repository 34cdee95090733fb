"""The campaign manifest's record of what was submitted: each sbatch call's outcome as soon as it returns, and the
tasks that failed while a command waited; and the results folder's lock, which lets one command at a time plan or
submit there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.plan.manifest import MANIFEST, SUBMITTED, ArrayRecord, Manifest, load_manifest, save_manifest
from orchestrator.run.file_lock import exclusive


# In a results folder: one command at a time plans or submits there (the default command, and resubmit of any
# of its campaigns), so that the same cells are never submitted twice by two commands at once.
SUBMIT_LOCK = ".launch.lock"


def submitting(results_dir: Path, doing: str, wait_s: float = 0.0):
    """The results folder's submission lock, held while the block runs; a second holder is refused (at once, or
    after waiting wait_s for it) in one sentence naming the first."""
    return exclusive(results_dir / SUBMIT_LOCK, doing, wait_s)


RECORD_WAIT_S = 600.0  # how long recording the failures of waited-for jobs waits for another command's submission


def record_failed(campaign_dir: Path, failed: dict[str, dict[int, tuple[str, str]]], doing: str) -> None:
    """Record the tasks that failed while a command waited for them ({script key: {array index: (task id, why)}}).
    The wait held no lock, so take it again, read the manifest afresh and mark only the tasks that are still their
    cell's latest: what another command submitted and recorded meanwhile is kept."""
    with submitting(campaign_dir.parent, doing, RECORD_WAIT_S):
        manifest = load_manifest(campaign_dir)
        for key, tasks in failed.items():
            sub = manifest.submissions[key]
            sub.failed = sub.failed or {}  # {} once waited for: none failed
            for index, (task_id, why) in tasks.items():
                if sub.task_ids[index] == task_id:
                    sub.failed[index] = why
        save_manifest(campaign_dir, manifest)


def recorder(campaign_dir: Path, manifest: Manifest) -> Callable[[ArrayRecord], None]:
    """Records each sbatch call's outcome (sbatch's own, or submitit's) in the manifest as soon as it returns.
    Should the manifest not be written, the error names the job id, so that a submitted array is never lost."""
    def record(entry: ArrayRecord) -> None:
        entry = manifest.record_array(entry)
        try:
            save_manifest(campaign_dir, manifest)
        except OSError as exc:
            if entry.state == SUBMITTED:
                tasks = (f"array tasks {entry.offset} to {entry.offset + entry.count - 1}"
                         if entry.indices is None else f"{entry.count} array tasks submitted again")
                raise OrchestratorError(
                    f"job {entry.job_id} ({entry.script}, {tasks}) was submitted, but {campaign_dir / MANIFEST} "
                    f"could not be written ({exc}): keep this id, or cancel it with `scancel {entry.job_id}` "
                    "before running the same command again") from None
            raise OrchestratorError(f"{entry.reason}; and {campaign_dir / MANIFEST} could not be "
                                    f"written ({exc})") from None
    return record
