"""PyTorch's autocast, operation class by operation class, for the Flax models: the mixed-precision training policy
of both frameworks is autocast's (issue 29, defect 2), and the precision census checks it (jax_backend.census).

Under autocast the parameters stay float32 and each operation decides its own dtype:
- matmuls and convolutions cast their input and weight to the low dtype and return it (dense, conv here: Flax's
  `dtype` is exactly that cast);
- layer and group norm return float32 where autocast lists them (CUDA) and otherwise their input's dtype
  (layer_or_group_norm_dtype); batch norm returns its input's dtype everywhere (jax_backend.vision.BatchNorm); all
  three accumulate their statistics in float32 in both frameworks;
- everything else follows its inputs, with the same promotion in both (bfloat16 + float32 is float32): so the
  residual stream of a transformer, fed by float32 embeddings and positions, stays float32 in both, and attention,
  fed by bfloat16 projections, computes its softmax in bfloat16 in both.
Casting every parameter and the input to the low dtype instead (the policy before) ran the transformers' layer norms
and residual stream in bfloat16 while PyTorch ran them in float32.

The policy is read while the model is traced (`policy` sets it around a module's apply), so the modules need no
precision attribute of their own; outside it every layer computes in its parameters' dtype, float32.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

import flax.linen as nn
import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class Policy:
    compute: object  # the dtype of matmuls and convolutions (jnp.bfloat16, jnp.float16), or None: their inputs'
    norms_in_float32: bool  # layer and group norm in float32 (autocast's CUDA list), else in their input's dtype


FULL = Policy(None, False)
_POLICY: contextvars.ContextVar[Policy] = contextvars.ContextVar("autocast policy", default=FULL)


@contextlib.contextmanager
def policy(compute, norms_in_float32: bool):
    """Trace the modules applied inside under this policy."""
    token = _POLICY.set(Policy(compute, norms_in_float32))
    try:
        yield
    finally:
        _POLICY.reset(token)


# The named scope of a residual connection's addition, by which the precision census (jax_backend.census) tells the
# residual stream from the network's other additions. PyTorch's census finds the same additions by the block that
# runs them (torch_backend.census.RESIDUAL_BLOCKS).
RESIDUAL_SCOPE = "residual_stream"


def mixed() -> bool:
    """Whether the modules are traced under a mixed policy (bf16 or fp16 training)."""
    return _POLICY.get().compute is not None


def residual(stream, branch):
    """stream + branch, a residual connection (a transformer's or a ResNet's), in RESIDUAL_SCOPE; its dtype follows
    the usual promotion, as in PyTorch (a float32 stream plus a bfloat16 branch is float32)."""
    with jax.named_scope(RESIDUAL_SCOPE):
        return stream + branch


def dense(features: int, *, name: str, use_bias: bool = True) -> nn.Dense:
    """nn.Dense in the policy's compute dtype (input and kernel cast to it, as autocast's addmm)."""
    return nn.Dense(features, use_bias=use_bias, dtype=_POLICY.get().compute, name=name)


def tied_logits(x, table):
    """x @ table.T, a language model's output through its token embedding (PyTorch's F.linear(x, embedding.weight)):
    both operands cast to the policy's compute dtype, as autocast casts a linear's."""
    compute = _POLICY.get().compute
    if compute is not None:
        x, table = x.astype(compute), table.astype(compute)
    return jnp.einsum("...d,vd->...v", x, table)


def conv(features: int, kernel_size: tuple[int, int], **options) -> nn.Conv:
    """nn.Conv in the policy's compute dtype (input and kernel cast to it, as autocast's convolution)."""
    return nn.Conv(features, kernel_size, dtype=_POLICY.get().compute, **options)


def layer_or_group_norm_dtype(x):
    """The dtype a layer or group norm of x returns: float32 where autocast lists them (CUDA), else x's."""
    return jnp.float32 if _POLICY.get().norms_in_float32 else x.dtype
