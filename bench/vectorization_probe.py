"""Use case 3's vectorisation speed-up against a hand-written vmap and loop, in one framework's environment.

Run by `bench/vectorization.py` as `<framework env>/bin/python -m bench.vectorization_probe FRAMEWORK BENCHMARK
MODEL VARIANT BATCH TIMED_STEPS REPEATS CLIP_NORM`, with the repository on PYTHONPATH. It imports only that
framework's backend and the contract (never the orchestrator), prints progress to stderr and, as its last
stdout line, `VECTORIZATION_PROBE {json}` with each run's medians of the four timings.

Everything is built as a use-case-3 cell builds it: the CPUs bound when the backend is imported (from
OMP_NUM_THREADS, which the bench sets), `backend.prepare`, the contract's initial weights from the
seed, the model of `backend.training_ops`, the per-sample ops of `backend.per_sample_ops`, synthetic data, fp32.
Each measurement runs the hand-written vmap, ours (vmap, then the loop), the hand-written loop, so that each of
ours runs beside its hand-written twin, and the measurements repeat in this one process, so that drift on a
shared machine falls on both.
- ours: `time_vectorization` exactly as a cell runs it (its default batch, the training batch) and its
  recorded `per_sample_grads_{vectorized,loop}_time_p50`.
- hand-written: plain framework code, written here apart from the backends, on the same weights and the same
  batch already on the device: the sum of the per-example gradients each clipped to norm C, by the framework's
  vmap over a one-example gradient (the norms of the per-example gradients, then one weighted sum), and by a
  Python loop over the examples (JAX: one jitted call per example, its clipped gradient added to the sum;
  PyTorch: forward and backward of one example, clipped, added in place); each call timed with perf_counter up
  to the device finishing it, after the same warm-up calls as ours (2 and 1), for as many timed runs as ours;
  the medians. They are checked to give ours's sums (rtol 1e-4) before anything is timed.
- textbook: vmap over a one-example gradient clipped inside vmap, then summed over the batch (JAX's DP-SGD
  example; torch.func's recipe with the clipping added), for comparison only.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from bench.overhead_probe import backend_for

MARKER = "VECTORIZATION_PROBE "
EPSILON = 1e-6  # in the clipping factor min(1, C / (norm + eps)), as Opacus writes it


def jax_handwritten(module, params, clip_norm: float) -> dict[str, Callable]:
    import jax
    import jax.numpy as jnp
    import optax

    def loss(p, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(module.apply({"params": p}, x[None]), y[None])[0]

    def clip(g):
        factor = jnp.minimum(1.0, clip_norm / (optax.global_norm(g) + EPSILON))
        return jax.tree.map(lambda t: t * factor, g)

    def weighted_sum(p, x, y):
        grads = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(p, x, y)
        norms = jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in jax.tree.leaves(grads)))
        factors = jnp.minimum(1.0, clip_norm / (norms + EPSILON))
        return jax.tree.map(lambda g: jnp.einsum("b,b...->...", factors, g), grads)

    vectorized = jax.jit(weighted_sum)
    # JAX's own DP-SGD example: each example's gradient clipped inside vmap, then summed over the batch.
    textbook = jax.jit(lambda p, x, y: jax.tree.map(lambda t: t.sum(0),
                                                    jax.vmap(lambda x, y: clip(jax.grad(loss)(p, x, y)))(x, y)))
    # One compiled call per example: its clipped gradient added to the running sum.
    add_one = jax.jit(lambda total, p, x, y: jax.tree.map(jnp.add, total, clip(jax.grad(loss)(p, x, y))))

    def loop(p, x, y):
        total = jax.tree.map(jnp.zeros_like, p)
        for i in range(x.shape[0]):
            total = add_one(total, p, x[i], y[i])
        return total

    return {"vectorized": lambda batch: vectorized(params, *batch), "textbook": lambda batch: textbook(params, *batch),
            "loop": lambda batch: loop(params, *batch), "synchronize": jax.block_until_ready,
            "leaves": lambda tree: [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]}


def torch_handwritten(model, params: dict, clip_norm: float, device) -> dict[str, Callable]:
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call, grad, vmap

    def loss(p, x, y):
        return F.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    def factor_of(norm):
        return (clip_norm / (norm + EPSILON)).clamp(max=1.0)

    def vectorized(batch):
        grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, *batch)
        factors = factor_of(torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values())))
        return {name: torch.einsum("b,b...->...", factors, g) for name, g in grads.items()}

    def clipped_grad(p, x, y):
        g = grad(loss)(p, x, y)
        factor = factor_of(torch.sqrt(sum(t.pow(2).sum() for t in g.values())))
        return {name: t * factor for name, t in g.items()}

    def textbook(batch):
        # torch.func's per-sample-gradient recipe with the clipping inside vmap, then summed over the batch.
        return {name: t.sum(0) for name, t in vmap(clipped_grad, in_dims=(None, 0, 0))(params, *batch).items()}

    def loop(batch):
        x, y = batch
        total = {name: torch.zeros_like(p) for name, p in params.items()}
        for i in range(x.shape[0]):
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
            factor = factor_of(torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters())))
            for name, p in model.named_parameters():
                total[name] += p.grad * factor
        return total

    def synchronize(out: Any) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return {"vectorized": vectorized, "textbook": textbook, "loop": loop, "synchronize": synchronize,
            "leaves": lambda tree: [t.detach().cpu().numpy() for t in tree.values()]}


def check_same_sums(hand: dict[str, Callable], ours, batch) -> None:
    """The hand-written functions compute what ours do, or their times say nothing about ours."""
    expected = hand["leaves"](ours.clipped_sum_vectorized(batch))
    for name in ("vectorized", "textbook", "loop"):
        for got, want in zip(hand["leaves"](hand[name](batch)), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=f"hand-written {name}")


def bare_median_ms(call: Callable[[], Any], synchronize: Callable[[Any], None], warmup: int, runs: int) -> float:
    """Median milliseconds of `runs` calls of `call`, each up to the device finishing it, after `warmup` calls."""
    times = []
    for i in range(warmup + runs):
        start = time.perf_counter()
        synchronize(call())
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv: list[str]) -> int:
    framework, benchmark, model, variant = argv[:4]
    batch_size, timed_steps, repeats = (int(a) for a in argv[4:7])
    clip_norm = float(argv[7])
    from bench_contract.data.datasets import epoch_batches
    from bench_contract.data.loading import load_dataset
    from bench_contract.models.weights import make_initial_weights
    from bench_contract.results import CONTEXT_NAMES, ResultRows
    from bench_contract.run import training
    from bench_contract.spec import JobSpec

    spec = JobSpec(campaign="bench", cell_id=f"vectorization-{framework}", pair_key="vectorization",
                   framework=framework, benchmark=benchmark, use_case=3, model=model, batch_size=batch_size,
                   precision="fp32", device="auto", data_source="synthetic", model_variant=variant,
                   synthetic_samples=2 * batch_size, clip_norm=clip_norm, noise_multiplier=0.0,
                   timed_steps=timed_steps, min_duration_s=0.0)  # a fixed count of runs, as the hand-written side
    backend = backend_for(framework)
    setup = backend.prepare(spec)
    data = load_dataset(benchmark, "synthetic", None, spec.synthetic_samples, variant)
    specs = backend.param_specs(model, data.sample_shape, data.num_classes, variant, graph=data.graph)
    rows = ResultRows({name: None for name in CONTEXT_NAMES})
    ops = backend.training_ops(spec, data, make_initial_weights(specs, spec.seed), rows)
    ours = backend.per_sample_ops(spec, ops)
    # The batch time_vectorization takes: the first of epoch 0 at its batch size, on the device.
    idx = epoch_batches(len(data.x_train), training.vectorization_batch_size(spec), spec.seed, 0)[0]
    batch = ours.local_batch(data.x_train[idx], data.y_train[idx])
    if framework == "jax":
        hand = jax_handwritten(ops.module, ours.params, clip_norm)
    else:
        hand = torch_handwritten(ours.model, ours.params, clip_norm, ours.device)
    check_same_sums(hand, ours, batch)
    result: dict[str, list[float]] = {key: [] for key in ("ours_vectorized_ms", "ours_loop_ms", "loop_runs",
                                                          "hand_vectorized_ms", "hand_loop_ms", "textbook_ms")}
    vmap_warmup, loop_warmup = training.VECTORIZATION_WARMUP, training.LOOP_WARMUP
    for r in range(repeats):
        # hand-written vmap, ours (vmap, then loop), hand-written loop: each of ours beside its hand-written twin
        result["hand_vectorized_ms"].append(bare_median_ms(partial(hand["vectorized"], batch), hand["synchronize"],
                                                           vmap_warmup, timed_steps))
        rows = ResultRows({name: None for name in CONTEXT_NAMES})
        training.time_vectorization(spec, data, ours, rows)
        value = {row["metric"]: row["value"] for row in rows.rows}
        loop_runs = int(value["per_sample_grads_loop_timed_steps"])
        result["ours_vectorized_ms"].append(value["per_sample_grads_vectorized_time_p50"])
        result["ours_loop_ms"].append(value["per_sample_grads_loop_time_p50"])
        result["loop_runs"].append(loop_runs)
        result["hand_loop_ms"].append(bare_median_ms(partial(hand["loop"], batch), hand["synchronize"], loop_warmup,
                                                     loop_runs))
        result["textbook_ms"].append(bare_median_ms(partial(hand["textbook"], batch), hand["synchronize"],
                                                    vmap_warmup, timed_steps))
        print(f"{framework} run {r + 1}/{repeats}: ours {result['ours_vectorized_ms'][-1]:.2f} / "
              f"{result['ours_loop_ms'][-1]:.1f} ms, hand-written {result['hand_vectorized_ms'][-1]:.2f} / "
              f"{result['hand_loop_ms'][-1]:.1f} ms (vmap / loop), textbook vmap {result['textbook_ms'][-1]:.2f} ms",
              file=sys.stderr, flush=True)
    print(MARKER + json.dumps({"framework": framework, "model": model, "variant": variant, "benchmark": benchmark,
                               "batch_size": int(value["loop_batch_size"]), "timed_steps": timed_steps,
                               "device": setup.kind, "version": setup.framework_version,
                               "threads": setup.intra_op_threads, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
