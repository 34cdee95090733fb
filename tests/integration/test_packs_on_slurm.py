"""Packed jobs on the real local Slurm cluster, stopped midway three ways: by scancel, by the time limit and by a
node set down. In each, the finished runs keep their results, the pack submitted again (`resubmit`, or the same
command) runs only the runs without a result, and Slurm's accounting of the steps agrees with the rows: one
completed step per row, none run twice. The first: a digits campaign with --paired --pack 2 (four pairs, two
packs), each run a job step of its own, one pack cancelled with scancel after its first run has ended."""

import json
import subprocess
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from faults import Campaign
from helpers import BRIEF_TIMING_ARGS, run_cli

BATCHES = ("16", "32", "64", "128")  # four pairs


def steps_of(jobs: list[str], env: dict) -> list[tuple[str, str, str]]:
    """(step id, step name, state) of every job step of these jobs, from sacct (batch and extern steps left out)."""
    out = subprocess.run(["sacct", "-j", ",".join(jobs), "-n", "-P", "-o", "JobID,JobName,State"], check=True,
                         capture_output=True, text=True, env=env).stdout
    rows = [line.split("|") for line in out.splitlines() if line.count("|") == 2]
    return [(step, name, state.split()[0]) for step, name, state in rows
            if "." in step and step.rsplit(".", 1)[1].isdigit()]


def test_a_pack_cancelled_midway_is_completed_by_resubmit_and_nothing_runs_twice(slurm_cluster, tmp_path):
    run = Campaign(tmp_path, slurm_cluster.env)
    launch = run_cli("--benchmark", "digits", "--use-case", "1", *BRIEF_TIMING_ARGS, "--batch-sizes", ",".join(BATCHES),
                     "--epochs", "1", "--warmup-steps", "2", "--paired", "--pack", "2", "--profile", str(run.profile),
                     "--results-dir", str(run.results), "--scripts-dir", str(run.scripts), env=run.env, timeout=900)
    assert launch.returncode == 0, launch.stdout + launch.stderr
    manifest = run.manifest
    assert manifest["scripts"]["paired"]["pack"] == 2 and manifest["scripts"]["paired"]["array_tasks"] == 2
    first_tasks = manifest["submissions"]["paired"]["task_ids"]
    assert len(first_tasks) == 2

    # Cancel pack 0 once its first run has ended (its record is written as each run ends) and before its last: each
    # of its four runs imports a framework and trains, many seconds on this machine.
    packs = run.folder / "packs"

    def pack0_records() -> list[dict]:
        return [json.loads(line) for path in packs.glob("pack0_*.jsonl") for line in path.read_text().splitlines()]

    run.wait_until(lambda: len(pack0_records()) >= 1, "pack 0's first run ended", timeout_s=600)
    subprocess.run(["scancel", first_tasks[0]], check=True, env=run.env)
    run.wait_until(lambda: all(run.slurm_state(task) == "" for task in first_tasks), "both packs ended",
                   timeout_s=900)
    ended = pack0_records()
    assert 1 <= len(ended) < 4, ended  # cancelled midway: some of its runs, not all

    # status: the finished runs of the cancelled pack are completed; the others are not (cancelled).
    status = run.cli("status", "--all")
    states = Counter(line.split()[4] for line in status.stdout.splitlines() if line.startswith(("jax ", "torch ")))
    with_result = [c for c in run.manifest["cells"] if c["array_index"] == 0 and
                   Path(c["results"]).exists()]
    assert 1 <= len(with_result) < 4
    assert states["completed"] == 4 + len(with_result), status.stdout
    assert states["completed"] < 8

    # resubmit: pack 0 alone; its new job runs only the runs that had no result.
    resubmit = run.cli("resubmit", "--wait")
    assert resubmit.returncode == 0, resubmit.stdout + resubmit.stderr
    assert "paired: 1 of 2 array tasks (indices 0)" in resubmit.stdout, resubmit.stdout
    manifest = run.manifest
    (resubmission,) = manifest["resubmissions"]
    assert resubmission["indices"] == [0]
    new_task = manifest["submissions"]["paired"]["task_ids"][0]
    assert new_task not in first_tasks and manifest["submissions"]["paired"]["task_ids"][1] == first_tasks[1]
    done = run.cli("status")
    assert "8 completed" in done.stdout, done.stdout

    # The rows: each run once.
    collect = run.cli("collect")
    assert collect.returncode == 0, collect.stdout + collect.stderr
    merged = pd.read_parquet(run.results / "merged.parquet")
    rows = merged[["framework", "cell_id", "trial"]].drop_duplicates()
    assert len(rows) == 8
    names = {f"{fw}:{cell}:t{trial}" for fw, cell, trial in rows.itertuples(index=False)}

    # Slurm's accounting of the steps: one completed step per row, none for a run twice; the resubmitted job has a
    # step for each run that had no result and none for those that had one.
    jobs = [*first_tasks, new_task]
    run.wait_until(lambda: len([s for s in steps_of(jobs, run.env) if s[2] == "COMPLETED"]) >= 8,
                   "the accounting of the steps", timeout_s=120)
    steps = steps_of(jobs, run.env)
    completed = Counter(name for _, name, state in steps if state == "COMPLETED")
    assert set(completed) == names and set(completed.values()) == {1}, steps
    resubmitted = {name for step, name, _ in steps if step.startswith(new_task + ".")}
    finished_first = {f"{r['framework']}:{r['cell_id']}:t{r['trial']}" for r in ended if r["exit"] == 0}
    assert resubmitted and not resubmitted & finished_first, (resubmitted, finished_first)
    assert len(steps) - len(completed) <= 1  # at most the one step scancel stopped


