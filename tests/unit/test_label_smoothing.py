"""--label-smoothing at plan time: the option reaches every training cell's spec, and a value outside [0, 1) is
refused by the real CLI in one sentence, exit 2, nothing written. What the backends compute with it:
tests/backends/test_label_smoothing_loss.py."""

import json

import pytest
from helpers import run_cli


@pytest.mark.parametrize("use_case", ["1", "3"])
def test_the_option_reaches_every_cells_spec(tmp_path, use_case):
    proc = run_cli("--benchmark", "digits", "--use-case", use_case, "--label-smoothing", "0.1", "--dry-run",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for path in (tmp_path / "r").rglob("*.jsonl") for line in path.read_text().splitlines()]
    assert {line["framework"] for line in lines} == {"jax", "torch"}
    assert all(line["label_smoothing"] == 0.1 for line in lines)


@pytest.mark.parametrize("value", ["-0.1", "1", "1.5", "nan"])
def test_a_value_outside_zero_to_one_is_refused_in_one_sentence(tmp_path, value):
    results, scripts = tmp_path / "r", tmp_path / "s"
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--label-smoothing", value,
                   "--results-dir", str(results), "--scripts-dir", str(scripts))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--label-smoothing must" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not results.exists() and not scripts.exists()
