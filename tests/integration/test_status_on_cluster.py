"""status and watch against the real local cluster: a campaign with one cancelled task, watched to its end."""

import shlex
import shutil
import subprocess

from helpers import fake_tools, run_cli


def test_watch_a_campaign_with_a_cancelled_task(slurm_cluster, tmp_path):
    """A task cancelled while it runs: watch ends 1 and names it, status counts it as cancelled. The tasks run the
    stand-in backend behind a gate, so the cancel lands while the task runs, never after it finished: a real digits
    task trains in under a second, and scancel could come after its result (seen in a fresh-clone run)."""
    from faults import Campaign

    from bench.standin_backend import standin_env

    gate = tmp_path / "gate"
    standin_env(tmp_path / "envs", gate=gate)
    run = Campaign(tmp_path, slurm_cluster.env, f'env_dir = "{tmp_path / "envs"}"\n')
    proc = run.launch("--batch-sizes", "16,32", "--synthetic")
    assert proc.returncode == 0, proc.stderr
    # Cancel it while it runs: Slurm 22.05 keeps no accounting record of an array task cancelled while pending.
    cancelled = run.wait_running(1)
    subprocess.run(["scancel", cancelled], check=True, env=run.env)
    run.wait_until(lambda: run.slurm_state(cancelled) == "", f"task {cancelled} gone from the queue")
    gate.touch()

    early = run.cli("status")
    assert early.returncode == 0 and run.manifest["campaign"] in early.stdout

    watched = run.watch()
    assert watched.returncode == 1, watched.stdout + watched.stderr
    (cell,) = [c["cell_id"] for c in run.manifest["cells"] if c["array_index"] == 1]
    # The task died in the gate, before Python: no failure row, Slurm's state alone.
    assert watched.stderr.strip() == f"jax 1 ({cell}): cancelled: CANCELLED"
    assert "2/2 ended (1 cancelled, 1 completed)" in run.status()


def test_status_says_unknown_with_exit_3_and_watch_goes_on_until_the_queue_answers(slurm_cluster, tmp_path):
    """Nothing lost, nothing run twice: squeue fails (the controller restarting, say) for watch's first polls while
    real tasks are queued: status exits 3, watch neither ends on the unknown cells nor gives up, and ends 0 once
    every cell has completed; collect then has each cell once. The tasks run the stand-in backend."""
    from faults import Campaign

    from bench.standin_backend import standin_env

    gate = tmp_path / "gate"  # the tasks wait for it: none may finish before the queue has failed to answer
    standin_env(tmp_path / "envs", gate=gate)
    run = Campaign(tmp_path, slurm_cluster.env, f'env_dir = "{tmp_path / "envs"}"\n')
    proc = run.launch("--batch-sizes", "16,32", "--synthetic")
    assert proc.returncode == 0, proc.stderr
    real = shutil.which("squeue", path=run.env["PATH"])
    polls = tmp_path / "polls"
    env = fake_tools(tmp_path / "failing", run.env, squeue=(
        f'echo x >> "{polls}"\nif [ "$(wc -l < "{polls}")" -le 4 ]; then\n'
        '  echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1\nfi\n'
        f'touch "{gate}"\n'
        f'exec {shlex.quote(real)} "$@"\n'))

    status = run_cli("status", "--results-dir", str(run.results), env=env)
    assert status.returncode == 3, status.stdout + status.stderr
    assert "the queue could not be read (squeue failed: exit status 1" in status.stderr
    watched = run_cli("watch", "--interval", "1", "--results-dir", str(run.results), env=env, timeout=600)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "unknown" in watched.stdout and "2/2 ended (2 completed)" in watched.stdout
    assert sum("watch goes on polling" in line for line in watched.stderr.splitlines()) == 1
    run.check_complete()
