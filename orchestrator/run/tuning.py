"""What `--tune K`'s tries found (orchestrator.plan.tuning plans them): each framework's tries judged and the fastest
kept, the record of it beside the campaign (tuning.json), and its ladders in words. The comparison's side of it
(both speed-ups side by side, the report's tables and figures) is orchestrator.results.tuning's.

The rule for each cell and framework:
- every try is measured once, by the cell's stopping rule, its throughput the one the comparison uses;
- parity under tuning: a try whose results differ from out of the box's beyond the precision's own bound
  (bench_contract.run.parity.TOLERANCES: the largest difference over the largest value) is reported and dropped.
  Training compares the loss of every step; inference the three summaries of the first pass's logits
  (bench_contract.run.inference.OUTPUT_METRICS), which a tuned run whose logits each stay within the bound of
  out of the box's keeps within it too (|mean a - mean b| <= max |a - b|, and |mean|a| - mean|b|| too). The
  bound is the parity check's for one forward pass; over many training steps, the rounding differences of two
  valid executions can grow, so the check errs towards dropping a valid configuration on a long run (a try lost)
  rather than keeping one that changed the result;
- a try that failed has no throughput: reported and dropped;
- the fastest try kept is chosen; out of the box is among them, so a tuning that finds nothing faster keeps it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench_contract.run.inference import OUTPUT_METRICS
from bench_contract.run.parity import TOLERANCES
from bench_contract.spec import FRAMEWORK_TITLES, USE_CASES, write_text_atomic
from bench_contract.tuning import described
from orchestrator.plan.manifest import load_manifest
from orchestrator.plan.tuning import knobs_of
from orchestrator.tables import format_table

RECORD = "tuning.json"  # the record of a tuned campaign's tries and choices, in its campaign folder
# TF32 keeps fp16's 10 bits of mantissa: its bound is fp16's (a precision without its own in the parity table).
PRECISION_OF_BOUND = {"tf32": "fp16"}


def parity_bound(precision: str) -> float:
    return TOLERANCES[PRECISION_OF_BOUND.get(precision, precision)]


@dataclass
class Try:
    """One configuration tried: its knobs, its throughput (None: it failed), and why it was dropped ("": kept)."""

    configuration: dict
    throughput: float | None
    dropped: str = ""
    speedup: float | None = None  # over out of the box's try


@dataclass
class Tuned:
    """One cell and framework: its tries (out of the box first) and the configuration chosen."""

    framework: str
    cell_id: str  # the planned cell's, before tuning
    benchmark: str
    use_case: int
    model: str
    batch_size: int
    precision: str
    space: list[str]
    tries: list[Try] = field(default_factory=list)
    chosen: dict = field(default_factory=dict)

    @property
    def cell(self) -> tuple:
        return (self.benchmark, self.use_case, self.model, self.batch_size, self.precision)


def losses(rows) -> np.ndarray:
    steps = rows[(rows["metric"] == "train_loss") & rows["step"].notna()].sort_values(["epoch", "step"])
    return steps["value"].to_numpy(dtype=float)


def summary(rows, metric: str) -> float | None:
    found = rows.loc[(rows["metric"] == metric) & rows["step"].isna() & rows["epoch"].isna(), "value"]
    return float(found.iloc[0]) if len(found) else None


def parity_problem(reference, rows, precision: str, trains: bool) -> str:
    """Why a try's results are not out of the box's within the precision's bound, in words; "" when they are."""
    bound = parity_bound(precision)
    if trains:
        want, got = losses(reference), losses(rows)
        if len(want) != len(got) or not len(want):
            return f"it recorded {len(got)} step losses, out of the box {len(want)}"
        differs = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), np.finfo(float).tiny))
        what = "its losses differ from out of the box's"
    else:
        scale = summary(reference, "output_abs_max")
        pairs = [(summary(reference, m), summary(rows, m)) for m in OUTPUT_METRICS]
        if not scale or any(a is None or b is None for a, b in pairs):
            return "its outputs or out of the box's were not recorded"
        differs = max(abs(b - a) for a, b in pairs) / scale
        what = "its outputs differ from out of the box's"
    if not differs <= bound:  # a NaN is not within it either
        return f"{what} by {differs:.1e} of their scale, above the {precision} bound {bound:.0e}"
    return ""


def judge(tuned: Tuned, runs: list) -> Tuned:
    """Fill `tuned`'s tries from each try's rows (None: the try failed), in the order drawn (out of the box first),
    and choose the fastest kept."""
    reference = runs[0]
    trains = USE_CASES[tuned.use_case].trains
    for attempt, rows in zip(tuned.tries, runs):
        if rows is None:
            attempt.dropped = "failed: it wrote no result (the tries' logs say why)"
            continue
        attempt.throughput = summary(rows, "throughput")
        if attempt.throughput is None:
            attempt.dropped = "it recorded no throughput"
        elif reference is None:
            attempt.dropped = "out of the box failed: nothing to hold its results against"
        elif attempt.configuration:
            attempt.dropped = parity_problem(reference, rows, tuned.precision, trains)
    base = tuned.tries[0].throughput if not tuned.tries[0].dropped else None
    for attempt in tuned.tries:
        attempt.speedup = attempt.throughput / base if base and attempt.throughput else None
    kept = [attempt for attempt in tuned.tries if not attempt.dropped]
    tuned.chosen = max(kept, key=lambda attempt: attempt.throughput).configuration if kept else {}
    return tuned


