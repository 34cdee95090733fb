"""Roofline: bytes moved per step, arithmetic intensity, the device's memory bandwidth, and whether a cell is
compute-bound or memory-bound.

A step's arithmetic intensity is its FLOPs over the bytes it moves to and from memory. Below the device's
ridge point (peak FLOP/s over peak bandwidth) the step cannot reach the compute peak however well it runs:
it is memory-bound; above it, compute-bound.

Bytes per step come from the framework, each with its method: XLA's cost analysis ("bytes accessed" of the
compiled, fused program) in JAX; in PyTorch the sizes of every ATen operation's input and output tensors
(eager PyTorch runs each operation as its own kernel, so this is what it moves, up to what the caches keep).
The two count different programs (XLA's fused one, PyTorch's unfused one), which is the point of comparing them.

Peak bandwidth is the vendor's figure for the GPU model, looked up by NVML's name, or on a CPU a measured one:
the best of a few STREAM-style scale operations (read one array, write another) on arrays larger than the caches.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bench_contract.measure.timing import fastest_call

G = 1e9
# (pattern on NVML's device name, memory bandwidth in bytes/s), first match wins; vendor datasheets.
PEAK_BANDWIDTH: list[tuple[str, float]] = [
    (r"H100.*NVL", 3900 * G),  # H100 datasheet: NVL 3.9 TB/s
    (r"H100.*PCIe", 2000 * G),  # PCIe 2 TB/s
    (r"H100", 3350 * G),  # SXM 3.35 TB/s
    (r"H200", 4800 * G),  # H200 datasheet: SXM and NVL 4.8 TB/s
    (r"A100.*80GB.*PCIe", 1935 * G),  # A100 datasheet: 80GB PCIe 1,935 GB/s
    (r"A100.*80GB", 2039 * G),  # 80GB SXM 2,039 GB/s
    (r"A100", 1555 * G),  # 40GB 1,555 GB/s
    (r"L40S", 864 * G),  # L40S datasheet
    (r"\bA40\b", 696 * G),  # A40 datasheet
    (r"\bL4\b", 300 * G),  # L4 datasheet
    (r"\bA10\b", 600 * G),  # A10 datasheet
    (r"RTX A5000", 768 * G),  # RTX A5000 datasheet
    (r"RTX 3080$", 760 * G),  # GA102 whitepaper, 10 GB GDDR6X
    (r"RTX 4090$", 1008 * G),  # Ada whitepaper
    (r"RTX 2080 Ti$", 616 * G),  # Turing whitepaper
    (r"V100", 900 * G),  # V100 datasheet: SXM2 and PCIe 900 GB/s
    (r"\bT4\b", 320 * G),  # T4 datasheet
]


def gpu_bandwidth(name: str) -> tuple[float | None, str]:
    for pattern, bandwidth in PEAK_BANDWIDTH:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return bandwidth, f"vendor datasheet memory bandwidth for {name!r} (pattern {pattern!r})"
    return None, f"not available: no memory bandwidth for GPU {name!r} in bench_contract.measure.roofline.PEAK_BANDWIDTH"


COPY_BYTES = 64 * 2**20  # per array: larger than the last-level caches of today's server CPUs
COPY_REPEATS = 5
_measured: dict[str, tuple[float, str]] = {}


def cpu_bandwidth(framework: str, scale: Callable[[], Any], synchronize: Callable[[Any], None],
                  nbytes: int = COPY_BYTES, repeats: int = COPY_REPEATS) -> tuple[float, str]:
    """Measured: 2 x nbytes (one array read, one written) over the fastest of `repeats` calls of `scale`,
    after one untimed call. Once per process; later calls return the cached figure."""
    if framework not in _measured:
        best = fastest_call(scale, synchronize, repeats)
        _measured[framework] = (2 * nbytes / best, f"measured: fastest of {repeats} {framework} scale operations "
                                                   f"on {nbytes // 2**20} MiB float32 arrays (read + write)")
    return _measured[framework]


def record_roofline(rows, flops_per_step: float | None, bytes_per_step: float | None, bytes_method: str,
                    peak_flops: float | None, bandwidth: float | None, bandwidth_method: str) -> None:
    """bytes_per_step, arithmetic_intensity, peak_bandwidth, ridge_point and compute_bound (1 or 0), each
    recorded as not available, with the reason, where its inputs are."""
    reason = lambda method: method.removeprefix("not available: ")  # noqa: E731
    if bytes_per_step is None:
        rows.add_unavailable("bytes_per_step", "bytes", reason(bytes_method))
    else:
        rows.add("bytes_per_step", bytes_per_step, "bytes", note=bytes_method)
    if bandwidth is None:
        rows.add_unavailable("peak_bandwidth", "bytes/s", reason(bandwidth_method))
    else:
        rows.add("peak_bandwidth", bandwidth, "bytes/s", note=bandwidth_method)
    intensity = flops_per_step / bytes_per_step if flops_per_step and bytes_per_step else None
    if intensity is None:
        rows.add_unavailable("arithmetic_intensity", "FLOP/byte", "needs both FLOPs and bytes per step")
    else:
        rows.add("arithmetic_intensity", intensity, "FLOP/byte", note=f"FLOPs per step / {bytes_method}")
    ridge = peak_flops / bandwidth if peak_flops and bandwidth else None
    if ridge is None:
        rows.add_unavailable("ridge_point", "FLOP/byte", "needs both the peak FLOP/s and the peak bandwidth")
    else:
        rows.add("ridge_point", ridge, "FLOP/byte", note="peak FLOP/s / peak bandwidth")
    if intensity is None or ridge is None:
        rows.add_unavailable("compute_bound", "bool", "needs the arithmetic intensity and the ridge point")
    else:
        bound = "compute-bound" if intensity >= ridge else "memory-bound"
        rows.add("compute_bound", float(intensity >= ridge), "bool",
                 note=f"{bound}: intensity {intensity:.3g} FLOP/byte against a ridge point of {ridge:.3g}")
