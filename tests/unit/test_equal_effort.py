"""Equal effort (--tune K): both frameworks get the same budget of tries, a try whose results differ from out of
the box is dropped however fast, and the comparison never sets a tuned side against an untuned one or against one
tuned with a bigger budget (orchestrator.plan.tuning, orchestrator.run.tuning, orchestrator.results.tuning, the certificate)."""

import json

import pandas as pd
import pytest
from helpers import dry_run, spec, write_spec_run

from bench_contract.run.parity import TOLERANCES
from orchestrator.results.compare import comparison_frame
from orchestrator.results.tuning import effort_rows
from orchestrator.run.tuning import Try, Tuned, judge, setting_rows

DIGITS = "1,257/180/360 train/val/test examples, sha256 4046546367a14303"


def test_a_dry_run_plans_the_same_budget_for_both_frameworks_out_of_the_box_first(tmp_path):
    proc = dry_run(tmp_path, "--benchmark", "digits", "--use-case", "1,5", "--device", "cpu", "--tune", "4")
    assert proc.returncode == 0, proc.stderr
    assert "the tuned campaign is planned from the tries' results" in proc.stdout
    lines = [json.loads(line) for path in (tmp_path / "r" / ".tuning").rglob("specs/*.jsonl")
             for line in path.read_text().splitlines()]
    tries: dict[tuple, list[dict]] = {}
    for line in lines:
        assert line["tuning"] == "try" and line["trials"] == 1 and not line["paired"] and line["tune"] == 4
        tries.setdefault((line["framework"], line["pair_key"]), []).append(line["tuned"])
    pairs = {key for _, key in tries}
    assert len(pairs) == 6  # use case 1's two default batch sizes, use case 5's four
    for key in pairs:
        assert len(tries["jax", key]) == len(tries["torch", key]) == 4  # equal budgets
        for framework in ("jax", "torch"):
            drawn = tries[framework, key]
            assert drawn[0] == {} and all(drawn[1:])  # out of the box first, and once
    assert not (tmp_path / "r" / "merged.parquet").exists()


def try_rows(losses=None, throughput=100.0, outputs=None):
    """One run's rows as the tries' task files hold them: its throughput, its step losses or its output summaries."""
    rows = [{"metric": "throughput", "value": throughput, "step": None, "epoch": None}]
    rows += [{"metric": "train_loss", "value": v, "step": i, "epoch": 0} for i, v in enumerate(losses or [])]
    rows += [{"metric": m, "value": v, "step": None, "epoch": None} for m, v in (outputs or {}).items()]
    return pd.DataFrame(rows)


def tuned(use_case, configurations, precision="fp32"):
    return Tuned("torch", "torch-x", "digits", use_case, "mlp", 32, precision, ["torch_mode"],
                 [Try(c, None) for c in configurations])


LOSSES = [2.3, 2.1, 1.9, 1.7]


def test_a_configuration_that_changes_the_loss_is_dropped_however_fast_and_one_within_the_bound_is_chosen():
    bound = TOLERANCES["fp32"]
    # Within the bound: rounding moved the last loss by a tenth of it (relative to the largest loss, 2.3).
    close = [*LOSSES[:-1], LOSSES[-1] + 0.1 * bound * 2.3]
    # Beyond it, yet far faster: its losses moved by ten times the bound.
    changed = [*LOSSES[:-1], LOSSES[-1] + 10 * bound * 2.3]
    result = judge(tuned(1, [{}, {"torch_mode": "default"}, {"torch_mode": "max-autotune"}]),
                   [try_rows(LOSSES, 100.0), try_rows(close, 150.0), try_rows(changed, 400.0)])
    assert result.chosen == {"torch_mode": "default"}
    dropped = result.tries[2].dropped
    assert dropped.startswith("its losses differ from out of the box's by 1.0e-03 of their scale, above the fp32 "
                              "bound 1e-04"), dropped
    assert [t.speedup for t in result.tries] == [1.0, 1.5, 4.0]


def test_an_inference_configuration_whose_outputs_move_is_dropped_and_a_failed_one_too():
    outputs = {"output_mean": 0.2, "output_abs_mean": 3.0, "output_abs_max": 10.0}
    moved = outputs | {"output_abs_mean": 3.0 + 2 * TOLERANCES["fp32"] * 10.0}
    result = judge(tuned(5, [{}, {"grad_mode": "no_grad"}, {"torch_mode": "default"}]),
                   [try_rows(throughput=100.0, outputs=outputs), try_rows(throughput=300.0, outputs=moved), None])
    assert result.chosen == {}  # nothing kept beat out of the box
    assert result.tries[1].dropped.startswith("its outputs differ from out of the box's by 2.0e-04 of their "
                                              "scale, above the fp32 bound 1e-04")
    assert result.tries[2].dropped.startswith("failed")


