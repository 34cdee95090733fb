"""The `slurm` executor: each script goes to Slurm with sbatch, one array job per script (or one per part where
the script has more tasks than an array may hold), never one job per cell; a resubmission is one sbatch of the
missing indices (`--array=3,7-9`). Each sbatch call is made in `sbatch_call` and recorded as soon as it answers;
waiting polls squeue (`wait`). The only executor whose cells may start several processes (srun inside the
allocation)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.plan.manifest import ArrayRecord
from orchestrator.run.executors.base import Executor, ScriptJob, Submission, Submitting
from orchestrator.run.sbatch_call import SbatchRefused, array_job_name, recorded_sbatch
from orchestrator.run.wait import OutputsWritten, wait_for_slurm


class Slurm(Executor):
    name = "slurm"
    on_slurm = True
    starts_several_processes = True

    def submit(self, job: ScriptJob, how: Submitting) -> Submission:
        return submit_sbatch(job.key, job.script, job.tasks, how.max_array, campaign=job.campaign_dir.name,
                             record=how.record, throttle=how.profile.array_spec)

    def resubmit(self, job: ScriptJob, indices: list[int], attempt: int, how: Submitting) -> Submission:
        """One sbatch per part of the indices (blocks), each named `:rerunN` so that Slurm can find it again."""
        task_ids: dict[int, str] = {}
        arrays = []
        for offset, local in blocks(indices, how.max_array):
            entry = ArrayRecord(job.key, offset, len(local), self.name, indices=local,
                                job_name=f"{array_job_name(job.campaign_dir.name, job.key, offset)}:rerun{attempt}")
            job_id = recorded_sbatch(job.script, (str(offset),) if offset else (),
                                     (f"--array={how.profile.array_spec(array_expression(local))}",), entry, how.record)
            task_ids.update({offset + i: f"{job_id}_{i}" for i in local})
            arrays.append({"job_id": job_id, "offset": offset, "count": len(local)})
        return Submission(job.key, arrays[0]["job_id"], [task_ids[i] for i in indices], arrays=arrays)

    def wait(self, submissions: list[Submission], outputs: OutputsWritten, report: Callable[[str], None]) -> None:
        report("waiting for the jobs to finish (polling squeue with back-off)")
        wait_for_slurm(submissions, report=report, woken=outputs)


def submit_sbatch(framework: str, script: Path, n_tasks: int, max_array: int | None = None,
                  campaign: str | None = None, record: Callable[[ArrayRecord], None] | None = None,
                  throttle: Callable[[str], str] = str) -> Submission:
    """One sbatch call for the whole array, or one per part of at most `max_array` tasks.

    A part is `sbatch --array=0-K script OFFSET`: its task i runs cell OFFSET+i (the script adds them). With a
    `campaign`, each array job is named <framework>:<campaign>:<offset>, and `record` is called with
    each part's outcome (submitted with its job id, refused, or unknown) as soon as sbatch returns, before
    anything else can fail. `throttle` (ClusterProfile.array_spec) adds the profile's %N to a part's --array,
    which replaces the script's own #SBATCH --array and its %N.
    """
    whole = max_array is None or n_tasks <= max_array
    parts = [(0, n_tasks)] if whole else [(o, min(max_array, n_tasks - o)) for o in range(0, n_tasks, max_array)]
    arrays, task_ids = [], []
    for number, (offset, count) in enumerate(parts, 1):
        options: tuple[str, ...] = () if whole else (f"--array={throttle(f'0-{count - 1}')}",)
        args = () if whole else (str(offset),)
        entry = ArrayRecord(framework, offset, count, Slurm.name,
                            job_name=array_job_name(campaign, framework, offset) if campaign else "")
        try:
            job_id = recorded_sbatch(script, args, options, entry, record if campaign else None)
        except OrchestratorError as exc:
            if whole:
                raise
            where = f"part {number} of {len(parts)}; parts already submitted: " + (
                ", ".join(a["job_id"] for a in arrays) or "none")
            if isinstance(exc, SbatchRefused):
                raise SbatchRefused(exc.script, exc.said, where) from None
            raise type(exc)(f"{exc} ({where})") from None
        arrays.append({"job_id": job_id, "offset": offset, "count": count})
        task_ids += [f"{job_id}_{i}" for i in range(count)]
    return Submission(framework, arrays[0]["job_id"], task_ids, arrays=arrays)


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
