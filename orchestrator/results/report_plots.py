"""The report's plots (matplotlib): metrics against batch size, speed-up heat maps, compile times, scaling,
step-time distributions, rooflines and training curves, JAX beside PyTorch. Each is written as PNG at 300 dpi, SVG
and PDF (for a paper), and kept as a PNG at screen resolution for the HTML page; titled in words; quantities are
drawn from zero, and a figure or panel without data is not drawn (issue 31)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench_contract.atomic import publish
from orchestrator.results.compare import FRAMEWORK_TITLES, FRAMEWORKS, KEY, summary_rows
from orchestrator.results.scaling import scaling_frame
from orchestrator.results.views import use_case_words

COLORS = {"jax": "#1f77b4", "torch": "#d62728"}


def devices(frame) -> list[str]:
    return sorted(str(d) for d in frame["device_model"].unique())


def _figure():
    import matplotlib

    matplotlib.use("Agg")  # no display on a login node
    import matplotlib.pyplot as plt

    return plt


DPI = 300  # print quality: a figure 6 inches wide is 1,800 pixels
FORMATS = ("png", "svg", "pdf")  # the files beside the report, for a paper
SCREEN_DPI = 110  # the copy the page embeds: at 300 dpi the page of a 37-row campaign weighed 17 MB, now 5.5


@dataclass(frozen=True)
class Plot:
    title: str
    path: Path  # the PNG file (SVG and PDF beside it, of the same name)
    screen: bytes  # the same figure as a PNG at SCREEN_DPI, for the page


def _save(plt, fig, path: Path, plots: list, title: str) -> None:
    import io

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    for kind in FORMATS:
        publish(path.with_suffix(f".{kind}"), lambda tmp: fig.savefig(tmp, dpi=DPI, format=kind))
    screen = io.BytesIO()
    fig.savefig(screen, dpi=SCREEN_DPI, format="png")
    plt.close(fig)
    plots.append(Plot(title, path, screen.getvalue()))


def cell_title(bench, case, model, precision, batch=None) -> str:
    """A cell in the words of a title: "digits mlp, batch 32, fp32: Per-sample gradients (DP-SGD) (use case 3)"."""
    return f"{bench} {model}{f', batch {batch}' if batch is not None else ''}, {precision}: {use_case_words(case)}"


def _slug(*parts) -> str:
    return "_".join(str(p).replace(" ", "-").replace("/", "-") for p in parts)


def draw_plots(df, frame, folder: Path) -> list[Plot]:
    plt = _figure()
    plots: list[Plot] = []
    summary = summary_rows(df)
    device_index = {device: i for i, device in enumerate(devices(frame))}
    draw_metric_lines(plt, frame, device_index, folder, plots)
    draw_speedup_lines(plt, frame, device_index, folder, plots)
    for device, block in frame.groupby("device_model"):
        d = device_index[str(device)]
        draw_speedup(plt, block, device, folder / f"speedup_{d}.png", plots)
        draw_compile_times(plt, block, device, folder / f"compile_{d}.png", plots)
    draw_scaling(plt, scaling_frame(summary), device_index, folder, plots)
    draw_latency_distributions(plt, df, device_index, folder, plots)
    draw_rooflines(plt, summary, device_index, folder, plots)
    draw_training_curves(plt, df, device_index, folder, plots)
    return plots


def metric_families(where: str) -> list[tuple[str, list[str], list[str], float, str, str]]:
    """(file prefix, metrics, labels, scale, y label, caption) of each plot against batch size: one line per
    framework and metric."""
    return [
        ("throughput", ["throughput"], ["throughput"], 1, "samples/s", f"Throughput against batch size: {where}"),
        ("latency", ["step_time_p50", "step_time_p95", "step_time_p99"], ["p50", "p95", "p99"], 1,
         "step time (ms)", f"Step-time percentiles (p50, p95, p99): {where}"),
        ("memory", ["peak_device_memory_allocated", "peak_host_rss"], ["peak device memory", "peak host RSS"],
         2**-20, "MiB", f"Peak memory against batch size: {where}"),
        ("energy", ["energy_per_sample"], ["energy per sample"], 1, "J/sample",
         f"Energy per sample (NVML, over the timed steps) against batch size: {where}"),
        ("mfu", ["mfu"], ["MFU"], 100, "MFU (%)", f"Model FLOP utilisation against batch size: {where}"),
    ]


def draw_metric_lines(plt, frame, device_index: dict, folder: Path, plots: list) -> None:
    """Each metric family against batch size, JAX beside PyTorch, per device model, benchmark, use case, model
    and precision."""
    for group, block in frame.groupby(["device_model", "benchmark", "use_case", "model", "precision"]):
        device, bench, case, model, precision = group
        block = block.sort_values("batch_size")
        slug = _slug(device_index[str(device)], bench, case, model, precision)
        where = f"{bench}, use case {case}, {model}, {precision} on {device}"
        for prefix, metrics, labels, scale, ylabel, caption in metric_families(where):
            # A metric that was not available (energy on a CPU) is NaN on every row: no plot of nothing.
            present = [(m, label) for m, label in zip(metrics, labels)
                       if any(f"{fw}_{m}" in block and block[f"{fw}_{m}"].notna().any() for fw in FRAMEWORKS)]
            if not present:
                continue
            fig, ax = plt.subplots(figsize=(6, 4))
            for fw in FRAMEWORKS:
                for (m, label), style in zip(present, ("o-", "s--", "^:")):
                    if f"{fw}_{m}" not in block:
                        continue
                    ax.plot(block["batch_size"], block[f"{fw}_{m}"] * scale, style, color=COLORS[fw],
                            label=f"{FRAMEWORK_TITLES[fw]} {label}")
            batch_size_axis(ax, block["batch_size"])
            ax.set(xlabel="batch size", ylabel=ylabel, title=f"{cell_title(bench, case, model, precision)}\n{device}")
            ax.set_ylim(bottom=0)  # a quantity from zero: an axis cut above it makes a small gap look large
            ax.legend(fontsize=7)
            _save(plt, fig, folder / f"{prefix}_{slug}.png", plots, caption)


def speedup_errors(block):
    """The speed-ups of `block` (rows of one setting, by batch size) and their error bars: the distances from each
    speed-up to the ends of the 95% interval the tables print (compare.comparison_frame); 0 where a row has none
    (one run a side), so its point stands without a bar."""
    import numpy as np

    speedup = block["speedup"].to_numpy(dtype=float)
    below = np.nan_to_num(speedup - block["speedup_ci_low"].to_numpy(dtype=float))
    above = np.nan_to_num(block["speedup_ci_high"].to_numpy(dtype=float) - speedup)
    return speedup, np.vstack([below, above])


def draw_speedup_lines(plt, frame, device_index: dict, folder: Path, plots: list) -> None:
    """The speed-up against batch size with its 95% intervals as error bars, per device model, benchmark, use case,
    model and precision; a line per setting where the cell has several rows (eager and torch.compile)."""
    for group, block in frame.groupby(["device_model", "benchmark", "use_case", "model", "precision"]):
        if not block["speedup"].notna().any():
            continue
        device, bench, case, model, precision = group
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, line in block.sort_values("batch_size").groupby(block["differs_in"].fillna(""), sort=True):
            line = line[line["speedup"].notna()]
            speedup, errors = speedup_errors(line)
            ax.errorbar(line["batch_size"], speedup, yerr=errors, fmt="o-", capsize=4, label=label or None)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")  # parity: above it JAX is faster
        batch_size_axis(ax, block["batch_size"])
        ax.set(xlabel="batch size", ylabel="speed-up JAX/PyTorch (>1: JAX faster)",
               title=f"{cell_title(bench, case, model, precision)}\n{device}")
        ax.set_ylim(bottom=0)  # a ratio from zero, as the other quantities
        if block["differs_in"].fillna("").nunique() > 1:
            ax.legend(fontsize=7)
        slug = _slug(device_index[str(device)], bench, case, model, precision)
        _save(plt, fig, folder / f"speedup_lines_{slug}.png", plots,
              f"Speed-up JAX/PyTorch with its 95% interval against batch size: {bench}, use case {case}, {model}, "
              f"{precision} on {device}")


def batch_size_axis(ax, batch_sizes) -> None:
    """A log2 axis that reads the batch sizes as people write them (16, 32), not 2^4, 2^5: a tick at each size."""
    from matplotlib.ticker import NullFormatter, NullLocator

    sizes = sorted({int(b) for b in batch_sizes})
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def speedup_norm(values):
    """A colour scale for speed-ups: logarithmic, so that 2x and 0.5x are as far from 1 as each other; centred
    on 1 (no difference, the middle colour); wide enough for the largest ratio either way, at least 2x."""
    import numpy as np
    from matplotlib.colors import LogNorm

    finite = values[np.isfinite(values) & (values > 0)]
    reach = max(2.0, float(np.max(np.maximum(finite, 1 / finite)))) if finite.size else 2.0
    return LogNorm(vmin=1 / reach, vmax=reach)


def speedup_ticks(norm, most: int = 7) -> list[float]:
    """Colour-bar ticks at powers of two between the scale's ends (0.25x, 0.5x, 1x, 2x, 4x), 1x always among
    them, every second or fourth power where there would be more than `most`."""
    import numpy as np

    top = int(np.floor(np.log2(norm.vmax) + 1e-9))
    step = 1
    while 2 * (top // step) + 1 > most:
        step *= 2
    return [2.0 ** k for k in range(-(top // step) * step, top + 1, step)]


def draw_speedup(plt, block, device, path: Path, plots: list) -> None:
    """A heat map of the speed-up of every cell of one device model: benchmark/model/use case against batch size."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    cells = block.assign(label=block["benchmark"] + "/" + block["model"] + " uc" + block["use_case"].astype(str))
    grid = cells.pivot_table(index="label", columns="batch_size", values="speedup")
    if not grid.notna().any().any():
        return
    fig, ax = plt.subplots(figsize=(1.2 * len(grid.columns) + 3, 0.6 * len(grid) + 2))
    norm = speedup_norm(grid.to_numpy(dtype=float))
    image = ax.imshow(grid.to_numpy(), cmap="coolwarm", norm=norm, aspect="auto")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    ax.set_yticks(range(len(grid.index)), list(grid.index))
    for (i, j), value in np.ndenumerate(grid.to_numpy()):
        if not np.isnan(value):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center")
    ax.set(xlabel="batch size", title=f"Speed-up JAX/PyTorch (>1: JAX faster)\n{device}")
    bar = fig.colorbar(image, ax=ax, ticks=speedup_ticks(norm), format=FuncFormatter(lambda v, _: f"{v:.2g}x"))
    bar.ax.minorticks_off()
    bar.set_label("JAX/PyTorch (log scale, 1x: equal)")
    _save(plt, fig, path, plots, f"Speed-up heat map on {device}")


