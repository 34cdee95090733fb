"""--trials auto: Stein's two-stage rule (bench_contract.sequential), the coverage it keeps, the paired job that
follows it, the trials it leaves out, and the comparison that prints its interval."""

import json
import math
import os
import subprocess

import numpy as np
import pytest
from helpers import driver_passthrough, fake_tools, read_manifest, result_context, run_cli, write_result
from test_trials_and_pairing import logged_dry_run

from bench_contract.results import ResultRows
from bench_contract.sequential import (
    FIRST_STAGE,
    T_FIRST_STAGE,
    Rule,
    decide,
    not_needed_path,
    parse_rule,
    stein_interval,
    trials_in_time,
    trials_needed,
)
from bench_contract.spec import pair_order

TRUE_SPEEDUP = 1.3


def test_the_rules_t_quantile_is_students_at_its_first_stages_degrees_of_freedom():
    from scipy import stats

    assert T_FIRST_STAGE == pytest.approx(stats.t.ppf(0.975, FIRST_STAGE - 1), rel=1e-12)


def test_the_rows_label_of_a_rule_reads_back():
    assert parse_rule(Rule(5, 0.1).label()) == Rule(5, 0.1)
    assert parse_rule("") is None and parse_rule("stein first=x target=0.1") is None
    assert parse_rule("stein first=3 target=0.1") is None  # not Stein's first stage: such rows get the t interval


def stein_trial(noise: np.ndarray, target: float, most: int) -> tuple[int, float, float, float]:
    """One simulated pair under Stein's rule: (trials, speed-up, low, high)."""
    log_ratios = list(math.log(TRUE_SPEEDUP) + noise)
    needed = trials_needed(log_ratios[:FIRST_STAGE], target, most)
    return needed, *stein_interval(log_ratios[:needed])


def sequential_trial(noise: np.ndarray, target: float, most: int) -> tuple[int, float, float, float]:
    """The purely sequential rule for comparison: stop at the first n whose t-interval is within the target."""
    from scipy import stats

    log_ratios = math.log(TRUE_SPEEDUP) + noise
    for n in range(FIRST_STAGE, most + 1):
        half = stats.t.ppf(0.975, n - 1) * log_ratios[:n].std(ddof=1) / math.sqrt(n)
        if half <= math.log1p(target) or n == most:
            center = log_ratios[:n].mean()
            return n, math.exp(center), math.exp(center - half), math.exp(center + half)
    raise AssertionError("unreachable")


def coverage(rule, sigma: float, target: float = 0.05, most: int = 20, reps: int = 4000) -> tuple[float, list]:
    """The share of simulated pairs whose interval covers the true speed-up, and every simulated outcome. The noise
    source: each trial's log speed-up is the truth plus normal noise of standard deviation sigma (the node's drift
    between a pair's two runs, and each run's own noise); a fixed seed, so the share is the same on every machine."""
    rng = np.random.default_rng(31)
    outcomes = [rule(rng.normal(0.0, sigma, most), target, most) for _ in range(reps)]
    covered = sum(low <= TRUE_SPEEDUP <= high for _, _, low, high in outcomes)
    return covered / reps, outcomes


@pytest.mark.parametrize("sigma", [0.01, 0.03, 0.05, 0.08, 0.15])
def test_steins_rule_keeps_its_coverage_whatever_the_noise(sigma):
    # Stein's interval covers with probability 95% exactly for normal noise; 4,000 pairs estimate it to a standard
    # error of sqrt(0.95 * 0.05 / 4000) = 0.0034, so 93% is six standard errors below: the rule passes
    # on any seed, and a rule that covers 90% (the purely sequential one, below) fails.
    share, outcomes = coverage(stein_trial, sigma)
    assert share >= 0.93
    # Every pair the rule stopped before the budget has an interval within the target.
    for trials, speedup, low, high in outcomes:
        if trials < 20:
            assert max(high / speedup - 1, 1 - low / speedup) <= 0.05 + 1e-12
    assert {trials for trials, *_ in outcomes} != {20}  # the rule did stop early, at every noise level here


