"""The JAX/PyTorch comparison's statistics against known inputs: the speed-up and its t interval on the log scale,
trials as runs, and the flag on a cell whose spread is too wide."""

import warnings

import numpy as np
import pandas as pd
import pytest

from bench_contract.student_t import t_quantile
from orchestrator.results.compare import comparison_frame
from orchestrator.results.intervals import paired_speedup_interval, speedup_interval
from orchestrator.results.views import use_case_frame, view_tables


@pytest.fixture
def quiet():
    """numpy's warnings as errors: no spread and a single run are expected, not a division by zero to warn of."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_no_spread_gives_the_exact_ratio(quiet):
    assert speedup_interval(np.array([200.0, 200.0, 200.0]), np.array([100.0, 100.0])) == (2.0, 2.0, 2.0)
    assert paired_speedup_interval(np.array([200.0, 300.0]), np.array([100.0, 150.0])) == (2.0, 2.0, 2.0)


def test_fewer_than_two_runs_on_a_side_gives_the_ratio_without_an_interval(quiet):
    speedup, low, high = speedup_interval(np.array([200.0]), np.array([100.0, 110.0]))
    assert speedup == pytest.approx(2.0 / np.sqrt(1.1)) and np.isnan(low) and np.isnan(high)
    speedup, low, high = paired_speedup_interval(np.array([200.0]), np.array([100.0]))
    assert speedup == 2.0 and np.isnan(low) and np.isnan(high)
    assert all(np.isnan(speedup_interval(np.array([]), np.array([100.0, 101.0]))))
    assert all(np.isnan(speedup_interval(np.array([100.0, 101.0]), np.array([]))))
    assert all(np.isnan(paired_speedup_interval(np.array([]), np.array([]))))
    assert all(np.isnan(paired_speedup_interval(np.array([200.0, 201.0]), np.array([100.0]))))  # no pairs


def test_campaigns_along_the_first_axis_get_each_campaigns_own_interval(quiet):
    """The interval functions take an array of campaigns (runs along the last axis), as the coverage test does:
    each row's interval is the one its runs alone give; with one run each, each row's is NaN."""
    rng = np.random.default_rng(3)
    jax, torch = 2000.0 * np.exp(rng.normal(0, 0.1, (4, 5))), 1000.0 * np.exp(rng.normal(0, 0.1, (4, 5)))
    for interval in (speedup_interval, paired_speedup_interval):
        together = np.array(interval(jax, torch))
        assert together.shape == (3, 4)
        assert together.T == pytest.approx(np.array([interval(a, b) for a, b in zip(jax, torch)]), rel=1e-12)
        speedup, low, high = interval(jax[:, :1], torch[:, :1])
        assert speedup.shape == low.shape == high.shape == (4,) and np.isnan(low).all() and np.isnan(high).all()


def series_of(runs: list[tuple[str, int, str]]) -> pd.Series:
    """One side's runs as compare's _run_series indexes them (campaign, trial, trial_rule), each 100 samples/s."""
    index = pd.MultiIndex.from_tuples(runs, names=["campaign", "trial", "trial_rule"])
    return pd.Series(100.0, index=index)


RULE = "stein first=5 target=0.05"


@pytest.mark.parametrize("jax, torch, ruled", [
    ([("a", t, RULE) for t in range(5)], [("a", t, RULE) for t in range(5)], True),  # its first stage, no more
    ([("a", t, RULE) for t in range(4)], [("a", t, RULE) for t in range(4)], False),  # the first stage unfinished
    ([("a", t, RULE) for t in range(5)] + [("b", 0, RULE)], [("a", t, RULE) for t in range(5)], False),  # 2 campaigns
    ([("a", t, RULE) for t in range(5)] + [("a", 5, "")], [("a", t, RULE) for t in range(6)], False),  # 2 labels
    ([("a", t, "") for t in range(5)], [("a", t, "") for t in range(5)], False),  # fixed trials
])
def test_steins_interval_is_for_the_pairs_of_one_campaign_under_one_rule_after_its_first_stage(jax, torch, ruled):
    from bench_contract.sequential import Rule
    from orchestrator.results.intervals import sequential_rule

    assert sequential_rule(series_of(jax), series_of(torch)) == (Rule(5, 0.05) if ruled else None)


def test_the_paired_interval_is_students_t_of_the_pairs_mean_log_ratio():
    ratios = np.array([1.9, 2.0, 2.2, 2.1])
    speedup, low, high = paired_speedup_interval(100.0 * ratios, np.full(4, 100.0))
    logs = np.log(ratios)
    half = t_quantile(0.95, 3) * logs.std(ddof=1) / 2  # sqrt(4 pairs)
    assert (np.log(speedup), np.log(low), np.log(high)) == pytest.approx(
        (logs.mean(), logs.mean() - half, logs.mean() + half), rel=1e-12)


def test_the_speed_up_is_the_intervals_centre_the_ratio_of_geometric_means():
    """JAX's runs 100 and 400 (geometric mean 200, arithmetic 250) against PyTorch's 100 and 100: the speed-up is 2.0,
    the centre of its interval on the log scale, not the ratio of means 2.5, which the interval is not about."""
    speedup, low, high = speedup_interval(np.array([100.0, 400.0]), np.array([100.0, 100.0]))
    assert speedup == pytest.approx(2.0) and np.sqrt(low * high) == pytest.approx(speedup)
    # Pairs (2.0 and 8.0): the geometric mean of the pairs' ratios, 4.0.
    speedup, low, high = paired_speedup_interval(np.array([200.0, 800.0]), np.array([100.0, 100.0]))
    assert speedup == pytest.approx(4.0) and np.sqrt(low * high) == pytest.approx(speedup)


def test_the_interval_is_welchs_t_on_the_logs_and_matches_the_known_sampling_spread_of_the_ratio():
    """Runs drawn with means 200 and 100 and standard deviations 10 and 5: the ratio of the means is 2 and,
    by the delta method, its standard error is 2 * sqrt((10/200)^2 + (5/100)^2) / sqrt(n)."""
    rng = np.random.default_rng(42)
    n = 40
    jax, torch = rng.normal(200, 10, n), rng.normal(100, 5, n)
    speedup, low, high = speedup_interval(jax, torch)
    assert low < speedup < high and low < 2.0 < high
    se = 2 * np.sqrt((10 / 200) ** 2 + (5 / 100) ** 2) / np.sqrt(n)
    assert high - low == pytest.approx(2 * 1.96 * se, rel=0.25)
    # Exactly Welch's: the logs' standard error and the Welch-Satterthwaite degrees of freedom, rounded down.
    va, vb = np.log(jax).var(ddof=1) / n, np.log(torch).var(ddof=1) / n
    df = np.floor((va + vb) ** 2 / (va ** 2 / (n - 1) + vb ** 2 / (n - 1)))
    half = t_quantile(0.95, int(df)) * np.sqrt(va + vb)
    assert (np.log(low), np.log(high)) == pytest.approx((np.log(speedup) - half, np.log(speedup) + half), rel=1e-12)


def rows(framework, trial, throughput, cv, cell="c", campaign="camp"):
    base = dict(device_model="CPU X", benchmark="digits", use_case=1, model="mlp", batch_size=32, precision="fp32",
                model_variant="full", framework=framework, campaign=campaign, cell_id=f"{framework}-{cell}",
                trial=trial, unit="", epoch=np.nan, step=np.nan)
    return [{**base, "metric": "throughput", "value": throughput}, {**base, "metric": "step_time_cv", "value": cv}]


def test_trials_of_one_cell_in_one_campaign_are_separate_runs_of_the_interval():
    data = []
    for trial, (jax, torch) in enumerate([(2000, 1000), (2100, 1050), (1900, 990), (2050, 1010)]):
        data += rows("jax", trial, jax, 0.02) + rows("torch", trial, torch, 0.03)
    frame = comparison_frame(pd.DataFrame(data))
    row = frame.iloc[0]
    assert row["runs_jax_torch"] == "4/4"
    # The ratio of the geometric means, the centre of the interval on the log scale.
    assert row["speedup"] == pytest.approx(np.exp(np.log([2000, 2100, 1900, 2050]).mean()
                                                  - np.log([1000, 1050, 990, 1010]).mean()), rel=1e-12)
    assert row["speedup_ci_low"] < row["speedup"] < row["speedup_ci_high"]
    assert row["spread_too_wide"] == ""
    (table,) = view_tables(use_case_frame(pd.DataFrame(data)))
    assert "spread" not in table.headers and table.notes == []


def test_a_cell_too_spread_to_trust_is_flagged_with_the_reason():
    data = rows("jax", 0, 2000, 0.25) + rows("jax", 1, 2010, 0.30)  # within a run: steps vary by 25 to 30%
    data += rows("torch", 0, 1000, 0.02) + rows("torch", 1, 1500, 0.02)  # between trials: 1000 vs 1500
    frame = comparison_frame(pd.DataFrame(data))
    assert frame.iloc[0]["spread_too_wide"] == "JAX steps 28%; PyTorch trials 28%"
    (table,) = view_tables(use_case_frame(pd.DataFrame(data)))
    assert [row[table.headers.index("spread")] for row in table.rows] == ["wide", ""]
    assert table.notes == ["spread too wide (CV > 10%), digits mlp batch 32: JAX steps 28%; PyTorch trials 28%"]


def test_paired_trials_are_taken_as_pairs_so_drift_shared_by_a_pair_cancels():
    """The node drifts: the third trial ran at half speed for both frameworks alike. JAX is always exactly
    twice as fast as PyTorch within a pair, so the paired interval is the ratio itself, while taking the
    two sides independently counts the slow trial as spread and gives a wide interval."""
    torch = [1000.0, 1010.0, 500.0, 990.0]
    data = []
    for trial, t in enumerate(torch):
        for framework, value in (("jax", 2 * t), ("torch", t)):
            data += [{**row, "pair_order": "jax,torch"} for row in rows(framework, trial, value, 0.02)]
    row = comparison_frame(pd.DataFrame(data)).iloc[0]
    assert row["runs_jax_torch"] == "4/4 paired"
    assert row["speedup_ci_low"] == pytest.approx(2.0) and row["speedup_ci_high"] == pytest.approx(2.0)
    unpaired = comparison_frame(pd.DataFrame([{**r, "pair_order": ""} for r in data])).iloc[0]
    assert unpaired["runs_jax_torch"] == "4/4"
    assert unpaired["speedup_ci_high"] - unpaired["speedup_ci_low"] > 0.5


def test_runs_are_paired_only_when_every_run_of_both_sides_has_its_partner():
    data = []
    for trial in range(3):
        data += [{**r, "pair_order": "jax,torch"} for r in rows("jax", trial, 2000.0 + trial, 0.02)]
    for trial in range(2):  # PyTorch's third trial is missing (failed): no pairs, the independent interval
        data += [{**r, "pair_order": "jax,torch"} for r in rows("torch", trial, 1000.0 + trial, 0.02)]
    row = comparison_frame(pd.DataFrame(data)).iloc[0]
    assert row["runs_jax_torch"] == "3/2" and row["speedup_ci_low"] < row["speedup_ci_high"]


@pytest.mark.parametrize("step_cvs, note", [
    ([0.05, 0.15, 0.15], "steps 15%"),  # the median run's steps spread too wide, though the quietest's did not
    ([0.05, 0.05, 0.15], ""),  # one noisy run of three does not make the cell's steps spread
])
def test_the_spread_within_runs_is_the_median_runs(step_cvs, note):
    from orchestrator.results.compare import spread_note

    assert spread_note(np.array(step_cvs), np.array([100.0, 100.0, 100.0])) == note


@pytest.mark.parametrize("metric, value, shown", [
    ("peak_host_rss", 3 * 2**20, "3"),  # bytes shown in MiB
    ("peak_device_memory_allocated", 1536 * 2**20, "1,536"),
    ("throughput", 1234.6, "1,235"),
    ("throughput", 12.4, "12"),
    ("test_accuracy", 0.98765, "0.988"),
    ("test_accuracy", 0.5, "0.500"),  # three decimals always, not three significant digits
    ("compute_bound", 1.0, "compute"),
    ("compute_bound", 0.0, "memory"),
    ("compute_bound", 0.5, "mixed"),  # the median of runs that disagree
    ("mfu", 0.01234, "0.0123"),
    ("step_time_p50", 99.94, "99.9"),
    ("step_time_p50", 100.4, "100"),
    ("compile_time", 1234.0, "1,234"),
    ("mfu", float("nan"), "n/a"),
    ("mfu", None, "n/a"),
])
def test_each_table_value_is_formatted_by_its_kind(metric, value, shown):
    from orchestrator.results.compare import format_value

    assert format_value(metric, value) == shown


def test_a_row_is_comparable_only_when_its_certificate_says_yes():
    from orchestrator.results.compare import comparable

    assert comparable({"comparable": "yes"})
    assert not comparable({"comparable": "PyTorch recompiled in its timed steps"}) and not comparable({})


@pytest.mark.parametrize("settings, parts", [
    ('{"b": 1, "dp_engine": "opacus", "a": 2}', ('{"a": 2, "b": 1}', "opacus")),  # keys sorted: one text per set
    ('{"b": 1, "a": 2}', ('{"a": 2, "b": 1}', "")),
    ("", ("{}", "")),
    ("not json", ("not json", "")),  # a table from before settings were JSON keeps its text
])
def test_a_rows_settings_without_its_dp_engine(settings, parts):
    from orchestrator.results.compare import without_engine

    assert without_engine(settings) == parts


def test_runs_on_several_nodes_are_counted_by_node():
    """Ten runs on a slow node and ten on a fast one are two nodes' worth of evidence. Twenty independent
    runs give an interval of about +-4% around 1.1; the two nodes' means, with one degree of freedom, give one that
    reaches from one node's ratio (1.0) to the other's (1.2) and beyond."""
    rng = np.random.default_rng(0)
    jax = np.concatenate([rng.normal(100, 1, 10), rng.normal(120, 1, 10)])
    torch = rng.normal(100, 1, 20)
    nodes = np.array(["a"] * 10 + ["b"] * 10)
    _, *plain = speedup_interval(jax, torch)
    _, low, high = speedup_interval(jax, torch, numerator_nodes=nodes, denominator_nodes=np.array(["c"] * 20))
    assert plain[1] - plain[0] < 0.1 and low < 1.0 and high > 1.2
    # On one node the nodes change nothing.
    assert speedup_interval(jax, torch, numerator_nodes=np.array(["a"] * 20))[1:] == tuple(plain)
    # Pairs likewise: counted by node where they ran on several.
    _, paired_low, paired_high = paired_speedup_interval(jax, torch, nodes=nodes)
    assert paired_low < 1.0 and paired_high > 1.2
    _, paired_low, paired_high = paired_speedup_interval(jax, torch)
    assert paired_high - paired_low < 0.1


def test_the_comparison_counts_the_nodes_its_runs_ran_on():
    def runs(nodes):
        frame = []
        for trial, node in enumerate(nodes):
            jax = 100.0 if node == "n1" else 120.0
            for framework, throughput in (("jax", jax + trial % 3), ("torch", 100.0 + trial % 3)):
                frame += [{**row, "slurm_nodelist": node if framework == "jax" else "n9"}
                          for row in rows(framework, trial, throughput, 0.01)]
        return comparison_frame(pd.DataFrame(frame)).iloc[0]

    one = runs(["n1"] * 10)
    two = runs(["n1"] * 5 + ["n2"] * 5)
    assert one["speedup_ci_high"] - one["speedup_ci_low"] < 0.05
    assert two["speedup_ci_low"] < 1.02 and two["speedup_ci_high"] > 1.18
