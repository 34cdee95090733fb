"""The nlp benchmark's language model `gpt` in Flax (bench_contract.models.language), layer for layer
torch_backend.language.

Layers are named by their PyTorch state_dict prefix ("blocks.0.attn.qkv", "tok_embed"), so the shared weights
convert by jax_backend.layout's rules. Attention goes through JAX's fused kernel on a GPU,
`jax.nn.dot_product_attention` with its causal mask, the implementation left to XLA (cuDNN's fused attention where
it applies, XLA's own otherwise); on a CPU, where XLA has none, through the fused kernels' arithmetic written out
(jax_backend.attention). `attention_kernel` names the one compiled, for the row.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bench_contract.models import language
from jax_backend import attention, autocast, vision

MODEL_NAME = language.MODEL_NAME
# The custom call of cuDNN's fused attention in a compiled XLA program (XLA's cuDNN fused-MHA rewriter).
CUDNN_ATTENTION_CALL = "__cudnn$fmha"


def layer_norm(x, name: str):
    return vision.layer_norm(x, language.LAYER_NORM_EPS, name)


def causal_attention(x, heads: int, name: str):
    """One qkv projection (q, k, v in that order on its output axis, as PyTorch's split), causal attention, proj."""
    n, s, d = x.shape
    qkv = autocast.dense(3 * d, name=f"{name}.qkv")(x)
    q, k, v = (t.reshape(n, s, heads, d // heads) for t in jnp.split(qkv, 3, axis=-1))
    out = attention.attention(q, k, v, causal=True).reshape(n, s, d)
    return autocast.dense(d, name=f"{name}.proj")(out)


class GPT(nn.Module):
    """(N, L) token ids -> (N, L, vocabulary) next-token logits."""

    config: language.GPTConfig

    @nn.compact
    def __call__(self, tokens):
        c = self.config
        tok_embed = nn.Embed(c.vocab_size, c.d_model, name="tok_embed")
        x = tok_embed(tokens) + nn.Embed(c.context, c.d_model, name="pos_embed")(jnp.arange(tokens.shape[1]))
        for i in range(c.layers):
            p = f"blocks.{i}"
            x = autocast.residual(x, causal_attention(layer_norm(x, f"{p}.ln_1"), c.heads, f"{p}.attn"))
            hidden = autocast.dense(c.mlp_dim, name=f"{p}.mlp.fc")(layer_norm(x, f"{p}.ln_2"))
            x = autocast.residual(x, autocast.dense(c.d_model, name=f"{p}.mlp.proj")(nn.gelu(hidden, approximate=True)))
        return autocast.tied_logits(layer_norm(x, "ln_f"), tok_embed.embedding)


def gpt(num_classes: int, variant: str) -> nn.Module:
    config = language.GPT[variant]
    if num_classes != config.vocab_size:
        raise ValueError(f"gpt {variant} has a vocabulary of {config.vocab_size} ids; the data has {num_classes}")
    return GPT(config)


def attention_kernel(compiled_text: str) -> str:
    """The attention kernel a compiled step runs, from its optimized HLO text."""
    if CUDNN_ATTENTION_CALL in compiled_text:
        return "cuDNN fused attention"
    if jax.default_backend() == "gpu":
        return "XLA (dot_product_attention's reference implementation)"
    return "XLA, the fused kernels' arithmetic (jax_backend.attention)"
