"""JAX against PyTorch, cell by cell: the one comparison that collect prints and report writes.

Input is the merged tidy table. A cell's summary value is the median over its runs (campaigns and trials).
A speed-up gets a bootstrap 95% confidence interval only where each framework has at least two independent
runs of the cell; with one run each, the interval is left empty rather than invented.
"""

from __future__ import annotations

import numpy as np

KEY = ["benchmark", "use_case", "model", "batch_size", "precision"]
FRAMEWORKS = ("jax", "torch")
FRAMEWORK_TITLES = {"jax": "JAX", "torch": "PyTorch"}

# Summary metrics shown in tables, in order, with a short column title and a unit for the header.
TABLE_METRICS = [
    ("throughput", "throughput", "samples/s"),
    ("step_time_p50", "p50", "ms"),
    ("step_time_p95", "p95", "ms"),
    ("step_time_p99", "p99", "ms"),
    ("compile_time", "compile", "s"),
    ("peak_device_memory_allocated", "peak device mem", "MiB"),
    ("peak_host_rss", "peak host RSS", "MiB"),
    ("mfu", "MFU", ""),  # a value that was not available is NaN (null in Parquet) and shown as n/a
    ("energy_per_sample", "energy", "J/sample"),
    ("test_accuracy", "test acc", ""),
]
BYTES_METRICS = {"peak_device_memory_allocated", "peak_host_rss"}
BOOTSTRAP_SAMPLES = 2000


def summary_rows(df):
    """Rows that are one value per run (not per step or epoch)."""
    return df[df["step"].isna() & df["epoch"].isna()]


def run_values(df, metric: str):
    """metric value per (device_model, key, framework, run), where a run is one cell_id in one campaign."""
    rows = summary_rows(df)
    rows = rows[rows["metric"] == metric]
    return rows.groupby(["device_model", *KEY, "framework", "campaign", "cell_id"], dropna=False)["value"].median()


def bootstrap_ratio_ci(numerator: np.ndarray, denominator: np.ndarray, seed: int = 0) -> tuple[float, float] | None:
    """95% CI of mean(numerator)/mean(denominator), resampling runs of each side independently."""
    if len(numerator) < 2 or len(denominator) < 2:
        return None
    rng = np.random.default_rng(seed)
    num = rng.choice(numerator, size=(BOOTSTRAP_SAMPLES, len(numerator))).mean(axis=1)
    den = rng.choice(denominator, size=(BOOTSTRAP_SAMPLES, len(denominator))).mean(axis=1)
    low, high = np.percentile(num / den, [2.5, 97.5])
    return float(low), float(high)


def comparison_frame(df):
    """One row per device model and cell key; per framework the median of each table metric; the speed-up."""
    import pandas as pd

    if df.empty:
        return pd.DataFrame()
    if "model_variant" in df:
        # A tiny variant is a different network: it is labelled as such, never merged with the full one.
        df = df.assign(model=[m if v in ("full", "", None) else f"{m} ({v})" for m, v in zip(df["model"], df["model_variant"])])
    rows = summary_rows(df)
    present = [m for m, _, _ in TABLE_METRICS if m in set(rows["metric"])]
    medians = (
        rows[rows["metric"].isin(present)]
        .groupby(["device_model", *KEY, "framework", "metric"], dropna=False)["value"].median()
        .unstack(["metric", "framework"])
    )
    out = pd.DataFrame(index=medians.index)
    for metric in present:
        for framework in FRAMEWORKS:
            column = medians.get((metric, framework))
            out[f"{framework}_{metric}"] = column if column is not None else np.nan
    throughput = run_values(df, "throughput")
    speedups, lows, highs, runs = [], [], [], []
    for index in out.index:
        jax = _runs(throughput, index, "jax")
        torch = _runs(throughput, index, "torch")
        speedups.append(jax.mean() / torch.mean() if len(jax) and len(torch) else np.nan)
        ci = bootstrap_ratio_ci(jax, torch)
        lows.append(ci[0] if ci else np.nan)
        highs.append(ci[1] if ci else np.nan)
        runs.append(f"{len(jax)}/{len(torch)}")
    out["speedup"] = speedups
    out["speedup_ci_low"] = lows
    out["speedup_ci_high"] = highs
    out["runs_jax_torch"] = runs
    return out.reset_index()


def _runs(series, index, framework) -> np.ndarray:
    key = tuple(index) + (framework,)
    try:
        return series.loc[key].to_numpy(dtype=float)
    except KeyError:
        return np.array([], dtype=float)


def format_speedup(row) -> str:
    if np.isnan(row["speedup"]):
        return "n/a"
    if np.isnan(row["speedup_ci_low"]):
        return f"{row['speedup']:.2f}x"
    return f"{row['speedup']:.2f}x [{row['speedup_ci_low']:.2f}, {row['speedup_ci_high']:.2f}]"


def format_value(metric: str, value) -> str:
    if value is None or np.isnan(value):
        return "n/a"
    if metric in BYTES_METRICS:
        return f"{value / 2**20:,.0f}"
    if metric == "throughput":
        return f"{value:,.0f}"
    if metric == "test_accuracy":
        return f"{value:.3f}"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def display_rows(frame, device_model: str, only: tuple[str, ...] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of one device model's comparison table (all metrics present, or `only`)."""
    block = frame[frame["device_model"] == device_model]
    metrics = [(m, title, unit) for m, title, unit in TABLE_METRICS
               if f"jax_{m}" in frame.columns and (only is None or m in only)]
    headers = ["benchmark", "use case", "model", "batch", "precision"]
    for metric, title, unit in metrics:
        for framework in FRAMEWORKS:
            headers.append(f"{FRAMEWORK_TITLES[framework]} {title}" + (f" ({unit})" if unit else ""))
        if metric == "throughput":
            headers.append("speed-up JAX/PyTorch [95% CI]")
    headers.append("runs JAX/PyTorch")
    rows = []
    for _, row in block.iterrows():
        cells = [row["benchmark"], str(row["use_case"]), row["model"], str(row["batch_size"]), row["precision"]]
        for metric, _, _ in metrics:
            cells += [format_value(metric, row[f"{fw}_{metric}"]) for fw in FRAMEWORKS]
            if metric == "throughput":
                cells.append(format_speedup(row))
        cells.append(row["runs_jax_torch"])
        rows.append(cells)
    return headers, rows
