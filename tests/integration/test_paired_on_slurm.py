"""A paired cell on the real local Slurm cluster: one Slurm job runs JAX and PyTorch alternately on one node,
trials interleaved A B A B, each in its own process; collect merges the trials and gives the speed-up an
interval from them."""

import json

import pandas as pd
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, run_cli


def test_a_paired_cell_runs_interleaved_trials_of_both_frameworks_in_one_job(slurm_cluster, tmp_path):
    results = tmp_path / "results"
    proc = run_cli("--benchmark", "digits", "--use-case", "1", *BRIEF_TIMING_ARGS, "--batch-sizes", "64",
                   "--epochs", "1",
                   "--warmup-steps", "2", "--paired", "--trials", "2",
                   "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"), "--wait",
                   "--results-dir", str(results), "--scripts-dir", str(tmp_path / "scripts"),
                   env=slurm_cluster.env, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads(next(results.glob("*/manifest.json")).read_text())
    assert list(manifest["submissions"]) == ["paired"] and manifest["submissions"]["paired"]["failed"] == {}
    collect = run_cli("collect", "--results-dir", str(results), env=slurm_cluster.env)
    assert collect.returncode == 0, collect.stderr
    merged = pd.read_parquet(results / "merged.parquet")

    # Four runs (2 trials x 2 frameworks), four result files, all from one Slurm job on one node.
    assert "merged" in collect.stdout and "from 4 task files" in collect.stdout
    runs = merged.groupby(["framework", "trial"]).agg(job=("slurm_job_id", "first"), host=("hostname", "first"),
                                                      jobs=("slurm_job_id", "nunique"),
                                                      started=("started_at", "first"), order=("pair_order", "first"))
    assert sorted(runs.index) == [("jax", 0), ("jax", 1), ("torch", 0), ("torch", 1)]
    assert runs["jobs"].eq(1).all() and runs["job"].nunique() == 1 and runs["host"].nunique() == 1
    assert set(runs["order"]) == {"jax,torch"}  # every row says it was paired, and in which order
    # Interleaved: in the order they started, JAX trial 0, PyTorch trial 0, JAX trial 1, PyTorch trial 1.
    in_order = runs.sort_values("started")
    assert list(in_order.index) == [("jax", 0), ("torch", 0), ("jax", 1), ("torch", 1)]
    assert in_order["started"].is_unique  # each run a process of its own, started after the previous ended
    summary = merged[merged.step.isna() & merged.epoch.isna()]
    per_run = summary.pivot_table(index=["framework", "trial"], columns="metric", values="value")
    assert (per_run["throughput"] > 0).all() and (per_run["recompilations_timed"] == 0).all()
    assert per_run["step_time_cv"].notna().all()
    # The trials are the runs of the comparison: two per framework, so the speed-up has an interval.
    assert "2/2 paired" in collect.stdout and "x [" in collect.stdout  # resampled as pairs
