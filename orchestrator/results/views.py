"""A table per use case: what each use case is for, JAX against PyTorch, narrow enough for a person to read.

The comparison (compare.comparison_frame) has every summary metric of every cell: printed whole it is 32
columns wide. Each use case is run for a few of them, so `collect` and `report` show those only:
- training (use case 1): throughput, step time, the time each side took to reach the validation accuracy
  that both reached (the lower of the two sides' final validation accuracies), and the final test accuracy;
- data parallel (2, 4): processes, throughput per device and scaling efficiency against one process;
- per-sample gradients (3, 4): the DP-SGD step's throughput, the share of each side's computed examples that was
  padding, and the clipped per-sample gradient sum by `vmap` and by a per-example loop, with the vectorisation
  speed-up, and DP-SGD's cost over the same cell's SGD (with_sgd_cost); below the table, whether each side's
  versions ran compiled or eagerly, and the padding's note;
- inference (5): latency percentiles per batch and throughput.
Every column, these and the rest, is in report.csv (use_case_frame) and in merged.parquet.

A cell has one line per framework (JAX, then PyTorch): the two side by side in columns would be twice as
wide. A column whose value is the same on every line (precision, runs) is said once above the table, and the
use case is a column only in the tables that hold two (data parallel, per-sample).

The tables beside the use cases' are in their own modules: the largest batch that fits (batch_search) and the
language models' in tokens/s (language_models); collect prints them after the verdicts (collect.summary_lines).
Strong scaling (scaling.scaling_frame) is no table of its own: the data-parallel table's scaling efficiency.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench_contract.measure.timing import CV_THRESHOLD
from bench_contract.spec import DP_SGD_ONLY, FRAMEWORK_TITLES
from bench_contract.use_cases import DATA_PARALLEL_TABLE, DP_SGD_TABLE, INFERENCE_TABLE, TRAINING_TABLE, USE_CASES
from orchestrator.results.certificate import CERTIFIED_COLUMNS, padding_of
from orchestrator.results.compare import (
    CELL_RUN,
    FRAMEWORKS,
    KEY,
    NODE,
    ROW_KEY,
    RUN_COLUMNS,
    comparable,
    comparison_frame,
    format_speedup,
    format_value,
    summary_rows,
    with_row_key,
    with_variant_label,
)
from orchestrator.results.dp_sgd_notes import loop_notes, padding_info
from orchestrator.results.plausibility import implausible_notes
from orchestrator.results.scaling import scaling_frame
from orchestrator.results.store import read_merged_rows
from orchestrator.tables import format_table

# Per-framework summary metrics the use-case tables and the verdicts read besides compare.FRAME_METRICS.
EXTRA_METRICS = ["world_size", "throughput_per_device", "per_sample_grads_vectorized_time_p50",
                 "per_sample_grads_loop_time_p50", "vectorization_speedup", "privacy_epsilon", "privacy_epsilon_rdp",
                 "privacy_delta", "host_cpu_others", "timed_duration", "padding_fraction",
                 "per_sample_grads_vectorized_compiled", "per_sample_grads_loop_compiled"]
# The privacy budget is one value per cell: the orchestrator computed it once, and both frameworks record it. The
# DP-SGD table says it below the table, a line per cell, so its columns stay those of the timings.
PRIVACY_METRICS = ("privacy_epsilon", "privacy_epsilon_rdp", "privacy_delta")
CURVE_METRICS = ["val_accuracy", "epoch_time"]


@dataclass(frozen=True)
class Column:
    name: str  # a column of use_case_frame; per framework it is prefixed: jax_<name>, torch_<name>
    header: str  # a line break makes a two-line header, so the column is as narrow as its values
    text: Callable[[object, str], str]  # (the frame's row, the full column name) -> the cell's text
    per_framework: bool = True


@dataclass(frozen=True)
class View:
    title: str  # each use case names the tables its rows appear in by their titles (bench_contract.use_cases)
    columns: tuple[Column, ...]

    @property
    def use_cases(self) -> tuple[int, ...]:  # those whose rows the table shows: the use cases that name it
        return tuple(number for number, case in USE_CASES.items() if self.title in case.tables)


@dataclass
class ViewTable:
    """One use case's table on one device model, ready for text, Markdown, LaTeX or HTML."""
    title: str
    said_once: list[str]  # the values common to every line ("fp32", "runs JAX/PyTorch 1/1")
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)  # warnings: what makes a number doubtful
    info: list[str] = field(default_factory=list)  # information: tuning, the privacy budget (never a warning)
    key_columns: int = 0  # the leading columns that name the cell (left-aligned)

    @property
    def caption(self) -> str:
        return self.title + (f" ({'; '.join(self.said_once)})" if self.said_once else "")


