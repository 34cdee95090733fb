"""The harness's overhead: the step time a cell records against a bare hand-written loop.

For each framework, a probe runs in that framework's environment (the orchestrator never imports jax or
torch) and alternates, in one process, the harness's path with a bare loop over the same model, on the same
weights, batch size and precision (fp32):
- inference (`bench/overhead_probe.py`): `run_inference` with the backend's inference ops, as a cell runs it,
  against a bare loop over the same model function and batch; the MLP and the small CNN at batch 1 and 128;
- training (`bench/training_overhead_probe.py`): `run_training` with the backend's training ops, as a cell runs
  use case 1, against a training step written by hand with the same network and optimizer; JAX, and PyTorch eager
  and compiled.
The table shows the medians over the runs of each loop's per-step median, and the verdict's figure: the median
over the alternating pairs of runs of harness/bare - 1 (and of harness - bare in microseconds a step), with its
95% interval, against 2% (or 2 us a step at batch 1).

Each probe runs bound to one CPU (`probe_cpu`), so both of its loops run the framework on one intra-op thread.
What the probe compares is what each loop does around the same call; a pass spread over several CPUs adds the
machine's thread scheduling, which is no property of either loop. On this project's 2-vCPU machines it is bimodal:
JAX's MLP at batch 128 on both vCPUs ran its passes at about 0.5 or about 0.75 ms, in streaks of tens of passes,
and a run's median fell on either side, so that the harness came out 11% and 18% faster than the bare loop in two
runs of this suite (the same compiled call in both). Bound to one CPU, the same process gave 0.7450 ms against
0.7450 (median of 30 pairs -0.04%), and every check of a whole suite run was within its target.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench.overhead_probe import INFERENCE_MODES, MARKER
from bench.timing import REPO_ROOT, Result
from bench.training_overhead_probe import MODES as TRAINING_MODES
from bench_contract.spec import FRAMEWORK_TITLES as FRAMEWORKS

TARGET_PERCENT = 2.0
# At batch 1 a small model's pass takes tens of microseconds, where 2% is about a microsecond: the target there is
# 2% or this many microseconds a step, whichever is larger.
TARGET_FLOOR_US = 2.0
# Alternating pairs of runs of each check at the least: the median of their differences is the verdict's figure.
MIN_PAIRS = 25
# The models: the MLP and the small CNN, both on MNIST-shaped inputs, each a pass of well under a second on 2 cores.
VARIANT, BENCHMARK = "full", "mnist"


# The probe of each harness path, run as `python -m PROBE` in the framework's environment.
PROBES = {"run_inference": "bench.overhead_probe", "run_training": "bench.training_overhead_probe"}


@dataclass(frozen=True)
class Check:
    """One probe run: which harness path, in which framework and mode, on which model, at which batch and length."""

    path: str  # a key of PROBES
    framework: str
    mode: str
    model: str
    batch_size: int
    timed_steps: int
    warmup_steps: int

    def args(self, runs: int) -> list[str]:
        mode = [self.mode] if self.path == "run_training" else []  # the inference probe has one mode a framework
        return [self.framework, *mode, self.model, VARIANT, BENCHMARK, *map(str, (self.batch_size, self.timed_steps,
                                                                               self.warmup_steps, runs))]

    @property
    def floor_us(self) -> float:
        return TARGET_FLOOR_US if self.batch_size == 1 else 0.0


# Inference at batch 1 (where latency is quoted) and 128, MLP and CNN; a run is about 20 ms to 0.5 s here (the CNN
# at batch 128 is about 40 ms a pass, so 10 of them). The training step at batch 1024, about 20 ms in JAX on two
# cores, so 20 timed steps make a run of under a second.
INFERENCE_STEPS = {("mlp", 1): 200, ("mlp", 128): 100, ("cnn", 1): 100, ("cnn", 128): 10}
# Warm-up passes of each inference run, both loops alike. Each bare loop runs right after a harness run's FLOP count
# and bookkeeping, and the passes after it stay slow for a while: JAX's CNN at batch 128, after run_inference, took
# 4.28 ms a pass with 5 warm-up passes, 4.30 with 6 and 4.07 with 20, against the harness's 4.05 (8 runs each, one
# process, this project's AMD machine). 20 leave that behind in both loops.
INFERENCE_WARMUP = 20
CHECKS = (
    *(Check("run_inference", framework, mode, model, batch, steps, INFERENCE_WARMUP)
      for (model, batch), steps in INFERENCE_STEPS.items() for framework, mode in INFERENCE_MODES.items()),
    *(Check("run_training", framework, mode, "mlp", 1024, 20, 3) for framework, modes in TRAINING_MODES.items()
      for mode in modes),
)
# --quick: each check at a tenth of its timed steps and one pair of runs, to check that the suite runs.
QUICK_CHECKS = tuple(replace(check, timed_steps=max(2, check.timed_steps // 10), warmup_steps=1) for check in CHECKS)
# Pairs of runs per --repeats (at least MIN_PAIRS): on a shared 2-core machine a burst of other work can slow one
# 0.3 s run several times over, so many short alternating runs, and the median over them, are what cancels it.
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

    @property
    def paired_us(self) -> list[float]:
        """harness - bare of each adjacent pair of runs, in microseconds a step."""
        return [(h - b) * 1e3 for h, b in zip(self.harness_ms, self.bare_ms)]


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


def verdict(percent: float, target: float = TARGET_PERCENT, difference_us: float | None = None,
            floor_us: float = 0.0) -> str:
    """"met" when the harness differs from the bare loop by at most `target` percent either way, or by at most
    `floor_us` microseconds a step where a floor applies (batch 1)."""
    if difference_us is not None and floor_us > 0 and abs(difference_us) <= floor_us:
        return "met"
    excess = abs(percent) - target
    return "met" if excess <= 0 else f"missed by {excess:.2f}%"


def framework_python(framework: str) -> Path:
    return REPO_ROOT / ".envs" / framework / "bin" / "python"


def probe_cpu() -> int | None:
    """The CPU every probe runs on: the last this process may use (the first takes more of the kernel's
    interrupts), or None where the OS has no CPU affinity."""
    return max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def on_one_cpu(cpu: int | None):
    """A preexec_fn that binds the child process to `cpu` before it starts: both backends size their intra-op
    threads from the affinity they start with (XLA's CPU client, and torch.set_num_threads from cpu_binding)."""
    return None if cpu is None else lambda: os.sched_setaffinity(0, {cpu})


def run_probe(check: Check, runs: int) -> Probe:
    python = framework_python(check.framework)
    if not python.exists():
        raise FileNotFoundError(f"no {check.framework} environment at {python.parent.parent} (make setup builds it)")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([str(python), "-m", PROBES[check.path], *check.args(runs)],
                          capture_output=True, text=True, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, check=False,
                          preexec_fn=on_one_cpu(probe_cpu()))
    if proc.returncode != 0:
        raise RuntimeError(f"the {label(check.framework, check.mode, check.path)} overhead probe failed "
                           f"({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return parse_probe_output(proc.stdout)


def label(framework: str, mode: str, path: str) -> str:
    """e.g. "PyTorch compiled, training": the framework, its mode, and the harness's path without its run_."""
    return f"{FRAMEWORKS.get(framework, framework)} {mode}, {path.removeprefix('run_')}"


def cpu_words(cpu: int | None) -> str:
    return f"the probe bound to CPU {cpu}" if cpu is not None else "the probe unbound (no CPU affinity here)"


def rows_for(probe: Probe, floor_us: float = 0.0) -> list[Result]:
    """The step times, and the verdict on the median of the pairs' differences with its 95% interval."""
    from orchestrator.results.baseline import median_interval

    name = label(probe.framework, probe.mode, probe.path)
    what = f"{probe.model} batch {probe.batch_size} fp32 {probe.device}"
    runs = len(probe.harness_ms)
    percent, us = statistics.median(probe.paired_percent), statistics.median(probe.paired_us)
    interval = median_interval(np.asarray(probe.paired_percent))
    within = f"95% interval {interval[0]:+.2f}% to {interval[1]:+.2f}%; " if interval else ""
    target = f"|x| <= {TARGET_PERCENT:g}%" + (f" or {floor_us:g} us" if floor_us else "")
    return [
        Result(f"{name} {what}: step time, harness (`{probe.path}`) / bare loop",
               f"{probe.harness:.3f} / {probe.bare:.3f} ms", "", "",
               f"{FRAMEWORKS.get(probe.framework, probe.framework)} {probe.version}; medians over {runs} alternating "
               f"runs of each run's median of {probe.timed_steps} steps; {cpu_words(probe_cpu())}"),
        Result(f"{name} {what}: harness / bare - 1, median of {runs} pairs", f"{percent:+.2f}% ({us:+.1f} us)",
               target, verdict(percent, difference_us=us, floor_us=floor_us),
               f"{within}pairs from {min(probe.paired_percent):+.1f}% to {max(probe.paired_percent):+.1f}%; "
               f"ratio of the medians {probe.overhead_percent:+.2f}%"),
    ]


def measure(repeats: int, quick: bool = False) -> list[Result]:
    results = []
    for check in QUICK_CHECKS if quick else CHECKS:
        try:
            probe = run_probe(check, 1 if quick else max(MIN_PAIRS, repeats * PAIRS_PER_REPEAT))
        except (OSError, RuntimeError, ValueError) as error:
            results.append(Result(f"{label(check.framework, check.mode, check.path)} {check.model} batch "
                                  f"{check.batch_size}: harness / bare - 1", "", f"|x| <= {TARGET_PERCENT:g}%",
                                  f"not measured: {error}", failed=True))
            continue
        results += rows_for(probe, check.floor_us)
    return results
