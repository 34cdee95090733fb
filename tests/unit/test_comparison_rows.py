"""A comparison row pools only runs made with the same settings on the same kind and model of device; cells
measured under different settings get a row each, named by the setting that differs."""

import pandas as pd
import pytest
from helpers import run_cli, spec, write_spec_run

from orchestrator.results.compare import comparison_frame
from orchestrator.results.views import use_case_frame, view_tables


def campaign_run(root, campaign, framework, throughput, device=("cpu", "CPU X"), cpus=2, **settings):
    """One task's result file (write_spec_run) in `campaign`: an inference cell unless `settings` say otherwise.
    Its throughput per device too, which a data-parallel run records and its table shows."""
    run_spec = spec(framework, **({"campaign": campaign, "cell_id": f"{framework}-cell", "pair_key": "cell",
                                   "use_case": 5} | settings))
    metrics = {"throughput_per_device": (throughput, "samples/s")}
    return write_spec_run(root, run_spec, throughput, device, cpus, metrics=metrics)


def one_cell_in_two_campaigns(tmp_path, first: dict, second: dict):
    """The runs of two campaigns of one cell, each with its settings: JAX 2x PyTorch in `first`, 4x in `second`."""
    frames = [campaign_run(tmp_path, "a", "jax", 2000, **first), campaign_run(tmp_path, "a", "torch", 1000, **first),
              campaign_run(tmp_path, "b", "jax", 2000, **second), campaign_run(tmp_path, "b", "torch", 500, **second)]
    return pd.concat(frames, ignore_index=True)


def settings_shown(runs) -> set[str] | None:
    """The words in the settings column of the runs' use-case table; None where it has no such column."""
    (table,) = view_tables(use_case_frame(runs))
    if "settings" not in table.headers:
        return None
    return {row[table.headers.index("settings")] for row in table.rows} - {""}  # "": a PyTorch line's key


@pytest.mark.parametrize("first, second, words", [
    ({}, {"torch_compile": True}, {"eager", "torch.compile"}),
    ({}, {"data_source": "synthetic"}, {"real data", "synthetic"}),
    ({"use_case": 2}, {"use_case": 2, "nodes": 2}, {"1 node", "2 nodes"}),
])
def test_campaigns_that_differ_in_a_setting_give_a_row_each_named_by_it(tmp_path, first, second, words):
    runs = one_cell_in_two_campaigns(tmp_path, first, second)
    frame = comparison_frame(runs)
    assert len(frame) == 2
    assert set(frame["differs_in"]) == words
    assert sorted(frame["speedup"]) == [2.0, 4.0]  # each row's own runs: never 2000/750 from pooled runs
    assert set(frame["runs_jax_torch"]) == {"1/1"}
    assert settings_shown(runs) == words


def test_runs_with_the_same_settings_are_pooled_as_trials(tmp_path):
    runs = one_cell_in_two_campaigns(tmp_path, {}, {})
    frame = comparison_frame(runs)
    assert len(frame) == 1 and frame["runs_jax_torch"].iloc[0] == "2/2" and frame["differs_in"].iloc[0] == ""
    assert settings_shown(runs) is None  # the column appears only where a cell has several rows


def test_a_jax_run_on_the_cpu_is_never_compared_with_a_pytorch_run_on_a_gpu(tmp_path):
    frame = comparison_frame(pd.concat([campaign_run(tmp_path, "a", "jax", 2000, device=("cpu", "H100")),
                                        campaign_run(tmp_path, "a", "torch", 1000, device=("gpu", "H100"))]))
    assert len(frame) == 2 and frame["speedup"].isna().all()


def test_collect_prints_the_two_rows_with_the_differing_setting(tmp_path):
    one_cell_in_two_campaigns(tmp_path, {}, {"torch_compile": True})
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("digits")]
    assert len(lines) == 2
    assert any("torch.compile" in line and "4.00x" in line for line in lines)
    assert any("eager" in line and "2.00x" in line for line in lines)


def test_cpu_runs_on_different_numbers_of_cpus_are_never_paired_and_the_row_says_so(tmp_path):
    """A JAX run bound to 2 CPUs against a PyTorch run on 4 measures the thread counts, not the frameworks."""
    runs = pd.concat([campaign_run(tmp_path, "a", "jax", 2000, cpus=2),
                      campaign_run(tmp_path, "a", "torch", 1000, cpus=4)])
    frame = comparison_frame(runs)
    assert len(frame) == 2 and frame["speedup"].isna().all()
    assert set(frame["differs_in"]) == {"2 CPUs, 2 threads", "4 CPUs, 4 threads"}
    assert settings_shown(runs) == {"2 CPUs, 2 threads", "4 CPUs, 4 threads"}
    # On a GPU the device computes: the host's CPUs do not split the comparison.
    frame = comparison_frame(pd.concat([campaign_run(tmp_path, "a", "jax", 2000, device=("gpu", "H100"), cpus=8),
                                        campaign_run(tmp_path, "a", "torch", 1000, device=("gpu", "H100"), cpus=16)]))
    assert len(frame) == 1 and frame["speedup"].iloc[0] == 2.0


