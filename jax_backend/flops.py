"""FLOPs of a JAX program counted from its jaxpr: the matmuls (dot_general) and convolutions
(conv_general_dilated), 2 per multiply-add, the operations PyTorch's FlopCounterMode counts
(torch_backend.efficiency.counted_flops), so that both frameworks' MFU divide the same kind of work.

Why not XLA's cost analysis: on a GPU it leaves out the cuBLAS and cuDNN custom calls that do the matmuls and
convolutions (ResNet-50 inference on an H200 came out at MFU 0.0027 instead of about 0.42). The jaxpr is the
program before XLA sees it, so its count is the same on every device.

Nested programs are found generically: any equation parameter that is a Jaxpr or ClosedJaxpr, or a tuple or list
of them (jit, custom_jvp/custom_vjp calls, remat, closed_call, shard_map, cond, scan, while, ...). Most are
counted once (a call runs its body once); the primitives below change that:
- scan: its body runs `length` times;
- cond: only one branch runs; the largest branch is counted (an upper bound, noted when the branches differ);
- while: the trip count is not in the jaxpr; body and condition are counted once (noted when they hold FLOPs);
- shard_map: its body is one device's shard of the work, times the devices of the axes it is manual over,
  so the count is the whole step's; pmap likewise, times its axis size.

The count is the model's work, not an implementation's: what an implementation computes a second time to save
memory is traced inside `recomputation()` and left out. The fused attention kernels' backward pass recomputes the
probabilities from q k^T (jax_backend.attention writes that out); PyTorch's count, taken through SDPA's math
backend (torch_backend.efficiency.attention_as_matmuls), keeps them from the forward pass. Counted, the recomputed
q k^T gave JAX's GPT one more matmul per layer than PyTorch (230,686,720 FLOPs a step against 226,492,416).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
from jax.extend.core import ClosedJaxpr, Jaxpr

from jax_backend.census import in_scope

METHOD = ("matmul and convolution FLOPs of the traced jaxpr (dot_general and conv_general_dilated, 2 per "
          "multiply-add: the operations PyTorch's FlopCounterMode counts), not XLA's cost analysis, which on a GPU "
          "leaves out cuBLAS and cuDNN calls")
RECOMPUTATION_SCOPE = "recomputation"  # the named scope of recomputation(): its equations are not counted


def recomputation():
    """The scope to trace a recomputation in (a value of the forward pass computed again in the backward pass):
    the count leaves it out, with every program it calls."""
    return jax.named_scope(RECOMPUTATION_SCOPE)


@dataclass(frozen=True)
class Count:
    flops: int
    caveats: tuple[str, ...] = ()  # where the count is not exact (a while loop's body, cond's largest branch)

    def __add__(self, other: Count) -> Count:
        return Count(self.flops + other.flops, self.caveats + other.caveats)

    def times(self, n: int) -> Count:
        return Count(self.flops * n, self.caveats)


def dot_general_flops(eqn) -> int:
    """2 x prod(output shape) x prod(lhs contracting sizes): each output element is one dot product over the
    contracting dimensions (the batch dimensions are part of the output)."""
    (lhs_contracting, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    return 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in lhs_contracting)


def conv_flops(eqn) -> int:
    """2 x output batch x output features x prod(positions) x prod(kernel spatial) x input features per group.

    Input features per group: the lhs's feature size / feature_group_count, which is the kernel's input-feature
    size; each output feature sees only its group's inputs. (vmap's per-example weight gradients are a convolution
    with one group per example: counting all the lhs's features would count the batch's work batch-size times.)
    batch_group_count needs no factor: it splits the lhs's batch among the output features, and the output's
    batch is already the lhs's / batch_group_count.

    Positions: the output's spatial sizes, except along a dimension with lhs_dilation > 1 (a transposed
    convolution: the input gradient of a strided one), counted at the lhs's undilated size. The zeros between the
    dilated inputs are no work, and PyTorch counts a convolution's input gradient that way (as the forward's
    work, its grad_output's positions); by the output's, a stride-2 convolution's input gradient would count 4
    times its forward's. (An unpadded stride-1 convolution's input gradient, which no model here has, is counted
    by its output, (H + k - 1) / H times more per dimension than PyTorch counts.)"""
    lhs, rhs = (v.aval.shape for v in eqn.invars[:2])
    out = eqn.outvars[0].aval.shape
    dims = eqn.params["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = dims.lhs_spec, dims.rhs_spec, dims.out_spec
    per_group = lhs[lhs_spec[1]] // eqn.params["feature_group_count"]
    positions = [lhs[ld] if dilation > 1 else out[od]
                 for ld, od, dilation in zip(lhs_spec[2:], out_spec[2:], eqn.params["lhs_dilation"])]
    kernel = math.prod(rhs[d] for d in rhs_spec[2:])
    return 2 * out[out_spec[0]] * out[out_spec[1]] * math.prod(positions) * kernel * per_group


COUNTERS = {"dot_general": dot_general_flops, "conv_general_dilated": conv_flops}


def sub_jaxprs(eqn) -> list[tuple[str, Jaxpr]]:
    """(parameter name, Jaxpr) of every program an equation carries in its parameters."""
    found = []
    for name, value in eqn.params.items():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, ClosedJaxpr):
                item = item.jaxpr
            if isinstance(item, Jaxpr):
                found.append((name, item))
    return found


def manual_devices(eqn) -> int:
    """The devices a shard_map's body runs on: the mesh sizes of the axes it makes manual."""
    mesh = eqn.params["mesh"]
    axes = eqn.params.get("newly_manual_axes", eqn.params.get("manual_axes"))
    if axes is None:
        return mesh.size
    return math.prod(dict(mesh.shape)[axis] for axis in axes)


def nested(eqn) -> Count:
    """The count of the programs an equation carries, as many times as they run."""
    name = eqn.primitive.name
    inner = [(param, count(jaxpr)) for param, jaxpr in sub_jaxprs(eqn)]
    if not inner:
        return Count(0)
    if name == "cond":
        largest = max((c for _, c in inner), key=lambda c: c.flops)
        differ = len({c.flops for _, c in inner}) > 1
        caveat = ("a cond's branches differ in FLOPs: its largest branch is counted",) if differ else ()
        return Count(largest.flops, sum((c.caveats for _, c in inner), ()) + caveat)
    total = sum((c for _, c in inner), Count(0))
    if name == "scan":
        return total.times(eqn.params["length"])
    if name == "shard_map":
        return total.times(manual_devices(eqn))
    if name == "xla_pmap":
        return total.times(eqn.params["axis_size"])
    if name == "while" and total.flops:
        return Count(total.flops, total.caveats + ("a while loop's body is counted once (its trip count is not "
                                                   "in the jaxpr)",))
    return total


def count(jaxpr) -> Count:
    """The matmul and convolution FLOPs of a Jaxpr or ClosedJaxpr, nested programs included, recomputations not."""
    jaxpr = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
    total = Count(0)
    for eqn in jaxpr.eqns:
        # A nested program's stacks are relative to the equation that carries it: the scope is found at the level
        # where it was opened, and the programs below it go uncounted with it.
        if in_scope(str(eqn.source_info.name_stack), RECOMPUTATION_SCOPE):
            continue
        counter = COUNTERS.get(eqn.primitive.name)
        if counter is not None:
            total += Count(counter(eqn))
        total += nested(eqn)
    return total


def method(counted: Count) -> str:
    """METHOD, with the caveats of this count (each once)."""
    caveats = dict.fromkeys(counted.caveats)
    return METHOD + "".join(f"; {caveat}" for caveat in caveats)