def test_the_coverage_check_fails_a_purely_sequential_rule():
    # Stopping at the first narrow t-interval picks the trials whose spread happened to be small: at this noise it
    # covers about 92%, which the check above refuses.
    share, _ = coverage(sequential_trial, 0.08)
    assert share < 0.93


def write_trial_result(spec, throughput: float) -> None:
    rows = ResultRows(result_context(cell_id=spec.cell_id, framework=spec.framework, benchmark="digits", model="mlp"))
    rows.add("throughput", throughput, "samples/s")
    rows.write(spec.results_path)


def specs_of(tmp_path, *args):
    from bench_contract.spec import JobSpec

    proc, _ = logged_dry_run(tmp_path, "--trials", "auto", *args)
    assert proc.returncode == 0, proc.stderr
    files = {fw: next((tmp_path / "results").glob(f"*/specs/{fw}.jsonl")) for fw in ("jax", "torch")}
    lines = {fw: [JobSpec.read(path, i) for i in range(len(path.read_text().splitlines()))]
             for fw, path in files.items()}
    return files, lines


def test_the_rule_reads_the_first_stage_says_how_many_trials_and_marks_the_rest(tmp_path):
    files, lines = specs_of(tmp_path, "--target-interval", "10%", "--max-trials", "9")
    most = 9
    assert {s.trials for s in lines["jax"]} == {most} and {s.target_interval for s in lines["jax"]} == {0.1}
    first = [0.09, -0.07, 0.11, -0.02, -0.08]  # log speed-ups of pair 1's first stage: (t s / log 1.1)^2 = 6.7
    for trial, noise in enumerate(first):
        write_trial_result(lines["jax"][most + trial], 2000.0 * math.exp(noise))
        write_trial_result(lines["torch"][most + trial], 2000.0)
    stale = not_needed_path(lines["jax"][most + 6].results_path)
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text('{"trials": 6, "why": "an earlier run"}\n')
    needed, why = decide(str(files["jax"]), str(files["torch"]), 1)
    spread = float(np.std(first, ddof=1))
    assert needed == math.ceil((T_FIRST_STAGE * spread / math.log(1.1)) ** 2) == 7
    assert f"{spread:.4f}" in why
    marked = [t for t in range(most) if not_needed_path(lines["jax"][most + t].results_path).exists()]
    assert marked == [7, 8] and all(not_needed_path(lines["torch"][most + t].results_path).exists() for t in (7, 8))
    # Pair 0 never ran: its first stage is incomplete, so every trial runs and none is marked.
    needed, why = decide(str(files["jax"]), str(files["torch"]), 0)
    assert needed == most and "incomplete" in why
    assert not any(not_needed_path(s.results_path).exists() for s in lines["jax"][:most])


def test_the_job_s_time_limit_caps_the_trials_at_the_first_stage_s_pace(tmp_path):
    """The time budget of --trials auto: 5 trials in 100 s (20 s each) with 95 s left hold 4 more, less one in
    reserve; the rule's own count stands where the time holds it, and the first stage is never undone."""
    assert trials_in_time(100, 95) == FIRST_STAGE + 3
    assert trials_in_time(100, 10) == trials_in_time(100, -5) == FIRST_STAGE
    files, lines = specs_of(tmp_path, "--target-interval", "10%", "--max-trials", "9")
    for trial, noise in enumerate([0.09, -0.07, 0.11, -0.02, -0.08]):  # Stein's rule alone: 7 trials
        write_trial_result(lines["jax"][trial], 2000.0 * math.exp(noise))
        write_trial_result(lines["torch"][trial], 2000.0)
    assert decide(str(files["jax"]), str(files["torch"]), 0, (100, 1000))[0] == 7
    needed, why = decide(str(files["jax"]), str(files["torch"]), 0, (100, 45))
    assert needed == 6 and "time limit holds 6" in why
    assert [t for t in range(9) if not_needed_path(lines["jax"][t].results_path).exists()] == [6, 7, 8]
    # A first stage that ran past the job's time (a slow host) keeps it and says so, not "-3 s are left".
    needed, why = decide(str(files["jax"]), str(files["torch"]), 0, (183, -3))
    assert needed == FIRST_STAGE and why.endswith("the first stage took 183 s, 3 s past the time the job had for it")


