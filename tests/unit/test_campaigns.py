"""Campaigns: `campaigns` lists them, dry runs are marked and left out of status by default, and collect,
report and status take --campaign."""

import json
import os

import pandas as pd
from helpers import fake_queue, run_cli, task_file, write_manifest


def submitted_campaign(results, name="digits-uc1-20260101T000000-abcd"):
    """A campaign submitted to Slurm (jobs 70 and 71, two cells each), as the default command leaves it."""
    folder = results / name
    cells = [{"framework": fw, "array_index": i, "cell_id": f"{fw}-{i}", "results": str(folder / f"{fw}-{i}.parquet")}
             for fw in ("jax", "torch") for i in range(2)]
    write_manifest(folder, cells, executor="slurm", submissions={"jax": {"job_id": "70", "task_ids": ["70_0", "70_1"]},
                                                                 "torch": {"job_id": "71", "task_ids": ["71_0", "71_1"]}})
    os.utime(folder / "manifest.json", (1, 1))  # older than any dry run planned by the test
    return name


def planned_campaign(tmp_path, results, use_case="3"):
    proc = run_cli("--benchmark", "digits", "--use-case", use_case, "--dry-run", "--results-dir", str(results),
                   "--scripts-dir", str(tmp_path / "scripts"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(max(results.glob("*/manifest.json"), key=os.path.getmtime).read_text())["campaign"]


def queue_env(tmp_path):
    """squeue says every task of jobs 70 and 71 is pending; sacct knows nothing more."""
    return fake_queue(tmp_path, squeue=[f"{j}_{i} PENDING" for j in (70, 71) for i in range(2)])[0]


def test_status_takes_the_newest_submitted_campaign_not_a_newer_dry_run(tmp_path):
    results = tmp_path / "results"
    submitted = submitted_campaign(results)
    planned = planned_campaign(tmp_path, results)
    env = queue_env(tmp_path)
    proc = run_cli("status", "--results-dir", str(results), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"campaign {submitted}\n") and "4 pending" in proc.stdout
    named = run_cli("status", "--campaign", planned, "--results-dir", str(results), env=env)
    assert named.returncode == 0, named.stderr
    assert named.stdout.startswith(f"campaign {planned}\n") and "not submitted" in named.stdout


def test_only_dry_runs_is_one_sentence_that_names_the_newest(tmp_path):
    results = tmp_path / "results"
    planned = planned_campaign(tmp_path, results)
    proc = run_cli("status", "--results-dir", str(results))
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    # What follows names the folders nearby with submitted campaigns (tests/unit/test_suggested_commands.py).
    assert proc.stderr.startswith(f"error: no submitted campaign in {results}, only dry runs (the newest is "
                                  f"{planned}; `python main.py status --campaign {planned} --results-dir {results}` "
                                  "shows it); ")


def test_two_different_campaigns_named_are_refused(tmp_path):
    results = tmp_path / "results"
    submitted = submitted_campaign(results)
    planned = planned_campaign(tmp_path, results)
    proc = run_cli("status", submitted, "--campaign", planned, "--results-dir", str(results))
    assert proc.returncode == 2 and "two campaigns named" in proc.stderr
    unknown = run_cli("status", "--campaign", "nope", "--results-dir", str(results))
    assert unknown.returncode == 2 and f"no campaign 'nope' in {results}" in unknown.stderr
    assert planned in unknown.stderr  # the newest campaigns are named, to choose from


def test_campaigns_lists_each_campaign_and_marks_the_dry_runs(tmp_path):
    results = tmp_path / "results"
    submitted = submitted_campaign(results)
    planned = planned_campaign(tmp_path, results)
    env = queue_env(tmp_path)
    proc = run_cli("campaigns", "--results-dir", str(results), env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["campaign", "benchmark", "use", "case", "cells", "submitted", "state", "created",
                                "(UTC)"]
    row = next(line for line in lines if submitted in line).split()
    assert row[:6] == ["*", submitted, "digits", "1", "4", "submitted"] and "4 pending" in " ".join(row)
    assert planned not in proc.stdout and "1 dry run is left out; --dry-runs lists it too" in proc.stdout
    every = run_cli("campaigns", "--dry-runs", "--results-dir", str(results), env=env)
    dry = next(line for line in every.stdout.splitlines() if planned in line)
    # Benchmark and use case from the manifest; cells counted once per framework and cell; no queue asked.
    assert dry.split()[:5] == [planned, "digits", "3", "4", "dry"] and "nothing ran" in dry


def test_campaigns_of_a_missing_folder_is_bad_input(tmp_path):
    proc = run_cli("campaigns", "--results-dir", str(tmp_path / "none"))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1  # then the folders nearby with campaigns
    assert proc.stderr.startswith(f"error: results folder {tmp_path / 'none'} does not exist; ")


def two_campaigns(root):
    """camp1 (JAX 3x PyTorch on CPU X, with its manifest) and campB (on GPU Y), both collected from root."""
    task_file(root, "jax", 32, 3000.0, campaign="camp1")
    task_file(root, "torch", 32, 1000.0, campaign="camp1")
    cells = [{"framework": fw, "array_index": 0, "cell_id": f"{fw}-32",
              "results": str(root / "camp1" / "rows" / fw / f"{fw}-32.parquet")} for fw in ("jax", "torch")]
    write_manifest(root / "camp1", cells,
                   submissions={fw: {"job_id": "local", "task_ids": ["local_0"]} for fw in ("jax", "torch")})
    task_file(root / "b", "jax", 32, 2000.0, device="GPU Y", campaign="campB")
    task_file(root / "b", "torch", 32, 1000.0, device="GPU Y", campaign="campB")


def test_collect_with_a_campaign_shows_and_writes_that_campaigns_rows_only(tmp_path):
    two_campaigns(tmp_path)
    every = run_cli("collect", "--results-dir", str(tmp_path))
    assert every.returncode == 0, every.stderr
    assert "CPU X" in every.stdout and "GPU Y" in every.stdout
    one = run_cli("collect", "--campaign", "camp1", "--results-dir", str(tmp_path))
    assert one.returncode == 0, one.stderr
    assert "CPU X" in one.stdout and "3.00x" in one.stdout and "GPU Y" not in one.stdout
    rows = pd.read_parquet(tmp_path / "merged-camp1.parquet")
    assert set(rows.campaign) == {"camp1"} and set(rows.framework) == {"jax", "torch"}
    assert set(pd.read_parquet(tmp_path / "merged.parquet").campaign) == {"camp1", "campB"}  # all merged still


def test_report_with_a_campaign_reports_that_campaigns_rows_only(tmp_path):
    two_campaigns(tmp_path)
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    proc = run_cli("report", "--campaign", "camp1", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "report-camp1"
    table = pd.read_csv(next(folder.glob("*.csv")))
    assert "GPU Y" not in table.to_string() and "CPU X" in table.to_string()
    assert "campB" not in (folder / "report.html").read_text()


def test_collect_and_report_refuse_an_unknown_campaign_in_one_sentence(tmp_path):
    two_campaigns(tmp_path)
    for command in ("collect", "report"):
        proc = run_cli(command, "--campaign", "nope", "--results-dir", str(tmp_path))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: no campaign 'nope' in ") and len(proc.stderr.splitlines()) == 1
