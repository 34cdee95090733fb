"""DP-SGD in PyTorch with torch.func: per-example gradients with `vmap(grad)` over `functional_call`,
each clipped to norm C, summed, noised, applied by the optimizer.

Across processes (use case 4) each rank computes the clipped per-example gradients of its shard, the sums
are added with one all_reduce, and every rank draws the same noise from a generator seeded alike, so the
parameters stay identical on every rank without a broadcast. DistributedDataParallel is not used here:
its hooks average the gradients of `backward()`, and per-sample gradients do not come from `backward()`.
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from bench_contract.run.sampling import PAD_LABEL
from bench_contract.spec import CLIP_EPSILON
from torch_backend import compiles
from torch_backend.sync import batch_to_device, synchronize


def example_loss(model: nn.Module, label_smoothing: float = 0.0):
    """The loss of one example (no batch axis) as a function of a dict of parameters: the cross-entropy, against
    the label smoothed towards the uniform distribution by label_smoothing (torch_backend.run.mean_cross_entropy)."""

    def loss(params, x, y):
        logits = functional_call(model, params, (x.unsqueeze(0),))
        return F.cross_entropy(logits, y.unsqueeze(0), label_smoothing=label_smoothing)

    return loss


def per_sample_grads(model: nn.Module, params: dict, x: torch.Tensor, y: torch.Tensor, label_smoothing: float = 0.0):
    """(gradients with a leading batch axis, per-example losses). `model` is a vmap_twin: vmap computes group
    norm differently from the module outside it (VmapGroupNorm)."""
    return vmap(grad_and_value(example_loss(model, label_smoothing)), in_dims=(None, 0, 0))(params, x, y)


class VmapGroupNorm(nn.GroupNorm):
    """Group norm that returns under vmap the dtype it returns outside. vmap's rule for group norm normalises without
    weight and bias and applies them after, as operations of their own: under CPU autocast, a bfloat16 input's
    output is promoted to float32 there by the float32 weight, where group norm outside vmap (PyTorch's training
    step, Opacus's, and JAX's under the same policy) returns bfloat16; a GroupNorm ResNet's residual stream then ran
    in float32 in DP-SGD with torch.func alone (issue 29). Here the affine is applied as the rule does, in float32,
    and the result is returned in the normalisation's dtype: its input's, or float32 where autocast lists group norm
    (CUDA). A type of its own, so that Opacus, which picks its per-sample rule by a layer's exact type, never sees it:
    only the twin that vmap runs has it (vmap_twin)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.group_norm(x, self.num_groups, eps=self.eps)
        if not self.affine:
            return normed
        shape = (-1,) + (1,) * (normed.ndim - 2)  # one weight per channel, over the spatial axes
        return (normed * self.weight.view(shape) + self.bias.view(shape)).to(normed.dtype)


def vmap_twin(model: nn.Module) -> nn.Module:
    """The model as vmap runs it: the same modules, sharing its parameters and buffers (no copy of any tensor), with
    each nn.GroupNorm a VmapGroupNorm. functional_call puts the parameters in by name, so they stay the model's."""
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    twin = copy.deepcopy(model, memo=shared)
    for module in twin.modules():
        if type(module) is nn.GroupNorm:
            module.__class__ = VmapGroupNorm  # the same state; only forward differs
    return twin


def clip_factors(grads: dict, clip_norm: float) -> torch.Tensor:
    """Per-example min(1, C / (||g_i|| + eps)), the norm taken over all parameters together."""
    squares = sum(g.flatten(1).pow(2).sum(1) for g in grads.values())
    return (clip_norm / (squares.sqrt() + CLIP_EPSILON)).clamp(max=1.0)


def clipped_sum(grads: dict, clip_norm: float) -> dict:
    factors = clip_factors(grads, clip_norm)
    return {name: torch.tensordot(factors, g, dims=1) for name, g in grads.items()}


def clip_one(grad_one: dict, clip_norm: float) -> dict:
    """One example's gradient (no batch axis) scaled to norm at most C, as in the naive per-example loop."""
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grad_one.values()))
    factor = (clip_norm / (norm + CLIP_EPSILON)).clamp(max=1.0)
    return {name: g * factor for name, g in grad_one.items()}


def detached_params(model: nn.Module) -> dict:
    return {name: p.detach() for name, p in model.named_parameters()}


