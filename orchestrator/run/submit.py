"""Executors: hand the rendered array scripts to Slurm (sbatch or submitit), or run them here (local).

All three run the same script, so what a person reads in slurm_scripts/ is what runs. Slurm is called
once per script (one array job per framework), never once per cell. The cluster's limits are read in
`limits`, the queue in `queue`, each sbatch call made in `sbatch_call`, its outcome recorded in `record`, unknown
outcomes settled in `reconcile`, and `wait` waits for the arrays to end.
"""

from __future__ import annotations

import io
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.plan.campaign import CALLING_SBATCH
from orchestrator.plan.profile import ClusterProfile, slurm_seconds
from orchestrator.run.progress import run_streaming
from orchestrator.run.sbatch_call import (
    SbatchRefused,
    SubmissionUnknown,
    array_job_name,
    is_refusal,
    recorded_sbatch,
    require_command,
    saying_while_slow,
    unknown_outcome,
)


@dataclass
class Submission:
    """What one framework's script became: an array job id, and one task id per array index.

    An array larger than the cluster allows goes in several parts (`arrays`), each its own Slurm array job;
    `job_id` is then the first part's, and task_ids name each cell's task in whichever part holds it.
    """

    framework: str
    job_id: str
    task_ids: list[str]
    failed: dict[int, str] = field(default_factory=dict)  # array index -> reason, where known
    arrays: list[dict] = field(default_factory=list)  # [{"job_id", "offset", "count"}], one per sbatch call

    @property
    def job_ids(self) -> list[str]:
        return [a["job_id"] for a in self.arrays] or [self.job_id]


def failure_lines(submissions, first_line_only: bool = False) -> list[str]:
    """One line per array task that failed, for each Submission (or Resubmission): its script key, index and why."""
    return [f"FAILED {sub.framework} array task {index}: {why.splitlines()[0] if first_line_only else why}"
            for sub in submissions for index, why in sub.failed.items()]


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


# --- sbatch -----------------------------------------------------------------------------------------

