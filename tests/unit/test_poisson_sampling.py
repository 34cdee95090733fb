"""Poisson sampling in the contract (bench_contract.run.sampling): one sampler for both frameworks, the padded
size JAX compiles, each rank's part of a batch, and the spec's sampling field."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from helpers import spec

from bench_contract.results import CONTEXT_NAMES, ResultRows
from bench_contract.run import sampling
from bench_contract.run.sampling import PAD_LABEL, PoissonOverflow, padded_batch_size, poisson_batches, rank_batch
from bench_contract.run.topology import Topology
from bench_contract.spec import JobSpec, SpecError


def poisson_spec(framework: str = "jax", **overrides) -> JobSpec:
    """A DP-SGD cell (use case 3) under Poisson sampling, seed 7."""
    return spec(framework, **({"use_case": 3, "sampling": "poisson", "seed": 7} | overrides))


def test_both_frameworks_draw_the_same_poisson_batches():
    """The batches depend on the seed, the epoch and the step, never on which side or engine draws them: specs that
    differ in everything else a plan gives the two sides draw the same indices, and another seed draws others.
    (That the real backends train on them alike: tests/backends/test_poisson_backends.py, whose loss curves
    coincide step by step.)"""
    jax_batches = sampling.training_batches(poisson_spec("jax"), 1000, epoch=1)
    torch_spec = poisson_spec("torch", cell_id="torch-y-opacus", pair_key="x", dp_engine="opacus")
    torch_batches = sampling.training_batches(torch_spec, 1000, epoch=1)
    assert len(jax_batches) == len(torch_batches) == 1000 // 32
    for a, b in zip(jax_batches, torch_batches):
        np.testing.assert_array_equal(a, b)
    other_seed = sampling.training_batches(poisson_spec("jax", seed=8), 1000, epoch=1)
    assert not all(np.array_equal(a, b) for a, b in zip(jax_batches, other_seed))


def test_poisson_batches_vary_in_size_around_the_expected_batch():
    batches = poisson_batches(1000, 32, seed=7, epoch=0) + poisson_batches(1000, 32, seed=7, epoch=1)
    sizes = np.array([len(b) for b in batches])
    assert len(set(sizes)) > 3  # not fixed-size batches
    assert abs(sizes.mean() - 32) < 4 * np.sqrt(32 / len(sizes))  # mean q*N, sd sqrt(q*N*(1-q)/steps)
    assert all(np.all(np.diff(b) > 0) and b.max(initial=0) < 1000 for b in batches)  # sorted, no repeats
    other_epoch = poisson_batches(1000, 32, seed=7, epoch=2)[0]
    other_seed = poisson_batches(1000, 32, seed=8, epoch=0)[0]
    assert not np.array_equal(batches[0], other_epoch) and not np.array_equal(batches[0], other_seed)


def test_shuffle_sampling_keeps_the_fixed_size_batches():
    batches = sampling.training_batches(poisson_spec(sampling="shuffle"), 1000, epoch=0)
    assert {len(b) for b in batches} == {32}
    assert len(np.unique(np.concatenate(batches))) == 31 * 32  # a permutation: no example twice in an epoch


def exact_tail(n: int, batch: int, size: int) -> Fraction:
    """P(Binomial(n, batch/n) > size), in exact rational arithmetic."""
    q = Fraction(batch, n)
    return sum((comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(size + 1, n + 1)), Fraction(0))


@pytest.mark.parametrize("n, batch", [(300, 16), (1000, 100), (500, 250)])
def test_the_padded_size_is_the_smallest_whose_overflow_is_negligible(n, batch):
    size = padded_batch_size(n, batch)
    assert exact_tail(n, batch, size) <= sampling.OVERFLOW_PROBABILITY < exact_tail(n, batch, size - 1)


@pytest.mark.parametrize("n, batch, overflow", [(40, 4, 0.05), (1000, 1, 0.5), (60, 3, 0.9)])
def test_the_padded_size_at_any_overflow_probability_is_the_smallest_whose_tail_is_below_it(n, batch, overflow):
    """Also where one example (1000 examples, one expected: P(X > 1) = 0.26 <= 0.5 < P(X > 0) = 0.63) or none
    (P(X > 0) = 0.87 <= 0.9) would do: at least one example, whatever the probability allows."""
    size = padded_batch_size(n, batch, overflow_probability=overflow)
    smallest = next(s for s in range(n + 1) if exact_tail(n, batch, s) <= overflow)
    assert size == max(smallest, 1)


def test_the_tail_of_the_batch_size_is_exact_and_ends_at_zero():
    tail = sampling.binomial_upper_tail(30, 0.2)
    assert len(tail) == 31 and tail[-1] == 0.0  # no batch holds more than every example
    np.testing.assert_allclose(tail, [float(exact_tail(30, 6, k)) for k in range(31)], rtol=1e-12, atol=1e-300)


def test_the_compiled_batch_size_is_the_padded_size_of_the_specs_batch_over_its_ranks():
    two_ranks = poisson_spec(use_case=4, nodes=2, batch_size=30)
    assert sampling.compiled_batch_size(two_ranks, 1000) == padded_batch_size(1000, 30, world_size=2) == (
        padded_batch_size(1000, 30) + padded_batch_size(1000, 30) % 2)


def test_a_batch_larger_than_the_training_set_is_refused_in_one_sentence():
    with pytest.raises(sampling.DataError, match="^batch size 64 is larger than the 50 training samples$"):
        sampling.sampling_rate(64, 50)


def test_the_padded_size_splits_evenly_over_the_ranks_and_covers_a_full_draw():
    assert padded_batch_size(1000, 100, world_size=4) % 4 == 0
    assert padded_batch_size(1000, 100, world_size=4) >= padded_batch_size(1000, 100)
    assert padded_batch_size(64, 64) == 64  # q = 1: every example every step


def test_a_padded_batch_masks_its_padding_and_splits_evenly_over_ranks():
    x = np.arange(20, dtype=np.float32).reshape(10, 2) + 1
    y = np.arange(10, dtype=np.int64)
    idx = np.array([1, 4, 5])
    parts = [rank_batch(x, y, idx, Topology(rank, 2), padded_to=6) for rank in range(2)]
    assert [p[0].shape for p in parts] == [(3, 2), (3, 2)]
    labels = np.concatenate([p[1] for p in parts])
    np.testing.assert_array_equal(labels, [1, 4, 5, PAD_LABEL, PAD_LABEL, PAD_LABEL])
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts])[3:], 0)
    # The padded batch keeps the data's types (float32 inputs, int64 labels), as the compiled step expects them.
    assert all(p[0].dtype == np.float32 and p[1].dtype == np.int64 for p in parts)
    assert rank_batch(x, y.astype(np.int32), idx, Topology(), padded_to=6)[1].dtype == np.int32


def test_an_unpadded_batch_of_any_size_is_covered_once_by_the_ranks():
    x = np.arange(10, dtype=np.float32)[:, None]
    y = np.arange(10)
    idx = np.array([0, 2, 3, 7, 9])
    parts = [rank_batch(x, y, idx, Topology(rank, 3))[1] for rank in range(3)]
    assert [len(p) for p in parts] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate(parts), idx)


def test_a_draw_above_the_padded_size_is_refused_not_cut():
    x, y = np.zeros((10, 1), np.float32), np.zeros(10, np.int64)
    with pytest.raises(PoissonOverflow, match="refused rather than cut, which would break the privacy "
                                              "guarantee: run again with another seed$"):
        rank_batch(x, y, np.arange(5), Topology(), padded_to=4)
    full = rank_batch(x, y, np.arange(4), Topology(), padded_to=4)  # a draw of exactly the padded size fits
    assert full[0].shape == (4, 1) and (full[1] != PAD_LABEL).all()


def test_the_spec_refuses_poisson_sampling_outside_dp_sgd_and_unknown_samplers():
    with pytest.raises(SpecError, match="Poisson sampling is for DP-SGD"):
        poisson_spec(use_case=1)
    with pytest.raises(SpecError, match="unknown --sampling 'uniform'; choose from: shuffle, poisson"):
        poisson_spec(sampling="uniform")
    assert dataclasses.replace(poisson_spec(), sampling="shuffle").sampling == "shuffle"


def recorded(spec_: JobSpec, num_samples: int = 1000, padded_to: int | None = None, draws=()) -> dict:
    rows = ResultRows(context={name: None for name in CONTEXT_NAMES})
    record = sampling.SamplingRecord(spec_, padded_to)
    for step, size in enumerate(draws):  # each draw a timed step
        record.step(rows, np.arange(size), epoch=0, step=step)
        record.timed_step(np.arange(size))
    record.finish(rows, num_samples)
    return {row["metric"]: row for row in rows.rows}


def test_a_shuffled_dp_run_says_the_guarantee_does_not_apply():
    rows = recorded(poisson_spec(sampling="shuffle", privacy={"epsilon": 1.0}))
    assert rows["privacy_epsilon"]["value"] is None
    assert "does not apply" in rows["privacy_epsilon"]["note"]
    assert rows["sampling_rate"]["value"] == 32 / 1000 and rows["sampling_rate"]["note"] == "shuffle sampling"


def test_a_poisson_run_records_its_draws_padding_and_budget():
    budget = {"epsilon": 2.5, "delta": 1e-3, "steps": 31, "train_samples": 1000, "accountant": "dp-accounting x"}
    rows = recorded(poisson_spec(privacy=budget), padded_to=40, draws=(30, 34))
    assert rows["padding_fraction"]["value"] == pytest.approx(1 - 64 / 80)
    assert rows["privacy_epsilon"]["value"] == 2.5 and "dp-accounting x" in rows["privacy_epsilon"]["note"]
    assert rows["privacy_delta"]["value"] == 1e-3
    assert "no budget" in recorded(poisson_spec())["privacy_epsilon"]["note"]  # Poisson without a plan-time budget


def test_each_draw_is_recorded_at_its_epoch_and_step():
    rows = ResultRows(context={name: None for name in CONTEXT_NAMES})
    record = sampling.SamplingRecord(poisson_spec(), padded_to=None)
    record.step(rows, np.arange(30), epoch=2, step=5)
    assert [(r["metric"], r["value"], r["epoch"], r["step"]) for r in rows.rows] == [("drawn_batch_size", 30, 2, 5)]


def test_a_budget_planned_for_another_training_set_is_not_recorded_and_the_rows_say_why():
    """The plan takes a benchmark's usual split (CIFAR-10's 45,000); a user's folder may hold another."""
    budget = {"epsilon": 2.5, "delta": 1e-3, "steps": 31, "train_samples": 1000, "accountant": "x"}
    assert recorded(poisson_spec(privacy=budget), num_samples=1000)["privacy_epsilon"]["value"] == 2.5
    other = recorded(poisson_spec(privacy=budget), num_samples=999)["privacy_epsilon"]
    assert other["value"] is None and other["note"].endswith(
        "computed at plan time for 1000 training samples and 31 steps, but this run has 999 and 31")


