"""Scaled dot-product attention with the arithmetic of the fused kernels PyTorch's SDPA runs (flash and
memory-efficient, on a GPU and on a CPU), for where JAX has no fused kernel of its own (a CPU).

In those kernels, for bfloat16 or float16 inputs: the scores q k^T accumulate into float32 and stay float32 through
the scale, the mask and the softmax; the probabilities are cast to the inputs' dtype for the product with v. The
backward pass recomputes the probabilities in float32, forms the scores' gradient in float32, and casts it to the
inputs' dtype before its two matmuls with k and q (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp:
`accum_t = opmath_type<scalar_t>`, `qk_reduced_data`, `grad_attn_reduced_data`; FlashAttention-2 likewise).
`jax.nn.dot_product_attention`'s XLA path computes the forward pass so, but differentiating it multiplies the
float32 score gradient with k and q in float32: a matmul of another precision than PyTorch's on the same model,
which the precision census tells apart (bench_contract.run.census). Here the backward is written out (custom_vjp),
so both frameworks' steps run the same arithmetic. In float32 everything is float32, as in both kernels. The
recomputation of the probabilities is the kernels' way to save memory, not the model's work: it is traced in
jax_backend.flops.recomputation(), which the FLOP count leaves out (PyTorch's count takes the probabilities from
the forward pass), so both frameworks count the attention's six matmuls.
Layout (batch, length, heads, head size), as jax.nn.dot_product_attention's.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp

from jax_backend.flops import recomputation


def scores(q, k, causal: bool):
    """scale * q k^T in float32 (the kernels' accumulation type), the future keys masked out when causal."""
    logits = jnp.einsum("nqhd,nkhd->nhqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    if causal:
        length = q.shape[1]
        allowed = jnp.tril(jnp.ones((length, length), dtype=bool))
        logits = jnp.where(allowed, logits, -jnp.inf)
    return logits


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def fused_arithmetic_attention(q, k, v, causal: bool):
    probabilities = jax.nn.softmax(scores(q, k, causal), axis=-1)
    return jnp.einsum("nhqk,nkhd->nqhd", probabilities.astype(v.dtype), v)


def _forward(q, k, v, causal):
    return fused_arithmetic_attention(q, k, v, causal), (q, k, v)


def _backward(causal, residuals, grad_out):
    q, k, v = residuals
    with recomputation():  # recomputed, as the kernels do: not counted as the model's work
        probabilities = jax.nn.softmax(scores(q, k, causal), axis=-1)
    grad_v = jnp.einsum("nhqk,nqhd->nkhd", probabilities.astype(v.dtype), grad_out)
    grad_p = jnp.einsum("nqhd,nkhd->nhqk", grad_out, v, preferred_element_type=jnp.float32)
    # The softmax's gradient, p * (dp - sum(dp * p)), in float32; then cast for the two matmuls.
    grad_scores = probabilities * (grad_p - jnp.sum(grad_p * probabilities, axis=-1, keepdims=True))
    grad_scores = (grad_scores / math.sqrt(q.shape[-1])).astype(q.dtype)
    grad_q = jnp.einsum("nhqk,nkhd->nqhd", grad_scores, k)
    grad_k = jnp.einsum("nhqk,nqhd->nkhd", grad_scores, q)
    return grad_q, grad_k, grad_v


fused_arithmetic_attention.defvjp(_forward, _backward)


def attention(q, k, v, causal: bool):
    """Each framework's fused attention: cuDNN's (or XLA's) through jax.nn.dot_product_attention on a GPU, the
    fused kernels' arithmetic written out elsewhere (a CPU, where XLA has no fused attention)."""
    if jax.default_backend() == "gpu":
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal)
    return fused_arithmetic_attention(q, k, v, causal)
