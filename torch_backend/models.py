"""PyTorch builders, one per registered model name, with parameter names matching bench_contract.models."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from bench_contract.models import MLP_HIDDEN


class MLP(nn.Module):
    """Flatten, then Linear+ReLU per hidden layer, then a Linear classifier (fc1, fc2, ...)."""

    def __init__(self, input_dim: int, hidden: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        sizes = [input_dim, *hidden, num_classes]
        self.layers = len(sizes) - 1
        for i in range(self.layers):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for i in range(1, self.layers):
            x = torch.relu(getattr(self, f"fc{i}")(x))
        return getattr(self, f"fc{self.layers}")(x)


def build_mlp(sample_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return MLP(math.prod(sample_shape), MLP_HIDDEN, num_classes)


MODELS: dict[str, Callable[[tuple[int, ...], int], nn.Module]] = {"mlp": build_mlp}


def build(name: str, sample_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"the torch backend has no model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name](sample_shape, num_classes)
