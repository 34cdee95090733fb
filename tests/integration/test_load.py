"""Load: a hundred tiny array tasks, all publishing into one folder, lose no result (a few hundred measured).

The tasks run the real runner (spec line in, shared weights file, atomic Parquet out) with a stand-in use case
(tests/integration/standin_backend.py), so each takes about a second. The local cluster runs two tasks at a
time (two one-CPU nodes), so results arrive as a stream, two at a time; collect runs while they arrive and
once at the end, and status counts every cell.
"""

from __future__ import annotations

import os
import time

import pandas as pd

from faults import Campaign, standin_env

# Measured here: 200 tasks took 415 s from submission to the last result (about 4 s per task per node, most of
# it Slurm's task launch and Python's start, on two cores shared with other users), and 100 took 155 s. The
# code path does not change with the count, so the test runs 100.
TASKS = 100


def test_a_few_hundred_tasks_finishing_together_lose_no_result(slurm_cluster, tmp_path):
    standin_env(tmp_path / "envs")
    run = Campaign(tmp_path, slurm_cluster.env, f'env_dir = "{tmp_path / "envs"}"\n')
    batches = ",".join(str(b) for b in range(1, TASKS + 1))
    start = time.monotonic()
    proc = run.launch("--batch-sizes", batches, "--synthetic", "--synthetic-samples", "4000")
    assert proc.returncode == 0, proc.stderr
    while any(not os.path.exists(c["results"]) for c in run.manifest["cells"][: TASKS // 2]):
        time.sleep(1)
    during = run.cli("collect")  # while tasks are still publishing into the same folders
    assert during.returncode == 0 and "skipped" not in during.stderr, during.stderr
    assert run.watch().returncode == 0
    elapsed = time.monotonic() - start
    collected = run.cli("collect")
    assert collected.returncode == 0 and "skipped" not in collected.stderr, collected.stderr
    assert "have no result" not in collected.stdout
    merged = pd.read_parquet(run.results / "merged.parquet")
    assert merged.cell_id.nunique() == TASKS and (merged.metric == "throughput").sum() == TASKS
    assert merged.init_weights_sha256.nunique() == 1  # one shared weights file, written once
    assert f"{TASKS}/{TASKS} ended ({TASKS} completed)" in run.status()
    print(f"{TASKS} array tasks ran and were collected in {elapsed:.0f} s")
