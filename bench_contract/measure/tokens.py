"""A language model's speed in tokens: tokens/s beside samples/s, and its FLOP utilisation by the usual count of
6N FLOPs per token plus attention's (bench_contract.models.language.training_flops_per_token), the number papers
quote, beside the counted FLOPs every cell records (bench_contract.measure.flops)."""

from __future__ import annotations

import numpy as np

from bench_contract.measure.flops import Peak, record_peak_fraction

# What a throughput row in samples/s becomes in tokens/s.
TOKEN_METRICS = {"throughput": "token_throughput", "throughput_pipelined": "token_throughput_pipelined"}


def labels_per_sample(y: np.ndarray) -> int:
    """Tokens a sample trains on: one label per position for a language model, 1 for a classifier."""
    return int(np.prod(y.shape[1:], dtype=np.int64))


def record_token_throughput(rows, metric: str, samples_per_s: float, tokens_per_sample: int) -> None:
    """The tokens/s row of a samples/s throughput row, for samples of several tokens."""
    if tokens_per_sample > 1 and metric in TOKEN_METRICS:
        rows.add(TOKEN_METRICS[metric], samples_per_s * tokens_per_sample, "tokens/s")


def record_model_flops(rows, flops_per_token: float, tokens_per_step: float, times_s: list[float], peak: Peak,
                       devices: int) -> None:
    """model_flops_per_step (the analytic count) and model_flops_utilisation: that count at the timed steps'
    speed, over the peak of every device the step ran on."""
    per_step = flops_per_token * tokens_per_step
    note = "6 x non-embedding parameters + 12 x layers x context x width, per token (training)"
    rows.add("model_flops_per_step", per_step, "FLOP", note=note)
    record_peak_fraction(rows, "model_flops_utilisation", per_step, times_s, peak, devices, note)