def submit_sbatch(framework: str, script: Path, n_tasks: int, max_array: int | None = None,
                  campaign: str | None = None, record: Callable[[dict], None] | None = None,
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
        entry = {"script": framework, "offset": offset, "count": count}
        if campaign:
            entry["job_name"] = array_job_name(campaign, framework, offset)
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


# --- local ------------------------------------------------------------------------------------------

def run_array_task(script: str, index: int, log: str | None = None,
                   show: Callable[[str], None] | None = None) -> None:
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
    if log is None:
        code = subprocess.run(["bash", script], check=False, env=env).returncode
    elif show is not None:
        code = run_streaming(["bash", script], log, show=show, env=env)
    else:
        with open(log, "w") as out:
            code = subprocess.run(["bash", script], check=False, env=env, stdout=out,
                                  stderr=subprocess.STDOUT).returncode
    if code != 0:
        where = f"; its log {log} ends with:\n{log_end(log)}" if log else ""
        raise OrchestratorError(f"array task {index} of {script} exited with code {code}{where}")


LOCAL_TASK_PREFIX = "local_"  # the local executor's task ids (local_0, local_1, ...): Slurm never knew them


def local_task_id(index: int) -> str:
    return f"{LOCAL_TASK_PREFIX}{index}"


def is_slurm_task(task_id: str) -> bool:
    """Whether a campaign's task id names a Slurm task: not empty (never submitted), not the local executor's."""
    return bool(task_id) and not task_id.startswith(LOCAL_TASK_PREFIX)


def run_local(framework: str, script: Path, n_tasks: int, log_dir: Path, job_name: str,
              report: Callable[[str], None] = print) -> Submission:
    """Run every array index of the script here, one after another; a failed task does not stop the rest."""
    sub = Submission(framework, "local", [local_task_id(i) for i in range(n_tasks)])
    for index in range(n_tasks):
        log = log_dir / f"{job_name}_local_{index}.out"
        report(f"{framework}: running array task {index + 1} of {n_tasks} here (log {log})")
        try:
            run_array_task(str(script), index, str(log), show=lambda line: report(f"  | {line}"))
        except OrchestratorError as exc:
            sub.failed[index] = str(exc)
            report(str(exc))
    return sub


# --- submitit ---------------------------------------------------------------------------------------

def slurm_minutes(time_limit: str) -> int:
    """Minutes in a Slurm time limit (profile.slurm_seconds), rounded up."""
    return max(1, math.ceil(slurm_seconds(time_limit) / 60))


def submitit_parameters(profile: ClusterProfile, job_name: str, n_tasks: int) -> dict:
    extra = {}
    for option in profile.extra_sbatch:
        key, _, value = option.removeprefix("--").partition("=")
        extra[key.replace("-", "_")] = value or True
    if profile.account:
        extra["account"] = profile.account
    if profile.qos:
        extra["qos"] = profile.qos
    params = {
        "name": job_name,
        "timeout_min": slurm_minutes(profile.time_limit),
        "slurm_cpus_per_task": profile.cpus_per_task,
        "slurm_ntasks_per_node": 1,
        "slurm_setup": list(profile.setup_lines),
        "slurm_array_parallelism": profile.array_parallelism or n_tasks,  # submitit writes it as --array=...%N
        "slurm_additional_parameters": extra,
    }
    if profile.partition:
        params["slurm_partition"] = profile.partition
    if profile.gpus_per_task:
        params["slurm_gres"] = profile.gres(profile.gpus_per_task)
    if profile.mem:
        params["slurm_mem"] = profile.mem
    return params


def submit_submitit(framework: str, script: Path, n_tasks: int, folder: Path, profile: ClusterProfile,
                    job_name: str, log_dir: Path, max_array: int | None = None, indices: list[int] | None = None,
                    campaign: str | None = None, rerun: int | None = None,
                    record: Callable[[dict], None] | None = None):
    """Submit the script's array indices (all n_tasks, or only `indices`) as submitit arrays: one, or one per
    part of at most `max_array`. Return the Submission (task_ids in the order of the indices) and submitit's jobs.

    With a `campaign`, each array job is named as sbatch's are (array_job_name of its first cell, and
    `:rerunN` for resubmission `rerun`), and `record` gets each part's outcome (submitted, refused or unknown)
    as soon as submitit returns or raises, before anything else can fail. `job_name` names the task logs."""
    require_command("sbatch")
    import submitit  # only this executor needs it

    indices = list(range(n_tasks)) if indices is None else indices
    executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
    size = max_array if max_array is not None and len(indices) > max_array else len(indices)
    executor.update_parameters(**submitit_parameters(profile, job_name, size))
    jobs, arrays = [], []
    stderr = sys.stderr  # the user's, while submitit's own print of sbatch's refusal goes into the error

    def warn(line: str) -> None:
        print(line, file=stderr, flush=True)

    for offset in range(0, len(indices), size):
        chunk = indices[offset:offset + size]
        entry = submitit_entry(framework, chunk, campaign, rerun)
        if "job_name" in entry:
            executor.update_parameters(name=entry["job_name"])
        if record and "job_name" in entry:  # the intent first, as for sbatch
            record({**entry, "state": "unknown", "reason": CALLING_SBATCH})
        try:
            with saying_while_slow(warn), redirect_stderr(io.StringIO()), executor.batch():  # one sbatch call
                part = [executor.submit(run_array_task, str(script), i, str(log_dir / f"{job_name}_submitit_{i}.out"))
                        for i in chunk]  # each task is told its cell's index
        except Exception as exc:  # noqa: BLE001 - submitit raises its own errors, and whatever its sbatch call raised
            error = submitit_failure(script, exc)
            if record:
                record({**entry, "state": "unknown" if isinstance(error, SubmissionUnknown) else "refused",
                        "reason": str(error)})
            raise error from None
        job_id = re.sub(r"_\d+$", "", part[0].job_id)
        if record:
            record({**entry, "state": "submitted", "job_id": job_id})
        arrays.append({"job_id": job_id, "offset": offset, "count": len(chunk)})
        jobs += part
    task_ids = [job.job_id for job in jobs]
    return Submission(framework, arrays[0]["job_id"], task_ids, arrays=arrays), jobs


# How submitit numbers an array's tasks where sbatch's numbering (task i runs cell offset + i) does not hold:
IN_ORDER = "in order"  # a resubmission: its k-th cell runs as task k
ONE_JOB = "one job"  # a single task: submitit submits it as a plain job, whose only task id is the job id


def submitit_entry(framework: str, chunk: list[int], campaign: str | None, rerun: int | None) -> dict:
    """The manifest's record of one submitit array: its cells (`offset` and `count`, or a resubmission's
    `indices`), its job name with a campaign, and how its tasks are numbered where sbatch's rule does not hold."""
    if rerun is None:
        entry = {"script": framework, "offset": chunk[0], "count": len(chunk), "executor": "submitit"}
    else:
        entry = {"script": framework, "offset": 0, "count": len(chunk), "indices": chunk, "numbering": IN_ORDER,
                 "executor": "submitit"}
    if len(chunk) == 1:
        entry["numbering"] = ONE_JOB
    if campaign:
        entry["job_name"] = array_job_name(campaign, framework, chunk[0]) + (f":rerun{rerun}" if rerun else "")
    return entry


def number_submitit_tasks(manifest: dict, entry: dict) -> None:
    """The task ids of a submitted submitit array with its own numbering (IN_ORDER, ONE_JOB), where
    campaigns.add_submitted, which knows sbatch's numbering only, wrote task `cell - offset` of the job."""
    numbering = entry.get("numbering")
    if numbering not in (IN_ORDER, ONE_JOB) or entry.get("state") != "submitted":
        return
    ids = manifest["submissions"][entry["script"]]["task_ids"]
    cells = entry.get("indices") or range(entry["offset"], entry["offset"] + entry["count"])
    for k, cell in enumerate(cells):
        ids[cell] = entry["job_id"] if numbering == ONE_JOB else f"{entry['job_id']}_{k}"


def submitit_failure(script: Path, exc: Exception) -> OrchestratorError:
    """What a failed submitit submission means: sbatch's refusal (it exited non-zero: nothing was submitted),
    or an unknown outcome (anything else: sbatch may have accepted the array before the failure)."""
    refused = exc.__cause__ if isinstance(exc.__cause__, subprocess.CalledProcessError) else None
    if refused is not None:
        said = "; ".join(line.strip() for line in str(refused.stderr or refused.output or "").splitlines()
                         if line.strip())
        if not is_refusal(said):
            return unknown_outcome(script, said, f"submitit's sbatch call exited with status {refused.returncode}")
        return SbatchRefused(script, said)
    why = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    return SubmissionUnknown(
        f"submitit's sbatch call for {script} failed ({why}), so whether Slurm accepted it is unknown; run the same "
        "command again: it first looks the array up in Slurm by its job name and submits only what is missing")
