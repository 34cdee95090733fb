"""The harness's overhead (issues 3 and 15): the step time a cell records against a bare hand-written loop.

For each framework, a probe runs in that framework's environment (the orchestrator never imports jax or
torch) and alternates, in one process, the harness's path with a bare loop over the same model, on the same
weights, batch size and precision (fp32):
- inference (`bench/overhead_probe.py`): `run_inference` with the backend's inference ops, as a cell runs it,
  against a bare loop over the same model function and batch;
- training (`bench/training_overhead_probe.py`, issue 15): `run_training` with the backend's training ops, as a
  cell runs use case 1, against a training step written by hand with the same network and optimizer; JAX, and
  PyTorch eager and compiled.
The table shows the medians over the runs of each loop's per-step median, and harness/bare - 1 from those two
medians, against the 2% target.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from bench.overhead_probe import INFERENCE_MODES, MARKER
from bench.timing import REPO_ROOT, Result
from bench.training_overhead_probe import MODES as TRAINING_MODES
from bench_contract.spec import FRAMEWORK_TITLES as FRAMEWORKS

TARGET_PERCENT = 2.0
# A model that runs in seconds on a 2-core CPU in both frameworks: the MLP on MNIST-shaped inputs.
MODEL, VARIANT, BENCHMARK = "mlp", "full", "mnist"


# The probe of each harness path, run as `python -m PROBE` in the framework's environment.
PROBES = {"run_inference": "bench.overhead_probe", "run_training": "bench.training_overhead_probe"}


@dataclass(frozen=True)
class Check:
    """One probe run: which harness path, in which framework and mode, at which batch and length."""

    path: str  # a key of PROBES
    framework: str
    mode: str
    batch_size: int
    timed_steps: int
    warmup_steps: int

    def args(self, runs: int) -> list[str]:
        mode = [self.mode] if self.path == "run_training" else []  # the inference probe has one mode a framework
        return [self.framework, *mode, MODEL, VARIANT, BENCHMARK, *map(str, (self.batch_size, self.timed_steps,
                                                                          self.warmup_steps, runs))]


# Inference at batch 128 (issue 3); the training step at batch 1024 (issue 15's check), about 20 ms in JAX on two
# cores, so 20 timed steps make a run of under a second.
CHECKS = (
    *(Check("run_inference", framework, mode, 128, 100, 5) for framework, mode in INFERENCE_MODES.items()),
    *(Check("run_training", framework, mode, 1024, 20, 3) for framework, modes in TRAINING_MODES.items()
      for mode in modes),
)
# --quick: each check at a tenth of its timed steps and one pair of runs, to check that the suite runs.
QUICK_CHECKS = tuple(replace(check, timed_steps=max(2, check.timed_steps // 10), warmup_steps=1) for check in CHECKS)
# Runs of each loop per --repeats: on a shared 2-core machine a burst of other work can slow one 0.3 s run
# several times over, so many short alternating runs, and the median over them, are what cancels it.
PAIRS_PER_REPEAT = 5


@dataclass
class Probe:
    framework: str
    mode: str  # jit (JAX), eager or compiled (PyTorch)
    path: str  # the harness's function: run_inference or run_training
    model: str
    batch_size: int
    timed_steps: int
    device: str
    version: str
    harness_ms: list[float]
    bare_ms: list[float]

    @property
    def harness(self) -> float:
        return statistics.median(self.harness_ms)

    @property
    def bare(self) -> float:
        return statistics.median(self.bare_ms)

    @property
    def overhead_percent(self) -> float:
        """harness/bare - 1, in percent, from the two medians of the same run."""
        return (self.harness / self.bare - 1.0) * 100.0

    @property
    def paired_percent(self) -> list[float]:
        """harness/bare - 1 of each adjacent pair of runs, in percent."""
        return [(h / b - 1.0) * 100.0 for h, b in zip(self.harness_ms, self.bare_ms)]


def parse_probe_output(stdout: str) -> Probe:
    """The probe's result: its last `OVERHEAD_PROBE {json}` line."""
    lines = [line for line in stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        raise ValueError("the overhead probe printed no result line")
    data = json.loads(lines[-1][len(MARKER):])
    probe = Probe(**{name: data[name] for name in Probe.__dataclass_fields__})
    if not probe.harness_ms or len(probe.harness_ms) != len(probe.bare_ms) or min(probe.bare_ms) <= 0:
        raise ValueError(f"the overhead probe gave unusable step times: {data}")
    return probe


def verdict(percent: float, target: float = TARGET_PERCENT) -> str:
    """"met" when the harness differs from the bare loop by at most `target` percent, either way."""
    excess = abs(percent) - target
    return "met" if excess <= 0 else f"missed by {excess:.2f}%"


def framework_python(framework: str) -> Path:
    return REPO_ROOT / ".envs" / framework / "bin" / "python"


def run_probe(check: Check, runs: int) -> Probe:
    python = framework_python(check.framework)
    if not python.exists():
        raise FileNotFoundError(f"no {check.framework} environment at {python.parent.parent} (make setup builds it)")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([str(python), "-m", PROBES[check.path], *check.args(runs)],
                          capture_output=True, text=True, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the {label(check.framework, check.mode, check.path)} overhead probe failed "
                           f"({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return parse_probe_output(proc.stdout)


def label(framework: str, mode: str, path: str) -> str:
    """e.g. "PyTorch compiled, training": the framework, its mode, and the harness's path without its run_."""
    return f"{FRAMEWORKS.get(framework, framework)} {mode}, {path.removeprefix('run_')}"


def rows_for(probe: Probe) -> list[Result]:
    name = label(probe.framework, probe.mode, probe.path)
    what = f"{probe.model} batch {probe.batch_size} fp32 {probe.device}"
    runs = len(probe.harness_ms)
    paired = probe.paired_percent
    spread = (f"pair by pair: median {statistics.median(paired):+.1f}%, from {min(paired):+.1f}% to {max(paired):+.1f}%")
    return [
        Result(f"{name} {what}: step time, harness (`{probe.path}`) / bare loop",
               f"{probe.harness:.3f} / {probe.bare:.3f} ms", "", "",
               f"{FRAMEWORKS.get(probe.framework, probe.framework)} {probe.version}; medians over {runs} alternating "
               f"runs of each run's median of {probe.timed_steps} steps"),
        Result(f"{name}: harness / bare - 1, same run", f"{probe.overhead_percent:+.2f}%",
               f"|x| <= {TARGET_PERCENT:g}%", verdict(probe.overhead_percent), spread),
    ]


def measure(repeats: int, quick: bool = False) -> list[Result]:
    results = []
    for check in QUICK_CHECKS if quick else CHECKS:
        try:
            probe = run_probe(check, 1 if quick else repeats * PAIRS_PER_REPEAT)
        except (OSError, RuntimeError, ValueError) as error:
            results.append(Result(f"{label(check.framework, check.mode, check.path)}: harness / bare - 1", "",
                                  f"|x| <= {TARGET_PERCENT:g}%", f"not measured: {error}", failed=True))
            continue
        results += rows_for(probe)
    return results
