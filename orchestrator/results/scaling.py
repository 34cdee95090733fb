"""Strong scaling of the data-parallel cells against one process on the same global batch: the frame that the
data-parallel table and the scaling plot read."""

from __future__ import annotations

from bench_contract.use_cases import USE_CASES
from orchestrator.results.compare import KEY

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

