"""Roofline rows: intensity against the ridge point decides the bound; missing inputs are "not available"."""

import math

import pytest
from helpers import merged_results, rows_for_test, run_cli, task_file

from bench_contract.measure.flops import Flops, Peak, gpu_peak, record_utilisation
from bench_contract.measure.roofline import gpu_bandwidth, record_roofline


def metric_notes(rows):
    return {r["metric"]: (r["value"], r.get("note")) for r in rows.rows}


@pytest.mark.parametrize("flops, moved, bound", [(1e9, 1e6, 1.0), (1e9, 1e9, 0.0)])
def test_intensity_above_the_ridge_is_compute_bound_and_below_it_memory_bound(flops, moved, bound):
    rows = rows_for_test()
    record_roofline(rows, flops, moved, "counted", peak_flops=1e12, bandwidth=1e11, bandwidth_method="table")
    got = metric_notes(rows)
    assert got["arithmetic_intensity"][0] == pytest.approx(flops / moved)
    assert got["ridge_point"][0] == pytest.approx(10.0)
    assert got["compute_bound"][0] == bound
    assert got["compute_bound"][1].startswith("compute-bound" if bound else "memory-bound")


def test_without_bytes_or_bandwidth_the_roofline_is_not_available_never_zero():
    rows = rows_for_test()
    record_roofline(rows, 1e9, None, "not available: nothing counted", 1e12, None, "not available: no table entry")
    got = metric_notes(rows)
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
    got = metric_notes(rows)
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


def roofline_run(framework, peak, bandwidth, intensity, cpus=2, campaign="a"):
    """A CPU run's summary rows as the backend records them: its own peak and bandwidth, its own ridge point; bound
    to `cpus` CPUs with as many threads (as compare.with_row_key gives them, in text)."""
    base = {"device_kind": "cpu", "device_model": "CPU X", "bound_cpus": str(cpus), "intra_op_threads": str(cpus),
            "precision": "fp32", "campaign": campaign, "cell_id": f"{framework}-c", "trial": 0, "framework": framework,
            "step": float("nan"), "epoch": float("nan"), "note": "measured"}
    own_ridge = peak / bandwidth
    return [base | {"metric": m, "value": v} for m, v in (
        ("peak_flops", peak), ("peak_bandwidth", bandwidth), ("arithmetic_intensity", intensity),
        ("ridge_point", own_ridge), ("compute_bound", float(intensity >= own_ridge)))]


def test_both_frameworks_roofline_against_one_bandwidth_per_device():
    """Each backend measures its own CPU bandwidth (3.5 against 8.4 GB/s here) and its own peak (69 against
    88 GFLOP/s): the same intensity of 15 FLOP/byte was memory-bound in JAX's row (ridge 19.7) and compute-bound
    in PyTorch's (ridge 10.5). The comparison puts both against the device's one ridge, from the highest of each."""
    import pandas as pd

    from orchestrator.results.compare import with_shared_roofline

    frame = with_shared_roofline(pd.DataFrame(roofline_run("jax", 69e9, 3.5e9, 15.0)
                                              + roofline_run("torch", 88e9, 8.4e9, 15.0)))
    got = frame.set_index(["framework", "metric"])
    for framework in ("jax", "torch"):
        assert got.loc[(framework, "peak_bandwidth"), "value"] == 8.4e9
        assert got.loc[(framework, "ridge_point"), "value"] == pytest.approx(88 / 8.4)
        assert got.loc[(framework, "compute_bound"), "value"] == 1.0
        assert got.loc[(framework, "peak_bandwidth"), "note"].startswith("shared by both frameworks: the highest")
        assert "shared ridge point" in got.loc[(framework, "compute_bound"), "note"]
        assert got.loc[(framework, "arithmetic_intensity"), "value"] == 15.0  # each run's own


