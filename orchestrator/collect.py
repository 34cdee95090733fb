"""Merge every task's Parquet file under results/ into one dataset, and compare JAX with PyTorch.

Each task wrote its own file atomically; collect only reads them. A file that cannot be read, or that
does not follow the result schema, is reported by path and reason and left out; the rest are merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.tables import format_table

KEY = ["benchmark", "use_case", "model", "batch_size", "precision"]


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
    """One text table per device model: JAX and PyTorch throughput side by side, with the speed-up."""
    import pandas as pd

    if df.empty:
        return {}
    # A tiny variant is a different network: it is labelled as such, never merged with the full one.
    df = df.assign(model=[m if v in ("full", None) else f"{m} ({v})" for m, v in zip(df["model"], df["model_variant"])])
    wanted = df[df["metric"].isin(["throughput", "test_accuracy"])]
    summary = (
        wanted.groupby(["device_model", *KEY, "framework", "metric"], dropna=False)["value"]
        .median()
        .unstack(["framework", "metric"])
    )
    tables = {}
    for device_model, block in summary.groupby(level="device_model"):
        rows = []
        for key, values in block.iterrows():
            def get(framework: str, metric: str):
                value = values.get((framework, metric))
                return None if value is None or pd.isna(value) else float(value)

            jax_tp, torch_tp = get("jax", "throughput"), get("torch", "throughput")
            speedup = f"{jax_tp / torch_tp:.2f}x" if jax_tp and torch_tp else "n/a"
            acc = [get(fw, "test_accuracy") for fw in ("jax", "torch")]
            rows.append([
                *key[1:],
                _fmt(jax_tp, "{:,.0f}"), _fmt(torch_tp, "{:,.0f}"), speedup,
                _fmt(acc[0], "{:.3f}"), _fmt(acc[1], "{:.3f}"),
            ])
        headers = ["benchmark", "use case", "model", "batch", "precision", "JAX samples/s", "PyTorch samples/s",
                   "speedup JAX/PyTorch", "JAX test acc", "PyTorch test acc"]
        tables[str(device_model)] = format_table(headers, rows)
    return tables


def _fmt(value, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)

