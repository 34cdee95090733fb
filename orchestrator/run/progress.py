"""How far each running cell is, read from the heartbeat its task updates (bench_contract.run.progress).

A task rewrites its heartbeat (<campaign>/progress/<framework>/<cell>.json) with every progress line it
prints, at most every interval_s seconds and at each phase's and epoch's end. This module reads those files,
never the logs: per cell the phase, epoch, step/total, loss, steps/s, ETA and the heartbeat's age. A heartbeat
older than stale_after(its interval) says so: the task is stuck in one long step, or gone.

`watch` shows progress_lines for its running cells; the local executor shows a task's log as it is written
(run_streaming), progress lines included.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench_contract.run.progress import describe, duration, heartbeat_path

# A heartbeat is stale once this many of its intervals have passed without one, and never sooner than
# STALE_MIN_S: a compilation, a large evaluation split or one slow step legitimately take a minute or two.
STALE_INTERVALS = 6
STALE_MIN_S = 120.0


class Cell(Protocol):
    """What names a cell and finds its heartbeat: a manifest cell or a status.CellStatus."""

    framework: str
    array_index: int
    cell_id: str
    results: str


@dataclass(frozen=True)
class CellProgress:
    framework: str
    array_index: int
    cell_id: str
    beat: dict[str, Any] | None  # the heartbeat's fields; None when the task has written none (yet)
    age_s: float | None  # seconds since the task wrote it (0 where the clocks of node and login node disagree)

    @property
    def stale(self) -> bool:
        return self.beat is not None and self.age_s is not None and self.age_s > stale_after(self.beat)


def stale_after(beat: dict[str, Any]) -> float:
    return max(STALE_MIN_S, STALE_INTERVALS * float(beat.get("interval_s") or 0))


def read_heartbeat(path: str | Path) -> dict[str, Any] | None:
    """The heartbeat's fields, or None when there is none or it is not one (it is published whole, but a
    person may have put anything there)."""
    try:
        beat = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return beat if isinstance(beat, dict) and isinstance(beat.get("updated_unix"), int | float) else None


def cell_progress(cell: Cell, now: float | None = None) -> CellProgress:
    now = time.time() if now is None else now
    beat = read_heartbeat(heartbeat_path(cell.results)) if cell.results else None
    age = max(0.0, now - beat["updated_unix"]) if beat else None
    return CellProgress(cell.framework, cell.array_index, cell.cell_id, beat, age)


def progress_line(p: CellProgress) -> str:
    """`jax 0 (cell): training, epoch 3/30, step 216/2160 (10%), loss 0.41, 12 steps/s, ETA 2m38s; 4s ago`"""
    who = f"{p.framework} {p.array_index} ({p.cell_id})"
    if p.beat is None:
        return f"{who}: no progress reported yet"
    if p.stale:
        return (f"{who}: {describe(p.beat)}; STALE: no heartbeat for {duration(p.age_s)} (expected every "
                f"{duration(p.beat.get('interval_s') or 0)}): stuck in one long step, or the task is gone")
    return f"{who}: {describe(p.beat)}; {duration(p.age_s)} ago"


def progress_lines(cells: Iterable[Cell], now: float | None = None) -> list[str]:
    """One line per cell, for `watch` to print under its progress bar for the cells that are running."""
    return [progress_line(cell_progress(cell, now)) for cell in cells]


def text_bar(done: int, total: int, width: int = 30) -> str:
    """`[#########.....................]`: done out of total, full when there is nothing to do."""
    filled = round(width * done / total) if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}]"


def run_streaming(command: list[str], log: str | Path, show: Callable[[str], None] = print,
                  env: dict[str, str] | None = None) -> int:
    """Run `command` with its output (stderr with stdout) written to `log` and shown line by line as it
    comes, so that a person running tasks here sees them move; returns the exit code. The log is flushed
    after every line, so a reader of the file sees what the terminal shows."""
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1)
        for line in proc.stdout:
            out.write(line)
            out.flush()
            show(line.rstrip("\n"))
        return proc.wait()
