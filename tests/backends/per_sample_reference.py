"""Per-example gradients one example at a time, in each framework: the references the vectorised per-sample
gradients of the backends are checked against. Test code only; imported by the probes inside a framework's
environment, so each function imports its own framework."""

from __future__ import annotations


def jax_per_sample_grads_loop(module, params, x, y):
    import jax
    import jax.numpy as jnp

    from jax_backend import steps

    one = jax.jit(jax.grad(steps.example_loss(module)))
    grads = [one(params, x[i], y[i]) for i in range(x.shape[0])]
    return jax.tree.map(lambda *g: jnp.stack(g), *grads)


def torch_per_sample_grads_loop(model, params: dict, x, y) -> dict:
    import torch
    from torch.func import grad

    from torch_backend import per_sample

    one = grad(per_sample.example_loss(model))
    grads = [one(params, x[i], y[i]) for i in range(x.shape[0])]
    return {name: torch.stack([g[name] for g in grads]) for name in params}
