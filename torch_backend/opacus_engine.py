"""DP-SGD with Opacus as PyTorch's second engine (`--dp-engine opacus`): Opacus computes the per-example gradients,
everything else is DPSGDUpdate's, so the two engines differ in that part alone.

Opacus's GradSampleModule fills `p.grad_sample` (one gradient per example) during `backward()`, in the
grad_sample_mode the contract names for the model and precision (bench_contract.spec.opacus_grad_sample_mode:
expanded weights where they run, else hooks; hooks under bf16). The clipping is this project's `clip_factors`
(min(1, C / (||g|| + 1e-6)), the norm over all parameters together), which is the formula of Opacus's own
DPOptimizer.clip_and_accumulate, term for term.
Not used from Opacus: its data loader and sampler (the batch is the one run_training draws for both frameworks),
DPOptimizer's noise (drawn by DPSGDUpdate from the generator seeded alike on every rank) and its accountant.
With several processes (use case 4) the clipped sums are all-reduced by DPSGDUpdate, as with torch.func.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench_contract.spec import opacus_grad_sample_mode, opacus_refusal
from torch_backend.per_sample import DPSGDUpdate, TorchPerSampleOps, clipped_sum


def grad_sample_module(model: nn.Module, mode: str):
    """Opacus's wrapper of `model` in `mode`. loss_reduction="sum": p.grad_sample is then each example's own
    gradient, unscaled, as torch.func's per_sample_grads gives it. Opacus is imported here: only the cells that run
    this engine pay for its import."""
    from opacus import GradSampleModule
    from opacus.grad_sample.gsm_exp_weights import GradSampleModuleExpandedWeights

    if mode == "ew":
        return GradSampleModuleExpandedWeights(model, batch_first=True, loss_reduction="sum")
    if mode == "hooks":
        wrapped = GradSampleModule(model, batch_first=True, loss_reduction="sum")
        # The hooks capture activations on every forward pass of the network's layers; on only while this engine
        # runs, so evaluation, the per-example loop and the FLOP count see the plain network.
        wrapped.disable_hooks()
        return wrapped
    raise ValueError(f"Opacus grad_sample_mode {mode!r} is not one this engine runs (ew, hooks)")


def opacus_mode(model_name: str, precision: str = "fp32") -> str:
    """The grad_sample_mode the contract names for this model and precision (refused at plan time for the others)."""
    refusal = opacus_refusal(model_name, precision)
    if refusal:
        raise ValueError(refusal)
    return opacus_grad_sample_mode(model_name, precision)


class OpacusPerSampleGrads:
    """Per-example gradients and losses of a batch through Opacus, in PyTorch's parameter names."""

    def __init__(self, model: nn.Module, mode: str, label_smoothing: float = 0.0) -> None:
        self.model, self.mode, self.label_smoothing = model, mode, label_smoothing
        self.wrapped = grad_sample_module(model, mode)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[dict, torch.Tensor]:
        if not x.shape[0]:  # a Poisson batch may be empty: no example, no gradient (Opacus's modules need one)
            return ({name: p.new_zeros((0, *p.shape)) for name, p in self.model.named_parameters()},
                    x.new_zeros(0, dtype=torch.float32))
        for p in self.model.parameters():
            p.grad_sample = None
        if self.mode == "hooks":
            self.wrapped.enable_hooks()
        try:
            losses = F.cross_entropy(self.wrapped(x), y, reduction="none", label_smoothing=self.label_smoothing)
            losses.sum().backward()
        finally:
            if self.mode == "hooks":
                self.wrapped.disable_hooks()
        # In the parameters' dtype, as Opacus's DPOptimizer takes them (under autocast they may come lower).
        grads = {name: p.grad_sample.to(p.dtype) for name, p in self.model.named_parameters()}
        return grads, losses.detach()


class OpacusDPSGDUpdate(DPSGDUpdate):
    """DPSGDUpdate with Opacus's per-example gradients: the same clipping, all_reduce, noise, normalisation and step."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device, *, mode: str,
                 **update_options) -> None:
        super().__init__(model, optimizer, device, **update_options)  # DPSGDUpdate's own options, passed as given
        self.per_sample_grads = OpacusPerSampleGrads(model, mode, self.label_smoothing)

    def per_example(self, x: torch.Tensor, y: torch.Tensor) -> tuple[dict, torch.Tensor]:
        return self.per_sample_grads(x, y)


class OpacusPerSampleOps(TorchPerSampleOps):
    """The vectorisation timing with Opacus as the vectorised side: its clipped sum against the same per-example loop."""

    def __init__(self, update: OpacusDPSGDUpdate, clip_norm: float, device: torch.device) -> None:
        super().__init__(update.model, clip_norm, device, update.label_smoothing)
        self.per_sample_grads = update.per_sample_grads

    def clipped_sum_vectorized(self, batch):
        grads, _ = self.per_sample_grads(*batch)
        return clipped_sum(grads, self.clip_norm)
