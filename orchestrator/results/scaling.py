"""Strong scaling of the data-parallel cells against one process on the same global batch: the frame that the
data-parallel table and the scaling plot read, and its text table."""

from __future__ import annotations

import math

from bench_contract.use_cases import USE_CASES
from orchestrator.results.compare import KEY
from orchestrator.tables import format_table

# A data-parallel cell is compared with the one-process cell that takes the same update on the same global batch.
ONE_PROCESS_USE_CASE = {case.number: case.one_process.number for case in USE_CASES.values()
                        if case.one_process}


def scaling_frame(df):
    """Strong scaling of every data-parallel cell: throughput per device against one process, same global batch.

    efficiency = throughput(N processes) / (N * throughput(1 process)). The one-process cell is looked up in
    everything collected (use case 1 for 2, 3 for 4, or the same use case run as one process), on the same
    device model, framework, benchmark, model, batch size and precision. Without one, efficiency is NaN.
    One row per data-parallel cell; empty when there is none.
    """
    import pandas as pd

    columns = ["device_model", "framework", *KEY, "world_size", "throughput_per_device", "one_process_throughput",
               "efficiency"]
    if df.empty or "world_size" not in set(df["metric"]):
        return pd.DataFrame(columns=columns)
    cells = df[df["metric"].isin(["throughput", "world_size"])].pivot_table(
        index=["device_model", "framework", *KEY, "cell_id"], columns="metric", values="value", aggfunc="median"
    ).reset_index()
    if "throughput" not in cells:
        return pd.DataFrame(columns=columns)
    cells["world_size"] = cells.get("world_size", 1).fillna(1)  # rows from before world_size was recorded
    single = cells[cells["world_size"] == 1]
    rows = []
    for _, cell in cells[cells["world_size"] > 1].iterrows():
        same = (
            (single["device_model"] == cell["device_model"]) & (single["framework"] == cell["framework"])
            & (single["benchmark"] == cell["benchmark"]) & (single["model"] == cell["model"])
            & (single["batch_size"] == cell["batch_size"]) & (single["precision"] == cell["precision"])
            & single["use_case"].isin([cell["use_case"], ONE_PROCESS_USE_CASE.get(cell["use_case"])])
        )
        base = single.loc[same, "throughput"].median() if same.any() else float("nan")
        world = int(cell["world_size"])
        rows.append({**{c: cell[c] for c in ["device_model", "framework", *KEY]}, "world_size": world,
                     "throughput_per_device": cell["throughput"] / world, "one_process_throughput": base,
                     "efficiency": cell["throughput"] / (world * base)})
    return pd.DataFrame(rows, columns=columns)


def _fmt(value, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)


def scaling_table(df) -> str | None:
    """The scaling frame as text for the terminal, or None when no data-parallel cell was collected."""
    frame = scaling_frame(df)
    if frame.empty:
        return None

    def number(value, pattern):
        return _fmt(None if math.isnan(value) else value, pattern)  # NaN (no one-process cell) reads "n/a"

    rows = [[r.device_model, r.framework, r.benchmark, r.use_case, r.model, r.batch_size, r.world_size,
             number(r.throughput_per_device, "{:,.0f}"), number(r.one_process_throughput, "{:,.0f}"),
             number(r.efficiency, "{:.0%}")] for r in frame.itertuples()]
    headers = ["device model", "framework", "benchmark", "use case", "model", "batch", "processes",
               "samples/s per device", "one process samples/s", "scaling efficiency"]
    return format_table(headers, rows)
