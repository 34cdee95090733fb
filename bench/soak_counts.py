"""What the soak (bench/soak.py) counts once its campaigns are complete, per cell and trial of every campaign:
- from Slurm's own accounting (sacct): the tasks submitted for it and the tasks that started, each array task
  mapped to its cells through the manifest's record of its array (a paired task runs both frameworks' cells of
  its pair, every trial), and the jobs named for a campaign that no manifest records (counted against the cells
  their name gives, where it gives them);
- from the stand-in backend's ledger (bench/standin_backend.py): the distinct runs that published a result, which
  a second run cannot overwrite as it overwrites the result file;
- from the merged dataset: that each cell and trial is there, and that its row comes from the run in the ledger.
Arrays the product found in Slurm and cancelled since they cannot run (submitit's, whose answer was lost) are
counted apart: they are submissions by design, and the ledger shows whether any of their tasks ran a cell.

The manifests are the product's typed model (orchestrator.plan.manifest): an array's tasks are numbered by its own
record (ArrayRecord.task_ids), as status and resubmit number them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.plan.manifest import UNKNOWN, Manifest
from orchestrator.run.queue import task_ids_of

Key = tuple[str, str, int]  # campaign, cell id, trial
Slot = tuple[str, str, int]  # campaign, script key, array index


def answer_bys(manifest: Manifest) -> list[str]:
    """When each array whose answer is unknown can no longer be accepted (UTC, ISO), where the record says."""
    return [entry.answer_by for entry in manifest.arrays if entry.state == UNKNOWN and entry.answer_by]


CANCELLED = "cancelled"  # an array found in Slurm that cannot run, cancelled by the product (reconcile)


@dataclass
class Accounting:
    """What sacct says of the soak's campaigns, per slot (campaign, script, array index)."""

    submitted: Counter = field(default_factory=Counter)
    started: Counter = field(default_factory=Counter)
    orphans_submitted: Counter = field(default_factory=Counter)  # tasks of arrays the product cancelled
    orphans_started: Counter = field(default_factory=Counter)
    orphan_jobs: set = field(default_factory=set)
    unrecorded: list = field(default_factory=list)  # sacct records of jobs no manifest records


ACCOUNTING_WAIT_S = 120.0


def sacct_lines(env: dict, since: str, manifests: dict[str, Manifest]) -> list[list[str]]:
    """sacct's allocations since `since` (local time): job id, job name, start, state; read once it has a record
    of every task of every job the manifests record, or after ACCOUNTING_WAIT_S: slurmctld hands its records to the
    accounting database in the background, and a task that ended a moment ago may not be there yet."""
    recorded = {task for manifest in manifests.values() for entry in manifest.arrays if entry.job_id
                for task in entry.task_ids().values()}
    given_up = time.monotonic() + ACCOUNTING_WAIT_S
    while True:
        out = subprocess.run(["sacct", "-X", "-n", "-P", "-S", since, "-o", "JobID,JobName,Start,State"],
                             capture_output=True, text=True, check=True, env=env).stdout
        lines = [line.split("|") for line in out.splitlines() if line.count("|") == 3]
        missing = recorded - {task for line in lines for task in task_ids_of(line[0])}
        if not missing:
            return lines
        if time.monotonic() > given_up:
            print(f"soak: after {ACCOUNTING_WAIT_S:.0f} s, sacct has no record of tasks {sorted(missing)}",
                  file=sys.stderr)
            return lines
        time.sleep(2)


def accounting(manifests: dict[str, Manifest], lines: list[list[str]]) -> Accounting:
    """Each task sacct has of a job a manifest records, counted at its slot through the record of its array (by
    job id: sacct may name a job "allocation" until it has its name); and each task of a job named for one of the
    campaigns (`<script>:<campaign>:<offset>[:rerunN]`) that no manifest records."""
    recorded: dict[str, tuple[Slot, str]] = {}
    for name, manifest in manifests.items():
        for entry in manifest.arrays:
            if entry.job_id:
                for index, task in entry.task_ids().items():
                    recorded[task] = ((name, entry.script, index), entry.state)
    found = Accounting()
    for job, job_name, start, _state in lines:
        parts = job_name.split(":")
        ours = len(parts) >= 3 and parts[1] in manifests
        started = start not in ("Unknown", "None", "")
        for task in task_ids_of(job):
            if task not in recorded and not ours:
                continue  # another campaign's, or another user's job
            if task not in recorded:
                found.unrecorded.append(f"{task} ({job_name})")
                named = slot_named(job_name, task)
                if named:
                    found.submitted[named] += 1
                    found.started[named] += started
                continue
            slot, state = recorded[task]
            if state == CANCELLED:
                found.orphan_jobs.add(task.split("_")[0])
                found.orphans_submitted[slot] += 1
                found.orphans_started[slot] += started
            else:
                found.submitted[slot] += 1
                found.started[slot] += started
    return found


