"""Flax builders, one per registered model name, and their variables from the shared PyTorch-layout weights."""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from bench_contract.models import MLP_HIDDEN
from bench_contract.weights import ParamSpec
from jax_backend import layout, vision


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


# Every model as a bare module; the vision ones take channel-last inputs (see channels_last).
MODULES: dict[str, Callable[[int, str], nn.Module]] = {
    "mlp": lambda num_classes, variant: MLP(hidden=MLP_HIDDEN, num_classes=num_classes),
    **vision.BUILDERS,
}


def module(name: str, num_classes: int, variant: str = "full") -> nn.Module:
    if name not in MODULES:
        raise ValueError(f"the jax backend has no model {name!r}; known: {', '.join(sorted(MODULES))}")
    return MODULES[name](num_classes, variant)


def channels_last(name: str) -> bool:
    """Whether the model takes (N, H, W, C) inputs; the MLP flattens the contract's channel-first ones."""
    return name in vision.BUILDERS


def model_input_shape(name: str, sample_shape: tuple[int, ...]) -> tuple[int, ...]:
    if channels_last(name):
        c, h, w = sample_shape
        return (h, w, c)
    return tuple(sample_shape)


def to_model_layout(name: str, x: np.ndarray) -> np.ndarray:
    """A channel-first batch in the layout the model takes (a host-side copy, outside any timed region)."""
    return np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1))) if channels_last(name) else x


def param_specs(name: str, sample_shape: tuple[int, ...], num_classes: int, variant: str = "full") -> list[ParamSpec]:
    shapes = layout.variable_shapes(module(name, num_classes, variant), model_input_shape(name, sample_shape))
    return layout.param_specs(shapes)


def build_with_variables(name: str, weights: dict[str, np.ndarray], sample_shape: tuple[int, ...],
                         num_classes: int, variant: str = "full") -> tuple[nn.Module, dict]:
    """The module and its variables (params, and batch_stats where there is batch norm) from the shared weights."""
    net = module(name, num_classes, variant)
    shapes = layout.variable_shapes(net, model_input_shape(name, sample_shape))
    variables = layout.variables_from_torch_layout(weights, shapes)
    return net, variables

