"""The verdict of a comparison row (orchestrator.results.verdict) and what makes a row implausible across batch sizes
(orchestrator.results.plausibility), each condition of the rule for "reliable" tested on both sides of its edge, and
the verdicts at the top of collect's output, report.md and the HTML page."""

import numpy as np
import pandas as pd
import pytest
from helpers import result_context, run_cli

from orchestrator.results.compare import COMPARABLE, format_speedup
from orchestrator.results.plausibility import implausible_notes
from orchestrator.results.verdict import MAX_INTERVAL, MIN_RUNS, MIN_TIMED_WINDOW_S, verdict

ENOUGH = {"jax": MIN_RUNS, "torch": MIN_RUNS}


def row(speedup=1.20, half_width=0.05, **values) -> pd.Series:
    """A comparable comparison row whose interval reaches `half_width` (relative) from the speed-up on both sides."""
    low, high = (np.nan, np.nan) if half_width is None else (speedup * (1 - half_width), speedup * (1 + half_width))
    return pd.Series({"benchmark": "digits", "use_case": 3, "model": "mlp", "batch_size": 32, "precision": "fp32",
                      "device_model": "CPU X", "differs_in": "", "speedup": speedup, "speedup_ci_low": low,
                      "speedup_ci_high": high, "runs_jax_torch": f"{MIN_RUNS}/{MIN_RUNS}", "spread_too_wide": "",
                      "implausible": "", "comparable": COMPARABLE} | values)


def test_a_row_that_meets_every_condition_is_reliable_and_says_so_in_words():
    found = verdict(row(), ENOUGH, nodes=2)
    assert found.reliable
    assert found.text == ("Per-sample gradients (DP-SGD) (use case 3), digits mlp batch 32 fp32 on CPU X: JAX 1.20x "
                          "faster [1.14, 1.26], 3 runs each on 2 nodes: reliable")


def test_pytorch_faster_is_said_as_its_own_ratio_with_the_interval_turned_over():
    found = verdict(row(speedup=0.5, speedup_ci_low=0.45, speedup_ci_high=0.52), ENOUGH, nodes=1)
    assert "PyTorch 2.00x faster [1.92, 2.22], 3 runs each on 1 node" in found.text


@pytest.mark.parametrize("runs, reliable", [(MIN_RUNS, True), (MIN_RUNS - 1, False)])
def test_fewer_runs_than_the_minimum_on_either_side_are_not_reliable(runs, reliable):
    found = verdict(row(), {"jax": MIN_RUNS, "torch": runs}, nodes=1)
    assert found.reliable is reliable
    assert ("fewer than 3 runs a side" in found.text) is not reliable


def test_enough_runs_without_an_interval_are_not_reliable():
    # Only an interval whose coverage is shown makes a number one can quote; none at all is never enough.
    found = verdict(row(half_width=None), ENOUGH, nodes=1)
    assert not found.reliable and "not reliable (no 95% interval)" in found.text


@pytest.mark.parametrize("runs, said", [
    ({"jax": 3, "torch": 0}, "no throughput from PyTorch"),
    ({"jax": 0, "torch": 0}, "no throughput from JAX or PyTorch"),
    ({"jax": 3, "torch": 3}, "no throughput to compare"),
])
def test_a_row_without_a_speed_up_says_which_side_gave_no_throughput(runs, said):
    found = verdict(row(speedup=np.nan, half_width=None), runs, nodes=1)
    assert found.text == f"Per-sample gradients (DP-SGD) (use case 3), digits mlp batch 32 fp32 on CPU X: {said}"
    assert found.reliable is False and (found.device_model, found.use_case) == ("CPU X", 3)


@pytest.mark.parametrize("values", [{}, {"half_width": 0.2}, {"comparable": "precision census differs"}],
                         ids=["reliable", "not reliable", "not comparable"])
def test_every_verdict_names_its_device_model_and_use_case(values):
    found = verdict(row(**values), ENOUGH, nodes=1)
    assert (found.device_model, found.use_case) == ("CPU X", 3)


