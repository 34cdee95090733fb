"""Timing shared by both backends: a step is timed from dispatch until the device has finished it.

The backend passes its own `synchronize` (JAX: block_until_ready; PyTorch: torch.cuda.synchronize on GPU),
so a clock never stops while work is still queued on the device. It may also pass `compilations`, a count
of the compilations its framework has done so far in the process, so that a recompilation inside a timed
step (a changed shape, a guard that failed) is counted instead of hiding in the step times.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# A run whose step times have a coefficient of variation (std / mean) above this is flagged as too spread
# to trust (`spread_too_wide`). 10% is a common bar: beyond it, a 5 to 10% difference between frameworks
# is within the noise of one run, and the median itself moves between runs (a shared or throttled node,
# background work, a recompilation).
CV_THRESHOLD = 0.10


@dataclass
class StepTimer:
    """Times steps after the first `warmup_steps`; warm-up steps run but are not recorded."""

    synchronize: Callable[[Any], None]
    warmup_steps: int
    compilations: Callable[[], int] | None = None
    seen: int = 0
    times_s: list[float] = field(default_factory=list)
    timed_total_s: float = 0.0
    recompilations: int = 0  # compilations that happened inside timed steps (read outside the clock)

    def run(self, step: Callable[[], Any]) -> Any:
        timed = self.seen >= self.warmup_steps
        before = self.compilations() if timed and self.compilations is not None else 0
        clock, synchronize = time.perf_counter, self.synchronize  # looked up before the clock starts
        start = clock()
        out = step()
        synchronize(out)
        elapsed = clock() - start
        self.seen += 1
        if timed:
            self.times_s.append(elapsed)
            self.timed_total_s += elapsed
            if self.compilations is not None:
                self.recompilations += self.compilations() - before
        return out

    def measure(self, step: Callable[[], Any], min_iterations: int, min_duration_s: float) -> None:
        """Warm up, then time steps until both at least `min_iterations` steps are timed and the timed steps
        add up to at least `min_duration_s` seconds: a fast step is repeated long enough for the clock's
        resolution and the machine's noise to average out, a slow one still gets enough samples."""
        if min_iterations < 1:
            raise ValueError(f"min_iterations must be at least 1, got {min_iterations}")
        while (self.seen < self.warmup_steps or len(self.times_s) < min_iterations
               or self.timed_total_s < min_duration_s):
            self.run(step)


def fastest_call(call: Callable[[], Any], synchronize: Callable[[Any], None], repeats: int) -> float:
    """Seconds of the fastest of `repeats` synchronised calls, after one untimed call: the calibrations'
    estimate of what the hardware can do, the least disturbed by other work on the machine."""
    synchronize(call())
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        synchronize(call())
        best = min(best, time.perf_counter() - start)
    return best


def step_time_statistics(times_s: list[float], samples_per_step: float) -> list[tuple[str, float, str]]:
    """(metric, value, unit) triples for a list of synchronised step times."""
    if not times_s:
        raise ValueError("no timed steps: every step was a warm-up step; lower warmup_steps or train longer")
    t = np.asarray(times_s, dtype=np.float64)
    ms = t * 1e3
    std = float(ms.std(ddof=1)) if len(ms) > 1 else 0.0
    cv = std / float(ms.mean())
    return [
        ("throughput", samples_per_step * len(t) / t.sum(), "samples/s"),
        ("step_time_p50", float(np.percentile(ms, 50)), "ms"),
        ("step_time_p90", float(np.percentile(ms, 90)), "ms"),
        ("step_time_p95", float(np.percentile(ms, 95)), "ms"),
        ("step_time_p99", float(np.percentile(ms, 99)), "ms"),
        ("step_time_mean", float(ms.mean()), "ms"),
        ("step_time_std", std, "ms"),
        ("step_time_cv", cv, "ratio"),
        # 1 when the spread is too wide to trust this run's numbers (CV above CV_THRESHOLD), else 0.
        ("spread_too_wide", float(cv > CV_THRESHOLD), "flag"),
        ("timed_steps", float(len(t)), "steps"),
        ("timed_duration", float(t.sum()), "s"),
    ]


def record_repeat_settings(spec, rows) -> None:
    """The stopping rule of a repeated-step measurement, on the rows beside what it produced."""
    rows.add("min_iterations", spec.timed_steps, "steps")
    rows.add("min_duration", spec.min_duration_s, "s")
