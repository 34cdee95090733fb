"""The precision policies of every use case, in the words both backends record on every row."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_contract.spec import USE_CASES

# The precision policies of the inference use case, in the words both backends record on every row.
# fp32 is every use case's. bf16 and fp16 inference cast everything: no float32 master copy is needed when nothing
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
# What stays float32 under mixed-precision training, in both frameworks: PyTorch's autocast keeps these ops in
# float32 by its own op lists; the JAX backend runs autocast's policy operation class by operation class
# (jax_backend.autocast), and each run's precision census shows what ran (bench_contract.run.census).
FLOAT32_IN_MIXED = ("the loss (log-softmax and cross-entropy, on logits cast to float32)",
                    "normalisation statistics (batch-norm and layer-norm mean and variance)",
                    "the master parameters, their gradients and the optimizer's update and state")
_MIXED_TRAINING = ("{name}: float32 master parameters and optimizer state; autocast's policy: matmuls and "
                   "convolutions cast their input and weight to {dtype} (PyTorch torch.autocast(dtype=torch.{dtype}); "
                   "JAX the same per operation class, jax_backend.autocast); layer and group norm in float32 on a "
                   "GPU, in their input's dtype on a CPU; every other operation in its inputs' promoted dtype (a "
                   "transformer's residual stream and layer norms stay float32); float32: " + "; ".join(FLOAT32_IN_MIXED))
# The training use cases (1-4): mixed precision keeps float32 masters, as practitioners train.
TRAINING_POLICIES = {
    "fp32": PRECISION_POLICIES["fp32"],
    "tf32": "tf32: float32 parameters and storage; matmuls and convolutions in TF32 on the tensor cores "
            "(PyTorch allow_tf32 for matmul and cuDNN, matmul precision 'high'; JAX matmul precision 'default')",
    "bf16": _MIXED_TRAINING.format(name="bf16", dtype="bfloat16"),
    "fp16": _MIXED_TRAINING.format(name="fp16", dtype="float16") + "; dynamic loss scaling in both (PyTorch "
            "GradScaler; JAX jax_backend.mixed, the same rule and settings), a step whose gradients overflow is "
            "skipped and counted (skipped_steps)",
}
# The dtype each policy casts to, by the name both numpy-like APIs use (jnp.float16, torch.float16, ...); tf32
# stores float32.
DTYPE_NAMES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class LossScaling:
    """Dynamic loss scaling, one rule for both frameworks (PyTorch GradScaler's defaults and semantics): the loss
    is multiplied by `scale` before the backward pass and the gradients divided by it; a step whose gradients hold
    an inf or NaN is skipped and the scale multiplied by `backoff_factor`; after `growth_interval` steps in a row
    without one, the scale is multiplied by `growth_factor`."""

    initial_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000


LOSS_SCALING = LossScaling()


def precision_policy(framework: str, precision: str, use_case: int) -> str:
    """The policy both backends apply for this precision and use case; refuses what is not implemented."""
    case = USE_CASES[use_case]
    if not case.trains:
        if precision in PRECISION_POLICIES:
            return PRECISION_POLICIES[precision]
        raise ValueError(f"precision {precision!r} is not implemented for inference in the {framework} backend "
                         f"(only {', '.join(PRECISION_POLICIES)})")
    if precision == "fp16" and case.per_sample:
        raise ValueError(f"precision 'fp16' is not implemented for DP-SGD (use case {use_case}): loss scaling "
                         "would clip the scaled per-example gradients to norm C, not the true ones; use bf16")
    if precision in TRAINING_POLICIES:
        return TRAINING_POLICIES[precision]
    raise ValueError(f"precision {precision!r} is not implemented for training in the {framework} backend "
                     f"(only {', '.join(TRAINING_POLICIES)})")


def refuse_tf32_without_support(precision: str, device_kind: str, tensor_float_capable: bool) -> None:
    """tf32 on a device without TF32 (a CPU, an NVIDIA GPU before Ampere) would silently run float32: refused."""
    if precision != "tf32" or tensor_float_capable:
        return
    reason = ("a CPU has no TF32 arithmetic" if device_kind == "cpu" else
              f"this {device_kind} device has no TF32 (NVIDIA GPUs have it from Ampere, compute capability 8.0)")
    raise ValueError(f"precision 'tf32' cannot run here: {reason}, so it would silently be float32; "
                     "use fp32 on this device")


# A float32 matrix product tells float32 arithmetic from TF32 where no setting can be trusted to have taken effect
# (a library that turned TF32 on at import, a flag read before the backend set it): both frameworks' products run
# on the cell's device after its precision setup, and every row records the relative error against float64.
MATMUL_PROBE_SIZE = 256
# The bound between float32 and reduced-precision inputs, from the arithmetic of a K = 256 product of standard
# normal entries. float32 rounds each product and partial sum to u = 2**-24: the relative error of a random-sign
# sum grows as about sqrt(K) * u = 16 * 6e-8 = 1e-6 (less with blocked or pairwise sums). TF32 rounds each
# operand to 10 explicit mantissa bits, relative error up to 2**-11 (RMS 2**-11 / sqrt(3)), so each product is
# off by about sqrt(2) * 2**-11 / sqrt(3) = 4e-4 relative, and a sum of K random-sign terms keeps that relative
# error (errors and values both grow as sqrt(K)); bfloat16 (2**-8) is near 3e-3. 2**-14 = 6.1e-5 lies 60 times
# above the float32 error and 6 times below TF32's, whatever the CPU or GPU.
REDUCED_MATMUL_BOUND = 2.0**-14
MATMUL_ERROR = "float32_matmul_error"  # the row that records it (record_matmul_probe)


def float32_matmul_error(matmul) -> float:
    """Relative (Frobenius) error of matmul(a, b) on float32 standard normal matrices against float64 on the host."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((MATMUL_PROBE_SIZE, MATMUL_PROBE_SIZE), dtype=np.float32) for _ in range(2))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    product = np.asarray(matmul(a, b), dtype=np.float64)
    return float(np.linalg.norm(product - exact) / np.linalg.norm(exact))


def record_matmul_probe(rows, matmul) -> None:
    """The float32_matmul_error row: above REDUCED_MATMUL_BOUND, float32 matmuls ran with reduced-precision inputs."""
    error = float32_matmul_error(matmul)
    arithmetic = "reduced precision (TF32 or lower)" if error > REDUCED_MATMUL_BOUND else "float32"
    rows.add(MATMUL_ERROR, error, "relative",
             note=f"{MATMUL_PROBE_SIZE}x{MATMUL_PROBE_SIZE} float32 matmul on the cell's device after its precision "
                  f"setup, against float64: {arithmetic} (bound {REDUCED_MATMUL_BOUND:.2g})")