def test_every_reason_is_said_and_a_setting_that_tells_the_row_apart_is_named():
    found = verdict(row(half_width=0.2, spread_too_wide="JAX steps 12%", differs_in="torch.compile"), ENOUGH, nodes=1)
    assert "digits mlp batch 32 fp32, torch.compile on CPU X" in found.text
    assert "not reliable (the interval reaches 20.0% from the speed-up, more than 10%; spread JAX steps 12%)" in found.text


def test_the_interval_is_measured_against_the_speed_up_on_its_lower_side_too():
    found = verdict(row(speedup=2.0, speedup_ci_low=1.5, speedup_ci_high=2.02), ENOUGH, nodes=1)
    assert "the interval reaches 25.0% from the speed-up" in found.text


def test_a_tie_is_said_as_jax_and_one_paired_trial_in_the_singular():
    assert "JAX 1.00x faster" in verdict(row(speedup=1.0), ENOUGH, nodes=1).text
    assert "1 paired trial on 1 node" in verdict(row(paired=True), {"jax": 1, "torch": 1}, nodes=1).text
    assert "2 paired trials on 1 node" in verdict(row(paired=True), {"jax": 2, "torch": 2}, nodes=1).text


def test_one_throttled_run_is_enough_to_distrust_the_row():
    found = verdict(row(torch_throttled_runs=1.0), ENOUGH, nodes=1)
    assert not found.reliable and "PyTorch's GPU was throttled in 1 of 3 runs" in found.text


def test_the_verdicts_of_merged_rows_count_each_rows_runs_and_nodes(tmp_path):
    """verdicts() and verdict_lines() in this process (collect's test runs them in a command-line child): a cell of
    three runs a side on two nodes, and one PyTorch never ran."""
    from bench_contract.results import ResultRows
    from orchestrator.results.collect import merge
    from orchestrator.results.verdict import verdict_lines, verdicts
    from orchestrator.results.views import summary_frame, use_case_frame

    for k, (node, jax) in enumerate([("n1", 2000.0), ("n2", 2010.0), ("n1", 1990.0)]):
        write_runs(tmp_path, f"c{k}", node, {"jax": jax, "torch": 1000.0 + k})
    alone = ResultRows(result_context(framework="jax", benchmark="digits", use_case=1, model="mlp", batch_size=64,
                                      precision="fp32", device_kind="cpu", device_model="CPU X", campaign="c0",
                                      cell_id="jax-alone", slurm_nodelist="n1"))
    alone.add("throughput", 3000.0, "samples/s")
    alone.write(tmp_path / "c0" / "rows" / "jax" / "jax-alone.parquet")
    merge(tmp_path, tmp_path / "merged.parquet")
    summary = summary_frame(tmp_path / "merged.parquet")
    found = verdicts(use_case_frame(summary), summary)
    assert [(v.device_model, v.use_case, v.reliable) for v in found] == [("CPU X", 1, True), ("CPU X", 1, False)]
    assert found[0].text.endswith("], 3 runs each on 2 nodes: reliable")
    assert found[1].text.endswith("batch 64 fp32 on CPU X: no throughput from PyTorch")
    lines = verdict_lines(found)
    assert lines[0].startswith("Verdicts (1 of 2 reliable; ") and lines[0].endswith("the rule: docs/comparisons-and-report.md):")
    assert lines[1:] == [f"  {v.text}" for v in found]
    assert verdict_lines([]) == []


@pytest.mark.parametrize("half_width, reliable", [(MAX_INTERVAL * 0.99, True), (MAX_INTERVAL * 1.01, False)])
def test_an_interval_wider_than_the_maximum_is_not_reliable(half_width, reliable):
    found = verdict(row(half_width=half_width), ENOUGH, nodes=1)
    assert found.reliable is reliable
    assert ("the interval reaches 10.1% from the speed-up, more than 10%" in found.text) is not reliable


def test_the_interval_is_judged_on_its_wider_side():
    lopsided = row(speedup_ci_low=1.19, speedup_ci_high=1.20 * (1 + MAX_INTERVAL * 1.5))
    assert not verdict(lopsided, ENOUGH, nodes=1).reliable


