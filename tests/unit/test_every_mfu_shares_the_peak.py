"""Every MFU the product shows divides by the one peak both frameworks share on the device. The
language model's MFU by 6N (model_flops_utilisation) was left out of the shared calibration, which named `mfu`
alone, so its table divided each side by its own process's CPU calibration: JAX 0.18 against PyTorch 0.0056, 32.1
times, where the throughput was 27.6 times (JAX's own peak 66.4 GFLOP/s, the shared one 77.4). With the same FLOPs
counted on both sides, the MFUs of two runs are in the ratio of their throughputs, whatever peaks they measured.

Two runs of one GPT cell, recorded through the contract's own recorders (record_utilisation, record_model_flops),
with different own peaks: the MFUs collect prints, the report's tables and report.csv are in the throughput's ratio.
"""

import csv

import pytest
from helpers import result_context
from test_use_case_tables import collect, table_lines

from bench_contract.measure.flops import PEAK_FRACTIONS, Flops, Peak, record_peak_fraction, record_utilisation
from bench_contract.measure.tokens import record_model_flops

BATCH, CONTEXT = 8, 64  # samples a step, tokens a sample
STEP_S = {"jax": 0.01, "torch": 0.03}  # JAX's steps 3 times as fast: its throughput, and so its MFU, 3 times
OWN_PEAK = {"jax": 80e9, "torch": 100e9}  # each process's own CPU calibration; the shared peak is the higher
COUNTED = 1.2e8  # FLOPs a step, counted alike on both sides (tests/backends/test_training_flops_agree.py)
MODEL_FLOPS_PER_TOKEN = 2.4e8 / (BATCH * CONTEXT)  # 6N plus attention's: 2.4e8 a step
# Against the shared peak of 100 GFLOP/s: MFU 0.12 and 0.04, by 6N 0.24 and 0.08. Against its own peak JAX's would
# be 0.15 and 0.3 (3.75 times PyTorch's). Each prints exactly in the tables' three significant digits, so the ratio
# of the printed numbers is the throughputs' up to float64's rounding of one division.
SHARED = {"mfu": {"jax": "0.12", "torch": "0.04"}, "model_flops_utilisation": {"jax": "0.24", "torch": "0.08"}}
RATIO = STEP_S["torch"] / STEP_S["jax"]
ROUNDING = 1e-12


def write_gpt_run(root, framework: str):
    """One gpt run as a backend records it: throughput in samples and tokens, the counted FLOPs' utilisation and
    the model's, both against this process's own peak."""
    from bench_contract.results import ResultRows

    ctx = result_context(framework=framework, benchmark="nlp", use_case=1, model="gpt", model_variant="tiny",
                         batch_size=BATCH, precision="fp32", device_kind="cpu", device_model="CPU X", campaign="c",
                         cell_id=f"{framework}-gpt", settings='{"model_variant": "tiny"}', framework_version="1.0",
                         attention_kernel="XLA" if framework == "jax" else "flash (CPU)")
    rows = ResultRows(ctx)
    times = [STEP_S[framework]] * 4
    rows.add("throughput", BATCH / STEP_S[framework], "samples/s")
    rows.add("token_throughput", BATCH * CONTEXT / STEP_S[framework], "tokens/s")
    peak = Peak(OWN_PEAK[framework], f"measured: fastest of 5 {framework} matmuls in this process")
    record_utilisation(rows, Flops(COUNTED, "counted"), peak, times, devices=1)
    record_model_flops(rows, MODEL_FLOPS_PER_TOKEN, BATCH * CONTEXT, times, peak, devices=1)
    return rows.write(root / "c" / "rows" / framework / f"{framework}-gpt.parquet")


def printed_ratio(jax: str, torch: str) -> float:
    return float(jax) / float(torch)


@pytest.fixture
def collected(tmp_path):
    for framework in STEP_S:
        write_gpt_run(tmp_path, framework)
    return tmp_path, collect(tmp_path)


def language_lines(table: list[str]) -> tuple[list[str], list[str]]:
    """The JAX and PyTorch lines of the one cell of a language-model table, split into words."""
    jax = next(line.split() for line in table if " JAX " in f" {line} ")
    torch = next(line.split() for line in table if line.split()[:1] == ["PyTorch"])
    return jax, torch


