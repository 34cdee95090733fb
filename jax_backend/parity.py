"""Parity entry point on any node: `python -m jax_backend.parity SPEC.json` writes this framework's logits."""

from __future__ import annotations

import sys

from bench_contract.run import cpu_binding

# Before numpy and the framework start their threads: the task's CPUs, as in the benchmark runs. A bad CPU count
# in the environment ends the check with one sentence.
cpu_binding.bind_task_cpus()
# And the variables that would turn TF32 on behind the precision policy (NGC's images set one), found and cleared.
from bench_contract.measure.device import clear_tf32_overrides  # noqa: E402  (after the signals are caught)

clear_tf32_overrides()
try:
    cpu_binding.current()
except cpu_binding.BindingError as exc:
    sys.exit(f"error: {exc}")

from bench_contract.run.parity import main
from jax_backend.run import JaxBackend

if __name__ == "__main__":
    sys.exit(main(JaxBackend()))