@pytest.mark.parametrize("torch_p50, reliable", [(0.165, True), (0.163, False)])
def test_a_row_whose_throughput_and_median_step_disagree_on_the_faster_is_not_reliable(torch_p50, reliable):
    """digits inference printed "JAX 10.99x faster" by throughput while PyTorch's median step was shorter (0.131
    against 0.164 ms): a few slow steps decided the headline."""
    found = verdict(row(speedup=10.99, jax_step_time_p50=0.164, torch_step_time_p50=torch_p50), ENOUGH, nodes=1)
    assert found.reliable is reliable
    assert ("the throughput and the median step disagree on the faster: PyTorch's median step took 0.163 ms against "
            "JAX's 0.164 ms, so a few slow steps decide the speed-up" in found.text) is not reliable
    slower_by_median = verdict(row(speedup=0.5, jax_step_time_p50=0.1, torch_step_time_p50=0.2), ENOUGH, nodes=1)
    assert "JAX's median step took 0.1 ms against PyTorch's 0.2 ms" in slower_by_median.text


@pytest.mark.parametrize("spread, reliable", [("", True), ("JAX steps 12%", False)])
def test_a_spread_too_wide_is_not_reliable(spread, reliable):
    found = verdict(row(spread_too_wide=spread), ENOUGH, nodes=1)
    assert found.reliable is reliable
    assert ("spread JAX steps 12%" in found.text) is not reliable


@pytest.mark.parametrize("implausible, reliable", [("", True), ("PyTorch's step at batch 128 ...", False)])
def test_an_implausible_row_is_not_reliable(implausible, reliable):
    assert verdict(row(implausible=implausible), ENOUGH, nodes=1).reliable is reliable


def test_an_unreliable_row_says_why_and_what_to_rerun():
    found = verdict(row(half_width=None, runs_jax_torch="1/1"), {"jax": 1, "torch": 1}, nodes=1)
    assert found.text.endswith("JAX 1.20x faster, 1 run each on 1 node: not reliable (fewer than 3 runs a side); "
                               "rerun with `--trials auto --target-interval 10%` on an idle node")


@pytest.mark.parametrize("window, advised", [(MIN_TIMED_WINDOW_S * 0.99, True), (MIN_TIMED_WINDOW_S, False)])
def test_spread_numbers_from_runs_timed_too_briefly_are_told_to_time_longer(window, advised):
    # More trials do not narrow a spread that comes from windows too short to average the host's moments.
    found = verdict(row(spread_too_wide="JAX trials 14%", jax_timed_duration=window, torch_timed_duration=4.3,
                        use_case=1), ENOUGH, nodes=1)
    advice = f", each run timing at least 1 s (JAX's timed {window:.2g} s: more --epochs)"
    assert found.text.endswith(advice) is advised
    assert "PyTorch's timed" not in found.text


def test_the_advice_to_time_longer_names_inference_s_own_option_and_needs_a_spread():
    short = {"jax_timed_duration": 0.02, "torch_timed_duration": 0.03, "use_case": 5}
    spread = verdict(row(spread_too_wide="PyTorch steps 20%", **short), ENOUGH, nodes=1)
    assert spread.text.endswith("on an idle node, each run timing at least 1 s (JAX's timed 0.02 s, PyTorch's timed "
                                "0.03 s: a longer --min-duration)")
    # Windows this short with numbers that agree are no reason to distrust them; a window not recorded (NaN) no
    # reason to advise.
    assert verdict(row(**short), ENOUGH, nodes=1).reliable
    unrecorded = verdict(row(spread_too_wide="JAX trials 14%", jax_timed_duration=np.nan), ENOUGH, nodes=1)
    assert unrecorded.text.endswith("on an idle node")


def test_a_row_that_is_not_comparable_gets_no_speed_up_in_its_verdict():
    found = verdict(row(comparable="precision census differs"), ENOUGH, nodes=1)
    assert not found.reliable and "x faster" not in found.text
    assert found.text.endswith("not comparable (precision census differs); no speed-up is given")


