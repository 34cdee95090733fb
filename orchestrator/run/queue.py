"""The queue's answers: squeue and sacct, read once (status, the polls of a wait, the lookups by job name).

A call that fails or does not answer raises QueueUnreadable: which tasks are queued is then unknown, never "not
queued". Only the controller's own answers count as "none": squeue refusing the one job id it has forgotten, or
sacct saying the cluster keeps no accounting.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from orchestrator.errors import OrchestratorError


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


class QueueUnreadable(OrchestratorError):
    """squeue or sacct gave no answer (not on PATH, a non-zero exit, no answer in time): which tasks are queued
    is then unknown, never "not queued"."""

    def __init__(self, command: str, reason: str) -> None:
        self.command, self.reason = command, reason
        super().__init__(f"{command} failed: {reason}")


QUERY_TIMEOUT_S = 60


def query(command: str, args: list[str], timeout_s: float | None = None) -> subprocess.CompletedProcess:
    """One squeue or sacct call; QueueUnreadable when the command is missing, cannot start or does not answer
    within timeout_s (QUERY_TIMEOUT_S by default)."""
    timeout_s = QUERY_TIMEOUT_S if timeout_s is None else timeout_s
    path = shutil.which(command)
    if path is None:
        raise QueueUnreadable(command, f"'{command}' is not on PATH")
    try:
        return subprocess.run([path, *args], check=False, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise QueueUnreadable(command, f"no answer within {timeout_s:.0f} s") from None
    except OSError as exc:
        raise QueueUnreadable(command, str(exc)) from None


def answered(command: str, args: list[str], timeout_s: float) -> subprocess.CompletedProcess | None:
    """A call whose failure only means "no answer" (Slurm's: a limit, the partitions, a cancel; a site's setup
    lines tried before its interpreter): its completed process, or None where query raises or the command exits
    non-zero."""
    try:
        proc = query(command, args, timeout_s)
    except QueueUnreadable:
        return None
    return proc if proc.returncode == 0 else None


def refusal(command: str, proc: subprocess.CompletedProcess) -> QueueUnreadable:
    """A non-zero exit, in the command's own words (its last line on stderr, else stdout)."""
    lines = [line.strip() for line in (proc.stderr or proc.stdout or "").splitlines() if line.strip()]
    return QueueUnreadable(command, f"exit status {proc.returncode}" + (f": {lines[-1]}" if lines else ""))


def task_ids_of(record: str) -> list[str]:
    """The array task ids in one squeue or sacct job id: "2001_3" is itself; tasks that have not started yet
    share one record, "2001_[0-1,5]" (with a throttle, "2001_[0-9%2]"; with a step, "2001_[0-9:3]")."""
    found = re.fullmatch(r"(\d+)_\[([0-9,:\-]+)(?:%\d+)?\]", record)
    if not found:
        return [record]
    job, ids = found.groups()
    tasks = []
    for part in ids.split(","):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        tasks += [f"{job}_{i}" for i in range(int(first), int(last or first) + 1, int(step or 1))]
    return tasks


# What sacct says where the cluster keeps no accounting: squeue is then the only source, and that is no failure.
ACCOUNTING_OFF = "accounting storage is disabled"


def sacct_lines(job_ids: list[str], *options: str) -> list[str]:
    """sacct's parsable lines (no header) of these jobs with `options`; none without accounting (no sacct here, or
    accounting disabled). Raises QueueUnreadable when sacct fails otherwise or does not answer."""
    if not job_ids or shutil.which("sacct") is None:
        return []
    proc = query("sacct", ["-j", ",".join(job_ids), "-n", "-P", *options])
    if proc.returncode != 0:
        if ACCOUNTING_OFF in proc.stderr + proc.stdout:
            return []
        raise refusal("sacct", proc)
    return proc.stdout.splitlines()


def read_sacct(job_ids: list[str]) -> dict[str, str]:
    """State of every array task sacct has a record of ("123_4" -> "COMPLETED", a record for tasks not yet
    started expanded to each); empty without accounting (no sacct here, or accounting disabled). Raises
    QueueUnreadable when sacct fails otherwise or does not answer."""
    states = {}
    for line in sacct_lines(job_ids, "-X", "-o", "JobID,State"):
        if "|" in line:
            job, state = line.split("|", 1)
            state = state.split()[0] if state.strip() else "UNKNOWN"  # "CANCELLED by 0" -> CANCELLED
            states.update(dict.fromkeys(task_ids_of(job.strip()), state))
    return states


def read_steps(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """The job steps of these jobs by name: name -> (step id, state), the latest of a name last (a pack's runs are
    steps named by bench_contract.run.driver.step_name). Empty without accounting; QueueUnreadable as read_sacct."""
    steps = {}
    for line in sacct_lines(job_ids, "-o", "JobID,JobName,State"):
        parts = line.split("|")
        if len(parts) == 3 and re.fullmatch(r"[\d_]+\.\d+", parts[0].strip()):  # steps only, not batch or extern
            state = parts[2].split()[0] if parts[2].strip() else "UNKNOWN"
            steps[parts[1].strip()] = (parts[0].strip(), state)
    return steps


def sacct_states(job_ids: list[str]) -> dict[str, str]:
    """read_sacct for waiting, where the next poll asks again: empty when sacct cannot be read."""
    try:
        return read_sacct(job_ids)
    except QueueUnreadable:
        return {}


def read_squeue(job_ids: list[str]) -> dict[str, str]:
    """Array task id -> Slurm state for the tasks still queued or running (pending ranges expanded). Raises
    QueueUnreadable when squeue is missing, fails or does not answer: a failed call never reads as "none queued"."""
    if not job_ids:
        return {}
    proc = query("squeue", ["-h", "-r", "-j", ",".join(job_ids), "-o", "%i %T"])
    if proc.returncode != 0:
        # Asked about one job only, squeue refuses the id of a job the controller has forgotten (MinJobAge after
        # it ended): the controller's own answer that it is not queued. Asked about several, it lists those it knows.
        if "Invalid job id specified" in proc.stderr and len(job_ids) == 1:
            return {}
        raise refusal("squeue", proc)
    states = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states.update(dict.fromkeys(task_ids_of(parts[0]), parts[1]))
    return states


def job_ended(job_id: str) -> bool:
    """Whether the queue says that this job (or array task) has ended: squeue no longer lists it and sacct has a
    record of a state other than pending or running. False when either cannot be read or sacct keeps no record:
    an ended job is never guessed."""
    try:
        if read_squeue([job_id]):
            return False
        state = read_sacct([job_id]).get(job_id)
    except QueueUnreadable:
        return False
    return state is not None and SLURM_STATE_NAMES.get(state) not in (*ACTIVE, None)