def rule_env(env_dir, framework, log, answer: int) -> None:
    """A fake environment whose python logs each backend run's line, and answers the rule with `answer`."""
    bin_dir = env_dir / framework / "bin"
    fake_tools(bin_dir, python=f'{driver_passthrough()}'
                               f'if [ "$2" = bench_contract.sequential ]; then echo "rule $5 $6 $7" >> "{log}"; '
                               f'echo {answer}; exit 0; fi\necho "{framework} $4" >> "{log}"\n')
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')


@pytest.mark.parametrize("pair", [0, 1])
def test_the_paired_job_asks_the_rule_after_the_first_stage_and_runs_as_many_trials_as_it_says(tmp_path, pair):
    env_dir, log = tmp_path / "envs", tmp_path / "runs.log"
    for fw in ("jax", "torch"):
        rule_env(env_dir, fw, log, answer=6)
    proc, _ = logged_dry_run(tmp_path, "--trials", "auto", "--max-trials", "8")
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "scripts" / "paired_digits_1.sh"
    assert subprocess.run(["shellcheck", "-S", "warning", str(script)]).returncode == 0
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                         env={**os.environ, "SLURM_ARRAY_TASK_ID": str(pair)})
    assert run.returncode == 0, run.stderr
    lines = [pair * 8 + t for t in range(6)]  # the pair's lines in the specs files: 8 planned per pair
    # Each trial in its pair's order: JAX first in even trials, PyTorch first in odd ones.
    expected = [f"{fw} {line}" for t, line in enumerate(lines[:FIRST_STAGE]) for fw in pair_order(t)]
    logged = log.read_text().splitlines()
    rule = logged[2 * FIRST_STAGE].split()
    # The pair, then the first stage's seconds and the seconds left before the warning signal may come: 120 s
    # before the profile's 00:30:00, less the 60 s Slurm may send it early (bash's SECONDS: whole seconds since
    # the script started, a few here): together 1,620 s less the second or so the script took before its first trial.
    assert rule[:2] == ["rule", str(pair)] and 1800 - 180 - 5 <= int(rule[2]) + int(rule[3]) <= 1800 - 180
    expected += [" ".join(rule), *(f"{fw} {lines[5]}" for fw in pair_order(5))]
    assert logged == expected


def test_trials_the_rule_left_out_are_not_needed_not_missing(tmp_path):
    files, lines = specs_of(tmp_path, "--max-trials", "7")
    for fw in ("jax", "torch"):
        for pair in (0, 1):
            for trial in range(FIRST_STAGE):
                write_result(lines[fw][pair * 7 + trial].results_path, lines[fw][pair * 7 + trial].cell_id)
    for pair in (0, 1):
        assert decide(str(files["jax"]), str(files["torch"]), pair)[0] == FIRST_STAGE  # equal throughputs: no spread
    path = next((tmp_path / "results").glob("*/manifest.json"))
    data = read_manifest(tmp_path / "results")
    data.update(executor="local", submissions={"paired": {"failed": {}, "job_id": "local", "task_ids": [
        "local_0", "local_1"], "submitted_at": "2026-11-27T00:00:00+00:00"}})
    path.write_text(json.dumps(data))
    status = run_cli("status", "--all", "--results-dir", str(tmp_path / "results"))  # a line per trial
    assert status.returncode == 0, status.stdout + status.stderr
    # framework, index, cell, trial, task, state: the state's two words are the sixth and seventh.
    states = [line.split()[5:7] for line in status.stdout.splitlines() if line.startswith(("jax ", "torch "))]
    assert states.count(["not", "needed"]) == 8 and states.count(["completed", "result"]) == 20
    collect = run_cli("collect", "--results-dir", str(tmp_path / "results"))
    assert collect.returncode == 0 and "without a result" not in collect.stdout + collect.stderr


