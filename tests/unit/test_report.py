"""report: tables in three formats, plots, and one HTML page, from a merged dataset."""

import csv

import pytest
from helpers import merged_results, result_context, run_cli, task_file


def test_report_writes_every_format(tmp_path):
    merged_results(tmp_path)
    proc = run_cli("report", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "report"
    md = (folder / "report.md").read_text()
    assert "## Training on CPU X (fp32; runs JAX/PyTorch 1/1)" in md
    assert "| digits | mlp | 32 | JAX | 2,000 | 2.00x [n/a (1 run)] |" in md and "|  |  |  | PyTorch | 1,000 |  |" in md
    tex = (folder / "report.tex").read_text()
    assert r"\begin{tabular}" in tex and r"speed-up JAX/PyTorch\\{}[95\% CI]" in tex
    rows = list(csv.DictReader((folder / "report.csv").open()))
    assert {row["batch_size"]: float(row["speedup"]) for row in rows} == {"32": 2.0, "64": 1.5}
    plots = sorted(p.name for p in (folder / "plots").iterdir())
    assert any(p.startswith("throughput_") for p in plots) and any(p.startswith("speedup_") for p in plots)
    assert any(p.startswith("curves_") for p in plots)
    page = (folder / "report.html").read_text()
    figures = sorted(p.removesuffix(".png") for p in plots if p.endswith(".png"))
    assert page.count("data:image/png;base64,") == len(figures)
    # Every figure in the three formats (PNG for the page, SVG and PDF for a paper), and nothing else.
    assert plots == sorted(f"{figure}.{kind}" for figure in figures for kind in ("pdf", "png", "svg"))
    assert "Provenance" in page


def test_the_confidence_interval_appears_with_two_runs_per_side(tmp_path):
    from orchestrator.results.collect import merge
    from orchestrator.results.compare import comparison_frame
    from orchestrator.results.views import summary_frame

    for campaign in ("a", "b"):  # the same cells run in two campaigns: two runs per side
        task_file(tmp_path / campaign, "jax", 32, 2000.0 if campaign == "a" else 2200.0, campaign=campaign)
        task_file(tmp_path / campaign, "torch", 32, 1000.0 if campaign == "a" else 1100.0, campaign=campaign)
    merge(tmp_path, tmp_path / "merged.parquet")
    frame = comparison_frame(summary_frame(tmp_path / "merged.parquet"))
    row = frame.iloc[0]
    assert row["runs_jax_torch"] == "2/2"
    assert row["speedup_ci_low"] <= row["speedup"] <= row["speedup_ci_high"]


def test_report_without_collect_is_a_clear_error(tmp_path):
    proc = run_cli("report", "--results-dir", str(tmp_path))
    # The collect it names is of the same folder (a command that works as printed).
    assert proc.returncode == 1 and f"run `python main.py collect --results-dir {tmp_path}` first" in proc.stderr


def test_export_to_wandb_offline(tmp_path):
    import json
    import os

    merged_results(tmp_path)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}
    proc = run_cli("report", "--results-dir", str(tmp_path), "--wandb-project", "jaxtorch-test", env=env)
    assert proc.returncode == 0, proc.stderr
    run_dir = next((tmp_path / "report" / "wandb").glob("offline-run-*"))
    assert run_dir.name in proc.stdout
    tables = {p.name.split("_")[0]: json.loads(p.read_text()) for p in run_dir.glob("files/media/table/*.table.json")}
    assert set(tables) == {"comparison", "results"}
    comparison = tables["comparison"]
    speedups = [row[comparison["columns"].index("speedup")] for row in comparison["data"]]
    assert sorted(speedups) == [1.5, 2.0]
    assert "throughput" in [row[tables["results"]["columns"].index("metric")] for row in tables["results"]["data"]]


def test_data_parallel_cells_get_a_scaling_efficiency_plot(tmp_path):
    from orchestrator.results.collect import merge
    from orchestrator.results.scaling import scaling_frame
    from orchestrator.results.views import summary_frame

    for framework, single, pair in (("jax", 1000.0, 1500.0), ("torch", 800.0, 1600.0)):
        task_file(tmp_path, framework, 32, single, use_case=1, world_size=1)
        task_file(tmp_path, framework, 32, pair, use_case=2, world_size=2)
    merge(tmp_path, tmp_path / "merged.parquet")
    frame = scaling_frame(summary_frame(tmp_path / "merged.parquet"))
    assert dict(zip(frame.framework, frame.efficiency)) == {"jax": 0.75, "torch": 1.0}
    proc = run_cli("report", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (tmp_path / "report" / "plots").glob("scaling_*.png")] == ["scaling_0.png"]
    assert "Data-parallel scaling efficiency on CPU X" in (tmp_path / "report" / "report.html").read_text()


