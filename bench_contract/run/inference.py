"""The inference use case, written once for both backends: what is timed, what is recorded.

A backend supplies the framework operations (`InferenceOps`). One batch is put on the device once; the
forward pass on it is then compiled (JAX, ahead of time, timed on its own), run once more untimed after
compilation, warmed up, and timed at least `timed_steps` times and for at least `min_duration_s` seconds,
each step ending only when the device is done.
Inputs are synthetic (made from the seed) or the first images of the real evaluation split; either way
both frameworks get the same array.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from bench_contract.data.datasets import PACKAGED_BENCHMARKS, SYNTHETIC_SHAPES, DataError, Dataset
from bench_contract.data.images import ImageFolder, split_folder
from bench_contract.data.loading import load_dataset
from bench_contract.measure.efficiency import Efficiency
from bench_contract.measure.flops import Flops
from bench_contract.measure.host import HostShare
from bench_contract.measure.node_state import NodeState
from bench_contract.measure.timing import StepTimer, record_repeat_settings, step_time_statistics
from bench_contract.measure.tracing import Tracer, record_trace
from bench_contract.models import vision
from bench_contract.results import ResultRows
from bench_contract.run import census
from bench_contract.run.progress import ProgressReporter
from bench_contract.spec import JobSpec


class InferenceOps(Protocol):
    parameter_count: int

    def to_device(self, x: np.ndarray) -> Any:
        """The channel-first batch on the device, in the model's layout, transfer finished."""

    def compile(self, x: Any) -> dict[str, float]:
        """Compile the forward pass ahead of time; {metric: seconds}, empty for eager execution."""

    def forward(self, x: Any) -> Any:
        """Logits of one batch (still on the device, possibly not finished)."""

    def passes(self, x: Any) -> AbstractContextManager[Callable[[], Any]]:
        """The timed passes of batch `x`: entered once around all of them, it sets up what a pass runs under
        (PyTorch's inference mode) and gives the pass as a call of no arguments with nothing between the clock and
        the framework: the forward pass itself, as a bare loop would call it."""

    def synchronize(self, out: Any) -> None:
        """Block until the device has finished the work that produced `out`."""

    def compilations(self) -> int:
        """How many compilations the framework has done so far in this process (0 if it never compiles)."""

    def to_numpy(self, out: Any) -> np.ndarray: ...

    def flops_per_step(self, x: Any) -> Flops:
        """FLOPs of one forward pass of the batch, and how they were counted."""


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
    """The one batch an inference cell runs on, as a Dataset (training split = the batch, no other split).

    Synthetic inputs come from the seed; real ones are the first images of the evaluation split (an image
    folder's val/, CIFAR-10's or MNIST's test set), read by the contract's readers, so both frameworks get
    the same pixels."""
    shape = sample_shape(spec.benchmark, spec.model_variant)
    if spec.data_source == "synthetic":
        x = synthetic_inputs(spec.batch_size, shape, spec.seed)
        y, classes = np.zeros(len(x), dtype=np.int32), num_classes(spec.benchmark)
    else:
        x, y, classes = real_inputs(spec.benchmark, spec.data_dir, spec.batch_size, shape)
    return Dataset(spec.benchmark, spec.data_source, x, y, x[:0], y[:0], x[:0], y[:0], classes)


def real_inputs(benchmark: str, data_dir: str | None, batch_size: int,
                shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, int]:
    if not data_dir and benchmark not in PACKAGED_BENCHMARKS:
        raise DataError(f"benchmark {benchmark!r} with real data needs a data directory")
    if benchmark == "imagenet":
        folder = ImageFolder.scan(split_folder(data_dir, "val"))
        if len(folder) < batch_size:
            raise DataError(f"image folder {folder.root} holds {len(folder)} images, fewer than batch size {batch_size}")
        x, y = folder.batch(range(batch_size), shape[-1])
        return x, y, len(folder.classes)  # the class count follows the data (ImageNet-100: 100)
    data = load_dataset(benchmark, "real", data_dir)
    if data.sample_shape != shape:
        raise DataError(f"{benchmark} samples have shape {data.sample_shape}, the model takes {shape}")
    if len(data.x_test) < batch_size:
        raise DataError(f"{benchmark} has {len(data.x_test)} test samples, fewer than batch size {batch_size}")
    return data.x_test[:batch_size], data.y_test[:batch_size], data.num_classes


# What a run's outputs were, in three numbers (float64 sums of the first pass's float32 logits): the parity check
# under tuning holds a tuned configuration's against out of the box's (orchestrator.run.tuning).
OUTPUT_METRICS = ("output_mean", "output_abs_mean", "output_abs_max")


