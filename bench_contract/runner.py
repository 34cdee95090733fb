"""The part of a backend's entry point that is the same for every framework.

`python -m <framework>_backend.run SPECS.jsonl INDEX` (or `SPEC.json`) reads the spec, lets the backend set up
its device and precision, loads the data and the shared initial weights, runs the use case and writes the rows.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from bench_contract.batch_search import run_search
from bench_contract.data import Dataset, load_dataset
from bench_contract.inference import INFERENCE_USE_CASE, inference_dataset
from bench_contract.device import environment_context, peak_host_rss_bytes
from bench_contract.results import ResultRows, base_context
from bench_contract.spec import JobSpec
from bench_contract.topology import topology_for
from bench_contract.weights import ParamSpec, load_or_create


@dataclass(frozen=True)
class DeviceSetup:
    kind: str  # "gpu" or "cpu": what the framework really runs on
    count: int
    framework_version: str
    precision_policy: str
    # The GPUs this process uses as the framework names them (UUID, PCI bus id or CUDA ordinal), for NVML.
    device_ids: tuple[str, ...] = ()
    # CUDA, cuDNN and NCCL versions as the framework reports them, or "not available: <reason>".
    runtime_versions: dict[str, str] | None = None


class Backend(Protocol):
    framework: str
    libraries: list[str]
    implemented_use_cases: tuple[int, ...]

    def prepare(self, spec: JobSpec) -> DeviceSetup:
        """Choose the device and fix the precision policy before any computation."""

    def param_specs(self, model: str, sample_shape: tuple[int, ...], num_classes: int, variant: str,
                    graph: Any = None) -> list[ParamSpec]:
        """The shared-weights parameter list (PyTorch names and layout) of the model this backend builds
        (graph: the data set's bench_contract.graph.Graph, for the models that hold one)."""

    def run(self, spec: JobSpec, data: Dataset, weights: dict[str, np.ndarray], rows: ResultRows) -> None:
        """Run the spec's use case and add its measurements to `rows`."""


def run_spec(spec: JobSpec, backend: Backend) -> ResultRows:
    if spec.framework != backend.framework:
        raise ValueError(f"spec is for framework {spec.framework!r}, this is the {backend.framework} backend")
    if spec.use_case not in backend.implemented_use_cases:
        raise ValueError(f"use case {spec.use_case} is not implemented in the {backend.framework} backend")
    setup = backend.prepare(spec)
    if spec.use_case == INFERENCE_USE_CASE:
        data = inference_dataset(spec)
    else:
        data = load_dataset(spec.benchmark, spec.data_source, spec.data_dir, spec.synthetic_samples,
                            spec.model_variant)
    # Each backend derives the parameter list from its own model; the weights file is checked against it.
    specs = backend.param_specs(spec.model, data.sample_shape, data.num_classes, spec.model_variant, graph=data.graph)
    weights, sha = load_or_create(spec.init_weights_path, specs, spec.seed)
    context: dict[str, Any] = base_context(spec)
    context.update(
        environment_context(
            device_kind=setup.kind,
            device_count=setup.count,
            framework_version=setup.framework_version,
            libraries=backend.libraries,
            device_ids=setup.device_ids,
            runtime_versions=setup.runtime_versions,
        )
    )
    context["precision_policy"] = setup.precision_policy
    context["init_weights_sha256"] = sha
    rows = ResultRows(context)
    backend.run(spec, data, weights, rows)
    rows.add("peak_host_rss", peak_host_rss_bytes(), "bytes")
    return rows


def main(backend: Backend, argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2) or (len(argv) == 2 and not argv[1].isdigit()):
        print(f"usage: python -m {backend.framework}_backend.run SPEC.json | SPECS.jsonl ARRAY_INDEX", file=sys.stderr)
        return 2
    try:
        spec = JobSpec.read(argv[0], int(argv[1]) if len(argv) == 2 else None)
        # A search cell runs the backend once per try, each in a fresh process (bench_contract.batch_search).
        rows = run_search(spec) if spec.batch_search else run_spec(spec, backend)
        if not topology_for(spec).is_writer:
            # Every rank measured the same global steps; one file per cell, written by rank 0.
            print(f"rank {topology_for(spec).rank}: done; rank 0 writes the results")
            return 0
        path = rows.write(spec.results_path)
    except Exception as exc:
        # The log of a compute job is read later by a person: keep the traceback, end with one plain line.
        traceback.print_exc()
        print(f"error: {backend.framework} backend failed: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(rows.rows)} result rows to {path}")
    return 0
