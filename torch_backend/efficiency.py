"""PyTorch's side of energy, MFU and provenance: FLOPs from torch.utils.flop_counter.FlopCounterMode, a CPU
matmul peak, the GPUs this process uses (by PCI bus id, matched to NVML) and the CUDA libraries torch reports."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, conv_backward_flop

from bench_contract.measure.efficiency import Efficiency
from bench_contract.measure.energy import meter_for
from bench_contract.measure.flops import Flops, Peak, cpu_peak, device_gpu_peak
from bench_contract.measure.roofline import COPY_BYTES, cpu_bandwidth
from bench_contract.results import not_available
from bench_contract.run.precision import DTYPE_NAMES

METHOD = "torch.utils.flop_counter.FlopCounterMode over one step (counts matmuls and convolutions)"


BYTES_METHOD = ("sizes of every ATen operation's input and output tensors over one step (eager: one kernel "
                "per operation; views move nothing and are left out)")


class ByteCounter(TorchDispatchMode):
    """Adds up the bytes each dispatched operation reads and writes: its tensor inputs and outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        alias = returns[0].alias_info if returns else None
        if alias is not None and not alias.is_write:
            return out  # a view: it shares its input's memory and moves no data
        for leaf in tree_flatten((args, kwargs, out))[0]:
            if isinstance(leaf, torch.Tensor):
                self.bytes += leaf.numel() * leaf.element_size()
        return out


def grouped_conv_backward_flop(*args, out_val=None, **kwargs) -> int:
    """FlopCounterMode's formula for aten.convolution_backward, with the weight gradient of a grouped convolution
    counted once. Torch's formula treats the groups as one dense convolution there, `groups` times the work:
    torch.func's per-sample gradients of a convolution are a grouped convolution with one group per example, so a
    DP-SGD step of the CIFAR-10 CNN counted 43 times its work (MFU 3.9 on a CPU). Arguments as aten's:
    (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
    output_mask)."""
    head, groups, (grad_input, grad_weight, grad_bias), tail = args[:9], args[9], args[10], args[11:]

    def part(mask) -> int:
        return conv_backward_flop(*head, groups, mask, *tail, out_val=out_val, **kwargs)

    return part([grad_input, False, False]) + part([False, grad_weight, False]) // max(1, groups)


grouped_conv_backward_flop._get_raw = True  # FlopCounterMode passes the tensors; torch's formula takes their shapes


@contextlib.contextmanager
def attention_as_matmuls():
    """Attention as the matmuls the counter has formulas for. nn.MultiheadAttention's inference fast path
    (aten._native_multi_head_attention) and the CPU's fused scaled-dot-product kernel have none, so a ViT's
    attention went uncounted: 43.0 MFLOP for ViT-Tiny's forward against JAX's 63.2 (jax_backend.flops counts the
    dot_generals). For the count alone, after everything measured: the fast path off, SDPA's math backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def counted_flops(run: Callable[[], object], multiplier: int = 1) -> Flops:
    """FLOPs and bytes of the operations `run` dispatches in this process (times `multiplier`: the ranks of a
    data-parallel step each do the same work on their shard)."""
    corrected = {torch.ops.aten.convolution_backward: grouped_conv_backward_flop}
    with FlopCounterMode(display=False, custom_mapping=corrected) as counter, ByteCounter() as moved, \
            attention_as_matmuls():
        run()
    total = counter.get_total_flops()
    if total <= 0:
        return Flops(None, "not available: FlopCounterMode counted no FLOPs (no operation it has a formula for)")
    ranks = f", x {multiplier} ranks" if multiplier > 1 else ""
    bytes_per_step = float(moved.bytes * multiplier) if moved.bytes else None
    bytes_method = BYTES_METHOD + ranks if moved.bytes else "not available: no tensor was read or written"
    return Flops(float(total * multiplier), METHOD + ranks, bytes_per_step, bytes_method)


def pci_bus_id(device: torch.device) -> str:
    props = torch.cuda.get_device_properties(device)
    return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


def cuda_description(device: torch.device) -> dict:
    """PyTorch's own description of its GPU, recorded beside NVML's (which has no multiprocessor count)."""
    props = torch.cuda.get_device_properties(device)
    return {"name": props.name, "multiprocessors": props.multi_processor_count,
            "compute_capability": f"{props.major}.{props.minor}", "memory_total_bytes": props.total_memory,
            "source": "torch.cuda.get_device_properties"}


def efficiency(device: torch.device, precision: str, world_size: int) -> Efficiency:
    kind = "gpu" if device.type == "cuda" else "cpu"
    ids = (pci_bus_id(device),) if kind == "gpu" else ()
    dtype = getattr(torch, DTYPE_NAMES[precision])

    def peak() -> Peak:
        if kind == "gpu":
            return device_gpu_peak(ids, torch.cuda.get_device_name(device), precision)

        def matmul_of(n: int) -> Callable[[], torch.Tensor]:
            a = torch.ones((n, n), dtype=dtype, device=device)
            return lambda: a @ a

        big = torch.ones(COPY_BYTES // 4, dtype=torch.float32, device=device)
        out = torch.empty_like(big)
        with torch.inference_mode():
            compute = cpu_peak("torch", precision, matmul_of, lambda out: None)
            bandwidth = cpu_bandwidth("torch", lambda: torch.mul(big, 1.5, out=out), lambda out: None)
        return replace(compute, bandwidth=bandwidth[0], bandwidth_method=bandwidth[1])

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
