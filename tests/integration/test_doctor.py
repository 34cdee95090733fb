"""doctor on the real setup: both environments import their framework, Slurm answers, accounting works."""

from helpers import REPO_ROOT, run_cli


def test_doctor_passes_on_the_local_cluster(slurm_cluster):
    proc = run_cli("doctor", "--profile", str(REPO_ROOT / "profiles" / "local_slurm.toml"), env=slurm_cluster.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in ("jax environment    ok", "torch environment  ok", "Slurm controller   ok    partitions: debug",
                 "profile partition  ok    debug", "Slurm accounting   ok", "digits data        ok"):
        assert line in proc.stdout
