"""The privacy budget (orchestrator.plan.privacy) and the command line's sampling and budget options: epsilon as the
accountant documents it, the budget in every DP cell's spec, the refusals in one sentence with nothing written."""

import json
import math

import numpy as np
import pytest
from helpers import run_cli

from orchestrator.errors import UsageError
from orchestrator.plan import matrix, privacy
from orchestrator.plan.settings import RunSettings

# TF Privacy's compute_dp_sgd_privacy documents this example in its docstring: "compute_dp_sgd_privacy --N=60000
# --batch_size=256 --noise_multiplier=1.12 --epochs=60 --delta=1e-5 ... The output states that DP-SGD with these
# parameters satisfies (2.92, 1e-5)-DP." (tensorflow/privacy, tensorflow_privacy/privacy/analysis/
# compute_dp_sgd_privacy.py; it takes ceil(epochs * N / batch) = 14063 steps and converts RDP to (epsilon, delta)
# with epsilon = min over orders a of RDP(a) + log(1/delta) / (a - 1), at its orders 1.1 ... 10.9, 12 ... 63).
# dp-accounting converts the same RDP curve with the tighter bound of Balle et al. 2020 (arXiv:2004.00010,
# Proposition 12, cited in its rdp_privacy_accountant._compute_epsilon), so its epsilon is below 2.92.
TF_PRIVACY_ORDERS = np.array([1 + x / 10 for x in range(1, 100)] + list(range(12, 64)))
N, BATCH, SIGMA, STEPS, DELTA = 60000, 256, 1.12, math.ceil(60 * 60000 / 256), 1e-5


def rdp_curve() -> np.ndarray:
    from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_poisson_subsampled_gaussian

    return STEPS * _compute_rdp_poisson_subsampled_gaussian(BATCH / N, SIGMA, TF_PRIVACY_ORDERS)


def test_epsilon_matches_tf_privacys_documented_example():
    a = TF_PRIVACY_ORDERS
    classic = np.min(rdp_curve() - math.log(DELTA) / (a - 1))
    assert round(classic, 2) == 2.92  # the accountant's RDP reproduces the documented value
    tighter = np.min(rdp_curve() + np.log1p(-1 / a) - (math.log(DELTA) + np.log(a)) / (a - 1))
    ours = privacy.epsilon(BATCH / N, SIGMA, STEPS, DELTA)
    assert ours == pytest.approx(tighter, rel=1e-3) and ours < 2.92


def test_no_noise_spends_an_infinite_budget_and_more_steps_spend_more():
    assert privacy.epsilon(0.01, 0.0, 100, 1e-5) == math.inf
    assert privacy.epsilon(0.01, 1.0, 200, 1e-5) > privacy.epsilon(0.01, 1.0, 100, 1e-5)


def test_a_target_epsilon_derives_the_noise_that_spends_it():
    sigma = privacy.noise_for_epsilon(BATCH / N, STEPS, 2.5, DELTA)
    assert privacy.epsilon(BATCH / N, sigma, STEPS, DELTA) == pytest.approx(2.5, abs=0.02)
    assert sigma == pytest.approx(SIGMA, abs=0.02)  # 1.12 spends 2.52


def plan(tmp_path, *args):
    return run_cli("--benchmark", "digits", "--dry-run", "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"), *args)


def specs(tmp_path) -> list[dict]:
    return [json.loads(line) for path in sorted((tmp_path / "r").glob("*/specs/*.jsonl"))
            for line in path.read_text().splitlines()]


