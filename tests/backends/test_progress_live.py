"""A real cell shows its progress while it runs: the digits DP-SGD cell of the demo, in each backend."""

import json
import os
import subprocess
import time

import pytest
from helpers import BRIEF_TIMING, REPO_ROOT, env_python

from bench_contract.run.progress import INTERVAL_ENV, heartbeat_path
from bench_contract.spec import JobSpec


def read_live(command: list[str], env: dict[str, str]) -> tuple[list[tuple[float, str]], float, int]:
    """The lines of stdout, each with the moment it could be read; the moment the process ended; its exit code."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    lines = [(time.monotonic(), line.rstrip("\n")) for line in proc.stdout]
    code = proc.wait(timeout=600)
    return lines, time.monotonic(), code


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_a_dp_sgd_cell_logs_its_progress_as_it_runs_and_keeps_a_heartbeat(framework, tmp_path):
    results = tmp_path / "camp" / "rows" / framework / "cell.parquet"
    spec = JobSpec(campaign="camp", cell_id=f"{framework}-cell", pair_key="cell", framework=framework,
                   benchmark="digits", use_case=3, model="mlp", batch_size=32, precision="fp32", epochs=2,
                   warmup_steps=3, device="cpu", timed_steps=BRIEF_TIMING["timed_steps"], min_duration_s=1.0,
                   results_path=str(results),
                   init_weights_path=str(tmp_path / "init.npz"))
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), INTERVAL_ENV: "0.01"}
    lines, ended, code = read_live([str(env_python(framework)), "-m", f"{framework}_backend.run", str(path)], env)
    assert code == 0, lines[-5:]

    training = [(t, line) for t, line in lines if line.startswith("progress: training")]
    steps = [int(line.split(", step ")[1].split("/")[0]) for _, line in training if ", step " in line]
    # 1257 training digits: 39 steps of 32 per epoch, 78 in all.
    assert "step 0/78 (0%)" in training[0][1]
    assert steps[0] == 0 and steps[-1] == 78 and steps == sorted(steps) and len(set(steps)) >= 5, steps
    assert any("epoch 1 done in" in line and "validation accuracy" in line for _, line in training)
    assert any("loss" in line and "steps/s" in line and "ETA" in line for _, line in training)
    # Flushed as it ran: the first line could be read while the per-sample timing (2 x min_duration_s) was to come.
    assert ended - training[0][0] > 1.5
    assert any(line.startswith("progress: per-sample gradients") and "loop: median" in line for _, line in lines)

    beat = json.loads(heartbeat_path(results).read_text())
    assert heartbeat_path(results) == tmp_path / "camp" / "progress" / framework / "cell.json"
    assert (beat["cell_id"], beat["phase"], beat["interval_s"]) == (f"{framework}-cell", "per-sample gradients", 0.01)
    assert beat["detail"].startswith("vectorization speed-up ") and beat["detail"].endswith("x (loop over vectorised)")
