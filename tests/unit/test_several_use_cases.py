"""Several use cases in one command (`--use-case 3,5`, `-u 3 -u 5`), one campaign, like every other axis
of the matrix; each use case keeps the rules and the settings it has alone."""

import json

import pytest
from helpers import dry_run, run_cli


def planned_specs(tmp_path) -> dict[str, list[dict]]:
    """The one campaign's specs, by framework."""
    (campaign,) = (tmp_path / "r").iterdir()
    return {fw: [json.loads(line) for line in (campaign / "specs" / f"{fw}.jsonl").read_text().splitlines()]
            for fw in ("jax", "torch")}


@pytest.mark.parametrize("use_cases", [["--use-case", "3,5"], ["-u", "3", "-u", "5"]])
def test_several_use_cases_plan_one_campaign_with_the_cells_of_each(tmp_path, use_cases):
    proc = dry_run(tmp_path, "--benchmark", "digits", *use_cases)
    assert proc.returncode == 0, proc.stderr
    (campaign,) = (tmp_path / "r").iterdir()  # one campaign, named by both
    assert campaign.name.startswith("digits-uc3+5-")
    for framework, specs in planned_specs(tmp_path).items():
        by_case = {case: [s for s in specs if s["use_case"] == case] for case in (3, 5)}
        # each use case's own default batch sizes (use case 5: 1, 8, 32, 128), as it would plan alone
        assert sorted(s["batch_size"] for s in by_case[5]) == [1, 8, 32, 128], framework
        assert by_case[3] and {s["sampling"] for s in by_case[3]} == {"poisson"}  # DP-SGD's default, not 5's
        assert {s["sampling"] for s in by_case[5]} == {"shuffle"}
    header = (tmp_path / "s" / "jax_digits_3+5.sh").read_text().splitlines()[1]
    assert "use cases 3 (per-sample gradients" in header and " and 5 (inference" in header
    manifest = json.loads((campaign / "manifest.json").read_text())
    assert manifest["use_cases"] == [3, 5]
    listed = run_cli("campaigns", "--dry-runs", "--results-dir", str(tmp_path / "r"))
    assert " 3,5 " in listed.stdout, listed.stdout + listed.stderr


@pytest.mark.parametrize("value, sentence", [
    ("3,x", "error: use case 'x' is not a whole number; give use cases such as 3,5 (see `python main.py list`)"),
    ("3,9", "error: unknown use case 9; choose from: 1 (training on one GPU)"),
    ("3,,5", "error: '3,,5' has an empty item between its commas; remove the extra comma"),
])
def test_a_bad_use_case_in_a_list_is_one_sentence_and_exit_2(tmp_path, value, sentence):
    proc = dry_run(tmp_path, "--benchmark", "digits", "--use-case", value)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(sentence) and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


def test_each_use_case_keeps_its_own_rules(tmp_path):
    """A data-parallel use case warns for itself; one that runs one process refuses --nodes for itself."""
    warned = dry_run(tmp_path, "--benchmark", "digits", "--use-case", "2,4")
    assert warned.returncode == 0, warned.stderr
    for case, single in ((2, 1), (4, 3)):
        assert (f"warning: use case {case} is data parallel, but --nodes 1 --tasks-per-node 1 gives it one process"
                in warned.stderr and f"(or use case {single} for one device)" in warned.stderr)
    refused = run_cli("--benchmark", "digits", "--use-case", "2,1", "--nodes", "2", "--dry-run",
                      "--results-dir", str(tmp_path / "r2"), "--scripts-dir", str(tmp_path / "s2"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "error: use case 1 (training on one GPU) runs one process; --nodes" in refused.stderr
    assert not (tmp_path / "r2").exists()
