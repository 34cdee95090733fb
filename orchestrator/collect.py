"""Merge every task's Parquet file under results/ into one dataset, and compare JAX with PyTorch.

Each task wrote its own file atomically; collect only reads them. A file that cannot be read, or that
does not follow the result schema, is reported by path and reason and left out; the rest are merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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
