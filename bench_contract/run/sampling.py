"""Which examples each training step takes, the same in both frameworks: shuffled fixed-size batches, or Poisson
sampling, the sampler DP-SGD's privacy accounting assumes.

Poisson sampling (use cases 3 and 4): every step, each of the N training examples joins the batch independently
with probability q = B/N, so a batch holds B examples on average and a varying number each step. An epoch is
N // B steps, as with shuffling. The draw is seeded from (seed, epoch, step), so every framework and every rank
draws the same indices.

JAX compiles one batch shape: its batches are padded to `padded_batch_size`, a size a drawn batch exceeds with
probability at most OVERFLOW_PROBABILITY per step; a padded example has label PAD_LABEL, and the step gives it
no loss and no gradient. A draw above that size is refused (`PoissonOverflow`) rather than cut, which would
break the guarantee, or compiled anew, which would put a compilation inside the timed steps. PyTorch takes each
batch at its drawn size.

DP-SGD divides the noised sum of clipped gradients by the expected batch size q*N = B (spec.batch_size), not by
the drawn size, in both frameworks: the drawn size depends on the data, and dividing by it would leak it.
"""

from __future__ import annotations

import math

import numpy as np

from bench_contract.data.datasets import DataError, epoch_batches
from bench_contract.results import ResultRows
from bench_contract.run.topology import Topology
from bench_contract.spec import JobSpec

PAD_LABEL = -1  # the label of a padding example: no class has it, so the step can mask it out
# Per step: with it, a million steps overflow with probability at most 1e-3 (a union bound).
OVERFLOW_PROBABILITY = 1e-9
# Keeps the Poisson draws apart from the shuffle's permutations, which are seeded from (seed, epoch) alone.
POISSON_STREAM = 0x5053


class PoissonOverflow(RuntimeError):
    """A Poisson batch larger than the padded size the step was compiled for."""


def sampling_rate(batch_size: int, num_samples: int) -> float:
    """q = B/N: the probability that one example joins one step's batch."""
    if batch_size > num_samples:
        raise DataError(f"batch size {batch_size} is larger than the {num_samples} training samples")
    return batch_size / num_samples


def steps_per_epoch(num_samples: int, batch_size: int) -> int:
    """N // B for both samplers, so that an epoch has the same number of steps whichever samples."""
    return num_samples // batch_size


def poisson_batch(num_samples: int, batch_size: int, seed: int, epoch: int, step: int) -> np.ndarray:
    """The sorted indices of one step's Poisson batch: each example joins with probability B/N."""
    q = sampling_rate(batch_size, num_samples)
    rng = np.random.default_rng([seed, epoch, step, POISSON_STREAM])
    return np.flatnonzero(rng.random(num_samples) < q)


