"""A stand-in for a framework backend, for load tests: the real runner (spec in, shared initial weights,
one Parquet file published atomically out) around a use case that only records two values, so that hundreds
of array tasks take seconds each instead of a framework's import and training.

Run as `python standin_backend.py FRAMEWORK [--ledger FILE] SPECS.jsonl INDEX` by a stand-in environment's
`python` (standin_env): the load and fault tests on the local cluster and the soak of `make bench` (bench/soak.py)
use it. With a ledger, each run that published its result appends one line there, with an id no other run has:
a cell that ran twice leaves two lines, where its result file (the same path for both runs) and so the merged
dataset keep only one run."""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
import uuid
from pathlib import Path

from bench_contract.models.weights import ParamSpec
from bench_contract.run import runner
from bench_contract.spec import JobSpec

FRAMEWORKS = ("jax", "torch")


class StandInBackend:
    libraries = ["numpy", "pyarrow"]

    def __init__(self, framework: str) -> None:
        self.framework = framework

    def prepare(self, spec):
        return runner.DeviceSetup(kind="cpu", count=1, framework_version="stand-in", precision_policy="fp32")

    def param_specs(self, model, sample_shape, num_classes, variant, graph=None):
        return [ParamSpec("w", (4, 4), "zeros")]

    def use_case(self, spec, backend, data, weights, rows):
        """Stands in for the contract's use-case flow (runner.run_use_case)."""
        start = time.perf_counter()
        rows.add("train_loss", 1.0, "nats", epoch=0, step=0)
        rows.add("throughput", spec.batch_size / max(time.perf_counter() - start, 1e-9), "samples/s")


def standin_env(env_dir, broken=None, gate=None, ledger=None):
    """A JAX and a PyTorch environment whose `python` runs the stand-in backend when called as a backend
    (`python -m <framework>_backend.run SPECS INDEX`) and the orchestrator's interpreter otherwise (a paired job's
    driver). A task exits 1 at once for the array indices listed in the file `broken` (one per line), as a task that
    crashes before Python starts would. With `gate` (a path), every task waits until that file exists, so a test
    decides when the tasks may finish. With `ledger` (a path), each run that published its result says so there
    (record_run)."""
    for framework in FRAMEWORKS:
        bin_dir = env_dir / framework / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "activate").write_text(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"\n')
        backend = [framework] + (["--ledger", str(ledger)] if ledger else [])
        crash = f'  grep -qx "$4" {shlex.quote(str(broken))} && exit 1\n' if broken else ""
        crash += f'  while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.2; done\n' if gate else ""
        python = bin_dir / "python"
        python.write_text(
            f'#!/bin/bash\nif [ "${{1:-}}" = -m ] && [ "${{2:-}}" = {framework}_backend.run ]; then\n{crash}'
            f'  exec {shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} '
            f'{shlex.join(backend)} "$3" "$4"\nfi\nexec {shlex.quote(sys.executable)} "$@"\n')
        python.chmod(0o755)


def record_run(ledger: Path, specs: str, index: str) -> None:
    """Append this run's line to the ledger: its own id, its cell and trial, and the Slurm job that ran it. One
    write of one short line to a file opened for appending: lines of runs at once never mix."""
    spec = JobSpec.read(specs, int(index))
    line = json.dumps({"run": uuid.uuid4().hex, "campaign": spec.campaign, "cell_id": spec.cell_id,
                       "trial": spec.trial, "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
                       "host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}) + "\n"
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    framework, rest = argv[0], argv[1:]
    ledger = None
    if rest[:1] == ["--ledger"]:
        ledger, rest = Path(rest[1]), rest[2:]
    backend = StandInBackend(framework)
    code = runner.main(backend, rest, use_case=backend.use_case)
    if code == 0 and ledger is not None:
        record_run(ledger, *rest)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
