"""The spec's optimizer as a torch.optim optimizer, the same update as jax_backend.optim's.

torch.optim's own formulas already are the contract's (jax_backend.optim brings optax to them); what is set here
is the rate: with a schedule, a step pre-hook sets every param_group's lr to bench_contract.run.optim's table
entry for this update before optimizer.step() runs, so update t uses rate t as in JAX (a torch LR scheduler
steps after the update, one step late for this purpose). A constant schedule registers no hook at all.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from bench_contract.run.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, learning_rates, rate_index
from bench_contract.spec import JobSpec


def build_optimizer(params: Iterable[torch.nn.Parameter], spec: JobSpec) -> torch.optim.Optimizer:
    rates = [float(rate) for rate in learning_rates(spec)]  # float32 values, as JAX reads them
    lr, decay = rates[0], spec.weight_decay
    if spec.optimizer == "adamw":
        optimizer = torch.optim.AdamW(params, lr=lr, betas=(ADAM_BETA1, ADAM_BETA2), eps=ADAM_EPS, weight_decay=decay)
    elif spec.optimizer == "adam":
        optimizer = torch.optim.Adam(params, lr=lr, betas=(ADAM_BETA1, ADAM_BETA2), eps=ADAM_EPS, weight_decay=decay)
    elif spec.optimizer == "momentum":
        optimizer = torch.optim.SGD(params, lr=lr, momentum=spec.momentum, nesterov=spec.nesterov, weight_decay=decay)
    else:
        optimizer = torch.optim.SGD(params, lr=lr, weight_decay=decay)
    if len(rates) > 1:
        optimizer.register_step_pre_hook(ScheduledRate(rates))
    return optimizer


class ScheduledRate:
    """Sets the rate of the coming update before each optimizer.step()."""

    def __init__(self, rates: list[float]) -> None:
        self.rates, self.step = rates, 0

    def __call__(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        rate = self.rates[rate_index(self.step, len(self.rates))]
        for group in optimizer.param_groups:
            group["lr"] = rate
        self.step += 1