def test_a_budget_records_the_pld_epsilon_the_rdp_one_beside_it_and_the_delta_rule():
    budget = {"epsilon": 0.27, "epsilon_rdp": 0.84, "delta": 1e-3, "delta_rule": "the largest power of ten below 1/N",
              "steps": 31, "train_samples": 1000, "noise_multiplier": 1.0, "accountant": "dp-accounting x"}
    rows = recorded(poisson_spec(privacy=budget, noise_multiplier=1.0))
    assert rows["privacy_epsilon"]["value"] == 0.27 and rows["privacy_epsilon_rdp"]["value"] == 0.84
    assert rows["privacy_epsilon"]["note"].startswith("at delta 0.001 (the largest power of ten below 1/N) after 31")
    assert rows["privacy_delta"]["note"] == "the largest power of ten below 1/N"


def test_a_budget_planned_for_other_noise_is_not_recorded_and_the_rows_say_why():
    """A spec written by hand (or a plan edited after) with noise of its own: the budget would claim privacy the
    run did not have (sigma 0 is no privacy at all)."""
    budget = {"epsilon": 2.5, "delta": 1e-3, "steps": 31, "train_samples": 1000, "noise_multiplier": 1.0,
              "accountant": "x"}
    assert recorded(poisson_spec(privacy=budget, noise_multiplier=1.0))["privacy_epsilon"]["value"] == 2.5
    other = recorded(poisson_spec(privacy=budget, noise_multiplier=0.0))["privacy_epsilon"]
    assert other["value"] is None and other["note"].endswith(
        "computed at plan time for noise multiplier 1, but this run adds noise of multiplier 0")


