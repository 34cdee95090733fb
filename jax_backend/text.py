"""The nlp benchmark's transformer encoder text classifier in Flax, layer for layer torch_backend.text.

Layers are named by their PyTorch state_dict prefix ("layers.0.self_attn.in_proj", "tok_embed"), so the
shared weights convert by jax_backend.layout's rules.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from bench_contract import text


def layer_norm(x, name: str):
    # Two-pass variance, as PyTorch computes it.
    return nn.LayerNorm(epsilon=text.LAYER_NORM_EPS, use_fast_variance=False, name=name)(x)


def masked_self_attention(x, keep, heads: int, name: str):
    """nn.MultiheadAttention's arithmetic: one in_proj for q, k, v (in that order), then out_proj; padding
    keys get the lowest float, so their softmax weight is zero."""
    n, s, d = x.shape
    qkv = nn.Dense(3 * d, name=f"{name}.in_proj")(x)
    q, k, v = (t.reshape(n, s, heads, d // heads) for t in jnp.split(qkv, 3, axis=-1))
    logits = jnp.einsum("nqhd,nkhd->nhqk", q, k) / math.sqrt(d // heads)
    logits = jnp.where(keep[:, None, None, :], logits, jnp.finfo(logits.dtype).min)
    out = jnp.einsum("nhqk,nkhd->nqhd", jax.nn.softmax(logits, axis=-1), v).reshape(n, s, d)
    return nn.Dense(d, name=f"{name}.out_proj")(out)


class TextTransformer(nn.Module):
    config: text.TransformerConfig
    num_classes: int

    @nn.compact
    def __call__(self, tokens):
        c = self.config
        x = nn.Embed(text.VOCAB_SIZE, c.d_model, name="tok_embed")(tokens)
        x = x + nn.Embed(tokens.shape[1], c.d_model, name="pos_embed")(jnp.arange(tokens.shape[1]))
        keep = tokens != text.PAD_ID
        for i in range(c.layers):
            p = f"layers.{i}"
            x = x + masked_self_attention(layer_norm(x, f"{p}.norm1"), keep, c.heads, f"{p}.self_attn")
            y = nn.gelu(nn.Dense(c.mlp_dim, name=f"{p}.linear1")(layer_norm(x, f"{p}.norm2")), approximate=False)
            x = x + nn.Dense(c.d_model, name=f"{p}.linear2")(y)
        # Mean over the real tokens (the class token included, so never over none).
        weights = keep.astype(x.dtype)[:, :, None]
        pooled = (layer_norm(x, "norm") * weights).sum(axis=1) / weights.sum(axis=1)
        return nn.Dense(self.num_classes, name="head")(pooled)


def transformer(num_classes: int, variant: str) -> nn.Module:
    return TextTransformer(text.TRANSFORMER[variant], num_classes)
