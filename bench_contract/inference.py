"""The inference use case, written once for both backends: what is timed, what is recorded.

A backend supplies the framework operations (`InferenceOps`). One batch is put on the device once; the
forward pass on it is then compiled (JAX, ahead of time, timed on its own), run once more untimed after
compilation, warmed up, and timed `timed_steps` times, each step ending only when the device is done.
Inputs are synthetic: inference time does not depend on the pixel values, and both frameworks get the same
array, made from the seed.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from bench_contract import vision
from bench_contract.data import SYNTHETIC_SHAPES, DataError, Dataset
from bench_contract.results import ResultRows
from bench_contract.spec import JobSpec
from bench_contract.timing import StepTimer, step_time_statistics

INFERENCE_USE_CASE = 5


class InferenceOps(Protocol):
    parameter_count: int

    def to_device(self, x: np.ndarray) -> Any:
        """The channel-first batch on the device, in the model's layout, transfer finished."""

    def compile(self, x: Any) -> dict[str, float]:
        """Compile the forward pass ahead of time; {metric: seconds}, empty for eager execution."""

    def forward(self, x: Any) -> Any:
        """Logits of one batch (still on the device, possibly not finished)."""

    def synchronize(self, out: Any) -> None:
        """Block until the device has finished the work that produced `out`."""

    def to_numpy(self, out: Any) -> np.ndarray: ...


def sample_shape(benchmark: str, variant: str) -> tuple[int, ...]:
    """Channel-first shape of one input sample of a benchmark's models, for the variant."""
    if (benchmark, variant) in vision.INPUT_SHAPES:
        return vision.input_shape(benchmark, variant)
    if benchmark in SYNTHETIC_SHAPES:
        return SYNTHETIC_SHAPES[benchmark]
    raise DataError(f"no input shape for benchmark {benchmark!r}")


def num_classes(benchmark: str) -> int:
    return vision.NUM_CLASSES.get(benchmark, 10)


def synthetic_inputs(batch_size: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Standard-normal inputs (what normalised images look like), the same bytes for both frameworks."""
    return np.random.default_rng([seed, batch_size]).standard_normal((batch_size, *shape), dtype=np.float32)


def inference_dataset(spec: JobSpec) -> Dataset:
    """The one batch an inference cell runs on, as a Dataset (training split = the batch, no other split)."""
    if spec.data_source != "synthetic":
        raise DataError("the inference use case runs on synthetic inputs only (real data readers are not built yet)")
    x = synthetic_inputs(spec.batch_size, sample_shape(spec.benchmark, spec.model_variant), spec.seed)
    y = np.zeros(len(x), dtype=np.int32)
    empty_x, empty_y = x[:0], y[:0]
    return Dataset(spec.benchmark, "synthetic", x, y, empty_x, empty_y, empty_x, empty_y, num_classes(spec.benchmark))


LATENCY_METRICS = {"step_time_p50": "latency_p50", "step_time_p90": "latency_p90", "step_time_p95": "latency_p95",
                   "step_time_p99": "latency_p99", "step_time_mean": "latency_mean", "step_time_std": "latency_std"}


def run_inference(spec: JobSpec, x: np.ndarray, ops: InferenceOps, rows: ResultRows) -> None:
    """Compile, run once, warm up, then time spec.timed_steps forward passes of one batch of spec.batch_size."""
    rows.add("parameter_count", ops.parameter_count, "parameters")
    batch = ops.to_device(x)
    for metric, seconds in ops.compile(batch).items():
        rows.add(metric, seconds, "s")
    start = time.perf_counter()
    out = ops.forward(batch)
    ops.synchronize(out)
    # The first call after compilation still pays one-off costs (allocations, kernel selection): recorded apart.
    rows.add("first_batch_time", time.perf_counter() - start, "s")
    logits = ops.to_numpy(out)
    if logits.shape[0] != len(x) or not np.isfinite(logits).all():
        raise FloatingPointError(f"the forward pass gave logits of shape {logits.shape} that are not all finite")
    timer = StepTimer(ops.synchronize, spec.warmup_steps)
    for _ in range(spec.warmup_steps + spec.timed_steps):
        timer.run(lambda: ops.forward(batch))
    rows.add("warmup_steps", spec.warmup_steps, "steps")
    for metric, value, unit in step_time_statistics(timer.times_s, spec.batch_size):
        rows.add(LATENCY_METRICS.get(metric, metric), value, unit)
