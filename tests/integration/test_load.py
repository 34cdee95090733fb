"""Load: over a hundred tiny array tasks, running side by side and finishing together, lose no result.

The tasks run the real runner (spec line in, shared weights file, atomic Parquet out) with a stand-in use case
(bench/standin_backend.py), so each takes about a second of CPU. They run in the local cluster's
`load` partition, where each core is shared by up to 40 jobs: Slurm starts them in waves of about eighty, and a
wave ends within seconds, every task publishing into the same folders at once. collect runs while results
arrive and once at the end, and status counts every cell. sacct's start and end times show that the tasks did
overlap, so the test cannot pass on a cluster that ran them one by one.
"""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime

import pandas as pd
from faults import Campaign

from bench.standin_backend import standin_env

TASKS = 160  # two waves of about eighty: enough to overlap, and half the time of 300 in the suite


def task_times(env: dict, task_ids: list[str]) -> list[tuple[datetime, datetime]]:
    """(start, end) of every task of the arrays these tasks (JOB_INDEX) belong to, from sacct (whole seconds)."""
    job_ids = sorted({task.split("_")[0] for task in task_ids})
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,Start,End"], env=env,
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    return [(datetime.fromisoformat(start), datetime.fromisoformat(end)) for _, start, end in rows]


def most_at_once(times: list[tuple[datetime, datetime]]) -> int:
    """The largest number of tasks running at the same moment (a task ending as another starts counts once)."""
    events = sorted([(end, -1) for _, end in times] + [(start, 1) for start, _ in times])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def most_ending_within(times: list[tuple[datetime, datetime]], seconds: float) -> int:
    ends = sorted(end for _, end in times)
    return max(sum(1 for e in ends[i:] if (e - first).total_seconds() <= seconds) for i, first in enumerate(ends))


def test_a_few_hundred_tasks_finishing_together_lose_no_result(slurm_cluster, tmp_path):
    standin_env(tmp_path / "envs")
    run = Campaign(tmp_path, slurm_cluster.env,
                   f'env_dir = "{tmp_path / "envs"}"\npartition = "load"\ngpus_per_task = 0\n'
                   f"array_parallelism = {TASKS}\n")  # all at once: the default throttle would run 16
    batches = ",".join(str(b) for b in range(1, TASKS + 1))
    start = time.monotonic()
    proc = run.launch("--batch-sizes", batches, "--synthetic", "--synthetic-samples", "4000")
    assert proc.returncode == 0, proc.stderr
    cells = run.manifest["cells"]
    run.wait_until(lambda: sum(os.path.exists(c["results"]) for c in cells) >= TASKS // 2, "half of the results")
    during = run.cli("collect")  # while tasks are still publishing into the same folders
    # 3: some cells were still queued or running, so what it merged is partial (0 should every task have ended).
    assert during.returncode in (0, 3) and "skipped" not in during.stderr, during.stderr
    assert run.watch().returncode == 0
    elapsed = time.monotonic() - start
    collected = run.cli("collect")
    assert collected.returncode == 0 and "skipped" not in collected.stderr, collected.stderr
    assert "have no result" not in collected.stdout
    merged = pd.read_parquet(run.results / "merged.parquet")
    assert merged.cell_id.nunique() == TASKS and (merged.metric == "throughput").sum() == TASKS
    assert merged.init_weights_sha256.nunique() == 1  # one shared weights file, written once
    assert f"{TASKS}/{TASKS} ended ({TASKS} completed)" in run.status()

    times = task_times(slurm_cluster.env, run.manifest["submissions"]["jax"]["task_ids"])
    assert len(times) == TASKS
    at_once, together = most_at_once(times), most_ending_within(times, 5)
    print(f"{TASKS} array tasks ran and were collected in {elapsed:.0f} s; "
          f"at most {at_once} ran at once, {together} ended within 5 s of each other")
    assert at_once >= 40 and together >= 20, (at_once, together)
