"""Several systems (kinds of nodes) in one campaign, and the chained collect job, through the real CLI with
sbatch faked at the command line."""

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
from helpers import fake_slurm_site, profile_file, run_cli, write_manifest

from bench_contract.results import CONTEXT_NAMES, ResultRows
from bench_contract.run.runner import base_context
from bench_contract.spec import JobSpec
from orchestrator.plan.profile import expected_devices, load_profile
from orchestrator.results.compare import device_mismatch_lines, mismatch_lines, system_mismatches

TWO_SYSTEMS = """partition = "debug"
cpus_per_task = 1
default_system = "a100"
[systems.a100]
constraint = "a100"
expect = "A100"
[systems.h100]
partition = "gpu-h"
constraint = "h100"
time_limit = "00:05:00"
cpus_per_task = 4
mem = "16G"
expect = "H100"
"""


@pytest.fixture
def site(tmp_path):
    """A profile with two systems, environments whose interpreters exist, and sbatch numbering its jobs 4001, ..."""
    env, calls, profile = fake_slurm_site(tmp_path, {
        "scontrol": 'echo "MaxArraySize            = 1001"\n', "sacctmgr": "true\n",
        "sinfo": "printf 'debug\\ngpu-h\\n'\n",
    }, TWO_SYSTEMS, profile_name="site.toml")
    return profile, env, calls


def submit_digits(tmp_path, profile, *extra, env=None):
    return run_cli("--benchmark", "digits", "--use-case", "1", "--batch-sizes", "32", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), *extra, env=env)


def test_systems_expand_the_matrix_one_array_per_framework_per_system_each_with_its_own_values(site, tmp_path):
    profile, env, _ = site
    proc = submit_digits(tmp_path, profile, "--systems", "a100,h100", "--dry-run", env=env)
    assert proc.returncode == 0, proc.stderr
    scripts = {p.name: p.read_text() for p in (tmp_path / "s").iterdir()}
    assert sorted(scripts) == ["jax_digits_1_a100.sh", "jax_digits_1_h100.sh", "torch_digits_1_a100.sh",
                               "torch_digits_1_h100.sh"]
    h100 = scripts["torch_digits_1_h100.sh"]
    for line in ("--partition=gpu-h", "--constraint=h100", "--time=00:05:00", "--cpus-per-task=4", "--mem=16G"):
        assert f"#SBATCH {line}\n" in h100
    a100 = scripts["torch_digits_1_a100.sh"]
    assert "#SBATCH --partition=debug\n" in a100 and "#SBATCH --constraint=a100\n" in a100
    assert "#SBATCH --cpus-per-task=1\n" in a100 and "gpu-h" not in a100 and "--time=00:05:00" not in a100
    manifest = json.loads(next((tmp_path / "r").glob("*/manifest.json")).read_text())
    assert sorted(manifest["scripts"]) == ["jax.a100", "jax.h100", "torch.a100", "torch.h100"]
    specs = [JobSpec.from_json(line) for path in sorted(next((tmp_path / "r").glob("*/specs")).iterdir())
             for line in path.read_text().splitlines()]
    assert [s.system for s in specs] == ["a100", "h100", "a100", "h100"]
    # The same cell on two systems is two cells, and JAX is paired with PyTorch on the same system only.
    assert len({s.cell_id for s in specs}) == 4 and len({(s.pair_key, s.system) for s in specs}) == 2


def test_without_systems_the_default_system_is_used(site, tmp_path):
    profile, env, _ = site
    assert submit_digits(tmp_path, profile, "--dry-run", env=env).returncode == 0
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["jax_digits_1_a100.sh", "torch_digits_1_a100.sh"]


