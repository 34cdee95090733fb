"""The nlp benchmark's language model `gpt` in PyTorch (bench_contract.models.language; jax_backend.language is the
same network, parameter for parameter).

Attention goes through PyTorch's fused kernel, `F.scaled_dot_product_attention` with its causal mask: PyTorch picks
the implementation (flash, memory-efficient, cuDNN, or the math reference on CPU), and `attention_kernels` names the
one it ran, for the row. The output logits come from the token embedding's own matrix (tied embeddings), so the
state_dict holds it once, as the shared weights do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from bench_contract.models import language
from bench_contract.models.weights import ParamSpec


class CausalSelfAttention(nn.Module):
    def __init__(self, c: language.GPTConfig) -> None:
        super().__init__()
        self.heads = c.heads
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.proj = nn.Linear(c.d_model, c.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, s, d = x.shape
        q, k, v = (t.reshape(n, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).split(d, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(n, s, d))


class MLP(nn.Module):
    def __init__(self, c: language.GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(c.d_model, c.mlp_dim)
        self.proj = nn.Linear(c.mlp_dim, c.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, c: language.GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.d_model, eps=language.LAYER_NORM_EPS)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.d_model, eps=language.LAYER_NORM_EPS)
        self.mlp = MLP(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """(N, L) token ids -> (N, L, vocabulary) next-token logits."""

    def __init__(self, c: language.GPTConfig) -> None:
        super().__init__()
        self.config = c
        self.tok_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_embed = nn.Embedding(c.context, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.d_model, eps=language.LAYER_NORM_EPS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_embed(tokens) + self.pos_embed(positions)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.tok_embed.weight)

    def param_specs(self) -> list[ParamSpec]:
        """GPT-2's initialisation of this module's parameters (bench_contract.models.language)."""
        shapes = {name: tuple(t.shape) for name, t in self.state_dict().items()}
        return language.param_specs(shapes, self.config)


def build_gpt(sample_shape: tuple[int, ...], num_classes: int, variant: str = "full") -> GPT:
    config = language.GPT[variant]
    (seq_len,) = sample_shape
    if (seq_len, num_classes) != (config.context, config.vocab_size):
        raise ValueError(f"gpt {variant} takes {config.context} tokens of a {config.vocab_size}-id vocabulary; "
                         f"the data has {seq_len} tokens and {num_classes} ids")
    return GPT(config)


# SDPA's implementations, by the ATen operation each dispatches to.
ATTENTION_KERNELS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "_scaled_dot_product_efficient_attention": "memory-efficient",
    "_scaled_dot_product_cudnn_attention": "cuDNN",
    "_scaled_dot_product_attention_math": "math (reference)",
}


class AttentionKernels(TorchDispatchMode):
    """Records, while active, the scaled dot-product attention operations dispatched (SDPA's choice)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ATTENTION_KERNELS:
            self.found.add(ATTENTION_KERNELS[name])
        return func(*args, **(kwargs or {}))


def attention_kernel(model: nn.Module, step) -> str:
    """The kernels SDPA ran in one call of `step` (a train step of `model`), ", "-joined; "" for a model without
    SDPA (nothing is run)."""
    if not any(isinstance(m, CausalSelfAttention) for m in model.modules()):
        return ""
    with AttentionKernels() as mode:
        step()
    return ", ".join(sorted(mode.found)) or "none dispatched"