def test_a_precision_has_its_own_bound():
    """bf16's bound is 500 times fp32's: a move fp32 drops, bf16 keeps."""
    moved = [*LOSSES[:-1], LOSSES[-1] + 10 * TOLERANCES["fp32"] * 2.3]
    runs = [try_rows(LOSSES, 100.0), try_rows(moved, 120.0)]
    assert judge(tuned(1, [{}, {"torch_mode": "default"}], "fp32"), runs).chosen == {}
    assert judge(tuned(1, [{}, {"torch_mode": "default"}], "bf16"), runs).chosen == {"torch_mode": "default"}


def tuned_run(root, campaign, framework, throughput, tuning=None, tuned=None):
    """A run of the tuned level as the backend records it (framework_options' tuning and tuned), or as a run that
    recorded no tuning (out of the box); its settings say the tuned level either way."""
    run_spec = spec(framework, campaign=campaign, cell_id=f"{framework}-cell", pair_key="cell", tuning="tuned",
                    tune=4, paired=True, device="cpu", tuned=tuned or {})
    options = {"mode": "eager"} | ({"tuning": tuning, "tuned": tuned or {}} if tuning else {})
    context = {"framework_options": json.dumps(options), "data_fingerprint": DIGITS, "git_commit": "6feb0d7",
               "framework_version": "1", "environment_kind": "locked", "xla_flags": "not set",
               "precision_census": "{}"}
    return write_spec_run(root, run_spec, throughput, context=context)


@pytest.mark.parametrize("torch_tuning, said", [
    (None, "a tuned side is never set against an untuned one (JAX tuned, 4 configurations; PyTorch out of the box)"),
    ({"level": "tuned", "budget": 8}, "the sides were tuned with different budgets (JAX tuned, 4 configurations; "
                                      "PyTorch tuned, 8 configurations): equal effort needs one budget"),
])
def test_a_tuned_side_against_an_untuned_or_a_bigger_budget_is_not_comparable(tmp_path, torch_tuning, said):
    runs = [tuned_run(tmp_path, "a", "jax", 2000, {"level": "tuned", "budget": 4}, {"donate_state": False}),
            tuned_run(tmp_path, "a", "torch", 1000, torch_tuning, {"torch_mode": "default"} if torch_tuning else None)]
    result = comparison_frame(pd.concat(runs, ignore_index=True))
    assert len(result) == 1 and result["comparable"].iloc[0] == said
    assert result["speedup"].isna().all()


def test_equal_budgets_are_comparable_and_the_row_says_each_sides_tuning(tmp_path):
    runs = [tuned_run(tmp_path, "a", "jax", 2000, {"level": "tuned", "budget": 4}, {"donate_state": False}),
            tuned_run(tmp_path, "a", "torch", 1000, {"level": "tuned", "budget": 4}, {"torch_mode": "default"})]
    result = comparison_frame(pd.concat(runs, ignore_index=True))
    assert result["comparable"].iloc[0] == "yes" and result["speedup"].iloc[0] == 2.0
    assert result["tuning"].iloc[0] == ("JAX tuning tuned, 4 configurations; JAX tuned settings donate_state=False; "
                                        "PyTorch tuning tuned, 4 configurations; PyTorch tuned settings "
                                        "torch_mode=default")


def test_a_side_that_pools_two_tuned_configurations_is_not_comparable(tmp_path):
    runs = [tuned_run(tmp_path, "a", "jax", 2000, {"level": "tuned", "budget": 4}, {"donate_state": False}),
            tuned_run(tmp_path, "b", "jax", 2000, {"level": "tuned", "budget": 4}, {}),
            tuned_run(tmp_path, "a", "torch", 1000, {"level": "tuned", "budget": 4}, {}),
            tuned_run(tmp_path, "b", "torch", 1000, {"level": "tuned", "budget": 4}, {})]
    result = comparison_frame(pd.concat(runs, ignore_index=True))
    assert result["comparable"].iloc[0].startswith("JAX runs with different tuned settings pooled")


