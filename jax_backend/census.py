"""The precision census of a JAX step (bench_contract.run.census), read from the jaxpr the step was traced to:
the program XLA compiles, so what it says is what ran, not what the policy's words claim.

Each equation is classed by its primitive and by the name stack it carries (the Flax module path, and the named
scopes the steps put around the loss and the optimizer's update, LOSS_SCOPE and UPDATE_SCOPE):
- matmul: dot_general and conv_general_dilated, forward and backward: their first operand's dtype;
- normalisation: the last equation of each forward module scope that computes an rsqrt (layer, group and batch
  norm take rsqrt(variance + epsilon); the modules carry PyTorch's names, "blocks.0.ln_1", not their class's): its
  output's dtype;
- softmax: exp outside the loss and outside GELU's derivative (the models' other exponentials are their attention's
  softmax): its dtype;
- residual stream: the forward additions of the residual connections (autocast.residual's scope): their output's
  dtype;
- loss and optimizer update: every floating-point result inside their scopes.
"""

from __future__ import annotations

import re

import jax.numpy as jnp
import numpy as np

from jax_backend.autocast import RESIDUAL_SCOPE
from jax_backend.steps import LOSS_SCOPE, UPDATE_SCOPE

MATMULS = ("dot_general", "conv_general_dilated")
# Name-stack frames of a transformation: "jvp(M)", "transpose(jvp(loss))", "vmap(...)": the scope is inside.
BACKWARD = "transpose("


def in_scope(stack: str, scope: str) -> bool:
    """Whether a name stack is inside the named scope, through any transformation's frame around it."""
    return re.search(rf"(^|[/(]){re.escape(scope)}($|[/)])", stack) is not None


def equations(jaxpr, prefix: str = ""):
    """(equation, its full name stack) of a jaxpr and of every jaxpr nested in its equations (jit, custom_jvp,
    scan, cond, shard_map, ...), whose stacks are relative to the equation that holds them."""
    for eqn in jaxpr.eqns:
        stack = prefix + str(eqn.source_info.name_stack)
        yield eqn, stack
        for param in eqn.params.values():
            for inner in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr holds its Jaxpr
                if hasattr(inner, "eqns"):
                    yield from equations(inner, stack + "/" if stack else "")


# Functions whose exponentials are not a softmax's: exact GELU's derivative, exp(-x^2/2) (PyTorch runs it inside
# gelu_backward, which its census does not class). Counted as softmax, the ViT's bf16 GELU gave JAX a bfloat16
# "softmax" beside its attention's float32 one.
NOT_SOFTMAX = ("gelu",)


def traced_in(eqn, functions: tuple[str, ...]) -> bool:
    """Whether the equation was traced inside a call of one of these Python functions (its traceback's frames)."""
    traceback = eqn.source_info.traceback
    return traceback is not None and any(frame.function_name in functions for frame in traceback.frames)


def float_dtypes(variables) -> set[str]:
    # jnp's issubdtype: numpy's does not count bfloat16 (an ml_dtypes type) as floating.
    dtypes = {np.dtype(v.aval.dtype) for v in variables if hasattr(v.aval, "dtype")}
    return {d.name for d in dtypes if jnp.issubdtype(d, jnp.floating)}


def census(closed_jaxpr) -> dict[str, set[str]]:
    """The census of a traced step (jax.jit(step).trace(...).jaxpr)."""
    found: dict[str, set[str]] = {}
    listed = list(equations(closed_jaxpr.jaxpr))
    norm_scopes = {stack for eqn, stack in listed if eqn.primitive.name == "rsqrt" and BACKWARD not in stack
                   and not in_scope(stack, UPDATE_SCOPE) and not in_scope(stack, LOSS_SCOPE)}
    norm_outputs: dict[str, set[str]] = {}  # forward norm scope -> its last equation's output dtypes
    for eqn, stack in listed:
        name = eqn.primitive.name
        if in_scope(stack, UPDATE_SCOPE):
            found.setdefault("optimizer update", set()).update(float_dtypes(eqn.outvars))
        elif in_scope(stack, LOSS_SCOPE):
            if name != "convert_element_type":  # the cast into the loss is the loss's input, not its arithmetic
                found.setdefault("loss", set()).update(float_dtypes(eqn.outvars))
        elif name == "add" and in_scope(stack, RESIDUAL_SCOPE) and BACKWARD not in stack:
            found.setdefault("residual stream", set()).update(float_dtypes(eqn.outvars))
        elif name in MATMULS:
            found.setdefault("matmul", set()).update(float_dtypes(eqn.invars[:1]))
        elif name == "exp" and not traced_in(eqn, NOT_SOFTMAX):
            found.setdefault("softmax", set()).update(float_dtypes(eqn.outvars))
        elif stack in norm_scopes:
            norm_outputs[stack] = float_dtypes(eqn.outvars)
    for dtypes in norm_outputs.values():
        found.setdefault("normalisation", set()).update(dtypes)
    return {cls: dtypes for cls, dtypes in found.items() if dtypes}
