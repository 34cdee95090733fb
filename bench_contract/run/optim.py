"""The optimizers and the learning-rate schedule, defined once for both backends.

Each backend builds its framework's own optimizer (optax in JAX, torch.optim in PyTorch) from these
hyperparameters, and both take the learning rate of step t from `learning_rates`: the same float32 numbers, so
the update of step t is the same formula with the same rate in both (docs/measurement.md, "Optimizers and
schedules", says where optax and torch.optim differ by default and how each difference is closed).

The schedule is a table rather than a formula each backend re-implements: JAX indexes it with optax's step
count inside the compiled step, PyTorch sets param_group['lr'] from it before each optimizer.step().
"""

from __future__ import annotations

import math

import numpy as np

from bench_contract.spec import JobSpec

# Adam's and AdamW's constants, the defaults of torch.optim.Adam and optax.adam alike; fixed here (rows carry the
# git commit), not options.
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPS = 1e-8  # added to sqrt of the bias-corrected second moment, outside the root, in both frameworks


def learning_rate_at(step: int, spec: JobSpec) -> float:
    """The learning rate of update `step` (0 for the first), by spec.lr_schedule.

    constant: learning_rate at every step.
    warmup_cosine: rising linearly over lr_warmup_steps steps, learning_rate * (step + 1) / lr_warmup_steps,
    so the first update already moves; then half a cosine from learning_rate down to 0 over lr_decay_steps
    steps; 0 after that.
    """
    base = spec.learning_rate
    if spec.lr_schedule == "constant":
        return base
    if step < spec.lr_warmup_steps:
        return base * (step + 1) / spec.lr_warmup_steps
    progress = min(step - spec.lr_warmup_steps, spec.lr_decay_steps) / spec.lr_decay_steps
    return base * 0.5 * (1.0 + math.cos(math.pi * progress))


def learning_rates(spec: JobSpec) -> np.ndarray:
    """Every step's rate in float32 up to the first step from which it no longer changes (the last entry
    holds for all later steps). A constant schedule is one entry."""
    changing = 1 if spec.lr_schedule == "constant" else spec.lr_warmup_steps + spec.lr_decay_steps + 1
    return np.array([learning_rate_at(step, spec) for step in range(changing)], dtype=np.float32)


def rate_index(step: int, table_length: int) -> int:
    """The table entry of `step`: the last entry holds from there on."""
    return min(step, table_length - 1)