def missing(value) -> bool:
    """None or NaN: a value that was not measured (compare.format_value reads both as n/a)."""
    return value is None or bool(np.isnan(value))


def metric_text(metric: str) -> Callable[[object, str], str]:
    return lambda row, column: format_value(metric, row.get(column))


def pattern_text(pattern: str) -> Callable[[object, str], str]:
    def text(row, column):
        value = row.get(column)
        return "n/a" if missing(value) else pattern.format(value)

    return text


THROUGHPUT = Column("throughput", "samples/s", metric_text("throughput"))
SPEEDUP = Column("speedup", "speed-up JAX/PyTorch\n[95% CI]", lambda row, _: format_speedup(row), per_framework=False)
MS = metric_text("step_time_p50")  # three significant digits, thousands separated above 100

VIEWS = (
    View(TRAINING_TABLE, (
        THROUGHPUT, SPEEDUP,
        Column("step_time_p50", "step p50\nms", MS),
        Column("accuracy_target", "val acc\ntarget", metric_text("test_accuracy"), per_framework=False),
        Column("time_to_target", "s to\ntarget", MS),
        Column("test_accuracy", "test\nacc", metric_text("test_accuracy")),
    )),
    View(DATA_PARALLEL_TABLE, (
        Column("processes", "pro-\ncesses", pattern_text("{:.0f}"), per_framework=False), SPEEDUP,
        Column("throughput_per_device", "samples/s\nper device", metric_text("throughput")),
        Column("scaling_efficiency", "scaling\nefficiency", pattern_text("{:.0%}")),
    )),
    View(DP_SGD_TABLE, (
        Column("throughput", "DP-SGD\nsamples/s", metric_text("throughput")), SPEEDUP,
        # The share of the side's computed examples that was padding; 0% where it ran its drawn examples alone.
        Column("padding_fraction", "pad", lambda row, column: f"{padding_of(row.get(column)):.0%}"),
        Column("per_sample_grads_vectorized_time_p50", "vmap\nms", MS),
        Column("per_sample_grads_loop_time_p50", "loop\nms", MS),
        Column("vectorization_speedup", "vmap\nspeed-up", pattern_text("{:.1f}x")),
        Column("sgd_cost", "cost\nvs SGD", pattern_text("{:.1f}x")),  # with_sgd_cost
    )),
    View(INFERENCE_TABLE, (
        THROUGHPUT, SPEEDUP,
        Column("step_time_p50", "latency\np50 ms", MS),
        Column("step_time_p95", "latency\np95 ms", MS),
        Column("step_time_p99", "latency\np99 ms", MS),
    )),
)


# --- the frame: the comparison, with what the use cases need beside it ----------------------------------

