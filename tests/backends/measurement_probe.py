"""Run inside one framework's environment: the timing contract against the backend's own synchronize and
compilation counter. Prints one JSON object as its last line.

    python tests/backends/measurement_probe.py sync            (JAX env)
    python tests/backends/measurement_probe.py recompile jax   (JAX env)
    python tests/backends/measurement_probe.py recompile torch (PyTorch env)
"""

from __future__ import annotations

import json
import sys
import time

from bench_contract.measure.timing import StepTimer


def sync_probe() -> dict:
    """The same asynchronous JAX computation timed with the backend's synchronize and with none.

    The device runs queued computations one after another, so the honest timer's steps add up to the wall
    time until all of the work has finished; a timer that stops at dispatch records far less than that."""
    import jax
    import jax.numpy as jnp

    from jax_backend.sync import synchronize

    x = jnp.ones((1000, 1000), jnp.float32)

    @jax.jit
    def work(x):
        return jax.lax.fori_loop(0, 5, lambda i, y: jnp.tanh(y @ x / 1000.0), x)

    jax.block_until_ready(work(x))  # compiled before anything is timed
    backend_sync = synchronize  # the backend's one synchronize, which every JAX ops class calls
    result = {}
    for name, sync in (("backend", backend_sync), ("none", lambda out: None)):
        timer = StepTimer(sync, warmup_steps=0)
        outs = []
        start = time.perf_counter()
        for _ in range(3):
            outs.append(timer.run(lambda: work(x)))
        jax.block_until_ready(outs)
        result[name] = {"timed_s": sum(timer.times_s), "wall_until_done_s": time.perf_counter() - start}
    return result


def recompile_probe(framework: str) -> dict:
    """A function timed on one input shape, then on a changed shape: the counter must see the second compile."""
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        from jax_backend import compiles

        fn = jax.jit(lambda x: jnp.tanh(x).sum())
        make, sync, count = (lambda n: jnp.ones((n,), jnp.float32)), jax.block_until_ready, compiles.count
    else:
        import torch

        from torch_backend import compiles

        # The eager backend: Dynamo captures and guards exactly as with inductor, without inductor's code
        # generation (tens of seconds on this machine). The counter is Dynamo's either way.
        fn = torch.compile(lambda x: torch.tanh(x).sum(), backend="eager", dynamic=False)
        make, sync, count = (lambda n: torch.ones(n)), (lambda out: None), compiles.count
    counts = {}
    for name, shapes in (("same_shape", [8, 8, 8, 8]), ("changed_shape", [16, 16, 32, 32])):
        timer = StepTimer(sync, warmup_steps=1, compilations=count)  # the first shape compiles in warm-up
        for n in shapes:
            x = make(n)  # making the input may compile too, but outside the timed step: not counted
            timer.run(lambda: fn(x))
        counts[name] = timer.recompilations
    return counts


if __name__ == "__main__":
    command = sys.argv[1]
    out = sync_probe() if command == "sync" else recompile_probe(sys.argv[2])
    print(json.dumps(out))
