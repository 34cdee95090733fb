"""Executors: hand the rendered array scripts to Slurm (sbatch or submitit), or run them here (local).

All three run the same script, so what a person reads in slurm_scripts/ is what runs. Slurm is called
once per script (one array job per framework), never once per cell. The cluster's limits are read in
`limits`, the queue in `queue`, each call's outcome recorded in `record`, unknown outcomes settled in
`reconcile`, and `wait` waits for the arrays to end.
"""

from __future__ import annotations

import io
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan.campaign import CALLING_SBATCH
from orchestrator.plan.profile import ClusterProfile, slurm_seconds
from orchestrator.run.progress import run_streaming
from orchestrator.run.waiting_times import sbatch_slow_s, sbatch_timeout_s


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


def require_command(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UsageError(
            f"'{name}' is not on PATH, so jobs cannot go to Slurm here; use --executor local to run on this "
            "machine, or --dry-run to only write the scripts"
        )
    return path


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

# sbatch's words for a full controller or a spent submit limit, and what each means.
LIMITS = {
    "MaxJobCount": "the controller already holds as many jobs as its MaxJobCount allows",
    "QOSMaxSubmitJobPerUserLimit": "your QOS's MaxSubmitJobsPerUser is reached",
    "AssocMaxSubmitJobLimit": "your association's MaxSubmitJobs is reached",
    "AssocGrpSubmitJobsLimit": "your account's GrpSubmitJobs is reached",
    "QOSGrpSubmitJobsLimit": "your QOS's GrpSubmitJobs is reached",
    "MaxSubmitJobs": "a MaxSubmitJobs limit is reached",
    "Slurm temporarily unable to accept job": "the controller is too busy to accept jobs now",
    "job submit limit": "a limit on how many jobs you may submit is reached",
}


# sbatch's words when its request or the controller's answer was lost on the way: it exits non-zero, yet the
# controller may have accepted the job. Only an `error:` line without any of these is a refusal.
LOST_ON_THE_WAY = ("Socket timed out", "Unable to contact slurm controller", "Zero Bytes were transmitted or received",
                   "Connection refused", "Connection reset", "Connection timed out", "Communication connection failure",
                   "Transport endpoint is not connected", "backup controller in standby mode", "Unexpected message")


# sbatch's own words for a refusal: Slurm's `error:` (a limit, an invalid account, a bad value) and `fatal:` (an
# #SBATCH line it cannot parse: "line 12: Unmatched `'`"; no configuration), and the line Slurm adds to getopt's
# complaint about an option ("unrecognized option '--nosuch'", which getopt words in the user's language).
REFUSED = ("error:", "fatal:", 'Try "sbatch --help" for more information')


def is_refusal(said: str) -> bool:
    """Whether the words of an sbatch that exited non-zero say that nothing was submitted: sbatch's own refusal
    (REFUSED), not a lost connection, and not silence."""
    return any(words in said for words in REFUSED) and not any(words in said for words in LOST_ON_THE_WAY)


class SubmissionUnknown(OrchestratorError):
    """sbatch gave no answer in time (or an answer that names no job): the array may or may not exist."""


class SbatchRefused(OrchestratorError):
    """sbatch said no: nothing was submitted by this call."""

    def __init__(self, script: Path, said: str, where: str = ""):
        super().__init__(sbatch_refusal(script, said, where))
        self.script, self.said = script, said


def unknown_outcome(script: Path, said: str, how: str) -> SubmissionUnknown:
    """An sbatch call whose outcome is unknown, in one sentence: `how` it ended, and what it said."""
    return SubmissionUnknown(
        f"{how} for {script}" + (f" (it said: {said})" if said else "") + ", so whether Slurm accepted it is "
        "unknown; run the same command again: it first looks the array up in Slurm by its job name and submits only "
        "what is missing")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def slow_sbatch(seconds: float, then: str, said: str = "") -> str:
    """The line that tells a user that sbatch is waiting and why (in its own words `said`, where it printed any,
    with what they mean), and `then` what happens."""
    waited = f"sbatch has not answered for {seconds:.0f} s: "
    if not said:
        return f"{waited}the controller is busy or full (`sdiag` and `squeue | wc -l` say which); {then}"
    meaning = next((why for word, why in LIMITS.items() if word in said), None)
    return (f'{waited}it says "{said}"' + (f": {meaning}" if meaning else "")
            + f" (`sdiag` and `squeue | wc -l` say whether the controller is busy or full); {then}")


@contextmanager
def saying_while_slow(warn: Callable[[str], None] = say, first_s: float | None = None,
                      every_s: float = 30.0) -> Iterator[None]:
    """While the block runs (an sbatch call made by another library, which sets no time limit), say after
    `first_s` (sbatch_slow_s()) and then every `every_s` seconds that sbatch is still waiting."""
    first_s = sbatch_slow_s() if first_s is None else first_s
    done = threading.Event()
    start = time.monotonic()

    def keep_saying() -> None:
        delay = first_s
        while not done.wait(delay):
            warn(slow_sbatch(time.monotonic() - start, "submitit waits for it, as long as sbatch retries"))
            delay = every_s

    speaker = threading.Thread(target=keep_saying, daemon=True)
    speaker.start()
    try:
        yield
    finally:
        done.set()
        speaker.join()


def array_job_name(campaign: str, key: str, offset: int) -> str:
    """The job name of one array job: its script key, campaign and first cell (the offset of its part). It finds
    the array again in Slurm (sacct --name, or squeue --name) when sbatch's answer was lost."""
    return f"{key}:{campaign}:{offset}"


def sbatch_refusal(script: Path, said: str, where: str = "") -> str:
    """sbatch's refusal as one sentence (`where`: which part, and the parts already submitted), with what to do
    when it is a limit."""
    meaning = next((why for word, why in LIMITS.items() if word in said), None)
    where = f" ({where})" if where else ""
    if meaning is None:
        return f"sbatch refused {script}: {said}{where}"
    return (f"sbatch refused {script}: {said}{where}: {meaning}; run the same command again once jobs have left "
            "the queue (squeue --me), it submits only what is missing, or plan fewer cells")


def sbatch(script: Path, *args: str, options: tuple[str, ...] = (), job_name: str | None = None,
           warn: Callable[[str], None] = say) -> str:
    """One sbatch call; returns the job id. A refusal becomes one sentence with sbatch's own words; no answer
    within sbatch_timeout_s() raises SubmissionUnknown. After sbatch_slow_s() without an answer, `warn` says why,
    in sbatch's words so far where it printed any ("Slurm temporarily unable to accept job, sleeping and retrying").
    `job_name` replaces the script's --job-name (through SBATCH_JOB_NAME, which outranks #SBATCH lines)."""
    command = [require_command("sbatch"), "--parsable", *options, str(script), *args]
    waits = (sbatch_slow_s(), sbatch_timeout_s())  # read, and a bad value refused, before sbatch starts
    env = {**os.environ, "SBATCH_JOB_NAME": job_name} if job_name else None
    # stderr goes to a file, not a pipe, so that what sbatch says while it retries can be read before it ends.
    with tempfile.TemporaryFile() as stderr:
        try:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                    stdin=subprocess.DEVNULL, env=env)
        except OSError as exc:
            raise OrchestratorError(f"sbatch could not be started for {script}: {exc}") from None
        out = sbatch_answer(proc, script, stderr, warn, *waits)
        err = written(stderr)
    if proc.returncode != 0:
        said = "; ".join(line.strip() for line in (err or out).splitlines() if line.strip())
        if not is_refusal(said):  # "Socket timed out on send/recv operation": the job may exist
            raise unknown_outcome(script, said, f"sbatch exited with status {proc.returncode}")
        raise SbatchRefused(script, said)
    job_id = out.strip().split(";")[0]  # --parsable prints "jobid" or "jobid;cluster"
    if not job_id.isdigit():
        raise SubmissionUnknown(f"sbatch printed {out.strip()!r} for {script}, not a job id, so whether Slurm "
                                "accepted it is unknown; run the same command again: it looks the array up first")
    return job_id


