"""doctor on the real setup: both environments import their framework, Slurm answers, accounting works."""

from helpers import REPO_ROOT, doctor_rows, run_cli


def test_doctor_passes_on_the_local_cluster(slurm_cluster):
    proc = run_cli("doctor", "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"), env=slurm_cluster.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = doctor_rows(proc.stdout)
    assert {name: status for name, (status, _) in rows.items()} == {
        name: "ok" for name in ("jax environment", "jax devices", "torch environment", "torch devices",
                                "Slurm commands", "Slurm controller", "profile partition", "Slurm accounting",
                                "digits data")}
    assert rows["Slurm controller"][1] == "partitions: debug, load"
    assert rows["jax environment"][1].startswith("jax 0.10.2")


def test_doctor_on_a_node_checks_the_devices_a_task_sees(slurm_cluster, tmp_path):
    """--on-node runs each framework's probe in a job step on the profile's partition. The local cluster's
    GPUs are fake, so a profile that asks for one fails there with the reason, never passes."""
    local = REPO_ROOT / "profiles" / "local_slurm.toml"
    proc = run_cli("doctor", "--on-node", "--profile", str(local), env=slurm_cluster.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = doctor_rows(proc.stdout)
    assert rows["jax devices"][0] == rows["torch devices"][0] == "ok"
    gpu_profile = tmp_path / "gpu.toml"
    gpu_profile.write_text(local.read_text().replace("gpus_per_task = 0", "gpus_per_task = 1")
                           + f'\njax_recipe = "cuda12"\nenv_dir = "{REPO_ROOT / ".envs"}"\n')
    proc = run_cli("doctor", "--on-node", "--profile", str(gpu_profile), env=slurm_cluster.env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = doctor_rows(proc.stdout)
    status, detail = rows["torch devices"]
    assert status == "FAIL" and "NVML finds no GPU there" in detail, detail
    # This machine's JAX environment is the CPU build: not the one a cuda12 profile's jobs need, said before any job.
    status, detail = rows["jax environment"]
    assert status == "FAIL" and "was built from requirements-cpu.lock, not from requirements-cuda12.lock" in detail
