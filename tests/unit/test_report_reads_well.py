"""The report as a person reads it: a speed-up scale that covers the data, roofline labels apart, a
compile-time plot that says why PyTorch has no bar, batch sizes as numbers, provenance one field a line."""

import itertools

import matplotlib
import numpy as np
import pandas as pd
import pytest
from helpers import result_context, run_cli

from orchestrator.results import report_plots

matplotlib.use("Agg")
import matplotlib.pyplot as plt


@pytest.fixture
def drawn(monkeypatch):
    """The figures the report draws, kept open instead of saved."""
    figures = []
    monkeypatch.setattr(report_plots, "_save", lambda plt, fig, path, plots, title: figures.append(fig))
    yield figures
    plt.close("all")


def test_the_speedup_colour_scale_covers_the_data_and_centres_on_1(drawn, tmp_path):
    """The scale stopped at 2: 4.6x and 2.8x had the same colour."""
    block = pd.DataFrame({"benchmark": "digits", "model": "mlp", "use_case": 1, "batch_size": [16, 32, 64],
                          "speedup": [4.6, 2.8, 0.5]})
    report_plots.draw_speedup(plt, block, "CPU X", tmp_path / "s.png", [])
    image = drawn[0].axes[0].images[0]
    assert image.norm(1.0) == pytest.approx(0.5)  # no difference: the middle colour
    assert image.norm(4.6) <= 1 and image.norm(0.5) >= 0  # every value inside the scale
    assert image.cmap(image.norm(4.6)) != image.cmap(image.norm(2.8))
    assert image.norm(2.0) - 0.5 == pytest.approx(0.5 - image.norm(0.5))  # 2x and 0.5x as far from 1


def roofline_rows(cells):
    """Summary rows of cells (model, batch, intensity, {framework: achieved FLOP/s}) on one CPU."""
    rows = []
    for model, batch, intensity, achieved in cells:
        for framework, flops in achieved.items():
            key = {"device_model": "CPU X", "framework": framework, "benchmark": "digits", "use_case": 1,
                   "model": model, "batch_size": batch, "precision": "fp32"}
            for metric, value in (("arithmetic_intensity", intensity), ("achieved_flops", flops),
                                  ("peak_flops", 1e11), ("peak_bandwidth", 2e10)):
                rows.append({**key, "metric": metric, "value": value})
    return pd.DataFrame(rows)


def test_roofline_labels_do_not_overlap(drawn, tmp_path):
    """Both frameworks' points of a cell share its intensity, and nearby cells crowd: labels were drawn over
    each other at one fixed offset."""
    cells = [("mlp", 16, 10.0, {"jax": 2e9, "torch": 1.9e9}), ("mlp", 32, 10.5, {"jax": 2.1e9, "torch": 2e9}),
             ("mlp", 64, 11.0, {"jax": 2.2e9, "torch": 2.1e9}), ("cnn", 16, 10.2, {"jax": 2.05e9, "torch": 1.8e9})]
    report_plots.draw_rooflines(plt, roofline_rows(cells), {"CPU X": 0}, tmp_path, [])
    fig = drawn[0]
    fig.tight_layout()  # as _save does before writing the file
    renderer = fig.canvas.get_renderer()
    labels = [t for t in fig.axes[0].texts if t.get_text()]
    assert sorted(t.get_text() for t in labels) == ["cnn b16 uc1", "mlp b16 uc1", "mlp b32 uc1", "mlp b64 uc1"]
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert not [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]


def test_the_compile_time_plot_says_eager_pytorch_has_no_compile_step(drawn, tmp_path):
    """PyTorch had a legend entry and no bar, and the plot did not say why."""
    block = pd.DataFrame({"benchmark": "digits", "model": "mlp", "use_case": 1, "batch_size": [16, 32],
                          "jax_compile_time": [0.5, 0.7], "torch_compile_time": [np.nan, np.nan]})
    report_plots.draw_compile_times(plt, block, "CPU X", tmp_path / "c.png", [])
    ax = drawn[0].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["JAX"]
    assert report_plots.EAGER_NOTE in [t.get_text() for t in ax.texts]


