"""The nlp benchmark's transformer encoder text classifier in Flax, layer for layer torch_backend.text.

Layers are named by their PyTorch state_dict prefix ("layers.0.self_attn.in_proj", "tok_embed"), so the
shared weights convert by jax_backend.layout's rules.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from bench_contract.data import text
from jax_backend import autocast, vision


def layer_norm(x, name: str):
    return vision.layer_norm(x, text.LAYER_NORM_EPS, name)


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
            attention = vision.self_attention(layer_norm(x, f"{p}.norm1"), c.heads, f"{p}.self_attn", keep)
            x = autocast.residual(x, attention)
            y = nn.gelu(autocast.dense(c.mlp_dim, name=f"{p}.linear1")(layer_norm(x, f"{p}.norm2")), approximate=False)
            x = autocast.residual(x, autocast.dense(c.d_model, name=f"{p}.linear2")(y))
        # Mean over the real tokens (the class token included, so never over none).
        weights = keep.astype(x.dtype)[:, :, None]
        pooled = (layer_norm(x, "norm") * weights).sum(axis=1) / weights.sum(axis=1)
        return autocast.dense(self.num_classes, name="head")(pooled)


def transformer(num_classes: int, variant: str) -> nn.Module:
    return TextTransformer(text.TRANSFORMER[variant], num_classes)
