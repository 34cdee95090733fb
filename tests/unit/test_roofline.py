"""Roofline rows: intensity against the ridge point decides the bound; missing inputs are "not available"."""

import math

import pytest
from helpers import merged_results, rows_for_test, run_cli, task_file

from bench_contract.measure.flops import Flops, Peak, gpu_peak, record_utilisation
from bench_contract.measure.roofline import gpu_bandwidth, record_roofline


def values(rows):
    return {r["metric"]: (r["value"], r.get("note")) for r in rows.rows}


@pytest.mark.parametrize("flops, moved, bound", [(1e9, 1e6, 1.0), (1e9, 1e9, 0.0)])
def test_intensity_above_the_ridge_is_compute_bound_and_below_it_memory_bound(flops, moved, bound):
    rows = rows_for_test()
    record_roofline(rows, flops, moved, "counted", peak_flops=1e12, bandwidth=1e11, bandwidth_method="table")
    got = values(rows)
    assert got["arithmetic_intensity"][0] == pytest.approx(flops / moved)
    assert got["ridge_point"][0] == pytest.approx(10.0)
    assert got["compute_bound"][0] == bound
    assert got["compute_bound"][1].startswith("compute-bound" if bound else "memory-bound")


def test_without_bytes_or_bandwidth_the_roofline_is_not_available_never_zero():
    rows = rows_for_test()
    record_roofline(rows, 1e9, None, "not available: nothing counted", 1e12, None, "not available: no table entry")
    got = values(rows)
    for metric in ("bytes_per_step", "peak_bandwidth", "arithmetic_intensity", "ridge_point", "compute_bound"):
        value, note = got[metric]
        assert value is None or math.isnan(value), metric
        assert note.startswith("not available: "), metric


def test_gpu_bandwidth_comes_from_the_table_with_the_peak():
    assert gpu_bandwidth("NVIDIA H100 80GB HBM3")[0] == 3350e9
    assert gpu_bandwidth("NVIDIA A100-SXM4-80GB")[0] == 2039e9
    assert gpu_bandwidth("NVIDIA A100-PCIE-40GB")[0] == 1555e9
    assert gpu_bandwidth("Some Future GPU")[0] is None
    peak = gpu_peak("NVIDIA H100 PCIe", "bf16")
    assert peak.bandwidth == 2000e9 and "datasheet" in peak.bandwidth_method


def test_utilisation_records_the_roofline_from_the_counted_bytes():
    rows = rows_for_test()
    record_utilisation(rows, Flops(1e9, "counted", 5e7, "bytes counted"), Peak(1e11, "measured", 1e10, "measured"),
                       times_s=[0.1], devices=1)
    got = values(rows)
    assert got["arithmetic_intensity"][0] == pytest.approx(20.0) and got["compute_bound"][0] == 1.0


def test_the_report_draws_a_roofline_and_shows_the_bound(tmp_path):
    roof = {"peak_flops": 1e11, "peak_bandwidth": 1e10, "achieved_flops": 2e10}
    task_file(tmp_path, "jax", 32, 2000.0, metrics={**roof, "arithmetic_intensity": 40.0, "compute_bound": 1.0})
    task_file(tmp_path, "torch", 32, 1000.0, metrics={**roof, "arithmetic_intensity": 2.0, "compute_bound": 0.0})
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    assert (tmp_path / "report" / "plots" / "roofline_0.png").exists()
    md = (tmp_path / "report" / "report.md").read_text()
    assert "JAX bound" in md and "| compute | memory |" in md


def test_no_roofline_without_its_metrics(tmp_path):
    merged_results(tmp_path)
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    assert not list((tmp_path / "report" / "plots").glob("roofline_*"))
