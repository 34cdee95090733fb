"""Poisson sampling in both backends (use case 3, digits, one short epoch without noise): the same batches in both,
JAX padded to one compiled shape and PyTorch at the drawn size take the same DP-SGD steps, and the rows carry what
was drawn, the padding and the plan-time privacy budget."""

import numpy as np
import pytest
from test_backends import FRAMEWORKS, make_spec, run_backend

from bench_contract.results import read_task_table
from bench_contract.run.sampling import padded_batch_size, poisson_batches
from orchestrator.plan import privacy

TRAIN_SAMPLES = 1257  # digits' training split
BATCH = 32


@pytest.fixture(scope="module")
def poisson_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("poisson")
    budget = privacy.budget(TRAIN_SAMPLES, BATCH, 1, 0.0, None)  # as the orchestrator plans it
    frames = {}
    for framework in FRAMEWORKS:
        spec = make_spec(framework, tmp, use_case=3, epochs=1, batch_size=BATCH, learning_rate=0.5, warmup_steps=2,
                         noise_multiplier=0.0, sampling="poisson", privacy=budget, loop_batch_size=4, timed_steps=2,
                         min_duration_s=0.0)
        proc = run_backend(framework, spec, tmp)
        assert proc.returncode == 0, proc.stderr
        frames[framework] = read_task_table(spec.results_path).to_pandas()
    return frames


def per_step(df, metric):
    return df[df.metric == metric].sort_values("step")["value"].to_numpy()


def test_both_backends_train_on_the_contracts_poisson_batches(poisson_runs):
    expected = [len(b) for b in poisson_batches(TRAIN_SAMPLES, BATCH, seed=0, epoch=0)]
    for df in poisson_runs.values():
        np.testing.assert_array_equal(per_step(df, "drawn_batch_size"), expected)
    assert len(set(expected)) > 1  # sizes vary from step to step


def test_padded_jax_and_drawn_size_pytorch_take_the_same_steps(poisson_runs):
    """Without noise the loss curves coincide: padding adds nothing, and both divide by B, not the drawn size."""
    jax_losses, torch_losses = (per_step(poisson_runs[fw], "train_loss") for fw in FRAMEWORKS)
    assert all(len(set(per_step(df, "drawn_batch_size"))) > 1 for df in poisson_runs.values())  # Poisson batches
    assert len(jax_losses) == TRAIN_SAMPLES // BATCH
    np.testing.assert_allclose(jax_losses, torch_losses, rtol=1e-3)
    assert jax_losses[-5:].mean() < jax_losses[:5].mean()


def test_jax_compiles_one_padded_shape_and_records_the_padding(poisson_runs):
    jax = poisson_runs["jax"]
    drawn = per_step(jax, "drawn_batch_size")
    padded = padded_batch_size(TRAIN_SAMPLES, BATCH)
    assert per_step(jax, "padded_batch_size").tolist() == [padded] and drawn.max() <= padded
    assert per_step(jax, "recompilations_timed").tolist() == [0]  # every drawn size ran in the one compiled step
    assert per_step(jax, "padding_fraction")[0] == pytest.approx(1 - drawn.sum() / (padded * len(drawn)))
    assert "padded_batch_size" not in set(poisson_runs["torch"].metric)  # PyTorch runs each batch as drawn


def test_both_record_the_plan_time_budget(poisson_runs):
    """What each backend records is the spec's budget, read back whole: the delta the plan chose (1e-4, not the
    1/N a backend would reach for), its rule, its steps, its accountants (with no noise both say infinite; a
    finite budget's wiring is tests/unit/test_poisson_sampling.py's)."""
    for df in poisson_runs.values():
        assert per_step(df, "sampling_rate")[0] == pytest.approx(BATCH / TRAIN_SAMPLES)
        assert per_step(df, "privacy_delta")[0] == privacy.default_delta(TRAIN_SAMPLES) == 1e-4
        assert per_step(df, "privacy_epsilon")[0] == per_step(df, "privacy_epsilon_rdp")[0] == np.inf  # no noise
        note = df[df.metric == "privacy_epsilon"].note.iloc[0]
        assert note == (f"at delta 0.0001 (the largest power of ten below 1/N) after {TRAIN_SAMPLES // BATCH} steps; "
                        f"{privacy.accountant_label()}")


def summary(df, metric):
    return df[(df.metric == metric) & df.step.isna()]["value"].iloc[0]


def test_both_count_the_timed_steps_drawn_examples_and_say_how_their_loops_ran(poisson_runs):
    """Throughput once divided by B, and MFU took the last batch's draw. From each real backend's rows: the
    throughput is the timed steps' drawn examples over their time, and the FLOPs a step, counted on JAX's padded
    batch and on PyTorch's drawn one, are the same per drawn example."""
    per_drawn = {}
    for framework, df in poisson_runs.items():
        drawn = dict(zip(df[df.metric == "drawn_batch_size"].step, df[df.metric == "drawn_batch_size"].value))
        timed = df[df.metric == "step_time"]
        examples = [drawn[step] for step in timed.step]
        assert summary(df, "timed_batch_size_mean") == pytest.approx(np.mean(examples), rel=1e-12)
        # Float64 sums of 37 step times read back from milliseconds: a few 1e-16 of relative error.
        assert summary(df, "throughput") == pytest.approx(sum(examples) / (timed.value.sum() / 1e3), rel=1e-12)
        per_drawn[framework] = summary(df, "flops_per_step") / summary(df, "timed_batch_size_mean")
    # Both count the same matmuls per example (tests/backends/test_efficiency_and_provenance.py): equal but for the
    # rounding of a count scaled by drawn/computed examples, a few 1e-16.
    assert per_drawn["jax"] == pytest.approx(per_drawn["torch"], rel=1e-12)
    compiled = {fw: (summary(df, "per_sample_grads_vectorized_compiled"), summary(df, "per_sample_grads_loop_compiled"))
                for fw, df in poisson_runs.items()}
    assert compiled == {"jax": (1.0, 1.0), "torch": (0.0, 0.0)}
