"""The comparison as a reader sees it: a use case's table, its exact headers and cells, the rows a comparison
keeps (one side missing, a key with a missing value), which interval each row gets (paired, nodes on either side),
and the warnings about devices a system did not expect. Written against the mutants `make mutation` found surviving in
orchestrator/results/compare.py: each test fails on one of those changes."""

import warnings

import numpy as np
import pandas as pd
import pytest

from orchestrator.results.compare import (
    comparison_frame,
    format_speedup,
    format_value,
    setting_label,
    spread_note,
    system_mismatches,
    with_variant_label,
)
from orchestrator.results.views import use_case_frame, view_tables


def run_rows(framework, trial, throughput, cv=0.02, node="n1", **extra):
    """One run's summary rows (throughput, step-time CV and peak host memory) as the merged dataset holds them."""
    base = dict(device_model="CPU X", benchmark="digits", use_case=1, model="mlp", batch_size=32, precision="fp32",
                model_variant="full", framework=framework, campaign="camp", cell_id=f"{framework}-c", trial=trial,
                unit="", epoch=np.nan, step=np.nan, slurm_nodelist=node) | extra
    return [base | {"metric": "throughput", "value": throughput}, base | {"metric": "step_time_cv", "value": cv},
            base | {"metric": "peak_host_rss", "value": 12.5 * 2**20}]


def test_the_table_has_these_headers_and_cells():
    data = run_rows("jax", 0, 2000.0) + run_rows("jax", 1, 2000.0) + run_rows("torch", 0, 1000.0)
    data += run_rows("torch", 1, 1000.0)
    frame = use_case_frame(pd.DataFrame(data))
    assert frame["tuning"].tolist() == [""]  # neither side set a tuning knob of its own (XLA_FLAGS)
    assert frame[["jax_peak_host_rss", "torch_peak_host_rss"]].values.tolist() == [[12.5 * 2**20] * 2]  # report.csv
    (table,) = view_tables(frame)
    assert (table.caption, table.notes, table.info) == ("Training on CPU X (fp32; runs JAX/PyTorch 2/2)", [], [])
    assert table.headers == ["benchmark", "model", "batch", "framework", "samples/s",
                             "speed-up JAX/PyTorch\n[95% CI]", "step p50\nms", "val acc\ntarget", "s to\ntarget",
                             "test\nacc"]
    assert table.rows == [["digits", "mlp", "32", "JAX", "2,000", "2.00x [2.00, 2.00]", "n/a", "n/a", "n/a", "n/a"],
                          ["", "", "", "PyTorch", "1,000", "", "n/a", "", "n/a", "n/a"]]


def test_a_cell_of_one_setting_says_so_where_another_has_several():
    """Batch 32 ran eager and compiled, batch 64 eager only: the settings column appears, and batch 64's row
    says "-" there."""
    data = []
    eager, compiled = '{"torch_compile": false}', '{"torch_compile": true}'
    for batch, modes in ((32, (eager, compiled)), (64, (eager,))):
        for settings in modes:
            for framework in ("jax", "torch"):
                data += run_rows(framework, 0, 1000.0, batch_size=batch, settings=settings,
                                 cell_id=f"{framework}-{batch}-{settings}")
    (table,) = view_tables(use_case_frame(pd.DataFrame(data)))
    column = table.headers.index("settings")
    assert sorted(row[column] for row in table.rows if row[column]) == ["-", "eager", "torch.compile"]


def test_throttled_runs_are_counted_per_framework():
    """A GPU slowed for heat in one of two JAX runs: the row counts 1 for JAX, and none recorded for PyTorch."""
    data = []
    for trial in range(2):
        jax = run_rows("jax", trial, 2000.0)
        data += jax + [jax[0] | {"metric": "throttled", "value": float(trial == 1)}] + run_rows("torch", trial, 1000.0)
    row = comparison_frame(pd.DataFrame(data)).iloc[0]
    assert row["jax_throttled_runs"] == 1.0 and np.isnan(row["torch_throttled_runs"])


