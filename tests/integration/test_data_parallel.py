"""Use cases 2 and 4 on the real two-node local Slurm cluster: two processes on two nodes, in both frameworks.

Each data-parallel run must see world size 2 and take, step by step, the same losses as one process on
the same global batches (use cases 1 and 3 through the local executor). Noise is off for use case 4, so
the per-sample path is compared exactly too.
"""

import json
import subprocess

import numpy as np
import pandas as pd
import pytest
from helpers import REPO_ROOT, metric, run_cli, wait_until

pytestmark = pytest.mark.usefixtures("framework_envs")  # tests/conftest.py

SINGLE_PROCESS = {2: 1, 4: 3}  # the one-process use case with the same update
# Few timed runs of the pipelined and per-sample measurements: these tests compare losses, not times.
QUICK = ["--min-iterations", "3", "--min-duration", "0"]
COMMON = ["--benchmark", "digits", "--batch-sizes", "32", "--epochs", "1", "--noise-multiplier", "0",
          "--learning-rate", "0.1", *QUICK]
SACCT_TIMEOUT_S = 30


def run_and_collect(results, scripts, *args, env=None, common=COMMON):
    proc = run_cli(*common, *args, "--wait", "--results-dir", str(results), "--scripts-dir", str(scripts),
                   env=env, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    collect = run_cli("collect", "--results-dir", str(results), env=env)
    assert collect.returncode == 0, collect.stderr
    manifest = json.loads(next(results.glob("*/manifest.json")).read_text())
    return manifest, pd.read_parquet(results / "merged.parquet")


def loss_curves(df):
    return {fw: g[g.metric == "train_loss"].sort_values("step")["value"].to_numpy() for fw, g in df.groupby("framework")}


def job_nodes(env, job_id):
    """The nodes Slurm's accounting says the job ran on (records reach slurmdbd asynchronously)."""
    def nodes():
        out = subprocess.run(["sacct", "-X", "-n", "-j", job_id, "-o", "NodeList", "--parsable2"],
                             capture_output=True, text=True, env=env, timeout=30).stdout.split()
        return out if out and out[0] not in ("", "None") else None

    return wait_until(nodes, seconds=SACCT_TIMEOUT_S, what=f"sacct reporting the nodes of job {job_id}", poll_s=0.5)


@pytest.mark.parametrize("use_case", [2, 4])
def test_two_processes_on_two_nodes_match_one_process(slurm_cluster, use_case, tmp_path):
    env = slurm_cluster.env
    manifest, parallel = run_and_collect(
        tmp_path / "parallel", tmp_path / "s1", "--use-case", str(use_case), "--nodes", "2", "--tasks-per-node", "1",
        "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"), env=env)
    _, single = run_and_collect(tmp_path / "single", tmp_path / "s2", "--use-case", str(SINGLE_PROCESS[use_case]),
                                "--executor", "local")

    assert set(parallel.framework) == {"jax", "torch"}
    for framework, rows in parallel.groupby("framework"):
        world = rows.loc[rows.metric == "world_size", "value"]
        assert list(world) == [2.0], f"{framework}: world size {list(world)}"
        assert set(rows.device_count) == {2}
        assert rows.cell_id.nunique() == 1, "rank 0 alone writes the cell's file"
        per_device = rows.set_index("metric").loc[["throughput", "throughput_per_device"], "value"]
        assert per_device["throughput_per_device"] == pytest.approx(per_device["throughput"] / 2)
        job = manifest["submissions"][framework]["job_id"]
        assert job_nodes(env, f"{job}_0") == ["n[1-2]"]
    # The same global batches, the same update: the two-process curves follow the one-process ones.
    parallel_losses, single_losses = loss_curves(parallel), loss_curves(single)
    for framework in ("jax", "torch"):
        assert len(parallel_losses[framework]) == 1257 // 32
        np.testing.assert_allclose(parallel_losses[framework], single_losses[framework], rtol=1e-4,
                                   err_msg=f"{framework}, use case {use_case}")
    np.testing.assert_allclose(parallel_losses["jax"], parallel_losses["torch"], rtol=1e-4)
    # The FLOPs of the global step do not depend on how it is split: both frameworks count the matmuls of the
    # global step (JAX from the jaxpr, whose shapes are global; PyTorch each rank's shard times the ranks), and
    # matmuls split exactly over the batch. (XLA's cost analysis, which the count once was, also held the SGD
    # update every device repeats, 2.1% more here.)
    for framework in ("jax", "torch"):
        two, one = (metric(df[df.framework == framework], "flops_per_step") for df in (parallel, single))
        assert two == pytest.approx(one, rel=1e-9), framework
    assert set(parallel.slurm_nodelist) == {"n[1-2]"}
    energy = parallel[parallel.metric == "energy_timed"]
    assert energy.value.isna().all() and energy.note.str.startswith("not available").all()


