"""DP-SGD's privacy budget, computed once at plan time for both frameworks: epsilon at delta after the training
steps, from Google's dp-accounting (its RDP accountant, the one TF Privacy's compute_dp_sgd_privacy uses).

The mechanism accounted for is the one the backends run: each step a Poisson-sampled batch (sampling rate
q = B/N, bench_contract.run.sampling), its clipped gradients summed and noised with N(0, (sigma*C)^2), composed
over every training step (epochs * (N // B), warm-up steps included: they update the model too). The neighbouring
relation is add-or-remove-one, the one Poisson sampling's analysis uses.

dp_accounting (and scipy beneath it) is imported when a budget is computed, never at the orchestrator's start.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from importlib import metadata
from typing import Any

from orchestrator.errors import UsageError

ACCOUNTANT = "dp-accounting RdpAccountant (Poisson-subsampled Gaussian, add-or-remove-one)"


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
    """Epsilon at delta after `steps` DP-SGD steps; infinite without noise."""
    from dp_accounting import rdp

    accountant = rdp.RdpAccountant()
    with quiet_accountant():
        accountant.compose(dp_sgd_event(sampling_rate, noise_multiplier, steps))
        return float(accountant.get_epsilon(delta))


@functools.cache
def noise_for_epsilon(sampling_rate: float, steps: int, target_epsilon: float, delta: float) -> float:
    """The smallest noise multiplier (to dp-accounting's default tolerance) whose budget is target_epsilon."""
    import dp_accounting
    from dp_accounting import rdp

    with quiet_accountant():
        try:
            return float(dp_accounting.calibrate_dp_mechanism(
                rdp.RdpAccountant, lambda sigma: dp_sgd_event(sampling_rate, sigma, steps), target_epsilon, delta))
        except (ValueError, dp_accounting.mechanism_calibration.NoBracketIntervalFoundError) as error:
            raise UsageError(f"no noise multiplier reaches --target-epsilon {target_epsilon:g} at delta {delta:g} in "
                             f"{steps} steps at sampling rate {sampling_rate:.4g} ({error}); give a larger target") from None


def budget(train_samples: int, batch_size: int, epochs: int, noise_multiplier: float,
           delta: float | None) -> dict[str, Any]:
    """The JobSpec's privacy field: what the accountant was given and what it gave."""
    q = batch_size / train_samples
    steps = epochs * (train_samples // batch_size)
    delta = 1 / train_samples if delta is None else delta
    return {"epsilon": epsilon(q, noise_multiplier, steps, delta), "delta": delta, "sampling_rate": q,
            "steps": steps, "train_samples": train_samples, "noise_multiplier": noise_multiplier,
            "accountant": accountant_label()}
