"""The vectorisation benchmark's bookkeeping: reading the probe's output, both speed-ups from the medians,
ours against the hand-written one with its verdict (no timing)."""

import json

import pytest

from bench.__main__ import SUITES
from bench.vectorization import parse_probe_output, rows_for
from bench.vectorization_probe import MARKER


def vectorization_stdout(**changes) -> str:
    data = {"framework": "torch", "model": "cnn", "benchmark": "cifar10", "batch_size": 128, "timed_steps": 3,
            "device": "cpu", "version": "0.0", "threads": 1, "ours_vectorized_ms": [100.0, 110.0, 90.0],
            "ours_loop_ms": [500.0, 600.0, 400.0], "loop_runs": [3, 3, 2], "hand_vectorized_ms": [100.0, 100.0, 100.0],
            "hand_loop_ms": [520.0, 530.0, 510.0], "textbook_ms": [200.0, 210.0, 190.0]}
    data.update(changes)
    earlier = {**data, "ours_loop_ms": [9.0, 9.0, 9.0]}
    return "chatter\n" + MARKER + json.dumps(earlier) + "\n" + MARKER + json.dumps(data) + "\n"


def test_the_speed_ups_come_from_the_medians_of_the_last_result_line():
    probe = parse_probe_output(vectorization_stdout())
    assert probe.ours_speedup == pytest.approx(5.0)  # 500 / 100
    assert probe.hand_speedup == pytest.approx(5.2)  # 520 / 100
    assert probe.textbook_speedup == pytest.approx(520 / 200)
    assert probe.difference_percent == pytest.approx((5.0 / 5.2 - 1) * 100)


@pytest.mark.parametrize("stdout", ["no result\n", vectorization_stdout(hand_loop_ms=[1.0]),
                                    vectorization_stdout(textbook_ms=[0.0, 1.0, 1.0]),
                                    vectorization_stdout(ours_vectorized_ms=[], ours_loop_ms=[], loop_runs=[],
                                                         hand_vectorized_ms=[], hand_loop_ms=[], textbook_ms=[])])
def test_unusable_probe_output_is_refused(stdout):
    with pytest.raises(ValueError):
        parse_probe_output(stdout)


def test_rows_show_both_versions_both_speed_ups_and_the_verdict_against_five_percent():
    rows = rows_for(parse_probe_output(vectorization_stdout()))
    assert [row.measured for row in rows[:3]] == ["100.0 / 500.0 ms", "100.0 / 520.0 ms", "5.00x / 5.20x"]
    assert (rows[3].measured, rows[3].verdict) == ("-3.85%", "met")
    far = rows_for(parse_probe_output(vectorization_stdout(hand_loop_ms=[600.0, 600.0, 600.0])))[3]
    assert (far.measured, far.verdict) == ("-16.67%", "missed by 11.67%")


def test_make_bench_runs_it():
    assert "vectorization" in SUITES
