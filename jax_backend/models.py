"""Flax builders, one per registered model name, and the conversion from the shared PyTorch-layout weights."""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from bench_contract.models import MLP_HIDDEN


class MLP(nn.Module):
    """Flatten, then Dense+ReLU per hidden layer, then a Dense classifier; layers fc1, fc2, ... as in PyTorch."""

    hidden: tuple[int, ...]
    num_classes: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = x.reshape((x.shape[0], -1))  # inputs are channel-first like PyTorch's, so flattening agrees
        for i, width in enumerate(self.hidden, start=1):
            x = nn.relu(nn.Dense(width, name=f"fc{i}")(x))
        return nn.Dense(self.num_classes, name=f"fc{len(self.hidden) + 1}")(x)


def mlp_params_from_torch_layout(weights: dict[str, np.ndarray]) -> dict:
    """fcN.weight (out, in) becomes fcN/kernel (in, out); fcN.bias stays as it is."""
    params: dict[str, dict[str, jnp.ndarray]] = {}
    for name, value in weights.items():
        layer, kind = name.split(".")
        if kind == "weight":
            params.setdefault(layer, {})["kernel"] = jnp.asarray(value.T)
        elif kind == "bias":
            params.setdefault(layer, {})["bias"] = jnp.asarray(value)
        else:
            raise ValueError(f"unexpected MLP parameter {name}")
    return {"params": params}


def build_mlp(weights: dict[str, np.ndarray], num_classes: int) -> tuple[nn.Module, dict]:
    return MLP(hidden=MLP_HIDDEN, num_classes=num_classes), mlp_params_from_torch_layout(weights)


MODELS: dict[str, Callable[[dict[str, np.ndarray], int], tuple[nn.Module, dict]]] = {"mlp": build_mlp}


def build(name: str, weights: dict[str, np.ndarray], num_classes: int) -> tuple[nn.Module, dict]:
    """The Flax module and its variables, holding exactly the shared initial weights."""
    if name not in MODELS:
        raise ValueError(f"the jax backend has no model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name](weights, num_classes)
