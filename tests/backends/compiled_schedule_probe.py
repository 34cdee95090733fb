"""Run in PyTorch's environment: STEPS steps of a small network with each optimizer and a warm-up+cosine
schedule, eager and under torch.compile (the whole step, as torch_backend.compiled compiles it), from the same
weights. Prints JSON: per optimizer, both loss curves and the graphs compiled after each compiled step.

    python tests/backends/compiled_schedule_probe.py
"""

from __future__ import annotations

import json

import torch
from torch import nn
from torch._dynamo.utils import counters

from bench_contract.spec import OPTIMIZERS, JobSpec
from torch_backend.optim import build_optimizer

STEPS = 16  # past the schedule's warm-up (3) and decay (5): the rate changes in 8 of them, then stays 0


def losses(optimizer_name: str, compiled: bool) -> tuple[list[float], list[int]]:
    torch.manual_seed(0)
    spec = JobSpec(campaign="c", cell_id="c", pair_key="c", framework="torch", benchmark="mnist", use_case=1,
                   model="mlp", batch_size=8, precision="fp32", optimizer=optimizer_name, weight_decay=0.01,
                   lr_schedule="warmup_cosine", lr_warmup_steps=3, lr_decay_steps=5, torch_compile=compiled)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = build_optimizer(model.parameters(), spec)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    run = torch.compile(step) if compiled else step
    curve, graphs = [], []
    for _ in range(STEPS):
        curve.append(float(run(x, y)))
        graphs.append(int(counters["stats"]["unique_graphs"]))
    return curve, graphs


def main() -> None:
    out = {}
    for name in OPTIMIZERS:
        torch._dynamo.reset()  # each optimizer compiles afresh: Dynamo caches per code object, and `step` is one
        counters.clear()
        eager, _ = losses(name, compiled=False)
        compiled, graphs = losses(name, compiled=True)
        out[name] = {"eager": eager, "compiled": compiled, "graphs": graphs}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
