"""The spec's optimizer as a torch.optim optimizer, the same update as jax_backend.optim's.

torch.optim's own formulas already are the contract's (jax_backend.optim brings optax to them); what is set here
is the rate: with a schedule, a step pre-hook sets every param_group's lr to bench_contract.run.optim's table
entry for this update before optimizer.step() runs, so update t uses rate t as in JAX (a torch LR scheduler
steps after the update, one step late for this purpose). A constant schedule registers no hook at all.

Under torch.compile (spec.torch_compile: the whole step, the hook included, is compiled) a Python float lr
that changes every step would be a new constant each step, so a recompilation each step. There the rate is a
tensor, and the hook reads the table and advances its count with tensor operations, which compile into the
step. Adam and AdamW then run their single-tensor path (foreach=False): their foreach path takes a tensor lr only
with capturable=True, and Inductor fuses the single-tensor updates anyway. Compiled, they still take the
capturable formula, which divides by the rate: at rate 0 (the schedule's end) a weight whose gradient was always 0
(a dead unit's) gets 0/0, NaN. So the compiled rate is at least COMPILED_RATE_FLOOR, 1e-30: an update of 1e-30
times Adam's step (at most about 1) is below float32's resolution for every weight larger than 1e-22, so
it moves nothing, as rate 0 does in eager steps and in JAX. Eager steps keep the Python float: a tensor lr would cost them device reads.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from bench_contract.run.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, learning_rates, rate_index
from bench_contract.spec import JobSpec


# torch.optim's implementations of one update, as its optimizers' keyword arguments: PyTorch's own choice, a loop
# over the parameters, one multi-tensor kernel per operation, one fused kernel.
IMPLEMENTATIONS = {"default": {}, "for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def build_optimizer(params: Iterable[torch.nn.Parameter], spec: JobSpec) -> torch.optim.Optimizer:
    params = list(params)
    rates = [float(rate) for rate in learning_rates(spec)]  # float32 values, as JAX reads them
    scheduled_in_graph = len(rates) > 1 and spec.compile_mode() is not None
    lr = torch.tensor(rates[0], device=params[0].device) if scheduled_in_graph else rates[0]
    decay = spec.weight_decay
    adam = {"betas": (ADAM_BETA1, ADAM_BETA2), "eps": ADAM_EPS, "weight_decay": decay}
    if scheduled_in_graph:
        adam["foreach"] = False
    # The tuned implementation of the same update (bench_contract.tuning's optimizer_impl, constant rate only).
    implementation = IMPLEMENTATIONS[spec.knob("optimizer_impl")]
    adam |= implementation
    if spec.optimizer == "adamw":
        optimizer = torch.optim.AdamW(params, lr=lr, **adam)
    elif spec.optimizer == "adam":
        optimizer = torch.optim.Adam(params, lr=lr, **adam)
    elif spec.optimizer == "momentum":
        optimizer = torch.optim.SGD(params, lr=lr, momentum=spec.momentum, nesterov=spec.nesterov, weight_decay=decay,
                                    **implementation)
    else:
        optimizer = torch.optim.SGD(params, lr=lr, weight_decay=decay, **implementation)
    if scheduled_in_graph:
        optimizer.register_step_pre_hook(TensorScheduledRate(rates, params[0].device))
    elif len(rates) > 1:
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


COMPILED_RATE_FLOOR = 1e-30


class TensorScheduledRate:
    """ScheduledRate in tensor operations on the device, for a compiled step: no Python value changes per step."""

    def __init__(self, rates: list[float], device: torch.device) -> None:
        self.rates = torch.tensor(rates, dtype=torch.float32, device=device).clamp(min=COMPILED_RATE_FLOOR)
        self.step = torch.zeros((), dtype=torch.int64, device=device)

    def __call__(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        rate = self.rates[torch.clamp(self.step, max=len(self.rates) - 1)]  # rate_index, on the device
        for group in optimizer.param_groups:
            group["lr"].copy_(rate)
        self.step.add_(1)
