"""What the comparison shows of a tuned campaign (--tune K; the tries are judged by orchestrator.run.tuning): both
speed-ups side by side, out of the box and tuned, each with its interval, and each framework's ladder of what each
configuration gave, as collect's lines, the report's tables and one figure per cell.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_contract.spec import FRAMEWORK_TITLES
from bench_contract.tuning import OUT_OF_THE_BOX, TUNED, described
from orchestrator.run.tuning import (
    LADDER_HEADERS,
    SETTING_HEADERS,
    Tuned,
    cell_words,
    ladder_lines,
    ladder_rows,
    setting_rows,
)
from orchestrator.tables import format_table


def level_of(settings: str) -> tuple[str, str]:
    """(the tuning level of a comparison row's settings, the settings without it)."""
    parsed = json.loads(settings) if settings else {}
    level = parsed.pop("tuning", OUT_OF_THE_BOX)
    return level, json.dumps(parsed, sort_keys=True)


def chosen_words(note: str) -> str:
    """Each side's tuned configuration from a row's tuning note (certificate.tuning_notes: "JAX tuned settings
    donate_state=False; ..."), as "JAX donate_state=False; PyTorch torch_mode=default"; "-" where none ran tuned."""
    marker = " tuned settings "
    parts = [part.replace(marker, " ", 1) for part in note.split("; ") if marker in part]
    return "; ".join(parts) or "-"


def effort_rows(frame) -> tuple[list[str], list[list[str]]]:
    """Both speed-ups side by side, for every cell measured at both levels: out of the box against out of the box,
    tuned against tuned, each with its interval (or why there is none), and each side's tuned configuration."""
    from orchestrator.results.compare import format_speedup

    headers = ["device", "benchmark", "use case", "model", "batch", "precision",
               "out of the box JAX/PyTorch [95% CI]", "tuned JAX/PyTorch [95% CI]", "tuned settings (as each side ran)"]
    if frame.empty or "settings" not in frame:
        return headers, []
    rows = []
    levels = frame.assign(_level=[level_of(s)[0] for s in frame["settings"]],
                          _rest=[level_of(s)[1] for s in frame["settings"]])
    key = ["device_model", "benchmark", "use_case", "model", "batch_size", "precision", "_rest"]
    for values, block in levels.groupby(key, dropna=False, sort=True):
        by_level = {row["_level"]: row for _, row in block.iterrows()}
        if TUNED not in by_level or OUT_OF_THE_BOX not in by_level:
            continue
        tuned = by_level[TUNED]
        rows.append([*(str(v) for v in values[:-1]), format_speedup(by_level[OUT_OF_THE_BOX]), format_speedup(tuned),
                     chosen_words(tuned.get("tuning", ""))])
    return headers, rows


def effort_lines(frame, records: list[tuple[int, Tuned]]) -> list[str]:
    """What collect prints of a tuned campaign: the speed-ups side by side, then the ladders."""
    headers, rows = effort_rows(frame)
    lines = [f"\nEqual effort: out of the box and tuned, each side with the same budget:\n"
             f"{format_table(headers, rows)}"] if rows else []
    return lines + ladder_lines(records)


def draw_ladders(records: list[tuple[int, Tuned]], folder: Path) -> list:
    """One figure per tuned cell: each framework's configurations tried, as bars of their speed-up over its own out
    of the box (a line at 1), the chosen one marked, the dropped ones left out with their count said."""
    from orchestrator.results.report_plots import COLORS, _figure, _save, _slug

    if not records:
        return []
    plt = _figure()
    plots: list = []
    cells: dict[tuple, list[tuple[int, Tuned]]] = {}
    for budget, tuned in records:
        cells.setdefault(tuned.cell, []).append((budget, tuned))
    for cell, sides in cells.items():
        fig, axes = plt.subplots(1, len(sides), figsize=(6 * len(sides), 0.5 + 0.45 * max(
            len(t.tries) for _, t in sides)), squeeze=False)
        for ax, (budget, tuned) in zip(axes[0], sides):
            kept = sorted((t for t in tuned.tries if not t.dropped and t.speedup), key=lambda t: t.speedup)
            labels = [described(t.configuration) for t in kept]
            ax.barh(range(len(kept)), [t.speedup for t in kept], color=[
                COLORS[tuned.framework] if t.configuration == tuned.chosen else "#bbbbbb" for t in kept])
            ax.set_yticks(range(len(kept)), labels, fontsize=7)
            ax.axvline(1.0, color="black", linewidth=0.8)
            dropped = len(tuned.tries) - len(kept)
            ax.set_xlabel("throughput over out of the box" + (f" ({dropped} dropped)" if dropped else ""))
            ax.set_title(f"{FRAMEWORK_TITLES[tuned.framework]}: {budget} configurations", fontsize=9)
        title = f"Tuning ladder: {cell_words(sides[0][1])}"
        fig.suptitle(title, fontsize=10)
        _save(plt, fig, folder / f"ladder_{_slug(*cell)}.png", plots, title)
    return plots


def tuning_tables(frame, records: list[tuple[int, Tuned]]) -> list:
    """The report's tables of a tuned campaign (report_tables.Extra): the speed-ups side by side, then each ladder."""
    from orchestrator.results.report_tables import Extra

    headers, rows = effort_rows(frame)
    tables = [Extra("Equal effort: out of the box and tuned, each side with the same budget", headers, rows, left=6)]
    for budget, tuned in records:
        title = f"{FRAMEWORK_TITLES[tuned.framework]}, {cell_words(tuned)} ({budget} configurations)"
        tables.append(Extra(f"Tuning ladder, {title}", LADDER_HEADERS, ladder_rows(tuned), left=1))
        tables.append(Extra(f"What each setting gave, {title}", SETTING_HEADERS, setting_rows(tuned), left=1))
    return [table for table in tables if table.rows]