# Said on the compile-time plot where PyTorch has no compile time: eager PyTorch runs the model as written.
EAGER_NOTE = "PyTorch runs eagerly here: it has no compile step (n/a)"


def draw_compile_times(plt, block, device, path: Path, plots: list) -> None:
    """Bars of each framework's compile time per cell of one device model, where any was recorded. A framework
    with no compile time at all has no bar and no legend entry; for PyTorch the plot says why (eager mode)."""
    compile_cols = [f"{fw}_compile_time" for fw in FRAMEWORKS if f"{fw}_compile_time" in block]
    if not compile_cols or not block[compile_cols].notna().any().any():
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{r.benchmark}/{r.model} uc{r.use_case} b{r.batch_size}" for r in block.itertuples()]
    width = 0.4
    for k, fw in enumerate(FRAMEWORKS):
        column = f"{fw}_compile_time"
        known = block[column].notna().to_numpy() if column in block else [False] * len(block)
        at = [i + k * width for i in range(len(block))]
        if any(known):
            # A compile time that was not measured is no bar and says n/a: never a bar of 0 s.
            ax.bar([x for x, ok in zip(at, known) if ok], block[column][known], width, color=COLORS[fw],
                   label=FRAMEWORK_TITLES[fw])
        for x, ok in zip(at, known):
            if not ok:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7, color=COLORS[fw])
    ax.set_xticks([i + width / 2 for i in range(len(block))], labels, rotation=30, ha="right", fontsize=7)
    ax.set(ylabel="compile time (s)", title=f"Compile time, apart from the timed steps\n{device}")
    ax.legend(loc="upper left")
    if "torch_compile_time" not in block or block["torch_compile_time"].isna().all():
        ax.set_ylim(0, float(block[compile_cols].max().max()) * 1.25)  # headroom for the note above the bars
        ax.text(0.99, 0.98, EAGER_NOTE, transform=ax.transAxes, ha="right", va="top", fontsize=8,
                color=COLORS["torch"])
    _save(plt, fig, path, plots, f"Compile time on {device}")


