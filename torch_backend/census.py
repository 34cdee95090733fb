"""The precision census of a PyTorch step or forward pass (bench_contract.run.census), from the ATen operations it
dispatched: what autocast actually did (its casts happen before dispatch), not what the policy's words claim.

Each operation is classed by its ATen name:
- matmul: mm, addmm, bmm, baddbmm, convolution and their backward: their first operand's dtype;
- normalisation: native layer, group and batch norm, forward: their output's dtype;
- softmax: _softmax: its input's dtype (it computes in it); SDPA's fused kernels count as a matmul in their inputs'
  dtype and a softmax in their accumulation type (float32 for half inputs), and the fused attention of
  nn.MultiheadAttention's inference fast path as a matmul and a softmax in its inputs' dtype;
- residual stream: add and add_ of two tensors of one shape, run by a residual block itself (RESIDUAL_BLOCKS),
  not by a module inside it: their output's dtype (the modules running are followed with global forward hooks
  while the census is taken);
- loss: _log_softmax and nll_loss: their input's dtype;
- optimizer update: every floating-point result between the optimizer step's pre- and post-hooks (for a
  multi-tensor in-place operation, which returns nothing, the tensors it updates).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

MATMULS = {"mm", "addmm", "bmm", "baddbmm", "convolution", "convolution_backward", "_convolution"}
NORMS = {"native_layer_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
         "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional"}
LOSSES = {"_log_softmax", "nll_loss_forward", "nll_loss2d_forward"}
# nn.MultiheadAttention's fast path in eval mode without gradients (inference): projections, softmax and the
# weighted sum in one operation, computed in its inputs' dtype; the ViT's inference census saw no softmax without it.
FUSED_ATTENTION = {"_native_multi_head_attention"}
# SDPA's fused kernels (flash, memory-efficient, cuDNN; the CPU's flash kernel): the scores accumulate, and the softmax
# runs, in the accumulation type, float32 for bfloat16 and float16 inputs (at::opmath_type; FlashAttentionKernel.cpp's
# accum_t); their matmuls take the inputs' dtype (the probabilities and the scores' gradient are cast back to it).
# The math reference is not fused: it decomposes into the operations it runs, each classed on its own.
FUSED_SDPA_PREFIX, SDPA_MATH = "_scaled_dot_product", "_scaled_dot_product_attention_math"
HALF_TYPES = {"bfloat16", "float16"}
# The blocks whose own additions are residual connections, by module and class name (importing torchvision here
# would cost every process its 1.2 s import): the transformers' encoder layers, the ResNets' blocks, MobileNet's and
# EfficientNet's inverted residuals. JAX marks the same additions with autocast.residual.
RESIDUAL_BLOCKS = {("torchvision.models.vision_transformer", "EncoderBlock"),
                   ("torchvision.models.resnet", "BasicBlock"), ("torchvision.models.resnet", "Bottleneck"),
                   ("torchvision.models.mobilenetv3", "InvertedResidual"),
                   ("torchvision.models.efficientnet", "MBConv"), ("torch_backend.text", "EncoderLayer"),
                   ("torch_backend.language", "Block")}
ADDITIONS = {"add", "add_"}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def float_dtypes(values) -> set[str]:
    return {dtype_name(t.dtype) for t in tree_leaves(values) if isinstance(t, torch.Tensor) and t.is_floating_point()}


def same_shape(operands) -> bool:
    """Whether an addition's two operands are tensors of one shape, as a residual connection's are: a bias added in
    the block's own code (F.linear decomposed under vmap into a matmul and an add) is broadcast, and left out."""
    return (len(operands) == 2 and all(isinstance(t, torch.Tensor) for t in operands)
            and operands[0].shape == operands[1].shape)


class Census(TorchDispatchMode):
    """Records, while active, the dtypes of each class of operation (`found`)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, set[str]] = {}
        self.in_update = False
        self.modules: list[type] = []  # the classes of the modules running, innermost last

    def __enter__(self):
        self.hooks = [torch.nn.modules.module.register_module_forward_pre_hook(self.entering_module),
                      torch.nn.modules.module.register_module_forward_hook(self.leaving_module)]
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()
        return super().__exit__(*exc)

    def entering_module(self, module, _inputs) -> None:
        self.modules.append(type(module))

    def leaving_module(self, _module, _inputs, _output) -> None:
        self.modules.pop()

    def in_residual_block(self) -> bool:
        # By the class and its bases: FSDP2's fully_shard swaps a block's class for a subclass made on the fly
        # (FSDPBlock), which the sharded language model's census would otherwise not know.
        return bool(self.modules) and any((cls.__module__, cls.__qualname__) in RESIDUAL_BLOCKS
                                          for cls in self.modules[-1].__mro__)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        first = float_dtypes(args[:1])
        if self.in_update:
            # An in-place update returns its target; the multi-tensor ones (_foreach_add_, what optimizers run on
            # CUDA by default) return nothing, and their targets are their first argument. On the H200 every
            # training row read "optimizer update float32 in JAX, none in PyTorch" for want of this.
            self.add("optimizer update", float_dtypes(out) or float_dtypes(args[:1]))
        elif name in ADDITIONS and self.in_residual_block() and same_shape(args[:2]):
            self.add("residual stream", float_dtypes(out))
        elif name in MATMULS:
            self.add("matmul", first)
        elif name.startswith(FUSED_SDPA_PREFIX) and name != SDPA_MATH:
            self.add("matmul", first)
            self.add("softmax", {"float32" if dtype in HALF_TYPES else dtype for dtype in first})
        elif name in FUSED_ATTENTION or name == SDPA_MATH:
            self.add("matmul", first)
            self.add("softmax", first)
        elif name in NORMS:
            self.add("normalisation", float_dtypes(out[0] if isinstance(out, (tuple, list)) else out))
        elif name == "_softmax":
            self.add("softmax", first)
        elif name in LOSSES:
            self.add("loss", first)
        return out

    def add(self, cls: str, dtypes: set[str]) -> None:
        if dtypes:
            self.found.setdefault(cls, set()).update(dtypes)


def step_census(step: Callable[[], object], optimizer: torch.optim.Optimizer) -> dict[str, set[str]]:
    """The census of one call of `step` (a whole training step), whose update is optimizer.step()."""
    census = Census()

    def entering(*_):
        census.in_update = True

    def leaving(*_):
        census.in_update = False

    hooks = [optimizer.register_step_pre_hook(entering), optimizer.register_step_post_hook(leaving)]
    try:
        with census:
            step()
    finally:
        for hook in hooks:
            hook.remove()
    return census.found


def forward_census(forward: Callable[[], object]) -> dict[str, set[str]]:
    """The census of one call of `forward` (an inference forward pass: no loss, no update)."""
    census = Census()
    with census:
        forward()
    return census.found
