"""The forward pass of a model in JAX, for the inference use case and the parity check."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_backend import census, compiles, models
from jax_backend.efficiency import traced_flops
from jax_backend.sync import synchronize, wait_array


class JaxInference:
    """Holds the variables on the device; the forward pass is a pure function compiled ahead of time."""

    def __init__(self, model: str, variant: str, weights: dict[str, np.ndarray], sample_shape: tuple[int, ...],
                 num_classes: int, device, dtype=jnp.float32) -> None:
        self.model, self.device, self.dtype = model, device, dtype
        net, variables = models.build_with_variables(model, weights, sample_shape, num_classes, variant)
        self.parameter_count = sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(variables["params"]))
        # bf16: every variable (parameters and batch-norm statistics) is cast, as PyTorch's module.to(dtype) does.
        variables = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), variables)
        self.variables = synchronize(jax.device_put(variables, device))
        self.jitted = jax.jit(net.apply)
        self.compiled = self.jaxpr = None

    def to_device(self, x: np.ndarray):
        x = jnp.asarray(models.to_model_layout(self.model, x), self.dtype)
        return synchronize(jax.device_put(x, self.device))

    def compile(self, x) -> dict[str, float]:
        self.compiled, seconds, self.jaxpr = compiles.ahead_of_time(self.jitted, self.variables, x)
        return seconds

    def flops_per_step(self, x):
        return traced_flops(self.jaxpr, self.compiled)

    def precision_census(self, x) -> dict[str, set[str]]:
        return census.census(self.jaxpr)  # the forward pass as traced for compilation: what every pass ran

    def forward(self, x):
        return self.compiled(self.variables, x)

    @contextmanager
    def passes(self, x) -> Iterator[Callable[[], Any]]:
        """Each timed pass: the compiled function called on the variables and the batch, nothing between."""
        yield partial(self.compiled, self.variables, x)

    # JAX dispatches asynchronously: the forward pass is done only when its output (the logits) is ready.
    synchronize = staticmethod(wait_array)

    def compilations(self) -> int:
        return compiles.count()

    def to_numpy(self, out) -> np.ndarray:
        # Copied to the host in the forward pass's dtype, then cast there (the precision policy's words).
        return np.asarray(out).astype(np.float32)