def use_case_frame(df):
    """compare.comparison_frame, one row per comparison row, with per framework the EXTRA_METRICS' medians,
    the scaling efficiency, the time to the accuracy target, and per row the processes, the target and what is
    implausible across its batch sizes (plausibility)."""
    import pandas as pd

    frame = comparison_frame(df)
    if frame.empty:
        return frame
    labelled = with_variant_label(with_row_key(df))
    summary = summary_rows(labelled)
    frame = frame.merge(framework_medians(summary, EXTRA_METRICS), on=ROW_KEY, how="left")
    sizes = [frame[c] for c in (f"{fw}_world_size" for fw in FRAMEWORKS) if c in frame]
    # The larger side's process count; NaN (without numpy's all-NaN warning) where neither recorded one.
    frame["processes"] = pd.concat(sizes, axis=1).max(axis=1) if sizes else np.nan
    frame = with_sgd_cost(with_scaling_efficiency(frame, summary))
    frame["implausible"] = implausible_notes(frame)
    return with_time_to_target(with_privacy_budget(frame), labelled)


# DP-SGD's cost over plain SGD (issue 36): per framework, how many times fewer samples a second the DP-SGD step
# trains than the same cell's SGD step, where the results hold both (`-u 1,3`, or `-u 2,4` on several processes).
# Published comparisons quote it per engine (Opacus's DP-SGD at 2.6 to 8 times lower throughput than SGD, arXiv
# 2406.17298), and it is what a practitioner pays for privacy in each framework, whoever is faster.
#
# The use case whose plain step a DP-SGD use case is costed against: one process (3 against 1), or several (4
# against 2, on the same processes, which the settings hold).
PLAIN_USE_CASE = {case.number: case.plain.number for case in USE_CASES.values() if case.plain}
# What a DP-SGD row and its SGD row share: the row key but its use case, and the settings but DP-SGD's own.
SGD_MATCH = [column for column in ROW_KEY if column not in ("use_case", "settings")]


def plain_settings(settings: str) -> str:
    """A row's settings without the ones only DP-SGD reads: equal for a DP-SGD cell and its plain SGD cell."""
    parsed = json.loads(settings) if settings else {}
    return json.dumps({name: value for name, value in parsed.items() if name not in DP_SGD_ONLY}, sort_keys=True)


def with_sgd_cost(frame):
    """The comparison frame with <framework>_sgd_cost on its DP-SGD rows: the SGD row's throughput over the
    DP-SGD row's, per framework (PyTorch's per DP-SGD engine: each engine is a row). NaN on the other rows, and
    where the results hold no SGD row of the same cell (device, benchmark, model, batch, precision, settings but
    DP-SGD's)."""
    for framework in FRAMEWORKS:
        frame[f"{framework}_sgd_cost"] = np.nan
    plain = frame[frame["use_case"].isin(list(PLAIN_USE_CASE.values()))]
    throughputs = {(*(row[c] for c in SGD_MATCH), row["use_case"], plain_settings(row["settings"])):
                   {fw: row[f"{fw}_throughput"] for fw in FRAMEWORKS} for _, row in plain.iterrows()}
    for index, row in frame[frame["use_case"].isin(list(PLAIN_USE_CASE))].iterrows():
        key = (*(row[c] for c in SGD_MATCH), PLAIN_USE_CASE[row["use_case"]], plain_settings(row["settings"]))
        for framework, sgd in throughputs.get(key, {}).items():
            frame.at[index, f"{framework}_sgd_cost"] = sgd / row[f"{framework}_throughput"]
    return frame


def with_privacy_budget(frame):
    """One privacy_epsilon and privacy_delta per comparison row: JAX's value, else PyTorch's (the same budget)."""
    for metric in PRIVACY_METRICS:
        frame[metric] = frame[f"jax_{metric}"].fillna(frame[f"torch_{metric}"])
    return frame