def test_paired_trials_are_counted_as_pairs():
    found = verdict(row(runs_jax_torch="6/6 paired", paired=True), {"jax": 6, "torch": 6}, nodes=3)
    assert "6 paired trials on 3 nodes: reliable" in found.text


def test_one_run_a_side_says_why_there_is_no_interval():
    assert format_speedup(row(half_width=None, runs_jax_torch="1/1")) == "1.20x [n/a (1 run)]"
    assert format_speedup(row(half_width=None, runs_jax_torch="1/3")) == "1.20x [n/a (runs 1/3)]"


def series(framework_steps: dict[int, float], framework_throughputs: dict[int, float] | None = None) -> pd.DataFrame:
    """One comparison series (a cell key but the batch), PyTorch's step times and throughputs per batch size;
    JAX's step takes time in proportion to the batch."""
    rows = []
    for batch, step in framework_steps.items():
        rate = (framework_throughputs or {}).get(batch, batch / step * 1000)
        rows.append({"device_kind": "cpu", "device_model": "CPU X", "benchmark": "digits", "use_case": 5,
                     "model": "mlp", "precision": "fp32", "settings": "", "bound_cpus": "", "intra_op_threads": "",
                     "batch_size": batch, "torch_step_time_p50": step, "torch_throughput": rate,
                     "jax_step_time_p50": batch / 8, "jax_throughput": 8000.0})  # JAX's: plausible
    return pd.DataFrame(rows)


@pytest.mark.parametrize("faster, flagged", [(1.9, False), (2.1, True)])
def test_a_larger_batch_more_than_twice_as_fast_per_step_is_implausible(faster, flagged):
    notes = implausible_notes(series({8: 32.6, 128: 32.6 / faster}))
    assert bool(notes[0]) is flagged and notes[0] == notes[1]
    if flagged:
        assert notes[0] == (f"PyTorch's step at batch 128 ({32.6 / faster:.3g} ms) is {faster:.1f}x faster than at "
                            "batch 8 (32.6 ms)")


@pytest.mark.parametrize("fall, flagged", [(9.5, False), (10.5, True)])
def test_throughput_falling_tenfold_between_two_batch_sizes_is_implausible(fall, flagged):
    # Steps that take longer at the larger batch, as they should; only the throughput falls.
    notes = implausible_notes(series({8: 1.0, 16: 2.0}, {8: 8000.0, 16: 8000.0 / fall}))
    assert bool(notes[1]) is flagged
    if flagged:
        assert "PyTorch's throughput falls 10x from batch 8 (8,000 samples/s) to batch 16 (762)" in notes[1]


def test_rows_of_other_series_are_never_compared():
    frame = pd.concat([series({8: 32.6}), series({128: 5.0}).assign(model="cnn")], ignore_index=True)
    assert implausible_notes(frame) == ["", ""]


def write_runs(root, campaign, node, throughputs, timed_s=2.0):
    """One run of each framework of a digits use-case-1 cell in `campaign`, on `node`, timing `timed_s` of steps."""
    from bench_contract.results import ResultRows

    for framework, throughput in throughputs.items():
        ctx = result_context(framework=framework, benchmark="digits", use_case=1, model="mlp", batch_size=32,
                             precision="fp32", device_kind="cpu", device_model="CPU X", campaign=campaign,
                             cell_id=f"{framework}-cell", slurm_nodelist=node)
        rows = ResultRows(ctx)
        rows.add("throughput", throughput, "samples/s")
        rows.add("step_time_cv", 0.01, "")
        rows.add("timed_duration", timed_s, "s")
        rows.write(root / campaign / "rows" / framework / f"{framework}-cell.parquet")


