"""The spec's optimizer as an optax GradientTransformation, the same update as torch_backend.optim's.

How each optax default is brought to torch.optim's (docs/measurement.md, "Optimizers and schedules"):
- the rate of update t is bench_contract.run.optim's table entry t, read with optax's own step count (0 for the
  first update), inside the compiled step;
- coupled weight decay (sgd, momentum, adam) is torch's `grad + wd * param` before the optimizer:
  add_decayed_weights first in the chain; adamw's decoupled decay is optax.adamw's, lr * (adam + wd * param),
  which is torch's param * (1 - lr * wd) followed by the Adam step on the same pre-update param;
- Nesterov: optax's trace(nesterov=True) keeps buf = g + m * buf and applies g + m * buf, torch's formula;
- Adam: both divide the bias-corrected first moment by sqrt(bias-corrected second moment) + eps (eps_root 0).
"""

from __future__ import annotations

import jax.numpy as jnp
import optax

from bench_contract.run.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, learning_rates
from bench_contract.spec import JobSpec


def schedule(spec: JobSpec):
    """The learning rate of optax's step count, from the shared table (a float for a constant schedule)."""
    table = learning_rates(spec)
    if len(table) == 1:
        return float(table[0])
    rates = jnp.asarray(table)
    return lambda count: rates[jnp.minimum(count, len(table) - 1)]


def build_optimizer(spec: JobSpec) -> optax.GradientTransformation:
    rate = schedule(spec)
    if spec.optimizer == "adamw":
        return optax.adamw(rate, b1=ADAM_BETA1, b2=ADAM_BETA2, eps=ADAM_EPS, weight_decay=spec.weight_decay)
    if spec.optimizer == "adam":
        update = optax.adam(rate, b1=ADAM_BETA1, b2=ADAM_BETA2, eps=ADAM_EPS)
    elif spec.optimizer == "momentum":
        update = optax.sgd(rate, momentum=spec.momentum, nesterov=spec.nesterov)
    else:
        update = optax.sgd(rate)
    if spec.weight_decay:
        return optax.chain(optax.add_decayed_weights(spec.weight_decay), update)
    return update