# The training-curve panels: (the metrics a panel needs, x label, y label).
CURVE_PANELS = [
    (("train_loss",), "step", "training loss"),
    (("val_accuracy",), "epoch", "validation accuracy"),
    (("val_accuracy", "epoch_time"), "wall time (s, training only)", "validation accuracy"),
    (("train_loss", "step_time"), "time in timed steps (s)", "training loss"),
]


def draw_training_curves(plt, df, device_index: dict, folder: Path, plots: list) -> None:
    """Loss and accuracy against steps, epochs and time, JAX beside PyTorch, per device model and cell key: the
    panels whose metrics the cell recorded, no figure where it recorded none (inference, use case 5)."""
    curves = df[df["metric"].isin(["train_loss", "val_accuracy", "epoch_time", "step_time"])]
    for group, block in curves.groupby(["device_model", *KEY]):
        device, bench, case, model, batch, precision = group
        recorded = set(block.loc[block["value"].notna(), "metric"])
        panels = [k for k, (needs, _, _) in enumerate(CURVE_PANELS) if set(needs) <= recorded]
        if not panels:
            continue
        d = device_index.get(str(device), 0)
        fig, shown = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 3.8), squeeze=False)
        axes = dict(zip(panels, shown[0]))
        for fw in FRAMEWORKS:
            mine = block[block["framework"] == fw]
            if not mine.empty:
                plot_run_curves(axes, one_run(mine), fw)
        for k, ax in axes.items():
            ax.set(xlabel=CURVE_PANELS[k][1], ylabel=CURVE_PANELS[k][2])
            ax.legend()
        fig.suptitle(f"Training curves: {cell_title(bench, case, model, precision, batch)} on {device}")
        _save(plt, fig, folder / f"curves_{_slug(d, bench, case, model, batch, precision)}.png", plots,
              f"Training curves: {bench}, use case {case}, {model}, batch {batch}, {precision} on {device}")


