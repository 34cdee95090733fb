"""`make bench`'s check of the test suite's time: the record `make test` leaves, read on both sides of the budget of
the machine that ran it."""

import json
import time

import pytest

from bench import suite_budget


@pytest.fixture
def record_path(tmp_path, monkeypatch):
    path = tmp_path / "results" / "test-suite-time.json"
    monkeypatch.setattr(suite_budget, "RECORD", path)
    return path


AMD, INTEL = "AMD EPYC 7B13", "Intel(R) Xeon(R) CPU @ 2.20GHz"


def write_record(path, minutes, exit_code=0, cpu=AMD):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"minutes": minutes, "exit_code": exit_code, "finished_at": "2026-11-26T08:00:00+00:00",
                                "cpu": cpu}))


@pytest.mark.parametrize("cpu, minutes, verdict", [
    (INTEL, 29.9, "met"), (INTEL, 30.0, "met"), (INTEL, 31.5, "missed by 1.05x"),
    (AMD, 44.9, "met"), (AMD, 45.0, "met"), (AMD, 47.25, "missed by 1.05x"),
    ("ARM Neoverse-V2", 31.5, "missed by 1.05x"),  # an unknown machine: the tighter budget
])
def test_the_last_run_is_held_to_its_machines_budget(record_path, cpu, minutes, verdict):
    write_record(record_path, minutes, cpu=cpu)
    (row,) = suite_budget.measure(1)
    assert row.verdict == verdict and row.measured == f"{minutes:.1f} min"
    assert "passed" in row.note and cpu in row.note


def test_make_test_records_its_minutes_since_it_started(record_path, monkeypatch):
    monkeypatch.setattr(suite_budget, "cpu_model", lambda: AMD)
    entry = suite_budget.record(time.time() - 12 * 60, 0)
    assert json.loads(record_path.read_text()) == entry
    assert entry["minutes"] == pytest.approx(12, abs=0.05) and entry["exit_code"] == 0
    assert suite_budget.recorded_line(entry) == (f"make test: 12.0 min, setup included (budget 45 min on {AMD}; "
                                                 "`make bench` checks it)")


def test_a_failed_run_says_so_and_no_record_says_what_to_do(record_path):
    (row,) = suite_budget.measure(1)
    assert row.measured == "not measured" and "run it" in row.verdict
    suite_budget.record(time.time() - 60, 1)
    (row,) = suite_budget.measure(1)
    assert row.verdict == "met" and "failed (exit 1)" in row.note
