"""Medians of repeated runs, and a tidy row for the results table."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    step: str
    measured: str  # as printed, with its unit
    target: str = ""
    verdict: str = ""  # "met", "missed by ...", or why it was not measured
    note: str = ""
    # The suite could not measure what it should have here (a probe that failed, a crash): `python -m bench` exits
    # 1. A row not measured for what this machine lacks (no Slurm cluster, no `make test` on record) is not failed.
    failed: bool = False


def median_time(run: Callable[[], object], repeats: int, setup: Callable[[], object] | None = None) -> float:
    """Median wall time of `run` over `repeats` runs; `setup` runs before each, untimed."""
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python main.py ARGS` with this interpreter, as a user runs it; a failure stops the benchmark."""
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "main.py"), *args], capture_output=True, text=True,
                          env=env, cwd=REPO_ROOT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"main.py {' '.join(args[:3])} ... failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def seconds(value: float) -> str:
    return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"


def at_most(value: float, target: float) -> str:
    return "met" if value <= target else f"missed by {value / target:.2f}x"  # 5.19 s against 5 s: 1.04x, not 1.0x
