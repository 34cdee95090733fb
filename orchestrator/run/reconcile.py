"""Arrays whose submission is unknown (sbatch gave no answer), settled by looking their job names up in Slurm:
submitted with the job id found, or never accepted; an array found so that its executor cannot run (submitit's,
whose tasks cannot get their work) is cancelled by that executor."""

from __future__ import annotations

import datetime as dt
import getpass
import os
import shutil

from orchestrator.plan.manifest import UNKNOWN, ArrayRecord, Manifest, is_past, now_utc
from orchestrator.run import queue
from orchestrator.run.executors import executor


def reconcile(manifest: Manifest, user: str | None = None) -> list[ArrayRecord]:
    """Look up the campaign's arrays whose submission is unknown in Slurm by their job names, in one squeue and
    one sacct call, and record what was found: submitted, with the job id, or "not found" (never accepted).

    Both are asked since each misses some: sacct may not list an array just accepted (accounting lags the
    controller, and lists a held array only once it is eligible), squeue forgets a job MinJobAge after it ended.
    An array either lists is found; one is "not found" only when both answered (or the cluster keeps no
    accounting) and its sbatch can no longer accept it (`answer_by`, sbatch_call.intent: the command that called it was
    killed and its sbatch may live on until its watchdog kills it). Returns the entries it settled."""
    unknown = [a for a in manifest.arrays if a.state == UNKNOWN and a.job_name]
    if not unknown:
        return []
    found, complete = jobs_named([a.job_name for a in unknown], min(a.at for a in unknown), user)
    settled = []
    for entry in unknown:
        job_id = found.get(entry.job_name)
        cancelled = executor(entry.executor).cancelled_when_found(job_id) if job_id else None
        if cancelled:
            entry.state, entry.job_id, entry.reconciled_at, entry.reason = "cancelled", job_id, now_utc(), cancelled
            settled.append(entry)
        elif job_id or (complete and is_past(entry.answer_by or entry.at)):
            manifest.settle_array(entry, job_id)
            settled.append(entry)
    return settled


def jobs_named(names: list[str], since: str, user: str | None = None) -> tuple[dict[str, str], bool]:
    """(job name -> job id of the user's jobs so named, found by squeue or sacct; whether both answered, so that a
    name not found is no job at all). `since`: the UTC time of the first call that may have submitted one."""
    who = user or os.environ.get("USER") or getpass.getuser()
    listed = ",".join(names)
    # sacct reads -S in the local time zone: from the day before the first unknown call, whatever the zone.
    day_before = (dt.date.fromisoformat(since[:10]) - dt.timedelta(days=1)).isoformat()
    found: dict[str, str] = {}
    complete = True
    for tool, args in (("squeue", ["-h", "-t", "all", "-u", who, f"--name={listed}", "-o", "%F|%j"]),
                       ("sacct", ["-X", "-n", "-P", "-u", who, "-S", day_before, f"--name={listed}",
                                  "-o", "JobID,JobName"])):
        if tool == "sacct" and shutil.which("sacct") is None:
            continue  # no accounting here: squeue alone knows the jobs
        try:
            proc = queue.query(tool, args)
        except queue.QueueUnreadable:
            complete = False
            continue
        if proc.returncode != 0:
            complete = complete and tool == "sacct" and queue.ACCOUNTING_OFF in proc.stderr + proc.stdout
            continue
        for line in proc.stdout.splitlines():
            job, _, name = line.strip().partition("|")
            job_id = job.split("_")[0]
            if job_id.isdigit():
                found.setdefault(name.strip(), job_id)
    return found, complete
