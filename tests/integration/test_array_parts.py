"""An array larger than allowed goes to the real cluster in parts, and every cell still runs exactly once.

The shared cluster's MaxArraySize (1001) is not ours to change, so the profile's smaller cap (max_array_size,
which the orchestrator obeys like MaxArraySize) makes the parts. The framework environment is a stand-in whose
`python` only records the cell index it was given, so the jobs take about a second.
"""

from __future__ import annotations

import json
import shlex

import pytest
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, fake_tools, run_cli


def recording_env(env_dir, record):
    bin_dir = env_dir / "jax" / "bin"
    # Arguments: -m jax_backend.run SPECS INDEX; one short append per task is safe from several nodes at once.
    fake_tools(bin_dir, python=f'echo "$4" >> {shlex.quote(str(record))}\n')
    (bin_dir / "activate").write_text(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"\n')


@pytest.mark.parametrize("executor", ["slurm", "submitit"])
def test_parts_of_an_array_run_every_cell_once(slurm_cluster, tmp_path, executor):
    record = tmp_path / "ran.txt"
    recording_env(tmp_path / "envs", record)
    profile = tmp_path / "parts.toml"
    base = (REPO_ROOT / "profiles" / "local_slurm.toml").read_text()
    profile.write_text(base + f'env_dir = "{tmp_path / "envs"}"\nmax_array_size = 2\n')
    proc = run_cli("--benchmark", "digits", "--use-case", "1", *BRIEF_TIMING_ARGS, "--frameworks", "jax",
                   "--batch-sizes", "8,16,32,64,128",
                   "--profile", str(profile), "--executor", executor, "--wait", "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"), env=slurm_cluster.env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads(next((tmp_path / "r").glob("*/manifest.json")).read_text())
    arrays = manifest["submissions"]["jax"]["arrays"]
    assert [(a["offset"], a["count"]) for a in arrays] == [(0, 2), (2, 2), (4, 1)]
    assert len({a["job_id"] for a in arrays}) == 3
    assert sorted(int(line) for line in record.read_text().split()) == [0, 1, 2, 3, 4]
    assert manifest["submissions"]["jax"]["failed"] == {}