def write_record(folder: Path, budget: int, tries_campaign: str, results: list[Tuned]) -> Path:
    path = folder / RECORD
    record = {"budget": budget, "tries_campaign": tries_campaign, "cells": [asdict(t) for t in results]}
    write_text_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def read_records(folders: Iterable[Path]) -> list[tuple[int, Tuned]]:
    """(budget, cell) of every tuning record in `folders` (campaign folders; those without one are skipped)."""
    found = []
    for folder in folders:
        path = Path(folder) / RECORD
        if not path.is_file():
            continue
        record = json.loads(path.read_text())
        for cell in record["cells"]:
            tries = [Try(**attempt) for attempt in cell.pop("tries")]
            found.append((record["budget"], Tuned(**cell, tries=tries)))
    return found


def records_of(results_dir: Path, campaigns: Iterable[str]) -> list[tuple[int, Tuned]]:
    return read_records(results_dir / str(name) for name in sorted(set(campaigns)))


def speedup_words(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}x"


def ladder_rows(tuned: Tuned) -> list[list[str]]:
    """A framework's ladder for one cell: each configuration tried, fastest first, what it changed from out of the
    box, its throughput, its speed-up over out of the box, and whether it was chosen or why it was dropped."""
    ordered = sorted(tuned.tries, key=lambda t: (t.dropped != "", -(t.speedup or 0.0)))
    rows = []
    for attempt in ordered:
        state = "chosen" if not attempt.dropped and attempt.configuration == tuned.chosen else (
            f"dropped: {attempt.dropped}" if attempt.dropped else "kept")
        rows.append([described(attempt.configuration),
                     f"{attempt.throughput:,.1f}" if attempt.throughput is not None else "n/a",
                     speedup_words(attempt.speedup), state])
    return rows


LADDER_HEADERS = ["configuration (changed from out of the box)", "samples/s", "over out of the box", ""]


def setting_rows(tuned: Tuned) -> list[list[str]]:
    """What each setting gave: for every knob value a kept try moved to, the geometric mean speed-up over out of the
    box of the kept tries with it, against that of the kept tries without it, with how many each. The tries are drawn
    at random, so each setting was tried beside different others: this is its main effect across the tries, not its
    effect alone (torchtitan's ladder adds one optimisation at a time instead)."""
    kept = [attempt for attempt in tuned.tries if not attempt.dropped and attempt.speedup]
    moved = sorted({(name, json.dumps(value)) for attempt in kept for name, value in attempt.configuration.items()})
    rows = []
    for name, text in moved:
        value = json.loads(text)
        with_it = [a.speedup for a in kept if name in a.configuration and a.configuration[name] == value]
        without = [a.speedup for a in kept if not (name in a.configuration and a.configuration[name] == value)]
        rows.append([f"{name}={value}", f"{speedup_words(geometric_mean(with_it))} ({len(with_it)})",
                     f"{speedup_words(geometric_mean(without))} ({len(without)})"])
    return rows


def geometric_mean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


SETTING_HEADERS = ["setting", "with it (tries)", "without it (tries)"]


def cell_words(tuned: Tuned) -> str:
    return (f"{tuned.benchmark} use case {tuned.use_case} {tuned.model}, batch {tuned.batch_size}, "
            f"{tuned.precision}")


def ladder_lines(records: list[tuple[int, Tuned]]) -> list[str]:
    """Every ladder, as collect prints it: per cell, each framework's, under a line naming the cell and budget."""
    lines = []
    for budget, tuned in records:
        lines.append(f"\nTuning ladder, {FRAMEWORK_TITLES[tuned.framework]}, {cell_words(tuned)} ({budget} "
                     f"configurations, space: {', '.join(tuned.space)}):\n"
                     f"{format_table(LADDER_HEADERS, ladder_rows(tuned))}")
        settings = setting_rows(tuned)
        if settings:
            lines.append("What each setting gave: the geometric mean over out of the box of the kept tries with it and "
                         f"without it:\n{format_table(SETTING_HEADERS, settings)}")
    return lines


def judge_tries(tries_dir: Path, pairs: list) -> list[Tuned]:
    """Each planned cell's tries (orchestrator.plan.tuning.try_cells: (cell, try) in order, a cell's tries
    together) judged from the task files of the tries' campaign in `tries_dir`, the choice made."""
    from bench_contract.results import read_task_table, result_problem  # pyarrow: only once there are tries to read

    results = {entry.cell_id: entry.results for entry in load_manifest(tries_dir).cells}
    by_cell: dict[str, tuple] = {}
    for cell, attempt in pairs:
        by_cell.setdefault(cell.cell_id, (cell, []))[1].append(attempt)
    judged = []
    for cell, attempts in by_cell.values():
        tuned = Tuned(cell.framework, cell.cell_id, cell.benchmark, cell.use_case, cell.model, cell.batch_size,
                      cell.precision, [knob.name for knob in knobs_of(cell)],
                      [Try(json.loads(a.tuned) if a.tuned else {}, None) for a in attempts])
        path = [results.get(a.cell_id, "") for a in attempts]
        runs = [read_task_table(p).to_pandas() if p and result_problem(p) is None else None for p in path]
        judged.append(judge(tuned, runs))
    return judged
