"""The timing contract against known inputs: a sleep of known length, known step times, a fake compiler."""

import time

import numpy as np
import pytest

from bench_contract.measure.timing import CV_THRESHOLD, StepTimer, step_time_statistics


def stats(times_s, samples=1):
    return {metric: value for metric, value, _ in step_time_statistics(times_s, samples)}


def test_a_sleep_is_measured_at_its_known_length():
    timer = StepTimer(lambda out: None, warmup_steps=1)
    timer.measure(lambda: time.sleep(0.02), min_iterations=10, min_duration_s=0.0)
    s = stats(timer.times_s)
    # A sleep never ends early; on a busy machine it may end a few milliseconds late.
    assert 20.0 <= s["step_time_p50"] < 30.0
    assert s["timed_steps"] == 10 and timer.seen == 11


def test_timing_goes_on_until_both_the_count_and_the_duration_are_reached():
    by_count = StepTimer(lambda out: None, warmup_steps=2)
    by_count.measure(lambda: time.sleep(0.01), min_iterations=4, min_duration_s=0.0)
    assert len(by_count.times_s) == 4  # a short minimum duration: the count decides
    by_duration = StepTimer(lambda out: None, warmup_steps=2)
    by_duration.measure(lambda: time.sleep(0.01), min_iterations=4, min_duration_s=0.15)
    assert by_duration.timed_total_s >= 0.15 and len(by_duration.times_s) > 4
    # It stops at the first step that reaches the duration, not later.
    assert sum(by_duration.times_s[:-1]) < 0.15
    assert by_duration.seen == len(by_duration.times_s) + 2  # warm-up steps ran, untimed


def test_the_statistics_of_known_step_times():
    s = stats([0.001, 0.002, 0.003, 0.004], samples=10)
    assert s["throughput"] == pytest.approx(40 / 0.010)
    assert s["step_time_p50"] == pytest.approx(2.5) and s["step_time_mean"] == pytest.approx(2.5)
    assert s["step_time_std"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert s["step_time_cv"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2.5)
    assert s["spread_too_wide"] == 1.0  # CV 52%
    assert s["timed_steps"] == 4 and s["timed_duration"] == pytest.approx(0.010)
    steady = stats([0.002] * 9 + [0.0021])
    assert steady["step_time_cv"] < CV_THRESHOLD and steady["spread_too_wide"] == 0.0
    assert stats([0.003])["step_time_cv"] == 0.0  # one step has no spread to measure


def test_only_compilations_inside_timed_steps_are_counted():
    compiled = [0]

    def step(compiles: int):
        compiled[0] += compiles
        return None

    timer = StepTimer(lambda out: None, warmup_steps=1, compilations=lambda: compiled[0])
    timer.run(lambda: step(1))  # warm-up: compiling here is expected
    timer.run(lambda: step(0))
    compiled[0] += 5  # between steps (evaluation, moving a batch): not the timed region
    timer.run(lambda: step(2))  # a recompilation inside a timed step
    assert timer.recompilations == 2


def test_the_minimum_count_must_be_positive():
    with pytest.raises(ValueError, match="^min_iterations must be at least 1, got 0$"):
        StepTimer(lambda out: None, 0).measure(lambda: None, 0, 1.0)
    one = StepTimer(lambda out: None, 0)
    one.measure(lambda: None, 1, 0.0)  # one timed step is a valid minimum
    assert len(one.times_s) == 1


def test_timing_stops_as_soon_as_the_duration_is_reached(monkeypatch):
    """On a clock where every step takes exactly 0.25 s (a binary fraction: the sums are exact), a minimum of
    0.5 s is reached by two timed steps, and a third is not run."""
    from bench_contract.measure import timing

    now = [0.0]

    def step():
        now[0] += 0.25

    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    timer = StepTimer(lambda out: None, warmup_steps=1)
    timer.measure(step, min_iterations=1, min_duration_s=0.5)
    assert timer.times_s == [0.25, 0.25] and timer.timed_total_s == 0.5 and timer.seen == 3


def test_every_statistic_has_its_unit():
    units = {metric: unit for metric, _, unit in step_time_statistics([0.001, 0.002], samples_per_step=4)}
    assert units == {"throughput": "samples/s", "step_time_p50": "ms", "step_time_p90": "ms", "step_time_p95": "ms",
                     "step_time_p99": "ms", "step_time_mean": "ms", "step_time_std": "ms", "step_time_cv": "ratio",
                     "spread_too_wide": "flag", "timed_steps": "steps", "timed_duration": "s"}


def test_the_percentiles_of_known_step_times():
    s = stats([i / 1000 for i in range(1, 101)])  # 1 .. 100 ms
    assert s["step_time_p50"] == pytest.approx(50.5) and s["step_time_p90"] == pytest.approx(90.1)
    assert s["step_time_p95"] == pytest.approx(95.05) and s["step_time_p99"] == pytest.approx(99.01)
    assert s["step_time_mean"] == pytest.approx(50.5) and s["timed_duration"] == pytest.approx(5.05)


def test_a_spread_just_above_the_threshold_is_flagged_and_just_below_is_not():
    def times(cv):  # two steps whose coefficient of variation (std with ddof 1 over the mean) is cv
        half = cv / np.sqrt(2)
        return [1 - half, 1 + half]

    assert stats(times(CV_THRESHOLD * 1.01))["spread_too_wide"] == 1.0
    assert stats(times(CV_THRESHOLD * 0.99))["spread_too_wide"] == 0.0


def test_no_timed_step_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="^no timed steps: every step was a warm-up step; lower warmup_steps or "
                                         "train longer$"):
        step_time_statistics([], 1)


def test_the_repeat_settings_are_recorded_beside_the_measurement():
    from types import SimpleNamespace

    from helpers import rows_for_test

    from bench_contract.measure.timing import record_repeat_settings

    rows = rows_for_test()
    record_repeat_settings(SimpleNamespace(timed_steps=7, min_duration_s=0.5), rows)
    assert [(r["metric"], r["value"], r["unit"]) for r in rows.rows] == [("min_iterations", 7, "steps"),
                                                                          ("min_duration", 0.5, "s")]


def test_the_fastest_call_is_the_least_of_the_repeats_after_an_untimed_one(monkeypatch):
    """On a clock only the calls move (the machine's load must not decide the answer)."""
    from bench_contract.measure import timing

    now, durations, synced = [0.0], iter([0.05, 0.03, 0.01, 0.02]), []

    def call():  # the first call is not timed: its 0.05 never counts
        now[0] += next(durations)

    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    assert timing.fastest_call(call, synced.append, repeats=3) == pytest.approx(0.01)
    assert len(synced) == 4  # every call synchronised, the untimed one too
