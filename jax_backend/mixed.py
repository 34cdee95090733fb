"""Mixed-precision training in JAX with PyTorch autocast's policy (torch_backend.mixed), operation class by
operation class (jax_backend.autocast): float32 master parameters and optimizer state; every matmul and
convolution casts its input and weight to bfloat16 or float16, so the gradient reaches the float32 masters through
the cast; the norms run as autocast runs them; the logits are cast back to float32 for the loss. Batch-norm
statistics stay float32.

fp16 adds dynamic loss scaling with PyTorch GradScaler's rule and settings (bench_contract.run.precision
.LossScaling): the loss is multiplied by the scale before differentiation, the gradients divided by it, a step
whose gradients are not all finite is skipped (no update, optimizer state unchanged) and the scale backs off;
`growth_interval` finite steps in a row grow it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from bench_contract.run.precision import DTYPE_NAMES, LOSS_SCALING, LossScaling, refuse_tf32_without_support
from bench_contract.spec import MIXED
from jax_backend import autocast, steps


def set_matmul_precision(precision: str, device) -> None:
    """TF32 for tf32 only (XLA's 'default' precision, refused on a device without TF32); 'highest' otherwise."""
    capable = device.platform == "gpu" and float(getattr(device, "compute_capability", "0") or 0) >= 8.0
    refuse_tf32_without_support(precision, device.platform.lower(), capable)
    jax.config.update("jax_default_matmul_precision", "default" if precision == "tf32" else "highest")


class AutocastForward:
    """A Flax module's apply under the mixed policy, autocast's (jax_backend.autocast): float32 parameters and
    inputs, each matmul and convolution in `dtype`, the norms as autocast runs them on this device, the logits
    returned in float32 for the loss (mutated collections, batch norm's running statistics, stay float32)."""

    def __init__(self, module, dtype, norms_in_float32: bool) -> None:
        self.module, self.dtype, self.norms_in_float32 = module, dtype, norms_in_float32

    def apply(self, variables: dict, x, **kwargs):
        with autocast.policy(self.dtype, self.norms_in_float32):  # read while the module is traced
            out = self.module.apply(variables, x, **kwargs)
        if kwargs.get("mutable"):
            logits, mutated = out
            return logits.astype(jnp.float32), mutated
        return out.astype(jnp.float32)


def with_precision(module, precision: str, on_gpu: bool):
    """The module as the training precision runs it: under autocast's policy for bf16 and fp16 (layer and group
    norm in float32 on a GPU, as autocast lists them for CUDA), as it is otherwise."""
    if precision not in MIXED:
        return module
    return AutocastForward(module, getattr(jnp, DTYPE_NAMES[precision]), norms_in_float32=on_gpu)


class LossScaleState(NamedTuple):
    inner: Any  # the optimizer's own state
    scale: jnp.ndarray  # the scale the next step multiplies its loss by
    good_steps: jnp.ndarray  # finite steps since the scale last changed (GradScaler's growth tracker)


def dynamic_loss_scaling(inner: optax.GradientTransformation,
                         scaling: LossScaling = LOSS_SCALING) -> optax.GradientTransformation:
    """`inner` applied to the unscaled gradients of a scaled loss, skipping steps whose gradients overflowed."""

    def init(params):
        return LossScaleState(inner.init(params), jnp.float32(scaling.initial_scale), jnp.int32(0))

    def update(scaled_grads, state: LossScaleState, params=None):
        grads = jax.tree.map(lambda g: g / state.scale, scaled_grads)
        finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
        updates, inner_state = inner.update(grads, state.inner, params)
        updates = jax.tree.map(lambda u: jnp.where(finite, u, jnp.zeros_like(u)), updates)
        inner_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), inner_state, state.inner)
        good = state.good_steps + 1
        grow = finite & (good >= scaling.growth_interval)
        scale = jnp.where(finite, jnp.where(grow, state.scale * scaling.growth_factor, state.scale),
                          state.scale * scaling.backoff_factor)
        good = jnp.where(finite & ~grow, good, 0)
        return updates, LossScaleState(inner_state, scale.astype(jnp.float32), good.astype(jnp.int32))

    return optax.GradientTransformation(init, update)


def scaled_plain_step(module, optimizer: optax.GradientTransformation, value_and_grad=steps.differentiate,
                      label_smoothing: float = 0.0):
    """steps.plain_step with the loss multiplied by the current scale before differentiation; `optimizer` is a
    dynamic_loss_scaling transformation, whose state holds the scale; value_and_grad differentiates the loss."""

    def loss_fn(params, batch_stats, x, y, scale):
        logits, batch_stats = steps.train_forward(module, params, batch_stats, x)
        with jax.named_scope(steps.LOSS_SCOPE):
            loss = steps.cross_entropy(logits, y, label_smoothing).mean()
            return loss * scale, (loss, batch_stats)

    def step_fn(params, batch_stats, opt_state, step, x, y):
        (_, (loss, batch_stats)), grads = value_and_grad(loss_fn)(params, batch_stats, x, y, opt_state.scale)
        params, opt_state = steps.apply_update(optimizer, grads, opt_state, params)
        return params, batch_stats, opt_state, step + 1, loss

    return step_fn


def loss_scale(opt_state) -> float | None:
    """The scale the next step will use, from this process's copy (None without loss scaling)."""
    if not isinstance(opt_state, LossScaleState):
        return None
    scale = opt_state.scale
    return float(scale.addressable_data(0) if hasattr(scale, "addressable_data") else scale)
