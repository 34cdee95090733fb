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
