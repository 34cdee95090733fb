"""collect's DP-SGD table says each cell's privacy budget (orchestrator.results.views): epsilon at delta once per
cell, or that shuffled batches carry no guarantee."""

import json

from helpers import result_context
from test_use_case_tables import collect, table_lines

from bench_contract.results import ResultRows


def write_dp_cell(root, framework, batch, sampling, epsilon=None, epsilon_rdp=None):
    ctx = result_context(framework=framework, benchmark="digits", use_case=3, model="mlp", batch_size=batch,
                         precision="fp32", device_model="CPU X", campaign="c", settings=json.dumps({"sampling": sampling}),
                         cell_id=f"{framework}-digits-mlp-uc3-{batch}")
    rows = ResultRows(ctx)
    rows.add("throughput", 900.0 if framework == "jax" else 600.0, "samples/s")
    rows.add("per_sample_grads_vectorized_time_p50", 2.0, "ms")
    if epsilon is None:
        rows.add_unavailable("privacy_epsilon", "epsilon", "shuffled fixed-size batches")
    else:
        rows.add("privacy_epsilon", epsilon, "epsilon")
        if epsilon_rdp is not None:
            rows.add("privacy_epsilon_rdp", epsilon_rdp, "epsilon")
        rows.add("privacy_delta", 1 / 1257, "delta")
    rows.write(root / "c" / "rows" / framework / f"{ctx['cell_id']}.parquet")


def test_the_dp_sgd_table_says_each_cells_budget_once(tmp_path):
    for framework in ("jax", "torch"):
        write_dp_cell(tmp_path, framework, 32, "poisson", epsilon=3.95)
        write_dp_cell(tmp_path, framework, 16, "shuffle")
    table = table_lines(collect(tmp_path), "Per-sample gradients (DP-SGD) on CPU X")
    notes = [line for line in table if line.startswith("privacy")]
    assert notes == [
        "privacy, digits mlp batch 16: shuffled batches, so the accountant's guarantee (Poisson sampling) does not apply",
        "privacy, digits mlp batch 32: epsilon 3.95 at delta 0.0008, the same budget for both frameworks",
    ]


def test_the_dp_sgd_table_names_the_pld_accountant_and_gives_the_rdp_epsilon_beside_it(tmp_path):
    for framework in ("jax", "torch"):
        write_dp_cell(tmp_path, framework, 32, "poisson", epsilon=2.31, epsilon_rdp=2.52)
    table = table_lines(collect(tmp_path), "Per-sample gradients (DP-SGD) on CPU X")
    assert [line for line in table if line.startswith("privacy")] == [
        "privacy, digits mlp batch 32: epsilon 2.31 (PLD accountant; RDP: 2.52) at delta 0.0008, the same budget for "
        "both frameworks"]
