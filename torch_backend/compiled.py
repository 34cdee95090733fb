"""torch.compile of the whole training step (forward, backward and the optimizer's update), for
`--torch-modes compiled`. The compilation happens lazily inside the first step: the training loop
(bench_contract.run.training) records it apart, as the first step minus the steady steps' median."""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench_contract.spec import TORCH_COMPILE_MODES


def compiled(step: Callable, mode: str) -> Callable:
    """The step under torch.compile; reduce-overhead records it into CUDA graphs on a GPU.

    A step that reaches Dynamo's recompile limit fails instead of running eagerly from then on: by default Dynamo
    logs a warning and runs the function uncompiled, and the row would still say torch.compile (issue 29: Poisson
    batches of every size did that until DP-SGD's compiled step took one padded shape)."""
    if mode not in TORCH_COMPILE_MODES:
        raise ValueError(f"torch.compile mode {mode!r} is not one of {', '.join(TORCH_COMPILE_MODES)}")
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return torch.compile(step, mode=mode)