class DPSGDUpdate:
    """One DP-SGD update of `model` in place; returns the mean loss of the global batch (before the update).

    The noised sum is divided by expected_batch_size, the B of the spec: under Poisson sampling the expected size
    q*N of a batch whose drawn size varies (bench_contract.run.sampling), as JAX's step divides; None divides by
    the size of each global batch as given, which is B only for fixed-size (shuffled) batches. A batch may be
    empty, and under Poisson sampling the ranks' shares may differ by one example (sampling.rank_batch)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device, *,
                 clip_norm: float, noise_multiplier: float, seed: int, world_size: int,
                 expected_batch_size: int | None = None, label_smoothing: float = 0.0) -> None:
        self.model, self.optimizer, self.device = model, optimizer, device
        self.clip_norm, self.noise_multiplier, self.world_size = clip_norm, noise_multiplier, world_size
        self.expected_batch_size, self.label_smoothing = expected_batch_size, label_smoothing
        # Seeded alike on every rank: the same noise everywhere keeps the replicas identical.
        self.generator = torch.Generator(device=device).manual_seed(seed)
        # Made here, not at its first use: inside a compiled step Dynamo would trace the copy.
        self.vmapped = vmap_twin(model)

    def per_example(self, x: torch.Tensor, y: torch.Tensor) -> tuple[dict, torch.Tensor]:
        """(per-example gradients with a leading batch axis, per-example losses): the engine's part of the update
        (torch.func here; torch_backend.opacus_engine computes it with Opacus), the rest is shared."""
        return per_sample_grads(self.vmapped, detached_params(self.model), x, y, self.label_smoothing)

    def clipped_sum_and_loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[dict, torch.Tensor, torch.Tensor]:
        """(this process's sum of clipped per-example gradients, the sum of its examples' losses, their count).
        Examples labelled PAD_LABEL are padding (a Poisson batch padded to the one shape a compiled step takes,
        bench_contract.run.sampling): no loss, no gradient, not counted, as in JAX's step (jax_backend.steps)."""
        real = y != PAD_LABEL
        grads, losses = self.per_example(x, torch.where(real, y, 0))
        # A padding example's gradient may be NaN (an all-padding sequence attends to nothing), and a zero factor
        # times NaN is NaN: it is replaced by zeros, not scaled away.
        grads = {name: torch.where(real.view(-1, *(1,) * (g.ndim - 1)), g, 0.0) for name, g in grads.items()}
        factors = torch.where(real, clip_factors(grads, self.clip_norm), 0.0)
        summed = {name: torch.tensordot(factors, g, dims=1) for name, g in grads.items()}
        return summed, torch.where(real, losses, 0.0).sum(), real.sum().to(losses.dtype)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # The loss summed over this rank's real examples and their count (an empty batch adds 0 to both).
        summed, loss_sum, count = self.clipped_sum_and_loss(x, y)
        if self.world_size > 1:
            # One flat all_reduce for all parameters, the loss and the count, rather than one per tensor.
            flat = torch.cat([g.flatten() for g in summed.values()] + [loss_sum.reshape(1), count.reshape(1)])
            dist.all_reduce(flat)
            parts = flat[:-2].split([g.numel() for g in summed.values()])
            summed = {name: part.view_as(g) for (name, g), part in zip(summed.items(), parts)}
            loss_sum, count = flat[-2], flat[-1]
        loss = loss_sum / count.clamp(min=1.0)
        divisor = self.expected_batch_size or x.shape[0] * self.world_size
        stddev = self.noise_multiplier * self.clip_norm
        for name, p in self.model.named_parameters():
            g = summed[name]
            if self.noise_multiplier > 0:
                g = g + stddev * torch.randn(g.shape, generator=self.generator, device=self.device, dtype=g.dtype)
            p.grad = g / divisor
        self.optimizer.step()
        return loss.detach()


class TorchPerSampleOps:
    """Per-sample gradients on this process's device, vectorised and as a naive loop, for timing only."""

    vectorized_compiled = loop_compiled = False  # both eager, whatever the training step ran as

    def __init__(self, model: nn.Module, clip_norm: float, device: torch.device, label_smoothing: float = 0.0) -> None:
        self.model, self.clip_norm, self.device, self.label_smoothing = model, clip_norm, device, label_smoothing
        self.params = detached_params(model)
        self.vmapped = vmap_twin(model)

    def local_batch(self, x: np.ndarray, y: np.ndarray):
        return batch_to_device(x, y, self.device)

    def clipped_sum_vectorized(self, batch):
        x, y = batch
        grads, _ = per_sample_grads(self.vmapped, self.params, x, y, self.label_smoothing)
        return clipped_sum(grads, self.clip_norm)

    def clipped_sum_loop(self, batch):
        # The naive loop as people write it: forward and backward per example, clip, add to the sum in place
        # (a new sum tensor per example cost the loop 5% on the CNN at batch 128: docs/performance.md).
        x, y = batch
        total = {name: torch.zeros_like(p) for name, p in self.params.items()}
        for i in range(x.shape[0]):
            self.model.zero_grad(set_to_none=True)
            F.cross_entropy(self.model(x[i : i + 1]), y[i : i + 1], label_smoothing=self.label_smoothing).backward()
            clipped = clip_one({n: p.grad for n, p in self.model.named_parameters()}, self.clip_norm)
            for name, g in clipped.items():
                total[name] += g
        self.model.zero_grad(set_to_none=True)
        return total

    def synchronize(self, out) -> None:
        synchronize(self.device)

    def compilations(self) -> int:
        return compiles.count()