def privacy_note(row) -> str | None:
    """The cell's privacy budget, or that its batches were shuffled (no guarantee); None for rows that recorded
    neither (written before the budget was recorded)."""
    cell = f"{row['benchmark']} {row['model']} batch {row['batch_size']}"
    epsilon, rdp, delta = row.get("privacy_epsilon"), row.get("privacy_epsilon_rdp"), row.get("privacy_delta")
    if not missing(epsilon):
        spent = f"{epsilon:.3g}" if np.isfinite(epsilon) else "infinite (no noise)"
        # A cell planned before the PLD accountant recorded no RDP epsilon: its epsilon is the RDP one.
        accountants = " (PLD accountant; RDP: {:.3g})".format(rdp) if not missing(rdp) and np.isfinite(epsilon) else ""
        return (f"privacy, {cell}: epsilon {spent}{accountants} at delta {delta:.2g}, the same budget for both "
                "frameworks")
    settings = row.get("settings")
    if isinstance(settings, str) and settings and json.loads(settings).get("sampling") == "shuffle":
        return f"privacy, {cell}: shuffled batches, so the accountant's guarantee (Poisson sampling) does not apply"
    return None


def framework_medians(summary, metrics: list[str]):
    """Per comparison row (ROW_KEY), the median over runs of each metric per framework, as <framework>_<metric>
    columns; a metric or framework with no value is NaN."""
    import pandas as pd

    rows = summary[summary["metric"].isin(metrics)]
    wide = rows.groupby([*ROW_KEY, "framework", "metric"], dropna=False)["value"].median().unstack(["metric", "framework"])
    out = pd.DataFrame(index=wide.index)
    for metric in metrics:
        for framework in FRAMEWORKS:
            column = wide.get((metric, framework)) if len(wide.columns) else None
            out[f"{framework}_{metric}"] = column if column is not None else np.nan
    return out.reset_index() if len(out) else pd.DataFrame(columns=[*ROW_KEY, *out.columns])


def with_scaling_efficiency(frame, summary):
    """<framework>_scaling_efficiency from scaling.scaling_frame (the same global batch on one process), for
    the rows that ran on several processes; NaN elsewhere and where no one-process cell was collected."""
    scaling = scaling_frame(summary)
    for framework in FRAMEWORKS:
        frame[f"{framework}_scaling_efficiency"] = np.nan
    if scaling.empty:
        return frame
    place = ["device_model", *KEY, "processes"]
    efficiency = scaling.assign(processes=scaling["world_size"].astype(float)).pivot_table(
        index=place, columns="framework", values="efficiency", aggfunc="median")
    for framework in FRAMEWORKS:
        if framework in efficiency:
            looked_up = efficiency[framework].reindex(list(frame[place].itertuples(index=False, name=None)))
            frame[f"{framework}_scaling_efficiency"] = looked_up.to_numpy()
    return frame


def with_time_to_target(frame, labelled):
    """accuracy_target: the lower of the two frameworks' final validation accuracies (medians over runs), which
    both reached; <framework>_time_to_target: the training time (the epochs' wall time, summed) a run took to
    first reach it, median over the runs that did. NaN without both frameworks' validation curves."""
    frame["accuracy_target"] = np.nan
    for framework in FRAMEWORKS:
        frame[f"{framework}_time_to_target"] = np.nan
    runs = run_curves(labelled)
    if not runs:
        return frame
    for index, row in frame.iterrows():
        key = tuple(row[c] for c in ROW_KEY)
        sides = {fw: runs.get((*key, fw), []) for fw in FRAMEWORKS}
        if not all(sides.values()):
            continue
        target = min(np.median([acc[-1] for acc, _ in side]) for side in sides.values())
        frame.at[index, "accuracy_target"] = target
        for framework, side in sides.items():
            reached = [first_time_at(acc, elapsed, target) for acc, elapsed in side]
            reached = [t for t in reached if not missing(t)]
            frame.at[index, f"{framework}_time_to_target"] = np.median(reached) if reached else np.nan
    return frame


