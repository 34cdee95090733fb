"""The digits demo with site environments: a profile points both frameworks at interpreters outside its
env_dir (the project's own environments stand in for a site's conda envs), `envs` builds nothing, the local executor
runs use case 1 in them, and every row says which interpreter ran it and that it was not locked."""

import json

import pandas as pd
from helpers import env_python, run_cli


def test_the_digits_demo_runs_in_site_interpreters_outside_env_dir(tmp_path):
    pythons = {framework: env_python(framework) for framework in ("jax", "torch")}
    profile = tmp_path / "site.toml"
    profile.write_text(f"env_dir = {json.dumps(str(tmp_path / 'envs'))}\n" + "".join(
        f"[envs.{framework}]\npython = {json.dumps(str(python))}\nsetup_lines = [\"export SITE_{framework}=1\"]\n"
        for framework, python in pythons.items()))

    envs = run_cli("envs", "--profile", str(profile))
    assert envs.returncode == 0, envs.stderr
    assert envs.stdout.count("(not built, not locked)") == 2 and not (tmp_path / "envs").exists()

    results = tmp_path / "results"
    run = run_cli("--benchmark", "digits", "--use-case", "1", "--executor", "local", "--epochs", "1",
                  "--batch-sizes", "64", "--profile", str(profile), "--results-dir", str(results),
                  "--scripts-dir", str(tmp_path / "scripts"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    collect = run_cli("collect", "--results-dir", str(results))
    assert collect.returncode == 0, collect.stderr

    merged = pd.read_parquet(results / "merged.parquet")
    assert not (tmp_path / "envs").exists()  # nothing was built: the cells ran in the site interpreters
    kinds = merged.groupby("framework")["environment_kind"].unique()
    assert {framework: list(kind) for framework, kind in kinds.items()} == {
        framework: [f"site: {python}"] for framework, python in pythons.items()}
    assert set(merged.framework) == {"jax", "torch"} and (merged.metric == "throughput").any()
