"""Script values on the real local cluster: the real sbatch reads the #SBATCH lines of a campaign whose results folder
holds characters its parser reads (a quote, a #, a double quote and spaces). Before, values were quoted only when
they held a space: `o'brien` made sbatch fail fatally ("Unmatched `'`"), and `r#1` cut the log path at the #, so
that every task appended to one log outside the campaign."""

from __future__ import annotations

import pytest
from faults import Campaign

from bench.standin_backend import standin_env

ARGS = ("--batch-sizes", "16,32", "--synthetic", "--wait")


@pytest.mark.parametrize("folder", ["o'brien", "r#1", 'say "hi" there'], ids=["quote", "hash", "double-quotes"])
def test_each_tasks_log_lands_in_its_campaign_whatever_the_folder_holds(slurm_cluster, tmp_path, folder):
    standin_env(tmp_path / "envs")
    run = Campaign(tmp_path, slurm_cluster.env, f'env_dir = "{tmp_path / "envs"}"\n')
    run.results = tmp_path / folder / "results"
    launched = run.launch(*ARGS)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    job = run.manifest["submissions"]["jax"]["job_id"]
    logs = sorted(path.name for path in (run.folder / "logs").iterdir() if path.suffix == ".out")
    assert logs == [f"jax_digits_1_{job}_0.out", f"jax_digits_1_{job}_1.out"], logs
    assert not list(tmp_path.glob("*.out")) and not list((tmp_path / folder).glob("*.out"))  # no log cut short
