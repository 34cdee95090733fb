"""The whole path, as a user runs it: plan, render, submit, run both frameworks, collect, compare.

Through the real local Slurm cluster (sbatch and submitit) and through the local executor. Digits is real
data that ships with scikit-learn, so these runs also check that both training loops really learn.
"""

import json
import re

import pandas as pd
import pytest
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, run_cli

from bench_contract.measure.device import cpu_model

ACCURACY_FLOOR = 0.95
MAX_ACCURACY_GAP = 0.015


pytestmark = pytest.mark.usefixtures("framework_envs")  # tests/conftest.py


def launch_and_collect(tmp_path, executor, env=None):
    results, scripts = tmp_path / "results", tmp_path / "slurm_scripts"
    profile = ["--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml")] if executor != "local" else []
    proc = run_cli("--benchmark", "digits", "--use-case", "1", *BRIEF_TIMING_ARGS, "--executor", executor, "--wait",
                   *profile,
                   "--results-dir", str(results), "--scripts-dir", str(scripts), env=env, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads(next(results.glob("*/manifest.json")).read_text())
    collect = run_cli("collect", "--results-dir", str(results), env=env)
    assert collect.returncode == 0, collect.stderr
    merged = pd.read_parquet(results / "merged.parquet")
    return manifest, merged, collect.stdout


def check_campaign(manifest, merged, collect_out):
    assert set(merged.framework) == {"jax", "torch"}
    assert merged.cell_id.nunique() == len(manifest["cells"]) == 4
    assert set(merged.device_model) == {cpu_model()}
    assert (merged.campaign == manifest["campaign"]).all()
    # Both frameworks started from one initial weights file.
    assert merged.init_weights_sha256.nunique() == 1
    summary = merged[merged.step.isna() & merged.epoch.isna()]
    per_cell = summary.pivot_table(index=["pair_key", "framework"], columns="metric", values="value")
    assert (per_cell["throughput"] > 0).all()
    assert (per_cell["step_time_p50"] > 0).all()
    accuracy = per_cell["test_accuracy"].unstack("framework")
    assert (accuracy >= ACCURACY_FLOOR).all().all(), accuracy
    assert ((accuracy["jax"] - accuracy["torch"]).abs() <= MAX_ACCURACY_GAP).all(), accuracy
    # collect prints the comparison for this CPU model, with a speed-up per cell
    assert cpu_model() in collect_out
    assert len(re.findall(r"digits\s+mlp\s+\d+\s+JAX\s+[\d,]+\s+\d+\.\d\dx", collect_out)) == 2


@pytest.mark.parametrize("executor", ["slurm", "submitit"])
def test_digits_on_the_local_slurm_cluster(slurm_cluster, executor, tmp_path):
    manifest, merged, out = launch_and_collect(tmp_path, executor, env=slurm_cluster.env)
    check_campaign(manifest, merged, out)
    for framework, submission in manifest["submissions"].items():
        rows = merged[merged.framework == framework]
        assert set(rows.slurm_array_job_id) == {submission["job_id"]}, "rows carry the real Slurm array job id"
        assert rows.slurm_job_id.str.isdigit().all(), "and a job id per task"
        assert submission["failed"] == {}


def test_digits_on_the_local_executor(tmp_path):
    manifest, merged, out = launch_and_collect(tmp_path, "local")
    check_campaign(manifest, merged, out)
    assert (merged.slurm_job_id == "not available: not run under Slurm").all()  # nothing pretends to be a Slurm job
