"""NVML (nvidia-ml-py, module `pynvml`): which GPUs this process uses, their details, and a session to read them.

NVML numbers every GPU in the machine by PCI bus id; CUDA numbers only the GPUs in CUDA_VISIBLE_DEVICES, in
its own order (fastest first, unless CUDA_DEVICE_ORDER=PCI_BUS_ID, which the rendered scripts set). So a
framework's device is found in NVML by its UUID or PCI bus id where the framework reports one (PyTorch does),
else through its CUDA ordinal: the ordinal-th entry of CUDA_VISIBLE_DEVICES, a UUID (exact) or an NVML index.

pynvml is imported inside the functions, so that the contract needs it only where it is used; the tests
put a fake module in its place in sys.modules.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench_contract.results import not_available


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here; the message is the reason, recorded as such."""


def start() -> Any:
    """The pynvml module, initialised; the caller shuts it down (NVML counts nested inits)."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("nvidia-ml-py (pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded: no NVIDIA driver on this machine
        raise NvmlUnavailable(f"NVML could not start ({exc}): no NVIDIA driver on this node") from None
    return pynvml


@contextlib.contextmanager
def session() -> Iterator[Any]:
    """The pynvml module, initialised for the duration of the block."""
    pynvml = start()
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    # Older nvidia-ml-py versions return bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Gpu:
    handle: Any
    how: str  # how the framework's device was matched to NVML's: by uuid, pci bus id or index


def visible_entries() -> list[str] | None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    return [part.strip() for part in visible.split(",") if part.strip()]


def resolve(nvml: Any, device_ids: list[str]) -> list[Gpu]:
    """NVML handles of the framework's devices. Each id is a UUID ("GPU-..."), a PCI bus id ("0000:3b:00.0")
    or a CUDA ordinal ("0"). An empty list means every GPU this process may see."""
    if not device_ids:
        entries = visible_entries()
        count = nvml.nvmlDeviceGetCount()
        device_ids = [str(i) for i in range(count if entries is None else len(entries))]
    return [_resolve_one(nvml, device_id) for device_id in device_ids]


def _resolve_one(nvml: Any, device_id: str) -> Gpu:
    if device_id.startswith(("GPU-", "MIG-")):
        return Gpu(nvml.nvmlDeviceGetHandleByUUID(device_id), "uuid")
    if ":" in device_id:
        return Gpu(nvml.nvmlDeviceGetHandleByPciBusId(device_id), "pci bus id")
    ordinal = int(device_id)
    entries = visible_entries()
    if entries is None:
        return Gpu(nvml.nvmlDeviceGetHandleByIndex(ordinal), _index_how())
    if ordinal >= len(entries):
        raise NvmlUnavailable(f"CUDA device {ordinal} is not in CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}")
    entry = entries[ordinal]
    if entry.startswith(("GPU-", "MIG-")):
        return Gpu(nvml.nvmlDeviceGetHandleByUUID(entry), "uuid from CUDA_VISIBLE_DEVICES")
    return Gpu(nvml.nvmlDeviceGetHandleByIndex(int(entry)), _index_how() + " from CUDA_VISIBLE_DEVICES")


def _index_how() -> str:
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return "index (CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA and NVML order agree)"
    return "index (assumes CUDA's order is NVML's; set CUDA_DEVICE_ORDER=PCI_BUS_ID to make it so)"


def cuda_version_text(value: int) -> str:
    # nvmlSystemGetCudaDriverVersion (and jaxlib's runtime version) return e.g. 12040 for CUDA 12.4.
    return f"{value // 1000}.{value % 1000 // 10}"


def optional(read, *args) -> Any:
    """A value NVML may not support on every GPU (MIG mode, power limit): the value or 'not available'."""
    try:
        return read(*args)
    except Exception as exc:
        return not_available(f"NVML: {exc}")


def gpu_details(nvml: Any, gpus: list[Gpu]) -> dict[str, Any]:
    def mig(handle):
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        return "enabled" if current == nvml.NVML_DEVICE_MIG_ENABLE else "disabled"

    def power_limit(handle):
        return nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0  # mW -> W

    devices = []
    for gpu in gpus:
        h = gpu.handle
        devices.append({
            "name": _text(nvml.nvmlDeviceGetName(h)),
            "uuid": optional(lambda d: _text(nvml.nvmlDeviceGetUUID(d)), h),
            # A MIG instance's handle may answer fewer queries than a whole GPU's: each is recorded or explained.
            "pci_bus_id": optional(lambda d: _text(nvml.nvmlDeviceGetPciInfo(d).busId), h),
            "nvml_index": optional(nvml.nvmlDeviceGetIndex, h),
            "matched_by": gpu.how,
            "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(h).total),
            "compute_capability": optional(lambda d: "%d.%d" % tuple(nvml.nvmlDeviceGetCudaComputeCapability(d)), h),
            # Clocks as NVML gives them: the SM and memory clocks' maxima, and the SM clock when the task started
            # (an idle GPU sits far below its maximum; a reader comparing two runs wants to know both).
            "sm_clock_max_mhz": optional(lambda d: nvml.nvmlDeviceGetMaxClockInfo(d, nvml.NVML_CLOCK_SM), h),
            "memory_clock_max_mhz": optional(lambda d: nvml.nvmlDeviceGetMaxClockInfo(d, nvml.NVML_CLOCK_MEM), h),
            "sm_clock_at_start_mhz": optional(lambda d: nvml.nvmlDeviceGetClockInfo(d, nvml.NVML_CLOCK_SM), h),
            "mig_mode": optional(mig, h),
            "power_limit_w": optional(power_limit, h),
        })
    return {
        "gpus": devices,
        "gpu_count": len(devices),
        "node_gpu_count": nvml.nvmlDeviceGetCount(),
        "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
        "cuda_driver_version": cuda_version_text(nvml.nvmlSystemGetCudaDriverVersion()),
    }
