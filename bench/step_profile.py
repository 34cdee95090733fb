"""Where the inference step's time goes, beyond the forward pass: the timed pass as the harness ran it before
(a lambda calling the ops' `forward`, PyTorch's inference mode entered in every pass, the backend's generic wait:
the device's type looked at in PyTorch, a pytree flattened in JAX) and as it runs now (`ops.passes`: the mode
entered once, the pass the framework's own call, the wait decided once), each against the bare loop; in PyTorch
also the pass as now under `torch.no_grad()`, the mode the bare loop once ran in.

Run in a framework's environment, with the repository on PYTHONPATH:
    .envs/torch/bin/python -m bench.step_profile torch mlp 1 [PAIRS [PASSES]]
It prints, for each way, the calls made inside the clock of one pass that are not the model's (from
sys.setprofile), then the median over PAIRS alternating pairs of runs of (way - bare) in microseconds a pass, with
the 95% interval of that median. docs/performance.md#the-harnesss-overhead quotes what it printed.
"""

from __future__ import annotations

import statistics
import sys
import time
from contextlib import contextmanager, nullcontext
from functools import partial

import numpy as np

from bench.overhead_probe import backend_for, bare_loop
from bench_contract.measure.timing import StepTimer

STEPS = 100  # passes a run by default; each run's median is one side of a pair


def ops_for(framework: str, model: str, batch: int):
    from bench_contract.models.weights import make_initial_weights
    from bench_contract.run.inference import inference_dataset
    from bench_contract.spec import INFERENCE_USE_CASE, JobSpec

    spec = JobSpec(campaign="bench", cell_id="profile", pair_key="profile", framework=framework, benchmark="mnist",
                   use_case=INFERENCE_USE_CASE, model=model, batch_size=batch, precision="fp32", device="cpu",
                   data_source="synthetic", model_variant="full", timed_steps=1, min_duration_s=0.0,
                   warmup_steps=5)
    backend = backend_for(framework)
    backend.prepare(spec)
    data = inference_dataset(spec)
    weights = make_initial_weights(backend.param_specs(model, data.sample_shape, data.num_classes, "full"), spec.seed)
    ops = backend.inference_ops(spec, weights, data.sample_shape, data.num_classes)
    x = ops.to_device(data.x_train)
    ops.compile(x)
    return ops, x


def generic_wait(framework: str, ops):
    """The backend's wait before it was decided once per device: the module-level function every path uses."""
    if framework == "jax":
        from jax_backend.sync import synchronize

        return synchronize
    from torch_backend.sync import synchronize

    return lambda out: synchronize(ops.device)


def ways(framework: str, ops, x) -> dict:
    """name -> (context to enter around the passes, the pass, the wait), as StepTimer times them."""
    before = (nullcontext(lambda: ops.forward(x)), generic_wait(framework, ops))
    found = {"before": before, "now": (ops.passes(x), ops.synchronize)}
    if framework == "torch":  # the mode alone: the pass as now, under no_grad, where the bare loop once sat
        found["now, in no_grad"] = (no_grad_passes(ops, x), ops.synchronize)
    return found


@contextmanager
def no_grad_passes(ops, x):
    import torch

    with torch.no_grad():
        yield partial(ops.net, x)


def timed_by_harness(context, wait, steps: int) -> list[float]:
    with context as one_pass:
        timer = StepTimer(wait, 5)
        timer.measure(one_pass, steps, 0.0)
    return timer.times_s


# Where the model's own work begins: the module's call (PyTorch), the compiled function's (JAX).
MODEL_CALLS = ("Module._wrapped_call_impl", "Compiled.__call__")


def calls_inside_the_clock(context, wait) -> list[str]:
    """The calls one pass and its wait make, in order, but for those inside the model (the framework's work)."""
    seen: list[str] = []
    model_frame = []

    def record(frame, event, arg):
        if model_frame:
            if event == "return" and frame is model_frame[0]:
                model_frame.clear()
            return
        if event == "call" and frame.f_code is not region.__code__:
            seen.append(frame.f_code.co_qualname)
            if frame.f_code.co_qualname in MODEL_CALLS:
                model_frame.append(frame)
        elif event == "c_call":
            seen.append(getattr(arg, "__qualname__", repr(arg)))

    with context as one_pass:
        def region():
            wait(one_pass())

        for _ in range(3):
            one_pass()
        sys.setprofile(record)
        region()
        sys.setprofile(None)
    return [name for name in seen if name != "setprofile"]


def main(argv: list[str]) -> int:
    from orchestrator.results.baseline import median_interval

    framework, model, batch = argv[0], argv[1], int(argv[2])
    pairs = int(argv[3]) if len(argv) > 3 else 25
    steps = int(argv[4]) if len(argv) > 4 else STEPS
    ops, x = ops_for(framework, model, batch)
    for name, (context, wait) in ways(framework, ops, x).items():
        print(f"{framework} {model} batch {batch}, {name}: inside the clock {calls_inside_the_clock(context, wait)}")
    differences: dict[str, list[float]] = {name: [] for name in ways(framework, ops, x)}
    for _ in range(pairs):
        for name, (context, wait) in ways(framework, ops, x).items():
            harness = statistics.median(timed_by_harness(context, wait, steps))
            bare = statistics.median(bare_loop(framework, ops, x, steps, 5))
            differences[name].append((harness - bare) * 1e6)
    bare_us = statistics.median(bare_loop(framework, ops, x, steps, 5)) * 1e6
    for name, values in differences.items():
        low, high = median_interval(np.asarray(values))
        print(f"{framework} {model} batch {batch}, {name} - bare: median {statistics.median(values):+.2f} us a pass "
              f"(95% interval {low:+.2f} to {high:+.2f}; {pairs} pairs; a bare pass {bare_us:.1f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
