"""Architecture facts both backends build from, so the two networks are the same by construction."""

from __future__ import annotations

import math

from bench_contract.models.weights import ParamSpec, mlp_param_specs

MLP_HIDDEN = (512, 512)


def param_specs(model: str, sample_shape: tuple[int, ...], num_classes: int) -> list[ParamSpec]:
    """The named parameters (PyTorch layout) of `model` for inputs of `sample_shape`."""
    if model == "mlp":
        return mlp_param_specs(math.prod(sample_shape), MLP_HIDDEN, num_classes)
    raise ValueError(f"no parameter layout for model {model!r}; known: mlp")
