"""Submit again only the cells of a campaign that have no successful result: one array per framework.

A cell is run again when it ended without a result file (failed, timed out, cancelled, no result) or was
never submitted. Cells with a result, and cells still pending or running, are left alone; with
rerun_completed the completed ones run again too, and each new result replaces the old one when it is
written. Slurm gets only the missing indices (`sbatch --array=3,7-9 SCRIPT`), so a task keeps its array
index, its spec line and its result path, and the campaign's manifest records every job id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan import campaign as campaigns
from orchestrator.plan.profile import ClusterProfile
from orchestrator.run import submit
from orchestrator.run.status import ACTIVE, SUCCESS, campaign_status

EXECUTORS = ("slurm", "submitit", "local")


@dataclass
class Resubmission:
    framework: str
    indices: list[int]
    job_ids: list[str]
    failed: dict[int, str] = field(default_factory=dict)  # array index -> why, once waited for


def cells_to_run(folder: Path, rerun_completed: bool = False) -> dict[str, list[int]]:
    """Script key (the framework, or "paired") -> the array indices to submit again, in order. Each trial is
    its own task; a paired task runs both frameworks' cells, so it goes again when either lacks a result."""
    leave = ACTIVE + (() if rerun_completed else (SUCCESS,))
    todo: dict[str, set[int]] = {}
    for cell in campaign_status(folder):
        if cell.state not in leave:
            todo.setdefault(cell.script or cell.framework, set()).add(cell.array_index)
    return {script: sorted(indices) for script, indices in todo.items()}


def array_expression(indices: list[int]) -> str:
    """Slurm's --array syntax for the indices, runs of consecutive ones as ranges: [0, 1, 2, 5, 7, 8] -> 0-2,5,7-8."""
    runs: list[list[int]] = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def blocks(indices: list[int], max_array: int | None) -> list[tuple[int, list[int]]]:
    """(offset, task ids within the part) per part: Slurm's array ids stay below MaxArraySize, so index i
    runs as task i - offset of a part whose script argument is offset (as a first submission in parts does)."""
    if max_array is None or max(indices) < max_array:
        return [(0, indices)]
    grouped: dict[int, list[int]] = {}
    for i in indices:
        offset = i // max_array * max_array
        grouped.setdefault(offset, []).append(i - offset)
    return sorted(grouped.items())


def profile_of(manifest: dict) -> ClusterProfile:
    values = dict(manifest["profile"])
    for key in ("setup_lines", "extra_sbatch"):
        values[key] = tuple(values.get(key, ()))
    return ClusterProfile(**values)


def resubmit(folder: Path, *, executor: str | None = None, rerun_completed: bool = False, wait: bool = False,
             todo: dict[str, list[int]] | None = None,
             report: Callable[[str], None] = print) -> list[Resubmission]:
    """Submit the tasks of the campaign in `folder` whose cells have no result (or `todo`): one array per script,
    that is per framework, or one for the paired script. `Resubmission.framework` is that script's key."""
    manifest = campaigns.load_manifest(folder)
    executor = executor or (manifest["executor"] if manifest["executor"] in EXECUTORS else "slurm")
    if executor not in EXECUTORS:
        raise UsageError(f"unknown executor {executor!r}; choose from: {', '.join(EXECUTORS)}")
    todo = cells_to_run(folder, rerun_completed) if todo is None else todo
    if not todo:
        report(f"campaign {folder.name}: every cell has a result or is still queued; nothing to submit")
        return []
    profile = profile_of(manifest)
    max_array = submit.array_limit(profile) if executor in ("slurm", "submitit") else None
    done = []
    for key, indices in todo.items():
        info = manifest["scripts"][key]
        script, job_name = Path(info["campaign_copy"]), info["name"].removesuffix(".sh")
        n = info["array_tasks"]
        sub = manifest["submissions"].setdefault(key, {"job_id": "", "task_ids": [""] * n})
        if "arrays" not in sub and sub["job_id"]:
            sub["arrays"] = [{"job_id": sub["job_id"], "offset": 0, "count": n}]
        task_ids: dict[int, str] = {}
        jobs = []
        if executor == "slurm":
            for offset, local in blocks(indices, max_array):
                job_id = submit.sbatch(script, *([str(offset)] if offset else []),
                                       options=(f"--array={array_expression(local)}",))
                sub.setdefault("arrays", []).append({"job_id": job_id, "offset": offset, "indices": local})
                task_ids.update({offset + i: f"{job_id}_{i}" for i in local})
        elif executor == "submitit":
            part, jobs = submit.submit_submitit(key, script, n, folder / "submitit" / key, profile,
                                                job_name, folder / "logs", max_array, indices=indices)
            sub.setdefault("arrays", []).extend(part.arrays)
            task_ids.update(zip(indices, part.task_ids))
        else:
            task_ids.update({i: f"local_{i}" for i in indices})
        for i, task_id in task_ids.items():
            sub["task_ids"][i] = task_id
            sub.get("failed", {}).pop(str(i), None)
        if not sub["job_id"]:
            sub["job_id"] = next(iter(task_ids.values())).split("_")[0]
        job_ids = sorted({t.rsplit("_", 1)[0] for t in task_ids.values()})
        manifest.setdefault("resubmissions", []).append({
            "script": key, "indices": indices, "job_ids": job_ids, "executor": executor,
            "rerun_completed": rerun_completed, "submitted_at": campaigns.now_utc()})
        manifest.pop("submission_error", None)
        # Recorded before anything runs or is waited for: a later failure does not lose these job ids.
        campaigns.save_manifest(folder, manifest)
        how = "run here" if executor == "local" else f"submitted as job {', '.join(job_ids)}"
        report(f"{key}: {len(indices)} of {n} array tasks (indices {array_expression(indices)}) {how}")
        result = Resubmission(key, indices, job_ids)
        if executor == "local":
            for i in indices:
                log = folder / "logs" / f"{job_name}_local_{i}.out"
                try:
                    submit.run_array_task(str(script), i, str(log))
                except OrchestratorError as exc:
                    result.failed[i] = str(exc)
                    report(str(exc).splitlines()[0])
        elif executor == "submitit" and wait:
            waited = submit.Submission(key, job_ids[0], [task_ids[i] for i in indices])
            submit.wait_for_submitit(waited, jobs)
            result.failed = {indices[k]: why for k, why in waited.failed.items()}
        done.append(result)
    if executor == "slurm" and wait:
        report("waiting for the jobs to finish (polling squeue with back-off)")
        waited = [submit.Submission(r.framework, r.job_ids[0], [manifest["submissions"][r.framework]["task_ids"][i]
                                                                  for i in r.indices],
                                    arrays=[{"job_id": j} for j in r.job_ids]) for r in done]
        submit.wait_for_slurm(waited, report=report)
        for r, w in zip(done, waited):
            r.failed = {r.indices[k]: why for k, why in w.failed.items()}
    if executor == "local" or wait:
        for r in done:
            failed = manifest["submissions"][r.framework].setdefault("failed", {})
            failed.update({str(i): why for i, why in r.failed.items()})
        campaigns.save_manifest(folder, manifest)
    return done
