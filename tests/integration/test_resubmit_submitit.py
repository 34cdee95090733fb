"""resubmit through submitit on the real cluster: only the crashed cell is submitted again, and its result
completes the campaign. The tasks run the stand-in backend (tests/integration/standin_backend.py)."""

from __future__ import annotations

from faults import Campaign, standin_env


def test_submitit_resubmits_only_the_missing_cell(slurm_cluster, tmp_path):
    broken = tmp_path / "broken.txt"
    broken.write_text("1\n")
    standin_env(tmp_path / "envs", broken)
    run = Campaign(tmp_path, slurm_cluster.env, f'env_dir = "{tmp_path / "envs"}"\n')
    proc = run.launch("--batch-sizes", "8,16,32", "--synthetic", "--executor", "submitit", "--wait")
    assert proc.returncode == 1 and "FAILED jax array task 1" in proc.stdout, proc.stdout + proc.stderr
    assert run.result(0).is_file() and run.result(2).is_file() and not run.result(1).exists()
    assert "1 cells ended without a result" in run.status()
    broken.write_text("")
    merged = run.check_complete_after_resubmit()
    assert merged.cell_id.nunique() == 3
    (resubmission,) = run.manifest["resubmissions"]
    assert resubmission["indices"] == [1] and resubmission["executor"] == "submitit"
