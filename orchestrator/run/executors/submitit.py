"""The `submitit` executor: each script's tasks go to Slurm as submitit arrays (one sbatch call per array, or per
part), each task running the same array script with its index on the node (base.run_array_task). Its arrays are
named and recorded as sbatch's are, and its sbatch call runs as sbatch's does (in a session of its own, under the
watchdog, killed with the command); it numbers a resubmission's tasks in order, and submits a single task as a
plain job. It is waited for through submitit's jobs, and an array found in Slurm after submitit's answer was lost
is cancelled: submitit never learnt its id, so its tasks cannot get their work."""

from __future__ import annotations

import io
import math
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr
from functools import partial
from pathlib import Path

from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan.manifest import IN_ORDER, ONE_JOB, ArrayRecord
from orchestrator.plan.profile import ClusterProfile, slurm_seconds
from orchestrator.plan.render import UNSIZED_TIME_LIMIT
from orchestrator.run import queue
from orchestrator.run.executors.base import Executor, ScriptJob, Submission, Submitting, run_array_task
from orchestrator.run.sbatch_call import (
    SbatchRefused,
    SubmissionUnknown,
    array_job_name,
    in_own_session,
    is_refusal,
    recorded_call,
    require_command,
    unknown_outcome,
)
from orchestrator.run.wait import OutputsWritten


class Submitit(Executor):
    name = "submitit"
    on_slurm = True

    def check(self, results_dir: Path, world_size: int, collect_after: bool, follow_up: str) -> None:
        if "%" in str(results_dir.resolve()):
            raise UsageError(f"--results-dir {str(results_dir)!r} holds a %, which Slurm would expand in the log "
                             "paths submitit gives it; choose a folder without %, or use --executor slurm, which "
                             "escapes it")
        super().check(results_dir, world_size, collect_after, follow_up)

    def submit(self, job: ScriptJob, how: Submitting) -> Submission:
        return submit_submitit(job, how)

    def resubmit(self, job: ScriptJob, indices: list[int], attempt: int, how: Submitting) -> Submission:
        return submit_submitit(job, how, indices=indices, rerun=attempt)

    def wait(self, submissions: list[Submission], outputs: OutputsWritten, report: Callable[[str], None]) -> None:
        """Each submission's jobs, one after another: submitit reads each task's outcome from its own files."""
        for sub in submissions:
            if sub.jobs:
                report(f"waiting for submitit job {', '.join(sub.job_ids)}")
                wait_for_jobs(sub)

    def log_name(self, job_name: str, task_id: str, index: int) -> str:
        return task_log(job_name, index)

    def cancelled_when_found(self, job_id: str) -> str | None:
        return ORPHAN if cancel_orphan(job_id) else None


def slurm_minutes(time_limit: str) -> int:
    """Minutes in a Slurm time limit (profile.slurm_seconds), rounded up."""
    return max(1, math.ceil(slurm_seconds(time_limit) / 60))


def submitit_parameters(profile: ClusterProfile, job_name: str, n_tasks: int) -> dict:
    extra = {}
    for option in profile.extra_sbatch:
        key, _, value = option.removeprefix("--").partition("=")
        extra[key.replace("-", "_")] = value or True
    params = {
        "name": job_name,
        "timeout_min": slurm_minutes(profile.time_limit or UNSIZED_TIME_LIMIT),  # sized when planned (plan.sizing)
        "slurm_ntasks_per_node": 1,
        "slurm_setup": list(profile.setup_lines),
        "slurm_array_parallelism": profile.throttle(n_tasks) or n_tasks,  # submitit writes it as --array=...%N
        "slurm_additional_parameters": extra,
    }
    # One task per node, so the node's GPUs are the task's. submitit writes extra_sbatch's options (its additional
    # parameters) over these, as the sbatch scripts put them after their own.
    for option, value in [*profile.queue_options(), *profile.task_options(profile.gpus_per_task)]:
        params[f"slurm_{option.replace('-', '_')}"] = value
    return params


def submit_submitit(job: ScriptJob, how: Submitting, indices: list[int] | None = None,
                    rerun: int | None = None) -> Submission:
    """Submit the script's array indices (all of them, or only `indices`) as submitit arrays: one, or one per part
    of at most how.max_array. The Submission's task_ids follow the indices, and its `jobs` are submitit's.

    Each array job is named as sbatch's are (array_job_name of its first cell, and `:rerunN` for resubmission
    `rerun`), and how.record gets each part's outcome (submitted, refused or unknown) as soon as submitit returns
    or raises, before anything else can fail. The task logs are logs/<job name>_submitit_<index>.out."""
    require_command("sbatch")
    import submitit  # only this executor needs it, and it costs the other commands' start

    indices = list(range(job.tasks)) if indices is None else indices
    executor = submitit.AutoExecutor(folder=str(job.campaign_dir / "submitit" / job.key), cluster="slurm")
    size = how.max_array if how.max_array is not None and len(indices) > how.max_array else len(indices)
    executor.update_parameters(**submitit_parameters(how.profile.for_system(job.system), job.job_name, size))
    jobs, arrays = [], []
    stderr = sys.stderr  # the user's, while submitit's own print of sbatch's refusal goes into the error

    def warn(line: str) -> None:
        print(line, file=stderr, flush=True)

    for offset in range(0, len(indices), size):
        chunk = indices[offset:offset + size]
        entry = submitit_entry(job.key, chunk, job.campaign_dir.name, rerun)
        executor.update_parameters(name=entry.job_name)
        part: list = []  # submitit's jobs, once it has submitted them
        job_id = recorded_call(entry, how.record, partial(submit_part, executor, job, chunk, warn, part))
        arrays.append({"job_id": job_id, "offset": offset, "count": len(chunk)})
        jobs += part
    return Submission(job.key, arrays[0]["job_id"], [j.job_id for j in jobs], arrays=arrays, jobs=jobs)


