"""Run inside one framework's environment: the FLOPs its backend counts for one training step of each cell, the
step built as a cell builds it (bench_contract.run.runner.run_spec: the backend's device set-up, the data, the
shared initial weights, then backend.training_ops) and counted by the step's own flops_per_step, as a run records
flops_per_step. Every cell of a framework in one process, so that its import is paid once. Prints one JSON
object, {cell_id: FLOPs per step, null where none were counted}, as its last line.

    python tests/backends/training_flops_probe.py SPECS.json   (a JSON list of one framework's job specs)
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from bench_contract.run.runner import run_spec
from bench_contract.spec import JobSpec

BACKENDS = {"jax": "JaxBackend", "torch": "TorchBackend"}


def without_xla_compilation() -> None:
    """JAX's ops compile their step ahead of time, but its count reads the jaxpr traced before the compilation
    (jax_backend.run.JaxOps.flops_per_step), which XLA does not change. XLA's compilations were 95% of this probe's
    time over the catalog (two minutes on a 2-core machine), so the lowered program stands in for the compiled one
    here: the same trace, and a cost analysis for the bytes, which this probe does not read."""
    import jax.stages

    jax.stages.Lowered.compile = lambda self, *args, **kwargs: self


def counted_flops(specs: list[JobSpec]) -> dict[str, float | None]:
    found: dict[str, float | None] = {}

    def count_one_step(spec, backend, data, weights, rows) -> None:
        """The use case run_spec runs here: the training step built, its first batch counted, nothing trained."""
        ops = backend.training_ops(spec, data, weights, rows)
        batch = ops.to_device(data.x_train[:spec.batch_size], data.y_train[:spec.batch_size])
        found[spec.cell_id] = ops.flops_per_step(batch).per_step

    for spec in specs:
        backend = getattr(importlib.import_module(f"{spec.framework}_backend.run"), BACKENDS[spec.framework])()
        run_spec(spec, backend, use_case=count_one_step)
    return found


if __name__ == "__main__":
    specs = [JobSpec.from_json(text) for text in json.loads(Path(sys.argv[1]).read_text())]
    if specs and specs[0].framework == "jax":
        without_xla_compilation()
    print(json.dumps(counted_flops(specs)))
