"""The harness's training step against a bare hand-written training loop, in one framework's environment.

Run by `bench/harness_overhead.py` as `<framework env>/bin/python -m bench.training_overhead_probe FRAMEWORK MODE
MODEL VARIANT BENCHMARK BATCH TIMED_STEPS WARMUP_STEPS REPEATS [DEVICE]`, MODE `jit` (JAX), `eager` or
`compiled` (PyTorch), DEVICE cpu (the default) or gpu, with the repository on PYTHONPATH. Like
`bench/overhead_probe.py` (whose marker and output it shares) it imports only that framework's backend and the
contract, prints progress to stderr and, as its last stdout line, the per-run step-time medians of both loops.

Both loops run in this one process on the same device set-up (`backend.prepare`), the same model and optimizer
(the backend's `training_ops` for use case 1 from the contract's initial weights: sgd, fp32, the spec's learning
rate) and the same batch size, and alternate harness, bare, harness, bare ... so drift on a shared machine falls
on both:
- harness: `run_training` over the backend's training ops with the cell's efficiency meter, exactly as a cell
  runs use case 1 (one epoch of WARMUP + TIMED steps of synthetic data); its recorded `step_time_p50`.
- bare: the training step as a user writes it by hand, timed with perf_counter, on the harness's batches in its
  order, each moved to the device before its clock starts; the median of those times. JAX: a `jax.jit` (state
  donated, as the harness's) of value_and_grad, the optax update and apply_updates on the backend's flax module
  and optax optimizer, then `loss.block_until_ready()`. PyTorch: zero_grad, cross_entropy, backward and the
  optimizer's step on the backend's network and torch.optim optimizer (plus `torch.cuda.synchronize` on a GPU),
  eager, or that function under `torch.compile` for MODE compiled.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from functools import partial

from bench.overhead_probe import MARKER, backend_for

MODES = {"jax": ("jit",), "torch": ("eager", "compiled")}


def synthetic_samples_for(steps: int, batch: int) -> int:
    """A synthetic data set whose training split (eight tenths: loading.synthetic_dataset) holds `steps` batches."""
    return steps * batch * 5 // 4 + 10


def jax_bare_loop(ops, optimizer, batches):
    """A hand-written JAX training loop over batches(i), the i-th batch on the device: run(steps, warmup) ->
    per-step seconds."""
    import jax
    import jax.numpy as jnp
    import optax

    module = ops.module

    def loss_fn(params, batch_stats, x, y):
        # Batch norm (resnet50, the GPU check's model) as Flax's examples train it: batch statistics, updated.
        if batch_stats:
            logits, updated = module.apply({"params": params, "batch_stats": batch_stats}, x, train=True,
                                           mutable=["batch_stats"])
            batch_stats = updated["batch_stats"]
        else:
            logits = module.apply({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), batch_stats

    @partial(jax.jit, donate_argnums=(0, 1, 2))  # the state updated in place, as the harness's step does
    def step(params, batch_stats, opt_state, x, y):
        (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch_stats, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), batch_stats, opt_state, loss

    # Its own copies: the harness's step donates (deletes) its state.
    params, batch_stats = (jax.tree.map(jnp.copy, tree) for tree in (ops.params, ops.batch_stats))
    state = {"params": params, "batch_stats": batch_stats, "opt_state": optimizer.init(params)}

    def run(steps: int, warmup: int) -> list[float]:
        params, batch_stats, opt_state, times = state["params"], state["batch_stats"], state["opt_state"], []
        for i in range(warmup + steps):
            x, y = batches(i)
            start = time.perf_counter()
            params, batch_stats, opt_state, loss = step(params, batch_stats, opt_state, x, y)
            loss.block_until_ready()
            if i >= warmup:
                times.append(time.perf_counter() - start)
        state.update(params=params, batch_stats=batch_stats, opt_state=opt_state)
        return times

    return run


def torch_bare_loop(ops, batches, compiled: bool):
    """A hand-written PyTorch training loop over batches(i), eager or under torch.compile: run(steps, warmup) ->
    per-step seconds."""
    import torch
    import torch.nn.functional as F

    net, optimizer, cuda = ops.model, ops.optimizer, ops.device.type == "cuda"

    def train_step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    step = torch.compile(train_step) if compiled else train_step

    def run(steps: int, warmup: int) -> list[float]:
        times = []
        for i in range(warmup + steps):
            x, y = batches(i)
            start = time.perf_counter()
            step(x, y)
            if cuda:
                torch.cuda.synchronize(ops.device)
            if i >= warmup:
                times.append(time.perf_counter() - start)
        return times

    return run


def main(argv: list[str]) -> int:
    framework, mode, model, variant, benchmark = argv[:5]
    batch, timed_steps, warmup, repeats = (int(a) for a in argv[5:9])
    device = argv[9] if len(argv) > 9 else "cpu"
    if mode not in MODES.get(framework, ()):
        raise ValueError(f"mode {mode!r} is not one of {framework}'s: {', '.join(MODES.get(framework, ()))}")
    from bench_contract.data.datasets import epoch_batches
    from bench_contract.data.loading import load_dataset
    from bench_contract.models.weights import make_initial_weights
    from bench_contract.results import CONTEXT_NAMES, ResultRows
    from bench_contract.run.training import run_training
    from bench_contract.spec import JobSpec

    spec = JobSpec(campaign="bench", cell_id=f"training-overhead-{framework}-{mode}", pair_key="training-overhead",
                   framework=framework, benchmark=benchmark, use_case=1, model=model, batch_size=batch,
                   precision="fp32", device=device, data_source="synthetic", model_variant=variant,
                   synthetic_samples=synthetic_samples_for(warmup + timed_steps, batch), timed_steps=timed_steps,
                   warmup_steps=warmup, torch_compile=mode == "compiled")
    backend = backend_for(framework)
    setup = backend.prepare(spec)
    data = load_dataset(benchmark, "synthetic", synthetic_samples=spec.synthetic_samples, variant=variant)
    weights = make_initial_weights(backend.param_specs(model, data.sample_shape, data.num_classes, variant), spec.seed)
    ops = backend.training_ops(spec, data, weights, ResultRows({name: None for name in CONTEXT_NAMES}))
    efficiency = backend.efficiency(spec)
    order = epoch_batches(len(data.x_train), batch, spec.seed, 0)

    def batches(i: int):
        """The harness's batches in its order, each moved to the device before the clock starts, as a training
        loop feeds them: a new batch evicts part of the model's state from the caches, which costs the next step
        2 to 3% on this MLP (docs/performance.md), so one batch used again and again would flatter the bare loop."""
        idx = order[i % len(order)]
        return ops.to_device(data.x_train[idx], data.y_train[idx])

    if framework == "jax":
        from jax_backend.optim import build_optimizer

        bare = jax_bare_loop(ops, build_optimizer(spec), batches)
    else:
        bare = torch_bare_loop(ops, batches, compiled=mode == "compiled")
    harness_ms, bare_ms = [], []
    for r in range(repeats):
        rows = ResultRows({name: None for name in CONTEXT_NAMES})
        run_training(spec, data, ops, rows, efficiency=efficiency)
        harness_ms.append(next(row["value"] for row in rows.rows if row["metric"] == "step_time_p50"))
        bare_ms.append(statistics.median(bare(timed_steps, warmup)) * 1e3)
        print(f"{framework} {mode} run {r + 1}/{repeats}: harness {harness_ms[-1]:.3f} ms, bare {bare_ms[-1]:.3f} ms",
              file=sys.stderr, flush=True)
    print(MARKER + json.dumps({"framework": framework, "mode": mode, "path": "run_training", "model": model,
                               "variant": variant, "batch_size": batch, "timed_steps": timed_steps,
                               "device": setup.kind, "version": setup.framework_version, "harness_ms": harness_ms,
                               "bare_ms": bare_ms}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