def test_typed_gres_names_the_gpu_type(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('jax_recipe = "cuda12"\n[systems.a100]\ngpu_type = "a100"\ngpus_per_task = 1\n')
    proc = submit_digits(tmp_path, path, "--systems", "a100", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --gres=gpu:a100:1\n" in (tmp_path / "s" / "jax_digits_1_a100.sh").read_text()


@pytest.mark.parametrize("toml, message", [
    ('[systems.a100]\nconstraint = "a100"\n', "--systems: v100 is not a system of profile 'p'; its systems: a100"),
    ('[systems.v100]\ntime_limit = "soon"\n', "p.toml: systems.v100.time_limit 'soon' is not a Slurm time"),
    ('[systems.v100]\ngpus_per_task = 2\n', "p.toml: systems.v100 does not fit the profile's other keys: "
                                            "gpus_per_task = 2 asks Slurm for GPUs, but jax_recipe = 'cpu'"),
    ('[systems.v100]\nconstrain = "v100"\n', "p.toml: unknown keys systems.v100.constrain; known keys of "
                                             "[systems.v100]: partition, constraint,"),
    ('[systems.v100]\nexpect = "V100("\n', "p.toml: systems.v100.expect 'V100(' is not a regular expression"),
    ('[systems.v100]\nconstraint = "v 100"\n', "p.toml: systems.v100.constraint 'v 100' may only hold"),
    ('[systems.V100]\nexpect = "V100"\n', "p.toml: [systems.V100]: a system's name may only hold lower-case"),
    ('default_system = "a100"\n[systems.v100]\n', "p.toml: default_system 'a100' is not a [systems.<name>] table"),
])
def test_an_unknown_or_invalid_system_is_refused_at_plan_time_and_nothing_is_written(tmp_path, toml, message):
    path = tmp_path / "p.toml"
    path.write_text(toml)
    proc = submit_digits(tmp_path, path, "--systems", "v100", "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


def test_every_row_names_its_system_and_a_device_the_system_does_not_expect_is_flagged(tmp_path):
    rows = []
    for system, device in (("a100", "NVIDIA A100-SXM4-80GB"), ("h100", "NVIDIA A100-SXM4-80GB")):
        spec = JobSpec(campaign="c", cell_id=f"jax-x-{system}", pair_key="x", framework="jax", benchmark="digits",
                       use_case=1, model="mlp", batch_size=32, precision="fp32", system=system)
        context = {name: None for name in CONTEXT_NAMES if name != "system"} | base_context(spec) | {
            "device_model": device, "slurm_nodelist": f"node-{system}"}
        result = ResultRows(context)
        assert result.context["system"] == system  # base_context takes it from the spec
        rows.append({**result.context, "trial": 0})
    profile = load_profile(profile_file(tmp_path, TWO_SYSTEMS))
    expected = {("c", name): pattern for name, pattern in expected_devices(asdict(profile)).items()}
    flagged = system_mismatches(pd.DataFrame(rows), expected)
    assert flagged[["system", "device_model", "slurm_nodelist", "cells"]].values.tolist() == [
        ["h100", "NVIDIA A100-SXM4-80GB", "node-h100", 1]]
    assert mismatch_lines(flagged) == [(
        "warning: system h100 expects a device matching 'H100', but 1 cell(s) of campaign c ran on "
        "'NVIDIA A100-SXM4-80GB' (node node-h100): the site may ignore its constraint")]


def test_collect_after_chains_a_collect_job_after_every_array(site, tmp_path):
    profile, env, calls = site
    proc = submit_digits(tmp_path, profile, "--systems", "a100,h100", "--collect-after", env=env)
    assert proc.returncode == 0, proc.stderr
    lines = calls.read_text().splitlines()
    assert len(lines) == 5  # four arrays, then the collect job
    manifest = json.loads(next((tmp_path / "r").glob("*/manifest.json")).read_text())
    job = manifest["collect_job"]
    assert job["job_id"] == "4005" and job["after"] == ["4001", "4002", "4003", "4004"]
    assert lines[-1] == f"--parsable --dependency=afterany:4001:4002:4003:4004 {job['script']}"
    script = Path(job["script"]).read_text()
    assert "#SBATCH --partition=debug\n" in script and "gres" not in script and "constraint" not in script
    campaign = manifest["campaign"]
    assert f"main.py collect --results-dir {tmp_path / 'r'} --campaign {campaign}\n" in script
    assert f"main.py report --results-dir {tmp_path / 'r'} --campaign {campaign} " in script
    assert "collect: submitted as job 4005, to start after jobs 4001, 4002, 4003, 4004" in proc.stdout
    # The collect job runs collect: the launch does not tell the user to run it too.
    assert "then run" not in proc.stdout and proc.stdout.strip().splitlines()[-1] == (
        f"submitted; follow with: python main.py watch --results-dir {tmp_path / 'r'}; the collect job writes the "
        "report")


def test_collect_after_with_the_local_executor_is_refused(site, tmp_path):
    profile, env, _ = site
    proc = submit_digits(tmp_path, profile, "--collect-after", "--executor", "local", env=env)
    assert proc.returncode == 2 and "--collect-after chains a Slurm job" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_collect_warns_of_rows_that_ran_on_a_device_their_system_does_not_expect(tmp_path):
    """collect reads each campaign's recorded profile: a system expecting an H100 whose rows came from another
    device is named, with the node, in one sentence; rows of a system that got what it expects are not."""
    import json

    from helpers import result_context

    from bench_contract.results import ResultRows
    from orchestrator.results.collect import merge

    for system, node in (("h100", "n2"), ("cpu", "n1")):
        ctx = result_context(framework="jax", benchmark="digits", use_case=1, model="mlp", batch_size=32,
                             precision="fp32", device_model="CPU X", campaign="c1", cell_id=f"jax-{system}",
                             system=system, slurm_nodelist=node)
        rows = ResultRows(ctx)
        rows.add("throughput", 100.0, "samples/s")
        rows.write(tmp_path / "c1" / "rows" / "jax" / f"jax-{system}.parquet")
    recorded = {"systems": {"h100": {"expect": "H100"}, "cpu": {"expect": "CPU"}}}
    write_manifest(tmp_path / "c1", [], profile=recorded)
    merged = merge(tmp_path, tmp_path / "merged.parquet").output
    assert device_mismatch_lines(merged, [tmp_path]) == [
        "warning: system h100 expects a device matching 'H100', but 1 cell(s) of campaign c1 ran on 'CPU X' "
        "(node n2): the site may ignore its constraint"]


def test_the_report_names_rows_that_ran_on_a_device_their_system_does_not_expect(tmp_path):
    from helpers import result_context

    from bench_contract.results import ResultRows
    from orchestrator.results.collect import merge
    from orchestrator.results.report import report_and_export

    for framework in ("jax", "torch"):
        ctx = result_context(framework=framework, benchmark="digits", use_case=1, model="mlp", batch_size=32,
                             precision="fp32", device_model="CPU X", campaign="c1", cell_id=f"{framework}-h100",
                             system="h100", slurm_nodelist="n2")
        rows = ResultRows(ctx)
        rows.add("throughput", 100.0, "samples/s")
        rows.write(tmp_path / "c1" / "rows" / framework / f"{framework}-h100.parquet")
    write_manifest(tmp_path / "c1", [], profile={"systems": {"h100": {"expect": "H100"}}})
    merge(tmp_path, tmp_path / "merged.parquet")
    said = []
    report_and_export(tmp_path, report=said.append)
    assert any(line.startswith("warning: system h100 expects a device matching 'H100'") for line in said)
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Devices the systems did not expect" in markdown and "2 cell(s) of campaign c1 ran on 'CPU X'" in markdown
