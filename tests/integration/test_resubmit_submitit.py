"""submitit on the real cluster: only the crashed cell is submitted again, and its result completes the campaign;
each array is named and recorded as sbatch's are, and one whose answer was lost is found in Slurm by its name
instead of being submitted twice. The tasks run the stand-in backend (tests/integration/standin_backend.py)."""

from __future__ import annotations

import shlex
import shutil
import subprocess

from faults import Campaign
from helpers import fake_tools

from bench.standin_backend import standin_env


def test_submitit_resubmits_only_the_missing_cell(slurm_cluster, tmp_path):
    broken = tmp_path / "broken.txt"
    broken.write_text("1\n")
    standin_env(tmp_path / "envs", broken)
    run = Campaign(tmp_path, slurm_cluster.env, f'env_dir = "{tmp_path / "envs"}"\n')
    proc = run.launch("--batch-sizes", "8,16,32", "--synthetic", "--executor", "submitit", "--wait")
    assert proc.returncode == 1 and "FAILED jax array task 1" in proc.stdout, proc.stdout + proc.stderr
    assert run.result(0).is_file() and run.result(2).is_file() and not run.result(1).exists()
    [array] = run.manifest["arrays"]
    assert array["state"] == "submitted" and array["job_name"] == f"jax:{run.folder.name}:0"
    assert slurm_job_name(run, array["job_id"]) == array["job_name"]
    assert "1 cells ended without a result" in run.status()
    broken.write_text("")
    merged = run.check_complete_after_resubmit()
    assert merged.cell_id.nunique() == 3
    (resubmission,) = run.manifest["resubmissions"]
    assert resubmission["indices"] == [1] and resubmission["executor"] == "submitit"
    rerun = run.manifest["arrays"][-1]
    assert rerun["state"] == "submitted" and rerun["job_name"] == f"jax:{run.folder.name}:1:rerun1"
    assert slurm_job_name(run, rerun["job_id"]) == rerun["job_name"]


def test_a_submitit_array_whose_answer_was_lost_is_found_by_its_name_and_not_run_twice(slurm_cluster, tmp_path):
    """Slurm accepts the array, and submitit never learns its id (sbatch's answer is lost: here a wrapper prints
    words without a job id). The array is recorded as unknown. The same command again finds it in Slurm by its job
    name; its tasks cannot get their work (submitit files it under the id it never learnt), so it is cancelled and
    its cells submitted once more; collect then has every cell exactly once."""
    standin_env(tmp_path / "envs")
    run = Campaign(tmp_path, slurm_cluster.env, f'env_dir = "{tmp_path / "envs"}"\n')
    args = ("--batch-sizes", "8,16,32", "--synthetic", "--executor", "submitit")
    real = shutil.which("sbatch", path=run.env["PATH"])
    lost = fake_tools(tmp_path / "lost", run.env, sbatch=f"{shlex.quote(real)} \"$@\" > /dev/null || exit $?\n"
                      "echo 'sbatch: error: slurm_receive_msg: Socket timed out on send/recv operation'\n")
    proc = run.launch(*args, env=lost)
    assert proc.returncode == 1 and "whether Slurm accepted it is unknown" in proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    [array] = run.manifest["arrays"]
    assert array["state"] == "unknown" and array["job_name"] == f"jax:{run.folder.name}:0"

    again = run.launch(*args, "--wait")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "whose submission was unknown is found as job" in again.stdout and "it was cancelled" in again.stdout
    orphan, resubmitted = run.manifest["arrays"]
    assert orphan["state"] == "cancelled" and slurm_job_name(run, orphan["job_id"]) == orphan["job_name"]
    assert resubmitted["state"] == "submitted" and resubmitted["job_name"] == f"jax:{run.folder.name}:0:rerun1"
    assert [r["indices"] for r in run.manifest["resubmissions"]] == [[0, 1, 2]]
    run.check_complete()
    assert slurm_state(run, orphan["job_id"]) == "CANCELLED"


def slurm_job_name(run: Campaign, job_id: str) -> str:
    """The name Slurm's accounting has for a job (of its first record: an array's tasks share it), once it has one.
    Not squeue's: once, under load, squeue named a job that had just ended "allocation" while sacct had its name."""
    def name() -> str:
        names = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobName"], capture_output=True,
                               text=True, env=run.env, check=False).stdout.strip()
        # Under load (a fresh clone's whole suite) sacct too once gave "allocation", Slurm's placeholder, for a
        # rerun whose name it had not yet recorded: a name still to come, not a name.
        return "" if names.splitlines()[:1] == ["allocation"] else names
    return run.wait_until(name, f"a sacct record of job {job_id}", 60).splitlines()[0].strip()


def slurm_state(run: Campaign, job_id: str) -> str:
    """sacct's state of a job (of its first record: an array that never started has one), once it has one."""
    def state() -> str:
        return subprocess.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"], capture_output=True, text=True,
                              env=run.env, check=False).stdout.strip()
    return run.wait_until(state, f"a sacct record of job {job_id}", 60).split()[0]
