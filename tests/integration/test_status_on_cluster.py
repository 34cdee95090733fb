"""status and watch against the real local cluster: a campaign with one cancelled task, watched to its end."""

import json
import re
import shlex
import shutil
import subprocess
import time

from helpers import REPO_ROOT, run_cli


def wait_until_running(task_id, env, timeout_s=300):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-r", "-j", task_id, "-o", "%T"], capture_output=True, text=True,
                               env=env, check=False).stdout.strip()
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


def test_status_says_unknown_with_exit_3_and_watch_goes_on_until_the_queue_answers(slurm_cluster, tmp_path):
    """#22: squeue fails (the controller restarting, say) for watch's first polls while real tasks are queued:
    status exits 3, watch neither ends on the unknown cells nor gives up, and ends 0 once every cell has completed;
    collect then has each cell once. The tasks run the stand-in backend."""
    from faults import Campaign

    from bench.standin_backend import standin_env

    gate = tmp_path / "gate"  # the tasks wait for it: none may finish before the queue has failed to answer
    standin_env(tmp_path / "envs", gate=gate)
    run = Campaign(tmp_path, slurm_cluster.env, f'env_dir = "{tmp_path / "envs"}"\n')
    proc = run.launch("--batch-sizes", "16,32", "--synthetic")
    assert proc.returncode == 0, proc.stderr
    real = shutil.which("squeue", path=run.env["PATH"])
    failing = tmp_path / "failing"
    failing.mkdir()
    polls = tmp_path / "polls"
    (failing / "squeue").write_text(
        f'#!/bin/bash\necho x >> "{polls}"\nif [ "$(wc -l < "{polls}")" -le 4 ]; then\n'
        '  echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1\nfi\n'
        f'touch "{gate}"\n'
        f'exec {shlex.quote(real)} "$@"\n')
    (failing / "squeue").chmod(0o755)
    env = {**run.env, "PATH": f"{failing}:{run.env['PATH']}"}

    status = run_cli("status", "--results-dir", str(run.results), env=env)
    assert status.returncode == 3, status.stdout + status.stderr
    assert "the queue could not be read (squeue failed: exit status 1" in status.stderr
    watched = run_cli("watch", "--interval", "1", "--results-dir", str(run.results), env=env, timeout=600)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "unknown" in watched.stdout and "2/2 ended (2 completed)" in watched.stdout
    assert sum("watch goes on polling" in line for line in watched.stderr.splitlines()) == 1
    run.check_complete()