def test_every_sampling_and_privacy_row_has_its_unit_and_its_words():
    """The rows a reader sees, whole: each metric's unit and note (mutation testing found them unchecked)."""
    budget = {"epsilon": 0.27, "epsilon_rdp": 0.84, "delta": 1e-3, "delta_rule": "the largest power of ten below 1/N",
              "steps": 31, "train_samples": 1000, "noise_multiplier": 1.0, "accountant": "dp-accounting x"}
    rows = recorded(poisson_spec(privacy=budget, noise_multiplier=1.0), padded_to=40, draws=(30, 34))
    assert {m: (r["unit"], r["note"]) for m, r in rows.items()} == {
        "drawn_batch_size": ("samples", None),
        "sampling_rate": ("fraction", "poisson sampling"),
        "timed_batch_size_mean": ("samples", "the mean drawn examples of the timed steps: the work throughput and "
                                             "flops_per_step count"),
        "padded_batch_size": ("samples", "P(drawn batch > padded) <= 1e-09 per step"),
        "padding_fraction": ("fraction", "share of the computed examples that were padding, over every training step"),
        "privacy_epsilon": ("epsilon", "at delta 0.001 (the largest power of ten below 1/N) after 31 steps; "
                                       "dp-accounting x"),
        "privacy_epsilon_rdp": ("epsilon", "the RDP accountant's epsilon (TF Privacy's), at delta 0.001 (the largest "
                                           "power of ten below 1/N): looser than the PLD one"),
        "privacy_delta": ("delta", "the largest power of ten below 1/N"),
    }
    assert (rows["drawn_batch_size"]["value"], rows["drawn_batch_size"]["step"]) == (34, 1)  # the last draw's
    assert rows["padded_batch_size"]["value"] == 40 and rows["timed_batch_size_mean"]["value"] == 32
    without_rule = {k: v for k, v in budget.items() if k != "delta_rule"}
    assert recorded(poisson_spec(privacy=without_rule, noise_multiplier=1.0))["privacy_epsilon"]["note"] == \
        "at delta 0.001 after 31 steps; dp-accounting x"
    assert recorded(poisson_spec(use_case=1, sampling="shuffle")) == {}  # not DP-SGD: no sampling row at all


@pytest.mark.parametrize("spec_values, reason", [
    ({"sampling": "shuffle"}, "shuffled fixed-size batches: the accountant's guarantee assumes Poisson sampling, so "
                              "it does not apply to this run"),
    ({}, "no budget was computed at plan time (the training split's size was not known there)"),
    ({"privacy": {"epsilon": 1.0, "delta": 1e-3, "steps": 31, "train_samples": 999, "accountant": "x"}},
     "the budget was computed at plan time for 999 training samples and 31 steps, but this run has 1000 and 31"),
])
def test_an_epsilon_that_is_not_available_says_why_in_epsilons(spec_values, reason):
    row = recorded(poisson_spec(**spec_values))["privacy_epsilon"]
    assert (row["value"], row["unit"], row["note"]) == (None, "epsilon", f"not available: {reason}")