def one_run(rows):
    """The rows of one run of a framework's cell: the first cell, campaign and trial, not a blend of them."""
    run = rows[rows["cell_id"] == rows["cell_id"].iloc[0]]
    run = run[run["campaign"] == run["campaign"].iloc[0]]
    return run[run["trial"] == run["trial"].iloc[0]]


def plot_run_curves(axes: dict, run, fw: str) -> None:
    """One run's loss against steps, accuracy against epochs and wall time, and loss against timed-step time, in
    the panels of `axes` (CURVE_PANELS' index -> axes) that are drawn."""
    title = FRAMEWORK_TITLES[fw]
    loss = run[run["metric"] == "train_loss"].sort_values("step")
    acc = run[run["metric"] == "val_accuracy"].sort_values("epoch")
    times = run[run["metric"] == "epoch_time"].sort_values("epoch")["value"].cumsum()
    steps = run[run["metric"] == "step_time"].sort_values("step")
    if 0 in axes:
        axes[0].plot(loss["step"], loss["value"], color=COLORS[fw], label=title, lw=0.8)
    if 1 in axes:
        axes[1].plot(acc["epoch"] + 1, acc["value"], "o-", color=COLORS[fw], label=title)
    if 2 in axes and len(times) == len(acc):
        axes[2].plot(times.to_numpy(), acc["value"].to_numpy(), "o-", color=COLORS[fw], label=title)
    if 3 in axes and len(steps):
        # Loss against the time spent in the timed steps (warm-up steps carry no time and are left out).
        timed_loss = loss.set_index("step")["value"].reindex(steps["step"])
        axes[3].plot(steps["value"].cumsum().to_numpy() / 1e3, timed_loss.to_numpy(), color=COLORS[fw],
                     label=title, lw=0.8)


