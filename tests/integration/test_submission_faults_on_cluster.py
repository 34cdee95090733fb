"""Submission faults on the real local cluster: a real sbatch made slow (a wrapper that calls it, then holds its
answer back, or waits before calling it), a launch stopped while it works, and a queue made unreadable. Every
array is held (`--hold`), so no task runs; each test cancels its jobs at the end."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from faults import Campaign

from bench.standin_backend import standin_env
from helpers import REPO_ROOT, default_signals, fake_tools, run_cli, shell_wait_for, wait_until

ARGS = ("--batch-sizes", "16,32", "--synthetic")
SOCKET = "Socket timed out on send/recv operation"


def held_campaign(tmp_path: Path, env: dict) -> Campaign:
    standin_env(tmp_path / "envs")
    return Campaign(tmp_path, env, f'env_dir = "{tmp_path / "envs"}"\nextra_sbatch = ["--hold"]\n')


def wrapped(tmp_path: Path, env: dict, name: str, body: str) -> dict:
    """env with a wrapper `name` first on PATH; in `body`, $REAL is the real command."""
    real = shutil.which(name, path=env["PATH"])
    return fake_tools(tmp_path / f"wrapped-{name}", env, **{name: f"REAL={real}\n{body}\n"})


def launch_process(run: Campaign, env: dict) -> subprocess.Popen:
    """The launch command in its own session, so that a signal reaches it and not the sbatch it waits for."""
    return subprocess.Popen([sys.executable, str(REPO_ROOT / "main.py"), *run.launch_args(*ARGS)],
                            env=env, cwd=REPO_ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=default_signals)


def jobs_named(run: Campaign, name: str) -> list[str]:
    return subprocess.run(["squeue", "-h", "-t", "all", f"--name={name}", "-o", "%F"], capture_output=True,
                          text=True, env=run.env, check=True).stdout.split()


def cancel(run: Campaign, *procs: subprocess.Popen) -> None:
    for proc in procs:  # the wrappers still holding answers back
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if run.results.exists() and list(run.results.glob("*/manifest.json")):
        names = {a["job_name"] for a in run.manifest.get("arrays", [])}
        for name in names:
            subprocess.run(["scancel", f"--name={name}"], env=run.env, capture_output=True)


def test_a_launch_stopped_while_sbatch_works_leaves_unknown_and_the_rerun_finds_the_job(slurm_cluster, tmp_path):
    """A stopped launch: the real sbatch took the array, and its answer was held back when the launch was stopped."""
    run = held_campaign(tmp_path, slurm_cluster.env)
    answered = tmp_path / "answered"
    slow = wrapped(tmp_path, run.env, "sbatch", f'out=$("$REAL" "$@"); rc=$?\ntouch {answered}\nsleep 120\n'
                                                 'echo "$out"\nexit $rc')
    launch = launch_process(run, slow)
    try:
        wait_until(answered.exists, launch)
        launch.send_signal(signal.SIGTERM)
        _, err = launch.communicate(timeout=60)
        assert launch.returncode == 143 and err.strip().endswith("error: stopped by SIGTERM"), err
        [array] = run.manifest["arrays"]
        assert array["state"] == "unknown", array
        again = run.launch(*ARGS)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "the array at offset 0 whose submission was unknown is found as job" in again.stdout
        assert len(jobs_named(run, array["job_name"])) == 1  # submitted once
        assert len(run.manifest["arrays"]) == 1 and run.manifest["arrays"][0]["state"] == "submitted"
    finally:
        cancel(run, launch)


def test_an_unknown_array_is_not_submitted_again_while_the_queue_cannot_be_read(slurm_cluster, tmp_path):
    """A hung sbatch that in fact took the campaign's only array, then squeue and sacct failing."""
    run = held_campaign(tmp_path, slurm_cluster.env)
    hung = wrapped(tmp_path, run.env, "sbatch", '"$REAL" "$@" >/dev/null\nexec sleep 120')
    hung["ORCHESTRATOR_SBATCH_TIMEOUT_S"] = "3"
    try:
        first = run.launch(*ARGS, env=hung, timeout=120)
        assert first.returncode == 1 and "whether Slurm accepted it is unknown" in first.stderr, first.stderr
        [array] = run.manifest["arrays"]
        assert array["state"] == "unknown" and len(jobs_named(run, array["job_name"])) == 1
        broken = wrapped(tmp_path, run.env, "squeue", f"echo 'squeue: error: {SOCKET}' >&2\nexit 1")
        broken = wrapped(tmp_path, broken, "sacct", f"echo 'sacct: error: {SOCKET}' >&2\nexit 1")
        status = run_cli("status", "--results-dir", str(run.results), env=broken)
        assert status.returncode == 3 and "0/2 ended (2 unknown)" in status.stdout, status.stdout + status.stderr
        for refused in (run_cli("resubmit", "--results-dir", str(run.results), env=broken),
                        run.launch(*ARGS, env=broken)):
            assert refused.returncode == 1 and "nothing was submitted" in refused.stderr, refused.stderr
        assert len(jobs_named(run, array["job_name"])) == 1 and len(run.manifest["arrays"]) == 1
        again = run.launch(*ARGS)  # the queue answers again: the array is found, nothing submitted twice
        assert again.returncode == 0 and "is found as job" in again.stdout, again.stdout + again.stderr
        assert len(jobs_named(run, array["job_name"])) == 1 and "resubmissions" not in run.manifest
    finally:
        cancel(run)


def test_the_array_runs_its_campaigns_own_script_whatever_another_run_writes_meanwhile(slurm_cluster, tmp_path):
    """A script read late: sbatch reads it late; meanwhile a dry run of another campaign rewrites slurm_scripts/.
    Slurm keeps the script it was given (`scontrol write batch_script`): it is this campaign's own copy."""
    run = held_campaign(tmp_path, slurm_cluster.env)
    calling, go = tmp_path / "calling", tmp_path / "go"  # sbatch is held until the other run has written
    late = wrapped(tmp_path, run.env, "sbatch", f'touch {calling}\n{shell_wait_for(go)}exec "$REAL" "$@"')
    launch = launch_process(run, late)
    try:
        wait_until(calling.exists, launch)
        other = run_cli("--benchmark", "digits", "--use-case", "1", "--frameworks", "jax", "--batch-sizes", "64,128",
                        "--dry-run", "--profile", str(run.profile), "--results-dir", str(tmp_path / "other"),
                        "--scripts-dir", str(run.scripts), env=run.env)
        assert other.returncode == 0, other.stderr
        go.touch()
        out, err = launch.communicate(timeout=120)
        assert launch.returncode == 0, out + err
        info = run.manifest["scripts"]["jax"]
        job = run.manifest["submissions"]["jax"]["job_id"]
        kept = subprocess.run(["scontrol", "write", "batch_script", job, "-"], capture_output=True, text=True,
                              env=run.env, check=True).stdout
        assert kept == Path(info["campaign_copy"]).read_text()
        assert kept != Path(info["path"]).read_text()  # slurm_scripts/ holds the other campaign's script now
    finally:
        cancel(run, launch)