def sbatch_answer(proc: subprocess.Popen, script: Path, stderr, warn: Callable[[str], None], slow_s: float,
                  timeout_s: float) -> str:
    """sbatch's stdout once it has ended; after `slow_s`, `warn` says that it waits and what it said so far;
    after `timeout_s` it is killed and SubmissionUnknown raised."""
    try:
        return proc.communicate(timeout=min(slow_s, timeout_s))[0]
    except subprocess.TimeoutExpired:
        warn(slow_sbatch(slow_s, f"waiting up to {timeout_s:.0f} s", last_line(written(stderr))))
    try:
        return proc.communicate(timeout=max(0.0, timeout_s - slow_s))[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            pass  # a child of sbatch's still holds its output; nothing more is read from it
    said = last_line(written(stderr))
    raise SubmissionUnknown(
        f"sbatch did not answer within {timeout_s:.0f} s for {script}" + (f" (it said: {said})" if said else "")
        + ", so whether Slurm accepted it is unknown: the controller is busy; run the same command again later, it "
        "first looks the array up in Slurm by its job name and submits only what is missing")


def written(stderr) -> str:
    """What a process has written to the file `stderr` so far (read without moving the offset it writes at)."""
    return os.pread(stderr.fileno(), 1 << 20, 0).decode(errors="replace")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


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
        if record and campaign:  # the intent first: a kill while sbatch works leaves "unknown", not nothing
            record({**entry, "state": "unknown", "reason": CALLING_SBATCH})
        try:
            job_id = sbatch(script, *args, options=options, job_name=entry.get("job_name"))
        except OrchestratorError as exc:
            if record:
                record({**entry, "state": "unknown" if isinstance(exc, SubmissionUnknown) else "refused",
                        "reason": str(exc)})
            if whole:
                raise
            where = f"part {number} of {len(parts)}; parts already submitted: " + (
                ", ".join(a["job_id"] for a in arrays) or "none")
            if isinstance(exc, SbatchRefused):
                raise SbatchRefused(exc.script, exc.said, where) from None
            raise type(exc)(f"{exc} ({where})") from None
        if record:
            record({**entry, "state": "submitted", "job_id": job_id})
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