def run_curves(labelled) -> dict[tuple, list[tuple[np.ndarray, np.ndarray]]]:
    """(*ROW_KEY, framework) -> per run, its validation accuracy per epoch and the training time elapsed at the
    end of each epoch, in epoch order. Runs without both curves, or with epochs missing from one, are left out.
    One groupby for all runs: a campaign has thousands of them."""
    if "epoch" not in labelled:
        return {}
    rows = labelled[labelled["metric"].isin(CURVE_METRICS) & labelled["epoch"].notna() & labelled["step"].isna()]
    if rows.empty:
        return {}
    run = [*ROW_KEY, "framework", *(c for c in CELL_RUN if c in rows)]
    wide = rows.groupby([*run, "epoch", "metric"], dropna=False)["value"].median().unstack("metric").sort_index()
    if not set(CURVE_METRICS) <= set(wide.columns):
        return {}
    levels = list(range(len(run)))
    incomplete = wide[CURVE_METRICS].isna().any(axis=1).groupby(level=levels, dropna=False).transform("any")
    wide = wide[~incomplete]
    wide["elapsed"] = wide["epoch_time"].groupby(level=levels, dropna=False).cumsum()
    curves: dict[tuple, list] = {}
    for group, epochs in wide.groupby(level=levels, dropna=False, sort=False):
        curves.setdefault(group[:len(ROW_KEY) + 1], []).append(
            (epochs["val_accuracy"].to_numpy(dtype=float), epochs["elapsed"].to_numpy(dtype=float)))
    return curves


def first_time_at(accuracy: np.ndarray, elapsed: np.ndarray, target: float) -> float:
    """The elapsed time at the first epoch whose accuracy reaches the target (NaN when none does). The target
    is a median of final accuracies; a float's last bit must not decide whether it was reached."""
    reached = np.flatnonzero(accuracy >= target - 1e-9)
    return float(elapsed[reached[0]]) if len(reached) else float("nan")


def summary_frame(output: Path, extra: Sequence[str] = ()):
    """The summary rows (one value per run, not per step or epoch) with the columns a comparison needs and the
    `extra` ones (a baseline's versions), read from the merged dataset: a small part of it, since the per-step
    curves are most of the rows."""
    import pyarrow.dataset as ds

    wanted = [*ROW_KEY, "model_variant", "framework", *RUN_COLUMNS, *NODE,
              *CERTIFIED_COLUMNS, "attention_kernel", "metric", "value", "unit", "epoch", "step"]
    # A dataset merged before a column existed lacks it; the comparison reads it as empty (with_row_key).
    summary = ds.field("step").is_null() & ds.field("epoch").is_null()
    return read_merged_rows(output, list(dict.fromkeys([*wanted, *extra])), summary).to_pandas()


def curve_frame(merged: Path):
    """The per-epoch validation accuracy and epoch time of every run, from the merged dataset: what
    use_case_frame needs beside the summary rows (summary_frame) for the time to the target."""
    import pyarrow.dataset as ds

    wanted = [*ROW_KEY, "model_variant", "framework", *CELL_RUN, "metric", "value", "unit", "epoch", "step"]
    curves = ds.field("step").is_null() & ds.field("epoch").is_valid() & ds.field("metric").isin(CURVE_METRICS)
    return read_merged_rows(merged, wanted, curves).to_pandas()


# --- the tables -------------------------------------------------------------------------------------

def view_tables(frame) -> list[ViewTable]:
    """Every use case's table on every device model that ran it, device models in order."""
    if frame.empty:
        return []
    tables = []
    for device in sorted(str(d) for d in frame["device_model"].unique()):
        for view in VIEWS:
            table = view_table(frame, view, device)
            if table is not None:
                tables.append(table)
    return tables


