"""The precision policies of every use case, in the words both backends record on every row."""

from __future__ import annotations

from bench_contract.spec import INFERENCE_USE_CASE

# The precision policies of the inference use case, in the words both backends record on every row.
# fp32 is every use case's; bf16 and fp16 are inference only: no float32 master copy is needed when nothing
# is trained. The timed forward pass returns the logits in the policy's dtype; the backend's to_numpy casts
# them to float32 on the host, outside the timed steps, where the result is checked (run_inference). Casting on
# the device inside the timed step would cost PyTorch eager one more kernel launch that XLA fuses away.
PRECISION_POLICIES = {
    "fp32": "fp32: float32 parameters and compute; TF32 off (matmul precision 'highest')",
    "bf16": "bf16: parameters, batch-norm statistics and inputs cast to bfloat16, every layer computes in "
            "bfloat16 (inference); logits cast to float32 on the host, outside the timed step",
    "fp16": "fp16: parameters, batch-norm statistics and inputs cast to float16, every layer computes in "
            "float16 (inference); logits cast to float32 on the host, outside the timed step",
}
# The dtype each policy casts to, by the name both numpy-like APIs use (jnp.float16, torch.float16, ...).
DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def precision_policy(framework: str, precision: str, use_case: int) -> str:
    """The policy both backends apply for this precision and use case; refuses what is not implemented."""
    if precision == "fp32" or (precision in PRECISION_POLICIES and use_case == INFERENCE_USE_CASE):
        return PRECISION_POLICIES[precision]
    # Outside inference only fp32 runs (bf16/fp16 training needs float32 master weights, not built yet).
    only = "only fp32" if use_case != INFERENCE_USE_CASE else f"only {', '.join(PRECISION_POLICIES)}"
    raise ValueError(f"precision {precision!r} is not implemented in the {framework} backend ({only})")
