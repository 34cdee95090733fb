"""A paired cell on the real local Slurm cluster, under --trials auto: one Slurm job runs JAX and PyTorch
alternately on one node, trials interleaved A B A B, each in its own process; after the first stage, Stein's rule
(bench_contract.sequential) sets the pair's number of trials, and the job's time limit caps it; collect merges the
trials and gives the speed-up the rule's interval."""

import json
import re

import pandas as pd
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, run_cli

from bench_contract.sequential import trials_in_time
from bench_contract.spec import pair_order


MAX_TRIALS = 60


def test_a_paired_cell_runs_interleaved_trials_of_both_frameworks_in_one_job(slurm_cluster, tmp_path):
    """A target of 0.1% asks for more trials than --max-trials allows (digits' log speed-ups vary by far more than
    the 0.03% that 60 trials would need), and a 4-minute job whose warning signal comes 30 s before its limit (up
    to 60 s earlier still, as Slurm sends it) holds fewer: after the first stage (about 35 s here), the pair runs
    the trials that end before the earliest warning at the first stage's pace, one kept in reserve, and the job ends
    on its own, neither stopped by the warning nor at its limit (the time budget of --trials auto)."""
    results = tmp_path / "results"
    profile = tmp_path / "profile.toml"
    local = (REPO_ROOT / "profiles" / "local_slurm.toml").read_text()
    profile.write_text(local.replace('time_limit = "00:20:00"', 'time_limit = "00:04:00"\nwarning_seconds = 30'))
    proc = run_cli("--benchmark", "digits", "--use-case", "1", *BRIEF_TIMING_ARGS, "--batch-sizes", "64",
                   "--epochs", "1", "--warmup-steps", "2", "--trials", "auto", "--target-interval", "0.1%",
                   "--max-trials", str(MAX_TRIALS), "--profile", str(profile), "--wait",
                   "--results-dir", str(results), "--scripts-dir", str(tmp_path / "scripts"),
                   env=slurm_cluster.env, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads(next(results.glob("*/manifest.json")).read_text())
    assert list(manifest["submissions"]) == ["paired"] and manifest["submissions"]["paired"]["failed"] == {}
    collect = run_cli("collect", "--results-dir", str(results), env=slurm_cluster.env)
    assert collect.returncode == 0, collect.stderr
    merged = pd.read_parquet(results / "merged.parquet")

    # The job's log says how many trials the rule asked for and how many the time limit holds; that many ran,
    # and the others are not needed.
    log = next(results.glob("*/logs/paired_*.out")).read_text()
    asked = int(re.search(r"(\d+) trials in all for an interval within 0.1%", log).group(1))
    held = re.search(r"the job's time limit holds (\d+): the first stage took (\d+) s, (\d+) s are left", log)
    assert held, log
    trials, first_stage_s, left_s = map(int, held.groups())
    assert 5 <= trials < asked <= MAX_TRIALS
    assert trials == trials_in_time(first_stage_s, left_s)
    status = run_cli("status", "--all", "--results-dir", str(results), env=slurm_cluster.env)  # a line per trial
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.count("not needed  left out by the sequential rule") == 2 * (MAX_TRIALS - trials), (
        status.stdout)
    assert "TIMEOUT" not in status.stdout and "timeout" not in status.stdout and "stopped by a signal" not in log
    assert f"from {2 * trials} task files" in collect.stdout and "without a result" not in collect.stdout
    runs = merged.groupby(["framework", "trial"]).agg(job=("slurm_job_id", "first"), host=("hostname", "first"),
                                                      jobs=("slurm_job_id", "nunique"),
                                                      started=("started_at", "first"), order=("pair_order", "first"),
                                                      rule=("trial_rule", "first"))
    assert sorted(runs.index) == [(fw, t) for fw in ("jax", "torch") for t in range(trials)]
    assert runs["jobs"].eq(1).all() and runs["job"].nunique() == 1 and runs["host"].nunique() == 1
    # Every row says it was paired, and in which order: JAX first in even trials, PyTorch first in odd ones.
    assert all(order == ",".join(pair_order(trial)) for (_, trial), order in runs["order"].items())
    assert set(runs["order"]) == {"jax,torch", "torch,jax"}
    assert set(runs["rule"]) == {"stein first=5 target=0.001"}  # and under which rule
    # Interleaved: in the order they started, JAX trial 0, PyTorch trial 0, PyTorch trial 1, JAX trial 1, ...
    in_order = runs.sort_values("started")
    assert list(in_order.index) == [(fw, t) for t in range(trials) for fw in pair_order(t)]
    assert in_order["started"].is_unique  # each run a process of its own, started after the previous ended
    summary = merged[merged.step.isna() & merged.epoch.isna()]
    per_run = summary.pivot_table(index=["framework", "trial"], columns="metric", values="value")
    assert (per_run["throughput"] > 0).all() and (per_run["recompilations_timed"] == 0).all()
    assert per_run["step_time_cv"].notna().all()
    # The trials are the pairs of the comparison, under Stein's interval, and the verdict says the rule's target.
    assert f"{trials}/{trials} paired" in collect.stdout and "x [" in collect.stdout
    assert f"{trials} paired trials on 1 node (--trials auto, short of its 0.1% target)" in collect.stdout
