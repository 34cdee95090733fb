"""No loops: a command whose results folder holds no submitted campaign names the folders that do, and
every command a message suggests works as printed, with the --profile and --results-dir of the failing one."""

import json
import shlex

import pytest
import typer
from helpers import run_cli
from test_results_folders import local_campaign

from orchestrator.cli.app import app
from orchestrator.suggest import TAKES_PROFILE, TAKES_RESULTS_DIR


def dry_run_only(tmp_path):
    """results/ with one dry run (a campaign planned, nothing submitted); other/ with two campaigns that ran."""
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--dry-run", "--results-dir", "results",
                   "--scripts-dir", "scripts", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    local_campaign(tmp_path / "other", "digits-uc1-20261120T100000-aaaa", 1000.0)
    local_campaign(tmp_path / "other", "digits-uc1-20261121T100000-bbbb", 1000.0)


def suggested(text, command, after=""):
    """The command line that `text` suggests for `command` (the first after `after`), as printed: `python main.py
    COMMAND ...` up to the end of the sentence or line."""
    start = text.index(f"python main.py {command}", text.index(after))
    end = min(i for i in (text.find(";", start), text.find("\n", start), text.find("`", start), len(text)) if i >= 0)
    return shlex.split(text[start:end])[2:]


@pytest.mark.parametrize("command", ["status", "watch", "collect"])
def test_a_folder_without_a_submitted_campaign_names_the_folder_that_has_some_with_a_command_that_works(
        tmp_path, command):
    dry_run_only(tmp_path)
    proc = run_cli(command, "--results-dir", "results", cwd=tmp_path)
    said = proc.stderr
    assert "no submitted campaign in results, only dry runs" in said
    assert f"other holds 2 submitted campaigns: python main.py {command} --results-dir other" in said
    again = run_cli(*suggested(said, command, after="other holds"), cwd=tmp_path)  # pasted as printed, where it was printed
    assert again.returncode == 0, again.stderr
    if command == "collect":
        assert "merged 4 rows from 4 task files" in again.stdout
    else:
        assert "campaign digits-uc1-20261121T100000-bbbb" in again.stdout and "2 completed" in again.stdout


def test_report_of_a_folder_without_a_submitted_campaign_names_the_folder_that_has_some(tmp_path):
    dry_run_only(tmp_path)
    proc = run_cli("report", "--results-dir", "results", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: results/merged.parquet does not exist; run `python main.py collect "
                                  "--results-dir results` first; no submitted campaign in results, only dry runs; "
                                  "other holds 2 submitted campaigns: python main.py report --results-dir other")
    assert run_cli(*suggested(proc.stderr, "collect"), cwd=tmp_path).returncode == 0  # then report says "no rows"
    report = suggested(proc.stderr, "report", after="other holds")
    assert run_cli(*report, cwd=tmp_path).returncode == 1  # other is not collected yet: it says so
    assert run_cli("collect", "--results-dir", "other", cwd=tmp_path).returncode == 0
    assert run_cli(*report, cwd=tmp_path).returncode == 0


def test_the_missing_environment_names_envs_with_the_profile_it_was_given(tmp_path):
    (tmp_path / "site.toml").write_text(f'env_dir = "{tmp_path / "envs"}"\n')
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--executor", "local", "--profile", "site.toml",
                   "--results-dir", "results", cwd=tmp_path)
    assert proc.returncode == 2
    # Without --profile, envs built the default profile's environments, and the same error came back.
    assert proc.stderr.rstrip().endswith("create it with: python main.py envs --profile site.toml")
    fetch = run_cli("--benchmark", "mnist", "--use-case", "1", "--data-dir", "mnist", "--profile", "site.toml",
                    "--dry-run", "--results-dir", "results", "--scripts-dir", "scripts", cwd=tmp_path)
    assert "fetch it with: python main.py data fetch mnist --data-dir mnist --profile site.toml;" in fetch.stdout


def test_collect_names_the_resubmit_of_each_campaign_with_its_folder(tmp_path):
    folder = tmp_path / "elsewhere"
    local_campaign(folder, "c1", 10.0)
    manifest = json.loads((folder / "c1" / "manifest.json").read_text())
    (folder / "c1" / "rows" / "torch" / "torch-32.parquet").unlink()  # one cell without its result
    proc = run_cli("collect", "--results-dir", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert manifest["campaign"] in proc.stdout
    assert f"submit only those again with: python main.py resubmit c1 --results-dir {folder}" in proc.stdout


def test_the_options_a_suggestion_carries_are_the_ones_each_command_takes():
    group = typer.main.get_command(app)

    def commands(cmd, path=""):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from commands(sub, f"{path} {name}".strip())

    params = {path: {p.name for p in cmd.params} for path, cmd in commands(group)}
    assert {path for path, names in params.items() if "profile" in names} == TAKES_PROFILE
    assert {path for path, names in params.items() if "results_dir" in names} == TAKES_RESULTS_DIR
