"""PyTorch's side of energy, MFU and provenance: FLOPs from torch.utils.flop_counter.FlopCounterMode, a CPU
matmul peak, the GPUs this process uses (by PCI bus id, matched to NVML) and the CUDA libraries torch reports."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench_contract.device import nvml_gpu_names
from bench_contract.efficiency import Efficiency
from bench_contract.energy import meter_for
from bench_contract.flops import Flops, Peak, cpu_peak, gpu_peak
from bench_contract.inference import DTYPE_NAMES
from bench_contract.nvml import not_available

METHOD = "torch.utils.flop_counter.FlopCounterMode over one step (counts matmuls and convolutions)"


def counted_flops(run: Callable[[], object], multiplier: int = 1) -> Flops:
    """FLOPs of the operations `run` dispatches in this process (times `multiplier`: the ranks of a
    data-parallel step each do the same work on their shard)."""
    with FlopCounterMode(display=False) as counter:
        run()
    total = counter.get_total_flops()
    if total <= 0:
        return Flops(None, "not available: FlopCounterMode counted no FLOPs (no operation it has a formula for)")
    method = METHOD + (f", x {multiplier} ranks" if multiplier > 1 else "")
    return Flops(float(total * multiplier), method)


def pci_bus_id(device: torch.device) -> str:
    props = torch.cuda.get_device_properties(device)
    return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


def efficiency(device: torch.device, precision: str, world_size: int) -> Efficiency:
    kind = "gpu" if device.type == "cuda" else "cpu"
    ids = (pci_bus_id(device),) if kind == "gpu" else ()
    dtype = getattr(torch, DTYPE_NAMES[precision])

    def peak() -> Peak:
        if kind == "gpu":
            names = nvml_gpu_names(ids)
            return gpu_peak(names[0], precision) if names else Peak(None, "not available: NVML gave no GPU name")
        n = 1024
        a = torch.ones((n, n), dtype=dtype, device=device)
        with torch.inference_mode():
            return cpu_peak("torch", precision, lambda: a @ a, lambda out: None, n=n)

    return Efficiency(meter_for(kind, ids, world_size), peak, devices=world_size)


def runtime_versions() -> dict[str, str]:
    """CUDA, cuDNN and NCCL as torch reports them (the versions it was built with and loads)."""
    if torch.version.cuda is None:
        reason = not_available("CPU-only build of torch")
        return {"cuda": reason, "cudnn": reason, "nccl": reason}
    versions = {"cuda": torch.version.cuda}
    cudnn = torch.backends.cudnn.version()
    versions["cudnn"] = str(cudnn) if cudnn is not None else not_available("torch found no cuDNN")
    try:
        versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:
        versions["nccl"] = not_available(f"torch.cuda.nccl.version(): {exc}")
    return versions