def test_collect_and_the_report_open_on_the_verdicts(tmp_path):
    # Three runs a side on two nodes, JAX 2x faster within 1%: reliable.
    for k, (node, jax) in enumerate([("n1", 2000.0), ("n2", 2010.0), ("n1", 1990.0)]):
        write_runs(tmp_path, f"c{k}", node, {"jax": jax, "torch": 1000.0 + k})
    collected = run_cli("collect", "--results-dir", str(tmp_path))
    assert collected.returncode == 0, collected.stderr
    lines = collected.stdout.splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith("Verdicts"))
    assert lines[heading] == ("Verdicts (1 of 1 reliable; each speed-up a ratio of throughput, samples over the mean "
                              "step time; the rule: docs/comparisons-and-report.md):")
    assert lines[heading + 1].startswith(
        "  Training (use case 1), digits mlp batch 32 fp32 on CPU X: JAX 2.00x faster [")
    assert lines[heading + 1].endswith("], 3 runs each on 2 nodes: reliable")
    assert heading < next(i for i, line in enumerate(lines) if line.startswith("Training on CPU X"))
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert markdown.index("## Verdicts (1 of 1 reliable") < markdown.index("## Training on CPU X")
    page = (tmp_path / "report" / "report.html").read_text()
    assert page.index("<h2>Verdicts</h2>") < page.index("<h2>JAX against PyTorch, a table per use case</h2>")
    assert '<li class="reliable">Training (use case 1), digits mlp batch 32 fp32 on CPU X: JAX 2.00x faster' in page


@pytest.mark.parametrize("half_width, said", [(0.05, "within"), (0.12, "short of")])
def test_a_row_of_trials_auto_says_whether_it_reached_its_target_and_how_to_go_further(half_width, said):
    runs = {"jax": 20, "torch": 20}
    found = verdict(row(half_width=half_width, runs_jax_torch="20/20 paired", paired=True, target_interval=0.08), runs, nodes=1)
    assert f"20 paired trials on 1 node (--trials auto, {said} its 8% target)" in found.text
    if said == "short of":
        assert found.text.endswith("rerun with `--trials auto --target-interval 8% --max-trials 40` on an idle node")


def test_collect_advises_longer_runs_where_brief_ones_spread(tmp_path):
    # The throughputs of three runs a side spread by 20% (JAX) between runs that each timed 0.02 s of steps.
    for k, (jax, torch) in enumerate([(1600.0, 1000.0), (2000.0, 1010.0), (2400.0, 990.0)]):
        write_runs(tmp_path, f"c{k}", "n1", {"jax": jax, "torch": torch}, timed_s=0.02)
    collected = run_cli("collect", "--results-dir", str(tmp_path))
    assert collected.returncode == 0, collected.stderr
    (line,) = [line for line in collected.stdout.splitlines() if line.startswith("  Training (use case 1)")]
    assert "spread JAX trials 20%" in line
    assert line.endswith("on an idle node, each run timing at least 1 s (JAX's timed 0.02 s, PyTorch's timed 0.02 s: "
                         "more --epochs)")


def paired_runs(ratios: list[float], order_shift: float = 1.0) -> pd.DataFrame:
    """Summary rows of paired trials of one cell: trial t's pair ran in pair_order(t), PyTorch at 1000 samples/s and
    JAX at ratios[t] times it, times order_shift in the pairs run JAX first."""
    from bench_contract.spec import pair_order

    data = []
    for trial, ratio in enumerate(ratios):
        order = pair_order(trial)
        shift = order_shift if order[0] == "jax" else 1.0
        for framework, value in (("jax", 1000.0 * ratio * shift), ("torch", 1000.0)):
            base = dict(device_kind="cpu", device_model="CPU X", benchmark="digits", use_case=1, model="mlp",
                        batch_size=32, precision="fp32", model_variant="full", framework=framework, campaign="camp",
                        cell_id=f"{framework}-c", trial=trial, pair_order=",".join(order), unit="", epoch=np.nan,
                        step=np.nan, settings="{}", slurm_nodelist="n1", hostname="n1")
            data += [{**base, "metric": "throughput", "value": value}, {**base, "metric": "step_time_cv", "value": 0.01}]
    return pd.DataFrame(data)


# Ratios spread by about 1% around 2, alternately a little above and below within each order.
SPREAD = [2.00, 2.02, 1.98, 2.01, 2.03, 1.99, 2.00, 1.97]


