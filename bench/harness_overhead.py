"""The harness's overhead (issue 3): the step time a cell records against a bare hand-written loop.

For each framework, `bench/overhead_probe.py` runs in that framework's environment (the orchestrator never
imports jax or torch) and alternates, in one process, the real inference path (`run_inference` with the
backend's inference ops, as a cell runs it) with a bare loop over the same model function, on the same
weights, batch, batch size and precision (fp32). The table shows the medians over the runs of each loop's
per-step median, and harness/bare - 1 from those two medians, against the 2% target.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.overhead_probe import MARKER
from bench.timing import REPO_ROOT, Result
from bench_contract.spec import FRAMEWORK_TITLES as FRAMEWORKS

TARGET_PERCENT = 2.0
# A model that runs in seconds on a 2-core CPU in both frameworks: the MLP at batch 128 on MNIST-shaped inputs.
MODEL, VARIANT, BENCHMARK, BATCH_SIZE = "mlp", "full", "mnist", 128
TIMED_STEPS, WARMUP_STEPS = 100, 5
# Runs of each loop per --repeats: on a shared 2-core machine a burst of other work can slow one 0.3 s run
# several times over, so many short alternating runs, and the median over them, are what cancels it.
PAIRS_PER_REPEAT = 5


@dataclass
class Probe:
    framework: str
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


def run_probe(framework: str, repeats: int) -> Probe:
    python = framework_python(framework)
    if not python.exists():
        raise FileNotFoundError(f"no {framework} environment at {python.parent.parent} (make setup builds it)")
    args = [framework, MODEL, VARIANT, BENCHMARK, BATCH_SIZE, TIMED_STEPS, WARMUP_STEPS,
            repeats * PAIRS_PER_REPEAT]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([str(python), "-m", "bench.overhead_probe", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"the {framework} overhead probe failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return parse_probe_output(proc.stdout)


def rows_for(probe: Probe) -> list[Result]:
    name = FRAMEWORKS.get(probe.framework, probe.framework)
    what = f"{probe.model} batch {probe.batch_size} fp32 {probe.device}"
    runs = len(probe.harness_ms)
    paired = probe.paired_percent
    spread = (f"pair by pair: median {statistics.median(paired):+.1f}%, from {min(paired):+.1f}% to {max(paired):+.1f}%")
    return [
        Result(f"{name} {what}: step time, harness (`run_inference`) / bare loop",
               f"{probe.harness:.3f} / {probe.bare:.3f} ms", "", "",
               f"{name} {probe.version}; medians over {runs} alternating runs of each run's median of "
               f"{probe.timed_steps} steps"),
        Result(f"{name}: harness / bare - 1, same run", f"{probe.overhead_percent:+.2f}%",
               f"|x| <= {TARGET_PERCENT:g}%", verdict(probe.overhead_percent), spread),
    ]


def measure(repeats: int) -> list[Result]:
    results = []
    for framework, name in FRAMEWORKS.items():
        try:
            probe = run_probe(framework, repeats)
        except (OSError, RuntimeError, ValueError) as error:
            results.append(Result(f"{name}: harness / bare - 1", "", f"|x| <= {TARGET_PERCENT:g}%",
                                  f"not measured: {error}"))
            continue
        results += rows_for(probe)
    return results
