"""Between the shared PyTorch-layout weights and Flax variables: names, layouts and the parameter list.

Flax layers are named by their torchvision state_dict prefix (jax_backend.vision), so one rule per leaf
kind maps every variable, whatever the model:
- conv kernel (H, W, I/groups, O) <-> weight (O, I/groups, H, W): one transpose covers plain, grouped and
  depthwise convolutions alike;
- dense kernel (in, out) <-> weight (out, in);
- normalisation scale <-> weight, bias <-> bias; batch_stats mean/var <-> running_mean/running_var;
- a Dense named "<x>.in_proj" <-> MultiheadAttention's <x>.in_proj_weight / in_proj_bias (q, k, v stacked on
  the output axis in both);
- an embedding table <-> nn.Embedding's weight, same layout;
- anything else (ViT's class_token, encoder.pos_embedding) keeps its name and layout.
"""

from __future__ import annotations

import math

import jax
import numpy as np
from flax import traverse_util

from bench_contract.models.vision import NAMED_INITS
from bench_contract.models.weights import ParamSpec

LEAVES = {
    ("params", "kernel"): "weight",
    ("params", "scale"): "weight",
    ("params", "embedding"): "weight",
    ("params", "bias"): "bias",
    ("batch_stats", "mean"): "running_mean",
    ("batch_stats", "var"): "running_var",
}


def torch_name(key: tuple[str, ...]) -> str:
    collection, *path = key
    *module, leaf = path
    if module and (collection, leaf) in LEAVES:
        prefix = ".".join(module)
        if prefix.endswith(".in_proj"):
            return f"{prefix}_{LEAVES[(collection, leaf)]}"
        return f"{prefix}.{LEAVES[(collection, leaf)]}"
    return ".".join(path)


def to_torch_layout(leaf: str, value):
    if leaf == "kernel" and value.ndim == 4:
        return np.transpose(value, (3, 2, 0, 1))
    if leaf == "kernel" and value.ndim == 2:
        return value.T
    return value


def torch_shape(leaf: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(to_torch_layout(leaf, np.empty(shape, dtype=np.bool_)).shape)


def from_torch_layout(leaf: str, value: np.ndarray) -> np.ndarray:
    if leaf == "kernel" and value.ndim == 4:
        return np.transpose(value, (2, 3, 1, 0))
    if leaf == "kernel" and value.ndim == 2:
        return value.T
    return value


def variable_shapes(module, sample_shape_nhwc: tuple[int, ...], dtype=np.float32) -> dict:
    """{(collection, *path): shape} of the module's variables for one sample, without computing anything
    (dtype: the input's, integer for token and node ids)."""
    tree = jax.eval_shape(module.init, jax.random.PRNGKey(0), np.zeros((1, *sample_shape_nhwc), dtype))
    return {key: tuple(leaf.shape) for key, leaf in traverse_util.flatten_dict(tree).items()}


def param_specs(shapes: dict) -> list[ParamSpec]:
    """The shared-weights parameter list implied by Flax variable shapes, with the same init rules as the
    PyTorch backend derives from its modules (a backend test checks that the two lists are equal)."""
    specs = []
    for key, shape in shapes.items():
        collection, leaf = key[0], key[-1]
        name, tshape = torch_name(key), torch_shape(leaf, shape)
        kernel = shapes.get((*key[:-1], "kernel"))
        if name in NAMED_INITS:
            init, std = NAMED_INITS[name]
            specs.append(ParamSpec(name, tshape, init, std=std))
        elif leaf == "kernel" and len(shape) == 4:
            specs.append(ParamSpec(name, tshape, "normal_fan_out", fan_out=shape[3] * shape[0] * shape[1]))
        elif leaf == "embedding":  # PyTorch's nn.Embedding default, N(0, 1)
            specs.append(ParamSpec(name, tshape, "normal", std=1.0))
        elif leaf == "kernel" and len(shape) == 2:
            specs.append(ParamSpec(name, tshape, "uniform_fan_in", shape[0]))
        elif leaf == "bias" and kernel is not None and len(kernel) == 2:
            specs.append(ParamSpec(name, tshape, "uniform_fan_in", kernel[0]))  # PyTorch's Linear default
        elif leaf in ("scale", "var"):
            specs.append(ParamSpec(name, tshape, "ones"))
        elif leaf in ("bias", "mean"):  # conv and normalisation biases, running means
            specs.append(ParamSpec(name, tshape, "zeros"))
        else:
            raise ValueError(f"no init rule for Flax variable {'/'.join(key)} in collection {collection}")
    return specs


def variables_from_torch_layout(weights: dict[str, np.ndarray], shapes: dict) -> dict:
    """Flax variables holding exactly the shared weights; refuses a missing, extra or misshapen tensor."""
    names = {torch_name(key): key for key in shapes}
    missing, extra = sorted(set(names) - set(weights)), sorted(set(weights) - set(names))
    if missing or extra:
        raise ValueError(f"shared weights do not match the Flax model: missing {missing[:5]}, unexpected {extra[:5]}")
    flat = {}
    for name, key in names.items():
        value = from_torch_layout(key[-1], np.asarray(weights[name]))
        if tuple(value.shape) != shapes[key]:
            raise ValueError(f"shared weight {name} has shape {weights[name].shape}, the Flax model needs "
                             f"{torch_shape(key[-1], shapes[key])} in PyTorch layout")
        flat[key] = value
    return traverse_util.unflatten_dict(flat)


def parameter_count(shapes: dict) -> int:
    return sum(math.prod(shape) for key, shape in shapes.items() if key[0] == "params")