def test_a_cell_only_one_framework_measured_keeps_its_row_with_nothing_on_the_other_side():
    """PyTorch's task failed: the row is still there, its PyTorch columns NaN (n/a), no speed-up, and no numpy
    warning about empty means on the user's terminal."""
    data = [r for r in run_rows("torch", 0, 1000.0) + run_rows("torch", 1, 1010.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = comparison_frame(pd.DataFrame(data))
    row = frame.iloc[0]
    assert len(frame) == 1 and row["torch_throughput"] == 1005.0
    assert np.isnan(row["jax_throughput"]) and np.isnan(row["speedup"]) and np.isnan(row["speedup_ci_low"])
    assert format_speedup(row) == "n/a" and row["runs_jax_torch"] == "0/2"


def test_runs_from_before_a_key_column_existed_are_compared():
    """A merged dataset of an old campaign's tables and a new one's has the new column, empty (NaN) on the old
    rows: those runs are still one comparison row with its speed-up, as in a dataset without the column."""
    data = [r | {"settings": np.nan} for r in run_rows("jax", 0, 2000.0) + run_rows("torch", 0, 1000.0)]
    frame = comparison_frame(pd.DataFrame(data))
    assert len(frame) == 1 and frame["jax_throughput"].iloc[0] == 2000.0 and frame["speedup"].iloc[0] == 2.0


def paired(jax_over_torch_by_node: dict[str, float], trials_per_node=6, torch_nodes=None):
    """Paired runs: each pair on one node, JAX `ratio` times PyTorch's throughput there, with a little noise."""
    data, trial = [], 0
    for node, ratio in jax_over_torch_by_node.items():
        for _ in range(trials_per_node):
            torch = 1000.0 + 7 * (trial % 3)
            for framework, value in (("jax", ratio * torch), ("torch", torch)):
                data += [r | {"pair_order": "jax,torch"} for r in run_rows(framework, trial, value, node=node)]
            trial += 1
    return comparison_frame(pd.DataFrame(data)).iloc[0]


def test_a_paired_row_says_so_and_counts_its_pairs_by_node():
    """Pairs on a node where JAX is 1.0x and on one where it is 1.2x: two nodes' evidence, whose interval reaches
    from one node's ratio to the other's; on one node the pairs' interval is the ratio itself."""
    one = paired({"n1": 1.1})
    assert bool(one["paired"]) and one["runs_jax_torch"] == "6/6 paired"
    assert one["speedup_ci_low"] == pytest.approx(1.1) and one["speedup_ci_high"] == pytest.approx(1.1)
    two = paired({"n1": 1.0, "n2": 1.2})
    assert two["speedup_ci_low"] < 1.01 and two["speedup_ci_high"] > 1.19


def test_an_unpaired_row_says_so():
    data = run_rows("jax", 0, 2000.0) + run_rows("jax", 1, 2100.0) + run_rows("torch", 0, 1000.0)
    row = comparison_frame(pd.DataFrame(data + run_rows("torch", 1, 1100.0))).iloc[0]
    assert not bool(row["paired"]) and row["runs_jax_torch"] == "2/2"


def test_the_nodes_of_pytorchs_runs_are_resampled_too():
    """JAX's runs on one node; PyTorch's ten on a node where it ran at 100 and ten on one where it ran at 120."""
    data = []
    for trial in range(20):
        node = "t1" if trial < 10 else "t2"
        data += run_rows("jax", trial, 110.0 + trial % 3, node="j1")
        data += run_rows("torch", trial, (100.0 if node == "t1" else 120.0) + trial % 3, node=node)
    row = comparison_frame(pd.DataFrame(data)).iloc[0]
    assert row["speedup_ci_low"] < 0.93 and row["speedup_ci_high"] > 1.08  # from 110/120 to 110/100


def test_unpaired_runs_of_a_sequential_rule_take_welchs_interval():
    """Runs labelled with --trials auto's rule, its first stage run, whose pairs do not all match (PyTorch's sixth
    trial failed) are not a sequential pair series: Welch's interval, not Stein's, which needs the pairs."""
    rule = "stein first=5 target=0.05"
    data = []
    for trial in range(6):
        data += [r | {"pair_order": "jax,torch", "trial_rule": rule} for r in run_rows("jax", trial, 2000.0 + trial)]
    for trial in range(5):
        data += [r | {"pair_order": "jax,torch", "trial_rule": rule} for r in run_rows("torch", trial, 1000.0 + trial)]
    row = comparison_frame(pd.DataFrame(data)).iloc[0]
    assert row["runs_jax_torch"] == "6/5" and np.isnan(row["target_interval"])
    assert row["speedup_ci_low"] < row["speedup"] < row["speedup_ci_high"]


@pytest.mark.parametrize("row, shown", [
    ({"comparable": "yes", "speedup": np.nan}, "n/a"),
    ({"comparable": "yes", "speedup": 1.5, "speedup_ci_low": np.nan, "runs_jax_torch": "1/1 paired"},
     "1.50x [n/a (1 run)]"),
    ({"comparable": "yes", "speedup": 1.5, "speedup_ci_low": np.nan, "runs_jax_torch": "3/1"},
     "1.50x [n/a (runs 3/1)]"),
    ({"comparable": "normalisation bf16 in JAX, float32 in PyTorch", "speedup": 1.5}, "not comparable"),
])
def test_a_speedup_is_shown_with_its_interval_or_why_it_has_none(row, shown):
    assert format_speedup(row) == shown


@pytest.mark.parametrize("mib, shown", [(3.25, "3.25"), (10.4, "10"), (1536.4, "1,536")])
def test_memory_below_ten_mib_keeps_three_digits_and_from_ten_on_whole_mib(mib, shown):
    assert format_value("peak_host_rss", mib * 2**20) == shown


@pytest.mark.parametrize("speed, shown", [(0.0301, "0.0301"), (5.47, "5.47"), (60.4, "60"), (123456.7, "123,457")])
def test_a_throughput_below_ten_keeps_three_digits_and_from_ten_on_whole_samples(speed, shown):
    """GPT-2 small's data-parallel rows on a CPU, 0.03 samples/s per device, read "0" before."""
    assert format_value("throughput", speed) == shown


def test_the_spread_of_steps_and_of_trials_are_named_together():
    assert spread_note(np.array([0.25]), np.array([1000.0, 1500.0])) == "steps 25% trials 28%"
    assert spread_note(np.array([0.10]), np.array([1000.0])) == ""  # at the threshold: not past it


def test_settings_are_named_in_words():
    assert setting_label("tasks_per_node", 2) == "2 per node"
    assert setting_label("nodes", 1) == "1 node" and setting_label("bound_cpus", 4) == "4 CPUs"
    assert setting_label("seed", 3) == "seed 3"


def test_a_variant_is_named_beside_its_model_and_the_full_model_by_its_name_alone():
    frame = pd.DataFrame({"model": ["mlp", "mlp", "mlp", "cnn"], "model_variant": ["full", "", None, "tiny"]})
    assert with_variant_label(frame)["model"].tolist() == ["mlp", "mlp", "mlp", "cnn (tiny)"]


def test_a_system_mismatch_counts_cells_once_skips_rows_without_a_system_and_keeps_an_unknown_node():
    base = {"campaign": "c", "device_model": "NVIDIA A100-SXM4-80GB", "trial": 0}
    rows = [base | {"system": "h100", "cell_id": "x", "slurm_nodelist": np.nan, "metric": m} for m in "abc"]
    rows += [base | {"system": "", "cell_id": "y", "slurm_nodelist": "n2", "metric": "a"}]
    rows += [base | {"system": None, "cell_id": "z", "slurm_nodelist": "n3", "metric": "a"}]
    flagged = system_mismatches(pd.DataFrame(rows), {("c", "h100"): "H100", ("c", ""): "H100"})
    assert flagged[["system", "expect", "cells"]].values.tolist() == [["h100", "H100", 1]]
    assert pd.isna(flagged["slurm_nodelist"].iloc[0])
    empty = system_mismatches(pd.DataFrame({"campaign": ["c"]}), {})
    assert empty.empty and list(empty.columns) == ["campaign", "system", "expect", "device_model", "slurm_nodelist",
                                                    "cells"]
