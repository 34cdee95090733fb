"""Two systems in one campaign on the real local cluster, and the chained collect job.

The two nodes get different node features for the length of the test (n1 "fakea", n2 "fakeb": fake GPU models),
and the profile defines one system per feature by constraint. One command runs digits on both: every row names
its system and the node it ran on. System fakeb expects an A100, which this CPU is not, so status flags its
cells. --collect-after chains a collect job after the arrays: the merged results and the report appear without
the test running collect.
"""

import json
import re
import subprocess

import pandas as pd
import pytest
from helpers import BRIEF_TIMING_ARGS, run_cli, wait_until

from bench_contract.measure.device import cpu_model

FEATURES = {"n1": "fakea", "n2": "fakeb"}
COLLECT_WAIT_S = 300


pytestmark = pytest.mark.usefixtures("framework_envs")  # tests/conftest.py


def node_features(node: str, env: dict) -> tuple[str, str]:
    """A node's AvailableFeatures and ActiveFeatures as scontrol shows them ("" for none)."""
    text = subprocess.run(["scontrol", "show", "node", node], capture_output=True, text=True, env=env,
                          check=True).stdout
    found = [re.search(rf"{kind}Features=(\S*)", text).group(1) for kind in ("Available", "Active")]
    return tuple("" if value == "(null)" else value for value in found)


def set_features(node: str, available: str, active: str, env: dict) -> None:
    subprocess.run(["scontrol", "update", f"NodeName={node}", f"AvailableFeatures={available}",
                    f"ActiveFeatures={active}"], capture_output=True, text=True, env=env, check=True)


@pytest.fixture
def featured_nodes(slurm_cluster):
    """n1 and n2 with a feature each while the test runs; the features they had before, afterwards."""
    env = slurm_cluster.env
    before = {node: node_features(node, env) for node in FEATURES}
    try:
        for node, feature in FEATURES.items():
            set_features(node, feature, feature, env)
        yield env
    finally:
        for node, (available, active) in before.items():
            set_features(node, available, active, env)


def two_system_profile(path):
    path.write_text(
        'partition = "debug"\ntime_limit = "00:20:00"\ncpus_per_task = 1\n'
        # This machine's CPU, as the rows name it: fakea's cells match.
        f'[systems.fakea]\nconstraint = "fakea"\nexpect = {json.dumps(re.escape(cpu_model()))}\n'
        # Not an A100: fakeb's cells ran on a device other than the one the system expects, and are flagged.
        '[systems.fakeb]\nconstraint = "fakeb"\ntime_limit = "00:15:00"\nexpect = "A100"\n'
    )
    return path


def test_one_command_runs_a_campaign_on_two_systems_and_the_collect_job_merges_it(featured_nodes, tmp_path):
    env = featured_nodes
    results = tmp_path / "results"
    profile = two_system_profile(tmp_path / "two_systems.toml")
    proc = run_cli("--benchmark", "digits", "--use-case", "1", *BRIEF_TIMING_ARGS, "--epochs", "1",
                   "--batch-sizes", "32",
                   "--systems", "fakea,fakeb", "--profile", str(profile), "--collect-after", "--wait",
                   "--results-dir", str(results), "--scripts-dir", str(tmp_path / "scripts"), env=env, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = next(results.glob("*/manifest.json")).parent
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(manifest["scripts"]) == ["jax.fakea", "jax.fakeb", "torch.fakea", "torch.fakeb"]
    collect_job = manifest["collect_job"]
    array_ids = {a["job_id"] for a in manifest["arrays"]}
    assert set(collect_job["after"]) == array_ids and len(array_ids) == 4

    # No collect by the test: the chained job writes the merged results and the campaign's report.
    for written in (results / "merged.parquet", results / f"report-{folder.name}" / "report.md"):
        wait_until(written.exists, seconds=COLLECT_WAIT_S, what=f"{written} written", poll_s=2)
    merged = pd.read_parquet(results / "merged.parquet")
    placed = merged.groupby(["framework", "system"]).slurm_nodelist.unique()
    assert {key: list(nodes) for key, nodes in placed.items()} == {
        ("jax", "fakea"): ["n1"], ("torch", "fakea"): ["n1"], ("jax", "fakeb"): ["n2"], ("torch", "fakeb"): ["n2"]}

    status = run_cli("status", "--results-dir", str(results), env=env)
    flagged = [line for line in status.stdout.splitlines() if "not on system" in line]
    assert len(flagged) == 2 and all("fakeb" in line and "'A100'" in line for line in flagged), status.stdout
