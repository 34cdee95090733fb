"""Use case 2's sharded state in PyTorch (`--parallelism fsdp`): FSDP2's `fully_shard` over a one-axis device mesh
of every process, each transformer block a unit of its own, the embeddings and final norm in the root's unit; the
optimizer then holds only this device's shard of each parameter's state. Each unit's parameters are all-gathered
once a step, just before its forward pass, kept for its backward pass (`reshard_after_forward=False`) and freed after
it, when its gradients are reduce-scattered: the data flow of JAX's compiled FSDP step (jax_backend.parallel), where
XLA gathers each parameter once. FSDP2's default would all-gather every block again for its backward pass: three
passes over the blocks' parameters a step (two gathers, one reduce-scatter) against JAX's two. The replicated
layout (`ddp`) is DistributedDataParallel (torch_backend.run)."""

from __future__ import annotations

import sys

import torch
from torch import nn

# FSDP2 and DTensor are imported where a model is sharded, not with the backend: importing them takes 0.6 s of
# every PyTorch process's start here, and a replicated run never needs them. Until they are imported, no module
# can be an FSDPModule nor a tensor a DTensor, which is how state_bytes knows it has nothing to reshard or unwrap.
FSDP_MODULE, DTENSOR_MODULE = "torch.distributed.fsdp", "torch.distributed.tensor"


def fully_sharded(model: nn.Module, device: torch.device, world_size: int) -> nn.Module:
    """The model with its parameters sharded over the world's devices (in place; fully_shard returns the module)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world_size,))
    for block in getattr(model, "blocks", ()):  # the language model's transformer blocks (torch_backend.language)
        fully_shard(block, mesh=mesh, reshard_after_forward=False)
    return fully_shard(model, mesh=mesh, reshard_after_forward=False)


def local_bytes(tensor: torch.Tensor) -> int:
    """The bytes this device holds of a tensor: its shard for a sharded (DTensor) one, all of it otherwise."""
    dtensor = sys.modules.get(DTENSOR_MODULE)
    local = tensor.to_local() if dtensor is not None and isinstance(tensor, dtensor.DTensor) else tensor
    return local.numel() * local.element_size()


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The parameters and optimizer state this device holds between steps, in bytes (gradients and activations left
    out). FSDP2 keeps every unit's parameters gathered after a forward pass without a backward (an evaluation),
    registered whole until the next step reshards them: they are resharded first, as every training step leaves
    them."""
    fsdp = sys.modules.get(FSDP_MODULE)
    for module in model.modules() if fsdp is not None else ():
        if isinstance(module, fsdp.FSDPModule):
            module.reshard()
    params = sum(local_bytes(p) for p in model.parameters())
    states = sum(local_bytes(value) for state in optimizer.state.values() for value in state.values()
                 if isinstance(value, torch.Tensor) and value.dim() > 0)
    return params + states
