"""DP-SGD's privacy budget, computed once at plan time for both frameworks: epsilon at delta after the training
steps, from Google's dp-accounting.

The epsilon reported is the PLD accountant's (privacy loss distributions), the tight numerical accounting that
dp-accounting's and Opacus's users see by default (Opacus's PRV accountant agrees with it); the RDP accountant's,
the one TF Privacy's compute_dp_sgd_privacy uses, is recorded beside it: 1.1 to 3 times looser (CIFAR-10, B=128,
sigma 1, one epoch, delta 1e-5: 0.28 against 0.84).

The mechanism accounted for is the one the backends run: each step a Poisson-sampled batch (sampling rate
q = B/N, bench_contract.run.sampling), its clipped gradients summed and noised with N(0, (sigma*C)^2), composed
over every training step (epochs * (N // B), warm-up steps included: they update the model too). The neighbouring
relation is add-or-remove-one, the one Poisson sampling's analysis uses.

delta is the largest power of ten below 1/N unless --delta gives one: 1/N itself is the borderline value at which a
mechanism that releases one whole record at random qualifies.

dp_accounting (and scipy beneath it) is imported when a budget is computed, never at the orchestrator's start.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from importlib import metadata
from typing import Any

from orchestrator.errors import UsageError

ACCOUNTANT = "dp-accounting PLDAccountant (Poisson-subsampled Gaussian, add-or-remove-one; RDP beside it)"
DEFAULT_DELTA_RULE = "the largest power of ten below 1/N"
# PLD's value discretisation when calibrating the noise: ten times coarser than the default (1e-4) the reported
# epsilon is computed with, so each of the calibration's dozen evaluations takes 0.05 s instead of 0.8 s. A coarser
# grid rounds the privacy loss up (a pessimistic estimate), so the noise found spends at most the target.
CALIBRATION_DISCRETIZATION = 1e-3


def accountant_label() -> str:
    """The accountant and its version, as rows record it."""
    return f"{ACCOUNTANT}, dp-accounting {metadata.version('dp-accounting')}"


@contextlib.contextmanager
def quiet_accountant():
    """dp-accounting logs, through absl, each RDP order it cannot evaluate ("_compute_log_a_frac failed to converge
    ... Excluding this order"), as it did for CIFAR-10's usual synthetic campaign (q=0.078, sigma=1). Epsilon is the
    minimum over the orders left, so still a valid bound; the lines only alarm someone planning a campaign."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def dp_sgd_event(sampling_rate: float, noise_multiplier: float, steps: int):
    import dp_accounting

    step = dp_accounting.PoissonSampledDpEvent(sampling_rate, dp_accounting.GaussianDpEvent(noise_multiplier))
    return dp_accounting.SelfComposedDpEvent(step, steps)


@functools.cache  # every framework's cell (and every trial) of one configuration asks for the same budget
def epsilon(sampling_rate: float, noise_multiplier: float, steps: int, delta: float) -> float:
    """Epsilon at delta after `steps` DP-SGD steps, from the PLD accountant; infinite without noise."""
    if noise_multiplier == 0:
        return math.inf  # no noise: the PLD of a Gaussian with sigma 0 is not defined, the budget is infinite
    from dp_accounting import pld

    accountant = pld.PLDAccountant()
    accountant.compose(dp_sgd_event(sampling_rate, noise_multiplier, steps))
    return float(accountant.get_epsilon(delta))


@functools.cache
def epsilon_rdp(sampling_rate: float, noise_multiplier: float, steps: int, delta: float) -> float:
    """The same budget from the RDP accountant (TF Privacy's), recorded beside the PLD one; infinite without noise."""
    from dp_accounting import rdp

    accountant = rdp.RdpAccountant()
    with quiet_accountant():
        accountant.compose(dp_sgd_event(sampling_rate, noise_multiplier, steps))
        return float(accountant.get_epsilon(delta))


@functools.cache
def noise_for_epsilon(sampling_rate: float, steps: int, target_epsilon: float, delta: float) -> float:
    """The smallest noise multiplier (to dp-accounting's default tolerance) whose PLD budget is target_epsilon."""
    import dp_accounting
    from dp_accounting import pld

    def accountant():
        return pld.PLDAccountant(value_discretization_interval=CALIBRATION_DISCRETIZATION)

    try:
        return float(dp_accounting.calibrate_dp_mechanism(
            accountant, lambda sigma: dp_sgd_event(sampling_rate, sigma, steps), target_epsilon, delta))
    except (ValueError, dp_accounting.mechanism_calibration.NoBracketIntervalFoundError) as error:
        raise UsageError(f"no noise multiplier reaches --target-epsilon {target_epsilon:g} at delta {delta:g} in "
                         f"{steps} steps at sampling rate {sampling_rate:.4g} ({error}); give a larger target") from None


def default_delta(train_samples: int) -> float:
    """The largest power of ten strictly below 1/N: 1e-5 for CIFAR-10's 45,000 or MNIST's 55,000, 1e-4 for 1,000.
    In integers, so that N = 1,000 gives 1e-4, never 1/N itself through a rounded logarithm."""
    return 10.0 ** -len(str(train_samples))


def chosen_delta(train_samples: int, delta: float | None) -> float:
    """The budget's delta: --delta where given, else default_delta. A --delta at or above 1/N is refused: at 1/N a
    mechanism that releases one whole example at random qualifies, so its epsilon promises nothing (0.5 for digits'
    1,257 examples gave epsilon 0.0)."""
    if delta is None:
        return default_delta(train_samples)
    if delta * train_samples >= 1:
        raise UsageError(f"--delta {delta:g} must be below 1/N = 1/{train_samples:,} ({1 / train_samples:.3g}), N "
                         "the training examples: at or above it, releasing one example outright meets the guarantee; "
                         f"the default is {default_delta(train_samples):g}")
    return delta


def budget(train_samples: int, batch_size: int, epochs: int, noise_multiplier: float,
           delta: float | None) -> dict[str, Any]:
    """The JobSpec's privacy field: what the accountant was given and what it gave."""
    q = batch_size / train_samples
    steps = epochs * (train_samples // batch_size)
    delta_rule = "--delta" if delta is not None else DEFAULT_DELTA_RULE
    delta = chosen_delta(train_samples, delta)
    return {"epsilon": epsilon(q, noise_multiplier, steps, delta),
            "epsilon_rdp": epsilon_rdp(q, noise_multiplier, steps, delta), "delta": delta, "delta_rule": delta_rule,
            "sampling_rate": q, "steps": steps, "train_samples": train_samples, "noise_multiplier": noise_multiplier,
            "accountant": accountant_label()}
