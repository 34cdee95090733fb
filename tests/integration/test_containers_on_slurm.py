"""Containers on the real local cluster: a campaign of two use cases runs each framework's backend inside
its image, through a fake `apptainer` (tests/fake_container.py: it checks its arguments and the bound folders, then
runs the command here, since no container runtime can be installed on our machines), and the rows say which image."""

import pandas as pd
from fake_container import fake_apptainer
from helpers import BRIEF_TIMING_ARGS, REPO_ROOT, run_cli

def test_a_two_use_case_campaign_runs_inside_the_containers_and_its_rows_say_so(slurm_cluster, tmp_path):
    # Each image pulled once to a .sif, as the profile docs say (the fake runtime needs only the file to exist).
    IMAGES = {fw: str(tmp_path / f"{fw}.sif") for fw in ("jax", "torch")}
    for image in IMAGES.values():
        open(image, "w").close()
    log = tmp_path / "apptainer.log"
    fake_apptainer(tmp_path / "bin", log)
    profile = tmp_path / "containers.toml"
    # The images' python is this machine's framework environment: the fake runs the command on the host.
    profile.write_text((REPO_ROOT / "profiles" / "local_slurm.toml").read_text() + "".join(
        f'\n[envs.{fw}]\ncontainer = "{image}"\nruntime = "apptainer"\n'
        f'python = "{REPO_ROOT / ".envs" / fw / "bin" / "python"}"\n' for fw, image in IMAGES.items()))
    env = {**slurm_cluster.env, "PATH": f"{tmp_path / 'bin'}:{slurm_cluster.env['PATH']}"}
    results = tmp_path / "results"
    proc = run_cli("--benchmark", "digits", "--use-case", "1,5", "--batch-sizes", "32", "--epochs", "1",
                   "--warmup-steps", "2", *BRIEF_TIMING_ARGS, "--profile", str(profile), "--wait",
                   "--results-dir", str(results), "--scripts-dir", str(tmp_path / "scripts"), env=env, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    collect = run_cli("collect", "--results-dir", str(results), env=env)
    assert collect.returncode == 0, collect.stderr
    merged = pd.read_parquet(results / "merged.parquet", columns=["framework", "use_case", "environment_kind"])
    kinds = merged.groupby("framework")["environment_kind"].unique()
    empty = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # of the empty .sif files
    assert {fw: list(kinds[fw]) for fw in IMAGES} == {fw: [f"container: {image} ({empty})"]
                                                      for fw, image in IMAGES.items()}
    assert set(merged["use_case"]) == {1, 5}
    # Every backend run went through the runtime, with the campaign bound: 2 use cases x 2 frameworks.
    campaign = next(p for p in results.iterdir() if (p / "manifest.json").exists()).resolve()
    runs = [line.split() for line in log.read_text().splitlines() if "_backend.run" in line]
    assert sorted(run[0] for run in runs) == sorted([IMAGES["jax"]] * 2 + [IMAGES["torch"]] * 2)
    assert all(str(campaign) in run[1].split(",") for run in runs)
