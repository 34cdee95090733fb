"""The inference use case as a user runs it on the local two-node Slurm cluster: tiny variants, both frameworks,
one fresh process per cell, then collect."""

import json

import pandas as pd
from helpers import REPO_ROOT, run_cli

from bench_contract.measure.device import cpu_model

# For inference, one step is one forward pass of one batch: the step times are the latency per batch.
METRICS = ["step_time_p50", "step_time_p95", "step_time_p99", "step_time_mean", "step_time_std", "throughput",
           "first_batch_time", "peak_host_rss", "parameter_count"]


def test_tiny_inference_on_the_local_slurm_cluster(slurm_cluster, tmp_path):
    results, scripts = tmp_path / "results", tmp_path / "slurm_scripts"
    proc = run_cli("--benchmark", "imagenet", "--use-case", "5", "--models", "mobilenet_v3_small,resnet50",
                   "--variant", "tiny", "--batch-sizes", "1,4", "--synthetic", "--warmup-steps", "2",
                   "--timed-steps", "5", "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"), "--wait",
                   "--results-dir", str(results), "--scripts-dir", str(scripts), env=slurm_cluster.env, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads(next(results.glob("*/manifest.json")).read_text())
    collect = run_cli("collect", "--results-dir", str(results), env=slurm_cluster.env)
    assert collect.returncode == 0, collect.stderr
    merged = pd.read_parquet(results / "merged.parquet")

    assert merged.cell_id.nunique() == len(manifest["cells"]) == 8
    assert set(merged.framework) == {"jax", "torch"} and (merged.model_variant == "tiny").all()
    assert set(merged.device_model) == {cpu_model()}
    for framework, submission in manifest["submissions"].items():
        rows = merged[merged.framework == framework]
        assert set(rows.slurm_array_job_id) == {submission["job_id"]}  # each cell ran as a real array task
        assert rows.slurm_array_task_id.nunique() == 4 and submission["failed"] == {}
    per_cell = merged.pivot_table(index=["model", "batch_size", "framework"], columns="metric", values="value")
    assert per_cell[METRICS].notna().all().all(), per_cell[METRICS]
    assert (per_cell["step_time_p50"] <= per_cell["step_time_p99"]).all()
    assert (per_cell["throughput"] > 0).all()
    compile_time = per_cell["compile_time"].unstack("framework")
    assert (compile_time["jax"] > 0).all() and compile_time["torch"].isna().all()
    counts = per_cell["parameter_count"].unstack("framework")
    assert (counts["jax"] == counts["torch"]).all()
    assert merged.groupby("model").init_weights_sha256.nunique().eq(1).all()  # one weights file per model
    # collect's comparison names the variant, so a tiny network is never read as the full one
    assert "mobilenet_v3_small (tiny)" in collect.stdout and "resnet50 (tiny)" in collect.stdout


def test_validate_runs_as_one_job_on_a_cluster_node(slurm_cluster, tmp_path):
    proc = run_cli("validate", "--model", "cnn", "--variant", "tiny", "--executor", "slurm", "--profile",
                   str(REPO_ROOT / "profiles" / "local_slurm.toml"), "--results-dir", str(tmp_path),
                   env=slurm_cluster.env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "submitted" in proc.stderr and proc.stdout.splitlines()[-1] == "PASS"
    (work,) = (tmp_path / "validate").iterdir()
    (log,) = work.glob("validate_cnn_*.out")
    assert "parity check on" in log.read_text()
    assert {p.name for p in work.glob("*-logits.npy")} == {"jax-logits.npy", "torch-logits.npy"}
