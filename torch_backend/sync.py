"""The one way this backend waits for the device. CUDA kernels run asynchronously: without a synchronize a
clock would stop at dispatch, not completion. On the CPU, PyTorch's operations finish before they return."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def waiter(device: torch.device) -> Callable[[Any], None]:
    """`synchronize` decided once for the device, for a clock that times one pass at a time: the device's type is
    not looked at inside each timed pass (at batch 1 a small model's pass takes tens of microseconds)."""
    if device.type == "cuda":
        return lambda out: torch.cuda.synchronize(device)
    return lambda out: None  # on the CPU an operation has finished when it returns


def batch_to_device(x: np.ndarray, y: np.ndarray, device: torch.device):
    """A batch as tensors on `device` (labels as int64, what cross_entropy takes), transfer finished."""
    batch = (torch.from_numpy(x).to(device), torch.from_numpy(y).long().to(device))
    synchronize(device)
    return batch