def test_no_scaling_plot_without_data_parallel_cells(tmp_path):
    merged_results(tmp_path)
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    assert not list((tmp_path / "report" / "plots").glob("scaling_*"))


def test_batch_search_results_get_their_own_table(tmp_path):
    from bench_contract.results import ResultRows

    for framework, largest in (("jax", 1536.0), ("torch", 544.0)):
        ctx = result_context(framework=framework, benchmark="cifar10", use_case=1, model="cnn", batch_size=512,
                             precision="fp32", device_model="CPU X", cell_id=f"{framework}-maxbatch")
        rows = ResultRows(ctx)
        rows.add("max_batch_size", largest, "samples")
        rows.add("min_batch_size_out_of_memory", largest + 32, "samples")
        rows.add("memory_limit", 4 * 2**30, "bytes")
        rows.write(tmp_path / "c" / "rows" / framework / f"{framework}.parquet")
    collect = run_cli("collect", "--results-dir", str(tmp_path))
    assert collect.returncode == 0, collect.stderr
    line = next(line for line in collect.stdout.splitlines() if line.startswith("CPU X"))
    assert line.split() == ["CPU", "X", "cifar10", "1", "cnn", "fp32", "4", "GiB", "1,536", "1,568", "544", "576"]
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Largest batch that fits" in md and "| 1,536 | 1,568 | 544 | 576 |" in md
    assert "Largest batch that fits" in (tmp_path / "report" / "report.html").read_text()


def test_timed_steps_get_a_latency_distribution_and_a_loss_against_time_curve(tmp_path):
    for batch in (32, 64):
        task_file(tmp_path, "jax", batch, 2000.0, step_times_ms=[1.0, 1.1, 0.9, 5.0])
        task_file(tmp_path, "torch", batch, 1000.0, step_times_ms=[2.0, 2.2, 1.9])
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    proc = run_cli("report", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    plots = [p.name for p in (tmp_path / "report" / "plots").iterdir()]
    assert [p for p in plots if p.startswith("latency_distribution_") and p.endswith(".png")] == [
        "latency_distribution_0_digits_1_mlp_fp32.png"]
    assert "Step-time distribution (every timed step): digits, use case 1, mlp, fp32 on CPU X" in (
        tmp_path / "report" / "report.html").read_text()


def test_the_report_links_the_profiler_traces_of_the_collected_campaigns(tmp_path):
    task_file(tmp_path, "jax", 32, 2000.0, campaign="camp1")  # the helper writes into the folder camp1
    task_file(tmp_path, "torch", 32, 1000.0, campaign="camp1")
    trace = tmp_path / "camp1" / "rows" / "torch" / "torch-32-trial0.trace" / "torch_trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text('{"traceEvents": []}')
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    page = (tmp_path / "report" / "report.html").read_text()
    assert '<a href="../camp1/rows/torch/torch-32-trial0.trace/torch_trace.json">torch_trace.json</a>' in page


def test_energy_and_mfu_are_plotted_where_they_were_measured_and_not_where_they_were_not(tmp_path):
    for batch in (32, 64):
        task_file(tmp_path / "gpu", "jax", batch, 2000.0, metrics={"energy_per_sample": 0.02, "mfu": 0.4})
        task_file(tmp_path / "gpu", "torch", batch, 1000.0, metrics={"energy_per_sample": 0.03, "mfu": 0.3})
    assert run_cli("collect", "--results-dir", str(tmp_path / "gpu")).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path / "gpu")).returncode == 0
    plots = [p.name for p in (tmp_path / "gpu" / "report" / "plots").iterdir()]
    assert any(p.startswith("energy_") for p in plots) and any(p.startswith("mfu_") for p in plots)
    task_file(tmp_path / "cpu", "jax", 32, 2000.0, metrics={"energy_per_sample": None, "mfu": None})
    task_file(tmp_path / "cpu", "torch", 32, 1000.0, metrics={"energy_per_sample": None, "mfu": None})
    assert run_cli("collect", "--results-dir", str(tmp_path / "cpu")).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path / "cpu")).returncode == 0
    plots = [p.name for p in (tmp_path / "cpu" / "report" / "plots").iterdir()]
    assert not any(p.startswith(("energy_", "mfu_")) for p in plots)


