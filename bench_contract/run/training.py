"""The training loop both backends run, written once so that they cannot drift apart.

A backend supplies the framework operations (`TrainingOps`); this module owns the epochs, the batch
order, what is timed and what is recorded. The timed region of a step is the framework's update on a
batch already on the device, up to the device finishing it; moving the batch to the device is outside it.

The same loop serves every training use case: the step is a plain update (1, 2) or a DP-SGD update (3, 4),
and in the data-parallel use cases (2, 4) each rank takes its shard of the same global batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import numpy as np

from bench_contract.data.datasets import Dataset, epoch_batches
from bench_contract.measure.efficiency import Efficiency
from bench_contract.measure.energy import EnergyMeter
from bench_contract.measure.flops import Flops
from bench_contract.measure.host import HostShare
from bench_contract.measure.node_state import NodeState
from bench_contract.measure.timing import StepTimer, record_repeat_settings, step_time_statistics
from bench_contract.measure.tokens import labels_per_sample, record_model_flops, record_token_throughput
from bench_contract.measure.tracing import Tracer, record_trace
from bench_contract.models import language
from bench_contract.results import ResultRows
from bench_contract.run import census, sampling
from bench_contract.run.progress import ProgressReporter
from bench_contract.run.topology import Topology
from bench_contract.spec import PER_SAMPLE_USE_CASES, JobSpec

EVAL_CHUNK = 1024


class TrainingOps(Protocol):
    def to_device(self, x: np.ndarray, y: np.ndarray) -> Any:
        """Return the batch on the device, transfer finished (with several ranks: this rank's shard)."""

    def train_step(self, batch: Any) -> Any:
        """Apply one update; return a handle to the loss (still on the device)."""

    def synchronize(self, out: Any) -> None:
        """Block until the device has finished the work that produced `out`."""

    def compilations(self) -> int:
        """How many compilations the framework has done so far in this process (0 if it never compiles)."""

    def loss_value(self, out: Any) -> float:
        """The loss of the whole global batch (with several ranks, every rank must call this: it may reduce)."""

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Class predictions for a chunk of inputs, as a numpy array."""

    def loss_scale(self) -> float | None:
        """The dynamic loss scale the next step will use (fp16), None without loss scaling; may wait for the device."""

    compiles_lazily: bool  # compiled inside the first step (torch.compile), not ahead of time (JAX)
    # Poisson batches padded to one size (bench_contract.run.sampling; JAX: one compiled shape), not run as drawn
    pads_batches: bool

    def graph_breaks(self) -> dict[str, int]:
        """Where compiles_lazily: the graph breaks so far in this process by reason, places where the compiled
        step ran eagerly between its graphs (TorchDynamo's count)."""

    def flops_per_step(self, batch: Any) -> Flops:
        """FLOPs of one step on the global batch, and how they were counted. Called once, after training
        and evaluation, so that counting cannot disturb the timed steps or the model they train."""

    def precision_census(self, batch: Any) -> dict[str, set[str]]:
        """The dtypes each class of operation computed in during one step (bench_contract.run.census), taken
        from the framework as the step ran. Called once, after flops_per_step."""


def refuse_batch_norm(spec: JobSpec, has_batch_norm: bool) -> None:
    """Refuse the training use cases that batch norm makes ill-defined or incomparable (the orchestrator's
    catalog refuses them at plan time already; this guards a spec written by hand)."""
    if has_batch_norm and spec.case.per_sample:
        raise ValueError(f"{spec.model} has batch norm, which mixes the examples of a batch, so its per-sample "
                         f"gradients (use cases {' and '.join(map(str, PER_SAMPLE_USE_CASES))}) are undefined")
    if has_batch_norm and spec.world_size > 1:
        raise ValueError(f"{spec.model} has batch norm, whose statistics PyTorch's DistributedDataParallel takes "
                         "per rank and a sharded JAX step over the global batch (SyncBatchNorm, which would align "
                         "them, runs on GPUs only), so data-parallel training of it is not comparable")


class LossScaleHistory:
    """The loss scale after every step and the steps skipped because their gradients overflowed: with dynamic
    loss scaling (both frameworks follow bench_contract.run.precision.LossScaling) the scale drops exactly when
    a step is skipped. Nothing is recorded without loss scaling."""

    def __init__(self, initial: float | None) -> None:
        self.previous, self.skipped = initial, 0

    def record(self, rows: ResultRows, scale: float | None, epoch: int, step: int) -> None:
        if scale is None:
            return
        rows.add("loss_scale", scale, "factor", epoch=epoch, step=step)
        self.skipped += scale < self.previous
        self.previous = scale

    def record_skipped(self, rows: ResultRows) -> None:
        if self.previous is not None:
            rows.add("skipped_steps", self.skipped, "steps")


def record_lazy_compilation(rows: ResultRows, first_step_s: float, times_s: list[float],
                            graph_breaks: dict[str, int]) -> None:
    """A step compiled inside its first call (torch.compile): the compilation is that first step minus the steady
    steps' median, as inference measures it (bench_contract.run.inference), so the execution is not counted; and
    the graph breaks of the compiled step, by reason: where it ran eagerly between its graphs. PyTorch breaks a
    training step's graph by design (around the optimizer's step, at backward(); issue 29), so a break is
    recorded for the reader, not a fault in itself."""
    rows.add("compile_first_call_time", first_step_s, "s")
    rows.add("compile_time", max(first_step_s - float(np.median(times_s)), 0.0), "s")
    reasons = "; ".join(f"{count}x {reason}" for reason, count in sorted(graph_breaks.items()))
    rows.add("graph_breaks", sum(graph_breaks.values()), "breaks",
             note=reasons or "none: the whole step ran as compiled graphs")


def accuracy(ops: TrainingOps, x: np.ndarray, y: np.ndarray, progress: ProgressReporter | None = None) -> float:
    correct = 0
    for start in range(0, len(x), EVAL_CHUNK):
        pred = ops.predict(x[start : start + EVAL_CHUNK])
        correct += int(np.sum(pred == y[start : start + EVAL_CHUNK]))
        if progress is not None:  # a large evaluation split takes minutes: the heartbeat must not look stale
            progress.keep_alive()
    return correct / y.size  # labels, not samples: a language model's sample has one per position


def evaluates(topology: Topology, ops: TrainingOps) -> bool:
    """Whether this rank evaluates: the writer alone (every rank holds the same parameters), or every rank where the
    state is sharded (its forward pass gathers shards from all of them); only the writer's rows are written."""
    return topology.is_writer or getattr(ops, "shards_state", False)


def run_training(spec: JobSpec, data: Dataset, ops: TrainingOps, rows: ResultRows,
                 topology: Topology | None = None, efficiency: Efficiency | None = None,
                 tracer: Tracer | None = None, progress: ProgressReporter | None = None) -> None:
    """Train for spec.epochs; record per-step loss, per-epoch validation accuracy, timings and test accuracy,
    energy over the pipelined steps after training, and FLOP utilisation.

    With several ranks, only the writer (rank 0) evaluates: every rank holds the same parameters.
    Energy is measured over the pipelined steps after training (record_pipelined): one window of consecutive
    updates on the device, long enough for the energy counter (EnergyMeter.min_window_s). A window per timed
    step kept the host's work out, but NVML's counter moves only every 100 ms on an H200: summed over windows of
    a millisecond, it gave 1,500 to 4,500 W on a 700 W GPU.
    Progress (bench_contract.run.progress) is reported between steps, beside the loss read.
    """
    topology = topology or Topology()
    efficiency = efficiency or Efficiency.unmeasured("the backend gave no energy meter or peak")
    batches_per_epoch = sampling.steps_per_epoch(len(data.x_train), spec.batch_size)
    # Shuffled batches are never padded: fakes and backends without Poisson sampling need no pads_batches.
    poisson_padded = spec.sampling == "poisson" and ops.pads_batches
    padded_to = sampling.compiled_batch_size(spec, len(data.x_train)) if poisson_padded else None
    sampled = sampling.SamplingRecord(spec, padded_to)
    if spec.warmup_steps >= batches_per_epoch * spec.epochs:
        raise ValueError(
            f"{spec.warmup_steps} warm-up steps leave no step to time in {spec.epochs} epoch(s) of "
            f"{batches_per_epoch} steps; train longer or lower warmup_steps"
        )
    timer = StepTimer(ops.synchronize, spec.warmup_steps, ops.compilations)
    progress = progress or ProgressReporter.for_spec(spec, topology.is_writer)
    progress.start("training", steps_total=batches_per_epoch * spec.epochs, epochs=spec.epochs,
                   detail=f"batch size {spec.batch_size}")
    step = 0
    scales = LossScaleHistory(ops.loss_scale())
    host = HostShare.start()  # whether the bound CPUs stay this run's while it trains (bench_contract.measure.host)
    node = NodeState.start(efficiency.meter)  # clocks, heat, throttling at both ends (measure.node_state)
    train_start = time.perf_counter()
    for epoch in range(spec.epochs):
        epoch_start = time.perf_counter()
        losses = []
        for idx in sampling.training_batches(spec, len(data.x_train), epoch):
            batch = ops.to_device(*sampling.rank_batch(data.x_train, data.y_train, idx, topology, padded_to))
            sampled.step(rows, idx, epoch, step)
            timed_before = len(timer.times_s)
            started = time.perf_counter()
            out = timer.run(partial(ops.train_step, batch))
            if step == 0:  # a lazily compiled step compiles here (record_lazy_compilation)
                first_step_s = time.perf_counter() - started
            if len(timer.times_s) > timed_before:  # every timed step, for latency distributions and loss vs time
                rows.add("step_time", timer.times_s[-1] * 1e3, "ms", epoch=epoch, step=step)
                sampled.timed_step(idx)
            loss = ops.loss_value(out)
            if not np.isfinite(loss):
                raise FloatingPointError(f"training diverged: loss is {loss} at step {step} (epoch {epoch})")
            rows.add("train_loss", loss, "nats", epoch=epoch, step=step)
            scales.record(rows, ops.loss_scale(), epoch, step)
            losses.append(loss)
            step += 1
            progress.step(step, epoch=epoch, loss=loss)  # the step's clock is stopped here
        epoch_time = time.perf_counter() - epoch_start
        rows.add("epoch_time", epoch_time, "s", epoch=epoch)
        rows.add("train_loss_epoch_mean", float(np.mean(losses)), "nats", epoch=epoch)
        summary = f"epoch {epoch + 1} done in {epoch_time:.1f} s, mean loss {np.mean(losses):.4g}"
        if evaluates(topology, ops):
            val = accuracy(ops, data.x_val, data.y_val, progress)
            rows.add("val_accuracy", val, "fraction", epoch=epoch)
            summary += f", validation accuracy {val:.4f}"
        progress.note(summary, step=step, epoch=epoch, loss=loss)
    rows.add("train_time_total", time.perf_counter() - train_start, "s")
    host.record(rows, rows.context.get("intra_op_threads"))
    node.record(rows)
    rows.add("warmup_steps", spec.warmup_steps, "steps")
    rows.add("recompilations_timed", timer.recompilations, "compilations")
    scales.record_skipped(rows)
    if ops.compiles_lazily:
        record_lazy_compilation(rows, first_step_s, timer.times_s, ops.graph_breaks())
    # The timed steps' work is the examples they drew, of all ranks together: B for shuffled batches, a random
    # number each step under Poisson sampling. Throughput and the FLOPs behind MFU count the same examples.
    examples = sampled.examples_per_timed_step()
    tokens = labels_per_sample(data.y_train)
    for metric, value, unit in step_time_statistics(timer.times_s, examples):
        rows.add(metric, value, unit)
        record_token_throughput(rows, metric, value, tokens)
        if metric == "throughput":
            # Per device, so that a data-parallel cell compares with the one-device cell (scaling efficiency).
            rows.add("throughput_per_device", value / topology.world_size, unit)
    rows.add("world_size", topology.world_size, "processes")
    sampled.finish(rows, len(data.x_train))
    if evaluates(topology, ops):
        rows.add("test_accuracy", accuracy(ops, data.x_test, data.y_test, progress), "fraction")
    if hasattr(ops, "state_bytes_per_device"):
        rows.add("state_memory_per_device", ops.state_bytes_per_device(), "bytes",
                 note="parameters and optimizer state held by one device (its shards where sharded)")
    # After the test accuracy (its extra updates change the model), on the last batch: its drawn examples are the
    # work, never the nominal B nor the padded size (a Poisson batch is either larger or smaller than B).
    pipelined_samples = record_pipelined(spec, ops, batch, len(idx), rows, efficiency.meter, tokens)
    flops = ops.flops_per_step(batch)  # of the last batch, as computed: padded to padded_to where it was
    flops = flops.of_real_examples(examples, padded_to or len(idx))
    efficiency.record(rows, flops, timer.times_s, examples, pipelined_samples)
    if spec.model == language.MODEL_NAME:
        record_model_flops(rows, language.training_flops_per_token(language.GPT[spec.model_variant]),
                           examples * tokens, timer.times_s, efficiency.measured_peak(), efficiency.devices)
    # A step without a census (a test's fake ops) records none; the certificate says so where the other side has one.
    if hasattr(ops, "precision_census"):
        rows.context["precision_census"] = census.census_text(ops.precision_census(batch))
    if hasattr(ops, "attention_kernel"):
        rows.context["attention_kernel"] = ops.attention_kernel(batch)
    record_trace(spec, rows, lambda: ops.train_step(batch), ops.synchronize, tracer)  # after all measuring
    progress.note(f"training done in {time.perf_counter() - train_start:.1f} s", eta_s=None)


def measure_pipelined(ops: TrainingOps, batch: Any, steps: int, meter: EnergyMeter | None = None,
                      min_seconds: float = 0.0) -> tuple[float, int]:
    """(seconds, updates) of consecutive updates, synchronised after every `steps` of them: the device queues the
    next step while the previous one runs, as a training loop that does not read every loss does. At least
    `steps` updates, and groups of `steps` more until min_seconds have passed; `meter` measures exactly them."""
    done = 0
    if meter is not None:
        meter.resume()
    start = time.perf_counter()
    while done == 0 or time.perf_counter() - start < min_seconds:
        for _ in range(steps):
            out = ops.train_step(batch)
        ops.synchronize(out)
        done += steps
    seconds = time.perf_counter() - start
    if meter is not None:
        meter.pause()
    return seconds, done


def record_pipelined(spec: JobSpec, ops: TrainingOps, batch: Any, examples: int, rows: ResultRows,
                     meter: EnergyMeter | None = None, tokens_per_sample: int = 1) -> int:
    """throughput_pipelined beside the per-step throughput: spec.timed_steps updates on the last batch (already
    on the device), or more for the energy meter's window, after training, so they change no recorded loss or
    accuracy; `examples` is the batch's drawn examples over all ranks (padding computes, but is no work done).
    Returns the examples those updates processed, the samples the energy is divided by."""
    seconds, updates = measure_pipelined(ops, batch, spec.timed_steps, meter, meter.min_window_s if meter else 0.0)
    rows.add("pipelined_steps", updates, "steps")
    rows.add("pipelined_batch_size", examples, "samples", note="the last training batch's drawn examples")
    rows.add("throughput_pipelined", updates * examples / seconds, "samples/s")
    record_token_throughput(rows, "throughput_pipelined", updates * examples / seconds, tokens_per_sample)
    return updates * examples


class PerSampleOps(Protocol):
    """The per-sample gradient part of a DP-SGD step on one device, vectorised and as a naive loop.

    Both return the sum of the clipped per-example gradients (no noise, no update, no communication), so
    that the two timings measure exactly the vectorisation.
    """

    def local_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        """The batch on this process's own device, transfer finished."""

    def clipped_sum_vectorized(self, batch: Any) -> Any: ...

    def clipped_sum_loop(self, batch: Any) -> Any: ...

    def synchronize(self, out: Any) -> None: ...

    def compilations(self) -> int: ...

    # Whether each version runs compiled (jax.jit, torch.compile) or eagerly, the loop per example's call: the
    # speed-up of a jitted loop and that of an eager one are different figures, and the rows say which each is.
    vectorized_compiled: bool
    loop_compiled: bool


VECTORIZATION_WARMUP = 2
# The loop calls one compiled per-example gradient batch-size times, so its first run already warms that up
# many times over: one untimed run of it, not VECTORIZATION_WARMUP.
LOOP_WARMUP = 1
# At the training batch, one run of the loop takes seconds on a large model (a ResNet, 128 examples one at a
# time). The loop stops at the stopping rule of the vectorised version or once its timed runs add up to this
# budget, whichever comes first, and always times at least one whole run: a run is never cut, so both sides
# are times of the same batch. Recorded as per_sample_grads_loop_time_budget.
LOOP_TIME_BUDGET_S = 60.0


def record_dp_settings(spec: JobSpec, rows: ResultRows) -> None:
    rows.add("clip_norm", spec.clip_norm, "L2 norm")
    rows.add("noise_multiplier", spec.noise_multiplier, "sigma")


def vectorization_batch_size(spec: JobSpec) -> int:
    """The batch both versions are timed at: spec.loop_batch_size, or with 0 (the default) the batch one device
    trains on, so that the speed-up is the one the training steps get."""
    return spec.loop_batch_size or spec.batch_size // spec.world_size


def measure_within_budget(timer: StepTimer, step: Callable[[], Any], spec: JobSpec, budget_s: float) -> None:
    """Warm up, then time whole runs of `step` until the stopping rule of inference (spec.timed_steps runs and
    spec.min_duration_s seconds) is met or the timed runs add up to `budget_s`, with at least one timed run."""
    while (timer.seen < timer.warmup_steps or not timer.times_s
           or ((len(timer.times_s) < spec.timed_steps or timer.timed_total_s < spec.min_duration_s)
               and timer.timed_total_s < budget_s)):
        timer.run(step)


def time_vectorization(spec: JobSpec, data: Dataset, ops: PerSampleOps, rows: ResultRows,
                       progress: ProgressReporter | None = None) -> None:
    """Time per-sample gradients vectorised and as a per-example loop, on the same batch: by default the
    training batch of one device (vectorization_batch_size), the loop bounded by LOOP_TIME_BUDGET_S.

    A line before and after each measurement says how far it is; nothing is reported while one runs.
    """
    size = vectorization_batch_size(spec)
    if size > len(data.x_train):
        raise ValueError(f"loop_batch_size {size} is larger than the {len(data.x_train)} training samples")
    idx = epoch_batches(len(data.x_train), size, spec.seed, 0)[0]
    batch = ops.local_batch(data.x_train[idx], data.y_train[idx])
    rows.add("loop_batch_size", size, "samples")
    rows.add("per_sample_grads_loop_time_budget", LOOP_TIME_BUDGET_S, "s")
    progress = progress or ProgressReporter.for_spec(spec)
    progress.start("per-sample gradients", detail=f"batch size {size}, vectorised and as a loop")
    medians, compiled = {}, {"vectorized": ops.vectorized_compiled, "loop": ops.loop_compiled}
    for name, fn, warmup, budget_s in (("vectorized", ops.clipped_sum_vectorized, VECTORIZATION_WARMUP, math.inf),
                                       ("loop", ops.clipped_sum_loop, LOOP_WARMUP, LOOP_TIME_BUDGET_S)):
        bound = "" if budget_s == math.inf else f", or {budget_s:g} s at most"
        progress.note(f"timing the {name} version: at least {spec.timed_steps} steps and {spec.min_duration_s:g} s"
                      f"{bound}")
        timer = StepTimer(ops.synchronize, warmup, ops.compilations)
        measure_within_budget(timer, partial(fn, batch), spec, budget_s)
        medians[name] = float(np.median(timer.times_s)) * 1e3
        rows.add(f"per_sample_grads_{name}_time_p50", medians[name], "ms")
        stats = {metric: value for metric, value, _ in step_time_statistics(timer.times_s, size)}
        rows.add(f"per_sample_grads_{name}_time_cv", stats["step_time_cv"], "ratio")
        rows.add(f"per_sample_grads_{name}_timed_steps", stats["timed_steps"], "steps")
        rows.add(f"per_sample_grads_{name}_recompilations_timed", timer.recompilations, "compilations")
        rows.add(f"per_sample_grads_{name}_compiled", float(compiled[name]), "flag",
                 note="1: the version ran compiled (the loop: each example's call), 0: eagerly")
        progress.note(f"{name}: median {medians[name]:.3g} ms over {len(timer.times_s)} steps")
    record_repeat_settings(spec, rows)
    rows.add("vectorization_speedup", medians["loop"] / medians["vectorized"], "x")
    progress.note(f"vectorization speed-up {medians['loop'] / medians['vectorized']:.3g}x (loop over vectorised)")
