"""Mixed-precision training in PyTorch as its users write it: the forward pass under torch.autocast, the loss on
float32 logits, float32 master parameters and optimizer state, and for fp16 a GradScaler with the contract's
dynamic loss scaling (bench_contract.run.precision.LOSS_SCALING). TF32 is switched on or off here for every
policy."""

from __future__ import annotations

import torch
from torch import nn

from bench_contract.run.precision import DTYPE_NAMES, LOSS_SCALING, LossScaling, refuse_tf32_without_support
from bench_contract.spec import MIXED


def set_tf32(precision: str, device: torch.device) -> None:
    """TF32 matmuls and convolutions for tf32 only (refused where the device has none); fp32 means fp32."""
    capable = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8
    refuse_tf32_without_support(precision, device.type, capable)
    on = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")


class AutocastForward(nn.Module):
    """The network's forward pass under torch.autocast, its logits returned in float32: what follows (the loss,
    DP-SGD's clipping and noise) computes in float32, as in the JAX backend (jax_backend.mixed)."""

    def __init__(self, net: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.net, self.dtype = net, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, dtype=self.dtype):
            return self.net(x).float()


def with_precision(net: nn.Module, precision: str) -> nn.Module:
    """The network as the training precision runs it: under autocast for bf16 and fp16, as it is otherwise."""
    return AutocastForward(net, getattr(torch, DTYPE_NAMES[precision])) if precision in MIXED else net


class LossScaler:
    """backward() and the optimizer's step, with GradScaler's dynamic loss scaling for fp16 (a step whose
    gradients overflowed is skipped); for every other policy the scaler is disabled and does neither."""

    def __init__(self, precision: str, device: torch.device, scaling: LossScaling = LOSS_SCALING) -> None:
        self.scaler = torch.amp.GradScaler(device.type, init_scale=scaling.initial_scale,
                                           growth_factor=scaling.growth_factor,
                                           backoff_factor=scaling.backoff_factor,
                                           growth_interval=scaling.growth_interval, enabled=precision == "fp16")

    def backward_and_step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        self.scaler.update()

    def loss_scale(self) -> float | None:
        """The scale the next step will use (None without loss scaling); reading it waits for the device."""
        return float(self.scaler.get_scale()) if self.scaler.is_enabled() else None
