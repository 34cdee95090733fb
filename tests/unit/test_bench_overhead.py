"""The harness-overhead benchmark's bookkeeping: reading the probe's output and the verdict (no timing)."""

import json

import pytest

from bench.harness_overhead import parse_probe_output, rows_for, verdict
from bench.overhead_probe import MARKER


def probe_stdout(**changes) -> str:
    data = {"framework": "jax", "model": "mlp", "variant": "full", "batch_size": 128, "timed_steps": 100,
            "device": "cpu", "version": "0.0", "harness_ms": [2.0, 3.0, 2.1], "bare_ms": [2.0, 2.0, 2.0]}
    data.update(changes)
    return "some library chatter\n" + MARKER + json.dumps({**data, "harness_ms": [9.0]}) + "\n" + MARKER + json.dumps(data) + "\n"


def test_the_last_result_line_is_read_and_medians_come_from_it():
    probe = parse_probe_output(probe_stdout())
    assert (probe.harness, probe.bare) == (2.1, 2.0)
    assert probe.overhead_percent == pytest.approx(5.0)
    assert probe.paired_percent == pytest.approx([0.0, 50.0, 5.0])


@pytest.mark.parametrize("stdout", ["no result here\n", probe_stdout(bare_ms=[2.0]), probe_stdout(bare_ms=[0.0, 1.0, 1.0])])
def test_unusable_probe_output_is_refused(stdout):
    with pytest.raises(ValueError):
        parse_probe_output(stdout)


@pytest.mark.parametrize("percent, expected", [(0.0, "met"), (2.0, "met"), (-1.9, "met"), (3.5, "missed by 1.50%"),
                                               (-4.0, "missed by 2.00%")])
def test_verdict_is_against_two_percent_either_way(percent, expected):
    assert verdict(percent) == expected


def test_rows_show_both_medians_and_the_ratio_with_its_verdict():
    step_row, ratio_row = rows_for(parse_probe_output(probe_stdout()))
    assert step_row.measured == "2.100 / 2.000 ms"
    assert (ratio_row.measured, ratio_row.verdict) == ("+5.00%", "missed by 3.00%")
