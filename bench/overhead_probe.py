"""The harness against a bare hand-written loop, on one model, in one framework's environment.

Run by `bench/harness_overhead.py` as `<framework env>/bin/python -m bench.overhead_probe FRAMEWORK MODEL
VARIANT BENCHMARK BATCH TIMED_STEPS WARMUP_STEPS REPEATS [DEVICE]` (DEVICE cpu, the default, or gpu: the
spec's device, as `--device` sets it; scripts/gpu_speed.sh runs it on a GPU), with the repository on
PYTHONPATH. It imports only that framework's backend and the contract (never the orchestrator), prints progress
to stderr and, as its last stdout line, `OVERHEAD_PROBE {json}` with the per-run step-time medians of both loops.

Both loops run in this one process on the same backend object: the same weights (the contract's initial
weights from the seed), the same input batch on the device, the same batch size, fp32, the same device
set-up (`backend.prepare`, as a cell does). They alternate harness, bare, harness, bare ... so drift on a
shared machine falls on both.
- harness: `run_inference` with the backend's inference ops, exactly as a cell runs it; its recorded
  `step_time_p50`.
- bare: JAX `compiled(variables, x).block_until_ready()`, the executable the harness compiled ahead of time and
  timed (the same function called through `jax.jit`'s dispatch ran 4 to 8% slower a pass at batch 128, the MLP on
  this project's AMD machine: JAX's own call path, not the harness, so the bare loop does not time it); PyTorch
  `net(x)` (plus `torch.cuda.synchronize` on GPU)
  with inference mode entered once around the loop, as PyTorch's docs advise for inference and as the harness runs
  its passes; each call timed with perf_counter; the median of those times.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

MARKER = "OVERHEAD_PROBE "
# How each framework runs the model here: the probe's inference cell is JAX's jit and PyTorch eager.
INFERENCE_MODES = {"jax": "jit", "torch": "eager"}


def backend_for(framework: str):
    if framework == "jax":
        from jax_backend.run import JaxBackend

        return JaxBackend()
    if framework == "torch":
        from torch_backend.run import TorchBackend

        return TorchBackend()
    raise ValueError(f"unknown framework {framework!r}")


def bare_loop(framework: str, ops, x, steps: int, warmup: int) -> list[float]:
    """Per-call seconds of a hand-written loop over the model function the harness runs."""
    times = []
    if framework == "jax":
        compiled, variables = ops.compiled, ops.variables  # compiled by the caller (a harness run, or ops.compile)
        for i in range(warmup + steps):
            start = time.perf_counter()
            compiled(variables, x).block_until_ready()
            if i >= warmup:
                times.append(time.perf_counter() - start)
        return times
    import torch

    net, cuda = ops.net, ops.device.type == "cuda"
    with torch.inference_mode():
        for i in range(warmup + steps):
            start = time.perf_counter()
            net(x)
            if cuda:
                torch.cuda.synchronize(ops.device)
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return times


def main(argv: list[str]) -> int:
    framework, model, variant, benchmark = argv[:4]
    batch, timed_steps, warmup, repeats = (int(a) for a in argv[4:8])
    device = argv[8] if len(argv) > 8 else "cpu"
    from bench_contract.models.weights import make_initial_weights
    from bench_contract.results import CONTEXT_NAMES, ResultRows
    from bench_contract.run.inference import inference_dataset, run_inference
    from bench_contract.spec import INFERENCE_USE_CASE, JobSpec

    spec = JobSpec(campaign="bench", cell_id=f"overhead-{framework}", pair_key="overhead", framework=framework,
                   benchmark=benchmark, use_case=INFERENCE_USE_CASE, model=model, batch_size=batch,
                   precision="fp32", device=device, data_source="synthetic", model_variant=variant,
                   timed_steps=timed_steps, min_duration_s=0.0, warmup_steps=warmup)  # as many steps as the bare loop
    backend = backend_for(framework)
    setup = backend.prepare(spec)
    data = inference_dataset(spec)
    weights = make_initial_weights(backend.param_specs(model, data.sample_shape, data.num_classes, variant), spec.seed)
    ops = backend.inference_ops(spec, weights, data.sample_shape, data.num_classes)
    x = ops.to_device(data.x_train)  # the bare loop's batch: the same array the harness puts on the device
    harness_ms, bare_ms = [], []
    for r in range(repeats):
        rows = ResultRows({name: None for name in CONTEXT_NAMES})
        run_inference(spec, data.x_train, ops, rows)
        harness_ms.append(next(row["value"] for row in rows.rows if row["metric"] == "step_time_p50"))
        bare_ms.append(statistics.median(bare_loop(framework, ops, x, timed_steps, warmup)) * 1e3)
        print(f"{framework} run {r + 1}/{repeats}: harness {harness_ms[-1]:.3f} ms, bare {bare_ms[-1]:.3f} ms",
              file=sys.stderr, flush=True)
    print(MARKER + json.dumps({"framework": framework, "mode": INFERENCE_MODES[framework], "path": "run_inference",
                               "model": model, "variant": variant, "batch_size": batch, "timed_steps": timed_steps,
                               "device": setup.kind, "version": setup.framework_version, "harness_ms": harness_ms,
                               "bare_ms": bare_ms}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
