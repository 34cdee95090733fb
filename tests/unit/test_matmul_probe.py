"""The float32 matmul probe every row carries tells float32 arithmetic from TF32 and bfloat16: a TF32
setting that did not take (or one a library turned on) shows in the row, on any CPU or GPU."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import rows_for_test

from bench_contract.run.precision import REDUCED_MATMUL_BOUND, float32_matmul_error, record_matmul_probe


def rounded(x: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """x rounded to nearest with `mantissa_bits` explicit mantissa bits, as the tensor cores read TF32 (10) or
    bfloat16 (7) operands."""
    drop = 23 - mantissa_bits
    bits = x.astype(np.float32).view(np.uint32)
    bits = (bits + np.uint32(1 << (drop - 1))) & ~np.uint32((1 << drop) - 1)
    return bits.view(np.float32)


@pytest.mark.parametrize("mantissa_bits", [10, 7])  # TF32, bfloat16
def test_reduced_precision_operands_are_above_the_bound_and_float32_below(mantissa_bits):
    assert float32_matmul_error(lambda a, b: a @ b) < REDUCED_MATMUL_BOUND / 10
    reduced = float32_matmul_error(lambda a, b: rounded(a, mantissa_bits) @ rounded(b, mantissa_bits))
    assert reduced > 4 * REDUCED_MATMUL_BOUND


def test_the_row_says_which_arithmetic_the_probe_saw():
    rows = rows_for_test()
    record_matmul_probe(rows, lambda a, b: a @ b)
    record_matmul_probe(rows, lambda a, b: rounded(a, 10) @ rounded(b, 10))
    fp32, tf32 = rows.rows
    assert fp32["metric"] == "float32_matmul_error" and "against float64: float32" in fp32["note"]
    assert "reduced precision (TF32 or lower)" in tf32["note"] and tf32["value"] > fp32["value"]


def test_the_probe_row_word_for_word_and_at_its_bound(monkeypatch):
    """The row's unit and note as readers see them; an error of exactly the bound is still float32 (the bound is
    the largest error float32 arithmetic may show), and the probe's matrices are the same every run."""
    from bench_contract.run import precision

    assert float32_matmul_error(lambda a, b: a @ b) == float32_matmul_error(lambda a, b: a @ b)
    monkeypatch.setattr(precision, "float32_matmul_error", lambda matmul: REDUCED_MATMUL_BOUND)
    rows = rows_for_test()
    record_matmul_probe(rows, None)
    monkeypatch.setattr(precision, "float32_matmul_error", lambda matmul: 2 * REDUCED_MATMUL_BOUND)
    record_matmul_probe(rows, None)
    at_bound, above = rows.rows
    assert at_bound["unit"] == above["unit"] == "relative"
    assert at_bound["note"].endswith("against float64: float32 (bound 6.1e-05)")
    assert above["note"].endswith("against float64: reduced precision (TF32 or lower) (bound 6.1e-05)")


def test_the_tf32_override_variables_are_removed_and_kept_for_the_rows(monkeypatch):
    from bench_contract.measure import device

    monkeypatch.setattr(device, "CLEARED_VARIABLES", {})
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    device.clear_tf32_overrides()
    assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE" not in os.environ
    recorded = device.recorded_environment()
    assert recorded["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "1 (cleared)" and "NVIDIA_TF32_OVERRIDE" not in recorded
