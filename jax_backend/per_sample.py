"""Per-sample gradients on this process's own device, vectorised and as a naive per-example loop.

Only for timing the vectorisation (`bench_contract.run.training.time_vectorization`): both compute the sum of
the clipped per-example gradients, nothing more, so the ratio of their times is the speed-up of `vmap`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax_backend import compiles, models, steps
from jax_backend.sync import synchronize


class JaxPerSampleOps:
    vectorized_compiled = loop_compiled = True  # both jax.jit: the vectorised sum, and each example's call

    def __init__(self, model: str, module, params, clip_norm: float, device, label_smoothing: float = 0.0) -> None:
        self.model, self.params, self.device = model, params, device
        self.vectorized = jax.jit(
            lambda p, x, y: steps.clipped_sum(steps.per_sample_grads(module, p, x, y, label_smoothing)[1], clip_norm)
        )
        loss = steps.example_loss(module, label_smoothing)
        # The naive loop as people write it, and as PyTorch's (torch_backend/per_sample.py): a sum of zeros, then
        # per example one compiled call that adds its clipped gradient (a second call for the addition would time
        # the dispatch, not the loop). Starting from zeros, not from the first example's gradient, compiles the
        # gradient once, not twice (1.3 s of XLA's CPU compile for the tiny CNN); 0 + g is g exactly. The zeros
        # are made once and placed on the device like the sums the calls return: an uncommitted first sum would
        # compile the call a second time.
        one = jax.jit(lambda p, x, y: steps.clip_one(jax.grad(loss)(p, x, y), clip_norm))
        self.add_one = jax.jit(lambda total, p, x, y: jax.tree.map(lambda u, v: u + v, total, one(p, x, y)))
        self.zeros = jax.device_put(jax.tree.map(jnp.zeros_like, params), device)

    def local_batch(self, x: np.ndarray, y: np.ndarray):
        x = models.to_model_layout(self.model, x)
        return synchronize((jax.device_put(x, self.device), jax.device_put(y, self.device)))

    def clipped_sum_vectorized(self, batch):
        return self.vectorized(self.params, *batch)

    def clipped_sum_loop(self, batch):
        x, y = batch
        total = self.zeros
        for i in range(x.shape[0]):
            total = self.add_one(total, self.params, x[i], y[i])
        return total

    def synchronize(self, out) -> None:
        synchronize(out)

    def compilations(self) -> int:
        return compiles.count()
