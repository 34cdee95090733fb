"""The merged dataset's MFU, peak FLOP/s and roofline are the ones both frameworks share on a device: a
digits campaign's merged rows once said peak_flops 85.4 GFLOP/s for JAX and 53.3 for PyTorch on one CPU,
each MFU divided by its own. Each process's own calibration stays, as `<metric>_own`."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import result_context

from orchestrator.results.collect import merge
from orchestrator.results.shared_calibration import CALIBRATED, DERIVED_PREFIX

# Each process's own calibration of one 2-CPU slice: JAX's matmul and scale operation measured faster.
OWN = {"jax": {"peak_flops": 85.4e9, "peak_bandwidth": 8.4e9, "mfu": 0.10},
       "torch": {"peak_flops": 53.3e9, "peak_bandwidth": 3.5e9, "mfu": 0.20}}
INTENSITY = 12.0  # FLOP/byte: above the shared ridge (85.4 / 8.4 = 10.2), below PyTorch's own (53.3 / 3.5 = 15.2)


def calibrated_run(root, framework: str, own: dict, campaign: str = "c1", bound_cpus: int = 2):
    from bench_contract.results import ResultRows

    ctx = result_context(framework=framework, benchmark="digits", use_case=1, model="mlp", batch_size=32,
                         precision="fp32", device_kind="cpu", device_model="CPU X", bound_cpus=bound_cpus,
                         intra_op_threads=bound_cpus, cell_id=f"{framework}-32", campaign=campaign)
    rows = ResultRows(ctx)
    rows.add("throughput", 1000.0, "samples/s")
    rows.add("peak_flops", own["peak_flops"], "FLOP/s", note="measured: fastest of 5 matmuls in this process")
    rows.add("mfu", own["mfu"], "fraction", note="achieved / peak")
    rows.add("peak_bandwidth", own["peak_bandwidth"], "B/s")
    rows.add("ridge_point", own["peak_flops"] / own["peak_bandwidth"], "FLOP/byte")
    rows.add("arithmetic_intensity", INTENSITY, "FLOP/byte")
    rows.add("compute_bound", float(INTENSITY >= own["peak_flops"] / own["peak_bandwidth"]), "bound")
    return rows.write(root / campaign / "rows" / framework / f"{ctx['cell_id']}.parquet")


def merged(root) -> pd.DataFrame:
    collected = merge(root, root / "merged.parquet")
    assert collected.generation is not None
    return pd.read_parquet(root / "merged.parquet")


def value(df, campaign: str, framework: str, metric: str) -> float:
    got = df[(df.campaign == campaign) & (df.framework == framework) & (df.metric == metric)]["value"]
    assert len(got) == 1, f"{campaign} {framework} {metric}: {len(got)} rows"
    return float(got.iloc[0])


def test_the_merged_rows_hold_the_shared_calibration_and_each_processs_own_apart(tmp_path):
    for framework, own in OWN.items():
        calibrated_run(tmp_path, framework, own)
    df = merged(tmp_path)
    for framework, own in OWN.items():
        assert value(df, "c1", framework, "peak_flops") == pytest.approx(85.4e9)
        assert value(df, "c1", framework, "peak_bandwidth") == pytest.approx(8.4e9)
        assert value(df, "c1", framework, "ridge_point") == pytest.approx(85.4 / 8.4)
        assert value(df, "c1", framework, "compute_bound") == 1.0  # 12 FLOP/byte against the shared ridge
        assert value(df, "c1", framework, "mfu") == pytest.approx(own["mfu"] * own["peak_flops"] / 85.4e9)
        for metric in ("peak_flops", "peak_bandwidth", "mfu"):  # the process's own, under its own name
            assert value(df, "c1", framework, f"{metric}_own") == pytest.approx(own[metric])
    assert value(df, "c1", "torch", "compute_bound_own") == 0.0  # below its own ridge of 15.2: it disagreed
    mfu_note = df[(df.framework == "torch") & (df.metric == "mfu")]["note"].iloc[0]
    assert mfu_note.startswith("achieved / peak") and "shared peak_flops" in mfu_note and "mfu_own" in mfu_note


def test_a_later_run_with_a_higher_peak_changes_the_earlier_runs_at_the_next_collect(tmp_path):
    for framework, own in OWN.items():
        calibrated_run(tmp_path, framework, own)
    merged(tmp_path)
    calibrated_run(tmp_path, "torch", {"peak_flops": 100e9, "peak_bandwidth": 2e9, "mfu": 0.3}, campaign="c2")
    df = merged(tmp_path)  # incremental: only the new file is read
    for campaign, framework in (("c1", "jax"), ("c1", "torch"), ("c2", "torch")):
        assert value(df, campaign, framework, "peak_flops") == pytest.approx(100e9)
        assert value(df, campaign, framework, "ridge_point") == pytest.approx(100 / 8.4)
    assert value(df, "c1", "jax", "mfu") == pytest.approx(0.10 * 85.4 / 100)
    generation = (tmp_path / "merged.parquet").resolve()
    assert len(list(generation.glob(f"{DERIVED_PREFIX}*.parquet"))) == 1  # the earlier derived part is gone
    assert len(df) == len(pd.read_parquet(tmp_path / "merged.parquet"))


def test_runs_bound_to_other_numbers_of_cpus_keep_their_own_peak(tmp_path):
    calibrated_run(tmp_path, "jax", OWN["jax"])
    calibrated_run(tmp_path, "torch", {"peak_flops": 900e9, "peak_bandwidth": 90e9, "mfu": 0.05}, campaign="c2",
                   bound_cpus=32)
    df = merged(tmp_path)
    assert value(df, "c1", "jax", "peak_flops") == pytest.approx(85.4e9)
    assert value(df, "c1", "jax", "mfu") == pytest.approx(0.10)
    assert value(df, "c2", "torch", "peak_flops") == pytest.approx(900e9)


def test_a_dataset_without_calibrations_has_no_derived_part(tmp_path):
    from helpers import task_file

    task_file(tmp_path, "jax", 32, 1000.0)
    df = merged(tmp_path)
    assert not set(CALIBRATED) & set(df.metric)
    assert not list((tmp_path / "merged.parquet").resolve().glob(f"{DERIVED_PREFIX}*"))