@pytest.mark.parametrize("shift, found", [(1.0, False), (1.05, True)])
def test_paired_runs_whose_ratio_depends_on_which_framework_ran_first_are_not_reliable(shift, found):
    """Every pair once ran JAX first, so a position effect counted as JAX's. The order now alternates, and from
    six pairs on a Welch's t test of the pairs run JAX first against those run PyTorch first calls out an effect."""
    from orchestrator.results.views import use_case_frame
    from orchestrator.results.verdict import verdicts

    df = paired_runs(SPREAD, order_shift=shift)
    (judged,) = verdicts(use_case_frame(df), df)
    assert ("an order effect: the pairs run JAX first gave" in judged.text) is found, judged.text
    if found:
        assert not judged.reliable and "those run PyTorch first 2x" in judged.text


def test_the_order_effect_needs_six_pairs_and_both_orders():
    from orchestrator.results.compare import run_values
    from orchestrator.results.intervals import ORDER_EFFECT_MIN_PAIRS, order_effect

    def effect(ratios, shift):
        series = run_values(paired_runs(ratios, shift), "throughput")
        framework = series.index.get_level_values("framework")
        return order_effect(series[framework == "jax"], series[framework == "torch"])

    assert ORDER_EFFECT_MIN_PAIRS == 6
    assert effect(SPREAD[:5], 1.5) is None  # five pairs: not tested
    strong = effect(SPREAD[:6], 1.5)
    assert strong.found and strong.jax_first == pytest.approx(1.5 * np.exp(np.log([2.00, 1.98, 2.03]).mean()))


def test_the_order_effect_is_welchs_t_test_of_the_two_orders():
    """The statistic, its degrees of freedom and its critical value are Welch's, as scipy computes them, on groups of
    unequal size and spread (two campaigns of three pairs: four run JAX first, two PyTorch first, the latter spread
    so widely that Welch-Satterthwaite gives between 1 and 2 degrees of freedom); runs that do not spread at all are
    not tested."""
    from scipy import stats

    from orchestrator.results.compare import run_values
    from orchestrator.results.intervals import order_effect

    def effect(first: list[float], second: list[float]):
        df = pd.concat([paired_runs(first), paired_runs(second).assign(campaign="camp2")], ignore_index=True)
        series = run_values(df, "throughput")
        framework = series.index.get_level_values("framework")
        return order_effect(series[framework == "jax"], series[framework == "torch"])

    first, second = [2.00, 2.40, 1.98], [2.05, 1.70, 2.01]  # trials 0 and 2 ran JAX first, trial 1 PyTorch first
    jax_first, torch_first = np.log([2.00, 1.98, 2.05, 2.01]), np.log([2.40, 1.70])
    welch = stats.ttest_ind(jax_first, torch_first, equal_var=False)
    assert 1 <= welch.df < 2
    found = effect(first, second)
    assert found.t == pytest.approx(welch.statistic, rel=1e-9)
    assert found.critical == pytest.approx(stats.t.ppf(0.975, np.floor(welch.df)), rel=1e-9)
    assert (found.jax_first, found.torch_first) == pytest.approx((np.exp(jax_first.mean()), np.exp(torch_first.mean())))
    assert effect([2.0] * 3, [2.0] * 3) is None  # no spread either way round: nothing to test
    # Groups of four and three of like spread: more degrees of freedom, each group's weight in them its own.
    seven = [2.00, 2.10, 1.96, 2.02, 2.03, 1.97, 2.05]
    series = run_values(paired_runs(seven), "throughput")
    framework = series.index.get_level_values("framework")
    found = order_effect(series[framework == "jax"], series[framework == "torch"])
    welch = stats.ttest_ind(np.log(seven[0::2]), np.log(seven[1::2]), equal_var=False)
    assert welch.df >= 3 and found.t == pytest.approx(welch.statistic, rel=1e-9)
    assert found.critical == pytest.approx(stats.t.ppf(0.975, np.floor(welch.df)), rel=1e-9)