def test_runs_on_other_numbers_of_cpus_share_no_bandwidth():
    """32 CPUs move more bytes a second than 2: a 2-CPU run against a 32-CPU campaign's bandwidth and peak would
    move its ridge and its bound."""
    import pandas as pd

    from orchestrator.results.compare import with_shared_roofline

    rows = roofline_run("jax", 69e9, 3.5e9, 15.0) + roofline_run("torch", 88e9, 8.4e9, 15.0)
    rows += roofline_run("jax", 900e9, 60e9, 10.0, cpus=32, campaign="b")  # ridge 15: memory-bound there
    got = with_shared_roofline(pd.DataFrame(rows)).set_index(["campaign", "framework", "metric"])["value"]
    assert got["a", "jax", "peak_bandwidth"] == got["a", "torch", "peak_bandwidth"] == 8.4e9
    assert got["a", "jax", "ridge_point"] == pytest.approx(88 / 8.4) and got["a", "jax", "compute_bound"] == 1.0
    assert got["b", "jax", "peak_bandwidth"] == 60e9 and got["b", "jax", "compute_bound"] == 0.0


def test_the_comparison_shows_the_bound_against_the_shared_ridge():
    import pandas as pd

    from orchestrator.results.compare import comparison_frame

    rows = roofline_run("jax", 69e9, 3.5e9, 15.0) + roofline_run("torch", 88e9, 8.4e9, 15.0)
    rows += [row | {"metric": "throughput", "value": 1000.0} for row in rows[:1] + rows[5:6]]
    frame = comparison_frame(pd.DataFrame(rows).assign(benchmark="digits", use_case=1, model="mlp", batch_size=32))
    assert len(frame) == 1
    assert frame["jax_compute_bound"].iloc[0] == frame["torch_compute_bound"].iloc[0] == 1.0


def test_a_run_without_an_intensity_stays_without_a_bound():
    import pandas as pd

    from orchestrator.results.compare import with_shared_roofline

    rows = roofline_run("jax", 69e9, 3.5e9, 15.0) + roofline_run("torch", 88e9, 8.4e9, 15.0)
    rows = [r if not (r["framework"] == "jax" and r["metric"] in ("arithmetic_intensity", "compute_bound"))
            else r | {"value": float("nan"), "note": "not available: no bytes"} for r in rows]
    got = with_shared_roofline(pd.DataFrame(rows)).set_index(["framework", "metric"])
    assert math.isnan(got.loc[("jax", "compute_bound"), "value"])
    assert got.loc[("jax", "compute_bound"), "note"].startswith("not available: ")
    assert got.loc[("jax", "peak_bandwidth"), "value"] == 8.4e9


def test_the_shared_roofline_rows_say_how_each_was_made():
    """The notes a reader of merged.parquet sees beside the rewritten rows, word for word: where the bandwidth came
    from, how the ridge was made (or why it could not be), and each run's bound against it, at the ridge itself
    compute-bound (intensity >= ridge, as bench_contract.measure.roofline decides it)."""
    import pandas as pd

    from orchestrator.results.compare import SHARED_NOTE, with_shared_roofline

    ridge = 88e9 / 8e9
    rows = roofline_run("jax", 69e9, 3.5e9, ridge) + roofline_run("torch", 88e9, 8e9, 2.0)
    got = with_shared_roofline(pd.DataFrame(rows)).set_index(["framework", "metric"])["note"]
    assert got["jax", "peak_bandwidth"] == SHARED_NOTE.format(metric="peak_bandwidth", precision="") == (
        "shared by both frameworks: the highest peak_bandwidth any run of either recorded on this device kind and "
        "model (comparison, orchestrator.results.compare)")
    assert got["jax", "ridge_point"] == got["torch", "ridge_point"] == "shared peak FLOP/s / shared peak bandwidth"
    assert got["jax", "compute_bound"] == "compute-bound: intensity 11 FLOP/byte against the shared ridge point of 11"
    assert got["torch", "compute_bound"] == "memory-bound: intensity 2 FLOP/byte against the shared ridge point of 11"
    without_peak = [r for r in rows if r["metric"] != "peak_flops"]
    got = with_shared_roofline(pd.DataFrame(without_peak)).set_index(["framework", "metric"])["note"]
    assert got["jax", "ridge_point"] == "not available: needs both a peak FLOP/s and a peak bandwidth on this device"
    assert got["jax", "compute_bound"] == "not available: needs the arithmetic intensity and the ridge point"
