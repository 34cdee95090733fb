"""The GPU peak table, the CPU calibration's cache and the MFU rows (the frameworks' FLOP counts are checked in
tests/backends/test_efficiency_and_provenance.py)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from helpers import rows_for_test

from bench_contract.measure import flops, timing
from bench_contract.measure.flops import Flops, Peak, gpu_peak, record_utilisation

T = 1e12


@pytest.mark.parametrize("nvml_name, precision, tflops", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.5),  # SXM5
    ("NVIDIA H100 80GB HBM3", "fp32", 67),
    ("NVIDIA H100 PCIe", "bf16", 756.5),
    ("NVIDIA H100 NVL", "fp16", 835.5),
    ("NVIDIA H200", "bf16", 989.5),
    ("NVIDIA H200 NVL", "bf16", 835.5),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312),
    ("NVIDIA A100-PCIE-40GB", "fp32", 19.5),
    ("NVIDIA A100 80GB PCIe", "fp16", 312),
    ("NVIDIA RTX A5000", "fp32", 27.8),
    ("NVIDIA GeForce RTX 3080", "fp16", 59.5),
    ("NVIDIA GeForce RTX 2080 Ti", "fp32", 13.4),
    ("NVIDIA L40S", "bf16", 362.05),
    ("Tesla V100-SXM2-32GB", "fp16", 125),
    ("Tesla V100-PCIE-16GB", "fp32", 14),
    ("NVIDIA A40", "fp32", 37.4),
    ("NVIDIA L4", "bf16", 121),
    # TF32 tensor-core rates, dense (without them tf32 MFU was always n/a, "no hardware support")
    ("NVIDIA H100 80GB HBM3", "tf32", 494.5),
    ("NVIDIA H100 PCIe", "tf32", 378),
    ("NVIDIA H200", "tf32", 494.5),
    ("NVIDIA A100-SXM4-80GB", "tf32", 156),
    ("NVIDIA L4", "tf32", 60),
])
def test_gpu_peaks_are_looked_up_by_nvml_name_and_precision(nvml_name, precision, tflops):
    peak = gpu_peak(nvml_name, precision)
    assert peak.flops == pytest.approx(tflops * T) and "datasheet" in peak.method


@pytest.mark.parametrize("nvml_name, precision, reason", [
    ("Tesla V100-SXM2-32GB", "bf16", "no bf16 rate"),  # Volta has no bfloat16
    ("NVIDIA GeForce RTX 2080 Ti", "bf16", "no bf16 rate"),
    ("Tesla V100-SXM2-32GB", "tf32", "no tf32 rate"),  # TF32 came with Ampere
    ("Tesla T4", "tf32", "no tf32 rate"),
    ("NVIDIA GeForce RTX 3080 Ti", "fp32", "no peak FLOP/s for GPU"),  # not the RTX 3080's figure
    ("NVIDIA B200", "bf16", "no peak FLOP/s for GPU"),
])
def test_a_gpu_or_precision_outside_the_table_is_not_available(nvml_name, precision, reason):
    peak = gpu_peak(nvml_name, precision)
    assert peak.flops is None and peak.method.startswith("not available: ") and reason in peak.method


def test_without_nvml_the_gpu_peak_is_looked_up_by_the_frameworks_name(monkeypatch):
    """The GPU model tag's rule (NVML's name, else the framework's): an H100 without NVML still has its MFU."""
    monkeypatch.setattr(flops, "nvml_gpu_names", lambda ids: [])
    assert flops.device_gpu_peak(("0",), "NVIDIA H100 80GB HBM3", "bf16").flops == pytest.approx(989.5 * T)
    monkeypatch.setattr(flops, "nvml_gpu_names", lambda ids: ["NVIDIA A100-SXM4-80GB"])
    assert flops.device_gpu_peak(("0",), "NVIDIA H100 80GB HBM3", "bf16").flops == pytest.approx(312 * T)


AMPERE_AND_LATER = ("H100", "H200", "A100", "L40S", "A40", "L4", "A10", "RTX A5000", "RTX 3080", "RTX 4090")


def test_every_ampere_or_later_gpu_has_a_rate_for_every_precision():
    """A precision missing from an entry reads as "no hardware support", which is false from Ampere on."""
    checked = [(pattern, peaks) for pattern, peaks in flops.PEAK_FLOPS
               if any(name in pattern.replace("\\b", "") for name in AMPERE_AND_LATER)]
    assert len(checked) >= len(AMPERE_AND_LATER)  # every name matched an entry (H100 and H200 have several)
    for pattern, peaks in checked:
        assert set(peaks) == {"fp32", "tf32", "bf16", "fp16"}, pattern