def test_batch_size_axes_read_16_and_32(drawn, tmp_path):
    """A log2 axis read 2^4 and 2^5."""
    frame = pd.DataFrame({"device_model": "CPU X", "benchmark": "digits", "use_case": 1, "model": "mlp",
                          "precision": "fp32", "batch_size": [16, 32], "jax_throughput": [1000.0, 1800.0],
                          "torch_throughput": [900.0, 1500.0]})
    report_plots.draw_metric_lines(plt, frame, {"CPU X": 0}, tmp_path, [])
    fig = drawn[0]
    fig.canvas.draw()
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["16", "32"]


def test_provenance_is_one_field_a_line_not_raw_json(tmp_path):
    from bench_contract.results import ResultRows

    versions = '{"jax": "0.4.30", "jaxlib": "0.4.30", "cuda": "not available: CPU build"}'
    details = '{"cpu": {"model": "CPU X", "logical_cores": 8}, "gpus": [{"name": "H100", "uuid": "GPU-1"}]}'
    for framework, throughput in (("jax", 2000.0), ("torch", 1000.0)):
        ctx = result_context(framework=framework, benchmark="digits", use_case=1, model="mlp", batch_size=32,
                             precision="fp32", device_model="CPU X", cell_id=f"{framework}-32", campaign="c",
                             library_versions=versions, device_details=details)
        rows = ResultRows(ctx)
        rows.add("throughput", throughput, "samples/s")
        rows.write(tmp_path / "c" / "rows" / framework / f"{framework}-32.parquet")
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    page = (tmp_path / "report" / "report.html").read_text()
    provenance = page[page.index("<h2>Provenance</h2>"):]
    assert "jax: 0.4.30\njaxlib: 0.4.30\ncuda: not available: CPU build" in provenance
    assert "cpu.model: CPU X\ncpu.logical_cores: 8\ngpus.0.name: H100\ngpus.0.uuid: GPU-1" in provenance
    assert not any(quote in provenance for quote in ('{"', "{&#34;", "{&quot;"))


def test_the_csv_has_every_column_the_tables_leave_out(tmp_path):
    from bench_contract.results import ResultRows

    for framework in ("jax", "torch"):
        ctx = result_context(framework=framework, benchmark="digits", use_case=3, model="mlp", batch_size=32,
                             precision="fp32", device_model="CPU X", cell_id=f"{framework}-32", campaign="c")
        rows = ResultRows(ctx)
        for metric, value in (("throughput", 500.0), ("vectorization_speedup", 12.5), ("peak_host_rss", 2**30)):
            rows.add(metric, value, "")
        rows.write(tmp_path / "c" / "rows" / framework / f"{framework}-32.parquet")
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    csv = pd.read_csv(tmp_path / "report" / "report.csv")
    assert csv[["jax_vectorization_speedup", "torch_peak_host_rss"]].iloc[0].tolist() == [12.5, 2**30]


def test_names_are_left_aligned_and_numbers_right_aligned_in_the_html_tables(tmp_path):
    """The page left-aligned its first five columns whatever they held: the training table's throughput."""
    from helpers import merged_results

    merged_results(tmp_path)
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    page = (tmp_path / "report" / "report.html").read_text()
    first_row = page[page.index("<tbody>") + len("<tbody>"):page.index("</tr>", page.index("<tbody>"))]
    assert first_row == ('<tr><td class="name">digits</td><td class="name">mlp</td><td class="name">32</td>'
                         '<td class="name">JAX</td><td>2,000</td><td>2.00x [n/a (1 run)]</td><td>n/a</td><td>n/a</td>'
                         '<td>n/a</td><td>0.970</td>')
