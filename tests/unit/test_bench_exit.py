"""`python -m bench` exits 1 when a suite crashes or could not measure what it should have, and still prints the
other suites' rows; a row not measured for what the machine lacks (no cluster) does not fail it."""

import types

import pytest

import bench.__main__ as bench_main
from bench.timing import Result


def suites(monkeypatch, **rows_of):
    """SUITES replaced by stand-ins whose measure returns (or raises) what is given."""
    def module(outcome):
        def measure(repeats, quick=False):
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        return types.SimpleNamespace(measure=measure)

    monkeypatch.setattr(bench_main, "SUITES", {name: module(outcome) for name, outcome in rows_of.items()})


def test_a_crashed_suite_fails_the_run_and_the_others_still_print(monkeypatch, capsys):
    suites(monkeypatch, first=RuntimeError("collect failed: JSONDecodeError"), second=[Result("a step", "1.0 s")])
    assert bench_main.main(["--repeats", "1"]) == 1
    out, err = capsys.readouterr()
    assert "a step" in out and "crashed" in out and "RuntimeError: collect failed: JSONDecodeError" in out
    assert "1 row(s) failed: first suite" in err and "Traceback" in err


def test_a_failed_row_fails_the_run(monkeypatch, capsys):
    suites(monkeypatch, probe=[Result("a probe", "", "", "not measured: it exited 1", failed=True)])
    assert bench_main.main(["--repeats", "1"]) == 1


def test_rows_measured_or_not_measured_for_lack_of_a_cluster_pass(monkeypatch, capsys):
    suites(monkeypatch, here=[Result("a step", "1.0 s", "<= 2 s", "met")],
           cluster=[Result("submit", "not measured", "", "no sbatch on PATH")])
    assert bench_main.main(["--repeats", "1", "--quick"]) == 0
    assert "a quick run at the smallest sizes" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--only", "nonesuch"], ["--repeats", "0"]])
def test_bad_arguments_are_refused(args):
    with pytest.raises(SystemExit) as exit_:
        bench_main.main(args)
    assert exit_.value.code == 2