def view_table(frame, view: View, device: str) -> ViewTable | None:
    """The view's table of one device model's comparison rows, or None when it ran no cell of the view."""
    block = frame[(frame["device_model"].astype(str) == device) & frame["use_case"].isin(view.use_cases)]
    block = block[[measured(row, view) for _, row in block.iterrows()]]
    if block.empty:
        return None
    block = block.sort_values(["benchmark", "model", "use_case", "batch_size", "precision", "settings"])
    keys = ["benchmark"] + (["use_case"] if len(view.use_cases) > 1 else []) + ["model", "batch_size"]
    said_once, varying = said_once_or_keys(block, SAID_ONCE)
    keys += varying + (["differs_in"] if block["differs_in"].astype(bool).any() else [])
    headers, rows = cell_lines(block, keys, [KEY_HEADERS[k] for k in keys], view.columns)
    notes, info = verdict_notes(block)
    if all(USE_CASES[number].per_sample for number in view.use_cases):  # DP-SGD's: its budgets, padding and loops
        info += [note for note in (privacy_note(row) for _, row in block.iterrows()) if note]
        info += [note for note in (padding_info(row, cell_words) for _, row in block.iterrows()) if note]
        info += loop_notes(block, cell_words)
    return ViewTable(f"{view.title} on {device}", said_once, headers, rows, notes, info, key_columns=len(keys))


# The columns said once above a table where every line has the same value (else a key column), in words.
SAID_ONCE = {"precision": "{}", "runs_jax_torch": "runs JAX/PyTorch {}"}


def said_once_or_keys(block, words: dict[str, str]) -> tuple[list[str], list[str]]:
    """(the values of `words`' columns that are one value in the whole block, in their words; the other
    columns, which the table shows as key columns), in `words`' order."""
    said_once, keys = [], []
    for column, pattern in words.items():
        if block[column].nunique() == 1:
            said_once.append(pattern.format(block[column].iloc[0]))
        else:
            keys.append(column)
    return said_once, keys


def cell_lines(block, keys: list[str], key_headers: list[str],
               columns: tuple[Column, ...]) -> tuple[list[str], list[list[str]]]:
    """A table's headers and lines: per comparison row of `block`, one line per framework (JAX, then PyTorch),
    the row's key and its one-per-cell values on its first line only; a `spread` column where a row's spread
    is too wide."""
    wide = block["spread_too_wide"].astype(bool)
    headers = key_headers + ["framework"] + [c.header for c in columns] + (["spread"] if wide.any() else [])
    rows = []
    for _, row in block.iterrows():
        for k, framework in enumerate(FRAMEWORKS):
            first = k == 0
            cells = [key_text(row, c) if first else "" for c in keys] + [FRAMEWORK_TITLES[framework]]
            cells += [c.text(row, f"{framework}_{c.name}") if c.per_framework else c.text(row, c.name) if first
                      else "" for c in columns]
            cells += ["wide" if first and row["spread_too_wide"] else ""] if wide.any() else []
            rows.append(cells)
    return headers, rows


def verdict_notes(block, words: Callable[[object], str] | None = None) -> tuple[list[str], list[str]]:
    """What the table of `block`'s comparison rows says below it: the warnings (spread too wide, not comparable,
    implausible across batch sizes) and the information (a framework's tuning); each row named by `words`
    (default cell_words)."""
    words = words or cell_words
    wide = block["spread_too_wide"].astype(bool)
    notes = [f"spread too wide (CV > {CV_THRESHOLD:.0%}), {words(row)}: {row['spread_too_wide']}"
             for _, row in block[wide].iterrows()]
    notes += [f"not comparable, {words(row)}: {row['comparable']}" for _, row in block.iterrows()
              if not comparable(row)]
    # Each contradiction is between two rows, and said once.
    notes += list(dict.fromkeys(f"implausible, {row['benchmark']} {row['model']}: {note}"
                                for _, row in block.iterrows() if row.get("implausible")
                                for note in row["implausible"].split("; ")))
    info = [f"tuning, {words(row)}: {row['tuning']}" for _, row in block.iterrows() if row["tuning"]]
    return notes, info


def use_case_words(use_case: int) -> str:
    """"Per-sample gradients (DP-SGD) (use case 3)": the title of the use case's table (views.VIEWS); a use case
    no table shows (a row written by hand) is named by its number."""
    title = next((view.title for view in VIEWS if use_case in view.use_cases), None)
    return f"{title} (use case {use_case})" if title else f"Use case {use_case}"


