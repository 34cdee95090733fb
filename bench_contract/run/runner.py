"""The part of a backend's entry point that is the same for every framework.

`python -m <framework>_backend.run SPECS.jsonl INDEX` (or `SPEC.json`) reads the spec, lets the backend set up
its device and precision, loads the data and the shared initial weights, runs the use case and writes the rows.

A task that fails still says why: an exception (an out-of-memory error named as such) or a stop signal
(SIGTERM from scancel, requeue, preemption or the time limit; SIGUSR1 or SIGTERM as the warning that the
cluster profile asks Slurm for) becomes a failure row (bench_contract.run.failure) that records how far the task
got, and the exit code stays non-zero.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bench_contract.data.datasets import Dataset
from bench_contract.data.loading import load_dataset
from bench_contract.measure.device import (
    DeviceSetup,
    environment_context,
    peak_host_rss_bytes,
    refuse_cpu_beside_gpu,
)
from bench_contract.measure.efficiency import Efficiency
from bench_contract.models.vision import RANDOM_REGULARISERS
from bench_contract.models.weights import ParamSpec, load_or_create
from bench_contract.results import CONTEXT_NAMES, ENVIRONMENT_KIND_VARIABLE, ResultRows, not_available
from bench_contract.run import cpu_binding, stop_signals
from bench_contract.run.batch_search import run_search, try_efficiency
from bench_contract.run.failure import clear_failure, exception_reason, write_failure
from bench_contract.run.inference import InferenceOps, inference_dataset, run_inference
from bench_contract.run.precision import record_matmul_probe
from bench_contract.run.stop_signals import STOP_SIGNALS
from bench_contract.run.topology import topology_for
from bench_contract.run.training import PerSampleOps, TrainingOps, record_dp_settings, run_training, time_vectorization
from bench_contract.sequential import Rule
from bench_contract.tuning import OUT_OF_THE_BOX
from bench_contract.spec import (
    FIRST_STAGE,
    FRAMEWORK_TITLES,
    INFERENCE_USE_CASE,
    JobSpec,
    pair_order,
)


class Backend(Protocol):
    """A framework's operations. The flow (spec, device, data, weights, use case, rows) is this module's."""

    framework: str
    libraries: list[str]
    no_gpu_cause: str  # why this framework would see no GPU on a node with one, and what to change

    def prepare(self, spec: JobSpec) -> DeviceSetup:
        """Choose the device and fix the precision policy before any computation."""

    def param_specs(self, model: str, sample_shape: tuple[int, ...], num_classes: int, variant: str,
                    graph: Any = None) -> list[ParamSpec]:
        """The shared-weights parameter list (PyTorch names and layout) of the model this backend builds
        (graph: the data set's bench_contract.data.graph.Graph, for the models that hold one)."""

    def efficiency(self, spec: JobSpec) -> Efficiency:
        """The energy meter and the peak FLOP/s and bandwidth of the devices `prepare` chose."""

    def inference_ops(self, spec: JobSpec, weights: dict[str, np.ndarray], sample_shape: tuple[int, ...],
                      num_classes: int) -> InferenceOps:
        """The model's forward pass on the device, from the shared weights."""

    def training_ops(self, spec: JobSpec, data: Dataset, weights: dict[str, np.ndarray],
                     rows: ResultRows) -> TrainingOps:
        """The model built from the shared weights, with the spec's optimizer and step (plain or DP-SGD,
        data-parallel where the spec says so); records the parameter count and any compile time."""

    def per_sample_ops(self, spec: JobSpec, ops: TrainingOps) -> PerSampleOps:
        """Per-sample gradients of the trained model, vectorised and as a loop, for timing the vectorisation."""

    def trace(self, folder: Path) -> AbstractContextManager[None]:
        """The framework's own profiler, writing its trace into `folder`."""

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a @ b of two float32 arrays on the device `prepare` chose, with the precision it set."""

    def reset_device_memory(self) -> None:
        """Start the peak device memory count here, where the framework allows it."""

    def add_device_memory(self, rows: ResultRows) -> None:
        """Record the peak device memory of this cell (or why it is not available)."""

    def finish(self) -> None:
        """Release what `prepare` set up across processes (a process group)."""


UseCase = Callable[[JobSpec, Backend, Dataset, dict[str, np.ndarray], ResultRows], None]


def run_use_case(spec: JobSpec, backend: Backend, data: Dataset, weights: dict[str, np.ndarray],
                 rows: ResultRows) -> None:
    """The spec's use case, with the backend's operations: training (plain or DP-SGD, on one device or several), or
    the forward pass of a use case that trains nothing."""
    if spec.case.trains:
        run_training_case(spec, backend, data, weights, rows)
    else:
        run_inference_case(spec, backend, data, weights, rows)
    backend.add_device_memory(rows)


def run_inference_case(spec: JobSpec, backend: Backend, data: Dataset, weights: dict[str, np.ndarray],
                       rows: ResultRows) -> None:
    record_matmul_probe(rows, backend.matmul)  # what the precision setup really gave a float32 matmul
    ops = backend.inference_ops(spec, weights, data.sample_shape, data.num_classes)
    efficiency = measurement_efficiency(spec, backend)
    backend.reset_device_memory()
    run_inference(spec, data.x_train, ops, rows, efficiency, tracer=backend.trace)


def run_training_case(spec: JobSpec, backend: Backend, data: Dataset, weights: dict[str, np.ndarray],
                      rows: ResultRows) -> None:
    refuse_inference_options(spec)
    record_matmul_probe(rows, backend.matmul)  # what the precision setup really gave a float32 matmul
    ops = backend.training_ops(spec, data, weights, rows)
    private = spec.case.per_sample
    if private:
        record_dp_settings(spec, rows)
    efficiency = measurement_efficiency(spec, backend)
    backend.reset_device_memory()
    run_training(spec, data, ops, rows, topology_for(spec), efficiency, tracer=backend.trace)
    if private:
        time_vectorization(spec, data, backend.per_sample_ops(spec, ops), rows)
    backend.finish()


def refuse_inference_options(spec: JobSpec) -> None:
    """channels_last is built for inference only: a training spec written by hand with it would be recorded as
    such (framework_options) and run contiguous. The orchestrator refuses it at plan time already."""
    if spec.uses_channels_last():
        raise ValueError(f"channels_last is implemented for inference (use case {INFERENCE_USE_CASE}) only, not for "
                         f"training (use case {spec.use_case})")


def measurement_efficiency(spec: JobSpec, backend: Backend) -> Efficiency:
    # A batch-search try measures only whether the batch fits: no meter, no calibration arrays in its memory.
    return try_efficiency(spec) or backend.efficiency(spec)


class Terminated(BaseException):
    """Raised in the main thread by a stop signal. A BaseException, so that no `except Exception` in a
    backend or a library swallows it on its way to main()."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.name = signal.Signals(signum).name


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


@dataclass
class Progress:
    """How far the task got, for the failure row: the phase, and the training steps done out of all."""

    phase: str = "reading the job spec"
    context: dict[str, Any] = field(default_factory=dict)
    rows: ResultRows | None = None
    steps_total: int | None = None

    def steps_done(self) -> int | None:
        # The training loop records the loss of every step with its index: the last index + 1 were done.
        steps = [row["step"] for row in self.rows.rows if row["step"] is not None] if self.rows else []
        return max(steps) + 1 if steps else None

    def where(self) -> str:
        done = self.steps_done()
        if self.steps_total is not None and self.phase == "running the use case":
            return f"at step {done or 0}/{self.steps_total}"
        return f"while {self.phase}" + (f" (after step {done})" if done else "")


def compile_words(spec: JobSpec) -> str:
    """torch.compile and its mode; reduce-overhead is said to replay CUDA graphs, which it does on a GPU only."""
    words = {"default": "torch.compile", "reduce-overhead": "torch.compile, mode reduce-overhead (CUDA graphs on a GPU)"}
    mode = spec.compile_mode()
    return words.get(mode, f"torch.compile, mode {mode}")


def framework_options(spec: JobSpec) -> str:
    """How the framework executed the model, as JSON: PyTorch eager or torch.compile, memory format; JAX jit."""
    if spec.framework == "torch":
        options = {"mode": compile_words(spec) if spec.compile_mode() is not None else "eager",
                   "memory_format": "channels_last" if spec.uses_channels_last() else "contiguous"}
    else:
        options = {"mode": "jit, compiled ahead of time"}
    if spec.model in RANDOM_REGULARISERS:
        options["random_regularisers"] = f"off in both frameworks (published: {RANDOM_REGULARISERS[spec.model]})"
    if spec.tuning != OUT_OF_THE_BOX:  # the tuning level, its budget and the configuration (bench_contract.tuning)
        options["tuning"] = {"level": spec.tuning, "budget": spec.tune}
        options["tuned"] = spec.tuned
    if spec.trace_steps:
        options["trace_steps"] = f"{spec.trace_steps} steps traced by the profiler after the measurement"
    return json.dumps(options, sort_keys=True)


# The context columns that are JobSpec fields of the same name and value. Two such fields are recorded as they came
# to run instead: xla_flags as the XLA_FLAGS that resulted (environment_context), dp_engine as the engine that
# computed (JobSpec.dp_engine_columns, named also where the spec leaves it to the default).
SPEC_COLUMNS = tuple(name for name in CONTEXT_NAMES if name in {f.name for f in dataclasses.fields(JobSpec)}
                     and name not in ("xla_flags", "dp_engine"))


def base_context(spec: JobSpec) -> dict[str, Any]:
    """The identity columns that come from the spec; the backend adds the environment ones."""
    engine, engine_mode = spec.dp_engine_columns()
    return {name: getattr(spec, name) for name in SPEC_COLUMNS} | {
        "framework_options": framework_options(spec),
        "data_fingerprint": "",  # once the data is loaded (run): a failure before it has seen none
        # Said by the script that started the task (the environment is chosen there, not in the spec).
        "environment_kind": os.environ.get(ENVIRONMENT_KIND_VARIABLE)
        or not_available(f"{ENVIRONMENT_KIND_VARIABLE} is not set: the task was not started by a rendered script"),
        "pair_order": ",".join(pair_order(spec.trial)) if spec.paired else "",
        "trial_rule": Rule(FIRST_STAGE, spec.target_interval).label() if spec.target_interval else "",
        "settings": spec.measured_settings(),
        "dp_engine": engine,
        "dp_engine_mode": engine_mode,
        "precision_census": "",  # a training step's or a forward pass's, once it ran (run_training, run_inference)
        "node_state": "",  # the node at the measured window's two ends, once it was measured (NodeState.record)
        "attention_kernel": "",  # the fused attention kernel of a model with one, once a step ran (run_training)
    }


def binding_context(binding: cpu_binding.Binding, setup: DeviceSetup) -> dict[str, Any]:
    """The CPU binding columns: the CPUs both frameworks of a cell are bound to, and the framework's threads."""
    return {
        "bound_cpus": binding.count or None,
        "bound_cpu_list": binding.cpu_list() if binding.cpus else not_available(binding.reason),
        "cpu_binding": binding.reason,
        "intra_op_threads": setup.intra_op_threads,
        "intra_op_threads_source": setup.threads_source or not_available("the backend does not report its threads"),
    }


def run_spec(spec: JobSpec, backend: Backend, progress: Progress | None = None,
             use_case: UseCase = run_use_case) -> ResultRows:
    progress = progress if progress is not None else Progress()
    progress.context = base_context(spec)
    if spec.framework != backend.framework:
        raise ValueError(f"spec is for framework {spec.framework!r}, this is the {backend.framework} backend")
    progress.phase = "preparing the device"
    binding = cpu_binding.current()  # a bad CPU count in the environment fails here, with a failure row
    setup = backend.prepare(spec)
    refuse_cpu_beside_gpu(FRAMEWORK_TITLES.get(backend.framework, backend.framework), spec.device, setup.kind,
                          getattr(backend, "no_gpu_cause", "it does not find the GPU"))
    progress.phase = "loading the data"
    if spec.case.trains:
        data = load_dataset(spec.benchmark, spec.data_source, spec.data_dir, spec.synthetic_samples,
                            spec.model_variant, spec.model)
        progress.steps_total = len(data.x_train) // spec.batch_size * spec.epochs
    else:
        data = inference_dataset(spec)
    progress.phase = "loading the initial weights"
    # Each backend derives the parameter list from its own model; the weights file is checked against it.
    specs = backend.param_specs(spec.model, data.sample_shape, data.num_classes, spec.model_variant, graph=data.graph)
    weights, sha = load_or_create(spec.init_weights_path, specs, spec.seed)
    context: dict[str, Any] = base_context(spec)
    context.update(environment_context(setup, topology_for(spec).device_count, backend.libraries))
    context.update(binding_context(binding, setup))
    context["precision_policy"] = setup.precision_policy
    context["init_weights_sha256"] = sha
    context["data_fingerprint"] = data.fingerprint()
    rows = ResultRows(context)
    progress.context, progress.rows, progress.phase = context, rows, "running the use case"
    use_case(spec, backend, data, weights, rows)
    rows.add("peak_host_rss", peak_host_rss_bytes(), "bytes")
    return rows


def main(backend: Backend, argv: list[str] | None = None, use_case: UseCase = run_use_case) -> int:
    """The entry point of a backend process; `use_case` is replaced only by the tests' stand-in backends."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2) or (len(argv) == 2 and not argv[1].isdigit()):
        print(f"usage: python -m {backend.framework}_backend.run SPEC.json | SPECS.jsonl ARRAY_INDEX", file=sys.stderr)
        return 2
    progress = Progress()
    spec: JobSpec | None = None
    failed: dict[str, Any] | None = None
    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, _raise_terminated)
        spec = JobSpec.read(argv[0], int(argv[1]) if len(argv) == 2 else None)
        progress.context = base_context(spec)  # from here on, a failure row names its cell, whatever the phase
        if stop_signals.received:  # while the backend imported its framework, before these handlers were set
            progress.phase = "importing the framework"
            raise Terminated(stop_signals.received[0])
        # A search cell runs the backend once per try, each in a fresh process (bench_contract.run.batch_search).
        rows = search_rows(spec, progress) if spec.batch_search else run_spec(spec, backend, progress, use_case)
        if not topology_for(spec).is_writer:
            # Every rank measured the same global steps; one file per cell, written by rank 0.
            print(f"rank {topology_for(spec).rank}: done; rank 0 writes the results")
            return 0
        progress.phase = "writing the results"
        path = rows.write(spec.results_path)
        progress.phase = "done"
        clear_failure(spec.results_path)
    except Terminated as stop:
        for signum in STOP_SIGNALS:  # a second signal (Slurm's SIGTERM after its warning) must not cut this short
            signal.signal(signum, signal.SIG_IGN)
        if progress.phase == "done":  # the result was published before the signal came: it stands
            return 0
        code = 128 + stop.signum
        reason = f"terminated by {stop.name} {progress.where()}"
        record_failure(spec, progress, status="terminated", reason=reason, exit_code=code, signal=stop.name)
        print(f"error: {backend.framework} backend {reason}", file=sys.stderr)
        return code
    except Exception as exc:  # noqa: BLE001  any error of a task ends in its failure row
        # The log of a compute job is read later by a person: keep the traceback, end with one plain line.
        traceback.print_exc()
        failed = {"reason": f"{exception_reason(exc)} ({progress.where()})", "error": traceback.format_exc(),
                  "line": f"error: {backend.framework} backend failed: {exc}"}
    if failed is not None:
        record_failure_after_leaving(spec, progress, failed)
        return 1
    print(f"wrote {len(rows.rows)} result rows to {path}")
    return 0


def search_rows(spec: JobSpec, progress: Progress) -> ResultRows:
    """The rows of a batch-search cell; should it fail, its failure row names the cell and the search."""
    progress.context, progress.phase = base_context(spec), "searching for the largest batch that fits"
    return run_search(spec)


def record_failure_after_leaving(spec: JobSpec | None, progress: Progress, failed: dict[str, Any]) -> None:
    """Record a failure once the exception is gone. Its traceback's frames hold the failed step's arrays: after an
    out of memory under a memory limit (a batch search's try), writing the row beside them found no memory, and
    pyarrow's encoder spun for good instead of raising (seen in a CI run, a try alive for 10 minutes)."""
    gc.collect()
    record_failure(spec, progress, status="failed", reason=failed["reason"], exit_code=1, error=failed["error"])
    print(failed["line"], file=sys.stderr)


def record_failure(spec: JobSpec | None, progress: Progress, **failure: Any) -> None:
    """Publish the failure row where the spec's result would have gone. Without a spec there is no such
    place, and only one rank (the writer) records the cell's failure; the log holds the rest."""
    if spec is None or not spec.results_path or not topology_for(spec).is_writer:
        return
    try:
        path = write_failure(spec.results_path, progress.context, phase=progress.phase,
                             steps_done=progress.steps_done(), steps_total=progress.steps_total, **failure)
    except Exception as exc:  # noqa: BLE001  the task is failing already; say so and keep the first error
        print(f"could not write the failure row: {exc}", file=sys.stderr)
        return
    print(f"wrote the failure row to {path}", file=sys.stderr)