def draw_latency_distributions(plt, df, device_index: dict, folder: Path, plots: list) -> None:
    """Box plots of every timed step (all runs and trials pooled), JAX beside PyTorch at each batch size, per
    device model, benchmark, use case, model and precision: the percentiles in the tables, seen whole."""
    times = df[df["metric"] == "step_time"]
    for (device, bench, case, model, precision), block in times.groupby(
            ["device_model", "benchmark", "use_case", "model", "precision"]):
        batches = sorted(block["batch_size"].unique())
        fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(batches) + 2), 4))
        for k, fw in enumerate(FRAMEWORKS):
            data = [block.loc[(block["framework"] == fw) & (block["batch_size"] == b), "value"].to_numpy()
                    for b in batches]
            positions = [i * 3 + k for i in range(len(batches))]
            present = [(p, d) for p, d in zip(positions, data) if len(d)]
            if not present:
                continue
            parts = ax.boxplot([d for _, d in present], positions=[p for p, _ in present], widths=0.8,
                               patch_artist=True, showfliers=True, flierprops={"markersize": 2})
            for box in parts["boxes"]:
                box.set_facecolor(COLORS[fw])
                box.set_alpha(0.6)
            ax.plot([], [], "s", color=COLORS[fw], label=FRAMEWORK_TITLES[fw])  # legend entry
        ax.set_xticks([i * 3 + 0.5 for i in range(len(batches))], [str(b) for b in batches])
        ax.set_yscale("log")
        ax.set(xlabel="batch size", ylabel="step time (ms, log scale)",
               title=f"Step-time distribution: {cell_title(bench, case, model, precision)}\n{device}")
        ax.legend(fontsize=7)
        d = device_index.get(str(device), 0)
        _save(plt, fig, folder / f"latency_distribution_{_slug(d, bench, case, model, precision)}.png", plots,
              f"Step-time distribution (every timed step): {bench}, use case {case}, {model}, {precision} on {device}")


ROOFLINE_METRICS = ["arithmetic_intensity", "achieved_flops", "peak_flops", "peak_bandwidth"]


def draw_rooflines(plt, summary, device_index: dict, folder: Path, plots: list) -> None:
    """One roofline per device model: every cell of both frameworks at its arithmetic intensity and achieved
    FLOP/s, under the roof min(peak FLOP/s, bandwidth x intensity). The roof takes the highest peak and
    bandwidth recorded for the device (GPUs: the datasheet; CPUs: each framework's own calibration, so the
    highest is the closest to the hardware)."""
    import numpy as np

    rows = summary[summary["metric"].isin(ROOFLINE_METRICS) & summary["value"].notna()]
    if rows.empty:
        return
    cells = rows.pivot_table(index=["device_model", "framework", *KEY], columns="metric", values="value",
                             aggfunc="median").reset_index()
    if not set(ROOFLINE_METRICS) <= set(cells.columns):
        return
    for device, block in cells.groupby("device_model"):
        points = block.dropna(subset=["arithmetic_intensity", "achieved_flops"])
        peak, bandwidth = block["peak_flops"].max(), block["peak_bandwidth"].max()
        if points.empty or np.isnan(peak) or np.isnan(bandwidth):  # no roof to draw
            continue
        ridge = peak / bandwidth
        low = min(points["arithmetic_intensity"].min(), ridge) / 4
        high = max(points["arithmetic_intensity"].max(), ridge) * 4
        x = np.geomspace(low, high, 200)
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        ax.plot(x, np.minimum(peak, bandwidth * x), color="black", lw=1.2,
                label=f"roof: {peak / 1e9:,.0f} GFLOP/s, {bandwidth / 1e9:,.1f} GB/s")
        ax.axvline(ridge, color="grey", ls=":", lw=0.8)
        for _, cell in points.groupby(KEY):  # a cell's two points joined: one label then names both
            if len(cell) > 1:
                ax.plot(cell["arithmetic_intensity"], cell["achieved_flops"], color="grey", lw=0.6, alpha=0.6)
        for fw in FRAMEWORKS:
            mine = points[points["framework"] == fw]
            ax.scatter(mine["arithmetic_intensity"], mine["achieved_flops"], color=COLORS[fw], s=18,
                       label=FRAMEWORK_TITLES[fw])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="achieved FLOP/s",
               title=f"Roofline (left of the dotted ridge: memory-bound)\n{device}")
        ax.legend(fontsize=7, loc="lower right")
        label_cells(fig, ax, points)
        _save(plt, fig, folder / f"roofline_{device_index.get(str(device), 0)}.png", plots, f"Roofline on {device}")


