"""Every benchmark runs training (use case 1) and DP-SGD (use case 3) in both frameworks
through the local executor, and the results collect. Synthetic data and tiny variants keep it short; the
backend tests check that the two frameworks take the same steps, this checks the whole path."""

import pandas as pd
import pytest
from helpers import metric, run_cli

# (benchmark, model): every image benchmark, with a model that runs both use cases (nlp and gnn have their own
# test of the same path, tests/integration/test_nlp_and_gnn.py, which also checks that they learn).
BENCHMARK_MODELS = [
    ("digits", "mlp"),
    ("mnist", "mlp"),
    ("mnist", "cnn"),
    ("cifar10", "cnn"),
    ("imagenet", "vit_b_16"),
]


@pytest.mark.parametrize("use_case", [1, 3])
@pytest.mark.parametrize("benchmark, model", BENCHMARK_MODELS)
def test_trains_in_both_frameworks_and_collects(tmp_path, benchmark, model, use_case):
    results = tmp_path / "results"
    proc = run_cli("--benchmark", benchmark, "--use-case", str(use_case), "--models", model, "--synthetic",
                   "--synthetic-samples", "200", "--batch-sizes", "16", "--epochs", "1", "--warmup-steps", "1",
                   "--variant", "tiny", "--loop-batch-size", "4", "--min-iterations", "3", "--min-duration", "0",
                   "--executor", "local",
                   "--results-dir", str(results), "--scripts-dir", str(tmp_path / "scripts"), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    collect = run_cli("collect", "--results-dir", str(results))
    assert collect.returncode == 0, collect.stderr
    merged = pd.read_parquet(results / "merged.parquet")
    assert set(merged.framework) == {"jax", "torch"}
    assert set(merged.benchmark) == {benchmark} and set(merged.use_case) == {use_case}
    for framework in ("jax", "torch"):
        rows = merged[merged.framework == framework]
        assert len(rows[rows.metric == "train_loss"]) == 160 // 16  # 200 samples, a tenth each for val and test
        assert metric(rows, "throughput") > 0
        assert (use_case == 3) == ("vectorization_speedup" in set(rows.metric))
