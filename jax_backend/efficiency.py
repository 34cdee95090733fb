"""JAX's side of energy, MFU and provenance: FLOPs from the traced jaxpr (jax_backend.flops) and bytes from XLA's
cost analysis, a CPU matmul peak, the GPUs this process uses (CUDA ordinals, matched to NVML by
bench_contract.measure.nvml) and the CUDA libraries jaxlib loads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from importlib import metadata

import jax
import jax.numpy as jnp

from bench_contract.measure.efficiency import Efficiency
from bench_contract.measure.energy import meter_for
from bench_contract.measure.flops import Flops, Peak, cpu_peak, device_gpu_peak
from bench_contract.measure.nvml import cuda_version_text
from bench_contract.measure.roofline import COPY_BYTES, cpu_bandwidth
from bench_contract.results import not_available
from bench_contract.run.precision import DTYPE_NAMES
from jax_backend import flops
from jax_backend.sync import synchronize


def cost_analysis(compiled) -> dict:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):  # older jax returned one dict per program
        analysis = analysis[0] if analysis else {}
    return analysis or {}


def xla_method(devices: int) -> str:
    method = "XLA cost analysis of the compiled step (compiled.cost_analysis())"
    return method + (f", per-device program x {devices} devices" if devices > 1 else "")


def xla_bytes(compiled, devices: int = 1) -> tuple[float | None, str]:
    """(bytes accessed by one call on all its devices, the method), from XLA's cost analysis: the roofline's
    bytes. A sharded program is analysed per device (see xla_flops), hence the device count."""
    moved = cost_analysis(compiled).get("bytes accessed")
    if not moved or moved <= 0:
        return None, "not available: XLA's cost analysis gave no bytes accessed"
    return float(moved) * devices, xla_method(devices).replace("cost analysis", "cost analysis, bytes accessed,")


def xla_flops(compiled, devices: int = 1) -> Flops:
    """FLOPs of one call of a compiled executable on all its devices, from XLA's cost analysis. Not what the
    backends record (traced_flops is): on a GPU it leaves out the cuBLAS and cuDNN custom calls, the matmuls and
    convolutions themselves (ResNet-50 inference on an H200 had MFU 0.0027, not about 0.42).

    A program sharded over several devices is analysed as the per-device program XLA partitioned it into
    (checked: a batch-sharded step over 2 devices reports half the FLOPs), so the step's FLOPs are that
    times the device count."""
    analysis = cost_analysis(compiled)
    if "flops" not in analysis or analysis["flops"] <= 0:
        return Flops(None, "not available: XLA's cost analysis gave no FLOP count for this program")
    return Flops(float(analysis["flops"]) * devices, xla_method(devices), *xla_bytes(compiled, devices))


def traced_flops(jaxpr, compiled, devices: int = 1) -> Flops:
    """FLOPs of one step: the matmuls and convolutions of its traced jaxpr (jax_backend.flops), the whole step's
    however it is sharded (the jaxpr has the global shapes; a shard_map body is multiplied by its devices); the
    bytes from XLA's cost analysis of the compiled step, for the roofline."""
    moved = xla_bytes(compiled, devices)
    try:
        counted = flops.count(jaxpr)
    except Exception as exc:  # a primitive or parameter layout of another JAX: the cell's measurements stand
        return Flops(None, f"not available: counting the traced jaxpr failed ({type(exc).__name__}: {exc})", *moved)
    if counted.flops <= 0:
        return Flops(None, "not available: the traced jaxpr has no matmul or convolution", *moved)
    return Flops(float(counted.flops), flops.method(counted), *moved)


def cuda_ordinals(devices) -> tuple[str, ...]:
    # local_hardware_id is the CUDA ordinal among the visible GPUs; bench_contract.measure.nvml maps it to NVML.
    return tuple(str(d.local_hardware_id) for d in devices if d.platform == "gpu")


def gpu_description(device) -> dict:
    """JAX's own description of its GPU, recorded beside NVML's (which has no multiprocessor count)."""
    return {"name": device.device_kind, "multiprocessors": getattr(device, "core_count", None),
            "compute_capability": getattr(device, "compute_capability", None), "source": "jax Device attributes"}


def efficiency(kind: str, devices, precision: str, world_size: int) -> Efficiency:
    ids = cuda_ordinals(devices)
    dtype = getattr(jnp, DTYPE_NAMES[precision])

    def peak() -> Peak:
        if kind == "gpu":
            return device_gpu_peak(ids, devices[0].device_kind, precision)
        matmul = jax.jit(lambda x: x @ x)

        def matmul_of(n: int) -> Callable[[], jax.Array]:
            a = jax.device_put(jnp.ones((n, n), dtype), devices[0])
            return lambda: matmul(a)

        compute = cpu_peak("jax", precision, matmul_of, synchronize)
        big = jax.device_put(jnp.ones(COPY_BYTES // 4, jnp.float32), devices[0])
        scale = jax.jit(lambda x: x * 1.5)
        bandwidth = cpu_bandwidth("jax", lambda: scale(big), synchronize)
        return replace(compute, bandwidth=bandwidth[0], bandwidth_method=bandwidth[1])

    # One device per process in every use case: the MFU denominator is one peak per process.
    return Efficiency(meter_for(kind, ids, world_size), peak, devices=world_size)


def runtime_versions() -> dict[str, str]:
    """CUDA, cuDNN and NCCL as this jaxlib loads them; a CPU build says so."""
    try:
        from jax._src.lib import cuda_versions  # None in a CPU-only jaxlib
    except ImportError as exc:  # a private module: a jaxlib that moved it must still run its cells
        reason = not_available(f"jaxlib has no jax._src.lib.cuda_versions ({exc})")
        return {"cuda": reason, "cudnn": reason, "nccl": reason}
    if cuda_versions is None:
        reason = not_available("CPU-only jaxlib (no CUDA plugin)")
        return {"cuda": reason, "cudnn": reason, "nccl": reason}
    versions = {}
    # jaxlib gives CUDA as one integer (13000); PyTorch, and every row beside it, spells it "13.0". cuDNN is an
    # integer (91900) in both.
    spell = {"cuda": cuda_version_text, "cudnn": str}
    for key, function in (("cuda", "cuda_runtime_get_version"), ("cudnn", "cudnn_get_version")):
        try:
            versions[key] = spell[key](int(getattr(cuda_versions, function)()))
        except Exception as exc:
            versions[key] = not_available(f"jaxlib: {exc}")
    # jaxlib does not report NCCL; the pip wheel it loads does.
    for wheel in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            versions["nccl"] = metadata.version(wheel)
            break
        except metadata.PackageNotFoundError:
            continue
    else:
        versions["nccl"] = not_available("no nvidia-nccl wheel in this environment")
    return versions