def test_a_compile_time_that_was_not_measured_is_no_bar(tmp_path, monkeypatch):
    """The compile-time plot drew a missing value as a bar of 0 s; now it draws nothing there and says n/a."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from orchestrator.results import report_plots

    drawn = {}
    monkeypatch.setattr(report_plots, "_save", lambda plt, fig, path, plots, title: drawn.setdefault("fig", fig))
    block = pd.DataFrame({"benchmark": ["digits", "digits"], "model": ["mlp", "mlp"], "use_case": 1, "batch_size": [32, 64],
                          "jax_compile_time": [0.5, 0.7], "torch_compile_time": [float("nan"), 0.2]})
    report_plots.draw_compile_times(plt, block, "CPU X", tmp_path / "c.png", [])
    ax = drawn["fig"].axes[0]
    heights = sorted(round(bar.get_height(), 3) for bar in ax.patches)
    assert heights == [0.2, 0.5, 0.7]  # three measured values, no bar of 0 for the missing one
    assert [t.get_text() for t in ax.texts] == ["n/a"]


def test_no_figure_without_data_quantities_from_zero_and_titles_in_words(tmp_path, monkeypatch):
    """Inference cells once got four empty "Training curves" panels; throughput axes started far above zero,
    which made small gaps look large; titles read "digits uc3 mlp fp32"."""
    from orchestrator.results import report_plots
    from orchestrator.results.report import read_merged
    from orchestrator.results.views import use_case_frame

    for batch, (jax, torch) in {8: (9000.0, 8800.0), 32: (30000.0, 29000.0)}.items():  # close: a cut axis hides it
        for framework, rate in (("jax", jax), ("torch", torch)):
            task_file(tmp_path, framework, batch, rate, use_case=5, accuracy=None, step_times_ms=[1.0, 1.1],
                      metrics={"step_time_p50": batch / rate * 1000})
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    df = read_merged(tmp_path / "merged.parquet")
    drawn = {}
    monkeypatch.setattr(report_plots, "_save", lambda plt, fig, path, plots, title: drawn.update({path.name: fig}))
    report_plots.draw_plots(df, use_case_frame(df), tmp_path / "plots")
    assert not [name for name in drawn if name.startswith("curves_")]  # inference: no training curves at all
    throughput = drawn["throughput_0_digits_5_mlp_fp32.png"].axes[0]
    assert throughput.get_ylim()[0] == 0
    assert throughput.get_title() == "digits mlp, fp32: Inference (use case 5)\nCPU X"
    assert drawn["latency_0_digits_5_mlp_fp32.png"].axes[0].get_ylim()[0] == 0


def test_a_training_cell_without_validation_draws_only_its_loss_panels(tmp_path, monkeypatch):
    from orchestrator.results import report_plots
    from orchestrator.results.report import read_merged
    from orchestrator.results.views import use_case_frame

    for framework in ("jax", "torch"):  # a loss per step and timed steps, no validation accuracy
        task_file(tmp_path, framework, 32, 1000.0, step_times_ms=[1.0, 1.1])
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    df = read_merged(tmp_path / "merged.parquet")
    drawn = {}
    monkeypatch.setattr(report_plots, "_save", lambda plt, fig, path, plots, title: drawn.update({path.name: fig}))
    report_plots.draw_plots(df, use_case_frame(df), tmp_path / "plots")
    (curves,) = [fig for name, fig in drawn.items() if name.startswith("curves_")]
    assert [ax.get_xlabel() for ax in curves.axes] == ["step", "time in timed steps (s)"]
    assert all(ax.lines for ax in curves.axes)  # every panel drawn has a line in it


def test_the_privacy_budget_is_information_not_a_warning(tmp_path):
    """The privacy line was once red like the warnings below a table."""
    for framework, rate in (("jax", 2000.0), ("torch", 1000.0)):
        task_file(tmp_path, framework, 32, rate, use_case=3,
                  metrics={"privacy_epsilon": 1.5, "privacy_epsilon_rdp": 2.0, "privacy_delta": 1e-5})
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    page = (tmp_path / "report" / "report.html").read_text()
    info = page[page.index('<ul class="info">'):]
    assert info.startswith('<ul class="info"><li>privacy, digits mlp batch 32: epsilon 1.5 (PLD accountant; RDP: 2)')
    assert '<ul class="notes"><li>privacy' not in page


def test_the_latex_tables_use_booktabs_fit_their_column_and_can_be_cited(tmp_path):
    """The tables once had 11 columns without booktabs and overflowed a column. Each is now a booktabs table
    with a label, a table* above COLUMN_WIDE columns, scaled down where still too wide. Where pdflatex is installed
    (Debian's texlive-latex-base and texlive-latex-recommended) the tables are compiled in a two-column paper and
    must raise no error and no overfull box; without it, their structure is checked."""
    import re
    import shutil
    import subprocess

    from orchestrator.results.report_tables import COLUMN_WIDE

    for batch, (jax, torch) in {32: (2000.0, 1000.0), 64: (3000.0, 2000.0)}.items():
        for framework, rate in (("jax", jax), ("torch", torch)):
            task_file(tmp_path, framework, batch, rate, metrics={"step_time_p50": batch / rate * 1000})
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    tex = (tmp_path / "report" / "report.tex").read_text()
    tables = re.findall(r"\\begin\{(table\*?)\}.*?\\end\{\1\}", tex, flags=re.S)
    bodies = re.findall(r"\\begin\{(table\*?)\}(.*?)\\end\{\1\}", tex, flags=re.S)
    assert tables and len(tables) == len(bodies)
    labels = re.findall(r"\\label\{(tab:[a-z0-9-]+)\}", tex)
    assert len(labels) == len(tables) == len(set(labels)) and "tab:training-on-cpu-x" in labels
    for environment, body in bodies:
        columns = len(re.search(r"\\begin\{tabular\}\{@\{\}([lr]+)@\{\}\}", body).group(1))
        assert (environment == "table*") == (columns > COLUMN_WIDE), (environment, columns)
        assert body.count(r"\toprule") == body.count(r"\midrule") == body.count(r"\bottomrule") == 1
        assert r"\hline" not in body and r"\resizebox{\ifdim\width>\linewidth" in body
    if shutil.which("pdflatex") is None:
        return  # no TeX here (CI): the structure above is what is checked
    (tmp_path / "paper.tex").write_text(
        "\\documentclass[twocolumn]{article}\n\\usepackage{booktabs,graphicx}\n\\begin{document}\n"
        "Table~\\ref{tab:training-on-cpu-x}.\n\\input{report/report.tex}\n\\end{document}\n")
    for _ in range(2):  # the second pass resolves the \ref
        proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:]
    log = (tmp_path / "paper.log").read_text()
    assert "Overfull" not in log and "undefined" not in log


def test_the_speedup_figure_draws_the_tables_intervals_as_error_bars(tmp_path, monkeypatch):
    """Error bars: the speed-up against batch size carries, at each batch size, a bar from the low to
    the high end of the interval the table prints; a point without an interval (one run a side) has no bar."""
    import numpy as np

    from orchestrator.results import report_plots
    from orchestrator.results.report import read_merged
    from orchestrator.results.views import use_case_frame

    for campaign, scale in (("a", 1.0), ("b", 1.1), ("c", 0.95)):  # three runs a side at batch 32, one at 64
        task_file(tmp_path / campaign, "jax", 32, 2000.0 * scale, campaign=campaign)
        task_file(tmp_path / campaign, "torch", 32, 1000.0 * scale ** 2, campaign=campaign)
    task_file(tmp_path / "a", "jax", 64, 3000.0, campaign="a")
    task_file(tmp_path / "a", "torch", 64, 2000.0, campaign="a")
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    df = read_merged(tmp_path / "merged.parquet")
    frame = use_case_frame(df)
    drawn = {}
    monkeypatch.setattr(report_plots, "_save", lambda plt, fig, path, plots, title: drawn.update({path.name: fig}))
    report_plots.draw_plots(df, frame, tmp_path / "plots")
    ax = drawn["speedup_lines_0_digits_1_mlp_fp32.png"].axes[0]
    (bars,) = ax.containers
    segments = bars.lines[2][0].get_segments()  # one vertical segment per point: (x, low) to (x, high)
    row = frame.set_index("batch_size").loc[32]
    assert np.isfinite(row["speedup_ci_low"])
    assert [tuple(end) for end in segments[0]] == [(32, pytest.approx(row["speedup_ci_low"])),
                                                   (32, pytest.approx(row["speedup_ci_high"]))]
    assert [tuple(end) for end in segments[1]] == [(64, 1.5), (64, 1.5)]  # one run a side: no bar
    assert ax.get_ylim()[0] == 0
