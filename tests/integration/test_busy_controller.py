"""A campaign larger than the user's submit limit, on the real cluster: refused at plan time, in one sentence with
the numbers, never a traceback, and nothing submitted or half written.

The limit is a QOS made for this test alone (MaxSubmitJobsPerUser=2), asked for through the profile's
extra_sbatch (--qos=...), and deleted at the end. The local cluster does not enforce accounting limits
(AccountingStorageEnforce is off, as other engineers share it), so the orchestrator's own reading of the limit
(sacctmgr) is what is tested, as it would be before sbatch on a cluster that enforces it.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import REPO_ROOT, run_cli

LIMIT = 2


@pytest.fixture
def limited_qos(slurm_cluster):
    name = f"jt_submit_limit_{os.getpid()}"
    env = slurm_cluster.env

    def sacctmgr(*args):
        return subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True, env=env, timeout=60)

    made = sacctmgr("add", "qos", name, f"MaxSubmitJobsPerUser={LIMIT}")
    if made.returncode != 0:
        pytest.fail(f"sacctmgr could not add the QOS: {made.stderr or made.stdout}")
    try:
        yield name
    finally:
        sacctmgr("delete", "qos", name)


def test_a_campaign_over_a_per_user_submit_limit_is_refused_with_the_numbers(slurm_cluster, limited_qos, tmp_path):
    env_dir = tmp_path / "envs"
    for framework in ("jax", "torch"):
        (env_dir / framework / "bin").mkdir(parents=True)
        (env_dir / framework / "bin" / "activate").write_text("")
        (env_dir / framework / "bin" / "python").write_text("")  # submission checks that the interpreter exists
    profile = tmp_path / "limited.toml"
    base = (REPO_ROOT / "profiles" / "local_slurm.toml").read_text()
    profile.write_text(base + f'env_dir = "{env_dir}"\nextra_sbatch = ["--qos={limited_qos}", "--hold"]\n')
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "8,16", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"),
                   env=slurm_cluster.env, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: the campaign has 4 array tasks")
    assert f"MaxSubmitJobsPerUser of QOS {limited_qos} is {LIMIT}" in line
    assert not list((tmp_path / "r").glob("*/manifest.json")), "a refused campaign is not written"
    queued = subprocess.run(["squeue", "-h", "-t", "all", "-q", limited_qos, "-o", "%i"], capture_output=True,
                            text=True, env=slurm_cluster.env, timeout=60)
    assert queued.stdout.strip() == "", "nothing was submitted"
    # Within the limit, the same profile plans and submits (held, then cancelled).
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "8", "--frameworks", "jax",
                   "--profile", str(profile), "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"),
                   env=slurm_cluster.env, timeout=120)
    manifest = next((tmp_path / "r").glob("*/manifest.json"), None)
    record = json.loads(manifest.read_text()) if manifest else {}
    ids = [array["job_id"] for array in record.get("arrays", []) if array.get("job_id")]
    names = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids or ["0"]), "-o", "%j"], capture_output=True,
                           text=True, env=slurm_cluster.env, timeout=60).stdout.split()
    for job_id in ids:
        subprocess.run(["scancel", job_id], env=slurm_cluster.env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [array] = record["arrays"]
    assert array["state"] == "submitted" and array["job_name"] == f"jax:{record['campaign']}:0"
    assert names == [array["job_name"]], "Slurm knows the array by that name, so it can be found again"
