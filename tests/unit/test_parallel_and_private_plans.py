"""Planning use cases 2 to 4: run settings, refusals, sbatch directives and the srun launch; sbatch is faked."""

import json
import os
import subprocess

import numpy as np
import pytest
from helpers import dry_run, run_cli, settings, spec

from bench_contract.run.topology import Topology, topology_for
from bench_contract.spec import SpecError
from orchestrator.errors import UsageError
from orchestrator.plan import matrix, render
from orchestrator.plan.profile import ClusterProfile


@pytest.mark.parametrize("use_case", [1, 2, 3, 4])
def test_every_use_case_plans_for_the_mlp(use_case):
    for benchmark in ("digits", "mnist"):
        cells = matrix.expand(benchmark, use_case, [], ["mlp"], [32], [], settings())
        assert {c.use_case for c in cells} == {use_case}


@pytest.mark.parametrize("use_case, overrides, batch, message", [
    (1, dict(nodes=2), 32, "use case 1 (training on one GPU) runs one process"),
    (3, dict(tasks_per_node=2), 32, "--nodes and --tasks-per-node above 1 are for use cases 2 and 4"),
    (2, dict(nodes=2, tasks_per_node=2), 30, "batch size 30 does not split evenly over 4 processes"),
])
def test_impossible_layouts_are_refused(use_case, overrides, batch, message):
    with pytest.raises(UsageError) as info:
        matrix.expand("digits", use_case, [], [], [batch], [], settings(**overrides))
    assert message in str(info.value)


@pytest.mark.parametrize("overrides, message", [
    (dict(clip_norm=0.0), "--clip-norm must be positive"),
    (dict(noise_multiplier=-1.0), "--noise-multiplier cannot be negative"),
    (dict(nodes=0), "--nodes must be at least 1"),
    (dict(loop_batch_size=-1), "--loop-batch-size cannot be negative"),
])
def test_bad_dp_and_parallel_settings_are_refused(overrides, message):
    with pytest.raises(UsageError, match=message):
        settings(**overrides)


def test_dp_settings_change_the_cell_id():
    a = matrix.expand("digits", 3, ["jax"], [], [32], [], settings())[0]
    b = matrix.expand("digits", 3, ["jax"], [], [32], [], settings(noise_multiplier=0.5))[0]
    assert a.cell_id != b.cell_id


def test_the_spec_refuses_what_the_plan_refuses():
    with pytest.raises(SpecError, match="use case 1 runs on one device"):
        spec(use_case=1, nodes=2)
    with pytest.raises(SpecError, match="does not split evenly over 2 processes"):
        spec(use_case=2, batch_size=33, nodes=2)
    with pytest.raises(SpecError, match="--clip-norm must be positive"):
        spec(use_case=2, clip_norm=-1.0)
    assert spec(use_case=2, nodes=2, tasks_per_node=2).world_size == 4


def test_ranks_take_disjoint_shards_that_cover_the_global_batch_in_order():
    batch = np.arange(12)
    shards = [Topology(rank=r, world_size=3).shard(batch) for r in range(3)]
    assert np.array_equal(np.concatenate(shards), batch)
    with pytest.raises(ValueError, match="does not split evenly"):
        Topology(rank=0, world_size=5).shard(batch)


def test_topology_comes_from_slurm_and_must_match_the_spec():
    two = spec(use_case=2, nodes=2)
    assert topology_for(two, {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}) == Topology(1, 2, 0)
    assert not topology_for(two, {"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}).is_writer
    with pytest.raises(RuntimeError, match="start it with srun"):
        topology_for(two, {})
    with pytest.raises(RuntimeError, match="Slurm started 4 tasks"):
        topology_for(two, {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"})
    # One process needs no Slurm at all, even inside an allocation of several tasks.
    assert topology_for(spec(use_case=1), {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) == Topology()


def test_directives_follow_the_layout_of_the_cell(tmp_path):
    profile = ClusterProfile(gpus_per_task=1, cpus_per_task=4, jax_recipe="cuda12")
    one = render.sbatch_directives(profile, "j", 2, tmp_path)
    assert "--nodes=1" in one and "--ntasks=1" in one and "--gres=gpu:1" in one
    many = render.sbatch_directives(profile, "j", 2, tmp_path, nodes=2, tasks_per_node=4)
    assert "--nodes=2" in many and "--ntasks-per-node=4" in many and "--cpus-per-task=4" in many
    assert "--gres=gpu:4" in many  # --gres counts the GPUs of a node: one per task
    assert not any(d.startswith("--ntasks=") for d in many)
    cpu_only = render.sbatch_directives(ClusterProfile(gpus_per_task=0), "j", 1, tmp_path, nodes=2)
    assert not any(d.startswith("--gres") for d in cpu_only)


def test_a_two_node_cell_runs_its_backend_under_srun(tmp_path):
    proc = dry_run(tmp_path, "--benchmark", "digits", "--use-case", "4", "--nodes", "2", "--clip-norm", "0.5",
                   "--noise-multiplier", "0")
    assert proc.returncode == 0, proc.stderr
    jax_script = (tmp_path / "s" / "jax_digits_4.sh").read_text()
    torch_script = (tmp_path / "s" / "torch_digits_4.sh").read_text()
    for script, framework in ((jax_script, "jax"), (torch_script, "torch")):
        assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n" in script
        assert f'exec srun --kill-on-bad-exit=1 python -m {framework}_backend.run "$specs" "$index"' in script
    assert 'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"\nexport MASTER_ADDR' in torch_script
    assert "MASTER_ADDR" not in jax_script
    spec_file = next((tmp_path / "r").glob("*/specs/torch.jsonl"))
    written = json.loads(spec_file.read_text().splitlines()[0])
    assert (written["nodes"], written["tasks_per_node"], written["clip_norm"], written["noise_multiplier"]) == (2, 1, 0.5, 0.0)


def test_a_one_process_cell_has_no_srun(tmp_path):
    proc = dry_run(tmp_path, "--benchmark", "digits", "--use-case", "3")
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "s" / "jax_digits_3.sh").read_text()
    assert "srun" not in script and 'exec python -m jax_backend.run "$specs" "$index"' in script


@pytest.mark.parametrize("executor", ["local", "submitit"])
def test_executors_that_cannot_srun_refuse_several_processes(tmp_path, executor):
    proc = run_cli("--benchmark", "digits", "--use-case", "2", "--nodes", "2", "--executor", executor,
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"),
                   env={**os.environ, "PATH": os.environ["PATH"]})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: 2 processes per cell are started by srun inside an sbatch allocation; the {executor} executor "
        "cannot do that: use --executor slurm (or --dry-run to only write the scripts)"
    )
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("job_id", [1, 12_799, 19_150, 987_654])
def test_the_rendezvous_port_stays_below_linuxs_ephemeral_ports(tmp_path, job_id):
    """Job 19150's port was 39150, inside 32768-60999, where the kernel hands out other connections' own ports: a
    CI run's rendezvous found it taken (EADDRINUSE). The script's own line is run by bash here."""
    proc = dry_run(tmp_path, "--benchmark", "digits", "--use-case", "2", "--nodes", "2")
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in (tmp_path / "s" / "torch_digits_2.sh").read_text().splitlines()
                if line.startswith("export MASTER_PORT="))
    port = subprocess.run(["bash", "-c", f'{line}; echo "$MASTER_PORT"'], env={"SLURM_JOB_ID": str(job_id)},
                          capture_output=True, text=True, check=True).stdout.strip()
    assert 1024 < int(port) < 32768, port