def sequential_rows(root, campaign: str, ratios: list[float], rule: str) -> None:
    """A paired campaign's runs of one cell, trial t with JAX at ratios[t] times PyTorch's throughput."""
    for trial, ratio in enumerate(ratios):
        for fw, throughput in (("jax", 1000.0 * ratio), ("torch", 1000.0)):
            ctx = result_context(framework=fw, benchmark="digits", use_case=1, model="mlp", batch_size=32,
                                 precision="fp32", device_model="CPU X", cell_id=f"{fw}-32", campaign=campaign,
                                 trial=trial, pair_order="jax,torch", trial_rule=rule)
            rows = ResultRows(ctx)
            rows.add("throughput", throughput, "samples/s")
            rows.write(root / campaign / "rows" / fw / f"{fw}-32-trial{trial}.parquet")


def comparison(root):
    import pandas as pd

    from orchestrator.results.compare import comparison_frame

    assert run_cli("collect", "--results-dir", str(root)).returncode == 0
    return comparison_frame(pd.read_parquet(root / "merged.parquet")).iloc[0]


def test_the_comparison_prints_steins_interval_for_pairs_of_one_sequential_campaign(tmp_path):
    ratios = [1.30, 1.25, 1.36, 1.31, 1.28, 1.33, 1.29]
    sequential_rows(tmp_path, "auto", ratios, Rule(FIRST_STAGE, 0.05).label())
    row = comparison(tmp_path)
    assert (row["speedup"], row["speedup_ci_low"], row["speedup_ci_high"]) == pytest.approx(
        stein_interval(list(np.log(ratios))), rel=1e-12)
    assert row["target_interval"] == 0.05
    # The same runs without the rule (a fixed number of paired trials) get the t interval of the pairs' log ratios,
    # about the same geometric mean.
    sequential_rows(tmp_path / "fixed", "fixed", ratios, "")
    row = comparison(tmp_path / "fixed")
    assert row["speedup"] == pytest.approx(np.exp(np.log(ratios).mean()), rel=1e-12)
    assert np.isnan(row["target_interval"])


@pytest.mark.parametrize("args, message", [
    (("--trials", "3", "--max-trials", "8"), "--max-trials goes with --trials auto, not --trials 3"),
    (("--trials", "3", "--target-interval", "5%"), "--target-interval goes with --trials auto"),
    (("--trials", "many"), "--trials takes a whole number or `auto`, got 'many'"),
    (("--trials", "auto", "--target-interval", "0%"), "--target-interval must be above 0% and below 100%"),
    (("--trials", "auto", "--target-interval", "1.5"), "--target-interval must be above 0% and below 100%"),
    (("--trials", "auto", "--target-interval", "five"), "--target-interval takes a percentage such as 5%"),
    (("--trials", "auto", "--max-trials", "4"), f"--max-trials must be from {FIRST_STAGE}"),
    (("--trials", "auto", "--frameworks", "jax"), "--paired runs JAX and PyTorch alternately"),
])
def test_bad_trial_options_are_one_sentence_and_plan_nothing(tmp_path, args, message):
    proc, _ = logged_dry_run(tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "scripts").exists()


def test_auto_plans_paired_trials_up_to_the_most_and_says_so_in_the_script(tmp_path):
    proc, _ = logged_dry_run(tmp_path, "--trials", "auto", "--target-interval", "0.1")
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "scripts" / "paired_digits_1.sh").read_text()
    assert "up to 20 trial(s)" in script and "interval within 10%, at most 20" in script
    cells = read_manifest(tmp_path / "results")["cells"]
    assert len(cells) == 2 * 2 * 20  # 2 batch sizes x 2 frameworks x the most trials


def test_the_methods_paragraph_says_how_trials_auto_chose_the_trials(tmp_path):
    import pandas as pd

    from orchestrator.results.methods import sequential_words

    assert sequential_words(pd.DataFrame({"target_interval": [np.nan]})) == ""
    said = sequential_words(pd.DataFrame({"target_interval": [0.05, np.nan, 0.1]}))
    assert "target 10% and 5%" in said and f"ran {FIRST_STAGE} trials" in said and "Stein" in said


def test_a_target_below_one_percent_is_written_as_it_was_asked():
    """A 0.1% target printed as "0%" (the format the log and the verdict used) reads as no target at all."""
    from bench_contract.sequential import percent

    assert [percent(t) for t in (0.001, 0.05, 0.6, 0.025)] == ["0.1%", "5%", "60%", "2.5%"]