def submit_part(executor, job: ScriptJob, chunk: list[int], warn: Callable[[str], None], part: list,
                until: float) -> str:
    """One submitit array of the script's indices `chunk` (one sbatch call, run in_own_session until `until`); its
    jobs go into `part`, its job id is returned, and any failure leaves as submitit_failure's error."""
    try:
        with sbatch_in_own_session(job.script, until, warn), redirect_stderr(io.StringIO()), executor.batch():
            part.extend(executor.submit(run_array_task, str(job.script), i, str(job.logs / task_log(job.job_name, i)))
                        for i in chunk)  # each task is told its cell's index
    except Exception as exc:  # noqa: BLE001 - submitit raises its own errors, and whatever its sbatch call raised
        raise submitit_failure(job.script, exc) from None
    return re.sub(r"_\d+$", "", part[0].job_id)


@contextmanager
def sbatch_in_own_session(script: Path, until: float, warn: Callable[[str], None]) -> Iterator[None]:
    """While the block runs, submitit's sbatch call (through its utils.CommandFunction, which would run sbatch in
    this command's process group, with no time limit, and wait for it whatever stopped this command) runs as every
    sbatch call here does (sbatch_call.in_own_session): in a session of its own under the watchdog, killed as a
    group when this command stops or at `until`. It answers as CommandFunction does: stdout, or FailedJobError
    from a CalledProcessError with sbatch's words (submitit_failure reads them)."""
    from submitit.core import utils

    def command_function(command: list[str], verbose: bool = True, cwd=None, env=None) -> Callable[..., str]:
        def call(*args: object) -> str:
            full = [*command, *map(str, args)]
            code, out, err = in_own_session(full, script, until, warn, env)
            if code != 0:
                raise utils.FailedJobError(err.strip()) from subprocess.CalledProcessError(
                    code, full, output=out, stderr=err)
            return out.strip()
        return call

    original = utils.CommandFunction
    utils.CommandFunction = command_function
    try:
        yield
    finally:
        utils.CommandFunction = original


def task_log(job_name: str, index: int) -> str:
    """The name of the log of the task at array index `index`: submitit's own log is in its folder, this one is
    what the array script prints, beside the other executors' logs."""
    return f"{job_name}_submitit_{index}.out"


def submitit_entry(key: str, chunk: list[int], campaign: str, rerun: int | None) -> ArrayRecord:
    """The manifest's record of one submitit array: its cells (`offset` and `count`, or a resubmission's
    `indices`), its job name, and how its tasks are numbered where sbatch's rule does not hold."""
    name = array_job_name(campaign, key, chunk[0]) + (f":rerun{rerun}" if rerun else "")
    numbering = ONE_JOB if len(chunk) == 1 else "" if rerun is None else IN_ORDER
    if rerun is None:
        return ArrayRecord(key, chunk[0], len(chunk), Submitit.name, job_name=name, numbering=numbering)
    return ArrayRecord(key, 0, len(chunk), Submitit.name, job_name=name, indices=chunk, numbering=numbering)


def submitit_failure(script: Path, exc: Exception) -> OrchestratorError:
    """What a failed submitit submission means: sbatch's refusal (it exited non-zero: nothing was submitted),
    or an unknown outcome (anything else: sbatch may have accepted the array before the failure)."""
    if isinstance(exc, OrchestratorError):  # sbatch not answering in time, or not started (in_own_session)
        return exc
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


def wait_for_jobs(sub: Submission) -> None:
    """Until each of the submission's submitit jobs has ended; a failed one's last line goes into `failed`."""
    for index, job in enumerate(sub.jobs):
        try:
            job.result()
        except Exception as exc:  # noqa: BLE001 - submitit raises FailedJobError and friends, with the task's stderr
            sub.failed[index] = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__


# A submitit array found in Slurm after its submission's outcome was unknown: submitit files each task's work
# under the job id sbatch answered, so without that answer its tasks wait 60 s and fail.
ORPHAN = "submitit never learnt its job id, so its tasks could not get their work: it was cancelled"


def cancel_orphan(job_id: str) -> bool:
    """scancel a submitit array whose tasks cannot run (ORPHAN); whether scancel did. Where it did not, the array
    stays recorded as submitted: its tasks fail, and a resubmit runs their cells again."""
    return queue.answered("scancel", [job_id], queue.QUERY_TIMEOUT_S) is not None
