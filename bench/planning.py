"""Expanding, validating and rendering a 10,000-cell matrix, and writing its campaign (scripts, specs, manifest).

10,000 cells: MNIST on synthetic data, batch sizes 1..5,000, both frameworks. A dry run submits nothing.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from bench.timing import Result, at_most, cli, median_time, seconds

TARGET_S = 1.0
BATCHES = 5000  # x 2 frameworks = 10,000 cells
QUICK_BATCHES = 50  # --quick: 100 cells, to check that the suite runs
SAMPLES = 100_000  # synthetic samples: the training split must hold the largest batch


def plan(results: Path, scripts: Path, batches: int, dry_run: bool = True, profile=None, executor="slurm",
         report=lambda line: None):
    """The default command's own flow (orchestrator.run.launch), called in this process."""
    from orchestrator.plan.profile import ClusterProfile
    from orchestrator.plan.settings import RunSettings
    from orchestrator.run.launch import LaunchRequest, launch

    settings = RunSettings(epochs=1, learning_rate=0.01, optimizer="sgd", seed=0, warmup_steps=5,
                           data_source="synthetic", data_dir=None, synthetic_samples=SAMPLES, device="auto")
    request = LaunchRequest("mnist", 1, [], [], list(range(1, batches + 1)), [], settings,
                            profile or ClusterProfile(), executor, dry_run, False, results, scripts, "bench")
    return launch(request, report=report)


def measure(repeats: int, quick: bool = False) -> list[Result]:
    count = QUICK_BATCHES if quick else BATCHES
    work = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    try:
        in_process = median_time(lambda: plan(work / "r", work / "s", count), repeats)
        batches = ",".join(str(b) for b in range(1, count + 1))
        whole = median_time(lambda: cli("--benchmark", "mnist", "--use-case", "1", "--synthetic",
                                        "--synthetic-samples", str(SAMPLES), "--batch-sizes", batches, "--dry-run",
                                        "--results-dir", str(work / "r"), "--scripts-dir", str(work / "s")), repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cells, target = 2 * count, (f"<= {TARGET_S} s" if count == BATCHES else "")  # the target is for 10,000
    return [
        Result(f"plan + render {cells:,} cells (in process)", seconds(in_process), target,
               at_most(in_process, TARGET_S) if target else "",
               "expand, validate, render 2 scripts, write 2 specs files + manifest"),
        Result("same, whole CLI `--dry-run`", seconds(whole), "(none)", "",
               f"adds interpreter start, imports and printing the {cells:,}-line cell table"),
    ]