def cell_words(row) -> str:
    """A comparison row in the words of a note below its table: "digits mlp batch 32"."""
    return f"{row['benchmark']} {row['model']} batch {row['batch_size']}"


KEY_HEADERS = {"benchmark": "benchmark", "use_case": "use case", "model": "model", "batch_size": "batch",
               "precision": "precision", "runs_jax_torch": "runs", "differs_in": "settings"}


def key_text(row, column: str) -> str:
    return str(row[column]) if row[column] != "" else "-"


def measured(row, view: View) -> bool:
    """Whether either framework has a value in one of the view's own columns (a batch-search cell has none:
    it has its own table)."""
    names = [f"{fw}_{c.name}" for c in view.columns if c.per_framework for fw in FRAMEWORKS]
    return not all(missing(row.get(name)) for name in names)


def table_text(table: ViewTable) -> str:
    """A use case's table as text for the terminal, its caption above and its notes below."""
    return "\n".join([table.caption, format_table(table.headers, table.rows), *table.notes, *table.info])


def use_case_lines(frame) -> list[str]:
    """collect's tables of `frame` (use_case_frame): every use case's table per device model, each after an empty
    line, then the table across device models where there are several."""
    return [f"\n{table_text(table)}" for table in view_tables(frame)] + cross_device_lines(frame)


# --- across device models ---------------------------------------------------------------------------

CROSS_DEVICE_TITLE = "Across device models: JAX and PyTorch throughput, speed-up JAX/PyTorch [95% CI]"


def device_label(row) -> str:
    """A device model as a column group names it; on a CPU, with the CPUs its runs were bound to (runs bound
    to different CPUs are different comparison rows, compare.CPU_SETTINGS)."""
    cpus = row.get("bound_cpus", "")
    return f"{row['device_model']} ({cpus} CPUs)" if cpus else str(row["device_model"])


def cross_device_table(frame) -> ViewTable | None:
    """One line per cell (and measured settings) with, per device model, each framework's throughput and the
    speed-up with its interval, side by side; None where fewer than two device models measured a throughput
    (each device model's own tables then say it all)."""
    throughputs = [f"{fw}_throughput" for fw in FRAMEWORKS]
    if frame.empty or not set(throughputs) <= set(frame.columns):
        return None
    measured_rows = frame[frame[throughputs].notna().any(axis=1)]
    if measured_rows["device_model"].nunique() < 2:
        return None
    labelled = measured_rows.assign(device=[device_label(row) for _, row in measured_rows.iterrows()])
    devices = sorted(labelled["device"].unique())
    differs = bool(labelled["differs_in"].astype(bool).any())
    keys = ["benchmark", "use_case", "model", "batch_size", "precision"] + (["differs_in"] if differs else [])
    headers = [KEY_HEADERS[k] for k in keys]
    for device in devices:
        headers += [f"{device}\n{FRAMEWORK_TITLES[fw]} samples/s" for fw in FRAMEWORKS]
        headers.append(f"{device}\nspeed-up [95% CI]")
    rows = []
    for _, cell in labelled.groupby([*KEY, "settings"], sort=True, dropna=False):
        by_device = {row["device"]: row for _, row in cell.iterrows()}
        first = cell.iloc[0]
        line = [key_text(first, k) for k in keys]
        for device in devices:
            row = by_device.get(device)
            line += ["-"] * 3 if row is None else [
                *(format_value("throughput", row[f"{fw}_throughput"]) for fw in FRAMEWORKS), format_speedup(row)]
        rows.append(line)
    return ViewTable(CROSS_DEVICE_TITLE, [], headers, rows, key_columns=len(keys))


def cross_device_lines(frame) -> list[str]:
    """collect's cross-device table after an empty line; none with one device model."""
    table = cross_device_table(frame)
    return [] if table is None else [f"\n{table_text(table)}"]