# The image models without batch norm (the batch-norm ones are refused data-parallel training; see the catalog).
# Use case 4 with the GroupNorm ResNet, the DP-trainable one.
IMAGE_MODELS = [("imagenet", "vit_b_16", 2), ("cifar10", "cnn", 2), ("cifar10", "resnet18_gn", 4)]


def image_args(benchmark, model):
    # Three steps of 16 (64 images less a tenth each for validation and test): the third loss follows two updates.
    # One timed run of each measurement, since the test compares losses: the tiny ResNet's JAX step takes 3.6 s of
    # this machine's CPU, and two more runs of the pipelined step and of the per-sample timing cost 20 s a process.
    return ["--benchmark", benchmark, "--models", model, "--variant", "tiny", "--synthetic", "--synthetic-samples",
            "64", "--batch-sizes", "16", "--epochs", "1", "--warmup-steps", "1", "--noise-multiplier", "0",
            "--loop-batch-size", "4", "--min-iterations", "1", "--min-duration", "0"]


@pytest.mark.parametrize("benchmark, model, use_case", IMAGE_MODELS)
def test_an_image_model_trains_on_two_nodes_like_one_process(slurm_cluster, tmp_path, benchmark, model, use_case):
    env, common = slurm_cluster.env, image_args(benchmark, model)
    if use_case == 4:
        # Fixed-size shards. Under Poisson sampling, JAX's two-process ViT run differed from one process by 1.8e-4
        # at the fourth step (the first three equal). That was before JAX's DP-SGD sum over devices was written with
        # shard_map (jax_backend/steps.py): XLA's wrong per-example gradients of convolutions (the ViT's patch
        # embedding is one) may have been the cause; not run again. test_two_processes_on_two_nodes_match_one_process
        # compares Poisson batches on two nodes.
        common = [*common, "--sampling", "shuffle"]
    profile = str(REPO_ROOT / "profiles" / "local_slurm.toml")
    _, parallel = run_and_collect(tmp_path / "parallel", tmp_path / "s1", "--use-case", str(use_case), "--nodes", "2",
                                  "--tasks-per-node", "1", "--profile", profile, env=env, common=common)
    _, single = run_and_collect(tmp_path / "single", tmp_path / "s2", "--use-case", str(SINGLE_PROCESS[use_case]),
                                "--executor", "local", common=common)
    assert set(parallel.framework) == {"jax", "torch"}
    for framework, rows in parallel.groupby("framework"):
        assert list(rows.loc[rows.metric == "world_size", "value"]) == [2.0], framework
    parallel_losses, single_losses = loss_curves(parallel), loss_curves(single)
    for framework in ("jax", "torch"):
        assert len(parallel_losses[framework]) == (64 - 2 * 6) // 16
        np.testing.assert_allclose(parallel_losses[framework], single_losses[framework], rtol=1e-4,
                                   err_msg=framework)
    np.testing.assert_allclose(parallel_losses["jax"], parallel_losses["torch"], rtol=1e-4)
