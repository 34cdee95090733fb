"""Both frameworks compute on the task's CPUs and no others: the real backends, each in its own environment,
bound by their entry points as Slurm's --cpus-per-task says, and what they record of it."""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest
from helpers import REPO_ROOT, env_python
from test_backends import FRAMEWORKS, make_spec

from bench_contract.results import read_task_table

USABLE = sorted(os.sched_getaffinity(0))


def task_env(cpus: int) -> dict[str, str]:
    """The environment of a Slurm task given `cpus` CPUs, without the CPU settings of the shell running the tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("OMP_NUM_THREADS",)}
    return {**env, "PYTHONPATH": str(REPO_ROOT), "SLURM_CPUS_PER_TASK": str(cpus)}


def run_task(framework: str, spec, tmp_path, cpus: int) -> pd.DataFrame:
    path = tmp_path / f"{framework}.json"
    path.write_text(spec.to_json())
    proc = subprocess.run([str(env_python(framework)), "-m", f"{framework}_backend.run", str(path)], check=False,
                          capture_output=True, text=True, timeout=600, env=task_env(cpus))
    assert proc.returncode == 0, proc.stderr
    return read_task_table(spec.results_path).to_pandas()


@pytest.mark.skipif(len(USABLE) < 2, reason="needs two CPUs the tests may use")
def test_both_frameworks_record_the_same_cpus_and_threads(tmp_path):
    rows = {fw: run_task(fw, make_spec(fw, tmp_path, epochs=1), tmp_path, cpus=2) for fw in FRAMEWORKS}
    recorded = {fw: df[["bound_cpus", "bound_cpu_list", "intra_op_threads"]].drop_duplicates().to_dict("records")
                for fw, df in rows.items()}
    expected = [{"bound_cpus": 2, "bound_cpu_list": f"{USABLE[0]}-{USABLE[1]}" if USABLE[1] == USABLE[0] + 1
                 else f"{USABLE[0]},{USABLE[1]}", "intra_op_threads": 2}]
    assert recorded == {"jax": expected, "torch": expected}
    for framework, df in rows.items():
        assert df.cpu_binding.iloc[0].startswith("SLURM_CPUS_PER_TASK=2 (Slurm's --cpus-per-task)"), framework
    assert "XLA" in rows["jax"].intra_op_threads_source.iloc[0]
    assert "torch.set_num_threads" in rows["torch"].intra_op_threads_source.iloc[0]
    # device_details reads the affinity after binding: the CPUs the framework could use.
    assert {json.loads(df.device_details.iloc[0])["cpu"]["usable_cpus"] for df in rows.values()} == {2}
    # The host allocator's thresholds, fixed alike by both backends (bench_contract.measure.allocator).
    allocators = {json.loads(df.device_details.iloc[0])["cpu"]["allocator"] for df in rows.values()}
    assert len(allocators) == 1 and "mmap threshold 32 MiB, trim threshold 2 GiB" in allocators.pop()


# Run in the framework's environment: the backend's entry point (which binds the process before it imports the
# framework), then a large matmul, timed in CPU time and wall time; then the CPUs any of the process's threads
# may run on (XLA's pool threads included). Unbound on two idle CPUs, JAX's ratio is about 1.9.
PROBE = """
import json, os, time
import {framework}_backend.run
{setup}
start, cpu = time.perf_counter(), time.process_time()
for _ in range(8):
    {matmul}
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
tasks = [int(t) for t in os.listdir("/proc/self/task")]
print(json.dumps({{"cpus": sorted({{c for t in tasks for c in os.sched_getaffinity(t)}}), "ratio": cpu / wall,
                  "threads": {threads}}}))
"""
PROBES = {
    "jax": {"setup": "import jax, jax.numpy as jnp\na = jnp.ones((2048, 2048))\nf = jax.jit(lambda x: x @ x @ x)\n"
                     "f(a).block_until_ready()",
            "matmul": "f(a).block_until_ready()", "threads": "len(os.listdir('/proc/self/task'))"},
    # PyTorch's backend sets its threads in prepare(), as a task does before it runs the cell.
    "torch": {"setup": "import torch\ntorch_backend.run.TorchBackend().prepare(torch_backend.run.JobSpec("
                       "campaign='c', cell_id='c', pair_key='c', framework='torch', benchmark='digits', use_case=1, "
                       "model='mlp', batch_size=1, precision='fp32', device='cpu'))\na = torch.ones((2048, 2048))",
              "matmul": "a @ a @ a", "threads": "torch.get_num_threads()"},
}


def bound_probe(framework: str, cpus: int) -> dict:
    code = PROBE.format(framework=framework, **PROBES[framework])
    proc = subprocess.run([str(env_python(framework)), "-c", code], check=False, capture_output=True, text=True,
                          timeout=300, env=task_env(cpus), cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(len(USABLE) < 2, reason="needs two CPUs the tests may use, to bind to fewer")
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_framework_bound_to_one_cpu_computes_on_one_cpu(framework):
    """JAX ignores OMP_NUM_THREADS, so the binding is what keeps XLA's pool on the task's CPUs: bound to one
    CPU by SLURM_CPUS_PER_TASK=1, no thread of the process may run elsewhere and the matmul's CPU time is at
    most its wall time (unbound on two idle CPUs: nearly twice)."""
    one = bound_probe(framework, 1)
    assert one["ratio"] <= 1.05, one
    assert one["cpus"] == USABLE[:1]
    if framework == "torch":
        assert one["threads"] == 1
    else:  # XLA sized its pool from the mask: fewer threads than when bound to two CPUs (jaxlib 0.10.2: 13 and 17)
        assert one["threads"] < bound_probe(framework, 2)["threads"]
