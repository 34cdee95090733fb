"""PyTorch builders, one per registered model name, and the parameter list each one implies.

The parameter list (names = state_dict keys, shapes, init kind) is derived from the module itself, so it
cannot drift from what PyTorch builds; the JAX backend derives its own from its Flax modules, and the
shared initial weights file is checked against both.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from bench_contract.models.mlp import MLP_HIDDEN
from bench_contract.models.vision import NAMED_INITS
from bench_contract.models.weights import ParamSpec
from torch_backend import language, text, vision
from torch_backend.graph import GCN, GraphConv


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


def build_mlp(sample_shape: tuple[int, ...], num_classes: int, variant: str = "full") -> nn.Module:
    return MLP(math.prod(sample_shape), MLP_HIDDEN, num_classes)


def _vision(name: str) -> Callable[..., nn.Module]:
    return lambda sample_shape, num_classes, variant="full": vision.BUILDERS[name](num_classes, variant)


def build_cnn(sample_shape: tuple[int, ...], num_classes: int, variant: str = "full") -> nn.Module:
    return vision.SmallCNN(sample_shape, num_classes, variant)


def build_transformer(sample_shape: tuple[int, ...], num_classes: int, variant: str = "full") -> nn.Module:
    (seq_len,) = sample_shape
    return text.TextTransformer(seq_len, num_classes, variant)


MODELS: dict[str, Callable[..., nn.Module]] = {
    "mlp": build_mlp,
    "cnn": build_cnn,
    "transformer": build_transformer,
    "gpt": language.build_gpt,
    **{name: _vision(name) for name in vision.BUILDERS},
}
# Models that hold the data set's graph (bench_contract.data.graph.Graph); their samples are node ids.
GRAPH_MODELS: dict[str, Callable[..., nn.Module]] = {"gcn": GCN}


def build(name: str, sample_shape: tuple[int, ...], num_classes: int, variant: str = "full",
          graph=None) -> nn.Module:
    if name in GRAPH_MODELS:
        if graph is None:
            raise ValueError(f"model {name!r} needs the data set's graph")
        return GRAPH_MODELS[name](graph, num_classes, variant)
    if name not in MODELS:
        known = sorted([*MODELS, *GRAPH_MODELS])
        raise ValueError(f"the torch backend has no model {name!r}; known: {', '.join(known)}")
    return MODELS[name](sample_shape, num_classes, variant)


NORMS = (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)


def param_specs(model: nn.Module) -> list[ParamSpec]:
    """The shared-weights parameter list of `model`, in state_dict order.

    Batch norm's num_batches_tracked is left out: it is a training counter, not part of the function, and
    Flax has no such variable. Everything else in the state_dict must match a rule, or this refuses. A model
    with its own published initialisation (the language model's, GPT-2's) lists its parameters itself.
    """
    if hasattr(model, "param_specs"):
        return model.param_specs()
    state = model.state_dict()
    specs = []
    for module_name, module in model.named_modules():
        prefix = f"{module_name}." if module_name else ""
        for leaf, tensor in list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False)):
            name = prefix + leaf
            if leaf == "num_batches_tracked" or name not in state:
                continue
            specs.append(_spec(name, leaf, module, tuple(tensor.shape), state))
    missing = set(state) - {s.name for s in specs} - {n for n in state if n.endswith("num_batches_tracked")}
    if missing:
        raise ValueError(f"no init rule for {', '.join(sorted(missing))}")
    return specs


def _spec(name: str, leaf: str, module: nn.Module, shape: tuple[int, ...], state: dict) -> ParamSpec:
    if name in NAMED_INITS:
        init, std = NAMED_INITS[name]
        return ParamSpec(name, shape, init, std=std)
    if isinstance(module, nn.Conv2d):
        if leaf == "weight":
            return ParamSpec(name, shape, "normal_fan_out", fan_out=shape[0] * math.prod(shape[2:]))
        return ParamSpec(name, shape, "zeros")
    if isinstance(module, nn.Linear):  # PyTorch's default init for both weight and bias
        fan_in = module.weight.shape[1]
        return ParamSpec(name, shape, "uniform_fan_in", fan_in)
    if isinstance(module, nn.MultiheadAttention) and leaf in ("in_proj_weight", "in_proj_bias"):
        return ParamSpec(name, shape, "uniform_fan_in", module.in_proj_weight.shape[1])
    if isinstance(module, nn.Embedding):  # PyTorch's default: N(0, 1)
        return ParamSpec(name, shape, "normal", std=1.0)
    if isinstance(module, GraphConv) and leaf == "bias":  # added after aggregation; PyG starts it at zero
        return ParamSpec(name, shape, "zeros")
    if isinstance(module, NORMS):
        ones = leaf in ("weight", "running_var")
        return ParamSpec(name, shape, "ones" if ones else "zeros")
    raise ValueError(f"no init rule for parameter {name} of a {type(module).__name__}")


def load_shared_weights(model: nn.Module, weights: dict) -> None:
    """Load the shared weights with strict=True: a name or shape mismatch is an error, never a partial load.
    The batch-norm counters the file leaves out keep the module's own values."""
    state = {name: value for name, value in model.state_dict().items() if name.endswith("num_batches_tracked")}
    state.update({name: torch.from_numpy(w) for name, w in weights.items()})
    model.load_state_dict(state, strict=True)
