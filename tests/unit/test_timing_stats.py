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
    with pytest.raises(ValueError, match="min_iterations must be at least 1"):
        StepTimer(lambda out: None, 0).measure(lambda: None, 0, 1.0)
