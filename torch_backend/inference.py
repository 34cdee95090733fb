"""The forward pass of a model in PyTorch (eager, inference mode), for the inference use case and the parity check."""

from __future__ import annotations

import numpy as np
import torch

from torch_backend import models


class TorchInference:
    def __init__(self, model: str, variant: str, weights: dict[str, np.ndarray], sample_shape: tuple[int, ...],
                 num_classes: int, device: torch.device) -> None:
        self.device = device
        net = models.build(model, sample_shape, num_classes, variant)
        models.load_shared_weights(net, weights)
        # eval(): batch norm uses its running statistics and dropout is off, as in the Flax modules.
        self.net = net.to(device).eval()
        self.parameter_count = sum(p.numel() for p in net.parameters())

    def to_device(self, x: np.ndarray):
        batch = torch.from_numpy(x).to(self.device)
        self.synchronize(batch)
        return batch

    def compile(self, x) -> dict[str, float]:
        return {}  # eager execution: nothing is compiled ahead of time

    def forward(self, x):
        with torch.inference_mode():
            return self.net(x)

    def synchronize(self, out) -> None:
        # CUDA kernels run asynchronously: without this the clock would stop at dispatch, not completion.
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def to_numpy(self, out) -> np.ndarray:
        return out.detach().cpu().numpy()
