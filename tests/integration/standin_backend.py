"""A stand-in for a framework backend, for load tests: the real runner (spec in, shared initial weights,
one Parquet file published atomically out) around a use case that only records two values, so that hundreds
of array tasks take seconds each instead of a framework's import and training.

Run as `python standin_backend.py SPECS.jsonl INDEX` by a stand-in environment's `python`."""

from __future__ import annotations

import sys
import time

from bench_contract.models.weights import ParamSpec
from bench_contract.run import runner


class StandInBackend:
    framework = "jax"
    libraries = ["numpy", "pyarrow"]

    def prepare(self, spec):
        return runner.DeviceSetup(kind="cpu", count=1, framework_version="stand-in", precision_policy="fp32")

    def param_specs(self, model, sample_shape, num_classes, variant, graph=None):
        return [ParamSpec("w", (4, 4), "zeros")]

    def use_case(self, spec, backend, data, weights, rows):
        """Stands in for the contract's use-case flow (runner.run_use_case)."""
        start = time.perf_counter()
        rows.add("train_loss", 1.0, "nats", epoch=0, step=0)
        rows.add("throughput", spec.batch_size / max(time.perf_counter() - start, 1e-9), "samples/s")


if __name__ == "__main__":
    sys.exit(runner.main(backend := StandInBackend(), use_case=backend.use_case))
