"""What sharding is for, measured on the two nodes of the local Slurm cluster: GPT-2 small (`--variant full`, 124M
parameters) trained with Adam, replicated (DDP, JAX replicated) and sharded (FSDP2, JAX's FSDP step), and each
device's peak memory lower when sharded, in both frameworks. On a CPU no framework measures a device's
memory, so the peak is each process's peak resident memory (peak_host_rss): a process drives one CPU device. The
tiny model cannot show it (its state, 138 KB, is lost in a runtime of hundreds of MB), and the full one takes about
15 minutes of both cores here: `make test-heavy` runs it, `make test` does not."""

import numpy as np
import pandas as pd
import pytest
from helpers import REPO_ROOT, run_cli
from test_language_model_on_slurm import LOSS_RTOL, parallelism

pytestmark = [pytest.mark.heavy, pytest.mark.usefixtures("framework_envs")]  # tests/conftest.py


def test_sharding_lowers_each_devices_peak_memory_in_both_frameworks(slurm_cluster, tmp_path):
    results = tmp_path / "results"
    proc = run_cli("--benchmark", "nlp", "--models", "gpt", "--variant", "full", "--use-case", "2",
                   "--parallelism", "ddp,fsdp", "--nodes", "2", "--synthetic", "--synthetic-samples", "10",
                   "--batch-sizes", "2", "--epochs", "1", "--optimizer", "adam", "--learning-rate", "0.0003",
                   "--warmup-steps", "1", "--timed-steps", "1", "--min-duration", "0",
                   "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"), "--wait",
                   "--results-dir", str(results), "--scripts-dir", str(tmp_path / "scripts"),
                   env=slurm_cluster.env, timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    collect = run_cli("collect", "--results-dir", str(results), env=slurm_cluster.env)
    assert collect.returncode == 0, collect.stdout + collect.stderr
    rows = pd.read_parquet(results / "merged.parquet")
    rows["parallelism"] = rows.settings.map(parallelism)

    def value(framework, layout, metric):
        return rows.loc[(rows.framework == framework) & (rows.parallelism == layout) & (rows.metric == metric),
                        "value"].item()

    for framework in ("jax", "torch"):
        state = {layout: value(framework, layout, "state_memory_per_device") for layout in ("ddp", "fsdp")}
        peak = {layout: value(framework, layout, "peak_host_rss") for layout in ("ddp", "fsdp")}
        # Parameters and Adam's two moments, 1,424 MiB a device replicated: sharded over two, half (no dimension
        # of GPT-2 small is odd, so FSDP2 pads none).
        assert state["fsdp"] == pytest.approx(state["ddp"] / 2, rel=1e-3), (framework, state)
        # The peak falls by less than the state's half (712 MiB): every rank still reads the whole initial
        # weights file (475 MiB) before it keeps its shard, and the allocators keep some freed memory. Measured in
        # two runs here: 635 and 689 MiB less in JAX, 460 and 390 in PyTorch, while one layout's peak moved by up
        # to 136 MiB between the runs (JAX replicated: 5,770 and 5,906 MiB). Asked: a fifth of the replicated
        # state (285 MiB), between that noise and the smallest saving seen.
        assert peak["ddp"] - peak["fsdp"] > state["ddp"] / 5, (framework, peak, state)
        losses = {layout: rows[(rows.framework == framework) & (rows.parallelism == layout)
                               & (rows.metric == "train_loss")].sort_values("step")["value"].to_numpy()
                  for layout in ("ddp", "fsdp")}
        # The same mean gradient summed in another order, as in the tiny model's test (LOSS_RTOL's derivation);
        # four steps at a small learning rate keep Adam's per-parameter normalisation from growing the difference.
        np.testing.assert_allclose(losses["fsdp"], losses["ddp"], rtol=LOSS_RTOL, err_msg=framework)
    assert "peak per device: each process's peak resident memory (peak_host_rss)" in collect.stdout
