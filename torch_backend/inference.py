"""The forward pass of a model in PyTorch (inference mode; eager or torch.compile, contiguous or channels_last),
for the inference use case and the parity check."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import numpy as np
import torch

from torch_backend import census, compiles, models
from torch_backend.compiled import compiled
from torch_backend.efficiency import counted_flops
from torch_backend.sync import waiter


class TorchInference:
    def __init__(self, model: str, variant: str, weights: dict[str, np.ndarray], sample_shape: tuple[int, ...],
                 num_classes: int, device: torch.device, *, compile_mode: str | None = None,
                 channels_last: bool = False, dtype: torch.dtype = torch.float32,
                 grad_mode: str = "inference_mode") -> None:
        self.device = device
        self.synchronize = waiter(device)  # the clock's wait, decided once for the device
        net = models.build(model, sample_shape, num_classes, variant)
        models.load_shared_weights(net, weights)
        # eval(): batch norm uses its running statistics and dropout is off, as in the Flax modules.
        # bf16: parameters and buffers (batch-norm statistics) are cast, as the JAX backend casts its variables.
        net = net.to(device=device, dtype=dtype).eval()
        self.dtype = dtype
        # How the forward pass records no autograd graph (a knob of the search space, bench_contract.tuning).
        self.no_grad = torch.inference_mode if grad_mode == "inference_mode" else torch.no_grad
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        if channels_last:
            net = net.to(memory_format=torch.channels_last)
        self.parameter_count = sum(p.numel() for p in net.parameters())
        # None: eager; else torch.compile's mode, the one the row names (runner.framework_options)
        self.compile_mode = compile_mode
        self.eager_net = net  # FLOPs are counted on the eager module: the same operations, no recompilation
        self.net = compiled(net, compile_mode) if compile_mode is not None else net

    def to_device(self, x: np.ndarray):
        batch = torch.from_numpy(x).to(device=self.device, dtype=self.dtype)
        if batch.dim() == 4:
            batch = batch.contiguous(memory_format=self.memory_format)
        self.synchronize(batch)
        return batch

    def compile(self, x) -> dict[str, float]:
        """Eager: nothing to compile. torch.compile compiles lazily inside the first call, which also runs
        the model once; its compile time is that first call minus the next (steady) call, so the execution
        is not counted as compilation."""
        if self.compile_mode is None:
            return {}
        first = self._timed_call(x)
        steady = self._timed_call(x)
        return {"compile_first_call_time": first, "compile_time": max(first - steady, 0.0)}

    def _timed_call(self, x) -> float:
        start = time.perf_counter()
        self.synchronize(self.forward(x))
        return time.perf_counter() - start

    def forward(self, x):
        with self.no_grad():
            return self.net(x)

    @contextmanager
    def passes(self, x) -> Iterator[Callable[[], Any]]:
        """The mode without autograd (inference mode, or no_grad where tuning chose it) entered once, around all
        the timed passes, and each pass the module's own call on the batch: entering the mode in every pass cost
        about 1.7 us of each, and a bare loop enters it once."""
        with self.no_grad():
            yield partial(self.net, x)

    def eager_forward(self, x):
        """The forward pass of the eager module: the same operations as the compiled one, which FLOPs and the
        census are taken from (a dispatch mode sees no operation inside a compiled graph)."""
        with torch.inference_mode():
            return self.eager_net(x)

    def flops_per_step(self, x):
        return counted_flops(lambda: self.eager_forward(x))

    def precision_census(self, x) -> dict[str, set[str]]:
        """The census of one eager forward pass, under no_grad rather than inference_mode: in inference mode a
        dispatch mode sees the composite operations (aten.linear, aten.layer_norm) that the census does not
        class, and saw nothing here; without gradients the same kernels run, as their ATen operations."""
        def forward():
            with torch.no_grad():
                return self.eager_net(x)

        return census.forward_census(forward)

    def compilations(self) -> int:
        return compiles.count()

    def to_numpy(self, out) -> np.ndarray:
        # Copied to the host in the forward pass's dtype, then cast there (the precision policy's words).
        return out.detach().cpu().float().numpy()
