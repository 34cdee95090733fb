"""The command line's waiting times: read from the environment at each use, a bad value refused in one sentence
before a command writes anything."""

import pytest
from helpers import fake_slurm_site, run_cli

from orchestrator.errors import UsageError
from orchestrator.run import waiting_times


def test_a_waiting_time_is_read_when_used_not_when_imported(monkeypatch):
    monkeypatch.delenv("ORCHESTRATOR_SBATCH_TIMEOUT_S", raising=False)
    assert waiting_times.sbatch_timeout_s() == 120.0
    monkeypatch.setenv("ORCHESTRATOR_SBATCH_TIMEOUT_S", "3")
    assert waiting_times.sbatch_timeout_s() == 3.0


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf"])
def test_a_waiting_time_that_is_no_positive_number_is_refused(monkeypatch, value):
    monkeypatch.setenv("ORCHESTRATOR_WATCH_UNREADABLE_S", value)
    with pytest.raises(UsageError, match=f"^ORCHESTRATOR_WATCH_UNREADABLE_S must be a positive number of seconds, "
                                         f"not '{value}'$"):
        waiting_times.watch_unreadable_s()


def test_a_launch_with_a_bad_waiting_time_stops_before_it_writes(tmp_path):
    env, _, profile = fake_slurm_site(tmp_path, {})
    results, scripts = tmp_path / "results", tmp_path / "scripts"
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--frameworks", "jax", "--profile", str(profile),
                   "--results-dir", str(results), "--scripts-dir", str(scripts),
                   env={**env, "ORCHESTRATOR_SBATCH_SLOW_S": "ten"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "error: ORCHESTRATOR_SBATCH_SLOW_S must be a positive number of seconds, not 'ten'\n"
    assert not results.exists() and not scripts.exists()