def poisson_batches(num_samples: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The N // B Poisson batches of one epoch."""
    return [poisson_batch(num_samples, batch_size, seed, epoch, step)
            for step in range(steps_per_epoch(num_samples, batch_size))]


def training_batches(spec: JobSpec, num_samples: int, epoch: int) -> list[np.ndarray]:
    """The global batches of one epoch, as the spec's sampler draws them."""
    if spec.sampling == "poisson":
        return poisson_batches(num_samples, spec.batch_size, spec.seed, epoch)
    return epoch_batches(num_samples, spec.batch_size, spec.seed, epoch)


def binomial_upper_tail(num_samples: int, q: float) -> np.ndarray:
    """P(X > k) for k = 0 .. N, X ~ Binomial(N, q), from the log-pmf's recurrence (numpy only)."""
    k = np.arange(num_samples, dtype=np.float64)
    log_ratios = np.log(num_samples - k) - np.log(k + 1) + math.log(q) - math.log1p(-q)
    log_pmf = np.concatenate(([num_samples * math.log1p(-q)], num_samples * math.log1p(-q) + np.cumsum(log_ratios)))
    pmf = np.exp(log_pmf)
    # tail[k] = sum of pmf[k+1:], summed from the small end so that the far tail is not lost to rounding
    return np.concatenate((np.cumsum(pmf[::-1])[::-1][1:], [0.0]))


def padded_batch_size(num_samples: int, batch_size: int, world_size: int = 1,
                      overflow_probability: float = OVERFLOW_PROBABILITY) -> int:
    """The smallest size s, a multiple of world_size, with P(Binomial(N, B/N) > s) <= overflow_probability:
    the one batch shape a compiled step takes under Poisson sampling."""
    q = sampling_rate(batch_size, num_samples)
    if q == 1.0:
        size = num_samples  # every example, every step
    else:
        size = int(np.argmax(binomial_upper_tail(num_samples, q) <= overflow_probability))
    return -(-max(size, 1) // world_size) * world_size


def rank_batch(x: np.ndarray, y: np.ndarray, idx: np.ndarray, topology: Topology,
               padded_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """This rank's part of the global batch `idx`.

    padded_to (a Poisson batch for a compiled step): the batch is first padded to that size with zero inputs
    labelled PAD_LABEL, then split evenly, so every rank holds the same shape. Without it, a batch of any size
    splits into contiguous parts whose sizes differ by at most one (a Poisson batch at its drawn size); every
    rank draws the same indices, so together they cover the batch exactly once."""
    if padded_to is None:
        share = np.array_split(idx, topology.world_size)[topology.rank]
        return x[share], y[share]
    if len(idx) > padded_to:
        raise PoissonOverflow(
            f"a Poisson batch of {len(idx)} examples is larger than the padded size {padded_to} the step was "
            f"compiled for (chosen so that this happens with probability at most {OVERFLOW_PROBABILITY:g} per step); "
            "it is refused rather than cut, which would break the privacy guarantee: run again with another seed")
    pad = padded_to - len(idx)
    x_full = np.concatenate([x[idx], np.zeros((pad, *x.shape[1:]), x.dtype)])
    y_full = np.concatenate([y[idx], np.full(pad, PAD_LABEL, y.dtype)])
    share = topology.shard(np.arange(padded_to))
    return x_full[share], y_full[share]


def compiled_batch_size(spec: JobSpec, num_samples: int) -> int:
    """The one global batch size a compiled step takes under Poisson sampling: padded_batch_size for the spec."""
    return padded_batch_size(num_samples, spec.batch_size, spec.world_size)


def privacy_budget_mismatch(spec: JobSpec, num_samples: int) -> str | None:
    """Why the plan-time budget does not describe this run, or None when it does. The plan knows a benchmark's
    usual training split (CIFAR-10's 45,000); a user's folder may hold another, and then its epsilon would be
    wrong: the run goes on, and its rows say why they have none."""
    budget = spec.privacy
    if not budget:
        return None
    noise = budget.get("noise_multiplier", spec.noise_multiplier)
    if noise != spec.noise_multiplier:
        return (f"the budget was computed at plan time for noise multiplier {noise:g}, but this run adds noise of "
                f"multiplier {spec.noise_multiplier:g}")
    steps = spec.epochs * steps_per_epoch(num_samples, spec.batch_size)
    if (budget["train_samples"], budget["steps"]) == (num_samples, steps):
        return None
    return (f"the budget was computed at plan time for {budget['train_samples']} training samples and "
            f"{budget['steps']} steps, but this run has {num_samples} and {steps}")


class SamplingRecord:
    """What the sampler drew: each Poisson step's batch size, the examples of the timed steps (the work their
    throughput and FLOPs count) and, where batches were padded for a compiled step, the share of the computed
    examples that was padding."""

    def __init__(self, spec: JobSpec, padded_to: int | None) -> None:
        self.spec, self.padded_to, self.drawn, self.timed = spec, padded_to, [], []

    def step(self, rows: ResultRows, idx: np.ndarray, epoch: int, step: int) -> None:
        if self.spec.sampling == "poisson":
            self.drawn.append(len(idx))
            rows.add("drawn_batch_size", len(idx), "samples", epoch=epoch, step=step)

    def timed_step(self, idx: np.ndarray) -> None:
        """A step whose time was recorded took the global batch `idx` (all ranks' examples, never the padding)."""
        self.timed.append(len(idx))

    def examples_per_timed_step(self) -> float:
        """The timed steps' mean examples: B for shuffled batches; under Poisson sampling the mean of their draws,
        not B (a batch holds B on average and a random number each step, off by about sqrt(B)) nor the last
        batch's draw."""
        return sum(self.timed) / len(self.timed)

    def finish(self, rows: ResultRows, num_samples: int) -> None:
        if not self.spec.case.per_sample:
            return
        rows.add("sampling_rate", sampling_rate(self.spec.batch_size, num_samples), "fraction",
                 note=f"{self.spec.sampling} sampling")
        if self.spec.sampling == "poisson" and self.timed:
            rows.add("timed_batch_size_mean", self.examples_per_timed_step(), "samples",
                     note="the mean drawn examples of the timed steps: the work throughput and flops_per_step count")
        if self.padded_to is not None:
            rows.add("padded_batch_size", self.padded_to, "samples",
                     note=f"P(drawn batch > padded) <= {OVERFLOW_PROBABILITY:g} per step")
            rows.add("padding_fraction", 1 - sum(self.drawn) / (self.padded_to * len(self.drawn)), "fraction",
                     note="share of the computed examples that were padding, over every training step")
        record_privacy(self.spec, rows, num_samples)


def record_privacy(spec: JobSpec, rows: ResultRows, num_samples: int) -> None:
    """Epsilon and delta from the plan-time budget, or why there is none."""
    if spec.sampling != "poisson":
        rows.add_unavailable("privacy_epsilon", "epsilon", "shuffled fixed-size batches: the accountant's guarantee "
                                                           "assumes Poisson sampling, so it does not apply to this run")
        return
    if not spec.privacy:
        rows.add_unavailable("privacy_epsilon", "epsilon", "no budget was computed at plan time (the training "
                                                           "split's size was not known there)")
        return
    mismatch = privacy_budget_mismatch(spec, num_samples)
    if mismatch:
        rows.add_unavailable("privacy_epsilon", "epsilon", mismatch)
        return
    budget = spec.privacy
    delta = f"at delta {budget['delta']:.3g}" + (f" ({budget['delta_rule']})" if budget.get("delta_rule") else "")
    rows.add("privacy_epsilon", budget["epsilon"], "epsilon",
             note=f"{delta} after {budget['steps']} steps; {budget['accountant']}")
    if "epsilon_rdp" in budget:  # a spec planned before the PLD accountant has the RDP epsilon as its epsilon
        rows.add("privacy_epsilon_rdp", budget["epsilon_rdp"], "epsilon",
                 note=f"the RDP accountant's epsilon (TF Privacy's), {delta}: looser than the PLD one")
    rows.add("privacy_delta", budget["delta"], "delta", note=budget.get("delta_rule"))
