"""A stand-in for a framework backend, for load tests: the real runner (spec in, shared initial weights,
one Parquet file published atomically out) around a use case that only records two values, so that hundreds
of array tasks take seconds each instead of a framework's import and training.

Run as `python standin_backend.py SPECS.jsonl INDEX` by a stand-in environment's `python` (standin_env): the
load and fault tests on the local cluster and the soak of `make bench` (bench/soak.py) use it."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

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


def standin_env(env_dir, broken=None, gate=None):
    """A JAX environment whose `python` runs the stand-in backend; it exits 1 at once for the array indices
    listed in the file `broken` (one per line), as a task that crashes before Python starts would. With `gate`
    (a path), every task waits until that file exists, so a test decides when the tasks may finish."""
    bin_dir = env_dir / "jax" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "activate").write_text(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"\n')
    python = bin_dir / "python"
    crash = f'grep -qx "$4" {shlex.quote(str(broken))} && exit 1\n' if broken else ""
    crash += f'while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.2; done\n' if gate else ""
    # Called as `python -m jax_backend.run SPECS INDEX`; the stand-in takes SPECS INDEX.
    python.write_text(f'#!/bin/bash\n{crash}exec {shlex.quote(sys.executable)} '
                      f'{shlex.quote(str(Path(__file__).resolve()))} "$3" "$4"\n')
    python.chmod(0o755)


if __name__ == "__main__":
    sys.exit(runner.main(backend := StandInBackend(), use_case=backend.use_case))