def record_outputs(rows: ResultRows, logits: np.ndarray) -> None:
    values = np.asarray(logits, dtype=np.float64)
    for metric, value in zip(OUTPUT_METRICS, (values.mean(), np.abs(values).mean(), np.abs(values).max())):
        rows.add(metric, float(value), "logit")


def run_inference(spec: JobSpec, x: np.ndarray, ops: InferenceOps, rows: ResultRows,
                  efficiency: Efficiency | None = None, tracer: Tracer | None = None,
                  progress: ProgressReporter | None = None) -> None:
    """Compile, run once, warm up, then time forward passes of one batch of spec.batch_size: at least
    spec.timed_steps of them, and until they add up to spec.min_duration_s seconds. Energy is measured over
    exactly the timed passes. A progress line (bench_contract.run.progress) marks each of these stages of
    the batch size, between them, never inside the timed passes."""
    efficiency = efficiency or Efficiency.unmeasured("the backend gave no energy meter or peak")
    progress = progress or ProgressReporter.for_spec(spec, writer=True)
    progress.start("inference", detail=f"batch size {spec.batch_size}: compiling")
    rows.add("parameter_count", ops.parameter_count, "parameters")
    batch = ops.to_device(x)
    for metric, seconds in ops.compile(batch).items():
        rows.add(metric, seconds, "s")
    # The dtypes the forward pass computed in, as it ran (bench_contract.run.census); a test's fake ops take none.
    if hasattr(ops, "precision_census"):
        rows.context["precision_census"] = census.census_text(ops.precision_census(batch))
    progress.note(f"batch size {spec.batch_size}: first pass after compilation")
    start = time.perf_counter()
    out = ops.forward(batch)
    ops.synchronize(out)
    # The first call after compilation still pays one-off costs (allocations, kernel selection): recorded apart.
    rows.add("first_batch_time", time.perf_counter() - start, "s")
    logits = ops.to_numpy(out)
    if logits.shape[0] != len(x) or not np.isfinite(logits).all():
        raise FloatingPointError(f"the forward pass gave logits of shape {logits.shape} that are not all finite")
    record_outputs(rows, logits)
    timer = StepTimer(ops.synchronize, spec.warmup_steps, ops.compilations)
    # Inside the clock only the pass and the wait for it: the mode it runs in is entered once, around all the
    # passes, and the counters and bookkeeping are read between passes (docs/performance.md#the-harnesss-overhead).
    with ops.passes(batch) as one_pass:
        for _ in range(spec.warmup_steps):
            timer.run(one_pass)
        progress.note(f"batch size {spec.batch_size}: timing at least {spec.timed_steps} passes and "
                      f"{spec.min_duration_s:g} s, after {spec.warmup_steps} warm-up passes")
        # One window over the timed passes, no shorter than the energy counter needs (EnergyMeter.min_window_s).
        host = HostShare.start()  # whether the bound CPUs stay this run's while timed (bench_contract.measure.host)
        node = NodeState.start(efficiency.meter)  # clocks, heat, throttling at both ends (measure.node_state)
        with efficiency.meter:  # opened after the warm-up, so the window holds the timed passes only
            timer.measure(one_pass, spec.timed_steps, max(spec.min_duration_s, efficiency.meter.min_window_s))
    host.record(rows, rows.context.get("intra_op_threads"))
    node.record(rows)
    rows.add("warmup_steps", spec.warmup_steps, "steps")
    record_repeat_settings(spec, rows)
    rows.add("recompilations_timed", timer.recompilations, "compilations")
    # One step is one forward pass of one batch, so step_time_p50 ... step_time_std are the latency per batch,
    # under the same names as the training use cases' step times (one vocabulary for collect and reports).
    statistics = step_time_statistics(timer.times_s, spec.batch_size)
    for metric, value, unit in statistics:
        rows.add(metric, value, unit)
    for i, seconds in enumerate(timer.times_s):  # every timed pass, for the latency distribution
        rows.add("step_time", seconds * 1e3, "ms", step=i)
    measured = {metric: value for metric, value, _ in statistics}
    progress.note(f"batch size {spec.batch_size}: {len(timer.times_s)} passes timed, median "
                  f"{measured['step_time_p50']:.3g} ms, {measured['throughput'] / spec.batch_size:.3g} passes/s")
    efficiency.record(rows, ops.flops_per_step(batch), timer.times_s, spec.batch_size)
    record_trace(spec, rows, lambda: ops.forward(batch), ops.synchronize, tracer)  # after all measuring