# Where a roofline label may go, tried in order: right of its point, above, below, left (in points).
LABEL_OFFSETS = [(4, 2), (4, 9), (4, -9), (4, 16), (4, -16), (-4, 9), (-4, -9), (4, 23), (4, -23), (4, 30)]


def label_cells(fig, ax, points) -> None:
    """Name each cell once (a grey line joins its two frameworks' points, and the colour says which is which),
    beside its higher point, at the first offset where the label overlaps no label placed before it and stays
    inside the axes; a label with no free place is left out rather than drawn over another."""
    fig.tight_layout()  # the axes' final place first: _save's tight_layout then moves nothing inside them
    renderer = fig.canvas.get_renderer()
    placed = [legend.get_window_extent(renderer)] if (legend := ax.get_legend()) else []
    frame = ax.get_window_extent(renderer)
    cells = points.sort_values("achieved_flops", ascending=False).drop_duplicates(KEY)
    several = cells["benchmark"].nunique() > 1 or cells["precision"].nunique() > 1
    for r in cells.sort_values(["arithmetic_intensity", "achieved_flops"]).itertuples():
        name = f"{r.model} b{r.batch_size} uc{r.use_case}"
        name = f"{r.benchmark}/{name} {r.precision}" if several else name
        for offset in LABEL_OFFSETS:
            label = ax.annotate(name, (r.arithmetic_intensity, r.achieved_flops),
                                fontsize=6, xytext=offset, textcoords="offset points",
                                ha="left" if offset[0] > 0 else "right", va="center")
            box = label.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(other) for other in placed):
                placed.append(box)
                break
            label.remove()


def draw_scaling(plt, scaling, device_index: dict, folder: Path, plots: list) -> None:
    """Scaling efficiency against the number of processes, one line per framework and cell, per device model.
    The ideal is 100%: N processes each as fast as one alone on the same global batch."""
    scaling = scaling[scaling["efficiency"].notna()]
    for device, block in scaling.groupby("device_model"):
        fig, ax = plt.subplots(figsize=(6, 4))
        for (fw, bench, case, model, batch, precision), line in block.groupby(["framework", *KEY]):
            line = line.sort_values("world_size")
            ax.plot([1, *line["world_size"]], [100, *(line["efficiency"] * 100)], "o-", color=COLORS[fw],
                    label=f"{FRAMEWORK_TITLES[fw]} {bench}/{model} uc{case} b{batch} {precision}")
        ax.axhline(100, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="processes (one device each)", ylabel="scaling efficiency (%)", ylim=(0, None),
               title=f"Data-parallel scaling efficiency\n{device}")
        ax.legend(fontsize=7)
        _save(plt, fig, folder / f"scaling_{device_index.get(str(device), 0)}.png", plots,
              f"Data-parallel scaling efficiency on {device}")
