"""Where every cell of a campaign stands: pending, running, completed, failed, timed out, cancelled, or
finished without a result.

One `sacct` call per campaign (and one `squeue` call where accounting is off), never one per cell. A result
file is the final word for success: a cell whose task ended but left no result is reported as such.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from orchestrator import campaign as campaigns
from orchestrator.errors import UsageError
from orchestrator.submit import sacct_states

# Slurm's job states, grouped into what a user of a campaign needs to know.
SLURM_STATE_NAMES = {
    "PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending",
    "RESV_DEL_HOLD": "pending", "SUSPENDED": "pending",
    "RUNNING": "running", "COMPLETING": "running", "STAGE_OUT": "running", "SIGNALING": "running",
    "RESIZING": "running",
    "FAILED": "failed", "BOOT_FAIL": "failed", "NODE_FAIL": "failed", "OUT_OF_MEMORY": "failed",
    "DEADLINE": "timed out", "TIMEOUT": "timed out",
    "CANCELLED": "cancelled", "PREEMPTED": "cancelled", "REVOKED": "cancelled",
}
ACTIVE = ("pending", "running")


@dataclass(frozen=True)
class CellStatus:
    framework: str
    array_index: int
    cell_id: str
    task_id: str
    state: str  # one of: not submitted, pending, running, completed, failed, timed out, cancelled, no result
    detail: str  # the Slurm state or the reason, as reported


def find_campaign(results_dir: Path, campaign: str | None) -> Path:
    """The campaign folder named, or the newest one under results_dir."""
    if campaign:
        folder = Path(campaign) if Path(campaign).is_dir() else results_dir / campaign
        if not (folder / campaigns.MANIFEST).is_file():
            raise UsageError(f"no campaign {campaign!r} in {results_dir} (no {campaigns.MANIFEST} there)")
        return folder
    manifests = sorted(results_dir.glob(f"*/{campaigns.MANIFEST}"), key=lambda p: p.stat().st_mtime)
    if not manifests:
        raise UsageError(f"no campaign in {results_dir}; give --results-dir or a campaign id")
    return manifests[-1].parent


def squeue_states(job_ids: list[str]) -> dict[str, str]:
    """Array task id -> Slurm state for the tasks still queued or running (pending ranges are expanded)."""
    squeue = shutil.which("squeue")
    if squeue is None or not job_ids:
        return {}
    proc = subprocess.run([squeue, "-h", "-r", "-j", ",".join(job_ids), "-o", "%i %T"],
                          capture_output=True, text=True, timeout=60)
    states = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def campaign_status(folder: Path) -> list[CellStatus]:
    manifest = campaigns.load_manifest(folder)
    submissions = manifest.get("submissions", {})
    # An array split to fit MaxArraySize has one job id per part; task_ids already name every task.
    slurm_jobs = [part["job_id"] for sub in submissions.values() for part in sub.get("arrays") or [sub]
                  if part["job_id"].isdigit()]
    # sacct knows finished tasks; squeue knows queued ones (and is the only source without accounting).
    states = {**sacct_states(slurm_jobs), **squeue_states(slurm_jobs)} if slurm_jobs else {}
    cells = []
    for cell in manifest["cells"]:
        framework, index = cell["framework"], cell["array_index"]
        sub = submissions.get(cell.get("script", framework))  # a paired script runs both frameworks
        task_id = sub["task_ids"][index] if sub else ""
        has_result = Path(cell["results"]).is_file()
        if has_result:
            state, detail = "completed", "result written"
        elif sub is None:
            state, detail = "not submitted", manifest.get("submission_error", "dry run" if manifest["executor"] == "dry-run" else "")
        elif str(index) in sub.get("failed", {}):
            state, detail = "failed", sub["failed"][str(index)]
        elif task_id in states:
            slurm_state = states[task_id]
            state = SLURM_STATE_NAMES.get(slurm_state, "no result" if slurm_state == "COMPLETED" else slurm_state.lower())
            detail = slurm_state
        else:
            state, detail = "no result", "the task is not queued and wrote no result"
        cells.append(CellStatus(framework, index, cell["cell_id"], task_id, state, detail))
    return cells


def summary(cells: list[CellStatus]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for cell in cells:
        counts[cell.state] = counts.get(cell.state, 0) + 1
    return counts


def progress_bar(cells: list[CellStatus], width: int = 30) -> str:
    done = sum(1 for c in cells if c.state not in ACTIVE)
    filled = round(width * done / len(cells)) if cells else width
    counts = ", ".join(f"{n} {state}" for state, n in sorted(summary(cells).items()))
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{len(cells)} ended ({counts})"


def is_active(cells: list[CellStatus]) -> bool:
    return any(c.state in ACTIVE for c in cells)