def test_a_pack_stopped_by_its_time_limit_keeps_its_finished_runs_and_the_same_command_completes_it(slurm_cluster,
                                                                                                   tmp_path):
    """Sixteen pairs in one pack under a one-minute limit, where its runs need more than two (each a framework's
    imports and a few seconds of digits, about 8 s a pair here when the machine is idle): Slurm stops the pack at its
    limit (it checks limits every 30 s or so, so between 60 and about 100 s), and the runs it
    finished keep their results. The same command with a longer --time plans the same campaign again and submits
    the pack, whose driver runs only the runs without a result: one completed step per row, none twice. No warning
    signal (a warning may come up to a minute early, as the pack starts): the limit itself stops the pack."""
    run = Campaign(tmp_path, slurm_cluster.env, profile_extra='warning_signal = "none"\n')
    sizes = ",".join(str(8 + 4 * i) for i in range(16))

    def launch(limit: str):
        return run_cli("--benchmark", "digits", "--use-case", "1", *BRIEF_TIMING_ARGS, "--batch-sizes", sizes,
                       "--epochs", "1", "--warmup-steps", "2", "--paired", "--pack", "16", "--time", limit, "--wait",
                       "--profile", str(run.profile), "--results-dir", str(run.results), "--scripts-dir",
                       str(run.scripts), env=run.env, timeout=900)

    first = launch("00:01:00")
    assert "Traceback" not in first.stderr, first.stderr
    (first_task,) = run.manifest["submissions"]["paired"]["task_ids"]
    # Stopped at its limit: it ran the whole minute and ended TIMEOUT, not FAILED. Either its driver saw its next step
    # refused as the job reached its end, started nothing more and waited for Slurm to end the job, or Slurm's signal
    # came while a step ran; the log names the time limit in both.
    run.wait_until(lambda: sacct_state(first_task, run.env)[0] not in ("", "PENDING", "RUNNING"),
                   "the pack's end in sacct", timeout_s=120)
    state, elapsed = sacct_state(first_task, run.env)
    assert state == "TIMEOUT" and elapsed >= 60, (state, elapsed)
    (log,) = run.results.glob("*/logs/paired_*.out")
    assert "pack stopped by the job's time limit" in log.read_text(), log.read_text()
    finished = [c for c in run.manifest["cells"] if Path(c["results"]).exists()]
    assert 1 <= len(finished) < 32, len(finished)  # stopped midway

    again = launch("00:10:00")
    assert again.returncode == 0, again.stdout + again.stderr
    (second_task,) = run.manifest["submissions"]["paired"]["task_ids"]
    assert second_task != first_task
    assert all(Path(c["results"]).exists() for c in run.manifest["cells"])
    jobs = [first_task, second_task]
    run.wait_until(lambda: len([s for s in steps_of(jobs, run.env) if s[2] == "COMPLETED"]) >= 32,
                   "the accounting of the steps", timeout_s=120)
    steps = steps_of(jobs, run.env)
    completed = Counter(name for _, name, state in steps if state == "COMPLETED")
    assert len(completed) == 32 and set(completed.values()) == {1}, steps
    rerun = {name for step, name, _ in steps if step.startswith(second_task + ".")}
    done_first = {f"{c['framework']}:{c['cell_id']}:t{c['trial']}" for c in finished}
    assert rerun and not rerun & done_first, (rerun, done_first)


