"""status/watch: one sacct and one squeue call per poll for the whole campaign, states named for users."""

import json
import os

from helpers import run_cli


def campaign(tmp_path, with_results=()):
    folder = tmp_path / "results" / "camp-1"
    cells = []
    for framework in ("jax", "torch"):
        for index in range(3):
            result = folder / "rows" / framework / f"{framework}-{index}.parquet"
            if (framework, index) in with_results:
                result.parent.mkdir(parents=True, exist_ok=True)
                result.write_bytes(b"x")
            cells.append({"framework": framework, "array_index": index, "cell_id": f"{framework}-{index}",
                          "results": str(result)})
    manifest = {"campaign": "camp-1", "executor": "slurm", "cells": cells, "submissions": {
        "jax": {"job_id": "70", "task_ids": ["70_0", "70_1", "70_2"]},
        "torch": {"job_id": "71", "task_ids": ["71_0", "71_1", "71_2"]},
    }}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def fake_slurm(tmp_path, sacct_lines, squeue_lines):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for name, lines in (("sacct", sacct_lines), ("squeue", squeue_lines)):
        body = "".join(f"echo '{line}'\n" for line in lines)
        (bin_dir / name).write_text(f'#!/bin/bash\necho "{name} $*" >> "{log}"\n{body}')
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, log


def test_states_come_from_sacct_squeue_and_the_result_files(tmp_path):
    campaign(tmp_path, with_results={("jax", 0), ("torch", 0)})
    env, log = fake_slurm(
        tmp_path,
        sacct_lines=["70_0|COMPLETED", "70_1|TIMEOUT", "70_2|COMPLETED", "71_0|COMPLETED", "71_1|CANCELLED by 0",
                     "71_2|PENDING"],
        squeue_lines=["71_2 PENDING"],
    )
    proc = run_cli("status", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 0, proc.stderr
    states = {line.split()[2]: line.split()[4] for line in proc.stdout.splitlines() if line.startswith(("jax ", "torch "))}
    assert states == {"jax-0": "completed", "jax-1": "timed", "jax-2": "no", "torch-0": "completed",
                      "torch-1": "cancelled", "torch-2": "pending"}
    assert "timed out" in proc.stdout and "no result" in proc.stdout
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all("70,71" in call for call in calls)  # one call each, for the whole campaign


def test_watch_ends_when_nothing_is_active_and_names_what_did_not_complete(tmp_path):
    campaign(tmp_path, with_results={("jax", 0), ("jax", 1), ("jax", 2), ("torch", 0), ("torch", 1)})
    env, _ = fake_slurm(tmp_path, sacct_lines=["71_2|FAILED"], squeue_lines=[])
    proc = run_cli("watch", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 1
    assert "5/6 ended" not in proc.stdout and "6/6 ended" in proc.stdout
    assert proc.stderr.strip() == "torch 2 (torch-2): failed: FAILED"


def test_no_campaign_is_a_clear_error(tmp_path):
    proc = run_cli("status", "--results-dir", str(tmp_path))
    assert proc.returncode == 2 and "no campaign in" in proc.stderr
    proc = run_cli("status", "nope", "--results-dir", str(tmp_path))
    assert proc.returncode == 2 and "no campaign 'nope'" in proc.stderr


def test_a_task_slurm_killed_for_its_memory_is_reported_as_out_of_memory(tmp_path):
    from orchestrator.run.status import slurm_memory_kill

    # slurmstepd's own lines (Slurm 22.05): the polling kill (OverMemoryKill), as seen on the local cluster,
    # and the cgroup handler's.
    polled = tmp_path / "polled.out"
    polled.write_text("step 3\nslurmstepd-n1: error: StepId=7353.batch exceeded memory limit "
                      "(310718464 > 209715200), being killed\nslurmstepd-n1: error: Exceeded job memory limit\n"
                      "slurmstepd-n1: error: *** JOB 7353 ON n1 CANCELLED AT 2026-11-22T05:13:25 ***\n")
    assert slurm_memory_kill(str(polled)) == ("out of memory: Slurm killed the task, 296 MiB used against the "
                                              "200 MiB it asked for (the profile's mem)")
    cgroup = tmp_path / "cgroup.out"
    cgroup.write_text("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=12.batch. Some of your "
                      "processes may have been killed by the cgroup out-of-memory handler.\n")
    assert "cgroup out-of-memory handler" in slurm_memory_kill(str(cgroup))
    plain = tmp_path / "plain.out"
    plain.write_text("Traceback: the memory limit of this model was exceeded\n")  # not Slurm's words
    assert slurm_memory_kill(str(plain)) is None and slurm_memory_kill("") is None
