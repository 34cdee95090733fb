"""Run in the PyTorch environment: the collectives one train step of the sharded language model issues
(`--parallelism fsdp`: torch_backend.sharding.fully_sharded, TorchOps as training_ops builds it), on rank 0 of a
world of two; prints as JSON on its last line each collective's operation and the elements it gathers or
reduce-scatters, and the parameter count of each FSDP unit (each transformer block, then the root: the rest).

    python tests/backends/fsdp_collectives_probe.py

The world is PyTorch's fake process group (its own testing backend): one process, collectives that return at once
and move no data, so the step's numbers are meaningless but the collectives FSDP2 issues, and their sizes, are the
ones it issues on two real ranks.
"""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode

from bench_contract.data.loading import load_dataset
from torch_backend import models
from torch_backend.run import TorchOps
from torch_backend.sharding import fully_sharded

MODEL, VARIANT, BATCH, WORLD = "gpt", "tiny", 8, 2


class Collectives(TorchDispatchMode):
    """Records each c10d collective dispatched: its name and the elements of its largest tensor (the gathered
    output of an all-gather, the input a reduce-scatter reduces)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d":
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            self.seen.append((func.__name__.split(".")[0], max((t.numel() for t in tensors), default=0)))
        return func(*args, **(kwargs or {}))


def main() -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    data = load_dataset("nlp", "synthetic", synthetic_samples=50, variant=VARIANT, model=MODEL)
    model = models.build(MODEL, data.sample_shape, data.num_classes, VARIANT)
    blocks = [sum(p.numel() for p in block.parameters()) for block in model.blocks]
    units = [*blocks, sum(p.numel() for p in model.parameters()) - sum(blocks)]
    model = fully_sharded(model, torch.device("cpu"), WORLD)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ops = TorchOps(model, optimizer, torch.device("cpu"), WORLD, sharded=True)
    batch = ops.to_device(data.x_train[:BATCH // WORLD], data.y_train[:BATCH // WORLD])
    ops.train_step(batch)  # the first step: FSDP2's lazy initialisation
    with Collectives() as recorded:
        ops.train_step(batch)
    print(json.dumps({"collectives": recorded.seen, "units": units}))


if __name__ == "__main__":
    main()
