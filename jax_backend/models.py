"""Flax builders, one per registered model name, and their variables from the shared PyTorch-layout weights."""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from bench_contract.models.mlp import MLP_HIDDEN
from bench_contract.models.weights import ParamSpec
from bench_contract.models import language as language_contract
from jax_backend import autocast, language, layout, text, vision
from jax_backend.graph import gcn


class MLP(nn.Module):
    """Flatten, then Dense+ReLU per hidden layer, then a Dense classifier; layers fc1, fc2, ... as in PyTorch."""

    hidden: tuple[int, ...]
    num_classes: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = x.reshape((x.shape[0], -1))  # inputs are channel-first like PyTorch's, so flattening agrees
        for i, width in enumerate(self.hidden, start=1):
            x = nn.relu(autocast.dense(width, name=f"fc{i}")(x))
        return autocast.dense(self.num_classes, name=f"fc{len(self.hidden) + 1}")(x)


# Every model as a bare module; the vision ones take channel-last inputs (see channels_last).
MODULES: dict[str, Callable[[int, str], nn.Module]] = {
    "mlp": lambda num_classes, variant: MLP(hidden=MLP_HIDDEN, num_classes=num_classes),
    "transformer": text.transformer,
    language_contract.MODEL_NAME: language.gpt,
    **vision.BUILDERS,
}
# Models that hold the data set's graph (bench_contract.data.graph.Graph); their samples are node ids.
GRAPH_MODULES: dict[str, Callable[..., nn.Module]] = {"gcn": gcn}
# Models whose inputs are integer ids (tokens, nodes), not float features.
INTEGER_INPUTS = ("transformer", language_contract.MODEL_NAME, *GRAPH_MODULES)


def module(name: str, num_classes: int, variant: str = "full", graph=None) -> nn.Module:
    if name in GRAPH_MODULES:
        if graph is None:
            raise ValueError(f"model {name!r} needs the data set's graph")
        return GRAPH_MODULES[name](graph, num_classes, variant)
    if name not in MODULES:
        known = sorted([*MODULES, *GRAPH_MODULES])
        raise ValueError(f"the jax backend has no model {name!r}; known: {', '.join(known)}")
    return MODULES[name](num_classes, variant)


def input_dtype(name: str):
    return np.int32 if name in INTEGER_INPUTS else np.float32


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


def param_specs(name: str, sample_shape: tuple[int, ...], num_classes: int, variant: str = "full",
                graph=None) -> list[ParamSpec]:
    shapes = layout.variable_shapes(module(name, num_classes, variant, graph), model_input_shape(name, sample_shape),
                                    input_dtype(name))
    if name == language_contract.MODEL_NAME:  # GPT-2's own initialisation, the contract's rule for both backends
        torch_shapes = {layout.torch_name(key): layout.torch_shape(key[-1], shape) for key, shape in shapes.items()}
        return language_contract.param_specs(torch_shapes, language_contract.GPT[variant])
    return layout.param_specs(shapes)


def build_with_variables(name: str, weights: dict[str, np.ndarray], sample_shape: tuple[int, ...],
                         num_classes: int, variant: str = "full", graph=None) -> tuple[nn.Module, dict]:
    """The module and its variables (params, and batch_stats where there is batch norm) from the shared weights."""
    net = module(name, num_classes, variant, graph)
    shapes = layout.variable_shapes(net, model_input_shape(name, sample_shape), input_dtype(name))
    variables = layout.variables_from_torch_layout(weights, shapes)
    return net, variables

