"""status and resubmit of a pack (--pack): each cell's state inside a pack from its result file and Slurm's
accounting of the pack's steps (faked sacct and squeue), and what resubmit refuses."""

import json

from helpers import fake_queue, manifest_record, run_cli, status_states, write_result


def pack_campaign(tmp_path, with_results=()):
    """Two pairs in one pack (array task 0 of job 80), one trial each."""
    folder = tmp_path / "results" / "camp-1"
    cells = []
    for pair in range(2):
        for framework in ("jax", "torch"):
            result = folder / "rows" / framework / f"{framework}-{pair}.parquet"
            if (framework, pair) in with_results:
                write_result(result, f"{framework}-{pair}")
            cells.append({"framework": framework, "array_index": 0, "cell_id": f"{framework}-{pair}",
                          "results": str(result), "script": "paired", "pair_key": f"p{pair}"})
    record = manifest_record(folder, cells, executor="slurm",
                             submissions={"paired": {"job_id": "80", "task_ids": ["80_0"]}})
    record["scripts"]["paired"]["pack"] = 2
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(record))
    return folder


# sacct's steps of a running pack, as `sacct -j 80 -n -P -o JobID,JobName,State` prints them (the -X call reads
# the first line only).
STEPS = ["80_0|RUNNING", "80_0.batch|batch|RUNNING", "80_0.0|jax:jax-0:t0|COMPLETED",
         "80_0.1|torch:torch-0:t0|FAILED", "80_0.2|torch:torch-1:t0|RUNNING"]


def test_each_cell_of_a_running_pack_has_its_own_state(tmp_path):
    """Inside a running pack: a run with its result is completed; a run whose step runs is running; one not started
    is pending; one whose step ended without a result stays with its running pack (resubmit must not start the pack
    again beside itself)."""
    pack_campaign(tmp_path, with_results={("jax", 0)})
    env, log = fake_queue(tmp_path, sacct=STEPS, squeue=["80_0 RUNNING"])
    proc = run_cli("status", "--all", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 0, proc.stderr
    states = status_states(proc.stdout)
    assert states["jax-0"][0] == "completed"
    assert states["torch-1"] == ("running", "step 80_0.2 RUNNING in its pack")
    assert states["jax-1"] == ("pending", "its pack is RUNNING; this run has not started")
    assert states["torch-0"] == ("running", "step 80_0.1 FAILED without a result; its pack is RUNNING")
    calls = log.read_text().splitlines()
    assert sum(call.startswith("sacct") for call in calls) == 2  # the tasks, then the running pack's steps


def test_resubmit_of_a_running_pack_submits_nothing(tmp_path):
    pack_campaign(tmp_path, with_results={("jax", 0)})
    env, _ = fake_queue(tmp_path, sacct=STEPS, squeue=["80_0 RUNNING"])
    proc = run_cli("resubmit", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 0 and "nothing to submit" in proc.stdout, proc.stdout + proc.stderr


def test_rerun_completed_is_refused_for_a_pack_in_one_sentence(tmp_path):
    pack_campaign(tmp_path, with_results={("jax", 0)})
    env, _ = fake_queue(tmp_path, sacct=["80_0|CANCELLED by 0"], squeue=[])
    proc = run_cli("resubmit", "--rerun-completed", "--results-dir", str(tmp_path / "results"), env=env)
    assert proc.returncode == 2
    assert "runs in packs (--pack), which never run a cell with a result again" in proc.stderr