def test_mfu_of_both_frameworks_divides_by_one_peak_per_device_and_precision():
    """Each backend divides by its own CPU calibration (here 69 and 88 GFLOP/s): the comparison divides both
    by the device's one peak, the highest recorded, so equal achieved FLOP/s give equal MFU."""
    from orchestrator.results.compare import with_shared_peak

    def run(framework, peak, achieved):
        base = {"device_kind": "cpu", "device_model": "CPU X", "precision": "fp32", "campaign": "a",
                "cell_id": f"{framework}-c", "trial": 0, "framework": framework, "step": float("nan"),
                "epoch": float("nan")}
        return [base | {"metric": "peak_flops", "value": peak}, base | {"metric": "achieved_flops", "value": achieved},
                base | {"metric": "mfu", "value": achieved / peak}]

    frame = with_shared_peak(pd.DataFrame(run("jax", 69e9, 50e9) + run("torch", 88e9, 50e9)))
    mfu = frame[frame.metric == "mfu"].set_index("framework")["value"]
    assert mfu["jax"] == pytest.approx(mfu["torch"]) == pytest.approx(50 / 88)
    assert (mfu <= 1).all()


def test_a_cpu_peak_is_shared_only_by_runs_bound_to_as_many_cpus():
    """A 2-CPU run's MFU of 0.40 was once divided again by a 32-CPU campaign's peak, to 0.025."""
    from orchestrator.results.compare import with_shared_peak

    def run(campaign, framework, cpus, peak, achieved):
        base = {"device_kind": "cpu", "device_model": "CPU X", "bound_cpus": str(cpus), "intra_op_threads": str(cpus),
                "precision": "fp32", "campaign": campaign, "cell_id": f"{framework}-c", "trial": 0,
                "framework": framework, "step": float("nan"), "epoch": float("nan")}
        return [base | {"metric": "peak_flops", "value": peak}, base | {"metric": "mfu", "value": achieved / peak}]

    frame = with_shared_peak(pd.DataFrame(run("a", "jax", 2, 50e9, 20e9) + run("a", "torch", 2, 40e9, 20e9)
                                          + run("b", "jax", 32, 800e9, 300e9) + run("b", "torch", 32, 700e9, 300e9)))
    mfu = frame[frame.metric == "mfu"].set_index(["campaign", "framework"])["value"]
    assert mfu["a", "jax"] == pytest.approx(0.4) and mfu["a", "torch"] == pytest.approx(0.4)  # 20 of 50 GFLOP/s
    assert mfu["b", "jax"] == pytest.approx(300 / 800) and mfu["b", "torch"] == pytest.approx(300 / 800)


def test_the_shared_peak_reads_each_runs_own_peak_wherever_its_row_stands_and_says_so():
    """A run's own peak is its peak_flops row, not the first row of the run (here its achieved FLOP/s come first);
    the rewritten peak rows say where the shared peak came from, word for word."""
    from orchestrator.results.compare import SHARED_NOTE, with_shared_peak

    def run(framework, peak, achieved):
        base = {"device_kind": "cpu", "device_model": "CPU X", "precision": "fp32", "campaign": "a",
                "cell_id": f"{framework}-c", "trial": 0, "framework": framework, "step": float("nan"),
                "epoch": float("nan"), "note": "measured"}
        return [base | {"metric": "achieved_flops", "value": achieved}, base | {"metric": "peak_flops", "value": peak},
                base | {"metric": "mfu", "value": achieved / peak}]

    frame = with_shared_peak(pd.DataFrame(run("jax", 69e9, 50e9) + run("torch", 88e9, 50e9)))
    rows = frame.set_index(["framework", "metric"])
    assert rows.loc[("jax", "mfu"), "value"] == pytest.approx(50 / 88)
    assert rows.loc[("jax", "peak_flops"), "note"] == SHARED_NOTE.format(metric="peak_flops",
                                                                          precision=" at this precision")
    assert SHARED_NOTE.format(metric="peak_flops", precision=" at this precision").startswith(
        "shared by both frameworks: the highest peak_flops any run of either recorded on this device kind and model "
        "at this precision")


def test_a_setting_a_row_did_not_record_is_named_by_what_it_ran():
    """A row from before `parallelism` existed ran replicated: beside a sharded row of its cell, it reads
    "replicated (ddp)", the other "sharded (fsdp)"."""
    from orchestrator.results.compare import differing_settings

    frame = pd.DataFrame({"device_kind": "cpu", "device_model": "CPU X", "benchmark": "nlp", "use_case": 2,
                          "model": "gpt", "batch_size": 8, "precision": "fp32", "bound_cpus": "",
                          "intra_op_threads": "",
                          "settings": ["{}", '{"parallelism": "fsdp"}']})
    assert differing_settings(frame) == ["replicated (ddp)", "sharded (fsdp)"]