def slot_named(job_name: str, task: str) -> Slot | None:
    """The slot of a task that no manifest records, by its job name, where the name tells: a first submission's
    `<script>:<campaign>:<offset>` runs cell offset + task id (a plain job's, offset) with either executor; a
    resubmission's cells (`:rerunN`) are in its record alone."""
    parts = job_name.split(":")
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    local = task.partition("_")[2]
    return parts[1], parts[0], int(parts[2]) + (int(local) if local.isdigit() else 0)


def ledger_runs(ledger: Path) -> dict[Key, list[dict]]:
    """(campaign, cell id, trial) -> the ledger's line of each distinct run that published its result."""
    runs: dict[Key, dict[str, dict]] = defaultdict(dict)
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            run = json.loads(line)
            runs[(run["campaign"], run["cell_id"], run["trial"])][run["run"]] = run
    return {key: list(by_id.values()) for key, by_id in runs.items()}


def merged_jobs(merged: Path) -> dict[Key, set[str]]:
    """(campaign, cell id, trial) -> the Slurm jobs whose rows the merged dataset holds for it."""
    from orchestrator.results.store import read_merged_rows

    rows = read_merged_rows(merged, ["campaign", "cell_id", "trial", "slurm_job_id"]).to_pandas()
    jobs: dict[Key, set[str]] = defaultdict(set)
    for campaign, cell_id, trial, job in rows.drop_duplicates().itertuples(index=False):
        jobs[(campaign, cell_id, int(trial))].add(job)
    return jobs


def count(manifests: dict[str, Manifest], lines: list[list[str]], runs: dict[Key, list[dict]],
          merged_from: dict[Key, set[str]]) -> dict:
    """The soak's counts from the manifests, sacct's `lines` (sacct_lines), the ledger's `runs` (ledger_runs) and
    the merged dataset's jobs (merged_jobs): each a sorted list of the cells and trials (or jobs) it names; all
    empty when every cell was submitted, started and run exactly once and merged from that run."""
    slots: dict[Key, Slot] = {}
    for name, manifest in manifests.items():
        for cell in manifest.cells:
            slots[(name, cell.cell_id, cell.trial)] = (name, cell.script, cell.array_index)
    slurm = accounting(manifests, lines)
    ran_from_orphans = sorted(f"{key}: job {run['slurm_job_id']}" for key, key_runs in runs.items()
                              for run in key_runs if run["slurm_job_id"] in slurm.orphan_jobs)
    wrong_merge = sorted(f"{key}: merged from {sorted(merged_from[key])}, ran as "
                         f"{sorted(r['slurm_job_id'] for r in runs.get(key, []))}"
                         for key in slots if merged_from.get(key) and not merged_from[key]
                         <= {r["slurm_job_id"] for r in runs.get(key, [])})

    def where(counter: Counter, wanted) -> list[Key]:
        return sorted(key for key, slot in slots.items() if wanted(counter[slot]))

    ran = Counter({key: len(key_runs) for key, key_runs in runs.items()})
    return {
        "cells": len(slots),
        "submitted_twice": where(slurm.submitted, lambda n: n > 1),
        "never_submitted": where(slurm.submitted, lambda n: n == 0),
        "started_twice": where(slurm.started, lambda n: n > 1),
        "never_started": where(slurm.started, lambda n: n == 0),
        "ran_twice": sorted(key for key in slots if ran[key] > 1),
        "never_ran": sorted(key for key in slots if ran[key] == 0),
        "not_merged": sorted(key for key in slots if not merged_from.get(key)),
        "merged_from_another_run": wrong_merge,
        "unrecorded_jobs": sorted(slurm.unrecorded),
        "orphans_ran": ran_from_orphans,
        "orphans": {"arrays cancelled": len(slurm.orphan_jobs),
                    "their tasks started": sum(slurm.orphans_started.values())},
    }