class FakeClock:
    """perf_counter for bench_contract.measure.timing, moved on by the fake matmuls' own durations."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def fake_matmuls(monkeypatch, seconds_at_1024: float) -> tuple[Callable[[int], Callable[[], None]], list[int]]:
    """A matmul_of whose n x n call takes seconds_at_1024 * (n / 1024)^3 on a fake clock; the sizes called, in
    order."""
    clock, calls = FakeClock(), []
    monkeypatch.setattr(flops, "_calibrated", {})
    monkeypatch.setattr(timing, "time", clock)

    def matmul_of(n: int):
        def call():
            calls.append(n)
            clock.now += seconds_at_1024 * (n / 1024) ** 3
        return call
    return matmul_of, calls


def test_the_cpu_calibration_is_measured_once_per_process_and_precision(monkeypatch):
    matmul_of, calls = fake_matmuls(monkeypatch, 0.03)
    first = flops.cpu_peak("fake", "fp32", matmul_of, lambda out: None, repeats=3)
    # 1 + 3 probes of 256, then 1 + 3 calls of 1024, whose fastest gives the peak.
    assert calls == [256] * 4 + [1024] * 4
    assert first.flops == pytest.approx(2 * 1024**3 / 0.03) and first.method.startswith(
        "measured: fastest of 3 fake 1024x1024 fp32")
    assert flops.cpu_peak("fake", "fp32", matmul_of, lambda out: None, repeats=3) is first
    assert len(calls) == 8
    flops.cpu_peak("fake", "bf16", matmul_of, lambda out: None, repeats=3)
    assert len(calls) == 16


def test_a_precision_without_a_fast_path_is_calibrated_on_a_smaller_matmul(monkeypatch):
    """PyTorch's bf16 1024x1024 matmul took 2.5 s on an AVX2 CPU: six of them would cost 15 s of every cell."""
    matmul_of, calls = fake_matmuls(monkeypatch, 2.5)
    peak = flops.cpu_peak("fake", "bf16", matmul_of, lambda out: None)
    assert calls == [256] * 4 + [512] * 6  # 512 predicted at 0.31 s, 1024 at 2.5 s: over the 0.5 s a call may take
    assert peak.flops == pytest.approx(2 * 512**3 / (2.5 / 8))
    assert peak.method.startswith("measured: fastest of 5 fake 512x512 bf16")


@pytest.mark.parametrize("probe_s, size", [
    (0.5 / 64, 1024),  # 1024 predicted at exactly the largest call allowed
    (0.5 / 64 * 1.01, 512),
    (0.5 / 8, 512),
    (0.5 / 8 * 1.01, 256),
    (5.0, 256),  # never below the probe's own size
])
def test_the_calibration_size_is_the_largest_predicted_within_the_call_limit(probe_s, size):
    assert flops.calibration_size(probe_s) == size


def test_mfu_is_achieved_flops_over_the_peak_of_every_device():
    rows = rows_for_test()
    record_utilisation(rows, Flops(1e9, "counted"), Peak(1e11, "table"), times_s=[0.01, 0.03], devices=2)
    got = {r["metric"]: r["value"] for r in rows.rows}
    assert got["achieved_flops"] == pytest.approx(1e9 * 2 / 0.04)
    assert got["mfu"] == pytest.approx(5e10 / 2e11)
    assert got["peak_flops"] == 1e11


def test_without_a_peak_mfu_is_not_available_and_achieved_flops_still_recorded():
    rows = rows_for_test()
    record_utilisation(rows, Flops(1e9, "counted"), Peak(None, "not available: no peak for GPU 'X'"), [0.1], 1)
    got = {r["metric"]: r for r in rows.rows}
    assert got["achieved_flops"]["value"] == pytest.approx(1e10)
    assert got["mfu"]["value"] is None and got["mfu"]["note"] == "not available: no peak for GPU 'X'"
    rows = rows_for_test()
    record_utilisation(rows, Flops(None, "not available: nothing counted"), Peak(1.0, "table"), [0.1], 1)
    assert all(r["value"] is None or r["metric"] == "peak_flops" for r in rows.rows)
    assert not any(r["value"] is not None and math.isnan(r["value"]) for r in rows.rows)
