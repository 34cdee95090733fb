"""Baselines: a baseline from one campaign; a copy of that campaign whose result files the test rewrites
with slower steps is flagged as a regression, with the versions that changed; the unchanged copy is not flagged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import result_context

from orchestrator.errors import UsageError
from orchestrator.results import baseline
from orchestrator.results.collect import merge

THROUGHPUTS = {"jax": (1000.0, 1010.0, 990.0), "torch": (800.0, 805.0, 795.0)}


def write_campaign(root: Path, name: str, slower: float = 1.0, versions: dict | None = None,
             throughputs: dict = THROUGHPUTS, recompilations: int = 0, nodes: tuple[str, ...] = ("n1",)) -> None:
    """Three trials per framework of one cell, as the backends write them; `slower` stretches every step; trial t
    ran on nodes[t % len(nodes)]."""
    from bench_contract.results import ResultRows

    for framework, values in throughputs.items():
        for trial, throughput in enumerate(values):
            ctx = result_context(framework=framework, benchmark="digits", use_case=1, model="mlp", batch_size=32,
                                 precision="fp32", device_kind="cpu", device_model="CPU X", campaign=name,
                                 cell_id=f"{framework}-32-t{trial}", trial=trial,
                                 slurm_nodelist=nodes[trial % len(nodes)],
                                 framework_version=(versions or {}).get(framework, "1.0"),
                                 library_versions=json.dumps({"numpy": "2.4.6"}), xla_flags="not set")
            rows = ResultRows(ctx)
            rows.add("throughput", throughput / slower, "samples/s")
            rows.add("step_time_p50", 32 / throughput * 1000 * slower, "ms")
            rows.add("recompilations_timed", recompilations if framework == "torch" else 0, "compilations")
            rows.write(root / name / "rows" / framework / f"{ctx['cell_id']}.parquet")


@pytest.fixture
def results(tmp_path):
    write_campaign(tmp_path, "base")
    write_campaign(tmp_path, "same")
    write_campaign(tmp_path, "slow", slower=1.2, versions={"jax": "1.1"})
    merge(tmp_path, tmp_path / "merged.parquet")
    return tmp_path


def flags(verdicts) -> dict[str, str]:
    return {v.key["framework"]: v.flag for v in verdicts}


def test_a_slowed_campaign_is_flagged_and_the_unchanged_one_is_not(results):
    path, entries = baseline.save(results, results / "merged.parquet", "release-1", ("base",))
    assert path == results / "baselines" / "release-1.json" and entries == 2
    saved = baseline.load(results, "release-1")
    # Every version column is read, the library versions too: a regression names the one that changed.
    assert saved["entries"][0]["versions"] == {"framework": "1.0", "numpy": "2.4.6", "XLA_FLAGS": "not set"}
    for name, expected in (("same", {"jax": "within tolerance", "torch": "within tolerance"}),
                           ("slow", {"jax": "regression", "torch": "regression"})):
        current = baseline.summarize(baseline.read_rows(results / "merged.parquet", (name,)))
        verdicts = baseline.judge(saved, current, tolerance=0.05)
        assert flags(verdicts) == expected, name
    slow = {v.key["framework"]: v for v in verdicts}
    assert slow["jax"].change == pytest.approx(1 / 1.2 - 1)
    assert slow["jax"].changed_versions == ["framework 1.0 -> 1.1"]
    assert slow["torch"].changed_versions == []
    table = baseline.verdict_table(verdicts)
    assert "REGRESSION" in table and "framework 1.0 -> 1.1" in table and "-16.7%" in table


def test_a_change_inside_either_sides_noise_or_the_tolerance_is_not_flagged(tmp_path):
    write_campaign(tmp_path, "base")
    write_campaign(tmp_path, "noisy", throughputs={"jax": (700.0, 1300.0, 1000.0), "torch": (840.0, 845.0, 835.0)})
    merge(tmp_path, tmp_path / "merged.parquet")
    baseline.save(tmp_path, tmp_path / "merged.parquet", "b", ("base",))
    current = baseline.summarize(baseline.read_rows(tmp_path / "merged.parquet", ("noisy",)))
    verdicts = baseline.judge(baseline.load(tmp_path, "b"), current, tolerance=0.02)
    # JAX's median is the same but its runs spread widely: its change's interval straddles the tolerance, so the
    # runs cannot say (no flag); PyTorch is 5% faster, its whole interval above the tolerance
    assert flags(verdicts) == {"jax": "inconclusive", "torch": "improvement"}
    assert flags(baseline.judge(baseline.load(tmp_path, "b"), current, tolerance=0.10))["torch"] == "within tolerance"


def test_the_change_s_interval_decides_against_the_tolerance():
    """A regression only where the whole interval of the change lies below minus the tolerance."""
    assert baseline.flag_of(-0.20, (-0.25, -0.051), 0.05) == "regression"
    assert baseline.flag_of(-0.20, (-0.25, -0.049), 0.05) == "inconclusive"  # straddles the tolerance's edge
    assert baseline.flag_of(0.20, (0.051, 0.25), 0.05) == "improvement"
    assert baseline.flag_of(0.20, (0.049, 0.25), 0.05) == "inconclusive"
    assert baseline.flag_of(0.0, (-0.05, 0.05), 0.05) == "within tolerance"
    assert baseline.flag_of(0.0, (-0.06, 0.06), 0.05) == "inconclusive"
    # A single run on a side: no interval, so a change past the tolerance cannot be told from noise.
    assert baseline.flag_of(-0.2, None, 0.05) == "inconclusive"
    assert baseline.flag_of(-0.04, None, 0.05) == "within tolerance"


def test_a_noisy_unchanged_pair_is_not_flagged_and_a_real_ten_percent_slowdown_is():
    """Eight runs a side with 2% run-to-run noise (CV), fifty draws with fixed seeds: an unchanged campaign is never
    flagged, and the same noise 10% slower is a regression at a 5% tolerance in (nearly) every draw. An interval of
    the median's change from 8 runs a side spans about +-2.5 * 1.25 * 2% / sqrt(8) ~ +-2.2%, so -10% lies well past
    -5%; a draw whose medians fall apart by chance may straddle the edge, and is then inconclusive, never wrong."""
    false_flags = missed = 0
    for seed in range(50):
        rng = np.random.default_rng(seed)
        base, same, other = (list(1000 * (1 + 0.02 * rng.standard_normal(8))) for _ in range(3))
        slow = [0.9 * value for value in other]
        for runs, expected in ((same, False), (slow, True)):
            flag = baseline.flag_of(np.median(runs) / np.median(base) - 1, baseline.change_interval(base, runs), 0.05)
            assert flag in ("within tolerance", "inconclusive", "regression"), flag
            false_flags += flag == "regression" and not expected
            missed += flag != "regression" and expected
    assert false_flags == 0 and missed <= 1, (false_flags, missed)


def test_runs_on_one_odd_node_are_one_nodes_worth_of_evidence():
    """The change's interval resamples nodes first, as the speed-up's does. Seven unchanged runs on one
    node and one 20% slower on another: as eight independent runs the median barely moves (within tolerance); as
    two nodes, one of them 20% slower, the runs cannot say whether the cluster got slower (inconclusive)."""
    rng = np.random.default_rng(0)
    base = list(1000 * (1 + 0.005 * rng.standard_normal(8)))
    runs = [*(1000 * (1 + 0.005 * rng.standard_normal(7))), 800.0]
    change = np.median(runs) / np.median(base) - 1
    assert baseline.flag_of(change, baseline.change_interval(base, runs), 0.05) == "within tolerance"
    by_node = baseline.change_interval(base, runs, before_nodes=["a"] * 4 + ["b"] * 4,
                                       after_nodes=["a"] * 7 + ["b"])
    assert by_node[0] < -0.15 and baseline.flag_of(change, by_node, 0.05) == "inconclusive"


def test_a_baseline_keeps_each_runs_node_beside_its_value(tmp_path):
    write_campaign(tmp_path, "base", nodes=("n1", "n2"), throughputs={"jax": (1000.0, 900.0, 1010.0)})
    merge(tmp_path, tmp_path / "merged.parquet")
    baseline.save(tmp_path, tmp_path / "merged.parquet", "b")
    (entry,) = baseline.load(tmp_path, "b")["entries"]
    assert dict(zip(entry["values"], entry["nodes"])) == {900.0: "n2", 1000.0: "n1", 1010.0: "n1"}


def test_cells_only_on_one_side_are_named(results):
    baseline.save(results, results / "merged.parquet", "b", ("base",))
    saved = baseline.load(results, "b")
    saved["entries"] = saved["entries"][:1]
    current = baseline.summarize(baseline.read_rows(results / "merged.parquet", ("same",)))
    assert sorted(v.flag for v in baseline.judge(saved, current, 0.05)) == ["new", "within tolerance"]
    assert [v.flag for v in baseline.judge(baseline.load(results, "b"), current[:1], 0.05)].count("missing") == 1


def test_bad_names_tolerances_and_campaigns_are_one_sentence(results):
    with pytest.raises(UsageError, match="may hold only letters"):
        baseline.save(results, results / "merged.parquet", "../x")
    with pytest.raises(UsageError, match=r"no baseline 'nope' in .*save one with"):
        baseline.load(results, "nope")
    with pytest.raises(UsageError, match="no results of campaign ghost"):
        baseline.read_rows(results / "merged.parquet", ("ghost",))
    with pytest.raises(UsageError, match="is not a fraction or a percentage"):
        baseline.parse_tolerance("five")
    assert baseline.parse_tolerance("5%") == pytest.approx(0.05) == baseline.parse_tolerance("0.05")


def test_the_commands_save_and_compare_and_fail_only_when_asked(results):
    from helpers import run_cli

    proc = run_cli("baseline", "save", "release-1", "--results-dir", str(results), "--campaign", "base")
    assert proc.returncode == 0 and "2 cell and framework entries" in proc.stdout, proc.stderr
    same = run_cli("compare", "--baseline", "release-1", "--results-dir", str(results), "--campaign", "same",
                   "--fail-on-regression")
    assert same.returncode == 0 and "0 regression(s)" in same.stdout, same.stderr
    slow = run_cli("compare", "--baseline", "release-1", "--results-dir", str(results), "--fail-on-regression")
    assert slow.returncode == 1 and "REGRESSION" in slow.stdout and "2 regression(s)" in slow.stdout
    assert run_cli("compare", "--baseline", "release-1", "--results-dir", str(results)).returncode == 0
    bad = run_cli("compare", "--baseline", "release-1", "--results-dir", str(results), "--tolerance", "x")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --tolerance 'x'")


def test_a_campaign_whose_runs_are_not_comparable_is_shown_apart_with_its_reasons_not_judged(tmp_path):
    """A regression is read off runs that stand for the cell. Runs that recompiled in their timed steps,
    or pool two versions of a framework, are listed apart with the certificate's reasons."""
    write_campaign(tmp_path, "base")
    write_campaign(tmp_path, "recompiled", slower=1.5, recompilations=3)
    merge(tmp_path, tmp_path / "merged.parquet")
    baseline.save(tmp_path, tmp_path / "merged.parquet", "b", ("base",))
    judged = baseline.judge_merged(tmp_path, tmp_path / "merged.parquet", "b", "5%")
    assert flags(judged.verdicts) == {"jax": "regression", "torch": "not comparable"}
    torch = next(v for v in judged.verdicts if v.key["framework"] == "torch")
    assert torch.reasons == "PyTorch recompiled in its timed steps (up to 3 times in a run)"
    assert baseline.regressions(judged.verdicts) == [v for v in judged.verdicts if v.key["framework"] == "jax"]
    assert "1 not comparable (not judged)" in judged.summary
    assert "not comparable: PyTorch recompiled" in baseline.verdict_table(judged.verdicts)