def sacct_state(job: str, env: dict) -> tuple[str, int]:
    """The job's state and seconds elapsed in Slurm's accounting (the allocation's line); ("", 0) until slurmdbd
    has it."""
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "State,ElapsedRaw"], capture_output=True,
                         text=True, env=env).stdout.split()
    state, _, elapsed = out[0].partition("|") if out else ("", "", "0")
    return state.split()[0] if state else "", int(elapsed or 0)


@pytest.mark.serial  # a node taken down fails every other test's task on it
def test_a_pack_whose_node_fails_keeps_its_finished_runs_and_resubmit_runs_only_the_rest(slurm_cluster, tmp_path):
    """Four pairs in one pack; its node is set down once the pack's first run has ended (the job ends NODE_FAIL, not
    requeued: the profile's requeue is off). The runs it finished keep their results; `resubmit` submits the pack
    again and its driver runs only the rest: one completed step per row."""
    run = Campaign(tmp_path, slurm_cluster.env)
    launch = run_cli("--benchmark", "digits", "--use-case", "1", *BRIEF_TIMING_ARGS, "--batch-sizes", ",".join(BATCHES),
                     "--epochs", "1", "--warmup-steps", "2", "--paired", "--pack", "4", "--profile", str(run.profile),
                     "--results-dir", str(run.results), "--scripts-dir", str(run.scripts), env=run.env, timeout=900)
    assert launch.returncode == 0, launch.stdout + launch.stderr
    (task,) = run.manifest["submissions"]["paired"]["task_ids"]
    run.wait_until(lambda: list((run.folder / "packs").glob("pack0_*.jsonl")), "the pack's first run ended",
                   timeout_s=600)
    with run.node_set_down(task):
        assert run.watch().returncode == 1
    finished = [c for c in run.manifest["cells"] if Path(c["results"]).exists()]
    assert 1 <= len(finished) < 8, len(finished)

    resubmit = run.cli("resubmit", "--wait")
    assert resubmit.returncode == 0, resubmit.stdout + resubmit.stderr
    (new_task,) = run.manifest["submissions"]["paired"]["task_ids"]
    assert new_task != task and all(Path(c["results"]).exists() for c in run.manifest["cells"])
    jobs = [task, new_task]
    run.wait_until(lambda: len([s for s in steps_of(jobs, run.env) if s[2] == "COMPLETED"]) >= 8,
                   "the accounting of the steps", timeout_s=120)
    completed = Counter(name for _, name, state in steps_of(jobs, run.env) if state == "COMPLETED")
    assert len(completed) == 8 and set(completed.values()) == {1}, completed
    done_first = {f"{c['framework']}:{c['cell_id']}:t{c['trial']}" for c in finished}
    rerun = {name for step, name, _ in steps_of(jobs, run.env) if step.startswith(new_task + ".")}
    assert rerun and not rerun & done_first, (rerun, done_first)
