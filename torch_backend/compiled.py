"""torch.compile of the whole training step (forward, backward and the optimizer's update), for
`--torch-modes compiled`. The compilation happens lazily inside the first step: the training loop
(bench_contract.run.training) records it apart, as the first step minus the steady steps' median."""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench_contract.spec import TORCH_COMPILE_MODES


def compiled(step: Callable, mode: str) -> Callable:
    """The step under torch.compile; reduce-overhead records it into CUDA graphs on a GPU."""
    if mode not in TORCH_COMPILE_MODES:
        raise ValueError(f"torch.compile mode {mode!r} is not one of {', '.join(TORCH_COMPILE_MODES)}")
    return torch.compile(step, mode=mode)
