"""Smoke test of the local Slurm cluster: array jobs, a two-node job with GPUs, and accounting.

These are the three things the benchmark orchestrator relies on. If this file fails, nothing that submits
to Slurm can be trusted; start with the logs under /var/tmp/jaxtorch-slurm/log.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import wait_until

if TYPE_CHECKING:  # conftest is not an importable module at run time; the annotation is for readers and mypy
    from conftest import SlurmCluster

JOB_TIMEOUT_S = 120  # a trivial job takes about 1 s here; generous for a loaded CI machine
# Counted from when the job last waited in the queue: other tests' jobs may hold both nodes for minutes (a fresh
# clone's run failed here with the 120 s counted from submission), and waiting behind them is no fault of this job.
# A job still pending after QUEUE_TIMEOUT_S fails all the same (a cluster that never starts it).
QUEUE_TIMEOUT_S = 900
SACCT_TIMEOUT_S = 30  # slurmctld hands finished jobs to slurmdbd asynchronously
COMMAND_TIMEOUT_S = 30
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}


def _run(cluster: SlurmCluster, *args: str) -> str:
    result = subprocess.run(
        list(args),
        capture_output=True,
        text=True,
        env=cluster.env,
        stdin=subprocess.DEVNULL,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
    return result.stdout


def _write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + body)
    path.chmod(0o755)
    return path


def _submit_and_wait(cluster: SlurmCluster, workdir: Path, *sbatch_args: str) -> str:
    """Submit with sbatch, wait until the job (all of an array) has left the queue, return the job id."""
    out = _run(cluster, "sbatch", "--parsable", "--time=5", f"--chdir={workdir}", *sbatch_args)
    job_id = out.strip().split(";")[0]  # --parsable prints "jobid" or "jobid;cluster"
    assert job_id.isdigit(), f"unexpected sbatch output: {out!r}"
    deadline, give_up = time.monotonic() + JOB_TIMEOUT_S, time.monotonic() + QUEUE_TIMEOUT_S
    while queue := _run(cluster, "squeue", "-h", "-j", job_id, "-o", "%i %T").strip():
        if "PENDING" in queue and time.monotonic() < give_up:
            deadline = time.monotonic() + JOB_TIMEOUT_S
        elif time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], env=cluster.env, timeout=COMMAND_TIMEOUT_S, check=False)
            queue = _run(cluster, "squeue", "-j", job_id)
            pytest.fail(f"job {job_id} still queued or running after {JOB_TIMEOUT_S} s (cancelled):\n{queue}")
        time.sleep(0.5)
    return job_id


def _sacct_states(cluster: SlurmCluster, job_id: str, expected: set[str]) -> dict[str, str]:
    """Map each JobID line of `sacct -j` to its state, once every id in `expected` has a final state.

    slurmctld sends records to slurmdbd asynchronously (an array first shows up as one record, then as its
    tasks), so a single early look can see too little.
    """
    said = [""]  # sacct's last answer, for the failure's message

    def final_states():
        said[0] = out = _run(cluster, "sacct", "-j", job_id, "-o", "JobID,State", "--parsable2", "-n")
        # A cancelled job's state reads "CANCELLED by 0": keep the first word.
        states = {jid: state.split()[0] for jid, state in (line.split("|", 1) for line in out.splitlines() if line)}
        return states if all(states.get(jid) in TERMINAL_STATES for jid in expected) else None

    try:
        return wait_until(final_states, seconds=SACCT_TIMEOUT_S, poll_s=0.5,
                          what=f"sacct having a final state for all of {sorted(expected)}")
    except AssertionError as late:
        raise AssertionError(f"{late}; sacct said:\n{said[0]}") from None


def test_array_job_runs_every_task(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = _write_script(tmp_path / "array.sh", 'echo "task=${SLURM_ARRAY_TASK_ID} node=${SLURMD_NODENAME}"\n')
    job_id = _submit_and_wait(
        slurm_cluster, tmp_path, "--array=0-3", "--job-name=smoke-array", f"--output={tmp_path}/%A_%a.out", str(script)
    )

    for task in range(4):
        out_file = tmp_path / f"{job_id}_{task}.out"
        assert out_file.exists(), f"array task {task} wrote no output; files: {sorted(p.name for p in tmp_path.iterdir())}"
        assert f"task={task} " in out_file.read_text()

    task_ids = {f"{job_id}_{task}" for task in range(4)}
    states = _sacct_states(slurm_cluster, job_id, task_ids)
    assert {jid: states[jid] for jid in task_ids} == dict.fromkeys(task_ids, "COMPLETED"), states


def test_two_node_job_with_gpus(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = _write_script(
        tmp_path / "two_nodes.sh",
        'srun bash -c \'echo "rank=${SLURM_PROCID} node=${SLURMD_NODENAME} gpus=${CUDA_VISIBLE_DEVICES:-none}"\'\n',
    )
    out_file = tmp_path / "two_nodes.out"
    job_id = _submit_and_wait(
        slurm_cluster,
        tmp_path,
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gres=gpu:1",
        "--job-name=smoke-two-nodes",
        f"--output={out_file}",
        str(script),
    )

    lines = sorted(line for line in out_file.read_text().splitlines() if line.startswith("rank="))
    ranks_nodes = {tuple(word.split("=", 1)[1] for word in line.split()[:2]) for line in lines}
    assert ranks_nodes == {("0", "n1"), ("1", "n2")}, out_file.read_text()
    # Slurm hands each task one of the fake GPUs.
    assert all("gpus=none" not in line for line in lines), lines

    states = _sacct_states(slurm_cluster, job_id, {job_id, f"{job_id}.0"})
    assert states.get(job_id) == "COMPLETED", states
    assert states.get(f"{job_id}.0") == "COMPLETED", states  # the srun step


def test_a_plan_without_a_profile_asks_this_clusters_slurm_for_its_gpus(slurm_cluster: SlurmCluster,
                                                                        tmp_path: Path) -> None:
    """The user's own example, without --profile, on a cluster whose nodes have GPUs (the fake GRES of
    scripts/local_slurm.sh): one GPU per task on the default partition that has them, and JAX's CUDA build
    (orchestrator.plan.discovery asks the real sinfo here; tests/unit/test_discovery.py fakes it)."""
    from helpers import run_cli

    from orchestrator.plan.discovery import GPU_RECIPE

    proc = run_cli("--benchmark", "cifar10", "--use-case", "3", "--synthetic", "--dry-run",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), env=slurm_cluster.env)
    assert proc.returncode == 0, proc.stderr
    assert "sinfo shows 2 GPU(s) per node in partition debug (the default partition)" in proc.stdout
    script = (tmp_path / "s" / "jax_cifar10_3.sh").read_text()
    assert "#SBATCH --gres=gpu:1" in script and "#SBATCH --partition=debug" in script
    assert f"(its {GPU_RECIPE} build)" in script
