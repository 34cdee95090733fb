"""The nlp benchmark's transformer encoder text classifier in PyTorch (jax_backend.text is the same network).

Attention is written out rather than called through nn.MultiheadAttention.forward: the module only holds the
parameters (so the state_dict has PyTorch's standard names, in_proj_weight and out_proj), and the computation
is the same few lines as the Flax side, with no fused fast path that would change the arithmetic in eval mode
and nothing that torch.func.vmap cannot batch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bench_contract.data import text


class EncoderLayer(nn.Module):
    """Pre-norm: x + attention(norm1(x)), then x + linear2(gelu(linear1(norm2(x)))). No dropout."""

    def __init__(self, c: text.TransformerConfig) -> None:
        super().__init__()
        self.heads = c.heads
        self.norm1 = nn.LayerNorm(c.d_model, eps=text.LAYER_NORM_EPS)
        self.self_attn = nn.MultiheadAttention(c.d_model, c.heads, dropout=0.0, batch_first=True)
        self.norm2 = nn.LayerNorm(c.d_model, eps=text.LAYER_NORM_EPS)
        self.linear1 = nn.Linear(c.d_model, c.mlp_dim)
        self.linear2 = nn.Linear(c.mlp_dim, c.d_model)

    def attention(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        n, s, d = x.shape
        q, k, v = (t.reshape(n, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in F.linear(x, self.self_attn.in_proj_weight, self.self_attn.in_proj_bias).chunk(3, dim=-1))
        logits = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        # Padding keys take no attention; the class token is never padding, so no row is empty.
        logits = logits.masked_fill(~keep[:, None, None, :], torch.finfo(logits.dtype).min)
        out = (logits.softmax(dim=-1) @ v).transpose(1, 2).reshape(n, s, d)
        return self.self_attn.out_proj(out)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x), keep)
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class TextTransformer(nn.Module):
    """Token and learned position embeddings, pre-norm encoder layers, a final LayerNorm, the mean over the
    non-padding positions, and a linear classifier. Input: (N, L) token ids, padding id 0."""

    def __init__(self, seq_len: int, num_classes: int, variant: str) -> None:
        super().__init__()
        c = text.TRANSFORMER[variant]
        self.tok_embed = nn.Embedding(text.VOCAB_SIZE, c.d_model)
        self.pos_embed = nn.Embedding(seq_len, c.d_model)
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.layers))
        self.norm = nn.LayerNorm(c.d_model, eps=text.LAYER_NORM_EPS)
        self.head = nn.Linear(c.d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_embed(tokens) + self.pos_embed(positions)
        keep = tokens != text.PAD_ID
        for layer in self.layers:
            x = layer(x, keep)
        # Mean over the real tokens (the class token included, so never over none).
        weights = keep.to(x.dtype)[:, :, None]
        return self.head((self.norm(x) * weights).sum(dim=1) / weights.sum(dim=1))
