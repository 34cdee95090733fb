"""The JAX backend with the mixed policy it had before autocast's, for the test that shows the
certificate catches it: every parameter and the input cast to bfloat16 inside the step, so every layer, the layer
norms and the residual stream included, computes in bfloat16.

Usage: python cast_everything_probe.py SPEC.json (as `python -m jax_backend.run SPEC.json`).
"""

import sys

import jax
import jax.numpy as jnp

from bench_contract.run.runner import main
from jax_backend import mixed
from jax_backend.run import JaxBackend


class CastEverything:
    def __init__(self, module, dtype) -> None:
        self.module, self.dtype = module, dtype

    def apply(self, variables: dict, x, **kwargs):
        def low(a):
            return a.astype(self.dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a

        out = self.module.apply({**variables, "params": jax.tree.map(low, variables["params"])}, low(x), **kwargs)
        if kwargs.get("mutable"):
            logits, mutated = out
            return logits.astype(jnp.float32), mutated
        return out.astype(jnp.float32)


mixed.with_precision = lambda module, precision, on_gpu: CastEverything(module, jnp.bfloat16)

if __name__ == "__main__":
    sys.exit(main(JaxBackend()))
