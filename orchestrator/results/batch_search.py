"""The largest batch that fits (batch-search cells), JAX beside PyTorch: the frame, its rows and its text table."""

from __future__ import annotations

import math

from orchestrator.tables import format_table

SEARCH_METRICS = ["max_batch_size", "min_batch_size_out_of_memory", "out_of_memory_attempts", "memory_limit"]


def batch_search_frame(df):
    """One row per searched (device model, benchmark, use case, model, precision, memory cap) with each framework's
    largest batch that fits and the smallest that did not; empty when no search cell was collected."""
    import pandas as pd

    rows = df[df["metric"].isin(SEARCH_METRICS)]
    if rows.empty or "max_batch_size" not in set(rows["metric"]):
        return pd.DataFrame()
    cells = rows.pivot_table(index=["device_model", "benchmark", "use_case", "model", "precision", "framework",
                                    "cell_id"], columns="metric", values="value", aggfunc="median").reset_index()
    cells["memory_limit"] = cells.get("memory_limit", 0).fillna(0)
    index = ["device_model", "benchmark", "use_case", "model", "precision", "memory_limit"]
    values = [m for m in SEARCH_METRICS if m in cells and m != "memory_limit"]
    wide = cells.pivot_table(index=index, columns="framework", values=values, aggfunc="median")
    wide.columns = [f"{framework}_{metric}" for metric, framework in wide.columns]
    return wide.reset_index()


def batch_search_rows(df) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of the largest-batch table (no rows when no search cell was collected)."""
    frame = batch_search_frame(df)
    headers = ["device model", "benchmark", "use case", "model", "precision", "memory cap", "JAX fits",
               "JAX out of memory at", "PyTorch fits", "PyTorch out of memory at"]

    def size(row, column):
        value = getattr(row, column, float("nan"))
        return "n/a" if math.isnan(value) else f"{value:,.0f}"

    rows = []
    for r in frame.itertuples():
        cap = "none" if not r.memory_limit else f"{r.memory_limit / 2**30:.3g} GiB"
        rows.append([r.device_model, r.benchmark, str(r.use_case), r.model, r.precision, cap,
                     size(r, "jax_max_batch_size"), size(r, "jax_min_batch_size_out_of_memory"),
                     size(r, "torch_max_batch_size"), size(r, "torch_min_batch_size_out_of_memory")])
    return headers, rows


def batch_search_table(df) -> str | None:
    """The largest batch that fits, JAX beside PyTorch, as text; None when no search cell was collected."""
    headers, rows = batch_search_rows(df)
    return format_table(headers, rows) if rows else None
