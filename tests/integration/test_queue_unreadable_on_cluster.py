"""Nothing run twice on the real cluster: while squeue fails, held tasks are "unknown", never finished, and
neither resubmit nor the same command again submits anything; once squeue answers they read as pending, and
released they complete the campaign, each cell once. The tasks run the stand-in backend."""

from __future__ import annotations

import subprocess

from faults import Campaign

from bench.standin_backend import standin_env
from helpers import fake_tools, run_cli

SQUEUE_DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"


def test_held_tasks_are_unknown_while_squeue_fails_and_nothing_is_submitted(slurm_cluster, tmp_path):
    standin_env(tmp_path / "envs")
    run = Campaign(tmp_path, slurm_cluster.env, f'env_dir = "{tmp_path / "envs"}"\nextra_sbatch = ["--hold"]\n')
    args = ("--batch-sizes", "16,32", "--synthetic")
    proc = run.launch(*args)
    assert proc.returncode == 0, proc.stderr
    job = run.manifest["submissions"]["jax"]["job_id"]
    try:
        # A squeue that fails, first on the orchestrator's PATH only.
        failing = tmp_path / "failing"
        broken = fake_tools(failing, run.env, squeue=f"echo '{SQUEUE_DOWN}' >&2\nexit 1\n")
        status = run_cli("status", "--results-dir", str(run.results), env=broken)
        assert status.returncode == 3, status.stderr  # unknown cells: the exit status says so
        assert status.stdout.count(f"unknown  squeue failed: exit status 1: {SQUEUE_DOWN}") == 2, status.stdout
        assert "0/2 ended" in status.stdout and "ended without a result" not in status.stdout
        resubmitted = run_cli("resubmit", "--results-dir", str(run.results), env=broken)
        again = run.launch(*args, env=broken)
        for refused in (resubmitted, again):
            assert refused.returncode == 1, refused.stdout + refused.stderr
            assert "nothing was submitted" in refused.stderr and f"squeue failed: exit status 1: {SQUEUE_DOWN}" \
                in refused.stderr
        assert "resubmissions" not in run.manifest

        # squeue answers again: the held tasks are pending (sacct has them as one record, JOB_[0-1]), nothing goes.
        assert "0/2 ended (2 pending)" in run.status()
        assert "nothing to submit" in run.cli("resubmit").stdout
        subprocess.run(["scontrol", "release", job], check=True, env=run.env)
        assert run.watch().returncode == 0
        run.check_complete()
        assert "resubmissions" not in run.manifest
    finally:
        subprocess.run(["scancel", job], env=run.env, capture_output=True)
