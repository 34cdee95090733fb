"""A comparison row pools only runs made with the same settings on the same kind and model of device; cells
measured under different settings get a row each, named by the setting that differs (issue 14, item 1)."""

import pandas as pd
import pytest
from helpers import result_context, run_cli

from bench_contract.results import ResultRows
from bench_contract.run.runner import base_context
from bench_contract.spec import JobSpec
from orchestrator.results.compare import comparison_frame, display_rows


def write_run(root, campaign, framework, throughput, device=("cpu", "CPU X"), **settings):
    """One task's result file, its identity columns made from a real job spec as the backend makes them."""
    values = dict(campaign=campaign, cell_id=f"{framework}-cell", pair_key="cell", framework=framework,
                  benchmark="digits", use_case=5, model="mlp", batch_size=32, precision="fp32") | settings
    spec = JobSpec(**values)
    context = result_context(**base_context(spec), device_kind=device[0], device_model=device[1])
    rows = ResultRows(context)
    rows.add("throughput", throughput, "samples/s")
    rows.write(root / campaign / "rows" / framework / f"{framework}-cell.parquet")
    return pd.DataFrame(rows.rows).assign(**context)


def two_campaigns(tmp_path, first: dict, second: dict):
    frames = [write_run(tmp_path, "a", "jax", 2000, **first), write_run(tmp_path, "a", "torch", 1000, **first),
              write_run(tmp_path, "b", "jax", 2000, **second), write_run(tmp_path, "b", "torch", 500, **second)]
    return comparison_frame(pd.concat(frames, ignore_index=True))


@pytest.mark.parametrize("first, second, words", [
    (dict(), dict(torch_compile=True), {"eager", "torch.compile"}),
    (dict(), dict(data_source="synthetic"), {"real data", "synthetic"}),
    (dict(use_case=2), dict(use_case=2, nodes=2), {"1 node", "2 nodes"}),
])
def test_campaigns_that_differ_in_a_setting_give_a_row_each_named_by_it(tmp_path, first, second, words):
    frame = two_campaigns(tmp_path, first, second)
    assert len(frame) == 2
    assert set(frame["differs_in"]) == words
    assert sorted(frame["speedup"]) == [2.0, 4.0]  # each row's own runs: never 2000/750 from pooled runs
    assert set(frame["runs_jax_torch"]) == {"1/1"}
    headers, rows = display_rows(frame, "CPU X")
    assert {row[headers.index("settings")] for row in rows} == words


def test_runs_with_the_same_settings_are_pooled_as_trials(tmp_path):
    frame = two_campaigns(tmp_path, dict(), dict())
    assert len(frame) == 1 and frame["runs_jax_torch"].iloc[0] == "2/2" and frame["differs_in"].iloc[0] == ""
    headers, _ = display_rows(frame, "CPU X")
    assert "settings" not in headers  # the column appears only where a cell has several rows


def test_a_jax_run_on_the_cpu_is_never_compared_with_a_pytorch_run_on_a_gpu(tmp_path):
    frame = comparison_frame(pd.concat([write_run(tmp_path, "a", "jax", 2000, device=("cpu", "H100")),
                                        write_run(tmp_path, "a", "torch", 1000, device=("gpu", "H100"))]))
    assert len(frame) == 2 and frame["speedup"].isna().all()


def test_collect_prints_the_two_rows_with_the_differing_setting(tmp_path):
    two_campaigns(tmp_path, dict(), dict(torch_compile=True))
    proc = run_cli("collect", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("digits")]
    assert len(lines) == 2
    assert any("torch.compile" in line and "4.00x" in line for line in lines)
    assert any("eager" in line and "2.00x" in line for line in lines)


def test_mfu_of_both_frameworks_divides_by_one_peak_per_device_and_precision():
    """Each backend divides by its own CPU calibration (here 69 and 88 GFLOP/s): the comparison divides both
    by the device's one peak, the highest recorded, so equal achieved FLOP/s give equal MFU."""
    from orchestrator.results.compare import with_shared_peak

    def run(framework, peak, achieved):
        base = dict(device_kind="cpu", device_model="CPU X", precision="fp32", campaign="a",
                    cell_id=f"{framework}-c", trial=0, framework=framework, step=float("nan"), epoch=float("nan"))
        return [base | dict(metric="peak_flops", value=peak), base | dict(metric="achieved_flops", value=achieved),
                base | dict(metric="mfu", value=achieved / peak)]

    frame = with_shared_peak(pd.DataFrame(run("jax", 69e9, 50e9) + run("torch", 88e9, 50e9)))
    mfu = frame[frame.metric == "mfu"].set_index("framework")["value"]
    assert mfu["jax"] == pytest.approx(mfu["torch"]) == pytest.approx(50 / 88)
    assert (mfu <= 1).all()
