"""status and watch against the real local cluster: a campaign with one cancelled task, watched to its end."""

import json
import re
import subprocess
import time

from helpers import REPO_ROOT, run_cli


def wait_until_running(task_id, env, timeout_s=300):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-r", "-j", task_id, "-o", "%T"], capture_output=True, text=True,
                               env=env).stdout.strip()
        if state == "RUNNING":
            return
        time.sleep(0.5)
    raise AssertionError(f"{task_id} did not start within {timeout_s} s")


def test_watch_a_campaign_with_a_cancelled_task(slurm_cluster, tmp_path):
    results = tmp_path / "results"
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--epochs", "2", "--batch-sizes", "16,32",
                   "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"),
                   "--results-dir", str(results), "--scripts-dir", str(tmp_path / "s"), env=slurm_cluster.env)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads(next(results.glob("*/manifest.json")).read_text())
    cancelled = manifest["submissions"]["torch"]["task_ids"][1]
    # Cancel it while it runs: Slurm 22.05 keeps no accounting record of an array task cancelled while pending.
    wait_until_running(cancelled, slurm_cluster.env)
    subprocess.run(["scancel", cancelled], check=True, env=slurm_cluster.env)

    early = run_cli("status", "--results-dir", str(results), env=slurm_cluster.env)
    assert early.returncode == 0 and manifest["campaign"] in early.stdout

    watched = run_cli("watch", "--interval", "1", "--results-dir", str(results), env=slurm_cluster.env, timeout=600)
    assert watched.returncode == 1
    # The task writes a failure row when SIGTERM reaches it after its handler is installed (bench_contract.run.runner).
    (line,) = watched.stderr.strip().splitlines()
    assert re.fullmatch(rf"torch 1 \({manifest['cells'][3]['cell_id']}\): cancelled: CANCELLED"
                        r"(: terminated by SIGTERM (at step \d+/\d+|while [a-z ]+))?", line), line
    final = run_cli("status", "--results-dir", str(results), env=slurm_cluster.env)
    assert "3/4 ended" not in final.stdout and "4/4 ended (1 cancelled, 3 completed)" in final.stdout
