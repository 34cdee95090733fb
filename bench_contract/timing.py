"""Timing shared by both backends: a step is timed from dispatch until the device has finished it.

The backend passes its own `synchronize` (JAX: block_until_ready; PyTorch: torch.cuda.synchronize on GPU),
so a clock never stops while work is still queued on the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class StepTimer:
    """Times steps after the first `warmup_steps`; warm-up steps run but are not recorded."""

    synchronize: Callable[[Any], None]
    warmup_steps: int
    seen: int = 0
    times_s: list[float] = field(default_factory=list)

    def run(self, step: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        out = step()
        self.synchronize(out)
        elapsed = time.perf_counter() - start
        self.seen += 1
        if self.seen > self.warmup_steps:
            self.times_s.append(elapsed)
        return out


def step_time_statistics(times_s: list[float], samples_per_step: int) -> list[tuple[str, float, str]]:
    """(metric, value, unit) triples for a list of synchronised step times."""
    if not times_s:
        raise ValueError("no timed steps: every step was a warm-up step; lower warmup_steps or train longer")
    t = np.asarray(times_s, dtype=np.float64)
    ms = t * 1e3
    return [
        ("throughput", samples_per_step * len(t) / t.sum(), "samples/s"),
        ("step_time_p50", float(np.percentile(ms, 50)), "ms"),
        ("step_time_p90", float(np.percentile(ms, 90)), "ms"),
        ("step_time_p95", float(np.percentile(ms, 95)), "ms"),
        ("step_time_p99", float(np.percentile(ms, 99)), "ms"),
        ("step_time_mean", float(ms.mean()), "ms"),
        ("step_time_std", float(ms.std(ddof=1)) if len(ms) > 1 else 0.0, "ms"),
        ("timed_steps", float(len(t)), "steps"),
    ]
