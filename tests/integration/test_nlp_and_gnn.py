"""The nlp and gnn benchmarks as a user runs them: `main.py --benchmark nlp|gnn --use-case 1|3 --synthetic
--executor local`, then collect. Both frameworks must run, start from one weights file, take the same losses
step by step (DP-SGD without noise too), and learn: the synthetic labels follow a rule the models can find.
Use cases 2 and 4 run with two processes on the two nodes of the local Slurm cluster and must take the
losses of one process."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import run_cli

pytestmark = pytest.mark.usefixtures("framework_envs")  # tests/conftest.py

# (benchmark, learning rate, epochs, accuracy both must reach on the test split; chance is 0.25)
RUNS = [("nlp", "0.3", "3", 0.6), ("gnn", "0.5", "2", 0.6)]


@pytest.mark.parametrize("use_case", [1, 3])
@pytest.mark.parametrize("benchmark, learning_rate, epochs, floor", RUNS)
def test_local_executor_runs_and_collects(tmp_path, benchmark, learning_rate, epochs, floor, use_case):
    results = tmp_path / "results"
    proc = run_cli("--benchmark", benchmark, "--use-case", str(use_case), "--synthetic", "--executor", "local",
                   "--variant", "tiny", "--synthetic-samples", "600", "--batch-sizes", "32", "--epochs", epochs,
                   "--learning-rate", learning_rate, "--noise-multiplier", "0", "--clip-norm", "10",
                   "--loop-batch-size", "4", "--min-iterations", "3", "--min-duration", "0", "--wait",
                   "--results-dir", str(results),
                   "--scripts-dir", str(tmp_path / "scripts"), timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    collect = run_cli("collect", "--results-dir", str(results))
    assert collect.returncode == 0, collect.stderr
    manifest = json.loads(next(results.glob("*/manifest.json")).read_text())
    merged = pd.read_parquet(results / "merged.parquet")
    assert set(merged.framework) == {"jax", "torch"} and merged.cell_id.nunique() == len(manifest["cells"]) == 2
    assert set(merged.benchmark) == {benchmark} and set(merged.data_source) == {"synthetic"}
    assert merged.init_weights_sha256.nunique() == 1
    losses = {fw: g[g.metric == "train_loss"].sort_values("step")["value"].to_numpy() for fw, g in merged.groupby("framework")}
    assert len(losses["jax"]) == int(epochs) * (480 // 32)
    np.testing.assert_allclose(losses["jax"], losses["torch"], rtol=1e-3)
    summary = merged[merged.step.isna() & merged.epoch.isna()].pivot_table(
        index="framework", columns="metric", values="value")
    assert (summary["test_accuracy"] >= floor).all(), summary["test_accuracy"]
    assert (summary["throughput"] > 0).all()
    if use_case == 3:
        assert (summary["vectorization_speedup"] > 0).all()
    assert benchmark in collect.stdout


SINGLE_PROCESS = {2: 1, 4: 3}  # the one-process use case with the same update


def tiny_campaign(results, scripts, benchmark, use_case, *extra, env=None):
    proc = run_cli("--benchmark", benchmark, "--use-case", str(use_case), "--synthetic", "--variant", "tiny",
                   "--synthetic-samples", "400", "--batch-sizes", "32", "--epochs", "1", "--learning-rate", "0.3",
                   "--noise-multiplier", "0", "--clip-norm", "10", "--loop-batch-size", "4", "--min-iterations", "3",
                   "--min-duration", "0", *extra, "--wait",
                   "--results-dir", str(results), "--scripts-dir", str(scripts), env=env, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert run_cli("collect", "--results-dir", str(results), env=env).returncode == 0
    return pd.read_parquet(results / "merged.parquet")


@pytest.mark.parametrize("use_case", [2, 4])
@pytest.mark.parametrize("benchmark", ["nlp", "gnn"])
def test_two_processes_on_two_nodes_match_one_process(slurm_cluster, tmp_path, benchmark, use_case):
    """Node ids (gnn) shard like any batch: each process runs the whole graph and keeps its nodes' logits."""
    from helpers import REPO_ROOT

    parallel = tiny_campaign(tmp_path / "p", tmp_path / "ps", benchmark, use_case, "--nodes", "2", "--tasks-per-node",
                        "1", "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"), env=slurm_cluster.env)
    single = tiny_campaign(tmp_path / "s", tmp_path / "ss", benchmark, SINGLE_PROCESS[use_case], "--executor", "local")
    assert set(parallel.framework) == {"jax", "torch"}
    for framework, rows in parallel.groupby("framework"):
        assert list(rows.loc[rows.metric == "world_size", "value"]) == [2.0], framework
    curves = {name: {fw: g[g.metric == "train_loss"].sort_values("step")["value"].to_numpy()
                     for fw, g in df.groupby("framework")} for name, df in (("parallel", parallel), ("single", single))}
    for framework in ("jax", "torch"):
        assert len(curves["parallel"][framework]) == 320 // 32
        np.testing.assert_allclose(curves["parallel"][framework], curves["single"][framework], rtol=1e-4,
                                   err_msg=f"{framework}, {benchmark}, use case {use_case}")