def test_collect_prints_the_language_models_mfu_in_the_throughputs_ratio(collected):
    _, stdout = collected
    jax, torch = language_lines(table_lines(stdout, "Language models in tokens/s on CPU X"))
    expected = SHARED["model_flops_utilisation"]
    assert expected["jax"] in jax and expected["torch"] in torch, (jax, torch)
    assert printed_ratio(expected["jax"], expected["torch"]) == pytest.approx(RATIO, rel=ROUNDING)


def test_the_reports_tables_and_csv_hold_every_mfu_in_the_throughputs_ratio(collected, monkeypatch):
    """report.md's and report.tex's language-model table, and report.csv's MFU columns (both kinds). The plots are
    left out: they are no table, and drawing them is most of a report's time."""
    from orchestrator.results import report

    root, _ = collected
    monkeypatch.setattr(report, "draw_plots", lambda df, frame, folder: [])
    written = report.write_report(root / "merged.parquet", root / "report")
    markdown = written.tables["markdown"].read_text()
    table = markdown.split("## Language models in tokens/s on CPU X")[1].split("\n## ")[0]
    cells = [[cell.strip() for cell in line.split("|")] for line in table.splitlines() if line.startswith("|")]
    jax, torch = (next(row for row in cells if name in row) for name in ("JAX", "PyTorch"))
    assert SHARED["model_flops_utilisation"]["jax"] in jax and SHARED["model_flops_utilisation"]["torch"] in torch
    latex = written.tables["latex"].read_text()
    assert all(SHARED["model_flops_utilisation"][fw] in latex for fw in STEP_S)
    (row,) = [r for r in csv.DictReader(written.tables["csv"].open()) if r["model"] == "gpt (tiny)"]
    for metric in PEAK_FRACTIONS:
        assert float(row[f"jax_{metric}"]) / float(row[f"torch_{metric}"]) == pytest.approx(RATIO, rel=ROUNDING)
        assert float(row[f"torch_{metric}"]) == pytest.approx(float(SHARED[metric]["torch"]), rel=ROUNDING)


def test_a_comparison_of_the_runs_own_rows_shares_the_peak_too(tmp_path):
    """Not only the merged dataset's shared rows: the comparison of rows as the backends wrote them (own peaks under
    the plain names) puts every fraction of the peak against the shared one, and the language table reads it."""
    import pandas as pd

    from bench_contract.results import read_task_table
    from orchestrator.results.language_models import with_language_columns
    from orchestrator.results.views import use_case_frame

    df = pd.concat([read_task_table(write_gpt_run(tmp_path, fw)).to_pandas() for fw in STEP_S], ignore_index=True)
    (row,) = with_language_columns(use_case_frame(df), df).to_dict("records")
    for metric in PEAK_FRACTIONS:
        assert row[f"jax_{metric}"] / row[f"torch_{metric}"] == pytest.approx(RATIO, rel=ROUNDING)


def test_every_fraction_of_the_peak_a_run_records_is_declared_and_nothing_else_is():
    """The metrics a run divides by its peak are found by doubling the peak: exactly PEAK_FRACTIONS halve, so a new
    one the recorders add is shared as soon as it is declared, and record_peak_fraction refuses one that is not."""
    from bench_contract.results import ResultRows

    def recorded(peak_flops: float) -> dict[str, float]:
        rows = ResultRows(result_context())
        peak = Peak(peak_flops, "measured", 1e10, "measured")
        record_utilisation(rows, Flops(COUNTED, "counted", 1e7, "counted"), peak, [0.01, 0.02], devices=2)
        record_model_flops(rows, MODEL_FLOPS_PER_TOKEN, BATCH * CONTEXT, [0.01, 0.02], peak, devices=2)
        return {r["metric"]: r["value"] for r in rows.rows if r["value"] is not None}

    once, twice = recorded(50e9), recorded(100e9)
    halved = {m for m in once if twice[m] == pytest.approx(once[m] / 2) and once[m] != 0}
    assert halved == set(PEAK_FRACTIONS)
    with pytest.raises(ValueError, match="not in PEAK_FRACTIONS"):
        record_peak_fraction(ResultRows(result_context()), "tokens_utilisation", COUNTED, [0.01],
                             Peak(1e9, "measured"), 1, "counted")
