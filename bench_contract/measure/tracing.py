"""Profiler traces on demand: a few extra steps under the framework's own profiler, after the measurement.

A cell with `trace_steps` > 0 first measures exactly as any other cell; only then does it run that many more
steps under the profiler (jax.profiler or torch.profiler), so the profiler's overhead never reaches the
measured step times. The traced steps' own times are recorded apart (`traced_step_time_*`), and the cell is
marked (`trace_steps` metric, and "trace_steps" in framework_options).

The trace lands beside the cell's result file, in `<result file without .parquet>.trace/`, in Chrome's trace
event format (JSON, gzipped for JAX), which Perfetto (ui.perfetto.dev) and chrome://tracing open; JAX also
writes the XPlane file TensorBoard's profile plugin reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ContextManager

import numpy as np

from bench_contract.results import ResultRows
from bench_contract.spec import JobSpec

# A backend's profiler: given the folder, a context manager that traces what runs inside it into the folder.
Tracer = Callable[[Path], ContextManager[None]]
TRACE_SUFFIXES = (".json", ".json.gz")


def trace_folder(spec: JobSpec) -> Path:
    path = Path(spec.results_path)
    return path.with_name(path.name.removesuffix(".parquet") + ".trace")


def record_trace(spec: JobSpec, rows: ResultRows, step: Callable[[], Any], synchronize: Callable[[Any], None],
                 tracer: Tracer | None) -> None:
    """Run spec.trace_steps more steps under the profiler (nothing when trace_steps is 0)."""
    if not spec.trace_steps:
        return
    if tracer is None:
        raise ValueError("this backend has no profiler for trace_steps")
    folder = trace_folder(spec)
    folder.mkdir(parents=True, exist_ok=True)
    times_ms = []
    with tracer(folder):
        for _ in range(spec.trace_steps):
            start = time.perf_counter()
            synchronize(step())
            times_ms.append((time.perf_counter() - start) * 1e3)
    files = trace_files(folder)
    if not files:
        raise RuntimeError(f"the profiler wrote no trace file into {folder}")
    rows.add("trace_steps", spec.trace_steps, "steps")
    rows.add("traced_step_time_p50", float(np.median(times_ms)), "ms")  # under the profiler: apart, not measured
    print(f"wrote a profiler trace of {spec.trace_steps} steps: {', '.join(str(f) for f in files)}")


def trace_files(folder: Path) -> list[Path]:
    """The Chrome-format trace files under a trace folder (JAX nests them under plugins/profile/<run>/)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
