"""Model FLOPs utilisation: FLOPs per step, achieved FLOP/s, the device's peak, and their ratio.

FLOPs per step are the matmuls and convolutions of one step, 2 per multiply-add, in both frameworks (JAX: counted
from the step's traced jaxpr, jax_backend.flops; PyTorch: torch.utils.flop_counter.FlopCounterMode over one step),
each recorded with its method. Not XLA's cost analysis: on a GPU it leaves out the cuBLAS and cuDNN calls.
The peak is the vendor's dense (not sparse) figure for the GPU model and precision, looked up by NVML's device
name, or on a CPU a measured one: the best of a few square matmuls in the framework's own environment and
threads, at the cell's precision, measured once per process.

fp32 runs with TF32 off (both backends), so its GPU peak is the plain FP32 rate, not the TF32 tensor-core one;
bf16 and fp16 use the dense tensor-core rate with FP32 accumulation (what frameworks use).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from bench_contract.measure.device import nvml_gpu_names
from bench_contract.measure.roofline import gpu_bandwidth, record_roofline
from bench_contract.measure.timing import fastest_call

T = 1e12
# (pattern on NVML's device name, {precision: dense peak FLOP/s}). First match wins, so the more specific
# names come first. A precision missing from a GPU's entry has no hardware support there (TF32 came with Ampere,
# bfloat16 too): every entry of an Ampere or later GPU has all four (tests/unit/test_flops.py).
PEAK_FLOPS: list[tuple[str, dict[str, float]]] = [
    # NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100): FP32 67 / 51 / 60 TF; TF32 tensor 989 / 756 /
    # 835 TF and BF16/FP16 tensor 1,979 / 1,513 / 1,671 TF with sparsity, halved here for dense.
    (r"H100.*NVL", {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T}),
    (r"H100.*PCIe", {"fp32": 51 * T, "tf32": 378 * T, "bf16": 756.5 * T, "fp16": 756.5 * T}),
    (r"H100", {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T}),  # SXM5: "NVIDIA H100 80GB HBM3"
    # NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): SXM FP32 67 TF, TF32 989 TF and BF16 1,979 TF
    # sparse; NVL FP32 60 TF, TF32 835 TF and BF16 1,671 TF sparse.
    (r"H200.*NVL", {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T}),
    (r"H200", {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T}),
    # NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100): SXM and PCIe alike, FP32 19.5 TF, TF32 tensor
    # 156 TF dense (312 sparse), BF16/FP16 tensor 312 TF dense (624 sparse).
    (r"A100", {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T}),
    # NVIDIA L40S datasheet: FP32 91.6 TF; TF32 tensor 183 TF dense (366 sparse); BF16/FP16 tensor 362.05 TF
    # dense (733 sparse).
    (r"L40S", {"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362.05 * T, "fp16": 362.05 * T}),
    # NVIDIA A40 datasheet: FP32 37.4 TF; TF32 tensor 74.8 TF dense (149.6 sparse); BF16/FP16 tensor 149.7 TF
    # dense (299.4 sparse).
    (r"\bA40\b", {"fp32": 37.4 * T, "tf32": 74.8 * T, "bf16": 149.7 * T, "fp16": 149.7 * T}),
    # NVIDIA L4 datasheet: FP32 30.3 TF; TF32 tensor 120 TF sparse, so 60 dense; BF16/FP16 tensor 121 TF dense
    # (242 sparse).
    (r"\bL4\b", {"fp32": 30.3 * T, "tf32": 60 * T, "bf16": 121 * T, "fp16": 121 * T}),
    # NVIDIA A10 datasheet: FP32 31.2 TF; TF32 tensor 62.5 TF dense (125 sparse); BF16/FP16 tensor 125 TF dense
    # (250 sparse).
    (r"\bA10\b", {"fp32": 31.2 * T, "tf32": 62.5 * T, "bf16": 125 * T, "fp16": 125 * T}),
    # NVIDIA RTX A5000 datasheet: FP32 27.8 TF; TF32 tensor 111.1 TF and BF16/FP16 tensor 222.2 TF with
    # sparsity, so 55.6 and 111.1 dense.
    (r"RTX A5000", {"fp32": 27.8 * T, "tf32": 55.6 * T, "bf16": 111.1 * T, "fp16": 111.1 * T}),
    # NVIDIA Ampere GA102 whitepaper (RTX 3080): FP32 29.8 TF; TF32 tensor 29.8 TF dense; FP16 tensor with FP32
    # accumulate 59.5 TF dense (GeForce runs FP32 accumulation at half the FP16-accumulate rate); BF16 the same.
    (r"RTX 3080$", {"fp32": 29.8 * T, "tf32": 29.8 * T, "bf16": 59.5 * T, "fp16": 59.5 * T}),
    # NVIDIA Ada whitepaper (RTX 4090): FP32 82.6 TF; TF32 tensor 82.6 TF dense; FP16 tensor with FP32
    # accumulate 165.2 TF dense.
    (r"RTX 4090$", {"fp32": 82.6 * T, "tf32": 82.6 * T, "bf16": 165.2 * T, "fp16": 165.2 * T}),
    # NVIDIA Turing whitepaper (RTX 2080 Ti reference): FP32 13.4 TF; FP16 tensor with FP32 accumulate
    # 53.8 TF. Turing has no bfloat16.
    (r"RTX 2080 Ti$", {"fp32": 13.4 * T, "fp16": 53.8 * T}),
    # NVIDIA V100 datasheet: SXM2 FP32 15.7 TF, tensor 125 TF; PCIe FP32 14 TF, tensor 112 TF. No bfloat16.
    (r"V100.*PCIE", {"fp32": 14 * T, "fp16": 112 * T}),
    (r"V100", {"fp32": 15.7 * T, "fp16": 125 * T}),
    # NVIDIA T4 datasheet: FP32 8.1 TF; FP16 mixed-precision tensor 65 TF. No bfloat16.
    (r"\bT4\b", {"fp32": 8.1 * T, "fp16": 65 * T}),
]


@dataclass(frozen=True)
class Peak:
    flops: float | None  # FLOP/s of one device, or None
    method: str  # where the figure comes from, or "not available: <reason>"
    bandwidth: float | None = None  # memory bandwidth of one device in bytes/s (bench_contract.measure.roofline)
    bandwidth_method: str = "not available: no bandwidth was looked up or measured"


def gpu_peak(name: str, precision: str) -> Peak:
    for pattern, peaks in PEAK_FLOPS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            if precision not in peaks:
                return Peak(None, f"not available: {name} has no {precision} rate in the peak table (no hardware support)",
                            *gpu_bandwidth(name))
            return Peak(peaks[precision], f"vendor datasheet, dense {precision}, for {name!r} (pattern {pattern!r})",
                        *gpu_bandwidth(name))
    return Peak(None, f"not available: no peak FLOP/s for GPU {name!r} in bench_contract.measure.flops.PEAK_FLOPS",
                *gpu_bandwidth(name))


def device_gpu_peak(device_ids, framework_name: str, precision: str) -> Peak:
    """The peak of the GPU a framework uses, looked up by NVML's name, else by the framework's own name for it
    (the GPU model tag's rule, bench_contract.measure.device.device_model): without NVML an H100 still has its MFU."""
    names = nvml_gpu_names(device_ids)
    return gpu_peak(names[0] if names else framework_name, precision)


CALIBRATION_N = 1024  # 2 GFLOP per matmul: long enough to time, short enough for every cell
CALIBRATION_REPEATS = 5
# A precision the CPU has no fast path for runs far slower: PyTorch's bf16 1024x1024 matmul took 2.5 s on an AVX2
# EPYC (0.9 GFLOP/s against 71 in fp32), so six calls cost 15 s of every bf16 cell. The size is therefore chosen
# from the fastest of a few PROBE_N matmuls, whose work is 1/64 of N's: the largest of PROBE_N, 2 PROBE_N, ... N whose
# call, predicted by n^3, takes at most MAX_CALL_S. An fp32 1024 call takes 30-60 ms on the CPUs we have, 8 or more
# times under it, so fp32 keeps N even on a loaded machine; that bf16 matmul is measured at 512 (1.5 s in all).
CALIBRATION_PROBE_N = 256
CALIBRATION_PROBE_REPEATS = 3
CALIBRATION_MAX_CALL_S = 0.5
_calibrated: dict[tuple[str, str], Peak] = {}


def calibration_size(probe_s: float, probe_n: int = CALIBRATION_PROBE_N, largest: int = CALIBRATION_N,
                     max_call_s: float = CALIBRATION_MAX_CALL_S) -> int:
    """The largest n of probe_n, 2 probe_n, ... largest whose matmul, predicted from probe_n's time `probe_s`
    by the n^3 multiply-adds, takes at most `max_call_s`; probe_n if even that one took longer."""
    n = probe_n
    while n * 2 <= largest and probe_s * (n * 2 / probe_n) ** 3 <= max_call_s:
        n *= 2
    return n


def cpu_peak(framework: str, precision: str, matmul_of: Callable[[int], Callable[[], Any]],
             synchronize: Callable[[Any], None], repeats: int = CALIBRATION_REPEATS) -> Peak:
    """The CPU's peak as measured: 2 n^3 / the fastest of `repeats` calls of an n x n matmul (after one
    untimed call), `matmul_of(n)` making the call; n from calibration_size. Measured once per process and
    precision; later calls return the cached figure."""
    key = (framework, precision)
    if key not in _calibrated:
        probe_s = fastest_call(matmul_of(CALIBRATION_PROBE_N), synchronize, CALIBRATION_PROBE_REPEATS)
        n = calibration_size(probe_s)
        best = fastest_call(matmul_of(n), synchronize, repeats)
        _calibrated[key] = Peak(2 * n**3 / best, f"measured: fastest of {repeats} {framework} {n}x{n} {precision} "
                                                 f"matmuls in this process")
    return _calibrated[key]


@dataclass(frozen=True)
class Flops:
    per_step: float | None
    method: str  # e.g. "matmul and convolution FLOPs of the traced jaxpr ...", or "not available: <reason>"
    bytes_per_step: float | None = None  # bytes moved to and from memory (bench_contract.measure.roofline)
    bytes_method: str = "not available: the backend did not count bytes"

    def of_real_examples(self, real: float, computed: int) -> "Flops":
        """The work of `real` examples a step, from a count over a batch that computed `computed`: the timed steps'
        mean drawn examples, from the last batch as it ran (a Poisson draw, or padded to one shape, whose padding
        is no work: issue 29, defect 4; issue 63). Every counted FLOP is a matmul or a convolution over the batch's
        examples (a per-example gradient's are its own), so the count scales with them; the bytes stay those
        moved."""
        if self.per_step is None or real == computed:
            return self
        return replace(self, per_step=self.per_step * real / computed,
                       method=f"{self.method}; x {real:.6g}/{computed}, the timed steps' mean drawn examples over "
                              "the counted batch's computed ones")


# The metrics that are a step's FLOP/s over the peak FLOP/s of the devices it ran on: MFU by the counted FLOPs, and
# by the language model's analytic count. Each process divides by its own peak, and two calibrations of one CPU
# differ (66.4 against 77.4 GFLOP/s in a GPT run), so the comparison and the merged dataset put every metric named
# here, and only those, against the peak both frameworks share on the device (orchestrator.results.compare.
# with_shared_peak, orchestrator.results.shared_calibration). record_peak_fraction records nothing else.
PEAK_FRACTIONS = ("mfu", "model_flops_utilisation")


def record_peak_fraction(rows, metric: str, flops_per_step: float, times_s: list[float], peak: Peak, devices: int,
                         note: str) -> None:
    """`metric`, one of PEAK_FRACTIONS: `flops_per_step` at the timed steps' speed over the peak of every device
    the step ran on; not available, with the reason, where no peak is known. `note` says whose FLOPs."""
    if metric not in PEAK_FRACTIONS:
        raise ValueError(f"{metric!r} is not in PEAK_FRACTIONS, so the comparison would not share its peak")
    if peak.flops is None:
        rows.add_unavailable(metric, "fraction", peak.method.removeprefix("not available: "))
        return
    achieved = flops_per_step * len(times_s) / sum(times_s)
    rows.add(metric, achieved / (peak.flops * devices), "fraction",
             note=f"{note}; over {devices} x peak ({peak.method})")


def record_utilisation(rows, flops: Flops, peak: Peak, times_s: list[float], devices: int) -> None:
    """flops_per_step, achieved_flops (FLOP/s over the timed steps), peak_flops and mfu (achieved over the
    peak of every device the step ran on)."""
    reason = lambda method: method.removeprefix("not available: ")  # noqa: E731
    if flops.per_step is None:
        for metric, unit in (("flops_per_step", "FLOP"), ("achieved_flops", "FLOP/s"), ("mfu", "fraction")):
            rows.add_unavailable(metric, unit, reason(flops.method))
    else:
        achieved = flops.per_step * len(times_s) / sum(times_s)
        rows.add("flops_per_step", flops.per_step, "FLOP", note=flops.method)
        rows.add("achieved_flops", achieved, "FLOP/s", note=flops.method)
        record_peak_fraction(rows, "mfu", flops.per_step, times_s, peak, devices, "achieved_flops")
    if peak.flops is None:
        rows.add_unavailable("peak_flops", "FLOP/s", reason(peak.method))
    else:
        rows.add("peak_flops", peak.flops, "FLOP/s", note=peak.method)
    record_roofline(rows, flops.per_step, flops.bytes_per_step, flops.bytes_method, peak.flops, peak.bandwidth,
                    peak.bandwidth_method)
