"""JAX against PyTorch, cell by cell: the one comparison that collect prints and report writes.

Input is the merged tidy table. A cell's summary value is the median over its runs (campaigns and trials).
A run is one trial of a cell in one campaign (`--trials N` gives N runs). A speed-up is the ratio of the two sides'
geometric mean throughputs, the centre of its Student's t 95% interval on the log scale (orchestrator.results.intervals:
of the pairs' log ratios where every run of both sides came from paired jobs, Welch's otherwise, over the nodes'
means where runs ran on several); the interval is given only where each framework has at least two independent runs
of the cell: with fewer, it reads "n/a (1 run)" rather than being invented. A cell whose step times or
trials spread more than CV_THRESHOLD is flagged (`spread_too_wide`) in every table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench_contract.measure.flops import PEAK_FRACTIONS
from bench_contract.measure.timing import CV_THRESHOLD
from bench_contract.spec import FRAMEWORK_TITLES
from bench_contract.tuning import OUT_OF_THE_BOX, TUNING_WORDS
from orchestrator.plan.profile import device_matches, expected_devices
from orchestrator.results.certificate import COMPARABLE, certificates, tuning_notes
from orchestrator.results.intervals import (
    pairs_of,
    paired_speedup_interval,
    sequential_rule,
    sequential_speedup,
    speedup_interval,
)
from orchestrator.results.missing import campaign_manifests
from orchestrator.results.store import merged_dataset

KEY = ["benchmark", "use_case", "model", "batch_size", "precision"]
# One comparison row: the same device (kind and model), the same cell key, and the same measured settings (a
# row's `settings`, bench_contract.spec.MEASURED_SETTINGS): runs that differ in any of them are never pooled,
# and a JAX run is compared only with PyTorch runs on the same kind and model of device.
# On a CPU, the CPUs a run was bound to and its framework's intra-op threads (bench_contract.run.cpu_binding) are
# settings too: a JAX run on 2 CPUs is never paired or pooled with a PyTorch run on 4. Elsewhere they are left
# out of the key ("" in with_row_key): the device computes, not the host's threads.
CPU_SETTINGS = ("bound_cpus", "intra_op_threads")
ROW_KEY = ["device_kind", "device_model", *KEY, "settings", *CPU_SETTINGS]
TEXT_KEY = ("device_kind", "device_model", "benchmark", "model", "precision", "settings")  # ROW_KEY's words
# How a differing setting is named in a row, so a reader sees why one cell has several rows.
SETTING_WORDS = {
    "torch_compile": {True: "torch.compile", False: "eager"},
    "channels_last": {True: "channels_last", False: "contiguous"},
    "data_source": {"real": "real data", "synthetic": "synthetic"},
    "batch_search": {True: "largest batch", False: "fixed batch"},
    "dp_engine": {"torchfunc": "torch.func", "opacus": "Opacus"},
    # Use case 2's state layout; a row written before the setting existed ran replicated.
    "parallelism": {"ddp": "replicated (ddp)", "fsdp": "sharded (fsdp)", None: "replicated (ddp)"},
    # --tune's levels (bench_contract.tuning); a row written before the setting existed ran out of the box.
    "tuning": {**TUNING_WORDS, None: TUNING_WORDS[OUT_OF_THE_BOX]},
}
# PyTorch's DP-SGD engine, a setting of its rows only: the JAX side (always jax.vmap) is compared with each engine
# (with_jax_beside_each_engine).
ENGINE_SETTING = "dp_engine"
# Settings that are counts, named by their unit ("2 CPUs", "1 node").
SETTING_UNITS = {"nodes": "node", "bound_cpus": "CPU", "intra_op_threads": "thread"}
FRAMEWORKS = ("jax", "torch")

BYTES_METRICS = {"peak_device_memory_allocated", "peak_host_rss"}  # recorded in bytes, shown in MiB (format_value)
# A comparison row's per-framework medians, in the order of its columns (report.csv): these summary metrics and
# every fraction of the peak, against the shared peak (with_shared_peak); a table shows an MFU from here, never
# from a run's own rows (divided by its own peak). A value that was not available is NaN (null in Parquet).
FRAME_METRICS = list(dict.fromkeys([
    "throughput", "step_time_p50", "step_time_p95", "step_time_p99", "compile_time", "peak_device_memory_allocated",
    "peak_host_rss", "mfu", "arithmetic_intensity",
    "compute_bound",  # 1 compute-bound, 0 memory-bound (bench_contract.measure.roofline)
    "energy_per_sample", "test_accuracy", *PEAK_FRACTIONS]))


def system_mismatches(df, expected: dict[tuple[str, str], str]):
    """The rows whose device does not match what their system expects: one row per campaign, system, device model
    and node, with the pattern and how many cells. `expected` maps (campaign, system) to the system's `expect`
    (profile.expected_devices of each campaign's manifest). A constraint the site ignored shows up here."""
    import pandas as pd

    columns = ["campaign", "system", "expect", "device_model", "slurm_nodelist", "cells"]
    if df.empty or "system" not in df.columns:
        return pd.DataFrame(columns=columns)
    rows = df[df["system"].fillna("") != ""].drop_duplicates(["campaign", "cell_id", "trial"])
    patterns = [expected.get((c, s)) for c, s in zip(rows["campaign"], rows["system"])]
    wrong = [p is not None and not device_matches(p, m) for p, m in zip(patterns, rows["device_model"])]
    flagged = rows[wrong].assign(expect=[p for p, w in zip(patterns, wrong) if w])
    keys = columns[:-1]
    return flagged.groupby(keys, dropna=False).size().reset_index(name="cells")[columns]


def mismatch_lines(mismatches) -> list[str]:
    """One warning sentence per row of system_mismatches."""
    return [f"warning: system {r.system} expects a device matching {r.expect!r}, but {r.cells} cell(s) of campaign "
            f"{r.campaign} ran on {r.device_model!r} (node {r.slurm_nodelist}): the site may ignore its constraint"
            for r in mismatches.itertuples()]


def expected_devices_of(folders: Sequence[Path]) -> dict[tuple[str, str], str]:
    """(campaign, system) -> the device pattern its profile's system expects, from every campaign's manifest (one
    that cannot be read is left out: collect says so, last)."""
    return {(folder.name, system): pattern for folder, manifest in campaign_manifests(folders)
            for system, pattern in expected_devices(manifest.profile).items()}


def device_mismatch_lines(merged: Path, folders: Sequence[Path]) -> list[str]:
    """A sentence for each system whose rows in the merged dataset ran on a device it does not expect (a
    constraint the site ignored), from the campaigns' profiles in `folders`: said by collect and report."""
    import pyarrow.dataset as ds

    expected = expected_devices_of(folders)
    columns = ["campaign", "cell_id", "trial", "system", "device_model", "slurm_nodelist"]
    dataset = merged_dataset(merged)
    if not expected or not set(columns) <= set(dataset.schema.names):
        return []
    rows = dataset.to_table(columns=columns, filter=ds.field("system") != "").to_pandas()
    return mismatch_lines(system_mismatches(rows, expected))


def summary_rows(df):
    """Rows that are one value per run (not per step or epoch)."""
    return df[df["step"].isna() & df["epoch"].isna()]


def run_values(df, metric: str):
    """metric value per (device_model, key, framework, run), where a run is one trial of one cell_id in one
    campaign: trials of a cell are independent runs, each in its own process."""
    rows = summary_rows(with_row_key(df))
    rows = rows[rows["metric"] == metric]
    rows = rows.assign(node=node_of(rows))
    run = [c for c in RUN_COLUMNS if c in rows]
    return rows.groupby([*ROW_KEY, "framework", *run, "node"], dropna=False)["value"].median()


def node_of(rows) -> list[str]:
    """Where each row's run ran (NODE): Slurm's node list, else its host; "" where neither was recorded."""
    nodelist, host = ([str(v) if isinstance(v, str) else "" for v in rows[c]] if c in rows else [""] * len(rows)
                      for c in NODE)
    return [n or h for n, h in zip(nodelist, host)]


CELL_RUN = ("campaign", "cell_id", "trial")  # what identifies one run of a cell: a trial of it in one campaign
RUN = (*CELL_RUN, "framework")  # what identifies one run of one framework in the merged rows
# A run's columns that the comparison reads beside CELL_RUN: how it was paired and under which sequential rule
# (a paired run's interval is the pairs'; --trials auto's is Stein's: orchestrator.results.intervals).
RUN_COLUMNS = (*CELL_RUN, "pair_order", "trial_rule")
NODE = ("slurm_nodelist", "hostname")  # where a run ran: Slurm's node list, else (outside Slurm) its host


def summary_metric(df, metric: str):
    """The rows of `metric` that are one value per run (not per step or epoch)."""
    return df["step"].isna() & df["epoch"].isna() & (df["metric"] == metric)


def highest_per(df, metric: str, group: list[str]):
    """The highest value of `metric` any run recorded per `group` (summary rows, measured values only)."""
    recorded = df[summary_metric(df, metric) & df["value"].notna()]
    return recorded.groupby(group, dropna=False)["value"].max()


def looked_up(df, mask, series, keys: list[str]) -> np.ndarray:
    """`series`' value for every row of `df` in `mask`, matched on the columns `keys` (NaN where it has none)."""
    return df.loc[mask, keys].join(series.rename("_looked_up"), on=keys)["_looked_up"].to_numpy(dtype=float)


# One peak FLOP/s per device kind, model and precision; one bandwidth per device kind and model (the bandwidth is
# measured with float32 copies whatever the cell's precision: it is the memory's, not the arithmetic's). On a CPU
# the CPUs a run was bound to and its threads are part of the device (with_row_key; "" elsewhere): a 2-CPU run's
# MFU against a 32-CPU campaign's peak came out 16 times too small (issue 29, defect 7).
PEAK_GROUP = ["device_kind", "device_model", *CPU_SETTINGS, "precision"]
BANDWIDTH_GROUP = ["device_kind", "device_model", *CPU_SETTINGS]


def present(columns: list[str], df) -> list[str]:
    """The columns of `columns` that df has (a frame from before a column existed lacks it)."""
    return [c for c in columns if c in df]
SHARED_NOTE = ("shared by both frameworks: the highest {metric} any run of either recorded on this device kind "
               "and model{precision} (comparison, orchestrator.results.compare)")


def with_shared_peak(df):
    """Every run's MFU, each of PEAK_FRACTIONS, against one peak per device kind, device model and precision, the
    same for both frameworks: the highest `peak_flops` any run recorded there (a GPU's datasheet figure; on a CPU,
    the best of the frameworks' own matmul calibrations). Each backend divides by its own peak, and two calibrations
    on one CPU differ (69 against 88 GFLOP/s here): MFUs incomparable. The peak_flops rows say the shared peak too."""
    run, group = present(list(RUN), df), present(PEAK_GROUP, df)
    shared = highest_per(df, "peak_flops", group)
    if shared.empty:
        return df
    own = df[summary_metric(df, "peak_flops") & df["value"].notna()].drop_duplicates([*group, *run])
    own = own.set_index([*group, *run])["value"]
    df = df.copy()
    fractions = df["step"].isna() & df["epoch"].isna() & df["metric"].isin(PEAK_FRACTIONS)
    scale = looked_up(df, fractions, own, [*group, *run]) / looked_up(df, fractions, shared, group)
    df.loc[fractions, "value"] = df.loc[fractions, "value"].to_numpy() * scale
    peak = summary_metric(df, "peak_flops")
    df.loc[peak, "value"] = looked_up(df, peak, shared, group)
    if "note" in df:
        df.loc[peak, "note"] = SHARED_NOTE.format(metric="peak_flops", precision=" at this precision")
    return df


def with_shared_roofline(df):
    """Every run's roofline against one memory bandwidth per device kind and model, the same for both
    frameworks: the highest `peak_bandwidth` any run recorded there (a GPU's datasheet figure; on a CPU the
    best of the frameworks' own scale-operation measurements, which differ: 3.5 against 8.4 GB/s here, the
    slower one measuring its framework's copy, not the memory). Each run's peak_bandwidth, ridge_point (the
    shared peak FLOP/s over the shared bandwidth) and compute_bound (its own arithmetic intensity against that
    ridge) are rewritten, with notes that say so where the frame has notes; an intensity that was not
    measured leaves compute_bound not available."""
    peak_group, bandwidth_group = present(PEAK_GROUP, df), present(BANDWIDTH_GROUP, df)
    bandwidth = highest_per(df, "peak_bandwidth", bandwidth_group)
    if bandwidth.empty:
        return df
    run = present(list(RUN), df)
    peak = highest_per(df, "peak_flops", peak_group)
    intensity = df[summary_metric(df, "arithmetic_intensity") & df["value"].notna()]
    intensity = intensity.drop_duplicates([*peak_group, *run]).set_index([*peak_group, *run])["value"]
    df = df.copy()
    rows = summary_metric(df, "peak_bandwidth")
    df.loc[rows, "value"] = looked_up(df, rows, bandwidth, bandwidth_group)
    rows = summary_metric(df, "ridge_point")
    ridge = looked_up(df, rows, peak, peak_group) / looked_up(df, rows, bandwidth, bandwidth_group)
    df.loc[rows, "value"] = ridge
    rows = summary_metric(df, "compute_bound")
    ridge = looked_up(df, rows, peak, peak_group) / looked_up(df, rows, bandwidth, bandwidth_group)
    own = looked_up(df, rows, intensity, [*peak_group, *run])
    df.loc[rows, "value"] = np.where(np.isnan(own) | np.isnan(ridge), np.nan, (own >= ridge).astype(float))
    if "note" in df:
        df = with_shared_roofline_notes(df, own, ridge)
    return df


def with_shared_roofline_notes(df, intensity: np.ndarray, ridge: np.ndarray):
    """The notes of the rewritten roofline rows (df already copied); intensity and ridge: per compute_bound row."""
    df.loc[summary_metric(df, "peak_bandwidth"), "note"] = SHARED_NOTE.format(metric="peak_bandwidth", precision="")
    rows = summary_metric(df, "ridge_point")
    df.loc[rows, "note"] = ["shared peak FLOP/s / shared peak bandwidth" if not np.isnan(v)
                            else "not available: needs both a peak FLOP/s and a peak bandwidth on this device"
                            for v in df.loc[rows, "value"]]
    df.loc[summary_metric(df, "compute_bound"), "note"] = [
        "not available: needs the arithmetic intensity and the ridge point" if np.isnan(i) or np.isnan(r) else
        f"{'compute' if i >= r else 'memory'}-bound: intensity {i:.3g} FLOP/byte against the shared ridge point "
        f"of {r:.3g}" for i, r in zip(intensity, ridge)]
    return df


def with_variant_label(df):
    """A tiny variant is a different network: its model is named "mlp (tiny)", never merged with the full one."""
    if "model_variant" not in df:
        return df
    return df.assign(model=[f"{m} ({v})" if isinstance(v, str) and v not in ("full", "") else m
                            for m, v in zip(df["model"], df["model_variant"])])


def with_row_key(df):
    """The frame with every ROW_KEY column and the CPU settings as text (with_device_key), JAX's rows beside each
    PyTorch DP-SGD engine (with_jax_beside_each_engine)."""
    return with_jax_beside_each_engine(with_device_key(df))


def with_device_key(df):
    """The frame (its rows and index as they are) with every ROW_KEY column (a table from before a column existed
    reads it as empty), the CPU settings as text: the count on a CPU, "" where not recorded or not on the CPU."""
    import pandas as pd

    missing = {c: "" for c in ROW_KEY if c not in df}
    df = df.assign(**missing) if missing else df
    # A dataset merged from an older campaign's tables and a newer one's has the column, empty (NaN) on the older
    # rows: read as "", as where no table has it (NaN never equals itself: it would lose the row's speed-up).
    unrecorded = {c: df[c].astype(object).fillna("") for c in TEXT_KEY if df[c].isna().any()}
    df = df.assign(**unrecorded) if unrecorded else df
    on_cpu = df["device_kind"] == "cpu"
    texts = {}
    for column in CPU_SETTINGS:
        numbers = pd.to_numeric(df[column], errors="coerce")
        texts[column] = [str(int(n)) if cpu and not np.isnan(n) else "" for n, cpu in zip(numbers, on_cpu)]
    return df.assign(**texts)


def without_engine(settings: str) -> tuple[str, str]:
    """(a row's settings JSON without the DP-SGD engine, the engine or "")."""
    import json

    try:
        parsed = json.loads(settings) if settings else {}
    except ValueError:
        return settings, ""
    engine = parsed.pop(ENGINE_SETTING, "") or ""
    return json.dumps(parsed, sort_keys=True), engine


def with_jax_beside_each_engine(df):
    """JAX's rows once per PyTorch DP-SGD engine they are compared with. The JAX cell (always jax.vmap) is planned
    once (orchestrator.plan.matrix.with_dp_engines) and its settings name no engine: a JAX row takes, in turn, the
    settings of every PyTorch run equal to it in all but the engine, so that JAX against torch.func and JAX against
    Opacus are two comparison rows over the same JAX runs. A JAX row without such a PyTorch run stays as it is; one
    that names an engine already is left alone, so applying this twice changes nothing."""
    import pandas as pd

    split = {s: without_engine(s) for s in df["settings"].unique()}
    engined = {s for s, (_, engine) in split.items() if engine}
    if not engined or "framework" not in df:
        return df
    base = df["settings"].map(lambda s: split[s][0])
    torch = (df["framework"] == "torch") & df["settings"].isin(engined)
    jax = (df["framework"] == "jax") & ~df["settings"].isin(engined)
    match = [c for c in ROW_KEY if c != "settings"]
    engines = (df.loc[torch, match].assign(_base=base[torch], _engine_settings=df.loc[torch, "settings"])
               .drop_duplicates())
    paired = df[jax].assign(_base=base[jax]).merge(engines, on=[*match, "_base"], how="left")
    found = paired["_engine_settings"].notna()
    paired.loc[found, "settings"] = paired.loc[found, "_engine_settings"]
    return pd.concat([df[~jax], paired.drop(columns=["_base", "_engine_settings"])], ignore_index=True)


def setting_label(name: str, value) -> str:
    if name in SETTING_WORDS and value in SETTING_WORDS[name]:
        return SETTING_WORDS[name][value]
    if name in SETTING_UNITS:
        unit = SETTING_UNITS[name]
        if value is None:
            return f"{unit}s not recorded"
        return f"{value} {unit}" + ("s" if int(value) != 1 else "")
    if name == "tasks_per_node":
        return f"{value} per node"
    return f"{name} {value}"


def differing_settings(frame):
    """Per comparison row, the settings in which it differs from the other rows of its device and cell key,
    in words ("torch.compile", "2 nodes", "synthetic"); "" where the cell has one row."""
    import json

    labels = {}
    for _, block in frame.groupby(["device_kind", "device_model", *KEY], dropna=False):
        parsed = {s: json.loads(s) if s else {} for s in block["settings"].unique()}
        # The spec's settings, and on a CPU the binding (with_row_key leaves it "" elsewhere).
        settings = {index: parsed[text] | {c: block.at[index, c] for c in CPU_SETTINGS if block.at[index, c]}
                    for index, text in zip(block.index, block["settings"])}
        names = sorted({n for a in settings.values() for b in settings.values() for n in a.keys() | b.keys()
                        if a.get(n) != b.get(n)})
        for index, values in settings.items():
            labels[index] = ", ".join(setting_label(n, values.get(n)) for n in names)
    return [labels[i] for i in frame.index]


def spread_note(step_cvs: np.ndarray, throughputs: np.ndarray) -> str:
    """Why a framework's numbers for a cell are too spread to trust, or "" when they are not.

    Two spreads are checked against CV_THRESHOLD: within a run (the median over runs of the step times'
    coefficient of variation) and between runs (the CV of the runs' throughputs, with at least two runs)."""
    notes = []
    if len(step_cvs) and np.median(step_cvs) > CV_THRESHOLD:
        notes.append(f"steps {np.median(step_cvs):.0%}")
    if len(throughputs) >= 2:
        between = np.std(throughputs, ddof=1) / np.mean(throughputs)
        if between > CV_THRESHOLD:
            notes.append(f"trials {between:.0%}")
    return " ".join(notes)


def comparison_frame(df):
    """One row per device model and cell key; per framework the median of each table metric; the speed-up."""
    import pandas as pd

    if df.empty:
        return pd.DataFrame()
    df = with_variant_label(df)
    df = with_shared_roofline(with_shared_peak(with_row_key(df)))
    rows = summary_rows(df)
    present = [m for m in FRAME_METRICS if m in set(rows["metric"])]
    medians = (
        rows[rows["metric"].isin(present)]
        .groupby([*ROW_KEY, "framework", "metric"], dropna=False)["value"].median()
        .unstack(["metric", "framework"])
    )
    out = pd.DataFrame(index=medians.index)
    for metric in present:
        for framework in FRAMEWORKS:
            column = medians.get((metric, framework))
            out[f"{framework}_{metric}"] = column if column is not None else np.nan
    throughput = run_values(df, "throughput")
    speedups = [row_speedup(*(_run_series(throughput, index, fw) for fw in FRAMEWORKS)) for index in out.index]
    for k, column in enumerate(SPEEDUP_COLUMNS):  # a list each: an empty frame gets the columns all the same
        out[column] = [speedup[k] for speedup in speedups]
    throttled = run_values(df, "throttled").groupby(level=[*ROW_KEY, "framework"], dropna=False).sum(min_count=1)
    for framework in FRAMEWORKS:  # runs on a GPU slowed down for heat (bench_contract.measure.node_state)
        out[f"{framework}_throttled_runs"] = [_count(throttled, index, framework) for index in out.index]
    step_cv = run_values(df, "step_time_cv")
    out["spread_too_wide"] = [
        "; ".join(f"{FRAMEWORK_TITLES[fw]} {note}" for fw in FRAMEWORKS
                  if (note := spread_note(*(_run_series(values, index, fw).to_numpy(dtype=float)
                                            for values in (step_cv, throughput)))))
        for index in out.index
    ]
    certified = certificates(rows, ROW_KEY, list(CELL_RUN))
    out["comparable"] = [certified.get(tuple(index), COMPARABLE) for index in out.index]
    tuning = tuning_notes(rows, ROW_KEY)
    out["tuning"] = [tuning.get(tuple(index), "") for index in out.index]
    # Never a speed-up for a row that is not comparable: not in a table, a plot, report.csv or a baseline.
    out.loc[out["comparable"] != COMPARABLE, ["speedup", "speedup_ci_low", "speedup_ci_high"]] = np.nan
    out = out.reset_index()
    out["differs_in"] = differing_settings(out)
    return out


# What row_speedup gives a comparison row, in its order.
SPEEDUP_COLUMNS = ("speedup", "speedup_ci_low", "speedup_ci_high", "runs_jax_torch", "paired", "target_interval")


def row_speedup(jax, torch) -> tuple[float, float, float, str, bool, float]:
    """The speed-up of one comparison row's runs (_run_series of each side), its interval's ends, the runs of each
    side ("2/2", "6/6 paired"), whether every run of both sides came from paired jobs (the interval then
    resampled pairs), and the interval --trials auto aimed at (NaN for a fixed number of trials)."""
    pairs = pairs_of(jax, torch)
    rule = sequential_rule(jax, torch) if pairs else None
    if rule:  # --trials auto: Stein's interval, the one whose coverage the rule keeps (bench_contract.sequential)
        speedup, low, high = sequential_speedup(pairs[0], pairs[1], rule)
    elif pairs:
        speedup, low, high = paired_speedup_interval(*pairs[:2], nodes=pairs[2])
    else:
        speedup, low, high = speedup_interval(jax.to_numpy(dtype=float), torch.to_numpy(dtype=float),
                                              numerator_nodes=_nodes(jax), denominator_nodes=_nodes(torch))
    return (float(speedup), float(low), float(high), f"{len(jax)}/{len(torch)}" + (" paired" if pairs else ""),
            pairs is not None, rule.target if rule else np.nan)


def _run_series(series, index, framework):
    """The runs of one framework for one comparison row, indexed by what identifies a run."""
    key = tuple(index) + (framework,)
    try:
        return series.loc[key]
    except KeyError:
        return series.iloc[:0]


def _count(series, index, framework) -> float:
    """A per-framework total of a comparison row (NaN where its runs recorded none)."""
    return float(series.get(tuple(index) + (framework,), np.nan))


def _nodes(runs) -> np.ndarray:
    """The node of each run of a _run_series."""
    return runs.index.get_level_values("node").to_numpy() if "node" in runs.index.names else np.zeros(len(runs))


def comparable(row) -> bool:
    """Whether the row's certificate passed (a frame from before the certificate has no column: it did not)."""
    return row.get("comparable", "") == COMPARABLE


def format_speedup(row) -> str:
    """The speed-up with its interval; never for a row that is not comparable (certificate), whose reasons
    the tables say below them."""
    if not comparable(row):
        return "not comparable"
    if np.isnan(row["speedup"]):
        return "n/a"
    if np.isnan(row["speedup_ci_low"]):  # fewer than two runs on a side: no interval, and why
        runs = str(row.get("runs_jax_torch", "")).removesuffix(" paired")
        return f"{row['speedup']:.2f}x [n/a ({'1 run' if runs == '1/1' else f'runs {runs}'})]"
    return f"{row['speedup']:.2f}x [{row['speedup_ci_low']:.2f}, {row['speedup_ci_high']:.2f}]"


def format_value(metric: str, value) -> str:
    if value is None or np.isnan(value):
        return "n/a"
    if metric in BYTES_METRICS:  # MiB, with three digits below 10 (a tiny model's state is a fraction of one)
        mib = value / 2**20
        return f"{mib:,.0f}" if mib >= 10 else f"{mib:.3g}"
    if metric == "throughput":  # whole samples/s, with three digits below 10 (a full-size model on a CPU)
        return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"
    if metric == "test_accuracy":
        return f"{value:.3f}"
    if metric == "compute_bound":  # a median over runs: 0.5 when the runs disagree
        return "compute" if value > 0.5 else "memory" if value < 0.5 else "mixed"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"