def test_both_speed_ups_stand_side_by_side_each_with_its_interval():
    settings = {"seed": 0}
    rows = []
    for level, speedup in (("out_of_the_box", 1.5), ("tuned", 0.8)):
        rows.append({"device_model": "CPU X", "benchmark": "digits", "use_case": 1, "model": "mlp", "batch_size": 32,
                     "precision": "fp32", "settings": json.dumps(settings | {"tuning": level}),
                     "speedup": speedup, "speedup_ci_low": speedup * 0.9, "speedup_ci_high": speedup * 1.1,
                     "comparable": "yes", "runs_jax_torch": "3/3 paired",
                     "tuning": ("JAX tuning tuned, 4 configurations; PyTorch tuning tuned, 4 configurations; PyTorch "
                                "tuned settings torch_mode=default") if level == "tuned" else ""})
    headers, table = effort_rows(pd.DataFrame(rows))
    assert table == [["CPU X", "digits", "1", "mlp", "32", "fp32", "1.50x [1.35, 1.65]", "0.80x [0.72, 0.88]",
                      "PyTorch torch_mode=default"]]


def level_run(root, framework, level, trial, throughput, configuration):
    """Trial `trial` of a paired cell of campaign "a" at tuning level `level`, as the backend records it (each trial's
    file named apart, as write_spec_run names it by the cell id)."""
    run_spec = spec(framework, campaign="a", cell_id=f"{framework}-{level}-trial{trial}", pair_key=level,
                    tuning=level, tune=2, paired=True, device="cpu", trials=2, trial=trial, tuned=configuration)
    options = {"mode": "eager"} | ({"tuning": {"level": level, "budget": 2}, "tuned": configuration}
                                   if level == "tuned" else {})
    context = {"framework_options": json.dumps(options), "data_fingerprint": DIGITS, "git_commit": "6feb0d7",
               "framework_version": "1", "environment_kind": "locked", "xla_flags": "not set",
               "precision_census": "{}", "pair_order": "jax,torch"}
    return write_spec_run(root, run_spec, throughput, context=context)


def test_collect_and_report_show_both_speed_ups_the_ladders_a_figure_and_what_won(tmp_path):
    from helpers import run_cli

    from orchestrator.run.tuning import write_record

    chosen = {"jax": {"donate_state": False}, "torch": {"torch_mode": "default"}}
    for trial, wobble in enumerate((1.0, 1.02)):
        for level, (jax, torch) in (("out_of_the_box", (2000, 1000)), ("tuned", (3000, 1000))):
            for framework, speed in (("jax", jax), ("torch", torch)):
                level_run(tmp_path, framework, level, trial, speed * wobble,
                          chosen[framework] if level == "tuned" else {})
    judged = [judge(Tuned(fw, f"{fw}-x", "digits", 1, "mlp", 32, "fp32", ["knob"],
                          [Try({}, None), Try(chosen[fw], None)]),
                    [try_rows(LOSSES, 100.0), try_rows(LOSSES, 150.0)]) for fw in ("jax", "torch")]
    write_record(tmp_path / "a", 2, "tries", judged)
    collect = run_cli("collect", "--results-dir", str(tmp_path))
    assert collect.returncode == 0, collect.stderr
    table = collect.stdout.split("Equal effort: out of the box and tuned, each side with the same budget:\n")[1]
    row = next(line for line in table.splitlines() if line.startswith("CPU X"))
    assert "2.00x [" in row and "3.00x [" in row and "JAX donate_state=False; PyTorch torch_mode=default" in row
    for title in ("JAX", "PyTorch"):
        ladder = collect.stdout.split(f"Tuning ladder, {title}, digits use case 1 mlp, batch 32, fp32 (2 "
                                      "configurations")[1]
        assert "1.50x" in ladder.split("\n\n")[0] and "chosen" in ladder.split("\n\n")[0]
    report = run_cli("report", "--results-dir", str(tmp_path))
    assert report.returncode == 0, report.stderr
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Equal effort: out of the box and tuned" in markdown and "## Tuning ladder, PyTorch" in markdown
    assert "2 configurations per cell and framework" in markdown
    assert "Chosen: JAX donate_state=False (mlp, batch 32, use case 1) and PyTorch torch_mode=default" in markdown
    assert (tmp_path / "report" / "plots" / "ladder_digits_1_mlp_32_fp32.png").stat().st_size > 0


def test_what_each_setting_gave_is_its_tries_against_the_others():
    """Speed-ups 1, 2, 1, 2 for out of the box, a, b, a+b: a doubled every try it was in, b changed nothing."""
    configurations = [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 1}]
    result = Tuned("jax", "jax-x", "digits", 1, "mlp", 32, "fp32", ["a", "b"], [Try(c, None) for c in configurations])
    for attempt, speedup in zip(result.tries, (1.0, 2.0, 1.0, 2.0)):
        attempt.speedup = speedup
    result.tries.append(Try({"a": 1, "b": 2}, 900.0, dropped="its losses differ", speedup=9.0))  # not counted
    assert setting_rows(result) == [["a=1", "2.00x (2)", "1.00x (2)"], ["b=1", "1.41x (2)", "1.41x (2)"]]
