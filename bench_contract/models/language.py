"""The nlp benchmark's decoder-only language model, `gpt`: GPT-2's architecture, the sizes of its variants, its
parameter names and its initialisation, one definition for both frameworks (jax_backend.language and
torch_backend.language build it).

GPT-2 (Radford et al. 2019): learned token and position embeddings, pre-LayerNorm blocks (x + attn(ln_1(x)),
then x + mlp(ln_2(x))), causal multi-head self-attention, a 4x GELU MLP (GPT-2's tanh approximation), a final
LayerNorm, and logits from the token embedding itself (tied embeddings: no separate output matrix). No dropout.
`full` is GPT-2 small: 12 layers, 12 heads, width 768, context 1024, GPT-2's vocabulary of 50,257 ids (124M
parameters); `tiny` has the same layer types at a size a CPU test trains in seconds.

Initialisation is GPT-2's: every weight matrix and embedding N(0, 0.02), the two projections that write into the
residual stream (attn.proj, mlp.proj) N(0, 0.02 / sqrt(2 * layers)), biases zero, LayerNorm scales one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench_contract.models.weights import ParamSpec

MODEL_NAME = "gpt"
LAYER_NORM_EPS = 1e-5  # GPT-2's, and nn.LayerNorm's default
INIT_STD = 0.02
# The projections whose output is added to the residual stream; GPT-2 scales their init by 1/sqrt(2 * layers),
# one factor per residual addition, so the stream's variance does not grow with depth.
RESIDUAL_PROJECTIONS = ("attn.proj.weight", "mlp.proj.weight")


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    context: int  # tokens per sequence, the model's input length
    d_model: int
    heads: int
    layers: int

    @property
    def mlp_dim(self) -> int:
        return 4 * self.d_model

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


GPT = {
    "full": GPTConfig(vocab_size=50257, context=1024, d_model=768, heads=12, layers=12),
    # A vocabulary of the 256 byte values, the byte-level tokenizer's (bench_contract.data.language).
    "tiny": GPTConfig(vocab_size=256, context=32, d_model=32, heads=2, layers=2),
}


def param_spec(name: str, shape: tuple[int, ...], config: GPTConfig) -> ParamSpec:
    """GPT-2's initialisation of the parameter `name` (PyTorch's state_dict name and layout)."""
    layer, _, leaf = name.rpartition(".")
    is_norm = layer.endswith(("ln_1", "ln_2")) or layer == "ln_f"
    if leaf == "bias":
        return ParamSpec(name, shape, "zeros")
    if is_norm:
        return ParamSpec(name, shape, "ones")
    if name.endswith(RESIDUAL_PROJECTIONS):
        return ParamSpec(name, shape, "normal", std=INIT_STD / math.sqrt(2 * config.layers))
    return ParamSpec(name, shape, "normal", std=INIT_STD)


def param_specs(shapes: dict[str, tuple[int, ...]], config: GPTConfig) -> list[ParamSpec]:
    """The shared-weights parameter list of a GPT whose parameters (PyTorch names and layouts) have these
    shapes; both backends derive the shapes from their own modules and pass them here."""
    return [param_spec(name, shape, config) for name, shape in shapes.items()]


def parameter_count(config: GPTConfig) -> int:
    """GPT's parameters (the tied embedding counted once): GPT-2 small's is 124,439,808."""
    d, f = config.d_model, config.mlp_dim
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    return config.vocab_size * d + config.context * d + config.layers * block + 2 * d


def training_flops_per_token(config: GPTConfig) -> float:
    """The usual count of a training step's FLOPs per token (Kaplan et al. 2020, PaLM's appendix B): 6 per
    parameter that multiplies (embeddings' lookups excluded, the tied output matrix included), plus attention's
    scores and weighted sum, 6 * 2 * layers * context * d_model over a causal mask counted in full, as MFU
    reports count it."""
    non_embedding = parameter_count(config) - config.context * config.d_model
    return 6.0 * non_embedding + 12.0 * config.layers * config.context * config.d_model
