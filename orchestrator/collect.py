"""Merge every task's Parquet file under results/ into one dataset, and compare JAX with PyTorch.

Each task wrote its own file atomically; collect only reads them. A file that cannot be read, or that
does not follow the result schema, is reported by path and reason and left out; the rest are merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.compare import KEY
from orchestrator.tables import format_table

@dataclass
class Collected:
    files: int
    rows: int
    output: Path
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def task_files(results_dir: Path, output: Path) -> list[Path]:
    """Per-task result files: every *.parquet under results_dir except merged outputs and temporary files."""
    return sorted(
        p for p in results_dir.rglob("*.parquet")
        if p.resolve() != output.resolve() and not p.name.startswith(".") and "rows" in p.parts
    )


def merge(results_dir: Path, output: Path):
    """Read, check and concatenate the task files; write `output` atomically. Returns (Collected, DataFrame)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench_contract.results import SCHEMA, write_table_atomic

    tables, skipped = [], []
    files = task_files(results_dir, output)
    for path in files:
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several types for a truncated or foreign file
            skipped.append((path, f"unreadable: {exc}"))
            continue
        missing = [name for name in SCHEMA.names if name not in table.column_names]
        if missing:
            skipped.append((path, f"not a result file of this schema (missing {', '.join(missing[:5])})"))
            continue
        try:
            tables.append(table.select(SCHEMA.names).cast(SCHEMA))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            skipped.append((path, f"columns of the wrong type: {exc}"))
    merged = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    write_table_atomic(merged, output)
    collected = Collected(files=len(tables), rows=merged.num_rows, output=output, skipped=skipped)
    return collected, merged.to_pandas()


def comparison_tables(df) -> dict[str, str]:
    """One text table per device model: JAX and PyTorch throughput side by side, the speed-up, test accuracy."""
    from orchestrator.compare import comparison_frame, display_rows

    frame = comparison_frame(df)
    if frame.empty:
        return {}
    return {
        str(device): format_table(*display_rows(frame, device, only=("throughput", "test_accuracy")))
        for device in frame["device_model"].unique()
    }


def _fmt(value, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)


# A data-parallel cell is compared with the one-process cell that takes the same update on the same global batch.
ONE_PROCESS_USE_CASE = {2: 1, 4: 3}


def scaling_table(df) -> str | None:
    """Strong scaling of every data-parallel cell: throughput per device against one process, same global batch.

    efficiency = throughput(N processes) / (N * throughput(1 process)). The one-process cell is looked up in
    everything collected (use case 1 for 2, 3 for 4, or the same use case run as one process), on the same
    device model, framework, benchmark, model, batch size and precision. Without one, it says "n/a".
    """
    if df.empty or "world_size" not in set(df["metric"]):
        return None
    cells = df[df["metric"].isin(["throughput", "world_size"])].pivot_table(
        index=["device_model", "framework", *KEY, "cell_id"], columns="metric", values="value", aggfunc="median"
    ).reset_index()
    if "throughput" not in cells:
        return None
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
        base = single.loc[same, "throughput"].median() if same.any() else None
        world = int(cell["world_size"])
        rows.append([
            cell["device_model"], cell["framework"], cell["benchmark"], cell["use_case"], cell["model"],
            cell["batch_size"], world, _fmt(cell["throughput"] / world, "{:,.0f}"), _fmt(base, "{:,.0f}"),
            _fmt(cell["throughput"] / (world * base) if base else None, "{:.0%}"),
        ])
    if not rows:
        return None
    headers = ["device model", "framework", "benchmark", "use case", "model", "batch", "processes",
               "samples/s per device", "one process samples/s", "scaling efficiency"]
    return format_table(headers, rows)