def test_dp_cells_sample_poisson_by_default_with_one_budget_for_both_frameworks(tmp_path):
    proc = plan(tmp_path, "--use-case", "3", "--batch-sizes", "32", "--epochs", "2", "--noise-multiplier", "1.1")
    assert proc.returncode == 0, proc.stderr
    jax, torch = specs(tmp_path)
    assert jax["sampling"] == torch["sampling"] == "poisson"
    assert jax["privacy"] == torch["privacy"]
    budget = jax["privacy"]
    steps = 2 * (1257 // 32)  # digits' training split; warm-up steps included: they update the model too
    assert (budget["train_samples"], budget["steps"], budget["delta"]) == (1257, steps, 1 / 1257)
    assert budget["epsilon"] == pytest.approx(privacy.epsilon(32 / 1257, 1.1, steps, 1 / 1257))
    assert "dp-accounting" in budget["accountant"]


def test_target_epsilon_and_delta_reach_the_spec(tmp_path):
    proc = plan(tmp_path, "--use-case", "3", "--batch-sizes", "32", "--target-epsilon", "3", "--delta", "1e-4")
    assert proc.returncode == 0, proc.stderr
    spec = specs(tmp_path)[0]
    assert spec["target_epsilon"] == 3.0 and spec["privacy"]["delta"] == 1e-4
    assert spec["privacy"]["epsilon"] == pytest.approx(3.0, abs=0.03)
    assert spec["noise_multiplier"] == spec["privacy"]["noise_multiplier"] != 1.0


def test_planning_prints_none_of_the_accountants_internal_warnings(tmp_path):
    """CIFAR-10's synthetic campaign (q=0.078, sigma=1) made dp-accounting log four absl warnings about RDP orders
    it left out; epsilon does not need them (the minimum over the other orders), and the user saw only alarm."""
    proc = run_cli("--benchmark", "cifar10", "--use-case", "3", "--synthetic", "--variant", "tiny", "--dry-run",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    assert "absl" not in proc.stderr and "failed to converge" not in proc.stderr, proc.stderr
    assert math.isfinite(specs(tmp_path)[0]["privacy"]["epsilon"])


def test_shuffle_sampling_plans_no_budget(tmp_path):
    proc = plan(tmp_path, "--use-case", "3", "--batch-sizes", "32", "--sampling", "shuffle")
    assert proc.returncode == 0, proc.stderr
    assert {(s["sampling"], json.dumps(s["privacy"])) for s in specs(tmp_path)} == {("shuffle", "{}")}


@pytest.mark.parametrize("args, message", [
    (["--use-case", "1", "--sampling", "poisson"],
     "use case 1 trains without DP-SGD, so --sampling poisson does not apply (use cases 3 and 4 do)"),
    (["--use-case", "1", "--delta", "1e-5"], "use case 1 trains without DP-SGD, so --delta does not apply"),
    (["--use-case", "3", "--target-epsilon", "2", "--noise-multiplier", "1"],
     "--target-epsilon derives the noise multiplier; give it or --noise-multiplier, not both"),
    (["--use-case", "3", "--sampling", "shuffle", "--delta", "1e-5"],
     "--delta asks the privacy accountant, whose guarantee assumes Poisson sampling; it does not combine with"),
    (["--use-case", "3", "--sampling", "uniform"], "unknown --sampling 'uniform'; choose from: shuffle, poisson"),
    (["--use-case", "3", "--delta", "1.5"], "--delta must be between 0 and 1, got 1.5"),
    (["--use-case", "3", "--target-epsilon", "0"], "--target-epsilon must be positive, got 0.0"),
    (["--use-case", "3", "--find-max-batch", "--sampling", "poisson"],
     "--find-max-batch measures memory at fixed batch shapes; it does not combine with --sampling poisson"),
])
def test_sampling_and_budget_options_are_refused_where_they_mean_nothing(tmp_path, args, message):
    proc = plan(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing half-written


def test_a_target_epsilon_needs_the_training_sets_size_at_plan_time():
    settings = RunSettings(epochs=1, learning_rate=0.01, optimizer="sgd", seed=0, warmup_steps=1,
                                  data_source="real", data_dir="/data/text", synthetic_samples=256, device="auto",
                                  sampling="poisson", target_epsilon=2.0)
    with pytest.raises(UsageError, match="--target-epsilon needs the training split's size at plan time"):
        matrix.with_privacy(matrix.catalog.benchmark("nlp"), settings, 32)
    unknown = matrix.with_privacy(matrix.catalog.benchmark("nlp"), matrix.replace(settings, target_epsilon=None), 32)
    assert unknown == {}  # Poisson without a budget: the rows say why
